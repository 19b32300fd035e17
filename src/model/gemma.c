/* model/gemma.c: the Gemma 2, Gemma 3 and Gemma 4 (text) family descriptions. All scale the
 * embedding by sqrt(hidden) in the weight dtype, wrap attention and feed-forward in
 * sandwich norms, use q/k norms and GELU-tanh, and alternate sliding and full layers
 * with a RoPE table per layer type. Gemma 3 norms scale by (1 + w); Gemma 4's by w,
 * and Gemma 4 adds per-layer inputs, per-layer head dims, proportional RoPE, KV
 * sharing, K-equals-V, layer scalars and a MoE block beside the MLP. Multimodal
 * checkpoints (model_type gemma3 / gemma4) give their text model in text_config and
 * keep its weights under language_model. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/json.h"
#include "model/model.h"

/* The text config with transformers' defaults under the keys config.json leaves out
 * (multimodal configs state only what differs). New reference; NULL on error. */
static json_t *text_config(const json_t *top, const char *defaults, const char *where) {
    const json_t *tc = json_object_get(top, "text_config");
    if (tc && !json_is_object(tc)) { err_set("%s: key \"text_config\" must be an object", where); return NULL; }
    json_error_t e;
    json_t *j = json_loads(defaults, 0, &e);
    if (!j) { err_set("internal: bad defaults: %s", e.text); return NULL; }
    /* dtype is often stated only at the top of a multimodal config */
    const char *dk[] = {"dtype", "torch_dtype"};
    for (int i = 0; i < 2; i++)
        if (json_object_get(top, dk[i])) json_object_set(j, dk[i], json_object_get(top, dk[i]));
    json_object_update(j, (json_t *)(tc ? tc : top));
    return j;
}

/* Finds where the decoder's weights live: text-only checkpoints under "model.",
 * multimodal ones under "language_model.model." (transformers 4) or
 * "model.language_model." (transformers 5). */
static int find_prefix(model *m) {
    static const char *const pre[][2] = {
        {"model.", "lm_head"},
        {"language_model.model.", "language_model.lm_head"},
        {"model.language_model.", "lm_head"},
    };
    for (size_t i = 0; i < sizeof pre / sizeof pre[0]; i++) {
        char n[128];
        snprintf(n, sizeof n, "%sembed_tokens.weight", pre[i][0]);
        if (ckpt_find(m->ck, n)) {
            snprintf(m->prefix, sizeof m->prefix, "%s", pre[i][0]);
            snprintf(m->head_name, sizeof m->head_name, "%s", pre[i][1]);
            return 0;
        }
    }
    return err_set("%s: missing weight \"model.embed_tokens.weight\" (nor under language_model.)", m->ck->dir);
}

static int gelu_tanh_act(const json_t *j, const char *where) {
    const char *act;
    if (jget_str(j, "hidden_activation", NULL, &act, where)) return -1;
    if (!act && jget_str(j, "hidden_act", "gelu_pytorch_tanh", &act, where)) return -1;
    if (strcmp(act, "gelu_pytorch_tanh") != 0 && strcmp(act, "gelu_tanh") != 0)
        return err_set("%s: hidden_activation \"%s\" is not supported (gelu_pytorch_tanh)", where, act);
    return 0;
}

/* Adds a RoPE table (or reuses an identical one) for spec at head_dim; its index. */
static int add_rope(model *m, const rope_spec *r, int head_dim, const char *where) {
    rope_spec s = *r;
    s.head_dim = head_dim;
    for (int i = 0; i < m->n_ropes; i++) {
        const rope_spec *o = &m->rope_specs[i];
        if (o->type == s.type && o->theta == s.theta && o->factor == s.factor && o->partial == s.partial &&
            o->head_dim == s.head_dim && o->attn_factor == s.attn_factor && o->orig_max_pos == s.orig_max_pos &&
            o->low_freq_factor == s.low_freq_factor && o->high_freq_factor == s.high_freq_factor &&
            o->beta_fast == s.beta_fast && o->beta_slow == s.beta_slow && o->truncate == s.truncate &&
            o->mscale == s.mscale && o->mscale_all_dim == s.mscale_all_dim)
            return i;
    }
    if (m->n_ropes == MODEL_MAX_ROPES) return err_set("%s: more than %d distinct RoPE tables", where, MODEL_MAX_ROPES);
    m->rope_specs[m->n_ropes] = s;
    return m->n_ropes++;
}

