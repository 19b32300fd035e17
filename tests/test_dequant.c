/* tests/test_dequant.c: dequantization against hand-computed values: MLX affine codes
 * of every width (2, 3, 4, 5, 6, 8; including codes straddling 32-bit words) and group
 * size (32, 64, 128) with bf16, f16 and f32 scales and biases; MXFP4 e2m1 codes with
 * e8m0 scales; and the bf16 / f16 / e8m0 scalar conversions at their edges. */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "harness.h"
#include "tensor/dtype.h"
#include "tensor/weight.h"

static float bits_f32(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* --------------------------------------------------------- affine_code */

/* Each packed word below was written out bit by bit; the comment gives the codes. */
static void codes_2bit(void) {
    /* 0xE4 = 11 10 01 00: codes 0..3 are 0, 1, 2, 3; code 15 sits in bits 30-31 */
    const uint32_t row[2] = {0xC00000E4u, 0x00000002u};
    CHECK(affine_code(row, 2, 0) == 0, "code 0");
    CHECK(affine_code(row, 2, 1) == 1, "code 1");
    CHECK(affine_code(row, 2, 2) == 2, "code 2");
    CHECK(affine_code(row, 2, 3) == 3, "code 3");
    CHECK(affine_code(row, 2, 4) == 0, "code 4");
    CHECK(affine_code(row, 2, 15) == 3, "code 15");
    CHECK(affine_code(row, 2, 16) == 2, "code 16 (first of word 1)");
}

static void codes_3bit(void) {
    /* 3-bit codes: code 10 covers bits 30, 31 of word 0 and bit 0 of word 1;
     * code 21 covers bits 63 (word 1 bit 31) and bits 0, 1 of word 2. */
    uint32_t row[3] = {0, 0, 0};
    row[0] = 0x5u << 3;      /* code 1 = 5 */
    row[0] |= 1u << 30;      /* code 10 low bit */
    row[1] = 1u;             /* code 10 high bit (bit 2 of the code) -> code 10 = 0b101 = 5 */
    row[1] |= 1u << 31;      /* code 21 low bit */
    row[2] = 0xFu;           /* bits 64-67: code 21 bits 1, 2 -> code 21 = 0b111 = 7;
                              * code 22 = bits 66-68 = 0b011 = 3 */
    CHECK(affine_code(row, 3, 0) == 0, "code 0");
    CHECK(affine_code(row, 3, 1) == 5, "code 1 = %u", affine_code(row, 3, 1));
    CHECK(affine_code(row, 3, 10) == 5, "code 10 straddling words 0/1 = %u", affine_code(row, 3, 10));
    CHECK(affine_code(row, 3, 11) == 0, "code 11");
    CHECK(affine_code(row, 3, 21) == 7, "code 21 straddling words 1/2 = %u", affine_code(row, 3, 21));
    CHECK(affine_code(row, 3, 22) == 3, "code 22 = %u", affine_code(row, 3, 22));
    CHECK(affine_code(row, 3, 31) == 0, "code 31");
}

static void codes_4bit(void) {
    const uint32_t row[2] = {0x76543210u, 0xFEDCBA98u};
    for (int j = 0; j < 16; j++) CHECK(affine_code(row, 4, j) == (uint32_t)j, "code %d = %u", j, affine_code(row, 4, j));
}

static void codes_5bit(void) {
    /* code 6 covers bits 30-34: word 0 bits 30-31 (low two bits), word 1 bits 0-2;
     * code 12 covers bits 60-64: word 1 bits 28-31, word 2 bit 0. */
    uint32_t row[5] = {0, 0, 0, 0, 0};
    row[0] = (17u << 5) | (2u << 30);    /* code 1 = 17; code 6 low bits = 0b10 */
    row[1] = 0x5u | (0xFu << 28);        /* code 6 high bits = 0b101 -> code 6 = 0b10110 = 22; code 12 low 4 = 15 */
    row[2] = 0x1u;                       /* code 12 bit 4 -> 31 */
    row[4] = 0x1Fu << 27;                /* code 31 = bits 155-159 = word 4 bits 27-31 = 31 */
    CHECK(affine_code(row, 5, 1) == 17, "code 1 = %u", affine_code(row, 5, 1));
    CHECK(affine_code(row, 5, 6) == 22, "code 6 straddling = %u", affine_code(row, 5, 6));
    CHECK(affine_code(row, 5, 7) == 0, "code 7 = %u", affine_code(row, 5, 7));
    CHECK(affine_code(row, 5, 12) == 31, "code 12 straddling = %u", affine_code(row, 5, 12));
    CHECK(affine_code(row, 5, 31) == 31, "code 31 = %u", affine_code(row, 5, 31));
}

static void codes_6bit(void) {
    /* code 5 covers bits 30-35: word 0 bits 30-31, word 1 bits 0-3;
     * code 10 covers bits 60-65: word 1 bits 28-31, word 2 bits 0-1. */
    uint32_t row[3] = {0, 0, 0};
    row[0] = 63u | (1u << 31);           /* code 0 = 63; code 5 = 0b10 in its low two bits */
    row[1] = 0x9u | (0x3u << 28);        /* code 5 high bits 0b1001 -> 0b100110 = 38; code 10 low 4 = 0b0011 */
    row[2] = 0x2u;                       /* code 10 high bits 0b10 -> 0b100011 = 35 */
    CHECK(affine_code(row, 6, 0) == 63, "code 0 = %u", affine_code(row, 6, 0));
    CHECK(affine_code(row, 6, 4) == 0, "code 4 = %u", affine_code(row, 6, 4));
    CHECK(affine_code(row, 6, 5) == 38, "code 5 straddling = %u", affine_code(row, 6, 5));
    CHECK(affine_code(row, 6, 10) == 35, "code 10 straddling = %u", affine_code(row, 6, 10));
    CHECK(affine_code(row, 6, 15) == 0, "code 15 = %u", affine_code(row, 6, 15));
}

static void codes_8bit(void) {
    const uint32_t row[2] = {0x04030201u, 0x00FF8000u};
    CHECK(affine_code(row, 8, 0) == 1 && affine_code(row, 8, 1) == 2 && affine_code(row, 8, 2) == 3 &&
          affine_code(row, 8, 3) == 4, "bytes of word 0");
    CHECK(affine_code(row, 8, 4) == 0 && affine_code(row, 8, 5) == 128 && affine_code(row, 8, 6) == 255 &&
          affine_code(row, 8, 7) == 0, "bytes of word 1");
}

/* ------------------------------------------------------ weight_row_f32 */

/* Scale / bias storage of the three kinds, with exactly representable values. */
static void put_scale(void *p, scale_type st, int i, float v) {
    if (st == SC_F32) ((float *)p)[i] = v;
    else if (st == SC_BF16) ((uint16_t *)p)[i] = (uint16_t)(f32_bits(v) >> 16); /* v has <= 8 significant bits */
    else { /* f16 by hand for the values used here: 2^e * (1 + m / 1024) */
        uint32_t u = f32_bits(v);
        int e = (int)((u >> 23) & 0xff) - 127 + 15;
        ((uint16_t *)p)[i] = (uint16_t)(((u >> 16) & 0x8000) | (uint32_t)(e << 10) | ((u >> 13) & 0x3ff));
    }
}

/* A 128-column row of `bits`-bit codes, code j = j mod 2^bits (packed here bit by bit,
 * so straddling codes occur for 3, 5, 6), with per-group scales 0.5 * (g + 1) and
 * biases -1 - g; checks out[j] = code_j * scale_g + bias_g computed by hand. */
static void affine_rows(void) {
    const int widths[] = {2, 3, 4, 5, 6, 8}, groups[] = {32, 64, 128};
    const scale_type sts[] = {SC_BF16, SC_F16, SC_F32};
    enum { N = 128 };
    for (int bi = 0; bi < 6; bi++)
        for (int gi = 0; gi < 3; gi++)
            for (int si = 0; si < 3; si++) {
                int bits = widths[bi], G = groups[gi];
                uint32_t packed[N * 8 / 32 + 1];
                memset(packed, 0, sizeof packed);
                for (int j = 0; j < N; j++) {
                    uint32_t code = (uint32_t)j & ((1u << bits) - 1);
                    for (int b = 0; b < bits; b++)
                        if (code >> b & 1) packed[(j * bits + b) / 32] |= 1u << ((j * bits + b) % 32);
                }
                float sc[4 * 2], bs[4 * 2]; /* room for 4 groups of any scale type */
                for (int g = 0; g < N / G; g++) {
                    put_scale(sc, sts[si], g, 0.5f * (float)(g + 1));
                    put_scale(bs, sts[si], g, -1.0f - (float)g);
                }
                weight w;
                memset(&w, 0, sizeof w);
                w.fmt = WF_AFFINE;
                w.rows = 1;
                w.cols = N;
                w.bits = bits;
                w.group = G;
                w.stype = sts[si];
                w.data = packed;
                w.scales = sc;
                w.biases = bs;
                float out[N];
                weight_row_f32(&w, 0, out);
                int bad = 0;
                for (int j = 0; j < N && !bad; j++) {
                    int g = j / G;
                    float want = (float)(j & ((1 << bits) - 1)) * 0.5f * (float)(g + 1) - 1.0f - (float)g;
                    if (out[j] != want) {
                        CHECK(0, "bits %d group %d stype %d: out[%d] = %g, want %g", bits, G, si, j, out[j], want);
                        bad = 1;
                    }
                }
            }
    /* a few values spelled out: 3 bits, group 32, bf16 scales: code 10 = 10 & 7 = 2
     * -> 2 * 0.5 - 1 = 0; code 45 (group 1) = 45 & 7 = 5 -> 5 * 1.0 - 2 = 3 */
    uint32_t packed[12];
    memset(packed, 0, sizeof packed);
    for (int j = 0; j < 128; j++)
        for (int b = 0; b < 3; b++)
            if ((j & 7) >> b & 1) packed[(j * 3 + b) / 32] |= 1u << ((j * 3 + b) % 32);
    uint16_t sc[4] = {0x3F00, 0x3F80, 0x3FC0, 0x4000}; /* 0.5, 1, 1.5, 2 */
    uint16_t bs[4] = {0xBF80, 0xC000, 0xC040, 0xC080}; /* -1, -2, -3, -4 */
    weight w = {.fmt = WF_AFFINE, .rows = 1, .cols = 128, .data = packed, .scales = sc, .biases = bs,
                .stype = SC_BF16, .bits = 3, .group = 32};
    float out[128];
    weight_row_f32(&w, 0, out);
    CHECK_NEAR(out[10], 0.0, 0);
    CHECK_NEAR(out[45], 3.0, 0);
    CHECK_NEAR(out[71], 7 * 1.5 - 3, 0);
    CHECK_NEAR(out[127], 7 * 2.0 - 4, 0);
}

/* Row r of a 2-row matrix reads its own codes, scales and biases. */
static void affine_second_row(void) {
    const uint32_t packed[8] = {0x11111111u, 0x11111111u, 0x11111111u, 0x11111111u,   /* row 0: codes 1 */
                                0x33333333u, 0x33333333u, 0x33333333u, 0x33333333u};  /* row 1: codes 3 */
    const float sc[2] = {2.0f, 0.25f}, bs[2] = {0.5f, -1.0f};
    weight w = {.fmt = WF_AFFINE, .rows = 2, .cols = 32, .data = packed, .scales = sc, .biases = bs,
                .stype = SC_F32, .bits = 4, .group = 32};
    float out[32];
    weight_row_f32(&w, 1, out);
    CHECK_NEAR(out[0], 3 * 0.25 - 1.0, 0);
    CHECK_NEAR(out[31], 3 * 0.25 - 1.0, 0);
    weight_row_f32(&w, 0, out);
    CHECK_NEAR(out[17], 1 * 2.0 + 0.5, 0);
}

static void mxfp4_rows(void) {
    /* e2m1 codes 0..15 = +-{0, 0.5, 1, 1.5, 2, 3, 4, 6}; scales e8m0: 127 -> 1,
     * 128 -> 2 for the second group of 32 */
    uint32_t packed[8];
    for (int i = 0; i < 8; i++) packed[i] = i % 2 ? 0xFEDCBA98u : 0x76543210u;
    const uint8_t sc[2] = {127, 128};
    weight w = {.fmt = WF_MXFP4, .rows = 1, .cols = 64, .data = packed, .scales = sc, .bits = 4, .group = 32};
    float out[64];
    weight_row_f32(&w, 0, out);
    const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int j = 0; j < 64; j++) {
        float want = e2m1[j % 16] * (j < 32 ? 1.0f : 2.0f);
        CHECK(out[j] == want && signbit(out[j]) == signbit(want), "out[%d] = %g, want %g", j, out[j], want);
    }
    CHECK_NEAR(out[7], 6.0, 0);
    CHECK_NEAR(out[32 + 15], -12.0, 0);
    CHECK(signbit(out[8]) && out[8] == 0.0f, "code 8 is -0");
}

