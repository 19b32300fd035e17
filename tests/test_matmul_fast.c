/* tests/test_matmul_fast.c: the fast precision's products (backend/cpu/fast.c) and the
 * weights packed at load (backend/cpu/pack.c).
 *  - The portable reference of each rounding against the same rounding computed here
 *    in double (bf16 activations; int8 activations per block of 32), and the rounding
 *    really happening (the fast result leaves the exact one by the expected amount).
 *  - At every level this processor runs, the fast kernel mm_fast_select_level picks
 *    (vdpbf16ps, vpdpbusd, or the level's exact kernel on rounded activations; 4-bit
 *    decode: vdpbf16ps on exact codes, or exact where the level lacks AVX512_BF16)
 *    against the portable reference, on shapes off every tile (odd columns, rows off
 *    32 and 4, groups 32/64/128 with a column count off 128, scales bf16/f16/f32,
 *    T from 1 to 129); row splits bit-identical.
 *  - Packed bf16 panels: the exact avx512 GEMM gives the same bits packed or not, so
 *    does the vdpbf16ps GEMM; through the backend, 1 and 3 threads agree under fast. */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "base/mem.h"
#include "base/settings.h"
#include "harness.h"
#include "tensor/dtype.h"

static uint64_t rng = 0x2545f4914f6cdd1dull;
static uint32_t rnd32(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) { return (float)((double)rnd32() / 4294967296.0 * 2.0 - 1.0); }

typedef struct {
    weight w;
    void *data, *scales, *biases;
} tw;

static void tw_free(tw *t) { free(t->data); free(t->scales); free(t->biases); mm_unpack_weight(&t->w); }

static void *scales_of(scale_type st, long n, float lo, float hi) {
    void *p = malloc((size_t)n * 4 + 4);
    for (long i = 0; i < n; i++) {
        float v = lo + (hi - lo) * (rndf() * 0.5f + 0.5f);
        if (st == SC_F32) ((float *)p)[i] = v;
        else if (st == SC_BF16) ((uint16_t *)p)[i] = f32_to_bf16(v);
        else { /* f16 from the bf16 value's sign, exponent and top mantissa bits */
            uint16_t b = f32_to_bf16(v);
            int e = ((b >> 7) & 0xff) - 127 + 15;
            ((uint16_t *)p)[i] = (uint16_t)((b & 0x8000) | ((e & 0x1f) << 10) | ((b & 0x7f) << 3));
        }
    }
    return p;
}

static tw tw_random(weight_fmt fmt, long rows, long cols, int bits, int group, scale_type st) {
    tw t;
    memset(&t, 0, sizeof t);
    weight *w = &t.w;
    w->fmt = fmt; w->rows = rows; w->cols = cols; w->bits = bits; w->group = group; w->stype = st;
    const long n = rows * cols;
    if (fmt == WF_BF16) {
        uint16_t *p = malloc((size_t)n * 2);
        for (long i = 0; i < n; i++) p[i] = f32_to_bf16(rndf() * 2.0f);
        t.data = p;
    } else {
        uint32_t *p = malloc((size_t)(n * bits / 32) * 4);
        for (long i = 0; i < n * bits / 32; i++) p[i] = rnd32();
        t.data = p;
        const float s0 = 2.0f / (float)(1 << bits);
        t.scales = scales_of(st, n / group, 0.5f * s0, 1.5f * s0);
        t.biases = scales_of(st, n / group, -1.2f, -0.8f);
    }
    w->data = t.data; w->scales = t.scales; w->biases = t.biases;
    return t;
}

static float *rnd_x(long n) {
    float *x = malloc((size_t)n * 4);
    for (long i = 0; i < n; i++) x[i] = rndf();
    return x;
}

static float *scratch_for(long cols) { return mem_aligned((size_t)MM_SCRATCH(cols) * sizeof(float), "scratch"); }

static void *prep(const weight *w, const float *x, int T, int kind) {
    void *p = mem_aligned((size_t)mm_fast_prep_bytes(w, T, kind) + 64, "prep");
    mm_fast_prep_rows(w, x, 0, T, kind, p);
    return p;
}

