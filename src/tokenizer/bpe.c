/* tokenizer/bpe.c: the BPE model of tokenizers: vocab and merges from tokenizer.json
 * ("a b" strings or ["a", "b"] pairs), byte fallback, unk fusing, ignore_merges, and
 * word encoding by rank-ordered merging with a binary heap (O(n log n) per word,
 * lowest rank first, leftmost first among equal ranks, as tokenizers' Word::merge_all).
 * Invariant: merges maps (left id, right id) to (rank, merged id); every id in it is a
 * vocab id. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/limits.h"
#include "tokenizer/tok.h"

static char *dup_str(const tj_val *v) {
    if (!v || v->type != TJ_STR || v->n == 0) return NULL;
    char *p = malloc(v->n + 1);
    if (p) memcpy(p, v->u.s, v->n + 1);
    return p;
}

int tk_bpe_parse(tk_bpe *b, const tj_val *model, const char *where) {
    memset(b, 0, sizeof *b);
    b->unk_id = -1;
    const tj_val *t = tj_get(model, "type");
    if (t && !tj_is_str(t, "BPE")) {
        return err_set("%s: unsupported model type \"%s\" (celer supports BPE)", where,
                       t->type == TJ_STR ? t->u.s : "?");
    }
    const tj_val *vocab = tj_get(model, "vocab"), *merges = tj_get(model, "merges");
    if (!vocab || vocab->type != TJ_OBJ) return err_set("%s: model.vocab must be an object", where);
    if (merges && merges->type != TJ_ARR) return err_set("%s: model.merges must be an array", where);
    const tj_val *dr = tj_get(model, "dropout");
    if (dr && dr->type == TJ_NUM && dr->u.num > 0) return err_set("%s: BPE dropout is not supported", where);
    const tj_val *v;
    b->byte_fallback = (v = tj_get(model, "byte_fallback")) && v->type == TJ_TRUE;
    b->fuse_unk = (v = tj_get(model, "fuse_unk")) && v->type == TJ_TRUE;
    b->ignore_merges = (v = tj_get(model, "ignore_merges")) && v->type == TJ_TRUE;
    b->cont_prefix = dup_str(tj_get(model, "continuing_subword_prefix"));
    b->eow_suffix = dup_str(tj_get(model, "end_of_word_suffix"));
    if (tk_strmap_init(&b->vocab, vocab->n)) return -1;
    uint64_t hs[64];
    for (uint32_t i0 = 0; i0 < vocab->n; i0 += 64) {
        uint32_t nb = vocab->n - i0 < 64 ? vocab->n - i0 : 64;
        for (uint32_t j = 0; j < nb; j++) {
            const tj_val *k = &vocab->u.items[2 * (i0 + j)];
            hs[j] = tk_hash(k->u.s, k->n);
            tk_strmap_prefetch(&b->vocab, hs[j]);
        }
        for (uint32_t j = 0; j < nb; j++) {
            const tj_val *k = &vocab->u.items[2 * (i0 + j)], *id = k + 1;
            if (id->type != TJ_NUM || id->u.num < 0 || id->u.num > 2e9 || id->u.num != (double)(int32_t)id->u.num)
                return err_set("%s: model.vocab[\"%.40s\"] is not a token id", where, k->u.s);
            if (tk_strmap_put_h(&b->vocab, k->u.s, k->n, (int32_t)id->u.num, hs[j])) return err_prefix("%s: model.vocab", where);
        }
    }
    for (int i = 0; i < 256; i++) {
        char name[8];
        snprintf(name, sizeof name, "<0x%02X>", i);
        b->byte_id[i] = tk_strmap_get(&b->vocab, name, 6);
    }
    /* which characters may be joined to a following "▁" by a merge */
    b->sp_split = 1;
    for (uint32_t e = 0; e < b->vocab.n && b->sp_split; e++) {
        const char *t = b->vocab.pool + (b->vocab.koff[e] >> 24);
        size_t tn = b->vocab.koff[e] & 0xFFFFFF;
        for (size_t i = 1; i + 3 <= tn; i++) {
            if (memcmp(t + i, "\xE2\x96\x81", 3)) continue;
            size_t q = i - 1;
            while (q > 0 && ((unsigned char)t[q] & 0xC0) == 0x80) q--;
            uint32_t cp;
            utf8_dec((const unsigned char *)t + q, i - q, &cp);
            if (cp == 0x2581) continue;
            int k;
            for (k = 0; k < b->n_sp_join && b->sp_join[k] != cp; k++) {}
            if (k < b->n_sp_join) continue;
            if (b->n_sp_join == 32) { b->sp_split = 0; break; }
            b->sp_join[b->n_sp_join++] = cp;
        }
    }
    const tj_val *unk = tj_get(model, "unk_token");
    if (unk && unk->type == TJ_STR) {
        b->unk_id = tk_strmap_get(&b->vocab, unk->u.s, unk->n);
        if (b->unk_id < 0) return err_set("%s: model.unk_token \"%s\" is not in the vocab", where, unk->u.s);
    }
    uint32_t nm = merges ? merges->n : 0;
    if (tk_u64map_init(&b->merges, nm)) return -1;
    /* Merges resolve in blocks: hash every string of a block and prefetch its slots
     * first, then look them up; the vocab table is far larger than the caches. */
    enum { BLK = 64 };
    struct { const char *a, *c; size_t an, cn; uint64_t ha, hc, hm; size_t moff; } q[BLK];
    char *buf = malloc(BLK * 1024);
    if (!buf) return err_set("out of memory");
    for (uint32_t r0 = 0; r0 < nm; r0 += BLK) {
        uint32_t nb = nm - r0 < BLK ? nm - r0 : BLK;
        size_t boff = 0;
        for (uint32_t j = 0; j < nb; j++) {
            uint32_t r = r0 + j;
            const tj_val *m = &merges->u.items[r];
            if (m->type == TJ_STR) {
                /* "a b": split at the first space after the first byte */
                const char *sp = m->n > 1 ? memchr(m->u.s + 1, ' ', m->n - 1) : NULL;
                if (!sp) { free(buf); return err_set("%s: model.merges[%u] \"%.40s\" is not \"a b\"", where, r, m->u.s); }
                q[j].a = m->u.s;
                q[j].an = (size_t)(sp - m->u.s);
                q[j].c = sp + 1;
                q[j].cn = m->n - q[j].an - 1;
            } else if (m->type == TJ_ARR && m->n == 2 && m->u.items[0].type == TJ_STR && m->u.items[1].type == TJ_STR) {
                q[j].a = m->u.items[0].u.s;
                q[j].an = m->u.items[0].n;
                q[j].c = m->u.items[1].u.s;
                q[j].cn = m->u.items[1].n;
            } else {
                free(buf);
                return err_set("%s: model.merges[%u] is neither \"a b\" nor [\"a\", \"b\"]", where, r);
            }
            if (q[j].an + q[j].cn > CELER_MAX_MERGE_BYTES) {
                free(buf);
                return err_set("%s: model.merges[%u] has %zu bytes, over the %d-byte limit", where, r, q[j].an + q[j].cn,
                               CELER_MAX_MERGE_BYTES);
            }
            memcpy(buf + boff, q[j].a, q[j].an);
            memcpy(buf + boff + q[j].an, q[j].c, q[j].cn);
            q[j].moff = boff;
            boff += q[j].an + q[j].cn;
            q[j].ha = tk_hash(q[j].a, q[j].an);
            q[j].hc = tk_hash(q[j].c, q[j].cn);
            q[j].hm = tk_hash(buf + q[j].moff, q[j].an + q[j].cn);
            tk_strmap_prefetch(&b->vocab, q[j].ha);
            tk_strmap_prefetch(&b->vocab, q[j].hc);
            tk_strmap_prefetch(&b->vocab, q[j].hm);
        }
        uint64_t keys[BLK], vals[BLK];
        for (uint32_t j = 0; j < nb; j++) {
            uint32_t r = r0 + j;
            int32_t ia = tk_strmap_get_h(&b->vocab, q[j].a, q[j].an, q[j].ha);
            int32_t ic = tk_strmap_get_h(&b->vocab, q[j].c, q[j].cn, q[j].hc);
            if (ia < 0 || ic < 0) {
                free(buf);
                return err_set("%s: model.merges[%u]: \"%.*s\" is not in the vocab", where, r,
                               (int)(ia < 0 ? q[j].an : q[j].cn), ia < 0 ? q[j].a : q[j].c);
            }
            size_t mn = q[j].an + q[j].cn;
            int32_t im = tk_strmap_get_h(&b->vocab, buf + q[j].moff, mn, q[j].hm);
            if (im < 0) {
                err_set("%s: model.merges[%u]: merged token \"%.*s\" is not in the vocab", where, r, (int)mn, buf + q[j].moff);
                free(buf);
                return -1;
            }
            keys[j] = (uint64_t)(uint32_t)ia << 32 | (uint32_t)ic;
            vals[j] = (uint64_t)r << 32 | (uint32_t)im;
            tk_u64map_prefetch(&b->merges, keys[j]);
        }
        /* a repeated pair keeps its last rank, as tokenizers' HashMap collect does */
        for (uint32_t j = 0; j < nb; j++)
            if (tk_u64map_put(&b->merges, keys[j], vals[j])) { free(buf); return -1; }
    }
    free(buf);
    return 0;
}

