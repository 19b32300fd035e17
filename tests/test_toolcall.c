/* tests/test_toolcall.c: tool calls (server/toolcall.h). The parser of each family
 * on model outputs in the syntax the family's own chat template writes (the Qwen3
 * template and the harmony-style template as jinja2 rendered them, in
 * tests/fixtures/tokenizers/jinja/cases.json) or its model card documents (Llama 3.1,
 * Mistral), whole and split at every byte boundary; request validation; the chat
 * template with tools, assistant tool_calls and tool messages against jinja2's render;
 * and a response, plain and streamed, reassembled from its SSE frames. */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"
#include "celer.h"
#include "server/server.h"

static char *const names[] = {"get_weather", "now"};

/* What a parser made of a text: content and calls "name args\n" each, by pieces of
 * `piece` bytes (0: whole). */
typedef struct {
    char *content;
    char *calls;
    int n_calls;
} result;

static void result_free(result *r) {
    free(r->content);
    free(r->calls);
}

static void collect(result *r, tc_out *o, size_t *cl, size_t *kl) {
    r->content = realloc(r->content, *cl + o->content_len + 1);
    memcpy(r->content + *cl, o->content ? o->content : "", o->content_len);
    *cl += o->content_len;
    r->content[*cl] = 0;
    for (int i = 0; i < o->n_calls; i++) {
        size_t add = strlen(o->calls[i].name) + strlen(o->calls[i].arguments) + 16;
        r->calls = realloc(r->calls, *kl + add + 1);
        *kl += (size_t)snprintf(r->calls + *kl, add + 1, "%d %s %s\n", o->calls[i].index, o->calls[i].name,
                                o->calls[i].arguments);
        CHECK(!strncmp(o->calls[i].id, "call_", 5) && strlen(o->calls[i].id) == 29, "id %s", o->calls[i].id);
        r->n_calls++;
    }
    tc_out_clear(o);
}

static result parse_split(tc_syntax syn, const char *text, const size_t *cuts, int n_cuts, int max_calls) {
    result r = {calloc(1, 1), calloc(1, 1), 0};
    size_t cl = 0, kl = 0, at = 0, n = strlen(text);
    tc_parser *p = tc_parser_new(syn, names, 2, max_calls);
    tc_out o = {0};
    for (int i = 0; i <= n_cuts; i++) {
        size_t end = i < n_cuts ? cuts[i] : n;
        CHECK(tc_parser_put(p, text + at, end - at, &o) == 0, "put");
        collect(&r, &o, &cl, &kl);
        at = end;
    }
    CHECK(tc_parser_finish(p, &o) == 0, "finish");
    collect(&r, &o, &cl, &kl);
    CHECK(tc_parser_n_calls(p) == r.n_calls, "n_calls %d vs %d", tc_parser_n_calls(p), r.n_calls);
    tc_out_free(&o);
    tc_parser_free(p);
    return r;
}

/* Parses text whole, then split at every byte boundary and byte by byte: the same
 * content and calls every time, and the expected ones. */
static void expect(tc_syntax syn, const char *text, const char *content, const char *calls, int max_calls) {
    result w = parse_split(syn, text, NULL, 0, max_calls);
    CHECK(!strcmp(w.content, content), "content of %s:\n got [%s]\nwant [%s]", text, w.content, content);
    CHECK(!strcmp(w.calls, calls), "calls of %s:\n got [%s]\nwant [%s]", text, w.calls, calls);
    size_t n = strlen(text);
    for (size_t c = 1; c < n; c++) {
        result s = parse_split(syn, text, &c, 1, max_calls);
        CHECK(!strcmp(s.content, w.content) && !strcmp(s.calls, w.calls), "split at %zu of %s: [%s] [%s]", c, text,
              s.content, s.calls);
        result_free(&s);
    }
    size_t *all = malloc(n * sizeof *all);
    for (size_t c = 1; c < n; c++) all[c - 1] = c;
    result b = parse_split(syn, text, all, n > 0 ? (int)n - 1 : 0, max_calls);
    CHECK(!strcmp(b.content, w.content) && !strcmp(b.calls, w.calls), "byte by byte %s: [%s] [%s]", text, b.content,
          b.calls);
    result_free(&b);
    free(all);
    result_free(&w);
}

