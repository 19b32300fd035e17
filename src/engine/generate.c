/* engine/generate.c: the generation loop (celer_gen, include/celer.h), the one loop
 * behind `celer generate`, `celer run`, `celer bench` and the server's scheduler.
 *
 * A sequence moves through these states:
 *   PREFILL   prompt tokens left to feed (cursor of n_prompt)
 *   READY     fresh logits in the session, nothing sampled from them yet
 *   PENDING   a token sampled and reported, not yet fed (the host loop)
 *   INFLIGHT  the device sampler is drawing token n_gen into result slot
 *             n_gen % SAMPLE_SLOTS; every reported token is fed (the pipelined loop)
 *   ROW       the same in the batched pipeline: token n_gen is being drawn into row
 *             `row` of result slot g->pslot (and of g->pscr's token ids)
 *   DONE      finished this step (its event text lives until the next step), then FREE
 *
 * One step (celer_gen_step):
 *   - a lone INFLIGHT sequence runs the pipelined step: queue the forward that feeds
 *     the token in flight and the device draw of the next one, then read the token in
 *     flight, then check it. A step queued past the end is undone: wait for it, give
 *     the sampler its draw back, rewind the session one token.
 *   - otherwise a lone INFLIGHT sequence lands (its token is read, reported, and fed
 *     by a later step as a PENDING one). Then the batched pipeline (rows_step,
 *     CELER_BATCH_PIPELINE): PENDING sequences the device can draw for join it (two
 *     or more start it), their tokens uploaded into their rows; the rows that can go
 *     on (room under max_tokens and the context, known before their tokens are read)
 *     are moved to their new rows on the device and queued as one step with their
 *     draws, then the tokens in flight are read and checked; a row that ended on its
 *     token is undone as above (its speculative KV row goes with the rewind), one that
 *     could not go on lands. When a pipeline starts, its first step is queued and
 *     rows_step runs again at once, so the step reports a token for every row.
 *   - then the host step for what is left, as its own forward after the queued one:
 *     one celer_batch_eval feeds the other PENDING tokens (host-sampled rows) and
 *     prompt chunks under the budget (the pipeline's rows count against it); then
 *     each READY sequence is sampled on the host, or, when it is the only sequence
 *     and the device can sample it, starts the lone pipeline.
 * Every path ends a token through finish_token, so the finish rules are one piece of
 * code: stop token, then stop string, then max_tokens, then context full (the
 * session holds ctx tokens: the token cannot be fed). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "base/settings.h"
#include "engine/engine.h"
#include "engine/sample.h"
#include "grammar/grammar.h"

enum { SEQ_FREE = 0, SEQ_PREFILL, SEQ_READY, SEQ_PENDING, SEQ_INFLIGHT, SEQ_ROW, SEQ_DONE };

typedef struct {
    int state;
    celer_gen_seq p;        /* as added; p.prompt points at prompt below */
    int32_t *prompt;        /* [p.n_prompt] */
    int cursor;             /* prompt tokens fed */
    int announced;          /* on_prompt has run */
    celer_sampler *own;     /* the greedy sampler when p.sampler is NULL */
    celer_sampler *smp;     /* p.sampler or own */
    int32_t pending;        /* PENDING: the token to feed */
    int n_gen;              /* tokens reported */
    int dev_logits;         /* the session's scratch holds its logits (fed alone by the last step) */
    int has_dev_tok;        /* READY: dev_tok was drawn on the device in a batched step (no host logits) */
    int32_t dev_tok;
    int host_only;          /* the device sampler refused its parameters */
    sample_rng before;      /* INFLIGHT, ROW: the sampler's generator before the draw in flight */
    int row;                /* ROW: its row in the step in flight */
    char *text;             /* [text_cap] this step's event text */
    size_t text_len, text_cap;
    float *masked;          /* [vocab] with a grammar: the logits with disallowed tokens at -inf (kept across uses) */
    char err[512];
} gseq;

struct celer_gen {
    celer_model *cm;
    int budget;             /* tokens per step; 0: unlimited */
    gseq **seq;             /* [n_seq] (FREE ones are reused) */
    int n_seq;
    int cap;                /* sequences the arrays below hold */
    celer_gen_event *ev;    /* [cap] this step's events */
    /* batch scratch [cap] */
    celer_session **bs;
    const int32_t **bt;
    int *bn, *bi;
    unsigned char *bw;
    unsigned char *landed;  /* [cap] landed this step: no more this step */
    /* a device-sampled decode step [cap]: rows drawn on the device, their parameters,
     * draws, fed tokens and drawn tokens */
    unsigned char *bdev;
    sample_params *bsp;
    double *bu;
    int32_t *btok, *bout;
    /* the batched pipeline: the rows drawn in flight (pn 0: none) */
    int pn;                 /* rows of the step in flight */
    int pslot;              /* their result slot */
    model_scratch *pscr;    /* whose token ids hold the drawn tokens (row r: row r's) */
    int *prow;              /* [cap] the sequence of each row, -1 once cancelled */
    int *pnext;             /* [cap] the next step's rows: row of the step in flight */
    unsigned char *pmore;   /* [cap] row r is fed by the next step */
};

