/* backend/cpu/attention_avx2.c: the AVX2+FMA inner loops of CPU attention (q.k dot
 * products and the weighted sum of values) over float32 or bf16 cache rows, used when
 * the CPU has them and the head dimension is a multiple of 8. Eight partial sums
 * change the summation order, not the precision (they are usually closer to the exact
 * sum than one running sum). */
#include <immintrin.h>
#include <stdint.h>

#include "backend/cpu/attn_kernels.h"

/* 8 elements of a cache row from element i: float32, or bf16 widened (the bf16 bits
 * are a float's upper half) */
static inline __attribute__((always_inline)) __m256 ld8(const void *p, int i, int bf16) {
    if (!bf16) return _mm256_loadu_ps((const float *)p + i);
    const __m128i h = _mm_loadu_si128((const __m128i *)((const uint16_t *)p + i));
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

static inline __attribute__((always_inline)) float dot_avx2(const float *a, const void *b, int n, int bf16) {
    __m256 s0 = _mm256_setzero_ps(), s1 = s0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), ld8(b, i, bf16), s0);
        s1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), ld8(b, i + 8, bf16), s1);
    }
    for (; i + 8 <= n; i += 8) s0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), ld8(b, i, bf16), s0);
    s0 = _mm256_add_ps(s0, s1);
    __m128 h = _mm_add_ps(_mm256_castps256_ps128(s0), _mm256_extractf128_ps(s0, 1));
    h = _mm_add_ps(h, _mm_movehl_ps(h, h));
    h = _mm_add_ss(h, _mm_movehdup_ps(h));
    return _mm_cvtss_f32(h);
}

/* o [n] = o * f + e * v */
static inline __attribute__((always_inline)) void scale_axpy_avx2(float *o, float f, float e, const void *v, int n,
                                                                  int bf16) {
    const __m256 vf = _mm256_set1_ps(f), ve = _mm256_set1_ps(e);
    for (int i = 0; i < n; i += 8)
        _mm256_storeu_ps(o + i, _mm256_fmadd_ps(ve, ld8(v, i, bf16), _mm256_mul_ps(vf, _mm256_loadu_ps(o + i))));
}

static float dot_f32(const float *a, const void *b, int n) { return dot_avx2(a, b, n, 0); }
static float dot_bf16(const float *a, const void *b, int n) { return dot_avx2(a, b, n, 1); }
static void axpy_f32(float *o, float f, float e, const void *v, int n) { scale_axpy_avx2(o, f, e, v, n, 0); }
static void axpy_bf16(float *o, float f, float e, const void *v, int n) { scale_axpy_avx2(o, f, e, v, n, 1); }

const attn_kernels attn_kernels_avx2[2] = {{dot_f32, axpy_f32}, {dot_bf16, axpy_bf16}};
