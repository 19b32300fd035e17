/* backend/cpu/matmul_avx512dot.c: the fast precision's products on AVX-512 dot-product
 * instructions (fast.c says what each rounds), compiled with -mavx512bf16
 * -mavx512vnni besides the avx512 flags (Makefile, *_avx512dot.c) and called only
 * when cpu_has_avx512_bf16() / cpu_has_avx512_vnni():
 *  - bf16 GEMM (T >= MM_FAST_MIN_T): a 12 x 32 register tile of vdpbf16ps over a
 *    panel of 32 weight rows in pair layout (mm_bf16_panel: u32 [ceil(cols/2), 32],
 *    each u32 the bf16 pair W[r, 2k], W[r, 2k + 1]) against prepared bf16 rows, one
 *    32-bit pair of activations broadcast per row: two multiply-adds per lane and
 *    instruction, twice the float32 FMA rate. The panel is the weight's packed copy
 *    when it has one (weights packed at load), else packed per call.
 *  - affine weights at T >= MM_FAST_MIN_T: each panel dequantized, rounded to bf16
 *    pairs and run through the same tile.
 *  - with CELER_CPU_INT8=1, affine 4/8-bit products (any T): vpdpbusd of the code bytes (unsigned) against
 *    the prepared int8 activations (signed), 4 products per 32-bit lane, per 64 code
 *    bytes; each lane's int32 sum is scaled by d_block * s_group in float32. Up to 4
 *    weight rows and 4 activation rows at a time share their loads.
 *  - 4-bit affine decode (T < MM_FAST_MIN_T, MM_FAST_Q4DOT): the codes stay exact and
 *    meet bf16 activations in vdpbf16ps, 32 codes per instruction (q4dot). */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/panel512.h"
#include "backend/cpu/q4codes512.h"
#include "backend/cpu/scales512.h"
#include "tensor/dtype.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 32")

/* ------------------------------------------------------------------ bf16 GEMM */

/* c [mr, ldc] (first 32 columns) = x [mr, ldx u32 pairs] (first kp pairs) @ panel [kp, 32]. */
INLINE void dp_tile(int mr, long kp, const uint32_t *panel, const uint32_t *x, long ldx, float *c, long ldc) {
    __m512 acc[MM512_MR][2];
    UNROLL
    for (int i = 0; i < mr; i++) acc[i][0] = acc[i][1] = _mm512_setzero_ps();
    for (long k = 0; k < kp; k++) {
        const __m512i b0 = _mm512_load_si512(panel + k * 32), b1 = _mm512_load_si512(panel + k * 32 + 16);
        UNROLL
        for (int i = 0; i < mr; i++) {
            const __m512i a = _mm512_set1_epi32((int)x[(long)i * ldx + k]);
            acc[i][0] = _mm512_dpbf16_ps(acc[i][0], (__m512bh)a, (__m512bh)b0);
            acc[i][1] = _mm512_dpbf16_ps(acc[i][1], (__m512bh)a, (__m512bh)b1);
        }
    }
    UNROLL
    for (int i = 0; i < mr; i++) {
        _mm512_storeu_ps(c + (long)i * ldc, acc[i][0]);
        _mm512_storeu_ps(c + (long)i * ldc + 16, acc[i][1]);
    }
}

static void dp_tile_any(int mr, long kp, const uint32_t *panel, const uint32_t *x, long ldx, float *c, long ldc) {
    switch (mr) {
#define TILE_CASE(M) case M: dp_tile(M, kp, panel, x, ldx, c, ldc); break;
    TILE_CASE(1) TILE_CASE(2) TILE_CASE(3) TILE_CASE(4) TILE_CASE(5) TILE_CASE(6)
    TILE_CASE(7) TILE_CASE(8) TILE_CASE(9) TILE_CASE(10) TILE_CASE(11)
#undef TILE_CASE
    default: dp_tile(MM512_MR, kp, panel, x, ldx, c, ldc); break;
    }
}

/* x: prepared bf16 rows [T, cols rounded up to 2]. scratch: panel u32 [kp, 32] | edge [12, 32]. */
static void gemm_bf16dp(const weight *w, const float *xp, float *y, int T, long r0, long r1, float *scratch) {
    const long rows = (long)w->rows, kp = ((long)w->cols + 1) / 2;
    const uint32_t *x = (const uint32_t *)(const void *)xp;
    uint32_t *own = (uint32_t *)scratch;
    float *edge = scratch + ((kp * 32 + 15) & ~15L);
    for (long r = r0; r < r1; r += MM512_NR) {
        const long nr = r1 - r < MM512_NR ? r1 - r : MM512_NR;
        const uint32_t *panel = mm_bf16_panel(w, r, own);
        for (int t = 0; t < T; t += MM512_MR) {
            int mr = T - t < MM512_MR ? T - t : MM512_MR;
            float *c = y + (long)t * rows + r;
            if (nr == MM512_NR) {
                dp_tile_any(mr, kp, panel, x + (long)t * kp, kp, c, rows);
            } else {
                dp_tile_any(mr, kp, panel, x + (long)t * kp, kp, edge, MM512_NR);
                for (int i = 0; i < mr; i++) memcpy(c + (long)i * rows, edge + i * MM512_NR, (size_t)nr * sizeof(float));
            }
        }
    }
}

