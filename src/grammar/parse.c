/* grammar/parse.c: GBNF text -> celer_grammar (grammar.h), with llama.cpp's syntax:
 *   name ::= alternatives      (a rule; "root" is where matching starts)
 *   a b  |  c                  (sequence, alternation), ( ... ) groups
 *   "literal"  [class] [^negated] [a-z]  .  (any character)
 *   x*  x+  x?  x{m}  x{m,}  x{m,n}
 *   # comment to the end of the line
 * Escapes in literals and classes: \n \r \t \\ \" \' \[ \] \- \^ \xHH \uHHHH
 * \UHHHHHHHH. A rule ends at a newline outside parentheses (a newline may follow
 * "::=" and "|"). Repetition and groups become rules (x* is R ::= x R | empty);
 * classes become alternatives of byte ranges (utf8.c). Refused, with the line and
 * column: undefined rules, left recursion (a rule that can reach itself without
 * consuming input), and the limits of src/base/limits.h. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/limits.h"
#include "grammar/grammar.h"

typedef struct {
    gelem *e;
    uint32_t n, cap;
} seqbuf;

typedef struct {
    seqbuf *alts;
    int n, cap;
    char *name;          /* NULL: made by the parser */
    int defined;
    const char *ref_at;  /* first reference (for "undefined rule") */
    const char *def_at;
} prule;

typedef struct {
    const char *src, *p, *end;
    prule *rules;
    int n_rules, cap_rules;
    int *hash;           /* [hcap] rule ids by name, -1 empty */
    int hcap;
    uint32_t (*sets)[8];
    uint32_t n_sets, cap_sets;
    size_t n_el;
    int depth;
    int failed;
} parser;

static void where(const parser *ps, const char *at, int *line, int *col) {
    *line = 1;
    *col = 1;
    for (const char *q = ps->src; q < at && q < ps->end; q++) {
        if (*q == '\n') {
            (*line)++;
            *col = 1;
        } else *col += ((unsigned char)*q & 0xC0) != 0x80;
    }
}

static int perr(parser *ps, const char *at, const char *fmt, const char *a) {
    if (ps->failed) return -1;
    int line, col;
    where(ps, at, &line, &col);
    char msg[256];
    snprintf(msg, sizeof msg, fmt, a ? a : "");
    err_set("grammar: line %d, column %d: %s", line, col, msg);
    ps->failed = 1;
    return -1;
}

static int oom(parser *ps) {
    if (!ps->failed) err_set("grammar: out of memory");
    ps->failed = 1;
    return -1;
}

/* ---------------------------------------------------------------- building */

static int seq_push(parser *ps, seqbuf *s, gelem e) {
    if (++ps->n_el > CELER_MAX_GRAMMAR_ELEMENTS)
        return perr(ps, ps->p, "the grammar compiles to more elements than the limit%s (CELER_MAX_GRAMMAR_ELEMENTS)", "");
    if (s->n == s->cap) {
        uint32_t cap = s->cap ? 2 * s->cap : 8;
        gelem *p = realloc(s->e, cap * sizeof *p);
        if (!p) return oom(ps);
        s->e = p;
        s->cap = cap;
    }
    s->e[s->n++] = e;
    return 0;
}

static int new_rule(parser *ps, const char *name, size_t n) {
    if (ps->n_rules >= CELER_MAX_GRAMMAR_RULES)
        return perr(ps, ps->p, "more rules than the limit%s (CELER_MAX_GRAMMAR_RULES, groups and repetitions count)", "");
    if (ps->n_rules == ps->cap_rules) {
        int cap = ps->cap_rules ? 2 * ps->cap_rules : 64;
        prule *r = realloc(ps->rules, (size_t)cap * sizeof *r);
        if (!r) return oom(ps);
        ps->rules = r;
        ps->cap_rules = cap;
    }
    prule *r = &ps->rules[ps->n_rules];
    memset(r, 0, sizeof *r);
    if (name) {
        if (!(r->name = malloc(n + 1))) return oom(ps);
        memcpy(r->name, name, n);
        r->name[n] = 0;
    }
    return ps->n_rules++;
}

