/* backend/cpu/attention.c: grouped-query causal attention over a cache view, with
 * optional sliding window, logit softcap and per-head sinks. One pass over the keys
 * with an online softmax (running max and sum), so no [T, n] score matrix is stored.
 * At the avx512 level decode calls (a few tokens) split the keys over the threads
 * (flash-decoding, attn_decode_avx512.c, merged here) and prefill calls put the query
 * rows of a KV group through key tiles of 16 (attention_avx512.c); otherwise each
 * (token, head) walks the keys one at a time with the level's dot / axpy loops. Cache
 * rows are float32 or bf16 (kv_dtype; bf16 widened exactly as it is read, so the
 * arithmetic is float32 either way). A paged view (attn_kv.blocks) is read through its
 * block table (the avx512 tile of 16 keys divides KV_BLOCK, so a tile is one run of
 * rows in one pool block; kv/cache.c checks that at build time). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/attn_kernels.h"
#include "backend/cpu/cpu.h"
#include "base/mem.h"
#include "tensor/dtype.h"

#define KB 64 /* keys scored per block */

static float dot_portable(const float *a, const void *b, int n) {
    const float *x = b;
    float d = 0.0f;
    for (int c = 0; c < n; c++) d += a[c] * x[c];
    return d;
}

static void scale_axpy_portable(float *o, float f, float e, const void *v, int n) {
    const float *x = v;
    for (int c = 0; c < n; c++) o[c] = o[c] * f + e * x[c];
}

static float dot_portable_bf16(const float *a, const void *b, int n) {
    const uint16_t *x = b;
    float d = 0.0f;
    for (int c = 0; c < n; c++) d += a[c] * bf16_to_f32(x[c]);
    return d;
}

static void scale_axpy_portable_bf16(float *o, float f, float e, const void *v, int n) {
    const uint16_t *x = v;
    for (int c = 0; c < n; c++) o[c] = o[c] * f + e * bf16_to_f32(x[c]);
}

static const attn_kernels attn_kernels_portable[2] = {{dot_portable, scale_axpy_portable},
                                                      {dot_portable_bf16, scale_axpy_portable_bf16}};

typedef struct {
    const float *q;
    const int32_t *qpos;
    int T;
    const attn_kv *kv;
    const attn_params *p;
    float *out;
    const attn_kernels *k;
} attn_job;

static void attend_one(const attn_job *j, int t, int h) {
    const attn_params *p = j->p;
    const attn_kv *kv = j->kv;
    int hd = p->head_dim, g = h / (p->n_heads / p->n_kv);
    const float *q = j->q + ((long)t * p->n_heads + h) * hd;
    float *o = j->out + ((long)t * p->n_heads + h) * hd;
    int32_t qp = j->qpos[t];
    const size_t esz = (size_t)kv_dtype_size(kv->dtype);
    float m = -INFINITY, l = 0.0f, s[KB];
    long idx[KB];
    for (int d = 0; d < hd; d++) o[d] = 0.0f;
    if (p->sinks) { m = p->sinks[h]; l = 1.0f; }
    for (int r0 = 0; r0 < kv->n; r0 += KB) {
        int nb = 0;
        float bm = -INFINITY;
        for (int r = r0; r < kv->n && r < r0 + KB; r++) {
            const long x = attn_kv_row(kv, r);
            int32_t kp = kv->pos[x];
            if (kp > qp || (p->window > 0 && qp - kp >= p->window)) continue;
            const char *k = (const char *)kv->k + (size_t)(x * kv->row_stride + (long)g * hd) * esz;
            float d = j->k->dot(q, k, hd) * p->scale;
            if (p->softcap > 0) d = p->softcap * tanhf(d / p->softcap);
            s[nb] = d;
            idx[nb++] = x;
            if (d > bm) bm = d;
        }
        if (!nb) continue;
        float f = 1.0f; /* rescales o once, folded into the first value added */
        if (bm > m) {
            f = expf(m - bm);
            l *= f;
            m = bm;
        }
        for (int i = 0; i < nb; i++) {
            float e = expf(s[i] - m);
            l += e;
            const char *v = (const char *)kv->v + (size_t)(idx[i] * kv->row_stride + (long)g * hd) * esz;
            j->k->scale_axpy(o, i == 0 ? f : 1.0f, e, v, hd);
        }
    }
    float inv = l > 0 ? 1.0f / l : 0.0f;
    for (int d = 0; d < hd; d++) o[d] *= inv;
}

