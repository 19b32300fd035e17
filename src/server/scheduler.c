/* server/scheduler.c: continuous batching. One thread owns the model, every slot's
 * session, sampler and detokenizer, and the prompt cache. Each step it
 *   1. admits queued jobs into free slots (a job of n choices takes n slots at once),
 *      restoring the longest cached prefix of the prompt;
 *   2+3. advances every decoding slot by its pending token and prefills prompts in
 *      chunks (at most batch_size prompt tokens per step over all slots, so a long
 *      prompt does not stall the streams that are decoding), all in one
 *      celer_batch_eval: the batched forward shares its matrix products;
 *   4. samples each slot that has fresh logits, streams its text, and finishes it on
 *      a stop token, a stop string, max_tokens or a full context, keeping the
 *      conversation in the prompt cache.
 * Invariant: a slot is FREE (no job) or holds one reference to its job; only this
 * thread reads or writes slots. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

enum { SLOT_FREE = 0, SLOT_WAIT, SLOT_PREFILL, SLOT_DECODE };

typedef struct {
    int state;
    srv_job *job;
    int choice;
    int leader;               /* slot that prefills for this job's other choices */
    celer_session *s;
    celer_sampler *smp;
    celer_detok *dt;
    int cursor;               /* prompt tokens in the session */
    int32_t pending;          /* sampled, to be fed next step */
    int need_feed;            /* pending is not yet in the session */
    int has_logits;           /* the session's logits are ready to sample */
    int n_gen;
    char *text;               /* [text_len] all generated text (stop strings look at it) */
    size_t text_len, text_cap, sent;
    double t_last;            /* when the last token was sampled */
} slot;

struct srv_sched {
    pthread_t th;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int started;
    celer_model *m;
    const celer_tokenizer *tok;
    srv_config cfg;
    srv_metrics *met;
    celer_model_info info;
    uint64_t kv_per_tok;
    celer_prompt_cache *pc;
    slot *slots;              /* [n_slots] */
    int n_slots;
    /* guarded by mu */
    srv_job **queue;          /* ring [q_ring]: q_len jobs from q_head */
    int q_head, q_len, q_cap, q_ring;
    int n_free;               /* slots free as of the last admit (never more than are): a
                               * burst may fill them and the queue (--queue-size) at once */
    int draining;
    srv_sched_stats stats;
    /* step scratch [n_slots] */
    celer_session **bs;
    const int32_t **bt;
    int *bn, *bi;
    unsigned char *bw;        /* logits wanted: decode steps and a prompt's last chunk */
};

/* ---- slots ---- */

static void slot_release(srv_sched *S, slot *sl, int keep) {
    if (keep && S->pc && sl->job->req->cache_prompt && celer_session_pos(sl->s) > 0)
        celer_prompt_cache_insert(S->pc, sl->s); /* 0 (too big for the budget) only means not cached */
    celer_session_rewind(sl->s, 0);
    celer_sampler_free(sl->smp);
    celer_detok_free(sl->dt);
    free(sl->text);
    srv_job *j = sl->job;
    celer_session *s = sl->s;
    memset(sl, 0, sizeof *sl);
    sl->s = s;
    sl->state = SLOT_FREE;
    srv_job_unref(j);
}

/* Fails a job and frees every slot it holds. */
static void job_abort(srv_sched *S, srv_job *j, int status, const char *msg) {
    srv_job_ref(j);
    if (status) srv_job_fail(j, status, msg);
    for (int i = 0; i < S->n_slots; i++)
        if (S->slots[i].state != SLOT_FREE && S->slots[i].job == j) slot_release(S, &S->slots[i], 0);
    srv_job_unref(j);
}

static int text_add(slot *sl, const char *p, size_t n) {
    if (sl->text_len + n + 1 > sl->text_cap) {
        size_t cap = sl->text_cap ? sl->text_cap * 2 : 256;
        while (cap < sl->text_len + n + 1) cap *= 2;
        char *t = realloc(sl->text, cap);
        if (!t) return -1;
        sl->text = t;
        sl->text_cap = cap;
    }
    memcpy(sl->text + sl->text_len, p, n);
    sl->text_len += n;
    sl->text[sl->text_len] = 0;
    return 0;
}