/* The rendered text of a case of the jinja2 reference renders. */
static char *jinja_rendered(const char *name) {
    json_error_t je;
    json_t *cases = json_load_file("tests/fixtures/tokenizers/jinja/cases.json", 0, &je);
    char *out = NULL;
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) if (!strcmp(json_string_value(json_object_get(c, "name")), name)) out =
        strdup(json_string_value(json_object_get(c, "rendered")));
    json_decref(cases);
    return out;
}

/* The text between a and the following b in s (malloc'd), or NULL. */
static char *between(const char *s, const char *a, const char *b) {
    const char *x = s ? strstr(s, a) : NULL;
    if (!x) return NULL;
    x += strlen(a);
    const char *y = strstr(x, b);
    return y ? strndup(x, (size_t)(y - x)) : NULL;
}

/* ---- hermes (Qwen 2.5 / 3) ---- */

static void test_hermes_reference(void) {
    /* the assistant turn with a call as the real Qwen3 template writes it (jinja2) */
    char *r = jinja_rendered("qwen3_tools");
    char *turn = between(r, "Weather in Paris?<|im_end|>\n<|im_start|>assistant\n", "<|im_end|>");
    CHECK(turn && strstr(turn, "<tool_call>"), "no call turn in the reference");
    if (turn) expect(TC_HERMES, turn, "Let me check.", "0 get_weather {\"location\":\"Paris\"}\n", 0);
    free(turn);
    free(r);
}

