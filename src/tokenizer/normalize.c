/* tokenizer/normalize.c: tokenizers' normalizers (NFC, NFD, NFKC, NFKD, Lowercase,
 * Strip, StripAccents, Replace, Prepend, Sequence) over UTF-8 strings. Unicode data comes
 * from utf8proc. Alignment tracking is not kept: celer needs ids, not offsets. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/err.h"
#include "base/limits.h"
#include "tokenizer/tok.h"

static char *dup_n(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) { memcpy(p, s, n); p[n] = 0; }
    return p;
}

/* jpath: where v sits in tokenizer.json ("normalizer", "normalizer.normalizers[2]") */
static tk_norm *norm_parse_at(const tj_val *v, const char *where, const char *jpath) {
    const tj_val *t = tj_get(v, "type");
    if (!t || t->type != TJ_STR) { err_set("%s: normalizer without a \"type\"", where); return NULL; }
    tk_norm *n = calloc(1, sizeof *n);
    if (!n) { err_set("out of memory"); return NULL; }
    const char *ty = t->u.s;
    size_t ln = strlen(where) + strlen(jpath) + (t->n > 40 ? 40 : t->n) + 8;
    if (!(n->label = malloc(ln))) { err_set("out of memory"); goto fail; }
    snprintf(n->label, ln, "%s: %s (%.40s)", where, jpath, ty);
    if (!strcmp(ty, "Sequence")) {
        n->kind = NZ_SEQ;
        const tj_val *a = tj_get(v, "normalizers");
        if (!a || a->type != TJ_ARR) { err_set("%s: Sequence normalizer without \"normalizers\"", where); goto fail; }
        n->kids = calloc(a->n ? a->n : 1, sizeof *n->kids);
        if (!n->kids) { err_set("out of memory"); goto fail; }
        for (uint32_t i = 0; i < a->n; i++) {
            char kp[512];
            snprintf(kp, sizeof kp, "%.400s.normalizers[%u]", jpath, i);
            if (!(n->kids[i] = norm_parse_at(&a->u.items[i], where, kp))) goto fail;
            n->n_kids++;
        }
    } else if (!strcmp(ty, "NFC")) n->kind = NZ_NFC;
    else if (!strcmp(ty, "NFD")) n->kind = NZ_NFD;
    else if (!strcmp(ty, "NFKC")) n->kind = NZ_NFKC;
    else if (!strcmp(ty, "NFKD")) n->kind = NZ_NFKD;
    else if (!strcmp(ty, "Lowercase")) n->kind = NZ_LOWER;
    else if (!strcmp(ty, "StripAccents")) n->kind = NZ_STRIP_ACCENTS;
    else if (!strcmp(ty, "Strip")) {
        n->kind = NZ_STRIP;
        const tj_val *l = tj_get(v, "strip_left"), *r = tj_get(v, "strip_right");
        n->left = !l || l->type == TJ_TRUE;
        n->right = !r || r->type == TJ_TRUE;
    } else if (!strcmp(ty, "Replace") || !strcmp(ty, "Prepend")) {
        const tj_val *c = tj_get(v, !strcmp(ty, "Replace") ? "content" : "prepend");
        if (!c || c->type != TJ_STR) { err_set("%s: %s normalizer without its string", where, ty); goto fail; }
        if (!(n->content = dup_n(c->u.s, c->n))) { err_set("out of memory"); goto fail; }
        n->content_n = c->n;
        if (ty[0] == 'R') {
            n->kind = NZ_REPLACE;
            const tj_val *p = tj_get(v, "pattern");
            if (!p || tk_pattern_parse(&n->pat, p, where)) {
                if (!p) err_set("%s: Replace normalizer without \"pattern\"", where);
                goto fail;
            }
        } else n->kind = NZ_PREPEND;
    } else {
        err_set("%s: unsupported normalizer type \"%s\" (celer supports NFC, NFD, NFKC, NFKD, Lowercase, "
                "Strip, StripAccents, Replace, Prepend, Sequence)", where, ty);
        goto fail;
    }
    return n;
fail:
    tk_norm_free(n);
    return NULL;
}