/* The common Gemma settings: embedding scale, activation, softcaps, layer types. */
static int describe_shared(model *m, const json_t *j, const char *where, int *sliding, int def_pattern, int *window) {
    model_config *c = &m->cfg;
    c->act = ACT_GELU_TANH;
    if (gelu_tanh_act(j, where)) return -1;
    if (model_round_to_dtype(j, sqrt((double)c->hidden), &c->embed_scale, where)) return -1;
    double cap;
    if (jget_num(j, "final_logit_softcapping", 0, &cap, where)) return -1;
    if (cap < 0) return err_set("%s: key \"final_logit_softcapping\" = %g must be positive", where, cap);
    c->final_softcap = (float)cap;
    int64_t sw;
    if (jget_int(j, "sliding_window", 4096, &sw, where)) return -1;
    if (sw <= 0 || sw > (1 << 30)) return err_set("%s: key \"sliding_window\" = %lld is out of range", where, (long long)sw);
    *window = (int)sw;
    if (model_layer_types(j, c->n_layers, def_pattern, sliding, where)) return -1;
    return find_prefix(m);
}

/* ---- Gemma 3 ---- */

static const char gemma3_defaults[] =
    "{\"vocab_size\": 262208, \"hidden_size\": 2304, \"intermediate_size\": 9216, \"num_hidden_layers\": 26,"
    " \"num_attention_heads\": 8, \"num_key_value_heads\": 4, \"head_dim\": 256, \"max_position_embeddings\": 131072,"
    " \"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": true, \"query_pre_attn_scalar\": 256,"
    " \"sliding_window\": 4096, \"rope_local_base_freq\": 10000.0, \"bos_token_id\": 2, \"eos_token_id\": 1}";

static int gemma3_ropes(model *m, const json_t *j, const char *where, int *local, int *global) {
    rope_spec r;
    const json_t *rp = json_object_get(j, "rope_parameters");
    if (rp && json_is_object(rp) && json_object_get(rp, "sliding_attention")) {
        /* transformers 5: one rope_parameters object per layer type */
        const json_t *fp = model_rope_params(j, "full_attention");
        if (!fp) return err_set("%s: rope_parameters has no \"full_attention\" entry", where);
        if (rope_spec_parse(&r, model_rope_params(j, "sliding_attention"), j, where) ||
            (*local = add_rope(m, &r, 0, where)) < 0)
            return -1;
        if (rope_spec_parse(&r, fp, j, where) || (*global = add_rope(m, &r, 0, where)) < 0) return -1;
        return 0;
    }
    /* older keys: rope_theta and rope_scaling for full layers, rope_local_base_freq
     * (plain RoPE, never scaled) for sliding ones */
    double theta;
    if (jget_num(j, "rope_theta", 1000000.0, &theta, where)) return -1;
    json_t *g = json_deep_copy(j);
    if (!g) return err_set("out of memory");
    json_object_set_new(g, "rope_theta", json_real(theta));
    int rc = rope_spec_parse(&r, rp && json_is_object(rp) ? rp : NULL, g, where);
    json_decref(g);
    if (rc || (*global = add_rope(m, &r, 0, where)) < 0) return -1;
    memset(&r, 0, sizeof r);
    r.type = ROPE_DEFAULT;
    r.factor = 1;
    r.partial = 1;
    r.attn_factor = -1;
    if (jget_num(j, "rope_local_base_freq", 10000.0, &r.theta, where)) return -1;
    if (!(r.theta > 1)) return err_set("%s: key \"rope_local_base_freq\" = %g must be greater than 1", where, r.theta);
    return (*local = add_rope(m, &r, 0, where)) < 0 ? -1 : 0;
}

/* A softcap key: absent gives def (Gemma 2's are on by default), null turns it off. */
static int softcap_key(const json_t *j, const char *key, double def, double *out, const char *where) {
    const json_t *v = json_object_get(j, key);
    if (v && json_is_null(v)) def = 0;
    if (jget_num(j, key, def, out, where)) return -1;
    if (*out < 0) return err_set("%s: key \"%s\" = %g must not be negative", where, key, *out);
    return 0;
}

/* Gemma 2 and Gemma 3 (text) share their layers; Gemma 3 adds q/k norms and a RoPE
 * table per layer type (Gemma 2 has one), its default pattern is 6 (Gemma 2's 2:
 * every even layer slides), and Gemma 2's softcaps are on unless the config says
 * otherwise (attention logits 50, final logits 30). */
