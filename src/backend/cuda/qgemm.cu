/* backend/cuda/qgemm.cu: prefill products of quantized weights on the tensor cores,
 * the weights dequantized into shared memory inside the product (no bf16 copy of the
 * weight ever reaches global memory). Y [T, N] = X [T, K] W^T for W [N, K] stored as
 * MLX affine 4- or 8-bit (w = code * scale + bias per group of 32/64/128) or MXFP4
 * (e2m1 codes, an e8m0 power of two per 32).
 *
 * A block computes a tile of BT tokens (32, 64 or 128) by QG_BF = 128 output features,
 * walking K in steps of QG_BK = 64. Per step: the activation tile (bf16, rounded once
 * on the way in by cuk_f32_to_bf16) goes to shared memory with cp.async; the weight
 * tile's packed codes (one or two 16-byte loads per thread, with their group's scale
 * and bias) are loaded into registers two steps ahead, then turned into bf16 (code *
 * scale + bias in float32, rounded to nearest even: the same bf16 weight the dequantize-
 * then-cuBLAS path produced) and stored to the other shared buffer while the tensor
 * cores work on this one. 8 warps, 2 (tokens) x 4 (features); a warp owns BT / 2
 * tokens x 32 features: MT m16 tiles x 4 n8 tiles of mma.sync m16n8k16 (bf16 in,
 * float32 accumulate), fragments read with ldmatrix. A = activations (row-major,
 * tokens x k), B = weights (k x features, "col": stored feature-major, k contiguous),
 * so neither operand is transposed. Shared rows are padded by 8 elements (16 bytes)
 * so the 8 row addresses of one 8x8 ldmatrix hit distinct banks.
 *
 * Two activation terms (x = hi + lo, the exact precision) are one longer walk over K:
 * the k tiles of hi, then those of lo, into the same accumulators. The exact
 * precision takes this kernel only for MXFP4, whose dequantized values (e2m1 times a
 * power of two) are exact in bf16; affine weights under exact keep gemm.cu's three
 * products (weight split into two bf16 terms too).
 *
 * Few tiles (a product of few features and tokens: decode batches, short chunks) split
 * the k walk over blockIdx.z (qg_splits), each split's partial sums written to a work
 * buffer and added in split order by kernel_qg_sum, so every run gives the same bits.
 *
 * Tails: tokens past T and k past K load as zeros (cp.async zero-fill; codes left
 * out), features past N are not stored. K must be a multiple of 32 (every MLX group
 * and MXFP4 block is) and the codes 16-byte aligned (cuk_qgemm_supports). */
#include "backend/cuda/common.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#define QG_BF 128
#define QG_BK 64
#define QG_S (QG_BK + 8) /* padded shared row, bf16 elements */
#define QG_THREADS 256

enum { QG_A4, QG_A8, QG_MX4 };

template <int FMT> struct qg_fmt {
    static constexpr int BITS = FMT == QG_A8 ? 8 : 4;
    static constexpr int CODES = 128 / BITS;                        /* codes per 16-byte load */
    static constexpr int PER_ROW = QG_BK / CODES;                   /* loads per weight row per k step */
    static constexpr int NLD = QG_BF * PER_ROW / QG_THREADS;        /* loads per thread per k step */
};

template <int BT> struct qg_cfg {
    static constexpr int MT = BT / 32; /* m16 tiles per warp (two warps along the tokens) */
    static constexpr size_t smem = 2 * (size_t)(BT + QG_BF) * QG_S * sizeof(uint16_t);
};

__device__ __forceinline__ uint32_t qg_pack(float lo, float hi) { /* bf16x2, each rounded to nearest even */
    uint32_t r;
    asm("cvt.rn.bf16x2.f32 %0, %1, %2;" : "=r"(r) : "f"(hi), "f"(lo));
    return r;
}

/* a code (< 2^23) as a float without a conversion instruction */
__device__ __forceinline__ float qg_u2f(uint32_t c) { return __uint_as_float(0x4B000000u | c) - 8388608.f; }

__device__ __forceinline__ void qg_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.bf16.bf16.f32 {%0,%1,%2,%3}, {%4,%5,%6,%7}, {%8,%9}, "
                 "{%0,%1,%2,%3};"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}

__device__ __forceinline__ void qg_ldsm4(uint32_t r[4], const uint16_t *p) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(p);
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(a));
}

/* 16 bytes global -> shared; n = 0 fills zeros (nothing is read) */
__device__ __forceinline__ void qg_cp16(uint16_t *s, const void *g, int n) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(s);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16, %2;" ::"r"(a), "l"(g), "r"(n));
}

