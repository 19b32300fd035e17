/* tests/test_kv_cache.c: unit tests of the dense and rotating KV caches: what each
 * view holds after warmup, wraps, `keep`, and chunked writes that cross the window;
 * snapshots before and after a wrap; copy-on-write counters; the copying path
 * (inplace = 0) giving the same slots bit for bit; truncation; and a check that the
 * sharing tests fail when the ownership rule is switched off; and host caches of
 * bf16 rows (rounded once on write, widened exactly on read, half the bytes copied).
 * Rows carry their position in every value, so a view can be checked row by row. */
#include <math.h>
#include <pthread.h>
#include <stdlib.h>

#include "base/err.h"
#include "harness.h"
#include "kv/cache.h"
#include "tensor/dtype.h"

#define NKV 2
#define HD 4
#define ROW (NKV * HD)
#define ROW_BYTES (ROW * 2 * sizeof(float) + sizeof(int32_t))

/* k [T, ROW], v [T, ROW] and pos [T] for positions p0..p0+T-1: k = 1000 p + i. */
static void rows(int32_t p0, int T, float *k, float *v, int32_t *pos) {
    for (int t = 0; t < T; t++) {
        pos[t] = p0 + t;
        for (int i = 0; i < ROW; i++) {
            k[t * ROW + i] = (float)(1000 * (p0 + t) + i);
            v[t * ROW + i] = -(float)(1000 * (p0 + t) + i);
        }
    }
}

typedef void row_fill(int32_t p0, int T, float *k, float *v, int32_t *pos);

/* T rows for positions p0.. made by fill, appended to c */
static int append_rows(kv_cache *c, int32_t p0, int T, row_fill *fill) {
    float *k = malloc(sizeof(float) * ROW * (size_t)T), *v = malloc(sizeof(float) * ROW * (size_t)T);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)T);
    fill(p0, T, k, v, pos);
    int rc = kv_append(c, k, v, pos, T);
    free(k);
    free(v);
    free(pos);
    return rc;
}

static int append(kv_cache *c, int32_t p0, int T) { return append_rows(c, p0, T, rows); }

/* Problems with c's view: rows whose values do not match their position, or a set
 * of positions other than exactly [lo, hi] plus [0, keep). 0 when all is well. */
static int view_problems(const kv_cache *c, int32_t lo, int32_t hi, int keep) {
    attn_kv a;
    kv_view(c, &a);
    int bad = 0, want = hi - lo + 1;
    for (int32_t p = 0; p < keep && p < lo; p++) want++;
    if (a.n != want) bad++;
    for (int s = 0; s < a.n; s++) {
        const long x = attn_kv_row(&a, s); /* through the block table */
        int32_t p = a.pos[x];
        if (!((p >= lo && p <= hi) || p < keep)) bad++;
        for (int i = 0; i < ROW; i++)
            if (((const float *)a.k)[x * a.row_stride + i] != (float)(1000 * p + i) || ((const float *)a.v)[x * a.row_stride + i] != -(float)(1000 * p + i)) {
                bad++;
                break;
            }
    }
    if (!kv_sane(c)) bad++;
    return bad;
}

/* ---- dense ---------------------------------------------------------------------- */

static void dense_chunks_and_growth(void) {
    kv_stats st = {0};
    kv_cache *c = kv_dense_new(NKV, HD, 1000, 64);
    c->stats = &st;
    c->inplace = 1;
    int32_t p = 0;
    const int chunks[] = {1, 7, 64, 3, 64, 64, 64, 64, 64, 64, 64, 64, 1};
    for (size_t i = 0; i < sizeof chunks / sizeof *chunks; i++) {
        CHECK(append(c, p, chunks[i]) == 0, "append %d at %d: %s", chunks[i], p, err_msg());
        p += chunks[i];
        CHECK(view_problems(c, 0, p - 1, 0) == 0, "view after %d rows: %s", p, err_msg());
    }
    attn_kv a;
    kv_view(c, &a);
    for (int s = 0; s < a.n; s++) CHECK(a.pos[attn_kv_row(&a, s)] == s, "dense slot %d holds position %d", s, a.pos[attn_kv_row(&a, s)]);
    CHECK(st.copied_bytes == 0 && st.cow_copies == 0, "growth copied %llu bytes", (unsigned long long)st.copied_bytes);
    /* one buffer (a block table), then one pool block per KV_BLOCK rows */
    CHECK(st.allocs == 1 + (uint64_t)(p + KV_BLOCK - 1) / KV_BLOCK, "allocs %llu for %d rows", (unsigned long long)st.allocs, p);
    CHECK(append(c, p, 1000 - p + 1) != 0, "writing past the context limit should fail");
    CHECK_STR_HAS(err_msg(), "context full");
    CHECK(view_problems(c, 0, p - 1, 0) == 0, "a failed write changed the cache");
    kv_free(c);
}

/* The per-token path of an exclusively owned cache copies nothing and allocates
 * only a pool block each KV_BLOCK rows. */
