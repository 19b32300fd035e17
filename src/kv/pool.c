/* kv/pool.c: the KV block pool (see kv/pool.h): classes by row shape over reserved
 * address space, ids handed out from a free list under a byte budget, memory
 * committed per block on first use, atomic reference counts. */
#include "kv/pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/err.h"
#include "backend/backend.h"

#define POOL_CLASSES 16 /* distinct row shapes one pool serves (a model has one to three) */

struct kv_pool {
    pthread_mutex_t mu;
    size_t budget, used;
    long used_blocks, committed;
    _Atomic uint64_t cow_blocks;
    int n_classes;
    kv_pclass *classes[POOL_CLASSES];
};

static size_t page_size(void) { return (size_t)sysconf(_SC_PAGESIZE); }
static size_t page_round(size_t n) { return (n + page_size() - 1) / page_size() * page_size(); }
static size_t page_floor(size_t n) { return n / page_size() * page_size(); }

static void *reserve(size_t bytes) {
    void *p = mmap(NULL, page_round(bytes ? bytes : 1), PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

static size_t kv_bytes_of(const kv_pclass *c) { return (size_t)KV_BLOCK * (size_t)c->row * (size_t)kv_dtype_size(c->dtype); }

size_t kv_block_bytes(const kv_pclass *cls) { return 2 * kv_bytes_of(cls) + KV_BLOCK * sizeof(int32_t); }

kv_pool *kv_pool_new(size_t budget_bytes) {
    if (budget_bytes == 0) { err_set("kv pool: a budget of 0 bytes"); return NULL; }
    kv_pool *p = calloc(1, sizeof *p);
    if (!p) { err_set("kv pool: out of memory"); return NULL; }
    pthread_mutex_init(&p->mu, NULL);
    p->budget = budget_bytes;
    return p;
}

static void class_destroy(kv_pclass *c) {
    if (!c) return;
    size_t nb = (size_t)c->max_blocks;
    if (c->k) munmap(c->k, page_round(nb * kv_bytes_of(c)));
    if (c->v) munmap(c->v, page_round(nb * kv_bytes_of(c)));
    if (c->pos) munmap(c->pos, page_round(nb * KV_BLOCK * sizeof(int32_t)));
    if (c->refs) munmap(c->refs, page_round(nb * sizeof(atomic_int)));
    if (c->free_ids) munmap(c->free_ids, page_round(nb * sizeof(int32_t)));
    free(c);
}

int kv_pool_free(kv_pool *p) {
    if (!p) return 0;
    if (p->used_blocks) return err_set("kv pool: freed with %ld blocks still held", p->used_blocks);
    for (int i = 0; i < p->n_classes; i++) class_destroy(p->classes[i]);
    pthread_mutex_destroy(&p->mu);
    free(p);
    return 0;
}

static kv_pool *g_default;
static pthread_once_t g_default_once = PTHREAD_ONCE_INIT;

static void default_init(void) {
    long pages = sysconf(_SC_PHYS_PAGES);
    size_t bytes = pages > 0 ? (size_t)pages * page_size() : (size_t)1 << 34;
    g_default = kv_pool_new(bytes);
}

kv_pool *kv_pool_default(void) {
    pthread_once(&g_default_once, default_init);
    return g_default;
}

kv_pclass *kv_pool_class(kv_pool *p, long row, int dtype) {
    pthread_mutex_lock(&p->mu);
    kv_pclass *c = NULL;
    for (int i = 0; i < p->n_classes; i++)
        if (p->classes[i]->row == row && p->classes[i]->dtype == dtype) c = p->classes[i];
    if (c || p->n_classes == POOL_CLASSES) {
        pthread_mutex_unlock(&p->mu);
        if (!c) err_set("kv pool: more than %d row shapes", POOL_CLASSES);
        return c;
    }
    c = calloc(1, sizeof *c);
    if (c) {
        c->row = row;
        c->dtype = dtype;
        c->pool = p;
        size_t nb = p->budget / kv_block_bytes(c);
        if (nb > (size_t)INT32_MAX / KV_BLOCK) nb = (size_t)INT32_MAX / KV_BLOCK;
        if (nb < 1) nb = 1;
        /* the whole budget's address space, or as much as the process may map (an
         * RLIMIT_AS): halve until it fits */
        for (; nb >= 1; nb /= 2) {
            c->k = reserve(nb * kv_bytes_of(c));
            c->v = c->k ? reserve(nb * kv_bytes_of(c)) : NULL;
            c->pos = c->v ? reserve(nb * KV_BLOCK * sizeof(int32_t)) : NULL;
            if (c->pos) break;
            if (c->k) munmap(c->k, page_round(nb * kv_bytes_of(c)));
            if (c->v) munmap(c->v, page_round(nb * kv_bytes_of(c)));
            c->k = c->v = NULL;
        }
        if (nb < 1) nb = 1;
        c->max_blocks = (int)nb;
        /* bookkeeping: zero pages committed as they are touched */
        void *r = mmap(NULL, page_round(nb * sizeof(atomic_int)), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        c->refs = r == MAP_FAILED ? NULL : r;
        void *f = mmap(NULL, page_round(nb * sizeof(int32_t)), PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        c->free_ids = f == MAP_FAILED ? NULL : f;
        if (!c->k || !c->v || !c->pos || !c->refs || !c->free_ids) {
            class_destroy(c);
            c = NULL;
        } else {
            p->classes[p->n_classes++] = c;
        }
    }
    pthread_mutex_unlock(&p->mu);
    if (!c) err_set("kv pool: cannot reserve address space for rows of %ld elements", row);
    return c;
}

/* Makes block id's memory usable (pages shared with neighbours may already be). */
static int commit(kv_pclass *c, int32_t id) {
    size_t kb = kv_bytes_of(c), pb = KV_BLOCK * sizeof(int32_t);
    size_t k0 = page_floor((size_t)id * kb), k1 = page_round((size_t)(id + 1) * kb);
    size_t p0 = page_floor((size_t)id * pb), p1 = page_round((size_t)(id + 1) * pb);
    if (mprotect((char *)c->k + k0, k1 - k0, PROT_READ | PROT_WRITE) != 0 ||
        mprotect((char *)c->v + k0, k1 - k0, PROT_READ | PROT_WRITE) != 0 ||
        mprotect((char *)c->pos + p0, p1 - p0, PROT_READ | PROT_WRITE) != 0)
        return err_set("kv pool: out of memory committing a block of %ld-element rows", c->row);
    return 0;
}

int32_t kv_block_take(kv_pclass *c) {
    kv_pool *p = c->pool;
    size_t bb = kv_block_bytes(c);
    pthread_mutex_lock(&p->mu);
    int32_t id = -1;
    if (p->used + bb > p->budget) {
        size_t budget = p->budget, used = p->used;
        pthread_mutex_unlock(&p->mu);
        err_set("KV cache budget exhausted: %zu of %zu bytes in use, a block needs %zu more (raise --kv-budget or "
                "lower -c / -np)", used, budget, bb);
        return -1;
    }
    if (c->n_free > 0) {
        id = c->free_ids[--c->n_free];
    } else if (c->next < c->max_blocks && commit(c, c->next) == 0) {
        id = c->next++;
        p->committed++;
    }
    if (id >= 0) {
        p->used += bb;
        p->used_blocks++;
        atomic_store(&c->refs[id], 1);
    }
    pthread_mutex_unlock(&p->mu);
    if (id < 0 && c->next >= c->max_blocks) err_set("kv pool: all %d blocks of %ld-element rows are in use", c->max_blocks, c->row);
    return id;
}

void kv_block_ref(kv_pclass *c, int32_t id) { atomic_fetch_add(&c->refs[id], 1); }

void kv_block_drop(kv_pclass *c, int32_t id) {
    if (atomic_fetch_sub(&c->refs[id], 1) != 1) return;
    kv_pool *p = c->pool;
    pthread_mutex_lock(&p->mu);
    c->free_ids[c->n_free++] = id;
    p->used -= kv_block_bytes(c);
    p->used_blocks--;
    pthread_mutex_unlock(&p->mu);
}

int kv_block_refs(const kv_pclass *c, int32_t id) { return atomic_load(&c->refs[id]); }

void kv_pool_count_cow(kv_pool *p) { atomic_fetch_add_explicit(&p->cow_blocks, 1, memory_order_relaxed); }

int kv_pool_set_budget(kv_pool *p, size_t budget_bytes) {
    if (budget_bytes == 0) return err_set("kv pool: a budget of 0 bytes");
    pthread_mutex_lock(&p->mu);
    p->budget = budget_bytes;
    pthread_mutex_unlock(&p->mu);
    return 0;
}

void kv_pool_stats_get(kv_pool *p, kv_pool_stats *out) {
    pthread_mutex_lock(&p->mu);
    out->budget_bytes = p->budget;
    out->used_bytes = p->used;
    out->used_blocks = p->used_blocks;
    out->committed_blocks = p->committed;
    pthread_mutex_unlock(&p->mu);
    out->cow_blocks = atomic_load(&p->cow_blocks);
}

long kv_pool_free_blocks(kv_pool *p, const kv_pclass *cls) {
    pthread_mutex_lock(&p->mu);
    size_t left = p->budget > p->used ? p->budget - p->used : 0;
    long room = (long)cls->max_blocks - cls->next + cls->n_free;
    pthread_mutex_unlock(&p->mu);
    long n = (long)(left / kv_block_bytes(cls));
    return n < room ? n : room;
}
