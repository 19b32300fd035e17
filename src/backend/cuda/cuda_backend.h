/* backend/cuda/cuda_backend.h: the CUDA backend's state, shared by its memory and
 * weight code (backend_cuda.c) and its recorded arithmetic (step_ops.c). Private to
 * libceler-cuda.so. */
#ifndef CELER_CUDA_BACKEND_H
#define CELER_CUDA_BACKEND_H
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <stddef.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_kernels.h"

typedef struct {
    void *p;
    size_t cap;
} grow_buf;

/* One arithmetic op as recorded: every field a kernel launch reads, by value, so
 * two steps that launch the same kernels record byte-identical ops (the struct is
 * zeroed before it is filled). Values that change from step to step (token ids,
 * positions, a cache slot, a key count) are not here but in the step's value block
 * at offset dyn, which the kernels read from device memory when the step runs. */
typedef struct {
    int op;       /* SOP_* */
    int dyn;      /* offset of this op's values in the value block, or -1 */
    union {
        struct { weight w; const float *x; float *y; int T; } mm;
        struct { const float *x, *w; float *y; int T, n, plus_one; float eps; } norm;
        struct { float *x; const int32_t *pos; const float *inv_freq; int T, n_heads, head_dim, dim; float factor; } rope;
        struct { float *x; const float *d, *dw, *w; float *y; int T, n, plus_one; float eps; } addnorm;
        struct {
            float *q, *k;
            const float *qw, *kw, *inv_freq;
            const int32_t *pos;
            int T, n_heads, n_kv, head_dim, norm, plus_one, dim;
            float eps, factor;
        } qk;
        struct { const float *q; const int32_t *qpos; attn_kv kv; attn_params p; float *out; int T; } attn;
        struct { float *g; const float *u; long n; int act; } glu;
        struct { float *x; long n; float s; } scale; /* scale and softcap */
        struct { float *y; const float *x; long n; } add;
        struct { weight w; const int32_t *tok; float *x; int T; float scale; } embed;
        struct { void *dst; const void *src; size_t n; } copy; /* copy, and upload (src in the value block) */
        struct { float *kd, *vd; int32_t *pd; long row; int slot, n; const float *k, *v; } put;
        struct { const float *logits; int V; cuk_sample_params p; int32_t *tok, *host; } smp; /* u is a value */
    } u;
} step_op;

enum { SOP_MATMUL, SOP_RMSNORM, SOP_ROPE, SOP_ATTN, SOP_GLU, SOP_SCALE, SOP_SOFTCAP, SOP_ADD, SOP_EMBED, SOP_COPY,
       SOP_UPLOAD, SOP_PUT_ROWS, SOP_SAMPLE, SOP_ADD_RMSNORM, SOP_QK_NORM_ROPE, SOP_KINDS };

/* A captured step: its ops and the graph they were captured into. */
typedef struct {
    step_op *ops;
    int n;
    cudaGraphExec_t exec;
    long used; /* step counter at the last launch (least recently used is evicted) */
} step_graph;

#define STEP_GRAPHS 4
#define STEP_VALUES ((size_t)64 << 10) /* bytes of one step's values */

typedef struct {
    int id;
    cudaStream_t stream;
    cublasHandle_t blas;
    int failed;
    char why[512];
    grow_buf mv, xbf, wbf, att, moe_idx, moe_w, smp;
    int32_t *sampled;     /* [SAMPLE_SLOTS] mapped pinned: tokens the sampler wrote */
    int32_t *sampled_dev; /* its device alias */
    cudaEvent_t sample_done[SAMPLE_SLOTS];
    void *host_route;     /* host staging of router logits and selections */
    size_t host_route_cap;
    char *stage;          /* pinned [2][STAGE_HALF] upload staging */
    int half;             /* the half being filled */
    size_t used;          /* bytes of it used */
    cudaEvent_t left[2];  /* recorded when the fill moved off each half */
    int pending[2];
    /* recording (step_ops.c) */
    int recording;        /* between step_begin and step_end, ops are appended to tape */
    int graphs_off;       /* CELER_GRAPH=0, or a capture failed; -1 until read */
    step_op *tape, *last; /* this step's ops; the previous step's (captured when repeated) */
    int n_tape, cap_tape, n_last, cap_last;
    char *values;         /* [STEP_VALUES] host: this step's values */
    size_t n_values;
    void *dvalues;        /* [STEP_VALUES] device: what the ops read */
    step_graph graphs[STEP_GRAPHS];
    long steps;
    /* CELER_PROFILE=1: every op timed alone (no graphs), GPU time summed per kind */
    int profile;
    cudaEvent_t prof_ev[2];
    double prof_ms[SOP_KINDS + 1], prof_bytes[SOP_KINDS + 1]; /* [SOP_KINDS]: matrix-vector products */
    long prof_n[SOP_KINDS + 1];
    /* CELER_STATS counters */
    long n_forwards, n_calls, n_uploads, n_waits, n_replays, n_captures;
    double t_enqueue, t_wait, t_mark, t_wait_start; /* t_mark: the end of the last wait */
} cuda_backend;

