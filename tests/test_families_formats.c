/* tests/test_families_formats.c: the other spellings of the family fixtures and
 * the family-level unit checks. Each fixture is rewritten on the fly into a
 * temporary directory the way real checkpoints spell it (multimodal Gemma 3 with
 * text_config and language_model. weights plus the older rope_theta / rope_scaling /
 * rope_local_base_freq / sliding_window_pattern keys; EXAONE 4 with only the "LLG"
 * pattern; gpt-oss with mlx-community's per-expert gate/up/down stacks and legacy
 * rope_scaling; the second set of families with rope_theta / torch_dtype and no
 * layer_types; Mixtral's experts as switch_mlp or stacked gate_up_proj; Phi-3 in
 * MLX q4 against its dequantized copy) and must still match. Also: MXFP4
 * dequantization by hand, YaRN, proportional and longrope RoPE frequencies (and
 * longrope's short/long choice in a forward), the sliding-window and NoPE rules of
 * Qwen 2, Mistral, SmolLM3 and Gemma 2, and config errors naming the key. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/json.h"
#include "engine/engine.h"
#include "fixture_util.h"
#include "harness.h"
#include "io/safetensors.h"
#include "model/model.h"
#include "tensor/dtype.h"
#include "tensor/weight.h"

static char tmp_root[64];

static const char *tmp_dir(const char *name) {
    static char p[4][256];
    static int k;
    if (!tmp_root[0]) {
        snprintf(tmp_root, sizeof tmp_root, "/tmp/celer-fam-XXXXXX");
        if (!mkdtemp(tmp_root)) { perror("mkdtemp"); exit(1); }
    }
    char *d = p[k++ & 3];
    snprintf(d, 256, "%s/%s", tmp_root, name);
    mkdir(d, 0700);
    return d;
}

/* ---- rewriting a fixture ---- */

typedef struct {
    st_out t[512];
    void *owned[512];
    int n, n_owned;
} tensor_set;

static void ts_add(tensor_set *s, const char *name, st_dtype dt, int ndim, const int64_t *shape, const void *data, int owned) {
    st_out *o = &s->t[s->n++];
    o->name = strdup(name);
    o->dtype = dt;
    o->ndim = ndim;
    for (int i = 0; i < ndim; i++) o->shape[i] = shape[i];
    o->data = data;
    if (owned) s->owned[s->n_owned++] = (void *)data;
}

static void ts_free(tensor_set *s) {
    for (int i = 0; i < s->n; i++) free((void *)s->t[i].name);
    for (int i = 0; i < s->n_owned; i++) free(s->owned[i]);
}

/* Writes dir/config.json and dir/model.safetensors; 0 on success. */
static int write_ckpt(const char *dir, json_t *config, tensor_set *s) {
    char p[512];
    snprintf(p, sizeof p, "%s/config.json", dir);
    if (json_dump_file(config, p, JSON_INDENT(1)) != 0) return -1;
    snprintf(p, sizeof p, "%s/model.safetensors", dir);
    return st_write(p, s->t, s->n, NULL);
}

static json_t *load_config(const char *fixture) {
    char p[256];
    snprintf(p, sizeof p, "tests/fixtures/models/%s/config.json", fixture);
    return json_load_path(p);
}

static st_file *load_weights(const char *fixture) {
    char p[256];
    snprintf(p, sizeof p, "tests/fixtures/models/%s/model.safetensors", fixture);
    return st_open(p);
}

/* Max |logit - ref| of the fixture's seq_a and seq_b (7 tokens per forward) with the
 * checkpoint in dir; -1 when it does not load. */
static double rewritten_err(const char *fixture, const char *dir) {
    char rd[256];
    snprintf(rd, sizeof rd, "tests/fixtures/models/%s", fixture);
    fixture_ref r;
    double worst = -1;
    if (fixture_load(rd, &r) == 0) {
        celer_model *m = celer_model_open(dir, 2);
        if (!m) printf("  %s: %s\n", dir, celer_last_error());
        for (int s = 0; m && s < 2; s++) {
            double e = fixture_max_err(m, r.seq[s], r.len[s], r.logits[s], r.vocab, 7);
            if (e < 0) { worst = -1; break; }
            if (e > worst) worst = e;
        }
        celer_model_free(m);
    }
    fixture_free(&r);
    return worst;
}

/* Multimodal Gemma 3 spelled the older way: text_config, torch_dtype at the top,
 * rope_theta + rope_scaling (full layers) + rope_local_base_freq, an integer
 * sliding_window_pattern, weights under language_model.model. */
static void gemma3_multimodal_legacy(void) {
    json_t *c = load_config("gemma3");
    st_file *f = load_weights("gemma3");
    CHECK(c && f, "cannot read the gemma3 fixture");
    if (!c || !f) return;
    json_t *tc = json_deep_copy(c);
    json_object_del(tc, "rope_parameters");
    json_object_del(tc, "layer_types");
    json_object_del(tc, "dtype");
    json_object_set_new(tc, "rope_theta", json_real(1000000.0));
    json_object_set_new(tc, "rope_local_base_freq", json_real(10000.0));
    json_object_set_new(tc, "rope_scaling", json_pack("{s:s, s:f}", "rope_type", "linear", "factor", 8.0));
    json_object_set_new(tc, "sliding_window_pattern", json_integer(3));
    json_t *top = json_pack("{s:s, s:s, s:o}", "model_type", "gemma3", "torch_dtype", "bfloat16", "text_config", tc);
    tensor_set s = {0};
    char name[256];
    for (int i = 0; i < f->n; i++) {
        const st_tensor *t = &f->t[i];
        if (strcmp(t->name, "lm_head.weight") == 0) continue; /* tied */
        snprintf(name, sizeof name, "language_model.%s", t->name);
        ts_add(&s, name, t->dtype, t->ndim, t->shape, t->data, 0);
    }
    const char *dir = tmp_dir("gemma3_mm");
    CHECK(write_ckpt(dir, top, &s) == 0, "write: %s", celer_last_error());
    double e = rewritten_err("gemma3", dir);
    CHECK(e >= 0 && e <= 2e-3, "multimodal legacy gemma3: max err %g", e);
    ts_free(&s);
    json_decref(top);
    json_decref(c);
    st_close(f);
}