/* sum_j |W[r, j] x[t, j]| */
static void abs_dot(const weight *w, const float *x, int T, double *out) {
    float *row = malloc((size_t)w->cols * 4);
    for (long r = 0; r < w->rows; r++) {
        weight_row_f32(w, r, row);
        for (int t = 0; t < T; t++) {
            double s = 0;
            for (long j = 0; j < w->cols; j++) s += fabs((double)row[j] * x[(long)t * w->cols + j]);
            out[(long)t * w->rows + r] = s;
        }
    }
    free(row);
}

static double max_rel(const float *a, const float *b, const double *scale, long n) {
    double m = 0;
    for (long i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]) / (scale[i] + 1e-30);
        if (!(e <= m)) m = e;
    }
    return m;
}

static int g_qbf16; /* rounded_ref of affine weights: the bf16 rounding (weights and activations) */
static int g_q4dot; /* rounded_ref of affine weights: exact weights on bf16 activations */
static int g_q4w16; /* rounded_ref of affine weights: exact weights on int16 activations per 128 columns */

/* x [n] on the int16 grid of each 128-column chunk (MM_FAST_Q4W16's rounding, written
 * out here): d = max |x| / 32767, x~ = d round(x / d), the quotient taken in float
 * and rounded to nearest even as the kernels do. */
static void round16_ref(const float *x, long n, double *xr) {
    for (long c = 0; c < n; c += 128) {
        const long e = c + 128 < n ? c + 128 : n;
        float amax = 0;
        for (long j = c; j < e; j++) amax = fmaxf(amax, fabsf(x[j]));
        const float inv = amax > 0 ? 32767.0f / amax : 0.0f, d = amax / 32767.0f;
        for (long j = c; j < e; j++) xr[j] = (double)d * (double)nearbyintf(x[j] * inv);
    }
}

/* The rounding each kind defines, computed here in double: bf16(x) for bf16 weights;
 * d_b * round(x / d_b), d_b = max|x_b| / 127 per block of 32, for the codes of affine
 * weights, whose bias terms take the unrounded sums. */
static void rounded_ref(const weight *w, const float *x, int T, double *out) {
    const long n = (long)w->cols;
    float *row = malloc((size_t)n * 4);
    double *xr = malloc((size_t)n * sizeof(double));
    for (int t = 0; t < T; t++) {
        const float *xt = x + (long)t * n;
        if (g_q4w16) round16_ref(xt, n, xr);
        for (long b = 0; b * 32 < n && !g_q4w16; b++) {
            double amax = 0;
            for (long j = b * 32; j < (b + 1) * 32 && j < n; j++) amax = fmax(amax, fabs(xt[j]));
            for (long j = b * 32; j < (b + 1) * 32 && j < n; j++)
                xr[j] = w->fmt == WF_BF16 || g_qbf16 || g_q4dot ? bf16_to_f32(f32_to_bf16(xt[j]))
                                                     : amax / 127.0 * (double)roundf(xt[j] * (127.0f / (float)amax));
        }
        for (long r = 0; r < w->rows; r++) {
            weight_row_f32(w, r, row);
            double s = 0;
            if (w->fmt == WF_BF16) {
                for (long j = 0; j < n; j++) s += (double)row[j] * xr[j];
            } else { /* W = q s + bias: the code part on rounded x, the bias part on x */
                const long ng = n / w->group;
                for (long g = 0; g < ng; g++) {
                    float sc, bi;
                    const long i = r * ng + g;
                    sc = w->stype == SC_F32 ? ((const float *)w->scales)[i] : w->stype == SC_BF16 ? bf16_to_f32(((const uint16_t *)w->scales)[i]) : f16_to_f32(((const uint16_t *)w->scales)[i]);
                    bi = w->stype == SC_F32 ? ((const float *)w->biases)[i] : w->stype == SC_BF16 ? bf16_to_f32(((const uint16_t *)w->biases)[i]) : f16_to_f32(((const uint16_t *)w->biases)[i]);
                    for (long j = g * w->group; j < (g + 1) * w->group; j++) {
                        const double q = round(((double)row[j] - bi) / sc); /* the code */
                        if (g_qbf16) s += (double)bf16_to_f32(f32_to_bf16(fmaf((float)q, sc, bi))) * xr[j];
                        else if (g_q4dot || g_q4w16) s += ((double)sc * q + bi) * xr[j];
                        else s += sc * q * xr[j] + (double)bi * xt[j];
                    }
                }
            }
            out[(long)t * w->rows + r] = s;
        }
    }
    free(row); free(xr);
}

