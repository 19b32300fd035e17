/* backend/cpu/q4w16_avx512dot.c: the fast precision's 4-bit affine decode products
 * (1-8 activation rows) on 16-bit integer dot products (AVX512_VNNI vpdpwssd), for
 * processors where vdpbf16ps is slow: on the Sapphire Rapids VM of the twenty-first
 * session vpdpwssd ran 5.7 G instructions/s on one core and vdpbf16ps 1.3 G (32
 * multiply-adds each), so q4dot (matmul_avx512dot.c) was bound by its dot products.
 *
 * Rounding: each 128-column chunk of an activation row is put on the int16 grid of its
 * own largest value, x~_j = d_c round(x_j / d_c) with d_c = max_chunk |x| / 32767 (the
 * step is 2^-15 of the chunk's largest value, finer than bf16's rounding of that
 * value). The codes, scales and biases stay exact:
 *   y = sum_c sum_lanes s_g d_c (sum_j q_j x^_j) + sum_g b_g X_g,  X_g = sum_{j in g} x~_j
 * with x^ the int16 values; the integer sums are exact (|sum| <= 4 x 2 x 15 x 32767 a
 * lane and chunk). So the result is the exact weights against x~, as the portable
 * reference computes it (mm_portable on MM_PREP_ROUND16 rows, fast.c).
 * Per chunk, row and activation row: four vpdpwssd, a conversion, a multiply (s d) and
 * an FMA; the codes are unpacked once per chunk and row for all activation rows (q4codes512.h's layout; the
 * activations are stored in its order). All activation rows go in one pass over the
 * weights (up to 8, 2 weight rows at a time; 1 activation row: 4 weight rows). */
#include <immintrin.h>
#include <math.h>
#include <pthread.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/q4codes512.h"
#include "backend/cpu/scales512.h"
#include "base/settings.h"

#define INLINE static inline __attribute__((always_inline))
#define UNROLL _Pragma("GCC unroll 32")

/* ---- the prepared row (MM_PREP_Q4W16) ------------------------------------------
 * float xsum [ngp]   X_g, the sum of group g's rounded activations (ng rounded up to 16)
 * float d    [nchp]  each chunk's step d_c (chunks rounded up to 16)
 * int16 xq   [nc]    round(x / d_c), in q4codes512.h's order per chunk, zero past cols */
static long w16_ngp(const weight *w) { return ((long)w->cols / w->group + 15) & ~15L; }
static long w16_nc(const weight *w) { return ((long)w->cols + 127) & ~127L; }
static long w16_nchp(const weight *w) { return (w16_nc(w) / 128 + 15) & ~15L; }

long mm_q4w16_row_bytes(const weight *w) {
    return (w16_ngp(w) * 4 + w16_nchp(w) * 4 + w16_nc(w) * 2 + 63) & ~63L; /* whole cache lines */
}

void mm_q4w16_row_parts(const weight *w, const void *row, const float **xsum, const float **d, const int16_t **xq) {
    *xsum = row;
    *d = *xsum + w16_ngp(w);
    *xq = (const int16_t *)(*d + w16_nchp(w));
}

/* The 128 int16 values of a chunk from its 8 vectors of int32 (column order) into
 * q4codes512.h's order: run k (out[32k .. 32k + 31]) holds columns 4i + k. */
INLINE void w16_order(const __m512i q[8], int16_t *out) {
    __m512i v[4]; /* columns 32m .. 32m + 31 as int16 */
    for (int m = 0; m < 4; m++)
        v[m] = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(q[2 * m])), _mm512_cvtepi32_epi16(q[2 * m + 1]), 1);
    for (int k = 0; k < 4; k++) {
        /* lane i: column 4 (i mod 16) + k of the pair (v0, v1) for i < 16, of (v2, v3) above */
        const __m512i idx = _mm512_add_epi16(_mm512_set_epi16(60, 56, 52, 48, 44, 40, 36, 32, 28, 24, 20, 16, 12, 8, 4, 0,
                                                              60, 56, 52, 48, 44, 40, 36, 32, 28, 24, 20, 16, 12, 8, 4, 0),
                                             _mm512_set1_epi16((short)k));
        const __m512i lo = _mm512_permutex2var_epi16(v[0], idx, v[1]), hi = _mm512_permutex2var_epi16(v[2], idx, v[3]);
        _mm512_storeu_si512(out + 32 * k, _mm512_mask_blend_epi16(0xffff0000u, lo, hi));
    }
}

