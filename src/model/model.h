/* model/model.h: a loaded model: its configuration, the per-layer plan its family
 * description produced, and the weights bound to that plan. Families are
 * descriptions (model/llama.c, gemma.c, gpt_oss.c, exaone4.c) listed in the registry
 * (model/registry.h, which also owns the KV cache rules); model/forward.c
 * executes any plan, stage by stage, from the feature switches below. */
#ifndef CELER_MODEL_H
#define CELER_MODEL_H
#include <jansson.h>
#include <stdint.h>

#include "backend/backend.h"
#include "io/checkpoint.h"
#include "kv/cache.h"
#include "tensor/weight_bind.h"

typedef enum { ROPE_NONE, ROPE_DEFAULT, ROPE_LINEAR, ROPE_LLAMA3, ROPE_YARN, ROPE_PROPORTIONAL, ROPE_LONGROPE } rope_type;

#define ROPE_MAX_FACTORS 512   /* longrope: per-pair factors of a rotated width up to 1024 */

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
    int head_dim;                               /* head dim the table serves; 0: config head_dim */
    /* longrope (Phi-3 128k): inv_freq[i] = 1 / (factor[i] * theta^(2i/dim)) with the
     * short factors, or the long ones when use_long; attn_factor from max_pos /
     * orig_max_pos unless the config states attention_factor */
    int n_factors, use_long;
    double max_pos;                             /* the config's max_position_embeddings */
    float short_factor[ROPE_MAX_FACTORS], long_factor[ROPE_MAX_FACTORS];
} rope_spec;

/* Gated activations (backend glu ops take the same numbers). */
typedef enum { ACT_SILU = 0, ACT_GELU_TANH = 1, ACT_SWIGLU_CLAMP = 2 } act_kind;

/* How a layer normalizes q and k before RoPE (layer_plan.qk_norm). */
enum {
    QK_NORM_NONE = 0,
    QK_NORM_HEAD = 1,   /* RMSNorm over each head, weights [head_dim] (Qwen3, Gemma) */
    QK_NORM_WHOLE = 2,  /* RMSNorm over the whole projection, weights [n_heads*hd] / [n_kv*hd] (OLMo 2) */
};

/* Where a layer's RMSNorms sit around its attention and feed-forward blocks. */
typedef enum {
    NORM_PRE,       /* x += f(norm(x))              Llama, Qwen3, gpt-oss */
    NORM_SANDWICH,  /* x += post_norm(f(pre_norm(x))) Gemma 3/4 */
    NORM_POST,      /* x += post_norm(f(x))         EXAONE 4, OLMo 2 */
} norm_place;

/* How a router turns its logits into top-k expert weights (see backend moe_route). */
typedef enum {
    ROUTE_TOPK_SOFTMAX = 0,   /* top-k of the logits, softmax over those k (gpt-oss) */
    ROUTE_SOFTMAX_TOPK = 1,   /* softmax over all, top-k, renormalize, per-expert scale (Gemma 4) */
} route_kind;

/* Mixture-of-experts feed-forward of one layer (n_experts 0: none). */
typedef struct {
    int n_experts, top_k, inter;
    route_kind route;
    act_kind act;
    int beside_mlp;      /* Gemma 4: runs beside the dense MLP with its own norms, router on the residual */
    int gate_up_layout;  /* MOE_GU_*: how gate and up rows are stored (set when binding) */
    int in_major;        /* expert weights stored [in, out] (set when binding) */
    float alpha, limit;  /* ACT_SWIGLU_CLAMP constants */
} moe_plan;

