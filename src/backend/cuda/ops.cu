/* backend/cuda/ops.cu: the element-wise and row-wise CUDA kernels: RMSNorm, RoPE,
 * gated activations, residual adds, embedding rows, format conversions, argmax. */
#include <cooperative_groups.h>
#include <cuda_fp16.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/q8x2.cuh"
#include "backend/cuda/kv_elem.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

namespace cg = cooperative_groups;

thread_local int cuk_pdl_step;

extern "C" void cuk_set_pdl(int on) { cuk_pdl_step = on; }

/* ---- the launch-order mask (common.cuh) ---- */

/* Every .cu file's copy of the mask; filled by static initializers before main, so a
 * plain zero-initialized array (no constructor runs before it). */
static cuk_late_file late_files[32];
static int n_late_files;

extern "C" int cuk_late_register(cuk_late_file f) {
    if (n_late_files < (int)(sizeof late_files / sizeof *late_files)) late_files[n_late_files++] = f;
    return n_late_files;
}

/* The copies' sources: mask m at [m], in device memory so a copy is stream-ordered and
 * never waits for the host. */
static __device__ const int late_values[CUK_LATE_ALL + 1] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32, 33, 34, 35, 36, 37, 38, 39, 40, 41, 42, 43, 44, 45, 46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 58, 59, 60, 61, 62, 63};

extern "C" int cuk_set_late(int mask, cuk_stream s) {
    if (mask < 0 || mask > CUK_LATE_ALL) return err_set("cuda launch order: mask %d outside 0..%d", mask, CUK_LATE_ALL);
    const int *v = NULL;
    if (cudaGetSymbolAddress((void **)&v, late_values) != cudaSuccess) return cuk_check("launch order (values)");
    for (int i = 0; i < n_late_files; i++) late_files[i].set(v + mask, s);
    return cuk_check("launch order");
}

extern "C" int cuk_late_files(int *masks, int cap) {
    for (int i = 0; i < n_late_files && i < cap; i++) masks[i] = late_files[i].get();
    return n_late_files;
}

static inline unsigned blocks_for(long n, int per) { return (unsigned)((n + per - 1) / per); }

/* sum of v over the block (blockDim a multiple of 32), every norm reduces this way, so fused and
 * separate norms give the same bits */
__device__ __forceinline__ float block_sum(float v, float *part) {
    v = warp_sum(v);
    __syncthreads(); /* part may still be read from the last call */
    if ((threadIdx.x & 31) == 0) part[threadIdx.x >> 5] = v;
    __syncthreads();
    if (threadIdx.x < 32) {
        float u = threadIdx.x < (blockDim.x >> 5) ? part[threadIdx.x] : 0.f;
        u = warp_sum(u);
        if (threadIdx.x == 0) part[0] = u;
    }
    __syncthreads();
    return part[0];
}

/* one block per row; sum of squares in float, as the CPU backend (which uses double) */
__global__ void kernel_rmsnorm(const float *__restrict__ x, const float *__restrict__ w, float *__restrict__ y, int n,
                               float eps, int plus_one) {
    cuk_pdl_start_small(CUK_LATE_NORM);
    const float *xr = x + (long)blockIdx.x * n;
    float *yr = y + (long)blockIdx.x * n;
    __shared__ float part[32];
    float ss = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) ss = __fmaf_rn(xr[i], xr[i], ss);
    const float r = rsqrtf(block_sum(ss, part) / n + eps);
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float g = w ? (plus_one ? 1.f + w[i] : w[i]) : 1.f;
        yr[i] = __fmul_rn(__fmul_rn(xr[i], r), g);
    }
}

extern "C" int cuk_rmsnorm(const float *x, const float *w, float *y, int T, int n, float eps, int plus_one, cuk_stream s) {
    int threads = n >= 1024 ? 1024 : ((n + 31) / 32) * 32;
    cuk_launch(kernel_rmsnorm, T, threads, 0, (cudaStream_t)s, x, w, y, n, eps, plus_one);
    return cuk_check("rmsnorm");
}


/* one block per row: x += d (or d's norm with dw), then y = norm(x) when y != NULL;
 * the per-thread sums run in kernel_rmsnorm's order (thread t: values t, t + blockDim,
 * ...) and every product and sum is rounded as written (no contraction into an FMA the
 * compiler may choose differently per kernel), so results match the separate kernels
 * bit for bit. Each thread writes only elements it read (y may be d), except in the
 * q8x2 pass, which runs after the block has synchronized. This loop form takes rows
 * of more than NORM_K * 1024 values (and every row under CUK_NORM_REG=0);
 * kernel_add_rmsnorm_r below holds smaller rows in registers. */
