/* grammar/schema.c: JSON Schema -> GBNF (celer_json_schema_to_gbnf). Every value
 * rule ends with the whitespace rule, and whitespace goes where llama.cpp's
 * converter puts it: after '{', '[', ',' and ':' and after each value, as
 *     space ::= | " " | "\n"{1,2} [ \t]{0,20}
 * (at most one space, or one or two newlines and some indentation, so a model
 * cannot run away in whitespace). Objects list their properties in the order of
 * "properties": the required ones always, the others each optionally; other keys only
 * when "additionalProperties" is true or a schema (absent: none, as OpenAI's strict
 * mode asks). Keywords that only annotate are ignored; any other keyword this
 * converter does not enforce is an error naming it and its JSON pointer, so a
 * schema is never silently loosened. docs/grammar.md lists what is supported. */
#include <jansson.h>
#include <string.h>

#include "base/err.h"
#include "base/limits.h"
#include "grammar/grammar.h"
#include "grammar/sbuf.h"

int regex_to_gbnf(const char *re, size_t n, const char *any_char, sbuf *out, char *err, size_t errn);

typedef struct {
    char *ref;
    char *name;
} refrule;

typedef struct {
    sbuf rules;             /* helper rules, one per line */
    const char *P;          /* the prefix */
    const json_t *root;
    int counter;
    int depth;
    refrule *refs;
    int n_refs, cap_refs;
    int failed;
} conv;

static int cerr(conv *c, const char *ptr, const char *fmt, const char *a) {
    if (c->failed) return -1;
    char msg[300];
    snprintf(msg, sizeof msg, fmt, a ? a : "");
    err_set("json schema: %s: %s", ptr[0] ? ptr : "/", msg);
    c->failed = 1;
    return -1;
}

static const char *const known[] = {
    "type", "properties", "required", "additionalProperties", "items", "minItems", "maxItems", "enum", "const",
    "anyOf", "oneOf", "$ref", "$defs", "definitions", "pattern", "format", "minLength", "maxLength",
    /* annotations: nothing to enforce */
    "title", "description", "default", "examples", "$schema", "$id", "$comment", "deprecated", "readOnly",
    "writeOnly", NULL};

/* A new helper rule name into name[64]. */
static void new_name(conv *c, char *name, size_t n) { snprintf(name, n, "%s-%d", c->P, ++c->counter); }

/* Appends "NAME ::= expr\n". */
static void add_rule(conv *c, const char *name, const char *expr) { sb_printf(&c->rules, "%s ::= %s\n", name, expr); }

/* A JSON value as a GBNF literal (compact JSON text) followed by space. */
static int json_literal(conv *c, sbuf *o, const json_t *v, const char *ptr) {
    char *s = json_dumps(v, JSON_ENCODE_ANY | JSON_COMPACT);
    if (!s) return cerr(c, ptr, "cannot encode a value%s", "");
    sb_str(o, "\"");
    sb_gbnf_lit(o, s, strlen(s));
    sb_str(o, "\"");
    free(s);
    return 0;
}

static char *gen(conv *c, const json_t *s, const char *ptr);

static char *take(sbuf *b) {
    if (b->oom) {
        free(b->p);
        return NULL;
    }
    return b->p ? b->p : strdup("\"\"");
}

static int get_count(conv *c, const json_t *s, const char *key, const char *ptr, long def, long *out) {
    const json_t *v = json_object_get(s, key);
    *out = def;
    if (!v) return 0;
    if (!json_is_integer(v) || json_integer_value(v) < 0)
        return cerr(c, ptr, "\"%s\" must be a non-negative integer", key);
    if (json_integer_value(v) > CELER_MAX_GRAMMAR_REPEAT)
        return cerr(c, ptr, "\"%s\" is over the limit of 1000 (CELER_MAX_GRAMMAR_REPEAT)", key);
    *out = (long)json_integer_value(v);
    return 0;
}

