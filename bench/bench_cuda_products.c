/* bench/bench_cuda_products.c: the products of a batched decode step (T = 1..64 rows
 * of bf16 activations against bf16 weights, float32 out) timed inside CUDA graphs, as
 * the step's graph runs them: cuBLAS's default choice (what src/backend/cuda/gemm.cu
 * calls) against each algorithm cuBLASLt's heuristic offers for the shape, and split-K
 * variants of the heuristic's first. Reported in GB/s of weights read against the
 * device-to-device copy, with each algorithm's largest difference from the default's
 * output (so a fast answer that is wrong shows).
 *
 * Timing: one graph holds 16 products that cycle over four copies of the weight (more
 * than the 60 MB L2 for every shape here but q/o, whose four copies are 128 MB), so
 * every product reads DRAM; the graph is replayed 11 times and the median replay is
 * divided by 16. Launch costs between graph nodes are included, host launches are not.
 *
 * Usage: bench_cuda_products [T[,T...]] (default 1,8,16,32,64) */
#include <cublasLt.h>
#include <cublas_v2.h>
#include <cuda_runtime.h>
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define CK(x)                                                                              \
    do {                                                                                   \
        cudaError_t e_ = (x);                                                              \
        if (e_ != cudaSuccess) {                                                           \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)
#define LK(x)                                                                              \
    do {                                                                                   \
        cublasStatus_t s_ = (x);                                                           \
        if (s_ != CUBLAS_STATUS_SUCCESS) {                                                 \
            fprintf(stderr, "%s:%d: %s: status %d\n", __FILE__, __LINE__, #x, (int)s_);     \
            exit(1);                                                                       \
        }                                                                                  \
    } while (0)

#define COPIES 4
#define PER_GRAPH 16
#define REPLAYS 11
#define WS_BYTES ((size_t)32 << 20) /* the backend's cuBLAS workspace */
#define MAX_ALGOS 16
#define MAX_T 64

static uint32_t rng = 12345;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)(rng >> 8) / (float)(1u << 24) - 0.5f;
}
static uint16_t bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return (uint16_t)((u + 0x7fff + ((u >> 16) & 1)) >> 16);
}
static int cmpf(const void *a, const void *b) {
    const float x = *(const float *)a, y = *(const float *)b;
    return (x > y) - (x < y);
}

typedef struct {
    long N, K;
    const char *name;
} shape;

typedef struct {
    int lt;                    /* 0: cublasGemmEx default; 1: cublasLtMatmul with algo */
    cublasLtMatmulAlgo_t algo; /* when lt */
} method;

typedef struct {
    cublasHandle_t blas;
    cublasLtHandle_t lt;
    cudaStream_t st;
    void *ws;
    uint16_t *W[COPIES]; /* [N, K] each */
    uint16_t *X;         /* [MAX_T, K] */
    float *Y;            /* [MAX_T, N] */
    long N, K;
    cublasLtMatmulDesc_t desc;
    cublasLtMatrixLayout_t la, lb, lc;
} ctx;