static void test_hermes(void) {
    expect(TC_HERMES, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>", "", "0 now {}\n", 0);
    /* several calls, text before, Qwen3's empty think block */
    expect(TC_HERMES,
           "<think>\n\n</think>\n\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"days\": 2}}\n</tool_call>\n"
           "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>",
           "<think>\n\n</think>", "0 get_weather {\"location\":\"Paris\",\"days\":2}\n1 now {}\n", 0);
    /* arguments as a string of JSON; unclosed at the end of the text */
    expect(TC_HERMES, "<tool_call>{\"name\": \"now\", \"arguments\": \"{\\\"tz\\\": \\\"UTC\\\"}\"}", "", "0 now {\"tz\":\"UTC\"}\n", 0);
    /* text that looks like a marker but is not one */
    expect(TC_HERMES, "a <tool b <tool_cal c", "a <tool b <tool_cal c", "", 0);
    /* an unknown function, broken JSON: returned as text */
    expect(TC_HERMES, "<tool_call>\n{\"name\": \"rm\", \"arguments\": {}}\n</tool_call>",
           "<tool_call>\n{\"name\": \"rm\", \"arguments\": {}}\n</tool_call>", "", 0);
    expect(TC_HERMES, "x <tool_call>{\"name\": \"now\", \"arguments\": {</tool_call> y",
           "x <tool_call>{\"name\": \"now\", \"arguments\": {</tool_call> y", "", 0);
    /* parallel_tool_calls false: the second call is text */
    expect(TC_HERMES, "<tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call><tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call>",
           "<tool_call>{\"name\":\"now\",\"arguments\":{}}</tool_call>", "0 now {}\n", 1);
    /* no call: content unchanged, whitespace kept */
    expect(TC_HERMES, "  plain\n text \n", "  plain\n text \n", "", 0);
}

/* ---- llama3 (Llama 3.1+: JSON tool calling of the model card) ---- */

static void test_llama3(void) {
    expect(TC_LLAMA3, "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"San Francisco, CA\"}}", "",
           "0 get_weather {\"location\":\"San Francisco, CA\"}\n", 0);
    expect(TC_LLAMA3, "<|python_tag|>{\"name\": \"now\", \"parameters\": {}}", "", "0 now {}\n", 0);
    expect(TC_LLAMA3, "\n{\"name\": \"now\", \"parameters\": {}}; {\"name\": \"get_weather\", \"arguments\": {\"location\": \"Oslo\"}}",
           "", "0 now {}\n1 get_weather {\"location\":\"Oslo\"}\n", 0);
    expect(TC_LLAMA3, "The answer is {x}.", "The answer is {x}.", "", 0);
    expect(TC_LLAMA3, "{\"name\": \"rm\", \"parameters\": {}}", "{\"name\": \"rm\", \"parameters\": {}}", "", 0);
    expect(TC_LLAMA3, "{\"a\": 1} text", "{\"a\": 1} text", "", 0);
    expect(TC_LLAMA3, "<|python", "<|python", "", 0);
}

/* ---- harmony (gpt-oss) ---- */

static void test_harmony_reference(void) {
    /* the call as the harmony-style template writes it after "<|start|>assistant" */
    char *r = jinja_rendered("harmony_tools");
    char *call = between(r, "Weather in Paris?<|end|><|start|>assistant", "<|call|>");
    CHECK(call && strstr(call, "to=functions.get_weather"), "no call in the reference");
    if (call) expect(TC_HARMONY, call, "", "0 get_weather {\"location\":\"Paris\",\"days\":2}\n", 0);
    free(call);
    free(r);
}

static void test_harmony(void) {
    expect(TC_HARMONY,
           "<|channel|>analysis<|message|>Need the weather.<|end|><|start|>assistant<|channel|>commentary "
           "to=functions.get_weather <|constrain|>json<|message|>{\"location\":\"Paris\"}",
           "", "0 get_weather {\"location\":\"Paris\"}\n", 0);
    expect(TC_HARMONY, "<|channel|>analysis<|message|>Think.<|end|><|start|>assistant<|channel|>final<|message|>Hello there.",
           "Hello there.", "", 0);
    /* a preamble on commentary, then a call */
    expect(TC_HARMONY,
           "<|channel|>commentary<|message|>Checking.<|end|><|start|>assistant to=functions.now<|channel|>commentary json<|message|>{}",
           "Checking.", "0 now {}\n", 0);
    /* an unknown function: its text */
    expect(TC_HARMONY, "<|channel|>commentary to=functions.rm<|message|>{}", "<|channel|>commentary to=functions.rm<|message|>{}",
           "", 0);
    expect(TC_HARMONY, "no markup at all", "no markup at all", "", 0);
}

/* ---- mistral ---- */

static void test_mistral(void) {
    expect(TC_MISTRAL, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris, France\"}}]", "",
           "0 get_weather {\"location\":\"Paris, France\"}\n", 0);
    expect(TC_MISTRAL, "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris\"}[TOOL_CALLS]now[ARGS]{}", "",
           "0 get_weather {\"location\":\"Paris\"}\n1 now {}\n", 0);
    expect(TC_MISTRAL, "Sure. [TOOL_CALLS]now[CALL_ID]a1b2c3d4e[ARGS]{}", "Sure.", "0 now {}\n", 0);
    expect(TC_MISTRAL, "[TOOL_CALLS]now[ARGS]{\"x\":", "[TOOL_CALLS]now[ARGS]{\"x\":", "", 0);
    expect(TC_MISTRAL, "[TOOL", "[TOOL", "", 0);
}

static void test_family_table(void) {
    struct { const char *dir; tc_syntax want; int keep; } t[] = {
        {"tests/fixtures/tokenizers/qwen3", TC_HERMES, 0},
        {"tests/fixtures/tokenizers/gptoss", TC_HARMONY, 1},
        {"models/default", TC_HERMES, 0},
    };
    for (size_t i = 0; i < sizeof t / sizeof t[0]; i++) {
        celer_tokenizer *tok = celer_tokenizer_open(t[i].dir);
        CHECK(tok, "%s: %s", t[i].dir, celer_last_error());
        const tc_family *f = tc_family_for(tok);
        CHECK(f->syntax == t[i].want && f->keep_special == t[i].keep, "%s: family %s", t[i].dir, f->name);
        celer_tokenizer_free(tok);
    }
}

/* ---- the server: requests and responses ---- */

static srv S;

static int setup_server(const char *dir) {
    memset(&S, 0, sizeof S);
    S.cfg.model_dir = dir;
    S.cfg.n_parallel = 4;
    S.cfg.ctx_size = 4096;
    S.cfg.n_predict = -1;
    S.cfg.max_body = 8 << 20;
    if (!(S.tok = celer_tokenizer_open(dir))) return -1;
    S.info.vocab_size = celer_tokenizer_n_vocab(S.tok);
    S.info.eos_token = -1;
    S.info.max_context = 4096;
    return srv_prepare_requests(&S);
}

static void teardown_server(void) {
    celer_tokenizer_free(S.tok);
    free(S.model_id);
    free(S.eos_ids);
    memset(&S, 0, sizeof S);
}

#define TOOLS                                                                                                          \
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather at a place\", "   \
    "\"parameters\": {\"type\": \"object\", \"properties\": {\"location\": {\"type\": \"string\", \"description\": "  \
    "\"City name\"}, \"unit\": {\"type\": \"string\", \"enum\": [\"celsius\", \"fahrenheit\"], \"default\": "          \
    "\"celsius\"}, \"days\": {\"type\": \"integer\"}, \"hours\": {\"type\": \"array\", \"items\": {\"type\": "         \
    "\"number\"}, \"nullable\": true}, \"filters\": {\"type\": \"object\", \"properties\": {\"rain\": {\"type\": "     \
    "\"boolean\"}, \"wind\": {\"type\": [\"number\", \"string\"]}}, \"required\": [\"rain\"]}, \"mode\": {\"oneOf\": " \
    "[{\"type\": \"string\"}, {\"type\": \"number\"}]}}, \"required\": [\"location\"]}}}, {\"type\": \"function\", "  \
    "\"function\": {\"name\": \"now\", \"description\": \"Current time\", \"parameters\": {}}}]"

static srv_request *parse(const char *body, int *status, char **msg, const char **param) {
    *status = 0;
    *msg = NULL;
    *param = NULL;
    return openai_parse(&S, SRV_CHAT, body, strlen(body), status, msg, param);
}

/* A body that must be refused with 400 and a message naming `what`. */
static void refused(const char *body, const char *what, const char *want_param) {
    int st;
    char *msg;
    const char *param;
    srv_request *r = parse(body, &st, &msg, &param);
    CHECK(!r && st == 400, "accepted (status %d): %s", st, body);
    CHECK_STR_HAS(msg, what);
    CHECK(param && !strcmp(param, want_param), "param %s, want %s", param ? param : "(null)", want_param);
    free(msg);
    srv_request_free(r);
}

static void test_request_validation(void) {
    CHECK(setup_server("tests/fixtures/tokenizers/qwen3") == 0, "setup: %s", celer_last_error());
    const char *u = "\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}]";
    char b[4096];
#define BODY(...) (snprintf(b, sizeof b, __VA_ARGS__), b)
    refused(BODY("{%s, \"tools\": {}}", u), "'tools' must be an array", "tools");
    refused(BODY("{%s, \"tools\": [1]}", u), "'tools[0]' must be an object", "tools");
    refused(BODY("{%s, \"tools\": [{\"type\": \"retrieval\"}]}", u), "'tools[0].type' must be \"function\"", "tools");
    refused(BODY("{%s, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"now\"}}, {\"type\": \"function\", \"function\": {\"name\": \"a b\"}}]}", u),
            "'tools[1].function.name'", "tools");
    refused(BODY("{%s, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"now\", \"parameters\": []}}]}", u),
            "'tools[0].function.parameters' must be a JSON Schema object", "tools");
    refused(BODY("{%s, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"now\"}}, {\"type\": \"function\", \"function\": {\"name\": \"now\"}}]}", u),
            "declared twice", "tools");
    refused(BODY("{%s, \"tools\": %s, \"tool_choice\": \"sometimes\"}", u, TOOLS), "'tool_choice' must be", "tool_choice");
    refused(BODY("{%s, \"tools\": %s, \"tool_choice\": {\"type\": \"function\", \"function\": {\"name\": \"rm\"}}}", u, TOOLS),
            "'tool_choice.function.name' \"rm\" is not among", "tool_choice");
    refused(BODY("{%s, \"tool_choice\": \"required\"}", u), "no 'tools'", "tool_choice");
    refused(BODY("{%s, \"tools\": %s, \"parallel_tool_calls\": 1}", u, TOOLS), "'parallel_tool_calls' must be a boolean", "parallel_tool_calls");
    refused(BODY("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"assistant\", \"content\": null, \"tool_calls\": [{\"id\": \"c\", \"type\": \"function\", \"function\": {\"arguments\": \"{}\"}}]}]}"),
            "'messages[1].tool_calls[0].function.name'", "messages");
    refused(BODY("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}, {\"role\": \"tool\", \"content\": \"x\"}]}"),
            "'messages[1].tool_call_id'", "messages");
    refused(BODY("{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\", \"tool_calls\": []}]}"),
            "'messages[0].tool_calls' is only allowed in assistant messages", "messages");
    /* a call demanded of a tool whose schema the grammar cannot express: 400 naming it;
     * under auto the same tools are taken (calls unconstrained, still checked) */
    refused(BODY("{%s, \"tools\": %s, \"tool_choice\": \"required\"}", u, TOOLS),
            "'tools[0].function.parameters': json schema: /properties/hours: unsupported keyword \"nullable\"", "tools");
    /* a demanded call and a response_format cannot both shape the answer */
    refused(BODY("{%s, \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"now\"}}], \"tool_choice\": \"required\", "
                 "\"response_format\": {\"type\": \"json_object\"}}", u),
            "'tool_choice' demands a tool call and 'response_format'", "tool_choice");
    /* accepted: every choice */
    const char *ok[] = {"\"none\"", "\"auto\"", "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}", "null"};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        int st;
        char *msg;
        const char *param;
        srv_request *r = parse(BODY("{%s, \"tools\": %s, \"tool_choice\": %s, \"parallel_tool_calls\": false}", u, TOOLS, ok[i]), &st, &msg, &param);
        CHECK(r, "refused %s: %s", ok[i], msg ? msg : "");
        if (r) {
            CHECK(r->tools && r->tools->n_tools == 2 && !r->tools->parallel, "tools %s", ok[i]);
            CHECK(tc_request_active(r->tools) == (i != 0), "active %s", ok[i]);
        }
        free(msg);
        srv_request_free(r);
    }
#undef BODY
    teardown_server();
}

