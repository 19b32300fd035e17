/* backend/cpu/fast.c: the CPU's fast precision (CELER_PRECISION=fast): which products
 * round their activations, the prepared activation buffers they read, and the
 * portable reference of each rounding (the generic level's kernels, and what the
 * faster levels are tested against).
 *
 * Two roundings, each the one llama.cpp's CPU kernels make:
 *  - bf16 weights at T >= MM_FAST_MIN_T (prefill): every activation is rounded once
 *    to bf16 (round to nearest even) and meets the stored weights in float32 sums.
 *    Products of two bf16 values are exact in float32, so the only new error is the
 *    activation's rounding (2^-9 relative). avx512 with AVX512_BF16 runs vdpbf16ps
 *    on prepared bf16 rows (MM_PREP_BF16); elsewhere the activations are rounded in
 *    place of a float copy (MM_PREP_ROUND) and the exact kernels run on that.
 *  - affine weights (any width) at T >= MM_FAST_MIN_T, unless CELER_CPU_INT8: each
 *    weight dequantized in float32 (code * scale + bias, one fused multiply-add) and
 *    rounded once to bf16, as the GPU's fast path does; activations rounded to bf16;
 *    float32 sums. avx512 with AVX512_BF16: the dequantized panel in pair layout into
 *    the vdpbf16ps GEMM; avx2: its GEMM on a panel rounded in place; generic:
 *    mm_fast_portable_qbf16.
 *  - 4-bit affine weights at T < MM_FAST_MIN_T (decode), where the processor has
 *    AVX512_BF16 (elsewhere such products stay exact): activations rounded to bf16,
 *    the codes, scales and biases exact, float32 sums (matmul_avx512dot.c's q4dot);
 *    its portable reference is the exact kernel on MM_PREP_ROUND rows (mm_portable).
 *  - with CELER_CPU_INT8=1 only (it fails the evidence rule: on the quantized
 *    fixtures it lands 5-6x outside transformers' bf16 envelope, docs/cpu-kernels.md):
 *    affine 4- and 8-bit weights (group % 32 == 0), every T: each block of 32
 *    activations is quantized to int8 with its own scale d = max|x| / 127
 *    (q = round(x / d), as llama.cpp's Q8 activations), the codes meet the int8
 *    activations in integer dot products (VNNI vpdpbusd where present) and
 *    y = sum_g s_g sum_{b in g} d_b (codes . q)_b + sum_g bias_g xsum_g, with xsum_g
 *    the float32 sum of the (unrounded) activations of group g.
 * Everything else (decode of bf16, f16/f32 weights, 2/3/5/6/8-bit, MXFP4) stays exact. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "base/settings.h"
#include "tensor/dtype.h"

int mm_fast_kind(const weight *w, int T) {
    if (w->fmt == WF_BF16 && T >= MM_FAST_MIN_T) return MM_FAST_BF16;
    if (w->fmt == WF_AFFINE && setting_flag(SET_CELER_CPU_INT8) && (w->bits == 4 || w->bits == 8) && w->group % 32 == 0 && w->group > 0 &&
        w->cols % w->group == 0)
        return MM_FAST_Q8;
    if (w->fmt == WF_AFFINE && T >= MM_FAST_MIN_T) return MM_FAST_QBF16;
    if (w->fmt == WF_AFFINE && w->bits == 4 && w->group >= 32 && (w->group & (w->group - 1)) == 0 && w->cols % w->group == 0)
        return MM_FAST_Q4DOT; /* a power-of-two group: q4dot finds a lane's group by a shift */
    return MM_FAST_NONE;
}

/* ---- the Q8 activation rows (MM_PREP_Q8) --------------------------------------
 * One row per activation row t, q8_row_bytes apart (64-byte multiple):
 *   q    int8 [Kq]           Kq = cols rounded up to 128, zero past cols. 8-bit
 *                            weights: column order. 4-bit weights: per 128-column
 *                            chunk the 64 even columns, then the 64 odd ones (the
 *                            low and high nibbles of the chunk's 64 code bytes).
 *   dexp float [Kq*bits/32]  per 4-byte lane of the row's code bytes, the scale d of
 *                            the 32-column block the lane's codes belong to (block
 *                            = lane / bits), so a vector of code lanes multiplies by
 *                            a vector load of dexp.
 *   gsum float [cols/group]  float32 sum of the activations of each group.
 *   d    float [Kq/32]       the scale of each block. */
