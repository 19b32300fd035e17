/* tests/test_checkpoint_formats.c: the storage variants real checkpoints use give
 * the same model: sharded safetensors with an index, the older config spelling
 * (rope_theta, rope_scaling, torch_dtype), and MLX quantization with per-module
 * overrides (bits 2/3/5/6/8, groups 32/128, modules left unquantized, U32 or I32
 * codes, f16 scales) checked against an F32 checkpoint of the dequantized values. */
#include <math.h>

#include "celer.h"
#include "fixture_util.h"
#include "harness.h"
#include "io/safetensors.h"
#include "tensor/dtype.h"
#include "test_util.h"

#define LLAMA "tests/fixtures/models/llama"

static float *run_logits(const char *dir, const int32_t *tok, int n, int *vocab) {
    celer_model *m = celer_model_open(dir, 2);
    if (!m) return NULL;
    celer_model_info in;
    celer_model_get_info(m, &in);
    *vocab = in.vocab_size;
    float *l = malloc((size_t)n * in.vocab_size * sizeof *l);
    celer_session *s = celer_session_new(m, n, 16);
    if (!s || celer_session_eval(s, tok, n, l, 1) != 0) { free(l); l = NULL; }
    celer_session_free(s);
    celer_model_free(m);
    return l;
}

static double max_diff(const float *a, const float *b, long n) {
    double e = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= e)) e = d;
    }
    return e;
}

static void sharded(void) {
    st_file *f = st_open(LLAMA "/model.safetensors");
    CHECK(f != NULL, "%s", celer_last_error());
    if (!f) return;
    const char *d = tu_dir("shards");
    st_out *o = calloc((size_t)f->n, sizeof *o);
    char idx[8192];
    size_t k = (size_t)snprintf(idx, sizeof idx, "{\"metadata\": {}, \"weight_map\": {");
    for (int i = 0; i < f->n; i++) {
        o[i].name = f->t[i].name;
        o[i].dtype = f->t[i].dtype;
        o[i].ndim = f->t[i].ndim;
        memcpy(o[i].shape, f->t[i].shape, sizeof o[i].shape);
        o[i].data = f->t[i].data;
        k += (size_t)snprintf(idx + k, sizeof idx - k, "%s\"%s\": \"model-0000%d-of-00002.safetensors\"", i ? ", " : "",
                              f->t[i].name, i < f->n / 2 ? 1 : 2);
    }
    snprintf(idx + k, sizeof idx - k, "}}");
    char p[1024];
    snprintf(p, sizeof p, "%s/model-00001-of-00002.safetensors", d);
    CHECK(st_write(p, o, f->n / 2, NULL) == 0, "%s", celer_last_error());
    snprintf(p, sizeof p, "%s/model-00002-of-00002.safetensors", d);
    CHECK(st_write(p, o + f->n / 2, f->n - f->n / 2, NULL) == 0, "%s", celer_last_error());
    tu_write_str(d, "model.safetensors.index.json", idx);
    tu_link(d, "config.json", LLAMA "/config.json");
    free(o);
    st_close(f);
    fixture_ref r;
    CHECK(fixture_load(LLAMA, &r) == 0, "ref");
    int V;
    float *a = run_logits(d, r.seq[0], r.len[0], &V), *b = run_logits(LLAMA, r.seq[0], r.len[0], &V);
    CHECK(a && b, "%s", celer_last_error());
    if (a && b) CHECK(max_diff(a, b, (long)r.len[0] * V) == 0, "sharded logits differ from single-file logits");
    free(a);
    free(b);
    fixture_free(&r);
}

