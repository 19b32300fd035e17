/* backend/cuda/attention_batch.cu: a batched decode step's attention and KV writes,
 * one launch each per layer for every sequence of the step (issue 16).
 *
 * Every row of the step is one sequence's one new query. What differs per sequence
 * (its cache's rows, positions and row count, its query position) is a descriptor in
 * device memory (cuk_attn_seq), read when the kernel runs: the launch itself depends
 * only on the row count (padded to a bucket by the forward) and a bound on the key
 * count, so a captured graph serves every step of a bucket. A paged cache's
 * descriptor carries its block table (row j of the view is row kv_slot(blocks, j) of
 * the pool), so tables that change between steps change only values.
 *
 * The attention kernel: one block per (row, KV head, group tile, key split). Its
 * warps walk the split's keys (attn_walk: 32 keys' table entries and positions at once,
 * up to four keys' rows in flight); each key row is read once for the GT query heads that
 * share it (GQA), with an online softmax (max, sum, weighted values) per head and
 * warp. Masks are by stored position (causal and sliding window), so a rotating
 * cache's ring order works. One split writes the result (sinks included); several
 * write partials that cuk_attention_merge merges, each row over its own split count.
 * The split rule and the warps' merge are attention.cu's (attn_merge.cuh), so sums
 * run in the same order as its split kernel for the same split.
 *
 * The KV element type is a template parameter (kv_elem.cuh: float32 or bf16 rows). */
#include <climits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kv_elem.cuh"
#include "backend/cuda/attn_merge.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

extern "C" int cuk_attention_batch_bucket(int max_keys) { return attn_splits(max_keys) * ATT_KEYS_PER_SPLIT; }

extern "C" size_t cuk_attention_batch_work(int n, int n_heads, int head_dim, int max_keys) {
    const int s = attn_splits(max_keys);
    return s == 1 ? 0 : (size_t)n * n_heads * s * (head_dim + 2);
}

/* grid (n * n_kv * (G / GT), splits); block W warps.
 * part [n * n_heads, splits, HD + 2] (acc, m, l) when splits > 1, else out directly. */
template <typename KT, int HD, int GT, int W>
__global__ void __launch_bounds__(W * 32)
    kernel_attn_batch(const float *__restrict__ q, const int32_t *__restrict__ qpos, const cuk_attn_seq *__restrict__ seqs, int n_heads, int n_kv,
                      float scale, int window, float softcap, const float *__restrict__ sinks, float *__restrict__ part,
                      float *__restrict__ out) {
    cuk_pdl_start_small(CUK_LATE_ATTN);
    constexpr int PL = HD / 32;
    const int G = n_heads / n_kv, tiles = G / GT;
    const int bx = blockIdx.x, split = blockIdx.y, splits = gridDim.y;
    const int row = bx / (n_kv * tiles), rem = bx % (n_kv * tiles), g = rem / tiles, h0 = g * G + (rem % tiles) * GT;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const cuk_attn_seq sq = seqs[row];
    const int n = sq.k ? sq.n : 0;
    const int my_splits = min(attn_splits(n), splits);
    if (splits > 1 && split >= my_splits) return; /* the merge reads only this row's splits */
    const int32_t qp = qpos[row];
    float qv[GT][PL], acc[GT][PL], m[GT], l[GT];
#pragma unroll
    for (int t = 0; t < GT; t++) {
#pragma unroll
        for (int i = 0; i < PL; i++) {
            qv[t][i] = q[((long)row * n_heads + h0 + t) * HD + lane + 32 * i] * scale;
            acc[t][i] = 0.f;
        }
        m[t] = -INFINITY;
        l[t] = 0.f;
    }
    const int per = (n + my_splits - 1) / my_splits;
    const int j0 = (splits > 1 ? split : 0) * per, j1 = splits > 1 ? min(n, j0 + per) : n;
    const KT *K = (const KT *)sq.k, *V = (const KT *)sq.v;
    attn_walk<W, PL>(K, V, sq.stride, (long)g * HD, sq.blocks, sq.pos, j0, j1, warp, lane,
                            qp, window, [&](const float (&kr)[PL], const float (&vr)[PL]) {
#pragma unroll
                                for (int t = 0; t < GT; t++) {
                                    float d = 0.f;
#pragma unroll
                                    for (int i = 0; i < PL; i++) d += qv[t][i] * kr[i];
                                    d = warp_sum(d);
                                    if (softcap > 0.f) d = softcap * tanhf(d / softcap);
                                    const float mn = fmaxf(m[t], d), f = __expf(m[t] - mn), e = __expf(d - mn);
#pragma unroll
                                    for (int i = 0; i < PL; i++) acc[t][i] = acc[t][i] * f + e * vr[i];
                                    l[t] = l[t] * f + e;
                                    m[t] = mn;
                                }
                            });
    /* merge the warps of this block, one head at a time */
    __shared__ float sm[W], sl[W], sacc[W][HD];
#pragma unroll 1
    for (int t = 0; t < GT; t++) {
        const int h = h0 + t;
        const long th = (long)row * n_heads + h;
        __syncthreads(); /* the previous head's merge has read the shared arrays */
        if (lane == 0) {
            sm[warp] = m[t];
            sl[warp] = l[t];
        }
#pragma unroll
        for (int i = 0; i < PL; i++) sacc[warp][lane + 32 * i] = acc[t][i];
        __syncthreads();
        attn_warps_out<HD, W>(sm, sl, sacc, sinks ? sinks + h : NULL, splits == 1 ? out + th * HD : NULL,
                                     splits == 1 ? NULL : part + (th * splits + split) * (HD + 2));
    }
}

