/* server/toolgram.c: the grammar of the tool calls a request allows, in its family's
 * call syntax: each tool's `parameters` schema becomes GBNF under its own rule prefix
 * (tool-0, tool-1, ...: celer_json_schema_to_gbnf) and the family's markup joins them.
 * tool_choice "required" or a named function: the grammar constrains from the first
 * token; "auto": it is lazy, triggered by the family's call opener (the trigger is the
 * grammar's first bytes), so the model may answer in text or open a call, and a call
 * it opens is constrained to a declared function and its schema. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/toolcall.h"

/* The rule of each allowed tool's arguments (tool-I ::= ...) into f, and into alt the
 * alternatives "LIT" [between] tool-I joined by |, LIT being lit_fmt with the
 * function's name. -1 with err naming the tool. */
static int tool_rules(const tc_request *t, FILE *f, FILE *alt, const char *lit_fmt, const char *between, char *err,
                      size_t errn) {
    int first = 1;
    for (int i = 0; i < t->n_tools; i++) {
        if (t->choice == TC_CHOICE_NAMED && i != t->named) continue;
        json_t *obj = NULL;
        const json_t *schema = t->params[i];
        if (!schema || json_object_size(schema) == 0) schema = obj = json_pack("{s:s}", "type", "object");
        char prefix[32];
        snprintf(prefix, sizeof prefix, "tool-%d", i);
        char *g = schema ? celer_json_schema_to_gbnf(schema, prefix) : NULL;
        json_decref(obj);
        if (!g) {
            snprintf(err, errn, "'tools[%d].function.parameters': %s", i, celer_last_error());
            return -1;
        }
        fputs(g, f);
        fputc('\n', f);
        free(g);
        fprintf(alt, "%s\"", first ? "" : " | ");
        fprintf(alt, lit_fmt, t->names[i]);
        fprintf(alt, "\" %s%stool-%d", between ? between : "", between ? " " : "", i);
        first = 0;
    }
    return 0;
}

char *tc_grammar_text(const tc_request *t, int lazy, char *err, size_t errn) {
    char *text = NULL, *alts = NULL;
    size_t tn = 0, an = 0;
    FILE *f = open_memstream(&text, &tn), *a = open_memstream(&alts, &an);
    int rc = -1;
    if (!f || !a) {
        snprintf(err, errn, "out of memory");
        goto out;
    }
    switch (t->fam->syntax) {
    case TC_HERMES:
        if ((rc = tool_rules(t, f, a, "%s\\\", \\\"arguments\\\": ", NULL, err, errn))) break;
        fflush(a);
        fprintf(f, "tc-call ::= \"<tool_call>\\n{\\\"name\\\": \\\"\" (%s) \"}\\n</tool_call>\"\n", alts);
        fprintf(f, "root ::= tc-call%s\n", t->parallel ? " (\"\\n\" tc-call)*" : "");
        break;
    case TC_LLAMA3:
        if ((rc = tool_rules(t, f, a, "%s\\\", \\\"parameters\\\": ", NULL, err, errn))) break;
        fflush(a);
        fprintf(f, "root ::= \"<|python_tag|>\"? \"{\\\"name\\\": \\\"\" (%s) \"}\"\n", alts);
        break;
    case TC_HARMONY:
        if ((rc = tool_rules(t, f, a, "%s", "tc-hend", err, errn))) break;
        fflush(a);
        fprintf(f, "tc-fn ::= %s\n", alts);
        fprintf(f, "tc-hend ::= \"<|channel|>commentary\"? (\" <|constrain|>json\" | \" json\")? \"<|message|>\"\n");
        if (lazy) {
            fprintf(f, "root ::= \" to=functions.\" tc-fn\n");
        } else { /* reasoning first (without '<'), then the call */
            fprintf(f, "tc-think ::= \"<|channel|>analysis<|message|>\" [^<]* \"<|end|>\" \"<|start|>\" \"assistant\"\n");
            fprintf(f, "root ::= tc-think? \"<|channel|>commentary to=functions.\" tc-fn\n");
        }
        break;
    case TC_MISTRAL:
        if (!strcmp(t->fam->probe, "[ARGS]")) {
            if ((rc = tool_rules(t, f, a, "%s", "\"[ARGS]\"", err, errn))) break;
            fflush(a);
            fprintf(f, "tc-call ::= \"[TOOL_CALLS]\" (%s)\n", alts);
            fprintf(f, "root ::= tc-call%s\n", t->parallel ? "+" : "");
        } else {
            if ((rc = tool_rules(t, f, a, "%s\\\", \\\"arguments\\\": ", NULL, err, errn))) break;
            fflush(a);
            fprintf(f, "tc-call ::= \"{\\\"name\\\": \\\"\" (%s) \"}\"\n", alts);
            fprintf(f, "root ::= \"[TOOL_CALLS]\" \"[\" tc-call (\", \" tc-call)%s \"]\"\n", t->parallel ? "*" : "?");
        }
        break;
    }
out:
    if (a) fclose(a);
    if (f) fclose(f);
    free(alts);
    if (rc) {
        free(text);
        return NULL;
    }
    return text;
}

int tc_triggers(const tc_request *t, const char **triggers) {
    switch (t->fam->syntax) {
    case TC_HERMES: triggers[0] = "<tool_call>"; return 1;
    case TC_LLAMA3: triggers[0] = "<|python_tag|>"; triggers[1] = "{\"name\": \""; return 2;
    case TC_HARMONY: triggers[0] = " to=functions."; return 1;
    case TC_MISTRAL: triggers[0] = "[TOOL_CALLS]"; return 1;
    }
    return 0;
}

int tc_request_grammar(tc_request *t, char *err, size_t errn) {
    if (!tc_request_active(t)) return 0;
    int lazy = t->choice == TC_CHOICE_AUTO;
    char *text = tc_grammar_text(t, lazy, err, errn);
    if (text && !(t->grammar = celer_grammar_compile(text, (size_t)-1)))
        snprintf(err, errn, "the tools' grammar: %s", celer_last_error());
    free(text);
    /* under auto a schema the converter does not take leaves the calls unconstrained
     * (they are still checked when parsed); a call the request demands must be constrained */
    if (!t->grammar) return lazy ? 0 : -1;
    t->n_triggers = lazy ? tc_triggers(t, t->triggers) : 0;
    return 0;
}
