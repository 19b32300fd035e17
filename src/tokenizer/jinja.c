/* tokenizer/jinja.c: a Jinja2 interpreter for chat templates, configured as
 * transformers configures its environment (trim_blocks, lstrip_blocks, loop controls,
 * raise_exception, strftime_now, a tojson that keeps non-ASCII and key order).
 *
 * Sections: arena, values, lexer, parser, evaluation (operators, attributes, filters,
 * tests, methods, calls), statements, entry points.
 *
 * Every allocation of one render (AST, values, strings) comes from one arena that is
 * freed when the render ends, so values are shared freely and never freed one by one;
 * growing buffers (jbuf) are malloc'd, on one list while they hold memory, and become
 * arena-owned strings without a copy (jb_adopt). Errors (syntax, runtime,
 * raise_exception) free the listed buffers and unwind with longjmp to the entry point,
 * which frees the rest; messages name the template's line and column.
 *
 * Hostile templates (docs/limits.md): all memory is charged to
 * CELER_MAX_TEMPLATE_MEMORY as it grows; work (statements, iterations, elements
 * visited, bytes read or written) to CELER_MAX_TEMPLATE_STEPS; an expression taller
 * than CELER_MAX_TEMPLATE_EXPR_DEPTH is refused when parsed; and every recursive path
 * of the renderer (eval, statements, values printed, compared or serialized) enters
 * a frame counted against CELER_MAX_TEMPLATE_NESTING, which bounds the C stack. */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <utf8proc.h>

#include "base/err.h"
#include "base/limits.h"
#include "tokenizer/tok.h"

/* Helpers that the evaluator calls but that do not recurse into it stay out of its
 * stack frame, which every level of a nested expression repeats. */
#define JINJA_LEAF __attribute__((noinline))

/* ======================================================================== arena */
typedef struct jarena_blk {
    struct jarena_blk *next;
    size_t used, cap;
    _Alignas(16) unsigned char mem[];
} jarena_blk;

typedef struct jctx jctx;
static _Noreturn void jfail(jctx *c, int line, int col, const char *fmt, ...) CEL_PRINTF(4, 5);

/* ======================================================================== values */
typedef enum { JV_UNDEF, JV_NONE, JV_BOOL, JV_INT, JV_FLOAT, JV_STR, JV_LIST, JV_DICT, JV_NS, JV_LOOP, JV_MACRO,
               JV_FUNC, JV_METHOD } jv_type;

typedef struct jlist jlist;
typedef struct jdict jdict;
typedef struct jloop jloop;
typedef struct jmethod jmethod;
typedef struct jnode jnode;

typedef struct {
    jv_type t;
    int safe; /* unused marker kept for |safe (no autoescape in chat templates) */
    union {
        int64_t i;
        double f;
        struct { const char *p; size_t n; } s; /* JV_STR; JV_UNDEF: the missing name */
        jlist *l;
        jdict *d;       /* JV_DICT, JV_NS */
        jloop *lp;
        jnode *m;          /* JV_MACRO */
        int fn;         /* JV_FUNC */
        jmethod *me;
    } u;
} jv;

struct jlist { jv *v; size_t n, cap; int tuple; };
struct jdict { jv *k, *v; size_t n, cap; };
struct jloop { int64_t index0, length; jlist *items; };
struct jmethod { jv self; const char *name; };

enum { FN_RAISE, FN_STRFTIME, FN_NAMESPACE, FN_RANGE, FN_DICT };

/* ======================================================================== AST */
typedef enum {
    /* expressions */
    E_LIT, E_NAME, E_ATTR, E_ITEM, E_SLICE, E_CALL, E_FILTER, E_TEST, E_BIN, E_NEG, E_POS, E_NOT, E_AND, E_OR,
    E_COND, E_LIST, E_DICT, E_TUPLE, E_CONCAT,
    /* statements */
    S_TEXT, S_OUT, S_IF, S_FOR, S_SET, S_SETBLOCK, S_MACRO, S_BREAK, S_CONTINUE, S_BLOCK, S_FILTERBLOCK
} jn_kind;

struct jnode {
    jn_kind kind;
    int line, col;
    int op;              /* E_BIN: operator token; E_TEST: negated */
    jnode *a, *b, *c, *d;   /* operands (E_SLICE: a[b:c:d]; E_COND: b if a else c; S_FOR: a iter, b filter) */
    jnode **kids;           /* args, items, pairs (k, v, k, v ...) */
    const char **kw;     /* [nk] keyword names for call args (NULL = positional) */
    int nk;
    const char *name;    /* names, attrs, filters, tests, set target */
    size_t name_n;
    const char *attr;    /* S_SET: ns.attr target */
    const char **names;  /* S_FOR targets, S_MACRO params */
    jnode **defaults;       /* S_MACRO defaults (NULL when none) */
    int nnames;
    jnode **body, **orelse;
    int nbody, norelse;
    jv lit;
    int h;               /* expressions: height of the tree below (1 for a leaf) */
};

/* binary operators */
enum { OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN,
       OP_NOTIN };

/* ======================================================================== lexer */
typedef enum { T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END, T_NAME, T_STR, T_INT, T_FLOAT, T_OP, T_EOF } jt_kind;

typedef struct {
    jt_kind k;
    int line, col;
    const char *p; /* T_TEXT, T_NAME, T_STR (unescaped), T_OP */
    size_t n;
    int64_t i;
    double f;
} jtok;

/* A growing byte buffer of one render: its bytes are charged to the memory budget
 * and it is on the context's list while it holds any, so that a failure frees it. */
typedef struct jbuf {
    char *p;
    size_t n, cap;
    struct jbuf *prev, *next;
} jbuf;

typedef struct jown {
    struct jown *next;
    char *p;
} jown;

typedef struct jframe {
    struct jframe *parent;
    jdict vars;
} jframe;

struct jctx {
    jmp_buf jb;
    jarena_blk *arena;
    const char *src;
    size_t src_n;
    const char *where;
    jtok *toks;
    size_t ntok, captok, pos;
    jbuf *out;           /* where statements write: the result, or a capture */
    jbuf *top;           /* the result */
    size_t clean;        /* bytes of the result checked by check_output */
    const jnode *stmt;   /* the statement running: where failures without a node point */
    jframe *root;
    jframe *frame;   /* the innermost scope */
    const char *lc_pos;  /* line_col cache */
    int lc_line, lc_col;
    jbuf *bufs;          /* every buffer holding memory: a failure frees them */
    jown *owned;         /* buffers turned into strings (jb_adopt), freed with the arena */
    int depth;           /* parser: open blocks; renderer: macro calls */
    int pdepth;          /* parser: open expressions (brackets, unary operators) */
    int nest;            /* renderer: evaluation frames open (CELER_MAX_TEMPLATE_NESTING) */
    int brk, cont;
    size_t mem;          /* arena blocks, buffers and adopted strings (CELER_MAX_TEMPLATE_MEMORY) */
    uint64_t steps;      /* statements, loop iterations, elements visited (CELER_MAX_TEMPLATE_STEPS) */
    uint64_t bytes;      /* bytes read or written by filters, tests, operators and output */
};

/* Unwinds a failed render to its entry point. The buffers are freed first, while
 * the frames that hold some of them (locals of the functions being unwound) exist. */
static _Noreturn void jbail(jctx *c) {
    while (c->bufs) {
        jbuf *b = c->bufs;
        c->bufs = b->next;
        free(b->p);
    }
    longjmp(c->jb, 1);
}

static _Noreturn void jfail(jctx *c, int line, int col, const char *fmt, ...) {
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (line <= 0 && c->stmt) { /* a failure deep in a value: the statement running */
        line = c->stmt->line;
        col = c->stmt->col;
    }
    if (line > 0) err_set("%s:%d:%d: %s", c->where, line, col, msg);
    else err_set("%s: %s", c->where, msg);
    jbail(c);
}

static _Noreturn void mem_fail(jctx *c) {
    jfail(c, 0, 0, "rendering needs more than %u bytes of memory (the limit)", CELER_MAX_TEMPLATE_MEMORY);
}

/* Counts n more bytes of working memory against CELER_MAX_TEMPLATE_MEMORY. */
static void charge(jctx *c, size_t n) {
    if (n > CELER_MAX_TEMPLATE_MEMORY || c->mem > CELER_MAX_TEMPLATE_MEMORY - n) mem_fail(c);
    c->mem += n;
}

static _Noreturn void steps_fail(jctx *c, const jnode *at);

/* Counts work: `steps` statements, loop iterations or elements visited, `bytes`
 * bytes read or written (CELER_TEMPLATE_STEP_BYTES of them make a step). at names
 * the place in the message (NULL: none). */
static inline void work(jctx *c, const jnode *at, uint64_t steps, uint64_t bytes) {
    c->steps += steps;
    c->bytes += bytes;
    if (c->steps + c->bytes / CELER_TEMPLATE_STEP_BYTES > CELER_MAX_TEMPLATE_STEPS) steps_fail(c, at);
}

/* Enters one more evaluation frame (an expression, a statement, a level of a value
 * printed or compared): the C stack the renderer uses is bounded by
 * CELER_MAX_TEMPLATE_NESTING of them. The caller decrements c->nest on the way out
 * (a failure unwinds past it, which ends the render anyway). */
static void nest_in(jctx *c, const jnode *at, const char *what) {
    if (++c->nest > CELER_MAX_TEMPLATE_NESTING)
        jfail(c, at ? at->line : 0, at ? at->col : 0, "%s nested too deeply (over %d levels of expressions, blocks, "
              "macro calls and values)", what, CELER_MAX_TEMPLATE_NESTING);
}

/* Makes room for extra more bytes (and a NUL) in b, charging the growth. A buffer
 * joins the context's list when it first allocates, so that a failure frees it. */
static void jb_grow(jctx *c, jbuf *b, size_t extra) {
    if (extra > SIZE_MAX / 2 - b->n) mem_fail(c);
    size_t need = b->n + extra + 1;
    if (need <= b->cap) return;
    size_t nc = b->cap ? b->cap : 64;
    while (nc < need) nc *= 2;
    charge(c, nc - b->cap);
    char *np = realloc(b->p, nc);
    if (!np) jfail(c, 0, 0, "out of memory");
    if (!b->p) {
        b->prev = NULL;
        b->next = c->bufs;
        if (c->bufs) c->bufs->prev = b;
        c->bufs = b;
    }
    b->p = np;
    b->cap = nc;
}

static void jb_unlink(jctx *c, jbuf *b) {
    if (b->prev) b->prev->next = b->next;
    else c->bufs = b->next;
    if (b->next) b->next->prev = b->prev;
}

/* Frees b's bytes (the jbuf itself stays usable, empty). */
static void jb_free(jctx *c, jbuf *b) {
    if (b->p) {
        jb_unlink(c, b);
        c->mem -= b->cap;
        free(b->p);
    }
    memset(b, 0, sizeof *b);
}

static void jput(jctx *c, jbuf *b, const void *s, size_t n) {
    if (!n) return;
    work(c, NULL, 0, n);
    if (b->n + n + 1 > b->cap) jb_grow(c, b, n);
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

static inline void jputc(jctx *c, jbuf *b, char ch) {
    if (b->n + 2 > b->cap) jb_grow(c, b, 1);
    b->p[b->n++] = ch;
    if (!(b->n & 63)) work(c, NULL, 0, 64);
}

/* n copies of ch */
static void jfill(jctx *c, jbuf *b, char ch, size_t n) {
    if (!n) return;
    work(c, NULL, 0, n);
    jb_grow(c, b, n);
    memset(b->p + b->n, ch, n);
    b->n += n;
}

static void *jalloc(jctx *c, size_t n) {
    if (n > CELER_MAX_TEMPLATE_MEMORY) mem_fail(c);
    n = (n + 15) & ~(size_t)15;
    jarena_blk *b = c->arena;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > 65536 ? n : 65536;
        charge(c, cap);
        b = malloc(sizeof *b + cap);
        if (!b) jfail(c, 0, 0, "out of memory");
        b->used = 0;
        b->cap = cap;
        b->next = c->arena;
        c->arena = b;
    }
    void *p = b->mem + b->used;
    b->used += n;
    return p;
}

/* The bytes of b become a string owned by the render (freed when it ends), without
 * a copy; b is left empty. */
static const char *jb_adopt(jctx *c, jbuf *b, size_t *n) {
    *n = b->n;
    if (!b->p) return "";
    jown *o = jalloc(c, sizeof *o);
    b->p[b->n] = 0;
    jb_unlink(c, b);
    o->p = b->p;
    o->next = c->owned;
    c->owned = o;
    memset(b, 0, sizeof *b);
    return o->p;
}

static char *jstrdup(jctx *c, const char *s, size_t n) {
    char *p = jalloc(c, n + 1);
    memcpy(p, s, n);
    p[n] = 0;
    return p;
}

static void line_col(jctx *c, const char *p, int *line, int *col) {
    /* incremental: tokens come in order, so lexing stays linear */
    const char *q = c->src;
    int l = 1, k = 1;
    if (c->lc_pos && p >= c->lc_pos) {
        q = c->lc_pos;
        l = c->lc_line;
        k = c->lc_col;
    }
    for (; q < p && q < c->src + c->src_n; q++) {
        if (*q == '\n') { l++; k = 1; }
        else k++;
    }
    c->lc_pos = q;
    c->lc_line = l;
    c->lc_col = k;
    *line = l;
    *col = k;
}

static jtok *tok_push(jctx *c, jt_kind k, const char *at) {
    if (c->ntok == c->captok) {
        size_t nc = c->captok ? c->captok * 2 : 256;
        jtok *nt = jalloc(c, nc * sizeof *nt);
        if (c->ntok) memcpy(nt, c->toks, c->ntok * sizeof *nt);
        c->toks = nt;
        c->captok = nc;
    }
    jtok *t = &c->toks[c->ntok++];
    memset(t, 0, sizeof *t);
    t->k = k;
    line_col(c, at, &t->line, &t->col);
    return t;
}