/* The group tile: the most query heads of one KV head a block takes (a power of two
 * dividing G, at most 32 channels per lane in registers). */
static int group_tile(int G, int hd) {
    int gt = 8;
    while (gt > 1 && (G % gt != 0 || gt * hd > 1024)) gt /= 2;
    return gt;
}

template <typename KT, int HD, int GT>
static void launch_batch(dim3 grid, cudaStream_t s, const float *q, const int32_t *qpos, const cuk_attn_seq *seqs,
                         const attn_params *p, float *part, float *out) {
    constexpr int W16 = HD <= 128 ? 16 : 8;
    switch (attn_decode_warps(HD, (long)grid.x * grid.y)) {
    case 4:
        cuk_launch(kernel_attn_batch<KT, HD, GT, 4>, grid, 4 * 32, 0, s, q, qpos, seqs, p->n_heads, p->n_kv, p->scale,
                   p->window, p->softcap, p->sinks, part, out);
        break;
    case 16:
        cuk_launch(kernel_attn_batch<KT, HD, GT, W16>, grid, W16 * 32, 0, s, q, qpos, seqs, p->n_heads, p->n_kv, p->scale,
                   p->window, p->softcap, p->sinks, part, out);
        break;
    default:
        cuk_launch(kernel_attn_batch<KT, HD, GT, 8>, grid, 8 * 32, 0, s, q, qpos, seqs, p->n_heads, p->n_kv, p->scale,
                   p->window, p->softcap, p->sinks, part, out);
    }
}

template <typename KT, int HD>
static int dispatch_gt(int gt, dim3 grid, cudaStream_t s, const float *q, const int32_t *qpos, const cuk_attn_seq *seqs,
                       const attn_params *p, float *part, float *out) {
    switch (gt) {
    case 1: launch_batch<KT, HD, 1>(grid, s, q, qpos, seqs, p, part, out); return 0;
    case 2: if (2 * HD <= 1024) { launch_batch<KT, HD, (2 * HD <= 1024 ? 2 : 1)>(grid, s, q, qpos, seqs, p, part, out); return 0; } break;
    case 4: if (4 * HD <= 1024) { launch_batch<KT, HD, (4 * HD <= 1024 ? 4 : 1)>(grid, s, q, qpos, seqs, p, part, out); return 0; } break;
    case 8: if (8 * HD <= 1024) { launch_batch<KT, HD, (8 * HD <= 1024 ? 8 : 1)>(grid, s, q, qpos, seqs, p, part, out); return 0; } break;
    }
    return err_set("cuda attention (batch): group tile %d for head_dim %d", gt, HD);
}

/* a bf16 cache's rows go to the tensor cores past this key bound */
static bool batch_mma(int max_keys) {
    const long mma_min = setting_int(SET_CUK_ATTN_BATCH_MMA_MIN_KEYS);
    return mma_min < 0 || max_keys > mma_min;
}

