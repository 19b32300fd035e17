/* tests/test_grammar.c: the GBNF parser and the byte automaton (src/grammar/):
 * parse errors name line, column and reason; grammars accept exactly the strings
 * they describe (cases written from GBNF's meaning, llama.cpp's grammar docs). */
#include <stdlib.h>
#include <string.h>

#include "celer.h"
#include "harness.h"

static int match(const char *gbnf, const char *s) {
    celer_grammar *g = celer_grammar_compile(gbnf, (size_t)-1);
    if (!g) {
        printf("  compile failed: %s\n", celer_last_error());
        return -2;
    }
    int r = celer_grammar_match(g, s, strlen(s));
    celer_grammar_free(g);
    return r;
}

#define ACCEPT(gr, s) CHECK(match(gr, s) == 1, "%s should accept \"%s\"", gr, s)
#define REJECT(gr, s) CHECK(match(gr, s) == 0, "%s should reject \"%s\"", gr, s)

static void literals_and_alternation(void) {
    const char *g = "root ::= \"yes\" | \"no\" # answer\n";
    ACCEPT(g, "yes");
    ACCEPT(g, "no");
    REJECT(g, "ye");
    REJECT(g, "yess");
    REJECT(g, "");
    REJECT(g, "maybe");
    const char *e = "root ::= \"a\\n\\t\\\"\\\\\\x41\\u00e9\\U0001F600\"";
    ACCEPT(e, "a\n\t\"\\A\xC3\xA9\xF0\x9F\x98\x80");
    REJECT(e, "a\n\t\"\\A\xC3\xA9");
    ACCEPT("root ::= \"h\xC3\xA9\"", "h\xC3\xA9");
}

static void classes(void) {
    const char *g = "root ::= [a-c0-9_]";
    ACCEPT(g, "a");
    ACCEPT(g, "c");
    ACCEPT(g, "7");
    ACCEPT(g, "_");
    REJECT(g, "d");
    REJECT(g, "ab");
    const char *n = "root ::= [^\"\\\\]";
    ACCEPT(n, "x");
    ACCEPT(n, "\xC3\xA9");             /* U+00E9 as two bytes */
    ACCEPT(n, "\xE4\xB8\xAD");         /* U+4E2D */
    ACCEPT(n, "\xF0\x9F\x98\x80");     /* U+1F600 */
    REJECT(n, "\"");
    REJECT(n, "\\");
    REJECT(n, "\xC3");                 /* half a character */
    REJECT(n, "\xED\xA0\x80");         /* a surrogate is not UTF-8 */
    REJECT(n, "\xC0\x80");             /* overlong */
    const char *u = "root ::= [\xD0\xB0-\xD1\x8F]+"; /* Cyrillic a..ya */
    ACCEPT(u, "\xD0\xB1\xD1\x8F");
    REJECT(u, "\xD0\x90");             /* capital A, below the range */
    const char *dot = "root ::= . . .";
    ACCEPT(dot, "a\xC3\xA9\xE4\xB8\xAD");
    REJECT(dot, "ab");
}

static void repetition(void) {
    ACCEPT("root ::= \"a\"*", "");
    ACCEPT("root ::= \"a\"*", "aaaa");
    REJECT("root ::= \"a\"*", "aab");
    REJECT("root ::= \"ab\"+", "");
    ACCEPT("root ::= \"ab\"+", "ababab");
    REJECT("root ::= \"ab\"+", "aba");
    ACCEPT("root ::= \"x\" \"y\"? \"z\"", "xz");
    ACCEPT("root ::= \"x\" \"y\"? \"z\"", "xyz");
    REJECT("root ::= \"x\" \"y\"? \"z\"", "xyyz");
    const char *r = "root ::= [0-9]{2,4}";
    REJECT(r, "1");
    ACCEPT(r, "12");
    ACCEPT(r, "1234");
    REJECT(r, "12345");
    ACCEPT("root ::= \"a\"{3}", "aaa");
    REJECT("root ::= \"a\"{3}", "aa");
    REJECT("root ::= \"a\"{3}", "aaaa");
    ACCEPT("root ::= \"a\"{2,}", "aaaaaaa");
    REJECT("root ::= \"a\"{2,}", "a");
    ACCEPT("root ::= (\"a\" | \"b\" \"c\")* \"d\"", "abcabcd");
    REJECT("root ::= (\"a\" | \"b\" \"c\")* \"d\"", "abd");
}

