/* backend/cpu/q4codes512.h: reading the codes of a 4-bit affine weight 128 columns
 * (64 bytes) at a time, shared by the AVX-512 decode kernels (matmul_avx512dot.c's
 * q4dot, q4w16_avx512dot.c), which are compiled with the avx512 flags.
 * A 64-byte load holds 32 words, word i the codes of columns 4i..4i+3 of the chunk in
 * its four nibbles; nibble k of every word is a vector of 32 codes (columns 4i + k),
 * so the activations are reordered once per product to match (per 128-column chunk,
 * four runs of 32, run k holding columns 4i + k). A 32-bit lane L of any of the four
 * nibble vectors covers columns [8L, 8L + 8) of the chunk, inside one group when the
 * group size is a multiple of 8. */
#ifndef CELER_Q4CODES512_H
#define CELER_Q4CODES512_H
#include <immintrin.h>

#include "tensor/weight.h"

/* Bytes ahead of the code load that the decode kernels ask for: with the hardware
 * prefetcher alone the codes arrived late (one token's products on 2 threads: 9.5-11.3
 * ms; 2 KiB ahead 8.7-10.5, 4 KiB 8.0-9.8; 8 and 16 KiB, tried on one loaded core only,
 * no better; 2026-12-02, docs/benchmarks/cpu-core.md) */
#ifndef Q4_PF
#define Q4_PF 4096
#endif

/* What every pass keeps in registers: the group size's shift and the chunk lanes'
 * first columns (for each lane's group), the nibble mask and bf16 128. */
typedef struct {
    __m128i gshift;
    __m512i lane8, lo4, b128;
} q4k;

static inline __attribute__((always_inline)) q4k q4k_of(const weight *w) {
    q4k k;
    k.gshift = _mm_cvtsi32_si128(__builtin_ctzl((unsigned long)w->group));
    k.lane8 = _mm512_setr_epi32(0, 8, 16, 24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120);
    k.lo4 = _mm512_set1_epi16(0x000f);
    k.b128 = _mm512_set1_epi16(0x4300);
    return k;
}

/* The 64 code bytes of the chunk at column c of a row of n columns (zero past n). */
static inline __attribute__((always_inline)) __m512i q4_load(const uint8_t *row, long c, long n) {
    const long left = (n - c) / 2;
    return left >= 64 ? _mm512_loadu_si512(row + c / 2) : _mm512_maskz_loadu_epi8(((__mmask64)1 << left) - 1, row + c / 2);
}

/* Each lane's group within the 16 groups from g0, for the chunk at column c. */
static inline __attribute__((always_inline)) __m512i q4_lane_groups(const q4k *k, long c, long g0, long G) {
    return _mm512_srl_epi32(_mm512_add_epi32(_mm512_set1_epi32((int)(c - g0 * G)), k->lane8), k->gshift);
}

/* The mask of the groups [g0, g0 + 16) that exist among ng. */
static inline __attribute__((always_inline)) __mmask16 q4_group_mask(long ng, long g0) {
    return ng - g0 >= 16 ? (__mmask16)0xffff : (__mmask16)((1u << (ng - g0)) - 1);
}
#endif
