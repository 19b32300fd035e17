/* backend/cpu/bandwidth_avx2.c: the AVX2 read loop of the bandwidth probe. It reads
 * four streams at once, as the matrix-vector kernels do (several rows in flight):
 * one sequential stream per core leaves memory-level parallelism unused and reads
 * slower than the kernels, which would make ratios to it exceed 100%. */
#include <immintrin.h>

#include "backend/cpu/bandwidth.h"

uint64_t cpu_read_sum_avx2(const void *p, size_t n) {
    const size_t q = n / 4 / 128 * 128; /* bytes per stream, whole 128-byte steps */
    const char *s0 = p, *s1 = s0 + q, *s2 = s1 + q, *s3 = s2 + q;
    __m256i a0 = _mm256_setzero_si256(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < q; i += 64) {
        a0 = _mm256_xor_si256(a0, _mm256_xor_si256(_mm256_load_si256((const __m256i *)(s0 + i)),
                                                    _mm256_load_si256((const __m256i *)(s0 + i + 32))));
        a1 = _mm256_xor_si256(a1, _mm256_xor_si256(_mm256_load_si256((const __m256i *)(s1 + i)),
                                                    _mm256_load_si256((const __m256i *)(s1 + i + 32))));
        a2 = _mm256_xor_si256(a2, _mm256_xor_si256(_mm256_load_si256((const __m256i *)(s2 + i)),
                                                    _mm256_load_si256((const __m256i *)(s2 + i + 32))));
        a3 = _mm256_xor_si256(a3, _mm256_xor_si256(_mm256_load_si256((const __m256i *)(s3 + i)),
                                                    _mm256_load_si256((const __m256i *)(s3 + i + 32))));
    }
    __m256i s = _mm256_xor_si256(_mm256_xor_si256(a0, a1), _mm256_xor_si256(a2, a3));
    return (uint64_t)_mm256_extract_epi64(s, 0) ^ (uint64_t)_mm256_extract_epi64(s, 3);
}