/* ---------------------------------------------------------------- strings */

static char *gen_format(conv *c, const char *fmt, const char *ptr) {
    sbuf o = {0};
    const char *P = c->P;
    if (!strcmp(fmt, "date")) sb_printf(&o, "\"\\\"\" %s-date \"\\\"\" %s-space", P, P);
    else if (!strcmp(fmt, "time")) sb_printf(&o, "\"\\\"\" %s-time \"\\\"\" %s-space", P, P);
    else if (!strcmp(fmt, "date-time")) sb_printf(&o, "\"\\\"\" %s-date \"T\" %s-time \"\\\"\" %s-space", P, P, P);
    else if (!strcmp(fmt, "uuid"))
        sb_printf(&o, "\"\\\"\" [0-9a-fA-F]{8} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" [0-9a-fA-F]{4} \"-\" "
                      "[0-9a-fA-F]{12} \"\\\"\" %s-space", P);
    else {
        cerr(c, ptr, "unsupported format \"%s\" (supported: date, time, date-time, uuid)", fmt);
        return NULL;
    }
    return take(&o);
}

static char *gen_string(conv *c, const json_t *s, const char *ptr) {
    const json_t *pat = json_object_get(s, "pattern"), *fmt = json_object_get(s, "format");
    long min, max;
    if (get_count(c, s, "minLength", ptr, 0, &min) || get_count(c, s, "maxLength", ptr, -1, &max)) return NULL;
    if (max >= 0 && max < min) {
        cerr(c, ptr, "maxLength is less than minLength%s", "");
        return NULL;
    }
    if ((pat || fmt) && (json_object_get(s, "minLength") || json_object_get(s, "maxLength"))) {
        cerr(c, ptr, "minLength/maxLength together with %s are not supported", pat ? "pattern" : "format");
        return NULL;
    }
    if (pat && fmt) {
        cerr(c, ptr, "pattern together with format is not supported%s", "");
        return NULL;
    }
    if (fmt) {
        if (!json_is_string(fmt)) {
            cerr(c, ptr, "\"format\" must be a string%s", "");
            return NULL;
        }
        return gen_format(c, json_string_value(fmt), ptr);
    }
    sbuf o = {0};
    if (pat) {
        if (!json_is_string(pat)) {
            cerr(c, ptr, "\"pattern\" must be a string%s", "");
            return NULL;
        }
        char any[80], e[200];
        snprintf(any, sizeof any, "%s-char", c->P);
        sb_str(&o, "\"\\\"\" ");
        if (regex_to_gbnf(json_string_value(pat), json_string_length(pat), any, &o, e, sizeof e)) {
            free(o.p);
            cerr(c, ptr, "%s", e);
            return NULL;
        }
        sb_printf(&o, " \"\\\"\" %s-space", c->P);
        return take(&o);
    }
    if (min == 0 && max < 0) sb_printf(&o, "%s-string", c->P);
    else if (max < 0) sb_printf(&o, "\"\\\"\" %s-char{%ld,} \"\\\"\" %s-space", c->P, min, c->P);
    else sb_printf(&o, "\"\\\"\" %s-char{%ld,%ld} \"\\\"\" %s-space", c->P, min, max, c->P);
    return take(&o);
}

/* ---------------------------------------------------------------- arrays */

