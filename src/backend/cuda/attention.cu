/* backend/cuda/attention.cu: causal grouped-query attention over a KV cache in
 * device memory, read in place. The key range is split across blocks (flash-decoding)
 * so that one query over a long context still fills the GPU: each block keeps an
 * online softmax (max, sum, weighted values) per warp, the block merges its warps,
 * and a second kernel merges the splits and the per-head sink. */
#include <climits>

#include "backend/cuda/common.cuh"
#include "backend/cuda/kv_elem.cuh"
#include "backend/cuda/attn_merge.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#define MAX_HD 512

extern "C" size_t cuk_attention_work(int T, int n_heads, int head_dim, int n_keys) {
    const size_t a = (size_t)T * n_heads * attn_splits(n_keys) * (head_dim + 2), b = cuk_flash_work(T, n_heads, head_dim, n_keys);
    return a > b ? a : b;
}

extern "C" int cuk_attention_bucket(int n_keys) { return attn_splits(n_keys) * ATT_KEYS_PER_SPLIT; }

/* grid (T * n_heads, splits); partial [T*n_heads, splits, hd + 2]: acc[hd], m, l */
template <int HD, typename KT, int W>
__global__ void __launch_bounds__(W * 32) kernel_attn_split(const float *__restrict__ q, const int32_t *__restrict__ qpos,
                                                                  const KT *__restrict__ K, const KT *__restrict__ V,
                                                                  const int32_t *__restrict__ kpos, int n,
                                                                  const int32_t *__restrict__ blocks,
                                                                  const cuk_kv_dyn *__restrict__ dyn, long stride,
                                                                  int n_heads, int n_kv, float scale, int window, float softcap,
                                                                  int splits, float *__restrict__ part,
                                                                  const float *__restrict__ sinks, float *__restrict__ final_out) {
    cuk_pdl_start_small(CUK_LATE_ATTN);
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
    if (dyn) { /* a recorded step: the key count and block table are read at replay time */
        n = dyn->n;
        blocks = dyn->blocks;
    }
    const int per = (n + splits - 1) / splits;
    const int j0 = split * per, j1 = min(n, j0 + per);
    attn_walk<W, PL>(K, V, stride, (long)g * HD, blocks, kpos, j0, j1, warp, lane, qp, window,
                             [&](const float (&kr)[PL], const float (&vr)[PL]) {
                                 float d = 0.f;
#pragma unroll
                                 for (int i = 0; i < PL; i++) d += qv[i] * kr[i];
                                 d = warp_sum(d);
                                 if (softcap > 0.f) d = softcap * tanhf(d / softcap);
                                 const float mn = fmaxf(m, d), f = __expf(m - mn), e = __expf(d - mn);
#pragma unroll
                                 for (int i = 0; i < PL; i++) acc[i] = acc[i] * f + e * vr[i];
                                 l = l * f + e;
                                 m = mn;
                             });
    /* merge the warps of this block */
    __shared__ float sm[W], sl[W], sacc[W][HD];
    if (lane == 0) { sm[warp] = m; sl[warp] = l; }
#pragma unroll
    for (int i = 0; i < PL; i++) sacc[warp][lane + 32 * i] = acc[i];
    __syncthreads();
    /* one split (final_out): kernel_attn_merge's arithmetic here, saving its launch */
    attn_warps_out<HD, W>(sm, sl, sacc, sinks ? sinks + h : NULL, final_out ? final_out + (long)th * HD : NULL,
                                  final_out ? NULL : part + ((long)th * splits + split) * (HD + 2));
}

/* grid rows * n_heads; merges the splits (and the sink logit) of part [rows * n_heads,
 * splits, hd + 2] into out [rows, n_heads, hd]. seqs (a batched step's rows): row r
 * merges only the attn_splits(its key count) splits its blocks wrote. */