#define STAGE_HALF ((size_t)4 << 20)

static inline cuda_backend *cu(backend *b) { return b->impl; }

/* Runs a kernel launcher unless an earlier op failed; keeps its failure. */
#define RUN(call) do { c->n_calls++; if (!c->failed && (call) != 0) cuda_fail(c); } while (0)

/* backend_cuda.c */
void cuda_fail(cuda_backend *c);
int cuda_ok(cuda_backend *c, cudaError_t e, const char *what);
void *cuda_grow(cuda_backend *c, grow_buf *g, size_t bytes, const char *what);
/* host -> device through the pinned staging ring (small copies never wait) */
void cuda_stage_upload(cuda_backend *c, void *dst, const void *host, size_t n);
void cuda_wait_begin(cuda_backend *c);
void cuda_wait_end(cuda_backend *c);

/* step_ops.c: the arithmetic ops of the table, recorded or run at once */
void cuda_matmul(backend *b, const weight *w, const float *x, float *y, int T);
void cuda_rmsnorm(backend *b, const float *x, const float *w, float *y, int T, int n, float eps, int plus_one);
void cuda_rope(backend *b, float *x, int T, int n_heads, int head_dim, const int32_t *pos, const rope_table *r);
void cuda_add_rmsnorm(backend *b, float *x, const float *d, const float *dw, const float *w, float *y, int T, int n,
                      float eps, int plus_one);
void cuda_qk_norm_rope(backend *b, float *q, float *k, int T, int n_heads, int n_kv, int head_dim, int norm,
                       const float *qw, const float *kw, float eps, int plus_one, const int32_t *pos, const rope_table *r);
void cuda_attention(backend *b, const float *q, const int32_t *qpos, int T, const attn_kv *kv, const attn_params *p,
                    float *out);
void cuda_glu(backend *b, float *g, const float *u, long n, int act);
void cuda_scale(backend *b, float *x, long n, float s);
void cuda_softcap(backend *b, float *x, long n, float cap);
void cuda_add(backend *b, float *y, const float *x, long n);
void cuda_embed(backend *b, const weight *w, const int32_t *tok, int T, float scale, float *x);
void cuda_put_rows(backend *b, float *kd, float *vd, int32_t *pd, long row, int slot, const float *k, const float *v,
                   const int32_t *pos, int n);
void cuda_step_copy(backend *b, void *dst, const void *src, size_t n);
int cuda_sample(backend *b, const float *logits, int V, const sample_params *p, double u, int32_t *tok, int slot);
int32_t cuda_sampled(backend *b, int slot);
int cuda_step_upload(backend *b, void *dst, const void *host, size_t n); /* 1: recorded */
int cuda_step_begin(backend *b, int T);
void cuda_step_end(backend *b);
/* Runs what was recorded so far and stops recording (before an op that needs the
 * host: a download, a free, expert routing). */
void cuda_step_stop(cuda_backend *c);
/* Drops every captured graph (a work buffer they use moved). */
void cuda_steps_forget(cuda_backend *c);
void cuda_steps_free(cuda_backend *c);
/* CELER_PROFILE: the per-kind GPU times, printed when the backend is destroyed */
void cuda_profile_print(const cuda_backend *c);
#endif
