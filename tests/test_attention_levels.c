/* tests/test_attention_levels.c: CPU attention at every kernel level this processor
 * runs (CELER_CPU through setting_override; a level it lacks is skipped with the
 * reason printed) against a double-precision softmax(q k^T) v computed here: grouped
 * heads (1, 2, 4, 8 per KV group), head dims on and off the 16-wide tiles, key counts
 * off every tile multiple, cache rows in shuffled position order with gaps and future
 * positions, sliding window, softcap and sinks, 1 to 40 query tokens (decode's 1 to 8
 * split over 2 and 3 threads); each case also
 * through a paged view (attn_kv.blocks: the rows scattered over blocks of 64 in
 * shuffled order, the unused blocks filled with NaN so a wrong lookup shows); and decode
 * steps of several sequences (attention_batch) with caches of different lengths.
 * Every case runs over float32 rows and over bf16 rows (the reference then computed
 * on the rounded values: widening is exact, so the tolerance is the same). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "base/settings.h"
#include "harness.h"
#include "tensor/dtype.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static double rnd(void) { /* [-1, 1) */
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (double)(rng >> 11) / 4503599627370496.0 - 1.0;
}

typedef struct {
    int heads, kv, hd, T, n, window;
    float softcap;
    int sinks;
} acase;

/* out [T, heads, hd] by the definition, in double */
static void reference(const acase *c, const float *q, const int32_t *qpos, const attn_kv *kv, const attn_params *p,
                      double *out) {
    double *s = malloc((size_t)c->n * sizeof *s);
    for (int t = 0; t < c->T; t++)
        for (int h = 0; h < c->heads; h++) {
            int g = h / (c->heads / c->kv);
            const float *qh = q + ((long)t * c->heads + h) * c->hd;
            double mx = p->sinks ? p->sinks[h] : -INFINITY;
            for (int r = 0; r < c->n; r++) {
                int32_t kp = kv->pos[r];
                if (kp > qpos[t] || (p->window > 0 && qpos[t] - kp >= p->window)) { s[r] = NAN; continue; }
                double d = 0;
                for (int i = 0; i < c->hd; i++) d += (double)qh[i] * ((const float *)kv->k)[(long)r * kv->row_stride + (long)g * c->hd + i];
                d *= p->scale;
                if (p->softcap > 0) d = p->softcap * tanh(d / p->softcap);
                s[r] = d;
                if (d > mx) mx = d;
            }
            double l = p->sinks ? exp(p->sinks[h] - mx) : 0;
            double *o = out + ((long)t * c->heads + h) * c->hd;
            for (int i = 0; i < c->hd; i++) o[i] = 0;
            for (int r = 0; r < c->n; r++) {
                if (isnan(s[r])) continue;
                double e = exp(s[r] - mx);
                l += e;
                for (int i = 0; i < c->hd; i++) o[i] += e * ((const float *)kv->v)[(long)r * kv->row_stride + (long)g * c->hd + i];
            }
            for (int i = 0; i < c->hd; i++) o[i] = l > 0 ? o[i] / l : 0;
        }
    free(s);
}

/* n elements of x in a cache's element type (bf16: x must already hold bf16 values) */
static void *as_dtype(const float *x, long n, int dtype) {
    if (dtype == KVT_F32) {
        float *o = malloc((size_t)(n ? n : 1) * 4);
        memcpy(o, x, (size_t)n * 4);
        return o;
    }
    uint16_t *o = malloc((size_t)(n ? n : 1) * 2);
    for (long i = 0; i < n; i++) o[i] = f32_to_bf16(x[i]);
    return o;
}

/* x rounded to bf16 values in place */
static void round_bf16(float *x, long n) {
    for (long i = 0; i < n; i++) x[i] = bf16_to_f32(f32_to_bf16(x[i]));
}

static const char *const dtype_names[] = {"f32", "bf16"};

/* One case for one cache element type: the reference is computed on the rows as the
 * cache holds them (bf16: the rounded values, widened exactly). */
