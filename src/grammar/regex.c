/* grammar/regex.c: a JSON Schema "pattern" (a subset of ECMA-262 regular
 * expressions) -> a GBNF expression for the JSON-encoded content of a string (what
 * goes between its quotes). The subset (docs/grammar.md): literals, escapes \t \n \r
 * \uXXXX and escaped punctuation, . [...] [^...] with ranges, \d \w \s \D \W \S,
 * (...) (?:...), |, * + ? {m} {m,} {m,n} (a lazy ? after them is accepted: the set of
 * matching strings is the same), ^ at the start and $ at the end. Without ^ (or $)
 * anything may come before (after) the match, as the pattern searches. Refused:
 * backreferences, lookaround, \b, named groups, possessive quantifiers.
 * The grammar may generate less than the pattern allows, never more: '.' and negated
 * classes leave out '"', '\' and control characters; characters JSON must escape are
 * generated escaped (a newline as \n). */
#include <stdint.h>

#include "base/limits.h"
#include "grammar/sbuf.h"

typedef struct {
    const char *s, *p, *end;
    sbuf *out;
    const char *any;   /* the rule of one JSON string character (for unanchored ends) */
    char *err;
    size_t errn;
    int depth;
} rx;

static int rerr(rx *r, const char *msg) {
    if (!r->err[0]) snprintf(r->err, r->errn, "pattern at offset %d: %s", (int)(r->p - r->s), msg);
    return -1;
}

/* One codepoint as GBNF that produces its JSON encoding. */
static void lit_cp(rx *r, uint32_t cp) {
    sbuf *o = r->out;
    if (cp == '"') sb_str(o, "\"\\\\\\\"\"");
    else if (cp == '\\') sb_str(o, "\"\\\\\\\\\"");
    else if (cp == '\n') sb_str(o, "\"\\\\n\"");
    else if (cp == '\r') sb_str(o, "\"\\\\r\"");
    else if (cp == '\t') sb_str(o, "\"\\\\t\"");
    else if (cp < 0x20 || cp == 0x7F) sb_printf(o, "\"\\\\u%04X\"", cp);
    else if (cp < 0x80) {
        char c = (char)cp;
        sb_str(o, "\"");
        sb_gbnf_lit(o, &c, 1);
        sb_str(o, "\"");
    } else sb_printf(o, "\"\\U%08X\"", cp);
}

static int read_utf8(rx *r, uint32_t *cp) {
    unsigned char c = (unsigned char)*r->p++;
    if (c < 0x80) {
        *cp = c;
        return 0;
    }
    int n = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : 1;
    uint32_t v = c & (n == 3 ? 0x07 : n == 2 ? 0x0F : 0x1F);
    for (int i = 0; i < n; i++) {
        if (r->p >= r->end) return rerr(r, "invalid UTF-8");
        v = (v << 6) | ((unsigned char)*r->p++ & 0x3F);
    }
    *cp = v;
    return 0;
}

typedef struct {
    uint32_t lo[256], hi[256];
    int n;
} cpset;

static int set_add(rx *r, cpset *s, uint32_t lo, uint32_t hi) {
    if (s->n == 256) return rerr(r, "character class too large");
    s->lo[s->n] = lo;
    s->hi[s->n] = hi;
    s->n++;
    return 0;
}

/* \d \w \s into s; 1 when c names one of them (negated ones are refused in classes). */
static int shorthand(rx *r, cpset *s, char c) {
    switch (c) {
    case 'd': return set_add(r, s, '0', '9') ? -1 : 1;
    case 'w':
        return set_add(r, s, 'a', 'z') || set_add(r, s, 'A', 'Z') || set_add(r, s, '0', '9') || set_add(r, s, '_', '_')
                   ? -1
                   : 1;
    case 's':
        return set_add(r, s, ' ', ' ') || set_add(r, s, '\t', '\r') ? -1 : 1;
    default: return 0;
    }
}

