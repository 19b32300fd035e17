/* engine/session.c: the public model and session handles. A session owns one KV
 * cache per layer (dense, or rotating where the layer plan names a window shorter
 * than the context), the tokens it has seen and the scratch for its largest batch;
 * eval splits long inputs into batches and prepares every cache before a forward
 * so that a failed allocation leaves the session as it was. A layer that reads
 * another layer's cache (plan kv_source >= 0, Gemma 4 KV sharing) keeps an empty
 * cache of its own that is never written. Which kind each layer's cache is comes from
 * the registry (model/registry.h), the rule celer inspect reports. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/settings.h"
#include "base/err.h"
#include "base/mem.h"
#include "celer.h"
#include "engine/engine.h"
#include "engine/sample.h"
#include "model/registry.h"

const char *celer_last_error(void) { return err_msg(); }

celer_model *celer_model_open(const char *dir, int n_threads) { return celer_model_open_on(dir, n_threads, NULL); }

celer_model *celer_model_open_on(const char *dir, int n_threads, const char *device) {
    err_clear();
    celer_model *cm = mem_calloc(1, sizeof *cm, "model");
    if (!cm) return NULL;
    if (!(cm->m = model_open(dir, n_threads, device))) {
        free(cm);
        return NULL;
    }
    weight_fmt_name(&cm->m->lw[0].wq, cm->format, sizeof cm->format);
    return cm;
}

void celer_model_free(celer_model *cm) {
    if (!cm) return;
    model_free(cm->m);
    free(cm);
}

void celer_model_get_info(const celer_model *cm, celer_model_info *info) {
    const model *m = cm->m;
    memset(info, 0, sizeof *info);
    info->model_type = m->model_type;
    info->family = m->fam->name;
    info->format = cm->format;
    info->backend = m->be->ops->name;
    info->threads = backend_threads(m->be);
    info->vocab_size = m->cfg.vocab;
    info->hidden_size = m->cfg.hidden;
    info->n_layers = m->cfg.n_layers;
    info->max_context = m->cfg.max_pos;
    info->bos_token = m->cfg.bos;
    info->eos_token = m->cfg.eos;
    info->n_params = m->n_params;
    info->weight_bytes = m->weight_bytes;
    info->precision = m->fast ? "fast" : "exact";
    info->kv_dtype = m->kv_dtype == KVT_BF16 ? "bf16" : "f32";
}

kv_cache *engine_cache_new(const model *m0, int i, kv_kind kind, int ctx, int max_T) {
    int l;
    const model *m = model_cache_owner(m0, i, &l); /* tensor parallelism: cache i is rank i / L's layer */
    const layer_plan *p = &m->plan[l];
    kv_cache *c = kind == KV_ROTATING ? kv_rotating_new(p->n_kv, p->head_dim, p->window, 0, ctx, max_T)
                                      : kv_dense_new(p->n_kv, p->head_dim, ctx, max_T);
    if (c) {
        if (m->be->ops->on_device) c->dev = m->be;
        c->dtype = m->kv_dtype;
    }
    return c;
}

kv_cache *engine_layer_cache(const model *m, int i, int ctx, int max_T) {
    return engine_cache_new(m, i, registry_layer_cache(m, i % m->cfg.n_layers, ctx).kind, ctx, max_T);
}

int engine_prepare_caches(celer_session *s, int T) {
    const model *m = s->cm->m;
    for (int i = 0; i < model_n_caches(m); i++) {
        const int l = i % m->cfg.n_layers;
        if (m->plan[l].kv_source < 0 && kv_prepare(s->caches[i], s->pos, T) != 0) return err_prefix("layer %d", l);
    }
    return 0;
}

int engine_check_tokens(const model *m, const int32_t *tok, int n) {
    for (int i = 0; i < n; i++)
        if (tok[i] < 0 || tok[i] >= m->cfg.vocab)
            return err_set("token id %d at position %d is out of range (vocab size %d)", tok[i], i, m->cfg.vocab);
    return 0;
}

celer_session *celer_session_new(celer_model *cm, int ctx_size, int max_batch) {
    model *m = cm->m;
    if (ctx_size <= 0) ctx_size = m->cfg.max_pos;
    if (max_batch <= 0) max_batch = 512;
    if (max_batch > ctx_size) max_batch = ctx_size;
    celer_session *s = mem_calloc(1, sizeof *s, "session");
    if (!s) return NULL;
    s->cm = cm;
    s->ctx = ctx_size;
    s->max_T = max_batch;
    s->inplace = kv_inplace_default();
    if (!(s->caches = mem_calloc((size_t)model_n_caches(m), sizeof *s->caches, "kv caches"))) goto fail;
    for (int l = 0; l < model_n_caches(m); l++) {
        if (!(s->caches[l] = engine_layer_cache(m, l, ctx_size, max_batch))) goto fail;
        s->caches[l]->stats = &s->stats;
        s->caches[l]->inplace = s->inplace;
    }
    if (!(s->tokens = mem_calloc((size_t)ctx_size, sizeof *s->tokens, "session tokens"))) goto fail;
    if (!(s->scratch = model_scratch_new(m, max_batch))) goto fail;
    if (!(s->last = mem_calloc((size_t)m->cfg.vocab, sizeof(float), "logits"))) goto fail;
    return s;
fail:
    celer_session_free(s);
    return NULL;
}

