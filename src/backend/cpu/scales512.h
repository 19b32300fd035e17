/* backend/cpu/scales512.h: loading 16 group scales or biases of an affine weight
 * (bf16, f16 or f32) as float32 lanes, shared by the avx512 files (matmul_avx512.c,
 * matmul_avx512dot.c), which are compiled with the avx512 flags. */
#ifndef CELER_SCALES512_H
#define CELER_SCALES512_H
#include <immintrin.h>

#include "tensor/weight.h"

static inline __attribute__((always_inline)) __m512 bf16x16_mask(const uint16_t *p, __mmask16 m) {
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(_mm256_maskz_loadu_epi16(m, p)), 16));
}
static inline __attribute__((always_inline)) __m512 f16x16_mask(const uint16_t *p, __mmask16 m) {
    return _mm512_cvtph_ps(_mm256_maskz_loadu_epi16(m, p));
}

/* Scales or biases [i, i + 16) as float32, lanes outside mask zero. */
static inline __attribute__((always_inline)) __m512 scale16(const void *p, scale_type st, long i, __mmask16 m) {
    switch (st) {
    case SC_BF16: return bf16x16_mask((const uint16_t *)p + i, m);
    case SC_F16: return f16x16_mask((const uint16_t *)p + i, m);
    default: return _mm512_maskz_loadu_ps(m, (const float *)p + i);
    }
}
#endif
