/* backend/cpu/attn_decode_avx512.c: decode attention at the avx512 level: a few query
 * tokens (1..ATTN_DEC_MAX_T) of every head against one range of cache rows, the
 * range being one split of a flash-decoding call (attention.c merges the splits).
 *
 * Why not the key tiles of attention_avx512.c: a decode call has 1-2 query rows per
 * KV group (qwen3: 2), too few to amortize a transpose of every key tile, and a task
 * per KV group read one 512-byte slice of every 4 KB cache row, so each row began
 * with a miss the hardware prefetchers (which stay within a page) never covered.
 * Here one task walks its rows for every group, 16 keys at a time:
 *  - scores are dot products of a query row with each key row as it lies in memory
 *    (16 accumulators, one per key, over head_dim / 16 FMAs each), reduced to one
 *    16-lane vector (lane = key) by a transpose-and-add tree: the horizontal sums
 *    cost 45 shuffles and adds per 16 keys instead of one reduction per key;
 *  - the mask, the online softmax (running max and sum) and exp are 16-lane vectors
 *    as in the key tile; the values are added into the row's output while the tile's
 *    rows sit in L1 (the group's other query rows find them there);
 *  - while group g of a tile is computed, group g's slices of the next tile are
 *    prefetched into L2, so the reads of a tile never wait on memory. */
#include <immintrin.h>
#include <math.h>
#include <stdint.h>

#include "backend/cpu/attn_kernels.h"
#include "backend/cpu/exp512.h"

#define UNROLL _Pragma("GCC unroll 16")

/* Lane j of the result = the sum of a[j]'s 16 lanes. */
static inline __attribute__((always_inline)) __m512 hsum16(const __m512 *a) {
    __m512 x[8], y[4], z[2];
    /* x[i], per 128-bit lane: [a0+a2, b0+b2, a1+a3, b1+b3] of a = a[2i], b = a[2i+1] */
    UNROLL for (int i = 0; i < 8; i++)
        x[i] = _mm512_add_ps(_mm512_unpacklo_ps(a[2 * i], a[2 * i + 1]), _mm512_unpackhi_ps(a[2 * i], a[2 * i + 1]));
    /* y[i], per 128-bit lane L: the lane-L sums of a[4i .. 4i + 3] */
    UNROLL for (int i = 0; i < 4; i++) {
        const __m512d u = _mm512_castps_pd(x[2 * i]), v = _mm512_castps_pd(x[2 * i + 1]);
        y[i] = _mm512_add_ps(_mm512_castpd_ps(_mm512_unpacklo_pd(u, v)), _mm512_castpd_ps(_mm512_unpackhi_pd(u, v)));
    }
    /* z[i]: [y0.L0 + y0.L2, y0.L1 + y0.L3, y1.L0 + y1.L2, y1.L1 + y1.L3] of y0 = y[2i], y1 = y[2i + 1] */
    UNROLL for (int i = 0; i < 2; i++)
        z[i] = _mm512_add_ps(_mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], 0x44),
                             _mm512_shuffle_f32x4(y[2 * i], y[2 * i + 1], 0xee));
    return _mm512_add_ps(_mm512_shuffle_f32x4(z[0], z[1], 0x88), _mm512_shuffle_f32x4(z[0], z[1], 0xdd));
}

/* max_j x_j in every lane */
static inline __m512 hmax16(__m512 x) {
    x = _mm512_max_ps(x, _mm512_shuffle_f32x4(x, x, 0x4e));
    x = _mm512_max_ps(x, _mm512_shuffle_f32x4(x, x, 0xb1));
    x = _mm512_max_ps(x, _mm512_permute_ps(x, 0x4e));
    return _mm512_max_ps(x, _mm512_permute_ps(x, 0xb1));
}

/* Group g's slices of the nb rows from pool row rb on, K and V, into L2. */
static inline void prefetch_tile(const float *k, const float *v, long rb, int nb, long rs, long off, int hd) {
    for (int j = 0; j < nb; j++)
        for (int c = 0; c < hd; c += 16) {
            _mm_prefetch((const char *)(k + (rb + j) * rs + off + c), _MM_HINT_T1);
            _mm_prefetch((const char *)(v + (rb + j) * rs + off + c), _MM_HINT_T1);
        }
}

/* o [16 w] = o f + sum_j e_j v_j over the keys in vis (chunk c of v_j at
 * vt [(16 c + j) 16]): w independent chains (w a constant at each call). */
static inline __attribute__((always_inline)) void pv_add(float *o, const float *vt, __m512 e, __mmask16 vis, __m512 f,
                                                         int w) {
    __m512 a[8];
    UNROLL for (int c = 0; c < w; c++) a[c] = _mm512_mul_ps(_mm512_loadu_ps(o + 16 * c), f);
    for (__mmask16 rest = vis; rest; rest &= (__mmask16)(rest - 1)) {
        const int j = __builtin_ctz(rest);
        /* e_j from the register (a store and 16 narrow reloads would wait on
         * store-to-load forwarding of the 64-byte store) */
        const __m512 pj = _mm512_permutexvar_ps(_mm512_set1_epi32(j), e);
        UNROLL for (int c = 0; c < w; c++) a[c] = _mm512_fmadd_ps(pj, _mm512_load_ps(vt + (16 * c + j) * 16), a[c]);
    }
    UNROLL for (int c = 0; c < w; c++) _mm512_storeu_ps(o + 16 * c, a[c]);
}