__global__ void kernel_attn_merge(const float *__restrict__ part, int splits, int hd, const float *__restrict__ sinks,
                                  int n_heads, const cuk_attn_seq *__restrict__ seqs, float *__restrict__ out) {
    cuk_pdl_start_small(CUK_LATE_ATTN);
    const int th = blockIdx.x;
    int ns = splits;
    if (seqs) {
        const cuk_attn_seq *sq = &seqs[th / n_heads];
        ns = min(attn_splits(sq->k ? sq->n : 0), splits);
    }
    const float *p = part + (long)th * splits * (hd + 2);
    float M = sinks ? sinks[th % n_heads] : -INFINITY;
    for (int s = 0; s < ns; s++) M = fmaxf(M, p[s * (hd + 2) + hd]);
    float L = sinks ? __expf(sinks[th % n_heads] - M) : 0.f;
    for (int s = 0; s < ns; s++) {
        const float ms = p[s * (hd + 2) + hd];
        if (ms != -INFINITY) L += p[s * (hd + 2) + hd + 1] * __expf(ms - M);
    }
    const float inv = L > 0.f ? 1.f / L : 0.f;
    for (int c = threadIdx.x; c < hd; c += blockDim.x) {
        float acc = 0.f;
        for (int s = 0; s < ns; s++) {
            const float ms = p[s * (hd + 2) + hd];
            if (ms != -INFINITY) acc += p[s * (hd + 2) + c] * __expf(ms - M);
        }
        out[(long)th * hd + c] = acc * inv;
    }
}

extern "C" int cuk_attention_merge(const float *part, int rows, int n_heads, int splits, int hd, const float *sinks,
                                   const cuk_attn_seq *seqs, float *out, cuk_stream st) {
    cuk_launch(kernel_attn_merge, rows * n_heads, 128, 0, (cudaStream_t)st, part, splits, hd, sinks, n_heads, seqs, out);
    return cuk_check("attention merge");
}

/* ---- prefill: many queries, keys tiled through shared memory ------------------
 * A block takes PF_WARPS * R query rows of one KV head's group (row r of the group
 * is token r / G, head g * G + r % G, G = n_heads / n_kv) and walks the keys in
 * tiles of 32: each tile of K and V is read from the cache once for all its rows
 * (the per-query kernel above reads it once per row and head). A tile no row can
 * see (all its positions past the block's last query, or out of its window) is
 * skipped, which halves causal prefill. Within a tile lane j scores key j against
 * each of its warp's rows; the online softmax (max, sum, weighted values) is kept
 * per row with each lane holding HD / 32 channels. */
#define PF_WARPS 8
#define PF_BK 32

/* query rows per warp (A/B on the H200 in docs/benchmarks/cuda.md: 4 beat 8 for
 * head dim 128 at 512 and 2048 keys; wider heads hold more channels per lane) */
template <int HD> struct pf_rows { static constexpr int R = HD <= 256 ? 4 : 2; };

template <int HD> static size_t pf_smem() {
    constexpr int R = pf_rows<HD>::R;
    return sizeof(float) * ((size_t)PF_WARPS * R * HD + (size_t)PF_BK * (HD + 4) + (size_t)PF_BK * HD);
}