/* What one layer does; produced by the family description. */
typedef struct {
    int n_heads, n_kv, head_dim;
    int rope;          /* index into model.ropes, -1 for no RoPE (NoPE layer) */
    int window;        /* 0: full attention; > 0: sliding window of this many keys */
    int qk_norm;       /* QK_NORM_*: RMSNorm of q and k before RoPE */
    int v_norm;        /* weightless RMSNorm over each head of v (Gemma 4) */
    int k_eq_v;        /* no v_proj: V is the raw k_proj output (Gemma 4 full layers) */
    int kv_source;     /* -1: own K/V and cache; else the layer whose cache this one reads */
    int attn_bias;     /* q, k, v, o projections have biases */
    int sinks;         /* one learned extra softmax logit per head (gpt-oss) */
    norm_place norm;
    int inter;         /* dense MLP width; 0: no dense MLP */
    moe_plan moe;
    int per_layer_input; /* Gemma 4 per-layer input gate after the feed-forward */
    int layer_scalar;  /* the stream is multiplied by a learned scalar at the end */
    float attn_scale;
    float attn_softcap; /* 0: none */
    int tp_attn, tp_mlp; /* tensor parallelism: the attention / dense MLP output is this rank's
                          * partial sum (row-parallel o_proj / down_proj), all-reduced (model/tp.c) */
} layer_plan;

/* The experts of one MoE layer, each a weight slice of the stacked tensors. */
typedef struct {
    weight *gate_up;       /* [E] each [2I, H] (rows per gate_up_layout; [H, 2I] when in_major), or NULL */
    weight *gate, *up;     /* [E] each [I, H] when stored apart, or NULL */
    weight *down;          /* [E] each [H, I] ([I, H] when in_major) */
    float *gate_up_bias;   /* [E, 2I] or NULL */
    float *gate_bias, *up_bias; /* [E, I] or NULL */
    float *down_bias;      /* [E, H] or NULL */
    weight router;         /* [E, H] */
    float *router_bias;    /* [E] or NULL */
    float *router_scale;   /* [H] (Gemma 4) or NULL */
    float *expert_scale;   /* [E] (Gemma 4) or NULL */
} moe_weights;

typedef struct {
    weight wq, wk, wv, wo;          /* [n_heads*hd, H], [n_kv*hd, H], [n_kv*hd, H], [H, n_heads*hd] */
    weight gate, up, down;          /* [I, H], [I, H], [H, I] */
    float *attn_norm, *mlp_norm;    /* [H] pre-norms (NULL where the plan has none) */
    float *attn_post_norm, *mlp_post_norm; /* [H] post-norms or NULL */
    float *q_norm, *k_norm;         /* [head_dim] or NULL */
    float *bq, *bk, *bv, *bo;       /* biases or NULL */
    float *sinks;                   /* [n_heads] or NULL */
    moe_weights moe;
    float *moe_pre_norm, *mlp_post_norm1, *moe_post_norm; /* [H] Gemma 4 MoE branch norms */
    weight ple_gate, ple_proj;      /* [P, H], [H, P] per-layer input gate and projection */
    weight wqkv, wgu;               /* device backends: [qd + 2 kd, H] and [2I, H], the rows of wq|wk|wv
                                     * and gate|up as one product (model/upload.c), used for every
                                     * product; the parts are views of them. data NULL otherwise */
    float *ple_post_norm;           /* [H] */
    float layer_scalar;             /* 1 when the plan has none */
} layer_weights;

typedef struct {
    int vocab, hidden, n_layers, n_heads, n_kv, head_dim, inter, max_pos;
    float eps;
    int tie;
    int norm_plus_one;       /* RMSNorm scales by (1 + w) */
    act_kind act;
    float embed_scale;       /* 1 for most families */
    float final_softcap;     /* 0: none */
    int ple_dim, ple_vocab;  /* Gemma 4 per-layer inputs: width P per layer (0: none), table rows */
    float ple_embed_scale;   /* sqrt(P) in the weight dtype */
    int bos, eos;            /* -1 when unknown */
} model_config;

typedef struct model model;

/* A family: one of these in its description file, named on one line of the registry
 * (model/registry.c). */
