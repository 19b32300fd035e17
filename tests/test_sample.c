/* tests/test_sample.c: the sampler (engine/sample.c) on hand-made distributions:
 * exact surviving sets and renormalized probabilities for top-k, top-p, min-p and
 * temperature, penalties on hand-made logits, greedy == argmax, seeded
 * reproducibility, and sampled generation on the default model. */
#include <math.h>
#include <stdlib.h>

#include "celer.h"
#include "engine/sample.h"
#include "harness.h"

/* A distribution over 8 tokens, deliberately not in id order:
 * id:   0     1     2     3     4     5     6      7
 * p:  0.10  0.40  0.015 0.25  0.05  0.15  0.005  0.03   */
static const double P8[8] = {0.10, 0.40, 0.015, 0.25, 0.05, 0.15, 0.005, 0.03};
static void logits8(float *l) {
    for (int i = 0; i < 8; i++) l[i] = (float)log(P8[i]) + 1.5f;  /* any shift: softmax is the same */
}

static celer_sampler *make(float temp, int top_k, float top_p, float min_p, int vocab) {
    celer_sampler_params p;
    celer_sampler_params_default(&p);
    p.temperature = temp;
    p.top_k = top_k;
    p.top_p = top_p;
    p.min_p = min_p;
    p.seed = 42;
    celer_sampler *s = celer_sampler_new(&p, vocab);
    CHECK(s != NULL, "celer_sampler_new: %s", celer_last_error());
    return s;
}

/* Checks the survivors of smp on logits are want_ids (best first) with
 * probabilities proportional to want_w. */
static void expect_set(celer_sampler *smp, const float *logits, const int32_t *want_ids, const double *want_w, int n,
                       const char *what) {
    const int32_t *ids;
    const float *probs;
    int k = sample_candidates(smp, logits, &ids, &probs);
    CHECK(k == n, "%s: %d survivors, want %d", what, k, n);
    double wsum = 0, psum = 0;
    for (int i = 0; i < n; i++) wsum += want_w[i];
    for (int i = 0; i < k && i < n; i++) {
        CHECK(ids[i] == want_ids[i], "%s: survivor %d is id %d, want %d", what, i, ids[i], want_ids[i]);
        CHECK(fabs(probs[i] - want_w[i] / wsum) < 1e-6, "%s: p[id %d] = %.7f, want %.7f", what, ids[i], probs[i],
              want_w[i] / wsum);
    }
    for (int i = 0; i < k; i++) psum += probs[i];
    CHECK(fabs(psum - 1.0) < 1e-6, "%s: probabilities sum to %.7f", what, psum);
}

static void rng_reproducible(void) {
    sample_rng a, b, c;
    sample_rng_seed(&a, 7);
    sample_rng_seed(&b, 7);
    sample_rng_seed(&c, 8);
    int same_ab = 1, same_ac = 1;
    for (int i = 0; i < 1000; i++) {
        uint64_t x = sample_rng_next(&a), y = sample_rng_next(&b), z = sample_rng_next(&c);
        same_ab &= x == y;
        same_ac &= x == z;
    }
    CHECK(same_ab, "same seed, different sequences");
    CHECK(!same_ac, "seeds 7 and 8 gave the same sequence");
    double lo = 1, hi = 0, mean = 0;
    for (int i = 0; i < 100000; i++) {
        double u = sample_rng_uniform(&a);
        lo = u < lo ? u : lo;
        hi = u > hi ? u : hi;
        mean += u / 100000;
    }
    CHECK(lo >= 0 && hi < 1, "uniform outside [0, 1): [%g, %g]", lo, hi);
    CHECK(fabs(mean - 0.5) < 0.01, "uniform mean %g", mean);
}

