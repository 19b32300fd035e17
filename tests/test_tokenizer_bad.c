/* tests/test_tokenizer_bad.c: bad input to the tokenizer library: corrupt and
 * unsupported tokenizer.json files (errors name the file, position or component),
 * invalid UTF-8 text (replaced as Python's errors="replace" does, never a crash),
 * empty and 1 MB inputs, streaming decode of split UTF-8 sequences, NULL frees. */
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "celer.h"
#include "celer_tokenizer.h"
#include "harness.h"
#include "tokenizer/tok.h"
#include <utf8proc.h>

static char tmpdir[256];

/* A minimal byte-level BPE tokenizer.json with `patch` spliced in after "version". */
static const char *mini_model =
    "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"Ġ\": 3, \"c\": 4}, \"merges\": [\"a b\"]}";

static celer_tokenizer *open_json(const char *name, const char *json) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "wb");
    if (!f) return NULL;
    fputs(json, f);
    fclose(f);
    return celer_tokenizer_open(dir);
}

static void expect_error(const char *name, const char *json, const char *want1, const char *want2) {
    celer_tokenizer *t = open_json(name, json);
    CHECK(t == NULL, "%s: opened a bad tokenizer.json", name);
    if (!t) {
        CHECK_STR_HAS(celer_last_error(), want1);
        if (want2) CHECK_STR_HAS(celer_last_error(), want2);
    }
    celer_tokenizer_free(t);
}

