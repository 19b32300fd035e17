/* tests/test_rope.c: RoPE inverse frequencies of each rope type against values
 * computed by hand from the formulas in docs/models.md, and the rotation itself
 * against closed-form cos/sin. */
#include <math.h>

#include "backend/backend.h"
#include "harness.h"
#include "model/model.h"

static rope_spec spec(rope_type t, double theta, double factor) {
    rope_spec r = {0};
    r.type = t;
    r.theta = theta;
    r.factor = factor;
    r.partial = 1.0;
    r.attn_factor = -1;
    r.truncate = 1;
    return r;
}

static void check_inv(const rope_spec *r, int hd, const double *want, int n, double want_af) {
    rope_table t = {0};
    CHECK(rope_table_init(&t, r, hd) == 0, "init failed");
    CHECK(t.dim == hd, "dim %d", t.dim);
    for (int i = 0; i < n && t.inv_freq; i++) CHECK(fabs(t.inv_freq[i] - want[i]) <= 1e-6 * fabs(want[i]) + 1e-9,
                                                   "inv_freq[%d] = %.9g, want %.9g", i, t.inv_freq[i], want[i]);
    CHECK_NEAR(t.attn_factor, want_af, 1e-6);
    rope_table_free(&t);
}

static void rope_default(void) {
    rope_spec r = spec(ROPE_DEFAULT, 10000, 1);
    const double want[4] = {1.0, 0.1, 0.01, 0.001}; /* 10000^(-2i/8) */
    check_inv(&r, 8, want, 4, 1.0);
}

static void rope_linear(void) {
    rope_spec r = spec(ROPE_LINEAR, 10000, 4);
    const double want[4] = {0.25, 0.025, 0.0025, 0.00025};
    check_inv(&r, 8, want, 4, 1.0);
}

static void rope_llama3(void) {
    /* wavelengths 2pi/inv = 6.28, 62.8, 628.3, 6283; orig 1000, low 1, high 4:
     * low-frequency wavelength 1000, high-frequency 250. Pair 2 is medium:
     * s = (1000/628.3185 - 1) / 3 = 0.1971833, inv = (1-s) 0.01/8 + s 0.01. */
    rope_spec r = spec(ROPE_LLAMA3, 10000, 8);
    r.orig_max_pos = 1000;
    r.low_freq_factor = 1;
    r.high_freq_factor = 4;
    const double want[4] = {1.0, 0.1, 0.00297535, 0.000125};
    check_inv(&r, 8, want, 4, 1.0);
}

static void rope_yarn(void) {
    /* dim 8, theta 1e4, factor 4, orig 64: correction dims for beta 32 and 1 are
     * -0.497 -> floor -1 -> clamped 0, and 1.008 -> ceil 2; ramp = i / 2 clamped:
     * 0, 0.5, 1, 1; inv = interp*ramp + extrap*(1-ramp); mscale 0.1 ln 4 + 1. */
    rope_spec r = spec(ROPE_YARN, 10000, 4);
    r.orig_max_pos = 64;
    r.beta_fast = 32;
    r.beta_slow = 1;
    const double want[4] = {1.0, 0.0625, 0.0025, 0.00025};
    check_inv(&r, 8, want, 4, 1.1386294361);
}

static void rope_partial(void) {
    rope_spec r = spec(ROPE_DEFAULT, 10000, 1);
    r.partial = 0.5; /* 16-dim heads, 8 rotated channels: same table as dim 8 */
    rope_table t = {0};
    CHECK(rope_table_init(&t, &r, 16) == 0 && t.dim == 8, "partial dim %d", t.dim);
    CHECK(t.inv_freq && fabs(t.inv_freq[1] - 0.1) < 1e-7, "partial inv_freq[1] = %g", t.inv_freq ? t.inv_freq[1] : 0);
    rope_table_free(&t);
}

static void rope_rotation(void) {
    backend *b = backend_cpu_new(1, 64);
    CHECK(b != NULL, "backend");
    if (!b) return;
    float inv[2] = {1.0f, 0.01f};
    rope_table t = {4, inv, 1.5f};
    /* two positions, two heads of dim 4: pairs (0, 2) and (1, 3) */
    float x[2][2][4] = {{{1, 2, 3, 4}, {-1, 0.5f, 2, -3}}, {{1, 2, 3, 4}, {0, 1, 0, 1}}};
    float orig[2][2][4];
    memcpy(orig, x, sizeof x);
    int32_t pos[2] = {3, 1000};
    b->ops->rope(b, &x[0][0][0], 2, 2, 4, pos, &t);
    for (int p = 0; p < 2; p++)
        for (int h = 0; h < 2; h++)
            for (int i = 0; i < 2; i++) {
                double a = pos[p] * (double)inv[i], c = cos(a) * 1.5, s = sin(a) * 1.5;
                double x0 = orig[p][h][i], x1 = orig[p][h][i + 2];
                CHECK_NEAR(x[p][h][i], x0 * c - x1 * s, 2e-4);
                CHECK_NEAR(x[p][h][i + 2], x1 * c + x0 * s, 2e-4);
            }
    backend_free(b);
}

int main(void) {
    RUN(rope_default);
    RUN(rope_linear);
    RUN(rope_llama3);
    RUN(rope_yarn);
    RUN(rope_partial);
    RUN(rope_rotation);
    return harness_done();
}
