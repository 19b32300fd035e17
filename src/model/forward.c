/* model/forward.c: the shared transformer forward pass. It executes any family's
 * layer plan through the backend op table, one helper per stage (embedding,
 * per-layer inputs, attention, feed-forward, per-layer input gate, head); the
 * stages read only plan switches, never the family. All arithmetic is backend ops. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "base/settings.h"
#include "model/model.h"

/* The scratch of one rank (or of a model without tensor parallelism). */
static model_scratch *scratch_one(const model *m, int max_T) {
    const model_config *c = &m->cfg;
    long qd = 0, kd = 0, I = 0, E = 0, K = 0, Im = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const layer_plan *p = &m->plan[l];
        if ((long)p->n_heads * p->head_dim > qd) qd = (long)p->n_heads * p->head_dim;
        if ((long)p->n_kv * p->head_dim > kd) kd = (long)p->n_kv * p->head_dim;
        if (p->inter > I) I = p->inter;
        if (p->moe.n_experts > E) E = p->moe.n_experts;
        if (p->moe.top_k > K) K = p->moe.top_k;
        if (p->moe.inter > Im) Im = p->moe.inter;
    }
    /* fused q|k|v and gate|up (device backends, model/upload.c) take [T, qd + 2 kd]
     * and [T, 2I]; the separate up product's buffer is needed only by a layer
     * without its fused weight */
    int any_qkv = 0, any_gu = 0, sep_up = 0;
    for (int l = 0; m->lw && l < c->n_layers; l++) {
        const layer_weights *w = &m->lw[l];
        any_qkv |= w->wqkv.data != NULL;
        any_gu |= w->wgu.data != NULL;
        sep_up |= m->plan[l].inter > 0 && !w->wgu.data;
    }
    long LP = (long)c->n_layers * c->ple_dim;
    model_scratch *s = mem_calloc(1, sizeof *s, "scratch");
    if (!s) return NULL;
    s->max_T = max_T;
    s->be = m->be;
    size_t T = (size_t)max_T, f = sizeof(float), H = (size_t)c->hidden;
    if (!(s->pos_host = mem_calloc(T, sizeof(int32_t), "positions"))) {
        free(s);
        return NULL;
    }
    /* buffers a plan does not use stay NULL (a 0-byte request is skipped) */
#define ALLOC(ptr, n, what) ((n) == 0 || ((ptr) = m->be->ops->alloc(m->be, (n))) != NULL)
    /* the logits: every row is written before it is read, and most forwards write
     * one row per sequence, so where the backend can, only written rows take memory */
#define ALLOC_LAZY(ptr, n, what) \
    ((n) == 0 || ((ptr) = (m->be->ops->alloc_lazy ? m->be->ops->alloc_lazy : m->be->ops->alloc)(m->be, (n))) != NULL)
    if (!ALLOC(s->x, T * H * f, "activations") || !ALLOC(s->xn, T * H * f, "activations") ||
        !ALLOC(s->q, T * (size_t)qd * f, "activations") || !ALLOC(s->k, T * (size_t)kd * f, "activations") ||
        !ALLOC(s->v, T * (size_t)kd * f, "activations") || !ALLOC(s->att, T * (size_t)qd * f, "activations") ||
        !ALLOC(s->gate, T * (size_t)I * f, "activations") || !ALLOC(s->up, sep_up ? T * (size_t)I * f : 0, "activations") ||
        !ALLOC(s->ffn, E ? T * H * f : 0, "activations") || !ALLOC(s->xn2, E ? T * H * f : 0, "activations") ||
        !ALLOC(s->router, T * (size_t)E * f, "router") || !ALLOC(s->sel, T * (size_t)K * sizeof(int32_t), "router") ||
        !ALLOC(s->selw, T * (size_t)K * f, "router") ||
        !ALLOC(s->moe_work, E ? (size_t)MOE_WORK(T, H, Im) * f : 0, "expert work") ||
        !ALLOC(s->ple, T * (size_t)LP * f, "per-layer inputs") || !ALLOC(s->ple_tok, T * (size_t)LP * f, "per-layer inputs") ||
        !ALLOC(s->pg, T * (size_t)c->ple_dim * f, "per-layer inputs") ||
        !ALLOC(s->qkv, any_qkv ? T * (size_t)(qd + 2 * kd) * f : 0, "activations") ||
        !ALLOC(s->gu, any_gu ? T * 2 * (size_t)I * f : 0, "activations") ||
        /* tensor parallelism: each rank's share of the logits, gathered into the
         * whole logits on the process's first rank only */
        !ALLOC_LAZY(s->logits, m->tp && !m->tps ? 0 : T * (size_t)c->vocab * f, "logits") ||
        !ALLOC(s->plogits, m->tp ? T * (size_t)m->vocab_w * f : 0, "logits") || !ALLOC(s->pos, T * sizeof(int32_t), "positions") ||
        !ALLOC(s->tok, T * sizeof(int32_t), "token ids")) {
        model_scratch_free(s);
        return NULL;
    }