/* ------------------------------------------------------- scalar formats */

static void bf16_edges(void) {
    CHECK(bf16_to_f32(0x3F80) == 1.0f, "1");
    CHECK(bf16_to_f32(0xC040) == -3.0f, "-3");
    CHECK(bf16_to_f32(0x7F80) == INFINITY, "inf");
    CHECK(bf16_to_f32(0xFF80) == -INFINITY, "-inf");
    CHECK(isnan(bf16_to_f32(0x7FC0)), "nan");
    CHECK(bf16_to_f32(0x8000) == 0.0f && signbit(bf16_to_f32(0x8000)), "-0");
    CHECK(bf16_to_f32(0x0001) == ldexpf(1.0f, -133), "smallest subnormal");
    CHECK(bf16_to_f32(0x7F7F) == bits_f32(0x7F7F0000u), "largest finite");
    /* f32 -> bf16 rounds to nearest even */
    CHECK(f32_to_bf16(1.0f) == 0x3F80, "1");
    CHECK(f32_to_bf16(1.0f + ldexpf(1, -8)) == 0x3F80, "halfway, even below");
    CHECK(f32_to_bf16(1.0f + 3 * ldexpf(1, -8)) == 0x3F82, "halfway, even above");
    CHECK(f32_to_bf16(1.0f + ldexpf(1, -8) + ldexpf(1, -20)) == 0x3F81, "above halfway");
    CHECK(f32_to_bf16(bits_f32(0x7F7FFFFFu)) == 0x7F80, "max float rounds to inf");
    CHECK(f32_to_bf16(INFINITY) == 0x7F80 && f32_to_bf16(-INFINITY) == 0xFF80, "inf stays inf");
    uint16_t n = f32_to_bf16(bits_f32(0x7F800001u)); /* NaN with only a low payload bit */
    CHECK((n & 0x7F80) == 0x7F80 && (n & 0x7F), "NaN stays NaN: 0x%04x", n);
}

