/* kv/cache.c: per-layer KV caches (dense, rotating) over reference-counted row
 * buffers. A slot is written in place only by its buffer's sole holder, or past the
 * buffer's high-water mark by the holder that claimed it; any other write copies the
 * holder's view first (see the ownership rule in kv/cache.h). A host buffer is a
 * block table over the pool (kv/pool.h): its copy shares the blocks by reference,
 * and a block is copied only when a write touches it while another table holds it.
 * A device buffer does the same over its GPU's pool. Rows are float32 or bf16
 * (kv_buf.dtype): copies move bytes, writes from float32 rows round to bf16.
 *
 * Sections: counters; buffers (reserve, commit, copy); write planning; append;
 * truncate; inspection. */
#include "base/settings.h"
#include "kv/cache.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "tensor/dtype.h"

/* attention kernels read a tile of keys as one run of rows (backend attn_kv) */
_Static_assert(KV_BLOCK % 64 == 0, "KV_BLOCK must be a multiple of the attention key tiles");

/* ---- counters ----------------------------------------------------------------- */

static _Atomic uint64_t g_inplace_rows, g_copied_bytes, g_cow_copies, g_allocs, g_cow_blocks, g_row_writes;
static atomic_int g_ignore_sharing;

static void count(kv_cache *c, uint64_t inplace_rows, uint64_t copied_bytes, uint64_t cow, uint64_t allocs) {
    if (c->stats) {
        c->stats->inplace_rows += inplace_rows;
        c->stats->copied_bytes += copied_bytes;
        c->stats->cow_copies += cow;
        c->stats->allocs += allocs;
    }
    atomic_fetch_add_explicit(&g_inplace_rows, inplace_rows, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_copied_bytes, copied_bytes, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_cow_copies, cow, memory_order_relaxed);
    atomic_fetch_add_explicit(&g_allocs, allocs, memory_order_relaxed);
}

static void count_row_writes(kv_cache *c, int runs) {
    if (c->stats) c->stats->row_writes += (uint64_t)runs;
    atomic_fetch_add_explicit(&g_row_writes, (uint64_t)runs, memory_order_relaxed);
}

static void count_cow_block(kv_cache *c) {
    if (c->stats) c->stats->cow_blocks++;
    atomic_fetch_add_explicit(&g_cow_blocks, 1, memory_order_relaxed);
    kv_pool_count_cow(c->buf->cls->pool);
}

void kv_stats_global(kv_stats *out) {
    out->inplace_rows = atomic_load(&g_inplace_rows);
    out->copied_bytes = atomic_load(&g_copied_bytes);
    out->cow_copies = atomic_load(&g_cow_copies);
    out->allocs = atomic_load(&g_allocs);
    out->cow_blocks = atomic_load(&g_cow_blocks);
    out->row_writes = atomic_load(&g_row_writes);
}

void kv_stats_add(kv_stats *into, const kv_stats *d) {
    into->inplace_rows += d->inplace_rows;
    into->copied_bytes += d->copied_bytes;
    into->cow_copies += d->cow_copies;
    into->allocs += d->allocs;
    into->cow_blocks += d->cow_blocks;
    into->row_writes += d->row_writes;
}

void kv_test_ignore_sharing(int on) { atomic_store(&g_ignore_sharing, on); }

int kv_inplace_default(void) {
    return setting_flag(SET_CELER_KV_INPLACE_WRITE);
}

/* ---- buffers ------------------------------------------------------------------ */

/* Bytes of one row of keys and values of dtype plus its position. */
static size_t row_bytes(long row, int dtype) { return (size_t)row * 2 * (size_t)kv_dtype_size(dtype) + sizeof(int32_t); }

/* Bytes of n rows of one of k, v. */
static size_t rows_bytes(const kv_buf *b, long n) { return (size_t)n * (size_t)b->row * (size_t)kv_dtype_size(b->dtype); }

/* Blocks of a paged buffer's table. */
static int table_len(int reserve) { return (reserve + KV_BLOCK - 1) / KV_BLOCK; }

/* Index of slot s in the buffer's k, v and pos (paged: into the pool class). */
static long slot_index(const kv_buf *b, int s) {
    return b->table ? (long)b->table[s / KV_BLOCK] * KV_BLOCK + s % KV_BLOCK : (long)s;
}

/* The position stored in slot s (host memory either way). */
static int32_t *pos_at(const kv_buf *b, int s) { return b->cls->pos + slot_index(b, s); }

int32_t *kv_slot_pos(kv_cache *c, int s) { return pos_at(c->buf, s); }

static char *k_at(const kv_buf *b, int s) {
    return (char *)b->cls->k + rows_bytes(b, slot_index(b, s));
}
static char *v_at(const kv_buf *b, int s) {
    return (char *)b->cls->v + rows_bytes(b, slot_index(b, s));
}

/* Slots [s, s + n) of a paged buffer that lie in one block, from s. */
static int run_len(const kv_buf *b, int s, int n) {
    if (!b->table) return n;
    int r = KV_BLOCK - s % KV_BLOCK;
    return r < n ? r : n;
}

/* The device copy of table entries [i0, i1) (what the kernels read): uploaded in
 * stream order, so a step queued after it reads the new entries. */
static void table_sync(kv_buf *b, int i0, int i1) {
    if (b->dev && b->dtable && i1 > i0)
        b->dev->ops->upload(b->dev, b->dtable + i0, b->table + i0, (size_t)(i1 - i0) * sizeof(int32_t));
}

