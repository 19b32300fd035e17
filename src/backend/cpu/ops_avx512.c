/* backend/cpu/ops_avx512.c: the row-wise ops' inner loops at the avx512 level (called
 * by cpu.c only when cpu_level() says so). SiLU's exp was glibc's scalar expf, one call
 * an element (~2% of a q4 pp512 of qwen3-0.6b, with the loop around it another 2%). */
#include <immintrin.h>

#include "backend/cpu/cpu.h"
#include "backend/cpu/exp512.h"

/* silu(g) = g / (1 + e^-g), with exp512's argument kept <= 0: for g >= 0 it is
 * g / (1 + e^-g); for g < 0, g e^g / (1 + e^g). */
static inline __m512 silu16(__m512 g) {
    const __m512 e = exp512(_mm512_sub_ps(_mm512_setzero_ps(), _mm512_abs_ps(g))); /* e^-|g| */
    const __m512 one = _mm512_set1_ps(1.0f);
    const __mmask16 neg = _mm512_cmp_ps_mask(g, _mm512_setzero_ps(), _CMP_LT_OQ);
    const __m512 num = _mm512_mask_mul_ps(g, neg, g, e); /* g, or g e^g */
    return _mm512_div_ps(num, _mm512_add_ps(one, e));
}

void glu_silu_avx512(const float *g, const float *u, float *y, long n) {
    long i = 0;
    for (; i + 16 <= n; i += 16)
        _mm512_storeu_ps(y + i, _mm512_mul_ps(silu16(_mm512_loadu_ps(g + i)), _mm512_loadu_ps(u + i)));
    if (i < n) {
        const __mmask16 m = (__mmask16)((1u << (n - i)) - 1);
        _mm512_mask_storeu_ps(y + i, m, _mm512_mul_ps(silu16(_mm512_maskz_loadu_ps(m, g + i)), _mm512_maskz_loadu_ps(m, u + i)));
    }
}
