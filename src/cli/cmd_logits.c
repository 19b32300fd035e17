/* cli/cmd_logits.c: `celer logits`: the logits after every input token, as one
 * F32 tensor "logits" [T, V] in a safetensors file. */
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
    {"--tokens", NULL, "LIST", "input token ids, comma separated"},
    {"--tokens-file", NULL, "FILE", "read input token ids from FILE"},
    {"--chunk", NULL, "N", "feed N tokens per forward through the KV cache (default: all at once)"},
    {"--output", "-o", "OUT", "output .safetensors file"},
    {"--threads", "-t", "N", "CPU threads (default: all cores)"},
    {"--device", NULL, "DEV", "cpu, cuda, cuda:N or auto (default auto: the GPU when one is present, else the CPU)"},
    {"--load-cache", NULL, "FILE", "start from a KV cache file (the logits cover only the new tokens)"},
    {"--save-cache", NULL, "FILE", "write the KV cache after the tokens to FILE (celer cache reads it too)"},
    {"--ctx-size", "-c", "N", "context size (default: the tokens; with --load-cache the model's limit)"},
    {"--synth", NULL, "NAME", "random weights of a named shape (celer synth --help lists them) made in GPU memory: no checkpoint is read"},
};

int cmd_logits(int argc, char **argv) {
    args a = {"logits", "[-m DIR|ORG/NAME | --synth NAME] (--tokens LIST | --tokens-file F) [--chunk N] -o OUT.safetensors",
              "Runs the tokens through the model and writes logits [T, vocab] (float32).", opts, (int)(sizeof opts / sizeof opts[0]), {0}};
    int rc = args_parse(&a, argc, argv);
    if (rc) return rc == 1 ? 0 : 2;
    if (cli_device_flag(&a)) return 2;
    int mst; /* the exit status when there is no model */
    char defbuf[PATH_MAX], synth_dir[PATH_MAX] = "";
    const char *synth = args_get(&a, "--synth"), *out = args_get(&a, "--output"), *dir = synth_dir;
    if (synth && args_get(&a, "--model")) { args_usage_error(&a, "give -m DIR or --synth NAME, not both"); return 2; }
    if (!synth && !(dir = cli_model_arg(&a, defbuf, sizeof defbuf, &mst))) return mst;
    const char *tl = args_get(&a, "--tokens"), *tf = args_get(&a, "--tokens-file");
    const char *load = args_get(&a, "--load-cache"), *save = args_get(&a, "--save-cache");
    long chunk, threads, ctx;
    if (args_int(&a, "--chunk", 0, 1, 1 << 24, &chunk) || args_int(&a, "--threads", 0, 1, 1024, &threads) ||
        args_int(&a, "--ctx-size", 0, 1, 1 << 24, &ctx))
        return 2;
    if (!out) { args_usage_error(&a, "missing -o OUT.safetensors"); return 2; }
    if (!tl == !tf) { args_usage_error(&a, "give exactly one of --tokens and --tokens-file"); return 2; }
    int n = 0;
    int32_t *tok = tl ? parse_token_list(tl, &n, "--tokens") : read_token_file(tf, &n);
    if (!tok) return tl ? 2 : 1; /* a bad --tokens list is a usage error */
    if (synth && cli_synth_dir("logits", synth, synth_dir, sizeof synth_dir)) {
        free(tok);
        return 1;
    }
    celer_model *m = cli_model_open("logits", dir, (int)threads, 0);
    if (synth_dir[0]) cli_synth_clean(synth_dir); /* the mapping outlives the names */
    if (!m) {
        cli_error("logits", "%s", celer_last_error());
        free(tok);
        return 1;
    }
    celer_model_info info;
    celer_model_get_info(m, &info);
    int status = 1;
    float *logits = malloc((size_t)n * (size_t)info.vocab_size * sizeof *logits);
    int ctx_size = ctx ? (int)ctx : load ? info.max_context : n;
    int batch = chunk ? (int)chunk : (n < ctx_size ? n : ctx_size);
    celer_session *s = logits ? celer_session_new(m, ctx_size, batch) : NULL;
    if (!s) {
        cli_error("logits", "%s", logits ? celer_last_error() : "out of memory");
    } else if (load && celer_session_load_cache(s, load) != 0) {
        cli_error("logits", "%s", celer_last_error());
    } else if (celer_session_eval(s, tok, n, logits, 1) != 0) {
        cli_error("logits", "%s", celer_last_error());
    } else {
        int64_t shape[2] = {n, info.vocab_size};
        if (celer_save_f32(out, "logits", logits, 2, shape) != 0 || (save && celer_session_save_cache(s, save) != 0))
            cli_error("logits", "%s", celer_last_error());
        else
            status = 0;
    }
    celer_session_free(s);
    celer_model_free(m);
    free(logits);
    free(tok);
    return status;
}
