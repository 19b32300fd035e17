/* backend/cpu/peak_avx2.c: the AVX2 level's register-only FMA loop (peak.c):
 * 12 independent 8-lane FMA chains, enough to cover the FMA latency on both pipes. */
#include <immintrin.h>

#include "backend/cpu/cpu.h"

double cpu_fma_chains_avx2(long iters, float *sink) {
    __m256 a[12], m = _mm256_set1_ps(0.999999f), c = _mm256_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) a[i] = _mm256_set1_ps((float)i);
    for (long k = 0; k < iters; k++) {
#define STEP(i) a[i] = _mm256_fmadd_ps(a[i], m, c);
        STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6) STEP(7) STEP(8) STEP(9) STEP(10) STEP(11)
#undef STEP
    }
    float s = 0;
    for (int i = 0; i < 12; i++) s += _mm256_cvtss_f32(a[i]);
    *sink = s;
    return 12.0 * 16.0 * (double)iters;
}