#undef ALLOC
#undef ALLOC_LAZY
    return s;
}

model_scratch *model_scratch_new(const model *m, int max_T) {
    return m->tps ? model_tp_scratch(m, max_T, scratch_one) : scratch_one(m, max_T);
}

void model_scratch_free(model_scratch *s) {
    if (!s) return;
    if (s->peer) {
        for (int r = 1; r < s->n_peer; r++) model_scratch_free(s->peer[r]);
        free(s->peer);
    }
    void *bufs[] = {s->x, s->xn, s->q, s->k, s->v, s->att, s->gate, s->up, s->ffn, s->xn2, s->router, s->sel,
                    s->selw, s->moe_work, s->ple, s->ple_tok, s->pg, s->qkv, s->gu, s->logits, s->plogits, s->pos, s->tok};
    for (size_t i = 0; i < sizeof bufs / sizeof bufs[0]; i++) s->be->ops->release(s->be, bufs[i]);
    free(s->pos_host);
    free(s);
}

void model_logits_read(const model_scratch *s, int row, int n_rows, int vocab, float *dst) {
    s->be->ops->download(s->be, dst, s->logits + (size_t)row * (size_t)vocab, (size_t)n_rows * (size_t)vocab * sizeof(float));
}

/* y [T, n] += bias [n] for every row */
static void add_bias(backend *b, float *y, const float *bias, int T, long n) {
    if (!bias) return;
    for (int t = 0; t < T; t++) b->ops->add(b, y + (long)t * n, bias, n);
}

/* Residual adds are deferred: a block leaves its output (and post-norm weight) owed
 * to x, and the next norm of x takes it in the same kernel (add_rmsnorm), saving
 * two passes per block; anything else that reads x settles the debt first. */
static void owe(model_scratch *s, const float *f, const float *post_w) {
    s->owed = f;
    s->owed_w = post_w;
}

static void settle(model *m, model_scratch *s, int T) {
    if (!s->owed) return;
    m->be->ops->add_rmsnorm(m->be, s->x, s->owed, s->owed_w, NULL, NULL, T, m->cfg.hidden, m->cfg.eps, m->cfg.norm_plus_one);
    s->owed = NULL;
}

/* out [T, H] = norm(x) with weight w, after settling what x is owed */
static void norm_x(model *m, model_scratch *s, const float *w, float *out, int T) {
    const model_config *c = &m->cfg;
    if (s->owed) m->be->ops->add_rmsnorm(m->be, s->x, s->owed, s->owed_w, w, out, T, c->hidden, c->eps, c->norm_plus_one);
    else m->be->ops->rmsnorm(m->be, s->x, w, out, T, c->hidden, c->eps, c->norm_plus_one);
    s->owed = NULL;
}

/* Per-layer inputs (Gemma 4), from the scaled embedding x [T, H]:
 * ple [T, L, P] = (norm(proj(x) * H^-1/2) + embed_per_layer(tok) * sqrt(P)) * 2^-1/2 */
