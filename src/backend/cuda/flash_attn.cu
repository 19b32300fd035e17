/* backend/cuda/flash_attn.cu: prefill attention on the tensor cores over a bf16 KV
 * cache (flash attention: bf16 products, float32 accumulation, online softmax).
 *
 * A block takes FA_BM = 64 query rows of one KV head's group (row r of the group is
 * token r / G, head g * G + r % G, G = n_heads / n_kv, as the CUDA-core tiled kernel
 * in attention.cu), 16 rows per warp, and walks the keys in tiles of FA_BN = 64:
 * K and V tiles go to shared memory with cp.async (V's copy overlaps the scores),
 * S = Q K^T is mma.sync m16n8k16 (bf16 in, f32 out), the scores are scaled, capped
 * (softcap) and masked in float32 by the stored positions (causal, sliding window:
 * slot order is irrelevant, as in every attention kernel here), the online softmax
 * runs per row in registers, and P (rounded to bf16) times V accumulates O in
 * float32 on the tensor cores. A tile no row of the block can see is skipped. Sinks
 * enter at the end, as one more logit per head. When the query rows alone cannot fill
 * the GPU (decode, a short chunk after a long context), the keys are split across
 * blocks too (flash-decoding) and attention.cu's merge kernel combines the splits. The queries are rounded to bf16
 * once (they are float32 activations): this kernel is the fast precision's
 * (CELER_PRECISION=fast), which keeps a bf16 cache.
 *
 * Fragment layouts (PTX ISA, mma.m16n8k16 .bf16): lane = 4 g + t; A (16x16,
 * row-major): a0 (g, 2t..2t+1), a1 (g+8, 2t..), a2 (g, 2t+8..), a3 (g+8, 2t+8..);
 * B (16x8, k x n): b0 (k 2t..2t+1, n g), b1 (k 2t+8.., n g); C (16x8): c0 c1 (g,
 * 2t..2t+1), c2 c3 (g+8, 2t..). The score fragment of keys 16i..16i+15 (two C
 * tiles) is the A fragment of P for the same keys, so P never leaves registers.
 * Q and K fragments load with ldmatrix, V's with ldmatrix.trans (V is stored
 * key-major, the product wants it channel-major). Shared rows are padded by 8
 * elements (16 bytes), so the 8 row addresses of one 8x8 load hit distinct banks. */
#include <climits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kv_elem.cuh"
#include "backend/cuda/attn_merge.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#define FA_WARPS 4
#define FA_BM (FA_WARPS * 16)
#define FA_BN 64

template <int HD> struct fa_cfg {
    static constexpr int S = HD + 8;               /* padded shared row, in bf16 elements */
    static constexpr bool QREG = HD <= 128;        /* Q fragments kept in registers (wider heads reload them) */
    static constexpr size_t smem = (size_t)(FA_BM + 2 * FA_BN) * S * sizeof(uint16_t);
};

/* lo in the low half, hi in the high half, each rounded to nearest even */
__device__ __forceinline__ uint32_t fa_pack(float lo, float hi) {
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

__device__ __forceinline__ void fa_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void fa_ldsm4(uint32_t r[4], const uint16_t *p) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

__device__ __forceinline__ void fa_ldsm4t(uint32_t r[4], const uint16_t *p) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}


/* Pool row `slot`'s row of KV head g in a cache K or V (the one place that knows the
 * cache's row layout: rows of `stride` elements, heads side by side; a paged view's
 * view rows map to pool rows through kv_run, one table lookup per block a tile touches) */
template <int HD>
__device__ __forceinline__ const uint16_t *fa_row(const uint16_t *__restrict__ X, long slot, long stride, int g) {
    return X + slot * stride + (long)g * HD;
}

/* rows [FA_BN) of a K or V tile from the cache (zeros at and past key n) into s
 * [FA_BN][S]; r: the tile's rows' pool rows (kv_run_at(blocks, j0, n)) */
template <int HD>
__device__ __forceinline__ void fa_load_tile(uint16_t *s, const uint16_t *__restrict__ X, int j0, int n, const kv_run &r,
                                             long stride, int g) {
    constexpr int S = fa_cfg<HD>::S, CH = HD / 8; /* 16-byte chunks per row */
    for (int i = threadIdx.x; i < FA_BN * CH; i += FA_WARPS * 32) {
        const int j = i / CH, c = (i % CH) * 8;
        uint16_t *d = s + j * S + c;
        if (j0 + j < n) cuk_cp16(d, fa_row<HD>(X, kv_run_slot(r, j), stride, g) + c);
        else *(uint4 *)d = make_uint4(0, 0, 0, 0);
    }
}

/* grid (ceil(T * G / FA_BM), n_kv, splits): split z takes keys [z * per, (z + 1) *
 * per), per = ceil(n / splits), n and the block table read from dyn when it is not
 * NULL (a recorded decode step). One split: out [T, n_heads, HD]. Several: part [T * n_heads, splits,
 * HD + 2] (unnormalized accumulators, then max and sum), attention.cu's merge format. */
