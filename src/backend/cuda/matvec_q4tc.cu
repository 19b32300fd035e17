/* backend/cuda/matvec_q4tc.cu: one-row products of MLX affine 4-bit weights (groups of
 * 64 or 128) on the tensor cores, for the fast precision (activations rounded once to
 * bf16). Off unless CUK_MV_Q4TC=1: written without a GPU at hand (2026-12-02); its
 * test is test_cuda_kernels' `q4tc`, and docs/roadmap.md (issue 17) says what to
 * measure before it may become the default.
 *
 * Why: the exact one-row kernel (matvec.cu, kernel_mv_affine_x1) spends ~2.1
 * instructions on each 4-bit code (a mask and an FMA) and reads the large products at
 * 46-59% of the copy bandwidth. Here a code becomes a bf16 operand of mma.m16n8k16 at
 * ~0.9 instructions (a shift and a lop3 give two codes), and the tensor cores do the
 * multiply-adds.
 *
 * The arithmetic: over one group, sum_j (s q_j + b) x_j = s sum_j (128 + q_j) x_j +
 * (b - 128 s) sum_j x_j. (w >> 4i) & 0x000f000f | 0x43004300 is the bf16 pair
 * (128 + nibble i, 128 + nibble i + 4) of a word (exact: 128..143 has 8 significant
 * bits), so the tensor cores compute sum (128 + q) x over a group into a fresh
 * accumulator and the scale and the bias term (with the group's sum of the rounded
 * activations, staged per block) are applied per group.
 *
 * The layout: the weights are the mma's A (16 rows x 16 k), x its B (16 k x 8 columns,
 * every column the same x, so every column of D is the dot product). A dot product
 * does not care in which order k runs, so each lane's k follow its own loads: the
 * four lanes t of a row pair (g, g + 8) each load 8 bytes (two words, 16 codes) of a
 * 64-code span of both rows: 32 bytes a row, one DRAM sector, inside one group. For
 * k-step j of the span (word j / 2, half h = j % 2) lane t gives A (row g, k 2t, 2t+1)
 * = codes 2h, 2h+4 of its word, (row g, k 2t+8, 2t+9) = codes 2h+1, 2h+5, and the same
 * of row g + 8; B (k 2t, 2t+1) = x at those codes' columns, (k 2t+8, 2t+9) likewise.
 * x is staged per block in shared memory as bf16 pairs in that order: per 8 columns,
 * (x0, x4), (x1, x5), (x2, x6), (x3, x7).
 *
 * The work: a block (8 warps) takes 16 rows at a time; its warps split the row's
 * spans, each summing its share over U spans loaded at once, and the block adds the
 * eight partial sums in a fixed order (the same bits on every run). Blocks are
 * persistent (two per SM), so each stages x once. */
#include "backend/cuda/common.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#define TC_WARPS 8
#define TC_U 8 /* spans a warp has in flight */

