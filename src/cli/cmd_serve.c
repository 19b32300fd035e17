/* cli/cmd_serve.c: `celer serve`: an OpenAI-compatible HTTP server (src/server/)
 * with llama-server's flags and their LLAMA_ARG_* environment variables. It binds
 * first (so /health answers 503 while the model loads), then loads, then waits for
 * SIGTERM or SIGINT, on which it drains in-flight requests and exits 0. */
#include <errno.h>
#include <limits.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include "base/limits.h"
#include "celer.h"
#include "cli/args.h"
#include "cli/load.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "server/server.h"

static const opt_spec opts[] = {
    {"--model", "-m", "DIR|ORG/NAME", "checkpoint directory, or a hub name in the Hugging Face cache (default: the embedded default model)"},
    {"--tokenizer", NULL, "PATH", "tokenizer directory or tokenizer.json (default: the model's)"},
    {"--alias", "-a", "NAME", "model id in /v1/models (default: the directory's name)"},
    {"--host", NULL, "ADDR", "address to listen on (default 127.0.0.1)"},
    {"--port", NULL, "N", "port (default 8080; 0: a free one, printed on stderr)"},
    {"--ctx-size", "-c", "N", "context tokens per slot (default: the model's, at most 4096)"},
    {"--parallel", "-np", "N", "slots: requests decoded together (default 4)"},
    {"--n-predict", "-n", "N", "default max_tokens (default -1: until the context is full)"},
    {"--threads", "-t", "N", "CPU threads (default: all cores)"},
    {"--device", NULL, "DEV", "cpu, cuda, cuda:N or auto (default auto: the GPU when one is present, else the CPU)"},
    {"--batch-size", "-b", "N", "prompt tokens prefilled per step over all slots (default 512)"},
    {"--api-key", NULL, "KEY", "require the header 'Authorization: Bearer KEY' (or 'X-Api-Key: KEY')"},
    {"--metrics", NULL, NULL, "serve GET /metrics (Prometheus text format)"},
    {"--no-cache-prompt", NULL, NULL, "do not reuse cached prompt prefixes"},
    {"--cache-ram", NULL, "MIB", "prompt cache budget in MiB (default 512)"},
    {"--kv-budget", NULL, "BYTES|F", "memory of the KV block pool (every slot and the prompt cache): bytes with an "
                                     "optional K, M, G suffix, or a fraction 0 < F <= 1 of the memory available now "
                                     "(on a GPU: of its free memory once the weights are loaded); requests wait in the "
                                     "queue while it is full (default: physical memory, or the GPU's memory; "
                                     "docs/kv-cache.md)"},
    {"--queue-size", NULL, "N", "requests waiting for a slot before 503 (default 64)"},
    {"--max-body", NULL, "BYTES", "request body limit, 413 above it (default 8388608)"},
    {"--max-prompt", NULL, "N", "prompt tokens a request may have, 400 above (default: the context less one)"},
    {"--max-tokens", NULL, "N", "max_tokens a request may ask for, 400 above (default: the context)"},
    {"--max-concurrent", NULL, "N", "connections handled at once, 503 above (default 256)"},
    {"--timeout", "-to", "N", "seconds a connection may sit idle before it is closed (default 600)"},
    {"--parse-special-in-content", NULL, NULL, "special tokens written in messages are control tokens, as transformers "
                                               "parses them (default: text, as OpenAI's API; see docs/tokenizer.md)"},
    {"--header-timeout", NULL, "N", "seconds a request's headers may take to arrive, 408 after (default 10)"},
    {"--min-body-rate", NULL, "BYTES", "bytes per second a body must arrive at after --header-timeout s, 408 below (default 1024)"},
    {"--requests-ram", NULL, "MIB", "memory for request bodies and their parsing, all requests together, 503 above (default 1024)"},
    {"--cors-origin", NULL, "ORIGIN", "browsers on ORIGIN (e.g. http://localhost:3000, or *) may call the API: "
                                      "CORS headers and preflight answers (default: none)"},
    {"--strict-model", NULL, NULL, "answer 404 to a request whose \"model\" is not this model's id (default: any name "
                                   "gets this model, and the response names it)"},
    {"--slots", NULL, NULL, "serve GET /slots (each slot's task, context and sampling parameters)"},
    {"--log-format", NULL, "FMT", "text or json: the request log (one line per request on stderr) and the "
                                  "server's messages (default text)"},
    {"--verbose", "-v", NULL, "more in each request's log line: id, slot, finish reason, sampling, headers"},
    {"--quiet", NULL, NULL, "print nothing but errors (failed requests, fatal errors)"},
};