static void buf_unmap(kv_buf *b) {
    if (!b->table) return;
    for (int i = 0; i < atomic_load(&b->cap) / KV_BLOCK; i++) kv_block_drop(b->cls, b->table[i]);
    free(b->table);
    if (b->dtable) b->dev->ops->release(b->dev, b->dtable);
}

static void buf_destroy(kv_buf *b) {
    if (!b) return;
    buf_unmap(b);
    free(b);
}

/* A buffer for `reserve` rows with none committed and one holder: an empty block
 * table over c's pool (a device cache's: its GPU's pool, kv_pool_device), mirrored
 * to the device for a device cache. */
static kv_buf *buf_new(kv_cache *c, int reserve) {
    backend *dev = c->dev;
    kv_buf *b = calloc(1, sizeof *b);
    if (!b) { err_set("kv cache: out of memory creating a buffer"); return NULL; }
    b->row = c->row;
    b->dtype = c->dtype;
    b->reserve = reserve;
    b->dev = dev;
    atomic_init(&b->refs, 1);
    atomic_init(&b->hw, 0);
    atomic_init(&b->cap, 0);
    kv_pool *pool = c->pool ? c->pool : dev ? kv_pool_device(dev) : kv_pool_default();
    b->cls = pool ? kv_pool_class(pool, c->row, b->dtype) : NULL;
    b->table = b->cls ? calloc((size_t)table_len(reserve), sizeof(int32_t)) : NULL;
    if (b->table && dev && !(b->dtable = dev->ops->alloc(dev, (size_t)table_len(reserve) * sizeof(int32_t))))
        err_prefix("kv cache: the device block table of %d rows", reserve);
    if (!b->table || (dev && !b->dtable)) {
        if (b->cls && !b->table) err_set("kv cache: out of memory for a block table of %d rows", reserve);
        free(b->table);
        free(b);
        return NULL;
    }
    return b;
}

/* Commits slots [0, top) of b: takes blocks from the pool (one alloc each). */
static int buf_commit(kv_cache *c, kv_buf *b, int top) {
    int cap = atomic_load(&b->cap);
    if (top <= cap) return 0;
    const int i0 = cap / KV_BLOCK;
    int rc = 0;
    while (cap < top) {
        int32_t id = kv_block_take(b->cls);
        if (id < 0) {
            rc = err_prefix("kv cache: %d rows", top);
            break;
        }
        b->table[cap / KV_BLOCK] = id;
        cap += KV_BLOCK;
        atomic_store(&b->cap, cap);
        count(c, 0, 0, 0, 1);
    }
    table_sync(b, i0, cap / KV_BLOCK);
    return rc;
}

/* Drops one reference to b; the last holder frees it, or keeps a device buffer as
 * c's spare (host blocks go back to the pool, which recycles them). */
static void buf_release(kv_cache *c, kv_buf *b) {
    if (!b || atomic_fetch_sub(&b->refs, 1) != 1) return;
    if (c && !c->spare && !b->table) {
        atomic_store(&b->refs, 1);
        atomic_store(&b->hw, 0);
        c->spare = b;
    } else {
        buf_destroy(b);
    }
}

/* Rows a buffer of this cache reserves: everything it may hold at once. */
static int reserve_rows(const kv_cache *c, int top) {
    int r = c->kind == KV_DENSE ? c->max : c->window - 1 + c->max_T;
    if (c->kind == KV_ROTATING && r > c->max) r = c->max;
    if (r < top) r = top;
    if (r < c->n) r = c->n;
    return r;
}

/* Slots [d, d + n) of dst <- slots [s, s + n) of src (same row width and memory),
 * in runs that stay inside one block of each (device: through the backend's copy).
 * Returns the runs. */
static int copy_rows(kv_buf *dst, int d, const kv_buf *src, int s, int n) {
    int runs = 0;
    for (; n > 0; runs++) {
        int r = run_len(dst, d, n), r2 = run_len(src, s, r);
        memmove(pos_at(dst, d), pos_at(src, s), (size_t)r2 * sizeof(int32_t));
        if (dst->dev) {
            backend *b = dst->dev;
            b->ops->copy(b, k_at(dst, d), k_at(src, s), rows_bytes(dst, r2));
            b->ops->copy(b, v_at(dst, d), v_at(src, s), rows_bytes(dst, r2));
            b->ops->copy(b, dst->cls->dpos + slot_index(dst, d), src->cls->dpos + slot_index(src, s),
                         (size_t)r2 * sizeof(int32_t));
        } else {
            memmove(k_at(dst, d), k_at(src, s), rows_bytes(dst, r2));
            memmove(v_at(dst, d), v_at(src, s), rows_bytes(dst, r2));
        }
        d += r2, s += r2, n -= r2;
    }
    return runs;
}

/* Slots [s, s + n) of b <- rows k, v [n, row] (memory of b's kind) at positions pos
 * [n] (host), in runs that stay inside one block (device: the backend's put_rows at
 * the run's pool slot). Returns the runs. */
