/* fuzz/fuzz_tokenizer_json.c: arbitrary bytes as tokenizer.json: it loads or is
 * refused with a message; a loaded tokenizer encodes and decodes a fixed text. */
#include "fuzz_util.h"
#include "replay_tokenizer_json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    if (replay_tokenizer_json(fz_file("tokenizer.json", data, n)) < 0) abort(); /* a refusal must say why */
    return 0;
}
