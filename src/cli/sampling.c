/* cli/sampling.c: reads the shared sampling flags (cli/sampling.h) into
 * celer_sampler_params. (Stop strings: celer_textstream, src/tokenizer/stop.c.) */
#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "cli/sampling.h"

int cli_flag_float(const args *a, const char *lng, float def, double lo, double hi, float *out) {
    const char *v = args_get(a, lng);
    if (!v) {
        *out = def;
        return 0;
    }
    char *end;
    errno = 0;
    double x = strtod(v, &end);
    if (errno || end == v || *end || !(x >= lo && x <= hi)) {
        args_usage_error(a, "flag '%s' wants a number in %g..%g, got '%s'", lng, lo, hi, v);
        return 2;
    }
    *out = (float)x;
    return 0;
}

int cli_sampling_params(const args *a, float def_temp, int ctx_size, celer_sampler_params *p, uint64_t *seed) {
    long top_k, last_n, sd;
    celer_sampler_params_default(p);
    if (cli_flag_float(a, "--temp", def_temp, 0.0, 1e6, &p->temperature) ||
        args_int(a, "--top-k", 40, 0, 1L << 30, &top_k) ||
        cli_flag_float(a, "--top-p", 0.95f, 0.0, 1.0, &p->top_p) ||
        cli_flag_float(a, "--min-p", 0.05f, 0.0, 1.0, &p->min_p) ||
        cli_flag_float(a, "--repeat-penalty", 1.0f, 1e-6, 1e6, &p->repeat_penalty) ||
        args_int(a, "--repeat-last-n", 64, -1, 1L << 24, &last_n) ||
        cli_flag_float(a, "--presence-penalty", 0.0f, -1e6, 1e6, &p->presence_penalty) ||
        cli_flag_float(a, "--frequency-penalty", 0.0f, -1e6, 1e6, &p->frequency_penalty) ||
        args_int(a, "--seed", -1, -1, 0x7fffffffffffffffL, &sd))
        return 2;
    p->top_k = (int)top_k;
    p->penalty_last_n = last_n < 0 ? ctx_size : (int)last_n;
    if (sd < 0) {
        struct timespec ts;
        clock_gettime(CLOCK_REALTIME, &ts);
        sd = (long)(((uint64_t)ts.tv_sec * 1000000007u ^ (uint64_t)ts.tv_nsec ^ ((uint64_t)getpid() << 32)) &
                    0x7fffffffffffffffull);
    }
    p->seed = (uint64_t)sd;
    *seed = p->seed;
    return 0;
}