static void dense_decode_allocates_nothing(void) {
    kv_stats st = {0};
    kv_cache *c = kv_dense_new(NKV, HD, 4096, 64);
    c->stats = &st;
    c->inplace = 1;
    append(c, 0, 20);
    kv_stats before = st;
    for (int i = 0; i < 100; i++) append(c, 20 + i, 1);
    CHECK(st.allocs == before.allocs + 1, "100 decode steps from 20 rows made %llu allocations, want 1 block",
          (unsigned long long)(st.allocs - before.allocs));
    CHECK(st.copied_bytes == 0 && st.cow_copies == 0, "decode copied %llu bytes", (unsigned long long)st.copied_bytes);
    CHECK(st.inplace_rows == before.inplace_rows + 100, "inplace_rows %llu", (unsigned long long)st.inplace_rows);
    CHECK(view_problems(c, 0, 119, 0) == 0, "view");
    kv_free(c);
}

/* ---- rotating ------------------------------------------------------------------- */

static void rotating_warmup_and_wrap(void) {
    kv_stats st = {0};
    const int W = 8;
    kv_cache *c = kv_rotating_new(NKV, HD, W, 0, 10000, 16);
    c->stats = &st;
    c->inplace = 1;
    for (int p = 0; p < W; p++) {
        append(c, p, 1);
        CHECK(view_problems(c, 0, p, 0) == 0, "warmup at %d", p);
    }
    kv_stats warm = st;
    for (int p = W; p < 200; p++) {
        append(c, p, 1);
        CHECK(view_problems(c, p - W + 1, p, 0) == 0, "steady state at %d", p);
        CHECK(c->n == W, "holds %d rows, want %d", c->n, W);
    }
    CHECK(st.copied_bytes == 0 && st.cow_copies == 0, "exclusive wrap copied %llu bytes", (unsigned long long)st.copied_bytes);
    CHECK(st.allocs == warm.allocs, "steady state allocated");
    CHECK(st.inplace_rows == 200, "inplace_rows %llu", (unsigned long long)st.inplace_rows);
    kv_free(c);
}

/* Chunks of random sizes: before a write at p0 the cache keeps positions
 * >= p0 - W + 1 (what the chunk's first query needs) and nothing older. */
static void rotating_chunks_cross_window(void) {
    const int W = 8, maxT = 7;
    kv_cache *c = kv_rotating_new(NKV, HD, W, 0, 100000, maxT);
    c->inplace = 1;
    srand(7);
    int32_t p = 0;
    for (int step = 0; step < 400; step++) {
        int T = step % 5 == 4 ? 1 : 1 + rand() % maxT;
        CHECK(append(c, p, T) == 0, "append %d at %d: %s", T, p, err_msg());
        int32_t lo = p - (W - 1) > 0 ? p - (W - 1) : 0;
        CHECK(view_problems(c, lo, p + T - 1, 0) == 0, "after %d rows at %d: n %d", T, p, c->n);
        CHECK(c->n <= W - 1 + maxT, "holds %d rows, bound %d", c->n, W - 1 + maxT);
        p += T;
    }
    /* one write much longer than the window keeps all of it (its queries need it) */
    kv_cache *d = kv_rotating_new(NKV, HD, W, 0, 1000, 40);
    CHECK(append(d, 0, 40) == 0 && view_problems(d, 0, 39, 0) == 0, "prefill of 40 rows");
    CHECK(append(d, 40, 1) == 0 && view_problems(d, 33, 40, 0) == 0 && d->n == W, "decode after a long prefill");
    kv_free(d);
    kv_free(c);
}

/* Rows that land in dropped slots, and the rows a compaction moves, go as runs of
 * consecutive slots: one write (on a device, one launch) per run, not per row. A
 * device copy per row made gemma3-4b's first decode step after 2,048-token prompts
 * take 1.4 million launches at 32 sequences. */
