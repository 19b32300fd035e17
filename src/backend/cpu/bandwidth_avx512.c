/* backend/cpu/bandwidth_avx512.c: the AVX-512 read loop of the bandwidth probe (four
 * streams, as bandwidth_avx2.c, with 64-byte loads: the width the avx512 GEMVs read). */
#include <immintrin.h>

#include "backend/cpu/bandwidth.h"

uint64_t cpu_read_sum_avx512(const void *p, size_t n) {
    const size_t q = n / 4 / 128 * 128; /* bytes per stream, whole 128-byte steps */
    const char *s0 = p, *s1 = s0 + q, *s2 = s1 + q, *s3 = s2 + q;
    __m512i a0 = _mm512_setzero_si512(), a1 = a0, a2 = a0, a3 = a0;
    for (size_t i = 0; i < q; i += 128) {
        a0 = _mm512_xor_si512(a0, _mm512_xor_si512(_mm512_load_si512(s0 + i), _mm512_load_si512(s0 + i + 64)));
        a1 = _mm512_xor_si512(a1, _mm512_xor_si512(_mm512_load_si512(s1 + i), _mm512_load_si512(s1 + i + 64)));
        a2 = _mm512_xor_si512(a2, _mm512_xor_si512(_mm512_load_si512(s2 + i), _mm512_load_si512(s2 + i + 64)));
        a3 = _mm512_xor_si512(a3, _mm512_xor_si512(_mm512_load_si512(s3 + i), _mm512_load_si512(s3 + i + 64)));
    }
    __m512i s = _mm512_xor_si512(_mm512_xor_si512(a0, a1), _mm512_xor_si512(a2, a3));
    return (uint64_t)_mm512_reduce_or_epi64(s) ^ (uint64_t)_mm_cvtsi128_si64(_mm512_castsi512_si128(s));
}
