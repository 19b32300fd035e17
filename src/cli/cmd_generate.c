/* cli/cmd_generate.c: `celer generate`: greedy generation from token ids; prints
 * the generated ids, comma separated, on one line of stdout. */
#include <stdio.h>
#include <stdlib.h>
#include <time.h>

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
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int cmd_generate(int argc, char **argv) {
    args a = {"generate", "-m DIR (--tokens LIST | --tokens-file F) [-n N]",
              "Generates greedily and prints the generated token ids.", opts, 7, {0}};
    int rc = args_parse(&a, argc, argv);
    if (rc) return rc == 1 ? 0 : 2;
    const char *dir = args_get(&a, "--model");
    const char *tl = args_get(&a, "--tokens"), *tf = args_get(&a, "--tokens-file");
    long n_gen, ctx, threads;
    if (args_int(&a, "--n-predict", 32, 0, 1 << 24, &n_gen) || args_int(&a, "--ctx-size", 0, 1, 1 << 24, &ctx) ||
        args_int(&a, "--threads", 0, 1, 1024, &threads))
        return 2;
    if (!dir) { args_usage_error(&a, "missing -m DIR"); return 2; }
    if (!tl == !tf) { args_usage_error(&a, "give exactly one of --tokens and --tokens-file"); return 2; }
    int n = 0;
    int32_t *tok = tl ? parse_token_list(tl, &n, "--tokens") : read_token_file(tf, &n);
    if (!tok) return 1;
    celer_model *m = celer_model_open(dir, (int)threads);
    if (!m) {
        cli_error("generate", "%s", celer_last_error());
        free(tok);
        return 1;
    }
    celer_model_info info;
    celer_model_get_info(m, &info);
    int status = 1;
    int32_t *out = malloc((size_t)(n_gen ? n_gen : 1) * sizeof *out);
    celer_session *s = out ? celer_session_new(m, ctx ? (int)ctx : n + (int)n_gen, 512) : NULL;
    if (!s) {
        cli_error("generate", "%s", out ? celer_last_error() : "out of memory");
    } else {
        double t0 = now();
        int32_t stop = args_get(&a, "--ignore-eos") ? -1 : info.eos_token;
        int k = n_gen ? celer_generate_greedy(s, tok, n, (int)n_gen, stop, out) : 0;
        if (k < 0) {
            cli_error("generate", "%s", celer_last_error());
        } else {
            for (int i = 0; i < k; i++) printf("%s%d", i ? "," : "", out[i]);
            printf("\n");
            status = 0;
            if (cli_stderr_is_tty())
                fprintf(stderr, "celer: %d prompt + %d generated tokens in %.2f s\n", n, k, now() - t0);
        }
    }
    celer_session_free(s);
    celer_model_free(m);
    free(out);
    free(tok);
    return status;
}
