/* tests/test_fuzz_regress.c: every input a fuzzer once crashed on (fuzz/regress/),
 * replayed through the same calls as its harness; under `make test SAN=1` a
 * regression is a sanitizer report. The server-request harness's hand-made seeds
 * (fuzz/seeds/fuzz_server_request/) are replayed too: they hold its promises (a
 * status and a message for every refusal, limits kept, JSON responses) in the suite. */
#include <dirent.h>
#include <signal.h>
#include <stdlib.h>
#include <sys/time.h>

#include "../fuzz/replay_server_request.h"
#include "../fuzz/replay_tokenizer_json.h"
#include "harness.h"

/* Harnesses whose whole job is one call: replayed by their own entry point, renamed. */
#define LLVMFuzzerTestOneInput fuzz_config_one
#include "../fuzz/fuzz_config.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_jinja_one
#include "../fuzz/fuzz_jinja.c"
#undef LLVMFuzzerTestOneInput
#define LLVMFuzzerTestOneInput fuzz_grammar_one
#include "../fuzz/fuzz_grammar.c"
#undef LLVMFuzzerTestOneInput

/* Calls fn on every file of dir; the number of files, -1 when dir is missing. */
static int each_file(const char *dir, void (*fn)(const char *path, const char *name)) {
    DIR *d = opendir(dir);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
        fn(p, e->d_name);
        n++;
    }
    closedir(d);
    return n;
}

static void one_tokenizer_json(const char *path, const char *name) {
    CHECK(replay_tokenizer_json(path) >= 0, "%s: refused without a message", name);
}

static void tokenizer_json(void) {
    int n = each_file("fuzz/regress/fuzz_tokenizer_json", one_tokenizer_json);
    CHECK(n > 0, "no regression inputs in fuzz/regress/fuzz_tokenizer_json");
}

/* The first MiB of path into a static buffer; NULL (a failed check) when unreadable. */
static const unsigned char *read_input(const char *path, size_t *n) {
    static unsigned char buf[1 << 20];
    FILE *f = fopen(path, "rb");
    CHECK(f != NULL, "cannot open %s", path);
    if (!f) return NULL;
    *n = fread(buf, 1, sizeof buf, f);
    fclose(f);
    return buf;
}

static void one_server_request(const char *path, const char *name) {
    size_t n = 0;
    const unsigned char *buf = read_input(path, &n);
    if (buf) CHECK(replay_server_request(buf, n) == 0, "%s: a broken promise (message above)", name);
}

static void server_request(void) {
    CHECK(replay_server_init() == 0, "cannot set up the servers");
    int seeds = each_file("fuzz/seeds/fuzz_server_request", one_server_request);
    CHECK(seeds > 0, "no seeds in fuzz/seeds/fuzz_server_request");
    each_file("fuzz/regress/fuzz_server_request", one_server_request); /* absent until a crash is found */
    replay_server_free();
}

/* The wire-mode inputs again, under a signal every millisecond with no SA_RESTART, as
 * libFuzzer's per-input alarm (SIGALRM) comes: a poll or recv of the harness that a
 * signal ends early (EINTR) is not the server's silence. The harness read it as "no
 * answer within 8 s", the stall seen under fuzzing and never on replay. */
static volatile sig_atomic_t n_alarms;
static void on_alarm(int sig) {
    (void)sig;
    n_alarms++;
}

static void one_wire_request(const char *path, const char *name) {
    size_t n = 0;
    const unsigned char *buf = read_input(path, &n);
    if (buf && n && (buf[0] & 0x80))
        for (int i = 0; i < 20; i++)
            if (replay_server_request(buf, n) != 0) {
                CHECK(0, "%s: a broken promise under signals (message above)", name);
                break;
            }
}

static void server_request_under_signals(void) {
    CHECK(replay_server_init() == 0, "cannot set up the servers");
    struct sigaction sa = {0}, old;
    sa.sa_handler = on_alarm; /* no SA_RESTART, as libFuzzer's */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGALRM, &sa, &old);
    struct itimerval every_ms = {{0, 1000}, {0, 1000}}, off = {{0, 0}, {0, 0}};
    n_alarms = 0;
    setitimer(ITIMER_REAL, &every_ms, NULL);
    /* rounds until enough signals have landed (a quiet machine replays every wire
     * input in well under 100 ms; one CI run saw 65 signals in a single round) */
    for (int round = 0; round < 100 && n_alarms < 200 && !h_case_failed; round++) {
        each_file("fuzz/seeds/fuzz_server_request", one_wire_request);
        each_file("fuzz/regress/fuzz_server_request", one_wire_request);
    }
    setitimer(ITIMER_REAL, &off, NULL);
    sigaction(SIGALRM, &old, NULL);
    CHECK(n_alarms >= 200, "only %d signals came", (int)n_alarms);
    replay_server_free();
}

static int (*g_entry)(const uint8_t *, size_t);

static void one_entry(const char *path, const char *name) {
    size_t n = 0;
    const unsigned char *buf = read_input(path, &n);
    if (buf) CHECK(g_entry(buf, n) == 0, "%s: harness returned non-zero", name);
}

static void config(void) {
    g_entry = fuzz_config_one;
    CHECK(each_file("fuzz/regress/fuzz_config", one_entry) > 0, "no regression inputs in fuzz/regress/fuzz_config");
}

static void jinja(void) {
    g_entry = fuzz_jinja_one;
    CHECK(each_file("fuzz/regress/fuzz_jinja", one_entry) > 0, "no regression inputs in fuzz/regress/fuzz_jinja");
}

/* The grammar harness's seeds (its promises: a message for every refusal, converted
 * schemas compile) and any regression found since. */
static void grammar(void) {
    g_entry = fuzz_grammar_one;
    CHECK(each_file("fuzz/seeds/fuzz_grammar", one_entry) > 0, "no seeds in fuzz/seeds/fuzz_grammar");
    each_file("fuzz/regress/fuzz_grammar", one_entry); /* absent until a crash is found */
}

int main(void) {
    RUN(config);
    RUN(jinja);
    RUN(tokenizer_json);
    RUN(server_request);
    RUN(server_request_under_signals);
    RUN(grammar);
    return harness_done();
}
