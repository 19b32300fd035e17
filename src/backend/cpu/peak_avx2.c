/* backend/cpu/peak_avx2.c: the AVX2 level's register-only FMA loop (peak_loop.h, timed
 * by peak.c): 12 independent 8-lane FMA chains. */
#include <immintrin.h>

#include "backend/cpu/cpu.h"

#define PEAK_FN cpu_fma_chains_avx2
#define PEAK_V __m256
#define PEAK_SET1 _mm256_set1_ps
#define PEAK_FMA _mm256_fmadd_ps
#define PEAK_LOW _mm256_cvtss_f32
#define PEAK_LANES 8
#include "backend/cpu/peak_loop.h"