static void rotating_writes_in_runs(void) {
    const int W = 8;
    kv_stats st = {0};
    kv_cache *c = kv_rotating_new(NKV, HD, W, 0, 1000, W);
    c->stats = &st;
    c->inplace = 1;
    uint64_t w0;
    for (int32_t p = 0; p < 64; p += W) { /* window-crossing chunks of W rows */
        w0 = st.row_writes;
        CHECK(append(c, p, W) == 0, "chunk at %d: %s", p, err_msg());
        CHECK(view_problems(c, p > W - 1 ? p - (W - 1) : 0, p + W - 1, 0) == 0, "chunk at %d", p);
        CHECK(st.row_writes - w0 <= 2, "chunk of %d rows at %d took %llu writes", W, p, (unsigned long long)(st.row_writes - w0));
    }
    kv_free(c);
    /* a prompt longer than the window, then one decode row: the 7 rows still in the
     * window move down as one run */
    kv_stats sd = {0};
    kv_cache *d = kv_rotating_new(NKV, HD, W, 0, 1000, 40);
    d->stats = &sd;
    d->inplace = 1;
    CHECK(append(d, 0, 40) == 0, "prefill of 40 rows");
    w0 = sd.row_writes;
    uint64_t b0 = sd.copied_bytes;
    CHECK(append(d, 40, 1) == 0 && view_problems(d, 33, 40, 0) == 0 && d->n == W, "decode after a long prefill");
    CHECK(sd.row_writes - w0 == 2, "decode after a long prefill took %llu writes (the row, one move)",
          (unsigned long long)(sd.row_writes - w0));
    CHECK(sd.copied_bytes - b0 == 7 * ROW_BYTES, "moved %llu bytes", (unsigned long long)(sd.copied_bytes - b0));
    kv_stats sum = {0};
    kv_stats_add(&sum, &sd); /* how a session's counters are totalled */
    CHECK(sum.row_writes == sd.row_writes && sum.copied_bytes == sd.copied_bytes, "kv_stats_add dropped row_writes");
    kv_free(d);
    /* the same across 64-row blocks: a run splits where a block ends, nowhere else */
    const int W2 = 100, P2 = 300;
    kv_stats s2 = {0};
    kv_cache *e = kv_rotating_new(NKV, HD, W2, 0, 1000, P2);
    e->stats = &s2;
    e->inplace = 1;
    CHECK(append(e, 0, P2) == 0 && view_problems(e, 0, P2 - 1, 0) == 0, "prefill of %d rows", P2);
    w0 = s2.row_writes;
    for (int32_t p = P2; p < P2 + 150; p++) {
        CHECK(append(e, p, 1) == 0, "decode at %d: %s", p, err_msg());
        CHECK(view_problems(e, p - (W2 - 1), p, 0) == 0 && e->n == W2, "decode at %d: n %d", p, e->n);
    }
    /* first step: one write, then 99 rows moved from slots 201..299 into 1..99: runs
     * split at slots 64 and 256 (blocks of both ranges), so at most 4 copies; then one
     * write a step */
    CHECK(s2.row_writes - w0 <= 1 + 4 + 149, "%llu writes over 150 decode steps after a %d-row prompt",
          (unsigned long long)(s2.row_writes - w0), P2);
    kv_free(e);
}

static void rotating_keep(void) {
    const int W = 8, K = 2;
    kv_cache *c = kv_rotating_new(NKV, HD, W, K, 10000, 4);
    c->inplace = 1;
    int32_t p = 0;
    for (int step = 0; step < 60; step++) {
        int T = step < 30 ? 1 : 1 + step % 4;
        append(c, p, T);
        p += T;
        int32_t lo = p - T - (W - 1 - K);
        if (lo < K) lo = K;
        CHECK(view_problems(c, lo, p - 1, K) == 0, "keep: view after writing up to %d (n %d)", p - 1, c->n);
    }
    kv_free(c);
}

/* ---- sharing -------------------------------------------------------------------- */

/* Snapshot during warmup; the live cache fills the window (in place: those slots
 * were never valid for the snapshot) and then wraps. Returns problems. */
static int warmup_snapshot_problems(uint64_t *copied_in_warmup) {
    const int W = 8;
    kv_stats st = {0};
    kv_cache *c = kv_rotating_new(NKV, HD, W, 0, 10000, 4);
    c->stats = &st;
    c->inplace = 1;
    int bad = 0;
    for (int p = 0; p < 3; p++) append(c, p, 1);
    kv_cache *snap = kv_share(c, 0, NULL);
    for (int p = 3; p < W; p++) append(c, p, 1);
    *copied_in_warmup = st.copied_bytes;
    bad += view_problems(snap, 0, 2, 0);
    for (int p = W; p < 3 * W; p++) append(c, p, 1);
    bad += view_problems(snap, 0, 2, 0);
    bad += view_problems(c, 2 * W, 3 * W - 1, 0);
    kv_free(c);
    bad += view_problems(snap, 0, 2, 0);
    kv_free(snap);
    return bad;
}

/* Snapshot after a wrap; the live cache's next (wrapped) write must copy, once.
 * Returns problems; *cow gets the copies the first wrapped write made. */
static int wrapped_snapshot_problems(uint64_t *cow, uint64_t *copied) {
    const int W = 8;
    kv_stats st = {0};
    kv_cache *c = kv_rotating_new(NKV, HD, W, 0, 10000, 4);
    c->stats = &st;
    c->inplace = 1;
    for (int p = 0; p < 20; p++) append(c, p, 1);
    kv_cache *snap = kv_share(c, 0, NULL);
    int bad = view_problems(snap, 12, 19, 0);
    append(c, 20, 1);
    *cow = st.cow_copies;
    *copied = st.copied_bytes;
    bad += view_problems(snap, 12, 19, 0);
    for (int p = 21; p < 60; p++) append(c, p, 1);
    bad += view_problems(snap, 12, 19, 0);
    bad += view_problems(c, 52, 59, 0);
    if (st.cow_copies != 1) bad++; /* later writes own their copy */
    kv_free(c);
    kv_free(snap);
    return bad;
}

static void snapshot_in_warmup(void) {
    uint64_t copied = 1;
    CHECK(warmup_snapshot_problems(&copied) == 0, "the snapshot taken in warmup changed");
    CHECK(copied == 0, "warmup writes past a snapshot copied %llu bytes (they should go in place)", (unsigned long long)copied);
}

