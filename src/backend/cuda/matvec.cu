/* backend/cuda/matvec.cu: decode matrix-vector products (batch T <= CUK_MV_MAX_T):
 * one warp per output row streams the row with 16-byte loads, two in flight per lane,
 * and keeps T accumulators; x is read through L1, where every warp of a block finds it.
 * Formats: bf16, f16, f32, MLX affine 4- and 8-bit (groups 32/64/128) and MXFP4. MLX affine
 * at T = 1 has its own kernels (kernel_mv_affine_x1: x staged in shared memory, codes
 * turned into floats by a mask alone; kernel_mv_q4g_x1, the same with a whole group a
 * lane for the common 4-bit shapes), exact to float rounding like the general one; under
 * the fast precision llama-sized 4-bit products take kernel_mv_q4g_i8 instead (two-term
 * int8 activations, q8x2.cuh, on dp4a). */
#include <cuda_fp16.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/common.cuh"
#include "backend/cuda/q8x2.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#define MV_WARPS 8 /* rows per block */

__device__ __forceinline__ void unpack_bf16(const uint4 v, float (&w)[8]) {
    w[0] = bf16lo(v.x); w[1] = bf16hi(v.x); w[2] = bf16lo(v.y); w[3] = bf16hi(v.y);
    w[4] = bf16lo(v.z); w[5] = bf16hi(v.z); w[6] = bf16lo(v.w); w[7] = bf16hi(v.w);
}

__device__ __forceinline__ void unpack_f16(const uint4 v, float (&w)[8]) {
    const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        float2 f = __half22float2(*(const __half2 *)&u[i]);
        w[2 * i] = f.x;
        w[2 * i + 1] = f.y;
    }
}

/* The warp's R rows x T tokens of partial sums, reduced across lanes, stored [T, rows]. */
template <int T, int R>
__device__ __forceinline__ void store_rows(float (&acc)[R][T], int lane, int row0, int rows, float *__restrict__ y) {
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < T; t++) {
            const float sum = warp_sum(acc[r][t]);
            if (lane == 0 && row0 + r < rows) y[(long)t * rows + row0 + r] = sum;
        }
}

/* 16-bit weights (bf16 or f16): cols % 8 == 0 and 16-byte aligned rows. A warp takes
 * R rows so that each x value it loads serves R rows (x traffic through L1 / R).
 * GLU (R = 2, act): W is a gate|up product's 2 rows rows (gate's, then up's), and a
 * warp takes gate row i and up row i and writes y [T, rows] = glu_act(gate, up): the
 * product and the GLU after it in one launch, the same sums (the same order) and so
 * the same bits as the two. */
template <int T, int R, bool BF, bool GLU = false>
__global__ void __launch_bounds__(MV_WARPS * 32) kernel_mv_16(const uint16_t *__restrict__ W, const float *__restrict__ x,
                                                            float *__restrict__ y, int rows, long cols, int act) {
    static_assert(!GLU || R == 2, "a GLU warp holds a gate row and its up row");
    const int lane = threadIdx.x & 31, row0 = (blockIdx.x * MV_WARPS + (threadIdx.x >> 5)) * (GLU ? 1 : R);
    const uint16_t *wr[R];
#pragma unroll
    for (int r = 0; r < R; r++)
        wr[r] = GLU ? W + ((long)r * rows + min(row0, rows - 1)) * cols : W + (long)min(row0 + r, rows - 1) * cols;
    /* U loads of 16 bytes per row in flight per lane before any is used; the first
     * batch (weights only) goes out before waiting for the kernel that wrote x */
    constexpr int U = R == 1 ? 4 : 2;
    uint4 v[U][R];
    auto load = [&](long j0) {
#pragma unroll
        for (int q = 0; q < U; q++)
#pragma unroll
            for (int r = 0; r < R; r++)
                v[q][r] = j0 + 256L * q < cols ? ld_stream(wr[r] + j0 + 256L * q) : make_uint4(0, 0, 0, 0);
    };
    long j0 = (long)lane * 8;
    if (row0 < rows && j0 < cols) load(j0);
    cuk_pdl_start();
    if (row0 >= rows) return;
    float acc[R][T];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < T; t++) acc[r][t] = 0.f;
    for (; j0 < cols;) {
#pragma unroll
        for (int q = 0; q < U; q++) {
            const long j = j0 + 256L * q;
            if (j >= cols) break;
            float xv[T][8];
#pragma unroll
            for (int t = 0; t < T; t++) {
                const float4 a = __ldg((const float4 *)(x + t * cols + j)), b = __ldg((const float4 *)(x + t * cols + j + 4));
                xv[t][0] = a.x; xv[t][1] = a.y; xv[t][2] = a.z; xv[t][3] = a.w;
                xv[t][4] = b.x; xv[t][5] = b.y; xv[t][6] = b.z; xv[t][7] = b.w;
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                float w[8];
                if (BF) unpack_bf16(v[q][r], w); else unpack_f16(v[q][r], w);
#pragma unroll
                for (int t = 0; t < T; t++)
#pragma unroll
                    for (int k = 0; k < 8; k++) acc[r][t] += w[k] * xv[t][k];
            }
        }
        j0 += 256L * U;
        if (j0 < cols) load(j0);
    }
    if (GLU) {
#pragma unroll
        for (int t = 0; t < T; t++) {
            const float g = warp_sum(acc[0][t]), u = warp_sum(acc[R - 1][t]);
            if (lane == 0) y[(long)t * rows + row0] = glu_act(g, u, act);
        }
        return;
    }
    store_rows<T, R>(acc, lane, row0, rows, y);
}

/* f32 weights (rare: small checkpoints) */
template <int T>
__global__ void __launch_bounds__(MV_WARPS * 32) kernel_mv_f32(const float *__restrict__ W, const float *__restrict__ x,
                                                             float *__restrict__ y, int rows, long cols) {
    cuk_pdl_start();
    const int lane = threadIdx.x & 31, row = blockIdx.x * MV_WARPS + (threadIdx.x >> 5);
    if (row >= rows) return;
    float acc[T];
#pragma unroll
    for (int t = 0; t < T; t++) acc[t] = 0.f;
    for (long j = lane; j < cols; j += 32) {
        const float w = W[(long)row * cols + j];
#pragma unroll
        for (int t = 0; t < T; t++) acc[t] += w * x[t * cols + j];
    }
#pragma unroll
    for (int t = 0; t < T; t++) {
        const float s = warp_sum(acc[t]);
        if (lane == 0) y[(long)t * rows + row] = s;
    }
}

/* x [T, cols] -> per block of QB values (QB = the codes one lane reads: 32 at 4 bits,
 * 16 at 8): int8 codes xq, scale xd = max|x| / 127 and the exact float sum xs. For 4-bit
 * weights each 8 values are stored even-indexed first, matching the nibble order that
 * (w & 0x0f0f0f0f) and (w >> 4 & 0x0f0f0f0f) produce. One warp per 32 values. */
template <int QB, bool PERM>
__global__ void kernel_quant_x(const float *__restrict__ x, long n, int8_t *__restrict__ xq, float *__restrict__ xd,
                               float *__restrict__ xs) {
    cuk_pdl_start();
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return; /* n is a multiple of 32, so whole warps leave together */
    const float v = x[i];
    float amax = fabsf(v), sum = v;
#pragma unroll
    for (int o = QB / 2; o > 0; o >>= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    }
    const float d = amax / 127.f;
    const int q = d > 0.f ? __float2int_rn(v / d) : 0;
    long pos = i;
    if (PERM) {
        const int k = (int)(i & 7);
        pos = (i & ~7L) + ((k & 1) ? 4 + (k >> 1) : (k >> 1));
    }
    xq[pos] = (int8_t)q;
    if ((i & (QB - 1)) == 0) {
        xd[i / QB] = d;
        xs[i / QB] = sum;
    }
}

