/* server/scheduler.c: continuous batching. One thread owns the model, every slot's
 * session, sampler and text stream, the generation loop and the prompt cache. Each
 * step it
 *   1. admits queued jobs into free slots (a job of n choices takes n slots at once),
 *      restoring the longest cached prefix of the prompt, and adds each slot's
 *      sequence to the generation loop (celer_gen, engine/generate.c);
 *   2. runs one step of the loop: every decoding slot's token and chunks of the
 *      prompts being prefilled (at most batch_size tokens per step, so a long prompt
 *      does not stall the streams that are decoding) in one batched forward, then
 *      sampling, stop tokens, stop strings (celer_textstream), max_tokens and the
 *      full context;
 *   3. turns the loop's events into the job's events, and keeps finished
 *      conversations in the prompt cache.
 * The other choices of a job wait (SLOT_WAIT) until the leader's prompt is in its
 * session, then start from a snapshot of it. Invariant: a slot is FREE (no job) or
 * holds one reference to its job; only this thread reads or writes slots. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

enum { SLOT_FREE = 0, SLOT_WAIT, SLOT_RUN };

typedef struct {
    int state;
    srv_job *job;
    int choice;
    int leader;               /* slot that prefills for this job's other choices */
    celer_session *s;
    celer_sampler *smp;
    celer_textstream *ts;     /* the text, cut at the request's stop strings */
    celer_grammar_state *gst; /* the request's grammar, for this choice (or NULL) */
    int gid;                  /* SLOT_RUN: the sequence's id in the generation loop */
    celer_snapshot *snap;     /* the leader's prompt, for the other choices (until they start) */
    int prompt_done;          /* the leader's prompt is in its session: start the other choices */
    struct srv_sched *sched;
    int n_gen;
    double t_last;            /* when the last token was sampled */
    uint64_t kv_need;         /* KV bytes its sequence may come to hold (admission by blocks) */
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
    celer_prompt_cache *pc;
    celer_grammar_vocab *gvocab; /* the tokenizer's index for grammars, built on the first grammar request */
    celer_gen *gen;           /* the generation loop over every running slot */
    slot *slots;              /* [n_slots] */
    int n_slots;
    /* guarded by mu */
    srv_job **queue;          /* ring [q_ring]: q_len jobs from q_head */
    int q_head, q_len, q_cap, q_ring;
    int n_free;               /* slots free as of the last admit (never more than are): a
                               * burst may fill them and the queue (--queue-size) at once */
    int draining;
    srv_sched_stats stats;
    srv_slot_info *slot_info; /* [n_slots] GET /slots: each slot as of the last step */
};

/* ---- slots ---- */

static void slot_release(srv_sched *S, slot *sl, int keep) {
    if (sl->state == SLOT_RUN) celer_gen_cancel(S->gen, sl->gid); /* a no-op once it finished */
    if (keep && S->pc && sl->job->req->cache_prompt && celer_session_pos(sl->s) > 0)
        celer_prompt_cache_insert(S->pc, sl->s); /* 0 (too big for the budget) only means not cached */
    celer_session_rewind(sl->s, 0);
    celer_sampler_free(sl->smp);
    celer_textstream_free(sl->ts);
    celer_grammar_state_free(sl->gst);
    celer_snapshot_free(sl->snap);
    srv_job *j = sl->job;
    celer_session *s = sl->s;
    srv_sched *S_ = sl->sched;
    memset(sl, 0, sizeof *sl);
    sl->s = s;
    sl->sched = S_;
    sl->state = SLOT_FREE;
    srv_job_unref(j);
}

/* Fails a job and frees every slot it holds. */
static void job_abort(srv_sched *S, srv_job *j, int status, const char *msg) {
    char why[512]; /* msg may be the thread's last error, which releasing could replace */
    snprintf(why, sizeof why, "%s", msg ? msg : "internal error");
    srv_job_ref(j);
    for (int i = 0; i < S->n_slots; i++) /* first, as in slot_event: the blocks are back when the client hears */
        if (S->slots[i].state != SLOT_FREE && S->slots[i].job == j) slot_release(S, &S->slots[i], 0);
    if (status) srv_job_fail(j, status, why);
    srv_job_unref(j);
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
    if (has_tok) { /* the request log and `timings` (reqlog.c) */
        j->t_last = srv_now();
        if (!j->t_first) j->t_first = j->t_last;
    }
    if (finish && sl->choice == 0) j->finish = finish;
    pthread_mutex_unlock(&j->mu);
    if (e && e->text) srv_job_push(j, e);
    else {
        srv_event_free(e);
        srv_job_fail(j, 500, "out of memory");
    }
    (void)S;
}

