/* model/model.h: a loaded model: its configuration, the per-layer plan its family
 * description produced, and the weights bound to that plan. Families are
 * descriptions (model/llama.c, ...); model/forward.c executes any plan. */
#ifndef CELER_MODEL_H
#define CELER_MODEL_H
#include <jansson.h>
#include <stdint.h>

#include "backend/backend.h"
#include "io/checkpoint.h"
#include "kv/cache.h"
#include "tensor/weight.h"

typedef enum { ROPE_NONE, ROPE_DEFAULT, ROPE_LINEAR, ROPE_LLAMA3, ROPE_YARN } rope_type;

/* One RoPE configuration as config.json states it. */
typedef struct {
    rope_type type;
    double theta, factor;
    double low_freq_factor, high_freq_factor;   /* llama3 */
    double orig_max_pos;                        /* llama3, yarn */
    double beta_fast, beta_slow;                /* yarn */
    double attn_factor;                         /* < 0: derived from the type */
    double mscale, mscale_all_dim;              /* yarn variants; 0 when absent */
    int truncate;                               /* yarn */
    double partial;                             /* fraction of head_dim rotated */
} rope_spec;

typedef enum { ACT_SILU = 0, ACT_GELU_TANH = 1 } act_kind;

/* What one layer does; produced by the family description. */
typedef struct {
    int n_heads, n_kv, head_dim;
    int rope;          /* index into model.ropes, -1 for no RoPE */
    int window;        /* 0: full attention; > 0: sliding window of this many keys */
    int qk_norm;       /* RMSNorm over each head of q and k before RoPE */
    int attn_bias;     /* q, k, v, o projections have biases */
    int inter;         /* MLP width */
    float attn_scale;
} layer_plan;

typedef struct {
    weight wq, wk, wv, wo;          /* [n_heads*hd, H], [n_kv*hd, H], [n_kv*hd, H], [H, n_heads*hd] */
    weight gate, up, down;          /* [I, H], [I, H], [H, I] */
    float *attn_norm, *mlp_norm;    /* [H] */
    float *q_norm, *k_norm;         /* [head_dim] or NULL */
    float *bq, *bk, *bv, *bo;       /* biases or NULL */
} layer_weights;

typedef struct {
    int vocab, hidden, n_layers, n_heads, n_kv, head_dim, inter, max_pos;
    float eps;
    int tie;
    int norm_plus_one;       /* RMSNorm scales by (1 + w) */
    act_kind act;
    float embed_scale;       /* 1 for most families */
    float final_softcap;     /* 0: none */
    int bos, eos;            /* -1 when unknown */
} model_config;

typedef struct model model;

typedef struct {
    const char *name;                 /* "llama" */
    const char *const *model_types;   /* config.json model_type values it reads */
    /* Reads family-specific keys and fills cfg, the plan and rope specs. */
    int (*describe)(model *m, const json_t *config, const char *where);
} family_desc;

#define MODEL_MAX_ROPES 2

struct model {
    checkpoint *ck;
    const family_desc *fam;
    char model_type[64];
    model_config cfg;
    layer_plan *plan;          /* [n_layers] */
    layer_weights *lw;         /* [n_layers] */
    rope_spec rope_specs[MODEL_MAX_ROPES];
    rope_table ropes[MODEL_MAX_ROPES];
    int n_ropes;
    weight embed, lm_head;     /* [V, H] each (lm_head aliases embed when tied) */
    float *final_norm;         /* [H] */
    quant_cfg quant;
    backend *be;
    size_t weight_bytes;       /* bytes one token's forward reads */
    int64_t n_params;
};

/* Opens a checkpoint directory and binds it; NULL with a message naming the file. */
model *model_open(const char *dir, int n_threads);
void model_free(model *m);

/* Shared parsing every family uses: the common keys of config.json (both spellings). */
int model_parse_common(model *m, const json_t *config, const char *where);
/* Reads a RoPE spec from a rope_parameters-style object (or legacy keys of config). */
int rope_spec_parse(rope_spec *r, const json_t *params, const json_t *config, const char *where);
/* Fills inv_freq and attn_factor for head_dim from the spec. */
int rope_table_init(rope_table *t, const rope_spec *r, int head_dim);
void rope_table_free(rope_table *t);

/* Activations for up to max_T tokens at once, allocated once per session. */
typedef struct {
    int max_T;
    float *x;      /* [max_T, H] residual stream */
    float *xn;     /* [max_T, H] normed */
    float *q;      /* [max_T, n_heads * hd] */
    float *k, *v;  /* [max_T, n_kv * hd] */
    float *att;    /* [max_T, n_heads * hd] */
    float *gate, *up; /* [max_T, I] */
    float *logits; /* [max_T, V] */
    int32_t *pos;  /* [max_T] */
} model_scratch;

model_scratch *model_scratch_new(const model *m, int max_T);
void model_scratch_free(model_scratch *s);

/* Runs T (<= scratch max_T) tokens at positions past..past+T-1 through the model,
 * appending to caches [n_layers]. Writes logits of all T rows (all != 0) or of the
 * last only into s->logits. -1 (caches unchanged past what was appended) on error. */
int model_forward(model *m, kv_cache **caches, model_scratch *s, const int32_t *tok, int T, int past, int all);

/* Families known to the loader. */
extern const family_desc family_llama, family_qwen3;
#endif