__device__ __forceinline__ int dp4a_us(uint32_t a, uint32_t b, int c) { /* unsigned a bytes . signed b bytes */
    int r;
    asm("dp4a.u32.s32 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}

/* MLX affine, BITS 4 or 8: over each lane's QB codes, dot(w, x) = scale * xd * sum(code * xq)
 * + bias * xs, the integer sum on dp4a. R rows per warp share the x loads. */
template <int T, int R, int BITS>
__global__ void __launch_bounds__(MV_WARPS * 32) kernel_mv_affine(const uint32_t *__restrict__ W, const void *__restrict__ S,
                                                                const void *__restrict__ B, int stype, int gs,
                                                                const int8_t *__restrict__ xq, const float *__restrict__ xd,
                                                                const float *__restrict__ xs, float *__restrict__ y,
                                                                int rows, long cols) {
    cuk_pdl_start();
    constexpr int QB = 128 / BITS; /* codes per 16-byte load */
    const int lane = threadIdx.x & 31, row0 = (blockIdx.x * MV_WARPS + (threadIdx.x >> 5)) * R;
    if (row0 >= rows) return;
    const long wpr = cols * BITS / 32, ng = cols / gs, nb = cols / QB;
    float acc[R][T];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < T; t++) acc[r][t] = 0.f;
    for (long c0 = (long)lane * QB; c0 < cols; c0 += 32L * QB) {
        const long b = c0 / QB;
        uint4 xv[T], xv2[T]; /* 4-bit: 32 codes need 32 bytes of x; 8-bit: 16 */
        float d[T], sx[T];
#pragma unroll
        for (int t = 0; t < T; t++) {
            xv[t] = __ldg((const uint4 *)(xq + t * cols + c0));
            xv2[t] = BITS == 4 ? __ldg((const uint4 *)(xq + t * cols + c0 + 16)) : xv[t];
            d[t] = __ldg(xd + t * nb + b);
            sx[t] = __ldg(xs + t * nb + b);
        }
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int row = min(row0 + r, rows - 1);
            const uint4 v = ld_stream(W + (long)row * wpr + c0 * BITS / 32);
            const long g = (long)row * ng + c0 / gs;
            const float sc = scale_load(S, stype, g), bi = scale_load(B, stype, g);
            const uint32_t u[4] = {v.x, v.y, v.z, v.w};
#pragma unroll
            for (int t = 0; t < T; t++) {
                int isum = 0;
                if (BITS == 8) {
                    isum = dp4a_us(u[0], xv[t].x, isum);
                    isum = dp4a_us(u[1], xv[t].y, isum);
                    isum = dp4a_us(u[2], xv[t].z, isum);
                    isum = dp4a_us(u[3], xv[t].w, isum);
                } else {
                    const uint4 x0 = xv[t], x1 = xv2[t];
                    const uint32_t xe[4] = {x0.x, x0.z, x1.x, x1.z}, xo[4] = {x0.y, x0.w, x1.y, x1.w};
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        isum = dp4a_us(u[i] & 0x0f0f0f0fu, xe[i], isum);
                        isum = dp4a_us((u[i] >> 4) & 0x0f0f0f0fu, xo[i], isum);
                    }
                }
                acc[r][t] += sc * d[t] * (float)isum + bi * sx[t];
            }
        }
    }
    store_rows<T, R>(acc, lane, row0, rows, y);
}

/* MLX affine, BITS 4 or 8, on float activations (the default: exact to float
 * rounding, which the int8 path above is not; see docs/cuda-backend.md). Lane l
 * takes words l, l + 32, ... of the row (PW codes each), so a warp's weight loads
 * are 128 contiguous bytes and its x loads stay within a few cache lines; U words
 * per lane are in flight at once. Over a word, dot(w, x) = scale * sum(code * x) +
 * bias * sum(x) (a word never straddles a group). */
__device__ __forceinline__ uint32_t ld_stream_u32(const uint32_t *p) {
    uint32_t r;
    asm volatile("ld.global.nc.L1::no_allocate.u32 %0, [%1];" : "=r"(r) : "l"(p));
    return r;
}

template <int T, int R, int BITS>
__global__ void __launch_bounds__(MV_WARPS * 32) kernel_mv_affine_f(const uint32_t *__restrict__ W, const void *__restrict__ S,
                                                                  const void *__restrict__ B, int stype, int gs,
                                                                  const float *__restrict__ x, float *__restrict__ y,
                                                                  int rows, long cols) {
    cuk_pdl_start();
    constexpr int PW = 32 / BITS, U = T <= 2 ? 16 : 8; /* codes per word, words in flight per lane */
    constexpr uint32_t MASK = (1u << BITS) - 1;
    const int lane = threadIdx.x & 31, row0 = (blockIdx.x * MV_WARPS + (threadIdx.x >> 5)) * R;
    if (row0 >= rows) return;
    const long wpr = cols / PW, ng = cols / gs;
    const int wshift = __ffs(gs / PW) - 1; /* words per group is a power of two: group index = word >> wshift */
    float acc[R][T];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < T; t++) acc[r][t] = 0.f;
    for (long w0 = lane; w0 < wpr; w0 += 32L * U) {
        uint32_t u[R][U];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int i = 0; i < U; i++) {
                const long wi = w0 + 32L * i;
                u[r][i] = wi < wpr ? ld_stream_u32(W + (long)min(row0 + r, rows - 1) * wpr + wi) : 0u;
            }
#pragma unroll
        for (int i = 0; i < U; i++) {
            const long wi = w0 + 32L * i;
            if (wi >= wpr) break;
            const long c = wi * PW;
            float xs[T][PW], sx[T];
#pragma unroll
            for (int t = 0; t < T; t++) {
#pragma unroll
                for (int k = 0; k < PW; k += 4) {
                    const float4 a = __ldg((const float4 *)(x + t * cols + c + k));
                    xs[t][k] = a.x; xs[t][k + 1] = a.y; xs[t][k + 2] = a.z; xs[t][k + 3] = a.w;
                }
                sx[t] = 0.f;
#pragma unroll
                for (int k = 0; k < PW; k++) sx[t] += xs[t][k];
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                float dot[T];
#pragma unroll
                for (int t = 0; t < T; t++) dot[t] = 0.f;
#pragma unroll
                for (int k = 0; k < PW; k++) {
                    const float code = (float)((u[r][i] >> (BITS * k)) & MASK);
#pragma unroll
                    for (int t = 0; t < T; t++) dot[t] += code * xs[t][k];
                }
                const long g = (long)min(row0 + r, rows - 1) * ng + (wi >> wshift);
                const float sc = scale_load(S, stype, g), bi = scale_load(B, stype, g);
#pragma unroll
                for (int t = 0; t < T; t++) acc[r][t] += sc * dot[t] + bi * sx[t];
            }
        }
    }
    store_rows<T, R>(acc, lane, row0, rows, y);
}

/* MXFP4 (e2m1 codes, 8 per word LSB first, an e8m0 power of two per 32 values) on
 * float activations, laid out as kernel_mv_affine_f: lane l takes words l, l + 32, ...
 * of the row, U in flight. A code's magnitude is read doubled, as an integer (0, 1,
 * 2, 3, 4, 6, 8, 12: one nibble of 0xC8643210), so over a word dot(w, x) =
 * 2^(e - 128) * sum(+-m2 * x), exact to float rounding. */
__device__ __forceinline__ float mx4_m2(uint32_t c) { /* the doubled magnitude as a float, signed */
    const float m = __uint_as_float(0x4B000000u | ((0xC8643210u >> (4 * (c & 7))) & 15u)) - 8388608.f;
    return (c & 8) ? -m : m;
}