/* Turns one event of the generation loop into the job's event. */
static void slot_event(srv_sched *S, slot *sl, const celer_gen_event *ev) {
    srv_job *j = sl->job;
    const srv_request *r = j->req;
    if (ev->finish == CELER_FINISH_ERROR) {
        sl->state = SLOT_WAIT; /* the loop dropped it already */
        job_abort(S, j, 500, ev->error);
        return;
    }
    json_t *lp = NULL;
    if (ev->token >= 0) {
        sl->n_gen++;
        double now = srv_now();
        if (sl->n_gen == 1) srv_metrics_ttft(S->met, now - j->t_submit);
        else srv_metrics_token_latency(S->met, now - sl->t_last);
        sl->t_last = now;
        if (r->logprobs && ev->logits) {
            lp = json_array();
            json_array_append_new(lp, logprob_entry(S, ev->logits, ev->token, r->top_logprobs));
        }
    }
    int finish = ev->finish == CELER_FINISH_NONE                                                 ? SRV_FINISH_NONE
                 : ev->finish == CELER_FINISH_STOP_TOKEN || ev->finish == CELER_FINISH_STOP_STRING ? SRV_FINISH_STOP
                                                                                                   : SRV_FINISH_LENGTH;
    emit(S, sl, ev->text, ev->text_len, ev->token, ev->token >= 0, lp, finish);
    if (finish) {
        if (ev->token >= 0) srv_metrics_tokens(S->met, 0, 0, sl->n_gen);
        sl->state = SLOT_WAIT; /* out of the loop */
        /* release before the job reads as done: a client that has its answer then
         * sees the slot's KV blocks back in the pool (/metrics, the next admission) */
        srv_job_ref(j);
        slot_release(S, sl, 1);
        srv_job_finish_choice(j);
        srv_job_unref(j);
    }
}

/* on_prompt of a leader: its prompt is in its session (nothing generated yet): keep
 * it in the prompt cache for later turns and retries, and a snapshot for the other
 * choices (started after the step). */
static void leader_prompt(celer_session *s, void *user) {
    slot *ld = user;
    srv_sched *S = ld->sched;
    const srv_request *r = ld->job->req;
    uint64_t id;
    int n = celer_session_pos(s);
    if (S->pc && r->cache_prompt && celer_prompt_cache_lookup(S->pc, r->prompt, n, &id) < n)
        celer_prompt_cache_insert(S->pc, s); /* 0 (too big for the budget) only means not cached */
    if (r->n > 1) ld->snap = celer_session_snapshot(s); /* NULL (out of memory): the job fails after the step */
    ld->prompt_done = 1;
}

/* Adds a slot's sequence to the generation loop (prompt: the tokens not yet in its
 * session). */
static int slot_start(srv_sched *S, slot *sl, const int32_t *prompt, int n_prompt) {
    const srv_request *r = sl->job->req;
    celer_gen_seq q = {.session = sl->s, .sampler = sl->smp, .prompt = prompt, .n_prompt = n_prompt,
                       .max_tokens = r->max_tokens, .stop_token = -1, .text = sl->ts,
                       .want_logits = r->logprobs, .user = sl, .grammar = sl->gst};
    if (sl->choice == 0) q.on_prompt = leader_prompt;
    if ((sl->gid = celer_gen_add(S->gen, &q)) < 0) return -1;
    sl->state = SLOT_RUN;
    return 0;
}

/* Sets up a slot for choice c of job j: sampler and text stream; choice 0 restores
 * the cached prefix of the prompt and starts generating, the others wait for it. */
