/* engine/sample.c: token sampling with llama.cpp's knobs (penalties, top-k, top-p,
 * min-p, temperature), a seeded xoshiro256** generator, and what a device sampler
 * needs from it (the loop that uses them is engine/generate.c). Invariant: every
 * buffer is allocated in celer_sampler_new, so picking a token allocates nothing;
 * the same seed and history give the same tokens. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "engine/engine.h"
#include "engine/sample.h"

/* ---------------------------------------------------------------- PRNG */

static uint64_t splitmix64(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

void sample_rng_seed(sample_rng *r, uint64_t seed) {
    for (int i = 0; i < 4; i++) r->s[i] = splitmix64(&seed);
}

static uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

uint64_t sample_rng_next(sample_rng *r) {
    uint64_t *s = r->s;
    uint64_t out = rotl(s[1] * 5, 7) * 9;
    uint64_t t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return out;
}

double sample_rng_uniform(sample_rng *r) { return (double)(sample_rng_next(r) >> 11) * 0x1.0p-53; }

/* ---------------------------------------------------------------- sampler */

typedef struct {
    float l;       /* penalized logit */
    int32_t id;
} cand;

struct celer_sampler {
    celer_sampler_params p;   /* p.stop points at stop below */
    int n_vocab;
    int32_t *stop;            /* [n_stop] */
    sample_rng rng;
    int32_t *hist;            /* [p.penalty_last_n] ring of accepted tokens */
    int hist_len, hist_head;  /* valid entries; next slot to write */
    int32_t *count;           /* [n_vocab] occurrences of each token in the ring */
    uint32_t *mark;           /* [n_vocab] epoch stamps: token already penalized */
    uint32_t epoch;
    float *work;              /* [n_vocab] penalized logits */
    cand *c;                  /* [n_vocab] candidates */
    int32_t *ids;             /* [n_vocab] survivors, best first */
    float *probs;             /* [n_vocab] their probabilities */
};

void celer_sampler_params_default(celer_sampler_params *p) {
    memset(p, 0, sizeof *p);
    p->temperature = 0.0f;
    p->top_k = 40;
    p->top_p = 0.95f;
    p->min_p = 0.05f;
    p->repeat_penalty = 1.0f;
    p->penalty_last_n = 64;
}

celer_sampler *celer_sampler_new(const celer_sampler_params *p, int n_vocab) {
    if (n_vocab <= 0) {
        err_set("sampler: vocabulary size %d, want > 0", n_vocab);
        return NULL;
    }
    if (!(p->temperature == p->temperature) || !(p->top_p == p->top_p) || !(p->min_p == p->min_p) ||
        !(p->repeat_penalty > 0.0f) || p->penalty_last_n < 0 || p->n_stop < 0 || (p->n_stop > 0 && !p->stop) ||
        !isfinite(p->presence_penalty) || !isfinite(p->frequency_penalty) || p->min_p > 1.0f) {
        err_set("sampler: bad parameters (temperature %g, top_p %g, min_p %g in [0, 1], repeat_penalty %g > 0, "
                "penalty_last_n %d >= 0, %d stop tokens)",
                p->temperature, p->top_p, p->min_p, p->repeat_penalty, p->penalty_last_n, p->n_stop);
        return NULL;
    }
    for (int i = 0; i < p->n_stop; i++)
        if (p->stop[i] < 0 || p->stop[i] >= n_vocab) {
            err_set("sampler: stop token %d outside the vocabulary [0, %d)", p->stop[i], n_vocab);
            return NULL;
        }
    celer_sampler *s = mem_calloc(1, sizeof *s, "sampler");
    if (!s) return NULL;
    s->p = *p;
    s->n_vocab = n_vocab;
    size_t V = (size_t)n_vocab, H = (size_t)p->penalty_last_n;
    if ((p->n_stop && !(s->stop = mem_calloc((size_t)p->n_stop, sizeof *s->stop, "sampler stop tokens"))) ||
        (H && !(s->hist = mem_calloc(H, sizeof *s->hist, "sampler history"))) ||
        !(s->count = mem_calloc(V, sizeof *s->count, "sampler counts")) ||
        !(s->mark = mem_calloc(V, sizeof *s->mark, "sampler marks")) ||
        !(s->work = mem_calloc(V, sizeof *s->work, "sampler logits")) ||
        !(s->c = mem_calloc(V, sizeof *s->c, "sampler candidates")) ||
        !(s->ids = mem_calloc(V, sizeof *s->ids, "sampler ids")) ||
        !(s->probs = mem_calloc(V, sizeof *s->probs, "sampler probabilities"))) {
        celer_sampler_free(s);
        return NULL;
    }
    if (p->n_stop) memcpy(s->stop, p->stop, (size_t)p->n_stop * sizeof *s->stop);
    s->p.stop = s->stop;
    sample_rng_seed(&s->rng, p->seed);
    return s;
}

void celer_sampler_free(celer_sampler *s) {
    if (!s) return;
    free(s->stop);
    free(s->hist);
    free(s->count);
    free(s->mark);
    free(s->work);
    free(s->c);
    free(s->ids);
    free(s->probs);
    free(s);
}

void celer_sampler_reset(celer_sampler *s, uint64_t seed) {
    s->hist_len = s->hist_head = 0;
    memset(s->count, 0, (size_t)s->n_vocab * sizeof *s->count);
    s->p.seed = seed;
    sample_rng_seed(&s->rng, seed);
}

void celer_sampler_accept(celer_sampler *s, int32_t t) {
    int cap = s->p.penalty_last_n;
    if (cap == 0 || t < 0 || t >= s->n_vocab) return;
    if (s->hist_len == cap) s->count[s->hist[s->hist_head]]--;
    else s->hist_len++;
    s->hist[s->hist_head] = t;
    s->count[t]++;
    s->hist_head = (s->hist_head + 1) % cap;
}

int celer_sampler_is_stop(const celer_sampler *s, int32_t t) {
    for (int i = 0; i < s->p.n_stop; i++)
        if (s->stop[i] == t) return 1;
    return 0;
}

/* ---------------------------------------------------------------- penalties */

void sample_apply_penalties(celer_sampler *s, float *logits) {
    const celer_sampler_params *p = &s->p;
    if (s->hist_len == 0 || (p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f))
        return;
    if (++s->epoch == 0) {  /* stamps wrapped: start over */
        memset(s->mark, 0, (size_t)s->n_vocab * sizeof *s->mark);
        s->epoch = 1;
    }
    for (int i = 0; i < s->hist_len; i++) {
        int32_t t = s->hist[i];
        if (s->mark[t] == s->epoch) continue;  /* each distinct token once */
        s->mark[t] = s->epoch;
        float l = logits[t];
        l = l <= 0.0f ? l * p->repeat_penalty : l / p->repeat_penalty;
        l -= (float)s->count[t] * p->frequency_penalty + p->presence_penalty;
        logits[t] = l;
    }
}

/* ---------------------------------------------------------------- filters */

/* a ranks before b: higher logit, then lower id. */
static int better(const cand *a, const cand *b) { return a->l > b->l || (a->l == b->l && a->id < b->id); }

static int cand_cmp(const void *x, const void *y) {
    const cand *a = x, *b = y;
    return better(a, b) ? -1 : better(b, a) ? 1 : 0;
}

/* Min-heap (worst candidate at the root) of the k best seen so far. */
static void heap_sift_down(cand *h, int n, int i) {
    for (;;) {
        int l = 2 * i + 1, r = l + 1, w = i;
        if (l < n && better(&h[w], &h[l])) w = l;
        if (r < n && better(&h[w], &h[r])) w = r;
        if (w == i) return;
        cand t = h[i];
        h[i] = h[w];
        h[w] = t;
        i = w;
    }
}

/* Moves the k best of c [n] to c [0, k) (in no particular order). */
static void select_top_k(cand *c, int n, int k) {
    for (int i = k / 2 - 1; i >= 0; i--) heap_sift_down(c, k, i);
    for (int i = k; i < n; i++)
        if (better(&c[i], &c[0])) {
            c[0] = c[i];
            heap_sift_down(c, k, 0);
        }
}

/* The first index of the maximum (the lowest of equals, -0.0 equal to +0.0, NaN never
 * above anything: a NaN at 0 is the answer, as a scan keeping the first strictly
 * greater would give). Two passes: the maximum over 8 independent lanes, then its
 * first index. The one-pass scan carried its candidate from each element to the next,
 * a dependent load and compare per element: ~0.1 ms over a 152k vocabulary, for every
 * row of every greedy step on the host. */
int32_t sample_argmax(const float *l, int n) {
    if (n <= 0 || l[0] != l[0]) return 0;
    float lane[8];
    for (int k = 0; k < 8; k++) lane[k] = -INFINITY;
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) lane[k] = l[i + k] > lane[k] ? l[i + k] : lane[k];
    float m = l[0];
    for (; i < n; i++) m = l[i] > m ? l[i] : m;
    for (int k = 0; k < 8; k++) m = lane[k] > m ? lane[k] : m;
    for (i = 0; i < n; i++)
        if (l[i] == m) return i;
    return 0; /* not reached: m is one of l's values */
}