static void layouts(ctx *c, int T) {
    if (c->desc) {
        cublasLtMatmulDescDestroy(c->desc);
        cublasLtMatrixLayoutDestroy(c->la);
        cublasLtMatrixLayoutDestroy(c->lb);
        cublasLtMatrixLayoutDestroy(c->lc);
    }
    LK(cublasLtMatmulDescCreate(&c->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t tA = CUBLAS_OP_T, tB = CUBLAS_OP_N;
    LK(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_TRANSA, &tA, sizeof tA));
    LK(cublasLtMatmulDescSetAttribute(c->desc, CUBLASLT_MATMUL_DESC_TRANSB, &tB, sizeof tB));
    /* column-major: A is W as K x N (op T), B is X^T as K x T, C is Y^T as N x T */
    LK(cublasLtMatrixLayoutCreate(&c->la, CUDA_R_16BF, (uint64_t)c->K, (uint64_t)c->N, c->K));
    LK(cublasLtMatrixLayoutCreate(&c->lb, CUDA_R_16BF, (uint64_t)c->K, (uint64_t)T, c->K));
    LK(cublasLtMatrixLayoutCreate(&c->lc, CUDA_R_32F, (uint64_t)c->N, (uint64_t)T, c->N));
}

static cublasStatus_t product(ctx *c, const method *m, int copy, int T) {
    const float one = 1.f, zero = 0.f;
    if (!m->lt)
        return cublasGemmEx(c->blas, CUBLAS_OP_T, CUBLAS_OP_N, (int)c->N, T, (int)c->K, &one, c->W[copy], CUDA_R_16BF,
                            (int)c->K, c->X, CUDA_R_16BF, (int)c->K, &zero, c->Y, CUDA_R_32F, (int)c->N,
                            CUBLAS_COMPUTE_32F, CUBLAS_GEMM_DEFAULT);
    return cublasLtMatmul(c->lt, c->desc, &one, c->W[copy], c->la, c->X, c->lb, &zero, c->Y, c->lc, c->Y, c->lc, &m->algo,
                          c->ws, WS_BYTES, c->st);
}

/* microseconds per product inside a graph (median replay / PER_GRAPH); -1 if it fails */
static double time_in_graph(ctx *c, const method *m, int T) {
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(c->st, cudaStreamCaptureModeThreadLocal));
    int bad = 0;
    for (int i = 0; i < PER_GRAPH; i++)
        if (product(c, m, i % COPIES, T) != CUBLAS_STATUS_SUCCESS) bad = 1;
    CK(cudaStreamEndCapture(c->st, &g));
    if (bad) {
        cudaGraphDestroy(g);
        return -1;
    }
    CK(cudaGraphInstantiate(&ge, g, 0));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float t[REPLAYS];
    CK(cudaGraphLaunch(ge, c->st)); /* warm */
    for (int r = 0; r < REPLAYS; r++) {
        CK(cudaEventRecord(e0, c->st));
        CK(cudaGraphLaunch(ge, c->st));
        CK(cudaEventRecord(e1, c->st));
        CK(cudaEventSynchronize(e1));
        CK(cudaEventElapsedTime(&t[r], e0, e1));
    }
    qsort(t, REPLAYS, sizeof *t, cmpf);
    cudaEventDestroy(e0);
    cudaEventDestroy(e1);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return t[REPLAYS / 2] * 1e3 / PER_GRAPH;
}

/* one product with m into buf [T, N]; 0 on success */
static int run_once(ctx *c, const method *m, int T, float *buf) {
    CK(cudaMemsetAsync(c->Y, 0xff, (size_t)T * c->N * 4, c->st)); /* NaN: an unwritten output shows */
    if (product(c, m, 0, T) != CUBLAS_STATUS_SUCCESS) return -1;
    CK(cudaMemcpyAsync(buf, c->Y, (size_t)T * c->N * 4, cudaMemcpyDeviceToHost, c->st));
    CK(cudaStreamSynchronize(c->st));
    return 0;
}

/* largest |y - ref| over T rows after one product with m */
static double diff_from(ctx *c, const method *m, int T, const float *ref, float *buf) {
    if (run_once(c, m, T, buf) != 0) return INFINITY;
    double d = 0;
    for (long i = 0; i < (long)T * c->N; i++) {
        const double e = fabs((double)buf[i] - ref[i]);
        if (!(e <= d)) d = e; /* NaN wins */
    }
    return d;
}

static void algo_desc(const cublasLtMatmulAlgo_t *a, char *out, size_t n) {
    int id = 0, tile = 0, split = 0, red = 0, stages = 0, cluster = 0;
    size_t w;
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_ID, &id, sizeof id, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_TILE_ID, &tile, sizeof tile, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &split, sizeof split, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &red, sizeof red, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_STAGES_ID, &stages, sizeof stages, &w);
    cublasLtMatmulAlgoConfigGetAttribute(a, CUBLASLT_ALGO_CONFIG_CLUSTER_SHAPE_ID, &cluster, sizeof cluster, &w);
    snprintf(out, n, "id%d tile%d split%d red%d st%d cl%d", id, tile, split, red, stages, cluster);
}

