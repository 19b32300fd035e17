/* tests/cuda/test_cuda_qgemm.c: the fused dequantize-and-multiply prefill kernel
 * (backend/cuda/qgemm.cu) and the MXFP4 matrix-vector kernel (matvec.cu) against
 * double-precision host references built from the host's own dequantization
 * (weight_row_f32), on shapes off every tile multiple (tokens, features and k not
 * multiples of 128 / 128 / 64). Each output element is held to a bound relative to
 * sum |w x| of its dot product: the fast precision against the reference with x and
 * w rounded to bf16 as the kernel rounds them, the exact one (MXFP4, two activation
 * terms) against the unrounded reference. `--bench` then times the fused kernel
 * against the dequantize-then-cuBLAS path on llama3-8b's and gpt-oss-20b's shapes. */
#include <cublas_v2.h>
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_kernels.h"
#include "base/err.h"
#include "harness.h"
#include "tensor/dtype.h"
#include "tensor/weight.h"

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) { printf("CUDA %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } \
    } while (0)

static uint64_t rng = 0x9E3779B97F4A7C15ULL;
static uint32_t urand(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return (uint32_t)(rng >> 32); }
static float frand(void) { return (float)(urand() * (1.0 / 4294967296.0)) * 2.f - 1.f; } /* [-1, 1) */

static void *dup_dev(const void *h, size_t n) {
    void *d;
    CK(cudaMalloc(&d, n ? n : 4));
    CK(cudaMemcpy(d, h, n, cudaMemcpyHostToDevice));
    return d;
}

/* A random quantized weight on the host and its device twin. */
typedef struct { weight h, d; } twin;

static twin make_q(weight_fmt fmt, long rows, long cols, int bits, int group, scale_type st) {
    twin t;
    memset(&t, 0, sizeof t);
    weight *w = &t.h;
    w->fmt = fmt; w->rows = rows; w->cols = cols; w->bits = bits; w->group = group; w->stype = st;
    const size_t n = (size_t)rows * cols, nw = n * bits / 32, ng = n / group;
    uint32_t *c = malloc(nw * 4);
    for (size_t i = 0; i < nw; i++) c[i] = urand();
    w->data = c;
    if (fmt == WF_MXFP4) {
        uint8_t *s = malloc(ng);
        for (size_t i = 0; i < ng; i++) s[i] = (uint8_t)(118 + urand() % 12); /* 2^-9 .. 2^2 */
        w->scales = s;
        w->nbytes = nw * 4 + ng;
        t.d = t.h;
        t.d.data = dup_dev(c, nw * 4);
        t.d.scales = dup_dev(s, ng);
        return t;
    }
    const size_t ss = st == SC_F32 ? 4 : 2;
    void *s = malloc(ng * ss), *b = malloc(ng * ss);
    for (size_t i = 0; i < ng; i++) {
        const float sv = (0.01f + 0.01f * fabsf(frand())) * (bits == 8 ? 1.f / 16 : 1.f), bv = -0.05f + 0.01f * frand();
        if (st == SC_BF16) { ((uint16_t *)s)[i] = f32_to_bf16(sv); ((uint16_t *)b)[i] = f32_to_bf16(bv); }
        else if (st == SC_F16) { ((uint16_t *)s)[i] = 0x2000 + (uint16_t)(urand() & 0x3ff); ((uint16_t *)b)[i] = 0xa800 + (uint16_t)(urand() & 0x3ff); }
        else { ((float *)s)[i] = sv; ((float *)b)[i] = bv; }
    }
    w->scales = s; w->biases = b; w->nbytes = nw * 4 + 2 * ng * ss;
    t.d = t.h;
    t.d.data = dup_dev(c, nw * 4);
    t.d.scales = dup_dev(s, ng * ss);
    t.d.biases = dup_dev(b, ng * ss);
    return t;
}

static void free_twin(twin *t) {
    free((void *)t->h.data); free((void *)t->h.scales); free((void *)t->h.biases);
    cudaFree((void *)t->d.data); cudaFree((void *)t->d.scales); cudaFree((void *)t->d.biases);
}

static float bf(float v) { return bf16_to_f32(f32_to_bf16(v)); }

/* Checks y [T, rows] element by element: |y - ref| <= tol * sum |w x| (+ a floor),
 * ref and the bound in double from the host weight; round: x and w rounded to bf16
 * first (the fast precision). Returns the worst error / bound. */
static double check_out(const weight *w, const float *x, const float *y, int T, int round, double tol, const char *what) {
    float *row = malloc((size_t)w->cols * 4);
    double worst = 0;
    long bad = 0;
    for (long r = 0; r < w->rows; r++) {
        weight_row_f32(w, r, row);
        if (round)
            for (long j = 0; j < w->cols; j++) row[j] = bf(row[j]);
        for (int t = 0; t < T; t++) {
            double s = 0, m = 0;
            for (long j = 0; j < w->cols; j++) {
                const double xv = round ? bf(x[(long)t * w->cols + j]) : x[(long)t * w->cols + j];
                s += (double)row[j] * xv;
                m += fabs((double)row[j] * xv);
            }
            const float got = y[(long)t * w->rows + r];
            const double e = isfinite(got) ? fabs(got - s) / (m + 1e-30) : INFINITY;
            if (e > worst) worst = e;
            if (!(e <= tol) && bad++ < 3)
                CHECK(0, "%s: row %ld token %d: got %.9g want %.9g (error %.3g of sum|wx| %.3g, tolerance %g)", what, r, t,
                      got, s, e, m, tol);
        }
    }
    CHECK(bad == 0, "%s: %ld of %ld outputs beyond tolerance (worst %.3g)", what, bad, w->rows * (long)T, worst);
    free(row);
    return worst;
}

/* cuk_qgemm at precision fast (or exact) for T tokens; y poisoned with NaN first. */
static void check_qgemm(const char *name, weight_fmt fmt, long rows, long cols, int bits, int group, scale_type st,
                        const int *Ts, int nT, int fast) {
    twin w = make_q(fmt, rows, cols, bits, group, st);
    CHECK(cuk_qgemm_supports(&w.d, fast), "%s: the fused kernel should take this weight (fast=%d)", name, fast);
    for (int k = 0; k < nT; k++) {
        const int T = Ts[k];
        float *x = malloc((size_t)T * cols * 4), *y = malloc((size_t)T * rows * 4);
        for (long i = 0; i < T * cols; i++) x[i] = frand();
        float *dx = dup_dev(x, (size_t)T * cols * 4), *dy;
        uint16_t *xbf;
        float *part = NULL;
        const size_t np = cuk_qgemm_work(&w.d, T, fast);
        CK(cudaMalloc((void **)&dy, (size_t)T * rows * 4));
        CK(cudaMalloc((void **)&xbf, cuk_gemm_xbf_elems(T, cols) * 2));
        if (np) CK(cudaMalloc((void **)&part, np));
        CK(cudaMemset(dy, 0xff, (size_t)T * rows * 4));
        const int rc = cuk_qgemm(&w.d, dx, dy, T, xbf, part, fast, NULL);
        CHECK(rc == 0, "%s T=%d: %s", name, T, err_msg());
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(y, dy, (size_t)T * rows * 4, cudaMemcpyDeviceToHost));
        char what[160];
        snprintf(what, sizeof what, "%s [%ld x %ld] T=%d %s, k walk in %zu split(s)", name, rows, cols, T,
                 fast ? "fast" : "exact", np ? np / ((size_t)T * rows * 4) : 1);
        /* fast: the kernel's own roundings, then float32 accumulation (a weight whose
         * float value sits on a bf16 rounding tie may round the other way: 1e-4);
         * exact: two activation terms, 2^-17 relative, against the unrounded reference */
        const double worst = check_out(&w.h, x, y, T, fast, fast ? 1e-4 : 2e-5, what);
        printf("  %s: worst error %.2g of sum|wx|\n", what, worst);
        free(x); free(y); cudaFree(dx); cudaFree(dy); cudaFree(xbf); cudaFree(part);
    }
    free_twin(&w);
}

static void qgemm_affine(void) {
    const int Ta[] = {9, 64, 65, 130, 300};
    check_qgemm("q4g64", WF_AFFINE, 1000, 1024, 4, 64, SC_BF16, Ta, 5, 1);
    const int Tb[] = {33, 130};
    check_qgemm("q4g32-f16", WF_AFFINE, 129, 96, 4, 32, SC_F16, Tb, 2, 1); /* k: one and a half tiles */
    check_qgemm("q4g128-f32", WF_AFFINE, 77, 384, 4, 128, SC_F32, Tb, 2, 1);
    check_qgemm("q8g128-f32", WF_AFFINE, 200, 768, 8, 128, SC_F32, Tb, 2, 1);
    check_qgemm("q8g32", WF_AFFINE, 300, 160, 8, 32, SC_BF16, Ta, 5, 1);
    check_qgemm("q8g64-f16", WF_AFFINE, 131, 576, 8, 64, SC_F16, Tb, 2, 1);
    const int Tc[] = {5, 17, 100};
    check_qgemm("q4g64 long k", WF_AFFINE, 200, 4096, 4, 64, SC_BF16, Tc, 3, 1); /* 8 splits of the k walk */
    check_qgemm("q8g32 long k", WF_AFFINE, 300, 2080, 8, 32, SC_BF16, Tc, 3, 1); /* k tiles off the split */
    /* the exact precision keeps the three-product path for affine weights; products
     * of many rows (and of 65-128 rows with few features) go to dequantize + cuBLAS,
     * and so does MXFP4 under exact (measured faster) */
    twin w = make_q(WF_AFFINE, 64, 64, 4, 64, SC_BF16);
    CHECK(!cuk_qgemm_supports(&w.d, 0), "affine weights under exact must not take the fused kernel");
    CHECK(cuk_qgemm_wanted(&w.d, 64, 1), "an affine product of 64 rows should take the fused kernel");
    w.d.rows = 28672; /* only the shape is asked */
    w.d.cols = 4096;
    CHECK(cuk_qgemm_wanted(&w.d, 128, 1), "a 28672-feature affine product of 128 rows should take the fused kernel");
    CHECK(!cuk_qgemm_wanted(&w.d, 4096, 1), "a 4096-row product should dequantize for cuBLAS (CUK_QGEMM_MAX_T)");
    w.d.rows = 4096;
    CHECK(cuk_qgemm_wanted(&w.d, 8, 1), "a 4096-feature product of 8 rows should take the fused kernel");
    CHECK(!cuk_qgemm_wanted(&w.d, 128, 1), "a 4096-feature product of 128 rows should dequantize (CUK_QGEMM_MIN_ROWS)");
    w.d.rows = w.d.cols = 64;
    free_twin(&w);
    twin m = make_q(WF_MXFP4, 64, 64, 4, 32, SC_BF16);
    CHECK(cuk_qgemm_supports(&m.d, 0) && cuk_qgemm_supports(&m.d, 1), "MXFP4 products should be supported at both precisions");
    CHECK(cuk_qgemm_wanted(&m.d, 8, 1) && !cuk_qgemm_wanted(&m.d, 8, 0), "MXFP4 should take the fused kernel under fast only");
    free_twin(&m);
}

static void qgemm_mxfp4(void) {
    const int Ts[] = {9, 65, 130, 257};
    check_qgemm("mxfp4", WF_MXFP4, 1000, 544, 4, 32, SC_BF16, Ts, 4, 1);
    check_qgemm("mxfp4", WF_MXFP4, 1000, 544, 4, 32, SC_BF16, Ts, 4, 0);
    const int Tb[] = {17, 200};
    check_qgemm("mxfp4 narrow", WF_MXFP4, 65, 32, 4, 32, SC_BF16, Tb, 2, 0);
    check_qgemm("mxfp4 wide", WF_MXFP4, 130, 2880, 4, 32, SC_BF16, Tb, 2, 0);
}

/* Rows of quantized weights as bf16 terms (dequant.cu, what the cuBLAS products read):
 * every code width, scale type and group, rows starting off 0, against the host's
 * dequantization. hi is the nearest bf16 of each value and hi + lo holds it to 2^-16
 * (each plus a floor of 2^-21 of the row's largest value: the kernel forms code * scale
 * + bias in one fma, the host rounds the product first); MXFP4 values are exact. */
static void dequant_rows(void) {
    struct { weight_fmt fmt; int bits, group; scale_type st; long rows, cols; } sh[] = {
        {WF_AFFINE, 2, 32, SC_BF16, 37, 320},  {WF_AFFINE, 3, 64, SC_F16, 29, 384},  {WF_AFFINE, 4, 64, SC_BF16, 45, 576},
        {WF_AFFINE, 5, 32, SC_F32, 21, 160},   {WF_AFFINE, 6, 128, SC_BF16, 19, 384}, {WF_AFFINE, 8, 32, SC_F16, 33, 96},
        {WF_AFFINE, 4, 128, SC_F32, 70000, 128}, {WF_MXFP4, 4, 32, SC_BF16, 41, 2880},
    };
    for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++) {
        twin w = make_q(sh[s].fmt, sh[s].rows, sh[s].cols, sh[s].bits, sh[s].group, sh[s].st);
        const long r0 = 3, n = sh[s].rows - 5, K = sh[s].cols; /* rows [3, rows - 2) */
        uint16_t *d, *h = malloc((size_t)n * K * 4);
        CK(cudaMalloc((void **)&d, (size_t)n * K * 4));
        CK(cudaMemset(d, 0xff, (size_t)n * K * 4));
        for (int terms = 1; terms <= 2; terms++) {
            CHECK(cuk_weight_to_bf16x2(&w.d, r0, n, d, terms == 2 ? d + n * K : NULL, NULL) == 0, "dequantize: %s", err_msg());
            CK(cudaDeviceSynchronize());
            CK(cudaMemcpy(h, d, (size_t)n * K * 4, cudaMemcpyDeviceToHost));
            float *row = malloc((size_t)K * 4);
            long bad = 0;
            for (long r = 0; r < n; r++) {
                weight_row_f32(&w.h, r0 + r, row);
                /* the kernel's fmaf(code, scale, bias) and the host's rounded product plus
                 * bias differ by up to an ulp of code * scale: a floor from the row's size */
                double big = 0;
                for (long j = 0; j < K; j++) big = fmax(big, fabs(row[j]));
                const double floor_ = big * 0x1p-21;
                for (long j = 0; j < K; j++) {
                    const double v = row[j], hv = bf16_to_f32(h[r * K + j]);
                    const double lv = terms == 2 ? bf16_to_f32(h[(n + r) * K + j]) : 0;
                    const double a = fabs(v);
                    int ok = fabs(hv - v) <= a / 256 + floor_;
                    if (terms == 2) ok = ok && fabs(hv + lv - v) <= a / 65536 + floor_;
                    if (sh[s].fmt == WF_MXFP4) ok = hv == v && lv == 0;
                    if (!ok && bad++ < 3)
                        printf("  fmt %d bits %d row %ld col %ld: %.9g, got %.9g + %.9g\n", (int)sh[s].fmt, sh[s].bits, r0 + r, j,
                               v, hv, lv);
                }
            }
            CHECK(bad == 0, "dequantize fmt %d q%d g%d [%ld x %ld], %d term(s): %ld values off", (int)sh[s].fmt, sh[s].bits,
                  sh[s].group, sh[s].rows, K, terms, bad);
            free(row);
        }
        free(h);
        cudaFree(d);
        free_twin(&w);
    }
}

