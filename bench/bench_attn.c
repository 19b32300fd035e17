/* bench/bench_attn.c: micro-benchmark of the CPU attention kernel: a causal prefill
 * (or, with small T, decode) of T query tokens over `depth` cached rows plus
 * themselves, qwen3-0.6b's heads by default, random q/k/v. Prints the median time,
 * the multiply-adds (q.k and p.v over the visible keys) per second and their ratio
 * to the level's FMA peak, and the KV bytes read per second (K and V of every row
 * once: what decode is bound by).
 *   bench_attn [-T 512] [-d 0] [-H 16] [-G 8] [-D 128] [-r 5] [-t 1] [-p 0] [-k f32|bf16]
 * -t 1 (the default) is timed by the thread's CPU time (meaningful on a loaded
 * machine); -t N > 1 runs on N threads and is timed by the wall clock (quiet
 * machines only). -p 1 reads the cache through a paged view (blocks of 64 rows in
 * reverse order, as a pool hands them out). -k bf16 keeps the cache in bf16 (half
 * the bytes; the rows are the same random values rounded). Decode at depth 4,096:
 *   bench_attn -T 1 -d 4096 -r 21
 * CELER_CPU=generic|avx2|avx512 picks the kernel level. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/cpu.h"
#include "base/mem.h"
#include "tensor/dtype.h"

static double cpu_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static double wall_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int T = 512, depth = 0, H = 16, G = 8, D = 128, reps = 5, threads = 1, paged = 0, dtype = KVT_F32;
    for (int i = 1; i + 1 < argc; i += 2) {
        int v = atoi(argv[i + 1]);
        if (!strcmp(argv[i], "-k")) {
            if (strcmp(argv[i + 1], "f32") && strcmp(argv[i + 1], "bf16")) {
                fprintf(stderr, "bench_attn: -k wants f32 or bf16, got '%s'\n", argv[i + 1]);
                return 2;
            }
            dtype = strcmp(argv[i + 1], "bf16") ? KVT_F32 : KVT_BF16;
        } else if (!strcmp(argv[i], "-T")) T = v;
        else if (!strcmp(argv[i], "-d")) depth = v;
        else if (!strcmp(argv[i], "-H")) H = v;
        else if (!strcmp(argv[i], "-G")) G = v;
        else if (!strcmp(argv[i], "-D")) D = v;
        else if (!strcmp(argv[i], "-r")) reps = v;
        else if (!strcmp(argv[i], "-t")) threads = v;
        else if (!strcmp(argv[i], "-p")) paged = v;
        else { fprintf(stderr, "bench_attn: unknown flag %s\n", argv[i]); return 2; }
    }
    if (T < 1 || depth < 0 || H < 1 || G < 1 || H % G || D < 1 || reps < 1 || reps > 99 || threads < 1) {
        fprintf(stderr, "bench_attn: bad sizes (T >= 1, d >= 0, H a multiple of G, 1 <= r <= 99, t >= 1)\n");
        return 2;
    }
    const int n = depth + T, nblk = (n + 63) / 64;
    const long rows = paged ? (long)nblk * 64 : n;
    float *q = mem_aligned(sizeof(float) * (size_t)T * H * D, "q");
    float *k = mem_aligned(sizeof(float) * (size_t)rows * G * D, "k");
    float *v = mem_aligned(sizeof(float) * (size_t)rows * G * D, "v");
    float *out = mem_aligned(sizeof(float) * (size_t)T * H * D, "out");
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)rows), *qpos = malloc(sizeof(int32_t) * (size_t)T);
    int32_t *blocks = malloc(sizeof(int32_t) * (size_t)nblk);
    backend *b = backend_cpu_new(threads, 0);
    if (!q || !k || !v || !out || !pos || !qpos || !blocks || !b) { fprintf(stderr, "bench_attn: out of memory\n"); return 1; }
    srand(1);
    for (long i = 0; i < (long)T * H * D; i++) q[i] = (float)((double)rand() / RAND_MAX) - 0.5f;
    for (long i = 0; i < rows * G * D; i++) k[i] = (float)((double)rand() / RAND_MAX) - 0.5f, v[i] = (float)((double)rand() / RAND_MAX) - 0.5f;
    for (int i = 0; i < nblk; i++) blocks[i] = nblk - 1 - i;
    for (long i = 0; i < rows; i++) pos[i] = 0;
    for (int r = 0; r < n; r++) pos[paged ? (long)blocks[r / 64] * 64 + r % 64 : r] = r;
    for (int t = 0; t < T; t++) qpos[t] = depth + t;
    if (dtype == KVT_BF16) /* in place: the first half of each buffer becomes its bf16 rows */
        for (long i = 0; i < rows * G * D; i++) ((uint16_t *)k)[i] = f32_to_bf16(k[i]), ((uint16_t *)v)[i] = f32_to_bf16(v[i]);
    attn_kv kv = {k, v, pos, n, (long)G * D, dtype, paged ? 64 : 0, paged ? blocks : NULL};
    attn_params p = {H, G, D, 0.0883883f, 0, 0, NULL};
    double t[99];
    for (int r = 0; r < reps; r++) {
        double t0 = threads > 1 ? wall_now() : cpu_now();
        cpu_attention(b, q, qpos, T, &kv, &p, out);
        t[r] = (threads > 1 ? wall_now() : cpu_now()) - t0;
    }
    qsort(t, (size_t)reps, sizeof *t, cmp);
    const double macs = 2.0 * H * D * ((double)T * depth + (double)T * (T + 1) / 2); /* q.k and p.v */
    const double peak = cpu_fma_peak(cpu_level(), threads), kvb = 2.0 * n * G * D * kv_dtype_size(dtype);
    printf("attention T=%d depth=%d heads %d/%d dim %d%s %s, level %s: %.3f ms, %.1f GFLOP/s = %.0f%% of the %.0f GFLOP/s "
           "FMA peak, KV read %.1f GB/s (%d thread%s, %s time)\n",
           T, depth, H, G, D, paged ? " paged" : "", dtype == KVT_BF16 ? "bf16" : "f32", cpu_level_name(cpu_level()), t[reps / 2] * 1e3,
           2 * macs / t[reps / 2] * 1e-9, 100 * 2 * macs / t[reps / 2] * 1e-9 / peak, peak, kvb / t[reps / 2] * 1e-9,
           threads, threads > 1 ? "s" : "", threads > 1 ? "wall" : "thread CPU");
    backend_free(b);
    free(q), free(k), free(v), free(out), free(pos), free(qpos), free(blocks);
    return 0;
}
