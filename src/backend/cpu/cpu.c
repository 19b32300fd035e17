/* backend/cpu/cpu.c: the CPU backend's op table (one entry per op of
 * backend/ops_list.h), its construction, and the element-wise ops (norms, RoPE, gated activations, scales, softcaps, residual adds,
 * embedding rows). Mixture-of-experts ops live in moe.c. */
#include "backend/cpu/cpu.h"
#include "backend/cpu/bandwidth.h"

#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/mem.h"
#include "tensor/dtype.h"

static cpu_backend *cpu(backend *b) { return b->impl; }

/* ---- element-wise ops over rows, split over the pool ----------------------------
 * Prefill runs them on [T, n] activations: serial, they left the other threads
 * spinning (a few percent of pp512). Each row (or element range) is computed as
 * alone, so the split never changes a result. */
typedef struct {
    void (*fn)(const void *args, long lo, long hi);
    const void *args;
    long n;
    long align;
} span_job;

static void span_task(void *ctx, int task, int n_tasks) {
    const span_job *j = ctx;
    long lo, hi;
    pool_range(j->n, task, n_tasks, j->align, &lo, &hi);
    if (lo < hi) j->fn(j->args, lo, hi);
}

/* fn over [0, n) in aligned spans; on the calling thread alone when the work (n
 * items of `cost` elements) is too small to be worth waking the others. */
static void spans(backend *b, long n, long cost, long align, void (*fn)(const void *, long, long), const void *args) {
    cpu_backend *c = cpu(b);
    const int tasks = n / align < c->n_threads ? (int)(n / align) : c->n_threads;
    if (tasks < 2 || n * cost < 16384) {
        fn(args, 0, n);
        return;
    }
    span_job j = {fn, args, n, align};
    pool_run(c->pool, tasks, span_task, &j);
}

typedef struct {
    const float *x, *w, *d, *dw;
    float *xm, *y;
    int n, plus_one;
    float eps;
} norm_args;

/* sum x[i]^2 in double over 8 interleaved partial sums: one running sum was a chain
 * of dependent adds (~4% of a q4 pp512 in norms); 8 let the adds overlap and vectorize */
