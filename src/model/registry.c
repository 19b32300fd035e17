/* model/registry.c: the list of model families and the KV cache rules every part of
 * celer shares (see registry.h). Adding a family is its description file plus one
 * line in FAMILIES below (docs/howto.md, "Add a model family"). */
#include <stdio.h>
#include <string.h>

#include "model/registry.h"

/* One line per family, in the order the loader tries them: X(f) names the
 * family_desc `family_f` that the family's description file defines. A new family
 * adds its line above the last one (which ends the list). */
#define FAMILIES(X) \
    X(llama)        \
    X(qwen3)        \
    X(gemma3)       \
    X(gemma4)       \
    X(gpt_oss)      \
    X(exaone4)      \
    X(qwen2)        \
    X(mistral)      \
    X(phi3)         \
    X(gemma2)       \
    X(mixtral)      \
    X(smollm3)      \
    X(olmo2)        \
    /* end of the list */

#define DECLARE(f) extern const family_desc family_##f;
FAMILIES(DECLARE)
#undef DECLARE

#define ENTRY(f) &family_##f,
static const family_desc *const families[] = {FAMILIES(ENTRY)};
#undef ENTRY
#define N_FAMILIES ((int)(sizeof families / sizeof families[0]))
_Static_assert(N_FAMILIES <= REGISTRY_MAX, "more families than REGISTRY_MAX");

const family_desc *const *registry_families(int *n) {
    *n = N_FAMILIES;
    return families;
}

const family_desc *registry_find(const char *type) {
    for (int i = 0; i < N_FAMILIES; i++)
        for (const char *const *t = families[i]->model_types; *t; t++)
            if (strcmp(*t, type) == 0) return families[i];
    return NULL;
}

void registry_model_types(char *buf, size_t n) {
    size_t k = 0;
    if (!n) return;
    buf[0] = 0;
    for (int i = 0; i < N_FAMILIES; i++)
        for (const char *const *t = families[i]->model_types; *t && k < n; t++)
            k += (size_t)snprintf(buf + k, n - k, "%s%s", k ? ", " : "", *t);
}

registry_layer_kv registry_layer_cache(const model *m, int l, int ctx) {
    const layer_plan *p = &m->plan[l];
    registry_layer_kv r = {KV_DENSE, p->kv_source >= 0, 0, 2 * (uint64_t)p->n_kv * (uint64_t)p->head_dim * (uint64_t)kv_dtype_size(m->kv_dtype)};
    if (p->window > 0 && p->window < ctx) {
        r.kind = KV_ROTATING;
        r.window = p->window;
    }
    return r;
}

int registry_layer_rows(const model *m, int l, int n_tokens) {
    if (n_tokens <= 0) return 0;
    /* the cache a session of exactly n_tokens would have, full */
    registry_layer_kv c = registry_layer_cache(m, l, n_tokens);
    return c.shared ? 0 : c.kind == KV_ROTATING ? c.window : n_tokens;
}

uint64_t registry_kv_bytes(const model *m, int n_tokens) {
    uint64_t b = 0;
    for (int l = 0; l < m->cfg.n_layers; l++)
        b += (uint64_t)registry_layer_rows(m, l, n_tokens) * registry_layer_cache(m, l, n_tokens).row_bytes;
    return b;
}
