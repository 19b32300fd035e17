/* model/llama.c: the Llama-like family descriptions: Llama, Qwen3, Qwen 2/2.5,
 * Mistral and SmolLM3, and the shared description Phi-3, Mixtral and OLMo 2 adjust
 * (model_describe_llama). All are transformers with SwiGLU MLPs and one RoPE table.
 * Qwen3 adds per-head q/k RMSNorm; Qwen 2 biases on q, k and v (not o); Qwen 2/3
 * and SmolLM3 slide the window from max_window_layers on when use_sliding_window
 * is set (or as layer_types says); Mistral slides it on every layer; SmolLM3 leaves
 * RoPE out of the layers no_rope_layers marks 0. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/json.h"
#include "model/model.h"

const char *model_layer_name(const model *m, int l, const char *name, char *buf, size_t n) {
    snprintf(buf, n, "%slayers.%d.%s", m->prefix, l, name);
    return buf;
}

/* The sliding layers and their window under the family's rule; window 0: none. */
static int window_layers(const model *m, const json_t *j, window_rule rule, int *sliding, int64_t *window, const char *where) {
    const int L = m->cfg.n_layers;
    *window = 0;
    if (rule == WINDOW_NONE) return 0;
    if (jget_int(j, "sliding_window", 0, window, where)) return -1;
    if (*window < 0) return err_set("%s: key \"sliding_window\" = %lld must be positive", where, (long long)*window);
    if (rule == WINDOW_ALL) {
        for (int l = 0; l < L; l++) sliding[l] = *window > 0;
        return 0;
    }
    /* Qwen's rule: the window exists only with use_sliding_window; layer_types when the
     * config has them, else layers from max_window_layers on */
    int use;
    int64_t from;
    if (jget_bool(j, "use_sliding_window", 0, &use, where) || jget_int(j, "max_window_layers", L, &from, where)) return -1;
    if (!use) {
        *window = 0;
        return 0;
    }
    if (*window <= 0) return err_set("%s: use_sliding_window needs a positive \"sliding_window\"", where);
    const json_t *lt = json_object_get(j, "layer_types");
    if (lt && !json_is_null(lt)) return model_layer_types(j, L, 0, sliding, where);
    for (int l = 0; l < L; l++) sliding[l] = l >= from;
    return 0;
}

int model_describe_llama(model *m, const json_t *j, const char *where, const llama_shape *s) {
    model_config *c = &m->cfg;
    c->tie = s->tie;
    if (model_parse_common(m, j, where) != 0) return -1;
    c->act = ACT_SILU;
    int bias;
    int64_t window;
    if (jget_bool(j, "attention_bias", s->bias_default, &bias, where)) return -1;
    if (rope_spec_parse(&m->rope_specs[0], model_rope_params(j, "full_attention"), j, where) != 0) return -1;
    m->n_ropes = 1;
    if (m->rope_specs[0].type == ROPE_LONGROPE) {
        /* the long table beside the short one, for sequences past the original length */
        m->rope_specs[1] = m->rope_specs[0];
        m->rope_specs[1].use_long = 1;
        m->n_ropes = 2;
        m->rope_long = 1;
        m->rope_long_after = (int)m->rope_specs[0].orig_max_pos;
    }
    int *sliding = calloc((size_t)c->n_layers, sizeof *sliding);
    if (!sliding) return err_set("out of memory");
    if (window_layers(m, j, s->window, sliding, &window, where)) {
        free(sliding);
        return -1;
    }
    for (int l = 0; l < c->n_layers; l++) {
        layer_plan *p = &m->plan[l];
        p->n_heads = c->n_heads;
        p->n_kv = c->n_kv;
        p->head_dim = c->head_dim;
        p->rope = 0;
        p->window = sliding[l] ? (int)window : 0;
        p->qk_norm = s->qk_norm;
        p->attn_bias = bias;
        p->norm = s->norm;
        p->inter = c->inter;
        p->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    }
    free(sliding);
    return 0;
}

static int describe_llama(model *m, const json_t *j, const char *where) {
    const llama_shape s = {.window = WINDOW_NONE, .norm = NORM_PRE};
    return model_describe_llama(m, j, where, &s);
}