tk_norm *tk_norm_parse(const tj_val *v, const char *where) { return norm_parse_at(v, where, "normalizer"); }

void tk_norm_free(tk_norm *n) {
    if (!n) return;
    free(n->label);
    for (int i = 0; i < n->n_kids; i++) tk_norm_free(n->kids[i]);
    free(n->kids);
    tk_pattern_free(&n->pat);
    free(n->content);
    free(n);
}

/* 1 when every code point of s is below lim: text that normalization leaves as is
 * (below U+0300 nothing composes or changes under NFC; below U+00C0 nothing decomposes;
 * below U+00A0 nothing has a compatibility mapping). */
static int all_below(const char *s, size_t len, uint32_t lim) {
    for (size_t i = 0; i < len;) {
        unsigned char c = (unsigned char)s[i];
        if (c < 0x80) { i++; continue; }
        uint32_t cp;
        i += (size_t)utf8_dec((const unsigned char *)s + i, len - i, &cp);
        if (cp >= lim) return 0;
    }
    return 1;
}

static int norm_utf8proc(const char *s, size_t len, tk_buf *out, utf8proc_option_t opt) {
    uint32_t lim = (opt & UTF8PROC_COMPAT) ? 0xA0 : (opt & UTF8PROC_COMPOSE) ? 0x300 : 0xC0;
    out->n = 0;
    /* An ASCII character is a starter that never composes with what precedes it, so
     * normalization works run by run: each run is the non-ASCII characters between
     * ASCII ones plus the ASCII character before them (a base that marks may compose
     * with); runs below lim are already normal. */
    size_t i = 0;
    while (i < len) {
        size_t a = i;
        while (i < len && (unsigned char)s[i] < 0x80) i++;
        /* the ASCII character before a non-ASCII run may be the base a mark composes with */
        size_t keep = i < len && i > a ? i - 1 : i;
        tkb_put(out, s + a, keep - a);
        a = keep;
        while (i < len && (unsigned char)s[i] >= 0x80) i++;
        if (i == a) continue;
        /* the run may end in the middle of nothing: UTF-8 sequences have no ASCII bytes */
        if (all_below(s + a, i - a, lim)) {
            tkb_put(out, s + a, i - a);
            continue;
        }
        utf8proc_uint8_t *r = NULL;
        utf8proc_ssize_t k = utf8proc_map((const utf8proc_uint8_t *)s + a, (utf8proc_ssize_t)(i - a), &r, opt | UTF8PROC_STABLE);
        if (k < 0) return err_set("unicode normalization failed: %s", utf8proc_errmsg(k));
        tkb_put(out, r, (size_t)k);
        free(r);
    }
    return 0;
}

/* The most bytes a normalizer chain may make of in_len input bytes. Real
 * normalizers stay far below: NFKD's largest expansion (U+FDFA) is 3 -> 33 bytes, a
 * Metaspace-style Replace of " " by "\u2581" triples spaces, Prepend adds a few bytes. */
static size_t norm_cap(size_t in_len) {
    size_t g = (size_t)CELER_MAX_NORM_GROWTH;
    return in_len > (SIZE_MAX - CELER_MAX_NORM_SLACK) / g ? SIZE_MAX : in_len * g + CELER_MAX_NORM_SLACK;
}

static int grew_too_much(const tk_norm *n, size_t in_len) {
    return err_set("%s: normalizing %zu bytes of text makes more than %zu bytes (the limit is %u times the input "
                   "+ %u bytes, CELER_MAX_NORM_GROWTH)",
                   n->label, in_len, norm_cap(in_len), (unsigned)CELER_MAX_NORM_GROWTH, (unsigned)CELER_MAX_NORM_SLACK);
}