template <int HD>
__global__ void __launch_bounds__(FA_WARPS * 32) kernel_flash_attn(const float *__restrict__ q, const int32_t *__restrict__ qpos,
                                                                  int T, const uint16_t *__restrict__ K,
                                                                  const uint16_t *__restrict__ V, const int32_t *__restrict__ kpos,
                                                                  int n, const int32_t *__restrict__ blocks,
                                                                  const cuk_kv_dyn *__restrict__ dyn, long stride,
                                                                  int n_heads, int n_kv, float scale, int window, float softcap,
                                                                  const float *__restrict__ sinks, float *__restrict__ out,
                                                                  float *__restrict__ part) {
    cuk_pdl_start_small(CUK_LATE_ATTN);
    constexpr int S = fa_cfg<HD>::S, NT = HD / 8, KS = HD / 16;
    constexpr bool QREG = fa_cfg<HD>::QREG;
    extern __shared__ uint4 fa_sh4[];
    uint16_t *sq = (uint16_t *)fa_sh4; /* [FA_BM][S] queries (bf16) */
    uint16_t *sk = sq + FA_BM * S;      /* [FA_BN][S] keys */
    uint16_t *sv = sk + FA_BN * S;      /* [FA_BN][S] values */
    __shared__ int32_t skp[FA_BN];
    const int G = n_heads / n_kv, g = blockIdx.y;
    const long r0 = (long)blockIdx.x * FA_BM, total = (long)T * G;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, lg = lane >> 2, lt = lane & 3;
    if (dyn) {
        n = dyn->n;
        blocks = dyn->blocks;
    }
    const int splits = gridDim.z, per = (n + splits - 1) / splits;
    const int jb = (int)blockIdx.z * per, je = min(n, jb + per); /* this split's keys */

    for (int i = threadIdx.x; i < FA_BM * HD / 4; i += FA_WARPS * 32) {
        const int rr = i / (HD / 4), c = (i % (HD / 4)) * 4;
        const long r = r0 + rr;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r < total) v = *(const float4 *)(q + ((r / G) * n_heads + g * G + r % G) * (long)HD + c);
        *(uint2 *)(sq + rr * S + c) = make_uint2(fa_pack(v.x, v.y), fa_pack(v.z, v.w));
    }
    /* the block's query positions (bounds for skipping tiles) and this lane's two rows' */
    int qlo = INT_MAX, qhi = INT_MIN;
    for (long t = r0 / G; t <= (r0 + FA_BM - 1) / G && t < T; t++) {
        qlo = min(qlo, (int)qpos[t]);
        qhi = max(qhi, (int)qpos[t]);
    }
    const long ra = r0 + warp * 16 + lg, rb = ra + 8;
    const int qpa = ra < total ? qpos[ra / G] : INT_MIN, qpb = rb < total ? qpos[rb / G] : INT_MIN;

    float o[NT][4];
#pragma unroll
    for (int i = 0; i < NT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float ma = -INFINITY, mb = -INFINITY, la = 0.f, lb = 0.f;
    uint32_t qf[QREG ? KS : 1][4];
    const uint16_t *qrow = sq + (warp * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * S + (lane >> 4) * 8;
    __syncthreads();
    if (QREG) {
#pragma unroll
        for (int kk = 0; kk < KS; kk++) fa_ldsm4(qf[QREG ? kk : 0], qrow + kk * 16);
    }

    for (int j0 = jb; j0 < je; j0 += FA_BN) {
        __syncthreads(); /* the previous tile (and its positions) are consumed */
        const kv_run run = kv_run_at(blocks, j0, je); /* the tile's rows in the pool */
        if (threadIdx.x < FA_BN) skp[threadIdx.x] = j0 + (int)threadIdx.x < je ? kpos[kv_run_slot(run, threadIdx.x)] : INT_MAX;
        __syncthreads();
        {
            const int a = skp[lane], b = skp[lane + 32];
            const bool va = j0 + lane < je, vb = j0 + lane + 32 < je;
            int klo = min(va ? a : INT_MAX, vb ? b : INT_MAX), khi = max(va ? a : INT_MIN, vb ? b : INT_MIN);
#pragma unroll
            for (int o2 = 16; o2 > 0; o2 >>= 1) {
                klo = min(klo, __shfl_xor_sync(0xffffffffu, klo, o2));
                khi = max(khi, __shfl_xor_sync(0xffffffffu, khi, o2));
            }
            if (klo > qhi || (window > 0 && khi <= qlo - window)) continue; /* no row sees this tile (same in every warp) */
        }
        fa_load_tile<HD>(sk, K, j0, je, run, stride, g);
        cuk_cp_commit();
        fa_load_tile<HD>(sv, V, j0, je, run, stride, g);
        cuk_cp_commit();
        cuk_cp_wait<1>(); /* this thread's key copies have landed */
        __syncthreads();

        float sc[FA_BN / 8][4];
#pragma unroll
        for (int i = 0; i < FA_BN / 8; i++) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            uint32_t a[4];
            if (QREG) {
#pragma unroll
                for (int e = 0; e < 4; e++) a[e] = qf[QREG ? kk : 0][e];
            } else {
                fa_ldsm4(a, qrow + kk * 16);
            }
#pragma unroll
            for (int np = 0; np < FA_BN / 16; np++) {
                uint32_t b[4];
                fa_ldsm4(b, sk + (np * 16 + (lane & 7) + (lane >> 4) * 8) * S + kk * 16 + ((lane >> 3) & 1) * 8);
                fa_mma(sc[2 * np], a, b[0], b[1]);
                fa_mma(sc[2 * np + 1], a, b[2], b[3]);
            }
        }
        /* scale, cap, mask; the row maxima over the quad of lanes sharing a row */
        float xa = -INFINITY, xb = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < FA_BN / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int j = nt * 8 + 2 * lt + (e & 1), qp = e < 2 ? qpa : qpb;
                const int kp = skp[j];
                float s = sc[nt][e] * scale;
                if (softcap > 0.f) s = softcap * tanhf(s / softcap);
                const bool vis = j0 + j < je && kp <= qp && (window <= 0 || qp - kp < window);
                s = vis ? s : -INFINITY;
                sc[nt][e] = s;
                if (e < 2) xa = fmaxf(xa, s);
                else xb = fmaxf(xb, s);
            }
#pragma unroll
        for (int o2 = 1; o2 <= 2; o2 <<= 1) {
            xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, o2));
            xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, o2));
        }
        const float na = fmaxf(ma, xa), nb = fmaxf(mb, xb);
        const float ua = na == -INFINITY ? 0.f : na, ub = nb == -INFINITY ? 0.f : nb; /* no visible key yet: exp(-inf) = 0 */
        const float fa = __expf(ma - ua), fb = __expf(mb - ub);
        ma = na;
        mb = nb;
        float pa = 0.f, pb = 0.f;