/* The Qwen3 template with tools, an assistant call and tool results, requested as an
 * OpenAI client sends them (arguments as a string of JSON, call ids), against jinja2's
 * render of the same conversation (the reference passes the arguments as an object,
 * as we pass them to the template). */
static void test_template_with_tools(void) {
    CHECK(setup_server("tests/fixtures/tokenizers/qwen3") == 0, "setup: %s", celer_last_error());
    const char *body =
        "{\"messages\": [{\"role\": \"system\", \"content\": \"Be brief.\"}, {\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
        " {\"role\": \"assistant\", \"content\": \"<think>\\nNeed the tool.\\n</think>\\n\\nLet me check.\", \"tool_calls\": "
        "[{\"id\": \"call_1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"arguments\": \"{\\\"location\\\":\\\"Paris\\\"}\"}}]},"
        " {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"content\": \"{\\\"temp\\\": 21}\"},"
        " {\"role\": \"tool\", \"tool_call_id\": \"call_1\", \"name\": \"get_weather\", \"content\": \"sunny\"},"
        " {\"role\": \"assistant\", \"content\": \"<think>\\nok\\n</think>\\n\\n21 \\u00b0C, sunny.\"}, {\"role\": \"user\", \"content\": \"Thanks\"}],"
        " \"tools\": " TOOLS "}";
    int st;
    char *msg;
    const char *param;
    srv_request *r = parse(body, &st, &msg, &param);
    CHECK(r, "refused: %s", msg ? msg : "");
    char *ref = jinja_rendered("qwen3_tools");
    int32_t *ids = NULL;
    int n = ref ? celer_tokenize(S.tok, ref, strlen(ref), 0, &ids) : -1;
    CHECK(n > 0, "tokenize the reference");
    if (r && n > 0) {
        int same = r->n_prompt == n && !memcmp(r->prompt, ids, (size_t)n * sizeof *ids);
        CHECK(same, "prompt differs from jinja2's render (%d vs %d tokens)", r->n_prompt, n);
        if (!same) {
            char *got = celer_detokenize(S.tok, r->prompt, (size_t)r->n_prompt, 0, NULL);
            printf("--- got\n%s\n--- want\n%s\n", got, ref);
            free(got);
        }
    }
    free(ids);
    free(ref);
    free(msg);
    srv_request_free(r);
    teardown_server();
}