/* The 128 int16 values of a chunk in pair order (q4r16): each 8 columns as
 * 0, 4, 1, 5, 2, 6, 3, 7, so that 32-bit word k of the 8 holds columns k and k + 4. */
INLINE void w16_order_pairs(const __m512i q[8], int16_t *out) {
    const __m512i idx = _mm512_set_epi16(31, 27, 30, 26, 29, 25, 28, 24, 23, 19, 22, 18, 21, 17, 20, 16,
                                         15, 11, 14, 10, 13, 9, 12, 8, 7, 3, 6, 2, 5, 1, 4, 0);
    for (int m = 0; m < 4; m++) {
        const __m512i v = _mm512_inserti64x4(_mm512_castsi256_si512(_mm512_cvtepi32_epi16(q[2 * m])),
                                             _mm512_cvtepi32_epi16(q[2 * m + 1]), 1);
        _mm512_storeu_si512(out + 32 * m, _mm512_permutexvar_epi16(idx, v));
    }
}

/* mm_round16_chunk's rounding (the same bits: round to nearest even, clamp, NaN to 0),
 * 16 lanes at a time, xq in q4w16's order (pairs = 0) or q4r16's (pairs = 1). n is a
 * multiple of 32 (cols % group == 0, group >= 32). */
INLINE void prep_row(const weight *w, const float *x, void *out, int pairs) {
    const long n = (long)w->cols, G = w->group, ngp = w16_ngp(w), nc = w16_nc(w), nchp = w16_nchp(w);
    float *xsum = out, *d = xsum + ngp;
    int16_t *xq = (int16_t *)(d + nchp);
    memset(xsum, 0, (size_t)ngp * sizeof *xsum);
    memset(d, 0, (size_t)nchp * sizeof *d);
    const __m512 lim = _mm512_set1_ps(32767.0f);
    __m512 gs = _mm512_setzero_ps(); /* the current group's sum, lane by lane */
    for (long c = 0; c < nc; c += 128) {
        const int nv = n - c >= 128 ? 8 : (int)((n - c) / 16);
        __m512 v[8], amax = _mm512_setzero_ps();
        for (int i = 0; i < 8; i++) {
            v[i] = i < nv ? _mm512_loadu_ps(x + c + 16 * i) : _mm512_setzero_ps();
            amax = _mm512_max_ps(amax, _mm512_abs_ps(v[i]));
        }
        const float am = _mm512_reduce_max_ps(amax);
        const __m512 inv = _mm512_set1_ps(am > 0 && am <= 3.4e38f ? 32767.0f / am : 0.0f);
        const float step = am / 32767.0f;
        d[c / 128] = step;
        __m512i q[8];
        for (int i = 0; i < 8; i++) {
            __m512 y = _mm512_mul_ps(v[i], inv);
            y = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(y, y, _CMP_ORD_Q), y); /* NaN: 0 */
            y = _mm512_roundscale_ps(y, _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
            y = _mm512_min_ps(_mm512_max_ps(y, _mm512_sub_ps(_mm512_setzero_ps(), lim)), lim);
            q[i] = _mm512_cvtps_epi32(y);
            if (i < nv) {
                gs = _mm512_fmadd_ps(_mm512_cvtepi32_ps(q[i]), _mm512_set1_ps(step), gs);
                const long end = c + 16 * i + 16; /* the column after this vector */
                if (end % G == 0) {
                    xsum[end / G - 1] = _mm512_reduce_add_ps(gs);
                    gs = _mm512_setzero_ps();
                }
            }
        }
        if (pairs) w16_order_pairs(q, xq + c);
        else w16_order(q, xq + c);
    }
}

void mm_q4w16_prep_row(const weight *w, const float *x, void *out) { prep_row(w, x, out, 0); }
void mm_q4r16_prep_row(const weight *w, const float *x, void *out) { prep_row(w, x, out, 1); }

/* ---- the product ------------------------------------------------------------- */