#pragma unroll
        for (int nt = 0; nt < FA_BN / 8; nt++) {
            sc[nt][0] = __expf(sc[nt][0] - ua);
            sc[nt][1] = __expf(sc[nt][1] - ua);
            sc[nt][2] = __expf(sc[nt][2] - ub);
            sc[nt][3] = __expf(sc[nt][3] - ub);
            pa += sc[nt][0] + sc[nt][1];
            pb += sc[nt][2] + sc[nt][3];
        }
        la = la * fa + pa;
        lb = lb * fb + pb;
#pragma unroll
        for (int i = 0; i < NT; i++) {
            o[i][0] *= fa;
            o[i][1] *= fa;
            o[i][2] *= fb;
            o[i][3] *= fb;
        }
        cuk_cp_wait<0>(); /* the value copies too */
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < FA_BN / 16; kk++) {
            const uint32_t a[4] = {fa_pack(sc[2 * kk][0], sc[2 * kk][1]), fa_pack(sc[2 * kk][2], sc[2 * kk][3]),
                                   fa_pack(sc[2 * kk + 1][0], sc[2 * kk + 1][1]), fa_pack(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
            const uint16_t *vrow = sv + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * S + (lane >> 4) * 8;
#pragma unroll
            for (int np = 0; np < HD / 16; np++) {
                uint32_t b[4];
                fa_ldsm4t(b, vrow + np * 16);
                fa_mma(o[2 * np], a, b[0], b[1]);
                fa_mma(o[2 * np + 1], a, b[2], b[3]);
            }
        }
    }
    /* the quad's partial sums, then the sink and the normalization */
#pragma unroll
    for (int o2 = 1; o2 <= 2; o2 <<= 1) {
        la += __shfl_xor_sync(0xffffffffu, la, o2);
        lb += __shfl_xor_sync(0xffffffffu, lb, o2);
    }
#pragma unroll
    for (int half = 0; half < 2; half++) {
        const long r = half ? rb : ra;
        if (r >= total) continue;
        const int h = g * G + (int)(r % G);
        const float m = half ? mb : ma, l = half ? lb : la;
        if (part) { /* one split of several: kernel_attn_merge adds the sink and normalizes */
            float *dst = part + (((r / G) * n_heads + h) * (long)splits + blockIdx.z) * (HD + 2);
#pragma unroll
            for (int nt = 0; nt < NT; nt++)
                *(float2 *)(dst + nt * 8 + 2 * lt) = make_float2(o[nt][2 * half], o[nt][2 * half + 1]);
            if (lt == 0) {
                dst[HD] = m;
                dst[HD + 1] = l;
            }
            continue;
        }
        float M = m, L = l, f = 1.f;
        if (sinks) {
            M = fmaxf(m, sinks[h]);
            f = m == -INFINITY ? 0.f : __expf(m - M);
            L = l * f + __expf(sinks[h] - M);
        }
        const float inv = L > 0.f ? f / L : 0.f;
        float *dst = out + ((r / G) * n_heads + h) * (long)HD + 2 * lt;
#pragma unroll
        for (int nt = 0; nt < NT; nt++)
            *(float2 *)(dst + nt * 8) = make_float2(o[nt][2 * half] * inv, o[nt][2 * half + 1] * inv);
    }
}

/* ---- decode: a lean tile for a few query rows over many keys --------------------
 * When all query rows of one KV head's group fit one m16 tile (T * G <= 16: decode,
 * and short chunks), kernel_flash_attn would stage 64 rows (48 of them padding) and walk
 * its split's keys as 64-key tiles one after the other, the copies of each tile waited
 * for before its scores (two serialized load latencies per 128-key split). Here the
 * block's 4 warps share the one 16-row query tile and split the keys instead: warp w
 * takes keys [j0 + 32 w, j0 + 32 w + 32) of each 128-key pass, each warp copies its own
 * K and V rows (all four warps' copies are in flight at once, so a split of 128 keys is
 * one load latency) and keeps its own online softmax; at the end the warps' maxima,
 * sums and accumulators are combined through shared memory into the split's partial
 * (kernel_fa_merge's format) or, with one split, the normalized output. */
#define FD_WARPS 4
#define FD_KW 32 /* keys a warp takes per pass */

template <int HD> struct fd_cfg {
    static constexpr int S = HD + 8; /* padded shared row, in bf16 elements */
    static constexpr size_t kv = (size_t)FD_WARPS * 2 * FD_KW * S * sizeof(uint16_t); /* per warp: K, V rows */
    static constexpr size_t comb = (size_t)FD_WARPS * 16 * HD * sizeof(float);         /* the warps' accumulators */
    static constexpr size_t smem = (size_t)16 * S * sizeof(uint16_t) + (kv > comb ? kv : comb);
};

