/* backend/cpu/matmul_avx2.c: AVX2+FMA matrix products (compiled with -mavx2 -mfma
 * -mf16c, called only when cpu_has_avx2()). Two families of kernels:
 *  - GEMV (T <= 8 activation rows, memory-bound): each weight row is streamed once per
 *    pass (up to 4 rows per pass, or 5..8 in one wide pass) and consumed straight from
 *    its stored format; quantized rows are never dequantized: the group scale and bias
 *    are factored out of the dot product, and 2-/4-bit codes are read through byte
 *    windows (see byte_window_x).
 *  - GEMM (T >= 9, compute-bound): MM_NR weight rows are dequantized into a packed f32
 *    panel in scratch, then an MM_MR x MM_NR register-tiled FMA kernel runs it against
 *    every activation row.
 * Invariant: every output element is computed by the same sequence of operations
 * whatever the row split, so results do not depend on the thread count. (They do
 * depend on which kernel T selects: GEMV and GEMM sum in different orders.) */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "tensor/dtype.h"

#define INLINE static inline __attribute__((always_inline))
/* Full unrolling of the short constant loops over activation rows and partial sums,
 * so their accumulators live in registers (GCC -O2 would keep them on the stack). */
#define UNROLL _Pragma("GCC unroll 16")
#define GEMV_NT 4      /* activation rows per pass of the narrow GEMV kernels */
#define GEMV_WIDE 8    /* the wide GEMV kernels take 5..8 rows in one pass */
/* From this many activation rows on, the packed GEMM wins: below it a GEMV pass reads
 * the weights once anyway, and the GEMM's panel packing is not yet amortized. */
#define GEMM_MIN_T (GEMV_WIDE + 1)

/* Calls F(nt) with nt a constant, so each pass size gets its own code. The narrow
 * and wide kernels are separate functions: sharing one made the T = 1 code 6% slower. */
#define NT_SWITCH_NARROW(F)                                                                     \
    switch (nt) {                                                                               \
    case 1: F(1); break;                                                                        \
    case 2: F(2); break;                                                                        \
    case 3: F(3); break;                                                                        \
    default: F(4); break;                                                                       \
    }
#define NT_SWITCH_WIDE(F)                                                                       \
    switch (nt) {                                                                               \
    case 5: F(5); break;                                                                        \
    case 6: F(6); break;                                                                        \
    case 7: F(7); break;                                                                        \
    default: F(8); break;                                                                       \
    }

/* ---------------------------------------------------------------- helpers */

INLINE float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

INLINE __m256 bf16x8(const uint16_t *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

INLINE __m256 f16x8(const uint16_t *p) { return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)p)); }

INLINE float scale_get(const void *p, scale_type st, long i) {
    switch (st) {
    case SC_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    case SC_F16: return f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* 8 consecutive scales or biases as float32. */
INLINE __m256 scale_x8(const void *p, scale_type st, long i) {
    switch (st) {
    case SC_BF16: return bf16x8((const uint16_t *)p + i);
    case SC_F16: return f16x8((const uint16_t *)p + i);
    default: return _mm256_loadu_ps((const float *)p + i);
    }
}

/* --------------------------------------------------------- code unpacking
 * An 8-code chunk of a `bits`-bit row occupies exactly `bits` bytes (codes packed
 * LSB first, so chunk c starts at byte bits * c). These return the 8 codes of chunk
 * c as int32 lanes in column order. */

/* 4-bit: chunk c is u32 word c; lane i takes bits [4i, 4i + 4). */
INLINE __m256i codes4(const uint8_t *row, long c) {
    const __m256i sh = _mm256_setr_epi32(0, 4, 8, 12, 16, 20, 24, 28);
    uint32_t word; /* memcpy: safetensors data need not be 4-byte aligned */
    memcpy(&word, row + 4 * c, 4);
    __m256i v = _mm256_srlv_epi32(_mm256_set1_epi32((int)word), sh);
    return _mm256_and_si256(v, _mm256_set1_epi32(0xf));
}

/* 8-bit: chunk c is bytes [8c, 8c + 8). */
INLINE __m256i codes8(const uint8_t *row, long c) {
    return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(row + 8 * c)));
}

/* Any width <= 8 from the chunk's bytes held in a u64: lane i gathers the two bytes
 * holding bits [bits*i, bits*i + bits) (a code never spans more than two, since
 * bits <= 6 here), then shifts the code down and masks it. */
typedef struct {
    __m256i shuf, shift, mask;
} unpacker;

