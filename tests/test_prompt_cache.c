/* tests/test_prompt_cache.c: the prompt cache. The radix tree on its own (prefix
 * hit, partial hit through a rewindable entry, miss, LRU eviction under a byte
 * budget, replacement, node merging, pc_sane), then through the public API on the
 * fixtures: a multi-turn conversation whose second turn evaluates only its new
 * tokens and still matches the reference, on Llama, Qwen3, the sliding-window
 * Gemma 3 and gpt-oss fixtures, and Llama with an artificial window (rotating
 * caches that have wrapped); an evicted entry refused;
 * save/load round trip giving the same logits bit for bit; corrupt files refused. */
#include <stdlib.h>
#include <unistd.h>

#include "base/err.h"
#include "engine/engine.h"
#include "fixture_util.h"
#include "harness.h"
#include "kv/prompt_cache.h"

/* ---- the tree alone --------------------------------------------------------------- */

typedef struct {
    int rewindable;   /* can go back to any shorter prefix */
} fake;

static int freed;
static void fake_free(void *v) { freed++; free(v); }
static int fake_rewind(const void *v, int p) { (void)p; return ((const fake *)v)->rewindable ? 0 : -1; }
static const pc_ops fake_ops = {fake_free, fake_rewind};

static fake *fk(int rewindable) {
    fake *f = malloc(sizeof *f);
    f->rewindable = rewindable;
    return f;
}

static void tree_prefix_hits(void) {
    pc_tree *t = pc_new(1000, &fake_ops);
    const int32_t a[] = {1, 2, 3, 4, 5}, b[] = {1, 2, 3, 9, 9, 9}, c[] = {1, 2};
    uint64_t ia = pc_insert(t, a, 5, fk(0), 10), ib = pc_insert(t, b, 6, fk(1), 10), ic = pc_insert(t, c, 2, fk(0), 10);
    CHECK(ia && ib && ic && pc_count(t) == 3 && pc_sane(t), "inserts: %s", err_msg());
    uint64_t id;
    void *v;
    const int32_t q1[] = {1, 2, 3, 4, 5, 6, 7};
    CHECK(pc_lookup(t, q1, 7, &id, &v) == 5 && id == ia, "a key that is a prefix of the request serves all of it");
    CHECK(pc_lookup(t, a, 5, &id, &v) == 5 && id == ia, "an exact key serves all tokens");
    const int32_t q2[] = {1, 2, 3, 9, 7};
    CHECK(pc_lookup(t, q2, 5, &id, &v) == 4 && id == ib, "partial hit: b shares 4 tokens and can go back");
    const int32_t q3[] = {1, 2, 3, 4, 6};
    CHECK(pc_lookup(t, q3, 5, &id, &v) == 2 && id == ic, "a shares 4 tokens but cannot go back: c's 2 serve");
    const int32_t q4[] = {1, 2, 3};
    CHECK(pc_lookup(t, q4, 3, &id, &v) == 2, "a request that is a prefix of b: b could serve 2 (n - 1), c serves 2");
    const int32_t q5[] = {7, 1, 2};
    CHECK(pc_lookup(t, q5, 3, &id, &v) == 0 && id == 0, "miss");
    const int32_t q6[] = {1, 2, 3, 9, 9, 9};
    CHECK(pc_lookup(t, q6, 4, &id, &v) == 3 && id == ib, "a request inside b's key: b goes back to n - 1 = 3");
    CHECK(pc_get(t, ia, NULL) != NULL, "pc_get");
    /* replacing a key frees the old value */
    freed = 0;
    uint64_t ia2 = pc_insert(t, a, 5, fk(0), 20);
    CHECK(ia2 != ia && freed == 1 && pc_get(t, ia, NULL) == NULL && pc_count(t) == 3 && pc_bytes(t) == 40 && pc_sane(t),
          "replacement: %s", err_msg());
    pc_free(t);
    CHECK(freed == 4, "pc_free freed %d values", freed);
    pc_free(NULL);
}

