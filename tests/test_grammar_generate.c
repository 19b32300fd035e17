/* tests/test_grammar_generate.c: constrained generation end to end with the
 * embedded default model (models/default, which writes KJV text and never JSON on
 * its own). 20 seeds sampled together in one batched loop, each sequence with its
 * own grammar state, under a JSON Schema with nested objects, arrays, enums, formats
 * and required fields: every answer must parse (jansson) and satisfy the schema,
 * checked by the validator below, written from the JSON Schema specification and
 * independent of the converter (it knows nothing of GBNF; patterns and formats are
 * checked with PCRE2 and a calendar). Also: a dead end ends the sequence with an
 * error, a lazy grammar whose trigger is followed by text it refuses too. */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <jansson.h>
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "celer.h"
#include "harness.h"

#define DIR "models/default"
#define N_SEQ 20

static const char *schema_text =
    "{\"type\":\"object\",\"properties\":{"
    "\"book\":{\"enum\":[\"Genesis\",\"Exodus\",\"Psalms\"]},"
    "\"chapter\":{\"type\":\"integer\"},"
    "\"verse\":{\"type\":\"object\",\"properties\":{\"text\":{\"type\":\"string\",\"maxLength\":24},"
    "\"ref\":{\"type\":\"string\",\"pattern\":\"^[A-Z][a-z]{1,8} [0-9]{1,3}:[0-9]{1,3}$\"}},"
    "\"required\":[\"text\",\"ref\"]},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":6},\"minItems\":1,\"maxItems\":3},"
    "\"read\":{\"type\":\"string\",\"format\":\"date\"},"
    "\"id\":{\"type\":\"string\",\"format\":\"uuid\"},"
    "\"note\":{\"anyOf\":[{\"type\":\"null\"},{\"type\":\"number\"},{\"$ref\":\"#/$defs/flag\"}]}},"
    "\"required\":[\"book\",\"chapter\",\"verse\",\"tags\",\"read\"],"
    "\"additionalProperties\":false,"
    "\"$defs\":{\"flag\":{\"type\":\"boolean\"}}}";

/* ---------------------------------------------------------------- the validator */

static int re_match(const char *pat, const char *s) {
    int ec;
    PCRE2_SIZE eo;
    pcre2_code *re = pcre2_compile((PCRE2_SPTR)pat, PCRE2_ZERO_TERMINATED, PCRE2_UTF, &ec, &eo, NULL);
    if (!re) return 0;
    pcre2_match_data *md = pcre2_match_data_create_from_pattern(re, NULL);
    int rc = pcre2_match(re, (PCRE2_SPTR)s, strlen(s), 0, 0, md, NULL);
    pcre2_match_data_free(md);
    pcre2_code_free(re);
    return rc >= 0;
}

static size_t codepoints(const char *s) {
    size_t n = 0;
    for (; *s; s++) n += ((unsigned char)*s & 0xC0) != 0x80;
    return n;
}