/* The portable reference of each rounding against rounded_ref, and the rounding
 * being real: the result leaves the exact product by more than float noise and by
 * less than the rounding's bound. */
static void reference_rounds(void) {
    struct { weight_fmt f; long rows, cols; int bits, group, T, q; } cs[] = {
        {WF_BF16, 37, 53, 0, 0, 9, 0}, {WF_BF16, 20, 256, 0, 0, 17, 0}, {WF_AFFINE, 37, 288, 4, 32, 3, 0},
        {WF_AFFINE, 21, 192, 8, 64, 5, 0}, {WF_AFFINE, 16, 384, 4, 128, 1, 0}, {WF_AFFINE, 37, 288, 4, 32, 9, 1},
        {WF_AFFINE, 21, 192, 8, 64, 13, 1}, {WF_AFFINE, 19, 150, 3, 50, 10, 1}, {WF_AFFINE, 37, 288, 4, 32, 1, 2},
        {WF_AFFINE, 16, 384, 4, 128, 5, 2}, {WF_AFFINE, 37, 288, 4, 32, 1, 3}, {WF_AFFINE, 16, 384, 4, 128, 5, 3},
        {WF_AFFINE, 21, 192, 4, 64, 8, 3}};
    for (size_t c = 0; c < sizeof cs / sizeof *cs; c++) {
        tw t = tw_random(cs[c].f, cs[c].rows, cs[c].cols, cs[c].bits, cs[c].group, SC_BF16);
        const int T = cs[c].T;
        const long n = (long)T * cs[c].rows;
        float *x = rnd_x((long)T * cs[c].cols), *y = malloc((size_t)n * 4), *ye = malloc((size_t)n * 4);
        double *ref = malloc((size_t)n * 8), *sc = malloc((size_t)n * 8);
        float *s = scratch_for(cs[c].cols);
        /* q: 0 int8 activations, 1 bf16 weights and activations, 2 bf16 activations (decode),
         * 3 int16 activations (decode) */
        const int bf = cs[c].f == WF_BF16, qb = cs[c].q == 1, q4 = cs[c].q == 2, w16 = cs[c].q == 3;
        g_qbf16 = qb;
        g_q4dot = q4;
        g_q4w16 = w16;
        setting_override(SET_CELER_CPU_INT8, cs[c].q ? "0" : "1");
        void *xp = prep(&t.w, x, T, bf ? MM_PREP_BF16 : qb || q4 ? MM_PREP_ROUND : w16 ? MM_PREP_ROUND16 : MM_PREP_Q8);
        const int want = bf ? MM_FAST_BF16 : qb ? MM_FAST_QBF16 : q4 || w16 ? MM_FAST_Q4DOT : MM_FAST_Q8;
        CHECK(mm_fast_kind(&t.w, T) == want, "case %zu: kind %d", c, mm_fast_kind(&t.w, T));
        (bf ? mm_fast_portable_bf16 : qb ? mm_fast_portable_qbf16 : q4 || w16 ? mm_portable : mm_fast_portable_q8)(&t.w, xp, y, T, 0, cs[c].rows, s);
        mm_portable(&t.w, x, ye, T, 0, cs[c].rows, s);
        rounded_ref(&t.w, x, T, ref);
        abs_dot(&t.w, x, T, sc);
        double worst = 0, moved = 0;
        for (long i = 0; i < n; i++) {
            worst = fmax(worst, fabs(y[i] - ref[i]) / sc[i]);
            moved = fmax(moved, fabs((double)y[i] - ye[i]) / sc[i]);
        }
        CHECK(worst < 1e-5, "case %zu: portable %s vs the rounding in double: rel %g", c, bf ? "bf16" : "q8", worst);
        /* bf16: 2^-9 relative per activation; int8: half a step of max|x| / 127; int16:
         * half a step of max|x| / 32767 (and still far above float32's own noise) */
        const double bound = bf || qb || q4 ? 1.0 / 128 : w16 ? 1.0 / 32767 : 2.0 / 127, floor = w16 ? 1e-6 : 1e-4;
        CHECK(moved > floor && moved < bound, "case %zu: fast leaves exact by %g (want (%g, %g))", c, moved, floor, bound);
        free(x); free(y); free(ye); free(ref); free(sc); free(s); free(xp);
        tw_free(&t);
    }
    setting_override(SET_CELER_CPU_INT8, "1");
    g_qbf16 = g_q4dot = g_q4w16 = 0;
}