/* float32 -> bf16 bits in the low half of each lane (round to nearest even; the
 * weights are finite). */
INLINE __m512i bf16_bits(__m512 v) {
    __m512i u = _mm512_castps_si512(v);
    __m512i lsb = _mm512_and_si512(_mm512_srli_epi32(u, 16), _mm512_set1_epi32(1));
    return _mm512_srli_epi32(_mm512_add_epi32(u, _mm512_add_epi32(_mm512_set1_epi32(0x7fff), lsb)), 16);
}

/* pairs u32 [cols / 2, 32] for the 32 weight rows from r, straight from the codes (4- or
 * 8-bit, affine_pairs_ok): for each 32 columns of a row, the even and odd codes in
 * separate lanes (low and high nibble / byte of one byte / word), code * scale + bias
 * (one FMA, as the row dequantization), rounded to bf16 and joined into 16 pairs; 16
 * rows of those transposed into the panel. The same bits as dequantizing to float32,
 * transposing and rounding (the path it replaces), in one pass with no float staging. */
static void affine_pairs(const weight *w, long r, uint32_t *pairs) {
    const long K = (long)w->cols, G = w->group;
    const __m512i mask = _mm512_set1_epi32(w->bits == 4 ? 0xf : 0xff);
    for (long c0 = 0; c0 < K; c0 += 32) {
        const long g = c0 / G;
        for (int h = 0; h < 2; h++) {
            __m512i m[16];
            for (int i = 0; i < 16; i++) {
                __m512 sc, bi;
                const uint8_t *p = affine_row_at(w, r + 16 * h + i, g, c0, &sc, &bi);
                const __m512i v = w->bits == 4 ? _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p))
                                               : _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)p));
                const __m512i even = _mm512_and_si512(v, mask), odd = _mm512_srli_epi32(v, w->bits);
                const __m512 fe = _mm512_fmadd_ps(_mm512_cvtepi32_ps(even), sc, bi);
                const __m512 fo = _mm512_fmadd_ps(_mm512_cvtepi32_ps(odd), sc, bi);
                m[i] = _mm512_or_si512(bf16_bits(fe), _mm512_slli_epi32(bf16_bits(fo), 16));
            }
            transpose16(m);
            for (int k = 0; k < 16; k++) _mm512_store_si512(pairs + (c0 / 2 + k) * 32 + 16 * h, m[k]);
        }
    }
}

/* Affine weights (fast: dequantized, rounded to bf16): each panel of 32 rows is
 * dequantized by the shared packer into float32 [K, 32], then turned in place into
 * the pair layout u32 [kp, 32] (pair k is written below rows 2k and 2k + 1, which
 * were read first) and run through the vdpbf16ps tile.
 * scratch: panel [K, 32] | stage [8, K] | edge [12, 32] (as the exact GEMM's). */
static void gemm_affine_bf16dp(const weight *w, const float *xp, float *y, int T, long r0, long r1, float *scratch) {
    const long K = (long)w->cols, rows = (long)w->rows, kp = (K + 1) / 2;
    const uint32_t *x = (const uint32_t *)(const void *)xp;
    float *panel = scratch;
    float *stage = panel + ((K * MM512_NR + 15) & ~15L);
    float *edge = stage + ((8 * K + 15) & ~15L);
    uint32_t *pairs = (uint32_t *)panel;
    const int one_pass = affine_panel_ok(w);
    for (long r = r0; r < r1; r += MM512_NR) {
        const long nr = r1 - r < MM512_NR ? r1 - r : MM512_NR;
        if (one_pass && nr == MM512_NR) affine_pairs(w, r, pairs);
        else mm_pack_panel_avx2(w, r, nr, panel, MM512_NR, stage);
        for (long k = 0; k < kp && !(one_pass && nr == MM512_NR); k++) {
            const int odd = 2 * k + 1 < K;
            __m512i p[2];
            for (int h = 0; h < 2; h++) {
                const __m512i lo = bf16_bits(_mm512_load_ps(panel + 2 * k * 32 + 16 * h));
                const __m512i hi = odd ? bf16_bits(_mm512_load_ps(panel + (2 * k + 1) * 32 + 16 * h)) : _mm512_setzero_si512();
                p[h] = _mm512_or_si512(lo, _mm512_slli_epi32(hi, 16));
            }
            _mm512_store_si512(pairs + k * 32, p[0]);
            _mm512_store_si512(pairs + k * 32 + 16, p[1]);
        }
        for (int t = 0; t < T; t += MM512_MR) {
            int mr = T - t < MM512_MR ? T - t : MM512_MR;
            float *c = y + (long)t * rows + r;
            if (nr == MM512_NR) {
                dp_tile_any(mr, kp, pairs, x + (long)t * kp, kp, c, rows);
            } else {
                dp_tile_any(mr, kp, pairs, x + (long)t * kp, kp, edge, MM512_NR);
                for (int i = 0; i < mr; i++) memcpy(c + (long)i * rows, edge + i * MM512_NR, (size_t)nr * sizeof(float));
            }
        }
    }
}

