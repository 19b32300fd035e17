/* tests/test_fixtures_families.c: Gemma 3 (bf16 and MLX q4), Gemma 4 (dense and
 * with MoE, KV sharing, K-equals-V, double-wide MLP, softcap), gpt-oss (bf16 and
 * MXFP4 experts) and EXAONE 4 against transformers' logits: all at once, 1 and 7
 * tokens per forward, and greedy generation reproducing transformers' own greedy
 * continuation. Prints each case's max error so regressions show their size. */
#include "fixture_util.h"
#include "harness.h"

static void check_model(const char *name) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fixtures/models/%s", name);
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
    double worst = 0;
    for (int s = 0; s < 2; s++)
        for (int c = 0; c < 3; c++) {
            double e = fixture_max_err(m, r.seq[s], r.len[s], r.logits[s], r.vocab, chunks[c]);
            CHECK(e >= 0 && e <= 2e-3, "%s seq_%c chunk %d: max |logit - ref| = %g (tolerance 2e-3): %s", name, 'a' + s,
                  chunks[c], e, e < 0 ? celer_last_error() : "");
            if (e > worst || e < 0) worst = e;
        }
    printf("  %s: max |logit - ref| = %.3g over seq_a, seq_b at chunks all, 1, 7\n", name, worst);
    /* greedy generation from seq_a's prompt reproduces seq_a's generated part */
    celer_session *ss = celer_session_new(m, r.len[0], 64);
    int32_t out[256];
    int n = celer_generate_greedy(ss, r.seq[0], r.prompt_len, r.n_generated, -1, out);
    CHECK(n == r.n_generated, "%s: generated %d of %d tokens: %s", name, n, r.n_generated, celer_last_error());
    int same = 0;
    while (same < n && out[same] == r.seq[0][r.prompt_len + same]) same++;
    CHECK(same == r.n_generated, "%s: greedy output diverges from transformers at generated token %d", name, same);
    celer_session_free(ss);
    celer_model_free(m);
    fixture_free(&r);
}

static void gemma3(void) { check_model("gemma3"); }
static void gemma3_q4(void) { check_model("gemma3-q4"); }
static void gemma4(void) { check_model("gemma4"); }
static void gemma4_moe(void) { check_model("gemma4_moe"); }
static void gpt_oss(void) { check_model("gpt_oss"); }
static void gpt_oss_mxfp4(void) { check_model("gpt_oss-mxfp4"); }
static void exaone4(void) { check_model("exaone4"); }

int main(void) {
    RUN(gemma3);
    RUN(gemma3_q4);
    RUN(exaone4);
    RUN(gpt_oss);
    RUN(gpt_oss_mxfp4);
    RUN(gemma4);
    RUN(gemma4_moe);
    return harness_done();
}