static void per_layer_inputs(model *m, model_scratch *s, int T) {
    const model_config *c = &m->cfg;
    backend *b = m->be;
    const backend_ops *op = b->ops;
    long LP = (long)c->n_layers * c->ple_dim;
    op->matmul(b, &m->ple_model_proj, s->x, s->ple, T);
    op->scale(b, s->ple, T * LP, 1.0f / sqrtf((float)c->hidden));
    op->rmsnorm(b, s->ple, m->ple_proj_norm, s->ple, T * c->n_layers, c->ple_dim, c->eps, c->norm_plus_one);
    op->embed(b, &m->ple_embed, s->tok, T, c->ple_embed_scale, s->ple_tok);
    op->add(b, s->ple, s->ple_tok, T * LP);
    op->scale(b, s->ple, T * LP, (float)M_SQRT1_2);
}

/* Attention block of layer l; x [T, H] += its output.
 *   h = x (post-norm plans) or norm(x); q = rope(q_norm(Wq h + bq));
 *   k = rope(k_norm(Wk h + bk)); v = v_norm(Wv h + bv, or the raw k when K equals V);
 *   (q/k norms per head or over the whole projection; a longrope model's long table
 *   for a sequence that reaches past the original length in this forward);
 *   o = Wo attn(q, cache) + bo; x += post_norm(o) (sandwich/post plans) or o.
 * A layer that shares another's cache computes only q and reads that cache. */