static void snapshot_after_wrap(void) {
    uint64_t cow = 0, copied = 0;
    CHECK(wrapped_snapshot_problems(&cow, &copied) == 0, "the snapshot taken after the wrap changed");
    CHECK(cow == 1, "the first wrapped write into a shared buffer made %llu copies, want 1", (unsigned long long)cow);
    CHECK(copied == 8 * ROW_BYTES, "copied %llu bytes, want the 8 rows", (unsigned long long)copied);
}

/* ---- paging --------------------------------------------------------------------- */

/* Rows of a branch: positions >= from carry tag (values + tag * 1e6, exact in float). */
static int append_tag(kv_cache *c, int32_t p0, int T, int tag) {
    float *k = malloc(sizeof(float) * ROW * (size_t)T), *v = malloc(sizeof(float) * ROW * (size_t)T);
    int32_t *pos = malloc(sizeof(int32_t) * (size_t)T);
    rows(p0, T, k, v, pos);
    for (int i = 0; i < T * ROW; i++) {
        k[i] += (float)tag * 1e6f;
        v[i] -= (float)tag * 1e6f;
    }
    int rc = kv_append(c, k, v, pos, T);
    free(k);
    free(v);
    free(pos);
    return rc;
}

/* Problems with a dense view holding positions [0, n): untagged below `from`, `tag` from there. */
static int tagged_problems(const kv_cache *c, int n, int from, int tag) {
    attn_kv a;
    kv_view(c, &a);
    int bad = a.n != n || !kv_sane(c);
    for (int s = 0; s < a.n && s < n; s++) {
        const long x = attn_kv_row(&a, s);
        const float t = s >= from ? (float)tag * 1e6f : 0.0f;
        bad += a.pos[x] != s;
        for (int i = 0; i < ROW; i++)
            if (((const float *)a.k)[x * a.row_stride + i] != (float)(1000 * s + i) + t ||
                ((const float *)a.v)[x * a.row_stride + i] != -(float)(1000 * s + i) - t) {
                bad++;
                break;
            }
    }
    return bad;
}

/* A 200-row prefix (3 full blocks and 8 rows) in a snapshot, two branches on it. The
 * first continues in place (it claims the rows past the snapshot); the second gets a
 * table holding the same blocks and copies only the partial block it writes (one
 * cow_block of 8 rows); then it rewinds into the third block (a block the snapshot
 * still holds, though the branch's table is its own) and must copy that one too.
 * Blocks go back to the pool when the last holder goes. Returns problems. */
static int prefix_branch_problems(kv_stats *s1, kv_stats *s2, int *shared_full, long *used_after) {
    kv_pool *pool = kv_pool_new((size_t)64 << 20);
    kv_cache *c = kv_dense_new(NKV, HD, 4000, 256);
    c->pool = pool;
    c->inplace = 1;
    int bad = append(c, 0, 200) != 0;
    kv_cache *snap = kv_share(c, 0, NULL);
    kv_free(c);
    kv_cache *b1 = kv_share(snap, 16, s1), *b2 = kv_share(snap, 16, s2);
    b1->inplace = b2->inplace = 1;
    for (int p = 200; p < 300; p++) bad += append_tag(b1, p, 1, 1) != 0;
    for (int p = 200; p < 300; p++) bad += append_tag(b2, p, 1, 2) != 0;
    *shared_full = 0;
    for (int i = 0; i < 3; i++) *shared_full += b2->buf->table[i] == snap->buf->table[i];
    bad += tagged_problems(snap, 200, 200, 0) + tagged_problems(b1, 300, 200, 1) + tagged_problems(b2, 300, 200, 2);
    bad += kv_truncate(b2, 150) != 0;
    for (int p = 150; p < 160; p++) bad += append_tag(b2, p, 1, 3) != 0;
    bad += tagged_problems(snap, 200, 200, 0) + tagged_problems(b1, 300, 200, 1) + tagged_problems(b2, 160, 150, 3);
    kv_free(b1);
    kv_free(b2);
    bad += tagged_problems(snap, 200, 200, 0);
    kv_free(snap);
    kv_pool_stats ps;
    kv_pool_stats_get(pool, &ps);
    *used_after = ps.used_blocks;
    if (kv_pool_free(pool) != 0) bad++;
    return bad;
}

static void prefix_blocks_shared(void) {
    kv_stats s1 = {0}, s2 = {0};
    int shared_full = 0;
    long used = -1;
    CHECK(prefix_branch_problems(&s1, &s2, &shared_full, &used) == 0, "a branch changed another's rows");
    CHECK(s1.cow_blocks == 0 && s1.copied_bytes == 0, "the claiming branch copied %llu blocks (%llu bytes)",
          (unsigned long long)s1.cow_blocks, (unsigned long long)s1.copied_bytes);
    CHECK(shared_full == 3, "the second branch holds %d of the 3 full prefix blocks by reference, want 3", shared_full);
    /* block 3 (rows 192..199) at the branch, block 2 (rows 128..149) after the rewind */
    CHECK(s2.cow_blocks == 2 && s2.copied_bytes == (8 + 22) * ROW_BYTES,
          "the second branch copied %llu blocks (%llu bytes), want 2 blocks of 8 and 22 rows",
          (unsigned long long)s2.cow_blocks, (unsigned long long)s2.copied_bytes);
    CHECK(used == 0, "%ld blocks still held after every cache was freed", used);
}

