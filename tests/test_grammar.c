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

int main(void) {
    RUN(literals_and_alternation);
    RUN(classes);
    RUN(repetition);
    RUN(json_grammar);
    RUN(right_recursion_and_nesting);
    RUN(parse_errors);
    RUN(ambiguity);
    RUN(state_api);
    return harness_done();
}
