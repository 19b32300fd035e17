/* backend/cpu/q4r16_avx512dot.c: the fast precision's 4-bit affine decode products
 * (1-8 activation rows) over weights interleaved by 16 rows at load (pack.c), on
 * 16-bit integer dot products (AVX512_VNNI vpdpwssd). Same rounding as q4w16 (each
 * 128-column chunk of an activation row on the int16 grid of its largest value; the
 * codes, scales and biases exact), so the same portable reference.
 *
 * Why another layout: in q4w16 a vector's lanes are columns of one weight row, so a
 * chunk's integer sums must be converted and scaled before the next chunk (its lanes
 * belong to other groups): 3 float operations per 4 vpdpwssd, and one horizontal
 * reduction per weight row and activation row at the end. Here a vector's lanes are
 * 16 weight rows: lane i of the 32-bit word k of a 64-byte load holds row i's columns
 * 8u + k and 8u + k + 4 after a shift and a mask, and the activation pair (x_k,
 * x_{k+4}) is one broadcast 32-bit word (the prepared row stores each 8 columns as
 * 0, 4, 1, 5, 2, 6, 3, 7). So a whole group (32-128 columns) sums in int32 lanes
 * (|sum| <= 128 x 15 x 32767 < 2^31) before one conversion, one scale and one bias
 * FMA per group and activation row, and the 16 results are the lanes: no reductions.
 * Per 8 columns, 16 weight rows and activation row: four vpdpwssd (each with its
 * broadcast from memory); per 8 columns and 16 rows, the codes' unpacking (7
 * operations) is shared by all activation rows. */
#include <immintrin.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/scales512.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 32")

/* Block b (rows 16 b ..) against NT prepared activation rows xp (stride xs bytes);
 * rows [lo, hi) of the block's 16 stored into y [.., rows]. */
INLINE void r16_block(const weight *w, const uint8_t *xp, long xs, float *y, int NT, int A, long b, int lo, int hi) {
    const long n = (long)w->cols, G = w->group, ng = n / G, upg = G / 8;
    const float *xsum[8], *d[8];
    const int32_t *xw[8]; /* the int16 activations as words: 8 columns = 4 words */
    UNROLL
    for (int t = 0; t < NT; t++) {
        const int16_t *xq;
        mm_q4w16_row_parts(w, xp + (long)t * xs, &xsum[t], &d[t], &xq);
        xw[t] = (const int32_t *)(const void *)xq;
    }
    const uint32_t *codes;
    const void *sc, *bi;
    mm_q4r16_block_parts(w, b, &codes, &sc, &bi);
    const __m512i m4 = _mm512_set1_epi32(0x000F000F);
    __m512 acc[8];
    UNROLL
    for (int t = 0; t < NT; t++) acc[t] = _mm512_setzero_ps();
    for (long g = 0; g < ng; g++) {
        __m512i is[8][4]; /* A independent sums per activation row: vpdpwssd's latency (5 cycles) */
        UNROLL
        for (int t = 0; t < NT; t++)
            UNROLL
            for (int a = 0; a < A; a++) is[t][a] = _mm512_setzero_si512();
        for (long u = g * upg; u < (g + 1) * upg; u++) {
            const __m512i v = _mm512_load_si512(codes + u * 16);
            _mm_prefetch((const char *)(codes + u * 16) + 1024, _MM_HINT_T0);
            const __m512i q0 = _mm512_and_si512(v, m4), q1 = _mm512_and_si512(_mm512_srli_epi32(v, 4), m4);
            const __m512i q2 = _mm512_and_si512(_mm512_srli_epi32(v, 8), m4), q3 = _mm512_and_si512(_mm512_srli_epi32(v, 12), m4);
            UNROLL
            for (int t = 0; t < NT; t++) {
                const int32_t *x4 = xw[t] + u * 4;
                is[t][0] = _mm512_dpwssd_epi32(is[t][0], q0, _mm512_set1_epi32(x4[0]));
                is[t][1 % A] = _mm512_dpwssd_epi32(is[t][1 % A], q1, _mm512_set1_epi32(x4[1]));
                is[t][2 % A] = _mm512_dpwssd_epi32(is[t][2 % A], q2, _mm512_set1_epi32(x4[2]));
                is[t][3 % A] = _mm512_dpwssd_epi32(is[t][3 % A], q3, _mm512_set1_epi32(x4[3]));
            }
        }
        const __m512 s = scale16(sc, w->stype, g * 16, 0xffff), bv = scale16(bi, w->stype, g * 16, 0xffff);
        const long chunk = g * G / 128;
        UNROLL
        for (int t = 0; t < NT; t++) {
            __m512i it = is[t][0];
            UNROLL
            for (int a = 1; a < A; a++) it = _mm512_add_epi32(it, is[t][a]);
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(it), _mm512_mul_ps(s, _mm512_set1_ps(d[t][chunk])), acc[t]);
            acc[t] = _mm512_fmadd_ps(bv, _mm512_set1_ps(xsum[t][g]), acc[t]);
        }
    }
    const __mmask16 keep = (__mmask16)(((1u << hi) - 1) & ~((1u << lo) - 1));
    UNROLL
    for (int t = 0; t < NT; t++) _mm512_mask_storeu_ps(y + (long)t * w->rows + 16 * b, keep, acc[t]);
}

/* One instance per activation row count, so each keeps its accumulators in registers;
 * A integer sums per row so that enough vpdpwssd chains run at once (NT x A >= 8). */
#define R16_FN(NT, A)                                                                                             \
    static void r16_##NT(const weight *w, const uint8_t *xp, long xs, float *y, long b, int lo, int hi) {        \
        r16_block(w, xp, xs, y, NT, A, b, lo, hi);                                                               \
    }
R16_FN(1, 4) R16_FN(2, 4) R16_FN(3, 2) R16_FN(4, 2) R16_FN(5, 2) R16_FN(6, 2) R16_FN(7, 2) R16_FN(8, 2)

typedef void r16_fn(const weight *w, const uint8_t *xp, long xs, float *y, long b, int lo, int hi);
static r16_fn *const r16_fns[8] = {r16_1, r16_2, r16_3, r16_4, r16_5, r16_6, r16_7, r16_8};

/* x: prepared rows [T, mm_q4w16_row_bytes] (MM_PREP_Q4R16), T <= 8; rows [r0, r1). A
 * row's arithmetic is its lane's in its block whatever the range, so a split of the
 * rows does not change a bit. */
void mm_q4r16(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch) {
    (void)scratch;
    const uint8_t *xp = (const uint8_t *)(const void *)x;
    const long xs = mm_q4w16_row_bytes(w);
    r16_fn *const f = r16_fns[(T < 1 ? 1 : T > 8 ? 8 : T) - 1];
    for (long b = r0 / 16; b * 16 < r1; b++) {
        const long b0 = b * 16;
        const int lo = r0 > b0 ? (int)(r0 - b0) : 0, hi = r1 < b0 + 16 ? (int)(r1 - b0) : 16;
        f(w, xp, xs, y, b, lo, hi);
    }
}
