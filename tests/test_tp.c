/* tests/test_tp.c: tensor parallelism proven on the CPU (docs/tensor-parallel.md): every
 * model fixture opened at --tp 1, 2 and 4 (CELER_TP; the ranks are threads of this
 * process, each with its own CPU backend and shard, the collectives over host
 * memory) matches transformers' logits (ref.safetensors) within the CPU tolerance,
 * all at once, 1 and 7 tokens per forward, and its greedy output is that of the
 * model without tensor parallelism; a batched decode step of two sessions agrees
 * with each alone. A fixture whose MLX groups a rank's column slice would cut
 * (q4, group 64, at 4 ranks: 32 columns of o_proj) must refuse to open with a
 * message naming --tp and the groups. Under CELER_DEVICE=cuda the same runs through
 * NCCL (one rank per GPU; the GPU tolerance). */
#include <math.h>
#include <stdlib.h>

#include "base/json.h"
#include "engine/engine.h"
#include "fixture_util.h"
#include "harness.h"

/* The shape facts that decide whether a fixture splits at tp ranks: the affine
 * group (0: not affine) against a rank's columns of o_proj and down_proj. */
static int splits(const char *dir, int tp) {
    char p[300];
    snprintf(p, sizeof p, "%s/config.json", dir);
    json_t *j = json_load_path(p);
    if (!j) return 1;
    const json_t *q = json_object_get(j, "quantization");
    const long g = q ? (long)json_integer_value(json_object_get(q, "group_size")) : 0;
    const long nh = (long)json_integer_value(json_object_get(j, "num_attention_heads"));
    long hd = (long)json_integer_value(json_object_get(j, "head_dim"));
    const long H = (long)json_integer_value(json_object_get(j, "hidden_size"));
    const long I = (long)json_integer_value(json_object_get(j, "intermediate_size"));
    if (!hd && nh) hd = H / nh;
    json_decref(j);
    return !(g > 0 && ((nh * hd / tp) % g || (I / tp) % g));
}

static int greedy(celer_model *m, const fixture_ref *r, int32_t *out) {
    celer_session *s = celer_session_new(m, r->len[0], 64);
    int n = s ? celer_generate_greedy(s, r->seq[0], r->prompt_len, r->n_generated, -1, out) : -1;
    celer_session_free(s);
    return n;
}

/* Two sessions fed one token each in one batched step (the decode-batch forward)
 * give each the logits it gets alone. */
static double batch_step_err(celer_model *m, const fixture_ref *r) {
    const int V = r->vocab, n0 = r->len[0] - 1, n1 = r->len[1] - 1;
    celer_session *a = celer_session_new(m, r->len[0], 8), *b = celer_session_new(m, r->len[1], 8);
    float *la = malloc((size_t)V * sizeof *la), *lb = malloc((size_t)V * sizeof *lb);
    double err = -1;
    if (a && b && la && lb && celer_session_eval(a, r->seq[0], n0, NULL, 0) == 0 &&
        celer_session_eval(b, r->seq[1], n1, NULL, 0) == 0) {
        celer_session *const ss[2] = {a, b};
        const int32_t *toks[2] = {r->seq[0] + n0, r->seq[1] + n1};
        const int nt[2] = {1, 1};
        if (celer_batch_eval(ss, toks, nt, NULL, 2) == 0) {
            memcpy(la, celer_session_logits(a), (size_t)V * sizeof *la);
            memcpy(lb, celer_session_logits(b), (size_t)V * sizeof *lb);
            err = 0;
            const float *ra = r->logits[0] + (long)n0 * V, *rb = r->logits[1] + (long)n1 * V;
            for (int i = 0; i < V; i++) {
                double d = fmax(fabs((double)la[i] - ra[i]), fabs((double)lb[i] - rb[i]));
                if (!(d <= err)) err = d;
            }
        }
    }
    celer_session_free(a);
    celer_session_free(b);
    free(la);
    free(lb);
    return err;
}

/* the rank counts to run: 1 2 4, or argv's (a GPU run: `test_tp 1` on one GPU) */
static const char *g_tps[8] = {"1", "2", "4"};
static int g_ntp = 3;

