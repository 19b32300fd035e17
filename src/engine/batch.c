/* engine/batch.c: one step over several sessions (continuous batching). Sessions
 * whose new tokens fit one batch run as one forward (model_forward_batch): the
 * matrix products cover every session's rows, so a decode step of n conversations
 * reads the weights once instead of n times. Longer inputs fall back to each
 * session's own chunked eval. All sessions advance, or none (barring a failed
 * rewind of a rotating cache after an out-of-memory error, reported as such). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "celer.h"
#include "engine/engine.h"

/* One forward over sessions [0, n) whose tokens total at most the scratch's rows. */
static int run_group(celer_session *const *ss, const int32_t *const *tok, const int *nt, const unsigned char *want,
                     int n, model_scratch *scr, fwd_seq *seqs, int32_t *flat) {
    model *m = ss[0]->cm->m;
    const int V = m->cfg.vocab;
    int r = 0;
    for (int i = 0; i < n; i++) {
        if (engine_prepare_caches(ss[i], nt[i]) != 0) return err_prefix("batch: session %d", i);
        seqs[i] = (fwd_seq){ss[i]->caches, nt[i], ss[i]->pos, !want || want[i]};
        memcpy(flat + r, tok[i], (size_t)nt[i] * sizeof *flat);
        r += nt[i];
    }
    if (model_forward_batch(m, seqs, n, scr, flat, 0) != 0) return -1;
    const int decode = model_is_decode_batch(seqs, n); /* logits of every row: row i for session i */
    for (int i = 0, row = 0; i < n; i++) {
        celer_session *s = ss[i];
        memcpy(s->tokens + s->pos, tok[i], (size_t)nt[i] * sizeof *tok[i]);
        s->pos += nt[i];
        s->has_logits = seqs[i].want_logits;
        if (s->has_logits) model_logits_read(scr, decode ? i : row++, 1, V, s->last);
    }
    return 0;
}

int engine_batch_decode_queue(celer_session *const *ss, const int32_t *tok, int n, const unsigned char *dev,
                              const sample_params *sp, const double *u, int slot) {
    if (n < 2) return err_set("batch: a device-sampled decode step needs 2 or more sessions (%d)", n);
    const celer_model *cm = ss[0]->cm;
    model *m = cm->m;
    backend *b = m->be;
    model_scratch *scr = ss[0]->scratch;
    const int V = m->cfg.vocab;
    if (!b->ops->sample_rows) return err_set("batch: the %s backend has no batched sampler", b->ops->name);
    if (n > scr->max_T) return err_set("batch: %d sessions exceed the batch of %d rows", n, scr->max_T);
    for (int i = 0; i < n; i++) {
        const celer_session *s = ss[i];
        if (s->cm != cm) return err_set("batch: session %d belongs to another model", i);
        for (int j = 0; j < i; j++)
            if (ss[j] == s) return err_set("batch: session %d appears twice (also at %d)", i, j);
        if (s->pos + 1 > s->ctx)
            return err_set("batch: session %d: context full: %d cached + 1 new token exceed the context size %d", i,
                           s->pos, s->ctx);
    }
    if (tok && engine_check_tokens(m, tok, n) != 0) return err_prefix("batch");
    fwd_seq *seqs = mem_alloc((size_t)n * sizeof *seqs, "batch");
    sample_params *p = mem_alloc((size_t)n * sizeof *p, "batch");
    int *start = mem_alloc((size_t)n * sizeof *start, "batch");
    int rc = seqs && p && start ? 0 : -1;
    for (int i = 0; i < n && rc == 0; i++) {
        start[i] = ss[i]->pos;
        if (engine_prepare_caches(ss[i], 1) != 0) rc = err_prefix("batch: session %d", i);
        seqs[i] = (fwd_seq){ss[i]->caches, 1, ss[i]->pos, 1};
        /* a host row still gets a (greedy) device draw, unused: one launch for all rows */
        p[i] = dev[i] ? sp[i] : (sample_params){0.0f, 1, 1.0f, 0.0f};
    }
    /* tok NULL: rows 0..n-1 of the scratch's token ids hold the inputs (drawn there) */
    if (rc == 0) rc = model_forward_batch(m, seqs, n, scr, tok, 0);
    for (int i = 0; i < n && rc == 0; i++) { /* fed: a failure from here on rewinds them */
        celer_session *s = ss[i];
        s->tokens[s->pos++] = tok ? tok[i] : -1; /* -1: the caller stores the token it reads back */
        s->has_logits = 0;
    }
    if (rc == 0 && b->ops->sample_rows(b, scr->logits, V, n, p, u, scr->tok, slot) != 0)
        rc = err_set("batch: the device sampler refused a row's parameters");
    if (rc != 0 && start) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", err_msg());
        for (int i = 0; i < n; i++)
            if (ss[i]->pos > start[i] && celer_session_rewind(ss[i], start[i]) != 0)
                snprintf(msg + strlen(msg), sizeof msg - strlen(msg), " (session %d could not be rewound)", i);
        err_set("%s", msg);
    }
    free(seqs);
    free(p);
    free(start);
    return rc;
}

