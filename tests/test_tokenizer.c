/* tests/test_tokenizer.c: the four fixture tokenizers (gemma3, gptoss, llama3, qwen3)
 * against Hugging Face's own output in tests/fixtures/tokenizers/<name>/ref.json:
 * encode without and with special tokens, decode, round trip, streaming decode. */
#include <jansson.h>
#include <stdlib.h>
#include <time.h>

#include "celer.h"
#include "celer_tokenizer.h"
#include "harness.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int ids_equal(const int32_t *a, int n, const json_t *want) {
    if (!json_is_array(want) || (size_t)n != json_array_size(want)) return 0;
    for (int i = 0; i < n; i++)
        if (a[i] != (int32_t)json_integer_value(json_array_get(want, (size_t)i))) return 0;
    return 1;
}

static void print_ids(const char *label, const int32_t *a, int n) {
    printf("    %s:", label);
    for (int i = 0; i < n && i < 40; i++) printf(" %d", a[i]);
    printf("\n");
}

static void check_tokenizer(const char *name) {
    char dir[256], ref[300];
    snprintf(dir, sizeof dir, "tests/fixtures/tokenizers/%s", name);
    snprintf(ref, sizeof ref, "%s/ref.json", dir);
    json_error_t je;
    json_t *r = json_load_file(ref, 0, &je);
    CHECK(r != NULL, "%s: %s", ref, je.text);
    if (!r) return;
    double t0 = now_s();
    celer_tokenizer *t = celer_tokenizer_open(dir);
    double t1 = now_s();
    CHECK(t != NULL, "%s: %s", name, celer_last_error());
    if (!t) { json_decref(r); return; }
    printf("  %s: loaded in %.0f ms\n", name, (t1 - t0) * 1e3);
    CHECK(celer_tokenizer_n_vocab(t) == json_integer_value(json_object_get(r, "vocab_size")), "%s: vocab %d, want %lld",
          name, celer_tokenizer_n_vocab(t), (long long)json_integer_value(json_object_get(r, "vocab_size")));
    json_t *cases = json_object_get(r, "cases");
    size_t i;
    json_t *c;
    int ok_ids = 0, ok_special = 0, ok_dec = 0, ok_stream = 0, n_cases = 0;
    json_array_foreach(cases, i, c) {
        n_cases++;
        const char *text = json_string_value(json_object_get(c, "text"));
        size_t tlen = json_string_length(json_object_get(c, "text"));
        const char *want_dec = json_string_value(json_object_get(c, "decoded"));
        int32_t *ids = NULL;
        int n = celer_tokenize(t, text, tlen, 0, &ids);
        int good = n >= 0 && ids_equal(ids, n, json_object_get(c, "ids"));
        CHECK(good, "%s case %zu (%.40s): ids differ", name, i, text);
        if (!good && n >= 0) print_ids("got", ids, n);
        ok_ids += good;
        int32_t *ids2 = NULL;
        int n2 = celer_tokenize(t, text, tlen, 1, &ids2);
        good = n2 >= 0 && ids_equal(ids2, n2, json_object_get(c, "ids_default_special"));
        CHECK(good, "%s case %zu (%.40s): ids_default_special differ", name, i, text);
        ok_special += good;
        free(ids2);
        if (n >= 0) {
            /* decode the reference ids, not ours */
            json_t *w = json_object_get(c, "ids");
            size_t m = json_array_size(w);
            int32_t *ref_ids = malloc((m + 1) * sizeof *ref_ids);
            for (size_t k = 0; k < m; k++) ref_ids[k] = (int32_t)json_integer_value(json_array_get(w, k));
            size_t dl;
            char *dec = celer_detokenize(t, ref_ids, m, 0, &dl);
            good = dec && dl == strlen(want_dec) && !memcmp(dec, want_dec, dl);
            CHECK(good, "%s case %zu: decoded \"%.60s\", want \"%.60s\"", name, i, dec ? dec : "(null)", want_dec);
            ok_dec += good;
            free(dec);
            /* streaming: the pieces concatenate to the full decode, each piece valid UTF-8 */
            celer_detok *st = celer_detok_new(t, 0);
            char *acc = calloc(1, strlen(want_dec) * 2 + 64);
            size_t an = 0, cap = strlen(want_dec) * 2 + 60;
            int valid = 1;
            for (size_t k = 0; k <= m && st; k++) {
                size_t pl;
                const char *piece = k < m ? celer_detok_put(st, ref_ids[k], &pl) : celer_detok_flush(st, &pl);
                if (!piece) { valid = 0; break; }
                /* a piece never ends inside a UTF-8 sequence */
                if (pl && ((unsigned char)piece[pl - 1] & 0xC0) == 0xC0) valid = 0;
                if (an + pl < cap) { memcpy(acc + an, piece, pl); an += pl; }
            }
            good = valid && an == strlen(want_dec) && !memcmp(acc, want_dec, an);
            CHECK(good, "%s case %zu: streamed \"%.60s\", want \"%.60s\"", name, i, acc, want_dec);
            ok_stream += good;
            celer_detok_free(st);
            free(acc);
            free(ref_ids);
        }
        /* round trip where HF round-trips */
        if (n >= 0 && !strcmp(want_dec, text) ) {
            char *dec = celer_detokenize(t, ids, (size_t)n, 0, NULL);
            CHECK(dec && !strcmp(dec, text), "%s case %zu: decode(encode(s)) != s", name, i);
            free(dec);
        }
        free(ids);
    }
    printf("  %s: %d/%d ids, %d/%d ids_default_special, %d/%d decoded, %d/%d streamed\n", name, ok_ids, n_cases,
           ok_special, n_cases, ok_dec, n_cases, ok_stream, n_cases);
    celer_tokenizer_free(t);
    json_decref(r);
}

static void gemma3(void) { check_tokenizer("gemma3"); }
static void gptoss(void) { check_tokenizer("gptoss"); }
static void llama3(void) { check_tokenizer("llama3"); }
static void qwen3(void) { check_tokenizer("qwen3"); }

int main(void) {
    RUN(llama3);
    RUN(qwen3);
    RUN(gptoss);
    RUN(gemma3);
    return harness_done();
}
