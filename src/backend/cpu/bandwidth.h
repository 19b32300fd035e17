/* backend/cpu/bandwidth.h: measures this machine's memory read bandwidth, the limit
 * that batch-1 decode is judged against. */
#ifndef CELER_CPU_BANDWIDTH_H
#define CELER_CPU_BANDWIDTH_H
#include <stddef.h>
#include <stdint.h>

/* GB/s (1e9 bytes/s) reading a buffer far larger than the caches with n_threads,
 * best of several passes; -1 on error. */
double cpu_read_bandwidth(int n_threads, size_t bytes);
/* Sums the first 4 * floor(n / 512) * 128 bytes of p (4 interleaved streams) with
 * wide loads so the reads cannot be elided. */
uint64_t cpu_read_sum_avx2(const void *p, size_t n);
uint64_t cpu_read_sum_avx512(const void *p, size_t n);
#endif
