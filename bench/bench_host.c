/* bench/bench_host.c: micro-benchmark of the host-side work of a decode step that is
 * not a product: the greedy argmax over a vocabulary of logits (sample_argmax) and the
 * 4-bit decode product's activation prep (mm_q4dot_prep_row, where the processor has
 * AVX512_BF16). Medians of REPS timed batches of calls, wall clock.
 *   bench_host [-v VOCAB] [-r REPS]   (default: 151,936, qwen3's vocabulary; 7 reps) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/cpu.h"
#include "engine/sample.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    const double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

/* The median over reps batches of `calls` calls of fn(ctx), microseconds a call. */
static double time_us(int reps, int calls, void (*fn)(void *), void *ctx) {
    double t[64];
    for (int r = 0; r < reps; r++) {
        const double a = now();
        for (int c = 0; c < calls; c++) fn(ctx);
        t[r] = (now() - a) / calls * 1e6;
    }
    qsort(t, (size_t)reps, sizeof t[0], cmp_d);
    return t[reps / 2];
}

typedef struct {
    const float *l;
    int n;
    volatile int32_t sink;
    const weight *w;
    void *out;
} job;

static void run_argmax(void *p) {
    job *j = p;
    j->sink += sample_argmax(j->l, j->n);
}

static void run_prep(void *p) {
    job *j = p;
    mm_q4dot_prep_row(j->w, j->l, j->out);
}

int main(int argc, char **argv) {
    int vocab = 151936, reps = 7;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-v") && i + 1 < argc) vocab = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else { fprintf(stderr, "usage: bench_host [-v VOCAB] [-r REPS]\n"); return 2; }
    }
    if (vocab < 1 || reps < 1 || reps > 64) { fprintf(stderr, "bench_host: bad -v or -r\n"); return 2; }
    float *l = malloc((size_t)vocab * sizeof *l);
    if (!l) return 1;
    srand(1);
    for (int i = 0; i < vocab; i++) l[i] = (float)rand() / (float)RAND_MAX;
    job j = {l, vocab, 0, NULL, NULL};
    printf("sample_argmax, %d logits: %.1f us a call\n", vocab, time_us(reps, 200, run_argmax, &j));
    if (cpu_has_avx512_bf16()) {
        for (int n = 1024; n <= 4096; n *= 2) {
            weight w;
            memset(&w, 0, sizeof w);
            w.fmt = WF_AFFINE;
            w.bits = 4;
            w.group = 64;
            w.cols = n;
            w.rows = 64;
            void *out = malloc((size_t)mm_q4dot_row_bytes(&w));
            if (!out) return 1;
            j.w = &w;
            j.out = out;
            printf("mm_q4dot_prep_row, %d columns: %.2f us a row\n", n, time_us(reps, 20000, run_prep, &j));
            free(out);
        }
    } else {
        printf("mm_q4dot_prep_row: not run (no AVX512_BF16)\n");
    }
    free(l);
    return 0;
}
