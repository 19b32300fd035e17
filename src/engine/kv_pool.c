/* engine/kv_pool.c: the public face of the KV block pool (kv/pool.h): its counters,
 * its budget, and whether a model's sessions draw from it. */
#include "engine/engine.h"
#include "kv/pool.h"

void celer_kv_pool_get(celer_kv_pool_stats *out) {
    kv_pool_stats st;
    kv_pool_stats_get(kv_pool_default(), &st);
    out->budget_bytes = st.budget_bytes;
    out->used_bytes = st.used_bytes;
    out->used_blocks = st.used_blocks;
    out->committed_blocks = st.committed_blocks;
    out->cow_blocks = st.cow_blocks;
    out->block_rows = KV_BLOCK;
}

int celer_kv_pool_set_budget(uint64_t bytes) { return kv_pool_set_budget(kv_pool_default(), (size_t)bytes); }

int celer_model_kv_paged(const celer_model *cm) { return !cm->m->be->ops->on_device; }
