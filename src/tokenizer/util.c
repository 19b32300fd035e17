/* tokenizer/util.c: byte buffers, UTF-8 helpers, hash maps and patterns for the
 * tokenizer. Maps use open addressing at <= 50% load; they only grow. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/limits.h"
#include "tokenizer/tok.h"

/* ---- buffers */
void tkb_reserve(tk_buf *b, size_t extra) {
    if (b->oom) return;
    if (b->n + extra + 1 <= b->cap) return;
    size_t nc = b->cap ? b->cap * 2 : 64;
    while (nc < b->n + extra + 1) nc *= 2;
    char *np = realloc(b->p, nc);
    if (!np) { b->oom = 1; return; }
    b->p = np;
    b->cap = nc;
}

void tkb_put(tk_buf *b, const void *s, size_t n) {
    if (b->n + n + 1 > b->cap) tkb_reserve(b, n);
    if (b->oom || !n) return;
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

void tkb_free(tk_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

char *tkb_cstr(tk_buf *b) {
    tkb_reserve(b, 1);
    if (b->oom) return NULL;
    b->p[b->n] = 0;
    return b->p;
}

/* ---- UTF-8 */
int utf8_enc(uint32_t cp, char *o) {
    if (cp < 0x80) { o[0] = (char)cp; return 1; }
    if (cp < 0x800) { o[0] = (char)(0xC0 | (cp >> 6)); o[1] = (char)(0x80 | (cp & 63)); return 2; }
    if (cp < 0x10000) {
        o[0] = (char)(0xE0 | (cp >> 12)); o[1] = (char)(0x80 | ((cp >> 6) & 63)); o[2] = (char)(0x80 | (cp & 63));
        return 3;
    }
    o[0] = (char)(0xF0 | (cp >> 18)); o[1] = (char)(0x80 | ((cp >> 12) & 63));
    o[2] = (char)(0x80 | ((cp >> 6) & 63)); o[3] = (char)(0x80 | (cp & 63));
    return 4;
}

/* Length of the valid sequence at s, or -k when its first k bytes are the maximal
 * invalid subpart (k >= 1). */
static int utf8_check(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    if (c < 0x80) return 1;
    int need;
    unsigned lo = 0x80, hi = 0xBF;
    if (c >= 0xC2 && c <= 0xDF) need = 1;
    else if (c == 0xE0) { need = 2; lo = 0xA0; }
    else if (c == 0xED) { need = 2; hi = 0x9F; }
    else if (c >= 0xE1 && c <= 0xEF) need = 2;
    else if (c == 0xF0) { need = 3; lo = 0x90; }
    else if (c == 0xF4) { need = 3; hi = 0x8F; }
    else if (c >= 0xF1 && c <= 0xF3) need = 3;
    else return -1;
    for (int k = 1; k <= need; k++) {
        if ((size_t)k >= n) return -k;
        unsigned d = s[k];
        if (d < lo || d > hi) return -k;
        lo = 0x80;
        hi = 0xBF;
    }
    return need + 1;
}

void utf8_lossy(tk_buf *b, const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0, run = 0;
    while (i < n) {
        if (u[i] < 0x80) { i++; continue; }
        int k = utf8_check(u + i, n - i);
        if (k > 0) { i += (size_t)k; continue; }
        tkb_put(b, s + run, i - run);
        tkb_put(b, "\xEF\xBF\xBD", 3);
        i += (size_t)(-k);
        run = i;
    }
    tkb_put(b, s + run, n - run);
}

int utf8_valid(const char *s, size_t n) {
    const unsigned char *u = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        if (u[i] < 0x80) { i++; continue; }
        int k = utf8_check(u + i, n - i);
        if (k < 0) return 0;
        i += (size_t)k;
    }
    return 1;
}

int tk_is_space(uint32_t c) {
    return (c >= 9 && c <= 13) || c == 32 || c == 0x85 || c == 0xA0 || c == 0x1680 || (c >= 0x2000 && c <= 0x200A) ||
           c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F || c == 0x3000;
}

/* ---- hashing */
uint64_t tk_hash(const char *s, size_t n) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (n * 0xff51afd7ed558ccdull);
    while (n >= 8) {
        uint64_t w;
        memcpy(&w, s, 8);
        h = (h ^ w) * 0xff51afd7ed558ccdull;
        h ^= h >> 32;
        s += 8;
        n -= 8;
    }
    uint64_t w = 0;
    memcpy(&w, s, n);
    h = (h ^ w) * 0xc4ceb9fe1a85ec53ull;
    h ^= h >> 29;
    h *= 0x9E3779B97F4A7C15ull;
    return h ^ (h >> 32);
}

