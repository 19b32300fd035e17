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

/* The record of each recorded op of backend/ops_list.h: its arguments by value,
 * op_<name>_args (generated from the list). */
#define CUDA_OP_ARGS(name) typedef struct { OP_ARGS_##name(OPA_FIELD) } op_##name##_args;
#define CUDA_OP_ARGS_IF(name, mode) OPS_IF_RECORDED(name, mode, CUDA_OP_ARGS)
BACKEND_OPS(CUDA_OP_ARGS_IF)
#undef CUDA_OP_ARGS_IF
#undef CUDA_OP_ARGS

/* Record kinds: the recorded ops of the list, then the backend's own step ops. */
enum {
#define CUDA_OP_KIND(name) SOP_##name,
#define CUDA_OP_KIND_IF(name, mode) OPS_IF_RECORDED(name, mode, CUDA_OP_KIND)
    BACKEND_OPS(CUDA_OP_KIND_IF)
#undef CUDA_OP_KIND_IF
#undef CUDA_OP_KIND
    SOP_copy,   /* device -> device (backend_ops.copy) */
    SOP_upload, /* a small upload during a step: its bytes are values */
    SOP_sample, /* backend_ops.sample and sample_rows */
    SOP_put_batch, /* consecutive one-row put_rows of a batched step, as one launch */
    SOP_KINDS
};
/* CELER_PROFILE=3's interval kinds beyond the ops (timeline.c) */
enum { TL_GRAPH = SOP_KINDS + 1, TL_HOST_UPLOAD, TL_KINDS };

/* One op as recorded: every field a kernel launch reads, by value, so two steps that
 * launch the same kernels record byte-identical ops (the struct is zeroed before it
 * is filled). Values that change from step to step (token ids, positions, a cache
 * slot, a key count) are not here but in the step's value block at offset dyn, which
 * the kernels read from device memory when the step runs. */
typedef struct {
    int op;       /* SOP_* */
    int dyn;      /* offset of this op's values in the value block, or -1 */
    union {
#define CUDA_OP_MEMBER(name) op_##name##_args name;
#define CUDA_OP_MEMBER_IF(name, mode) OPS_IF_RECORDED(name, mode, CUDA_OP_MEMBER)
        BACKEND_OPS(CUDA_OP_MEMBER_IF)
#undef CUDA_OP_MEMBER_IF
#undef CUDA_OP_MEMBER
        struct { void *dst; const void *src; size_t n; } copy; /* copy, and upload (src in the value block) */
        /* rows > 0: per-row parameters and draws are values; else p and one draw */
        struct { const float *logits; int V, rows, sampling; cuk_sample_params p; int32_t *tok, *host; } smp;
        /* n rows of k, v [n, row] to the rows the values (cuk_put_row [n]) name; the
         * first `real` have a destination (the rest pad the batch to its bucket) */
        struct { const float *k, *v; long row; int n, dtype, real; } pb;
    } u;
} step_op;

/* The small kernels' launch order a step graph runs with, and the timing of its first
 * replays while the order is chosen (late_order.c). */
#define LATE_SAMPLES 5 /* timed replays of each order */
typedef struct {
    int mask;          /* the CUK_LATE_* bits its replays run with */
    int left;          /* timed replays still wanted; 0: chosen */
    int warm;          /* replays to run untimed before timing starts */
    int pending;       /* ev holds a timed replay not read yet, run with order `cand` */
    int timing;        /* between late_before and late_after of a timed replay */
    int cand;          /* 0: every kind early (mask 0), 1: every kind late */
    int n[2];          /* samples of each order */
    float ms[2][LATE_SAMPLES];
    cudaEvent_t ev[2]; /* around the timed replay */
    uint64_t key;      /* the op list's hash: the choice is remembered under it */
} late_order;

/* A captured step: its ops and the graph they were captured into. */
typedef struct {
    step_op *ops;
    int n;
    cudaGraphExec_t exec;
    long used; /* step counter at the last launch (least recently used is evicted) */
    cudaEvent_t *ev; /* CELER_PROFILE=2: [n + 1] events recorded in the graph around its ops */
    late_order late;
} step_graph;

#define LATE_MEMO 32 /* op lists whose launch order is remembered after their graph goes */

#define STEP_GRAPHS 16 /* a few key-count buckets for each batch-size bucket in use */
#define STEP_VALUES ((size_t)2 << 20) /* bytes of one step's values (a batched step's descriptors: ~600 KiB at 256 rows) */
#define STEP_MAX_T 256 /* the largest batch a step records (the largest batch-size bucket) */
#define PROF_SHAPES 24  /* CELER_PROFILE 1-2: product shapes timed apart */
/* CELER_PROFILE modes: 2 and 7 time each op of a step graph between event nodes;
 * 6, 7 and 9 read each product's weights in its place (step_ops.c, run_ops_apart) */
