/* server/openai.c: the wire formats. Request bodies (OpenAI chat/completions and
 * completions, llama-server's /completion, /tokenize, /detokenize) are validated
 * into an srv_request, every problem named with its parameter and an HTTP status;
 * finished jobs and stream events become OpenAI (or llama-server) JSON. Nothing
 * here touches the model: tokenizing and rendering the chat template only read the
 * tokenizer, which is safe from any thread (srv_prepare_requests, here too, fills in
 * what parsing reads, so fuzz/fuzz_server_request.c runs it without a model). */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/json.h"
#include "base/limits.h"
#include "server/server.h"

/* ---- what parsing needs to know of the server ---- */

static void add_eos(srv *s, long long id) {
    if (id < 0 || id >= s->info.vocab_size) return;
    for (int i = 0; i < s->n_eos; i++)
        if (s->eos_ids[i] == id) return;
    int32_t *p = realloc(s->eos_ids, (size_t)(s->n_eos + 1) * sizeof *p);
    if (!p) return;
    s->eos_ids = p;
    s->eos_ids[s->n_eos++] = (int32_t)id;
}

/* Tokens that end a generation: the config's and tokenizer's EOS, generation_config's
 * eos_token_id (a number or a list), and the end-of-turn tokens chat templates use. */
static void collect_eos(srv *s) {
    add_eos(s, s->info.eos_token);
    add_eos(s, celer_tokenizer_eos(s->tok));
    char path[4096];
    snprintf(path, sizeof path, "%s/generation_config.json", s->cfg.model_dir);
    FILE *f = fopen(path, "rb");
    if (f) {
        fclose(f);
        json_t *g = json_load_path(path);
        json_t *e = g ? json_object_get(g, "eos_token_id") : NULL;
        if (json_is_integer(e)) add_eos(s, json_integer_value(e));
        size_t i;
        json_t *x;
        if (json_is_array(e)) json_array_foreach(e, i, x) if (json_is_integer(x)) add_eos(s, json_integer_value(x));
        json_decref(g);
        err_clear();
    }
    static const char *const eot[] = {"<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>", "<|return|>", "<|call|>", "<|eom_id|>",
                                      "<|endoftext|>", "[|endofturn|]"};
    for (size_t i = 0; i < sizeof eot / sizeof eot[0]; i++) add_eos(s, celer_tokenizer_token_id(s->tok, eot[i]));
}

int srv_prepare_requests(srv *s) {
    s->has_template = celer_tokenizer_has_template(s->tok);
    if (s->cfg.alias) {
        s->model_id = strdup(s->cfg.alias);
    } else {
        size_t n = strlen(s->cfg.model_dir);
        while (n > 1 && s->cfg.model_dir[n - 1] == '/') n--;
        size_t b = n;
        while (b > 0 && s->cfg.model_dir[b - 1] != '/') b--;
        s->model_id = strndup(s->cfg.model_dir + b, n - b);
    }
    if (!s->model_id) return err_set("out of memory");
    collect_eos(s);
    return 0;
}

/* ---- errors ---- */

static const char *error_type(int status) {
    switch (status) {
    case 401: return "authentication_error";
    case 404: return "not_found_error";
    case 413: return "invalid_request_error";
    case 503: return "unavailable_error";
    default: return status >= 500 ? "server_error" : "invalid_request_error";
    }
}

static const char *error_code(int status, const char *msg) {
    if (status == 401) return "invalid_api_key";
    if (status == 404 && msg && strstr(msg, "model")) return "model_not_found";
    if (status == 413) return "request_too_large";
    if (msg && strstr(msg, "maximum context length")) return "context_length_exceeded";
    return NULL;
}

char *openai_error_json(int status, const char *msg, const char *param) {
    json_t *m = msg && srv_utf8_valid(msg, strlen(msg)) ? json_string(msg) : json_string("error");
    const char *code = error_code(status, msg);
    json_t *o = json_pack("{s:{s:o, s:s, s:o, s:o}}", "error", "message", m, "type", error_type(status), "param",
                          param ? json_string(param) : json_null(), "code", code ? json_string(code) : json_null());
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return s ? s : strdup("{\"error\":{\"message\":\"out of memory\",\"type\":\"server_error\"}}");
}

/* ---- what a body may cost ---- */

/* What jansson allocates per value (with the allocator's overhead and the slot in
 * the parent), measured roughly on glibc: an object with its initial hash table, an
 * array with its initial table, a string (plus its bytes), a number or literal. */
enum { COST_OBJECT = 256, COST_ARRAY = 128, COST_STRING = 80, COST_SCALAR = 48 };

static int scalar_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '.' || c == '-' || c == '+';
}

size_t openai_request_cost(const char *p, size_t n, size_t *values) {
    size_t v = 0, cost = n; /* the body itself */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)p[i];
        if (c == '"') {
            size_t b = 0;
            for (i++; i < n && p[i] != '"'; i++, b++)
                if (p[i] == '\\') i++;
            v++;
            cost += COST_STRING + b;
        } else if (c == '{') {
            v++;
            cost += COST_OBJECT;
        } else if (c == '[') {
            v++;
            cost += COST_ARRAY;
        } else if (c == '-' || (c >= '0' && c <= '9') || c == 't' || c == 'f' || c == 'n') {
            while (i + 1 < n && scalar_char(p[i + 1])) i++;
            v++;
            cost += COST_SCALAR;
        }
    }
    if (values) *values = v;
    return cost;
}

size_t openai_request_budget(size_t len) {
    return len * CELER_SERVE_REQUEST_MEM_FACTOR + CELER_SERVE_REQUEST_MEM_BASE;
}

/* 0 when parsing the body fits its budget; else the message in buf. */
static int over_budget(const char *body, size_t len, char *buf, size_t bn) {
    size_t values = 0, cost = openai_request_cost(body, len, &values), budget = openai_request_budget(len);
    if (cost <= budget) return 0;
    snprintf(buf, bn,
             "the request body (%zu bytes, %zu JSON values) needs about %zu bytes of memory, over its budget of %zu (%d x the body + %u)",
             len, values, cost, budget, CELER_SERVE_REQUEST_MEM_FACTOR, CELER_SERVE_REQUEST_MEM_BASE);
    return 1;
}

/* ---- request parsing ---- */

typedef struct {
    int status;
    char *msg;
    const char *param;
} perr;

static int fail(perr *e, int status, const char *param, const char *fmt, ...) CEL_PRINTF(4, 5);
static int fail(perr *e, int status, const char *param, const char *fmt, ...) {
    char buf[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof buf, fmt, ap);
    va_end(ap);
    if (!e->msg) {
        e->status = status;
        e->msg = strdup(buf);
        e->param = param;
    }
    return -1;
}

