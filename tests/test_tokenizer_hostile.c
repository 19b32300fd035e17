/* tests/test_tokenizer_hostile.c: tokenizer.json files built to exhaust memory or time
 * (issue #23 item 9) must make encode fail at once with a message naming the
 * normalizer or regex and the limit; and the windowed regex matching that makes
 * quadratic regexes fail must give exactly the matches of PCRE2 run over the whole
 * subject (the reference here: plain pcre2_match with no window). */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/limits.h"
#include "celer.h"
#include "celer_tokenizer.h"
#include "harness.h"
#include "tokenizer/tok.h"

static char tmpdir[256];

static celer_tokenizer *open_json(const char *name, const char *json) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return NULL;
    fwrite(json, 1, strlen(json), f);
    fclose(f);
    celer_tokenizer *t = celer_tokenizer_open(dir);
    CHECK(t != NULL, "%s: %s", name, celer_last_error());
    return t;
}

static char *repeat(char c, size_t n) {
    char *s = malloc(n + 1);
    memset(s, c, n);
    s[n] = 0;
    return s;
}

/* A byte-level-free BPE over a, b, c whose normalizer / pre_tokenizer is given. */
static celer_tokenizer *with(const char *name, const char *norm, const char *pre) {
    size_t cap = strlen(norm) + strlen(pre) + 512;
    char *j = malloc(cap);
    snprintf(j, cap,
             "{\"normalizer\": %s, \"pre_tokenizer\": %s, \"model\": {\"type\": \"BPE\", \"unk_token\": \"?\", "
             "\"vocab\": {\"?\": 0, \"a\": 1, \"b\": 2, \"c\": 3, \"aa\": 4}, \"merges\": [\"a a\"]}}",
             norm, pre);
    celer_tokenizer *t = open_json(name, j);
    free(j);
    return t;
}

/* The reproduction of #23: Replace expands "a" to 100 KB; 20 KB of input would make 2 GB. */
static void norm_replace_growth(void) {
    char *big = repeat('b', 100000);
    size_t cap = 100000 + 256;
    char *norm = malloc(cap);
    snprintf(norm, cap, "{\"type\": \"Replace\", \"pattern\": {\"String\": \"a\"}, \"content\": \"%s\"}", big);
    celer_tokenizer *t = with("replace_growth", norm, "null");
    char *in = repeat('a', 20000);
    int32_t *ids = (int32_t *)1;
    int n = t ? celer_tokenize(t, in, 20000, 0, &ids) : 0;
    CHECK(n == -1 && ids == NULL, "encode of a 2 GB normalization returned %d", n);
    CHECK_STR_HAS(celer_last_error(), "replace_growth/tokenizer.json: normalizer (Replace)");
    CHECK_STR_HAS(celer_last_error(), "CELER_MAX_NORM_GROWTH");
    /* at the limit: "a" -> 16 bytes on 1000 bytes is 16000 bytes, allowed */
    celer_tokenizer_free(t);
    free(norm);
    norm = malloc(cap);
    snprintf(norm, cap, "{\"type\": \"Replace\", \"pattern\": {\"String\": \"a\"}, \"content\": \"%.*s\"}",
             CELER_MAX_NORM_GROWTH, big);
    t = with("replace_at_limit", norm, "null");
    n = t ? celer_tokenize(t, in, 1000, 0, &ids) : -1;
    CHECK(n == 16000, "16x growth at the limit: %d ids (%s)", n, n < 0 ? celer_last_error() : "");
    if (n >= 0) free(ids);
    celer_tokenizer_free(t);
    free(norm);
    free(in);
    free(big);
}

/* Each step of a Sequence grows 8x: three steps are 512x, caught at the step that
 * crosses the limit, which the message names. */
static void norm_sequence_growth(void) {
    const char *r = "{\"type\": \"Replace\", \"pattern\": {\"Regex\": \"a\"}, \"content\": \"aaaaaaaa\"}";
    char norm[1024];
    snprintf(norm, sizeof norm, "{\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, %s, %s, %s]}", r, r, r);
    celer_tokenizer *t = with("seq_growth", norm, "null");
    char *in = repeat('a', 10000);
    int32_t *ids;
    int n = t ? celer_tokenize(t, in, 10000, 0, &ids) : 0;
    CHECK(n == -1, "512x growth returned %d", n);
    CHECK_STR_HAS(celer_last_error(), "normalizer.normalizers[2] (Replace)");
    /* a short input stays inside the slack: 8 bytes -> 4096 */
    n = t ? celer_tokenize(t, in, 8, 0, &ids) : -1;
    CHECK(n == 4096 / 2, "8 bytes through 512x growth: %d ids (%s)", n, n < 0 ? celer_last_error() : "");
    if (n >= 0) free(ids);
    /* a Prepend longer than the slack on one byte of input */
    celer_tokenizer_free(t);
    char *big = repeat('b', CELER_MAX_NORM_SLACK + 100);
    size_t cap = strlen(big) + 128;
    char *pn = malloc(cap);
    snprintf(pn, cap, "{\"type\": \"Prepend\", \"prepend\": \"%s\"}", big);
    t = with("prepend_growth", pn, "null");
    n = t ? celer_tokenize(t, "a", 1, 0, &ids) : 0;
    CHECK(n == -1, "prepend growth returned %d", n);
    CHECK_STR_HAS(celer_last_error(), "normalizer (Prepend)");
    celer_tokenizer_free(t);
    free(pn);
    free(big);
    free(in);
}