/* A job of request r whose choice 0 generated `text`, in events of `piece` bytes. */
static srv_event *events_of(const char *text, size_t piece) {
    srv_event *head = NULL, **tail = &head;
    size_t n = strlen(text);
    for (size_t at = 0; at < n || !head;) {
        size_t k = n - at < piece ? n - at : piece;
        srv_event *e = calloc(1, sizeof *e);
        e->text = strndup(text + at, k);
        e->len = k;
        at += k;
        e->finish = at >= n ? SRV_FINISH_STOP : SRV_FINISH_NONE;
        *tail = e;
        tail = &e->next;
    }
    return head;
}

/* Content, tool calls and finish reason of a chat response, and of its SSE stream
 * reassembled as a client does (the calls' argument fragments concatenated by index). */
typedef struct {
    char content[1024];
    int content_null;
    char names[4][64], args[4][512], ids[4][64];
    int n_calls;
    char finish[32];
} answer;

static void answer_of_response(const char *js, answer *a) {
    memset(a, 0, sizeof *a);
    json_error_t je;
    json_t *o = json_loads(js, 0, &je);
    json_t *ch = json_array_get(json_object_get(o, "choices"), 0), *m = json_object_get(ch, "message");
    json_t *c = json_object_get(m, "content");
    a->content_null = json_is_null(c);
    snprintf(a->content, sizeof a->content, "%s", json_is_string(c) ? json_string_value(c) : "");
    snprintf(a->finish, sizeof a->finish, "%s", json_string_value(json_object_get(ch, "finish_reason")));
    size_t i;
    json_t *tc;
    json_array_foreach(json_object_get(m, "tool_calls"), i, tc) {
        if (i >= 4) break;
        json_t *f = json_object_get(tc, "function");
        CHECK(!strcmp(json_string_value(json_object_get(tc, "type")), "function"), "type");
        snprintf(a->ids[i], 64, "%s", json_string_value(json_object_get(tc, "id")));
        snprintf(a->names[i], 64, "%s", json_string_value(json_object_get(f, "name")));
        snprintf(a->args[i], 512, "%s", json_string_value(json_object_get(f, "arguments")));
        a->n_calls++;
    }
    json_decref(o);
}

