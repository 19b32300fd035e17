/* cli/bench_batched.h: `celer bench -npl LIST`, llama-batched-bench style (bench_batched.c),
 * and the helpers it shares with cmd_bench.c. */
#ifndef CELER_CLI_BENCH_BATCHED_H
#define CELER_CLI_BENCH_BATCHED_H
#include <stddef.h>

#include "celer.h"
#include "cli/args.h"

/* Runs the batched benchmark for the flags already parsed into a (cmd_bench's table;
 * --n-parallel is set) on the model in dir (cmd_bench resolved -m or --synth), opened here. Returns the exit status (2 on a
 * usage error naming the flag). */
int bench_batched(const args *a, const char *dir);

/* "qwen3 596M Q4/G64": the llama-bench model label of in (buf of n bytes). */
void bench_model_label(const celer_model_info *in, char *buf, size_t n);
/* Monotonic seconds. */
double bench_now(void);
/* The mean KV bytes the forwards of n_gen generated tokens read, from a cache that
 * holds depth + 1 tokens at the first of them. */
double bench_mean_kv_bytes(const celer_model *m, long depth, int n_gen);
#endif
