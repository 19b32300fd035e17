/* tests/test_cpu_ops_split.c: the CPU's element-wise ops (rmsnorm, add+rmsnorm, RoPE,
 * gated activations) split over the pool by rows (backend/cpu/cpu.c, spans): on shapes
 * large enough to be split, 3 threads give the bits of 1 thread, and rmsnorm matches
 * the definition computed here (the model fixtures are too small to be split). Also
 * the row-strided GLU and split_cols (a fused product's rows) against their
 * definitions. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "harness.h"

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float rnd(void) {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((double)(rng >> 11) / 4503599627370496.0 - 1.0);
}

enum { T = 67, N = 1024, HEADS = 8, HD = 128 };

/* every op once on its own copies of the inputs, with backend b; out [5][T * N] */
static void run_ops(backend *b, const float *x, const float *d, const float *w, const int32_t *pos, const rope_table *r,
                    float *out) {
    const long n = (long)T * N;
    float *o = out;
    b->ops->rmsnorm(b, x, w, o, T, N, 1e-6f, 0);
    o += n;
    float *xm = o;
    memcpy(xm, x, sizeof(float) * n);
    b->ops->add_rmsnorm(b, xm, d, w, w, o + n, T, N, 1e-6f, 1);
    o += 2 * n;
    memcpy(o, x, sizeof(float) * n); /* T tokens of HEADS x HD */
    b->ops->rope(b, o, T, HEADS, HD, pos, r);
    o += n;
    memcpy(o, x, sizeof(float) * n);
    b->ops->glu(b, o, N, d, N, o, T, N, 0);
}

static void split_same_bits(void) {
    const long n = (long)T * N;
    float *x = malloc(sizeof(float) * n), *d = malloc(sizeof(float) * n), *w = malloc(sizeof(float) * N);
    float *a = malloc(sizeof(float) * 5 * n), *c = malloc(sizeof(float) * 5 * n);
    int32_t pos[T];
    float inv[HD / 2];
    for (long i = 0; i < n; i++) x[i] = 3 * rnd(), d[i] = rnd();
    for (int i = 0; i < N; i++) w[i] = 1 + 0.5f * rnd();
    for (int t = 0; t < T; t++) pos[t] = 5 + 3 * t;
    for (int i = 0; i < HD / 2; i++) inv[i] = powf(10000.0f, -2.0f * i / HD);
    rope_table r = {HD, inv, 1.0f};
    backend *b1 = backend_cpu_new(1, 64), *b3 = backend_cpu_new(3, 64);
    CHECK(b1 && b3, "backends");
    if (b1 && b3) {
        run_ops(b1, x, d, w, pos, &r, a);
        run_ops(b3, x, d, w, pos, &r, c);
        static const char *const names[] = {"rmsnorm", "add (x)", "add_rmsnorm (y)", "rope", "glu"};
        for (int k = 0; k < 5; k++)
            CHECK(memcmp(a + k * n, c + k * n, sizeof(float) * n) == 0, "%s: 3 threads differ from 1", names[k]);
        double worst = 0; /* rmsnorm by the definition */
        for (int t = 0; t < T; t++) {
            double ss = 0;
            for (int i = 0; i < N; i++) ss += (double)x[t * N + i] * x[t * N + i];
            const double s = 1 / sqrt(ss / N + 1e-6);
            for (int i = 0; i < N; i++) worst = fmax(worst, fabs(c[t * N + i] - x[t * N + i] * s * w[i]));
        }
        CHECK(worst < 1e-5, "rmsnorm on 3 threads: max err %g", worst);
    }
    backend_free(b1);
    backend_free(b3);
    free(x), free(d), free(w), free(a), free(c);
}

static double glu_ref(double g, double u, int act) {
    if (act == 0) return g / (1 + exp(-g)) * u;
    return 0.5 * g * (1 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g))) * u;
}

