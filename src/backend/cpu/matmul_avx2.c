/* backend/cpu/matmul_avx2.c: AVX2+FMA matrix products (compiled with -mavx2 -mfma
 * -mf16c, called only when the CPU has them). */
#include <immintrin.h>

#include "backend/cpu/cpu.h"

static inline float hsum256(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

static inline __m256 bf16x8(const uint16_t *p) {
    __m128i h = _mm_loadu_si128((const __m128i *)p);
    return _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_cvtepu16_epi32(h), 16));
}

/* bf16 rows, one x row: 4 rows at a time, 32 columns per step. */
static void mm_bf16_vec(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch) {
    (void)scratch;
    long n = (long)w->cols;
    for (int t = 0; t < T; t++) {
        const float *xt = x + (long)t * n;
        for (long r = r0; r < r1; r++) {
            const uint16_t *wr = (const uint16_t *)w->data + r * n;
            __m256 a0 = _mm256_setzero_ps(), a1 = a0, a2 = a0, a3 = a0;
            long j = 0;
            for (; j + 32 <= n; j += 32) {
                a0 = _mm256_fmadd_ps(bf16x8(wr + j), _mm256_loadu_ps(xt + j), a0);
                a1 = _mm256_fmadd_ps(bf16x8(wr + j + 8), _mm256_loadu_ps(xt + j + 8), a1);
                a2 = _mm256_fmadd_ps(bf16x8(wr + j + 16), _mm256_loadu_ps(xt + j + 16), a2);
                a3 = _mm256_fmadd_ps(bf16x8(wr + j + 24), _mm256_loadu_ps(xt + j + 24), a3);
            }
            for (; j + 8 <= n; j += 8) a0 = _mm256_fmadd_ps(bf16x8(wr + j), _mm256_loadu_ps(xt + j), a0);
            float s = hsum256(_mm256_add_ps(_mm256_add_ps(a0, a1), _mm256_add_ps(a2, a3)));
            for (; j < n; j++) {
                uint32_t u = (uint32_t)wr[j] << 16;
                float f;
                __builtin_memcpy(&f, &u, 4);
                s += f * xt[j];
            }
            y[(long)t * w->rows + r] = s;
        }
    }
}

mm_kernel mm_select_avx2(const weight *w, int T) {
    (void)T;
    if (w->fmt == WF_BF16) return mm_bf16_vec;
    return NULL;
}