/* ------------------------------------------------------------ Q8 (VNNI) products */

/* rb weight rows (r .. r + rb) against nt activation rows (t0 ..): BITS 4 or 8.
 * sexp [rb][lanes]: per code lane the scale of its group. */
INLINE void q8_block(const weight *w, const uint8_t *xp, long xstride, float *y, int t0, int nt, long r, int rb,
                     const float *sexp, long lanes, int bits) {
    const long n = (long)w->cols, row_bytes = n * bits / 8, nvec = (row_bytes + 63) / 64, ng = n / w->group;
    const long kq = (n + 127) & ~127L;
    const uint8_t *wr[4];
    const int8_t *q[4];
    const float *dexp[4], *gsum[4];
    UNROLL
    for (int i = 0; i < 4; i++) wr[i] = (const uint8_t *)w->data + (r + (i < rb ? i : 0)) * row_bytes;
    UNROLL
    for (int t = 0; t < 4; t++) {
        const float *d;
        mm_q8_row_parts(w, xp + (long)(t0 + (t < nt ? t : 0)) * xstride, &q[t], &dexp[t], &gsum[t], &d);
    }
    (void)kq;
    __m512 acc[4][4];
    UNROLL
    for (int i = 0; i < rb; i++)
        UNROLL
        for (int t = 0; t < nt; t++) acc[i][t] = _mm512_setzero_ps();
    const __m512i lo4 = _mm512_set1_epi8(0x0f);
    for (long v = 0; v < nvec; v++) {
        const long left = row_bytes - v * 64;
        const __mmask64 m = left >= 64 ? ~(__mmask64)0 : (((__mmask64)1 << left) - 1);
        __m512i c0[4], c1[4];
        __m512 s[4];
        UNROLL
        for (int i = 0; i < rb; i++) {
            const __m512i raw = _mm512_maskz_loadu_epi8(m, wr[i] + v * 64);
            if (bits == 4) {
                c0[i] = _mm512_and_si512(raw, lo4);
                c1[i] = _mm512_and_si512(_mm512_srli_epi16(raw, 4), lo4);
            } else {
                c0[i] = raw;
            }
            s[i] = _mm512_loadu_ps(sexp + (long)i * lanes + v * 16);
        }
        UNROLL
        for (int t = 0; t < nt; t++) {
            const __m512 dv = _mm512_loadu_ps(dexp[t] + v * 16);
            __m512i a0, a1 = _mm512_setzero_si512();
            if (bits == 4) {
                a0 = _mm512_loadu_si512(q[t] + v * 128);
                a1 = _mm512_loadu_si512(q[t] + v * 128 + 64);
            } else {
                a0 = _mm512_loadu_si512(q[t] + v * 64);
            }
            UNROLL
            for (int i = 0; i < rb; i++) {
                __m512i is = _mm512_dpbusd_epi32(_mm512_setzero_si512(), c0[i], a0);
                if (bits == 4) is = _mm512_dpbusd_epi32(is, c1[i], a1);
                acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(dv, s[i]), acc[i][t]);
            }
        }
    }
    UNROLL
    for (int i = 0; i < rb; i++)
        UNROLL
        for (int t = 0; t < nt; t++) {
            float bsum = 0;
            for (long g = 0; g < ng; g++) bsum += affine_sc(w->biases, w->stype, (r + i) * ng + g) * gsum[t][g];
            y[(long)(t0 + t) * w->rows + r + i] = _mm512_reduce_add_ps(acc[i][t]) + bsum;
        }
}

