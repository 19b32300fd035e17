/* model/config.c: the config.json keys every family shares, in both the
 * transformers-5 spelling (rope_parameters, dtype) and the older hub spelling
 * (rope_theta, rope_scaling, torch_dtype), with range checks that name the key. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/json.h"
#include "model/model.h"

static int get_pos_int(const json_t *o, const char *key, int64_t def, int64_t max, int *out, const char *where) {
    int64_t v;
    if (def < 0 ? jget_int_req(o, key, &v, where) : jget_int(o, key, def, &v, where)) return -1;
    if (v <= 0 || v > max) return err_set("%s: key \"%s\" = %lld is out of range (1..%lld)", where, key, (long long)v, (long long)max);
    *out = (int)v;
    return 0;
}

static int token_id(const json_t *o, const char *key, int *out, const char *where) {
    const json_t *v = json_object_get(o, key);
    *out = -1;
    if (!v || json_is_null(v)) return 0;
    if (json_is_array(v)) v = json_array_size(v) ? json_array_get(v, 0) : NULL;
    if (!v) return 0;
    if (!json_is_integer(v)) return err_set("%s: key \"%s\" must be a token id", where, key);
    *out = (int)json_integer_value(v);
    return 0;
}

int model_parse_common(model *m, const json_t *j, const char *where) {
    model_config *c = &m->cfg;
    if (get_pos_int(j, "hidden_size", -1, 1 << 16, &c->hidden, where) ||
        get_pos_int(j, "num_hidden_layers", -1, 1024, &c->n_layers, where) ||
        get_pos_int(j, "num_attention_heads", -1, 1024, &c->n_heads, where) ||
        get_pos_int(j, "num_key_value_heads", c->n_heads, 1024, &c->n_kv, where) ||
        get_pos_int(j, "head_dim", c->hidden / c->n_heads ? c->hidden / c->n_heads : 1, 1024, &c->head_dim, where) ||
        get_pos_int(j, "intermediate_size", -1, 1 << 20, &c->inter, where) ||
        get_pos_int(j, "vocab_size", -1, 1 << 24, &c->vocab, where) ||
        get_pos_int(j, "max_position_embeddings", 4096, 1 << 24, &c->max_pos, where))
        return -1;
    if (c->n_heads % c->n_kv != 0)
        return err_set("%s: num_attention_heads %d is not a multiple of num_key_value_heads %d", where, c->n_heads, c->n_kv);
    double eps;
    if (jget_num(j, "rms_norm_eps", 1e-6, &eps, where)) return -1;
    if (!(eps > 0 && eps < 1)) return err_set("%s: key \"rms_norm_eps\" = %g is out of range", where, eps);
    c->eps = (float)eps;
    if (jget_bool(j, "tie_word_embeddings", c->tie, &c->tie, where)) return -1;
    if (token_id(j, "bos_token_id", &c->bos, where) || token_id(j, "eos_token_id", &c->eos, where)) return -1;
    if (c->embed_scale == 0) c->embed_scale = 1.0f;
    free(m->plan);
    if (!(m->plan = calloc((size_t)c->n_layers, sizeof *m->plan))) return err_set("out of memory");
    return 0;
}

static int rope_type_of(const char *s, rope_type *t) {
    static const struct { const char *name; rope_type t; } names[] = {
        {"default", ROPE_DEFAULT}, {"linear", ROPE_LINEAR}, {"llama3", ROPE_LLAMA3}, {"yarn", ROPE_YARN},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0) { *t = names[i].t; return 0; }
    return -1;
}

int rope_spec_parse(rope_spec *r, const json_t *params, const json_t *config, const char *where) {
    memset(r, 0, sizeof *r);
    if (!params || json_is_null(params)) params = json_object_get(config, "rope_scaling");
    if (params && json_is_null(params)) params = NULL;
    if (params && !json_is_object(params)) return err_set("%s: rope parameters must be an object", where);
    const char *ts = "default";
    if (params) {
        if (jget_str(params, "rope_type", NULL, &ts, where)) return -1;
        if (!ts && jget_str(params, "type", "default", &ts, where)) return -1;
    }
    if (rope_type_of(ts, &r->type) != 0)
        return err_set("%s: unsupported rope_type \"%s\" (supported: default, linear, llama3, yarn)", where, ts);
    double theta_cfg;
    if (jget_num(config, "rope_theta", 10000.0, &theta_cfg, where)) return -1;
    if (jget_num(params, "rope_theta", theta_cfg, &r->theta, where) ||
        jget_num(params, "factor", 1.0, &r->factor, where) ||
        jget_num(params, "low_freq_factor", 1.0, &r->low_freq_factor, where) ||
        jget_num(params, "high_freq_factor", 4.0, &r->high_freq_factor, where) ||
        jget_num(params, "beta_fast", 32.0, &r->beta_fast, where) ||
        jget_num(params, "beta_slow", 1.0, &r->beta_slow, where) ||
        jget_num(params, "attention_factor", -1.0, &r->attn_factor, where) ||
        jget_num(params, "mscale", 0.0, &r->mscale, where) ||
        jget_num(params, "mscale_all_dim", 0.0, &r->mscale_all_dim, where) ||
        jget_bool(params, "truncate", 1, &r->truncate, where))
        return -1;
    double max_pos, partial;
    if (jget_num(config, "max_position_embeddings", 4096, &max_pos, where) ||
        jget_num(params, "original_max_position_embeddings", max_pos, &r->orig_max_pos, where) ||
        jget_num(config, "partial_rotary_factor", 1.0, &partial, where) ||
        jget_num(params, "partial_rotary_factor", partial, &r->partial, where))
        return -1;
    if (!(r->theta > 1)) return err_set("%s: rope_theta %g must be greater than 1", where, r->theta);
    if (!(r->factor > 0)) return err_set("%s: rope factor %g must be positive", where, r->factor);
    if (!(r->partial > 0 && r->partial <= 1)) return err_set("%s: partial_rotary_factor %g must be in (0, 1]", where, r->partial);
    if (r->type == ROPE_LLAMA3 && !(r->high_freq_factor > r->low_freq_factor))
        return err_set("%s: llama3 rope needs high_freq_factor > low_freq_factor", where);
    return 0;
}
