/* tests/test_tokenizer_fuzz.c: a light, seeded fuzz of every tokenizer parser and
 * entry point (run under ASan/UBSan by make test SAN=1): mutated tokenizer.json files,
 * mutated Jinja templates, random bytes to encode, random ids to decode and stream.
 * Nothing may crash or leak; errors must come with a message; whatever succeeds must
 * be consistent (the stream concatenates to the full decode). */
#include <jansson.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "celer.h"
#include "celer_tokenizer.h"
#include "harness.h"

static uint64_t rs = 0x243F6A8885A308D3ull;
static uint32_t rnd(void) {
    rs = rs * 6364136223846793005ull + 1442695040888963407ull;
    return (uint32_t)(rs >> 33);
}

/* One random edit: flip, insert, delete, or truncate. n stays < cap. */
static size_t mutate(char *s, size_t n, size_t cap) {
    static const char pieces[] = "{}[]\":,\\ 0-1e.ab%#|~-+()'\n\xc3\xa9\xff";
    uint32_t k = rnd() % 4;
    size_t at = n ? rnd() % n : 0;
    if (k == 0 && n) s[at] = pieces[rnd() % (sizeof pieces - 1)];
    else if (k == 1 && n + 1 < cap) {
        memmove(s + at + 1, s + at, n - at);
        s[at] = pieces[rnd() % (sizeof pieces - 1)];
        n++;
    } else if (k == 2 && n) {
        memmove(s + at, s + at + 1, n - at - 1);
        n--;
    } else if (k == 3) n = at;
    return n;
}

static void tokenizer_json(void) {
    static const char base[] =
        "{\"version\": \"1.0\", \"added_tokens\": [{\"id\": 5, \"content\": \"<s>\", \"special\": true, \"lstrip\": true}],"
        " \"normalizer\": {\"type\": \"Sequence\", \"normalizers\": [{\"type\": \"NFC\"}, {\"type\": \"Replace\", \"pattern\": {\"String\": \" \"}, \"content\": \"\xe2\x96\x81\"}]},"
        " \"pre_tokenizer\": {\"type\": \"Split\", \"pattern\": {\"Regex\": \"\\\\p{L}+|\\\\s+\"}, \"behavior\": \"Isolated\", \"invert\": false},"
        " \"post_processor\": {\"type\": \"TemplateProcessing\", \"single\": [{\"SpecialToken\": {\"id\": \"<s>\", \"type_id\": 0}}, {\"Sequence\": {\"id\": \"A\", \"type_id\": 0}}], \"special_tokens\": {\"<s>\": {\"id\": \"<s>\", \"ids\": [5], \"tokens\": [\"<s>\"]}}},"
        " \"decoder\": {\"type\": \"Sequence\", \"decoders\": [{\"type\": \"Replace\", \"pattern\": {\"String\": \"\xe2\x96\x81\"}, \"content\": \" \"}, {\"type\": \"ByteFallback\"}, {\"type\": \"Fuse\"}, {\"type\": \"Strip\", \"content\": \" \", \"start\": 1, \"stop\": 0}]},"
        " \"model\": {\"type\": \"BPE\", \"unk_token\": \"<unk>\", \"byte_fallback\": true, \"fuse_unk\": true,"
        " \"vocab\": {\"<unk>\": 0, \"a\": 1, \"b\": 2, \"ab\": 3, \"\xe2\x96\x81\": 4, \"<0x41>\": 6}, \"merges\": [[\"a\", \"b\"]]}}";
    char dir[] = "/tmp/celer-tokfuzz-XXXXXX";
    if (!mkdtemp(dir)) { CHECK(0, "mkdtemp"); return; }
    char path[128];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    char buf[4096];
    int opened = 0, failed = 0;
    for (int it = 0; it < 400; it++) {
        size_t n = sizeof base - 1;
        memcpy(buf, base, n);
        int edits = it == 0 ? 0 : 1 + (int)(rnd() % 3);
        for (int e = 0; e < edits; e++) n = mutate(buf, n, sizeof buf);
        FILE *f = fopen(path, "wb");
        if (!f) break;
        fwrite(buf, 1, n, f);
        fclose(f);
        celer_tokenizer *t = celer_tokenizer_open(dir);
        if (!t) {
            failed++;
            CHECK(celer_last_error()[0] != 0, "iteration %d failed without a message", it);
            continue;
        }
        opened++;
        int32_t *ids;
        int k = celer_tokenize(t, "ab a\xc3\xa9 <s>A", 12, 1, &ids);
        if (k >= 0) {
            char *s = celer_detokenize(t, ids, (size_t)k, 0, NULL);
            free(s);
        }
        free(ids);
        celer_tokenizer_free(t);
    }
    CHECK(opened > 0 && failed > 0, "opened %d, failed %d", opened, failed);
    printf("  mutated tokenizer.json: %d opened, %d rejected with a message\n", opened, failed);
    unlink(path);
    rmdir(dir);
}

