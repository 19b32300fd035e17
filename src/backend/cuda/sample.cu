/* backend/cuda/sample.cu: one token from a decode step's logits on the GPU, as
 * engine/sample.c's celer_sampler_sample picks it (penalties excepted), so the logits
 * never cross the bus: greedy, top-k, top-p, min-p, temperature and the draw.
 *
 * The algorithm, per step:
 *   1. argmax (lowest id on ties) over the logits; greedy stops here;
 *   2. exact top-k by radix select on a unique 64-bit order key (the logit's
 *      order-preserving 32-bit key, then the id reversed, so "higher key" is the CPU's
 *      "better": higher logit, then lower id): 8-bit digits from the top, each pass
 *      histogramming the elements that still tie with the k-th on the digits so far,
 *      moving the ones above into the candidate set and compacting the tied ones into
 *      the work buffer for the next pass; it ends as soon as the tied bin is exactly
 *      what is still needed (usually within the 32-bit logit key, at worst after the id
 *      digits when logits tie). Vocabularies of at most 1024 skip it: all are sorted;
 *   3. a bitonic sort of the k candidates, best first;
 *   4. the per-candidate exponentials and quotients in parallel, the sums and scans on
 *      one thread as sample_candidates does them: Z, the threshold (min-p's, or
 *      top-p's d = 8..72 loop), survivors, top-p prefix, temperature, the pick with u.
 * Up to SMP_ONEBLOCK_MAX_V logits all of it runs in one block of 1024 threads. Larger
 * vocabularies take three kernels, so the two full reads of the logits (argmax and
 * first-digit histogram, then the split by the first digit's bin) are spread over one
 * block per 2048 logits; the last kernel (one block) does the rest over the tied list
 * and the candidates, a few thousand elements for real logits.
 *
 * Exactness. Selection, order, survivors' order and the pick are exact and
 * deterministic. Floating-point results can differ from the CPU's only in the last
 * bits, which changes the token only at an exact boundary: Z and the top-p masses are
 * summed over the candidates in sorted order where the CPU sums Z in its heap order;
 * CUDA's double exp and log are within 1 ulp where glibc's are (nearly always)
 * correctly rounded. So a different token needs cum within a few ulps of top_p (or
 * mass of top_p * Z), a logit within an ulp of min-p's threshold, or u within ~1e-8
 * relative of a cumulative probability (one float rounding of a probability moving by
 * its last bit). The temperature sum and the pick are in the CPU's order exactly.
 * NaN logits: greedy matches the CPU (a NaN at id 0 wins, as the CPU's scan keeps it;
 * elsewhere NaN never wins); with temperature > 0 a NaN ranks below -inf here, while
 * the CPU's heap order with NaN is not a total order: not reproduced. */
#include <math.h>
#include <string.h>

#include "backend/cuda/common.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#define SMP_THREADS 1024
#define SMP_UNROLL 8
#define SMP_FULL 0xffffffffu

/* Order-preserving key: a > b (floats) iff key(a) > key(b); -0 and +0 map to the same
 * key (they are equal to the CPU's comparisons); NaN maps to 1, below -inf
 * (0x007fffff); 0 is left for padding. */
__device__ __forceinline__ uint32_t smp_key(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return 1u;
    if ((u & 0x7fffffffu) == 0u) u = 0u;
    return (u & 0x80000000u) ? ~u : (u | 0x80000000u);
}

__device__ __forceinline__ float smp_val(uint32_t k) {
    return __uint_as_float((k & 0x80000000u) ? (k & 0x7fffffffu) : ~k);
}

/* The 64-bit sort key: higher is better (logit key, then lower id). 0 pads. */
__device__ __forceinline__ unsigned long long smp_comp(uint32_t key, int id) {
    return ((unsigned long long)key << 32) | (unsigned long long)(0xffffffffu - (uint32_t)id);
}

/* Digit t of the composite key: t < 4 the logit key's bytes from the top, then the
 * bytes of V - 1 - id from the highest non-zero one (idtop: its shift). */
__device__ __forceinline__ int smp_digit(uint32_t key, int id, int t, int V, int idtop) {
    if (t < 4) return (int)((key >> (24 - 8 * t)) & 255u);
    return (int)(((uint32_t)(V - 1 - id) >> (idtop - 8 * (t - 4))) & 255u);
}

