/* cli/load.h: opening a model from the command line, with a status line while it
 * loads when stderr is a terminal (nothing in pipes). */
#ifndef CELER_CLI_LOAD_H
#define CELER_CLI_LOAD_H
#include <stddef.h>
#include <stdint.h>

#include "celer.h"
#include "cli/args.h"

/* celer_model_open_on(dir, n_threads, cli_device()), and while it runs, when stderr is a terminal and
 * quiet is 0, one status line: "celer CMD: loading DIR (SIZE in N files) ... T s",
 * its elapsed time updated twice a second, erased when the model is open. The
 * weights are mapped, not read, so the line tells what there is to map and how long
 * it takes, not a made-up percentage. NULL on error (celer_last_error() says why;
 * nothing printed). */
celer_model *cli_model_open(const char *cmd, const char *dir, int n_threads, int quiet);
/* The device cli_model_open loads onto (the command's --device; NULL: auto). */
void cli_set_device(const char *device);
/* Checks the command's --device (cpu, cuda, cuda:N, auto or absent) and sets it:
 * 0, or 2 after a usage error naming the flag. */
int cli_device_flag(const args *a);
const char *cli_device(void);

/* --synth NAME: a config.json and a sparse safetensors header of the named shape in
 * a fresh scratch directory (its path in dir[n]), and CELER_SYNTH_FILL set, so a GPU
 * fills the weights with random values instead of reading them (on the CPU they read
 * as the sparse file's zeros). 0, or 1 after an error naming the shape (printed as
 * "celer CMD: ...", nothing left behind). cli_synth_clean removes the files and the
 * directory; call it once the model is open (the mapping outlives the names). */
int cli_synth_dir(const char *cmd, const char *shape, char *dir, size_t n);
void cli_synth_clean(const char *dir);

/* Bytes and count of the *.safetensors files in dir (0 and 0 when none or dir
 * cannot be read). */
uint64_t cli_safetensors_bytes(const char *dir, int *n_files);

/* "4.2 MiB": bytes in B, KiB, MiB, GiB or TiB with one decimal (buf of n bytes). */
const char *cli_fmt_bytes(uint64_t bytes, char *buf, size_t n);
#endif
