/* engine/snapshot.c: session snapshots (every layer's cache shared, O(1) in cached
 * rows), restore, and cache files: a safetensors file whose metadata names the
 * format version, the model and every layer's cache kind, and whose tensors hold
 * each entry's tokens, last logits and per-layer rows in slot order.
 *
 * File layout (version 1), for entries e = 0..E-1 and layers l = 0..L-1:
 *   e<e>.tokens   I32 [P]                 the tokens the entry holds
 *   e<e>.logits   F32 [V]                 logits after the last token (if P > 0)
 *   e<e>.l<l>.k   F32 [n, n_kv, head_dim] rows in slot (ring) order
 *   e<e>.l<l>.v   F32 [n, n_kv, head_dim]
 *   e<e>.l<l>.pos I32 [n]                 absolute position of each row
 *   __metadata__  {"celer_kv": JSON text: format, version, model identity, layers
 *                  (kind, window, keep, n_kv, head_dim), entries}
 * Loading checks all of it against the model before touching the session. */
#include <errno.h>
#include <inttypes.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "engine/engine.h"
#include "io/safetensors.h"

#define CACHE_FORMAT "celer-kv-cache"
#define CACHE_VERSION 1

/* ---- snapshots ---------------------------------------------------------------- */

void celer_snapshot_free(celer_snapshot *snap) {
    if (!snap) return;
    if (snap->caches)
        for (int l = 0; l < snap->n_layers; l++) kv_free(snap->caches[l]);
    free(snap->caches);
    free(snap->tokens);
    free(snap->logits);
    free(snap);
}

celer_snapshot *engine_snapshot_alloc(const celer_model *cm, int pos) {
    celer_snapshot *snap = mem_calloc(1, sizeof *snap, "snapshot");
    if (!snap) return NULL;
    snap->cm = cm;
    snap->pos = pos;
    snap->n_layers = model_n_caches(cm->m); /* every rank's layers under tensor parallelism */
    if (!(snap->caches = mem_calloc((size_t)snap->n_layers, sizeof *snap->caches, "snapshot caches")) ||
        !(snap->tokens = mem_calloc((size_t)(pos ? pos : 1), sizeof *snap->tokens, "snapshot tokens"))) {
        celer_snapshot_free(snap);
        return NULL;
    }
    return snap;
}

celer_snapshot *celer_session_snapshot(celer_session *s) {
    celer_snapshot *snap = engine_snapshot_alloc(s->cm, s->pos);
    if (!snap) return NULL;
    for (int l = 0; l < snap->n_layers; l++)
        if (!(snap->caches[l] = kv_share(s->caches[l], 0, NULL))) {
            celer_snapshot_free(snap);
            return NULL;
        }
    memcpy(snap->tokens, s->tokens, (size_t)s->pos * sizeof *s->tokens);
    if (s->has_logits) {
        size_t V = (size_t)s->cm->m->cfg.vocab;
        if (!(snap->logits = mem_alloc(V * sizeof(float), "snapshot logits"))) {
            celer_snapshot_free(snap);
            return NULL;
        }
        memcpy(snap->logits, s->last, V * sizeof(float));
    }
    return snap;
}

int celer_snapshot_pos(const celer_snapshot *snap) { return snap->pos; }

size_t engine_snapshot_bytes(const celer_snapshot *snap) {
    size_t b = sizeof *snap + (size_t)snap->pos * sizeof(int32_t);
    if (snap->logits) b += (size_t)snap->cm->m->cfg.vocab * sizeof(float);
    for (int l = 0; l < snap->n_layers; l++) b += kv_view_bytes(snap->caches[l]);
    return b;
}

int engine_snapshot_can_rewind(const celer_snapshot *snap, int p) {
    if (p < 0 || p > snap->pos) return err_set("snapshot of %d tokens cannot go to %d", snap->pos, p);
    for (int l = 0; l < snap->n_layers; l++)
        if (kv_can_truncate(snap->caches[l], p) != 0) return err_prefix("layer %d", l);
    return 0;
}