static void tree_lru_eviction(void) {
    pc_tree *t = pc_new(100, &fake_ops);
    int32_t k[8][4];
    uint64_t id[8];
    for (int i = 0; i < 8; i++) {
        for (int j = 0; j < 4; j++) k[i][j] = j < 2 ? j : 10 * i + j;
        id[i] = pc_insert(t, k[i], 4, fk(1), 30);
        CHECK(id[i] && pc_sane(t), "insert %d: %s", i, err_msg());
    }
    /* 3 entries of 30 fit in 100: the 5 oldest are gone */
    CHECK(pc_count(t) == 3 && pc_bytes(t) == 90, "count %d bytes %zu", pc_count(t), pc_bytes(t));
    for (int i = 0; i < 5; i++) CHECK(pc_get(t, id[i], NULL) == NULL, "entry %d should be evicted", i);
    /* touching 5 makes 6 the oldest */
    uint64_t got;
    void *v;
    CHECK(pc_lookup(t, k[5], 4, &got, &v) == 4 && got == id[5], "lookup 5");
    int32_t nk[4] = {0, 1, 99, 99};
    pc_insert(t, nk, 4, fk(1), 30);
    CHECK(pc_get(t, id[6], NULL) == NULL && pc_get(t, id[5], NULL) && pc_get(t, id[7], NULL), "LRU order after a lookup");
    CHECK(pc_sane(t), "%s", err_msg());
    /* too big alone */
    CHECK(pc_insert(t, nk, 3, fk(1), 101) == 0, "an entry above the budget was accepted");
    CHECK_STR_HAS(err_msg(), "budget");
    CHECK(pc_count(t) == 3 && pc_sane(t), "a refused insert changed the cache");
    pc_free(t);
}

static void tree_merges_nodes(void) {
    /* c = {1,2} splits the edge of a = {1,2,3} and b = {1,2,4}; evicting c and a
     * leaves a node without an entry and one child, which must merge into it */
    pc_tree *u = pc_new(3, &fake_ops);
    const int32_t a[] = {1, 2, 3}, b[] = {1, 2, 4}, c[] = {1, 2}, d[] = {5};
    pc_insert(u, c, 2, fk(0), 1);
    pc_insert(u, a, 3, fk(0), 1);
    uint64_t ib = pc_insert(u, b, 3, fk(0), 1);
    CHECK(pc_count(u) == 3 && pc_sane(u), "three entries: %s", err_msg());
    pc_insert(u, d, 1, fk(0), 2);
    CHECK(pc_count(u) == 2 && pc_get(u, ib, NULL) && pc_sane(u), "after evicting c and a: %d entries: %s", pc_count(u), err_msg());
    uint64_t id;
    void *v;
    CHECK(pc_lookup(u, b, 3, &id, &v) == 3 && id == ib, "b after the merge");
    pc_free(u);
}

/* ---- through the public API ------------------------------------------------------- */

static double max_diff(const float *a, const float *b, long n) {
    double m = 0;
    for (long i = 0; i < n; i++) {
        double d = fabs((double)a[i] - (double)b[i]);
        if (!(d <= m)) m = d;
    }
    return m;
}

/* Two turns: turn 1 evaluates seq_a[:t1] and is cached; turn 2 asks for all of
 * seq_a, gets t1 tokens from the cache and evaluates only the rest. Returns the max
 * error of turn 2's new logits against the reference. */
static double two_turns(celer_model *m, const fixture_ref *r, celer_prompt_cache *pc, int t1, int *reused) {
    int n = r->len[0], V = r->vocab;
    celer_session *s = celer_session_new(m, n, 7);
    celer_session_eval(s, r->seq[0], t1, NULL, 0);
    CHECK(celer_prompt_cache_insert(pc, s) > 0, "insert: %s", celer_last_error());
    celer_session_free(s);
    celer_session *s2 = celer_session_new(m, n, 7);
    *reused = celer_prompt_cache_prepare(pc, s2, r->seq[0], n);
    CHECK(*reused == t1 && celer_session_pos(s2) == t1, "turn 2 reused %d tokens, want %d: %s", *reused, t1, celer_last_error());
    float *got = malloc((size_t)(n - t1) * V * sizeof(float));
    double e = -1;
    if (*reused == t1 && celer_session_eval(s2, r->seq[0] + t1, n - t1, got, 1) == 0)
        e = max_diff(got, r->logits[0] + (size_t)t1 * V, (long)(n - t1) * V);
    free(got);
    celer_session_free(s2);
    return e;
}

/* window > 0 imposes an artificial window (the reference no longer applies); sliding:
 * the model's rings wrap before seq_b forks from seq_a. */