/* Multimodal Gemma 4 as transformers 5 saves it: text_config, weights under
 * model.language_model., and global_head_dim in place of per_layer_config. */
static void gemma4_multimodal(void) {
    json_t *c = load_config("gemma4_moe");
    st_file *f = load_weights("gemma4_moe");
    CHECK(c && f, "cannot read the gemma4_moe fixture");
    if (!c || !f) return;
    json_t *tc = json_deep_copy(c);
    json_object_del(tc, "per_layer_config");
    json_object_set_new(tc, "global_head_dim", json_integer(512));
    json_t *top = json_pack("{s:s, s:o}", "model_type", "gemma4", "text_config", tc);
    tensor_set s = {0};
    char name[256];
    for (int i = 0; i < f->n; i++) {
        const st_tensor *t = &f->t[i];
        if (strncmp(t->name, "model.", 6) != 0) continue; /* the head is tied */
        snprintf(name, sizeof name, "model.language_model.%s", t->name + 6);
        ts_add(&s, name, t->dtype, t->ndim, t->shape, t->data, 0);
    }
    const char *dir = tmp_dir("gemma4_mm");
    CHECK(write_ckpt(dir, top, &s) == 0, "write: %s", celer_last_error());
    double e = rewritten_err("gemma4_moe", dir);
    CHECK(e >= 0 && e <= 2e-3, "multimodal gemma4 with global_head_dim: max err %g", e);
    ts_free(&s);
    json_decref(top);
    json_decref(c);
    st_close(f);
}

/* EXAONE 4 with only sliding_window_pattern "LLG" and legacy rope keys. */
static void exaone4_pattern_legacy(void) {
    json_t *c = load_config("exaone4");
    st_file *f = load_weights("exaone4");
    CHECK(c && f, "cannot read the exaone4 fixture");
    if (!c || !f) return;
    json_t *rp = json_deep_copy(json_object_get(c, "rope_parameters"));
    json_object_set(c, "rope_theta", json_object_get(rp, "rope_theta"));
    json_object_del(rp, "rope_theta");
    json_object_set_new(c, "rope_scaling", rp);
    json_object_del(c, "rope_parameters");
    json_object_del(c, "layer_types");
    tensor_set s = {0};
    for (int i = 0; i < f->n; i++) ts_add(&s, f->t[i].name, f->t[i].dtype, f->t[i].ndim, f->t[i].shape, f->t[i].data, 0);
    const char *dir = tmp_dir("exaone4_llg");
    CHECK(write_ckpt(dir, c, &s) == 0, "write: %s", celer_last_error());
    double e = rewritten_err("exaone4", dir);
    CHECK(e >= 0 && e <= 2e-3, "exaone4 with pattern LLG: max err %g", e);
    ts_free(&s);
    json_decref(c);
    st_close(f);
}

/* gpt-oss in mlx-community's per-expert layout: experts.{gate,up,down}_proj.weight
 * [E, out, in] and .bias [E, out]; legacy rope_scaling; alternating layers by default. */
static void gpt_oss_mlx_layout(void) {
    json_t *c = load_config("gpt_oss");
    st_file *f = load_weights("gpt_oss");
    CHECK(c && f, "cannot read the gpt_oss fixture");
    if (!c || !f) return;
    json_t *rp = json_deep_copy(json_object_get(c, "rope_parameters"));
    json_object_set(c, "rope_theta", json_object_get(rp, "rope_theta"));
    json_object_del(rp, "rope_theta");
    json_object_set_new(c, "rope_scaling", rp);
    json_object_del(c, "rope_parameters");
    json_object_del(c, "layer_types");
    tensor_set s = {0};
    char name[256];
    for (int i = 0; i < f->n; i++) {
        const st_tensor *t = &f->t[i];
        const char *x = strstr(t->name, "experts.");
        if (!x) { ts_add(&s, t->name, t->dtype, t->ndim, t->shape, t->data, 0); continue; }
        int len = (int)(x - t->name) + 8;
        const uint16_t *d = t->data;
        if (strcmp(x, "experts.gate_up_proj") == 0) {
            int64_t E = t->shape[0], H = t->shape[1], I = t->shape[2] / 2, sh[3] = {E, I, H};
            uint16_t *g = malloc((size_t)(E * I * H) * 2), *u = malloc((size_t)(E * I * H) * 2);
            for (int64_t e = 0; e < E; e++)
                for (int64_t i2 = 0; i2 < I; i2++)
                    for (int64_t h = 0; h < H; h++) {
                        g[(e * I + i2) * H + h] = d[(e * H + h) * 2 * I + 2 * i2];
                        u[(e * I + i2) * H + h] = d[(e * H + h) * 2 * I + 2 * i2 + 1];
                    }
            snprintf(name, sizeof name, "%.*sgate_proj.weight", len, t->name);
            ts_add(&s, name, ST_BF16, 3, sh, g, 1);
            snprintf(name, sizeof name, "%.*sup_proj.weight", len, t->name);
            ts_add(&s, name, ST_BF16, 3, sh, u, 1);
        } else if (strcmp(x, "experts.gate_up_proj_bias") == 0) {
            int64_t E = t->shape[0], I = t->shape[1] / 2, sh[2] = {E, I};
            uint16_t *g = malloc((size_t)(E * I) * 2), *u = malloc((size_t)(E * I) * 2);
            for (int64_t k = 0; k < E * I; k++) g[k] = d[2 * k], u[k] = d[2 * k + 1];
            snprintf(name, sizeof name, "%.*sgate_proj.bias", len, t->name);
            ts_add(&s, name, ST_BF16, 2, sh, g, 1);
            snprintf(name, sizeof name, "%.*sup_proj.bias", len, t->name);
            ts_add(&s, name, ST_BF16, 2, sh, u, 1);
        } else if (strcmp(x, "experts.down_proj") == 0) {
            int64_t E = t->shape[0], I = t->shape[1], H = t->shape[2], sh[3] = {E, H, I};
            uint16_t *o = malloc((size_t)(E * I * H) * 2);
            for (int64_t e = 0; e < E; e++)
                for (int64_t i2 = 0; i2 < I; i2++)
                    for (int64_t h = 0; h < H; h++) o[(e * H + h) * I + i2] = d[(e * I + i2) * H + h];
            snprintf(name, sizeof name, "%.*sdown_proj.weight", len, t->name);
            ts_add(&s, name, ST_BF16, 3, sh, o, 1);
        } else if (strcmp(x, "experts.down_proj_bias") == 0) {
            snprintf(name, sizeof name, "%.*sdown_proj.bias", len, t->name);
            ts_add(&s, name, t->dtype, t->ndim, t->shape, t->data, 0);
        }
    }
    const char *dir = tmp_dir("gpt_oss_mlx");
    CHECK(write_ckpt(dir, c, &s) == 0, "write: %s", celer_last_error());
    double e = rewritten_err("gpt_oss", dir);
    CHECK(e >= 0 && e <= 2e-3, "gpt_oss in the per-expert layout: max err %g", e);
    ts_free(&s);
    json_decref(c);
    st_close(f);
}

