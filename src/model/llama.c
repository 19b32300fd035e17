/* model/llama.c: the Llama and Qwen3 family descriptions. Both are pre-norm
 * transformers with SwiGLU MLPs and one RoPE table; Qwen3 adds per-head q/k RMSNorm
 * and, with use_sliding_window, sliding layers from max_window_layers on. */
#include <math.h>

#include "base/err.h"
#include "base/json.h"
#include "model/model.h"

static int describe_common(model *m, const json_t *j, const char *where, int qk_norm) {
    model_config *c = &m->cfg;
    c->tie = 0;
    if (model_parse_common(m, j, where) != 0) return -1;
    c->act = ACT_SILU;
    int bias;
    if (jget_bool(j, "attention_bias", 0, &bias, where)) return -1;
    if (rope_spec_parse(&m->rope_specs[0], json_object_get(j, "rope_parameters"), j, where) != 0) return -1;
    m->n_ropes = 1;
    int64_t window = 0, max_window_layers = 0;
    int use_sliding = 0;
    if (qk_norm) {
        if (jget_bool(j, "use_sliding_window", 0, &use_sliding, where) ||
            jget_int(j, "sliding_window", 0, &window, where) ||
            jget_int(j, "max_window_layers", c->n_layers, &max_window_layers, where))
            return -1;
        if (use_sliding && window <= 0) return err_set("%s: use_sliding_window needs a positive \"sliding_window\"", where);
    }
    for (int l = 0; l < c->n_layers; l++) {
        layer_plan *p = &m->plan[l];
        p->n_heads = c->n_heads;
        p->n_kv = c->n_kv;
        p->head_dim = c->head_dim;
        p->rope = 0;
        p->window = use_sliding && l >= max_window_layers ? (int)window : 0;
        p->qk_norm = qk_norm;
        p->attn_bias = bias;
        p->inter = c->inter;
        p->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    }
    return 0;
}

static int describe_llama(model *m, const json_t *j, const char *where) {
    return describe_common(m, j, where, 0);
}

static int describe_qwen3(model *m, const json_t *j, const char *where) {
    return describe_common(m, j, where, 1);
}

static const char *const llama_types[] = {"llama", NULL};
static const char *const qwen3_types[] = {"qwen3", NULL};

const family_desc family_llama = {
    .name = "llama",
    .title = "Llama",
    .model_types = llama_types,
    .describe = describe_llama,
};
const family_desc family_qwen3 = {
    .name = "qwen3",
    .title = "Qwen3",
    .model_types = qwen3_types,
    .describe = describe_qwen3,
};