/* A pool's budget: a write that needs a block past it fails with a message and
 * leaves the cache as it was; a freed cache's blocks serve the next one. */
static void pool_budget(void) {
    kv_cache *c = kv_dense_new(NKV, HD, 1000, 64), *d = kv_dense_new(NKV, HD, 1000, 64);
    kv_pool *pool = kv_pool_new(3 * (2 * KV_BLOCK * ROW * sizeof(float) + KV_BLOCK * sizeof(int32_t)));
    c->pool = d->pool = pool;
    CHECK(append(c, 0, 3 * KV_BLOCK) == 0, "three blocks within the budget: %s", err_msg());
    CHECK(append(c, 3 * KV_BLOCK, 1) != 0, "a fourth block past the budget");
    CHECK_STR_HAS(err_msg(), "KV cache budget exhausted");
    CHECK(view_problems(c, 0, 3 * KV_BLOCK - 1, 0) == 0, "the refused write changed the cache");
    CHECK(append(d, 0, 1) != 0, "another cache past the budget");
    kv_pool_stats ps;
    kv_pool_stats_get(pool, &ps);
    CHECK(ps.used_blocks == 3, "%ld blocks in use, want 3", ps.used_blocks);
    kv_free(c);
    CHECK(append(d, 0, 2 * KV_BLOCK) == 0 && view_problems(d, 0, 2 * KV_BLOCK - 1, 0) == 0, "blocks freed by one cache serve another");
    kv_pool_stats_get(pool, &ps);
    CHECK(ps.committed_blocks == 3, "%ld blocks committed, want the 3 recycled", ps.committed_blocks);
    CHECK(kv_pool_free(pool) != 0, "a pool freed while a cache holds blocks");
    kv_free(d);
    CHECK(kv_pool_free(pool) == 0, "freeing the empty pool: %s", err_msg());
}

/* The sharing tests can fail: with the ownership rule off they must. */
static void sharing_tests_can_fail(void) {
    uint64_t copied, cow, cb;
    kv_stats s1 = {0}, s2 = {0};
    int shared_full;
    long used;
    kv_test_ignore_sharing(1);
    int a = warmup_snapshot_problems(&copied), b = wrapped_snapshot_problems(&cow, &cb);
    int c = prefix_branch_problems(&s1, &s2, &shared_full, &used);
    kv_test_ignore_sharing(0);
    CHECK(a > 0, "snapshot_in_warmup passes even when shared writes go in place");
    CHECK(b > 0, "snapshot_after_wrap passes even when shared writes go in place");
    CHECK(c > 0, "prefix_blocks_shared passes even when shared blocks are written in place");
}

/* Dense: a snapshot and the live cache share; the live cache appends past the
 * snapshot's rows in place (it claimed them); a second holder restored from the
 * snapshot (a branch) must copy before its first append. */
static void dense_snapshot_and_branch(void) {
    kv_stats live = {0}, branch = {0};
    kv_cache *c = kv_dense_new(NKV, HD, 1000, 16);
    c->stats = &live;
    c->inplace = 1;
    append(c, 0, 10);
    kv_cache *snap = kv_share(c, 0, NULL);
    for (int p = 10; p < 60; p++) append(c, p, 1);
    CHECK(live.copied_bytes == 0 && live.cow_copies == 0, "appending past a snapshot copied %llu bytes",
          (unsigned long long)live.copied_bytes);
    CHECK(view_problems(snap, 0, 9, 0) == 0 && view_problems(c, 0, 59, 0) == 0, "views after appending");
    kv_cache *b = kv_share(snap, 16, &branch);
    b->inplace = 1;
    CHECK(append(b, 10, 3) == 0, "branch append");
    CHECK(branch.cow_copies == 1 && branch.copied_bytes == 10 * ROW_BYTES, "branch copies %llu (%llu bytes), want 1 copy of 10 rows",
          (unsigned long long)branch.cow_copies, (unsigned long long)branch.copied_bytes);
    CHECK(view_problems(b, 0, 12, 0) == 0 && view_problems(c, 0, 59, 0) == 0 && view_problems(snap, 0, 9, 0) == 0,
          "branch, live and snapshot views");
    /* the live cache goes back past the snapshot and rewrites: that must copy */
    uint64_t cows = live.cow_copies;
    CHECK(kv_truncate(c, 5) == 0 && append(c, 5, 1) == 0, "truncate and append: %s", err_msg());
    CHECK(live.cow_copies == cows + 1, "rewriting rows a snapshot sees did not copy");
    CHECK(view_problems(snap, 0, 9, 0) == 0 && view_problems(c, 0, 5, 0) == 0, "views after rewriting");
    kv_free(b);
    kv_free(snap);
    kv_free(c);
}

/* Branches on two threads: each restores the same snapshot and appends; the atomic
 * claim lets exactly one of them continue in place, the other copies first. */
