/* model/synth.c: random-weight checkpoints of published models' shapes, for
 * benchmarks (speed does not depend on weight values). Writes config.json in the
 * hub's spelling and streams model.safetensors (bf16, or MLX affine q4 g64 for every
 * 2-D projection whose in-dim divides by 64) without holding it in memory. */
#include <errno.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "celer.h"
#include "io/safetensors.h"
#include "tensor/dtype.h"

typedef struct {
    const char *name, *model_type, *arch;
    int H, L, heads, kv, hd, I, V, tie, experts, topk;
    const char *extra; /* family keys of the published config.json */
    /* Gemma 4 / EXAONE 4 layouts (0: not used): layer l is full attention when
     * (l + 1) % pattern == 0 or it is the last (the others sliding; written as
     * layer_types); full layers' head dim; the last kv_shared layers read an earlier
     * layer's cache (no k/v projections); per-layer input width (Gemma 4); post-norm
     * layers without an input norm (EXAONE 4) */
    int pattern, global_hd, kv_shared, ple, post_norm;
    /* Gemma 4's attention_k_eq_v: full layers have global_kv KV heads whose values are
     * their keys (no v_proj); written as attention_k_eq_v and num_global_key_value_heads */
    int k_eq_v, global_kv;
} synth_shape;

static const synth_shape shapes[] = {
    {"tiny", "llama", "LlamaForCausalLM", 64, 2, 4, 2, 16, 128, 256, 1, 0, 0,
     "{\"rope_theta\": 10000.0, \"rms_norm_eps\": 1e-5, \"max_position_embeddings\": 2048, \"bos_token_id\": 1, \"eos_token_id\": 2}", 0, 0, 0, 0, 0, 0, 0},
    {"qwen3-0.6b", "qwen3", "Qwen3ForCausalLM", 1024, 28, 16, 8, 128, 3072, 151936, 1, 0, 0,
     "{\"rope_theta\": 1000000.0, \"rms_norm_eps\": 1e-6, \"max_position_embeddings\": 40960, \"bos_token_id\": 151643,"
     " \"eos_token_id\": 151645, \"use_sliding_window\": false, \"sliding_window\": null, \"max_window_layers\": 28}", 0, 0, 0, 0, 0, 0, 0},
    {"llama3.2-1b", "llama", "LlamaForCausalLM", 2048, 16, 32, 8, 64, 8192, 128256, 1, 0, 0,
     "{\"rope_theta\": 500000.0, \"rms_norm_eps\": 1e-5, \"max_position_embeddings\": 131072, \"bos_token_id\": 128000,"
     " \"eos_token_id\": [128001, 128008, 128009], \"rope_scaling\": {\"factor\": 32.0, \"high_freq_factor\": 4.0,"
     " \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192, \"rope_type\": \"llama3\"}}", 0, 0, 0, 0, 0, 0, 0},
    {"llama3-8b", "llama", "LlamaForCausalLM", 4096, 32, 32, 8, 128, 14336, 128256, 0, 0, 0,
     "{\"rope_theta\": 500000.0, \"rms_norm_eps\": 1e-5, \"max_position_embeddings\": 8192, \"bos_token_id\": 128000,"
     " \"eos_token_id\": 128001}", 0, 0, 0, 0, 0, 0, 0},
    /* Llama 3 70B: 141 GB in bf16, more than one H200 holds (bench --synth, --tp 2) */
    {"llama3-70b", "llama", "LlamaForCausalLM", 8192, 80, 64, 8, 128, 28672, 128256, 0, 0, 0,
     "{\"rope_theta\": 500000.0, \"rms_norm_eps\": 1e-5, \"max_position_embeddings\": 8192, \"bos_token_id\": 128000,"
     " \"eos_token_id\": 128001}", 0, 0, 0, 0, 0, 0, 0},
    {"gemma3-4b", "gemma3_text", "Gemma3ForCausalLM", 2560, 34, 8, 4, 256, 10240, 262208, 1, 0, 0,
     "{\"rope_theta\": 1000000.0, \"rope_local_base_freq\": 10000.0, \"rope_scaling\": {\"factor\": 8.0, \"rope_type\": \"linear\"},"
     " \"rms_norm_eps\": 1e-6, \"max_position_embeddings\": 131072, \"query_pre_attn_scalar\": 256, \"sliding_window\": 1024,"
     " \"sliding_window_pattern\": 6, \"hidden_activation\": \"gelu_pytorch_tanh\", \"final_logit_softcapping\": null,"
     " \"attn_logit_softcapping\": null, \"bos_token_id\": 2, \"eos_token_id\": 1}", 0, 0, 0, 0, 0, 0, 0},
    {"gpt-oss-20b", "gpt_oss", "GptOssForCausalLM", 2880, 24, 64, 8, 64, 2880, 201088, 0, 32, 4,
     "{\"rope_theta\": 150000.0, \"rope_scaling\": {\"beta_fast\": 32.0, \"beta_slow\": 1.0, \"factor\": 32.0,"
     " \"original_max_position_embeddings\": 4096, \"rope_type\": \"yarn\", \"truncate\": false}, \"rms_norm_eps\": 1e-5,"
     " \"max_position_embeddings\": 131072, \"sliding_window\": 128, \"attention_bias\": true, \"swiglu_limit\": 7.0,"
     " \"experts_per_token\": 4, \"num_local_experts\": 32, \"num_experts_per_tok\": 4, \"router_aux_loss_coef\": 0.9,"
     " \"eos_token_id\": 200002, \"pad_token_id\": 199999}", 0, 0, 0, 0, 0, 0, 0},
    /* google/gemma-4-E4B(-it) config.json text_config (docs/benchmarks/cpu-batched.md
     * cites the copies it was checked against) */
    {"gemma4-e4b", "gemma4_text", "Gemma4ForCausalLM", 2560, 42, 8, 2, 256, 10240, 262144, 1, 0, 0,
     "{\"rms_norm_eps\": 1e-6, \"max_position_embeddings\": 131072, \"sliding_window\": 512,"
     " \"global_head_dim\": 512, \"num_kv_shared_layers\": 18, \"hidden_size_per_layer_input\": 256,"
     " \"vocab_size_per_layer_input\": 262144, \"attention_k_eq_v\": false, \"use_double_wide_mlp\": false,"
     " \"enable_moe_block\": false, \"final_logit_softcapping\": 30.0, \"hidden_activation\": \"gelu_pytorch_tanh\","
     " \"rope_parameters\": {\"full_attention\": {\"partial_rotary_factor\": 0.25, \"rope_theta\": 1000000.0,"
     " \"rope_type\": \"proportional\"}, \"sliding_attention\": {\"rope_theta\": 10000.0, \"rope_type\": \"default\"}},"
     " \"bos_token_id\": 2, \"eos_token_id\": 1, \"pad_token_id\": 0}",
     6, 512, 18, 256, 0, 0, 0},
    /* google/gemma-4-12B(-it) config.json text_config: the decoder of the encoder-free
     * "unified" 12B (model_type gemma4_unified; its text_config is gemma4_text's schema),
     * dense, no per-layer inputs or shared KV; full layers are MQA with keys as values
     * (docs/benchmarks/cpu-batched.md cites the copies) */
    {"gemma4-12b", "gemma4_text", "Gemma4ForCausalLM", 3840, 48, 16, 8, 256, 15360, 262144, 1, 0, 0,
     "{\"rms_norm_eps\": 1e-6, \"max_position_embeddings\": 131072, \"sliding_window\": 1024,"
     " \"global_head_dim\": 512, \"num_kv_shared_layers\": 0, \"hidden_size_per_layer_input\": 0,"
     " \"vocab_size_per_layer_input\": 262144, \"use_double_wide_mlp\": false, \"enable_moe_block\": false,"
     " \"final_logit_softcapping\": 30.0, \"hidden_activation\": \"gelu_pytorch_tanh\","
     " \"rope_parameters\": {\"full_attention\": {\"partial_rotary_factor\": 0.25, \"rope_theta\": 1000000.0,"
     " \"rope_type\": \"proportional\"}, \"sliding_attention\": {\"rope_theta\": 10000.0, \"rope_type\": \"default\"}},"
     " \"bos_token_id\": 2, \"eos_token_id\": 1, \"pad_token_id\": 0}",
     6, 512, 0, 0, 0, 1, 1},
    /* LGAI-EXAONE/EXAONE-4.0-1.2B config.json (docs/benchmarks/cpu-batched.md cites the
     * copy): global attention with RoPE in every layer (no sliding window) */
    {"exaone4-1.2b", "exaone4", "Exaone4ForCausalLM", 2048, 30, 32, 8, 64, 4096, 102400, 1, 0, 0,
     "{\"rms_norm_eps\": 1e-5, \"max_position_embeddings\": 65536, \"sliding_window\": null,"
     " \"sliding_window_pattern\": null, \"rope_theta\": 1000000.0, \"rope_scaling\": {\"factor\": 16.0,"
     " \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0, \"original_max_position_embeddings\": 8192,"
     " \"rope_type\": \"llama3\"}, \"bos_token_id\": 1, \"eos_token_id\": 361, \"pad_token_id\": 0}",
     0, 0, 0, 0, 1, 0, 0},
};