int engine_batch_decode_sample(celer_session *const *ss, const int32_t *tok, int n, const unsigned char *dev,
                               const sample_params *sp, const double *u, int32_t *out) {
    if (engine_batch_decode_queue(ss, tok, n, dev, sp, u, 0) != 0) return -1;
    model *m = ss[0]->cm->m;
    backend *b = m->be;
    model_scratch *scr = ss[0]->scratch;
    const int V = m->cfg.vocab;
    int rc = b->ops->sampled_rows(b, 0, out, n);
    for (int i = 0; i < n && rc == 0; i++) {
        if (dev[i]) continue;
        model_logits_read(scr, i, 1, V, ss[i]->last);
        ss[i]->has_logits = 1;
    }
    if (rc == 0 && b->ops->status(b) != 0) rc = -1;
    if (rc != 0) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", err_msg());
        for (int i = 0; i < n; i++)
            if (ss[i]->pos > 0 && celer_session_rewind(ss[i], ss[i]->pos - 1) != 0)
                snprintf(msg + strlen(msg), sizeof msg - strlen(msg), " (session %d could not be rewound)", i);
        err_set("%s", msg);
    }
    return rc;
}

int celer_batch_eval(celer_session *const *sessions, const int32_t *const *tokens, const int *n_tokens,
                     const unsigned char *want_logits, int n) {
    if (n <= 0) return 0;
    const celer_model *cm = sessions[0]->cm;
    for (int i = 0; i < n; i++) {
        const celer_session *s = sessions[i];
        if (s->cm != cm) return err_set("batch: session %d belongs to another model", i);
        for (int j = 0; j < i; j++)
            if (sessions[j] == s) return err_set("batch: session %d appears twice (also at %d)", i, j);
        if (n_tokens[i] <= 0) return err_set("batch: session %d has no tokens", i);
        if (s->pos + n_tokens[i] > s->ctx)
            return err_set("batch: session %d: context full: %d cached + %d new tokens exceed the context size %d",
                           i, s->pos, n_tokens[i], s->ctx);
        if (engine_check_tokens(cm->m, tokens[i], n_tokens[i]) != 0) return err_prefix("batch: session %d", i);
    }
    model_scratch *scr = sessions[0]->scratch;
    int *start = mem_alloc((size_t)n * sizeof *start, "batch");
    fwd_seq *seqs = mem_alloc((size_t)n * sizeof *seqs, "batch");
    int32_t *flat = mem_alloc((size_t)scr->max_T * sizeof *flat, "batch");
    int rc = (start && seqs && flat) ? 0 : -1;
    for (int i = 0; i < n && rc == 0; i++) start[i] = sessions[i]->pos;
    /* groups of consecutive sessions that fit the scratch; a session too long for it
     * runs alone through its own chunked eval */
    for (int i = 0; i < n && rc == 0;) {
        if (n_tokens[i] > scr->max_T) {
            rc = celer_session_eval(sessions[i], tokens[i], n_tokens[i], NULL, 0);
            i++;
            continue;
        }
        int j = i, rows = 0;
        while (j < n && n_tokens[j] <= scr->max_T && rows + n_tokens[j] <= scr->max_T) rows += n_tokens[j++];
        rc = run_group(sessions + i, tokens + i, n_tokens + i, want_logits ? want_logits + i : NULL, j - i, scr, seqs, flat);
        i = j;
    }
    if (rc != 0 && start) {
        char msg[1024];
        snprintf(msg, sizeof msg, "%s", err_msg());
        for (int i = 0; i < n; i++)
            if (sessions[i]->pos > start[i] && celer_session_rewind(sessions[i], start[i]) != 0)
                snprintf(msg + strlen(msg), sizeof msg - strlen(msg), " (session %d could not be rewound)", i);
        err_set("%s", msg);
    }
    free(start);
    free(seqs);
    free(flat);
    return rc;
}
