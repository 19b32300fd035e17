/* backend/cpu/pack.c: bf16 weights packed once at load into the panel layout the
 * avx512 GEMMs stream (exact and fast), owned by the weight (w->packed) and freed
 * with it. Layout: per panel of 32 rows (rows past the end zero), u32 [kp, 32],
 * kp = ceil(cols / 2): element [k, i] is the bf16 pair W[r + i, 2k] (low half),
 * W[r + i, 2k + 1] (high half; zero past cols). vdpbf16ps takes the pairs as they
 * are; the exact GEMM widens the low half with a shift and the high half with a mask,
 * and so sums each output's products in k order as from a float32 panel (the same
 * bits). The GEMVs (decode) read the weight's own rows: the packed panels are a
 * second copy, the size of the bf16 weight (docs/cpu-kernels.md), so a backend packs
 * weights only while their total stays within half the memory available when it
 * packed the first (mm_pack_budget), and not at all with CELER_CPU_PACK=0. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "base/mem.h"
#include "base/settings.h"

/* Rows [r, r + 32) of bf16 w into panel u32 [kp, 32]. */
static void pack_panel(const weight *w, long r, uint32_t *panel) {
    const long n = (long)w->cols, kp = (n + 1) / 2;
    const uint16_t *d = w->data;
    for (int i = 0; i < 32; i++) {
        if (r + i >= w->rows) {
            for (long k = 0; k < kp; k++) panel[k * 32 + i] = 0;
            continue;
        }
        const uint16_t *row = d + (r + i) * n;
        for (long k = 0; k < n / 2; k++) panel[k * 32 + i] = (uint32_t)row[2 * k] | (uint32_t)row[2 * k + 1] << 16;
        if (n & 1) panel[(kp - 1) * 32 + i] = row[n - 1];
    }
}

long mm_bf16_panels_bytes(const weight *w) { return ((long)w->rows + 31) / 32 * (((long)w->cols + 1) / 2) * 32 * 4; }

const uint32_t *mm_bf16_panel(const weight *w, long r, uint32_t *own) {
    const long kp = ((long)w->cols + 1) / 2;
    if (w->packed && r % 32 == 0) return (const uint32_t *)w->packed + r / 32 * kp * 32;
    pack_panel(w, r, own);
    return own;
}

/* Half of MemAvailable (/proc/meminfo), or LONG_MAX where it cannot be read. */
long mm_pack_budget(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return LONG_MAX;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return kb ? (long)(kb * 512ull) : LONG_MAX;
}

int mm_pack_weight(weight *w, long *budget) {
    if (w->packed || w->fmt != WF_BF16 || !w->data || w->on_device || cpu_level() < CPU_AVX512) return 0;
    if (!setting_flag(SET_CELER_CPU_PACK)) return 0;
    const long bytes = mm_bf16_panels_bytes(w);
    if (budget && bytes > *budget) return 0; /* the second copy would not fit: pack per product */
    uint32_t *p = mem_aligned((size_t)bytes, "packed weight panels");
    if (!p) return -1;
    if (budget) *budget -= bytes;
    const long kp = ((long)w->cols + 1) / 2;
    for (long r = 0; r < w->rows; r += 32) pack_panel(w, r, p + r / 32 * kp * 32);
    w->packed = p;
    return 0;
}

void mm_unpack_weight(weight *w) {
    free(w->packed);
    free(w->interleaved);
    w->packed = NULL;
    w->interleaved = NULL;
}

/* ---- 4-bit affine rows interleaved by 16 (q4r16_avx512dot.c) -------------------
 * Per block of 16 rows (rows past the end: zero codes, scales and biases):
 *   codes  u32 [cols / 8][16]   lane i: row 16 b + i's u32 word u (its columns 8u .. 8u + 7,
 *                               nibble k = column 8u + k, as MLX packs a row)
 *   scales [ng][16], biases [ng][16], of the weight's scale type
 * so a 64-byte load holds 8 columns of 16 rows and 16 consecutive values are the
 * 16 rows' scales of one group. The same bytes as the weight, in another order. */
static long r16_blocks(const weight *w) { return ((long)w->rows + 15) / 16; }
static long r16_codes_bytes(const weight *w) { return (long)w->cols / 8 * 64; }
static long r16_scales_bytes(const weight *w) {
    return (((long)w->cols / w->group * 16 * (w->stype == SC_F32 ? 4 : 2)) + 63) & ~63L;
}

long mm_q4r16_block_bytes(const weight *w) { return r16_codes_bytes(w) + 2 * r16_scales_bytes(w); }

void mm_q4r16_block_parts(const weight *w, long b, const uint32_t **codes, const void **scales, const void **biases) {
    const uint8_t *p = (const uint8_t *)w->interleaved + b * mm_q4r16_block_bytes(w);
    *codes = (const uint32_t *)(const void *)p;
    *scales = p + r16_codes_bytes(w);
    *biases = p + r16_codes_bytes(w) + r16_scales_bytes(w);
}

int mm_q4r16_eligible(const weight *w) {
    return w->fmt == WF_AFFINE && w->bits == 4 && (w->group == 32 || w->group == 64 || w->group == 128) &&
           w->cols % w->group == 0 && !w->src_cols && w->data && !w->on_device;
}

int mm_pack_q4r16(weight *w, long *budget) {
    if (w->interleaved || !mm_q4r16_eligible(w)) return 0;
    const long nb = r16_blocks(w), bytes = nb * mm_q4r16_block_bytes(w), words = (long)w->cols / 8,
               ng = (long)w->cols / w->group, ssz = w->stype == SC_F32 ? 4 : 2;
    if (budget && bytes > *budget) return 0; /* the second copy would not fit: the row-major kernel */
    uint8_t *p = mem_aligned((size_t)bytes, "interleaved 4-bit weight");
    if (!p) return -1;
    if (budget) *budget -= bytes;
    memset(p, 0, (size_t)bytes);
    w->interleaved = p;
    for (long b = 0; b < nb; b++) {
        uint8_t *blk = p + b * mm_q4r16_block_bytes(w), *sc = blk + r16_codes_bytes(w), *bi = sc + r16_scales_bytes(w);
        uint32_t *c = (uint32_t *)(void *)blk;
        for (int i = 0; i < 16 && 16 * b + i < w->rows; i++) {
            const long r = 16 * b + i;
            const uint32_t *row = (const uint32_t *)w->data + r * words;
            for (long u = 0; u < words; u++) c[u * 16 + i] = row[u];
            for (long g = 0; g < ng; g++) {
                memcpy(sc + (g * 16 + i) * ssz, (const uint8_t *)w->scales + (r * ng + g) * ssz, (size_t)ssz);
                memcpy(bi + (g * 16 + i) * ssz, (const uint8_t *)w->biases + (r * ng + g) * ssz, (size_t)ssz);
            }
        }
    }
    return 0;
}