static int level;

/* The level's fast kernel for (w, T) against the portable reference of its rounding. */
static void check_fast(const weight *w, int T) {
    const long rows = (long)w->rows, cols = (long)w->cols;
    mm_fast f;
    if (!mm_fast_select_level(w, T, level, &f)) {
        CHECK(0, "%s: no fast kernel for fmt %d T=%d", cpu_level_name(level), w->fmt, T);
        return;
    }
    float *x = rnd_x((long)T * cols);
    float *y0 = malloc((size_t)T * rows * 4), *y1 = malloc((size_t)T * rows * 4), *y2 = malloc((size_t)T * rows * 4);
    double *sc = malloc((size_t)T * rows * 8);
    float *s = scratch_for(cols);
    const int bf = f.kind == MM_FAST_BF16, qb = f.kind == MM_FAST_QBF16, q4 = f.kind == MM_FAST_Q4DOT;
    const int w16 = f.kind == MM_FAST_Q4W16 || f.kind == MM_FAST_Q4R16; /* one rounding, two layouts */
    void *xr = prep(w, x, T, bf ? MM_PREP_BF16 : qb || q4 ? MM_PREP_ROUND : w16 ? MM_PREP_ROUND16 : MM_PREP_Q8);
    void *xk = prep(w, x, T, f.prep);
    (bf ? mm_fast_portable_bf16 : qb ? mm_fast_portable_qbf16 : q4 || w16 ? mm_portable : mm_fast_portable_q8)(w, xr, y0, T, 0, rows, s);
    for (long i = 0; i < T * rows; i++) y1[i] = y2[i] = NAN;
    f.k(w, xk, y1, T, 0, rows, s);
    long a = rows < 7 ? rows : 7, b = a + (rows - a) / 3;
    f.k(w, xk, y2, T, 0, a, s);
    f.k(w, xk, y2, T, a, b, s);
    f.k(w, xk, y2, T, b, rows, s);
    abs_dot(w, x, T, sc);
    const double e = max_rel(y1, y0, sc, (long)T * rows);
    const char *kn = mm_kernel_name(f.k);
    CHECK(e < 1e-5, "%s: fmt %d bits %d g %d %ldx%ld T=%d kernel \"%s\": rel err %g vs the portable rounding",
          cpu_level_name(level), w->fmt, w->bits, w->group, rows, cols, T, kn, e);
    CHECK(memcmp(y1, y2, (size_t)T * rows * 4) == 0, "%s: %ldx%ld T=%d \"%s\": row split changed the result",
          cpu_level_name(level), rows, cols, T, kn);
    if (level == CPU_AVX512 && qb && cpu_has_avx512_bf16()) CHECK(strstr(kn, "affine->bf16") != NULL, "avx512+bf16 chose \"%s\"", kn);
    if (level == CPU_AVX512 && bf && cpu_has_avx512_bf16()) CHECK(strstr(kn, "vdpbf16ps") != NULL, "avx512+bf16 chose \"%s\"", kn);
    if (level == CPU_AVX512 && f.kind == MM_FAST_Q8 && cpu_has_avx512_vnni()) CHECK(strstr(kn, "vpdpbusd") != NULL, "avx512+vnni chose \"%s\"", kn);
    if (q4) CHECK(strstr(kn, "q4 vdpbf16ps") != NULL, "4-bit decode under fast chose \"%s\"", kn);
    if (w16) CHECK(strstr(kn, "q4 vpdpwssd") != NULL, "4-bit decode on int16 chose \"%s\"", kn);
    if (f.kind == MM_FAST_Q4R16) CHECK(strstr(kn, "rows x16") != NULL, "interleaved 4-bit decode chose \"%s\"", kn);
    free(x); free(y0); free(y1); free(y2); free(sc); free(s); free(xr); free(xk);
}