static int is_ident0(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z') || ch == '_'; }
static int is_ident(char ch) { return is_ident0(ch) || (ch >= '0' && ch <= '9'); }

/* Lexes the inside of a tag from p until its closing delimiter; returns the position
 * after the delimiter and whether the closing had '-'. */
static const char *lex_tag(jctx *c, const char *p, const char *end, int is_var, int *strip_after) {
    const char *close = is_var ? "}}" : "%}";
    int depth = 0; /* brackets: a '}}' inside a dict literal is not the end */
    for (;;) {
        while (p < end && (*p == ' ' || *p == '\t' || *p == '\n' || *p == '\r')) p++;
        if (p >= end) {
            int l, k;
            line_col(c, p, &l, &k);
            jfail(c, l, k, "unexpected end of template inside a %s tag", is_var ? "{{ }}" : "{% %}");
        }
        if (depth == 0 && *p == '-' && p + 2 < end + 0 + 1 && p + 3 <= end && !memcmp(p + 1, close, 2)) {
            *strip_after = 1;
            tok_push(c, is_var ? T_VAR_END : T_BLOCK_END, p);
            return p + 3;
        }
        if (depth == 0 && p + 2 <= end && !memcmp(p, close, 2)) {
            *strip_after = 0;
            tok_push(c, is_var ? T_VAR_END : T_BLOCK_END, p);
            return p + 2;
        }
        char ch = *p;
        if (is_ident0(ch)) {
            const char *s = p;
            while (p < end && is_ident(*p)) p++;
            jtok *t = tok_push(c, T_NAME, s);
            t->p = s;
            t->n = (size_t)(p - s);
        } else if (ch >= '0' && ch <= '9') {
            const char *s = p;
            while (p < end && ((*p >= '0' && *p <= '9') || *p == '_')) p++;
            int is_f = 0;
            if (p + 1 < end && *p == '.' && p[1] >= '0' && p[1] <= '9') {
                is_f = 1;
                p++;
                while (p < end && *p >= '0' && *p <= '9') p++;
            }
            if (p < end && (*p == 'e' || *p == 'E')) {
                const char *q = p + 1;
                if (q < end && (*q == '+' || *q == '-')) q++;
                if (q < end && *q >= '0' && *q <= '9') {
                    is_f = 1;
                    p = q;
                    while (p < end && *p >= '0' && *p <= '9') p++;
                }
            }
            char buf[64];
            size_t bn = 0;
            for (const char *q = s; q < p && bn < sizeof buf - 1; q++)
                if (*q != '_') buf[bn++] = *q;
            buf[bn] = 0;
            jtok *t = tok_push(c, is_f ? T_FLOAT : T_INT, s);
            if (is_f) t->f = strtod(buf, NULL);
            else t->i = strtoll(buf, NULL, 10);
        } else if (ch == '\'' || ch == '"') {
            const char *s = p++;
            jbuf b = {0};
            while (p < end && *p != ch) {
                if (*p == '\\' && p + 1 < end) {
                    p++;
                    switch (*p) {
                    case 'n': jputc(c, &b, '\n'); break;
                    case 't': jputc(c, &b, '\t'); break;
                    case 'r': jputc(c, &b, '\r'); break;
                    case '\\': jputc(c, &b, '\\'); break;
                    case '\'': jputc(c, &b, '\''); break;
                    case '"': jputc(c, &b, '"'); break;
                    case '0': jputc(c, &b, '\0'); break;
                    case 'u':
                    case 'x': {
                        int nd = *p == 'u' ? 4 : 2;
                        unsigned v = 0;
                        int ok = p + nd < end;
                        for (int i = 1; ok && i <= nd; i++) {
                            char h = p[i];
                            v <<= 4;
                            if (h >= '0' && h <= '9') v |= (unsigned)(h - '0');
                            else if (h >= 'a' && h <= 'f') v |= (unsigned)(h - 'a' + 10);
                            else if (h >= 'A' && h <= 'F') v |= (unsigned)(h - 'A' + 10);
                            else ok = 0;
                        }
                        if (ok) {
                            char e[4];
                            jput(c, &b, e, (size_t)utf8_enc(v, e));
                            p += nd;
                        } else {
                            jputc(c, &b, '\\');
                            jputc(c, &b, *p);
                        }
                        break;
                    }
                    default: jputc(c, &b, '\\'); jputc(c, &b, *p); break;
                    }
                    p++;
                } else jputc(c, &b, *p++);
            }
            if (p >= end) {
                jb_free(c, &b);
                int l, k;
                line_col(c, s, &l, &k);
                jfail(c, l, k, "unterminated string literal");
            }
            p++;
            jtok *t = tok_push(c, T_STR, s);
            t->p = jb_adopt(c, &b, &t->n);
        } else {
            static const char *const ops3[] = {NULL};
            (void)ops3;
            static const char *const ops2[] = {"==", "!=", "<=", ">=", "//", "**"};
            const char *s = p;
            size_t n = 1;
            for (size_t i = 0; i < sizeof ops2 / sizeof *ops2; i++)
                if (p + 2 <= end && !memcmp(p, ops2[i], 2)) { n = 2; break; }
            if (n == 1 && !strchr("+-*/%~()[]{}.,:|=<>!", ch)) {
                int l, k;
                line_col(c, p, &l, &k);
                jfail(c, l, k, "unexpected character '%c' in tag", ch);
            }
            if (n == 1 && (ch == '(' || ch == '[' || ch == '{')) depth++;
            if (n == 1 && (ch == ')' || ch == ']' || ch == '}') && depth > 0) depth--;
            jtok *t = tok_push(c, T_OP, s);
            t->p = s;
            t->n = n;
            p += n;
        }
    }
}

/* Finds the next tag opening at or after p. */
static const char *find_open(const char *p, const char *end) {
    while (p + 1 < end) {
        const char *q = memchr(p, '{', (size_t)(end - p - 1));
        if (!q) return end;
        if (q[1] == '{' || q[1] == '%' || q[1] == '#') return q;
        p = q + 1;
    }
    return end;
}

static void lex(jctx *c) {
    const char *p = c->src, *end = c->src + c->src_n;
    int strip_next = 0;   /* previous tag ended with '-' */
    int trim_nl = 0;      /* previous tag was a block or comment: drop one newline (trim_blocks) */
    while (p < end) {
        const char *o = find_open(p, end);
        const char *ts = p, *te = o;
        /* start of the text: effects of the previous tag */
        if (strip_next) {
            while (ts < te && (*ts == ' ' || *ts == '\t' || *ts == '\n' || *ts == '\r')) ts++;
        } else if (trim_nl) {
            if (ts < te && *ts == '\n') ts++;
            else if (ts + 1 < te && ts[0] == '\r' && ts[1] == '\n') ts += 2;
        }
        /* end of the text: effects of the next tag */
        int kind = 0, ctl = 0;
        if (o < end) {
            kind = o[1];
            ctl = o + 2 < end ? o[2] : 0;
        }
        if (o < end && ctl == '-') {
            while (te > ts && (te[-1] == ' ' || te[-1] == '\t' || te[-1] == '\n' || te[-1] == '\r')) te--;
        } else if (o < end && (kind == '%' || kind == '#') && ctl != '+') {
            /* lstrip_blocks: spaces and tabs between a line start and the tag go */
            const char *q = te;
            while (q > ts && (q[-1] == ' ' || q[-1] == '\t')) q--;
            int at_line_start = (q > ts) ? q[-1] == '\n' : (q == c->src || q[-1] == '\n');
            if (at_line_start) te = q;
        }
        if (te > ts) {
            jtok *t = tok_push(c, T_TEXT, ts);
            t->p = ts;
            t->n = (size_t)(te - ts);
        }
        if (o >= end) break;
        const char *q = o + 2;
        if (ctl == '-' || ctl == '+') q++;
        if (kind == '#') {
            const char *e = q;
            for (;;) {
                e = e < end ? memchr(e, '#', (size_t)(end - e)) : NULL;
                if (!e || e + 1 >= end) {
                    int l, k;
                    line_col(c, o, &l, &k);
                    jfail(c, l, k, "unterminated comment");
                }
                if (e[1] == '}') break;
                e++;
            }
            strip_next = e > q && e[-1] == '-';
            trim_nl = 1;
            p = e + 2;
            continue;
        }
        int is_var = kind == '{';
        size_t first_tok = c->ntok;
        tok_push(c, is_var ? T_VAR_BEGIN : T_BLOCK_BEGIN, o);
        int sa = 0;
        p = lex_tag(c, q, end, is_var, &sa);
        strip_next = sa;
        trim_nl = !is_var;
        /* {% raw %} ... {% endraw %}: the inside is text */
        if (!is_var && c->ntok - first_tok == 3 && c->toks[first_tok + 1].k == T_NAME && c->toks[first_tok + 1].n == 3 &&
            !memcmp(c->toks[first_tok + 1].p, "raw", 3)) {
            c->ntok = first_tok;
            const char *r = p, *raw_start = p;
            for (;;) {
                const char *e = find_open(r, end);
                if (e >= end) {
                    int l, k;
                    line_col(c, o, &l, &k);
                    jfail(c, l, k, "missing {%% endraw %%}");
                }
                const char *x = e + 2;
                int m = 0;
                if (x < end && (*x == '-' || *x == '+')) { m = *x == '-'; x++; }
                while (x < end && (*x == ' ' || *x == '\t')) x++;
                if (e[1] == '%' && end - x >= 6 && !memcmp(x, "endraw", 6)) {
                    const char *rs = raw_start, *re = e;
                    if (sa) while (rs < re && (*rs == ' ' || *rs == '\t' || *rs == '\n' || *rs == '\r')) rs++;
                    else if (rs < re && *rs == '\n') rs++;
                    if (m) while (re > rs && (re[-1] == ' ' || re[-1] == '\t' || re[-1] == '\n' || re[-1] == '\r')) re--;
                    if (re > rs) {
                        jtok *t = tok_push(c, T_TEXT, rs);
                        t->p = rs;
                        t->n = (size_t)(re - rs);
                    }
                    x += 6;
                    while (x < end && (*x == ' ' || *x == '\t')) x++;
                    strip_next = 0;
                    if (x < end && *x == '-') { strip_next = 1; x++; }
                    if (end - x < 2 || memcmp(x, "%}", 2)) {
                        int l, k;
                        line_col(c, x, &l, &k);
                        jfail(c, l, k, "expected '%%}' after endraw");
                    }
                    p = x + 2;
                    trim_nl = 1;
                    break;
                }
                r = e + 1;
            }
        }
    }
    tok_push(c, T_EOF, end);
}

/* ======================================================================== parser */
static jtok *peek(jctx *c) { return &c->toks[c->pos]; }
static jtok *peek2(jctx *c) { return &c->toks[c->pos + 1 < c->ntok ? c->pos + 1 : c->pos]; }
static jtok *next_tok(jctx *c) {
    jtok *t = &c->toks[c->pos];
    if (t->k != T_EOF) c->pos++;
    return t;
}
static int is_op(const jtok *t, const char *op) { return t->k == T_OP && t->n == strlen(op) && !memcmp(t->p, op, t->n); }
static int is_name(const jtok *t, const char *nm) { return t->k == T_NAME && t->n == strlen(nm) && !memcmp(t->p, nm, t->n); }

static const char *tok_desc(const jtok *t, char *buf, size_t n) {
    switch (t->k) {
    case T_EOF: return "end of template";
    case T_TEXT: return "text";
    case T_VAR_END: return "'}}'";
    case T_BLOCK_END: return "'%}'";
    case T_VAR_BEGIN: return "'{{'";
    case T_BLOCK_BEGIN: return "'{%'";
    case T_STR: return "a string";
    case T_INT:
    case T_FLOAT: return "a number";
    default: snprintf(buf, n, "'%.*s'", (int)(t->n > 40 ? 40 : t->n), t->p); return buf;
    }
}

static _Noreturn void unexpected(jctx *c, const jtok *t, const char *want) {
    char b[64];
    jfail(c, t->line, t->col, "expected %s, got %s", want, tok_desc(t, b, sizeof b));
}

static void expect_op(jctx *c, const char *op) {
    jtok *t = next_tok(c);
    if (!is_op(t, op)) {
        char w[16];
        snprintf(w, sizeof w, "'%s'", op);
        unexpected(c, t, w);
    }
}

static const char *expect_name(jctx *c) {
    jtok *t = next_tok(c);
    if (t->k != T_NAME) unexpected(c, t, "a name");
    return jstrdup(c, t->p, t->n);
}

static jnode *node(jctx *c, jn_kind k, const jtok *at) {
    jnode *n = jalloc(c, sizeof *n);
    memset(n, 0, sizeof *n);
    n->kind = k;
    n->line = at->line;
    n->col = at->col;
    n->h = 1;
    return n;
}

/* Marks an expression node complete: its height is one more than its tallest
 * operand's. Evaluating recurses once per level, so the height is what the stack
 * needs; a template whose expression is taller than CELER_MAX_TEMPLATE_EXPR_DEPTH
 * (a chain of 10,000 filters, say) is refused when it is parsed. */
static jnode *seal(jctx *c, jnode *n) {
    int h = 0;
    jnode *ops[4] = {n->a, n->b, n->c, n->d};
    for (int i = 0; i < 4; i++)
        if (ops[i] && ops[i]->h > h) h = ops[i]->h;
    for (int i = 0; i < n->nk; i++)
        if (n->kids[i] && n->kids[i]->h > h) h = n->kids[i]->h;
    n->h = h + 1;
    if (n->h > CELER_MAX_TEMPLATE_EXPR_DEPTH)
        jfail(c, n->line, n->col, "expression nested too deeply (over %d levels of operators, filters, attributes "
              "and calls)", CELER_MAX_TEMPLATE_EXPR_DEPTH);
    return n;
}

/* growable node arrays inside the arena */
typedef struct { jnode **v; const char **kw; int n, cap; } nvec;
static void nvec_push(jctx *c, nvec *v, jnode *x, const char *kw) {
    if (v->n == v->cap) {
        int nc = v->cap ? v->cap * 2 : 4;
        jnode **nv = jalloc(c, (size_t)nc * sizeof *nv);
        const char **nk = jalloc(c, (size_t)nc * sizeof *nk);
        if (v->n) {
            memcpy(nv, v->v, (size_t)v->n * sizeof *nv);
            memcpy(nk, v->kw, (size_t)v->n * sizeof *nk);
        }
        v->v = nv;
        v->kw = nk;
        v->cap = nc;
    }
    v->v[v->n] = x;
    v->kw[v->n] = kw;
    v->n++;
}

static jnode *parse_expr(jctx *c);
static jnode *parse_or(jctx *c);
static jnode *parse_unary(jctx *c, int with_filter);

/* (args) after a callee or filter name: positional and name=value */
static void parse_args(jctx *c, jnode *n) {
    nvec v = {0};
    expect_op(c, "(");
    while (!is_op(peek(c), ")")) {
        const char *kw = NULL;
        if (peek(c)->k == T_NAME && is_op(peek2(c), "=")) {
            kw = expect_name(c);
            next_tok(c);
        }
        nvec_push(c, &v, parse_expr(c), kw);
        if (!is_op(peek(c), ",")) break;
        next_tok(c);
    }
    expect_op(c, ")");
    n->kids = v.v;
    n->kw = v.kw;
    n->nk = v.n;
}

static jnode *parse_primary(jctx *c) {
    jtok *t = next_tok(c);
    jnode *n;
    switch (t->k) {
    case T_NAME:
        n = node(c, E_LIT, t);
        if (is_name(t, "true") || is_name(t, "True")) { n->lit.t = JV_BOOL; n->lit.u.i = 1; return n; }
        if (is_name(t, "false") || is_name(t, "False")) { n->lit.t = JV_BOOL; n->lit.u.i = 0; return n; }
        if (is_name(t, "none") || is_name(t, "None")) { n->lit.t = JV_NONE; return n; }
        n->kind = E_NAME;
        n->name = jstrdup(c, t->p, t->n);
        n->name_n = t->n;
        return n;
    case T_STR: {
        n = node(c, E_LIT, t);
        /* adjacent string literals concatenate */
        jbuf b = {0};
        jput(c, &b, t->p, t->n);
        while (peek(c)->k == T_STR) {
            jtok *u = next_tok(c);
            jput(c, &b, u->p, u->n);
        }
        n->lit.t = JV_STR;
        n->lit.u.s.p = jb_adopt(c, &b, &n->lit.u.s.n);
        return n;
    }
    case T_INT: n = node(c, E_LIT, t); n->lit.t = JV_INT; n->lit.u.i = t->i; return n;
    case T_FLOAT: n = node(c, E_LIT, t); n->lit.t = JV_FLOAT; n->lit.u.f = t->f; return n;
    case T_OP:
        if (is_op(t, "(")) {
            if (is_op(peek(c), ")")) { next_tok(c); n = node(c, E_TUPLE, t); return n; }
            jnode *e = parse_expr(c);
            if (is_op(peek(c), ",")) {
                nvec v = {0};
                nvec_push(c, &v, e, NULL);
                while (is_op(peek(c), ",")) {
                    next_tok(c);
                    if (is_op(peek(c), ")")) break;
                    nvec_push(c, &v, parse_expr(c), NULL);
                }
                n = node(c, E_TUPLE, t);
                n->kids = v.v;
                n->nk = v.n;
                expect_op(c, ")");
                return seal(c, n);
            }
            expect_op(c, ")");
            return e;
        }
        if (is_op(t, "[")) {
            nvec v = {0};
            while (!is_op(peek(c), "]")) {
                nvec_push(c, &v, parse_expr(c), NULL);
                if (!is_op(peek(c), ",")) break;
                next_tok(c);
            }
            expect_op(c, "]");
            n = node(c, E_LIST, t);
            n->kids = v.v;
            n->nk = v.n;
            return seal(c, n);
        }
        if (is_op(t, "{")) {
            nvec v = {0};
            while (!is_op(peek(c), "}")) {
                nvec_push(c, &v, parse_expr(c), NULL);
                expect_op(c, ":");
                nvec_push(c, &v, parse_expr(c), NULL);
                if (!is_op(peek(c), ",")) break;
                next_tok(c);
            }
            expect_op(c, "}");
            n = node(c, E_DICT, t);
            n->kids = v.v;
            n->nk = v.n;
            return seal(c, n);
        }
        break;
    default: break;
    }
    unexpected(c, t, "an expression");
}

static jnode *parse_postfix(jctx *c, jnode *n) {
    for (;;) {
        jtok *t = peek(c);
        if (is_op(t, ".")) {
            next_tok(c);
            jtok *nm = next_tok(c);
            jnode *a = node(c, E_ATTR, t);
            a->a = n;
            if (nm->k == T_NAME) a->name = jstrdup(c, nm->p, nm->n);
            else if (nm->k == T_INT) { /* x.0 is x[0] */
                a->kind = E_ITEM;
                a->b = node(c, E_LIT, nm);
                a->b->lit.t = JV_INT;
                a->b->lit.u.i = nm->i;
            } else unexpected(c, nm, "an attribute name");
            n = seal(c, a);
        } else if (is_op(t, "[")) {
            next_tok(c);
            jnode *lo = NULL, *hi = NULL, *st = NULL;
            int is_slice = 0;
            if (!is_op(peek(c), ":")) lo = parse_expr(c);
            if (is_op(peek(c), ":")) {
                is_slice = 1;
                next_tok(c);
                if (!is_op(peek(c), "]") && !is_op(peek(c), ":")) hi = parse_expr(c);
                if (is_op(peek(c), ":")) {
                    next_tok(c);
                    if (!is_op(peek(c), "]")) st = parse_expr(c);
                }
            }
            expect_op(c, "]");
            jnode *s = node(c, is_slice ? E_SLICE : E_ITEM, t);
            s->a = n;
            s->b = lo;
            s->c = hi;
            s->d = st;
            n = seal(c, s);
        } else if (is_op(t, "(")) {
            jnode *call = node(c, E_CALL, t);
            call->a = n;
            parse_args(c, call);
            n = seal(c, call);
        } else return n;
    }
}

static jnode *parse_filters(jctx *c, jnode *n) {
    for (;;) {
        jtok *t = peek(c);
        if (is_op(t, "|")) {
            next_tok(c);
            jnode *f = node(c, E_FILTER, peek(c));
            f->name = expect_name(c);
            f->a = n;
            if (is_op(peek(c), "(")) parse_args(c, f);
            n = seal(c, f);
        } else if (is_name(t, "is")) {
            next_tok(c);
            jnode *f = node(c, E_TEST, t);
            if (is_name(peek(c), "not")) { next_tok(c); f->op = 1; }
            jtok *nm = next_tok(c);
            if (nm->k == T_NAME) f->name = jstrdup(c, nm->p, nm->n);
            else if (is_name(nm, "none")) f->name = "none";
            else unexpected(c, nm, "a test name");
            f->a = n;
            if (is_op(peek(c), "(")) parse_args(c, f);
            else {
                /* a single bare argument: "is divisibleby 3", "is sameas none" */
                jtok *q = peek(c);
                if (q->k == T_STR || q->k == T_INT || q->k == T_FLOAT ||
                    (q->k == T_NAME && !is_name(q, "and") && !is_name(q, "or") && !is_name(q, "else") &&
                     !is_name(q, "if") && !is_name(q, "is") && !is_name(q, "in") && !is_name(q, "not"))) {
                    nvec v = {0};
                    nvec_push(c, &v, parse_primary(c), NULL);
                    f->kids = v.v;
                    f->kw = v.kw;
                    f->nk = v.n;
                }
            }
            n = seal(c, f);
        } else return n;
    }
}

static jnode *parse_unary(jctx *c, int with_filter) {
    jtok *t = peek(c);
    if (++c->pdepth > CELER_MAX_TEMPLATE_EXPR_DEPTH) jfail(c, t->line, t->col, "expression nested too deeply");
    jnode *n;
    if (is_op(t, "-") || is_op(t, "+")) {
        next_tok(c);
        n = node(c, is_op(t, "-") ? E_NEG : E_POS, t);
        n->a = parse_unary(c, 0);
        seal(c, n);
    } else {
        n = parse_postfix(c, parse_primary(c));
    }
    if (with_filter) n = parse_filters(c, n);
    c->pdepth--;
    return n;
}

static jnode *bin(jctx *c, const jtok *t, int op, jnode *a, jnode *b) {
    jnode *n = node(c, E_BIN, t);
    n->op = op;
    n->a = a;
    n->b = b;
    return seal(c, n);
}

static jnode *parse_pow(jctx *c) {
    jnode *n = parse_unary(c, 1);
    while (is_op(peek(c), "**")) {
        jtok *t = next_tok(c);
        n = bin(c, t, OP_POW, n, parse_unary(c, 1));
    }
    return n;
}

static jnode *parse_math2(jctx *c) {
    jnode *n = parse_pow(c);
    for (;;) {
        jtok *t = peek(c);
        int op = is_op(t, "*") ? OP_MUL : is_op(t, "/") ? OP_DIV : is_op(t, "//") ? OP_FLOORDIV : is_op(t, "%") ? OP_MOD : 0;
        if (!op) return n;
        next_tok(c);
        n = bin(c, t, op, n, parse_pow(c));
    }
}

static jnode *parse_concat(jctx *c) {
    jnode *n = parse_math2(c);
    while (is_op(peek(c), "~")) {
        jtok *t = next_tok(c);
        jnode *x = node(c, E_CONCAT, t);
        x->a = n;
        x->b = parse_math2(c);
        n = seal(c, x);
    }
    return n;
}

static jnode *parse_math1(jctx *c) {
    jnode *n = parse_concat(c);
    for (;;) {
        jtok *t = peek(c);
        int op = is_op(t, "+") ? OP_ADD : is_op(t, "-") ? OP_SUB : 0;
        if (!op) return n;
        next_tok(c);
        n = bin(c, t, op, n, parse_concat(c));
    }
}

static jnode *parse_compare(jctx *c) {
    jnode *n = parse_math1(c);
    for (;;) {
        jtok *t = peek(c);
        int op = is_op(t, "==") ? OP_EQ : is_op(t, "!=") ? OP_NE : is_op(t, "<") ? OP_LT : is_op(t, "<=") ? OP_LE
               : is_op(t, ">") ? OP_GT : is_op(t, ">=") ? OP_GE : is_name(t, "in") ? OP_IN : 0;
        if (!op && is_name(t, "not") && is_name(peek2(c), "in")) {
            next_tok(c);
            op = OP_NOTIN;
        }
        if (!op) return n;
        next_tok(c);
        n = bin(c, t, op, n, parse_math1(c));
    }
}

static jnode *parse_not(jctx *c) {
    jtok *t = peek(c);
    if (is_name(t, "not")) {
        next_tok(c);
        if (++c->pdepth > CELER_MAX_TEMPLATE_EXPR_DEPTH) jfail(c, t->line, t->col, "expression nested too deeply");
        jnode *n = node(c, E_NOT, t);
        n->a = parse_not(c);
        seal(c, n);
        c->pdepth--;
        return n;
    }
    return parse_compare(c);
}

static jnode *parse_and(jctx *c) {
    jnode *n = parse_not(c);
    while (is_name(peek(c), "and")) {
        jtok *t = next_tok(c);
        jnode *x = node(c, E_AND, t);
        x->a = n;
        x->b = parse_not(c);
        n = seal(c, x);
    }
    return n;
}

static jnode *parse_or(jctx *c) {
    jnode *n = parse_and(c);
    while (is_name(peek(c), "or")) {
        jtok *t = next_tok(c);
        jnode *x = node(c, E_OR, t);
        x->a = n;
        x->b = parse_and(c);
        n = seal(c, x);
    }
    return n;
}

static jnode *parse_expr(jctx *c) {
    /* brackets, arguments, conditionals: each level is about a dozen C frames */
    if (++c->pdepth > CELER_MAX_TEMPLATE_EXPR_DEPTH) jfail(c, peek(c)->line, peek(c)->col, "expression nested too deeply");
    jnode *n = parse_or(c);
    while (is_name(peek(c), "if")) {
        jtok *t = next_tok(c);
        jnode *x = node(c, E_COND, t);
        x->b = n;
        x->a = parse_or(c);
        if (is_name(peek(c), "else")) {
            next_tok(c);
            x->c = parse_expr(c);
        }
        n = seal(c, x);
    }
    c->pdepth--;
    return n;
}

/* statements */
typedef struct { jnode **v; int n, cap; } svec;
static void svec_push(jctx *c, svec *v, jnode *x) {
    if (v->n == v->cap) {
        int nc = v->cap ? v->cap * 2 : 8;
        jnode **nv = jalloc(c, (size_t)nc * sizeof *nv);
        if (v->n) memcpy(nv, v->v, (size_t)v->n * sizeof *nv);
        v->v = nv;
        v->cap = nc;
    }
    v->v[v->n++] = x;
}

static void expect_block_end(jctx *c) {
    jtok *t = next_tok(c);
    if (t->k != T_BLOCK_END) unexpected(c, t, "'%}'");
}

/* Parses statements until a block tag whose name is one of `ends` (NULL-terminated);
 * leaves the position on that name and returns which one matched (-1 at EOF when
 * ends is NULL). */
static int parse_body(jctx *c, svec *out, const char *const *ends, const jtok *opener, const char *opener_name);

static jnode *parse_statement_inner(jctx *c, jtok *begin);
static jnode *parse_statement(jctx *c, jtok *begin) {
    if (++c->depth > CELER_MAX_TEMPLATE_DEPTH) jfail(c, begin->line, begin->col, "blocks nested too deeply");
    jnode *n = parse_statement_inner(c, begin);
    c->depth--;
    return n;
}

/* After "{% else %}" of an if or for: the else body into n->orelse, up to and through
 * "{% end %}" (endif, endfor). */
static void parse_orelse(jctx *c, jnode *n, const char *end, jtok *begin, const char *opener) {
    const char *const ends[] = {end, NULL};
    svec els = {0};
    parse_body(c, &els, ends, begin, opener);
    n->orelse = els.v;
    n->norelse = els.n;
    next_tok(c);
    expect_block_end(c);
}

static jnode *parse_statement_inner(jctx *c, jtok *begin) {
    jtok *t = next_tok(c);
    if (t->k != T_NAME) unexpected(c, t, "a statement name");
    jnode *n;
    if (is_name(t, "if") || is_name(t, "elif")) {
        n = node(c, S_IF, t);
        n->a = parse_expr(c);
        expect_block_end(c);
        static const char *const ends[] = {"elif", "else", "endif", NULL};
        svec body = {0};
        int which = parse_body(c, &body, ends, begin, "if");
        n->body = body.v;
        n->nbody = body.n;
        if (which == 0) {
            /* elif: parse as a nested if that consumes the endif */
            jnode *sub = parse_statement(c, begin);
            n->orelse = jalloc(c, sizeof(jnode *));
            n->orelse[0] = sub;
            n->norelse = 1;
            return n;
        }
        next_tok(c);
        expect_block_end(c);
        if (which == 1) parse_orelse(c, n, "endif", begin, "if");
        return n;
    }
    if (is_name(t, "for")) {
        n = node(c, S_FOR, t);
        const char *names[8];
        int nn = 0;
        int paren = 0;
        if (is_op(peek(c), "(")) { next_tok(c); paren = 1; }
        for (;;) {
            if (nn == 8) jfail(c, t->line, t->col, "too many loop variables");
            names[nn++] = expect_name(c);
            if (!is_op(peek(c), ",")) break;
            next_tok(c);
        }
        if (paren) expect_op(c, ")");
        n->names = jalloc(c, (size_t)nn * sizeof *n->names);
        memcpy(n->names, names, (size_t)nn * sizeof *names);
        n->nnames = nn;
        jtok *in = next_tok(c);
        if (!is_name(in, "in")) unexpected(c, in, "'in'");
        n->a = parse_or(c); /* "if" after the iterable is the loop filter, not a conditional */
        if (is_name(peek(c), "if")) {
            next_tok(c);
            n->b = parse_expr(c);
        }
        if (is_name(peek(c), "recursive")) jfail(c, peek(c)->line, peek(c)->col, "recursive loops are not supported");
        expect_block_end(c);
        static const char *const ends[] = {"else", "endfor", NULL};
        svec body = {0};
        int which = parse_body(c, &body, ends, begin, "for");
        n->body = body.v;
        n->nbody = body.n;
        next_tok(c);
        expect_block_end(c);
        if (which == 0) parse_orelse(c, n, "endfor", begin, "for");
        return n;
    }
    if (is_name(t, "set")) {
        n = node(c, S_SET, t);
        n->name = expect_name(c);
        if (is_op(peek(c), ".")) {
            next_tok(c);
            n->attr = expect_name(c);
        }
        if (is_op(peek(c), ",")) jfail(c, peek(c)->line, peek(c)->col, "tuple assignment in set is not supported");
        if (peek(c)->k == T_BLOCK_END) {
            next_tok(c);
            n->kind = S_SETBLOCK;
            static const char *const ends[] = {"endset", NULL};
            svec body = {0};
            parse_body(c, &body, ends, begin, "set");
            n->body = body.v;
            n->nbody = body.n;
            next_tok(c);
            expect_block_end(c);
            return n;
        }
        expect_op(c, "=");
        n->a = parse_expr(c);
        expect_block_end(c);
        return n;
    }
    if (is_name(t, "macro")) {
        n = node(c, S_MACRO, t);
        n->name = expect_name(c);
        expect_op(c, "(");
        const char *names[64];
        jnode *defs[64];
        int nn = 0;
        while (!is_op(peek(c), ")")) {
            if (nn == 64) jfail(c, t->line, t->col, "too many macro parameters");
            names[nn] = expect_name(c);
            defs[nn] = NULL;
            if (is_op(peek(c), "=")) {
                next_tok(c);
                defs[nn] = parse_expr(c);
            }
            nn++;
            if (!is_op(peek(c), ",")) break;
            next_tok(c);
        }
        expect_op(c, ")");
        expect_block_end(c);
        n->names = jalloc(c, (size_t)(nn ? nn : 1) * sizeof *n->names);
        n->defaults = jalloc(c, (size_t)(nn ? nn : 1) * sizeof *n->defaults);
        if (nn) {
            memcpy(n->names, names, (size_t)nn * sizeof *names);
            memcpy(n->defaults, defs, (size_t)nn * sizeof *defs);
        }
        n->nnames = nn;
        static const char *const ends[] = {"endmacro", NULL};
        svec body = {0};
        parse_body(c, &body, ends, begin, "macro");
        n->body = body.v;
        n->nbody = body.n;
        next_tok(c);
        if (peek(c)->k == T_NAME) next_tok(c); /* {% endmacro name %} */
        expect_block_end(c);
        return n;
    }
    if (is_name(t, "break") || is_name(t, "continue")) {
        n = node(c, is_name(t, "break") ? S_BREAK : S_CONTINUE, t);
        expect_block_end(c);
        return n;
    }
    if (is_name(t, "generation") || is_name(t, "filter")) {
        int is_filter = is_name(t, "filter");
        n = node(c, is_filter ? S_FILTERBLOCK : S_BLOCK, t);
        if (is_filter) {
            n->name = expect_name(c);
            if (is_op(peek(c), "(")) parse_args(c, n);
        }
        expect_block_end(c);
        static const char *const ends_g[] = {"endgeneration", NULL}, *const ends_f[] = {"endfilter", NULL};
        svec body = {0};
        parse_body(c, &body, is_filter ? ends_f : ends_g, begin, is_filter ? "filter" : "generation");
        n->body = body.v;
        n->nbody = body.n;
        next_tok(c);
        expect_block_end(c);
        return n;
    }
    char b[64];
    jfail(c, t->line, t->col, "unknown statement %s", tok_desc(t, b, sizeof b));
}

static int parse_body(jctx *c, svec *out, const char *const *ends, const jtok *opener, const char *opener_name) {
    for (;;) {
        jtok *t = next_tok(c);
        switch (t->k) {
        case T_EOF:
            if (!ends) return -1;
            jfail(c, opener->line, opener->col, "unclosed '%s' block (template ended before {%% %s %%})", opener_name,
                  ends[0]);
        case T_TEXT: {
            jnode *n = node(c, S_TEXT, t);
            n->name = t->p;
            n->name_n = t->n;
            svec_push(c, out, n);
            break;
        }
        case T_VAR_BEGIN: {
            jnode *n = node(c, S_OUT, t);
            n->a = parse_expr(c);
            jtok *e = next_tok(c);
            if (e->k != T_VAR_END) unexpected(c, e, "'}}'");
            svec_push(c, out, n);
            break;
        }
        case T_BLOCK_BEGIN: {
            jtok *nm = peek(c);
            if (ends && nm->k == T_NAME)
                for (int i = 0; ends[i]; i++)
                    if (is_name(nm, ends[i])) return i;
            if (nm->k == T_NAME && (is_name(nm, "endif") || is_name(nm, "endfor") || is_name(nm, "else") ||
                                    is_name(nm, "elif") || is_name(nm, "endmacro") || is_name(nm, "endset")))
                jfail(c, nm->line, nm->col, "unexpected '%.*s'%s%s", (int)nm->n, nm->p, ends ? " inside a '" : "",
                      ends ? opener_name : "");
            svec_push(c, out, parse_statement(c, t));
            break;
        }
        default: unexpected(c, t, "text or a tag");
        }
    }
}

/* ======================================================================== values: helpers */
static int utf8proc_isalpha_approx(uint32_t cp) {
    int k = utf8proc_category((utf8proc_int32_t)cp);
    return k >= UTF8PROC_CATEGORY_LU && k <= UTF8PROC_CATEGORY_LO;
}

static jv mk_undef(const char *name) { jv v = {JV_UNDEF, 0, {0}}; v.u.s.p = name; v.u.s.n = name ? strlen(name) : 0; return v; }
static jv mk_none(void) { jv v = {JV_NONE, 0, {0}}; return v; }
static jv mk_bool(int b) { jv v = {JV_BOOL, 0, {0}}; v.u.i = b != 0; return v; }
static jv mk_int(int64_t i) { jv v = {JV_INT, 0, {0}}; v.u.i = i; return v; }
static jv mk_float(double f) { jv v = {JV_FLOAT, 0, {0}}; v.u.f = f; return v; }
static jv mk_str(const char *p, size_t n) { jv v = {JV_STR, 0, {0}}; v.u.s.p = p; v.u.s.n = n; return v; }
static jv mk_cstr(const char *p) { return mk_str(p, strlen(p)); }
static jv str_from_buf(jctx *c, jbuf *b) {
    size_t n;
    const char *p = jb_adopt(c, b, &n);
    return mk_str(p, n);
}

static jlist *list_new(jctx *c, size_t cap) {
    jlist *l = jalloc(c, sizeof *l);
    l->n = 0;
    l->tuple = 0;
    l->cap = cap ? cap : 4;
    l->v = jalloc(c, l->cap * sizeof *l->v);
    return l;
}
static void list_push(jctx *c, jlist *l, jv x) {
    work(c, NULL, 1, 0);
    if (l->n == l->cap) {
        size_t nc = l->cap * 2;
        jv *nv = jalloc(c, nc * sizeof *nv);
        memcpy(nv, l->v, l->n * sizeof *nv);
        l->v = nv;
        l->cap = nc;
    }
    l->v[l->n++] = x;
}
static jv mk_list(jlist *l) { jv v = {JV_LIST, 0, {0}}; v.u.l = l; return v; }

static jdict *dict_new(jctx *c) {
    jdict *d = jalloc(c, sizeof *d);
    memset(d, 0, sizeof *d);
    return d;
}
static int str_eq(jv a, const char *s, size_t n) { return a.t == JV_STR && a.u.s.n == n && !memcmp(a.u.s.p, s, n); }
static int jv_equal(jctx *c, jv a, jv b);
/* Dictionaries are small arrays searched in order (templates' dicts hold a few keys);
 * every key looked at is a step, so a big one costs its size in steps. */
static jv *dict_find(jctx *c, jdict *d, jv key) {
    work(c, NULL, d->n, 0);
    for (size_t i = 0; i < d->n; i++)
        if (jv_equal(c, d->k[i], key)) return &d->v[i];
    return NULL;
}
static jv *dict_find_s(jctx *c, jdict *d, const char *s, size_t n) {
    work(c, NULL, d->n, 0);
    for (size_t i = 0; i < d->n; i++)
        if (str_eq(d->k[i], s, n)) return &d->v[i];
    return NULL;
}
static void dict_set(jctx *c, jdict *d, jv key, jv val) {
    jv *e = dict_find(c, d, key);
    if (e) { *e = val; return; }
    if (d->n == d->cap) {
        size_t nc = d->cap ? d->cap * 2 : 8;
        jv *nk = jalloc(c, nc * sizeof *nk), *nv = jalloc(c, nc * sizeof *nv);
        if (d->n) {
            memcpy(nk, d->k, d->n * sizeof *nk);
            memcpy(nv, d->v, d->n * sizeof *nv);
        }
        d->k = nk;
        d->v = nv;
        d->cap = nc;
    }
    d->k[d->n] = key;
    d->v[d->n] = val;
    d->n++;
}
static jv mk_dict(jdict *d) { jv v = {JV_DICT, 0, {0}}; v.u.d = d; return v; }

static int truthy(jv v) {
    switch (v.t) {
    case JV_UNDEF:
    case JV_NONE: return 0;
    case JV_BOOL:
    case JV_INT: return v.u.i != 0;
    case JV_FLOAT: return v.u.f != 0;
    case JV_STR: return v.u.s.n != 0;
    case JV_LIST: return v.u.l->n != 0;
    case JV_DICT: return v.u.d->n != 0;
    default: return 1;
    }
}

static int is_num(jv v) { return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL; }
static double num_f(jv v) { return v.t == JV_FLOAT ? v.u.f : (double)v.u.i; }

static int jv_equal(jctx *c, jv a, jv b) {
    if (is_num(a) && is_num(b)) return num_f(a) == num_f(b);
    if (a.t != b.t) {
        return 0;
    }
    int r = 1;
    switch (a.t) {
    case JV_UNDEF:
    case JV_NONE: return 1;
    case JV_STR:
        if (a.u.s.n != b.u.s.n) return 0;
        work(c, NULL, 1, a.u.s.n);
        return !memcmp(a.u.s.p, b.u.s.p, a.u.s.n);
    case JV_LIST:
        if (a.u.l->n != b.u.l->n) return 0;
        if (a.u.l == b.u.l) return 1;
        nest_in(c, NULL, "value");
        for (size_t i = 0; r && i < a.u.l->n; i++) {
            work(c, NULL, 1, 0);
            r = jv_equal(c, a.u.l->v[i], b.u.l->v[i]);
        }
        c->nest--;
        return r;
    case JV_DICT:
        if (a.u.d->n != b.u.d->n) return 0;
        if (a.u.d == b.u.d) return 1;
        nest_in(c, NULL, "value");
        for (size_t i = 0; r && i < a.u.d->n; i++) {
            jv *o = dict_find(c, b.u.d, a.u.d->k[i]);
            r = o && jv_equal(c, a.u.d->v[i], *o);
        }
        c->nest--;
        return r;
    default: return a.u.d == b.u.d;
    }
}

static const char *type_name(jv v) {
    static const char *const names[] = {"undefined", "none", "bool", "int", "float", "string", "list", "dict",
                                        "namespace", "loop", "macro", "function", "method"};
    return names[v.t];
}

/* Python's repr of a float: the shortest string that reads back the same. */
static void put_float(jctx *c, jbuf *b, double f) {
    char buf[64];
    if (isnan(f)) { jput(c, b, "nan", 3); return; }
    if (isinf(f)) { jput(c, b, f < 0 ? "-inf" : "inf", f < 0 ? 4 : 3); return; }
    int prec;
    for (prec = 1; prec <= 17; prec++) {
        snprintf(buf, sizeof buf, "%.*g", prec, f);
        if (strtod(buf, NULL) == f) break;
    }
    /* Python switches to exponent form when exp < -4 or exp >= 16 */
    int exp10 = f == 0 ? 0 : (int)floor(log10(fabs(f)));
    if (exp10 >= -4 && exp10 < 16) {
        int digits_after = prec - 1 - exp10;
        if (digits_after < 1) digits_after = 1;
        snprintf(buf, sizeof buf, "%.*f", digits_after, f);
        /* trim trailing zeros beyond the needed digits, keep one */
        size_t n = strlen(buf);
        while (n > 2 && buf[n - 1] == '0' && buf[n - 2] != '.') n--;
        buf[n] = 0;
    } else {
        snprintf(buf, sizeof buf, "%.*e", prec - 1, f);
        /* Python: 1e+16, 1.5e-05 */
        char *e = strchr(buf, 'e');
        if (e) {
            char mant[40], ex[16];
            size_t ml = (size_t)(e - buf);
            memcpy(mant, buf, ml);
            mant[ml] = 0;
            int ev = atoi(e + 1);
            snprintf(ex, sizeof ex, "e%c%02d", ev < 0 ? '-' : '+', ev < 0 ? -ev : ev);
            snprintf(buf, sizeof buf, "%s%s", mant, ex);
        }
    }
    jput(c, b, buf, strlen(buf));
}

static void put_repr(jctx *c, jbuf *b, jv v);

/* Python's str() of a value, as {{ }} prints it */
static void put_str(jctx *c, jbuf *b, jv v) {
    char buf[32];
    switch (v.t) {
    case JV_UNDEF: break;
    case JV_NONE: jput(c, b, "None", 4); break;
    case JV_BOOL: if (v.u.i) jput(c, b, "True", 4); else jput(c, b, "False", 5); break;
    case JV_INT: snprintf(buf, sizeof buf, "%lld", (long long)v.u.i); jput(c, b, buf, strlen(buf)); break;
    case JV_FLOAT: put_float(c, b, v.u.f); break;
    case JV_STR: jput(c, b, v.u.s.p, v.u.s.n); break;
    case JV_NS: jput(c, b, "<Namespace>", 11); break;
    case JV_LOOP: jput(c, b, "<LoopContext>", 13); break;
    case JV_MACRO: jput(c, b, "<Macro>", 7); break;
    case JV_FUNC:
    case JV_METHOD: jput(c, b, "<function>", 10); break;
    default: put_repr(c, b, v); break;
    }
}

static void put_repr_inner(jctx *c, jbuf *b, jv v);
static void put_repr(jctx *c, jbuf *b, jv v) {
    nest_in(c, NULL, "value");
    work(c, NULL, 1, 0);
    put_repr_inner(c, b, v);
    c->nest--;
}

static void put_repr_inner(jctx *c, jbuf *b, jv v) {
    switch (v.t) {
    case JV_STR: {
        int has_sq = memchr(v.u.s.p, '\'', v.u.s.n) != NULL, has_dq = memchr(v.u.s.p, '"', v.u.s.n) != NULL;
        char q = has_sq && !has_dq ? '"' : '\'';
        jputc(c, b, q);
        for (size_t i = 0; i < v.u.s.n; i++) {
            unsigned char ch = (unsigned char)v.u.s.p[i];
            if (ch == '\\') jput(c, b, "\\\\", 2);
            else if (ch == (unsigned char)q) { jputc(c, b, '\\'); jputc(c, b, q); }
            else if (ch == '\n') jput(c, b, "\\n", 2);
            else if (ch == '\r') jput(c, b, "\\r", 2);
            else if (ch == '\t') jput(c, b, "\\t", 2);
            else if (ch < 0x20 || ch == 0x7f) {
                char e[8];
                snprintf(e, sizeof e, "\\x%02x", ch);
                jput(c, b, e, 4);
            } else jputc(c, b, (char)ch);
        }
        jputc(c, b, q);
        break;
    }
    case JV_LIST:
        jputc(c, b, v.u.l->tuple ? '(' : '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jput(c, b, ", ", 2);
            put_repr(c, b, v.u.l->v[i]);
        }
        if (v.u.l->tuple && v.u.l->n == 1) jputc(c, b, ',');
        jputc(c, b, v.u.l->tuple ? ')' : ']');
        break;
    case JV_DICT:
        jputc(c, b, '{');
        for (size_t i = 0; i < v.u.d->n; i++) {
            if (i) jput(c, b, ", ", 2);
            put_repr(c, b, v.u.d->k[i]);
            jput(c, b, ": ", 2);
            put_repr(c, b, v.u.d->v[i]);
        }
        jputc(c, b, '}');
        break;
    case JV_UNDEF: jput(c, b, "Undefined", 9); break;
    default: put_str(c, b, v); break;
    }
}

static jv to_str(jctx *c, jv v) {
    if (v.t == JV_STR) return v;
    jbuf b = {0};
    put_str(c, &b, v);
    return str_from_buf(c, &b);
}

/* json.dumps(v, ensure_ascii=False, indent=indent, sort_keys=sort) with Python's
 * default separators (", " and ": ", or "," and ": " when indenting). */
static void put_json(jctx *c, jbuf *b, jv v, int64_t indent, int level, int sort, const jnode *at);

static void json_str(jctx *c, jbuf *b, const char *s, size_t n) {
    jputc(c, b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char ch = (unsigned char)s[i];
        switch (ch) {
        case '"': jput(c, b, "\\\"", 2); break;
        case '\\': jput(c, b, "\\\\", 2); break;
        case '\n': jput(c, b, "\\n", 2); break;
        case '\r': jput(c, b, "\\r", 2); break;
        case '\t': jput(c, b, "\\t", 2); break;
        case '\b': jput(c, b, "\\b", 2); break;
        case '\f': jput(c, b, "\\f", 2); break;
        default:
            if (ch < 0x20) {
                char e[8];
                snprintf(e, sizeof e, "\\u%04x", ch);
                jput(c, b, e, 6);
            } else jputc(c, b, (char)ch);
        }
    }
    jputc(c, b, '"');
}

static void json_nl(jctx *c, jbuf *b, int64_t indent, int level) {
    jputc(c, b, '\n');
    if (!level || indent <= 0) return;
    if ((uint64_t)indent > (uint64_t)CELER_MAX_TEMPLATE_MEMORY / (uint64_t)level) mem_fail(c);
    jfill(c, b, ' ', (size_t)(indent * level));
}

static int key_cmp(const void *a, const void *b) {
    const jv *x = *(const jv *const *)a, *y = *(const jv *const *)b;
    size_t n = x->u.s.n < y->u.s.n ? x->u.s.n : y->u.s.n;
    int r = memcmp(x->u.s.p, y->u.s.p, n);
    return r ? r : (x->u.s.n > y->u.s.n) - (x->u.s.n < y->u.s.n);
}

static void put_json_inner(jctx *c, jbuf *b, jv v, int64_t indent, int level, int sort, const jnode *at);
static void put_json(jctx *c, jbuf *b, jv v, int64_t indent, int level, int sort, const jnode *at) {
    nest_in(c, at, "value");
    work(c, at, 1, 0);
    put_json_inner(c, b, v, indent, level, sort, at);
    c->nest--;
}

static void put_json_inner(jctx *c, jbuf *b, jv v, int64_t indent, int level, int sort, const jnode *at) {
    char buf[32];
    switch (v.t) {
    case JV_NONE:
    case JV_UNDEF: jput(c, b, "null", 4); break;
    case JV_BOOL: if (v.u.i) jput(c, b, "true", 4); else jput(c, b, "false", 5); break;
    case JV_INT: snprintf(buf, sizeof buf, "%lld", (long long)v.u.i); jput(c, b, buf, strlen(buf)); break;
    case JV_FLOAT:
        if (isnan(v.u.f)) jput(c, b, "NaN", 3);
        else if (isinf(v.u.f)) jput(c, b, v.u.f < 0 ? "-Infinity" : "Infinity", v.u.f < 0 ? 9 : 8);
        else put_float(c, b, v.u.f);
        break;
    case JV_STR: json_str(c, b, v.u.s.p, v.u.s.n); break;
    case JV_LIST:
        if (!v.u.l->n) { jput(c, b, "[]", 2); break; }
        jputc(c, b, '[');
        for (size_t i = 0; i < v.u.l->n; i++) {
            if (i) jput(c, b, indent >= 0 ? "," : ", ", indent >= 0 ? 1 : 2);
            if (indent >= 0) json_nl(c, b, indent, level + 1);
            put_json(c, b, v.u.l->v[i], indent, level + 1, sort, at);
        }
        if (indent >= 0) json_nl(c, b, indent, level);
        jputc(c, b, ']');
        break;
    case JV_DICT:
    case JV_NS: {
        jdict *d = v.u.d;
        if (!d->n) { jput(c, b, "{}", 2); break; }
        const jv **order = jalloc(c, d->n * sizeof *order);
        for (size_t i = 0; i < d->n; i++) order[i] = &d->k[i];
        int all_str = 1;
        for (size_t i = 0; i < d->n; i++) all_str &= d->k[i].t == JV_STR;
        if (sort && all_str) qsort(order, d->n, sizeof *order, key_cmp);
        jputc(c, b, '{');
        for (size_t i = 0; i < d->n; i++) {
            size_t k = (size_t)(order[i] - d->k);
            if (i) jput(c, b, indent >= 0 ? "," : ", ", indent >= 0 ? 1 : 2);
            if (indent >= 0) json_nl(c, b, indent, level + 1);
            jv key = d->k[k];
            if (key.t == JV_STR) json_str(c, b, key.u.s.p, key.u.s.n);
            else {
                jbuf kb = {0};
                put_str(c, &kb, key);
                json_str(c, b, kb.p ? kb.p : "", kb.n);
                jb_free(c, &kb);
            }
            jput(c, b, ": ", 2);
            put_json(c, b, d->v[k], indent, level + 1, sort, at);
        }
        if (indent >= 0) json_nl(c, b, indent, level);
        jputc(c, b, '}');
        break;
    }
    default: jfail(c, at->line, at->col, "Object of type %s is not JSON serializable", type_name(v));
    }
}

/* JSON document -> values */
static jv from_json(jctx *c, const tj_val *t) {
    switch (t->type) {
    case TJ_NULL: return mk_none();
    case TJ_TRUE: return mk_bool(1);
    case TJ_FALSE: return mk_bool(0);
    case TJ_NUM:
        if (!t->n && t->u.num >= -9.2e18 && t->u.num <= 9.2e18 && t->u.num == floor(t->u.num)) return mk_int((int64_t)t->u.num);
        return mk_float(t->u.num);
    case TJ_STR: return mk_str(t->u.s, t->n);
    case TJ_ARR: {
        jlist *l = list_new(c, t->n);
        for (uint32_t i = 0; i < t->n; i++) list_push(c, l, from_json(c, &t->u.items[i]));
        return mk_list(l);
    }
    case TJ_OBJ: {
        jdict *d = dict_new(c);
        for (uint32_t i = 0; i < t->n; i++)
            dict_set(c, d, mk_str(t->u.items[2 * i].u.s, t->u.items[2 * i].n), from_json(c, &t->u.items[2 * i + 1]));
        return mk_dict(d);
    }
    }
    return mk_none();
}

/* ======================================================================== evaluation */
static jv eval(jctx *c, jnode *n);
static void exec_body(jctx *c, jnode **body, int n);

static jv lookup(jctx *c, jframe *f, const char *name, size_t n) {
    for (; f; f = f->parent) {
        jv *v = dict_find_s(c, &f->vars, name, n);
        if (v) return *v;
    }
    (void)c;
    if (n == 15 && !memcmp(name, "raise_exception", 15)) { jv v = {JV_FUNC, 0, {0}}; v.u.fn = FN_RAISE; return v; }
    if (n == 12 && !memcmp(name, "strftime_now", 12)) { jv v = {JV_FUNC, 0, {0}}; v.u.fn = FN_STRFTIME; return v; }
    if (n == 9 && !memcmp(name, "namespace", 9)) { jv v = {JV_FUNC, 0, {0}}; v.u.fn = FN_NAMESPACE; return v; }
    if (n == 5 && !memcmp(name, "range", 5)) { jv v = {JV_FUNC, 0, {0}}; v.u.fn = FN_RANGE; return v; }
    if (n == 4 && !memcmp(name, "dict", 4)) { jv v = {JV_FUNC, 0, {0}}; v.u.fn = FN_DICT; return v; }
    return mk_undef(name);
}


static void frame_set(jctx *c, jframe *f, const char *name, jv v) { dict_set(c, &f->vars, mk_cstr(name), v); }

static _Noreturn void undefined_error(jctx *c, jnode *n, jv v, const char *what) {
    jfail(c, n->line, n->col, "'%.*s' is undefined%s%s", (int)v.u.s.n, v.u.s.p ? v.u.s.p : "", what ? ": " : "",
          what ? what : "");
}

static const char *const str_methods[] = {"strip", "lstrip", "rstrip", "split", "startswith", "endswith", "upper",
                                          "lower", "replace", "title", "capitalize", "find", "join", "count",
                                          "splitlines", "format", "isdigit", "isalpha", "isspace", "rsplit", NULL};
static const char *const dict_methods[] = {"items", "keys", "values", "get", NULL};
static const char *const list_methods[] = {"index", "count", NULL};

static int in_list(const char *const *l, const char *s) {
    for (; *l; l++)
        if (!strcmp(*l, s)) return 1;
    return 0;
}

static jv bound(jctx *c, jv self, const char *name) {
    jmethod *m = jalloc(c, sizeof *m);
    m->self = self;
    m->name = name;
    jv v = {JV_METHOD, 0, {0}};
    v.u.me = m;
    return v;
}

static JINJA_LEAF jv get_attr(jctx *c, jnode *at, jv obj, const char *name) {
    size_t n = strlen(name);
    switch (obj.t) {
    case JV_UNDEF: undefined_error(c, at, obj, NULL);
    case JV_DICT: {
        if (in_list(dict_methods, name)) return bound(c, obj, name);
        jv *v = dict_find_s(c, obj.u.d, name, n);
        return v ? *v : mk_undef(name);
    }
    case JV_NS: {
        jv *v = dict_find_s(c, obj.u.d, name, n);
        return v ? *v : mk_undef(name);
    }
    case JV_STR: return in_list(str_methods, name) ? bound(c, obj, name) : mk_undef(name);
    case JV_LIST: return in_list(list_methods, name) ? bound(c, obj, name) : mk_undef(name);
    case JV_LOOP: {
        jloop *l = obj.u.lp;
        if (!strcmp(name, "index")) return mk_int(l->index0 + 1);
        if (!strcmp(name, "index0")) return mk_int(l->index0);
        if (!strcmp(name, "revindex")) return mk_int(l->length - l->index0);
        if (!strcmp(name, "revindex0")) return mk_int(l->length - l->index0 - 1);
        if (!strcmp(name, "first")) return mk_bool(l->index0 == 0);
        if (!strcmp(name, "last")) return mk_bool(l->index0 == l->length - 1);
        if (!strcmp(name, "length")) return mk_int(l->length);
        if (!strcmp(name, "previtem")) return l->index0 > 0 ? l->items->v[l->index0 - 1] : mk_undef("previtem");
        if (!strcmp(name, "nextitem"))
            return l->index0 + 1 < l->length ? l->items->v[l->index0 + 1] : mk_undef("nextitem");
        if (!strcmp(name, "depth")) return mk_int(1);
        if (!strcmp(name, "depth0")) return mk_int(0);
        if (!strcmp(name, "cycle")) return bound(c, obj, "cycle");
        return mk_undef(name);
    }
    default: return mk_undef(name);
    }
}

static int64_t norm_index(int64_t i, int64_t n) { return i < 0 ? i + n : i; }

static JINJA_LEAF jv get_item(jctx *c, jnode *at, jv obj, jv key) {
    switch (obj.t) {
    case JV_UNDEF: undefined_error(c, at, obj, NULL);
    case JV_DICT:
    case JV_NS: {
        jv *v = dict_find(c, obj.u.d, key);
        if (v) return *v;
        if (key.t == JV_STR && obj.t == JV_DICT) {
            char *k = jstrdup(c, key.u.s.p, key.u.s.n);
            if (in_list(dict_methods, k)) return bound(c, obj, k);
            return mk_undef(k);
        }
        return mk_undef("item");
    }
    case JV_LIST:
        if (key.t == JV_INT || key.t == JV_BOOL) {
            int64_t i = norm_index(key.u.i, (int64_t)obj.u.l->n);
            if (i >= 0 && i < (int64_t)obj.u.l->n) return obj.u.l->v[i];
            return mk_undef("list index");
        }
        if (key.t == JV_STR) return get_attr(c, at, obj, jstrdup(c, key.u.s.p, key.u.s.n));
        return mk_undef("item");
    case JV_STR:
        if (key.t == JV_INT) {
            /* index by code point */
            work(c, at, 0, obj.u.s.n);
            int64_t cnt = 0;
            for (size_t i = 0; i < obj.u.s.n; i++) cnt += ((unsigned char)obj.u.s.p[i] & 0xC0) != 0x80;
            int64_t k = norm_index(key.u.i, cnt), seen = -1;
            if (k < 0 || k >= cnt) return mk_undef("string index");
            for (size_t i = 0; i < obj.u.s.n; i++) {
                if (((unsigned char)obj.u.s.p[i] & 0xC0) != 0x80 && ++seen == k)
                    return mk_str(obj.u.s.p + i, (size_t)utf8_len((unsigned char)obj.u.s.p[i]));
            }
        }
        if (key.t == JV_STR) return get_attr(c, at, obj, jstrdup(c, key.u.s.p, key.u.s.n));
        return mk_undef("item");
    default:
        if (key.t == JV_STR) return get_attr(c, at, obj, jstrdup(c, key.u.s.p, key.u.s.n));
        return mk_undef("item");
    }
}

/* Python slice indices for a sequence of length n */
static void slice_bounds(jctx *c, jnode *at, jv lo, jv hi, jv st, int64_t n, int64_t *start, int64_t *stop, int64_t *step) {
    *step = st.t == JV_INT ? st.u.i : 1;
    if (*step == 0) jfail(c, at->line, at->col, "slice step cannot be zero");
    int64_t def_start = *step > 0 ? 0 : n - 1, def_stop = *step > 0 ? n : -1;
    if (lo.t == JV_INT) {
        int64_t v = lo.u.i < 0 ? lo.u.i + n : lo.u.i;
        if (*step > 0) v = v < 0 ? 0 : v > n ? n : v;
        else v = v < -1 ? -1 : v > n - 1 ? n - 1 : v;
        *start = v;
    } else *start = def_start;
    if (hi.t == JV_INT) {
        int64_t v = hi.u.i < 0 ? hi.u.i + n : hi.u.i;
        if (*step > 0) v = v < 0 ? 0 : v > n ? n : v;
        else v = v < -1 ? -1 : v > n - 1 ? n - 1 : v;
        *stop = v;
    } else *stop = def_stop;
}

static JINJA_LEAF jv do_slice(jctx *c, jnode *at, jv obj, jv lo, jv hi, jv st) {
    int64_t start, stop, step;
    if (obj.t == JV_LIST) {
        slice_bounds(c, at, lo, hi, st, (int64_t)obj.u.l->n, &start, &stop, &step);
        jlist *l = list_new(c, 0);
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step) list_push(c, l, obj.u.l->v[i]);
        return mk_list(l);
    }
    if (obj.t == JV_STR) {
        /* code point offsets */
        work(c, at, 0, obj.u.s.n);
        int64_t cnt = 0;
        for (size_t i = 0; i < obj.u.s.n; i++) cnt += ((unsigned char)obj.u.s.p[i] & 0xC0) != 0x80;
        size_t *offs = jalloc(c, (size_t)(cnt + 1) * sizeof *offs);
        int64_t k = 0;
        for (size_t i = 0; i < obj.u.s.n; i++)
            if (((unsigned char)obj.u.s.p[i] & 0xC0) != 0x80) offs[k++] = i;
        offs[cnt] = obj.u.s.n;
        slice_bounds(c, at, lo, hi, st, cnt, &start, &stop, &step);
        if (step == 1) return start < stop ? mk_str(obj.u.s.p + offs[start], offs[stop] - offs[start]) : mk_str("", 0);
        jbuf b = {0};
        for (int64_t i = start; step > 0 ? i < stop : i > stop; i += step)
            jput(c, &b, obj.u.s.p + offs[i], offs[i + 1] - offs[i]);
        return str_from_buf(c, &b);
    }
    if (obj.t == JV_UNDEF) undefined_error(c, at, obj, NULL);
    jfail(c, at->line, at->col, "cannot slice a %s", type_name(obj));
}