static void bench_shape(ctx *c, const shape *s, const int *Ts, int nT, double copy_gbs) {
    c->N = s->N;
    c->K = s->K;
    const size_t welems = (size_t)s->N * s->K, wbytes = welems * 2;
    /* random weights, a 16M-element host pattern tiled over each copy (offset per copy) */
    const size_t pat = (size_t)1 << 24;
    uint16_t *h = malloc((pat + 8) * 2); /* + the per-copy offset (< 8) */
    for (size_t i = 0; i < pat + 8; i++) h[i] = bf16(frand() * 0.05f);
    for (int k = 0; k < COPIES; k++) {
        CK(cudaMalloc((void **)&c->W[k], wbytes));
        for (size_t o = 0; o < welems; o += pat) {
            const size_t n = welems - o < pat ? welems - o : pat;
            CK(cudaMemcpy(c->W[k] + o, h + (o / pat + k) % 7, n * 2, cudaMemcpyHostToDevice));
        }
    }
    free(h);
    uint16_t *hx = malloc((size_t)MAX_T * s->K * 2);
    for (long i = 0; i < MAX_T * s->K; i++) hx[i] = bf16(frand());
    CK(cudaMalloc((void **)&c->X, (size_t)MAX_T * s->K * 2));
    CK(cudaMemcpy(c->X, hx, (size_t)MAX_T * s->K * 2, cudaMemcpyHostToDevice));
    free(hx);
    CK(cudaMalloc((void **)&c->Y, (size_t)MAX_T * s->N * 4));
    float *ref = malloc((size_t)MAX_T * s->N * 4), *buf = malloc((size_t)MAX_T * s->N * 4);
    for (int ti = 0; ti < nT; ti++) {
        const int T = Ts[ti];
        layouts(c, T);
        method def = {0};
        if (run_once(c, &def, T, ref) != 0) {
            fprintf(stderr, "bench_cuda_products: cublasGemmEx failed for %s at T=%d\n", s->name, T);
            exit(1);
        }
        const double t0 = time_in_graph(c, &def, T);
        printf("%s T=%d default: %.2f us, %.0f GB/s (%.0f%% of copy)\n", s->name, T, t0, wbytes / (t0 * 1e3),
               100 * wbytes / (t0 * 1e3) / copy_gbs);
        /* the heuristic's candidates */
        cublasLtMatmulPreference_t pref;
        LK(cublasLtMatmulPreferenceCreate(&pref));
        size_t ws = WS_BYTES;
        LK(cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &ws, sizeof ws));
        cublasLtMatmulHeuristicResult_t res[MAX_ALGOS];
        int got = 0;
        LK(cublasLtMatmulAlgoGetHeuristic(c->lt, c->desc, c->la, c->lb, c->lc, c->lc, pref, MAX_ALGOS, res, &got));
        cublasLtMatmulPreferenceDestroy(pref);
        double best = 1e30;
        int bi = -1;
        for (int a = 0; a < got + 5; a++) {
            method m = {1, {{0}}};
            const char *kind = "heur";
            int idx = a;
            if (a < got) {
                if (res[a].state != CUBLAS_STATUS_SUCCESS) continue;
                m.algo = res[a].algo;
            } else {
                /* split-K variants of the first candidate */
                static const int splits[] = {2, 3, 4, 6, 8};
                if (got < 1) break;
                m.algo = res[0].algo;
                int sp = splits[a - got];
                cublasLtReductionScheme_t rs = CUBLASLT_REDUCTION_SCHEME_INPLACE;
                cublasLtMatmulAlgoConfigSetAttribute(&m.algo, CUBLASLT_ALGO_CONFIG_SPLITK_NUM, &sp, sizeof sp);
                cublasLtMatmulAlgoConfigSetAttribute(&m.algo, CUBLASLT_ALGO_CONFIG_REDUCTION_SCHEME, &rs, sizeof rs);
                cublasLtMatmulHeuristicResult_t chk;
                if (cublasLtMatmulAlgoCheck(c->lt, c->desc, c->la, c->lb, c->lc, c->lc, &m.algo, &chk) !=
                        CUBLAS_STATUS_SUCCESS ||
                    chk.workspaceSize > WS_BYTES)
                    continue;
                kind = "split";
                idx = sp;
            }
            const double d = diff_from(c, &m, T, ref, buf);
            const double t = time_in_graph(c, &m, T);
            char dsc[96];
            algo_desc(&m.algo, dsc, sizeof dsc);
            if (t <= 0) {
                printf("  %s %d [%s]: failed in capture\n", kind, idx, dsc);
                continue;
            }
            printf("  %s %d [%s]: %.2f us, %.0f GB/s (%.0f%%), x%.2f, max diff %.2g\n", kind, idx, dsc, t,
                   wbytes / (t * 1e3), 100 * wbytes / (t * 1e3) / copy_gbs, t0 / t, d);
            if (t < best && d < 1e-2) best = t, bi = a;
        }
        printf("| %s | %d | %.0f%% | %.0f%% | x%.2f | cand %d |\n", s->name, T, 100 * wbytes / (t0 * 1e3) / copy_gbs,
               100 * wbytes / (best * 1e3) / copy_gbs, t0 / best, bi);
        fflush(stdout);
    }
    for (int k = 0; k < COPIES; k++) cudaFree(c->W[k]);
    cudaFree(c->X);
    cudaFree(c->Y);
    free(ref);
    free(buf);
}