/* The chunk's 128 codes as four vectors of int16 codes (nibble k of every word). */
INLINE void w16_unpack(__m512i v, __m512i lo4, __m512i q[4]) {
    q[0] = _mm512_and_si512(v, lo4);
    q[1] = _mm512_and_si512(_mm512_srli_epi16(v, 4), lo4);
    q[2] = _mm512_and_si512(_mm512_srli_epi16(v, 8), lo4);
    q[3] = _mm512_srli_epi16(v, 12);
}

/* R weight rows from r against NT prepared activation rows xp (stride xs bytes),
 * y [.., rows] at rows t0.. . Every row's arithmetic is the same whatever R is, so a
 * row's result does not depend on how a task's range was cut. */
INLINE void w16_rows(const weight *w, const uint8_t *xp, long xs, float *y, int t0, int NT, long r, int R,
                     __m512 acc[][8]) {
    const long n = (long)w->cols, G = w->group, ng = n / G, row_bytes = n / 2, ngp = w16_ngp(w);
    const long nchp = w16_nchp(w), sbytes = w->stype == SC_F32 ? 4 : 2;
    const q4k k = q4k_of(w);
    const uint8_t *row[4];
    UNROLL
    for (int i = 0; i < R; i++) {
        row[i] = (const uint8_t *)w->data + (r + i) * row_bytes;
        _mm_prefetch((const char *)w->scales + (r + i + 8) * ng * sbytes, _MM_HINT_T0);
        _mm_prefetch((const char *)w->biases + (r + i + 8) * ng * sbytes, _MM_HINT_T0);
        UNROLL
        for (int t = 0; t < NT; t++) acc[i][t] = _mm512_setzero_ps();
    }
    for (long g0 = 0; g0 < ng; g0 += 16) {
        const __mmask16 gm = q4_group_mask(ng, g0);
        __m512 sv[4];
        UNROLL
        for (int i = 0; i < R; i++) {
            sv[i] = scale16(w->scales, w->stype, (r + i) * ng + g0, gm);
            const __m512 bv = scale16(w->biases, w->stype, (r + i) * ng + g0, gm);
            UNROLL
            for (int t = 0; t < NT; t++) {
                const float *xsum = (const float *)(const void *)(xp + (long)(t0 + t) * xs);
                acc[i][t] = _mm512_fmadd_ps(bv, _mm512_maskz_loadu_ps(gm, xsum + g0), acc[i][t]);
            }
        }
        const long c1 = (g0 + 16) * G < n ? (g0 + 16) * G : n;
        for (long c = g0 * G; c < c1; c += 128) {
            const __m512i idx = q4_lane_groups(&k, c, g0, G);
            UNROLL
            for (int i = 0; i < R; i++) {
                _mm_prefetch((const char *)row[i] + c / 2 + Q4_PF, _MM_HINT_T0);
                __m512i q[4];
                w16_unpack(q4_load(row[i], c, n), k.lo4, q);
                const __m512 s = _mm512_permutexvar_ps(idx, sv[i]);
                UNROLL
                for (int t = 0; t < NT; t++) {
                    const float *d = (const float *)(const void *)(xp + (long)(t0 + t) * xs) + ngp;
                    const int16_t *xq = (const int16_t *)(d + nchp) + c;
                    __m512i is = _mm512_madd_epi16(q[0], _mm512_loadu_si512(xq)); /* no zeroed register to copy first */
                    is = _mm512_dpwssd_epi32(is, q[1], _mm512_loadu_si512(xq + 32));
                    is = _mm512_dpwssd_epi32(is, q[2], _mm512_loadu_si512(xq + 64));
                    is = _mm512_dpwssd_epi32(is, q[3], _mm512_loadu_si512(xq + 96));
                    acc[i][t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is), _mm512_mul_ps(s, _mm512_set1_ps(d[c / 128])), acc[i][t]);
                }
            }
        }
    }
    UNROLL
    for (int i = 0; i < R; i++)
        UNROLL
        for (int t = 0; t < NT; t++) y[(long)(t0 + t) * w->rows + r + i] = _mm512_reduce_add_ps(acc[i][t]);
}

