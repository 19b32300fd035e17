/* backend/cpu/matmul_avx512.c: AVX-512 (F/BW/VL/DQ) matrix products, compiled with
 * -mavx512f -mavx512bw -mavx512vl -mavx512dq (Makefile, *_avx512.c) and called only
 * when cpu_level() is avx512, so the binary still runs on AVX2-only processors.
 * Exact path only: weights widen to float32 and meet float32 activations in FMAs,
 * as in matmul_avx2.c (whose design notes apply); what changes is the width:
 *  - GEMM (T >= 9): a 12 x 32 register tile (24 zmm accumulators) over a panel
 *    [cols, 32] packed per call by matmul_avx2.c's packer. Each output is one FMA
 *    chain over k in order, as in the AVX2 GEMM, so the two give identical bits.
 *  - GEMV (T <= 4; 5..8 go to the AVX2 wide kernels): bf16/f16/f32 rows 32 columns
 *    per step with a masked tail; affine 4- and 8-bit rows (other widths and MXFP4
 *    keep the AVX2 kernels) 64 codes per step, 4-bit ones through byte windows
 *    widened to 16 bytes per vector.
 * Every output element is computed by the same operations whatever the row split. */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/panel512.h"
#include "backend/cpu/scales512.h"
#include "tensor/dtype.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 32")
#define NT512 4 /* activation rows per GEMV pass */
#define GEMM_MIN_T 9

/* ---------------------------------------------------------------- helpers */

INLINE __m512 bf16x16(const uint16_t *p) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p)), 16));
}
INLINE __m512 f16x16(const uint16_t *p) { return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)p)); }
INLINE __m512 f32x16(const float *p) { return _mm512_loadu_ps(p); }
INLINE __m512 f32x16_mask(const float *p, __mmask16 m) { return _mm512_maskz_loadu_ps(m, p); }

/* ------------------------------------------------------------------ GEMM */