static int describe_qwen3(model *m, const json_t *j, const char *where) {
    const llama_shape s = {.qk_norm = QK_NORM_HEAD, .window = WINDOW_QWEN, .norm = NORM_PRE};
    return model_describe_llama(m, j, where, &s);
}

/* Qwen 2: biases on q, k and v, always, and none on o; bound by bind_qwen2 since
 * the shared binder's attn_bias also wants o_proj.bias. */
static int describe_qwen2(model *m, const json_t *j, const char *where) {
    const llama_shape s = {.window = WINDOW_QWEN, .norm = NORM_PRE};
    if (model_describe_llama(m, j, where, &s)) return -1;
    for (int l = 0; l < m->cfg.n_layers; l++) m->plan[l].attn_bias = 0;
    return 0;
}

static int bind_qwen2(model *m, int l) {
    const layer_plan *p = &m->plan[l];
    layer_weights *w = &m->lw[l];
    const int64_t qd = (int64_t)p->n_heads * p->head_dim, kd = (int64_t)p->n_kv * p->head_dim;
    char n[256];
    return model_vec(m, &w->bq, model_layer_name(m, l, "self_attn.q_proj.bias", n, sizeof n), qd) ||
                   model_vec(m, &w->bk, model_layer_name(m, l, "self_attn.k_proj.bias", n, sizeof n), kd) ||
                   model_vec(m, &w->bv, model_layer_name(m, l, "self_attn.v_proj.bias", n, sizeof n), kd)
               ? -1
               : 0;
}

static int describe_mistral(model *m, const json_t *j, const char *where) {
    const llama_shape s = {.window = WINDOW_ALL, .norm = NORM_PRE};
    return model_describe_llama(m, j, where, &s);
}

/* SmolLM3: no_rope_layers[l] is 1 where layer l uses RoPE; absent, every
 * no_rope_layer_interval-th layer (1-based) goes without. */
static int describe_smollm3(model *m, const json_t *j, const char *where) {
    const llama_shape s = {.tie = 1, .window = WINDOW_QWEN, .norm = NORM_PRE};
    static const char *const none[] = {NULL};
    if (model_reject_key(j, "mlp_bias", none, where) || model_describe_llama(m, j, where, &s)) return -1;
    const int L = m->cfg.n_layers;
    const json_t *nr = json_object_get(j, "no_rope_layers");
    int64_t every;
    if (jget_int(j, "no_rope_layer_interval", 4, &every, where)) return -1;
    if (nr && !json_is_null(nr) && (!json_is_array(nr) || (int)json_array_size(nr) != L))
        return err_set("%s: key \"no_rope_layers\" must be an array of %d integers", where, L);
    if ((!nr || json_is_null(nr)) && every <= 0)
        return err_set("%s: key \"no_rope_layer_interval\" = %lld must be positive", where, (long long)every);
    for (int l = 0; l < L; l++) {
        int use;
        if (nr && !json_is_null(nr)) {
            const json_t *v = json_array_get(nr, (size_t)l);
            if (!json_is_integer(v) || (json_integer_value(v) != 0 && json_integer_value(v) != 1))
                return err_set("%s: no_rope_layers[%d] must be 0 or 1", where, l);
            use = (int)json_integer_value(v);
        } else {
            use = (l + 1) % every != 0;
        }
        m->plan[l].rope = use ? 0 : -1;
    }
    return 0;
}

static const char *const llama_types[] = {"llama", NULL};
static const char *const qwen3_types[] = {"qwen3", NULL};
static const char *const qwen2_types[] = {"qwen2", NULL};
static const char *const mistral_types[] = {"mistral", NULL};
static const char *const smollm3_types[] = {"smollm3", NULL};

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
const family_desc family_qwen2 = {
    .name = "qwen2",
    .title = "Qwen 2",
    .model_types = qwen2_types,
    .describe = describe_qwen2,
    .bind_own = bind_qwen2,
};
const family_desc family_mistral = {
    .name = "mistral",
    .title = "Mistral",
    .model_types = mistral_types,
    .describe = describe_mistral,
};
const family_desc family_smollm3 = {
    .name = "smollm3",
    .title = "SmolLM3",
    .model_types = smollm3_types,
    .describe = describe_smollm3,
};
