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
 *    weight rows and 4 activation rows at a time share their loads. */
#include <immintrin.h>
#include <string.h>

#include "backend/cpu/cpu.h"
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
    for (long r = r0; r < r1; r += MM512_NR) {
        const long nr = r1 - r < MM512_NR ? r1 - r : MM512_NR;
        mm_pack_panel_avx2(w, r, nr, panel, MM512_NR, stage);
        for (long k = 0; k < kp; k++) {
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

INLINE float sc1(const void *p, scale_type st, long i) {
    switch (st) {
    case SC_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    case SC_F16: return f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

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
            for (long g = 0; g < ng; g++) bsum += sc1(w->biases, w->stype, (r + i) * ng + g) * gsum[t][g];
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
                const __m512 sv = _mm512_set1_ps(sc1(w->scales, w->stype, (r + i) * ng + g));
                long l = g * lpg;
                for (; l + 16 <= (g + 1) * lpg; l += 16) _mm512_storeu_ps(se + l, sv);
                for (; l < (g + 1) * lpg; l++) se[l] = sc1(w->scales, w->stype, (r + i) * ng + g);
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

/* ---------------------------------------------------------------- dispatch */

mm_kernel mm_fast_select_avx512dot(const weight *w, int T, int kind) {
    (void)w; (void)T; /* mm_fast_kind checked the shape */
    if (kind == MM_FAST_BF16 && cpu_has_avx512_bf16()) return gemm_bf16dp;
    if (kind == MM_FAST_QBF16 && cpu_has_avx512_bf16()) return gemm_affine_bf16dp;
    if (kind == MM_FAST_Q8 && cpu_has_avx512_vnni()) return q8_vnni;
    return NULL;
}

const char *mm_kernel_name_avx512dot(mm_kernel k) {
    if (k == gemm_bf16dp) return "avx512 gemm bf16 vdpbf16ps 12x32 (fast)";
    if (k == q8_vnni) return "avx512 q8 vpdpbusd (fast)";
    if (k == gemm_affine_bf16dp) return "avx512 gemm affine->bf16 vdpbf16ps 12x32 (fast)";
    return NULL;
}