int main(int argc, char **argv) {
    int Ts[16] = {1, 8, 16, 32, 64}, nT = 5;
    if (argc > 1) {
        if (!strcmp(argv[1], "--help") || !strcmp(argv[1], "-h")) {
            printf("usage: bench_cuda_products [T[,T...]]   (rows per product, 1..%d; default 1,8,16,32,64)\n", MAX_T);
            return 0;
        }
        nT = 0;
        for (char *p = argv[1]; *p && nT < 16;) {
            char *e;
            const long v = strtol(p, &e, 10);
            if (e == p || v < 1 || v > MAX_T) {
                fprintf(stderr, "bench_cuda_products: bad row count list '%s' (want e.g. 8,16,32; each 1..%d)\n",
                        argv[1], MAX_T);
                return 2;
            }
            Ts[nT++] = (int)v;
            p = *e == ',' ? e + 1 : e;
        }
    }
    ctx c = {0};
    CK(cudaStreamCreate(&c.st));
    LK(cublasCreate(&c.blas));
    LK(cublasSetStream(c.blas, c.st));
    LK(cublasLtCreate(&c.lt));
    CK(cudaMalloc(&c.ws, WS_BYTES));
    LK(cublasSetWorkspace(c.blas, c.ws, WS_BYTES));
    /* the copy bandwidth, read + write, median of 11 */
    const size_t nb = (size_t)2 << 30;
    void *a, *b;
    CK(cudaMalloc(&a, nb));
    CK(cudaMalloc(&b, nb));
    CK(cudaMemset(a, 1, nb));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    float t[11];
    for (int i = 0; i < 13; i++) {
        CK(cudaEventRecord(e0, c.st));
        CK(cudaMemcpyAsync(b, a, nb, cudaMemcpyDeviceToDevice, c.st));
        CK(cudaEventRecord(e1, c.st));
        CK(cudaEventSynchronize(e1));
        if (i >= 2) CK(cudaEventElapsedTime(&t[i - 2], e0, e1));
    }
    qsort(t, 11, sizeof *t, cmpf);
    const double copy_gbs = 2.0 * nb / (t[5] * 1e-3) / 1e9;
    cudaFree(a);
    cudaFree(b);
    printf("copy (read + write): %.0f GB/s\n", copy_gbs);
    /* llama3-8b's decode products */
    const shape shapes[] = {{6144, 4096, "qkv 6144x4096"},
                            {4096, 4096, "o 4096x4096"},
                            {28672, 4096, "gate|up 28672x4096"},
                            {4096, 14336, "down 4096x14336"},
                            {128256, 4096, "head 128256x4096"}};
    printf("| product | T | default %% of copy | best %% of copy | speed-up | candidate |\n|---|---:|---:|---:|---:|---:|\n");
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) bench_shape(&c, &shapes[i], Ts, nT, copy_gbs);
    return 0;
}