template <int HD, typename KT>
__global__ void __launch_bounds__(PF_WARPS * 32) kernel_attn_prefill(const float *__restrict__ q, const int32_t *__restrict__ qpos,
                                                                    int T, const KT *__restrict__ K, const KT *__restrict__ V,
                                                                    const int32_t *__restrict__ kpos, int n,
                                                                    const int32_t *__restrict__ blocks, long stride,
                                                                    int n_heads, int n_kv, float scale, int window, float softcap,
                                                                    const float *__restrict__ sinks, float *__restrict__ out) {
    cuk_pdl_start_small(CUK_LATE_ATTN);
    constexpr int R = pf_rows<HD>::R, ROWS = PF_WARPS * R, PL = HD / 32, KS = HD + 4; /* KS: padded K row */
    extern __shared__ float4 pf_sh4[];
    float *sq = (float *)pf_sh4;     /* [ROWS][HD] queries, scaled */
    float *sk = sq + ROWS * HD;      /* [PF_BK][KS] keys */
    float *sv = sk + PF_BK * KS;     /* [PF_BK][HD] values */
    __shared__ int32_t skp[PF_BK];
    const int G = n_heads / n_kv, g = blockIdx.y;
    const long r0 = (long)blockIdx.x * ROWS, total = (long)T * G;
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
    for (int i = threadIdx.x; i < ROWS * HD; i += blockDim.x) {
        const long r = r0 + i / HD;
        float v = 0.f;
        if (r < total) v = q[((r / G) * n_heads + g * G + r % G) * HD + i % HD] * scale;
        sq[i] = v;
    }
    /* the block's query positions: bounds for skipping tiles */
    int qlo = INT_MAX, qhi = INT_MIN;
    for (long t = r0 / G; t <= (r0 + ROWS - 1) / G && t < T; t++) {
        qlo = min(qlo, (int)qpos[t]);
        qhi = max(qhi, (int)qpos[t]);
    }
    int qp[R];
    float m[R], l[R], acc[R][PL];
#pragma unroll
    for (int i = 0; i < R; i++) {
        const long r = r0 + warp * R + i;
        qp[i] = r < total ? qpos[r / G] : INT_MIN;
        m[i] = -INFINITY;
        l[i] = 0.f;
#pragma unroll
        for (int c = 0; c < PL; c++) acc[i][c] = 0.f;
    }
    for (int j0 = 0; j0 < n; j0 += PF_BK) {
        __syncthreads(); /* the last tile is consumed (and sq written, the first time) */
        /* a tile of PF_BK rows lies in one block (PF_BK divides CUK_KV_BLOCK): one lookup */
        const long t0 = kv_slot(blocks, j0);
        if (threadIdx.x < PF_BK) skp[threadIdx.x] = j0 + (int)threadIdx.x < n ? kpos[t0 + threadIdx.x] : INT_MAX;
        __syncthreads();
        int klo = INT_MAX, khi = INT_MIN;
        for (int j = 0; j < PF_BK && j0 + j < n; j++) {
            klo = min(klo, skp[j]);
            khi = max(khi, skp[j]);
        }
        if (klo > qhi || (window > 0 && khi <= qlo - window)) continue; /* no row sees this tile */
        for (int i = threadIdx.x; i < PF_BK * HD; i += blockDim.x) {
            const int j = i / HD, c = i % HD;
            const bool ok = j0 + j < n;
            const long at = (t0 + j) * stride + (long)g * HD + c;
            sk[j * KS + c] = ok ? kv_ld(K + at) : 0.f;
            sv[i] = ok ? kv_ld(V + at) : 0.f;
        }
        __syncthreads();
        const int kp = skp[lane];
        const float4 *kr = (const float4 *)(sk + lane * KS);
#pragma unroll
        for (int i = 0; i < R; i++) {
            const float4 *qr = (const float4 *)(sq + (warp * R + i) * HD);
            float d = 0.f;
#pragma unroll 8
            for (int c = 0; c < HD / 4; c++) {
                const float4 a = qr[c], b = kr[c];
                d += a.x * b.x + a.y * b.y + a.z * b.z + a.w * b.w;
            }
            if (softcap > 0.f) d = softcap * tanhf(d / softcap);
            const bool vis = j0 + lane < n && kp <= qp[i] && (window <= 0 || qp[i] - kp < window);
            const float s = vis ? d : -INFINITY;
            float mt = s;
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) mt = fmaxf(mt, __shfl_xor_sync(0xffffffffu, mt, o));
            if (mt == -INFINITY) continue; /* the whole warp agrees */
            const float mn = fmaxf(m[i], mt), f = __expf(m[i] - mn), p = vis ? __expf(s - mn) : 0.f;
            l[i] = l[i] * f + warp_sum(p);
#pragma unroll
            for (int c = 0; c < PL; c++) acc[i][c] *= f;
            for (int j = 0; j < PF_BK; j++) {
                const float pj = __shfl_sync(0xffffffffu, p, j);
#pragma unroll
                for (int c = 0; c < PL; c++) acc[i][c] += pj * sv[j * HD + lane + 32 * c];
            }
            m[i] = mn;
        }
    }