/* hist[d] += 1 for d < 256 (shared memory). */
__device__ __forceinline__ void smp_hist_add(uint32_t *hist, int d) {
    if (d < 256) atomicAdd(&hist[d], 1u);
}

/* The best (key, id) of this thread's share of x [start, end) read by NT threads, and
 * when radix the first digit's histogram. Ids rise along a thread: ties keep the first. */
template <int NT>
__device__ __forceinline__ void smp_scan(const float *__restrict__ x, int start, int end, int tid, bool radix,
                                         uint32_t *hist, uint32_t &bk, int &bi) {
    for (int base = start; base < end; base += NT * SMP_UNROLL) {
        float v[SMP_UNROLL];
#pragma unroll
        for (int j = 0; j < SMP_UNROLL; j++) {
            const int i = base + j * NT + tid;
            v[j] = i < end ? x[i] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < SMP_UNROLL; j++) {
            const int i = base + j * NT + tid;
            if (i < end) {
                const uint32_t k = smp_key(v[j]);
                if (k > bk) { bk = k; bi = i; }
                if (radix) smp_hist_add(hist, (int)(k >> 24));
            }
        }
    }
}

/* Claims slots at *count (shared or global) for the flagged lanes (in lane order within
 * the warp). Called by all 32 lanes. Returns this lane's slot, or -1. */
__device__ __forceinline__ int smp_claim(bool flag, int *count) {
    const unsigned b = __ballot_sync(SMP_FULL, flag);
    if (!b) return -1;
    const int lane = threadIdx.x & 31, leader = __ffs(b) - 1;
    int base = 0;
    if (lane == leader) base = atomicAdd(count, __popc(b));
    base = __shfl_sync(SMP_FULL, base, leader);
    return flag ? base + __popc(b & ((1u << lane) - 1u)) : -1;
}

/* The better of two (key, id) pairs into (bk, bi): higher key, then lower id. */
__device__ __forceinline__ void smp_best(uint32_t &bk, int &bi, uint32_t ok, int oi) {
    if (ok > bk || (ok == bk && oi < bi)) { bk = ok; bi = oi; }
}

__device__ __forceinline__ void smp_warp_best(uint32_t &bk, int &bi) {
    for (int o = 16; o > 0; o >>= 1) {
        const uint32_t ok = __shfl_xor_sync(SMP_FULL, bk, o);
        const int oi = __shfl_xor_sync(SMP_FULL, bi, o);
        smp_best(bk, bi, ok, oi);
    }
}

/* The block's best (key, id) in every thread; wk/wi: 32 slots of shared memory. */
__device__ __forceinline__ void smp_block_best(uint32_t &bk, int &bi, uint32_t *wk, int *wi) {
    const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5, nw = blockDim.x >> 5;
    smp_warp_best(bk, bi);
    if (lane == 0) { wk[warp] = bk; wi[warp] = bi; }
    __syncthreads();
    bk = lane < nw ? wk[lane] : 0u;
    bi = lane < nw ? wi[lane] : 0x7fffffff;
    smp_warp_best(bk, bi);
}

/* Warp 0: the bin of hist [256] (digit t) that holds the kk-th best counted from the
 * top: *b, the rank left inside it (*kk), and whether the whole bin is what is left
 * to take (*fin; always at the last digit, where bins hold one element). */
__device__ __forceinline__ void smp_select_bin(const uint32_t *hist, int *kkp, int *bp, int *finp, int t, int ndig) {
    const int lane = threadIdx.x & 31;
    const uint32_t kk = (uint32_t)*kkp;
    __syncwarp();  /* every lane has read kk before one lane rewrites it */
    uint32_t h[8], s = 0;
#pragma unroll
    for (int j = 0; j < 8; j++) { h[j] = hist[lane * 8 + j]; s += h[j]; }
    uint32_t incl = s;  /* bins of lanes >= this one */
    for (int o = 1; o < 32; o <<= 1) {
        const uint32_t y = __shfl_down_sync(SMP_FULL, incl, o);
        if (lane + o < 32) incl += y;
    }
    uint32_t above = incl - s;
    if (above < kk && kk <= incl) {
        for (int j = 7; j >= 0; j--) {
            if (above + h[j] >= kk) {
                *bp = lane * 8 + j;
                *kkp = (int)(kk - above);
                *finp = h[j] == kk - above || t == ndig - 1;
                break;
            }
            above += h[j];
        }
    }
}