/* One thread's share of a weight tile in registers: codes and their scale and bias
 * (MXFP4: the block's power of two halved, see qg_store; bias unused). */
template <int FMT> struct qg_raw {
    uint4 v[qg_fmt<FMT>::NLD];
    float sc[qg_fmt<FMT>::NLD], bi[qg_fmt<FMT>::NLD];
};

template <int FMT>
__device__ __forceinline__ void qg_load(qg_raw<FMT> &r, const uint32_t *__restrict__ W, const void *__restrict__ S,
                                        const void *__restrict__ B, int stype, int gshift, int N, int K, int f0, int k0) {
    using F = qg_fmt<FMT>;
#pragma unroll
    for (int i = 0; i < F::NLD; i++) {
        const int c = threadIdx.x + i * QG_THREADS, row = c / F::PER_ROW, k = k0 + (c % F::PER_ROW) * F::CODES;
        const int f = f0 + row;
        if (f < N && k < K) {
            r.v[i] = ld_stream(W + (long)f * (K / (32 / F::BITS)) + k / (32 / F::BITS));
            if (FMT == QG_MX4) {
                const uint32_t e = __ldg((const uint8_t *)S + (long)f * (K / 32) + k / 32);
                /* 2^(e - 127) / 2: the codes' magnitudes are read doubled (integers) */
                r.sc[i] = __uint_as_float(e >= 2 ? (e - 1) << 23 : 0x00200000u << e);
                r.bi[i] = 0.f;
            } else {
                const long g = (long)f * (K >> gshift) + (k >> gshift);
                r.sc[i] = scale_load(S, stype, g);
                r.bi[i] = scale_load(B, stype, g);
            }
        } else {
            r.v[i] = make_uint4(0, 0, 0, 0);
            r.sc[i] = r.bi[i] = 0.f;
        }
    }
}

/* e2m1 code (sign, 2 exponent bits, 1 mantissa bit) -> its value times 2 (an integer
 * 0, 1, 2, 3, 4, 6, 8, 12) times sc, the sign applied */
__device__ __forceinline__ float qg_e2m1(uint32_t c, float sc) {
    const float m = qg_u2f((0xC8643210u >> (4 * (c & 7))) & 15u);
    return (c & 8) ? -(m * sc) : m * sc;
}

/* The thread's codes -> bf16 rows of the shared weight tile ws [QG_BF][QG_S]. */
template <int FMT>
__device__ __forceinline__ void qg_store(const qg_raw<FMT> &r, uint16_t *ws) {
    using F = qg_fmt<FMT>;
#pragma unroll
    for (int i = 0; i < F::NLD; i++) {
        const int c = threadIdx.x + i * QG_THREADS, row = c / F::PER_ROW, kc = (c % F::PER_ROW) * F::CODES;
        uint4 *dst = (uint4 *)(ws + row * QG_S + kc);
        const uint32_t u[4] = {r.v[i].x, r.v[i].y, r.v[i].z, r.v[i].w};
        const float sc = r.sc[i], bi = r.bi[i];
        if (F::BITS == 4) {
#pragma unroll
            for (int j = 0; j < 4; j++) { /* one word: 8 codes, LSB first -> 16 bytes of bf16 */
                uint32_t o[4];
#pragma unroll
                for (int p = 0; p < 4; p++) {
                    const uint32_t c0 = (u[j] >> (8 * p)) & 15u, c1 = (u[j] >> (8 * p + 4)) & 15u;
                    if (FMT == QG_MX4) o[p] = qg_pack(qg_e2m1(c0, sc), qg_e2m1(c1, sc));
                    else o[p] = qg_pack(fmaf(qg_u2f(c0), sc, bi), fmaf(qg_u2f(c1), sc, bi));
                }
                dst[j] = make_uint4(o[0], o[1], o[2], o[3]);
            }
        } else {
#pragma unroll
            for (int j = 0; j < 2; j++) { /* two words: 8 codes -> 16 bytes of bf16 */
                uint32_t o[4];
#pragma unroll
                for (int p = 0; p < 4; p++) {
                    const uint32_t w = u[2 * j + (p >> 1)], s = 16 * (p & 1);
                    o[p] = qg_pack(fmaf(qg_u2f((w >> s) & 255u), sc, bi), fmaf(qg_u2f((w >> (s + 8)) & 255u), sc, bi));
                }
                dst[j] = make_uint4(o[0], o[1], o[2], o[3]);
            }
        }
    }
}

