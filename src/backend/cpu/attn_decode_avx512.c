/* backend/cpu/attn_decode_avx512.c: decode attention at the avx512 level: a few query
 * tokens (1..ATTN_DEC_MAX_T) of every head against one range of cache rows, the
 * range being one split of a flash-decoding call (attention.c merges the splits).
 *
 * Why not the key tiles of attention_avx512.c: a decode call has 1-2 query rows per
 * KV group (qwen3: 2), too few to amortize a transpose of every key tile, and a task
 * per KV group read one 512-byte slice of every 4 KB cache row, so each row began
 * with a miss the hardware prefetchers (which stay within a page) never covered.
 * Here one task walks its rows for every group, 16 keys at a time, and a group's
 * query rows two at a time (a pair shares every load of a key or value):
 *  - scores are dot products of the two query rows with each key row as it lies in
 *    memory (8 keys x 2 rows accumulators over head_dim / 16 FMAs each), reduced to
 *    one 16-lane vector per row (lane = key) by a transpose-and-add tree: the
 *    horizontal sums cost 45 shuffles and adds per 16 keys instead of a reduction
 *    per key;
 *  - the mask, the online softmax (running max and sum, without branches) and exp
 *    are 16-lane vectors; the values are added into both rows' outputs with each
 *    value chunk loaded once;
 *  - each key and value line is loaded once per pair: a group's 16 rows lie 4 KB
 *    apart (qwen3), all in one L1 set, so a second pass over them would come from L2
 *    (a copy of the tile into a contiguous buffer, tried first, cost as much as it
 *    saved); the 8 keys of a half-tile are 8 streams the hardware prefetchers follow
 *    (a software prefetch of the next tile measured no gain).
 * A bf16 cache's rows are widened as they are loaded (kv_ld16): the walk is bound by
 * reading the cache, so half the bytes outweigh a conversion per 16 elements. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "backend/cpu/attn_kernels.h"
#include "backend/cpu/exp512.h"

#define UNROLL _Pragma("GCC unroll 16")

/* Partial horizontal sums of 8 vectors (keys): hsum_final(hsum8 of keys 0-7, hsum8
 * of keys 8-15) has lane j = the sum of key j's vector. The tree adds neighbours
 * after unpacking 32-bit, then 64-bit elements, then swapping 128-bit lanes. */
static inline __attribute__((always_inline)) __m512 hsum8(const __m512 *a) {
    __m512 x[4], y[2];
    /* x[i], per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3] of a = a[2i], b = a[2i+1] */
    UNROLL for (int i = 0; i < 4; i++)
        x[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    /* y[i], per 128-bit lane L: the lane-L sums of a[4i .. 4i + 3] */
    UNROLL for (int i = 0; i < 2; i++) {
        const __m512d u = _mm512_castps_pd(x[2 * i]), v = _mm512_castps_pd(x[2 * i + 1]);
        y[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(u, v)), _mm512_castpd_ps(_mm512_unpackhi_pd(u, v)));
    }
    /* [y0.L0 + y0.L2, y0.L1 + y0.L3, y1.L0 + y1.L2, y1.L1 + y1.L3] */
    return _mm512_add_ps(_mm512_shuffle_f32x4(y[0], y[1], 0x44), _mm512_shuffle_f32x4(y[0], y[1], 0xee));
}

/* Lane j = the sum of key j's vector, from hsum8 of keys 0-7 (z0) and 8-15 (z1). */
static inline __m512 hsum_final(__m512 z0, __m512 z1) {
    return _mm512_add_ps(_mm512_shuffle_f32x4(z0, z1, 0x88), _mm512_shuffle_f32x4(z0, z1, 0xdd));
}

/* max_j x_j in every lane */
static inline __m512 hmax16(__m512 x) {
    x = _mm512_max_ps(x, _mm512_shuffle_f32x4(x, x, 0x4e));
    x = _mm512_max_ps(x, _mm512_shuffle_f32x4(x, x, 0xb1));
    x = _mm512_max_ps(x, _mm512_permute_ps(x, 0x4e));
    return _mm512_max_ps(x, _mm512_permute_ps(x, 0xb1));
}

/* One row's online softmax over a tile: s its scores (masked lanes -inf, vis not
 * empty); updates m and l, gives the factor f that rescales what the row has (0
 * before any key; every lane) and e_j = e^(s_j - m) (0 outside vis). No branches:
 * the running max is new in an unpredictable share of tiles. */
static inline __attribute__((always_inline)) void softmax_tile(__m512 s, __mmask16 vis, float *m, float *l, __m512 *f,
                                                               __m512 *e) {
    const __m512 mo = _mm512_set1_ps(*m), mn = _mm512_max_ps(mo, hmax16(s));
    *f = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(mo, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ), exp512(_mm512_sub_ps(mo, mn)));
    *e = _mm512_maskz_mov_ps(vis, exp512(_mm512_sub_ps(s, mn)));
    *m = _mm512_cvtss_f32(mn);
    *l = *l * _mm512_cvtss_f32(*f) + _mm512_reduce_add_ps(*e);
}