static int attention_block(model *m, const fwd_seq *seqs, int n_seqs, model_scratch *s, int l, int T, attn_kv *kvs) {
    const model_config *c = &m->cfg;
    const layer_plan *p = &m->plan[l];
    const layer_weights *w = &m->lw[l];
    backend *b = m->be;
    const backend_ops *op = b->ops;
    const long H = c->hidden, qd = (long)p->n_heads * p->head_dim, kd = (long)p->n_kv * p->head_dim;
    const rope_table *rope = p->rope >= 0 ? &m->ropes[p->rope] : NULL;

    const float *h = s->x;
    if (p->norm != NORM_POST) {
        norm_x(m, s, w->attn_norm, s->xn, T);
        h = s->xn;
    } else {
        settle(m, s, T);
    }
    /* with fused weights q|k|v is one product (one large product reads the weights
     * faster than three: a batch's 1024-row k and v products fill a fraction of the
     * GPU); one row is used where it lies, more are split into q, k and v */
    const int fused = w->wqkv.data != NULL;
    float *q = s->q, *k = s->k, *v = s->v;
    if (fused && T == 1) q = s->qkv, k = s->qkv + qd, v = s->qkv + qd + kd;
    op->matmul(b, fused ? &w->wqkv : &w->wq, h, fused ? s->qkv : q, T);
    if (fused && T > 1) op->split_cols(b, s->qkv, T, qd, kd, kd, q, k, v);
    add_bias(b, q, w->bq, T, qd);

    int src = l;
    if (p->kv_source >= 0) {
        src = p->kv_source;   /* its rows for these positions were appended by layer src already */
    } else {
        if (!fused) op->matmul(b, &w->wk, h, k, T);
        add_bias(b, k, w->bk, T, kd);
        if (p->k_eq_v) {
            op->copy(b, v, k, (size_t)T * (size_t)kd * sizeof(float)); /* V is k_proj's output before k_norm */
        } else {
            if (!fused) op->matmul(b, &w->wv, h, v, T);
            add_bias(b, v, w->bv, T, kd);
        }
        if (p->v_norm) op->rmsnorm(b, v, NULL, v, T * p->n_kv, p->head_dim, c->eps, 0);
    }
    /* q (and this layer's k): the per-head norm and RoPE in one pass; a norm over the
     * whole projection (OLMo 2) runs first, on its own */
    int head_norm = p->qk_norm == QK_NORM_HEAD;
    if (p->qk_norm == QK_NORM_WHOLE) {
        op->rmsnorm(b, q, w->q_norm, q, T, (int)qd, c->eps, c->norm_plus_one);
        if (src == l) op->rmsnorm(b, k, w->k_norm, k, T, (int)kd, c->eps, c->norm_plus_one);
    }
    if (rope && m->rope_long) {
        /* longrope: each sequence's table follows how far it reaches in this forward */
        for (int i = 0, r = 0; i < n_seqs; r += seqs[i++].T) {
            const rope_table *ri = seqs[i].past + seqs[i].T > m->rope_long_after ? rope + m->rope_long : rope;
            op->qk_norm_rope(b, q + r * qd, src == l ? k + r * kd : NULL, seqs[i].T, p->n_heads, p->n_kv, p->head_dim,
                             head_norm, w->q_norm, w->k_norm, c->eps, c->norm_plus_one, s->pos + r, ri);
        }
    } else if (head_norm || rope) {
        op->qk_norm_rope(b, q, src == l ? k : NULL, T, p->n_heads, p->n_kv, p->head_dim, head_norm, w->q_norm, w->k_norm,
                         c->eps, c->norm_plus_one, s->pos, rope);
    }
    attn_params ap = {p->n_heads, p->n_kv, p->head_dim, p->attn_scale, p->window, p->attn_softcap, w->sinks};
    if (kvs) {
        /* a decode step (one row per sequence): every row's key into its cache, then one
         * attention over all rows, each over its own cache (rows past n_seqs: padding) */
        int max_keys = 0;
        for (int i = 0; i < n_seqs; i++) {
            if (src == l && kv_append(seqs[i].caches[l], k + i * kd, v + i * kd, s->pos_host + i, 1) != 0) return -1;
            kv_view(seqs[i].caches[src], &kvs[i]);
            if (kvs[i].n > max_keys) max_keys = kvs[i].n;
        }
        op->attention_batch(b, q, s->pos, T, kvs, max_keys, kvs[0].dtype, &ap, s->att);
        op->matmul(b, &w->wo, s->att, s->xn, T);
        if (p->tp_attn) op->all_reduce(b, s->xn, (long)T * H); /* row-parallel o_proj: partial sums */
        add_bias(b, s->xn, w->bo, T, H);
        owe(s, s->xn, w->attn_post_norm);
        return 0;
    }
    /* each sequence writes its rows into its own cache and attends over it */
    for (int i = 0, r = 0; i < n_seqs; r += seqs[i++].T) {
        const int Ti = seqs[i].T;
        if (src == l && kv_append(seqs[i].caches[l], k + r * kd, v + r * kd, s->pos_host + r, Ti) != 0) return -1;
        attn_kv kv;
        kv_view(seqs[i].caches[src], &kv);
        op->attention(b, q + r * qd, s->pos + r, Ti, &kv, &ap, s->att + r * qd);
    }
    op->matmul(b, &w->wo, s->att, s->xn, T);
    if (p->tp_attn) op->all_reduce(b, s->xn, (long)T * H); /* row-parallel o_proj: partial sums */
    add_bias(b, s->xn, w->bo, T, H);
    owe(s, s->xn, w->attn_post_norm);
    return 0;
}

/* Router of layer l on rin [T, H]: logits = W rin (+ bias) -> s->sel, s->selw [T, k]. */
static void route(model *m, model_scratch *s, int l, const float *rin, int T) {
    const moe_plan *mp = &m->plan[l].moe;
    const moe_weights *e = &m->lw[l].moe;
    backend *b = m->be;
    b->ops->matmul(b, &e->router, rin, s->router, T);
    add_bias(b, s->router, e->router_bias, T, mp->n_experts);
    b->ops->moe_route(b, s->router, T, mp->n_experts, mp->top_k, mp->route, e->expert_scale, s->sel, s->selw);
}