/* Optional number in [lo, hi]. */
static int get_num(const json_t *o, const char *key, double lo, double hi, float *out, perr *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_number(v)) return fail(e, 400, key, "'%s' must be a number", key);
    double x = json_number_value(v);
    if (!(x >= lo && x <= hi)) return fail(e, 400, key, "'%s' must be in [%g, %g], got %g", key, lo, hi, x);
    *out = (float)x;
    return 0;
}

/* Optional integer in [lo, hi]. */
static int get_int(const json_t *o, const char *key, long long lo, long long hi, long long *out, perr *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_integer(v)) return fail(e, 400, key, "'%s' must be an integer", key);
    long long x = json_integer_value(v);
    if (x < lo || x > hi) return fail(e, 400, key, "'%s' must be in [%lld, %lld], got %lld", key, lo, hi, x);
    *out = x;
    return 0;
}

static int get_bool(const json_t *o, const char *key, int *out, perr *e) {
    json_t *v = json_object_get(o, key);
    if (!v || json_is_null(v)) return 0;
    if (!json_is_boolean(v)) return fail(e, 400, key, "'%s' must be a boolean", key);
    *out = json_is_true(v);
    return 0;
}

/* "stop": a string or an array of up to CELER_SERVE_MAX_STOP non-empty strings. */
/* Constrained decoding (docs/grammar.md): OpenAI's response_format, llama-server's
 * "grammar" (GBNF text) and "json_schema" (a schema), at most one of them; compiled
 * here, so a bad schema or grammar is a 400 naming the reason. */
static int get_constraint(const json_t *root, srv_request *r, perr *e) {
    static const char *const keys[] = {"response_format", "grammar", "json_schema"};
    const json_t *v[3];
    const char *param = NULL;
    int given = 0;
    for (int i = 0; i < 3; i++) {
        v[i] = json_object_get(root, keys[i]);
        if (v[i] && (json_is_null(v[i]) || (i == 1 && json_is_string(v[i]) && !json_string_length(v[i])))) v[i] = NULL;
        if (v[i] && !given++) param = keys[i];
    }
    if (given > 1) return fail(e, 400, param, "give one of 'response_format', 'grammar' and 'json_schema'");
    if (!given) return 0;
    const json_t *schema = NULL;
    char *gbnf = NULL;
    int any_object = 0;
    if (v[0]) {
        const json_t *t = json_is_object(v[0]) ? json_object_get(v[0], "type") : NULL;
        if (!t || !json_is_string(t))
            return fail(e, 400, param, "'response_format' must be an object with a 'type' (text, json_object, json_schema)");
        const char *type = json_string_value(t);
        if (!strcmp(type, "text")) return 0;
        if (!strcmp(type, "json_object")) {
            schema = json_object_get(v[0], "schema"); /* llama-server's extension; absent: any object */
            if (schema && json_is_null(schema)) schema = NULL;
            any_object = !schema;
        } else if (!strcmp(type, "json_schema")) {
            const json_t *js = json_object_get(v[0], "json_schema");
            if (!js || !json_is_object(js))
                return fail(e, 400, param, "'response_format.json_schema' must be an object with 'name' and 'schema'");
            const json_t *name = json_object_get(js, "name"), *strict = json_object_get(js, "strict");
            if (name && !json_is_string(name)) return fail(e, 400, param, "'response_format.json_schema.name' must be a string");
            if (strict && !json_is_null(strict) && !json_is_boolean(strict))
                return fail(e, 400, param, "'response_format.json_schema.strict' must be a boolean");
            if (!(schema = json_object_get(js, "schema")) || json_is_null(schema))
                return fail(e, 400, param, "'response_format.json_schema.schema' is required");
        } else
            return fail(e, 400, param, "'response_format.type' is '%.64s'; supported: text, json_object, json_schema", type);
    } else if (v[2]) {
        schema = v[2];
    } else if (!json_is_string(v[1])) {
        return fail(e, 400, param, "'grammar' must be a string (GBNF)");
    }
    if (schema || any_object) {
        json_t *obj = any_object ? json_pack("{s:s}", "type", "json_object") : NULL;
        gbnf = celer_json_schema_to_gbnf(any_object ? obj : schema, "root");
        json_decref(obj);
        if (!gbnf) return fail(e, 400, param, "%s", celer_last_error());
        r->grammar = celer_grammar_compile(gbnf, (size_t)-1);
        free(gbnf);
    } else {
        r->grammar = celer_grammar_compile(json_string_value(v[1]), json_string_length(v[1]));
    }
    if (!r->grammar) return fail(e, 400, param, "%s", celer_last_error());
    return 0;
}

static int get_stop(const json_t *o, srv_request *r, perr *e) {
    json_t *v = json_object_get(o, "stop");
    if (!v || json_is_null(v)) return 0;
    json_t *one = json_is_string(v) ? v : NULL;
    size_t n = one ? 1 : json_is_array(v) ? json_array_size(v) : 0;
    if (!one && !json_is_array(v)) return fail(e, 400, "stop", "'stop' must be a string or an array of strings");
    if (n > CELER_SERVE_MAX_STOP)
        return fail(e, 400, "stop", "'stop' takes at most %d strings, got %zu", CELER_SERVE_MAX_STOP, n);
    if (!(r->stop = calloc(n ? n : 1, sizeof *r->stop))) return fail(e, 500, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *s = one ? one : json_array_get(v, i);
        if (!json_is_string(s)) return fail(e, 400, "stop", "'stop' must be a string or an array of strings");
        if (json_string_length(s) == 0) continue;
        if (!(r->stop[r->n_stop] = strdup(json_string_value(s)))) return fail(e, 500, NULL, "out of memory");
        r->n_stop++;
    }
    return 0;
}

/* Appends ids to r->prompt. */
static int prompt_add(srv_request *r, const int32_t *ids, int n, perr *e) {
    int32_t *p = realloc(r->prompt, (size_t)(r->n_prompt + n + 1) * sizeof *p);
    if (!p) return fail(e, 500, NULL, "out of memory");
    memcpy(p + r->n_prompt, ids, (size_t)n * sizeof *p);
    r->prompt = p;
    r->n_prompt += n;
    return 0;
}

