/* kv/pool.h: the block pool KV caches take their rows from. A block holds KV_BLOCK
 * consecutive slots of one layer's cache: keys and values ([KV_BLOCK, row] each) and
 * the absolute position of each slot ([KV_BLOCK]). A pool has one byte budget and
 * one class per row shape (row width, element type): a class reserves address space
 * for every block the budget could ever give it, so block b's rows sit at
 * base + b * KV_BLOCK rows and a cache's block table is a list of block ids (what
 * attention reads through, backend attn_kv.blocks). Blocks carry reference counts:
 * caches that share a prefix hold the same blocks, and a block with more than one
 * reference is never written (kv/cache.c copies it first and counts the copy).
 *
 * Memory is committed block by block as ids are first handed out; a released block
 * goes back on its class's free list (the memory stays with the pool, as vLLM's
 * preallocated pool does). Taking a block when the budget is spent fails with a
 * message naming the budget. Thread safe: ids come and go under a mutex, reference
 * counts are atomic.
 *
 * A device pool (kv_pool_device: one per GPU, for the life of the process, as the
 * host's default pool) keeps k, v and a copy of the positions in device memory: each
 * class reserves device address space for its blocks and maps memory into it as ids
 * are first handed out (backend vm_reserve / vm_map), so the layout and every rule
 * above are the host's; the positions have a host copy (pos) beside the device one
 * (dpos) for the cache's bookkeeping. */
#ifndef CELER_KV_POOL_H
#define CELER_KV_POOL_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

/* Slots per block: a multiple of every attention kernel's key tile (CPU avx512: 16
 * keys; CUDA flash attention: 64; batched decode splits: 256 = 4 blocks), so a tile
 * never straddles two blocks and a kernel looks the table up once per tile. */
#define KV_BLOCK 64

typedef struct kv_pool kv_pool;

/* One row shape's blocks. The pointers are bases: slot r of block b is row
 * b * KV_BLOCK + r of k, v and pos. */
typedef struct {
    long row;               /* elements per row (n_kv * head_dim) */
    int dtype;              /* kv_dtype of k and v (KVT_F32 on the host) */
    int max_blocks;         /* address space reserved, in blocks */
    void *k, *v;            /* [max_blocks * KV_BLOCK, row] */
    int32_t *pos;           /* [max_blocks * KV_BLOCK] (host memory, also for a device class) */
    atomic_int *refs;       /* [max_blocks] holders of each block (0: free) */
    kv_pool *pool;
    int device;             /* -1: host memory; else k, v and dpos are on this GPU */
    int32_t *dpos;          /* device: [max_blocks * KV_BLOCK] positions, what attention reads */
    size_t granule;         /* device: mapping granularity */
    size_t mapped_k, mapped_v, mapped_pos; /* device: bytes of k, v and dpos mapped so far */
    /* under the pool's mutex */
    int32_t *free_ids;      /* [max_blocks] released ids, a stack */
    int n_free;
    int next;               /* ids [0, next) have been handed out at least once */
} kv_pclass;

typedef struct {
    size_t budget_bytes;    /* the most the pool's blocks may take */
    size_t used_bytes;      /* bytes of blocks held by some cache */
    long used_blocks;       /* blocks held by some cache (every class) */
    long committed_blocks;  /* blocks whose memory is committed (held or on a free list) */
    uint64_t cow_blocks;    /* blocks copied because a writer shared them (kv/cache.c) */
} kv_pool_stats;

/* A pool of at most budget_bytes of blocks (keys, values and positions). NULL with
 * a message on out of memory or budget_bytes == 0. */
kv_pool *kv_pool_new(size_t budget_bytes);
/* Frees the pool and its memory; every block must have been released (a held
 * block is a caller bug: the pool then stays allocated and -1 is returned). NULL ok. */
int kv_pool_free(kv_pool *p);
/* The process-wide pool caches use when given none: its budget is the machine's
 * physical memory. Never freed. */
kv_pool *kv_pool_default(void);

/* The pool device caches on dev's GPU take blocks from (created on first use with the
 * budget rule of kv_pool_device_budget; never freed). NULL with a message when dev has
 * no device memory functions. */
kv_pool *kv_pool_device(backend *dev);
/* The budget of device pools, now and later: bytes > 0, or else frac (0, 1] of the
 * GPU's free memory when the pool is created or the rule set (its own blocks counted
 * as free); both 0: the GPU's whole memory (the default). Out-of-memory when mapping
 * still fails a block with a message. */
void kv_pool_device_budget(size_t bytes, double frac);
/* The device pool of the lowest GPU that has one, or NULL (what the process's
 * caches draw from when a model runs on a GPU; celer_kv_pool_get reports it). */
kv_pool *kv_pool_device_any(void);
/* -1 for a host pool, else its GPU. */
int kv_pool_device_id(const kv_pool *p);

/* The class of p for rows of `row` elements of dtype (created on first use). NULL
 * with a message when memory or address space runs out. */
kv_pclass *kv_pool_class(kv_pool *p, long row, int dtype);
/* Bytes one block of cls takes from the budget. */
size_t kv_block_bytes(const kv_pclass *cls);
/* A block with one reference, its memory committed; -1 with a message naming the
 * budget when the budget or the class's address space is spent. */
int32_t kv_block_take(kv_pclass *cls);
/* One more holder of block id. */
void kv_block_ref(kv_pclass *cls, int32_t id);
/* One holder less; the last one returns the block to the free list. */
void kv_block_drop(kv_pclass *cls, int32_t id);
/* Holders of block id. */
int kv_block_refs(const kv_pclass *cls, int32_t id);
/* Counts a block copied on write (kv/cache.c). */
void kv_pool_count_cow(kv_pool *p);

/* A new budget (> 0); classes keep the address space they reserved, so a budget
 * above the first one reaches at most what they reserved (the default pool reserves
 * the machine's physical memory). -1 on 0. */
int kv_pool_set_budget(kv_pool *p, size_t budget_bytes);
void kv_pool_stats_get(kv_pool *p, kv_pool_stats *out);
/* Blocks of cls the budget still allows (free list and never used), for admission. */
long kv_pool_free_blocks(kv_pool *p, const kv_pclass *cls);
#endif
