/* kv/cache.h: per-layer KV caches. A cache owns its rows of keys and values
 * (float32, [rows, n_kv, head_dim]) and the absolute position of each row; attention
 * reads them in place through kv_view. The plan of each layer names its cache kind.
 * Only the dense kind exists yet: it grows in steps of KV_STEP rows up to its limit. */
#ifndef CELER_KV_CACHE_H
#define CELER_KV_CACHE_H
#include <stdint.h>

#include "backend/backend.h"

#define KV_STEP 256

typedef enum { KV_DENSE } kv_kind;

typedef struct {
    kv_kind kind;
    int n_kv, head_dim;
    long row;        /* floats per row: n_kv * head_dim */
    int max;         /* rows it may ever hold (the context limit) */
    int cap;         /* rows allocated */
    int n;           /* valid rows */
    float *k;        /* [cap, n_kv, head_dim] */
    float *v;        /* [cap, n_kv, head_dim] */
    int32_t *pos;    /* [cap] absolute position of each row */
} kv_cache;

/* A dense cache for up to max rows; allocates lazily. NULL on bad arguments. */
kv_cache *kv_dense_new(int n_kv, int head_dim, int max);
void kv_free(kv_cache *c);
/* Appends T rows (k, v: [T, n_kv, head_dim]) at positions pos [T]. Fails, leaving
 * the cache unchanged, when the rows would exceed the limit or memory runs out. */
int kv_append(kv_cache *c, const float *k, const float *v, const int32_t *pos, int T);
/* What attention reads: valid rows in order, with their positions. */
void kv_view(const kv_cache *c, attn_kv *out);
/* Keeps the first n rows (n <= c->n). */
void kv_truncate(kv_cache *c, int n);
/* Bytes allocated. */
size_t kv_bytes(const kv_cache *c);
#endif
