/* tests/test_tokenizer_cli.c: `celer tokenize`, `detokenize` and `chat-template` as
 * outside scripts call them, checked against the Hugging Face reference (ref.json):
 * one JSON value per line in and out, exact chat prompts, and bad input (exit 1 with a
 * message, usage errors exit 2, never a crash). Runs $CELER_BIN (tests/run.sh sets it). */
#include <jansson.h>
#include <stdlib.h>
#include <sys/wait.h>
#include <unistd.h>

#include "harness.h"

static const char *bin(void) {
    const char *b = getenv("CELER_BIN");
    return b ? b : "build/celer";
}

static char tmpdir[256];

/* Runs cmd (a shell command line); captures stdout into *out (malloc'd) and returns
 * the exit status (-1 when it did not exit normally). */
static int run(const char *cmd, char **out, size_t *out_n) {
    FILE *p = popen(cmd, "r");
    if (!p) return -1;
    size_t n = 0, cap = 4096;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + n, 1, cap - n - 1, p)) > 0) {
        n += got;
        if (cap - n < 2) buf = realloc(buf, cap *= 2);
    }
    int st = pclose(p);
    if (buf) buf[n] = 0;
    if (out) *out = buf;
    else free(buf);
    if (out_n) *out_n = n;
    return WIFEXITED(st) ? WEXITSTATUS(st) : -1;
}

static void write_file(const char *path, const char *s, size_t n) {
    FILE *f = fopen(path, "wb");
    if (!f) return;
    fwrite(s, 1, n, f);
    fclose(f);
}

/* Compares output lines (JSON) with want[i] of each case. */
static int lines_match(const char *name, const char *what, const char *out, json_t *cases, const char *key) {
    size_t i;
    json_t *c;
    const char *p = out;
    int bad = 0;
    json_array_foreach(cases, i, c) {
        const char *nl = p ? strchr(p, '\n') : NULL;
        if (!nl) { CHECK(0, "%s %s: output ends after %zu lines", name, what, i); return 0; }
        json_error_t je;
        json_t *got = json_loadb(p, (size_t)(nl - p), JSON_DECODE_ANY, &je);
        json_t *want = json_object_get(c, key);
        if (!got || !json_equal(got, want)) {
            CHECK(0, "%s %s: line %zu: got %.*s", name, what, i + 1, (int)(nl - p > 200 ? 200 : nl - p), p);
            bad++;
        }
        json_decref(got);
        p = nl + 1;
    }
    CHECK(*p == 0, "%s %s: extra output: %.80s", name, what, p);
    return bad == 0;
}

static void check_tokenizer(const char *name, int full) {
    char dir[256], cmd[1024], path[512];
    snprintf(dir, sizeof dir, "tests/fixtures/tokenizers/%s", name);
    snprintf(path, sizeof path, "%s/ref.json", dir);
    json_t *r = json_load_file(path, 0, NULL);
    CHECK(r != NULL, "%s: cannot read ref.json", name);
    if (!r) return;
    json_t *cases = json_object_get(r, "cases");
    /* texts, one JSON string per line */
    char texts[512], idsf[512];
    snprintf(texts, sizeof texts, "%s/%s.texts", tmpdir, name);
    snprintf(idsf, sizeof idsf, "%s/%s.ids", tmpdir, name);
    FILE *f = fopen(texts, "wb"), *g = fopen(idsf, "wb");
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        char *s = json_dumps(json_object_get(c, "text"), JSON_ENCODE_ANY);
        fprintf(f, "%s\n", s);
        free(s);
        s = json_dumps(json_object_get(c, "ids"), JSON_COMPACT);
        fprintf(g, "%s\n", s);
        free(s);
    }
    fclose(f);
    fclose(g);
    char *out = NULL;
    snprintf(cmd, sizeof cmd, "%s tokenize --tokenizer %s --special < %s", bin(), dir, texts);
    int rc = run(cmd, &out, NULL);
    CHECK(rc == 0, "%s: tokenize --special exit %d", name, rc);
    lines_match(name, "tokenize --special", out, cases, "ids_default_special");
    free(out);
    if (full) {
        snprintf(cmd, sizeof cmd, "%s tokenize -m %s < %s", bin(), dir, texts);
        rc = run(cmd, &out, NULL);
        CHECK(rc == 0, "%s: tokenize exit %d", name, rc);
        lines_match(name, "tokenize", out, cases, "ids");
        free(out);
        snprintf(cmd, sizeof cmd, "%s detokenize --tokenizer %s < %s", bin(), dir, idsf);
        rc = run(cmd, &out, NULL);
        CHECK(rc == 0, "%s: detokenize exit %d", name, rc);
        lines_match(name, "detokenize", out, cases, "decoded");
        free(out);
    }
    /* chats: the prompt exactly, nothing added (for the big files only the longer chat:
     * every load costs a second under ASan; the library tests cover the rest) */
    json_array_foreach(json_object_get(r, "chats"), i, c) {
        if (!full && i == 0) continue;
        char mf[512];
        snprintf(mf, sizeof mf, "%s/%s.chat%zu.json", tmpdir, name, i);
        char *m = json_dumps(json_object_get(c, "messages"), 0);
        write_file(mf, m, strlen(m));
        free(m);
        snprintf(cmd, sizeof cmd, "%s chat-template -m %s --messages %s --add-generation-prompt", bin(), dir, mf);
        size_t n;
        rc = run(cmd, &out, &n);
        const char *want = json_string_value(json_object_get(c, "rendered"));
        CHECK(rc == 0 && out && n == strlen(want) && !memcmp(out, want, n), "%s: chat-template %zu: exit %d, got [%s]", name, i,
              rc, out ? out : "");
        free(out);
    }
    json_decref(r);
}

