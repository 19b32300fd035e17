/* model/forward.c: the shared transformer forward pass. It executes any family's
 * layer plan through the backend op table; it never looks at the family. */
#include <math.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/mem.h"
#include "model/model.h"

model_scratch *model_scratch_new(const model *m, int max_T) {
    const model_config *c = &m->cfg;
    long qd = 0, kd = 0, I = 0;
    for (int l = 0; l < c->n_layers; l++) {
        const layer_plan *p = &m->plan[l];
        if ((long)p->n_heads * p->head_dim > qd) qd = (long)p->n_heads * p->head_dim;
        if ((long)p->n_kv * p->head_dim > kd) kd = (long)p->n_kv * p->head_dim;
        if (p->inter > I) I = p->inter;
    }
    model_scratch *s = mem_calloc(1, sizeof *s, "scratch");
    if (!s) return NULL;
    s->max_T = max_T;
    size_t T = (size_t)max_T, f = sizeof(float);
    if (!(s->x = mem_aligned(T * (size_t)c->hidden * f, "activations")) ||
        !(s->xn = mem_aligned(T * (size_t)c->hidden * f, "activations")) ||
        !(s->q = mem_aligned(T * (size_t)qd * f, "activations")) ||
        !(s->k = mem_aligned(T * (size_t)kd * f, "activations")) ||
        !(s->v = mem_aligned(T * (size_t)kd * f, "activations")) ||
        !(s->att = mem_aligned(T * (size_t)qd * f, "activations")) ||
        !(s->gate = mem_aligned(T * (size_t)I * f, "activations")) ||
        !(s->up = mem_aligned(T * (size_t)I * f, "activations")) ||
        !(s->logits = mem_aligned(T * (size_t)c->vocab * f, "logits")) ||
        !(s->pos = mem_aligned(T * sizeof(int32_t), "positions"))) {
        model_scratch_free(s);
        return NULL;
    }
    return s;
}

void model_scratch_free(model_scratch *s) {
    if (!s) return;
    free(s->x); free(s->xn); free(s->q); free(s->k); free(s->v); free(s->att);
    free(s->gate); free(s->up); free(s->logits); free(s->pos);
    free(s);
}

/* y [T, n] += bias [n] for every row */
static void add_bias(backend *b, float *y, const float *bias, int T, long n) {
    if (!bias) return;
    for (int t = 0; t < T; t++) b->ops->add(b, y + (long)t * n, bias, n);
}

int model_forward(model *m, kv_cache **caches, model_scratch *s, const int32_t *tok, int T, int past, int all) {
    const model_config *c = &m->cfg;
    backend *b = m->be;
    const backend_ops *op = b->ops;
    const long H = c->hidden;
    if (T <= 0 || T > s->max_T) return err_set("forward: %d tokens (this session takes 1..%d at once)", T, s->max_T);
    for (int t = 0; t < T; t++) {
        if (tok[t] < 0 || tok[t] >= c->vocab)
            return err_set("token id %d at input position %d is out of range (vocab size %d)", tok[t], past + t, c->vocab);
        s->pos[t] = past + t;
    }

    /* x = embed(tok) * embed_scale */
    op->embed(b, &m->embed, tok, T, c->embed_scale, s->x);

    for (int l = 0; l < c->n_layers; l++) {
        const layer_plan *p = &m->plan[l];
        const layer_weights *w = &m->lw[l];
        const long qd = (long)p->n_heads * p->head_dim, kd = (long)p->n_kv * p->head_dim;

        /* attention block: x += o(attn(rope(norm_q(q)), rope(norm_k(k)), v)) of norm(x) */
        op->rmsnorm(b, s->x, w->attn_norm, s->xn, T, (int)H, c->eps, c->norm_plus_one);
        op->matmul(b, &w->wq, s->xn, s->q, T);
        op->matmul(b, &w->wk, s->xn, s->k, T);
        op->matmul(b, &w->wv, s->xn, s->v, T);
        add_bias(b, s->q, w->bq, T, qd);
        add_bias(b, s->k, w->bk, T, kd);
        add_bias(b, s->v, w->bv, T, kd);
        if (p->qk_norm) {
            op->rmsnorm(b, s->q, w->q_norm, s->q, T * p->n_heads, p->head_dim, c->eps, c->norm_plus_one);
            op->rmsnorm(b, s->k, w->k_norm, s->k, T * p->n_kv, p->head_dim, c->eps, c->norm_plus_one);
        }
        if (p->rope >= 0) {
            op->rope(b, s->q, T, p->n_heads, p->head_dim, s->pos, &m->ropes[p->rope]);
            op->rope(b, s->k, T, p->n_kv, p->head_dim, s->pos, &m->ropes[p->rope]);
        }
        if (kv_append(caches[l], s->k, s->v, s->pos, T) != 0) {
            for (int i = 0; i < l; i++) kv_truncate(caches[i], past);
            return err_prefix("layer %d", l);
        }
        attn_kv kv;
        kv_view(caches[l], &kv);
        attn_params ap = {p->n_heads, p->n_kv, p->head_dim, p->attn_scale, p->window, 0.0f, NULL};
        op->attention(b, s->q, s->pos, T, &kv, &ap, s->att);
        op->matmul(b, &w->wo, s->att, s->xn, T);
        add_bias(b, s->xn, w->bo, T, H);
        op->add(b, s->x, s->xn, T * H);

        /* MLP block: x += down(act(gate(norm(x))) * up(norm(x))) */
        op->rmsnorm(b, s->x, w->mlp_norm, s->xn, T, (int)H, c->eps, c->norm_plus_one);
        op->matmul(b, &w->gate, s->xn, s->gate, T);
        op->matmul(b, &w->up, s->xn, s->up, T);
        op->glu(b, s->gate, s->up, (long)T * p->inter, (int)c->act);
        op->matmul(b, &w->down, s->gate, s->xn, T);
        op->add(b, s->x, s->xn, T * H);
    }

    /* logits = lm_head(norm(x)) for every row, or only the last */
    const float *xs = all ? s->x : s->x + (long)(T - 1) * H;
    int R = all ? T : 1;
    op->rmsnorm(b, xs, m->final_norm, s->xn, R, (int)H, c->eps, c->norm_plus_one);
    op->matmul(b, &m->lm_head, s->xn, s->logits, R);
    if (c->final_softcap > 0) {
        float cap = c->final_softcap;
        for (long i = 0; i < (long)R * c->vocab; i++) s->logits[i] = cap * tanhf(s->logits[i] / cap);
    }
    return 0;
}
