/* backend/cpu/matmul.c: matrix products over every weight format. Splits output
 * rows across the pool (each thread reads a disjoint slice of the weight once per
 * call, whatever T is) and picks a kernel per format, batch size and CPU. */
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"

int cpu_has_avx2(void) {
#if defined(__x86_64__) && defined(__GNUC__)
    static int v = -1;
    if (v < 0) {
        const char *e = getenv("CELER_NO_SIMD");
        v = !(e && *e && strcmp(e, "0") != 0) && __builtin_cpu_supports("avx2") &&
            __builtin_cpu_supports("fma") && __builtin_cpu_supports("f16c");
    }
    return v;
#else
    return 0;
#endif
}

/* Dequantizes up to MM_TILE rows into scratch, then dots each with every x row. */
void mm_portable(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch) {
    long n = (long)w->cols;
    for (long r = r0; r < r1; r += MM_TILE) {
        long nr = r1 - r < MM_TILE ? r1 - r : MM_TILE;
        for (long i = 0; i < nr; i++) weight_row_f32(w, r + i, scratch + i * n);
        for (int t = 0; t < T; t++) {
            const float *xt = x + (long)t * n;
            for (long i = 0; i < nr; i++) {
                const float *wr = scratch + i * n;
                float acc[8] = {0};
                long j = 0;
                for (; j + 8 <= n; j += 8)
                    for (int k = 0; k < 8; k++) acc[k] += wr[j + k] * xt[j + k];
                float s = 0;
                for (; j < n; j++) s += wr[j] * xt[j];
                s += ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
                y[(long)t * w->rows + r + i] = s;
            }
        }
    }
}

mm_kernel mm_select(const weight *w, int T) {
    mm_kernel k = cpu_has_avx2() ? mm_select_avx2(w, T) : NULL;
    return k ? k : mm_portable;
}

typedef struct {
    cpu_backend *c;
    const weight *w;
    const float *x;
    float *y;
    int T;
    mm_kernel k;
} mm_job;

static void mm_task(void *ctx, int task, int n_tasks) {
    mm_job *j = ctx;
    long lo, hi;
    /* 16-row alignment keeps each thread's slice on whole cache lines of y */
    pool_range((long)j->w->rows, task, n_tasks, 16, &lo, &hi);
    if (lo < hi) j->k(j->w, j->x, j->y, j->T, lo, hi, j->c->scratch + (long)task * j->c->scratch_per);
}

void cpu_matmul(backend *b, const weight *w, const float *x, float *y, int T) {
    cpu_backend *c = b->impl;
    mm_job j = {c, w, x, y, T, mm_select(w, T)};
    pool_run(c->pool, c->n_threads, mm_task, &j);
}
