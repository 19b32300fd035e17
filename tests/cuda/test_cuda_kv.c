/* tests/cuda/test_cuda_kv.c: the KV cache in device memory (paged: blocks of the
 * GPU's pool, docs/kv-cache.md), on the GPU against the CPU.
 *
 * - device_cache_matches_cpu: the default model (context 1024) fed 1000 tokens in
 *   chunks of 37 and then one at a time, with a snapshot taken at 300 tokens that
 *   keeps its blocks alive while the session grows past it; after the run the
 *   snapshot is restored and continued, which must match the CPU's continuation.
 *   Logits within the GPU tolerance (5e-2) and the same top token wherever the CPU's
 *   top two differ by more than 0.05; the device cache copies exactly what the host
 *   cache copies (the snapshot's shared blocks, copied on write), nothing for growth.
 * - paged_growth_no_copies: two caches growing in turn (so their blocks interleave in
 *   the pool) past several blocks make no copy, hold the host cache's rows, and the
 *   attention kernels (CUDA-core f32, flash bf16; decode and prefill shapes) read them
 *   through the block table as the CPU reads the same rows contiguously.
 * - rotating_window_in_blocks: a rotating cache keeps its window in its blocks
 *   without moving rows.
 * - shared_prefix_copy_on_write: a snapshot's blocks are shared; a write copies only
 *   the block it touches (cow_blocks), the snapshot's rows stay as they were; all
 *   blocks go back to the pool when every holder is freed.
 * - graph_tables_per_step: recorded (graph-replayed) steps whose rows' block tables
 *   change from step to step give the op-by-op results bit for bit.
 * Run by `make test-cuda` on the GPU machine. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include <string.h>

#include "backend/backend.h"
#include "celer.h"
#include "fixture_util.h"
#include "harness.h"
#include "kv/cache.h"
#include "kv/pool.h"

enum { N = 1000, SNAP = 300, CONT = 40, V_MAX = 4096 };

/* Feeds tok [N] (chunks of 37 up to 900, then single steps), snapshotting at SNAP;
 * then restores the snapshot and feeds cont [CONT]. Logits of every row into out
 * [N + CONT, V]. 0 or -1. */
static int run(const char *device, const int32_t *tok, const int32_t *cont, float *out, int *V, celer_kv_stats *st) {
    celer_model *m = celer_model_open_on("models/default", 2, device);
    if (!m) return -1;
    celer_model_info in;
    celer_model_get_info(m, &in);
    *V = in.vocab_size;
    celer_session *s = celer_session_new(m, 1024, 64);
    celer_snapshot *snap = NULL;
    int rc = s ? 0 : -1;
    for (int i = 0; i < N && rc == 0;) {
        int n = i < 900 ? (i + 37 <= SNAP || i >= SNAP ? 37 : SNAP - i) : 1;
        if (i + n > N) n = N - i;
        rc = celer_session_eval(s, tok + i, n, out + (size_t)i * *V, 1);
        i += n;
        if (rc == 0 && i == SNAP && !(snap = celer_session_snapshot(s))) rc = -1;
    }
    if (rc == 0 && snap) rc = celer_session_restore(s, snap);
    if (rc == 0) rc = celer_session_eval(s, cont, CONT, out + (size_t)N * *V, 1);
    if (rc != 0) fprintf(stderr, "%s: %s\n", device, celer_last_error());
    if (s) celer_session_kv_stats(s, st);
    celer_snapshot_free(snap);
    celer_session_free(s);
    celer_model_free(m);
    return rc;
}