/* --kv-budget: bytes (K, M, G, T suffixes: powers of 1024) into *out, or a fraction
 * in (0, 1] into *frac (*out 0): of the host memory available now for host caches, of
 * the GPU's free memory once the weights are loaded for device caches (vLLM's
 * gpu-memory-utilization, for the KV cache alone). */
static int parse_kv_budget(const char *s, uint64_t *out, double *frac) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    *frac = 0;
    if (end == s || errno || !(v > 0) || v > 1e18) return -1;
    if (!*end && v <= 1.0 && strchr(s, '.')) { /* a fraction: "0.5", "1.0" */
        *out = 0;
        *frac = v;
        return 0;
    }
    double mul = 1;
    if (*end) {
        const char *units = "KMGT", *u = strchr(units, *end >= 'a' ? *end - 32 : *end);
        if (!u || !*end || (end[1] && !(end[1] == 'i' && end[2] == 'B' && !end[3]) && !((end[1] == 'B') && !end[2]))) return -1;
        for (const char *x = units; x <= u; x++) mul *= 1024;
    }
    if (v != (double)(uint64_t)v && mul == 1) return -1; /* fractional bytes */
    *out = (uint64_t)(v * mul);
    return *out ? 0 : -1;
}

/* llama-server's environment variables, used when the flag is absent. */
static const struct {
    const char *env, *flag;
} envs[] = {
    {"LLAMA_ARG_MODEL", "--model"},         {"LLAMA_ARG_ALIAS", "--alias"},
    {"LLAMA_ARG_HOST", "--host"},           {"LLAMA_ARG_PORT", "--port"},
    {"LLAMA_ARG_CTX_SIZE", "--ctx-size"},   {"LLAMA_ARG_N_PARALLEL", "--parallel"},
    {"LLAMA_ARG_N_PREDICT", "--n-predict"}, {"LLAMA_ARG_THREADS", "--threads"},
    {"LLAMA_ARG_BATCH", "--batch-size"},    {"LLAMA_API_KEY", "--api-key"},
    {"LLAMA_ARG_ENDPOINT_METRICS", "--metrics"}, {"LLAMA_ARG_NO_CACHE_PROMPT", "--no-cache-prompt"},
    {"LLAMA_ARG_ENDPOINT_SLOTS", "--slots"},
    {"LLAMA_ARG_CACHE_RAM", "--cache-ram"},     {"LLAMA_ARG_TIMEOUT", "--timeout"},
};

static int truthy(const char *v) {
    return strcmp(v, "1") == 0 || strcasecmp(v, "true") == 0 || strcasecmp(v, "on") == 0 || strcasecmp(v, "enabled") == 0;
}

static void apply_env(args *a) {
    for (size_t i = 0; i < sizeof envs / sizeof envs[0]; i++) {
        const char *v = celer_setting(envs[i].env);
        if (!v || !*v) continue;
        for (int k = 0; k < a->n; k++) {
            if (strcmp(a->opts[k].lng, envs[i].flag) != 0 || a->val[k]) continue;
            if (!a->opts[k].meta) a->val[k] = truthy(v) ? "1" : NULL;
            else a->val[k] = v;
        }
    }
    const char *cp = celer_setting("LLAMA_ARG_CACHE_PROMPT"); /* the positive spelling */
    for (int k = 0; cp && k < a->n; k++)
        if (strcmp(a->opts[k].lng, "--no-cache-prompt") == 0 && !a->val[k] && !truthy(cp)) a->val[k] = "1";
}

