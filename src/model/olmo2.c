/* model/olmo2.c: the OLMo 2 family description. Llama-like layers whose norms come
 * after the attention and the MLP instead of before (x += post_norm(f(x)), as in
 * EXAONE 4), and whose q and k are RMS-normalized over the whole projection
 * (weights [n_heads * head_dim] and [n_kv * head_dim]) before RoPE. */
#include "base/err.h"
#include "model/model.h"

static int describe_olmo2(model *m, const json_t *j, const char *where) {
    const llama_shape s = {.qk_norm = QK_NORM_WHOLE, .window = WINDOW_NONE, .norm = NORM_POST};
    return model_describe_llama(m, j, where, &s);
}

/* The q/k norms span the projection, not a head: bound here at their own size. */
static int bind_olmo2(model *m, int l) {
    const layer_plan *p = &m->plan[l];
    layer_weights *w = &m->lw[l];
    char n[256];
    return model_vec(m, &w->q_norm, model_layer_name(m, l, "self_attn.q_norm.weight", n, sizeof n), (int64_t)p->n_heads * p->head_dim) ||
                   model_vec(m, &w->k_norm, model_layer_name(m, l, "self_attn.k_norm.weight", n, sizeof n), (int64_t)p->n_kv * p->head_dim)
               ? -1
               : 0;
}

static const char *const olmo2_types[] = {"olmo2", NULL};

const family_desc family_olmo2 = {.name = "olmo2", .title = "OLMo 2", .model_types = olmo2_types, .describe = describe_olmo2, .bind_own = bind_olmo2};