/* Earliest stop string in text[sent..len): its offset, or -1. */
static long stop_find(const slot *sl, const srv_request *r) {
    long best = -1;
    for (int i = 0; i < r->n_stop; i++) {
        size_t L = strlen(r->stop[i]);
        if (!sl->text) break;
        const char *at = memmem(sl->text + sl->sent, sl->text_len - sl->sent, r->stop[i], L);
        if (at && (best < 0 || at - sl->text < best)) best = at - sl->text;
    }
    return best;
}

/* Bytes at the end of the text that could begin a stop string (held back). */
static size_t stop_holdback(const slot *sl, const srv_request *r) {
    size_t hb = 0, avail = sl->text_len - sl->sent;
    for (int i = 0; i < r->n_stop; i++) {
        size_t L = strlen(r->stop[i]);
        for (size_t k = L - 1 < avail ? L - 1 : avail; k > hb; k--)
            if (memcmp(sl->text + sl->text_len - k, r->stop[i], k) == 0) {
                hb = k;
                break;
            }
    }
    return hb;
}

/* ---- logprobs ---- */

static json_t *token_json(const celer_tokenizer *tok, int32_t id, double lp) {
    size_t len = 0;
    char *s = celer_detokenize(tok, &id, 1, 0, &len);
    json_t *bytes = json_array();
    for (size_t i = 0; s && i < len; i++) json_array_append_new(bytes, json_integer((unsigned char)s[i]));
    json_t *str = s && srv_utf8_valid(s, len) ? json_stringn(s, len) : json_string("\xef\xbf\xbd");
    free(s);
    return json_pack("{s:o, s:f, s:o}", "token", str ? str : json_string(""), "logprob", lp, "bytes", bytes);
}

/* {token, logprob, bytes, top_logprobs: [...]} for the chosen token under logits. */
static json_t *logprob_entry(srv_sched *S, const float *logits, int32_t chosen, int top) {
    int V = S->info.vocab_size;
    float mx = logits[0];
    for (int i = 1; i < V; i++)
        if (logits[i] > mx) mx = logits[i];
    double sum = 0;
    for (int i = 0; i < V; i++) sum += exp((double)logits[i] - mx);
    double lse = mx + log(sum);
    json_t *e = token_json(S->tok, chosen, (double)logits[chosen] - lse);
    json_t *alts = json_array();
    int picked[20];
    for (int k = 0; k < top && k < 20; k++) {
        int best = -1;
        for (int i = 0; i < V; i++) {
            int used = 0;
            for (int q = 0; q < k; q++) used |= picked[q] == i;
            if (!used && (best < 0 || logits[i] > logits[best])) best = i;
        }
        if (best < 0) break;
        picked[k] = best;
        json_array_append_new(alts, token_json(S->tok, best, (double)logits[best] - lse));
    }
    json_object_set_new(e, "top_logprobs", alts);
    return e;
}

/* ---- one choice's output ---- */

static void emit(srv_sched *S, slot *sl, const char *text, size_t len, int32_t tok, int has_tok, json_t *lp, int finish) {
    srv_event *e = calloc(1, sizeof *e);
    if (e) {
        e->choice = sl->choice;
        e->text = malloc(len + 1);
        e->tokens = has_tok ? malloc(sizeof *e->tokens) : NULL;
        if (e->text) {
            if (len) memcpy(e->text, text, len);
            e->text[len] = 0;
            e->len = len;
        }
        if (e->tokens) {
            e->tokens[0] = tok;
            e->n_tokens = 1;
        }
        e->logprobs = lp;
        lp = NULL;
        e->finish = finish;
    }
    json_decref(lp);
    srv_job *j = sl->job;
    pthread_mutex_lock(&j->mu);
    j->n_gen[sl->choice] = sl->n_gen;
    pthread_mutex_unlock(&j->mu);
    if (e && e->text) srv_job_push(j, e);
    else {
        srv_event_free(e);
        srv_job_fail(j, 500, "out of memory");
    }
    (void)S;
}