static int put_rows(kv_buf *b, int s, const float *k, const float *v, const int32_t *pos, int n) {
    int runs = 0;
    for (; n > 0; runs++) {
        int r = run_len(b, s, n);
        memcpy(pos_at(b, s), pos, (size_t)r * sizeof(int32_t));
        if (b->dev) {
            b->dev->ops->put_rows(b->dev, b->cls->k, b->cls->v, b->cls->dpos, b->row, (int)slot_index(b, s), k, v, pos, r,
                                  b->dtype);
        } else if (b->dtype == KVT_BF16) { /* rounded to nearest even, as the device's put_rows */
            uint16_t *kd = (uint16_t *)k_at(b, s), *vd = (uint16_t *)v_at(b, s);
            for (long i = 0; i < (long)r * b->row; i++) {
                kd[i] = f32_to_bf16(k[i]);
                vd[i] = f32_to_bf16(v[i]);
            }
        } else {
            memcpy(k_at(b, s), k, rows_bytes(b, r));
            memcpy(v_at(b, s), v, rows_bytes(b, r));
        }
        s += r, n -= r, pos += r;
        k += (long)r * b->row;
        v += (long)r * b->row;
    }
    return runs;
}

/* Rows of block i that c's view holds. */
static int view_rows_in(const kv_cache *c, int i) {
    int r = c->n - i * KV_BLOCK;
    return r < 0 ? 0 : r > KV_BLOCK ? KV_BLOCK : r;
}

/* Puts a fresh block at entry i of b's table holding the first `rows` rows of
 * block `src`; the caller keeps or drops its reference to src. */
static int copy_block(kv_cache *c, kv_buf *b, int i, int32_t src, int rows) {
    int32_t nid = kv_block_take(b->cls);
    if (nid < 0) return err_prefix("kv cache: copying a shared block");
    size_t kb = rows_bytes(b, rows), off = rows_bytes(b, (long)nid * KV_BLOCK), ooff = rows_bytes(b, (long)src * KV_BLOCK);
    if (b->dev) {
        backend *d = b->dev;
        d->ops->copy(d, (char *)b->cls->k + off, (const char *)b->cls->k + ooff, kb);
        d->ops->copy(d, (char *)b->cls->v + off, (const char *)b->cls->v + ooff, kb);
        d->ops->copy(d, b->cls->dpos + (long)nid * KV_BLOCK, b->cls->dpos + (long)src * KV_BLOCK, (size_t)rows * sizeof(int32_t));
    } else {
        memcpy((char *)b->cls->k + off, (const char *)b->cls->k + ooff, kb);
        memcpy((char *)b->cls->v + off, (const char *)b->cls->v + ooff, kb);
    }
    memcpy(b->cls->pos + (long)nid * KV_BLOCK, b->cls->pos + (long)src * KV_BLOCK, (size_t)rows * sizeof(int32_t));
    b->table[i] = nid;
    table_sync(b, i, i + 1);
    count(c, 0, (uint64_t)rows * row_bytes(c->row, b->dtype), 0, 1);
    count_cow_block(c);
    return 0;
}

/* Makes block i of c's (paged, unshared) buffer one that no other table holds:
 * copies the view's rows in it into a fresh block (copy-on-write at block
 * granularity). A block past the view never needs it (its rows are nobody's). */
static int own_block(kv_cache *c, int i) {
    kv_buf *b = c->buf;
    int32_t id = b->table[i];
    if (kv_block_refs(b->cls, id) == 1 || atomic_load(&g_ignore_sharing)) return 0;
    if (copy_block(c, b, i, id, view_rows_in(c, i)) != 0) return -1;
    kv_block_drop(b->cls, id);
    return 0;
}

/* 1 when every block holding slots [s0, s1) of c's buffer (that exists) has one holder. */
static int blocks_exclusive(const kv_cache *c, int s0, int s1) {
    const kv_buf *b = c->buf;
    if (!b->table || s1 <= s0) return 1;
    int cap = atomic_load(&b->cap);
    for (int i = s0 / KV_BLOCK; i * KV_BLOCK < s1 && i * KV_BLOCK < cap; i++)
        if (kv_block_refs(b->cls, b->table[i]) != 1 && !atomic_load(&g_ignore_sharing)) return 0;
    return 1;
}

/* Owns (own_block) every block holding slots [s0, s1). */
static int own_range(kv_cache *c, int s0, int s1) {
    kv_buf *b = c->buf;
    if (!b->table) return 0;
    int cap = atomic_load(&b->cap);
    for (int i = s0 / KV_BLOCK; i * KV_BLOCK < s1 && i * KV_BLOCK < cap; i++)
        if (own_block(c, i) != 0) return -1;
    return 0;
}

/* Copy-on-write: gives c a buffer it alone holds with its view's slots [0, n) in the
 * same order, room for `top` slots, and drops its reference to the old one. A paged
 * buffer's copy is a new table holding the same blocks (no row moves; a block is
 * copied when a write touches it, own_block), except on the copying path
 * (inplace 0), which copies every block of the view now. */