static void device_cache_matches_cpu(void) {
    int32_t tok[N], cont[CONT];
    unsigned seed = 7;
    for (int i = 0; i < N; i++) tok[i] = (int32_t)(rand_r(&seed) % 4000) + 1;
    for (int i = 0; i < CONT; i++) cont[i] = (int32_t)(rand_r(&seed) % 4000) + 1;
    size_t rows = N + CONT;
    float *a = malloc(rows * V_MAX * sizeof *a), *b = malloc(rows * V_MAX * sizeof *b);
    int V = 0;
    CHECK(a && b, "out of memory");
    if (!a || !b) goto out;
    celer_kv_stats sa, sb;
    memset(&sa, 0, sizeof sa);
    memset(&sb, 0, sizeof sb);
    CHECK(run("cpu", tok, cont, a, &V, &sa) == 0, "cpu run");
    CHECK(run("cuda", tok, cont, b, &V, &sb) == 0, "cuda run");
    /* the same rows (float32 under the exact precision) copied for the same reasons:
     * the snapshot's shared block, once after it and once after the restore */
    printf("  copied bytes: cpu %llu, cuda %llu; cow blocks: cpu %llu, cuda %llu\n", (unsigned long long)sa.copied_bytes,
           (unsigned long long)sb.copied_bytes, (unsigned long long)sa.cow_blocks, (unsigned long long)sb.cow_blocks);
    CHECK(sb.copied_bytes == sa.copied_bytes && sb.cow_blocks == sa.cow_blocks && sb.cow_copies == sa.cow_copies,
          "device cache copies (%llu bytes, %llu blocks, %llu tables) differ from the host's (%llu, %llu, %llu)",
          (unsigned long long)sb.copied_bytes, (unsigned long long)sb.cow_blocks, (unsigned long long)sb.cow_copies,
          (unsigned long long)sa.copied_bytes, (unsigned long long)sa.cow_blocks, (unsigned long long)sa.cow_copies);
    CHECK(sa.cow_blocks > 0, "the snapshot's shared block was never copied (the test lost its point)");
    double e = 0;
    for (size_t i = 0; i < rows * (size_t)V; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= e)) e = d;
    }
    int flips = fixture_argmax_flips(b, a, (int)rows, V, 0.05f);
    printf("  %zu rows: max |gpu - cpu| = %.3g, %d clear top-token differences\n", rows, e, flips);
    CHECK(e <= 5e-2, "max |gpu - cpu| = %g over %zu rows (tolerance 5e-2)", e, rows);
    CHECK(flips == 0, "%d rows with a different clear top token", flips);
out:
    free(a);
    free(b);
}

/* ---- the cache layer on the GPU, through its backend ---------------------------- */

static backend *g_gpu, *g_cpu;
enum { NKV = 2, HD = 64, NH = 4, ROW = NKV * HD, MAXT = 64 };

static float frand(unsigned *s) { return (float)rand_r(s) / (float)RAND_MAX * 2.f - 1.f; }

static kv_cache *on_gpu(kv_cache *c, int dtype, kv_stats *st) {
    if (c) {
        c->dev = g_gpu;
        c->dtype = dtype;
        c->stats = st;
    }
    return c;
}

/* Appends T random rows at positions p0.. to c (a device cache) and to h (a host
 * cache, or NULL): the same rows. 0 or -1. */
static int append(kv_cache *c, kv_cache *h, int32_t p0, int T, unsigned *seed) {
    static float k[MAXT * ROW], v[MAXT * ROW];
    static void *dk, *dv;
    int32_t pos[MAXT];
    if (!dk) {
        dk = g_gpu->ops->alloc(g_gpu, sizeof k);
        dv = g_gpu->ops->alloc(g_gpu, sizeof v);
        if (!dk || !dv) return -1;
    }
    for (int i = 0; i < T * ROW; i++) {
        k[i] = frand(seed);
        v[i] = frand(seed);
    }
    for (int i = 0; i < T; i++) pos[i] = p0 + i;
    g_gpu->ops->upload(g_gpu, dk, k, (size_t)T * ROW * sizeof(float));
    g_gpu->ops->upload(g_gpu, dv, v, (size_t)T * ROW * sizeof(float));
    if (kv_append(c, dk, dv, pos, T) != 0) return -1;
    return h ? kv_append(h, k, v, pos, T) : 0;
}

