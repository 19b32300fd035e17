/* cli/cmd_inspect.c: `celer arch` (the model families the loader reads) and `celer
 * inspect` (a checkpoint's parameters, weight formats and bytes, the KV cache a
 * context needs per cache kind, and whether weights and cache fit in the memory
 * the kernel calls available). Both print stable "key: value" text for scripts. */
#include <errno.h>
#include <inttypes.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <jansson.h>

#include "celer.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/load.h"

/* ---------------------------------------------------------------- arch */

static const opt_spec arch_opts[] = {{"--json", NULL, NULL, "one JSON object per family instead of the table"}};

int cmd_arch(int argc, char **argv) {
    args a = {"arch", "[--json]",
              "Lists the model families celer loads: a checkpoint whose config.json model_type is one of a "
              "family's values is read by that family's description.",
              arch_opts, 1, {0}};
    int rc = args_parse(&a, argc, argv);
    if (rc) return rc == 1 ? 0 : 2;
    int n;
    const celer_family *f = celer_families(&n);
    int json = args_get(&a, "--json") != NULL;
    if (!json) printf("%-10s %-10s %s\n", "FAMILY", "NAME", "MODEL_TYPE");
    for (int i = 0; i < n; i++) {
        if (json) {
            printf("{\"family\": \"%s\", \"name\": \"%s\", \"model_types\": [", f[i].name, f[i].title);
            for (const char *const *t = f[i].model_types; *t; t++)
                printf("%s\"%s\"", t == f[i].model_types ? "" : ", ", *t);
            printf("]}\n");
            continue;
        }
        printf("%-10s %-10s ", f[i].name, f[i].title);
        for (const char *const *t = f[i].model_types; *t; t++) printf("%s%s", t == f[i].model_types ? "" : ", ", *t);
        putchar('\n');
    }
    return 0;
}

/* ---------------------------------------------------------------- inspect */

static const opt_spec inspect_opts[] = {
    {"--model", "-m", "DIR|ORG/NAME", "checkpoint directory, or a hub name in the Hugging Face cache (default: the embedded default model)"},
    {"--ctx-size", "-c", "N", "context for the KV figures (default: the model's max context, at most 4096, as run and serve use)"},
    {"--memory", NULL, "SIZE", "compare with SIZE bytes (suffix K, M, G, T: powers of 1024) instead of MemAvailable"},
};

/* MemAvailable of /proc/meminfo in bytes; 0 when it cannot be read. */
static uint64_t mem_available(void) {
    FILE *f = fopen("/proc/meminfo", "r");
    if (!f) return 0;
    char line[256];
    unsigned long long kb = 0;
    while (fgets(line, sizeof line, f))
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) break;
    fclose(f);
    return (uint64_t)kb * 1024;
}

/* "8G", "512M", "1048576": 0 ok, -1 when s is not a size. */
static int parse_size(const char *s, uint64_t *out) {
    char *end;
    errno = 0;
    double v = strtod(s, &end);
    if (errno || end == s || v < 0) return -1;
    double mul = 1;
    if (*end) {
        const char *u = "KMGT";
        const char *p = strchr(u, *end == 'k' ? 'K' : *end == 'm' ? 'M' : *end == 'g' ? 'G' : *end == 't' ? 'T' : *end);
        if (!p || !*p) return -1;
        for (const char *q = u; q <= p; q++) mul *= 1024;
        end++;
        if (*end == 'i') end++;
        if (*end == 'B' || *end == 'b') end++;
        if (*end) return -1;
    }
    if (v * mul >= 18446744073709551615.0) return -1;
    *out = (uint64_t)(v * mul);
    return 0;
}

/* The checkpoint's dtype as config.json states it ("dtype" or "torch_dtype", at the
 * top or in text_config); "" when it states none. */
static void config_dtype(const char *dir, char *buf, size_t n) {
    char p[PATH_MAX + 16];
    buf[0] = '\0';
    snprintf(p, sizeof p, "%.*s/config.json", PATH_MAX, dir);
    json_t *j = json_load_file(p, 0, NULL);
    if (!j) return;
    const json_t *objs[2] = {j, json_object_get(j, "text_config")};
    for (int i = 0; i < 2 && !buf[0]; i++) {
        if (!json_is_object(objs[i])) continue;
        const char *v = json_string_value(json_object_get(objs[i], "dtype"));
        if (!v) v = json_string_value(json_object_get(objs[i], "torch_dtype"));
        if (v) snprintf(buf, n, "%s", v);
    }
    json_decref(j);
}

static const char *count_str(int64_t n, char *buf, size_t len) {
    if (n >= 1000000000) snprintf(buf, len, "%.2f B", (double)n / 1e9);
    else if (n >= 1000000) snprintf(buf, len, "%.2f M", (double)n / 1e6);
    else snprintf(buf, len, "%.2f K", (double)n / 1e3);
    return buf;
}