static long q8_kq(const weight *w) { return ((long)w->cols + 127) & ~127L; }

long mm_q8_row_bytes(const weight *w) {
    const long kq = q8_kq(w), lanes = kq * w->bits / 32;
    return (kq + 4 * (lanes + (long)w->cols / w->group + kq / 32) + 63) & ~63L;
}

void mm_q8_row_parts(const weight *w, const void *row, const int8_t **q, const float **dexp, const float **gsum,
                     const float **d) {
    const long kq = q8_kq(w), lanes = kq * w->bits / 32;
    const uint8_t *p = row;
    *q = (const int8_t *)p;
    *dexp = (const float *)(p + kq);
    *gsum = *dexp + lanes;
    *d = *gsum + (long)w->cols / w->group;
}

/* Quantizes activation row x [cols] into its Q8 row. */
static void q8_prep_row(const weight *w, const float *x, void *row) {
    const long n = (long)w->cols, kq = q8_kq(w), ng = n / w->group;
    const int8_t *q0;
    const float *dexp0, *gsum0, *d0;
    mm_q8_row_parts(w, row, &q0, &dexp0, &gsum0, &d0);
    int8_t *q = (int8_t *)q0;
    float *dexp = (float *)dexp0, *gsum = (float *)gsum0, *d = (float *)d0;
    memset(q, 0, (size_t)kq);
    for (long b = 0; b < kq / 32; b++) {
        float amax = 0;
        if (b * 32 < n)
            for (int i = 0; i < 32; i++) amax = fmaxf(amax, fabsf(x[b * 32 + i]));
        const float db = amax / 127.0f, id = db > 0 ? 127.0f / amax : 0.0f;
        d[b] = db;
        for (int l = 0; l < w->bits; l++) dexp[b * w->bits + l] = db;
        if (b * 32 >= n) continue;
        for (int i = 0; i < 32; i++) {
            const long j = b * 32 + i; /* column */
            float v = roundf(x[j] * id);
            v = v > 127.0f ? 127.0f : v < -127.0f ? -127.0f : v == v ? v : 0.0f; /* inf, NaN: no UB */
            const int8_t qv = (int8_t)v;
            long at = j;
            if (w->bits == 4) { /* even columns first, then odd, per 128-column chunk */
                const long c = j / 128, jj = j % 128;
                at = c * 128 + (jj & 1) * 64 + jj / 2;
            }
            q[at] = qv;
        }
    }
    for (long g = 0; g < ng; g++) {
        float s = 0;
        for (long j = g * w->group; j < (g + 1) * w->group; j++) s += x[j];
        gsum[g] = s;
    }
}

long mm_fast_prep_bytes(const weight *w, int T, int prep) {
    switch (prep) {
    case MM_PREP_ROUND: return (long)T * (long)w->cols * 4;
    case MM_PREP_BF16: return (long)T * (((long)w->cols + 1) & ~1L) * 2;
    case MM_PREP_Q8: return (long)T * mm_q8_row_bytes(w);
    case MM_PREP_Q4DOT: return (long)T * mm_q4dot_row_bytes(w);
    case MM_PREP_Q4W16:
    case MM_PREP_Q4R16: return (long)T * mm_q4w16_row_bytes(w);
    case MM_PREP_ROUND16: return (long)T * (long)w->cols * 4;
    }
    return 0;
}

