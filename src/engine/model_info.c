/* engine/model_info.c: what a model is and what it will need, for reports (celer arch,
 * celer inspect): the families the loader reads, the bytes of the checkpoint's
 * tensors by stored dtype, and the KV cache bytes of a session of a given context,
 * per cache kind. Reads the layer plan and the checkpoint; runs nothing. The cache
 * kinds follow engine_layer_cache exactly (rotating when a layer's window is shorter
 * than the context). */
#include <string.h>

#include "celer.h"
#include "engine/engine.h"

/* The loader's families (model/model.c tries them in this order) and the names their
 * publishers use. tests/cli_inspect.sh checks this list against the loader's own. */
static const struct {
    const family_desc *fam;
    const char *title;
} known[] = {
    {&family_llama, "Llama"},     {&family_qwen3, "Qwen3"},     {&family_gemma3, "Gemma 3"},
    {&family_gemma4, "Gemma 4"},  {&family_gpt_oss, "gpt-oss"}, {&family_exaone4, "EXAONE 4"},
    {&family_qwen2, "Qwen 2"},    {&family_mistral, "Mistral"}, {&family_phi3, "Phi-3"},
    {&family_gemma2, "Gemma 2"},  {&family_mixtral, "Mixtral"}, {&family_smollm3, "SmolLM3"},
    {&family_olmo2, "OLMo 2"},
};
#define N_KNOWN ((int)(sizeof known / sizeof known[0]))

const celer_family *celer_families(int *n) {
    static celer_family list[N_KNOWN];
    static int ready;  /* every caller writes the same values: a benign first fill */
    if (!ready) {
        for (int i = 0; i < N_KNOWN; i++) {
            list[i].name = known[i].fam->name;
            list[i].title = known[i].title;
            list[i].model_types = known[i].fam->model_types;
        }
        ready = 1;
    }
    *n = N_KNOWN;
    return list;
}

void celer_model_weights_info(const celer_model *cm, celer_weights_info *out) {
    const checkpoint *ck = cm->m->ck;
    uint64_t bytes[ST_N_DTYPES] = {0};
    int64_t count[ST_N_DTYPES] = {0};
    memset(out, 0, sizeof *out);
    for (int i = 0; i < ck->n_shards; i++)
        for (int j = 0; j < ck->shards[i]->n; j++) {
            const st_tensor *t = &ck->shards[i]->t[j];
            bytes[t->dtype] += t->nbytes;
            count[t->dtype]++;
            out->file_bytes += t->nbytes;
            out->tensors++;
        }
    out->shards = ck->n_shards;
    /* dtypes by bytes, largest first (ties: enum order) */
    for (;;) {
        int best = -1;
        for (int d = 0; d < ST_N_DTYPES; d++)
            if (count[d] && (best < 0 || bytes[d] > bytes[best])) best = d;
        if (best < 0 || out->n_dtypes == CELER_MAX_DTYPES) break;
        out->dtypes[out->n_dtypes].dtype = st_dtype_name((st_dtype)best);
        out->dtypes[out->n_dtypes].bytes = bytes[best];
        out->dtypes[out->n_dtypes].tensors = count[best];
        out->n_dtypes++;
        count[best] = 0;
    }
}

void celer_model_kv_info(const celer_model *cm, int ctx, celer_kv_info *out) {
    const model *m = cm->m;
    if (ctx <= 0) ctx = m->cfg.max_pos;
    memset(out, 0, sizeof *out);
    out->ctx = ctx;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const layer_plan *p = &m->plan[l];
        if (p->kv_source >= 0) {  /* reads another layer's cache */
            out->shared_layers++;
            continue;
        }
        uint64_t row = 2 * (uint64_t)p->n_kv * (uint64_t)p->head_dim * sizeof(float);  /* K and V */
        if (p->window > 0 && p->window < ctx) {
            out->rotating_layers++;
            out->rotating_token_bytes += row;
            out->rotating_bytes += row * (uint64_t)p->window;
            if (p->window > out->window) out->window = p->window;
        } else {
            out->dense_layers++;
            out->dense_token_bytes += row;
            out->dense_bytes += row * (uint64_t)ctx;
        }
    }
}