template <int T, int R>
__global__ void __launch_bounds__(MV_WARPS * 32) kernel_mv_mxfp4(const uint32_t *__restrict__ W, const uint8_t *__restrict__ S,
                                                               const float *__restrict__ x, float *__restrict__ y, int rows,
                                                               long cols) {
    cuk_pdl_start();
    constexpr int U = T <= 2 ? 16 : 8;
    const int lane = threadIdx.x & 31, row0 = (blockIdx.x * MV_WARPS + (threadIdx.x >> 5)) * R;
    if (row0 >= rows) return;
    const long wpr = cols / 8, ng = cols / 32;
    float acc[R][T];
#pragma unroll
    for (int r = 0; r < R; r++)
#pragma unroll
        for (int t = 0; t < T; t++) acc[r][t] = 0.f;
    for (long w0 = lane; w0 < wpr; w0 += 32L * U) {
        uint32_t u[R][U];
#pragma unroll
        for (int r = 0; r < R; r++)
#pragma unroll
            for (int i = 0; i < U; i++) {
                const long wi = w0 + 32L * i;
                u[r][i] = wi < wpr ? ld_stream_u32(W + (long)min(row0 + r, rows - 1) * wpr + wi) : 0u;
            }
#pragma unroll
        for (int i = 0; i < U; i++) {
            const long wi = w0 + 32L * i;
            if (wi >= wpr) break;
            const long c = wi * 8;
            float xs[T][8];
#pragma unroll
            for (int t = 0; t < T; t++) {
                const float4 a = __ldg((const float4 *)(x + t * cols + c)), b = __ldg((const float4 *)(x + t * cols + c + 4));
                xs[t][0] = a.x; xs[t][1] = a.y; xs[t][2] = a.z; xs[t][3] = a.w;
                xs[t][4] = b.x; xs[t][5] = b.y; xs[t][6] = b.z; xs[t][7] = b.w;
            }
#pragma unroll
            for (int r = 0; r < R; r++) {
                float dot[T];
#pragma unroll
                for (int t = 0; t < T; t++) dot[t] = 0.f;
#pragma unroll
                for (int k = 0; k < 8; k++) {
                    const float m = mx4_m2((u[r][i] >> (4 * k)) & 15u);
#pragma unroll
                    for (int t = 0; t < T; t++) dot[t] = fmaf(m, xs[t][k], dot[t]);
                }
                const uint32_t e = __ldg(S + (long)min(row0 + r, rows - 1) * ng + (wi >> 2));
                const float sc = __uint_as_float(e >= 2 ? (e - 1) << 23 : 0x00200000u << e); /* 2^(e - 128) */
#pragma unroll
                for (int t = 0; t < T; t++) acc[r][t] = fmaf(sc, dot[t], acc[r][t]);
            }
        }
    }
    store_rows<T, R>(acc, lane, row0, rows, y);
}

/* ---- MLX affine at T = 1, exact, x staged in shared memory ----
 * Codes become floats without conversion instructions: a code masked in place,
 * (w & 0xF << b), read as a float is code * 2^(b - 149) exactly (a subnormal, or the
 * smallest normals: u * 2^-149 holds for every u < 2^24), so x is staged per column
 * times 2^(X1_K - b) and one mask plus one FFMA (non-ftz: subnormals are kept) gives
 * code * x * 2^(X1_K - 149), as exact as code * x. The top byte of a word (bits 24-31
 * would reach the exponent) is shifted down once. Each block stages x (times those
 * powers of two) and the sum of x over each 16-byte chunk of codes (for the bias
 * term) in shared memory once, then its warps take R rows at a time, lane l reading
 * 16-byte chunks l, l + 32, ... of each row (512 contiguous bytes per warp per row),
 * U chunks per row in flight; dot over a chunk = scale * sum(code * x) + bias * sum(x)
 * (a chunk never straddles a group). Chunks sit 16 bytes apart beyond their length in
 * shared memory (the pad holds the chunk's x sum), so the 8 lanes of a quarter-warp
 * read 8 different bank groups. Blocks are persistent: two per SM, x staged once. */
#define X1_WARPS 8
#define X1_K 85 /* products come out times 2^(X1_K - 149) = 2^-64 */

__device__ __forceinline__ float fma_sub(float a, float b, float c) { /* fma keeping subnormal inputs */
    float d;
    asm("fma.rn.f32 %0, %1, %2, %3;" : "=f"(d) : "f"(a), "f"(b), "f"(c));
    return d;
}

__device__ __forceinline__ float pow2f(int e) { return __int_as_float((127 + e) << 23); } /* -126 <= e <= 127 */

/* For each of R rows, the sum over one 16-byte chunk of its codes of code * x' (x' = x
 * staged in shared memory at xs, shared by the rows), two chains a row, in the same
 * order for every row. x' is read one word's worth at a time, so only those values are
 * live (holding the chunk's 32 values for the rows was 1% slower end to end: llama3-8b
 * q4 tg128 393 against 397, docs/benchmarks/cuda.md) */
template <int BITS, int R>
__device__ __forceinline__ void chunk_dot(const uint4 (&v)[R], const float *__restrict__ xs, float (&out)[R]) {
    float p0[R], p1[R];
#pragma unroll
    for (int r = 0; r < R; r++) p0[r] = p1[r] = 0.f;
#pragma unroll
    for (int k = 0; k < 4; k++) {
        if (BITS == 4) {
            const float4 a = ((const float4 *)xs)[2 * k], b = ((const float4 *)xs)[2 * k + 1];
#pragma unroll
            for (int r = 0; r < R; r++) {
                const uint32_t w = k == 0 ? v[r].x : k == 1 ? v[r].y : k == 2 ? v[r].z : v[r].w, hi = w >> 24;
                p0[r] = fma_sub(__uint_as_float(w & 0xfu), a.x, p0[r]);
                p1[r] = fma_sub(__uint_as_float(w & 0xf0u), a.y, p1[r]);
                p0[r] = fma_sub(__uint_as_float(w & 0xf00u), a.z, p0[r]);
                p1[r] = fma_sub(__uint_as_float(w & 0xf000u), a.w, p1[r]);
                p0[r] = fma_sub(__uint_as_float(w & 0xf0000u), b.x, p0[r]);
                p1[r] = fma_sub(__uint_as_float(w & 0xf00000u), b.y, p1[r]);
                p0[r] = fma_sub(__uint_as_float(hi & 0xfu), b.z, p0[r]);
                p1[r] = fma_sub(__uint_as_float(hi & 0xf0u), b.w, p1[r]);
            }
        } else {
            const float4 a = ((const float4 *)xs)[k];
#pragma unroll
            for (int r = 0; r < R; r++) {
                const uint32_t w = k == 0 ? v[r].x : k == 1 ? v[r].y : k == 2 ? v[r].z : v[r].w, hi = w >> 24;
                p0[r] = fma_sub(__uint_as_float(w & 0xffu), a.x, p0[r]);
                p1[r] = fma_sub(__uint_as_float(w & 0xff00u), a.y, p1[r]);
                p0[r] = fma_sub(__uint_as_float(w & 0xff0000u), a.z, p0[r]);
                p1[r] = fma_sub(__uint_as_float(hi), a.w, p1[r]);
            }
        }
    }
#pragma unroll
    for (int r = 0; r < R; r++) out[r] = p0[r] + p1[r];
}