static int slot_setup(srv_sched *S, slot *sl, srv_job *j, int c, int leader) {
    const srv_request *r = j->req;
    celer_sampler_params p = r->sp;
    p.seed = r->sp.seed + (uint64_t)c;
    sl->job = j;
    sl->choice = c;
    sl->leader = leader;
    if (!(sl->smp = celer_sampler_new(&p, S->info.vocab_size)) ||
        !(sl->ts = celer_textstream_new(S->tok, !r->keep_special, (const char *const *)r->stop, r->n_stop)))
        return -1;
    if (r->grammar && ((!S->gvocab && !(S->gvocab = celer_grammar_vocab_new(S->tok))) ||
                       !(sl->gst = celer_grammar_state_new(r->grammar, S->gvocab,
                                                           (const char *const *)r->grammar_triggers,
                                                           r->n_grammar_triggers))))
        return -1;
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
    j->slot = (int)(sl - S->slots);
    j->t_start = srv_now();
    pthread_mutex_unlock(&j->mu);
    srv_metrics_tokens(S->met, r->n_prompt, cached, 0);
    /* the loop puts the tokens it feeds in the penalty window; the cached ones go here */
    for (int i = 0; i < cached; i++) celer_sampler_accept(sl->smp, r->prompt[i]);
    return slot_start(S, sl, r->prompt + cached, r->n_prompt - cached);
}

/* The leader's prompt is in its session: the other choices start from its snapshot. */
static void start_followers(srv_sched *S, slot *ld) {
    srv_job *j = ld->job;
    const srv_request *r = j->req;
    ld->prompt_done = 0;
    for (int i = 0; i < S->n_slots; i++) {
        slot *f = &S->slots[i];
        if (f->state != SLOT_WAIT || f->job != j || f == ld) continue;
        if (!ld->snap || celer_session_restore(f->s, ld->snap) != 0) {
            job_abort(S, j, 500, ld->snap ? celer_last_error() : "out of memory");
            return;
        }
        for (int k = 0; k < r->n_prompt; k++) celer_sampler_accept(f->smp, r->prompt[k]);
        if (slot_start(S, f, NULL, 0) != 0) {
            job_abort(S, j, 500, celer_last_error());
            return;
        }
    }
    celer_snapshot_free(ld->snap);
    ld->snap = NULL;
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
            int pos = celer_session_pos(S->slots[i].s);
            st.kv_tokens += (uint64_t)pos;
            st.kv_bytes += celer_model_kv_bytes(S->m, pos);
        }
    if (S->pc) {
        st.cache_bytes = celer_prompt_cache_bytes(S->pc);
        st.cache_entries = celer_prompt_cache_count(S->pc);
    }
    pthread_mutex_lock(&S->mu);
    st.queued = S->q_len;
    S->stats = st;
    for (int i = 0; i < S->n_slots; i++) { /* GET /slots */
        const slot *sl = &S->slots[i];
        srv_slot_info *in = &S->slot_info[i];
        in->busy = sl->state != SLOT_FREE;
        in->n_past = celer_session_pos(sl->s);
        if (!in->busy) continue;
        const srv_request *r = sl->job->req;
        in->task = (int64_t)sl->job->task;
        in->choice = sl->choice;
        in->n_prompt = r->n_prompt;
        in->n_cached = sl->choice == 0 ? sl->job->n_cached : 0; /* set by this thread */
        in->n_decoded = sl->n_gen;
        in->max_tokens = r->max_tokens;
        in->stream = r->stream;
        in->n_stop = r->n_stop;
        in->logprobs = r->logprobs ? r->top_logprobs : 0;
        in->sp = r->sp;
        in->sp.stop = NULL;
    }
    pthread_mutex_unlock(&S->mu);
}

/* ---- admission by KV blocks ---- */

/* Bytes of pool blocks one sequence of r may come to hold: its prompt and max_tokens
 * (the context at most), plus a block and a prefill chunk of rows per layer (block
 * rounding, a copied shared block, the rows a rotating cache holds while a chunk
 * crosses its window). */