static int cow(kv_cache *c, int top) {
    int reserve = reserve_rows(c, top);
    kv_buf *nb = NULL;
    if (c->spare && c->spare->reserve >= reserve && c->spare != c->buf) {
        nb = c->spare;
        c->spare = NULL;
    } else {
        if (!(nb = buf_new(c, reserve))) return -1;
        count(c, 0, 0, 0, 1);
    }
    if (nb->table && c->buf && c->n > 0) {
        /* The block the coming write goes into (the one holding slot n) is copied
         * now, never shared by reference: a holder appending past the old buffer's
         * high-water mark under its claim checks that its blocks have one holder,
         * and a reference taken here only to be dropped a moment later would make
         * it copy too. */
        const int nblk = table_len(c->n), eager = top > c->n && c->n % KV_BLOCK ? c->n / KV_BLOCK : -1;
        for (int i = 0; i < nblk; i++) {
            if (i != eager) {
                nb->table[i] = c->buf->table[i];
                kv_block_ref(nb->cls, nb->table[i]);
            } else if (copy_block(c, nb, i, c->buf->table[i], view_rows_in(c, i)) != 0) {
                atomic_store(&nb->cap, i * KV_BLOCK);
                buf_destroy(nb);
                return -1;
            }
        }
        atomic_store(&nb->cap, nblk * KV_BLOCK);
        table_sync(nb, 0, nblk);
    }
    if (buf_commit(c, nb, top) != 0) {
        if (!c->spare && !nb->table) c->spare = nb;
        else buf_destroy(nb);
        return -1;
    }
    if (nb->table) {
        kv_buf *old = c->buf;
        c->buf = nb; /* own_block works on c->buf */
        int bad = 0;
        if (!c->inplace)
            for (int i = 0; i < table_len(c->n) && !bad; i++) bad = own_block(c, i);
        c->buf = old;
        if (bad) {
            buf_destroy(nb);
            return -1;
        }
        if (c->n > 0) count(c, 0, 0, 1, 0);
    } else if (c->buf && c->n > 0) {
        copy_rows(nb, 0, c->buf, 0, c->n);
        count(c, 0, (uint64_t)c->n * row_bytes(c->row, c->buf ? c->buf->dtype : c->dtype), 1, 0);
    }
    atomic_store(&nb->hw, c->n);
    buf_release(c, c->buf);
    c->buf = nb;
    c->claim = 0;
    return 0;
}

/* ---- creation ----------------------------------------------------------------- */

static kv_cache *cache_new(kv_kind kind, int n_kv, int head_dim, int max, int max_T) {
    kv_cache *c = calloc(1, sizeof *c);
    if (!c) { err_set("kv cache: out of memory"); return NULL; }
    c->kind = kind;
    c->n_kv = n_kv;
    c->head_dim = head_dim;
    c->row = (long)n_kv * head_dim;
    c->max = max;
    c->max_T = max_T;
    c->inplace = kv_inplace_default();
    return c;
}

kv_cache *kv_dense_new(int n_kv, int head_dim, int max, int max_T) {
    if (n_kv <= 0 || head_dim <= 0 || max <= 0 || max_T <= 0) {
        err_set("kv cache: bad shape (n_kv %d, head_dim %d, max %d, max_T %d)", n_kv, head_dim, max, max_T);
        return NULL;
    }
    return cache_new(KV_DENSE, n_kv, head_dim, max, max_T);
}

kv_cache *kv_rotating_new(int n_kv, int head_dim, int window, int keep, int max, int max_T) {
    if (n_kv <= 0 || head_dim <= 0 || max <= 0 || max_T <= 0 || window < 2 || keep < 0 || keep >= window - 1) {
        err_set("kv cache: bad rotating shape (n_kv %d, head_dim %d, window %d, keep %d, max %d, max_T %d)",
                n_kv, head_dim, window, keep, max, max_T);
        return NULL;
    }
    kv_cache *c = cache_new(KV_ROTATING, n_kv, head_dim, max, max_T);
    if (c) {
        c->window = window;
        c->keep = keep;
    }
    return c;
}

void kv_free(kv_cache *c) {
    if (!c) return;
    buf_release(NULL, c->buf);
    buf_destroy(c->spare);
    free(c);
}

kv_cache *kv_share(kv_cache *c, int max_T, kv_stats *stats) {
    kv_cache *s = malloc(sizeof *s);
    if (!s) { err_set("kv cache: out of memory taking a snapshot"); return NULL; }
    *s = *c;
    s->max_T = max_T > 0 ? max_T : c->max_T;
    s->claim = 0;
    s->spare = NULL;
    s->stats = stats;
    s->ready_T = 0;
    if (c->ready_T) c->ready_T = 0; /* snapshots are never prepared: restoring one from many threads only reads */
    if (s->buf) atomic_fetch_add(&s->buf->refs, 1);
    return s;
}

/* ---- write planning ----------------------------------------------------------- */

/* Rows a rotating cache drops before a write at p0: non-keep slots below this. */
static int32_t drop_below(const kv_cache *c, int32_t p0) {
    return c->kind == KV_ROTATING ? p0 - (c->window - 1 - c->keep) : INT32_MIN;
}

/* Slot s holds a row that is dead: dropped (pos < lo, past the keep slots) or cut
 * (pos >= hi). */
static int dead(const kv_cache *c, int s, int32_t lo, int32_t hi) {
    int32_t p = *pos_at(c->buf, s);
    return p >= hi || (s >= c->keep && p < lo);
}

/* Dead slots among [s0, s0 + r), r slots of one block run (their positions are
 * contiguous in memory), and the first of them (s0 + r when none). These scans run
 * over the whole view on every append of a rotating cache: a branch-free loop over
 * the block's positions, not a table lookup per slot (a 1,024-row window's append
 * cost 7.2 us of host time in four slot-by-slot scans). */
