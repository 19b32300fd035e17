/* fuzz/fuzz_tokenizer_json.c: arbitrary bytes as tokenizer.json: it loads or is
 * refused with a message; a loaded tokenizer encodes and decodes a fixed text. */
#include "celer.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    const char *p = fz_file("tokenizer.json", data, n);
    celer_tokenizer *t = celer_tokenizer_open(p);
    if (t) {
        static const char text[] = "Hello, world! 123  \xe2\x98\x83 caf\xc3\xa9 \xf0\x9f\x98\x80\n\tend";
        int32_t *ids = NULL;
        int k = celer_tokenize(t, text, sizeof text - 1, 1, &ids);
        if (k > 0) {
            size_t len = 0;
            free(celer_detokenize(t, ids, (size_t)k, 0, &len));
        }
        free(ids);
    } else if (!celer_last_error()[0]) {
        abort();
    }
    celer_tokenizer_free(t);
    return 0;
}