static unpacker unpacker_for(int bits) {
    int8_t sb[32];
    int32_t sh[8];
    for (int half = 0; half < 2; half++)
        for (int i = 0; i < 4; i++) {
            int lane = half * 4 + i, bit = bits * lane, byte = bit / 8;
            int8_t *q = sb + 4 * lane;
            q[0] = (int8_t)byte;
            q[1] = byte + 1 < 8 ? (int8_t)(byte + 1) : (int8_t)0x80;
            q[2] = q[3] = (int8_t)0x80;
            sh[lane] = bit % 8;
        }
    unpacker u;
    u.shuf = _mm256_loadu_si256((const __m256i *)sb);
    u.shift = _mm256_loadu_si256((const __m256i *)sh);
    u.mask = _mm256_set1_epi32((1 << bits) - 1);
    return u;
}

INLINE __m256i codes_any(const unpacker *u, uint64_t chunk) {
    __m256i v = _mm256_shuffle_epi8(_mm256_set1_epi64x((long long)chunk), u->shuf);
    return _mm256_and_si256(_mm256_srlv_epi32(v, u->shift), u->mask);
}

/* The chunk's bytes. The 8-byte load covers the next chunks too; the last
 * ceil(8 / bits) chunks of a row (tail = 1) are read with an exact-size copy so it
 * never runs past the end of the matrix. */
INLINE long chunk_tail(long nchunk, int bits) { return nchunk - (8 + bits - 1) / bits; }
INLINE uint64_t chunk_bytes(const uint8_t *row, int bits, long c, int last) {
    uint64_t v = 0;
    if (last) memcpy(&v, row + (long)bits * c, (size_t)bits);
    else memcpy(&v, row + (long)bits * c, 8);
    return v;
}

/* e2m1 magnitudes for code & 7; bit 3 is the sign. */
INLINE __m256 e2m1_x8(__m256i code) {
    const __m256 mag = _mm256_setr_ps(0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f);
    __m256 m = _mm256_permutevar8x32_ps(mag, code); /* uses the low 3 bits only */
    __m256i s = _mm256_and_si256(_mm256_slli_epi32(code, 28), _mm256_set1_epi32((int)0x80000000u));
    return _mm256_xor_ps(m, _mm256_castsi256_ps(s));
}

/* Chunk c of row as float32 codes (affine) for the widths with a fast unpacker. */
INLINE __m256 chunk_f32(const uint8_t *row, int bits, const unpacker *u, long c, int last) {
    if (bits == 4) return _mm256_cvtepi32_ps(codes4(row, c));
    if (bits == 8) return _mm256_cvtepi32_ps(codes8(row, c));
    return _mm256_cvtepi32_ps(codes_any(u, chunk_bytes(row, bits, c, last)));
}

/* -------------------------------------------------- GEMV over float rows
 * y[t, r] = sum_j W[r, j] x[t, j], 16 columns per step, then 8, then a scalar tail;
 * two 8-lane accumulators per activation row up to 4 rows, one beyond (registers). */

