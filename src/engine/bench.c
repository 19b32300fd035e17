/* engine/bench.c: public measurement helpers used by `celer bench`: the machine's
 * read bandwidth and the per-token work of a model, the denominators of its ratios. */
#include "backend/cpu/bandwidth.h"
#include "celer.h"
#include "engine/engine.h"

double celer_measure_read_bandwidth(int n_threads) { return cpu_read_bandwidth(n_threads, (size_t)1 << 30); }

double celer_model_bandwidth(const celer_model *cm) { return cm->m->be->ops->bandwidth(cm->m->be); }

double celer_model_layer_flops_per_token(const celer_model *cm) {
    const model *m = cm->m;
    int64_t head = (int64_t)m->cfg.vocab * m->cfg.hidden * (m->cfg.tie ? 1 : 2);
    /* a token runs only its top-k experts: the others' parameters do no work for it */
    int64_t idle = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) {
        const moe_plan *e = &m->plan[l].moe;
        if (e->n_experts > e->top_k) idle += (int64_t)(e->n_experts - e->top_k) * 3 * e->inter * m->cfg.hidden;
    }
    return 2.0 * (double)(m->n_params - head - idle);
}