int celer_session_restore(celer_session *s, const celer_snapshot *snap) {
    const model *m = s->cm->m;
    if (snap->cm->m != m && engine_model_fingerprint(snap->cm->m) != engine_model_fingerprint(m))
        return err_set("restore: the snapshot was taken from another model");
    if (snap->pos > s->ctx)
        return err_set("restore: the snapshot holds %d tokens; this session's context is %d", snap->pos, s->ctx);
    int L = model_n_caches(m);
    kv_cache **fresh = mem_calloc((size_t)L, sizeof *fresh, "restored caches");
    if (!fresh) return -1;
    for (int l = 0; l < L; l++) {
        const kv_cache *want = s->caches[l];
        if (!(fresh[l] = kv_share(snap->caches[l], s->max_T, &s->stats)) ||
            kv_adopt(fresh[l], want->kind, want->window, want->keep, s->ctx, s->max_T) != 0) {
            err_prefix("restore: layer %d", l);
            for (int i = 0; i <= l; i++) kv_free(fresh[i]);
            free(fresh);
            return -1;
        }
        fresh[l]->inplace = s->inplace;
    }
    for (int l = 0; l < L; l++) {
        kv_free(s->caches[l]);
        s->caches[l] = fresh[l];
    }
    free(fresh);
    s->pos = snap->pos;
    memcpy(s->tokens, snap->tokens, (size_t)snap->pos * sizeof *s->tokens);
    s->has_logits = snap->logits != NULL;
    if (snap->logits) memcpy(s->last, snap->logits, (size_t)m->cfg.vocab * sizeof(float));
    return 0;
}

/* ---- model identity ----------------------------------------------------------- */

/* computed when the model is bound (model.c), before weights move to a device */
uint64_t engine_model_fingerprint(const model *m) { return m->fingerprint; }

/* ---- writing ------------------------------------------------------------------ */

static json_t *layout_json(const model *m) {
    json_t *o = json_object(), *layers = json_array();
    char fp[32];
    snprintf(fp, sizeof fp, "%016" PRIx64, engine_model_fingerprint(m));
    json_object_set_new(o, "format", json_string(CACHE_FORMAT));
    json_object_set_new(o, "version", json_integer(CACHE_VERSION));
    json_object_set_new(o, "model", json_pack("{s:s, s:s, s:i, s:i, s:i}", "model_type", m->model_type,
                                              "fingerprint", fp, "n_layers", m->cfg.n_layers,
                                              "vocab", m->cfg.vocab, "hidden", m->cfg.hidden));
    json_object_set_new(o, "layers", layers);
    return o;
}

static const char *kind_name(kv_kind k) { return k == KV_ROTATING ? "rotating" : "dense"; }