static int valid_date(const char *s) {
    int y, m, d;
    char tail;
    if (!re_match("^[0-9]{4}-[0-9]{2}-[0-9]{2}$", s) || sscanf(s, "%d-%d-%d%c", &y, &m, &d, &tail) != 3) return 0;
    static const int days[] = {31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
    if (m < 1 || m > 12 || d < 1 || d > days[m - 1]) return 0;
    if (m == 2 && d == 29 && !((y % 4 == 0 && y % 100 != 0) || y % 400 == 0)) return 0;
    return 1;
}

/* 1 when v satisfies schema s (the keywords this test's schema uses, with JSON
 * Schema's meaning: absent additionalProperties allows any). why gets the first failure. */
static int validate(const json_t *root, const json_t *s, const json_t *v, const char *at, char *why, size_t n) {
#define NO(...) return snprintf(why, n, __VA_ARGS__), 0
    const json_t *x;
    if ((x = json_object_get(s, "$ref"))) {
        const char *name = json_string_value(x) + strlen("#/$defs/");
        return validate(root, json_object_get(json_object_get(root, "$defs"), name), v, at, why, n);
    }
    if ((x = json_object_get(s, "enum"))) {
        size_t i;
        const json_t *e;
        json_array_foreach(x, i, e) if (json_equal(e, v)) return 1;
        NO("%s: not one of the enum", at);
    }
    if ((x = json_object_get(s, "anyOf"))) {
        size_t i;
        const json_t *e;
        json_array_foreach(x, i, e) if (validate(root, e, v, at, why, n)) return 1;
        NO("%s: matches no anyOf branch", at);
    }
    const char *type = json_string_value(json_object_get(s, "type"));
    if (!type) return 1;
    if (!strcmp(type, "null") && !json_is_null(v)) NO("%s: not null", at);
    if (!strcmp(type, "boolean") && !json_is_boolean(v)) NO("%s: not a boolean", at);
    if (!strcmp(type, "number") && !json_is_number(v)) NO("%s: not a number", at);
    if (!strcmp(type, "integer") && !json_is_integer(v)) NO("%s: not an integer", at);
    if (!strcmp(type, "string")) {
        if (!json_is_string(v)) NO("%s: not a string", at);
        const char *str = json_string_value(v);
        if ((x = json_object_get(s, "maxLength")) && codepoints(str) > (size_t)json_integer_value(x))
            NO("%s: longer than maxLength", at);
        if ((x = json_object_get(s, "minLength")) && codepoints(str) < (size_t)json_integer_value(x))
            NO("%s: shorter than minLength", at);
        if ((x = json_object_get(s, "pattern")) && !re_match(json_string_value(x), str))
            NO("%s: \"%s\" does not match the pattern", at, str);
        if ((x = json_object_get(s, "format"))) {
            const char *f = json_string_value(x);
            if (!strcmp(f, "date") && !valid_date(str)) NO("%s: \"%s\" is not a date", at, str);
            if (!strcmp(f, "uuid") &&
                !re_match("^[0-9a-fA-F]{8}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{4}-[0-9a-fA-F]{12}$", str))
                NO("%s: \"%s\" is not a uuid", at, str);
        }
    }
    if (!strcmp(type, "array")) {
        if (!json_is_array(v)) NO("%s: not an array", at);
        if ((x = json_object_get(s, "minItems")) && json_array_size(v) < (size_t)json_integer_value(x))
            NO("%s: fewer items than minItems", at);
        if ((x = json_object_get(s, "maxItems")) && json_array_size(v) > (size_t)json_integer_value(x))
            NO("%s: more items than maxItems", at);
        size_t i;
        const json_t *e;
        json_array_foreach(v, i, e) if (!validate(root, json_object_get(s, "items"), e, at, why, n)) return 0;
    }
    if (!strcmp(type, "object")) {
        if (!json_is_object(v)) NO("%s: not an object", at);
        const json_t *props = json_object_get(s, "properties"), *e;
        size_t i;
        json_array_foreach(json_object_get(s, "required"), i, e) if (!json_object_get(v, json_string_value(e)))
            NO("%s: required \"%s\" missing", at, json_string_value(e));
        const char *k;
        json_object_foreach((json_t *)v, k, e) {
            const json_t *ps = props ? json_object_get(props, k) : NULL;
            if (!ps && json_is_false(json_object_get(s, "additionalProperties"))) NO("%s: extra key \"%s\"", at, k);
            if (ps && !validate(root, ps, e, k, why, n)) return 0;
        }
    }
    return 1;
#undef NO
}

/* The validator itself rejects what it must (so a pass means something). */
static void validator_rejects(void) {
    json_t *s = json_loads(schema_text, 0, NULL);
    const char *bad[] = {
        "{\"book\":\"Genesis\",\"chapter\":1,\"verse\":{\"text\":\"x\",\"ref\":\"Ge 1:1\"},\"tags\":[\"a\"],\"read\":\"2023-02-29\"}",
        "{\"book\":\"Luke\",\"chapter\":1,\"verse\":{\"text\":\"x\",\"ref\":\"Ge 1:1\"},\"tags\":[\"a\"],\"read\":\"2023-02-28\"}",
        "{\"book\":\"Genesis\",\"chapter\":1.5,\"verse\":{\"text\":\"x\",\"ref\":\"Ge 1:1\"},\"tags\":[\"a\"],\"read\":\"2023-02-28\"}",
        "{\"book\":\"Genesis\",\"chapter\":1,\"verse\":{\"text\":\"x\",\"ref\":\"ge 1:1\"},\"tags\":[\"a\"],\"read\":\"2023-02-28\"}",
        "{\"book\":\"Genesis\",\"chapter\":1,\"verse\":{\"text\":\"x\",\"ref\":\"Ge 1:1\"},\"tags\":[],\"read\":\"2023-02-28\"}",
        "{\"book\":\"Genesis\",\"chapter\":1,\"verse\":{\"text\":\"x\",\"ref\":\"Ge 1:1\"},\"tags\":[\"a\"],\"read\":\"2023-02-28\",\"x\":1}",
        "{\"book\":\"Genesis\",\"chapter\":1,\"verse\":{\"text\":\"x\",\"ref\":\"Ge 1:1\"},\"tags\":[\"a\"],\"read\":\"2023-02-28\",\"note\":\"s\"}",
    };
    const char *good = "{\"book\":\"Genesis\",\"chapter\":1,\"verse\":{\"text\":\"x\",\"ref\":\"Ge 1:1\"},\"tags\":[\"a\"],"
                       "\"read\":\"2024-02-29\",\"note\":true,\"id\":\"0f8fad5b-d9cb-469f-a165-70867728950e\"}";
    char why[256];
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
        json_t *v = json_loads(bad[i], 0, NULL);
        CHECK(v && !validate(s, s, v, "", why, sizeof why), "the validator accepts bad case %zu", i);
        json_decref(v);
    }
    json_t *v = json_loads(good, 0, NULL);
    CHECK(v && validate(s, s, v, "", why, sizeof why), "the validator rejects the good case: %s", why);
    json_decref(v);
    json_decref(s);
}