/* Activation tile: tokens [t0, t0 + BT) x k [k0, k0 + QG_BK) of x [T, K] bf16 -> xs [BT][QG_S]. */
template <int BT>
__device__ __forceinline__ void qg_load_x(const uint16_t *__restrict__ x, int T, int K, int t0, int k0, uint16_t *xs) {
#pragma unroll
    for (int i = 0; i < BT * (QG_BK / 8) / QG_THREADS; i++) {
        const int c = threadIdx.x + i * QG_THREADS, row = c / (QG_BK / 8), kc = (c % (QG_BK / 8)) * 8;
        const int t = t0 + row, k = k0 + kc;
        const bool in = t < T && k < K;
        qg_cp16(xs + row * QG_S + kc, in ? (const void *)(x + (long)t * K + k) : (const void *)x, in ? 16 : 0);
    }
}

/* y [T, ldy] (columns [0, N)) = (x [+ x2]) [T, K] times W [N, K]^T; grid (token tiles,
 * feature tiles, splits of the k walk). With splits (gridDim.z > 1) split z writes its
 * partial sums to part [z][T][N] (ldy = N) and kernel_qg_sum adds them in order. */
template <int FMT, int BT>
__global__ void __launch_bounds__(QG_THREADS, 2)
    kernel_qgemm(const uint32_t *__restrict__ W, const void *__restrict__ S, const void *__restrict__ B, int stype,
                 int gshift, const uint16_t *__restrict__ x, const uint16_t *__restrict__ x2, int T, int N, int K,
                 float *__restrict__ y, long ldy, int kper) {
    constexpr int MT = qg_cfg<BT>::MT;
    extern __shared__ uint4 qg_smem[];
    uint16_t *xs0 = (uint16_t *)qg_smem, *ws0 = xs0 + 2 * BT * QG_S; /* [2][BT][QG_S], [2][QG_BF][QG_S] */
    const int t0 = blockIdx.x * BT, f0 = blockIdx.y * QG_BF;
    const int warp = threadIdx.x >> 5, lane = threadIdx.x & 31, wm = warp & 1, wn = warp >> 1;
    const int nk = (K + QG_BK - 1) / QG_BK, nkt_all = x2 ? 2 * nk : nk;
    /* this split's steps of the walk (hi's k tiles, then lo's): [kb, nkt) */
    const int kb = blockIdx.z * kper, nkt = min(nkt_all, kb + kper);
    if (gridDim.z > 1) y += (long)blockIdx.z * T * ldy;

    /* step n of the walk reads k tile kof(n) of term n >= nk (x2's) */
    auto kof = [&](int n) { return (n - (n >= nk) * nk) * QG_BK; };
    /* codes two steps ahead: raw holds step kt + 1's while step kt's tiles are used, and
     * step kt + 2's load into raw2 meanwhile (twice the bytes in flight of one step) */
    qg_raw<FMT> raw, raw2;
    qg_load<FMT>(raw, W, S, B, stype, gshift, N, K, f0, kof(kb));
    qg_load_x<BT>(kb >= nk ? x2 : x, T, K, t0, kof(kb), xs0);
    cuk_cp_commit();
    qg_store<FMT>(raw, ws0);
    if (kb + 1 < nkt) qg_load<FMT>(raw, W, S, B, stype, gshift, N, K, f0, kof(kb + 1));
    cuk_cp_wait<0>();
    __syncthreads();

    float acc[MT][4][4];
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++)
#pragma unroll
            for (int q = 0; q < 4; q++) acc[mi][ni][q] = 0.f;

    for (int kt = kb; kt < nkt; kt++) {
        const int cur = (kt - kb) & 1;
        const bool more = kt + 1 < nkt;
        if (more) { /* the next step's activations straight to shared memory; the codes of the one after to registers */
            qg_load_x<BT>(kt + 1 >= nk ? x2 : x, T, K, t0, kof(kt + 1), xs0 + (cur ^ 1) * BT * QG_S);
            cuk_cp_commit();
            if (kt + 2 < nkt) qg_load<FMT>(raw2, W, S, B, stype, gshift, N, K, f0, kof(kt + 2));
        }
        const uint16_t *xs = xs0 + cur * BT * QG_S, *ws = ws0 + cur * QG_BF * QG_S;
#pragma unroll
        for (int kk = 0; kk < QG_BK / 16; kk++) {
            uint32_t b[2][4]; /* n8 tiles 2 nj and 2 nj + 1: b0 b1 of each */
#pragma unroll
            for (int nj = 0; nj < 2; nj++)
                qg_ldsm4(b[nj], ws + (wn * 32 + nj * 16 + (lane & 7) + ((lane >> 4) << 3)) * QG_S + kk * 16 +
                                    ((lane >> 3) & 1) * 8);
#pragma unroll
            for (int mi = 0; mi < MT; mi++) {
                uint32_t a[4];
                qg_ldsm4(a, xs + (wm * MT * 16 + mi * 16 + (lane & 15)) * QG_S + kk * 16 + (lane >> 4) * 8);
#pragma unroll
                for (int ni = 0; ni < 4; ni++) qg_mma(acc[mi][ni], a, b[ni >> 1][(ni & 1) * 2], b[ni >> 1][(ni & 1) * 2 + 1]);
            }
        }
        if (more) {
            qg_store<FMT>(raw, ws0 + (cur ^ 1) * QG_BF * QG_S);
            raw = raw2;
        }
        cuk_cp_wait<0>();
        __syncthreads();
    }

    /* C fragment: c0 c1 (token g, features 2q, 2q + 1), c2 c3 (token g + 8, ...) */
    const int g = lane >> 2, q = lane & 3;
