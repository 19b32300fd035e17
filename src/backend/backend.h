/* backend/backend.h: the one table of operations a layer plan needs. A backend owns
 * its threads and scratch; activations are float32 in buffers the caller allocates
 * through the backend (alloc), so a device backend keeps them in device memory.
 * Weights are bound on the host and handed to the backend once (upload_weight).
 * The CPU backend is the reference; others must agree with it on every fixture.
 * The arithmetic ops are described once, in backend/ops_list.h (docs/howto.md). */
#ifndef CELER_BACKEND_H
#define CELER_BACKEND_H
#include <stdint.h>

#include "backend/ops_list.h"
#include "base/settings.h"
#include "tensor/weight.h"

/* RoPE over pairs (i, i + dim/2) for i < dim/2 of each head's first `dim` channels. */
typedef struct {
    int dim;             /* rotated channels (<= head_dim) */
    float *inv_freq;     /* [dim / 2]; 0 leaves a pair unrotated */
    float attn_factor;   /* cos and sin are multiplied by this */
} rope_table;

/* Element types of a KV cache's rows. The CPU backend keeps float32 only; a device
 * backend may keep bf16 (half the bytes; docs/kv-cache.md). */
typedef enum { KVT_F32 = 0, KVT_BF16 = 1 } kv_dtype;
static inline int kv_dtype_size(int dtype) { return dtype == KVT_BF16 ? 2 : 4; }

/* What attention reads of one layer's cache: n rows. Contiguous (blocks NULL): row r
 * at k + r * row_stride elements of the cache's dtype, its position at pos[r]. Paged
 * (blocks set, kv/pool.h): row r is row blocks[r / block_rows] * block_rows +
 * r % block_rows of k, v and pos, which are then the bases of the block pool; the
 * attention kernels' key tiles divide block_rows, so one lookup serves a tile. */
typedef struct {
    const void *k;       /* [n, n_kv, head_dim] rows, row_stride elements apart (paged: pool base) */
    const void *v;       /* same layout */
    const int32_t *pos;  /* [n] absolute position of each row (paged: pool base) */
    int n;
    long row_stride;
    int dtype;           /* kv_dtype of k and v */
    int block_rows;      /* paged: rows per block (KV_BLOCK); 0 when contiguous */
    const int32_t *blocks; /* paged: [ceil(n / block_rows)] block ids; NULL when contiguous */
} attn_kv;

/* Index into k, v and pos of row r of a view (contiguous or paged). */
static inline long attn_kv_row(const attn_kv *kv, int r) {
    return kv->blocks ? (long)kv->blocks[r / kv->block_rows] * kv->block_rows + r % kv->block_rows : (long)r;
}

typedef struct {
    int n_heads, n_kv, head_dim;
    float scale;         /* multiplies q.k */
    int window;          /* > 0: key visible iff qpos - kpos < window */
    float softcap;       /* > 0: scores = softcap * tanh(scores / softcap) */
    const float *sinks;  /* [n_heads] extra softmax logit per head, or NULL */
} attn_params;

/* What a device sampler needs (engine/sample.c's filters, without penalties). */
typedef struct {
    float temperature;   /* <= 0: the argmax */
    int top_k;           /* > 0 */
    float top_p;         /* >= 1: off */
    float min_p;         /* <= 0: off */
} sample_params;

/* Slots of a device sampler's results the host can wait on. */
#define SAMPLE_SLOTS 4
/* Rows one sample_rows call takes at most. */
#define SAMPLE_MAX_ROWS 256

/* How an expert stores its gate and up projections. */
enum {
    MOE_GU_HALVES = 0,       /* gate_up [2I, H]: rows 0..I-1 gate, I..2I-1 up (Gemma 4) */
    MOE_GU_INTERLEAVED = 1,  /* gate_up [2I, H]: row 2j gate j, row 2j+1 up j (gpt-oss) */
    MOE_GU_SPLIT = 2,        /* separate gate [I, H] and up [I, H] (mlx-community) */
};

/* The experts of one MoE layer as the backend computes them. */
typedef struct {
    int n_experts, top_k, inter, hidden;
    int layout;              /* MOE_GU_* */
    int in_major;            /* weights stored input-major: gate_up [H, 2I], down [I, H]
                              * (transformers' gpt-oss bf16), so y = x W; float formats only */
    int act;                 /* as glu: 0 silu, 1 gelu_tanh, 2 clamped swiglu (alpha, limit) */
    float alpha, limit;
    const weight *gate_up;   /* [n_experts] each [2I, H], or NULL with MOE_GU_SPLIT */
    const weight *gate, *up; /* [n_experts] each [I, H] with MOE_GU_SPLIT */
    const weight *down;      /* [n_experts] each [H, I] */
    const float *gate_up_bias;          /* [n_experts, 2I] in gate_up's row order, or NULL */
    const float *gate_bias, *up_bias;   /* [n_experts, I] or NULL (MOE_GU_SPLIT) */
    const float *down_bias;             /* [n_experts, H] or NULL */
} moe_experts;

