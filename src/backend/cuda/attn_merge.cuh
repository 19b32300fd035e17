/* backend/cuda/attn_merge.cuh: what the split-KV attention kernels (attention.cu's
 * per-query kernel, attention_batch.cu's batched decode kernel) share: how a key
 * range is split across blocks, and how a block's warps merge their online softmax
 * (max, sum, weighted values) into one output or one split's partial. The merge of
 * the partials is cuk_attention_merge (attention.cu). One copy, so both kernels sum
 * in the same order for the same split. */
#ifndef CELER_CUDA_ATTN_MERGE_CUH
#define CELER_CUDA_ATTN_MERGE_CUH

#define ATT_KEYS_PER_SPLIT 256
#define ATT_MAX_SPLITS 64

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

#endif