static void answer_of_stream(const char *sse, answer *a) {
    memset(a, 0, sizeof *a);
    a->content_null = 1;
    for (const char *p = strstr(sse, "data: "); p; p = strstr(p, "data: ")) {
        p += 6;
        const char *e = strstr(p, "\n\n");
        if (!e) break;
        if (!strncmp(p, "[DONE]", 6)) break;
        json_error_t je;
        json_t *o = json_loadb(p, (size_t)(e - p), 0, &je);
        json_t *ch = json_array_get(json_object_get(o, "choices"), 0), *d = json_object_get(ch, "delta");
        json_t *c = json_object_get(d, "content"), *fr = json_object_get(ch, "finish_reason");
        if (json_is_string(c) && json_string_length(c)) {
            a->content_null = 0;
            strncat(a->content, json_string_value(c), sizeof a->content - strlen(a->content) - 1);
        }
        if (json_is_string(fr)) snprintf(a->finish, sizeof a->finish, "%s", json_string_value(fr));
        size_t i;
        json_t *tc;
        json_array_foreach(json_object_get(d, "tool_calls"), i, tc) {
            int k = (int)json_integer_value(json_object_get(tc, "index"));
            CHECK(k >= 0 && k < 4, "index %d", k);
            if (k < 0 || k >= 4) continue;
            json_t *f = json_object_get(tc, "function"), *id = json_object_get(tc, "id");
            if (id) { /* the first delta of a call */
                CHECK(k == a->n_calls, "call %d opened out of order", k);
                snprintf(a->ids[k], 64, "%s", json_string_value(id));
                snprintf(a->names[k], 64, "%s", json_string_value(json_object_get(f, "name")));
                CHECK(!strcmp(json_string_value(json_object_get(tc, "type")), "function"), "type");
                a->n_calls = k + 1;
            }
            json_t *ar = json_object_get(f, "arguments");
            if (json_is_string(ar)) strncat(a->args[k], json_string_value(ar), 511 - strlen(a->args[k]));
        }
        json_decref(o);
        p = e;
    }
}

