/* model/upload.c: the lists of every weight and every float vector a bound model
 * holds, and what walks them: handing the weights and vectors to a device backend
 * once after binding (model_upload), and giving them back (model_release). One list,
 * so a new kind of weight is added in one place. */
#include <stdlib.h>
#include <string.h>

#include "base/settings.h"
#include "base/err.h"
#include "model/model.h"

typedef int (*weight_fn)(model *m, weight *w, int in_major, void *ctx);

typedef int (*vec_fn)(model *m, float **v, int64_t n, void *ctx);

/* Every bound weight once (the tied head is the embedding, visited once). */
static int each_weight(model *m, weight_fn fn, void *ctx) {
    const model_config *c = &m->cfg;
#define W(w, im) do { if ((w)->data && fn(m, (w), (im), ctx) != 0) return -1; } while (0)
    W(&m->embed, 0);
    for (int l = 0; m->lw && l < c->n_layers; l++) {
        W(&m->lw[l].wqkv, 0);
        W(&m->lw[l].wgu, 0);
    }
    W(&m->ple_embed, 0);
    W(&m->ple_model_proj, 0);
    for (int l = 0; m->lw && m->plan && l < c->n_layers; l++) {
        layer_weights *w = &m->lw[l];
        const moe_plan *mp = &m->plan[l].moe;
        W(&w->wq, 0); W(&w->wk, 0); W(&w->wv, 0); W(&w->wo, 0);
        W(&w->gate, 0); W(&w->up, 0); W(&w->down, 0);
        W(&w->ple_gate, 0); W(&w->ple_proj, 0);
        W(&w->moe.router, 0);
        for (int e = 0; e < mp->n_experts; e++) {
            if (w->moe.gate_up) W(&w->moe.gate_up[e], mp->in_major);
            if (w->moe.gate) W(&w->moe.gate[e], 0);
            if (w->moe.up) W(&w->moe.up[e], 0);
            if (w->moe.down) W(&w->moe.down[e], mp->in_major);
        }
    }
    if (!c->tie) W(&m->lm_head, 0);
#undef W
    return 0;
}

/* Every float vector with its length (NULL slots are skipped). */
static int each_vec(model *m, vec_fn fn, void *ctx) {
    const model_config *c = &m->cfg;
    const int64_t H = c->hidden;
#define V(p, n) do { if ((p) && fn(m, &(p), (n), ctx) != 0) return -1; } while (0)
    V(m->final_norm, H);
    V(m->ple_proj_norm, c->ple_dim);
    for (int r = 0; r < MODEL_MAX_ROPES; r++) V(m->ropes[r].inv_freq, m->ropes[r].dim / 2);
    for (int l = 0; m->lw && m->plan && l < c->n_layers; l++) {
        layer_weights *w = &m->lw[l];
        const layer_plan *p = &m->plan[l];
        const int64_t qd = (int64_t)p->n_heads * p->head_dim, kd = (int64_t)p->n_kv * p->head_dim;
        const int64_t E = p->moe.n_experts, I = p->moe.inter;
        V(w->attn_norm, H); V(w->mlp_norm, H); V(w->attn_post_norm, H); V(w->mlp_post_norm, H);
        const int whole = p->qk_norm == QK_NORM_WHOLE; /* OLMo 2: over the whole projection */
        V(w->q_norm, whole ? qd : p->head_dim); V(w->k_norm, whole ? kd : p->head_dim);
        V(w->bq, qd); V(w->bk, kd); V(w->bv, kd); V(w->bo, H);
        V(w->sinks, p->n_heads);
        V(w->moe_pre_norm, H); V(w->mlp_post_norm1, H); V(w->moe_post_norm, H);
        V(w->ple_post_norm, H);
        V(w->moe.gate_up_bias, E * 2 * I); V(w->moe.gate_bias, E * I); V(w->moe.up_bias, E * I);
        V(w->moe.down_bias, E * H);
        V(w->moe.router_bias, E); V(w->moe.router_scale, H); V(w->moe.expert_scale, E);
    }
#undef V
    return 0;
}

/* Synthetic weights (bench --synth): filled with random values on the device, the
 * checkpoint's (a sparse file's holes) never read. */
static int fill_mode(const model *m) { return m->be->ops->fill_weight && setting_flag(SET_CELER_SYNTH_FILL); }

static int up_weight(model *m, weight *w, int in_major, void *ctx) {
    int *transposed = ctx;
    if (w->on_device) return 0; /* fused, or a view of a fused weight */
    if (fill_mode(m)) {
        if (in_major) { /* made directly in the [out, in] layout an upload transposes to */
            const int64_t r = w->rows;
            w->rows = w->cols;
            w->cols = r;
            *transposed = 1;
        }
        return m->be->ops->fill_weight(m->be, w, 0x5eed0000ull + (uint64_t)m->tp_rank * 7919u + (uint64_t)w->rows * 31u + (uint64_t)w->cols);
    }
    int rc = m->be->ops->upload_weight(m->be, w, in_major);
    if (rc < 0) return -1;
    if (rc == 1) *transposed = 1;
    return 0;
}

/* After a failed allocation the walk goes on dropping the host copies, so every
 * vector is then a device pointer or NULL and model_release needs no record. */
static int up_vec(model *m, float **v, int64_t n, void *ctx) {
    int *failed = ctx;
    backend *b = m->be;
    float *d = *failed ? NULL : b->ops->alloc(b, (size_t)n * sizeof(float));
    if (d) b->ops->upload(b, d, *v, (size_t)n * sizeof(float));
    else *failed = 1;
    free(*v);
    *v = d;
    return 0;
}