struct smp_shared {
    uint32_t hist[256];
    unsigned long long sortk[SMP_THREADS];  /* candidates (composite keys), then sorted */
    double e1[SMP_THREADS];                 /* exp(l - m), then that over Z */
    double et[SMP_THREADS];                 /* exp((l - m) / T) */
    float lv[SMP_THREADS];                  /* sorted logits, then probabilities */
    int idv[SMP_THREADS];                   /* sorted ids */
    uint32_t wkey[32];
    int wid[32];
    int nsel, nnext, b, kk, fin, ns;
    double Z, sum;
};

/* State handed from the filter kernel to the final one (in the work buffer). */
struct smp_state {
    int done;     /* the token is written (greedy, or a max that is not finite) */
    float m;      /* the max logit */
    int b, kk, fin;  /* the first digit's bin, the rank left in it, whether it is all taken */
    int nc, nl;   /* candidates taken, elements tied on the first digit (la) */
};

/* One radix pass of the 1024-thread block over src (the logits when FROMX, else a
 * list of (key, id)): digit t against the chosen bin b: above goes to the candidates,
 * equal to dst (with the histogram of digit t + 1), or to the candidates too when fin. */
template <bool FROMX>
__device__ void smp_pass(smp_shared &sh, const float *x, const uint2 *src, int n_src, uint2 *dst, int t, int b,
                         bool fin, int V, int idtop) {
    for (int base = 0; base < n_src; base += SMP_THREADS * SMP_UNROLL) {
        uint32_t k[SMP_UNROLL];
        int id[SMP_UNROLL];
#pragma unroll
        for (int j = 0; j < SMP_UNROLL; j++) {
            const int i = base + j * SMP_THREADS + (int)threadIdx.x;
            if (i < n_src) {
                if (FROMX) {
                    k[j] = smp_key(x[i]);
                    id[j] = i;
                } else {
                    const uint2 e = src[i];
                    k[j] = e.x;
                    id[j] = (int)e.y;
                }
            } else {
                k[j] = 0;
                id[j] = -1;
            }
        }
#pragma unroll
        for (int j = 0; j < SMP_UNROLL; j++) {
            const bool valid = id[j] >= 0;
            const int d = valid ? smp_digit(k[j], id[j], t, V, idtop) : -1;
            const bool take = valid && (d > b || (fin && d == b));
            const int ps = smp_claim(take, &sh.nsel);
            if (ps >= 0 && ps < SMP_THREADS) sh.sortk[ps] = smp_comp(k[j], id[j]);
            if (!fin) {
                const bool keep = valid && d == b;
                const int pn = smp_claim(keep, &sh.nnext);
                if (keep) {
                    dst[pn] = make_uint2(k[j], (uint32_t)id[j]);
                    smp_hist_add(sh.hist, smp_digit(k[j], id[j], t + 1, V, idtop));
                }
            }
        }
    }
}

/* The radix select from digit t on, the histogram of digit t in sh.hist, sh.kk the
 * rank still wanted and sh.nsel the candidates taken so far; src holds n_src
 * elements (NULL at t = 0: the logits), lists alternate between la and lb (dst
 * first). Ends with sh.nsel == the top_k of the call. */
__device__ void smp_radix(smp_shared &sh, const float *x, int V, int t, const uint2 *src, int n_src, uint2 *dst,
                          uint2 *la, uint2 *lb) {
    const int nb = 32 - __clz(V - 1);
    const int idtop = ((nb - 1) / 8) * 8;
    const int ndig = 4 + idtop / 8 + 1;
    for (;;) {
        __syncthreads();  /* the histogram of digit t is complete */
        if (threadIdx.x < 32) smp_select_bin(sh.hist, &sh.kk, &sh.b, &sh.fin, t, ndig);
        __syncthreads();
        const int b = sh.b;
        const bool fin = sh.fin != 0;
        __syncthreads();  /* everyone has read b, fin before the reset */
        if (threadIdx.x < 256) sh.hist[threadIdx.x] = 0;
        if (threadIdx.x == 0) sh.nnext = 0;
        __syncthreads();
        if (t == 0) smp_pass<true>(sh, x, NULL, V, dst, 0, b, fin, V, idtop);
        else smp_pass<false>(sh, x, src, n_src, dst, t, b, fin, V, idtop);
        __syncthreads();
        if (fin) return;
        n_src = sh.nnext;
        src = dst;
        dst = dst == la ? lb : la;
        t++;
    }
}