static int prompt_text(srv *s, srv_request *r, const char *text, size_t len, int add_special, perr *e) {
    int32_t *ids = NULL;
    int n = celer_tokenize(s->tok, text, len, add_special, &ids);
    if (n < 0) return fail(e, 400, "prompt", "cannot tokenize the prompt: %s", celer_last_error());
    int rc = prompt_add(r, ids, n, e);
    free(ids);
    return rc;
}

/* A token id array; each id must be in the model's vocabulary. */
static int prompt_ids(srv *s, srv_request *r, const json_t *a, const char *param, perr *e) {
    size_t n = json_array_size(a);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    if (!ids) return fail(e, 500, NULL, "out of memory");
    for (size_t i = 0; i < n; i++) {
        json_t *t = json_array_get(a, i);
        long long v = json_is_integer(t) ? json_integer_value(t) : -1;
        if (!json_is_integer(t) || v < 0 || v >= s->info.vocab_size) {
            free(ids);
            return fail(e, 400, param, "'%s' token %zu must be an integer id in [0, %d)", param, i, s->info.vocab_size);
        }
        ids[i] = (int32_t)v;
    }
    int rc = prompt_add(r, ids, (int)n, e);
    free(ids);
    return rc;
}

/* "prompt": a string, one token array, or a list of one string / token array
 * (or, for /completion, a mix of strings and ids). */
static int parse_prompt(srv *s, srv_request *r, const json_t *v, perr *e) {
    if (!v || json_is_null(v)) return fail(e, 400, "prompt", "'prompt' is required");
    if (json_is_string(v)) return prompt_text(s, r, json_string_value(v), json_string_length(v), 1, e);
    if (!json_is_array(v)) return fail(e, 400, "prompt", "'prompt' must be a string or an array");
    size_t n = json_array_size(v);
    if (n == 0) return fail(e, 400, "prompt", "'prompt' is empty");
    json_t *first = json_array_get(v, 0);
    if (json_is_integer(first)) {
        if (r->kind == SRV_NATIVE) { /* mixed strings and ids */
            for (size_t i = 0; i < n; i++) {
                json_t *x = json_array_get(v, i);
                if (json_is_string(x)) {
                    if (prompt_text(s, r, json_string_value(x), json_string_length(x), 0, e)) return -1;
                } else {
                    json_t *one = json_pack("[O]", x);
                    int rc = prompt_ids(s, r, one, "prompt", e);
                    json_decref(one);
                    if (rc) return -1;
                }
            }
            return 0;
        }
        return prompt_ids(s, r, v, "prompt", e);
    }
    if (n > 1) return fail(e, 400, "prompt", "'prompt' with several prompts is not supported; send one per request");
    if (json_is_string(first)) return prompt_text(s, r, json_string_value(first), json_string_length(first), 1, e);
    if (json_is_array(first)) return prompt_ids(s, r, first, "prompt", e);
    return fail(e, 400, "prompt", "'prompt' must be a string, a token array or a list of one of them");
}

/* "messages" -> the chat template -> tokens. Content may be a string or a list of
 * text parts; the template sees plain strings. */
static int parse_messages(srv *s, srv_request *r, const json_t *root, perr *e) {
    json_t *msgs = json_object_get(root, "messages");
    if (!msgs) return fail(e, 400, "messages", "'messages' is required");
    if (!json_is_array(msgs)) return fail(e, 400, "messages", "'messages' must be an array");
    if (json_array_size(msgs) == 0) return fail(e, 400, "messages", "'messages' must not be empty");
    if (!s->has_template) return fail(e, 400, "messages", "this model's tokenizer has no chat template; use /v1/completions");
    json_t *norm = json_array();
    size_t i;
    json_t *m;
    json_array_foreach(msgs, i, m) {
        if (!json_is_object(m)) { json_decref(norm); return fail(e, 400, "messages", "'messages[%zu]' must be an object", i); }
        json_t *role = json_object_get(m, "role"), *content = json_object_get(m, "content");
        if (!json_is_string(role)) {
            json_decref(norm);
            return fail(e, 400, "messages", "'messages[%zu].role' must be a string", i);
        }
        /* the template reads the messages as they are; only a message whose content
         * needs normalizing gets a (shallow) copy */
        json_t *c = json_is_string(content) ? json_incref(m) : json_copy(m);
        if (!c) {
            json_decref(norm);
            return fail(e, 500, NULL, "out of memory");
        }
        if (json_is_array(content)) {
            srv_buf b = {0};
            size_t k;
            json_t *part;
            json_array_foreach(content, k, part) {
                json_t *type = json_object_get(part, "type"), *text = json_object_get(part, "text");
                if (!json_is_object(part) || !json_is_string(type) || strcmp(json_string_value(type), "text") != 0 ||
                    !json_is_string(text)) {
                    srv_buf_free(&b);
                    json_decref(c);
                    json_decref(norm);
                    return fail(e, 400, "messages", "'messages[%zu].content[%zu]' must be a text part {\"type\":\"text\",\"text\":...}", i, k);
                }
                srv_buf_add(&b, json_string_value(text), json_string_length(text));
            }
            json_object_set_new(c, "content", json_stringn(b.p ? b.p : "", b.len));
            srv_buf_free(&b);
        } else if (content && !json_is_string(content) && !json_is_null(content)) {
            json_decref(c);
            json_decref(norm);
            return fail(e, 400, "messages", "'messages[%zu].content' must be a string or an array of text parts", i);
        } else if (!content || json_is_null(content)) {
            json_object_set_new(c, "content", json_string(""));
        }
        json_array_append_new(norm, c);
    }
    /* tools (toolcall.h): validated, passed to the template as given */
    char tbuf[400];
    const char *tparam = "tools";
    json_t *tools = json_object_get(root, "tools");
    if (tc_request_parse(root, s->tok, &r->tools, tbuf, sizeof tbuf, &tparam)) {
        json_decref(norm);
        return fail(e, tparam ? 400 : 500, tparam, "%s", tbuf);
    }
    if (tc_request_grammar(r->tools, tbuf, sizeof tbuf)) {
        json_decref(norm);
        return fail(e, 400, "tools", "%s", tbuf);
    }
    if (tc_messages_prepare(norm, tbuf, sizeof tbuf)) {
        json_decref(norm);
        return fail(e, 400, "messages", "%s", tbuf);
    }
    r->keep_special = tc_request_active(r->tools) && r->tools->fam->keep_special;
    char *mj = json_dumps(norm, JSON_COMPACT);
    char *tj = tools && json_is_array(tools) ? json_dumps(tools, JSON_COMPACT) : NULL;
    json_decref(norm);
    celer_chat_request rq = {mj, tj, NULL, 1, s->cfg.parse_special_in_content};
    int32_t *ids = NULL;
    int n = mj ? celer_chat_encode(s->tok, &rq, &ids, NULL) : -1;
    free(mj);
    free(tj);
    if (n < 0) return fail(e, 400, "messages", "cannot render the chat template: %s", celer_last_error());
    int rc = prompt_add(r, ids, n, e);
    free(ids);
    return rc;
}