static int64_t jv_len(jctx *c, jnode *at, jv v) {
    switch (v.t) {
    case JV_STR: {
        work(c, at, 0, v.u.s.n);
        int64_t cnt = 0;
        for (size_t i = 0; i < v.u.s.n; i++) cnt += ((unsigned char)v.u.s.p[i] & 0xC0) != 0x80;
        return cnt;
    }
    case JV_LIST: return (int64_t)v.u.l->n;
    case JV_DICT:
    case JV_NS: return (int64_t)v.u.d->n;
    case JV_UNDEF: return 0;
    default: jfail(c, at->line, at->col, "object of type %s has no length", type_name(v));
    }
}

/* items to iterate: lists as is, dicts by key, strings by character */
static jlist *iter_list(jctx *c, jnode *at, jv v) {
    switch (v.t) {
    case JV_LIST: return v.u.l;
    case JV_UNDEF:
    case JV_NONE:
        if (v.t == JV_NONE) jfail(c, at->line, at->col, "'NoneType' object is not iterable");
        return list_new(c, 1);
    case JV_DICT: {
        jlist *l = list_new(c, v.u.d->n);
        for (size_t i = 0; i < v.u.d->n; i++) list_push(c, l, v.u.d->k[i]);
        return l;
    }
    case JV_STR: {
        jlist *l = list_new(c, v.u.s.n);
        for (size_t i = 0; i < v.u.s.n;) {
            size_t k = (size_t)utf8_len((unsigned char)v.u.s.p[i]);
            if (i + k > v.u.s.n) k = v.u.s.n - i;
            list_push(c, l, mk_str(v.u.s.p + i, k));
            i += k;
        }
        return l;
    }
    default: jfail(c, at->line, at->col, "'%s' object is not iterable", type_name(v));
    }
}