static char *gen_array(conv *c, const json_t *s, const char *ptr) {
    const json_t *items = json_object_get(s, "items");
    long min, max;
    if (get_count(c, s, "minItems", ptr, 0, &min) || get_count(c, s, "maxItems", ptr, -1, &max)) return NULL;
    if (max >= 0 && max < min) {
        cerr(c, ptr, "maxItems is less than minItems%s", "");
        return NULL;
    }
    char *item;
    if (items) {
        char p2[512];
        snprintf(p2, sizeof p2, "%s/items", ptr);
        if (json_is_array(items)) {
            cerr(c, p2, "an array of schemas (tuple validation) is not supported; use one schema%s", "");
            return NULL;
        }
        if (!(item = gen(c, items, p2))) return NULL;
    } else {
        sbuf t = {0};
        sb_printf(&t, "%s-value", c->P);
        if (!(item = take(&t))) return NULL;
    }
    char name[96];
    new_name(c, name, sizeof name);
    add_rule(c, name, item);
    free(item);
    sbuf o = {0};
    sb_printf(&o, "\"[\" %s-space ", c->P);
    if (max == 0) {
        /* nothing inside */
    } else {
        if (min == 0) sb_str(&o, "(");
        sb_str(&o, name);
        long lo = min > 0 ? min - 1 : 0;
        if (max < 0) sb_printf(&o, " (\",\" %s-space %s){%ld,}", c->P, name, lo);
        else if (max - 1 > 0) sb_printf(&o, " (\",\" %s-space %s){%ld,%ld}", c->P, name, lo, max - 1);
        if (min == 0) sb_str(&o, ")?");
    }
    sb_printf(&o, " \"]\" %s-space", c->P);
    return take(&o);
}

/* ---------------------------------------------------------------- objects */