static const char *json_gbnf =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::=\n"
    "  \"{\" ws (\n"
    "            string \":\" ws value\n"
    "    (\",\" ws string \":\" ws value)*\n"
    "  )? \"}\" ws\n"
    "array  ::=\n"
    "  \"[\" ws (\n"
    "            value\n"
    "    (\",\" ws value)*\n"
    "  )? \"]\" ws\n"
    "string ::=\n"
    "  \"\\\"\" (\n"
    "    [^\"\\\\\\x7F\\x00-\\x1F] |\n"
    "    \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) # escapes\n"
    "  )* \"\\\"\" ws\n"
    "number ::= (\"-\"? ([0-9] | [1-9] [0-9]{0,15})) (\".\" [0-9]+)? ([eE] [-+]? [0-9] [1-9]{0,15})? ws\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

static void json_grammar(void) {
    ACCEPT(json_gbnf, "{}");
    ACCEPT(json_gbnf, "{\"a\": [1, 2.5, -3e5, \"x\\u00e9\\n\"], \"b\": {\"c\": null}}");
    ACCEPT(json_gbnf, "{\"k\": \"\xE4\xB8\xAD\xE6\x96\x87\"}");
    REJECT(json_gbnf, "{\"a\" 1}");
    REJECT(json_gbnf, "{\"a\": 01}");
    REJECT(json_gbnf, "[1]");
    REJECT(json_gbnf, "{\"a\": \"\x01\"}");
    REJECT(json_gbnf, "{\"a\": tru}");
}

static void right_recursion_and_nesting(void) {
    const char *g = "root ::= item\nitem ::= \"(\" item \")\" | \"x\"";
    ACCEPT(g, "x");
    ACCEPT(g, "(((x)))");
    REJECT(g, "((x)");
    REJECT(g, "(x))");
    /* deep nesting runs into the depth limit, as an error, never a crash */
    size_t n = 10000;
    char *s = malloc(2 * n + 2);
    memset(s, '(', n);
    s[n] = 'x';
    memset(s + n + 1, ')', n);
    s[2 * n + 1] = 0;
    celer_grammar *gr = celer_grammar_compile(g, (size_t)-1);
    CHECK(gr && celer_grammar_match(gr, s, strlen(s)) == -1, "10000 levels should hit the depth limit");
    CHECK_STR_HAS(celer_last_error(), "CELER_MAX_GRAMMAR_DEPTH");
    celer_grammar_free(gr);
    free(s);
}

static void expect_error(const char *gbnf, const char *where, const char *what) {
    celer_grammar *g = celer_grammar_compile(gbnf, (size_t)-1);
    CHECK(!g, "\"%s\" should not compile", gbnf);
    celer_grammar_free(g);
    CHECK_STR_HAS(celer_last_error(), where);
    CHECK_STR_HAS(celer_last_error(), what);
}

