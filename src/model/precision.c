/* model/precision.c: the arithmetic a model runs with, chosen once when it opens:
 * the precision (fast or exact: CELER_PRECISION, `--precision`) and the KV cache's
 * element type (CELER_KV_DTYPE). On the GPU, fast (the default) rounds activations
 * once to bf16 into one-term tensor-core products and keeps a bf16 KV cache; exact
 * splits activations into two bf16 terms and keeps a float32 cache. The CPU has one
 * path, exact (float32 activations and cache), whatever is asked: its products
 * already read the weights as stored, and a bf16 cache would need a second
 * attention kernel for no measured gain (docs/cuda-backend.md "Precision").
 * Mixture-of-experts models take the exact arithmetic on the GPU whatever is asked
 * (measured: see below). */
#include <string.h>

#include "base/err.h"
#include "base/settings.h"
#include "model/model.h"

int model_precision_fast(int on_device) {
    const char *p = setting_str(SET_CELER_PRECISION);
    return on_device && !(p && strcmp(p, "exact") == 0);
}

int model_precision_init(model *m) {
    const char *p = setting_str(SET_CELER_PRECISION), *t = setting_str(SET_CELER_KV_DTYPE);
    if (p && strcmp(p, "fast") != 0 && strcmp(p, "exact") != 0)
        return err_set("CELER_PRECISION (or --precision) wants fast or exact, got '%s'", p);
    const int dev = m->be->ops->on_device;
    /* Mixture-of-experts models run the exact arithmetic under fast too: their routing
     * is a discontinuous choice, and on the fixtures any bf16 rounding (one-term
     * products alone, or the bf16 cache alone) moved expert choices beyond
     * transformers' own bf16 envelope (docs/cuda-backend.md "Precision") */
    int moe = 0;
    for (int l = 0; l < m->cfg.n_layers; l++) moe |= m->plan[l].moe.n_experts > 0;
    m->fast = model_precision_fast(dev) && !moe;
    m->be->fast = m->fast;
    if (!t || strcmp(t, "auto") == 0) {
        m->kv_dtype = m->fast ? KVT_BF16 : KVT_F32;
    } else if (strcmp(t, "f32") == 0) {
        m->kv_dtype = KVT_F32;
    } else if (strcmp(t, "bf16") == 0) {
        if (!dev) return err_set("CELER_KV_DTYPE=bf16: the CPU backend keeps a float32 KV cache (use f32 or auto)");
        m->kv_dtype = KVT_BF16;
    } else {
        return err_set("CELER_KV_DTYPE wants auto, f32 or bf16, got '%s'", t);
    }
    return 0;
}
