/* tests/test_cpu_ops_split.c: the CPU's element-wise ops (rmsnorm, add+rmsnorm, RoPE,
 * gated activations) split over the pool by rows (backend/cpu/cpu.c, spans): on shapes
 * large enough to be split, 3 threads give the bits of 1 thread, and rmsnorm matches
 * the definition computed here (the model fixtures are too small to be split). */
#include <math.h>
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
    b->ops->glu(b, o, d, n, 0);
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

int main(void) {
    RUN(split_same_bits);
    return harness_done();
}
