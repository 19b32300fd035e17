/* fuzz/fuzz_encode.c: arbitrary bytes through the real Llama 3 and Gemma 3
 * tokenizers (byte-level BPE and SentencePiece-style): encode, decode, and stream
 * the ids back through the incremental detokenizer, whose output must equal the
 * one-shot decode byte for byte. */
#include "celer.h"
#include "fuzz_util.h"

static celer_tokenizer *toks[2];

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    toks[0] = celer_tokenizer_open("tests/fixtures/tokenizers/llama3");
    toks[1] = celer_tokenizer_open("tests/fixtures/tokenizers/gemma3");
    if (!toks[0] || !toks[1]) {
        fprintf(stderr, "fuzz_encode: %s (run `make tests` first to unpack the fixtures)\n", celer_last_error());
        abort();
    }
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    celer_tokenizer *t = toks[n & 1];
    int32_t *ids = NULL;
    int k = celer_tokenize(t, (const char *)data, n, n & 2, &ids);
    if (k < 0) { free(ids); return 0; }
    size_t len = 0;
    char *once = celer_detokenize(t, ids, (size_t)k, 0, &len);
    celer_detok *d = celer_detok_new(t, 0);
    if (once && d) {
        size_t at = 0;
        for (int i = 0; i < k; i++) {
            size_t pl = 0;
            const char *piece = celer_detok_put(d, ids[i], &pl);
            if (piece && pl) {
                if (at + pl > len || memcmp(once + at, piece, pl) != 0) abort();
                at += pl;
            }
        }
        size_t fl = 0;
        const char *tail = celer_detok_flush(d, &fl);
        if (tail && fl) {
            if (at + fl > len || memcmp(once + at, tail, fl) != 0) abort();
            at += fl;
        }
        if (at != len) abort();
    }
    celer_detok_free(d);
    free(once);
    free(ids);
    return 0;
}