/* The experts of layer l that route() selected: out [T, H] from xin [T, H]. */
static void run_experts(model *m, model_scratch *s, int l, const float *xin, float *out, int T) {
    const moe_plan *mp = &m->plan[l].moe;
    const moe_weights *e = &m->lw[l].moe;
    moe_experts me = {
        .n_experts = mp->n_experts, .top_k = mp->top_k, .inter = mp->inter, .hidden = m->cfg.hidden,
        .layout = mp->gate_up_layout, .in_major = mp->in_major, .act = (int)mp->act, .alpha = mp->alpha, .limit = mp->limit,
        .gate_up = e->gate_up, .gate = e->gate, .up = e->up, .down = e->down,
        .gate_up_bias = e->gate_up_bias, .gate_bias = e->gate_bias, .up_bias = e->up_bias, .down_bias = e->down_bias,
    };
    m->be->ops->moe(m->be, &me, xin, s->sel, s->selw, T, out, s->moe_work);
}

/* Feed-forward block of layer l; x [T, H] += its output.
 *   h = x (post-norm plans) or norm(x); f = down(act(gate h) * up h) (dense MLP);
 *   MoE alone (gpt-oss): f = experts(h) routed on h;
 *   MoE beside the MLP (Gemma 4): f = post1(f) + post2(experts(pre2(x))) routed on
 *   router_scale * norm(x) * H^-1/2;
 *   x += post_norm(f) (sandwich/post plans) or f. */
static void ffn_block(model *m, model_scratch *s, int l, int T) {
    const model_config *c = &m->cfg;
    const layer_plan *p = &m->plan[l];
    const layer_weights *w = &m->lw[l];
    backend *b = m->be;
    const backend_ops *op = b->ops;
    const long H = c->hidden;

    const float *h = s->x;
    if (p->norm != NORM_POST) {
        norm_x(m, s, w->mlp_norm, s->xn, T);
        h = s->xn;
    } else {
        settle(m, s, T);
    }
    float *f = s->xn;
    if (p->inter > 0) {
        const long I = p->inter;
        if (w->wgu.data) { /* fused weights: gate|up as one product, rows [T, 2I] */
            op->matmul(b, &w->wgu, h, s->gu, T);
            op->glu(b, s->gu, 2 * I, s->gu + I, 2 * I, s->gate, T, I, (int)c->act);
        } else {
            op->matmul(b, &w->gate, h, s->gate, T);
            op->matmul(b, &w->up, h, s->up, T);
            op->glu(b, s->gate, I, s->up, I, s->gate, T, I, (int)c->act);
        }
        op->matmul(b, &w->down, s->gate, s->xn, T);
        if (p->tp_mlp) op->all_reduce(b, s->xn, (long)T * H); /* row-parallel down_proj: partial sums */
    }
    if (p->moe.n_experts > 0) {
        if (p->moe.beside_mlp) {
            op->rmsnorm(b, s->x, w->moe.router_scale, s->xn2, T, (int)H, c->eps, 0);
            op->scale(b, s->xn2, T * H, 1.0f / sqrtf((float)H));
            route(m, s, l, s->xn2, T);
            op->rmsnorm(b, s->x, w->moe_pre_norm, s->xn2, T, (int)H, c->eps, c->norm_plus_one);
            run_experts(m, s, l, s->xn2, s->ffn, T);
            op->rmsnorm(b, s->xn, w->mlp_post_norm1, s->xn, T, (int)H, c->eps, c->norm_plus_one);
            op->rmsnorm(b, s->ffn, w->moe_post_norm, s->ffn, T, (int)H, c->eps, c->norm_plus_one);
            op->add(b, s->xn, s->ffn, T * H);
        } else {
            route(m, s, l, h, T);
            run_experts(m, s, l, h, s->ffn, T);
            f = s->ffn;
        }
    }
    owe(s, f, w->mlp_post_norm);
}

/* Per-layer input step of layer l (Gemma 4), after the feed-forward residual:
 * x += post_norm(proj(act(gate x) * ple[:, l])) */
