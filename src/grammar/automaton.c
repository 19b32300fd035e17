/* grammar/automaton.c: the pushdown automaton of a compiled grammar, over bytes.
 *
 * A parse in progress is a stack of positions in the grammar's elements (the top:
 * the byte set to match next; below it: where each open rule continues). Stacks are
 * interned as (position, parent stack) nodes, so equal stacks have one id and share
 * their tails; node 0 is the empty stack, a complete parse. An automaton state is the
 * sorted set of stacks the input so far leaves (the grammar may be ambiguous), also
 * interned, so a state is one integer: masks and transitions are cached by it.
 * Reading a byte keeps the stacks whose top set holds it, pops that element and
 * expands what follows: a rule reference pushes where the rule continues (nothing
 * when it was the alternative's last element: tail calls do not grow the stack) and
 * goes on at the start of each of its alternatives; the end of an alternative
 * returns to the parent. Left recursion is refused by the parser, so expansion ends;
 * ambiguity and depth are bounded by CELER_MAX_GRAMMAR_STACKS / _DEPTH. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/limits.h"
#include "grammar/grammar.h"

#define GM_BUDGET (64u << 20) /* bytes of tables before gm_compact starts over */
#define GM_UNSET (UINT32_MAX - 1)
#define GM_EXPAND_STEPS (1u << 20) /* expansion calls for one byte (nullable chains) */

struct gm {
    const celer_grammar *g;
    uint32_t *npos, *npar, *ndepth; /* [n_nodes] node = (position, parent node) */
    uint32_t n_nodes, cap_nodes;
    uint32_t *nhash;                /* [nhcap] node ids, 0: empty */
    uint32_t nhcap;
    uint32_t *soff, *slen;          /* [n_states] each state's stacks in pool */
    uint32_t n_states, cap_states;
    uint32_t *pool;                 /* [n_pool] sorted node ids of every state */
    size_t n_pool, cap_pool;
    uint32_t *shash;                /* [shcap] state id + 1, 0: empty */
    uint32_t shcap;
    uint32_t **rows;                /* [cap_rows] per state: next state by byte (GM_UNSET: not yet known), or NULL */
    uint32_t cap_rows, n_rows;
    uint64_t *tkey;                 /* [tcap] literal-only transitions: key + 1 (0: empty) */
    uint32_t *tval;
    uint32_t tcap, tn;
    uint32_t *buf;                  /* [cap_buf] stacks of the state being built */
    uint32_t n_buf, cap_buf;
    uint32_t steps;
    uint32_t generation;            /* bumped by every gm_compact that starts over */
    int failed;
};

static uint64_t mix(uint64_t x) {
    x ^= x >> 33;
    x *= 0xff51afd7ed558ccdull;
    x ^= x >> 33;
    x *= 0xc4ceb9fe1a85ec53ull;
    return x ^ (x >> 33);
}

static void fail(gm *m, const char *msg) {
    if (!m->failed) err_set("%s", msg);
    m->failed = 1;
}

static int grow(void **p, uint32_t *cap, size_t elem, uint32_t need) {
    if (need <= *cap) return 0;
    uint32_t c = *cap ? *cap : 64;
    while (c < need) c *= 2;
    void *q = realloc(*p, (size_t)c * elem);
    if (!q) return -1;
    *p = q;
    *cap = c;
    return 0;
}

/* ---------------------------------------------------------------- nodes */

static int nodes_rehash(gm *m, uint32_t cap) {
    uint32_t *h = calloc(cap, sizeof *h);
    if (!h) return -1;
    for (uint32_t i = 1; i < m->n_nodes; i++) {
        uint32_t k = (uint32_t)mix(((uint64_t)m->npos[i] << 32) | m->npar[i]) & (cap - 1);
        while (h[k]) k = (k + 1) & (cap - 1);
        h[k] = i;
    }
    free(m->nhash);
    m->nhash = h;
    m->nhcap = cap;
    return 0;
}