/* ---------------------------------------------------------------- generation */

typedef struct {
    celer_session *s;
    celer_sampler *smp;
    celer_textstream *ts;
    celer_grammar_state *st;
    char text[16384];
    size_t len;
    int finish;
    char err[256];
} seqrun;

static void schema_20_seeds(void) {
    celer_model *m = celer_model_open(DIR, 0);
    celer_tokenizer *tk = celer_tokenizer_open(DIR);
    CHECK(m && tk, "open %s: %s", DIR, celer_last_error());
    if (!m || !tk) {
        celer_model_free(m);
        celer_tokenizer_free(tk);
        return;
    }
    char *gbnf = celer_json_schema_text_to_gbnf(schema_text, (size_t)-1, "root");
    CHECK(gbnf != NULL, "schema: %s", celer_last_error());
    celer_grammar *g = gbnf ? celer_grammar_compile(gbnf, (size_t)-1) : NULL;
    CHECK(g != NULL, "compile: %s", celer_last_error());
    free(gbnf);
    celer_grammar_vocab *v = celer_grammar_vocab_new(tk);
    celer_model_info info;
    celer_model_get_info(m, &info);
    int32_t *prompt;
    int np = celer_tokenize(tk, "In the beginning", 16, 1, &prompt);
    celer_gen *gen = celer_gen_new(m, 0);
    static seqrun q[N_SEQ];
    memset(q, 0, sizeof q);
    for (int i = 0; i < N_SEQ && g && v; i++) {
        celer_sampler_params sp;
        celer_sampler_params_default(&sp);
        sp.temperature = 1.0f;
        sp.seed = 1000 + (uint64_t)i;
        q[i].s = celer_session_new(m, 2048, 64);
        q[i].smp = celer_sampler_new(&sp, info.vocab_size);
        q[i].ts = celer_textstream_new(tk, 1, NULL, 0);
        q[i].st = celer_grammar_state_new(g, v, NULL, 0);
        celer_gen_seq gs = {.session = q[i].s, .sampler = q[i].smp, .prompt = prompt, .n_prompt = np,
                            .max_tokens = 1800, .stop_token = info.eos_token, .text = q[i].ts, .user = &q[i],
                            .grammar = q[i].st};
        CHECK(celer_gen_add(gen, &gs) >= 0, "add %d: %s", i, celer_last_error());
    }
    const celer_gen_event *ev;
    int n;
    while ((n = celer_gen_step(gen, &ev)) > 0)
        for (int k = 0; k < n; k++) {
            seqrun *r = ev[k].user;
            if (r->len + ev[k].text_len < sizeof r->text) {
                memcpy(r->text + r->len, ev[k].text, ev[k].text_len);
                r->len += ev[k].text_len;
            }
            if (ev[k].finish) r->finish = ev[k].finish;
            if (ev[k].finish == CELER_FINISH_ERROR) snprintf(r->err, sizeof r->err, "%s", ev[k].error);
        }
    json_t *schema = json_loads(schema_text, 0, NULL);
    int valid = 0;
    for (int i = 0; i < N_SEQ && g && v; i++) {
        q[i].text[q[i].len] = 0;
        CHECK(q[i].finish == CELER_FINISH_STOP_TOKEN, "seed %d ended with %s (%s): %s", i, celer_finish_name(q[i].finish),
              q[i].err, q[i].text);
        json_error_t je;
        json_t *val = json_loads(q[i].text, 0, &je);
        CHECK(val != NULL, "seed %d: not JSON (%s): %s", i, je.text, q[i].text);
        char why[256] = "";
        if (val) {
            int ok = validate(schema, schema, val, "/", why, sizeof why);
            CHECK(ok, "seed %d: %s: %s", i, why, q[i].text);
            valid += ok;
        }
        json_decref(val);
    }
    printf("  %d of %d answers valid; seed 0: %s\n", valid, N_SEQ, q[0].text);
    json_decref(schema);
    for (int i = 0; i < N_SEQ; i++) {
        celer_grammar_state_free(q[i].st);
        celer_textstream_free(q[i].ts);
        celer_sampler_free(q[i].smp);
        celer_session_free(q[i].s);
    }
    celer_gen_free(gen);
    free(prompt);
    celer_grammar_vocab_free(v);
    celer_grammar_free(g);
    celer_tokenizer_free(tk);
    celer_model_free(m);
}

