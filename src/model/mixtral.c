/* model/mixtral.c: the Mixtral family description. Mistral's attention (a sliding
 * window on every layer when sliding_window is set) with a routed MoE in place of
 * the MLP: router logits, the top num_experts_per_tok experts, softmax over the
 * chosen logits (equal to softmax, top-k and renormalize), SiLU-gated experts.
 * Experts load from the hub's per-expert w1 (gate) / w3 (up) / w2 (down) tensors,
 * mlx-community's switch_mlp stacks, or transformers 5's gate_up_proj / down_proj
 * stacks. */
#include <stdio.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/json.h"
#include "model/model.h"

static int describe_mixtral(model *m, const json_t *j, const char *where) {
    const llama_shape s = {.window = WINDOW_ALL, .norm = NORM_PRE};
    if (model_describe_llama(m, j, where, &s)) return -1;
    int64_t E, K;
    if (jget_int_req(j, "num_local_experts", &E, where) || jget_int(j, "num_experts_per_tok", 2, &K, where)) return -1;
    if (E <= 0 || E > MOE_MAX_EXPERTS || K <= 0 || K > E)
        return err_set("%s: num_local_experts %lld / num_experts_per_tok %lld are out of range", where, (long long)E, (long long)K);
    for (int l = 0; l < m->cfg.n_layers; l++) {
        layer_plan *p = &m->plan[l];
        p->attn_bias = 0;
        p->inter = 0;
        p->moe = (moe_plan){.n_experts = (int)E, .top_k = (int)K, .inter = m->cfg.inter, .route = ROUTE_TOPK_SOFTMAX,
                            .act = ACT_SILU, .gate_up_layout = MOE_GU_SPLIT};
    }
    return 0;
}

/* The hub's per-expert tensors: experts.<e>.w1 / w3 / w2. */
static int bind_per_expert(model *m, int l, moe_weights *e, int64_t E, int64_t I, int64_t H) {
    static const char *const names[3] = {"w1", "w3", "w2"};
    weight *dst[3] = {e->gate, e->up, e->down};
    for (int x = 0; x < E; x++)
        for (int k = 0; k < 3; k++) {
            char rel[96], n[256];
            snprintf(rel, sizeof rel, "block_sparse_moe.experts.%d.%s", x, names[k]);
            model_layer_name(m, l, rel, n, sizeof n);
            if (weight_bind(&dst[k][x], m->ck, &m->quant, n, k == 2 ? H : I, k == 2 ? I : H)) return -1;
        }
    return 0;
}

static int bind_mixtral_moe(model *m, int l) {
    layer_plan *p = &m->plan[l];
    moe_weights *e = &m->lw[l].moe;
    const int64_t H = m->cfg.hidden, E = p->moe.n_experts, I = p->moe.inter;
    char n[256], n2[300];
    int im;
    if (!(e->down = calloc((size_t)E, sizeof *e->down))) return err_set("out of memory");
    if (ckpt_find(m->ck, model_layer_name(m, l, "mlp.experts.gate_up_proj", n, sizeof n))) {
        /* transformers 5: mlp.gate router, experts stacked [E, 2I, H] (gate rows first) and [E, H, I] */
        p->moe.gate_up_layout = MOE_GU_HALVES;
        if (!(e->gate_up = calloc((size_t)E, sizeof *e->gate_up))) return err_set("out of memory");
        if (model_bind(m, &e->router, model_layer_name(m, l, "mlp.gate", n2, sizeof n2), E, H) ||
            weight_bind_experts(e->gate_up, m->ck, &m->quant, n, (int)E, 2 * I, H, 0, &im) ||
            weight_bind_experts(e->down, m->ck, &m->quant, model_layer_name(m, l, "mlp.experts.down_proj", n, sizeof n),
                                (int)E, H, I, 0, &im))
            return -1;
        m->weight_bytes += (size_t)p->moe.top_k * (e->gate_up[0].nbytes + e->down[0].nbytes);
    } else {
        if (!(e->gate = calloc((size_t)E, sizeof *e->gate)) || !(e->up = calloc((size_t)E, sizeof *e->up)))
            return err_set("out of memory");
        if (model_bind(m, &e->router, model_layer_name(m, l, "block_sparse_moe.gate", n, sizeof n), E, H)) return -1;
        model_layer_name(m, l, "block_sparse_moe.switch_mlp.gate_proj", n, sizeof n);
        snprintf(n2, sizeof n2, "%s.weight", n);
        if (ckpt_find(m->ck, n2)) {
            /* mlx-community: switch_mlp.{gate,up,down}_proj stacks [E, out, in] */
            char nu[256], nd[256];
            model_layer_name(m, l, "block_sparse_moe.switch_mlp.up_proj", nu, sizeof nu);
            model_layer_name(m, l, "block_sparse_moe.switch_mlp.down_proj", nd, sizeof nd);
            if (weight_bind_experts(e->gate, m->ck, &m->quant, n, (int)E, I, H, 0, &im) ||
                weight_bind_experts(e->up, m->ck, &m->quant, nu, (int)E, I, H, 0, &im) ||
                weight_bind_experts(e->down, m->ck, &m->quant, nd, (int)E, H, I, 0, &im))
                return -1;
        } else if (bind_per_expert(m, l, e, E, I, H)) {
            return -1;
        }
        m->weight_bytes += (size_t)p->moe.top_k * (e->gate[0].nbytes + e->up[0].nbytes + e->down[0].nbytes);
    }
    m->n_params += E * 3 * I * H;
    return 0;
}

static const char *const mixtral_types[] = {"mixtral", NULL};

const family_desc family_mixtral = {.name = "mixtral", .title = "Mixtral", .model_types = mixtral_types, .describe = describe_mixtral,
                                    .bind_moe = bind_mixtral_moe};