#pragma unroll
    for (int mi = 0; mi < MT; mi++)
#pragma unroll
        for (int ni = 0; ni < 4; ni++) {
            const int f = f0 + wn * 32 + ni * 8 + 2 * q;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const int t = t0 + wm * MT * 16 + mi * 16 + g + 8 * h;
                if (t >= T) continue;
                float *yr = y + (long)t * ldy;
                if (f < N) yr[f] = acc[mi][ni][2 * h];
                if (f + 1 < N) yr[f + 1] = acc[mi][ni][2 * h + 1];
            }
        }
}

__global__ void kernel_qg_split(const float *src, uint16_t *hi, uint16_t *lo, long n) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const uint16_t h = f2bf16(src[i]);
    hi[i] = h;
    lo[i] = f2bf16(src[i] - bf16f(h));
}

static int qgemm_on(void) {
    static int v = -1;
    return cuk_env_flag(SET_CUK_QGEMM, &v);
}

extern "C" int cuk_qgemm_supports(const weight *w, int fast) {
    if (!qgemm_on() || w->cols % 32 != 0 || ((uintptr_t)w->data & 15) != 0 || w->rows > INT32_MAX || w->cols > INT32_MAX)
        return 0;
    if (w->fmt == WF_MXFP4) return w->scales != NULL;
    return fast && w->fmt == WF_AFFINE && (w->bits == 4 || w->bits == 8) &&
           (w->group == 32 || w->group == 64 || w->group == 128) && w->cols % w->group == 0 && w->scales && w->biases;
}

/* Which products take the fused kernel rather than a bf16 copy of the weight
 * (dequant.cu, eight codes a thread) and cuBLAS's product, measured per product on the
 * H200 (test_cuda_qgemm --bench, docs/benchmarks/cuda.md, fifteenth session): with its k
 * walk split over idle SMs the fused kernel is 1.1-2.2x faster for llama3-8b's q4/q8
 * products up to 64 rows; from 65 to CUK_QGEMM_MAX_T rows only where the product has
 * CUK_QGEMM_MIN_ROWS features or more (gate|up 1.23x, the head 1.64x at 128 rows; q|k|v
 * 0.82x, o 0.97x); beyond, cuBLAS (0.5-0.9x). Only at the fast precision: MXFP4 under
 * exact (two activation terms) measured 0.42-0.84x at every row count, and affine
 * weights under exact need their two weight terms, which this kernel does not form. */
#define QG_SMALL_T 64
static long qgemm_limit(setting_id id, long *cache) {
    if (*cache < 0) *cache = setting_int(id);
    return *cache;
}

extern "C" int cuk_qgemm_wanted(const weight *w, int T, int fast) {
    static long max_t = -1, min_rows = -1;
    const long mt = qgemm_limit(SET_CUK_QGEMM_MAX_T, &max_t);
    if (!fast || !cuk_qgemm_supports(w, fast) || T > mt) return 0;
    return T <= QG_SMALL_T || w->rows >= qgemm_limit(SET_CUK_QGEMM_MIN_ROWS, &min_rows);
}

/* y [T, ldy] = the sum of part [splits][T][N], in split order (the same bits every run) */
__global__ void kernel_qg_sum(const float *__restrict__ part, int splits, int T, int N, float *__restrict__ y, long ldy) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x, n = (long)T * N;
    if (i >= n) return;
    float a = part[i];
    for (int z = 1; z < splits; z++) a += part[(long)z * n + i];
    y[(i / N) * ldy + i % N] = a;
}

