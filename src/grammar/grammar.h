/* grammar/grammar.h: the compiled form of a GBNF grammar (what parse.c builds and
 * the automaton walks) and the internal interfaces between the files of src/grammar/:
 *   parse.c      GBNF text -> rules (repetition and groups become rules, character
 *                classes become byte-level alternatives: utf8.c), checks
 *   utf8.c       codepoint ranges -> UTF-8 byte-range sequences
 *   automaton.c  the pushdown automaton over bytes: interned stacks and states,
 *                transitions cached
 *   vocab.c      the vocabulary index (tokens' bytes, sorted: an implicit byte trie)
 *   state.c      celer_grammar_state: masks (cached per automaton state), advancing,
 *                lazy triggers
 *   schema.c     JSON Schema -> GBNF; regex.c: the pattern subset -> GBNF */
#ifndef CELER_GRAMMAR_GRAMMAR_H
#define CELER_GRAMMAR_GRAMMAR_H
#include <stddef.h>
#include <stdint.h>

#include "celer.h"

enum { GE_END = 0, GE_CHAR, GE_RULE };

/* One element of an alternative: a byte set (CHAR), a rule reference (RULE), or
 * the end of the alternative (END). */
typedef struct {
    uint8_t type;
    uint8_t lit;      /* CHAR: written as a literal "..." (special tokens may match it) */
    uint32_t v;       /* CHAR: index into sets; RULE: rule id */
} gelem;

struct celer_grammar {
    gelem *el;            /* [n_el] every alternative, each ended by GE_END */
    uint32_t n_el;
    uint32_t (*sets)[8];  /* [n_sets] 256-bit byte sets */
    uint32_t n_sets;
    uint32_t *alt_off;    /* [n_rules + 1] rule r's alternatives are alts[alt_off[r] .. alt_off[r+1]) */
    uint32_t *alts;       /* start positions in el */
    int n_rules;
    int root;
};

static inline int gset_has(const uint32_t *set, unsigned b) { return (set[b >> 5] >> (b & 31)) & 1; }

/* ---- utf8.c: a set of codepoint ranges as alternatives of byte ranges. cb is called
 * once per sequence of n (1..4) byte ranges lo[i]..hi[i]. Surrogates are left out. */
typedef int (*utf8_seq_cb)(void *ctx, int n, const uint8_t *lo, const uint8_t *hi);
int utf8_ranges(const uint32_t *ranges, int n_ranges, utf8_seq_cb cb, void *ctx);

/* ---- automaton.c */
typedef struct gm gm;                 /* a matcher: interned stacks, states, transitions */
#define GM_DEAD UINT32_MAX            /* no parse left */

gm *gm_new(const celer_grammar *g);
void gm_free(gm *m);
/* The state before any byte. GM_DEAD with a message on error. */
uint32_t gm_start(gm *m);
/* The state after byte b from state s (lit: only stacks whose byte comes from a
 * literal). GM_DEAD when no parse takes b; errors (a limit) set m's error flag. */
uint32_t gm_step(gm *m, uint32_t s, unsigned b, int lit);
/* 1 when a parse of state s is complete. */
int gm_accepting(const gm *m, uint32_t s);
/* Non-zero once a limit was hit (the message is in err_msg()). */
int gm_failed(const gm *m);
/* Bytes the matcher holds; gm_compact drops every state but keep (its new id is
 * returned) when they exceed the budget (state ids change: caches keyed by them must
 * be cleared; returns keep when nothing was dropped, GM_DEAD on error). */
size_t gm_bytes(const gm *m);
uint32_t gm_compact(gm *m, uint32_t keep);
/* Changes whenever gm_compact started over (state ids of before mean nothing now). */
uint32_t gm_generation(const gm *m);

/* ---- vocab.c */
struct celer_grammar_vocab {
    int n_vocab;
    char *blob;            /* every token's bytes */
    uint32_t *off, *len;   /* [n_vocab] token id's bytes in blob */
    uint8_t *special;      /* [n_vocab] special tokens: matched only by literals */
    /* the non-special tokens with bytes, in byte order, laid out for one sequential
     * pass: their bytes again in that order (sblob) */
    struct vocab_entry {
        int32_t id;
        uint32_t len;
        uint32_t lcp;      /* bytes shared with the entry before */
        uint32_t off;      /* in sblob */
    } *sorted;             /* [n_sorted] */
    char *sblob;
    int n_sorted;
    int32_t *specials;     /* [n_specials] */
    int n_specials;
    uint32_t max_len;      /* longest token in bytes */
};
/* Sets in out (zeroed by the caller) the bit of every non-special token of v whose
 * bytes state s can take: one pass over v's sorted tokens (a trie walk), S
 * [max_len + 1] as scratch. -1 when a limit was hit. */
int gm_walk(gm *m, uint32_t s, const celer_grammar_vocab *v, uint32_t *out, uint32_t *S);

/* ---- state.c: the vocabulary size a state's masks cover (tokens past it: never allowed). */
int grammar_state_n_vocab(const celer_grammar_state *st);
#endif