void tk_bpe_free(tk_bpe *b) {
    tk_strmap_free(&b->vocab);
    tk_u64map_free(&b->merges);
    free(b->cont_prefix);
    free(b->eow_suffix);
    memset(b, 0, sizeof *b);
}

/* ---- word encoding */
#define CACHE_MAX_WORD 64
#define CACHE_MAX_ENTRIES 200000

/* A candidate merge: the pair it was found for and what it makes. */
struct bpe_cand {
    uint64_t key;        /* rank << 32 | position of the left symbol */
    uint64_t pair;       /* left id << 32 | right id when pushed */
    uint32_t new_id;
};

struct tk_bpe_scratch {
    int32_t *sym;        /* [cap] symbol ids */
    int32_t *prev, *next;/* [cap] links, -1 at the ends */
    uint8_t *dead;       /* [cap] merged into its left neighbour */
    struct bpe_cand *heap; /* [hcap] candidate merges, lowest (rank, position) on top */
    size_t cap, hcap;
    tk_strmap cache;     /* word -> offset into cids: [count, ids...] */
    int32_t *cids;
    size_t cn, ccap;
    int cache_ok;
    tk_buf key;
};

tk_bpe_scratch *tk_bpe_scratch_new(void) {
    tk_bpe_scratch *s = calloc(1, sizeof *s);
    if (!s) err_set("out of memory");
    return s;
}