static void attn_task(void *ctx, int task, int n_tasks) {
    attn_job *j = ctx;
    long lo, hi, total = (long)j->T * j->p->n_heads;
    pool_range(total, task, n_tasks, 1, &lo, &hi);
    for (long i = lo; i < hi; i++) attend_one(j, (int)(i / j->p->n_heads), (int)(i % j->p->n_heads));
}

/* avx512 prefill tiles: task i covers token tile i / n_kv (tq tokens) of KV group i % n_kv. */
typedef struct {
    const float *q;
    const int32_t *qpos;
    int T, tq;            /* tokens per task */
    const attn_kv *kv;
    const attn_params *p;
    float *out;
} tile_job;

static void tile_task(void *ctx, int task, int n_tasks) {
    (void)n_tasks;
    const tile_job *j = ctx;
    int t0 = (task / j->p->n_kv) * j->tq, t1 = t0 + j->tq < j->T ? t0 + j->tq : j->T;
    attn_rows_avx512(j->q, j->qpos, t0, t1, task % j->p->n_kv, j->kv, j->p, j->out);
}

/* Decode (flash-decoding): the cache rows are split into `splits` ranges of whole
 * 16-key tiles, one task each; a task computes every head's softmax state over its
 * range (attn_decode_avx512), streaming the rows of all KV groups, so every thread
 * reads the cache even when there is one KV group. The states are then merged. */
#define ATTN_DEC_MAX_SPLITS 64
#define ATTN_DEC_SPLITS_PER_THREAD 4
/* Query rows per KV group up to which a call of at most ATTN_DEC_MAX_T tokens goes to
 * decode rather than the rows-in-lanes tiles (measured, docs/cpu-kernels.md: decode
 * loads a group's keys once per pair of rows, the tiles once per 16 to 64 rows). */
#define ATTN_DEC_MAX_ROWS 16
typedef struct {
    const float *q;
    const int32_t *qpos;
    int T;
    const attn_kv *kv;
    const attn_params *p;
    int splits;
    long tiles;
    float *part; /* [splits] x {o [rows, head_dim], m [rows], l [rows]} (splits == 1: m, l only; o is out) */
    long per;    /* floats of one split's part */
    float *out;
} dec_job;

static void dec_parts(const dec_job *j, int s, float **o, float **m, float **l) {
    const long rows = (long)j->T * j->p->n_heads;
    float *base = j->part + s * j->per;
    *o = j->splits == 1 ? j->out : base;
    *m = j->splits == 1 ? base : base + rows * j->p->head_dim;
    *l = *m + rows;
}

/* Split `s` of `splits` of one decode job. */
static void dec_split(const dec_job *j, int s, int splits) {
    long lo, hi;
    pool_range(j->tiles, s, splits, 1, &lo, &hi);
    float *o, *m, *l;
    dec_parts(j, s, &o, &m, &l);
    const long r_hi = hi * 16 < j->kv->n ? hi * 16 : j->kv->n;
    attn_decode_avx512(j->q, j->qpos, j->T, j->kv, j->p, (int)(lo * 16), (int)r_hi, o, m, l);
}

static void dec_task(void *ctx, int task, int n_tasks) { dec_split(ctx, task, n_tasks); }

/* out row = (sum_s e^(m_s - M) o_s) / (sum_s e^(m_s - M) l_s + e^(sink - M)), M the
 * largest of the m_s and the sink; a row that saw no key (and no sink) gets zeros. */
static void dec_merge(const dec_job *j) {
    const int H = j->p->n_heads, hd = j->p->head_dim, rows = j->T * H, S = j->splits;
    float *o[ATTN_DEC_MAX_SPLITS], *m[ATTN_DEC_MAX_SPLITS], *l[ATTN_DEC_MAX_SPLITS], w[ATTN_DEC_MAX_SPLITS];
    for (int s = 0; s < S; s++) dec_parts(j, s, &o[s], &m[s], &l[s]);
    for (int r = 0; r < rows; r++) {
        const float sink = j->p->sinks ? j->p->sinks[r % H] : -INFINITY;
        float M = sink;
        for (int s = 0; s < S; s++)
            if (m[s][r] > M) M = m[s][r];
        float *dst = j->out + (long)r * hd;
        if (M == -INFINITY) {
            memset(dst, 0, sizeof(float) * (size_t)hd);
            continue;
        }
        float L = j->p->sinks ? expf(sink - M) : 0.0f;
        for (int s = 0; s < S; s++) {
            w[s] = m[s][r] == -INFINITY ? 0.0f : expf(m[s][r] - M);
            L += l[s][r] * w[s];
        }
        const float inv = L > 0 ? 1.0f / L : 0.0f;
        for (int s = 0; s < S; s++) w[s] *= inv;
        if (S == 1) {
            for (int d = 0; d < hd; d++) dst[d] *= w[0];
            continue;
        }
        for (int d = 0; d < hd; d++) {
            float acc = 0.0f;
            for (int s = 0; s < S; s++) acc += o[s][(long)r * hd + d] * w[s];
            dst[d] = acc;
        }
    }
}