/* Samples the next token of a slot whose logits are ready and reports it. */
static void slot_sample(srv_sched *S, slot *sl) {
    srv_job *j = sl->job;
    const srv_request *r = j->req;
    if (r->max_tokens == 0) { /* prompt evaluation only */
        emit(S, sl, "", 0, 0, 0, NULL, SRV_FINISH_LENGTH);
        srv_job_finish_choice(j);
        slot_release(S, sl, 1);
        return;
    }
    const float *logits = celer_session_logits(sl->s);
    int32_t tok = celer_sampler_sample(sl->smp, logits);
    celer_sampler_accept(sl->smp, tok);
    sl->has_logits = 0;
    sl->n_gen++;
    double now = srv_now();
    if (sl->n_gen == 1) srv_metrics_ttft(S->met, now - j->t_submit);
    else srv_metrics_token_latency(S->met, now - sl->t_last);
    sl->t_last = now;
    json_t *lp = NULL;
    if (r->logprobs) {
        lp = json_array();
        json_array_append_new(lp, logprob_entry(S, logits, tok, r->top_logprobs));
    }
    int finish = SRV_FINISH_NONE;
    if (celer_sampler_is_stop(sl->smp, tok)) {
        finish = SRV_FINISH_STOP;
    } else {
        size_t len = 0;
        const char *piece = celer_detok_put(sl->dt, tok, &len);
        if (piece && len && text_add(sl, piece, len)) {
            job_abort(S, j, 500, "out of memory");
            json_decref(lp);
            return;
        }
        if (r->n_stop && stop_find(sl, r) >= 0) finish = SRV_FINISH_STOP;
        else if (sl->n_gen >= r->max_tokens || celer_session_pos(sl->s) >= S->cfg.ctx_size) finish = SRV_FINISH_LENGTH;
    }
    long at = -1;
    if (finish) {
        size_t len = 0;
        const char *rest = celer_detok_flush(sl->dt, &len);
        if (rest && len && text_add(sl, rest, len) == 0) {}
        if (r->n_stop && (at = stop_find(sl, r)) >= 0) finish = SRV_FINISH_STOP;
    }
    size_t end = at >= 0 ? (size_t)at : sl->text_len;
    if (!finish && r->n_stop) end -= stop_holdback(sl, r);
    if (end < sl->sent) end = sl->sent;
    emit(S, sl, sl->text ? sl->text + sl->sent : "", end - sl->sent, tok, 1, lp, finish);
    sl->sent = end;
    if (finish) {
        srv_metrics_tokens(S->met, 0, 0, sl->n_gen);
        srv_job_finish_choice(j);
        slot_release(S, sl, 1);
    } else {
        sl->pending = tok;
        sl->need_feed = 1;
    }
}

/* Sets up a slot for choice c of job j: sampler, detokenizer, and (for choice 0)
 * the cached prefix of the prompt. */
static int slot_setup(srv_sched *S, slot *sl, srv_job *j, int c, int leader) {
    const srv_request *r = j->req;
    celer_sampler_params p = r->sp;
    p.seed = r->sp.seed + (uint64_t)c;
    sl->job = j;
    sl->choice = c;
    sl->leader = leader;
    if (!(sl->smp = celer_sampler_new(&p, S->info.vocab_size)) || !(sl->dt = celer_detok_new(S->tok, 1))) return -1;
    for (int i = 0; i < r->n_prompt; i++) celer_sampler_accept(sl->smp, r->prompt[i]);
    celer_session_rewind(sl->s, 0);
    if (c > 0) {
        sl->state = SLOT_WAIT;
        return 0;
    }
    int cached = 0;
    if (S->pc && r->cache_prompt) {
        cached = celer_prompt_cache_prepare(S->pc, sl->s, r->prompt, r->n_prompt);
        if (cached < 0) {
            celer_session_rewind(sl->s, 0);
            cached = 0;
        }
    }
    pthread_mutex_lock(&j->mu);
    j->n_prompt = r->n_prompt;
    j->n_cached = cached;
    pthread_mutex_unlock(&j->mu);
    srv_metrics_tokens(S->met, r->n_prompt, cached, 0);
    sl->cursor = cached;
    sl->state = SLOT_PREFILL;
    return 0;
}