/* -1 with a new empty seqbuf in rule r's alternatives on failure. */
static seqbuf *new_alt(parser *ps, int r) {
    prule *R = &ps->rules[r];
    if (R->n == R->cap) {
        int cap = R->cap ? 2 * R->cap : 4;
        seqbuf *a = realloc(R->alts, (size_t)cap * sizeof *a);
        if (!a) {
            oom(ps);
            return NULL;
        }
        R->alts = a;
        R->cap = cap;
    }
    memset(&R->alts[R->n], 0, sizeof R->alts[0]);
    return &R->alts[R->n++];
}

static uint64_t hash_name(const char *s, size_t n) {
    uint64_t h = 1469598103934665603ull;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 1099511628211ull;
    return h;
}

/* The id of named rule name[n], made (undefined) when new. */
static int rule_id(parser *ps, const char *name, size_t n) {
    if (ps->n_rules * 2 >= ps->hcap) {
        int cap = ps->hcap ? 2 * ps->hcap : 256;
        int *h = malloc((size_t)cap * sizeof *h);
        if (!h) return oom(ps);
        for (int i = 0; i < cap; i++) h[i] = -1;
        for (int i = 0; i < ps->n_rules; i++) {
            if (!ps->rules[i].name) continue;
            uint64_t k = hash_name(ps->rules[i].name, strlen(ps->rules[i].name)) & (uint64_t)(cap - 1);
            while (h[k] >= 0) k = (k + 1) & (uint64_t)(cap - 1);
            h[k] = i;
        }
        free(ps->hash);
        ps->hash = h;
        ps->hcap = cap;
    }
    uint64_t k = hash_name(name, n) & (uint64_t)(ps->hcap - 1);
    for (; ps->hash[k] >= 0; k = (k + 1) & (uint64_t)(ps->hcap - 1)) {
        const char *o = ps->rules[ps->hash[k]].name;
        if (strlen(o) == n && !memcmp(o, name, n)) return ps->hash[k];
    }
    int id = new_rule(ps, name, n);
    if (id >= 0) ps->hash[k] = id;
    return id;
}

static int new_set(parser *ps, const uint32_t *set) {
    if (ps->n_sets == ps->cap_sets) {
        uint32_t cap = ps->cap_sets ? 2 * ps->cap_sets : 512;
        uint32_t(*s)[8] = realloc(ps->sets, cap * sizeof *s);
        if (!s) return oom(ps);
        ps->sets = s;
        ps->cap_sets = cap;
    }
    memcpy(ps->sets[ps->n_sets], set, sizeof ps->sets[0]);
    return (int)ps->n_sets++;
}

/* ---------------------------------------------------------------- lexing */

static int name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skips blanks and comments; newlines too when nl. */
static void skip_space(parser *ps, int nl) {
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == ' ' || c == '\t' || (nl && (c == '\n' || c == '\r'))) ps->p++;
        else if (c == '#')
            while (ps->p < ps->end && *ps->p != '\n') ps->p++;
        else break;
    }
}

static int hexval(char c) {
    return c >= '0' && c <= '9' ? c - '0' : c >= 'a' && c <= 'f' ? c - 'a' + 10 : c >= 'A' && c <= 'F' ? c - 'A' + 10 : -1;
}

/* One character of a literal or class (an escape or a UTF-8 character) into *cp. */
static int read_char(parser *ps, uint32_t *cp) {
    const char *at = ps->p;
    if (ps->p >= ps->end) return perr(ps, at, "unexpected end of the grammar%s", "");
    unsigned char c = (unsigned char)*ps->p++;
    if (c == '\\') {
        if (ps->p >= ps->end) return perr(ps, at, "unexpected end of the grammar after \\%s", "");
        char e = *ps->p++;
        int nhex = 0;
        switch (e) {
        case 'n': *cp = '\n'; return 0;
        case 'r': *cp = '\r'; return 0;
        case 't': *cp = '\t'; return 0;
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/': *cp = (uint32_t)e; return 0;
        case 'x': nhex = 2; break;
        case 'u': nhex = 4; break;
        case 'U': nhex = 8; break;
        default: {
            char s[2] = {e, 0};
            return perr(ps, at, "unknown escape \\%s", s);
        }
        }
        uint32_t v = 0;
        for (int i = 0; i < nhex; i++) {
            int h = ps->p < ps->end ? hexval(*ps->p) : -1;
            if (h < 0) return perr(ps, at, "escape \\%s needs hexadecimal digits", (const char[]){e, 0});
            v = v * 16 + (uint32_t)h;
            ps->p++;
        }
        if (v > 0x10FFFF) return perr(ps, at, "escape beyond U+10FFFF%s", "");
        *cp = v;
        return 0;
    }
    if (c < 0x80) {
        *cp = c;
        return 0;
    }
    int n = c >= 0xF0 && c < 0xF5 ? 3 : c >= 0xE0 ? 2 : c >= 0xC2 && c < 0xE0 ? 1 : -1;
    if (c >= 0xF5) n = -1;
    uint32_t v = c & (n == 3 ? 0x07 : n == 2 ? 0x0F : 0x1F);
    for (int i = 0; i < n; i++) {
        if (ps->p >= ps->end || ((unsigned char)*ps->p & 0xC0) != 0x80) n = -1;
        else v = (v << 6) | ((unsigned char)*ps->p++ & 0x3F);
    }
    if (n < 0) return perr(ps, at, "invalid UTF-8 in the grammar%s", "");
    *cp = v;
    return 0;
}