/* The n candidates in sh.sortk (n <= 1024) sorted best first, then, as
 * sample_candidates and celer_sampler_sample: the best top_k of them, Z, the
 * threshold, the survivors, the top-p prefix, temperature, the pick with u[0]. Every
 * thread of the 1024-thread block calls it; the per-candidate arithmetic runs in
 * parallel (each value as the CPU computes it), the sums and scans on thread 0 in the
 * CPU's order (Z and the top-p masses excepted: see the top of the file). */
__device__ void smp_finish(smp_shared &sh, int n, const cuk_sample_params &p, float m, const double *u, int32_t *out,
                           int32_t *host_out) {
    const int tid = (int)threadIdx.x;
    int N = 1;
    while (N < n) N <<= 1;
    for (int i = n + tid; i < N; i += SMP_THREADS) sh.sortk[i] = 0ull;
    for (int size = 2; size <= N; size <<= 1)
        for (int stride = size >> 1; stride > 0; stride >>= 1) {
            __syncthreads();
            const int j = tid ^ stride;
            if (tid < N && j > tid) {
                const unsigned long long a = sh.sortk[tid], c = sh.sortk[j];
                if (((tid & size) == 0) ? a < c : a > c) { sh.sortk[tid] = c; sh.sortk[j] = a; }
            }
        }
    __syncthreads();
    if (n > p.top_k) n = p.top_k;  /* V <= 1024: the top_k best of all */
    const double md = (double)m, inv_t = 1.0 / (double)p.temperature;
    if (tid < n) {
        const unsigned long long c = sh.sortk[tid];
        const float l = smp_val((uint32_t)(c >> 32));
        const double dl = (double)l - md;
        sh.lv[tid] = l;
        sh.idv[tid] = (int)(0xffffffffu - (uint32_t)c);
        sh.e1[tid] = exp(dl);
        sh.et[tid] = exp(dl * inv_t);
    }
    __syncthreads();
    const bool use_p = p.top_p < 1.0f, use_min = p.min_p > 0.0f;
    if (tid == 0) {
        double Z = 0.0;
        for (int i = 0; i < n; i++) Z += sh.e1[i];
        double thr = -INFINITY;
        if (use_min) {
            thr = md + log((double)p.min_p);
        } else if (use_p) {
            double mass = 0.0;
            int i = 0;
            for (double d = 8.0; d < 80.0; d += 8.0) {
                const double cut = md - d;
                while (i < n && (double)sh.lv[i] >= cut) mass += sh.e1[i++];
                if (mass >= (double)p.top_p * Z) {
                    thr = cut;
                    break;
                }
            }
        }
        int ns = 0;  /* survivors: a prefix, the logits descend */
        while (ns < n && (double)sh.lv[ns] >= thr) ns++;
        sh.ns = ns < 1 ? 1 : ns;  /* always >= 1: thr <= m */
        sh.Z = Z;
    }
    __syncthreads();
    int ns = sh.ns;
    if (use_p && tid < ns) sh.e1[tid] = sh.e1[tid] / sh.Z;
    __syncthreads();
    if (tid == 0) {
        if (use_p) {
            double cum = 0.0;
            for (int i = 0; i < ns; i++) {
                cum += sh.e1[i];
                if (cum >= (double)p.top_p) {
                    ns = i + 1;
                    break;
                }
            }
        }
        double sum = 0.0;
        for (int i = 0; i < ns; i++) sum += sh.et[i];
        sh.ns = ns;
        sh.sum = sum;
    }
    __syncthreads();
    ns = sh.ns;
    if (tid < ns) sh.lv[tid] = (float)((double)(float)sh.et[tid] / sh.sum);
    __syncthreads();
    if (tid != 0) return;
    const double uu = u[0];
    double cum = 0.0;
    int tok = sh.idv[ns - 1];  /* u beyond the rounded total */
    for (int i = 0; i < ns; i++) {
        cum += (double)sh.lv[i];
        if (uu < cum) {
            tok = sh.idv[i];
            break;
        }
    }
    out[0] = tok;
    if (host_out) {
        host_out[0] = tok;
        __threadfence_system();
    }
}

__device__ __forceinline__ void smp_write(int32_t *out, int32_t *host_out, int tok) {
    out[0] = tok;
    if (host_out) {
        host_out[0] = tok;
        __threadfence_system();
    }
}

/* Row r of a batch (cuk_sample_rows): the pointers of row 0 moved to row r (work
 * pieces by ws bytes per row, logits by V, outputs by one). */
