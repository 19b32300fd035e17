/* tests/test_snapshot_fixtures.c: the KV caches through the public API on the
 * reference fixtures. For every model: logits bit-identical with
 * CELER_KV_INPLACE_WRITE on and off at every chunking (and within 2e-3 of the
 * reference); greedy output identical both ways; a snapshot at ref.json's branch,
 * seq_a continued, the snapshot restored and seq_b continued, both matching the
 * reference; the same through a cache file; 100 decode steps that allocate and
 * copy nothing; Llama/Qwen3 and the sliding-window families (Gemma 3/4, gpt-oss,
 * EXAONE 4, whose rings wrap before the branch point). Llama also runs with an artificial sliding window (a rotating
 * cache compared with a dense one under the same mask), and bad cache files and
 * impossible rewinds must fail cleanly (including 300 fuzzed cache files); and a bf16
 * cache on the CPU branches and saves without changing a bit. */
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/settings.h"
#include "engine/engine.h"
#include "fixture_util.h"
#include "harness.h"


static double max_diff(const float *a, const float *b, long n) {
    double m = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

/* A session made with CELER_KV_INPLACE_WRITE=inplace. */
static celer_session *session_with(celer_model *m, int ctx, int batch, int inplace) {
    setting_override(SET_CELER_KV_INPLACE_WRITE, inplace ? "1" : "0");
    celer_session *s = celer_session_new(m, ctx, batch);
    setting_override(SET_CELER_KV_INPLACE_WRITE, NULL);
    return s;
}

/* Logits [n, V] of tok fed `chunk` at a time (0: all) into a fresh session. */
static int logits_of(celer_model *m, const int32_t *tok, int n, int chunk, int inplace, float *out, celer_kv_stats *st) {
    celer_session *s = session_with(m, n, chunk ? chunk : n, inplace);
    int rc = s ? celer_session_eval(s, tok, n, out, 1) : -1;
    if (s && st) celer_session_kv_stats(s, st);
    celer_session_free(s);
    return rc;
}

typedef struct {
    const char *name;
    char dir[256];
    fixture_ref r;
    celer_model *m;
} fx;

static int fx_open(fx *f, const char *name) {
    f->name = name;
    snprintf(f->dir, sizeof f->dir, FIXTURE_MODELS "/%.63s", name);
    if (fixture_load(f->dir, &f->r) != 0) {
        CHECK(0, "%s: cannot load reference: %s", name, celer_last_error());
        fixture_free(&f->r);
        return -1;
    }
    if (!(f->m = celer_model_open(f->dir, 2))) {
        CHECK(0, "%s: %s", name, celer_last_error());
        fixture_free(&f->r);
        return -1;
    }
    return 0;
}

static void fx_close(fx *f) {
    celer_model_free(f->m);
    fixture_free(&f->r);
}

/* ---- in place versus copying ------------------------------------------------------ */

static void check_inplace_identity(fx *f) {
    const fixture_ref *r = &f->r;
    size_t nb = (size_t)r->len[0] * (size_t)r->vocab * sizeof(float);
    float *a = malloc(nb), *b = malloc(nb);
    const int chunks[] = {0, 1, 7};
    for (int c = 0; c < 3; c++) {
        celer_kv_stats sa, sb;
        int ok = logits_of(f->m, r->seq[0], r->len[0], chunks[c], 1, a, &sa) == 0 &&
                 logits_of(f->m, r->seq[0], r->len[0], chunks[c], 0, b, &sb) == 0;
        CHECK(ok, "%s chunk %d: %s", f->name, chunks[c], celer_last_error());
        if (!ok) continue;
        CHECK(memcmp(a, b, nb) == 0, "%s chunk %d: logits differ between CELER_KV_INPLACE_WRITE=1 and =0 (max %g)", f->name,
              chunks[c], max_diff(a, b, (long)(nb / sizeof(float))));
        double e = max_diff(a, r->logits[0], (long)(nb / sizeof(float)));
        CHECK(e <= 2e-3, "%s chunk %d: max |logit - ref| = %g", f->name, chunks[c], e);
        CHECK(sa.cow_copies == 0, "%s chunk %d: the in-place arm copied a buffer %llu times", f->name, chunks[c],
              (unsigned long long)sa.cow_copies);
        /* (one write into empty caches has nothing to copy) */
        CHECK(chunks[c] == 0 || (sb.cow_copies > 0 && sb.copied_bytes > 0), "%s chunk %d: the copying arm did not copy",
              f->name, chunks[c]);
    }
    /* greedy generation: the same tokens both ways, and transformers' tokens */
    int32_t out[2][256];
    int n[2];
    for (int i = 0; i < 2; i++) {
        celer_session *s = session_with(f->m, r->len[0], 64, i == 0);
        n[i] = s ? celer_generate_greedy(s, r->seq[0], r->prompt_len, r->n_generated, -1, out[i]) : -1;
        celer_session_free(s);
    }
    CHECK(n[0] == r->n_generated && n[1] == n[0] && !memcmp(out[0], out[1], (size_t)n[0] * sizeof(int32_t)),
          "%s: greedy output differs between in-place and copying writes", f->name);
    CHECK(n[0] > 0 && !memcmp(out[0], r->seq[0] + r->prompt_len, (size_t)n[0] * sizeof(int32_t)),
          "%s: greedy output differs from transformers", f->name);
    free(a);
    free(b);
}

/* ---- branching ---------------------------------------------------------------------- */

/* Feeds tok [n] and checks the logits against ref rows [n, V]; returns max error. */
static double continue_with(celer_session *s, const int32_t *tok, int n, const float *ref, int vocab) {
    float *got = malloc((size_t)n * (size_t)vocab * sizeof(float));
    double e = celer_session_eval(s, tok, n, got, 1) == 0 ? max_diff(got, ref, (long)n * vocab) : -1;
    free(got);
    return e;
}

static void check_branch(fx *f, int chunk) {
    const fixture_ref *r = &f->r;
    const int B = r->branch, V = r->vocab;
    int ctx = r->len[0] > r->len[1] ? r->len[0] : r->len[1];
    celer_session *s = celer_session_new(f->m, ctx, chunk);
    CHECK(celer_session_eval(s, r->seq[1], B, NULL, 0) == 0, "%s: prefill: %s", f->name, celer_last_error());
    celer_snapshot *snap = celer_session_snapshot(s);
    CHECK(snap && celer_snapshot_pos(snap) == B, "%s: snapshot", f->name);
    double ea = continue_with(s, r->seq[0] + B, r->len[0] - B, r->logits[0] + (size_t)B * V, V);
    CHECK(ea >= 0 && ea <= 2e-3, "%s chunk %d: seq_a after the branch point: max err %g", f->name, chunk, ea);
    CHECK(celer_session_restore(s, snap) == 0, "%s: restore: %s", f->name, celer_last_error());
    CHECK(celer_session_pos(s) == B && celer_session_logits(s) &&
              max_diff(celer_session_logits(s), r->logits[1] + (size_t)(B - 1) * V, V) <= 2e-3,
          "%s: the restored logits are not those after token %d", f->name, B - 1);
    double eb = continue_with(s, r->seq[1] + B, r->len[1] - B, r->logits[1] + (size_t)B * V, V);
    CHECK(eb >= 0 && eb <= 2e-3, "%s chunk %d: seq_b after restoring: max err %g", f->name, chunk, eb);
    /* a second session branches from the same snapshot while the first moves on */
    celer_session *t = celer_session_new(f->m, ctx, chunk);
    CHECK(celer_session_restore(t, snap) == 0, "%s: restore into a second session: %s", f->name, celer_last_error());
    celer_snapshot_free(snap); /* the sessions keep what they share */
    double ea2 = continue_with(t, r->seq[0] + B, r->len[0] - B, r->logits[0] + (size_t)B * V, V);
    CHECK(ea2 >= 0 && ea2 <= 2e-3, "%s: seq_a in a second session from the snapshot: max err %g", f->name, ea2);
    celer_session_free(t);
    celer_session_free(s);
}

/* Restoring a cache file and restoring a snapshot give the same logits, bit for bit. */
static void check_cache_file(fx *f) {
    const fixture_ref *r = &f->r;
    const int B = r->branch, V = r->vocab, n = r->len[1] - B;
    char path[256];
    snprintf(path, sizeof path, "/tmp/celer-test-%d-%s.kv", (int)getpid(), f->name);
    celer_session *s = celer_session_new(f->m, r->len[1], 7);
    CHECK(celer_session_eval(s, r->seq[1], B, NULL, 0) == 0, "prefill");
    celer_snapshot *snap = celer_session_snapshot(s);
    CHECK(celer_session_save_cache(s, path) == 0, "%s: save: %s", f->name, celer_last_error());
    float *a = malloc((size_t)n * V * sizeof(float)), *b = malloc((size_t)n * V * sizeof(float));
    CHECK(celer_session_eval(s, r->seq[1] + B, n, a, 1) == 0, "continue");
    celer_session *t = celer_session_new(f->m, r->len[1], 7);
    CHECK(celer_session_load_cache(t, path) == 0, "%s: load: %s", f->name, celer_last_error());
    CHECK(celer_session_pos(t) == B, "%s: loaded %d tokens, want %d", f->name, celer_session_pos(t), B);
    CHECK(celer_session_eval(t, r->seq[1] + B, n, b, 1) == 0, "continue after load");
    CHECK(memcmp(a, b, (size_t)n * V * sizeof(float)) == 0, "%s: the loaded cache gives other logits (max diff %g)", f->name,
          max_diff(a, b, (long)n * V));
    double e = max_diff(b, r->logits[1] + (size_t)B * V, (long)n * V);
    CHECK(e <= 2e-3, "%s: seq_b after loading the cache: max err %g", f->name, e);
    celer_snapshot_free(snap);
    celer_session_free(t);
    celer_session_free(s);
    free(a);
    free(b);
    remove(path);
}

/* 100 decode steps into caches the session alone holds: nothing copied, and nothing
 * allocated but one pool block per layer each KV_BLOCK rows. */
static void check_decode_allocates_nothing(fx *f) {
    const fixture_ref *r = &f->r;
    celer_session *s = celer_session_new(f->m, r->prompt_len + 120, 64);
    CHECK(celer_session_eval(s, r->seq[0], r->prompt_len, NULL, 0) == 0, "prefill");
    int32_t t = celer_session_argmax(s);
    celer_session_eval(s, &t, 1, NULL, 0); /* the first step after a long prefill may compact a ring */
    celer_kv_stats before, after;
    celer_session_kv_stats(s, &before);
    for (int i = 0; i < 100; i++) {
        t = celer_session_argmax(s);
        CHECK(celer_session_eval(s, &t, 1, NULL, 0) == 0, "decode %d: %s", i, celer_last_error());
    }
    celer_session_kv_stats(s, &after);
    const uint64_t blocks = (uint64_t)s->cm->m->cfg.n_layers * (100 / KV_BLOCK + 1);
    CHECK(after.allocs - before.allocs <= blocks && after.copied_bytes == before.copied_bytes &&
              after.cow_copies == before.cow_copies && after.cow_blocks == before.cow_blocks,
          "%s: 100 decode steps: %llu allocations, %llu bytes copied, %llu copies", f->name,
          (unsigned long long)(after.allocs - before.allocs), (unsigned long long)(after.copied_bytes - before.copied_bytes),
          (unsigned long long)(after.cow_copies - before.cow_copies));
    CHECK(after.inplace_rows - before.inplace_rows == 100ull * (unsigned long long)s->cm->m->cfg.n_layers ||
              after.inplace_rows > before.inplace_rows,
          "%s: inplace rows did not grow", f->name);
    celer_session_free(s);
}

static void check_model(const char *name) {
    fx f;
    if (fx_open(&f, name) != 0) return;
    check_inplace_identity(&f);
    check_branch(&f, 1);
    check_branch(&f, 7);
    check_branch(&f, 64);
    check_cache_file(&f);
    check_decode_allocates_nothing(&f);
    fx_close(&f);
}

/* ---- an artificial window on Llama ---------------------------------------------------- */

/* Replaces every cache of s by a dense one (same mask: the plan's window). */
static void make_dense(celer_session *s) {
    for (int l = 0; l < s->cm->m->cfg.n_layers; l++) {
        kv_cache *c = s->caches[l];
        s->caches[l] = engine_cache_new(s->cm->m, l, KV_DENSE, s->ctx, s->max_T); /* on a GPU: in its memory */
        s->caches[l]->stats = &s->stats;
        kv_free(c);
    }
}

static void llama_window(void) {
    fx f;
    if (fx_open(&f, "llama") != 0) return;
    const fixture_ref *r = &f.r;
    const int W = 16, V = r->vocab, n = r->len[0], B = r->branch;
    for (int l = 0; l < f.m->m->cfg.n_layers; l++) f.m->m->plan[l].window = W;
    size_t nb = (size_t)n * V * sizeof(float);
    float *dense = malloc(nb), *rot = malloc(nb), *copy = malloc(nb);
    celer_session *d = celer_session_new(f.m, n, n);
    CHECK(d->caches[0]->kind == KV_ROTATING, "a window shorter than the context should give rotating caches");
    make_dense(d);
    CHECK(celer_session_eval(d, r->seq[0], n, dense, 1) == 0, "dense windowed: %s", celer_last_error());
    celer_session_free(d);
    const int chunks[] = {0, 1, 7, 5};
    for (int c = 0; c < 4; c++) {
        CHECK(logits_of(f.m, r->seq[0], n, chunks[c], 1, rot, NULL) == 0, "rotating chunk %d: %s", chunks[c], celer_last_error());
        CHECK(logits_of(f.m, r->seq[0], n, chunks[c], 0, copy, NULL) == 0, "copying chunk %d", chunks[c]);
        double e = max_diff(rot, dense, (long)n * V);
        CHECK(e <= 1e-4, "chunk %d: a rotating cache differs from a dense one under the same window by %g", chunks[c], e);
        CHECK(memcmp(rot, copy, nb) == 0, "chunk %d: in-place and copying rotating caches differ", chunks[c]);
    }
    /* branch after the ring has wrapped (branch %d > window) */
    celer_session *s = celer_session_new(f.m, n, 7);
    celer_session_eval(s, r->seq[0], B, NULL, 0);
    celer_snapshot *snap = celer_session_snapshot(s);
    float *tail = malloc((size_t)(n - B) * V * sizeof(float));
    CHECK(celer_session_eval(s, r->seq[0] + B, n - B, tail, 1) == 0, "continue");
    double e1 = max_diff(tail, dense + (size_t)B * V, (long)(n - B) * V);
    CHECK(celer_session_rewind(s, B) != 0, "rewinding a wrapped ring past what it holds should fail");
    CHECK_STR_HAS(celer_last_error(), "overwritten");
    CHECK(celer_session_pos(s) == n, "a refused rewind changed the session");
    CHECK(celer_session_restore(s, snap) == 0, "restore");
    CHECK(celer_session_eval(s, r->seq[0] + B, n - B, tail, 1) == 0, "continue after restore");
    double e2 = max_diff(tail, dense + (size_t)B * V, (long)(n - B) * V);
    CHECK(e1 <= 1e-4 && e2 <= 1e-4, "after the snapshot: %g, after restoring it: %g", e1, e2);
    CHECK(celer_session_rewind(s, n - 1) == 0, "rewinding one token of a full ring: %s", celer_last_error());
    celer_snapshot_free(snap);
    celer_session_free(s);
    free(tail);
    free(dense);
    free(rot);
    free(copy);
    fx_close(&f);
}

/* ---- bad input ---------------------------------------------------------------------- */

static void bad_cache_files(void) {
    fx a, b;
    if (fx_open(&a, "llama") != 0) return;
    if (fx_open(&b, "qwen3") != 0) { fx_close(&a); return; }
    char path[256], bad[300];
    snprintf(path, sizeof path, "/tmp/celer-test-%d-bad.kv", (int)getpid());
    snprintf(bad, sizeof bad, "%s.cut", path);
    celer_session *s = celer_session_new(a.m, 64, 8);
    celer_session_eval(s, a.r.seq[0], 20, NULL, 0);
    CHECK(celer_session_save_cache(s, path) == 0, "save: %s", celer_last_error());
    /* another model */
    celer_session *q = celer_session_new(b.m, 64, 8);
    CHECK(celer_session_load_cache(q, path) != 0, "a llama cache loaded into qwen3");
    CHECK_STR_HAS(celer_last_error(), "another model");
    CHECK(celer_session_pos(q) == 0, "a refused load changed the session");
    /* a context too small */
    celer_session *small = celer_session_new(a.m, 10, 8);
    CHECK(celer_session_load_cache(small, path) != 0, "20 tokens loaded into a context of 10");
    CHECK_STR_HAS(celer_last_error(), "context");
    /* truncated, and a corrupted header */
    FILE *in = fopen(path, "rb");
    fseek(in, 0, SEEK_END);
    long size = ftell(in);
    fseek(in, 0, SEEK_SET);
    char *data = malloc((size_t)size);
    CHECK(fread(data, 1, (size_t)size, in) == (size_t)size, "read back");
    fclose(in);
    FILE *out = fopen(bad, "wb");
    fwrite(data, 1, (size_t)size - 100, out);
    fclose(out);
    celer_session *t = celer_session_new(a.m, 64, 8);
    celer_session_eval(t, a.r.seq[0], 5, NULL, 0);
    CHECK(celer_session_load_cache(t, bad) != 0, "a truncated cache file loaded");
    CHECK_STR_HAS(celer_last_error(), bad);
    CHECK(celer_session_pos(t) == 5, "a refused load changed the session");
    char *v = memmem(data, (size_t)size, "version", 7);
    if (v) v[0] = 'W';
    out = fopen(bad, "wb");
    fwrite(data, 1, (size_t)size, out);
    fclose(out);
    CHECK(celer_session_load_cache(t, bad) != 0, "a cache file without a version loaded");
    CHECK_STR_HAS(celer_last_error(), "version");
    CHECK(celer_session_load_cache(t, "/nonexistent/x.kv") != 0, "a missing file loaded");
    /* the file records the element type its rows were computed in (f32 on the CPU);
     * another name is refused */
    if (v) v[0] = 'v';
    char *kd = memmem(data, (size_t)size, "kv_dtype", 8), *f32 = kd ? memmem(kd, 16, "f32", 3) : NULL;
    CHECK(f32 != NULL, "the cache file records kv_dtype f32");
    if (f32) {
        f32[2] = '4'; /* "f34" */
        out = fopen(bad, "wb");
        fwrite(data, 1, (size_t)size, out);
        fclose(out);
        CHECK(celer_session_load_cache(t, bad) != 0, "a cache file of kv_dtype f34 loaded");
        CHECK_STR_HAS(celer_last_error(), "kv_dtype");
        f32[2] = '2';
    }
    /* fuzz: single-byte corruptions (mostly in the header and metadata) and random
     * truncations either load a sane cache or fail with a message; never crash */
    if (v) v[0] = 'v'; /* undo the damage above: fuzz the good file */
    srand(11);
    for (int i = 0; i < 300; i++) {
        char *d = malloc((size_t)size);
        memcpy(d, data, (size_t)size);
        long at = i % 3 == 2 ? 8 + rand() % 4096 : rand() % (size < 8192 ? size : 8192);
        long len = i % 5 == 4 ? rand() % size : size;
        if (at < size) d[at] = (char)(rand() & 0xff);
        out = fopen(bad, "wb");
        fwrite(d, 1, (size_t)len, out);
        fclose(out);
        celer_session *z = celer_session_new(a.m, 64, 8);
        if (celer_session_load_cache(z, bad) == 0) {
            CHECK(celer_session_pos(z) <= 64, "fuzz %d: loaded %d tokens", i, celer_session_pos(z));
            int32_t tk = 1;
            CHECK(celer_session_pos(z) >= 64 || celer_session_eval(z, &tk, 1, NULL, 0) == 0, "fuzz %d: eval after load: %s", i,
                  celer_last_error());
        } else {
            CHECK(celer_last_error()[0] != 0, "fuzz %d: a refused load gave no message", i);
        }
        celer_session_free(z);
        free(d);
    }
    CHECK(celer_session_load_cache(t, path) == 0 && celer_session_pos(t) == 20, "the good file: %s", celer_last_error());
    free(data);
    remove(bad);
    remove(path);
    celer_session_free(s);
    celer_session_free(q);
    celer_session_free(small);
    celer_session_free(t);
    fx_close(&a);
    fx_close(&b);
}

/* ---- a bf16 cache on the CPU ------------------------------------------------------------- */

/* Under CELER_KV_DTYPE=bf16 (a dense and a sliding-window family): a snapshot branch,
 * a cache file and a fresh session give the same logits bit for bit (rows are rounded
 * once when written; the file holds them widened, exactly, and loading rounds them
 * back to the same bits), and the file records kv_dtype bf16. Accuracy against the
 * fixtures is test_cpu_precision's (fast precision keeps this cache). */
static void bf16_branch_and_file(const char *name) {
    setting_override(SET_CELER_KV_DTYPE, "bf16");
    fx f;
    int ok = fx_open(&f, name) == 0;
    setting_override(SET_CELER_KV_DTYPE, NULL);
    if (!ok) return;
    const fixture_ref *r = &f.r;
    const int B = r->branch, V = r->vocab, n = r->len[1] - B;
    const int ctx = r->len[0] > r->len[1] ? r->len[0] : r->len[1];
    celer_model_info in;
    celer_model_get_info(f.m, &in);
    CHECK(strcmp(in.kv_dtype, "bf16") == 0, "%s: the cache is %s under CELER_KV_DTYPE=bf16", name, in.kv_dtype);
    float *fresh = malloc((size_t)n * V * sizeof(float)), *branched = malloc((size_t)n * V * sizeof(float)),
          *loaded = malloc((size_t)n * V * sizeof(float));
    celer_session *a = celer_session_new(f.m, ctx, 7);
    CHECK(celer_session_eval(a, r->seq[1], B, NULL, 0) == 0 && celer_session_eval(a, r->seq[1] + B, n, fresh, 1) == 0,
          "%s: seq_b: %s", name, celer_last_error());
    char path[256];
    snprintf(path, sizeof path, "/tmp/celer-test-%d-%s-bf16.kv", (int)getpid(), name);
    celer_session *s = celer_session_new(f.m, ctx, 7);
    CHECK(celer_session_eval(s, r->seq[0], B, NULL, 0) == 0, "%s: prefill", name);
    celer_snapshot *snap = celer_session_snapshot(s);
    CHECK(celer_session_save_cache(s, path) == 0, "%s: save: %s", name, celer_last_error());
    CHECK(celer_session_eval(s, r->seq[0] + B, r->len[0] - B, NULL, 0) == 0, "%s: seq_a", name);
    CHECK(celer_session_restore(s, snap) == 0 && celer_session_eval(s, r->seq[1] + B, n, branched, 1) == 0,
          "%s: restore and seq_b: %s", name, celer_last_error());
    CHECK(memcmp(fresh, branched, (size_t)n * V * sizeof(float)) == 0, "%s: bf16 cache: the branch differs (max %g)", name,
          max_diff(fresh, branched, (long)n * V));
    celer_session *t = celer_session_new(f.m, ctx, 7);
    CHECK(celer_session_load_cache(t, path) == 0 && celer_session_eval(t, r->seq[1] + B, n, loaded, 1) == 0,
          "%s: load and seq_b: %s", name, celer_last_error());
    CHECK(memcmp(fresh, loaded, (size_t)n * V * sizeof(float)) == 0, "%s: bf16 cache: the loaded file differs (max %g)",
          name, max_diff(fresh, loaded, (long)n * V));
    FILE *file = fopen(path, "rb");
    char head[4096] = {0};
    size_t got = file ? fread(head, 1, sizeof head - 1, file) : 0;
    if (file) fclose(file);
    const char *kd = got ? memmem(head, got, "kv_dtype", 8) : NULL;
    CHECK(kd && memmem(kd, 24, "bf16", 4), "%s: the file does not record kv_dtype bf16", name);
    celer_snapshot_free(snap);
    celer_session_free(t);
    celer_session_free(s);
    celer_session_free(a);
    free(fresh);
    free(branched);
    free(loaded);
    remove(path);
    fx_close(&f);
}

static void bf16_llama(void) { bf16_branch_and_file("llama"); }
static void bf16_gemma3(void) { bf16_branch_and_file("gemma3"); }

int main(void) {
    fixture_select_exact(); /* the 5e-2 tolerance is the exact precision's */
    FIXTURE_CASES(check_model, 20); /* the twenty families and formats this file was written with */
    RUN(llama_window);
    RUN(bad_cache_files);
    RUN(bf16_llama);
    RUN(bf16_gemma3);
    return harness_done();
}