/* Writes snaps [n] (of one model) to path, through a temporary file renamed at the end. */
static int write_snapshots(const celer_model *cm, const celer_snapshot *const *snaps, int n, const char *path) {
    const model *m = cm->m;
    if (m->tp > 1) return err_set("%s: cache files are not written under --tp %d yet (docs/tensor-parallel.md)", path, m->tp);
    int L = m->cfg.n_layers;
    json_t *meta = layout_json(m), *layers = json_object_get(meta, "layers"), *entries = json_array();
    for (int l = 0; l < L; l++) {
        const kv_cache *c = n ? snaps[0]->caches[l] : NULL;
        json_array_append_new(layers, json_pack("{s:s, s:i, s:i, s:i, s:i}", "kind", c ? kind_name(c->kind) : "dense",
                                                "window", c ? c->window : m->plan[l].window, "keep", c ? c->keep : 0,
                                                "n_kv", m->plan[l].n_kv, "head_dim", m->plan[l].head_dim));
    }
    /* the element type the rows were computed in; the tensors are float32 either way
     * (bf16 rows widen exactly), and loading converts to the loading session's type */
    json_object_set_new(meta, "kv_dtype", json_string(m->kv_dtype == KVT_BF16 ? "bf16" : "f32"));
    json_object_set_new(meta, "entries", entries);
    int per = 2 + 3 * L, nt = 0, rc = -1;
    st_out *ts = mem_calloc((size_t)(n ? n : 1) * (size_t)per, sizeof *ts, "cache file tensors");
    char *names = mem_calloc((size_t)(n ? n : 1) * (size_t)per, 32, "cache file names");
    char *text = NULL, *meta_text = NULL, tmp[4096];
    void **held = mem_calloc((size_t)(n ? n : 1) * (size_t)L * 3, sizeof *held, "cache file rows");
    int n_held = 0;
    if (!ts || !names || !held) goto done;
    for (int e = 0; e < n; e++) {
        const celer_snapshot *sn = snaps[e];
        json_array_append_new(entries, json_pack("{s:i, s:b}", "tokens", sn->pos, "logits", sn->logits != NULL));
#define ADD(dt, ptr, nd, ...)                                                          \
        do {                                                                          \
            st_out *o = &ts[nt];                                                      \
            o->name = names + (size_t)nt * 32;                                        \
            o->dtype = dt;                                                            \
            o->data = ptr;                                                            \
            o->ndim = nd;                                                             \
            int64_t sh_[] = {__VA_ARGS__};                                            \
            for (int d_ = 0; d_ < nd; d_++) o->shape[d_] = sh_[d_];                   \
            nt++;                                                                     \
        } while (0)
        snprintf(names + (size_t)nt * 32, 32, "e%d.tokens", e);
        ADD(ST_I32, sn->tokens, 1, sn->pos);
        if (sn->logits) {
            snprintf(names + (size_t)nt * 32, 32, "e%d.logits", e);
            ADD(ST_F32, sn->logits, 1, m->cfg.vocab);
        }
        for (int l = 0; l < L; l++) {
            const kv_cache *c = sn->caches[l];
            attn_kv view;
            kv_view(c, &view);
            float *hk, *hv; /* the rows in slot order (gathered from blocks or the device) */
            int32_t *hp;
            if (kv_rows_to_host(c, &hk, &hv, &hp) != 0) goto done;
            if (hk) {
                held[n_held++] = hk;
                held[n_held++] = hv;
                held[n_held++] = hp;
                view.k = hk;
                view.v = hv;
                view.pos = hp;
            }
            static const float none_f[1];
            static const int32_t none_i[1];
            if (!view.k) { /* no rows (never written): st_write wants a pointer all the same */
                view.k = view.v = none_f;
                view.pos = none_i;
            }
            snprintf(names + (size_t)nt * 32, 32, "e%d.l%d.k", e, l);
            ADD(ST_F32, view.k, 3, c->n, c->n_kv, c->head_dim);
            snprintf(names + (size_t)nt * 32, 32, "e%d.l%d.v", e, l);
            ADD(ST_F32, view.v, 3, c->n, c->n_kv, c->head_dim);
            snprintf(names + (size_t)nt * 32, 32, "e%d.l%d.pos", e, l);
            ADD(ST_I32, view.pos, 1, c->n);
        }
#undef ADD
    }
    if (!(text = json_dumps(meta, JSON_COMPACT | JSON_SORT_KEYS))) { err_set("out of memory"); goto done; }
    json_t *wrap = json_pack("{s:s}", "celer_kv", text);
    meta_text = wrap ? json_dumps(wrap, JSON_COMPACT) : NULL;
    json_decref(wrap);
    if (!meta_text) { err_set("out of memory"); goto done; }
    snprintf(tmp, sizeof tmp, "%s.tmp", path);
    if (st_write(tmp, ts, nt, meta_text) != 0) { remove(tmp); goto done; }
    if (rename(tmp, path) != 0) {
        err_set("%s: cannot rename %s into place: %s", path, tmp, strerror(errno));
        remove(tmp);
        goto done;
    }
    rc = 0;
done:
    json_decref(meta);
    free(text);
    free(meta_text);
    free(ts);
    free(names);
    for (int i = 0; i < n_held; i++) free(held[i]);
    free(held);
    return rc;
}