/* glu over fused gate|up rows [T, 2 n] and over one layer's slice of wider rows, on
 * 1 and 3 threads; split_cols of q|k|v rows */
static void strided_glu_and_split(void) {
    enum { R = 37, W = 700, L = 3 };
    float *gu = malloc(sizeof(float) * R * 2 * W), *wide = malloc(sizeof(float) * R * L * W);
    float *y1 = malloc(sizeof(float) * R * W), *y3 = malloc(sizeof(float) * R * W);
    for (long i = 0; i < (long)R * 2 * W; i++) gu[i] = 4 * rnd();
    for (long i = 0; i < (long)R * L * W; i++) wide[i] = rnd();
    backend *b1 = backend_cpu_new(1, 64), *b3 = backend_cpu_new(3, 64);
    CHECK(b1 && b3, "backends");
    for (int act = 0; b1 && b3 && act < 2; act++) {
        b1->ops->glu(b1, gu, 2 * W, gu + W, 2 * W, y1, R, W, act);
        b3->ops->glu(b3, gu, 2 * W, gu + W, 2 * W, y3, R, W, act);
        CHECK(memcmp(y1, y3, sizeof(float) * R * W) == 0, "fused glu act %d: 3 threads differ from 1", act);
        double worst = 0;
        for (int t = 0; t < R; t++)
            for (int j = 0; j < W; j++) {
                const double r = glu_ref(gu[(long)t * 2 * W + j], gu[(long)t * 2 * W + W + j], act);
                worst = fmax(worst, fabs(y3[(long)t * W + j] - r) / (1 + fabs(r)));
            }
        CHECK(worst < 1e-5, "fused glu act %d: max err %g", act, worst);
        /* gate [R, W] in place against layer 1's slice of rows [R, L, W] */
        memcpy(y3, gu, sizeof(float) * R * W);
        b3->ops->glu(b3, y3, W, wide + W, (long)L * W, y3, R, W, act);
        worst = 0;
        for (int t = 0; t < R; t++)
            for (int j = 0; j < W; j++) {
                const double r = glu_ref(gu[(long)t * W + j], wide[((long)t * L + 1) * W + j], act);
                worst = fmax(worst, fabs(y3[(long)t * W + j] - r) / (1 + fabs(r)));
            }
        CHECK(worst < 1e-5, "sliced glu act %d: max err %g", act, worst);
    }
    /* split_cols: rows of [5, 3, 2] columns, and of [4, 2] */
    float x[R * 10], a[R * 5], c[R * 3], d[R * 2];
    for (int i = 0; i < R * 10; i++) x[i] = (float)i;
    if (b1) {
        b1->ops->split_cols(b1, x, R, 5, 3, 2, a, c, d);
        int bad = 0;
        for (int t = 0; t < R; t++) {
            for (int j = 0; j < 5; j++) bad += a[t * 5 + j] != x[t * 10 + j];
            for (int j = 0; j < 3; j++) bad += c[t * 3 + j] != x[t * 10 + 5 + j];
            for (int j = 0; j < 2; j++) bad += d[t * 2 + j] != x[t * 10 + 8 + j];
        }
        b1->ops->split_cols(b1, x, R, 4, 2, 0, a, c, NULL);
        for (int t = 0; t < R; t++) {
            for (int j = 0; j < 4; j++) bad += a[t * 4 + j] != x[t * 6 + j];
            for (int j = 0; j < 2; j++) bad += c[t * 2 + j] != x[t * 6 + 4 + j];
        }
        CHECK(bad == 0, "split_cols: %d values misplaced", bad);
    }
    backend_free(b1);
    backend_free(b3);
    free(gu), free(wide), free(y1), free(y3);
}

/* The avx512 SiLU (ops_avx512.c) over the range the portable form covers: large
 * gates of both signs (exp512 is only ever asked for e^-|g|), zeros, tiny values,
 * and every tail length; within 2e-6 of the definition relative to 1 + |y|. */