static int jv_cmp(jctx *c, jnode *at, jv a, jv b) {
    if (is_num(a) && is_num(b)) {
        double x = num_f(a), y = num_f(b);
        return (x > y) - (x < y);
    }
    if (a.t == JV_STR && b.t == JV_STR) {
        size_t n = a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n;
        work(c, at, 1, n);
        int r = memcmp(a.u.s.p, b.u.s.p, n);
        return r ? (r > 0) - (r < 0) : (a.u.s.n > b.u.s.n) - (a.u.s.n < b.u.s.n);
    }
    jfail(c, at->line, at->col, "cannot compare %s with %s", type_name(a), type_name(b));
}

static int contains(jctx *c, jnode *at, jv hay, jv needle) {
    switch (hay.t) {
    case JV_STR:
        if (needle.t != JV_STR) jfail(c, at->line, at->col, "'in <string>' requires a string on the left");
        if (!needle.u.s.n) return 1;
        work(c, at, 0, hay.u.s.n);
        return memmem(hay.u.s.p, hay.u.s.n, needle.u.s.p, needle.u.s.n) != NULL;
    case JV_LIST:
        for (size_t i = 0; i < hay.u.l->n; i++) {
            work(c, at, 1, 0);
            if (jv_equal(c, hay.u.l->v[i], needle)) return 1;
        }
        return 0;
    case JV_DICT:
    case JV_NS: return dict_find(c, hay.u.d, needle) != NULL;
    case JV_UNDEF: undefined_error(c, at, hay, NULL);
    default: jfail(c, at->line, at->col, "argument of type '%s' is not iterable", type_name(hay));
    }
}