typedef struct {
    const char *name;                 /* "llama" */
    const char *title;                /* the name its publisher uses: "Llama", "Gemma 3" */
    const char *const *model_types;   /* config.json model_type values it reads, NULL-terminated */
    /* Reads family-specific keys and fills cfg, the plan and rope specs. */
    int (*describe)(model *m, const json_t *config, const char *where);
    /* Binds layer l's MoE weights (lw[l].moe and its norms) by the family's names;
     * NULL for families without experts. */
    int (*bind_moe)(model *m, int l);
    /* Binds what layer l stores under the family's own names or shapes (Phi-3's fused
     * qkv_proj, Qwen 2's q/k/v-only biases, OLMo 2's whole-projection q/k norms)
     * before the shared binder runs, which skips whatever is bound already; NULL
     * for families that use the shared names only. */
    int (*bind_own)(model *m, int l);
} family_desc;

#define MODEL_MAX_ROPES 4

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
    int rope_long;             /* longrope: a sequence whose furthest position + 1 in a forward
                                * exceeds rope_long_after uses table rope + rope_long instead
                                * of rope (transformers' per-forward choice); 0: none */
    int rope_long_after;
    weight embed, lm_head;     /* [V, H] each (lm_head aliases embed when tied) */
    float *final_norm;         /* [H] */
    weight ple_embed;          /* [ple_vocab, L*P] per-layer input table */
    weight ple_model_proj;     /* [L*P, H] */
    float *ple_proj_norm;      /* [P] */
    char prefix[48];           /* weight name prefix of the decoder ("model.", "language_model.model.") */
    char head_name[48];        /* module of the untied head ("lm_head") */
    quant_cfg quant;
    backend *be;
    int on_device;             /* vectors and weights were handed to a device backend */
    int fast;                  /* the device's fast precision (model/precision.c); 0 on the CPU */
    int kv_dtype;              /* kv_dtype of every KV cache of this model */
    uint64_t fingerprint;      /* identity for cache files (taken before any upload) */
    size_t weight_bytes;       /* bytes one token's forward reads */
    int64_t n_params;
    /* tensor parallelism (model/tp.c, docs/tensor-parallel.md); all 0 when off */
    int tp;                    /* ranks in the group (--tp; over all hosts), 0: off */
    int tp_rank;               /* this model's global rank */
    int tp_local;              /* rank 0 of a process: its ranks' count (its models ranks[]) */
    struct tp_state *tps;      /* the process's first rank: the other ranks' models and threads */
    int vocab_lo, vocab_w;     /* rows [vocab_lo, vocab_lo + vocab rows) of embed and lm_head are this
                                * rank's; vocab_w: the columns of every rank's logits share */
    int ck_borrowed;           /* ranks past the first share the first's checkpoint mapping */
    void **tp_owned;           /* dense copies of column slices (CPU ranks) */
    int n_tp_owned;
};



/* The precision settings (CELER_PRECISION, CELER_KV_DTYPE) checked and applied to
 * m->fast and m->kv_dtype for m's backend; -1 with a message naming the setting.
 * model_precision_fast: whether a backend (on_device) runs the fast path. */
int model_precision_init(model *m);
int model_precision_fast(int on_device);

/* Opens a checkpoint directory and binds it; NULL with a message naming the file. */
model *model_open(const char *dir, int n_threads, const char *device);
void model_free(model *m);
/* Hands every weight and vector to a device backend (no-op on the CPU); model_release
 * frees the vectors and device copies (model/upload.c). */
int model_upload(model *m);
void model_release(model *m);

/* Shared parsing every family uses: the common keys of config.json (both spellings). */
int model_parse_common(model *m, const json_t *config, const char *where);
/* The sliding/full type of every layer: `layer_types` when present, else
 * `sliding_window_pattern` (integer p: layer i is full iff (i+1) % p == 0; string such
 * as "LLLG": layer i is sliding iff pattern[i % len] == 'L'), else def_pattern (0: all
 * full). sliding [n_layers] gets 1 for sliding layers. */
int model_layer_types(const json_t *config, int n_layers, int def_pattern, int *sliding, const char *where);
/* The rope parameters object that applies to a layer type ("sliding_attention" or
 * "full_attention") when rope_parameters is keyed by layer type; the flat object
 * otherwise; NULL when absent. */