const char *const *celer_synth_shapes(void) {
    static const char *names[sizeof shapes / sizeof shapes[0] + 1];
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++) names[i] = shapes[i].name;
    return names;
}

typedef enum { G_MAT, G_NORM, G_BIAS, G_ZERO, G_Q4W, G_Q4S, G_Q4B, G_FP4B, G_FP4S } gen_kind;

typedef struct {
    st_out *t;
    gen_kind *g;
    int n, cap;
    char **names;
} tlist;

static int add(tlist *l, gen_kind g, st_dtype dt, const char *name, int nd, int64_t a, int64_t b, int64_t c, int64_t d) {
    if (l->n == l->cap) {
        int cap = l->cap ? l->cap * 2 : 256;
        st_out *t = realloc(l->t, (size_t)cap * sizeof *t);
        if (t) l->t = t;
        gen_kind *gk = realloc(l->g, (size_t)cap * sizeof *gk);
        if (gk) l->g = gk;
        char **nm = realloc(l->names, (size_t)cap * sizeof *nm);
        if (nm) l->names = nm;
        if (!t || !gk || !nm) return err_set("out of memory");
        l->cap = cap;
    }
    char *s = strdup(name);
    if (!s) return err_set("out of memory");
    st_out *o = &l->t[l->n];
    memset(o, 0, sizeof *o);
    o->name = l->names[l->n] = s;
    o->dtype = dt;
    o->ndim = nd;
    int64_t dims[4] = {a, b, c, d};
    for (int i = 0; i < nd; i++) o->shape[i] = dims[i];
    l->g[l->n++] = g;
    return 0;
}

