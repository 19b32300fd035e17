/* tests/test_families_formats.c: the other spellings of the family fixtures and
 * the family-level unit checks. Each fixture is rewritten on the fly into a
 * temporary directory the way real checkpoints spell it (multimodal Gemma 3 with
 * text_config and language_model. weights plus the older rope_theta / rope_scaling /
 * rope_local_base_freq / sliding_window_pattern keys; EXAONE 4 with only the "LLG"
 * pattern; gpt-oss with mlx-community's per-expert gate/up/down stacks and legacy
 * rope_scaling) and must still match transformers' logits. Also: MXFP4 dequantization
 * by hand, YaRN and proportional RoPE frequencies, and config errors naming the key. */
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
    json_object_set_new(json_object_get(json_object_get(c, "rope_parameters"), "full_attention"), "rope_type", json_string("longrope"));
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
    expect_config_error("gemma3", set_rope_type, "rope_type \"longrope\"");
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
    cleanup();
    return harness_done();
}
