/* backend/cpu/attn_kernels.h: the inner loops of CPU attention, chosen once per call
 * (portable; AVX2 in attention_avx2.c at the avx2 level and up when head_dim % 8 == 0;
 * AVX-512 in attention_avx512.c at the avx512 level when head_dim % 16 == 0). */
#ifndef CELER_ATTN_KERNELS_H
#define CELER_ATTN_KERNELS_H
typedef struct {
    float (*dot)(const float *a, const float *b, int n);                   /* sum a[i] b[i] */
    void (*scale_axpy)(float *o, float f, float e, const float *v, int n); /* o = o f + e v */
} attn_kernels;

extern const attn_kernels attn_kernels_avx2;
extern const attn_kernels attn_kernels_avx512;
#endif
