/* tests/cuda/test_cuda_precision.c: the fast precision (CELER_PRECISION=fast, the
 * GPU's default: activations rounded once to bf16, bf16 KV cache, flash attention on
 * the tensor cores) held to the precision of transformers itself run in bf16.
 *
 * For every dense fixture named in tests/fixtures/bf16_transformers.json (a copy of
 * the shared reference, format in its README: max_abs, mean_abs, mean_kl and
 * argmax_agree of transformers' bf16 logits against the float32 reference, eager and
 * sdpa attention), and for each quantized fixture against its dense sibling's
 * figures, every way the fixture tests feed the model runs on the GPU: seq_a and
 * seq_b all at once, 1 and 7 tokens per forward, the branch at `branch` through a
 * snapshot (seq_b continued, then seq_a after restoring it) and through a cache
 * file. Each run's max_abs, mean_abs and mean_kl (KL(ref || got) per row, averaged)
 * must be at most FACTOR (1.5) times transformers' better figure of the two
 * attentions, and it must lose no more clear top tokens (reference gap > 0.05) than
 * transformers' better run does. Greedy generation from seq_a's prompt must follow
 * transformers' continuation at every step where the reference's top token is clear.
 * One-row 4-bit products take the two-term int8 activations on every shape
 * (CUK_MV_I8X2=2: by default only products of 4,096+ rows and 2,048+ columns; the
 * fixtures' are far smaller), so the quantized fixtures hold that rounding to the
 * envelope.
 * The exact precision's figures are measured beside it and printed (not checked
 * here: the fixture tests hold it to 5e-2). Prints the margins (figure / envelope).
 * `--factor F` changes 1.5; `--only a,b` runs those fixtures alone. The checks are
 * known to fail: the MoE fixtures failed them while they ran the fast arithmetic
 * (docs/benchmarks/cuda.md, issue 17 runs 1-2). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/json.h"
#include "base/settings.h"
#include "fixture_util.h"
#include "harness.h"

#include "precision_envelope.h"

static celer_model *open_as(const char *dir, const char *precision) {
    setting_override(SET_CELER_PRECISION, precision);
    celer_model *m = celer_model_open_on(dir, 2, "cuda");
    setting_override(SET_CELER_PRECISION, NULL);
    return m;
}

/* feeds tok [n] `chunk` at a time into a fresh session; logits into got [n, V] */
static int eval_all(celer_model *m, const int32_t *tok, int n, int chunk, float *got) {
    celer_session *s = celer_session_new(m, n, chunk ? chunk : n);
    int rc = s ? celer_session_eval(s, tok, n, got, 1) : -1;
    celer_session_free(s);
    return rc;
}

static void run_model(const char *name, const char *precision, const envelope *e, margins *mg) {
    const int check = strcmp(precision, "fast") == 0;
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fixtures/models/%s", name);
    fixture_ref r;
    if (fixture_load(dir, &r) != 0) {
        CHECK(0, "%s: cannot load reference: %s", name, celer_last_error());
        fixture_free(&r);
        return;
    }
    celer_model *m = open_as(dir, precision);
    CHECK(m != NULL, "%s (%s): %s", name, precision, celer_last_error());
    const int V = r.vocab, la = r.len[0], lb = r.len[1], br = r.branch, ctx = la > lb ? la : lb;
    float *got = malloc((size_t)ctx * V * sizeof *got);
    if (!m || !got) goto out;
    celer_model_info in;
    celer_model_get_info(m, &in);
    if (strcmp(in.precision, precision) != 0) /* mixture-of-experts models: exact whatever is asked */
        printf("  %s: --precision %s runs the %s arithmetic (KV cache %s)\n", name, precision, in.precision, in.kv_dtype);
    /* chunkings: all at once, 1 and 7 tokens per forward, over seq_a and seq_b */
    const int chunks[] = {0, 1, 7};
    for (int c = 0; c < 3; c++) {
        pstats s = {0};
        for (int q = 0; q < 2; q++) {
            if (eval_all(m, r.seq[q], r.len[q], chunks[c], got) != 0) {
                CHECK(0, "%s seq_%c chunk %d: %s", name, 'a' + q, chunks[c], celer_last_error());
                goto out;
            }
            acc_rows(&s, got, r.logits[q], r.len[q], V);
        }
        char run[32];
        snprintf(run, sizeof run, "chunk %d", chunks[c]);
        judge(name, run, &s, e, check, mg);
    }
    /* the branch through a snapshot, then through a cache file */
    {
        char path[96];
        snprintf(path, sizeof path, "/tmp/celer-precision-%d.safetensors", (int)getpid());
        celer_session *s = celer_session_new(m, ctx, 7), *s2 = celer_session_new(m, ctx, 7);
        celer_snapshot *snap = NULL;
        pstats st = {0}, sf = {0};
        int ok = s && s2 && celer_session_eval(s, r.seq[1], br, got, 1) == 0;
        if (ok) {
            acc_rows(&st, got, r.logits[1], br, V);
            acc_rows(&sf, got, r.logits[1], br, V);
        }
        ok = ok && (snap = celer_session_snapshot(s)) && celer_session_save_cache(s, path) == 0 &&
             celer_session_eval(s, r.seq[1] + br, lb - br, got, 1) == 0;
        if (ok) acc_rows(&st, got, r.logits[1] + (long)br * V, lb - br, V);
        ok = ok && celer_session_restore(s, snap) == 0 && celer_session_eval(s, r.seq[0] + br, la - br, got, 1) == 0;
        if (ok) acc_rows(&st, got, r.logits[0] + (long)br * V, la - br, V);
        ok = ok && celer_session_load_cache(s2, path) == 0 && celer_session_eval(s2, r.seq[1] + br, lb - br, got, 1) == 0;
        if (ok) acc_rows(&sf, got, r.logits[1] + (long)br * V, lb - br, V);
        CHECK(ok, "%s: branch: %s", name, celer_last_error());
        if (ok) {
            judge(name, "snapshot branch", &st, e, check, mg);
            judge(name, "cache-file branch", &sf, e, check, mg);
        }
        unlink(path);
        celer_snapshot_free(snap);
        celer_session_free(s);
        celer_session_free(s2);
    }
    /* greedy generation follows transformers' own wherever its top token is clear */
    if (check) {
        celer_session *s = celer_session_new(m, la, 64);
        int32_t out[256];
        int n = s ? celer_generate_greedy(s, r.seq[0], r.prompt_len, r.n_generated, -1, out) : -1;
        CHECK(n == r.n_generated, "%s: generated %d of %d tokens: %s", name, n, r.n_generated, celer_last_error());
        for (int i = 0; i < n; i++) {
            if (out[i] == r.seq[0][r.prompt_len + i]) continue;
            /* row prompt_len + i - 1 of logits_a predicts generated token i */
            const float *f = r.logits[0] + (long)(r.prompt_len + i - 1) * V;
            int fa = 0;
            for (int k = 1; k < V; k++) if (f[k] > f[fa]) fa = k;
            float second = -INFINITY;
            for (int k = 0; k < V; k++) if (k != fa && f[k] > second) second = f[k];
            CHECK(f[fa] - second <= 0.05f, "%s: greedy output leaves transformers' at generated token %d (reference gap %.3g)",
                  name, i, f[fa] - second);
            break; /* past a divergence there is no reference */
        }
        celer_session_free(s);
    }
out:
    free(got);
    celer_model_free(m);
    fixture_free(&r);
}

