/* model/model.c: opens a checkpoint, finds its family by model_type (in the
 * registry, model/registry.c), lets the
 * family describe the layer plan, and binds every weight the plan names (checking
 * shapes against the plan). Which tensors a layer has follows from its switches:
 * norm placement, q/k/v norms, KV sharing, K-equals-V, biases, sinks, dense MLP,
 * MoE (named by the family), per-layer inputs, layer scalar. Owns the checkpoint
 * mapping, the loaded vectors and the backend. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "backend/tp_group.h"
#include "base/json.h"
#include "base/settings.h"
#include "model/model.h"
#include "model/registry.h"

/* Both skip what a family's bind_own bound already. */
int model_bind(model *m, weight *w, const char *module, int64_t rows, int64_t cols) {
    if (w->data) return 0;
    if (weight_bind(w, m->ck, &m->quant, module, rows, cols) != 0) return -1;
    m->weight_bytes += w->nbytes;
    m->n_params += rows * cols;
    return 0;
}

int model_vec(model *m, float **out, const char *name, int64_t n) {
    if (*out) return 0;
    if (!(*out = vec_load_f32(m->ck, name, n))) return -1;
    m->n_params += n;
    return 0;
}

static int bind_attention(model *m, int l, char *n, size_t nn) {
    const model_config *c = &m->cfg;
    const layer_plan *p = &m->plan[l];
    layer_weights *w = &m->lw[l];
    int64_t H = c->hidden, qd = (int64_t)p->n_heads * p->head_dim, kd = (int64_t)p->n_kv * p->head_dim;
    int own_kv = p->kv_source < 0, has_v = own_kv && !p->k_eq_v;
#define NAME(fmt) (snprintf(n, nn, "%slayers.%d." fmt, m->prefix, l), n)
    if (model_bind(m, &w->wq, NAME("self_attn.q_proj"), qd, H) || model_bind(m, &w->wo, NAME("self_attn.o_proj"), H, qd))
        return -1;
    if (own_kv && model_bind(m, &w->wk, NAME("self_attn.k_proj"), kd, H)) return -1;
    if (has_v && model_bind(m, &w->wv, NAME("self_attn.v_proj"), kd, H)) return -1;
    if (p->qk_norm && model_vec(m, &w->q_norm, NAME("self_attn.q_norm.weight"), p->head_dim)) return -1;
    if (p->qk_norm && own_kv && model_vec(m, &w->k_norm, NAME("self_attn.k_norm.weight"), p->head_dim)) return -1;
    if (p->attn_bias) {
        if (model_vec(m, &w->bq, NAME("self_attn.q_proj.bias"), qd) || model_vec(m, &w->bo, NAME("self_attn.o_proj.bias"), H)) return -1;
        if (own_kv && model_vec(m, &w->bk, NAME("self_attn.k_proj.bias"), kd)) return -1;
        if (has_v && model_vec(m, &w->bv, NAME("self_attn.v_proj.bias"), kd)) return -1;
    }
    if (p->sinks && model_vec(m, &w->sinks, NAME("self_attn.sinks"), p->n_heads)) return -1;
    return 0;
}

static int bind_norms(model *m, int l, char *n, size_t nn) {
    const layer_plan *p = &m->plan[l];
    layer_weights *w = &m->lw[l];
    int64_t H = m->cfg.hidden;
    switch (p->norm) {
    case NORM_PRE: /* Llama naming: the pre-MLP norm is called post_attention_layernorm */
        return model_vec(m, &w->attn_norm, NAME("input_layernorm.weight"), H) ||
               model_vec(m, &w->mlp_norm, NAME("post_attention_layernorm.weight"), H) ? -1 : 0;
    case NORM_SANDWICH:
        return model_vec(m, &w->attn_norm, NAME("input_layernorm.weight"), H) ||
               model_vec(m, &w->attn_post_norm, NAME("post_attention_layernorm.weight"), H) ||
               model_vec(m, &w->mlp_norm, NAME("pre_feedforward_layernorm.weight"), H) ||
               model_vec(m, &w->mlp_post_norm, NAME("post_feedforward_layernorm.weight"), H) ? -1 : 0;
    case NORM_POST:
        return model_vec(m, &w->attn_post_norm, NAME("post_attention_layernorm.weight"), H) ||
               model_vec(m, &w->mlp_post_norm, NAME("post_feedforward_layernorm.weight"), H) ? -1 : 0;
    }
    return err_set("layer %d: bad norm placement", l);
}