void tk_bpe_scratch_free(tk_bpe_scratch *s) {
    if (!s) return;
    free(s->sym);
    free(s->prev);
    free(s->next);
    free(s->dead);
    free(s->heap);
    if (s->cache_ok) tk_strmap_free(&s->cache);
    free(s->cids);
    tkb_free(&s->key);
    free(s);
}

static int scratch_fit(tk_bpe_scratch *s, size_t n) {
    if (n <= s->cap) return 0;
    size_t nc = s->cap ? s->cap : 64;
    while (nc < n) nc *= 2;
    int32_t *a = realloc(s->sym, nc * sizeof *a);
    if (a) s->sym = a;
    int32_t *p = realloc(s->prev, nc * sizeof *p);
    if (p) s->prev = p;
    int32_t *q = realloc(s->next, nc * sizeof *q);
    if (q) s->next = q;
    uint8_t *d = realloc(s->dead, nc);
    if (d) s->dead = d;
    struct bpe_cand *h = realloc(s->heap, 2 * nc * sizeof *h);
    if (h) s->heap = h;
    if (!a || !p || !q || !d || !h) return err_set("out of memory encoding a word of %zu bytes", n);
    s->cap = nc;
    s->hcap = 2 * nc;
    return 0;
}

static inline void heap_push(struct bpe_cand *h, size_t *n, uint64_t rank_new, uint32_t pos, uint64_t pair) {
    struct bpe_cand v = {(rank_new & 0xFFFFFFFF00000000ull) | pos, pair, (uint32_t)rank_new};
    size_t i = (*n)++;
    while (i) {
        size_t p = (i - 1) / 2;
        if (h[p].key <= v.key) break;
        h[i] = h[p];
        i = p;
    }
    h[i] = v;
}

static inline struct bpe_cand heap_pop(struct bpe_cand *h, size_t *n) {
    struct bpe_cand top = h[0], v = h[--*n];
    size_t i = 0, m = *n;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= m) break;
        if (c + 1 < m && h[c + 1].key < h[c].key) c++;
        if (v.key <= h[c].key) break;
        h[i] = h[c];
        i = c;
    }
    if (m) h[i] = v;
    return top;
}