/* 1 when a's rows (downloaded) equal h's bit for bit, slot for slot. */
static int same_rows(const kv_cache *a, const kv_cache *h) {
    float *ak, *av, *hk, *hv;
    int32_t *ap, *hp;
    if (a->n != h->n || kv_rows_to_host(a, &ak, &av, &ap) != 0) return 0;
    if (kv_rows_to_host(h, &hk, &hv, &hp) != 0) return 0;
    const size_t fb = (size_t)a->n * ROW * sizeof(float);
    int ok = !memcmp(ak, hk, fb) && !memcmp(av, hv, fb) && !memcmp(ap, hp, (size_t)a->n * sizeof(int32_t));
    free(ak), free(av), free(ap), free(hk), free(hv), free(hp);
    return ok;
}

/* 1 when some neighbouring entries of c's block table are not consecutive ids (the
 * rows really are scattered over the pool). */
static int scattered(const kv_cache *c) {
    for (int i = 1; i < (c->n + KV_BLOCK - 1) / KV_BLOCK; i++)
        if (c->buf->table[i] != c->buf->table[i - 1] + 1) return 1;
    return 0;
}

/* max |gpu - cpu| of attention of T random queries at c's last T positions: on the
 * GPU over c's (paged) view, on the CPU over its rows downloaded into one contiguous
 * array. -1 on failure. */
static double attn_err(kv_cache *c, int T, int window, unsigned *seed) {
    attn_kv kv, hkv;
    kv_view(c, &kv);
    float *hk, *hv;
    int32_t *hp, lo, hi;
    if (kv_rows_to_host(c, &hk, &hv, &hp) != 0) return -1;
    kv_pos_range(c, &lo, &hi);
    memset(&hkv, 0, sizeof hkv);
    hkv.k = hk, hkv.v = hv, hkv.pos = hp, hkv.n = c->n, hkv.row_stride = ROW, hkv.dtype = KVT_F32;
    const size_t qn = (size_t)T * NH * HD;
    float *q = malloc(qn * sizeof *q), *oc = malloc(qn * sizeof *oc), *og = malloc(qn * sizeof *og);
    int32_t qpos[MAXT];
    for (size_t i = 0; i < qn; i++) q[i] = frand(seed);
    for (int t = 0; t < T; t++) qpos[t] = hi - T + 1 + t;
    attn_params p;
    memset(&p, 0, sizeof p);
    p.n_heads = NH, p.n_kv = NKV, p.head_dim = HD, p.scale = 0.125f, p.window = window;
    g_cpu->ops->attention(g_cpu, q, qpos, T, &hkv, &p, oc);
    float *dq = g_gpu->ops->alloc(g_gpu, qn * sizeof *q), *dout = g_gpu->ops->alloc(g_gpu, qn * sizeof *q);
    int32_t *dqp = g_gpu->ops->alloc(g_gpu, sizeof qpos);
    g_gpu->ops->upload(g_gpu, dq, q, qn * sizeof *q);
    g_gpu->ops->upload(g_gpu, dqp, qpos, sizeof qpos);
    g_gpu->ops->attention(g_gpu, dq, dqp, T, &kv, &p, dout);
    g_gpu->ops->download(g_gpu, og, dout, qn * sizeof *og);
    double e = g_gpu->ops->status(g_gpu) != 0 ? -1 : 0;
    for (size_t i = 0; i < qn && e >= 0; i++) {
        double d = fabs((double)og[i] - oc[i]);
        if (!(d <= e)) e = d;
    }
    g_gpu->ops->release(g_gpu, dq), g_gpu->ops->release(g_gpu, dout), g_gpu->ops->release(g_gpu, dqp);
    free(q), free(oc), free(og), free(hk), free(hv), free(hp);
    return e;
}