typedef struct {
    kv_cache *snap;
    kv_stats st;
    int problems;
} branch_job;

static void *branch_thread(void *arg) {
    branch_job *j = arg;
    kv_cache *b = kv_share(j->snap, 16, &j->st);
    b->inplace = 1;
    for (int p = 10; p < 400; p++) append(b, p, 1);
    j->problems = view_problems(b, 0, 399, 0);
    kv_free(b);
    return NULL;
}

static void branches_on_threads(void) {
    for (int round = 0; round < 20; round++) {
        kv_cache *c = kv_dense_new(NKV, HD, 1000, 16);
        append(c, 0, 10);
        kv_cache *snap = kv_share(c, 0, NULL);
        kv_free(c);
        kv_cache *keep = kv_share(snap, 0, NULL); /* the snapshot stays shared throughout */
        branch_job j[2] = {{snap, {0}, 0}, {snap, {0}, 0}};
        pthread_t t[2];
        for (int i = 0; i < 2; i++) pthread_create(&t[i], NULL, branch_thread, &j[i]);
        for (int i = 0; i < 2; i++) pthread_join(t[i], NULL);
        CHECK(j[0].problems == 0 && j[1].problems == 0, "round %d: branch views wrong", round);
        CHECK(j[0].st.cow_copies + j[1].st.cow_copies == 1, "round %d: %llu + %llu copies, want exactly 1", round,
              (unsigned long long)j[0].st.cow_copies, (unsigned long long)j[1].st.cow_copies);
        CHECK(view_problems(snap, 0, 9, 0) == 0 && view_problems(keep, 0, 9, 0) == 0, "round %d: snapshot changed", round);
        kv_free(keep);
        kv_free(snap);
    }
}

/* ---- the copying path ----------------------------------------------------------- */

static int same_view(const kv_cache *a, const kv_cache *b) {
    attn_kv x, y;
    kv_view(a, &x);
    kv_view(b, &y);
    if (x.n != y.n) return 0;
    for (int s = 0; s < x.n; s++) { /* slot by slot, through the block tables */
        const long i = attn_kv_row(&x, s), j = attn_kv_row(&y, s);
        if (memcmp((const float *)x.k + i * x.row_stride, (const float *)y.k + j * y.row_stride, sizeof(float) * ROW) ||
            memcmp((const float *)x.v + i * x.row_stride, (const float *)y.v + j * y.row_stride, sizeof(float) * ROW) ||
            x.pos[i] != y.pos[j])
            return 0;
    }
    return 1;
}

static void copying_path_same_slots(void) {
    kv_stats si = {0}, sc = {0};
    kv_cache *a = kv_rotating_new(NKV, HD, 8, 0, 100000, 7), *b = kv_rotating_new(NKV, HD, 8, 0, 100000, 7);
    kv_cache *d = kv_dense_new(NKV, HD, 2000, 7), *e = kv_dense_new(NKV, HD, 2000, 7);
    a->stats = d->stats = &si;
    a->inplace = d->inplace = 1;
    b->stats = e->stats = &sc;
    b->inplace = e->inplace = 0;
    srand(3);
    int32_t p = 0;
    int same = 1;
    kv_pool_stats p0, p1;
    kv_pool_stats_get(kv_pool_default(), &p0);
    for (int step = 0; step < 200; step++) {
        int T = 1 + rand() % 7;
        append(a, p, T);
        append(b, p, T);
        append(d, p, T);
        append(e, p, T);
        p += T;
        same &= same_view(a, b) && same_view(d, e);
    }
    CHECK(same, "the copying path put different rows in different slots");
    CHECK(sc.cow_copies >= 398 && sc.copied_bytes > 0, "copying path: %llu copies", (unsigned long long)sc.cow_copies);
    CHECK(si.cow_copies == 0, "in-place path made %llu copies", (unsigned long long)si.cow_copies);
    /* every copy takes blocks, but they come back to the pool and are reused: at
     * most two copies' worth of blocks are ever committed (~800 dense rows) */
    kv_pool_stats_get(kv_pool_default(), &p1);
    CHECK(p1.committed_blocks - p0.committed_blocks <= 2 * (p1.used_blocks - p0.used_blocks) + 4,
          "copying path committed %ld blocks to hold %ld (the pool should recycle them)",
          p1.committed_blocks - p0.committed_blocks, p1.used_blocks - p0.used_blocks);
    kv_free(a);
    kv_free(b);
    kv_free(d);
    kv_free(e);
}

/* ---- truncation ----------------------------------------------------------------- */