/* One block's work of the lean kernel: KV head g's group of the T query rows q [T,
 * n_heads, HD] at qpos [T] against keys [0, n) of one cache (K, V, kpos: rows of
 * stride elements; blocks: its block table or NULL), key split `split` of `splits`
 * (keys [split * per, split * per + per), per = ceil(n / splits)). One split: out
 * [T, n_heads, HD]; several: part [T * n_heads, pstride, HD + 2] at column `split`
 * (pstride >= splits: the grid's split count). Every thread of the block calls it. */
template <int HD>
__device__ __forceinline__ void fd_block(const float *__restrict__ q, const int32_t *__restrict__ qpos, int T,
                                         const uint16_t *__restrict__ K, const uint16_t *__restrict__ V,
                                         const int32_t *__restrict__ kpos, int n, const int32_t *__restrict__ blocks,
                                         long stride, int n_heads, int n_kv, int g, int split, int splits, int pstride,
                                         float scale, int window, float softcap, const float *__restrict__ sinks,
                                         float *__restrict__ out, float *__restrict__ part, uint16_t *__restrict__ ybf) {
    constexpr int S = fd_cfg<HD>::S, NT = HD / 8, KS = HD / 16, CH = HD / 8;
    constexpr bool QREG = HD <= 128;
    extern __shared__ uint4 fd_sh4[];
    uint16_t *sq = (uint16_t *)fd_sh4;          /* [16][S] queries (bf16) */
    float *scomb = (float *)(sq + 16 * S);      /* [FD_WARPS][16][HD] after the keys (aliases them) */
    __shared__ float sm[FD_WARPS][16], sl[FD_WARPS][16];
    const int G = n_heads / n_kv, total = T * G;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, lg = lane >> 2, lt = lane & 3;
    uint16_t *sk = sq + 16 * S + warp * 2 * FD_KW * S; /* [FD_KW][S] this warp's keys */
    uint16_t *sv = sk + FD_KW * S;                      /* [FD_KW][S] and values */
    const int per = (n + splits - 1) / splits;
    const int jb = split * per, je = min(n, jb + per);

    /* this warp's rows [j0, j0 + FD_KW) of K and V (zeros past je) as two copy groups */
    auto load = [&](int j0) {
        const kv_run run = kv_run_at(blocks, j0, je); /* 32 rows: at most two blocks */
        for (int i = lane; i < FD_KW * CH; i += 32) {
            const int j = i / CH, c = (i % CH) * 8;
            uint16_t *d = sk + j * S + c;
            if (j0 + j < je) cuk_cp16(d, fa_row<HD>(K, kv_run_slot(run, j), stride, g) + c);
            else *(uint4 *)d = make_uint4(0, 0, 0, 0);
        }
        cuk_cp_commit();
        for (int i = lane; i < FD_KW * CH; i += 32) {
            const int j = i / CH, c = (i % CH) * 8;
            uint16_t *d = sv + j * S + c;
            if (j0 + j < je) cuk_cp16(d, fa_row<HD>(V, kv_run_slot(run, j), stride, g) + c);
            else *(uint4 *)d = make_uint4(0, 0, 0, 0);
        }
        cuk_cp_commit();
    };
    int j0 = jb + warp * FD_KW;
    if (j0 < je) load(j0); /* the first pass's copies go out before the queries are staged */

    for (int i = threadIdx.x; i < 16 * HD / 4; i += FD_WARPS * 32) {
        const int r = i / (HD / 4), c = (i % (HD / 4)) * 4;
        float4 v = make_float4(0.f, 0.f, 0.f, 0.f);
        if (r < total) v = *(const float4 *)(q + ((long)(r / G) * n_heads + g * G + r % G) * HD + c);
        *(uint2 *)(sq + r * S + c) = make_uint2(fa_pack(v.x, v.y), fa_pack(v.z, v.w));
    }
    int qlo = INT_MAX, qhi = INT_MIN;
    for (int t = 0; t < T; t++) {
        qlo = min(qlo, (int)qpos[t]);
        qhi = max(qhi, (int)qpos[t]);
    }
    const int ra = lg, rb = lg + 8;
    const int qpa = ra < total ? qpos[ra / G] : INT_MIN, qpb = rb < total ? qpos[rb / G] : INT_MIN;
    const uint16_t *qrow = sq + ((lane & 7) + ((lane >> 3) & 1) * 8) * S + (lane >> 4) * 8;
    __syncthreads(); /* the queries are staged */
    uint32_t qf[QREG ? KS : 1][4];
    if (QREG) {
#pragma unroll
        for (int kk = 0; kk < KS; kk++) fa_ldsm4(qf[QREG ? kk : 0], qrow + kk * 16);
    }

    float o[NT][4];
#pragma unroll
    for (int i = 0; i < NT; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.f;
    float ma = -INFINITY, mb = -INFINITY, la = 0.f, lb = 0.f;
    for (; j0 < je; j0 += FD_WARPS * FD_KW) {
        if (j0 != jb + warp * FD_KW) { /* a later pass: the last one's reads are done */
            __syncwarp();
            load(j0);
        }
        const bool kv_ok = j0 + lane < je;
        const int kp_l = kv_ok ? kpos[kv_slot(blocks, j0 + lane)] : INT_MAX;
        int klo = kp_l, khi = kv_ok ? kp_l : INT_MIN;
#pragma unroll
        for (int o2 = 16; o2 > 0; o2 >>= 1) {
            klo = min(klo, __shfl_xor_sync(0xffffffffu, klo, o2));
            khi = max(khi, __shfl_xor_sync(0xffffffffu, khi, o2));
        }
        if (klo > qhi || (window > 0 && khi <= qlo - window)) { /* no row sees these keys */
            cuk_cp_wait<0>();
            continue;
        }
        cuk_cp_wait<1>(); /* this lane's key copies have landed */
        __syncwarp();  /* and every lane's */
        float sc[FD_KW / 8][4];
#pragma unroll
        for (int i = 0; i < FD_KW / 8; i++) sc[i][0] = sc[i][1] = sc[i][2] = sc[i][3] = 0.f;
#pragma unroll
        for (int kk = 0; kk < KS; kk++) {
            uint32_t a[4];
            if (QREG) {
#pragma unroll
                for (int e = 0; e < 4; e++) a[e] = qf[QREG ? kk : 0][e];
            } else {
                fa_ldsm4(a, qrow + kk * 16);
            }
#pragma unroll
            for (int np = 0; np < FD_KW / 16; np++) {
                uint32_t b[4];
                fa_ldsm4(b, sk + (np * 16 + (lane & 7) + (lane >> 4) * 8) * S + kk * 16 + ((lane >> 3) & 1) * 8);
                fa_mma(sc[2 * np], a, b[0], b[1]);
                fa_mma(sc[2 * np + 1], a, b[2], b[3]);
            }
        }
        float xa = -INFINITY, xb = -INFINITY;
#pragma unroll
        for (int nt = 0; nt < FD_KW / 8; nt++)
#pragma unroll
            for (int e = 0; e < 4; e++) {
                const int j = nt * 8 + 2 * lt + (e & 1), qp = e < 2 ? qpa : qpb;
                const int kp = __shfl_sync(0xffffffffu, kp_l, j);
                float s = sc[nt][e] * scale;
                if (softcap > 0.f) s = softcap * tanhf(s / softcap);
                const bool vis = j0 + j < je && kp <= qp && (window <= 0 || qp - kp < window);
                s = vis ? s : -INFINITY;
                sc[nt][e] = s;
                if (e < 2) xa = fmaxf(xa, s);
                else xb = fmaxf(xb, s);
            }
#pragma unroll
        for (int o2 = 1; o2 <= 2; o2 <<= 1) {
            xa = fmaxf(xa, __shfl_xor_sync(0xffffffffu, xa, o2));
            xb = fmaxf(xb, __shfl_xor_sync(0xffffffffu, xb, o2));
        }
        const float na = fmaxf(ma, xa), nb = fmaxf(mb, xb);
        const float ua = na == -INFINITY ? 0.f : na, ub = nb == -INFINITY ? 0.f : nb;
        const float fa = __expf(ma - ua), fb = __expf(mb - ub);
        ma = na;
        mb = nb;
        float pa = 0.f, pb = 0.f;
#pragma unroll
        for (int nt = 0; nt < FD_KW / 8; nt++) {
            sc[nt][0] = __expf(sc[nt][0] - ua);
            sc[nt][1] = __expf(sc[nt][1] - ua);
            sc[nt][2] = __expf(sc[nt][2] - ub);
            sc[nt][3] = __expf(sc[nt][3] - ub);
            pa += sc[nt][0] + sc[nt][1];
            pb += sc[nt][2] + sc[nt][3];
        }
        la = la * fa + pa;
        lb = lb * fb + pb;
#pragma unroll
        for (int i = 0; i < NT; i++) {
            o[i][0] *= fa;
            o[i][1] *= fa;
            o[i][2] *= fb;
            o[i][3] *= fb;
        }
        cuk_cp_wait<0>(); /* the value copies too */
        __syncwarp();
#pragma unroll
        for (int kk = 0; kk < FD_KW / 16; kk++) {
            const uint32_t a[4] = {fa_pack(sc[2 * kk][0], sc[2 * kk][1]), fa_pack(sc[2 * kk][2], sc[2 * kk][3]),
                                   fa_pack(sc[2 * kk + 1][0], sc[2 * kk + 1][1]), fa_pack(sc[2 * kk + 1][2], sc[2 * kk + 1][3])};
            const uint16_t *vrow = sv + (kk * 16 + (lane & 7) + ((lane >> 3) & 1) * 8) * S + (lane >> 4) * 8;
#pragma unroll
            for (int np = 0; np < HD / 16; np++) {
                uint32_t b[4];
                fa_ldsm4t(b, vrow + np * 16);
                fa_mma(o[2 * np], a, b[0], b[1]);
                fa_mma(o[2 * np + 1], a, b[2], b[3]);
            }
        }
    }
    /* each warp's row sums over its quad, its maxima and sums to shared memory */
#pragma unroll
    for (int o2 = 1; o2 <= 2; o2 <<= 1) {
        la += __shfl_xor_sync(0xffffffffu, la, o2);
        lb += __shfl_xor_sync(0xffffffffu, lb, o2);
    }
    if (lt == 0) {
        sm[warp][ra] = ma;
        sl[warp][ra] = la;
        sm[warp][rb] = mb;
        sl[warp][rb] = lb;
    }
    __syncthreads(); /* every warp is done with its keys (scomb reuses their space) */
    float Ma = -INFINITY, Mb = -INFINITY;
#pragma unroll
    for (int w = 0; w < FD_WARPS; w++) {
        Ma = fmaxf(Ma, sm[w][ra]);
        Mb = fmaxf(Mb, sm[w][rb]);
    }
    const float fa = ma == -INFINITY ? 0.f : __expf(ma - Ma), fb = mb == -INFINITY ? 0.f : __expf(mb - Mb);
#pragma unroll
    for (int nt = 0; nt < NT; nt++) {
        const int c = nt * 8 + 2 * lt;
        *(float2 *)(scomb + (warp * 16 + ra) * HD + c) = make_float2(o[nt][0] * fa, o[nt][1] * fa);
        *(float2 *)(scomb + (warp * 16 + rb) * HD + c) = make_float2(o[nt][2] * fb, o[nt][3] * fb);
    }
    __syncthreads();
    for (int i = threadIdx.x; i < total * HD; i += FD_WARPS * 32) {
        const int r = i / HD, c = i % HD, h = g * G + r % G;
        const long t = r / G;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < FD_WARPS; w++) M = fmaxf(M, sm[w][r]);
        float L = 0.f, acc = 0.f;
#pragma unroll
        for (int w = 0; w < FD_WARPS; w++) {
            L += sm[w][r] == -INFINITY ? 0.f : sl[w][r] * __expf(sm[w][r] - M);
            acc += scomb[(w * 16 + r) * HD + c];
        }
        if (part) { /* one split of several: kernel_fa_merge adds the sink and normalizes */
            float *dst = part + ((t * n_heads + h) * (long)pstride + split) * (HD + 2);
            dst[c] = acc;
            if (c == 0) {
                dst[HD] = M;
                dst[HD + 1] = L;
            }
            continue;
        }
        float f = 1.f;
        if (sinks) {
            const float M2 = fmaxf(M, sinks[h]);
            f = M == -INFINITY ? 0.f : __expf(M - M2);
            L = L * f + __expf(sinks[h] - M2);
        }
        const float inv = L > 0.f ? f / L : 0.f, y = acc * inv;
        out[(t * n_heads + h) * (long)HD + c] = y;
        if (ybf) ybf[(t * n_heads + h) * (long)HD + c] = f2bf16(y);
    }
}