static void paged_growth_no_copies(void) {
    for (int dt = 0; dt < 2; dt++) {
        const int dtype = dt ? KVT_BF16 : KVT_F32;
        kv_stats st;
        memset(&st, 0, sizeof st);
        kv_cache *a = on_gpu(kv_dense_new(NKV, HD, 1024, MAXT), dtype, &st);
        kv_cache *b = on_gpu(kv_dense_new(NKV, HD, 1024, MAXT), dtype, &st);
        kv_cache *h = kv_dense_new(NKV, HD, 1024, MAXT);
        unsigned seed = 11, sb = 12;
        int rc = a && b && h ? 0 : -1;
        /* a and b grow in turn, so their blocks interleave in the pool */
        for (int n = 0; n < 700 && rc == 0;) {
            int T = n < 600 ? 37 : 1;
            if (n + T > 700) T = 700 - n;
            rc = append(a, h, n, T, &seed) | append(b, NULL, n, T, &sb);
            n += T;
        }
        CHECK(rc == 0, "growing: %s", celer_last_error());
        if (rc == 0) {
            printf("  %s: 700 rows in %d blocks, copied %llu bytes, %llu buffer copies\n", dt ? "bf16" : "f32",
                   atomic_load(&a->buf->cap) / KV_BLOCK, (unsigned long long)st.copied_bytes,
                   (unsigned long long)st.cow_copies);
            CHECK(st.copied_bytes == 0 && st.cow_copies == 0 && st.cow_blocks == 0,
                  "growth copied %llu bytes (%llu buffer copies, %llu blocks)", (unsigned long long)st.copied_bytes,
                  (unsigned long long)st.cow_copies, (unsigned long long)st.cow_blocks);
            CHECK(atomic_load(&a->buf->cap) == 11 * KV_BLOCK, "%d rows committed for 700", atomic_load(&a->buf->cap));
            CHECK(scattered(a), "a's blocks are consecutive ids: the test would not see a table ignored");
            CHECK(kv_sane(a) && kv_sane(b), "%s", celer_last_error());
            if (!dt) CHECK(same_rows(a, h), "the device rows differ from the host cache's");
            const double tol = dt ? 3e-2 : 1e-4;
            const int Ts[] = {1, 5, 40};
            for (int i = 0; i < 3; i++) {
                double e = attn_err(a, Ts[i], 0, &seed);
                printf("  %s attention T=%d over 700 paged rows: max |gpu - cpu| = %.3g\n", dt ? "bf16" : "f32", Ts[i], e);
                CHECK(e >= 0 && e <= tol, "%s attention T=%d: max |gpu - cpu| = %g (tolerance %g)", dt ? "bf16" : "f32",
                      Ts[i], e, tol);
            }
        }
        kv_free(a), kv_free(b), kv_free(h);
    }
}

static void rotating_window_in_blocks(void) {
    enum { W = 100 };
    kv_stats st;
    memset(&st, 0, sizeof st);
    kv_cache *a = on_gpu(kv_rotating_new(NKV, HD, W, 0, 1024, 1), KVT_F32, &st);
    kv_cache *h = kv_rotating_new(NKV, HD, W, 0, 1024, 1);
    unsigned seed = 5;
    int rc = a && h ? 0 : -1;
    for (int n = 0; n < 300 && rc == 0; n++) rc = append(a, h, n, 1, &seed);
    CHECK(rc == 0, "decoding: %s", celer_last_error());
    if (rc == 0) {
        CHECK(a->n == W, "%d rows held (window %d)", a->n, W);
        CHECK(st.copied_bytes == 0 && st.cow_copies == 0, "the ring moved %llu bytes", (unsigned long long)st.copied_bytes);
        CHECK(atomic_load(&a->buf->cap) == 2 * KV_BLOCK, "%d rows committed for a window of %d", atomic_load(&a->buf->cap), W);
        CHECK(same_rows(a, h), "the device ring differs from the host's");
        double e = attn_err(a, 1, W, &seed);
        CHECK(e >= 0 && e <= 1e-4, "windowed attention over the ring: max |gpu - cpu| = %g", e);
    }
    kv_free(a), kv_free(h);
}

