/* grammar/state.c: celer_grammar_state, one sequence's place in a grammar: the
 * automaton state, the mask of tokens allowed there (walked over the vocabulary's
 * byte trie, cached per automaton state in a small ring), advancing by a token, and
 * the lazy mode (inactive until a trigger string appears in the text, then the
 * grammar runs from the start of that trigger). */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/mem.h"
#include "grammar/grammar.h"

#define MASK_SLOTS 32 /* masks cached per sequence (nwords x 4 bytes each) */

struct celer_grammar_state {
    const celer_grammar *g;
    const celer_grammar_vocab *v;
    gm *m;
    uint32_t cur;            /* automaton state */
    int active;
    char **trig;             /* [n_trig] lazy triggers */
    size_t *trig_len;
    int n_trig;
    size_t max_trig;
    char *text;              /* inactive: the last bytes generated (at most max_trig - 1 kept between tokens) */
    size_t n_text, cap_text;
    uint32_t nwords;         /* words of a mask */
    uint32_t *masks;         /* [MASK_SLOTS][nwords] */
    uint32_t keys[MASK_SLOTS];
    uint32_t gens[MASK_SLOTS];
    int n_masks, next_slot;
    uint32_t *all;           /* [nwords] every token (inactive) */
    uint32_t *walk;          /* [max_len + 1] automaton state after each byte of a trie path */
};

celer_grammar_state *celer_grammar_state_new(const celer_grammar *g, const celer_grammar_vocab *v,
                                             const char *const *triggers, int n_triggers) {
    if (!g || !v || n_triggers < 0 || (n_triggers && !triggers)) {
        err_set("grammar state: no grammar or vocabulary");
        return NULL;
    }
    celer_grammar_state *st = calloc(1, sizeof *st);
    if (!st) goto oom;
    st->g = g;
    st->v = v;
    st->nwords = ((uint32_t)v->n_vocab + 31) / 32;
    if (!(st->m = gm_new(g))) goto fail;
    if (!(st->masks = malloc((size_t)MASK_SLOTS * st->nwords * sizeof *st->masks)) ||
        !(st->all = calloc(st->nwords ? st->nwords : 1, sizeof *st->all)) ||
        !(st->walk = malloc(((size_t)v->max_len + 1) * sizeof *st->walk)))
        goto oom;
    for (int i = 0; i < v->n_vocab; i++) st->all[i >> 5] |= 1u << (i & 31);
    if ((st->cur = gm_start(st->m)) == GM_DEAD) {
        if (!gm_failed(st->m)) err_set("grammar: matches nothing");
        goto fail;
    }
    if (n_triggers) {
        if (!(st->trig = calloc((size_t)n_triggers, sizeof *st->trig)) ||
            !(st->trig_len = calloc((size_t)n_triggers, sizeof *st->trig_len)))
            goto oom;
        for (int i = 0; i < n_triggers; i++) {
            if (!triggers[i] || !triggers[i][0]) {
                err_set("grammar state: trigger %d is empty", i);
                goto fail;
            }
            if (!(st->trig[i] = strdup(triggers[i]))) goto oom;
            st->n_trig = i + 1;
            st->trig_len[i] = strlen(triggers[i]);
            if (st->trig_len[i] > st->max_trig) st->max_trig = st->trig_len[i];
        }
    } else st->active = 1;
    return st;
oom:
    err_set("grammar state: out of memory");
fail:
    celer_grammar_state_free(st);
    return NULL;
}

void celer_grammar_state_free(celer_grammar_state *st) {
    if (!st) return;
    gm_free(st->m);
    for (int i = 0; i < st->n_trig; i++) free(st->trig[i]);
    free(st->trig), free(st->trig_len), free(st->text);
    free(st->masks), free(st->all), free(st->walk);
    free(st);
}

int celer_grammar_state_active(const celer_grammar_state *st) { return st->active; }

int grammar_state_n_vocab(const celer_grammar_state *st) { return st->v->n_vocab; }

int celer_grammar_state_accepting(const celer_grammar_state *st) {
    return !st->active || gm_accepting(st->m, st->cur);
}

