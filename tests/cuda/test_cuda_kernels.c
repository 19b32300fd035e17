/* tests/cuda/test_cuda_kernels.c: the CUDA kernels against double-precision host
 * references on random data (sizes that are not multiples of the tiles included),
 * then a bandwidth benchmark of the decode matrix-vector products beside a measured
 * device-to-device copy. Runs on the GPU machine: `make test-cuda`. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "base/err.h"
#include "base/settings.h"
#include "harness.h"
#include "tensor/dtype.h"
#include "tensor/weight.h"

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) { printf("CUDA %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } \
    } while (0)

static uint64_t rng = 88172645463325252ULL;
static float frand(void) { /* uniform [-1, 1) */
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (float)((rng >> 11) * (1.0 / 9007199254740992.0)) * 2.f - 1.f;
}
static uint32_t urand(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 32); }

static void *dup_dev(const void *h, size_t n) {
    void *d;
    CK(cudaMalloc(&d, n ? n : 4));
    CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}

/* A host weight of format fmt with random contents, and its device twin. */
typedef struct { weight h, d; void *bufs[6]; int nb; } twin;

static twin make_weight(weight_fmt fmt, long rows, long cols, int bits, int group, scale_type st) {
    twin t;
    memset(&t, 0, sizeof t);
    weight *w = &t.h;
    w->fmt = fmt; w->rows = rows; w->cols = cols; w->bits = bits; w->group = group; w->stype = st;
    size_t n = (size_t)(rows * cols);
    if (fmt == WF_BF16 || fmt == WF_F16) {
        uint16_t *p = malloc(n * 2);
        for (size_t i = 0; i < n; i++) {
            float v = frand() * 0.1f;
            if (fmt == WF_BF16) p[i] = f32_to_bf16(v);
            else { p[i] = (uint16_t)(0x2000 + (urand() & 0x0fff)) | (urand() & 0x8000); }
        }
        w->data = p; w->nbytes = n * 2;
    } else if (fmt == WF_F32) {
        float *p = malloc(n * 4);
        for (size_t i = 0; i < n; i++) p[i] = frand() * 0.1f;
        w->data = p; w->nbytes = n * 4;
    } else {
        size_t nw = n * bits / 32, ng = n / group, ss = st == SC_F32 ? 4 : 2;
        uint32_t *c = malloc(nw * 4);
        for (size_t i = 0; i < nw; i++) c[i] = urand();
        void *s = malloc(ng * ss), *b = malloc(ng * ss);
        for (size_t i = 0; i < ng; i++) {
            float sv = 0.01f + 0.01f * fabsf(frand()), bv = -0.05f + 0.01f * frand();
            if (st == SC_BF16) { ((uint16_t *)s)[i] = f32_to_bf16(sv); ((uint16_t *)b)[i] = f32_to_bf16(bv); }
            else if (st == SC_F16) { ((uint16_t *)s)[i] = 0x2000 + (uint16_t)(urand() & 0x3ff); ((uint16_t *)b)[i] = 0xa800 + (uint16_t)(urand() & 0x3ff); }
            else { ((float *)s)[i] = sv; ((float *)b)[i] = bv; }
        }
        w->data = c; w->scales = s; w->biases = b; w->nbytes = nw * 4 + 2 * ng * ss;
    }
    t.d = t.h;
    size_t ss = st == SC_F32 ? 4 : 2;
    if (fmt == WF_AFFINE) {
        t.d.data = dup_dev(w->data, n * bits / 8);
        t.d.scales = dup_dev(w->scales, n / group * ss);
        t.d.biases = dup_dev(w->biases, n / group * ss);
    } else {
        t.d.data = dup_dev(w->data, w->nbytes);
    }
    return t;
}

static void free_twin(twin *t) {
    free((void *)t->h.data); free((void *)t->h.scales); free((void *)t->h.biases);
    cudaFree((void *)t->d.data); cudaFree((void *)t->d.scales); cudaFree((void *)t->d.biases);
}

/* y [T, rows] in double from the host weight */
static double *ref_matmul(const weight *w, const float *x, int T) {
    double *y = calloc((size_t)T * w->rows, sizeof *y);
    float *row = malloc((size_t)w->cols * 4);
    for (long r = 0; r < w->rows; r++) {
        weight_row_f32(w, r, row);
        for (int t = 0; t < T; t++) {
            double s = 0;
            for (long j = 0; j < w->cols; j++) s += (double)row[j] * x[(long)t * w->cols + j];
            y[(long)t * w->rows + r] = s;
        }
    }
    free(row);
    return y;
}