static char *gen_object(conv *c, const json_t *s, const char *ptr) {
    const json_t *props = json_object_get(s, "properties"), *req = json_object_get(s, "required"),
                 *addl = json_object_get(s, "additionalProperties");
    char p2[512];
    if (props && !json_is_object(props)) {
        cerr(c, ptr, "\"properties\" must be an object%s", "");
        return NULL;
    }
    if (req && !json_is_array(req)) {
        cerr(c, ptr, "\"required\" must be an array of strings%s", "");
        return NULL;
    }
    if (addl && !json_is_boolean(addl) && !json_is_object(addl)) {
        cerr(c, ptr, "\"additionalProperties\" must be a boolean or a schema%s", "");
        return NULL;
    }
    size_t n_req = req ? json_array_size(req) : 0;
    for (size_t i = 0; i < n_req; i++)
        if (!json_is_string(json_array_get(req, i))) {
            cerr(c, ptr, "\"required\" must be an array of strings%s", "");
            return NULL;
        }
    /* no properties, nothing required: any object (with additionalProperties' values) */
    char *extra = NULL; /* the rule of one additional key-value pair, when allowed */
    if (addl && json_is_object(addl)) {
        snprintf(p2, sizeof p2, "%s/additionalProperties", ptr);
        char *v = gen(c, addl, p2);
        if (!v) return NULL;
        sbuf t = {0};
        sb_printf(&t, "%s-string \":\" %s-space %s", c->P, c->P, v);
        free(v);
        if (!(extra = take(&t))) return NULL;
    } else if ((addl && json_is_true(addl)) || (!addl && !props && !n_req)) {
        sbuf t = {0};
        sb_printf(&t, "%s-string \":\" %s-space %s-value", c->P, c->P, c->P);
        if (!(extra = take(&t))) return NULL;
    }
    if (extra) {
        char name[96];
        new_name(c, name, sizeof name);
        add_rule(c, name, extra);
        free(extra);
        extra = strdup(name);
        if (!extra) return NULL;
    }
    /* the declared keys: properties in order, then required keys not among them */
    size_t n_props = props ? json_object_size(props) : 0, n = 0;
    char **kv = calloc(n_props + n_req + 1, sizeof *kv);
    unsigned char *is_req = calloc(n_props + n_req + 1, 1);
    sbuf o = {0};
    if (!kv || !is_req) goto fail;
    const char *key;
    const json_t *ps;
    if (props) json_object_foreach((json_t *)props, key, ps) {
        for (size_t i = 0; i < n_req; i++)
            if (!strcmp(json_string_value(json_array_get(req, i)), key)) is_req[n] = 1;
        snprintf(p2, sizeof p2, "%s/properties/%s", ptr, key);
        char *v = gen(c, ps, p2);
        if (!v) goto fail;
        sbuf t = {0};
        json_t *k = json_string(key);
        json_literal(c, &t, k, p2);
        json_decref(k);
        sb_printf(&t, " %s-space \":\" %s-space %s", c->P, c->P, v);
        free(v);
        char name[96];
        new_name(c, name, sizeof name);
        char *body = take(&t);
        if (!body) goto fail;
        add_rule(c, name, body);
        free(body);
        if (!(kv[n++] = strdup(name))) goto fail;
    }
    for (size_t i = 0; i < n_req; i++) {
        const char *rk = json_string_value(json_array_get(req, i));
        if (props && json_object_get(props, rk)) continue;
        sbuf t = {0};
        json_t *k = json_string(rk);
        json_literal(c, &t, k, ptr);
        json_decref(k);
        sb_printf(&t, " %s-space \":\" %s-space %s-value", c->P, c->P, c->P);
        char name[96];
        new_name(c, name, sizeof name);
        char *body = take(&t);
        if (!body) goto fail;
        add_rule(c, name, body);
        free(body);
        is_req[n] = 1;
        if (!(kv[n++] = strdup(name))) goto fail;
    }
    /* required keys first (in the order of "properties"), then each optional key may
     * follow (in that order), then additional pairs. opt_tail[j]: the rule of what may
     * follow optional key j (the later optional keys and the extras). */
    {
        char **tail = calloc(n + 1, sizeof *tail);
        if (!tail) goto fail;
        char next[96] = "";
        if (extra) {
            new_name(c, next, sizeof next);
            sbuf t = {0};
            sb_printf(&t, "(\",\" %s-space %s)*", c->P, extra);
            char *body = take(&t);
            if (body) add_rule(c, next, body);
            free(body);
        }
        for (size_t j = n; j-- > 0;) {
            if (is_req[j]) continue;
            tail[j] = strdup(next);
            char name[96];
            new_name(c, name, sizeof name);
            sbuf t = {0};
            sb_printf(&t, "(\",\" %s-space %s)? %s", c->P, kv[j], next[0] ? next : "\"\"");
            char *body = take(&t);
            if (body) add_rule(c, name, body);
            free(body);
            snprintf(next, sizeof next, "%s", name);
        }
        /* next: every optional key (each optional) and the extras, after a comma */
        sb_printf(&o, "\"{\" %s-space ", c->P);
        int n_required = 0;
        for (size_t j = 0; j < n; j++)
            if (is_req[j]) {
                if (n_required++) sb_printf(&o, " \",\" %s-space %s", c->P, kv[j]);
                else sb_str(&o, kv[j]);
            }
        if (n_required) {
            if (next[0]) sb_printf(&o, " %s", next);
        } else if (n || extra) {
            sb_str(&o, "(");
            int alts = 0;
            for (size_t j = 0; j < n; j++)
                sb_printf(&o, "%s%s%s%s", alts++ ? " | " : "", kv[j], tail[j] && tail[j][0] ? " " : "",
                          tail[j] ? tail[j] : "");
            if (extra) sb_printf(&o, "%s%s (\",\" %s-space %s)*", alts++ ? " | " : "", extra, c->P, extra);
            sb_str(&o, ")?");
        }
        sb_printf(&o, " \"}\" %s-space", c->P);
        for (size_t j = 0; j < n; j++) free(tail[j]);
        free(tail);
    }
    for (size_t i = 0; i < n; i++) free(kv[i]);
    free(kv);
    free(is_req);
    free(extra);
    return take(&o);
fail:
    if (!c->failed) cerr(c, ptr, "out of memory%s", "");
    for (size_t i = 0; kv && i < n; i++) free(kv[i]);
    free(kv);
    free(is_req);
    free(extra);
    free(o.p);
    return NULL;
}