static void greedy_is_argmax(void) {
    celer_sampler *s = make(0.0f, 40, 0.95f, 0.05f, 1000);
    if (!s) return;
    sample_rng r;
    sample_rng_seed(&r, 1);
    float *l = malloc(1000 * sizeof *l);
    for (int trial = 0; trial < 50; trial++) {
        int best = 0;
        for (int i = 0; i < 1000; i++) {
            l[i] = (float)(sample_rng_uniform(&r) * 20 - 10);
            if (l[i] > l[best]) best = i;
        }
        int32_t t = celer_sampler_sample(s, l);
        CHECK(t == best, "trial %d: sampled %d, argmax %d", trial, t, best);
    }
    for (int i = 0; i < 1000; i++) l[i] = 0.0f;
    l[17] = l[900] = 5.0f;
    CHECK(celer_sampler_sample(s, l) == 17, "tie: want the lowest id (17)");
    free(l);
    celer_sampler_free(s);
}

/* The host argmax (sample_argmax: celer_session_argmax, the generator's greedy path,
 * the sampler at temperature 0) on ties: the lowest index wins, as torch.argmax, whose
 * picks the greedy references in tests/fixtures were recorded with. */
static void argmax_ties(void) {
    enum { N = 4096 };
    float *l = malloc(N * sizeof *l);
    if (!l) return;
    celer_sampler *s = make(0.0f, 40, 0.95f, 0.05f, N);
    for (int i = 0; i < N; i++) l[i] = 0.0f;
    CHECK(sample_argmax(l, N) == 0, "all equal: %d, want 0", sample_argmax(l, N));
    for (int i = 0; i < N; i++) l[i] = -INFINITY;
    CHECK(sample_argmax(l, N) == 0, "all -inf: %d, want 0", sample_argmax(l, N));
    l[N - 2] = l[N - 1] = 1.0f;
    CHECK(sample_argmax(l, N) == N - 2, "the last two tie: %d, want %d", sample_argmax(l, N), N - 2);
    l[5] = 0.0f;
    l[3] = -0.0f; /* equal to +0.0 */
    l[N - 2] = l[N - 1] = -1.0f;
    CHECK(sample_argmax(l, N) == 3, "-0.0 before +0.0: %d, want 3", sample_argmax(l, N));
    /* NaN is never greater than anything, so a NaN first stays the answer and a NaN
     * elsewhere is passed over (a scan keeping the first strictly greater) */
    l[7] = NAN;
    l[N - 1] = 2.0f;
    CHECK(sample_argmax(l, N) == N - 1, "a NaN inside: %d, want %d", sample_argmax(l, N), N - 1);
    l[0] = NAN;
    CHECK(sample_argmax(l, N) == 0, "a NaN first: %d, want 0", sample_argmax(l, N));
    l[12] = 3.0f; /* 13 values from l[1]: 8 in the lanes, the maximum among the last 5 */
    CHECK(sample_argmax(l + 1, 13) == 11, "13 values, the maximum in the tail: %d, want 11", sample_argmax(l + 1, 13));
    l[12] = -INFINITY;
    CHECK(sample_argmax(l + 1, 13) == 2, "13 values, -0.0 first of the zeros: %d, want 2", sample_argmax(l + 1, 13));
    l[0] = 0.0f;
    l[N - 1] = -1.0f;
    /* random logits on a coarse grid (many ties), the maximum placed again further on */
    sample_rng r;
    sample_rng_seed(&r, 3);
    for (int trial = 0; trial < 200; trial++) {
        const int n = 2 + (int)(sample_rng_next(&r) % (N - 1)); /* 2 to N */
        float top = -INFINITY;
        for (int i = 0; i < n; i++) {
            l[i] = (float)(int)(sample_rng_uniform(&r) * 8) * 0.5f;
            top = l[i] > top ? l[i] : top;
        }
        l[n - 1 - (int)(sample_rng_next(&r) % (n / 2 + 1))] = top;
        for (int i = n; i < N; i++) l[i] = -INFINITY; /* for the sampler, over all N */
        int want = 0;
        while (l[want] != top) want++; /* the first index holding the maximum */
        CHECK(sample_argmax(l, n) == want, "trial %d (n %d): %d, want %d", trial, n, sample_argmax(l, n), want);
        if (s) CHECK(celer_sampler_sample(s, l) == want, "trial %d: the sampler's greedy pick differs", trial);
    }
    if (s) {
        for (int i = 0; i < N; i++) l[i] = (float)(i % 7);
        CHECK(celer_sampler_sample(s, l) == 6, "the sampler at temperature 0: %d, want 6", celer_sampler_sample(s, l));
    }
    celer_sampler_free(s);
    free(l);
}

