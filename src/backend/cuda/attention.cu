/* backend/cuda/attention.cu: causal grouped-query attention over a KV cache in
 * device memory, read in place. The key range is split across blocks (flash-decoding)
 * so that one query over a long context still fills the GPU: each block keeps an
 * online softmax (max, sum, weighted values) per warp, the block merges its warps,
 * and a second kernel merges the splits and the per-head sink. */
#include "backend/cuda/common.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#define ATT_WARPS 4
#define KEYS_PER_SPLIT 256
#define MAX_SPLITS 64
#define MAX_HD 512

static int n_splits(int n_keys) {
    int s = (n_keys + KEYS_PER_SPLIT - 1) / KEYS_PER_SPLIT;
    return s < 1 ? 1 : s > MAX_SPLITS ? MAX_SPLITS : s;
}

extern "C" size_t cuk_attention_work(int T, int n_heads, int head_dim, int n_keys) {
    return (size_t)T * n_heads * n_splits(n_keys) * (head_dim + 2);
}

extern "C" int cuk_attention_bucket(int n_keys) { return n_splits(n_keys) * KEYS_PER_SPLIT; }

/* grid (T * n_heads, splits); partial [T*n_heads, splits, hd + 2]: acc[hd], m, l */
template <int HD>
__global__ void __launch_bounds__(ATT_WARPS * 32) kernel_attn_split(const float *__restrict__ q, const int32_t *__restrict__ qpos,
                                                                  const float *__restrict__ K, const float *__restrict__ V,
                                                                  const int32_t *__restrict__ kpos, int n,
                                                                  const int32_t *__restrict__ n_dev, long stride,
                                                                  int n_heads, int n_kv, float scale, int window, float softcap,
                                                                  int splits, float *__restrict__ part,
                                                                  const float *__restrict__ sinks, float *__restrict__ final_out) {
    constexpr int PL = HD / 32; /* channels per lane */
    const int th = blockIdx.x, split = blockIdx.y;
    const int t = th / n_heads, h = th % n_heads, g = h / (n_heads / n_kv);
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    const int32_t qp = qpos[t];
    float qv[PL], acc[PL];
#pragma unroll
    for (int i = 0; i < PL; i++) {
        qv[i] = q[(long)th * HD + lane + 32 * i] * scale;
        acc[i] = 0.f;
    }
    float m = -INFINITY, l = 0.f;
    if (n_dev) n = *n_dev; /* a recorded step: the key count is read at replay time */
    const int per = (n + splits - 1) / splits;
    const int j0 = split * per, j1 = min(n, j0 + per);
    for (int j = j0 + warp; j < j1; j += ATT_WARPS) {
        const int32_t kp = kpos[j];
        if (kp > qp || (window > 0 && qp - kp >= window)) continue;
        const float *kr = K + (long)j * stride + (long)g * HD;
        float d = 0.f;
#pragma unroll
        for (int i = 0; i < PL; i++) d += qv[i] * kr[lane + 32 * i];
        d = warp_sum(d);
        if (softcap > 0.f) d = softcap * tanhf(d / softcap);
        const float mn = fmaxf(m, d), f = __expf(m - mn), e = __expf(d - mn);
        const float *vr = V + (long)j * stride + (long)g * HD;
#pragma unroll
        for (int i = 0; i < PL; i++) acc[i] = acc[i] * f + e * vr[lane + 32 * i];
        l = l * f + e;
        m = mn;
    }
    /* merge the warps of this block */
    __shared__ float sm[ATT_WARPS], sl[ATT_WARPS], sacc[ATT_WARPS][HD];
    if (lane == 0) { sm[warp] = m; sl[warp] = l; }
#pragma unroll
    for (int i = 0; i < PL; i++) sacc[warp][lane + 32 * i] = acc[i];
    __syncthreads();
    float M = -INFINITY;
#pragma unroll
    for (int w = 0; w < ATT_WARPS; w++) M = fmaxf(M, sm[w]);
    if (final_out) {
        /* one split: kernel_attn_merge's arithmetic here, saving its launch */
        float L = 0.f;
        for (int w = 0; w < ATT_WARPS; w++) L += sm[w] == -INFINITY ? 0.f : sl[w] * __expf(sm[w] - M);
        float M2 = sinks ? sinks[h] : -INFINITY;
        M2 = fmaxf(M2, M);
        float L2 = sinks ? __expf(sinks[h] - M2) : 0.f;
        if (M != -INFINITY) L2 += L * __expf(M - M2);
        const float inv = L2 > 0.f ? 1.f / L2 : 0.f;
        for (int c = threadIdx.x; c < HD; c += blockDim.x) {
            float s = 0.f;
#pragma unroll
            for (int w = 0; w < ATT_WARPS; w++) s += sm[w] == -INFINITY ? 0.f : sacc[w][c] * __expf(sm[w] - M);
            float acc = 0.f;
            if (M != -INFINITY) acc += s * __expf(M - M2);
            final_out[(long)th * HD + c] = acc * inv;
        }
        return;
    }
    float *out = part + ((long)th * splits + split) * (HD + 2);
    for (int c = threadIdx.x; c < HD; c += blockDim.x) {
        float s = 0.f;
#pragma unroll
        for (int w = 0; w < ATT_WARPS; w++) s += sm[w] == -INFINITY ? 0.f : sacc[w][c] * __expf(sm[w] - M);
        out[c] = s;
    }
    if (threadIdx.x == 0) {
        float L = 0.f;
        for (int w = 0; w < ATT_WARPS; w++) L += sm[w] == -INFINITY ? 0.f : sl[w] * __expf(sm[w] - M);
        out[HD] = M;
        out[HD + 1] = L;
    }
}