int celer_session_save_cache(const celer_session *s, const char *path) {
    celer_snapshot *snap = celer_session_snapshot((celer_session *)s);
    if (!snap) return err_prefix("save cache %s", path);
    int rc = write_snapshots(s->cm, (const celer_snapshot *const *)&snap, 1, path);
    celer_snapshot_free(snap);
    return rc;
}

/* ---- reading ------------------------------------------------------------------ */

/* The celer_kv metadata object of a safetensors file at path (new reference). */
static json_t *read_meta(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) { err_set("cannot open: %s", strerror(errno)); return NULL; }
    unsigned char len8[8];
    json_t *out = NULL;
    char *hdr = NULL;
    if (fread(len8, 1, 8, f) != 8) { err_set("not a safetensors file (shorter than 8 bytes)"); goto done; }
    uint64_t hl = 0;
    for (int i = 7; i >= 0; i--) hl = hl << 8 | len8[i];
    if (hl > (64u << 20)) { err_set("header length %" PRIu64 " is not plausible", hl); goto done; }
    if (!(hdr = mem_alloc((size_t)hl, "cache file header"))) goto done;
    if (fread(hdr, 1, (size_t)hl, f) != hl) { err_set("truncated header"); goto done; }
    json_error_t je;
    json_t *root = json_loadb(hdr, (size_t)hl, 0, &je);
    if (!root) { err_set("header is not JSON (%s)", je.text); goto done; }
    const char *txt = json_string_value(json_object_get(json_object_get(root, "__metadata__"), "celer_kv"));
    if (!txt) err_set("not a celer cache file (no celer_kv metadata)");
    else if (!(out = json_loads(txt, 0, &je))) err_set("celer_kv metadata is not JSON (%s)", je.text);
    json_decref(root);
done:
    free(hdr);
    fclose(f);
    return out;
}

static int meta_int(const json_t *o, const char *key, int *out, const char *where) {
    json_t *v = json_object_get(o, key);
    if (!json_is_integer(v)) return err_set("%s: \"%s\" missing or not an integer", where, key);
    *out = (int)json_integer_value(v);
    return 0;
}

/* Checks the metadata against model m; *n_entries gets the entry count. */
static int check_layout(const json_t *meta, const model *m, int *n_entries) {
    const char *fmt = json_string_value(json_object_get(meta, "format"));
    int ver = 0, L = m->cfg.n_layers;
    if (!fmt || strcmp(fmt, CACHE_FORMAT) != 0) return err_set("format is \"%s\", not \"%s\"", fmt ? fmt : "?", CACHE_FORMAT);
    if (meta_int(meta, "version", &ver, "metadata")) return -1;
    if (ver != CACHE_VERSION) return err_set("format version %d; this build reads version %d", ver, CACHE_VERSION);
    const char *dt = json_string_value(json_object_get(meta, "kv_dtype")); /* absent in files before it existed: f32 */
    if (dt && strcmp(dt, "f32") != 0 && strcmp(dt, "bf16") != 0)
        return err_set("kv_dtype \"%s\" is neither f32 nor bf16", dt);
    const json_t *mo = json_object_get(meta, "model");
    const char *mt = json_string_value(json_object_get(mo, "model_type"));
    const char *fp = json_string_value(json_object_get(mo, "fingerprint"));
    char want[32];
    snprintf(want, sizeof want, "%016" PRIx64, engine_model_fingerprint(m));
    if (!mt || !fp) return err_set("metadata names no model");
    if (strcmp(mt, m->model_type) != 0 || strcmp(fp, want) != 0)
        return err_set("made for another model (%s, fingerprint %s), not this %s (fingerprint %s)", mt, fp,
                       m->model_type, want);
    const json_t *layers = json_object_get(meta, "layers");
    if (!json_is_array(layers) || (int)json_array_size(layers) != L)
        return err_set("metadata has %zu layers; the model has %d", json_array_size(layers), L);
    for (int l = 0; l < L; l++) {
        const json_t *lo = json_array_get(layers, (size_t)l);
        int window = 0, n_kv = 0, hd = 0;
        char where[32];
        snprintf(where, sizeof where, "layer %d", l);
        const char *kind = json_string_value(json_object_get(lo, "kind"));
        if (meta_int(lo, "window", &window, where) || meta_int(lo, "n_kv", &n_kv, where) || meta_int(lo, "head_dim", &hd, where))
            return -1;
        if (!kind || (strcmp(kind, "dense") && strcmp(kind, "rotating")))
            return err_set("layer %d: unknown cache kind \"%s\"", l, kind ? kind : "?");
        const layer_plan *p = &m->plan[l];
        if (n_kv != p->n_kv || hd != p->head_dim || (!strcmp(kind, "rotating") && window != p->window))
            return err_set("layer %d: file has %s cache (window %d) of %d x %d, the model %d x %d (window %d)", l, kind,
                           window, n_kv, hd, p->n_kv, p->head_dim, p->window);
    }
    const json_t *entries = json_object_get(meta, "entries");
    if (!json_is_array(entries)) return err_set("metadata lists no entries");
    *n_entries = (int)json_array_size(entries);
    return 0;
}