static int dead_in_run(const kv_cache *c, int s0, int r, int32_t lo, int32_t hi, int *first) {
    const int32_t *p = pos_at(c->buf, s0);
    const int k = c->keep - s0; /* run slots j < k are keep slots: never dropped */
    int nd = 0;
    if (r == KV_BLOCK && k <= 0) /* a whole block past the keep slots: a constant trip count, vectorized at -O2 */
        for (int j = 0; j < KV_BLOCK; j++) nd += (p[j] >= hi) | (p[j] < lo);
    else
        for (int j = 0; j < r; j++) nd += (p[j] >= hi) | ((j >= k) & (p[j] < lo));
    if (first) {
        int j = 0;
        if (nd)
            while (!((p[j] >= hi) | ((j >= k) & (p[j] < lo)))) j++;
        *first = s0 + (nd ? j : r);
    }
    return nd;
}

/* The first dead slot in [s, end), or end. */
static int first_dead(const kv_cache *c, int s, int end, int32_t lo, int32_t hi) {
    while (s < end) {
        int r = run_len(c->buf, s, end - s), f;
        if (dead_in_run(c, s, r, lo, hi, &f)) return f;
        s += r;
    }
    return end;
}

/* Owns (own_block) every block of a paged buffer holding a dead slot below `below`:
 * the slots a write or a compaction may fill. */
static int own_dead(kv_cache *c, int32_t lo, int32_t hi, int below) {
    if (!c->buf || !c->buf->table || (lo == INT32_MIN && hi == INT32_MAX)) return 0;
    const int end = c->n < below ? c->n : below;
    for (int s = 0; s < end;) {
        int r = run_len(c->buf, s, end - s);
        if (dead_in_run(c, s, r, lo, hi, NULL) && own_block(c, s / KV_BLOCK) != 0) return -1;
        s += r;
    }
    return 0;
}

/* Dead slots among [0, n). */
static int count_dead(const kv_cache *c, int32_t lo, int32_t hi) {
    int nd = 0;
    if (!c->buf || (lo == INT32_MIN && hi == INT32_MAX)) return 0; /* a dense append drops nothing */
    for (int s = 0; s < c->n;) {
        int r = run_len(c->buf, s, c->n - s);
        nd += dead_in_run(c, s, r, lo, hi, NULL);
        s += r;
    }
    return nd;
}

static int sole_holder(const kv_cache *c) {
    return atomic_load(&c->buf->refs) == 1 || atomic_load(&g_ignore_sharing);
}

/* Claims slots [n, end) of a shared buffer: succeeds when no holder can see them
 * and no other holder claimed them first. */
static int claim(kv_cache *c, int end) {
    kv_buf *b = c->buf;
    int h = atomic_load(&b->hw);
    int from = c->claim && c->claim == h && c->claim >= c->n ? c->claim : c->n;
    if (h != from) return 0;
    if (end <= h) return 1;
    if (!atomic_compare_exchange_strong(&b->hw, &h, end)) return 0;
    c->claim = end;
    return 1;
}

/* kv_prepare without the bookkeeping of what it did; *copied gets 1 after a copy. */
static int prepare(kv_cache *c, int32_t p0, int T, int *copied) {
    *copied = 0;
    if (T <= 0) return err_set("kv cache: write of %d rows", T);
    if (p0 < 0 || (int64_t)p0 + T > c->max || (c->kind == KV_DENSE && c->n + T > c->max))
        return err_set("context full: %d cached + %d new tokens exceed the context size %d (raise --ctx-size)",
                       c->kind == KV_DENSE ? c->n : p0, T, c->max);
    int nd = count_dead(c, drop_below(c, p0), INT32_MAX);
    int new_n = c->n + T - nd, top = new_n > c->n ? new_n : c->n;
    if (!c->buf) {
        if (!(c->buf = buf_new(c, reserve_rows(c, top)))) return -1;
        count(c, 0, 0, 0, 1);
        if (buf_commit(c, c->buf, top) != 0) {
            buf_release(NULL, c->buf);
            c->buf = NULL;
            return -1;
        }
        return 0;
    }
    /* a claim past hw is taken only over blocks no other table holds: a shared
     * buffer's table is never changed (its other holders read it) */
    int in_place = c->inplace && top <= c->buf->reserve &&
                   (sole_holder(c) || (nd == 0 && blocks_exclusive(c, c->n, new_n) && claim(c, new_n)));
    if (in_place) {
        if (buf_commit(c, c->buf, top) != 0) return -1;
    } else {
        *copied = c->n > 0;
        if (cow(c, top) != 0) return -1;
    }
    return own_dead(c, drop_below(c, p0), INT32_MAX, c->n) == 0 ? own_range(c, c->n, top) : -1;
}

int kv_prepare(kv_cache *c, int32_t p0, int T) {
    if (c->ready_T == T && c->ready_p0 == p0) return 0;
    int copied;
    if (prepare(c, p0, T, &copied) != 0) return -1;
    c->ready_T = T;
    c->ready_p0 = p0;
    c->ready_copied = copied;
    return 0;
}

/* ---- append ------------------------------------------------------------------- */

/* Closes holes: moves the live rows of slots >= new_n into the dead slots below
 * new_n, the i-th hole taking the i-th such row (attention masks by position, so
 * which slot holds a row is irrelevant). Pairs whose holes and sources both run on
 * move as one copy: a rotating cache's first decode step after a long prompt drops
 * up to max_T - 1 rows at once, and a device copy per row was a kernel launch per
 * row (gemma3-4b: 1.4 million launches, 8 s, at 32 sequences with 2,048-token prompts). */