/* An escape after '\' (not a shorthand) as a codepoint. */
static int escape_cp(rx *r, uint32_t *cp) {
    if (r->p >= r->end) return rerr(r, "pattern ends with \\");
    char c = *r->p++;
    switch (c) {
    case 't': *cp = '\t'; return 0;
    case 'n': *cp = '\n'; return 0;
    case 'r': *cp = '\r'; return 0;
    case 'f': *cp = '\f'; return 0;
    case 'v': *cp = '\v'; return 0;
    case '0': *cp = 0; return 0;
    case 'u': {
        uint32_t v = 0;
        for (int i = 0; i < 4; i++) {
            char h = r->p < r->end ? *r->p++ : 0;
            int d = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
            if (d < 0) return rerr(r, "\\u needs four hexadecimal digits");
            v = v * 16 + (uint32_t)d;
        }
        *cp = v;
        return 0;
    }
    case 'b': case 'B': return rerr(r, "word boundaries (\\b, \\B) are not supported");
    default:
        if ((c >= '1' && c <= '9') || c == 'k') return rerr(r, "backreferences are not supported");
        if ((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z')) return rerr(r, "unsupported escape");
        *cp = (uint32_t)(unsigned char)c;
        return 0;
    }
}

/* Emits a class: the printable members as one GBNF class, the characters JSON
 * escapes ('"', '\', newline, return, tab) as their escapes (not negated only);
 * other control characters are left out. */
static int emit_set(rx *r, cpset *s, int negate) {
    sbuf *o = r->out;
    static const uint32_t esc[] = {'"', '\\', '\n', '\r', '\t'};
    static const uint32_t cuts[][2] = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}, {0x7F, 0x7F}};
    sbuf cls = {0};
    int members = 0;
    for (int i = 0; i < s->n; i++) {
        uint32_t a = s->lo[i], hi = s->hi[i];
        while (a <= hi) {
            int cut = 0;
            for (int k = 0; k < 4; k++)
                if (a >= cuts[k][0] && a <= cuts[k][1]) a = cuts[k][1] + 1, cut = 1;
            if (cut) continue;
            uint32_t b = hi;
            for (int k = 0; k < 4; k++)
                if (cuts[k][0] > a && cuts[k][0] - 1 < b) b = cuts[k][0] - 1;
            sb_printf(&cls, "\\U%08X-\\U%08X", a, b);
            members++;
            a = b + 1;
        }
    }
    int alts = 0;
    sb_str(o, "(");
    if (!negate)
        for (int k = 0; k < 5; k++)
            for (int i = 0; i < s->n; i++)
                if (s->lo[i] <= esc[k] && esc[k] <= s->hi[i]) {
                    if (alts++) sb_str(o, " | ");
                    lit_cp(r, esc[k]);
                    break;
                }
    if (negate || members) {
        if (alts++) sb_str(o, " | ");
        sb_str(o, negate ? "[^\\x00-\\x1F\\x7F\"\\\\" : "[");
        if (cls.p) sb_str(o, cls.p);
        sb_str(o, "]");
    }
    sb_str(o, ")");
    int oom = cls.oom;
    free(cls.p);
    if (oom) return rerr(r, "out of memory");
    if (!alts) return rerr(r, "character class matches no character a JSON string can hold");
    return 0;
}

static int parse_class(rx *r) {
    r->p++; /* [ */
    cpset s = {.n = 0};
    int negate = 0;
    if (r->p < r->end && *r->p == '^') negate = 1, r->p++;
    int first = 1;
    for (;;) {
        if (r->p >= r->end) return rerr(r, "unterminated character class");
        if (*r->p == ']' && !first) break;
        first = 0;
        uint32_t lo, hi;
        if (*r->p == '\\') {
            r->p++;
            if (r->p < r->end) {
                int k = shorthand(r, &s, *r->p);
                if (k < 0) return -1;
                if (k) {
                    r->p++;
                    continue;
                }
                if (*r->p == 'D' || *r->p == 'W' || *r->p == 'S')
                    return rerr(r, "negated shorthands (\\D \\W \\S) inside a class are not supported");
            }
            if (escape_cp(r, &lo)) return -1;
        } else if (read_utf8(r, &lo))
            return -1;
        hi = lo;
        if (r->p + 1 < r->end && *r->p == '-' && r->p[1] != ']') {
            r->p++;
            if (*r->p == '\\') {
                r->p++;
                if (escape_cp(r, &hi)) return -1;
            } else if (read_utf8(r, &hi))
                return -1;
            if (hi < lo) return rerr(r, "range out of order in a character class");
        }
        if (set_add(r, &s, lo, hi)) return -1;
    }
    r->p++;
    return emit_set(r, &s, negate);
}

static int parse_alt(rx *r);