/* One greedy sequence under state st; returns the finish, the text in text. */
static int run_one(celer_model *m, celer_tokenizer *tk, celer_grammar_state *st, char *text, size_t cap, char *err,
                   size_t errn) {
    celer_model_info info;
    celer_model_get_info(m, &info);
    int32_t *prompt;
    int np = celer_tokenize(tk, "In the beginning God", 20, 1, &prompt);
    celer_session *s = celer_session_new(m, 512, 64);
    celer_textstream *ts = celer_textstream_new(tk, 1, NULL, 0);
    celer_gen *gen = celer_gen_new(m, 0);
    celer_gen_seq gs = {.session = s, .prompt = prompt, .n_prompt = np, .max_tokens = 40,
                        .stop_token = info.eos_token, .text = ts, .grammar = st};
    int f = CELER_FINISH_NONE;
    size_t len = 0;
    text[0] = err[0] = 0;
    if (celer_gen_add(gen, &gs) >= 0) {
        const celer_gen_event *ev;
        while (!f && celer_gen_step(gen, &ev) > 0) {
            if (len + ev->text_len < cap) memcpy(text + len, ev->text, ev->text_len), len += ev->text_len;
            text[len] = 0;
            f = ev->finish;
            if (f == CELER_FINISH_ERROR) snprintf(err, errn, "%s", ev->error);
        }
    }
    celer_gen_free(gen);
    celer_textstream_free(ts);
    celer_session_free(s);
    free(prompt);
    return f;
}

/* A vocabulary of two tokens ("a", "b"): a grammar that wants "c" is a dead end at
 * once; "ab" then the end is forced, token by token. */