/* ---- string map */
int tk_strmap_init(tk_strmap *m, uint32_t expect) {
    memset(m, 0, sizeof *m);
    uint32_t cap = 16;
    while (cap < expect * 2) cap *= 2;
    m->slot = calloc(cap, sizeof *m->slot);
    m->cap_e = expect > 16 ? expect : 16;
    m->koff = malloc(m->cap_e * sizeof *m->koff);
    m->val = malloc(m->cap_e * sizeof *m->val);
    m->pool_cap = (size_t)m->cap_e * 8;
    m->pool = malloc(m->pool_cap);
    if (!m->slot || !m->koff || !m->val || !m->pool) {
        tk_strmap_free(m);
        return err_set("out of memory for a token map");
    }
    m->mask = cap - 1;
    return 0;
}

static inline int strmap_eq(const tk_strmap *m, uint32_t e, const char *k, size_t n) {
    uint64_t ko = m->koff[e];
    return (ko & 0xFFFFFF) == n && memcmp(m->pool + (ko >> 24), k, n) == 0;
}

int32_t tk_strmap_get_h(const tk_strmap *m, const char *k, size_t n, uint64_t h) {
    if (!m->slot) return -1;
    uint32_t i = (uint32_t)h & m->mask, tag = (uint32_t)(h >> 32);
    for (;;) {
        uint64_t s = m->slot[i];
        if (!s) return -1;
        if ((uint32_t)(s >> 32) == tag && strmap_eq(m, (uint32_t)s - 1, k, n)) return m->val[(uint32_t)s - 1];
        i = (i + 1) & m->mask;
    }
}

int32_t tk_strmap_get(const tk_strmap *m, const char *k, size_t n) { return tk_strmap_get_h(m, k, n, tk_hash(k, n)); }

static int strmap_grow(tk_strmap *m) {
    uint32_t cap = (m->mask + 1) * 2;
    uint64_t *ns = calloc(cap, sizeof *ns);
    if (!ns) return -1;
    for (uint32_t e = 0; e < m->n; e++) {
        uint64_t ko = m->koff[e];
        uint64_t h = tk_hash(m->pool + (ko >> 24), ko & 0xFFFFFF);
        uint32_t i = (uint32_t)h & (cap - 1);
        while (ns[i]) i = (i + 1) & (cap - 1);
        ns[i] = (h >> 32) << 32 | (e + 1);
    }
    free(m->slot);
    m->slot = ns;
    m->mask = cap - 1;
    return 0;
}

int tk_strmap_put(tk_strmap *m, const char *k, size_t n, int32_t v) { return tk_strmap_put_h(m, k, n, v, tk_hash(k, n)); }

