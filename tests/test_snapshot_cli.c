/* tests/test_snapshot_cli.c: `celer cache` end to end (the binary in $CELER_BIN):
 * --save-cache after seq_b's first `branch` tokens, then --load-cache and the rest
 * of seq_b gives logits (of the new tokens only) within 2e-3 of the reference, on
 * Llama and on the sliding-window Gemma 3 fixture; greedy continuation from a
 * loaded cache equals `celer generate` from the whole prompt; a cache file for
 * another model is refused with exit status 1. */
#include <stdlib.h>
#include <unistd.h>

#include "fixture_util.h"
#include "harness.h"

static const char *bin(void) {
    const char *b = getenv("CELER_BIN");
    return b ? b : "build/celer";
}

/* "a,b,c" of tok [n] into buf. */
static char *list(const int32_t *tok, int n) {
    char *s = malloc((size_t)n * 12 + 1), *p = s;
    *p = 0;
    for (int i = 0; i < n; i++) p += sprintf(p, "%s%d", i ? "," : "", tok[i]);
    return s;
}

static int run(const char *cmd, char *out, size_t cap) {
    FILE *f = popen(cmd, "r");
    if (!f) return -1;
    size_t n = fread(out, 1, cap - 1, f);
    out[n] = 0;
    int st = pclose(f);
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void branch_through_files(const char *name) {
    char dir[256], kv[256], lg[256], cmd[8192], out[4096];
    snprintf(dir, sizeof dir, "tests/fixtures/models/%s", name);
    snprintf(kv, sizeof kv, "/tmp/celer-cli-%d-%s.kv", (int)getpid(), name);
    snprintf(lg, sizeof lg, "/tmp/celer-cli-%d-%s.logits", (int)getpid(), name);
    fixture_ref r;
    if (fixture_load(dir, &r) != 0) {
        CHECK(0, "%s: %s", name, celer_last_error());
        return;
    }
    const int B = r.branch, n = r.len[1] - B;
    char *pre = list(r.seq[1], B), *rest = list(r.seq[1] + B, n);
    snprintf(cmd, sizeof cmd, "%s cache -m %s -t 2 --chunk 7 --tokens %s --save-cache %s 2>&1", bin(), dir, pre, kv);
    CHECK(run(cmd, out, sizeof out) == 0, "%s: save: %s", name, out);
    snprintf(cmd, sizeof cmd, "%s cache -m %s -t 2 --chunk 7 --load-cache %s --tokens %s -o %s 2>&1", bin(), dir, kv, rest, lg);
    CHECK(run(cmd, out, sizeof out) == 0, "%s: load: %s", name, out);
    st_file *f = st_open(lg);
    const st_tensor *t = f ? st_find(f, "logits") : NULL;
    CHECK(t && t->shape[0] == n && t->shape[1] == r.vocab, "%s: logits of the %d new tokens expected", name, n);
    if (t && t->shape[0] == n) {
        double e = 0;
        const float *g = t->data, *want = r.logits[1] + (size_t)B * r.vocab;
        for (long i = 0; i < (long)n * r.vocab; i++) {
            double d = fabs((double)g[i] - want[i]);
            if (!(d <= e)) e = d;
        }
        CHECK(e <= 2e-3, "%s: seq_b through --save-cache/--load-cache: max err %g", name, e);
    }
    st_close(f);
    /* greedy continuation from the cache equals generate from the whole prompt */
    char *all = list(r.seq[1], r.len[1]);
    char gen_a[4096], gen_b[4096];
    snprintf(cmd, sizeof cmd, "%s generate -m %s -t 2 --tokens %s -n 8 --ignore-eos 2>/dev/null", bin(), dir, all);
    run(cmd, gen_a, sizeof gen_a);
    snprintf(cmd, sizeof cmd, "%s cache -m %s -t 2 --load-cache %s --tokens %s -n 8 2>/dev/null", bin(), dir, kv, rest);
    run(cmd, gen_b, sizeof gen_b);
    CHECK(gen_a[0] && strcmp(gen_a, gen_b) == 0, "%s: generate says %s, cache continuation says %s", name, gen_a, gen_b);
    free(all);
    free(pre);
    free(rest);
    remove(lg);
    remove(kv);
    fixture_free(&r);
}

static void llama(void) { branch_through_files("llama"); }
static void gemma3(void) { branch_through_files("gemma3"); }

static void wrong_model(void) {
    char kv[256], cmd[1024], out[4096];
    snprintf(kv, sizeof kv, "/tmp/celer-cli-%d-wrong.kv", (int)getpid());
    snprintf(cmd, sizeof cmd, "%s cache -m tests/fixtures/models/llama --tokens 1,2,3 --save-cache %s 2>&1", bin(), kv);
    CHECK(run(cmd, out, sizeof out) == 0, "save: %s", out);
    snprintf(cmd, sizeof cmd, "%s cache -m tests/fixtures/models/qwen3 --load-cache %s --tokens 4 2>&1", bin(), kv);
    CHECK(run(cmd, out, sizeof out) == 1, "loading a llama cache into qwen3 should exit 1");
    const char *msg = out;
    CHECK_STR_HAS(msg, "another model");
    snprintf(cmd, sizeof cmd, "%s cache -m tests/fixtures/models/llama 2>&1", bin());
    CHECK(run(cmd, out, sizeof out) == 2, "nothing to do is a usage error");
    remove(kv);
}

int main(void) {
    RUN(llama);
    RUN(gemma3);
    RUN(wrong_model);
    return harness_done();
}