static void dead_end(void) {
    char dir[] = "/tmp/celer-grammar-XXXXXX";
    CHECK(mkdtemp(dir) != NULL, "mkdtemp");
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"version\":\"1.0\",\"added_tokens\":[],\"normalizer\":null,\"pre_tokenizer\":null,\"post_processor\":null,"
          "\"decoder\":null,\"model\":{\"type\":\"BPE\",\"vocab\":{\"a\":100,\"b\":101},\"merges\":[]}}",
          f);
    fclose(f);
    celer_tokenizer *tiny = celer_tokenizer_open(dir);
    CHECK(tiny != NULL, "tiny tokenizer: %s", celer_last_error());
    celer_model *m = celer_model_open(DIR, 0);
    celer_tokenizer *tk = celer_tokenizer_open(DIR);
    celer_grammar_vocab *v = tiny ? celer_grammar_vocab_new(tiny) : NULL;
    char text[4096], err[256];
    if (m && tk && v) {
        celer_grammar *g = celer_grammar_compile("root ::= \"c\"", (size_t)-1);
        celer_grammar_state *st = celer_grammar_state_new(g, v, NULL, 0);
        int fin = run_one(m, tk, st, text, sizeof text, err, sizeof err);
        CHECK(fin == CELER_FINISH_ERROR, "a dead end should end with an error, got %s", celer_finish_name(fin));
        CHECK(strstr(err, "dead end"), "message \"%s\" should mention a dead end", err);
        celer_grammar_state_free(st);
        celer_grammar_free(g);
        /* forced: token 100 ("a" in the tiny vocabulary), then 101, then complete (no stop token in it) */
        g = celer_grammar_compile("root ::= \"ab\"", (size_t)-1);
        st = celer_grammar_state_new(g, v, NULL, 0);
        fin = run_one(m, tk, st, text, sizeof text, err, sizeof err);
        CHECK(fin == CELER_FINISH_STOP_TOKEN, "a complete grammar should stop, got %s (%s)", celer_finish_name(fin), err);
        CHECK(celer_grammar_state_accepting(st), "the state accepts at the end");
        celer_grammar_state_free(st);
        celer_grammar_free(g);
    }
    /* lazy: the model's greedy text holds "the"; a grammar that refuses what follows the trigger */
    celer_grammar_vocab *rv = tk ? celer_grammar_vocab_new(tk) : NULL;
    if (m && tk && rv) {
        celer_grammar *g = celer_grammar_compile("root ::= \"zzz\"", (size_t)-1);
        const char *trig[] = {"the"};
        celer_grammar_state *st = celer_grammar_state_new(g, rv, trig, 1);
        int fin = run_one(m, tk, st, text, sizeof text, err, sizeof err);
        CHECK(fin == CELER_FINISH_ERROR, "a refused trigger should end with an error, got %s: %s",
              celer_finish_name(fin), text);
        CHECK(strstr(err, "trigger"), "message \"%s\" should mention the trigger", err);
        celer_grammar_state_free(st);
        /* and one it allows: from "the" on, lowercase letters and spaces, 10 bytes at most */
        celer_grammar_free(g);
        g = celer_grammar_compile("root ::= \"the\" [a-z ]{0,7}", (size_t)-1);
        st = celer_grammar_state_new(g, rv, trig, 1);
        fin = run_one(m, tk, st, text, sizeof text, err, sizeof err);
        const char *at = strstr(text, "the");
        CHECK(fin == CELER_FINISH_STOP_TOKEN && at && strlen(at) <= 10 && strspn(at, "abcdefghijklmnopqrstuvwxyz ") == strlen(at),
              "lazy grammar: %s after the trigger: \"%s\" (%s)", celer_finish_name(fin), text, err);
        celer_grammar_state_free(st);
        celer_grammar_free(g);
    }
    celer_grammar_vocab_free(rv);
    celer_grammar_vocab_free(v);
    celer_tokenizer_free(tk);
    celer_tokenizer_free(tiny);
    celer_model_free(m);
    unlink(path);
    rmdir(dir);
}

int main(void) {
    RUN(validator_rejects);
    RUN(dead_end);
    RUN(schema_20_seeds);
    return harness_done();
}
