/* grammar/vocab.c: the vocabulary index of a tokenizer for constrained decoding:
 * every token's bytes as it adds them to a text (celer_tokenizer_token_bytes: a
 * piece of a UTF-8 sequence stays that piece), and the non-special tokens sorted by
 * their bytes with the length each shares with the one before. That sorted list is
 * a byte trie walked in order: a mask walk steps the automaton once per trie edge
 * and skips every token under a prefix the automaton refuses (state.c). Special
 * tokens are kept apart: they are allowed only where a grammar literal spells them.
 * Tokens that add no bytes are never allowed. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "grammar/grammar.h"

static int cmp_tok(const void *a, const void *b, void *ctx) {
    const celer_grammar_vocab *v = ctx;
    int32_t x = ((const struct vocab_entry *)a)->id, y = ((const struct vocab_entry *)b)->id;
    uint32_t lx = v->len[x], ly = v->len[y];
    int c = memcmp(v->blob + v->off[x], v->blob + v->off[y], lx < ly ? lx : ly);
    if (c) return c;
    return lx < ly ? -1 : lx > ly ? 1 : (x < y ? -1 : x > y);
}

celer_grammar_vocab *celer_grammar_vocab_new(const celer_tokenizer *t) {
    if (!t) {
        err_set("grammar vocabulary: no tokenizer");
        return NULL;
    }
    const int V = celer_tokenizer_n_vocab(t);
    celer_grammar_vocab *v = calloc(1, sizeof *v);
    if (!v) goto oom;
    v->n_vocab = V;
    size_t cap = (size_t)V * 8 + 64, used = 0;
    v->blob = malloc(cap);
    v->off = calloc((size_t)V + 1, sizeof *v->off);
    v->len = calloc((size_t)V + 1, sizeof *v->len);
    v->special = calloc((size_t)V + 1, 1);
    v->sorted = malloc(((size_t)V + 1) * sizeof *v->sorted);
    v->specials = malloc(((size_t)V + 1) * sizeof *v->specials);
    if (!v->blob || !v->off || !v->len || !v->special || !v->sorted || !v->specials) goto oom;
    for (int id = 0; id < V; id++) {
        size_t n;
        char *b = celer_tokenizer_token_bytes(t, id, &n);
        if (!b) goto fail;
        if (used + n > cap || used + n > UINT32_MAX) {
            while (used + n > cap) cap *= 2;
            char *nb = cap <= UINT32_MAX ? realloc(v->blob, cap) : NULL;
            if (!nb) {
                free(b);
                goto oom;
            }
            v->blob = nb;
        }
        memcpy(v->blob + used, b, n);
        free(b);
        v->off[id] = (uint32_t)used;
        v->len[id] = (uint32_t)n;
        used += n;
        if (n > v->max_len) v->max_len = (uint32_t)n;
        if (!n) continue;
        if (celer_tokenizer_is_special(t, id)) {
            v->special[id] = 1;
            v->specials[v->n_specials++] = id;
        } else v->sorted[v->n_sorted++].id = id;
    }
    qsort_r(v->sorted, (size_t)v->n_sorted, sizeof *v->sorted, cmp_tok, v);
    if (!(v->sblob = malloc(used + 1))) goto oom;
    size_t at = 0;
    for (int i = 0; i < v->n_sorted; i++) {
        struct vocab_entry *e = &v->sorted[i];
        e->len = v->len[e->id];
        e->off = (uint32_t)at;
        memcpy(v->sblob + at, v->blob + v->off[e->id], e->len);
        at += e->len;
        uint32_t l = 0;
        if (i) {
            const struct vocab_entry *p = &v->sorted[i - 1];
            uint32_t m = p->len < e->len ? p->len : e->len;
            while (l < m && v->sblob[p->off + l] == v->sblob[e->off + l]) l++;
        }
        e->lcp = l;
    }
    return v;
oom:
    err_set("grammar vocabulary: out of memory");
fail:
    celer_grammar_vocab_free(v);
    return NULL;
}

void celer_grammar_vocab_free(celer_grammar_vocab *v) {
    if (!v) return;
    free(v->blob), free(v->off), free(v->len), free(v->special);
    free(v->sorted), free(v->sblob), free(v->specials);
    free(v);
}

int celer_grammar_vocab_size(const celer_grammar_vocab *v) { return v ? v->n_vocab : 0; }
