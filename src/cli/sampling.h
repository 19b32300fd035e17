/* cli/sampling.h: the sampling flags every generating command shares, with
 * llama.cpp's spellings (--temp, --top-k, --top-p, --min-p, --repeat-penalty,
 * --repeat-last-n, --presence-penalty, --frequency-penalty, --seed). A command puts
 * CLI_SAMPLING_OPTS in its opt_spec table and reads them with cli_sampling_params. */
#ifndef CELER_CLI_SAMPLING_H
#define CELER_CLI_SAMPLING_H
#include <stdio.h>

#include "celer.h"
#include "cli/args.h"

#define CLI_SAMPLING_OPTS                                                                                   \
    {"--temp", NULL, "F", "temperature; 0 is greedy"},                                                      \
    {"--top-k", NULL, "N", "keep the N most likely tokens (default 40, 0 = off)"},                          \
    {"--top-p", NULL, "F", "keep the smallest set with probability mass F (default 0.95, 1 = off)"},        \
    {"--min-p", NULL, "F", "keep tokens with p >= F * p_max (default 0.05, 0 = off)"},                       \
    {"--repeat-penalty", NULL, "F", "divide positive logits of recent tokens by F (default 1 = off)"},      \
    {"--repeat-last-n", NULL, "N", "recent tokens the penalties see (default 64, 0 = none, -1 = context)"}, \
    {"--presence-penalty", NULL, "F", "subtract F from logits of recent tokens (default 0)"},               \
    {"--frequency-penalty", NULL, "F", "subtract F times each recent token's count (default 0)"},           \
    {"--seed", "-s", "N", "random seed (default -1: a new one each run)"}

/* Parses a float flag in [lo, hi]; def when absent. 0 ok, 2 on a usage error (printed). */
int cli_flag_float(const args *a, const char *lng, float def, double lo, double hi, float *out);

/* Fills p from the sampling flags: temperature def_temp when --temp is absent, the
 * penalty window -1 mapped to ctx_size, and a fresh seed when --seed is absent or
 * -1 (*seed gets the one used). 0 ok, 2 on a usage error (printed). */
int cli_sampling_params(const args *a, float def_temp, int ctx_size, celer_sampler_params *p, uint64_t *seed);

#endif
