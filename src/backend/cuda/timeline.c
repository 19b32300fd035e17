/* backend/cuda/timeline.c: CELER_PROFILE=3, where a decode step's GPU time goes
 * between its graph replays. Events are recorded around each graph launch and each op
 * run outside a graph (kernels, uploads), never synchronized while the run goes on, so
 * the pipelined loop keeps its overlap; at exit the events are read back and each
 * interval is charged to its op kind, and the time between one interval's end and the
 * next one's start to "idle" (the GPU waited for the host). Only intervals between
 * the first and the last graph replay count: prompt chunks run op by op before them.
 * Events are created as needed, at most TL_MAX (then the rest of the run is not seen). */
#include <stdio.h>
#include <stdlib.h>

#include "backend/cuda/cuda_backend.h"

#define TL_MAX 32768

/* Opens an interval of `kind` (a SOP kind, TL_GRAPH or TL_HOST_UPLOAD); 1 if it did. */
int tl_begin(cuda_backend *c, int kind) {
    if (c->profile != 3 || c->capturing || c->tl_open) return 0;
    if (c->tl_n + 2 > c->tl_cap) {
        if (c->tl_cap >= TL_MAX) return 0;
        const int cap = c->tl_cap ? 2 * c->tl_cap : 1024;
        cudaEvent_t *ev = realloc(c->tl_ev, (size_t)cap * sizeof *ev);
        if (!ev) return 0;
        c->tl_ev = ev;
        unsigned char *k = realloc(c->tl_kind, (size_t)cap / 2);
        if (!k) return 0;
        c->tl_kind = k;
        for (int i = c->tl_cap; i < cap; i++) c->tl_ev[i] = NULL;
        c->tl_cap = cap;
    }
    for (int i = c->tl_n; i < c->tl_n + 2; i++)
        if (!c->tl_ev[i] && cudaEventCreate(&c->tl_ev[i]) != cudaSuccess) {
            cudaGetLastError();
            return 0;
        }
    if (cudaEventRecord(c->tl_ev[c->tl_n], c->stream) != cudaSuccess) {
        cudaGetLastError();
        return 0;
    }
    c->tl_kind[c->tl_n / 2] = (unsigned char)kind;
    c->tl_open = 1;
    return 1;
}

void tl_end(cuda_backend *c) {
    if (!c->tl_open) return;
    c->tl_open = 0;
    if (cudaEventRecord(c->tl_ev[c->tl_n + 1], c->stream) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    c->tl_n += 2;
}

void tl_print(cuda_backend *c, const char *const *names) {
    if (c->profile != 3 || c->tl_n < 2) return;
    if (cudaEventSynchronize(c->tl_ev[c->tl_n - 1]) != cudaSuccess) {
        cudaGetLastError();
        return;
    }
    const int n = c->tl_n / 2;
    int first = -1, last = -1;
    for (int i = 0; i < n; i++)
        if (c->tl_kind[i] == TL_GRAPH) {
            if (first < 0) first = i;
            last = i;
        }
    if (first < 0 || last == first) {
        fprintf(stderr, "cuda timeline: fewer than two graph replays seen\n");
        return;
    }
    /* the intervals of [first, last): whole steps, each from a replay's start to the next's */
    double ms[TL_KINDS] = {0}, idle = 0, max_idle = 0;
    long cnt[TL_KINDS] = {0};
    for (int i = first; i < last; i++) {
        float t = 0, gap = 0;
        if (cudaEventElapsedTime(&t, c->tl_ev[2 * i], c->tl_ev[2 * i + 1]) == cudaSuccess) {
            ms[c->tl_kind[i]] += t;
            cnt[c->tl_kind[i]]++;
        }
        if (cudaEventElapsedTime(&gap, c->tl_ev[2 * i + 1], c->tl_ev[2 * i + 2]) == cudaSuccess) {
            idle += gap;
            if (gap > max_idle) max_idle = gap;
        }
    }
    cudaGetLastError();
    float span = 0;
    cudaEventElapsedTime(&span, c->tl_ev[2 * first], c->tl_ev[2 * last]);
    const double steps = (double)cnt[TL_GRAPH];
    fprintf(stderr, "cuda timeline: %.0f steps between graph replays' starts, %.3f ms a step; per step:\n", steps,
            span / steps);
    for (int k = 0; k < TL_KINDS; k++)
        if (cnt[k])
            fprintf(stderr, "  %-28s %6.2f calls %9.1f us\n", names[k], cnt[k] / steps, 1e3 * ms[k] / steps);
    fprintf(stderr, "  %-28s %6s       %9.1f us (longest gap %.1f us)\n", "idle (waiting for the host)", "",
            1e3 * idle / steps, 1e3 * max_idle);
}

void tl_free(cuda_backend *c) {
    for (int i = 0; i < c->tl_cap; i++)
        if (c->tl_ev[i]) cudaEventDestroy(c->tl_ev[i]);
    free(c->tl_ev);
    free(c->tl_kind);
    c->tl_ev = NULL;
    c->tl_kind = NULL;
    c->tl_n = c->tl_cap = 0;
}
