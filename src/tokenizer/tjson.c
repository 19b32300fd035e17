/* tokenizer/tjson.c: the arena JSON parser behind tjson.h. One pass over a private
 * copy of the text; containers are built on a value stack and copied into the arena
 * when they close, so each value is written twice at most. */
#include "tokenizer/tjson.h"

#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/limits.h"
#include "base/mem.h"

#define TJ_MAX_DEPTH CELER_MAX_JSON_DEPTH

typedef struct tj_chunk {
    struct tj_chunk *next;
    size_t used, cap;
    tj_val v[];
} tj_chunk;

struct tj_doc {
    char *text;        /* owned copy; strings point into it */
    tj_chunk *chunks;  /* arena of tj_val arrays */
    tj_val root;
};

typedef struct {
    char *p, *end, *base;
    const char *where;
    tj_doc *doc;
    tj_val *stack;
    size_t sn, scap;
    int depth;
} tj_parser;

static int tj_fail(tj_parser *ps, const char *p, const char *what) {
    int line = 1, col = 1;
    for (const char *q = ps->base; q < p && q < ps->end; q++) {
        if (*q == '\n') { line++; col = 1; }
        else col++;
    }
    return err_set("%s: invalid JSON at line %d, column %d: %s", ps->where, line, col, what);
}

static tj_val *tj_arena(tj_doc *d, size_t n) {
    if (n == 0) return NULL;
    tj_chunk *c = d->chunks;
    if (!c || c->cap - c->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        c = malloc(sizeof *c + cap * sizeof(tj_val));
        if (!c) return NULL;
        c->used = 0;
        c->cap = cap;
        c->next = d->chunks;
        d->chunks = c;
    }
    tj_val *r = c->v + c->used;
    c->used += n;
    return r;
}

static int tj_push(tj_parser *ps, tj_val v) {
    if (ps->sn == ps->scap) {
        size_t nc = ps->scap ? ps->scap * 2 : 1024;
        tj_val *ns = realloc(ps->stack, nc * sizeof *ns);
        if (!ns) return err_set("%s: out of memory parsing JSON", ps->where);
        ps->stack = ns;
        ps->scap = nc;
    }
    ps->stack[ps->sn++] = v;
    return 0;
}

static inline void tj_ws(tj_parser *ps) {
    char *p = ps->p;
    while (p < ps->end && (*p == ' ' || *p == '\n' || *p == '\r' || *p == '\t')) p++;
    ps->p = p;
}

static int tj_hex4(const char *p, unsigned *out) {
    unsigned v = 0;
    for (int i = 0; i < 4; i++) {
        char c = p[i];
        v <<= 4;
        if (c >= '0' && c <= '9') v |= (unsigned)(c - '0');
        else if (c >= 'a' && c <= 'f') v |= (unsigned)(c - 'a' + 10);
        else if (c >= 'A' && c <= 'F') v |= (unsigned)(c - 'A' + 10);
        else return -1;
    }
    *out = v;
    return 0;
}

static char *tj_put_utf8(char *w, unsigned cp) {
    if (cp < 0x80) *w++ = (char)cp;
    else if (cp < 0x800) { *w++ = (char)(0xC0 | (cp >> 6)); *w++ = (char)(0x80 | (cp & 63)); }
    else if (cp < 0x10000) {
        *w++ = (char)(0xE0 | (cp >> 12)); *w++ = (char)(0x80 | ((cp >> 6) & 63)); *w++ = (char)(0x80 | (cp & 63));
    } else {
        *w++ = (char)(0xF0 | (cp >> 18)); *w++ = (char)(0x80 | ((cp >> 12) & 63));
        *w++ = (char)(0x80 | ((cp >> 6) & 63)); *w++ = (char)(0x80 | (cp & 63));
    }
    return w;
}

