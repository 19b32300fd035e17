/* server/toolreq.c: the request side of tool calls: `tools`, `tool_choice` and
 * `parallel_tool_calls` of a chat request validated into a tc_request, and the
 * messages that carry calls and their results (assistant `tool_calls`, role "tool")
 * checked and shaped for the chat template. Every problem names its field path. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/toolcall.h"

static int bad(char *err, size_t errn, const char **param, const char *p, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
static int bad(char *err, size_t errn, const char **param, const char *p, const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, errn, fmt, ap);
    va_end(ap);
    if (param) *param = p;
    return -1;
}

/* OpenAI's rule for function names: 1 to 64 of a-z, A-Z, 0-9, '_' and '-'. */
static int name_ok(const char *s, size_t n) {
    if (n == 0 || n > 64) return 0;
    for (size_t i = 0; i < n; i++) {
        char c = s[i];
        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-'))
            return 0;
    }
    return 1;
}

/* One entry of `tools`. */
static int check_tool(const json_t *t, size_t i, char *err, size_t errn, const char **param) {
    if (!json_is_object(t)) return bad(err, errn, param, "tools", "'tools[%zu]' must be an object {\"type\": \"function\", \"function\": {...}}", i);
    json_t *type = json_object_get(t, "type"), *fn = json_object_get(t, "function");
    if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0)
        return bad(err, errn, param, "tools", "'tools[%zu].type' must be \"function\" (the only tool type supported)", i);
    if (!json_is_object(fn)) return bad(err, errn, param, "tools", "'tools[%zu].function' must be an object {\"name\", \"description\", \"parameters\"}", i);
    json_t *name = json_object_get(fn, "name"), *desc = json_object_get(fn, "description"),
           *par = json_object_get(fn, "parameters"), *strict = json_object_get(fn, "strict");
    if (!json_is_string(name) || !name_ok(json_string_value(name), json_string_length(name)))
        return bad(err, errn, param, "tools",
                   "'tools[%zu].function.name' must be a string of 1 to 64 letters, digits, '_' or '-'", i);
    if (desc && !json_is_null(desc) && !json_is_string(desc))
        return bad(err, errn, param, "tools", "'tools[%zu].function.description' must be a string", i);
    if (par && !json_is_null(par) && !json_is_object(par))
        return bad(err, errn, param, "tools", "'tools[%zu].function.parameters' must be a JSON Schema object", i);
    if (strict && !json_is_null(strict) && !json_is_boolean(strict))
        return bad(err, errn, param, "tools", "'tools[%zu].function.strict' must be a boolean", i);
    return 0;
}

int tc_request_parse(const json_t *root, const celer_tokenizer *tok, tc_request **out, char *err, size_t errn,
                     const char **param) {
    *out = NULL;
    json_t *tools = json_object_get(root, "tools"), *tc = json_object_get(root, "tool_choice"),
           *ptc = json_object_get(root, "parallel_tool_calls");
    int parallel = 1, choice, named = -1;
    if (ptc && !json_is_null(ptc)) {
        if (!json_is_boolean(ptc)) return bad(err, errn, param, "parallel_tool_calls", "'parallel_tool_calls' must be a boolean");
        parallel = json_is_true(ptc);
    }
    if (tools && !json_is_null(tools) && !json_is_array(tools))
        return bad(err, errn, param, "tools", "'tools' must be an array of {\"type\": \"function\", \"function\": {...}}");
    size_t n = json_is_array(tools) ? json_array_size(tools) : 0;
    for (size_t i = 0; i < n; i++) {
        if (check_tool(json_array_get(tools, i), i, err, errn, param)) return -1;
        const char *ni = json_string_value(json_object_get(json_object_get(json_array_get(tools, i), "function"), "name"));
        for (size_t k = 0; k < i; k++)
            if (!strcmp(ni, json_string_value(json_object_get(json_object_get(json_array_get(tools, k), "function"), "name"))))
                return bad(err, errn, param, "tools", "'tools[%zu].function.name' \"%s\" is declared twice (also tools[%zu])", i, ni, k);
    }
    static const char shape[] = "'tool_choice' must be \"none\", \"auto\", \"required\" or {\"type\": \"function\", \"function\": {\"name\": ...}}";
    if (!tc || json_is_null(tc)) {
        choice = n ? TC_CHOICE_AUTO : TC_CHOICE_NONE;
    } else if (json_is_string(tc)) {
        const char *s = json_string_value(tc);
        if (!strcmp(s, "none")) choice = TC_CHOICE_NONE;
        else if (!strcmp(s, "auto")) choice = TC_CHOICE_AUTO;
        else if (!strcmp(s, "required")) choice = TC_CHOICE_REQUIRED;
        else return bad(err, errn, param, "tool_choice", "%s, got \"%s\"", shape, s);
    } else if (json_is_object(tc)) {
        json_t *type = json_object_get(tc, "type"), *fn = json_object_get(tc, "function");
        json_t *name = json_object_get(fn, "name");
        if (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0)
            return bad(err, errn, param, "tool_choice", "'tool_choice.type' must be \"function\"");
        if (!json_is_object(fn) || !json_is_string(name))
            return bad(err, errn, param, "tool_choice", "'tool_choice.function.name' must be a string");
        for (size_t i = 0; i < n; i++)
            if (!strcmp(json_string_value(name), json_string_value(json_object_get(json_object_get(json_array_get(tools, i), "function"), "name"))))
                named = (int)i;
        if (named < 0)
            return bad(err, errn, param, "tool_choice", "'tool_choice.function.name' \"%s\" is not among the request's tools",
                       json_string_value(name));
        choice = TC_CHOICE_NAMED;
    } else {
        return bad(err, errn, param, "tool_choice", "%s", shape);
    }
    if (choice == TC_CHOICE_REQUIRED && n == 0)
        return bad(err, errn, param, "tool_choice", "'tool_choice' is \"required\" but the request has no 'tools'");
    if (n == 0) return 0;
    tc_request *r = calloc(1, sizeof *r);
    if (!r) return bad(err, errn, param, NULL, "out of memory");
    r->tools = json_incref((json_t *)tools);
    r->choice = choice;
    r->named = named;
    r->parallel = parallel;
    r->fam = tc_family_for(tok);
    if (!(r->names = calloc(n, sizeof *r->names)) || !(r->params = calloc(n, sizeof *r->params))) goto oom;
    for (size_t i = 0; i < n; i++) {
        json_t *fn = json_object_get(json_array_get(tools, i), "function");
        if (!(r->names[i] = strdup(json_string_value(json_object_get(fn, "name"))))) goto oom;
        r->n_tools++;
        json_t *par = json_object_get(fn, "parameters");
        r->params[i] = json_is_object(par) ? par : NULL;
    }
    *out = r;
    return 0;
oom:
    tc_request_free(r);
    return bad(err, errn, param, NULL, "out of memory");
}

