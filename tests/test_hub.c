/* tests/test_hub.c: the pieces under `-m ORG/NAME` and `celer pull`: SHA-256 against
 * the FIPS 180-4 / NIST example digests, hub names by the hub's rules, the cache
 * directory's precedence (huggingface_hub's), and celer_hub_resolve over a cache tree
 * built here. tests/cli_hub.sh covers the commands and the downloads. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/settings.h"
#include "celer.h"
#include "harness.h"
#include "io/hub.h"
#include "io/sha256.h"

static char tmp[256];

static void hex_of(const void *data, size_t n, char out[65]) {
    sha256_ctx c;
    uint8_t d[32];
    sha256_init(&c);
    sha256_update(&c, data, n);
    sha256_final(&c, d);
    sha256_hex(d, out);
}

/* NIST's examples (FIPS 180-4 appendix / CAVP short messages). */
static void sha256_vectors(void) {
    char h[65];
    hex_of("", 0, h);
    CHECK(strcmp(h, "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855") == 0, "\"\": %s", h);
    hex_of("abc", 3, h);
    CHECK(strcmp(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0, "abc: %s", h);
    const char *m2 = "abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"; /* 448 bits: padding spills a block */
    hex_of(m2, strlen(m2), h);
    CHECK(strcmp(h, "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1") == 0, "448-bit: %s", h);
    /* one million 'a', fed in uneven pieces (the streaming path) */
    sha256_ctx c;
    sha256_init(&c);
    char a[997];
    memset(a, 'a', sizeof a);
    size_t left = 1000000;
    for (size_t k = 1; left; k = k % 997 + 1) {
        size_t n = k < left ? k : left;
        sha256_update(&c, a, n);
        left -= n;
    }
    uint8_t d[32];
    sha256_final(&c, d);
    sha256_hex(d, h);
    CHECK(strcmp(h, "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0") == 0, "1M a: %s", h);
    /* a file: the same digest as the bytes */
    char path[300];
    snprintf(path, sizeof path, "%s/abc", tmp);
    FILE *f = fopen(path, "wb");
    fputs("abc", f);
    fclose(f);
    CHECK(sha256_file(path, h) == 0 && strcmp(h, "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad") == 0,
          "file: %s", h);
    snprintf(path, sizeof path, "%s/none", tmp);
    CHECK(sha256_file(path, h) == -1, "a missing file hashed");
    CHECK_STR_HAS(celer_last_error(), "none");
}

static void names(void) {
    const char *good[] = {"Qwen/Qwen3-0.6B", "mlx-community/Llama-3.2-1B-Instruct-4bit", "a/b", "org_1/x.y_z",
                          "Qwen/Qwen3-0.6B@main", "o/n@refs/pr/1", "o/n@v1.0", "o/n@0123456789abcdef0123456789abcdef01234567"};
    const char *bad[] = {"", "gpt2", "a/b/c", "/abs/path", "./x/y", "../x", "a/", "/b", "a//b", "-a/b", "a/b-", "a/.b",
                         "a--b/c", "a/b..c", "a b/c", "a/b@", "a/b@x y", "a/b@../x", "a/b@/x", "a/b@x/", "a/b@x~1",
                         "o/name-that-is-far-too-long-xxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx"};
    for (size_t i = 0; i < sizeof good / sizeof good[0]; i++) CHECK(celer_hub_is_name(good[i]), "'%s' refused", good[i]);
    for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) CHECK(!celer_hub_is_name(bad[i]), "'%s' accepted", bad[i]);
    hub_name h;
    CHECK(hub_parse("Qwen/Qwen3-0.6B", &h) == 0 && strcmp(h.repo, "Qwen/Qwen3-0.6B") == 0 && strcmp(h.rev, "main") == 0 &&
              !h.rev_given,
          "default revision: %s @ %s", h.repo, h.rev);
    CHECK(hub_parse("o/n@refs/pr/1", &h) == 0 && strcmp(h.repo, "o/n") == 0 && strcmp(h.rev, "refs/pr/1") == 0, "rev");
    CHECK(hub_is_commit("0123456789abcdef0123456789abcdef01234567"), "a commit");
    CHECK(!hub_is_commit("0123456789ABCDEF0123456789abcdef01234567") && !hub_is_commit("main") &&
              !hub_is_commit("0123456789abcdef0123456789abcdef0123456"),
          "not commits");
    /* asking does not disturb the last error */
    CHECK(hub_parse("x", &h) == -1, "x parsed");
    char keep[512];
    snprintf(keep, sizeof keep, "%s", celer_last_error());
    CHECK(!celer_hub_is_name("y") && strcmp(keep, celer_last_error()) == 0, "celer_hub_is_name changed the error");
}

