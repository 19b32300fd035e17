/* tests/test_cpu_precision.c: the CPU's fast precision (CELER_PRECISION=fast:
 * prefill activations of bf16 and 4/8-bit products rounded once to bf16 (vdpbf16ps
 * where the processor has AVX512_BF16; backend/cpu/fast.c) held to the
 * precision of transformers itself run in bf16, at every kernel level this processor
 * runs (CELER_CPU generic, avx2, avx512; a level it lacks is skipped with the reason).
 *
 * The rule is tests/cuda/test_cuda_precision.c's (this file follows it, run on the
 * CPU): for every dense fixture named in tests/fixtures/bf16_transformers.json, and
 * each quantized fixture against its dense sibling's figures, seq_a and seq_b all at
 * once, 1 and 7 tokens per forward, the branch through a snapshot and through a cache
 * file; each run's max_abs, mean_abs and mean_kl at most FACTOR (1.5) times
 * transformers' better figure of its two attentions, no more clear top tokens
 * (reference gap > 0.05) lost than transformers' better run; greedy generation
 * follows transformers' continuation wherever the reference's top token is clear
 * (gap > 0.05; for a fixture on which transformers' own bf16 loses clear top tokens,
 * gemma4, gap > FACTOR x its bf16 max_abs: the GPU test's rule is the 0.05 alone).
 * Mixture-of-experts models run exact under fast (model/precision.c) and are held to
 * the same rule. At the avx512 level the quantized fixtures run again under each 4-bit
 * decode rounding the processor has (CELER_CPU_Q4DEC=bf16 and int16), each held to it. At the best level the quantized fixtures also run with
 * CELER_CPU_INT8=1 (int8 activations), whose margins are printed, not checked: they
 * fail the rule (docs/cpu-kernels.md "Precision"). Prints the margins (worst figure / envelope) per level.
 * `--factor F` changes 1.5; `--only a,b` runs those fixtures alone; `--level L` one level. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "backend/cpu/cpu.h"
#include "base/json.h"
#include "base/settings.h"
#include "fixture_util.h"
#include "harness.h"

#include "precision_envelope.h"

static celer_model *open_as(const char *dir, const char *precision) {
    setting_override(SET_CELER_PRECISION, precision);
    celer_model *m = celer_model_open_on(dir, 2, "cpu");
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

static void run_model(const char *name, const char *precision, const envelope *e, margins *mg, int check) {
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
        snprintf(path, sizeof path, "/tmp/celer-cpu-precision-%d.safetensors", (int)getpid());
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
            /* clear: a gap of 0.05, or where transformers' own bf16 loses clear top
             * tokens (gemma4), a gap beyond FACTOR x its max_abs */
            const double clear = e->flips > 0 ? fmax(0.05, g_factor * e->max_abs) : 0.05;
            CHECK(f[fa] - second <= clear,
                  "%s: greedy output leaves transformers' at generated token %d (reference gap %.3g, clear above %.3g)", name, i,
                  f[fa] - second, clear);
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
    margins fast = {{0, 0, 0}, 0};
    run_model(name, "fast", &e, &fast, 1);
    if (strcmp(name, sibling) != 0 && cpu_level() == CPU_AVX512) {
        /* 4-bit decode products: both roundings this processor runs (the default run
         * above took the one CELER_CPU_Q4DEC=auto picks), each held to the rule */
        const char *modes[] = {"bf16", "int16"};
        const int has[] = {cpu_has_avx512_bf16(), cpu_has_avx512_vnni()};
        for (int md = 0; md < 2; md++) {
            if (!has[md]) continue;
            margins mm = {{0, 0, 0}, 0};
            setting_override(SET_CELER_CPU_Q4DEC, modes[md]);
            run_model(name, "fast", &e, &mm, 1);
            setting_override(SET_CELER_CPU_Q4DEC, NULL);
            printf("  [%s] %-14s CELER_CPU_Q4DEC=%s: %.3fx %.3fx %.3fx lost %d\n", cpu_level_name(cpu_level()), name,
                   modes[md], mm.worst[0], mm.worst[1], mm.worst[2], mm.flips);
        }
    }
    if (strcmp(name, sibling) != 0 && cpu_level() == cpu_level_hw()) {
        /* CELER_CPU_INT8=1 (int8 activations, off by default): measured, not held */
        margins i8 = {{0, 0, 0}, 0};
        setting_override(SET_CELER_CPU_INT8, "1");
        run_model(name, "fast", &e, &i8, 0);
        setting_override(SET_CELER_CPU_INT8, NULL);
        printf("  [%s] %-14s CELER_CPU_INT8=1 (not checked): %.3fx %.3fx %.3fx lost %d\n", cpu_level_name(cpu_level()), name,
               i8.worst[0], i8.worst[1], i8.worst[2], i8.flips);
    }
    printf("  [%s] %-14s envelope (%s) max_abs %.4g mean_abs %.4g mean_kl %.3g lost %d/%d | fast: %.3fx %.3fx %.3fx lost %d\n",
           cpu_level_name(cpu_level()), name, sibling, e.max_abs, e.mean_abs, e.mean_kl, e.flips, e.clear, fast.worst[0],
           fast.worst[1], fast.worst[2], fast.flips);
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

static const char *g_level; /* --level L: that level alone */

static void at_level(int level) {
    const char *name = cpu_level_name(level);
    if (g_level && strcmp(g_level, name) != 0) return;
    if (level > cpu_level_hw()) {
        printf("skip: CELER_CPU=%s: this CPU lacks it (it runs up to %s)\n", name, cpu_level_name(cpu_level_hw()));
        return;
    }
    setting_override(SET_CELER_CPU, name);
    printf("CELER_CPU=%s (%s)\n", name, celer_cpu_kernels());
    fixtures();
    setting_override(SET_CELER_CPU, NULL);
}

static void fixtures_generic(void) { at_level(CPU_GENERIC); }
static void fixtures_avx2(void) { at_level(CPU_AVX2); }
static void fixtures_avx512(void) { at_level(CPU_AVX512); }

int main(int argc, char **argv) {
    for (int i = 1; i + 1 < argc; i += 2) {
        if (strcmp(argv[i], "--factor") == 0) g_factor = atof(argv[i + 1]);
        if (strcmp(argv[i], "--only") == 0) g_only = argv[i + 1];
        if (strcmp(argv[i], "--level") == 0) g_level = argv[i + 1];
    }
    if (!(g_env = json_load_path("tests/fixtures/bf16_transformers.json"))) {
        printf("cannot read tests/fixtures/bf16_transformers.json: %s\n", celer_last_error());
        return 1;
    }
    RUN(fixtures_generic);
    RUN(fixtures_avx2);
    RUN(fixtures_avx512);
    json_decref(g_env);
    return harness_done();
}