/* The leader's prompt is in its session: cache it and hand it to the other choices. */
static void prefill_done(srv_sched *S, int li) {
    slot *ld = &S->slots[li];
    uint64_t id;
    if (S->pc && ld->job->req->cache_prompt &&
        celer_prompt_cache_lookup(S->pc, ld->job->req->prompt, ld->cursor, &id) < ld->cursor)
        celer_prompt_cache_insert(S->pc, ld->s); /* the prompt alone: later turns and retries reuse it */
    ld->state = SLOT_DECODE;
    ld->has_logits = 1;
    if (ld->job->req->n > 1) {
        celer_snapshot *snap = celer_session_snapshot(ld->s);
        for (int i = 0; i < S->n_slots; i++) {
            slot *f = &S->slots[i];
            if (f->state != SLOT_WAIT || f->job != ld->job) continue;
            if (!snap || celer_session_restore(f->s, snap) != 0) {
                celer_snapshot_free(snap);
                job_abort(S, ld->job, 500, celer_last_error());
                return;
            }
            f->state = SLOT_DECODE;
            f->has_logits = 1;
        }
        celer_snapshot_free(snap);
    }
}

/* ---- the step loop ---- */

static int free_slots(const srv_sched *S) {
    int n = 0;
    for (int i = 0; i < S->n_slots; i++) n += S->slots[i].state == SLOT_FREE;
    return n;
}

static int busy_slots(const srv_sched *S) { return S->n_slots - free_slots(S); }

static void update_stats(srv_sched *S) {
    srv_sched_stats st = {0};
    st.slots = S->n_slots;
    for (int i = 0; i < S->n_slots; i++)
        if (S->slots[i].state != SLOT_FREE) {
            st.busy++;
            st.kv_bytes += (uint64_t)celer_session_pos(S->slots[i].s) * S->kv_per_tok;
        }
    if (S->pc) {
        st.cache_bytes = celer_prompt_cache_bytes(S->pc);
        st.cache_entries = celer_prompt_cache_count(S->pc);
    }
    pthread_mutex_lock(&S->mu);
    st.queued = S->q_len;
    S->stats = st;
    pthread_mutex_unlock(&S->mu);
}

static int job_cancelled(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    int c = j->cancelled || j->done;
    pthread_mutex_unlock(&j->mu);
    return c;
}

/* Takes queued jobs into free slots (waiting while there is nothing to do); returns
 * 1 when the loop should end (draining and idle). */
static int admit(srv_sched *S) {
    pthread_mutex_lock(&S->mu);
    S->n_free = free_slots(S);
    while (!S->q_len && !busy_slots(S) && !S->draining) pthread_cond_wait(&S->cv, &S->mu);
    if (S->draining && !S->q_len && !busy_slots(S)) {
        pthread_mutex_unlock(&S->mu);
        return 1;
    }
    while (S->q_len) {
        srv_job *j = S->queue[S->q_head];
        int gone = job_cancelled(j);
        if (!gone && j->req->n > free_slots(S)) break;
        S->q_head = (S->q_head + 1) % S->q_ring;
        S->q_len--;
        if (!gone) {
            S->n_free -= j->req->n;
            /* reserve n slots, each holding a reference; set up below */
            for (int i = 0, c = 0, leader = -1; i < S->n_slots && c < j->req->n; i++) {
                slot *sl = &S->slots[i];
                if (sl->state != SLOT_FREE) continue;
                if (c == 0) leader = i;
                sl->state = SLOT_WAIT;
                sl->job = j;
                sl->choice = c++;
                sl->leader = leader;
                srv_job_ref(j);
            }
        }
        srv_job_unref(j); /* the queue's reference */
    }
    pthread_mutex_unlock(&S->mu);
    for (int i = 0; i < S->n_slots; i++) {
        slot *sl = &S->slots[i];
        if (sl->state == SLOT_WAIT && !sl->smp && slot_setup(S, sl, sl->job, sl->choice, sl->leader) != 0)
            job_abort(S, sl->job, 500, celer_last_error());
    }
    return 0;
}

