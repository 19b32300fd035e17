/* server/toolcall.c: the response side of tool calls: the family table, and the
 * parser that splits a choice's generated text into content and calls.
 *
 * A parser keeps the text it has not decided yet in `pend`. Text that cannot be part
 * of a call marker is returned as content at once; a tail that could still become a
 * marker ("<tool_" of "<tool_call>") is held back until the next text decides it; the
 * text of a call is held until the call is complete, then checked (a JSON object of
 * arguments, a declared function name, within parallel_tool_calls) and returned as a
 * call, or, when it fails a check, as content (the text as the model wrote it). The
 * decisions depend only on the bytes, never on how they were split: streaming and a
 * whole answer give the same content and calls (tests/test_toolcall.c checks every
 * split). Whitespace around calls is not content: a run of whitespace is held until
 * non-whitespace follows it, and dropped at the end once a call was made. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "server/toolcall.h"

/* ---- the families: one place ---- */

static const tc_family tc_families[] = {
    /* probed in this order: gpt-oss's vocabulary has no <tool_call>, Qwen's has no [TOOL_CALLS] */
    {TC_HARMONY, "harmony", "<|call|>", "<|channel|>commentary to=functions.", 1},
    {TC_MISTRAL, "mistral", "[ARGS]", "[TOOL_CALLS]", 1},       /* [TOOL_CALLS]name[ARGS]{...} (tekken v11+) */
    {TC_MISTRAL, "mistral", "[TOOL_CALLS]", "[TOOL_CALLS]", 1}, /* [TOOL_CALLS][{"name", "arguments"}] */
    {TC_HERMES, "hermes", "<tool_call>", "<tool_call>", 0},
    {TC_LLAMA3, "llama3", "<|python_tag|>", "{\"name\":", 1},
};
enum { TC_N_FAMILIES = sizeof tc_families / sizeof tc_families[0] };

const tc_family *tc_family_get(tc_syntax s) {
    for (int i = 0; i < TC_N_FAMILIES; i++)
        if (tc_families[i].syntax == s) return &tc_families[i];
    return NULL;
}

const tc_family *tc_family_for(const celer_tokenizer *tok) {
    for (int i = 0; tok && i < TC_N_FAMILIES; i++)
        if (celer_tokenizer_token_id(tok, tc_families[i].probe) >= 0) {
            const tc_family *f = &tc_families[i];
            /* a Hermes-style model whose <tool_call> is a special token: keep specials */
            if (f->syntax == TC_HERMES && celer_tokenizer_is_special(tok, celer_tokenizer_token_id(tok, f->probe))) {
                static const tc_family hermes_special = {TC_HERMES, "hermes", "<tool_call>", "<tool_call>", 1};
                return &hermes_special;
            }
            return f;
        }
    return tc_family_get(TC_HERMES);
}

/* ---- buffers ---- */

typedef struct {
    char *p;
    size_t n, cap;
} tcb;

static int tcb_add(tcb *b, const char *s, size_t n) {
    if (b->n + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap : 64;
        while (c < b->n + n + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) return -1;
        b->p = q;
        b->cap = c;
    }
    if (n) memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return 0;
}


/* Drops the first k bytes. */
static void tcb_consume(tcb *b, size_t k) {
    if (k >= b->n) { b->n = 0; }
    else {
        memmove(b->p, b->p + k, b->n - k);
        b->n -= k;
    }
    if (b->p) b->p[b->n] = 0;
}

void tc_out_clear(tc_out *o) {
    for (int i = 0; i < o->n_calls; i++) {
        free(o->calls[i].name);
        free(o->calls[i].arguments);
    }
    o->n_calls = 0;
    o->content_len = 0;
}

void tc_out_free(tc_out *o) {
    if (!o) return;
    tc_out_clear(o);
    free(o->calls);
    free(o->content);
    memset(o, 0, sizeof *o);
}

static int out_text(tc_out *o, const char *s, size_t n) {
    if (o->content_len + n + 1 > o->content_cap) {
        size_t c = o->content_cap ? o->content_cap : 64;
        while (c < o->content_len + n + 1) c *= 2;
        char *q = realloc(o->content, c);
        if (!q) return -1;
        o->content = q;
        o->content_cap = c;
    }
    if (n) memcpy(o->content + o->content_len, s, n);
    o->content_len += n;
    o->content[o->content_len] = 0;
    return 0;
}