/* The tool calls' grammar (toolgram.c) becomes the request's constraint. A call that
 * tool_choice demands and a response_format cannot both shape the answer (400); under
 * auto a response_format wins and calls are only parsed. */
static int tools_constraint(srv_request *r, perr *e) {
    tc_request *t = r->tools;
    if (!t || !t->grammar) return 0;
    if (r->grammar) {
        if (t->choice != TC_CHOICE_AUTO)
            return fail(e, 400, "tool_choice", "'tool_choice' demands a tool call and 'response_format' (or 'grammar', 'json_schema') another shape: give one of them");
        return 0;
    }
    if (t->n_triggers && !(r->grammar_triggers = calloc((size_t)t->n_triggers, sizeof *r->grammar_triggers)))
        return fail(e, 500, NULL, "out of memory");
    for (int i = 0; i < t->n_triggers; i++) {
        if (!(r->grammar_triggers[i] = strdup(t->triggers[i]))) return fail(e, 500, NULL, "out of memory");
        r->n_grammar_triggers++;
    }
    r->grammar = t->grammar; /* the request owns it now */
    t->grammar = NULL;
    return 0;
}

static int model_known(srv *s, const char *name) {
    if (!*name || strcmp(name, s->model_id) == 0 || strcmp(name, s->cfg.model_dir) == 0) return 1;
    return 0;
}

srv_request *openai_parse(srv *s, int kind, const char *body, size_t len, int *status, char **msg, const char **param) {
    perr e = {0};
    srv_request *r = NULL;
    json_t *root = NULL;
    if (!srv_utf8_valid(body, len)) {
        fail(&e, 400, NULL, "the request body is not valid UTF-8");
        goto out;
    }
    const char *nul = memchr(body, 0, len); /* never JSON; jansson would skip one after a number */
    if (nul) {
        fail(&e, 400, NULL, "the request body has a NUL byte at offset %zu: not JSON", (size_t)(nul - body));
        goto out;
    }
    char ob[300];
    if (over_budget(body, len, ob, sizeof ob)) {
        fail(&e, 413, NULL, "%s", ob);
        goto out;
    }
    json_error_t je;
    if (!(root = json_loadb(body, len, 0, &je))) {
        fail(&e, 400, NULL, "malformed JSON: %s (line %d, column %d)", je.text, je.line, je.column);
        goto out;
    }
    if (!json_is_object(root)) {
        fail(&e, 400, NULL, "the request body must be a JSON object");
        goto out;
    }
    if (!(r = calloc(1, sizeof *r))) {
        fail(&e, 500, NULL, "out of memory");
        goto out;
    }
    r->kind = kind;
    json_t *model = json_object_get(root, "model");
    if (model && !json_is_null(model) && !json_is_string(model)) {
        fail(&e, 400, "model", "'model' must be a string");
        goto out;
    }
    /* clients that send a fixed name (gpt-4o, default) get the loaded model, as from
     * llama-server; the response names the model that answered */
    if (s->cfg.strict_model && kind != SRV_NATIVE && model && json_is_string(model) &&
        !model_known(s, json_string_value(model))) {
        fail(&e, 404, "model", "The model '%s' does not exist (this server serves '%s')", json_string_value(model), s->model_id);
        goto out;
    }
    r->model = strdup(s->model_id);
    /* sampling: llama-server's defaults */
    celer_sampler_params_default(&r->sp);
    r->sp.temperature = 0.8f;
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    r->sp.seed = (uint64_t)ts.tv_nsec ^ ((uint64_t)ts.tv_sec << 20);
    long long seed = -1, top_k = r->sp.top_k, n = 1, max_tokens = -2, top_lp = 0, last_n = r->sp.penalty_last_n;
    int stream = 0, logprobs = 0, ignore_eos = 0;
    r->cache_prompt = s->cfg.cache_prompt;
    if (get_num(root, "temperature", 0, 100, &r->sp.temperature, &e) || get_num(root, "top_p", 0, 1, &r->sp.top_p, &e) ||
        get_num(root, "min_p", 0, 1, &r->sp.min_p, &e) || get_int(root, "top_k", 0, 1 << 30, &top_k, &e) ||
        get_num(root, "presence_penalty", -2, 2, &r->sp.presence_penalty, &e) ||
        get_num(root, "frequency_penalty", -2, 2, &r->sp.frequency_penalty, &e) ||
        get_num(root, "repetition_penalty", 0.01, 100, &r->sp.repeat_penalty, &e) ||
        get_num(root, "repeat_penalty", 0.01, 100, &r->sp.repeat_penalty, &e) ||
        get_int(root, "repeat_last_n", -1, 1 << 24, &last_n, &e) ||
        get_int(root, "seed", -(1LL << 62), 1LL << 62, &seed, &e) || get_int(root, "n", 1, CELER_SERVE_MAX_N, &n, &e) ||
        get_bool(root, "stream", &stream, &e) || get_bool(root, "cache_prompt", &r->cache_prompt, &e) ||
        get_bool(root, "ignore_eos", &ignore_eos, &e) || get_stop(root, r, &e))
        goto out;
    r->cache_prompt = r->cache_prompt && s->cfg.cache_prompt;
    json_t *so = json_object_get(root, "stream_options");
    if (so && !json_is_null(so)) {
        if (!json_is_object(so)) {
            fail(&e, 400, "stream_options", "'stream_options' must be an object");
            goto out;
        }
        if (get_bool(so, "include_usage", &r->include_usage, &e)) goto out;
    }
    if (kind == SRV_CHAT) {
        if (get_int(root, "max_tokens", 0, 1 << 30, &max_tokens, &e) ||
            get_int(root, "max_completion_tokens", 0, 1 << 30, &max_tokens, &e) || get_bool(root, "logprobs", &logprobs, &e) ||
            get_int(root, "top_logprobs", 0, CELER_SERVE_MAX_TOP_LOGPROBS, &top_lp, &e))
            goto out;
        if (top_lp && !logprobs) {
            fail(&e, 400, "top_logprobs", "'top_logprobs' needs 'logprobs': true");
            goto out;
        }
    } else if (kind == SRV_COMPLETION) {
        long long lp = -1;
        if (get_int(root, "max_tokens", 0, 1 << 30, &max_tokens, &e) || get_int(root, "logprobs", 0, CELER_SERVE_MAX_TOP_LOGPROBS, &lp, &e)) goto out;
        json_t *echo = json_object_get(root, "echo");
        if (echo && json_is_true(echo)) {
            fail(&e, 400, "echo", "'echo' is not supported");
            goto out;
        }
        if (lp >= 0) logprobs = 1, top_lp = lp;
    } else {
        long long np = -1;
        if (get_int(root, "n_predict", -1, 1 << 30, &np, &e) || get_int(root, "max_tokens", 0, 1 << 30, &max_tokens, &e) ||
            get_int(root, "n_probs", 0, CELER_SERVE_MAX_TOP_LOGPROBS, &top_lp, &e) || get_bool(root, "return_tokens", &r->return_tokens, &e))
            goto out;
        if (json_object_get(root, "n_predict")) max_tokens = np;
        if (top_lp) logprobs = 1;
    }
    if (n > s->cfg.n_parallel) {
        fail(&e, 400, "n", "'n' is %lld but this server has %d slots (--parallel)", n, s->cfg.n_parallel);
        goto out;
    }
    int tok_limit = s->cfg.max_tokens > 0 ? s->cfg.max_tokens : s->cfg.ctx_size; /* --max-tokens; default: the context */
    if (max_tokens > tok_limit) {
        const char *mp = json_object_get(root, "n_predict")               ? "n_predict"
                         : json_object_get(root, "max_completion_tokens") ? "max_completion_tokens"
                                                                          : "max_tokens";
        fail(&e, 400, mp, "'%s' is %lld but this server generates at most %d tokens per request (--max-tokens%s)", mp,
             max_tokens, tok_limit, s->cfg.max_tokens > 0 ? "" : "; default: the context");
        goto out;
    }
    r->n = (int)n;
    r->stream = stream;
    r->logprobs = logprobs;
    r->top_logprobs = (int)top_lp;
    r->sp.top_k = (int)top_k;
    r->sp.penalty_last_n = last_n < 0 ? s->cfg.ctx_size : (int)last_n;
    if (seed >= 0) r->sp.seed = (uint64_t)seed;
    if (kind == SRV_CHAT) {
        if (parse_messages(s, r, root, &e)) goto out;
    } else if (parse_prompt(s, r, json_object_get(root, "prompt"), &e)) {
        goto out;
    }
    if (r->n_prompt == 0) {
        fail(&e, 400, "prompt", "the prompt is empty");
        goto out;
    }
    if (s->cfg.max_prompt > 0 && s->cfg.max_prompt < s->cfg.ctx_size && r->n_prompt > s->cfg.max_prompt) {
        fail(&e, 400, kind == SRV_CHAT ? "messages" : "prompt",
             "the prompt has %d tokens, over this server's limit of %d (--max-prompt)", r->n_prompt, s->cfg.max_prompt);
        goto out;
    }
    if (r->n_prompt >= s->cfg.ctx_size) {
        fail(&e, 400, kind == SRV_CHAT ? "messages" : "prompt",
             "This model's maximum context length is %d tokens. However, your prompt has %d tokens (leaving no room to generate).",
             s->cfg.ctx_size, r->n_prompt);
        goto out;
    }
    if (max_tokens < -1) max_tokens = s->cfg.n_predict;
    if (max_tokens < 0 || max_tokens > s->cfg.ctx_size - r->n_prompt) max_tokens = s->cfg.ctx_size - r->n_prompt;
    if (s->cfg.max_tokens > 0 && max_tokens > s->cfg.max_tokens) max_tokens = s->cfg.max_tokens;
    r->max_tokens = (int)max_tokens;
    if (get_constraint(root, r, &e) || tools_constraint(r, &e)) goto out;
    if (!ignore_eos && s->n_eos) {
        if (!(r->stop_ids = malloc((size_t)s->n_eos * sizeof *r->stop_ids))) {
            fail(&e, 500, NULL, "out of memory");
            goto out;
        }
        memcpy(r->stop_ids, s->eos_ids, (size_t)s->n_eos * sizeof *r->stop_ids);
        r->n_stop_ids = s->n_eos;
    }
    r->sp.stop = r->stop_ids;
    r->sp.n_stop = r->n_stop_ids;
out:
    json_decref(root);
    if (e.msg) {
        srv_request_free(r);
        *status = e.status;
        *msg = e.msg;
        *param = e.param;
        return NULL;
    }
    return r;
}

