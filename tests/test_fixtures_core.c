/* tests/test_fixtures_core.c: Llama and Qwen3 (bf16 and MLX q4) against
 * transformers' logits: all at once, 1 and 7 tokens per forward, and greedy
 * generation reproducing transformers' own greedy continuation. */
#include "fixture_util.h"
#include "harness.h"

static const char *const models[] = {"llama", "llama-q4", "qwen3", "qwen3-q4"};

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
    for (int s = 0; s < 2; s++)
        for (int c = 0; c < 3; c++) {
            double e = fixture_max_err(m, r.seq[s], r.len[s], r.logits[s], r.vocab, chunks[c]);
            CHECK(e >= 0 && e <= 2e-3, "%s seq_%c chunk %d: max |logit - ref| = %g (tolerance 2e-3)", name, 'a' + s, chunks[c], e);
        }
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

static void llama(void) { check_model(models[0]); }
static void llama_q4(void) { check_model(models[1]); }
static void qwen3(void) { check_model(models[2]); }
static void qwen3_q4(void) { check_model(models[3]); }

int main(void) {
    RUN(llama);
    RUN(llama_q4);
    RUN(qwen3);
    RUN(qwen3_q4);
    return harness_done();
}