/* Loads one batch: U chunks of each of the R rows (lane's chunks j0 + lane + 32 q) with their scales and biases. */
template <int R, int U, int BITS, int ST>
__device__ __forceinline__ void x1_load(const uint4 *const (&wr)[R], const long (&gb)[R], const void *__restrict__ S,
                                        const void *__restrict__ B, int gshift, int i0, int nq, uint4 (&v)[U][R],
                                        float (&sc)[U][R], float (&bi)[U][R]) {
#pragma unroll
    for (int q = 0; q < U; q++)
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int i = i0 + 32 * q;
            if (i < nq) {
                v[q][r] = ld_stream(wr[r] + i);
                sc[q][r] = scale_ld<ST>(S, gb[r] + (i >> gshift));
                bi[q][r] = scale_ld<ST>(B, gb[r] + (i >> gshift));
            } else {
                v[q][r] = make_uint4(0, 0, 0, 0);
                sc[q][r] = bi[q][r] = 0.f;
            }
        }
}

/* Stages x for the T = 1 affine kernels: column j at xs[(j / PIECE) * STRIDE + j % PIECE]
 * times 2^(X1_K - b), b the bit offset its code is read at (see chunk_dot), and the
 * sum of each piece of PIECE columns (for the bias term) times 2^(X1_K - 149) at
 * xs[i * STRIDE + PIECE]. Each thread takes 4 columns a step, SU steps of loads in
 * flight; the trip count is the same for every thread (the shuffles need whole warps).
 * The caller synchronizes the block after it. */
template <int BITS, int PIECE, int STRIDE>
__device__ __forceinline__ void x1_stage(const float *__restrict__ x, int cols, float *__restrict__ xs) {
    constexpr int SU = 4, PW = 32 / BITS; /* PW: codes per 32-bit word */
    for (int c0 = 0; c0 < cols; c0 += 4 * X1_WARPS * 32 * SU) {
        float4 a[SU];
#pragma unroll
        for (int u = 0; u < SU; u++) {
            const int j = c0 + (u * X1_WARPS * 32 + threadIdx.x) * 4;
            a[u] = j < cols ? __ldg((const float4 *)(x + j)) : make_float4(0.f, 0.f, 0.f, 0.f);
        }
#pragma unroll
        for (int u = 0; u < SU; u++) {
            const int j = c0 + (u * X1_WARPS * 32 + threadIdx.x) * 4;
            float sum = (a[u].x + a[u].y) + (a[u].z + a[u].w);
#pragma unroll
            for (int o = PIECE / 8; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o); /* PIECE / 4 threads */
            if (j < cols) {
                const int i = j / PIECE, m = j % PIECE, p = j % PW; /* p: code index in its word of column j (0 or 4 at 4 bits) */
                float e[4];
#pragma unroll
                for (int k = 0; k < 4; k++) { /* bit offset of the code as read: see chunk_dot */
                    const int pk = p + k, b = BITS == 4 ? (pk < 6 ? 4 * pk : 4 * (pk - 6)) : (pk < 3 ? 8 * pk : 0);
                    e[k] = pow2f(X1_K - b);
                }
                *(float4 *)(xs + i * STRIDE + m) = make_float4(a[u].x * e[0], a[u].y * e[1], a[u].z * e[2], a[u].w * e[3]);
                if (m == 0) xs[i * STRIDE + PIECE] = sum * pow2f(X1_K - 149);
            }
        }
    }
}

template <int R, int U, int BITS, int ST, bool P, int MB>
__global__ void __launch_bounds__(X1_WARPS * 32, MB)
    kernel_mv_affine_x1(const uint4 *__restrict__ W, const void *__restrict__ S, const void *__restrict__ B, int gshift,
                        const float *__restrict__ x, float *__restrict__ y, int rows, int cols) {
    constexpr int QB = 128 / BITS, CS = QB + 4; /* codes per chunk, chunk stride in smem */
    extern __shared__ float4 x1_smem[];
    float *xs = (float *)x1_smem;
    const int lane = threadIdx.x & 31, nq = cols / QB, ng = nq >> gshift, tstride = gridDim.x * X1_WARPS;
    int task = blockIdx.x * X1_WARPS + (threadIdx.x >> 5), j0 = 0; /* j0: the warp's first chunk of this batch */
    const uint4 *wr[R];
    long gb[R];
    uint4 v[U][R];
    float sc[U][R], bi[U][R];
    auto rows_of = [&](int t, const uint4 *(&wt)[R], long (&gt)[R]) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            const int row = min(t * R + r, rows - 1);
            wt[r] = W + (long)row * nq;
            gt[r] = (long)row * ng;
        }
    };
    /* the first batch's loads go out before x is staged */
    if (task * R < rows) {
        rows_of(task, wr, gb);
        x1_load<R, U, BITS, ST>(wr, gb, S, B, gshift, lane, nq, v, sc, bi);
    }
    cuk_pdl_start(); /* weights only above: x is the previous kernel's output */
    x1_stage<BITS, QB, CS>(x, cols, xs);
    __syncthreads();
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.f;
    while (task * R < rows) {
        /* the next batch: the same rows' next chunks, or the next task's first */
        const bool done = j0 + 32 * U >= nq; /* the same in every lane */
        const int ntask = done ? task + tstride : task, nj0 = done ? 0 : j0 + 32 * U;
        uint4 vn[U][R];
        float scn[U][R], bin[U][R];
        const uint4 *wrn[R];
        long gbn[R];
        if (P) { /* its loads go out before this batch is used */
#pragma unroll
            for (int r = 0; r < R; r++) { wrn[r] = wr[r]; gbn[r] = gb[r]; }
            if (ntask * R < rows) {
                if (done) rows_of(ntask, wrn, gbn);
                x1_load<R, U, BITS, ST>(wrn, gbn, S, B, gshift, nj0 + lane, nq, vn, scn, bin);
            } else {
#pragma unroll
                for (int q = 0; q < U; q++)
#pragma unroll
                    for (int r = 0; r < R; r++) { vn[q][r] = make_uint4(0, 0, 0, 0); scn[q][r] = bin[q][r] = 0.f; }
            }
        }
#pragma unroll
        for (int q = 0; q < U; q++) {
            const int i = j0 + lane + 32 * q;
            if (j0 + 32 * q >= nq) break;
            if (i < nq) {
                const float sx = xs[i * CS + QB];
                float p[R];
                chunk_dot<BITS, R>(v[q], xs + i * CS, p);
#pragma unroll
                for (int r = 0; r < R; r++) {
                    acc[r] = fmaf(sc[q][r], p[r], acc[r]);
                    acc[r] = fmaf(bi[q][r], sx, acc[r]);
                }
            }
        }
        if (done) { /* the task's rows are finished */
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float sum = warp_sum(acc[r]);
                if (lane == 0 && task * R + r < rows) y[task * R + r] = sum * pow2f(149 - X1_K);
                acc[r] = 0.f;
            }
        }
        task = ntask;
        j0 = nj0;
        if (task * R >= rows) break;
        if (P) {
#pragma unroll
            for (int r = 0; r < R; r++) {
                wr[r] = wrn[r];
                gb[r] = gbn[r];
#pragma unroll
                for (int q = 0; q < U; q++) { v[q][r] = vn[q][r]; sc[q][r] = scn[q][r]; bi[q][r] = bin[q][r]; }
            }
        } else {
            if (done) rows_of(task, wr, gb);
            x1_load<R, U, BITS, ST>(wr, gb, S, B, gshift, j0 + lane, nq, v, sc, bi);
        }
    }
}

/* Per device: SM count and the shared memory a block may opt in to. */
static void x1_device(int *nsm, int *smem_optin, int *smem_sm, int *dev_out) {
    static int cache[16][3];
    int dev = 0;
    cudaGetDevice(&dev);
    *dev_out = dev;
    if (dev < 0 || dev >= 16) dev = 15;
    if (!cache[dev][0]) {
        cudaDeviceGetAttribute(&cache[dev][1], cudaDevAttrMaxSharedMemoryPerBlockOptin, dev);
        cudaDeviceGetAttribute(&cache[dev][2], cudaDevAttrMaxSharedMemoryPerMultiprocessor, dev);
        cudaDeviceGetAttribute(&cache[dev][0], cudaDevAttrMultiProcessorCount, dev);
    }
    *nsm = cache[dev][0];
    *smem_optin = cache[dev][1];
    *smem_sm = cache[dev][2];
}

