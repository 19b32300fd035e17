/* tests/test_tokenizer_chat.c: chat templates. Every chat of the fixture ref.json files
 * rendered byte for byte as transformers' apply_chat_template renders it, and its ids as
 * transformers tokenizes the rendered text. */
#include <jansson.h>
#include <stdlib.h>

#include "celer.h"
#include "celer_tokenizer.h"
#include "harness.h"

static void check_chats(const char *name) {
    char dir[256], ref[300];
    snprintf(dir, sizeof dir, "tests/fixtures/tokenizers/%s", name);
    snprintf(ref, sizeof ref, "%s/ref.json", dir);
    json_error_t je;
    json_t *r = json_load_file(ref, 0, &je);
    CHECK(r != NULL, "%s: %s", ref, je.text);
    if (!r) return;
    celer_tokenizer *t = celer_tokenizer_open(dir);
    CHECK(t != NULL, "%s: %s", name, celer_last_error());
    size_t i;
    json_t *ch;
    int good = 0, n = 0;
    json_array_foreach(json_object_get(r, "chats"), i, ch) {
        if (!t) break;
        n++;
        char *msgs = json_dumps(json_object_get(ch, "messages"), JSON_COMPACT);
        const char *want = json_string_value(json_object_get(ch, "rendered"));
        char *got = celer_chat_render(t, msgs, NULL, json_is_true(json_object_get(ch, "add_generation_prompt")));
        int ok = got && !strcmp(got, want);
        CHECK(ok, "%s chat %zu: rendered\n%s\nwant\n%s\n(%s)", name, i, got ? got : "(null)", want, got ? "" : celer_last_error());
        /* the rendered text tokenizes to the reference ids (special tokens matched in the text, nothing added) */
        if (got) {
            int32_t *ids;
            int k = celer_tokenize(t, want, strlen(want), 0, &ids);
            json_t *w = json_object_get(ch, "ids");
            int same = k >= 0 && (size_t)k == json_array_size(w);
            for (int q = 0; same && q < k; q++) same = ids[q] == json_integer_value(json_array_get(w, (size_t)q));
            CHECK(same, "%s chat %zu: ids of the rendered text differ", name, i);
            ok &= same;
            free(ids);
        }
        good += ok;
        free(got);
        free(msgs);
    }
    printf("  %s: %d/%d chats\n", name, good, n);
    celer_tokenizer_free(t);
    json_decref(r);
}

static void gemma3(void) { check_chats("gemma3"); }
static void llama3(void) { check_chats("llama3"); }
static void qwen3(void) { check_chats("qwen3"); }

int main(void) {
    RUN(llama3);
    RUN(qwen3);
    RUN(gemma3);
    return harness_done();
}