/* The MXFP4 decode kernel: float activations, exact to float rounding. */
static void matvec_mxfp4(void) {
    twin w = make_q(WF_MXFP4, 333, 1056, 4, 32, SC_BF16);
    CHECK(cuk_matvec_supports(&w.d), "the matvec kernels should read MXFP4");
    for (int T = 1; T <= CUK_MV_MAX_T; T++) {
        float *x = malloc((size_t)T * 1056 * 4), *y = malloc((size_t)T * 333 * 4);
        for (long i = 0; i < T * 1056L; i++) x[i] = frand();
        float *dx = dup_dev(x, (size_t)T * 1056 * 4), *dy;
        void *work;
        CK(cudaMalloc((void **)&dy, (size_t)T * 333 * 4));
        CK(cudaMalloc(&work, cuk_matvec_work(T, 1056)));
        CK(cudaMemset(dy, 0xff, (size_t)T * 333 * 4));
        CHECK(cuk_matvec(&w.d, dx, dy, T, work, 0, NULL) == 0, "mxfp4 matvec T=%d: %s", T, err_msg());
        CK(cudaDeviceSynchronize());
        CK(cudaMemcpy(y, dy, (size_t)T * 333 * 4, cudaMemcpyDeviceToHost));
        char what[64];
        snprintf(what, sizeof what, "mxfp4 matvec T=%d", T);
        check_out(&w.h, x, y, T, 0, 1e-5, what);
        free(x); free(y); cudaFree(dx); cudaFree(dy); cudaFree(work);
    }
    free_twin(&w);
}

