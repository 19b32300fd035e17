/* tokenizer/pretokenize.c: tokenizers' pre-tokenizers (Split, ByteLevel, Metaspace,
 * Digits, Whitespace, WhitespaceSplit, Punctuation, Sequence). Each maps a list of
 * pieces to a finer list; empty pieces are dropped, as tokenizers drops them. */
#include <stdlib.h>
#include <string.h>
#include <utf8proc.h>

#include "base/err.h"
#include "tokenizer/tok.h"

/* GPT-2's byte -> printable character table: bytes that are printable Latin-1 map to
 * themselves, the other 68 to U+0100.. in byte order. */
static char byte_char_store[256][3];
const char *const tk_byte_char[256] = {
#define R(i) byte_char_store[i]
#define R8(i) R(i), R(i + 1), R(i + 2), R(i + 3), R(i + 4), R(i + 5), R(i + 6), R(i + 7)
#define R64(i) R8(i), R8(i + 8), R8(i + 16), R8(i + 24), R8(i + 32), R8(i + 40), R8(i + 48), R8(i + 56)
    R64(0), R64(64), R64(128), R64(192)
#undef R64
#undef R8
#undef R
};
static int16_t char_byte[512]; /* code point (< 512) -> byte, -1 */
static int byte_map_ready;

static int byte_is_direct(int b) { return (b >= 33 && b <= 126) || (b >= 161 && b <= 172) || (b >= 174 && b <= 255); }

void tk_byte_map_init(void) {
    if (__atomic_load_n(&byte_map_ready, __ATOMIC_ACQUIRE)) return;
    /* idempotent: concurrent initializers write the same bytes */
    int extra = 0;
    for (int i = 0; i < 512; i++) char_byte[i] = -1;
    for (int b = 0; b < 256; b++) {
        uint32_t cp = byte_is_direct(b) ? (uint32_t)b : (uint32_t)(256 + extra++);
        int k = utf8_enc(cp, byte_char_store[b]);
        byte_char_store[b][k] = 0;
        char_byte[cp] = (int16_t)b;
    }
    __atomic_store_n(&byte_map_ready, 1, __ATOMIC_RELEASE);
}

int tk_char_byte(uint32_t cp) { return cp < 512 ? char_byte[cp] : -1; }

static const char gpt2_re[] = "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+";

static int parse_behavior(const tj_val *v, split_behavior *b, const char *where) {
    if (!v || v->type != TJ_STR) return err_set("%s: Split without \"behavior\"", where);
    const char *s = v->u.s;
    if (!strcmp(s, "Removed")) *b = SB_REMOVED;
    else if (!strcmp(s, "Isolated")) *b = SB_ISOLATED;
    else if (!strcmp(s, "MergedWithPrevious")) *b = SB_MERGED_PREV;
    else if (!strcmp(s, "MergedWithNext")) *b = SB_MERGED_NEXT;
    else if (!strcmp(s, "Contiguous")) *b = SB_CONTIGUOUS;
    else return err_set("%s: unsupported split behavior \"%s\"", where, s);
    return 0;
}

static int jbool(const tj_val *o, const char *k, int def) {
    const tj_val *v = tj_get(o, k);
    if (!v || v->type == TJ_NULL) return def;
    return v->type == TJ_TRUE;
}

int tk_parse_prepend_scheme(const tj_val *v, prepend_scheme *ps, const char *where);
int tk_parse_prepend_scheme(const tj_val *v, prepend_scheme *ps, const char *where) {
    const tj_val *s = tj_get(v, "prepend_scheme");
    if (s && s->type == TJ_STR) {
        if (!strcmp(s->u.s, "always")) *ps = PS_ALWAYS;
        else if (!strcmp(s->u.s, "first")) *ps = PS_FIRST;
        else if (!strcmp(s->u.s, "never")) *ps = PS_NEVER;
        else return err_set("%s: unknown Metaspace prepend_scheme \"%s\"", where, s->u.s);
    } else {
        *ps = jbool(v, "add_prefix_space", 1) ? PS_ALWAYS : PS_NEVER;
    }
    return 0;
}

int tk_parse_replacement(const tj_val *v, char *repl, int *n, const char *where);
int tk_parse_replacement(const tj_val *v, char *repl, int *n, const char *where) {
    const tj_val *r = tj_get(v, "replacement");
    if (!r) { memcpy(repl, "\xE2\x96\x81", 4); *n = 3; return 0; }
    if (r->type != TJ_STR || r->n == 0 || r->n > 4 || utf8_len((unsigned char)r->u.s[0]) != (int)r->n)
        return err_set("%s: Metaspace replacement must be one character", where);
    memcpy(repl, r->u.s, r->n);
    repl[r->n] = 0;
    *n = (int)r->n;
    return 0;
}

