/* kv/prompt_cache.h: a prompt cache: values (session snapshots, opaque here) keyed
 * by token sequences in a radix tree (edges hold runs of tokens; a node without a
 * value has at least two children), kept in least-recently-used order, evicted
 * oldest first while their bytes exceed a budget.
 *
 * Lookup answers "how many leading tokens of this request can a cached value
 * serve": a value whose key is a prefix of the request serves its whole key; a
 * value whose key shares a longer prefix with the request serves that shared
 * prefix if it can be taken back to it (ops.can_rewind; dense caches can, wrapped
 * rotating caches usually cannot). Not thread-safe. */
#ifndef CELER_KV_PROMPT_CACHE_H
#define CELER_KV_PROMPT_CACHE_H
#include <stddef.h>
#include <stdint.h>

typedef struct {
    void (*free_value)(void *value);
    /* 0 when value can be taken back to its first p tokens (p < its key length) */
    int (*can_rewind)(const void *value, int p);
} pc_ops;

typedef struct pc_tree pc_tree;

/* An empty cache holding at most budget bytes of values. NULL on out of memory. */
pc_tree *pc_new(size_t budget, const pc_ops *ops);
/* Frees every value (ops.free_value) and the tree. NULL ok. */
void pc_free(pc_tree *t);

/* Keeps value under key [n] (n > 0), accounted as bytes, as the most recently
 * used entry; replaces (and frees) a value with the same key; then evicts the least
 * recently used entries until the total fits the budget. Takes ownership of value
 * in every case (frees it on failure). Returns the entry's id (> 0), or 0 with a
 * message when the value alone exceeds the budget or memory runs out. */
uint64_t pc_insert(pc_tree *t, const int32_t *key, int n, void *value, size_t bytes);

/* The longest prefix of q [n] a cached value can serve (0: none), at most n, and n
 * only when a key equals q (a key that q is a strict prefix of serves n - 1: the
 * caller needs the last token's logits). *id and *value get the entry; it becomes
 * the most recently used. */
int pc_lookup(pc_tree *t, const int32_t *q, int n, uint64_t *id, void **value);

/* The value of entry id and its key length, or NULL when it was evicted/replaced. */
void *pc_get(const pc_tree *t, uint64_t id, int *key_len);

int pc_count(const pc_tree *t);
size_t pc_bytes(const pc_tree *t);
size_t pc_budget(const pc_tree *t);

/* Calls fn for every entry, least recently used first; stops at a non-zero return
 * and returns it. */
int pc_foreach(const pc_tree *t, int (*fn)(void *ctx, const int32_t *key, int n, void *value), void *ctx);

/* 1 when the tree and the LRU list are consistent; 0 with a message otherwise. */
int pc_sane(const pc_tree *t);
#endif
