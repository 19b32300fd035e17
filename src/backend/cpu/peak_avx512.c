/* backend/cpu/peak_avx512.c: the AVX-512 level's register-only FMA loop (peak_loop.h,
 * timed by peak.c): 12 independent 16-lane FMA chains. (On Zen 4 a 512-bit FMA
 * occupies both 256-bit FMA pipes, so this peak equals the AVX2 one there; on
 * processors with two 512-bit FMA units it is twice it.) */
#include <immintrin.h>

#include "backend/cpu/cpu.h"

#define PEAK_FN cpu_fma_chains_avx512
#define PEAK_V __m512
#define PEAK_SET1 _mm512_set1_ps
#define PEAK_FMA _mm512_fmadd_ps
#define PEAK_LOW _mm512_cvtss_f32
#define PEAK_LANES 16
#include "backend/cpu/peak_loop.h"