static void response_case(const char *body, const char *text, const char *want_content, int want_null,
                          const char *want_name, const char *want_args, const char *want_finish) {
    int st;
    char *msg;
    const char *param;
    for (size_t piece = 1; piece <= 64; piece *= 4) {
        srv_request *r = parse(body, &st, &msg, &param);
        CHECK(r, "refused: %s", msg ? msg : "");
        free(msg);
        if (!r) return;
        srv_job *j = srv_job_new(r, "chatcmpl");
        srv_event *ev = events_of(text, piece);
        char *js = openai_response_json(&S, j, ev);
        answer whole, streamed;
        answer_of_response(js, &whole);
        srv_buf out = {0};
        int first = 1;
        for (srv_event *e = ev; e; e = e->next, first = 0) CHECK(openai_stream_event(&S, j, e, first, &out) == 0, "frame");
        CHECK(openai_stream_end(&S, j, &out) == 0, "end");
        answer_of_stream(out.p ? out.p : "", &streamed);
        CHECK(!strcmp(whole.content, want_content) && whole.content_null == want_null, "content [%s] null %d",
              whole.content, whole.content_null);
        CHECK(!strcmp(whole.finish, want_finish), "finish %s, want %s", whole.finish, want_finish);
        CHECK(whole.n_calls == (want_name ? 1 : 0), "%d calls", whole.n_calls);
        if (want_name && whole.n_calls == 1) {
            CHECK(!strcmp(whole.names[0], want_name), "name %s", whole.names[0]);
            json_error_t je;
            json_t *a = json_loads(whole.args[0], 0, &je), *w = json_loads(want_args, 0, &je);
            CHECK(json_is_object(a) && json_equal(a, w), "arguments %s, want %s", whole.args[0], want_args);
            json_decref(a);
            json_decref(w);
            CHECK(!strncmp(whole.ids[0], "call_", 5), "id %s", whole.ids[0]);
        }
        /* the stream says the same (ids are per response) */
        CHECK(!strcmp(streamed.content, whole.content) && streamed.n_calls == whole.n_calls &&
                  !strcmp(streamed.finish, whole.finish),
              "piece %zu: stream content [%s] calls %d finish %s", piece, streamed.content, streamed.n_calls,
              streamed.finish);
        for (int k = 0; k < whole.n_calls && k < streamed.n_calls; k++)
            CHECK(!strcmp(streamed.names[k], whole.names[k]) && !strcmp(streamed.args[k], whole.args[k]),
                  "stream call %d: %s %s", k, streamed.names[k], streamed.args[k]);
        if (want_name) CHECK(!strstr(out.p ? out.p : "", "tool_call>"), "markup leaked into the stream");
        srv_buf_free(&out);
        srv_event_free(ev);
        free(js);
        srv_job_unref(j);
    }
}

static void test_response(void) {
    CHECK(setup_server("tests/fixtures/tokenizers/qwen3") == 0, "setup: %s", celer_last_error());
    const char *body = "{\"messages\": [{\"role\": \"user\", \"content\": \"Weather in Paris?\"}], \"tools\": " TOOLS "}";
    response_case(body, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"days\": 2}}\n</tool_call>",
                  "", 1, "get_weather", "{\"location\": \"Paris\", \"days\": 2}", "tool_calls");
    response_case(body, "Let me check.\n<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>", "Let me check.", 0,
                  "now", "{}", "tool_calls");
    response_case(body, "It is sunny.", "It is sunny.", 0, NULL, NULL, "stop");
    /* tool_choice none: nothing is parsed */
    const char *none = "{\"messages\": [{\"role\": \"user\", \"content\": \"Hi\"}], \"tool_choice\": \"none\", \"tools\": " TOOLS "}";
    response_case(none, "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>",
                  "<tool_call>{\"name\": \"now\", \"arguments\": {}}</tool_call>", 0, NULL, NULL, "stop");
    teardown_server();
}

/* ---- the grammar of the calls ---- */

#define SIMPLE_TOOLS                                                                                                  \
    "[{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"parameters\": {\"type\": \"object\", "   \
    "\"properties\": {\"location\": {\"type\": \"string\"}, \"days\": {\"type\": \"integer\"}, \"unit\": {\"enum\": "  \
    "[\"celsius\", \"fahrenheit\"]}}, \"required\": [\"location\"], \"additionalProperties\": false}}}, "              \
    "{\"type\": \"function\", \"function\": {\"name\": \"now\", \"parameters\": {}}}]"

/* The grammar of SIMPLE_TOOLS under tool_choice `choice` in family fam matches text
 * (want 1) or not (0); a text it matches parses as want_calls calls of that family. */
