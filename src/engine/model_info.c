/* engine/model_info.c: what a model is and what it will need, for reports (celer arch,
 * celer inspect, celer bench, the server's /metrics): the families the loader reads,
 * the bytes of the checkpoint's tensors by stored dtype, and the KV cache bytes of a
 * session of a given context, per cache kind. Reads the layer plan and the
 * checkpoint; runs nothing. Families and cache figures come from the registry
 * (model/registry.h), the same rules sessions build their caches by. */
#include <pthread.h>
#include <string.h>

#include "celer.h"
#include "engine/engine.h"
#include "model/registry.h"

static celer_family family_list[REGISTRY_MAX];
static int family_count;
static pthread_once_t family_once = PTHREAD_ONCE_INIT;

static void fill_families(void) {
    const family_desc *const *f = registry_families(&family_count);
    for (int i = 0; i < family_count; i++) family_list[i] = (celer_family){f[i]->name, f[i]->title, f[i]->model_types};
}

const celer_family *celer_families(int *n) {
    pthread_once(&family_once, fill_families);
    *n = family_count;
    return family_list;
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
        registry_layer_kv c = registry_layer_cache(m, l, ctx);
        uint64_t held = (uint64_t)registry_layer_rows(m, l, ctx) * c.row_bytes;
        if (c.shared) {
            out->shared_layers++;
        } else if (c.kind == KV_ROTATING) {
            out->rotating_layers++;
            out->rotating_token_bytes += c.row_bytes;
            out->rotating_bytes += held;
            if (c.window > out->window) out->window = c.window;
        } else {
            out->dense_layers++;
            out->dense_token_bytes += c.row_bytes;
            out->dense_bytes += held;
        }
    }
}

uint64_t celer_model_kv_bytes(const celer_model *cm, int n_tokens) { return registry_kv_bytes(cm->m, n_tokens); }