/* The same weight interleaved by 16 rows (pack.c): from MM_Q4R16_MIN_T rows on the
 * fast kernel is q4r16, held to the same portable reference as q4w16 (rows off 16,
 * row splits inside a block). */
static void check_interleaved(weight *w, int T) {
    CHECK(mm_pack_q4r16(w, NULL) == 0 && w->interleaved, "%ldx%ld g %d: interleaving failed", (long)w->rows,
          (long)w->cols, w->group);
    mm_fast f;
    mm_fast_select_level(w, T, level, &f);
    const int want = T >= MM_Q4R16_MIN_T ? MM_FAST_Q4R16 : MM_FAST_Q4W16;
    CHECK(f.kind == want, "interleaved %ldx%ld T=%d: kind %d, want %d", (long)w->rows, (long)w->cols, T, f.kind, want);
    check_fast(w, T);
}

static void fast_kernels(void) {
    const long bshapes[][2] = {{37, 53}, {64, 128}, {33, 1024}, {70, 33}, {32, 96}};
    const int bT[] = {9, 13, 29, 129};
    for (int s = 0; s < 5; s++)
        for (int i = 0; i < 4; i++) {
            tw t = tw_random(WF_BF16, bshapes[s][0], bshapes[s][1], 0, 0, SC_BF16);
            check_fast(&t.w, bT[i]);
            tw_free(&t);
        }
    const int bits[] = {4, 8}, groups[] = {32, 64, 128}, qT[] = {1, 2, 3, 5, 9, 17};
    const scale_type sts[] = {SC_BF16, SC_F16, SC_F32};
    for (int b = 0; b < 2; b++)
        for (int g = 0; g < 3; g++)
            for (int st = 0; st < 3; st++)
                for (int i = 0; i < 6; i++) {
                    /* cols off 128: 9 groups of 32, 3 of 64 or 128 */
                    tw t = tw_random(WF_AFFINE, 37 + i, (long)groups[g] * (g == 0 ? 9 : 3), bits[b], groups[g], sts[st]);
                    check_fast(&t.w, qT[i]);
                    tw_free(&t);
                }
    tw t = tw_random(WF_AFFINE, 48, 1024, 4, 64, SC_BF16); /* qwen3-0.6b's q4 shape */
    check_fast(&t.w, 1);
    check_fast(&t.w, 40);
    setting_override(SET_CELER_CPU_INT8, "0"); /* the default: prefill of any affine width through bf16 */
    check_fast(&t.w, 40);
    tw_free(&t);
    /* 4-bit decode (T < 9, int8 off), under each CELER_CPU_Q4DEC: vdpbf16ps where the
     * level has AVX512_BF16, vpdpwssd on int16 activations where it has AVX512_VNNI,
     * else exact (no fast kernel); columns off 128 and a 64-byte load past the row's
     * end (the last row's tail chunk) */
    const int dT[] = {1, 2, 3, 4, 5, 8, 6, 7};
    const char *modes[] = {"bf16", "int16"};
    for (int md = 0; md < 2; md++) {
        setting_override(SET_CELER_CPU_Q4DEC, modes[md]);
        const int avx512 = level >= CPU_AVX512, want = !avx512 ? MM_FAST_NONE
                                                     : md == 1 && cpu_has_avx512_vnni() ? MM_FAST_Q4W16
                                                     : cpu_has_avx512_bf16() ? MM_FAST_Q4DOT
                                                                             : MM_FAST_NONE;
        for (int g = 0; g < 3; g++)
            for (int st = 0; st < 3; st++)
                for (int i = 0; i < 8; i++) {
                    tw u = tw_random(WF_AFFINE, 33 + 3 * i, (long)groups[g] * (g == 0 ? 9 : 3), 4, groups[g], sts[st]);
                    mm_fast f;
                    const int has = mm_fast_select_level(&u.w, dT[i], level, &f);
                    CHECK(f.kind == want && has == (want != MM_FAST_NONE), "%s, CELER_CPU_Q4DEC=%s: 4-bit decode kind %d, want %d",
                          cpu_level_name(level), modes[md], f.kind, want);
                    if (has) check_fast(&u.w, dT[i]);
                    if (want == MM_FAST_Q4W16) check_interleaved(&u.w, dT[i]);
                    tw_free(&u);
                }
        tw big = tw_random(WF_AFFINE, 48, 1024, 4, 64, SC_BF16);
        if (want != MM_FAST_NONE)
            for (int T = 1; T <= 8; T++) check_fast(&big.w, T);
        for (int T = 1; want == MM_FAST_Q4W16 && T <= 8; T++) check_interleaved(&big.w, T);
        tw_free(&big);
    }
    setting_override(SET_CELER_CPU_Q4DEC, NULL);
    const int all_bits[] = {2, 3, 4, 5, 6, 8}, aT[] = {9, 16, 29, 129};
    for (int b = 0; b < 6; b++)
        for (int g = 0; g < 3; g++) {
            tw u = tw_random(WF_AFFINE, 37 + 2 * g, (long)groups[g] * (g == 0 ? 9 : 3), all_bits[b], groups[g], sts[(b + g) % 3]);
            check_fast(&u.w, aT[(b + g) % 4]);
            tw_free(&u);
        }
    setting_override(SET_CELER_CPU_INT8, "1");
}