/* A projection [out, in]: bf16, or MLX affine q4 g64 when q4 and in % 64 == 0. */
static int add_linear(tlist *l, const char *module, int64_t out, int64_t in, int q4) {
    char n[256];
    if (q4 && in % 64 == 0) {
        snprintf(n, sizeof n, "%s.weight", module);
        if (add(l, G_Q4W, ST_U32, n, 2, out, in / 8, 0, 0)) return -1;
        snprintf(n, sizeof n, "%s.scales", module);
        if (add(l, G_Q4S, ST_BF16, n, 2, out, in / 64, 0, 0)) return -1;
        snprintf(n, sizeof n, "%s.biases", module);
        return add(l, G_Q4B, ST_BF16, n, 2, out, in / 64, 0, 0);
    }
    snprintf(n, sizeof n, "%s.weight", module);
    return add(l, G_MAT, ST_BF16, n, 2, out, in, 0, 0);
}

/* 1 when layer l of s is a full-attention layer of a sliding/full pattern. */
static int full_layer(const synth_shape *s, int l) { return s->pattern && ((l + 1) % s->pattern == 0 || l == s->L - 1); }

static int build_list(const synth_shape *s, int q4, tlist *l) {
    char n[256], p[200];
    int gemma = strncmp(s->model_type, "gemma", 5) == 0, gemma4 = strcmp(s->model_type, "gemma4_text") == 0, oss = s->experts > 0;
    int qk_norm = gemma || strcmp(s->model_type, "qwen3") == 0 || strcmp(s->model_type, "exaone4") == 0;
    if (add_linear(l, "model.embed_tokens", s->V, s->H, q4)) return -1;
    if (s->ple) { /* Gemma 4's per-layer inputs: a table [V, L x P] and the projection from the embedding */
        int64_t LP = (int64_t)s->L * s->ple;
        if (add_linear(l, "model.embed_tokens_per_layer", s->V, LP, q4) ||
            add_linear(l, "model.per_layer_model_projection", LP, s->H, q4) ||
            add(l, G_NORM, ST_BF16, "model.per_layer_projection_norm.weight", 1, s->ple, 0, 0, 0))
            return -1;
    }
    for (int i = 0; i < s->L; i++) {
        snprintf(p, sizeof p, "model.layers.%d", i);
        const int full = full_layer(s, i), hd = full && s->global_hd ? s->global_hd : s->hd;
        const int own_kv = i < s->L - s->kv_shared, k_eq_v = full && s->k_eq_v;
        int64_t qd = (int64_t)s->heads * hd, kd = (int64_t)(k_eq_v ? s->global_kv : s->kv) * hd;
#define N(fmt) (snprintf(n, sizeof n, "%s." fmt, p), n)
        if ((!s->post_norm && add(l, G_NORM, ST_BF16, N("input_layernorm.weight"), 1, s->H, 0, 0, 0)) ||
            add(l, G_NORM, ST_BF16, N("post_attention_layernorm.weight"), 1, s->H, 0, 0, 0) ||
            add_linear(l, N("self_attn.q_proj"), qd, s->H, q4) ||
            (own_kv && add_linear(l, N("self_attn.k_proj"), kd, s->H, q4)) ||
            (own_kv && !k_eq_v && add_linear(l, N("self_attn.v_proj"), kd, s->H, q4)) || add_linear(l, N("self_attn.o_proj"), s->H, qd, q4))
            return -1;
        if (qk_norm)
            if (add(l, G_NORM, ST_BF16, N("self_attn.q_norm.weight"), 1, hd, 0, 0, 0) ||
                (own_kv && add(l, G_NORM, ST_BF16, N("self_attn.k_norm.weight"), 1, hd, 0, 0, 0)))
                return -1;
        if (gemma && add(l, G_NORM, ST_BF16, N("pre_feedforward_layernorm.weight"), 1, s->H, 0, 0, 0)) return -1;
        if ((gemma || s->post_norm) && add(l, G_NORM, ST_BF16, N("post_feedforward_layernorm.weight"), 1, s->H, 0, 0, 0))
            return -1;
        if (s->ple)
            if (add_linear(l, N("per_layer_input_gate"), s->ple, s->H, q4) ||
                add_linear(l, N("per_layer_projection"), s->H, s->ple, q4) ||
                add(l, G_NORM, ST_BF16, N("post_per_layer_input_norm.weight"), 1, s->H, 0, 0, 0))
                return -1;
        if (gemma4 && add(l, G_NORM, ST_BF16, N("layer_scalar"), 1, 1, 0, 0, 0)) return -1; /* every Gemma 4 layer's */
        if (oss) {
            int64_t E = s->experts, I = s->I, H = s->H;
            if (add(l, G_BIAS, ST_BF16, N("self_attn.q_proj.bias"), 1, qd, 0, 0, 0) ||
                add(l, G_BIAS, ST_BF16, N("self_attn.k_proj.bias"), 1, kd, 0, 0, 0) ||
                add(l, G_BIAS, ST_BF16, N("self_attn.v_proj.bias"), 1, kd, 0, 0, 0) ||
                add(l, G_BIAS, ST_BF16, N("self_attn.o_proj.bias"), 1, s->H, 0, 0, 0) ||
                add(l, G_ZERO, ST_BF16, N("self_attn.sinks"), 1, s->heads, 0, 0, 0) ||
                add_linear(l, N("mlp.router"), E, H, q4) ||
                add(l, G_BIAS, ST_BF16, N("mlp.router.bias"), 1, E, 0, 0, 0) ||
                add(l, G_BIAS, ST_BF16, N("mlp.experts.gate_up_proj_bias"), 2, E, 2 * I, 0, 0) ||
                add(l, G_BIAS, ST_BF16, N("mlp.experts.down_proj_bias"), 2, E, H, 0, 0))
                return -1;
            if (q4) { /* the original checkpoints' MXFP4 expert layout */
                if (add(l, G_FP4B, ST_U8, N("mlp.experts.gate_up_proj_blocks"), 4, E, 2 * I, H / 32, 16) ||
                    add(l, G_FP4S, ST_U8, N("mlp.experts.gate_up_proj_scales"), 3, E, 2 * I, H / 32, 0) ||
                    add(l, G_FP4B, ST_U8, N("mlp.experts.down_proj_blocks"), 4, E, H, I / 32, 16) ||
                    add(l, G_FP4S, ST_U8, N("mlp.experts.down_proj_scales"), 3, E, H, I / 32, 0))
                    return -1;
            } else if (add(l, G_MAT, ST_BF16, N("mlp.experts.gate_up_proj"), 3, E, H, 2 * I, 0) ||
                       add(l, G_MAT, ST_BF16, N("mlp.experts.down_proj"), 3, E, I, H, 0)) {
                return -1;
            }
        } else if (add_linear(l, N("mlp.gate_proj"), s->I, s->H, q4) || add_linear(l, N("mlp.up_proj"), s->I, s->H, q4) ||
                   add_linear(l, N("mlp.down_proj"), s->H, s->I, q4)) {
            return -1;
        }
#undef N
    }
    if (add(l, G_NORM, ST_BF16, "model.norm.weight", 1, s->H, 0, 0, 0)) return -1;
    if (!s->tie && add_linear(l, "lm_head", s->V, s->H, q4)) return -1;
    return 0;
}

