/* tests/pty_term.h: a command driven through a pseudo-terminal, as a person at a
 * terminal drives it: start it, wait for text in its output, type, and collect its
 * exit status. Header-only, shared by tests/test_run_pty.c and tests/test_hub_pty.c. */
#ifndef CELER_TEST_PTY_TERM_H
#define CELER_TEST_PTY_TERM_H
#include <errno.h>
#include <poll.h>
#include <pty.h>
#include <signal.h>
#include <string.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

typedef struct {
    int fd;             /* the terminal's master side */
    pid_t pid;
    char buf[1 << 16];  /* output since the last consuming wait */
    size_t len;
} term;

static inline double term_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Reads until the output holds want; consume: then keep only what follows it.
 * 0 ok, -1 on timeout or end of output. */
static inline int term_wait_for(term *t, const char *want, double timeout, int consume) {
    double end = term_now() + timeout;
    for (;;) {
        t->buf[t->len] = '\0';
        char *hit = strstr(t->buf, want);
        if (hit) {
            if (!consume) return 0;
            size_t skip = (size_t)(hit - t->buf) + strlen(want);
            memmove(t->buf, t->buf + skip, t->len - skip + 1);
            t->len -= skip;
            return 0;
        }
        double left = end - term_now();
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

/* Reads until the output holds want and keeps only what follows it. */
static inline int term_expect(term *t, const char *want, double timeout) { return term_wait_for(t, want, timeout, 1); }

/* Types s. */
static inline void term_say(term *t, const char *s) {
    size_t n = strlen(s);
    while (n) {
        ssize_t w = write(t->fd, s, n);
        if (w <= 0) return;
        s += w, n -= (size_t)w;
    }
}

/* Starts argv (argv[0] is the program, NULL-terminated) in a terminal of 40 rows and
 * cols columns; in the child, child_env(arg) (when not NULL) sets its environment
 * before the exec. 0, or -1 when forkpty fails. */
static inline int term_start(term *t, int cols, char *const *argv, void (*child_env)(void *), void *arg) {
    memset(t, 0, sizeof *t);
    struct winsize ws = {40, (unsigned short)cols, 0, 0};
    t->pid = forkpty(&t->fd, NULL, NULL, &ws);
    if (t->pid < 0) return -1;
    if (t->pid == 0) {
        if (child_env) child_env(arg);
        execv(argv[0], argv);
        _exit(127);
    }
    return 0;
}

/* Waits up to timeout seconds for the command to exit, reading its output so that it
 * never blocks on a full terminal, then kills it. Its exit status (128 + the signal
 * when a signal ended it), or -1 when it had to be killed. */
static inline int term_finish(term *t, double timeout) {
    int st = 0;
    double end = term_now() + timeout;
    while (term_now() < end) {
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
#endif
