/* fuzz/fuzz_grammar.c: the GBNF parser and the JSON Schema converter on arbitrary
 * bytes. The first byte picks the input: even, GBNF text up to the first NUL byte,
 * then the rest is matched on the grammar (the automaton, its limits); odd, a JSON
 * Schema converted to GBNF, compiled, and matched on the rest. A refusal must say
 * why. */
#include <stdlib.h>
#include <string.h>

#include "celer.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    if (n < 1) return 0;
    const int schema = data[0] & 1;
    const char *text = (const char *)data + 1;
    size_t len = n - 1;
    const char *nul = memchr(text, 0, len);
    size_t tlen = nul ? (size_t)(nul - text) : len;
    const char *rest = nul ? nul + 1 : text + len;
    size_t rlen = nul ? len - tlen - 1 : 0;
    char *gbnf = NULL;
    celer_grammar *g = NULL;
    if (schema) {
        gbnf = celer_json_schema_text_to_gbnf(text, tlen, "root");
        if (!gbnf) {
            if (!celer_last_error()[0]) abort();
            return 0;
        }
        g = celer_grammar_compile(gbnf, (size_t)-1);
        /* a converted schema compiles, or says why (a limit; a schema that only refers
         * to itself, like {"$defs":{"n":{"anyOf":[{"$ref":"#/$defs/n"}]}}}, is left recursion) */
        if (!g && !celer_last_error()[0]) abort();
    } else {
        g = celer_grammar_compile(text, tlen);
        if (!g && !celer_last_error()[0]) abort();
    }
    if (g) {
        int r = celer_grammar_match(g, rest, rlen);
        if (r < 0 && !celer_last_error()[0]) abort();
    }
    celer_grammar_free(g);
    free(gbnf);
    return 0;
}