static void top_k_filter(void) {
    float l[8];
    logits8(l);
    celer_sampler *s = make(1.0f, 3, 1.0f, 0.0f, 8);
    if (!s) return;
    expect_set(s, l, (const int32_t[]){1, 3, 5}, (const double[]){0.40, 0.25, 0.15}, 3, "top_k 3");
    celer_sampler_free(s);
    s = make(1.0f, 1, 1.0f, 0.0f, 8);
    expect_set(s, l, (const int32_t[]){1}, (const double[]){1}, 1, "top_k 1");
    celer_sampler_free(s);
    s = make(1.0f, 100, 1.0f, 0.0f, 8);  /* k above the vocabulary: everything */
    expect_set(s, l, (const int32_t[]){1, 3, 5, 0, 4, 7, 2, 6},
               (const double[]){0.40, 0.25, 0.15, 0.10, 0.05, 0.03, 0.015, 0.005}, 8, "top_k 100");
    celer_sampler_free(s);
}

static void top_p_filter(void) {
    float l[8];
    logits8(l);
    /* cumulative in order 1,3,5,0,...: 0.40, 0.65, 0.80, 0.90 */
    celer_sampler *s = make(1.0f, 0, 0.75f, 0.0f, 8);
    if (!s) return;
    expect_set(s, l, (const int32_t[]){1, 3, 5}, (const double[]){0.40, 0.25, 0.15}, 3, "top_p 0.75");
    celer_sampler_free(s);
    s = make(1.0f, 0, 0.6f, 0.0f, 8);
    expect_set(s, l, (const int32_t[]){1, 3}, (const double[]){0.40, 0.25}, 2, "top_p 0.6");
    celer_sampler_free(s);
    s = make(1.0f, 0, 0.3f, 0.0f, 8);
    expect_set(s, l, (const int32_t[]){1}, (const double[]){1}, 1, "top_p 0.3");
    celer_sampler_free(s);
    s = make(1.0f, 0, 0.95f, 0.0f, 8);  /* 0.90 < 0.95 <= 0.95 */
    expect_set(s, l, (const int32_t[]){1, 3, 5, 0, 4}, (const double[]){0.40, 0.25, 0.15, 0.10, 0.05}, 5, "top_p 0.95");
    celer_sampler_free(s);
    /* after top-k 3 the mass renormalizes: 0.5, 0.8125, 1 -> top_p 0.7 keeps two */
    s = make(1.0f, 3, 0.7f, 0.0f, 8);
    expect_set(s, l, (const int32_t[]){1, 3}, (const double[]){0.40, 0.25}, 2, "top_k 3 + top_p 0.7");
    celer_sampler_free(s);
}

static void top_p_large_vocab(void) {
    /* 50,000 tokens: one at p ~ 0.5, the rest flat; the threshold search must not
     * drop tokens the nucleus needs. */
    enum { V = 50000 };
    float *l = malloc(V * sizeof *l);
    for (int i = 0; i < V; i++) l[i] = 0.0f;
    l[123] = logf((float)(V - 1));  /* e^l = V-1: p = 0.5 */
    celer_sampler *s = make(1.0f, 0, 0.75f, 0.0f, V);
    if (s) {
        const int32_t *ids;
        const float *probs;
        int k = sample_candidates(s, l, &ids, &probs);
        /* 0.5 + m * 0.5/(V-1) >= 0.75 -> m = ceil(0.25 (V-1) / 0.5) */
        int want = 1 + (int)ceil(0.25 * (V - 1) / 0.5);
        CHECK(abs(k - want) <= 1, "nucleus of %d tokens, want %d", k, want);
        CHECK(k > 0 && ids[0] == 123, "best survivor %d, want 123", k > 0 ? ids[0] : -1);
        CHECK(k > 1 && ids[1] == 0, "flat tokens by id: second survivor %d, want 0", k > 1 ? ids[1] : -1);
    }
    celer_sampler_free(s);
    free(l);
}