#define Q8_NT(RB, BITS)                                                                         \
    switch (nt) {                                                                               \
    case 1: q8_block(w, xp, xs, y, t0, 1, r, RB, sexp, lanes, BITS); break;                     \
    case 2: q8_block(w, xp, xs, y, t0, 2, r, RB, sexp, lanes, BITS); break;                     \
    case 3: q8_block(w, xp, xs, y, t0, 3, r, RB, sexp, lanes, BITS); break;                     \
    default: q8_block(w, xp, xs, y, t0, 4, r, RB, sexp, lanes, BITS); break;                    \
    }
#define Q8_RB(BITS)                                                                             \
    switch (rb) {                                                                               \
    case 1: Q8_NT(1, BITS) break;                                                               \
    case 2: Q8_NT(2, BITS) break;                                                               \
    case 3: Q8_NT(3, BITS) break;                                                               \
    default: Q8_NT(4, BITS) break;                                                              \
    }

/* x: prepared Q8 rows. scratch: sexp [4, lanes]. */
static void q8_vnni(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch) {
    const long n = (long)w->cols, kq = (n + 127) & ~127L, lanes = kq * w->bits / 32, ng = n / w->group;
    const long lpg = (long)w->group * w->bits / 32; /* code lanes per group */
    const uint8_t *xp = (const uint8_t *)(const void *)x;
    const long xs = mm_q8_row_bytes(w);
    float *sexp = scratch;
    for (long r = r0; r < r1; r += 4) {
        const int rb = r1 - r < 4 ? (int)(r1 - r) : 4;
        for (int i = 0; i < rb; i++) {
            float *se = sexp + (long)i * lanes;
            for (long g = 0; g < ng; g++) {
                const __m512 sv = _mm512_set1_ps(affine_sc(w->scales, w->stype, (r + i) * ng + g));
                long l = g * lpg;
                for (; l + 16 <= (g + 1) * lpg; l += 16) _mm512_storeu_ps(se + l, sv);
                for (; l < (g + 1) * lpg; l++) se[l] = affine_sc(w->scales, w->stype, (r + i) * ng + g);
            }
            for (long l = ng * lpg; l < lanes; l++) se[l] = 0; /* padding lanes: codes and activations are zero */
        }
        for (int t0 = 0; t0 < T; t0 += 4) {
            const int nt = T - t0 < 4 ? T - t0 : 4;
            if (w->bits == 4) Q8_RB(4)
            else Q8_RB(8)
        }
    }
}

/* ------------------------------------------------ 4-bit affine GEMV, bf16 dot
 * A code q becomes the bf16 value 128 + q in one or two integer operations: bf16
 * 0x4300 is 128, whose unit in the last place is 1, so 0x4300 | q is 128 + q.
 * vdpbf16ps multiplies such pairs by the prepared bf16 activations x~ (each product
 * exact in float32) and sums in float32, so per group g
 *   D_g = sum_j (128 + q_j) x~_j,   X_g = sum_j x~_j,
 *   y = sum_g s_g D_g + sum_g (b_g - 128 s_g) X_g = sum_j (s_g q_j + b_g) x~_j:
 * the exact weights against the rounded activations.
 * The codes are read as q4codes512.h lays them out (nibble k of every word of a
 * 64-byte load, or'ed with 0x4300, is a vector of 32 bf16 values: a shift and a
 * ternary-logic op, no shuffles); each 32-bit lane stays inside one group (8 | group)
 * and is scaled by that group's scale (a permute of the 16 scales in hand). */

/* x~ [n] (bf16) into o [ceil(n / 128) * 128] in the chunk order above, zero past n. */
static void q4dot_order(const uint16_t *x, long n, uint16_t *o) {
    for (long c = 0; c < n; c += 128)
        for (int k = 0; k < 4; k++)
            for (int i = 0; i < 32; i++) o[c + 32 * k + i] = c + 4 * i + k < n ? x[c + 4 * i + k] : 0;
}

#define Q4_BLOCK 64 /* weight rows a pass of q4dot takes before the next 4 rows of x */

/* The chunk's 128 codes as four vectors of bf16 128 + q (nibble k of every word). */
INLINE void q4_unpack(const q4k *k, __m512i v, __m512i q[4]) {
    q[0] = _mm512_ternarylogic_epi32(v, k->lo4, k->b128, 0xea); /* (v & lo4) | b128 */
    q[1] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 4), k->lo4, k->b128, 0xea);
    q[2] = _mm512_ternarylogic_epi32(_mm512_srli_epi16(v, 8), k->lo4, k->b128, 0xea);
    q[3] = _mm512_or_si512(_mm512_srli_epi16(v, 12), k->b128);
}