const char *celer_finish_name(int f) {
    static const char *const names[] = {"none", "stop_token", "stop_string", "length", "context", "error"};
    return f >= 0 && f <= CELER_FINISH_ERROR ? names[f] : "?";
}

celer_gen *celer_gen_new(celer_model *m, int token_budget) {
    celer_gen *g = mem_calloc(1, sizeof *g, "generator");
    if (!g) return NULL;
    g->cm = m;
    g->budget = token_budget > 0 ? token_budget : 0;
    return g;
}

static void seq_clear(gseq *q) {
    celer_sampler_free(q->own);
    free(q->prompt);
    char *text = q->text;
    size_t cap = q->text_cap;
    float *masked = q->masked;
    memset(q, 0, sizeof *q);
    q->text = text; /* kept for the next sequence in this place */
    q->text_cap = cap;
    q->masked = masked;
}

/* Undoes a pipelined step in flight: the forward that fed the last reported token
 * and the draw for the next one. */
static void undo_inflight(celer_gen *g, gseq *q) {
    backend *b = g->cm->m->be;
    b->ops->sampled(b, q->n_gen % SAMPLE_SLOTS);
    sample_device_undraw(q->smp, &q->before);
    celer_session *s = q->p.session;
    if (s->pos > 0) celer_session_rewind(s, s->pos - 1);
}

void celer_gen_cancel(celer_gen *g, int id) {
    if (!g || id < 0 || id >= g->n_seq) return;
    gseq *q = g->seq[id];
    if (q->state == SEQ_FREE || q->state == SEQ_DONE) return;
    if (q->state == SEQ_INFLIGHT) undo_inflight(g, q);
    if (q->state == SEQ_ROW) {
        /* as undo_inflight: the draw in flight given back and the last reported token
         * taken out of the session (the host loop would not have fed it yet); the
         * other rows go on, and the slot is read once no row is left */
        sample_device_undraw(q->smp, &q->before);
        celer_session *s = q->p.session;
        if (s->pos > 0) celer_session_rewind(s, s->pos - 1);
        g->prow[q->row] = -1;
        int left = 0;
        for (int r = 0; r < g->pn; r++) left += g->prow[r] >= 0;
        if (!left) {
            backend *b = g->cm->m->be;
            b->ops->sampled_rows(b, g->pslot, g->bout, g->pn);
            g->pn = 0;
        }
    }
    seq_clear(q);
}

void celer_gen_free(celer_gen *g) {
    if (!g) return;
    for (int i = 0; i < g->n_seq; i++) {
        celer_gen_cancel(g, i);
        seq_clear(g->seq[i]);
        free(g->seq[i]->text);
        free(g->seq[i]->masked);
        free(g->seq[i]);
    }
    free(g->seq);
    free(g->ev);
    free(g->bs);
    free(g->bt);
    free(g->bn);
    free(g->bi);
    free(g->bw);
    free(g->landed);
    free(g->bdev);
    free(g->bsp);
    free(g->bu);
    free(g->btok);
    free(g->bout);
    free(g->prow);
    free(g->pnext);
    free(g->pmore);
    free(g);
}

int celer_gen_active(const celer_gen *g) {
    int n = 0;
    for (int i = 0; g && i < g->n_seq; i++) n += g->seq[i]->state != SEQ_FREE && g->seq[i]->state != SEQ_DONE;
    return n;
}

/* One more place for a sequence. The step's arrays grow in the step (reserve), so
 * that adding a sequence leaves the last step's events where they are. */
static int grow(celer_gen *g) {
    gseq **seq = realloc(g->seq, (size_t)(g->n_seq + 1) * sizeof *seq);
    if (seq) g->seq = seq;
    gseq *q = seq ? calloc(1, sizeof *q) : NULL;
    if (!q) return err_set("generator: out of memory");
    g->seq[g->n_seq++] = q;
    return 0;
}