static _Noreturn void int_overflow(jctx *c, const jnode *n) {
    jfail(c, n->line, n->col, "integer overflow (template integers are 64-bit)");
}

static JINJA_LEAF jv binop(jctx *c, jnode *n, int op, jv a, jv b) {
    if (op == OP_EQ) return mk_bool(jv_equal(c, a, b));
    if (op == OP_NE) return mk_bool(!jv_equal(c, a, b));
    if (op == OP_IN) return mk_bool(contains(c, n, b, a));
    if (op == OP_NOTIN) return mk_bool(!contains(c, n, b, a));
    if (op == OP_LT) return mk_bool(jv_cmp(c, n, a, b) < 0);
    if (op == OP_LE) return mk_bool(jv_cmp(c, n, a, b) <= 0);
    if (op == OP_GT) return mk_bool(jv_cmp(c, n, a, b) > 0);
    if (op == OP_GE) return mk_bool(jv_cmp(c, n, a, b) >= 0);
    if (op == OP_ADD) {
        if (a.t == JV_STR && b.t == JV_STR) {
            char *p = jalloc(c, a.u.s.n + b.u.s.n + 1);
            memcpy(p, a.u.s.p, a.u.s.n);
            memcpy(p + a.u.s.n, b.u.s.p, b.u.s.n);
            p[a.u.s.n + b.u.s.n] = 0;
            return mk_str(p, a.u.s.n + b.u.s.n);
        }
        if (a.t == JV_LIST && b.t == JV_LIST) {
            jlist *l = list_new(c, a.u.l->n + b.u.l->n);
            for (size_t i = 0; i < a.u.l->n; i++) list_push(c, l, a.u.l->v[i]);
            for (size_t i = 0; i < b.u.l->n; i++) list_push(c, l, b.u.l->v[i]);
            return mk_list(l);
        }
    }
    if (a.t == JV_UNDEF) undefined_error(c, n, a, NULL);
    if (b.t == JV_UNDEF) undefined_error(c, n, b, NULL);
    if (op == OP_MUL && ((a.t == JV_STR && b.t == JV_INT) || (a.t == JV_INT && b.t == JV_STR))) {
        jv s = a.t == JV_STR ? a : b;
        int64_t k = a.t == JV_INT ? a.u.i : b.u.i;
        if (k <= 0 || !s.u.s.n) return mk_str("", 0);
        /* the whole result, exactly, or the memory limit before any of it is built */
        if ((uint64_t)k > (uint64_t)CELER_MAX_TEMPLATE_MEMORY / s.u.s.n) mem_fail(c);
        jbuf buf = {0};
        jb_grow(c, &buf, (size_t)k * s.u.s.n);
        for (int64_t i = 0; i < k; i++) jput(c, &buf, s.u.s.p, s.u.s.n);
        return str_from_buf(c, &buf);
    }
    if (!is_num(a) || !is_num(b)) {
        static const char *const sym[] = {"", "+", "-", "*", "/", "//", "%", "**"};
        jfail(c, n->line, n->col, "unsupported operand types for %s: %s and %s", op <= OP_POW ? sym[op] : "?",
              type_name(a), type_name(b));
    }
    int both_int = a.t != JV_FLOAT && b.t != JV_FLOAT;
    double x = num_f(a), y = num_f(b);
    int64_t r; /* Python's integers do not overflow; ours are 64-bit and say so instead */
    switch (op) {
    case OP_ADD:
        if (!both_int) return mk_float(x + y);
        if (__builtin_add_overflow(a.u.i, b.u.i, &r)) int_overflow(c, n);
        return mk_int(r);
    case OP_SUB:
        if (!both_int) return mk_float(x - y);
        if (__builtin_sub_overflow(a.u.i, b.u.i, &r)) int_overflow(c, n);
        return mk_int(r);
    case OP_MUL:
        if (!both_int) return mk_float(x * y);
        if (__builtin_mul_overflow(a.u.i, b.u.i, &r)) int_overflow(c, n);
        return mk_int(r);
    case OP_DIV:
        if (y == 0) jfail(c, n->line, n->col, "division by zero");
        return mk_float(x / y);
    case OP_FLOORDIV:
        if (y == 0) jfail(c, n->line, n->col, "division by zero");
        if (both_int) {
            if (a.u.i == INT64_MIN && b.u.i == -1) int_overflow(c, n);
            int64_t q = a.u.i / b.u.i;
            if ((a.u.i % b.u.i != 0) && ((a.u.i < 0) != (b.u.i < 0))) q--;
            return mk_int(q);
        }
        return mk_float(floor(x / y));
    case OP_MOD:
        if (y == 0) jfail(c, n->line, n->col, "modulo by zero");
        if (both_int) {
            if (b.u.i == -1) return mk_int(0); /* INT64_MIN % -1 traps in C */
            r = a.u.i % b.u.i;
            if (r != 0 && ((r < 0) != (b.u.i < 0))) r += b.u.i;
            return mk_int(r);
        }
        return mk_float(x - floor(x / y) * y);
    case OP_POW:
        if (both_int && b.u.i >= 0) {
            if (a.u.i == 0 || a.u.i == 1) return mk_int(b.u.i == 0 ? 1 : a.u.i);
            if (a.u.i == -1) return mk_int(b.u.i % 2 ? -1 : 1);
            r = 1; /* |a| >= 2: overflows within 64 steps */
            for (int64_t i = 0; i < b.u.i; i++)
                if (__builtin_mul_overflow(r, a.u.i, &r)) int_overflow(c, n);
            return mk_int(r);
        }
        return mk_float(pow(x, y));
    }
    jfail(c, n->line, n->col, "bad operator");
}

/* evaluated call arguments */
typedef struct {
    jv *v;
    const char **kw;
    int n;
} jargs;

static jargs eval_args(jctx *c, jnode *n) {
    jargs a = {NULL, n->kw, n->nk};
    if (n->nk) {
        a.v = jalloc(c, (size_t)n->nk * sizeof *a.v);
        for (int i = 0; i < n->nk; i++) a.v[i] = eval(c, n->kids[i]);
    }
    return a;
}

/* i-th positional argument or the keyword `kw`, else def */
static jv arg(const jargs *a, int i, const char *kw, jv def) {
    int pos = 0;
    for (int k = 0; k < a->n; k++) {
        if (a->kw && a->kw[k]) {
            if (kw && !strcmp(a->kw[k], kw)) return a->v[k];
        } else if (pos++ == i) return a->v[k];
    }
    return def;
}

static JINJA_LEAF jv call_macro(jctx *c, jnode *at, jnode *m, const jargs *a);
static JINJA_LEAF jv apply_filter(jctx *c, jnode *at, const char *name, jv v, const jargs *a);
static JINJA_LEAF int apply_test(jctx *c, jnode *at, const char *name, jv v, const jargs *a);

static int is_strip_char(uint32_t cp, jv chars) {
    if (chars.t != JV_STR) return tk_is_space(cp);
    for (size_t i = 0; i < chars.u.s.n;) {
        uint32_t x;
        i += (size_t)utf8_dec((const unsigned char *)chars.u.s.p + i, chars.u.s.n - i, &x);
        if (x == cp) return 1;
    }
    return 0;
}

