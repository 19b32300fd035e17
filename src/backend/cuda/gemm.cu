/* backend/cuda/gemm.cu: prefill matrix products on the tensor cores through cuBLAS
 * (bf16 operands, float32 accumulation and output). Row-major Y [T, N] = X [T, K] W^T
 * is column-major Y^T [N, T] = op_T(W as K x N) * X^T, so no transpose is ever stored. */
#include <cublas_v2.h>

#include "backend/cuda/common.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

static int gemm_bf16(cublasHandle_t h, const uint16_t *W, long N, long K, const uint16_t *X, int T, float *Y, long ldy) {
    const float one = 1.f, zero = 0.f;
    cublasStatus_t st = cublasGemmEx(h, CUBLAS_OP_T, CUBLAS_OP_N, (int)N, T, (int)K, &one, W, CUDA_R_16BF, (int)K, X,
                                     CUDA_R_16BF, (int)K, &zero, Y, CUDA_R_32F, (int)ldy, CUBLAS_COMPUTE_32F,
                                     CUBLAS_GEMM_DEFAULT);
    if (st != CUBLAS_STATUS_SUCCESS) return err_set("cublasGemmEx [%ld x %ld] x %d: status %d", N, K, T, (int)st);
    return 0;
}

extern "C" int cuk_gemm(void *cublas, const weight *w, const float *x, float *y, int T, uint16_t *xbf, uint16_t *wbf,
                        int64_t wbf_rows, cuk_stream s) {
    cublasHandle_t h = (cublasHandle_t)cublas;
    if (cuk_f32_to_bf16(x, xbf, (long)T * w->cols, s) != 0) return -1;
    if (w->fmt == WF_BF16) return gemm_bf16(h, (const uint16_t *)w->data, w->rows, w->cols, xbf, T, y, w->rows);
    for (int64_t r0 = 0; r0 < w->rows; r0 += wbf_rows) {
        int64_t n = w->rows - r0 < wbf_rows ? w->rows - r0 : wbf_rows;
        if (cuk_weight_to_bf16(w, r0, n, wbf, s) != 0) return -1;
        if (gemm_bf16(h, wbf, n, w->cols, xbf, T, y + r0, w->rows) != 0) return -1;
    }
    return 0;
}
