/* tests/test_matmul.c: the matrix-product kernels. mm_portable agrees with a double
 * precision reference; at every kernel level this processor runs (generic, avx2,
 * avx512; a level it lacks is skipped with the reason printed) every kernel
 * mm_select_level picks (decode T=1, small T, large T with ragged tiles, every weight
 * format) agrees with mm_portable; splitting the rows (threads) never changes a bit;
 * the AVX2 and AVX-512 GEMMs give identical bits; CELER_CPU / CELER_NO_SIMD select
 * the level and a level the processor lacks or an unknown word is an error. */
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "base/err.h"
#include "base/mem.h"
#include "base/settings.h"
#include "celer.h"
#include "harness.h"
#include "tensor/dtype.h"

/* ------------------------------------------------------------ random data */

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static uint32_t rnd32(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float rndf(void) { return (float)((double)rnd32() / 4294967296.0 * 2.0 - 1.0); } /* [-1, 1) */

/* A random half of the given kind with magnitude in about [2^-4, 2^2). */
static uint16_t rnd_f16(void) { return (uint16_t)((rnd32() & 0x8000) | ((11 + rnd32() % 6) << 10) | (rnd32() & 0x3ff)); }
static uint16_t rnd_bf16(void) { return f32_to_bf16(rndf() * 2.0f); }

/* A weight owning its buffers (tests only). */
typedef struct {
    weight w;
    void *data, *scales, *biases;
} tw;

static void tw_free(tw *t) { free(t->data); free(t->scales); free(t->biases); }

static void *scales_of(scale_type st, long n, float lo, float hi) {
    void *p = malloc((size_t)(n > 0 ? n : 0) * 4 + 4);
    for (long i = 0; i < n; i++) {
        float v = lo + (hi - lo) * (rndf() * 0.5f + 0.5f);
        if (st == SC_F32) ((float *)p)[i] = v;
        else if (st == SC_BF16) ((uint16_t *)p)[i] = f32_to_bf16(v);
        else { /* f16: build from the bf16 value's sign, exponent and top mantissa bits */
            uint16_t b = f32_to_bf16(v);
            int e = ((b >> 7) & 0xff) - 127 + 15;
            ((uint16_t *)p)[i] = (uint16_t)((b & 0x8000) | ((e & 0x1f) << 10) | ((b & 0x7f) << 3));
        }
    }
    return p;
}

/* fmt: WF_*; bits/group/stype only for quantized formats. */
static tw tw_random(weight_fmt fmt, long rows, long cols, int bits, int group, scale_type st) {
    tw t;
    memset(&t, 0, sizeof t);
    weight *w = &t.w;
    w->fmt = fmt;
    w->rows = rows;
    w->cols = cols;
    w->bits = bits;
    w->group = group;
    w->stype = st;
    long n = rows * cols;
    switch (fmt) {
    case WF_F32: {
        float *p = malloc((size_t)n * 4);
        for (long i = 0; i < n; i++) p[i] = rndf();
        t.data = p;
        break;
    }
    case WF_F16:
    case WF_BF16: {
        uint16_t *p = malloc((size_t)n * 2);
        for (long i = 0; i < n; i++) p[i] = fmt == WF_F16 ? rnd_f16() : rnd_bf16();
        t.data = p;
        break;
    }
    case WF_AFFINE:
    case WF_MXFP4: {
        if (fmt == WF_MXFP4) { w->bits = bits = 4; w->group = group = 32; }
        long words = n * bits / 32;
        uint32_t *p = malloc((size_t)words * 4);
        for (long i = 0; i < words; i++) p[i] = rnd32();
        t.data = p;
        long ng = n / group;
        if (fmt == WF_MXFP4) {
            uint8_t *s = malloc((size_t)(ng > 0 ? ng : 1));
            for (long i = 0; i < ng; i++) s[i] = (uint8_t)(120 + rnd32() % 10);
            t.scales = s;
        } else {
            /* codes span [0, 2^bits); scale ~ 2 / 2^bits and bias ~ -1 center them */
            float s0 = 2.0f / (float)(1 << bits);
            t.scales = scales_of(st, ng, 0.5f * s0, 1.5f * s0);
            t.biases = scales_of(st, ng, -1.2f, -0.8f);
        }
        break;
    }
    }
    w->data = t.data;
    w->scales = t.scales;
    w->biases = t.biases;
    return t;
}

static float *rnd_x(long n) {
    float *x = malloc((size_t)n * 4);
    for (long i = 0; i < n; i++) x[i] = rndf();
    return x;
}

static float *scratch_for(long cols) { return mem_aligned((size_t)MM_SCRATCH(cols) * sizeof(float), "scratch"); }

/* sum_j |W[r, j] x[t, j]|: the scale of rounding error in y[t, r]. */
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

/* Largest |a - b| / (scale + tiny) over [T, rows]. */
static double max_rel(const float *a, const float *b, const double *scale, long n) {
    double m = 0;
    for (long i = 0; i < n; i++) {
        double e = fabs((double)a[i] - (double)b[i]) / (scale[i] + 1e-30);
        if (!(e <= m)) m = e; /* NaN propagates */
    }
    return m;
}

static const char *fmt_str(const weight *w, char *buf) { return weight_fmt_name(w, buf, 32); }

/* ------------------------------------------------------------------ cases */

/* mm_portable against sum_j W[r, j] x[t, j] in double. */
static void portable_vs_double(void) {
    long rows = 23, cols = 200;
    tw t = tw_random(WF_BF16, rows, cols, 0, 0, SC_BF16);
    int T = 3;
    float *x = rnd_x(T * cols), *y = malloc((size_t)T * rows * 4), *row = malloc((size_t)cols * 4);
    double *sc = malloc((size_t)T * rows * sizeof(double));
    float *s = scratch_for(cols);
    mm_portable(&t.w, x, y, T, 0, rows, s);
    abs_dot(&t.w, x, T, sc);
    double worst = 0;
    for (long r = 0; r < rows; r++) {
        weight_row_f32(&t.w, r, row);
        for (int i = 0; i < T; i++) {
            double ref = 0;
            for (long j = 0; j < cols; j++) ref += (double)row[j] * x[(long)i * cols + j];
            double e = fabs(ref - y[(long)i * rows + r]) / sc[(long)i * rows + r];
            if (e > worst) worst = e;
        }
    }
    CHECK(worst < 1e-6, "portable vs double: rel err %g", worst);
    free(x); free(y); free(row); free(sc); free(s);
    tw_free(&t);
}

/* mm_select's kernel for (w, T) vs mm_portable, over the whole matrix and over
 * ragged row splits (which must give identical bits). Returns the worst error. */
static int level = CPU_GENERIC; /* the level the kernel checks run at */
static double check_kernel(const weight *w, int T) {
    long rows = (long)w->rows, cols = (long)w->cols;
    float *x = rnd_x((long)T * cols);
    float *y0 = malloc((size_t)T * rows * 4), *y1 = malloc((size_t)T * rows * 4), *y2 = malloc((size_t)T * rows * 4);
    double *sc = malloc((size_t)T * rows * sizeof(double));
    float *s = scratch_for(cols);
    mm_kernel k = mm_select_level(w, T, level);
    mm_portable(w, x, y0, T, 0, rows, s);
    for (long i = 0; i < T * rows; i++) y1[i] = y2[i] = NAN;
    k(w, x, y1, T, 0, rows, s);
    /* splits at odd places: 7 rows, then the rest in two uneven pieces */
    long a = rows < 7 ? rows : 7, b = a + (rows - a) / 3;
    k(w, x, y2, T, 0, a, s);
    k(w, x, y2, T, a, b, s);
    k(w, x, y2, T, b, rows, s);
    abs_dot(w, x, T, sc);
    double e = max_rel(y1, y0, sc, (long)T * rows);
    char f[32];
    CHECK(e < 1e-5, "%s: %s %ldx%ld T=%d kernel \"%s\": rel err %g vs portable", cpu_level_name(level), fmt_str(w, f),
          rows, cols, T, mm_kernel_name(k), e);
    CHECK(memcmp(y1, y2, (size_t)T * rows * 4) == 0, "%s: %s %ldx%ld T=%d kernel \"%s\": row split changed the result",
          cpu_level_name(level), fmt_str(w, f), rows, cols, T, mm_kernel_name(k));
    /* the level's own kernels are the ones under test (not a lower level's) */
    const char *kn = mm_kernel_name(k);
    if (level == CPU_AVX512 && T <= 4 && (w->fmt == WF_BF16 || (w->fmt == WF_AFFINE && w->bits == 4 && w->group % 32 == 0)))
        CHECK(strncmp(kn, "avx512", 6) == 0, "avx512 level chose \"%s\" for %s T=%d", kn, fmt_str(w, f), T);
    if (level == CPU_AVX512 && T >= 9) CHECK(strncmp(kn, "avx512", 6) == 0, "avx512 level chose \"%s\" for T=%d", kn, T);
    if (level == CPU_AVX2) CHECK(strncmp(kn, "avx2", 4) == 0, "avx2 level chose \"%s\"", kn);
    if (level == CPU_GENERIC) CHECK(k == mm_portable, "generic level chose \"%s\"", kn);
    free(x); free(y0); free(y1); free(y2); free(sc); free(s);
    return e;
}

static const int Ts[] = {1, 2, 3, 4, 5, 7, 8, 9, 16, 64, 129};
#define NT ((int)(sizeof Ts / sizeof Ts[0]))

static void float_formats(void) {
    const weight_fmt fs[] = {WF_F32, WF_F16, WF_BF16};
    /* ragged: rows not a multiple of 16 (nor 4), cols not a multiple of 8 or 16 */
    const long shapes[][2] = {{37, 53}, {64, 128}, {19, 7}, {33, 1024}, {70, 33}};
    for (int f = 0; f < 3; f++)
        for (int s = 0; s < 5; s++)
            for (int i = 0; i < NT; i++) {
                tw t = tw_random(fs[f], shapes[s][0], shapes[s][1], 0, 0, SC_BF16);
                check_kernel(&t.w, Ts[i]);
                tw_free(&t);
            }
}

static void affine_formats(void) {
    const int bits[] = {2, 3, 4, 5, 6, 8}, groups[] = {32, 64, 128};
    const scale_type sts[] = {SC_BF16, SC_F16, SC_F32};
    for (int b = 0; b < 6; b++)
        for (int g = 0; g < 3; g++)
            for (int st = 0; st < 3; st++) {
                /* cols: several groups, and an odd group count for the bias tail */
                long cols = (long)groups[g] * (g == 0 ? 9 : 3);
                const int tsel[] = {1, 3, 6, 129};
                for (int i = 0; i < 4; i++) {
                    tw t = tw_random(WF_AFFINE, 37, cols, bits[b], groups[g], sts[st]);
                    check_kernel(&t.w, tsel[i]);
                    tw_free(&t);
                }
            }
    /* the decode shapes of the benchmark model, q4/g64 bf16 */
    for (int i = 0; i < NT; i++) {
        tw t = tw_random(WF_AFFINE, 48, 1024, 4, 64, SC_BF16);
        check_kernel(&t.w, Ts[i]);
        tw_free(&t);
    }
}

static void mxfp4_format(void) {
    for (int i = 0; i < NT; i++) {
        tw t = tw_random(WF_MXFP4, 29, 96, 4, 32, SC_BF16);
        check_kernel(&t.w, Ts[i]);
        tw_free(&t);
    }
}

/* Through the backend and its pool: 1 and 3 threads give the same bits. */
static void threads_identical(void) {
    const weight_fmt fs[] = {WF_BF16, WF_AFFINE};
    for (int f = 0; f < 2; f++) {
        tw t = tw_random(fs[f], 150, 256, 4, 64, SC_BF16);
        backend *b1 = backend_cpu_new(1, 256), *b3 = backend_cpu_new(3, 256);
        CHECK(b1 && b3, "backend_cpu_new failed");
        if (!b1 || !b3) return;
        const int tsel[] = {1, 3, 40};
        for (int i = 0; i < 3; i++) {
            int T = tsel[i];
            float *x = rnd_x(T * 256), *y1 = malloc((size_t)T * 150 * 4), *y3 = malloc((size_t)T * 150 * 4);
            b1->ops->matmul(b1, &t.w, x, y1, T);
            b3->ops->matmul(b3, &t.w, x, y3, T);
            CHECK(memcmp(y1, y3, (size_t)T * 150 * 4) == 0, "fmt %d T=%d: 1 and 3 threads differ", fs[f], T);
            free(x); free(y1); free(y3);
        }
        backend_free(b1);
        backend_free(b3);
        tw_free(&t);
    }
}

/* The pool the matmuls run on: every task of every run exactly once, on a thread
 * whose index is below the pool size, over many back-to-back runs of varied sizes. */
typedef struct {
    atomic_int count[64];
    atomic_int bad_index;
} pool_probe;

static void probe_task(void *ctx, int task, int n_tasks) {
    pool_probe *p = ctx;
    (void)n_tasks;
    atomic_fetch_add(&p->count[task], 1);
    int ti = pool_thread_index();
    if (ti < 0 || ti >= 3) atomic_store(&p->bad_index, 1);
}

static void pool_runs_each_task_once(void) {
    pool *pl = pool_new(3);
    CHECK(pl != NULL, "pool_new");
    if (!pl) return;
    static pool_probe p;
    int bad = 0;
    for (int run = 0; run < 3000 && !bad; run++) {
        int n = 1 + run % 40;
        for (int i = 0; i < 64; i++) atomic_store(&p.count[i], 0);
        pool_run(pl, n, probe_task, &p);
        for (int i = 0; i < 64; i++)
            if (atomic_load(&p.count[i]) != (i < n ? 1 : 0)) {
                CHECK(0, "run %d: task %d of %d ran %d times", run, i, n, atomic_load(&p.count[i]));
                bad = 1;
                break;
            }
    }
    CHECK(!atomic_load(&p.bad_index), "pool_thread_index out of range");
    CHECK(pool_thread_index() == 0, "the caller's index is 0");
    pool_free(pl);
}

/* The AVX2 and AVX-512 GEMMs run one FMA chain per output over k in order on the
 * same packed panel, so they agree to the bit (results do not depend on the level). */
static void gemm_levels_identical(void) {
    if (cpu_level_hw() < CPU_AVX512) {
        printf("skip: gemm_levels_identical: this CPU runs up to %s, not avx512\n", cpu_level_name(cpu_level_hw()));
        return;
    }
    const weight_fmt fs[] = {WF_BF16, WF_AFFINE, WF_F32};
    for (int f = 0; f < 3; f++) {
        tw t = tw_random(fs[f], 77, 200, 4, 40, SC_BF16);
        int T = 29;
        float *x = rnd_x(T * 200), *y2 = malloc((size_t)T * 77 * 4), *y5 = malloc((size_t)T * 77 * 4);
        float *s = scratch_for(200);
        mm_kernel k2 = mm_select_level(&t.w, T, CPU_AVX2), k5 = mm_select_level(&t.w, T, CPU_AVX512);
        k2(&t.w, x, y2, T, 0, 77, s);
        k5(&t.w, x, y5, T, 0, 77, s);
        CHECK(k2 != k5 && memcmp(y2, y5, (size_t)T * 77 * 4) == 0, "fmt %d: \"%s\" and \"%s\" differ", fs[f],
              mm_kernel_name(k2), mm_kernel_name(k5));
        free(x); free(y2); free(y5); free(s);
        tw_free(&t);
    }
}

/* CELER_CPU and CELER_NO_SIMD (through setting_override, as the environment would). */
static void level_setting(void) {
    const int hw = cpu_level_hw();
    tw t = tw_random(WF_BF16, 20, 64, 0, 0, SC_BF16);
    CHECK(cpu_level() == hw, "no setting: level %s, hardware %s", cpu_level_name(cpu_level()), cpu_level_name(hw));
    static const char *const names[] = {"generic", "avx2", "avx512"};
    for (int l = 0; l <= CPU_AVX512; l++) {
        setting_override(SET_CELER_CPU, names[l]);
        if (l <= hw) {
            CHECK(cpu_level() == l && cpu_level_check() == 0, "CELER_CPU=%s: level %s", names[l], cpu_level_name(cpu_level()));
            backend *b = backend_cpu_new(1, 64);
            CHECK(b != NULL, "CELER_CPU=%s: backend: %s", names[l], err_msg());
            backend_free(b);
            CHECK((mm_select(&t.w, 1) == mm_portable) == (l == CPU_GENERIC), "CELER_CPU=%s: kernel %s", names[l],
                  mm_kernel_name(mm_select(&t.w, 1)));
        } else {
            /* a level this processor lacks: an error naming the setting, no backend */
            backend *b = backend_cpu_new(1, 64);
            CHECK(b == NULL && strstr(err_msg(), "CELER_CPU=") && strstr(err_msg(), "lacks"),
                  "CELER_CPU=%s on a %s CPU: \"%s\"", names[l], cpu_level_name(hw), err_msg());
            backend_free(b);
            CHECK(cpu_level() == hw, "CELER_CPU=%s: kernels must stay at %s", names[l], cpu_level_name(hw));
            printf("(CELER_CPU=%s on this %s CPU: \"%s\")\n", names[l], cpu_level_name(hw), err_msg());
        }
    }
    /* as on an AVX2-only processor (CI's may be one): avx512 is refused, and every
     * selector stays at avx2 even when asked for more */
    if (hw >= CPU_AVX2) {
        cpu_level_pretend_hw(CPU_AVX2);
        setting_override(SET_CELER_CPU, "avx512");
        backend *b = backend_cpu_new(1, 64);
        CHECK(b == NULL && strstr(err_msg(), "CELER_CPU=avx512: this processor (or its OS) lacks AVX-512"),
              "CELER_CPU=avx512 on an AVX2-only CPU: \"%s\"", err_msg());
        backend_free(b);
        CHECK(cpu_level() == CPU_AVX2 && strncmp(mm_kernel_name(mm_select_level(&t.w, 1, CPU_AVX512)), "avx2", 4) == 0,
              "pretended AVX2-only CPU: level %s, kernel %s", cpu_level_name(cpu_level()),
              mm_kernel_name(mm_select_level(&t.w, 1, CPU_AVX512)));
        CHECK(!cpu_has_avx512_bf16() && !cpu_has_avx512_vnni(), "pretended AVX2-only CPU reports bf16/vnni");
        cpu_level_pretend_hw(-1);
    }
    setting_override(SET_CELER_CPU, "sse9");
    backend *b = backend_cpu_new(1, 64);
    CHECK(b == NULL && strstr(err_msg(), "CELER_CPU=sse9") && strstr(err_msg(), "not a CPU kernel level"),
          "CELER_CPU=sse9: \"%s\"", err_msg());
    backend_free(b);
    setting_override(SET_CELER_CPU, NULL);
    setting_override(SET_CELER_CPU_Q4DEC, "int8");
    b = backend_cpu_new(1, 64);
    CHECK(b == NULL && strstr(err_msg(), "CELER_CPU_Q4DEC=int8: not a 4-bit decode kernel (auto, bf16 or int16)"),
          "CELER_CPU_Q4DEC=int8: \"%s\"", err_msg());
    backend_free(b);
    setting_override(SET_CELER_CPU_Q4DEC, NULL);
    setting_override(SET_CELER_NO_SIMD, "1");
    CHECK(cpu_level() == CPU_GENERIC && !cpu_has_avx2(), "CELER_NO_SIMD=1: level %s", cpu_level_name(cpu_level()));
    for (int i = 0; i < NT; i++) CHECK(mm_select(&t.w, Ts[i]) == mm_portable, "CELER_NO_SIMD=1: bf16 T=%d not portable", Ts[i]);
    setting_override(SET_CELER_CPU, hw >= CPU_AVX2 ? "avx2" : "generic"); /* CELER_CPU wins */
    CHECK(cpu_level() == (hw >= CPU_AVX2 ? CPU_AVX2 : CPU_GENERIC), "CELER_CPU beside CELER_NO_SIMD=1");
    setting_override(SET_CELER_CPU, NULL);
    setting_override(SET_CELER_NO_SIMD, NULL);
    tw_free(&t);
}

/* Every kernel check at every level this processor runs. */
static void all_levels(void) {
    for (level = CPU_GENERIC; level <= CPU_AVX512; level++) {
        if (level > cpu_level_hw()) {
            printf("skip: level %s: this CPU lacks it (it runs up to %s)\n", cpu_level_name(level),
                   cpu_level_name(cpu_level_hw()));
            continue;
        }
        printf("level %s\n", cpu_level_name(level));
        RUN(float_formats);
        RUN(affine_formats);
        RUN(mxfp4_format);
    }
    level = cpu_level();
}

int main(void) {
    printf("this CPU runs up to: %s; in force: %s\n", cpu_level_name(cpu_level_hw()), celer_cpu_kernels());
    RUN(portable_vs_double);
    all_levels();
    RUN(gemm_levels_identical);
    RUN(threads_identical);
    RUN(pool_runs_each_task_once);
    RUN(level_setting);
    return harness_done();
}