/* ---------------------------------------------------------------- the rest */

static char *gen_ref(conv *c, const char *ref, const char *ptr) {
    for (int i = 0; i < c->n_refs; i++)
        if (!strcmp(c->refs[i].ref, ref)) return strdup(c->refs[i].name);
    const json_t *target = NULL;
    if (!strcmp(ref, "#")) target = c->root;
    else if (!strncmp(ref, "#/$defs/", 8) || !strncmp(ref, "#/definitions/", 14)) {
        const char *k = ref[2] == '$' ? ref + 8 : ref + 14;
        const json_t *defs = json_object_get(c->root, ref[2] == '$' ? "$defs" : "definitions");
        if (strchr(k, '/') || strchr(k, '~')) {
            cerr(c, ptr, "$ref \"%s\": only #, #/$defs/NAME and #/definitions/NAME are supported", ref);
            return NULL;
        }
        target = defs ? json_object_get(defs, k) : NULL;
    } else {
        cerr(c, ptr, "$ref \"%s\": only #, #/$defs/NAME and #/definitions/NAME are supported", ref);
        return NULL;
    }
    if (!target) {
        cerr(c, ptr, "$ref \"%s\" names no definition", ref);
        return NULL;
    }
    if (c->n_refs == c->cap_refs) {
        int cap = c->cap_refs ? 2 * c->cap_refs : 8;
        refrule *r = realloc(c->refs, (size_t)cap * sizeof *r);
        if (!r) return NULL;
        c->refs = r;
        c->cap_refs = cap;
    }
    char name[96];
    new_name(c, name, sizeof name);
    refrule *r = &c->refs[c->n_refs];
    if (!(r->ref = strdup(ref)) || !(r->name = strdup(name))) {
        free(r->ref);
        free(r->name);
        return NULL;
    }
    c->n_refs++;
    char p2[512];
    snprintf(p2, sizeof p2, "%s", ref + 1);
    char *body = gen(c, target, p2);
    if (!body) return NULL;
    add_rule(c, name, body);
    free(body);
    return strdup(name);
}

static char *gen_alts(conv *c, const json_t *arr, const char *kw, const char *ptr) {
    if (!json_is_array(arr) || !json_array_size(arr)) {
        cerr(c, ptr, "\"%s\" must be a non-empty array of schemas", kw);
        return NULL;
    }
    sbuf o = {0};
    sb_str(&o, "(");
    for (size_t i = 0; i < json_array_size(arr); i++) {
        char p2[512];
        snprintf(p2, sizeof p2, "%s/%s/%zu", ptr, kw, i);
        char *e = gen(c, json_array_get(arr, i), p2);
        if (!e) {
            free(o.p);
            return NULL;
        }
        sb_printf(&o, "%s%s", i ? " | " : "", e);
        free(e);
    }
    sb_str(&o, ")");
    return take(&o);
}

static char *gen_type(conv *c, const json_t *s, const char *t, const char *ptr) {
    sbuf o = {0};
    if (!strcmp(t, "string")) return gen_string(c, s, ptr);
    if (!strcmp(t, "object")) return gen_object(c, s, ptr);
    if (!strcmp(t, "array")) return gen_array(c, s, ptr);
    if (!strcmp(t, "json_object")) sb_printf(&o, "%s-object", c->P);
    else if (!strcmp(t, "number") || !strcmp(t, "integer") || !strcmp(t, "boolean") || !strcmp(t, "null"))
        sb_printf(&o, "%s-%s", c->P, t);
    else {
        cerr(c, ptr, "unsupported type \"%s\"", t);
        return NULL;
    }
    return take(&o);
}