static void check_fixture(const char *name) {
    char dir[256];
    snprintf(dir, sizeof dir, FIXTURE_MODELS "/%.63s", name);
    fixture_ref r;
    if (fixture_load(dir, &r) != 0) {
        CHECK(0, "%s: cannot load reference: %s", name, celer_last_error());
        fixture_free(&r);
        return;
    }
    const double tol = fixture_tolerance();
    int32_t want[256], got[256];
    setting_override(SET_CELER_TP, "0");
    celer_model *m0 = celer_model_open(dir, 2);
    const int n_want = m0 ? greedy(m0, &r, want) : -1;
    CHECK(n_want == r.n_generated, "%s: greedy without --tp: %s", name, celer_last_error());
    celer_model_free(m0);
    const char *const *tps = g_tps;
    for (int k = 0; k < g_ntp; k++) {
        const int tp = atoi(tps[k]);
        setting_override(SET_CELER_TP, tps[k]);
        celer_model *m = celer_model_open(dir, 2);
        if (!splits(dir, tp)) {
            CHECK(!m, "%s --tp %d: opened although a rank's columns cut the quantization groups", name, tp);
            if (!m) {
                CHECK_STR_HAS(celer_last_error(), "--tp");
                CHECK_STR_HAS(celer_last_error(), "quantization groups");
            }
            celer_model_free(m);
            continue;
        }
        CHECK(m != NULL, "%s --tp %d: %s", name, tp, celer_last_error());
        if (!m) continue;
        double worst = 0;
        const int chunks[] = {0, 1, 7};
        for (int s = 0; s < 2; s++)
            for (int c = 0; c < 3; c++) {
                int flips;
                double e = fixture_compare(m, r.seq[s], r.len[s], r.logits[s], r.vocab, chunks[c], &flips);
                CHECK(e >= 0 && e <= tol, "%s --tp %d seq_%c chunk %d: max |logit - ref| = %g (tolerance %g): %s", name,
                      tp, 'a' + s, chunks[c], e, tol, e < 0 ? celer_last_error() : "");
                CHECK(flips == 0, "%s --tp %d seq_%c chunk %d: %d clear top tokens differ", name, tp, 'a' + s, chunks[c],
                      flips);
                if (e > worst || e < 0) worst = e;
            }
        double eb = batch_step_err(m, &r);
        CHECK(eb >= 0 && eb <= tol, "%s --tp %d: batched decode step err %g: %s", name, tp, eb,
              eb < 0 ? celer_last_error() : "");
        int n = greedy(m, &r, got);
        CHECK(n == n_want, "%s --tp %d: generated %d of %d tokens: %s", name, tp, n, n_want, celer_last_error());
        int same = 0;
        while (same < n && same < n_want && got[same] == want[same]) same++;
        CHECK(same == n_want, "%s --tp %d: greedy output differs from the model without --tp at token %d", name, tp, same);
        printf("  %s --tp %d: max |logit - ref| = %.3g (chunks all, 1, 7), batched step %.3g, greedy %d/%d same\n", name,
               tp, worst, eb, same, n_want);
        celer_model_free(m);
    }
    setting_override(SET_CELER_TP, "0");
    fixture_free(&r);
}

/* Bad values name the flag. */
static void check_bad(void) {
    const char *dir = FIXTURE_MODELS "/llama";
    struct {
        const char *tp, *want;
    } bad[] = {{"3", "--tp 3: layer 0 has 4 attention heads"}, {"65", "--tp 65"}, {"-1", "--tp -1"}};
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        setting_override(SET_CELER_TP, bad[i].tp);
        celer_model *m = celer_model_open(dir, 2);
        CHECK(!m, "--tp %s opened", bad[i].tp);
        if (!m) CHECK_STR_HAS(celer_last_error(), bad[i].want);
        celer_model_free(m);
    }
    setting_override(SET_CELER_TP, "0");
}

int main(int argc, char **argv) {
    if (argc > 1) {
        g_ntp = 0;
        for (int i = 1; i < argc && g_ntp < 8; i++) g_tps[g_ntp++] = argv[i];
    }
    fixture_select_exact();
    RUN_CASE("bad --tp", check_bad());
    FIXTURE_CASES(check_fixture, 20);
    return harness_done();
}