static int put_utf8(uint32_t cp, uint8_t *o) {
    if (cp < 0x80) return o[0] = (uint8_t)cp, 1;
    if (cp < 0x800) return o[0] = (uint8_t)(0xC0 | (cp >> 6)), o[1] = (uint8_t)(0x80 | (cp & 0x3F)), 2;
    if (cp < 0x10000)
        return o[0] = (uint8_t)(0xE0 | (cp >> 12)), o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F)),
               o[2] = (uint8_t)(0x80 | (cp & 0x3F)), 3;
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

/* ---------------------------------------------------------------- classes */

typedef struct {
    parser *ps;
    int rule;            /* the class's rule, made on the first multi-byte sequence */
    uint32_t one[8];     /* single bytes, gathered into one element */
    int has_one;
} classbuild;

static int class_seq(void *ctx, int n, const uint8_t *lo, const uint8_t *hi) {
    classbuild *cb = ctx;
    parser *ps = cb->ps;
    if (n == 1) {
        for (unsigned b = lo[0]; b <= hi[0]; b++) cb->one[b >> 5] |= 1u << (b & 31);
        cb->has_one = 1;
        return 0;
    }
    if (cb->rule < 0 && (cb->rule = new_rule(ps, NULL, 0)) < 0) return -1;
    seqbuf *a = new_alt(ps, cb->rule);
    if (!a) return -1;
    for (int i = 0; i < n; i++) {
        uint32_t set[8] = {0};
        for (unsigned b = lo[i]; b <= hi[i]; b++) set[b >> 5] |= 1u << (b & 31);
        int s = new_set(ps, set);
        if (s < 0 || seq_push(ps, a, (gelem){GE_CHAR, 0, (uint32_t)s}) != 0) return -1;
    }
    return 0;
}

static int cmp_range(const void *a, const void *b) {
    const uint32_t *x = a, *y = b;
    return x[0] < y[0] ? -1 : x[0] > y[0];
}

/* Codepoint ranges [n][2] -> one element appended to seq: a byte set, or a rule of
 * byte-range alternatives. negate: the complement over U+0000..U+10FFFF. */
static int emit_class(parser *ps, seqbuf *seq, uint32_t *r, int n, int negate) {
    if (n) qsort(r, (size_t)n, 2 * sizeof *r, cmp_range);
    int m = 0; /* merge */
    for (int i = 0; i < n; i++) {
        if (m && r[2 * i] <= r[2 * (m - 1) + 1] + 1) {
            if (r[2 * i + 1] > r[2 * (m - 1) + 1]) r[2 * (m - 1) + 1] = r[2 * i + 1];
        } else {
            r[2 * m] = r[2 * i];
            r[2 * m + 1] = r[2 * i + 1];
            m++;
        }
    }
    uint32_t *use = r, *neg = NULL;
    int nu = m;
    if (negate) {
        if (!(neg = malloc((size_t)(m + 1) * 2 * sizeof *neg))) return oom(ps);
        nu = 0;
        uint32_t next = 0;
        for (int i = 0; i < m; i++) {
            if (r[2 * i] > next) neg[2 * nu] = next, neg[2 * nu + 1] = r[2 * i] - 1, nu++;
            next = r[2 * i + 1] + 1;
        }
        if (next <= 0x10FFFF) neg[2 * nu] = next, neg[2 * nu + 1] = 0x10FFFF, nu++;
        use = neg;
    }
    classbuild cb = {.ps = ps, .rule = -1};
    int rc = utf8_ranges(use, nu, class_seq, &cb);
    free(neg);
    if (rc != 0 || ps->failed) return -1;
    if (!cb.has_one && cb.rule < 0) return perr(ps, ps->p, "the character class matches nothing%s", "");
    int s = -1;
    if (cb.has_one && (s = new_set(ps, cb.one)) < 0) return -1;
    if (cb.rule < 0) return seq_push(ps, seq, (gelem){GE_CHAR, 0, (uint32_t)s});
    if (s >= 0) {
        seqbuf *a = new_alt(ps, cb.rule);
        if (!a || seq_push(ps, a, (gelem){GE_CHAR, 0, (uint32_t)s})) return -1;
    }
    return seq_push(ps, seq, (gelem){GE_RULE, 0, (uint32_t)cb.rule});
}