static uint32_t node(gm *m, uint32_t pos, uint32_t parent) {
    if (m->n_nodes * 2 >= m->nhcap && nodes_rehash(m, m->nhcap * 2)) goto oom;
    uint32_t k = (uint32_t)mix(((uint64_t)pos << 32) | parent) & (m->nhcap - 1);
    for (; m->nhash[k]; k = (k + 1) & (m->nhcap - 1)) {
        uint32_t i = m->nhash[k];
        if (m->npos[i] == pos && m->npar[i] == parent) return i;
    }
    uint32_t d = parent ? m->ndepth[parent] + 1 : 1;
    if (d > CELER_MAX_GRAMMAR_DEPTH) {
        fail(m, "grammar: rules nested deeper than the limit while matching (CELER_MAX_GRAMMAR_DEPTH)");
        return 0;
    }
    uint32_t c = m->cap_nodes;
    if (grow((void **)&m->npos, &c, sizeof *m->npos, m->n_nodes + 1)) goto oom;
    c = m->cap_nodes;
    if (grow((void **)&m->npar, &c, sizeof *m->npar, m->n_nodes + 1)) goto oom;
    c = m->cap_nodes;
    if (grow((void **)&m->ndepth, &c, sizeof *m->ndepth, m->n_nodes + 1)) goto oom;
    m->cap_nodes = c;
    uint32_t i = m->n_nodes++;
    m->npos[i] = pos;
    m->npar[i] = parent;
    m->ndepth[i] = d;
    m->nhash[k] = i;
    return i;
oom:
    fail(m, "grammar: out of memory");
    return 0;
}

/* ---------------------------------------------------------------- expansion */

static void push(gm *m, uint32_t n) {
    if (m->n_buf >= 16u * CELER_MAX_GRAMMAR_STACKS) {
        fail(m, "grammar: too ambiguous: more parses at once than the limit (CELER_MAX_GRAMMAR_STACKS)");
        return;
    }
    if (grow((void **)&m->buf, &m->cap_buf, sizeof *m->buf, m->n_buf + 1)) {
        fail(m, "grammar: out of memory");
        return;
    }
    m->buf[m->n_buf++] = n;
}

/* Every stack that continues at pos with parent below, down to byte sets. */
static void expand(gm *m, uint32_t pos, uint32_t parent) {
    const celer_grammar *g = m->g;
    for (;;) {
        if (m->failed) return;
        if (++m->steps > GM_EXPAND_STEPS) {
            fail(m, "grammar: too ambiguous: one byte expands to more than 1048576 steps");
            return;
        }
        const gelem *e = &g->el[pos];
        if (e->type == GE_CHAR) {
            uint32_t n = node(m, pos, parent);
            if (n) push(m, n);
            return;
        }
        if (e->type == GE_END) {
            if (!parent) {
                push(m, 0);
                return;
            }
            pos = m->npos[parent];
            parent = m->npar[parent];
            continue;
        }
        uint32_t cont = parent;
        if (g->el[pos + 1].type != GE_END && !(cont = node(m, pos + 1, parent))) return;
        const uint32_t a0 = g->alt_off[e->v], a1 = g->alt_off[e->v + 1];
        for (uint32_t a = a0; a + 1 < a1; a++) expand(m, g->alts[a], cont);
        if (a0 == a1) return;
        pos = g->alts[a1 - 1]; /* the last alternative without recursing */
        parent = cont;
    }
}