static void per_layer_input_block(model *m, model_scratch *s, int l, int T) {
    const model_config *c = &m->cfg;
    const layer_weights *w = &m->lw[l];
    backend *b = m->be;
    const backend_ops *op = b->ops;
    const long P = c->ple_dim, L = c->n_layers;
    settle(m, s, T);
    op->matmul(b, &w->ple_gate, s->x, s->pg, T);
    op->glu(b, s->pg, P, s->ple + l * P, L * P, s->pg, T, P, (int)c->act);
    op->matmul(b, &w->ple_proj, s->pg, s->xn, T);
    owe(s, s->xn, w->ple_post_norm);
}

static int has_experts(const model *m) {
    for (int l = 0; l < m->cfg.n_layers; l++)
        if (m->plan[l].moe.n_experts > 0) return 1;
    return 0;
}

/* The batch-size bucket of a decode step of n sequences (powers of two up to 256): a
 * device backend runs the step with rows padded to it, so the steps of one bucket
 * launch the same kernels (one captured graph serves them all). */
static int decode_bucket(int n) {
    int b = 1;
    while (b < n && b < 256) b *= 2;
    return b < n ? n : b;
}

int model_is_decode_batch(const fwd_seq *seqs, int n_seqs) {
    if (n_seqs < 2 || !setting_flag(SET_CELER_DECODE_BATCH)) return 0;
    for (int i = 0; i < n_seqs; i++)
        if (seqs[i].T != 1) return 0;
    return 1;
}

int model_forward_batch(model *m, const fwd_seq *seqs, int n_seqs, model_scratch *s, const int32_t *tok, int all) {
    return m->tps ? model_tp_forward(m, seqs, n_seqs, s, tok, all) : model_forward_rank(m, seqs, n_seqs, s, tok, all);
}

