/* fuzz/fuzz_jinja.c: arbitrary templates with arbitrary variables: the input is
 * "template\0vars-json" (no NUL: the whole input is the template, vars are a fixed
 * chat). Rendering returns text or NULL with a message; never a crash or a hang. */
#include "celer.h"
#include "fuzz_util.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t n) {
    const uint8_t *nul = memchr(data, 0, n);
    size_t tl = nul ? (size_t)(nul - data) : n;
    static const char chat[] = "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}],"
                                " \"add_generation_prompt\": true, \"bos_token\": \"<s>\"}";
    char *vars = nul ? fz_str(nul + 1, n - tl - 1) : fz_str((const uint8_t *)chat, sizeof chat - 1);
    char *out = celer_jinja_render((const char *)data, tl, vars);
    if (!out && !celer_last_error()[0]) abort();
    free(out);
    free(vars);
    return 0;
}
