/* backend/cpu/matmul.c: matrix products over every weight format: the portable
 * reference kernel, kernel selection per format, batch size and CPU (CELER_NO_SIMD=1
 * forces the portable one), and the split of output rows across the pool (each
 * thread reads a disjoint slice of the weight once per call, whatever T is). */
#include <assert.h>
#include <stdlib.h>
#include <string.h>

#include "base/settings.h"
#include "backend/cpu/cpu.h"

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>

/* AVX2 + FMA + F16C in the CPU and YMM state enabled by the OS (cpuid and xgetbv
 * directly: clang's __builtin_cpu_supports does not know "f16c"). */
static int cpu_probe_avx2(void) {
    unsigned a, b, c, d;
    if (!__get_cpuid(1, &a, &b, &c, &d)) return 0;
    const unsigned fma = 1u << 12, osxsave = 1u << 27, avx = 1u << 28, f16c = 1u << 29;
    if ((c & (fma | osxsave | avx | f16c)) != (fma | osxsave | avx | f16c)) return 0;
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 6) != 6) return 0; /* XMM and YMM state */
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d)) return 0;
    return (b >> 5) & 1; /* AVX2 */
}
#else
static int cpu_probe_avx2(void) { return 0; }
#endif

int cpu_has_avx2(void) {
    static int v = -1; /* a benign race: every thread computes the same value */
    if (v < 0) {
        v = !setting_flag(SET_CELER_NO_SIMD) && cpu_probe_avx2();
    }
    return v;
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

const char *mm_kernel_name(mm_kernel k) {
    if (k == mm_portable) return "portable";
    const char *n = cpu_has_avx2() ? mm_kernel_name_avx2(k) : NULL;
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
    /* 16-row alignment keeps each slice on whole cache lines of y and whole GEMM panels */
    pool_range((long)j->w->rows, task, n_tasks, 16, &lo, &hi);
    float *scratch = j->c->scratch + (long)pool_thread_index() * j->c->scratch_per;
    if (lo < hi) j->k(j->w, j->x, j->y, j->T, lo, hi, scratch);
}

/* Rows per task at least: small enough slices that a thread slowed down (or
 * descheduled by another process) leaves its last ones to the others, large enough
 * that claiming one costs nothing next to streaming it. */
#define MM_TASK_MIN_ROWS 64
#define MM_TASKS_PER_THREAD 4

void cpu_matmul(backend *b, const weight *w, const float *x, float *y, int T) {
    cpu_backend *c = b->impl;
    /* the per-thread scratch was sized by backend_cpu_new's max_cols */
    assert(MM_SCRATCH(w->cols) <= c->scratch_per && "weight wider than the backend's max_cols");
    mm_job j = {c, w, x, y, T, mm_select(w, T)};
    long tasks = (long)c->n_threads * MM_TASKS_PER_THREAD, most = (long)w->rows / MM_TASK_MIN_ROWS;
    if (tasks > most) tasks = most;
    if (tasks < c->n_threads) tasks = (long)w->rows < c->n_threads ? 1 : c->n_threads;
    pool_run(c->pool, (int)tasks, mm_task, &j);
}
