/* backend/cpu/attention_avx512.c: the AVX-512 inner loops of CPU attention (q.k dot
 * products and the weighted sum of values), used at the avx512 level when the head
 * dimension is a multiple of 16. */
#include <immintrin.h>

#include "backend/cpu/attn_kernels.h"

static float dot_avx512(const float *a, const float *b, int n) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), _mm512_loadu_ps(b + i + 16), s1);
    }
    if (i < n) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), _mm512_loadu_ps(b + i), s0);
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

/* o [n] = o * f + e * v */
static void scale_axpy_avx512(float *o, float f, float e, const float *v, int n) {
    const __m512 vf = _mm512_set1_ps(f), ve = _mm512_set1_ps(e);
    for (int i = 0; i < n; i += 16)
        _mm512_storeu_ps(o + i, _mm512_fmadd_ps(ve, _mm512_loadu_ps(v + i), _mm512_mul_ps(vf, _mm512_loadu_ps(o + i))));
}

const attn_kernels attn_kernels_avx512 = {dot_avx512, scale_axpy_avx512};