/* Splits of the k walk: a product of few tiles (few features, few tokens) leaves most
 * SMs idle for its whole walk; splitting the walk fills about two waves, each split at
 * least QG_MIN_KSTEPS steps (QG_MAX_SPLITS at most), the partial sums added by a second
 * kernel. */
#define QG_MAX_SPLITS 8
#define QG_MIN_KSTEPS 8
/* Tokens a block computes: 32, 64 or 128 (the fewest covering T, up to 128) */
static int qg_bt(int T) { return T <= 32 ? 32 : T <= 64 ? 64 : 128; }

static int qg_splits(const weight *w, int T, int terms) {
    const int bt = qg_bt(T);
    const long tiles = (long)((T + bt - 1) / bt) * ((w->rows + QG_BF - 1) / QG_BF);
    const int steps = terms * (int)((w->cols + QG_BK - 1) / QG_BK);
    int sp = (int)((2L * cuk_sm_count() + tiles - 1) / tiles);
    if (sp > QG_MAX_SPLITS) sp = QG_MAX_SPLITS;
    if (sp > steps / QG_MIN_KSTEPS) sp = steps / QG_MIN_KSTEPS;
    return sp < 1 ? 1 : sp;
}

extern "C" size_t cuk_qgemm_work(const weight *w, int T, int fast) {
    const int sp = qg_splits(w, T, fast || w->fmt != WF_MXFP4 ? 1 : 2);
    return sp > 1 ? (size_t)sp * (size_t)T * (size_t)w->rows * sizeof(float) : 0;
}

template <int FMT, int BT>
static void launch(const weight *w, const uint16_t *x, const uint16_t *x2, int T, float *y, float *part, cudaStream_t s) {
    static int attr_done; /* per instantiation; the opt-in is per device, cheap to repeat */
    int dev = 0;
    cudaGetDevice(&dev);
    if (!(attr_done & (1 << (dev & 31)))) {
        cudaFuncSetAttribute(kernel_qgemm<FMT, BT>, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)qg_cfg<BT>::smem);
        attr_done |= 1 << (dev & 31);
    }
    const int N = (int)w->rows, K = (int)w->cols;
    const int gshift = FMT == QG_MX4 ? 5 : __builtin_ctz((unsigned)w->group);
    const int steps = (x2 ? 2 : 1) * ((K + QG_BK - 1) / QG_BK);
    const int sp = part ? qg_splits(w, T, x2 ? 2 : 1) : 1, kper = (steps + sp - 1) / sp;
    const dim3 grid((unsigned)((T + BT - 1) / BT), (unsigned)((N + QG_BF - 1) / QG_BF), (unsigned)sp);
    kernel_qgemm<FMT, BT><<<grid, QG_THREADS, qg_cfg<BT>::smem, s>>>((const uint32_t *)w->data, w->scales, w->biases,
                                                                      (int)w->stype, gshift, x, x2, T, N, K,
                                                                      sp > 1 ? part : y, (long)N, kper);
    if (sp > 1) {
        const long n = (long)T * N;
        kernel_qg_sum<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(part, sp, T, N, y, (long)N);
    }
}

template <int FMT>
static void launch_bt(const weight *w, const uint16_t *x, const uint16_t *x2, int T, float *y, float *part,
                      cudaStream_t s) {
    switch (qg_bt(T)) {
    case 32: launch<FMT, 32>(w, x, x2, T, y, part, s); break;
    case 64: launch<FMT, 64>(w, x, x2, T, y, part, s); break;
    default: launch<FMT, 128>(w, x, x2, T, y, part, s);
    }
}

extern "C" int cuk_qgemm(const weight *w, const float *x, float *y, int T, uint16_t *xbf, float *part, int fast,
                         cuk_stream st) {
    if (!cuk_qgemm_supports(w, fast)) return err_set("cuda qgemm: no fused kernel for this weight");
    if (T <= 0) return 0;
    const cudaStream_t s = (cudaStream_t)st;
    const long n = (long)T * w->cols;
    uint16_t *lo = NULL;
    if (fast) {
        if (cuk_f32_to_bf16(x, xbf, n, st) != 0) return -1;
    } else {
        lo = xbf + n;
        kernel_qg_split<<<(unsigned)((n + 255) / 256), 256, 0, s>>>(x, xbf, lo, n);
    }
    if (w->fmt == WF_MXFP4) launch_bt<QG_MX4>(w, xbf, lo, T, y, part, s);
    else if (w->bits == 4) launch_bt<QG_A4>(w, xbf, lo, T, y, part, s);
    else launch_bt<QG_A8>(w, xbf, lo, T, y, part, s);
    return cuk_check("qgemm");
}