static void multi_turn(const char *name, int window, int sliding) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fixtures/models/%s", name);
    fixture_ref r;
    if (fixture_load(dir, &r) != 0) {
        CHECK(0, "%s: %s", name, celer_last_error());
        return;
    }
    celer_model *m = celer_model_open(dir, 2);
    if (window)
        for (int l = 0; l < m->m->cfg.n_layers; l++) m->m->plan[l].window = window;
    celer_prompt_cache *pc = celer_prompt_cache_new(m, (size_t)64 << 20);
    int reused;
    double e = two_turns(m, &r, pc, r.prompt_len, &reused);
    if (!window) CHECK(e >= 0 && e <= 2e-3, "%s: turn 2 after reusing %d tokens: max err %g", name, reused, e);
    else CHECK(e >= 0, "%s: turn 2 with a window failed", name);
    /* a request that diverges inside a cached key: dense caches go back to the fork,
     * wrapped rotating ones cannot and fall back to a shorter entry or a miss */
    int32_t *q = malloc((size_t)r.len[1] * sizeof *q);
    memcpy(q, r.seq[1], (size_t)r.len[1] * sizeof *q);
    uint64_t id;
    int got = celer_prompt_cache_lookup(pc, q, r.len[1], &id);
    if (!sliding) CHECK(got == r.branch, "%s: seq_b shares %d tokens with the cached seq_a prefix, lookup gave %d", name, r.branch, got);
    else CHECK(got == 0, "%s: a wrapped ring cannot go back to the fork at %d, lookup gave %d", name, r.branch, got);
    if (!sliding) {
        celer_session *s = celer_session_new(m, r.len[1], 7);
        CHECK(celer_prompt_cache_restore(pc, id, got, s) == 0, "restore at the fork: %s", celer_last_error());
        float *lg = malloc((size_t)(r.len[1] - got) * r.vocab * sizeof(float));
        CHECK(celer_session_eval(s, q + got, r.len[1] - got, lg, 1) == 0, "eval");
        double eb = max_diff(lg, r.logits[1] + (size_t)got * r.vocab, (long)(r.len[1] - got) * r.vocab);
        CHECK(eb <= 2e-3, "%s: seq_b from the fork of a cached seq_a: max err %g", name, eb);
        free(lg);
        celer_session_free(s);
    }
    free(q);
    celer_prompt_cache_free(pc);
    celer_model_free(m);
    fixture_free(&r);
}

static void multi_turn_llama(void) { multi_turn("llama", 0, 0); }
static void multi_turn_qwen3(void) { multi_turn("qwen3", 0, 0); }
static void multi_turn_llama_window16(void) { multi_turn("llama", 16, 1); }
static void multi_turn_gemma3(void) { multi_turn("gemma3", 0, 1); }
static void multi_turn_gpt_oss(void) { multi_turn("gpt_oss", 0, 1); }

/* With a window, the second turn still matches a session that ran both turns
 * straight through (rotating caches restored from the prompt cache). */
static void window_turns_match_straight_run(void) {
    fixture_ref r;
    const char *dir = "tests/fixtures/models/llama";
    if (fixture_load(dir, &r) != 0) return;
    celer_model *m = celer_model_open(dir, 2);
    for (int l = 0; l < m->m->cfg.n_layers; l++) m->m->plan[l].window = 16;
    int n = r.len[0], V = r.vocab, t1 = r.prompt_len;
    float *straight = malloc((size_t)n * V * sizeof(float)), *turn2 = malloc((size_t)(n - t1) * V * sizeof(float));
    celer_session *s = celer_session_new(m, n, 7);
    celer_session_eval(s, r.seq[0], t1, straight, 1); /* the same chunk boundaries as the two turns */
    celer_session_eval(s, r.seq[0] + t1, n - t1, straight + (size_t)t1 * V, 1);
    celer_session_free(s);
    celer_prompt_cache *pc = celer_prompt_cache_new(m, (size_t)64 << 20);
    s = celer_session_new(m, n, 7);
    celer_session_eval(s, r.seq[0], t1, NULL, 0);
    celer_prompt_cache_insert(pc, s);
    celer_session_free(s);
    s = celer_session_new(m, n, 7);
    CHECK(celer_prompt_cache_prepare(pc, s, r.seq[0], n) == t1, "turn 2 reuse");
    celer_session_eval(s, r.seq[0] + t1, n - t1, turn2, 1);
    CHECK(memcmp(turn2, straight + (size_t)t1 * V, (size_t)(n - t1) * V * sizeof(float)) == 0,
          "turn 2 from the prompt cache differs from a straight run (max %g)", max_diff(turn2, straight + (size_t)t1 * V, (long)(n - t1) * V));
    celer_session_free(s);
    celer_prompt_cache_free(pc);
    free(straight);
    free(turn2);
    celer_model_free(m);
    fixture_free(&r);
}