static uint64_t rng_next(uint64_t *x) { /* xorshift64* */
    *x ^= *x >> 12;
    *x ^= *x << 25;
    *x ^= *x >> 27;
    return *x * 0x2545F4914F6CDD1DULL;
}

/* Fills buf with n bytes of tensor kind g. Matrix values are uniform with std 0.02. */
static void gen_fill(gen_kind g, uint8_t *buf, size_t n, uint64_t *rng) {
    uint16_t *h = (uint16_t *)buf;
    size_t nh = n / 2;
    switch (g) {
    case G_MAT:
    case G_BIAS:
    case G_NORM:
        for (size_t i = 0; i < nh; i += 4) {
            uint64_t r = rng_next(rng);
            for (int k = 0; k < 4 && i + k < nh; k++) {
                float u = (float)((r >> (16 * k)) & 0xffff) / 65535.0f * 2.0f - 1.0f;
                float v = g == G_NORM ? 1.0f + 0.1f * u : (g == G_BIAS ? 0.01f : 0.0346f) * u;
                h[i + k] = f32_to_bf16(v);
            }
        }
        break;
    case G_ZERO: memset(buf, 0, n); break;
    case G_Q4W:
    case G_FP4B:
        for (size_t i = 0; i < n; i += 8) {
            uint64_t r = rng_next(rng);
            memcpy(buf + i, &r, n - i < 8 ? n - i : 8);
        }
        break;
    case G_Q4S: for (size_t i = 0; i < nh; i++) h[i] = f32_to_bf16(0.0092f); break;   /* std 0.02 over codes 0..15 */
    case G_Q4B: for (size_t i = 0; i < nh; i++) h[i] = f32_to_bf16(-0.069f); break;   /* centres 7.5 * scale on 0 */
    case G_FP4S: memset(buf, 127 - 6, n); break;                                       /* 2^-6 * e2m1 (|v| <= 6) */
    }
}