#define GEMV_FLOAT(NAME, ELEM, LOAD8, SCALAR)                                                   \
    INLINE void NAME##_nt(const weight *w, const float *x, float *y, int t0, int nt, long r0,   \
                          long r1) {                                                            \
        const long n = (long)w->cols;                                                           \
        const float *xs[GEMV_WIDE];                                                             \
        UNROLL                                                                                  \
        for (int t = 0; t < GEMV_WIDE; t++) xs[t] = x + (long)(t0 + (t < nt ? t : 0)) * n;      \
        for (long r = r0; r < r1; r++) {                                                        \
            const ELEM *wr = (const ELEM *)w->data + r * n;                                     \
            __m256 a[GEMV_WIDE][2];                                                             \
            UNROLL                                                                              \
            for (int t = 0; t < nt; t++) a[t][0] = a[t][1] = _mm256_setzero_ps();               \
            long j = 0;                                                                         \
            for (; j + 16 <= n; j += 16) {                                                      \
                __m256 w0 = LOAD8(wr + j), w1 = LOAD8(wr + j + 8);                              \
                UNROLL                                                                          \
                for (int t = 0; t < nt; t++) {                                                  \
                    a[t][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xs[t] + j), a[t][0]);         \
                    a[t][nt > 4 ? 0 : 1] =                                                      \
                        _mm256_fmadd_ps(w1, _mm256_loadu_ps(xs[t] + j + 8), a[t][nt > 4 ? 0 : 1]); \
                }                                                                               \
            }                                                                                   \
            for (; j + 8 <= n; j += 8) {                                                        \
                __m256 w0 = LOAD8(wr + j);                                                      \
                UNROLL                                                                          \
                for (int t = 0; t < nt; t++)                                                    \
                    a[t][0] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(xs[t] + j), a[t][0]);         \
            }                                                                                   \
            UNROLL                                                                              \
            for (int t = 0; t < nt; t++) {                                                      \
                float s = hsum256(nt > 4 ? a[t][0] : _mm256_add_ps(a[t][0], a[t][1]));          \
                for (long k = j; k < n; k++) s += SCALAR(wr[k]) * xs[t][k];                     \
                y[(long)(t0 + t) * w->rows + r] = s;                                            \
            }                                                                                   \
        }                                                                                       \
    }                                                                                           \
    static void NAME(const weight *w, const float *x, float *y, int T, long r0, long r1,        \
                     float *scratch) {                                                          \
        (void)scratch;                                                                          \
        for (int t0 = 0; t0 < T; t0 += GEMV_NT) {                                               \
            int nt = T - t0 < GEMV_NT ? T - t0 : GEMV_NT;                                       \
            NT_SWITCH_NARROW(NAME##_CALL)                                                       \
        }                                                                                       \
    }                                                                                           \
    static void NAME##_wide(const weight *w, const float *x, float *y, int T, long r0, long r1, \
                            float *scratch) {                                                   \
        (void)scratch;                                                                          \
        const int t0 = 0, nt = T;                                                               \
        NT_SWITCH_WIDE(NAME##_CALL)                                                             \
    }

#define F32_SCALAR(v) (v)
#define gemv_f32_CALL(NT) gemv_f32_nt(w, x, y, t0, NT, r0, r1)
#define gemv_bf16_CALL(NT) gemv_bf16_nt(w, x, y, t0, NT, r0, r1)
#define gemv_f16_CALL(NT) gemv_f16_nt(w, x, y, t0, NT, r0, r1)
GEMV_FLOAT(gemv_f32, float, _mm256_loadu_ps, F32_SCALAR)
GEMV_FLOAT(gemv_bf16, uint16_t, bf16x8, bf16_to_f32)
GEMV_FLOAT(gemv_f16, uint16_t, f16x8, f16_to_f32)

/* ------------------------------------------------- GEMV over quantized rows
 * Affine: W[r, j] = q_j s_g + b_g, so per row and activation row
 *   y = sum_g s_g (q_g . x_g) + sum_g b_g xsum_g,   xsum_g = sum_{j in g} x_j
 * xsum is computed once per call into scratch; the code dot products run on int
 * codes converted to float, the biases are one extra dot of length cols / group.
 * MXFP4: W = e2m1(q) * 2^(e - 127) per group of 32, no bias. */

/* The ng scales of row r as float32 (out [ng]), so the group loop broadcasts them
 * straight from memory instead of converting one at a time. */
static void row_scales(const weight *w, long r, long ng, float *out) {
    long g = 0;
    if (w->fmt == WF_MXFP4) {
        for (; g < ng; g++) out[g] = e8m0_to_f32(((const uint8_t *)w->scales)[r * ng + g]);
        return;
    }
    for (; g + 8 <= ng; g += 8) _mm256_storeu_ps(out + g, scale_x8(w->scales, w->stype, r * ng + g));
    for (; g < ng; g++) out[g] = scale_get(w->scales, w->stype, r * ng + g);
}

/* xsum [nt, ng] of activation rows t0 .. t0 + nt. */
static void group_sums(const float *x, long n, int group, int t0, int nt, float *xsum) {
    long ng = n / group;
    UNROLL
    for (int t = 0; t < nt; t++) {
        const float *xt = x + (long)(t0 + t) * n;
        for (long g = 0; g < ng; g++) {
            __m256 s = _mm256_setzero_ps();
            for (int j = 0; j < group; j += 8) s = _mm256_add_ps(s, _mm256_loadu_ps(xt + g * group + j));
            xsum[t * ng + g] = hsum256(s);
        }
    }
}

/* Byte windows (bits 2 and 4, codes within bytes): a byte v holding codes q_0..q_{k-1}
 * (k = 8 / bits, LSB first) contributes sum_m q_m x_m, and with v >> (m * bits) =
 * sum_{i >= m} q_i 2^{(i - m) bits} that equals sum_m (v >> (m * bits)) * a_m where
 *   a_0 = x_0,  a_m = x_m - 2^bits x_{m-1}.
 * So each 8-code vector is a zero-extended byte load (shared by k vectors), a shift
 * and a conversion, without masking out the higher codes: 3 vector ops per 8 codes
 * instead of 4. The larger intermediate terms cost ~2^bits ulps, far below 1e-5.
 * xq [n] holds the a_m of activation row x [n], vector c = 8-byte block * k + m,
 * lane i = byte i of the block. */
static void byte_window_x(const float *x, long n, int bits, float *xq) {
    const int k = 8 / bits;
    const float f = (float)(1 << bits);
    for (long blk = 0; blk < n / (8 * k); blk++)
        for (int m = 0; m < k; m++)
            for (int i = 0; i < 8; i++) {
                long j = (blk * 8 + i) * k + m; /* column of code m of byte i */
                xq[8 * (blk * k + m) + i] = m ? x[j] - f * x[j - 1] : x[j];
            }
}

/* nt <= 4 activation rows: per-group partial sums in registers. With bw (byte
 * windows, bits 2 or 4) xs are byte_window_x rows instead of x. */
INLINE void gemv_affine_nt(const weight *w, const float *x, float *y, int t0, int nt, long r0, long r1,
                           const float *xsum, float *srow, const unpacker *u, int bits, int mx,
                           const float *xq, int bw) {
    const long n = (long)w->cols, G = w->group, ng = n / G, cpg = G / 8, tail = chunk_tail(n / 8, bits);
    const long row_bytes = n * bits / 8;
    const int na = nt == 1 ? 4 : 2; /* partial sums per row (nt <= 4) */
    const float *xs[4];
    UNROLL
    for (int t = 0; t < 4; t++) xs[t] = bw ? xq + (long)(t < nt ? t : 0) * n : x + (long)(t0 + (t < nt ? t : 0)) * n;
    for (long r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + r * row_bytes;
        row_scales(w, r, ng, srow);
        __m256 acc[4];
        UNROLL
        for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
        for (long g = 0; g < ng; g++) {
            /* na independent partial sums per activation row (4 chunks per step, a
             * group has >= 4 chunks), so no FMA waits on the one before it */
            __m256 ga[4][4];
            UNROLL
            for (int t = 0; t < nt; t++)
                UNROLL
                for (int a = 0; a < na; a++) ga[t][a] = _mm256_setzero_ps();
            if (bw) /* 4 vectors = 8 / bits blocks of 8 bytes per step */
                for (long c = g * cpg; c < (g + 1) * cpg; c += 4) {
                    const int kb = 8 / bits;
                    __m256i v = _mm256_setzero_si256();
                    UNROLL
                    for (int k = 0; k < 4; k++) {
                        if (k % kb == 0) v = _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)(row + bits * (c + k))));
                        __m256 q = _mm256_cvtepi32_ps(k % kb ? _mm256_srli_epi32(v, (k % kb) * bits) : v);
                        UNROLL
                        for (int t = 0; t < nt; t++)
                            ga[t][k % na] = _mm256_fmadd_ps(q, _mm256_loadu_ps(xs[t] + 8 * (c + k)), ga[t][k % na]);
                    }
                }
            else
            for (long c = g * cpg; c < (g + 1) * cpg; c += 4) {
                UNROLL
                for (int k = 0; k < 4; k++) {
                    __m256 q = mx ? e2m1_x8(codes4(row, c + k)) : chunk_f32(row, bits, u, c + k, c + k >= tail);
                    UNROLL
                    for (int t = 0; t < nt; t++)
                        ga[t][k % na] = _mm256_fmadd_ps(q, _mm256_loadu_ps(xs[t] + 8 * (c + k)), ga[t][k % na]);
                }
            }
            __m256 s = _mm256_broadcast_ss(srow + g);
            UNROLL
            for (int t = 0; t < nt; t++) {
                __m256 gs = na == 4 ? _mm256_add_ps(_mm256_add_ps(ga[t][0], ga[t][1]), _mm256_add_ps(ga[t][2], ga[t][3]))
                                    : _mm256_add_ps(ga[t][0], ga[t][1]);
                acc[t] = _mm256_fmadd_ps(gs, s, acc[t]);
            }
        }
        float btail[4] = {0}; /* bias terms past the last 8 groups */
        if (!mx) {
            long g = 0;
            for (; g + 8 <= ng; g += 8) {
                __m256 b = scale_x8(w->biases, w->stype, r * ng + g);
                UNROLL
                for (int t = 0; t < nt; t++) acc[t] = _mm256_fmadd_ps(b, _mm256_loadu_ps(xsum + t * ng + g), acc[t]);
            }
            for (; g < ng; g++) {
                float b = scale_get(w->biases, w->stype, r * ng + g);
                UNROLL
                for (int t = 0; t < nt; t++) btail[t] += b * xsum[t * ng + g];
            }
        }
        UNROLL
        for (int t = 0; t < nt; t++) y[(long)(t0 + t) * w->rows + r] = hsum256(acc[t]) + btail[t];
    }
}

