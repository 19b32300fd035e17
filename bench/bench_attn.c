/* bench/bench_attn.c: micro-benchmark of the CPU attention kernel on one thread,
 * timed by the thread's CPU time (meaningful on a loaded machine): a causal prefill
 * of T query tokens over `depth` cached rows plus themselves, qwen3-0.6b's heads by
 * default, random q/k/v. Prints the median time, the multiply-adds (q.k and p.v over
 * the visible keys) per second and their ratio to the level's FMA peak.
 *   bench_attn [-T 512] [-d 0] [-H 16] [-G 8] [-D 128] [-r 5]
 * CELER_CPU=generic|avx2|avx512 picks the kernel level. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/cpu.h"
#include "base/mem.h"

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int T = 512, depth = 0, H = 16, G = 8, D = 128, reps = 5;
    for (int i = 1; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "-T")) T = v;
        else if (!strcmp(argv[i], "-d")) depth = v;
        else if (!strcmp(argv[i], "-H")) H = v;
        else if (!strcmp(argv[i], "-G")) G = v;
        else if (!strcmp(argv[i], "-D")) D = v;
        else if (!strcmp(argv[i], "-r")) reps = v;
        else { fprintf(stderr, "bench_attn: unknown flag %s\n", argv[i]); return 2; }
    }
    if (T < 1 || depth < 0 || H < 1 || G < 1 || H % G || D < 1 || reps < 1 || reps > 99) {
        fprintf(stderr, "bench_attn: bad sizes (T >= 1, d >= 0, H a multiple of G, 1 <= r <= 99)\n");
        return 2;
    }
    const int n = depth + T;
    float *q = mem_aligned(sizeof(float) * (size_t)T * H * D, "q");
    float *k = mem_aligned(sizeof(float) * (size_t)n * G * D, "k");
    float *v = mem_aligned(sizeof(float) * (size_t)n * G * D, "v");
    float *out = mem_aligned(sizeof(float) * (size_t)T * H * D, "out");
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)n);
    backend *b = backend_cpu_new(1, 0);
    if (!q || !k || !v || !out || !pos || !b) { fprintf(stderr, "bench_attn: out of memory\n"); return 1; }
    srand(1);
    for (long i = 0; i < (long)T * H * D; i++) q[i] = (float)rand() / RAND_MAX - 0.5f;
    for (long i = 0; i < (long)n * G * D; i++) k[i] = (float)rand() / RAND_MAX - 0.5f, v[i] = (float)rand() / RAND_MAX - 0.5f;
    for (int i = 0; i < n; i++) pos[i] = i;
    attn_kv kv = {k, v, pos, n, (long)G * D, KVT_F32, 0, NULL};
    attn_params p = {H, G, D, 0.0883883f, 0, 0, NULL};
    double t[99];
    for (int r = 0; r < reps; r++) {
        double t0 = cpu_now();
        cpu_attention(b, q, pos + depth, T, &kv, &p, out);
        t[r] = cpu_now() - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp);
    const double macs = 2.0 * H * D * ((double)T * depth + (double)T * (T + 1) / 2); /* q.k and p.v */
    const double peak = cpu_fma_peak(cpu_level(), 1);
    printf("attention T=%d depth=%d heads %d/%d dim %d, level %s: %.2f ms, %.1f GFLOP/s = %.0f%% of the %.0f GFLOP/s FMA peak (1 thread)\n",
           T, depth, H, G, D, cpu_level_name(cpu_level()), t[reps / 2] * 1e3, 2 * macs / t[reps / 2] * 1e-9,
           100 * 2 * macs / t[reps / 2] * 1e-9 / peak, peak);
    backend_free(b);
    free(q), free(k), free(v), free(out), free(pos);
    return 0;
}