void mm_fast_prep_rows(const weight *w, const float *x, int t0, int t1, int prep, void *out) {
    const long n = (long)w->cols;
    for (int t = t0; t < t1; t++) {
        const float *xt = x + (long)t * n;
        if (prep == MM_PREP_ROUND) {
            float *o = (float *)out + (long)t * n;
            for (long j = 0; j < n; j++) o[j] = bf16_to_f32(f32_to_bf16(xt[j]));
        } else if (prep == MM_PREP_BF16) {
            const long np = (n + 1) & ~1L;
            uint16_t *o = (uint16_t *)out + (long)t * np;
            for (long j = 0; j < n; j++) o[j] = f32_to_bf16(xt[j]);
            if (np > n) o[n] = 0;
        } else if (prep == MM_PREP_Q4DOT) {
            mm_q4dot_prep_row(w, xt, (uint8_t *)out + (long)t * mm_q4dot_row_bytes(w));
        } else if (prep == MM_PREP_Q4W16) {
            mm_q4w16_prep_row(w, xt, (uint8_t *)out + (long)t * mm_q4w16_row_bytes(w));
        } else if (prep == MM_PREP_Q4R16) {
            mm_q4r16_prep_row(w, xt, (uint8_t *)out + (long)t * mm_q4w16_row_bytes(w));
        } else if (prep == MM_PREP_ROUND16) {
            float *o = (float *)out + (long)t * n;
            for (long c = 0; c < n; c += 128) {
                int32_t q[128];
                const long len = n - c < 128 ? n - c : 128;
                const float d = mm_round16_chunk(xt + c, len, q);
                for (long j = 0; j < len; j++) o[c + j] = d * (float)q[j];
            }
        } else {
            q8_prep_row(w, xt, (uint8_t *)out + (long)t * mm_q8_row_bytes(w));
        }
    }
}

