/* backend/cpu/peak.c: the processor's float32 FMA peak at a kernel level, measured
 * with a register-only loop (12 independent FMA chains, no memory traffic) on
 * n_threads threads at once: the ceiling prefill GFLOP/s are judged against
 * (`celer bench`, bench/bench_mm). The loops live in peak_avx2.c / peak_avx512.c;
 * the generic level's is here. */
#include <pthread.h>
#include <stdlib.h>
#include <time.h>

#include "backend/cpu/cpu.h"
#include "celer.h"

/* The thread's own CPU time: a register-only loop's rate is a property of the core,
 * and other processes' load on a shared machine must not lower it. */
static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* The generic level: the portable kernels are compiled for the x86-64 baseline,
 * where the compiler's vectors are SSE2's 4 lanes and there is no FMA: 12 chains of
 * a 4-lane multiply and add. Returns the flops done. */
#if defined(__SSE2__)
#include <emmintrin.h>
static double chains_generic(long iters, float *sink) {
    __m128 a[12], m = _mm_set1_ps(0.999999f), c = _mm_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) a[i] = _mm_set1_ps((float)i);
    for (long k = 0; k < iters; k++) {
#define STEP(i) a[i] = _mm_add_ps(_mm_mul_ps(a[i], m), c);
        STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6) STEP(7) STEP(8) STEP(9) STEP(10) STEP(11)
#undef STEP
    }
    float s = 0;
    for (int i = 0; i < 12; i++) s += _mm_cvtss_f32(a[i]);
    *sink = s;
    return 12.0 * 8.0 * (double)iters;
}
#else
static double chains_generic(long iters, float *sink) {
    float a[12], m = 0.999999f, c = 1e-7f;
    for (int i = 0; i < 12; i++) a[i] = (float)i;
    for (long k = 0; k < iters; k++)
        for (int i = 0; i < 12; i++) a[i] = a[i] * m + c;
    float s = 0;
    for (int i = 0; i < 12; i++) s += a[i];
    *sink = s;
    return 24.0 * (double)iters;
}
#endif

typedef struct {
    int level;
    double gflops;
    float sink;
} peak_job;

static void *peak_thread(void *arg) {
    peak_job *j = arg;
    for (int rep = 0; rep < 3; rep++) {
        const long iters = 10000000;
        double t0 = now(), fl;
        switch (j->level) {
        case CPU_AVX512: fl = cpu_fma_chains_avx512(iters, &j->sink); break;
        case CPU_AVX2: fl = cpu_fma_chains_avx2(iters, &j->sink); break;
        default: fl = chains_generic(iters, &j->sink); break;
        }
        double g = fl / (now() - t0) / 1e9;
        if (g > j->gflops) j->gflops = g;
    }
    return NULL;
}

double cpu_fma_peak(int level, int n_threads) {
    if (level > cpu_level_hw() || level < 0 || n_threads < 1 || n_threads > 1024) return -1;
    peak_job *jobs = calloc((size_t)n_threads, sizeof *jobs);
    pthread_t *th = calloc((size_t)n_threads, sizeof *th);
    double total = -1;
    if (jobs && th) {
        int started = 0;
        for (int i = 0; i < n_threads; i++) {
            jobs[i].level = level;
            if (i > 0 && pthread_create(&th[i], NULL, peak_thread, &jobs[i]) != 0) break;
            started = i + 1;
        }
        if (started == n_threads) peak_thread(&jobs[0]);
        for (int i = 1; i < started; i++) pthread_join(th[i], NULL);
        if (started == n_threads) {
            total = 0;
            for (int i = 0; i < n_threads; i++) total += jobs[i].gflops;
        }
    }
    free(jobs);
    free(th);
    return total;
}

double celer_cpu_fma_peak(int n_threads) { return cpu_fma_peak(cpu_level(), n_threads); }