__global__ void kernel_add_rmsnorm(float *__restrict__ x, const float *d, const float *__restrict__ dw,
                                   const float *__restrict__ w, float *y, int n, float eps, int plus_one,
                                   uint16_t *__restrict__ ybf, uint32_t *__restrict__ xq) {
    cuk_pdl_start_small(CUK_LATE_NORM);
    float *xr = x + (long)blockIdx.x * n;
    const float *dr = d + (long)blockIdx.x * n;
    __shared__ float part[32];
    float r = 1.f;
    if (dw) {
        float ss = 0.f;
        for (int i = threadIdx.x; i < n; i += blockDim.x) ss = __fmaf_rn(dr[i], dr[i], ss);
        r = rsqrtf(block_sum(ss, part) / n + eps);
    }
    float ss = 0.f;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float a = dw ? __fmul_rn(__fmul_rn(dr[i], r), plus_one ? 1.f + dw[i] : dw[i]) : dr[i];
        const float v = __fadd_rn(xr[i], a);
        xr[i] = v;
        ss = __fmaf_rn(v, v, ss);
    }
    if (!y) return;
    const float r2 = rsqrtf(block_sum(ss, part) / n + eps);
    float *yr = y + (long)blockIdx.x * n;
    if (xq) { /* two values a lane, a warp a piece (n % 64 == 0: whole warps); block_sum has
               * synchronized the block, so x's other elements are written */
        uint32_t *qr = xq + (long)blockIdx.x * (n / 64) * XQ_W;
        for (int i = 2 * threadIdx.x; i < n; i += 2 * blockDim.x) {
            const float ga = w ? (plus_one ? 1.f + w[i] : w[i]) : 1.f, gb = w ? (plus_one ? 1.f + w[i + 1] : w[i + 1]) : 1.f;
            const float a = __fmul_rn(__fmul_rn(xr[i], r2), ga), b = __fmul_rn(__fmul_rn(xr[i + 1], r2), gb);
            yr[i] = a;
            yr[i + 1] = b;
            q8x2_piece(a, b, qr + (i / 64) * XQ_W);
        }
        return;
    }
    uint16_t *br = ybf ? ybf + (long)blockIdx.x * n : NULL;
    for (int i = threadIdx.x; i < n; i += blockDim.x) {
        const float g = w ? (plus_one ? 1.f + w[i] : w[i]) : 1.f;
        const float v = __fmul_rn(__fmul_rn(xr[i], r2), g);
        yr[i] = v;
        if (br) br[i] = f2bf16(v);
    }
}

/* The sum of v over a row's NB blocks (one thread-block cluster; NB = 1: block_sum),
 * every thread calling: each warp's sum (warp_sum), then one warp adds the row's 32 warp
 * sums in a butterfly, lane l holding warp l of the row (block l / warps a block). With
 * 32 warps a row in both shapes (1 x 1,024 or 8 x 128 threads) the same bits as
 * block_sum. part [32], tot: this block's shared memory. */
template <int NB>
__device__ __forceinline__ float row_sum(float v, float *part, float *tot) {
    if (NB == 1) return block_sum(v, part);
    v = warp_sum(v);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    cg::cluster_group cl = cg::this_cluster();
    if (lane == 0) part[warp] = v;
    cl.sync(); /* every block's warp sums are in its part */
    if (warp == 0) {
        float u = lane < NB * nw ? cl.map_shared_rank(part, lane / nw)[lane % nw] : 0.f;
        u = warp_sum(u);
        if (lane == 0) *tot = u;
    }
    cl.sync(); /* tot is written, and no block reads another's part any more */
    return *tot;
}

/* kernel_add_rmsnorm for rows of up to K values a thread, held in registers: every
 * load of the row is issued at once (the loop form above waits on one round trip per
 * value a thread, as its stores to x may alias d), and the norm weights before the PDL
 * wait (no kernel writes them). A row takes NB blocks (grid (NB, T); NB = 8: one
 * thread-block cluster, the sums through row_sum): global thread g = blockIdx.x *
 * blockDim.x + t holds values g, g + G, ... (G = NB * blockDim.x), so with G = 1,024
 * (rows of 1,024 values or more) both shapes hold what the loop form's thread g holds.
 * One block a row ran on one SM at 0.55 instructions a cycle a scheduler for ~8,400
 * cycles (llama3-8b, with the int8 pass; docs/benchmarks/cuda.md, nineteenth session).
 * The same values, sums and expressions as the loop form, so the same bits. The q8x2
 * pass reads y from shared memory: [K][blockDim] floats, this block's values. */