static int describe_gemma_2_3(model *m, const json_t *j, const char *where, int gemma3) {
    model_config *c = &m->cfg;
    c->tie = 1;
    c->norm_plus_one = 1;
    static const char *const causal_only[] = {NULL};
    if (model_parse_common(m, j, where) || model_reject_key(j, "use_bidirectional_attention", causal_only, where)) return -1;
    int *sliding = calloc((size_t)c->n_layers, sizeof *sliding), window = 0, local = 0, global = 0, bias = 0;
    double qpas, acap, fcap;
    rope_spec r;
    int rc = -1;
    if (!sliding) return err_set("out of memory");
    if (describe_shared(m, j, where, sliding, gemma3 ? 6 : 2, &window)) goto out;
    if (gemma3 ? gemma3_ropes(m, j, where, &local, &global)
               : rope_spec_parse(&r, model_rope_params(j, "full_attention"), j, where) || (local = global = add_rope(m, &r, 0, where)) < 0)
        goto out;
    if (jget_num(j, "query_pre_attn_scalar", 256, &qpas, where) ||
        softcap_key(j, "attn_logit_softcapping", gemma3 ? 0 : 50, &acap, where) ||
        softcap_key(j, "final_logit_softcapping", gemma3 ? 0 : 30, &fcap, where) || jget_bool(j, "attention_bias", 0, &bias, where))
        goto out;
    if (!(qpas > 0)) { err_set("%s: key \"query_pre_attn_scalar\" = %g must be positive", where, qpas); goto out; }
    c->final_softcap = (float)fcap;
    for (int l = 0; l < c->n_layers; l++) {
        layer_plan *p = &m->plan[l];
        p->n_heads = c->n_heads;
        p->n_kv = c->n_kv;
        p->head_dim = c->head_dim;
        p->rope = sliding[l] ? local : global;
        p->window = sliding[l] ? window : 0;
        p->qk_norm = gemma3 ? QK_NORM_HEAD : QK_NORM_NONE;
        p->attn_bias = bias;
        p->norm = NORM_SANDWICH;
        p->inter = c->inter;
        p->attn_scale = (float)(1.0 / sqrt(qpas));
        p->attn_softcap = (float)acap;
    }
    rc = 0;
out:
    free(sliding);
    return rc;
}

static int describe_gemma2(model *m, const json_t *j, const char *where) { return describe_gemma_2_3(m, j, where, 0); }

static int describe_gemma3(model *m, const json_t *top, const char *where) {
    json_t *j = text_config(top, gemma3_defaults, where);
    if (!j) return -1;
    int rc = describe_gemma_2_3(m, j, where, 1);
    json_decref(j);
    return rc;
}

/* ---- Gemma 4 ---- */

static const char gemma4_defaults[] =
    "{\"vocab_size\": 262144, \"hidden_size\": 2304, \"intermediate_size\": 9216, \"num_hidden_layers\": 30,"
    " \"num_attention_heads\": 8, \"num_key_value_heads\": 4, \"head_dim\": 256, \"max_position_embeddings\": 131072,"
    " \"rms_norm_eps\": 1e-6, \"tie_word_embeddings\": true, \"sliding_window\": 512,"
    " \"vocab_size_per_layer_input\": 262144, \"hidden_size_per_layer_input\": 256, \"global_head_dim\": 512,"
    " \"bos_token_id\": 2, \"eos_token_id\": 1}";

/* Head dim of layer l: per_layer_config["l"].head_dim, else global_head_dim on full
 * layers, else head_dim. */
static int gemma4_head_dim(const model *m, const json_t *j, int l, int full, int *hd, const char *where) {
    const json_t *plc = json_object_get(j, "per_layer_config");
    int64_t v = m->cfg.head_dim;
    if (full && jget_int(j, "global_head_dim", m->cfg.head_dim, &v, where)) return -1;
    if (plc && !json_is_null(plc)) {
        if (!json_is_object(plc)) return err_set("%s: key \"per_layer_config\" must be an object", where);
        char key[16];
        snprintf(key, sizeof key, "%d", l);
        const json_t *e = json_object_get(plc, key);
        if (e && !json_is_object(e)) return err_set("%s: per_layer_config[\"%d\"] must be an object", where, l);
        if (e) {
            const char *k;
            const json_t *val;
            json_object_foreach((json_t *)e, k, val)
                if (strcmp(k, "head_dim") != 0)
                    return err_set("%s: per_layer_config[\"%d\"] key \"%s\" is not supported (head_dim)", where, l, k);
            if (jget_int(e, "head_dim", v, &v, where)) return -1;
        } else {
            v = m->cfg.head_dim; /* a per-layer config names every layer that differs */
        }
    }
    if (v <= 0 || v > 4096 || v % 2) return err_set("%s: layer %d head_dim %lld is out of range", where, l, (long long)v);
    *hd = (int)v;
    return 0;
}