static inline __m512 score_finish(__m512 s, __mmask16 vis, const attn_params *p) {
    s = _mm512_mul_ps(s, _mm512_set1_ps(p->scale));
    if (p->softcap > 0) {
        float sv[16] __attribute__((aligned(64)));
        _mm512_store_ps(sv, s);
        for (int j = 0; j < 16; j++) sv[j] = p->softcap * tanhf(sv[j] / p->softcap);
        s = _mm512_load_ps(sv);
    }
    return _mm512_mask_blend_ps(vis, _mm512_set1_ps(-INFINITY), s);
}

/* oa [16 w] = oa fa + sum_j ea_j v_j over the keys in vis (v_j = kv[j] + off), and
 * ob the same when two: w independent chains per row (w a constant at each call),
 * each value chunk loaded once for both rows. */
static inline __attribute__((always_inline)) void pv_pair(float *oa, float *ob, const void *const *vr, long off,
                                                          __m512 ea, __m512 eb, __mmask16 vis, __m512 fa, __m512 fb,
                                                          int w, int two, int bf16) {
    __m512 a[8], b[8];
    UNROLL for (int c = 0; c < w; c++) {
        a[c] = _mm512_mul_ps(_mm512_loadu_ps(oa + 16 * c), fa);
        if (two) b[c] = _mm512_mul_ps(_mm512_loadu_ps(ob + 16 * c), fb);
    }
    for (__mmask16 rest = vis; rest; rest &= (__mmask16)(rest - 1)) {
        const int j = __builtin_ctz(rest);
        /* e_j from the register: storing e and reloading 16 lanes would wait on
         * store-to-load forwarding of the 64-byte store */
        const __m512i jj = _mm512_set1_epi32(j);
        const __m512 pa = _mm512_permutexvar_ps(jj, ea), pb = two ? _mm512_permutexvar_ps(jj, eb) : pa;
        const void *v = vr[j];
        UNROLL for (int c = 0; c < w; c++) {
            const __m512 x = kv_ld16(v, off + 16 * c, bf16);
            a[c] = _mm512_fmadd_ps(pa, x, a[c]);
            if (two) b[c] = _mm512_fmadd_ps(pb, x, b[c]);
        }
    }
    UNROLL for (int c = 0; c < w; c++) {
        _mm512_storeu_ps(oa + 16 * c, a[c]);
        if (two) _mm512_storeu_ps(ob + 16 * c, b[c]);
    }
}

/* Query rows ra and rb (rb unused unless two) of the tile whose key and value rows
 * (this group's slices) are kr[j], vr[j]; visa / visb the keys each sees. */
static inline __attribute__((always_inline)) void tile_pair(const float *q, float *o, float *m, float *l, int ra,
                                                            int rb, __mmask16 visa, __mmask16 visb,
                                                            const void *const *kr, const void *const *vr,
                                                            const attn_params *p, int two, int bf16) {
    const int hd = p->head_dim, nc = hd / 16;
    const float *qa = q + (long)ra * hd, *qb = q + (long)rb * hd;
    __m512 za[2], zb[2];
    for (int h = 0; h < 2; h++) {
        const void *const *k8 = kr + 8 * h;
        __m512 aa[8], ab[8];
        UNROLL for (int j = 0; j < 8; j++) aa[j] = ab[j] = _mm512_setzero_ps();
        for (int c = 0; c < nc; c++) {
            const __m512 qac = _mm512_loadu_ps(qa + 16 * c), qbc = two ? _mm512_loadu_ps(qb + 16 * c) : qac;
            UNROLL for (int j = 0; j < 8; j++) {
                const __m512 x = kv_ld16(k8[j], 16 * c, bf16);
                aa[j] = _mm512_fmadd_ps(qac, x, aa[j]);
                if (two) ab[j] = _mm512_fmadd_ps(qbc, x, ab[j]);
            }
        }
        za[h] = hsum8(aa);
        zb[h] = two ? hsum8(ab) : za[h];
    }
    __m512 fa, ea, fb = _mm512_setzero_ps(), eb = fb;
    softmax_tile(score_finish(hsum_final(za[0], za[1]), visa, p), visa, m + ra, l + ra, &fa, &ea);
    if (two) softmax_tile(score_finish(hsum_final(zb[0], zb[1]), visb, p), visb, m + rb, l + rb, &fb, &eb);
    float *oa = o + (long)ra * hd, *ob = o + (long)rb * hd;
    const __mmask16 vis = two ? (__mmask16)(visa | visb) : visa;
    int d0 = 0;
    for (; d0 + 128 <= hd; d0 += 128) pv_pair(oa + d0, ob + d0, vr, d0, ea, eb, vis, fa, fb, 8, two, bf16);
    switch ((hd - d0) / 16) { /* a constant width, so the accumulators stay in registers */
    case 1: pv_pair(oa + d0, ob + d0, vr, d0, ea, eb, vis, fa, fb, 1, two, bf16); break;
    case 2: pv_pair(oa + d0, ob + d0, vr, d0, ea, eb, vis, fa, fb, 2, two, bf16); break;
    case 3: pv_pair(oa + d0, ob + d0, vr, d0, ea, eb, vis, fa, fb, 3, two, bf16); break;
    case 4: pv_pair(oa + d0, ob + d0, vr, d0, ea, eb, vis, fa, fb, 4, two, bf16); break;
    case 5: pv_pair(oa + d0, ob + d0, vr, d0, ea, eb, vis, fa, fb, 5, two, bf16); break;
    case 6: pv_pair(oa + d0, ob + d0, vr, d0, ea, eb, vis, fa, fb, 6, two, bf16); break;
    case 7: pv_pair(oa + d0, ob + d0, vr, d0, ea, eb, vis, fa, fb, 7, two, bf16); break;
    default: break;
    }
}