/* The step's arrays for n_seq sequences. */
static int reserve(celer_gen *g) {
    if (g->cap >= g->n_seq) return 0;
    size_t n = (size_t)g->n_seq;
    celer_gen_event *ev = realloc(g->ev, n * sizeof *ev);
    if (ev) g->ev = ev;
    celer_session **bs = realloc(g->bs, n * sizeof *bs);
    if (bs) g->bs = bs;
    const int32_t **bt = realloc(g->bt, n * sizeof *bt);
    if (bt) g->bt = bt;
    int *bn = realloc(g->bn, n * sizeof *bn);
    if (bn) g->bn = bn;
    int *bi = realloc(g->bi, n * sizeof *bi);
    if (bi) g->bi = bi;
    unsigned char *bw = realloc(g->bw, n * sizeof *bw);
    if (bw) g->bw = bw;
    unsigned char *landed = realloc(g->landed, n * sizeof *landed);
    if (landed) g->landed = landed;
    unsigned char *bdev = realloc(g->bdev, n * sizeof *bdev);
    if (bdev) g->bdev = bdev;
    sample_params *bsp = realloc(g->bsp, n * sizeof *bsp);
    if (bsp) g->bsp = bsp;
    double *bu = realloc(g->bu, n * sizeof *bu);
    if (bu) g->bu = bu;
    int32_t *btok = realloc(g->btok, n * sizeof *btok);
    if (btok) g->btok = btok;
    int32_t *bout = realloc(g->bout, n * sizeof *bout);
    if (bout) g->bout = bout;
    int *prow = realloc(g->prow, n * sizeof *prow);
    if (prow) g->prow = prow;
    int *pnext = realloc(g->pnext, n * sizeof *pnext);
    if (pnext) g->pnext = pnext;
    unsigned char *pmore = realloc(g->pmore, n * sizeof *pmore);
    if (pmore) g->pmore = pmore;
    if (!ev || !bs || !bt || !bn || !bi || !bw || !landed || !bdev || !bsp || !bu || !btok || !bout || !prow ||
        !pnext || !pmore)
        return err_set("generator: out of memory");
    g->cap = g->n_seq;
    return 0;
}

int celer_gen_add(celer_gen *g, const celer_gen_seq *p) {
    celer_session *s = p->session;
    const int V = g->cm->m->cfg.vocab;
    if (!s || s->cm != g->cm) return err_set("generate: the session belongs to another model");
    if (p->n_prompt < 0 || (p->n_prompt > 0 && !p->prompt))
        return err_set("generate: bad prompt (%d tokens)", p->n_prompt);
    if (p->n_prompt == 0 && !celer_session_logits(s))
        return err_set("generate: no prompt, and the session has no logits to start from");
    if (s->pos + p->n_prompt > s->ctx)
        return err_set("context full: %d cached + %d prompt tokens exceed the context size %d (raise --ctx-size)",
                       s->pos, p->n_prompt, s->ctx);
    for (int i = 0; i < p->n_prompt; i++)
        if (p->prompt[i] < 0 || p->prompt[i] >= V)
            return err_set("token id %d at prompt position %d is out of range (vocab size %d)", p->prompt[i], i, V);
    if (p->stop_token >= V) return err_set("generate: stop token %d outside the vocabulary [0, %d)", p->stop_token, V);
    int id = -1;
    for (int i = 0; i < g->n_seq; i++) {
        const gseq *o = g->seq[i];
        if (o->state != SEQ_FREE && o->state != SEQ_DONE && o->p.session == s)
            return err_set("generate: the session is already generating (sequence %d)", i);
        if (id < 0 && o->state == SEQ_FREE) id = i;
    }
    if (id < 0) {
        if (grow(g) != 0) return -1;
        id = g->n_seq - 1;
    }
    gseq *q = g->seq[id];
    seq_clear(q);
    q->p = *p;
    if (p->n_prompt && !(q->prompt = mem_alloc((size_t)p->n_prompt * sizeof *q->prompt, "prompt"))) return -1;
    if (p->n_prompt) memcpy(q->prompt, p->prompt, (size_t)p->n_prompt * sizeof *q->prompt);
    q->p.prompt = q->prompt;
    q->smp = p->sampler;
    if (!q->smp) {
        celer_sampler_params sp;
        celer_sampler_params_default(&sp); /* temperature 0: argmax, no penalties */
        if (!(q->own = q->smp = celer_sampler_new(&sp, V))) {
            seq_clear(q);
            return -1;
        }
    }
    for (int i = 0; i < p->n_prompt; i++) celer_sampler_accept(q->smp, p->prompt[i]);
    q->state = p->n_prompt ? SEQ_PREFILL : SEQ_READY;
    return id;
}

/* ---------------------------------------------------------------- one token */

static int text_add(gseq *q, const char *t, size_t n) {
    return mem_append(&q->text, &q->text_len, &q->text_cap, t, n, "a generated text");
}

static void event_init(gseq *q, int id, celer_gen_event *e) {
    memset(e, 0, sizeof *e);
    e->seq = id;
    e->user = q->p.user;
    e->token = -1;
    e->n_generated = q->n_gen;
    q->text_len = 0;
    text_add(q, "", 0);
    e->text = q->text ? q->text : "";
}

static void fail(gseq *q, celer_gen_event *e) {
    snprintf(q->err, sizeof q->err, "%s", err_msg()[0] ? err_msg() : "generation failed");
    e->finish = CELER_FINISH_ERROR;
    e->error = q->err;
    q->state = SEQ_DONE;
}

