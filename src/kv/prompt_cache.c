/* kv/prompt_cache.c: the prompt cache's radix tree over token sequences and its
 * LRU list. Invariants (pc_sane): every non-root node has a non-empty edge; the
 * children of a node start with distinct tokens; a node's depth is its parent's
 * plus its edge length; a non-root node without an entry has two or more
 * children; the LRU list holds every entry once and the byte total is their sum. */
#include "kv/prompt_cache.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"

typedef struct pc_node pc_node;

typedef struct pc_entry {
    uint64_t id;
    void *value;
    size_t bytes;
    int32_t *key;            /* [n] */
    int n;
    uint64_t used;           /* tick of the last insert or lookup */
    pc_node *node;
    struct pc_entry *newer, *older;
} pc_entry;

struct pc_node {
    int32_t *edge;           /* [len] tokens from the parent to this node */
    int len, depth;          /* depth: tokens from the root through this edge */
    pc_node *parent;
    pc_node **kids;          /* [n_kids] */
    int n_kids, cap_kids;
    pc_entry *entry;         /* the value keyed by the path to here, or NULL */
};

struct pc_tree {
    pc_node root;
    pc_ops ops;
    size_t budget, bytes;
    int count;
    uint64_t next_id, tick;
    pc_entry *newest, *oldest;
};

/* ---- nodes -------------------------------------------------------------------- */

static pc_node *node_new(pc_node *parent, const int32_t *edge, int len) {
    pc_node *n = calloc(1, sizeof *n);
    if (!n || !(n->edge = malloc((size_t)(len ? len : 1) * sizeof *edge))) {
        free(n);
        err_set("prompt cache: out of memory");
        return NULL;
    }
    memcpy(n->edge, edge, (size_t)len * sizeof *edge);
    n->len = len;
    n->parent = parent;
    n->depth = parent->depth + len;
    return n;
}

static int kid_add(pc_node *p, pc_node *k) {
    if (p->n_kids == p->cap_kids) {
        int cap = p->cap_kids ? 2 * p->cap_kids : 2;
        pc_node **kk = realloc(p->kids, (size_t)cap * sizeof *kk);
        if (!kk) return err_set("prompt cache: out of memory");
        p->kids = kk;
        p->cap_kids = cap;
    }
    p->kids[p->n_kids++] = k;
    k->parent = p;
    return 0;
}

static pc_node *kid_find(const pc_node *p, int32_t tok) {
    for (int i = 0; i < p->n_kids; i++)
        if (p->kids[i]->edge[0] == tok) return p->kids[i];
    return NULL;
}

static void kid_replace(pc_node *p, pc_node *old, pc_node *nw) {
    for (int i = 0; i < p->n_kids; i++)
        if (p->kids[i] == old) p->kids[i] = nw;
    nw->parent = p;
}

static void kid_remove(pc_node *p, pc_node *k) {
    for (int i = 0; i < p->n_kids; i++)
        if (p->kids[i] == k) {
            p->kids[i] = p->kids[--p->n_kids];
            return;
        }
}

static void node_free_tree(pc_tree *t, pc_node *n) {
    for (int i = 0; i < n->n_kids; i++) node_free_tree(t, n->kids[i]);
    free(n->kids);
    free(n->edge);
    if (n != &t->root) free(n);
}

/* Splits k's edge after c tokens: a new node takes the first c and becomes k's parent. */
static pc_node *split(pc_node *k, int c) {
    pc_node *p = k->parent, *mid = node_new(p, k->edge, c);
    if (!mid) return NULL;
    if (kid_add(mid, k) != 0) {
        free(mid->edge);
        free(mid);
        return NULL;
    }
    memmove(k->edge, k->edge + c, (size_t)(k->len - c) * sizeof *k->edge);
    k->len -= c;
    kid_replace(p, k, mid);
    k->parent = mid;
    return mid;
}

/* After n lost its entry or a child: drop it if useless, merge it into its only child. */
static void prune(pc_tree *t, pc_node *n) {
    while (n != &t->root && !n->entry && n->n_kids == 0) {
        pc_node *p = n->parent;
        kid_remove(p, n);
        free(n->kids);
        free(n->edge);
        free(n);
        n = p;
    }
    if (n == &t->root || n->entry || n->n_kids != 1) return;
    pc_node *k = n->kids[0];
    int32_t *e = malloc((size_t)(n->len + k->len) * sizeof *e);
    if (!e) return; /* stays uncompressed; still correct */
    memcpy(e, n->edge, (size_t)n->len * sizeof *e);
    memcpy(e + n->len, k->edge, (size_t)k->len * sizeof *e);
    free(k->edge);
    k->edge = e;
    k->len += n->len;
    kid_replace(n->parent, n, k);
    free(n->kids);
    free(n->edge);
    free(n);
}