/* nt <= 4 activation rows xo (q4dot_order) with their group sums xsum[t] [ng]. */
INLINE void q4dot_nt(const weight *w, const uint16_t *const *xo, const float *const *xsum, float *y, int t0, int nt,
                     long r0, long r1) {
    const long n = (long)w->cols, G = w->group, ng = n / G, row_bytes = n / 2;
    const q4k k = q4k_of(w);
    for (long r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + r * row_bytes;
        /* the scales and biases are two more streams beside the codes; asking for
         * them a few rows ahead keeps their loads off each row's critical path */
        const long ahead = (r + 8) * ng * (w->stype == SC_F32 ? 4 : 2);
        _mm_prefetch((const char *)w->scales + ahead, _MM_HINT_T0);
        _mm_prefetch((const char *)w->biases + ahead, _MM_HINT_T0);
        __m512 a0[4], a1[4], a2[4]; /* code terms (two chains) and bias terms */
        UNROLL
        for (int t = 0; t < nt; t++) a0[t] = a1[t] = a2[t] = _mm512_setzero_ps();
        for (long g0 = 0; g0 < ng; g0 += 16) {
            const __mmask16 gm = q4_group_mask(ng, g0);
            const __m512 sv = scale16(w->scales, w->stype, r * ng + g0, gm);
            const __m512 cv = _mm512_fnmadd_ps(_mm512_set1_ps(128.0f), sv, scale16(w->biases, w->stype, r * ng + g0, gm));
            UNROLL
            for (int t = 0; t < nt; t++) a2[t] = _mm512_fmadd_ps(cv, _mm512_maskz_loadu_ps(gm, xsum[t] + g0), a2[t]);
            const long c1 = (g0 + 16) * G < n ? (g0 + 16) * G : n;
            for (long c = g0 * G; c < c1; c += 128) {
                _mm_prefetch((const char *)row + c / 2 + Q4_PF, _MM_HINT_T0);
                __m512i q[4];
                q4_unpack(&k, q4_load(row, c, n), q);
                const __m512 s = _mm512_permutexvar_ps(q4_lane_groups(&k, c, g0, G), sv);
                UNROLL
                for (int t = 0; t < nt; t++) {
                    const uint16_t *x = xo[t] + c;
                    __m512 d0 = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)q[0], (__m512bh)_mm512_loadu_si512(x));
                    __m512 d1 = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)q[1], (__m512bh)_mm512_loadu_si512(x + 32));
                    d0 = _mm512_dpbf16_ps(d0, (__m512bh)q[2], (__m512bh)_mm512_loadu_si512(x + 64));
                    d1 = _mm512_dpbf16_ps(d1, (__m512bh)q[3], (__m512bh)_mm512_loadu_si512(x + 96));
                    a0[t] = _mm512_fmadd_ps(d0, s, a0[t]);
                    a1[t] = _mm512_fmadd_ps(d1, s, a1[t]);
                }
            }
        }
        UNROLL
        for (int t = 0; t < nt; t++)
            y[(long)(t0 + t) * w->rows + r] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0[t], a1[t]), a2[t]));
    }
}

/* q4dot_nt for one activation row over four weight-row streams at once (rows r,
 * r + q, r + 2q, r + 3q of the task's range), the activation loads shared: one row at a
 * time kept too few reads in flight (as the float GEMVs' GEMV_STREAMS). Each row's sums
 * are q4dot_nt's, in the same order. Measured (thirteenth session, Zen 5, 2 threads):
 * bench_mm q4 fast decode 33.0-33.2 -> 33.6-35.8 GB/s, qwen3-0.6b q4 tg128 80.3 / 73.9 /
 * 75.4 -> 84.5 / 85.9 / 79.0 tok/s (three alternations). */