/* c [mr, ldc] (first 32 columns) = x [mr, ldx] (first K columns) @ panel [K, 32]. */
INLINE void gemm_tile(int mr, long K, const float *panel, const float *x, long ldx, float *c, long ldc) {
    __m512 acc[MM512_MR][2];
    const float *xr[MM512_MR];
    UNROLL
    for (int i = 0; i < mr; i++) {
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        xr[i] = x + (long)i * ldx;
    }
    for (long k = 0; k < K; k++) {
        const __m512 b0 = _mm512_load_ps(panel + k * MM512_NR), b1 = _mm512_load_ps(panel + k * MM512_NR + 16);
        UNROLL
        for (int i = 0; i < mr; i++) {
            const __m512 a = _mm512_set1_ps(xr[i][k]);
            acc[i][0] = _mm512_fmadd_ps(a, b0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(a, b1, acc[i][1]);
        }
    }
    UNROLL
    for (int i = 0; i < mr; i++) {
        _mm512_storeu_ps(c + (long)i * ldc, acc[i][0]);
        _mm512_storeu_ps(c + (long)i * ldc + 16, acc[i][1]);
    }
}

/* The same from a bf16 pair-layout panel u32 [ceil(K/2), 32] (pack.c): the low half
 * of a pair widens with a shift, the high half with a mask, and the products are
 * summed in k order as from the float32 panel (identical bits). */
INLINE void gemm_tile_pairs(int mr, long K, const uint32_t *panel, const float *x, long ldx, float *c, long ldc) {
    __m512 acc[MM512_MR][2];
    const float *xr[MM512_MR];
    const __m512i himask = _mm512_set1_epi32((int)0xffff0000u);
    UNROLL
    for (int i = 0; i < mr; i++) {
        acc[i][0] = acc[i][1] = _mm512_setzero_ps();
        xr[i] = x + (long)i * ldx;
    }
    const long kp = K / 2;
    for (long k = 0; k < kp; k++) {
        const __m512i p0 = _mm512_load_si512(panel + k * 32), p1 = _mm512_load_si512(panel + k * 32 + 16);
        const __m512 e0 = _mm512_castsi512_ps(_mm512_slli_epi32(p0, 16)), e1 = _mm512_castsi512_ps(_mm512_slli_epi32(p1, 16));
        UNROLL
        for (int i = 0; i < mr; i++) {
            const __m512 a = _mm512_set1_ps(xr[i][2 * k]);
            acc[i][0] = _mm512_fmadd_ps(a, e0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(a, e1, acc[i][1]);
        }
        const __m512 o0 = _mm512_castsi512_ps(_mm512_and_si512(p0, himask));
        const __m512 o1 = _mm512_castsi512_ps(_mm512_and_si512(p1, himask));
        UNROLL
        for (int i = 0; i < mr; i++) {
            const __m512 a = _mm512_set1_ps(xr[i][2 * k + 1]);
            acc[i][0] = _mm512_fmadd_ps(a, o0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(a, o1, acc[i][1]);
        }
    }
    if (K & 1) {
        const __m512i p0 = _mm512_load_si512(panel + kp * 32), p1 = _mm512_load_si512(panel + kp * 32 + 16);
        const __m512 e0 = _mm512_castsi512_ps(_mm512_slli_epi32(p0, 16)), e1 = _mm512_castsi512_ps(_mm512_slli_epi32(p1, 16));
        UNROLL
        for (int i = 0; i < mr; i++) {
            const __m512 a = _mm512_set1_ps(xr[i][2 * kp]);
            acc[i][0] = _mm512_fmadd_ps(a, e0, acc[i][0]);
            acc[i][1] = _mm512_fmadd_ps(a, e1, acc[i][1]);
        }
    }
    UNROLL
    for (int i = 0; i < mr; i++) {
        _mm512_storeu_ps(c + (long)i * ldc, acc[i][0]);
        _mm512_storeu_ps(c + (long)i * ldc + 16, acc[i][1]);
    }
}

static void gemm_tile_pairs_any(int mr, long K, const uint32_t *panel, const float *x, long ldx, float *c, long ldc) {
    switch (mr) {
#define TILE_CASE(M) case M: gemm_tile_pairs(M, K, panel, x, ldx, c, ldc); break;
    TILE_CASE(1) TILE_CASE(2) TILE_CASE(3) TILE_CASE(4) TILE_CASE(5) TILE_CASE(6)
    TILE_CASE(7) TILE_CASE(8) TILE_CASE(9) TILE_CASE(10) TILE_CASE(11)
#undef TILE_CASE
    default: gemm_tile_pairs(MM512_MR, K, panel, x, ldx, c, ldc); break;
    }
}

/* bf16 weights packed at load (w->packed): the GEMM over their pair-layout panels. */
static void gemm512_packed(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch) {
    const long K = (long)w->cols, rows = (long)w->rows;
    uint32_t *own = (uint32_t *)scratch;
    float *edge = scratch + (((K + 1) / 2 * 32 + 15) & ~15L);
    for (long r = r0; r < r1; r += MM512_NR) {
        long nr = r1 - r < MM512_NR ? r1 - r : MM512_NR;
        const uint32_t *panel = mm_bf16_panel(w, r, own);
        for (int t = 0; t < T; t += MM512_MR) {
            int mr = T - t < MM512_MR ? T - t : MM512_MR;
            float *c = y + (long)t * rows + r;
            if (nr == MM512_NR) {
                gemm_tile_pairs_any(mr, K, panel, x + (long)t * K, K, c, rows);
            } else {
                gemm_tile_pairs_any(mr, K, panel, x + (long)t * K, K, edge, MM512_NR);
                for (int i = 0; i < mr; i++) memcpy(c + (long)i * rows, edge + i * MM512_NR, (size_t)nr * sizeof(float));
            }
        }
    }
}

static void gemm_tile_any(int mr, long K, const float *panel, const float *x, long ldx, float *c, long ldc) {
    switch (mr) {
#define TILE_CASE(M) case M: gemm_tile(M, K, panel, x, ldx, c, ldc); break;
    TILE_CASE(1) TILE_CASE(2) TILE_CASE(3) TILE_CASE(4) TILE_CASE(5) TILE_CASE(6)
    TILE_CASE(7) TILE_CASE(8) TILE_CASE(9) TILE_CASE(10) TILE_CASE(11)
#undef TILE_CASE
    default: gemm_tile(MM512_MR, K, panel, x, ldx, c, ldc); break;
    }
}

/* scratch: panel [cols, 32] | stage [8, cols] | edge tile [MM512_MR, 32]. */
static void gemm512(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch) {
    const long K = (long)w->cols, rows = (long)w->rows;
    float *panel = scratch;
    float *stage = panel + ((K * MM512_NR + 15) & ~15L);
    float *edge = stage + ((8 * K + 15) & ~15L);
    const int one_pass = affine_panel_ok(w);
    for (long r = r0; r < r1; r += MM512_NR) {
        long nr = r1 - r < MM512_NR ? r1 - r : MM512_NR;
        if (one_pass && nr == MM512_NR) affine_panel_f32(w, r, panel);
        else mm_pack_panel_avx2(w, r, nr, panel, MM512_NR, stage);
        for (int t = 0; t < T; t += MM512_MR) {
            int mr = T - t < MM512_MR ? T - t : MM512_MR;
            float *c = y + (long)t * rows + r;
            if (nr == MM512_NR) {
                gemm_tile_any(mr, K, panel, x + (long)t * K, K, c, rows);
            } else { /* ragged right edge: the full tile aside, keep nr columns */
                gemm_tile_any(mr, K, panel, x + (long)t * K, K, edge, MM512_NR);
                for (int i = 0; i < mr; i++) memcpy(c + (long)i * rows, edge + i * MM512_NR, (size_t)nr * sizeof(float));
            }
        }
    }
}

/* -------------------------------------------------- GEMV over float rows
 * y[t, r] = sum_j W[r, j] x[t, j]: 32 columns per step into two accumulators per
 * activation row, then 16, then one masked step for the last cols % 16. */

/* Row streams a one-token GEMV reads at once. One sequential stream per thread reached
 * 40-47 GB/s of bf16 weights on two Zen 5 cores against 57-62 with 4 or 8 streams
 * (bench_mm -f bf16 -p 0 -t 2, three alternations); end to end, qwen3-0.6b bf16 tg128
 * 30.8-34.6 -> 38.5-41.6 tok/s with 4 and 35.8-37.0 with 8 (docs/benchmarks/cpu-core.md,
 * thirteenth session): the read-bandwidth probe reads 4 streams too. */
#define GEMV_STREAMS 4
#define GEMV_FLOAT512(NAME, ELEM, LOAD16, LOADM)                                                \
    INLINE void NAME##_nt(const weight *w, const float *x, float *y, int t0, int nt, long r0,   \
                          long r1) {                                                            \
        const long n = (long)w->cols;                                                           \
        const __mmask16 tail = (__mmask16)((1u << (n % 16)) - 1);                               \
        const float *xs[NT512];                                                                 \
        UNROLL                                                                                  \
        for (int t = 0; t < NT512; t++) xs[t] = x + (long)(t0 + (t < nt ? t : 0)) * n;          \
        for (long r = r0; r < r1; r++) {                                                        \
            const ELEM *wr = (const ELEM *)w->data + r * n;                                     \
            __m512 a[NT512][2];                                                                 \
            UNROLL                                                                              \
            for (int t = 0; t < nt; t++) a[t][0] = a[t][1] = _mm512_setzero_ps();               \
            long j = 0;                                                                         \
            for (; j + 32 <= n; j += 32) {                                                      \
                __m512 w0 = LOAD16(wr + j), w1 = LOAD16(wr + j + 16);                           \
                UNROLL                                                                          \
                for (int t = 0; t < nt; t++) {                                                  \
                    a[t][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xs[t] + j), a[t][0]);         \
                    a[t][1] = _mm512_fmadd_ps(w1, _mm512_loadu_ps(xs[t] + j + 16), a[t][1]);    \
                }                                                                               \
            }                                                                                   \
            if (j + 16 <= n) {                                                                  \
                __m512 w0 = LOAD16(wr + j);                                                     \
                UNROLL                                                                          \
                for (int t = 0; t < nt; t++)                                                    \
                    a[t][0] = _mm512_fmadd_ps(w0, _mm512_loadu_ps(xs[t] + j), a[t][0]);         \
                j += 16;                                                                        \
            }                                                                                   \
            if (tail) {                                                                         \
                __m512 w0 = LOADM(wr + j, tail);                                                \
                UNROLL                                                                          \
                for (int t = 0; t < nt; t++)                                                    \
                    a[t][1] = _mm512_fmadd_ps(w0, _mm512_maskz_loadu_ps(tail, xs[t] + j), a[t][1]); \
            }                                                                                   \
            UNROLL                                                                              \
            for (int t = 0; t < nt; t++)                                                        \
                y[(long)(t0 + t) * w->rows + r] = _mm512_reduce_add_ps(_mm512_add_ps(a[t][0], a[t][1])); \
        }                                                                                       \
    }                                                                                           \
    /* one activation row over four row streams at once (rows r, r + q, r + 2q, r + 3q of  \
     * the task's range): one sequential stream per thread kept too few reads in flight  \
     * (GEMV_STREAMS); each row's sums are NAME##_nt's, in the same order */              \
    INLINE void NAME##_streams(const weight *w, const float *x, float *y, long r0, long r1) {  \
        const long n = (long)w->cols, q = (r1 - r0) / GEMV_STREAMS;                             \
        const __mmask16 tail = (__mmask16)((1u << (n % 16)) - 1);                               \
        for (long i = 0; i < q; i++) {                                                          \
            const ELEM *wr[GEMV_STREAMS];                                                       \
            __m512 a[GEMV_STREAMS][2];                                                          \
            UNROLL                                                                              \
            for (int k = 0; k < GEMV_STREAMS; k++) {                                            \
                wr[k] = (const ELEM *)w->data + (r0 + k * q + i) * n;                           \
                a[k][0] = a[k][1] = _mm512_setzero_ps();                                        \
            }                                                                                   \
            long j = 0;                                                                         \
            for (; j + 32 <= n; j += 32) {                                                      \
                const __m512 x0 = _mm512_loadu_ps(x + j), x1 = _mm512_loadu_ps(x + j + 16);     \
                UNROLL                                                                          \
                for (int k = 0; k < GEMV_STREAMS; k++) {                                        \
                    a[k][0] = _mm512_fmadd_ps(LOAD16(wr[k] + j), x0, a[k][0]);                  \
                    a[k][1] = _mm512_fmadd_ps(LOAD16(wr[k] + j + 16), x1, a[k][1]);             \
                }                                                                               \
            }                                                                                   \
            if (j + 16 <= n) {                                                                  \
                const __m512 x0 = _mm512_loadu_ps(x + j);                                       \
                UNROLL                                                                          \
                for (int k = 0; k < GEMV_STREAMS; k++)                                          \
                    a[k][0] = _mm512_fmadd_ps(LOAD16(wr[k] + j), x0, a[k][0]);                  \
                j += 16;                                                                        \
            }                                                                                   \
            if (tail) {                                                                         \
                const __m512 x0 = _mm512_maskz_loadu_ps(tail, x + j);                           \
                UNROLL                                                                          \
                for (int k = 0; k < GEMV_STREAMS; k++)                                          \
                    a[k][1] = _mm512_fmadd_ps(LOADM(wr[k] + j, tail), x0, a[k][1]);             \
            }                                                                                   \
            UNROLL                                                                              \
            for (int k = 0; k < GEMV_STREAMS; k++)                                              \
                y[r0 + k * q + i] = _mm512_reduce_add_ps(_mm512_add_ps(a[k][0], a[k][1]));      \
        }                                                                                       \
        if (r0 + GEMV_STREAMS * q < r1) NAME##_nt(w, x, y, 0, 1, r0 + GEMV_STREAMS * q, r1);   \
    }                                                                                           \
    static void NAME(const weight *w, const float *x, float *y, int T, long r0, long r1,        \
                     float *scratch) {                                                          \
        (void)scratch;                                                                          \
        if (T == 1) {                                                                           \
            NAME##_streams(w, x, y, r0, r1);                                                    \
            return;                                                                             \
        }                                                                                       \
        for (int t0 = 0; t0 < T; t0 += NT512) {                                                 \
            switch (T - t0) {                                                                   \
            case 1: NAME##_nt(w, x, y, t0, 1, r0, r1); break;                                   \
            case 2: NAME##_nt(w, x, y, t0, 2, r0, r1); break;                                   \
            case 3: NAME##_nt(w, x, y, t0, 3, r0, r1); break;                                   \
            default: NAME##_nt(w, x, y, t0, 4, r0, r1); break;                                  \
            }                                                                                   \
        }                                                                                       \
    }