static void parse_errors(void) {
    expect_error("root ::= foo", "line 1, column 10", "undefined rule \"foo\"");
    expect_error("root ::= \"a\"\nx ::= \"unterminated", "line 2, column 7", "unterminated literal");
    expect_error("root ::= [a-", "line 1, column 10", "unterminated character class");
    expect_error("root ::= [z-a]", "line 1, column 12", "range end before its start");
    expect_error("root ::= \"\\q\"", "line 1, column 11", "unknown escape \\q");
    expect_error("root ::= (\"a\"", "line 1, column 10", "unclosed parenthesis");
    expect_error("root ::= \"a\" )", "line 1, column 14", "unmatched ')'");
    expect_error("root ::= * \"a\"", "line 1, column 10", "repeats nothing");
    expect_error("root ::= \"a\"{3,2}", "line 1", "n < m");
    expect_error("root ::= \"a\"{5000}", "line 1", "CELER_MAX_GRAMMAR_REPEAT");
    expect_error("root := \"a\"", "line 1, column 6", "expected ::=");
    expect_error("x ::= \"a\"", "line 1", "no rule \"root\"");
    expect_error("root ::= \"a\"\nroot ::= \"b\"", "line 2, column 1", "defined twice");
    expect_error("root ::= expr\nexpr ::= expr \"+\" \"1\" | \"1\"", "line 2, column 1", "left recursion");
    expect_error("root ::= (\"\")*", "line 1", "can match empty");
    expect_error("root ::= a\na ::= b? a \"x\"\nb ::= \"y\"", "line 2", "left recursion");
    expect_error("root ::= \"\\x4\"", "line 1, column 11", "hexadecimal");
    /* nesting limit */
    char deep[600];
    int k = 0;
    k += snprintf(deep + k, sizeof deep - (size_t)k, "root ::= ");
    for (int i = 0; i < 200; i++) deep[k++] = '(';
    deep[k++] = '"', deep[k++] = 'a', deep[k++] = '"';
    for (int i = 0; i < 200; i++) deep[k++] = ')';
    deep[k] = 0;
    expect_error(deep, "line 1", "CELER_MAX_GRAMMAR_NESTING");
}

static void ambiguity(void) {
    /* both parses live at once; either may finish */
    const char *g = "root ::= \"a\" [a-z]* | [a-z]* \"z\"";
    ACCEPT(g, "abc");
    ACCEPT(g, "bcz");
    ACCEPT(g, "az");
    REJECT(g, "bcd");
    ACCEPT("root ::= (\"a\" | \"a\")*", "aaaaaaaa");
}

static void state_api(void) {
    /* accept_bytes and accepting, without a vocabulary index: a tiny one from no tokenizer is
     * not possible, so this goes through celer_grammar_match; the state is tested in
     * test_grammar_mask with real tokenizers */
    CHECK(match("root ::= \"ab\" | \"abc\"", "ab") == 1, "prefix alternative");
    CHECK(match("root ::= \"ab\" | \"abc\"", "abc") == 1, "longer alternative");
}


/* ---- JSON Schema -> GBNF: what the schema allows, by its meaning */

static int schema_match(const char *schema, const char *json) {
    char *gbnf = celer_json_schema_text_to_gbnf(schema, (size_t)-1, "root");
    if (!gbnf) {
        printf("  convert failed: %s\n", celer_last_error());
        return -2;
    }
    celer_grammar *g = celer_grammar_compile(gbnf, (size_t)-1);
    if (!g) printf("  compile failed: %s\n%s\n", celer_last_error(), gbnf);
    int r = g ? celer_grammar_match(g, json, strlen(json)) : -2;
    celer_grammar_free(g);
    free(gbnf);
    return r;
}

#define S_ACCEPT(sc, j) CHECK(schema_match(sc, j) == 1, "%s should accept %s", sc, j)
#define S_REJECT(sc, j) CHECK(schema_match(sc, j) == 0, "%s should reject %s", sc, j)

static void schema_types(void) {
    S_ACCEPT("{\"type\":\"integer\"}", "-12");
    S_REJECT("{\"type\":\"integer\"}", "1.5");
    S_REJECT("{\"type\":\"integer\"}", "012");
    S_ACCEPT("{\"type\":\"number\"}", "1.5e-3");
    S_ACCEPT("{\"type\":\"boolean\"}", "false");
    S_ACCEPT("{\"type\":\"null\"}", "null");
    S_ACCEPT("{\"type\":\"string\"}", "\"a\\\"b\\u00e9\xC3\xA9\"");
    S_REJECT("{\"type\":\"string\"}", "\"a\nb\"");
    S_ACCEPT("{\"type\":[\"string\",\"null\"]}", "null");
    S_REJECT("{\"type\":[\"string\",\"null\"]}", "1");
    S_ACCEPT("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"\xC3\xA9\xC3\xA9\xC3\xA9\"");
    S_REJECT("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"abcd\"");
    S_REJECT("{\"type\":\"string\",\"minLength\":2,\"maxLength\":3}", "\"a\"");
    S_ACCEPT("{}", "[1, {\"a\": null}]");
    S_ACCEPT("{\"type\":\"json_object\"}", "{\"x\": [true]}");
    S_REJECT("{\"type\":\"json_object\"}", "[]");
}