static int parse_seq(rx *r) {
    int items = 0;
    while (r->p < r->end && *r->p != '|' && *r->p != ')') {
        if (*r->p == '$') {
            r->p++;
            if (r->p != r->end) return rerr(r, "$ is supported only at the end of the pattern");
            break;
        }
        size_t at = r->out->n;
        if (items++) sb_str(r->out, " "), at = r->out->n;
        char c = *r->p;
        if (c == '(') {
            r->p++;
            if (r->p < r->end && *r->p == '?') {
                if (r->p + 1 < r->end && r->p[1] == ':') r->p += 2;
                else return rerr(r, "lookaround and named groups are not supported");
            }
            if (++r->depth > CELER_MAX_GRAMMAR_NESTING) return rerr(r, "groups nested too deeply");
            sb_str(r->out, "(");
            if (parse_alt(r)) return -1;
            if (r->p >= r->end || *r->p != ')') return rerr(r, "unclosed group");
            r->p++;
            r->depth--;
            sb_str(r->out, ")");
        } else if (c == '[') {
            if (parse_class(r)) return -1;
        } else if (c == '.') {
            r->p++;
            sb_str(r->out, "[^\\x00-\\x1F\\x7F\"\\\\]");
        } else if (c == '\\') {
            r->p++;
            char e = r->p < r->end ? *r->p : 0;
            cpset s = {.n = 0};
            int k = shorthand(r, &s, e);
            if (k < 0) return -1;
            if (k) {
                r->p++;
                if (emit_set(r, &s, 0)) return -1;
            } else if (e == 'D' || e == 'W' || e == 'S') {
                r->p++;
                shorthand(r, &s, (char)(e + 32));
                if (emit_set(r, &s, 1)) return -1;
            } else {
                uint32_t cp;
                if (escape_cp(r, &cp)) return -1;
                lit_cp(r, cp);
            }
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            return rerr(r, "a quantifier with nothing to repeat");
        } else if (c == '^') {
            return rerr(r, "^ is supported only at the start of the pattern");
        } else {
            uint32_t cp;
            if (read_utf8(r, &cp)) return -1;
            lit_cp(r, cp);
        }
        /* quantifier */
        if (r->p < r->end && (*r->p == '*' || *r->p == '+' || *r->p == '?' || *r->p == '{')) {
            char q = *r->p;
            if (q == '{') {
                const char *b = r->p + 1;
                long m = -1, n = -1;
                char *e;
                m = strtol(b, &e, 10);
                if (e == b || m < 0) return rerr(r, "bad {m,n} quantifier");
                if (*e == ',') {
                    const char *b2 = e + 1;
                    n = strtol(b2, &e, 10);
                    if (e == b2) n = -1;
                    else if (n < m) return rerr(r, "{m,n} with n < m");
                } else n = m;
                if (*e != '}') return rerr(r, "bad {m,n} quantifier");
                if (m > CELER_MAX_GRAMMAR_REPEAT || n > CELER_MAX_GRAMMAR_REPEAT)
                    return rerr(r, "repetition count over the limit (CELER_MAX_GRAMMAR_REPEAT)");
                r->p = e + 1;
                /* wrap the item in parentheses so the count applies to it whole */
                sb_str(r->out, ")");
                size_t len = r->out->n - at;
                sb_add(r->out, " ", 1);
                if (r->out->oom) return rerr(r, "out of memory");
                memmove(r->out->p + at + 1, r->out->p + at, len);
                r->out->p[at] = '(';
                if (n < 0) sb_printf(r->out, "{%ld,}", m);
                else sb_printf(r->out, "{%ld,%ld}", m, n);
            } else {
                r->p++;
                sb_str(r->out, ")");
                size_t len = r->out->n - at;
                sb_add(r->out, " ", 1);
                if (r->out->oom) return rerr(r, "out of memory");
                memmove(r->out->p + at + 1, r->out->p + at, len);
                r->out->p[at] = '(';
                char qs[2] = {q, 0};
                sb_str(r->out, qs);
            }
            if (r->p < r->end && *r->p == '?') r->p++; /* lazy: same strings */
            else if (r->p < r->end && *r->p == '+') return rerr(r, "possessive quantifiers are not supported");
        }
    }
    if (!items) sb_str(r->out, "\"\"");
    return 0;
}

static int parse_alt(rx *r) {
    sb_str(r->out, "(");
    if (parse_seq(r)) return -1;
    while (r->p < r->end && *r->p == '|') {
        r->p++;
        sb_str(r->out, " | ");
        if (parse_seq(r)) return -1;
    }
    sb_str(r->out, ")");
    return 0;
}

/* Appends to out a GBNF expression for the JSON content of strings the pattern
 * matches; any_char names the rule of one JSON string character. -1 with err. */
int regex_to_gbnf(const char *re, size_t n, const char *any_char, sbuf *out, char *err, size_t errn) {
    rx r = {.s = re, .p = re, .end = re + n, .out = out, .any = any_char, .err = err, .errn = errn};
    err[0] = 0;
    int anchored_start = n && re[0] == '^';
    int anchored_end = n && re[n - 1] == '$' && (n < 2 || re[n - 2] != '\\');
    if (anchored_start) r.p++;
    sb_str(out, "(");
    if (!anchored_start) sb_printf(out, "%s* ", any_char);
    if (parse_alt(&r)) return -1;
    if (r.p != r.end) return rerr(&r, *r.p == ')' ? "unmatched )" : "unexpected character");
    if (!anchored_end) sb_printf(out, " %s*", any_char);
    sb_str(out, ")");
    return out->oom ? rerr(&r, "out of memory") : 0;
}