static void cache_dir(void) {
    char b[PATH_MAX];
    setting_override(SET_HF_HUB_CACHE, "/c/hub");
    setting_override(SET_HF_HOME, "/h");
    setting_override(SET_XDG_CACHE_HOME, "/x");
    setting_override(SET_HOME, "/home/u");
    CHECK(celer_hub_cache_dir(b, sizeof b) && strcmp(b, "/c/hub") == 0, "HF_HUB_CACHE: %s", b);
    setting_override(SET_HF_HUB_CACHE, NULL);
    CHECK(celer_hub_cache_dir(b, sizeof b) && strcmp(b, "/h/hub") == 0, "HF_HOME: %s", b);
    setting_override(SET_HF_HOME, "~/hf");
    CHECK(celer_hub_cache_dir(b, sizeof b) && strcmp(b, "/home/u/hf/hub") == 0, "~ expanded: %s", b);
    setting_override(SET_HF_HOME, NULL);
    CHECK(celer_hub_cache_dir(b, sizeof b) && strcmp(b, "/x/huggingface/hub") == 0, "XDG_CACHE_HOME: %s", b);
    setting_override(SET_XDG_CACHE_HOME, NULL);
    CHECK(celer_hub_cache_dir(b, sizeof b) && strcmp(b, "/home/u/.cache/huggingface/hub") == 0, "HOME: %s", b);
    CHECK(celer_hub_cache_dir(b, 8) == NULL, "a path that does not fit");
    setting_override(SET_HOME, NULL);
}

static void put(const char *path, const char *text) {
    FILE *f = fopen(path, "w");
    CHECK(f != NULL, "cannot write %s", path);
    if (f) fputs(text, f), fclose(f);
}

static void resolve(void) {
    char cache[300], p[600], want[600], got[PATH_MAX];
    snprintf(cache, sizeof cache, "%s/cache", tmp);
    setting_override(SET_HF_HUB_CACHE, cache);
    const char *c1 = "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa", *c2 = "bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb";
    snprintf(p, sizeof p, "%s/models--Org--Name/snapshots/%s", cache, c1);
    CHECK(hub_mkdirs(p) == 0, "%s", celer_last_error());
    snprintf(p, sizeof p, "%s/models--Org--Name/snapshots/%s", cache, c2);
    CHECK(hub_mkdirs(p) == 0, "%s", celer_last_error());
    snprintf(p, sizeof p, "%s/models--Org--Name/refs/refs/pr", cache);
    CHECK(hub_mkdirs(p) == 0, "%s", celer_last_error());
    snprintf(p, sizeof p, "%s/models--Org--Name/refs/main", cache);
    put(p, c1);
    snprintf(p, sizeof p, "%s/models--Org--Name/refs/refs/pr/1", cache);
    put(p, c2);
    struct {
        const char *name, *commit;
    } ok[] = {{"Org/Name", c1}, {"Org/Name@main", c1}, {"Org/Name@refs/pr/1", c2}, {"Org/Name@bbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbbb", c2}};
    for (size_t i = 0; i < sizeof ok / sizeof ok[0]; i++) {
        snprintf(want, sizeof want, "%s/models--Org--Name/snapshots/%s", cache, ok[i].commit);
        int rc = celer_hub_resolve(ok[i].name, got, sizeof got);
        CHECK(rc == 0 && strcmp(got, want) == 0, "%s: rc %d, %s (%s)", ok[i].name, rc, got, celer_last_error());
    }
    CHECK(celer_hub_resolve("Org/Name", got, 20) == -1, "a buffer too small");
    /* names are case-sensitive, as the cache's directories are */
    CHECK(celer_hub_resolve("org/name", got, sizeof got) == -1, "org/name found");
    snprintf(want, sizeof want, "no %s/models--org--name); download it with: celer pull org/name", cache);
    CHECK_STR_HAS(celer_last_error(), want);
    CHECK(celer_hub_resolve("Org/Name@dev", got, sizeof got) == -1, "@dev found");
    CHECK_STR_HAS(celer_last_error(), "revision 'dev' is not in the Hugging Face cache");
    CHECK_STR_HAS(celer_last_error(), "celer pull Org/Name@dev");
    CHECK(celer_hub_resolve("Org/Name@cccccccccccccccccccccccccccccccccccccccc", got, sizeof got) == -1, "@ccc found");
    CHECK_STR_HAS(celer_last_error(), "snapshot cccccccccccccccccccccccccccccccccccccccc is not in the Hugging Face cache");
    CHECK(celer_hub_resolve("not a name", got, sizeof got) == -1, "a bad name resolved");
    CHECK_STR_HAS(celer_last_error(), "is not a hub model name");
    setting_override(SET_HF_HUB_CACHE, NULL);
}

int main(void) {
    snprintf(tmp, sizeof tmp, "/tmp/celer_test_hub_XXXXXX");
    if (!mkdtemp(tmp)) return 1;
    RUN(sha256_vectors);
    RUN(names);
    RUN(cache_dir);
    RUN(resolve);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmp);
    if (system(cmd) != 0) printf("  could not remove %s\n", tmp);
    return harness_done();
}