static double rel_err(const float *got, const double *ref, long n) {
    double num = 0, den = 0;
    for (long i = 0; i < n; i++) {
        if (!isfinite(got[i])) return INFINITY;
        num += (got[i] - ref[i]) * (got[i] - ref[i]);
        den += ref[i] * ref[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static cublasHandle_t cublas;

/* fast: the GEMMs of the fast precision (activations rounded once to bf16) */
static void check_matmul_p(const char *name, weight_fmt fmt, long rows, long cols, int bits, int group, scale_type st, int fast) {
    twin w = make_weight(fmt, rows, cols, bits, group, st);
    const int Ts[] = {1, 2, 3, 8, 33, 130};
    for (size_t k = 0; k < sizeof Ts / sizeof Ts[0]; k++) {
        int T = Ts[k];
        float *x = malloc((size_t)T * cols * 4), *y = malloc((size_t)T * rows * 4);
        for (long i = 0; i < T * cols; i++) x[i] = frand();
        float *dx = dup_dev(x, (size_t)T * cols * 4), *dy;
        CK(cudaMalloc((void **)&dy, (size_t)T * rows * 4));
        CK(cudaMemset(dy, 0xff, (size_t)T * rows * 4)); /* NaN poison: every element must be written */
        int rc;
        double tol;
        if (T <= CUK_MV_MAX_T && cuk_matvec_supports(&w.d)) {
            void *work;
            CK(cudaMalloc(&work, cuk_matvec_work(T, cols)));
            rc = cuk_matvec(&w.d, dx, dy, T, work, fast, NULL);
            CK(cudaDeviceSynchronize());
            cudaFree(work);
            /* float activations; CUK_MV_INT8=1 quantizes them to int8 for quantized weights;
             * the fast precision's one-row 4-bit products to two int8 terms per 64 values
             * (x within max|x| / 64,516 of its piece: about 2e-5 relative on these data; a
             * product without the second term lands near 4e-3) */
            tol = w.h.fmt == WF_AFFINE && getenv("CUK_MV_INT8") ? 1e-2 : fast && w.h.fmt == WF_AFFINE && T == 1 ? 1e-4 : 1e-5;
        } else {
            uint16_t *xbf, *wbf;
            CK(cudaMalloc((void **)&xbf, cuk_gemm_xbf_elems(T, cols) * 2));
            CK(cudaMalloc((void **)&wbf, cuk_gemm_wbf_elems(257, cols) * 2));
            rc = cuk_gemm(cublas, &w.d, dx, dy, T, xbf, wbf, 257, fast, NULL);
            CK(cudaDeviceSynchronize());
            cudaFree(xbf);
            cudaFree(wbf);
            /* exact: activations and dequantized weights split into two bf16 terms; fast:
             * one rounding of each (relative error about 2^-9 per operand) */
            tol = fast || getenv("CUK_GEMM_BF16X1") ? 1e-2 : 1e-4;
        }
        CHECK(rc == 0, "%s T=%d: %s", name, T, err_msg());
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(y, dy, (size_t)T * rows * 4, cudaMemcpyDeviceToHost));
        double *ref = ref_matmul(&w.h, x, T);
        double e = rel_err(y, ref, (long)T * rows);
        CHECK(e <= tol, "%s%s [%ld x %ld] T=%d: relative error %g (tolerance %g)", name, fast ? " (fast)" : "", rows, cols, T,
              e, tol);
        free(ref); free(x); free(y); cudaFree(dx); cudaFree(dy);
    }
    free_twin(&w);
}

static void check_matmul(const char *name, weight_fmt fmt, long rows, long cols, int bits, int group, scale_type st) {
    check_matmul_p(name, fmt, rows, cols, bits, group, st, 0);
    check_matmul_p(name, fmt, rows, cols, bits, group, st, 1);
}

static void matmul_formats(void) {
    check_matmul("bf16", WF_BF16, 1000, 1032, 0, 0, SC_BF16);
    check_matmul("f16", WF_F16, 333, 264, 0, 0, SC_BF16);
    check_matmul("bf16 long rows", WF_BF16, 300, 5128, 0, 0, SC_BF16); /* several rounds of loads a warp and a tail */
    /* one-row products at 2 rows a warp (rows_per_warp: 4,096+ columns, and on a 132-SM
     * H200 264 blocks at 1 row a warp fill the SMs no better than 132 at 2), an odd last row */
    check_matmul("bf16 many long rows", WF_BF16, 2111, 4104, 0, 0, SC_BF16);
    check_matmul("f32", WF_F32, 77, 100, 0, 0, SC_BF16);
    check_matmul("q4g64", WF_AFFINE, 1000, 1024, 4, 64, SC_BF16);
    /* columns a multiple of 2048: kernel_mv_q4g_x1 by default, the chunk kernel under CUK_MV_X1CFG=r2u4
     * (3 steps a lane with 2 in a batch; rows off 4; groups of 128) */
    check_matmul("q4g64 wide", WF_AFFINE, 301, 6144, 4, 64, SC_BF16);
    check_matmul("q4g128 wide", WF_AFFINE, 77, 2048, 4, 128, SC_BF16);
    /* the fast precision's two-term int8 kernel (kernel_mv_q4g_i8): a warp's last step
     * with idle lanes (40 and 3 pieces a row), f32 and f16 scales */
    check_matmul("q4g64-f32 2560", WF_AFFINE, 129, 2560, 4, 64, SC_F32);
    check_matmul("q4g64-f16 192", WF_AFFINE, 65, 192, 4, 64, SC_F16);
    check_matmul("q4g32-f16", WF_AFFINE, 129, 512, 4, 32, SC_F16);
    check_matmul("q8g128-f32", WF_AFFINE, 200, 768, 8, 128, SC_F32);
    check_matmul("q3g64 (gemm path)", WF_AFFINE, 100, 384, 3, 64, SC_BF16);
}

/* The tensor-core decode product (skinny.cu) against the float64 reference: batches of
 * 1-32 rows (each fragment width and the rows past T in the last one), features and
 * columns off the block and chunk sizes, products split over a cluster's blocks and
 * not, both prefetch depths; every output written (NaN poison), the same bits on a
 * second run and from activations staged by the call before (fast 2). */
static void check_skinny(long rows, long cols, int fast) {
    twin w = make_weight(WF_BF16, rows, cols, 0, 0, SC_BF16);
    CHECK(cuk_skinny_supports(&w.d), "skinny should take bf16 [%ld x %ld]", rows, cols);
    const int Ts[] = {1, 3, 5, 8, 9, 16, 17, 31, 32};
    for (size_t k = 0; k < sizeof Ts / sizeof Ts[0]; k++) {
        const int T = Ts[k];
        float *x = malloc((size_t)T * cols * 4), *y = malloc((size_t)T * rows * 4), *y2 = malloc((size_t)T * rows * 4);
        for (long i = 0; i < T * cols; i++) x[i] = frand();
        float *dx = dup_dev(x, (size_t)T * cols * 4), *dy;
        uint16_t *xbf;
        CK(cudaMalloc((void **)&dy, (size_t)T * rows * 4));
        CK(cudaMalloc((void **)&xbf, cuk_gemm_xbf_elems(T, cols) * 2));
        double *ref = ref_matmul(&w.h, x, T);
        for (int cfg = 1; cfg <= 3; cfg++) {
            cuk_skinny_set_cfg(cfg);
            for (int rep = 0; rep < 2; rep++) {
                CK(cudaMemset(dy, 0xff, (size_t)T * rows * 4));
                /* the second run of fast reads the activations the first staged */
                const int mode = fast ? 1 + rep : 0;
                CHECK(cuk_skinny(&w.d, dx, dy, T, xbf, mode, NULL) == 0, "skinny [%ld x %ld] T=%d: %s", rows, cols, T,
                      err_msg());
                CK(cudaDeviceSynchronize());
                CK(cudaMemcpy(rep ? y2 : y, dy, (size_t)T * rows * 4, cudaMemcpyDeviceToHost));
            }
            const double e = rel_err(y, ref, (long)T * rows), tol = fast ? 1e-2 : 1e-4;
            CHECK(e <= tol, "skinny%s [%ld x %ld] T=%d cfg %d: relative error %g (tolerance %g)", fast ? " (fast)" : "",
                  rows, cols, T, cfg, e, tol);
            CHECK(memcmp(y, y2, (size_t)T * rows * 4) == 0, "skinny [%ld x %ld] T=%d cfg %d: two runs differ", rows, cols,
                  T, cfg);
        }
        cuk_skinny_set_cfg(0);
        free(ref); free(x); free(y); free(y2); cudaFree(dx); cudaFree(dy); cudaFree(xbf);
    }
    free_twin(&w);
}

static void skinny(void) {
    for (int fast = 0; fast < 2; fast++) {
        check_skinny(1000, 1032, fast); /* 16 row blocks: columns split, 1032 = 16 chunks + 8 */
        check_skinny(70, 8200, fast);   /* 2 row blocks: the most splits */
        check_skinny(20000, 72, fast);  /* 313 row blocks, one chunk and a tail: no split */
        check_skinny(8, 64, fast);      /* fewer features than one fragment */
    }
    weight f16 = {.fmt = WF_F16, .rows = 8, .cols = 64};
    CHECK(!cuk_skinny_supports(&f16), "skinny takes bf16 weights only");
    weight odd = {.fmt = WF_BF16, .rows = 8, .cols = 60};
    CHECK(!cuk_skinny_supports(&odd), "skinny needs columns %% 8 == 0");
}

/* A gate|up product and its GLU in one launch (cuk_matvec_glu) against the product into
 * [T, 2n] followed by cuk_glu, bit for bit, and both against a double reference: 16-bit
 * weights, 1-4 rows, SiLU and GELU, widths off every multiple the kernel strides by. */
static void matvec_glu(void) {
    static const struct { long n, cols; } shapes[] = {{8, 64}, {100, 1000}, {1000, 4104}};
    for (int f = 0; f < 2; f++)
        for (size_t si = 0; si < sizeof shapes / sizeof *shapes; si++) {
            const long n = shapes[si].n, cols = shapes[si].cols;
            twin w = make_weight(f ? WF_F16 : WF_BF16, 2 * n, cols, 0, 0, SC_BF16);
            for (int T = 1; T <= 4; T++)
                for (int act = 0; act < 2; act++) {
                    float *x = malloc((size_t)T * cols * 4), *y1 = malloc((size_t)T * n * 4), *y2 = malloc((size_t)T * n * 4);
                    for (long i = 0; i < T * cols; i++) x[i] = frand();
                    float *dx = dup_dev(x, (size_t)T * cols * 4), *dgu, *dy1, *dy2;
                    void *work;
                    CK(cudaMalloc((void **)&dgu, (size_t)T * 2 * n * 4));
                    CK(cudaMalloc((void **)&dy1, (size_t)T * n * 4));
                    CK(cudaMalloc((void **)&dy2, (size_t)T * n * 4));
                    CK(cudaMalloc(&work, cuk_matvec_work(T, cols)));
                    CK(cudaMemset(dy1, 0xff, (size_t)T * n * 4)); /* NaN poison: every output written */
                    CHECK(cuk_matvec_glu(&w.d, dx, dy1, T, act, NULL) == 0, "matvec_glu: %s", err_msg());
                    CHECK(cuk_matvec(&w.d, dx, dgu, T, work, 1, NULL) == 0 &&
                              cuk_glu(dgu, 2 * n, dgu + n, 2 * n, dy2, T, n, act, NULL) == 0,
                          "matvec then glu: %s", err_msg());
                    CK(cudaDeviceSynchronize());
                    CK(cudaMemcpy(y1, dy1, (size_t)T * n * 4, cudaMemcpyDeviceToHost));
                    CK(cudaMemcpy(y2, dy2, (size_t)T * n * 4, cudaMemcpyDeviceToHost));
                    CHECK(memcmp(y1, y2, (size_t)T * n * 4) == 0, "matvec_glu %s [%ld x %ld] T=%d act=%d: differs from matvec + glu",
                          f ? "f16" : "bf16", 2 * n, cols, T, act);
                    double *ref = ref_matmul(&w.h, x, T), worst = 0;
                    for (int t = 0; t < T; t++)
                        for (long j = 0; j < n; j++) {
                            const double g = ref[(size_t)t * 2 * n + j], u = ref[(size_t)t * 2 * n + n + j];
                            const double a = act ? 0.5 * g * (1 + tanh(0.7978845608028654 * (g + 0.044715 * g * g * g)))
                                                 : g / (1 + exp(-g));
                            worst = fmax(worst, fabs(y1[(size_t)t * n + j] - a * u) / (1 + fabs(a * u)));
                        }
                    CHECK(worst < 1e-4, "matvec_glu [%ld x %ld] T=%d act=%d: max error %g against the reference", 2 * n, cols, T,
                          act, worst);
                    free(ref); free(x); free(y1); free(y2);
                    cudaFree(dx); cudaFree(dgu); cudaFree(dy1); cudaFree(dy2); cudaFree(work);
                }
            free_twin(&w);
        }
    twin q = make_weight(WF_AFFINE, 128, 64, 4, 64, SC_BF16);
    CHECK(cuk_matvec_glu(&q.d, NULL, NULL, 1, 0, NULL) != 0 && strstr(err_msg(), "matvec + glu"),
          "matvec_glu takes a 4-bit weight it has no kernel for");
    free_twin(&q);
}

/* The fast precision's one-row 4-bit products (kernel_mv_q4g_i8) fed by the kernels that
 * write their two-term int8 activations ahead (add + RMSNorm, GLU: cuk_matvec's fast 2):
 * the same bits as the product quantizing a plain kernel's output itself (fast 1), for
 * the norm (with and without the 1 + w form) and both GLU activations; a weight the
 * kernel does not take is named so. */
static void q8x2_staging(void) {
    const long rows = 300, cols = 2560; /* 40 pieces: a warp's last step with idle lanes */
    twin w = make_weight(WF_AFFINE, rows, cols, 4, 64, SC_BF16);
    CHECK(cuk_matvec_q8x2(&w.d), "the two-term kernel should take q4 g64 [%ld x %ld]", rows, cols);
    twin w32 = make_weight(WF_AFFINE, 8, 512, 4, 32, SC_BF16);
    CHECK(!cuk_matvec_q8x2(&w32.d), "the two-term kernel needs groups of 64 or more");
    free_twin(&w32);
    float *h = malloc((size_t)cols * 4 * 4);
    for (long i = 0; i < 4 * cols; i++) h[i] = frand() * (i % 7 == 0 ? 8.f : 1.f);
    float *x1 = dup_dev(h, cols * 4), *x2 = dup_dev(h, cols * 4), *d = dup_dev(h + cols, cols * 4),
          *nw = dup_dev(h + 2 * cols, cols * 4), *u = dup_dev(h + 3 * cols, cols * 4);
    float *y1, *y2, *o1, *o2;
    void *wk1, *wk2;
    CK(cudaMalloc((void **)&y1, cols * 4)); CK(cudaMalloc((void **)&y2, cols * 4));
    CK(cudaMalloc((void **)&o1, rows * 4)); CK(cudaMalloc((void **)&o2, rows * 4));
    CK(cudaMalloc(&wk1, cuk_matvec_work(1, cols))); CK(cudaMalloc(&wk2, cuk_matvec_work(1, cols)));
    float *a = malloc((size_t)(cols + rows) * 4), *b = malloc((size_t)(cols + rows) * 4);
    for (int k = 0; k < 4; k++) { /* 0, 1: add + RMSNorm (w, 1 + w); 2, 3: GLU (SiLU, GELU) */
        CK(cudaMemcpy(x1, h, cols * 4, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(x2, h, cols * 4, cudaMemcpyHostToDevice));
        CK(cudaMemset(o2, 0xff, rows * 4));
        int rc;
        if (k < 2) {
            rc = cuk_add_rmsnorm(x1, d, NULL, nw, y1, 1, (int)cols, 1e-6f, k, NULL) ||
                 cuk_matvec(&w.d, y1, o1, 1, wk1, 1, NULL) ||
                 cuk_add_rmsnorm_q8x2(x2, d, NULL, nw, y2, (int)cols, 1e-6f, k, wk2, NULL) ||
                 cuk_matvec(&w.d, y2, o2, 1, wk2, 2, NULL);
        } else {
            rc = cuk_glu(x1, cols, u, cols, y1, 1, cols, k - 2, NULL) || cuk_matvec(&w.d, y1, o1, 1, wk1, 1, NULL) ||
                 cuk_glu_q8x2(x2, u, y2, cols, k - 2, wk2, NULL) || cuk_matvec(&w.d, y2, o2, 1, wk2, 2, NULL);
        }
        CHECK(rc == 0, "q8x2 staging %d: %s", k, err_msg());
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(a, y1, cols * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(a + cols, o1, rows * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(b, y2, cols * 4, cudaMemcpyDeviceToHost)); CK(cudaMemcpy(b + cols, o2, rows * 4, cudaMemcpyDeviceToHost));
        CHECK(memcmp(a, b, (size_t)cols * 4) == 0, "q8x2 staging %d: the staging kernel's own output differs", k);
        CHECK(memcmp(a + cols, b + cols, (size_t)rows * 4) == 0, "q8x2 staging %d: staged and self-quantized products differ", k);
        long live = 0;
        for (long i = 0; i < rows; i++) live += isfinite(b[cols + i]) && b[cols + i] != 0.f;
        CHECK(live == rows, "q8x2 staging %d: %ld of %ld outputs written", k, live, rows);
    }
    float *none = NULL;
    CHECK(cuk_glu_q8x2(x1, u, none, 100, 0, wk2, NULL) != 0, "a GLU of 100 values cannot stage 64-value pieces");
    free(a); free(b); free(h);
    cudaFree(x1); cudaFree(x2); cudaFree(d); cudaFree(nw); cudaFree(u); cudaFree(y1); cudaFree(y2); cudaFree(o1); cudaFree(o2);
    cudaFree(wk1); cudaFree(wk2);
    free_twin(&w);
}

/* add + RMSNorm at row widths that take each register width of the kernel (1, 2, 4
 * and 8 values a thread) and the loop form (more than 8,192): x and y against a double
 * reference, with and without the norm of d (dw, gemma's sandwich), w and 1 + w; then
 * its three forms bit for bit (CUK_NORM_REG 2: a row that also writes int8 pieces over
 * a cluster of 8 blocks where rows have 4,096+ values, 1: one block a row, 0: the loop
 * form): x, y, the bf16 copy and (one row) the two-term int8 pieces. */
static void add_rmsnorm_widths(void) {
    static const int widths[] = {640, 1000, 2048, 2560, 2880, 4096, 5120, 8192, 9000};
    const int T = 3;
    for (size_t wi = 0; wi < sizeof widths / sizeof *widths; wi++) {
        const int n = widths[wi];
        const size_t tn = (size_t)T * n;
        float *h = malloc(tn * 2 * 4 + (size_t)n * 2 * 4), *hx = h, *hd = h + tn, *hw = h + 2 * tn, *hdw = hw + n;
        for (size_t i = 0; i < tn; i++) { hx[i] = 2 * frand(); hd[i] = frand() * (i % 5 == 0 ? 6.f : 1.f); }
        for (int i = 0; i < 2 * n; i++) hw[i] = frand();
        float *dd = dup_dev(hd, tn * 4), *dw = dup_dev(hw, (size_t)n * 4), *ddw = dup_dev(hdw, (size_t)n * 4);
        float *gx[3], *gy[3], *x = malloc(tn * 4), *xs[3], *ys[3];
        uint16_t *gb[3], *bs[3];
        uint32_t *gq[3], *qs[3];
        const size_t qn = (size_t)(n / 64 + 1) * 36;
        for (int m = 0; m < 3; m++) {
            gx[m] = dup_dev(hx, tn * 4);
            CK(cudaMalloc((void **)&gy[m], tn * 4));
            CK(cudaMalloc((void **)&gb[m], tn * 2));
            CK(cudaMalloc((void **)&gq[m], qn * 4));
            xs[m] = malloc(tn * 4); ys[m] = malloc(tn * 4); bs[m] = malloc(tn * 2); qs[m] = calloc(qn, 4);
        }
        for (int c = 0; c < 4; c++) { /* bit 0: plus_one, bit 1: the norm of d */
            const int po = c & 1, sand = c >> 1;
            for (int m = 0; m < 3; m++) { /* 0: the default (clusters), 1: one block a row, 2: the loop form */
                setting_override(SET_CUK_NORM_REG, m == 0 ? NULL : m == 1 ? "1" : "0");
                CK(cudaMemcpy(gx[m], hx, tn * 4, cudaMemcpyHostToDevice));
                CHECK(cuk_add_rmsnorm_bf16(gx[m], dd, sand ? ddw : NULL, dw, gy[m], T, n, 1e-6f, po, gb[m], NULL) == 0,
                      "add_rmsnorm n=%d: %s", n, err_msg());
                CK(cudaMemcpy(xs[m], gx[m], tn * 4, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(ys[m], gy[m], tn * 4, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(bs[m], gb[m], tn * 2, cudaMemcpyDeviceToHost));
                if (n % 64 == 0) { /* one row with its int8 pieces, from the same x */
                    CK(cudaMemcpy(gx[m], hx, (size_t)n * 4, cudaMemcpyHostToDevice));
                    CHECK(cuk_add_rmsnorm_q8x2(gx[m], dd, sand ? ddw : NULL, dw, gy[m], n, 1e-6f, po, gq[m], NULL) == 0,
                          "add_rmsnorm_q8x2 n=%d: %s", n, err_msg());
                    CK(cudaMemcpy(qs[m], gq[m], (size_t)(n / 64) * 36 * 4, cudaMemcpyDeviceToHost));
                    CK(cudaMemcpy(x, gy[m], (size_t)n * 4, cudaMemcpyDeviceToHost));
                    CHECK(memcmp(x, ys[m], (size_t)n * 4) == 0, "add_rmsnorm_q8x2 n=%d: y differs from add_rmsnorm's", n);
                }
            }
            setting_override(SET_CUK_NORM_REG, NULL);
            double worst = 0;
            for (int t = 0; t < T; t++) {
                const float *xr = hx + (size_t)t * n, *dr = hd + (size_t)t * n;
                double r = 1, ss = 0;
                if (sand) {
                    for (int i = 0; i < n; i++) ss += (double)dr[i] * dr[i];
                    r = 1 / sqrt(ss / n + 1e-6);
                }
                ss = 0;
                for (int i = 0; i < n; i++) {
                    const double a = sand ? dr[i] * r * (po ? 1 + hdw[i] : hdw[i]) : dr[i];
                    x[(size_t)t * n + i] = (float)(xr[i] + a);
                    worst = fmax(worst, fabs(xs[0][(size_t)t * n + i] - (xr[i] + a)) / (1 + fabs(xr[i] + a)));
                    ss += (xr[i] + a) * (xr[i] + a);
                }
                const double r2 = 1 / sqrt(ss / n + 1e-6);
                for (int i = 0; i < n; i++) {
                    const double want = x[(size_t)t * n + i] * r2 * (po ? 1 + hw[i] : hw[i]);
                    worst = fmax(worst, fabs(ys[0][(size_t)t * n + i] - want) / (1 + fabs(want)));
                }
            }
            CHECK(worst < 2e-5, "add_rmsnorm n=%d plus_one=%d sandwich=%d: max error %g", n, po, sand, worst);
            for (int m = 1; m < 3; m++) {
                CHECK(memcmp(xs[0], xs[m], tn * 4) == 0 && memcmp(ys[0], ys[m], tn * 4) == 0 &&
                          memcmp(bs[0], bs[m], tn * 2) == 0,
                      "add_rmsnorm n=%d plus_one=%d sandwich=%d: form %d differs from the default", n, po, sand, m);
                if (n % 64 == 0)
                    CHECK(memcmp(qs[0], qs[m], (size_t)(n / 64) * 36 * 4) == 0,
                          "add_rmsnorm_q8x2 n=%d plus_one=%d sandwich=%d: form %d's int8 pieces differ", n, po, sand, m);
            }
        }
        for (int m = 0; m < 3; m++) {
            cudaFree(gx[m]); cudaFree(gy[m]); cudaFree(gb[m]); cudaFree(gq[m]);
            free(xs[m]); free(ys[m]); free(bs[m]); free(qs[m]);
        }
        cudaFree(dd); cudaFree(dw); cudaFree(ddw);
        free(h); free(x);
    }
}

/* q/k norm + RoPE with the step's KV writes in the same kernel (what a recorded decode
 * step runs) against the two ops it replaces, cuk_qk_norm_rope then cuk_put_batch, bit
 * for bit: q, k, v, the cache rows of k and v and the rows' positions, for both cache
 * element types, with and without the heads' norm, a partly rotated head and no
 * rotation; a fourth row of the batch is padding (no destination, left alone). And
 * the same kernel reading a batched step's fused q|k|v rows (rows of ld values, wider
 * than q|k|v here) against cuk_split_cols before the two ops. */
static void rope_put(void) {
    const int T = 3, nh = 4, nkv = 2, hd = 64, dim = 48, row = nkv * hd, slots = 8;
    const int qn = T * nh * hd, kn = T * row, ld = nh * hd + 2 * row + 8;
    float *h = malloc((size_t)(qn + 2 * kn + 2 * hd + dim / 2) * 4);
    for (int i = 0; i < qn + 2 * kn + 2 * hd; i++) h[i] = 2 * frand();
    float *inv = h + qn + 2 * kn + 2 * hd;
    for (int i = 0; i < dim / 2; i++) inv[i] = powf(10000.f, -2.f * i / dim);
    const int32_t pos[3] = {5, 17, 1000};
    float *dinv = dup_dev(inv, dim / 2 * 4), *dqw = dup_dev(h + qn + 2 * kn, hd * 4), *dkw = dup_dev(h + qn + 2 * kn + hd, hd * 4);
    int32_t *dpos = dup_dev(pos, sizeof pos);
    float *fused = malloc((size_t)T * ld * 4), *dfused; /* row t: q_t | k_t | v_t | 8 unused */
    for (int t = 0; t < T; t++) {
        memcpy(fused + (size_t)t * ld, h + (size_t)t * nh * hd, (size_t)nh * hd * 4);
        memcpy(fused + (size_t)t * ld + nh * hd, h + qn + (size_t)t * row, (size_t)row * 4);
        memcpy(fused + (size_t)t * ld + nh * hd + row, h + qn + kn + (size_t)t * row, (size_t)row * 4);
        for (int i = 0; i < 8; i++) fused[(size_t)t * ld + nh * hd + 2 * row + i] = 1e30f;
    }
    dfused = dup_dev(fused, (size_t)T * ld * 4);
    for (int dt = 0; dt < 2; dt++) {
        const int es = dt ? 2 : 4;
        for (int c = 0; c < 3; c++) { /* 0: norm + partial rope, 1: rope only, 2: norm, no rotation */
            const rope_table rt = {.inv_freq = dinv, .dim = dim, .attn_factor = 1.25f};
            const rope_table *r = c == 2 ? NULL : &rt;
            const int norm = c != 1;
            float *q[3], *k[3], *v[3];
            char *kc[3], *vc[3], *hb[3][3];
            int32_t *pc[3];
            cuk_put_row *drows[3];
            for (int m = 0; m < 3; m++) { /* 0: the fused kernel, 1: the two ops, 2: the fused kernel from q|k|v rows */
                q[m] = dup_dev(h, qn * 4);
                k[m] = dup_dev(h + qn, kn * 4);
                v[m] = dup_dev(h + qn + kn, kn * 4);
                if (m == 2) { /* what the split would overwrite */
                    CK(cudaMemset(q[m], 0x7f, qn * 4));
                    CK(cudaMemset(k[m], 0x7f, kn * 4));
                    CK(cudaMemset(v[m], 0x7f, kn * 4));
                }
                CK(cudaMalloc((void **)&kc[m], (size_t)slots * row * es));
                CK(cudaMalloc((void **)&vc[m], (size_t)slots * row * es));
                CK(cudaMalloc((void **)&pc[m], slots * 4));
                CK(cudaMemset(kc[m], 0x7f, (size_t)slots * row * es));
                CK(cudaMemset(vc[m], 0x7f, (size_t)slots * row * es));
                CK(cudaMemset(pc[m], 0xff, slots * 4));
                cuk_put_row rows[4] = {{0}};
                const int slot[3] = {6, 0, 3};
                for (int t = 0; t < T; t++)
                    rows[t] = (cuk_put_row){kc[m] + (size_t)slot[t] * row * es, vc[m] + (size_t)slot[t] * row * es, pc[m] + slot[t],
                                            pos[t], 0};
                drows[m] = dup_dev(rows, sizeof rows);
                int rc;
                if (m == 0)
                    rc = cuk_qk_norm_rope_put(q[m], k[m], T, nh, nkv, hd, norm, dqw, dkw, 1e-6f, c == 2, dpos, r, drows[m], v[m], NULL,
                                              0, dt, NULL);
                else if (m == 2)
                    rc = cuk_qk_norm_rope_put(q[m], k[m], T, nh, nkv, hd, norm, dqw, dkw, 1e-6f, c == 2, dpos, r, drows[m], v[m], dfused,
                                              ld, dt, NULL);
                else
                    rc = cuk_qk_norm_rope(q[m], k[m], T, nh, nkv, hd, norm, dqw, dkw, 1e-6f, c == 2, dpos, r, NULL) ||
                         cuk_put_batch(drows[m], 4, row, k[m], v[m], dt, NULL);
                CHECK(rc == 0, "rope_put dtype %d case %d form %d: %s", dt, c, m, err_msg());
                CK(cudaDeviceSynchronize());
                hb[m][0] = malloc((size_t)(qn + 2 * kn) * 4);
                hb[m][1] = malloc((size_t)slots * row * es * 2);
                hb[m][2] = malloc(slots * 4);
                CK(cudaMemcpy(hb[m][0], q[m], qn * 4, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(hb[m][0] + qn * 4, k[m], kn * 4, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(hb[m][0] + (qn + kn) * 4, v[m], kn * 4, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(hb[m][1], kc[m], (size_t)slots * row * es, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(hb[m][1] + (size_t)slots * row * es, vc[m], (size_t)slots * row * es, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(hb[m][2], pc[m], slots * 4, cudaMemcpyDeviceToHost));
            }
            for (int m = 0; m < 3; m += 2) {
                CHECK(memcmp(hb[m][0], hb[1][0], (size_t)(qn + 2 * kn) * 4) == 0, "rope_put%s dtype %d case %d: q, k or v differs",
                      m ? " (q|k|v rows)" : "", dt, c);
                CHECK(memcmp(hb[m][1], hb[1][1], (size_t)slots * row * es * 2) == 0, "rope_put%s dtype %d case %d: cache rows differ",
                      m ? " (q|k|v rows)" : "", dt, c);
                CHECK(memcmp(hb[m][2], hb[1][2], slots * 4) == 0, "rope_put%s dtype %d case %d: positions differ",
                      m ? " (q|k|v rows)" : "", dt, c);
            }
            /* the rows were written at all: slot 6 holds row 0 (not the 0x7f fill), slot 1 nothing */
            const int32_t *pp = (const int32_t *)hb[0][2];
            CHECK(pp[6] == 5 && pp[0] == 17 && pp[3] == 1000 && pp[1] == -1, "rope_put dtype %d case %d: positions %d %d %d %d", dt, c,
                  pp[6], pp[0], pp[3], pp[1]);
            const unsigned char *kb = (const unsigned char *)hb[0][1];
            long fill = 0;
            for (long i = 0; i < (long)row * es; i++) fill += kb[(size_t)6 * row * es + i] == 0x7f;
            CHECK(fill < row * es / 4, "rope_put dtype %d case %d: slot 6 left unwritten", dt, c);
            for (int m = 0; m < 3; m++) {
                cudaFree(q[m]); cudaFree(k[m]); cudaFree(v[m]); cudaFree(kc[m]); cudaFree(vc[m]); cudaFree(pc[m]); cudaFree(drows[m]);
                for (int j = 0; j < 3; j++) free(hb[m][j]);
            }
        }
    }
    float *none = NULL;
    CHECK(cuk_qk_norm_rope_put(none, none, 1, 1, 1, 64, 0, NULL, NULL, 1e-6f, 0, dpos, NULL, NULL, NULL, NULL, 0, 0, NULL) != 0,
          "the fused kernel needs k, v and rows");
    CHECK(cuk_qk_norm_rope_put(dfused, dfused, 1, 2, 1, 64, 0, NULL, NULL, 1e-6f, 0, dpos, NULL, (const cuk_put_row *)dfused, dfused,
                               dfused, 3 * 64, 0, NULL) != 0, "q|k|v rows narrower than their heads are refused");
    cudaFree(dfused);
    free(fused);
    cudaFree(dinv); cudaFree(dqw); cudaFree(dkw); cudaFree(dpos);
    free(h);
}

static void ops(void) {
    const int T = 5, n = 1000;
    float *x = malloc(T * n * 4), *w = malloc(n * 4), *y = malloc(T * n * 4);
    for (int i = 0; i < T * n; i++) x[i] = frand() * 3;
    for (int i = 0; i < n; i++) w[i] = frand();
    float *dx = dup_dev(x, T * n * 4), *dw = dup_dev(w, n * 4), *dy;
    CK(cudaMalloc((void **)&dy, T * n * 4));
    for (int po = 0; po < 2; po++) {
        CHECK(cuk_rmsnorm(dx, dw, dy, T, n, 1e-6f, po, NULL) == 0, "rmsnorm");
        CK(cudaMemcpy(y, dy, T * n * 4, cudaMemcpyDeviceToHost));
        double worst = 0;
        for (int t = 0; t < T; t++) {
            double ss = 0;
            for (int i = 0; i < n; i++) ss += (double)x[t * n + i] * x[t * n + i];
            double r = 1 / sqrt(ss / n + 1e-6);
            for (int i = 0; i < n; i++) {
                double want = x[t * n + i] * r * (po ? 1 + w[i] : w[i]);
                worst = fmax(worst, fabs(y[t * n + i] - want));
            }
        }
        CHECK(worst < 1e-5, "rmsnorm plus_one=%d: max error %g", po, worst);
    }
    /* glu: silu and gelu_tanh */
    for (int act = 0; act < 2; act++) {
        CK(cudaMemcpy(dy, x, T * n * 4, cudaMemcpyHostToDevice));
        CHECK(cuk_glu(dy, n, dx, n, dy, T, n, act, NULL) == 0, "glu");
        CK(cudaMemcpy(y, dy, T * n * 4, cudaMemcpyDeviceToHost));
        double worst = 0;
        for (int i = 0; i < T * n; i++) {
            double v = x[i], a = act == 0 ? v / (1 + exp(-v)) : 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
            worst = fmax(worst, fabs(y[i] - a * x[i]));
        }
        CHECK(worst < 1e-4, "glu act %d: max error %g", act, worst);
        /* the fast precision's variant also writes bf16(g): the same bits as converting g */
        uint16_t *dgb, *gb = malloc((size_t)T * n * 2);
        CK(cudaMalloc((void **)&dgb, (size_t)T * n * 2));
        CK(cudaMemcpy(dy, x, T * n * 4, cudaMemcpyHostToDevice));
        CHECK(cuk_glu_bf16(dy, n, dx, n, dy, T, n, act, dgb, NULL) == 0, "glu_bf16");
        CK(cudaMemcpy(gb, dgb, (size_t)T * n * 2, cudaMemcpyDeviceToHost));
        float *y2 = malloc(T * n * 4);
        CK(cudaMemcpy(y2, dy, T * n * 4, cudaMemcpyDeviceToHost));
        long bad = 0;
        for (int i = 0; i < T * n; i++) bad += y2[i] != y[i] || gb[i] != f32_to_bf16(y[i]);
        CHECK(bad == 0, "glu_bf16 act %d: %ld values differ from glu and its bf16 rounding", act, bad);
        free(y2); free(gb); cudaFree(dgb);
    }
    /* glu over a fused gate|up product's rows [T, 2n] into y [T, n]; split_cols of
     * q|k|v rows [T, n + n/2 + n/2] (and a width off the float4 path) */
    {
        float *gu = malloc((size_t)T * 2 * n * 4), *yf = malloc((size_t)T * n * 4);
        for (int i = 0; i < T * 2 * n; i++) gu[i] = 3 * frand();
        float *dgu = dup_dev(gu, (size_t)T * 2 * n * 4);
        for (int act = 0; act < 2; act++) {
            CHECK(cuk_glu(dgu, 2L * n, dgu + n, 2L * n, dy, T, n, act, NULL) == 0, "fused glu");
            CK(cudaMemcpy(yf, dy, (size_t)T * n * 4, cudaMemcpyDeviceToHost));
            double worst = 0;
            for (int t = 0; t < T; t++)
                for (int i = 0; i < n; i++) {
                    const double v = gu[(long)t * 2 * n + i], u = gu[(long)t * 2 * n + n + i];
                    const double a = act == 0 ? v / (1 + exp(-v)) : 0.5 * v * (1 + tanh(0.7978845608028654 * (v + 0.044715 * v * v * v)));
                    worst = fmax(worst, fabs(yf[(long)t * n + i] - a * u) / (1 + fabs(a * u)));
                }
            CHECK(worst < 1e-5, "fused glu act %d: max error %g", act, worst);
        }
        for (int odd = 0; odd < 2; odd++) {
            const long n0 = n - odd, n1 = n / 2 + odd, n2 = n / 2, nn = n0 + n1 + n2;
            float *d0, *d1, *d2;
            CK(cudaMalloc((void **)&d0, (size_t)T * n0 * 4));
            CK(cudaMalloc((void **)&d1, (size_t)T * n1 * 4));
            CK(cudaMalloc((void **)&d2, (size_t)T * n2 * 4));
            CHECK(cuk_split_cols(dgu, T, n0, n1, n2, d0, d1, d2, NULL) == 0, "split_cols");
            float *h = malloc((size_t)T * nn * 4);
            CK(cudaMemcpy(h, d0, (size_t)T * n0 * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(h + (long)T * n0, d1, (size_t)T * n1 * 4, cudaMemcpyDeviceToHost));
            CK(cudaMemcpy(h + (long)T * (n0 + n1), d2, (size_t)T * n2 * 4, cudaMemcpyDeviceToHost));
            long bad = 0;
            for (int t = 0; t < T; t++) {
                for (long j = 0; j < n0; j++) bad += h[t * n0 + j] != gu[t * nn + j];
                for (long j = 0; j < n1; j++) bad += h[(long)T * n0 + t * n1 + j] != gu[t * nn + n0 + j];
                for (long j = 0; j < n2; j++) bad += h[(long)T * (n0 + n1) + t * n2 + j] != gu[t * nn + n0 + n1 + j];
            }
            CHECK(bad == 0, "split_cols (widths %ld %ld %ld): %ld values misplaced", n0, n1, n2, bad);
            free(h); cudaFree(d0); cudaFree(d1); cudaFree(d2);
        }
        free(gu); free(yf); cudaFree(dgu);
    }
    /* add_rmsnorm's bf16 variant: x and y as add_rmsnorm, ybf = bf16(y) bit for bit */
    {
        float *d2 = malloc(T * n * 4), *xa = malloc(T * n * 4), *xb = malloc(T * n * 4), *ya = malloc(T * n * 4);
        uint16_t *yb = malloc((size_t)T * n * 2), *dyb;
        for (int i = 0; i < T * n; i++) d2[i] = frand();
        float *dd = dup_dev(d2, T * n * 4), *dxa = dup_dev(x, T * n * 4), *dxb = dup_dev(x, T * n * 4), *dya;
        CK(cudaMalloc((void **)&dya, T * n * 4));
        CK(cudaMalloc((void **)&dyb, (size_t)T * n * 2));
        CHECK(cuk_add_rmsnorm(dxa, dd, dw, dw, dya, T, n, 1e-6f, 1, NULL) == 0, "add_rmsnorm");
        CK(cudaMemcpy(ya, dya, T * n * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(xa, dxa, T * n * 4, cudaMemcpyDeviceToHost));
        CHECK(cuk_add_rmsnorm_bf16(dxb, dd, dw, dw, dy, T, n, 1e-6f, 1, dyb, NULL) == 0, "add_rmsnorm_bf16");
        CK(cudaMemcpy(y, dy, T * n * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(xb, dxb, T * n * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(yb, dyb, (size_t)T * n * 2, cudaMemcpyDeviceToHost));
        long bad = 0;
        for (int i = 0; i < T * n; i++) bad += xa[i] != xb[i] || ya[i] != y[i] || yb[i] != f32_to_bf16(y[i]);
        CHECK(bad == 0, "add_rmsnorm_bf16: %ld values differ from add_rmsnorm and its bf16 rounding", bad);
        free(d2); free(xa); free(xb); free(ya); free(yb);
        cudaFree(dd); cudaFree(dxa); cudaFree(dxb); cudaFree(dya); cudaFree(dyb);
    }
    /* rope: head_dim 8, 3 heads, dim 6 rotated (partial), attn factor 1.5 */
    {
        enum { hd = 8, nh = 3, dim = 6, TT = 2 };
        float v[TT * nh * hd], inv[3] = {1.f, 0.1f, 0.01f};
        for (int i = 0; i < TT * nh * hd; i++) v[i] = frand();
        int32_t pos[TT] = {7, 12345};
        float *dv = dup_dev(v, sizeof v), *dinv = dup_dev(inv, sizeof inv);
        int32_t *dpos = dup_dev(pos, sizeof pos);
        const rope_table rt = {.inv_freq = dinv, .dim = dim, .attn_factor = 1.5f};
        CHECK(cuk_rope(dv, TT, nh, hd, dpos, &rt, NULL) == 0, "rope");
        float got[TT * nh * hd];
        CK(cudaMemcpy(got, dv, sizeof got, cudaMemcpyDeviceToHost));
        double worst = 0;
        for (int t = 0; t < TT; t++)
            for (int h = 0; h < nh; h++) {
                const float *o = v + (t * nh + h) * hd, *g = got + (t * nh + h) * hd;
                for (int i = 0; i < dim / 2; i++) {
                    double a = (double)(float)(pos[t] * inv[i]), c = cos(a) * 1.5, s = sin(a) * 1.5;
                    worst = fmax(worst, fabs(g[i] - (o[i] * c - o[i + 3] * s)));
                    worst = fmax(worst, fabs(g[i + 3] - (o[i + 3] * c + o[i] * s)));
                }
                for (int i = dim; i < hd; i++) worst = fmax(worst, fabs(g[i] - o[i]));
            }
        CHECK(worst < 2e-3, "rope: max error %g", worst);
        cudaFree(dv); cudaFree(dinv); cudaFree(dpos);
    }
    /* argmax with a tie: lowest index */
    {
        float v[3000];
        for (int i = 0; i < 3000; i++) v[i] = frand();
        v[2500] = 5; v[1700] = 5;
        float *dv = dup_dev(v, sizeof v);
        int32_t *di, got = -1;
        CK(cudaMalloc((void **)&di, 4));
        CHECK(cuk_argmax(dv, 3000, di, NULL) == 0, "argmax");
        CK(cudaMemcpy(&got, di, 4, cudaMemcpyDeviceToHost));
        CHECK(got == 1700, "argmax %d, want 1700", got);
        cudaFree(dv); cudaFree(di);
    }
    /* embedding rows of a q4 weight, scaled */
    {
        twin e = make_weight(WF_AFFINE, 50, 128, 4, 64, SC_BF16);
        int32_t tok[3] = {49, 0, 7};
        int32_t *dt = dup_dev(tok, sizeof tok);
        float *de, got[3 * 128], row[128];
        CK(cudaMalloc((void **)&de, sizeof got));
        CHECK(cuk_embed(&e.d, dt, 3, 2.f, de, NULL) == 0, "embed");
        CK(cudaMemcpy(got, de, sizeof got, cudaMemcpyDeviceToHost));
        double worst = 0;
        for (int t = 0; t < 3; t++) {
            weight_row_f32(&e.h, tok[t], row);
            for (int j = 0; j < 128; j++) worst = fmax(worst, fabs(got[t * 128 + j] - 2 * row[j]));
        }
        CHECK(worst < 1e-6, "embed: max error %g", worst);
        free_twin(&e); cudaFree(dt); cudaFree(de);
    }
    free(x); free(w); free(y); cudaFree(dx); cudaFree(dw); cudaFree(dy);
}

/* One query head's attention in double against got [hd]: keys at pool rows rows[0..n)
 * of k, v (row elements apart, channels from off), positions kp [pool row]; adds the
 * squared error and the squared reference to *num, *den. sink: the head's sink logit
 * or NULL. */
static void ref_head(const float *qh, const float *k, const float *v, const long *rows, const int32_t *kp, int n,
                     int32_t qp, long row, long off, int hd, float scale, int window, float softcap, const float *sink,
                     const float *got, double *num, double *den) {
    double *s = malloc((size_t)(n ? n : 1) * sizeof *s), m = sink ? *sink : -INFINITY;
    for (int j = 0; j < n; j++) {
        s[j] = -INFINITY;
        if (kp[rows[j]] > qp || (window > 0 && qp - kp[rows[j]] >= window)) continue;
        double d = 0;
        for (int c = 0; c < hd; c++) d += (double)qh[c] * k[rows[j] * row + off + c];
        d *= scale;
        if (softcap > 0) d = softcap * tanh(d / softcap);
        s[j] = d;
        if (d > m) m = d;
    }
    double l = sink ? exp(*sink - m) : 0;
    for (int j = 0; j < n; j++) if (s[j] > -INFINITY) l += exp(s[j] - m);
    for (int c = 0; c < hd; c++) {
        double a = 0;
        for (int j = 0; j < n; j++) if (s[j] > -INFINITY) a += exp(s[j] - m) * v[rows[j] * row + off + c];
        a = l > 0 ? a / l : 0;
        *num += (got[c] - a) * (got[c] - a);
        *den += a * a;
    }
    free(s);
}

/* bf16: the cache holds bf16 rows (the reference reads the same rounded values);
 * attention over it runs flash attention on the tensor cores (head dims 64-256),
 * which also rounds the queries and the softmax weights to bf16 (tolerance 1e-2) */
static void check_attention_t(int T, int n, int hd, int nh, int nkv, int window, float softcap, int sinks, int bf16) {
    long row = (long)nkv * hd;
    float *q = malloc((size_t)T * nh * hd * 4), *k = malloc((size_t)n * row * 4), *v = malloc((size_t)n * row * 4);
    float sk[64], *out = malloc((size_t)T * nh * hd * 4);
    int32_t *qp = malloc(T * 4), *kp = malloc(n * 4);
    for (long i = 0; i < (long)T * nh * hd; i++) q[i] = frand();
    for (long i = 0; i < n * row; i++) { k[i] = frand(); v[i] = frand(); }
    uint16_t *kb = malloc(n * row * 2), *vb = malloc(n * row * 2);
    for (long i = 0; i < n * row; i++) {
        kb[i] = f32_to_bf16(k[i]);
        vb[i] = f32_to_bf16(v[i]);
        if (bf16) { k[i] = bf16_to_f32(kb[i]); v[i] = bf16_to_f32(vb[i]); }
    }
    for (int i = 0; i < 64; i++) sk[i] = frand();
    /* keys in ring order: positions rotated so the mask must use pos[], not the index */
    for (int j = 0; j < n; j++) kp[j] = (j + n / 3) % n;
    for (int t = 0; t < T; t++) qp[t] = n - T + t;
    attn_params p = {nh, nkv, hd, 1.f / sqrtf((float)hd), window, softcap, NULL};
    float *dq = dup_dev(q, (size_t)T * nh * hd * 4);
    void *dk = bf16 ? dup_dev(kb, n * row * 2) : dup_dev(k, n * row * 4), *dv = bf16 ? dup_dev(vb, n * row * 2) : dup_dev(v, n * row * 4);
    float *dsk = dup_dev(sk, sizeof sk), *dout, *work;
    int32_t *dqp = dup_dev(qp, T * 4), *dkp = dup_dev(kp, n * 4);
    CK(cudaMalloc((void **)&dout, (size_t)T * nh * hd * 4));
    CK(cudaMalloc((void **)&work, cuk_attention_work(T, nh, hd, n) * 4));
    if (sinks) p.sinks = dsk;
    attn_kv kv = {dk, dv, dkp, n, row, bf16 ? KVT_BF16 : KVT_F32, 0, NULL};
    CHECK(cuk_attention(dq, dqp, T, &kv, NULL, &p, dout, work, NULL) == 0, "attention: %s", err_msg());
    CK(cudaMemcpy(out, dout, (size_t)T * nh * hd * 4, cudaMemcpyDeviceToHost));
    double num = 0, den = 0;
    long *rows = malloc((size_t)n * sizeof *rows);
    for (int j = 0; j < n; j++) rows[j] = j;
    for (int t = 0; t < T; t++)
        for (int h = 0; h < nh; h++)
            ref_head(q + ((long)t * nh + h) * hd, k, v, rows, kp, n, qp[t], row, (long)(h / (nh / nkv)) * hd, hd, p.scale,
                     window, softcap, sinks ? &sk[h] : NULL, out + ((long)t * nh + h) * hd, &num, &den);
    free(rows);
    double e = sqrt(num / den), tol = bf16 ? 1e-2 : 1e-4;
    CHECK(e < tol, "attention T=%d n=%d hd=%d window=%d softcap=%g sinks=%d%s: relative error %g (tolerance %g)", T, n, hd,
          window, softcap, sinks, bf16 ? " bf16 cache" : "", e, tol);
    free(kb); free(vb);
    free(q); free(k); free(v); free(out); free(qp); free(kp);
    cudaFree(dq); cudaFree(dk); cudaFree(dv); cudaFree(dsk); cudaFree(dout); cudaFree(work); cudaFree(dqp); cudaFree(dkp);
}

static void check_attention(int T, int n, int hd, int nh, int nkv, int window, float softcap, int sinks) {
    check_attention_t(T, n, hd, nh, nkv, window, softcap, sinks, 0);
    check_attention_t(T, n, hd, nh, nkv, window, softcap, sinks, 1);
}

static void attention(void) {
    check_attention(1, 1, 64, 4, 2, 0, 0, 0);
    check_attention(1, 700, 128, 8, 2, 0, 0, 0);
    check_attention(7, 300, 64, 8, 8, 0, 0, 1);
    check_attention(3, 2000, 256, 4, 1, 100, 50.f, 0);
    check_attention(33, 33, 512, 2, 1, 16, 0, 1);
    /* prefill shapes (the tiled kernel): GQA groups of 4, 7 and 1, windows, softcap,
     * sinks, a query tile that ends mid-group, keys not a multiple of the tile */
    check_attention(64, 300, 128, 32, 8, 0, 0, 0);
    check_attention(100, 100, 256, 8, 4, 16, 50.f, 1);
    check_attention(50, 83, 64, 14, 2, 0, 0, 1);
    check_attention(9, 9, 32, 4, 4, 0, 0, 0);
    check_attention(37, 200, 96, 6, 6, 20, 0, 0);
    check_attention(20, 45, 192, 4, 2, 0, 30.f, 0);
    check_attention(40, 130, 512, 8, 1, 0, 0, 1);
    /* wide heads take the tiled kernel past 1024 keys */
    check_attention(40, 1100, 256, 8, 4, 0, 20.f, 1);
    check_attention(24, 1500, 512, 4, 1, 700, 0, 0);
    check_attention(30, 1030, 192, 6, 2, 0, 0, 0);
    check_attention(1, 20000, 128, 4, 4, 0, 0, 0);
    /* flash attention (bf16 cache): a chunk appended to a long context, GQA 4, rows
     * and keys off the 64 tiles; head dims 64-256; from here one query over a short
     * cache too (above, bf16 caches of at most CUK_ATTN_MMA_MIN_KEYS keys took the
     * CUDA-core kernel for one query); decode rows through the 64-row tile first
     * (CUK_FLASH_DECODE's default sends them to the lean kernel below) */
    setting_override(SET_CUK_ATTN_MMA_MIN_KEYS, "0");
    cuk_flash_decode_set(0);
    check_attention_t(1, 700, 128, 8, 2, 0, 0, 0, 1);
    check_attention_t(1, 1, 64, 4, 2, 0, 0, 1, 1);
    check_attention(130, 1500, 128, 32, 8, 0, 0, 0);
    check_attention(77, 77, 64, 16, 2, 0, 0, 1);
    check_attention(65, 600, 256, 8, 2, 100, 30.f, 1);
    /* the lean flash-decoding kernel (cuk_flash_decode_set(1), the default): rows that fit one 16-row tile
     * (T x G <= 16), each head dim, one split and many (20,000 keys: two passes per
     * warp), windows, softcap, sinks, keys off the 32-key warp slices */
    cuk_flash_decode_set(1);
    check_attention_t(1, 1, 64, 4, 2, 0, 0, 0, 1);
    check_attention_t(1, 700, 128, 8, 2, 0, 0, 0, 1);
    check_attention_t(7, 300, 64, 8, 8, 0, 0, 1, 1);
    check_attention_t(3, 2000, 256, 4, 1, 100, 50.f, 0, 1);
    check_attention_t(1, 20000, 128, 4, 4, 0, 0, 0, 1);
    check_attention_t(2, 4096, 96, 16, 2, 0, 0, 0, 1);
    check_attention_t(1, 333, 192, 12, 4, 0, 20.f, 1, 1);
    cuk_flash_decode_set(-1); /* back to CUK_FLASH_DECODE */
    setting_override(SET_CUK_ATTN_MMA_MIN_KEYS, NULL);
}

/* The batched decode kernel (cuk_attention_batch): NS sequences of lengths len[i]
 * (0: a padding row, whose output must be zero), one query each, paged (64-row blocks
 * in shuffled order) or contiguous, keys in ring order, float32 or bf16 rows. With
 * batch_mma, bf16 rows of head dims 64-256 take the lean flash-decoding tile on the
 * tensor cores (queries and weights rounded to bf16: flash attention's tolerance). */
static int batch_mma;

static void check_attention_batch(int NS, const int *len, int hd, int nh, int nkv, int window, float softcap, int sinks,
                                  int bf16, int paged) {
    const long row = (long)nkv * hd;
    const size_t es = bf16 ? 2 : 4;
    int total = 0, maxn = 0;
    for (int i = 0; i < NS; i++) total += (len[i] + 63) / 64 * 64, maxn = len[i] > maxn ? len[i] : maxn;
    const int nb = total / 64;
    float *q = malloc((size_t)NS * nh * hd * 4), *k = malloc((size_t)total * row * 4), *v = malloc((size_t)total * row * 4);
    float sk[64], *out = malloc((size_t)NS * nh * hd * 4);
    uint16_t *kb = malloc((size_t)total * row * 2), *vb = malloc((size_t)total * row * 2);
    int32_t *kp = malloc((size_t)total * 4), qp[64], *tab = malloc((size_t)(nb ? nb : 1) * 4);
    long *rows = malloc((size_t)total * sizeof *rows); /* view row -> pool row, sequence after sequence */
    for (long i = 0; i < (long)NS * nh * hd; i++) q[i] = frand();
    for (long i = 0; i < (long)total * row; i++) {
        k[i] = frand(), v[i] = frand();
        kb[i] = f32_to_bf16(k[i]), vb[i] = f32_to_bf16(v[i]);
        if (bf16) k[i] = bf16_to_f32(kb[i]), v[i] = bf16_to_f32(vb[i]);
    }
    for (int i = 0; i < 64; i++) sk[i] = frand();
    for (int b = 0; b < nb; b++) tab[b] = b;
    for (int b = nb - 1; b > 0; b--) { /* shuffled: a sequence's blocks are scattered over the pool */
        const int c = (int)(urand() % (uint32_t)(b + 1)), t = tab[b];
        tab[b] = tab[c], tab[c] = t;
    }
    for (int i = 0, base = 0; i < NS; base += (len[i++] + 63) / 64 * 64)
        for (int j = 0; j < len[i]; j++) {
            rows[base + j] = paged ? (long)tab[base / 64 + j / 64] * 64 + j % 64 : base + j;
            kp[rows[base + j]] = (j + len[i] / 3) % len[i]; /* ring order */
        }
    void *dk = bf16 ? dup_dev(kb, (size_t)total * row * 2) : dup_dev(k, (size_t)total * row * 4);
    void *dv = bf16 ? dup_dev(vb, (size_t)total * row * 2) : dup_dev(v, (size_t)total * row * 4);
    int32_t *dtab = dup_dev(tab, (size_t)nb * 4), *dkp = dup_dev(kp, (size_t)total * 4);
    cuk_attn_seq sd[64];
    memset(sd, 0, sizeof sd);
    for (int i = 0, base = 0; i < NS; base += (len[i++] + 63) / 64 * 64) {
        qp[i] = len[i] - 1 + (i % 2); /* the newest key, or one past it */
        if (len[i] == 0) continue;
        const long at = paged ? 0 : base; /* a contiguous view starts at its rows; a paged one at the pool */
        sd[i].k = (char *)dk + at * row * es;
        sd[i].v = (char *)dv + at * row * es;
        sd[i].pos = dkp + at;
        sd[i].n = len[i];
        sd[i].stride = row;
        sd[i].blocks = paged ? dtab + base / 64 : NULL;
    }
    attn_params p = {nh, nkv, hd, 1.f / sqrtf((float)hd), window, softcap, NULL};
    float *dq = dup_dev(q, (size_t)NS * nh * hd * 4), *dsk = dup_dev(sk, sizeof sk), *dout, *work;
    int32_t *dqp = dup_dev(qp, (size_t)NS * 4);
    cuk_attn_seq *dsd = dup_dev(sd, (size_t)NS * sizeof *sd);
    if (sinks) p.sinks = dsk;
    const int mk = cuk_attention_batch_bucket(maxn);
    CK(cudaMalloc((void **)&dout, (size_t)NS * nh * hd * 4));
    CK(cudaMalloc((void **)&work, cuk_attention_batch_work(NS, nh, hd, mk) * 4 + 4));
    CK(cudaMemset(dout, 0xff, (size_t)NS * nh * hd * 4));
    CHECK(cuk_attention_batch(dq, dqp, NS, dsd, mk, &p, bf16 ? KVT_BF16 : KVT_F32, dout, work, NULL) == 0, "%s", err_msg());
    CK(cudaMemcpy(out, dout, (size_t)NS * nh * hd * 4, cudaMemcpyDeviceToHost));
    if (cuk_attention_batch_stages(dq, mk, &p, bf16 ? KVT_BF16 : KVT_F32)) {
        /* the variant that stages the output for the o product: the same output, and
         * its bf16 copy as cuk_f32_to_bf16 rounds it */
        const size_t no = (size_t)NS * nh * hd;
        float *dout2, *out2 = malloc(no * 4);
        uint16_t *dyb, *yb = malloc(no * 2), *yref = malloc(no * 2);
        CK(cudaMalloc((void **)&dout2, no * 4));
        CK(cudaMalloc((void **)&dyb, no * 2));
        CK(cudaMemset(dyb, 0xff, no * 2));
        CHECK(cuk_attention_batch_bf16(dq, dqp, NS, dsd, mk, &p, KVT_BF16, dout2, work, dyb, NULL) == 0, "%s", err_msg());
        CK(cudaMemcpy(out2, dout2, no * 4, cudaMemcpyDeviceToHost));
        CK(cudaMemcpy(yb, dyb, no * 2, cudaMemcpyDeviceToHost));
        CHECK(cuk_f32_to_bf16(dout2, dyb, (long)no, NULL) == 0, "%s", err_msg());
        CK(cudaMemcpy(yref, dyb, no * 2, cudaMemcpyDeviceToHost));
        CHECK(memcmp(out, out2, no * 4) == 0 && memcmp(yb, yref, no * 2) == 0,
              "batched attention of %d rows hd=%d: the staging variant's output or its bf16 copy differs", NS, hd);
        cudaFree(dout2); cudaFree(dyb);
        free(out2); free(yb); free(yref);
    } else {
        CHECK(cuk_attention_batch_bf16(dq, dqp, NS, dsd, mk, &p, bf16 ? KVT_BF16 : KVT_F32, dout, work, NULL, NULL) == 1,
              "the staging variant declines what it does not cover");
    }
    double num = 0, den = 0, pad = 0;
    for (int i = 0, base = 0; i < NS; base += (len[i++] + 63) / 64 * 64)
        for (int h = 0; h < nh; h++) {
            const float *got = out + ((long)i * nh + h) * hd;
            if (len[i] == 0)
                for (int c = 0; c < hd; c++) pad += fabs(got[c]);
            else
                ref_head(q + ((long)i * nh + h) * hd, k, v, rows + base, kp, len[i], qp[i], row, (long)(h / (nh / nkv)) * hd,
                         hd, p.scale, window, softcap, sinks ? &sk[h] : NULL, got, &num, &den);
        }
    const double e = sqrt(num / (den > 0 ? den : 1));
    const double tol = batch_mma && bf16 && hd >= 64 && hd <= 256 ? 1e-2 : 1e-5;
    CHECK(e < tol && pad == 0, "batched attention of %d rows hd=%d G=%d window=%d softcap=%g sinks=%d%s%s%s: "
          "relative error %g (tolerance %g), padding rows' sum %g", NS, hd, nh / nkv, window, softcap, sinks,
          bf16 ? " bf16" : "", paged ? " paged" : "", batch_mma ? " (tensor cores)" : "", e, tol, pad);
    free(q); free(k); free(v); free(out); free(kb); free(vb); free(kp); free(tab); free(rows);
    cudaFree(dk); cudaFree(dv); cudaFree(dtab); cudaFree(dkp); cudaFree(dq); cudaFree(dsk); cudaFree(dout);
    cudaFree(work); cudaFree(dqp); cudaFree(dsd);
}

static void attention_batch(void) {
    const int a[5] = {1, 70, 0, 300, 33}, b[3] = {600, 2, 129}, c[2] = {1000, 64};
    /* the CUDA-core kernel at every key bound; then bf16 rows on the tensor cores at every bound */
    for (batch_mma = 0; batch_mma <= 1; batch_mma++) {
        setting_override(SET_CUK_ATTN_BATCH_MMA_MIN_KEYS, batch_mma ? "-1" : "1000000");
        for (int bf = 0; bf <= 1; bf++)
            for (int pg = 0; pg <= 1; pg++) {
                check_attention_batch(5, a, 128, 32, 8, 0, 0, 0, bf, pg);     /* llama3-8b's heads, mixed lengths, splits */
                check_attention_batch(3, b, 64, 64, 8, 0, 0, 1, bf, pg);      /* gpt-oss: G 8, sinks */
                check_attention_batch(3, b, 256, 8, 4, 100, 50.f, 0, bf, pg); /* gemma: window, softcap */
                check_attention_batch(2, c, 512, 4, 1, 0, 0, 1, bf, pg);      /* wide heads */
                check_attention_batch(5, a, 96, 6, 6, 20, 0, 0, bf, pg);      /* no GQA, 96 */
                check_attention_batch(2, c, 32, 4, 2, 0, 0, 0, bf, pg);
            }
        const int d[8] = {130, 0, 1, 513, 64, 65, 4000, 7}; /* more rows; 1-16 splits; G 16 */
        check_attention_batch(8, d, 128, 32, 8, 0, 0, 0, 1, 1);
        check_attention_batch(8, d, 64, 32, 2, 0, 0, 1, 1, 1);
        check_attention_batch(8, d, 192, 8, 2, 300, 30.f, 1, 1, 0);
    }
    batch_mma = 0;
    setting_override(SET_CUK_ATTN_BATCH_MMA_MIN_KEYS, NULL);
}

/* ---- benchmark: decode matvec bandwidth beside a device-to-device copy ---- */

static float time_ms(cudaEvent_t a, cudaEvent_t b) {
    float ms;
    CK(cudaEventElapsedTime(&ms, a, b));
    return ms;
}

static int cmpf(const void *a, const void *b) { float x = *(const float *)a, y = *(const float *)b; return (x > y) - (x < y); }

static void bench(void) {
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    size_t nb = (size_t)2 << 30;
    void *a, *b;
    CK(cudaMalloc(&a, nb));
    CK(cudaMalloc(&b, nb));
    CK(cudaMemset(a, 1, nb));
    float ts[20];
    for (int i = 0; i < 23; i++) {
        CK(cudaEventRecord(e0, 0));
        CK(cudaMemcpyAsync(b, a, nb, cudaMemcpyDeviceToDevice, 0));
        CK(cudaEventRecord(e1, 0));
        CK(cudaEventSynchronize(e1));
        if (i >= 3) ts[i - 3] = time_ms(e0, e1);
    }
    qsort(ts, 20, sizeof *ts, cmpf);
    double copy_gbs = 2.0 * nb / (ts[10] * 1e-3) / 1e9;
    printf("\nbench: device-to-device copy (read + write) %.0f GB/s (median of 20, %zu MiB)\n", copy_gbs, nb >> 20);
    cudaFree(a);
    cudaFree(b);
    struct { const char *name; weight_fmt f; long rows, cols; int bits, group; } shapes[] = {
        {"bf16 q/o 4096x4096", WF_BF16, 4096, 4096, 0, 0},       {"bf16 gate 14336x4096", WF_BF16, 14336, 4096, 0, 0},
        {"bf16 down 4096x14336", WF_BF16, 4096, 14336, 0, 0},    {"bf16 head 128256x4096", WF_BF16, 128256, 4096, 0, 0},
        {"q4g64 gate 14336x4096", WF_AFFINE, 14336, 4096, 4, 64}, {"q4g64 down 4096x14336", WF_AFFINE, 4096, 14336, 4, 64},
        {"q4g64 head 128256x4096", WF_AFFINE, 128256, 4096, 4, 64}, {"q8g64 gate 14336x4096", WF_AFFINE, 14336, 4096, 8, 64},
    };
    printf("| weight | T | bytes | median us | GB/s | %% of copy |\n|---|---:|---:|---:|---:|---:|\n");
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        /* four copies so the set exceeds the 60 MB L2 and each call reads DRAM */
        twin w[4];
        for (int c = 0; c < 4; c++) w[c] = make_weight(shapes[s].f, shapes[s].rows, shapes[s].cols, shapes[s].bits, shapes[s].group, SC_BF16);
        float *dx, *dy;
        CK(cudaMalloc((void **)&dx, 8 * shapes[s].cols * 4));
        CK(cudaMalloc((void **)&dy, 8 * shapes[s].rows * 4));
        {
            float *hx = malloc(8 * shapes[s].cols * 4);
            for (long i = 0; i < 8 * shapes[s].cols; i++) hx[i] = frand();
            CK(cudaMemcpy(dx, hx, 8 * shapes[s].cols * 4, cudaMemcpyHostToDevice));
            free(hx);
        }
        void *work;
        CK(cudaMalloc(&work, cuk_matvec_work(8, shapes[s].cols)));
        /* T = 1 twice: exact, then fast (4-bit: two-term int8 activations, their quantizing launch included) */
        const int Tb[] = {1, 1, 4};
        for (int k = 0; k < 3; k++) {
            if (k == 1 && !(shapes[s].f == WF_AFFINE && shapes[s].bits == 4)) continue;
            float tt[40];
            for (int i = 0; i < 44; i++) {
                CK(cudaEventRecord(e0, 0));
                cuk_matvec(&w[i % 4].d, dx, dy, Tb[k], work, k == 1, NULL);
                CK(cudaEventRecord(e1, 0));
                CK(cudaEventSynchronize(e1));
                if (i >= 4) tt[i - 4] = time_ms(e0, e1);
            }
            qsort(tt, 40, sizeof *tt, cmpf);
            double gbs = w[0].h.nbytes / (tt[20] * 1e-3) / 1e9;
            printf("| %s%s | %d | %zu | %.1f | %.0f | %.0f%% |\n", shapes[s].name, k == 1 ? " fast" : "", Tb[k], w[0].h.nbytes, tt[20] * 1e3, gbs,
                   100 * gbs / copy_gbs);
        }
        for (int c = 0; c < 4; c++) free_twin(&w[c]);
        cudaFree(work);
        cudaFree(dx);
        cudaFree(dy);
    }
    /* decode products of a batch: matvec (T <= 8), cuBLAS (x staged to bf16 first, as the
     * fast path runs it) and the tensor-core decode kernel, fast and exact */
    printf("\n| bf16 weight | T | matvec GB/s | cuBLAS fast GB/s | skinny fast, 1 chunk ahead | 2 ahead | 3 ahead | "
           "exact, 2 ahead |\n|---|---:|---:|---:|---:|---:|---:|---:|\n");
    for (size_t s = 0; s < 4; s++) {
        twin w[4];
        for (int c = 0; c < 4; c++) w[c] = make_weight(WF_BF16, shapes[s].rows, shapes[s].cols, 0, 0, SC_BF16);
        const long cols = shapes[s].cols, rows = shapes[s].rows;
        float *dx, *dy;
        uint16_t *xbf;
        void *work;
        CK(cudaMalloc((void **)&dx, 32 * cols * 4));
        CK(cudaMalloc((void **)&dy, 32 * rows * 4));
        CK(cudaMalloc((void **)&xbf, cuk_gemm_xbf_elems(32, cols) * 2));
        CK(cudaMalloc(&work, cuk_matvec_work(8, cols)));
        {
            float *hx = malloc(32 * cols * 4);
            for (long i = 0; i < 32 * cols; i++) hx[i] = frand();
            CK(cudaMemcpy(dx, hx, 32 * cols * 4, cudaMemcpyHostToDevice));
            free(hx);
        }
        const int Tb[] = {1, 2, 4, 8, 16, 32};
        for (int k = 0; k < 6; k++) {
            const int T = Tb[k];
            double gbs[6] = {0, 0, 0, 0, 0, 0};
            for (int m = 0; m < 6; m++) {
                if (m == 0 && T > CUK_MV_MAX_T) continue;
                float tt[40];
                for (int i = 0; i < 44; i++) {
                    const weight *wd = &w[i % 4].d;
                    CK(cudaEventRecord(e0, 0));
                    if (m == 0) cuk_matvec(wd, dx, dy, T, work, 1, NULL);
                    else if (m == 1) cuk_gemm(cublas, wd, dx, dy, T, xbf, NULL, 0, 1, NULL);
                    else {
                        cuk_skinny_set_cfg(m == 5 ? 2 : m - 1);
                        cuk_skinny(wd, dx, dy, T, xbf, m <= 4 ? 1 : 0, NULL);
                    }
                    CK(cudaEventRecord(e1, 0));
                    CK(cudaEventSynchronize(e1));
                    if (i >= 4) tt[i - 4] = time_ms(e0, e1);
                }
                qsort(tt, 40, sizeof *tt, cmpf);
                gbs[m] = w[0].h.nbytes / (tt[20] * 1e-3) / 1e9;
            }
            char mv[16] = "-";
            if (gbs[0] > 0) snprintf(mv, sizeof mv, "%.0f", gbs[0]);
            printf("| %s | %d | %s | %.0f | %.0f (%.0f%%) | %.0f (%.0f%%) | %.0f (%.0f%%) | %.0f |\n", shapes[s].name, T, mv,
                   gbs[1], gbs[2], 100 * gbs[2] / copy_gbs, gbs[3], 100 * gbs[3] / copy_gbs, gbs[4], 100 * gbs[4] / copy_gbs,
                   gbs[5]);
            cuk_skinny_set_cfg(0);
        }
        for (int c = 0; c < 4; c++) free_twin(&w[c]);
        cudaFree(dx); cudaFree(dy); cudaFree(xbf); cudaFree(work);
    }
    /* prefill GEMM 512 x 4096 x 14336 bf16 */
    {
        twin w = make_weight(WF_BF16, 14336, 4096, 0, 0, SC_BF16);
        float *dx, *dy;
        uint16_t *xbf;
        CK(cudaMalloc((void **)&dx, 512L * 4096 * 4));
        CK(cudaMalloc((void **)&dy, 512L * 14336 * 4));
        CK(cudaMalloc((void **)&xbf, cuk_gemm_xbf_elems(512, 4096) * 2));
        {
            float *hx = malloc(512L * 4096 * 4);
            for (long i = 0; i < 512L * 4096; i++) hx[i] = frand();
            CK(cudaMemcpy(dx, hx, 512L * 4096 * 4, cudaMemcpyHostToDevice));
            free(hx);
        }
        float tt[20];
        for (int i = 0; i < 23; i++) {
            CK(cudaEventRecord(e0, 0));
            cuk_gemm(cublas, &w.d, dx, dy, 512, xbf, NULL, 0, 0, NULL);
            CK(cudaEventRecord(e1, 0));
            CK(cudaEventSynchronize(e1));
            if (i >= 3) tt[i - 3] = time_ms(e0, e1);
        }
        qsort(tt, 20, sizeof *tt, cmpf);
        printf("gemm bf16 512x4096x14336 (incl. x->bf16): %.1f us, %.0f TFLOP/s\n", tt[10] * 1e3,
               2.0 * 512 * 4096 * 14336 / (tt[10] * 1e-3) / 1e12);
        /* the product alone, float32 and bf16 output: what cuBLAS gives this shape */
        for (int ot = 0; ot < 2; ot++) {
            const float one = 1.f, zero = 0.f;
            for (int i = 0; i < 23; i++) {
                CK(cudaEventRecord(e0, 0));
                cublasGemmEx(cublas, CUBLAS_OP_T, CUBLAS_OP_N, 14336, 512, 4096, &one, w.d.data, CUDA_R_16BF, 4096, xbf,
                             CUDA_R_16BF, 4096, &zero, dy, ot ? CUDA_R_16BF : CUDA_R_32F, 14336, CUBLAS_COMPUTE_32F,
                             CUBLAS_GEMM_DEFAULT);
                CK(cudaEventRecord(e1, 0));
                CK(cudaEventSynchronize(e1));
                if (i >= 3) tt[i - 3] = time_ms(e0, e1);
            }
            qsort(tt, 20, sizeof *tt, cmpf);
            printf("cublasGemmEx bf16 512x4096x14336, %s output: %.1f us, %.0f TFLOP/s\n", ot ? "bf16" : "f32", tt[10] * 1e3,
                   2.0 * 512 * 4096 * 14336 / (tt[10] * 1e-3) / 1e12);
        }
        free_twin(&w); cudaFree(dx); cudaFree(dy); cudaFree(xbf);
    }
    /* prefill attention, llama3-8b's shape: 512 queries after `depth` cached keys,
     * f32 cache (tiled CUDA-core kernel), bf16 cache with the tensor cores off, and
     * flash attention on the tensor cores */
    const int cfgs[3][2] = {{512, 0}, {512, 4096}, {1, 4096}}; /* T, depth */
    for (int ci = 0; ci < 3; ci++) {
        const int T = cfgs[ci][0], depth = cfgs[ci][1], n = depth + T, nh = 32, nkv = 8, hd = 128;
        const long row = (long)nkv * hd;
        float *dq, *dout, *dk32, *dv32, *work;
        CK(cudaMalloc((void **)&work, cuk_attention_work(T, nh, hd, n) * 4));
        uint16_t *dk16, *dv16;
        int32_t *dqp, *dkp;
        CK(cudaMalloc((void **)&dq, (size_t)T * nh * hd * 4));
        CK(cudaMalloc((void **)&dout, (size_t)T * nh * hd * 4));
        CK(cudaMalloc((void **)&dk32, (size_t)n * row * 4));
        CK(cudaMalloc((void **)&dv32, (size_t)n * row * 4));
        CK(cudaMalloc((void **)&dk16, (size_t)n * row * 2));
        CK(cudaMalloc((void **)&dv16, (size_t)n * row * 2));
        CK(cudaMemset(dk32, 0, (size_t)n * row * 4));
        CK(cudaMemset(dv32, 0, (size_t)n * row * 4));
        CK(cudaMemset(dk16, 0, (size_t)n * row * 2));
        CK(cudaMemset(dv16, 0, (size_t)n * row * 2));
        CK(cudaMemset(dq, 0, (size_t)T * nh * hd * 4));
        int32_t *hp = malloc((size_t)n * 4);
        for (int j = 0; j < n; j++) hp[j] = j;
        dkp = dup_dev(hp, (size_t)n * 4);
        dqp = dup_dev(hp + depth, (size_t)T * 4);
        free(hp);
        attn_params p = {nh, nkv, hd, 0.088f, 0, 0, NULL};
        const char *names[3] = {"f32 cache, CUDA cores", "bf16 cache, CUDA cores", "bf16 cache, flash (tensor cores)"};
        for (int mode = 0; mode < 3; mode++) {
            attn_kv kv = {mode ? (void *)dk16 : (void *)dk32, mode ? (void *)dv16 : (void *)dv32, dkp, n, row,
                          mode ? KVT_BF16 : KVT_F32, 0, NULL};
            setting_override(SET_CUK_ATTN_NO_MMA, mode == 1 ? "1" : "0");
            float tt[10];
            for (int i = 0; i < 12; i++) {
                CK(cudaEventRecord(e0, 0));
                cuk_attention(dq, dqp, T, &kv, NULL, &p, dout, work, NULL);
                CK(cudaEventRecord(e1, 0));
                CK(cudaEventSynchronize(e1));
                if (i >= 2) tt[i - 2] = time_ms(e0, e1);
            }
            qsort(tt, 10, sizeof *tt, cmpf);
            /* causal: query t sees depth + t + 1 keys; 4 flops per (query, key, channel, head) */
            const double fl = 4.0 * nh * hd * ((double)T * depth + (double)T * (T + 1) / 2);
            const double kvb = 2.0 * n * row * (mode ? 2 : 4); /* bytes of K and V read once */
            printf("attention T=%d after %d keys, %s: %.1f us, %.0f TFLOP/s, %.0f GB/s of KV\n", T, depth, names[mode],
                   tt[5] * 1e3, fl / (tt[5] * 1e-3) / 1e12, kvb / (tt[5] * 1e-3) / 1e9);
        }
        setting_override(SET_CUK_ATTN_NO_MMA, NULL);
        cudaFree(dq); cudaFree(dout); cudaFree(dk32); cudaFree(dv32); cudaFree(dk16); cudaFree(dv16); cudaFree(dqp); cudaFree(dkp);
        cudaFree(work);
    }
}

/* The launch-order mask reaches every .cu file's copy (each has its own without
 * relocatable device code): the four files with small decode kernels at least, all
 * reading the mask set last; a mask out of range is refused. */
static void launch_order(void) {
    int m[32];
    for (int mask = 21; mask >= 0; mask -= 21) {
        CHECK(cuk_set_late(mask, NULL) == 0, "cuk_set_late(%d): %s", mask, err_msg());
        CK(cudaDeviceSynchronize());
        const int n = cuk_late_files(m, 32);
        CHECK(n >= 4 && n <= 32, "%d files registered a launch-order mask", n);
        int wrong = 0;
        for (int i = 0; i < n && i < 32; i++) wrong += m[i] != mask;
        CHECK(wrong == 0, "%d of %d files read a mask other than %d", wrong, n, mask);
    }
    CHECK(cuk_set_late(64, NULL) != 0 && strstr(err_msg(), "outside 0..63"), "mask 64 accepted: %s", err_msg());
}

int main(int argc, char **argv) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("no CUDA device: nothing to test here\n");
        return harness_done();
    }
    if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) { printf("cublasCreate failed\n"); return 1; }
    /* the two-term int8 one-row kernel on every shape it takes, small products included
     * (by default only 4,096+ rows of 2,048+ columns) */
    setting_override(SET_CUK_MV_I8X2, "2");
    if (!(argc > 1 && strcmp(argv[1], "--bench-only") == 0)) {
        RUN(launch_order);
        RUN(matmul_formats);
        RUN(skinny);
        RUN(ops);
        RUN(add_rmsnorm_widths);
        RUN(rope_put);
        RUN(matvec_glu);
        RUN(q8x2_staging);
        RUN(attention);
        RUN(attention_batch);
    }
    if (argc > 1 && strcmp(argv[1], "--bench") == 0) bench();
    if (argc > 1 && strcmp(argv[1], "--bench-only") == 0) { bench(); cublasDestroy(cublas); return 0; }
    cublasDestroy(cublas);
    return harness_done();
}