/* ---- responses ---- */

/* A JSON string of n bytes, invalid UTF-8 replaced by U+FFFD. */
static json_t *jstr(const char *p, size_t n) {
    if (srv_utf8_valid(p, n)) return json_stringn(p, n);
    srv_buf b = {0};
    for (size_t i = 0; i < n; i++) {
        size_t k = 1;
        while (k <= 4 && i + k <= n && !srv_utf8_valid(p + i, k)) k++;
        if (k <= 4 && i + k <= n) {
            srv_buf_add(&b, p + i, k);
            i += k - 1;
        } else {
            srv_buf_add(&b, "\xef\xbf\xbd", 3);
        }
    }
    json_t *s = json_stringn(b.p ? b.p : "", b.len);
    srv_buf_free(&b);
    return s;
}

static const char *finish_name(int f) { return f == SRV_FINISH_STOP ? "stop" : f == SRV_FINISH_LENGTH ? "length" : NULL; }

/* llama-server's `timings` of a job (reqlog.c); j->mu is not held. */
static json_t *job_timings(srv_job *j) {
    srv_timings t;
    srv_timings_get(j, &t);
    return srv_timings_json(&t);
}

/* ---- tool calls in responses (toolcall.h) ---- */

/* A parser for a choice of a request with active tools. */
static tc_parser *tool_parser(const tc_request *t) {
    return tc_parser_new(t->fam->syntax, t->names, t->n_tools, t->parallel ? 0 : 1);
}

/* {id, type, function: {name, arguments}} of a call. */
static json_t *tool_call_json(const tc_call *c) {
    return json_pack("{s:s, s:s, s:{s:s, s:s}}", "id", c->id, "type", "function", "function", "name", c->name,
                     "arguments", c->arguments);
}

/* The message of a whole answer with tools: content (null when it is empty and calls
 * were made) and tool_calls. *n_calls gets their number. NULL on out of memory. */
