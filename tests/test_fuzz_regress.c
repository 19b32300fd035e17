/* tests/test_fuzz_regress.c: every input a fuzzer once crashed on (fuzz/regress/),
 * replayed through the same calls as its harness; under `make test SAN=1` a
 * regression is a sanitizer report. */
#include <dirent.h>
#include <stdlib.h>

#include "celer.h"
#include "harness.h"

static void tokenizer_json(void) {
    const char *dir = "fuzz/regress/fuzz_tokenizer_json";
    DIR *d = opendir(dir);
    CHECK(d != NULL, "no %s", dir);
    if (!d) return;
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d))) {
        if (e->d_name[0] == '.') continue;
        char p[512];
        snprintf(p, sizeof p, "%s/%s", dir, e->d_name);
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
        } else {
            CHECK(celer_last_error()[0] != 0, "%s: refused without a message", e->d_name);
        }
        celer_tokenizer_free(t);
        n++;
    }
    closedir(d);
    CHECK(n > 0, "no regression inputs in %s", dir);
}

int main(void) {
    RUN(tokenizer_json);
    return harness_done();
}