static double sum_squares(const float *x, int n) {
    double s[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    int i = 0;
    for (; i + 8 <= n; i += 8)
        for (int k = 0; k < 8; k++) s[k] += (double)x[i + k] * x[i + k];
    for (int k = 0; i < n; i++, k++) s[k] += (double)x[i] * x[i];
    return ((s[0] + s[1]) + (s[2] + s[3])) + ((s[4] + s[5]) + (s[6] + s[7]));
}

static void rmsnorm_rows(const void *args, long lo, long hi) {
    const norm_args *a = args;
    const int n = a->n;
    for (long t = lo; t < hi; t++) {
        const float *xr = a->x + t * n;
        float *yr = a->y + t * n;
        const double ss = sum_squares(xr, n);
        float r = 1.0f / sqrtf((float)(ss / n) + a->eps);
        for (int i = 0; i < n; i++) {
            float g = a->w ? (a->plus_one ? 1.0f + a->w[i] : a->w[i]) : 1.0f;
            yr[i] = xr[i] * r * g;
        }
    }
}

void cpu_rmsnorm(backend *b, const float *x, const float *w, float *y, int T, int n, float eps, int plus_one) {
    norm_args a = {x, w, NULL, NULL, NULL, y, n, plus_one, eps};
    spans(b, T, n, 1, rmsnorm_rows, &a);
}

typedef struct {
    float *x;
    int n_heads, head_dim;
    const int32_t *pos;
    const rope_table *r;
} rope_args;

static void rope_rows(const void *args, long lo, long hi) {
    const rope_args *a = args;
    enum { CH = 256 }; /* pairs whose cos/sin are computed at once, shared by every head */
    int half = a->r->dim / 2;
    float cs[CH], sn[CH];
    for (long t = lo; t < hi; t++) {
        for (int i0 = 0; i0 < half; i0 += CH) {
            int n = half - i0 < CH ? half - i0 : CH;
            for (int i = 0; i < n; i++) {
                float ang = (float)a->pos[t] * a->r->inv_freq[i0 + i];
                cs[i] = cosf(ang) * a->r->attn_factor;
                sn[i] = sinf(ang) * a->r->attn_factor;
            }
            for (int h = 0; h < a->n_heads; h++) {
                float *v = a->x + (t * a->n_heads + h) * a->head_dim + i0;
                for (int i = 0; i < n; i++) {
                    float p = v[i], c = v[i + half];
                    v[i] = p * cs[i] - c * sn[i];
                    v[i + half] = c * cs[i] + p * sn[i];
                }
            }
        }
    }
}

void cpu_rope(backend *b, float *x, int T, int n_heads, int head_dim, const int32_t *pos, const rope_table *r) {
    rope_args a = {x, n_heads, head_dim, pos, r};
    spans(b, T, (long)n_heads * r->dim, 1, rope_rows, &a);
}

static void add_norm_rows(const void *args, long lo, long hi) {
    const norm_args *a = args;
    const int n = a->n;
    for (long t = lo; t < hi; t++) {
        float *xr = a->xm + t * n;
        const float *dr = a->d + t * n;
        const double ss = a->dw ? sum_squares(dr, n) : 0;
        const float r = a->dw ? 1.0f / sqrtf((float)(ss / n) + a->eps) : 1.0f;
        for (int i = 0; i < n; i++) xr[i] += a->dw ? dr[i] * r * (a->plus_one ? 1.0f + a->dw[i] : a->dw[i]) : dr[i];
    }
    if (a->y) rmsnorm_rows(args, lo, hi);
}

void cpu_add_rmsnorm(backend *b, float *x, const float *d, const float *dw, const float *w, float *y, int T, int n,
                            float eps, int plus_one) {
    norm_args a = {x, w, d, dw, x, y, n, plus_one, eps};
    spans(b, T, n, 1, add_norm_rows, &a);
}

void cpu_qk_norm_rope(backend *b, float *q, float *k, int T, int n_heads, int n_kv, int head_dim, int norm,
                             const float *qw, const float *kw, float eps, int plus_one, const int32_t *pos,
                             const rope_table *r) {
    if (norm) cpu_rmsnorm(b, q, qw, q, T * n_heads, head_dim, eps, plus_one);
    if (norm && k) cpu_rmsnorm(b, k, kw, k, T * n_kv, head_dim, eps, plus_one);
    if (r) cpu_rope(b, q, T, n_heads, head_dim, pos, r);
    if (r && k) cpu_rope(b, k, T, n_kv, head_dim, pos, r);
}

typedef struct {
    const float *g, *u;
    float *y;
    long ldg, ldu, n;
    int act, avx512;
} glu_args;

/* elements [lo, hi) of y [T, n], a row's run at a time */
static void glu_span(const void *args, long lo, long hi) {
    const glu_args *a = args;
    const float k = 0.7978845608028654f; /* sqrt(2/pi) */
    for (long i = lo; i < hi;) {
        const long t = i / a->n, j0 = i - t * a->n, j1 = hi - i < a->n - j0 ? j0 + (hi - i) : a->n;
        const float *g = a->g + t * a->ldg, *u = a->u + t * a->ldu;
        float *y = a->y + t * a->n;
        if (a->act == 0 && a->avx512) {
            glu_silu_avx512(g + j0, u + j0, y + j0, j1 - j0);
        } else if (a->act == 0) {
            for (long j = j0; j < j1; j++) y[j] = g[j] / (1.0f + expf(-g[j])) * u[j];
        } else {
            for (long j = j0; j < j1; j++) {
                const float v = g[j];
                y[j] = 0.5f * v * (1.0f + tanhf(k * (v + 0.044715f * v * v * v))) * u[j];
            }
        }
        i += j1 - j0;
    }
}

void cpu_glu(backend *b, const float *g, long ldg, const float *u, long ldu, float *y, int T, long n, int act) {
    glu_args a = {g, u, y, ldg, ldu, n, act, cpu_level() >= CPU_AVX512};
    spans(b, (long)T * n, 16, 64, glu_span, &a);
}

void cpu_split_cols(backend *b, const float *x, int T, long n0, long n1, long n2, float *y0, float *y1, float *y2) {
    (void)b;
    const long n = n0 + n1 + n2;
    for (long t = 0; t < T; t++) {
        const float *r = x + t * n;
        memcpy(y0 + t * n0, r, (size_t)n0 * sizeof(float));
        memcpy(y1 + t * n1, r + n0, (size_t)n1 * sizeof(float));
        if (n2) memcpy(y2 + t * n2, r + n0 + n1, (size_t)n2 * sizeof(float));
    }
}

void cpu_scale(backend *b, float *x, long n, float s) {
    (void)b;
    for (long i = 0; i < n; i++) x[i] *= s;
}

void cpu_softcap(backend *b, float *x, long n, float cap) {
    (void)b;
    /* divide then multiply, as transformers does, rather than scaling by 1/cap */
    for (long i = 0; i < n; i++) x[i] = cap * tanhf(x[i] / cap);
}

void cpu_add(backend *b, float *y, const float *x, long n) {
    (void)b;
    for (long i = 0; i < n; i++) y[i] += x[i];
}

void cpu_embed(backend *b, const weight *w, const int32_t *tok, int T, float scale, float *x) {
    (void)b;
    for (int t = 0; t < T; t++) {
        float *row = x + (long)t * w->cols;
        weight_row_f32(w, tok[t], row);
        if (scale != 1.0f)
            for (int64_t i = 0; i < w->cols; i++) row[i] *= scale;
    }
}

void cpu_put_rows(backend *b, void *kd, void *vd, int32_t *pd, long row, int slot, const float *k, const float *v,
                  const int32_t *pos, int n, int dtype) {
    (void)b;
    const long total = (long)n * row;
    if (dtype == KVT_BF16) { /* rounded to nearest even, as kv/cache.c rounds a host cache's rows */
        uint16_t *kb = (uint16_t *)kd + (long)slot * row, *vb = (uint16_t *)vd + (long)slot * row;
        for (long i = 0; i < total; i++) {
            kb[i] = f32_to_bf16(k[i]);
            vb[i] = f32_to_bf16(v[i]);
        }
    } else {
        memcpy((float *)kd + (long)slot * row, k, (size_t)total * sizeof(float));
        memcpy((float *)vd + (long)slot * row, v, (size_t)total * sizeof(float));
    }
    memcpy(pd + slot, pos, (size_t)n * sizeof(int32_t));
}

/* ---- memory: host buffers ------------------------------------------------------- */

static void *cpu_alloc(backend *b, size_t bytes) {
    (void)b;
    void *p = mem_aligned(bytes ? bytes : 1, "activations");
    if (p) memset(p, 0, bytes);
    return p;
}

/* calloc: a buffer this large is a fresh anonymous mapping (glibc maps every block
 * over its 32 MiB threshold) that calloc does not clear, so pages are committed as
 * they are first written; smaller ones come cleared from the heap. 16-byte aligned,
 * which every writer of such a buffer (row stores, unaligned vector stores) accepts. */
static void *cpu_alloc_lazy(backend *b, size_t bytes) {
    (void)b;
    return mem_calloc(1, bytes ? bytes : 1, "logits");
}

static void cpu_release(backend *b, void *p) { (void)b; free(p); }

static void cpu_copy(backend *b, void *dst, const void *src, size_t n) {
    (void)b;
    if (n) memmove(dst, src, n);
}

/* The weights stay where they are bound (the file mapping); a layer's dense
 * projections get their GEMM panels packed once, and under fast the 4-bit ones
 * their rows interleaved for the int16 decode products (pack.c), each a second copy
 * within the budget and off with CELER_CPU_PACK=0. */
static int cpu_upload_weight(backend *b, weight *w, int transposed) {
    cpu_backend *c = cpu(b);
    if (transposed) return 0;
    if (c->pack_budget < 0) c->pack_budget = mm_pack_budget();
    if (b->fast && mm_q4r16_eligible(w) && cpu_level() >= CPU_AVX512 && mm_q4_decode_int16() &&
        setting_flag(SET_CELER_CPU_PACK))
        return mm_pack_q4r16(w, &c->pack_budget);
    return mm_pack_weight(w, &c->pack_budget);
}

static void cpu_release_weight(backend *b, weight *w) { (void)b; mm_unpack_weight(w); }

static int cpu_status(backend *b) { (void)b; return 0; }

static double cpu_bandwidth(backend *b) { return cpu_read_bandwidth(b->threads, (size_t)1 << 30); }

static void cpu_destroy(backend *b) {
    cpu_backend *c = cpu(b);
    if (c) {
        pool_free(c->pool);
        free(c->scratch);
        free(c->xprep);
        free(c->attn_part);
        free(c->attn_jobs);
        free(c);
    }
    free(b);
}

static const backend_ops cpu_ops = {
    .name = "CPU",
    .alloc = cpu_alloc,
    .alloc_lazy = cpu_alloc_lazy,
    .release = cpu_release,
    .copy = cpu_copy,
    .upload = cpu_copy,
    .download = cpu_copy,
    .upload_weight = cpu_upload_weight,
    .release_weight = cpu_release_weight,
    .destroy = cpu_destroy,
    .status = cpu_status,
    .bandwidth = cpu_bandwidth,
    .tp_join = cpu_tp_join,
#define CPU_OP_ENTRY(name, mode) .name = cpu_##name,
    BACKEND_OPS(CPU_OP_ENTRY)
#undef CPU_OP_ENTRY
};

backend *backend_cpu_new(int n_threads, int64_t max_cols) {
    if (n_threads <= 0) {
        long n = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = n > 0 ? (int)n : 1;
    }
    if (cpu_level_check() != 0) return NULL; /* CELER_CPU asks for what this CPU lacks */
    backend *b = mem_calloc(1, sizeof *b, "backend");
    cpu_backend *c = mem_calloc(1, sizeof *c, "CPU backend");
    if (!b || !c) goto fail;
    b->ops = &cpu_ops;
    b->impl = c;
    b->threads = n_threads;
    b->device_id = -1;
    c->n_threads = n_threads;
    c->max_cols = max_cols;
    c->pack_budget = -1;
    c->scratch_per = (MM_SCRATCH(max_cols) + 15) & ~15L;
    if (!(c->scratch = mem_aligned((size_t)c->scratch_per * (size_t)n_threads * sizeof(float), "matmul scratch"))) goto fail;
    if (!(c->pool = pool_new(n_threads))) goto fail;
    return b;
fail:
    if (b) {
        b->impl = c;
        cpu_destroy(b);
    } else {
        free(c);
    }
    return NULL;
}