static void shared_prefix_copy_on_write(void) {
    kv_pool *pool = kv_pool_device(g_gpu);
    CHECK(pool != NULL, "%s", celer_last_error());
    if (!pool) return;
    kv_pclass *cls = kv_pool_class(pool, ROW, KVT_F32);
    kv_pool_stats p0, p1;
    kv_pool_stats_get(pool, &p0);
    const long free0 = cls ? kv_pool_free_blocks(pool, cls) : -1;
    kv_stats st;
    memset(&st, 0, sizeof st);
    kv_cache *a = on_gpu(kv_dense_new(NKV, HD, 1024, MAXT), KVT_F32, &st);
    kv_cache *h = kv_dense_new(NKV, HD, 1024, MAXT);
    unsigned seed = 9;
    int rc = a && h ? 0 : -1;
    for (int n = 0; n < 200 && rc == 0; n += 50) rc = append(a, h, n, 50, &seed);
    kv_cache *snap = rc == 0 ? kv_share(a, MAXT, NULL) : NULL;
    kv_cache *hs = rc == 0 ? kv_share(h, MAXT, NULL) : NULL;
    CHECK(snap && hs, "sharing: %s", celer_last_error());
    /* a continues past the snapshot in place (its claim); a branch from the snapshot
     * then writes into the block holding rows 192..199: that block alone is copied */
    kv_cache *br = snap ? kv_share(snap, MAXT, &st) : NULL;
    kv_cache *hb = hs ? kv_share(hs, MAXT, NULL) : NULL;
    unsigned s2 = seed;
    rc = br && hb ? append(a, h, 200, 1, &seed) : -1;
    CHECK(rc == 0 && st.copied_bytes == 0, "appending past the snapshot copied %llu bytes", (unsigned long long)st.copied_bytes);
    s2 += 1000;
    if (rc == 0) rc = append(br, hb, 200, 1, &s2);
    CHECK(rc == 0, "branching: %s", celer_last_error());
    if (rc == 0) {
        const uint64_t rb = (uint64_t)ROW * 2 * sizeof(float) + sizeof(int32_t);
        printf("  branch at 200: %llu blocks copied, %llu bytes\n", (unsigned long long)st.cow_blocks,
               (unsigned long long)st.copied_bytes);
        CHECK(st.cow_blocks == 1 && st.copied_bytes == 8 * rb, "the branch copied %llu blocks, %llu bytes (want 1, %llu)",
              (unsigned long long)st.cow_blocks, (unsigned long long)st.copied_bytes, (unsigned long long)(8 * rb));
        CHECK(a->buf->table[0] == br->buf->table[0] && a->buf->table[3] != br->buf->table[3],
              "the branch shares the prefix's full blocks and owns the one it wrote");
        CHECK(same_rows(a, h) && same_rows(br, hb) && same_rows(snap, hs), "rows after the branch differ from the host's");
    }
    kv_free(br), kv_free(hb), kv_free(snap), kv_free(hs), kv_free(a), kv_free(h);
    kv_pool_stats_get(pool, &p1);
    const long free1 = cls ? kv_pool_free_blocks(pool, cls) : -1;
    printf("  pool: %ld blocks used before, %ld after; %ld free before, %ld after\n", p0.used_blocks, p1.used_blocks,
           free0, free1);
    CHECK(p1.used_blocks == p0.used_blocks && free1 == free0, "blocks held after every holder is freed: %ld (was %ld)",
          p1.used_blocks, p0.used_blocks);
}

/* Attention of rows q [2] over views kvs [2]: op by op (ref) or recorded as one step
 * (graph-replayed from the third step on). */