const json_t *model_rope_params(const json_t *config, const char *layer_type);
/* Rounds a scalar to the checkpoint's dtype ("dtype" / "torch_dtype": bfloat16,
 * float16 or float32), as transformers does for Gemma's embedding scales. */
int model_round_to_dtype(const json_t *config, double v, float *out, const char *where);
/* Fails naming key when config has it set to something other than null/false/the
 * listed allowed string values (keys this engine does not implement). */
int model_reject_key(const json_t *config, const char *key, const char *const *allowed, const char *where);
/* Reads a RoPE spec from a rope_parameters-style object (or legacy keys of config). */
int rope_spec_parse(rope_spec *r, const json_t *params, const json_t *config, const char *where);
/* Fills inv_freq and attn_factor for head_dim from the spec. */
int rope_table_init(rope_table *t, const rope_spec *r, int head_dim);
void rope_table_free(rope_table *t);

/* Activations for up to max_T tokens at once, allocated once per session. */
typedef struct model_scratch_s {
    int max_T;
    float *x;      /* [max_T, H] residual stream */
    float *xn;     /* [max_T, H] normed */
    float *q;      /* [max_T, n_heads * hd] */
    float *k, *v;  /* [max_T, n_kv * hd] */
    float *att;    /* [max_T, n_heads * hd] */
    float *gate, *up; /* [max_T, I] */
    float *ffn;    /* [max_T, H] feed-forward output (MoE, second branch) */
    float *xn2;    /* [max_T, H] second normed copy (MoE expert input) */
    float *router; /* [max_T, E] router logits */
    int32_t *sel;  /* [max_T, top_k] selected experts */
    float *selw;   /* [max_T, top_k] their weights */
    float *moe_work; /* [max_T * (2H + 3I_moe)] expert gather/compute space */
    float *ple;    /* [max_T, L, P] per-layer inputs */
    float *ple_tok; /* [max_T, L, P] per-layer token embeddings */
    float *pg;     /* [max_T, P] per-layer gate */
    float *qkv;    /* [qd + 2 kd] one row of the fused q|k|v product */
    float *gu;     /* [2I] one row of the fused gate|up product */
    float *logits; /* [max_T, V] */
    int32_t *pos;  /* [max_T] positions of the rows, in backend memory */
    int32_t *tok;  /* [max_T] token ids of the rows, in backend memory */
    const float *owed, *owed_w; /* forward.c: a block output [T, H] not yet added to x (and its post-norm) */
    int32_t *pos_host; /* [max_T] the same on the host (cache bookkeeping) */
    backend *be;   /* allocated the buffers above (all but pos_host) */
    float *plogits; /* tensor parallelism: [max_T, vocab_w] this rank's share of the logits */
    struct model_scratch_s **peer; /* the first rank's: [n_peer] every local rank's scratch ([0] itself) */
    int n_peer;
} model_scratch;

/* The buffers live in the model's backend memory (device memory on a GPU). */
model_scratch *model_scratch_new(const model *m, int max_T);
void model_scratch_free(model_scratch *s);
/* Copies n_rows rows of logits [n_rows, vocab] from row `row` of s->logits to the host. */
void model_logits_read(const model_scratch *s, int row, int n_rows, int vocab, float *dst);

/* Runs T (<= scratch max_T) tokens at positions past..past+T-1 through the model,
 * appending to caches [n_layers]. Writes logits of all T rows (all != 0) or of the
 * last only into s->logits. tok NULL: the ids are in s->tok already (a device
 * sampler wrote them). -1 (caches unchanged past what was appended) on error. */
int model_forward(model *m, kv_cache **caches, model_scratch *s, const int32_t *tok, int T, int past, int all);

/* One sequence of a batched forward: T consecutive rows of the batch's tokens. */
typedef struct {
    kv_cache **caches;   /* [n_layers] its caches */
    int T;               /* its rows in this batch */
    int past;            /* tokens already in its caches (its first row's position) */
    int want_logits;     /* its last row's logits are wanted (all == 0) */
} fwd_seq;

