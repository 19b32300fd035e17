/* fuzz/replay_tokenizer_json.h: what fuzz_tokenizer_json does with one input file,
 * shared with tests/test_fuzz_regress.c, which replays the inputs that once crashed
 * it. Returns 0 when the file loaded and ran, 1 when it was refused with a message,
 * -1 when it was refused without one. */
#ifndef CELER_REPLAY_TOKENIZER_JSON_H
#define CELER_REPLAY_TOKENIZER_JSON_H
#include <stdlib.h>

#include "celer.h"

static inline int replay_tokenizer_json(const char *path) {
    celer_tokenizer *t = celer_tokenizer_open(path);
    if (!t) return celer_last_error()[0] ? 1 : -1;
    static const char text[] = "Hello, world! 123  \xe2\x98\x83 caf\xc3\xa9 \xf0\x9f\x98\x80\n\tend";
    int32_t *ids = NULL;
    int k = celer_tokenize(t, text, sizeof text - 1, 1, &ids);
    if (k > 0) {
        size_t len = 0;
        free(celer_detokenize(t, ids, (size_t)k, 0, &len));
    }
    free(ids);
    celer_tokenizer_free(t);
    return 0;
}
#endif
