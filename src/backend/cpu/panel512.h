/* backend/cpu/panel512.h: GEMM panels of 4- and 8-bit affine weights built straight
 * from the codes with AVX-512, 16 rows at a time through a register transpose, shared
 * by the exact GEMM (matmul_avx512.c: float32 panels) and the fast one
 * (matmul_avx512dot.c: bf16 pairs). Both compute code * scale + bias with one FMA, as
 * the row dequantization they replace, so a panel has the same bits either way; what
 * goes is the float32 staging buffer and its second pass. Included only by files
 * compiled with the avx512 flags. */
#ifndef CELER_PANEL512_H
#define CELER_PANEL512_H
#include <immintrin.h>

#include "tensor/dtype.h"
#include "tensor/weight.h"

/* In place: m[i] (row i, 16 u32 lanes) becomes column i of the 16 x 16 block. */
static inline __attribute__((always_inline)) void transpose16(__m512i m[16]) {
    __m512i t[16], u[16];
    for (int i = 0; i < 8; i++) {
        t[2 * i] = _mm512_unpacklo_epi32(m[2 * i], m[2 * i + 1]);
        t[2 * i + 1] = _mm512_unpackhi_epi32(m[2 * i], m[2 * i + 1]);
    }
    /* u[4i + j], 128-bit lane L: column 4L + j of rows 4i .. 4i + 3 */
    for (int i = 0; i < 4; i++) {
        u[4 * i] = _mm512_unpacklo_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 1] = _mm512_unpackhi_epi64(t[4 * i], t[4 * i + 2]);
        u[4 * i + 2] = _mm512_unpacklo_epi64(t[4 * i + 1], t[4 * i + 3]);
        u[4 * i + 3] = _mm512_unpackhi_epi64(t[4 * i + 1], t[4 * i + 3]);
    }
    for (int j = 0; j < 4; j++) {
        const __m512i x0 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0x44), x1 = _mm512_shuffle_i32x4(u[j], u[4 + j], 0xee);
        const __m512i y0 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0x44), y1 = _mm512_shuffle_i32x4(u[8 + j], u[12 + j], 0xee);
        m[j] = _mm512_shuffle_i32x4(x0, y0, 0x88);
        m[4 + j] = _mm512_shuffle_i32x4(x0, y0, 0xdd);
        m[8 + j] = _mm512_shuffle_i32x4(x1, y1, 0x88);
        m[12 + j] = _mm512_shuffle_i32x4(x1, y1, 0xdd);
    }
}

/* One scale or bias of an affine weight as float32 */
static inline __attribute__((always_inline)) float affine_sc(const void *p, scale_type st, long i) {
    switch (st) {
    case SC_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    case SC_F16: return f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* Row row's scale and bias for group g as broadcast lanes; returns its codes from
 * column c0. */
static inline __attribute__((always_inline)) const uint8_t *affine_row_at(const weight *w, long row, long g, long c0,
                                                                         __m512 *sc, __m512 *bi) {
    const long ng = (long)w->cols / w->group;
    *sc = _mm512_set1_ps(affine_sc(w->scales, w->stype, row * ng + g));
    *bi = _mm512_set1_ps(affine_sc(w->biases, w->stype, row * ng + g));
    return (const uint8_t *)w->data + row * ((long)w->cols * w->bits / 8) + c0 * w->bits / 8;
}

/* Whether the builders below take w: 4- or 8-bit codes, groups and columns in whole
 * 32-column steps (so a step never straddles a group). */
static inline int affine_panel_ok(const weight *w) {
    return w->fmt == WF_AFFINE && (w->bits == 4 || w->bits == 8) && w->cols % 32 == 0 && w->group % 32 == 0;
}

/* panel float32 [cols, 32] for the 32 weight rows from r (affine_panel_ok): per row 16
 * codes to 16 lanes (4-bit: each byte twice, shifted by 0 or 4), dequantized; 16 rows
 * transposed into the panel's 16 columns. */
static inline void affine_panel_f32(const weight *w, long r, float *panel) {
    const long K = (long)w->cols, G = w->group;
    const __m512i mask = _mm512_set1_epi32(w->bits == 4 ? 0xf : 0xff);
    const __m512i shift = _mm512_set_epi32(4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0, 4, 0);
    for (long c0 = 0; c0 < K; c0 += 16) {
        const long g = c0 / G;
        for (int h = 0; h < 2; h++) {
            __m512i m[16];
            for (int i = 0; i < 16; i++) {
                __m512 sc, bi;
                const uint8_t *p = affine_row_at(w, r + 16 * h + i, g, c0, &sc, &bi);
                __m512i v;
                if (w->bits == 4) {
                    const __m128i b = _mm_loadl_epi64((const __m128i *)p);
                    v = _mm512_srlv_epi32(_mm512_cvtepu8_epi32(_mm_unpacklo_epi8(b, b)), shift);
                } else {
                    v = _mm512_cvtepu8_epi32(_mm_loadu_si128((const __m128i *)p));
                }
                v = _mm512_and_si512(v, mask);
                m[i] = _mm512_castps_si512(_mm512_fmadd_ps(_mm512_cvtepi32_ps(v), sc, bi));
            }
            transpose16(m);
            for (int k = 0; k < 16; k++) _mm512_store_si512(panel + (c0 + k) * 32 + 16 * h, m[k]);
        }
    }
}
#endif