static uint64_t seq_kv_need(const srv_sched *S, const srv_request *r) {
    int ctx = S->cfg.ctx_size > 0 ? S->cfg.ctx_size : S->info.max_context;
    long L = (long)r->n_prompt + r->max_tokens;
    if (L > ctx || r->max_tokens <= 0) L = ctx;
    celer_kv_pool_stats ps;
    celer_kv_pool_get(&ps);
    const uint64_t row = celer_model_kv_bytes(S->m, 1) + 4u * (uint64_t)S->info.n_layers; /* keys, values, position */
    return celer_model_kv_bytes(S->m, (int)L) + (uint64_t)(ps.block_rows + S->cfg.batch_size) * row;
}

/* 1 when the pool can hold job j's sequences on top of what the running ones may
 * still grow by; a job is admitted regardless when nothing runs (the prompt cache
 * may hold the rest, and a sequence that cannot grow fails with a clear error). */
static int kv_room(const srv_sched *S, const srv_job *j) {
    if (!celer_model_kv_paged(S->m)) return 1; /* device caches: not from the pool yet */
    uint64_t need = (uint64_t)j->req->n * seq_kv_need(S, j->req), owed = 0;
    int busy = 0;
    for (int i = 0; i < S->n_slots; i++) {
        const slot *sl = &S->slots[i];
        if (sl->state == SLOT_FREE) continue;
        busy = 1;
        uint64_t held = celer_model_kv_bytes(S->m, celer_session_pos(sl->s));
        if (sl->kv_need > held) owed += sl->kv_need - held;
    }
    if (!busy) return 1;
    celer_kv_pool_stats ps;
    celer_kv_pool_get(&ps);
    uint64_t left = ps.budget_bytes > ps.used_bytes ? ps.budget_bytes - ps.used_bytes : 0;
    return left >= owed && left - owed >= need;
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
        if (!gone && (j->req->n > free_slots(S) || !kv_room(S, j))) break; /* waits in the queue */
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
                sl->kv_need = seq_kv_need(S, j->req);
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
    /* one step of the generation loop for every running slot */
    const celer_gen_event *ev;
    int n = celer_gen_step(S->gen, &ev);
    /* leaders whose prompt went in: their other choices start */
    for (int i = 0; i < S->n_slots; i++)
        if (S->slots[i].state != SLOT_FREE && S->slots[i].prompt_done) start_followers(S, &S->slots[i]);
    for (int k = 0; k < n; k++) {
        slot *sl = ev[k].user;
        if (sl->state == SLOT_RUN && sl->gid == ev[k].seq) slot_event(S, sl, &ev[k]);
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
    S->n_slots = cfg->n_parallel;
    S->q_cap = cfg->queue_size > 0 ? cfg->queue_size : 1;
    S->q_ring = S->q_cap + S->n_slots;
    S->n_free = S->n_slots;
    S->slots = calloc((size_t)S->n_slots, sizeof *S->slots);
    S->queue = calloc((size_t)S->q_ring, sizeof *S->queue);
    S->gen = celer_gen_new(m, cfg->batch_size);
    S->slot_info = calloc((size_t)S->n_slots, sizeof *S->slot_info);
    if (!S->slots || !S->queue || !S->gen || !S->slot_info) goto fail;
    for (int i = 0; i < S->n_slots; i++) {
        S->slot_info[i] = (srv_slot_info){.id = i, .task = -1, .n_ctx = cfg->ctx_size, .max_tokens = cfg->n_predict};
        celer_sampler_params_default(&S->slot_info[i].sp);
        S->slots[i].sched = S;
        if (!(S->slots[i].s = celer_session_new(m, cfg->ctx_size, cfg->batch_size))) goto fail;
    }
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

int srv_sched_get_slots(srv_sched *S, srv_slot_info *out, int max) {
    pthread_mutex_lock(&S->mu);
    for (int i = 0; i < S->n_slots && i < max; i++) out[i] = S->slot_info[i];
    pthread_mutex_unlock(&S->mu);
    return S->n_slots;
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
    celer_grammar_vocab_free(S->gvocab);
    free(S->slots);
    free(S->slot_info);
    free(S->queue);
    celer_gen_free(S->gen);
    pthread_cond_destroy(&S->cv);
    pthread_mutex_destroy(&S->mu);
    free(S);
}