template <typename T> __device__ __forceinline__ T *smp_row(T *p, int r, size_t ws) {
    return p ? (T *)((char *)p + (size_t)r * ws) : p;
}

/* ---------------------------------------------------------------- one block */

/* The whole sampler in one block of 1024 threads (small vocabularies; also any V
 * with CUK_SAMPLE_ONEBLOCK=1). la, lb: [V] each when V > 1024 and temperature > 0. */
__global__ void __launch_bounds__(SMP_THREADS, 1)
    kernel_sample1(const float *__restrict__ x, int V, cuk_sample_params p, const double *__restrict__ u,
                   int32_t *out, int32_t *host_out, uint2 *la, uint2 *lb, const cuk_sample_params *pr, size_t ws) {
    cuk_pdl_start();
    if (pr) { /* one block per row */
        const int r = (int)blockIdx.x;
        p = pr[r];
        x += (size_t)r * V;
        u = u ? u + r : u;
        out += r;
        host_out = host_out ? host_out + r : host_out;
        la = smp_row(la, r, ws);
        lb = smp_row(lb, r, ws);
    }
    __shared__ smp_shared sh;
    const int tid = (int)threadIdx.x;
    const bool greedy = p.temperature <= 0.0f;
    const bool radix = !greedy && V > SMP_THREADS;
    if (tid < 256) sh.hist[tid] = 0;
    if (tid == 0) sh.nsel = sh.nnext = 0;
    __syncthreads();
    /* argmax (and the histogram of the first digit when the radix select follows) */
    uint32_t bk = 0;
    int bi = 0x7fffffff;
    smp_scan<SMP_THREADS>(x, 0, V, tid, radix, sh.hist, bk, bi);
    smp_block_best(bk, bi, sh.wkey, sh.wid);
    /* the CPU's scan keeps a NaN at id 0 (nothing compares better than it) */
    const float x0 = x[0];
    if (x0 != x0) bi = 0;
    const float m = x0 != x0 ? x0 : smp_val(bk);
    if (greedy || !isfinite(m)) {
        if (tid == 0) smp_write(out, host_out, bi);
        return;
    }
    int n;
    if (!radix) {
        for (int i = tid; i < V; i += SMP_THREADS) sh.sortk[i] = smp_comp(smp_key(x[i]), i);
        n = V;
    } else {
        if (tid == 0) sh.kk = p.top_k;
        smp_radix(sh, x, V, 0, NULL, V, la, la, lb);
        n = p.top_k;
    }
    smp_finish(sh, n, p, m, u, out, host_out);
}

/* ---------------------------------------------------------------- large vocabularies */

/* Three kernels: per-chunk argmax and first-digit histograms over many blocks; every
 * block then reduces them, picks the first digit's bin and sorts its chunk into the
 * candidates (above the bin) and the tied list (in it); one block finishes the radix
 * select over the tied list (usually a few thousand elements), sorts and picks. */
#define SMP_PT 256   /* threads of the chunk kernels */
#define SMP_CH 2048  /* logits per chunk */

__global__ void __launch_bounds__(SMP_PT)
    kernel_sample_part(const float *__restrict__ x, int V, int radix, uint32_t *pkey, int *pid, uint32_t *phist,
                       smp_state *st, const cuk_sample_params *pr, size_t ws) {
    cuk_pdl_start();
    if (pr) { /* grid.y: the rows */
        const int r = (int)blockIdx.y;
        radix = pr[r].temperature > 0.0f;
        x += (size_t)r * V;
        pkey = smp_row(pkey, r, ws);
        pid = smp_row(pid, r, ws);
        phist = smp_row(phist, r, ws);
        st = smp_row(st, r, ws);
    }
    __shared__ uint32_t hist[256];
    __shared__ uint32_t wk[32];
    __shared__ int wi[32];
    const int tid = (int)threadIdx.x;
    hist[tid] = 0;
    __syncthreads();
    const int start = (int)blockIdx.x * SMP_CH, end = min(V, start + SMP_CH);
    uint32_t bk = 0;
    int bi = 0x7fffffff;
    smp_scan<SMP_PT>(x, start, end, tid, radix, hist, bk, bi);
    smp_block_best(bk, bi, wk, wi);  /* its __syncthreads also completes hist */
    if (radix) phist[(size_t)blockIdx.x * 256 + tid] = hist[tid];
    if (tid == 0) {
        pkey[blockIdx.x] = bk;
        pid[blockIdx.x] = bi;
        if (blockIdx.x == 0) st->nc = st->nl = 0;
    }
}

