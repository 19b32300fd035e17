/* backend/cuda/cuda_kernels.h: C entry points of the CUDA kernels. Every pointer is
 * device memory; weights are `weight` structs whose data/scales/biases point to device
 * copies laid out exactly as in the checkpoint (bf16 as stored, MLX affine packed codes
 * with their scales and biases). Activations are float32. Each launcher enqueues on
 * `stream` and returns 0, or -1 with err_set naming the kernel and the CUDA error. */
#ifndef CELER_CUDA_KERNELS_H
#define CELER_CUDA_KERNELS_H
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "tensor/weight.h"

#ifdef __cplusplus
extern "C" {
#endif

typedef struct CUstream_st *cuk_stream;

/* Kernels launched on this thread while on may overlap the kernel before them
 * (programmatic dependent launch, common.cuh): the backend turns it on while a
 * recorded decode step is captured or run. */
void cuk_set_pdl(int on);

/* The small kernels' launch order in decode steps (common.cuh's CUK_LATE_* bits, 0..63):
 * enqueued on s, in force for every kernel that runs after it on this GPU. */
int cuk_set_late(int mask, cuk_stream s);
/* Tests: the mask each .cu file's kernels read now (masks [cap]); returns the count. */
int cuk_late_files(int *masks, int cap);

/* Batch sizes up to CUK_MV_MAX_T use the matrix-vector kernels; larger ones GEMM. */
#define CUK_MV_MAX_T 8

/* W [rows, cols] @ x [T, cols] -> y [T, rows], T <= CUK_MV_MAX_T (bf16, f16, f32, affine 4/8-bit, MXFP4).
 * Quantized weights multiply float activations, except: fast (the fast precision) at
 * T = 1 on the 4-bit weights cuk_matvec_q8x2 names, activations as two int8 terms per 64
 * values (q8x2.cuh: about 16 bits of each piece's largest value) on dp4a, quantized into
 * work first, or (fast 2) already there, written by cuk_add_rmsnorm_q8x2 / cuk_glu_q8x2;
 * CUK_MV_INT8=1, one int8 term per 32 or 16 values. work holds cuk_matvec_work() bytes
 * (16-byte aligned). */
int cuk_matvec(const weight *w, const float *x, float *y, int T, void *work, int fast, cuk_stream s);
int cuk_matvec_q8x2(const weight *w);
size_t cuk_matvec_work(int T, int64_t cols);
/* A gate|up product and the GLU after it in one launch: W [2n, cols] (gate's n rows,
 * then up's) @ x [T, cols] -> y [T, n] = act(gate) * up (act 0 SiLU, 1 GELU tanh), the
 * same bits as cuk_matvec into [T, 2n] then cuk_glu. 16-bit weights, T <= 4 (the rows
 * cuk_matvec_glu_ok accepts); y must not overlap x. */
int cuk_matvec_glu(const weight *w, const float *x, float *y, int T, int act, cuk_stream s);
int cuk_matvec_glu_ok(const weight *w, int T, int act);
/* Whether cuk_matvec has a kernel for this weight. */
int cuk_matvec_supports(const weight *w);
/* Decode products of a batch on the tensor cores (skinny.cu): W bf16 [rows, cols] @
 * x [T, cols] -> y [T, rows], T <= CUK_SKINNY_MAX_T, the weights read once. x is
 * staged in xbf (cuk_gemm_xbf_elems(T, cols) values) as cuk_gemm2 does: fast 0 splits
 * it into two bf16 terms, 1 rounds it once, 2 finds it rounded there already.
 * Deterministic: the same inputs give the same bits. cfg (tests and A/B runs): the
 * chunks a warp keeps in flight, 1 or 2 (0: the measured default). */
#define CUK_SKINNY_MAX_T 32
int cuk_skinny_supports(const weight *w);
int cuk_skinny(const weight *w, const float *x, float *y, int T, uint16_t *xbf, int fast, cuk_stream s);
void cuk_skinny_set_cfg(int cfg);
/* hi [n] = bf16(src), lo [n] = bf16(src - hi): the exact precision's two terms */
int cuk_split_bf16(const float *src, uint16_t *hi, uint16_t *lo, long n, cuk_stream s);
/* Dequantizes/converts rows [r0, r0 + n) of w into bf16 dst [n, cols] (dequant.cu:
 * quantized rows eight codes a thread; the rest through cuk_weight_rows_elem). */
int cuk_weight_to_bf16(const weight *w, int64_t r0, int64_t n, uint16_t *dst, cuk_stream s);
/* The same as two terms: hi [n, cols] = bf16(w), lo [n, cols] = bf16(w - hi) (lo may be NULL). */
int cuk_weight_to_bf16x2(const weight *w, int64_t r0, int64_t n, uint16_t *hi, uint16_t *lo, cuk_stream s);
/* cuk_weight_to_bf16x2 one element a thread, any format (ops.cu) */
int cuk_weight_rows_elem(const weight *w, int64_t r0, int64_t n, uint16_t *hi, uint16_t *lo, cuk_stream s);
/* Prefill products through cuBLAS on the tensor cores: x is rounded once to bf16
 * (fast) or split into two bf16 terms (exact) in xbf (cuk_gemm_xbf_elems(T, cols)
 * values); non-bf16 weights are converted to bf16 (exact: two terms) in chunks of
 * wbf_rows rows into wbf [wbf_rows, cols]. handle is a cublasHandle_t bound to the
 * stream. */
size_t cuk_gemm_xbf_elems(int T, int64_t cols);
size_t cuk_gemm_wbf_elems(int64_t wbf_rows, int64_t cols);
/* The rows of w a chunk of the bf16 weight copy holds (0: bf16 weights need none). */
int64_t cuk_gemm_wbf_rows(const weight *w);
int cuk_gemm(void *cublas, const weight *w, const float *x, float *y, int T, uint16_t *xbf, uint16_t *wbf,
             int64_t wbf_rows, int fast, cuk_stream s);
/* The same; with y2 (cuk_gemm_y2_elems(T, rows of a chunk) floats, T <= CUK_GEMM_STACK_MAX_T)
 * the two activation terms of the exact precision are one product of 2T columns, so the
 * weights are read once (a batched decode step is bound by that read), and y is the sum
 * of its halves. */
#define CUK_GEMM_STACK_MAX_T 256
/* fast: 0 exact, 1 fast, 2 fast with xbf already holding bf16(x) (the caller staged x
 * for the previous product and nothing has written x or xbf since: no conversion). */
int cuk_gemm2(void *cublas, const weight *w, const float *x, float *y, int T, uint16_t *xbf, uint16_t *wbf,
              int64_t wbf_rows, float *y2, int fast, cuk_stream s);
size_t cuk_gemm_y2_elems(int T, int64_t rows);
/* p [n elements] random (fill.cu): kind 0 bytes; 1 bf16, 2 f16, 3 f32 uniform in [lo, hi) */
int cuk_fill(void *p, size_t n, int kind, float lo, float hi, uint64_t seed, cuk_stream s);
/* Stand-ins for a decode step's ops (stand_in.cu, CELER_PROFILE 6-9): a kernel that
 * reads w's arrays and nothing else (sink: 4 device bytes it may write), and a kernel
 * that does nothing but wait on the one before it. */
int cuk_read_floor(const weight *w, void *sink, cuk_stream s);
int cuk_empty_launch(cuk_stream s);
/* Prefill products of quantized weights with the dequantization inside the tensor-core
 * product (qgemm.cu): y [T, rows] = x [T, cols] times w^T, x rounded once to bf16 (fast)
 * or split into two bf16 terms (exact) in xbf (cuk_gemm_xbf_elems(T, cols) values).
 * Covers MLX affine 4/8-bit at the fast precision and MXFP4 at both (its dequantized
 * values are exact in bf16); cuk_qgemm_supports says which (CUK_QGEMM=0: none). */
int cuk_qgemm_supports(const weight *w, int fast);
/* Whether a product of T rows should take it: the fast precision, and T <= 64, or
 * T <= CUK_QGEMM_MAX_T with w->rows >= CUK_QGEMM_MIN_ROWS: where the fused kernel
 * measured faster than dequantize + cuBLAS (qgemm.cu). */
int cuk_qgemm_wanted(const weight *w, int T, int fast);
/* part: work for the split k walk, cuk_qgemm_work(w, T, fast) bytes (NULL: never split) */
size_t cuk_qgemm_work(const weight *w, int T, int fast);
int cuk_qgemm(const weight *w, const float *x, float *y, int T, uint16_t *xbf, float *part, int fast, cuk_stream s);
/* dst [n] = bf16(src [n]) */
int cuk_f32_to_bf16(const float *src, uint16_t *dst, long n, cuk_stream s);
/* add_rmsnorm and glu that also write bf16(y) to ybf [T * n] when not
 * NULL: the fast precision's next product then reads them without a conversion pass. */
int cuk_add_rmsnorm_bf16(float *x, const float *d, const float *dw, const float *w, float *y, int T, int n, float eps,
                         int plus_one, uint16_t *ybf, cuk_stream s);
int cuk_glu_bf16(const float *g, long ldg, const float *u, long ldu, float *y, int T, long n, int act, uint16_t *ybf,
                 cuk_stream s);
/* The same for one row (T = 1, n % 64 == 0) feeding a product cuk_matvec_q8x2 names:
 * they also write y's two-term int8 pieces (q8x2.cuh) to xq, [n / 64][36] words, which
 * the product then reads (cuk_matvec's fast 2); the same bytes as its own quantizing. */
int cuk_add_rmsnorm_q8x2(float *x, const float *d, const float *dw, const float *w, float *y, int n, float eps, int plus_one,
                         uint32_t *xq, cuk_stream s);
int cuk_glu_q8x2(const float *g, const float *u, float *y, long n, int act, uint32_t *xq, cuk_stream s);
/* The launcher of every KERNEL op of backend/ops_list.h (contracts there):
 * cuk_<op>(its arguments, stream), S arguments as pointers read on the host at
 * launch (rope_table: inv_freq on the device). qk_norm_rope needs head_dim <= 512. */
#define CUK_OP_PROTO(name) int cuk_##name(OP_ARGS_##name(OPA_KPARAM) cuk_stream stream);
#define CUK_OP_PROTO_IF(name, mode) OPS_IF_KERNEL(name, mode, CUK_OP_PROTO)
BACKEND_OPS(CUK_OP_PROTO_IF)
#undef CUK_OP_PROTO_IF
#undef CUK_OP_PROTO
/* Rows per block of a paged view on the device (attn_kv.block_rows): the kernels'
 * key tiles (32, 64) divide it, so a tile spans at most two blocks. */
#define CUK_KV_BLOCK 64
/* A recorded step's values of one attention op (device memory, read when the kernel
 * runs): the view's key count and block table (NULL: the view is contiguous), so one
 * captured graph serves every step whatever table the session's cache holds. */
typedef struct {
    int32_t n, pad;
    const int32_t *blocks;
} cuk_kv_dyn;
/* Causal GQA attention over kv (device pointers; paged views, kv->blocks set, with
 * block_rows CUK_KV_BLOCK), as the CPU backend computes it, split over the key range;
 * work holds cuk_attention_work(...) floats. With dyn (device memory) the key count
 * and the block table are read from there when the kernel runs (kv->blocks is then
 * ignored: only whether kv->block_rows is set); kv->n then only fixes the split count:
 * any count with the same cuk_attention_bucket works. */
int cuk_attention(const float *q, const int32_t *qpos, int T, const attn_kv *kv, const cuk_kv_dyn *dyn,
                  const attn_params *p, float *out, float *work, cuk_stream s);
size_t cuk_attention_work(int T, int n_heads, int head_dim, int n_keys);
/* Attention on the tensor cores over a bf16 cache (flash_attn.cu): the contract of
 * cuk_attention, head dims 64, 96, 128, 192, 256. Keys may be split across blocks
 * (partials in work, cuk_flash_work floats), merged by its own kernel: *splits is 1
 * afterwards (the caller has nothing to merge). Returns 1 without launching anything for a shape it does not cover (another
 * head dim, a float32 cache, unaligned rows), else 0 or -1 as every launcher. */
int cuk_flash_attention(const float *q, const int32_t *qpos, int T, const attn_kv *kv, const cuk_kv_dyn *dyn,
                        const attn_params *p, float *out, float *work, int *splits, cuk_stream s);
size_t cuk_flash_work(int T, int n_heads, int head_dim, int n_keys);
/* 1: rows that fit one 16-row tile (T x n_heads / n_kv <= 16: decode) take the lean
 * flash-decoding kernel (kernel_flash_decode); 0: the 64-row kernel; -1: as
 * CUK_FLASH_DECODE says (the default, on). Tests only. */
void cuk_flash_decode_set(int on);
/* The count that stands for n_keys's split count (>= n_keys below 16,384 keys). */
int cuk_attention_bucket(int n_keys);
/* A batched decode step (attention_batch.cu): one row per sequence, what differs per
 * sequence in device memory. k, v: the cache's rows ([n, stride] elements of the
 * cache's kv_dtype), pos: their positions [n]; with blocks (a paged view: its block
 * table, CUK_KV_BLOCK rows a block) k, v and pos are the pool's bases and row j is
 * row blocks[j / 64] * 64 + j % 64 of them. k == NULL marks a padding row (its output
 * is zero). */
typedef struct {
    const void *k, *v;
    const int32_t *pos;
    int32_t n, pad;
    long stride;
    const int32_t *blocks;
} cuk_attn_seq;
/* Attention for n rows q [n, n_heads, head_dim] at positions qpos [n] over seqs [n]
 * (both device memory) ->
 * out; max_keys bounds every row's key count and fixes the split count (any count
 * with the same cuk_attention_batch_bucket launches the same kernels); work holds
 * cuk_attention_batch_work(...) floats. */
int cuk_attention_batch(const float *q, const int32_t *qpos, int n, const cuk_attn_seq *seqs, int max_keys,
                        const attn_params *p, int dtype, float *out, float *work, cuk_stream s);
/* The split kernels' partials part [rows * n_heads, splits, hd + 2] (acc, max, sum)
 * merged, the sink logits (sinks [n_heads] or NULL) added, into out [rows, n_heads, hd].
 * seqs NULL: every row has splits partials; else row r has as many as its own key
 * count seqs[r].n makes (a padding row, k == NULL: one). */
int cuk_attention_merge(const float *part, int rows, int n_heads, int splits, int hd, const float *sinks,
                        const cuk_attn_seq *seqs, float *out, cuk_stream s);
size_t cuk_attention_batch_work(int n, int n_heads, int head_dim, int max_keys);
/* cuk_attention_batch's rows on the lean flash-decoding tile (flash_attn.cu), over
 * bf16 caches: splits = attn_splits(max_keys) (the partials of several go to work for
 * cuk_attention_merge, in its format). With ybf (one split only) the output also
 * goes there rounded to bf16, as cuk_f32_to_bf16 would. Returns 1 without launching
 * for a shape it does not cover (cuk_flash_decode_batch_ok; ybf with several splits). */
int cuk_flash_decode_batch(const float *q, const int32_t *qpos, int n, const cuk_attn_seq *seqs, int splits,
                           const attn_params *p, float *out, float *work, uint16_t *ybf, cuk_stream s);
/* 1 when cuk_flash_decode_batch covers q's alignment and p's shape: head dims 64-256,
 * groups of at most 16 query heads */
int cuk_flash_decode_batch_ok(const float *q, const attn_params *p);
/* 1 when cuk_attention_batch_bf16 would run (not return 1) for these arguments */
int cuk_attention_batch_stages(const float *q, int max_keys, const attn_params *p, int dtype);
/* cuk_attention_batch that also writes its output rounded to bf16 into ybf [n,
 * n_heads, head_dim] (what the fast precision's next product would convert), on the
 * tensor-core kernel with one split; returns 1 without launching where that is not
 * what cuk_attention_batch would run (cuk_attention_batch_stages). */
int cuk_attention_batch_bf16(const float *q, const int32_t *qpos, int n, const cuk_attn_seq *seqs, int max_keys,
                             const attn_params *p, int dtype, float *out, float *work, uint16_t *ybf, cuk_stream s);
int cuk_attention_batch_bucket(int max_keys);
/* One row of a batched KV write: the slot's key and value rows and position entry
 * (device memory), and the position to store; k == NULL: a padding row. */
typedef struct {
    void *k, *v;
    int32_t *pos;
    int32_t p, pad;
} cuk_put_row;
/* rows[r] <- row r of k, v [n, row] (rows: device memory), stored as kv_dtype dtype */
int cuk_put_batch(const cuk_put_row *rows, int n, long row, const float *k, const float *v, int dtype, cuk_stream s);
/* cuk_qk_norm_rope (its op, backend/ops_list.h) that also writes the step's KV rows as
 * cuk_put_batch(rows, T, n_kv * head_dim, k, v, dtype) would after it: k's heads as
 * rotated, v's as they are, each row's position. With qkv (rows of ld values, NULL:
 * none) the step's q, k and v are first taken from there, as
 * cuk_split_cols(qkv, T, n_heads * head_dim, n_kv * head_dim, n_kv * head_dim, q, k, v)
 * would before it (v written too). */
int cuk_qk_norm_rope_put(float *q, float *k, int T, int n_heads, int n_kv, int head_dim, int norm, const float *qw,
                         const float *kw, float eps, int plus_one, const int32_t *pos, const rope_table *r,
                         const cuk_put_row *rows, float *v, const float *qkv, long ld, int dtype, cuk_stream s);
/* Cache slots [slot, slot + n) of kd, vd [slots, row] (kv_dtype dtype) <- k, v [n, row], and of
 * pd [slots] <- pos [n]; with slot_dev the slot is read from device memory instead. */
int cuk_put_rows(void *kd, void *vd, int32_t *pd, long row, int slot, const int32_t *slot_dev, const float *k,
                 const float *v, const int32_t *pos, int n, int dtype, cuk_stream s);
/* y [rows, width] += bias [width] on every row */
int cuk_add_rows(float *y, const float *bias, int rows, long width, cuk_stream st);
/* xg [n, H] = rows idx [n] of x */
int cuk_gather_rows(const float *x, const int32_t *idx, int n, long H, float *xg, cuk_stream s);
/* out [idx[r], :] += w[r] * o [r, :] for r < n (idx distinct) */
int cuk_scatter_add(const float *o, const int32_t *idx, const float *w, int n, long H, float *out, cuk_stream s);
/* a [n, I] = act(g, u) with element c of row r at g[r * gs + c * gi] (u likewise);
 * act 0 silu, 1 gelu_tanh, 2 gpt-oss clamped SwiGLU (alpha, limit) */
int cuk_moe_act(const float *g, const float *u, long gs, long gi, long I, int n, int act, float alpha, float limit,
                float *a, cuk_stream s);
/* out [1] = argmax of x [n] (lowest index on ties) */
int cuk_argmax(const float *x, int n, int32_t *out, cuk_stream s);

/* Sampling parameters the device sampler takes (engine/sample.c without penalties). */
typedef struct {
    float temperature;   /* <= 0: greedy (the argmax, lowest id on ties) */
    int top_k;           /* 1..CUK_SAMPLE_MAX_K; the device sampler needs a top-k */
    float top_p;         /* >= 1: off */
    float min_p;         /* <= 0: off */
} cuk_sample_params;
#define CUK_SAMPLE_MAX_K 1024
/* Whether cuk_sample computes exactly what engine/sample.c would for p (no penalties). */
int cuk_sample_supported(const cuk_sample_params *p);
/* One token from logits [V] (device) as celer_sampler_sample picks it, given the
 * uniform draw u[0] (device memory, a double in [0, 1)): the token goes to out[0]
 * (device memory) and, if host_out is not NULL, to host_out[0] (mapped pinned host
 * memory, written by the kernel). The draw is used whenever temperature > 0.
 * work holds cuk_sample_work(V) bytes. */
size_t cuk_sample_work(int V);
int cuk_sample(const float *logits, int V, const cuk_sample_params *p, const double *u, int32_t *out,
               int32_t *host_out, void *work, cuk_stream s);
/* n rows at once: row r of logits [n, V] with p[r] and u[r] (device memory; u may be
 * NULL when no row samples, sampling 0) -> out[r] and host_out[r]; work holds
 * n * cuk_sample_work(V) bytes. Each row is what cuk_sample computes for it alone;
 * the caller checks every row with cuk_sample_supported. */
int cuk_sample_rows(const float *logits, int V, int n, int sampling, const cuk_sample_params *p, const double *u,
                    int32_t *out, int32_t *host_out, void *work, cuk_stream s);

#ifdef __cplusplus
}
#endif
#endif