static void min_p_filter(void) {
    float l[8];
    logits8(l);
    /* min_p 0.2: keep p >= 0.08 */
    celer_sampler *s = make(1.0f, 0, 1.0f, 0.2f, 8);
    if (!s) return;
    expect_set(s, l, (const int32_t[]){1, 3, 5, 0}, (const double[]){0.40, 0.25, 0.15, 0.10}, 4, "min_p 0.2");
    celer_sampler_free(s);
    /* min_p 0.7: keep p >= 0.28: only id 1 */
    s = make(1.0f, 0, 1.0f, 0.7f, 8);
    expect_set(s, l, (const int32_t[]){1}, (const double[]){1}, 1, "min_p 0.7");
    celer_sampler_free(s);
    /* with top_p 0.75 (3 tokens) the shorter cut wins */
    s = make(1.0f, 0, 0.75f, 0.2f, 8);
    expect_set(s, l, (const int32_t[]){1, 3, 5}, (const double[]){0.40, 0.25, 0.15}, 3, "top_p 0.75 + min_p 0.2");
    celer_sampler_free(s);
}

static void temperature_reshapes(void) {
    float l[8];
    logits8(l);
    celer_sampler *s = make(2.0f, 3, 1.0f, 0.0f, 8);
    if (!s) return;
    expect_set(s, l, (const int32_t[]){1, 3, 5}, (const double[]){sqrt(0.40), sqrt(0.25), sqrt(0.15)}, 3,
               "temperature 2 over top_k 3");
    celer_sampler_free(s);
    /* filters see temperature 1: min_p 0.2 keeps 4 tokens even at temperature 0.5 */
    s = make(0.5f, 0, 1.0f, 0.2f, 8);
    expect_set(s, l, (const int32_t[]){1, 3, 5, 0}, (const double[]){0.16, 0.0625, 0.0225, 0.01}, 4,
               "temperature 0.5 after min_p 0.2");
    celer_sampler_free(s);
}

static void sampling_frequencies(void) {
    float l[8];
    logits8(l);
    celer_sampler *s = make(1.0f, 3, 1.0f, 0.0f, 8);
    if (!s) return;
    int count[8] = {0};
    const int N = 40000;
    for (int i = 0; i < N; i++) count[celer_sampler_sample(s, l)]++;
    CHECK(fabs(count[1] / (double)N - 0.5) < 0.01, "id 1: %.4f, want 0.5", count[1] / (double)N);
    CHECK(fabs(count[3] / (double)N - 0.3125) < 0.01, "id 3: %.4f, want 0.3125", count[3] / (double)N);
    CHECK(fabs(count[5] / (double)N - 0.1875) < 0.01, "id 5: %.4f, want 0.1875", count[5] / (double)N);
    CHECK(count[0] + count[2] + count[4] + count[6] + count[7] == 0, "a token outside top-k was drawn");
    celer_sampler_free(s);
}

static void seeded_reproducible(void) {
    float l[8];
    logits8(l);
    int32_t a[200], b[200], c[200];
    celer_sampler *s = make(1.0f, 0, 1.0f, 0.0f, 8);
    if (!s) return;
    for (int i = 0; i < 200; i++) a[i] = celer_sampler_sample(s, l);
    celer_sampler_reset(s, 42);
    for (int i = 0; i < 200; i++) b[i] = celer_sampler_sample(s, l);
    celer_sampler_reset(s, 43);
    for (int i = 0; i < 200; i++) c[i] = celer_sampler_sample(s, l);
    CHECK(memcmp(a, b, sizeof a) == 0, "seed 42 twice gave different draws");
    CHECK(memcmp(a, c, sizeof a) != 0, "seeds 42 and 43 gave the same 200 draws");
    celer_sampler_free(s);
}