int model_forward_rank(model *m, const fwd_seq *seqs, int n_seqs, model_scratch *s, const int32_t *tok, int all) {
    const model_config *c = &m->cfg;
    backend *b = m->be;
    const backend_ops *op = b->ops;
    const long H = c->hidden;
    int T = 0;
    for (int i = 0; i < n_seqs; i++) {
        if (seqs[i].T <= 0) return err_set("forward: sequence %d has no tokens", i);
        T += seqs[i].T;
    }
    if (n_seqs <= 0 || T > s->max_T) return err_set("forward: %d tokens (this session takes 1..%d at once)", T, s->max_T);
    /* a decode step of several sequences: one attention op over all of them, rows
     * padded to the step's bucket on a backend that records steps (not with experts,
     * whose routing runs op by op anyway) */
    const int decode = model_is_decode_batch(seqs, n_seqs);
    const int n_real = T;
    if (decode && op->step_begin && !has_experts(m) && decode_bucket(T) <= s->max_T) T = decode_bucket(T);
    attn_kv *kvs = decode ? mem_calloc((size_t)T, sizeof *kvs, "attention views") : NULL;
    if (decode && !kvs) return -1;
    for (int i = 0, r = 0; i < n_seqs; i++)
        for (int t = 0; t < seqs[i].T; t++, r++) {
            const int at = seqs[i].past + t;
            if (tok && (tok[r] < 0 || tok[r] >= c->vocab))
                return err_set("token id %d at input position %d is out of range (vocab size %d)", tok[r], at, c->vocab);
            if (tok && c->ple_dim > 0 && tok[r] >= c->ple_vocab)
                return err_set("token id %d at input position %d is out of the per-layer table (%d rows)", tok[r], at, c->ple_vocab);
            s->pos_host[r] = at;
        }
    for (int r = n_real; r < T; r++) s->pos_host[r] = 0; /* padding rows */
    s->owed = NULL;
    /* A few tokens at once, or a decode step of many sequences, may run as one
     * recorded graph; expert routing reads its choices on the host, so plans with
     * experts run op by op. */
    const int graph = op->step_begin && !has_experts(m) && (T <= 8 || decode) && op->step_begin(b, T);
    op->upload(b, s->pos, s->pos_host, (size_t)T * sizeof(int32_t));
    if (tok) { /* else a device sampler wrote s->tok */
        static const int32_t zeros[256];
        op->upload(b, s->tok, tok, (size_t)n_real * sizeof(int32_t));
        for (int r = n_real; r < T; r += 256) /* padding rows read token 0 */
            op->upload(b, s->tok + r, zeros, (size_t)(T - r < 256 ? T - r : 256) * sizeof(int32_t));
    }

    /* x = embed(tok) * embed_scale; per-layer inputs read this scaled embedding */
    if (m->tp) { /* vocabulary-split: each rank's rows, the others' zeros, summed */
        op->embed_range(b, &m->embed, s->tok, T, c->embed_scale, s->x, m->vocab_lo);
        op->all_reduce(b, s->x, (long)T * H);
    } else {
        op->embed(b, &m->embed, s->tok, T, c->embed_scale, s->x);
    }
    if (c->ple_dim > 0) per_layer_inputs(m, s, T);

    for (int l = 0; l < c->n_layers; l++) {
        const layer_plan *p = &m->plan[l];
        if (attention_block(m, seqs, n_seqs, s, l, T, kvs) != 0) {
            if (graph) op->step_end(b);
            free(kvs);
            /* Callers kv_prepare every cache first, so an append cannot fail for lack of
             * memory; this path is for errors that leave rows in order. A rotating
             * cache that dropped rows to make room cannot be truncated back (kv_truncate
             * then refuses), which is why prepare runs before the forward. */
            for (int i = 0; i < n_seqs; i++)
                for (int j = 0; j <= l; j++) kv_truncate(seqs[i].caches[j], seqs[i].past);
            return err_prefix("layer %d", l);
        }
        ffn_block(m, s, l, T);
        if (p->per_layer_input) per_layer_input_block(m, s, l, T);
        if (p->layer_scalar) {
            settle(m, s, T);
            op->scale(b, s->x, T * H, m->lw[l].layer_scalar);
        }
    }

    free(kvs);
    /* logits = softcap(lm_head(norm(x))) for every row, or the last of each sequence
     * (a decode batch: every row, row i for sequence i) */
    int R = T;
    if (all || decode || (n_seqs == 1 && T == 1 && seqs[0].want_logits)) {
        norm_x(m, s, m->final_norm, s->xn, T);
    } else {
        settle(m, s, T);
        R = 0;
        for (int i = 0, r = 0; i < n_seqs; i++) {
            r += seqs[i].T;
            if (seqs[i].want_logits)
                op->rmsnorm(b, s->x + (long)(r - 1) * H, m->final_norm, s->xn + (long)R++ * H, 1, (int)H, c->eps,
                            c->norm_plus_one);
        }
    }
    if (R > 0 && m->tp) {
        /* this rank's vocabulary rows, then every rank's share into the first's logits */
        op->matmul(b, &m->lm_head, s->xn, s->plogits, R);
        if (c->final_softcap > 0) op->softcap(b, s->plogits, (long)R * m->lm_head.rows, c->final_softcap);
        op->gather_cols(b, s->logits, s->plogits, R, m->vocab_w, c->vocab);
    } else if (R > 0) {
        op->matmul(b, &m->lm_head, s->xn, s->logits, R);
        if (c->final_softcap > 0) op->softcap(b, s->logits, (long)R * c->vocab, c->final_softcap);
    }
    if (graph) op->step_end(b);
    if (op->status(b) != 0) {
        /* the rows were written, but from a failed computation */
        for (int i = 0; i < n_seqs; i++)
            for (int j = 0; j < c->n_layers; j++) kv_truncate(seqs[i].caches[j], seqs[i].past);
        return err_prefix("%s backend", op->name);
    }
    return 0;
}

int model_forward(model *m, kv_cache **caches, model_scratch *s, const int32_t *tok, int T, int past, int all) {
    const fwd_seq one = {caches, T, past, 1};
    return model_forward_batch(m, &one, 1, s, tok, all);
}