__global__ void __launch_bounds__(SMP_PT)
    kernel_sample_filter(const float *__restrict__ x, int V, cuk_sample_params p, int G, const uint32_t *pkey,
                         const int *pid, const uint32_t *phist, smp_state *st, uint2 *clist, uint2 *llist, int32_t *out,
                         int32_t *host_out, const cuk_sample_params *pr, size_t ws) {
    cuk_pdl_start();
    if (pr) {
        const int r = (int)blockIdx.y;
        p = pr[r];
        x += (size_t)r * V;
        pkey = smp_row(pkey, r, ws);
        pid = smp_row(pid, r, ws);
        phist = smp_row(phist, r, ws);
        st = smp_row(st, r, ws);
        clist = smp_row(clist, r, ws);
        llist = smp_row(llist, r, ws);
        out += r;
        host_out = host_out ? host_out + r : host_out;
    }
    __shared__ uint32_t hist[256];
    __shared__ uint32_t wk[32];
    __shared__ int wi[32];
    __shared__ int s_b, s_kk, s_fin;
    const int tid = (int)threadIdx.x;
    uint32_t bk = 0;
    int bi = 0x7fffffff;
    for (int g = tid; g < G; g += SMP_PT) smp_best(bk, bi, pkey[g], pid[g]);
    smp_block_best(bk, bi, wk, wi);
    const float x0 = x[0];
    if (x0 != x0) bi = 0;
    const float m = x0 != x0 ? x0 : smp_val(bk);
    if (p.temperature <= 0.0f || !isfinite(m)) {
        if (blockIdx.x == 0 && tid == 0) {
            smp_write(out, host_out, bi);
            st->done = 1;
        }
        return;
    }
    uint32_t h = 0;
    for (int g = 0; g < G; g++) h += phist[(size_t)g * 256 + tid];
    hist[tid] = h;
    if (tid == 0) s_kk = p.top_k;
    __syncthreads();
    const int nb = 32 - __clz(V - 1);
    if (tid < 32) smp_select_bin(hist, &s_kk, &s_b, &s_fin, 0, 4 + (((nb - 1) / 8) * 8) / 8 + 1);
    __syncthreads();
    const int b = s_b;
    const bool fin = s_fin != 0;
    if (blockIdx.x == 0 && tid == 0) {
        st->done = 0;
        st->m = m;
        st->b = b;
        st->kk = s_kk;
        st->fin = fin;
    }
    const int start = (int)blockIdx.x * SMP_CH, end = min(V, start + SMP_CH);
    for (int base = start; base < end; base += SMP_PT * SMP_UNROLL) {
        float v[SMP_UNROLL];
#pragma unroll
        for (int j = 0; j < SMP_UNROLL; j++) {
            const int i = base + j * SMP_PT + tid;
            v[j] = i < end ? x[i] : 0.0f;
        }
#pragma unroll
        for (int j = 0; j < SMP_UNROLL; j++) {
            const int i = base + j * SMP_PT + tid;
            const uint32_t k = smp_key(v[j]);
            const int d = i < end ? (int)(k >> 24) : -1;
            const int pc = smp_claim(d > b || (fin && d == b), &st->nc);
            if (pc >= 0 && pc < CUK_SAMPLE_MAX_K) clist[pc] = make_uint2(k, (uint32_t)i);
            if (!fin) {
                const int pl = smp_claim(d == b, &st->nl);
                if (pl >= 0) llist[pl] = make_uint2(k, (uint32_t)i);
            }
        }
    }
}

