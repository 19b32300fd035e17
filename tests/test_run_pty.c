/* tests/test_run_pty.c: `celer run` driven through a pseudo-terminal, as a person
 * would: two turns on the default model (greedy), the second reusing the first
 * from the KV cache (/stats says so), Ctrl-C at the prompt and during an answer
 * leaving the chat alive, and /quit ending it with status 0. In a build with line
 * editing (CELER_HAVE_EDITLINE, the default): keys that edit the line, history
 * kept in $HOME/.celer_history across runs, none kept when HOME is unset, and
 * Ctrl-D typed the moment the prompt shows (it used to be lost now and then);
 * the status line while the model loads.
 * Every run has a HOME of its own. The binary is $CELER_BIN (tests/run.sh sets
 * it), else build/celer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <termios.h>

#include "harness.h"
#include "pty_term.h"

/* Skips output through the next "> " prompt. */
static int until_prompt(term *t, double timeout) { return term_expect(t, "> ", timeout); }

/* A fresh HOME for the runs of this process (history files land there). */
static char home[64];

/* The child's environment: no default model from outside, HOME as given (NULL: unset). */
static void run_env(void *home_dir) {
    unsetenv("CELER_DEFAULT_MODEL");
    if (home_dir) setenv("HOME", home_dir, 1);
    else unsetenv("HOME");
}

/* Starts `celer ARGS...` (argv[0] not included, NULL-terminated) in a terminal;
 * home_dir NULL: HOME unset. */
static int start_argv(term *t, const char *home_dir, char *const *args) {
    const char *bin = getenv("CELER_BIN");
    if (!bin || !*bin) bin = "build/celer";
    char *argv[16];
    int n = 0;
    argv[n++] = (char *)bin;
    for (; args[n - 1] && n < 15; n++) argv[n] = args[n - 1];
    argv[n] = NULL;
    return term_start(t, 120, argv, run_env, (void *)home_dir);
}

/* Starts `celer run` on the default model in a terminal; home_dir NULL: HOME unset. */
static int start_in(term *t, const char *home_dir) {
    char *args[] = {"run", "--temp", "0", "-t", "2", NULL};
    return start_argv(t, home_dir, args);
}

static int start(term *t) { return start_in(t, home); }

static int finish(term *t) { return term_finish(t, 10); }

static void two_turns_reuse_cache(void) {
    term t;
    CHECK(start(&t) == 0, "forkpty: %s", strerror(errno));
    if (t.pid <= 0) return;
    CHECK(until_prompt(&t, 30) == 0, "no first prompt");
    term_say(&t, "In the beginning\r");
    /* transformers' greedy answer to this chat (docs/default-model.md) */
    CHECK(term_expect(&t, "of the reign of Asa king of Judah began Ahaziah", 30) == 0, "first answer missing");
    CHECK(until_prompt(&t, 30) == 0, "no prompt after the first answer");
    term_say(&t, "Blessed are the\r");
    CHECK(until_prompt(&t, 30) == 0, "no prompt after the second answer");
    term_say(&t, "/stats\r");
    CHECK(term_expect(&t, "last turn: prompt ", 10) == 0, "/stats shows no last turn");
    int fresh = -1, reused = -1;
    term_wait_for(&t, "reused", 5, 0);  /* the rest of the line */
    sscanf(t.buf, "%d new + %d", &fresh, &reused);
    CHECK(fresh > 0 && reused >= 36, "second turn: %d new + %d reused, want the first turn (>= 36 tokens) reused", fresh,
          reused);
    CHECK(until_prompt(&t, 10) == 0, "no prompt after /stats");
    term_say(&t, "/quit\r");
    int st = finish(&t);
    CHECK(st == 0, "exit status %d after /quit", st);
}

static void ctrl_c_keeps_the_chat(void) {
    term t;
    CHECK(start(&t) == 0, "forkpty: %s", strerror(errno));
    if (t.pid <= 0) return;
    CHECK(until_prompt(&t, 30) == 0, "no first prompt");
    term_say(&t, "\003");  /* at the prompt: a fresh prompt */
    CHECK(until_prompt(&t, 10) == 0, "no prompt after Ctrl-C at the prompt; output: %s", t.buf);
    /* greedy "hello" loops ("and of the Levites, ...") until the context is full:
     * Ctrl-C once it has started stops it, and the chat stays */
    term_say(&t, "hello\r");
    CHECK(term_expect(&t, "of the Levites", 30) == 0, "the long answer did not start");
    term_say(&t, "\003");
    CHECK(term_expect(&t, "interrupted]", 10) == 0, "the answer was not interrupted");
    CHECK(until_prompt(&t, 30) == 0, "no prompt after Ctrl-C during an answer");
    term_say(&t, "/stats\r");
    CHECK(term_expect(&t, "context: ", 10) == 0, "/stats after Ctrl-C");
    CHECK(until_prompt(&t, 10) == 0, "no prompt after /stats");
    term_say(&t, "\004");  /* Ctrl-D leaves too */
    int st = finish(&t);
    CHECK(st == 0, "exit status %d after Ctrl-D", st);
}

/* Ctrl-D the moment the prompt shows, many times: each run must end at once. (With
 * the prompt printed before the terminal left canonical mode, about 1 in 10 of
 * these was lost on this machine.) */