#define MOE_MAX_EXPERTS 256   /* moe_route's bound on E */

/* Floats of work space the moe op needs for T tokens. */
#define MOE_WORK(T, H, I) ((long)(T) * (2L * (H) + 3L * (I) + 2L))

typedef struct backend backend;

typedef struct {
    const char *name;
    int on_device;       /* buffers live in device memory: the host must not dereference them */
    /* ---- memory: every activation, cache row and uploaded vector ---------------- */
    void *(*alloc)(backend *b, size_t bytes);      /* zeroed; NULL with a message */
    /* Optional (NULL: alloc): zeroed, with memory committed only where it is written,
     * for buffers sized for the worst case and mostly never touched (the logits of
     * every row of a batch: T x vocabulary floats, 311 MB for qwen3-0.6b at -b 512,
     * where a prompt writes one row). Released by release. */
    void *(*alloc_lazy)(backend *b, size_t bytes);
    void (*release)(backend *b, void *p);          /* NULL ok */
    void (*copy)(backend *b, void *dst, const void *src, size_t bytes);      /* both backend memory */
    void (*upload)(backend *b, void *dst, const void *host, size_t bytes);   /* host -> backend */
    void (*download)(backend *b, void *host, const void *src, size_t bytes); /* backend -> host (waits) */
    /* Makes w usable by this backend: a device copy in a format its kernels read.
     * transposed: w is bound input-major (moe_experts.in_major); a backend that
     * cannot multiply that way stores the transpose and swaps rows and cols, and
     * returns 1 so the caller clears in_major. The CPU backend uses the mapping as
     * it is and returns 0; -1 with a message on failure. */
    int (*upload_weight)(backend *b, weight *w, int transposed);
    /* Uploads n weights of one format and width as one matrix *out (their rows
     * stacked), so one product computes all of them; each part becomes a view of
     * its rows (on_device 2). Returns 1 without uploading anything when the parts
     * cannot be fused; NULL on backends that never fuse. */
    int (*upload_fused)(backend *b, weight *const *parts, int n, weight *out);
    void (*release_weight)(backend *b, weight *w);
    void (*destroy)(backend *b);
    /* 0, or -1 with the message of the first op that failed since the last call
     * (ops return nothing; a device backend records its failures here). */
    int (*status)(backend *b);
    /* The memory bandwidth decode is measured against, in GB/s, measured now: the
     * CPU's read bandwidth over all its threads, or a GPU's device-to-device copy
     * bandwidth ((read + written bytes) / time); -1 on failure. */
    double (*bandwidth)(backend *b);
    /* A decode step's ops may be recorded from step_begin to step_end and run as one
     * captured graph (replayed while the step's shape stays the same); ops called in
     * between behave as always, in order. step_begin returns 1 when it records.
     * NULL on backends that run every op at once. */
    int (*step_begin)(backend *b, int T);
    void (*step_end)(backend *b);
    /* Device sampling (NULL where the host samples): picks a token from logits [V]
     * (backend memory) as engine/sample.c does without penalties, with the uniform
     * draw u, and writes it to tok (backend memory: the next step's input) and to
     * result slot `slot` (< SAMPLE_SLOTS). Returns -1 without doing anything when p
     * needs the host. sampled waits for a slot's token and returns it (-1 with a
     * message when the device failed). */
    int (*sample)(backend *b, const float *logits, int V, const sample_params *p, double u, int32_t *tok, int slot);
    int32_t (*sampled)(backend *b, int slot);
    /* The same for n rows at once (NULL where not available): row i of logits [n, V]
     * with parameters p[i] and draw u[i] -> tok[i] (backend memory) and row i of
     * result slot `slot`; n <= the backend's bound (-1, nothing done, past it or
     * when some row needs the host). sampled_rows waits for the slot and copies its
     * n tokens to out (0; -1 with a message when the device failed). */
    int (*sample_rows)(backend *b, const float *logits, int V, int n, const sample_params *p, const double *u,
                       int32_t *tok, int slot);
    int (*sampled_rows)(backend *b, int slot, int32_t *out, int n);
    /* Joins this backend to a tensor-parallel group as rank `rank` of `world`, so the
     * collective ops reach the other ranks. Called by every rank at once (each from
     * its own thread: NCCL's communicator setup waits for all ranks). shared: the CPU
     * backend's tp_host_group (backend/tp_group.h); the CUDA backend's NCCL unique id
     * (TP_ID_BYTES). -1 with a message. */
    int (*tp_join)(backend *b, int rank, int world, void *shared);
    /* A new NCCL unique id into id [TP_ID_BYTES] (rank 0 makes it, the others receive
     * it); NULL on backends that need none. -1 with a message. */
    int (*tp_unique_id)(backend *b, void *id);
    /* Makes this thread's calls reach the backend's device (CUDA: cudaSetDevice); the
     * ranks' threads call it before their work. NULL where there is nothing to do. */
    void (*use_here)(backend *b);
    /* In place of upload_weight when the weights are synthetic (`bench --synth`): w's
     * arrays allocated on the device and filled with random values from seed (codes
     * random, scales small, float weights in +-0.03); the host arrays are never read.
     * NULL where the host's (zero) weights serve. -1 with a message. */
    int (*fill_weight)(backend *b, weight *w, uint64_t seed);
    /* ---- the device KV block pool's memory (kv/pool.c; NULL on host backends) -----
     * Address space reserved on GPU `device` and memory mapped into it piece by piece,
     * so a pool class's blocks sit at base + id * block bytes and committing one moves
     * nothing (CUDA: cuMemAddressReserve + cuMemCreate/cuMemMap). The functions take the
     * ordinal, not a backend: a device pool lives as long as the process, past the
     * backends that used it. vm_reserve: NULL with a message; *granule gets the mapping
     * granularity (vm_map's offsets and sizes are multiples of it). vm_map: 0, or -1
     * with a message (out of device memory). vm_free: unmaps `mapped` bytes from base
     * and frees the `reserved` bytes of address space. mem_info: free and total bytes of
     * the device's memory now (0; -1 with a message). */
    void *(*vm_reserve)(int device, size_t bytes, size_t *granule);
    int (*vm_map)(int device, void *at, size_t bytes);
    void (*vm_free)(int device, void *base, size_t reserved, size_t mapped);
    int (*mem_info)(int device, size_t *free_bytes, size_t *total_bytes);
    /* ---- arithmetic: one member per op of backend/ops_list.h (contracts there) ----- */
#define BACKEND_OP_MEMBER(name, mode) void (*name)(backend * b OP_ARGS_##name(OPA_PARAM));
    BACKEND_OPS(BACKEND_OP_MEMBER)
#undef BACKEND_OP_MEMBER
} backend_ops;