static void corrupt_files(void) {
    char buf[2048];
    expect_error("truncated", "{\"version\": \"1.0\", \"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0,", "tokenizer.json",
                 "line 1, column");
    expect_error("not_object", "[1, 2]", "not a JSON object", NULL);
    expect_error("garbage", "{\"version\": \"1.0\"\n  oops}", "line 2, column 3", NULL);
    snprintf(buf, sizeof buf, "{\"version\": \"1.0\", \"frobnicator\": {}, %s}", mini_model);
    expect_error("unknown_key", buf, "unknown top-level key \"frobnicator\"", NULL);
    expect_error("no_model", "{\"version\": \"1.0\"}", "no \"model\"", NULL);
    expect_error("vocab_type", "{\"model\": {\"type\": \"BPE\", \"vocab\": [1], \"merges\": []}}", "model.vocab", NULL);
    expect_error("bad_merge", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [\"a z\"]}}",
                 "model.merges[0]", "\"z\" is not in the vocab");
    expect_error("bad_merge_result", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1}, \"merges\": [[\"a\", \"b\"]]}}",
                 "merged token \"ab\"", NULL);
    expect_error("bad_id", "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": \"zero\"}, \"merges\": []}}", "not a token id", NULL);
    expect_error("bad_regex", "{\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"(unclosed\"}, \"behavior\": \"Isolated\"}, \"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}",
                 "does not compile", NULL);
    expect_error("bad_added", "{\"added_tokens\": [{\"content\": 5}], \"model\": {\"type\": \"BPE\", \"vocab\": {}, \"merges\": []}}",
                 "added_tokens[0]", NULL);
    /* ids up to 2e9 parse, but a lone far id must not size the id tables (a fuzzer's
     * out-of-memory find); a vocabulary with a small gap still opens */
    expect_error("far_id", "{\"added_tokens\": [{\"id\": 444444444, \"content\": \"<x>\", \"special\": true}], "
                 "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}",
                 "token id 444444444 is far past the 2 tokens", "at most 65539");
    celer_tokenizer *g = open_json("small_gap", "{\"added_tokens\": [{\"id\": 1000, \"content\": \"<x>\", \"special\": true}], "
                                   "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0}, \"merges\": []}}");
    CHECK(g != NULL, "a tokenizer with an id gap of 1,000: %s", celer_last_error());
    celer_tokenizer_free(g);
    celer_tokenizer *t = celer_tokenizer_open("/nonexistent/celer/tok");
    CHECK(!t, "opened a missing directory");
    CHECK_STR_HAS(celer_last_error(), "/nonexistent/celer/tok");
}

static void unsupported_components(void) {
    char buf[2048];
    static const struct { const char *name, *part, *want; } cases[] = {
        {"unigram", NULL, "unsupported model type \"Unigram\""},
        {"precompiled", "\"normalizer\": {\"type\": \"Precompiled\", \"precompiled_charsmap\": \"\"}", "unsupported normalizer type \"Precompiled\""},
        {"bert_pre", "\"pre_tokenizer\": {\"type\": \"BertPreTokenizer\"}", "unsupported pre_tokenizer type \"BertPreTokenizer\""},
        {"wordpiece_dec", "\"decoder\": {\"type\": \"WordPiece\", \"prefix\": \"##\"}", "unsupported decoder type \"WordPiece\""},
        {"post", "\"post_processor\": {\"type\": \"Frobnicate\"}", "unsupported post_processor type \"Frobnicate\""},
        {"behavior", "\"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"String\": \" \"}, \"behavior\": \"Sideways\"}", "unsupported split behavior \"Sideways\""},
        {"dropout", NULL, "dropout"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        if (!strcmp(cases[i].name, "unigram"))
            snprintf(buf, sizeof buf, "{\"model\": {\"type\": \"Unigram\", \"vocab\": [[\"a\", 0.0]]}}");
        else if (!strcmp(cases[i].name, "dropout"))
            snprintf(buf, sizeof buf, "{\"model\": {\"type\": \"BPE\", \"dropout\": 0.1, \"vocab\": {}, \"merges\": []}}");
        else snprintf(buf, sizeof buf, "{%s, %s}", cases[i].part, mini_model);
        expect_error(cases[i].name, buf, cases[i].want, NULL);
    }
}

static celer_tokenizer *fixture(const char *name) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fixtures/tokenizers/%s", name);
    celer_tokenizer *t = celer_tokenizer_open(dir);
    CHECK(t != NULL, "%s: %s", name, celer_last_error());
    return t;
}

static int same_ids(const celer_tokenizer *t, const char *a, size_t an, const char *b, size_t bn) {
    int32_t *x, *y;
    int n = celer_tokenize(t, a, an, 0, &x), m = celer_tokenize(t, b, bn, 0, &y);
    int same = n >= 0 && n == m && !memcmp(x, y, (size_t)n * sizeof *x);
    free(x);
    free(y);
    return same;
}

static void invalid_utf8(void) {
    const char *names[] = {"qwen3", "gemma3"};
    for (int k = 0; k < 2; k++) {
        celer_tokenizer *t = fixture(names[k]);
        if (!t) continue;
        /* each maximal invalid subsequence becomes one U+FFFD */
        static const struct { const char *bad, *good; } c[] = {
            {"a\xff" "b", "a\xef\xbf\xbd" "b"},
            {"\xe2\x82" "x", "\xef\xbf\xbd" "x"},                  /* truncated 3-byte sequence */
            {"\xed\xa0\x80", "\xef\xbf\xbd\xef\xbf\xbd\xef\xbf\xbd"}, /* a surrogate: 3 bytes, 3 replacements */
            {"\xf0\x9f\x99", "\xef\xbf\xbd"},                      /* truncated emoji at the end */
            {"\xc0\xaf", "\xef\xbf\xbd\xef\xbf\xbd"},               /* overlong */
        };
        for (size_t i = 0; i < sizeof c / sizeof *c; i++)
            CHECK(same_ids(t, c[i].bad, strlen(c[i].bad), c[i].good, strlen(c[i].good)), "%s: invalid UTF-8 case %zu", names[k], i);
        /* a NUL byte inside the text is text */
        int32_t *ids;
        int n = celer_tokenize(t, "a\0b", 3, 0, &ids);
        CHECK(n >= 2, "%s: NUL inside text gave %d tokens", names[k], n);
        free(ids);
        celer_tokenizer_free(t);
    }
}

static void empty_and_big(void) {
    celer_tokenizer *t = fixture("llama3");
    if (!t) return;
    int32_t *ids = NULL;
    int n = celer_tokenize(t, "", 0, 0, &ids);
    CHECK(n == 0 && ids != NULL, "empty string: %d tokens", n);
    free(ids);
    n = celer_tokenize(t, NULL, 0, 0, &ids);
    CHECK(n == 0, "NULL, 0: %d tokens", n);
    free(ids);
    char *text = celer_detokenize(t, NULL, 0, 0, NULL);
    CHECK(text && !*text, "decode of nothing");
    free(text);
    /* 1 MB of mixed text round-trips */
    size_t big = 1 << 20, k = 0;
    char *s = malloc(big + 64);
    static const char *const parts[] = {"The quick brown fox ", "def f(x):\n    return x ** 2\n", "日本語のテキスト。",
                                        "    \t\n", "1234567 ", "naïve café ", "🙂 "};
    for (int i = 0; k < big; i++) {
        const char *p = parts[(i * 7 + i / 3) % 7];
        size_t l = strlen(p);
        memcpy(s + k, p, l);
        k += l;
    }
    n = celer_tokenize(t, s, k, 0, &ids);
    CHECK(n > 100000, "1 MB: %d tokens", n);
    size_t dl = 0;
    text = n > 0 ? celer_detokenize(t, ids, (size_t)n, 0, &dl) : NULL;
    CHECK(text && dl == k && !memcmp(text, s, k), "1 MB round trip differs");
    free(text);
    free(ids);
    /* unknown ids are skipped on decode, as tokenizers does */
    int32_t odd[] = {9906, -5, 1 << 30, 0};
    text = celer_detokenize(t, odd, 4, 0, NULL);
    CHECK(text && !strcmp(text, "Hello!"), "unknown ids: got %s", text ? text : "(null)");
    free(text);
    free(s);
    celer_tokenizer_free(t);
}

static void stream_split_sequences(void) {
    /* gemma3: "é" as two byte-fallback tokens; the first put returns nothing */
    celer_tokenizer *t = fixture("gemma3");
    if (t) {
        int32_t c3 = celer_tokenizer_token_id(t, "<0xC3>"), a9 = celer_tokenizer_token_id(t, "<0xA9>");
        CHECK(c3 >= 0 && a9 >= 0, "gemma3 has byte tokens");
        celer_detok *d = celer_detok_new(t, 0);
        size_t n;
        const char *p = celer_detok_put(d, c3, &n);
        CHECK(p && n == 0, "half a character was emitted (%zu bytes)", n);
        p = celer_detok_put(d, a9, &n);
        CHECK(p && n == 2 && !memcmp(p, "\xc3\xa9", 2), "the completed character was not emitted");
        celer_detok_free(d);
        /* a lone continuation byte is held back, then comes out as U+FFFD at flush */
        d = celer_detok_new(t, 0);
        p = celer_detok_put(d, a9, &n);
        CHECK(p && n == 0, "a lone byte was emitted early");
        p = celer_detok_flush(d, &n);
        CHECK(p && n == 3 && !memcmp(p, "\xef\xbf\xbd", 3), "flush did not give U+FFFD");
        celer_detok_free(d);
        celer_tokenizer_free(t);
    }
    /* llama3 byte-level: an emoji split over byte tokens */
    t = fixture("llama3");
    if (t) {
        const char *emoji = "\xf0\x9f\x99\x82";
        /* the byte-level tokens of F0 9F 99 82 */
        static const char *const names[] = {"ð", "Ł", "Ļ", "Ĥ"};
        int32_t bytes[4];
        for (int i = 0; i < 4; i++) {
            bytes[i] = celer_tokenizer_token_id(t, names[i]);
            CHECK(bytes[i] >= 0, "no byte token %s", names[i]);
        }
        celer_detok *d = celer_detok_new(t, 0);
        size_t total = 0, n;
        for (int i = 0; i < 4; i++) {
            const char *p = celer_detok_put(d, bytes[i], &n);
            CHECK(p != NULL, "put failed");
            if (i < 3) CHECK(n == 0, "byte %d emitted %zu bytes early", i, n);
            else CHECK(n == 4 && !memcmp(p, emoji, 4), "emoji not emitted whole");
            total += n;
        }
        CHECK(total == 4, "emitted %zu bytes", total);
        celer_detok_free(d);
        celer_tokenizer_free(t);
    }
}

/* The normalizers work run by run between ASCII characters (a speed-up); that must
 * give what normalizing the whole string at once gives, combining marks, Hangul jamo
 * and compatibility characters included. */
static void normalize_runs(void) {
    static const uint32_t pool[] = {'a', 'e', 'A', '1', ' ', 0x301, 0x300, 0x308, 0x327, 0x323, 0x1100, 0x1161, 0x11A8,
                                    0xAC00, 0xE9, 0xC5, 0xFB01, 0x2460, 0x3099, 0x304B, 0x0B47, 0x0B3E, 0x1E0A, 0x212B,
                                    0xFF21, 0xB2, 0x345, 0x3B1, 0x313};
    static const char *const forms[] = {"NFC", "NFD", "NFKC", "NFKD"};
    const int np = (int)(sizeof pool / sizeof *pool);
    uint64_t r = 12345;
    int bad = 0;
    for (int f = 0; f < 4; f++) {
        char js[64];
        snprintf(js, sizeof js, "{\"type\": \"%s\"}", forms[f]);
        tj_doc *d = tj_parse(js, strlen(js), "test");
        tk_norm *n = d ? tk_norm_parse(tj_root(d), "test") : NULL;
        CHECK(n != NULL, "%s: %s", forms[f], celer_last_error());
        utf8proc_option_t opt = f == 0 ? UTF8PROC_COMPOSE : f == 1 ? UTF8PROC_DECOMPOSE
                              : f == 2 ? UTF8PROC_COMPOSE | UTF8PROC_COMPAT : UTF8PROC_DECOMPOSE | UTF8PROC_COMPAT;
        for (int it = 0; n && it < 20000; it++) {
            char s[128];
            size_t k = 0;
            r = r * 6364136223846793005ull + 1442695040888963407ull;
            int len = 1 + (int)((r >> 33) % 12);
            for (int j = 0; j < len; j++) {
                r = r * 6364136223846793005ull + 1442695040888963407ull;
                k += (size_t)utf8_enc(pool[(r >> 33) % (uint64_t)np], s + k);
            }
            tk_buf out = {0};
            utf8proc_uint8_t *w = NULL;
            utf8proc_ssize_t m = utf8proc_map((const utf8proc_uint8_t *)s, (utf8proc_ssize_t)k, &w, opt | UTF8PROC_STABLE);
            if (tk_norm_apply(n, s, k, &out) || m < 0 || (size_t)m != out.n || memcmp(w, out.p, (size_t)m)) bad++;
            free(w);
            tkb_free(&out);
        }
        tk_norm_free(n);
        tj_free(d);
    }
    CHECK(bad == 0, "%d strings normalize differently run by run", bad);
}

/* One tokenizer, several threads encoding and rendering at once: the same results as
 * one thread (the tokenizer is read-only after open). */
typedef struct {
    const celer_tokenizer *t;
    const char *text;
    int32_t *ids;
    int n;
    char *chat;
} thread_job;

static void *thread_run(void *p) {
    thread_job *j = p;
    for (int r = 0; r < 20; r++) {
        free(j->ids);
        j->n = celer_tokenize(j->t, j->text, strlen(j->text), 1, &j->ids);
        free(j->chat);
        j->chat = celer_chat_render(j->t, "[{\"role\": \"user\", \"content\": \"hi\"}]", NULL, 1);
    }
    return NULL;
}

static void threads(void) {
    celer_tokenizer *t = fixture("qwen3");
    if (!t) return;
    const char *text = "Threads share one tokenizer: 日本語, émoji 🙂, code `x = f(1)`, numbers 12345.";
    int32_t *want;
    int nw = celer_tokenize(t, text, strlen(text), 1, &want);
    char *want_chat = celer_chat_render(t, "[{\"role\": \"user\", \"content\": \"hi\"}]", NULL, 1);
    thread_job jobs[4];
    pthread_t th[4];
    for (int i = 0; i < 4; i++) {
        jobs[i] = (thread_job){t, text, NULL, 0, NULL};
        pthread_create(&th[i], NULL, thread_run, &jobs[i]);
    }
    for (int i = 0; i < 4; i++) {
        pthread_join(th[i], NULL);
        CHECK(jobs[i].n == nw && !memcmp(jobs[i].ids, want, (size_t)nw * sizeof *want), "thread %d: different ids", i);
        CHECK(jobs[i].chat && want_chat && !strcmp(jobs[i].chat, want_chat), "thread %d: different prompt", i);
        free(jobs[i].ids);
        free(jobs[i].chat);
    }
    free(want);
    free(want_chat);
    celer_tokenizer_free(t);
}

static void null_frees(void) {
    celer_tokenizer_free(NULL);
    celer_detok_free(NULL);
    CHECK(1, "unreachable");
}

static void template_errors(void) {
    celer_tokenizer *t = fixture("qwen3");
    if (!t) return;
    char *s = celer_chat_render(t, "not json", NULL, 1);
    CHECK(!s, "bad messages rendered");
    CHECK_STR_HAS(celer_last_error(), "messages");
    s = celer_chat_render(t, "[{\"role\": \"user\", \"content\": \"hi\"}]", "{\"x\": 1}", 1);
    CHECK(!s, "tools object rendered");
    CHECK_STR_HAS(celer_last_error(), "tools");
    /* tools given: Qwen3's template lists them */
    s = celer_chat_render(t, "[{\"role\": \"user\", \"content\": \"hi\"}]",
                          "[{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}]", 1);
    CHECK(s && strstr(s, "<tools>\n{\"type\": \"function\", \"function\": {\"name\": \"f\", \"parameters\": {}}}\n</tools>"),
          "tools rendered as %s", s ? s : celer_last_error());
    free(s);
    celer_tokenizer_free(t);
    t = fixture("gemma3");
    if (!t) return;
    /* Gemma's template raises on non-alternating roles: its own message comes back */
    s = celer_chat_render(t, "[{\"role\": \"user\", \"content\": \"a\"}, {\"role\": \"user\", \"content\": \"b\"}]", NULL, 1);
    CHECK(!s, "non-alternating roles rendered");
    CHECK_STR_HAS(celer_last_error(), "Conversation roles must alternate user/assistant/user/assistant/...");
    CHECK_STR_HAS(celer_last_error(), "tokenizer_config.json:");
    celer_tokenizer_free(t);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/celer-tokbad-XXXXXX");
    if (!mkdtemp(tmpdir)) { printf("cannot make a temporary directory\n"); return 1; }
    RUN(corrupt_files);
    RUN(unsupported_components);
    RUN(invalid_utf8);
    RUN(empty_and_big);
    RUN(stream_split_sequences);
    RUN(normalize_runs);
    RUN(threads);
    RUN(null_frees);
    RUN(template_errors);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) printf("could not remove %s\n", tmpdir);
    return harness_done();
}