int tk_strmap_put_h(tk_strmap *m, const char *k, size_t n, int32_t v, uint64_t h) {
    if (n > CELER_MAX_TOKEN_BYTES) return err_set("token of %zu bytes exceeds the %d-byte limit", n, CELER_MAX_TOKEN_BYTES);
    uint32_t i = (uint32_t)h & m->mask, tag = (uint32_t)(h >> 32);
    for (;;) {
        uint64_t s = m->slot[i];
        if (!s) break;
        if ((uint32_t)(s >> 32) == tag && strmap_eq(m, (uint32_t)s - 1, k, n)) { m->val[(uint32_t)s - 1] = v; return 0; }
        i = (i + 1) & m->mask;
    }
    if (m->n == m->cap_e) {
        uint32_t nc = m->cap_e * 2;
        uint64_t *nk = realloc(m->koff, nc * sizeof *nk);
        if (!nk) return err_set("out of memory for a token map");
        m->koff = nk;
        int32_t *nv = realloc(m->val, nc * sizeof *nv);
        if (!nv) return err_set("out of memory for a token map");
        m->val = nv;
        m->cap_e = nc;
    }
    if (m->pool_n + n + 1 > m->pool_cap) {
        size_t nc = m->pool_cap * 2;
        while (nc < m->pool_n + n + 1) nc *= 2;
        char *np = realloc(m->pool, nc);
        if (!np) return err_set("out of memory for a token map");
        m->pool = np;
        m->pool_cap = nc;
    }
    if (m->pool_n >= (1ull << 40)) return err_set("token map too large");
    memcpy(m->pool + m->pool_n, k, n);
    m->pool[m->pool_n + n] = 0;
    uint32_t e = m->n++;
    m->koff[e] = ((uint64_t)m->pool_n << 24) | n;
    m->val[e] = v;
    m->pool_n += n + 1;
    m->slot[i] = (uint64_t)tag << 32 | (e + 1);
    if (m->n * 2 > m->mask + 1 && strmap_grow(m)) return err_set("out of memory for a token map");
    return 0;
}

void tk_strmap_free(tk_strmap *m) {
    free(m->pool);
    free(m->koff);
    free(m->val);
    free(m->slot);
    memset(m, 0, sizeof *m);
}

/* ---- u64 map */
int tk_u64map_init(tk_u64map *m, uint32_t expect) {
    uint32_t cap = 16;
    while (cap < expect * 2) cap *= 2;
    m->kv = malloc(2 * (size_t)cap * sizeof *m->kv);
    m->n = 0;
    m->mask = cap - 1;
    if (!m->kv) return err_set("out of memory for a map");
    for (uint32_t i = 0; i < cap; i++) m->kv[2 * i] = ~0ull;
    return 0;
}

static int u64map_grow(tk_u64map *m) {
    uint32_t cap = (m->mask + 1) * 2;
    tk_u64map nm = {NULL, 0, cap - 1};
    nm.kv = malloc(2 * (size_t)cap * sizeof *nm.kv);
    if (!nm.kv) return -1;
    for (uint32_t i = 0; i < cap; i++) nm.kv[2 * i] = ~0ull;
    for (uint32_t i = 0; i <= m->mask; i++) {
        uint64_t k = m->kv[2 * i];
        if (k == ~0ull) continue;
        uint32_t j = tk_u64map_slot(&nm, k);
        while (nm.kv[2 * j] != ~0ull) j = (j + 1) & nm.mask;
        nm.kv[2 * j] = k;
        nm.kv[2 * j + 1] = m->kv[2 * i + 1];
    }
    free(m->kv);
    m->kv = nm.kv;
    m->mask = nm.mask;
    return 0;
}

int tk_u64map_put(tk_u64map *m, uint64_t k, uint64_t v) {
    uint32_t i = tk_u64map_slot(m, k);
    while (m->kv[2 * i] != ~0ull && m->kv[2 * i] != k) i = (i + 1) & m->mask;
    if (m->kv[2 * i] == k) { m->kv[2 * i + 1] = v; return 0; }
    m->kv[2 * i] = k;
    m->kv[2 * i + 1] = v;
    if (++m->n * 2 > m->mask + 1 && u64map_grow(m)) return err_set("out of memory for a map");
    return 0;
}

void tk_u64map_free(tk_u64map *m) {
    free(m->kv);
    memset(m, 0, sizeof *m);
}