static int push_ids(int32_t **ids, size_t *n, size_t *cap, const int32_t *src, size_t k) {
    if (*n + k > *cap) {
        size_t nc = *cap ? *cap : 64;
        while (nc < *n + k) nc *= 2;
        int32_t *ni = realloc(*ids, nc * sizeof *ni);
        if (!ni) return err_set("out of memory for token ids");
        *ids = ni;
        *cap = nc;
    }
    memcpy(*ids + *n, src, k * sizeof *src);
    *n += k;
    return 0;
}

/* Merges the symbols of one word; appends the resulting ids. */
static int bpe_merge(const tk_bpe *b, tk_bpe_scratch *s, size_t ns, int32_t **ids, size_t *nids, size_t *cap) {
    int32_t *sym = s->sym, *prev = s->prev, *next = s->next;
    uint8_t *dead = s->dead;
    struct bpe_cand *h = s->heap;
    uint64_t v;
    size_t hn = 0;
    for (size_t i = 0; i < ns; i++) {
        prev[i] = (int32_t)i - 1;
        next[i] = i + 1 < ns ? (int32_t)i + 1 : -1;
        dead[i] = 0;
    }
#define PAIR(x, y) ((uint64_t)(uint32_t)(x) << 32 | (uint32_t)(y))
    for (size_t i = 0; i + 1 < ns && i < 8; i++) tk_u64map_prefetch(&b->merges, PAIR(sym[i], sym[i + 1]));
    for (size_t i = 0; i + 1 < ns; i++) {
        if (i + 9 < ns) tk_u64map_prefetch(&b->merges, PAIR(sym[i + 8], sym[i + 9]));
        uint64_t pr = PAIR(sym[i], sym[i + 1]);
        if (tk_u64map_get(&b->merges, pr, &v)) heap_push(h, &hn, v, (uint32_t)i, pr);
    }
    while (hn) {
        struct bpe_cand top = heap_pop(h, &hn);
        uint32_t pos = (uint32_t)top.key;
        if (dead[pos] || next[pos] < 0) continue;
        int32_t r = next[pos];
        uint64_t cur = PAIR(sym[pos], sym[r]);
        /* tokenizers applies a popped merge when the pair now there makes the same
         * token; an unchanged pair needs no second look-up */
        if (cur != top.pair && (!tk_u64map_get(&b->merges, cur, &v) || (uint32_t)v != top.new_id)) continue;
        sym[pos] = (int32_t)top.new_id;
        dead[r] = 1;
        next[pos] = next[r];
        if (next[r] >= 0) prev[next[r]] = (int32_t)pos;
        if (hn + 2 > s->hcap) return err_set("internal: BPE heap overflow");
        if (prev[pos] >= 0) {
            uint64_t pr = PAIR(sym[prev[pos]], sym[pos]);
            if (tk_u64map_get(&b->merges, pr, &v)) heap_push(h, &hn, v, (uint32_t)prev[pos], pr);
        }
        if (next[pos] >= 0) {
            uint64_t pr = PAIR(sym[pos], sym[next[pos]]);
            if (tk_u64map_get(&b->merges, pr, &v)) heap_push(h, &hn, v, pos, pr);
        }
    }
#undef PAIR
    /* collect survivors in order (symbol 0 never dies) */
    size_t k = 0;
    for (int32_t i = 0; i >= 0; i = next[i]) sym[k++] = sym[i];
    return push_ids(ids, nids, cap, sym, k);
}

