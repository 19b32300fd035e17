/* bench/bench_tokenizer.c: tokenizer load time and single-thread encode throughput.
 *   bench_tokenizer [-r REPS] [-m MB] DIR...   (default: the four fixture tokenizers)
 * Load: the best and the median of REPS opens (wall clock and this process's CPU time:
 * on a loaded machine the CPU time is the figure that does not depend on neighbours).
 * Encode: MB of deterministic mixed text (English prose, C and Python code, Japanese,
 * Chinese and Korean, numbers, emoji) built from a fixed seed, encoded in one call, then
 * decoded and checked to round-trip.
 * Build: make && cc -O2 -Iinclude -Isrc bench/bench_tokenizer.c build/libceler.a \
 *        -ljansson -lpcre2-8 -lutf8proc -lm -pthread -o build/bench_tokenizer */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "celer.h"
#include "celer_tokenizer.h"

static double wall(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}
static double cpu(void) {
    struct timespec t;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

static const char *const english[] = {"the", "quick", "brown", "fox", "jumps", "over", "lazy", "dog", "cache", "tokens",
    "model", "inference", "memory", "bandwidth", "decode", "prefill", "attention", "window", "rotating", "layer",
    "Hello", "World", "engineering", "throughput", "latency", "benchmark", "because", "however", "therefore", "it's",
    "don't", "they'll", "we'd", "I'm", "supercalifragilistic", "naïve", "café", "résumé", "Zürich", "São", "Paulo"};
static const char *const code[] = {"int main(void) {\n", "    return 0;\n", "}\n", "def f(x):\n", "    return x ** 2\n",
    "for (int i = 0; i < n; i++) {\n", "        sum += a[i] * b[i];\n", "import numpy as np\n", "x = np.zeros((4, 4))\n",
    "if (err != NULL) { fprintf(stderr, \"%s\\n\", err); }\n", "class Tokenizer:\n", "    def __init__(self):\n",
    "#include <stdio.h>\n", "\t/* tabs and comments */\n", "const auto& [k, v] = *it;\n", "SELECT id FROM t WHERE x > 3;\n"};
static const char *const cjk[] = {"日本語のテキストです。", "東京は日本の首都です。", "中文句子，包含标点。", "我们今天学习机器学习。",
    "한국어 문장입니다.", "안녕하세요!", "速い茶色の狐が怠惰な犬を飛び越える。", "数据", "模型推理", "キャッシュ"};
static const char *const misc[] = {"1234567", "3.14159", "2026-11-30", "$100.00", "50%", "🙂", "🚀", "👩‍👩‍👧", "—", "…",
    "https://example.com/path?q=1", "email@example.com", "\n\n", "   ", "(", ")", "!", "?", ",", "."};

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t next_rand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}

static char *mixed_text(size_t want, size_t *len) {
    char *s = malloc(want + 256);
    size_t n = 0;
    while (n < want) {
        uint32_t k = next_rand() % 100;
        const char *w;
        if (k < 55) w = english[next_rand() % (sizeof english / sizeof *english)];
        else if (k < 75) w = code[next_rand() % (sizeof code / sizeof *code)];
        else if (k < 88) w = cjk[next_rand() % (sizeof cjk / sizeof *cjk)];
        else w = misc[next_rand() % (sizeof misc / sizeof *misc)];
        size_t l = strlen(w);
        memcpy(s + n, w, l);
        n += l;
        if (k < 55) s[n++] = (next_rand() % 12) ? ' ' : '\n';
    }
    *len = n;
    return s;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

int main(int argc, char **argv) {
    int reps = 5;
    double mb = 10;
    const char *dirs[16];
    int nd = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-r") && i + 1 < argc) reps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-m") && i + 1 < argc) mb = atof(argv[++i]);
        else if (nd < 16) dirs[nd++] = argv[i];
    }
    if (!nd) {
        static const char *const def[] = {"tests/fixtures/tokenizers/gemma3", "tests/fixtures/tokenizers/gptoss",
                                          "tests/fixtures/tokenizers/llama3", "tests/fixtures/tokenizers/qwen3"};
        for (int i = 0; i < 4; i++) dirs[nd++] = def[i];
    }
    if (reps < 1) reps = 1;
    size_t tlen;
    char *text = mixed_text((size_t)(mb * 1e6), &tlen);
    printf("| tokenizer | load wall ms (best / median) | load CPU ms (best) | encode MB/s wall | encode MB/s CPU | tokens | bytes/token | round trip |\n");
    printf("|---|---:|---:|---:|---:|---:|---:|---|\n");
    for (int d = 0; d < nd; d++) {
        double *lw = malloc((size_t)reps * sizeof *lw), best_cpu = 1e9;
        celer_tokenizer *t = NULL;
        for (int r = 0; r < reps; r++) {
            double w0 = wall(), c0 = cpu();
            celer_tokenizer *x = celer_tokenizer_open(dirs[d]);
            double w1 = wall(), c1 = cpu();
            if (!x) { fprintf(stderr, "%s: %s\n", dirs[d], celer_last_error()); return 1; }
            lw[r] = (w1 - w0) * 1e3;
            if ((c1 - c0) * 1e3 < best_cpu) best_cpu = (c1 - c0) * 1e3;
            if (t) celer_tokenizer_free(t);
            t = x;
        }
        qsort(lw, (size_t)reps, sizeof *lw, cmp_d);
        int32_t *ids;
        double w0 = wall(), c0 = cpu();
        int n = celer_tokenize(t, text, tlen, 0, &ids);
        double w1 = wall(), c1 = cpu();
        size_t dl = 0;
        char *back = n >= 0 ? celer_detokenize(t, ids, (size_t)n, 0, &dl) : NULL;
        int same = back && dl == tlen && !memcmp(back, text, tlen);
        const char *name = strrchr(dirs[d], '/') ? strrchr(dirs[d], '/') + 1 : dirs[d];
        printf("| %s | %.0f / %.0f | %.0f | %.1f | %.1f | %d | %.2f | %s |\n", name, lw[0], lw[reps / 2], best_cpu,
               tlen / 1e6 / (w1 - w0), tlen / 1e6 / (c1 - c0), n, (double)tlen / n, same ? "yes" : "NO");
        fflush(stdout);
        free(back);
        free(ids);
        free(lw);
        celer_tokenizer_free(t);
    }
    printf("\ntext: %.1f MB mixed English, code, CJK, numbers and emoji (seeded, single thread)\n", tlen / 1e6);
    free(text);
    return 0;
}
