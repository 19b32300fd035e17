/* kv/cache.h: per-layer KV caches (dense and rotating) over reference-counted row
 * buffers. A cache owns nothing but a reference to its buffer and its view of it:
 * slots [0, n) of the buffer, each a row of keys and values ([n_kv, head_dim],
 * float32, or bf16 when the cache's dtype says so) with the absolute position it was
 * computed at. Attention reads
 * those slots in place through kv_view; slot order is irrelevant to it (it masks by
 * position), which is what lets a rotating cache overwrite its oldest slot.
 *
 * Ownership rule (checked by kv_sane, counted in kv_stats):
 *   - A buffer has a reference count (its holders: live caches and snapshots) and a
 *     high-water mark hw: slots [0, hw) may be visible to some holder, slots >= hw
 *     to none. Every holder has n <= hw.
 *   - A write touches slots in place only when the writing cache is the buffer's
 *     sole holder, or when every slot it touches lies at or past hw and it has
 *     claimed them (an atomic compare-and-swap of hw from its own n): appending past
 *     every snapshot's rows cannot change what any snapshot sees.
 *   - Otherwise the write first copies the cache's own view into a buffer it alone
 *     holds (copy-on-write), keeping slot order, then writes in place there. A host
 *     buffer is a block table over the pool (kv/pool.h), so that copy is a new table
 *     holding the same blocks, and a block is copied only when the write touches it
 *     while another table still holds it (counted in cow_blocks): a block with more
 *     than one holder is never written.
 *   - With inplace == 0 (CELER_KV_INPLACE_WRITE=0) every write takes the copy path.
 *     Both paths produce the same slots in the same order, so attention sums in
 *     the same order and results are bit-identical.
 *
 * Buffers take blocks of KV_BLOCK rows from the pool as rows arrive, so growth
 * never moves rows and pointers stay valid for other holders; a rotating cache's
 * window lives in its blocks and is overwritten slot by slot. A cache whose `dev`
 * names a device backend takes its blocks from that GPU's pool (kv_pool_device):
 * rows and positions in device memory, the positions also on the host, and the block
 * table mirrored to the device (kv_buf.dtable) for the kernels; every rule above is
 * the same. Reference counts and hw are atomic: snapshots may be shared across
 * threads; a single cache is used by one thread at a time. */
#ifndef CELER_KV_CACHE_H
#define CELER_KV_CACHE_H
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "kv/pool.h"

#define KV_STEP 256

typedef enum { KV_DENSE, KV_ROTATING } kv_kind;

/* Counters of what writes did. A cache adds to the kv_stats it points at (if any)
 * and to the process-wide totals (kv_stats_global). */
typedef struct {
    uint64_t inplace_rows;   /* new rows written into a buffer without copying it first */
    uint64_t copied_bytes;   /* bytes of existing rows copied or moved (not the new rows) */
    uint64_t cow_copies;     /* buffer copies (sharing or the copying path) */
    uint64_t allocs;         /* buffers created plus commit steps or pool blocks taken (memory acquired) */
    uint64_t cow_blocks;     /* pool blocks copied because a write touched a block another table holds */
    uint64_t row_writes;     /* appends' and compactions' row writes and moves, one per run of slots in a block
                              * (on a device, one launch each) */
} kv_stats;

/* A row buffer shared by reference: a block table. Slot s lives in block
 * table[s / KV_BLOCK] of the pool class cls (host memory, or a device pool's class
 * for a device cache: rows and positions on the device, positions also on the host).
 * Slots past cap have no block. */
typedef struct {
    atomic_int refs;         /* holders */
    atomic_int hw;           /* slots [0, hw) may be visible to some holder */
    atomic_int cap;          /* slots committed (a multiple of KV_BLOCK) */
    int reserve;             /* slots the table has entries for */
    long row;                /* elements per row: n_kv * head_dim */
    int dtype;               /* kv_dtype of k and v */
    backend *dev;            /* NULL: host memory; else that device's memory */
    kv_pclass *cls;          /* the pool class holding the rows */
    int32_t *table;          /* [ceil(reserve / KV_BLOCK)] block ids, the first cap / KV_BLOCK held */
    int32_t *dtable;         /* dev: device copy of table, what the kernels read (kept in step) */
} kv_buf;

typedef struct {
    kv_kind kind;
    int n_kv, head_dim;
    long row;        /* elements per row: n_kv * head_dim */
    int dtype;       /* kv_dtype of the rows (KVT_F32 unless set before the first write) */
    int max;         /* dense: rows it may hold (the context limit) */
    int window;      /* rotating: W, keys a query may see (itself included) */
    int keep;        /* rotating: the first `keep` rows written are never dropped */
    int max_T;       /* most rows one write adds */
    int n;           /* valid slots: the view is slots [0, n) of buf */
    int claim;       /* slots [n, claim) claimed past hw in a shared buffer (0: none) */
    int inplace;     /* 0: every write copies the buffer first (A/B, safety valve) */
    int ready_T;     /* > 0: kv_prepare already ran for a write of ready_T rows at ready_p0 */
    int32_t ready_p0;
    int ready_copied; /* that kv_prepare copied the buffer */
    kv_buf *buf;     /* shared by reference; NULL until the first write */
    kv_buf *spare;   /* a buffer this cache alone holds, recycled by the copy path */
    kv_stats *stats; /* borrowed; may be NULL */
    backend *dev;    /* borrowed: a device backend whose memory holds the rows, or NULL */
    kv_pool *pool;   /* borrowed: the pool host rows come from (NULL: kv_pool_default()) */
} kv_cache;

