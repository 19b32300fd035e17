/* cli/cmd_cache.c: `celer cache`: runs tokens through a session that may start from
 * a cache file (--load-cache) and may end by writing one (--save-cache); optionally
 * writes the logits of the tokens it evaluated (-o, only the new tokens) and
 * continues greedily (-n, ids printed on stdout). The session's KV counters go to
 * stderr with CELER_STATS=1. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>

#include "celer.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/load.h"

static const opt_spec opts[] = {
    {"--model", "-m", "DIR|ORG/NAME", "checkpoint directory, or a hub name in the Hugging Face cache (default: the embedded default model)"},
    {"--tokens", NULL, "LIST", "token ids to evaluate after the loaded cache, comma separated"},
    {"--tokens-file", NULL, "FILE", "read those token ids from FILE"},
    {"--load-cache", NULL, "FILE", "start from a cache file written by --save-cache"},
    {"--save-cache", NULL, "FILE", "write the cache (tokens, rows, last logits) at the end"},
    {"--output", "-o", "OUT", "write the logits of the evaluated tokens [T, vocab] (float32)"},
    {"--n-predict", "-n", "N", "then generate up to N tokens greedily and print their ids (ends after end-of-sequence)"},
    {"--chunk", NULL, "N", "feed N tokens per forward (default 512)"},
    {"--ctx-size", "-c", "N", "context size (default: the model's limit)"},
    {"--threads", "-t", "N", "CPU threads (default: all cores)"},
    {"--device", NULL, "DEV", "cpu, cuda, cuda:N or auto (default auto: the GPU when one is present, else the CPU)"},
};

int cmd_cache(int argc, char **argv) {
    args a = {"cache", "[-m DIR|ORG/NAME] [--load-cache F] [--tokens LIST | --tokens-file F] [-o OUT] [-n N] [--save-cache F]",
              "Evaluates tokens in a session that starts from a cache file and/or ends by writing one.", opts, 11, {0}};
    int rc = args_parse(&a, argc, argv);
    if (rc) return rc == 1 ? 0 : 2;
    if (cli_device_flag(&a)) return 2;
    int mst; /* the exit status when there is no model */
    char defbuf[PATH_MAX];
    const char *dir = cli_model_arg(&a, defbuf, sizeof defbuf, &mst), *tl = args_get(&a, "--tokens"), *tf = args_get(&a, "--tokens-file");
    if (!dir) return mst;
    const char *load = args_get(&a, "--load-cache"), *save = args_get(&a, "--save-cache"), *out = args_get(&a, "--output");
    long n_gen, chunk, ctx, threads;
    if (args_int(&a, "--n-predict", 0, 0, 1 << 24, &n_gen) || args_int(&a, "--chunk", 512, 1, 1 << 24, &chunk) ||
        args_int(&a, "--ctx-size", 0, 1, 1 << 24, &ctx) || args_int(&a, "--threads", 0, 1, 1024, &threads))
        return 2;
    if (tl && tf) { args_usage_error(&a, "give at most one of --tokens and --tokens-file"); return 2; }
    if (out && !tl && !tf) { args_usage_error(&a, "-o needs tokens to evaluate"); return 2; }
    if (!load && !tl && !tf) { args_usage_error(&a, "nothing to do: give tokens or --load-cache"); return 2; }
    int n = 0;
    int32_t *tok = NULL;
    if ((tl || tf) && !(tok = tl ? parse_token_list(tl, &n, "--tokens") : read_token_file(tf, &n)))
        return tl ? 2 : 1; /* a bad --tokens list is a usage error */
    celer_model *m = cli_model_open("cache", dir, (int)threads, 0);
    if (!m) {
        cli_error("cache", "%s", celer_last_error());
        free(tok);
        return 1;
    }
    celer_model_info info;
    celer_model_get_info(m, &info);
    int status = 1;
    float *logits = NULL;
    celer_session *s = celer_session_new(m, ctx ? (int)ctx : info.max_context, (int)chunk);
    if (!s) { cli_error("cache", "%s", celer_last_error()); goto done; }
    if (load && celer_session_load_cache(s, load) != 0) { cli_error("cache", "%s", celer_last_error()); goto done; }
    if (n > 0) {
        if (out && !(logits = malloc((size_t)n * (size_t)info.vocab_size * sizeof *logits))) {
            cli_error("cache", "out of memory for %d x %d logits", n, info.vocab_size);
            goto done;
        }
        if (celer_session_eval(s, tok, n, logits, 1) != 0) { cli_error("cache", "%s", celer_last_error()); goto done; }
        int64_t shape[2] = {n, info.vocab_size};
        if (out && celer_save_f32(out, "logits", logits, 2, shape) != 0) { cli_error("cache", "%s", celer_last_error()); goto done; }
    }
    if (n_gen > 0) {
        if (!celer_session_logits(s)) { cli_error("cache", "no logits to continue from (the cache holds no tokens)"); goto done; }
        for (long i = 0; i < n_gen; i++) {
            int32_t t = celer_session_argmax(s);
            printf("%s%d", i ? "," : "", t);
            if (t == info.eos_token) break; /* as generate: the end-of-sequence id is the last one printed */
            if (i + 1 < n_gen && celer_session_eval(s, &t, 1, NULL, 0) != 0) {
                printf("\n");
                cli_error("cache", "%s", celer_last_error());
                goto done;
            }
        }
        printf("\n");
    }
    if (save && celer_session_save_cache(s, save) != 0) { cli_error("cache", "%s", celer_last_error()); goto done; }
    status = 0;
done:
    celer_session_free(s);
    celer_model_free(m);
    free(logits);
    free(tok);
    return status;
}