/* Token t was generated for q while its session held p_unfed tokens (t not among
 * them): accept it, add its text, decide whether the sequence ends. Returns the
 * finish reason (the event is filled in; the caller sets the state otherwise). */
static int finish_token(gseq *q, int32_t t, int p_unfed, celer_gen_event *e) {
    celer_sampler_accept(q->smp, t);
    q->n_gen++;
    e->token = t;
    e->n_generated = q->n_gen;
    int f = CELER_FINISH_NONE, hit = 0;
    size_t len = 0;
    const char *piece;
    if (celer_sampler_is_stop(q->smp, t) || t == q->p.stop_token) f = CELER_FINISH_STOP_TOKEN;
    else if (q->p.text) {
        if (!(piece = celer_textstream_put(q->p.text, t, &len, &hit)) || text_add(q, piece, len) != 0) goto oom;
        if (hit) f = CELER_FINISH_STOP_STRING;
    }
    if (!f && q->p.max_tokens >= 0 && q->n_gen >= q->p.max_tokens) f = CELER_FINISH_LENGTH;
    if (!f && p_unfed >= q->p.session->ctx) f = CELER_FINISH_CONTEXT;
    if (f && f != CELER_FINISH_STOP_STRING && q->p.text) {
        if (!(piece = celer_textstream_flush(q->p.text, &len, &hit)) || text_add(q, piece, len) != 0) goto oom;
        if (hit) f = CELER_FINISH_STOP_STRING;
    }
    e->text = q->text;
    e->text_len = q->text_len;
    e->finish = f;
    if (f) q->state = SEQ_DONE;
    return f;
oom:
    fail(q, e);
    return CELER_FINISH_ERROR;
}

/* ---------------------------------------------------------------- the device path */

/* 1 when q's tokens can be drawn on the device: a backend sampler, no penalties,
 * no logits wanted on the host, no grammar (its mask for token N+1 depends on token
 * N, which the pipeline has not read back yet), and a vocabulary every table covers (the device's
 * tokens skip the host's range checks; a per-layer table shorter than the
 * vocabulary needs them). */
static int device_ok(const celer_gen *g, const gseq *q, sample_params *sp) {
    const model *m = g->cm->m;
    return m->be->ops->sample && m->tp <= 1 && !q->host_only && !q->p.want_logits && !q->p.grammar &&
           setting_flag(SET_CELER_DEVICE_SAMPLE) &&
           sample_device_params(q->smp, sp) && !(m->cfg.ple_dim > 0 && m->cfg.ple_vocab < m->cfg.vocab);
}

/* Queues the device draw of a token into result slot `slot` from the logits in q's
 * scratch. -1 (the draw given back) when the device refuses these parameters. */
static int device_draw(celer_gen *g, gseq *q, const sample_params *sp, int slot) {
    backend *b = g->cm->m->be;
    model_scratch *scr = q->p.session->scratch;
    double u = sample_device_draw(q->smp, &q->before);
    if (b->ops->sample(b, scr->logits, g->cm->m->cfg.vocab, sp, u, scr->tok, slot) != 0) {
        sample_device_undraw(q->smp, &q->before);
        return -1;
    }
    return 0;
}

/* The pipelined step of the only sequence, INFLIGHT: feeds the token in flight and
 * queues the draw of the next one when the sequence can go on, then reads the token
 * in flight and ends or continues with it. */
static void pipe_step(celer_gen *g, gseq *q, celer_gen_event *e) {
    backend *b = g->cm->m->be;
    celer_session *s = q->p.session;
    sample_params sp;
    sample_device_params(q->smp, &sp);
    const int k = q->n_gen, p_unfed = s->pos;
    /* room to feed token k and sample token k + 1 */
    const int more = (q->p.max_tokens < 0 || k + 1 < q->p.max_tokens) && p_unfed + 1 <= s->ctx;
    if (more) {
        if (engine_step_device_token(s) != 0) {
            b->ops->sampled(b, k % SAMPLE_SLOTS); /* let what is in flight finish */
            fail(q, e);
            return;
        }
        if (device_draw(g, q, &sp, (k + 1) % SAMPLE_SLOTS) != 0) {
            err_set("device sampler refused its parameters mid-generation");
            b->ops->sampled(b, k % SAMPLE_SLOTS);
            celer_session_rewind(s, s->pos - 1);
            fail(q, e);
            return;
        }
    }
    const int32_t t = b->ops->sampled(b, k % SAMPLE_SLOTS);
    if (t < 0) {
        if (more) {
            q->n_gen++;
            undo_inflight(g, q);
            q->n_gen--;
        }
        fail(q, e);
        return;
    }
    if (more) s->tokens[s->pos - 1] = t;
    int f = finish_token(q, t, p_unfed, e);
    if (f && more) undo_inflight(g, q); /* q->n_gen is k + 1: the slot of the extra draw */
    else if (!f) q->state = SEQ_INFLIGHT;
}

