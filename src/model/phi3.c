/* model/phi3.c: the Phi-3 family description. A Llama-like pre-norm transformer
 * whose q, k and v rows are stored as one qkv_proj [qd + 2 kd, H] and whose gate
 * and up rows as one gate_up_proj [2I, H] (gate first); both are bound whole and
 * used through row views (a backend that fuses products fuses the views again).
 * RoPE covers partial_rotary_factor of each head; the 128k checkpoints use longrope
 * (model/rope.c and model_describe_llama), with the long factors for a sequence that
 * runs past original_max_position_embeddings. sliding_window, when set, applies to
 * every layer. */
#include <stdio.h>

#include "model/model.h"

static int describe_phi3(model *m, const json_t *j, const char *where) {
    const llama_shape s = {.window = WINDOW_ALL, .norm = NORM_PRE};
    if (model_describe_llama(m, j, where, &s)) return -1;
    for (int l = 0; l < m->cfg.n_layers; l++) m->plan[l].attn_bias = 0;
    return 0;
}

/* Rows [r0, r0 + n) of w as a weight of its own, pointing into w's storage. */
static weight row_view(const weight *w, int64_t r0, int64_t n) {
    weight v = *w, one = *w;
    one.rows = 1; /* weight_sizes of one row: the strides of every array */
    size_t code_row, scale_row, bias_row;
    weight_sizes(&one, &code_row, &scale_row, &bias_row);
    v.rows = n;
    v.data = (const char *)w->data + (size_t)r0 * code_row;
    if (w->scales) v.scales = (const char *)w->scales + (size_t)r0 * scale_row;
    if (w->biases) v.biases = (const char *)w->biases + (size_t)r0 * bias_row;
    v.nbytes = (size_t)n * (code_row + (w->scales ? scale_row : 0) + (w->biases ? bias_row : 0));
    return v;
}

/* qkv_proj and gate_up_proj bound whole (counted once), q/k/v and gate/up as views. */
static int bind_phi3(model *m, int l) {
    const layer_plan *p = &m->plan[l];
    layer_weights *w = &m->lw[l];
    const int64_t H = m->cfg.hidden, qd = (int64_t)p->n_heads * p->head_dim, kd = (int64_t)p->n_kv * p->head_dim;
    const int64_t I = p->inter;
    weight qkv = {0}, gu = {0};
    char n[256];
    if (model_bind(m, &qkv, model_layer_name(m, l, "self_attn.qkv_proj", n, sizeof n), qd + 2 * kd, H) ||
        model_bind(m, &gu, model_layer_name(m, l, "mlp.gate_up_proj", n, sizeof n), 2 * I, H))
        return -1;
    w->wq = row_view(&qkv, 0, qd);
    w->wk = row_view(&qkv, qd, kd);
    w->wv = row_view(&qkv, qd + kd, kd);
    w->gate = row_view(&gu, 0, I);
    w->up = row_view(&gu, I, I);
    return 0;
}

static const char *const phi3_types[] = {"phi3", NULL};

const family_desc family_phi3 = {.name = "phi3", .title = "Phi-3", .model_types = phi3_types, .describe = describe_phi3, .bind_own = bind_phi3};
