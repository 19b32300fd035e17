/* backend/cpu/bandwidth.c: the read-bandwidth probe: each thread streams its own
 * slice of a large buffer; the best of several timed passes is reported. */
#include "backend/cpu/bandwidth.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/cpu.h"
#include "base/err.h"
#include "base/mem.h"
#include "base/pool.h"

typedef struct {
    const uint8_t *buf;
    size_t bytes;
    _Atomic uint64_t sink;
} bw_job;

static uint64_t read_sum_portable(const void *p, size_t n) {
    const uint64_t *v = p;
    uint64_t a = 0, b = 0, c = 0, d = 0;
    for (size_t i = 0; i < n / 8; i += 4) { a ^= v[i]; b ^= v[i + 1]; c ^= v[i + 2]; d ^= v[i + 3]; }
    return a ^ b ^ c ^ d;
}

static void bw_task(void *ctx, int task, int n_tasks) {
    bw_job *j = ctx;
    long lo, hi;
    pool_range((long)j->bytes, task, n_tasks, 4096, &lo, &hi);
    const int level = cpu_level();
    uint64_t s = level >= CPU_AVX512 ? cpu_read_sum_avx512(j->buf + lo, (size_t)(hi - lo))
                 : level >= CPU_AVX2 ? cpu_read_sum_avx2(j->buf + lo, (size_t)(hi - lo))
                                     : read_sum_portable(j->buf + lo, (size_t)(hi - lo));
    atomic_fetch_xor(&j->sink, s);
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

double cpu_read_bandwidth(int n_threads, size_t bytes) {
    bytes &= ~(size_t)4095;
    uint8_t *buf = mem_aligned(bytes, "bandwidth probe");
    pool *p = buf ? pool_new(n_threads) : NULL;
    if (!p) {
        free(buf);
        return -1;
    }
    for (size_t i = 0; i < bytes; i += 64) memset(buf + i, (int)(i >> 12), 64);
    bw_job j = {buf, bytes, 0};
    double best = 0;
    for (int pass = 0; pass < 7; pass++) {
        double t0 = now();
        pool_run(p, 16 * pool_threads(p), bw_task, &j); /* many slices: every thread gets a share */
        double gbs = (double)bytes / (now() - t0) / 1e9;
        if (pass > 0 && gbs > best) best = gbs; /* pass 0 warms the pages and the pool */
    }
    pool_free(p);
    free(buf);
    return best;
}