/* One step: s -> out. cap: the most bytes out may hold (checked before growing it). */
static int norm_one(const tk_norm *n, const char *s, size_t len, tk_buf *out, size_t cap) {
    out->n = 0;
    switch (n->kind) {
    case NZ_SEQ: return err_set("internal: nested sequence");
    case NZ_NFC: return norm_utf8proc(s, len, out, UTF8PROC_COMPOSE);
    case NZ_NFD: return norm_utf8proc(s, len, out, UTF8PROC_DECOMPOSE);
    case NZ_NFKC: return norm_utf8proc(s, len, out, UTF8PROC_COMPOSE | UTF8PROC_COMPAT);
    case NZ_NFKD: return norm_utf8proc(s, len, out, UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT);
    case NZ_LOWER:
    case NZ_STRIP_ACCENTS: {
        for (size_t i = 0; i < len;) {
            uint32_t cp;
            i += (size_t)utf8_dec((const unsigned char *)s + i, len - i, &cp);
            if (n->kind == NZ_LOWER) cp = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
            else if (utf8proc_category((utf8proc_int32_t)cp) == UTF8PROC_CATEGORY_MN) continue;
            char e[4];
            tkb_put(out, e, (size_t)utf8_enc(cp, e));
        }
        return 0;
    }
    case NZ_STRIP: {
        size_t a = 0, b = len;
        while (n->left && a < b) {
            uint32_t cp;
            int k = utf8_dec((const unsigned char *)s + a, b - a, &cp);
            if (!tk_is_space(cp)) break;
            a += (size_t)k;
        }
        while (n->right && b > a) {
            size_t q = b - 1;
            while (q > a && ((unsigned char)s[q] & 0xC0) == 0x80) q--;
            uint32_t cp;
            utf8_dec((const unsigned char *)s + q, b - q, &cp);
            if (!tk_is_space(cp)) break;
            b = q;
        }
        tkb_put(out, s + a, b - a);
        return 0;
    }
    case NZ_PREPEND:
        if (len && n->content_n > cap - (len < cap ? len : cap)) return -2;
        if (len) tkb_put(out, n->content, n->content_n);
        tkb_put(out, s, len);
        return 0;
    case NZ_REPLACE: {
        size_t *m;
        long k = tk_pattern_find(&n->pat, s, len, &m);
        if (k < 0) return -1;
        /* the output size is known before writing it: refuse before allocating */
        size_t matched = 0;
        for (long i = 0; i < k; i++) matched += m[2 * i + 1] - m[2 * i];
        double total = (double)(len - matched) + (double)k * (double)n->content_n;
        if (total > (double)cap) { free(m); return -2; }
        size_t at = 0;
        for (long i = 0; i < k; i++) {
            tkb_put(out, s + at, m[2 * i] - at);
            tkb_put(out, n->content, n->content_n);
            at = m[2 * i + 1];
        }
        tkb_put(out, s + at, len - at);
        free(m);
        return 0;
    }
    }
    return 0;
}

/* cap bounds every intermediate result by the chain's original input (orig bytes), so
 * a Sequence of growing steps cannot multiply past it either. */
static int norm_apply_cap(const tk_norm *n, const char *s, size_t len, tk_buf *out, size_t orig, size_t cap) {
    out->n = 0;
    if (n->kind != NZ_SEQ) {
        int rc = norm_one(n, s, len, out, cap);
        if (rc == -2 || (!rc && out->n > cap)) return grew_too_much(n, orig);
        if (rc) return -1;
        return out->oom ? err_set("out of memory normalizing") : 0;
    }
    /* sequence: each step reads the previous step's output */
    tkb_put(out, s, len);
    for (int i = 0; i < n->n_kids; i++) {
        tk_buf t2 = {0};
        if (norm_apply_cap(n->kids[i], out->p ? out->p : "", out->n, &t2, orig, cap)) { tkb_free(&t2); return -1; }
        tkb_free(out);
        *out = t2;
    }
    return out->oom ? err_set("out of memory normalizing") : 0;
}

int tk_norm_apply(const tk_norm *n, const char *s, size_t len, tk_buf *out) {
    return norm_apply_cap(n, s, len, out, len, norm_cap(len));
}