static void grammar_case(const tc_family *fam, const char *choice, const char *text, int want, int want_calls) {
    char body[2048], err[400];
    snprintf(body, sizeof body, "{\"tools\": %s, \"tool_choice\": %s}", SIMPLE_TOOLS, choice);
    json_error_t je;
    json_t *root = json_loads(body, 0, &je);
    tc_request *t = NULL;
    const char *param = NULL;
    CHECK(tc_request_parse(root, NULL, &t, err, sizeof err, &param) == 0 && t, "parse: %s", err);
    json_decref(root);
    if (!t) return;
    t->fam = fam;
    CHECK(tc_request_grammar(t, err, sizeof err) == 0 && t->grammar, "grammar: %s", err);
    int lazy = !strcmp(choice, "\"auto\"");
    CHECK(t->n_triggers == (lazy ? tc_triggers(t, (const char *[2]){0}) : 0), "triggers");
    if (t->grammar) {
        int m = celer_grammar_match(t->grammar, text, strlen(text));
        CHECK(m == want, "%s %s: match %d, want %d: %s", fam->name, choice, m, want, text);
        if (lazy && want) { /* a lazy grammar starts with one of its triggers */
            int starts = 0;
            for (int i = 0; i < t->n_triggers; i++) starts |= !strncmp(text, t->triggers[i], strlen(t->triggers[i]));
            CHECK(starts, "%s: text does not start with a trigger", fam->name);
        }
    }
    if (want) {
        result r = parse_split(fam->syntax, text, NULL, 0, 0);
        CHECK(r.n_calls == want_calls, "%s: the parser finds %d calls in %s, want %d", fam->name, r.n_calls, text, want_calls);
        result_free(&r);
    }
    tc_request_free(t);
}

static void test_grammar(void) {
    const tc_family *h = tc_family_get(TC_HERMES), *l = tc_family_get(TC_LLAMA3), *g = tc_family_get(TC_HARMONY);
    const tc_family m_args = {TC_MISTRAL, "mistral", "[ARGS]", "[TOOL_CALLS]", 1},
                    m_arr = {TC_MISTRAL, "mistral", "[TOOL_CALLS]", "[TOOL_CALLS]", 1};
    const char *req = "\"required\"", *now = "{\"type\": \"function\", \"function\": {\"name\": \"now\"}}";
    grammar_case(h, req, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"days\": 2}}\n</tool_call>", 1, 1);
    grammar_case(h, req, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\", \"unit\": \"celsius\"}}\n</tool_call>\n"
                         "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>", 1, 2);
    grammar_case(h, req, "<tool_call>\n{\"name\": \"rm\", \"arguments\": {}}\n</tool_call>", 0, 0);
    grammar_case(h, req, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": 5}}\n</tool_call>", 0, 0);
    grammar_case(h, req, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"days\": 2}}\n</tool_call>", 0, 0);
    grammar_case(h, req, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"P\", \"x\": 1}}\n</tool_call>", 0, 0);
    grammar_case(h, req, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"P\", \"unit\": \"kelvin\"}}\n</tool_call>", 0, 0);
    grammar_case(h, req, "Sure.", 0, 0);
    grammar_case(h, now, "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>", 1, 1);
    grammar_case(h, now, "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}\n</tool_call>", 0, 0);
    grammar_case(h, "\"auto\"", "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>", 1, 1);
    grammar_case(l, req, "{\"name\": \"get_weather\", \"parameters\": {\"location\": \"Paris\"}}", 1, 1);
    grammar_case(l, req, "<|python_tag|>{\"name\": \"now\", \"parameters\": {}}", 1, 1);
    grammar_case(l, "\"auto\"", "{\"name\": \"now\", \"parameters\": {}}", 1, 1);
    grammar_case(g, req, "<|channel|>commentary to=functions.get_weather <|constrain|>json<|message|>{\"location\": \"Paris\"}", 1, 1);
    grammar_case(g, req, "<|channel|>analysis<|message|>The user wants weather.<|end|><|start|>assistant<|channel|>commentary "
                         "to=functions.now <|constrain|>json<|message|>{}", 1, 1);
    grammar_case(g, "\"auto\"", " to=functions.now<|channel|>commentary json<|message|>{}", 1, 1);
    grammar_case(g, req, "<|channel|>commentary to=functions.rm <|constrain|>json<|message|>{}", 0, 0);
    grammar_case(&m_arr, req, "[TOOL_CALLS][{\"name\": \"get_weather\", \"arguments\": {\"location\": \"Paris\"}}, {\"name\": \"now\", \"arguments\": {}}]", 1, 2);
    grammar_case(&m_args, req, "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris\"}[TOOL_CALLS]now[ARGS]{}", 1, 2);
    grammar_case(&m_args, now, "[TOOL_CALLS]get_weather[ARGS]{\"location\": \"Paris\"}", 0, 0);
}

int main(void) {
    RUN(test_hermes_reference);
    RUN(test_hermes);
    RUN(test_llama3);
    RUN(test_harmony_reference);
    RUN(test_harmony);
    RUN(test_mistral);
    RUN(test_family_table);
    RUN(test_request_validation);
    RUN(test_template_with_tools);
    RUN(test_response);
    RUN(test_grammar);
    return harness_done();
}