/* At the opening quote. Unescapes in place; the result is NUL-terminated. */
static int tj_string(tj_parser *ps, tj_val *out) {
    char *start = ++ps->p, *r = start, *end = ps->end;
    /* fast scan for the common case without escapes */
    while (r < end && *r != '"' && *r != '\\' && (unsigned char)*r >= 0x20) r++;
    char *w = r;
    for (;;) {
        if (r >= end) return tj_fail(ps, start - 1, "unterminated string");
        unsigned char c = (unsigned char)*r;
        if (c == '"') break;
        if (c < 0x20) return tj_fail(ps, r, "control character in string");
        if (c != '\\') { *w++ = *r++; continue; }
        if (r + 1 >= end) return tj_fail(ps, r, "unterminated escape");
        char e = r[1];
        r += 2;
        switch (e) {
        case '"': *w++ = '"'; break;
        case '\\': *w++ = '\\'; break;
        case '/': *w++ = '/'; break;
        case 'b': *w++ = '\b'; break;
        case 'f': *w++ = '\f'; break;
        case 'n': *w++ = '\n'; break;
        case 'r': *w++ = '\r'; break;
        case 't': *w++ = '\t'; break;
        case 'u': {
            unsigned cp, lo;
            if (end - r < 4 || tj_hex4(r, &cp)) return tj_fail(ps, r - 2, "bad \\u escape");
            r += 4;
            if (cp >= 0xD800 && cp < 0xDC00) {
                if (end - r >= 6 && r[0] == '\\' && r[1] == 'u' && !tj_hex4(r + 2, &lo) && lo >= 0xDC00 && lo < 0xE000) {
                    cp = 0x10000 + ((cp - 0xD800) << 10) + (lo - 0xDC00);
                    r += 6;
                } else cp = 0xFFFD; /* lone surrogate, as Python's json would keep; we substitute */
            } else if (cp >= 0xDC00 && cp < 0xE000) cp = 0xFFFD;
            w = tj_put_utf8(w, cp);
            break;
        }
        default: return tj_fail(ps, r - 2, "bad escape");
        }
    }
    *w = 0;
    out->type = TJ_STR;
    out->n = (uint32_t)(w - start);
    out->u.s = start;
    ps->p = r + 1;
    return 0;
}

static int tj_number(tj_parser *ps, tj_val *out) {
    char *p = ps->p, *s = p;
    int neg = 0;
    if (*p == '-') { neg = 1; p++; }
    if (p >= ps->end || *p < '0' || *p > '9') return tj_fail(ps, s, "bad number");
    int64_t v = 0;
    int digits = 0;
    while (p < ps->end && *p >= '0' && *p <= '9') {
        if (digits < 18) v = v * 10 + (*p - '0');
        digits++;
        p++;
    }
    out->type = TJ_NUM;
    if (digits <= 18 && (p >= ps->end || (*p != '.' && *p != 'e' && *p != 'E'))) {
        out->u.num = (double)(neg ? -v : v);
        out->n = 0;
        ps->p = p;
        return 0;
    }
    /* the text buffer is NUL-terminated, so strtod stops in time */
    char *e;
    out->u.num = strtod(s, &e);
    if (e == s) return tj_fail(ps, s, "bad number");
    out->n = memchr(s, '.', (size_t)(e - s)) || memchr(s, 'e', (size_t)(e - s)) || memchr(s, 'E', (size_t)(e - s));
    ps->p = e;
    return 0;
}

static int tj_value(tj_parser *ps, tj_val *out);

static int tj_container(tj_parser *ps, tj_val *out, int is_obj) {
    char *open = ps->p++;
    if (++ps->depth > TJ_MAX_DEPTH) return tj_fail(ps, open, "nested too deeply");
    size_t base = ps->sn;
    char close = is_obj ? '}' : ']';
    tj_ws(ps);
    if (ps->p < ps->end && *ps->p == close) {
        ps->p++;
    } else {
        for (;;) {
            tj_val v;
            tj_ws(ps);
            if (is_obj) {
                if (ps->p >= ps->end || *ps->p != '"') return tj_fail(ps, ps->p, "expected a string key");
                if (tj_string(ps, &v) || tj_push(ps, v)) return -1;
                tj_ws(ps);
                if (ps->p >= ps->end || *ps->p != ':') return tj_fail(ps, ps->p, "expected ':'");
                ps->p++;
                tj_ws(ps);
            }
            if (tj_value(ps, &v) || tj_push(ps, v)) return -1;
            tj_ws(ps);
            if (ps->p < ps->end && *ps->p == ',') { ps->p++; continue; }
            if (ps->p < ps->end && *ps->p == close) { ps->p++; break; }
            return tj_fail(ps, ps->p, is_obj ? "expected ',' or '}'" : "expected ',' or ']'");
        }
    }
    size_t n = ps->sn - base;
    out->type = is_obj ? TJ_OBJ : TJ_ARR;
    out->n = (uint32_t)(is_obj ? n / 2 : n);
    out->u.items = NULL;
    if (n) {
        out->u.items = tj_arena(ps->doc, n);
        if (!out->u.items) return err_set("%s: out of memory parsing JSON", ps->where);
        memcpy(out->u.items, ps->stack + base, n * sizeof(tj_val));
    }
    ps->sn = base;
    ps->depth--;
    return 0;
}