/* One draw per token whenever temperature > 0, even when a single candidate is left
 * (top-k 1 here), as the device sampler draws; greedy draws nothing. The device
 * loop's draw is the same next uniform, and taking it back restores the stream. */
static void one_draw_per_token(void) {
    float l[8];
    logits8(l);
    celer_sampler *s = make(0.8f, 1, 1.0f, 0.0f, 8); /* make() seeds 42 */
    celer_sampler *g = make(0.0f, 40, 1.0f, 0.0f, 8);
    if (!s || !g) return;
    sample_rng r;
    sample_rng_seed(&r, 42);
    for (int i = 0; i < 3; i++) {
        celer_sampler_sample(s, l);
        celer_sampler_sample(g, l);
        sample_rng_uniform(&r);
    }
    sample_rng before, gb;
    const double want = sample_rng_uniform(&r);
    CHECK(sample_device_draw(s, &before) == want, "the 4th draw after 3 top-k-1 tokens is not the stream's 4th");
    sample_device_undraw(s, &before);
    CHECK(sample_device_draw(s, &before) == want, "an undone draw did not come back");
    sample_rng_seed(&r, 42);
    sample_device_draw(g, &gb); /* greedy: no draw, so g's stream is untouched */
    CHECK(memcmp(&gb, &r, sizeof r) == 0, "greedy sampling consumed draws");
    celer_sampler_free(s);
    celer_sampler_free(g);
}

static void penalties(void) {
    celer_sampler_params p;
    celer_sampler_params_default(&p);
    p.repeat_penalty = 2.0f;
    p.frequency_penalty = 0.5f;
    p.presence_penalty = 0.25f;
    p.penalty_last_n = 64;
    celer_sampler *s = celer_sampler_new(&p, 4);
    CHECK(s != NULL, "%s", celer_last_error());
    if (!s) return;
    celer_sampler_accept(s, 0);
    celer_sampler_accept(s, 0);
    celer_sampler_accept(s, 1);
    float l[4] = {2.0f, -1.0f, 0.5f, 3.0f};
    sample_apply_penalties(s, l);
    /* id 0: 2/2 - 2*0.5 - 0.25; id 1: -1*2 - 0.5 - 0.25; others untouched */
    CHECK_NEAR(l[0], -0.25, 1e-6);
    CHECK_NEAR(l[1], -2.75, 1e-6);
    CHECK_NEAR(l[2], 0.5, 0);
    CHECK_NEAR(l[3], 3.0, 0);
    /* greedy sees penalized logits: make id 0 the raw argmax, penalized below id 2 */
    float g[4] = {3.0f, -1.0f, 0.5f, 0.4f};
    CHECK(celer_sampler_sample(s, g) == 2, "greedy after penalties picked %d, want 2", celer_sampler_sample(s, g));
    celer_sampler_free(s);

    /* a window of 2: after 0, 0, 1 it holds 0 and 1 once each */
    p.repeat_penalty = 1.0f;
    p.presence_penalty = 0.0f;
    p.penalty_last_n = 2;
    s = celer_sampler_new(&p, 4);
    if (!s) return;
    celer_sampler_accept(s, 0);
    celer_sampler_accept(s, 0);
    celer_sampler_accept(s, 1);
    float w[4] = {2.0f, -1.0f, 0.5f, 3.0f};
    sample_apply_penalties(s, w);
    CHECK_NEAR(w[0], 1.5, 1e-6);
    CHECK_NEAR(w[1], -1.5, 1e-6);
    celer_sampler_accept(s, 3);
    celer_sampler_accept(s, 3);  /* the window now holds 3, 3 */
    float v[4] = {2.0f, -1.0f, 0.5f, 3.0f};
    sample_apply_penalties(s, v);
    CHECK_NEAR(v[0], 2.0, 0);
    CHECK_NEAR(v[3], 2.0, 1e-6);
    celer_sampler_free(s);
}