static void legacy_config(void) {
    const char *d = tu_dir("legacy");
    tu_link(d, "model.safetensors", LLAMA "/model.safetensors");
    tu_write_str(d, "config.json",
                 "{\"architectures\": [\"LlamaForCausalLM\"], \"model_type\": \"llama\", \"hidden_size\": 128,"
                 " \"num_hidden_layers\": 3, \"num_attention_heads\": 4, \"num_key_value_heads\": 2, \"head_dim\": 32,"
                 " \"intermediate_size\": 256, \"vocab_size\": 512, \"tie_word_embeddings\": true, \"rms_norm_eps\": 1e-06,"
                 " \"torch_dtype\": \"bfloat16\", \"rope_theta\": 500000.0, \"max_position_embeddings\": 4096,"
                 " \"rope_scaling\": {\"factor\": 8.0, \"high_freq_factor\": 4.0, \"low_freq_factor\": 1.0,"
                 " \"original_max_position_embeddings\": 256, \"type\": \"llama3\"}, \"bos_token_id\": 1, \"eos_token_id\": [2, 3]}");
    fixture_ref r;
    CHECK(fixture_load(LLAMA, &r) == 0, "ref");
    celer_model *m = celer_model_open(d, 2);
    CHECK(m != NULL, "%s", celer_last_error());
    if (m) {
        double e = fixture_max_err(m, r.seq[0], r.len[0], r.logits[0], r.vocab, 5);
        CHECK(e >= 0 && e <= 2e-3, "legacy spelling: max err %g", e);
        celer_model_info in;
        celer_model_get_info(m, &in);
        CHECK(in.eos_token == 2, "eos from a list: %d", in.eos_token);
    }
    celer_model_free(m);
    fixture_free(&r);
}

/* ---- MLX quantization with per-module overrides ---- */

typedef struct { const char *module; int bits, group; int store; } qrule; /* store: 0 quant, 1 F16, 2 F32 */

static const qrule rules[] = {
    {"model.layers.0.self_attn.q_proj", 8, 32, 0}, {"model.layers.0.self_attn.k_proj", 3, 128, 0},
    {"model.layers.0.self_attn.v_proj", 5, 64, 0}, {"model.layers.0.self_attn.o_proj", 6, 32, 0},
    {"model.layers.0.mlp.gate_proj", 2, 128, 0},   {"model.layers.0.mlp.up_proj", 0, 0, 1},
    {"model.layers.2.self_attn.q_proj", 0, 0, 2},
};

/* Quantizes W [rows, cols] the MLX way; writes packed codes, bf16/f16 scales and
 * biases, and the dequantized values into deq. */
static void quantize(const float *w, long rows, long cols, int bits, int group, int f16s, uint32_t *codes,
                     uint16_t *sc, uint16_t *bi, float *deq) {
    long wpr = cols * bits / 32, ng = cols / group;
    memset(codes, 0, (size_t)(rows * wpr) * 4);
    int maxc = (1 << bits) - 1;
    for (long r = 0; r < rows; r++)
        for (long g = 0; g < ng; g++) {
            const float *x = w + r * cols + g * group;
            float mn = x[0], mx = x[0];
            for (int j = 1; j < group; j++) { if (x[j] < mn) mn = x[j]; if (x[j] > mx) mx = x[j]; }
            float s = (mx - mn) / maxc;
            if (s == 0) s = 1e-3f;
            uint16_t s16 = f16s ? 0 : f32_to_bf16(s), b16 = f16s ? 0 : f32_to_bf16(mn);
            float sq = f16s ? s : bf16_to_f32(s16), bq = f16s ? mn : bf16_to_f32(b16);
            if (f16s) { /* exact f16 values: scales and biases rounded through a small table search */
                s16 = 0; b16 = 0;
                for (uint32_t h = 0; h < 0x7c00; h++) {
                    if (fabsf(f16_to_f32((uint16_t)h) - s) < fabsf(f16_to_f32(s16) - s)) s16 = (uint16_t)h;
                }
                float am = fabsf(mn);
                for (uint32_t h = 0; h < 0x7c00; h++)
                    if (fabsf(f16_to_f32((uint16_t)h) - am) < fabsf(f16_to_f32(b16) - am)) b16 = (uint16_t)h;
                if (mn < 0) b16 |= 0x8000;
                sq = f16_to_f32(s16);
                bq = f16_to_f32(b16);
            }
            sc[r * ng + g] = s16;
            bi[r * ng + g] = b16;
            for (int j = 0; j < group; j++) {
                long q = lrintf((x[j] - bq) / sq);
                if (q < 0) q = 0;
                if (q > maxc) q = maxc;
                long col = g * group + j, bit = col * bits;
                uint32_t *row = codes + r * wpr;
                row[bit / 32] |= (uint32_t)q << (bit % 32);
                if (bit % 32 + bits > 32) row[bit / 32 + 1] |= (uint32_t)q >> (32 - bit % 32);
                deq[r * cols + col] = (float)q * sq + bq;
            }
        }
}