/* 1 when the decode path ran; 0 when its state buffer could not grow. */
static int attention_decode(cpu_backend *c, const float *q, const int32_t *qpos, int T, const attn_kv *kv,
                            const attn_params *p, float *out) {
    const long rows = (long)T * p->n_heads, tiles = (kv->n + 15) / 16;
    /* a few splits per thread (of 8 tiles at least), claimed as threads come free, so
     * a thread slowed down by another process leaves its last ones to the others */
    long splits = (long)c->n_threads * ATTN_DEC_SPLITS_PER_THREAD;
    if (splits > tiles / 8) splits = tiles / 8;
    if (splits < c->n_threads) splits = c->n_threads < tiles ? c->n_threads : tiles;
    if (splits > ATTN_DEC_MAX_SPLITS) splits = ATTN_DEC_MAX_SPLITS;
    if (splits < 1) splits = 1; /* no keys: the rows get zeros (or nothing but their sink) */
    const long per = splits == 1 ? 2 * rows : rows * (p->head_dim + 2);
    if ((long)splits * per > c->attn_part_floats) {
        float *np = mem_aligned(sizeof(float) * (size_t)splits * (size_t)per, "decode attention state");
        if (!np) return 0;
        free(c->attn_part);
        c->attn_part = np;
        c->attn_part_floats = (long)splits * per;
    }
    dec_job j = {q, qpos, T, kv, p, (int)splits, tiles, c->attn_part, per, out};
    pool_run(c->pool, (int)splits, dec_task, &j);
    dec_merge(&j);
    return 1;
}

void cpu_attention(backend *b, const float *q, const int32_t *qpos, int T, const attn_kv *kv,
                   const attn_params *p, float *out) {
    cpu_backend *c = b->impl;
    const int hpk = p->n_heads / p->n_kv;
    if (cpu_level() >= CPU_AVX512 && p->head_dim % 16 == 0 && p->head_dim <= ATTN_MAX_HD) {
        /* rows in lanes need half a vector of rows per group and pay off from 16 */
        const int rows = (long)T * hpk >= 8 && hpk <= 16;
        if (T <= ATTN_DEC_MAX_T && (!rows || (long)T * hpk <= ATTN_DEC_MAX_ROWS) &&
            attention_decode(c, q, qpos, T, kv, p, out))
            return;
        if (rows) {
            tile_job tj = {q, qpos, T, 16 / hpk * ATTN_ROW_TILES(p->head_dim), kv, p, out};
            pool_run(c->pool, ((T + tj.tq - 1) / tj.tq) * p->n_kv, tile_task, &tj);
            return;
        }
    }
    const int level = cpu_level();
    const int dt = kv->dtype == KVT_BF16;
    attn_job j = {q, qpos, T, kv, p, out,
                  level >= CPU_AVX512 && p->head_dim % 16 == 0 ? &attn_kernels_avx512[dt]
                  : level >= CPU_AVX2 && p->head_dim % 8 == 0  ? &attn_kernels_avx2[dt]
                                                               : &attn_kernels_portable[dt]};
    long total = (long)T * p->n_heads;
    int tasks = total < c->n_threads ? (int)total : c->n_threads;
    pool_run(c->pool, tasks, attn_task, &j);
}

/* A decode step of n sequences at the avx512 level (one query row each): one pool run
 * for the whole layer, a task per (sequence, key range), instead of a pool run per
 * sequence (8 sequences of ~100 keys on 2 threads: 9.7 of a 64 ms step went to 224
 * pool runs of tiny tasks; docs/benchmarks/cpu-batched.md). Sequence i gets
 * splits[i] ranges: one while the step has a few tasks per thread anyway, more for
 * long caches, as attention_decode splits one. */