static void all_levels(void) {
    for (level = CPU_GENERIC; level <= CPU_AVX512; level++) {
        if (level > cpu_level_hw()) {
            printf("skip: level %s: this CPU lacks it (it runs up to %s)\n", cpu_level_name(level), cpu_level_name(cpu_level_hw()));
            continue;
        }
        printf("level %s\n", cpu_level_name(level));
        RUN(fast_kernels);
    }
}

/* Packed panels give the GEMMs the same bits as packing per call. */
static void packed_identical(void) {
    if (cpu_level() < CPU_AVX512) {
        printf("skip: packed_identical: weights are packed at the avx512 level only (this CPU runs %s)\n",
               cpu_level_name(cpu_level()));
        return;
    }
    const long shapes[][2] = {{77, 200}, {64, 33}, {40, 1024}};
    for (int sh = 0; sh < 3; sh++) {
        const long rows = shapes[sh][0], cols = shapes[sh][1];
        const int T = 29;
        tw t = tw_random(WF_BF16, rows, cols, 0, 0, SC_BF16);
        float *x = rnd_x(T * cols), *y0 = malloc((size_t)T * rows * 4), *y1 = malloc((size_t)T * rows * 4);
        float *s = scratch_for(cols);
        mm_kernel k0 = mm_select_level(&t.w, T, CPU_AVX512);
        k0(&t.w, x, y0, T, 0, rows, s);
        mm_fast f0, f1;
        mm_fast_select_level(&t.w, T, CPU_AVX512, &f0);
        void *xp = prep(&t.w, x, T, f0.prep);
        float *z0 = malloc((size_t)T * rows * 4), *z1 = malloc((size_t)T * rows * 4);
        f0.k(&t.w, xp, z0, T, 0, rows, s);
        CHECK(mm_pack_weight(&t.w, NULL) == 0 && t.w.packed, "mm_pack_weight");
        mm_kernel k1 = mm_select_level(&t.w, T, CPU_AVX512);
        k1(&t.w, x, y1, T, 0, rows, s);
        CHECK(k1 != k0 && strstr(mm_kernel_name(k1), "packed"), "packed weight runs \"%s\"", mm_kernel_name(k1));
        CHECK(memcmp(y0, y1, (size_t)T * rows * 4) == 0, "%ldx%ld: exact GEMM packed vs per call differ", rows, cols);
        mm_fast_select_level(&t.w, T, CPU_AVX512, &f1);
        f1.k(&t.w, xp, z1, T, 0, rows, s);
        CHECK(memcmp(z0, z1, (size_t)T * rows * 4) == 0, "%ldx%ld: fast GEMM packed vs per call differ", rows, cols);
        /* and a packed GEMV-sized product still reads the rows */
        mm_kernel kv = mm_select_level(&t.w, 1, CPU_AVX512);
        CHECK(strstr(mm_kernel_name(kv), "gemv") != NULL, "T=1 on a packed weight: \"%s\"", mm_kernel_name(kv));
        free(x); free(y0); free(y1); free(z0); free(z1); free(s); free(xp);
        tw_free(&t);
    }
}