static void compact(kv_cache *c, int32_t lo, int32_t hi, int new_n) {
    kv_buf *b = c->buf;
    int src = new_n, moved = 0, runs = 0;
    for (int h = 0; h < new_n; h++) {
        if (!dead(c, h, lo, hi)) continue;
        while (src < c->n && dead(c, src, lo, hi)) src++;
        if (src >= c->n) break; /* not reached: as many live rows above new_n as holes below */
        int r = 1; /* a run: holes h.. and live sources src.. both consecutive */
        while (h + r < new_n && src + r < c->n && dead(c, h + r, lo, hi) && !dead(c, src + r, lo, hi)) r++;
        runs += copy_rows(b, h, b, src, r);
        h += r - 1;
        src += r;
        moved += r;
    }
    if (moved) count(c, 0, (uint64_t)moved * row_bytes(c->row, c->buf ? c->buf->dtype : c->dtype), 0, 0);
    count_row_writes(c, runs);
}

int kv_append(kv_cache *c, const float *k, const float *v, const int32_t *pos, int T) {
    if (T <= 0) return err_set("kv cache: write of %d rows", T);
    for (int i = 1; i < T; i++)
        if (pos[i] != pos[0] + i) return err_set("kv cache: positions of one write must be consecutive (row %d at %d after %d)", i, pos[i], pos[i - 1]);
    if (kv_prepare(c, pos[0], T) != 0) return -1;
    int copied = c->ready_copied;
    c->ready_T = 0;
    int32_t lo = drop_below(c, pos[0]);
    int nd = count_dead(c, lo, INT32_MAX), n0 = c->n, i = 0, runs = 0;
    /* new rows go into dropped slots first (which slot is irrelevant: attention
     * masks by position), then past the end */
    for (int s = nd > 0 ? first_dead(c, c->keep, n0, lo, INT32_MAX) : n0; s < n0 && i < T;
         s = first_dead(c, s, n0, lo, INT32_MAX)) {
        int r = 1; /* consecutive dead slots take consecutive rows in one write */
        while (i + r < T && s + r < n0 && dead(c, s + r, lo, INT32_MAX)) r++;
        runs += put_rows(c->buf, s, k + (long)i * c->row, v + (long)i * c->row, pos + i, r);
        i += r;
        s += r;
    }
    if (i < T) runs += put_rows(c->buf, n0, k + (long)i * c->row, v + (long)i * c->row, pos + i, T - i);
    count_row_writes(c, runs);
    int new_n = n0 + T - nd;
    if (nd > T) compact(c, lo, INT32_MAX, new_n); /* more rows dropped than written: close the holes */
    c->n = new_n;
    kv_buf *b = c->buf;
    if (atomic_load(&b->refs) == 1) {
        atomic_store(&b->hw, new_n);
        c->claim = 0;
    } else if (atomic_load(&b->hw) < new_n) {
        atomic_store(&b->hw, new_n); /* only under kv_test_ignore_sharing */
    }
    count(c, copied ? 0 : (uint64_t)T, 0, 0, 0);
    return 0;
}

int kv_set_rows(kv_cache *c, const float *k, const float *v, const int32_t *pos, int n) {
    if (c->n != 0 || c->buf) return err_set("kv cache: set_rows on a cache that is not empty");
    if (n < 0) return err_set("kv cache: %d rows", n);
    if (n == 0) return 0;
    if (!(c->buf = buf_new(c, reserve_rows(c, n)))) return -1;
    count(c, 0, 0, 0, 1);
    if (buf_commit(c, c->buf, n) != 0) {
        buf_release(NULL, c->buf);
        c->buf = NULL;
        return -1;
    }
    kv_buf *b = c->buf;
    if (!b->dev) {
        put_rows(b, 0, k, v, pos, n);
        atomic_store(&b->hw, n);
        c->n = n;
        return 0;
    }
    /* device: block runs uploaded (bf16 rows rounded on the host as put_rows rounds on
     * the device: nearest even) */
    const size_t cnt = (size_t)n * (size_t)b->row;
    uint16_t *t = b->dtype == KVT_BF16 ? malloc(cnt ? 2 * cnt : 1) : NULL;
    if (b->dtype == KVT_BF16 && !t) return err_set("kv cache: out of memory converting %zu rows to bf16", (size_t)n);
    for (int half = 0; half < 2; half++) {
        const float *src = half ? v : k;
        char *base = half ? b->cls->v : b->cls->k;
        const void *h = src;
        if (t) {
            for (size_t i = 0; i < cnt; i++) t[i] = f32_to_bf16(src[i]);
            h = t;
        }
        for (int s0 = 0; s0 < n;) {
            int r = run_len(b, s0, n - s0);
            b->dev->ops->upload(b->dev, base + rows_bytes(b, slot_index(b, s0)), (const char *)h + rows_bytes(b, s0),
                                rows_bytes(b, r));
            s0 += r;
        }
    }
    free(t);
    for (int s0 = 0; s0 < n;) {
        int r = run_len(b, s0, n - s0);
        memcpy(pos_at(b, s0), pos + s0, (size_t)r * sizeof(int32_t));
        b->dev->ops->upload(b->dev, b->cls->dpos + slot_index(b, s0), pos + s0, (size_t)r * sizeof(int32_t));
        s0 += r;
    }
    atomic_store(&c->buf->hw, n);
    c->n = n;
    return 0;
}