static json_t *tool_message(const tc_request *t, const char *text, size_t len, int *n_calls) {
    tc_parser *p = tool_parser(t);
    tc_out o = {0};
    json_t *m = NULL;
    if (!p || tc_parser_put(p, text, len, &o) || tc_parser_finish(p, &o)) goto out;
    *n_calls = o.n_calls;
    json_t *content = o.n_calls && o.content_len == 0 ? json_null() : jstr(o.content ? o.content : "", o.content_len);
    m = json_pack("{s:s, s:o}", "role", "assistant", "content", content);
    if (m && o.n_calls) {
        json_t *a = json_array();
        for (int i = 0; i < o.n_calls; i++) json_array_append_new(a, tool_call_json(&o.calls[i]));
        json_object_set_new(m, "tool_calls", a);
    }
out:
    tc_out_free(&o);
    tc_parser_free(p);
    return m;
}

static json_t *usage_json(srv_job *j) {
    int gen = 0;
    for (int c = 0; c < j->req->n; c++) gen += j->n_gen[c];
    return json_pack("{s:i, s:i, s:i, s:{s:i}}", "prompt_tokens", j->n_prompt, "completion_tokens", gen, "total_tokens",
                     j->n_prompt + gen, "prompt_tokens_details", "cached_tokens", j->n_cached);
}

/* Legacy completions logprobs {tokens, token_logprobs, top_logprobs, text_offset}
 * from chat-style entries. */
static json_t *legacy_logprobs(json_t *entries) {
    json_t *toks = json_array(), *lps = json_array(), *tops = json_array(), *offs = json_array();
    size_t i, off = 0;
    json_t *x;
    json_array_foreach(entries, i, x) {
        json_t *t = json_object_get(x, "token");
        json_array_append(toks, t);
        json_array_append(lps, json_object_get(x, "logprob"));
        json_t *top = json_object();
        size_t k;
        json_t *a;
        json_array_foreach(json_object_get(x, "top_logprobs"), k, a)
            json_object_set(top, json_string_value(json_object_get(a, "token")), json_object_get(a, "logprob"));
        json_array_append_new(tops, top);
        json_array_append_new(offs, json_integer((json_int_t)off));
        off += json_string_length(t);
    }
    return json_pack("{s:o, s:o, s:o, s:o}", "tokens", toks, "token_logprobs", lps, "top_logprobs", tops, "text_offset", offs);
}

char *openai_response_json(srv *s, srv_job *j, srv_event *events) {
    const srv_request *r = j->req;
    int n = r->n;
    srv_buf *text = calloc((size_t)n, sizeof *text);
    json_t **lps = calloc((size_t)n, sizeof *lps), **toks = calloc((size_t)n, sizeof *toks);
    int *fin = calloc((size_t)n, sizeof *fin);
    char *out = NULL;
    if (!text || !lps || !toks || !fin) goto done;
    for (int c = 0; c < n; c++) {
        lps[c] = json_array();
        toks[c] = json_array();
    }
    for (srv_event *e = events; e; e = e->next) {
        int c = e->choice;
        srv_buf_add(&text[c], e->text, e->len);
        for (int k = 0; k < e->n_tokens; k++) json_array_append_new(toks[c], json_integer(e->tokens[k]));
        if (e->logprobs) json_array_extend(lps[c], e->logprobs);
        if (e->finish) fin[c] = e->finish;
    }
    json_t *o;
    if (r->kind == SRV_NATIVE) {
        int stopped_word = 0; /* a stop string ended it: the text does not end with the eos */
        (void)stopped_word;
        o = json_pack("{s:o, s:i, s:b, s:s, s:i, s:i, s:i, s:s, s:b}", "content", jstr(text[0].p ? text[0].p : "", text[0].len),
                      "id_slot", 0, "stop", 1, "model", s->model_id, "tokens_predicted", j->n_gen[0], "tokens_evaluated",
                      j->n_prompt, "tokens_cached", j->n_cached, "stop_type",
                      fin[0] == SRV_FINISH_LENGTH ? "limit" : "eos", "truncated", 0);
        if (r->return_tokens) json_object_set(o, "tokens", toks[0]);
        json_object_set_new(o, "timings", job_timings(j));
        if (r->logprobs) json_object_set(o, "completion_probabilities", lps[0]);
    } else {
        json_t *choices = json_array();
        for (int c = 0; c < n; c++) {
            json_t *t = jstr(text[c].p ? text[c].p : "", text[c].len);
            const char *fr = finish_name(fin[c]);
            json_t *ch;
            int n_calls = 0;
            json_t *msg = r->kind == SRV_CHAT && tc_request_active(r->tools)
                              ? tool_message(r->tools, text[c].p ? text[c].p : "", text[c].len, &n_calls)
                              : NULL;
            if (n_calls && fin[c] == SRV_FINISH_STOP) fr = "tool_calls";
            if (msg) json_decref(t);
            if (r->kind == SRV_CHAT)
                ch = json_pack("{s:i, s:o, s:o, s:o}", "index", c, "message",
                               msg ? msg : json_pack("{s:s, s:o}", "role", "assistant", "content", t), "logprobs",
                               r->logprobs ? json_pack("{s:O}", "content", lps[c]) : json_null(), "finish_reason",
                               fr ? json_string(fr) : json_null());
            else
                ch = json_pack("{s:i, s:o, s:o, s:o}", "index", c, "text", t, "logprobs",
                               r->logprobs ? legacy_logprobs(lps[c]) : json_null(), "finish_reason",
                               fr ? json_string(fr) : json_null());
            json_array_append_new(choices, ch);
        }
        o = json_pack("{s:s, s:s, s:I, s:s, s:o, s:o}", "id", j->id, "object",
                      r->kind == SRV_CHAT ? "chat.completion" : "text_completion", "created", (json_int_t)j->created, "model",
                      r->model, "choices", choices, "usage", usage_json(j));
        json_object_set_new(o, "timings", job_timings(j)); /* llama-server's extension */
    }
    out = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
done:
    for (int c = 0; text && c < n; c++) srv_buf_free(&text[c]);
    for (int c = 0; lps && c < n; c++) json_decref(lps[c]);
    for (int c = 0; toks && c < n; c++) json_decref(toks[c]);
    free(text);
    free(lps);
    free(toks);
    free(fin);
    return out;
}

static int add_frame(srv_buf *out, json_t *o) {
    char *s = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    int rc = s ? sse_frame(out, s) : -1;
    free(s);
    return rc;
}

static json_t *chunk(srv_job *j, json_t *choice) {
    const srv_request *r = j->req;
    json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[o]}", "id", j->id, "object",
                          r->kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                          (json_int_t)j->created, "model", r->model, "choices", choice);
    if (o && r->include_usage) json_object_set_new(o, "usage", json_null());
    return o;
}