static jv str_strip(jctx *c, jv s, int left, int right, jv chars) {
    const char *p = s.u.s.p;
    size_t a = 0, b = s.u.s.n;
    size_t per = chars.t == JV_STR ? chars.u.s.n + 1 : 1; /* bytes looked at per character */
    while (left && a < b) {
        work(c, NULL, 0, per);
        uint32_t cp;
        int l = utf8_dec((const unsigned char *)p + a, b - a, &cp);
        if (!is_strip_char(cp, chars)) break;
        a += (size_t)l;
    }
    while (right && b > a) {
        work(c, NULL, 0, per);
        size_t q = b - 1;
        while (q > a && ((unsigned char)p[q] & 0xC0) == 0x80) q--;
        uint32_t cp;
        utf8_dec((const unsigned char *)p + q, b - q, &cp);
        if (!is_strip_char(cp, chars)) break;
        b = q;
    }
    return mk_str(p + a, b - a);
}

static jv str_replace(jctx *c, jv s, jv from, jv to, int64_t count) {
    if (from.t != JV_STR || to.t != JV_STR) return s;
    work(c, NULL, 0, s.u.s.n);
    jbuf b = {0};
    size_t i = 0;
    int64_t done = 0;
    if (from.u.s.n == 0) {
        /* Python inserts `to` between characters */
        for (; i <= s.u.s.n; ) {
            if (count < 0 || done < count) { jput(c, &b, to.u.s.p, to.u.s.n); done++; }
            if (i == s.u.s.n) break;
            size_t k = (size_t)utf8_len((unsigned char)s.u.s.p[i]);
            jput(c, &b, s.u.s.p + i, k);
            i += k;
        }
        return str_from_buf(c, &b);
    }
    while (i < s.u.s.n) {
        const char *h = (count < 0 || done < count) ? memmem(s.u.s.p + i, s.u.s.n - i, from.u.s.p, from.u.s.n) : NULL;
        if (!h) break;
        jput(c, &b, s.u.s.p + i, (size_t)(h - s.u.s.p) - i);
        jput(c, &b, to.u.s.p, to.u.s.n);
        i = (size_t)(h - s.u.s.p) + from.u.s.n;
        done++;
    }
    jput(c, &b, s.u.s.p + i, s.u.s.n - i);
    return str_from_buf(c, &b);
}

static jv str_case(jctx *c, jv s, int mode) { /* 0 lower, 1 upper, 2 title, 3 capitalize */
    jbuf b = {0};
    int start = 1;
    for (size_t i = 0; i < s.u.s.n;) {
        uint32_t cp;
        i += (size_t)utf8_dec((const unsigned char *)s.u.s.p + i, s.u.s.n - i, &cp);
        uint32_t o;
        int alpha = utf8proc_isalpha_approx(cp);
        if (mode == 0) o = (uint32_t)utf8proc_tolower((utf8proc_int32_t)cp);
        else if (mode == 1) o = (uint32_t)utf8proc_toupper((utf8proc_int32_t)cp);
        else if (mode == 2) o = (uint32_t)(start ? utf8proc_toupper((utf8proc_int32_t)cp) : utf8proc_tolower((utf8proc_int32_t)cp));
        else o = (uint32_t)(i == (size_t)utf8_len((unsigned char)s.u.s.p[0]) ? utf8proc_toupper((utf8proc_int32_t)cp)
                                                                               : utf8proc_tolower((utf8proc_int32_t)cp));
        if (mode == 2) start = !alpha;
        char e[4];
        jput(c, &b, e, (size_t)utf8_enc(o, e));
    }
    return str_from_buf(c, &b);
}

static jv str_split(jctx *c, jv s, jv sep, int64_t maxsplit, int from_right) {
    work(c, NULL, 0, s.u.s.n);
    jlist *l = list_new(c, 4);
    if (sep.t != JV_STR) {
        /* whitespace runs, no empty strings */
        size_t i = 0, n = s.u.s.n;
        int64_t done = 0;
        (void)from_right;
        while (i < n) {
            uint32_t cp;
            int k;
            while (i < n && (k = utf8_dec((const unsigned char *)s.u.s.p + i, n - i, &cp)) && tk_is_space(cp)) i += (size_t)k;
            if (i >= n) break;
            if (maxsplit >= 0 && done >= maxsplit) {
                jv rest = str_strip(c, mk_str(s.u.s.p + i, n - i), 0, 1, mk_none());
                list_push(c, l, rest);
                break;
            }
            size_t st = i;
            while (i < n && (k = utf8_dec((const unsigned char *)s.u.s.p + i, n - i, &cp)) && !tk_is_space(cp)) i += (size_t)k;
            list_push(c, l, mk_str(s.u.s.p + st, i - st));
            done++;
        }
        return mk_list(l);
    }
    if (sep.u.s.n == 0) jfail(c, 0, 0, "split: empty separator");
    if (from_right && maxsplit >= 0) {
        /* rsplit with a limit: collect from the right */
        jlist *r = list_new(c, 4);
        size_t end = s.u.s.n;
        int64_t done = 0;
        while (done < maxsplit) {
            const char *h = NULL;
            for (size_t q = end; q >= sep.u.s.n; q--) {
                work(c, NULL, 0, sep.u.s.n);
                if (!memcmp(s.u.s.p + q - sep.u.s.n, sep.u.s.p, sep.u.s.n)) { h = s.u.s.p + q - sep.u.s.n; break; }
                if (q == sep.u.s.n) break;
            }
            if (!h) break;
            list_push(c, r, mk_str(h + sep.u.s.n, end - (size_t)(h - s.u.s.p) - sep.u.s.n));
            end = (size_t)(h - s.u.s.p);
            done++;
        }
        list_push(c, l, mk_str(s.u.s.p, end));
        for (size_t i = r->n; i-- > 0;) list_push(c, l, r->v[i]);
        return mk_list(l);
    }
    size_t i = 0;
    int64_t done = 0;
    for (;;) {
        const char *h = (maxsplit < 0 || done < maxsplit) ? memmem(s.u.s.p + i, s.u.s.n - i, sep.u.s.p, sep.u.s.n) : NULL;
        if (!h) break;
        list_push(c, l, mk_str(s.u.s.p + i, (size_t)(h - s.u.s.p) - i));
        i = (size_t)(h - s.u.s.p) + sep.u.s.n;
        done++;
    }
    list_push(c, l, mk_str(s.u.s.p + i, s.u.s.n - i));
    return mk_list(l);
}

static jv join_list(jctx *c, jnode *at, jv seq, jv sep, jv attr) {
    jlist *l = iter_list(c, at, seq);
    jbuf b = {0};
    for (size_t i = 0; i < l->n; i++) {
        if (i && sep.t == JV_STR) jput(c, &b, sep.u.s.p, sep.u.s.n);
        jv x = l->v[i];
        if (attr.t == JV_STR) x = get_item(c, at, x, attr);
        put_str(c, &b, x);
    }
    return str_from_buf(c, &b);
}

static JINJA_LEAF jv call_method(jctx *c, jnode *at, jmethod *m, const jargs *a) {
    jv s = m->self;
    const char *nm = m->name;
    jv none = mk_none();
    if (s.t == JV_STR) {
        if (!strcmp(nm, "strip")) return str_strip(c, s, 1, 1, arg(a, 0, "chars", none));
        if (!strcmp(nm, "lstrip")) return str_strip(c, s, 1, 0, arg(a, 0, "chars", none));
        if (!strcmp(nm, "rstrip")) return str_strip(c, s, 0, 1, arg(a, 0, "chars", none));
        if (!strcmp(nm, "split") || !strcmp(nm, "rsplit")) {
            jv mx = arg(a, 1, "maxsplit", mk_int(-1));
            return str_split(c, s, arg(a, 0, "sep", none), mx.t == JV_INT ? mx.u.i : -1, nm[0] == 'r');
        }
        if (!strcmp(nm, "splitlines")) {
            work(c, at, 0, s.u.s.n);
            jlist *l = list_new(c, 4);
            size_t i = 0, st = 0;
            while (i < s.u.s.n) {
                if (s.u.s.p[i] == '\n' || s.u.s.p[i] == '\r') {
                    list_push(c, l, mk_str(s.u.s.p + st, i - st));
                    if (s.u.s.p[i] == '\r' && i + 1 < s.u.s.n && s.u.s.p[i + 1] == '\n') i++;
                    st = ++i;
                } else i++;
            }
            if (st < s.u.s.n) list_push(c, l, mk_str(s.u.s.p + st, s.u.s.n - st));
            return mk_list(l);
        }
        if (!strcmp(nm, "startswith") || !strcmp(nm, "endswith")) {
            jv p = arg(a, 0, NULL, none);
            jlist *cands;
            if (p.t == JV_LIST) cands = p.u.l;
            else { cands = list_new(c, 1); list_push(c, cands, p); }
            for (size_t i = 0; i < cands->n; i++) {
                jv x = cands->v[i];
                if (x.t != JV_STR) jfail(c, at->line, at->col, "%s: argument must be a string", nm);
                if (x.u.s.n > s.u.s.n) continue;
                work(c, at, 1, x.u.s.n);
                const char *q = nm[0] == 's' ? s.u.s.p : s.u.s.p + s.u.s.n - x.u.s.n;
                if (!memcmp(q, x.u.s.p, x.u.s.n)) return mk_bool(1);
            }
            return mk_bool(0);
        }
        if (!strcmp(nm, "upper")) return str_case(c, s, 1);
        if (!strcmp(nm, "lower")) return str_case(c, s, 0);
        if (!strcmp(nm, "title")) return str_case(c, s, 2);
        if (!strcmp(nm, "capitalize")) return str_case(c, s, 3);
        if (!strcmp(nm, "replace")) {
            jv cnt = arg(a, 2, "count", mk_int(-1));
            return str_replace(c, s, arg(a, 0, NULL, none), arg(a, 1, NULL, none), cnt.t == JV_INT ? cnt.u.i : -1);
        }
        if (!strcmp(nm, "find") || !strcmp(nm, "count")) {
            jv x = arg(a, 0, NULL, none);
            if (x.t != JV_STR) jfail(c, at->line, at->col, "%s: argument must be a string", nm);
            work(c, at, 0, s.u.s.n);
            if (nm[0] == 'f') {
                const char *h = memmem(s.u.s.p, s.u.s.n, x.u.s.p, x.u.s.n);
                if (!h) return mk_int(-1);
                int64_t cp = 0;
                for (const char *q = s.u.s.p; q < h; q++) cp += ((unsigned char)*q & 0xC0) != 0x80;
                return mk_int(cp);
            }
            if (!x.u.s.n) return mk_int(jv_len(c, at, s) + 1);
            int64_t k = 0;
            for (size_t i = 0; i + x.u.s.n <= s.u.s.n;) {
                const char *h = memmem(s.u.s.p + i, s.u.s.n - i, x.u.s.p, x.u.s.n);
                if (!h) break;
                k++;
                i = (size_t)(h - s.u.s.p) + x.u.s.n;
            }
            return mk_int(k);
        }
        if (!strcmp(nm, "join")) return join_list(c, at, arg(a, 0, NULL, none), s, none);
        if (!strcmp(nm, "isdigit") || !strcmp(nm, "isalpha") || !strcmp(nm, "isspace")) {
            if (!s.u.s.n) return mk_bool(0);
            work(c, at, 0, s.u.s.n);
            for (size_t i = 0; i < s.u.s.n;) {
                uint32_t cp;
                i += (size_t)utf8_dec((const unsigned char *)s.u.s.p + i, s.u.s.n - i, &cp);
                int ok = nm[2] == 'd' ? (cp >= '0' && cp <= '9') : nm[2] == 'a' ? utf8proc_isalpha_approx(cp) : tk_is_space(cp);
                if (!ok) return mk_bool(0);
            }
            return mk_bool(1);
        }
        if (!strcmp(nm, "format")) jfail(c, at->line, at->col, "str.format is not supported");
    } else if (s.t == JV_DICT) {
        jdict *d = s.u.d;
        if (!strcmp(nm, "items")) {
            jlist *l = list_new(c, d->n);
            for (size_t i = 0; i < d->n; i++) {
                jlist *p = list_new(c, 2);
                list_push(c, p, d->k[i]);
                list_push(c, p, d->v[i]);
                list_push(c, l, mk_list(p));
            }
            return mk_list(l);
        }
        if (!strcmp(nm, "keys") || !strcmp(nm, "values")) {
            jlist *l = list_new(c, d->n);
            for (size_t i = 0; i < d->n; i++) list_push(c, l, nm[0] == 'k' ? d->k[i] : d->v[i]);
            return mk_list(l);
        }
        if (!strcmp(nm, "get")) {
            jv *v = dict_find(c, d, arg(a, 0, NULL, none));
            return v ? *v : arg(a, 1, "default", none);
        }
    } else if (s.t == JV_LIST) {
        if (!strcmp(nm, "index") || !strcmp(nm, "count")) {
            jv x = arg(a, 0, NULL, none);
            int64_t k = 0;
            work(c, at, s.u.l->n, 0);
            for (size_t i = 0; i < s.u.l->n; i++)
                if (jv_equal(c, s.u.l->v[i], x)) {
                    if (nm[0] == 'i') return mk_int((int64_t)i);
                    k++;
                }
            if (nm[0] == 'i') jfail(c, at->line, at->col, "list.index(x): x not in list");
            return mk_int(k);
        }
    } else if (s.t == JV_LOOP && !strcmp(nm, "cycle")) {
        if (!a->n) jfail(c, at->line, at->col, "loop.cycle needs arguments");
        return a->v[s.u.lp->index0 % a->n];
    }
    jfail(c, at->line, at->col, "%s has no method '%s'", type_name(s), nm);
}

static JINJA_LEAF jv strftime_now(jctx *c, jnode *at, const jargs *a) {
        jv fmt = arg(a, 0, NULL, mk_cstr("%Y-%m-%d"));
        if (fmt.t != JV_STR) jfail(c, at->line, at->col, "strftime_now: format must be a string");
        if (memchr(fmt.u.s.p, 0, fmt.u.s.n)) jfail(c, at->line, at->col, "strftime_now: embedded null character");
        /* strftime writes nothing when its buffer is too small, and nothing for an
         * empty result: a trailing '.' on the format tells the two apart, and the
         * buffer doubles until the whole result fits */
        jbuf f = {0};
        jput(c, &f, fmt.u.s.p, fmt.u.s.n);
        jputc(c, &f, '.');
        f.p[f.n] = 0;
        time_t now = time(NULL);
        struct tm tmv;
        localtime_r(&now, &tmv);
        jbuf o = {0};
        size_t k = 0;
        for (size_t cap = 2 * f.n + 64;; cap *= 2) {
            jb_grow(c, &o, cap);
            k = strftime(o.p, o.cap, f.p, &tmv);
            if (k) break;
            if (o.cap > CELER_MAX_TEMPLATE_OUTPUT)
                jfail(c, at->line, at->col, "strftime_now: the result exceeds %u bytes (the output limit)",
                      CELER_MAX_TEMPLATE_OUTPUT);
        }
        work(c, at, 0, k);
        o.n = k - 1; /* without the '.' */
        jb_free(c, &f);
        return str_from_buf(c, &o);
    }

static JINJA_LEAF jv call_value(jctx *c, jnode *at, jv f, const jargs *a) {
    if (f.t == JV_MACRO) return call_macro(c, at, f.u.m, a);
    if (f.t == JV_METHOD) return call_method(c, at, f.u.me, a);
    if (f.t == JV_FUNC) {
        switch (f.u.fn) {
        case FN_RAISE: {
            jv m = arg(a, 0, NULL, mk_cstr(""));
            jbuf b = {0};
            put_str(c, &b, m);
            jputc(c, &b, 0);
            err_set("%s:%d:%d: raise_exception: %s", c->where, at->line, at->col, b.p ? b.p : "");
            jb_free(c, &b);
            jbail(c);
        }
        case FN_STRFTIME: return strftime_now(c, at, a);
        case FN_NAMESPACE:
        case FN_DICT: {
            jdict *d = dict_new(c);
            int pos = 0;
            for (int i = 0; i < a->n; i++) {
                if (a->kw && a->kw[i]) dict_set(c, d, mk_cstr(a->kw[i]), a->v[i]);
                else if (pos++ == 0 && (a->v[i].t == JV_DICT || a->v[i].t == JV_NS))
                    for (size_t k = 0; k < a->v[i].u.d->n; k++) dict_set(c, d, a->v[i].u.d->k[k], a->v[i].u.d->v[k]);
                else jfail(c, at->line, at->col, "%s() takes keyword arguments", f.u.fn == FN_DICT ? "dict" : "namespace");
            }
            jv v = {f.u.fn == FN_DICT ? JV_DICT : JV_NS, 0, {0}};
            v.u.d = d;
            return v;
        }
        case FN_RANGE: {
            int64_t lo = 0, hi, st = 1;
            jv x = arg(a, 0, NULL, mk_undef("range")), y = arg(a, 1, NULL, mk_undef(NULL)), z = arg(a, 2, NULL, mk_undef(NULL));
            if (x.t != JV_INT) jfail(c, at->line, at->col, "range() needs integers");
            if (y.t == JV_INT) { lo = x.u.i; hi = y.u.i; }
            else hi = x.u.i;
            if (z.t == JV_INT) st = z.u.i;
            if (st == 0) jfail(c, at->line, at->col, "range() step must not be zero");
            jlist *l = list_new(c, 8);
            for (int64_t i = lo; st > 0 ? i < hi : i > hi; i += st) {
                if (l->n >= CELER_MAX_TEMPLATE_RANGE) jfail(c, at->line, at->col, "range too large (over %d elements)", CELER_MAX_TEMPLATE_RANGE);
                list_push(c, l, mk_int(i));
            }
            return mk_list(l);
        }
        }
    }
    if (f.t == JV_UNDEF) undefined_error(c, at, f, "not callable");
    jfail(c, at->line, at->col, "'%s' object is not callable", type_name(f));
}

