/* backend/cpu/attention_avx512.c: CPU attention at the avx512 level.
 *  - Query rows in lanes (attn_rows_avx512, prefill): below.
 *  - Per-key inner loops (attn_kernels_avx512), for head dims the tiles do not take.
 * Decode (a few query tokens) is attn_decode_avx512.c. exp is exp512.h's polynomial,
 * within 2 ulp of expf, far below the 2e-3 fixtures. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/cpu/attn_kernels.h"
#include "backend/cpu/exp512.h"

/* Full unrolling of the loops over the 16 keys and 16 channels, so that their
 * accumulators stay in registers (at -O2 they would live in memory). */
#define UNROLL _Pragma("GCC unroll 16")

static inline __attribute__((always_inline)) float dot_avx512(const float *a, const void *b, int n, int bf16) {
    __m512 s0 = _mm512_setzero_ps(), s1 = s0;
    int i = 0;
    for (; i + 32 <= n; i += 32) {
        s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), kv_ld16(b, i, bf16), s0);
        s1 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i + 16), kv_ld16(b, i + 16, bf16), s1);
    }
    if (i < n) s0 = _mm512_fmadd_ps(_mm512_loadu_ps(a + i), kv_ld16(b, i, bf16), s0);
    return _mm512_reduce_add_ps(_mm512_add_ps(s0, s1));
}

/* o [n] = o * f + e * v */
static inline __attribute__((always_inline)) void scale_axpy_avx512(float *o, float f, float e, const void *v, int n,
                                                                    int bf16) {
    const __m512 vf = _mm512_set1_ps(f), ve = _mm512_set1_ps(e);
    for (int i = 0; i < n; i += 16)
        _mm512_storeu_ps(o + i, _mm512_fmadd_ps(ve, kv_ld16(v, i, bf16), _mm512_mul_ps(vf, _mm512_loadu_ps(o + i))));
}

static float dot_f32(const float *a, const void *b, int n) { return dot_avx512(a, b, n, 0); }
static float dot_bf16(const float *a, const void *b, int n) { return dot_avx512(a, b, n, 1); }
static void axpy_f32(float *o, float f, float e, const void *v, int n) { scale_axpy_avx512(o, f, e, v, n, 0); }
static void axpy_bf16(float *o, float f, float e, const void *v, int n) { scale_axpy_avx512(o, f, e, v, n, 1); }

const attn_kernels attn_kernels_avx512[2] = {{dot_f32, axpy_f32}, {dot_bf16, axpy_bf16}};

/* 16 x 16 transpose of rows r[0..15] (16 floats each) into out rows of stride 16. */
static inline __attribute__((always_inline)) void transpose16(__m512 *r) {
    __m512 t[16];
    for (int i = 0; i < 16; i += 2) {
        t[i] = _mm512_unpacklo_ps(r[i], r[i + 1]);
        t[i + 1] = _mm512_unpackhi_ps(r[i], r[i + 1]);
    }
    for (int i = 0; i < 16; i += 4) {
        r[i] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 1] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i]), _mm512_castps_pd(t[i + 2])));
        r[i + 2] = _mm512_castpd_ps(_mm512_unpacklo_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
        r[i + 3] = _mm512_castpd_ps(_mm512_unpackhi_pd(_mm512_castps_pd(t[i + 1]), _mm512_castps_pd(t[i + 3])));
    }
    /* r[4b + c] now holds, per 128-bit lane L, element c of rows 4b..4b+3 of lane L */
    for (int i = 0; i < 4; i++) {
        __m512 a = r[i], b = r[4 + i], c = r[8 + i], d = r[12 + i];
        __m512 ab_lo = _mm512_shuffle_f32x4(a, b, 0x44), ab_hi = _mm512_shuffle_f32x4(a, b, 0xee);
        __m512 cd_lo = _mm512_shuffle_f32x4(c, d, 0x44), cd_hi = _mm512_shuffle_f32x4(c, d, 0xee);
        t[i] = _mm512_shuffle_f32x4(ab_lo, cd_lo, 0x88);      /* lane 0 of a, b, c, d */
        t[4 + i] = _mm512_shuffle_f32x4(ab_lo, cd_lo, 0xdd);  /* lane 1 */
        t[8 + i] = _mm512_shuffle_f32x4(ab_hi, cd_hi, 0x88);  /* lane 2 */
        t[12 + i] = _mm512_shuffle_f32x4(ab_hi, cd_hi, 0xdd); /* lane 3 */
    }
    for (int i = 0; i < 16; i++) r[i] = t[i];
}