/* ---- LRU ---------------------------------------------------------------------- */

static void lru_unlink(pc_tree *t, pc_entry *e) {
    if (e->newer) e->newer->older = e->older;
    else t->newest = e->older;
    if (e->older) e->older->newer = e->newer;
    else t->oldest = e->newer;
    e->newer = e->older = NULL;
}

static void lru_push(pc_tree *t, pc_entry *e) {
    e->older = t->newest;
    e->newer = NULL;
    if (t->newest) t->newest->newer = e;
    t->newest = e;
    if (!t->oldest) t->oldest = e;
    e->used = ++t->tick;
}

static void entry_drop(pc_tree *t, pc_entry *e) {
    lru_unlink(t, e);
    pc_node *n = e->node;
    n->entry = NULL;
    t->bytes -= e->bytes;
    t->count--;
    t->ops.free_value(e->value);
    free(e->key);
    free(e);
    prune(t, n);
}

/* ---- public ------------------------------------------------------------------- */

pc_tree *pc_new(size_t budget, const pc_ops *ops) {
    pc_tree *t = calloc(1, sizeof *t);
    if (!t) { err_set("prompt cache: out of memory"); return NULL; }
    t->ops = *ops;
    t->budget = budget;
    t->next_id = 1;
    return t;
}

void pc_free(pc_tree *t) {
    if (!t) return;
    while (t->oldest) entry_drop(t, t->oldest);
    node_free_tree(t, &t->root);
    free(t);
}

uint64_t pc_insert(pc_tree *t, const int32_t *key, int n, void *value, size_t bytes) {
    if (n <= 0) {
        t->ops.free_value(value);
        err_set("prompt cache: an entry needs at least one token");
        return 0;
    }
    if (bytes > t->budget) {
        t->ops.free_value(value);
        err_set("prompt cache: an entry of %zu bytes exceeds the budget of %zu bytes", bytes, t->budget);
        return 0;
    }
    pc_node *node = &t->root;
    pc_entry *e = calloc(1, sizeof *e);
    if (!e || !(e->key = malloc((size_t)n * sizeof *key))) goto oom;
    memcpy(e->key, key, (size_t)n * sizeof *key);
    /* find or make the node for key */
    int i = 0;
    while (i < n) {
        pc_node *k = kid_find(node, key[i]);
        if (!k) {
            pc_node *leaf = node_new(node, key + i, n - i);
            if (!leaf || kid_add(node, leaf) != 0) {
                if (leaf) { free(leaf->edge); free(leaf); }
                goto oom;
            }
            node = leaf;
            i = n;
            break;
        }
        int c = 0;
        while (c < k->len && i + c < n && k->edge[c] == key[i + c]) c++;
        if (c < k->len && !(k = split(k, c))) goto oom;
        node = k;
        i += c;
    }
    if (node->entry) { /* same key: the new value replaces the old */
        pc_entry *old = node->entry;
        lru_unlink(t, old);
        t->bytes -= old->bytes;
        t->count--;
        t->ops.free_value(old->value);
        free(old->key);
        free(old);
        node->entry = NULL;
    }
    e->id = t->next_id++;
    e->value = value;
    e->bytes = bytes;
    e->n = n;
    e->node = node;
    node->entry = e;
    t->bytes += bytes;
    t->count++;
    lru_push(t, e);
    while (t->bytes > t->budget && t->oldest != e) entry_drop(t, t->oldest);
    return e->id;
oom:
    prune(t, node);
    if (e) free(e->key);
    free(e);
    t->ops.free_value(value);
    err_set("prompt cache: out of memory inserting an entry of %d tokens", n);
    return 0;
}

/* The most recently used entry under n (itself included) that can go back to p. */
static pc_entry *best_below(const pc_tree *t, const pc_node *n, int p, pc_entry *best) {
    if (n->entry && n->entry->n > p && (!best || n->entry->used > best->used) && t->ops.can_rewind(n->entry->value, p) == 0)
        best = n->entry;
    for (int i = 0; i < n->n_kids; i++) best = best_below(t, n->kids[i], p, best);
    return best;
}