/* The reproduction of #23: /a*c|./ over 400k characters is quadratic (each match of "."
 * first scans the rest for a "c"). It must fail within a few characters. */
static void regex_quadratic(void) {
    celer_tokenizer *t = with("quadratic", "null",
                              "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"a*c|.\"}, \"behavior\": \"Isolated\"}");
    char *in = repeat('a', 400000);
    int32_t *ids;
    int n = t ? celer_tokenize(t, in, 400000, 0, &ids) : 0;
    CHECK(n == -1, "quadratic regex returned %d", n);
    CHECK_STR_HAS(celer_last_error(), "quadratic/tokenizer.json: regex /a*c|./");
    CHECK_STR_HAS(celer_last_error(), "CELER_MAX_REGEX_SCAN");
    /* the same regex on input it handles in linear time: every "a" run ends in "c" */
    for (size_t i = 0; i < 400000; i += 8) in[i + 7] = 'c';
    n = t ? celer_tokenize(t, in, 400000, 0, &ids) : -1;
    CHECK(n > 0, "a*c|. on runs ending in c: %s", n < 0 ? celer_last_error() : "");
    if (n > 0) free(ids);
    celer_tokenizer_free(t);
    free(in);
}

/* Exponential backtracking inside one match: the PCRE2 match limit stops it. */
static void regex_backtracking(void) {
    celer_tokenizer *t = with("backtrack", "null",
                              "{\"type\": \"Split\", \"pattern\": {\"Regex\": \"(a|aa)+[bc]\"}, \"behavior\": \"Isolated\"}");
    char *in = repeat('a', 200);
    int32_t *ids;
    int n = t ? celer_tokenize(t, in, 200, 0, &ids) : 0;
    CHECK(n == -1, "exponential regex returned %d", n);
    CHECK_STR_HAS(celer_last_error(), "backtrack/tokenizer.json: regex /(a|aa)+[bc]/");
    CHECK_STR_HAS(celer_last_error(), "limit");
    celer_tokenizer_free(t);
    free(in);
}

/* Reference: all matches by pcre2_match over the whole subject, no window. */
static long ref_find(const tk_pattern *p, const char *s, size_t n, size_t *out) {
    pcre2_match_data *md = pcre2_match_data_create(1, NULL);
    long k = 0;
    size_t i = 0;
    while (i <= n) {
        int rc = pcre2_match(p->re, (PCRE2_SPTR)s, n, i, 0, md, NULL);
        if (rc < 0) break;
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        out[2 * k] = ov[0];
        out[2 * k + 1] = ov[1];
        k++;
        if (ov[1] == ov[0]) {
            if (ov[1] >= n) break;
            i = ov[1] + (size_t)utf8_len((unsigned char)s[ov[1]]);
        } else i = ov[1];
    }
    pcre2_match_data_free(md);
    return k;
}

/* Windowed matching agrees with whole-subject matching on long random text with long
 * runs, for regexes with lookahead, lookbehind, anchors, word boundaries, empty matches
 * and the pre-tokenizer regexes of GPT-2 and Llama 3. */
static void regex_window_exact(void) {
    static const char *const res[] = {
        "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)|\\s+",
        "(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+",
        "a{0,40}c|.", "(?<=a)b+", "b+$|a", "\\bab*\\b", "a*", "(?=c)|b", "[^c]+c\\s", "x*$",
    };
    static const char *const atoms[] = {"a", "b", "c", " ", "\n", "1", "\xc3\xa9", "'s", "!", "\xe2\x96\x81"};
    uint64_t r = 0x9E3779B97F4A7C15ull;
    tk_pattern p;
    size_t *want = malloc(2 * 20001 * sizeof *want);
    char *s = malloc(20000 + 64);
    for (size_t ri = 0; ri < sizeof res / sizeof *res; ri++) {
        memset(&p, 0, sizeof p);
        CHECK(tk_pattern_compile_regex(&p, res[ri], strlen(res[ri]), "test") == 0, "compile %s", res[ri]);
        for (int trial = 0; trial < 6; trial++) {
            /* runs of one atom, of lengths up to 3000 (past several window doublings) */
            size_t n = 0;
            while (n < 20000) {
                r ^= r << 13; r ^= r >> 7; r ^= r << 17;
                const char *a = atoms[r % 10];
                size_t run = (r >> 8) % 4 == 0 ? (r >> 16) % 3000 : (r >> 16) % 4 + 1, al = strlen(a);
                for (size_t k = 0; k < run && n + al <= 20000; k++, n += al) memcpy(s + n, a, al);
                if (n + 4 > 20000) break;
            }
            size_t *got = NULL;
            long kg = tk_pattern_find(&p, s, n, &got), kw = ref_find(&p, s, n, want);
            CHECK(kg == kw, "/%s/ trial %d: %ld matches, want %ld", res[ri], trial, kg, kw);
            if (kg == kw && kg > 0) CHECK(!memcmp(got, want, 2 * (size_t)kg * sizeof *got), "/%s/ trial %d: matches differ", res[ri], trial);
            free(got);
        }
        tk_pattern_free(&p);
    }
    free(s);
    free(want);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/celer_hostile_%d", (int)getpid());
    mkdir(tmpdir, 0755);
    RUN(norm_replace_growth);
    RUN(norm_sequence_growth);
    RUN(regex_quadratic);
    RUN(regex_backtracking);
    RUN(regex_window_exact);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) {}
    return harness_done();
}