/* The packing budget and the setting: a weight whose panels exceed the budget, or
 * any with CELER_CPU_PACK=0, stays unpacked; packing lowers the budget. */
static void pack_budget(void) {
    if (cpu_level() < CPU_AVX512) {
        printf("skip: pack_budget: weights are packed at the avx512 level only\n");
        return;
    }
    tw t = tw_random(WF_BF16, 70, 96, 0, 0, SC_BF16);
    const long need = mm_bf16_panels_bytes(&t.w);
    CHECK(need == 3 * 48 * 32 * 4, "panels of 70 x 96: %ld bytes", need);
    long budget = need - 1;
    CHECK(mm_pack_weight(&t.w, &budget) == 0 && !t.w.packed && budget == need - 1, "over the budget: packed %p", t.w.packed);
    setting_override(SET_CELER_CPU_PACK, "0");
    budget = 10 * need;
    CHECK(mm_pack_weight(&t.w, &budget) == 0 && !t.w.packed, "CELER_CPU_PACK=0: packed %p", t.w.packed);
    setting_override(SET_CELER_CPU_PACK, NULL);
    CHECK(mm_pack_weight(&t.w, &budget) == 0 && t.w.packed && budget == 9 * need, "within the budget: packed %p, %ld left",
          t.w.packed, budget);
    CHECK(mm_pack_budget() > 0, "mm_pack_budget %ld", mm_pack_budget());
    tw_free(&t);
}

/* Through the backend (prepared activations on the pool): 1 and 3 threads agree, and
 * fast differs from exact. */
static void backend_fast(void) {
    const weight_fmt fs[] = {WF_BF16, WF_AFFINE};
    for (int f = 0; f < 2; f++) {
        tw t = tw_random(fs[f], 150, 256, 4, 64, SC_BF16);
        backend *b1 = backend_cpu_new(1, 256), *b3 = backend_cpu_new(3, 256);
        CHECK(b1 && b3, "backend_cpu_new failed");
        if (!b1 || !b3) return;
        const int tsel[] = {1, 3, 40};
        for (int i = 0; i < 3; i++) {
            const int T = tsel[i];
            float *x = rnd_x(T * 256), *y1 = malloc((size_t)T * 150 * 4), *y3 = malloc((size_t)T * 150 * 4);
            float *ye = malloc((size_t)T * 150 * 4);
            b1->fast = 0;
            b1->ops->matmul(b1, &t.w, x, ye, T);
            b1->fast = b3->fast = 1;
            b1->ops->matmul(b1, &t.w, x, y1, T);
            b3->ops->matmul(b3, &t.w, x, y3, T);
            CHECK(memcmp(y1, y3, (size_t)T * 150 * 4) == 0, "fmt %d T=%d: 1 and 3 threads differ under fast", fs[f], T);
            const int rounds = mm_fast_kind(&t.w, T) != MM_FAST_NONE;
            CHECK((memcmp(y1, ye, (size_t)T * 150 * 4) != 0) == rounds, "fmt %d T=%d: fast %s exact", fs[f], T,
                  rounds ? "equals" : "differs from");
            free(x); free(y1); free(y3); free(ye);
        }
        backend_free(b1);
        backend_free(b3);
        tw_free(&t);
    }
}

