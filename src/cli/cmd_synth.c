/* cli/cmd_synth.c: `celer synth`: writes a random-weight checkpoint of a published
 * model's shape (bf16 or MLX q4) for benchmarks. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "celer.h"
#include "cli/args.h"
#include "cli/commands.h"

static const opt_spec opts[] = {
    {"--shape", NULL, "NAME", "model shape (see the list below)"},
    {"--output", "-o", "DIR", "output checkpoint directory (created if missing)"},
    {"--q4", NULL, NULL, "store projections as MLX affine 4-bit, group 64 (gpt-oss experts: MXFP4)"},
    {"--seed", NULL, "N", "random seed (default 1)"},
};

static void show_progress(double done, void *ctx) {
    int *last = ctx;
    int pct = (int)(done * 100);
    if (pct != *last) {
        fprintf(stderr, "\rsynth: %3d%%", pct);
        *last = pct;
    }
}

int cmd_synth(int argc, char **argv) {
    args a = {"synth", "--shape NAME -o DIR [--q4] [--seed N]",
              "Writes config.json and model.safetensors with random weights of a real model's shape.", opts, 4, {0}};
    int rc = args_parse(&a, argc, argv);
    const char *const *names = celer_synth_shapes();
    if (rc == 1) {
        printf("\nshapes:");
        for (int i = 0; names[i]; i++) printf(" %s", names[i]);
        printf("\n");
        return 0;
    }
    if (rc) return 2;
    const char *shape = args_get(&a, "--shape"), *dir = args_get(&a, "--output");
    long seed;
    if (args_int(&a, "--seed", 1, 0, 1L << 62, &seed)) return 2;
    if (!shape) { args_usage_error(&a, "missing --shape NAME"); return 2; }
    if (!dir) { args_usage_error(&a, "missing -o DIR"); return 2; }
    int last = -1;
    int tty = cli_stderr_is_tty();
    if (celer_synth(shape, dir, args_get(&a, "--q4") != NULL, (uint64_t)seed, tty ? show_progress : NULL, &last) != 0) {
        if (tty) fprintf(stderr, "\n");
        cli_error("synth", "%s", celer_last_error());
        return 1;
    }
    if (tty) fprintf(stderr, "\rsynth: wrote %s\n", dir);
    return 0;
}
