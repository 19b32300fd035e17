/* backend/cpu/attention_avx2.c: the AVX2+FMA inner loops of CPU attention (q.k dot
 * products and the weighted sum of values), used when the CPU has them and the head
 * dimension is a multiple of 8. Eight partial sums change the summation order, not
 * the precision (they are usually closer to the exact sum than one running sum). */
#include <immintrin.h>

#include "backend/cpu/attn_kernels.h"

static float dot_avx2(const float *a, const float *b, int n) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), s0);
    s0 = _mm256_add_ps(s0, s1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* o [n] = o * f + e * v */
static void scale_axpy_avx2(float *o, float f, float e, const float *v, int n) {
    const __m256 vf = _mm256_set1_ps(f), ve = _mm256_set1_ps(e);
    for (int i = 0; i < n; i += 8)
        _mm256_storeu_ps(o + i, _mm256_fmadd_ps(ve, _mm256_loadu_ps(v + i), _mm256_mul_ps(vf, _mm256_loadu_ps(o + i))));
}

const attn_kernels attn_kernels_avx2 = {dot_avx2, scale_axpy_avx2};