__device__ __forceinline__ void tc_mma(float (&d)[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                       uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(d[0]), "+f"(d[1]), "+f"(d[2]), "+f"(d[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
}

/* bf16 (128 + nibble i, 128 + nibble i + 4) of word w (low half first) */
__device__ __forceinline__ uint32_t tc_pair(uint32_t w, int i) {
    uint32_t r;
    asm("lop3.b32 %0, %1, %2, %3, 0xea;" : "=r"(r) : "r"(w >> (4 * i)), "r"(0x000f000fu), "r"(0x43004300u));
    return r;
}

__device__ __forceinline__ uint2 tc_ld8(const uint32_t *p) {
    uint2 r;
    asm volatile("ld.global.nc.L1::no_allocate.v2.u32 {%0,%1}, [%2];" : "=r"(r.x), "=r"(r.y) : "l"(p));
    return r;
}

/* One span's words of rows g and g + 8 with their groups' scales and biases. */
struct tc_span {
    uint2 wg, w8;
    float sg, bg, s8, b8;
};

/* Span sp of rows rg, r8 (clamped to the matrix); words per row wpr, groups per row ng. */
template <int ST>
__device__ __forceinline__ tc_span tc_load(const uint32_t *__restrict__ W, const void *__restrict__ S,
                                           const void *__restrict__ B, long wpr, long ng, int gshift, int rg, int r8,
                                           int sp, int t) {
    tc_span v;
    v.wg = tc_ld8(W + (long)rg * wpr + sp * 8 + 2 * t);
    v.w8 = tc_ld8(W + (long)r8 * wpr + sp * 8 + 2 * t);
    const long gi = sp >> gshift; /* spans of 64 codes per group: 1 or 2 */
    v.sg = scale_ld<ST>(S, (long)rg * ng + gi);
    v.bg = scale_ld<ST>(B, (long)rg * ng + gi);
    v.s8 = scale_ld<ST>(S, (long)r8 * ng + gi);
    v.b8 = scale_ld<ST>(B, (long)r8 * ng + gi);
    return v;
}

/* sum over the span of (128 + q) x for rows g (d[0]) and g + 8 (d[2]) */
__device__ __forceinline__ void tc_span_dot(const tc_span &v, const uint32_t *__restrict__ xp, int sp, int t, float (&d)[4]) {
    d[0] = d[1] = d[2] = d[3] = 0.f;
#pragma unroll
    for (int j = 0; j < 4; j++) {
        const uint32_t wg = j < 2 ? v.wg.x : v.wg.y, w8 = j < 2 ? v.w8.x : v.w8.y;
        const int h = j & 1;
        const uint32_t *xb = xp + 4 * (sp * 8 + 2 * t + (j >> 1)) + 2 * h;
        tc_mma(d, tc_pair(wg, 2 * h), tc_pair(w8, 2 * h), tc_pair(wg, 2 * h + 1), tc_pair(w8, 2 * h + 1), xb[0], xb[1]);
    }
}

template <int ST>
__global__ void __launch_bounds__(TC_WARPS * 32, 2)
    kernel_mv_q4tc(const uint32_t *__restrict__ W, const void *__restrict__ S, const void *__restrict__ B, int gshift,
                   const float *__restrict__ x, float *__restrict__ y, int rows, int cols) {
    extern __shared__ uint32_t tc_smem[];
    const int nsp = cols / 64, warp = threadIdx.x >> 5, lane = threadIdx.x & 31, g = lane >> 2, t = lane & 3;
    const long wpr = cols / 8, ng = (long)nsp >> gshift;
    uint32_t *xp = tc_smem;                        /* [cols / 2] bf16 pairs, permuted */
    float *xs = (float *)(xp + cols / 2);          /* [nsp] sum of the rounded x per span */
    float *red = xs + nsp;                         /* [TC_WARPS][16] partial sums */
    const int sp0 = warp * nsp / TC_WARPS, sp1 = (warp + 1) * nsp / TC_WARPS;
    const int tiles = (rows + 15) / 16;
    int tile = blockIdx.x;
    tc_span v[TC_U];
    auto rows_of = [&](int tl, int &rg, int &r8) {
        rg = min(tl * 16 + g, rows - 1);
        r8 = min(tl * 16 + g + 8, rows - 1);
    };
    int rg, r8;
    rows_of(tile, rg, r8);
    /* the first batch's weights go out before waiting for the kernel that wrote x */
#pragma unroll
    for (int u = 0; u < TC_U; u++)
        if (tile < tiles && sp0 + u < sp1) v[u] = tc_load<ST>(W, S, B, wpr, ng, gshift, rg, r8, sp0 + u, t);
    cuk_pdl_start();
    /* stage x: thread i takes 8-column blocks i, i + 256, ...; a span is 8 blocks, so
     * 8 neighbouring lanes sum a span's rounded values (in a fixed order) */
    for (int c0 = 0; c0 < cols / 8; c0 += TC_WARPS * 32) {
        const int cb = c0 + threadIdx.x;
        float part = 0.f;
        if (cb < cols / 8) {
            const float4 a = __ldg((const float4 *)(x + 8L * cb)), b = __ldg((const float4 *)(x + 8L * cb + 4));
            const float e[8] = {a.x, a.y, a.z, a.w, b.x, b.y, b.z, b.w};
            uint16_t r[8];
#pragma unroll
            for (int k = 0; k < 8; k++) {
                r[k] = f2bf16(e[k]);
                part += bf16f(r[k]);
            }
#pragma unroll
            for (int k = 0; k < 4; k++) xp[4 * cb + k] = (uint32_t)r[k] | ((uint32_t)r[k + 4] << 16);
        }
        part += __shfl_xor_sync(0xffffffffu, part, 1);
        part += __shfl_xor_sync(0xffffffffu, part, 2);
        part += __shfl_xor_sync(0xffffffffu, part, 4);
        if (cb < cols / 8 && (cb & 7) == 0) xs[cb >> 3] = part;
    }
    __syncthreads();
    for (; tile < tiles; tile += gridDim.x) {
        float acc_g = 0.f, acc_8 = 0.f;
        for (int s0 = sp0; s0 < sp1; s0 += TC_U) {
#pragma unroll
            for (int u = 0; u < TC_U; u++) {
                if (s0 + u >= sp1) break;
                float d[4];
                tc_span_dot(v[u], xp, s0 + u, t, d);
                const float xsum = xs[s0 + u];
                acc_g = fmaf(v[u].sg, d[0], fmaf(v[u].bg - 128.f * v[u].sg, xsum, acc_g));
                acc_8 = fmaf(v[u].s8, d[2], fmaf(v[u].b8 - 128.f * v[u].s8, xsum, acc_8));
            }
            /* the next batch: this tile's next spans, or the next tile's first */
            int nt = tile, ns = s0 + TC_U;
            if (ns >= sp1) nt = tile + gridDim.x, ns = sp0;
            if (nt < tiles) {
                int ag, a8;
                rows_of(nt, ag, a8);
#pragma unroll
                for (int u = 0; u < TC_U; u++)
                    if (ns + u < sp1) v[u] = tc_load<ST>(W, S, B, wpr, ng, gshift, ag, a8, ns + u, t);
            }
        }
        if (t == 0) {
            red[warp * 16 + g] = acc_g;
            red[warp * 16 + g + 8] = acc_8;
        }
        __syncthreads();
        if (threadIdx.x < 16 && tile * 16 + (int)threadIdx.x < rows) {
            float s = 0.f;
#pragma unroll
            for (int w = 0; w < TC_WARPS; w++) s += red[w * 16 + threadIdx.x];
            y[tile * 16 + threadIdx.x] = s;
        }
        __syncthreads(); /* red is rewritten by the next tile */
    }
}

extern "C" int cuk_mv_q4tc_enabled(void) {
    static int v = -1;
    return cuk_env_flag(SET_CUK_MV_Q4TC, &v);
}

extern "C" int cuk_mv_q4tc_supports(const weight *w) {
    if (w->fmt != WF_AFFINE || w->bits != 4 || (w->group != 64 && w->group != 128)) return 0;
    if (w->cols % 64 != 0 || w->cols > 20480 || w->rows > (1L << 30) || ((uintptr_t)w->data & 15) != 0) return 0;
    return w->stype == SC_BF16 || w->stype == SC_F16 || w->stype == SC_F32;
}

extern "C" int cuk_mv_q4tc(const weight *w, const float *x, float *y, cuk_stream st) {
    if (!cuk_mv_q4tc_supports(w)) return err_set("cuda q4tc: no kernel for this weight");
    const cudaStream_t s = (cudaStream_t)st;
    const int rows = (int)w->rows, cols = (int)w->cols, nsp = cols / 64;
    const size_t smem = (size_t)cols * 2 + (size_t)nsp * 4 + TC_WARPS * 16 * 4;
    static int nsm_of[16]; /* per device (tensor parallelism: one thread per GPU) */
    int dev = 0;
    cudaGetDevice(&dev);
    int *nsm = &nsm_of[dev >= 0 && dev < 16 ? dev : 15];
    if (*nsm <= 0) {
        cudaDeviceGetAttribute(nsm, cudaDevAttrMultiProcessorCount, dev);
        if (*nsm <= 0) *nsm = 1;
    }
    const int tiles = (rows + 15) / 16, blocks = tiles < 2 * *nsm ? tiles : 2 * *nsm;
    const int gshift = w->group == 128 ? 1 : 0;
    const uint32_t *W = (const uint32_t *)w->data;
    switch (w->stype) {
    case SC_BF16: cuk_launch(kernel_mv_q4tc<0>, blocks, TC_WARPS * 32, smem, s, W, w->scales, w->biases, gshift, x, y, rows, cols); break;
    case SC_F16: cuk_launch(kernel_mv_q4tc<1>, blocks, TC_WARPS * 32, smem, s, W, w->scales, w->biases, gshift, x, y, rows, cols); break;
    default: cuk_launch(kernel_mv_q4tc<2>, blocks, TC_WARPS * 32, smem, s, W, w->scales, w->biases, gshift, x, y, rows, cols); break;
    }
    return cuk_check("q4tc");
}
