/* backend/cpu/bandwidth_avx2.c: the AVX2 read loop of the bandwidth probe. */
#include <immintrin.h>

#include "backend/cpu/bandwidth.h"

uint64_t cpu_read_sum_avx2(const void *p, size_t n) {
    const __m256i *v = p;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < n / 32; i += 8) {
        a0 = _mm256_xor_si256(a0, _mm256_load_si256(v + i));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256(v + i + 1));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256(v + i + 2));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256(v + i + 3));
        a0 = _mm256_xor_si256(a0, _mm256_load_si256(v + i + 4));
        a1 = _mm256_xor_si256(a1, _mm256_load_si256(v + i + 5));
        a2 = _mm256_xor_si256(a2, _mm256_load_si256(v + i + 6));
        a3 = _mm256_xor_si256(a3, _mm256_load_si256(v + i + 7));
    }
    __m256i s = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    return (uint64_t)_mm256_extract_epi64(s, 0) ^ (uint64_t)_mm256_extract_epi64(s, 3);
}