#pragma unroll
    for (int i = 0; i < R; i++) {
        const long r = r0 + warp * R + i;
        if (r >= total) continue;
        const int h = g * G + (int)(r % G);
        float M = m[i], L = l[i], fa = 1.f;
        if (sinks) {
            M = fmaxf(m[i], sinks[h]);
            fa = m[i] == -INFINITY ? 0.f : __expf(m[i] - M);
            L = l[i] * fa + __expf(sinks[h] - M);
        }
        const float inv = L > 0.f ? fa / L : 0.f;
        float *o = out + ((r / G) * n_heads + h) * HD;
#pragma unroll
        for (int c = 0; c < PL; c++) o[lane + 32 * c] = acc[i][c] * inv;
    }
}

template <int HD, typename KT>
static int attn_prefill(const float *q, const int32_t *qpos, int T, const attn_kv *kv, const attn_params *p, float *out,
                        cudaStream_t s) {
    constexpr int ROWS = PF_WARPS * pf_rows<HD>::R;
    static int ready[64]; /* the opt-in to more than 48 KiB of shared memory, once per kernel and GPU */
    int dev = 0;
    cudaGetDevice(&dev);
    if (dev < 0 || dev >= 64 || !ready[dev]) {
        if (cudaFuncSetAttribute(kernel_attn_prefill<HD, KT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)pf_smem<HD>()) !=
            cudaSuccess)
            return cuk_check("attention (prefill) setup");
        if (dev >= 0 && dev < 64) ready[dev] = 1;
    }
    const long total = (long)T * (p->n_heads / p->n_kv);
    const dim3 grid((unsigned)((total + ROWS - 1) / ROWS), (unsigned)p->n_kv);
    cuk_launch(kernel_attn_prefill<HD, KT>, grid, PF_WARPS * 32, pf_smem<HD>(), s, q, qpos, T, (const KT *)kv->k, (const KT *)kv->v, kv->pos, kv->n, kv->blocks, kv->row_stride,
                                                                      p->n_heads, p->n_kv, p->scale, p->window, p->softcap,
                                                                      p->sinks, out);
    return cuk_check("attention (prefill)");
}

/* Per-query split-KV attention (decode, and prefill shapes the tiled kernels do not take). */
template <typename KT>
static int attn_split(const float *q, const int32_t *qpos, int T, const attn_kv *kv, const cuk_kv_dyn *dyn, const attn_params *p,
                      float *out, float *work, cudaStream_t s) {
    const int splits = attn_splits(kv->n);
    const dim3 grid((unsigned)(T * p->n_heads), (unsigned)splits);
    const int w = attn_decode_warps(p->head_dim, (long)grid.x * grid.y);
#define ATT_W(HD, W)                                                                                                    \
    cuk_launch(kernel_attn_split<HD, KT, W>, grid, (W) * 32, 0, s, q, qpos, (const KT *)kv->k, (const KT *)kv->v, kv->pos, kv->n, \
               kv->blocks, dyn, kv->row_stride, p->n_heads, p->n_kv, p->scale, p->window, p->softcap, splits, work, p->sinks, \
               splits == 1 ? out : NULL)
#define ATT(HD)                                                                                                         \
    do {                                                                                                                \
        if (w == 4) ATT_W(HD, 4);                                                                                       \
        else if (w == 16) ATT_W(HD, ((HD) <= 128 ? 16 : 8));                                                           \
        else ATT_W(HD, 8);                                                                                              \
    } while (0)
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
#undef ATT_W
    if (cuk_check("attention") != 0) return -1;
    if (splits == 1) return 0;
    return cuk_attention_merge(work, T, p->n_heads, splits, p->head_dim, p->sinks, NULL, out, s);
}

