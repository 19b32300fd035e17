/* engine/decode.c: the pipelined decode loop, for backends that sample on the device.
 *
 * The host loop (engine/sample.c) runs a step, copies the logits back, samples, and
 * only then starts the next step, so the GPU waits for the host every token. Here the
 * sampler runs on the device and writes the token where the next step's embedding
 * reads it, so step N+1 is enqueued before token N is read back: the host's work
 * (recording the step, stop checks, the caller's callback) overlaps the device's.
 * When generation stops (stop token, callback, n_gen), one step too many has run;
 * it is undone (the session rewinds one token and the sampler takes back its draw),
 * leaving the session and sampler exactly as the host loop would. */
#include <stdlib.h>
#include <string.h>

#include "base/settings.h"
#include "base/err.h"
#include "engine/engine.h"
#include "engine/sample.h"

int engine_decode_pipelined(celer_session *s, celer_sampler *smp, int n_gen, int32_t stop_token, int32_t *out,
                            int (*on_token)(int32_t token, void *ctx), void *ctx) {
    model *m = s->cm->m;
    backend *b = m->be;
    const model_config *c = &m->cfg;
    sample_params sp;
    /* the device's tokens skip the host's range checks: a per-layer table shorter
     * than the vocabulary needs them */
    if (!b->ops->sample || n_gen <= 0 || !setting_flag(SET_CELER_DEVICE_SAMPLE) || !sample_device_params(smp, &sp) ||
        (c->ple_dim > 0 && c->ple_vocab < c->vocab))
        return -2;
    model_scratch *scr = s->scratch;
    sample_rng before;
    double u = sample_device_draw(smp, &before);
    if (b->ops->sample(b, scr->logits, c->vocab, &sp, u, scr->tok, 0) != 0) {
        sample_device_undraw(smp, &before);
        return -2; /* these filters need the host */
    }
    int k = 0;
    for (;;) {
        /* enqueue the step that feeds token k and the sampling of token k + 1 */
        const int more = k + 1 < n_gen;
        if (more) {
            if (engine_step_device_token(s) != 0) {
                b->ops->sampled(b, k % SAMPLE_SLOTS); /* let what is in flight finish */
                return -1;
            }
            u = sample_device_draw(smp, &before);
            if (b->ops->sample(b, scr->logits, c->vocab, &sp, u, scr->tok, (k + 1) % SAMPLE_SLOTS) != 0)
                return err_set("device sampler refused its parameters mid-generation");
        }
        /* then wait for token k */
        const int32_t t = b->ops->sampled(b, k % SAMPLE_SLOTS);
        if (t < 0) return -1;
        if (more) s->tokens[s->pos - 1] = t;
        celer_sampler_accept(smp, t);
        if (out) out[k] = t;
        k++;
        int stop = (on_token && on_token(t, ctx)) || t == stop_token || celer_sampler_is_stop(smp, t) || k == n_gen;
        if (stop) {
            if (more) { /* the step that fed t and the draw for the token after it were one too many */
                b->ops->sampled(b, k % SAMPLE_SLOTS);
                sample_device_undraw(smp, &before);
                if (celer_session_rewind(s, s->pos - 1) != 0) return -1;
            }
            return k;
        }
    }
}