#define NORM_K 8
template <int K, int NB>
__global__ void __launch_bounds__(NB == 1 ? 1024 : 128) kernel_add_rmsnorm_r(float *__restrict__ x, const float *d,
                                                                             const float *__restrict__ dw,
                                                                             const float *__restrict__ w, float *y, int n,
                                                                             float eps, int plus_one,
                                                                             uint16_t *__restrict__ ybf,
                                                                             uint32_t *__restrict__ xq) {
    extern __shared__ float norm_smem[]; /* [K][blockDim.x] when xq */
    const int t = threadIdx.x, B = blockDim.x, G = NB * B, gt = blockIdx.x * B + t;
    const long row = blockIdx.y;
    float g[K], gd[K], xv[K], dv[K];
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int i = gt + k * G;
        g[k] = w && i < n ? (plus_one ? 1.f + w[i] : w[i]) : 1.f;
        gd[k] = dw && i < n ? (plus_one ? 1.f + dw[i] : dw[i]) : 1.f;
    }
    cuk_pdl_start_small(CUK_LATE_NORM);
    float *xr = x + row * n;
    const float *dr = d + row * n;
    __shared__ float part[32], tot;
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int i = gt + k * G;
        dv[k] = i < n ? dr[i] : 0.f;
        xv[k] = i < n ? xr[i] : 0.f;
    }
    float r = 1.f;
    if (dw) {
        float ss = 0.f;
#pragma unroll
        for (int k = 0; k < K; k++)
            if (gt + k * G < n) ss = __fmaf_rn(dv[k], dv[k], ss);
        r = rsqrtf(row_sum<NB>(ss, part, &tot) / n + eps);
    }
    float ss = 0.f;
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int i = gt + k * G;
        if (i < n) {
            const float a = dw ? __fmul_rn(__fmul_rn(dv[k], r), gd[k]) : dv[k];
            xv[k] = __fadd_rn(xv[k], a);
            xr[i] = xv[k];
            ss = __fmaf_rn(xv[k], xv[k], ss);
        }
    }
    if (!y) return; /* the same in every block of the row: no cluster partner waits */
    const float r2 = rsqrtf(row_sum<NB>(ss, part, &tot) / n + eps);
    float *yr = y + row * n;
    uint16_t *br = ybf ? ybf + row * n : NULL;
#pragma unroll
    for (int k = 0; k < K; k++) {
        const int i = gt + k * G;
        if (i < n) {
            const float v = __fmul_rn(__fmul_rn(xv[k], r2), g[k]);
            if (xq) {
                norm_smem[k * B + t] = v;
            } else {
                yr[i] = v;
                if (br) br[i] = f2bf16(v);
            }
        }
    }
    if (!xq) return;
    __syncthreads();
    /* two values a lane, a warp a 64-value piece (n % 64 == 0): piece p of this block is
     * piece j = p % (B / 64) of its run k = p / (B / 64), values k G + blockIdx.x B + 64 j.. */
    const int lane = t & 31, pr = B / 64;
    uint32_t *qr = xq + row * (n / 64) * XQ_W;
    for (int p = t >> 5; p < K * pr; p += B >> 5) {
        const int k = p / pr, j = p % pr;
        const long base = (long)k * G + (long)blockIdx.x * B + 64 * j;
        if (base >= n) continue; /* the same in every lane */
        const float2 v = *(const float2 *)(norm_smem + k * B + 64 * j + 2 * lane);
        *(float2 *)(yr + base + 2 * lane) = v;
        q8x2_piece(v.x, v.y, qr + (base / 64) * XQ_W);
    }
}

template <int K>
static void launch_norm_k(int nb, int T, int threads, cudaStream_t s, float *x, const float *d, const float *dw,
                          const float *w, float *y, int n, float eps, int plus_one, uint16_t *ybf, uint32_t *xq) {
    const size_t smem = xq ? (size_t)K * threads * sizeof(float) : 0;
    if (nb == 8)
        cuk_launch_cluster(kernel_add_rmsnorm_r<K, 8>, dim3(8, T), threads, smem, s, dim3(8, 1, 1), x, d, dw, w, y, n, eps, plus_one, ybf, xq);
    else
        cuk_launch(kernel_add_rmsnorm_r<K, 1>, dim3(1, T), threads, smem, s, x, d, dw, w, y, n, eps, plus_one, ybf, xq);
}

/* The narrowest row a cluster of 8 blocks takes (below: one block a row) */
#define NORM_CLUSTER_MIN_N 4096

/* T rows of n values. CUK_NORM_REG (read per launch so a test can switch it): 2 (the
 * default) a cluster of 8 blocks of 128 threads a row where the norm also writes int8
 * pieces (a one-row step of 4-bit products) and rows have NORM_CLUSTER_MIN_N values or
 * more, else 1: one block a row, values in registers (up to NORM_K a thread), else 0
 * (and rows of more than NORM_K * 1,024 values): the loop form. Measured on the H200
 * (docs/benchmarks/cuda.md, twentieth session): the cluster gains only with the int8
 * pass on wide rows (llama3-8b q4 +1-2%); it lost on gemma3-4b's 2,560 values (q4 -3.6%,
 * bf16 -3%) and gained nothing on llama3-8b bf16. */
static void launch_add_rmsnorm(float *x, const float *d, const float *dw, const float *w, float *y, int T, int n, float eps,
                               int plus_one, uint16_t *ybf, uint32_t *xq, cudaStream_t s) {
    const int threads = n >= 1024 ? 1024 : ((n + 31) / 32) * 32;
    const int per = (n + threads - 1) / threads;
    const long mode = setting_int(SET_CUK_NORM_REG);
    if (per > NORM_K || mode == 0 || T > 65535) {
        cuk_launch(kernel_add_rmsnorm, T, threads, 0, s, x, d, dw, w, y, n, eps, plus_one, ybf, xq);
        return;
    }
    const int nb = mode >= 2 && xq && n >= NORM_CLUSTER_MIN_N ? 8 : 1;
    const int th = nb == 8 ? 128 : threads;
    if (per == 1) launch_norm_k<1>(nb, T, th, s, x, d, dw, w, y, n, eps, plus_one, ybf, xq);
    else if (per == 2) launch_norm_k<2>(nb, T, th, s, x, d, dw, w, y, n, eps, plus_one, ybf, xq);
    else if (per <= 4) launch_norm_k<4>(nb, T, th, s, x, d, dw, w, y, n, eps, plus_one, ybf, xq);
    else launch_norm_k<NORM_K>(nb, T, th, s, x, d, dw, w, y, n, eps, plus_one, ybf, xq);
}