tk_pre *tk_pre_parse(const tj_val *v, const char *where) {
    const tj_val *t = tj_get(v, "type");
    if (!t || t->type != TJ_STR) { err_set("%s: pre_tokenizer without a \"type\"", where); return NULL; }
    tk_pre *p = calloc(1, sizeof *p);
    if (!p) { err_set("out of memory"); return NULL; }
    const char *ty = t->u.s;
    if (!strcmp(ty, "Sequence")) {
        p->kind = PT_SEQ;
        const tj_val *a = tj_get(v, "pretokenizers");
        if (!a || a->type != TJ_ARR) { err_set("%s: Sequence pre_tokenizer without \"pretokenizers\"", where); goto fail; }
        p->kids = calloc(a->n ? a->n : 1, sizeof *p->kids);
        if (!p->kids) { err_set("out of memory"); goto fail; }
        for (uint32_t i = 0; i < a->n; i++) {
            if (!(p->kids[i] = tk_pre_parse(&a->u.items[i], where))) goto fail;
            p->n_kids++;
        }
    } else if (!strcmp(ty, "Split")) {
        p->kind = PT_SPLIT;
        const tj_val *pat = tj_get(v, "pattern");
        if (!pat) { err_set("%s: Split without \"pattern\"", where); goto fail; }
        if (tk_pattern_parse(&p->pat, pat, where) || parse_behavior(tj_get(v, "behavior"), &p->behavior, where)) goto fail;
        p->invert = jbool(v, "invert", 0);
    } else if (!strcmp(ty, "ByteLevel")) {
        p->kind = PT_BYTELEVEL;
        p->add_prefix_space = jbool(v, "add_prefix_space", 1);
        p->use_regex = jbool(v, "use_regex", 1);
        if (p->use_regex && tk_pattern_compile_regex(&p->pat, gpt2_re, sizeof gpt2_re - 1, where)) goto fail;
    } else if (!strcmp(ty, "Metaspace")) {
        p->kind = PT_METASPACE;
        if (tk_parse_replacement(v, p->repl, &p->repl_n, where) || tk_parse_prepend_scheme(v, &p->scheme, where)) goto fail;
        p->split = jbool(v, "split", 1);
    } else if (!strcmp(ty, "Digits")) {
        p->kind = PT_DIGITS;
        p->individual_digits = jbool(v, "individual_digits", 0);
    } else if (!strcmp(ty, "Whitespace")) {
        p->kind = PT_WHITESPACE;
        if (tk_pattern_compile_regex(&p->pat, "\\w+|[^\\w\\s]+", 13, where)) goto fail;
    } else if (!strcmp(ty, "WhitespaceSplit")) {
        p->kind = PT_WSSPLIT;
    } else if (!strcmp(ty, "Punctuation")) {
        p->kind = PT_PUNCT;
        const tj_val *b = tj_get(v, "behavior");
        p->behavior = SB_ISOLATED;
        if (b && parse_behavior(b, &p->behavior, where)) goto fail;
    } else {
        err_set("%s: unsupported pre_tokenizer type \"%s\" (celer supports Split, ByteLevel, Metaspace, Digits, "
                "Whitespace, WhitespaceSplit, Punctuation, Sequence)", where, ty);
        goto fail;
    }
    return p;
fail:
    tk_pre_free(p);
    return NULL;
}

void tk_pre_free(tk_pre *p) {
    if (!p) return;
    for (int i = 0; i < p->n_kids; i++) tk_pre_free(p->kids[i]);
    free(p->kids);
    tk_pattern_free(&p->pat);
    free(p);
}

/* Splits piece s[0..n) given the matches m (2k offsets, sorted, disjoint) into out,
 * following tokenizers' SplitDelimiterBehavior. */
