/* tokenizer/decode.c: tokenizers' decoders (ByteLevel, Metaspace, Replace, ByteFallback,
 * Fuse, Strip, Sequence) over a list of token strings, and the streaming detokenizer.
 * Each decoder maps the list to a new list, as tokenizers' decode_chain does; the
 * final text is the concatenation. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "tokenizer/tok.h"

int tk_parse_prepend_scheme(const tj_val *v, prepend_scheme *ps, const char *where);
int tk_parse_replacement(const tj_val *v, char *repl, int *n, const char *where);

tk_dec *tk_dec_parse(const tj_val *v, const char *where) {
    const tj_val *t = tj_get(v, "type");
    if (!t || t->type != TJ_STR) { err_set("%s: decoder without a \"type\"", where); return NULL; }
    tk_dec *d = calloc(1, sizeof *d);
    if (!d) { err_set("out of memory"); return NULL; }
    const char *ty = t->u.s;
    if (!strcmp(ty, "Sequence")) {
        d->kind = DC_SEQ;
        const tj_val *a = tj_get(v, "decoders");
        if (!a || a->type != TJ_ARR) { err_set("%s: Sequence decoder without \"decoders\"", where); goto fail; }
        d->kids = calloc(a->n ? a->n : 1, sizeof *d->kids);
        if (!d->kids) { err_set("out of memory"); goto fail; }
        for (uint32_t i = 0; i < a->n; i++) {
            if (!(d->kids[i] = tk_dec_parse(&a->u.items[i], where))) goto fail;
            d->n_kids++;
        }
    } else if (!strcmp(ty, "ByteLevel")) d->kind = DC_BYTELEVEL;
    else if (!strcmp(ty, "ByteFallback")) d->kind = DC_BYTEFALLBACK;
    else if (!strcmp(ty, "Fuse")) d->kind = DC_FUSE;
    else if (!strcmp(ty, "Metaspace")) {
        d->kind = DC_METASPACE;
        if (tk_parse_replacement(v, d->repl, &d->repl_n, where) || tk_parse_prepend_scheme(v, &d->scheme, where)) goto fail;
    } else if (!strcmp(ty, "Replace")) {
        d->kind = DC_REPLACE;
        const tj_val *p = tj_get(v, "pattern"), *c = tj_get(v, "content");
        if (!p || !c || c->type != TJ_STR) { err_set("%s: Replace decoder needs \"pattern\" and \"content\"", where); goto fail; }
        if (tk_pattern_parse(&d->pat, p, where)) goto fail;
        d->content = malloc(c->n + 1);
        if (!d->content) { err_set("out of memory"); goto fail; }
        memcpy(d->content, c->u.s, c->n + 1);
        d->content_n = c->n;
    } else if (!strcmp(ty, "Strip")) {
        d->kind = DC_STRIP;
        const tj_val *c = tj_get(v, "content"), *a = tj_get(v, "start"), *b = tj_get(v, "stop");
        if (!c || c->type != TJ_STR || !c->n || !a || a->type != TJ_NUM || !b || b->type != TJ_NUM) {
            err_set("%s: Strip decoder needs \"content\" (one character), \"start\" and \"stop\"", where);
            goto fail;
        }
        utf8_dec((const unsigned char *)c->u.s, c->n, &d->strip_cp);
        d->strip_start = (int)a->u.num;
        d->strip_stop = (int)b->u.num;
    } else {
        err_set("%s: unsupported decoder type \"%s\" (celer supports ByteLevel, Metaspace, Replace, ByteFallback, "
                "Fuse, Strip, Sequence)", where, ty);
        goto fail;
    }
    return d;
fail:
    tk_dec_free(d);
    return NULL;
}

void tk_dec_free(tk_dec *d) {
    if (!d) return;
    for (int i = 0; i < d->n_kids; i++) tk_dec_free(d->kids[i]);
    free(d->kids);
    tk_pattern_free(&d->pat);
    free(d->content);
    free(d);
}

#define TOK(pc, i) ((pc)->text.p + (pc)->v[i].off)
#define TLEN(pc, i) ((pc)->v[i].len)

static int byte_of_token(const char *s, size_t n) {
    if (n != 6 || memcmp(s, "<0x", 3) || s[5] != '>') return -1;
    int v = 0;
    for (int i = 3; i < 5; i++) {
        char c = s[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= c - '0';
        else if (c >= 'A' && c <= 'F') v |= c - 'A' + 10;
        else if (c >= 'a' && c <= 'f') v |= c - 'a' + 10;
        else return -1;
    }
    return v;
}

/* raw: the bytes as they are (no U+FFFD for a partial UTF-8 sequence, no first-piece
 * rules, no stripping): what one token adds in the middle of a text. */
