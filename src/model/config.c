/* model/config.c: the config.json keys every family shares, in both the
 * transformers-5 spelling (rope_parameters, layer_types, dtype) and the older hub
 * spelling (rope_theta, rope_scaling, sliding_window_pattern, torch_dtype), with
 * range checks that name the key. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/json.h"
#include "model/model.h"
#include "tensor/dtype.h"

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
    for (int l = 0; l < c->n_layers; l++) m->plan[l].kv_source = -1; /* every layer owns its cache */
    return 0;
}

static int rope_type_of(const char *s, rope_type *t) {
    static const struct { const char *name; rope_type t; } names[] = {
        {"default", ROPE_DEFAULT}, {"linear", ROPE_LINEAR}, {"llama3", ROPE_LLAMA3}, {"yarn", ROPE_YARN},
        {"proportional", ROPE_PROPORTIONAL}, {"longrope", ROPE_LONGROPE}, {"su", ROPE_LONGROPE},
    };
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++)
        if (strcmp(s, names[i].name) == 0) { *t = names[i].t; return 0; }
    return -1;
}

/* One longrope factor list: n_factors positive numbers. */
static int factor_list(const json_t *params, const char *key, float *out, int *n, const char *where) {
    const json_t *a = json_object_get(params, key);
    if (!a || !json_is_array(a) || json_array_size(a) == 0 || json_array_size(a) > ROPE_MAX_FACTORS)
        return err_set("%s: longrope needs \"%s\", an array of 1..%d numbers", where, key, ROPE_MAX_FACTORS);
    if (*n && (int)json_array_size(a) != *n)
        return err_set("%s: longrope \"%s\" has %d numbers, the other list %d", where, key, (int)json_array_size(a), *n);
    *n = (int)json_array_size(a);
    for (int i = 0; i < *n; i++) {
        const json_t *v = json_array_get(a, (size_t)i);
        if (!json_is_number(v) || !(json_number_value(v) > 0))
            return err_set("%s: longrope %s[%d] must be a positive number", where, key, i);
        out[i] = (float)json_number_value(v);
    }
    return 0;
}

/* longrope's factor lists and its defaults: factor = max_position_embeddings /
 * original_max_position_embeddings unless stated (transformers' rule for Phi-3). */
static int longrope_parse(rope_spec *r, const json_t *params, const char *where) {
    r->n_factors = 0;
    if (factor_list(params, "short_factor", r->short_factor, &r->n_factors, where) ||
        factor_list(params, "long_factor", r->long_factor, &r->n_factors, where))
        return -1;
    if (!(r->orig_max_pos >= 1)) return err_set("%s: longrope needs original_max_position_embeddings >= 1", where);
    const json_t *f = json_object_get(params, "factor");
    if (!f || json_is_null(f)) r->factor = r->max_pos / r->orig_max_pos;
    return 0;
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
        return err_set("%s: unsupported rope_type \"%s\" (supported: default, linear, llama3, yarn, proportional, longrope)", where, ts);
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
    double max_pos, partial, orig_top;
    /* original_max_position_embeddings: in the rope object, or at the top (Phi-3) */
    if (jget_num(config, "max_position_embeddings", 4096, &max_pos, where) ||
        jget_num(config, "original_max_position_embeddings", max_pos, &orig_top, where) ||
        jget_num(params, "original_max_position_embeddings", orig_top, &r->orig_max_pos, where) ||
        jget_num(config, "partial_rotary_factor", 1.0, &partial, where) ||
        jget_num(params, "partial_rotary_factor", partial, &r->partial, where))
        return -1;
    if (!(r->theta > 1)) return err_set("%s: rope_theta %g must be greater than 1", where, r->theta);
    if (!(r->factor > 0)) return err_set("%s: rope factor %g must be positive", where, r->factor);
    if (!(r->partial > 0 && r->partial <= 1)) return err_set("%s: partial_rotary_factor %g must be in (0, 1]", where, r->partial);
    if (r->type == ROPE_LLAMA3 && !(r->high_freq_factor > r->low_freq_factor))
        return err_set("%s: llama3 rope needs high_freq_factor > low_freq_factor", where);
    r->max_pos = max_pos;
    if (r->type == ROPE_LONGROPE) return longrope_parse(r, params, where);
    return 0;
}