/* Query rows in lanes (attn_rows_avx512), for prefill: a row tile's up to 16 rows
 * sit in the 16 lanes of every vector, so each key of a 16-key tile has its own score
 * accumulator (S_j, lanes = rows) and the online softmax is lane-wise: the max and
 * sum over keys are element-wise across the 16 accumulators, with no horizontal
 * reductions and no scalar exp. Scores: per channel d, one load of the rows' q[d]
 * (qt, transposed once per task, scale folded in) and 16 FMAs that broadcast k_j[d]
 * from the transposed key tile. Values: the output is kept transposed (ot [hd, 16],
 * lanes = rows), 16 channels at a time in registers: per key, one load of its
 * probabilities and 16 FMAs that broadcast v_j[d] from the cache row. About one
 * load per FMA against two in the key-lane tile, which is load-bound. A task holds
 * up to ATTN_ROW_TILES row tiles, which share each key tile's transpose and its
 * rows in L1: K and V stream from memory once per task, so a deep cache is read
 * a quarter as often as with one row tile. */
static void rows_softmax_pv(const __m512 *s, const __mmask16 *vis, int nb, const float *vrow, long vstride, int hd,
                            __m512 *m, __m512 *l, float *ot) {
    float pt[16 * 16] __attribute__((aligned(64))); /* [16 keys, 16]: probabilities, lane = row */
    __m512 mt = _mm512_set1_ps(-INFINITY);
    UNROLL for (int j = 0; j < 16; j++) mt = _mm512_mask_max_ps(mt, vis[j], mt, s[j]);
    const __m512 mn = _mm512_max_ps(*m, mt);
    /* a row that has seen no key yet keeps m = -inf: its factor and terms are 0 */
    const __m512 ninf = _mm512_set1_ps(-INFINITY);
    const __mmask16 seen = _mm512_cmp_ps_mask(mn, ninf, _CMP_NEQ_OQ);
    const __m512 f = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(*m, ninf, _CMP_NEQ_OQ), exp512(_mm512_sub_ps(*m, mn)));
    __m512 sum = _mm512_setzero_ps();
    UNROLL for (int j = 0; j < 16; j++) {
        const __m512 pj = _mm512_maskz_mov_ps(vis[j] & seen, exp512(_mm512_sub_ps(s[j], mn)));
        _mm512_store_ps(pt + j * 16, pj);
        sum = _mm512_add_ps(sum, pj);
    }
    *l = _mm512_fmadd_ps(*l, f, sum);
    *m = _mm512_mask_blend_ps(seen, *m, mn);
    for (int d0 = 0; d0 < hd; d0 += 16) {
        __m512 a[16];
        UNROLL for (int c = 0; c < 16; c++) a[c] = _mm512_mul_ps(_mm512_load_ps(ot + (d0 + c) * 16), f);
        for (int j = 0; j < nb; j++) {
            if (!vis[j]) continue;
            const float *v = vrow + j * vstride + d0;
            const __m512 pj = _mm512_load_ps(pt + j * 16);
            UNROLL for (int c = 0; c < 16; c++) a[c] = _mm512_fmadd_ps(pj, _mm512_set1_ps(v[c]), a[c]);
        }
        UNROLL for (int c = 0; c < 16; c++) _mm512_store_ps(ot + (d0 + c) * 16, a[c]);
    }
}