/* ---- the parser ---- */

enum { ST_TEXT = 0, ST_CALL, ST_START, ST_HEADER, ST_BODY, ST_AFTER };
enum { HK_CONTENT = 0, HK_DROP, HK_CALL };

struct tc_parser {
    tc_syntax syn;
    char **names;               /* [n_names] declared functions */
    int n_names;
    int max_calls;              /* 0: no limit */
    tcb pend;                   /* undecided text */
    tcb ws;                     /* whitespace held after the last content */
    int state;                  /* ST_* */
    int n_calls;
    size_t n_text;              /* non-whitespace content bytes returned */
    /* harmony: the message being read */
    int hkind;                  /* HK_* */
    tcb hhead;                  /* its header (for a call returned as text) */
    char *hname;                /* HK_CALL: the function */
    uint64_t rng;
};

static int is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r'; }

/* Content: whitespace is held until something else follows it. */
static int content(tc_parser *p, tc_out *o, const char *s, size_t n) {
    size_t last = n;
    while (last > 0 && is_ws(s[last - 1])) last--;
    if (last == 0) return tcb_add(&p->ws, s, n);
    if (out_text(o, p->ws.p, p->ws.n) || out_text(o, s, last)) return -1;
    for (size_t i = 0; i < last; i++) p->n_text += !is_ws(s[i]);
    p->ws.n = 0; /* the whitespace held so far went out; the tail's is held */
    return tcb_add(&p->ws, s + last, n - last);
}

static int contents(tc_parser *p, tc_out *o, const char *s) { return content(p, o, s, strlen(s)); }