static void mixed_quantization(void) {
    st_file *f = st_open(LLAMA "/model.safetensors");
    CHECK(f != NULL, "%s", celer_last_error());
    if (!f) return;
    const char *dq = tu_dir("mixq"), *dr = tu_dir("mixq-ref");
    st_out oq[256], orf[128];
    void *owned[512];
    int nq = 0, nr = 0, no = 0;
    char names[3][128][200];
    for (int i = 0; i < f->n && i < 128; i++) {
        const st_tensor *t = &f->t[i];
        long rows = t->shape[0], cols = t->ndim == 2 ? t->shape[1] : 1;
        float *w = malloc((size_t)(rows * cols) * 4), *deq = malloc((size_t)(rows * cols) * 4);
        owned[no++] = w;
        owned[no++] = deq;
        for (long j = 0; j < rows * cols; j++) w[j] = bf16_to_f32(((const uint16_t *)t->data)[j]);
        orf[nr++] = (st_out){.name = t->name, .dtype = ST_F32, .ndim = t->ndim, .shape = {t->shape[0], t->shape[1]}, .data = deq};
        char mod[160];
        snprintf(mod, sizeof mod, "%s", t->name);
        char *dot = strrchr(mod, '.');
        if (dot) *dot = 0;
        int bits = 4, group = 64, store = t->ndim == 2 ? 0 : 1;
        for (size_t k = 0; k < sizeof rules / sizeof rules[0]; k++)
            if (strcmp(rules[k].module, mod) == 0) { bits = rules[k].bits; group = rules[k].group; store = rules[k].store; }
        if (store == 1) { /* plain F16 (the norms, and a module marked false) */
            uint16_t *h = malloc((size_t)(rows * cols) * 2);
            owned[no++] = h;
            for (long j = 0; j < rows * cols; j++) {
                uint16_t best = 0; /* f16 rounding by search over nearby codes is slow; bf16 values fit f16 here */
                float v = w[j], av = fabsf(v);
                uint32_t lo = 0, hi = 0x7bff;
                while (lo < hi) { uint32_t mid = (lo + hi) / 2; if (f16_to_f32((uint16_t)mid) < av) lo = mid + 1; else hi = mid; }
                best = (uint16_t)lo;
                if (lo > 0 && fabsf(f16_to_f32((uint16_t)(lo - 1)) - av) <= fabsf(f16_to_f32((uint16_t)lo) - av)) best = (uint16_t)(lo - 1);
                h[j] = v < 0 ? (uint16_t)(best | 0x8000) : best;
                deq[j] = f16_to_f32(h[j]);
            }
            oq[nq++] = (st_out){.name = t->name, .dtype = ST_F16, .ndim = t->ndim, .shape = {t->shape[0], t->shape[1]}, .data = h};
            continue;
        }
        if (store == 2) {
            memcpy(deq, w, (size_t)(rows * cols) * 4);
            oq[nq++] = (st_out){.name = t->name, .dtype = ST_F32, .ndim = 2, .shape = {rows, cols}, .data = w};
            continue;
        }
        int f16s = strcmp(mod, "model.layers.1.mlp.down_proj") == 0;
        uint32_t *codes = malloc((size_t)(rows * cols * bits / 32) * 4);
        uint16_t *sc = malloc((size_t)(rows * cols / group) * 2), *bi = malloc((size_t)(rows * cols / group) * 2);
        owned[no++] = codes; owned[no++] = sc; owned[no++] = bi;
        quantize(w, rows, cols, bits, group, f16s, codes, sc, bi, deq);
        int k = nq / 3 % 128;
        snprintf(names[0][k], 200, "%s.weight", mod);
        snprintf(names[1][k], 200, "%s.scales", mod);
        snprintf(names[2][k], 200, "%s.biases", mod);
        st_dtype cd = (i % 2) ? ST_U32 : ST_I32, sd = f16s ? ST_F16 : ST_BF16;
        oq[nq++] = (st_out){.name = names[0][k], .dtype = cd, .ndim = 2, .shape = {rows, cols * bits / 32}, .data = codes};
        oq[nq++] = (st_out){.name = names[1][k], .dtype = sd, .ndim = 2, .shape = {rows, cols / group}, .data = sc};
        oq[nq++] = (st_out){.name = names[2][k], .dtype = sd, .ndim = 2, .shape = {rows, cols / group}, .data = bi};
    }
    char p[1024];
    snprintf(p, sizeof p, "%s/model.safetensors", dq);
    CHECK(st_write(p, oq, nq, "{\"format\": \"mlx\"}") == 0, "%s", celer_last_error());
    snprintf(p, sizeof p, "%s/model.safetensors", dr);
    CHECK(st_write(p, orf, nr, NULL) == 0, "%s", celer_last_error());
#define CFG "{\"model_type\": \"llama\", \"hidden_size\": 128, \"num_hidden_layers\": 3, \"num_attention_heads\": 4," \
            " \"num_key_value_heads\": 2, \"head_dim\": 32, \"intermediate_size\": 256, \"vocab_size\": 512," \
            " \"tie_word_embeddings\": true, \"rms_norm_eps\": 1e-06, \"rope_theta\": 10000.0"
    tu_write_str(dr, "config.json", CFG "}");
    tu_write_str(dq, "config.json",
                 CFG ", \"quantization\": {\"group_size\": 64, \"bits\": 4, \"mode\": \"affine\","
                     " \"model.layers.0.self_attn.q_proj\": {\"bits\": 8, \"group_size\": 32},"
                     " \"model.layers.0.self_attn.k_proj\": {\"bits\": 3, \"group_size\": 128},"
                     " \"model.layers.0.self_attn.v_proj\": {\"bits\": 5},"
                     " \"model.layers.0.self_attn.o_proj\": {\"bits\": 6, \"group_size\": 32},"
                     " \"model.layers.0.mlp.gate_proj\": {\"bits\": 2, \"group_size\": 128},"
                     " \"model.layers.0.mlp.up_proj\": false, \"model.layers.2.self_attn.q_proj\": false}}");
    const int32_t tok[12] = {5, 17, 300, 2, 99, 511, 0, 42, 42, 7, 256, 128};
    int V = 0;
    float *a = run_logits(dq, tok, 12, &V);
    CHECK(a != NULL, "mixed-quantization checkpoint: %s", celer_last_error());
    float *b = run_logits(dr, tok, 12, &V);
    CHECK(b != NULL, "reference checkpoint: %s", celer_last_error());
    if (a && b) {
        double e = max_diff(a, b, 12L * V);
        CHECK(e <= 1e-4, "quantized vs dequantized-F32 logits differ by %g", e);
    }
    free(a);
    free(b);
    for (int i = 0; i < no; i++) free(owned[i]);
    st_close(f);
}

int main(void) {
    RUN(sharded);
    RUN(legacy_config);
    RUN(mixed_quantization);
    tu_cleanup();
    return harness_done();
}