/* ---- config errors ---- */

/* Copies a fixture with one config change applied by edit; the open must fail with a
 * message containing want. */
static void expect_config_error(const char *fixture, void (*edit)(json_t *), const char *want) {
    json_t *c = load_config(fixture);
    st_file *f = load_weights(fixture);
    if (!c || !f) { CHECK(0, "cannot read %s", fixture); return; }
    edit(c);
    tensor_set s = {0};
    for (int i = 0; i < f->n; i++) ts_add(&s, f->t[i].name, f->t[i].dtype, f->t[i].ndim, f->t[i].shape, f->t[i].data, 0);
    const char *dir = tmp_dir("bad");
    CHECK(write_ckpt(dir, c, &s) == 0, "write: %s", celer_last_error());
    celer_model *m = celer_model_open(dir, 1);
    CHECK(m == NULL, "%s: a bad config (%s) loaded", fixture, want);
    if (!m) CHECK_STR_HAS(celer_last_error(), want);
    celer_model_free(m);
    ts_free(&s);
    json_decref(c);
    st_close(f);
}

/* EXAONE 4 1.2B: no sliding_window, so every layer is global and uses RoPE (the
 * pattern key, if any, is ignored as transformers does). */
static void no_window(json_t *c) { json_object_set_new(c, "sliding_window", json_null()); }

static void exaone4_without_window(void) {
    json_t *c = load_config("exaone4");
    st_file *f = load_weights("exaone4");
    if (!c || !f) { CHECK(0, "cannot read exaone4"); return; }
    no_window(c);
    tensor_set s = {0};
    for (int i = 0; i < f->n; i++) ts_add(&s, f->t[i].name, f->t[i].dtype, f->t[i].ndim, f->t[i].shape, f->t[i].data, 0);
    const char *dir = tmp_dir("exaone4_1b");
    CHECK(write_ckpt(dir, c, &s) == 0, "write: %s", celer_last_error());
    celer_model *m = celer_model_open(dir, 1);
    CHECK(m != NULL, "%s", celer_last_error());
    for (int l = 0; m && l < m->m->cfg.n_layers; l++)
        CHECK(m->m->plan[l].rope == 0 && m->m->plan[l].window == 0, "layer %d: rope %d window %d", l, m->m->plan[l].rope,
              m->m->plan[l].window);
    celer_model_free(m);
    ts_free(&s);
    json_decref(c);
    st_close(f);
}

static void set_gelu(json_t *c) { json_object_set_new(c, "hidden_activation", json_string("gelu")); }
static void set_bidir(json_t *c) { json_object_set_new(c, "use_bidirectional_attention", json_true()); }
static void set_chunked(json_t *c) { json_array_set_new(json_object_get(c, "layer_types"), 1, json_string("chunked_attention")); }
static void set_rope_type(json_t *c) {
    json_object_set_new(json_object_get(json_object_get(c, "rope_parameters"), "full_attention"), "rope_type", json_string("dynamic"));
}
static void set_shared(json_t *c) { json_object_set_new(c, "num_kv_shared_layers", json_integer(9)); }
static void set_plc(json_t *c) { json_object_set_new(json_object_get(json_object_get(c, "per_layer_config"), "2"), "window", json_integer(3)); }
static void no_experts(json_t *c) { json_object_del(c, "num_local_experts"); }
static void bad_pattern(json_t *c) { json_object_del(c, "layer_types"); json_object_set_new(c, "sliding_window_pattern", json_string("LXG")); }
static void exaone_act(json_t *c) { json_object_set_new(c, "hidden_act", json_string("gelu")); }
static void moe_k(json_t *c) { json_object_set_new(c, "top_k_experts", json_integer(5)); }

static void config_errors(void) {
    expect_config_error("gemma3", set_gelu, "hidden_activation \"gelu\"");
    expect_config_error("gemma3", set_bidir, "use_bidirectional_attention");
    expect_config_error("gemma3", set_chunked, "layer_types[1]");
    expect_config_error("gemma3", set_rope_type, "rope_type \"dynamic\"");
    expect_config_error("gemma4", set_shared, "num_kv_shared_layers");
    expect_config_error("gemma4", set_plc, "per_layer_config[\"2\"] key \"window\"");
    expect_config_error("gemma4_moe", moe_k, "top_k_experts");
    expect_config_error("gpt_oss", no_experts, "num_local_experts");
    expect_config_error("exaone4", bad_pattern, "sliding_window_pattern");
    expect_config_error("exaone4", exaone_act, "hidden_act \"gelu\"");
}