static uint64_t next_rand(uint64_t *s) {
    uint64_t z = (*s += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
}

static int known(const tc_parser *p, const char *name, size_t n) {
    for (int i = 0; i < p->n_names; i++)
        if (strlen(p->names[i]) == n && !memcmp(p->names[i], name, n)) return 1;
    return 0;
}

/* A call of name (n bytes) with arguments args (any JSON value). 1 when accepted,
 * 0 when it fails a check (the caller returns its text), -1 on out of memory. */
static int add_call(tc_parser *p, tc_out *o, const char *name, size_t n, json_t *args) {
    if (!json_is_object(args) || !known(p, name, n) || (p->max_calls && p->n_calls >= p->max_calls)) return 0;
    char *a = json_dumps(args, JSON_COMPACT);
    char *nm = strndup(name, n);
    if (o->n_calls == o->cap_calls) {
        int c = o->cap_calls ? 2 * o->cap_calls : 4;
        tc_call *q = realloc(o->calls, (size_t)c * sizeof *q);
        if (!q) goto oom;
        o->calls = q;
        o->cap_calls = c;
    }
    if (!a || !nm) goto oom;
    tc_call *c = &o->calls[o->n_calls++];
    memset(c, 0, sizeof *c);
    c->index = p->n_calls++;
    c->name = nm;
    c->arguments = a;
    static const char al[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789";
    memcpy(c->id, "call_", 5);
    for (int i = 0; i < 24; i++) c->id[5 + i] = al[next_rand(&p->rng) % (sizeof al - 1)];
    c->id[29] = 0;
    /* whitespace before a call is not content */
    p->ws.n = 0;
    return 1;
oom:
    free(a);
    free(nm);
    return -1;
}

/* Parses one JSON object of s[0, n) (surrounding whitespace allowed). NULL when it is not one. */
static json_t *parse_object(const char *s, size_t n) {
    json_error_t je;
    json_t *v = json_loadb(s, n, JSON_REJECT_DUPLICATES, &je);
    if (v && !json_is_object(v)) {
        json_decref(v);
        return NULL;
    }
    return v;
}

/* The arguments of a {"name", "arguments"|"parameters"} object: an object, or a
 * string holding one. New reference or NULL. */
static json_t *call_arguments(json_t *call) {
    json_t *a = json_object_get(call, "arguments");
    if (!a) a = json_object_get(call, "parameters");
    if (!a) return json_object(); /* a call without arguments */
    if (json_is_string(a)) return parse_object(json_string_value(a), json_string_length(a));
    return json_incref(a);
}

/* {"name": N, "arguments": {...}} -> a call. 1, 0 (not a valid call) or -1. */
static int object_call(tc_parser *p, tc_out *o, json_t *call) {
    json_t *name = json_object_get(call, "name");
    if (!json_is_object(call) || !json_is_string(name)) return 0;
    json_t *args = call_arguments(call);
    if (!args) return 0;
    int rc = add_call(p, o, json_string_value(name), json_string_length(name), args);
    json_decref(args);
    return rc;
}

/* Finds needle in s[from, n); its offset or -1. */
static long find(const char *s, size_t n, size_t from, const char *needle) {
    size_t m = strlen(needle);
    if (from > n) return -1;
    const char *h = memmem(s + from, n - from, needle, m);
    return h ? (long)(h - s) : -1;
}

/* The length of the longest tail of s[0, n) that is a proper prefix of a marker. */
static size_t hold_len(const char *s, size_t n, const char *const *markers, int nm) {
    size_t best = 0;
    for (int i = 0; i < nm; i++) {
        size_t m = strlen(markers[i]);
        for (size_t k = m - 1; k > best; k--)
            if (k <= n && !memcmp(s + n - k, markers[i], k)) {
                best = k;
                break;
            }
    }
    return best;
}

/* TEXT state of the opener families: content up to the opener, then `then`. 1 when the
 * opener was found (and consumed), 0 when the text was used up, -1 on out of memory. */
static int text_until(tc_parser *p, tc_out *o, const char *opener) {
    long i = find(p->pend.p, p->pend.n, 0, opener);
    if (i >= 0) {
        if (content(p, o, p->pend.p, (size_t)i)) return -1;
        tcb_consume(&p->pend, (size_t)i + strlen(opener));
        return 1;
    }
    size_t h = hold_len(p->pend.p, p->pend.n, &opener, 1);
    if (content(p, o, p->pend.p, p->pend.n - h)) return -1;
    tcb_consume(&p->pend, p->pend.n - h);
    return 0;
}

/* ---- hermes: <tool_call>{...}</tool_call> ---- */

static int hermes_call(tc_parser *p, tc_out *o, const char *body, size_t n, int closed) {
    json_t *call = parse_object(body, n);
    int rc = call ? object_call(p, o, call) : 0;
    json_decref(call);
    if (rc) return rc < 0 ? -1 : 0;
    if (contents(p, o, "<tool_call>") || content(p, o, body, n) || (closed && contents(p, o, "</tool_call>"))) return -1;
    return 0;
}

static int hermes_step(tc_parser *p, tc_out *o, int final) {
    for (;;) {
        if (p->state == ST_TEXT) {
            int r = text_until(p, o, "<tool_call>");
            if (r < 0) return -1;
            if (r == 0) break;
            p->state = ST_CALL;
        } else {
            long i = find(p->pend.p, p->pend.n, 0, "</tool_call>");
            if (i < 0) break;
            if (hermes_call(p, o, p->pend.p, (size_t)i, 1)) return -1;
            tcb_consume(&p->pend, (size_t)i + strlen("</tool_call>"));
            p->state = ST_TEXT;
        }
    }
    if (!final) return 0;
    int rc = p->state == ST_CALL ? hermes_call(p, o, p->pend.p, p->pend.n, 0) : content(p, o, p->pend.p, p->pend.n);
    p->pend.n = 0;
    return rc;
}

/* ---- llama3: a reply that is [<|python_tag|>]{"name", "parameters"}[; {...}] ---- */

/* Calls of s[0, n): JSON objects separated by whitespace or ';'. All or nothing: the
 * calls are checked first, then added. 1 when they were calls, 0 when not, -1. */
static int json_calls(tc_parser *p, tc_out *o, const char *s, size_t n, int array) {
    json_t *list = json_array();
    if (!list) return -1;
    size_t i = 0;
    int ok = 1;
    if (array) { /* one JSON array of call objects */
        json_error_t je;
        json_t *a = json_loadb(s, n, JSON_REJECT_DUPLICATES, &je);
        ok = json_is_array(a) && json_array_size(a) > 0;
        if (ok) json_array_extend(list, a);
        json_decref(a);
        i = n;
    }
    while (ok && i < n) {
        while (i < n && (is_ws(s[i]) || s[i] == ';')) i++;
        if (i >= n) break;
        json_error_t je;
        json_t *v = json_loadb(s + i, n - i, JSON_DISABLE_EOF_CHECK | JSON_REJECT_DUPLICATES, &je);
        if (!json_is_object(v)) ok = 0;
        else {
            json_array_append(list, v);
            i += (size_t)je.position;
        }
        json_decref(v);
    }
    /* check every one before adding any */
    size_t k;
    json_t *c;
    int n_ok = 0;
    json_array_foreach(list, k, c) {
        json_t *name = json_object_get(c, "name"), *args = json_is_object(c) ? call_arguments(c) : NULL;
        if (!json_is_string(name) || !json_is_object(args) ||
            !known(p, json_string_value(name), json_string_length(name)))
            ok = 0;
        json_decref(args);
        n_ok++;
    }
    if (!ok || n_ok == 0 || (p->max_calls && p->n_calls + n_ok > p->max_calls)) {
        json_decref(list);
        return 0;
    }
    json_array_foreach(list, k, c) if (object_call(p, o, c) < 0) {
        json_decref(list);
        return -1;
    }
    json_decref(list);
    return 1;
}

static int llama3_step(tc_parser *p, tc_out *o, int final) {
    static const char *const tag = "<|python_tag|>";
    if (p->state == ST_START) {
        size_t i = 0;
        while (i < p->pend.n && is_ws(p->pend.p[i])) i++;
        const char *s = p->pend.p + i;
        size_t n = p->pend.n - i, tl = strlen(tag);
        if (n > 0 && (s[0] == '{' || (n >= tl && !memcmp(s, tag, tl)))) p->state = ST_CALL;
        else if (n > 0 && !(n < tl && !memcmp(s, tag, n))) p->state = ST_TEXT;
        else if (!final) return 0; /* undecided */
        else p->state = ST_TEXT;
    }
    if (p->state == ST_TEXT) {
        int rc = content(p, o, p->pend.p, p->pend.n);
        p->pend.n = 0;
        return rc;
    }
    if (!final) return 0; /* a call: decided at the end */
    size_t i = 0, tl = strlen(tag);
    while (i < p->pend.n && is_ws(p->pend.p[i])) i++;
    if (p->pend.n - i >= tl && !memcmp(p->pend.p + i, tag, tl)) i += tl;
    int r = json_calls(p, o, p->pend.p + i, p->pend.n - i, 0);
    if (r == 0) r = content(p, o, p->pend.p, p->pend.n);
    p->pend.n = 0;
    return r < 0 ? -1 : 0;
}

/* ---- mistral: [TOOL_CALLS][{...}] or [TOOL_CALLS]name[ARGS]{...} ---- */

/* One segment after a [TOOL_CALLS]. 1, 0 or -1 as json_calls. */
static int mistral_segment(tc_parser *p, tc_out *o, const char *s, size_t n) {
    size_t i = 0;
    while (i < n && is_ws(s[i])) i++;
    if (i < n && s[i] == '[') return json_calls(p, o, s + i, n - i, 1);
    long a = find(s, n, i, "[ARGS]");
    if (a < 0) return 0;
    long cid = find(s, (size_t)a, i, "[CALL_ID]");
    size_t name_end = cid >= 0 ? (size_t)cid : (size_t)a;
    while (name_end > i && is_ws(s[name_end - 1])) name_end--;
    if (name_end == i) return 0;
    size_t b = (size_t)a + strlen("[ARGS]");
    json_t *args = parse_object(s + b, n - b);
    if (!args || !known(p, s + i, name_end - i) || (p->max_calls && p->n_calls >= p->max_calls)) {
        json_decref(args);
        return 0;
    }
    int rc = add_call(p, o, s + i, name_end - i, args);
    json_decref(args);
    return rc;
}

static int mistral_step(tc_parser *p, tc_out *o, int final) {
    static const char *const op = "[TOOL_CALLS]";
    if (p->state == ST_TEXT) {
        int r = text_until(p, o, op);
        if (r < 0) return -1;
        if (r == 1) p->state = ST_CALL;
    }
    if (!final) return 0;
    if (p->state == ST_TEXT) {
        int rc = content(p, o, p->pend.p, p->pend.n);
        p->pend.n = 0;
        return rc;
    }
    /* every segment must be a call, else the whole text is content */
    const char *s = p->pend.p;
    size_t n = p->pend.n, ol = strlen(op);
    tc_out tmp = {0};
    int saved_calls = p->n_calls, ok = 1;
    for (size_t i = 0; ok && i <= n;) {
        long j = find(s, n, i, op);
        size_t e = j < 0 ? n : (size_t)j;
        int r = mistral_segment(p, &tmp, s + i, e - i);
        if (r < 0) { tc_out_free(&tmp); return -1; }
        ok = r == 1;
        if (j < 0) break;
        i = (size_t)j + ol;
    }
    int rc = 0;
    if (ok) {
        for (int k = 0; k < tmp.n_calls && !rc; k++) {
            if (o->n_calls == o->cap_calls) {
                int c = o->cap_calls ? 2 * o->cap_calls : 4;
                tc_call *q = realloc(o->calls, (size_t)c * sizeof *q);
                if (!q) { rc = -1; break; }
                o->calls = q;
                o->cap_calls = c;
            }
            o->calls[o->n_calls++] = tmp.calls[k];
            tmp.calls[k].name = tmp.calls[k].arguments = NULL;
        }
    } else {
        p->n_calls = saved_calls;
        rc = contents(p, o, op) || content(p, o, s, n) ? -1 : 0;
    }
    tc_out_free(&tmp);
    p->pend.n = 0;
    return rc;
}

/* ---- harmony: <|start|>assistant<|channel|>C [to=R] [<|constrain|>json]<|message|>BODY<|end|> ---- */

static const char *const hm_end[] = {"<|end|>", "<|call|>", "<|return|>", "<|start|>"};
enum { HM_N_END = 4 };

/* The word after key in the header h (up to whitespace or "<|"), or 0 length. */
static const char *header_word(const char *h, size_t n, const char *key, size_t *len) {
    long i = find(h, n, 0, key);
    *len = 0;
    if (i < 0) return NULL;
    const char *w = h + i + strlen(key);
    size_t k = 0;
    while (w + k < h + n && !is_ws(w[k]) && w[k] != '<') k++;
    *len = k;
    return w;
}

static int harmony_header(tc_parser *p, const char *h, size_t n) {
    size_t cl, rl;
    const char *ch = header_word(h, n, "<|channel|>", &cl), *to = header_word(h, n, "to=", &rl);
    free(p->hname);
    p->hname = NULL;
    p->hhead.n = 0;
    if (tcb_add(&p->hhead, h, n)) return -1;
    if (to) {
        static const char fn[] = "functions.";
        if (rl > sizeof fn - 1 && !memcmp(to, fn, sizeof fn - 1)) {
            p->hkind = HK_CALL;
            if (!(p->hname = strndup(to + sizeof fn - 1, rl - (sizeof fn - 1)))) return -1;
        } else {
            p->hkind = HK_DROP; /* a built-in tool (browser, python): not supported */
        }
    } else if (ch && cl == 8 && !memcmp(ch, "analysis", 8)) {
        p->hkind = HK_DROP; /* reasoning is not content */
    } else {
        p->hkind = HK_CONTENT; /* final, commentary preambles, no channel */
    }
    return 0;
}

/* The body of a call message ended (or the text did): a call or its text. */
static int harmony_call(tc_parser *p, tc_out *o, const char *body, size_t n, const char *closer) {
    json_t *args = parse_object(body, n);
    int rc = args ? add_call(p, o, p->hname, strlen(p->hname), args) : 0;
    json_decref(args);
    if (rc) return rc < 0 ? -1 : 0;
    if (content(p, o, p->hhead.p, p->hhead.n) || contents(p, o, "<|message|>") || content(p, o, body, n) ||
        (closer && contents(p, o, closer)))
        return -1;
    return 0;
}

static int harmony_step(tc_parser *p, tc_out *o, int final) {
    for (;;) {
        if (p->state == ST_HEADER) {
            long i = find(p->pend.p, p->pend.n, 0, "<|message|>");
            if (i < 0) break;
            if (harmony_header(p, p->pend.p, (size_t)i)) return -1;
            tcb_consume(&p->pend, (size_t)i + strlen("<|message|>"));
            p->state = ST_BODY;
        } else if (p->state == ST_BODY) {
            long best = -1;
            int which = -1;
            for (int k = 0; k < HM_N_END; k++) {
                long i = find(p->pend.p, p->pend.n, 0, hm_end[k]);
                if (i >= 0 && (best < 0 || i < best)) best = i, which = k;
            }
            if (best < 0) {
                if (p->hkind == HK_CALL) break;
                size_t h = hold_len(p->pend.p, p->pend.n, hm_end, HM_N_END);
                if (p->hkind == HK_CONTENT && content(p, o, p->pend.p, p->pend.n - h)) return -1;
                tcb_consume(&p->pend, p->pend.n - h);
                break;
            }
            if (p->hkind == HK_CALL && harmony_call(p, o, p->pend.p, (size_t)best, hm_end[which])) return -1;
            if (p->hkind == HK_CONTENT && content(p, o, p->pend.p, (size_t)best)) return -1;
            tcb_consume(&p->pend, (size_t)best + strlen(hm_end[which]));
            p->state = which == 3 ? ST_HEADER : ST_AFTER;
        } else { /* ST_AFTER: between messages, until <|start|> */
            long i = find(p->pend.p, p->pend.n, 0, "<|start|>");
            if (i < 0) {
                size_t h = hold_len(p->pend.p, p->pend.n, &hm_end[3], 1);
                tcb_consume(&p->pend, p->pend.n - h);
                break;
            }
            tcb_consume(&p->pend, (size_t)i + strlen("<|start|>"));
            p->state = ST_HEADER;
        }
    }
    if (!final) return 0;
    int rc = 0;
    if (p->state == ST_HEADER && !memmem(p->pend.p ? p->pend.p : "", p->pend.n, "<|", 2))
        rc = content(p, o, p->pend.p, p->pend.n); /* text without any harmony markup */
    else if (p->state == ST_BODY && p->hkind == HK_CALL)
        rc = harmony_call(p, o, p->pend.p, p->pend.n, NULL); /* <|call|> is a stop token: the usual end */
    else if (p->state == ST_BODY && p->hkind == HK_CONTENT)
        rc = content(p, o, p->pend.p, p->pend.n);
    p->pend.n = 0;
    return rc;
}

/* ---- the interface ---- */

tc_parser *tc_parser_new(tc_syntax syn, char *const *names, int n_names, int max_calls) {
    if (!tc_family_get(syn)) return NULL;
    tc_parser *p = calloc(1, sizeof *p);
    if (!p) return NULL;
    p->syn = syn;
    p->max_calls = max_calls;
    p->state = syn == TC_LLAMA3 ? ST_START : syn == TC_HARMONY ? ST_HEADER : ST_TEXT;
    if (n_names > 0 && !(p->names = calloc((size_t)n_names, sizeof *p->names))) goto fail;
    for (int i = 0; i < n_names; i++) {
        if (!(p->names[i] = strdup(names[i]))) goto fail;
        p->n_names++;
    }
    static uint64_t counter;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    p->rng = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 30) ^ (uint64_t)(uintptr_t)p ^
             (__atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED) << 48);
    if (tcb_add(&p->pend, "", 0) || tcb_add(&p->ws, "", 0)) goto fail;
    return p;
fail:
    tc_parser_free(p);
    return NULL;
}