static int cmp_u32(const void *a, const void *b) {
    uint32_t x = *(const uint32_t *)a, y = *(const uint32_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t state_hash(const uint32_t *s, uint32_t n) {
    uint64_t h = n;
    for (uint32_t i = 0; i < n; i++) h = mix(h ^ s[i]) + i;
    return h;
}

static int states_rehash(gm *m, uint32_t cap) {
    uint32_t *h = calloc(cap, sizeof *h);
    if (!h) return -1;
    for (uint32_t i = 0; i < m->n_states; i++) {
        uint32_t k = (uint32_t)state_hash(m->pool + m->soff[i], m->slen[i]) & (cap - 1);
        while (h[k]) k = (k + 1) & (cap - 1);
        h[k] = i + 1;
    }
    free(m->shash);
    m->shash = h;
    m->shcap = cap;
    return 0;
}

/* The state of the stacks in buf (sorted, deduplicated here). */
static uint32_t finish(gm *m) {
    if (m->failed || !m->n_buf) return GM_DEAD;
    qsort(m->buf, m->n_buf, sizeof *m->buf, cmp_u32);
    uint32_t n = 1;
    for (uint32_t i = 1; i < m->n_buf; i++)
        if (m->buf[i] != m->buf[n - 1]) m->buf[n++] = m->buf[i];
    if (n > CELER_MAX_GRAMMAR_STACKS) {
        fail(m, "grammar: too ambiguous: more parses at once than the limit (CELER_MAX_GRAMMAR_STACKS)");
        return GM_DEAD;
    }
    if (m->n_states * 2 >= m->shcap && states_rehash(m, m->shcap * 2)) goto oom;
    uint32_t k = (uint32_t)state_hash(m->buf, n) & (m->shcap - 1);
    for (; m->shash[k]; k = (k + 1) & (m->shcap - 1)) {
        uint32_t i = m->shash[k] - 1;
        if (m->slen[i] == n && !memcmp(m->pool + m->soff[i], m->buf, n * sizeof *m->buf)) return i;
    }
    if (m->n_pool + n > m->cap_pool) {
        size_t c = m->cap_pool ? m->cap_pool : 1024;
        while (c < m->n_pool + n) c *= 2;
        uint32_t *p = realloc(m->pool, c * sizeof *p);
        if (!p) goto oom;
        m->pool = p;
        m->cap_pool = c;
    }
    uint32_t c = m->cap_states;
    if (grow((void **)&m->soff, &c, sizeof *m->soff, m->n_states + 1)) goto oom;
    c = m->cap_states;
    if (grow((void **)&m->slen, &c, sizeof *m->slen, m->n_states + 1)) goto oom;
    m->cap_states = c;
    uint32_t id = m->n_states++;
    m->soff[id] = (uint32_t)m->n_pool;
    m->slen[id] = n;
    memcpy(m->pool + m->n_pool, m->buf, n * sizeof *m->buf);
    m->n_pool += n;
    m->shash[k] = id + 1;
    return id;
oom:
    fail(m, "grammar: out of memory");
    return GM_DEAD;
}

/* ---------------------------------------------------------------- public */

static int tables_init(gm *m) {
    m->n_nodes = 1; /* node 0: the empty stack */
    if (grow((void **)&m->npos, &m->cap_nodes, sizeof *m->npos, 1024)) return -1;
    uint32_t c = 0;
    if (grow((void **)&m->npar, &c, sizeof *m->npar, m->cap_nodes)) return -1;
    c = 0;
    if (grow((void **)&m->ndepth, &c, sizeof *m->ndepth, m->cap_nodes)) return -1;
    m->npos[0] = m->npar[0] = m->ndepth[0] = 0;
    if (nodes_rehash(m, 2048) || states_rehash(m, 1024)) return -1;
    m->tcap = 4096;
    m->tn = 0;
    if (!(m->tkey = calloc(m->tcap, sizeof *m->tkey)) || !(m->tval = malloc(m->tcap * sizeof *m->tval))) return -1;
    return 0;
}

static void tables_free(gm *m) {
    free(m->npos), free(m->npar), free(m->ndepth), free(m->nhash);
    free(m->soff), free(m->slen), free(m->pool), free(m->shash);
    free(m->tkey), free(m->tval);
    for (uint32_t i = 0; i < m->cap_rows; i++) free(m->rows ? m->rows[i] : NULL);
    free(m->rows);
    m->rows = NULL;
    m->cap_rows = m->n_rows = 0;
    m->npos = m->npar = m->ndepth = m->nhash = m->soff = m->slen = m->pool = m->shash = m->tval = NULL;
    m->tkey = NULL;
    m->n_nodes = m->cap_nodes = m->nhcap = m->n_states = m->cap_states = m->shcap = m->tcap = m->tn = 0;
    m->n_pool = m->cap_pool = 0;
}

gm *gm_new(const celer_grammar *g) {
    gm *m = calloc(1, sizeof *m);
    if (!m || (m->g = g, tables_init(m))) {
        gm_free(m);
        err_set("grammar: out of memory");
        return NULL;
    }
    return m;
}

void gm_free(gm *m) {
    if (!m) return;
    tables_free(m);
    free(m->buf);
    free(m);
}

int gm_failed(const gm *m) { return m->failed; }

uint32_t gm_generation(const gm *m) { return m->generation; }

uint32_t gm_start(gm *m) {
    m->n_buf = 0;
    m->steps = 0;
    const celer_grammar *g = m->g;
    for (uint32_t a = g->alt_off[g->root]; a < g->alt_off[g->root + 1]; a++) expand(m, g->alts[a], 0);
    return finish(m);
}

int gm_accepting(const gm *m, uint32_t s) { return s != GM_DEAD && m->slen[s] && m->pool[m->soff[s]] == 0; }

static int trans_grow(gm *m) {
    uint32_t cap = m->tcap * 2;
    uint64_t *k = calloc(cap, sizeof *k);
    uint32_t *v = malloc(cap * sizeof *v);
    if (!k || !v) {
        free(k), free(v);
        return -1;
    }
    for (uint32_t i = 0; i < m->tcap; i++) {
        if (!m->tkey[i]) continue;
        uint32_t j = (uint32_t)mix(m->tkey[i]) & (cap - 1);
        while (k[j]) j = (j + 1) & (cap - 1);
        k[j] = m->tkey[i];
        v[j] = m->tval[i];
    }
    free(m->tkey), free(m->tval);
    m->tkey = k, m->tval = v, m->tcap = cap;
    return 0;
}

/* The transition computed: the stacks of s that take b, expanded. */
static uint32_t compute(gm *m, uint32_t s, unsigned b, int lit) {
    const celer_grammar *g = m->g;
    m->n_buf = 0;
    m->steps = 0;
    const uint32_t off = m->soff[s], n = m->slen[s];
    for (uint32_t i = 0; i < n; i++) {
        uint32_t nd = m->pool[off + i];
        if (!nd) continue;
        uint32_t pos = m->npos[nd];
        const gelem *e = &g->el[pos];
        if (lit && !e->lit) continue;
        if (gset_has(g->sets[e->v], b)) expand(m, pos + 1, m->npar[nd]);
    }
    return finish(m);
}

/* The row of next states of s (made on first use), NULL on out of memory. */
static uint32_t *row(gm *m, uint32_t s) {
    if (s >= m->cap_rows) {
        uint32_t cap = m->cap_rows ? m->cap_rows : 256;
        while (cap <= s) cap *= 2;
        uint32_t **r = realloc(m->rows, cap * sizeof *r);
        if (!r) return NULL;
        memset(r + m->cap_rows, 0, (cap - m->cap_rows) * sizeof *r);
        m->rows = r;
        m->cap_rows = cap;
    }
    if (!m->rows[s]) {
        if (!(m->rows[s] = malloc(256 * sizeof **m->rows))) return NULL;
        for (int i = 0; i < 256; i++) m->rows[s][i] = GM_UNSET;
        m->n_rows++;
    }
    return m->rows[s];
}

uint32_t gm_step(gm *m, uint32_t s, unsigned b, int lit) {
    if (s == GM_DEAD || m->failed) return GM_DEAD;
    if (!lit) {
        /* the hot path of a mask walk: one load once the row is known */
        if (s < m->cap_rows && m->rows[s] && m->rows[s][b] != GM_UNSET) return m->rows[s][b];
        uint32_t t = compute(m, s, b, 0);
        if (m->failed) return GM_DEAD;
        uint32_t *r = row(m, s);
        if (!r) {
            fail(m, "grammar: out of memory");
            return GM_DEAD;
        }
        r[b] = t;
        return t;
    }
    const uint64_t key = (((uint64_t)s << 9) | ((uint64_t)(lit != 0) << 8) | b) + 1;
    uint32_t j = (uint32_t)mix(key) & (m->tcap - 1);
    for (; m->tkey[j]; j = (j + 1) & (m->tcap - 1))
        if (m->tkey[j] == key) return m->tval[j];
    uint32_t t = compute(m, s, b, lit);
    if (m->failed) return GM_DEAD;
    if ((m->tn + 1) * 2 >= m->tcap) {
        if (trans_grow(m)) {
            fail(m, "grammar: out of memory");
            return GM_DEAD;
        }
        j = (uint32_t)mix(key) & (m->tcap - 1);
        while (m->tkey[j]) j = (j + 1) & (m->tcap - 1);
    }
    m->tkey[j] = key;
    m->tval[j] = t;
    m->tn++;
    return t;
}

int gm_walk(gm *m, uint32_t s, const celer_grammar_vocab *v, uint32_t *out, uint32_t *S) {
    const struct vocab_entry *E = v->sorted;
    const uint8_t *blob = (const uint8_t *)v->sblob;
    S[0] = s;
    for (int i = 0; i < v->n_sorted;) {
        const uint8_t *b = blob + E[i].off;
        const uint32_t len = E[i].len;
        uint32_t d = E[i].lcp;
        while (d < len) {
            const uint32_t from = S[d];
            uint32_t t;
            if (from < m->cap_rows && m->rows[from] && (t = m->rows[from][b[d]]) != GM_UNSET) {
            } else t = gm_step(m, from, b[d], 0);
            if (t == GM_DEAD) break;
            S[++d] = t;
        }
        if (d == len) {
            const int32_t id = E[i].id;
            out[id >> 5] |= 1u << (id & 31);
            i++;
        } else {
            if (m->failed) return -1;
            for (i++; i < v->n_sorted && E[i].lcp > d; i++) {
            } /* every token under the refused prefix */
        }
    }
    return m->failed ? -1 : 0;
}

size_t gm_bytes(const gm *m) {
    return (size_t)m->cap_nodes * 12 + (size_t)m->nhcap * 4 + (size_t)m->cap_states * 8 + m->cap_pool * 4 +
           (size_t)m->shcap * 4 + (size_t)m->tcap * 12 + (size_t)m->cap_rows * 8 + (size_t)m->n_rows * 1024;
}

uint32_t gm_compact(gm *m, uint32_t keep) {
    if (gm_bytes(m) <= GM_BUDGET || keep == GM_DEAD) return keep;
    /* keep's stacks as position lists, bottom last: [len, pos...] each */
    size_t total = 0;
    for (uint32_t i = 0; i < m->slen[keep]; i++) total += 1 + m->ndepth[m->pool[m->soff[keep] + i]];
    uint32_t *chains = malloc((total + 1) * sizeof *chains), nst = m->slen[keep];
    if (!chains) {
        fail(m, "grammar: out of memory");
        return GM_DEAD;
    }
    size_t at = 0;
    for (uint32_t i = 0; i < nst; i++) {
        uint32_t nd = m->pool[m->soff[keep] + i];
        chains[at++] = nd ? m->ndepth[nd] : 0;
        for (; nd; nd = m->npar[nd]) chains[at++] = m->npos[nd];
    }
    tables_free(m);
    m->generation++;
    if (tables_init(m)) {
        free(chains);
        fail(m, "grammar: out of memory");
        return GM_DEAD;
    }
    m->n_buf = 0;
    at = 0;
    for (uint32_t i = 0; i < nst; i++) {
        uint32_t d = chains[at++], nd = 0;
        for (uint32_t k = d; k-- > 0;) nd = node(m, chains[at + k], nd);
        at += d;
        push(m, nd);
    }
    free(chains);
    return finish(m);
}

int celer_grammar_match(const celer_grammar *g, const char *s, size_t n) {
    gm *m = gm_new(g);
    if (!m) return -1;
    uint32_t st = gm_start(m);
    for (size_t i = 0; i < n && st != GM_DEAD; i++) st = gm_compact(m, gm_step(m, st, (unsigned char)s[i], 0));
    int r = m->failed ? -1 : gm_accepting(m, st);
    gm_free(m);
    return r;
}
