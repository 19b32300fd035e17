/* kv/pool.c: the KV block pool (see kv/pool.h): classes by row shape over reserved
 * address space (host: mmap; device: the backend's vm_reserve), ids handed out from
 * a free list under a byte budget, memory committed per block on first use (host:
 * mprotect; device: vm_map in granules), atomic reference counts. */
#include "kv/pool.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "base/err.h"
#include "backend/backend.h"

#define POOL_CLASSES 64 /* distinct row shapes one pool serves (a model has one to three) */

struct kv_pool {
    pthread_mutex_t mu;
    size_t budget, used;
    long used_blocks, committed;
    _Atomic uint64_t cow_blocks;
    int n_classes;
    kv_pclass *classes[POOL_CLASSES];
    int device;                 /* -1: host memory */
    const backend_ops *ops;     /* device: its vm_* functions */
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
    p->device = -1;
    return p;
}

int kv_pool_device_id(const kv_pool *p) { return p->device; }

static void class_destroy(kv_pclass *c) {
    if (!c) return;
    size_t nb = (size_t)c->max_blocks;
    if (c->device >= 0) {
        const backend_ops *o = c->pool->ops;
        const size_t g = c->granule, kvr = (nb * kv_bytes_of(c) + g - 1) / g * g;
        if (c->k) o->vm_free(c->device, c->k, kvr, c->mapped_k);
        if (c->v) o->vm_free(c->device, c->v, kvr, c->mapped_v);
        if (c->dpos) o->vm_free(c->device, c->dpos, (nb * KV_BLOCK * sizeof(int32_t) + g - 1) / g * g, c->mapped_pos);
        c->k = c->v = NULL;
    }
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

/* ---- device pools: one per GPU ---- */

#define MAX_GPUS 64
static pthread_mutex_t g_dev_mu = PTHREAD_MUTEX_INITIALIZER;
static kv_pool *g_dev[MAX_GPUS];
static size_t g_rule_bytes;
static double g_rule_frac;

/* The budget the rule gives p's GPU, counting held as free (0: cannot tell). */
static size_t rule_budget(const kv_pool *p, size_t held) {
    if (g_rule_bytes) return g_rule_bytes;
    size_t fr = 0, tot = 0;
    if (p->ops->mem_info(p->device, &fr, &tot) != 0) return 0;
    if (g_rule_frac > 0) return (size_t)(g_rule_frac * (double)(fr + held));
    return tot;
}

kv_pool *kv_pool_device(backend *dev) {
    const int d = dev->device_id;
    if (!dev->ops->vm_reserve || !dev->ops->vm_map || !dev->ops->vm_free || !dev->ops->mem_info || d < 0 || d >= MAX_GPUS) {
        err_set("kv pool: %s cannot map device memory for KV blocks", dev->ops->name);
        return NULL;
    }
    pthread_mutex_lock(&g_dev_mu);
    kv_pool *p = g_dev[d];
    if (!p) {
        kv_pool probe = {.device = d, .ops = dev->ops};
        size_t budget = rule_budget(&probe, 0);
        if (budget && (p = kv_pool_new(budget))) {
            p->device = d;
            p->ops = dev->ops;
            g_dev[d] = p;
        }
        if (!budget) err_prefix("kv pool: GPU %d", d);
    }
    pthread_mutex_unlock(&g_dev_mu);
    return p;
}

kv_pool *kv_pool_device_any(void) {
    pthread_mutex_lock(&g_dev_mu);
    kv_pool *p = NULL;
    for (int d = 0; d < MAX_GPUS && !p; d++) p = g_dev[d];
    pthread_mutex_unlock(&g_dev_mu);
    return p;
}

void kv_pool_device_budget(size_t bytes, double frac) {
    pthread_mutex_lock(&g_dev_mu);
    g_rule_bytes = bytes;
    g_rule_frac = bytes ? 0 : frac;
    for (int d = 0; d < MAX_GPUS; d++) {
        kv_pool *p = g_dev[d];
        if (!p) continue;
        pthread_mutex_lock(&p->mu);
        size_t held = p->used;
        pthread_mutex_unlock(&p->mu);
        size_t b = rule_budget(p, held);
        if (b) kv_pool_set_budget(p, b);
    }
    pthread_mutex_unlock(&g_dev_mu);
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
        c->device = p->device;
        /* the whole budget's address space, or as much as the process may map (an
         * RLIMIT_AS): halve until it fits */
        for (; nb >= 1 && c->device >= 0; nb /= 2) { /* device: the backend's address space */
            const backend_ops *o = p->ops;
            size_t g1 = 0, g2 = 0, g3 = 0;
            c->k = o->vm_reserve(c->device, nb * kv_bytes_of(c), &g1);
            c->v = c->k ? o->vm_reserve(c->device, nb * kv_bytes_of(c), &g2) : NULL;
            c->dpos = c->v ? o->vm_reserve(c->device, nb * KV_BLOCK * sizeof(int32_t), &g3) : NULL;
            c->pos = c->dpos ? reserve(nb * KV_BLOCK * sizeof(int32_t)) : NULL;
            c->granule = g1;
            if (c->pos) break;
            const size_t kvr = (nb * kv_bytes_of(c) + g1 - 1) / (g1 ? g1 : 1) * g1;
            if (c->k) o->vm_free(c->device, c->k, kvr, 0);
            if (c->v) o->vm_free(c->device, c->v, kvr, 0);
            if (c->dpos) o->vm_free(c->device, c->dpos, (nb * KV_BLOCK * sizeof(int32_t) + g1 - 1) / (g1 ? g1 : 1) * g1, 0);
            c->k = c->v = NULL;
            c->dpos = NULL;
        }
        for (; nb >= 1 && c->device < 0; nb /= 2) {
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

/* A device class: maps granules until the first `want` bytes of k and v (and the
 * positions of the same blocks) are backed. Ids are first handed out in order, so the
 * mapped part only grows from the base. */
static int map_to(kv_pclass *c, void *base, size_t *mapped, size_t want) {
    if (want <= *mapped) return 0;
    const size_t to = (want + c->granule - 1) / c->granule * c->granule;
    if (c->pool->ops->vm_map(c->device, (char *)base + *mapped, to - *mapped) != 0) return -1;
    *mapped = to;
    return 0;
}

static int commit_device(kv_pclass *c, int32_t id) {
    const size_t want = (size_t)(id + 1) * kv_bytes_of(c), wpos = (size_t)(id + 1) * KV_BLOCK * sizeof(int32_t);
    if (map_to(c, c->k, &c->mapped_k, want) != 0 || map_to(c, c->v, &c->mapped_v, want) != 0 ||
        map_to(c, c->dpos, &c->mapped_pos, wpos) != 0)
        return -1;
    const size_t pb = KV_BLOCK * sizeof(int32_t), p0 = page_floor((size_t)id * pb), p1 = page_round((size_t)(id + 1) * pb);
    if (mprotect((char *)c->pos + p0, p1 - p0, PROT_READ | PROT_WRITE) != 0)
        return err_set("kv pool: out of memory committing a block's positions");
    return 0;
}

/* Makes block id's memory usable (pages shared with neighbours may already be). */
static int commit(kv_pclass *c, int32_t id) {
    if (c->device >= 0) return commit_device(c, id);
    size_t kb = kv_bytes_of(c), pb = KV_BLOCK * sizeof(int32_t);
    size_t k0 = page_floor((size_t)id * kb), k1 = page_round((size_t)(id + 1) * kb);
    size_t p0 = page_floor((size_t)id * pb), p1 = page_round((size_t)(id + 1) * pb);
    if (mprotect((char *)c->k + k0, k1 - k0, PROT_READ | PROT_WRITE) != 0 ||
        mprotect((char *)c->v + k0, k1 - k0, PROT_READ | PROT_WRITE) != 0 ||
        mprotect((char *)c->pos + p0, p1 - p0, PROT_READ | PROT_WRITE) != 0)
        return err_set("kv pool: out of memory committing a block of %ld-element rows", c->row);
#ifdef MADV_POPULATE_WRITE
    /* The block's rows are written within its next 64 tokens anyway; faulting its
     * pages in here, in one call, replaces a fault per 4 KiB page in the middle of a
     * forward (CPU prefill +3-25%, decode unchanged: docs/benchmarks/cpu-core.md).
     * A kernel without it (before Linux 5.14) says EINVAL and the pages fault as before. */
    (void)madvise((char *)c->k + k0, k1 - k0, MADV_POPULATE_WRITE);
    (void)madvise((char *)c->v + k0, k1 - k0, MADV_POPULATE_WRITE);
#endif
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