static void schema_objects(void) {
    const char *o = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"},"
                    "\"c\":{\"type\":\"boolean\"}},\"required\":[\"b\"]}";
    S_ACCEPT(o, "{\"b\": \"x\"}");
    S_ACCEPT(o, "{\"b\":\"x\",\"a\":1,\"c\":true}");
    S_ACCEPT(o, "{ \"b\" : \"x\" , \"c\" : true }");
    S_REJECT(o, "{\"a\": 1}");              /* b is required */
    S_REJECT(o, "{\"b\": 1}");              /* b is a string */
    S_REJECT(o, "{\"b\": \"x\", \"d\": 1}"); /* no additional properties when the schema names none */
    const char *opt = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"integer\"}}}";
    S_ACCEPT(opt, "{}");
    S_ACCEPT(opt, "{\"b\": 2}");
    S_ACCEPT(opt, "{\"a\": 1, \"b\": 2}");
    S_REJECT(opt, "{\"a\": 1,}");
    S_REJECT(opt, "{,\"a\": 1}");
    const char *add = "{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"integer\"}},"
                      "\"additionalProperties\":{\"type\":\"boolean\"}}";
    S_ACCEPT(add, "{\"a\": 1, \"zz\": true, \"y\": false}");
    S_ACCEPT(add, "{\"zz\": true}");
    S_REJECT(add, "{\"a\": 1, \"zz\": 3}");
    S_ACCEPT("{\"type\":\"object\",\"additionalProperties\":true,\"properties\":{}}", "{\"q\": [1]}");
    /* whitespace as llama.cpp's converter allows it: one space, or newlines and indentation */
    S_ACCEPT(opt, "{\n  \"a\": 1\n}");
    S_REJECT(opt, "{  \"a\": 1}");
}

static void schema_arrays_enums_refs(void) {
    const char *a = "{\"type\":\"array\",\"items\":{\"type\":\"integer\"},\"minItems\":1,\"maxItems\":2}";
    S_REJECT(a, "[]");
    S_ACCEPT(a, "[1]");
    S_ACCEPT(a, "[1, 2]");
    S_REJECT(a, "[1, 2, 3]");
    S_REJECT(a, "[\"x\"]");
    S_ACCEPT("{\"type\":\"array\"}", "[1, \"a\", null]");
    const char *e = "{\"enum\":[\"red\",1,null,{\"k\":[true]}]}";
    S_ACCEPT(e, "\"red\"");
    S_ACCEPT(e, "1");
    S_ACCEPT(e, "{\"k\":[true]}");
    S_REJECT(e, "\"blue\"");
    S_ACCEPT("{\"const\":\"x\\\"y\"}", "\"x\\\"y\"");
    S_REJECT("{\"const\":\"x\"}", "\"y\"");
    const char *any = "{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"string\",\"maxLength\":1}]}";
    S_ACCEPT(any, "5");
    S_ACCEPT(any, "\"z\"");
    S_REJECT(any, "\"zz\"");
    const char *ref = "{\"$defs\":{\"node\":{\"type\":\"object\",\"properties\":{\"v\":{\"type\":\"integer\"},"
                      "\"next\":{\"anyOf\":[{\"type\":\"null\"},{\"$ref\":\"#/$defs/node\"}]}},\"required\":[\"v\",\"next\"]}},"
                      "\"$ref\":\"#/$defs/node\"}";
    S_ACCEPT(ref, "{\"v\": 1, \"next\": {\"v\": 2, \"next\": null}}");
    S_REJECT(ref, "{\"v\": 1, \"next\": {\"v\": 2}}");
}

