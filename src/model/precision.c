/* model/precision.c: the arithmetic a model runs with, chosen once when it opens:
 * the precision (fast or exact: CELER_PRECISION, `--precision`) and the KV cache's
 * element type (CELER_KV_DTYPE). On the GPU, fast (the default) rounds activations
 * once to bf16 into one-term tensor-core products and keeps a bf16 KV cache; exact
 * splits activations into two bf16 terms and keeps a float32 cache. On the CPU exact
 * is the default; fast (asked for) rounds the activations of prefill bf16 products to
 * bf16 and of 4/8-bit products to per-block int8 or int16 (backend/cpu/fast.c) and
 * keeps a bf16 cache too (half the bytes a decode step's attention reads;
 * docs/cpu-kernels.md "Precision").
 * Mixture-of-experts models take the exact arithmetic whatever is asked (measured:
 * see below). */
#include <string.h>

#include "base/err.h"
#include "base/settings.h"
#include "model/model.h"

int model_precision_fast(int on_device) {
    const char *p = setting_str(SET_CELER_PRECISION);
    return p ? strcmp(p, "fast") == 0 : on_device; /* unset: fast on a GPU, exact on the CPU */
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
        m->kv_dtype = KVT_BF16;
    } else {
        return err_set("CELER_KV_DTYPE wants auto, f32 or bf16, got '%s'", t);
    }
    return 0;
}
