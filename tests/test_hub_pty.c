/* tests/test_hub_pty.c: `celer run ORG/NAME` for a model that is not cached, at a
 * terminal (a pseudo-terminal): it asks whether to download it; "n" leaves the
 * cache alone and names `celer pull`; "y" pulls it from a local stand-in for the hub
 * (tests/hub/hubserver.mjs serving the default model's files) with a progress bar,
 * then chats, giving transformers' greedy answer (docs/default-model.md).
 * The binary is $CELER_BIN (tests/run.sh sets it), else build/celer. */
#include <errno.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "harness.h"

static char tmp[128], endpoint[128];

typedef struct {
    int fd;
    pid_t pid;
    char buf[1 << 16]; /* output since the last expect */
    size_t len;
} term;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Reads until the output holds want, then keeps only what follows it. 0, or -1 on
 * timeout or end of output. */
static int expect(term *t, const char *want, double timeout) {
    double end = now() + timeout;
    for (;;) {
        t->buf[t->len] = '\0';
        char *hit = strstr(t->buf, want);
        if (hit) {
            size_t skip = (size_t)(hit - t->buf) + strlen(want);
            memmove(t->buf, t->buf + skip, t->len - skip + 1);
            t->len -= skip;
            return 0;
        }
        double left = end - now();
        if (left <= 0) return -1;
        struct pollfd p = {t->fd, POLLIN, 0};
        int r = poll(&p, 1, (int)(left * 1000) + 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return -1;
        if (t->len + 1 >= sizeof t->buf) { /* keep the newest half */
            memmove(t->buf, t->buf + t->len / 2, t->len - t->len / 2);
            t->len -= t->len / 2;
        }
        ssize_t n = read(t->fd, t->buf + t->len, sizeof t->buf - 1 - t->len);
        if (n <= 0) return -1;
        t->len += (size_t)n;
    }
}

static void say(term *t, const char *s) {
    size_t n = strlen(s);
    while (n) {
        ssize_t w = write(t->fd, s, n);
        if (w <= 0) return;
        s += w, n -= (size_t)w;
    }
}

/* `celer run kjv-org/kjv --temp 0` in a terminal, the cache in tmp/cache. */
static int start(term *t) {
    const char *bin = getenv("CELER_BIN");
    if (!bin || !*bin) bin = "build/celer";
    memset(t, 0, sizeof *t);
    struct winsize ws = {40, 160, 0, 0};
    t->pid = forkpty(&t->fd, NULL, NULL, &ws);
    if (t->pid < 0) return -1;
    if (t->pid == 0) {
        char cache[200];
        snprintf(cache, sizeof cache, "%s/cache", tmp);
        setenv("HF_HUB_CACHE", cache, 1); /* the child's environment: celer reads it once, at start */
        setenv("HF_ENDPOINT", endpoint, 1);
        setenv("HOME", tmp, 1);
        unsetenv("HF_TOKEN");
        execl(bin, bin, "run", "kjv-org/kjv", "--temp", "0", "-t", "2", (char *)NULL);
        _exit(127);
    }
    return 0;
}

static int finish(term *t) {
    int st = 0;
    double end = now() + 20;
    while (now() < end) {
        pid_t r = waitpid(t->pid, &st, WNOHANG);
        if (r == t->pid) {
            close(t->fd);
            return WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        }
        char drain[4096];
        struct pollfd p = {t->fd, POLLIN, 0};
        if (poll(&p, 1, 50) > 0 && read(t->fd, drain, sizeof drain) <= 0) usleep(10000);
    }
    kill(t->pid, SIGKILL);
    waitpid(t->pid, &st, 0);
    close(t->fd);
    return -1;
}

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
    CHECK(expect(&t, "kjv-org/kjv is not in the Hugging Face cache", 30) == 0, "no question: %s", t.buf);
    CHECK(expect(&t, "Download it from http://127.0.0.1:", 5) == 0, "no endpoint in the question: %s", t.buf);
    CHECK(expect(&t, "[y/N]", 5) == 0, "no [y/N]: %s", t.buf);
    say(&t, "n\r");
    CHECK(expect(&t, "was not downloaded; get it with: celer pull kjv-org/kjv", 10) == 0, "no hint: %s", t.buf);
    CHECK(finish(&t) == 1, "exit status after no");
    CHECK(!exists("%s/cache/models--kjv-org--kjv%s", ""), "the cache was written after 'n'");
}

static void answer_yes(void) {
    term t;
    CHECK(start(&t) == 0, "forkpty: %s", strerror(errno));
    if (t.pid <= 0) return;
    CHECK(expect(&t, "[y/N]", 30) == 0, "no question: %s", t.buf);
    say(&t, "y\r");
    CHECK(expect(&t, "model.safetensors", 60) == 0, "no progress line for the weights: %s", t.buf);
    CHECK(expect(&t, "100%", 60) == 0, "the bar never reached 100%%: %s", t.buf);
    CHECK(expect(&t, "celer run: kjv-org/kjv: ", 60) == 0, "no summary: %s", t.buf);
    CHECK(expect(&t, "> ", 60) == 0, "no chat prompt after the pull: %s", t.buf);
    say(&t, "In the beginning\r");
    /* transformers' greedy answer to this chat (docs/default-model.md) */
    CHECK(expect(&t, "of the reign of Asa king of Judah began Ahaziah", 60) == 0, "answer missing: %s", t.buf);
    CHECK(expect(&t, "> ", 30) == 0, "no prompt after the answer");
    say(&t, "/quit\r");
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