static int tj_value(tj_parser *ps, tj_val *out) {
    if (ps->p >= ps->end) return tj_fail(ps, ps->p, "unexpected end of input");
    char c = *ps->p;
    switch (c) {
    case '"': return tj_string(ps, out);
    case '{': return tj_container(ps, out, 1);
    case '[': return tj_container(ps, out, 0);
    case 't':
        if (ps->end - ps->p >= 4 && !memcmp(ps->p, "true", 4)) { out->type = TJ_TRUE; out->n = 0; ps->p += 4; return 0; }
        break;
    case 'f':
        if (ps->end - ps->p >= 5 && !memcmp(ps->p, "false", 5)) { out->type = TJ_FALSE; out->n = 0; ps->p += 5; return 0; }
        break;
    case 'n':
        if (ps->end - ps->p >= 4 && !memcmp(ps->p, "null", 4)) { out->type = TJ_NULL; out->n = 0; ps->p += 4; return 0; }
        break;
    case 'N': /* Python writes NaN; accept it as null-ish number */
        if (ps->end - ps->p >= 3 && !memcmp(ps->p, "NaN", 3)) { out->type = TJ_NUM; out->n = 0; out->u.num = 0; ps->p += 3; return 0; }
        break;
    default:
        if (c == '-' || (c >= '0' && c <= '9')) return tj_number(ps, out);
    }
    return tj_fail(ps, ps->p, "unexpected character");
}

/* Parses buf (n bytes, NUL-terminated, owned by the new doc even on failure). */
static tj_doc *tj_parse_owned(char *buf, size_t n, const char *where) {
    tj_doc *d = calloc(1, sizeof *d);
    if (!d) {
        free(buf);
        err_set("%s: out of memory parsing JSON", where);
        return NULL;
    }
    d->text = buf;
    tj_parser ps = {buf, buf + n, buf, where, d, NULL, 0, 0, 0};
    tj_ws(&ps);
    int rc = tj_value(&ps, &d->root);
    if (!rc) {
        tj_ws(&ps);
        if (ps.p != ps.end) rc = tj_fail(&ps, ps.p, "trailing characters after the JSON value");
    }
    free(ps.stack);
    if (rc) {
        tj_free(d);
        return NULL;
    }
    return d;
}

tj_doc *tj_parse(const char *text, size_t len, const char *where) {
    char *t = malloc(len + 1);
    if (!t) {
        err_set("%s: out of memory parsing JSON", where);
        return NULL;
    }
    memcpy(t, text, len);
    t[len] = 0;
    return tj_parse_owned(t, len, where);
}

tj_doc *tj_load(const char *path) {
    size_t n;
    char *buf = mem_read_file(path, &n);
    if (!buf) return NULL;
    return tj_parse_owned(buf, n, path);
}

void tj_free(tj_doc *d) {
    if (!d) return;
    tj_chunk *c = d->chunks;
    while (c) {
        tj_chunk *n = c->next;
        free(c);
        c = n;
    }
    free(d->text);
    free(d);
}

const tj_val *tj_root(const tj_doc *d) { return &d->root; }

const tj_val *tj_get(const tj_val *o, const char *key) {
    if (!o || o->type != TJ_OBJ) return NULL;
    size_t kl = strlen(key);
    for (uint32_t i = 0; i < o->n; i++) {
        const tj_val *k = &o->u.items[2 * i];
        if (k->n == kl && memcmp(k->u.s, key, kl) == 0) return &o->u.items[2 * i + 1];
    }
    return NULL;
}

int tj_is_str(const tj_val *v, const char *s) {
    return v && v->type == TJ_STR && v->n == strlen(s) && memcmp(v->u.s, s, v->n) == 0;
}