/* Runs several sequences (their tokens concatenated in tok, sum of T <= max_T) as one
 * forward: every row-wise stage and matrix product covers all rows at once; cache
 * writes and attention run per sequence on its own caches. Logits: every row (all)
 * or the last row of each sequence that wants them, in sequence order (a prompt chunk
 * that is not the prompt's last skips the output layer). On error every sequence's
 * caches are taken back to their `past`. model_forward is the one-sequence case. */
int model_forward_batch(model *m, const fwd_seq *seqs, int n_seqs, model_scratch *s, const int32_t *tok, int all);
/* 1 when seqs is a decode step of several sequences (n_seqs > 1, one token each):
 * model_forward_batch then attends over all of them in one op and computes the logits
 * of every row, row i for sequence i (all or not); on a device backend the rows are
 * padded to a bucket (1, 2, 4, ... 256) so every step of one bucket records the same
 * ops. */
int model_is_decode_batch(const fwd_seq *seqs, int n_seqs);

/* Weight binding helpers for family code and model.c: "<prefix><name>" tensors. */
int model_bind(model *m, weight *w, const char *module, int64_t rows, int64_t cols);
int model_vec(model *m, float **out, const char *name, int64_t n);

/* What a Llama-like description (model/llama.c) varies: the defaults of the keys a
 * config may leave out, and which sliding-window rule the family's config follows. */
typedef enum {
    WINDOW_NONE,     /* every layer full */
    WINDOW_QWEN,     /* use_sliding_window + sliding_window from max_window_layers on, or layer_types */
    WINDOW_ALL,      /* sliding_window (null: none) on every layer (Mistral, Mixtral, Phi-3) */
} window_rule;

typedef struct {
    int tie;               /* tie_word_embeddings default */
    int qk_norm;           /* QK_NORM_* */
    int bias_default;      /* attention_bias default (biases on q, k, v and o) */
    window_rule window;
    norm_place norm;
} llama_shape;

/* Fills cfg, one RoPE table (two for longrope: short and long, see rope_long) and a
 * Llama-like plan (SiLU MLP of intermediate_size, 1/sqrt(head_dim) scale) that a
 * family then adjusts. */
int model_describe_llama(model *m, const json_t *config, const char *where, const llama_shape *s);
/* "<prefix>layers.<l>.<name>" into buf. */
const char *model_layer_name(const model *m, int l, const char *name, char *buf, size_t n);
/* Tensor parallelism (model/tp.c). model_tp_open turns m (bound whole) into the
 * process's first rank of CELER_TP ranks: the other ranks' models, every rank's plan
 * and bindings cut to its shard, backends joined in a group, a thread per further
 * rank. -1 with a message naming --tp. */
int model_tp_open(model *m, int tp, int n_threads, const char *device);
/* Describes and binds m->ck whole (model_open's first half; model/tp.c loads each
 * rank with it). */
int model_load(model *m);
/* The widest row any product of m reads. */
int64_t model_max_cols(const model *m);
void model_tp_close(model *m);
/* The KV caches a session of m holds: n_layers per local rank, rank-major. */
int model_n_caches(const model *m);
/* The model (rank) and layer that cache i of model_n_caches belongs to. */
const model *model_cache_owner(const model *m, int i, int *layer);
/* One rank's forward (model_forward_batch on a tensor-parallel model runs every
 * local rank's at once, each on its thread, through this). */
int model_forward_rank(model *m, const fwd_seq *seqs, int n_seqs, model_scratch *s, const int32_t *tok, int all);
/* forward.c's hooks into tp.c: the forward of every local rank at once, and a
 * scratch per local rank (one() makes each). */
int model_tp_forward(model *m, const fwd_seq *seqs, int n_seqs, model_scratch *s, const int32_t *tok, int all);
model_scratch *model_tp_scratch(const model *m, int max_T, model_scratch *(*one)(const model *, int));
#endif