#define Q4_STREAMS 4
INLINE void q4dot_streams(const weight *w, const uint16_t *xo, const float *xsum, float *y, long r0, long r1) {
    const long n = (long)w->cols, G = w->group, ng = n / G, row_bytes = n / 2, q = (r1 - r0) / Q4_STREAMS;
    const q4k kk = q4k_of(w);
    const long sbytes = w->stype == SC_F32 ? 4 : 2;
    for (long i = 0; i < q; i++) {
        long r[Q4_STREAMS];
        const uint8_t *row[Q4_STREAMS];
        __m512 a0[Q4_STREAMS], a1[Q4_STREAMS], a2[Q4_STREAMS];
        UNROLL
        for (int k = 0; k < Q4_STREAMS; k++) {
            r[k] = r0 + k * q + i;
            row[k] = (const uint8_t *)w->data + r[k] * row_bytes;
            _mm_prefetch((const char *)w->scales + (r[k] + 8) * ng * sbytes, _MM_HINT_T0);
            _mm_prefetch((const char *)w->biases + (r[k] + 8) * ng * sbytes, _MM_HINT_T0);
            a0[k] = a1[k] = a2[k] = _mm512_setzero_ps();
        }
        for (long g0 = 0; g0 < ng; g0 += 16) {
            const __mmask16 gm = q4_group_mask(ng, g0);
            const __m512 xs = _mm512_maskz_loadu_ps(gm, xsum + g0);
            __m512 sv[Q4_STREAMS];
            UNROLL
            for (int k = 0; k < Q4_STREAMS; k++) {
                sv[k] = scale16(w->scales, w->stype, r[k] * ng + g0, gm);
                const __m512 cv = _mm512_fnmadd_ps(_mm512_set1_ps(128.0f), sv[k], scale16(w->biases, w->stype, r[k] * ng + g0, gm));
                a2[k] = _mm512_fmadd_ps(cv, xs, a2[k]);
            }
            const long c1 = (g0 + 16) * G < n ? (g0 + 16) * G : n;
            for (long c = g0 * G; c < c1; c += 128) {
                const __m512bh x0 = (__m512bh)_mm512_loadu_si512(xo + c), x1 = (__m512bh)_mm512_loadu_si512(xo + c + 32);
                const __m512bh x2 = (__m512bh)_mm512_loadu_si512(xo + c + 64), x3 = (__m512bh)_mm512_loadu_si512(xo + c + 96);
                const __m512i idx = q4_lane_groups(&kk, c, g0, G);
                UNROLL
                for (int k = 0; k < Q4_STREAMS; k++) {
                    _mm_prefetch((const char *)row[k] + c / 2 + Q4_PF, _MM_HINT_T0);
                    __m512i cq[4];
                    q4_unpack(&kk, q4_load(row[k], c, n), cq);
                    const __m512 sc = _mm512_permutexvar_ps(idx, sv[k]);
                    __m512 d0 = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)cq[0], x0);
                    __m512 d1 = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)cq[1], x1);
                    d0 = _mm512_dpbf16_ps(d0, (__m512bh)cq[2], x2);
                    d1 = _mm512_dpbf16_ps(d1, (__m512bh)cq[3], x3);
                    a0[k] = _mm512_fmadd_ps(d0, sc, a0[k]);
                    a1[k] = _mm512_fmadd_ps(d1, sc, a1[k]);
                }
            }
        }
        UNROLL
        for (int k = 0; k < Q4_STREAMS; k++) y[r[k]] = _mm512_reduce_add_ps(_mm512_add_ps(_mm512_add_ps(a0[k], a1[k]), a2[k]));
    }
    if (r0 + Q4_STREAMS * q < r1) q4dot_nt(w, &xo, &xsum, y, 0, 1, r0 + Q4_STREAMS * q, r1);
}

/* q4dot_nt over two weight rows a pass, for products of 5-8 activation rows (several
 * passes over each Q4_BLOCK of weight rows): each activation load serves both weight
 * rows, and each weight row keeps one accumulator a token (the two dot chains added
 * before the scale, the bias terms in the same accumulator), so 2 x 4 of them fit the
 * 32 registers beside the codes. A lone last row pairs with itself, so the sums do not
 * depend on where a task's rows start. Measured (thirteenth session, Zen 5, quiet;
 * docs/benchmarks/cpu-core.md): per core in cache (bench_mm -f q4 -P fast -c -t 1, one
 * layer of qwen3-0.6b) T=2 156-158 -> 178-185 GFLOP/s, T=4 197-202 -> 227-240, T=8
 * 190-205 -> 235-239; end to end (celer bench -npl, 2 threads) 8 sequences ahead in
 * each of five alternations (+1-5% where both arms ran in the VM's same state), but 2 sequences -14 to -18% and 4 sequences -1 to -4%: with
 * one pass the weights stream from memory, and there pairs lose (one sequence: 23 ->
 * 15 GB/s per core in bench_mm). So products of 1-4 rows keep q4dot_nt. */