static int bind_layer(model *m, int l) {
    const model_config *c = &m->cfg;
    const layer_plan *p = &m->plan[l];
    layer_weights *w = &m->lw[l];
    int64_t H = c->hidden;
    char n[256];
    size_t nn = sizeof n;
    w->layer_scalar = 1.0f;
    if (m->fam->bind_own && m->fam->bind_own(m, l) != 0) return -1;
    if (bind_attention(m, l, n, nn) || bind_norms(m, l, n, nn)) return -1;
    if (p->inter > 0 &&
        (model_bind(m, &w->gate, NAME("mlp.gate_proj"), p->inter, H) || model_bind(m, &w->up, NAME("mlp.up_proj"), p->inter, H) ||
         model_bind(m, &w->down, NAME("mlp.down_proj"), H, p->inter)))
        return -1;
    if (p->moe.n_experts > 0) {
        if (!m->fam->bind_moe) return err_set("layer %d: the %s family has no experts", l, m->fam->name);
        if (m->fam->bind_moe(m, l) != 0) return -1;
    }
    if (p->per_layer_input) {
        int64_t P = c->ple_dim;
        if (model_bind(m, &w->ple_gate, NAME("per_layer_input_gate"), P, H) ||
            model_bind(m, &w->ple_proj, NAME("per_layer_projection"), H, P) ||
            model_vec(m, &w->ple_post_norm, NAME("post_per_layer_input_norm.weight"), H))
            return -1;
    }
    if (p->layer_scalar) {
        float *v = NULL;
        if (model_vec(m, &v, NAME("layer_scalar"), 1)) return -1;
        w->layer_scalar = v[0];
        free(v);
    }
#undef NAME
    return 0;
}

/* The widest row any product reads (bounds the backend's per-thread scratch). */
int64_t model_max_cols(const model *m) {
    int64_t mc = m->cfg.hidden;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const layer_plan *p = &m->plan[l];
        int64_t a = (int64_t)p->n_heads * p->head_dim;
        if (a > mc) mc = a;
        if (p->inter > mc) mc = p->inter;
        if (p->moe.inter > mc) mc = p->moe.inter;
    }
    if (m->cfg.ple_dim > mc) mc = m->cfg.ple_dim;
    return mc;
}

static int bind_model(model *m) {
    const model_config *c = &m->cfg;
    char n[256];
    snprintf(n, sizeof n, "%sembed_tokens", m->prefix);
    if (weight_bind(&m->embed, m->ck, &m->quant, n, c->vocab, c->hidden) != 0) return -1;
    m->n_params += (int64_t)c->vocab * c->hidden;
    if (c->ple_dim > 0) {
        int64_t LP = (int64_t)c->n_layers * c->ple_dim;
        snprintf(n, sizeof n, "%sembed_tokens_per_layer", m->prefix);
        if (weight_bind(&m->ple_embed, m->ck, &m->quant, n, c->ple_vocab, LP) != 0) return -1;
        m->n_params += c->ple_vocab * LP;
        snprintf(n, sizeof n, "%sper_layer_model_projection", m->prefix);
        if (model_bind(m, &m->ple_model_proj, n, LP, c->hidden) != 0) return -1;
        snprintf(n, sizeof n, "%sper_layer_projection_norm.weight", m->prefix);
        if (model_vec(m, &m->ple_proj_norm, n, c->ple_dim) != 0) return -1;
    }
    for (int l = 0; l < c->n_layers; l++)
        if (bind_layer(m, l) != 0) return -1;
    snprintf(n, sizeof n, "%snorm.weight", m->prefix);
    if (model_vec(m, &m->final_norm, n, c->hidden) != 0) return -1;
    if (c->tie) {
        m->lm_head = m->embed;
        m->weight_bytes += m->embed.nbytes;
        return 0;
    }
    return model_bind(m, &m->lm_head, m->head_name, c->vocab, c->hidden);
}