void attn_decode_avx512(const float *q, const int32_t *qpos, int T, const attn_kv *kv, const attn_params *p,
                        int r_lo, int r_hi, float *o, float *m, float *l) {
    const int hd = p->head_dim, H = p->n_heads, hpk = H / p->n_kv, nc = hd / 16;
    const long rs = kv->row_stride;
    const float *K = kv->k, *V = kv->v;
    for (int i = 0; i < T * H; i++) {
        m[i] = -INFINITY;
        l[i] = 0.0f;
        for (int d = 0; d < hd; d += 16) _mm512_storeu_ps(o + (long)i * hd + d, _mm512_setzero_ps());
    }
    const __m512 vscale = _mm512_set1_ps(p->scale);
    float kt[ATTN_MAX_HD * 16] __attribute__((aligned(64))), vt[ATTN_MAX_HD * 16] __attribute__((aligned(64)));
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
        const int nbn = r0 + 16 < r_hi ? (r_hi - r0 - 16 < 16 ? r_hi - r0 - 16 : 16) : 0;
        const long rbn = nbn ? attn_kv_row(kv, r0 + 16) : 0;
        for (int g = 0; g < p->n_kv; g++) {
            if (nbn) prefetch_tile(K, V, rbn, nbn, rs, (long)g * hd, hd);
            /* the group's 16 key and value slices, copied chunk-major (kt [c][j][16]):
             * in the cache they lie 4 KB apart (qwen3), the same L1 set, so 16 keys and
             * 16 values (32 lines per set, 12 ways) would be reread from L2 by every
             * query row of the group */
            const float *kg = K + rb * rs + (long)g * hd, *vg = V + rb * rs + (long)g * hd;
            for (int j = 0; j < 16; j++)
                for (int c = 0; c < nc; c++) {
                    _mm512_store_ps(kt + (c * 16 + j) * 16, j < nb ? _mm512_loadu_ps(kg + j * rs + 16 * c) : _mm512_setzero_ps());
                    _mm512_store_ps(vt + (c * 16 + j) * 16, j < nb ? _mm512_loadu_ps(vg + j * rs + 16 * c) : _mm512_setzero_ps());
                }
            for (int t = 0; t < T; t++) {
                if (!vis[t]) continue;
                for (int hh = 0; hh < hpk; hh++) {
                    const int row = t * H + g * hpk + hh;
                    const float *qr = q + (long)row * hd;
                    __m512 acc[16];
                    UNROLL for (int j = 0; j < 16; j++) acc[j] = _mm512_setzero_ps();
                    for (int c = 0; c < nc; c++) {
                        const __m512 qc = _mm512_loadu_ps(qr + 16 * c);
                        UNROLL for (int j = 0; j < 16; j++)
                            acc[j] = _mm512_fmadd_ps(qc, _mm512_load_ps(kt + (c * 16 + j) * 16), acc[j]);
                    }
                    __m512 s = _mm512_mul_ps(hsum16(acc), vscale);
                    if (p->softcap > 0) {
                        float sv[16] __attribute__((aligned(64)));
                        _mm512_store_ps(sv, s);
                        for (int j = 0; j < 16; j++) sv[j] = p->softcap * tanhf(sv[j] / p->softcap);
                        s = _mm512_load_ps(sv);
                    }
                    s = _mm512_mask_blend_ps(vis[t], _mm512_set1_ps(-INFINITY), s);
                    /* the online softmax without branches (the running max is new in
                     * an unpredictable share of tiles): mn = max(m, max_j s_j) in every
                     * lane, f = e^(m - mn) rescales what the row has (0 before any key) */
                    const __m512 mo = _mm512_set1_ps(m[row]), mn = _mm512_max_ps(mo, hmax16(s));
                    const __m512 f = _mm512_maskz_mov_ps(_mm512_cmp_ps_mask(mo, _mm512_set1_ps(-INFINITY), _CMP_NEQ_OQ),
                                                         exp512(_mm512_sub_ps(mo, mn)));
                    const __m512 e = _mm512_maskz_mov_ps(vis[t], exp512(_mm512_sub_ps(s, mn)));
                    m[row] = _mm512_cvtss_f32(mn);
                    l[row] = l[row] * _mm512_cvtss_f32(f) + _mm512_reduce_add_ps(e);
                    float *orow = o + (long)row * hd;
                    int d0 = 0;
                    for (; d0 + 128 <= hd; d0 += 128) pv_add(orow + d0, vt + d0 * 16, e, vis[t], f, 8);
                    switch ((hd - d0) / 16) { /* a constant width, so the accumulators stay in registers */
                    case 1: pv_add(orow + d0, vt + d0 * 16, e, vis[t], f, 1); break;
                    case 2: pv_add(orow + d0, vt + d0 * 16, e, vis[t], f, 2); break;
                    case 3: pv_add(orow + d0, vt + d0 * 16, e, vis[t], f, 3); break;
                    case 4: pv_add(orow + d0, vt + d0 * 16, e, vis[t], f, 4); break;
                    case 5: pv_add(orow + d0, vt + d0 * 16, e, vis[t], f, 5); break;
                    case 6: pv_add(orow + d0, vt + d0 * 16, e, vis[t], f, 6); break;
                    case 7: pv_add(orow + d0, vt + d0 * 16, e, vis[t], f, 7); break;
                    default: break;
                    }
                }
            }
        }
    }
}