extern "C" int cuk_add_rmsnorm(float *x, const float *d, const float *dw, const float *w, float *y, int T, int n, float eps,
                               int plus_one, cuk_stream s) {
    return cuk_add_rmsnorm_bf16(x, d, dw, w, y, T, n, eps, plus_one, NULL, s);
}

extern "C" int cuk_add_rmsnorm_bf16(float *x, const float *d, const float *dw, const float *w, float *y, int T, int n,
                                    float eps, int plus_one, uint16_t *ybf, cuk_stream s) {
    launch_add_rmsnorm(x, d, dw, w, y, T, n, eps, plus_one, ybf, NULL, (cudaStream_t)s);
    return cuk_check("add_rmsnorm");
}

extern "C" int cuk_add_rmsnorm_q8x2(float *x, const float *d, const float *dw, const float *w, float *y, int n, float eps,
                                    int plus_one, uint32_t *xq, cuk_stream s) {
    if (n % 64 != 0 || !y) return err_set("cuda add_rmsnorm (q8x2): %d values (a multiple of 64 with an output)", n);
    launch_add_rmsnorm(x, d, dw, w, y, 1, n, eps, plus_one, NULL, xq, (cudaStream_t)s);
    return cuk_check("add_rmsnorm (q8x2)");
}

/* one block of head_dim threads per (token, head) of q then k: the head's RMSNorm
 * (as kernel_rmsnorm) and RoPE (as kernel_rope) in one pass. With rows (a decode
 * step's KV writes, the op after it, cuk_put_batch's rows [T]): each k head's result
 * also goes to its token's cache row, and T * n_kv more blocks copy v's heads there,
 * so the step saves the put's launch and its wait. With qkv (a batched step's fused
 * q|k|v product, rows of ld values, which cuk_split_cols would have split into q, k
 * and vb first): the heads are read from there, q and k get their results as if split
 * first, and v's heads go to vb as well as to the cache, so the split's launch goes too.
 * KT: the cache's element type. */
template <typename KT>
__global__ void kernel_qk_norm_rope(float *q, float *k, int n_heads, int n_kv, int head_dim, int norm,
                                    const float *__restrict__ qw, const float *__restrict__ kw, float eps, int plus_one,
                                    const int32_t *__restrict__ pos, const float *__restrict__ inv_freq, int dim, float af,
                                    const cuk_put_row *__restrict__ rows, float *vb, const float *__restrict__ qkv, long ld) {
    cuk_pdl_start_small(CUK_LATE_ROPE);
    const int nh = n_heads + (k ? n_kv : 0) + (rows ? n_kv : 0);
    const int t = blockIdx.x / nh, h = blockIdx.x % nh, c = threadIdx.x;
    const bool isq = h < n_heads;
    if (h >= n_heads + n_kv) { /* a v head: copied to the cache as it is */
        const long at = (long)(h - n_heads - n_kv) * head_dim + c;
        const cuk_put_row d = rows[t];
        if (c < head_dim) {
            float *vt = vb + (long)t * n_kv * head_dim;
            const float x = qkv ? qkv[t * ld + (long)(n_heads + n_kv) * head_dim + at] : vt[at];
            if (qkv) vt[at] = x;
            kv_store((KT *)d.v + at, x);
        }
        return;
    }
    float *v = isq ? q + ((long)t * n_heads + h) * head_dim : k + ((long)t * n_kv + (h - n_heads)) * head_dim;
    const float *in = qkv ? qkv + t * ld + (long)h * head_dim : v; /* k's heads follow q's in a fused row too */
    KT *dst = NULL;
    if (rows && !isq) {
        const cuk_put_row d = rows[t];
        dst = (KT *)d.k + (long)(h - n_heads) * head_dim;
        if (h == n_heads && c == 0) *d.pos = d.p;
    }
    const float *w = isq ? qw : kw;
    __shared__ float part[32];
    __shared__ float row[512];
    float a = c < head_dim ? in[c] : 0.f;
    if (norm) {
        const float r = rsqrtf(block_sum(a * a, part) / head_dim + eps);
        const float g = w && c < head_dim ? (plus_one ? 1.f + w[c] : w[c]) : 1.f;
        a = a * r * g;
    }
    if (!inv_freq) {
        if (c < head_dim) {
            v[c] = a;
            if (dst) kv_store(dst + c, a);
        }
        return;
    }
    row[c] = a;
    __syncthreads();
    const int half = dim / 2;
    if (c < half) {
        const float ang = (float)pos[t] * inv_freq[c];
        float sn, cs;
        sincosf(ang, &sn, &cs);
        cs *= af;
        sn *= af;
        const float x0 = row[c], x1 = row[c + half];
        const float y0 = x0 * cs - x1 * sn, y1 = x1 * cs + x0 * sn;
        v[c] = y0;
        v[c + half] = y1;
        if (dst) {
            kv_store(dst + c, y0);
            kv_store(dst + c + half, y1);
        }
    } else if (c >= dim && c < head_dim) {
        v[c] = a;
        if (dst) kv_store(dst + c, a);
    }
}