/* 4 < nt <= GEMV_NT activation rows. */
INLINE void gemv_affine_wide_nt(const weight *w, const float *x, float *y, int t0, int nt, long r0, long r1,
                           const float *xsum, float *srow, const unpacker *u, int bits, int mx) {
    const long n = (long)w->cols, G = w->group, ng = n / G, cpg = G / 8, tail = chunk_tail(n / 8, bits);
    const long row_bytes = n * bits / 8;
    const float *xs[GEMV_WIDE];
    UNROLL
    for (int t = 0; t < GEMV_WIDE; t++) xs[t] = x + (long)(t0 + (t < nt ? t : 0)) * n;
    for (long r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + r * row_bytes;
        row_scales(w, r, ng, srow);
        __m256 acc[GEMV_WIDE];
        UNROLL
        for (int t = 0; t < nt; t++) acc[t] = _mm256_setzero_ps();
        for (long g = 0; g < ng; g++) {
            /* no registers left for per-group partial sums: scale the codes instead */
            __m256 s = _mm256_broadcast_ss(srow + g);
            for (long c = g * cpg; c < (g + 1) * cpg; c++) {
                __m256 q = _mm256_mul_ps(s, mx ? e2m1_x8(codes4(row, c)) : chunk_f32(row, bits, u, c, c >= tail));
                UNROLL
                for (int t = 0; t < nt; t++) acc[t] = _mm256_fmadd_ps(q, _mm256_loadu_ps(xs[t] + 8 * c), acc[t]);
            }
        }
        float btail[GEMV_WIDE] = {0}; /* bias terms past the last 8 groups */
        if (!mx) {
            long g = 0;
            for (; g + 8 <= ng; g += 8) {
                __m256 b = scale_x8(w->biases, w->stype, r * ng + g);
                UNROLL
                for (int t = 0; t < nt; t++) acc[t] = _mm256_fmadd_ps(b, _mm256_loadu_ps(xsum + t * ng + g), acc[t]);
            }
            for (; g < ng; g++) {
                float b = scale_get(w->biases, w->stype, r * ng + g);
                UNROLL
                for (int t = 0; t < nt; t++) btail[t] += b * xsum[t * ng + g];
            }
        }
        UNROLL
        for (int t = 0; t < nt; t++) y[(long)(t0 + t) * w->rows + r] = hsum256(acc[t]) + btail[t];
    }
}