static void schema_strings(void) {
    S_ACCEPT("{\"type\":\"string\",\"format\":\"date\"}", "\"2024-12-31\"");
    S_REJECT("{\"type\":\"string\",\"format\":\"date\"}", "\"2024-02-30\"");
    S_REJECT("{\"type\":\"string\",\"format\":\"date\"}", "\"2024-13-01\"");
    S_ACCEPT("{\"type\":\"string\",\"format\":\"time\"}", "\"23:59:59.5+01:00\"");
    S_REJECT("{\"type\":\"string\",\"format\":\"time\"}", "\"24:00:00Z\"");
    S_ACCEPT("{\"type\":\"string\",\"format\":\"date-time\"}", "\"2024-01-02T03:04:05Z\"");
    S_ACCEPT("{\"type\":\"string\",\"format\":\"uuid\"}", "\"0f8fad5b-d9cb-469f-a165-70867728950e\"");
    S_REJECT("{\"type\":\"string\",\"format\":\"uuid\"}", "\"0f8fad5b-d9cb-469f-a165-70867728950\"");
    const char *p = "{\"type\":\"string\",\"pattern\":\"^(ab|c)+[0-9]{2}\\\\.x?$\"}";
    S_ACCEPT(p, "\"abcab12.\"");
    S_ACCEPT(p, "\"c00.x\"");
    S_REJECT(p, "\"12.\"");
    S_REJECT(p, "\"ab1.\"");
    S_REJECT(p, "\"ab12.xy\"");
    /* unanchored: the match may sit anywhere in the string */
    S_ACCEPT("{\"type\":\"string\",\"pattern\":\"\\\\d\\\\d\"}", "\"x12y\"");
    S_REJECT("{\"type\":\"string\",\"pattern\":\"\\\\d\\\\d\"}", "\"x1y\"");
    /* characters JSON escapes are generated escaped */
    S_ACCEPT("{\"type\":\"string\",\"pattern\":\"^a\\\"[\\\\n]$\"}", "\"a\\\"\\n\"");
    S_ACCEPT("{\"type\":\"string\",\"pattern\":\"^[^a-c]\\\\w\\\\s.$\"}", "\"d_ z\"");
    S_REJECT("{\"type\":\"string\",\"pattern\":\"^[^a-c]\\\\w\\\\s.$\"}", "\"a_ z\"");
}

static void expect_schema_error(const char *schema, const char *what) {
    char *g = celer_json_schema_text_to_gbnf(schema, (size_t)-1, "root");
    CHECK(!g, "%s should be refused", schema);
    free(g);
    CHECK_STR_HAS(celer_last_error(), what);
}

static void schema_errors(void) {
    expect_schema_error("{\"type\":\"object\",\"properties\":{\"a\":{\"type\":\"number\",\"minimum\":1}}}",
                        "json schema: /properties/a: unsupported keyword \"minimum\"");
    expect_schema_error("{\"allOf\":[{}]}", "json schema: /: unsupported keyword \"allOf\"");
    expect_schema_error("{\"type\":\"array\",\"items\":[{}]}", "/items: an array of schemas");
    expect_schema_error("{\"type\":\"string\",\"format\":\"email\"}", "unsupported format \"email\"");
    expect_schema_error("{\"type\":\"string\",\"pattern\":\"(?=a)\"}", "lookaround");
    expect_schema_error("{\"type\":\"string\",\"pattern\":\"(a)\\\\1\"}", "backreferences");
    expect_schema_error("{\"$ref\":\"http://x/y\"}", "only #, #/$defs/NAME");
    expect_schema_error("{\"$ref\":\"#/$defs/missing\"}", "names no definition");
    expect_schema_error("{\"type\":\"array\",\"maxItems\":5000}", "CELER_MAX_GRAMMAR_REPEAT");
    expect_schema_error("{\"type\":\"tuple\"}", "unsupported type \"tuple\"");
    expect_schema_error("{\"anyOf\":[]}", "non-empty array");
    expect_schema_error("[1]", "a schema must be an object");
    expect_schema_error("{\"type\":", "invalid JSON at line 1");
    char deep[2048];
    int k = 0;
    for (int i = 0; i < 100; i++) k += snprintf(deep + k, sizeof deep - (size_t)k, "{\"items\":");
    k += snprintf(deep + k, sizeof deep - (size_t)k, "{}");
    for (int i = 0; i < 100; i++) deep[k++] = '}';
    deep[k] = 0;
    expect_schema_error(deep, "CELER_MAX_SCHEMA_DEPTH");
    CHECK(!celer_json_schema_text_to_gbnf("{}", (size_t)-1, "bad prefix"), "a prefix with a space is refused");
    /* prefixes keep several schemas apart in one grammar */
    char *a = celer_json_schema_text_to_gbnf("{\"type\":\"integer\"}", (size_t)-1, "tool-a");
    char *b = celer_json_schema_text_to_gbnf("{\"type\":\"string\"}", (size_t)-1, "tool-b");
    char all[16384];
    snprintf(all, sizeof all, "root ::= \"<call>\" (tool-a | tool-b) \"</call>\"\n%s%s", a, b);
    CHECK(match(all, "<call>12</call>") == 1 && match(all, "<call>\"s\"</call>") == 1 && match(all, "<call>x</call>") == 0,
          "two schemas under one root");
    free(a);
    free(b);
}