float mm_round16_chunk(const float *x, long len, int32_t q[128]) {
    float amax = 0;
    for (long j = 0; j < len; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float inv = amax > 0 && amax <= 3.4e38f ? 32767.0f / amax : 0.0f; /* inf: all zero */
    for (long j = 0; j < 128; j++) {
        float v = j < len ? x[j] * inv : 0.0f;
        v = (v + 12582912.0f) - 12582912.0f; /* round to nearest even: 1.5 x 2^23 */
        q[j] = v > 32767.0f ? 32767 : v < -32767.0f ? -32767 : v == v ? (int32_t)v : 0; /* NaN: 0, no UB */
    }
    return amax / 32767.0f;
}

/* ---- the portable kernels of each rounding ------------------------------------ */

/* bf16 weights against prepared bf16 rows [T, cols rounded up to 2]. */
static void fast_portable_bf16(const weight *w, const float *xp, float *y, int T, long r0, long r1, float *scratch) {
    (void)scratch;
    const long n = (long)w->cols, np = (n + 1) & ~1L;
    const uint16_t *xb = (const uint16_t *)(const void *)xp, *wd = w->data;
    for (long r = r0; r < r1; r++) {
        const uint16_t *wr = wd + r * n;
        for (int t = 0; t < T; t++) {
            const uint16_t *xt = xb + (long)t * np;
            float acc[8] = {0};
            long j = 0;
            for (; j + 8 <= n; j += 8)
                for (int k = 0; k < 8; k++) acc[k] += bf16_to_f32(wr[j + k]) * bf16_to_f32(xt[j + k]);
            float s = 0;
            for (; j < n; j++) s += bf16_to_f32(wr[j]) * bf16_to_f32(xt[j]);
            y[(long)t * w->rows + r] = s + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        }
    }
}

static float scale_at(const void *p, scale_type st, long i) {
    switch (st) {
    case SC_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    case SC_F16: return f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

/* Affine 4/8-bit weights against prepared Q8 rows: integer dot per 32-column block. */
static void fast_portable_q8(const weight *w, const float *xp, float *y, int T, long r0, long r1, float *scratch) {
    (void)scratch;
    const long n = (long)w->cols, G = w->group, ng = n / G, rb = mm_q8_row_bytes(w), row_bytes = n * w->bits / 8;
    for (long r = r0; r < r1; r++) {
        const uint8_t *row = (const uint8_t *)w->data + r * row_bytes;
        for (int t = 0; t < T; t++) {
            const int8_t *q;
            const float *dexp, *gsum, *d;
            mm_q8_row_parts(w, (const uint8_t *)(const void *)xp + t * rb, &q, &dexp, &gsum, &d);
            float acc = 0;
            for (long g = 0; g < ng; g++) {
                float ga = 0;
                for (long b = g * G / 32; b < (g + 1) * G / 32; b++) {
                    int32_t s = 0;
                    for (int i = 0; i < 32; i++) {
                        const long j = b * 32 + i;
                        int code, at = (int)j;
                        if (w->bits == 4) {
                            code = (row[j / 2] >> (4 * (j & 1))) & 15;
                            at = (int)((j / 128) * 128 + (j & 1) * 64 + (j % 128) / 2);
                        } else {
                            code = row[j];
                        }
                        s += code * q[at];
                    }
                    ga += d[b] * (float)s;
                }
                acc += scale_at(w->scales, w->stype, r * ng + g) * ga + scale_at(w->biases, w->stype, r * ng + g) * gsum[g];
            }
            y[(long)t * w->rows + r] = acc;
        }
    }
}

static uint32_t code_at(const weight *w, long r, long j) {
    return affine_code((const uint32_t *)w->data + r * ((long)w->cols * w->bits / 32), w->bits, j);
}

/* Affine weights dequantized (fmaf, as the panel packers do) and rounded to bf16,
 * against MM_PREP_ROUND rows (activations already bf16 values). */
static void fast_portable_qbf16(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch) {
    const long n = (long)w->cols, ng = n / w->group;
    for (long r = r0; r < r1; r++) {
        for (long j = 0; j < n; j++) {
            const long g = r * ng + j / w->group;
            const float v = fmaf((float)code_at(w, r, j), scale_at(w->scales, w->stype, g), scale_at(w->biases, w->stype, g));
            scratch[j] = bf16_to_f32(f32_to_bf16(v));
        }
        for (int t = 0; t < T; t++) {
            const float *xt = x + (long)t * n;
            float acc[8] = {0};
            long j = 0;
            for (; j + 8 <= n; j += 8)
                for (int k = 0; k < 8; k++) acc[k] += scratch[j + k] * xt[j + k];
            float s = 0;
            for (; j < n; j++) s += scratch[j] * xt[j];
            y[(long)t * w->rows + r] = s + ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
        }
    }
}

void mm_fast_portable_qbf16(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch) {
    fast_portable_qbf16(w, x, y, T, r0, r1, scratch);
}

int mm_fast_select_level(const weight *w, int T, int level, mm_fast *f) {
    const int kind = mm_fast_kind(w, T);
    if (level > cpu_level_hw()) level = cpu_level_hw();
    f->kind = kind;
    f->prep = MM_PREP_NONE;
    f->k = NULL;
    if (kind == MM_FAST_NONE) return 0;
    if (kind == MM_FAST_Q4DOT && level >= CPU_AVX512 && mm_q4_decode_int16())
        f->kind = w->interleaved && T >= MM_Q4R16_MIN_T ? MM_FAST_Q4R16 : MM_FAST_Q4W16;
    if (level >= CPU_AVX512 && (f->k = mm_fast_select_avx512dot(w, T, f->kind))) {
        f->prep = f->kind == MM_FAST_Q8      ? MM_PREP_Q8
                  : f->kind == MM_FAST_Q4DOT ? MM_PREP_Q4DOT
                  : f->kind == MM_FAST_Q4W16 ? MM_PREP_Q4W16
                  : f->kind == MM_FAST_Q4R16 ? MM_PREP_Q4R16
                                             : MM_PREP_BF16;
        return 1;
    }
    if (kind == MM_FAST_Q4DOT) { /* only vdpbf16ps makes it faster: elsewhere exact */
        f->kind = MM_FAST_NONE;
        return 0;
    }
    if (kind == MM_FAST_QBF16) {
        f->prep = MM_PREP_ROUND;
        f->k = level >= CPU_AVX2 ? mm_gemm_avx2_wround : mm_fast_portable_qbf16;
        return 1;
    }
    if (kind == MM_FAST_BF16) { /* the level's exact kernel on rounded activations */
        f->prep = MM_PREP_ROUND;
        f->k = mm_select_level(w, T, level);
        return 1;
    }
    f->prep = MM_PREP_Q8;
    f->k = mm_fast_portable_q8;
    return 1;
}

void mm_fast_portable_q8(const weight *w, const float *xp, float *y, int T, long r0, long r1, float *scratch) {
    fast_portable_q8(w, xp, y, T, r0, r1, scratch);
}

void mm_fast_portable_bf16(const weight *w, const float *xp, float *y, int T, long r0, long r1, float *scratch) {
    fast_portable_bf16(w, xp, y, T, r0, r1, scratch);
}
