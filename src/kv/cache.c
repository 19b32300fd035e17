/* kv/cache.c: the dense per-layer KV cache. Rows are written in place at the end;
 * growth reallocates in KV_STEP-row steps, never per token. */
#include "kv/cache.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

kv_cache *kv_dense_new(int n_kv, int head_dim, int max) {
    if (n_kv <= 0 || head_dim <= 0 || max <= 0) {
        err_set("kv cache: bad shape (n_kv %d, head_dim %d, max %d)", n_kv, head_dim, max);
        return NULL;
    }
    kv_cache *c = calloc(1, sizeof *c);
    if (!c) { err_set("out of memory creating kv cache"); return NULL; }
    c->kind = KV_DENSE;
    c->n_kv = n_kv;
    c->head_dim = head_dim;
    c->row = (long)n_kv * head_dim;
    c->max = max;
    return c;
}

void kv_free(kv_cache *c) {
    if (!c) return;
    free(c->k);
    free(c->v);
    free(c->pos);
    free(c);
}

static int grow(kv_cache *c, int need) {
    int cap = c->cap;
    while (cap < need) cap += KV_STEP;
    if (cap > c->max) cap = c->max;
    size_t bytes = (size_t)cap * (size_t)c->row * sizeof(float);
    float *k = realloc(c->k, bytes);
    if (!k) return err_set("out of memory growing kv cache to %d rows", cap);
    c->k = k;
    float *v = realloc(c->v, bytes);
    if (!v) return err_set("out of memory growing kv cache to %d rows", cap);
    c->v = v;
    int32_t *p = realloc(c->pos, (size_t)cap * sizeof *p);
    if (!p) return err_set("out of memory growing kv cache to %d rows", cap);
    c->pos = p;
    c->cap = cap;
    return 0;
}

int kv_append(kv_cache *c, const float *k, const float *v, const int32_t *pos, int T) {
    if (T < 0 || c->n + T > c->max)
        return err_set("context full: %d cached + %d new tokens exceed the context size %d (raise --ctx-size)",
                       c->n, T, c->max);
    if (c->n + T > c->cap && grow(c, c->n + T) != 0) return -1;
    memcpy(c->k + (long)c->n * c->row, k, (size_t)T * (size_t)c->row * sizeof(float));
    memcpy(c->v + (long)c->n * c->row, v, (size_t)T * (size_t)c->row * sizeof(float));
    memcpy(c->pos + c->n, pos, (size_t)T * sizeof *pos);
    c->n += T;
    return 0;
}

void kv_view(const kv_cache *c, attn_kv *out) {
    out->k = c->k;
    out->v = c->v;
    out->pos = c->pos;
    out->n = c->n;
    out->row_stride = c->row;
}

void kv_truncate(kv_cache *c, int n) {
    if (n >= 0 && n < c->n) c->n = n;
}

size_t kv_bytes(const kv_cache *c) {
    return c ? (size_t)c->cap * ((size_t)c->row * 2 * sizeof(float) + sizeof(int32_t)) : 0;
}