/* Reads the token in flight of a sequence that leaves the pipeline (another sequence
 * joined): it becomes PENDING, fed by the host next step. */
static void land(celer_gen *g, gseq *q, celer_gen_event *e) {
    backend *b = g->cm->m->be;
    const int32_t t = b->ops->sampled(b, q->n_gen % SAMPLE_SLOTS);
    if (t < 0) {
        fail(q, e);
        return;
    }
    if (!finish_token(q, t, q->p.session->pos, e)) {
        q->pending = t;
        q->state = SEQ_PENDING;
    }
}

/* The batched pipelined step, run first in every step while the pipeline holds rows.
 * Queues the step that feeds the tokens in flight of the rows that can go on (go_on),
 * plus the PENDING sequences the device can draw for (joiners: their token, known on
 * the host, is uploaded into their row), and draws everyone's next token; then reads
 * the tokens in flight and reports them: a row fed by the new step that ended on its
 * token is undone (its draw given back, its session rewound one token: the KV row the
 * step writes no longer counts); the others stay ROWs in their new rows; a row not fed
 * lands (finished, or PENDING for the host step). Fewer than two rows to queue: every
 * row lands. Sequences reported here are marked landed (nothing more this step). */
static void rows_step(celer_gen *g, int *n_ev, int go_on) {
    backend *b = g->cm->m->be;
    const int R = g->pn, S = g->pslot;
    model_scratch *from = g->pscr;
    /* the next step's rows: g->bi[j] the sequence, g->pnext[j] its row in flight (-1: a joiner) */
    int n2 = 0;
    for (int r = 0; r < R; r++) {
        const int i = g->prow[r];
        g->pmore[r] = 0;
        if (i < 0) continue;
        const gseq *q = g->seq[i];
        const celer_session *s = q->p.session;
        /* room to feed token k = n_gen and draw token k + 1 */
        if (go_on && (q->p.max_tokens < 0 || q->n_gen + 1 < q->p.max_tokens) && s->pos + 1 <= s->ctx) {
            g->pmore[r] = 1;
            g->pnext[n2] = r;
            g->bi[n2++] = i;
        }
    }
    const int n_go = n2;
    for (int i = 0; i < g->n_seq && go_on && n2 < SAMPLE_MAX_ROWS; i++) {
        gseq *q = g->seq[i];
        if (q->state == SEQ_PENDING && !g->landed[i] && device_ok(g, q, &g->bsp[n2])) {
            g->pnext[n2] = -1;
            g->bi[n2++] = i;
        }
    }
    for (int j = 0; j < n2; j++) g->bs[j] = g->seq[g->bi[j]]->p.session;
    model_scratch *to = n2 ? g->bs[0]->scratch : NULL;
    int queued = 0;
    if (n2 >= 2 && n2 <= to->max_T) {
        /* the drawn tokens to their new rows (rows only move down: in order, each
         * copy reads a row no earlier copy wrote), in stream order after the draw;
         * a joiner's token from the host */
        for (int j = 0; j < n2; j++) {
            if (g->pnext[j] < 0) b->ops->upload(b, to->tok + j, &g->seq[g->bi[j]]->pending, sizeof(int32_t));
            else if (to != from || g->pnext[j] != j)
                b->ops->copy(b, to->tok + j, from->tok + g->pnext[j], sizeof(int32_t));
        }
        for (int j = 0; j < n2; j++) {
            gseq *q = g->seq[g->bi[j]];
            g->bdev[j] = 1;
            sample_device_params(q->smp, &g->bsp[j]);
            g->bu[j] = sample_device_draw(q->smp, &q->before);
        }
        queued = engine_batch_decode_queue(g->bs, NULL, n2, g->bdev, g->bsp, g->bu, (S + 1) % SAMPLE_SLOTS) == 0;
        if (!queued) /* the draws back; the rows land, and the host step reports the error */
            for (int j = 0; j < n2; j++) {
                gseq *q = g->seq[g->bi[j]];
                sample_device_undraw(q->smp, &q->before);
            }
    }
    if (!queued)
        for (int r = 0; r < R; r++) g->pmore[r] = 0;
    for (int j = n_go; j < n2 && queued; j++) { /* the joiners are fed: ROWs from here on */
        gseq *q = g->seq[g->bi[j]];
        celer_session *s = q->p.session;
        s->tokens[s->pos - 1] = q->pending;
        q->state = SEQ_ROW;
        q->dev_logits = 0;
    }
    const int rc = R ? b->ops->sampled_rows(b, S, g->bout, R) : 0;
    for (int r = 0; r < R; r++) {
        const int i = g->prow[r];
        if (i < 0) continue;
        gseq *q = g->seq[i];
        celer_session *s = q->p.session;
        celer_gen_event *e = &g->ev[(*n_ev)++];
        event_init(q, i, e);
        g->landed[i] = 1;
        if (rc != 0) {
            if (g->pmore[r]) {
                sample_device_undraw(q->smp, &q->before);
                celer_session_rewind(s, s->pos - 1);
                g->pmore[r] = 0;
            }
            fail(q, e);
            continue;
        }
        const int32_t t = g->bout[r];
        if (g->pmore[r]) s->tokens[s->pos - 1] = t;
        const int f = finish_token(q, t, s->pos - g->pmore[r], e);
        if (f && g->pmore[r]) {
            sample_device_undraw(q->smp, &q->before);
            celer_session_rewind(s, s->pos - 1);
            g->pmore[r] = 0;
        } else if (!f && !g->pmore[r]) {
            q->pending = t;
            q->state = SEQ_PENDING;
        }
    }
    /* the rows of the step now in flight: those that went on and did not end, and the joiners */
    int n = 0;
    for (int j = 0; j < n2 && queued; j++) {
        const int r = g->pnext[j];
        g->prow[j] = r < 0 || g->pmore[r] ? g->bi[j] : -1;
        if (g->prow[j] >= 0) {
            g->seq[g->prow[j]]->row = j;
            n++;
        }
    }
    g->pn = n ? n2 : 0;
    if (queued) {
        g->pslot = (S + 1) % SAMPLE_SLOTS;
        g->pscr = to;
    }
    if (!n && queued) /* every row of the new step ended on its token: let it finish */
        b->ops->sampled_rows(b, g->pslot, g->bout, n2);
}