static jv eval_inner(jctx *c, jnode *n);
static jv eval(jctx *c, jnode *n) {
    nest_in(c, n, "expression");
    jv v = eval_inner(c, n);
    c->nest--;
    return v;
}

static jv eval_inner(jctx *c, jnode *n) {
    switch (n->kind) {
    case E_LIT: return n->lit;
    case E_NAME: return lookup(c, c->frame, n->name, n->name_n);
    case E_ATTR: return get_attr(c, n, eval(c, n->a), n->name);
    case E_ITEM: return get_item(c, n, eval(c, n->a), eval(c, n->b));
    case E_SLICE: {
        jv o = eval(c, n->a);
        jv lo = n->b ? eval(c, n->b) : mk_none(), hi = n->c ? eval(c, n->c) : mk_none(), st = n->d ? eval(c, n->d) : mk_none();
        return do_slice(c, n, o, lo, hi, st);
    }
    case E_CALL: {
        jv f = eval(c, n->a);
        jargs a = eval_args(c, n);
        return call_value(c, n, f, &a);
    }
    case E_FILTER: {
        jv v = eval(c, n->a);
        jargs a = eval_args(c, n);
        return apply_filter(c, n, n->name, v, &a);
    }
    case E_TEST: {
        jv v;
        if (n->a->kind == E_NAME) v = lookup(c, c->frame, n->a->name, n->a->name_n);
        else if (n->a->kind == E_ATTR) {
            jv o = eval(c, n->a->a);
            v = get_attr(c, n->a, o, n->a->name);
        } else v = eval(c, n->a);
        jargs a = eval_args(c, n);
        int r = apply_test(c, n, n->name, v, &a);
        return mk_bool(n->op ? !r : r);
    }
    case E_BIN: return binop(c, n, n->op, eval(c, n->a), eval(c, n->b));
    case E_CONCAT: {
        jv a = to_str(c, eval(c, n->a)), b = to_str(c, eval(c, n->b));
        return binop(c, n, OP_ADD, a, b);
    }
    case E_NEG:
    case E_POS: {
        jv v = eval(c, n->a);
        if (!is_num(v)) jfail(c, n->line, n->col, "bad operand type for unary %c: %s", n->kind == E_NEG ? '-' : '+', type_name(v));
        if (n->kind == E_POS) return v;
        if (v.t != JV_FLOAT && v.u.i == INT64_MIN) int_overflow(c, n);
        return v.t == JV_FLOAT ? mk_float(-v.u.f) : mk_int(-v.u.i);
    }
    case E_NOT: return mk_bool(!truthy(eval(c, n->a)));
    case E_AND: {
        jv a = eval(c, n->a);
        return truthy(a) ? eval(c, n->b) : a;
    }
    case E_OR: {
        jv a = eval(c, n->a);
        return truthy(a) ? a : eval(c, n->b);
    }
    case E_COND:
        if (truthy(eval(c, n->a))) return eval(c, n->b);
        return n->c ? eval(c, n->c) : mk_undef("conditional");
    case E_LIST:
    case E_TUPLE: {
        jlist *l = list_new(c, (size_t)n->nk);
        for (int i = 0; i < n->nk; i++) list_push(c, l, eval(c, n->kids[i]));
        l->tuple = n->kind == E_TUPLE;
        return mk_list(l);
    }
    case E_DICT: {
        jdict *d = dict_new(c);
        for (int i = 0; i + 1 < n->nk; i += 2) dict_set(c, d, eval(c, n->kids[i]), eval(c, n->kids[i + 1]));
        return mk_dict(d);
    }
    default: jfail(c, n->line, n->col, "internal: not an expression");
    }
}

/* ---- filters */
/* float -> int truncating toward zero, saturating (and NaN -> def) instead of C's undefined cast */
static int64_t float_to_int(double f, int64_t def) {
    if (f != f) return def;
    if (f >= 9.2233720368547758e18) return INT64_MAX;
    if (f <= -9.2233720368547758e18) return INT64_MIN;
    return (int64_t)f;
}

static int64_t to_int(jv v, int64_t def) {
    if (v.t == JV_INT || v.t == JV_BOOL) return v.u.i;
    if (v.t == JV_FLOAT) return float_to_int(v.u.f, def);
    if (v.t == JV_STR) {
        char buf[64];
        snprintf(buf, sizeof buf, "%.*s", (int)(v.u.s.n > 60 ? 60 : v.u.s.n), v.u.s.p);
        char *e;
        long long x = strtoll(buf, &e, 10);
        if (e != buf && !*e) return x;
        double f = strtod(buf, &e);
        if (e != buf && !*e) return float_to_int(f, def);
    }
    return def;
}

/* a.lower() versus b.lower(), code point by code point (UTF-8 order is code point
 * order), without building either: a sort compares each string many times. */
static int casecmp(jv a, jv b) {
    size_t i = 0, j = 0;
    while (i < a.u.s.n && j < b.u.s.n) {
        uint32_t x, y;
        i += (size_t)utf8_dec((const unsigned char *)a.u.s.p + i, a.u.s.n - i, &x);
        j += (size_t)utf8_dec((const unsigned char *)b.u.s.p + j, b.u.s.n - j, &y);
        x = (uint32_t)utf8proc_tolower((utf8proc_int32_t)x);
        y = (uint32_t)utf8proc_tolower((utf8proc_int32_t)y);
        if (x != y) return x < y ? -1 : 1;
    }
    return (i < a.u.s.n) - (j < b.u.s.n);
}

static _Thread_local int sort_key_cmp_c;
static _Thread_local jctx *sort_ctx;
static _Thread_local jnode *sort_at;
static _Thread_local jv sort_attr;
static int sort_cmp(const void *x, const void *y) {
    jv a = *(const jv *)x, b = *(const jv *)y;
    if (sort_attr.t == JV_STR) {
        a = get_item(sort_ctx, sort_at, a, sort_attr);
        b = get_item(sort_ctx, sort_at, b, sort_attr);
    }
    if (!sort_key_cmp_c && a.t == JV_STR && b.t == JV_STR) {
        work(sort_ctx, sort_at, 1, a.u.s.n < b.u.s.n ? a.u.s.n : b.u.s.n);
        return casecmp(a, b);
    }
    return jv_cmp(sort_ctx, sort_at, a, b);
}

static JINJA_LEAF jv apply_filter(jctx *c, jnode *at, const char *f, jv v, const jargs *a) {
    jv none = mk_none();
    if (!strcmp(f, "safe")) return v;
    if (!strcmp(f, "default") || !strcmp(f, "d")) {
        jv def = arg(a, 0, "default_value", mk_cstr(""));
        int boolean = truthy(arg(a, 1, "boolean", mk_bool(0)));
        if (v.t == JV_UNDEF || (boolean && !truthy(v))) return def;
        return v;
    }
    if (!strcmp(f, "length") || !strcmp(f, "count")) return mk_int(jv_len(c, at, v));
    if (!strcmp(f, "string")) return to_str(c, v);
    if (!strcmp(f, "tojson")) {
        jv ind = arg(a, 0, "indent", none);
        int sort = truthy(arg(a, 1, "sort_keys", mk_bool(0)));
        jbuf b = {0};
        /* json.dumps: a negative indent is 0 (newlines only); none is the compact form */
        put_json(c, &b, v, ind.t == JV_INT || ind.t == JV_BOOL ? (ind.u.i < 0 ? 0 : ind.u.i) : -1, 0, sort, at);
        return str_from_buf(c, &b);
    }
    if (!strcmp(f, "list")) return mk_list(iter_list(c, at, v));
    if (!strcmp(f, "items")) {
        if (v.t == JV_UNDEF) return mk_list(list_new(c, 1));
        if (v.t != JV_DICT) jfail(c, at->line, at->col, "items: expected a mapping, got %s", type_name(v));
        jmethod m = {v, "items"};
        jargs none_args = {NULL, NULL, 0};
        return call_method(c, at, &m, &none_args);
    }
    if (!strcmp(f, "first") || !strcmp(f, "last")) {
        jlist *l = iter_list(c, at, v);
        if (!l->n) return mk_undef(f);
        return f[0] == 'f' ? l->v[0] : l->v[l->n - 1];
    }
    if (!strcmp(f, "reverse")) {
        if (v.t == JV_STR) return do_slice(c, at, v, none, none, mk_int(-1));
        jlist *l = iter_list(c, at, v), *r = list_new(c, l->n);
        for (size_t i = l->n; i-- > 0;) list_push(c, r, l->v[i]);
        return mk_list(r);
    }
    if (!strcmp(f, "join")) return join_list(c, at, v, arg(a, 0, "d", mk_cstr("")), arg(a, 1, "attribute", none));
    if (!strcmp(f, "int")) return mk_int(to_int(v, to_int(arg(a, 0, "default", mk_int(0)), 0)));
    if (!strcmp(f, "float")) {
        if (v.t == JV_FLOAT) return v;
        if (v.t == JV_INT || v.t == JV_BOOL) return mk_float((double)v.u.i);
        if (v.t == JV_STR) {
            char buf[64], *e;
            snprintf(buf, sizeof buf, "%.*s", (int)(v.u.s.n > 60 ? 60 : v.u.s.n), v.u.s.p);
            double x = strtod(buf, &e);
            if (e != buf && !*e) return mk_float(x);
        }
        return mk_float(0);
    }
    if (!strcmp(f, "abs")) {
        if (v.t == JV_INT) {
            if (v.u.i == INT64_MIN) jfail(c, at->line, at->col, "integer overflow (template integers are 64-bit)");
            return mk_int(v.u.i < 0 ? -v.u.i : v.u.i);
        }
        if (v.t == JV_FLOAT) return mk_float(fabs(v.u.f));
        jfail(c, at->line, at->col, "abs: expected a number");
    }
    if (!strcmp(f, "round")) {
        jv p = arg(a, 0, "precision", mk_int(0));
        double m = pow(10, (double)to_int(p, 0));
        return mk_float(round(num_f(v) * m) / m);
    }
    if (v.t == JV_UNDEF && (!strcmp(f, "trim") || !strcmp(f, "upper") || !strcmp(f, "lower") || !strcmp(f, "replace") ||
                            !strcmp(f, "title") || !strcmp(f, "capitalize") || !strcmp(f, "indent")))
        v = mk_cstr("");
    if (!strcmp(f, "trim")) return str_strip(c, to_str(c, v), 1, 1, arg(a, 0, "chars", none));
    if (!strcmp(f, "upper")) return str_case(c, to_str(c, v), 1);
    if (!strcmp(f, "lower")) return str_case(c, to_str(c, v), 0);
    if (!strcmp(f, "title")) return str_case(c, to_str(c, v), 2);
    if (!strcmp(f, "capitalize")) return str_case(c, to_str(c, v), 3);
    if (!strcmp(f, "replace")) {
        jv cnt = arg(a, 2, "count", none);
        return str_replace(c, to_str(c, v), to_str(c, arg(a, 0, "old", mk_cstr(""))), to_str(c, arg(a, 1, "new", mk_cstr(""))),
                           cnt.t == JV_INT ? cnt.u.i : -1);
    }
    if (!strcmp(f, "indent")) {
        jv w = arg(a, 0, "width", mk_int(4));
        int first = truthy(arg(a, 1, "first", mk_bool(0))), blank = truthy(arg(a, 2, "blank", mk_bool(0)));
        jbuf pad = {0};
        int64_t wn = w.t == JV_STR ? 0 : to_int(w, 4);
        if (wn > (int64_t)CELER_MAX_TEMPLATE_OUTPUT)
            jfail(c, at->line, at->col, "indent: width %lld exceeds the output limit (%u bytes)", (long long)wn,
                  CELER_MAX_TEMPLATE_OUTPUT);
        if (w.t == JV_STR) jput(c, &pad, w.u.s.p, w.u.s.n);
        else for (int64_t i = 0; i < wn; i++) jputc(c, &pad, ' ');
        jv s = to_str(c, v);
        jbuf b = {0};
        size_t i = 0;
        int line0 = 1;
        while (i <= s.u.s.n) {
            const char *nl = memchr(s.u.s.p + i, '\n', s.u.s.n - i);
            size_t e = nl ? (size_t)(nl - s.u.s.p) : s.u.s.n;
            int empty = e == i;
            if ((line0 ? first : 1) && (blank || !empty)) jput(c, &b, pad.p, pad.n);
            jput(c, &b, s.u.s.p + i, e - i);
            if (!nl) break;
            jputc(c, &b, '\n');
            i = e + 1;
            line0 = 0;
        }
        jb_free(c, &pad);
        return str_from_buf(c, &b);
    }
    if (!strcmp(f, "unique")) {
        jlist *l = iter_list(c, at, v), *r = list_new(c, l->n);
        for (size_t i = 0; i < l->n; i++) {
            size_t k;
            /* quadratic, as the values have no hash: each comparison is a step */
            for (k = 0; k < r->n && (work(c, at, 1, 0), !jv_equal(c, r->v[k], l->v[i])); k++) {}
            if (k == r->n) list_push(c, r, l->v[i]);
        }
        return mk_list(r);
    }
    if (!strcmp(f, "sort") || !strcmp(f, "dictsort")) {
        if (!strcmp(f, "dictsort")) {
            if (v.t != JV_DICT) jfail(c, at->line, at->col, "dictsort: expected a mapping");
            jmethod m = {v, "items"};
            jargs na = {NULL, NULL, 0};
            v = call_method(c, at, &m, &na);
        }
        jlist *l = iter_list(c, at, v), *r = list_new(c, l->n);
        for (size_t i = 0; i < l->n; i++) list_push(c, r, l->v[i]);
        int rev = truthy(arg(a, 0, "reverse", mk_bool(0)));
        sort_key_cmp_c = truthy(arg(a, 1, "case_sensitive", mk_bool(0)));
        sort_attr = !strcmp(f, "dictsort") ? mk_int(0) : arg(a, 2, "attribute", none);
        if (!strcmp(f, "dictsort")) sort_attr = none;
        sort_ctx = c;
        sort_at = at;
        /* merge sort: stable, like Python's, n log n comparisons */
        jv *tmp = jalloc(c, (r->n ? r->n : 1) * sizeof *tmp);
        for (size_t w = 1; w < r->n; w *= 2) {
            for (size_t lo = 0; lo + w < r->n; lo += 2 * w) {
                size_t mid = lo + w, hi = lo + 2 * w < r->n ? lo + 2 * w : r->n, i = lo, j = mid, k = lo;
                while (i < mid && j < hi) {
                    int cmp = sort_cmp(&r->v[i], &r->v[j]);
                    /* the right run's element goes first only when strictly before */
                    if (rev ? cmp < 0 : cmp > 0) tmp[k++] = r->v[j++];
                    else tmp[k++] = r->v[i++];
                }
                while (i < mid) tmp[k++] = r->v[i++];
                while (j < hi) tmp[k++] = r->v[j++];
                memcpy(r->v + lo, tmp + lo, (hi - lo) * sizeof *tmp);
            }
        }
        return mk_list(r);
    }
    if (!strcmp(f, "map")) {
        jlist *l = iter_list(c, at, v), *r = list_new(c, l->n);
        jv attr = arg(a, -1, "attribute", none);
        jv def = arg(a, -1, "default", mk_undef(NULL));
        if (attr.t == JV_STR) {
            for (size_t i = 0; i < l->n; i++) {
                jv x = get_item(c, at, l->v[i], attr);
                list_push(c, r, x.t == JV_UNDEF && def.t != JV_UNDEF ? def : x);
            }
            return mk_list(r);
        }
        jv fname = arg(a, 0, NULL, none);
        if (fname.t != JV_STR) jfail(c, at->line, at->col, "map: needs a filter name or attribute=");
        jargs rest = {a->v ? a->v + 1 : NULL, a->kw ? a->kw + 1 : NULL, a->n > 0 ? a->n - 1 : 0};
        const char *fn = jstrdup(c, fname.u.s.p, fname.u.s.n);
        /* map('map', 'map', ...) recurses once per argument */
        nest_in(c, at, "filter");
        for (size_t i = 0; i < l->n; i++) list_push(c, r, apply_filter(c, at, fn, l->v[i], &rest));
        c->nest--;
        return mk_list(r);
    }
    if (!strcmp(f, "select") || !strcmp(f, "reject") || !strcmp(f, "selectattr") || !strcmp(f, "rejectattr")) {
        int is_attr = strstr(f, "attr") != NULL, want = f[0] == 's';
        jlist *l = iter_list(c, at, v), *r = list_new(c, l->n);
        int k0 = is_attr ? 1 : 0;
        jv attr = is_attr ? arg(a, 0, NULL, none) : none;
        jv tname = arg(a, k0, NULL, none);
        jargs rest = {a->n > k0 + 1 ? a->v + k0 + 1 : NULL, a->n > k0 + 1 && a->kw ? a->kw + k0 + 1 : NULL,
                      a->n > k0 + 1 ? a->n - k0 - 1 : 0};
        const char *tn = tname.t == JV_STR ? jstrdup(c, tname.u.s.p, tname.u.s.n) : NULL;
        for (size_t i = 0; i < l->n; i++) {
            jv x = l->v[i];
            jv probe = is_attr ? (attr.t == JV_STR ? get_item(c, at, x, attr) : mk_undef(NULL)) : x;
            int ok = tn ? apply_test(c, at, tn, probe, &rest) : truthy(probe);
            if (ok == want) list_push(c, r, x);
        }
        return mk_list(r);
    }
    if (!strcmp(f, "batch") || !strcmp(f, "slice")) jfail(c, at->line, at->col, "filter '%s' is not supported", f);
    jfail(c, at->line, at->col, "no filter named '%s'", f);
}

