/* backend/cpu/matmul.c: matrix products over every weight format: the portable
 * reference kernel, kernel selection per format, batch size and kernel level
 * (cpu_level.c: avx512, avx2, generic), and the split of output rows across the pool (each
 * thread reads a disjoint slice of the weight once per call, whatever T is). */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "base/mem.h"

int cpu_has_avx2(void) { return cpu_level() >= CPU_AVX2; }

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

mm_kernel mm_select_level(const weight *w, int T, int level) {
    mm_kernel k = NULL;
    if (level > cpu_level_hw()) level = cpu_level_hw(); /* never an instruction the CPU lacks */
    if (level >= CPU_AVX512) k = mm_select_avx512(w, T);
    if (!k && level >= CPU_AVX2) k = mm_select_avx2(w, T);
    return k ? k : mm_portable;
}

mm_kernel mm_select(const weight *w, int T) { return mm_select_level(w, T, cpu_level()); }

const char *mm_kernel_name(mm_kernel k) {
    if (k == mm_portable) return "portable";
    if (k == mm_fast_portable_q8) return "portable q8 (fast)";
    if (k == mm_fast_portable_bf16) return "portable bf16 (fast)";
    const char *n = cpu_level_hw() >= CPU_AVX512 ? mm_kernel_name_avx512dot(k) : NULL;
    if (!n && cpu_level_hw() >= CPU_AVX512) n = mm_kernel_name_avx512(k);
    if (!n && cpu_level_hw() >= CPU_AVX2) n = mm_kernel_name_avx2(k);
    return n ? n : "?";
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
    /* 32-row alignment keeps each slice on whole cache lines of y and whole GEMM
     * panels (16 rows in the AVX2 GEMM, 32 in the AVX-512 one) */
    pool_range((long)j->w->rows, task, n_tasks, 32, &lo, &hi);
    float *scratch = j->c->scratch + (long)pool_thread_index() * j->c->scratch_per;
    if (lo < hi) j->k(j->w, j->x, j->y, j->T, lo, hi, scratch);
}

/* Rows per task at least: small enough slices that a thread slowed down (or
 * descheduled by another process) leaves its last ones to the others, large enough
 * that claiming one costs nothing next to streaming it. */
#define MM_TASK_MIN_ROWS 64
#define MM_TASKS_PER_THREAD 4

typedef struct {
    const weight *w;
    const float *x;
    int T, prep;
    void *out;
} prep_job;

static void prep_task(void *ctx, int task, int n_tasks) {
    prep_job *p = ctx;
    long lo, hi;
    pool_range(p->T, task, n_tasks, 1, &lo, &hi);
    if (lo < hi) mm_fast_prep_rows(p->w, p->x, (int)lo, (int)hi, p->prep, p->out);
}

/* The fast precision's kernel for w at T, with x prepared into c->xprep; 0 when the
 * product has no rounding (or the buffer cannot grow: then it runs exact). */
static int fast_prepare(cpu_backend *c, const weight *w, const float *x, int T, mm_kernel *k, const float **xk) {
    mm_fast f;
    if (!mm_fast_select_level(w, T, cpu_level(), &f)) return 0;
    const long need = mm_fast_prep_bytes(w, T, f.prep);
    if (need > c->xprep_bytes) {
        void *p = mem_aligned((size_t)need, "prepared activations");
        if (!p) return 0;
        free(c->xprep);
        c->xprep = p;
        c->xprep_bytes = need;
    }
    prep_job pj = {w, x, T, f.prep, c->xprep};
    int tasks = T < c->n_threads ? T : c->n_threads;
    pool_run(c->pool, tasks, prep_task, &pj);
    *k = f.k;
    *xk = c->xprep;
    return 1;
}

void cpu_matmul(backend *b, const weight *w, const float *x, float *y, int T) {
    cpu_backend *c = b->impl;
    /* the per-thread scratch was sized by backend_cpu_new's max_cols */
    assert(MM_SCRATCH(w->cols) <= c->scratch_per && "weight wider than the backend's max_cols");
    mm_job j = {c, w, x, y, T, NULL};
    if (!(b->fast && fast_prepare(c, w, x, T, &j.k, &j.x))) j.k = mm_select(w, T);
    long tasks = (long)c->n_threads * MM_TASKS_PER_THREAD, most = (long)w->rows / MM_TASK_MIN_ROWS;
    if (tasks > most) tasks = most;
    if (tasks < c->n_threads) tasks = (long)w->rows < c->n_threads ? 1 : c->n_threads;
    pool_run(c->pool, (int)tasks, mm_task, &j);
}