static char *gen(conv *c, const json_t *s, const char *ptr) {
    if (c->failed) return NULL;
    if (json_is_true(s)) {
        sbuf o = {0};
        sb_printf(&o, "%s-value", c->P);
        return take(&o);
    }
    if (!json_is_object(s)) {
        cerr(c, ptr, "a schema must be an object or true%s", "");
        return NULL;
    }
    if (++c->depth > CELER_MAX_SCHEMA_DEPTH) {
        cerr(c, ptr, "schemas nested deeper than the limit of %s (CELER_MAX_SCHEMA_DEPTH)", "64");
        return NULL;
    }
    const char *key;
    const json_t *v;
    json_object_foreach((json_t *)s, key, v) {
        int ok = 0;
        for (int i = 0; known[i] && !ok; i++) ok = !strcmp(known[i], key);
        if (!ok) {
            cerr(c, ptr, "unsupported keyword \"%s\"", key);
            return NULL;
        }
    }
    char *r = NULL;
    const json_t *x;
    if ((x = json_object_get(s, "$ref"))) {
        if (!json_is_string(x)) cerr(c, ptr, "\"$ref\" must be a string%s", "");
        else r = gen_ref(c, json_string_value(x), ptr);
    } else if ((x = json_object_get(s, "const"))) {
        sbuf o = {0};
        sb_str(&o, "(");
        json_literal(c, &o, x, ptr);
        sb_printf(&o, " %s-space)", c->P);
        r = take(&o);
    } else if ((x = json_object_get(s, "enum"))) {
        if (!json_is_array(x) || !json_array_size(x)) cerr(c, ptr, "\"enum\" must be a non-empty array%s", "");
        else {
            sbuf o = {0};
            sb_str(&o, "((");
            for (size_t i = 0; i < json_array_size(x); i++) {
                if (i) sb_str(&o, " | ");
                json_literal(c, &o, json_array_get(x, i), ptr);
            }
            sb_printf(&o, ") %s-space)", c->P);
            r = take(&o);
        }
    } else if ((x = json_object_get(s, "anyOf"))) r = gen_alts(c, x, "anyOf", ptr);
    else if ((x = json_object_get(s, "oneOf"))) r = gen_alts(c, x, "oneOf", ptr);
    else if ((x = json_object_get(s, "type"))) {
        if (json_is_string(x)) r = gen_type(c, s, json_string_value(x), ptr);
        else if (json_is_array(x) && json_array_size(x)) {
            sbuf o = {0};
            sb_str(&o, "(");
            for (size_t i = 0; i < json_array_size(x) && !c->failed; i++) {
                const json_t *t = json_array_get(x, i);
                char *e = json_is_string(t) ? gen_type(c, s, json_string_value(t), ptr) : NULL;
                if (!e) {
                    cerr(c, ptr, "\"type\" must be a string or an array of strings%s", "");
                    break;
                }
                sb_printf(&o, "%s%s", i ? " | " : "", e);
                free(e);
            }
            sb_str(&o, ")");
            if (c->failed) free(o.p);
            else r = take(&o);
        } else cerr(c, ptr, "\"type\" must be a string or an array of strings%s", "");
    } else if (json_object_get(s, "properties") || json_object_get(s, "required") ||
               json_object_get(s, "additionalProperties"))
        r = gen_object(c, s, ptr);
    else if (json_object_get(s, "items")) r = gen_array(c, s, ptr);
    else {
        sbuf o = {0};
        sb_printf(&o, "%s-value", c->P);
        r = take(&o);
    }
    c->depth--;
    if (!r && !c->failed) cerr(c, ptr, "out of memory%s", "");
    if (r && c->rules.n + strlen(r) > CELER_MAX_SCHEMA_GBNF) {
        free(r);
        cerr(c, ptr, "the grammar grows past the limit of 1 MiB (CELER_MAX_SCHEMA_GBNF)%s", "");
        return NULL;
    }
    return r;
}

