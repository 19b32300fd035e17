/* bench/bench_mm.c: micro-benchmark of the CPU matrix products on a real model shape
 * (qwen3-0.6b by default), random weights: decode (T=1 over every weight of every
 * layer plus the LM head, in model order, as one token does) against the measured
 * read bandwidth, and prefill (T=512 per projection) against the FMA peak.
 *   bench_mm [-t THREADS] [-f bf16|f16|f32|q4|q8|q2|q3|q5|q6|mxfp4] [-r REPS] [-p T] [-n TOKENS] [-c]
 *            [-P fast|exact] [-k]
 * -P fast runs the fast precision's products (backend/cpu/fast.c; CELER_CPU_INT8=1
 * for the int8 ones); -k packs the layer weights first, as a model load does
 * (backend/cpu/pack.c: bf16 panels at the avx512 level; with -P fast, 4-bit weights
 * interleaved by 16 rows where 4-bit decode takes int16, for q4r16 from 3 rows).
 * -c times by the calling thread's CPU time: with -t 1 it stays meaningful on a
 * loaded machine (the % of bandwidth then compares with an unloaded probe).
 * CELER_CPU=generic|avx2|avx512 picks the kernel level; the FMA peak of every level
 * the CPU runs is printed (cpu_fma_peak).
 * Prints one row per projection kind and a total, with medians over REPS. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/bandwidth.h"
#include "backend/cpu/cpu.h"
#include "base/mem.h"
#include "tensor/dtype.h"

/* -c: time by this thread's CPU time (with -t 1, robust to a loaded machine) */
static clockid_t clk = CLOCK_MONOTONIC;
static double now(void) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static uint64_t rng = 88172645463325252ull;
static uint64_t rnd64(void) { rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17; return rng; }

/* Random bytes, except 16-bit floats get a tame exponent (no NaN, inf or subnormal). */
static void fill(void *p, size_t n, int halves, int bf16) {
    uint64_t *q = p;
    for (size_t i = 0; i < n / 8; i++) {
        uint64_t v = rnd64();
        if (halves) {
            /* each 16-bit lane: keep sign and mantissa, set exponent to ~2^-3 */
            v &= bf16 ? 0x807f807f807f807full : 0x83ff83ff83ff83ffull;
            v |= bf16 ? 0x3e003e003e003e00ull : 0x3000300030003000ull;
        }
        q[i] = v;
    }
}

typedef struct {
    weight_fmt fmt;
    int bits, group;
    const char *name;
} fmt_spec;

static void *xalloc(size_t n) {
    void *p = mem_aligned(n ? n : 64, "bench");
    if (!p) { fprintf(stderr, "out of memory\n"); exit(1); }
    return p;
}

static weight make_weight(const fmt_spec *f, long rows, long cols) {
    weight w;
    memset(&w, 0, sizeof w);
    w.fmt = f->fmt;
    w.rows = rows;
    w.cols = cols;
    w.bits = f->bits;
    w.group = f->group;
    w.stype = SC_BF16;
    size_t n = (size_t)rows * (size_t)cols;
    switch (f->fmt) {
    case WF_F32: w.nbytes = n * 4; break;
    case WF_F16:
    case WF_BF16: w.nbytes = n * 2; break;
    default: w.nbytes = n * (size_t)f->bits / 8; break;
    }
    void *d = xalloc(w.nbytes);
    fill(d, w.nbytes, f->fmt == WF_F16 || f->fmt == WF_BF16, f->fmt == WF_BF16);
    w.data = d;
    if (f->fmt == WF_AFFINE) {
        size_t ng = n / (size_t)f->group;
        void *s = xalloc(ng * 2), *b = xalloc(ng * 2);
        fill(s, ng * 2, 1, 1);
        fill(b, ng * 2, 1, 1);
        w.scales = s;
        w.biases = b;
        w.nbytes += ng * 4;
    } else if (f->fmt == WF_MXFP4) {
        size_t ng = n / 32;
        uint8_t *s = xalloc(ng);
        for (size_t i = 0; i < ng; i++) s[i] = (uint8_t)(120 + rnd64() % 8);
        w.scales = s;
        w.nbytes += ng;
    }
    return w;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}
static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

/* qwen3-0.6b: hidden 1024, 28 layers, 16 q heads and 8 kv heads of 128, MLP 3072,
 * vocab 151936 (tied head). */