static void grammar_limits(void) {
    size_t n = (1u << 20) + 16;
    char *big = malloc(n + 1);
    memset(big, ' ', n);
    memcpy(big, "root ::= \"a\" #", 14);
    big[n] = 0;
    expect_error(big, "grammar: ", "over the limit of 1048576 (CELER_MAX_GRAMMAR_BYTES)");
    /* 9000 rules */
    size_t k = 0;
    k += (size_t)snprintf(big + k, n - k, "root ::= r0\n");
    for (int i = 0; i < 9000; i++) k += (size_t)snprintf(big + k, n - k, "r%d ::= \"a\"\n", i);
    expect_error(big, "line ", "more rules than the limit (CELER_MAX_GRAMMAR_RULES");
    /* a 1100-byte literal a thousand times */
    k = (size_t)snprintf(big, n, "root ::= \"");
    memset(big + k, 'a', 1100);
    k += 1100;
    snprintf(big + k, n - k, "\"{1000}");
    expect_error(big, "line 1", "CELER_MAX_GRAMMAR_ELEMENTS");
    /* ambiguity: after n a's, every sequence of pending b's and c's is a parse */
    celer_grammar *g = celer_grammar_compile("root ::= e\ne ::= \"a\" e \"b\" | \"a\" e \"c\" | \"a\" e | \"\"", (size_t)-1);
    CHECK(g != NULL, "compile: %s", celer_last_error());
    CHECK(g && celer_grammar_match(g, "aaaaaaaaaaaaaaaaaaaa", 20) == -1, "20 a's should hit the ambiguity limit");
    CHECK_STR_HAS(celer_last_error(), "too ambiguous");
    CHECK_STR_HAS(celer_last_error(), "CELER_MAX_GRAMMAR_STACKS");
    CHECK(g && celer_grammar_match(g, "aaabcb", 6) == 1, "a short input stays inside it");
    celer_grammar_free(g);
    /* a schema whose grammar grows past 1 MiB: quotes in enum strings double when escaped again */
    free(big);
    n = 2u << 20;
    big = malloc(n);
    k = (size_t)snprintf(big, n, "{\"enum\":[");
    for (int i = 0; i < 300; i++) {
        k += (size_t)snprintf(big + k, n - k, "%s\"%d", i ? "," : "", i);
        for (int j = 0; j < 1500; j++) big[k++] = '\\', big[k++] = '"';
        big[k++] = '"';
    }
    snprintf(big + k, n - k, "]}");
    char *gb = celer_json_schema_text_to_gbnf(big, (size_t)-1, "root");
    CHECK(!gb, "a 1 MiB enum should be refused");
    free(gb);
    CHECK_STR_HAS(celer_last_error(), "CELER_MAX_SCHEMA_GBNF");
    free(big);
}

int main(void) {
    RUN(literals_and_alternation);
    RUN(classes);
    RUN(repetition);
    RUN(json_grammar);
    RUN(right_recursion_and_nesting);
    RUN(parse_errors);
    RUN(ambiguity);
    RUN(state_api);
    RUN(schema_types);
    RUN(schema_objects);
    RUN(schema_arrays_enums_refs);
    RUN(schema_strings);
    RUN(schema_errors);
    RUN(grammar_limits);
    return harness_done();
}