/* The persistent grid of a T = 1 affine kernel: up to mb blocks an SM where smem bytes
 * of shared memory a block fit, no more blocks than tasks (R-row units) need; opts the
 * kernel in to more than 48 KB once per device (attr_set: one per instantiation). 0
 * when smem does not fit at all. */
template <typename K>
static int x1_blocks(K kernel, unsigned *attr_set, size_t smem, long tasks, int mb) {
    int nsm, optin, per_sm, dev;
    x1_device(&nsm, &optin, &per_sm, &dev);
    if (nsm <= 0 || smem > (size_t)optin) return 0;
    if (smem > 48 * 1024 && !(*attr_set & (1u << (dev & 31)))) {
        if (cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, optin) != cudaSuccess) return 0;
        *attr_set |= 1u << (dev & 31);
    }
    int per = mb;
    while (per > 1 && per * (smem + 1024) > (size_t)per_sm) per--;
    const long need = (tasks + X1_WARPS - 1) / X1_WARPS;
    return (int)(need < (long)nsm * per ? need : (long)nsm * per);
}

/* Launches the T = 1 kernel; false when x does not fit in shared memory or the rows
 * are not 16-byte aligned (the caller then takes the general kernel). */
template <int R, int U, int BITS, int ST, bool P = false, int MB = 2>
static bool launch_x1(const weight *w, const float *x, float *y, cudaStream_t s) {
    constexpr int QB = 128 / BITS;
    if (((uintptr_t)w->data & 15) != 0 || w->cols % 32 != 0 || w->cols > (1 << 24) || w->rows > (1L << 30)) return false;
    const int rows = (int)w->rows, cols = (int)w->cols;
    const size_t smem = (size_t)(cols / QB) * (QB + 4) * sizeof(float);
    static unsigned attr_set; /* per instantiation: devices with the opt-in done */
    const int blocks = x1_blocks(kernel_mv_affine_x1<R, U, BITS, ST, P, MB>, &attr_set, smem, (rows + R - 1) / R, MB);
    if (!blocks) return false;
    const int gshift = __builtin_ctz((unsigned)(w->group / QB));
    cuk_launch(kernel_mv_affine_x1<R, U, BITS, ST, P, MB>, blocks, X1_WARPS * 32, smem, s, (const uint4 *)w->data, w->scales, w->biases,
                                                                           gshift, x, y, rows, cols);
    return true;
}

/* ---- 4-bit MLX affine at T = 1, a whole group a lane ----
 * For groups of 64 codes (or a multiple) with bf16 scales and cols % 2048 == 0 (every
 * lane has the same whole steps): each step a lane takes one 64-code
 * piece of a row (two 16-byte chunks, one scale and one bias load where
 * kernel_mv_affine_x1 loads them per chunk), a warp 32 consecutive pieces (1 KB). x is
 * staged as in kernel_mv_affine_x1 (the same powers of two per bit offset) per piece of
 * 64 columns with the piece's sum after it, XG_S floats a piece, so the 8 lanes of a
 * quarter-warp read 8 different bank groups (68 = 4 mod 32 words). ncu had the chunk
 * kernel at 3.7-4.5 instructions a code against ~2.1 in its inner loop; this one
 * spends its addressing and scale loads per 64 codes instead of per 32. */
#define XG_S 68

/* The task loop of the two group-a-lane kernels (kernel_mv_q4g_x1 below and
 * kernel_mv_q4g_i8): warp tasks of R rows, a lane one 64-code piece of each row a step
 * (piece pc = step * 32 + lane; lanes past the row's npc pieces idle), U steps loaded
 * ahead of their use; the first batch goes out before stage() (x's staging, after the
 * PDL wait) so the weights stream while the kernel before ends. dot(pc, c, sc, bi, acc)
 * adds piece pc of each row (c[r]: its 32 bytes of codes, sc[r] / bi[r]: its group's
 * scale and bias) to acc[r]; a finished row's lane sum times out_scale goes to y. */
template <int R, int U, int ST, typename StageF, typename DotF>
__device__ __forceinline__ void q4g_tasks(const uint4 *__restrict__ W, const void *__restrict__ S, const void *__restrict__ B,
                                          int gs, int rows, int cols, float out_scale, float *__restrict__ y, StageF stage,
                                          DotF dot) {
    const int lane = threadIdx.x & 31, nq = cols >> 5, npc = cols >> 6, spl = (npc + 31) >> 5, ng = npc >> gs;
    const int tstride = gridDim.x * X1_WARPS;
    int task = blockIdx.x * X1_WARPS + (threadIdx.x >> 5);
    const uint4 *wr[R];
    long gb[R];
    uint4 v[U][R][2];
    float sc[U][R], bi[U][R];
    auto rows_of = [&](int t) {
#pragma unroll
        for (int r = 0; r < R; r++) {
            const long row = min(t * R + r, rows - 1);
            wr[r] = W + row * nq;
            gb[r] = row * ng;
        }
    };
    auto load = [&](int s0) { /* steps s0 .. s0 + U - 1 of the current rows (pieces < npc) */
#pragma unroll
        for (int q = 0; q < U; q++) {
            const int pc = (s0 + q) * 32 + lane;
            const bool ok = pc < npc;
#pragma unroll
            for (int r = 0; r < R; r++) {
                v[q][r][0] = ok ? ld_stream(wr[r] + 2 * pc) : make_uint4(0, 0, 0, 0);
                v[q][r][1] = ok ? ld_stream(wr[r] + 2 * pc + 1) : make_uint4(0, 0, 0, 0);
                sc[q][r] = ok ? scale_ld<ST>(S, gb[r] + (pc >> gs)) : 0.f;
                bi[q][r] = ok ? scale_ld<ST>(B, gb[r] + (pc >> gs)) : 0.f;
            }
        }
    };
    if (task * R < rows) {
        rows_of(task);
        load(0);
    }
    stage();
    float acc[R];
#pragma unroll
    for (int r = 0; r < R; r++) acc[r] = 0.f;
    int s0 = 0;
    while (task * R < rows) {
#pragma unroll
        for (int q = 0; q < U; q++) {
            if (s0 + q >= spl) break; /* the same in every lane */
            const int pc = (s0 + q) * 32 + lane;
            if (pc < npc) dot(pc, v[q], sc[q], bi[q], acc);
        }
        s0 += U;
        if (s0 >= spl) { /* the task's rows are finished */
#pragma unroll
            for (int r = 0; r < R; r++) {
                const float sum = warp_sum(acc[r]);
                if (lane == 0 && task * R + r < rows) y[task * R + r] = sum * out_scale;
                acc[r] = 0.f;
            }
            task += tstride;
            s0 = 0;
            if (task * R >= rows) break;
            rows_of(task);
        }
        load(s0);
    }
}

template <int R, int U>
__global__ void __launch_bounds__(X1_WARPS * 32, 2)
    kernel_mv_q4g_x1(const uint4 *__restrict__ W, const uint16_t *__restrict__ S, const uint16_t *__restrict__ B, int gs,
                     const float *__restrict__ x, float *__restrict__ y, int rows, int cols) {
    extern __shared__ float4 x1_smem[];
    float *xs = (float *)x1_smem;
    q4g_tasks<R, U, 0>(
        W, S, B, gs, rows, cols, pow2f(149 - X1_K), y,
        [&] {
            cuk_pdl_start();
            x1_stage<4, 64, XG_S>(x, cols, xs);
            __syncthreads();
        },
        [&](int pc, const uint4 (&c)[R][2], const float (&sc)[R], const float (&bi)[R], float (&acc)[R]) {
            const float *xp = xs + pc * XG_S;
            uint4 c0[R], c1[R];
#pragma unroll
            for (int r = 0; r < R; r++) {
                c0[r] = c[r][0];
                c1[r] = c[r][1];
            }
            float pa[R], pb[R];
            chunk_dot<4, R>(c0, xp, pa);
            chunk_dot<4, R>(c1, xp + 32, pb);
            const float sx = xp[64];
#pragma unroll
            for (int r = 0; r < R; r++) {
                acc[r] = fmaf(sc[r], pa[r] + pb[r], acc[r]);
                acc[r] = fmaf(bi[r], sx, acc[r]);
            }
        });
}