enum { K_Q, K_K, K_V, K_O, K_GATE, K_UP, K_DOWN, K_HEAD, NK };
static const char *kname[NK] = {"q_proj", "k_proj", "v_proj", "o_proj", "gate", "up", "down", "lm_head"};
static const long kshape[NK][2] = {{2048, 1024}, {1024, 1024}, {1024, 1024}, {1024, 2048},
                                   {3072, 1024}, {3072, 1024}, {1024, 3072}, {151936, 1024}};
#define LAYERS 28

int main(int argc, char **argv) {
    int threads = 2, reps = 5, prefill_T = 512, tokens = 3, fast = 0, pack = 0;
    const char *fname = "bf16";
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-f") && i + 1 < argc) fname = argv[++i];
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-p") && i + 1 < argc) prefill_T = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) tokens = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-c")) clk = CLOCK_THREAD_CPUTIME_ID;
        else if (!strcmp(argv[i], "-P") && i + 1 < argc) fast = !strcmp(argv[++i], "fast");
        else if (!strcmp(argv[i], "-k")) pack = 1;
        else { fprintf(stderr, "usage: bench_mm [-t THREADS] [-f FORMAT] [-r REPS] [-p T] [-n TOKENS] [-c] [-P fast|exact] [-k]\n"); return 2; }
    }
    const fmt_spec fmts[] = {{WF_BF16, 0, 0, "bf16"}, {WF_F16, 0, 0, "f16"}, {WF_F32, 0, 0, "f32"},
                             {WF_AFFINE, 4, 64, "q4"}, {WF_AFFINE, 8, 64, "q8"}, {WF_AFFINE, 2, 64, "q2"},
                             {WF_AFFINE, 3, 64, "q3"}, {WF_AFFINE, 5, 64, "q5"}, {WF_AFFINE, 6, 64, "q6"},
                             {WF_MXFP4, 4, 32, "mxfp4"}};
    const fmt_spec *f = NULL;
    for (size_t i = 0; i < sizeof fmts / sizeof fmts[0]; i++)
        if (!strcmp(fmts[i].name, fname)) f = &fmts[i];
    if (!f) { fprintf(stderr, "unknown format %s\n", fname); return 2; }

    double bw = cpu_read_bandwidth(threads, (size_t)1 << 30);
    double peaks[3] = {-1, -1, -1};
    for (int l = 0; l <= cpu_level_hw(); l++) peaks[l] = cpu_fma_peak(l, threads);
    double peak = peaks[cpu_level()];
    backend *be = backend_cpu_new(threads, 3072);
    if (!be) { fprintf(stderr, "backend_cpu_new failed\n"); return 1; }

    /* every weight of the model, so decode streams from memory as it does for real */
    weight *ws = calloc(LAYERS * 7 + 1, sizeof *ws);
    for (int l = 0; l < LAYERS; l++)
        for (int k = 0; k < 7; k++) ws[l * 7 + k] = make_weight(f, kshape[k][0], kshape[k][1]);
    ws[LAYERS * 7] = make_weight(f, kshape[K_HEAD][0], kshape[K_HEAD][1]);
    be->fast = fast;
    for (int i = 0; pack && i < LAYERS * 7; i++)
        if ((fast && mm_q4r16_eligible(&ws[i]) && mm_q4_decode_int16() ? mm_pack_q4r16(&ws[i], NULL) : mm_pack_weight(&ws[i], NULL)) != 0) {
            fprintf(stderr, "packing failed\n");
            return 1;
        }
    long maxT = prefill_T > 4 ? prefill_T : 4;
    float *x = xalloc((size_t)maxT * 3072 * 4), *y = xalloc((size_t)maxT * 151936 * 4);
    for (long i = 0; i < maxT * 3072; i++) x[i] = (float)((double)(rnd64() >> 11) / 9007199254740992.0 - 0.5);

    printf("format %s, %d threads, CPU kernels %s, read bandwidth %.2f GB/s (best of 6 passes over 1 GiB)\n"
           "FMA peak, %d threads (register-only loop, thread CPU time): generic %.0f, avx2 %.0f, avx512 %.0f GFLOP/s\n",
           f->name, threads, cpu_level_name(cpu_level()), bw, threads, peaks[0], peaks[1], peaks[2]);
    mm_fast fd, fp;
    const int fdk = fast && mm_fast_select_level(&ws[0], 1, cpu_level(), &fd);
    const int fpk = fast && mm_fast_select_level(&ws[0], prefill_T, cpu_level(), &fp);
    printf("precision %s, layer weights %s; decode kernel: %s; prefill kernel (T=%d): %s\n", fast ? "fast" : "exact",
           ws[0].packed ? "packed" : "not packed", mm_kernel_name(fdk ? fd.k : mm_select(&ws[0], 1)), prefill_T,
           mm_kernel_name(fpk ? fp.k : mm_select(&ws[0], prefill_T)));

    /* decode: `tokens` tokens per rep; per kind, seconds per token */
    double *kt = calloc((size_t)reps * NK, sizeof(double)), *tot = calloc((size_t)reps, sizeof(double));
    size_t kbytes[NK] = {0}, all_bytes = 0;
    for (int i = 0; i < LAYERS * 7 + 1; i++) {
        int k = i == LAYERS * 7 ? K_HEAD : i % 7;
        kbytes[k] += ws[i].nbytes;
        all_bytes += ws[i].nbytes;
    }
    for (int r = -1; r < reps; r++) { /* rep -1 warms up the pages */
        double t0 = now();
        for (int n = 0; n < tokens; n++)
            for (int i = 0; i < LAYERS * 7 + 1; i++) {
                int k = i == LAYERS * 7 ? K_HEAD : i % 7;
                double a = now();
                be->ops->matmul(be, &ws[i], x, y, 1);
                if (r >= 0) kt[k * reps + r] += (now() - a) / tokens;
            }
        if (r >= 0) tot[r] = (now() - t0) / tokens;
    }
    printf("\ndecode T=1 (%d tokens x %d reps, medians)\n%-8s %12s %10s %8s %8s\n", tokens, reps, "weight", "MB/token",
           "ms/token", "GB/s", "% bw");
    for (int k = 0; k < NK; k++) {
        double t = median(kt + k * reps, reps);
        printf("%-8s %12.1f %10.3f %8.2f %7.1f%%\n", kname[k], kbytes[k] / 1e6, t * 1e3, kbytes[k] / t / 1e9,
               100.0 * kbytes[k] / t / 1e9 / bw);
    }
    double tt = median(tot, reps), tbest = tot[0]; /* median() sorted tot */
    printf("%-8s %12.1f %10.3f %8.2f %7.1f%%   (%.1f tok/s matmuls only)\n", "total", all_bytes / 1e6, tt * 1e3,
           all_bytes / tt / 1e9, 100.0 * all_bytes / tt / 1e9 / bw, 1.0 / tt);
    printf("%-8s %12.1f %10.3f %8.2f %7.1f%%   (best rep: on a shared machine, the least disturbed)\n", "best",
           all_bytes / 1e6, tbest * 1e3, all_bytes / tbest / 1e9, 100.0 * all_bytes / tbest / 1e9 / bw);

    if (prefill_T > 0) {
        printf("\nprefill T=%d (%d reps, medians; %% of the %.0f GFLOP/s measured peak and of the documented 190)\n"
               "%-8s %10s %10s %8s %8s\n", prefill_T, reps, peak, "weight", "ms", "GFLOP/s", "% peak", "% 190");
        double ltot = 0, lflop = 0, lbest = 0;
        for (int k = 0; k < 7; k++) {
            double *v = calloc((size_t)reps, sizeof(double));
            for (int r = -1; r < reps; r++) {
                double a = now();
                be->ops->matmul(be, &ws[k], x, y, prefill_T);
                if (r >= 0) v[r] = now() - a;
            }
            double t = median(v, reps), fl = 2.0 * kshape[k][0] * kshape[k][1] * prefill_T;
            ltot += t;
            lbest += v[0];
            lflop += fl;
            printf("%-8s %10.2f %10.1f %7.1f%% %7.1f%%\n", kname[k], t * 1e3, fl / t / 1e9, 100.0 * fl / t / 1e9 / peak,
                   100.0 * fl / t / 1e9 / 190.0);
            free(v);
        }
        printf("%-8s %10.2f %10.1f %7.1f%% %7.1f%%   (one layer)\n", "layer", ltot * 1e3, lflop / ltot / 1e9,
               100.0 * lflop / ltot / 1e9 / peak, 100.0 * lflop / ltot / 1e9 / 190.0);
        printf("%-8s %10.2f %10.1f %7.1f%% %7.1f%%   (best reps)\n", "best", lbest * 1e3, lflop / lbest / 1e9,
               100.0 * lflop / lbest / 1e9 / peak, 100.0 * lflop / lbest / 1e9 / 190.0);
    }
    backend_free(be);
    return 0;
}