/* la is the tied list the filter kernel wrote; lb the other list. */
__global__ void __launch_bounds__(SMP_THREADS, 1)
    kernel_sample_final(const float *__restrict__ x, int V, cuk_sample_params p, const double *__restrict__ u,
                        const smp_state *st, const uint2 *clist, uint2 *la, uint2 *lb, int32_t *out,
                        int32_t *host_out, const cuk_sample_params *pr, size_t ws) {
    cuk_pdl_start();
    if (pr) {
        const int r = (int)blockIdx.x;
        p = pr[r];
        x += (size_t)r * V;
        u = u ? u + r : u;
        st = smp_row(st, r, ws);
        clist = smp_row(clist, r, ws);
        la = smp_row(la, r, ws);
        lb = smp_row(lb, r, ws);
        out += r;
        host_out = host_out ? host_out + r : host_out;
    }
    __shared__ smp_shared sh;
    const int tid = (int)threadIdx.x;
    if (st->done) return;
    const float m = st->m;
    const int nc = min(st->nc, CUK_SAMPLE_MAX_K), fin = st->fin;
    if (tid < nc) {
        const uint2 e = clist[tid];
        sh.sortk[tid] = smp_comp(e.x, (int)e.y);
    }
    if (tid < 256) sh.hist[tid] = 0;
    if (tid == 0) {
        sh.nsel = nc;
        sh.kk = st->kk;
    }
    __syncthreads();
    if (!fin) {
        const int nl = st->nl;
        const int nb = 32 - __clz(V - 1);
        const int idtop = ((nb - 1) / 8) * 8;
        for (int i = tid; i < nl; i += SMP_THREADS) {
            const uint2 e = la[i];
            smp_hist_add(sh.hist, smp_digit(e.x, (int)e.y, 1, V, idtop));
        }
        smp_radix(sh, x, V, 1, la, nl, lb, la, lb);
    }
    smp_finish(sh, p.top_k, p, m, u, out, host_out);
}

/* ---------------------------------------------------------------- host */

#define SMP_ONEBLOCK_MAX_V 8192

/* Byte offsets of the pieces of the work buffer for V (large-vocabulary path). */
typedef struct {
    size_t la, lb, clist, pkey, pid, phist, st, total;
} smp_layout;

static size_t smp_up(size_t n) { return (n + 255) & ~(size_t)255; }

static smp_layout smp_layout_for(int V) {
    const size_t G = ((size_t)V + SMP_CH - 1) / SMP_CH;
    smp_layout L;
    L.la = 0;
    L.lb = L.la + smp_up((size_t)V * sizeof(uint2));
    L.clist = L.lb + smp_up((size_t)V * sizeof(uint2));
    L.pkey = L.clist + smp_up(CUK_SAMPLE_MAX_K * sizeof(uint2));
    L.pid = L.pkey + smp_up(G * sizeof(uint32_t));
    L.phist = L.pid + smp_up(G * sizeof(int));
    L.st = L.phist + smp_up(G * 256 * sizeof(uint32_t));
    L.total = L.st + smp_up(sizeof(smp_state));
    return L;
}

extern "C" int cuk_sample_supported(const cuk_sample_params *p) {
    if (!p) return 0;
    if (p->temperature <= 0.0f) return 1;  /* greedy: the filters are not looked at */
    /* what celer_sampler_new rejects, then the top-k the device needs */
    if (!(p->temperature == p->temperature) || !(p->top_p == p->top_p) || !(p->min_p == p->min_p) ||
        p->min_p > 1.0f)
        return 0;
    return p->top_k >= 1 && p->top_k <= CUK_SAMPLE_MAX_K;
}

extern "C" size_t cuk_sample_work(int V) { return V > 0 ? smp_layout_for(V).total : 0; }