int sample_candidates(celer_sampler *s, const float *logits, const int32_t **ids, const float **probs) {
    const celer_sampler_params *p = &s->p;
    const int V = s->n_vocab;
    memcpy(s->work, logits, (size_t)V * sizeof *s->work);
    sample_apply_penalties(s, s->work);
    *ids = s->ids;
    *probs = s->probs;
    int n = V;
    for (int i = 0; i < V; i++) s->c[i] = (cand){s->work[i], i};
    /* greedy: the argmax alone */
    cand *c = s->c;
    const int best = sample_argmax(s->work, V);
    const float m = c[best].l;
    if (p->temperature <= 0.0f || !isfinite(m)) {
        s->ids[0] = c[best].id;
        s->probs[0] = 1.0f;
        return 1;
    }
    /* top-k */
    if (p->top_k > 0 && p->top_k < n) {
        select_top_k(c, n, p->top_k);
        n = p->top_k;
    }
    /* softmax normalizer at temperature 1 over what top-k kept */
    double Z = 0.0;
    for (int i = 0; i < n; i++) Z += exp((double)c[i].l - m);
    /* A logit threshold below which no token can survive: min-p's own cut, or for
     * top-p alone the highest cut whose survivors already hold top_p of the mass
     * (the nucleus is a prefix of the sorted order, so it lies inside). Sorting
     * only what passes keeps a large vocabulary cheap. */
    const int use_p = p->top_p < 1.0f, use_min = p->min_p > 0.0f;
    double thr = -INFINITY;
    if (use_min) {
        thr = m + log((double)p->min_p);
    } else if (use_p) {
        for (double d = 8.0; d < 80.0; d += 8.0) {
            double mass = 0.0;
            for (int i = 0; i < n; i++)
                if (c[i].l >= m - d) mass += exp((double)c[i].l - m);
            if (mass >= p->top_p * Z) {
                thr = m - d;
                break;
            }
        }
    }
    int k = 0;
    for (int i = 0; i < n; i++)
        if ((double)c[i].l >= thr) c[k++] = c[i];
    /* k >= 1: thr <= m, so the best candidate always passes */
    n = k;
    qsort(c, (size_t)n, sizeof *c, cand_cmp);
    /* top-p: the smallest prefix whose mass reaches top_p */
    if (use_p) {
        double cum = 0.0;
        for (int i = 0; i < n; i++) {
            cum += exp((double)c[i].l - m) / Z;
            if (cum >= p->top_p) {
                n = i + 1;
                break;
            }
        }
    }
    /* temperature over the survivors, renormalized */
    double sum = 0.0;
    const double inv_t = 1.0 / p->temperature;
    for (int i = 0; i < n; i++) {
        double e = exp(((double)c[i].l - m) * inv_t);
        s->probs[i] = (float)e;
        s->ids[i] = c[i].id;
        sum += e;
    }
    for (int i = 0; i < n; i++) s->probs[i] = (float)(s->probs[i] / sum);
    return n;
}