/* Launches kernel_mv_q4g_x1; false where it does not apply (the caller then takes
 * kernel_mv_affine_x1). */
template <int R, int U>
static bool launch_q4g_x1(const weight *w, const float *x, float *y, cudaStream_t s) {
    if (w->bits != 4 || w->stype != SC_BF16 || w->group < 64 || w->group > 64 * 32 || (w->group & (w->group - 1)) ||
        w->cols % 2048 != 0 || w->cols > (1 << 24) || w->rows > (1L << 30) || ((uintptr_t)w->data & 15) != 0)
        return false;
    const int rows = (int)w->rows, cols = (int)w->cols;
    const size_t smem = (size_t)(cols / 64) * XG_S * sizeof(float);
    static unsigned attr_set;
    const int blocks = x1_blocks(kernel_mv_q4g_x1<R, U>, &attr_set, smem, (rows + R - 1) / R, 2);
    if (!blocks) return false;
    const int gs = __builtin_ctz((unsigned)(w->group / 64));
    cuk_launch(kernel_mv_q4g_x1<R, U>, blocks, X1_WARPS * 32, smem, s, (const uint4 *)w->data, (const uint16_t *)w->scales,
               (const uint16_t *)w->biases, gs, x, y, rows, cols);
    return true;
}

/* ---- 4-bit MLX affine at T = 1 under the fast precision: two-term int8 activations ----
 * x as q8x2.cuh lays it out (written once per product by kernel_quant_x2, or by the
 * add + RMSNorm or GLU before it): the codes need no conversion, dp4a multiplies four
 * codes by four h (or l) bytes, so a word of eight codes costs two masks, a shift and
 * four dp4a (about 1 instruction a code against 3.2 in kernel_mv_q4g_x1). */

/* x [cols] (cols % 64 == 0) -> xq [cols / 64][XQ_W]: one warp a piece */
__global__ void kernel_quant_x2(const float *__restrict__ x, int npc, uint32_t *__restrict__ xq) {
    cuk_pdl_start();
    const int lane = threadIdx.x & 31, p = blockIdx.x * (blockDim.x >> 5) + (threadIdx.x >> 5);
    if (p >= npc) return; /* whole warps */
    const float2 v = __ldg((const float2 *)(x + (long)p * 64) + lane);
    q8x2_piece(v.x, v.y, xq + (long)p * XQ_W);
}

/* y [rows] = W x, x as kernel_quant_x2 wrote it (xq), on q4g_tasks as kernel_mv_q4g_x1
 * (R rows a warp, U steps in flight), groups of 64 << gs codes, cols % 64 == 0 (a
 * warp's last step may leave lanes idle). Three blocks an SM (registers capped at 80; 75
 * used, no spills): the kernel waits on its loads, and a third block's warps keep 50%
 * more bytes in flight (llama3-8b q4 tg128 +4.3%, +3% at depth 4,096, gemma3-4b q4 +2-3%
 * against two blocks and 102 registers; four blocks spill and lost that again;
 * docs/benchmarks/cuda.md, eighteenth session). */
#define I8_BLOCKS 3
template <int R, int U, int ST>
__global__ void __launch_bounds__(X1_WARPS * 32, I8_BLOCKS)
    kernel_mv_q4g_i8(const uint4 *__restrict__ W, const void *__restrict__ S, const void *__restrict__ B, int gs,
                     const uint4 *__restrict__ xq, float *__restrict__ y, int rows, int cols) {
    extern __shared__ float4 x1_smem[];
    uint4 *xs = (uint4 *)x1_smem; /* [npc][XQ_W / 4] */
    const int npc = cols >> 6;
    q4g_tasks<R, U, ST>(
        W, S, B, gs, rows, cols, 1.f, y,
        [&] {
            cuk_pdl_start();
            for (int i = threadIdx.x; i < npc * (XQ_W / 4); i += blockDim.x) xs[i] = __ldg(xq + i);
            __syncthreads();
        },
        [&](int pc, const uint4 (&c)[R][2], const float (&sc)[R], const float (&bi)[R], float (&acc)[R]) {
            const uint4 *xp = xs + pc * (XQ_W / 4);
            int ih[R], il[R];
#pragma unroll
            for (int r = 0; r < R; r++) ih[r] = il[r] = 0;
#pragma unroll
            for (int k = 0; k < 8; k++) {
                const uint4 xv = xp[k];
#pragma unroll
                for (int r = 0; r < R; r++) {
                    const uint4 cw = c[r][k >> 2];
                    const uint32_t w = (k & 3) == 0 ? cw.x : (k & 3) == 1 ? cw.y : (k & 3) == 2 ? cw.z : cw.w;
                    const uint32_t ev = w & 0x0f0f0f0fu, od = (w >> 4) & 0x0f0f0f0fu;
                    ih[r] = dp4a_us(ev, xv.x, ih[r]);
                    ih[r] = dp4a_us(od, xv.y, ih[r]);
                    il[r] = dp4a_us(ev, xv.z, il[r]);
                    il[r] = dp4a_us(od, xv.w, il[r]);
                }
            }
            const float2 ds = *(const float2 *)(xp + 8); /* d / 254, the piece's sum */
#pragma unroll
            for (int r = 0; r < R; r++) {
                acc[r] = fmaf(sc[r] * ds.x, (float)(ih[r] * 254 + il[r]), acc[r]);
                acc[r] = fmaf(bi[r], ds.y, acc[r]);
            }
        });
}

/* CUK_MV_I8X2: 0 the fast precision's T = 1 4-bit products keep float activations (A/B
 * runs); 1 (default) two-term int8 activations on the products q4_i8_applies names; 2
 * on every shape the kernel takes (tests: the fixtures' rows are 2-4 pieces). */
static int i8x2_mode(void) {
    static int v = -1;
    if (v < 0) {
        const long m = setting_int(SET_CUK_MV_I8X2);
        v = m >= 0 && m <= 2 ? (int)m : 1;
    }
    return v;
}

/* Whether the fast precision's T = 1 product of w takes kernel_mv_q4g_i8: 4-bit, groups
 * of 64 or more (a power of two), cols % 64 == 0, 16-byte aligned rows, x's pieces in
 * shared memory, not CUK_MV_INT8 (its one-term kernels take every quantized product; a
 * norm asking this before staging must get the answer the product follows); by default
 * (mode 1) only products of 2,048 rows or more and 2,048 columns or more: on narrower
 * rows lanes idle (a lane takes a 64-value piece of a row a step), and a product of
 * fewer rows fills under one block an SM, where the extra quantizing launch (o's input)
 * costs more than the kernel saves. Measured on the H200 (docs/benchmarks/cuda.md,
 * nineteenth session): against the earlier 4,096-row floor, llama3.2-1b q4 tg128 +5.5%
 * and gemma3-4b q4 +5.3% (their o and down products, 2,048-2,560 rows, now take it);
 * with no row floor qwen3-0.6b lost 2% (o and down of 1,024 rows). */
static int int8_activations(void);