static void f16_edges(void) {
    CHECK(f16_to_f32(0x3C00) == 1.0f, "1");
    CHECK(f16_to_f32(0xC000) == -2.0f, "-2");
    CHECK(f16_to_f32(0x3555) == bits_f32(0x3EAAA000u), "0.333 = 0x3555");
    CHECK(f16_to_f32(0x7BFF) == 65504.0f, "max");
    CHECK(f16_to_f32(0x0400) == ldexpf(1, -14), "smallest normal");
    CHECK(f16_to_f32(0x0001) == ldexpf(1, -24), "smallest subnormal");
    CHECK(f16_to_f32(0x03FF) == 1023 * ldexpf(1, -24), "largest subnormal");
    CHECK(f16_to_f32(0x8001) == -ldexpf(1, -24), "negative subnormal");
    CHECK(f16_to_f32(0x0200) == ldexpf(1, -15), "subnormal 0x0200");
    CHECK(f16_to_f32(0x7C00) == INFINITY && f16_to_f32(0xFC00) == -INFINITY, "infinities");
    CHECK(isnan(f16_to_f32(0x7E00)) && isnan(f16_to_f32(0x7C01)), "NaNs");
    CHECK(f16_to_f32(0x8000) == 0.0f && signbit(f16_to_f32(0x8000)), "-0");
}

