/* backend/backend.h: the one table of operations a layer plan needs. A backend owns
 * its threads and scratch; activations are float32 in buffers the caller provides.
 * The CPU backend is the reference; others must agree with it on every fixture. */
#ifndef CELER_BACKEND_H
#define CELER_BACKEND_H
#include <stdint.h>

#include "tensor/weight.h"

/* RoPE over pairs (i, i + dim/2) for i < dim/2 of each head's first `dim` channels. */
typedef struct {
    int dim;             /* rotated channels (<= head_dim) */
    float *inv_freq;     /* [dim / 2]; 0 leaves a pair unrotated */
    float attn_factor;   /* cos and sin are multiplied by this */
} rope_table;

/* What attention reads of one layer's cache: n rows, row r at k + r * row_stride. */
typedef struct {
    const float *k;      /* [n, n_kv, head_dim] rows, row_stride floats apart */
    const float *v;      /* same layout */
    const int32_t *pos;  /* [n] absolute position of each row */
    int n;
    long row_stride;
} attn_kv;

typedef struct {
    int n_heads, n_kv, head_dim;
    float scale;         /* multiplies q.k */
    int window;          /* > 0: key visible iff qpos - kpos < window */
    float softcap;       /* > 0: scores = softcap * tanh(scores / softcap) */
    const float *sinks;  /* [n_heads] extra softmax logit per head, or NULL */
} attn_params;

typedef struct backend backend;

typedef struct {
    const char *name;
    /* W [rows, cols] @ x [T, cols] -> y [T, rows] */
    void (*matmul)(backend *b, const weight *w, const float *x, float *y, int T);
    /* y [T, n] = x * rsqrt(mean(x^2) + eps) * (w or 1 + w or 1 when w is NULL); y may be x */
    void (*rmsnorm)(backend *b, const float *x, const float *w, float *y, int T, int n, float eps, int plus_one);
    /* x [T, n_heads, head_dim] rotated in place at positions pos [T] */
    void (*rope)(backend *b, float *x, int T, int n_heads, int head_dim, const int32_t *pos, const rope_table *r);
    /* q [T, n_heads, head_dim] at positions qpos [T] over kv -> out [T, n_heads, head_dim]; causal */
    void (*attention)(backend *b, const float *q, const int32_t *qpos, int T, const attn_kv *kv,
                      const attn_params *p, float *out);
    /* g [n] <- silu(g) * u  (act 0) or gelu_tanh(g) * u (act 1) */
    void (*glu)(backend *b, float *g, const float *u, long n, int act);
    /* y [n] += x */
    void (*add)(backend *b, float *y, const float *x, long n);
    /* x [T, cols] = rows tok [T] of the embedding weight, times scale */
    void (*embed)(backend *b, const weight *w, const int32_t *tok, int T, float scale, float *x);
} backend_ops;

struct backend {
    const backend_ops *ops;
    void *impl;
};

/* CPU backend with n_threads (<= 0: all cores). max_cols bounds the widest weight row. */
backend *backend_cpu_new(int n_threads, int64_t max_cols);
void backend_free(backend *b);
int backend_threads(const backend *b);
#endif