int cmd_inspect(int argc, char **argv) {
    args a = {"inspect", "[-m DIR|ORG/NAME] [-c CTX] [--memory SIZE]",
              "Prints a checkpoint's parameters, weight formats and bytes, the KV cache bytes per token and "
              "for a context (per cache kind: dense layers hold every token, rotating sliding-window layers at "
              "most their window), and whether weights plus cache fit in available memory.",
              inspect_opts, (int)(sizeof inspect_opts / sizeof inspect_opts[0]), {0}};
    int rc = args_parse(&a, argc, argv);
    if (rc) return rc == 1 ? 0 : 2;
    long ctx;
    if (args_int(&a, "--ctx-size", 0, 1, 1 << 30, &ctx)) return 2;
    uint64_t avail = 0;
    const char *mem = args_get(&a, "--memory");
    if (mem && parse_size(mem, &avail) != 0) {
        args_usage_error(&a, "flag '--memory' wants a size such as 16G, 512M or 1048576, got '%s'", mem);
        return 2;
    }
    int mst; /* the exit status when there is no model */
    char defbuf[PATH_MAX + 64];
    const char *dir = cli_model_arg(&a, defbuf, sizeof defbuf, &mst);
    if (!dir) return mst;
    cli_set_device("cpu"); /* it reads shapes and sizes: no weights need to go to a GPU */
    celer_model *m = cli_model_open("inspect", dir, 1, 0);
    if (!m) {
        cli_error("inspect", "%s", celer_last_error());
        return 1;
    }
    celer_model_info in;
    celer_weights_info w;
    celer_kv_info kv;
    celer_model_get_info(m, &in);
    celer_model_weights_info(m, &w);
    /* the context run and serve give a model by default: its own, at most 4096 */
    int ctx_used = ctx ? (int)ctx : in.max_context > 0 && in.max_context < 4096 ? in.max_context : 4096;
    celer_model_kv_info(m, ctx_used, &kv);
    int nf;
    const celer_family *fams = celer_families(&nf);
    const char *title = in.family;
    for (int i = 0; i < nf; i++)
        if (strcmp(fams[i].name, in.family) == 0) title = fams[i].title;
    char b1[32], b2[32], b3[32], dtype[64];
    config_dtype(dir, dtype, sizeof dtype);

    printf("model:          %s\n", dir);
    printf("family:         %s (%s), model_type %s\n", in.family, title, in.model_type);
    printf("parameters:     %" PRId64 " (%s)\n", in.n_params, count_str(in.n_params, b1, sizeof b1));
    printf("shape:          %d layers, hidden %d, vocab %d, max context %d\n", in.n_layers, in.hidden_size,
           in.vocab_size, in.max_context);
    printf("format:         %s (projections); config dtype %s\n", in.format, dtype[0] ? dtype : "(none)");
    printf("weights:        %" PRIu64 " bytes (%s) in %d file%s, %" PRId64 " tensors:", w.file_bytes,
           cli_fmt_bytes(w.file_bytes, b1, sizeof b1), w.shards, w.shards == 1 ? "" : "s", w.tensors);
    for (int i = 0; i < w.n_dtypes; i++)
        printf("%s %s %" PRIu64, i ? "," : "", w.dtypes[i].dtype, w.dtypes[i].bytes);
    printf("\n");
    printf("read per token: %" PRIu64 " bytes (%s) of weights\n", in.weight_bytes,
           cli_fmt_bytes(in.weight_bytes, b1, sizeof b1));
    printf("kv per token:   %" PRIu64 " bytes (%s): dense %d layers %" PRIu64 ", rotating %d layers %" PRIu64,
           kv.dense_token_bytes + kv.rotating_token_bytes,
           cli_fmt_bytes(kv.dense_token_bytes + kv.rotating_token_bytes, b1, sizeof b1), kv.dense_layers,
           kv.dense_token_bytes, kv.rotating_layers, kv.rotating_token_bytes);
    if (kv.rotating_layers) printf(" (until the window of %d fills)", kv.window);
    if (kv.shared_layers) printf(", %d layers reading another's cache", kv.shared_layers);
    printf("\n");
    printf("context:        %d (%s)\n", kv.ctx,
           ctx ? "given by -c" : kv.ctx == in.max_context ? "the model's max context, as run and serve use by default"
                                                          : "as run and serve use by default: the model's max context, at most 4096; -c to change");
    uint64_t kv_total = celer_model_kv_bytes(m, kv.ctx); /* = dense + rotating */
    char key[32];
    snprintf(key, sizeof key, "kv at %d:", kv.ctx);
    printf("%-15s %" PRIu64 " bytes (%s): dense %" PRIu64 ", rotating %" PRIu64 "\n", key, kv_total,
           cli_fmt_bytes(kv_total, b1, sizeof b1), kv.dense_bytes, kv.rotating_bytes);
    /* inspect opens the model on the CPU, whose exact precision (its default) keeps an
     * f32 cache; fast precision, the GPU's default, keeps a bf16 cache (CELER_KV_DTYPE,
     * docs/kv-cache.md): the same rows at half the bytes */
    if (strcmp(in.kv_dtype, "f32") == 0)
        printf("kv as bf16:     %" PRIu64 " bytes (%s) at %d: the cache type of fast precision (the GPU's default)\n",
               kv_total / 2, cli_fmt_bytes(kv_total / 2, b1, sizeof b1), kv.ctx);
    uint64_t need = w.file_bytes + kv_total;
    if (!mem) avail = mem_available();
    if (!mem && !avail) {
        printf("memory:         weights + kv %" PRIu64 " bytes (%s); available memory unknown (no MemAvailable in "
               "/proc/meminfo)\n", need, cli_fmt_bytes(need, b1, sizeof b1));
    } else {
        printf("memory:         weights + kv %" PRIu64 " bytes (%s) of %s %s: %s", need,
               cli_fmt_bytes(need, b1, sizeof b1), cli_fmt_bytes(avail, b2, sizeof b2),
               mem ? "given by --memory" : "available", need <= avail ? "fits" : "does not fit");
        if (need > avail) printf(" (%s short; a smaller -c shrinks the kv)", cli_fmt_bytes(need - avail, b3, sizeof b3));
        printf("\n");
    }
    celer_model_free(m);
    return 0;
}