static void split_apply(const char *s, size_t n, int first, const size_t *m, long k, int invert, split_behavior beh,
                        tk_pieces *out) {
    /* segments: alternating (a, b, is_match) covering [0, n) */
    size_t cap = (size_t)k * 2 + 2, ns = 0;
    size_t *seg = malloc(cap * 3 * sizeof *seg);
    if (!seg) { out->oom = 1; return; }
    size_t at = 0;
    for (long i = 0; i < k; i++) {
        if (m[2 * i] > at) { seg[3 * ns] = at; seg[3 * ns + 1] = m[2 * i]; seg[3 * ns + 2] = invert; ns++; }
        seg[3 * ns] = m[2 * i]; seg[3 * ns + 1] = m[2 * i + 1]; seg[3 * ns + 2] = !invert; ns++;
        at = m[2 * i + 1];
    }
    if (at < n) { seg[3 * ns] = at; seg[3 * ns + 1] = n; seg[3 * ns + 2] = invert; ns++; }
    /* fold into result ranges (in place: result count <= ns) */
    size_t nr = 0;
    switch (beh) {
    case SB_ISOLATED: nr = ns; break;
    case SB_REMOVED:
        for (size_t i = 0; i < ns; i++)
            if (!seg[3 * i + 2]) { seg[3 * nr] = seg[3 * i]; seg[3 * nr + 1] = seg[3 * i + 1]; nr++; }
        break;
    case SB_MERGED_PREV: {
        int prev = 0;
        for (size_t i = 0; i < ns; i++) {
            int im = (int)seg[3 * i + 2];
            if (im && !prev && nr) seg[3 * (nr - 1) + 1] = seg[3 * i + 1];
            else { seg[3 * nr] = seg[3 * i]; seg[3 * nr + 1] = seg[3 * i + 1]; nr++; }
            prev = im;
        }
        break;
    }
    case SB_MERGED_NEXT: {
        /* walk backwards; matches merge with the following piece */
        int prev = 0;
        size_t w = ns; /* write from the end */
        for (size_t i = ns; i-- > 0;) {
            int im = (int)seg[3 * i + 2];
            if (im && !prev && w < ns) seg[3 * w] = seg[3 * i];
            else { w--; seg[3 * w] = seg[3 * i]; seg[3 * w + 1] = seg[3 * i + 1]; }
            prev = im;
        }
        for (size_t i = w; i < ns; i++) { seg[3 * nr] = seg[3 * i]; seg[3 * nr + 1] = seg[3 * i + 1]; nr++; }
        break;
    }
    case SB_CONTIGUOUS: {
        int prev = -1;
        for (size_t i = 0; i < ns; i++) {
            int im = (int)seg[3 * i + 2];
            if (im == prev && nr) seg[3 * (nr - 1) + 1] = seg[3 * i + 1];
            else { seg[3 * nr] = seg[3 * i]; seg[3 * nr + 1] = seg[3 * i + 1]; nr++; }
            prev = im;
        }
        break;
    }
    }
    for (size_t i = 0; i < nr; i++) {
        size_t a = seg[3 * i], b = seg[3 * i + 1];
        if (b > a) tkp_add(out, s + a, b - a, first && a == 0);
    }
    free(seg);
}

/* Matches of a per-character predicate, one range per character. */
static long char_matches(const char *s, size_t n, int (*pred)(uint32_t), size_t **out) {
    size_t cap = 16, k = 0;
    size_t *m = malloc(cap * sizeof *m);
    if (!m) return -1;
    for (size_t i = 0; i < n;) {
        uint32_t cp;
        int l = utf8_dec((const unsigned char *)s + i, n - i, &cp);
        if (pred(cp)) {
            if (k + 2 > cap) {
                size_t *nm = realloc(m, (cap *= 2) * sizeof *nm);
                if (!nm) { free(m); return -1; }
                m = nm;
            }
            m[k++] = i;
            m[k++] = i + (size_t)l;
        }
        i += (size_t)l;
    }
    *out = m;
    return (long)(k / 2);
}

static int is_ascii_digit(uint32_t c) { return c >= '0' && c <= '9'; }
static int is_punct(uint32_t c) {
    if (c < 128) return (c >= 33 && c <= 47) || (c >= 58 && c <= 64) || (c >= 91 && c <= 96) || (c >= 123 && c <= 126);
    int cat = utf8proc_category((utf8proc_int32_t)c);
    return cat >= UTF8PROC_CATEGORY_PC && cat <= UTF8PROC_CATEGORY_PO;
}