static bool q4_i8_applies(const weight *w) {
    const int mode = i8x2_mode();
    if (!mode || int8_activations() || w->fmt != WF_AFFINE || w->bits != 4 || w->group < 64 || w->group > 64 * 32 ||
        (w->group & (w->group - 1)) || w->cols % 64 != 0 || w->cols > (1 << 24) || w->rows > (1L << 30) ||
        ((uintptr_t)w->data & 15) != 0 || (mode == 1 && (w->cols < 2048 || w->rows < 2048)))
        return false;
    int nsm, optin, per_sm, dev;
    x1_device(&nsm, &optin, &per_sm, &dev);
    return (size_t)(w->cols / 64) * XQ_W * sizeof(uint32_t) <= (size_t)optin;
}

extern "C" int cuk_matvec_q8x2(const weight *w) { return q4_i8_applies(w); }

/* The fast precision's T = 1 4-bit product: x quantized into work (unless staged: an
 * earlier kernel wrote it there), then the dp4a kernel. */
template <int R, int U, int ST>
static bool launch_q4g_i8(const weight *w, const float *x, float *y, void *work, bool staged, cudaStream_t s) {
    const int rows = (int)w->rows, cols = (int)w->cols, npc = cols / 64;
    const size_t smem = (size_t)npc * XQ_W * sizeof(uint32_t);
    static unsigned attr_set;
    const int blocks = x1_blocks(kernel_mv_q4g_i8<R, U, ST>, &attr_set, smem, (rows + R - 1) / R, I8_BLOCKS);
    if (!blocks || ((uintptr_t)work & 15) != 0) return false;
    const int gs = __builtin_ctz((unsigned)(w->group / 64));
    if (!staged) cuk_launch(kernel_quant_x2, (unsigned)((npc + 7) / 8), 256, 0, s, x, npc, (uint32_t *)work);
    cuk_launch(kernel_mv_q4g_i8<R, U, ST>, blocks, X1_WARPS * 32, smem, s, (const uint4 *)w->data, w->scales, w->biases, gs,
               (const uint4 *)work, y, rows, cols);
    return true;
}

static bool launch_q4_fast(const weight *w, const float *x, float *y, void *work, bool staged, cudaStream_t s) {
    if (!q4_i8_applies(w)) return false;
    switch (w->stype) {
    case SC_BF16: return launch_q4g_i8<2, 2, 0>(w, x, y, work, staged, s);
    case SC_F16: return launch_q4g_i8<2, 2, 1>(w, x, y, work, staged, s);
    default: return launch_q4g_i8<2, 2, 2>(w, x, y, work, staged, s);
    }
}

/* Rows per warp (R) and 16-byte chunks per row in flight per lane (U). Default: R = 2,
 * U = 4 where a lane has 2 or more chunks per row, else more rows (x read once from
 * shared memory for R rows); measured on the H200 (docs/benchmarks/cuda-kernels.md),
 * where the kernel's P (next batch loaded before this one is used) and MB = 3 (three
 * blocks per SM, registers capped) variants were within noise of these. Again
 * 2026-12-03 (docs/benchmarks/cuda.md): more blocks an SM lose end to end (llama3-8b q4
 * tg128 397 -> 388 at 4 blocks and 64 registers, 381 at 3 blocks and 80); the kernel
 * is bound by issue (3.7 instructions a code, ncu), not by occupancy. 4-bit weights
 * with bf16 scales, groups of 64 or more and cols % 2048 == 0 take kernel_mv_q4g_x1
 * (a group a lane: llama3-8b q4 tg128 396 -> 410-413; R = 4 with one step in flight
 * lost, 378-381). CUK_MV_X1CFG=r2u4|r4u2|r8u1 forces the chunk kernel's
 * configuration, g64 the group kernel where it applies (A/B runs). */
enum { X1_R2U4, X1_R4U2, X1_R8U1, X1_G64, X1_NCFG };

static int x1_forced(void) {
    static int v = -2;
    if (v == -2) {
        static const char *const names[X1_NCFG] = {"r2u4", "r4u2", "r8u1", "g64"};
        const char *e = setting_str(SET_CUK_MV_X1CFG);
        v = -1;
        for (int i = 0; e && i < X1_NCFG; i++)
            if (!strcmp(e, names[i])) v = i;
    }
    return v;
}

static int x1_config(const weight *w) {
    const int f = x1_forced();
    if (f >= 0 && f != X1_G64) return f; /* g64 where the group kernel does not apply: the usual choice */
    const long cpl = w->cols * w->bits / 4096; /* chunks per lane per row */
    if (cpl >= 2) return w->rows >= 65536 && cpl < 4 ? X1_R8U1 : X1_R2U4;
    return w->rows >= 65536 ? X1_R8U1 : X1_R4U2;
}

template <int BITS, int ST>
static bool launch_x1_pick(const weight *w, const float *x, float *y, cudaStream_t s) {
    const int f = x1_forced();
    if ((f < 0 || f == X1_G64) && launch_q4g_x1<2, 2>(w, x, y, s)) return true;
    switch (x1_config(w)) {
    case X1_R4U2: return launch_x1<4, 2, BITS, ST>(w, x, y, s);
    case X1_R8U1: return launch_x1<8, 1, BITS, ST>(w, x, y, s);
    default: return launch_x1<2, 4, BITS, ST>(w, x, y, s);
    }
}

template <int BITS>
static bool launch_x1_st(const weight *w, const float *x, float *y, cudaStream_t s) {
    switch (w->stype) {
    case SC_BF16: return launch_x1_pick<BITS, 0>(w, x, y, s);
    case SC_F16: return launch_x1_pick<BITS, 1>(w, x, y, s);
    default: return launch_x1_pick<BITS, 2>(w, x, y, s);
    }
}

/* CUK_MV_X1=0 keeps T = 1 on the general float-activation kernel (A/B runs). */
static int x1_off(void) {
    static int v = -1;
    if (v < 0) {
        v = !setting_flag(SET_CUK_MV_X1);
    }
    return v;
}

/* CUK_MV_INT8=1 selects the int8-activation (dp4a) kernels for quantized weights. */
static int int8_activations(void) {
    static int v = -1;
    return cuk_env_flag(SET_CUK_MV_INT8, &v);
}

extern "C" size_t cuk_matvec_work(int T, int64_t cols) {
    /* CUK_MV_INT8: xq int8, then xd and xs per 16 values (the finer of the two block
     * sizes); the fast precision's T = 1 4-bit products: XQ_W words per 64 columns */
    const size_t i8 = (size_t)T * cols + 2 * sizeof(float) * (size_t)T * (cols / 16) + 64;
    const size_t x2 = (size_t)(cols / 64 + 1) * XQ_W * sizeof(uint32_t);
    return i8 > x2 ? i8 : x2;
}

/* The share of the SMs' warp slots a grid of `blocks` blocks keeps busy until its
 * last block ends, if every block takes the same time (1: whole waves). */
static double sm_fill(long blocks) {
    int nsm, optin, per_sm, dev;
    x1_device(&nsm, &optin, &per_sm, &dev);
    if (nsm <= 0) return 1;
    const long w = (blocks + nsm - 1) / nsm;
    return (double)blocks / (double)(w * nsm);
}

/* Measured on the H200: 2 rows a warp for batches (docs/benchmarks/cuda-kernels.md);
 * for one row, 2 on 16-bit rows of 4,096+ columns (llama3-8b bf16 tg128 +3%, at depth
 * 4,096 +2.2%, llama3.2-1b's down product +2.2% over 1 row a warp; twentieth session,
 * docs/benchmarks/cuda.md) unless halving the blocks spreads them less evenly over the
 * SMs (gemma3-4b's down product, 2,560 rows: 160 blocks on 132 SMs, -1.5%), 1 elsewhere
 * (gemma3-4b's 2,560-column products at 2 rows lost 1.2% with the rest). */
