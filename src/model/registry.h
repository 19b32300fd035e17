/* model/registry.h: the family registry, the one place that answers what the loader
 * reads and what a loaded model's KV cache is. Its list of families (registry.c, one
 * line each) is what model_open searches, what `celer arch` prints and what the
 * loader's "unknown model_type" error names. Its cache rules are what sessions build
 * (engine/session.c), what `celer inspect` and `celer bench` report and what the
 * server's /metrics counts:
 *   - a layer that reads another layer's cache (plan kv_source >= 0, Gemma 4 KV
 *     sharing) holds no rows;
 *   - a layer whose window is shorter than the context gets a rotating cache that
 *     holds its last `window` rows; any other layer a dense cache that holds every
 *     token;
 *   - a row is the layer's keys and values, float32: 2 * n_kv * head_dim * 4 bytes.
 * Nothing here knows a family by name: each family's description (model/llama.c,
 * gemma.c, ...) fills the layer plan, and these rules read the plan. */
#ifndef CELER_MODEL_REGISTRY_H
#define CELER_MODEL_REGISTRY_H
#include <stddef.h>
#include <stdint.h>

#include "model/model.h"

/* The most families the registry holds (tables of them are sized by it). */
#define REGISTRY_MAX 64

/* The families, in the order model_open tries them; *n gets their count. Static
 * storage; never fails. */
const family_desc *const *registry_families(int *n);
/* The family that reads config.json model_type `type`; NULL when none does. */
const family_desc *registry_find(const char *type);
/* Every model_type the registry reads, ", "-separated in registry order, into buf
 * (truncated to n bytes, always terminated): the loader's error lists it. */
void registry_model_types(char *buf, size_t n);

/* What one layer's cache is for a session of ctx tokens of context. */
typedef struct {
    kv_kind kind;        /* KV_ROTATING when 0 < window < ctx, else KV_DENSE */
    int shared;          /* reads layer kv_source's cache: its own stays empty */
    int window;          /* the rows a rotating cache keeps (0 for a dense one) */
    uint64_t row_bytes;  /* bytes of one row: keys and values, float32 */
} registry_layer_kv;

/* The cache of layer l of m in a session of ctx tokens of context. */
registry_layer_kv registry_layer_cache(const model *m, int l, int ctx);
/* Rows layer l holds with n_tokens tokens in its context after single-token steps
 * (a prompt chunk of T tokens briefly adds up to T - 1 to a rotating cache): 0 for
 * a shared layer, min(n_tokens, window) for a sliding layer, n_tokens otherwise. The
 * same whether the session's context made the cache rotating or dense: a window the
 * context does not exceed is never filled. */
int registry_layer_rows(const model *m, int l, int n_tokens);
/* Bytes of keys and values every layer of m holds with n_tokens tokens of context
 * (the sum of registry_layer_rows x row_bytes). */
uint64_t registry_kv_bytes(const model *m, int n_tokens);
#endif