/* A dense cache for up to max rows (positions absolute, rows in write order). Takes
 * at most max_T rows per write. Allocates nothing until the first write. NULL with
 * a message on bad arguments. */
kv_cache *kv_dense_new(int n_kv, int head_dim, int max, int max_T);
/* A rotating cache: attention with window W needs, before a write at position p,
 * the rows at positions > p - W, plus the first `keep` rows (0 <= keep < W). It
 * holds at most W - 1 + max_T rows (a chunk crossing the window keeps the W - 1 old
 * rows its first query needs); in steady decode it holds W rows and each step
 * overwrites the oldest. max bounds the positions ever written (the context). */
kv_cache *kv_rotating_new(int n_kv, int head_dim, int window, int keep, int max, int max_T);
/* Drops this holder's reference (freeing the buffer with the last one). NULL ok. */
void kv_free(kv_cache *c);

/* A new holder of c's rows (a snapshot or a restored copy): O(1), no row is copied;
 * it takes max_T rows per write and counts into stats (may be NULL). The inplace
 * setting is copied. c forgets a pending kv_prepare (its buffer is now shared).
 * NULL on out of memory. */
kv_cache *kv_share(kv_cache *c, int max_T, kv_stats *stats);

/* Makes the next kv_append of T rows starting at position p0 unable to fail: copies
 * the buffer if the write would touch shared slots (or inplace is 0), commits
 * memory, claims slots. c's contents are unchanged either way; -1 on out of memory
 * or when the rows do not fit (context full). */
int kv_prepare(kv_cache *c, int32_t p0, int T);
/* Writes T rows (k, v: [T, n_kv, head_dim]) at positions pos [T] (consecutive,
 * after every position held). A rotating cache first drops the rows no future
 * query can see. -1 on error (see kv_prepare), leaving the cache unchanged. */
int kv_append(kv_cache *c, const float *k, const float *v, const int32_t *pos, int T);
/* Fills an empty cache with n rows in the given slot order (k, v: [n, n_kv,
 * head_dim] float32 host memory, pos [n], rounded to the cache's dtype), as a cache
 * file stores them; check kv_sane afterwards.
 * -1 when c is not empty or memory runs out. */
int kv_set_rows(kv_cache *c, const float *k, const float *v, const int32_t *pos, int n);
/* What attention reads: slots [0, n) and their positions, in place (device
 * pointers for a device cache). */
void kv_view(const kv_cache *c, attn_kv *out);
/* Host float32 copies of the view's keys, values and positions in slot order
 * ([n, n_kv, head_dim], [n, n_kv, head_dim], [n]; caller frees all three; bf16 rows
 * widened exactly), gathered from blocks or downloaded from the device. All NULL
 * when the cache has no buffer. -1 on out of memory. */
int kv_rows_to_host(const kv_cache *c, float **k, float **v, int32_t **pos);
/* The position slot s holds (a test hook for breaking invariants). */
int32_t *kv_slot_pos(kv_cache *c, int s);

/* 0 when the cache can go back to holding positions [0, p) exactly as if only
 * those had been written (the rows a query at p needs are all still here); -1 with
 * a message naming what is missing otherwise. A dense cache can always go back. */
int kv_can_truncate(const kv_cache *c, int32_t p);
/* Drops every row at position >= p (after kv_can_truncate). Moving rows to close
 * holes is a write (copy-on-write when shared). -1 leaves the cache unchanged. */
int kv_truncate(kv_cache *c, int32_t p);

/* Makes c (typically a fresh kv_share) behave as a cache of the given kind for a
 * session with context max and batch max_T: a dense cache's rows are a valid
 * rotating state; a rotating cache becomes dense only if it holds every position
 * from 0 in order. -1 with a message otherwise (c unchanged). */
int kv_adopt(kv_cache *c, kv_kind kind, int window, int keep, int max, int max_T);

/* Gives back the blocks past c's rows to the pool when c is its
 * buffer's sole holder: a snapshot that outlived the session that grew its buffer
 * keeps only what it sees. Returns the bytes released (0 when shared or tight). */
size_t kv_trim(kv_cache *c);

/* Positions held: lowest and highest (both -1 when empty). */
void kv_pos_range(const kv_cache *c, int32_t *lo, int32_t *hi);
/* Bytes of memory committed to c's buffer (its blocks; shared bytes counted for
 * each holder). */
size_t kv_bytes(const kv_cache *c);
/* Bytes of the rows c's view holds (keys, values, positions). */
size_t kv_view_bytes(const kv_cache *c);
/* 1 when c's invariants hold (see the ownership rule); 0 with a message otherwise. */
int kv_sane(const kv_cache *c);
/* Reads CELER_KV_INPLACE_WRITE (unset or not "0": in place allowed). */
int kv_inplace_default(void);

/* Process-wide totals of every cache's counters (a documented registry; atomic). */
void kv_stats_global(kv_stats *out);
void kv_stats_add(kv_stats *into, const kv_stats *d);

/* Test hook (a documented registry): when set, writes into shared slots go in place
 * without copying. It exists so tests can show that the sharing tests fail when the
 * ownership rule is broken. Never set outside tests. */
void kv_test_ignore_sharing(int on);
#endif