static void ctrl_d_right_after_prompt(void) {
    for (int i = 0; i < 20; i++) {
        term t;
        CHECK(start(&t) == 0, "forkpty: %s", strerror(errno));
        if (t.pid <= 0) return;
        CHECK(until_prompt(&t, 30) == 0, "no first prompt");
        term_say(&t, "/stats\r");
        CHECK(until_prompt(&t, 10) == 0, "no prompt after /stats");
#ifdef CELER_HAVE_EDITLINE
        /* the terminal (the master reports the slave's settings) is already out of
         * canonical mode when the prompt shows, so no key can fall into the gap */
        struct termios tio;
        CHECK(tcgetattr(t.fd, &tio) == 0 && !(tio.c_lflag & ICANON), "run %d: canonical mode while the prompt shows",
              i);
#endif
        term_say(&t, "\004");
        int st = finish(&t);
        CHECK(st == 0, "run %d: exit status %d after Ctrl-D typed at once", i, st);
    }
}

/* On a terminal a status line shows while the model loads (what there is to map)
 * and is erased before the answer; tests/cli_defaults.sh checks pipes get none. */
static void loading_status_line(void) {
    term t;
    char *args[] = {"run", "-p", "In the beginning", "--temp", "0", "-t", "2", NULL};
    CHECK(start_argv(&t, home, args) == 0, "forkpty: %s", strerror(errno));
    if (t.pid <= 0) return;
    CHECK(term_expect(&t, "celer run: loading ", 30) == 0, "no loading line; output: %s", t.buf);
    CHECK(term_expect(&t, "default (4.0 MiB in 1 file) ...", 5) == 0, "loading line lacks the size; output: %s", t.buf);
    CHECK(term_expect(&t, "\r\033[K", 30) == 0, "the loading line was not erased; output: %s", t.buf);
    CHECK(term_expect(&t, "of the reign of Asa king of Judah", 30) == 0, "no answer after loading; output: %s", t.buf);
    CHECK(finish(&t) == 0, "exit status of run -p");
}

#ifdef CELER_HAVE_EDITLINE
static int file_has(const char *path, const char *want) {
    FILE *f = fopen(path, "r");
    if (!f) return 0;
    char buf[4096];
    size_t n = fread(buf, 1, sizeof buf - 1, f);
    fclose(f);
    buf[n] = '\0';
    return strstr(buf, want) != NULL;
}

/* Emacs keys edit the line: "stats", Ctrl-A (start of line), "/" gives /stats. A
 * plain terminal read would send "stats\001/" as a chat message instead. */
static void line_editing_keys(void) {
    term t;
    CHECK(start(&t) == 0, "forkpty: %s", strerror(errno));
    if (t.pid <= 0) return;
    CHECK(until_prompt(&t, 30) == 0, "no first prompt");
    term_say(&t, "stats\001/\r");
    CHECK(term_expect(&t, "context: 0 of ", 10) == 0, "Ctrl-A did not move to the start of the line; output: %s", t.buf);
    CHECK(until_prompt(&t, 10) == 0, "no prompt after /stats");
    term_say(&t, "/quit\r");
    CHECK(finish(&t) == 0, "exit status after /quit");
}

/* A line entered in one run is in $HOME/.celer_history and Ctrl-P (previous line)
 * brings it back in the next run. */
static void history_across_runs(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/.celer_history", home);
    unlink(path);
    term t;
    CHECK(start(&t) == 0, "forkpty: %s", strerror(errno));
    if (t.pid <= 0) return;
    CHECK(until_prompt(&t, 30) == 0, "no first prompt");
    term_say(&t, "/system Let there be light\r");
    CHECK(term_expect(&t, "(system prompt set)", 10) == 0, "/system");
    CHECK(until_prompt(&t, 10) == 0, "no prompt after /system");
    term_say(&t, "\004");
    CHECK(finish(&t) == 0, "exit status after Ctrl-D");
    CHECK(file_has(path, "Let"), "%s does not hold the line entered", path);
    CHECK(start(&t) == 0, "forkpty: %s", strerror(errno));
    if (t.pid <= 0) return;
    CHECK(until_prompt(&t, 30) == 0, "no first prompt (second run)");
    term_say(&t, "\020\r");  /* Ctrl-P, Enter */
    CHECK(term_expect(&t, "(system prompt set)", 10) == 0, "Ctrl-P did not recall the last run's line; output: %s", t.buf);
    CHECK(until_prompt(&t, 10) == 0, "no prompt after the recalled line");
    term_say(&t, "/quit\r");
    CHECK(finish(&t) == 0, "exit status after /quit (second run)");
}

/* HOME unset: the chat works and keeps no history file. */
static void no_home_no_history(void) {
    term t;
    CHECK(start_in(&t, NULL) == 0, "forkpty: %s", strerror(errno));
    if (t.pid <= 0) return;
    CHECK(until_prompt(&t, 30) == 0, "no first prompt without HOME");
    term_say(&t, "/stats\r");
    CHECK(term_expect(&t, "context: ", 10) == 0, "/stats without HOME");
    CHECK(until_prompt(&t, 10) == 0, "no prompt after /stats");
    term_say(&t, "/quit\r");
    CHECK(finish(&t) == 0, "exit status without HOME");
}
#endif

static void rm_home(void) {
    char path[128];
    snprintf(path, sizeof path, "%s/.celer_history", home);
    unlink(path);
    rmdir(home);
}

int main(void) {
    signal(SIGPIPE, SIG_IGN);
    snprintf(home, sizeof home, "/tmp/celer_pty_home.XXXXXX");
    if (!mkdtemp(home)) {
        perror("mkdtemp");
        return 1;
    }
    RUN(two_turns_reuse_cache);
    RUN(ctrl_c_keeps_the_chat);
    RUN(ctrl_d_right_after_prompt);
    RUN(loading_status_line);
#ifdef CELER_HAVE_EDITLINE
    RUN(line_editing_keys);
    RUN(history_across_runs);
    RUN(no_home_no_history);
#endif
    rm_home();
    return harness_done();
}