/* Expert tensors that are missing or misshapen name the tensor, want and got. */
static void expert_weight_errors(void) {
    json_t *c = load_config("gpt_oss");
    st_file *f = load_weights("gpt_oss");
    if (!c || !f) { CHECK(0, "cannot read gpt_oss"); return; }
    for (int pass = 0; pass < 2; pass++) {
        tensor_set s = {0};
        for (int i = 0; i < f->n; i++) {
            const st_tensor *t = &f->t[i];
            if (strcmp(t->name, "model.layers.1.mlp.experts.down_proj") == 0) {
                if (pass == 0) continue; /* missing */
                int64_t sh[3] = {t->shape[0], t->shape[1] / 2, t->shape[2] * 2};
                ts_add(&s, t->name, t->dtype, 3, sh, t->data, 0);
                continue;
            }
            ts_add(&s, t->name, t->dtype, t->ndim, t->shape, t->data, 0);
        }
        const char *dir = tmp_dir("bad_experts");
        CHECK(write_ckpt(dir, c, &s) == 0, "write: %s", celer_last_error());
        celer_model *m = celer_model_open(dir, 1);
        CHECK(m == NULL, "broken experts loaded");
        CHECK_STR_HAS(celer_last_error(), "model.layers.1.mlp.experts.down_proj");
        if (pass == 1) CHECK_STR_HAS(celer_last_error(), "want BF16 [4, 128, 128], got BF16 [4, 64, 256]");
        celer_model_free(m);
        ts_free(&s);
    }
    json_decref(c);
    st_close(f);
}

/* ---- MXFP4 and RoPE by hand ---- */

static void mxfp4_dequant(void) {
    /* one row of 64: two groups of 32, scales 2^(128-127) = 2 and 2^(125-127) = 1/4 */
    uint8_t bytes[32];
    for (int k = 0; k < 32; k++) bytes[k] = (uint8_t)((k % 16) | ((15 - k % 16) << 4));
    uint32_t words[8];
    memcpy(words, bytes, sizeof words);
    uint8_t scales[2] = {128, 125};
    weight w = {.fmt = WF_MXFP4, .rows = 1, .cols = 64, .data = words, .scales = scales, .bits = 4, .group = 32};
    float out[64];
    weight_row_f32(&w, 0, out);
    static const float e2m1[16] = {0, 0.5f, 1, 1.5f, 2, 3, 4, 6, -0.0f, -0.5f, -1, -1.5f, -2, -3, -4, -6};
    for (int j = 0; j < 64; j++) {
        int byte = j / 2, code = j % 2 ? 15 - byte % 16 : byte % 16; /* low nibble is element 2k */
        float want = e2m1[code] * (j < 32 ? 2.0f : 0.25f);
        CHECK(out[j] == want, "element %d = %g, want %g", j, out[j], want);
    }
    /* spot values written out: element 1 is code 15 (-6) * 2, element 34 is code 1 (0.5) / 4 */
    CHECK_NEAR(out[1], -12.0, 0);
    CHECK_NEAR(out[34], 0.125, 0);
}

static void rope_proportional(void) {
    rope_spec r = {.type = ROPE_PROPORTIONAL, .theta = 1e6, .factor = 1, .partial = 0.25, .attn_factor = -1};
    rope_table t = {0};
    CHECK(rope_table_init(&t, &r, 512) == 0, "init: %s", celer_last_error());
    CHECK(t.dim == 512, "proportional table spans the head: dim %d", t.dim);
    for (int i = 0; i < 256 && t.inv_freq; i++) {
        double want = i < 64 ? pow(1e6, -2.0 * i / 512) : 0;
        CHECK(fabs(t.inv_freq[i] - want) <= 1e-6 * want, "inv_freq[%d] = %.9g, want %.9g", i, t.inv_freq[i], want);
    }
    CHECK_NEAR(t.attn_factor, 1.0, 0);
    rope_table_free(&t);
}

static void rope_yarn_gpt_oss(void) {
    /* gpt-oss: theta 150000, factor 32, original 4096, beta 32/1, truncate false, dim 64 */
    rope_spec r = {.type = ROPE_YARN, .theta = 150000, .factor = 32, .orig_max_pos = 4096, .beta_fast = 32,
                   .beta_slow = 1, .attn_factor = -1, .truncate = 0, .partial = 1};
    rope_table t = {0};
    CHECK(rope_table_init(&t, &r, 64) == 0, "init: %s", celer_last_error());
    double dim = 64, lt = log(150000.0);
    double lo = dim * log(4096 / (32 * 2 * M_PI)) / (2 * lt), hi = dim * log(4096 / (1 * 2 * M_PI)) / (2 * lt);
    CHECK(lo > 8 && lo < 9 && hi > 17 && hi < 18, "correction range %g..%g", lo, hi); /* not truncated */
    for (int i = 0; i < 32 && t.inv_freq; i++) {
        double ex = pow(150000.0, -2.0 * i / dim), ramp = (i - lo) / (hi - lo);
        ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
        double want = ex / 32 * ramp + ex * (1 - ramp);
        CHECK(fabs(t.inv_freq[i] - want) <= 2e-6 * want, "inv_freq[%d] = %.9g, want %.9g", i, t.inv_freq[i], want);
    }
    CHECK_NEAR(t.attn_factor, 0.1 * log(32.0) + 1, 1e-6);
    rope_table_free(&t);
    /* truncate true (the default) floors and ceils the range */
    r.truncate = 1;
    CHECK(rope_table_init(&t, &r, 64) == 0, "init");
    double ex9 = pow(150000.0, -18.0 / 64), ramp9 = (9 - floor(lo)) / (ceil(hi) - floor(lo));
    CHECK(fabs(t.inv_freq[9] - (ex9 / 32 * ramp9 + ex9 * (1 - ramp9))) <= 2e-6 * ex9, "truncated inv_freq[9] = %.9g", t.inv_freq[9]);
    rope_table_free(&t);
}

/* ---- the second set of families: other spellings, window rules, layouts ---- */

/* A copy of fixture's weights as they are (borrowed). */
static void ts_copy(tensor_set *s, const st_file *f) {
    for (int i = 0; i < f->n; i++) ts_add(s, f->t[i].name, f->t[i].dtype, f->t[i].ndim, f->t[i].shape, f->t[i].data, 0);
}