GEMV_FLOAT512(gemv512_f32, float, f32x16, f32x16_mask)
GEMV_FLOAT512(gemv512_bf16, uint16_t, bf16x16, bf16x16_mask)
GEMV_FLOAT512(gemv512_f16, uint16_t, f16x16, f16x16_mask)

/* ------------------------------------------------- GEMV over affine rows
 * W[r, j] = q_j s_g + b_g per group g, so
 *   y = sum_g s_g (q_g . x_g) + sum_g b_g xsum_g,   xsum_g = sum_{j in g} x_j.
 * 8-bit: 16 codes per zero-extended 16-byte load. 4-bit: byte windows (see
 * matmul_avx2.c's byte_window_x): a byte v = q0 + 16 q1 contributes
 * v a0 + (v >> 4) a1 with a0 = x0, a1 = x1 - 16 x0, so a 16-byte load feeds two
 * 16-lane FMAs without masking; xq holds the a_m: per 16-byte block b,
 * xq[32 b + 16 m + i] = a_m of byte i. */

static void byte_window_x16(const float *x, long n, float *xq) {
    for (long b = 0; b < n / 32; b++)
        for (int i = 0; i < 16; i++) {
            long j = (b * 16 + i) * 2;
            xq[32 * b + i] = x[j];
            xq[32 * b + 16 + i] = x[j + 1] - 16.0f * x[j];
        }
}