template <typename KT>
static int attention_batch(const float *q, const int32_t *qpos, int n, const cuk_attn_seq *seqs, int max_keys, const attn_params *p,
                           float *out, float *work, cudaStream_t s) {
    if (n <= 0) return 0;
    if (p->n_kv <= 0 || p->n_heads % p->n_kv != 0)
        return err_set("cuda attention (batch): %d heads over %d KV heads", p->n_heads, p->n_kv);
    const int G = p->n_heads / p->n_kv, gt = group_tile(G, p->head_dim), splits = attn_splits(max_keys);
    if (splits > 1 && !work) return err_set("cuda attention (batch): no work space for %d splits", splits);
    const dim3 grid((unsigned)(n * p->n_kv * (G / gt)), (unsigned)splits);
    float *part = splits > 1 ? work : NULL;
    int rc = 1;
    /* past the key bound, a bf16 cache's rows go to the tensor cores (the lean
     * flash-decoding tile, one block per sequence, KV head and split) */
    if (sizeof(KT) == 2 && batch_mma(max_keys)) rc = cuk_flash_decode_batch(q, qpos, n, seqs, splits, p, out, work, NULL, s);
    if (rc < 0) return -1;
    if (rc == 0) return splits == 1 ? 0 : cuk_attention_merge(part, n, p->n_heads, splits, p->head_dim, p->sinks, seqs, out, s);
    switch (p->head_dim) {
    case 32: rc = dispatch_gt<KT, 32>(gt, grid, s, q, qpos, seqs, p, part, out); break;
    case 64: rc = dispatch_gt<KT, 64>(gt, grid, s, q, qpos, seqs, p, part, out); break;
    case 96: rc = dispatch_gt<KT, 96>(gt, grid, s, q, qpos, seqs, p, part, out); break;
    case 128: rc = dispatch_gt<KT, 128>(gt, grid, s, q, qpos, seqs, p, part, out); break;
    case 192: rc = dispatch_gt<KT, 192>(gt, grid, s, q, qpos, seqs, p, part, out); break;
    case 256: rc = dispatch_gt<KT, 256>(gt, grid, s, q, qpos, seqs, p, part, out); break;
    case 512: rc = dispatch_gt<KT, 512>(gt, grid, s, q, qpos, seqs, p, part, out); break;
    default:
        return err_set("cuda attention (batch): head_dim %d not supported (32, 64, 96, 128, 192, 256, 512)", p->head_dim);
    }
    if (rc != 0 || cuk_check("attention (batch)") != 0) return -1;
    if (splits == 1) return 0;
    return cuk_attention_merge(part, n, p->n_heads, splits, p->head_dim, p->sinks, seqs, out, s);
}

extern "C" int cuk_attention_batch(const float *q, const int32_t *qpos, int n, const cuk_attn_seq *seqs, int max_keys,
                                   const attn_params *p, int dtype, float *out, float *work, cuk_stream st) {
    if (dtype == KVT_BF16) return attention_batch<uint16_t>(q, qpos, n, seqs, max_keys, p, out, work, (cudaStream_t)st);
    return attention_batch<float>(q, qpos, n, seqs, max_keys, p, out, work, (cudaStream_t)st);
}

extern "C" int cuk_attention_batch_stages(const float *q, int max_keys, const attn_params *p, int dtype) {
    return dtype == KVT_BF16 && batch_mma(max_keys) && attn_splits(max_keys) == 1 && cuk_flash_decode_batch_ok(q, p);
}

extern "C" int cuk_attention_batch_bf16(const float *q, const int32_t *qpos, int n, const cuk_attn_seq *seqs, int max_keys,
                                        const attn_params *p, int dtype, float *out, float *work, uint16_t *ybf, cuk_stream st) {
    if (n <= 0 || !cuk_attention_batch_stages(q, max_keys, p, dtype)) return 1;
    return cuk_flash_decode_batch(q, qpos, n, seqs, 1, p, out, work, ybf, st);
}

/* ---- the step's KV writes: row r of k, v [n, row] into its sequence's slot ---- */

template <typename KT>
__global__ void kernel_put_batch(const cuk_put_row *__restrict__ rows, long row, const float *__restrict__ k,
                                 const float *__restrict__ v) {
    cuk_pdl_start_small(CUK_LATE_PUT);
    const int r = blockIdx.y;
    const cuk_put_row d = rows[r];
    if (!d.k) return; /* a padding row */
    KT *kd = (KT *)d.k, *vd = (KT *)d.v;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < row; i += (long)gridDim.x * blockDim.x) {
        kv_store(kd + i, k[(long)r * row + i]);
        kv_store(vd + i, v[(long)r * row + i]);
    }
    if (blockIdx.x == 0 && threadIdx.x == 0) *d.pos = d.p;
}

extern "C" int cuk_put_batch(const cuk_put_row *rows, int n, long row, const float *k, const float *v, int dtype,
                             cuk_stream st) {
    if (n <= 0) return 0;
    long nb = (row + 255) / 256;
    if (nb > 64) nb = 64;
    const dim3 grid((unsigned)nb, (unsigned)n);
    if (dtype == KVT_BF16)
        cuk_launch(kernel_put_batch<uint16_t>, grid, 256, 0, (cudaStream_t)st, rows, row, k, v);
    else
        cuk_launch(kernel_put_batch<float>, grid, 256, 0, (cudaStream_t)st, rows, row, k, v);
    return cuk_check("put_rows (batch)");
}