static void truncate_rules(void) {
    kv_cache *c = kv_rotating_new(NKV, HD, 8, 0, 10000, 4);
    c->inplace = 1;
    for (int p = 0; p < 30; p++) append(c, p, 1);
    /* holds 22..29: going back to 29 needs 22..28: fine */
    CHECK(kv_can_truncate(c, 29) == 0, "going back one position should work: %s", err_msg());
    CHECK(kv_can_truncate(c, 25) != 0, "going back to 25 needs 18..24, which the ring overwrote");
    CHECK_STR_HAS(err_msg(), "overwritten");
    CHECK(kv_truncate(c, 25) != 0 && view_problems(c, 22, 29, 0) == 0, "a refused truncate changed the cache");
    /* truncating a shared ring copies when it has to move rows; the snapshot keeps its rows */
    kv_cache *snap = kv_share(c, 0, NULL);
    CHECK(kv_truncate(c, 29) == 0 && view_problems(c, 22, 28, 0) == 0, "truncate to 29");
    CHECK(append(c, 29, 1) == 0 && view_problems(c, 22, 29, 0) == 0, "append after truncate");
    CHECK(view_problems(snap, 22, 29, 0) == 0, "truncating a shared ring changed the snapshot");
    kv_free(snap);
    /* a chunk-widened ring (8 - 1 + 4 rows) can go back further */
    kv_cache *d = kv_rotating_new(NKV, HD, 8, 0, 10000, 4);
    for (int p = 0; p < 20; p += 4) append(d, p, 4);
    CHECK(kv_can_truncate(d, 17) == 0, "a chunk-widened ring can go back to 17: %s", err_msg());
    CHECK(kv_truncate(d, 17) == 0 && view_problems(d, 9, 16, 0) == 0, "truncate to 17 (n %d)", d->n);
    CHECK(append(d, 17, 1) == 0 && view_problems(d, 10, 17, 0) == 0, "append after truncate");
    kv_free(d);
    kv_free(c);
    kv_cache *e = kv_dense_new(NKV, HD, 100, 8);
    append(e, 0, 8);
    CHECK(kv_truncate(e, 3) == 0 && view_problems(e, 0, 2, 0) == 0, "dense truncate");
    kv_free(e);
}

/* A snapshot that outlives the session that grew its buffer gives the growth back. */
static void trim_after_session_ends(void) {
    kv_cache *c = kv_dense_new(NKV, HD, 4000, 64);
    append(c, 0, 10);
    kv_cache *snap = kv_share(c, 0, NULL);
    for (int p = 10; p < 900; p += 64) append(c, p, 900 - p < 64 ? 900 - p : 64);
    CHECK(kv_trim(snap) == 0, "trimmed a shared buffer");
    size_t before = kv_bytes(snap);
    kv_free(c);
    size_t freed = kv_trim(snap);
    /* 900 rows took 15 blocks; the snapshot's 10 rows keep one */
    CHECK(before == (size_t)960 * ROW_BYTES && freed == (size_t)896 * ROW_BYTES && kv_bytes(snap) == (size_t)64 * ROW_BYTES,
          "committed %zu bytes, released %zu, now %zu", before, freed, kv_bytes(snap));
    CHECK(view_problems(snap, 0, 9, 0) == 0, "trim changed the rows");
    kv_cache *b = kv_share(snap, 64, NULL);
    kv_free(snap);
    CHECK(append(b, 10, 64) == 0 && append(b, 74, 300) == 0 && view_problems(b, 0, 373, 0) == 0, "growing again after a trim");
    kv_free(b);
}

static void sane_catches_corruption(void) {
    kv_cache *c = kv_rotating_new(NKV, HD, 8, 0, 1000, 4);
    for (int p = 0; p < 12; p++) append(c, p, 1);
    CHECK(kv_sane(c), "a sound cache: %s", err_msg());
    int32_t keep = *kv_slot_pos(c, 3);
    *kv_slot_pos(c, 3) = *kv_slot_pos(c, 4);
    CHECK(!kv_sane(c), "a duplicated position went unnoticed");
    *kv_slot_pos(c, 3) = keep;
    kv_cache *snap = kv_share(c, 0, NULL);
    atomic_store(&c->buf->hw, 2);
    CHECK(!kv_sane(c), "a view past the high-water mark went unnoticed");
    atomic_store(&c->buf->hw, c->n);
    CHECK(kv_sane(c), "restored: %s", err_msg());
    kv_free(snap);
    kv_free(c);
    kv_free(NULL);
    CHECK(kv_rotating_new(NKV, HD, 1, 0, 10, 1) == NULL, "window 1 accepted");
}

/* ---- bf16 rows in host memory ----------------------------------------------------- */

/* A row value that bf16 cannot hold exactly: a position-dependent value plus a
 * fraction below bf16's step, and every 7th an exact tie (rounds to even). */
static float odd_value(int32_t p, int i) {
    const float base = (float)(1 + (p * ROW + i) % 97) / 8.0f;
    return (p + i) % 7 == 0 ? base + base * ldexpf(1, -8) /* half a bf16 step: a tie */
                            : base + base * ldexpf(1, -11) * (float)(1 + i % 5);
}

static void odd_rows(int32_t p0, int T, float *k, float *v, int32_t *pos) {
    for (int t = 0; t < T; t++) {
        pos[t] = p0 + t;
        for (int i = 0; i < ROW; i++) {
            k[t * ROW + i] = odd_value(p0 + t, i);
            v[t * ROW + i] = -odd_value(p0 + t, i + 3);
        }
    }
}