static void run_case_dtype(const acase *c, int level, int dtype) {
    long row = (long)c->kv * c->hd + 8; /* padded rows, as a cache view may have */
    float *k = malloc((size_t)c->n * row * 4), *v = malloc((size_t)c->n * row * 4);
    float *q = malloc((size_t)c->T * c->heads * c->hd * 4), *out = malloc((size_t)c->T * c->heads * c->hd * 4);
    double *ref = malloc((size_t)c->T * c->heads * c->hd * sizeof *ref);
    int32_t *pos = malloc((size_t)c->n * 4), *qpos = malloc((size_t)c->T * 4);
    float sinks[64];
    for (long i = 0; i < c->n * row; i++) { k[i] = (float)rnd(); v[i] = (float)rnd(); }
    if (dtype == KVT_BF16) {
        round_bf16(k, c->n * row);
        round_bf16(v, c->n * row);
    }
    for (long i = 0; i < (long)c->T * c->heads * c->hd; i++) q[i] = (float)(2 * rnd());
    /* positions 0, 2, 4, ... shuffled over the rows; queries at the last positions
     * (some keys lie in their future) */
    for (int r = 0; r < c->n; r++) pos[r] = 2 * r;
    for (int r = c->n - 1; r > 0; r--) {
        int j = (int)((rnd() * 0.5 + 0.5) * (r + 1)) % (r + 1);
        int32_t x = pos[r]; pos[r] = pos[j]; pos[j] = x;
    }
    for (int t = 0; t < c->T; t++) qpos[t] = 2 * c->n - c->T - 5 + t;
    for (int h = 0; h < c->heads; h++) sinks[h] = (float)rnd();
    attn_kv fkv = {k, v, pos, c->n, row, KVT_F32, 0, NULL}; /* the reference's */
    void *ck = as_dtype(k, c->n * row, dtype), *cv = as_dtype(v, c->n * row, dtype);
    attn_kv kv = {ck, cv, pos, c->n, row, dtype, 0, NULL};
    /* the paged copy: block b of the view is block blk[b] of a pool of nb + 3 blocks */
    enum { BR = 64 };
    int nb = (c->n + BR - 1) / BR, pool_blocks = nb + 3;
    float *pk = malloc((size_t)pool_blocks * BR * row * 4), *pv = malloc((size_t)pool_blocks * BR * row * 4);
    int32_t *ppos = malloc((size_t)pool_blocks * BR * 4), *blk = malloc((size_t)pool_blocks * 4);
    for (long i = 0; i < (long)pool_blocks * BR * row; i++) pk[i] = pv[i] = NAN;
    for (long i = 0; i < (long)pool_blocks * BR; i++) ppos[i] = 0; /* visible to every query: a stray read is a NaN */
    for (int b = 0; b < pool_blocks; b++) blk[b] = pool_blocks - 1 - b;
    for (int r = 0; r < c->n; r++) {
        long x = (long)blk[r / BR] * BR + r % BR;
        memcpy(pk + x * row, k + (long)r * row, (size_t)row * 4);
        memcpy(pv + x * row, v + (long)r * row, (size_t)row * 4);
        ppos[x] = pos[r];
    }
    void *cpk = as_dtype(pk, (long)pool_blocks * BR * row, dtype), *cpv = as_dtype(pv, (long)pool_blocks * BR * row, dtype);
    attn_kv pkv = {cpk, cpv, ppos, c->n, row, dtype, BR, blk};
    attn_params p = {c->heads, c->kv, c->hd, 1.0f / sqrtf((float)c->hd), c->window, c->softcap, c->sinks ? sinks : NULL};
    reference(c, q, qpos, &fkv, &p, ref);
    static const char *const names[] = {"generic", "avx2", "avx512"};
    setting_override(SET_CELER_CPU, names[level]);
    for (int threads = 2; threads <= 3; threads++) {
        backend *b = backend_cpu_new(threads, 64);
        CHECK(b != NULL, "backend");
        for (int paged = 0; b && paged < 2; paged++) {
            for (long i = 0; i < (long)c->T * c->heads * c->hd; i++) out[i] = NAN;
            b->ops->attention(b, q, qpos, c->T, paged ? &pkv : &kv, &p, out);
            double worst = 0;
            for (long i = 0; i < (long)c->T * c->heads * c->hd; i++) {
                double e = fabs(out[i] - ref[i]);
                if (!(e <= worst)) worst = e;
            }
            CHECK(worst < 2e-5, "%s %s%s, %d threads: heads %d/%d hd %d T %d n %d window %d softcap %g sinks %d: max err %g",
                  names[level], dtype_names[dtype], paged ? " paged" : "", threads, c->heads, c->kv, c->hd, c->T, c->n,
                  c->window, c->softcap, c->sinks, worst);
        }
        backend_free(b);
    }
    setting_override(SET_CELER_CPU, NULL);
    free(k); free(v); free(q); free(out); free(ref); free(pos); free(qpos);
    free(pk); free(pv); free(ppos); free(blk); free(ck); free(cv); free(cpk); free(cpv);
}