/* ---- patterns
 * Hostile regexes are bounded two ways. Within one pcre2_match call the match, depth and
 * heap limits of src/base/limits.h stop exponential backtracking (the JIT honours the
 * match limit; it ignores the depth and heap limits and stops at its own 32 KiB stack
 * instead, with PCRE2_ERROR_JIT_STACKLIMIT). Across calls they cannot help: /a*c|./ on
 * "aaaa..." does one cheap linear scan per call and one call per character, so the
 * whole split is quadratic while every call stays far inside any per-call limit. So
 * each call first sees only a window of the subject (WIN0 bytes past its start) under
 * PCRE2_PARTIAL_HARD, which answers "partial" whenever more subject could change the
 * result; only then is the window doubled and the call repeated. The bytes of those
 * repeated windows are the rescanning a split pays for, and they are bounded by
 * CELER_MAX_REGEX_SCAN per byte of the piece: a real tokenizer's long match (a 1 MB run
 * of letters) costs about twice its length once, while /a*c|./ costs the rest of the
 * piece at every character and fails within a few characters. Results are exactly
 * those of matching the whole subject: a complete match inside the window is the match,
 * and NOMATCH means no match starts before the window's end. */

#define WIN0 256

int tk_pattern_compile_regex(tk_pattern *p, const char *re, size_t n, const char *where) {
    int ec;
    PCRE2_SIZE eo;
    int show = (int)(n > 80 ? 80 : n);
    size_t ln = strlen(where) + (size_t)show + 32;
    if (!(p->label = malloc(ln))) return err_set("out of memory");
    snprintf(p->label, ln, "%s: regex /%.*s%s/", where, show, re, n > 80 ? "..." : "");
    p->re = pcre2_compile((PCRE2_SPTR)re, n, PCRE2_UTF | PCRE2_UCP, &ec, &eo, NULL);
    if (!p->re) {
        PCRE2_UCHAR msg[256];
        pcre2_get_error_message(ec, msg, sizeof msg);
        return err_set("%s: regex /%.*s/ does not compile at offset %zu: %s", where, (int)(n > 200 ? 200 : n), re,
                       (size_t)eo, (const char *)msg);
    }
    if (!(p->mc = pcre2_match_context_create(NULL))) return err_set("out of memory");
    pcre2_set_match_limit(p->mc, CELER_REGEX_MATCH_LIMIT);
    pcre2_set_depth_limit(p->mc, CELER_REGEX_DEPTH_LIMIT);
    pcre2_set_heap_limit(p->mc, CELER_REGEX_HEAP_LIMIT);
    /* best effort: interpreted otherwise (same results, same limits but the JIT's) */
    pcre2_jit_compile(p->re, PCRE2_JIT_COMPLETE | PCRE2_JIT_PARTIAL_HARD);
    return 0;
}

int tk_pattern_parse(tk_pattern *p, const tj_val *v, const char *where) {
    memset(p, 0, sizeof *p);
    const tj_val *s = tj_get(v, "String"), *r = tj_get(v, "Regex");
    if (s && s->type == TJ_STR) {
        p->lit = malloc(s->n + 1);
        if (!p->lit) return err_set("out of memory");
        memcpy(p->lit, s->u.s, s->n + 1);
        p->lit_n = s->n;
        return 0;
    }
    if (r && r->type == TJ_STR) return tk_pattern_compile_regex(p, r->u.s, r->n, where);
    return err_set("%s: pattern must be {\"String\": ...} or {\"Regex\": ...}", where);
}

void tk_pattern_free(tk_pattern *p) {
    free(p->lit);
    free(p->label);
    if (p->re) pcre2_code_free(p->re);
    pcre2_match_context_free(p->mc);
    memset(p, 0, sizeof *p);
}

static int push_range(size_t **out, size_t *n, size_t *cap, size_t a, size_t b) {
    if (*n + 2 > *cap) {
        size_t nc = *cap ? *cap * 2 : 64;
        size_t *no = realloc(*out, nc * sizeof *no);
        if (!no) return -1;
        *out = no;
        *cap = nc;
    }
    (*out)[(*n)++] = a;
    (*out)[(*n)++] = b;
    return 0;
}