static void stop_and_bad_params(void) {
    celer_sampler_params p;
    celer_sampler_params_default(&p);
    int32_t stop[2] = {5, 9};
    p.stop = stop;
    p.n_stop = 2;
    celer_sampler *s = celer_sampler_new(&p, 16);
    CHECK(s != NULL, "%s", celer_last_error());
    stop[0] = 1;  /* the sampler keeps its own copy */
    CHECK(s && celer_sampler_is_stop(s, 5) && celer_sampler_is_stop(s, 9) && !celer_sampler_is_stop(s, 1),
          "stop tokens 5 and 9");
    celer_sampler_free(s);
    celer_sampler_free(NULL);
    stop[0] = 16;
    CHECK(celer_sampler_new(&p, 16) == NULL, "stop token outside the vocabulary accepted");
    CHECK_STR_HAS(celer_last_error(), "stop token 16");
    p.n_stop = 0;
    p.repeat_penalty = 0.0f;
    CHECK(celer_sampler_new(&p, 16) == NULL, "repeat_penalty 0 accepted");
    CHECK_STR_HAS(celer_last_error(), "repeat_penalty");
    p.repeat_penalty = 1.0f;
    CHECK(celer_sampler_new(&p, 0) == NULL, "vocabulary 0 accepted");
}

static void generate_on_default_model(void) {
    celer_model *m = celer_model_open("models/default", 2);
    CHECK(m != NULL, "models/default: %s", celer_last_error());
    if (!m) return;
    const int32_t prompt[] = {0, 301, 359, 477, 294, 606};  /* "And it came to pass" */
    int32_t g[32], a[32], b[32];
    celer_session *s = celer_session_new(m, 64, 16);
    int ng = celer_generate_greedy(s, prompt, 6, 32, -1, g);
    celer_session_free(s);

    celer_sampler_params p;
    celer_sampler_params_default(&p);  /* temperature 0 */
    celer_sampler *smp = celer_sampler_new(&p, 4096);
    s = celer_session_new(m, 64, 16);
    int na = celer_generate(s, smp, prompt, 6, 32, -1, a, NULL);
    CHECK(na == ng && ng == 32 && memcmp(a, g, sizeof g) == 0, "temperature 0 differs from greedy");
    celer_session_free(s);
    celer_sampler_free(smp);

    p.temperature = 0.8f;
    p.repeat_penalty = 1.1f;
    p.seed = 1234;
    int32_t *seqs[2] = {a, b};
    for (int r = 0; r < 2; r++) {
        smp = celer_sampler_new(&p, 4096);
        s = celer_session_new(m, 64, 16);
        int n = celer_generate(s, smp, prompt, 6, 32, -1, seqs[r], NULL);
        CHECK(n == 32, "sampled run %d: %d tokens: %s", r, n, celer_last_error());
        celer_session_free(s);
        celer_sampler_free(smp);
    }
    CHECK(memcmp(a, b, sizeof a) == 0, "seed 1234 twice gave different text");
    CHECK(memcmp(a, g, sizeof a) != 0, "temperature 0.8 reproduced greedy exactly (suspicious)");
    celer_model_free(m);
}

int main(void) {
    RUN(rng_reproducible);
    RUN(greedy_is_argmax);
    RUN(argmax_ties);
    RUN(top_k_filter);
    RUN(top_p_filter);
    RUN(top_p_large_vocab);
    RUN(min_p_filter);
    RUN(temperature_reshapes);
    RUN(sampling_frequencies);
    RUN(seeded_reproducible);
    RUN(one_draw_per_token);
    RUN(penalties);
    RUN(stop_and_bad_params);
    RUN(generate_on_default_model);
    return harness_done();
}