/* One specialization per (bits, nt) so the unpacker and token loops are constants. */
#define AFFINE_CALL(NT) gemv_affine_nt(w, x, y, t0, NT, r0, r1, xsum, srow, &u, BITS_, MX_, xq, BW_)
#define AFFINE_WIDE_CALL(NT) gemv_affine_wide_nt(w, x, y, t0, NT, r0, r1, xsum, srow, &u, BITS_, MX_)
#define AFFINE_NT(BITS, MX, SW, CALL)                                                           \
    {                                                                                           \
        enum { BITS_ = BITS, MX_ = MX, BW_ = !(MX) && ((BITS) == 2 || (BITS) == 4) };           \
        SW(CALL)                                                                                \
    }
#define AFFINE_FORMATS(SW, CALL)                                                                \
    if (mx) AFFINE_NT(4, 1, SW, CALL)                                                           \
    else switch (w->bits) {                                                                     \
    case 2: AFFINE_NT(2, 0, SW, CALL) break;                                                    \
    case 3: AFFINE_NT(3, 0, SW, CALL) break;                                                    \
    case 4: AFFINE_NT(4, 0, SW, CALL) break;                                                    \
    case 5: AFFINE_NT(5, 0, SW, CALL) break;                                                    \
    case 6: AFFINE_NT(6, 0, SW, CALL) break;                                                    \
    default: AFFINE_NT(8, 0, SW, CALL) break;                                                   \
    }

/* scratch: xsum [GEMV_WIDE, cols / group] | srow [cols / group] | xq [GEMV_NT, cols] */
static void gemv_quant(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch) {
    const long n = (long)w->cols;
    const int mx = w->fmt == WF_MXFP4;
    float *xsum = scratch, *srow = scratch + ((GEMV_WIDE * n / w->group + 15) & ~15L);
    float *xq = srow + ((n / w->group + 15) & ~15L);
    unpacker u = unpacker_for(mx ? 4 : w->bits);
    for (int t0 = 0; t0 < T; t0 += GEMV_NT) {
        int nt = T - t0 < GEMV_NT ? T - t0 : GEMV_NT;
        if (!mx) group_sums(x, n, w->group, t0, nt, xsum);
        if (!mx && (w->bits == 2 || w->bits == 4))
            for (int t = 0; t < nt; t++) byte_window_x(x + (long)(t0 + t) * n, n, w->bits, xq + (long)t * n);
        AFFINE_FORMATS(NT_SWITCH_NARROW, AFFINE_CALL)
    }
}

/* 5..8 activation rows in one pass. */
static void gemv_quant_wide(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch) {
    const long n = (long)w->cols;
    const int mx = w->fmt == WF_MXFP4, t0 = 0, nt = T;
    float *xsum = scratch, *srow = scratch + ((GEMV_WIDE * n / w->group + 15) & ~15L);
    unpacker u = unpacker_for(mx ? 4 : w->bits);
    if (!mx) group_sums(x, n, w->group, t0, nt, xsum);
    AFFINE_FORMATS(NT_SWITCH_WIDE, AFFINE_WIDE_CALL)
}

/* ------------------------------------------------------ row dequantization
 * One weight row to float32 (the GEMM's panel staging). Agrees with
 * weight_row_f32 up to the rounding of the fused code * scale + bias. */