static JINJA_LEAF int apply_test(jctx *c, jnode *at, const char *t, jv v, const jargs *a) {
    if (!strcmp(t, "defined")) return v.t != JV_UNDEF;
    if (!strcmp(t, "undefined")) return v.t == JV_UNDEF;
    if (!strcmp(t, "none")) return v.t == JV_NONE;
    if (!strcmp(t, "string")) return v.t == JV_STR;
    if (!strcmp(t, "mapping")) return v.t == JV_DICT || v.t == JV_NS;
    if (!strcmp(t, "iterable")) return v.t == JV_LIST || v.t == JV_DICT || v.t == JV_STR || v.t == JV_UNDEF;
    if (!strcmp(t, "sequence")) return v.t == JV_LIST || v.t == JV_DICT || v.t == JV_STR;
    if (!strcmp(t, "number")) return v.t == JV_INT || v.t == JV_FLOAT || v.t == JV_BOOL;
    if (!strcmp(t, "integer")) return v.t == JV_INT;
    if (!strcmp(t, "float")) return v.t == JV_FLOAT;
    if (!strcmp(t, "boolean")) return v.t == JV_BOOL;
    if (!strcmp(t, "true")) return v.t == JV_BOOL && v.u.i;
    if (!strcmp(t, "false")) return v.t == JV_BOOL && !v.u.i;
    if (!strcmp(t, "callable")) return v.t == JV_MACRO || v.t == JV_FUNC || v.t == JV_METHOD;
    if (!strcmp(t, "odd") || !strcmp(t, "even")) {
        if (v.t != JV_INT) jfail(c, at->line, at->col, "test '%s' needs an integer", t);
        return (int)((v.u.i % 2 != 0) == (t[0] == 'o'));
    }
    if (!strcmp(t, "divisibleby")) {
        jv d = arg(a, 0, "num", mk_int(1));
        if (v.t != JV_INT || d.t != JV_INT || !d.u.i) jfail(c, at->line, at->col, "divisibleby needs integers");
        return v.u.i % d.u.i == 0;
    }
    if (!strcmp(t, "eq") || !strcmp(t, "equalto") || !strcmp(t, "==")) return jv_equal(c, v, arg(a, 0, NULL, mk_none()));
    if (!strcmp(t, "ne") || !strcmp(t, "!=")) return !jv_equal(c, v, arg(a, 0, NULL, mk_none()));
    if (!strcmp(t, "sameas")) return jv_equal(c, v, arg(a, 0, NULL, mk_none())) && v.t == arg(a, 0, NULL, mk_none()).t;
    if (!strcmp(t, "in")) return contains(c, at, arg(a, 0, NULL, mk_none()), v);
    if (!strcmp(t, "lower") || !strcmp(t, "upper")) {
        if (v.t != JV_STR) return 0;
        jv x = str_case(c, v, t[0] == 'u');
        return jv_equal(c, x, v);
    }
    if (!strcmp(t, "gt") || !strcmp(t, "ge") || !strcmp(t, "lt") || !strcmp(t, "le")) {
        int r = jv_cmp(c, at, v, arg(a, 0, NULL, mk_none()));
        return t[0] == 'g' ? (t[1] == 't' ? r > 0 : r >= 0) : (t[1] == 't' ? r < 0 : r <= 0);
    }
    jfail(c, at->line, at->col, "no test named '%s'", t);
}

/* ---- statements */
/* Output captured for a macro call or a set block goes to a buffer registered in the
 * context, so that an error unwinding through it still frees it. */
static jbuf *capture_begin(jctx *c) {
    jbuf *b = jalloc(c, sizeof *b);
    memset(b, 0, sizeof *b);
    jbuf *saved = c->out;
    c->out = b;
    return saved;
}

static jv capture_end(jctx *c, jbuf *saved) {
    jbuf *b = c->out;
    c->out = saved;
    return str_from_buf(c, b);
}

static JINJA_LEAF jv call_macro(jctx *c, jnode *at, jnode *m, const jargs *a) {
    if (++c->depth > CELER_MAX_TEMPLATE_DEPTH) jfail(c, at->line, at->col, "macro recursion too deep");
    jframe *f = jalloc(c, sizeof *f);
    memset(f, 0, sizeof *f);
    f->parent = c->root;
    int pos = 0;
    for (int i = 0; i < a->n; i++) {
        if (a->kw && a->kw[i]) {
            int k;
            for (k = 0; k < m->nnames && strcmp(m->names[k], a->kw[i]); k++) {}
            if (k == m->nnames) jfail(c, at->line, at->col, "macro '%s' has no parameter '%s'", m->name, a->kw[i]);
            frame_set(c, f, m->names[k], a->v[i]);
        } else {
            if (pos >= m->nnames) jfail(c, at->line, at->col, "macro '%s' takes %d arguments", m->name, m->nnames);
            frame_set(c, f, m->names[pos++], a->v[i]);
        }
    }
    jframe *saved = c->frame;
    c->frame = f;
    for (int k = 0; k < m->nnames; k++)
        if (!dict_find_s(c, &f->vars, m->names[k], strlen(m->names[k])))
            frame_set(c, f, m->names[k], m->defaults[k] ? eval(c, m->defaults[k]) : mk_undef(m->names[k]));
    jbuf *saved_out = capture_begin(c);
    int sb = c->brk, sc = c->cont;
    exec_body(c, m->body, m->nbody);
    c->brk = sb;
    c->cont = sc;
    c->frame = saved;
    c->depth--;
    return capture_end(c, saved_out);
}

static _Noreturn void steps_fail(jctx *c, const jnode *at) {
    jfail(c, at ? at->line : 0, at ? at->col : 0,
          "rendering takes more than %d steps (the limit; a step is a statement, a loop iteration, an element "
          "visited or %d bytes read or written)", CELER_MAX_TEMPLATE_STEPS, CELER_TEMPLATE_STEP_BYTES);
}

static void count_step(jctx *c, const jnode *n) { work(c, n, 1, 0); }

static void exec_stmt_inner(jctx *c, jnode *n);
static void exec_stmt(jctx *c, jnode *n) {
    count_step(c, n);
    nest_in(c, n, "block");
    const jnode *saved = c->stmt;
    c->stmt = n;
    exec_stmt_inner(c, n);
    c->stmt = saved;
    c->nest--;
}

static void exec_stmt_inner(jctx *c, jnode *n) {
    switch (n->kind) {
    case S_TEXT: jput(c, c->out, n->name, n->name_n); break;
    case S_OUT: {
        jv v = eval(c, n->a);
        put_str(c, c->out, v);
        break;
    }
    case S_IF:
        if (truthy(eval(c, n->a))) exec_body(c, n->body, n->nbody);
        else exec_body(c, n->orelse, n->norelse);
        break;
    case S_FOR: {
        jv it = eval(c, n->a);
        jlist *src = iter_list(c, n, it);
        /* the loop filter is applied before loop.* is computed, as Jinja does */
        jframe *outer = c->frame;
        jlist *items = src;
        if (n->b) {
            items = list_new(c, src->n);
            for (size_t i = 0; i < src->n; i++) {
                jframe *tf = jalloc(c, sizeof *tf);
                memset(tf, 0, sizeof *tf);
                tf->parent = outer;
                c->frame = tf;
                if (n->nnames == 1) frame_set(c, tf, n->names[0], src->v[i]);
                else if (src->v[i].t == JV_LIST)
                    for (int k = 0; k < n->nnames && (size_t)k < src->v[i].u.l->n; k++)
                        frame_set(c, tf, n->names[k], src->v[i].u.l->v[k]);
                if (truthy(eval(c, n->b))) list_push(c, items, src->v[i]);
                c->frame = outer;
            }
        }
        if (!items->n) {
            exec_body(c, n->orelse, n->norelse);
            break;
        }
        jloop *lp = jalloc(c, sizeof *lp);
        lp->length = (int64_t)items->n;
        lp->items = items;
        jv loopv = {JV_LOOP, 0, {0}};
        loopv.u.lp = lp;
        for (size_t i = 0; i < items->n; i++) {
            count_step(c, n);
            jframe *f = jalloc(c, sizeof *f);
            memset(f, 0, sizeof *f);
            f->parent = outer;
            lp->index0 = (int64_t)i;
            frame_set(c, f, "loop", loopv);
            jv x = items->v[i];
            if (n->nnames == 1) frame_set(c, f, n->names[0], x);
            else {
                if (x.t != JV_LIST || x.u.l->n != (size_t)n->nnames)
                    jfail(c, n->line, n->col, "cannot unpack %s into %d loop variables", type_name(x), n->nnames);
                for (int k = 0; k < n->nnames; k++) frame_set(c, f, n->names[k], x.u.l->v[k]);
            }
            c->frame = f;
            exec_body(c, n->body, n->nbody);
            c->frame = outer;
            if (c->brk) { c->brk = 0; break; }
            c->cont = 0;
        }
        break;
    }
    case S_SET: {
        jv v = eval(c, n->a);
        if (n->attr) {
            jv ns = lookup(c, c->frame, n->name, strlen(n->name));
            if (ns.t != JV_NS) jfail(c, n->line, n->col, "cannot assign attribute '%s' on %s '%s' (use namespace())", n->attr, type_name(ns), n->name);
            dict_set(c, ns.u.d, mk_cstr(n->attr), v);
        } else frame_set(c, c->frame, n->name, v);
        break;
    }
    case S_SETBLOCK: {
        jbuf *saved = capture_begin(c);
        exec_body(c, n->body, n->nbody);
        frame_set(c, c->frame, n->name, capture_end(c, saved));
        break;
    }
    case S_FILTERBLOCK: {
        jbuf *saved = capture_begin(c);
        exec_body(c, n->body, n->nbody);
        jv body = capture_end(c, saved);
        jargs a = eval_args(c, n);
        put_str(c, c->out, apply_filter(c, n, n->name, body, &a));
        break;
    }
    case S_MACRO: {
        jv m = {JV_MACRO, 0, {0}};
        m.u.m = n;
        frame_set(c, c->frame, n->name, m);
        break;
    }
    case S_BREAK: c->brk = 1; break;
    case S_CONTINUE: c->cont = 1; break;
    case S_BLOCK: exec_body(c, n->body, n->nbody); break;
    default: jfail(c, n->line, n->col, "internal: not a statement");
    }
}

/* The result is a C string: a NUL byte in it would cut off what follows, so it is
 * an error at the statement that writes it. c->clean: bytes of the result checked. */
static void check_output(jctx *c, const jnode *at) {
    if (c->out != c->top) return;
    if (c->top->n > CELER_MAX_TEMPLATE_OUTPUT)
        jfail(c, at->line, at->col, "the output exceeds %u bytes (the limit)", CELER_MAX_TEMPLATE_OUTPUT);
    if (c->top->n > c->clean) {
        const char *z = memchr(c->top->p + c->clean, 0, c->top->n - c->clean);
        if (z)
            jfail(c, at->line, at->col, "the output would contain a NUL byte (at offset %zu), which ends a C string",
                  (size_t)(z - c->top->p));
        c->clean = c->top->n;
    }
}

static void exec_body(jctx *c, jnode **body, int n) {
    for (int i = 0; i < n && !c->brk && !c->cont; i++) {
        exec_stmt(c, body[i]);
        check_output(c, body[i]);
    }
}

/* ======================================================================== entry points */
/* Frees the render's memory; on success every buffer has been freed or adopted, on
 * failure jbail freed them. */
static void ctx_free(jctx *c) {
    for (jown *o = c->owned; o; o = o->next) free(o->p);
    jarena_blk *b = c->arena;
    while (b) {
        jarena_blk *n = b->next;
        free(b);
        b = n;
    }
    free(c);
}

/* Lexes and parses the template into c (c->jb must be set); returns the body. */
static svec parse_template(jctx *c, const char *tmpl, size_t tmpl_len) {
    /* as jinja2 reads a template: newlines normalized to \n, one trailing newline dropped */
    char *src = jalloc(c, tmpl_len + 1);
    size_t sn = 0;
    for (size_t i = 0; i < tmpl_len; i++) {
        if (tmpl[i] == '\r') {
            src[sn++] = '\n';
            if (i + 1 < tmpl_len && tmpl[i + 1] == '\n') i++;
        } else src[sn++] = tmpl[i];
    }
    if (sn && src[sn - 1] == '\n') sn--;
    src[sn] = 0;
    c->src = src;
    c->src_n = sn;
    lex(c);
    svec body = {0};
    parse_body(c, &body, NULL, NULL, NULL);
    return body;
}

static jctx *ctx_new(const char *tmpl_len_where, size_t tmpl_len) {
    if (tmpl_len > CELER_MAX_TEMPLATE_BYTES) {
        err_set("%s: template of %zu bytes exceeds the %u-byte limit", tmpl_len_where, tmpl_len, CELER_MAX_TEMPLATE_BYTES);
        return NULL;
    }
    jctx *c = calloc(1, sizeof *c);
    if (!c) {
        err_set("out of memory");
        return NULL;
    }
    c->where = tmpl_len_where;
    return c;
}

/* Parses tmpl without rendering it: 0 when it is a template this interpreter can
 * render, else -1 with a message naming where, line and column (syntax errors and
 * the size and nesting limits a template breaks before it runs). */
int tk_jinja_check(const char *tmpl, size_t tmpl_len, const char *where);
int tk_jinja_check(const char *tmpl, size_t tmpl_len, const char *where) {
    jctx *c = ctx_new(where ? where : "template", tmpl_len);
    if (!c) return -1;
    if (setjmp(c->jb)) {
        ctx_free(c);
        return -1;
    }
    parse_template(c, tmpl, tmpl_len);
    ctx_free(c);
    return 0;
}

/* Renders tmpl with the variables of vars (a JSON object document, may be NULL) and
 * extra string variables (name, value pairs, NULL-terminated). Returns a malloc'd
 * NUL-terminated string (its length in *out_len), or NULL with a message. */
char *tk_jinja_render(const char *tmpl, size_t tmpl_len, const char *where, const tj_val *vars, const char *const *extra,
                      const tj_val *extra_json_name_vals[], size_t *out_len);
char *tk_jinja_render(const char *tmpl, size_t tmpl_len, const char *where, const tj_val *vars, const char *const *extra,
                      const tj_val *extra_json_name_vals[], size_t *out_len) {
    jctx *c = ctx_new(where ? where : "template", tmpl_len);
    if (!c) return NULL;
    if (setjmp(c->jb)) {
        ctx_free(c);
        return NULL;
    }
    svec body = parse_template(c, tmpl, tmpl_len);
    c->depth = 0;
    jbuf *out = jalloc(c, sizeof *out);
    memset(out, 0, sizeof *out);
    c->out = c->top = out;
    jframe *root = jalloc(c, sizeof *root);
    memset(root, 0, sizeof *root);
    c->root = root;
    c->frame = root;
    if (vars && vars->type == TJ_OBJ)
        for (uint32_t i = 0; i < vars->n; i++) {
            const tj_val *k = &vars->u.items[2 * i];
            frame_set(c, root, jstrdup(c, k->u.s, k->n), from_json(c, &vars->u.items[2 * i + 1]));
        }
    for (int i = 0; extra && extra[i]; i += 2) frame_set(c, root, extra[i], mk_cstr(jstrdup(c, extra[i + 1], strlen(extra[i + 1]))));
    for (int i = 0; extra_json_name_vals && extra_json_name_vals[i]; i += 2) {
        const tj_val *nm = extra_json_name_vals[i];
        frame_set(c, root, jstrdup(c, nm->u.s, nm->n), from_json(c, extra_json_name_vals[i + 1]));
    }
    exec_body(c, body.v, body.n);
    if (c->brk || c->cont) jfail(c, 0, 0, "break/continue outside a loop");
    jb_grow(c, out, 0);
    out->p[out->n] = 0;
    jb_unlink(c, out);
    char *r = out->p;
    if (out_len) *out_len = out->n;
    ctx_free(c);
    return r;
}

char *celer_jinja_render(const char *tmpl, size_t tmpl_len, const char *vars_json) {
    tj_doc *d = NULL;
    if (vars_json) {
        d = tj_parse(vars_json, strlen(vars_json), "template variables");
        if (!d) return NULL;
        if (tj_root(d)->type != TJ_OBJ) {
            tj_free(d);
            err_set("template variables: want a JSON object");
            return NULL;
        }
    }
    char *r = tk_jinja_render(tmpl, tmpl_len, "template", d ? tj_root(d) : NULL, NULL, NULL, NULL);
    tj_free(d);
    return r;
}