static int bpe_word_uncached(const tk_bpe *b, tk_bpe_scratch *s, const char *w, size_t n, int32_t **ids, size_t *nids,
                             size_t *cap) {
    if (b->ignore_merges) {
        int32_t id = tk_strmap_get(&b->vocab, w, n);
        if (id >= 0) return push_ids(ids, nids, cap, &id, 1);
    }
    if (scratch_fit(s, n + 1)) return -1;
    size_t ns = 0;
    int32_t pending_unk = -1;
    size_t pre_n = b->cont_prefix ? strlen(b->cont_prefix) : 0, suf_n = b->eow_suffix ? strlen(b->eow_suffix) : 0;
    for (size_t i = 0; i < n;) {
        size_t l = (size_t)utf8_len((unsigned char)w[i]);
        if (i + l > n) l = n - i;
        int last = i + l >= n;
        int32_t id;
        if ((i > 0 && pre_n) || (last && suf_n)) {
            s->key.n = 0;
            if (i > 0) tkb_put(&s->key, b->cont_prefix, pre_n);
            tkb_put(&s->key, w + i, l);
            if (last) tkb_put(&s->key, b->eow_suffix, suf_n);
            if (s->key.oom) return err_set("out of memory");
            id = tk_strmap_get(&b->vocab, s->key.p, s->key.n);
        } else id = tk_strmap_get(&b->vocab, w + i, l);
        if (id >= 0) {
            if (pending_unk >= 0) { s->sym[ns++] = pending_unk; pending_unk = -1; }
            s->sym[ns++] = id;
        } else {
            int done = 0;
            if (b->byte_fallback) {
                size_t j;
                for (j = 0; j < l && b->byte_id[(unsigned char)w[i + j]] >= 0; j++) {}
                if (j == l) {
                    for (j = 0; j < l; j++) s->sym[ns++] = b->byte_id[(unsigned char)w[i + j]];
                    done = 1;
                }
            }
            if (!done && b->unk_id >= 0) {
                if (b->fuse_unk) pending_unk = b->unk_id;
                else s->sym[ns++] = b->unk_id;
            }
        }
        i += l;
    }
    if (pending_unk >= 0) s->sym[ns++] = pending_unk;
    if (ns == 0) return 0;
    return bpe_merge(b, s, ns, ids, nids, cap);
}

static int bpe_word_cached(const tk_bpe *b, tk_bpe_scratch *s, const char *w, size_t n, int32_t **ids, size_t *nids,
                           size_t *cap);

int tk_bpe_word(const tk_bpe *b, tk_bpe_scratch *s, const char *w, size_t n, int32_t **ids, size_t *nids, size_t *cap) {
    if (n <= CACHE_MAX_WORD || !b->sp_split || b->cont_prefix || b->eow_suffix)
        return bpe_word_cached(b, s, w, n, ids, nids, cap);
    /* split before each "▁" that no token joins to the character before it */
    size_t start = 0;
    uint32_t prev = 0x2581;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = utf8_dec((const unsigned char *)w + i, n - i, &cp);
        if (cp == 0x2581 && prev != 0x2581 && i > start) {
            int k;
            for (k = 0; k < b->n_sp_join && b->sp_join[k] != prev; k++) {}
            if (k == b->n_sp_join) {
                if (bpe_word_cached(b, s, w + start, i - start, ids, nids, cap)) return -1;
                start = i;
            }
        }
        prev = cp;
        i += (size_t)l;
    }
    return bpe_word_cached(b, s, w + start, n - start, ids, nids, cap);
}

static int bpe_word_cached(const tk_bpe *b, tk_bpe_scratch *s, const char *w, size_t n, int32_t **ids, size_t *nids,
                           size_t *cap) {
    if (n > CACHE_MAX_WORD) return bpe_word_uncached(b, s, w, n, ids, nids, cap);
    if (!s->cache_ok) {
        if (tk_strmap_init(&s->cache, 1024)) return -1;
        s->cache_ok = 1;
    }
    int32_t at = tk_strmap_get(&s->cache, w, n);
    if (at >= 0) return push_ids(ids, nids, cap, s->cids + at + 1, (size_t)s->cids[at]);
    size_t before = *nids;
    if (bpe_word_uncached(b, s, w, n, ids, nids, cap)) return -1;
    size_t k = *nids - before;
    if (s->cache.n < CACHE_MAX_ENTRIES && s->cn + k + 1 < INT32_MAX) {
        int32_t cnt = (int32_t)k;
        size_t off = s->cn;
        /* k may be 0 with *ids still NULL: no pointer arithmetic on it then */
        if (push_ids(&s->cids, &s->cn, &s->ccap, &cnt, 1) || (k && push_ids(&s->cids, &s->cn, &s->ccap, *ids + before, k)) ||
            tk_strmap_put(&s->cache, w, n, (int32_t)off))
            return -1;
    }
    return 0;
}