void attn_rows_avx512(const float *q, const int32_t *qpos, int t0, int t1, int g, const attn_kv *kv,
                      const attn_params *p, float *out) {
    const int hd = p->head_dim, hpk = p->n_heads / p->n_kv;
    const int M = (t1 - t0) * hpk, R = (M + 15) / 16; /* rows: token-major, then the group's heads */
    /* per row tile, qt and ot [hd, 16] each: R * 2 * hd * 16 floats, which
     * ATTN_ROW_TILES bounds by ATTN_ROW_TILES_MAX * 2 * 128 * 16 */
    float room[ATTN_ROW_TILES_MAX * 2 * 128 * 16] __attribute__((aligned(64)));
    float *qt[ATTN_ROW_TILES_MAX], *ot[ATTN_ROW_TILES_MAX];
    float kt[ATTN_MAX_HD * 16] __attribute__((aligned(64))); /* [hd, 16]: key j's channel d at [d * 16 + j] */
    float vt[16 * ATTN_MAX_HD] __attribute__((aligned(64))); /* [16, hd]: a bf16 cache's value tile, widened */
    const int bf16 = kv->dtype == KVT_BF16;
    __m512i vqp[ATTN_ROW_TILES_MAX];
    __m512 m[ATTN_ROW_TILES_MAX], l[ATTN_ROW_TILES_MAX];
    int32_t qmax[ATTN_ROW_TILES_MAX], qmin[ATTN_ROW_TILES_MAX], amax = INT32_MIN, amin = INT32_MAX;
    const __m512 vscale = _mm512_set1_ps(p->scale);
    for (int r = 0; r < R; r++) {
        qt[r] = room + (size_t)r * 2 * hd * 16;
        ot[r] = qt[r] + (size_t)hd * 16;
        int32_t qp[16] __attribute__((aligned(64)));
        float m0[16] __attribute__((aligned(64))), l0[16] __attribute__((aligned(64)));
        qmax[r] = INT32_MIN, qmin[r] = INT32_MAX;
        for (int i = 0; i < 16; i++) {
            const int row = 16 * r + i, live = row < M, t = t0 + row / hpk, h = g * hpk + row % hpk;
            qp[i] = live ? qpos[t] : INT32_MIN; /* a padding lane sees no key */
            if (live && qp[i] > qmax[r]) qmax[r] = qp[i];
            if (live && qp[i] < qmin[r]) qmin[r] = qp[i];
            m0[i] = live && p->sinks ? p->sinks[h] : -INFINITY;
            l0[i] = live && p->sinks ? 1.0f : 0.0f;
        }
        if (qmax[r] > amax) amax = qmax[r];
        if (qmin[r] < amin) amin = qmin[r];
        vqp[r] = _mm512_load_si512(qp);
        m[r] = _mm512_load_ps(m0);
        l[r] = _mm512_load_ps(l0);
        for (int d0 = 0; d0 < hd; d0 += 16) { /* qt: 16 x 16 blocks transposed */
            __m512 x[16];
            UNROLL for (int i = 0; i < 16; i++) {
                const int row = 16 * r + i;
                x[i] = row < M ? _mm512_mul_ps(_mm512_loadu_ps(q + ((long)(t0 + row / hpk) * p->n_heads + g * hpk + row % hpk) * hd + d0), vscale)
                               : _mm512_setzero_ps();
            }
            transpose16(x);
            UNROLL for (int c = 0; c < 16; c++) _mm512_store_ps(qt[r] + (d0 + c) * 16, x[c]);
        }
        memset(ot[r], 0, sizeof(float) * (size_t)hd * 16);
    }
    for (int r0 = 0; r0 < kv->n; r0 += 16) {
        const int nb = kv->n - r0 < 16 ? kv->n - r0 : 16;
        const __mmask16 live = (__mmask16)((1u << nb) - 1);
        const long rb = attn_kv_row(kv, r0); /* the tile's 16 rows are one run of one block */
        int32_t kp[16] __attribute__((aligned(64)));
        _mm512_store_si512(kp, _mm512_maskz_loadu_epi32(live, kv->pos + rb));
        const __m512i vkp = _mm512_load_si512(kp);
        __mmask16 any = _mm512_mask_cmple_epi32_mask(live, vkp, _mm512_set1_epi32(amax));
        if (p->window > 0) any = _mm512_mask_cmpgt_epi32_mask(any, vkp, _mm512_set1_epi32(amin - p->window));
        if (!any) continue;
        const long koff = rb * kv->row_stride + (long)g * hd; /* elements of the cache's type */
        for (int d0 = 0; d0 < hd; d0 += 16) {
            __m512 x[16];
            UNROLL for (int j = 0; j < 16; j++)
                x[j] = j < nb ? kv_ld16(kv->k, koff + j * kv->row_stride + d0, bf16) : _mm512_setzero_ps();
            transpose16(x);
            UNROLL for (int i = 0; i < 16; i++) _mm512_store_ps(kt + (d0 + i) * 16, x[i]);
        }
        /* the values the row tiles broadcast from: float32 rows in place, bf16 rows
         * widened once per key tile into vt (then shared by every row tile) */
        const float *vrow = (const float *)kv->v + koff;
        long vstride = kv->row_stride;
        if (bf16) {
            for (int j = 0; j < nb; j++)
                for (int d0 = 0; d0 < hd; d0 += 16)
                    _mm512_store_ps(vt + j * hd + d0, kv_ld16(kv->v, koff + j * kv->row_stride + d0, 1));
            vrow = vt;
            vstride = hd;
        }
        for (int r = 0; r < R; r++) {
            __mmask16 sees = _mm512_mask_cmple_epi32_mask(live, vkp, _mm512_set1_epi32(qmax[r]));
            if (p->window > 0) sees = _mm512_mask_cmpgt_epi32_mask(sees, vkp, _mm512_set1_epi32(qmin[r] - p->window));
            if (!sees) continue;
            __m512 s[16];
            __mmask16 vis[16];
            UNROLL for (int j = 0; j < 16; j++) s[j] = _mm512_setzero_ps();
            const float *qr = qt[r];
            for (int d = 0; d < hd; d++) {
                const __m512 qd = _mm512_load_ps(qr + d * 16);
                const float *kd = kt + d * 16;
                UNROLL for (int j = 0; j < 16; j++) s[j] = _mm512_fmadd_ps(qd, _mm512_set1_ps(kd[j]), s[j]);
            }
            UNROLL for (int j = 0; j < 16; j++) {
                /* lanes (rows) that see key j */
                vis[j] = j < nb ? _mm512_cmpge_epi32_mask(vqp[r], _mm512_set1_epi32(kp[j])) : 0;
                if (p->window > 0 && vis[j])
                    vis[j] = _mm512_mask_cmplt_epi32_mask(vis[j], _mm512_sub_epi32(vqp[r], _mm512_set1_epi32(kp[j])),
                                                          _mm512_set1_epi32(p->window));
                if (p->softcap > 0 && vis[j]) {
                    float sv[16] __attribute__((aligned(64)));
                    _mm512_store_ps(sv, s[j]);
                    for (int i = 0; i < 16; i++) sv[i] = p->softcap * tanhf(sv[i] / p->softcap);
                    s[j] = _mm512_load_ps(sv);
                }
            }
            rows_softmax_pv(s, vis, nb, vrow, vstride, hd, &m[r], &l[r], ot[r]);
        }
    }
    for (int r = 0; r < R; r++) {
        float inv[16] __attribute__((aligned(64)));
        _mm512_store_ps(inv, _mm512_maskz_div_ps(_mm512_cmp_ps_mask(l[r], _mm512_setzero_ps(), _CMP_GT_OQ),
                                                 _mm512_set1_ps(1.0f), l[r]));
        const int rows = M - 16 * r < 16 ? M - 16 * r : 16;
        for (int d0 = 0; d0 < hd; d0 += 16) { /* out rows: ot's 16 x 16 blocks transposed back */
            __m512 x[16];
            UNROLL for (int c = 0; c < 16; c++) x[c] = _mm512_load_ps(ot[r] + (d0 + c) * 16);
            transpose16(x);
            for (int i = 0; i < rows; i++) {
                const int row = 16 * r + i;
                _mm512_storeu_ps(out + ((long)(t0 + row / hpk) * p->n_heads + g * hpk + row % hpk) * hd + d0,
                                 _mm512_mul_ps(x[i], _mm512_set1_ps(inv[i])));
            }
        }
    }
}
