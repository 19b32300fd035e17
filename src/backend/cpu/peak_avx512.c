/* backend/cpu/peak_avx512.c: the AVX-512 level's register-only FMA loop (peak.c):
 * 12 independent 16-lane FMA chains. (On Zen 4 a 512-bit FMA occupies both 256-bit
 * FMA pipes, so this peak equals the AVX2 one there; on processors with two 512-bit
 * FMA units it is twice it.) */
#include <immintrin.h>

#include "backend/cpu/cpu.h"

double cpu_fma_chains_avx512(long iters, float *sink) {
    __m512 a[12], m = _mm512_set1_ps(0.999999f), c = _mm512_set1_ps(1e-7f);
    for (int i = 0; i < 12; i++) a[i] = _mm512_set1_ps((float)i);
    for (long k = 0; k < iters; k++) {
#define STEP(i) a[i] = _mm512_fmadd_ps(a[i], m, c);
        STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6) STEP(7) STEP(8) STEP(9) STEP(10) STEP(11)
#undef STEP
    }
    float s = 0;
    for (int i = 0; i < 12; i++) s += _mm512_cvtss_f32(a[i]);
    *sink = s;
    return 12.0 * 32.0 * (double)iters;
}