static int parse_class(parser *ps, seqbuf *seq) {
    const char *at = ps->p++; /* '[' */
    int negate = 0;
    if (ps->p < ps->end && *ps->p == '^') negate = 1, ps->p++;
    uint32_t *r = NULL;
    int n = 0, cap = 0;
    for (;;) {
        if (ps->p >= ps->end) {
            free(r);
            return perr(ps, at, "unterminated character class%s", "");
        }
        if (*ps->p == ']') break;
        uint32_t lo, hi;
        if (read_char(ps, &lo) != 0) break;
        hi = lo;
        if (ps->p + 1 < ps->end && *ps->p == '-' && ps->p[1] != ']') {
            const char *rat = ps->p++;
            if (read_char(ps, &hi) != 0) break;
            if (hi < lo) {
                free(r);
                return perr(ps, rat, "range end before its start in a character class%s", "");
            }
        }
        if (n == cap) {
            cap = cap ? 2 * cap : 16;
            uint32_t *nr = realloc(r, (size_t)cap * 2 * sizeof *nr);
            if (!nr) {
                free(r);
                return oom(ps);
            }
            r = nr;
        }
        r[2 * n] = lo;
        r[2 * n + 1] = hi;
        n++;
    }
    if (ps->failed) {
        free(r);
        return -1;
    }
    ps->p++; /* ']' */
    if (!n && !negate) {
        free(r);
        return perr(ps, at, "empty character class%s", "");
    }
    int rc = emit_class(ps, seq, r, n, negate);
    free(r);
    return rc;
}

/* ---------------------------------------------------------------- repetition */

/* Appends item [n] repeated min..max times (max < 0: unbounded) to seq. */
static int repeat(parser *ps, seqbuf *seq, const gelem *item, uint32_t n, long min, long max) {
    for (long i = 0; i < min; i++)
        for (uint32_t k = 0; k < n; k++)
            if (seq_push(ps, seq, item[k])) return -1;
    if (max < 0) { /* R ::= item R | empty */
        int r = new_rule(ps, NULL, 0);
        if (r < 0) return -1;
        seqbuf *a = new_alt(ps, r);
        if (!a) return -1;
        for (uint32_t k = 0; k < n; k++)
            if (seq_push(ps, a, item[k])) return -1;
        if (seq_push(ps, a, (gelem){GE_RULE, 0, (uint32_t)r}) || !new_alt(ps, r)) return -1;
        return seq_push(ps, seq, (gelem){GE_RULE, 0, (uint32_t)r});
    }
    /* up to max - min more: R_1 ::= item | empty; R_k ::= item R_{k-1} | empty */
    int prev = -1;
    for (long k = 0; k < max - min; k++) {
        int r = new_rule(ps, NULL, 0);
        if (r < 0) return -1;
        seqbuf *a = new_alt(ps, r);
        if (!a) return -1;
        for (uint32_t j = 0; j < n; j++)
            if (seq_push(ps, a, item[j])) return -1;
        if (prev >= 0 && seq_push(ps, a, (gelem){GE_RULE, 0, (uint32_t)prev})) return -1;
        if (!new_alt(ps, r)) return -1;
        prev = r;
    }
    return prev >= 0 ? seq_push(ps, seq, (gelem){GE_RULE, 0, (uint32_t)prev}) : 0;
}