static void evicted_and_files(void) {
    fixture_ref r;
    const char *dir = "tests/fixtures/models/llama";
    if (fixture_load(dir, &r) != 0) return;
    celer_model *m = celer_model_open(dir, 2);
    celer_session *s = celer_session_new(m, r.len[0], 8);
    celer_session_eval(s, r.seq[0], 10, NULL, 0);
    celer_snapshot *probe = celer_session_snapshot(s);
    size_t one = engine_snapshot_bytes(probe);
    celer_snapshot_free(probe);
    /* room for two entries of 10..12 tokens */
    celer_prompt_cache *pc = celer_prompt_cache_new(m, one * 2 + one / 2);
    uint64_t first = celer_prompt_cache_insert(pc, s);
    celer_session_eval(s, r.seq[0] + 10, 1, NULL, 0);
    celer_prompt_cache_insert(pc, s);
    celer_session_eval(s, r.seq[0] + 11, 1, NULL, 0);
    uint64_t third = celer_prompt_cache_insert(pc, s);
    CHECK(celer_prompt_cache_count(pc) == 2 && celer_prompt_cache_bytes(pc) <= one * 2 + one / 2, "count %d bytes %zu",
          celer_prompt_cache_count(pc), celer_prompt_cache_bytes(pc));
    celer_session *t = celer_session_new(m, r.len[0], 8);
    celer_session_eval(t, r.seq[0], 3, NULL, 0);
    CHECK(celer_prompt_cache_restore(pc, first, 10, t) != 0, "restoring an evicted entry worked");
    CHECK_STR_HAS(celer_last_error(), "no longer cached");
    CHECK(celer_session_pos(t) == 3, "a refused restore changed the session");
    /* save, load into a fresh cache, and continue bit-identically */
    char path[256], bad[300];
    snprintf(path, sizeof path, "/tmp/celer-pc-%d.kv", (int)getpid());
    snprintf(bad, sizeof bad, "%s.bad", path);
    CHECK(celer_prompt_cache_save(pc, path) == 0, "save: %s", celer_last_error());
    celer_prompt_cache *pc2 = celer_prompt_cache_new(m, (size_t)64 << 20);
    CHECK(celer_prompt_cache_load(pc2, path) == 0 && celer_prompt_cache_count(pc2) == 2, "load: %s", celer_last_error());
    int V = r.vocab, n = r.len[0];
    float *a = malloc((size_t)n * V * sizeof(float)), *b = malloc((size_t)n * V * sizeof(float));
    celer_session *x = celer_session_new(m, n, 8), *y = celer_session_new(m, n, 8);
    int pa = celer_prompt_cache_prepare(pc, x, r.seq[0], n), pb = celer_prompt_cache_prepare(pc2, y, r.seq[0], n);
    CHECK(pa == 12 && pb == 12, "reuse %d and %d tokens, want 12", pa, pb);
    celer_session_eval(x, r.seq[0] + pa, n - pa, a, 1);
    celer_session_eval(y, r.seq[0] + pb, n - pb, b, 1);
    CHECK(memcmp(a, b, (size_t)(n - pa) * V * sizeof(float)) == 0, "a loaded prompt cache gives other logits");
    CHECK(max_diff(b, r.logits[0] + (size_t)pb * V, (long)(n - pb) * V) <= 2e-3, "loaded cache vs reference");
    (void)third;
    /* a corrupted file adds nothing */
    FILE *f = fopen(path, "rb");
    fseek(f, 0, SEEK_END);
    long size = ftell(f);
    fclose(f);
    CHECK(truncate(path, size / 2) == 0, "truncate");
    int before = celer_prompt_cache_count(pc2);
    CHECK(celer_prompt_cache_load(pc2, path) != 0, "a truncated prompt cache file loaded");
    CHECK_STR_HAS(celer_last_error(), path);
    CHECK(celer_prompt_cache_count(pc2) == before, "a refused load changed the cache");
    f = fopen(bad, "wb");
    fputs("not a safetensors file at all", f);
    fclose(f);
    CHECK(celer_prompt_cache_load(pc2, bad) != 0, "garbage loaded");
    remove(path);
    remove(bad);
    free(a);
    free(b);
    celer_session_free(x);
    celer_session_free(y);
    celer_session_free(t);
    celer_session_free(s);
    celer_prompt_cache_free(pc);
    celer_prompt_cache_free(pc2);
    celer_model_free(m);
    fixture_free(&r);
}

int main(void) {
    RUN(tree_prefix_hits);
    RUN(tree_lru_eviction);
    RUN(tree_merges_nodes);
    RUN(multi_turn_llama);
    RUN(multi_turn_qwen3);
    RUN(multi_turn_llama_window16);
    RUN(multi_turn_gemma3);
    RUN(multi_turn_gpt_oss);
    RUN(window_turns_match_straight_run);
    RUN(evicted_and_files);
    return harness_done();
}