/* grid (n_kv, splits): as kernel_flash_attn with T * G <= 16 (one block of rows) */
template <int HD>
__global__ void __launch_bounds__(FD_WARPS * 32) kernel_flash_decode(const float *__restrict__ q, const int32_t *__restrict__ qpos,
                                                                    int T, const uint16_t *__restrict__ K,
                                                                    const uint16_t *__restrict__ V, const int32_t *__restrict__ kpos,
                                                                    int n, const int32_t *__restrict__ blocks,
                                                                    const cuk_kv_dyn *__restrict__ dyn, long stride,
                                                                    int n_heads, int n_kv, float scale, int window, float softcap,
                                                                    const float *__restrict__ sinks, float *__restrict__ out,
                                                                    float *__restrict__ part) {
    cuk_pdl_start();
    if (dyn) {
        n = dyn->n;
        blocks = dyn->blocks;
    }
    fd_block<HD>(q, qpos, T, K, V, kpos, n, blocks, stride, n_heads, n_kv, (int)blockIdx.x, (int)blockIdx.y, (int)gridDim.y,
                 (int)gridDim.y, scale, window, softcap, sinks, out, part, NULL);
}

/* A batched decode step's attention on the same tile (cuk_attention_batch's rows: one
 * query per sequence, each sequence's cache in its descriptor). grid (n_kv, splits,
 * rows); row r takes min(attn_splits(its keys), splits) splits, as kernel_attn_batch,
 * so cuk_attention_merge reads the same partials. A padding row (k == NULL) has no
 * keys: zeros out. Rows are read with 16-byte copies: the pool's bases are aligned
 * and a row's stride is whole heads of 64+ elements. */
