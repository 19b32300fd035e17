/* server/toolcall.h: OpenAI tool calls. The request side (`tools`, `tool_choice`,
 * `parallel_tool_calls` validated into a tc_request) and the response side: a parser
 * per model family that splits generated text into content and calls, incrementally
 * (streaming) or at once, with the same result however the text is split.
 *
 * The families and their call syntax live in one table (toolcall.c, tc_families):
 *   hermes   Qwen 2.5 / 3, Hermes:  <tool_call>\n{"name": N, "arguments": {...}}\n</tool_call>
 *   llama3   Llama 3.1+:            [<|python_tag|>]{"name": N, "parameters": {...}}
 *   harmony  gpt-oss:               <|channel|>commentary to=functions.N <|constrain|>json<|message|>{...}<|call|>
 *   mistral  Mistral:               [TOOL_CALLS][{"name": N, "arguments": {...}}]  or  [TOOL_CALLS]N[ARGS]{...}
 * A tokenizer picks its family by a token of its vocabulary (tc_family_for); one with
 * none of them gets hermes, the most common syntax. docs/tool-calls.md has the rules. */
#ifndef CELER_SERVER_TOOLCALL_H
#define CELER_SERVER_TOOLCALL_H
#include <jansson.h>
#include <stddef.h>

#include "celer.h"
#include "celer_tokenizer.h"

typedef enum { TC_HERMES = 1, TC_LLAMA3, TC_HARMONY, TC_MISTRAL } tc_syntax;

typedef struct {
    tc_syntax syntax;
    const char *name;           /* "hermes", "llama3", "harmony", "mistral" */
    const char *probe;          /* a token whose presence in the vocabulary picks the family */
    const char *trigger;        /* the text that opens a call (a lazy grammar's trigger) */
    int keep_special;           /* its markers are special tokens: the text must keep them */
} tc_family;

/* The family of a tokenizer (never NULL: hermes when no probe matches). */
const tc_family *tc_family_for(const celer_tokenizer *tok);
/* The family of a syntax (NULL for an unknown one). */
const tc_family *tc_family_get(tc_syntax s);

/* ---- request ---- */
enum { TC_CHOICE_AUTO = 0, TC_CHOICE_NONE, TC_CHOICE_REQUIRED, TC_CHOICE_NAMED };

typedef struct tc_parser tc_parser;

typedef struct tc_request {
    json_t *tools;              /* the `tools` array as given (validated), a reference */
    char **names;               /* [n_tools] function names */
    json_t **params;            /* [n_tools] borrowed `parameters` objects (NULL: none given) */
    int n_tools;
    int choice;                 /* TC_CHOICE_* */
    int named;                  /* TC_CHOICE_NAMED: index into names */
    int parallel;               /* parallel_tool_calls (default 1) */
    const tc_family *fam;
    /* the grammar of the allowed calls (tc_request_grammar): constrains from the first
     * token (required, named), or lazily from a trigger (auto); openai.c hands it to
     * srv_request.grammar (with the triggers), which the scheduler applies */
    celer_grammar *grammar;
    const char *triggers[2];    /* static strings */
    int n_triggers;             /* 0: not lazy */
    /* streaming state of the HTTP side: one parser per choice, made on first use */
    tc_parser **stream;         /* [n_stream] */
    int n_stream;
} tc_request;

/* Reads `tools`, `tool_choice` and `parallel_tool_calls` of a chat request body.
 * Returns 0 with *out = NULL when the body declares no tools (or `tools` is null/[]
 * and tool_choice is absent, "none" or "auto"), 0 with *out set when it does, -1 with
 * a message in err (naming the field path, e.g. tools[1].function.name) and the
 * top-level parameter in *param. */
int tc_request_parse(const json_t *root, const celer_tokenizer *tok, tc_request **out, char *err, size_t errn,
                     const char **param);
/* The GBNF of the calls t allows in its family's syntax (malloc'd); lazy: the grammar
 * that starts at a trigger (tc_triggers). NULL with err: a schema the converter does
 * not support, naming tools[i].function.parameters and the keyword. */
char *tc_grammar_text(const tc_request *t, int lazy, char *err, size_t errn);
/* The family's trigger strings (static) into triggers[2]; their count. */
int tc_triggers(const tc_request *t, const char **triggers);
/* Compiles t->grammar (and sets the triggers) when t is active; 0 when inactive.
 * -1 with err (an unsupported schema, a grammar that does not compile) when tool_choice
 * demands a call; under auto such tools leave t->grammar NULL (calls unconstrained). */
int tc_request_grammar(tc_request *t, char *err, size_t errn);
/* 1 when generated text must be parsed for calls (tools given, tool_choice not none). */
int tc_request_active(const tc_request *r);
void tc_request_free(tc_request *r);

/* Rewrites the messages of a chat (a JSON array, modified in place) for the template:
 * an assistant message's tool_calls[i].function.arguments given as a JSON string of an
 * object becomes that object (templates apply tojson to it, as vLLM and llama.cpp
 * pass it). Validates assistant tool_calls and tool messages. -1 with a message
 * naming the field path (messages[2].tool_calls[0].function.name). */
int tc_messages_prepare(json_t *messages, char *err, size_t errn);

/* ---- response ---- */
typedef struct {
    int index;                  /* position among this choice's calls */
    char id[32];                /* "call_" + 24 random letters and digits */
    char *name;
    char *arguments;            /* compact JSON text of an object */
} tc_call;

/* What a parser step produced: content that became final and calls that became final. */
typedef struct {
    char *content;              /* [content_len] bytes, not NUL-terminated */
    size_t content_len, content_cap;
    tc_call *calls;             /* [n_calls] */
    int n_calls, cap_calls;
} tc_out;

/* Forgets the content and calls (frees the calls), keeps the buffers. */
void tc_out_clear(tc_out *o);
void tc_out_free(tc_out *o);

/* A parser for one choice. names: the functions the request declares (copied; a call
 * naming another one is returned as text). max_calls: 1 when parallel_tool_calls is
 * false (later calls become text), else 0 (no limit). NULL on out of memory. */
tc_parser *tc_parser_new(tc_syntax syn, char *const *names, int n_names, int max_calls);
/* Adds generated text; appends to out what became final. Text that may still be a
 * marker or a call is held back. -1 on out of memory. */
int tc_parser_put(tc_parser *p, const char *text, size_t n, tc_out *out);
/* The end of the text: appends whatever is held back (an unfinished call that parses
 * is a call; otherwise its text is content). -1 on out of memory. */
int tc_parser_finish(tc_parser *p, tc_out *out);
/* Calls returned so far. */
int tc_parser_n_calls(const tc_parser *p);
/* Content bytes returned so far that are not whitespace. */
size_t tc_parser_n_text(const tc_parser *p);
void tc_parser_free(tc_parser *p);
#endif