template <typename KT>
static int launch_qk_norm_rope(float *q, float *k, int T, int n_heads, int n_kv, int head_dim, int norm, const float *qw,
                               const float *kw, float eps, int plus_one, const int32_t *pos, const rope_table *r,
                               const cuk_put_row *rows, float *v, const float *qkv, long ld, cudaStream_t s) {
    if (head_dim > 512) return err_set("cuda qk_norm_rope: head_dim %d exceeds 512", head_dim);
    /* no table: no rotation (the kernel tests inv_freq) */
    const float *inv_freq = r ? r->inv_freq : NULL;
    const int dim = r ? r->dim : 0;
    const float attn_factor = r ? r->attn_factor : 0.0f;
    const int threads = ((head_dim + 31) / 32) * 32;
    const int blocks = T * (n_heads + (k ? n_kv : 0) + (rows ? n_kv : 0));
    cuk_launch(kernel_qk_norm_rope<KT>, blocks, threads, 0, s, q, k, n_heads, n_kv, head_dim, norm, qw, kw, eps, plus_one, pos,
               inv_freq, dim, attn_factor, rows, v, qkv, ld);
    return cuk_check("qk_norm_rope");
}

extern "C" int cuk_qk_norm_rope(float *q, float *k, int T, int n_heads, int n_kv, int head_dim, int norm, const float *qw,
                                const float *kw, float eps, int plus_one, const int32_t *pos, const rope_table *r,
                                cuk_stream s) {
    return launch_qk_norm_rope<float>(q, k, T, n_heads, n_kv, head_dim, norm, qw, kw, eps, plus_one, pos, r, NULL, NULL,
                                      NULL, 0, (cudaStream_t)s);
}

extern "C" int cuk_qk_norm_rope_put(float *q, float *k, int T, int n_heads, int n_kv, int head_dim, int norm, const float *qw,
                                    const float *kw, float eps, int plus_one, const int32_t *pos, const rope_table *r,
                                    const cuk_put_row *rows, float *v, const float *qkv, long ld, int dtype, cuk_stream s) {
    if (!k || !rows || !v) return err_set("cuda qk_norm_rope_put: needs k, v and the rows to write");
    if (qkv && ld < (long)(n_heads + 2 * n_kv) * head_dim)
        return err_set("cuda qk_norm_rope_put: q|k|v rows of %ld values hold fewer than %d heads", ld, n_heads + 2 * n_kv);
    if (dtype == KVT_BF16)
        return launch_qk_norm_rope<uint16_t>(q, k, T, n_heads, n_kv, head_dim, norm, qw, kw, eps, plus_one, pos, r, rows, v,
                                             qkv, ld, (cudaStream_t)s);
    return launch_qk_norm_rope<float>(q, k, T, n_heads, n_kv, head_dim, norm, qw, kw, eps, plus_one, pos, r, rows, v, qkv,
                                      ld, (cudaStream_t)s);
}

__global__ void kernel_rope(float *x, int T, int n_heads, int head_dim, const int32_t *pos, const float *inv_freq, int dim,
                            float af) {
    cuk_pdl_start_small(CUK_LATE_ROPE);
    const int half = dim / 2;
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)T * n_heads * half) return;
    const int k = (int)(i % half);
    const long th = i / half; /* t * n_heads + h */
    const int t = (int)(th / n_heads);
    const float ang = (float)pos[t] * inv_freq[k];
    float sn, cs;
    sincosf(ang, &sn, &cs);
    cs *= af;
    sn *= af;
    float *v = x + th * head_dim;
    const float a = v[k], c = v[k + half];
    v[k] = a * cs - c * sn;
    v[k + half] = c * cs + a * sn;
}

extern "C" int cuk_rope(float *x, int T, int n_heads, int head_dim, const int32_t *pos, const rope_table *r, cuk_stream s) {
    long n = (long)T * n_heads * (r->dim / 2);
    cuk_launch(kernel_rope, blocks_for(n, 256), 256, 0, (cudaStream_t)s, x, T, n_heads, head_dim, pos, r->inv_freq, r->dim,
               r->attn_factor);
    return cuk_check("rope");
}