/* Fuses each layer's q|k|v and gate|up where the backend can (same format and
 * width): one product per decode step instead of three and two. */
/* The fused weight of parts [n] made by fill_weight, the parts views of its rows. */
static int fill_fused(model *m, weight *const *parts, int n, weight *out) {
    const weight *p0 = parts[0];
    weight f = *p0;
    f.rows = 0;
    for (int i = 0; i < n; i++) {
        if (parts[i]->fmt != p0->fmt || parts[i]->cols != p0->cols || parts[i]->bits != p0->bits) return 0;
        f.rows += parts[i]->rows;
    }
    if (m->be->ops->fill_weight(m->be, &f, 0xf05edull + (uint64_t)m->tp_rank + (uint64_t)f.rows) != 0) return -1;
    size_t od = 0, os = 0, ob = 0, d, sc, bi;
    f.nbytes = 0;
    for (int i = 0; i < n; i++) {
        weight *w = parts[i];
        weight_sizes(w, &d, &sc, &bi);
        w->data = (const char *)f.data + od;
        w->scales = f.scales ? (const char *)f.scales + os : NULL;
        w->biases = f.biases ? (const char *)f.biases + ob : NULL;
        w->src_cols = 0;
        w->on_device = 2;
        f.nbytes += w->nbytes;
        od += d, os += sc, ob += bi;
    }
    *out = f;
    return 0;
}

static int fuse_layers(model *m) {
    backend *b = m->be;
    if (!b->ops->upload_fused || !setting_flag(SET_CELER_FUSE)) return 0;
    if (fill_mode(m)) {
        for (int l = 0; l < m->cfg.n_layers; l++) {
            layer_weights *w = &m->lw[l];
            weight *qkv[3] = {&w->wq, &w->wk, &w->wv}, *gu[2] = {&w->gate, &w->up};
            if (w->wq.data && w->wk.data && w->wv.data && fill_fused(m, qkv, 3, &w->wqkv) < 0) return -1;
            if (w->gate.data && w->up.data && fill_fused(m, gu, 2, &w->wgu) < 0) return -1;
        }
        return 0;
    }
    for (int l = 0; l < m->cfg.n_layers; l++) {
        layer_weights *w = &m->lw[l];
        weight *qkv[3] = {&w->wq, &w->wk, &w->wv}, *gu[2] = {&w->gate, &w->up};
        if (w->wq.data && w->wk.data && w->wv.data && b->ops->upload_fused(b, qkv, 3, &w->wqkv) < 0) return -1;
        if (w->gate.data && w->up.data && b->ops->upload_fused(b, gu, 2, &w->wgu) < 0) return -1;
    }
    return 0;
}

/* The CPU: each layer's dense projections handed to upload_weight, which packs the
 * GEMM's panels once or interleaves 4-bit rows (backend/cpu/pack.c); a quantized LM
 * head too (a batched decode step's largest product: docs/cpu-kernels.md), while the
 * embedding, a bf16 head (prefill computes it for one row) and the experts keep
 * their mapping alone. */
static int cpu_layer_weights(model *m, int pack) {
    if (m->lm_head.data && m->lm_head.fmt == WF_AFFINE) {
        if (!pack) m->be->ops->release_weight(m->be, &m->lm_head);
        else if (m->be->ops->upload_weight(m->be, &m->lm_head, 0) < 0) return err_prefix("packing %s", m->ck->dir);
    }
    for (int l = 0; m->lw && l < m->cfg.n_layers; l++) {
        layer_weights *w = &m->lw[l];
        weight *ws[] = {&w->wq, &w->wk, &w->wv, &w->wo, &w->gate, &w->up, &w->down, &w->ple_gate, &w->ple_proj};
        for (size_t i = 0; i < sizeof ws / sizeof *ws; i++) {
            if (!ws[i]->data) continue;
            if (!pack) m->be->ops->release_weight(m->be, ws[i]);
            else if (m->be->ops->upload_weight(m->be, ws[i], 0) < 0) return err_prefix("packing %s", m->ck->dir);
        }
    }
    return 0;
}

int model_upload(model *m) {
    if (!m->be->ops->on_device) return cpu_layer_weights(m, 1);
    int transposed = 0, failed = 0;
    m->on_device = 1;
    each_vec(m, up_vec, &failed);
    if (failed || fuse_layers(m) != 0 || each_weight(m, up_weight, &transposed) != 0)
        return err_prefix("uploading %s to %s", m->ck->dir, m->be->ops->name);
    if (m->cfg.tie) m->lm_head = m->embed;
    /* input-major experts are now stored [out, in] */
    if (transposed)
        for (int l = 0; l < m->cfg.n_layers; l++) m->plan[l].moe.in_major = 0;
    return 0;
}

static int rel_weight(model *m, weight *w, int in_major, void *ctx) {
    (void)in_major; (void)ctx;
    if (w->on_device == 1) m->be->ops->release_weight(m->be, w);
    return 0;
}

static int rel_vec(model *m, float **v, int64_t n, void *ctx) {
    (void)n; (void)ctx;
    if (m->on_device) m->be->ops->release(m->be, *v);
    else free(*v);
    *v = NULL;
    return 0;
}

void model_release(model *m) {
    if (m->be && m->on_device) each_weight(m, rel_weight, NULL);
    if (m->be && !m->on_device) cpu_layer_weights(m, 0);
    each_vec(m, rel_vec, NULL);
}
