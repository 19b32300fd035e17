/* model/model.c: opens a checkpoint, finds its family by model_type, lets the
 * family describe the layer plan, and binds every weight the plan names (checking
 * shapes against the config). Owns the checkpoint mapping and the backend. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/json.h"
#include "model/model.h"

static const family_desc *const families[] = {&family_llama, &family_qwen3};

static const family_desc *find_family(const char *type) {
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        for (const char *const *t = families[i]->model_types; *t; t++)
            if (strcmp(*t, type) == 0) return families[i];
    return NULL;
}

static void known_types(char *buf, size_t n) {
    size_t k = 0;
    buf[0] = 0;
    for (size_t i = 0; i < sizeof families / sizeof families[0]; i++)
        for (const char *const *t = families[i]->model_types; *t && k < n; t++)
            k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? ", " : "", *t);
}

static int bind(model *m, weight *w, const char *module, int64_t rows, int64_t cols) {
    if (weight_bind(w, m->ck, &m->quant, module, rows, cols) != 0) return -1;
    m->weight_bytes += w->nbytes;
    m->n_params += rows * cols;
    return 0;
}

static int vec(model *m, float **out, const char *name, int64_t n) {
    if (!(*out = vec_load_f32(m->ck, name, n))) return -1;
    m->n_params += n;
    return 0;
}

static int bind_layer(model *m, int l) {
    const model_config *c = &m->cfg;
    const layer_plan *p = &m->plan[l];
    layer_weights *w = &m->lw[l];
    int64_t H = c->hidden, qd = (int64_t)p->n_heads * p->head_dim, kd = (int64_t)p->n_kv * p->head_dim;
    char n[256];
#define NAME(fmt) (snprintf(n, sizeof n, "model.layers.%d." fmt, l), n)
    if (bind(m, &w->wq, NAME("self_attn.q_proj"), qd, H) || bind(m, &w->wk, NAME("self_attn.k_proj"), kd, H) ||
        bind(m, &w->wv, NAME("self_attn.v_proj"), kd, H) || bind(m, &w->wo, NAME("self_attn.o_proj"), H, qd) ||
        bind(m, &w->gate, NAME("mlp.gate_proj"), p->inter, H) || bind(m, &w->up, NAME("mlp.up_proj"), p->inter, H) ||
        bind(m, &w->down, NAME("mlp.down_proj"), H, p->inter) ||
        vec(m, &w->attn_norm, NAME("input_layernorm.weight"), H) ||
        vec(m, &w->mlp_norm, NAME("post_attention_layernorm.weight"), H))
        return -1;
    if (p->qk_norm && (vec(m, &w->q_norm, NAME("self_attn.q_norm.weight"), p->head_dim) ||
                       vec(m, &w->k_norm, NAME("self_attn.k_norm.weight"), p->head_dim)))
        return -1;
    if (p->attn_bias && (vec(m, &w->bq, NAME("self_attn.q_proj.bias"), qd) || vec(m, &w->bk, NAME("self_attn.k_proj.bias"), kd) ||
                         vec(m, &w->bv, NAME("self_attn.v_proj.bias"), kd) || vec(m, &w->bo, NAME("self_attn.o_proj.bias"), H)))
        return -1;
#undef NAME
    return 0;
}

static int64_t max_cols(const model *m) {
    int64_t mc = m->cfg.hidden;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        int64_t a = (int64_t)m->plan[l].n_heads * m->plan[l].head_dim;
        if (a > mc) mc = a;
        if (m->plan[l].inter > mc) mc = m->plan[l].inter;
    }
    return mc;
}

model *model_open(const char *dir, int n_threads) {
    model *m = calloc(1, sizeof *m);
    if (!m) { err_set("out of memory"); return NULL; }
    if (!(m->ck = ckpt_open(dir))) goto fail;
    const json_t *j = m->ck->config;
    const char *where = m->ck->config_path, *type;
    if (jget_str(j, "model_type", NULL, &type, where)) goto fail;
    if (!type) { err_set("%s: missing required key \"model_type\"", where); goto fail; }
    snprintf(m->model_type, sizeof m->model_type, "%s", type);
    if (!(m->fam = find_family(type))) {
        char known[256];
        known_types(known, sizeof known);
        err_set("%s: unknown model_type \"%s\" (supported: %s)", where, type, known);
        goto fail;
    }
    if (quant_cfg_init(&m->quant, j, where) != 0) goto fail;
    if (m->fam->describe(m, j, where) != 0) goto fail;
    for (int r = 0; r < m->n_ropes; r++)
        if (rope_table_init(&m->ropes[r], &m->rope_specs[r], m->cfg.head_dim) != 0) { err_prefix("%s", where); goto fail; }
    if (!(m->lw = calloc((size_t)m->cfg.n_layers, sizeof *m->lw))) { err_set("out of memory"); goto fail; }
    const model_config *c = &m->cfg;
    if (weight_bind(&m->embed, m->ck, &m->quant, "model.embed_tokens", c->vocab, c->hidden) != 0) goto fail;
    m->n_params += (int64_t)c->vocab * c->hidden;
    for (int l = 0; l < c->n_layers; l++)
        if (bind_layer(m, l) != 0) goto fail;
    if (vec(m, &m->final_norm, "model.norm.weight", c->hidden) != 0) goto fail;
    if (c->tie) {
        m->lm_head = m->embed;
        m->weight_bytes += m->embed.nbytes;
    } else if (bind(m, &m->lm_head, "lm_head", c->vocab, c->hidden) != 0) {
        goto fail;
    }
    if (!(m->be = backend_cpu_new(n_threads, max_cols(m)))) goto fail;
    return m;
fail:
    model_free(m);
    return NULL;
}

void model_free(model *m) {
    if (!m) return;
    if (m->lw) {
        for (int l = 0; l < m->cfg.n_layers; l++) {
            layer_weights *w = &m->lw[l];
            free(w->attn_norm); free(w->mlp_norm); free(w->q_norm); free(w->k_norm);
            free(w->bq); free(w->bk); free(w->bv); free(w->bo);
        }
    }
    free(m->lw);
    free(m->plan);
    free(m->final_norm);
    for (int r = 0; r < MODEL_MAX_ROPES; r++) rope_table_free(&m->ropes[r]);
    backend_free(m->be);
    ckpt_close(m->ck);
    free(m);
}
