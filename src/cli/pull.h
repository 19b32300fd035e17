/* cli/pull.h: downloading a hub model from the command line (`celer pull`, and
 * `celer run` when the model it is asked for is not cached). */
#ifndef CELER_CLI_PULL_H
#define CELER_CLI_PULL_H
#include <stddef.h>

/* celer_hub_pull(name) with a progress bar per file on stderr when it is a terminal
 * and quiet is 0 (nothing in pipes). include: n_include extra glob patterns. dir
 * (n bytes) gets the snapshot directory. 0, or 1 after printing "celer CMD: error: ...". */
int cli_pull(const char *cmd, const char *name, const char *const *include, int n_include, int quiet, char *dir,
             size_t n);
#endif
