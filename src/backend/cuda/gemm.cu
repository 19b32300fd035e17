/* backend/cuda/gemm.cu: prefill matrix products on the tensor cores through cuBLAS
 * (bf16 operands, float32 accumulation and output). Row-major Y [T, N] = X [T, K] W^T
 * is column-major Y^T [N, T] = op_T(W as K x N) * X^T, so no transpose is ever stored.
 * The float32 activations are split into two bf16 terms, x = hi + lo (lo the
 * rounding error of hi), and Y = W hi + W lo: two products, activations exact to
 * about 2^-16 instead of bf16's 2^-8 (the fixtures' 5e-2 tolerance needs it; a
 * single rounded product is off by up to 2 on small random models). Weights stored
 * in other formats are dequantized in row chunks (dequant.cu) into the same two terms,
 * and the third product W_lo x_hi is added (W_lo x_lo is below float rounding; MXFP4
 * values are exact in bf16, so they have no W_lo).
 * That is the exact precision (CELER_PRECISION=exact). The fast precision (the
 * GPU's default) rounds the activations once to bf16 and runs one product per
 * weight (dequantized weights rounded once too): what bf16 inference engines do,
 * held to transformers' bf16 error by tests/cuda/test_cuda_precision.c.
 * CUK_GEMM_BF16X1=1 makes the exact precision's products single too (A/B runs). */
#include <cublas_v2.h>

#include "backend/cuda/common.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

static int gemm_bf16(cublasHandle_t h, const uint16_t *W, long N, long K, const uint16_t *X, int T, float *Y, long ldy,
                     float beta) {
    const float one = 1.f;
    cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, T, (int)K, &one, W, CUDA_R_16BF, (int)K, X,
                                     CUDA_R_16BF, (int)K, &beta, Y, CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) return err_set("cublasGemmEx [%ld x %ld] x %d: status %d", N, K, T, (int)st);
    return 0;
}

__global__ void kernel_split_bf16(const float *src, uint16_t *hi, uint16_t *lo, long n) {
    cuk_pdl_start();
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    const uint16_t h = f2bf16(src[i]);
    hi[i] = h;
    lo[i] = f2bf16(src[i] - bf16f(h));
}

extern "C" int cuk_split_bf16(const float *src, uint16_t *hi, uint16_t *lo, long n, cuk_stream s) {
    cuk_launch(kernel_split_bf16, (unsigned)((n + 255) / 256), 256, 0, (cudaStream_t)s, src, hi, lo, n);
    return cuk_check("split_bf16");
}

static int single_product(void) {
    static int v = -1;
    return cuk_env_flag(SET_CUK_GEMM_BF16X1, &v);
}

extern "C" size_t cuk_gemm_xbf_elems(int T, int64_t cols) { return 2 * (size_t)T * (size_t)cols; }
extern "C" size_t cuk_gemm_wbf_elems(int64_t rows, int64_t cols) { return 2 * (size_t)rows * (size_t)cols; }

/* Chunks of 32M weights (64 MiB a term; at least 4,096 rows): llama3-8b's q|k|v and
 * gate|up (K = 4,096) as products of up to 8,192 rows, so the copy's buffer stays a
 * fraction of a large weight's bf16 size. */
extern "C" int64_t cuk_gemm_wbf_rows(const weight *w) {
    if (w->fmt == WF_BF16) return 0;
    int64_t r = ((int64_t)1 << 25) / (w->cols > 0 ? w->cols : 1) / 128 * 128;
    if (r < 4096) r = 4096;
    return w->rows < r ? w->rows : r;
}

/* Y (ldy) = W [N, K] times both activation terms */
static int product(cublasHandle_t h, const uint16_t *W, long N, long K, const uint16_t *hi, const uint16_t *lo, int T,
                   float *Y, long ldy) {
    if (gemm_bf16(h, W, N, K, hi, T, Y, ldy, 0.f) != 0) return -1;
    return lo ? gemm_bf16(h, W, N, K, lo, T, Y, ldy, 1.f) : 0;
}

