/* backend/cuda/skinny.cu: decode products of a batch (T = 1..32 rows) against bf16
 * weights on the tensor cores, reading each weight once. y [T, N] = x [T, K] W^T.
 *
 * A batched decode step is bound by reading the weights; cuBLAS at 8-32 rows and the
 * matrix-vector kernels past 4 rows read them well below the copy bandwidth
 * (docs/benchmarks/cuda-batched.md). Here the weights are the mma's M side (16 output
 * features per fragment) and the batch its N side (8 rows per fragment), so 1-32 rows
 * cost the same weight traffic; the tensor cores are nowhere near busy.
 *
 * Fragments come straight from global memory: a dot product does not care in which
 * order k runs, so lane (g, t) of a warp loads 16 contiguous k values of a weight row
 * (two 16-byte loads) and the same 16 k of an activation row, and the four k-steps of
 * one 64-column chunk use them in an order both operands agree on (k 2t, 2t+1 of the
 * fragment layout is element 4s, 4s+1 of the lane's 16; k 2t+8, 2t+9 is 4s+2, 4s+3).
 *
 * The activations arrive staged in bf16 (xbf, as the cuBLAS path stages them): fast
 * rounds once; exact splits each value into hi + lo, two mma per fragment against the
 * same weight registers, so exact costs no extra weight traffic. Converting in the
 * kernel instead made every block convert the whole batch again (measured: 31% of the
 * copy bandwidth at 32 rows, instruction-bound).
 *
 * Work split: a block (8 warps) owns 64 output features; its warps pair up on the two
 * 32-feature halves and split the columns four ways, chunk by chunk, so the block
 * streams 512 contiguous columns of its rows at a time; the partial sums meet in shared
 * memory. Products with too few row blocks to fill the GPU also split the columns over
 * S <= 8 blocks of one thread-block cluster, and the cluster's first block adds the
 * others' sums through distributed shared memory in a fixed order: no second kernel,
 * no work space, and the same bits on every run (a replayed graph must match). */
#include <cooperative_groups.h>

#include "backend/cuda/common.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

namespace cg = cooperative_groups;

#define SK_WARPS 8
#define SK_ROWS 64  /* output features per block */
#define SK_CHUNK 64 /* columns per warp iteration */
#define SK_KW 4     /* warps splitting the columns within a block */
#define SK_MAX_SPLIT 8 /* blocks of a cluster (the portable maximum) */

__device__ __forceinline__ void mma_bf16(float (&d)[4], const uint32_t a0, const uint32_t a1, const uint32_t a2,
                                         const uint32_t a3, const uint32_t b0, const uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* The weights of one chunk for one lane: 2 m-tiles x (row g, row g+8) x 16 columns. */
struct sk_wregs {
    uint4 v[2][2][2]; /* [m-tile][row g / g+8][first / second 8 columns] */
};

/* Weight rows past N read the last row (never stored); columns past K read zeros. */
__device__ __forceinline__ void sk_load_w(sk_wregs &r, const uint16_t *__restrict__ W, int N, long K, int row0, long k) {
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const int row = min(row0 + 16 * i + 8 * h, N - 1);
            const uint16_t *p = W + (long)row * K + k;
#pragma unroll
            for (int q = 0; q < 2; q++)
                r.v[i][h][q] = k + 8 * q + 8 <= K ? ld_stream(p + 8 * q) : make_uint4(0, 0, 0, 0);
        }
}

/* 16 staged bf16 activations of row t from column k (zeros past T or K) */
__device__ __forceinline__ void sk_load_x(uint4 (&v)[2], const uint16_t *__restrict__ x, int T, long K, int t, long k) {
#pragma unroll
    for (int q = 0; q < 2; q++)
        v[q] = t < T && k + 8 * q + 8 <= K ? __ldg((const uint4 *)(x + (long)t * K + k + 8 * q)) : make_uint4(0, 0, 0, 0);
}

/* Word p (elements 2p, 2p+1) of 16 bf16 values held as two 16-byte loads */
__device__ __forceinline__ uint32_t w32(const uint4 (&v)[2], int p) {
    const uint4 &u = v[p >> 2];
    const int e = p & 3;
    return e == 0 ? u.x : e == 1 ? u.y : e == 2 ? u.z : u.w;
}

/* acc [m-tile][n-tile][4] += this chunk's weights times the activations (lo: exact's
 * second term, NULL under fast) */