static void run_case(const acase *c, int level) {
    run_case_dtype(c, level, KVT_F32);
    run_case_dtype(c, level, KVT_BF16);
}

static const acase cases[] = {
    {16, 8, 128, 1, 1, 0, 0, 0},     {16, 8, 128, 1, 300, 0, 0, 0},   {16, 8, 128, 40, 77, 0, 0, 0},
    {8, 2, 64, 7, 33, 0, 0, 1},      {8, 8, 256, 3, 50, 20, 0, 0},    {32, 4, 128, 9, 100, 0, 30.0f, 0},
    {4, 4, 80, 5, 41, 0, 0, 0},      {8, 1, 64, 2, 129, 16, 0, 1},    {6, 3, 48, 17, 16, 0, 0, 0},
    {16, 8, 512, 2, 35, 0, 0, 0},    {2, 1, 16, 40, 200, 33, 50.0f, 1},
    /* the rows-in-lanes prefill tiles (8 rows and more) at each tiles-per-task count,
     * and groups of 3 heads (tiles that split a token's heads) */
    {16, 8, 256, 20, 90, 0, 0, 0},   {16, 8, 512, 9, 40, 0, 0, 1},    {12, 4, 64, 21, 70, 25, 0, 0},
    /* decode (T <= 8 and at most 16 rows per group, or more than 16 heads per group:
     * attn_decode_avx512, the keys split over the threads and merged): 1-20 heads per
     * group (odd row counts, pairs across tokens), head dims of 1 to 32 chunks of 16
     * (remainders of 128 of every width), key counts off 16 and off the splits,
     * window 1 (rows that see one key or none, with and without sinks), queries
     * before every key */
    {16, 8, 128, 1, 1000, 0, 0, 0},  {32, 4, 64, 3, 257, 0, 0, 1},    {8, 8, 256, 8, 130, 0, 20.0f, 0},
    {64, 8, 128, 2, 95, 40, 0, 1},   {12, 4, 192, 5, 47, 0, 0, 0},    {4, 2, 16, 4, 65, 0, 0, 1},
    {6, 3, 80, 6, 63, 0, 0, 0},      {16, 2, 512, 1, 33, 0, 0, 0},    {8, 4, 64, 2, 40, 1, 0, 1},
    {8, 4, 64, 2, 40, 1, 0, 0},      {16, 8, 128, 7, 17, 0, 0, 0},    {24, 8, 96, 5, 1, 0, 0, 0},
    {14, 2, 112, 2, 31, 0, 0, 1},    {8, 1, 240, 1, 48, 0, 0, 0},     {32, 8, 144, 4, 200, 64, 30.0f, 1},
    {40, 2, 64, 1, 70, 0, 0, 0},     {40, 2, 64, 3, 70, 0, 0, 1},     {16, 8, 128, 8, 300, 0, 0, 0},
};

/* A decode step of several sequences (attention_batch: one query row each, caches of
 * different lengths, an empty one among them) against the reference of each alone. */