template <int HD>
__global__ void __launch_bounds__(FD_WARPS * 32) kernel_flash_decode_batch(const float *__restrict__ q, const int32_t *__restrict__ qpos,
                                                                          const cuk_attn_seq *__restrict__ seqs, int n_heads, int n_kv,
                                                                          float scale, int window, float softcap,
                                                                          const float *__restrict__ sinks, float *__restrict__ out,
                                                                          float *__restrict__ part, uint16_t *__restrict__ ybf) {
    cuk_pdl_start_small(CUK_LATE_ATTN);
    const int row = blockIdx.z, splits = gridDim.y;
    const cuk_attn_seq sq = seqs[row];
    const int n = sq.k ? sq.n : 0, mine = min(attn_splits(n), splits);
    if ((int)blockIdx.y >= mine) return; /* the merge reads only this row's splits */
    const long qo = (long)row * n_heads * HD;
    fd_block<HD>(q + qo, qpos + row, 1, (const uint16_t *)sq.k, (const uint16_t *)sq.v, sq.pos, n, sq.blocks, sq.stride,
                 n_heads, n_kv, (int)blockIdx.x, (int)blockIdx.y, mine, splits, scale, window, softcap, sinks,
                 splits > 1 ? NULL : out + qo, splits > 1 ? part + (long)row * n_heads * splits * (HD + 2) : NULL,
                 ybf && splits == 1 ? ybf + qo : NULL);
}

#define FA_MAX_SPLITS 128

/* grid T * n_heads, 128 threads: merges the key splits' partials of one (token, head),
 * part [splits, HD + 2], and the head's sink logit into out [HD]. The split maxima and
 * weights go through shared memory once, so the channel loop reads each partial
 * once, coalesced (kernel_attn_merge in attention.cu re-reads them per channel). */
