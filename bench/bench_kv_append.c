/* bench/bench_kv_append.c: host time of one decode append into a rotating KV cache
 * in its steady state (every append drops the oldest row and writes the new one in
 * place), the path a batched GPU step takes for every sequence and rotating layer
 * (gemma3-4b at 32 sequences: 928 appends a step).
 *   bench_kv_append [-w WINDOW] [-k KV_HEADS] [-d HEAD_DIM] [-n APPENDS]
 * Defaults: gemma3-4b's sliding layers (window 1024, 4 KV heads of 256), 20,000
 * appends after a 2,048-token prompt in 512-row chunks and 100 warm-up appends.
 * Prints microseconds per append (median of 5 timings); the row copy (host memory,
 * float32) is included. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "kv/cache.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int W = 1024, nkv = 4, hd = 256, N = 20000;
    for (int i = 1; i < argc; i++) {
        if (i + 1 < argc && !strcmp(argv[i], "-w")) W = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "-k")) nkv = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "-d")) hd = atoi(argv[++i]);
        else if (i + 1 < argc && !strcmp(argv[i], "-n")) N = atoi(argv[++i]);
        else {
            fprintf(stderr, "usage: bench_kv_append [-w WINDOW] [-k KV_HEADS] [-d HEAD_DIM] [-n APPENDS]\n");
            return 2;
        }
    }
    if (W < 2 || nkv < 1 || hd < 1 || N < 1) {
        fprintf(stderr, "bench_kv_append: window >= 2, heads, head dim and appends >= 1\n");
        return 2;
    }
    const int chunk = 512, row = nkv * hd;
    kv_cache *c = kv_rotating_new(nkv, hd, W, 0, 1 << 30, chunk);
    float *k = calloc((size_t)row * chunk, sizeof *k), *v = calloc((size_t)row * chunk, sizeof *v);
    int32_t *pos = malloc(chunk * sizeof *pos);
    if (!c || !k || !v || !pos) {
        fprintf(stderr, "bench_kv_append: out of memory\n");
        return 1;
    }
    c->inplace = 1;
    int32_t p = 0;
    for (int ch = 0; ch < 4; ch++, p += chunk) {
        for (int i = 0; i < chunk; i++) pos[i] = p + i;
        if (kv_append(c, k, v, pos, chunk) != 0) return 1;
    }
    for (int i = 0; i < 100; i++, p++) {
        pos[0] = p;
        if (kv_append(c, k, v, pos, 1) != 0) return 1;
    }
    double t[5];
    for (int r = 0; r < 5; r++) {
        const double t0 = now();
        for (int i = 0; i < N; i++, p++) {
            pos[0] = p;
            if (kv_append(c, k, v, pos, 1) != 0) return 1;
        }
        t[r] = (now() - t0) / N * 1e6;
    }
    qsort(t, 5, sizeof *t, cmp_d);
    printf("rotating window %d, %d x %d: %d rows held, %.2f us per decode append (median of 5 x %d; %.2f..%.2f)\n", W,
           nkv, hd, c->n, t[2], N, t[0], t[4]);
    kv_free(c);
    free(k);
    free(v);
    free(pos);
    return 0;
}
