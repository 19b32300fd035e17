/* backend/cuda/dequant.cu: rows of a stored weight as bf16 (and, for the exact
 * precision, the bf16 rounding error beside them), the operand the cuBLAS prefill
 * products read (gemm.cu). Quantized rows (MLX affine 2-8 bit, MXFP4) go eight codes a
 * thread: the group's scale and bias loaded once per eight, the codes from one or two
 * 32-bit words (other widths through a three-word window), one 16-byte store per term.
 * Float formats and unaligned buffers take ops.cu's one-element-a-thread kernel.
 *
 * Why it matters: for a 512-token product of llama3-8b's gate|up (28,672 x 4,096) the
 * copy reads 59 MB of 4-bit codes and writes 235 MB of bf16; at one element a thread (a
 * 64-bit division, a format switch and two 2-byte scale loads per element) it was most
 * of the product's time (docs/benchmarks/cuda.md, fifteenth session). */
#include "backend/cuda/common.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

/* The eight codes [j0, j0 + 8) of a packed row (LSB first, BITS each; 0: bits given). */
template <int BITS>
__device__ __forceinline__ void dq_codes(const uint32_t *row, int bits, int64_t j0, uint32_t c[8]) {
    if (BITS == 4) {
        const uint32_t v = __ldg(row + (j0 >> 3));
#pragma unroll
        for (int i = 0; i < 8; i++) c[i] = (v >> (4 * i)) & 15u;
    } else if (BITS == 8) {
        const uint2 v = __ldg((const uint2 *)row + (j0 >> 3));
#pragma unroll
        for (int i = 0; i < 4; i++) {
            c[i] = (v.x >> (8 * i)) & 255u;
            c[i + 4] = (v.y >> (8 * i)) & 255u;
        }
    } else {
        /* 8 codes of 2-7 bits span at most 56 bits from any bit offset: three words */
        const int64_t bit = j0 * bits;
        const uint32_t *p = row + (bit >> 5);
        const int sh = (int)(bit & 31);
        const int words = (sh + 8 * bits + 31) >> 5;
        uint64_t lo = __ldg(p);
        uint32_t hi = 0;
        if (words > 1) lo |= (uint64_t)__ldg(p + 1) << 32;
        if (words > 2) hi = __ldg(p + 2);
        const uint32_t mask = (1u << bits) - 1;
#pragma unroll
        for (int i = 0; i < 8; i++) {
            const int b = sh + i * bits; /* < 32 + 56 */
            uint64_t v;
            if (b >= 64) v = hi >> (b - 64);
            else if (b + bits > 64) v = (lo >> b) | ((uint64_t)hi << (64 - b)); /* straddles word 2 */
            else v = lo >> b;
            c[i] = (uint32_t)v & mask;
        }
    }
}

__device__ __forceinline__ uint32_t dq_pair(uint16_t a, uint16_t b) { return (uint32_t)a | ((uint32_t)b << 16); }

/* rows [r0, r0 + n) of a quantized w (cols a multiple of 8, groups of 8 or more): row r
 * of the output is blockIdx.y's stride, eight columns a thread. FMT: WF_AFFINE or
 * WF_MXFP4. The affine value is fmaf(code, scale, bias), as qgemm.cu forms it. */