INLINE void q4dot_pair_nt(const weight *w, const uint16_t *const *xo, const float *const *xsum, float *y, int t0, int nt,
                      long r0, long r1) {
    const long n = (long)w->cols, G = w->group, ng = n / G, row_bytes = n / 2;
    const q4k k = q4k_of(w);
    for (long r = r0; r < r1; r += 2) {
        const long r2 = r + 1 < r1 ? r + 1 : r; /* a lone last row pairs with itself: the same sums in any split */
        const uint8_t *ra = (const uint8_t *)w->data + r * row_bytes, *rb = (const uint8_t *)w->data + r2 * row_bytes;
        const long ahead = (r + 8) * ng * (w->stype == SC_F32 ? 4 : 2);
        _mm_prefetch((const char *)w->scales + ahead, _MM_HINT_T0);
        _mm_prefetch((const char *)w->biases + ahead, _MM_HINT_T0);
        __m512 aa[4], ab[4];
        UNROLL
        for (int t = 0; t < nt; t++) aa[t] = ab[t] = _mm512_setzero_ps();
        for (long g0 = 0; g0 < ng; g0 += 16) {
            const __mmask16 gm = q4_group_mask(ng, g0);
            const __m512 sva = scale16(w->scales, w->stype, r * ng + g0, gm);
            const __m512 svb = scale16(w->scales, w->stype, r2 * ng + g0, gm);
            const __m512 cva = _mm512_fnmadd_ps(_mm512_set1_ps(128.0f), sva, scale16(w->biases, w->stype, r * ng + g0, gm));
            const __m512 cvb = _mm512_fnmadd_ps(_mm512_set1_ps(128.0f), svb, scale16(w->biases, w->stype, r2 * ng + g0, gm));
            UNROLL
            for (int t = 0; t < nt; t++) {
                const __m512 xs = _mm512_maskz_loadu_ps(gm, xsum[t] + g0);
                aa[t] = _mm512_fmadd_ps(cva, xs, aa[t]);
                ab[t] = _mm512_fmadd_ps(cvb, xs, ab[t]);
            }
            const long c1 = (g0 + 16) * G < n ? (g0 + 16) * G : n;
            for (long c = g0 * G; c < c1; c += 128) {
                _mm_prefetch((const char *)ra + c / 2 + Q4_PF, _MM_HINT_T0);
                _mm_prefetch((const char *)rb + c / 2 + Q4_PF, _MM_HINT_T0);
                __m512i qa[4], qb[4];
                q4_unpack(&k, q4_load(ra, c, n), qa);
                q4_unpack(&k, q4_load(rb, c, n), qb);
                const __m512i idx = q4_lane_groups(&k, c, g0, G);
                const __m512 sa = _mm512_permutexvar_ps(idx, sva), sb = _mm512_permutexvar_ps(idx, svb);
                UNROLL
                for (int t = 0; t < nt; t++) {
                    const uint16_t *x = xo[t] + c;
                    const __m512bh x0 = (__m512bh)_mm512_loadu_si512(x), x1 = (__m512bh)_mm512_loadu_si512(x + 32);
                    const __m512bh x2 = (__m512bh)_mm512_loadu_si512(x + 64), x3 = (__m512bh)_mm512_loadu_si512(x + 96);
                    __m512 da0 = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)qa[0], x0);
                    __m512 db0 = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)qb[0], x0);
                    __m512 da1 = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)qa[1], x1);
                    __m512 db1 = _mm512_dpbf16_ps(_mm512_setzero_ps(), (__m512bh)qb[1], x1);
                    da0 = _mm512_dpbf16_ps(da0, (__m512bh)qa[2], x2);
                    db0 = _mm512_dpbf16_ps(db0, (__m512bh)qb[2], x2);
                    da1 = _mm512_dpbf16_ps(da1, (__m512bh)qa[3], x3);
                    db1 = _mm512_dpbf16_ps(db1, (__m512bh)qb[3], x3);
                    aa[t] = _mm512_fmadd_ps(_mm512_add_ps(da0, da1), sa, aa[t]);
                    ab[t] = _mm512_fmadd_ps(_mm512_add_ps(db0, db1), sb, ab[t]);
                }
            }
        }
        UNROLL
        for (int t = 0; t < nt; t++) {
            y[(long)(t0 + t) * w->rows + r] = _mm512_reduce_add_ps(aa[t]);
            y[(long)(t0 + t) * w->rows + r2] = _mm512_reduce_add_ps(ab[t]);
        }
    }
}

/* The prepared row (MM_PREP_Q4DOT), made once per product by cpu_matmul's prep step
 * rather than by every task of it (8 tasks a product re-ordered the same activations
 * 8 times: ~10% of a q4 decode token): float xsum [ngp] (each group's sum of the
 * rounded activations, ng rounded up to 16) | u16 xo [nc] (q4dot_order, cols rounded
 * up to 128) | u16 xb [cols rounded up to 32] (the rounded row in column order). */
static long q4dot_ngp(const weight *w) { return ((long)w->cols / w->group + 15) & ~15L; }
static long q4dot_nc(const weight *w) { return ((long)w->cols + 127) & ~127L; }

long mm_q4dot_row_bytes(const weight *w) {
    return q4dot_ngp(w) * 4 + q4dot_nc(w) * 2 + (((long)w->cols + 31) & ~31L) * 2; /* whole cache lines */
}