int tc_request_active(const tc_request *r) { return r && r->n_tools > 0 && r->choice != TC_CHOICE_NONE; }

void tc_request_free(tc_request *r) {
    if (!r) return;
    for (int i = 0; i < r->n_tools; i++) free(r->names[i]);
    free(r->names);
    free(r->params);
    celer_grammar_free(r->grammar);
    for (int i = 0; i < r->n_stream; i++) tc_parser_free(r->stream[i]);
    free(r->stream);
    json_decref(r->tools);
    free(r);
}

/* One entry of an assistant message's tool_calls. */
static int prepare_call(json_t *c, size_t i, size_t k, char *err, size_t errn) {
    if (!json_is_object(c)) return bad(err, errn, NULL, NULL, "'messages[%zu].tool_calls[%zu]' must be an object {\"id\", \"type\": \"function\", \"function\": {...}}", i, k);
    json_t *id = json_object_get(c, "id"), *type = json_object_get(c, "type"), *fn = json_object_get(c, "function");
    if (id && !json_is_null(id) && !json_is_string(id)) return bad(err, errn, NULL, NULL, "'messages[%zu].tool_calls[%zu].id' must be a string", i, k);
    if (type && !json_is_null(type) && (!json_is_string(type) || strcmp(json_string_value(type), "function") != 0))
        return bad(err, errn, NULL, NULL, "'messages[%zu].tool_calls[%zu].type' must be \"function\"", i, k);
    if (!json_is_object(fn)) return bad(err, errn, NULL, NULL, "'messages[%zu].tool_calls[%zu].function' must be an object {\"name\", \"arguments\"}", i, k);
    json_t *name = json_object_get(fn, "name"), *args = json_object_get(fn, "arguments");
    if (!json_is_string(name) || json_string_length(name) == 0)
        return bad(err, errn, NULL, NULL, "'messages[%zu].tool_calls[%zu].function.name' must be a non-empty string", i, k);
    if (!json_is_string(args) && !json_is_object(args))
        return bad(err, errn, NULL, NULL, "'messages[%zu].tool_calls[%zu].function.arguments' must be a string of JSON (or an object)", i, k);
    if (json_is_string(args)) { /* the template gets the object (templates apply tojson to it) */
        json_error_t je;
        json_t *o = json_loadb(json_string_value(args), json_string_length(args), 0, &je);
        if (json_is_object(o)) {
            /* the function object may be shared with the request's tree; that tree is ours */
            if (json_object_set_new(fn, "arguments", o)) return bad(err, errn, NULL, NULL, "out of memory");
        } else {
            json_decref(o); /* not an object: the template gets the string as given */
        }
    }
    return 0;
}

int tc_messages_prepare(json_t *messages, char *err, size_t errn) {
    size_t i;
    json_t *m;
    json_array_foreach(messages, i, m) {
        const char *role = json_string_value(json_object_get(m, "role"));
        if (!role) continue;
        json_t *calls = json_object_get(m, "tool_calls");
        if (calls && !json_is_null(calls)) {
            if (strcmp(role, "assistant") != 0)
                return bad(err, errn, NULL, NULL, "'messages[%zu].tool_calls' is only allowed in assistant messages", i);
            if (!json_is_array(calls)) return bad(err, errn, NULL, NULL, "'messages[%zu].tool_calls' must be an array", i);
            size_t k;
            json_t *c;
            json_array_foreach(calls, k, c) if (prepare_call(c, i, k, err, errn)) return -1;
        }
        if (!strcmp(role, "tool")) {
            json_t *id = json_object_get(m, "tool_call_id"), *name = json_object_get(m, "name");
            if (!json_is_string(id))
                return bad(err, errn, NULL, NULL, "'messages[%zu].tool_call_id' must be a string: a tool message answers the call with that id", i);
            if (name && !json_is_null(name) && !json_is_string(name))
                return bad(err, errn, NULL, NULL, "'messages[%zu].name' must be a string", i);
        }
    }
    return 0;
}
