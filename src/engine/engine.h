/* engine/engine.h: the structs behind the public handles of celer.h, and the
 * engine-internal helpers shared by session.c, snapshot.c and prompt_cache.c. */
#ifndef CELER_ENGINE_H
#define CELER_ENGINE_H
#include "celer.h"
#include "kv/cache.h"
#include "model/model.h"

struct celer_model {
    model *m;
    char format[32];   /* weight format of the projections, for reports */
};

struct celer_session {
    celer_model *cm;
    int ctx;                  /* context limit in tokens */
    int pos;                  /* tokens in the context */
    int max_T;                /* most tokens per forward */
    int inplace;              /* CELER_KV_INPLACE_WRITE at creation (0: copying path) */
    kv_cache **caches;        /* [n_layers] */
    kv_stats stats;           /* what this session's cache writes did */
    int32_t *tokens;          /* [ctx] the tokens in the context */
    model_scratch *scratch;   /* activations for one batch */
    float *last;              /* [vocab] logits after the last token */
    int has_logits;
};

/* A session's state at one moment: each layer's cache shares its buffer (no row
 * is copied), plus the tokens and the last logits. */
struct celer_snapshot {
    const celer_model *cm;
    int pos;
    int n_layers;
    kv_cache **caches;        /* [n_layers] holders of the session's buffers */
    int32_t *tokens;          /* [pos] */
    float *logits;            /* [vocab] logits after the last token, or NULL */
};

/* A cache of the given kind for layer `layer` of m (its window, its device) for a
 * session of ctx tokens taking max_T rows per write; NULL with a message. */
kv_cache *engine_cache_new(const model *m, int layer, kv_kind kind, int ctx, int max_T);
/* The cache a session gives the layer: the kind the registry's rule names
 * (registry_layer_cache: rotating when its window is shorter than the context). */
kv_cache *engine_layer_cache(const model *m, int layer, int ctx, int max_T);
/* Makes every own cache of s (not the layers that read another's) ready for T new
 * rows at s->pos, so that the forward after it cannot fail half-way on memory. -1
 * with a message naming the layer; the caches hold what they held. */
int engine_prepare_caches(celer_session *s, int T);
/* A decode step of n >= 2 sessions, one token each (tok [n]), whose next tokens are
 * drawn on the device in one launch (backend_ops.sample_rows): row i with dev[i]
 * set is drawn with sp[i] and u[i] into out[i] (the session keeps no host logits);
 * a row without it has its logits copied to the session (host sampling, as
 * celer_batch_eval leaves them). Every session advances by its token, or none does
 * (-1 with a message; the caller's draws are not used then). */
int engine_batch_decode_sample(celer_session *const *ss, const int32_t *tok, int n, const unsigned char *dev,
                               const sample_params *sp, const double *u, int32_t *out);
/* The same step queued without waiting (the pipelined loop, engine/generate.c): tok
 * NULL takes the inputs from rows 0..n-1 of ss[0]'s scratch token ids (where the last
 * batched draw wrote them, moved to these rows by the caller), and every session then
 * holds -1 at tokens[pos - 1] until the caller stores the token it reads; the draws go
 * to result slot `slot` (< SAMPLE_SLOTS) and to those token ids. A host row's logits
 * stay on the device (read them from ss[0]'s scratch row i once the slot has landed).
 * -1 with a message, every session as before. */
int engine_batch_decode_queue(celer_session *const *ss, const int32_t *tok, int n, const unsigned char *dev,
                              const sample_params *sp, const double *u, int slot);
/* -1 with a message naming the first id of tok [n] outside m's vocabulary and its
 * index; 0 when every id is in range. */
int engine_check_tokens(const model *m, const int32_t *tok, int n);
/* Bytes a snapshot keeps alive (the rows its views hold, tokens, logits). */
size_t engine_snapshot_bytes(const celer_snapshot *snap);
/* A snapshot of n layers for cm with empty caches of the right kinds (file loading). */
celer_snapshot *engine_snapshot_alloc(const celer_model *cm, int pos);
/* 0 when the caches of snap can be taken back to p tokens (see kv_can_truncate). */
int engine_snapshot_can_rewind(const celer_snapshot *snap, int p);
/* Cache files (snapshot.c): writes snaps [n] to path; reads every entry of path
 * (caches sized for the model's context), *n gets their count. */
int engine_write_snapshots(const celer_model *cm, const celer_snapshot *const *snaps, int n, const char *path);
celer_snapshot **engine_read_snapshots(const celer_model *cm, const char *path, int *n);
/* One decode step whose token a device sampler wrote into the scratch's token ids:
 * the logits stay in device memory (has_logits is cleared) and tokens[pos] is -1
 * until the caller stores the token it reads back. */
int engine_step_device_token(celer_session *s);
/* 64-bit identity of a model: config shape plus a hash of some of its weights. */
uint64_t engine_model_fingerprint(const model *m);
#endif
