/* model/gpt_oss.c: the gpt-oss family description. Pre-norm layers alternating
 * sliding and full attention with biased projections, per-head attention sinks and
 * YaRN RoPE on every layer; the feed-forward is a top-k routed MoE with the clamped
 * SwiGLU. Experts load from transformers' bf16 stacks, the original MXFP4
 * blocks/scales, or mlx-community's per-expert gate/up/down stacks. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/json.h"
#include "model/model.h"

static int describe_gpt_oss(model *m, const json_t *j, const char *where) {
    model_config *c = &m->cfg;
    c->tie = 0;
    if (model_parse_common(m, j, where)) return -1;
    c->act = ACT_SILU; /* no dense MLP; the experts' clamped SwiGLU is in the MoE plan */
    int bias, rc = -1;
    int64_t window, E, K;
    double limit;
    int *sliding = calloc((size_t)c->n_layers, sizeof *sliding);
    if (!sliding) return err_set("out of memory");
    if (jget_bool(j, "attention_bias", 1, &bias, where) || jget_int(j, "sliding_window", 128, &window, where) ||
        jget_int_req(j, "num_local_experts", &E, where) || jget_int(j, "num_experts_per_tok", 4, &K, where) ||
        jget_num(j, "swiglu_limit", 7.0, &limit, where) ||
        model_layer_types(j, c->n_layers, 2, sliding, where) ||
        rope_spec_parse(&m->rope_specs[0], model_rope_params(j, "full_attention"), j, where))
        goto out;
    if (E <= 0 || E > MOE_MAX_EXPERTS || K <= 0 || K > E) {
        err_set("%s: num_local_experts %lld / num_experts_per_tok %lld are out of range", where, (long long)E, (long long)K);
        goto out;
    }
    if (window <= 0) { err_set("%s: key \"sliding_window\" = %lld must be positive", where, (long long)window); goto out; }
    if (!(limit > 0)) { err_set("%s: key \"swiglu_limit\" = %g must be positive", where, limit); goto out; }
    m->n_ropes = 1;
    for (int l = 0; l < c->n_layers; l++) {
        layer_plan *p = &m->plan[l];
        p->n_heads = c->n_heads;
        p->n_kv = c->n_kv;
        p->head_dim = c->head_dim;
        p->rope = 0;
        p->window = sliding[l] ? (int)window : 0;
        p->attn_bias = bias;
        p->sinks = 1;
        p->norm = NORM_PRE;
        p->inter = 0;
        p->attn_scale = 1.0f / sqrtf((float)c->head_dim);
        p->moe = (moe_plan){.n_experts = (int)E, .top_k = (int)K, .inter = c->inter, .route = ROUTE_TOPK_SOFTMAX,
                            .act = ACT_SWIGLU_CLAMP, .gate_up_layout = MOE_GU_INTERLEAVED,
                            .alpha = 1.702f, .limit = (float)limit};
    }
    rc = 0;
out:
    free(sliding);
    return rc;
}

/* A stacked bias [a, b] as one float32 array. */
static int bias2(model *m, float **out, const char *name, int64_t a, int64_t b) {
    int64_t shape[2] = {a, b};
    if (!(*out = tensor_load_f32(m->ck, name, 2, shape))) return -1;
    m->n_params += a * b;
    return 0;
}

/* Router (linear with bias) and experts of layer l in whichever form is stored. */
static int bind_gpt_oss_moe(model *m, int l) {
    layer_plan *p = &m->plan[l];
    moe_weights *e = &m->lw[l].moe;
    int64_t H = m->cfg.hidden, E = p->moe.n_experts, I = p->moe.inter;
    char n[256], n2[256];
#define NAME(buf, fmt) (snprintf(buf, sizeof buf, "%slayers.%d.mlp." fmt, m->prefix, l), buf)
    if (model_bind(m, &e->router, NAME(n, "router"), E, H) || model_vec(m, &e->router_bias, NAME(n, "router.bias"), E))
        return -1;
    if (!(e->down = calloc((size_t)E, sizeof *e->down))) return err_set("out of memory");
    if (ckpt_find(m->ck, NAME(n, "experts.gate_proj.weight"))) {
        /* mlx-community: gate, up, down stacks [E, out, in] with biases [E, out] */
        p->moe.gate_up_layout = MOE_GU_SPLIT;
        if (!(e->gate = calloc((size_t)E, sizeof *e->gate)) || !(e->up = calloc((size_t)E, sizeof *e->up)))
            return err_set("out of memory");
        int im; /* [E, out, in]: never input-major */
        if (weight_bind_experts(e->gate, m->ck, &m->quant, NAME(n, "experts.gate_proj"), (int)E, I, H, 0, &im) ||
            weight_bind_experts(e->up, m->ck, &m->quant, NAME(n, "experts.up_proj"), (int)E, I, H, 0, &im) ||
            weight_bind_experts(e->down, m->ck, &m->quant, NAME(n, "experts.down_proj"), (int)E, H, I, 0, &im) ||
            bias2(m, &e->gate_bias, NAME(n, "experts.gate_proj.bias"), E, I) ||
            bias2(m, &e->up_bias, NAME(n, "experts.up_proj.bias"), E, I) ||
            bias2(m, &e->down_bias, NAME(n, "experts.down_proj.bias"), E, H))
            return -1;
        m->weight_bytes += (size_t)p->moe.top_k * (2 * e->gate[0].nbytes + e->down[0].nbytes);
    } else {
        /* transformers: gate_up_proj [E, H, 2I] and down_proj [E, I, H] stored input-major
         * (used in place: the moe op computes x W), or MXFP4 blocks [E, out, in]; gate
         * and up columns interleave either way */
        p->moe.gate_up_layout = MOE_GU_INTERLEAVED;
        int im_gu, im_d;
        if (!(e->gate_up = calloc((size_t)E, sizeof *e->gate_up))) return err_set("out of memory");
        if (weight_bind_experts(e->gate_up, m->ck, &m->quant, NAME(n, "experts.gate_up_proj"), (int)E, 2 * I, H, 1, &im_gu) ||
            weight_bind_experts(e->down, m->ck, &m->quant, NAME(n2, "experts.down_proj"), (int)E, H, I, 1, &im_d))
            return -1;
        if (im_gu != im_d) return err_set("%s: gate_up_proj and down_proj of layer %d are stored in different forms", m->ck->dir, l);
        p->moe.in_major = im_gu;
        if (bias2(m, &e->gate_up_bias, NAME(n, "experts.gate_up_proj_bias"), E, 2 * I) ||
            bias2(m, &e->down_bias, NAME(n, "experts.down_proj_bias"), E, H))
            return -1;
        m->weight_bytes += (size_t)p->moe.top_k * (e->gate_up[0].nbytes + e->down[0].nbytes);
    }
#undef NAME
    m->n_params += E * 3 * I * H;
    return 0;
}

static const char *const gpt_oss_types[] = {"gpt_oss", NULL};

const family_desc family_gpt_oss = {.name = "gpt_oss", .model_types = gpt_oss_types, .describe = describe_gpt_oss,
                                    .bind_moe = bind_gpt_oss_moe};
