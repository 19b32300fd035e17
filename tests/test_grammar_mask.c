/* tests/test_grammar_mask.c: token masks of the grammar state against brute force
 * over the whole vocabulary of real tokenizers (Qwen3, Llama 3, Gemma 3, gpt-oss in
 * tests/fixtures/tokenizers): the reference takes each token's bytes
 * (celer_tokenizer_token_bytes) and runs them on a separate automaton from the
 * state the text so far leaves; the mask must allow exactly the tokens that
 * survive. Also: special tokens only through literals and lazy triggers. What a mask
 * costs is bench/bench_grammar.c's (docs/benchmarks/grammar.md). */
#include <stdlib.h>
#include <string.h>

#include "celer.h"
#include "grammar/grammar.h"
#include "harness.h"

static const char *json_gbnf =
    "root   ::= object\n"
    "value  ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
    "object ::= \"{\" ws ( string \":\" ws value (\",\" ws string \":\" ws value)* )? \"}\" ws\n"
    "array  ::= \"[\" ws ( value (\",\" ws value)* )? \"]\" ws\n"
    "string ::= \"\\\"\" ( [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4}) )* \"\\\"\" ws\n"
    "number ::= \"-\"? ([0-9] | [1-9] [0-9]{0,15}) (\".\" [0-9]+)? ([eE] [-+]? [0-9]+)? ws\n"
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,20}\n";

typedef struct {
    celer_tokenizer *t;
    char **bytes;   /* [V] every token's bytes, read once */
    size_t *len;
    int V;
} vocab_ref;

static int ref_open(vocab_ref *r, const char *name) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fixtures/tokenizers/%s", name);
    memset(r, 0, sizeof *r);
    if (!(r->t = celer_tokenizer_open(dir))) return -1;
    r->V = celer_tokenizer_n_vocab(r->t);
    r->bytes = calloc((size_t)r->V, sizeof *r->bytes);
    r->len = calloc((size_t)r->V, sizeof *r->len);
    for (int i = 0; i < r->V; i++) r->bytes[i] = celer_tokenizer_token_bytes(r->t, i, &r->len[i]);
    return 0;
}

static void ref_close(vocab_ref *r) {
    for (int i = 0; r->bytes && i < r->V; i++) free(r->bytes[i]);
    free(r->bytes);
    free(r->len);
    celer_tokenizer_free(r->t);
}

/* Compares st's mask with brute force at the state text[n] leaves. Returns mismatches. */
static int compare(const vocab_ref *r, const celer_grammar *g, celer_grammar_state *st, const char *text, size_t n,
                   int *n_allowed) {
    const uint32_t *mask = celer_grammar_state_mask(st);
    CHECK(mask != NULL, "mask failed: %s", celer_last_error());
    if (!mask) return 1;
    gm *m = gm_new(g);
    uint32_t s = gm_start(m);
    for (size_t i = 0; i < n; i++) s = gm_step(m, s, (unsigned char)text[i], 0);
    int bad = 0;
    *n_allowed = 0;
    for (int id = 0; id < r->V; id++) {
        int special = celer_tokenizer_is_special(r->t, id), want = r->len[id] > 0;
        uint32_t x = s;
        for (size_t k = 0; k < r->len[id] && x != GM_DEAD; k++) x = gm_step(m, x, (unsigned char)r->bytes[id][k], special);
        want = want && x != GM_DEAD;
        int got = (mask[id >> 5] >> (id & 31)) & 1;
        *n_allowed += got;
        if (want != got && bad++ < 5)
            printf("  token %d (%zu bytes \"%.*s\"%s): mask %d, brute force %d\n", id, r->len[id], (int)r->len[id],
                   r->bytes[id], special ? ", special" : "", got, want);
    }
    gm_free(m);
    return bad;
}

/* Walks text token by token (its own encoding) and checks the mask at every step. */
static void check_text(const vocab_ref *r, const celer_grammar_vocab *v, const char *gbnf, const char *text,
                       const char *name) {
    celer_grammar *g = celer_grammar_compile(gbnf, (size_t)-1);
    CHECK(g != NULL, "%s: compile: %s", name, celer_last_error());
    if (!g) return;
    celer_grammar_state *st = celer_grammar_state_new(g, v, NULL, 0);
    int32_t *ids;
    int n = celer_tokenize(r->t, text, strlen(text), 0, &ids);
    CHECK(n > 0, "%s: tokenize", name);
    char done[4096];
    size_t dn = 0;
    for (int i = 0; i <= n; i++) {
        int allowed;
        int bad = compare(r, g, st, done, dn, &allowed);
        CHECK(bad == 0, "%s: %d tokens differ from brute force after %d tokens", name, bad, i);
        CHECK(allowed > 0, "%s: nothing allowed after %d tokens", name, i);
        if (i == n) break;
        int allowed_here = (celer_grammar_state_mask(st)[ids[i] >> 5] >> (ids[i] & 31)) & 1;
        CHECK(allowed_here, "%s: the text's own token %d is not allowed", name, ids[i]);
        CHECK(celer_grammar_state_accept_token(st, ids[i]) == 0, "%s: accept %d: %s", name, ids[i], celer_last_error());
        memcpy(done + dn, r->bytes[ids[i]], r->len[ids[i]]);
        dn += r->len[ids[i]];
    }
    CHECK(celer_grammar_state_accepting(st), "%s: the whole text should be accepted", name);
    free(ids);
    celer_grammar_state_free(st);
    celer_grammar_free(g);
}

