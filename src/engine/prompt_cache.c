/* engine/prompt_cache.c: the public prompt cache: session snapshots in the radix
 * tree of kv/prompt_cache.c, keyed by the session's tokens, accounted by the rows
 * their views hold, saved to and loaded from cache files (engine/snapshot.c). On
 * each insert, entries that outlived their sessions give back memory committed past
 * their rows (kv_trim). */
#include <inttypes.h>
#include <stdlib.h>

#include "base/err.h"
#include "base/mem.h"
#include "engine/engine.h"
#include "kv/prompt_cache.h"

struct celer_prompt_cache {
    celer_model *cm;
    pc_tree *t;
};

static void free_snap(void *v) { celer_snapshot_free(v); }
static int can_rewind(const void *v, int p) { return engine_snapshot_can_rewind(v, p); }

celer_prompt_cache *celer_prompt_cache_new(celer_model *cm, size_t budget) {
    celer_prompt_cache *pc = mem_calloc(1, sizeof *pc, "prompt cache");
    if (!pc) return NULL;
    pc->cm = cm;
    pc_ops ops = {free_snap, can_rewind};
    if (!(pc->t = pc_new(budget, &ops))) {
        free(pc);
        return NULL;
    }
    return pc;
}

void celer_prompt_cache_free(celer_prompt_cache *pc) {
    if (!pc) return;
    pc_free(pc->t);
    free(pc);
}

/* Entries whose sessions have ended hold their buffers alone: give back what those
 * sessions committed past the entry's rows (kv_trim). */
static int trim_entry(void *ctx, const int32_t *key, int n, void *value) {
    celer_snapshot *snap = value;
    (void)ctx;
    (void)key;
    (void)n;
    for (int l = 0; l < snap->n_layers; l++) kv_trim(snap->caches[l]);
    return 0;
}

static uint64_t insert_snapshot(celer_prompt_cache *pc, celer_snapshot *snap) {
    if (snap->pos == 0) {
        celer_snapshot_free(snap);
        err_set("prompt cache: the session holds no tokens");
        return 0;
    }
    pc_foreach(pc->t, trim_entry, NULL);
    return pc_insert(pc->t, snap->tokens, snap->pos, snap, engine_snapshot_bytes(snap));
}

uint64_t celer_prompt_cache_insert(celer_prompt_cache *pc, celer_session *s) {
    if (s->cm->m != pc->cm->m) {
        err_set("prompt cache: the session runs another model");
        return 0;
    }
    celer_snapshot *snap = celer_session_snapshot(s);
    return snap ? insert_snapshot(pc, snap) : 0;
}

int celer_prompt_cache_lookup(celer_prompt_cache *pc, const int32_t *tokens, int n, uint64_t *id) {
    void *v;
    return n > 0 ? pc_lookup(pc->t, tokens, n, id, &v) : (*id = 0, 0);
}

int celer_prompt_cache_restore(celer_prompt_cache *pc, uint64_t id, int n, celer_session *s) {
    const celer_snapshot *snap = pc_get(pc->t, id, NULL);
    if (!snap)
        return err_set("prompt cache: entry %" PRIu64 " is no longer cached (evicted to stay within %zu bytes, or replaced)",
                       id, pc_budget(pc->t));
    if (n <= 0 || engine_snapshot_can_rewind(snap, n) != 0)
        return err_prefix("prompt cache: entry %" PRIu64 " cannot serve %d tokens", id, n);
    if (celer_session_restore(s, snap) != 0) return -1;
    return n < snap->pos ? celer_session_rewind(s, n) : 0;
}

int celer_prompt_cache_prepare(celer_prompt_cache *pc, celer_session *s, const int32_t *tokens, int n) {
    uint64_t id;
    int p = celer_prompt_cache_lookup(pc, tokens, n, &id);
    if (p <= 0) return 0;
    return celer_prompt_cache_restore(pc, id, p, s) == 0 ? p : -1;
}

int celer_prompt_cache_count(const celer_prompt_cache *pc) { return pc_count(pc->t); }
size_t celer_prompt_cache_bytes(const celer_prompt_cache *pc) { return pc_bytes(pc->t); }

typedef struct {
    const celer_snapshot **snaps;
    int n;
} collect_ctx;

static int collect(void *ctx, const int32_t *key, int n, void *value) {
    collect_ctx *c = ctx;
    (void)key;
    (void)n;
    c->snaps[c->n++] = value;
    return 0;
}

int celer_prompt_cache_save(const celer_prompt_cache *pc, const char *path) {
    int n = pc_count(pc->t);
    collect_ctx c = {mem_calloc((size_t)(n ? n : 1), sizeof *c.snaps, "prompt cache entries"), 0};
    if (!c.snaps) return -1;
    pc_foreach(pc->t, collect, &c);
    int rc = engine_write_snapshots(pc->cm, (const celer_snapshot *const *)c.snaps, n, path);
    free(c.snaps);
    return rc;
}

int celer_prompt_cache_load(celer_prompt_cache *pc, const char *path) {
    int n = 0;
    celer_snapshot **snaps = engine_read_snapshots(pc->cm, path, &n);
    if (!snaps) return -1;
    int rc = 0;
    for (int i = 0; i < n; i++) {
        if (rc != 0 || snaps[i]->pos == 0) {
            celer_snapshot_free(snaps[i]);
            continue;
        }
        if (insert_snapshot(pc, snaps[i]) == 0) rc = err_prefix("prompt cache file %s: entry %d", path, i);
    }
    free(snaps);
    return rc;
}
