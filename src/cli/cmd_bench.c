/* cli/cmd_bench.c: `celer bench`: llama-bench-style prefill (ppN) and decode (tgN)
 * throughput, mean +- stddev over repetitions, with each figure beside its limit:
 * decode as weight-read GB/s against the read bandwidth measured in the same run,
 * prefill as GFLOP/s of the layers' matrix products; the CPU kernel level in use
 * (celer_cpu_kernels) is printed with them. With -npl LIST it runs the
 * llama-batched-bench table instead (bench_batched.c). */
#include <math.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "celer.h"
#include "cli/args.h"
#include "cli/bench_batched.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/load.h"

static const opt_spec opts[] = {
    {"--model", "-m", "DIR|ORG/NAME", "checkpoint directory, or a hub name in the Hugging Face cache (default: the embedded default model)"},
    {"--n-prompt", "-p", "N", "prompt tokens for the prefill test (default 512; 0 skips it); with -npl a list"},
    {"--n-gen", "-n", "N", "generated tokens for the decode test (default 128; 0 skips it); with -npl a list"},
    {"--n-parallel", "-npl", "LIST", "llama-batched-bench mode: sequences decoded together, e.g. 1,8,32 (docs/benchmarks/cpu-batched.md)"},
    {"--ctx-size", "-c", "N", "with -npl: KV tokens over all sequences, B x (PP + TG) at most (default: the model's context)"},
    {"--batch-size", "-b", "N", "with -npl: most token rows per forward (default 512)"},
    {"--repetitions", "-r", "N", "repetitions of each test (default 5; with -npl 1, the median is shown)"},
    {"--n-depth", "-d", "N", "context depth: tokens already in the cache before each test (default 0)"},
    {"--threads", "-t", "N", "CPU threads (default: all cores)"},
    {"--device", NULL, "DEV", "cpu, cuda, cuda:N or auto (default auto: the GPU when one is present, else the CPU)"},
    {"--synth", NULL, "NAME", "random weights of a named shape (celer synth --help lists them) made in GPU memory: no checkpoint is read"},
    {"--output", "-o", "FMT", "md (default) or json"},
};

double bench_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    char name[16];
    int n_prompt, n_gen;
    double *ts;           /* [reps] tokens per second */
    double mean, sd;
} bench_test;

/* One timed run: a fresh context holding `depth` tokens (untimed), then the prompt in
 * one batch, or n_gen tokens generated greedily after a one-token prompt (n_gen
 * forwards through the generation loop: on a GPU, the pipelined one with sampling
 * on the device). */
static double run_once(celer_model *m, int vocab, int depth, int n_prompt, int n_gen, unsigned *seed) {
    int n = n_prompt ? n_prompt : n_gen;
    int32_t *tok = malloc((size_t)(n + depth) * sizeof *tok);
    int batch = n_prompt > 512 ? n_prompt : 512;
    celer_session *s = tok ? celer_session_new(m, depth + n + 1, batch) : NULL;
    celer_sampler_params sp;
    celer_sampler_params_default(&sp); /* temperature 0: greedy (made here, outside the timing) */
    celer_sampler *smp = s ? celer_sampler_new(&sp, vocab) : NULL;
    double dt = -1;
    if (smp) {
        for (int i = 0; i < n + depth; i++) tok[i] = (int32_t)(rand_r(seed) % (unsigned)vocab);
        if (depth && celer_session_eval(s, tok + n, depth, NULL, 0) != 0) goto out;
        double t0 = bench_now();
        int rc = 0;
        if (n_prompt) rc = celer_session_eval(s, tok, n_prompt, NULL, 0);
        else rc = celer_generate(s, smp, tok, 1, n_gen, -1, NULL, NULL) == n_gen ? 0 : -1;
        if (rc == 0) dt = bench_now() - t0;
    }
out:
    celer_sampler_free(smp);
    celer_session_free(s);
    free(tok);
    return dt;
}

/* The mean KV bytes a tg test's forwards read: forward i (the prompt token, then each
 * generated token fed back) attends over the depth + i + 1 tokens its caches hold. */
double bench_mean_kv_bytes(const celer_model *m, long depth, int n_gen) {
    double sum = 0;
    for (int i = 0; i < n_gen; i++) sum += (double)celer_model_kv_bytes(m, (int)depth + i + 1);
    return n_gen > 0 ? sum / n_gen : 0;
}

static void stats(bench_test *t, int reps) {
    double sum = 0, sq = 0;
    for (int i = 0; i < reps; i++) sum += t->ts[i];
    t->mean = sum / reps;
    for (int i = 0; i < reps; i++) sq += (t->ts[i] - t->mean) * (t->ts[i] - t->mean);
    t->sd = reps > 1 ? sqrt(sq / (reps - 1)) : 0;
}