static int write_config(const synth_shape *s, const char *path, int q4) {
    json_error_t je;
    json_t *c = json_loads(s->extra, 0, &je);
    if (!c) return err_set("synth %s: bad built-in config: %s", s->name, je.text);
    json_object_set_new(c, "architectures", json_pack("[s]", s->arch));
    json_object_set_new(c, "model_type", json_string(s->model_type));
    json_object_set_new(c, "hidden_size", json_integer(s->H));
    json_object_set_new(c, "num_hidden_layers", json_integer(s->L));
    json_object_set_new(c, "num_attention_heads", json_integer(s->heads));
    json_object_set_new(c, "num_key_value_heads", json_integer(s->kv));
    json_object_set_new(c, "head_dim", json_integer(s->hd));
    json_object_set_new(c, "intermediate_size", json_integer(s->I));
    json_object_set_new(c, "vocab_size", json_integer(s->V));
    json_object_set_new(c, "tie_word_embeddings", json_boolean(s->tie));
    json_object_set_new(c, "torch_dtype", json_string("bfloat16"));
    json_object_set_new(c, "hidden_act", json_string("silu"));
    if (s->k_eq_v) {
        json_object_set_new(c, "attention_k_eq_v", json_true());
        json_object_set_new(c, "num_global_key_value_heads", json_integer(s->global_kv));
    }
    if (s->pattern) {
        json_t *types = json_array();
        for (int l = 0; l < s->L; l++)
            json_array_append_new(types, json_string(full_layer(s, l) ? "full_attention" : "sliding_attention"));
        json_object_set_new(c, "layer_types", types);
    }
    if (q4) {
        json_object_set_new(c, "quantization", json_pack("{s:i,s:i}", "group_size", 64, "bits", 4));
        json_object_set_new(c, "quantization_config", json_pack("{s:i,s:i}", "group_size", 64, "bits", 4));
    }
    json_object_set_new(c, "celer_synth", json_pack("{s:s,s:b}", "shape", s->name, "random_weights", 1));
    int rc = json_dump_file(c, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER);
    json_decref(c);
    return rc == 0 ? 0 : err_set("%s: cannot write: %s", path, strerror(errno));
}

