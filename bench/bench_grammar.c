/* bench/bench_grammar.c: the cost of grammar masks (src/grammar/) over real
 * vocabularies, in CPU time of this thread (the machine may be shared).
 *   build/bench_grammar [TOKENIZER_DIR...]   (default: the four fixture tokenizers)
 * For each tokenizer: the vocabulary index build; a cold mask (nothing cached) at
 * the start of a JSON object and inside a string (nearly every token allowed: the
 * worst case); and the mask per token along a JSON answer under a JSON Schema,
 * generated token by token (its own encoding), each mask computed from its state as
 * a decode step would ask, with the per-state cache as it is. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "celer.h"

static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static const char *schema =
    "{\"type\":\"object\",\"properties\":{\"name\":{\"type\":\"string\"},\"age\":{\"type\":\"integer\"},"
    "\"email\":{\"type\":\"string\"},\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\"}},"
    "\"address\":{\"type\":\"object\",\"properties\":{\"street\":{\"type\":\"string\"},\"city\":{\"type\":\"string\"}},"
    "\"required\":[\"street\",\"city\"]}},\"required\":[\"name\",\"age\",\"tags\",\"address\"]}";
static const char *answer =
    "{\"name\": \"Margaret Hamilton\", \"age\": 88, \"tags\": [\"apollo\", \"software engineering\", \"MIT\", "
    "\"\xE4\xB8\xAD\xE6\x96\x87\"], \"address\": {\"street\": \"77 Massachusetts Avenue\", \"city\": \"Cambridge, "
    "Massachusetts\"}, \"email\": \"margaret@example.com\"}";

static void one(const char *dir) {
    celer_tokenizer *t = celer_tokenizer_open(dir);
    if (!t) {
        printf("%s: %s\n", dir, celer_last_error());
        return;
    }
    double a = cpu_ms();
    celer_grammar_vocab *v = celer_grammar_vocab_new(t);
    double index_ms = cpu_ms() - a;
    char *gbnf = celer_json_schema_text_to_gbnf(schema, (size_t)-1, "root");
    celer_grammar *g = celer_grammar_compile(gbnf, (size_t)-1);
    double cold_obj = 1e9, cold_str = 1e9;
    for (int r = 0; r < 5; r++) {
        celer_grammar_state *st = celer_grammar_state_new(g, v, NULL, 0);
        a = cpu_ms();
        celer_grammar_state_mask(st);
        double b = cpu_ms();
        celer_grammar_state_accept_bytes(st, "{\"name\": \"", 10);
        double c = cpu_ms();
        celer_grammar_state_mask(st);
        double d = cpu_ms();
        if (b - a < cold_obj) cold_obj = b - a;
        if (d - c < cold_str) cold_str = d - c;
        celer_grammar_state_free(st);
    }
    int32_t *ids;
    int n = celer_tokenize(t, answer, strlen(answer), 0, &ids);
    double best = 1e9, worst_step = 0;
    for (int r = 0; r < 3; r++) {
        celer_grammar_state *st = celer_grammar_state_new(g, v, NULL, 0);
        double total = 0;
        for (int i = 0; i < n; i++) {
            a = cpu_ms();
            celer_grammar_state_mask(st);
            double dt = cpu_ms() - a;
            total += dt;
            if (dt > worst_step) worst_step = dt;
            if (celer_grammar_state_accept_token(st, ids[i]) != 0) {
                printf("%s: token %d refused: %s\n", dir, i, celer_last_error());
                break;
            }
        }
        if (total < best) best = total;
        celer_grammar_state_free(st);
    }
    printf("%-40s vocab %6d  index %7.1f ms  cold mask: '{' %6.3f ms, in a string %6.3f ms  "
           "answer: %3d tokens, %.3f ms/token (worst step %.3f ms)\n",
           dir, celer_grammar_vocab_size(v), index_ms, cold_obj, cold_str, n, best / n, worst_step);
    free(ids);
    free(gbnf);
    celer_grammar_free(g);
    celer_grammar_vocab_free(v);
    celer_tokenizer_free(t);
}

int main(int argc, char **argv) {
    static const char *def[] = {"tests/fixtures/tokenizers/llama3", "tests/fixtures/tokenizers/qwen3",
                                "tests/fixtures/tokenizers/gptoss", "tests/fixtures/tokenizers/gemma3"};
    if (argc > 1)
        for (int i = 1; i < argc; i++) one(argv[i]);
    else
        for (int i = 0; i < 4; i++) one(def[i]);
    return 0;
}