extern "C" int cuk_sample(const float *logits, int V, const cuk_sample_params *p, const double *u, int32_t *out,
                          int32_t *host_out, void *work, cuk_stream s) {
    if (!logits || V <= 0 || !p || !out) return err_set("cuda sample: bad arguments (V %d)", V);
    if (!cuk_sample_supported(p))
        return err_set("cuda sample: parameters not supported on the device (temperature %g, top_k %d, top_p %g, "
                       "min_p %g)",
                       p->temperature, p->top_k, p->top_p, p->min_p);
    const bool sampling = p->temperature > 0.0f;
    if (sampling && !u) return err_set("cuda sample: temperature %g needs a draw", p->temperature);
    static int oneblock = -1;  /* A/B: the single-block kernel for every vocabulary */
    const bool one = V <= SMP_ONEBLOCK_MAX_V || cuk_env_flag(SET_CUK_SAMPLE_ONEBLOCK, &oneblock);
    /* the contract does not depend on the A/B switch */
    if ((V > SMP_ONEBLOCK_MAX_V || (sampling && V > SMP_THREADS)) && (!work || ((uintptr_t)work & 7u)))
        return err_set("cuda sample: work buffer missing or misaligned");
    const smp_layout L = smp_layout_for(V);
    char *w = (char *)work;
    uint2 *la = w ? (uint2 *)(w + L.la) : NULL, *lb = w ? (uint2 *)(w + L.lb) : NULL;
    const cudaStream_t st = (cudaStream_t)s;
    if (one) {
        cuk_launch(kernel_sample1, 1, SMP_THREADS, 0, st, logits, V, *p, u, out, host_out, la, lb,
                   (const cuk_sample_params *)NULL, (size_t)0);
        return cuk_check("sample");
    }
    const int G = (V + SMP_CH - 1) / SMP_CH;
    uint32_t *pkey = (uint32_t *)(w + L.pkey), *phist = (uint32_t *)(w + L.phist);
    int *pid = (int *)(w + L.pid);
    smp_state *state = (smp_state *)(w + L.st);
    uint2 *clist = (uint2 *)(w + L.clist);
    cuk_launch(kernel_sample_part, G, SMP_PT, 0, st, logits, V, (int)sampling, pkey, pid, phist, state,
               (const cuk_sample_params *)NULL, (size_t)0);
    if (cuk_check("sample (chunks)")) return -1;
    cuk_launch(kernel_sample_filter, G, SMP_PT, 0, st, logits, V, *p, G, (const uint32_t *)pkey, (const int *)pid,
               (const uint32_t *)phist, state, clist, la, out, host_out, (const cuk_sample_params *)NULL, (size_t)0);
    if (cuk_check("sample (filter)")) return -1;
    if (!sampling) return 0;
    cuk_launch(kernel_sample_final, 1, SMP_THREADS, 0, st, logits, V, *p, u, (const smp_state *)state,
               (const uint2 *)clist, la, lb, out, host_out, (const cuk_sample_params *)NULL, (size_t)0);
    return cuk_check("sample (final)");
}

extern "C" int cuk_sample_rows(const float *logits, int V, int n, int sampling, const cuk_sample_params *p,
                               const double *u, int32_t *out, int32_t *host_out, void *work, cuk_stream s) {
    if (!logits || V <= 0 || n <= 0 || !p || !out) return err_set("cuda sample (rows): bad arguments (V %d, %d rows)", V, n);
    if (sampling && !u) return err_set("cuda sample (rows): sampling needs draws");
    static int oneblock = -1;
    const bool one = V <= SMP_ONEBLOCK_MAX_V || cuk_env_flag(SET_CUK_SAMPLE_ONEBLOCK, &oneblock);
    if ((V > SMP_ONEBLOCK_MAX_V || (sampling && V > SMP_THREADS)) && (!work || ((uintptr_t)work & 7u)))
        return err_set("cuda sample (rows): work buffer missing or misaligned");
    const smp_layout L = smp_layout_for(V);
    const size_t ws = L.total; /* each row's own work space */
    char *w = (char *)work;
    uint2 *la = w ? (uint2 *)(w + L.la) : NULL, *lb = w ? (uint2 *)(w + L.lb) : NULL;
    const cudaStream_t st = (cudaStream_t)s;
    cuk_sample_params none; /* the kernels read each row's own from p */
    memset(&none, 0, sizeof none);
    if (one) {
        cuk_launch(kernel_sample1, (unsigned)n, SMP_THREADS, 0, st, logits, V, none, u, out, host_out, la, lb, p, ws);
        return cuk_check("sample (rows)");
    }
    const int G = (V + SMP_CH - 1) / SMP_CH;
    uint32_t *pkey = (uint32_t *)(w + L.pkey), *phist = (uint32_t *)(w + L.phist);
    int *pid = (int *)(w + L.pid);
    smp_state *state = (smp_state *)(w + L.st);
    uint2 *clist = (uint2 *)(w + L.clist);
    cuk_launch(kernel_sample_part, dim3((unsigned)G, (unsigned)n), SMP_PT, 0, st, logits, V, 0, pkey, pid, phist, state, p,
               ws);
    if (cuk_check("sample (rows, chunks)")) return -1;
    cuk_launch(kernel_sample_filter, dim3((unsigned)G, (unsigned)n), SMP_PT, 0, st, logits, V, none, G,
               (const uint32_t *)pkey, (const int *)pid, (const uint32_t *)phist, state, clist, la, out, host_out, p, ws);
    if (cuk_check("sample (rows, filter)")) return -1;
    if (!sampling) return 0;
    cuk_launch(kernel_sample_final, (unsigned)n, SMP_THREADS, 0, st, logits, V, none, u, (const smp_state *)state,
               (const uint2 *)clist, la, lb, out, host_out, p, ws);
    return cuk_check("sample (rows, final)");
}