void kv_view(const kv_cache *c, attn_kv *out) {
    const kv_buf *b = c->buf;
    memset(out, 0, sizeof *out);
    out->n = c->n;
    out->row_stride = c->row;
    out->dtype = b ? b->dtype : c->dtype;
    if (!b) return;
    out->k = b->cls->k;
    out->v = b->cls->v;
    out->pos = b->dev ? b->cls->dpos : b->cls->pos;
    out->blocks = b->dev ? b->dtable : b->table;
    out->block_rows = KV_BLOCK;
}

int kv_rows_to_host(const kv_cache *c, float **k, float **v, int32_t **pos) {
    *k = *v = NULL;
    *pos = NULL;
    if (!c->buf) return 0;
    size_t cnt = (size_t)c->n * (size_t)c->row, fb = cnt * sizeof(float);
    *k = malloc(fb ? fb : 1);
    *v = malloc(fb ? fb : 1);
    *pos = malloc(c->n ? (size_t)c->n * sizeof(int32_t) : 1);
    if (!*k || !*v || !*pos) {
        free(*k); free(*v); free(*pos);
        *k = *v = NULL;
        *pos = NULL;
        return err_set("kv cache: out of memory copying %zu bytes of rows to the host", 2 * fb);
    }
    for (int s = 0; s < c->n; s++) (*pos)[s] = *pos_at(c->buf, s);
    if (!c->buf->dev) {
        for (int s = 0; s < c->n; s++) {
            float *dk = *k + (long)s * c->row, *dv = *v + (long)s * c->row;
            if (c->buf->dtype == KVT_BF16) {
                const uint16_t *sk = (const uint16_t *)k_at(c->buf, s), *sv = (const uint16_t *)v_at(c->buf, s);
                for (long i = 0; i < c->row; i++) {
                    dk[i] = bf16_to_f32(sk[i]);
                    dv[i] = bf16_to_f32(sv[i]);
                }
            } else {
                memcpy(dk, k_at(c->buf, s), (size_t)c->row * sizeof(float));
                memcpy(dv, v_at(c->buf, s), (size_t)c->row * sizeof(float));
            }
        }
        return 0;
    }
    /* device: each block run downloaded; bf16 rows land in the second half of each
     * float array, then widen in place from the front (element i is read at byte
     * 2 * cnt + 2 * i >= 4 * i before element i is written) */
    const kv_buf *bf = c->buf;
    backend *d = bf->dev;
    const int bf16 = bf->dtype == KVT_BF16;
    char *hk = bf16 ? (char *)((uint16_t *)*k + cnt) : (char *)*k, *hv = bf16 ? (char *)((uint16_t *)*v + cnt) : (char *)*v;
    for (int s0 = 0; s0 < c->n;) {
        int r = run_len(bf, s0, c->n - s0);
        d->ops->download(d, hk + rows_bytes(bf, s0), k_at(bf, s0), rows_bytes(bf, r));
        d->ops->download(d, hv + rows_bytes(bf, s0), v_at(bf, s0), rows_bytes(bf, r));
        s0 += r;
    }
    if (bf16)
        for (size_t i = 0; i < cnt; i++) {
            const uint16_t a = ((uint16_t *)hk)[i], b = ((uint16_t *)hv)[i];
            (*k)[i] = bf16_to_f32(a);
            (*v)[i] = bf16_to_f32(b);
        }
    return 0;
}

/* ---- truncate ----------------------------------------------------------------- */

void kv_pos_range(const kv_cache *c, int32_t *lo, int32_t *hi) {
    *lo = *hi = -1;
    for (int s = 0; s < c->n; s++) {
        int32_t p = *pos_at(c->buf, s);
        if (*lo < 0 || p < *lo) *lo = p;
        if (p > *hi) *hi = p;
    }
}

/* Rows held with positions in [a, b). */
static int count_in(const kv_cache *c, int32_t a, int32_t b) {
    int k = 0;
    for (int s = 0; s < c->n; s++) {
        int32_t p = *pos_at(c->buf, s);
        k += p >= a && p < b;
    }
    return k;
}

int kv_can_truncate(const kv_cache *c, int32_t p) {
    if (p < 0) return err_set("kv cache: cannot go back to position %d", p);
    if (c->kind == KV_DENSE || c->n == 0) return 0;
    int32_t lo, hi;
    kv_pos_range(c, &lo, &hi);
    if (p > hi) return 0;
    int K = c->keep;
    int32_t ka = 0, kb = p < K ? p : K;                         /* keep rows needed */
    int32_t ra = p - (c->window - 1 - K), rb = p;               /* window rows needed */
    if (ra < kb) ra = kb;
    if (count_in(c, ka, kb) != kb - ka || count_in(c, ra, rb) != rb - ra)
        return err_set("rotating cache (window %d, keep %d) holds positions %d..%d: going back to %d needs "
                       "positions %d..%d, which it has overwritten (restore a snapshot taken at or before %d instead)",
                       c->window, K, lo, hi, p, ra, rb - 1, p);
    return 0;
}

int kv_truncate(kv_cache *c, int32_t p) {
    if (kv_can_truncate(c, p) != 0) return -1;
    c->ready_T = 0;
    int nd = count_dead(c, INT32_MIN, p);
    if (nd == 0) {
        if (c->buf && c->buf->table && atomic_load(&c->buf->refs) == 1) kv_trim(c);
        return 0;
    }
    int new_n = c->n - nd, holes_below = 0;
    for (int s = 0; s < new_n; s++) holes_below += dead(c, s, INT32_MIN, p);
    if (holes_below) {
        /* moving rows is a write into slots the view holds */
        if (!(c->inplace && sole_holder(c)) && cow(c, c->n) != 0) return -1;
        if (own_dead(c, INT32_MIN, p, new_n) != 0) return -1;
        compact(c, INT32_MIN, p, new_n);
    }
    c->n = new_n;
    c->claim = 0;
    if (atomic_load(&c->buf->refs) == 1) {
        atomic_store(&c->buf->hw, new_n);
        kv_trim(c); /* whole blocks past the view go back to the pool (a rewound slot frees its rows) */
    }
    return 0;
}