template <int NT, bool EXACT>
__device__ __forceinline__ void sk_chunk(float (&acc)[2][NT][4], const sk_wregs &w, const uint16_t *__restrict__ xh,
                                         const uint16_t *__restrict__ xl, int T, long K, int g, long k) {
#pragma unroll
    for (int j = 0; j < NT; j++) {
        uint4 hi[2], lo[2];
        sk_load_x(hi, xh, T, K, 8 * j + g, k);
        if (EXACT) sk_load_x(lo, xl, T, K, 8 * j + g, k);
#pragma unroll
        for (int s = 0; s < 4; s++)
#pragma unroll
            for (int i = 0; i < 2; i++) {
                const uint32_t a0 = w32(w.v[i][0], 2 * s), a1 = w32(w.v[i][1], 2 * s);
                const uint32_t a2 = w32(w.v[i][0], 2 * s + 1), a3 = w32(w.v[i][1], 2 * s + 1);
                mma_bf16(acc[i][j], a0, a1, a2, a3, w32(hi, 2 * s), w32(hi, 2 * s + 1));
                if (EXACT) mma_bf16(acc[i][j], a0, a1, a2, a3, w32(lo, 2 * s), w32(lo, 2 * s + 1));
            }
    }
}

/* grid (ceil(N / 64), S) in clusters of (1, S): P chunks in flight per warp besides the
 * one being multiplied. */
template <int NT, bool EXACT, int P>
__global__ void __launch_bounds__(SK_WARPS * 32) kernel_skinny(const uint16_t *__restrict__ W, const uint16_t *__restrict__ xh,
                                                               const uint16_t *__restrict__ xl, float *__restrict__ y, int N,
                                                               long K, int T) {
    __shared__ float red[SK_KW][SK_ROWS][8 * NT + 1]; /* [column warp][feature][batch row] */
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t4 = lane & 3;
    const int wm = warp & 1, wk = warp >> 1;
    const int row0 = blockIdx.x * SK_ROWS + 32 * wm + g;
    const long nch = (K + SK_CHUNK - 1) / SK_CHUNK;
    const long c0 = nch * blockIdx.y / gridDim.y, c1 = nch * (blockIdx.y + 1) / gridDim.y;
    float acc[2][NT][4];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < NT; j++)
#pragma unroll
            for (int e = 0; e < 4; e++) acc[i][j][e] = 0.f;
    /* the first chunks go out before waiting for the kernel that wrote x (weights are
     * never written) */
    sk_wregs buf[P + 1];
    long c = c0 + wk;
#pragma unroll
    for (int q = 0; q < P; q++)
        if (c + q * SK_KW < c1) sk_load_w(buf[q], W, N, K, row0, (c + q * SK_KW) * SK_CHUNK + 16 * t4);
    cuk_pdl_start();
    /* The ring of buffers is indexed by compile-time constants (the inner loop is
     * unrolled): moving a buffer whose loads are still out would wait for them, which
     * is what a rolled loop's register copies did (no chunk was in flight). */
    for (; c < c1; c += (P + 1) * SK_KW) {
#pragma unroll
        for (int q = 0; q <= P; q++) {
            const long cc = c + q * SK_KW;
            if (cc >= c1) break;
            const long k = cc * SK_CHUNK + 16 * t4;
            if (cc + P * SK_KW < c1) sk_load_w(buf[(q + P) % (P + 1)], W, N, K, row0, k + P * SK_KW * SK_CHUNK);
            sk_chunk<NT, EXACT>(acc, buf[q], xh, xl, T, K, g, k);
        }
    }
    /* d0 d1: feature g, batch rows 2t4, 2t4+1; d2 d3: feature g + 8 */
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < NT; j++) {
            const int f = 32 * wm + 16 * i + g, b = 8 * j + 2 * t4;
            red[wk][f][b] = acc[i][j][0];
            red[wk][f][b + 1] = acc[i][j][1];
            red[wk][f + 8][b] = acc[i][j][2];
            red[wk][f + 8][b + 1] = acc[i][j][3];
        }
    __syncthreads();
    const int n0 = blockIdx.x * SK_ROWS;
    for (int e = threadIdx.x; e < SK_ROWS * T; e += SK_WARPS * 32) {
        const int f = e % SK_ROWS, b = e / SK_ROWS;
        const float s = red[0][f][b] + red[1][f][b] + red[2][f][b] + red[3][f][b];
        if (gridDim.y == 1) {
            if (n0 + f < N) y[(long)b * N + n0 + f] = s;
        } else {
            red[0][f][b] = s;
        }
    }
    if (gridDim.y == 1) return;
    cg::cluster_group cluster = cg::this_cluster();
    cluster.sync(); /* every block's sums are in its red[0] */
    if (cluster.block_rank() == 0) {
        const int S = (int)cluster.num_blocks();
        for (int e = threadIdx.x; e < SK_ROWS * T; e += SK_WARPS * 32) {
            const int f = e % SK_ROWS, b = e / SK_ROWS;
            float s = 0.f;
            for (int r = 0; r < S; r++) s += cluster.map_shared_rank(&red[0][f][b], r)[0];
            if (n0 + f < N) y[(long)b * N + n0 + f] = s;
        }
    }
    cluster.sync(); /* no block leaves while the first still reads its shared memory */
}