static void step(srv_sched *S) {
    /* cancelled jobs leave at once */
    for (int i = 0; i < S->n_slots; i++) {
        slot *sl = &S->slots[i];
        if (sl->state != SLOT_FREE && job_cancelled(sl->job)) {
            srv_metrics_cancelled(S->met);
            job_abort(S, sl->job, 0, NULL);
        }
    }
    /* full cache hits: the logits are already there */
    for (int i = 0; i < S->n_slots; i++) {
        slot *sl = &S->slots[i];
        if (sl->state == SLOT_PREFILL && sl->cursor == sl->job->req->n_prompt) prefill_done(S, i);
    }
    /* one step for everything: a token for every decoding slot, and chunks of the
     * prompts being prefilled under one budget of batch_size tokens, in one
     * celer_batch_eval (the batched forward shares the matrix products) */
    int n = 0, budget = S->cfg.batch_size;
    for (int i = 0; i < S->n_slots; i++) {
        slot *sl = &S->slots[i];
        if (sl->state != SLOT_DECODE || !sl->need_feed) continue;
        S->bs[n] = sl->s;
        S->bt[n] = &sl->pending;
        S->bn[n] = 1;
        S->bw[n] = 1;
        S->bi[n++] = i;
    }
    for (int i = 0; i < S->n_slots && budget > 0; i++) {
        slot *sl = &S->slots[i];
        if (sl->state != SLOT_PREFILL) continue;
        const srv_request *r = sl->job->req;
        int m = r->n_prompt - sl->cursor;
        if (m > budget) m = budget;
        S->bs[n] = sl->s;
        S->bt[n] = r->prompt + sl->cursor;
        S->bn[n] = m;
        S->bw[n] = sl->cursor + m == r->n_prompt;
        S->bi[n++] = i;
        budget -= m;
    }
    if (n && celer_batch_eval(S->bs, S->bt, S->bn, S->bw, n) != 0) {
        /* find the culprit: feed each alone */
        for (int k = 0; k < n; k++) {
            slot *sl = &S->slots[S->bi[k]];
            if (celer_session_eval(sl->s, S->bt[k], S->bn[k], NULL, 0) != 0) {
                job_abort(S, sl->job, 500, celer_last_error());
                S->bi[k] = -1;
            }
        }
    }
    for (int k = 0; k < n; k++) {
        if (S->bi[k] < 0) continue;
        slot *sl = &S->slots[S->bi[k]];
        if (sl->state == SLOT_DECODE) {
            sl->need_feed = 0;
            sl->has_logits = 1;
        } else if (sl->state == SLOT_PREFILL) {
            sl->cursor += S->bn[k];
            if (sl->cursor == sl->job->req->n_prompt) prefill_done(S, S->bi[k]);
        }
    }
    /* sample every slot with fresh logits */
    for (int i = 0; i < S->n_slots; i++) {
        slot *sl = &S->slots[i];
        if (sl->state == SLOT_DECODE && sl->has_logits) slot_sample(S, sl);
    }
}

static void *sched_main(void *arg) {
    srv_sched *S = arg;
    for (;;) {
        if (admit(S)) break;
        step(S);
        update_stats(S);
    }
    update_stats(S);
    return NULL;
}

/* ---- public ---- */

srv_sched *srv_sched_new(celer_model *m, const celer_tokenizer *tok, const srv_config *cfg, srv_metrics *met) {
    srv_sched *S = calloc(1, sizeof *S);
    if (!S) return NULL;
    pthread_mutex_init(&S->mu, NULL);
    pthread_cond_init(&S->cv, NULL);
    S->m = m;
    S->tok = tok;
    S->cfg = *cfg;
    S->met = met;
    celer_model_get_info(m, &S->info);
    S->kv_per_tok = celer_model_kv_bytes_per_token(m);
    S->n_slots = cfg->n_parallel;
    S->q_cap = cfg->queue_size > 0 ? cfg->queue_size : 1;
    S->q_ring = S->q_cap + S->n_slots;
    S->n_free = S->n_slots;
    S->slots = calloc((size_t)S->n_slots, sizeof *S->slots);
    S->queue = calloc((size_t)S->q_ring, sizeof *S->queue);
    S->bs = calloc((size_t)S->n_slots, sizeof *S->bs);
    S->bt = calloc((size_t)S->n_slots, sizeof *S->bt);
    S->bn = calloc((size_t)S->n_slots, sizeof *S->bn);
    S->bi = calloc((size_t)S->n_slots, sizeof *S->bi);
    S->bw = calloc((size_t)S->n_slots, sizeof *S->bw);
    if (!S->slots || !S->queue || !S->bs || !S->bt || !S->bn || !S->bi || !S->bw) goto fail;
    for (int i = 0; i < S->n_slots; i++)
        if (!(S->slots[i].s = celer_session_new(m, cfg->ctx_size, cfg->batch_size))) goto fail;
    if (cfg->cache_prompt && !(S->pc = celer_prompt_cache_new(m, cfg->cache_bytes))) goto fail;
    S->stats.slots = S->n_slots;
    if (pthread_create(&S->th, NULL, sched_main, S) != 0) goto fail;
    S->started = 1;
    return S;
fail:
    srv_sched_free(S);
    return NULL;
}