int cmd_serve(int argc, char **argv) {
    args a = {"serve", "[-m DIR|ORG/NAME] [--host ADDR] [--port N] [-np N] [-c N] [--api-key KEY] [--metrics] ...",
              "Serves the model over an OpenAI-compatible HTTP API (/v1/chat/completions, /v1/completions, "
              "/v1/models, /health, /metrics, /slots, /props, /completion, /tokenize, /detokenize, and a chat page at /) until "
              "SIGTERM. One log line per request on stderr.",
              opts, (int)(sizeof opts / sizeof opts[0]), {0}};
    int rc = args_parse(&a, argc, argv);
    if (rc) return rc == 1 ? 0 : 2;
    if (cli_device_flag(&a)) return 2;
    apply_env(&a);
    long port, ctx, np, npred, threads, batch, cache_mib, queue, max_body, max_prompt, max_tokens, max_conc, timeout;
    long header_to, body_rate, req_ram;
    if (args_int(&a, "--port", 8080, 0, 65535, &port) || args_int(&a, "--ctx-size", 0, 0, 1 << 24, &ctx) ||
        args_int(&a, "--parallel", 4, 1, 256, &np) || args_int(&a, "--n-predict", -1, -1, 1 << 24, &npred) ||
        args_int(&a, "--threads", 0, 0, 1024, &threads) || args_int(&a, "--batch-size", 512, 1, 1 << 20, &batch) ||
        args_int(&a, "--cache-ram", 512, 0, 1 << 24, &cache_mib) || args_int(&a, "--queue-size", CELER_SERVE_QUEUE, 1, 1 << 20, &queue) ||
        args_int(&a, "--max-body", CELER_SERVE_MAX_BODY, 64, 1L << 32, &max_body) ||
        args_int(&a, "--max-prompt", 0, 1, 1 << 24, &max_prompt) || args_int(&a, "--max-tokens", 0, 1, 1 << 24, &max_tokens) ||
        args_int(&a, "--max-concurrent", CELER_SERVE_MAX_CONCURRENT, 1, 65536, &max_conc) ||
        args_int(&a, "--timeout", CELER_SERVE_TIMEOUT_S, 1, 86400, &timeout) ||
        args_int(&a, "--header-timeout", CELER_SERVE_HEADER_TIMEOUT_S, 1, 86400, &header_to) ||
        args_int(&a, "--min-body-rate", CELER_SERVE_MIN_BODY_RATE, 1, 1L << 32, &body_rate) ||
        args_int(&a, "--requests-ram", CELER_SERVE_REQUESTS_RAM_MIB, 1, 1 << 24, &req_ram))
        return 2;
    srv_config cfg = {0};
    int mst; /* the exit status when there is no model */
    char defbuf[PATH_MAX + 64];
    if (!(cfg.model_dir = cli_model_arg(&a, defbuf, sizeof defbuf, &mst))) return mst;
    cfg.tokenizer_dir = args_get(&a, "--tokenizer");
    cfg.alias = args_get(&a, "--alias");
    if (!cfg.alias && cfg.model_dir == defbuf && args_get(&a, "--model")) cfg.alias = args_get(&a, "--model"); /* a hub name */
    cfg.host = args_get(&a, "--host") ? args_get(&a, "--host") : "127.0.0.1";
    cfg.port = (int)port;
    cfg.n_parallel = (int)np;
    cfg.ctx_size = (int)ctx;
    cfg.n_predict = (int)npred;
    cfg.n_threads = (int)threads;
    cfg.device = cli_device();
    cfg.batch_size = (int)batch;
    cfg.api_key = args_get(&a, "--api-key");
    cfg.metrics = args_get(&a, "--metrics") != NULL;
    cfg.cache_prompt = args_get(&a, "--no-cache-prompt") == NULL && cache_mib > 0;
    cfg.cache_bytes = (size_t)cache_mib << 20;
    cfg.queue_size = (int)queue;
    cfg.max_body = (size_t)max_body;
    cfg.max_prompt = (int)max_prompt;
    cfg.max_tokens = (int)max_tokens;
    cfg.max_concurrent = (int)max_conc;
    cfg.timeout_s = (int)timeout;
    cfg.header_timeout_s = (int)header_to;
    cfg.min_body_rate = (int)(body_rate > INT_MAX ? INT_MAX : body_rate);
    cfg.requests_ram = (size_t)req_ram << 20;
    cfg.quiet = args_get(&a, "--quiet") != NULL;
    cfg.verbose = args_get(&a, "--verbose") != NULL;
    cfg.slots = args_get(&a, "--slots") != NULL;
    const char *lf = args_get(&a, "--log-format");
    if (lf && strcmp(lf, "text") != 0 && strcmp(lf, "json") != 0) {
        args_usage_error(&a, "--log-format: '%s' is not a log format: use text or json", lf);
        return 2;
    }
    cfg.log_json = lf && strcmp(lf, "json") == 0;
    if (cfg.quiet && cfg.verbose) {
        args_usage_error(&a, "--quiet and --verbose contradict each other: give one");
        return 2;
    }
    cfg.strict_model = args_get(&a, "--strict-model") != NULL;
    cfg.cors_origin = args_get(&a, "--cors-origin");
    for (const char *o = cfg.cors_origin; o && *o; o++)
        if ((unsigned char)*o < 0x20 || *o == 0x7f) {
            args_usage_error(&a, "--cors-origin: control characters are not allowed in an origin");
            return 2;
        }
    cfg.parse_special_in_content = args_get(&a, "--parse-special-in-content") != NULL;
    const char *kvb = args_get(&a, "--kv-budget");
    if (kvb) {
        uint64_t bytes = 0;
        double frac = 0;
        if (parse_kv_budget(kvb, &bytes, &frac) != 0 ||
            (frac > 0 ? celer_kv_pool_set_budget_fraction(frac) : celer_kv_pool_set_budget(bytes)) != 0) {
            args_usage_error(&a, "--kv-budget: '%s' is neither bytes (e.g. 512M, 8G) nor a fraction in (0, 1]", kvb);
            return 2;
        }
    }

    /* every thread inherits this mask; this one takes the signals with sigwait */
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGTERM);
    sigaddset(&set, SIGINT);
    pthread_sigmask(SIG_BLOCK, &set, NULL);
    signal(SIGPIPE, SIG_IGN);

    srv *s = srv_start(&cfg);
    if (!s) {
        if (cfg.log_json) srv_log_msg(&cfg, "error", "%s", celer_last_error());
        else cli_error("serve", "%s", celer_last_error());
        return 1;
    }
    srv_log_msg(&cfg, "info", "listening on http://%s:%d", cfg.host, s->port);
    if (srv_load(s) != 0) {
        if (cfg.log_json) srv_log_msg(&cfg, "error", "%s", celer_last_error());
        else cli_error("serve", "%s", celer_last_error());
        srv_stop(s);
        srv_free(s);
        return 1;
    }
    srv_log_msg(&cfg, "info", "model %s ready (%s, %s): %d slots x %d tokens of context", s->model_id, s->info.model_type,
                s->info.format, cfg.n_parallel, s->cfg.ctx_size);
    int sig = 0;
    sigwait(&set, &sig);
    srv_log_msg(&cfg, "info", "%s: finishing in-flight requests", sig == SIGINT ? "SIGINT" : "SIGTERM");
    srv_stop(s);
    srv_free(s);
    srv_log_msg(&cfg, "info", "stopped");
    return 0;
}
