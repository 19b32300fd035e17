/* backend/cpu/collective.c: the CPU backend's tensor-parallel ops: the embedding
 * share of a vocabulary slice, and the collectives over a host group
 * (backend/tp_group.h) when the ranks are threads of one process. Sums run in rank
 * order on every rank, so every rank holds the same bits afterwards (the residual
 * stream each rank keeps must not drift apart). */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "backend/tp_group.h"
#include "base/err.h"

void cpu_embed_range(backend *b, const weight *w, const int32_t *tok, int T, float scale, float *x, int lo) {
    (void)b;
    for (int t = 0; t < T; t++) {
        float *row = x + (long)t * w->cols;
        const int64_t r = (int64_t)tok[t] - lo;
        if (r < 0 || r >= w->rows) {
            memset(row, 0, (size_t)w->cols * sizeof(float));
            continue;
        }
        weight_row_f32(w, r, row);
        if (scale != 1.0f)
            for (int64_t i = 0; i < w->cols; i++) row[i] *= scale;
    }
}

static tp_host_group *group(backend *b) { return b->tp_world > 1 ? ((cpu_backend *)b->impl)->tp : NULL; }

void cpu_all_reduce(backend *b, float *x, long n) {
    tp_host_group *g = group(b);
    if (!g || n <= 0) return;
    const int me = b->tp_rank;
    if (g->tmp_cap[me] < (size_t)n) {
        float *t = realloc(g->tmp[me], (size_t)n * sizeof(float));
        if (!t) abort(); /* the other ranks wait at the barrier: no way to report it */
        g->tmp[me] = t;
        g->tmp_cap[me] = (size_t)n;
    }
    g->part[me] = x;
    tp_host_barrier(g);   /* every rank's x is published */
    float *s = g->tmp[me];
    memcpy(s, g->part[0], (size_t)n * sizeof(float));
    for (int r = 1; r < g->world; r++) {
        const float *p = g->part[r];
        for (long i = 0; i < n; i++) s[i] += p[i];
    }
    tp_host_barrier(g);   /* nobody reads x any more */
    memcpy(x, s, (size_t)n * sizeof(float));
}

void cpu_gather_cols(backend *b, float *full, const float *part, int T, int w, int W) {
    tp_host_group *g = group(b);
    if (!g) {
        for (int t = 0; t < T && full != part; t++)
            memcpy(full + (long)t * W, part + (long)t * w, (size_t)(w < W ? w : W) * sizeof(float));
        return;
    }
    const int me = b->tp_rank;
    g->part[me] = part;
    tp_host_barrier(g);
    if (full)
        for (int r = 0; r < g->world; r++) {
            const long c0 = (long)r * w, n = c0 + w <= W ? w : W - c0;
            for (int t = 0; t < T && n > 0; t++)
                memcpy(full + (long)t * W + c0, g->part[r] + (long)t * n, (size_t)n * sizeof(float));
        }
    tp_host_barrier(g);   /* the parts may be overwritten again */
}

int cpu_tp_join(backend *b, int rank, int world, void *shared) {
    if (world < 1 || rank < 0 || rank >= world) return err_set("tensor-parallel rank %d of %d", rank, world);
    if (world > 1 && !shared) return err_set("tensor-parallel rank %d of %d: no host group", rank, world);
    ((cpu_backend *)b->impl)->tp = shared;
    b->tp_rank = rank;
    b->tp_world = world;
    return 0;
}