/* Jobs that wait beyond the free slots: what --queue-size bounds. */
static int waiting_locked(const srv_sched *S) { return S->q_len - (S->n_free > 0 ? S->n_free : 0); }

int srv_sched_submit(srv_sched *S, srv_job *j) {
    pthread_mutex_lock(&S->mu);
    /* the ring holds q_cap + n_slots jobs: the free slots and the queue behind them */
    if (S->draining || waiting_locked(S) >= S->q_cap || S->q_len >= S->q_ring) {
        pthread_mutex_unlock(&S->mu);
        return -1;
    }
    srv_job_ref(j);
    S->queue[(S->q_head + S->q_len) % S->q_ring] = j;
    S->q_len++;
    S->stats.queued = S->q_len;
    pthread_cond_signal(&S->cv);
    pthread_mutex_unlock(&S->mu);
    return 0;
}

int srv_sched_cancel(srv_sched *S, srv_job *j) {
    int found = 0;
    pthread_mutex_lock(&S->mu);
    for (int k = 0; k < S->q_len; k++) {
        if (S->queue[(S->q_head + k) % S->q_ring] != j) continue;
        /* close the gap: the jobs behind it move up one place, keeping their order */
        for (int m = k; m + 1 < S->q_len; m++)
            S->queue[(S->q_head + m) % S->q_ring] = S->queue[(S->q_head + m + 1) % S->q_ring];
        S->q_len--;
        S->stats.queued = S->q_len;
        found = 1;
        break;
    }
    pthread_cond_signal(&S->cv);
    pthread_mutex_unlock(&S->mu);
    if (found) srv_job_unref(j); /* the queue's reference */
    return found;
}

void srv_sched_wake(srv_sched *S) {
    pthread_mutex_lock(&S->mu);
    pthread_cond_signal(&S->cv);
    pthread_mutex_unlock(&S->mu);
}

void srv_sched_get_stats(srv_sched *S, srv_sched_stats *out) {
    pthread_mutex_lock(&S->mu);
    *out = S->stats;
    pthread_mutex_unlock(&S->mu);
}

void srv_sched_drain(srv_sched *S) {
    if (!S || !S->started) return;
    pthread_mutex_lock(&S->mu);
    S->draining = 1;
    pthread_cond_signal(&S->cv);
    pthread_mutex_unlock(&S->mu);
    pthread_join(S->th, NULL);
    S->started = 0;
}

void srv_sched_free(srv_sched *S) {
    if (!S) return;
    srv_sched_drain(S);
    for (int i = 0; S->slots && i < S->n_slots; i++) {
        if (S->slots[i].state != SLOT_FREE && S->slots[i].smp) slot_release(S, &S->slots[i], 0);
        celer_session_free(S->slots[i].s);
    }
    while (S->q_len) {
        srv_job_unref(S->queue[S->q_head]);
        S->q_head = (S->q_head + 1) % S->q_ring;
        S->q_len--;
    }
    celer_prompt_cache_free(S->pc);
    free(S->slots);
    free(S->queue);
    free(S->bs);
    free(S->bt);
    free(S->bn);
    free(S->bi);
    free(S->bw);
    pthread_cond_destroy(&S->cv);
    pthread_mutex_destroy(&S->mu);
    free(S);
}
