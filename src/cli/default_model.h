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

/* The directory a model argument names: name itself when it exists on disk or is
 * not a hub name (the open then says what is wrong), else the snapshot of hub name
 * ORG/NAME[@REVISION] in the Hugging Face cache, written into buf (n bytes). A hub
 * name that is not cached: when offer is 1 and stdin and stderr are terminals, asks
 * y/N and pulls it (cli_pull); otherwise prints "celer CMD: error: ..." naming where
 * it looked and `celer pull NAME`, and returns NULL. name may point into buf. */
const char *cli_model_resolve(const char *cmd, const char *name, char *buf, size_t n, int offer);

/* The model directory of a command: its -m value, else the default model, each
 * through cli_model_resolve (a hub name works for both); NULL after printing an
 * error, with *status the command's exit status: 2 for no model at all (a usage
 * error), 1 for a hub name not cached. buf as for cli_default_model. */
const char *cli_model_arg(const args *a, char *buf, size_t n, int *status);
#endif