/* Problems with a bf16 view of positions [0, hi]: every stored element the nearest-even
 * rounding of its row's value, and kv_rows_to_host its exact widening. */
static int bf16_view_problems(const kv_cache *c, int32_t lo, int32_t hi) {
    attn_kv a;
    kv_view(c, &a);
    int bad = a.dtype != KVT_BF16 || a.n != hi - lo + 1;
    float *hk, *hv;
    int32_t *hp;
    if (kv_rows_to_host(c, &hk, &hv, &hp) != 0) return bad + 1;
    for (int s = 0; s < a.n; s++) {
        const long x = attn_kv_row(&a, s);
        const int32_t p = a.pos[x];
        bad += p < lo || p > hi || hp[s] != p;
        for (int i = 0; i < ROW; i++) {
            const uint16_t ks = ((const uint16_t *)a.k)[x * a.row_stride + i], vs = ((const uint16_t *)a.v)[x * a.row_stride + i];
            bad += ks != f32_to_bf16(odd_value(p, i)) || vs != f32_to_bf16(-odd_value(p, i + 3));
            bad += hk[(long)s * ROW + i] != bf16_to_f32(ks) || hv[(long)s * ROW + i] != bf16_to_f32(vs);
        }
    }
    free(hk);
    free(hv);
    free(hp);
    return bad + !kv_sane(c);
}

static int odd_append(kv_cache *c, int32_t p0, int T) { return append_rows(c, p0, T, odd_rows); }

static void host_bf16_rows(void) {
    /* the values round: bf16 of value != value for most elements */
    int inexact = 0;
    for (int i = 0; i < ROW; i++) inexact += bf16_to_f32(f32_to_bf16(odd_value(3, i))) != odd_value(3, i);
    CHECK(inexact > ROW / 2, "test values: only %d of %d round", inexact, ROW);
    kv_stats st = {0}, branch = {0};
    kv_cache *c = kv_dense_new(NKV, HD, 1000, 70);
    c->stats = &st;
    c->inplace = 1;
    c->dtype = KVT_BF16;
    CHECK(odd_append(c, 0, 70) == 0 && odd_append(c, 70, 1) == 0, "bf16 appends: %s", err_msg());
    CHECK(bf16_view_problems(c, 0, 70) == 0, "bf16 dense view after 71 rows");
    CHECK(kv_view_bytes(c) == 71 * (ROW * 2 * 2 + sizeof(int32_t)), "bf16 view bytes %zu", kv_view_bytes(c));
    /* a branch from a snapshot copies its first block on write: bf16 bytes */
    kv_cache *snap = kv_share(c, 0, NULL), *b = kv_share(snap, 16, &branch);
    b->inplace = 1;
    CHECK(kv_truncate(b, 10) == 0 && odd_append(b, 10, 1) == 0, "branch write: %s", err_msg());
    CHECK(branch.cow_copies == 1 && branch.copied_bytes == 10 * (ROW * 2 * 2 + sizeof(int32_t)),
          "branch copied %llu bytes in %llu copies, want 10 bf16 rows", (unsigned long long)branch.copied_bytes,
          (unsigned long long)branch.cow_copies);
    CHECK(bf16_view_problems(b, 0, 10) == 0 && bf16_view_problems(c, 0, 70) == 0, "branch and live views");
    /* set_rows rounds as append does */
    float k[5 * ROW], v[5 * ROW];
    int32_t pos[5];
    odd_rows(0, 5, k, v, pos);
    kv_cache *d = kv_dense_new(NKV, HD, 100, 8);
    d->dtype = KVT_BF16;
    CHECK(kv_set_rows(d, k, v, pos, 5) == 0 && bf16_view_problems(d, 0, 4) == 0, "bf16 set_rows: %s", err_msg());
    /* a rotating cache wraps over bf16 rows */
    kv_cache *r = kv_rotating_new(NKV, HD, 8, 0, 1000, 4);
    r->dtype = KVT_BF16;
    r->inplace = 1;
    int ok = 1;
    for (int p = 0; p < 30; p++) ok &= odd_append(r, p, 1) == 0;
    CHECK(ok && bf16_view_problems(r, 30 - 8, 29) == 0, "bf16 rotating view after a wrap: %s", err_msg());
    kv_free(r);
    kv_free(d);
    kv_free(b);
    kv_free(snap);
    kv_free(c);
}

int main(void) {
    RUN(dense_chunks_and_growth);
    RUN(dense_decode_allocates_nothing);
    RUN(rotating_warmup_and_wrap);
    RUN(rotating_chunks_cross_window);
    RUN(rotating_writes_in_runs);
    RUN(rotating_keep);
    RUN(snapshot_in_warmup);
    RUN(snapshot_after_wrap);
    RUN(prefix_blocks_shared);
    RUN(pool_budget);
    RUN(sharing_tests_can_fail);
    RUN(dense_snapshot_and_branch);
    RUN(branches_on_threads);
    RUN(copying_path_same_slots);
    RUN(truncate_rules);
    RUN(trim_after_session_ends);
    RUN(sane_catches_corruption);
    RUN(host_bf16_rows);
    return harness_done();
}
