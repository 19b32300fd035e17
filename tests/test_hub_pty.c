/* tests/test_hub_pty.c: `celer run ORG/NAME` for a model that is not cached, at a
 * terminal (a pseudo-terminal): it asks whether to download it; "n" leaves the
 * cache alone and names `celer pull`; "y" pulls it from a local stand-in for the hub
 * (tests/hub/hubserver.mjs serving the default model's files) with a progress bar,
 * then chats, giving transformers' greedy answer (docs/default-model.md).
 * The binary is $CELER_BIN (tests/run.sh sets it), else build/celer. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "harness.h"
#include "pty_term.h"

static char tmp[128], endpoint[128];

/* The child's environment: celer reads it once, at start. */
static void hub_env(void *unused) {
    (void)unused;
    char cache[200];
    snprintf(cache, sizeof cache, "%s/cache", tmp);
    setenv("HF_HUB_CACHE", cache, 1);
    setenv("HF_ENDPOINT", endpoint, 1);
    setenv("HOME", tmp, 1);
    unsetenv("HF_TOKEN");
}

/* `celer run kjv-org/kjv --temp 0` in a terminal, the cache in tmp/cache. */
static int start(term *t) {
    const char *bin = getenv("CELER_BIN");
    if (!bin || !*bin) bin = "build/celer";
    char *argv[] = {(char *)bin, "run", "kjv-org/kjv", "--temp", "0", "-t", "2", NULL};
    return term_start(t, 160, argv, hub_env, NULL);
}

static int finish(term *t) { return term_finish(t, 20); }

static int exists(const char *fmt, const char *a) {
    char p[400];
    struct stat st;
    snprintf(p, sizeof p, fmt, tmp, a);
    return stat(p, &st) == 0;
}

static void answer_no(void) {
    term t;
    CHECK(start(&t) == 0, "forkpty: %s", strerror(errno));
    if (t.pid <= 0) return;
    CHECK(term_expect(&t, "kjv-org/kjv is not in the Hugging Face cache", 30) == 0, "no question: %s", t.buf);
    CHECK(term_expect(&t, "Download it from http://127.0.0.1:", 5) == 0, "no endpoint in the question: %s", t.buf);
    CHECK(term_expect(&t, "[y/N]", 5) == 0, "no [y/N]: %s", t.buf);
    term_say(&t, "n\r");
    CHECK(term_expect(&t, "was not downloaded; get it with: celer pull kjv-org/kjv", 10) == 0, "no hint: %s", t.buf);
    CHECK(finish(&t) == 1, "exit status after no");
    CHECK(!exists("%s/cache/models--kjv-org--kjv%s", ""), "the cache was written after 'n'");
}

static void answer_yes(void) {
    term t;
    CHECK(start(&t) == 0, "forkpty: %s", strerror(errno));
    if (t.pid <= 0) return;
    CHECK(term_expect(&t, "[y/N]", 30) == 0, "no question: %s", t.buf);
    term_say(&t, "y\r");
    CHECK(term_expect(&t, "model.safetensors", 60) == 0, "no progress line for the weights: %s", t.buf);
    CHECK(term_expect(&t, "100%", 60) == 0, "the bar never reached 100%%: %s", t.buf);
    CHECK(term_expect(&t, "celer run: kjv-org/kjv: ", 60) == 0, "no summary: %s", t.buf);
    CHECK(term_expect(&t, "> ", 60) == 0, "no chat prompt after the pull: %s", t.buf);
    term_say(&t, "In the beginning\r");
    /* transformers' greedy answer to this chat (docs/default-model.md) */
    CHECK(term_expect(&t, "of the reign of Asa king of Judah began Ahaziah", 60) == 0, "answer missing: %s", t.buf);
    CHECK(term_expect(&t, "> ", 30) == 0, "no prompt after the answer");
    term_say(&t, "/quit\r");
    CHECK(finish(&t) == 0, "exit status after /quit");
    CHECK(exists("%s/cache/models--kjv-org--kjv/refs/main%s", ""), "no refs/main after the pull");
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/celer_test_hub_pty_XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    /* the default model's files as a hub repository */
    char cmd[1024];
    snprintf(cmd, sizeof cmd,
             "mkdir -p %s/repos/kjv-org/kjv && cp models/default/config.json models/default/generation_config.json "
             "models/default/model.safetensors models/default/tokenizer.json models/default/tokenizer_config.json "
             "%s/repos/kjv-org/kjv/ && echo '{}' > %s/faults",
             tmp, tmp, tmp);
    int setup = system(cmd);
    int fds[2];
    pid_t srv = -1;
    if (setup == 0 && pipe(fds) == 0 && (srv = fork()) == 0) {
        char repos[200], faults[200], log[200];
        snprintf(repos, sizeof repos, "%s/repos", tmp);
        snprintf(faults, sizeof faults, "%s/faults", tmp);
        snprintf(log, sizeof log, "%s/log", tmp);
        dup2(fds[1], 1);
        close(fds[0]);
        execlp("node", "node", "tests/hub/hubserver.mjs", repos, faults, log, (char *)NULL);
        _exit(127);
    }
    char port[32] = "";
    if (srv > 0) {
        close(fds[1]);
        FILE *f = fdopen(fds[0], "r");
        if (f && fgets(port, sizeof port, f)) port[strcspn(port, "\n")] = '\0';
        if (f) fclose(f);
    }
    snprintf(endpoint, sizeof endpoint, "http://127.0.0.1:%s", port);
    h_case = "setup";
    CHECK(setup == 0 && port[0], "the stand-in hub did not start (setup %d, port '%s')", setup, port);
    if (port[0]) {
        RUN(answer_no);
        RUN(answer_yes);
    } else {
        h_failed++;
    }
    if (srv > 0) {
        kill(srv, SIGTERM);
        waitpid(srv, NULL, 0);
    }
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) printf("  could not remove %s\n", tmp);
    return harness_done();
}
