/* model/exaone4.c: the EXAONE 4.0 family description. Pure post-norm layers (no
 * input norm), q/k norms, SiLU MLP, hybrid local/global attention: with a
 * sliding_window, sliding layers use RoPE and global layers none (NoPE); without one
 * (the 1.2B configuration) every layer is global with RoPE. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/json.h"
#include "model/model.h"

static int describe_exaone4(model *m, const json_t *j, const char *where) {
    model_config *c = &m->cfg;
    c->tie = 0;
    if (model_parse_common(m, j, where)) return -1;
    c->act = ACT_SILU;
    const char *act;
    if (jget_str(j, "hidden_act", "silu", &act, where)) return -1;
    if (strcmp(act, "silu") != 0) return err_set("%s: hidden_act \"%s\" is not supported (silu)", where, act);
    int64_t window;
    if (jget_int(j, "sliding_window", 0, &window, where)) return -1;
    if (window < 0) return err_set("%s: key \"sliding_window\" = %lld must be positive", where, (long long)window);
    if (rope_spec_parse(&m->rope_specs[0], model_rope_params(j, "full_attention"), j, where)) return -1;
    m->n_ropes = 1;
    int *sliding = calloc((size_t)c->n_layers, sizeof *sliding);
    if (!sliding) return err_set("out of memory");
    /* no sliding_window: every layer is global whatever layer_types says */
    if (window > 0 && model_layer_types(j, c->n_layers, 0, sliding, where)) {
        free(sliding);
        return -1;
    }
    for (int l = 0; l < c->n_layers; l++) {
        layer_plan *p = &m->plan[l];
        p->n_heads = c->n_heads;
        p->n_kv = c->n_kv;
        p->head_dim = c->head_dim;
        p->rope = window == 0 || sliding[l] ? 0 : -1;
        p->window = sliding[l] ? (int)window : 0;
        p->qk_norm = 1;
        p->norm = NORM_POST;
        p->inter = c->inter;
        p->attn_scale = 1.0f / sqrtf((float)c->head_dim);
    }
    free(sliding);
    return 0;
}

static const char *const exaone4_types[] = {"exaone4", NULL};

const family_desc family_exaone4 = {.name = "exaone4", .model_types = exaone4_types, .describe = describe_exaone4};