static void templates(void) {
    json_t *cases = json_load_file("tests/fixtures/tokenizers/jinja/cases.json", 0, NULL);
    CHECK(cases != NULL, "cases.json");
    if (!cases) return;
    size_t nc = json_array_size(cases);
    int ok = 0, err = 0;
    static char buf[16384];
    for (int it = 0; it < 1500; it++) {
        json_t *c = json_array_get(cases, rnd() % nc);
        const char *tm = json_string_value(json_object_get(c, "template"));
        size_t n = strlen(tm);
        if (n >= sizeof buf - 16) n = sizeof buf - 16;
        memcpy(buf, tm, n);
        int edits = 1 + (int)(rnd() % 3);
        for (int e = 0; e < edits; e++) n = mutate(buf, n, sizeof buf);
        char *vars = json_dumps(json_object_get(c, "vars"), JSON_COMPACT);
        char *out = celer_jinja_render(buf, n, vars);
        if (out) ok++;
        else {
            err++;
            CHECK(celer_last_error()[0] != 0, "template error without a message");
        }
        free(out);
        free(vars);
    }
    printf("  mutated templates: %d rendered, %d rejected\n", ok, err);
    json_decref(cases);
}

static void encode_decode_stream(void) {
    static const char *const names[] = {"qwen3", "gemma3"};
    for (int k = 0; k < 2; k++) {
        char dir[128];
        snprintf(dir, sizeof dir, "tests/fixtures/tokenizers/%s", names[k]);
        celer_tokenizer *t = celer_tokenizer_open(dir);
        CHECK(t != NULL, "%s: %s", names[k], celer_last_error());
        if (!t) continue;
        int nv = celer_tokenizer_n_vocab(t), stream_ok = 0;
        for (int it = 0; it < 300; it++) {
            /* random bytes, biased towards UTF-8 lead and continuation bytes and specials */
            char s[200];
            size_t n = rnd() % sizeof s;
            for (size_t i = 0; i < n; i++) {
                uint32_t r = rnd() % 10;
                s[i] = (char)(r < 4 ? 0x20 + rnd() % 95 : r < 6 ? 0x80 + rnd() % 64 : r < 8 ? 0xC0 + rnd() % 64 : rnd() % 256);
            }
            int32_t *ids;
            int m = celer_tokenize(t, s, n, (int)(it & 1), &ids);
            CHECK(m >= 0, "%s: encode failed: %s", names[k], celer_last_error());
            free(ids);
            /* random ids, some out of range */
            int32_t r[24];
            int nr = (int)(rnd() % 24);
            for (int i = 0; i < nr; i++) r[i] = (int32_t)(rnd() % 8 == 0 ? (int)rnd() - (1 << 30) : (int)(rnd() % (uint32_t)nv));
            size_t fl;
            char *full = celer_detokenize(t, r, (size_t)nr, (int)(it & 2), &fl);
            CHECK(full != NULL, "%s: decode failed: %s", names[k], celer_last_error());
            celer_detok *d = celer_detok_new(t, (int)(it & 2));
            char acc[4096];
            size_t an = 0;
            int good = 1;
            for (int i = 0; i <= nr && good; i++) {
                size_t pl;
                const char *p = i < nr ? celer_detok_put(d, r[i], &pl) : celer_detok_flush(d, &pl);
                if (!p) { good = 0; break; } /* a decoder that is not prefix-stable here: reported, not a crash */
                if (an + pl < sizeof acc) { memcpy(acc + an, p, pl); an += pl; }
            }
            if (good && full) {
                CHECK(an == fl && !memcmp(acc, full, fl), "%s: stream differs from full decode", names[k]);
                stream_ok++;
            }
            celer_detok_free(d);
            free(full);
        }
        printf("  %s: 300 random texts encoded, %d random id streams equal their full decode\n", names[k], stream_ok);
        celer_tokenizer_free(t);
    }
}

int main(void) {
    RUN(tokenizer_json);
    RUN(templates);
    RUN(encode_decode_stream);
    return harness_done();
}
