/* tests/test_fuzz_regress.c: every input a fuzzer once crashed on (fuzz/regress/),
 * replayed through the same calls as its harness; under `make test SAN=1` a
 * regression is a sanitizer report. */
#include <dirent.h>
#include <stdlib.h>

#include "../fuzz/replay_tokenizer_json.h"
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
        CHECK(replay_tokenizer_json(p) >= 0, "%s: refused without a message", e->d_name);
        n++;
    }
    closedir(d);
    CHECK(n > 0, "no regression inputs in %s", dir);
}

int main(void) {
    RUN(tokenizer_json);
    return harness_done();
}