static int cfg_forced; /* cuk_skinny_set_cfg */

extern "C" void cuk_skinny_set_cfg(int cfg) { cfg_forced = cfg >= 1 && cfg <= 3 ? cfg : 0; }

template <int NT, bool EXACT, int P>
static void launch(const uint16_t *W, const uint16_t *xh, const uint16_t *xl, float *y, int N, long K, int T,
                   cudaStream_t s) {
    auto kern = kernel_skinny<NT, EXACT, P>;
    /* resident blocks per SM for this variant (its registers), asked once */
    static int per_sm = 0;
    if (!per_sm) {
        int b = 0;
        cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, kern, SK_WARPS * 32, 0);
        per_sm = b > 0 ? b : 1;
    }
    const int sms = cuk_sm_count();
    /* Column splits only when the row blocks leave resident slots empty, as many as
     * fill them, each column warp keeping at least two chunks. */
    const long blocks = (N + SK_ROWS - 1) / SK_ROWS, nch = (K + SK_CHUNK - 1) / SK_CHUNK;
    long S = blocks < (long)per_sm * sms ? (long)per_sm * sms / blocks : 1;
    if (S > nch / (2 * SK_KW)) S = nch / (2 * SK_KW);
    if (S > SK_MAX_SPLIT) S = SK_MAX_SPLIT;
    if (S < 1) S = 1;
    cuk_launch_cluster(kern, dim3((unsigned)blocks, (unsigned)S), SK_WARPS * 32, 0, s, dim3(1, (unsigned)S, 1), W, xh, xl, y, N,
                       K, T);
}

template <int NT, bool EXACT>
static void launch_p(const uint16_t *W, const uint16_t *xh, const uint16_t *xl, float *y, int N, long K, int T,
                     cudaStream_t s) {
    if (cfg_forced == 1) launch<NT, EXACT, 1>(W, xh, xl, y, N, K, T, s);
    else if (cfg_forced == 3) launch<NT, EXACT, 3>(W, xh, xl, y, N, K, T, s);
    else launch<NT, EXACT, 2>(W, xh, xl, y, N, K, T, s);
}

template <bool EXACT>
static void launch_t(const uint16_t *W, const uint16_t *xh, const uint16_t *xl, float *y, int N, long K, int T,
                     cudaStream_t s) {
    if (T <= 8) launch_p<1, EXACT>(W, xh, xl, y, N, K, T, s);
    else if (T <= 16) launch_p<2, EXACT>(W, xh, xl, y, N, K, T, s);
    else launch_p<4, EXACT>(W, xh, xl, y, N, K, T, s);
}

extern "C" int cuk_skinny_supports(const weight *w) {
    return w->fmt == WF_BF16 && w->cols % 8 == 0 && w->rows >= 1 && w->rows <= 0x7fffffffL;
}

extern "C" int cuk_skinny(const weight *w, const float *x, float *y, int T, uint16_t *xbf, int fast, cuk_stream st) {
    cudaStream_t s = (cudaStream_t)st;
    if (!cuk_skinny_supports(w)) return err_set("cuda skinny product: weights must be bf16 with columns %% 8 == 0");
    if (T < 1 || T > CUK_SKINNY_MAX_T) return err_set("cuda skinny product: batch %d outside 1..%d", T, CUK_SKINNY_MAX_T);
    const long n = (long)T * w->cols;
    const uint16_t *W = (const uint16_t *)w->data;
    if (fast == 1 && cuk_f32_to_bf16(x, xbf, n, st) != 0) return -1;
    if (!fast && cuk_split_bf16(x, xbf, xbf + n, n, st) != 0) return -1;
    if (fast)
        launch_t<false>(W, xbf, NULL, y, (int)w->rows, w->cols, T, s);
    else
        launch_t<true>(W, xbf, xbf + n, y, (int)w->rows, w->cols, T, s);
    return cuk_check("skinny product");
}