struct backend {
    const backend_ops *ops;
    void *impl;
    int threads;         /* host threads (CPU) or 0 */
    int device_id;       /* GPU ordinal, or -1 */
    int fast;            /* the precision: 1 fast (GPU: one-term bf16 products; CPU: rounded
                          * activations, backend/cpu/fast.c), 0 exact; set from CELER_PRECISION
                          * when a GPU backend is created, then by the model that owns it
                          * (model/precision.c) */
    int tp_rank, tp_world;  /* tensor-parallel place (tp_join); 0, 0 when not in a group */
};

/* Bytes of a tensor-parallel group id (NCCL's ncclUniqueId is 128). */
#define TP_ID_BYTES 128

/* CPU backend with n_threads (<= 0: all cores). max_cols bounds the widest weight row. */
backend *backend_cpu_new(int n_threads, int64_t max_cols);
/* The backend a device string names: "cpu", "cuda" or "cuda:N" (the CUDA backend,
 * loaded from libceler-cuda.so), or NULL/"auto": $CELER_DEVICE when set, else CUDA
 * when a GPU and the library are present, else the CPU. NULL with a message. */
backend *backend_open(const char *device, int n_threads, int64_t max_cols);
void backend_free(backend *b);
int backend_threads(const backend *b);

/* What libceler-cuda.so uses of the program that opens it, handed to its entry: the
 * library links nothing of libceler, so the program's own error message, settings
 * table and CPU expert router serve both (backend_open.c fills it). */
typedef struct {
    int (*err_set)(const char *fmt, ...);
    const char *(*err_msg)(void);
    int (*setting_flag)(setting_id id);
    long (*setting_int)(setting_id id);
    const char *(*setting_str)(setting_id id);
    void (*moe_route)(backend *b OP_ARGS_moe_route(OPA_PARAM)); /* the CPU's, called with b NULL */
} cuda_host_api;

/* What libceler-cuda.so exports (resolved with dlsym): the backend on GPU device_id,
 * using host's functions from then on (host must outlive every backend it made). */
typedef backend *(*backend_cuda_new_fn)(int device_id, int64_t max_cols, const cuda_host_api *host);
#define BACKEND_CUDA_ENTRY "celer_backend_cuda_new"
#endif
