/* backend/cpu/attn_kernels.h: the inner loops of CPU attention, chosen once per call
 * (portable; AVX2 in attention_avx2.c at the avx2 level and up when head_dim % 8 == 0;
 * AVX-512 in attention_avx512.c at the avx512 level when head_dim % 16 == 0), each for
 * both cache element types (kv_dtype: float32 rows, or bf16 rows widened as they are
 * read, exactly). */
#ifndef CELER_ATTN_KERNELS_H
#define CELER_ATTN_KERNELS_H
#include "backend/backend.h"

/* b and v are cache rows of the table's element type */
typedef struct {
    float (*dot)(const float *a, const void *b, int n);                   /* sum a[i] b[i] */
    void (*scale_axpy)(float *o, float f, float e, const void *v, int n); /* o = o f + e v */
} attn_kernels;

/* [kv_dtype] */
extern const attn_kernels attn_kernels_avx2[2];
extern const attn_kernels attn_kernels_avx512[2];

/* The avx512 level's key-tiled attention (attention_avx512.c) for head_dim % 16 == 0
 * and head_dim <= ATTN_MAX_HD, with the query rows in the vector lanes, for 8 rows
 * and more (prefill): the rows (t, h) for tokens [t0, t1) and the heads of KV group
 * g, written to out as attention.c does; up to
 * ATTN_ROW_TILES(head_dim) tiles of 16 rows, (t1 - t0) * n_heads / n_kv rows in all,
 * share each key tile (their state, 2 x 16 x head_dim floats per tile, stays within
 * ATTN_ROW_TILES_MAX x 2 x 16 x 128). */
#define ATTN_MAX_HD 512
#define ATTN_ROW_TILES_MAX 4
#define ATTN_ROW_TILES(hd) ((hd) <= 128 ? 4 : (hd) <= 256 ? 2 : 1)
void attn_rows_avx512(const float *q, const int32_t *qpos, int t0, int t1, int g, const attn_kv *kv,
                      const attn_params *p, float *out);
/* Decode at the avx512 level (attn_decode_avx512.c), for T <= ATTN_DEC_MAX_T query
 * tokens and the shapes the tiles take: the T * n_heads rows of q [T, n_heads,
 * head_dim] against the view's rows [r_lo, r_hi) (r_lo a multiple of 16) of every KV
 * group. Leaves each row's softmax state for that range unnormalized and without
 * sinks: o [T * n_heads, head_dim] = sum_r e^(s_r - m) v_r, m [T * n_heads] the
 * largest visible score (-inf: none), l [T * n_heads] = sum_r e^(s_r - m); the
 * caller merges the ranges (flash-decoding). */
#define ATTN_DEC_MAX_T 8
void attn_decode_avx512(const float *q, const int32_t *qpos, int T, const attn_kv *kv, const attn_params *p,
                        int r_lo, int r_hi, float *o, float *m, float *l);

#ifdef __AVX512F__
#include <immintrin.h>
#include <stdint.h>
/* 16 elements of a cache row from element i: float32, or bf16 widened exactly (its
 * bits are the upper half of a float: a zero-extension and a shift) */
static inline __attribute__((always_inline)) __m512 kv_ld16(const void *p, long i, int bf16) {
    if (!bf16) return _mm512_loadu_ps((const float *)p + i);
    const __m256i h = _mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i));
    return _mm512_castsi512_ps(_mm512_slli_epi32(_mm512_cvtepu16_epi32(h), 16));
}
#endif
#endif
