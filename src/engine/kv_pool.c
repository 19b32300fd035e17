/* engine/kv_pool.c: the public face of the KV block pools (kv/pool.h): their
 * counters, their budget, and whether a model's sessions draw from one. Host caches
 * draw from the process's host pool, device caches from their GPU's pool. */
#include <unistd.h>

#include "base/err.h"
#include "engine/engine.h"
#include "kv/pool.h"

void celer_kv_pool_get(celer_kv_pool_stats *out) {
    kv_pool_stats st;
    kv_pool *gpu = kv_pool_device_any();
    kv_pool_stats_get(gpu ? gpu : kv_pool_default(), &st);
    out->budget_bytes = st.budget_bytes;
    out->used_bytes = st.used_bytes;
    out->used_blocks = st.used_blocks;
    out->committed_blocks = st.committed_blocks;
    out->cow_blocks = st.cow_blocks;
    out->block_rows = KV_BLOCK;
}

int celer_kv_pool_set_budget(uint64_t bytes) {
    if (kv_pool_set_budget(kv_pool_default(), (size_t)bytes) != 0) return -1;
    kv_pool_device_budget((size_t)bytes, 0);
    return 0;
}

int celer_kv_pool_set_budget_fraction(double f) {
    if (!(f > 0 && f <= 1)) return err_set("kv pool: a budget fraction of %g (0 < F <= 1)", f);
    long pages = sysconf(_SC_AVPHYS_PAGES), pg = sysconf(_SC_PAGESIZE);
    if (pages <= 0 || pg <= 0) return err_set("kv pool: cannot read the memory available");
    const size_t host = (size_t)(f * (double)pages * (double)pg);
    if (kv_pool_set_budget(kv_pool_default(), host ? host : 1) != 0) return -1;
    kv_pool_device_budget(0, f);
    return 0;
}

int celer_model_kv_paged(const celer_model *cm) {
    (void)cm;
    return 1; /* host and device caches both take their rows from a pool */
}