/* The four kernels the key walk calls: a pair of rows or one, float32 or bf16 rows. */
typedef void tile_fn(const float *q, float *o, float *m, float *l, int ra, int rb, __mmask16 visa, __mmask16 visb,
                     const void *const *kr, const void *const *vr, const attn_params *p);
#define TILE_FN(name, two, bf16)                                                                                   \
    static void name(const float *q, float *o, float *m, float *l, int ra, int rb, __mmask16 visa, __mmask16 visb, \
                     const void *const *kr, const void *const *vr, const attn_params *p) {                         \
        tile_pair(q, o, m, l, ra, two ? rb : ra, visa, two ? visb : visa, kr, vr, p, two, bf16);                   \
    }
TILE_FN(tile_pair2_f32, 1, 0)
TILE_FN(tile_pair1_f32, 0, 0)
TILE_FN(tile_pair2_bf16, 1, 1)
TILE_FN(tile_pair1_bf16, 0, 1)

void attn_decode_avx512(const float *q, const int32_t *qpos, int T, const attn_kv *kv, const attn_params *p,
                        int r_lo, int r_hi, float *o, float *m, float *l) {
    const int hd = p->head_dim, H = p->n_heads, hpk = H / p->n_kv;
    const long rs = kv->row_stride;
    const int bf16 = kv->dtype == KVT_BF16;
    const size_t esz = bf16 ? 2 : 4;
    tile_fn *const pair2 = bf16 ? tile_pair2_bf16 : tile_pair2_f32, *const pair1 = bf16 ? tile_pair1_bf16 : tile_pair1_f32;
    const char *K = kv->k, *V = kv->v;
    for (int i = 0; i < T * H; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        for (int d = 0; d < hd; d += 16) _mm512_storeu_ps(o + (long)i * hd + d, _mm512_setzero_ps());
    }
    for (int r0 = r_lo; r0 < r_hi; r0 += 16) {
        const int nb = r_hi - r0 < 16 ? r_hi - r0 : 16;
        const __mmask16 live = (__mmask16)((1u << nb) - 1);
        const long rb = attn_kv_row(kv, r0); /* the tile's 16 rows are one run of one block */
        const __m512i kp = _mm512_maskz_loadu_epi32(live, kv->pos + rb);
        /* the keys each token sees; a tile none sees is skipped before its keys are read */
        __mmask16 vis[ATTN_DEC_MAX_T], any = 0;
        for (int t = 0; t < T; t++) {
            vis[t] = _mm512_mask_cmple_epi32_mask(live, kp, _mm512_set1_epi32(qpos[t]));
            if (p->window > 0)
                vis[t] = _mm512_mask_cmpgt_epi32_mask(vis[t], kp, _mm512_set1_epi32(qpos[t] - p->window));
            any |= vis[t];
        }
        if (!any) continue;
        for (int g = 0; g < p->n_kv; g++) {
            /* key j's and value j's slice of this group; missing keys read row 0 (masked) */
            const void *kr[16], *vr[16];
            for (int j = 0; j < 16; j++) {
                const size_t x = (size_t)((rb + (j < nb ? j : 0)) * rs + (long)g * hd) * esz;
                kr[j] = K + x;
                vr[j] = V + x;
            }
            /* the group's rows that see a key of the tile, two at a time */
            int pend = -1;
            __mmask16 pvis = 0;
            for (int t = 0; t < T; t++) {
                if (!vis[t]) continue;
                for (int hh = 0; hh < hpk; hh++) {
                    const int row = t * H + g * hpk + hh;
                    if (pend < 0) {
                        pend = row;
                        pvis = vis[t];
                        continue;
                    }
                    pair2(q, o, m, l, pend, row, pvis, vis[t], kr, vr, p);
                    pend = -1;
                }
            }
            if (pend >= 0) pair1(q, o, m, l, pend, pend, pvis, pvis, kr, vr, p);
        }
    }
}
