/* tests/test_fixtures_models.c: every model fixture — Llama and Qwen3 (bf16 and MLX
 * q4), Gemma 3 (bf16 and MLX q4), Gemma 4 (dense and with MoE, KV sharing,
 * K-equals-V, double-wide MLP, softcap), gpt-oss (bf16 and MXFP4 experts) and
 * EXAONE 4 — against transformers' logits: all at once, 1 and 7
 * tokens per forward, greedy generation reproducing transformers' own greedy
 * continuation, and the branch at `branch` through a snapshot and a cache file.
 * Prints each case's max error so regressions show their size. Under
 * CELER_DEVICE=cuda (`make test-cuda`) the same checks run on the GPU with its
 * tolerance (fixture_tolerance). */
#include <math.h>
#include <unistd.h>

#include "engine/engine.h"
#include "fixture_util.h"
#include "harness.h"

/* max |got - ref| over n values (NaN counts as infinite) */
static double diff(const float *got, const float *ref, long n) {
    double m = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)got[i] - (double)ref[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

/* seq_a and seq_b share their first `branch` tokens: feed that prefix, snapshot and
 * save the cache, continue with seq_b, restore and continue with seq_a, then load
 * the file into a fresh session and continue with seq_b again. */
static void check_branch(celer_model *m, const fixture_ref *r, const char *name) {
    const double tol = fixture_tolerance();
    const int V = r->vocab, br = r->branch, la = r->len[0], lb = r->len[1];
    int ctx = la > lb ? la : lb;
    float *got = malloc((size_t)ctx * V * sizeof *got);
    char path[64];
    snprintf(path, sizeof path, "/tmp/celer-fam-cache-%d.safetensors", (int)getpid());
    celer_session *s = celer_session_new(m, ctx, 7), *s2 = celer_session_new(m, ctx, 7);
    celer_snapshot *snap = NULL;
    if (!got || !s || !s2) { CHECK(0, "%s: setup: %s", name, celer_last_error()); goto out; }
    CHECK(celer_session_eval(s, r->seq[1], br, got, 1) == 0, "%s: prefix: %s", name, celer_last_error());
    double e = diff(got, r->logits[1], (long)br * V);
    CHECK(e <= tol, "%s: prefix logits err %g", name, e);
    snap = celer_session_snapshot(s);
    CHECK(snap != NULL, "%s: snapshot: %s", name, celer_last_error());
    CHECK(celer_session_save_cache(s, path) == 0, "%s: save cache: %s", name, celer_last_error());
    CHECK(celer_session_eval(s, r->seq[1] + br, lb - br, got, 1) == 0, "%s: seq_b: %s", name, celer_last_error());
    e = diff(got, r->logits[1] + (long)br * V, (long)(lb - br) * V);
    CHECK(e <= tol, "%s: seq_b after the prefix: err %g", name, e);
    if (snap && celer_session_restore(s, snap) == 0) {
        CHECK(celer_session_eval(s, r->seq[0] + br, la - br, got, 1) == 0, "%s: seq_a: %s", name, celer_last_error());
        e = diff(got, r->logits[0] + (long)br * V, (long)(la - br) * V);
        CHECK(e <= tol, "%s: seq_a after restoring the snapshot: err %g", name, e);
    } else {
        CHECK(0, "%s: restore: %s", name, celer_last_error());
    }
    if (celer_session_load_cache(s2, path) == 0) {
        CHECK(celer_session_eval(s2, r->seq[1] + br, lb - br, got, 1) == 0, "%s: seq_b: %s", name, celer_last_error());
        e = diff(got, r->logits[1] + (long)br * V, (long)(lb - br) * V);
        CHECK(e <= tol, "%s: seq_b after loading the cache file: err %g", name, e);
    } else {
        CHECK(0, "%s: load cache: %s", name, celer_last_error());
    }
out:
    unlink(path);
    celer_snapshot_free(snap);
    celer_session_free(s);
    celer_session_free(s2);
    free(got);
}

static void check_model(const char *name) {
    char dir[256];
    snprintf(dir, sizeof dir, FIXTURE_MODELS "/%.63s", name);
    fixture_ref r;
    if (fixture_load(dir, &r) != 0) {
        CHECK(0, "%s: cannot load reference: %s", name, celer_last_error());
        fixture_free(&r);
        return;
    }
    celer_model *m = celer_model_open(dir, 2);
    CHECK(m != NULL, "%s: %s", name, celer_last_error());
    if (!m) { fixture_free(&r); return; }
    const int chunks[] = {0, 1, 7};
    const double tol = fixture_tolerance();
    double worst = 0;
    for (int s = 0; s < 2; s++)
        for (int c = 0; c < 3; c++) {
            int flips;
            double e = fixture_compare(m, r.seq[s], r.len[s], r.logits[s], r.vocab, chunks[c], &flips);
            CHECK(e >= 0 && e <= tol, "%s seq_%c chunk %d: max |logit - ref| = %g (tolerance %g): %s", name, 'a' + s,
                  chunks[c], e, tol, e < 0 ? celer_last_error() : "");
            CHECK(flips == 0, "%s seq_%c chunk %d: %d rows whose clear top token (gap > 0.05) differs", name, 'a' + s,
                  chunks[c], flips);
            if (e > worst || e < 0) worst = e;
        }
    printf("  %s: max |logit - ref| = %.3g over seq_a, seq_b at chunks all, 1, 7 (%s)\n", name, worst,
           getenv("CELER_DEVICE") ? getenv("CELER_DEVICE") : "auto");
    /* greedy generation from seq_a's prompt reproduces seq_a's generated part */
    celer_session *ss = celer_session_new(m, r.len[0], 64);
    int32_t out[256];
    int n = celer_generate_greedy(ss, r.seq[0], r.prompt_len, r.n_generated, -1, out);
    CHECK(n == r.n_generated, "%s: generated %d of %d tokens: %s", name, n, r.n_generated, celer_last_error());
    int same = 0;
    while (same < n && out[same] == r.seq[0][r.prompt_len + same]) same++;
    CHECK(same == r.n_generated, "%s: greedy output diverges from transformers at generated token %d", name, same);
    celer_session_free(ss);
    check_branch(m, &r, name);
    celer_model_free(m);
    fixture_free(&r);
}

int main(void) {
    fixture_select_exact(); /* the 5e-2 tolerance is the exact precision's */
    FIXTURE_CASES(check_model, 20); /* the twenty families and formats this file was written with */
    return harness_done();
}