/* Window end for a call starting at i with window w: never inside a UTF-8 sequence. */
static size_t win_end(const char *s, size_t n, size_t i, size_t w) {
    if (w >= n - i) return n;
    size_t e = i + w;
    while (e < n && ((unsigned char)s[e] & 0xC0) == 0x80) e++;
    return e;
}

long tk_pattern_find(const tk_pattern *p, const char *s, size_t n, size_t **out) {
    size_t cnt = 0, cap = 0;
    *out = NULL;
    if (!p->re) {
        if (p->lit_n == 0) return 0;
        size_t i = 0;
        while (i + p->lit_n <= n) {
            const char *hit = memmem(s + i, n - i, p->lit, p->lit_n);
            if (!hit) break;
            size_t a = (size_t)(hit - s);
            if (push_range(out, &cnt, &cap, a, a + p->lit_n)) goto oom;
            i = a + p->lit_n;
        }
        return (long)(cnt / 2);
    }
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    if (!md) goto oom;
    /* rescanned bytes allowed for this subject (see the comment above) */
    double budget = (double)CELER_MAX_REGEX_SCAN * (double)n + (double)CELER_MAX_REGEX_SCAN_SLACK, spent = 0;
    size_t i = 0;
    while (i <= n) {
        size_t w = WIN0, e;
        int rc;
        for (;;) {
            e = win_end(s, n, i, w);
            rc = pcre2_match(p->re, (PCRE2_SPTR)s, e, i, PCRE2_NO_UTF_CHECK | (e < n ? PCRE2_PARTIAL_HARD : 0), md, p->mc);
            if (rc != PCRE2_ERROR_PARTIAL) break;
            w *= 2;
            spent += (double)(win_end(s, n, i, w) - i);
            if (spent > budget) {
                pcre2_match_data_free(md);
                free(*out);
                *out = NULL;
                return err_set("%s: matching %zu bytes rescans more than %u bytes per byte (+%u), the limit "
                               "(CELER_MAX_REGEX_SCAN): the regex backtracks over the rest of its input at each "
                               "match, which takes time quadratic in the input",
                               p->label, n, (unsigned)CELER_MAX_REGEX_SCAN, (unsigned)CELER_MAX_REGEX_SCAN_SLACK);
            }
        }
        if (rc == PCRE2_ERROR_NOMATCH) {
            if (e >= n) break;
            i = e; /* no match starts before e */
            continue;
        }
        if (rc < 0) {
            pcre2_match_data_free(md);
            free(*out);
            *out = NULL;
            PCRE2_UCHAR msg[128];
            pcre2_get_error_message(rc, msg, sizeof msg);
            return err_set("%s: matching %zu bytes failed: %s", p->label, n, (const char *)msg);
        }
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        size_t a = ov[0], b = ov[1];
        if (push_range(out, &cnt, &cap, a, b)) { pcre2_match_data_free(md); goto oom; }
        if (b == a) {
            if (b >= n) break;
            i = b + (size_t)utf8_len((unsigned char)s[b]);
        } else i = b;
    }
    pcre2_match_data_free(md);
    return (long)(cnt / 2);
oom:
    free(*out);
    *out = NULL;
    return err_set("out of memory matching a pattern");
}

/* ---- pieces */
void tkp_add(tk_pieces *p, const char *s, size_t n, int first) {
    if (p->oom) return;
    if (p->n == p->cap) {
        size_t nc = p->cap ? p->cap * 2 : 16;
        tk_span *nv = realloc(p->v, nc * sizeof *nv);
        if (!nv) { p->oom = 1; return; }
        p->v = nv;
        p->cap = nc;
    }
    size_t off = p->text.n;
    tkb_put(&p->text, s, n);
    if (p->text.oom) { p->oom = 1; return; }
    p->v[p->n++] = (tk_span){off, n, first};
}

void tkp_clear(tk_pieces *p) {
    p->n = 0;
    p->text.n = 0;
}

void tkp_free(tk_pieces *p) {
    tkb_free(&p->text);
    free(p->v);
    memset(p, 0, sizeof *p);
}