static const st_tensor *want_tensor(const st_file *f, const char *name, st_dtype dt, int ndim, const int64_t *shape) {
    const st_tensor *t = st_find(f, name);
    if (!t) { err_set("tensor %s is missing", name); return NULL; }
    int ok = t->dtype == dt && t->ndim == ndim;
    for (int d = 0; ok && d < ndim; d++) ok = shape[d] < 0 || t->shape[d] == shape[d];
    if (!ok) {
        err_set("tensor %s: want %s of rank %d, got %s of rank %d (first dim %lld)", name, st_dtype_name(dt), ndim,
                st_dtype_name(t->dtype), t->ndim, t->ndim ? (long long)t->shape[0] : 0LL);
        return NULL;
    }
    return t;
}

/* Builds entry e of f as a snapshot whose caches suit a session of ctx, max_T. */
static celer_snapshot *read_entry(const celer_model *cm, const st_file *f, const json_t *meta, int e, int ctx, int max_T) {
    const model *m = cm->m;
    const json_t *eo = json_array_get(json_object_get(meta, "entries"), (size_t)e);
    int P = 0, L = m->cfg.n_layers;
    char name[48], where[32];
    snprintf(where, sizeof where, "entry %d", e);
    if (meta_int(eo, "tokens", &P, where)) return NULL;
    if (P < 0 || P > ctx) {
        err_set("entry %d holds %d tokens; the context is %d", e, P, ctx);
        return NULL;
    }
    celer_snapshot *snap = engine_snapshot_alloc(cm, P);
    if (!snap) return NULL;
    snprintf(name, sizeof name, "e%d.tokens", e);
    int64_t shp[3] = {P};
    const st_tensor *t = want_tensor(f, name, ST_I32, 1, shp);
    if (!t) goto fail;
    memcpy(snap->tokens, t->data, (size_t)P * sizeof(int32_t));
    if (engine_check_tokens(m, snap->tokens, P) != 0) goto fail;
    if (json_is_true(json_object_get(eo, "logits"))) {
        snprintf(name, sizeof name, "e%d.logits", e);
        shp[0] = m->cfg.vocab;
        if (!(t = want_tensor(f, name, ST_F32, 1, shp))) goto fail;
        if (!(snap->logits = mem_alloc(t->nbytes, "logits"))) goto fail;
        memcpy(snap->logits, t->data, t->nbytes);
    }
    const json_t *layers = json_object_get(meta, "layers");
    for (int l = 0; l < L; l++) {
        const layer_plan *p = &m->plan[l];
        int rotating = !strcmp(json_string_value(json_object_get(json_array_get(layers, (size_t)l), "kind")), "rotating");
        if (!(snap->caches[l] = engine_cache_new(m, l, rotating ? KV_ROTATING : KV_DENSE, ctx, max_T))) goto fail;
        const st_tensor *k, *v, *ps;
        int64_t sh[3] = {-1, p->n_kv, p->head_dim};
        snprintf(name, sizeof name, "e%d.l%d.k", e, l);
        if (!(k = want_tensor(f, name, ST_F32, 3, sh))) goto fail;
        sh[0] = k->shape[0];
        snprintf(name, sizeof name, "e%d.l%d.v", e, l);
        if (!(v = want_tensor(f, name, ST_F32, 3, sh))) goto fail;
        snprintf(name, sizeof name, "e%d.l%d.pos", e, l);
        if (!(ps = want_tensor(f, name, ST_I32, 1, sh))) goto fail;
        int n = (int)k->shape[0];
        const int32_t *pos = ps->data;
        int want = p->kv_source >= 0 ? 0 : P; /* a KV-sharing layer holds no rows of its own */
        if (n > want || (!rotating && n != want)) {
            err_set("layer %d holds %d rows for %d tokens%s", l, n, P, p->kv_source >= 0 ? " (it reads another layer's cache)" : "");
            goto fail;
        }
        for (int i = 0; i < n; i++)
            if (pos[i] < 0 || pos[i] >= P) {
                err_set("layer %d: row %d at position %d, outside 0..%d", l, i, pos[i], P - 1);
                goto fail;
            }
        if (kv_set_rows(snap->caches[l], k->data, v->data, pos, n) != 0 || !kv_sane(snap->caches[l]) ||
            (want && kv_can_truncate(snap->caches[l], P) != 0)) {
            err_prefix("layer %d", l);
            goto fail;
        }
    }
    return snap;
fail:
    err_prefix("entry %d", e);
    celer_snapshot_free(snap);
    return NULL;
}