static int dec_one(const tk_dec *d, const tk_pieces *in, tk_pieces *out, int raw) {
    tkp_clear(out);
    tk_buf tmp = {0};
    switch (d->kind) {
    case DC_SEQ: return err_set("internal: nested sequence");
    case DC_BYTELEVEL: {
        for (size_t i = 0; i < in->n; i++) {
            const unsigned char *s = (const unsigned char *)TOK(in, i);
            size_t n = TLEN(in, i), at = tmp.n;
            int ok = 1;
            for (size_t j = 0; j < n;) {
                uint32_t cp;
                j += (size_t)utf8_dec(s + j, n - j, &cp);
                int b = tk_char_byte(cp);
                if (b < 0) { ok = 0; break; }
                tkb_putc(&tmp, (char)b);
            }
            if (!ok) { tmp.n = at; tkb_put(&tmp, s, n); }
        }
        tk_buf l = {0};
        if (raw) tkb_put(&l, tmp.p ? tmp.p : "", tmp.n);
        else utf8_lossy(&l, tmp.p ? tmp.p : "", tmp.n);
        tkp_add(out, l.p ? l.p : "", l.n, 0);
        tkb_free(&l);
        break;
    }
    case DC_BYTEFALLBACK: {
        size_t i = 0;
        while (i < in->n) {
            if (byte_of_token(TOK(in, i), TLEN(in, i)) < 0) { tkp_add(out, TOK(in, i), TLEN(in, i), 0); i++; continue; }
            tmp.n = 0;
            size_t j = i;
            int b;
            while (j < in->n && (b = byte_of_token(TOK(in, j), TLEN(in, j))) >= 0) { tkb_putc(&tmp, (char)b); j++; }
            if (raw || utf8_valid(tmp.p, tmp.n)) tkp_add(out, tmp.p, tmp.n, 0);
            else
                for (size_t k = i; k < j; k++) tkp_add(out, "\xEF\xBF\xBD", 3, 0);
            i = j;
        }
        break;
    }
    case DC_FUSE:
        for (size_t i = 0; i < in->n; i++) tkb_put(&tmp, TOK(in, i), TLEN(in, i));
        tkp_add(out, tmp.p ? tmp.p : "", tmp.n, 0);
        break;
    case DC_METASPACE:
        for (size_t i = 0; i < in->n; i++) {
            const char *s = TOK(in, i);
            size_t n = TLEN(in, i);
            tmp.n = 0;
            for (size_t j = 0; j < n;) {
                if (j + (size_t)d->repl_n <= n && !memcmp(s + j, d->repl, (size_t)d->repl_n)) {
                    if (raw || !(i == 0 && d->scheme != PS_NEVER)) tkb_putc(&tmp, ' ');
                    j += (size_t)d->repl_n;
                } else tkb_putc(&tmp, s[j++]);
            }
            tkp_add(out, tmp.p ? tmp.p : "", tmp.n, 0);
        }
        break;
    case DC_REPLACE:
        for (size_t i = 0; i < in->n; i++) {
            const char *s = TOK(in, i);
            size_t n = TLEN(in, i), *m;
            long k = tk_pattern_find(&d->pat, s, n, &m);
            if (k < 0) { tkb_free(&tmp); return -1; }
            tmp.n = 0;
            size_t at = 0;
            for (long q = 0; q < k; q++) {
                tkb_put(&tmp, s + at, m[2 * q] - at);
                tkb_put(&tmp, d->content, d->content_n);
                at = m[2 * q + 1];
            }
            tkb_put(&tmp, s + at, n - at);
            free(m);
            tkp_add(out, tmp.p ? tmp.p : "", tmp.n, 0);
        }
        break;
    case DC_STRIP:
        for (size_t i = 0; i < in->n; i++) {
            const char *s = TOK(in, i);
            size_t n = TLEN(in, i), a = 0, b = n;
            if (raw) {
                tkp_add(out, s, n, 0);
                continue;
            }
            for (int k = 0; k < d->strip_start && a < b; k++) {
                uint32_t cp;
                int l = utf8_dec((const unsigned char *)s + a, b - a, &cp);
                if (cp != d->strip_cp) break;
                a += (size_t)l;
            }
            for (int k = 0; k < d->strip_stop && b > a; k++) {
                size_t q = b - 1;
                while (q > a && ((unsigned char)s[q] & 0xC0) == 0x80) q--;
                uint32_t cp;
                utf8_dec((const unsigned char *)s + q, b - q, &cp);
                if (cp != d->strip_cp) break;
                b = q;
            }
            tkp_add(out, s + a, b - a, 0);
        }
        break;
    }
    int oom = tmp.oom || out->oom;
    tkb_free(&tmp);
    return oom ? err_set("out of memory decoding") : 0;
}