/* y [T, ldy] (columns [0, N)) = y2 [T, N] + y2 [T + t, N]: the two terms of a stacked product */
__global__ void kernel_add_halves(const float *__restrict__ y2, int T, long N, float *__restrict__ y, long ldy) {
    cuk_pdl_start();
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)T * N) return;
    const long t = i / N, c = i % N;
    y[t * ldy + c] = y2[i] + y2[(long)T * N + i];
}

extern "C" size_t cuk_gemm_y2_elems(int T, int64_t rows) {
    return T <= CUK_GEMM_STACK_MAX_T ? 2 * (size_t)T * (size_t)rows : 0;
}

/* The stacked form: Y2 [2T, N] = W [hi; lo] in one product (the weights read once,
 * as a batched decode step needs), then y = the two halves' sum. */
static int product_stacked(cublasHandle_t h, const uint16_t *W, long N, long K, const uint16_t *hilo, int T, float *y2,
                           float *Y, long ldy, cudaStream_t s) {
    if (gemm_bf16(h, W, N, K, hilo, 2 * T, y2, N, 0.f) != 0) return -1;
    const long total = (long)T * N;
    cuk_launch(kernel_add_halves, (unsigned)((total + 255) / 256), 256, 0, s, (const float *)y2, T, N, Y, ldy);
    return cuk_check("gemm (stacked terms)");
}

extern "C" int cuk_gemm(void *cublas, const weight *w, const float *x, float *y, int T, uint16_t *xbf, uint16_t *wbf,
                        int64_t wbf_rows, int fast, cuk_stream s) {
    return cuk_gemm2(cublas, w, x, y, T, xbf, wbf, wbf_rows, NULL, fast, s);
}

extern "C" int cuk_gemm2(void *cublas, const weight *w, const float *x, float *y, int T, uint16_t *xbf, uint16_t *wbf,
                         int64_t wbf_rows, float *y2, int fast, cuk_stream s) {
    cublasHandle_t h = (cublasHandle_t)cublas;
    const long n = (long)T * w->cols;
    uint16_t *lo = NULL;
    if (fast == 2) {
        /* xbf already holds bf16(x): the previous product read the same activations */
    } else if (fast || single_product()) {
        if (cuk_f32_to_bf16(x, xbf, n, s) != 0) return -1;
    } else {
        lo = xbf + n;
        if (cuk_split_bf16(x, xbf, lo, n, s) != 0) return -1;
    }
    const bool stacked = lo && y2 && T <= CUK_GEMM_STACK_MAX_T;
    const cudaStream_t cs = (cudaStream_t)s;
    if (w->fmt == WF_BF16) {
        if (stacked) return product_stacked(h, (const uint16_t *)w->data, w->rows, w->cols, xbf, T, y2, y, w->rows, cs);
        return product(h, (const uint16_t *)w->data, w->rows, w->cols, xbf, lo, T, y, w->rows);
    }
    for (int64_t r0 = 0; r0 < w->rows; r0 += wbf_rows) {
        int64_t nr = w->rows - r0 < wbf_rows ? w->rows - r0 : wbf_rows;
        /* MXFP4 values are exact in bf16: no weight term W_lo */
        uint16_t *wlo = lo && w->fmt != WF_MXFP4 ? wbf + (size_t)nr * w->cols : NULL;
        if (cuk_weight_to_bf16x2(w, r0, nr, wbf, wlo, s) != 0) return -1;
        if (stacked) {
            if (product_stacked(h, wbf, nr, w->cols, xbf, T, y2, y + r0, w->rows, cs) != 0) return -1;
        } else if (product(h, wbf, nr, w->cols, xbf, lo, T, y + r0, w->rows) != 0) {
            return -1;
        }
        if (wlo && gemm_bf16(h, wlo, nr, w->cols, xbf, T, y + r0, w->rows, 1.f) != 0) return -1;
    }
    return 0;
}