void mm_q4dot_prep_row(const weight *w, const float *x, void *out) {
    const long n = (long)w->cols, G = w->group, ng = n / G, ngp = q4dot_ngp(w), nc = q4dot_nc(w);
    float *xsum = out;
    uint16_t *xo = (uint16_t *)(xsum + ngp), *xb = xo + nc;
    for (long j = 0; j < n; j++) xb[j] = f32_to_bf16(x[j]);
    for (long j = n; j < ((n + 31) & ~31L); j++) xb[j] = 0;
    for (long g = 0; g < ngp; g++) {
        __m512 s = _mm512_setzero_ps();
        for (long c = g * G; g < ng && c < (g + 1) * G; c += 16)
            s = _mm512_add_ps(s, _mm512_castsi512_ps(_mm512_slli_epi32(
                                     _mm512_cvtepu16_epi32(_mm256_loadu_si256((const __m256i *)(xb + c))), 16)));
        xsum[g] = _mm512_reduce_add_ps(s);
    }
    q4dot_order(xb, n, xo);
}

/* x: prepared rows [T, mm_q4dot_row_bytes] (MM_PREP_Q4DOT). */
static void q4dot(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch) {
    (void)scratch;
    const long stride = mm_q4dot_row_bytes(w) / 4, ngp = q4dot_ngp(w);
    /* more than 4 rows of x take several passes over the weight rows: over blocks of
     * Q4_BLOCK rows, so the passes after the first find them in cache (a task of the
     * LM head is ~10 MB: they came from memory again) */
    const long blk = T > 4 ? Q4_BLOCK : r1 - r0; /* one pass: one block */
    for (long rb = r0; rb < r1; rb += blk) {
        const long re = r1 - rb < blk ? r1 : rb + blk;
        for (int t0 = 0; t0 < T; t0 += 4) {
            const int nt = T - t0 < 4 ? T - t0 : 4;
            const uint16_t *xb[4];
            const float *xs[4];
            for (int t = 0; t < 4; t++) {
                xs[t] = x + (long)(t0 + (t < nt ? t : 0)) * stride;
                xb[t] = (const uint16_t *)(xs[t] + ngp);
            }
            if (T == 1) {
                q4dot_streams(w, xb[0], xs[0], y, rb, re);
                continue;
            }
            if (T <= 4) { /* one pass: the weights stream from memory, where pairs lose */
                switch (nt) {
                case 1: q4dot_nt(w, xb, xs, y, t0, 1, rb, re); break;
                case 2: q4dot_nt(w, xb, xs, y, t0, 2, rb, re); break;
                case 3: q4dot_nt(w, xb, xs, y, t0, 3, rb, re); break;
                default: q4dot_nt(w, xb, xs, y, t0, 4, rb, re); break;
                }
                continue;
            }
            switch (nt) {
            case 1: q4dot_pair_nt(w, xb, xs, y, t0, 1, rb, re); break;
            case 2: q4dot_pair_nt(w, xb, xs, y, t0, 2, rb, re); break;
            case 3: q4dot_pair_nt(w, xb, xs, y, t0, 3, rb, re); break;
            default: q4dot_pair_nt(w, xb, xs, y, t0, 4, rb, re); break;
            }
        }
    }
}

/* ---------------------------------------------------------------- dispatch */

mm_kernel mm_fast_select_avx512dot(const weight *w, int T, int kind) {
    (void)w; (void)T; /* mm_fast_kind checked the shape */
    if (kind == MM_FAST_BF16 && cpu_has_avx512_bf16()) return gemm_bf16dp;
    if (kind == MM_FAST_QBF16 && cpu_has_avx512_bf16()) return gemm_affine_bf16dp;
    if (kind == MM_FAST_Q8 && cpu_has_avx512_vnni()) return q8_vnni;
    if (kind == MM_FAST_Q4DOT && cpu_has_avx512_bf16()) return q4dot;
    if (kind == MM_FAST_Q4W16 && cpu_has_avx512_vnni()) return mm_q4w16;
    if (kind == MM_FAST_Q4R16 && cpu_has_avx512_vnni() && w->interleaved) return mm_q4r16;
    return NULL;
}

const char *mm_kernel_name_avx512dot(mm_kernel k) {
    if (k == gemm_bf16dp) return "avx512 gemm bf16 vdpbf16ps 12x32 (fast)";
    if (k == q8_vnni) return "avx512 q8 vpdpbusd (fast)";
    if (k == gemm_affine_bf16dp) return "avx512 gemm affine->bf16 vdpbf16ps 12x32 (fast)";
    if (k == q4dot) return "avx512 gemv q4 vdpbf16ps (fast)";
    if (k == mm_q4w16) return "avx512 gemv q4 vpdpwssd int16 (fast)";
    if (k == mm_q4r16) return "avx512 gemv q4 vpdpwssd int16, rows x16 (fast)";
    return NULL;
}