/* blockIdx.x: 256 columns of a row, blockIdx.y (strided): the rows */
__global__ void kernel_glu(const float *g, long ldg, const float *u, long ldu, float *y, int T, long n, int act,
                           uint16_t *__restrict__ ybf) {
    cuk_pdl_start_small(CUK_LATE_GLU);
    const long j = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (j >= n) return;
    for (long t = blockIdx.y; t < T; t += gridDim.y) {
        const float r = glu_act(g[t * ldg + j], u[t * ldu + j], act);
        y[t * n + j] = r;
        if (ybf) ybf[t * n + j] = f2bf16(r);
    }
}

/* one row, two values a thread, a warp a piece of xq (n % 64 == 0: whole warps); y may
 * be g (the unfused forward's GLU is in place): a thread writes only what it read */
__global__ void kernel_glu_q8x2(const float *g, const float *u, float *y, long n, int act, uint32_t *__restrict__ xq) {
    cuk_pdl_start_small(CUK_LATE_GLU);
    const long j = 2 * ((long)blockIdx.x * blockDim.x + threadIdx.x);
    if (j >= n) return;
    const float a = glu_act(g[j], u[j], act), b = glu_act(g[j + 1], u[j + 1], act);
    y[j] = a;
    y[j + 1] = b;
    q8x2_piece(a, b, xq + (j / 64) * XQ_W);
}

extern "C" int cuk_glu_q8x2(const float *g, const float *u, float *y, long n, int act, uint32_t *xq, cuk_stream s) {
    if (n <= 0 || n % 64 != 0) return err_set("cuda glu (q8x2): %ld values (a multiple of 64)", n);
    cuk_launch(kernel_glu_q8x2, blocks_for(n / 2, 256), 256, 0, (cudaStream_t)s, g, u, y, n, act, xq);
    return cuk_check("glu (q8x2)");
}

extern "C" int cuk_glu(const float *g, long ldg, const float *u, long ldu, float *y, int T, long n, int act, cuk_stream s) {
    return cuk_glu_bf16(g, ldg, u, ldu, y, T, n, act, NULL, s);
}

extern "C" int cuk_glu_bf16(const float *g, long ldg, const float *u, long ldu, float *y, int T, long n, int act,
                            uint16_t *ybf, cuk_stream s) {
    if (T <= 0 || n <= 0) return 0;
    const dim3 grid((unsigned)blocks_for(n, 256), (unsigned)(T < 65535 ? T : 65535));
    cuk_launch(kernel_glu, grid, 256, 0, (cudaStream_t)s, g, ldg, u, ldu, y, T, n, act, ybf);
    return cuk_check("glu");
}

/* one block per (row, 1024 columns): float4 copies where widths and addresses allow */
__global__ void kernel_split_cols(const float *__restrict__ x, int T, long n0, long n1, long n2, float *__restrict__ y0,
                                  float *__restrict__ y1, float *__restrict__ y2, bool vec) {
    cuk_pdl_start_small(CUK_LATE_OTHER);
    const long n = n0 + n1 + n2;
    for (long t = blockIdx.y; t < T; t += gridDim.y) {
        const float *r = x + t * n;
        if (vec) {
            for (long j = ((long)blockIdx.x * blockDim.x + threadIdx.x) * 4; j < n; j += (long)gridDim.x * blockDim.x * 4) {
                const float4 v = *(const float4 *)(r + j);
                float *d = j < n0 ? y0 + t * n0 + j : j < n0 + n1 ? y1 + t * n1 + (j - n0) : y2 + t * n2 + (j - n0 - n1);
                *(float4 *)d = v;
            }
        } else {
            for (long j = (long)blockIdx.x * blockDim.x + threadIdx.x; j < n; j += (long)gridDim.x * blockDim.x) {
                float *d = j < n0 ? y0 + t * n0 + j : j < n0 + n1 ? y1 + t * n1 + (j - n0) : y2 + t * n2 + (j - n0 - n1);
                *d = r[j];
            }
        }
    }
}

extern "C" int cuk_split_cols(const float *x, int T, long n0, long n1, long n2, float *y0, float *y1, float *y2,
                              cuk_stream s) {
    const long n = n0 + n1 + n2;
    if (T <= 0 || n <= 0) return 0;
    const bool vec = ((n0 | n1 | n2) & 3) == 0 && (((uintptr_t)x | (uintptr_t)y0 | (uintptr_t)y1 | (uintptr_t)y2) & 15) == 0;
    const dim3 grid((unsigned)blocks_for(vec ? n / 4 : n, 256), (unsigned)(T < 65535 ? T : 65535));
    cuk_launch(kernel_split_cols, grid, 256, 0, (cudaStream_t)s, x, T, n0, n1, n2, y0, y1, y2, vec);
    return cuk_check("split_cols");
}

__global__ void kernel_add(float *y, const float *x, long n) {
    cuk_pdl_start_small(CUK_LATE_OTHER);
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += x[i];
}

extern "C" int cuk_add(float *y, const float *x, long n, cuk_stream s) {
    cuk_launch(kernel_add, blocks_for(n, 256), 256, 0, (cudaStream_t)s, y, x, n);
    return cuk_check("add");
}