#define PROF_EVENTS(c) ((c)->profile == 2 || (c)->profile == 7)
#define PROF_READS(c) ((c)->profile == 6 || (c)->profile == 7 || (c)->profile == 9)

typedef struct {
    int id;
    cudaStream_t stream;
    cublasHandle_t blas;
    int failed;
    const backend *self;  /* the backend this is the state of (self->fast: the precision) */
    char why[512];
    grow_buf mv, xbf, wbf, att, moe_idx, moe_w, smp, y2;
    void *blas_ws;        /* cuBLAS work space, fixed so GEMMs can be captured in graphs */
    int32_t *sampled;     /* [SAMPLE_SLOTS][SAMPLE_MAX_ROWS] mapped pinned: tokens the sampler wrote */
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
    int put_open;         /* the last op of the tape is a SOP_put_batch that may take more rows */
    char *values;         /* [STEP_VALUES] host: this step's values */
    size_t n_values;
    void *dvalues;        /* [STEP_VALUES] device: what the ops read */
    step_graph graphs[STEP_GRAPHS];
    long steps;
    /* the small kernels' launch order (late_order.c) */
    int late_fixed;       /* CELER_PDL_LATE as a mask, or -1: each graph chooses */
    int late_now;         /* the mask last set on the GPU by this backend; -1: not set */
    struct { uint64_t key; int mask; } late_memo[LATE_MEMO];
    int n_late_memo;      /* choices remembered (a ring past LATE_MEMO) */
    long n_late_chosen, n_late_late; /* CELER_STATS: graphs that chose, and chose late */
    /* The fast precision's staged activations: xbf holds bf16(xbf_src [xbf_n]) when
     * xbf_seq + 1 == op_seq, i.e. the last op enqueued was the product that staged it
     * and nothing else has written device memory since (op_seq counts every op run and
     * every other write: uploads, allocations, graph launches, expert calls). Products
     * that read the same activations one after another (q, k, v; gate, up) convert
     * them once. */
    const float *xbf_src;
    long xbf_n;
    unsigned long op_seq, xbf_seq;
    /* The same for one-row 4-bit products (cuk_matvec_q8x2): the matvec work holds
     * xq_src's two-term int8 pieces when xq_seq + 1 == op_seq (written by the add +
     * RMSNorm or GLU just before, which knew its product from the op list). */
    const float *xq_src;
    unsigned long xq_seq;
    /* CELER_PROFILE=1: every op timed alone (no graphs); 2: the ops of each replayed step
     * graph timed by event nodes between them, GPU time summed per kind; 3: the timeline
     * (timeline.c); 4-9: steps taken apart (step_ops.c, run_ops_apart). */
    int profile;
    int profile_keep; /* CELER_PROFILE 8-9: the op kind run as in the whole step, or -1 */
    long prof_replays; /* profiles 2 and 7: graph replays timed */
    cudaEvent_t prof_ev[2];
    double prof_ms[SOP_KINDS + 1], prof_bytes[SOP_KINDS + 1]; /* [SOP_KINDS]: matrix-vector products */
    long prof_n[SOP_KINDS + 1];
    struct { /* the matrix-vector products by weight shape (the first PROF_SHAPES seen) */
        int64_t rows, cols;
        int fmt;
        double ms, bytes;
        long n;
    } prof_shape[PROF_SHAPES];
    int n_prof_shapes;
    /* CELER_PROFILE=3 (timeline.c): event pairs around graph launches and the ops run
     * outside graphs, [tl_n / 2] kinds; read at exit */
    cudaEvent_t *tl_ev;
    unsigned char *tl_kind;
    int tl_n, tl_cap, tl_open;
    int capturing; /* a step graph is being captured: no events may be recorded */
    /* tensor parallelism (nccl.c) */
    void *nccl;           /* ncclComm_t of this rank, or NULL */
    grow_buf gath;        /* gather_cols: every rank's part */
    /* CELER_STATS counters */
    long n_forwards, n_calls, n_uploads, n_waits, n_replays, n_captures;
    double t_enqueue, t_wait, t_mark, t_wait_start; /* t_mark: the end of the last wait */
    /* the same for the forwards that replayed a step graph (decode steps, not prompt
     * chunks), and the counters at the previous forward's end */
    long r_forwards, r_calls, r_uploads, at_calls, at_uploads, at_replays;
    double r_enqueue;
} cuda_backend;

#define STAGE_HALF ((size_t)4 << 20)
#define CUBLAS_WORKSPACE ((size_t)32 << 20)

static inline cuda_backend *cu(backend *b) { return b->impl; }

/* Makes the backend's GPU the calling thread's current device. Every entry that
 * allocates or enqueues calls it first: with tensor parallelism one thread (the
 * engine's) also reaches other ranks' backends (their caches and scratch), and a
 * stream only takes work from a thread whose current device is its own. */