/* The older hub spelling of a transformers-5 config: rope_theta (and
 * partial_rotary_factor) at the top instead of rope_parameters, torch_dtype for
 * dtype, no layer_types (each family's default rule must give the same layers). */
static void legacy_spelling(json_t *c) {
    json_t *rp = json_object_get(c, "rope_parameters");
    json_object_set(c, "rope_theta", json_object_get(rp, "rope_theta"));
    if (json_object_get(rp, "partial_rotary_factor"))
        json_object_set(c, "partial_rotary_factor", json_object_get(rp, "partial_rotary_factor"));
    json_object_del(c, "rope_parameters");
    json_object_set(c, "torch_dtype", json_object_get(c, "dtype"));
    json_object_del(c, "dtype");
    json_object_del(c, "layer_types");
}

/* Writes fixture's weights with its config changed by edit to a temporary checkpoint;
 * its directory, or NULL. */
static const char *rewrite_config(const char *fixture, void (*edit)(json_t *), const char *tag) {
    json_t *c = load_config(fixture);
    st_file *f = load_weights(fixture);
    const char *dir = NULL;
    if (c && f) {
        edit(c);
        tensor_set s = {0};
        ts_copy(&s, f);
        dir = tmp_dir(tag);
        if (write_ckpt(dir, c, &s) != 0) dir = NULL;
        ts_free(&s);
    }
    json_decref(c);
    st_close(f);
    return dir;
}

static void second_set_legacy_spelling(void) {
    static const char *const names[] = {"qwen2", "qwen2-q4", "mistral", "mistral-q4", "phi3", "gemma2",
                                        "mixtral", "smollm3", "olmo2"};
    for (size_t i = 0; i < sizeof names / sizeof names[0]; i++) {
        const char *dir = rewrite_config(names[i], legacy_spelling, "legacy");
        CHECK(dir != NULL, "%s: cannot write the rewritten checkpoint", names[i]);
        double e = dir ? rewritten_err(names[i], dir) : -1;
        CHECK(e >= 0 && e <= 2e-3, "%s with rope_theta/torch_dtype and no layer_types: max err %g", names[i], e);
    }
}

/* The per-layer windows and RoPE of a config edited by edit. */
static void plan_of(const char *fixture, void (*edit)(json_t *), int *window, int *rope, int n) {
    const char *dir = rewrite_config(fixture, edit, "plan");
    celer_model *m = dir ? celer_model_open(dir, 1) : NULL;
    CHECK(m != NULL, "%s: %s", fixture, celer_last_error());
    for (int l = 0; l < n; l++) {
        window[l] = m && l < m->m->cfg.n_layers ? m->m->plan[l].window : -2;
        rope[l] = m && l < m->m->cfg.n_layers ? m->m->plan[l].rope : -2;
    }
    celer_model_free(m);
}

static void qwen_window_from(json_t *c) {
    json_object_set_new(c, "use_sliding_window", json_true());
    json_object_set_new(c, "sliding_window", json_integer(16));
    json_object_set_new(c, "max_window_layers", json_integer(1));
    json_object_del(c, "layer_types");
}
static void qwen_window_types(json_t *c) {
    qwen_window_from(c);
    json_object_set_new(c, "layer_types", json_pack("[s,s,s]", "sliding_attention", "full_attention", "sliding_attention"));
}
static void qwen_window_off(json_t *c) {
    qwen_window_types(c);
    json_object_set_new(c, "use_sliding_window", json_false());
}
static void mistral_no_window(json_t *c) { json_object_set_new(c, "sliding_window", json_null()); }
static void smollm3_interval(json_t *c) {
    json_object_del(c, "no_rope_layers");
    json_object_set_new(c, "no_rope_layer_interval", json_integer(2));
}
static void gemma2_legacy_pattern(json_t *c) { json_object_del(c, "layer_types"); }

static void second_set_window_rules(void) {
    int w[4], r[4];
    plan_of("qwen2", qwen_window_from, w, r, 3);
    CHECK(w[0] == 0 && w[1] == 16 && w[2] == 16, "qwen2 max_window_layers 1: windows %d %d %d", w[0], w[1], w[2]);
    plan_of("qwen2", qwen_window_types, w, r, 3);
    CHECK(w[0] == 16 && w[1] == 0 && w[2] == 16, "qwen2 layer_types: windows %d %d %d", w[0], w[1], w[2]);
    plan_of("qwen2", qwen_window_off, w, r, 3);
    CHECK(w[0] == 0 && w[1] == 0 && w[2] == 0, "qwen2 use_sliding_window false: windows %d %d %d", w[0], w[1], w[2]);
    plan_of("mistral", legacy_spelling, w, r, 3);
    CHECK(w[0] == 16 && w[1] == 16 && w[2] == 16, "mistral: windows %d %d %d", w[0], w[1], w[2]);
    plan_of("mistral", mistral_no_window, w, r, 3);
    CHECK(w[0] == 0 && w[1] == 0 && w[2] == 0, "mistral sliding_window null: windows %d %d %d", w[0], w[1], w[2]);
    plan_of("smollm3", smollm3_interval, w, r, 4);
    CHECK(r[0] == 0 && r[1] == -1 && r[2] == 0 && r[3] == -1, "smollm3 interval 2: rope %d %d %d %d", r[0], r[1], r[2], r[3]);
    plan_of("gemma2", gemma2_legacy_pattern, w, r, 4);
    CHECK(w[0] == 16 && w[1] == 0 && w[2] == 16 && w[3] == 0, "gemma2 default pattern: windows %d %d %d %d", w[0], w[1], w[2], w[3]);
}

/* Mixtral's experts in the two other layouts: mlx-community's switch_mlp stacks
 * [E, out, in], and transformers 5's mlp.gate + mlp.experts.gate_up_proj [E, 2I, H]
 * (gate rows first) and down_proj [E, H, I]. */