template <typename KT>
static int attn_tiled(const float *q, const int32_t *qpos, int T, const attn_kv *kv, const attn_params *p, float *out,
                      cudaStream_t s) {
    switch (p->head_dim) {
    case 32: return attn_prefill<32, KT>(q, qpos, T, kv, p, out, s);
    case 64: return attn_prefill<64, KT>(q, qpos, T, kv, p, out, s);
    case 96: return attn_prefill<96, KT>(q, qpos, T, kv, p, out, s);
    case 128: return attn_prefill<128, KT>(q, qpos, T, kv, p, out, s);
    case 192: return attn_prefill<192, KT>(q, qpos, T, kv, p, out, s);
    case 256: return attn_prefill<256, KT>(q, qpos, T, kv, p, out, s);
    case 512: return attn_prefill<512, KT>(q, qpos, T, kv, p, out, s);
    default: return 1; /* not this kernel */
    }
}

extern "C" int cuk_attention(const float *q, const int32_t *qpos, int T, const attn_kv *kv, const cuk_kv_dyn *dyn,
                             const attn_params *p, float *out, float *work, cuk_stream st) {
    cudaStream_t s = (cudaStream_t)st;
    if (kv->block_rows && kv->block_rows != CUK_KV_BLOCK)
        return err_set("cuda attention: paged view of %d rows a block (the kernels take %d)", kv->block_rows, CUK_KV_BLOCK);
    const int bf = kv->dtype == KVT_BF16;
    /* Over a bf16 cache: flash attention on the tensor cores (flash_attn.cu) for the
     * head dims it covers (1: not covered), prefill and decode, keys split across
     * blocks when the queries alone cannot fill the GPU; except one query over a short
     * cache (kv->n, the graph's key bound, at most CUK_ATTN_MMA_MIN_KEYS: 256, the first
     * bucket), where the CUDA-core kernel below measured faster (tg128 from an empty
     * cache: llama3-8b +2%, its q4 +4%, gemma3-4b +5%) and flash's fixed cost (split
     * partials and their merge) is not yet paid back; from 512 keys on flash was level
     * or faster, by up to 15% at 2,048 (docs/benchmarks/cuda.md, seventeenth session). */
    const int short_one = T == 1 && kv->n <= setting_int(SET_CUK_ATTN_MMA_MIN_KEYS);
    if (bf && !short_one && !setting_flag(SET_CUK_ATTN_NO_MMA) && !setting_flag(SET_CUK_ATTN_PER_QUERY)) {
        int splits = 1;
        const int r = cuk_flash_attention(q, qpos, T, kv, dyn, p, out, work, &splits, st);
        if (r < 0) return -1;
        if (r == 0) {
            if (splits == 1) return 0;
            return cuk_attention_merge(work, T, p->n_heads, splits, p->head_dim, p->sinks, NULL, out, st);
        }
    }
    if (T > CUK_MV_MAX_T && !dyn && !setting_flag(SET_CUK_ATTN_PER_QUERY)) {
        /* The tiled CUDA-core kernel, except wide heads over at most 1024 keys, where
         * the per-query kernel measured faster (gemma3-4b pp512: 17.6k vs 16.4k tok/s);
         * CUK_ATTN_PER_QUERY=1 forces the per-query kernel for A/B runs. */
        if (!(p->head_dim > 128 && kv->n <= 1024)) {
            const int r = bf ? attn_tiled<uint16_t>(q, qpos, T, kv, p, out, s) : attn_tiled<float>(q, qpos, T, kv, p, out, s);
            if (r <= 0) return r;
        }
    }
    return bf ? attn_split<uint16_t>(q, qpos, T, kv, dyn, p, out, work, s)
              : attn_split<float>(q, qpos, T, kv, dyn, p, out, work, s);
}