int tk_dec_apply_mode(const tk_dec *d, tk_pieces *io, int raw) {
    if (d->kind != DC_SEQ) {
        tk_pieces out = {0};
        if (dec_one(d, io, &out, raw)) { tkp_free(&out); return -1; }
        tkp_free(io);
        *io = out;
        return 0;
    }
    for (int i = 0; i < d->n_kids; i++)
        if (tk_dec_apply_mode(d->kids[i], io, raw)) return -1;
    return 0;
}

int tk_dec_apply(const tk_dec *d, tk_pieces *io) { return tk_dec_apply_mode(d, io, 0); }

/* ---- streaming: tokenizers' DecodeStream. The text of ids[prefix_index..] minus the
 * text of the ids before `read` is new when it is longer and does not end in U+FFFD
 * (an incomplete UTF-8 sequence decodes as one). Decoding a short window keeps each
 * step cheap while decoders that look at neighbours (Metaspace's first token, Strip)
 * see the same context as a full decode. */
struct celer_detok {
    const celer_tokenizer *t;
    int skip_special;
    int32_t *ids;
    size_t n, cap;
    size_t prefix_index;  /* ids[0..prefix_index) are only context */
    char *prefix;         /* decode(ids) at the last emission */
    size_t prefix_n;
    char *out;            /* the text handed back by the last call */
};

celer_detok *celer_detok_new(const celer_tokenizer *t, int skip_special) {
    celer_detok *d = calloc(1, sizeof *d);
    if (!d) { err_set("out of memory"); return NULL; }
    d->t = t;
    d->skip_special = skip_special;
    d->prefix = calloc(1, 1);
    if (!d->prefix) { free(d); err_set("out of memory"); return NULL; }
    return d;
}

void celer_detok_free(celer_detok *d) {
    if (!d) return;
    free(d->ids);
    free(d->prefix);
    free(d->out);
    free(d);
}

static const char *detok_emit(celer_detok *d, const char *s, size_t n, size_t *len) {
    free(d->out);
    d->out = malloc(n + 1);
    if (!d->out) { err_set("out of memory"); return NULL; }
    memcpy(d->out, s, n);
    d->out[n] = 0;
    if (len) *len = n;
    return d->out;
}

const char *celer_detok_put(celer_detok *d, int32_t id, size_t *len) {
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 16;
        int32_t *ni = realloc(d->ids, nc * sizeof *ni);
        if (!ni) { err_set("out of memory"); return NULL; }
        d->ids = ni;
        d->cap = nc;
    }
    d->ids[d->n++] = id;
    size_t sn;
    char *s = celer_detokenize(d->t, d->ids, d->n, d->skip_special, &sn);
    if (!s) return NULL;
    if (sn > d->prefix_n && !(sn >= 3 && !memcmp(s + sn - 3, "\xEF\xBF\xBD", 3))) {
        if (memcmp(s, d->prefix, d->prefix_n) != 0) {
            free(s);
            err_set("streaming decode: the text of earlier tokens changed (decoder is not prefix-stable)");
            return NULL;
        }
        const char *r = detok_emit(d, s + d->prefix_n, sn - d->prefix_n, len);
        free(s);
        if (!r) return NULL;
        /* keep ids[prefix_index..] as context; the new prefix is their decode */
        size_t new_prefix_index = d->n - d->prefix_index;
        memmove(d->ids, d->ids + d->prefix_index, (d->n - d->prefix_index) * sizeof *d->ids);
        d->n -= d->prefix_index;
        d->prefix_index = new_prefix_index;
        free(d->prefix);
        d->prefix = celer_detokenize(d->t, d->ids, d->n, d->skip_special, &d->prefix_n);
        if (!d->prefix) return NULL;
        return r;
    }
    free(s);
    return detok_emit(d, "", 0, len);
}

const char *celer_detok_flush(celer_detok *d, size_t *len) {
    size_t sn;
    char *s = celer_detokenize(d->t, d->ids, d->n, d->skip_special, &sn);
    if (!s) return NULL;
    const char *r;
    if (sn < d->prefix_n || memcmp(s, d->prefix, d->prefix_n)) {
        free(s);
        err_set("streaming decode: the text of earlier tokens changed (decoder is not prefix-stable)");
        return NULL;
    }
    r = detok_emit(d, s + d->prefix_n, sn - d->prefix_n, len);
    free(s);
    if (r) {
        /* everything is out now */
        free(d->prefix);
        d->prefix = s = celer_detokenize(d->t, d->ids, d->n, d->skip_special, &d->prefix_n);
        if (!s) return NULL;
    }
    return r;
}