static void primitives(sbuf *o, const char *P) {
    sb_printf(o, "%s-space ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n", P);
    sb_printf(o, "%s-char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n", P);
    sb_printf(o, "%s-string ::= \"\\\"\" %s-char* \"\\\"\" %s-space\n", P, P, P);
    sb_printf(o, "%s-integral ::= \"0\" | [1-9] [0-9]{0,15}\n", P);
    sb_printf(o, "%s-number ::= \"-\"? %s-integral (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,16})? %s-space\n", P, P, P);
    sb_printf(o, "%s-integer ::= \"-\"? %s-integral %s-space\n", P, P, P);
    sb_printf(o, "%s-boolean ::= (\"true\" | \"false\") %s-space\n", P, P);
    sb_printf(o, "%s-null ::= \"null\" %s-space\n", P, P);
    sb_printf(o, "%s-value ::= %s-object | %s-array | %s-string | %s-number | %s-boolean | %s-null\n", P, P, P, P, P,
              P, P);
    sb_printf(o, "%s-object ::= \"{\" %s-space (%s-string \":\" %s-space %s-value (\",\" %s-space %s-string \":\" "
                 "%s-space %s-value)*)? \"}\" %s-space\n", P, P, P, P, P, P, P, P, P, P);
    sb_printf(o, "%s-array ::= \"[\" %s-space (%s-value (\",\" %s-space %s-value)*)? \"]\" %s-space\n", P, P, P, P,
              P, P);
    /* date: days that exist in every year (a 29th of February is never generated) */
    sb_printf(o, "%s-date ::= [0-9]{4} \"-\" ((\"0\" [1-9] | \"1\" [0-2]) \"-\" (\"0\" [1-9] | \"1\" [0-9] | \"2\" "
                 "[0-8]) | (\"0\" [13-9] | \"1\" [0-2]) \"-\" (\"29\" | \"30\") | (\"0\" [13578] | \"1\" [02]) \"-31\")\n",
              P);
    sb_printf(o, "%s-time ::= ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9] \":\" [0-5] [0-9] (\".\" [0-9]{1,9})? "
                 "(\"Z\" | [+-] ([01] [0-9] | \"2\" [0-3]) \":\" [0-5] [0-9])\n", P);
}

char *celer_json_schema_to_gbnf(const struct json_t *schema, const char *prefix) {
    if (!prefix || !prefix[0] || strlen(prefix) > 48) {
        err_set("json schema: the rule prefix must have 1 to 48 characters");
        return NULL;
    }
    for (const char *q = prefix; *q; q++)
        if (!((*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '-' ||
              *q == '_')) {
            err_set("json schema: the rule prefix \"%s\" has a character GBNF names cannot hold", prefix);
            return NULL;
        }
    if (!schema) {
        err_set("json schema: no schema");
        return NULL;
    }
    conv c = {.P = prefix, .root = schema};
    char *top = gen(&c, schema, "");
    sbuf out = {0};
    if (top) {
        sb_printf(&out, "%s ::= %s\n", prefix, top);
        if (c.rules.p) sb_str(&out, c.rules.p);
        primitives(&out, prefix);
    }
    free(top);
    free(c.rules.p);
    for (int i = 0; i < c.n_refs; i++) free(c.refs[i].ref), free(c.refs[i].name);
    free(c.refs);
    if (!top || c.failed || c.rules.oom || out.oom) {
        if (!c.failed) err_set("json schema: out of memory");
        free(out.p);
        return NULL;
    }
    return out.p;
}

char *celer_json_schema_text_to_gbnf(const char *json, size_t len, const char *prefix) {
    if (!json) {
        err_set("json schema: no text");
        return NULL;
    }
    if (len == (size_t)-1) len = strlen(json);
    json_error_t je;
    json_t *s = json_loadb(json, len, JSON_DECODE_ANY, &je);
    if (!s) {
        err_set("json schema: invalid JSON at line %d, column %d: %s", je.line, je.column, je.text);
        return NULL;
    }
    char *r = celer_json_schema_to_gbnf(s, prefix);
    json_decref(s);
    return r;
}
