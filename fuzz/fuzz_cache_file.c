/* fuzz/fuzz_cache_file.c: arbitrary bytes as a KV-cache file for the Llama fixture:
 * loading either succeeds (and the session then runs a token) or is refused with a
 * message and leaves the session as it was. */
#include "celer.h"
#include "fuzz_util.h"

static celer_model *model;

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc;
    (void)argv;
    if (!(model = celer_model_open("tests/fixtures/models/llama", 1))) abort();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    const char *p = fz_file("cache.safetensors", data, n);
    celer_session *s = celer_session_new(model, 64, 8);
    if (!s) abort();
    int32_t tok = 5;
    if (celer_session_load_cache(s, p) == 0) {
        if (celer_session_pos(s) < 64) celer_session_eval(s, &tok, 1, NULL, 0);
    } else {
        if (!celer_last_error()[0] || celer_session_pos(s) != 0) abort();
    }
    celer_session_free(s);
    return 0;
}