template <int FMT, int BITS>
__global__ void kernel_dequant8(const weight w, int64_t r0, int n, int gshift, uint16_t *hi, uint16_t *lo) {
    cuk_pdl_start_small(CUK_LATE_OTHER);
    const int64_t K = w.cols;
    const int oct = (int)(K >> 3);
    const int bits = FMT == WF_MXFP4 ? 4 : w.bits;
    const int64_t words = K * bits / 32;
    for (int r = blockIdx.y; r < n; r += gridDim.y) {
        const int64_t row = r0 + r;
        const uint32_t *codes = (const uint32_t *)w.data + row * words;
        for (int o = blockIdx.x * blockDim.x + threadIdx.x; o < oct; o += gridDim.x * blockDim.x) {
            const int64_t j0 = (int64_t)o << 3;
            uint32_t c[8];
            dq_codes<FMT == WF_MXFP4 ? 4 : BITS>(codes, bits, j0, c);
            float v[8];
            if (FMT == WF_MXFP4) {
                const uint32_t e = __ldg((const uint8_t *)w.scales + row * (K >> 5) + (j0 >> 5));
                const float sc = __uint_as_float(e == 0 ? 0x00400000u : e << 23);
#pragma unroll
                for (int i = 0; i < 8; i++) {
                    const float m = (float)((0xC8643210u >> (4 * (c[i] & 7))) & 15u) * 0.5f; /* e2m1 magnitude */
                    v[i] = (c[i] & 8) ? -(m * sc) : m * sc;
                }
            } else {
                const int64_t g = row * (K >> gshift) + (j0 >> gshift);
                const float sc = scale_load(w.scales, (int)w.stype, g), bi = scale_load(w.biases, (int)w.stype, g);
#pragma unroll
                for (int i = 0; i < 8; i++) v[i] = fmaf((float)c[i], sc, bi);
            }
            uint16_t h[8];
#pragma unroll
            for (int i = 0; i < 8; i++) h[i] = f2bf16(v[i]);
            const long at = (long)r * K + j0;
            *(uint4 *)(hi + at) = make_uint4(dq_pair(h[0], h[1]), dq_pair(h[2], h[3]), dq_pair(h[4], h[5]), dq_pair(h[6], h[7]));
            if (lo) {
                uint16_t l[8];
#pragma unroll
                for (int i = 0; i < 8; i++) l[i] = f2bf16(v[i] - bf16f(h[i]));
                *(uint4 *)(lo + at) =
                    make_uint4(dq_pair(l[0], l[1]), dq_pair(l[2], l[3]), dq_pair(l[4], l[5]), dq_pair(l[6], l[7]));
            }
        }
    }
}

/* The eight-a-thread kernel takes w: quantized, whole runs of 8 codes in a group, the
 * words it loads aligned (an 8-bit run is two words read as one 8-byte load). */
static bool dequant8_ok(const weight *w, const uint16_t *hi, const uint16_t *lo) {
    if (w->cols % 8 != 0 || w->cols / 8 > INT32_MAX || ((uintptr_t)hi & 15) || ((uintptr_t)lo & 15)) return false;
    if (w->fmt == WF_MXFP4) return w->scales && w->cols % 32 == 0 && ((uintptr_t)w->data & 3) == 0;
    if (w->fmt != WF_AFFINE || !w->scales || !w->biases || w->bits < 2 || w->bits > 8) return false;
    const bool pow2 = w->group >= 8 && (w->group & (w->group - 1)) == 0;
    const uintptr_t align = w->bits == 8 ? 7 : 3;
    return pow2 && w->cols % w->group == 0 && (w->cols * w->bits) % 32 == 0 && ((uintptr_t)w->data & align) == 0;
}

template <int FMT, int BITS>
static void launch8(const weight *w, int64_t r0, int64_t n, uint16_t *hi, uint16_t *lo, cudaStream_t s) {
    const int oct = (int)(w->cols / 8);
    const unsigned bx = (unsigned)((oct + 255) / 256);
    const unsigned by = (unsigned)(n < 65535 ? n : 65535);
    const int gshift = FMT == WF_MXFP4 ? 5 : __builtin_ctz((unsigned)w->group);
    cuk_launch(kernel_dequant8<FMT, BITS>, dim3(bx, by), 256, 0, s, *w, r0, (int)n, gshift, hi, lo);
}

extern "C" int cuk_weight_to_bf16x2(const weight *w, int64_t r0, int64_t n, uint16_t *hi, uint16_t *lo, cuk_stream s) {
    if (n <= 0) return 0;
    const cudaStream_t cs = (cudaStream_t)s;
    if (n <= INT32_MAX && dequant8_ok(w, hi, lo)) {
        if (w->fmt == WF_MXFP4) launch8<WF_MXFP4, 4>(w, r0, n, hi, lo, cs);
        else if (w->bits == 4) launch8<WF_AFFINE, 4>(w, r0, n, hi, lo, cs);
        else if (w->bits == 8) launch8<WF_AFFINE, 8>(w, r0, n, hi, lo, cs);
        else launch8<WF_AFFINE, 0>(w, r0, n, hi, lo, cs);
        return cuk_check("dequantize (8 codes a thread)");
    }
    return cuk_weight_rows_elem(w, r0, n, hi, lo, s);
}

extern "C" int cuk_weight_to_bf16(const weight *w, int64_t r0, int64_t n, uint16_t *dst, cuk_stream s) {
    return cuk_weight_to_bf16x2(w, r0, n, dst, NULL, s);
}