__global__ void __launch_bounds__(128) kernel_fa_merge(const float *__restrict__ part, int splits, int hd,
                                                      const float *__restrict__ sinks, int n_heads, float *__restrict__ out) {
    cuk_pdl_start_small(CUK_LATE_ATTN);
    __shared__ float w[FA_MAX_SPLITS], red[4];
    const int th = blockIdx.x, lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const float *p = part + (long)th * splits * (hd + 2);
    float mx = -INFINITY;
    for (int s = threadIdx.x; s < splits; s += blockDim.x) mx = fmaxf(mx, p[(long)s * (hd + 2) + hd]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    float M = fmaxf(fmaxf(red[0], red[1]), fmaxf(red[2], red[3]));
    if (sinks) M = fmaxf(M, sinks[th % n_heads]);
    __syncthreads(); /* red is reused below */
    float L = 0.f;
    for (int s = threadIdx.x; s < splits; s += blockDim.x) {
        const float ms = p[(long)s * (hd + 2) + hd];
        const float f = ms == -INFINITY ? 0.f : __expf(ms - M);
        w[s] = f;
        L += f * p[(long)s * (hd + 2) + hd + 1];
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) L += __shfl_xor_sync(0xffffffffu, L, o);
    if (lane == 0) red[warp] = L;
    __syncthreads();
    L = red[0] + red[1] + red[2] + red[3];
    if (sinks) L += __expf(sinks[th % n_heads] - M);
    const float inv = L > 0.f ? 1.f / L : 0.f;
    for (int c = threadIdx.x; c < hd; c += blockDim.x) {
        float acc = 0.f;
        for (int s = 0; s < splits; s++) acc += w[s] * p[(long)s * (hd + 2) + c];
        out[(long)th * hd + c] = acc * inv;
    }
}

/* Key splits: enough blocks to fill the GPU (about 256, a block takes 64 query rows of
 * one KV group), at most one per 64 keys of the count's 256-key bucket, so every key
 * count of one bucket (cuk_attention_bucket) splits alike, as a recorded step needs. */
static int fa_splits(int T, int n_heads, int n) {
    const long blocks = ((long)T * n_heads + FA_BM - 1) / FA_BM;
    int cap = 2 * ((n + 255) / 256); /* 128 keys (two tiles) a split at least: fewer partials to merge */
    if (cap > FA_MAX_SPLITS) cap = FA_MAX_SPLITS;
    int sp = (int)((256 + blocks - 1) / blocks);
    return sp < 1 ? 1 : sp > cap ? cap : sp;
}

extern "C" size_t cuk_flash_work(int T, int n_heads, int head_dim, int n_keys) {
    const int sp = fa_splits(T, n_heads, n_keys);
    return sp > 1 ? (size_t)T * n_heads * sp * (head_dim + 2) : 0;
}

/* The opt-in to more than 48 KiB of dynamic shared memory for kernel k, once per
 * kernel and GPU (ready: that kernel's flags); 0, or cuk_check's -1 when refused. */
template <typename K>
static int smem_opt_in(K k, size_t bytes, int *ready, const char *what) {
    int dev = 0;
    cudaGetDevice(&dev);
    if (dev >= 0 && dev < 64 && ready[dev]) return 0;
    if (cudaFuncSetAttribute(k, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)bytes) != cudaSuccess)
        return cuk_check(what);
    if (dev >= 0 && dev < 64) ready[dev] = 1;
    return 0;
}

template <int HD>
static int flash(const float *q, const int32_t *qpos, int T, const attn_kv *kv, const cuk_kv_dyn *dyn, const attn_params *p,
                 float *out, float *work, int splits, cudaStream_t s) {
    static int ready[64];
    if (smem_opt_in(kernel_flash_attn<HD>, fa_cfg<HD>::smem, ready, "flash attention setup") != 0) return -1;
    const long total = (long)T * (p->n_heads / p->n_kv);
    const dim3 grid((unsigned)((total + FA_BM - 1) / FA_BM), (unsigned)p->n_kv, (unsigned)splits);
    cuk_launch(kernel_flash_attn<HD>, grid, FA_WARPS * 32, fa_cfg<HD>::smem, s, q, qpos, T, (const uint16_t *)kv->k,
               (const uint16_t *)kv->v, kv->pos, kv->n, kv->blocks, dyn, kv->row_stride, p->n_heads, p->n_kv, p->scale, p->window,
               p->softcap, p->sinks, out, splits > 1 ? work : (float *)NULL);
    return cuk_check("flash attention");
}

static int fd_on = -1; /* cuk_flash_decode_set (-1: CUK_FLASH_DECODE) */

extern "C" void cuk_flash_decode_set(int on) { fd_on = on < 0 ? -1 : on != 0; }

template <int HD>
static int flash_decode(const float *q, const int32_t *qpos, int T, const attn_kv *kv, const cuk_kv_dyn *dyn,
                        const attn_params *p, float *out, float *work, int splits, cudaStream_t s) {
    static int ready[64];
    if (smem_opt_in(kernel_flash_decode<HD>, fd_cfg<HD>::smem, ready, "flash decode setup") != 0) return -1;
    const dim3 grid((unsigned)p->n_kv, (unsigned)splits);
    cuk_launch(kernel_flash_decode<HD>, grid, FD_WARPS * 32, fd_cfg<HD>::smem, s, q, qpos, T, (const uint16_t *)kv->k,
               (const uint16_t *)kv->v, kv->pos, kv->n, kv->blocks, dyn, kv->row_stride, p->n_heads, p->n_kv, p->scale, p->window,
               p->softcap, p->sinks, out, splits > 1 ? work : (float *)NULL);
    return cuk_check("flash decode");
}

