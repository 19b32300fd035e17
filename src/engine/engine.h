/* engine/engine.h: the structs behind the public handles of celer.h. */
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
    kv_cache **caches;        /* [n_layers] */
    model_scratch *scratch;   /* activations for one batch */
    float *last;              /* [vocab] logits after the last token */
    int has_logits;
};
#endif