/* ---------------------------------------------------------------- the host path */

/* A grammar's pick: the logits masked (disallowed tokens at -inf; the stop tokens
 * allowed exactly when the grammar accepts), sampled, and the grammar advanced.
 * 1 when the text is complete and the grammar allows nothing after it (no stop
 * token among the sequence's: the sequence ends without a token), -1 (message set)
 * on a dead end or a grammar error. */
static int grammar_sample(celer_gen *g, gseq *q, const float *logits, int32_t *out) {
    celer_grammar_state *gr = q->p.grammar;
    const int V = g->cm->m->cfg.vocab;
    const uint32_t *mask = celer_grammar_state_mask(gr);
    if (!mask) return -1;
    if (!q->masked && !(q->masked = mem_alloc((size_t)V * sizeof *q->masked, "grammar logits"))) return -1;
    const int accepting = celer_grammar_state_accepting(gr), nv = grammar_state_n_vocab(gr);
    int allowed = 0, first = -1;
    for (int i = 0; i < V; i++) {
        int ok = i < nv && ((mask[i >> 5] >> (i & 31)) & 1);
        if (i == q->p.stop_token || celer_sampler_is_stop(q->smp, i)) ok = accepting;
        q->masked[i] = ok ? logits[i] : -INFINITY;
        if (ok && first < 0) first = i;
        allowed += ok;
    }
    if (!allowed && accepting) return 1; /* complete, and nothing may follow: the end */
    if (!allowed)
        return err_set("grammar: dead end after %d generated tokens: no token is allowed and the text is not "
                       "complete", q->n_gen);
    int32_t t = celer_sampler_sample(q->smp, q->masked);
    if (q->masked[t] == -INFINITY) t = first; /* every allowed token's logit was -inf */
    if (!(celer_sampler_is_stop(q->smp, t) || t == q->p.stop_token) && celer_grammar_state_accept_token(gr, t) != 0)
        return -1;
    *out = t;
    return 0;
}

static void host_sample(celer_gen *g, gseq *q, celer_gen_event *e) {
    celer_session *s = q->p.session;
    const float *logits = celer_session_logits(s);
    if (!logits) {
        err_set("generate: the session has no logits");
        fail(q, e);
        return;
    }
    int32_t t = -1;
    if (q->p.grammar) {
        int rc = grammar_sample(g, q, logits, &t);
        if (rc < 0) {
            fail(q, e);
            return;
        }
        if (rc > 0) { /* complete: a finish without a token */
            size_t len = 0;
            const char *rest = q->p.text ? celer_textstream_flush(q->p.text, &len, NULL) : NULL;
            if (rest && len) text_add(q, rest, len);
            e->text = q->text;
            e->text_len = q->text_len;
            e->finish = CELER_FINISH_STOP_TOKEN;
            q->state = SEQ_DONE;
            return;
        }
    } else {
        /* greedy without penalties is the argmax: read the logits once, in place, instead
         * of the sampler's copy and candidate list (a vocabulary's worth of memory traffic
         * per sequence per step, 3% of an 8-sequence CPU step); the pick is the same and
         * the sampler draws nothing at temperature 0 */
        sample_params sp;
        const int greedy = sample_device_params(q->smp, &sp) && sp.temperature <= 0.0f;
        t = greedy ? sample_argmax(logits, s->cm->m->cfg.vocab) : celer_sampler_sample(q->smp, logits);
    }
    if (q->p.want_logits) e->logits = logits;
    if (!finish_token(q, t, s->pos, e)) {
        q->pending = t;
        q->state = SEQ_PENDING;
    }
}