typedef struct {
    dec_job *jobs;
    int n;
    const int *first; /* [n + 1]: sequence i's tasks are first[i] .. first[i + 1] - 1 */
} dec_batch;

static void dec_batch_task(void *ctx, int task, int n_tasks) {
    (void)n_tasks;
    const dec_batch *b = ctx;
    int i = 0;
    while (b->first[i + 1] <= task) i++;
    dec_split(&b->jobs[i], task - b->first[i], b->first[i + 1] - b->first[i]);
}

/* 1 when it ran; 0 when a buffer could not grow (the caller goes per sequence). */
static int attention_decode_batch(cpu_backend *c, const float *q, const int32_t *qpos, int n, const attn_kv *kvs,
                                  const attn_params *p, float *out) {
    const long qd = (long)p->n_heads * p->head_dim, rows = p->n_heads;
    long total_tiles = 0;
    for (int i = 0; i < n; i++) total_tiles += kvs[i].k && kvs[i].n > 0 ? (kvs[i].n + 15) / 16 : 0;
    const long want = (long)c->n_threads * ATTN_DEC_SPLITS_PER_THREAD; /* tasks the step should have */
    const size_t job_bytes = (sizeof(dec_job) + sizeof(int)) * (size_t)(n + 1);
    if (n + 1 > c->attn_jobs_cap) {
        void *nj = malloc(job_bytes);
        if (!nj) return 0;
        free(c->attn_jobs);
        c->attn_jobs = nj;
        c->attn_jobs_cap = n + 1;
    }
    dec_job *jobs = c->attn_jobs;
    int *first = (int *)(jobs + n + 1);
    long floats = 0;
    first[0] = 0;
    for (int i = 0; i < n; i++) {
        const long tiles = kvs[i].k && kvs[i].n > 0 ? (kvs[i].n + 15) / 16 : 0;
        /* this sequence's share of the wanted tasks, in ranges of 8 tiles at least */
        long splits = total_tiles > 0 ? (want * tiles + total_tiles - 1) / total_tiles : 0;
        if (splits > tiles / 8) splits = tiles / 8;
        if (splits > ATTN_DEC_MAX_SPLITS) splits = ATTN_DEC_MAX_SPLITS;
        if (splits < 1) splits = tiles > 0;
        first[i + 1] = first[i] + (int)splits;
        jobs[i] = (dec_job){q + i * qd, qpos + i, 1, &kvs[i], p, (int)splits, tiles, NULL,
                            splits == 1 ? 2 * rows : rows * (p->head_dim + 2), out + i * qd};
        floats += splits * jobs[i].per;
    }
    if (floats > c->attn_part_floats) {
        float *np = mem_aligned(sizeof(float) * (size_t)floats, "decode attention state");
        if (!np) return 0;
        free(c->attn_part);
        c->attn_part = np;
        c->attn_part_floats = floats;
    }
    float *part = c->attn_part;
    for (int i = 0; i < n; i++) {
        jobs[i].part = part;
        part += (long)jobs[i].splits * jobs[i].per;
    }
    dec_batch b = {jobs, n, first};
    if (first[n] > 0) pool_run(c->pool, first[n], dec_batch_task, &b);
    for (int i = 0; i < n; i++) {
        if (jobs[i].splits > 0) dec_merge(&jobs[i]);
        else memset(out + i * qd, 0, (size_t)qd * sizeof(float)); /* no keys */
    }
    return 1;
}

void cpu_attention_batch(backend *b, const float *q, const int32_t *qpos, int n, const attn_kv *kvs, int max_keys,
                         int dtype, const attn_params *p, float *out) {
    (void)max_keys;
    (void)dtype; /* each view carries its own */
    cpu_backend *c = b->impl;
    if (cpu_level() >= CPU_AVX512 && p->head_dim % 16 == 0 && p->head_dim <= ATTN_MAX_HD &&
        attention_decode_batch(c, q, qpos, n, kvs, p, out))
        return;
    const long qd = (long)p->n_heads * p->head_dim;
    for (int i = 0; i < n; i++) {
        if (!kvs[i].k || kvs[i].n <= 0) {
            memset(out + i * qd, 0, (size_t)qd * sizeof(float));
            continue;
        }
        cpu_attention(b, q + i * qd, qpos + i, 1, &kvs[i], p, out + i * qd);
    }
}
