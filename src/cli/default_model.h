/* cli/default_model.h: where the embedded default model (models/default, see
 * docs/default-model.md) is found, for every command whose -m is optional. */
#ifndef CELER_CLI_DEFAULT_MODEL_H
#define CELER_CLI_DEFAULT_MODEL_H
#include <stddef.h>

#include "cli/args.h"

/* The default model's directory: $CELER_DEFAULT_MODEL when set, else the first of
 * EXE_DIR/../models/default (build/celer in a checkout), EXE_DIR/../share/celer/
 * models/default (an install) and EXE_DIR/models/default that holds a config.json,
 * else ./models/default if it does. Returns env's value, buf (n >= PATH_MAX, filled
 * with a resolved path) or a literal; NULL when none is there. */
const char *cli_default_model(char *buf, size_t n);

/* The model directory of a command: its -m value, else the default model; NULL (after
 * a usage error that says so) when there is neither. buf as for cli_default_model. */
const char *cli_model_arg(const args *a, char *buf, size_t n);
#endif