/* ---- benchmark: fused kernel vs dequantize + cuBLAS ---- */

static int cmpf(const void *a, const void *b) { float x = *(const float *)a, y = *(const float *)b; return (x > y) - (x < y); }

static void bench(cublasHandle_t cublas) {
    struct { const char *name; weight_fmt fmt; int bits, group, fast; long N, K; } sh[] = {
        {"llama3-8b gate|up (fused) q4g64", WF_AFFINE, 4, 64, 1, 28672, 4096},
        {"llama3-8b q|k|v (fused) q4g64", WF_AFFINE, 4, 64, 1, 6144, 4096},
        {"llama3-8b gate/up q4g64", WF_AFFINE, 4, 64, 1, 14336, 4096},
        {"llama3-8b down q4g64", WF_AFFINE, 4, 64, 1, 4096, 14336},
        {"llama3-8b q/o q4g64", WF_AFFINE, 4, 64, 1, 4096, 4096},
        {"llama3-8b lm_head q4g64", WF_AFFINE, 4, 64, 1, 128256, 4096},
        {"llama3-8b gate/up q8g64", WF_AFFINE, 8, 64, 1, 14336, 4096},
        {"gpt-oss-20b expert gate_up mxfp4 (exact)", WF_MXFP4, 4, 32, 0, 5760, 2880},
        {"gpt-oss-20b expert gate_up mxfp4 (fast)", WF_MXFP4, 4, 32, 1, 5760, 2880},
    };
    const int Ts[] = {512, 256, 128, 64, 32, 8};
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    printf("\n| product | T | fused (us) | TFLOP/s | dequant + cuBLAS (us) | TFLOP/s | speedup |\n|---|---:|---:|---:|---:|---:|---:|\n");
    for (size_t s = 0; s < sizeof sh / sizeof sh[0]; s++) {
        twin w = make_q(sh[s].fmt, sh[s].N, sh[s].K, sh[s].bits, sh[s].group, SC_BF16);
        for (int k = 0; k < (int)(sizeof Ts / sizeof Ts[0]); k++) {
            const int T = Ts[k];
            float *dx, *dy;
            uint16_t *xbf, *wbf;
            float *part = NULL;
            const long wrows = cuk_gemm_wbf_rows(&w.d); /* step_ops.c's chunk */
            const size_t np = cuk_qgemm_work(&w.d, T, sh[s].fast);
            if (np) CK(cudaMalloc((void **)&part, np));
            CK(cudaMalloc((void **)&dx, (size_t)T * sh[s].K * 4));
            CK(cudaMalloc((void **)&dy, (size_t)T * sh[s].N * 4));
            CK(cudaMalloc((void **)&xbf, cuk_gemm_xbf_elems(T, sh[s].K) * 2));
            CK(cudaMalloc((void **)&wbf, cuk_gemm_wbf_elems(wrows, sh[s].K) * 2));
            CK(cudaMemset(dx, 0, (size_t)T * sh[s].K * 4));
            float ms[2];
            for (int path = 0; path < 2; path++) {
                float tt[15];
                for (int i = 0; i < 18; i++) {
                    CK(cudaEventRecord(e0, 0));
                    if (path == 0) cuk_qgemm(&w.d, dx, dy, T, xbf, part, sh[s].fast, NULL);
                    else cuk_gemm(cublas, &w.d, dx, dy, T, xbf, wbf, wrows, sh[s].fast, NULL);
                    CK(cudaEventRecord(e1, 0));
                    CK(cudaEventSynchronize(e1));
                    if (i >= 3) CK(cudaEventElapsedTime(&tt[i - 3], e0, e1));
                }
                qsort(tt, 15, sizeof *tt, cmpf);
                ms[path] = tt[7];
            }
            const double fl = 2.0 * T * sh[s].N * sh[s].K;
            printf("| %s | %d | %.1f | %.0f | %.1f | %.0f | %.2fx |\n", sh[s].name, T, ms[0] * 1e3, fl / (ms[0] * 1e-3) / 1e12,
                   ms[1] * 1e3, fl / (ms[1] * 1e-3) / 1e12, ms[1] / ms[0]);
            cudaFree(dx); cudaFree(dy); cudaFree(xbf); cudaFree(wbf); cudaFree(part);
        }
        free_twin(&w);
    }
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
}

int main(int argc, char **argv) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("no CUDA device: nothing to test here\n");
        return harness_done();
    }
    const int bench_only = argc > 1 && strcmp(argv[1], "--bench-only") == 0;
    if (!bench_only) {
        RUN(qgemm_affine);
        RUN(qgemm_mxfp4);
        RUN(dequant_rows);
        RUN(matvec_mxfp4);
    }
    if (bench_only || (argc > 1 && strcmp(argv[1], "--bench") == 0)) {
        cublasHandle_t cublas;
        if (cublasCreate(&cublas) != CUBLAS_STATUS_SUCCESS) { printf("cublasCreate failed\n"); return 1; }
        bench(cublas);
        cublasDestroy(cublas);
    }
    return harness_done();
}