static void mixtral_layouts(void) {
    json_t *c = load_config("mixtral");
    st_file *f = load_weights("mixtral");
    CHECK(c && f, "cannot read the mixtral fixture");
    if (!c || !f) return;
    const int64_t E = 4, I = 128, H = 128;
    for (int form = 0; form < 2; form++) {
        tensor_set s = {0};
        char name[256];
        for (int i = 0; i < f->n; i++)
            if (!strstr(f->t[i].name, "block_sparse_moe"))
                ts_add(&s, f->t[i].name, f->t[i].dtype, f->t[i].ndim, f->t[i].shape, f->t[i].data, 0);
        for (int l = 0; l < 3; l++) {
            static const char *const w[3] = {"w1", "w3", "w2"}, *const mlx[3] = {"gate_proj", "up_proj", "down_proj"};
            uint16_t *stk[3];
            for (int k = 0; k < 3; k++) {
                stk[k] = malloc((size_t)(E * I * H) * 2);
                for (int e = 0; e < E; e++) {
                    snprintf(name, sizeof name, "model.layers.%d.block_sparse_moe.experts.%d.%s.weight", l, e, w[k]);
                    const st_tensor *t = st_find(f, name);
                    CHECK(t != NULL, "missing %s", name);
                    if (t) memcpy(stk[k] + e * I * H, t->data, (size_t)(I * H) * 2);
                }
            }
            snprintf(name, sizeof name, "model.layers.%d.block_sparse_moe.gate.weight", l);
            const st_tensor *g = st_find(f, name);
            if (form == 0) {
                ts_add(&s, name, g->dtype, g->ndim, g->shape, g->data, 0);
                for (int k = 0; k < 3; k++) {
                    int64_t sh[3] = {E, k == 2 ? H : I, k == 2 ? I : H};
                    snprintf(name, sizeof name, "model.layers.%d.block_sparse_moe.switch_mlp.%s.weight", l, mlx[k]);
                    ts_add(&s, name, ST_BF16, 3, sh, stk[k], 1);
                }
            } else {
                snprintf(name, sizeof name, "model.layers.%d.mlp.gate.weight", l);
                ts_add(&s, name, g->dtype, g->ndim, g->shape, g->data, 0);
                uint16_t *gu = malloc((size_t)(E * 2 * I * H) * 2);
                for (int e = 0; e < E; e++) {
                    memcpy(gu + e * 2 * I * H, stk[0] + e * I * H, (size_t)(I * H) * 2);
                    memcpy(gu + e * 2 * I * H + I * H, stk[1] + e * I * H, (size_t)(I * H) * 2);
                }
                int64_t sgu[3] = {E, 2 * I, H}, sd[3] = {E, H, I};
                snprintf(name, sizeof name, "model.layers.%d.mlp.experts.gate_up_proj", l);
                ts_add(&s, name, ST_BF16, 3, sgu, gu, 1);
                snprintf(name, sizeof name, "model.layers.%d.mlp.experts.down_proj", l);
                ts_add(&s, name, ST_BF16, 3, sd, stk[2], 1);
                free(stk[0]);
                free(stk[1]);
            }
        }
        const char *dir = tmp_dir(form ? "mixtral_t5" : "mixtral_mlx");
        CHECK(write_ckpt(dir, c, &s) == 0, "write: %s", celer_last_error());
        double e = rewritten_err("mixtral", dir);
        CHECK(e >= 0 && e <= 2e-3, "mixtral with %s experts: max err %g", form ? "stacked gate_up_proj" : "switch_mlp", e);
        ts_free(&s);
    }
    json_decref(c);
    st_close(f);
}

/* MLX affine 4-bit, group 64, of a bf16 matrix [rows, cols]: codes packed 8 per u32
 * (least significant first), bf16 scales and biases [rows, cols/64]; deq gets the
 * dequantized values (code * scale + bias with the stored scale and bias). */
static void quantize_q4(const uint16_t *w, int64_t rows, int64_t cols, uint32_t *codes, uint16_t *sc, uint16_t *bi, float *deq) {
    const int64_t G = 64, ng = cols / G;
    memset(codes, 0, (size_t)(rows * cols / 8) * 4);
    for (int64_t r = 0; r < rows; r++)
        for (int64_t g = 0; g < ng; g++) {
            float lo = INFINITY, hi = -INFINITY;
            for (int64_t j = 0; j < G; j++) {
                float v = bf16_to_f32(w[r * cols + g * G + j]);
                lo = v < lo ? v : lo;
                hi = v > hi ? v : hi;
            }
            uint16_t s16 = f32_to_bf16((hi - lo) / 15), b16 = f32_to_bf16(lo);
            float s = bf16_to_f32(s16), b = bf16_to_f32(b16);
            sc[r * ng + g] = s16;
            bi[r * ng + g] = b16;
            for (int64_t j = 0; j < G; j++) {
                int64_t col = g * G + j;
                float v = bf16_to_f32(w[r * cols + col]);
                long q = s > 0 ? lrintf((v - b) / s) : 0;
                q = q < 0 ? 0 : q > 15 ? 15 : q;
                codes[(r * cols + col) / 8] |= (uint32_t)q << (4 * (col % 8));
                deq[r * cols + col] = (float)q * s + b;
            }
        }
}

/* Phi-3 as mlx-community stores it: every projection (the fused qkv_proj and
 * gate_up_proj included) in 4-bit affine; its logits must equal those of the same
 * dequantized values stored as F32 (the row views of the fused codes, scales and
 * biases against plain float rows). */