static int read_count(parser *ps, long *v) {
    const char *at = ps->p;
    long x = 0;
    int digits = 0;
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        x = x * 10 + (*ps->p++ - '0');
        if (x > CELER_MAX_GRAMMAR_REPEAT)
            return perr(ps, at, "repetition count over the limit%s (CELER_MAX_GRAMMAR_REPEAT)", "");
        digits++;
    }
    *v = digits ? x : -1;
    return 0;
}

/* ---------------------------------------------------------------- sequences */

static int parse_alternates(parser *ps, int rule, int nested);

static int parse_sequence(parser *ps, seqbuf *seq, int nested) {
    uint32_t last = UINT32_MAX; /* where the last item starts */
    for (;;) {
        if (ps->p >= ps->end || ps->failed) break;
        char c = *ps->p;
        const char *at = ps->p;
        if (c == '"') {
            last = seq->n;
            ps->p++;
            for (;;) {
                if (ps->p >= ps->end || *ps->p == '\n') return perr(ps, at, "unterminated literal%s", "");
                if (*ps->p == '"') break;
                uint32_t cp;
                if (read_char(ps, &cp)) return -1;
                uint8_t b[4];
                int nb = put_utf8(cp, b);
                for (int i = 0; i < nb; i++)
                    if (seq_push(ps, seq, (gelem){GE_CHAR, 1, b[i]})) return -1;
            }
            ps->p++;
        } else if (c == '[') {
            last = seq->n;
            if (parse_class(ps, seq)) return -1;
        } else if (c == '.') {
            last = seq->n;
            ps->p++;
            uint32_t all[2] = {0, 0x10FFFF};
            if (emit_class(ps, seq, all, 1, 0)) return -1;
        } else if (name_char(c)) {
            last = seq->n;
            const char *s = ps->p;
            while (ps->p < ps->end && name_char(*ps->p)) ps->p++;
            int r = rule_id(ps, s, (size_t)(ps->p - s));
            if (r < 0) return -1;
            if (!ps->rules[r].ref_at) ps->rules[r].ref_at = s;
            if (seq_push(ps, seq, (gelem){GE_RULE, 0, (uint32_t)r})) return -1;
        } else if (c == '(') {
            last = seq->n;
            ps->p++;
            if (++ps->depth > CELER_MAX_GRAMMAR_NESTING)
                return perr(ps, at, "parentheses nested too deeply%s (CELER_MAX_GRAMMAR_NESTING)", "");
            int r = new_rule(ps, NULL, 0);
            if (r < 0) return -1;
            skip_space(ps, 1);
            if (parse_alternates(ps, r, 1)) return -1;
            if (ps->p >= ps->end || *ps->p != ')') return perr(ps, at, "unclosed parenthesis%s", "");
            ps->p++;
            ps->depth--;
            if (seq_push(ps, seq, (gelem){GE_RULE, 0, (uint32_t)r})) return -1;
        } else if (c == '*' || c == '+' || c == '?' || c == '{') {
            if (last == UINT32_MAX) return perr(ps, at, "'%s' repeats nothing", (const char[]){c, 0});
            long min = 0, max = -1;
            ps->p++;
            if (c == '+') min = 1;
            else if (c == '?') max = 1;
            else if (c == '{') {
                skip_space(ps, 0);
                if (read_count(ps, &min)) return -1;
                if (min < 0) return perr(ps, at, "{m,n} needs a count%s", "");
                skip_space(ps, 0);
                if (ps->p < ps->end && *ps->p == ',') {
                    ps->p++;
                    skip_space(ps, 0);
                    if (read_count(ps, &max)) return -1;
                } else max = min;
                skip_space(ps, 0);
                if (ps->p >= ps->end || *ps->p != '}') return perr(ps, at, "unterminated {m,n}%s", "");
                ps->p++;
                if (max >= 0 && max < min) return perr(ps, at, "{m,n} with n < m%s", "");
            }
            uint32_t n = seq->n - last;
            gelem *item = malloc((n + 1) * sizeof *item);
            if (!item) return oom(ps);
            if (n) memcpy(item, seq->e + last, n * sizeof *item);
            ps->n_el -= n;
            seq->n = last;
            int rc = repeat(ps, seq, item, n, min, max);
            free(item);
            if (rc) return -1;
        } else break;
        skip_space(ps, nested);
    }
    return ps->failed ? -1 : 0;
}

