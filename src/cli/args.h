/* cli/args.h: flag parsing shared by every command: a table of flags, --help,
 * and errors that name the flag and print the usage line. */
#ifndef CELER_CLI_ARGS_H
#define CELER_CLI_ARGS_H
#include <stdint.h>

typedef struct {
    const char *lng;    /* "--model" */
    const char *shrt;   /* "-m" or NULL */
    const char *meta;   /* "DIR" for a flag with a value, NULL for a switch */
    const char *help;
} opt_spec;

typedef struct {
    const char *cmd;        /* "logits" */
    const char *usage;      /* "-m DIR --tokens LIST [-o OUT]" */
    const char *about;      /* one line */
    const opt_spec *opts;
    int n;
    const char *val[32];    /* value of each flag ("1" for a given switch), NULL if absent */
} args;

/* Returns 0 when parsed, 1 when --help was printed (exit 0), 2 on a usage error
 * (already printed to stderr). */
int args_parse(args *a, int argc, char **argv);
void args_usage_error(const args *a, const char *fmt, ...);
/* Applies the flags every model-loading command takes (--precision) to the settings
 * they stand for; cli_device_flag calls it. */
void args_apply_globals(void);
/* Value of flag lng, or NULL. */
const char *args_get(const args *a, const char *lng);
/* Parses an integer flag in [lo, hi]; def when absent. 0 ok, 2 on error (printed). */
int args_int(const args *a, const char *lng, long def, long lo, long hi, long *out);
/* Parses "1,2,3" (commas or white space) into a new array; n gets the count. */
int32_t *parse_token_list(const char *s, int *n, const char *what);
/* A whole file as a NUL-terminated string (malloc'd); NULL after printing an error
 * that names cmd and the file. */
char *cli_read_file(const char *cmd, const char *path);
/* Reads a token list from a file. */
int32_t *read_token_file(const char *path, int *n);
/* Prints "celer CMD: error: MSG" (cmd NULL: "celer: error: MSG") to stderr. */
void cli_error(const char *cmd, const char *fmt, ...);
/* 1 when stderr is a terminal (progress is shown only then). */
int cli_stderr_is_tty(void);
#endif