static void run_batch(const acase *c, const int *lens, int nseq, int level, int dtype) {
    const long row = (long)c->kv * c->hd + 8, qd = (long)c->heads * c->hd;
    float *q = malloc((size_t)nseq * qd * 4), *out = malloc((size_t)nseq * qd * 4);
    double *ref = malloc((size_t)nseq * qd * sizeof *ref);
    int32_t *qpos = malloc((size_t)nseq * 4);
    attn_kv *kvs = calloc((size_t)nseq, sizeof *kvs);
    float sinks[64];
    for (int h = 0; h < c->heads; h++) sinks[h] = (float)rnd();
    attn_params p = {c->heads, c->kv, c->hd, 1.0f / sqrtf((float)c->hd), c->window, c->softcap, c->sinks ? sinks : NULL};
    int max_keys = 0;
    for (int i = 0; i < nseq; i++) {
        const int n = lens[i];
        /* an empty cache has no rows at all (k NULL, as a session before its first token) */
        float *k = n ? malloc((size_t)n * row * 4) : NULL, *v = malloc((size_t)(n ? n : 1) * row * 4);
        int32_t *pos = malloc((size_t)(n ? n : 1) * 4);
        for (long j = 0; j < n * row; j++) { k[j] = (float)rnd(); v[j] = (float)rnd(); }
        if (dtype == KVT_BF16) {
            round_bf16(k, n * row);
            round_bf16(v, n * row);
        }
        for (int r = 0; r < n; r++) pos[r] = r;
        for (long j = 0; j < qd; j++) q[i * qd + j] = (float)(2 * rnd());
        qpos[i] = n; /* the token after the cache, as decode */
        const attn_kv fkv = {k, v, pos, n, row, KVT_F32, 0, NULL};
        acase one = *c;
        one.T = 1;
        one.n = n;
        reference(&one, q + i * qd, qpos + i, &fkv, &p, ref + i * qd);
        kvs[i] = (attn_kv){n ? as_dtype(k, n * row, dtype) : NULL, as_dtype(v, n * row, dtype), pos, n, row, dtype, 0, NULL};
        free(k);
        free(v);
        if (n > max_keys) max_keys = n;
    }
    static const char *const names[] = {"generic", "avx2", "avx512"};
    setting_override(SET_CELER_CPU, names[level]);
    for (int threads = 2; threads <= 3; threads++) {
        backend *b = backend_cpu_new(threads, 64);
        CHECK(b != NULL, "backend");
        if (!b) continue;
        for (long j = 0; j < nseq * qd; j++) out[j] = NAN;
        b->ops->attention_batch(b, q, qpos, nseq, kvs, max_keys, dtype, &p, out);
        for (int i = 0; i < nseq; i++) {
            double worst = 0;
            for (long j = 0; j < qd; j++) {
                double e = fabs(out[i * qd + j] - ref[i * qd + j]);
                if (!(e <= worst)) worst = e;
            }
            CHECK(worst < 2e-5, "%s %s batch of %d, %d threads: sequence %d (%d keys) heads %d/%d hd %d window %d softcap %g sinks %d: max err %g",
                  names[level], dtype_names[dtype], nseq, threads, i, lens[i], c->heads, c->kv, c->hd, c->window, c->softcap, c->sinks, worst);
        }
        backend_free(b);
    }
    setting_override(SET_CELER_CPU, NULL);
    for (int i = 0; i < nseq; i++) { free((void *)kvs[i].k); free((void *)kvs[i].v); free((void *)kvs[i].pos); }
    free(kvs); free(q); free(out); free(ref); free(qpos);
}

static int level;
static void attention_cases(void) {
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) run_case(&cases[i], level);
}

static void attention_batches(void) {
    const int mixed[] = {96, 0, 1, 17, 300, 1000, 64, 5};
    const int short8[] = {70, 71, 72, 90, 65, 100, 80, 75};
    const acase qwen = {16, 8, 128, 1, 0, 0, 0, 0}, sink = {8, 2, 64, 1, 0, 20, 30.0f, 1};
    for (int dt = KVT_F32; dt <= KVT_BF16; dt++) {
        run_batch(&qwen, mixed, 8, level, dt);
        run_batch(&qwen, short8, 8, level, dt);
        run_batch(&sink, mixed, 8, level, dt);
        run_batch(&qwen, mixed + 4, 1, level, dt);
    }
}

int main(void) {
    for (level = CPU_GENERIC; level <= CPU_AVX512; level++) {
        if (level > cpu_level_hw()) {
            printf("skip: level %s: this CPU lacks it (it runs up to %s)\n", cpu_level_name(level),
                   cpu_level_name(cpu_level_hw()));
            continue;
        }
        printf("level %s\n", cpu_level_name(level));
        RUN(attention_cases);
        RUN(attention_batches);
    }
    return harness_done();
}
