/* cli/cmd_generate.c: `celer generate`: generation from token ids, greedy by default
 * or sampled with llama.cpp's flags (--temp, --top-k, --top-p, --min-p, penalties,
 * --seed); prints the generated ids, comma separated, on one line of stdout. */
#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

#include "celer.h"
#include "cli/args.h"
#include "cli/commands.h"

static const opt_spec opts[] = {
    {"--model", "-m", "DIR", "checkpoint directory (config.json + safetensors)"},
    {"--tokens", NULL, "LIST", "prompt token ids, comma separated"},
    {"--tokens-file", NULL, "FILE", "read prompt token ids from FILE"},
    {"--n-predict", "-n", "N", "tokens to generate (default 32)"},
    {"--ctx-size", "-c", "N", "context size (default: prompt + N)"},
    {"--threads", "-t", "N", "CPU threads (default: all cores)"},
    {"--ignore-eos", NULL, NULL, "keep generating after the end-of-sequence token"},
    {"--temp", NULL, "F", "temperature; 0 (the default) is greedy"},
    {"--top-k", NULL, "N", "keep the N most likely tokens (default 40, 0 = off; with --temp > 0)"},
    {"--top-p", NULL, "F", "keep the smallest set with probability mass F (default 0.95, 1 = off)"},
    {"--min-p", NULL, "F", "keep tokens with p >= F * p_max (default 0.05, 0 = off)"},
    {"--repeat-penalty", NULL, "F", "divide positive logits of recent tokens by F (default 1 = off)"},
    {"--repeat-last-n", NULL, "N", "recent tokens the penalties see (default 64, 0 = none, -1 = context)"},
    {"--presence-penalty", NULL, "F", "subtract F from logits of recent tokens (default 0)"},
    {"--frequency-penalty", NULL, "F", "subtract F times each recent token's count (default 0)"},
    {"--seed", "-s", "N", "random seed (default -1: a new one each run)"},
    {"--stop-token", NULL, "LIST", "token ids that end generation (besides end-of-sequence)"},
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Parses a float flag in [lo, hi]; def when absent. 0 ok, 2 on a usage error. */
static int flag_float(const args *a, const char *lng, float def, double lo, double hi, float *out) {
    const char *v = args_get(a, lng);
    if (!v) {
        *out = def;
        return 0;
    }
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi)) {
        args_usage_error(a, "flag '%s' wants a number in %g..%g, got '%s'", lng, lo, hi, v);
        return 2;
    }
    *out = (float)x;
    return 0;
}

/* Reads the sampling flags into p. 0 ok, 2 on a usage error (printed). */
static int sampling_flags(const args *a, celer_sampler_params *p, long *seed, long *last_n) {
    long top_k;
    celer_sampler_params_default(p);
    if (flag_float(a, "--temp", 0.0f, 0.0, 1e6, &p->temperature) ||
        args_int(a, "--top-k", 40, 0, 1L << 30, &top_k) ||
        flag_float(a, "--top-p", 0.95f, 0.0, 1.0, &p->top_p) ||
        flag_float(a, "--min-p", 0.05f, 0.0, 1.0, &p->min_p) ||
        flag_float(a, "--repeat-penalty", 1.0f, 1e-6, 1e6, &p->repeat_penalty) ||
        args_int(a, "--repeat-last-n", 64, -1, 1L << 24, last_n) ||
        flag_float(a, "--presence-penalty", 0.0f, -1e6, 1e6, &p->presence_penalty) ||
        flag_float(a, "--frequency-penalty", 0.0f, -1e6, 1e6, &p->frequency_penalty) ||
        args_int(a, "--seed", -1, -1, 0x7fffffffffffffffL, seed))
        return 2;
    p->top_k = (int)top_k;
    return 0;
}

int cmd_generate(int argc, char **argv) {
    args a = {"generate", "-m DIR (--tokens LIST | --tokens-file F) [-n N] [--temp F --seed N ...]",
              "Generates tokens (greedy unless --temp > 0) and prints the generated token ids.", opts,
              (int)(sizeof opts / sizeof opts[0]), {0}};
    int rc = args_parse(&a, argc, argv);
    if (rc) return rc == 1 ? 0 : 2;
    const char *dir = args_get(&a, "--model");
    const char *tl = args_get(&a, "--tokens"), *tf = args_get(&a, "--tokens-file");
    const char *stops = args_get(&a, "--stop-token");
    long n_gen, ctx, threads, seed, last_n;
    celer_sampler_params sp;
    if (args_int(&a, "--n-predict", 32, 0, 1 << 24, &n_gen) || args_int(&a, "--ctx-size", 0, 1, 1 << 24, &ctx) ||
        args_int(&a, "--threads", 0, 1, 1024, &threads) || sampling_flags(&a, &sp, &seed, &last_n))
        return 2;
    if (!dir) { args_usage_error(&a, "missing -m DIR"); return 2; }
    if (!tl == !tf) { args_usage_error(&a, "give exactly one of --tokens and --tokens-file"); return 2; }
    int n = 0, n_stop = 0;
    int32_t *tok = tl ? parse_token_list(tl, &n, "--tokens") : read_token_file(tf, &n);
    if (!tok) return 1;
    int32_t *stop = stops ? parse_token_list(stops, &n_stop, "--stop-token") : NULL;
    if (stops && !stop) {
        free(tok);
        return 1;
    }
    celer_model *m = celer_model_open(dir, (int)threads);
    if (!m) {
        cli_error("generate", "%s", celer_last_error());
        free(stop);
        free(tok);
        return 1;
    }
    celer_model_info info;
    celer_model_get_info(m, &info);
    int status = 1;
    int ctx_size = ctx ? (int)ctx : n + (int)n_gen;
    if (seed < 0) seed = (long)((uint64_t)time(NULL) * 2654435761u ^ (uint64_t)getpid()) & 0x7fffffffffffffffL;
    sp.seed = (uint64_t)seed;
    sp.penalty_last_n = last_n < 0 ? ctx_size : (int)last_n;
    sp.stop = stop;
    sp.n_stop = n_stop;
    int32_t *out = malloc((size_t)(n_gen ? n_gen : 1) * sizeof *out);
    celer_sampler *smp = out ? celer_sampler_new(&sp, info.vocab_size) : NULL;
    celer_session *s = smp ? celer_session_new(m, ctx_size, 512) : NULL;
    if (!s) {
        cli_error("generate", "%s", out ? celer_last_error() : "out of memory");
    } else {
        double t0 = now();
        int32_t eos = args_get(&a, "--ignore-eos") ? -1 : info.eos_token;
        int k = n_gen ? celer_generate_sampled(s, smp, tok, n, (int)n_gen, eos, out, NULL, NULL) : 0;
        if (k < 0) {
            cli_error("generate", "%s", celer_last_error());
        } else {
            for (int i = 0; i < k; i++) printf("%s%d", i ? "," : "", out[i]);
            printf("\n");
            status = 0;
            if (cli_stderr_is_tty()) {
                fprintf(stderr, "celer: %d prompt + %d generated tokens in %.2f s", n, k, now() - t0);
                if (sp.temperature > 0) fprintf(stderr, " (seed %ld)", seed);
                fprintf(stderr, "\n");
            }
        }
    }
    celer_session_free(s);
    celer_sampler_free(smp);
    celer_model_free(m);
    free(out);
    free(stop);
    free(tok);
    return status;
}