static int gemma4_ropes(const json_t *j, const char *where, rope_spec *local, rope_spec *global) {
    const json_t *sp = model_rope_params(j, "sliding_attention"), *fp = model_rope_params(j, "full_attention");
    json_t *dflt = json_loads("{\"rope_type\": \"proportional\", \"partial_rotary_factor\": 0.25, \"rope_theta\": 1000000.0}", 0, NULL);
    json_t *dsl = json_loads("{\"rope_type\": \"default\", \"rope_theta\": 10000.0}", 0, NULL);
    int rc = !dflt || !dsl ? err_set("out of memory")
                           : rope_spec_parse(local, sp ? sp : dsl, j, where) || rope_spec_parse(global, fp ? fp : dflt, j, where) ? -1 : 0;
    json_decref(dflt);
    json_decref(dsl);
    return rc;
}

static int describe_gemma4_text(model *m, const json_t *j, const char *where) {
    model_config *c = &m->cfg;
    c->tie = 1;
    c->norm_plus_one = 0;
    static const char *const text_causal[] = {"vision", NULL}; /* "vision" changes only image tokens */
    if (model_parse_common(m, j, where) || model_reject_key(j, "use_bidirectional_attention", text_causal, where) ||
        model_reject_key(j, "attention_bias", NULL, where))
        return -1;
    int L = c->n_layers, window, k_eq_v, moe, double_wide, rc = -1;
    int64_t shared, P, pv, gkv, E = 0, K = 0, EI = 0;
    rope_spec local, global;
    int *sliding = calloc((size_t)L, sizeof *sliding);
    if (!sliding) return err_set("out of memory");
    if (describe_shared(m, j, where, sliding, 6, &window) || gemma4_ropes(j, where, &local, &global) ||
        jget_bool(j, "attention_k_eq_v", 0, &k_eq_v, where) || jget_bool(j, "enable_moe_block", 0, &moe, where) ||
        jget_bool(j, "use_double_wide_mlp", 0, &double_wide, where) ||
        jget_int(j, "num_kv_shared_layers", 0, &shared, where) ||
        jget_int(j, "hidden_size_per_layer_input", 0, &P, where) || jget_int(j, "vocab_size_per_layer_input", c->vocab, &pv, where) ||
        jget_int(j, "num_global_key_value_heads", c->n_kv, &gkv, where))
        goto out;
    sliding[L - 1] = 0; /* transformers forces the last layer to full attention */
    if (shared < 0 || shared >= L) { err_set("%s: key \"num_kv_shared_layers\" = %lld is out of range (0..%d)", where, (long long)shared, L - 1); goto out; }
    if (P < 0 || P > 65536 || pv <= 0 || pv > c->vocab) { err_set("%s: per-layer input sizes (%lld, %lld) are out of range", where, (long long)P, (long long)pv); goto out; }
    if (gkv <= 0 || c->n_heads % gkv) { err_set("%s: key \"num_global_key_value_heads\" = %lld does not divide the heads", where, (long long)gkv); goto out; }
    if (moe) {
        if (jget_int_req(j, "num_experts", &E, where) || jget_int_req(j, "top_k_experts", &K, where) ||
            jget_int_req(j, "moe_intermediate_size", &EI, where))
            goto out;
        if (E <= 0 || E > MOE_MAX_EXPERTS || K <= 0 || K > E || EI <= 0) {
            err_set("%s: MoE sizes (num_experts %lld, top_k_experts %lld, moe_intermediate_size %lld) are out of range",
                    where, (long long)E, (long long)K, (long long)EI);
            goto out;
        }
    }
    c->ple_dim = (int)P;
    c->ple_vocab = (int)pv;
    if (P && model_round_to_dtype(j, sqrt((double)P), &c->ple_embed_scale, where)) goto out;
    int first_shared = L - (int)shared;
    for (int l = 0; l < L; l++) {
        layer_plan *p = &m->plan[l];
        int full = !sliding[l];
        p->n_heads = c->n_heads;
        p->n_kv = full && k_eq_v ? (int)gkv : c->n_kv;
        p->k_eq_v = full && k_eq_v;
        if (gemma4_head_dim(m, j, l, full, &p->head_dim, where)) goto out;
        if ((p->rope = add_rope(m, full ? &global : &local, p->head_dim, where)) < 0) goto out;
        p->window = full ? 0 : window;
        p->qk_norm = 1;
        p->v_norm = 1;
        p->norm = NORM_SANDWICH;
        p->inter = c->inter;
        p->attn_scale = 1.0f;
        p->per_layer_input = P > 0;
        p->layer_scalar = 1;
        if (shared > 0 && l >= first_shared) {
            /* reuse the cache of the last non-shared layer of the same type */
            int src = -1;
            for (int i = first_shared - 1; i >= 0 && src < 0; i--)
                if (sliding[i] == sliding[l]) src = i;
            if (src < 0) { err_set("%s: layer %d shares K/V but no earlier layer has its type", where, l); goto out; }
            const layer_plan *sp = &m->plan[src];
            if (sp->head_dim != p->head_dim) { err_set("%s: layer %d shares layer %d's cache but their head dims differ", where, l, src); goto out; }
            p->kv_source = src;
            p->n_kv = sp->n_kv;
            p->k_eq_v = 0;
            if (double_wide) p->inter = 2 * c->inter;
        }
        if (moe) {
            p->moe.n_experts = (int)E;
            p->moe.top_k = (int)K;
            p->moe.inter = (int)EI;
            p->moe.route = ROUTE_SOFTMAX_TOPK;
            p->moe.act = ACT_GELU_TANH;
            p->moe.beside_mlp = 1;
            p->moe.gate_up_layout = MOE_GU_HALVES;
        }
    }
    rc = 0;
out:
    free(sliding);
    return rc;
}