/* A decode step of the n >= 2 PENDING sequences in the batch arrays, whose next
 * tokens are drawn on the device in one launch where their parameters allow (the
 * others' logits come to the host, as in the host step); the unpipelined path
 * (CELER_BATCH_PIPELINE=0, or rows the pipeline could not take). 0 when the step did not run (no backend sampler, no row
 * for it, or a failure: every draw is taken back and the host step runs instead,
 * reporting any error). */
static int feed_device(celer_gen *g, int n) {
    const model *m = g->cm->m;
    if (!m->be->ops->sample_rows || m->tp > 1 || n < 2 || n > SAMPLE_MAX_ROWS || !setting_flag(SET_CELER_DEVICE_SAMPLE)) return 0;
    int any = 0;
    for (int k = 0; k < n; k++) {
        gseq *q = g->seq[g->bi[k]];
        g->bdev[k] = (unsigned char)device_ok(g, q, &g->bsp[k]);
        g->btok[k] = q->pending;
        g->bu[k] = 0.0; /* a host row's (unused) draw */
        any |= g->bdev[k];
    }
    if (!any) return 0;
    for (int k = 0; k < n; k++)
        if (g->bdev[k]) g->bu[k] = sample_device_draw(g->seq[g->bi[k]]->smp, &g->seq[g->bi[k]]->before);
    if (engine_batch_decode_sample(g->bs, g->btok, n, g->bdev, g->bsp, g->bu, g->bout) != 0) {
        for (int k = 0; k < n; k++)
            if (g->bdev[k]) sample_device_undraw(g->seq[g->bi[k]]->smp, &g->seq[g->bi[k]]->before);
        return 0;
    }
    for (int k = 0; k < n; k++) {
        gseq *q = g->seq[g->bi[k]];
        q->dev_logits = 0;
        q->state = SEQ_READY;
        q->has_dev_tok = g->bdev[k];
        q->dev_tok = g->bout[k];
    }
    return 1;
}

/* Feeds every PENDING token and prompt chunks under the budget in one batch; a
 * failed batch is retried one sequence at a time to find the culprit (its event
 * reports the error). */
static void feed(celer_gen *g, int *n_ev) {
    int n = 0, decode = 0, prefilled = 0;
    for (int i = 0; i < g->n_seq; i++) {
        gseq *q = g->seq[i];
        if (q->state != SEQ_PENDING || g->landed[i]) continue;
        g->bs[n] = q->p.session;
        g->bt[n] = &q->pending;
        g->bn[n] = 1;
        g->bw[n] = 1;
        g->bi[n++] = i;
        decode++;
    }
    int left = g->budget ? g->budget - decode - g->pn : 0; /* the pipeline's rows are decode tokens too */
    for (int i = 0; i < g->n_seq; i++) {
        gseq *q = g->seq[i];
        if (q->state != SEQ_PREFILL) continue;
        int m = q->p.n_prompt - q->cursor;
        if (g->budget) {
            if (left <= 0 && prefilled) break;
            int cap = left > 0 ? left : 1; /* a prompt goes forward every step */
            if (m > cap) m = cap;
            left -= m;
        }
        g->bs[n] = q->p.session;
        g->bt[n] = q->prompt + q->cursor;
        g->bn[n] = m;
        g->bw[n] = q->cursor + m == q->p.n_prompt;
        g->bi[n++] = i;
        prefilled = 1;
    }
    if (!n) return;
    if (!prefilled && feed_device(g, n)) return;
    if (celer_batch_eval(g->bs, g->bt, g->bn, g->bw, n) != 0) {
        for (int k = 0; k < n; k++) {
            const unsigned char want = 1;
            if (celer_batch_eval(&g->bs[k], &g->bt[k], &g->bn[k], &want, 1) != 0) {
                gseq *q = g->seq[g->bi[k]];
                event_init(q, g->bi[k], &g->ev[*n_ev]);
                fail(q, &g->ev[(*n_ev)++]);
                g->bi[k] = -1;
            }
        }
    }
    for (int k = 0; k < n; k++) {
        if (g->bi[k] < 0) continue;
        gseq *q = g->seq[g->bi[k]];
        q->dev_logits = n == 1;
        if (q->state == SEQ_PENDING) q->state = SEQ_READY;
        else if ((q->cursor += g->bn[k]) == q->p.n_prompt) q->state = SEQ_READY;
    }
}

/* ---------------------------------------------------------------- the step */