int kv_adopt(kv_cache *c, kv_kind kind, int window, int keep, int max, int max_T) {
    if (c->n > max) return err_set("kv cache: %d rows do not fit a context of %d", c->n, max);
    if (kind == KV_DENSE && c->kind == KV_ROTATING)
        for (int s = 0; s < c->n; s++)
            if (*pos_at(c->buf, s) != s)
                return err_set("kv cache: a rotating cache (window %d) that has dropped or reordered rows "
                               "cannot become a dense one (slot %d holds position %d)", c->window, s, *pos_at(c->buf, s));
    if (kind == KV_ROTATING && (window < 2 || keep < 0 || keep >= window - 1))
        return err_set("kv cache: bad rotating window %d, keep %d", window, keep);
    c->kind = kind;
    c->window = kind == KV_ROTATING ? window : 0;
    c->keep = kind == KV_ROTATING ? keep : 0;
    c->max = max;
    c->max_T = max_T;
    c->ready_T = 0;
    return 0;
}

size_t kv_trim(kv_cache *c) {
    kv_buf *b = c->buf;
    if (!b || !b->table || atomic_load(&b->refs) != 1) return 0;
    int cap = atomic_load(&b->cap), keep = table_len(c->n);
    if (keep * KV_BLOCK >= cap) return 0;
    /* the blocks past the view go back to the pool (another table may still hold
     * one: then it stays with that table) */
    for (int i = keep; i < cap / KV_BLOCK; i++) kv_block_drop(b->cls, b->table[i]);
    atomic_store(&b->cap, keep * KV_BLOCK);
    atomic_store(&b->hw, c->n);
    c->claim = 0;
    c->ready_T = 0;
    return (size_t)(cap - keep * KV_BLOCK) * row_bytes(c->row, b->dtype);
}

/* ---- inspection --------------------------------------------------------------- */

size_t kv_bytes(const kv_cache *c) {
    if (!c || !c->buf) return 0;
    const int rows = atomic_load(&c->buf->cap); /* cap / KV_BLOCK blocks */
    return (size_t)rows * row_bytes(c->row, c->buf ? c->buf->dtype : c->dtype);
}

size_t kv_view_bytes(const kv_cache *c) { return c ? (size_t)c->n * row_bytes(c->row, c->buf ? c->buf->dtype : c->dtype) : 0; }

int kv_sane(const kv_cache *c) {
    if (c->n < 0) return !err_set("kv cache: n %d < 0", c->n);
    if (c->n > 0 && !c->buf) return !err_set("kv cache: %d rows but no buffer", c->n);
    if (!c->buf) return 1;
    const kv_buf *b = c->buf;
    int refs = atomic_load(&b->refs), hw = atomic_load(&b->hw), cap = atomic_load(&b->cap);
    if (refs < 1) return !err_set("kv cache: buffer has %d holders", refs);
    if (c->n > cap || cap > (b->table ? table_len(b->reserve) * KV_BLOCK : b->reserve)) return !err_set("kv cache: n %d, committed %d, reserved %d", c->n, cap, b->reserve);
    if (c->n > hw) return !err_set("kv cache: view of %d slots passes the high-water mark %d", c->n, hw);
    if (c->claim && (c->claim < c->n || c->claim > hw))
        return !err_set("kv cache: claim %d outside [n %d, hw %d]", c->claim, c->n, hw);
    if (c->spare && (c->spare == c->buf || atomic_load(&c->spare->refs) != 1))
        return !err_set("kv cache: spare buffer is shared");
    if (b->table)
        for (int i = 0; i < cap / KV_BLOCK; i++)
            if (b->table[i] < 0 || b->table[i] >= b->cls->max_blocks || kv_block_refs(b->cls, b->table[i]) < 1)
                return !err_set("kv cache: block %d of the table is %d, with %d holders", i, b->table[i],
                                b->table[i] < 0 || b->table[i] >= b->cls->max_blocks ? 0 : kv_block_refs(b->cls, b->table[i]));
    if (c->kind == KV_DENSE) {
        for (int s = 1; s < c->n; s++)
            if (*pos_at(b, s) <= *pos_at(b, s - 1))
                return !err_set("kv cache: dense slot %d at position %d after %d", s, *pos_at(b, s), *pos_at(b, s - 1));
        return 1;
    }
    int32_t lo, hi;
    kv_pos_range(c, &lo, &hi);
    if (c->n == 0) return 1;
    size_t span = (size_t)(hi - lo) + 1;
    unsigned char *seen = calloc(span, 1);
    if (!seen) return !err_set("kv cache: out of memory checking");
    int ok = 1;
    for (int s = 0; s < c->n && ok; s++) {
        size_t i = (size_t)(*pos_at(b, s) - lo);
        if (seen[i]) ok = !err_set("kv cache: position %d held twice", *pos_at(b, s));
        seen[i] = 1;
    }
    free(seen);
    return ok;
}