static void batch_step(int recorded, const float *dq, const int32_t *dqp, const attn_kv *kvs, const attn_params *p,
                       float *dout, float *out) {
    int rec = recorded && g_gpu->ops->step_begin(g_gpu, 2);
    g_gpu->ops->attention_batch(g_gpu, dq, dqp, 2, kvs, 1024, KVT_BF16, p, dout);
    g_gpu->ops->attention(g_gpu, dq, dqp, 1, &kvs[1], p, dout + 2 * NH * HD);
    if (rec) g_gpu->ops->step_end(g_gpu);
    g_gpu->ops->download(g_gpu, out, dout, 3 * NH * HD * sizeof(float));
}

static void graph_tables_per_step(void) {
    enum { NC = 4, STEPS = 8 };
    kv_cache *c[NC];
    const int len[NC] = {270, 330, 390, 450}; /* one split bucket: every step records the same ops */
    unsigned seed = 21;
    int rc = 0;
    for (int i = 0; i < NC; i++) rc |= !(c[i] = on_gpu(kv_dense_new(NKV, HD, 1024, MAXT), KVT_BF16, NULL));
    for (int n = 0; n < 450 && rc == 0; n += 30) /* in turn: scattered tables */
        for (int i = 0; i < NC && rc == 0; i++)
            if (n < len[i]) rc = append(c[i], NULL, n, n + 30 <= len[i] ? 30 : len[i] - n, &seed);
    CHECK(rc == 0, "filling: %s", celer_last_error());
    float q[3 * NH * HD], ref[3 * NH * HD], got[3 * NH * HD];
    int32_t qpos[2] = {100000, 100000};
    for (int i = 0; i < 2 * NH * HD; i++) q[i] = frand(&seed);
    float *dq = g_gpu->ops->alloc(g_gpu, sizeof q), *dout = g_gpu->ops->alloc(g_gpu, sizeof q);
    int32_t *dqp = g_gpu->ops->alloc(g_gpu, sizeof qpos);
    g_gpu->ops->upload(g_gpu, dq, q, sizeof q);
    g_gpu->ops->upload(g_gpu, dqp, qpos, sizeof qpos);
    attn_params p;
    memset(&p, 0, sizeof p);
    p.n_heads = NH, p.n_kv = NKV, p.head_dim = HD, p.scale = 0.125f;
    int bad = 0;
    for (int s = 0; s < STEPS && rc == 0; s++) {
        attn_kv kvs[2];
        kv_view(c[s % NC], &kvs[0]);
        kv_view(c[(s * 3 + 1) % NC], &kvs[1]);
        batch_step(0, dq, dqp, kvs, &p, dout, ref);
        batch_step(1, dq, dqp, kvs, &p, dout, got);
        if (memcmp(ref, got, sizeof ref) != 0) bad++;
    }
    CHECK(g_gpu->ops->status(g_gpu) == 0, "%s", celer_last_error());
    CHECK(bad == 0, "%d of %d recorded steps differ from their op-by-op results", bad, STEPS);
    g_gpu->ops->release(g_gpu, dq), g_gpu->ops->release(g_gpu, dout), g_gpu->ops->release(g_gpu, dqp);
    for (int i = 0; i < NC; i++) kv_free(c[i]);
}

int main(void) {
    fixture_select_exact(); /* the 5e-2 tolerance is the exact precision's */
    RUN(device_cache_matches_cpu);
    if (!(g_gpu = backend_open("cuda", 1, 4096))) {
        fprintf(stderr, "cuda: %s\n", celer_last_error());
        return 1;
    }
    g_cpu = backend_open("cpu", 1, 4096);
    RUN(paged_growth_no_copies);
    RUN(rotating_window_in_blocks);
    RUN(shared_prefix_copy_on_write);
    RUN(graph_tables_per_step);
    backend_free(g_cpu);
    backend_free(g_gpu);
    return harness_done();
}