/* xsum [nt, ng] of activation rows t0 .. t0 + nt. */
static void group_sums(const float *x, long n, int group, int t0, int nt, float *xsum) {
    long ng = n / group;
    for (int t = 0; t < nt; t++) {
        const float *xt = x + (long)(t0 + t) * n;
        for (long g = 0; g < ng; g++) {
            __m512 s = _mm512_setzero_ps();
            for (int j = 0; j < group; j += 16) s = _mm512_add_ps(s, _mm512_loadu_ps(xt + g * group + j));
            xsum[t * ng + g] = _mm512_reduce_add_ps(s);
        }
    }
}

/* Codes [c, c + 32) of a row against activation rows xs into partial sums i0, i1. */
INLINE void affine_block(const uint8_t *row, long c, int bits, const float *const *xs, int nt, __m512 ga[][4], int i0,
                         int i1) {
    const uint8_t *p = row + c * bits / 8;
    __m512 q0, q1;
    if (bits == 4) {
        __m512i v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
        q0 = _mm512_cvtepi32_ps(v);
        q1 = _mm512_cvtepi32_ps(_mm512_srli_epi32(v, 4));
    } else {
        q0 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p)));
        q1 = _mm512_cvtepi32_ps(_mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)(p + 16))));
    }
    UNROLL
    for (int t = 0; t < nt; t++) {
        ga[t][i0] = _mm512_fmadd_ps(q0, _mm512_loadu_ps(xs[t] + c), ga[t][i0]);
        ga[t][i1] = _mm512_fmadd_ps(q1, _mm512_loadu_ps(xs[t] + c + 16), ga[t][i1]);
    }
}