static void one_tokenizer(const char *name) {
    vocab_ref r;
    CHECK(ref_open(&r, name) == 0, "%s: %s", name, celer_last_error());
    if (!r.t) return;
    celer_grammar_vocab *v = celer_grammar_vocab_new(r.t);
    CHECK(v && celer_grammar_vocab_size(v) == r.V, "%s: vocab index", name);
    if (!v) {
        ref_close(&r);
        return;
    }
    check_text(&r, v, json_gbnf, "{\"name\": \"Zo\xC3\xAB \xE4\xB8\xAD\", \"n\": [1, -2.5e3, true, null], \"k\": {}}",
               name);
    char *sg = celer_json_schema_text_to_gbnf(
        "{\"type\":\"object\",\"properties\":{\"id\":{\"type\":\"string\",\"format\":\"uuid\"},"
        "\"kind\":{\"enum\":[\"book\",\"chapter\"]},\"verses\":{\"type\":\"array\",\"items\":{\"type\":\"integer\"},"
        "\"maxItems\":3}},\"required\":[\"id\",\"kind\"]}",
        (size_t)-1, "root");
    CHECK(sg != NULL, "schema: %s", celer_last_error());
    if (sg) check_text(&r, v, sg, "{\"id\": \"0f8fad5b-d9cb-469f-a165-70867728950e\", \"kind\": \"book\", \"verses\": [3, 16]}", name);
    free(sg);

    celer_grammar_vocab_free(v);
    ref_close(&r);
}

static void qwen3(void) { one_tokenizer("qwen3"); }
static void llama3(void) { one_tokenizer("llama3"); }
static void gemma3(void) { one_tokenizer("gemma3"); }
static void gptoss(void) { one_tokenizer("gptoss"); }

/* Special tokens: allowed where a literal spells them, never through a class. */
static void special_tokens(void) {
    vocab_ref r;
    if (ref_open(&r, "qwen3") != 0) {
        CHECK(0, "qwen3: %s", celer_last_error());
        return;
    }
    celer_grammar_vocab *v = celer_grammar_vocab_new(r.t);
    int32_t im_start = celer_tokenizer_token_id(r.t, "<|im_start|>");
    CHECK(im_start >= 0 && celer_tokenizer_is_special(r.t, im_start), "<|im_start|> is special in Qwen3");
    const char *grs[2] = {"root ::= \"<|im_start|>\" [a-z]+", "root ::= [<|a-z_>]+"};
    for (int k = 0; k < 2; k++) {
        celer_grammar *g = celer_grammar_compile(grs[k], (size_t)-1);
        celer_grammar_state *st = celer_grammar_state_new(g, v, NULL, 0);
        int allowed;
        CHECK(compare(&r, g, st, "", 0, &allowed) == 0, "%s: mask differs from brute force", grs[k]);
        const uint32_t *mask = celer_grammar_state_mask(st);
        int got = (mask[im_start >> 5] >> (im_start & 31)) & 1;
        CHECK(got == (k == 0), "%s: <|im_start|> allowed %d", grs[k], got);
        celer_grammar_state_free(st);
        celer_grammar_free(g);
    }
    celer_grammar_vocab_free(v);
    ref_close(&r);
}

/* Lazy: every token until the trigger, then the grammar from the trigger's start. */
static void lazy_trigger(void) {
    vocab_ref r;
    if (ref_open(&r, "llama3") != 0) {
        CHECK(0, "llama3: %s", celer_last_error());
        return;
    }
    celer_grammar_vocab *v = celer_grammar_vocab_new(r.t);
    celer_grammar *g = celer_grammar_compile("root ::= \"<call>\" [0-9]+ \"</call>\"", (size_t)-1);
    const char *trig[] = {"<call>"};
    celer_grammar_state *st = celer_grammar_state_new(g, v, trig, 1);
    CHECK(!celer_grammar_state_active(st), "lazy state starts inactive");
    const uint32_t *m = celer_grammar_state_mask(st);
    int all = 1;
    for (int i = 0; i < r.V; i++) all &= (m[i >> 5] >> (i & 31)) & 1;
    CHECK(all, "an inactive state allows every token");
    int32_t *ids;
    const char *text = "Sure, here: <call>12";
    int n = celer_tokenize(r.t, text, strlen(text), 0, &ids);
    for (int i = 0; i < n; i++) CHECK(celer_grammar_state_accept_token(st, ids[i]) == 0, "token %d", i);
    CHECK(celer_grammar_state_active(st), "active after the trigger");
    CHECK(!celer_grammar_state_accepting(st), "not complete yet");
    int allowed;
    CHECK(compare(&r, g, st, "<call>12", 8, &allowed) == 0, "mask after the trigger matches brute force");
    int32_t bad = celer_tokenizer_token_id(r.t, "abc");
    CHECK(bad >= 0 && celer_grammar_state_accept_token(st, bad) == -1, "a letter is refused after the trigger");
    CHECK_STR_HAS(celer_last_error(), "not allowed");
    CHECK(celer_grammar_state_accept_bytes(st, "3</call>", 8) == 0 && celer_grammar_state_accepting(st),
          "complete after </call>");
    free(ids);
    celer_grammar_state_free(st);
    /* a trigger followed by text the grammar refuses */
    st = celer_grammar_state_new(g, v, trig, 1);
    CHECK(celer_grammar_state_accept_bytes(st, "x <call>z", 9) == -1, "text after the trigger is checked");
    celer_grammar_state_free(st);
    celer_grammar_free(g);
    celer_grammar_vocab_free(v);
    ref_close(&r);
}

int main(void) {
    RUN(qwen3);
    RUN(llama3);
    RUN(gemma3);
    RUN(gptoss);
    RUN(special_tokens);
    RUN(lazy_trigger);
    return harness_done();
}