int celer_gen_step(celer_gen *g, const celer_gen_event **events) {
    *events = g->ev;
    int active = 0, last = -1;
    for (int i = 0; i < g->n_seq; i++) {
        gseq *q = g->seq[i];
        if (q->state == SEQ_DONE) seq_clear(q);
        if (q->state != SEQ_FREE) active++, last = i;
    }
    if (!active) return 0;
    if (reserve(g) != 0) return -1;
    *events = g->ev;
    int n_ev = 0;
    if (active == 1 && g->seq[last]->state == SEQ_INFLIGHT) {
        gseq *q = g->seq[last];
        event_init(q, last, &g->ev[0]);
        pipe_step(g, q, &g->ev[0]);
        return 1;
    }
    memset(g->landed, 0, (size_t)g->n_seq);
    /* the lone pipeline stops while other sequences run: land its token in flight */
    for (int i = 0; i < g->n_seq; i++) {
        gseq *q = g->seq[i];
        if (q->state != SEQ_INFLIGHT) continue;
        g->landed[i] = 1;
        event_init(q, i, &g->ev[n_ev]);
        land(g, q, &g->ev[n_ev++]);
    }
    if (!g->pn && setting_flag(SET_CELER_BATCH_PIPELINE) && g->cm->m->be->ops->sample_rows &&
        setting_flag(SET_CELER_DEVICE_SAMPLE)) {
        /* two or more PENDING sequences the device can draw for start the batched
         * pipeline: their step is queued, then the next one before its tokens are read */
        rows_step(g, &n_ev, 1);
    }
    if (g->pn) {
        /* the batched pipeline goes on whatever else runs: the host's part of the step
         * (prompt chunks, rows sampled on the host) follows as its own forward */
        rows_step(g, &n_ev, 1);
        int others = 0;
        for (int i = 0; i < g->n_seq; i++) {
            const int st = g->seq[i]->state;
            others += st != SEQ_FREE && st != SEQ_DONE && st != SEQ_ROW && !g->landed[i];
        }
        if (!others) return n_ev;
    }
    feed(g, &n_ev);
    for (int i = 0; i < g->n_seq; i++) {
        gseq *q = g->seq[i];
        if (q->state != SEQ_READY || g->landed[i]) continue;
        celer_gen_event *e = &g->ev[n_ev++];
        event_init(q, i, e);
        if (!q->announced) {
            q->announced = 1;
            if (q->p.on_prompt) q->p.on_prompt(q->p.session, q->p.user);
        }
        if (q->p.max_tokens == 0) { /* the prompt alone */
            if (q->p.text) {
                size_t len = 0;
                const char *rest = celer_textstream_flush(q->p.text, &len, NULL);
                if (rest) text_add(q, rest, len);
                e->text = q->text;
                e->text_len = q->text_len;
            }
            e->finish = CELER_FINISH_LENGTH;
            q->state = SEQ_DONE;
            continue;
        }
        if (q->has_dev_tok) { /* drawn on the device in this step's batch */
            q->has_dev_tok = 0;
            if (!finish_token(q, q->dev_tok, q->p.session->pos, e)) {
                q->pending = q->dev_tok;
                q->state = SEQ_PENDING;
            }
            continue;
        }
        sample_params sp;
        if (active == 1 && q->dev_logits && device_ok(g, q, &sp)) {
            if (device_draw(g, q, &sp, q->n_gen % SAMPLE_SLOTS) == 0) {
                pipe_step(g, q, e);
                continue;
            }
            q->host_only = 1; /* these filters need the host */
        }
        host_sample(g, q, e);
    }
    return n_ev;
}

/* ---------------------------------------------------------------- one sequence */

int celer_generate(celer_session *s, celer_sampler *smp, const int32_t *prompt, int n_prompt, int max_tokens,
                   int32_t stop_token, int32_t *out, int *finish) {
    celer_gen *g = celer_gen_new(s->cm, 0);
    if (!g) return -1;
    celer_gen_seq q = {.session = s, .sampler = smp, .prompt = prompt, .n_prompt = n_prompt,
                       .max_tokens = max_tokens, .stop_token = stop_token};
    int k = 0, f = CELER_FINISH_NONE;
    if (celer_gen_add(g, &q) < 0) {
        celer_gen_free(g);
        return -1;
    }
    while (!f) {
        const celer_gen_event *ev;
        int n = celer_gen_step(g, &ev);
        if (n <= 0) break;
        if (ev[0].token >= 0) {
            if (out) out[k] = ev[0].token;
            k++;
        }
        f = ev[0].finish;
        if (f == CELER_FINISH_ERROR) err_set("%s", ev[0].error);
    }
    celer_gen_free(g);
    if (finish) *finish = f;
    return f == CELER_FINISH_ERROR ? -1 : k;
}

int celer_generate_greedy(celer_session *s, const int32_t *prompt, int n_prompt, int n_gen, int32_t stop_token,
                          int32_t *out) {
    return celer_generate(s, NULL, prompt, n_prompt, n_gen, stop_token, out, NULL);
}