static void dequant_row(const weight *w, long r, float *out) {
    const long n = (long)w->cols;
    switch (w->fmt) {
    case WF_F32:
        memcpy(out, (const float *)w->data + r * n, (size_t)n * sizeof(float));
        return;
    case WF_BF16:
    case WF_F16: {
        const uint16_t *p = (const uint16_t *)w->data + r * n;
        long j = 0;
        if (w->fmt == WF_BF16) {
            for (; j + 8 <= n; j += 8) _mm256_storeu_ps(out + j, bf16x8(p + j));
            for (; j < n; j++) out[j] = bf16_to_f32(p[j]);
        } else {
            for (; j + 8 <= n; j += 8) _mm256_storeu_ps(out + j, f16x8(p + j));
            for (; j < n; j++) out[j] = f16_to_f32(p[j]);
        }
        return;
    }
    case WF_AFFINE: {
        const int bits = w->bits;
        const long G = w->group, ng = n / G, tail = chunk_tail(n / 8, bits);
        const uint8_t *row = (const uint8_t *)w->data + r * (n * bits / 8);
        unpacker u = unpacker_for(bits);
        for (long g = 0; g < ng; g++) {
            __m256 s = _mm256_set1_ps(scale_get(w->scales, w->stype, r * ng + g));
            __m256 b = _mm256_set1_ps(scale_get(w->biases, w->stype, r * ng + g));
            for (long c = g * G / 8; c < (g + 1) * G / 8; c++)
                _mm256_storeu_ps(out + 8 * c, _mm256_fmadd_ps(chunk_f32(row, bits, &u, c, c >= tail), s, b));
        }
        return;
    }
    case WF_MXFP4: {
        const uint8_t *row = (const uint8_t *)w->data + r * (n / 2);
        const uint8_t *sc = (const uint8_t *)w->scales + r * (n / 32);
        for (long c = 0; c < n / 8; c++)
            _mm256_storeu_ps(out + 8 * c, _mm256_mul_ps(e2m1_x8(codes4(row, c)), _mm256_set1_ps(e8m0_to_f32(sc[c / 4]))));
        return;
    }
    }
    weight_row_f32(w, r, out);
}

/* ------------------------------------------------------------------ GEMM */

INLINE void transpose8(__m256 *v) {
    __m256 t0 = _mm256_unpacklo_ps(v[0], v[1]), t1 = _mm256_unpackhi_ps(v[0], v[1]);
    __m256 t2 = _mm256_unpacklo_ps(v[2], v[3]), t3 = _mm256_unpackhi_ps(v[2], v[3]);
    __m256 t4 = _mm256_unpacklo_ps(v[4], v[5]), t5 = _mm256_unpackhi_ps(v[4], v[5]);
    __m256 t6 = _mm256_unpacklo_ps(v[6], v[7]), t7 = _mm256_unpackhi_ps(v[6], v[7]);
    __m256 s0 = _mm256_shuffle_ps(t0, t2, 0x44), s1 = _mm256_shuffle_ps(t0, t2, 0xee);
    __m256 s2 = _mm256_shuffle_ps(t1, t3, 0x44), s3 = _mm256_shuffle_ps(t1, t3, 0xee);
    __m256 s4 = _mm256_shuffle_ps(t4, t6, 0x44), s5 = _mm256_shuffle_ps(t4, t6, 0xee);
    __m256 s6 = _mm256_shuffle_ps(t5, t7, 0x44), s7 = _mm256_shuffle_ps(t5, t7, 0xee);
    v[0] = _mm256_permute2f128_ps(s0, s4, 0x20);
    v[1] = _mm256_permute2f128_ps(s1, s5, 0x20);
    v[2] = _mm256_permute2f128_ps(s2, s6, 0x20);
    v[3] = _mm256_permute2f128_ps(s3, s7, 0x20);
    v[4] = _mm256_permute2f128_ps(s0, s4, 0x31);
    v[5] = _mm256_permute2f128_ps(s1, s5, 0x31);
    v[6] = _mm256_permute2f128_ps(s2, s6, 0x31);
    v[7] = _mm256_permute2f128_ps(s3, s7, 0x31);
}

/* Packs weight rows [r, r + nr) (nr <= np; missing rows are zero) into
 * panel [cols, np]: panel[k * np + i] = W[r + i, k]; np is a multiple of 8 (MM_NR
 * here, the AVX-512 GEMM's 32 in matmul_avx512.c). stage is [8, cols]. */