int pc_lookup(pc_tree *t, const int32_t *q, int n, uint64_t *id, void **value) {
    pc_entry *best = NULL;
    int best_len = 0;
    const pc_node *node = &t->root, *below = NULL;
    int i = 0, shared = 0;
    for (;;) {
        if (node->entry && node->depth <= n) {
            best = node->entry;
            best_len = node->depth;
        }
        if (i == n) {
            shared = n;
            below = node;
            break;
        }
        const pc_node *k = kid_find(node, q[i]);
        if (!k) {
            shared = i;
            below = node;
            break;
        }
        int c = 0;
        while (c < k->len && i + c < n && k->edge[c] == q[i + c]) c++;
        if (c < k->len) {
            shared = i + c;
            below = k;
            break;
        }
        node = k;
        i += c;
    }
    /* a longer key that shares `shared` tokens, taken back (to n - 1 at most) */
    int p = shared < n ? shared : n - 1;
    if (p > best_len) {
        pc_entry *e = best_below(t, below, p, NULL);
        if (e) {
            best = e;
            best_len = p;
        }
    }
    if (!best || best_len == 0) {
        *id = 0;
        *value = NULL;
        return 0;
    }
    lru_unlink(t, best);
    lru_push(t, best);
    *id = best->id;
    *value = best->value;
    return best_len;
}

void *pc_get(const pc_tree *t, uint64_t id, int *key_len) {
    for (const pc_entry *e = t->newest; e; e = e->older)
        if (e->id == id) {
            if (key_len) *key_len = e->n;
            return e->value;
        }
    return NULL;
}

int pc_count(const pc_tree *t) { return t->count; }
size_t pc_bytes(const pc_tree *t) { return t->bytes; }
size_t pc_budget(const pc_tree *t) { return t->budget; }

int pc_foreach(const pc_tree *t, int (*fn)(void *ctx, const int32_t *key, int n, void *value), void *ctx) {
    for (const pc_entry *e = t->oldest; e; e = e->newer) {
        int rc = fn(ctx, e->key, e->n, e->value);
        if (rc) return rc;
    }
    return 0;
}

/* Checks the subtree under n; adds its entries and bytes. */
static int node_sane(const pc_tree *t, const pc_node *n, int *count, size_t *bytes) {
    if (n != &t->root) {
        if (n->len <= 0) return err_set("prompt cache: empty edge at depth %d", n->depth);
        if (n->depth != n->parent->depth + n->len) return err_set("prompt cache: depth %d after %d + %d", n->depth, n->parent->depth, n->len);
        if (!n->entry && n->n_kids < 2) return err_set("prompt cache: node at depth %d has no entry and %d children", n->depth, n->n_kids);
    }
    if (n->entry) {
        if (n->entry->node != n || n->entry->n != n->depth) return err_set("prompt cache: entry at depth %d is misplaced", n->depth);
        (*count)++;
        *bytes += n->entry->bytes;
    }
    for (int i = 0; i < n->n_kids; i++) {
        if (n->kids[i]->parent != n) return err_set("prompt cache: child %d at depth %d has another parent", i, n->depth);
        for (int j = 0; j < i; j++)
            if (n->kids[j]->edge[0] == n->kids[i]->edge[0]) return err_set("prompt cache: two children start with token %d", n->kids[i]->edge[0]);
        if (node_sane(t, n->kids[i], count, bytes) != 0) return -1;
    }
    return 0;
}

int pc_sane(const pc_tree *t) {
    int count = 0, listed = 0;
    size_t bytes = 0;
    if (node_sane(t, &t->root, &count, &bytes) != 0) return 0;
    for (const pc_entry *e = t->oldest; e; e = e->newer) {
        listed++;
        if (e->newer && e->newer->older != e) return !err_set("prompt cache: LRU links broken");
        if (e->newer && e->newer->used <= e->used) return !err_set("prompt cache: LRU order broken");
    }
    if (count != t->count || listed != t->count || bytes != t->bytes)
        return !err_set("prompt cache: %d entries in the tree, %d listed, count %d; %zu bytes, total %zu", count, listed,
                        t->count, bytes, t->bytes);
    if (t->bytes > t->budget) return !err_set("prompt cache: %zu bytes over the budget %zu", t->bytes, t->budget);
    return 1;
}