static int step(tc_parser *p, tc_out *o, int final) {
    switch (p->syn) {
    case TC_HERMES: return hermes_step(p, o, final);
    case TC_LLAMA3: return llama3_step(p, o, final);
    case TC_HARMONY: return harmony_step(p, o, final);
    case TC_MISTRAL: return mistral_step(p, o, final);
    }
    return -1;
}

int tc_parser_put(tc_parser *p, const char *text, size_t n, tc_out *out) {
    if (tcb_add(&p->pend, text, n)) return -1;
    return step(p, out, 0);
}

int tc_parser_finish(tc_parser *p, tc_out *out) {
    if (step(p, out, 1)) return -1;
    if (p->n_calls == 0 && p->ws.n && out_text(out, p->ws.p, p->ws.n)) return -1;
    p->ws.n = 0;
    return 0;
}

int tc_parser_n_calls(const tc_parser *p) { return p->n_calls; }
size_t tc_parser_n_text(const tc_parser *p) { return p->n_text; }

void tc_parser_free(tc_parser *p) {
    if (!p) return;
    for (int i = 0; i < p->n_names; i++) free(p->names[i]);
    free(p->names);
    free(p->pend.p);
    free(p->ws.p);
    free(p->hhead.p);
    free(p->hname);
    free(p);
}