/* The frames of one event of a chat with active tools: content that became final,
 * then each call that became final as OpenAI streams them (a first delta with its
 * index, id, type, name and empty arguments, then the arguments), then the finish. */
static int stream_tools(srv_job *j, const srv_event *e, const char *fr, srv_buf *out) {
    tc_request *t = j->req->tools;
    if (!t->stream) {
        if (!(t->stream = calloc((size_t)j->req->n, sizeof *t->stream))) return -1;
        t->n_stream = j->req->n;
    }
    if (e->choice < 0 || e->choice >= t->n_stream) return -1;
    tc_parser **pp = &t->stream[e->choice];
    if (!*pp && !(*pp = tool_parser(t))) return -1;
    tc_out o = {0};
    int rc = tc_parser_put(*pp, e->text, e->len, &o);
    if (!rc && e->finish) rc = tc_parser_finish(*pp, &o);
    if (!rc && (o.content_len || e->logprobs)) {
        json_t *lp = e->logprobs ? json_pack("{s:O}", "content", e->logprobs) : json_null();
        rc = add_frame(out, chunk(j, json_pack("{s:i, s:{s:o}, s:o, s:n}", "index", e->choice, "delta", "content",
                                               jstr(o.content ? o.content : "", o.content_len), "logprobs", lp,
                                               "finish_reason")));
    }
    for (int k = 0; !rc && k < o.n_calls; k++) {
        const tc_call *c = &o.calls[k];
        rc = add_frame(out, chunk(j, json_pack("{s:i, s:{s:[{s:i, s:s, s:s, s:{s:s, s:s}}]}, s:n, s:n}", "index",
                                               e->choice, "delta", "tool_calls", "index", c->index, "id", c->id, "type",
                                               "function", "function", "name", c->name, "arguments", "", "logprobs",
                                               "finish_reason")));
        if (!rc)
            rc = add_frame(out, chunk(j, json_pack("{s:i, s:{s:[{s:i, s:{s:s}}]}, s:n, s:n}", "index", e->choice, "delta",
                                                   "tool_calls", "index", c->index, "function", "arguments", c->arguments,
                                                   "logprobs", "finish_reason")));
    }
    if (!rc && fr) {
        if (tc_parser_n_calls(*pp) && e->finish == SRV_FINISH_STOP) fr = "tool_calls";
        rc = add_frame(out, chunk(j, json_pack("{s:i, s:{}, s:n, s:s}", "index", e->choice, "delta", "logprobs",
                                               "finish_reason", fr)));
    }
    tc_out_free(&o);
    return rc;
}

int openai_stream_event(srv *s, srv_job *j, const srv_event *e, int first, srv_buf *out) {
    const srv_request *r = j->req;
    (void)s;
    if (r->kind == SRV_NATIVE) { /* one frame per token, as llama-server sends them */
        json_t *o = json_pack("{s:o, s:b, s:i}", "content", jstr(e->text, e->len), "stop", 0, "id_slot", 0);
        if (o && r->return_tokens) {
            json_t *t = json_array();
            for (int k = 0; k < e->n_tokens; k++) json_array_append_new(t, json_integer(e->tokens[k]));
            json_object_set_new(o, "tokens", t);
        }
        if (o && e->logprobs) json_object_set(o, "completion_probabilities", e->logprobs);
        return add_frame(out, o);
    }
    const char *fr = finish_name(e->finish);
    if (r->kind == SRV_CHAT) {
        if (first && add_frame(out, chunk(j, json_pack("{s:i, s:{s:s, s:s}, s:n, s:n}", "index", e->choice, "delta", "role",
                                                          "assistant", "content", "", "logprobs", "finish_reason"))))
            return -1;
        if (tc_request_active(r->tools)) return stream_tools(j, e, fr, out);
        if (e->len || e->logprobs) {
            json_t *lp = e->logprobs ? json_pack("{s:O}", "content", e->logprobs) : json_null();
            if (add_frame(out, chunk(j, json_pack("{s:i, s:{s:o}, s:o, s:n}", "index", e->choice, "delta", "content",
                                                   jstr(e->text, e->len), "logprobs", lp, "finish_reason"))))
                return -1;
        }
        if (fr) { /* the choice's last chunk carries the job's timings so far (llama-server's extension) */
            json_t *o = chunk(j, json_pack("{s:i, s:{}, s:n, s:s}", "index", e->choice, "delta", "logprobs", "finish_reason", fr));
            if (o) json_object_set_new(o, "timings", job_timings(j));
            if (add_frame(out, o)) return -1;
        }
        return 0;
    }
    if (!e->len && !e->logprobs && !fr) return 0;
    json_t *lp = e->logprobs ? legacy_logprobs(e->logprobs) : json_null();
    json_t *o = chunk(j, json_pack("{s:i, s:o, s:o, s:o}", "index", e->choice, "text", jstr(e->text, e->len), "logprobs", lp,
                                   "finish_reason", fr ? json_string(fr) : json_null()));
    if (o && fr) json_object_set_new(o, "timings", job_timings(j));
    return add_frame(out, o);
}

int openai_stream_end(srv *s, srv_job *j, srv_buf *out) {
    const srv_request *r = j->req;
    pthread_mutex_lock(&j->mu);
    int rc = 0;
    if (j->status) {
        char *err = openai_error_json(j->status, j->error, NULL);
        rc = sse_frame(out, err);
        free(err);
    } else if (r->kind == SRV_NATIVE) {
        json_t *o = json_pack("{s:s, s:b, s:i, s:s, s:i, s:i, s:i}", "content", "", "stop", 1, "id_slot", 0, "model",
                              s->model_id, "tokens_predicted", j->n_gen[0], "tokens_evaluated", j->n_prompt,
                              "tokens_cached", j->n_cached);
        srv_timings t;
        srv_timings_get_locked(j, &t);
        if (o) json_object_set_new(o, "timings", srv_timings_json(&t));
        rc = add_frame(out, o);
    } else if (r->include_usage) {
        json_t *o = json_pack("{s:s, s:s, s:I, s:s, s:[], s:o}", "id", j->id, "object",
                              r->kind == SRV_CHAT ? "chat.completion.chunk" : "text_completion", "created",
                              (json_int_t)j->created, "model", r->model, "choices", "usage", usage_json(j));
        srv_timings t;
        srv_timings_get_locked(j, &t);
        if (o) json_object_set_new(o, "timings", srv_timings_json(&t));
        rc = add_frame(out, o);
    }
    pthread_mutex_unlock(&j->mu);
    if (!rc && r->kind != SRV_NATIVE) rc = srv_buf_add(out, "data: [DONE]\n\n", 14);
    return rc;
}

