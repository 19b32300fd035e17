/* backend/cuda/attn_merge.cuh: what the split-KV attention kernels (attention.cu's
 * per-query kernel, attention_batch.cu's batched decode kernel) share: how a key
 * range is split across blocks, and how a block's warps merge their online softmax
 * (max, sum, weighted values) into one output or one split's partial. The merge of
 * the partials is cuk_attention_merge (attention.cu); and the walk of a warp over its
 * keys (attn_walk). One copy, so both kernels sum in the same order for the same
 * split. Includers include common.cuh and kv_elem.cuh first. */
#ifndef CELER_CUDA_ATTN_MERGE_CUH
#define CELER_CUDA_ATTN_MERGE_CUH

#define ATT_KEYS_PER_SPLIT 256
#define ATT_MAX_SPLITS 64

/* Warps per block of both decode kernels for a grid of `blocks` blocks (both kernels
 * choose alike, so they sum in the same order for the same grid size). A small grid
 * (8 sequences of llama3-8b: 64 blocks on 132 SMs) is bound by the latency of each
 * warp's key walk, and more warps walk fewer keys each; a large one has warps enough.
 * Measured on the H200 (docs/benchmarks/cuda-batched.md, eleventh session): 8 warps
 * +3% at 8 sequences, -8% at 128; one sequence unchanged. CUK_ATTN_WARPS forces 4, 8
 * or 16 (16 only for head dims up to 128, where a 512-thread block's 128 registers a
 * thread hold the state; 8 above). */
static inline int attn_decode_warps(int hd, long blocks) {
    static int env = -1;
    if (env < 0) {
        const long v = setting_int(SET_CUK_ATTN_WARPS);
        env = v == 4 || v == 8 || v == 16 ? (int)v : 0;
    }
    if (env) return env == 16 && hd > 128 ? 8 : env;
    return blocks < 2L * cuk_sm_count() ? 8 : 4;
}

/* Blocks over n_keys keys: one per ATT_KEYS_PER_SPLIT keys, 1 to ATT_MAX_SPLITS. */
static __host__ __device__ inline int attn_splits(int n_keys) {
    int s = (n_keys + ATT_KEYS_PER_SPLIT - 1) / ATT_KEYS_PER_SPLIT;
    return s < 1 ? 1 : s > ATT_MAX_SPLITS ? ATT_MAX_SPLITS : s;
}

/* A block's W warps merged, every thread of the block calling (the shared arrays
 * written and synchronized): sm, sl [W] each warp's max and sum, sacc [W][HD] its
 * weighted values. With final (one split): final[HD] <- the normalized output, the
 * head's sink logit *sink added when sink is not NULL. Else part[HD + 2] <- the
 * block's partial (acc[HD], max, sum) for cuk_attention_merge, which adds the sink. */
template <int HD, int W>
__device__ __forceinline__ void attn_warps_out(const float *sm, const float *sl, const float (*sacc)[HD], const float *sink,
                                               float *final_out, float *part) {
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < W; w++) M = fmaxf(M, sm[w]);
    float L = 0.f;
    for (int w = 0; w < W; w++) L += sm[w] == -INFINITY ? 0.f : sl[w] * __expf(sm[w] - M);
    if (final_out) {
        float M2 = sink ? *sink : -INFINITY;
        M2 = fmaxf(M2, M);
        float L2 = sink ? __expf(*sink - M2) : 0.f;
        if (M != -INFINITY) L2 += L * __expf(M - M2);
        const float inv = L2 > 0.f ? 1.f / L2 : 0.f;
        for (int c = threadIdx.x; c < HD; c += blockDim.x) {
            float s = 0.f;
#pragma unroll
            for (int w = 0; w < W; w++) s += sm[w] == -INFINITY ? 0.f : sacc[w][c] * __expf(sm[w] - M);
            float a = 0.f;
            if (M != -INFINITY) a += s * __expf(M - M2);
            final_out[c] = a * inv;
        }
        return;
    }
    for (int c = threadIdx.x; c < HD; c += blockDim.x) {
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < W; w++) s += sm[w] == -INFINITY ? 0.f : sacc[w][c] * __expf(sm[w] - M);
        part[c] = s;
    }
    if (threadIdx.x == 0) {
        part[HD] = M;
        part[HD + 1] = L;
    }
}

/* Warp `warp` of W walks the keys j0 + warp, j0 + warp + W, ... below j1 (the order
 * both kernels accumulate in) and calls use(k, v) with each live key's K and V rows
 * (PL channels per lane, lane + 32 i), in that order. Live: stored position at most
 * qp and, with a window, less than window behind it. Why not key by key: a key's
 * rows can only load after its table entry and its position have, three dependent
 * memory reads per key, and a decode step's grid is small (8 rows of llama3-8b: 64
 * blocks), so those latencies were the kernel's time. Here the 32 lanes look up 32
 * keys' pool rows and positions at once, and the live keys' rows load NK keys
 * at a time (4; 2 or 1 for wide heads, to stay in registers). Every lane of the
 * warp calls it (ballots and shuffles). */
template <int W, int PL, typename KT, typename Use>
__device__ __forceinline__ void attn_walk(const KT *__restrict__ K, const KT *__restrict__ V, long stride, long off,
                                          const int32_t *__restrict__ blocks, const int32_t *__restrict__ kpos, int j0,
                                          int j1, int warp, int lane, int32_t qp, int window, Use use) {
    constexpr int NK = PL <= 4 ? 4 : PL <= 8 ? 2 : 1; /* keys in flight: 4 x 2 x PL floats of rows per lane at most 32 */
    for (int c = j0 + warp; c < j1; c += 32 * W) {
        const int jl = c + W * lane;
        long sl = 0;
        bool live = false;
        if (jl < j1) {
            sl = kv_slot(blocks, jl);
            const int32_t kp = kpos[sl];
            live = kp <= qp && !(window > 0 && qp - kp >= window);
        }
        unsigned todo = __ballot_sync(0xffffffffu, live);
        while (todo) {
            int src[NK];
            bool has[NK];
#pragma unroll
            for (int u = 0; u < NK; u++) {
                has[u] = todo != 0;
                src[u] = has[u] ? __ffs(todo) - 1 : src[0]; /* a missing key re-reads the first's rows */
                todo &= todo - 1;
            }
            float k[NK][PL], v[NK][PL];
#pragma unroll
            for (int u = 0; u < NK; u++) {
                const long r = __shfl_sync(0xffffffffu, sl, src[u]) * stride + off;
#pragma unroll
                for (int i = 0; i < PL; i++) {
                    k[u][i] = kv_ld(K + r + lane + 32 * i);
                    v[u][i] = kv_ld(V + r + lane + 32 * i);
                }
            }
#pragma unroll
            for (int u = 0; u < NK; u++)
                if (has[u]) use(k[u], v[u]);
        }
    }
}
#endif
