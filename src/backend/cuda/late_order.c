/* backend/cuda/late_order.c: which launch order each decode-step graph's small kernels
 * run with (common.cuh, cuk_pdl_start_small). Early (mask 0): a small kernel lets the
 * next kernel launch before it waits for the one before it. Late (every bit): only
 * after, so a product that follows asks for its weights while the small kernel runs.
 * The results are the same bits either way; the speed is not, and which is faster
 * depends on the model (twelfth session: gemma3-4b +8.5% late, llama3-8b -1.3%, its q4
 * -3.5%; docs/benchmarks/cuda-batched.md). So a new graph times its first replays in
 * both orders, alternately (the context grows meanwhile, so alternation cancels the
 * drift), and keeps the order whose median is lower by more than the noise; the choice
 * is remembered under the op list's hash, so a graph evicted and captured again does
 * not time itself again. CELER_PDL_LATE=MASK fixes the order instead (A/B runs). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "base/err.h"
#include "base/settings.h"

#define LATE_ALL 63       /* common.cuh's CUK_LATE_ALL */
#define LATE_WARM 2       /* replays untimed first (the first replays of a graph run slower) */
#define LATE_MARGIN 0.01f /* late must be this much faster (1%: above the run-to-run noise of a median of 5) */

void late_init(cuda_backend *c) {
    c->late_now = -1;
    c->late_fixed = -1;
    const char *v = setting_str(SET_CELER_PDL_LATE);
    if (!v || strcmp(v, "auto") == 0) return;
    char *end = NULL;
    const long m = strtol(v, &end, 10);
    if (end != v && *end == 0 && m >= 0 && m <= LATE_ALL)
        c->late_fixed = (int)m;
    else
        fprintf(stderr, "celer: CELER_PDL_LATE=%s: wants auto or a mask 0..%d; using auto\n", v, LATE_ALL);
}

/* FNV-1a over the op records (their arguments and buffer addresses) */
static uint64_t ops_hash(const step_op *ops, int n) {
    const unsigned char *p = (const unsigned char *)ops;
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < (size_t)n * sizeof *ops; i++) h = (h ^ p[i]) * 1099511628211ull;
    return h;
}

void late_captured(cuda_backend *c, step_graph *g) {
    late_order *o = &g->late;
    memset(o, 0, sizeof *o);
    /* no early launches at all (CELER_PDL=0), or graphs timed op by op: nothing to choose */
    if (c->late_fixed >= 0 || !setting_flag(SET_CELER_PDL) || c->profile == 1 || PROF_EVENTS(c)) {
        o->mask = c->late_fixed >= 0 ? c->late_fixed : 0;
        return;
    }
    o->key = ops_hash(g->ops, g->n);
    const int have = c->n_late_memo < LATE_MEMO ? c->n_late_memo : LATE_MEMO;
    for (int i = 0; i < have; i++)
        if (c->late_memo[i].key == o->key) {
            o->mask = c->late_memo[i].mask;
            return;
        }
    if (cudaEventCreate(&o->ev[0]) != cudaSuccess || cudaEventCreate(&o->ev[1]) != cudaSuccess) {
        cudaGetLastError();
        late_drop(g); /* untimed: the early order, as before the choice existed */
        return;
    }
    o->left = 2 * LATE_SAMPLES;
    o->warm = LATE_WARM;
}

static void set_mask(cuda_backend *c, int mask) {
    if (c->late_now == mask) return;
    if (cuk_set_late(mask, c->stream) != 0) {
        cuda_fail(c);
        return;
    }
    c->late_now = mask;
}

static float median(float *v, int n) {
    for (int i = 1; i < n; i++) /* insertion sort: n <= LATE_SAMPLES */
        for (int j = i; j > 0 && v[j] < v[j - 1]; j--) {
            const float t = v[j];
            v[j] = v[j - 1];
            v[j - 1] = t;
        }
    return n % 2 ? v[n / 2] : 0.5f * (v[n / 2 - 1] + v[n / 2]);
}

static void choose(cuda_backend *c, step_graph *g) {
    late_order *o = &g->late;
    const float early = median(o->ms[0], o->n[0]), late = median(o->ms[1], o->n[1]);
    o->mask = late < early * (1.f - LATE_MARGIN) ? LATE_ALL : 0;
    c->late_memo[c->n_late_memo++ % LATE_MEMO].key = o->key;
    c->late_memo[(c->n_late_memo - 1) % LATE_MEMO].mask = o->mask;
    c->n_late_chosen++;
    c->n_late_late += o->mask != 0;
    if (setting_flag(SET_CELER_STATS))
        fprintf(stderr, "cuda: step graph of %d ops: small kernels launch %s (median replay %.3f ms early, %.3f ms late)\n",
                g->n, o->mask ? "late" : "early", early, late);
    for (int i = 0; i < 2; i++)
        if (o->ev[i]) cudaEventDestroy(o->ev[i]);
    o->ev[0] = o->ev[1] = NULL;
}

/* Reads the pending timed replay if it has finished; 1 when it has (or none is pending). */
static int collect(cuda_backend *c, step_graph *g) {
    late_order *o = &g->late;
    if (!o->pending) return 1;
    const cudaError_t q = cudaEventQuery(o->ev[1]);
    if (q == cudaErrorNotReady) return 0; /* the pipelined loop queued this step before the last ended */
    float ms = 0;
    if (q != cudaSuccess || cudaEventElapsedTime(&ms, o->ev[0], o->ev[1]) != cudaSuccess) {
        cuda_ok(c, q != cudaSuccess ? q : cudaGetLastError(), "launch order timing");
        return 0;
    }
    o->pending = 0;
    if (o->n[o->cand] < LATE_SAMPLES) o->ms[o->cand][o->n[o->cand]++] = ms;
    if (--o->left == 0) choose(c, g);
    return 1;
}

void late_before(cuda_backend *c, step_graph *g) {
    late_order *o = &g->late;
    if (o->left > 0 && !c->failed) {
        /* untimed replays while choosing (warming up, or the last timed one still runs)
         * keep whichever order is set */
        if (!collect(c, g) || (o->left > 0 && o->warm > 0)) {
            if (o->warm > 0 && !o->pending) o->warm--;
            if (c->late_now < 0) set_mask(c, 0);
            return;
        }
        if (o->left > 0) {
            o->cand = o->n[0] <= o->n[1] ? 0 : 1; /* alternately */
            set_mask(c, o->cand ? LATE_ALL : 0);
            o->pending = cuda_ok(c, cudaEventRecord(o->ev[0], c->stream), "launch order timing");
            o->timing = o->pending;
            return;
        }
    }
    set_mask(c, o->mask);
}

void late_after(cuda_backend *c, step_graph *g) {
    late_order *o = &g->late;
    if (o->timing) {
        o->timing = 0;
        if (!cuda_ok(c, cudaEventRecord(o->ev[1], c->stream), "launch order timing")) o->pending = 0;
    }
}

void late_drop(step_graph *g) {
    for (int i = 0; i < 2; i++)
        if (g->late.ev[i]) cudaEventDestroy(g->late.ev[i]);
    memset(&g->late, 0, sizeof g->late);
}