static int synth(const char *shape, const char *dir, int q4, uint64_t seed, void (*progress)(double done, void *ctx),
                 void *ctx, int sparse);

int celer_synth(const char *shape, const char *dir, int q4, uint64_t seed,
                void (*progress)(double done, void *ctx), void *ctx) {
    return synth(shape, dir, q4, seed, progress, ctx, 0);
}

int celer_synth_sparse(const char *shape, const char *dir) { return synth(shape, dir, 0, 1, NULL, NULL, 1); }

/* sparse: the matrices (2-D and up) are holes of a sparse file, only the vectors
 * (norms, biases) written, so a 70B shape takes a few megabytes of disk. */
static int synth(const char *shape, const char *dir, int q4, uint64_t seed, void (*progress)(double done, void *ctx),
                 void *ctx, int sparse) {
    const synth_shape *s = NULL;
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        if (strcmp(shapes[i].name, shape) == 0) s = &shapes[i];
    if (!s) {
        char known[512];
        size_t k = 0;
        for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
            k += (size_t)snprintf(known + k, sizeof known - k, "%s%s", i ? ", " : "", shapes[i].name);
        return err_set("unknown shape \"%s\" (known: %s)", shape, known);
    }
    if (mkdir(dir, 0755) != 0 && errno != EEXIST) return err_set("%s: cannot create directory: %s", dir, strerror(errno));
    char path[4096];
    snprintf(path, sizeof path, "%s/config.json", dir);
    if (write_config(s, path, q4) != 0) return -1;
    tlist l = {0};
    int rc = build_list(s, q4, &l);
    size_t chunk = 8u << 20;
    uint8_t *buf = rc == 0 ? malloc(chunk) : NULL;
    if (rc == 0 && !buf) rc = err_set("out of memory");
    uint64_t total = 0, done = 0, rng = seed * 0x9E3779B97F4A7C15ULL + 1;
    for (int i = 0; i < l.n; i++) {
        uint64_t numel = 1;
        for (int d = 0; d < l.t[i].ndim; d++) numel *= (uint64_t)l.t[i].shape[d];
        total += numel * st_dtype_size(l.t[i].dtype);
    }
    snprintf(path, sizeof path, "%s/model.safetensors", dir);
    st_writer *w = rc == 0 ? st_writer_open(path, l.t, l.n, "{\"format\": \"pt\"}") : NULL;
    if (rc == 0 && !w) rc = -1;
    for (int i = 0; rc == 0 && i < l.n; i++) {
        uint64_t numel = 1;
        for (int d = 0; d < l.t[i].ndim; d++) numel *= (uint64_t)l.t[i].shape[d];
        uint64_t left = numel * st_dtype_size(l.t[i].dtype);
        if (sparse && l.t[i].ndim >= 2) {
            rc = st_writer_skip(w, (size_t)left);
            done += left;
            left = 0;
        }
        while (rc == 0 && left > 0) {
            size_t n = left < chunk ? (size_t)left : chunk;
            gen_fill(l.g[i], buf, n, &rng);
            rc = st_writer_write(w, buf, n);
            left -= n;
            done += n;
            if (progress) progress((double)done / (double)total, ctx);
        }
    }
    if (w) {
        if (rc == 0) rc = st_writer_close(w);
        else st_writer_abort(w);
    }
    free(buf);
    for (int i = 0; i < l.n; i++) free(l.names[i]);
    free(l.names);
    free(l.t);
    free(l.g);
    return rc;
}