void bench_model_label(const celer_model_info *in, char *buf, size_t n) {
    char fmt[32];
    snprintf(fmt, sizeof fmt, "%s", in->format);
    for (char *p = fmt; *p; p++) if (*p >= 'a' && *p <= 'z') *p = (char)(*p - 32);
    double b = (double)in->n_params / 1e9;
    if (b >= 1) snprintf(buf, n, "%s %.1fB %s", in->model_type, b, fmt);
    else snprintf(buf, n, "%s %.0fM %s", in->model_type, b * 1e3, fmt);
}

int cmd_bench(int argc, char **argv) {
    args a = {"bench", "[-m DIR|ORG/NAME] [-p 512] [-n 128] [-d 0] [-r 5] [-t N] [-o md|json]  |  -npl 1,8,32 [-p 512,..] [-n 128,..] [-c N]",
              "Measures prefill (ppN) and decode (tgN) speed, llama-bench style, against the measured limits;\n"
              "with -npl, prompt and generation throughput of N sequences decoded together, llama-batched-bench style.",
              opts, (int)(sizeof opts / sizeof opts[0]), {0}};
    int rc = args_parse(&a, argc, argv);
    if (rc) return rc == 1 ? 0 : 2;
    const int npl = args_get(&a, "--n-parallel") != NULL;
    const char *only = npl ? NULL : args_get(&a, "--ctx-size") ? "-c" : args_get(&a, "--batch-size") ? "-b" : NULL;
    if (only) { args_usage_error(&a, "flag '%s' belongs to the batched mode: give -npl LIST with it", only); return 2; }
    if (cli_device_flag(&a)) return 2;
    int mst; /* the exit status when there is no model */
    char defbuf[PATH_MAX], synth_dir[PATH_MAX] = "";
    const char *synth = args_get(&a, "--synth"), *fmt = args_get(&a, "--output"), *dir;
    if (synth) {
        if (args_get(&a, "--model")) { args_usage_error(&a, "give -m DIR or --synth NAME, not both"); return 2; }
        if (cli_synth_dir("bench", synth, synth_dir, sizeof synth_dir)) return 1;
        dir = synth_dir;
    } else if (!(dir = cli_model_arg(&a, defbuf, sizeof defbuf, &mst))) {
        return mst;
    }
    if (npl) { /* llama-batched-bench's mode, on the same model (--synth too) */
        int r = bench_batched(&a, dir);
        if (synth_dir[0]) cli_synth_clean(synth_dir);
        return r;
    }
    long np, ng, reps, threads, depth;
    if (args_int(&a, "--n-prompt", 512, 0, 1 << 20, &np) || args_int(&a, "--n-gen", 128, 0, 1 << 20, &ng) ||
        args_int(&a, "--n-depth", 0, 0, 1 << 20, &depth) ||
        args_int(&a, "--repetitions", 5, 1, 1000, &reps) || args_int(&a, "--threads", 0, 1, 1024, &threads))
        return 2;
    if (!fmt) fmt = "md";
    if (strcmp(fmt, "md") != 0 && strcmp(fmt, "json") != 0) { args_usage_error(&a, "-o wants md or json, got '%s'", fmt); return 2; }
    int tty = cli_stderr_is_tty();
    celer_model *m = cli_model_open("bench", dir, (int)threads, 0);
    if (synth_dir[0]) cli_synth_clean(synth_dir); /* the mapping outlives the names */
    if (!m) { cli_error("bench", "%s", celer_last_error()); return 1; }
    celer_model_info in;
    celer_model_get_info(m, &in);
    int gpu = strcmp(in.backend, "CPU") != 0;
    if (tty) fprintf(stderr, "bench: measuring %s bandwidth\n", gpu ? "device copy" : "read");
    double bw = celer_model_bandwidth(m);
    /* the prefill ceiling: the FMA peak of the CPU kernel level in use (CPU only) */
    double peak = !gpu && np ? celer_cpu_fma_peak(in.threads) : -1;
    char bw_what[64];
    if (gpu) snprintf(bw_what, sizeof bw_what, "device copy bandwidth (%s, measured now)", in.backend);
    else snprintf(bw_what, sizeof bw_what, "read bandwidth (measured now, %d threads)", in.threads);

    bench_test tests[2];
    int nt = 0;
    if (np) { tests[nt] = (bench_test){.n_prompt = (int)np}; snprintf(tests[nt].name, 16, "pp%ld", np); nt++; }
    if (ng) { tests[nt] = (bench_test){.n_gen = (int)ng}; snprintf(tests[nt].name, 16, "tg%ld", ng); nt++; }
    for (int t = 0; t < nt && depth; t++) { /* llama-bench's spelling of a test at depth */
        size_t k = strlen(tests[t].name);
        snprintf(tests[t].name + k, sizeof tests[t].name - k, " @ d%ld", depth);
    }
    unsigned seed = 42;
    int status = 0;
    for (int t = 0; t < nt && status == 0; t++) {
        bench_test *bt = &tests[t];
        bt->ts = calloc((size_t)reps, sizeof *bt->ts);
        int n = bt->n_prompt ? bt->n_prompt : bt->n_gen;
        if (!bt->ts || run_once(m, in.vocab_size, (int)depth, bt->n_prompt ? bt->n_prompt : 0, bt->n_gen > 16 ? 16 : bt->n_gen, &seed) < 0) {
            cli_error("bench", "%s", bt->ts ? celer_last_error() : "out of memory");
            status = 1;
            break;
        }
        for (int r = 0; r < reps; r++) {
            if (tty) fprintf(stderr, "\rbench: %s run %d/%ld ", bt->name, r + 1, reps);
            double dt = run_once(m, in.vocab_size, (int)depth, bt->n_prompt, bt->n_gen, &seed);
            if (dt <= 0) { cli_error("bench", "%s", celer_last_error()); status = 1; break; }
            bt->ts[r] = n / dt;
        }
        stats(bt, (int)reps);
    }
    if (tty) fprintf(stderr, "\r%40s\r", "");
    if (status == 0) {
        char label[96];
        bench_model_label(&in, label, sizeof label);
        double gib = (double)in.weight_bytes / (1024.0 * 1024 * 1024);
        double flops = celer_model_layer_flops_per_token(m);
        if (strcmp(fmt, "md") == 0) {
            printf("| model                          |       size |     params | backend    | threads |            test |                  t/s |\n");
            printf("| ------------------------------ | ---------: | ---------: | ---------- | ------: | --------------: | -------------------: |\n");
            for (int t = 0; t < nt; t++) {
                char tsb[48];
                snprintf(tsb, sizeof tsb, "%.2f ± %.2f", tests[t].mean, tests[t].sd);
                printf("| %-30s | %6.2f GiB | %8.2f B | %-10s | %7d | %15s | %20s |\n", label, gib, (double)in.n_params / 1e9,
                       in.backend, in.threads, tests[t].name, tsb);
            }
            printf("\n%s: %.1f GB/s\n", bw_what, bw);
            printf("CPU kernels: %s (CELER_CPU forces generic, avx2 or avx512)\n", celer_cpu_kernels());
            for (int t = 0; t < nt; t++) {
                const bench_test *bt = &tests[t];
                if (bt->n_gen) {
                    double bytes = (double)in.weight_bytes + bench_mean_kv_bytes(m, depth, bt->n_gen);
                    double gbs = bytes * bt->mean / 1e9;
                    printf("%s: %.3f GB read per token (weights + mean KV) -> %.1f GB/s = %.0f%% of the %s bandwidth\n",
                           bt->name, bytes / 1e9, gbs, 100 * gbs / bw, gpu ? "copy" : "read");
                } else {
                    printf("%s: %.2f GFLOP per token (layer matmuls) -> %.1f GFLOP/s", bt->name, flops / 1e9,
                           flops * bt->mean / 1e9);
                    if (peak > 0)
                        printf(" = %.0f%% of the %.0f GFLOP/s FMA peak (%s, %d threads, measured now)",
                               100 * flops * bt->mean / 1e9 / peak, peak, celer_cpu_kernels(), in.threads);
                    printf("\n");
                }
            }
        } else {
            printf("[\n");
            for (int t = 0; t < nt; t++) {
                const bench_test *bt = &tests[t];
                double bytes = (double)in.weight_bytes + bench_mean_kv_bytes(m, depth, bt->n_gen);
                printf("  {\"model\": \"%s\", \"model_type\": \"%s\", \"format\": \"%s\", \"size_bytes\": %llu, "
                       "\"n_params\": %lld, \"backend\": \"%s\", \"n_threads\": %d, \"test\": \"%s\", \"n_prompt\": %d, "
                       "\"n_gen\": %d, \"n_depth\": %ld, \"avg_ts\": %.4f, \"stddev_ts\": %.4f, \"samples_ts\": [",
                       label, in.model_type, in.format, (unsigned long long)in.weight_bytes, (long long)in.n_params,
                       in.backend, in.threads, bt->name, bt->n_prompt, bt->n_gen, depth, bt->mean, bt->sd);
                for (int r = 0; r < reps; r++) printf("%s%.4f", r ? ", " : "", bt->ts[r]);
                printf("], \"cpu_kernels\": \"%s\", \"read_bandwidth_gbs\": %.3f, ", celer_cpu_kernels(), bw);
                if (bt->n_gen)
                    printf("\"bytes_per_token\": %.0f, \"gbs\": %.3f, \"bandwidth_ratio\": %.4f}", bytes,
                           bytes * bt->mean / 1e9, bytes * bt->mean / 1e9 / bw);
                else
                    printf("\"flops_per_token\": %.0f, \"gflops\": %.3f, \"fma_peak_gflops\": %.3f}", flops,
                           flops * bt->mean / 1e9, peak);
                printf("%s\n", t + 1 < nt ? "," : "");
            }
            printf("]\n");
        }
    }
    for (int t = 0; t < nt; t++) free(tests[t].ts);
    celer_model_free(m);
    return status;
}