static void llama3(void) { check_tokenizer("llama3", 1); }
static void qwen3(void) { check_tokenizer("qwen3", 1); }
static void gptoss(void) { check_tokenizer("gptoss", 0); }
static void gemma3(void) { check_tokenizer("gemma3", 0); }

static void text_flag(void) {
    char cmd[512], *out = NULL;
    snprintf(cmd, sizeof cmd, "%s tokenize -m tests/fixtures/tokenizers/llama3 --text 'Hello, world!'", bin());
    int rc = run(cmd, &out, NULL);
    CHECK(rc == 0 && out && !strcmp(out, "[9906, 11, 1917, 0]\n"), "--text: exit %d, got %s", rc, out ? out : "");
    free(out);
}

static void bad_input(void) {
    char cmd[1024], path[512], *out = NULL;
    const char *L = "tests/fixtures/tokenizers/qwen3";
    /* invalid UTF-8 inside the JSON string: replaced, as Python's errors="replace" would,
     * so it encodes like the text with U+FFFD in its place */
    snprintf(path, sizeof path, "%s/badutf8", tmpdir);
    write_file(path, "\"a\xff" "b\xe2\x82\"\n\"a\xef\xbf\xbd" "b\xef\xbf\xbd\"\n", 18);
    snprintf(cmd, sizeof cmd, "%s tokenize -m %s < %s", bin(), L, path);
    int rc = run(cmd, &out, NULL);
    char *nl = out ? strchr(out, '\n') : NULL;
    CHECK(rc == 0 && nl && !strncmp(out, nl + 1, (size_t)(nl - out) + 1), "invalid UTF-8: exit %d, got %s", rc, out ? out : "");
    free(out);
    /* an empty string and a 1 MB line */
    snprintf(path, sizeof path, "%s/big", tmpdir);
    size_t big = 1 << 20;
    char *s = malloc(big + 8);
    s[0] = '"';
    for (size_t i = 1; i <= big; i++) s[i] = "ab c1de "[i % 8];
    s[big + 1] = '"';
    s[big + 2] = '\n';
    write_file(path, "\"\"\n", 3);
    snprintf(cmd, sizeof cmd, "%s tokenize -m %s < %s", bin(), L, path);
    rc = run(cmd, &out, NULL);
    CHECK(rc == 0 && out && !strcmp(out, "[]\n"), "empty string: exit %d, got %s", rc, out ? out : "");
    free(out);
    write_file(path, s, big + 3);
    free(s);
    snprintf(cmd, sizeof cmd, "%s tokenize -m %s < %s | %s detokenize -m %s", bin(), L, path, bin(), L);
    size_t n;
    rc = run(cmd, &out, &n);
    CHECK(rc == 0 && n == big + 3, "1 MB line round trip: exit %d, %zu bytes", rc, n);
    free(out);
    /* malformed lines: exit 1 with the line number */
    snprintf(path, sizeof path, "%s/notjson", tmpdir);
    write_file(path, "\"ok\"\nnot json\n", 14);
    snprintf(cmd, sizeof cmd, "%s tokenize -m %s < %s 2>&1", bin(), L, path);
    rc = run(cmd, &out, NULL);
    CHECK(rc == 1 && out && strstr(out, "line 2"), "bad JSON line: exit %d, got %s", rc, out ? out : "");
    free(out);
    write_file(path, "[1, 2, 999999999]\n", 18);
    snprintf(cmd, sizeof cmd, "%s detokenize -m %s < %s 2>&1", bin(), L, path);
    rc = run(cmd, &out, NULL);
    CHECK(rc == 1 && out && strstr(out, "not a token id"), "bad id: exit %d, got %s", rc, out ? out : "");
    free(out);
    /* usage errors and missing files */
    /* no -m: the default model's tokenizer, as the other commands use its model */
    snprintf(cmd, sizeof cmd, "%s tokenize --text x 2>&1", bin());
    rc = run(cmd, &out, NULL);
    char *want = NULL;
    snprintf(cmd, sizeof cmd, "%s tokenize -m models/default --text x 2>&1", bin());
    int rc2 = run(cmd, &want, NULL);
    CHECK(rc == 0 && rc2 == 0 && out && want && out[0] == '[' && strcmp(out, want) == 0,
          "no -m: exit %d, got %s, want %s", rc, out ? out : "", want ? want : "");
    free(want);
    free(out);
    snprintf(cmd, sizeof cmd, "%s tokenize -m %s/none --text x 2>&1", bin(), tmpdir);
    rc = run(cmd, &out, NULL);
    CHECK(rc == 1 && out && strstr(out, "none"), "missing dir: exit %d, got %s", rc, out ? out : "");
    free(out);
    snprintf(cmd, sizeof cmd, "%s chat-template -m %s --messages %s/none.json 2>&1", bin(), L, tmpdir);
    rc = run(cmd, &out, NULL);
    CHECK(rc == 1 && out && strstr(out, "none.json"), "missing messages: exit %d, got %s", rc, out ? out : "");
    free(out);
    snprintf(path, sizeof path, "%s/msgs.json", tmpdir);
    write_file(path, "{\"role\": \"user\"}", 16);
    snprintf(cmd, sizeof cmd, "%s chat-template -m %s --messages %s 2>&1", bin(), L, path);
    rc = run(cmd, &out, NULL);
    CHECK(rc == 1 && out && strstr(out, "messages"), "messages not a list: exit %d, got %s", rc, out ? out : "");
    free(out);
    snprintf(cmd, sizeof cmd, "%s chat-template -m tests/fixtures/tokenizers/gptoss --messages %s 2>&1", bin(), path);
    rc = run(cmd, &out, NULL);
    CHECK(rc == 1 && out && strstr(out, "no chat template"), "no template: exit %d, got %s", rc, out ? out : "");
    free(out);
    for (int k = 0; k < 3; k++) {
        static const char *const cmds[] = {"tokenize", "detokenize", "chat-template"};
        snprintf(cmd, sizeof cmd, "%s %s --help", bin(), cmds[k]);
        rc = run(cmd, &out, NULL);
        CHECK(rc == 0 && out && strstr(out, "usage: celer"), "%s --help: exit %d", cmds[k], rc);
        free(out);
        snprintf(cmd, sizeof cmd, "%s %s --frobnicate 2>&1", bin(), cmds[k]);
        rc = run(cmd, &out, NULL);
        CHECK(rc == 2 && out && strstr(out, "unknown flag"), "%s unknown flag: exit %d", cmds[k], rc);
        free(out);
    }
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/celer-tokcli-XXXXXX");
    if (!mkdtemp(tmpdir)) { printf("cannot make a temporary directory\n"); return 1; }
    RUN(text_flag);
    RUN(llama3);
    RUN(qwen3);
    RUN(gptoss);
    RUN(gemma3);
    RUN(bad_input);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) printf("could not remove %s\n", tmpdir);
    return harness_done();
}