static inline void cuda_here(const cuda_backend *c) {
    int cur = -1;
    if (cudaGetDevice(&cur) != cudaSuccess || cur != c->id) cudaSetDevice(c->id);
}

/* Runs a kernel launcher unless an earlier op failed; keeps its failure. */
#define RUN(call) do { c->n_calls++; cuda_touch(c); if (!c->failed && (call) != 0) cuda_fail(c); } while (0)

/* timeline.c (CELER_PROFILE=3) */
int tl_begin(cuda_backend *c, int kind);
void tl_end(cuda_backend *c);
void tl_print(cuda_backend *c, const char *const *names);
void tl_free(cuda_backend *c);

/* backend_cuda.c */
void cuda_fail(cuda_backend *c);
int cuda_ok(cuda_backend *c, cudaError_t e, const char *what);
void *cuda_grow(cuda_backend *c, grow_buf *g, size_t bytes, const char *what);
/* Something other than an op wrote device memory: staged activations are stale. */
static inline void cuda_touch(cuda_backend *c) { c->op_seq += 2; }
/* host -> device through the pinned staging ring (small copies never wait) */
void cuda_stage_upload(cuda_backend *c, void *dst, const void *host, size_t n);
void cuda_wait_begin(cuda_backend *c);
void cuda_wait_end(cuda_backend *c);

/* host.c: the program's functions (backend_open.c), set by celer_backend_cuda_new.
 * err_set, err_msg and setting_* of the library's code forward to them. */
void cuda_host_set(const cuda_host_api *h);
const cuda_host_api *cuda_host(void);

/* The entry of every op of backend/ops_list.h: for recorded ops, the recorder
 * step_ops.c generates; for HOST ops, backend_cuda.c's hand-written code. */
#define CUDA_OP_PROTO(name, mode) void cuda_##name(backend *b OP_ARGS_##name(OPA_PARAM));
BACKEND_OPS(CUDA_OP_PROTO)
#undef CUDA_OP_PROTO
void cuda_step_copy(backend *b, void *dst, const void *src, size_t n);
int cuda_sample(backend *b, const float *logits, int V, const sample_params *p, double u, int32_t *tok, int slot);
int32_t cuda_sampled(backend *b, int slot);
int cuda_sample_rows(backend *b, const float *logits, int V, int n, const sample_params *p, const double *u, int32_t *tok,
                     int slot);
int cuda_sampled_rows(backend *b, int slot, int32_t *out, int n);
int cuda_step_upload(backend *b, void *dst, const void *host, size_t n); /* 1: recorded */
int cuda_step_begin(backend *b, int T);
void cuda_step_end(backend *b);
/* Runs what was recorded so far and stops recording (before an op that needs the
 * host: a download, a free, expert routing). */
void cuda_step_stop(cuda_backend *c);
/* Drops every captured graph (a work buffer they use moved). */
void cuda_steps_forget(cuda_backend *c);
void cuda_steps_free(cuda_backend *c);
/* nccl.c: the tensor-parallel group (backend_ops.tp_unique_id, tp_join) and its
 * collectives, launched on st (captured inside a recorded step's graph). */
int cuda_tp_unique_id(backend *b, void *id);
int cuda_tp_join(backend *b, int rank, int world, void *shared);
void cuda_use_here(backend *b);
/* The device KV pool's memory (kv_vmm.c; backend_ops.vm_* and mem_info). */
void *cuda_vm_reserve(int device, size_t bytes, size_t *granule);
int cuda_vm_map(int device, void *at, size_t bytes);
void cuda_vm_free(int device, void *base, size_t reserved, size_t mapped);
int cuda_mem_info(int device, size_t *free_bytes, size_t *total_bytes);
void cuda_tp_leave(cuda_backend *c);
int cuda_nccl_all_reduce(cuda_backend *c, float *x, long n, cudaStream_t st);
/* work: [tp_world, T, w] floats (gath) */
int cuda_nccl_gather_cols(cuda_backend *c, float *full, const float *part, int T, int w, int W, void *work,
                          cudaStream_t st);
/* late_order.c: the small kernels' launch order of each step graph. late_init reads
 * CELER_PDL_LATE; late_captured starts a new graph's choice; late_before (before the
 * graph's launch: sets the mask, starts a timed replay) and late_after (after it) time
 * its first replays, both orders alternately, and keep the faster. */
void late_init(cuda_backend *c);
void late_captured(cuda_backend *c, step_graph *g);
void late_before(cuda_backend *c, step_graph *g);
void late_after(cuda_backend *c, step_graph *g);
void late_drop(step_graph *g);
/* CELER_PROFILE: the per-kind GPU times, printed when the backend is destroyed */
void cuda_profile_print(cuda_backend *c);
int cuda_op_kind(const char *name);
#endif