void celer_session_kv_stats(const celer_session *s, celer_kv_stats *out) {
    out->inplace_rows = s->stats.inplace_rows;
    out->copied_bytes = s->stats.copied_bytes;
    out->cow_copies = s->stats.cow_copies;
    out->allocs = s->stats.allocs;
    out->cow_blocks = s->stats.cow_blocks;
    out->held_bytes = 0;
    for (int l = 0; l < model_n_caches(s->cm->m); l++) {
        const kv_cache *c = s->caches[l];
        out->held_bytes += (uint64_t)c->n * (uint64_t)c->row * 2 * sizeof(float);
    }
}

void celer_session_free(celer_session *s) {
    if (!s) return;
    if (setting_flag(SET_CELER_STATS))
        fprintf(stderr, "kv: inplace_rows=%llu copied_bytes=%llu cow_copies=%llu cow_blocks=%llu\n",
                (unsigned long long)s->stats.inplace_rows, (unsigned long long)s->stats.copied_bytes,
                (unsigned long long)s->stats.cow_copies, (unsigned long long)s->stats.cow_blocks);
    if (s->caches)
        for (int l = 0; l < model_n_caches(s->cm->m); l++) kv_free(s->caches[l]);
    free(s->caches);
    free(s->tokens);
    model_scratch_free(s->scratch);
    free(s->last);
    free(s);
}

int celer_session_eval(celer_session *s, const int32_t *tok, int n, float *logits, int all_rows) {
    model *m = s->cm->m;
    const int V = m->cfg.vocab, start = s->pos;
    if (n <= 0) return err_set("eval: no tokens");
    if (s->pos + n > s->ctx)
        return err_set("context full: %d cached + %d new tokens exceed the context size %d (raise --ctx-size)",
                       s->pos, n, s->ctx);
    if (engine_check_tokens(m, tok, n) != 0) return -1;
    for (int i = 0; i < n; i += s->scratch->max_T) {
        int T = n - i < s->scratch->max_T ? n - i : s->scratch->max_T;
        int last_chunk = i + T == n;
        int want_all = logits && all_rows;
        if (engine_prepare_caches(s, T) != 0) {
            celer_session_rewind(s, start);
            return -1;
        }
        if (model_forward(m, s->caches, s->scratch, tok + i, T, s->pos, want_all) != 0) {
            celer_session_rewind(s, start);
            return -1;
        }
        memcpy(s->tokens + s->pos, tok + i, (size_t)T * sizeof *tok);
        s->pos += T;
        if (want_all) model_logits_read(s->scratch, 0, T, V, logits + (size_t)i * V);
        if (last_chunk) {
            if (want_all) memcpy(s->last, logits + (size_t)(i + T - 1) * V, (size_t)V * sizeof(float));
            else model_logits_read(s->scratch, 0, 1, V, s->last);
            if (logits && !all_rows) memcpy(logits, s->last, (size_t)V * sizeof(float));
        }
    }
    s->has_logits = 1;
    return 0;
}

int engine_step_device_token(celer_session *s) {
    model *m = s->cm->m;
    if (s->pos + 1 > s->ctx)
        return err_set("context full: %d cached + 1 new token exceed the context size %d (raise --ctx-size)", s->pos, s->ctx);
    if (engine_prepare_caches(s, 1) != 0) return -1;
    if (model_forward(m, s->caches, s->scratch, NULL, 1, s->pos, 0) != 0) return -1;
    s->tokens[s->pos++] = -1; /* the caller fills it in once the token is read back */
    s->has_logits = 0;        /* they stay on the device */
    return 0;
}

const float *celer_session_logits(const celer_session *s) { return s->has_logits ? s->last : NULL; }

int32_t celer_session_argmax(const celer_session *s) { return sample_argmax(s->last, s->cm->m->cfg.vocab); }

int celer_session_pos(const celer_session *s) { return s->pos; }

int celer_session_rewind(celer_session *s, int n) {
    if (n < 0 || n > s->pos) return err_set("rewind to %d: the session holds %d tokens", n, s->pos);
    int L = model_n_caches(s->cm->m);
    if (n == s->pos) { /* blocks a failed write took past the rows go back to the pool */
        for (int l = 0; l < L; l++) kv_trim(s->caches[l]);
        return 0;
    }
    for (int l = 0; l < L; l++)
        if (kv_can_truncate(s->caches[l], n) != 0) return err_prefix("rewind to %d: layer %d", n, l);
    for (int l = 0; l < L; l++)
        if (kv_truncate(s->caches[l], n) != 0) {
            /* out of memory copying a shared buffer: empty the session rather than
             * leave its layers at different lengths (going back to 0 moves nothing) */
            for (int i = 0; i < L; i++) kv_truncate(s->caches[i], 0);
            s->pos = 0;
            s->has_logits = 0;
            return err_prefix("rewind to %d: layer %d (the session was emptied)", n, l);
        }
    s->pos = n;
    s->has_logits = 0;
    return 0;
}

int celer_save_f32(const char *path, const char *name, const float *data, int ndim, const int64_t *shape) {
    if (ndim < 0 || ndim > ST_MAX_DIMS) return err_set("save %s: bad rank %d", path, ndim);
    st_out o = {.name = name, .dtype = ST_F32, .ndim = ndim, .data = data};
    for (int i = 0; i < ndim; i++) o.shape[i] = shape[i];
    return st_write(path, &o, 1, NULL);
}