static uint64_t fnv(uint64_t h, const void *p, size_t n) {
    const unsigned char *b = p;
    for (size_t i = 0; i < n; i++) h = (h ^ b[i]) * 0x100000001b3ull;
    return h;
}

/* What identifies a checkpoint for cache files and snapshots: type, shapes, layer
 * kinds, and a few kilobytes of weights that tell two checkpoints of one shape apart. */
static uint64_t fingerprint(const model *m) {
    uint64_t h = 0xcbf29ce484222325ull;
    const model_config *c = &m->cfg;
    int shape[] = {c->vocab, c->hidden, c->n_layers};
    h = fnv(h, m->model_type, strlen(m->model_type));
    h = fnv(h, shape, sizeof shape);
    for (int l = 0; l < c->n_layers; l++) {
        int p[] = {m->plan[l].n_kv, m->plan[l].head_dim, m->plan[l].window};
        h = fnv(h, p, sizeof p);
    }
    if (m->embed.data) h = fnv(h, m->embed.data, m->embed.nbytes < 4096 ? m->embed.nbytes : 4096);
    if (m->final_norm) h = fnv(h, m->final_norm, (size_t)c->hidden * sizeof(float));
    return h;
}

int model_load(model *m) {
    snprintf(m->prefix, sizeof m->prefix, "model.");
    snprintf(m->head_name, sizeof m->head_name, "lm_head");
    const json_t *j = m->ck->config;
    const char *where = m->ck->config_path, *type;
    if (jget_str(j, "model_type", NULL, &type, where)) return -1;
    if (!type) return err_set("%s: missing required key \"model_type\"", where);
    snprintf(m->model_type, sizeof m->model_type, "%s", type);
    if (!(m->fam = registry_find(type))) {
        char known[512];
        registry_model_types(known, sizeof known);
        return err_set("%s: unknown model_type \"%s\" (supported: %s)", where, type, known);
    }
    if (quant_cfg_init(&m->quant, j, where) != 0) return -1;
    if (m->fam->describe(m, j, where) != 0) return -1;
    for (int r = 0; r < m->n_ropes; r++)
        if (rope_table_init(&m->ropes[r], &m->rope_specs[r], m->cfg.head_dim) != 0) return err_prefix("%s", where);
    if (!(m->lw = calloc((size_t)m->cfg.n_layers, sizeof *m->lw))) return err_set("out of memory");
    if (bind_model(m) != 0) return -1;
    m->fingerprint = fingerprint(m);
    return 0;
}

model *model_open(const char *dir, int n_threads, const char *device) {
    model *m = calloc(1, sizeof *m);
    if (!m) { err_set("out of memory"); return NULL; }
    if (!(m->ck = ckpt_open(dir))) goto fail;
    if (model_load(m) != 0) goto fail;
    const long tp = setting_int(SET_CELER_TP);
    if (tp != 0) {
        /* --tp N (N >= 1): the split path, even at one rank */
        if (tp < 0 || tp > TP_MAX_RANKS) {
            err_set("--tp %ld (CELER_TP): want 1..%d ranks (0 or absent: no tensor parallelism)", tp, TP_MAX_RANKS);
            goto fail;
        }
        if (model_tp_open(m, (int)tp, n_threads, device) != 0) goto fail;
        return m;
    }
    if (!(m->be = backend_open(device, n_threads, model_max_cols(m)))) goto fail;
    if (model_precision_init(m) != 0) goto fail;
    if (model_upload(m) != 0) goto fail;
    return m;
fail:
    model_free(m);
    return NULL;
}

void model_free(model *m) {
    if (!m) return;
    model_tp_close(m);
    model_release(m);
    if (m->lw)
        for (int l = 0; l < m->cfg.n_layers; l++) {
            moe_weights *e = &m->lw[l].moe;
            free(e->gate_up); free(e->gate); free(e->up); free(e->down);
        }
    free(m->lw);
    free(m->plan);
    for (int r = 0; r < MODEL_MAX_ROPES; r++) rope_table_free(&m->ropes[r]);
    backend_free(m->be);
    for (int i = 0; i < m->n_tp_owned; i++) free(m->tp_owned[i]);
    free(m->tp_owned);
    if (!m->ck_borrowed) ckpt_close(m->ck);
    free(m);
}