template <int HD>
static int flash_decode_batch(const float *q, const int32_t *qpos, int n, const cuk_attn_seq *seqs, int splits,
                              const attn_params *p, float *out, float *work, uint16_t *ybf, cudaStream_t s) {
    static int ready[64];
    if (smem_opt_in(kernel_flash_decode_batch<HD>, fd_cfg<HD>::smem, ready, "flash decode (batch) setup") != 0) return -1;
    const dim3 grid((unsigned)p->n_kv, (unsigned)splits, (unsigned)n);
    cuk_launch(kernel_flash_decode_batch<HD>, grid, FD_WARPS * 32, fd_cfg<HD>::smem, s, q, qpos, seqs, p->n_heads, p->n_kv,
               p->scale, p->window, p->softcap, p->sinks, out, splits > 1 ? work : (float *)NULL, ybf);
    return cuk_check("flash decode (batch)");
}

extern "C" int cuk_flash_decode_batch(const float *q, const int32_t *qpos, int n, const cuk_attn_seq *seqs, int splits,
                                      const attn_params *p, float *out, float *work, uint16_t *ybf, cuk_stream st) {
    cudaStream_t s = (cudaStream_t)st;
    if (!cuk_flash_decode_batch_ok(q, p) || (ybf && splits > 1)) return 1;
    switch (p->head_dim) {
    case 64: return flash_decode_batch<64>(q, qpos, n, seqs, splits, p, out, work, ybf, s);
    case 96: return flash_decode_batch<96>(q, qpos, n, seqs, splits, p, out, work, ybf, s);
    case 128: return flash_decode_batch<128>(q, qpos, n, seqs, splits, p, out, work, ybf, s);
    case 192: return flash_decode_batch<192>(q, qpos, n, seqs, splits, p, out, work, ybf, s);
    default: return flash_decode_batch<256>(q, qpos, n, seqs, splits, p, out, work, ybf, s);
    }
}

extern "C" int cuk_flash_decode_batch_ok(const float *q, const attn_params *p) {
    const int hd = p->head_dim;
    return !((uintptr_t)q & 15) && p->n_kv > 0 && p->n_heads % p->n_kv == 0 && p->n_heads / p->n_kv <= 16 &&
           (hd == 64 || hd == 96 || hd == 128 || hd == 192 || hd == 256); /* 32 and 512 keep the CUDA-core kernel */
}

extern "C" int cuk_flash_attention(const float *q, const int32_t *qpos, int T, const attn_kv *kv, const cuk_kv_dyn *dyn,
                                   const attn_params *p, float *out, float *work, int *splits, cuk_stream st) {
    cudaStream_t s = (cudaStream_t)st;
    /* 16-byte copies of each row's head: aligned rows and strides only */
    if (kv->dtype != KVT_BF16 || ((uintptr_t)kv->k & 15) || ((uintptr_t)kv->v & 15) || (kv->row_stride & 7) ||
        ((uintptr_t)q & 15) || (p->n_heads % p->n_kv))
        return 1;
    const int sp = fa_splits(T, p->n_heads, kv->n);
    if (sp > 1 && !work) return 1;
    *splits = 1; /* merged here */
    int r;
    /* every row in one m16 tile: the lean decode kernel (CUK_FLASH_DECODE, on by
     * default since the twenty-first session: alone, 20.5 against 29.3 us over 4,096
     * keys; end to end, llama3-8b bf16 tg128 at depth 4,096 209-211 -> 221 tok/s, its q4
     * +8.5%, qwen3-0.6b +18%, no change at depth 0; the sixteenth session's A/B that
     * lost had decode staging on with it: docs/benchmarks/cuda.md) */
    if (fd_on < 0) fd_on = setting_flag(SET_CUK_FLASH_DECODE);
    if ((long)T * (p->n_heads / p->n_kv) <= 16 && fd_on) {
        switch (p->head_dim) {
        case 64: r = flash_decode<64>(q, qpos, T, kv, dyn, p, out, work, sp, s); break;
        case 96: r = flash_decode<96>(q, qpos, T, kv, dyn, p, out, work, sp, s); break;
        case 128: r = flash_decode<128>(q, qpos, T, kv, dyn, p, out, work, sp, s); break;
        case 192: r = flash_decode<192>(q, qpos, T, kv, dyn, p, out, work, sp, s); break;
        case 256: r = flash_decode<256>(q, qpos, T, kv, dyn, p, out, work, sp, s); break;
        default: return 1;
        }
    } else switch (p->head_dim) {
    case 64: r = flash<64>(q, qpos, T, kv, dyn, p, out, work, sp, s); break;
    case 96: r = flash<96>(q, qpos, T, kv, dyn, p, out, work, sp, s); break;
    case 128: r = flash<128>(q, qpos, T, kv, dyn, p, out, work, sp, s); break;
    case 192: r = flash<192>(q, qpos, T, kv, dyn, p, out, work, sp, s); break;
    case 256: r = flash<256>(q, qpos, T, kv, dyn, p, out, work, sp, s); break;
    default: return 1; /* 32 and 512 (Gemma 4's wide heads) keep the CUDA-core kernels */
    }
    if (r != 0 || sp == 1) return r;
    cuk_launch(kernel_fa_merge, T * p->n_heads, 128, 0, s, work, sp, p->head_dim, p->sinks, p->n_heads, out);
    return cuk_check("flash attention merge");
}