/* The accumulators are declared at their exact size by each instance: in one
 * [4][8] array for every case, GCC kept them on the stack (a load and a store around
 * every FMA). */
#define W16_FN(R, NT)                                                                                             \
    static void w16_##R##x##NT(const weight *w, const uint8_t *xp, long xs, float *y, long r) {                  \
        __m512 acc[R][8];                                                                                         \
        w16_rows(w, xp, xs, y, 0, NT, r, R, acc);                                                                 \
    }
W16_FN(4, 1) W16_FN(1, 1) W16_FN(2, 2) W16_FN(1, 2) W16_FN(2, 3) W16_FN(1, 3) W16_FN(1, 4)
W16_FN(1, 5) W16_FN(1, 6) W16_FN(1, 7) W16_FN(1, 8)

#define W16_CASE(NT)                                                                                              \
    case NT:                                                                                                      \
        for (; r + 2 <= r1; r += 2) w16_2x##NT(w, xp, xs, y, r);                                                  \
        if (r < r1) w16_1x##NT(w, xp, xs, y, r);                                                                  \
        break;

#define W16_CASE1(NT)                                                                                             \
    case NT:                                                                                                      \
        for (; r < r1; r++) w16_1x##NT(w, xp, xs, y, r);                                                           \
        break;

/* x: prepared rows [T, mm_q4w16_row_bytes] (MM_PREP_Q4W16), T <= 8. */
static void q4w16(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch) {
    (void)scratch;
    const uint8_t *xp = (const uint8_t *)(const void *)x;
    const long xs = mm_q4w16_row_bytes(w);
    long r = r0;
    switch (T) {
    case 1:
        for (; r + 4 <= r1; r += 4) w16_4x1(w, xp, xs, y, r);
        for (; r < r1; r++) w16_1x1(w, xp, xs, y, r);
        break;
    W16_CASE(2) W16_CASE(3) W16_CASE1(4) W16_CASE1(5) W16_CASE1(6) W16_CASE1(7)
    default:
        W16_CASE1(8)
    }
}

void mm_q4w16(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch) {
    q4w16(w, x, y, T, r0, r1, scratch);
}

/* ---- which 4-bit decode kernel ----------------------------------------------- */

static double thread_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Dot-product instructions a second on this core: 12 independent chains (register
 * only), vdpbf16ps (bf16 = 1) or vpdpwssd. */
static double dot_rate(int bf16) {
    enum { ITERS = 20000 };
    __m512i a[12];
    const __m512i x = _mm512_set1_epi32(0x3f803f80), z = _mm512_set1_epi32(0x00010001);
    UNROLL
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_epi32(i);
    const double t0 = thread_now();
    for (int n = 0; n < ITERS; n++) {
        UNROLL
        for (int i = 0; i < 12; i++) {
            a[i] = bf16 ? (__m512i)_mm512_dpbf16_ps((__m512)a[i], (__m512bh)x, (__m512bh)z) : _mm512_dpwssd_epi32(a[i], x, z);
            __asm__ volatile("" : "+v"(a[i]));
        }
    }
    const double dt = thread_now() - t0;
    return dt > 0 ? 12.0 * ITERS / dt : 0;
}

static int int16_faster;
static void probe(void) {
    double bf = 0, ws = 0;
    for (int rep = 0; rep < 3; rep++) { /* the best of three of each: a preempted run only lowers a rate */
        const double b = dot_rate(1), w = dot_rate(0);
        bf = b > bf ? b : bf;
        ws = w > ws ? w : ws;
    }
    /* per 128 codes and activation row q4dot issues 4 vdpbf16ps + 2 other ops, q4w16
     * 4 vpdpwssd + 3: int16 wins once vdpbf16ps is clearly the slower instruction */
    int16_faster = ws > 1.5 * bf;
}

int mm_q4_decode_int16(void) {
    if (!cpu_has_avx512_vnni()) return 0;
    const char *v = setting_str(SET_CELER_CPU_Q4DEC);
    if (v && strcmp(v, "int16") == 0) return 1;
    if (v && strcmp(v, "bf16") == 0) return 0;
    if (!cpu_has_avx512_bf16()) return 1;
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, probe);
    return int16_faster;
}
