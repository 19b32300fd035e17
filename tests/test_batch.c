/* tests/test_batch.c: celer_batch_eval runs several conversations in one forward and
 * each gets exactly its own logits: two fixture sequences fed in lockstep (first a
 * multi-token step of different lengths, then one token each) match transformers'
 * logits for each row, on dense and sliding-window (rotating cache) families. */
#include "fixture_util.h"
#include "harness.h"

static double row_err(const float *got, const float *ref, int V) {
    double e = 0;
    for (int i = 0; i < V; i++) {
        double d = got[i] - ref[i];
        if (d < 0) d = -d;
        if (!(d <= e)) e = d;
    }
    return e;
}

static void lockstep(const char *name) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fixtures/models/%s", name);
    fixture_ref r;
    if (fixture_load(dir, &r) != 0) { CHECK(0, "%s: %s", name, celer_last_error()); fixture_free(&r); return; }
    celer_model *m = celer_model_open(dir, 2);
    CHECK(m != NULL, "%s: %s", name, celer_last_error());
    if (!m) { fixture_free(&r); return; }
    celer_session *s[2] = {celer_session_new(m, r.len[0] + 8, 16), celer_session_new(m, r.len[1] + 8, 16)};
    const int V = r.vocab;
    int done[2] = {0, 0};
    double worst = 0;
    /* first step: 5 tokens of seq_a and 3 of seq_b in one forward */
    const int first[2] = {5, 3};
    for (int step = 0; done[0] < r.len[0] || done[1] < r.len[1]; step++) {
        celer_session *ss[2];
        const int32_t *tk[2];
        int nt[2], k = 0, who[2];
        for (int i = 0; i < 2; i++) {
            if (done[i] >= r.len[i]) continue;
            int want = step == 0 ? first[i] : 1;
            ss[k] = s[i];
            tk[k] = r.seq[i] + done[i];
            nt[k] = want;
            who[k++] = i;
        }
        if (celer_batch_eval(ss, tk, nt, NULL, k) != 0) {
            CHECK(0, "%s step %d: %s", name, step, celer_last_error());
            break;
        }
        for (int q = 0; q < k; q++) {
            int i = who[q];
            done[i] += nt[q];
            double e = row_err(celer_session_logits(s[i]), r.logits[i] + (size_t)(done[i] - 1) * V, V);
            if (e > worst) worst = e;
            CHECK(celer_session_pos(s[i]) == done[i], "%s: session %d at %d, want %d", name, i, celer_session_pos(s[i]), done[i]);
        }
    }
    CHECK(worst <= 2e-3, "%s: batched logits differ from transformers by %g (tolerance 2e-3)", name, worst);
    celer_session_free(s[0]);
    celer_session_free(s[1]);
    celer_model_free(m);
    fixture_free(&r);
}

static void llama(void) { lockstep("llama"); }
static void qwen3_q4(void) { lockstep("qwen3-q4"); }
static void gemma3(void) { lockstep("gemma3"); }
static void gpt_oss(void) { lockstep("gpt_oss"); }

static void bad_batches(void) {
    celer_model *m = celer_model_open("tests/fixtures/models/llama", 1);
    CHECK(m != NULL, "%s", celer_last_error());
    if (!m) return;
    celer_session *a = celer_session_new(m, 32, 8), *b = celer_session_new(m, 32, 8);
    const int32_t ta[2] = {1, 2}, tb[2] = {3, 999};
    celer_session *ss[2] = {a, b};
    const int32_t *tk[2] = {ta, tb};
    int nt[2] = {2, 2};
    CHECK(celer_batch_eval(ss, tk, nt, NULL, 2) != 0, "token 999 accepted");
    CHECK_STR_HAS(celer_last_error(), "999");
    CHECK(celer_session_pos(a) == 0 && celer_session_pos(b) == 0, "a failed batch advanced a session");
    celer_session *dup[2] = {a, a};
    const int32_t *tk2[2] = {ta, ta};
    CHECK(celer_batch_eval(dup, tk2, nt, NULL, 2) != 0, "the same session twice was accepted");
    CHECK_STR_HAS(celer_last_error(), "twice");
    /* more rows than one batch holds: each session falls back to its chunked eval */
    int32_t longer[20];
    for (int i = 0; i < 20; i++) longer[i] = i + 1;
    const int32_t *tk3[2] = {longer, ta};
    int nt3[2] = {20, 1};
    CHECK(celer_batch_eval(ss, tk3, nt3, NULL, 2) == 0, "long + short: %s", celer_last_error());
    CHECK(celer_session_pos(a) == 20 && celer_session_pos(b) == 1, "positions %d %d", celer_session_pos(a), celer_session_pos(b));
    /* a session that wants no logits still advances; the other's logits are its own */
    celer_session *c = celer_session_new(m, 32, 8), *d = celer_session_new(m, 32, 8), *e = celer_session_new(m, 32, 8);
    const int32_t tc[3] = {4, 5, 6}, td[1] = {7};
    celer_session *cd[2] = {c, d};
    const int32_t *tcd[2] = {tc, td};
    int ncd[2] = {3, 1};
    const unsigned char want[2] = {0, 1};
    CHECK(celer_batch_eval(cd, tcd, ncd, want, 2) == 0, "want_logits: %s", celer_last_error());
    CHECK(celer_session_pos(c) == 3 && celer_session_logits(c) == NULL, "a session without wanted logits has some");
    CHECK(celer_session_eval(e, td, 1, NULL, 0) == 0, "alone: %s", celer_last_error());
    const float *ld = celer_session_logits(d), *le = celer_session_logits(e);
    double worst = 0;
    for (int i = 0; ld && le && i < 512; i++) worst = fmax(worst, fabs((double)ld[i] - le[i]));
    CHECK(ld && le && worst < 1e-4, "logits next to a logit-less session differ from alone by %g", worst);
    /* and c, fed on, continues as if it had been fed alone */
    CHECK(celer_session_eval(c, td, 1, NULL, 0) == 0, "%s", celer_last_error());
    celer_session_free(c);
    celer_session_free(d);
    celer_session_free(e);
    celer_session_free(a);
    celer_session_free(b);
    celer_model_free(m);
}

int main(void) {
    RUN(llama);
    RUN(qwen3_q4);
    RUN(gemma3);
    RUN(gpt_oss);
    RUN(bad_batches);
    return harness_done();
}
