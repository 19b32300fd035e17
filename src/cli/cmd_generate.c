/* cli/cmd_generate.c: `celer generate`: generation from token ids or text, greedy by
 * default or sampled with llama.cpp's flags (cli/sampling.h). From ids it prints the
 * generated ids, comma separated, on one line of stdout; from text (-p) it streams
 * the generated text to stdout as it is produced. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <jansson.h>

#include "celer.h"
#include "celer_tokenizer.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/load.h"
#include "cli/sampling.h"

static const opt_spec opts[] = {
    {"--model", "-m", "DIR|ORG/NAME", "checkpoint directory, or a hub name in the Hugging Face cache (default: the embedded default model)"},
    {"--synth", NULL, "NAME", "random weights of a named shape (celer synth --help lists them) made in GPU memory: no checkpoint is read (a shape has no tokenizer: give --tokens or --tokens-file)"},
    {"--tokens", NULL, "LIST", "prompt token ids, comma separated"},
    {"--tokens-file", NULL, "FILE", "read prompt token ids from FILE"},
    {"--prompt", "-p", "TEXT", "prompt text (tokenized with the checkpoint's tokenizer); prints text"},
    {"--file", "-f", "FILE", "prompt text read from FILE (as -p)"},
    {"--n-predict", "-n", "N", "tokens to generate (default 32; 0: none; -1: until end-of-sequence or the context is full)"},
    {"--ctx-size", "-c", "N", "context size (default: prompt + N; with -n -1 the model's, at most 4096)"},
    {"--threads", "-t", "N", "CPU threads (default: all cores)"},
    {"--device", NULL, "DEV", "cpu, cuda, cuda:N or auto (default auto: the GPU when one is present, else the CPU)"},
    {"--ignore-eos", NULL, NULL, "keep generating after the end-of-sequence token"},
    {"--stop-token", NULL, "LIST", "token ids that end generation (besides end-of-sequence)"},
    {"--stop", NULL, "TEXT", "with -p or --chat: stop when the text contains TEXT (not printed)"},
    {"--chat", NULL, "MESSAGE", "a user message, rendered with the checkpoint's chat template; prints text"},
    {"--system", NULL, "TEXT", "with --chat: a system message before it"},
    {"--parse-special-in-content", NULL, NULL, "with --chat: special tokens written in the message are control tokens (transformers' behaviour; default: text)"},
    {"--load-cache", NULL, "FILE", "start from a KV cache file (celer logits/cache --save-cache)"},
    {"--save-cache", NULL, "FILE", "write the KV cache after generating to FILE"},
    {"--grammar", NULL, "FILE", "constrain the output to a GBNF grammar (llama.cpp's syntax, docs/grammar.md)"},
    {"--json-schema", NULL, "FILE", "constrain the output to JSON valid against a JSON Schema (docs/grammar.md)"},
    CLI_SAMPLING_OPTS,
};

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

int cmd_generate(int argc, char **argv) {
    args a = {"generate", "[-m DIR|ORG/NAME] (--tokens LIST | --tokens-file F | -p TEXT | -f FILE | --chat MESSAGE [--system TEXT]) [-n N] [--temp F ...]",
              "Generates tokens (greedy unless --temp > 0) and prints the generated token ids, or the text with -p.",
              opts, (int)(sizeof opts / sizeof opts[0]), {0}};
    int rc = args_parse(&a, argc, argv);
    if (rc) return rc == 1 ? 0 : 2;
    if (cli_device_flag(&a)) return 2;
    int mst; /* the exit status when there is no model */
    char defbuf[PATH_MAX], synth_dir[PATH_MAX] = "";
    const char *synth = args_get(&a, "--synth"), *dir = synth_dir;
    if (synth) {
        const char *need_tok = args_get(&a, "--prompt") ? "-p" : args_get(&a, "--file") ? "-f" : args_get(&a, "--chat") ? "--chat"
                               : args_get(&a, "--grammar") ? "--grammar" : args_get(&a, "--json-schema") ? "--json-schema" : NULL;
        if (args_get(&a, "--model")) { args_usage_error(&a, "give -m DIR or --synth NAME, not both"); return 2; }
        if (need_tok) { args_usage_error(&a, "%s needs a tokenizer, and --synth %s has none: give --tokens or --tokens-file", need_tok, synth); return 2; }
    } else if (!(dir = cli_model_arg(&a, defbuf, sizeof defbuf, &mst))) {
        return mst;
    }
    const char *tl = args_get(&a, "--tokens"), *tf = args_get(&a, "--tokens-file"), *text = args_get(&a, "--prompt");
    const char *chat = args_get(&a, "--chat"), *load = args_get(&a, "--load-cache"), *save = args_get(&a, "--save-cache");
    const char *stops = args_get(&a, "--stop-token"), *stop_text = args_get(&a, "--stop");
    const char *file = args_get(&a, "--file"), *sys = args_get(&a, "--system");
    const char *gfile = args_get(&a, "--grammar"), *sfile = args_get(&a, "--json-schema");
    long n_gen, ctx, threads;
    if (args_int(&a, "--n-predict", 32, -1, 1 << 24, &n_gen) || args_int(&a, "--ctx-size", 0, 1, 1 << 24, &ctx) ||
        args_int(&a, "--threads", 0, 1, 1024, &threads))
        return 2;
    if (stop_text && !text && !file && !chat) { args_usage_error(&a, "--stop needs a text prompt (-p, -f or --chat)"); return 2; }
    if (sys && !chat) { args_usage_error(&a, "--system needs --chat (a system message goes before a chat message)"); return 2; }
    if ((tl != NULL) + (tf != NULL) + (text != NULL) + (file != NULL) + (chat != NULL) != 1) {
        args_usage_error(&a, "give exactly one of --tokens, --tokens-file, -p, -f and --chat");
        return 2;
    }
    if (gfile && sfile) { args_usage_error(&a, "give one of --grammar and --json-schema"); return 2; }
    char *file_text = NULL; /* -f's contents */
    if (file && !(text = file_text = cli_read_file("generate", file))) return 1;
    int n = 0, n_stop = 0, status = 1, cap = 0;
    int32_t *tok = NULL, *stop = NULL, *out = NULL;
    celer_tokenizer *tk = NULL;
    celer_textstream *ts = NULL;
    celer_gen *g = NULL;
    celer_model *m = NULL;
    celer_sampler *smp = NULL;
    celer_session *s = NULL;
    celer_grammar *gram = NULL;
    celer_grammar_vocab *gvocab = NULL;
    celer_grammar_state *gstate = NULL;
    if (gfile || sfile) { /* the grammar first: a bad one is reported before the model loads */
        char *src = cli_read_file("generate", gfile ? gfile : sfile), *gbnf = src;
        if (!src) goto done;
        if (sfile && !(gbnf = celer_json_schema_text_to_gbnf(src, (size_t)-1, "root"))) {
            cli_error("generate", "--json-schema %s: %s", sfile, celer_last_error());
            free(src);
            goto done;
        }
        gram = celer_grammar_compile(gbnf, (size_t)-1);
        if (gbnf != src) free(gbnf);
        free(src);
        if (!gram) {
            cli_error("generate", "%s %s: %s", gfile ? "--grammar" : "--json-schema", gfile ? gfile : sfile,
                      celer_last_error());
            goto done;
        }
    }
    if (text || chat) {
        if (chat && (tk = celer_tokenizer_open(dir))) {
            /* one user turn through the template; the template writes BOS itself */
            json_t *msgs = json_pack("[{s:s,s:s}]", "role", "user", "content", chat);
            if (msgs && sys) json_array_insert_new(msgs, 0, json_pack("{s:s,s:s}", "role", "system", "content", sys));
            char *mj = msgs ? json_dumps(msgs, JSON_COMPACT) : NULL;
            json_decref(msgs);
            celer_chat_request rq = {mj, NULL, NULL, 1, args_get(&a, "--parse-special-in-content") != NULL};
            n = mj ? celer_chat_encode(tk, &rq, &tok, NULL) : -1;
            free(mj);
            if (n < 0) {
                cli_error("generate", "%s", celer_last_error()[0] ? celer_last_error() : "--chat: cannot render the message");
                goto done;
            }
        }
        if ((!tk && !(tk = celer_tokenizer_open(dir))) || (!chat && (n = celer_tokenize(tk, text, strlen(text), 1, &tok)) < 0) ||
            !(ts = celer_textstream_new(tk, 1, &stop_text, stop_text ? 1 : 0))) {
            cli_error("generate", "%s", celer_last_error());
            goto done;
        }
        if (n == 0) {
            cli_error("generate", "the prompt encodes to no tokens");
            goto done;
        }
    } else if (!(tok = tl ? parse_token_list(tl, &n, "--tokens") : read_token_file(tf, &n))) {
        if (tl) status = 2; /* a bad --tokens list is a usage error */
        goto done;
    }
    if (stops && !(stop = parse_token_list(stops, &n_stop, "--stop-token"))) {
        status = 2;
        goto done;
    }
    /* 0: the model's limit, and with -n -1 (no limit) the model's at most 4096, as in run and serve */
    int ctx_size = ctx ? (int)ctx : load || n_gen < 0 ? 0 : n + (int)n_gen;
    celer_sampler_params sp;
    uint64_t seed;
    if (cli_sampling_params(&a, 0.0f, ctx_size ? ctx_size : n_gen < 0 ? 4096 : n + (int)n_gen, &sp, &seed)) {
        status = 2;
        goto done;
    }
    sp.stop = stop;
    sp.n_stop = n_stop;
    if (synth && cli_synth_dir("generate", synth, synth_dir, sizeof synth_dir)) goto done;
    m = cli_model_open("generate", dir, (int)threads, 0);
    if (synth_dir[0]) cli_synth_clean(synth_dir); /* the mapping outlives the names */
    if (!m) {
        cli_error("generate", "%s", celer_last_error());
        goto done;
    }
    celer_model_info info;
    celer_model_get_info(m, &info);
    if (n_gen < 0 && !ctx && !load) ctx_size = info.max_context > 0 && info.max_context < 4096 ? info.max_context : 4096;
    if (!(smp = celer_sampler_new(&sp, info.vocab_size)) || !(s = celer_session_new(m, ctx_size, 512)) ||
        (load && celer_session_load_cache(s, load) != 0)) {
        cli_error("generate", "%s", celer_last_error());
        goto done;
    }
    double t0 = now();
    int32_t eos = args_get(&a, "--ignore-eos") ? -1 : info.eos_token;
    /* the generation loop, streaming the text (-p, --chat) as it becomes final */
    if (gram && ((!tk && !(tk = celer_tokenizer_open(dir))) || !(gvocab = celer_grammar_vocab_new(tk)) ||
                 !(gstate = celer_grammar_state_new(gram, gvocab, NULL, 0)))) {
        cli_error("generate", "%s", celer_last_error());
        goto done;
    }
    celer_gen_seq q = {.session = s, .sampler = smp, .prompt = tok, .n_prompt = n, .max_tokens = (int)n_gen,
                       .stop_token = eos, .text = ts, .grammar = gstate};
    int k = 0, finish = CELER_FINISH_NONE;
    char why[512] = "";
    if (!(g = celer_gen_new(m, 0)) || celer_gen_add(g, &q) < 0) {
        cli_error("generate", "%s", celer_last_error());
        goto done;
    }
    while (!finish) {
        const celer_gen_event *ev;
        if (celer_gen_step(g, &ev) <= 0) break;
        if (ev->token >= 0) {
            if (k == cap) { /* grows: with -n -1 the count is not known ahead */
                int32_t *o = realloc(out, (size_t)(cap = cap ? cap * 2 : 64) * sizeof *out);
                if (!o) {
                    cli_error("generate", "out of memory");
                    goto done;
                }
                out = o;
            }
            out[k++] = ev->token;
        }
        if (ts && ev->text_len) {
            fwrite(ev->text, 1, ev->text_len, stdout);
            fflush(stdout);
        }
        if ((finish = ev->finish) == CELER_FINISH_ERROR) snprintf(why, sizeof why, "%s", ev->error);
    }
    if (finish == CELER_FINISH_ERROR) {
        if (ts) printf("\n");
        cli_error("generate", "%s", why);
        goto done;
    }
    if (save && celer_session_save_cache(s, save) != 0) {
        cli_error("generate", "%s", celer_last_error());
        goto done;
    }
    if (!ts)
        for (int i = 0; i < k; i++) printf("%s%d", i ? "," : "", out[i]);
    printf("\n");
    status = 0;
    if (cli_stderr_is_tty()) {
        fprintf(stderr, "celer: %d prompt + %d generated tokens in %.2f s", n, k, now() - t0);
        if (sp.temperature > 0) fprintf(stderr, " (seed %llu)", (unsigned long long)seed);
        fprintf(stderr, "\n");
    }
done:
    celer_gen_free(g);
    celer_grammar_state_free(gstate);
    celer_grammar_vocab_free(gvocab);
    celer_grammar_free(gram);
    celer_session_free(s);
    celer_sampler_free(smp);
    celer_model_free(m);
    celer_textstream_free(ts);
    celer_tokenizer_free(tk);
    free(out);
    free(file_text);
    free(stop);
    free(tok);
    return status;
}
