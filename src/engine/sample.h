/* engine/sample.h: the sampler behind celer_sampler (celer.h) and the pieces its
 * tests look at: the PRNG and the filtered, renormalized candidate set.
 *
 * Order of operations, as llama.cpp's default chain: penalties (repeat, presence,
 * frequency over the last penalty_last_n accepted tokens), then top-k, top-p, min-p
 * on the distribution at temperature 1, then temperature over the survivors, then
 * one draw. Every filter keeps at least one token. */
#ifndef CELER_ENGINE_SAMPLE_H
#define CELER_ENGINE_SAMPLE_H
#include <stdint.h>

#include "backend/backend.h"
#include "celer.h"

/* xoshiro256** seeded through splitmix64: small, fast, and the same sequence on
 * every platform for a given seed. */
typedef struct {
    uint64_t s[4];
} sample_rng;

void sample_rng_seed(sample_rng *r, uint64_t seed);
uint64_t sample_rng_next(sample_rng *r);
/* Uniform in [0, 1) with 53 random bits. */
double sample_rng_uniform(sample_rng *r);

/* The argmax of logits [n], the lowest id on ties (as torch.argmax, which greedy
 * references are recorded with): every host greedy pick (celer_session_argmax, the
 * generator's greedy path, the sampler at temperature <= 0). */
int32_t sample_argmax(const float *logits, int n);

/* Applies the penalties of smp's history to logits [n_vocab] in place. */
void sample_apply_penalties(celer_sampler *smp, float *logits);

/* The tokens that survive the filters for logits [n_vocab] (penalties applied
 * first) and their probabilities after temperature, renormalized to sum to 1,
 * in descending order of probability (ties: lower id first). ids and probs point
 * into smp's buffers, valid until the next call on smp. Returns the count
 * (>= 1). With temperature <= 0 the set is the argmax alone with probability 1. */
int sample_candidates(celer_sampler *smp, const float *logits, const int32_t **ids, const float **probs);

/* Device sampling (engine/generate.c's pipelined step). 1 and smp's filters in *p when no penalty is in
 * effect (a device sampler applies none), else 0. */
int sample_device_params(const celer_sampler *smp, sample_params *p);
/* The uniform draw for one token, as celer_sampler_sample takes it (a draw whenever
 * temperature > 0, else none and 0); *before gets the generator's state first, so
 * sample_device_undraw can take back a draw whose token was never used. */
double sample_device_draw(celer_sampler *smp, sample_rng *before);
void sample_device_undraw(celer_sampler *smp, const sample_rng *before);
#endif