/* nt <= 4 rows, bits 4 (xs are byte_window_x16 rows) or 8 (xs are x rows). */
INLINE void gemv512_affine_nt(const weight *w, const float *const *xs, float *y, int t0, int nt, long r0, long r1,
                              const float *xsum, int bits) {
    const long n = (long)w->cols, G = w->group, ng = n / G, row_bytes = n * bits / 8;
    const int na = nt == 1 ? 4 : 2; /* independent partial sums per activation row */
    for (long r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + r * row_bytes;
        __m512 acc[NT512];
        UNROLL
        for (int t = 0; t < nt; t++) acc[t] = _mm512_setzero_ps();
        /* 16 groups at a time: their scales in one register (a scale is picked out
         * with a permute; storing them and reloading one at a time stalled on
         * store forwarding), their biases dotted with the activation sums */
        for (long g0 = 0; g0 < ng; g0 += 16) {
            const __mmask16 gm = ng - g0 >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (ng - g0)) - 1);
            const __m512 sv = scale16(w->scales, w->stype, r * ng + g0, gm);
            const __m512 bv = scale16(w->biases, w->stype, r * ng + g0, gm);
            UNROLL
            for (int t = 0; t < nt; t++) acc[t] = _mm512_fmadd_ps(bv, _mm512_maskz_loadu_ps(gm, xsum + t * ng + g0), acc[t]);
            const long g1 = ng - g0 < 16 ? ng : g0 + 16;
            for (long g = g0; g < g1; g++) {
                __m512 ga[NT512][4];
                UNROLL
                for (int t = 0; t < nt; t++)
                    UNROLL
                    for (int a = 0; a < na; a++) ga[t][a] = _mm512_setzero_ps();
                /* 32 codes per block (two 16-lane vectors); a 64-code step's two blocks
                 * feed different partial sums when na == 4 */
                long c = g * G;
                for (; c + 64 <= (g + 1) * G; c += 64) {
                    affine_block(row, c, bits, xs, nt, ga, 0, 1);
                    affine_block(row, c + 32, bits, xs, nt, ga, 2 % na, 3 % na);
                }
                if (c < (g + 1) * G) affine_block(row, c, bits, xs, nt, ga, 0, 1);
                const __m512 s = _mm512_permutexvar_ps(_mm512_set1_epi32((int)(g - g0)), sv);
                UNROLL
                for (int t = 0; t < nt; t++) {
                    __m512 gs = na == 4 ? _mm512_add_ps(_mm512_add_ps(ga[t][0], ga[t][1]), _mm512_add_ps(ga[t][2], ga[t][3]))
                                        : _mm512_add_ps(ga[t][0], ga[t][1]);
                    acc[t] = _mm512_fmadd_ps(gs, s, acc[t]);
                }
            }
        }
        UNROLL
        for (int t = 0; t < nt; t++) y[(long)(t0 + t) * w->rows + r] = _mm512_reduce_add_ps(acc[t]);
    }
}