static int parse_alternates(parser *ps, int rule, int nested) {
    for (;;) {
        seqbuf *a = new_alt(ps, rule);
        if (!a) return -1;
        /* parse into a local buffer: new_alt of other rules may move this one */
        seqbuf s = {0};
        int rc = parse_sequence(ps, &s, nested);
        prule *R = &ps->rules[rule];
        R->alts[R->n - 1] = s;
        if (rc) return -1;
        if (ps->p < ps->end && *ps->p == '|') {
            ps->p++;
            skip_space(ps, 1);
            continue;
        }
        return 0;
    }
}

static int parse_rule(parser *ps) {
    const char *at = ps->p;
    while (ps->p < ps->end && name_char(*ps->p)) ps->p++;
    if (ps->p == at) return perr(ps, at, "expected a rule name%s", "");
    int r = rule_id(ps, at, (size_t)(ps->p - at));
    if (r < 0) return -1;
    if (ps->rules[r].defined) return perr(ps, at, "rule \"%s\" defined twice", ps->rules[r].name);
    ps->rules[r].defined = 1;
    ps->rules[r].def_at = at;
    skip_space(ps, 0);
    if (ps->end - ps->p < 3 || memcmp(ps->p, "::=", 3)) return perr(ps, ps->p, "expected ::=%s", "");
    ps->p += 3;
    skip_space(ps, 1);
    if (parse_alternates(ps, r, 0)) return -1;
    skip_space(ps, 0);
    if (ps->p < ps->end && *ps->p != '\n' && *ps->p != '\r') {
        if (*ps->p == ')') return perr(ps, ps->p, "unmatched ')'%s", "");
        return perr(ps, ps->p, "unexpected '%s'", (const char[]){*ps->p, 0});
    }
    return 0;
}

/* ---------------------------------------------------------------- checks */

/* Left recursion: rule r reaches itself through elements that can all match empty. */
static int check_left(parser *ps) {
    int n = ps->n_rules, changed = 1, rc = 0;
    char *nullable = calloc((size_t)n, 1), *color = calloc((size_t)n, 1);
    int *stack = malloc((size_t)n * 2 * sizeof *stack), *off = calloc((size_t)n + 1, sizeof *off), *edge = NULL;
    if (!nullable || !color || !stack || !off) goto oom;
    while (changed) {
        changed = 0;
        for (int r = 0; r < n; r++) {
            if (nullable[r]) continue;
            for (int a = 0; a < ps->rules[r].n && !nullable[r]; a++) {
                const seqbuf *s = &ps->rules[r].alts[a];
                uint32_t k = 0;
                while (k < s->n && s->e[k].type == GE_RULE && nullable[s->e[k].v]) k++;
                if (k == s->n) nullable[r] = 1, changed = 1;
            }
        }
    }
    /* edges r -> s: s can start r (every element before it can match empty) */
    for (int pass = 0; pass < 2; pass++) {
        int m = 0;
        for (int r = 0; r < n; r++) {
            if (!pass) off[r] = m;
            for (int a = 0; a < ps->rules[r].n; a++) {
                const seqbuf *s = &ps->rules[r].alts[a];
                for (uint32_t k = 0; k < s->n && s->e[k].type == GE_RULE; k++) {
                    if (pass) edge[m] = (int)s->e[k].v;
                    m++;
                    if (!nullable[s->e[k].v]) break;
                }
            }
        }
        if (!pass) {
            off[n] = m;
            if (!(edge = malloc(((size_t)m + 1) * sizeof *edge))) goto oom;
        }
    }
    for (int r0 = 0; r0 < n && !rc; r0++) {
        if (color[r0]) continue;
        int sp = 1;
        stack[0] = r0, stack[1] = off[r0], color[r0] = 1;
        while (sp && !rc) {
            int r = stack[2 * (sp - 1)], *cur = &stack[2 * (sp - 1) + 1];
            if (*cur >= off[r + 1]) {
                color[r] = 2;
                sp--;
                continue;
            }
            int next = edge[(*cur)++];
            if (color[next] == 1) {
                /* name a named rule on the cycle */
                const char *name = NULL, *at = ps->src;
                for (int i = sp - 1; i >= 0 && !name; i--) {
                    const prule *R = &ps->rules[stack[2 * i]];
                    if (R->name) name = R->name, at = R->def_at;
                    if (stack[2 * i] == next) break;
                }
                rc = perr(ps, at, "rule \"%s\" can reach itself without consuming input (left recursion, or a "
                                  "repetition of something that can match empty)", name ? name : "?");
            } else if (!color[next]) {
                color[next] = 1;
                stack[2 * sp] = next, stack[2 * sp + 1] = off[next], sp++;
            }
        }
    }
    free(nullable), free(color), free(stack), free(off), free(edge);
    return rc;
oom:
    free(nullable), free(color), free(stack), free(off), free(edge);
    return oom(ps);
}

