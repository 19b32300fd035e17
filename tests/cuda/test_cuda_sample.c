/* tests/cuda/test_cuda_sample.c: the device sampler (cuk_sample) against the engine's
 * own sampler: for random logits (vocabularies from 10 to 262,144; gaussian at several
 * scales, ties, signed zeros, -inf entries, one huge spike, bf16-rounded values, all
 * equal), every combination of temperature, top-k, top-p and min-p, and draws u from
 * 0 to just below 1, the device token must be the token celer_sampler_sample would
 * pick with the same u (sample_candidates, then the same cumulative walk). Also the
 * mapped host copy of the token, cuk_sample_supported, the launcher's refusals and
 * timing at V = 128,256. Runs on the GPU machine: `make test-cuda`; `--quick` runs a
 * small subset (for compute-sanitizer), `--bench-only` the timing alone. Every wait
 * for the device is bounded (dev_wait): a broken kernel that never finishes fails the
 * case that launched it instead of hanging the suite. */
#include <cuda_runtime_api.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/cuda/cuda_kernels.h"
#include "base/err.h"
#include "engine/sample.h"
#include "harness.h"

#define CK(x)                                                                                   \
    do {                                                                                        \
        cudaError_t e_ = (x);                                                                   \
        if (e_ != cudaSuccess) { printf("CUDA %s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } \
    } while (0)

/* How long one wait for the device may take: the slowest case (V 262,144 under
 * compute-sanitizer) finishes in seconds; a kernel that spins never does. */
#define WAIT_LIMIT_S 120

/* Waits for ev (NULL: all the work on the default stream). A device error exits as CK
 * does; a wait past WAIT_LIMIT_S fails the running case and ends the run at once, with
 * the counts tests/run.sh reads: the hung kernel cannot be stopped, only left. */
static void dev_wait(cudaEvent_t ev, const char *what) {
    struct timespec t0, t;
    clock_gettime(CLOCK_MONOTONIC, &t0);
    for (;;) {
        const cudaError_t e = ev ? cudaEventQuery(ev) : cudaStreamQuery(NULL);
        if (e == cudaSuccess) return;
        if (e != cudaErrorNotReady) { printf("CUDA %s: %s\n", what, cudaGetErrorString(e)); exit(1); }
        clock_gettime(CLOCK_MONOTONIC, &t);
        if (t.tv_sec - t0.tv_sec > WAIT_LIMIT_S) {
            printf("  %s: %s: the device has not finished after %d s (a kernel hangs)\nFAIL %s\n@@ %d passed %d failed\n",
                   h_case ? h_case : "main", what, WAIT_LIMIT_S, h_case ? h_case : "main", h_passed, h_failed + 1);
            fflush(stdout);
            _exit(1);
        }
        nanosleep(&(struct timespec){0, 1000000}, NULL);
    }
}

static uint64_t rng = 0x2545F4914F6CDD1DULL;
static uint64_t next64(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }
static double unif(void) { return (double)(next64() >> 11) * 0x1.0p-53; }
static double gauss(void) {
    double a = unif(), b = unif();
    if (a < 1e-300) a = 1e-300;
    return sqrt(-2.0 * log(a)) * cos(6.283185307179586 * b);
}
static float bf16_round(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    u += 0x7fffu + ((u >> 16) & 1);
    u &= 0xffff0000u;
    memcpy(&f, &u, 4);
    return f;
}

enum { D_G1, D_G4, D_G20, D_TIES, D_NEGINF, D_FEW, D_SPIKE, D_BF16, D_EQUAL, D_N };
static const char *dist_name[D_N] = {"gauss*1", "gauss*4", "gauss*20", "ties+signed zeros", "40% -inf",
                                     "3 finite, rest -inf", "spike 1e4", "bf16 gauss*5", "all equal"};

static void gen(float *x, int V, int dist) {
    for (int i = 0; i < V; i++) {
        double g = gauss();
        float v;
        switch (dist) {
        case D_G1: v = (float)g; break;
        case D_G4: v = (float)(4 * g); break;
        case D_G20: v = (float)(20 * g); break;
        case D_TIES:
            v = (float)(0.5 * round(g * 3));
            if (v == 0.0f && (next64() & 1)) v = -0.0f;
            break;
        case D_NEGINF: v = unif() < 0.4 ? -INFINITY : (float)(3 * g); break;
        case D_FEW: v = -INFINITY; break;
        case D_SPIKE: v = (float)(2 * g); break;
        case D_BF16: v = bf16_round((float)(5 * g)); break;
        default: v = 1.25f; break;
        }
        x[i] = v;
    }
    if (dist == D_FEW)
        for (int j = 0; j < 3; j++) x[(int)(next64() % (uint64_t)V)] = (float)gauss();
    if (dist == D_SPIKE) x[(int)(next64() % (uint64_t)V)] = 1e4f;
}

/* The engine's pick for draw u: celer_sampler_sample with the draw given. */
static int32_t cpu_pick(const int32_t *ids, const float *probs, int n, double u) {
    if (n == 1) return ids[0];
    double cum = 0.0;
    for (int i = 0; i < n; i++) {
        cum += probs[i];
        if (u < cum) return ids[i];
    }
    return ids[n - 1];
}

#define NU 8
static double us[NU];

typedef struct {
    float *dx;
    double *du;
    int32_t *dout, *hout, *hout_dev;
    void *work;
} dev_bufs;

static dev_bufs db;
static long n_compared, n_mismatch, n_host_mismatch;

/* Every u of us against the CPU for logits x [V] (already on the device) and p. */
static void compare(const float *x, int V, const cuk_sample_params *cp, int nu, const char *what) {
    celer_sampler_params sp;
    celer_sampler_params_default(&sp);
    sp.temperature = cp->temperature;
    sp.top_k = cp->top_k;
    sp.top_p = cp->top_p;
    sp.min_p = cp->min_p;
    sp.repeat_penalty = 1.0f;
    sp.presence_penalty = sp.frequency_penalty = 0.0f;
    sp.penalty_last_n = 0;
    celer_sampler *smp = celer_sampler_new(&sp, V);
    if (!smp) { CHECK(0, "celer_sampler_new: %s", err_msg()); return; }
    const int32_t *ids;
    const float *probs;
    int n = sample_candidates(smp, x, &ids, &probs);
    for (int j = 0; j < nu; j++) {
        db.hout[j] = -7;
        CHECK(cuk_sample(db.dx, V, cp, db.du + j, db.dout + j, db.hout_dev + j, db.work, NULL) == 0, "cuk_sample: %s",
              err_msg());
    }
    dev_wait(NULL, "cuk_sample");
    int32_t got[NU];
    CK(cudaMemcpy(got, db.dout, sizeof(int32_t) * (size_t)nu, cudaMemcpyDeviceToHost));
    for (int j = 0; j < nu; j++) {
        int32_t want = cpu_pick(ids, probs, n, us[j]);
        n_compared++;
        if (got[j] != want) {
            if (n_mismatch++ < 20)
                printf("  mismatch: V %d %s, T %g k %d p %g min_p %g, u %.17g: device %d, cpu %d (cpu n %d)\n", V, what,
                       cp->temperature, cp->top_k, cp->top_p, cp->min_p, us[j], got[j], want, n);
        }
        if (db.hout[j] != got[j]) n_host_mismatch++;
    }
    celer_sampler_free(smp);
}

static int quick;

static void against_cpu(void) {
    static const int Vs[] = {10, 1000, 1024, 1025, 32000, 128256, 262144};
    static const float temps[] = {0.3f, 0.8f, 1.5f};
    static const int ks[] = {1, 2, 40, 1024};
    static const float tps[] = {1.0f, 0.9f, 0.5f};
    static const float mps[] = {0.0f, 0.05f, 0.3f};
    const int nV = (int)(sizeof Vs / sizeof *Vs);
    int maxV = 262144;
    float *x = malloc(sizeof(float) * (size_t)maxV);
    CK(cudaMalloc((void **)&db.dx, sizeof(float) * (size_t)maxV));
    CK(cudaMalloc((void **)&db.work, cuk_sample_work(maxV)));
    n_compared = n_mismatch = n_host_mismatch = 0;
    long combos = 0;
    for (int vi = 0; vi < nV; vi++) {
        const int V = Vs[vi];
        if (quick && !(V == 10 || V == 1025 || V == 32000)) continue;
        for (int dist = 0; dist < D_N; dist++) {
            if (quick && !(dist == D_G4 || dist == D_TIES || dist == D_EQUAL || dist == D_FEW)) continue;
            gen(x, V, dist);
            CK(cudaMemcpy(db.dx, x, sizeof(float) * (size_t)V, cudaMemcpyHostToDevice));
            const int nu = quick ? 2 : NU;
            /* greedy, with a top_k the sampling path would refuse */
            cuk_sample_params g = {0.0f, 0, 1.0f, 0.0f};
            compare(x, V, &g, nu, dist_name[dist]);
            g.temperature = -1.0f;
            g.top_k = 40;
            compare(x, V, &g, nu, dist_name[dist]);
            combos += 2;
            int c = 0;
            for (int a = 0; a < 3; a++)
                for (int b = 0; b < 4; b++)
                    for (int d = 0; d < 3; d++)
                        for (int e = 0; e < 3; e++) {
                            if (quick && (c++ % 19) != 0) continue;
                            cuk_sample_params p = {temps[a], ks[b], tps[d], mps[e]};
                            compare(x, V, &p, nu, dist_name[dist]);
                            combos++;
                        }
        }
    }
    /* a NaN at id 0 wins greedy on the CPU; elsewhere NaN never wins */
    for (int V = 10; V <= 5000; V += 4990) {
        gen(x, V, D_G4);
        x[0] = NAN;
        CK(cudaMemcpy(db.dx, x, sizeof(float) * (size_t)V, cudaMemcpyHostToDevice));
        cuk_sample_params g = {0.0f, 40, 0.9f, 0.05f};
        compare(x, V, &g, 1, "NaN at 0");
        g.temperature = 0.8f;
        compare(x, V, &g, 1, "NaN at 0");
        x[0] = 1.0f;
        x[V / 2] = NAN;
        CK(cudaMemcpy(db.dx, x, sizeof(float) * (size_t)V, cudaMemcpyHostToDevice));
        g.temperature = 0.0f;
        compare(x, V, &g, 1, "NaN inside");
        combos += 3;
    }
    /* +inf: greedy on the first one whatever the temperature */
    gen(x, 3000, D_G4);
    x[17] = x[2500] = INFINITY;
    CK(cudaMemcpy(db.dx, x, sizeof(float) * 3000, cudaMemcpyHostToDevice));
    cuk_sample_params pi = {0.8f, 40, 0.9f, 0.0f};
    compare(x, 3000, &pi, 2, "+inf");
    combos++;
    printf("  %ld parameter sets, %ld draws compared, %ld mismatches, %ld host copies differing\n", combos, n_compared,
           n_mismatch, n_host_mismatch);
    CHECK(n_compared > 0 && n_mismatch == 0, "%ld of %ld device tokens differ from the CPU's", n_mismatch, n_compared);
    CHECK(n_host_mismatch == 0, "%ld host copies differ from the device tokens", n_host_mismatch);
    CK(cudaFree(db.dx));
    CK(cudaFree(db.work));
    free(x);
}

/* cuk_sample_rows: R rows, each its own logits, parameters (greedy and sampling
 * mixed) and draw, in one launch, against the CPU's pick for each row alone; the
 * rows' work spaces must not interfere (every row of the large-vocabulary path
 * keeps its own lists). Both kernel paths (one block, three kernels). */
static void rows_against_cpu(void) {
    static const int Vs[] = {1000, 5000, 32000, 128256};
    enum { R = 37 };
    static const cuk_sample_params ps[] = {
        {0.0f, 0, 1.0f, 0.0f}, {0.8f, 40, 0.95f, 0.05f}, {1.5f, 1024, 0.9f, 0.0f}, {0.3f, 1, 1.0f, 0.0f},
        {0.8f, 2, 0.5f, 0.3f}, {-1.0f, 40, 1.0f, 0.0f}, {1.0f, 200, 1.0f, 0.0f}};
    const int np = (int)(sizeof ps / sizeof *ps);
    long compared = 0, mismatched = 0, host_mismatched = 0;
    for (size_t vi = 0; vi < sizeof Vs / sizeof *Vs; vi++) {
        const int V = Vs[vi];
        float *x = malloc(sizeof(float) * (size_t)V * R), *dx;
        cuk_sample_params p[R], *dp;
        double u[R], *du;
        int32_t *dout, *hout, *hout_dev, got[R];
        void *work;
        CK(cudaMalloc((void **)&dx, sizeof(float) * (size_t)V * R));
        CK(cudaMalloc((void **)&dp, sizeof p));
        CK(cudaMalloc((void **)&du, sizeof u));
        CK(cudaMalloc((void **)&dout, sizeof got));
        CK(cudaMalloc(&work, cuk_sample_work(V) * R));
        CK(cudaHostAlloc((void **)&hout, sizeof got, cudaHostAllocMapped));
        CK(cudaHostGetDevicePointer((void **)&hout_dev, hout, 0));
        int sampling = 0;
        for (int r = 0; r < R; r++) {
            gen(x + (size_t)r * V, V, (r * 5 + (int)vi) % D_N);
            p[r] = ps[(r + (int)vi) % np];
            u[r] = r % 3 == 0 ? unif() : us[r % NU];
            sampling |= p[r].temperature > 0.0f;
            hout[r] = -7;
        }
        CK(cudaMemcpy(dx, x, sizeof(float) * (size_t)V * R, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(dp, p, sizeof p, cudaMemcpyHostToDevice));
        CK(cudaMemcpy(du, u, sizeof u, cudaMemcpyHostToDevice));
        CHECK(cuk_sample_rows(dx, V, R, sampling, dp, du, dout, hout_dev, work, NULL) == 0, "cuk_sample_rows: %s",
              err_msg());
        dev_wait(NULL, "cuk_sample_rows");
        CK(cudaMemcpy(got, dout, sizeof got, cudaMemcpyDeviceToHost));
        for (int r = 0; r < R; r++) {
            celer_sampler_params sp;
            celer_sampler_params_default(&sp);
            sp.temperature = p[r].temperature;
            sp.top_k = p[r].top_k;
            sp.top_p = p[r].top_p;
            sp.min_p = p[r].min_p;
            sp.repeat_penalty = 1.0f;
            sp.presence_penalty = sp.frequency_penalty = 0.0f;
            sp.penalty_last_n = 0;
            celer_sampler *smp = celer_sampler_new(&sp, V);
            if (!smp) { CHECK(0, "celer_sampler_new: %s", err_msg()); continue; }
            const int32_t *ids;
            const float *probs;
            const int n = sample_candidates(smp, x + (size_t)r * V, &ids, &probs);
            const int32_t want = cpu_pick(ids, probs, n, u[r]);
            compared++;
            if (got[r] != want && mismatched++ < 20)
                printf("  rows mismatch: V %d row %d, T %g k %d p %g min_p %g, u %.17g: device %d, cpu %d\n", V, r,
                       p[r].temperature, p[r].top_k, p[r].top_p, p[r].min_p, u[r], got[r], want);
            host_mismatched += hout[r] != got[r];
            celer_sampler_free(smp);
        }
        CK(cudaFree(dx));
        CK(cudaFree(dp));
        CK(cudaFree(du));
        CK(cudaFree(dout));
        CK(cudaFree(work));
        CK(cudaFreeHost(hout));
        free(x);
    }
    printf("  rows: %ld rows compared, %ld mismatches, %ld host copies differing\n", compared, mismatched,
           host_mismatched);
    CHECK(compared > 0 && mismatched == 0, "%ld of %ld batched device tokens differ from the CPU's", mismatched, compared);
    CHECK(host_mismatched == 0, "%ld host copies differ from the batched device tokens", host_mismatched);
}

static void supported(void) {
    cuk_sample_params p = {0.0f, 0, 1.0f, 0.0f};
    CHECK(cuk_sample_supported(&p) == 1, "greedy, top_k off");
    p.temperature = -2.0f;
    p.top_k = 5000;
    p.top_p = NAN;
    CHECK(cuk_sample_supported(&p) == 1, "greedy ignores the filters");
    p = (cuk_sample_params){0.8f, 40, 0.95f, 0.05f};
    CHECK(cuk_sample_supported(&p) == 1, "defaults");
    p.top_k = 1;
    CHECK(cuk_sample_supported(&p) == 1, "top_k 1");
    p.top_k = CUK_SAMPLE_MAX_K;
    CHECK(cuk_sample_supported(&p) == 1, "top_k max");
    p.top_k = CUK_SAMPLE_MAX_K + 1;
    CHECK(cuk_sample_supported(&p) == 0, "top_k above max");
    p.top_k = 0;
    CHECK(cuk_sample_supported(&p) == 0, "top_k off");
    p.top_k = -3;
    CHECK(cuk_sample_supported(&p) == 0, "top_k negative");
    p.top_k = 40;
    p.top_p = 1.5f;
    p.min_p = 0.0f;
    CHECK(cuk_sample_supported(&p) == 1, "top_p above 1 is off");
    p.top_p = 0.0f;
    p.min_p = 1.0f;
    CHECK(cuk_sample_supported(&p) == 1, "top_p 0, min_p 1");
    p.min_p = 1.5f;
    CHECK(cuk_sample_supported(&p) == 0, "min_p above 1 (the CPU sampler refuses it)");
    p.min_p = NAN;
    CHECK(cuk_sample_supported(&p) == 0, "min_p NaN");
    p.min_p = 0.05f;
    p.top_p = NAN;
    CHECK(cuk_sample_supported(&p) == 0, "top_p NaN");
    p.top_p = 0.9f;
    p.temperature = NAN;
    CHECK(cuk_sample_supported(&p) == 0, "temperature NaN");
    CHECK(cuk_sample_supported(NULL) == 0, "NULL");

    /* the launcher refuses what it does not support, and a missing work buffer or draw */
    float *dx;
    int32_t *dout;
    double *du;
    CK(cudaMalloc((void **)&dx, 4 * 2000));
    CK(cudaMemset(dx, 0, 4 * 2000));
    CK(cudaMalloc((void **)&dout, 4));
    CK(cudaMalloc((void **)&du, 8));
    p = (cuk_sample_params){0.8f, 0, 0.9f, 0.05f};
    CHECK(cuk_sample(dx, 2000, &p, du, dout, NULL, NULL, NULL) == -1, "top_k off refused");
    CHECK_STR_HAS(err_msg(), "not supported");
    p.top_k = 40;
    CHECK(cuk_sample(dx, 2000, &p, du, dout, NULL, NULL, NULL) == -1, "no work buffer refused");
    CHECK(cuk_sample(dx, 2000, &p, NULL, dout, NULL, NULL, NULL) == -1, "no draw refused");
    CHECK(cuk_sample(dx, 0, &p, du, dout, NULL, NULL, NULL) == -1, "V 0 refused");
    p.temperature = 0.0f;
    CHECK(cuk_sample(dx, 2000, &p, du, dout, NULL, NULL, NULL) == 0, "greedy over 2000 needs no work buffer");
    CHECK(cuk_sample(dx, 20000, &p, du, dout, NULL, NULL, NULL) == -1, "greedy over 20000 needs the work buffer");
    dev_wait(NULL, "cuk_sample (greedy, V 2000)");
    CHECK(cuk_sample_work(128256) >= 16 * (size_t)128256, "work size");
    CK(cudaFree(dx));
    CK(cudaFree(dout));
    CK(cudaFree(du));
}

static int cmp_f(const void *a, const void *b) {
    float x = *(const float *)a, y = *(const float *)b;
    return x < y ? -1 : x > y;
}

static void bench_v(int V, int nconf) {
    float *x = malloc(sizeof(float) * V);
    for (int i = 0; i < V; i++) x[i] = (float)(3 * gauss());
    float *dx;
    void *work;
    double *du;
    int32_t *dout;
    CK(cudaMalloc((void **)&dx, sizeof(float) * V));
    CK(cudaMalloc(&work, cuk_sample_work(V)));
    CK(cudaMalloc((void **)&du, 8));
    CK(cudaMalloc((void **)&dout, 4));
    CK(cudaMemcpy(dx, x, sizeof(float) * V, cudaMemcpyHostToDevice));
    double u = 0.37;
    CK(cudaMemcpy(du, &u, 8, cudaMemcpyHostToDevice));
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    static const cuk_sample_params ps[] = {
        {0.8f, 40, 0.95f, 0.05f}, {0.8f, 40, 0.9f, 0.0f}, {0.8f, 40, 1.0f, 0.0f}, {0.0f, 40, 1.0f, 0.0f},
        {0.8f, 1024, 0.95f, 0.0f}};
    for (int c = 0; c < nconf && c < (int)(sizeof ps / sizeof *ps); c++) {
        float t[100];
        for (int r = 0; r < 5; r++) cuk_sample(dx, V, &ps[c], du, dout, NULL, work, NULL);
        for (int r = 0; r < 100; r++) {
            CK(cudaEventRecord(e0, NULL));
            cuk_sample(dx, V, &ps[c], du, dout, NULL, work, NULL);
            CK(cudaEventRecord(e1, NULL));
            dev_wait(e1, "cuk_sample (bench)");
            CK(cudaEventElapsedTime(&t[r], e0, e1));
        }
        qsort(t, 100, sizeof *t, cmp_f);
        printf("  bench: V %d gauss*3, T %g top_k %d top_p %g min_p %g: median %.1f us (min %.1f, max %.1f)\n", V,
               ps[c].temperature, ps[c].top_k, ps[c].top_p, ps[c].min_p, t[50] * 1e3, t[0] * 1e3, t[99] * 1e3);
    }
    CK(cudaEventDestroy(e0));
    CK(cudaEventDestroy(e1));
    CK(cudaFree(dx));
    CK(cudaFree(work));
    CK(cudaFree(du));
    CK(cudaFree(dout));
    free(x);
}

static void bench(void) {
    bench_v(128256, 5);
    bench_v(262144, 1);
    bench_v(32000, 1);
}

int main(int argc, char **argv) {
    int n = 0;
    if (cudaGetDeviceCount(&n) != cudaSuccess || n == 0) {
        printf("no CUDA device: nothing to test here\n");
        return harness_done();
    }
    int bench_only = argc > 1 && strcmp(argv[1], "--bench-only") == 0;
    quick = argc > 1 && strcmp(argv[1], "--quick") == 0;
    if (!bench_only) {
        us[0] = 0.0;
        us[1] = 1e-12;
        us[2] = nextafter(1.0, 0.0);
        us[3] = 1.0 - 1e-9;
        us[4] = 0.5;
        us[5] = 0.1;
        us[6] = 0.9;
        us[7] = unif();
        (void)cudaSetDeviceFlags(cudaDeviceMapHost); /* implied under UVA; an error here is harmless */
        (void)cudaGetLastError();
        CK(cudaMalloc((void **)&db.du, sizeof(double) * NU));
        CK(cudaMalloc((void **)&db.dout, sizeof(int32_t) * NU));
        CK(cudaHostAlloc((void **)&db.hout, sizeof(int32_t) * NU, cudaHostAllocMapped));
        CK(cudaHostGetDevicePointer((void **)&db.hout_dev, db.hout, 0));
        RUN(supported);
        for (int round = 0; round < (quick ? 1 : 3); round++) {
            if (round) us[7] = unif();
            if (round == 2) { us[2] = 1.0 - 1e-6; us[3] = 0.999; us[4] = 0.25; us[5] = 0.75; us[6] = 1e-6; }
            CK(cudaMemcpy(db.du, us, sizeof us, cudaMemcpyHostToDevice));
            RUN(against_cpu);
        }
        RUN(rows_against_cpu);
        CK(cudaFree(db.du));
        CK(cudaFree(db.dout));
        CK(cudaFreeHost(db.hout));
    }
    if (!quick) bench();
    return harness_done();
}