static void e8m0_edges(void) {
    CHECK(e8m0_to_f32(127) == 1.0f, "127 = 1");
    CHECK(e8m0_to_f32(128) == 2.0f, "128 = 2");
    CHECK(e8m0_to_f32(120) == ldexpf(1, -7), "120");
    CHECK(e8m0_to_f32(254) == ldexpf(1, 127), "254 = 2^127");
    CHECK(e8m0_to_f32(1) == ldexpf(1, -126), "1 = 2^-126");
    CHECK(e8m0_to_f32(0) == ldexpf(1, -127), "0 = 2^-127 (subnormal)");
    CHECK(isnan(e8m0_to_f32(255)), "255 = NaN");
}

/* Plain float rows come back unchanged (f16/bf16 widened exactly). */
static void float_rows(void) {
    const uint16_t h[4] = {0x3C00, 0x0001, 0xFC00, 0x3555}, b[4] = {0x3F80, 0x0001, 0xFF80, 0x4049};
    const float f[4] = {1.5f, -0.0f, 3e38f, 1e-40f};
    weight w = {.fmt = WF_F16, .rows = 1, .cols = 4, .data = h};
    float out[4];
    weight_row_f32(&w, 0, out);
    CHECK(out[0] == 1.0f && out[1] == ldexpf(1, -24) && out[2] == -INFINITY && out[3] == bits_f32(0x3EAAA000u), "f16 row");
    w.fmt = WF_BF16;
    w.data = b;
    weight_row_f32(&w, 0, out);
    CHECK(out[0] == 1.0f && out[1] == ldexpf(1, -133) && out[2] == -INFINITY && out[3] == bits_f32(0x40490000u), "bf16 row");
    w.fmt = WF_F32;
    w.data = f;
    weight_row_f32(&w, 0, out);
    CHECK(memcmp(out, f, sizeof f) == 0, "f32 row");
}

int main(void) {
    RUN(codes_2bit);
    RUN(codes_3bit);
    RUN(codes_4bit);
    RUN(codes_5bit);
    RUN(codes_6bit);
    RUN(codes_8bit);
    RUN(affine_rows);
    RUN(affine_second_row);
    RUN(mxfp4_rows);
    RUN(bf16_edges);
    RUN(f16_edges);
    RUN(e8m0_edges);
    RUN(float_rows);
    return harness_done();
}
