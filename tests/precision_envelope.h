/* tests/precision_envelope.h: the precision-envelope rule shared by the CPU and GPU
 * fast-path tests (test_cpu_precision.c, cuda/test_cuda_precision.c): per-run figures
 * (max_abs, mean_abs, mean KL, clear top tokens lost) against transformers' own bf16
 * figures in tests/fixtures/bf16_transformers.json, judged at g_factor (1.5) times the
 * better of its eager and sdpa runs. Include after harness.h (CHECK). */
#ifndef CELER_TESTS_PRECISION_ENVELOPE_H
#define CELER_TESTS_PRECISION_ENVELOPE_H

#include <math.h>
#include <stdio.h>

#include "base/json.h"
#include "harness.h"

static double g_factor = 1.5;

typedef struct {
    double max_abs, mean_abs, mean_kl;
    int flips, clear; /* clear top tokens lost, of how many */
} envelope;

typedef struct {
    double max_abs, sum_abs, sum_kl;
    long vals, rows;
    int flips, clear;
} pstats;

static void acc_rows(pstats *s, const float *got, const float *ref, int n, int V) {
    for (int r = 0; r < n; r++) {
        const float *g = got + (long)r * V, *f = ref + (long)r * V;
        double mg = -INFINITY, mf = -INFINITY;
        int ga = 0, fa = 0;
        for (int i = 0; i < V; i++) {
            double d = fabs((double)g[i] - (double)f[i]);
            if (!(d <= s->max_abs)) s->max_abs = d; /* NaN propagates */
            s->sum_abs += d;
            if (g[i] > mg) { mg = g[i]; ga = i; }
            if (f[i] > mf) { mf = f[i]; fa = i; }
        }
        double zg = 0, zf = 0, second = -INFINITY;
        for (int i = 0; i < V; i++) {
            zg += exp(g[i] - mg);
            zf += exp(f[i] - mf);
            if (i != fa && f[i] > second) second = f[i];
        }
        const double lzg = log(zg), lzf = log(zf);
        double kl = 0;
        for (int i = 0; i < V; i++) {
            const double lp = f[i] - mf - lzf, lq = g[i] - mg - lzg;
            kl += exp(lp) * (lp - lq);
        }
        s->sum_kl += kl;
        s->vals += V;
        s->rows++;
        if (mf - second > 0.05) {
            s->clear++;
            s->flips += ga != fa;
        }
    }
}

static int load_envelope(const json_t *all, const char *name, envelope *e) {
    const json_t *o = json_object_get(all, name);
    if (!o) return -1;
    e->max_abs = e->mean_abs = e->mean_kl = INFINITY;
    e->flips = 1 << 30;
    e->clear = 0;
    const char *impls[2] = {"eager", "sdpa"};
    int found = 0;
    for (int i = 0; i < 2; i++) {
        const json_t *x = json_object_get(o, impls[i]);
        if (!json_is_object(x)) continue; /* "load failed: ..." */
        double v;
        if (jget_num(x, "max_abs", NAN, &v, name) == 0 && v < e->max_abs) e->max_abs = v;
        if (jget_num(x, "mean_abs", NAN, &v, name) == 0 && v < e->mean_abs) e->mean_abs = v;
        if (jget_num(x, "mean_kl", NAN, &v, name) == 0 && v < e->mean_kl) e->mean_kl = v;
        const char *ag;
        int a, b;
        if (jget_str(x, "argmax_agree", NULL, &ag, name) == 0 && ag && sscanf(ag, "%d/%d", &a, &b) == 2) {
            if (b - a < e->flips) e->flips = b - a;
            e->clear = b;
        }
        found++;
    }
    return found ? 0 : -1;
}

typedef struct {
    double worst[3]; /* largest figure / envelope over the runs: max_abs, mean_abs, mean_kl */
    int flips;       /* most clear top tokens lost by one run */
} margins;

/* One run's figures against the envelope (checked when check) */
static void judge(const char *name, const char *run, const pstats *s, const envelope *e, int check, margins *mg) {
    const double ma = s->max_abs, mn = s->sum_abs / (double)s->vals, kl = s->sum_kl / (double)s->rows;
    const double r[3] = {ma / e->max_abs, mn / e->mean_abs, kl / e->mean_kl};
    for (int i = 0; i < 3; i++)
        if (!(r[i] <= mg->worst[i])) mg->worst[i] = r[i];
    if (s->flips > mg->flips) mg->flips = s->flips;
    if (!check) return;
    CHECK(r[0] <= g_factor && r[1] <= g_factor && r[2] <= g_factor,
          "%s %s: max_abs %.4g (%.2fx), mean_abs %.4g (%.2fx), mean_kl %.3g (%.2fx) of transformers' bf16; limit %.2fx", name,
          run, ma, r[0], mn, r[1], kl, r[2], g_factor);
    CHECK(s->flips <= e->flips, "%s %s: %d of %d clear top tokens lost (transformers' bf16 loses %d of %d)", name, run,
          s->flips, s->clear, e->flips, e->clear);
}

#endif