/* Reads every entry of the cache file at path for model cm; NULL (with a message
 * naming the file) on any problem. *n gets the count; the array holds snapshots. */
static celer_snapshot **read_snapshots(const celer_model *cm, const char *path, int ctx, int max_T, int *n) {
    if (cm->m->tp > 1) {
        err_set("%s: cache files are not read under --tp %d yet (docs/tensor-parallel.md)", path, cm->m->tp);
        return NULL;
    }
    celer_snapshot **out = NULL;
    json_t *meta = read_meta(path);
    st_file *f = NULL;
    int ne = 0, got = 0;
    if (!meta || check_layout(meta, cm->m, &ne) != 0) goto fail;
    if (!(f = st_open(path))) goto fail;
    if (!(out = mem_calloc((size_t)(ne ? ne : 1), sizeof *out, "cache entries"))) goto fail;
    for (; got < ne; got++)
        if (!(out[got] = read_entry(cm, f, meta, got, ctx, max_T))) goto fail;
    json_decref(meta);
    st_close(f);
    *n = ne;
    return out;
fail:
    err_prefix("cache file %s", path);
    for (int i = 0; out && i < got; i++) celer_snapshot_free(out[i]);
    free(out);
    json_decref(meta);
    st_close(f);
    return NULL;
}

int celer_session_load_cache(celer_session *s, const char *path) {
    int n = 0;
    celer_snapshot **snaps = read_snapshots(s->cm, path, s->ctx, s->max_T, &n);
    if (!snaps) return -1;
    int rc = n == 1 ? celer_session_restore(s, snaps[0])
                    : err_set("cache file %s holds %d entries; a session cache holds one", path, n);
    for (int i = 0; i < n; i++) celer_snapshot_free(snaps[i]);
    free(snaps);
    return rc;
}

/* For prompt_cache.c: the same format with many entries. */
int engine_write_snapshots(const celer_model *cm, const celer_snapshot *const *snaps, int n, const char *path) {
    return write_snapshots(cm, snaps, n, path);
}

celer_snapshot **engine_read_snapshots(const celer_model *cm, const char *path, int *n) {
    int ctx = cm->m->cfg.max_pos;
    return read_snapshots(cm, path, ctx, 512 < ctx ? 512 : ctx, n);
}