/* scratch: xsum [NT512, ng] | xq [NT512, cols] (4-bit) */
static void gemv512_affine(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch) {
    const long n = (long)w->cols, ng = n / w->group, ngp = (ng + 15) & ~15L;
    float *xsum = scratch, *xq = xsum + NT512 * ngp;
    for (int t0 = 0; t0 < T; t0 += NT512) {
        int nt = T - t0 < NT512 ? T - t0 : NT512;
        const float *xs[NT512];
        group_sums(x, n, w->group, t0, nt, xsum);
        for (int t = 0; t < NT512; t++) {
            int tt = t < nt ? t : 0;
            if (w->bits == 4) {
                if (t < nt) byte_window_x16(x + (long)(t0 + t) * n, n, xq + (long)t * n);
                xs[t] = xq + (long)tt * n;
            } else {
                xs[t] = x + (long)(t0 + tt) * n;
            }
        }
#define AFF(NT, B) gemv512_affine_nt(w, xs, y, t0, NT, r0, r1, xsum, B)
        if (w->bits == 4) {
            switch (nt) { case 1: AFF(1, 4); break; case 2: AFF(2, 4); break; case 3: AFF(3, 4); break; default: AFF(4, 4); }
        } else {
            switch (nt) { case 1: AFF(1, 8); break; case 2: AFF(2, 8); break; case 3: AFF(3, 8); break; default: AFF(4, 8); }
        }
#undef AFF
    }
}

/* ---------------------------------------------------------------- dispatch */

mm_kernel mm_select_avx512(const weight *w, int T) {
    if (T >= GEMM_MIN_T) return w->packed && w->fmt == WF_BF16 ? gemm512_packed : gemm512;
    if (T > NT512) return NULL; /* 5..8 rows: the AVX2 wide kernels read the weights once */
    switch (w->fmt) {
    case WF_F32: return gemv512_f32;
    case WF_BF16: return gemv512_bf16;
    case WF_F16: return gemv512_f16;
    case WF_AFFINE:
        if ((w->bits == 4 || w->bits == 8) && w->group % 32 == 0 && w->cols % w->group == 0) return gemv512_affine;
        return NULL;
    case WF_MXFP4: return NULL;
    }
    return NULL;
}

const char *mm_kernel_name_avx512(mm_kernel k) {
    if (k == gemm512) return "avx512 gemm 12x32";
    if (k == gemm512_packed) return "avx512 gemm 12x32 packed bf16";
    if (k == gemv512_f32) return "avx512 gemv f32";
    if (k == gemv512_bf16) return "avx512 gemv bf16";
    if (k == gemv512_f16) return "avx512 gemv f16";
    if (k == gemv512_affine) return "avx512 gemv affine q4/q8";
    return NULL;
}