static json_t *g_env;
static const char *g_only; /* --only a,b,c: these fixtures alone (diagnosis runs) */

static int selected(const char *name) {
    if (!g_only) return 1;
    size_t n = strlen(name);
    for (const char *p = g_only; (p = strstr(p, name)); p += n)
        if ((p == g_only || p[-1] == ',') && (p[n] == ',' || !p[n])) return 1;
    return 0;
}

static void one(const char *name, const char *sibling) {
    envelope e;
    if (!selected(name)) return;
    if (load_envelope(g_env, sibling, &e) != 0) {
        CHECK(0, "%s: no bf16 figures for %s in tests/fixtures/bf16_transformers.json", name, sibling);
        return;
    }
    margins fast = {{0, 0, 0}, 0}, exact = {{0, 0, 0}, 0};
    run_model(name, "fast", &e, &fast);
    run_model(name, "exact", &e, &exact);
    printf("  %-14s envelope (%s) max_abs %.4g mean_abs %.4g mean_kl %.3g lost %d/%d | fast: %.2fx %.2fx %.2fx lost %d | "
           "exact: %.3fx %.3fx %.3fx lost %d\n",
           name, sibling, e.max_abs, e.mean_abs, e.mean_kl, e.flips, e.clear, fast.worst[0], fast.worst[1], fast.worst[2],
           fast.flips, exact.worst[0], exact.worst[1], exact.worst[2], exact.flips);
}

static void fixtures(void) {
    const char *dense[] = {"llama", "qwen3", "gemma3", "exaone4", "gpt_oss", "gemma4", "gemma4_moe", "qwen2",
                           "mistral", "phi3", "gemma2", "mixtral", "smollm3", "olmo2"};
    const char *quant[][2] = {{"llama-q4", "llama"}, {"qwen3-q4", "qwen3"}, {"gemma3-q4", "gemma3"},
                              {"qwen2-q4", "qwen2"}, {"mistral-q4", "mistral"}, {"gpt_oss-mxfp4", "gpt_oss"}};
    printf("  margins: worst run's figure / transformers' bf16 figure (limit %.2fx), clear top tokens lost\n", g_factor);
    for (size_t i = 0; i < sizeof dense / sizeof *dense; i++) one(dense[i], dense[i]);
    for (size_t i = 0; i < sizeof quant / sizeof *quant; i++) one(quant[i][0], quant[i][1]);
}

int main(int argc, char **argv) {
    setting_override(SET_CUK_MV_I8X2, "2");
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--factor") == 0) g_factor = atof(argv[i + 1]);
        if (strcmp(argv[i], "--only") == 0) g_only = argv[i + 1];
    }
    if (!(g_env = json_load_path("tests/fixtures/bf16_transformers.json"))) {
        printf("cannot read tests/fixtures/bf16_transformers.json: %s\n", celer_last_error());
        return 1;
    }
    RUN(fixtures);
    json_decref(g_env);
    return harness_done();
}
