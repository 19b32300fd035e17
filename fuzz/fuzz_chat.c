/* fuzz/fuzz_chat.c: arbitrary message JSON (and tools, after a NUL) rendered with
 * the real Qwen3 and gpt-oss chat templates, and encoded by celer_chat_encode with
 * special tokens in message text kept as text (the marks of chat.c) or parsed. */
#include "celer.h"
#include "fuzz_util.h"

static celer_tokenizer *toks[2];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    toks[0] = celer_tokenizer_open("tests/fixtures/tokenizers/qwen3");
    toks[1] = celer_tokenizer_open("tests/fixtures/tokenizers/gptoss");
    if (!toks[0] || !toks[1]) {
        fprintf(stderr, "fuzz_chat: %s (run `make tests` first to unpack the fixtures)\n", celer_last_error());
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    const uint8_t *nul = memchr(data, 0, n);
    size_t ml = nul ? (size_t)(nul - data) : n;
    char *msgs = fz_str(data, ml), *tools = nul ? fz_str(nul + 1, n - ml - 1) : NULL;
    char *out = celer_chat_render(toks[n & 1], msgs, tools, 1);
    free(out);
    celer_chat_request rq = {msgs, tools, NULL, 1, (int)(n >> 1) & 1};
    int32_t *ids;
    char *text;
    if (celer_chat_encode(toks[n & 1], &rq, &ids, &text) >= 0) {
        free(ids);
        free(text);
    }
    free(msgs);
    free(tools);
    return 0;
}