static int rows_per_warp(int T, const weight *w) {
    static int env = -1;
    if (env < 0) env = (int)setting_int(SET_CUK_MV_ROWS);
    if (env == 1 || env == 2 || env == 4) return env;
    if (T > 1) return 2;
    if ((w->fmt != WF_BF16 && w->fmt != WF_F16) || w->cols < 4096) return 1;
    const long b1 = (w->rows + MV_WARPS - 1) / MV_WARPS, b2 = (w->rows + 2 * MV_WARPS - 1) / (2 * MV_WARPS);
    return sm_fill(b2) >= sm_fill(b1) - 0.02 ? 2 : 1;
}

template <int T, int R>
static void launch_mv_r(const weight *w, const float *x, float *y, void *work, cudaStream_t s) {
    const int rows = (int)w->rows;
    const long cols = w->cols;
    const dim3 grid((unsigned)((rows + MV_WARPS * R - 1) / (MV_WARPS * R))), block(MV_WARPS * 32);
    switch (w->fmt) {
    case WF_BF16: cuk_launch(kernel_mv_16<T, R, true>, grid, block, 0, s, (const uint16_t *)w->data, x, y, rows, cols, 0); break;
    case WF_F16: cuk_launch(kernel_mv_16<T, R, false>, grid, block, 0, s, (const uint16_t *)w->data, x, y, rows, cols, 0); break;
    case WF_F32: {
        const dim3 g1((unsigned)((rows + MV_WARPS - 1) / MV_WARPS));
        cuk_launch(kernel_mv_f32<T>, g1, block, 0, s, (const float *)w->data, x, y, rows, cols);
        break;
    }
    case WF_MXFP4:
        cuk_launch(kernel_mv_mxfp4<T, R>, grid, block, 0, s, (const uint32_t *)w->data, (const uint8_t *)w->scales, x, y,
                   rows, cols);
        break;
    case WF_AFFINE: {
        if (!int8_activations()) {
            if (w->bits == 4)
                cuk_launch(kernel_mv_affine_f<T, R, 4>, grid, block, 0, s, (const uint32_t *)w->data, w->scales, w->biases,
                                                                  (int)w->stype, w->group, x, y, rows, cols);
            else
                cuk_launch(kernel_mv_affine_f<T, R, 8>, grid, block, 0, s, (const uint32_t *)w->data, w->scales, w->biases,
                                                                  (int)w->stype, w->group, x, y, rows, cols);
            break;
        }
        const int qb = 128 / w->bits;
        int8_t *xq = (int8_t *)work;
        float *xd = (float *)((char *)work + (((size_t)T * cols + 15) & ~(size_t)15));
        float *xs = xd + (size_t)T * (cols / 16);
        const long n = (long)T * cols;
        if (w->bits == 4) {
            cuk_launch(kernel_quant_x<32, true>, (unsigned)((n + 255) / 256), 256, 0, s, x, n, xq, xd, xs);
            cuk_launch(kernel_mv_affine<T, R, 4>, grid, block, 0, s, (const uint32_t *)w->data, w->scales, w->biases,
                                                            (int)w->stype, w->group, xq, xd, xs, y, rows, cols);
        } else {
            cuk_launch(kernel_quant_x<16, false>, (unsigned)((n + 255) / 256), 256, 0, s, x, n, xq, xd, xs);
            cuk_launch(kernel_mv_affine<T, R, 8>, grid, block, 0, s, (const uint32_t *)w->data, w->scales, w->biases,
                                                            (int)w->stype, w->group, xq, xd, xs, y, rows, cols);
        }
        (void)qb;
        break;
    }
    default: break;
    }
}

template <int T>
static void launch_mv(const weight *w, const float *x, float *y, void *work, cudaStream_t s) {
    switch (rows_per_warp(T, w)) {
    case 1: launch_mv_r<T, 1>(w, x, y, work, s); break;
    case 2: launch_mv_r<T, 2>(w, x, y, work, s); break;
    default: launch_mv_r<T, 4>(w, x, y, work, s); break;
    }
}

extern "C" int cuk_matvec_supports(const weight *w) {
    switch (w->fmt) {
    case WF_BF16:
    case WF_F16: return w->cols % 8 == 0;
    case WF_F32: return 1;
    case WF_AFFINE: /* groups of 32, 64 or 128 (powers of two: the kernels shift) */
        return (w->bits == 4 || w->bits == 8) && (w->group == 32 || w->group == 64 || w->group == 128) && w->cols % 32 == 0;
    case WF_MXFP4: return w->cols % 32 == 0 && w->scales != NULL;
    default: return 0;
    }
}

#define MV_GLU_MAX_T 4

template <int T>
static void launch_mv_glu(const weight *w, const float *x, float *y, int act, cudaStream_t s) {
    const int rows = (int)(w->rows / 2);
    const dim3 grid((unsigned)((rows + MV_WARPS - 1) / MV_WARPS)), block(MV_WARPS * 32);
    if (w->fmt == WF_BF16)
        cuk_launch(kernel_mv_16<T, 2, true, true>, grid, block, 0, s, (const uint16_t *)w->data, x, y, rows, w->cols, act);
    else
        cuk_launch(kernel_mv_16<T, 2, false, true>, grid, block, 0, s, (const uint16_t *)w->data, x, y, rows, w->cols, act);
}

extern "C" int cuk_matvec_glu_ok(const weight *w, int T, int act) {
    return (w->fmt == WF_BF16 || w->fmt == WF_F16) && w->cols % 8 == 0 && w->rows % 2 == 0 && T >= 1 &&
           T <= MV_GLU_MAX_T && (act == 0 || act == 1);
}

extern "C" int cuk_matvec_glu(const weight *w, const float *x, float *y, int T, int act, cuk_stream st) {
    cudaStream_t s = (cudaStream_t)st;
    if (!cuk_matvec_glu_ok(w, T, act))
        return err_set("cuda matvec + glu: no kernel for %d rows of this weight (16-bit, even rows, act 0/1, T <= %d)", T,
                       MV_GLU_MAX_T);
    switch (T) {
    case 1: launch_mv_glu<1>(w, x, y, act, s); break;
    case 2: launch_mv_glu<2>(w, x, y, act, s); break;
    case 3: launch_mv_glu<3>(w, x, y, act, s); break;
    default: launch_mv_glu<4>(w, x, y, act, s); break;
    }
    return cuk_check("matvec + glu");
}

extern "C" int cuk_matvec(const weight *w, const float *x, float *y, int T, void *work, int fast, cuk_stream st) {
    cudaStream_t s = (cudaStream_t)st;
    if (!cuk_matvec_supports(w)) return err_set("cuda matvec: no kernel for this weight format");
    if (T == 1 && fast && launch_q4_fast(w, x, y, work, fast == 2, s)) return cuk_check("matvec");
    if (fast == 2) return err_set("cuda matvec: activations staged for a product that does not read them");
    if (T == 1 && w->fmt == WF_AFFINE && !int8_activations() && !x1_off() &&
        (w->bits == 4 ? launch_x1_st<4>(w, x, y, s) : launch_x1_st<8>(w, x, y, s)))
        return cuk_check("matvec");
    switch (T) {
    case 1: launch_mv<1>(w, x, y, work, s); break;
    case 2: launch_mv<2>(w, x, y, work, s); break;
    case 3: launch_mv<3>(w, x, y, work, s); break;
    case 4: launch_mv<4>(w, x, y, work, s); break;
    case 5: launch_mv<5>(w, x, y, work, s); break;
    case 6: launch_mv<6>(w, x, y, work, s); break;
    case 7: launch_mv<7>(w, x, y, work, s); break;
    case 8: launch_mv<8>(w, x, y, work, s); break;
    default: return err_set("cuda matvec: batch %d exceeds %d", T, CUK_MV_MAX_T);
    }
    return cuk_check("matvec");
}