/* q4w16's vector prep (mm_q4w16_prep_row) puts every chunk on the same grid as the
 * rounding's definition (mm_round16_chunk): the same steps and int16 values, in the
 * codes' order; group sums of the rounded values. Rows with ties, zeros, a chunk of
 * zeros, NaN and infinity (no UB; NaN rounds to 0), and a tail chunk. */
static void round16_prep(void) {
    if (!cpu_has_avx512_vnni()) {
        printf("skip: round16_prep: no AVX512_VNNI (the int16 kernel does not run here)\n");
        return;
    }
    const long shapes[][2] = {{384, 64}, {288, 32}, {1024, 128}};
    for (int sh = 0; sh < 3; sh++) {
        weight w = {0};
        w.fmt = WF_AFFINE; w.rows = 1; w.cols = shapes[sh][0]; w.bits = 4; w.group = (int)shapes[sh][1];
        const long n = (long)w.cols, ng = n / w.group;
        for (int kind = 0; kind < 4; kind++) {
            float *x = rnd_x(n);
            if (kind == 1) for (long j = 0; j < n; j++) x[j] = (float)((j % 7) - 3) * 0.5f; /* ties at 32767/1.5 steps */
            if (kind == 2) { for (long j = 0; j < 128 && j < n; j++) x[j] = 0; x[n - 1] = 1e30f; }
            if (kind == 3) { x[5] = NAN; x[200] = INFINITY; x[n - 2] = -INFINITY; }
            void *row = mem_aligned((size_t)mm_q4w16_row_bytes(&w), "row");
            mm_q4w16_prep_row(&w, x, row);
            const float *xsum, *d;
            const int16_t *xq;
            mm_q4w16_row_parts(&w, row, &xsum, &d, &xq);
            int bad = 0;
            for (long c = 0; c < n; c += 128) {
                int32_t q[128];
                const long len = n - c < 128 ? n - c : 128;
                const float step = mm_round16_chunk(x + c, len, q);
                bad += memcmp(&step, &d[c / 128], sizeof step) != 0;
                for (int k = 0; k < 4; k++)
                    for (int i = 0; i < 32; i++) bad += xq[c + 32 * k + i] != (int16_t)q[4 * i + k];
            }
            CHECK(bad == 0, "cols %ld group %d rows of kind %d: %d values or steps differ from mm_round16_chunk", n, w.group, kind, bad);
            if (kind < 3) {
                double worst = 0;
                for (long g = 0; g < ng; g++) {
                    double want = 0, mag = 0;
                    for (long j = g * w.group; j < (g + 1) * w.group; j++) {
                        int32_t q[128];
                        const long c = j / 128 * 128;
                        const float step = mm_round16_chunk(x + c, n - c < 128 ? n - c : 128, q);
                        want += (double)step * q[j - c];
                        mag += fabs((double)step * q[j - c]);
                    }
                    worst = fmax(worst, fabs(xsum[g] - want) / (mag + 1e-30));
                }
                CHECK(worst < 1e-5, "cols %ld group %d kind %d: group sums off by %g", n, w.group, kind, worst);
            }
            free(row);
            free(x);
        }
    }
}

int main(void) {
    setting_override(SET_CELER_CPU_INT8, "1"); /* the int8 kernels are tested whatever the default */
    printf("this CPU runs up to: %s (bf16 %d, vnni %d)\n", cpu_level_name(cpu_level_hw()), cpu_has_avx512_bf16(),
           cpu_has_avx512_vnni());
    RUN(reference_rounds);
    RUN(round16_prep);
    all_levels();
    RUN(packed_identical);
    RUN(pack_budget);
    RUN(backend_fast);
    return harness_done();
}
