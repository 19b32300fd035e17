/* cli/cmd_pull.c: `celer pull ORG/NAME[@REVISION]`: downloads a checkpoint from the
 * Hugging Face hub into the hub cache (celer_hub_pull; docs/hub.md), with a progress
 * bar on a terminal, and prints the snapshot directory on stdout. */
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "celer.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/load.h"
#include "cli/pull.h"

#define MAX_INCLUDE 32

typedef struct {
    int tty;
    double t_start, t_last;   /* this file's start, the last redraw (s) */
    uint64_t start_bytes;     /* bytes already there when this file's transfer began */
    int files;
    uint64_t bytes;           /* bytes of every file of the snapshot */
} bar;

static double now_s(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec + t.tv_nsec * 1e-9;
}

/* "  NAME  [#######.......]  45%  1.2 GiB / 2.5 GiB  34.5 MiB/s" */
static void draw(bar *b, const char *file, uint64_t done, uint64_t total, const char *end) {
    char d[32], t[32], r[32];
    double el = now_s() - b->t_start;
    double rate = el > 0.2 || (*end && el > 0) ? (double)(done - (done >= b->start_bytes ? b->start_bytes : done)) / el : 0;
    const int W = 24;
    int fill = total ? (int)((double)done / (double)total * W) : 0;
    char cells[32];
    for (int i = 0; i < W; i++) cells[i] = i < fill ? '#' : '.';
    cells[W] = '\0';
    size_t fl = strlen(file);
    const char *shown = fl > 40 ? file + fl - 40 : file;
    if (total)
        fprintf(stderr, "\r\033[K  %-40s [%s] %3d%%  %s / %s  %s/s%s", shown, cells, (int)(100.0 * (double)done / (double)total),
                cli_fmt_bytes(done, d, sizeof d), cli_fmt_bytes(total, t, sizeof t),
                cli_fmt_bytes((uint64_t)rate, r, sizeof r), end);
    else
        fprintf(stderr, "\r\033[K  %-40s %s  %s/s%s", shown, cli_fmt_bytes(done, d, sizeof d),
                cli_fmt_bytes((uint64_t)rate, r, sizeof r), end);
    fflush(stderr);
}

static void on_progress(celer_pull_event ev, const char *file, uint64_t done, uint64_t total, void *ctx) {
    bar *b = ctx;
    char sz[32];
    switch (ev) {
    case CELER_PULL_START:
    case CELER_PULL_RETRY:
        if (b->tty && ev == CELER_PULL_RETRY)
            fprintf(stderr, "\r\033[K  %s: connection lost, resuming at %s\n", file, cli_fmt_bytes(done, sz, sizeof sz));
        b->t_start = b->t_last = now_s();
        b->start_bytes = done;
        if (b->tty) draw(b, file, done, total, "");
        break;
    case CELER_PULL_BYTES:
        if (b->tty && now_s() - b->t_last >= 0.1) {
            b->t_last = now_s();
            draw(b, file, done, total, "");
        }
        break;
    case CELER_PULL_DONE:
        b->files++, b->bytes += done;
        if (b->tty) draw(b, file, done, total, "\n");
        break;
    case CELER_PULL_CACHED:
        b->files++, b->bytes += done;
        if (b->tty) fprintf(stderr, "\r\033[K  %-40s cached (%s)\n", file, cli_fmt_bytes(done, sz, sizeof sz));
        break;
    }
}

int cli_pull(const char *cmd, const char *name, const char *const *include, int n_include, int quiet, char *dir,
             size_t n) {
    bar b = {0};
    b.tty = !quiet && isatty(2);
    char cache[PATH_MAX];
    if (b.tty)
        fprintf(stderr, "celer %s: pulling %s from %s into %s\n", cmd, name,
                celer_setting("HF_ENDPOINT") ? celer_setting("HF_ENDPOINT") : "https://huggingface.co",
                celer_hub_cache_dir(cache, sizeof cache) ? cache : "(no cache directory)");
    celer_pull_params p = {include, n_include, on_progress, &b};
    double t0 = now_s();
    if (celer_hub_pull(name, &p, dir, n)) {
        if (b.tty) fprintf(stderr, "\r\033[K");
        cli_error(cmd, "%s", celer_last_error());
        return 1;
    }
    if (b.tty) {
        char sz[32];
        fprintf(stderr, "celer %s: %s: %d file%s, %s, in %.1f s\n", cmd, name, b.files, b.files == 1 ? "" : "s",
                cli_fmt_bytes(b.bytes, sz, sizeof sz), now_s() - t0);
    }
    return 0;
}

static const opt_spec opts[] = {
    {"--include", NULL, "GLOB", "also fetch the files matching GLOB (repeatable; '*' stops at '/', e.g. 'original/*')"},
    {"--quiet", "-q", NULL, "no progress bar"},
};

int cmd_pull(int argc, char **argv) {
    args a = {"pull", "ORG/NAME[@REVISION] [--include GLOB ...] [-q]",
              "Downloads a model from the Hugging Face hub ($HF_ENDPOINT, default https://huggingface.co) into the "
              "Hugging Face cache ($HF_HUB_CACHE, else $HF_HOME/hub, else ~/.cache/huggingface/hub), where "
              "`-m ORG/NAME` then finds it (so do transformers, huggingface_hub and mlx-lm). It fetches what a run "
              "reads: config.json, generation_config.json, the tokenizer files and chat templates, the *.safetensors "
              "weights and their index. A gated model needs its licence accepted on its hub page and HF_TOKEN set. "
              "An interrupted download resumes where it stopped when the command is run again; every file's size and "
              "SHA-256 are checked before it enters the cache. Prints the snapshot directory on stdout.",
              opts, (int)(sizeof opts / sizeof opts[0]), {0}};
    const char *name = NULL;
    if (argc > 0 && argv[0][0] != '-') name = argv[0], argc--, argv++;
    const char *inc[MAX_INCLUDE];
    int n_inc = 0;
    for (int i = 0; i < argc; i++) { /* --include may repeat; args keeps only the last */
        const char *v = NULL;
        if (strcmp(argv[i], "--include") == 0 && i + 1 < argc) v = argv[++i];
        else if (strncmp(argv[i], "--include=", 10) == 0) v = argv[i] + 10;
        if (!v) continue;
        if (n_inc == MAX_INCLUDE) {
            args_usage_error(&a, "at most %d --include patterns", MAX_INCLUDE);
            return 2;
        }
        inc[n_inc++] = v;
    }
    int rc = args_parse(&a, argc, argv);
    if (rc) return rc == 1 ? 0 : 2;
    if (!name) {
        args_usage_error(&a, "missing the model: ORG/NAME[@REVISION], e.g. Qwen/Qwen3-0.6B");
        return 2;
    }
    if (!celer_hub_is_name(name)) {
        args_usage_error(&a, "'%s' is not a hub model name (ORG/NAME[@REVISION], e.g. Qwen/Qwen3-0.6B@main)", name);
        return 2;
    }
    char dir[PATH_MAX + 64];
    if (cli_pull("pull", name, inc, n_inc, args_get(&a, "--quiet") != NULL, dir, sizeof dir)) return 1;
    printf("%s\n", dir);
    return 0;
}