/* ---------------------------------------------------------------- entry */

static void parser_free(parser *ps) {
    for (int i = 0; i < ps->n_rules; i++) {
        for (int a = 0; a < ps->rules[i].n; a++) free(ps->rules[i].alts[a].e);
        free(ps->rules[i].alts);
        free(ps->rules[i].name);
    }
    free(ps->rules);
    free(ps->hash);
    free(ps->sets);
}

celer_grammar *celer_grammar_compile(const char *text, size_t len) {
    if (!text) {
        err_set("grammar: no text");
        return NULL;
    }
    if (len == (size_t)-1) len = strlen(text);
    if (len > CELER_MAX_GRAMMAR_BYTES) {
        err_set("grammar: %zu bytes, over the limit of %u (CELER_MAX_GRAMMAR_BYTES)", len,
                (unsigned)CELER_MAX_GRAMMAR_BYTES);
        return NULL;
    }
    parser ps = {.src = text, .p = text, .end = text + len};
    celer_grammar *g = NULL;
    /* sets 0..255: the single bytes literals use */
    for (unsigned b = 0; b < 256; b++) {
        uint32_t set[8] = {0};
        set[b >> 5] = 1u << (b & 31);
        if (new_set(&ps, set) < 0) goto out;
    }
    for (;;) {
        skip_space(&ps, 1);
        if (ps.p >= ps.end) break;
        if (parse_rule(&ps)) goto out;
    }
    int root = -1;
    for (int i = 0; i < ps.n_rules; i++) {
        if (ps.rules[i].name && !ps.rules[i].defined) {
            perr(&ps, ps.rules[i].ref_at, "undefined rule \"%s\"", ps.rules[i].name);
            goto out;
        }
        if (ps.rules[i].name && !strcmp(ps.rules[i].name, "root")) root = i;
    }
    if (root < 0) {
        perr(&ps, ps.end, "no rule \"root\" (where matching starts)%s", "");
        goto out;
    }
    if (check_left(&ps)) goto out;
    /* flatten */
    if (!(g = calloc(1, sizeof *g))) {
        oom(&ps);
        goto out;
    }
    size_t n_alts = 0, n_el = 0;
    for (int i = 0; i < ps.n_rules; i++) {
        n_alts += (size_t)ps.rules[i].n;
        for (int a = 0; a < ps.rules[i].n; a++) n_el += ps.rules[i].alts[a].n + 1;
    }
    g->n_rules = ps.n_rules;
    g->root = root;
    g->el = malloc((n_el + 1) * sizeof *g->el);
    g->alt_off = malloc(((size_t)ps.n_rules + 1) * sizeof *g->alt_off);
    g->alts = malloc((n_alts + 1) * sizeof *g->alts);
    if (!g->el || !g->alt_off || !g->alts) {
        oom(&ps);
        celer_grammar_free(g);
        g = NULL;
        goto out;
    }
    uint32_t e = 0, k = 0;
    for (int i = 0; i < ps.n_rules; i++) {
        g->alt_off[i] = k;
        for (int a = 0; a < ps.rules[i].n; a++) {
            const seqbuf *s = &ps.rules[i].alts[a];
            g->alts[k++] = e;
            if (s->n) memcpy(g->el + e, s->e, s->n * sizeof *s->e);
            e += s->n;
            g->el[e++] = (gelem){GE_END, 0, 0};
        }
    }
    g->alt_off[ps.n_rules] = k;
    g->n_el = e;
    g->sets = ps.sets;
    g->n_sets = ps.n_sets;
    ps.sets = NULL;
out:
    parser_free(&ps);
    return g;
}

void celer_grammar_free(celer_grammar *g) {
    if (!g) return;
    free(g->el);
    free(g->sets);
    free(g->alt_off);
    free(g->alts);
    free(g);
}