char *openai_models_json(srv *s) {
    json_t *o = json_pack("{s:s, s:[{s:s, s:s, s:I, s:s, s:{s:I, s:i, s:i, s:s}}]}", "object", "list", "data", "id",
                          s->model_id, "object", "model", "created", (json_int_t)time(NULL), "owned_by", "celer", "meta",
                          "n_params", (json_int_t)s->info.n_params, "n_vocab", s->info.vocab_size, "n_ctx_train",
                          s->info.max_context, "format", s->info.format ? s->info.format : "");
    char *out = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return out;
}

/* Parses a body into an object, or sets *status and returns NULL with *err. */
static json_t *load_object(const char *body, size_t len, int *status, char **err) {
    json_error_t je;
    json_t *root = NULL;
    char buf[300];
    if (!srv_utf8_valid(body, len)) snprintf(buf, sizeof buf, "the request body is not valid UTF-8");
    else if (memchr(body, 0, len))
        snprintf(buf, sizeof buf, "the request body has a NUL byte at offset %zu: not JSON", (size_t)((const char *)memchr(body, 0, len) - body));
    else if (over_budget(body, len, buf, sizeof buf)) {
        *status = 413;
        *err = openai_error_json(413, buf, NULL);
        return NULL;
    } else if (!(root = json_loadb(body, len, 0, &je))) snprintf(buf, sizeof buf, "malformed JSON: %s (line %d, column %d)", je.text, je.line, je.column);
    else if (!json_is_object(root)) snprintf(buf, sizeof buf, "the request body must be a JSON object");
    else return root;
    json_decref(root);
    *status = 400;
    *err = openai_error_json(400, buf, NULL);
    return NULL;
}

char *openai_tokenize_json(srv *s, const char *body, size_t len, int *status) {
    char *err = NULL;
    json_t *root = load_object(body, len, status, &err);
    if (!root) return err;
    json_t *content = json_object_get(root, "content"), *as = json_object_get(root, "add_special"),
           *wp = json_object_get(root, "with_pieces");
    if (!json_is_string(content) || (as && !json_is_boolean(as)) || (wp && !json_is_boolean(wp))) {
        json_decref(root);
        *status = 400;
        return openai_error_json(400, "'content' must be a string ('add_special', 'with_pieces': booleans)", "content");
    }
    int32_t *ids = NULL;
    int n = celer_tokenize(s->tok, json_string_value(content), json_string_length(content), as && json_is_true(as), &ids);
    if (n < 0) {
        json_decref(root);
        *status = 400;
        return openai_error_json(400, celer_last_error(), "content");
    }
    /* the answer is written as text (a tree of n objects would cost ~300 bytes a
     * token) and may not grow past CELER_SERVE_ANSWER_FACTOR x the body + 1 MiB */
    size_t budget = len * CELER_SERVE_ANSWER_FACTOR + CELER_SERVE_REQUEST_MEM_BASE;
    int pieces = wp && json_is_true(wp);
    json_decref(root);
    srv_buf b = {0};
    int rc = srv_buf_add(&b, "{\"tokens\":[", 11);
    char num[48];
    for (int i = 0; i < n && !rc; i++) {
        if (b.len > budget) break;
        if (!pieces) {
            int k = snprintf(num, sizeof num, "%s%d", i ? "," : "", ids[i]);
            rc = srv_buf_add(&b, num, (size_t)k);
            continue;
        }
        size_t pl = 0;
        char *piece = celer_detokenize(s->tok, &ids[i], 1, 0, &pl);
        json_t *js = jstr(piece ? piece : "", piece ? pl : 0);
        char *pj = js ? json_dumps(js, JSON_ENCODE_ANY | JSON_COMPACT) : NULL;
        int k = snprintf(num, sizeof num, "%s{\"id\":%d,\"piece\":", i ? "," : "", ids[i]);
        rc = !pj || srv_buf_add(&b, num, (size_t)k) || srv_buf_add(&b, pj, strlen(pj)) || srv_buf_add(&b, "}", 1);
        free(pj);
        json_decref(js);
        free(piece);
    }
    free(ids);
    if (!rc && b.len > budget) {
        srv_buf_free(&b);
        char m[256];
        snprintf(m, sizeof m, "the answer (%d tokens%s) would exceed %zu bytes, the limit for this body (%d x the body + %u)",
                 n, pieces ? " with pieces" : "", budget, CELER_SERVE_ANSWER_FACTOR, CELER_SERVE_REQUEST_MEM_BASE);
        *status = 413;
        return openai_error_json(413, m, "content");
    }
    if (rc || srv_buf_add(&b, "]}", 2)) {
        srv_buf_free(&b);
        *status = 500;
        return openai_error_json(500, "out of memory", NULL);
    }
    *status = 200;
    return b.p;
}

char *openai_detokenize_json(srv *s, const char *body, size_t len, int *status) {
    char *err = NULL;
    json_t *root = load_object(body, len, status, &err);
    if (!root) return err;
    json_t *t = json_object_get(root, "tokens");
    size_t n = json_array_size(t);
    int32_t *ids = malloc((n ? n : 1) * sizeof *ids);
    int ok = json_is_array(t) && ids;
    char m[200] = "'tokens' must be an array of token ids";
    for (size_t i = 0; ok && i < n; i++) {
        json_t *x = json_array_get(t, i);
        ok = json_is_integer(x);
        if (ok && (json_integer_value(x) < 0 || json_integer_value(x) >= s->info.vocab_size)) {
            snprintf(m, sizeof m, "'tokens[%zu]' is %lld, not an id of this model's vocabulary [0, %d)", i,
                     (long long)json_integer_value(x), s->info.vocab_size);
            ok = 0;
        }
        if (ok) ids[i] = (int32_t)json_integer_value(x);
    }
    json_decref(root);
    if (!ok) {
        free(ids);
        *status = 400;
        return openai_error_json(400, m, "tokens");
    }
    size_t tl = 0;
    char *text = celer_detokenize(s->tok, ids, n, 0, &tl);
    free(ids);
    if (!text) {
        *status = 400;
        return openai_error_json(400, celer_last_error(), "tokens");
    }
    json_t *o = json_pack("{s:o}", "content", jstr(text, tl));
    free(text);
    char *out = json_dumps(o, JSON_COMPACT);
    json_decref(o);
    *status = 200;
    return out;
}