int32_t celer_sampler_sample(celer_sampler *s, const float *logits) {
    const int32_t *ids;
    const float *probs;
    /* one draw per token whenever temperature > 0, even when one candidate is left,
     * so a device sampler (which cannot tell the host how many were left) keeps the
     * same sequence of draws */
    double u = s->p.temperature > 0.0f ? sample_rng_uniform(&s->rng) : 0.0, cum = 0.0;
    int n = sample_candidates(s, logits, &ids, &probs);
    if (n == 1) return ids[0];
    for (int i = 0; i < n; i++) {
        cum += probs[i];
        if (u < cum) return ids[i];
    }
    return ids[n - 1];  /* u beyond the rounded total */
}

int sample_device_params(const celer_sampler *s, sample_params *p) {
    const celer_sampler_params *q = &s->p;
    if (q->repeat_penalty != 1.0f || q->presence_penalty != 0.0f || q->frequency_penalty != 0.0f) return 0;
    p->temperature = q->temperature;
    p->top_k = q->top_k;
    p->top_p = q->top_p;
    p->min_p = q->min_p;
    return 1;
}

double sample_device_draw(celer_sampler *s, sample_rng *before) {
    *before = s->rng;
    return s->p.temperature > 0.0f ? sample_rng_uniform(&s->rng) : 0.0;
}

void sample_device_undraw(celer_sampler *s, const sample_rng *before) { s->rng = *before; }