void mm_pack_panel_avx2(const weight *w, long r, long nr, float *panel, int np, float *stage) {
    const long n = (long)w->cols;
    for (int h = 0; h < np / 8; h++) {
        if (w->fmt != WF_AFFINE && w->fmt != WF_MXFP4 && 8 * h + 8 <= nr) {
            /* float rows: 8x8 blocks straight from the weight (no staging copy, which
             * cost about a quarter of the GEMM's time at T = 512) */
            const long r8 = r + 8 * h;
            long k = 0;
            for (; k + 8 <= n; k += 8) {
                __m256 v[8];
                for (int i = 0; i < 8; i++) {
                    const long o = (r8 + i) * n + k;
                    v[i] = w->fmt == WF_BF16  ? bf16x8((const uint16_t *)w->data + o)
                           : w->fmt == WF_F16 ? f16x8((const uint16_t *)w->data + o)
                                              : _mm256_loadu_ps((const float *)w->data + o);
                }
                transpose8(v);
                for (int i = 0; i < 8; i++) _mm256_store_ps(panel + (k + i) * np + 8 * h, v[i]);
            }
            for (; k < n; k++) {
                const long o = r8 * n + k;
                for (int i = 0; i < 8; i++)
                    panel[k * np + 8 * h + i] = w->fmt == WF_BF16  ? bf16_to_f32(((const uint16_t *)w->data)[o + i * n])
                                                : w->fmt == WF_F16 ? f16_to_f32(((const uint16_t *)w->data)[o + i * n])
                                                                   : ((const float *)w->data)[o + i * n];
            }
            continue;
        }
        for (long i = 0; i < 8; i++) {
            if (8 * h + i < nr) dequant_row(w, r + 8 * h + i, stage + i * n);
            else memset(stage + i * n, 0, (size_t)n * sizeof(float));
        }
        long k = 0;
        for (; k + 8 <= n; k += 8) {
            __m256 v[8];
            for (int i = 0; i < 8; i++) v[i] = _mm256_loadu_ps(stage + i * n + k);
            transpose8(v);
            for (int i = 0; i < 8; i++) _mm256_store_ps(panel + (k + i) * np + 8 * h, v[i]);
        }
        for (; k < n; k++)
            for (int i = 0; i < 8; i++) panel[k * np + 8 * h + i] = stage[i * n + k];
    }
}

/* c [mr, ldc] (first MM_NR columns) = x [mr, ldx] (first K columns) @ panel [K, MM_NR].
 * Each output is one FMA chain over k in order. */
INLINE void gemm_tile(int mr, long K, const float *panel, const float *x, long ldx, float *c, long ldc) {
    __m256 c00 = _mm256_setzero_ps(), c01 = c00, c10 = c00, c11 = c00, c20 = c00, c21 = c00;
    __m256 c30 = c00, c31 = c00, c40 = c00, c41 = c00, c50 = c00, c51 = c00;
    const float *x0 = x, *x1 = x + (mr > 1 ? ldx : 0), *x2 = x + (mr > 2 ? 2 * ldx : 0);
    const float *x3 = x + (mr > 3 ? 3 * ldx : 0), *x4 = x + (mr > 4 ? 4 * ldx : 0), *x5 = x + (mr > 5 ? 5 * ldx : 0);
    for (long k = 0; k < K; k++) {
        const __m256 b0 = _mm256_load_ps(panel + k * MM_NR), b1 = _mm256_load_ps(panel + k * MM_NR + 8);
        __m256 a = _mm256_broadcast_ss(x0 + k);
        c00 = _mm256_fmadd_ps(a, b0, c00); c01 = _mm256_fmadd_ps(a, b1, c01);
        if (mr > 1) { a = _mm256_broadcast_ss(x1 + k); c10 = _mm256_fmadd_ps(a, b0, c10); c11 = _mm256_fmadd_ps(a, b1, c11); }
        if (mr > 2) { a = _mm256_broadcast_ss(x2 + k); c20 = _mm256_fmadd_ps(a, b0, c20); c21 = _mm256_fmadd_ps(a, b1, c21); }
        if (mr > 3) { a = _mm256_broadcast_ss(x3 + k); c30 = _mm256_fmadd_ps(a, b0, c30); c31 = _mm256_fmadd_ps(a, b1, c31); }
        if (mr > 4) { a = _mm256_broadcast_ss(x4 + k); c40 = _mm256_fmadd_ps(a, b0, c40); c41 = _mm256_fmadd_ps(a, b1, c41); }
        if (mr > 5) { a = _mm256_broadcast_ss(x5 + k); c50 = _mm256_fmadd_ps(a, b0, c50); c51 = _mm256_fmadd_ps(a, b1, c51); }
    }
    _mm256_storeu_ps(c, c00); _mm256_storeu_ps(c + 8, c01);
    if (mr > 1) { _mm256_storeu_ps(c + ldc, c10); _mm256_storeu_ps(c + ldc + 8, c11); }
    if (mr > 2) { _mm256_storeu_ps(c + 2 * ldc, c20); _mm256_storeu_ps(c + 2 * ldc + 8, c21); }
    if (mr > 3) { _mm256_storeu_ps(c + 3 * ldc, c30); _mm256_storeu_ps(c + 3 * ldc + 8, c31); }
    if (mr > 4) { _mm256_storeu_ps(c + 4 * ldc, c40); _mm256_storeu_ps(c + 4 * ldc + 8, c41); }
    if (mr > 5) { _mm256_storeu_ps(c + 5 * ldc, c50); _mm256_storeu_ps(c + 5 * ldc + 8, c51); }
}