/* element j of row r of w as float (any format the matvec handles) */
__device__ __forceinline__ float weight_elem(const weight w, int64_t r, int64_t j) {
    switch (w.fmt) {
    case WF_BF16: return bf16f(((const uint16_t *)w.data)[r * w.cols + j]);
    case WF_F16: return f16f(((const uint16_t *)w.data)[r * w.cols + j]);
    case WF_F32: return ((const float *)w.data)[r * w.cols + j];
    case WF_AFFINE: {
        const uint32_t *row = (const uint32_t *)w.data + r * (w.cols * w.bits / 32);
        const int64_t bit = j * w.bits;
        uint64_t v = row[bit >> 5] >> (bit & 31);
        if ((bit & 31) + w.bits > 32) v |= (uint64_t)row[(bit >> 5) + 1] << (32 - (bit & 31));
        const uint32_t code = (uint32_t)v & ((1u << w.bits) - 1);
        const int64_t g = r * (w.cols / w.group) + j / w.group;
        return (float)code * scale_load(w.scales, (int)w.stype, g) + scale_load(w.biases, (int)w.stype, g);
    }
    case WF_MXFP4: {
        const float lut[16] = {0.f, .5f, 1.f, 1.5f, 2.f, 3.f, 4.f, 6.f, -0.f, -.5f, -1.f, -1.5f, -2.f, -3.f, -4.f, -6.f};
        const uint32_t *row = (const uint32_t *)w.data + r * (w.cols / 8);
        const uint32_t code = (row[j >> 3] >> (4 * (j & 7))) & 15u;
        const uint8_t sc = ((const uint8_t *)w.scales)[r * (w.cols / 32) + j / 32];
        return lut[code] * __uint_as_float(sc == 0 ? 0x00400000u : (uint32_t)sc << 23);
    }
    }
    return 0.f;
}

__global__ void kernel_embed(const weight w, const int32_t *tok, int T, float scale, float *x) {
    cuk_pdl_start_small(CUK_LATE_OTHER);
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)T * w.cols) return;
    const int t = (int)(i / w.cols);
    const int64_t j = i % w.cols;
    x[i] = weight_elem(w, tok[t], j) * scale;
}

extern "C" int cuk_embed(const weight *w, const int32_t *tok, int T, float scale, float *x, cuk_stream s) {
    long n = (long)T * w->cols;
    cuk_launch(kernel_embed, blocks_for(n, 256), 256, 0, (cudaStream_t)s, *w, tok, T, scale, x);
    return cuk_check("embed");
}

/* a rank's share of a vocabulary-split embedding: rows tok - lo, zero outside its rows */
__global__ void kernel_embed_range(const weight w, const int32_t *tok, int T, float scale, float *x, int lo) {
    cuk_pdl_start_small(CUK_LATE_OTHER);
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)T * w.cols) return;
    const int t = (int)(i / w.cols);
    const int64_t r = (int64_t)tok[t] - lo, j = i % w.cols;
    x[i] = r >= 0 && r < w.rows ? weight_elem(w, r, j) * scale : 0.f;
}

extern "C" int cuk_embed_range(const weight *w, const int32_t *tok, int T, float scale, float *x, int lo, cuk_stream s) {
    long n = (long)T * w->cols;
    cuk_launch(kernel_embed_range, blocks_for(n, 256), 256, 0, (cudaStream_t)s, *w, tok, T, scale, x, lo);
    return cuk_check("embed_range");
}

/* cache slots [slot, slot + n) <- rows k, v [n, row] and positions pos [n]; slot from
 * *slot_dev when it is not NULL (a recorded step reads it at replay time). KT: the
 * cache's element type (bf16 rows rounded to nearest even, as the host rounds). */

template <typename KT>
__global__ void kernel_put_rows(KT *kd, KT *vd, int32_t *pd, long row, int slot, const int32_t *slot_dev,
                                const float *k, const float *v, const int32_t *pos, int n) {
    cuk_pdl_start_small(CUK_LATE_PUT);
    const int s0 = slot_dev ? *slot_dev : slot;
    const long total = (long)n * row;
    for (long i = (long)blockIdx.x * blockDim.x + threadIdx.x; i < total; i += (long)gridDim.x * blockDim.x) {
        kv_store(kd + (long)s0 * row + i, k[i]);
        kv_store(vd + (long)s0 * row + i, v[i]);
    }
    if (blockIdx.x == 0)
        for (int i = threadIdx.x; i < n; i += blockDim.x) pd[s0 + i] = pos[i];
}

extern "C" int cuk_put_rows(void *kd, void *vd, int32_t *pd, long row, int slot, const int32_t *slot_dev, const float *k,
                            const float *v, const int32_t *pos, int n, int dtype, cuk_stream s) {
    const long total = (long)n * row;
    long nb = blocks_for(total, 256);
    if (nb > 1024) nb = 1024;
    if (dtype == KVT_BF16)
        cuk_launch(kernel_put_rows<uint16_t>, (unsigned)nb, 256, 0, (cudaStream_t)s, (uint16_t *)kd, (uint16_t *)vd, pd, row,
                   slot, slot_dev, k, v, pos, n);
    else
        cuk_launch(kernel_put_rows<float>, (unsigned)nb, 256, 0, (cudaStream_t)s, (float *)kd, (float *)vd, pd, row, slot,
                   slot_dev, k, v, pos, n);
    return cuk_check("put_rows");
}