static int pre_one(const tk_pre *p, const tk_pieces *in, tk_pieces *out) {
    tkp_clear(out);
    tk_buf tmp = {0};
    for (size_t pi = 0; pi < in->n; pi++) {
        const char *s = in->text.p + in->v[pi].off;
        size_t n = in->v[pi].len;
        int first = in->v[pi].first;
        size_t *m = NULL;
        long k = 0;
        switch (p->kind) {
        case PT_SEQ: return err_set("internal: nested sequence");
        case PT_SPLIT:
            if ((k = tk_pattern_find(&p->pat, s, n, &m)) < 0) goto fail;
            split_apply(s, n, first, m, k, p->invert, p->behavior, out);
            break;
        case PT_WHITESPACE:
            if ((k = tk_pattern_find(&p->pat, s, n, &m)) < 0) goto fail;
            split_apply(s, n, first, m, k, 1, SB_REMOVED, out);
            break;
        case PT_WSSPLIT:
            if ((k = char_matches(s, n, tk_is_space, &m)) < 0) goto oom;
            split_apply(s, n, first, m, k, 0, SB_REMOVED, out);
            break;
        case PT_PUNCT:
            if ((k = char_matches(s, n, is_punct, &m)) < 0) goto oom;
            split_apply(s, n, first, m, k, 0, p->behavior, out);
            break;
        case PT_DIGITS:
            if ((k = char_matches(s, n, is_ascii_digit, &m)) < 0) goto oom;
            split_apply(s, n, first, m, k, 0, p->individual_digits ? SB_ISOLATED : SB_CONTIGUOUS, out);
            break;
        case PT_METASPACE: {
            tmp.n = 0;
            int has = n >= (size_t)p->repl_n && !memcmp(s, p->repl, (size_t)p->repl_n);
            /* spaces become the replacement first, so a leading space counts as "starts with" */
            if (n && s[0] == ' ') has = 1;
            if (!has && (p->scheme == PS_ALWAYS || (p->scheme == PS_FIRST && first))) tkb_put(&tmp, p->repl, (size_t)p->repl_n);
            for (size_t i = 0; i < n; i++) {
                if (s[i] == ' ') tkb_put(&tmp, p->repl, (size_t)p->repl_n);
                else tkb_putc(&tmp, s[i]);
            }
            if (tmp.oom) goto oom;
            if (!p->split) { tkp_add(out, tmp.p, tmp.n, first); break; }
            /* split before each replacement character (MergedWithNext) */
            size_t a = 0;
            for (size_t i = 0; i + (size_t)p->repl_n <= tmp.n; i++) {
                if (i > a && !memcmp(tmp.p + i, p->repl, (size_t)p->repl_n)) {
                    tkp_add(out, tmp.p + a, i - a, first && a == 0);
                    a = i;
                }
            }
            if (tmp.n > a) tkp_add(out, tmp.p + a, tmp.n - a, first && a == 0);
            break;
        }
        case PT_BYTELEVEL: {
            tmp.n = 0;
            if (p->add_prefix_space && !(n && s[0] == ' ')) tkb_putc(&tmp, ' ');
            tkb_put(&tmp, s, n);
            if (tmp.oom) goto oom;
            tk_pieces split = {0};
            if (p->use_regex) {
                if ((k = tk_pattern_find(&p->pat, tmp.p, tmp.n, &m)) < 0) goto fail;
                split_apply(tmp.p, tmp.n, first, m, k, 0, SB_ISOLATED, &split);
            } else tkp_add(&split, tmp.p, tmp.n, first);
            if (split.oom) { tkp_free(&split); goto oom; }
            for (size_t j = 0; j < split.n; j++) {
                /* map every byte to its printable character */
                char buf[512];
                size_t bl = 0;
                const unsigned char *q = (const unsigned char *)split.text.p + split.v[j].off;
                size_t ql = split.v[j].len;
                size_t off0 = out->text.n;
                for (size_t i = 0; i < ql; i++) {
                    const char *c = tk_byte_char[q[i]];
                    buf[bl++] = c[0];
                    if (c[1]) buf[bl++] = c[1];
                    if (bl > sizeof buf - 2) { tkb_put(&out->text, buf, bl); bl = 0; }
                }
                tkb_put(&out->text, buf, bl);
                if (out->text.oom) { tkp_free(&split); goto oom; }
                /* register the span written directly into out->text */
                if (out->n == out->cap) {
                    size_t nc = out->cap ? out->cap * 2 : 16;
                    tk_span *nv = realloc(out->v, nc * sizeof *nv);
                    if (!nv) { tkp_free(&split); goto oom; }
                    out->v = nv;
                    out->cap = nc;
                }
                out->v[out->n++] = (tk_span){off0, out->text.n - off0, split.v[j].first};
            }
            tkp_free(&split);
            break;
        }
        }
        free(m);
        if (out->oom) goto oom;
    }
    tkb_free(&tmp);
    return 0;
oom:
    err_set("out of memory pre-tokenizing");
fail:
    tkb_free(&tmp);
    return -1;
}

int tk_pre_apply(const tk_pre *p, const tk_pieces *in, tk_pieces *out) {
    if (p->kind != PT_SEQ) return pre_one(p, in, out);
    tk_pieces a = {0}, b = {0};
    const tk_pieces *cur = in;
    for (int i = 0; i < p->n_kids; i++) {
        tk_pieces *dst = (cur == &a) ? &b : &a;
        if (tk_pre_apply(p->kids[i], cur, dst)) { tkp_free(&a); tkp_free(&b); return -1; }
        cur = dst;
    }
    tkp_clear(out);
    for (size_t i = 0; i < cur->n; i++) tkp_add(out, cur->text.p + cur->v[i].off, cur->v[i].len, cur->v[i].first);
    tkp_free(&a);
    tkp_free(&b);
    return out->oom ? err_set("out of memory pre-tokenizing") : 0;
}