/* grid T * n_heads; merges the splits (and the sink logit) into out [T, n_heads, hd] */
__global__ void kernel_attn_merge(const float *__restrict__ part, int splits, int hd, const float *__restrict__ sinks,
                                  int n_heads, float *__restrict__ out) {
    const int th = blockIdx.x;
    const float *p = part + (long)th * splits * (hd + 2);
    float M = sinks ? sinks[th % n_heads] : -INFINITY;
    for (int s = 0; s < splits; s++) M = fmaxf(M, p[s * (hd + 2) + hd]);
    float L = sinks ? __expf(sinks[th % n_heads] - M) : 0.f;
    for (int s = 0; s < splits; s++) {
        const float ms = p[s * (hd + 2) + hd];
        if (ms != -INFINITY) L += p[s * (hd + 2) + hd + 1] * __expf(ms - M);
    }
    const float inv = L > 0.f ? 1.f / L : 0.f;
    for (int c = threadIdx.x; c < hd; c += blockDim.x) {
        float acc = 0.f;
        for (int s = 0; s < splits; s++) {
            const float ms = p[s * (hd + 2) + hd];
            if (ms != -INFINITY) acc += p[s * (hd + 2) + c] * __expf(ms - M);
        }
        out[(long)th * hd + c] = acc * inv;
    }
}

extern "C" int cuk_attention(const float *q, const int32_t *qpos, int T, const attn_kv *kv, const int32_t *n_dev,
                             const attn_params *p, float *out, float *work, cuk_stream st) {
    cudaStream_t s = (cudaStream_t)st;
    const int splits = n_splits(kv->n);
    const dim3 grid((unsigned)(T * p->n_heads), (unsigned)splits), block(ATT_WARPS * 32);
#define ATT(HD)                                                                                                         \
    kernel_attn_split<HD><<<grid, block, 0, s>>>(q, qpos, kv->k, kv->v, kv->pos, kv->n, n_dev, kv->row_stride, p->n_heads, \
                                                 p->n_kv, p->scale, p->window, p->softcap, splits, work, p->sinks, \
                                                 splits == 1 ? out : NULL)
    switch (p->head_dim) {
    case 32: ATT(32); break;
    case 64: ATT(64); break;
    case 96: ATT(96); break;
    case 128: ATT(128); break;
    case 192: ATT(192); break;
    case 256: ATT(256); break;
    case 512: ATT(512); break;
    default: return err_set("cuda attention: head_dim %d not supported (32, 64, 96, 128, 192, 256, 512)", p->head_dim);
    }
#undef ATT
    if (cuk_check("attention") != 0) return -1;
    if (splits == 1) return 0;
    kernel_attn_merge<<<T * p->n_heads, 128, 0, s>>>(work, splits, p->head_dim, p->sinks, p->n_heads, out);
    return cuk_check("attention merge");
}