/* rows [r0, r0 + n) of w as bf16 hi, and (lo != NULL) the rounding error as bf16 lo:
 * one element a thread, any format (dequant.cu takes quantized rows eight a thread) */
__global__ void kernel_weight_bf16(const weight w, int64_t r0, int64_t n, uint16_t *hi, uint16_t *lo) {
    cuk_pdl_start_small(CUK_LATE_OTHER);
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n * w.cols) return;
    if (w.fmt == WF_BF16) {
        hi[i] = ((const uint16_t *)w.data)[r0 * w.cols + i];
        if (lo) lo[i] = 0;
        return;
    }
    const float v = weight_elem(w, r0 + i / w.cols, i % w.cols);
    const uint16_t h = f2bf16(v);
    hi[i] = h;
    if (lo) lo[i] = f2bf16(v - bf16f(h));
}

extern "C" int cuk_weight_rows_elem(const weight *w, int64_t r0, int64_t n, uint16_t *hi, uint16_t *lo, cuk_stream s) {
    long total = (long)n * w->cols;
    cuk_launch(kernel_weight_bf16, blocks_for(total, 256), 256, 0, (cudaStream_t)s, *w, r0, n, hi, lo);
    return cuk_check("weight_to_bf16");
}

__global__ void kernel_f32_bf16(const float *src, uint16_t *dst, long n) {
    cuk_pdl_start_small(CUK_LATE_OTHER);
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) dst[i] = f2bf16(src[i]);
}

extern "C" int cuk_f32_to_bf16(const float *src, uint16_t *dst, long n, cuk_stream s) {
    cuk_launch(kernel_f32_bf16, blocks_for(n, 256), 256, 0, (cudaStream_t)s, src, dst, n);
    return cuk_check("f32_to_bf16");
}

/* one block of 1024 threads: (value, index) reduction, lowest index on ties */
__global__ void kernel_argmax(const float *x, int n, int32_t *out) {
    cuk_pdl_start_small(CUK_LATE_OTHER);
    __shared__ float bv[32];
    __shared__ int bi[32];
    float v = -INFINITY;
    int idx = 0x7fffffff;
    for (int i = threadIdx.x; i < n; i += blockDim.x)
        if (x[i] > v) { v = x[i]; idx = i; }
    for (int o = 16; o > 0; o >>= 1) {
        const float ov = __shfl_xor_sync(0xffffffffu, v, o);
        const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
        if (ov > v || (ov == v && oi < idx)) { v = ov; idx = oi; }
    }
    if ((threadIdx.x & 31) == 0) { bv[threadIdx.x >> 5] = v; bi[threadIdx.x >> 5] = idx; }
    __syncthreads();
    if (threadIdx.x < 32) {
        v = bv[threadIdx.x];
        idx = bi[threadIdx.x];
        for (int o = 16; o > 0; o >>= 1) {
            const float ov = __shfl_xor_sync(0xffffffffu, v, o);
            const int oi = __shfl_xor_sync(0xffffffffu, idx, o);
            if (ov > v || (ov == v && oi < idx)) { v = ov; idx = oi; }
        }
        if (threadIdx.x == 0) *out = idx;
    }
}

extern "C" int cuk_argmax(const float *x, int n, int32_t *out, cuk_stream s) {
    cuk_launch(kernel_argmax, 1, 1024, 0, (cudaStream_t)s, x, n, out);
    return cuk_check("argmax");
}

__global__ void kernel_scale(float *x, long n, float s) {
    cuk_pdl_start_small(CUK_LATE_OTHER);
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] *= s;
}

extern "C" int cuk_scale(float *x, long n, float s, cuk_stream st) {
    cuk_launch(kernel_scale, blocks_for(n, 256), 256, 0, (cudaStream_t)st, x, n, s);
    return cuk_check("scale");
}

/* divide then multiply, as the CPU backend and transformers do */
__global__ void kernel_softcap(float *x, long n, float cap) {
    cuk_pdl_start_small(CUK_LATE_OTHER);
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] = cap * tanhf(x[i] / cap);
}

extern "C" int cuk_softcap(float *x, long n, float cap, cuk_stream st) {
    cuk_launch(kernel_softcap, blocks_for(n, 256), 256, 0, (cudaStream_t)st, x, n, cap);
    return cuk_check("softcap");
}

__global__ void kernel_add_rows(float *y, const float *bias, long n, long width) {
    cuk_pdl_start_small(CUK_LATE_OTHER);
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) y[i] += bias[i % width];
}

extern "C" int cuk_add_rows(float *y, const float *bias, int rows, long width, cuk_stream st) {
    const long n = (long)rows * width;
    cuk_launch(kernel_add_rows, blocks_for(n, 256), 256, 0, (cudaStream_t)st, y, bias, n, width);
    return cuk_check("add_rows");
}