static int describe_gemma4(model *m, const json_t *top, const char *where) {
    json_t *j = text_config(top, gemma4_defaults, where);
    if (!j) return -1;
    int rc = describe_gemma4_text(m, j, where);
    json_decref(j);
    return rc;
}

/* Gemma 4's MoE block: router (proj, scale, per_expert_scale), stacked experts
 * gate_up_proj [E, 2I, H] (gate rows first) and down_proj [E, H, I], and the three
 * norms around the branch. */
static int bind_gemma4_moe(model *m, int l) {
    const layer_plan *p = &m->plan[l];
    layer_weights *w = &m->lw[l];
    moe_weights *e = &w->moe;
    int64_t H = m->cfg.hidden, E = p->moe.n_experts, I = p->moe.inter;
    int im; /* stored [E, out, in]: never input-major */
    char n[256];
#define NAME(fmt) (snprintf(n, sizeof n, "%slayers.%d." fmt, m->prefix, l), n)
    if (!(e->gate_up = calloc((size_t)E, sizeof *e->gate_up)) || !(e->down = calloc((size_t)E, sizeof *e->down)))
        return err_set("out of memory");
    if (model_bind(m, &e->router, NAME("router.proj"), E, H) || model_vec(m, &e->router_scale, NAME("router.scale"), H) ||
        model_vec(m, &e->expert_scale, NAME("router.per_expert_scale"), E) ||
        weight_bind_experts(e->gate_up, m->ck, &m->quant, NAME("experts.gate_up_proj"), (int)E, 2 * I, H, 0, &im) ||
        weight_bind_experts(e->down, m->ck, &m->quant, NAME("experts.down_proj"), (int)E, H, I, 0, &im) ||
        model_vec(m, &w->moe_pre_norm, NAME("pre_feedforward_layernorm_2.weight"), H) ||
        model_vec(m, &w->mlp_post_norm1, NAME("post_feedforward_layernorm_1.weight"), H) ||
        model_vec(m, &w->moe_post_norm, NAME("post_feedforward_layernorm_2.weight"), H))
        return -1;
#undef NAME
    /* a token reads top_k of the E experts */
    m->weight_bytes += (size_t)p->moe.top_k * (e->gate_up[0].nbytes + e->down[0].nbytes);
    m->n_params += E * 3 * I * H;
    return 0;
}

static const char *const gemma2_types[] = {"gemma2", NULL};
static const char *const gemma3_types[] = {"gemma3_text", "gemma3", NULL};
static const char *const gemma4_types[] = {"gemma4_text", "gemma4", NULL};

const family_desc family_gemma2 = {
    .name = "gemma2",
    .title = "Gemma 2",
    .model_types = gemma2_types,
    .describe = describe_gemma2,
};
const family_desc family_gemma3 = {
    .name = "gemma3",
    .title = "Gemma 3",
    .model_types = gemma3_types,
    .describe = describe_gemma3,
};
const family_desc family_gemma4 = {
    .name = "gemma4",
    .title = "Gemma 4",
    .model_types = gemma4_types,
    .describe = describe_gemma4,
    .bind_moe = bind_gemma4_moe,
};