/* The mask of st->cur computed into out. */
static int compute_mask(celer_grammar_state *st, uint32_t *out) {
    const celer_grammar_vocab *v = st->v;
    gm *m = st->m;
    uint32_t *S = st->walk;
    memset(out, 0, st->nwords * sizeof *out);
    if (gm_walk(m, st->cur, v, out, S) != 0) return -1;
    for (int k = 0; k < v->n_specials; k++) {
        const int32_t id = v->specials[k];
        const uint8_t *b = (const uint8_t *)v->blob + v->off[id];
        uint32_t s = st->cur;
        for (uint32_t j = 0; j < v->len[id] && s != GM_DEAD; j++) s = gm_step(m, s, b[j], 1);
        if (gm_failed(m)) return -1;
        if (s != GM_DEAD) out[id >> 5] |= 1u << (id & 31);
    }
    return 0;
}

const uint32_t *celer_grammar_state_mask(celer_grammar_state *st) {
    if (!st->active) return st->all;
    uint32_t c = gm_compact(st->m, st->cur);
    if (c == GM_DEAD) return NULL;
    st->cur = c;
    const uint32_t gen = gm_generation(st->m);
    for (int i = 0; i < st->n_masks; i++)
        if (st->keys[i] == st->cur && st->gens[i] == gen) return st->masks + (size_t)i * st->nwords;
    int slot = st->n_masks < MASK_SLOTS ? st->n_masks++ : st->next_slot;
    st->next_slot = (slot + 1) % MASK_SLOTS;
    uint32_t *out = st->masks + (size_t)slot * st->nwords;
    st->keys[slot] = UINT32_MAX;
    if (compute_mask(st, out) != 0) return NULL;
    st->keys[slot] = st->cur;
    st->gens[slot] = gen;
    return out;
}

/* The state after bytes s[n] from `from` (literal-only steps when lit), GM_DEAD when
 * refused. */
static uint32_t run(celer_grammar_state *st, uint32_t from, const char *s, size_t n, int lit) {
    uint32_t t = from;
    for (size_t i = 0; i < n && t != GM_DEAD; i++) t = gm_step(st->m, t, (unsigned char)s[i], lit);
    return t;
}

/* Inactive: adds text, looks for the earliest trigger, and runs the grammar from it. */
static int lazy_add(celer_grammar_state *st, const char *s, size_t n) {
    if (mem_append(&st->text, &st->n_text, &st->cap_text, s, n, "a grammar's trigger text") != 0) return -1;
    size_t best = SIZE_MAX;
    for (int i = 0; i < st->n_trig; i++) {
        const char *hit = memmem(st->text, st->n_text, st->trig[i], st->trig_len[i]);
        if (hit && (size_t)(hit - st->text) < best) best = (size_t)(hit - st->text);
    }
    if (best == SIZE_MAX) {
        size_t keep = st->max_trig - 1; /* a trigger may still end in the next token */
        if (st->n_text > keep) {
            memmove(st->text, st->text + st->n_text - keep, keep);
            st->n_text = keep;
        }
        return 0;
    }
    uint32_t t = run(st, st->cur, st->text + best, st->n_text - best, 0);
    if (t == GM_DEAD) {
        if (!gm_failed(st->m)) err_set("grammar: the text after the trigger does not match the grammar");
        return -1;
    }
    st->cur = t;
    st->active = 1;
    st->n_text = 0;
    return 0;
}

int celer_grammar_state_accept_bytes(celer_grammar_state *st, const char *s, size_t n) {
    if (!st->active) return lazy_add(st, s, n);
    uint32_t t = run(st, st->cur, s, n, 0);
    if (t == GM_DEAD) {
        if (!gm_failed(st->m)) err_set("grammar: the text is not allowed by the grammar here");
        return -1;
    }
    st->cur = t;
    return 0;
}

int celer_grammar_state_accept_token(celer_grammar_state *st, int32_t token) {
    const celer_grammar_vocab *v = st->v;
    if (token < 0 || token >= v->n_vocab) return err_set("grammar: token %d outside the vocabulary", (int)token);
    const char *b = v->blob + v->off[token];
    if (!st->active) return lazy_add(st, b, v->len[token]);
    uint32_t t = run(st, st->cur, b, v->len[token], v->special[token]);
    if (t == GM_DEAD) {
        if (!gm_failed(st->m)) err_set("grammar: token %d is not allowed by the grammar here", (int)token);
        return -1;
    }
    st->cur = t;
    return 0;
}