static void gemm_tile_any(int mr, long K, const float *panel, const float *x, long ldx, float *c, long ldc) {
    switch (mr) {
    case 1: gemm_tile(1, K, panel, x, ldx, c, ldc); break;
    case 2: gemm_tile(2, K, panel, x, ldx, c, ldc); break;
    case 3: gemm_tile(3, K, panel, x, ldx, c, ldc); break;
    case 4: gemm_tile(4, K, panel, x, ldx, c, ldc); break;
    case 5: gemm_tile(5, K, panel, x, ldx, c, ldc); break;
    default: gemm_tile(6, K, panel, x, ldx, c, ldc); break;
    }
}

/* Rounds n floats (n % 8 == 0) to bf16 values in place (round to nearest even). */
static void round_bf16(float *p, long n) {
    for (long i = 0; i < n; i += 8) {
        __m256i u = _mm256_castps_si256(_mm256_load_ps(p + i));
        __m256i lsb = _mm256_and_si256(_mm256_srli_epi32(u, 16), _mm256_set1_epi32(1));
        u = _mm256_add_epi32(u, _mm256_add_epi32(_mm256_set1_epi32(0x7fff), lsb));
        _mm256_store_ps(p + i, _mm256_castsi256_ps(_mm256_and_si256(u, _mm256_set1_epi32((int)0xffff0000u))));
    }
}

/* scratch: panel [cols, MM_NR] | stage [8, cols] | edge tile [MM_MR, MM_NR].
 * wround: the panel's weights rounded to bf16 values (the fast precision). */
INLINE void gemm_packed_impl(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch, int wround) {
    const long K = (long)w->cols, rows = (long)w->rows;
    float *panel = scratch;
    float *stage = panel + ((K * MM_NR + 15) & ~15L);
    float *edge = stage + ((8 * K + 15) & ~15L);
    for (long r = r0; r < r1; r += MM_NR) {
        long nr = r1 - r < MM_NR ? r1 - r : MM_NR;
        mm_pack_panel_avx2(w, r, nr, panel, MM_NR, stage);
        if (wround) round_bf16(panel, K * MM_NR);
        for (int t = 0; t < T; t += MM_MR) {
            int mr = T - t < MM_MR ? T - t : MM_MR;
            float *c = y + (long)t * rows + r;
            if (nr == MM_NR) {
                gemm_tile_any(mr, K, panel, x + (long)t * K, K, c, rows);
            } else { /* ragged right edge: compute the full tile aside, keep nr columns */
                gemm_tile_any(mr, K, panel, x + (long)t * K, K, edge, MM_NR);
                for (int i = 0; i < mr; i++) memcpy(c + (long)i * rows, edge + i * MM_NR, (size_t)nr * sizeof(float));
            }
        }
    }
}

static void gemm_packed(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch) {
    gemm_packed_impl(w, x, y, T, r0, r1, scratch, 0);
}

void mm_gemm_avx2_wround(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch) {
    gemm_packed_impl(w, x, y, T, r0, r1, scratch, 1);
}

/* ---------------------------------------------------------------- dispatch */

mm_kernel mm_select_avx2(const weight *w, int T) {
    if (T >= GEMM_MIN_T) return gemm_packed;
    int wide = T > GEMV_NT;
    switch (w->fmt) {
    case WF_F32: return wide ? gemv_f32_wide : gemv_f32;
    case WF_BF16: return wide ? gemv_bf16_wide : gemv_bf16;
    case WF_F16: return wide ? gemv_f16_wide : gemv_f16;
    case WF_AFFINE:
    case WF_MXFP4: return wide ? gemv_quant_wide : gemv_quant;
    }
    return NULL;
}

const char *mm_kernel_name_avx2(mm_kernel k) {
    if (k == gemm_packed) return "avx2 gemm 6x16";
    if (k == mm_gemm_avx2_wround) return "avx2 gemm 6x16 bf16-rounded weights (fast)";
    if (k == gemv_f32) return "avx2 gemv f32";
    if (k == gemv_bf16) return "avx2 gemv bf16";
    if (k == gemv_f16) return "avx2 gemv f16";
    if (k == gemv_quant) return "avx2 gemv quant";
    if (k == gemv_f32_wide) return "avx2 gemv f32 x5-8";
    if (k == gemv_bf16_wide) return "avx2 gemv bf16 x5-8";
    if (k == gemv_f16_wide) return "avx2 gemv f16 x5-8";
    if (k == gemv_quant_wide) return "avx2 gemv quant x5-8";
    return NULL;
}