static void phi3_mlx_q4(void) {
    json_t *c = load_config("phi3");
    st_file *f = load_weights("phi3");
    CHECK(c && f, "cannot read the phi3 fixture");
    if (!c || !f) return;
    tensor_set q = {0}, d = {0};
    for (int i = 0; i < f->n; i++) {
        const st_tensor *t = &f->t[i];
        size_t n = strlen(t->name);
        if (t->ndim != 2 || n < 7 || strcmp(t->name + n - 7, ".weight") != 0 || t->shape[1] % 64) {
            ts_add(&q, t->name, t->dtype, t->ndim, t->shape, t->data, 0);
            ts_add(&d, t->name, t->dtype, t->ndim, t->shape, t->data, 0);
            continue;
        }
        int64_t R = t->shape[0], C = t->shape[1], sw[2] = {R, C / 8}, ss[2] = {R, C / 64};
        uint32_t *codes = malloc((size_t)(R * C / 8) * 4);
        uint16_t *sc = malloc((size_t)(R * C / 64) * 2), *bi = malloc((size_t)(R * C / 64) * 2);
        float *deq = malloc((size_t)(R * C) * 4);
        quantize_q4(t->data, R, C, codes, sc, bi, deq);
        char name[256];
        ts_add(&q, t->name, ST_U32, 2, sw, codes, 1);
        snprintf(name, sizeof name, "%.*s.scales", (int)n - 7, t->name);
        ts_add(&q, name, ST_BF16, 2, ss, sc, 1);
        snprintf(name, sizeof name, "%.*s.biases", (int)n - 7, t->name);
        ts_add(&q, name, ST_BF16, 2, ss, bi, 1);
        ts_add(&d, t->name, ST_F32, 2, t->shape, deq, 1);
    }
    const char *dd = tmp_dir("phi3_deq"), *dq = tmp_dir("phi3_q4");
    CHECK(write_ckpt(dd, c, &d) == 0, "write: %s", celer_last_error());
    json_object_set_new(c, "quantization", json_pack("{s:i,s:i}", "group_size", 64, "bits", 4));
    CHECK(write_ckpt(dq, c, &q) == 0, "write: %s", celer_last_error());
    fixture_ref r;
    celer_model *mq = celer_model_open(dq, 2), *md = celer_model_open(dd, 2);
    CHECK(mq && md, "open: %s", celer_last_error());
    if (mq && md && fixture_load("tests/fixtures/models/phi3", &r) == 0) {
        int n = r.len[0], V = r.vocab;
        float *a = malloc((size_t)n * V * 4), *b = malloc((size_t)n * V * 4);
        celer_session *sq = celer_session_new(mq, n, 7), *sd = celer_session_new(md, n, 7);
        CHECK(celer_session_eval(sq, r.seq[0], n, a, 1) == 0 && celer_session_eval(sd, r.seq[0], n, b, 1) == 0, "eval: %s",
              celer_last_error());
        double e = 0, far = 0;
        for (long k = 0; k < (long)n * V; k++) {
            double x = fabs((double)a[k] - b[k]), y = fabs((double)a[k] - r.logits[0][k]);
            e = x > e ? x : e;
            far = y > far ? y : far;
        }
        CHECK(e <= 1e-4, "phi3 q4 against its dequantized F32 copy: max err %g", e);
        CHECK(far > 1e-2, "the q4 copy should differ from the bf16 reference (max %g): quantization did nothing", far);
        celer_session_free(sq);
        celer_session_free(sd);
        free(a);
        free(b);
        fixture_free(&r);
    }
    celer_model_free(mq);
    celer_model_free(md);
    ts_free(&q);
    ts_free(&d);
    json_decref(c);
    st_close(f);
}

/* ---- longrope (Phi-3 128k) ---- */

/* Phi-3-vision-128k-instruct's rope_scaling as its config.json spells it (type "su",
 * the old name of longrope): head_dim 96, rope_theta 10000, max 131072, original 4096. */
static const char phi3_128k_rope[] =
    "{\"type\": \"su\", \"long_factor\": [1.0299999713897705, 1.0499999523162842, 1.0499999523162842, 1.0799999237060547,"
    " 1.2299998998641968, 1.2299998998641968, 1.2999999523162842, 1.4499999284744263, 1.5999999046325684,"
    " 1.6499998569488525, 1.8999998569488525, 2.859999895095825, 3.68999981880188, 5.419999599456787,"
    " 5.489999771118164, 5.489999771118164, 9.09000015258789, 11.579999923706055, 15.65999984741211,"
    " 15.769999504089355, 15.789999961853027, 18.360000610351562, 21.989999771118164, 23.079999923706055,"
    " 30.009998321533203, 32.35000228881836, 32.590003967285156, 35.56000518798828, 39.95000457763672,"
    " 53.840003967285156, 56.20000457763672, 57.95000457763672, 59.29000473022461, 59.77000427246094,"
    " 59.920005798339844, 61.190006256103516, 61.96000671386719, 62.50000762939453, 63.3700065612793,"
    " 63.48000717163086, 63.48000717163086, 63.66000747680664, 63.850006103515625, 64.08000946044922,"
    " 64.760009765625, 64.80001068115234, 64.81001281738281, 64.81001281738281],"
    " \"short_factor\": [1.05, 1.05, 1.05, 1.1, 1.1, 1.1, 1.2500000000000002, 1.2500000000000002, 1.4000000000000004,"
    " 1.4500000000000004, 1.5500000000000005, 1.8500000000000008, 1.9000000000000008, 2.000000000000001,"
    " 2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,"
    " 2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,"
    " 2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001, 2.000000000000001,"
    " 2.1000000000000005, 2.1000000000000005, 2.2, 2.3499999999999996, 2.3499999999999996, 2.3499999999999996,"
    " 2.3499999999999996, 2.3999999999999995, 2.3999999999999995, 2.6499999999999986, 2.6999999999999984,"
    " 2.8999999999999977, 2.9499999999999975, 3.049999999999997, 3.049999999999997, 3.049999999999997]}";

/* transformers' _compute_longrope_parameters: inv_freq[i] = 1 / (ext[i] * base^(2i /
 * dim)), ext the short factors up to original_max_position_embeddings and the long
 * ones past it; attention_factor sqrt(1 + ln(factor) / ln(original)) with factor =
 * max_position_embeddings / original. Checked against that formula in double. */
