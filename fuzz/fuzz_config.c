/* fuzz/fuzz_config.c: arbitrary bytes as config.json beside the Llama fixture's
 * weights: the model either opens (and then runs two tokens) or fails with a message. */
#include "celer.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    static int ready;
    if (!ready) {
        fz_link("model.safetensors", "tests/fixtures/models/llama/model.safetensors");
        ready = 1;
    }
    fz_file("config.json", data, n);
    celer_model *m = celer_model_open(fz_scratch(), 1);
    if (m) {
        celer_session *s = celer_session_new(m, 8, 4);
        int32_t tok[2] = {1, 2};
        if (s) celer_session_eval(s, tok, 2, NULL, 0);
        celer_session_free(s);
    } else if (!celer_last_error()[0]) {
        abort(); /* a refusal must say why */
    }
    celer_model_free(m);
    return 0;
}