int model_layer_types(const json_t *j, int n_layers, int def_pattern, int *sliding, const char *where) {
    const json_t *lt = json_object_get(j, "layer_types");
    if (lt && !json_is_null(lt)) {
        if (!json_is_array(lt) || (int)json_array_size(lt) != n_layers)
            return err_set("%s: key \"layer_types\" must be an array of %d strings", where, n_layers);
        for (int i = 0; i < n_layers; i++) {
            const char *s = json_string_value(json_array_get(lt, (size_t)i));
            if (s && strcmp(s, "sliding_attention") == 0) sliding[i] = 1;
            else if (s && strcmp(s, "full_attention") == 0) sliding[i] = 0;
            else return err_set("%s: layer_types[%d] = \"%s\" is not supported (sliding_attention, full_attention)", where, i, s ? s : "?");
        }
        return 0;
    }
    const json_t *pat = json_object_get(j, "sliding_window_pattern");
    if (pat && json_is_string(pat)) {
        /* EXAONE's spelling: one letter per layer, L local (sliding), G global, repeating */
        const char *s = json_string_value(pat);
        size_t n = strlen(s);
        if (!n) return err_set("%s: key \"sliding_window_pattern\" is empty", where);
        for (size_t i = 0; i < n; i++)
            if (s[i] != 'L' && s[i] != 'G')
                return err_set("%s: key \"sliding_window_pattern\" = \"%s\" may hold only L and G", where, s);
        for (int i = 0; i < n_layers; i++) sliding[i] = s[(size_t)i % n] == 'L';
        return 0;
    }
    int64_t p = def_pattern;
    if (pat && !json_is_null(pat) && !json_is_integer(pat))
        return err_set("%s: key \"sliding_window_pattern\" must be an integer or a string like \"LLLG\"", where);
    if (pat && json_is_integer(pat)) p = json_integer_value(pat);
    if (p < 0) return err_set("%s: key \"sliding_window_pattern\" = %lld must not be negative", where, (long long)p);
    for (int i = 0; i < n_layers; i++) sliding[i] = p > 0 && (i + 1) % p != 0;
    return 0;
}

const json_t *model_rope_params(const json_t *j, const char *layer_type) {
    const json_t *rp = json_object_get(j, "rope_parameters");
    if (!rp || !json_is_object(rp)) return NULL;
    const json_t *sub = json_object_get(rp, layer_type);
    if (sub && json_is_object(sub)) return sub;
    /* a flat object applies to every layer type; one keyed by other types to none */
    if (json_object_get(rp, "sliding_attention") || json_object_get(rp, "full_attention")) return NULL;
    return rp;
}

int model_round_to_dtype(const json_t *j, double v, float *out, const char *where) {
    const char *dt;
    if (jget_str(j, "dtype", NULL, &dt, where)) return -1;
    if (!dt && jget_str(j, "torch_dtype", "bfloat16", &dt, where)) return -1;
    if (strcmp(dt, "bfloat16") == 0) *out = bf16_to_f32(f32_to_bf16((float)v));
    else if (strcmp(dt, "float32") == 0) *out = (float)v;
    else if (strcmp(dt, "float16") == 0) {
        /* nearest float16: the scales in use (sqrt of a width) are normal, well in range */
        float f = (float)v;
        int e;
        frexpf(f, &e);
        float ulp = ldexpf(1.0f, e - 11);
        *out = nearbyintf(f / ulp) * ulp;
    } else return err_set("%s: unsupported dtype \"%s\" (bfloat16, float16, float32)", where, dt);
    return 0;
}

int model_reject_key(const json_t *j, const char *key, const char *const *allowed, const char *where) {
    const json_t *v = json_object_get(j, key);
    if (!v || json_is_null(v) || json_is_false(v)) return 0;
    if (json_is_string(v) && allowed)
        for (const char *const *a = allowed; *a; a++)
            if (strcmp(json_string_value(v), *a) == 0) return 0;
    char *txt = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    err_set("%s: key \"%s\" = %s changes the model in a way celer does not implement", where, key, txt ? txt : "?");
    free(txt);
    return -1;
}