static void silu_avx512_range(void) {
    if (cpu_level_hw() < CPU_AVX512) {
        printf("  (this processor has no AVX-512: skipped)\n");
        return;
    }
    enum { N = 4000 };
    float *g = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N), *y = malloc(sizeof(float) * N);
    for (int i = 0; i < N; i++) {
        const float span = i % 4 == 0 ? 100 : i % 4 == 1 ? 10 : i % 4 == 2 ? 1 : 1e-3f;
        g[i] = span * rnd();
        u[i] = 1 + rnd();
    }
    g[0] = 0, g[1] = -0.0f, g[2] = 88.5f, g[3] = -88.5f, g[4] = 1e-30f, g[5] = -1e-30f, g[6] = -200, g[7] = 200;
    double worst = 0;
    for (int len = 1; len <= 40; len++) { /* every tail: n = len, starting anywhere */
        glu_silu_avx512(g + len, u + len, y, len);
        for (int i = 0; i < len; i++) {
            const double r = glu_ref(g[len + i], u[len + i], 0);
            worst = fmax(worst, fabs(y[i] - r) / (1 + fabs(r)));
        }
    }
    glu_silu_avx512(g, u, y, N);
    for (int i = 0; i < N; i++) {
        const double r = glu_ref(g[i], u[i], 0);
        worst = fmax(worst, fabs(y[i] - r) / (1 + fabs(r)));
    }
    CHECK(worst < 2e-6, "avx512 silu: max err %g", worst);
    free(g), free(u), free(y);
}

/* rmsnorm and add + rmsnorm on widths off the 8 partial sums (sum_squares' tail) */
static void norm_ragged_widths(void) {
    backend *b = backend_cpu_new(1, 64);
    CHECK(b != NULL, "backend");
    if (!b) return;
    static const int widths[] = {1, 5, 7, 9, 15, 1027};
    for (size_t k = 0; k < sizeof widths / sizeof *widths; k++) {
        const int n = widths[k];
        float *x = malloc(sizeof(float) * 2 * n), *y = malloc(sizeof(float) * 2 * n), *xm = malloc(sizeof(float) * 2 * n);
        float *d = malloc(sizeof(float) * 2 * n), *w = malloc(sizeof(float) * n);
        for (int i = 0; i < 2 * n; i++) x[i] = 3 * rnd(), d[i] = rnd();
        for (int i = 0; i < n; i++) w[i] = 1 + 0.5f * rnd();
        b->ops->rmsnorm(b, x, w, y, 2, n, 1e-6f, 0);
        memcpy(xm, x, sizeof(float) * 2 * n);
        float *y2 = malloc(sizeof(float) * 2 * n);
        b->ops->add_rmsnorm(b, xm, d, w, NULL, y2, 2, n, 1e-6f, 0);
        double worst = 0, worst_add = 0;
        for (int t = 0; t < 2; t++) {
            double ss = 0, sd = 0;
            for (int i = 0; i < n; i++) ss += (double)x[t * n + i] * x[t * n + i], sd += (double)d[t * n + i] * d[t * n + i];
            const double s = 1 / sqrt(ss / n + 1e-6), sdn = 1 / sqrt(sd / n + 1e-6);
            for (int i = 0; i < n; i++) {
                worst = fmax(worst, fabs(y[t * n + i] - x[t * n + i] * s * w[i]));
                worst_add = fmax(worst_add, fabs(xm[t * n + i] - (x[t * n + i] + d[t * n + i] * sdn * w[i])));
            }
        }
        CHECK(worst < 1e-5 && worst_add < 1e-5, "width %d: rmsnorm err %g, add+rmsnorm err %g", n, worst, worst_add);
        free(x), free(y), free(xm), free(d), free(w), free(y2);
    }
    backend_free(b);
}

int main(void) {
    RUN(split_same_bits);
    RUN(norm_ragged_widths);
    RUN(strided_glu_and_split);
    RUN(silu_avx512_range);
    return harness_done();
}