static void rope_longrope_phi3(void) {
    json_t *rs = json_loads(phi3_128k_rope, 0, NULL);
    json_t *cfg = json_pack("{s:i, s:i, s:f, s:O}", "max_position_embeddings", 131072, "original_max_position_embeddings",
                            4096, "rope_theta", 10000.0, "rope_scaling", rs);
    CHECK(rs && cfg, "bad test json");
    if (!rs || !cfg) return;
    static rope_spec r; /* 4 KiB of factors */
    CHECK(rope_spec_parse(&r, NULL, cfg, "test") == 0, "parse: %s", celer_last_error());
    CHECK(r.type == ROPE_LONGROPE && r.n_factors == 48 && r.orig_max_pos == 4096, "type %d, %d factors, original %g", r.type,
          r.n_factors, r.orig_max_pos);
    const json_t *lists[2] = {json_object_get(rs, "short_factor"), json_object_get(rs, "long_factor")};
    const double attn = sqrt(1 + log(131072.0 / 4096) / log(4096.0));
    for (int use_long = 0; use_long < 2; use_long++) {
        rope_table t = {0};
        r.use_long = use_long;
        CHECK(rope_table_init(&t, &r, 96) == 0, "init: %s", celer_last_error());
        CHECK(t.dim == 96, "dim %d", t.dim);
        for (int i = 0; i < 48 && t.inv_freq; i++) {
            double want = 1 / (json_number_value(json_array_get(lists[use_long], (size_t)i)) * pow(10000.0, 2.0 * i / 96));
            CHECK(fabs(t.inv_freq[i] - want) <= 1e-6 * want, "%s inv_freq[%d] = %.9g, want %.9g", use_long ? "long" : "short",
                  i, t.inv_freq[i], want);
        }
        CHECK_NEAR(t.attn_factor, attn, 1e-6);
        rope_table_free(&t);
    }
    /* spot values worked out by hand: short[0] = 1/1.05, long[47] = 1/(64.81001281738281 * 10000^(94/96)) */
    rope_table t = {0};
    r.use_long = 0;
    rope_table_init(&t, &r, 96);
    CHECK_NEAR(t.inv_freq[0], 0.9523809523809523, 1e-7);
    rope_table_free(&t);
    r.use_long = 1;
    rope_table_init(&t, &r, 96);
    CHECK(fabs(t.inv_freq[47] - 1.8693525984053542e-06) <= 1e-12, "long inv_freq[47] = %.9g", t.inv_freq[47]);
    CHECK_NEAR(attn, 1.1902380714238083, 1e-12);
    rope_table_free(&t);
    /* a factor list of the wrong length for the rotated width */
    CHECK(rope_table_init(&t, &r, 64) != 0, "48 factors for a width of 64 accepted");
    CHECK_STR_HAS(celer_last_error(), "48 factors");
    json_decref(cfg);
    json_decref(rs);
}

/* The phi3 fixture (partial rotary 0.75, head_dim 32: 12 pairs) with longrope whose
 * original length is 20: a sequence that reaches past 20 in one forward uses the
 * long factors, one that does not the short ones (transformers' choice per forward).
 * One list is all 1.0 (the fixture's plain RoPE) and the other 2.0, so exactly the
 * forwards that use the 1.0 list match the reference. */
static int longrope_ones;
static void phi3_longrope(json_t *c) {
    json_t *one = json_array(), *two = json_array();
    for (int i = 0; i < 12; i++) json_array_append_new(one, json_real(1.0)), json_array_append_new(two, json_real(2.0));
    json_t *rp = json_pack("{s:s, s:f, s:f, s:i, s:f}", "rope_type", "longrope", "rope_theta", 10000.0,
                           "partial_rotary_factor", 0.75, "original_max_position_embeddings", 20, "factor", 1.0);
    json_object_set_new(rp, "long_factor", longrope_ones ? one : two);
    json_object_set_new(rp, "short_factor", longrope_ones ? two : one);
    json_object_set_new(c, "rope_parameters", rp);
}

static void phi3_longrope_switch(void) {
    fixture_ref r;
    if (fixture_load("tests/fixtures/models/phi3", &r) != 0) { CHECK(0, "phi3 reference"); return; }
    for (longrope_ones = 0; longrope_ones < 2; longrope_ones++) {
        const char *dir = rewrite_config("phi3", phi3_longrope, longrope_ones ? "longrope_l" : "longrope_s");
        celer_model *m = dir ? celer_model_open(dir, 2) : NULL;
        CHECK(m != NULL, "longrope phi3: %s", celer_last_error());
        if (!m) continue;
        /* 20 tokens at once stay within the original length: the short list */
        double e_short = fixture_max_err(m, r.seq[0], 20, r.logits[0], r.vocab, 0);
        /* all 80 at once reach past it: the long list for every row */
        double e_long = fixture_max_err(m, r.seq[0], r.len[0], r.logits[0], r.vocab, 0);
        const char *which = longrope_ones ? "long = 1.0" : "short = 1.0";
        if (longrope_ones) {
            CHECK(e_long >= 0 && e_long <= 2e-3, "%s, 80 tokens: max err %g", which, e_long);
            CHECK(e_short > 1e-2, "%s, 20 tokens should use the short list: max err %g", which, e_short);
        } else {
            CHECK(e_short >= 0 && e_short <= 2e-3, "%s, 20 tokens: max err %g", which, e_short);
            CHECK(e_long > 1e-2, "%s, 80 tokens should use the long list: max err %g", which, e_long);
        }
        celer_model_free(m);
    }
    fixture_free(&r);
}

static void cleanup(void) {
    char cmd[128];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp_root);
    if (tmp_root[0] && system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tmp_root);
}

int main(void) {
    RUN(mxfp4_dequant);
    RUN(rope_proportional);
    RUN(rope_yarn_gpt_oss);
    RUN(gemma3_multimodal_legacy);
    RUN(gemma4_multimodal);
    RUN(exaone4_pattern_legacy);
    RUN(gpt_oss_mlx_layout);
    RUN(exaone4_without_window);
    RUN(config_errors);
    RUN(expert_weight_errors);
    RUN(rope_longrope_phi3);
    RUN(phi3_longrope_switch);
    RUN(second_set_legacy_spelling);
    RUN(second_set_window_rules);
    RUN(mixtral_layouts);
    RUN(phi3_mlx_q4);
    cleanup();
    return harness_done();
}
