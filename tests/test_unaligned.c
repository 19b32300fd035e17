/* tests/test_unaligned.c: safetensors files whose header length (or offsets) put tensor
 * data at odd addresses (issue #23 item 11). st_open must hand out aligned data with
 * the file's bytes, and the default model rewritten with a header one byte longer (so
 * every tensor starts at an odd offset) must compute transformers' logits, bit for bit
 * what the aligned file gives. Under `make test SAN=1` a misaligned float or uint32
 * load aborts (UBSan, no recovery), so the model case also proves no reader sees an
 * unaligned tensor. */
#include <math.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "celer.h"
#include "harness.h"
#include "io/safetensors.h"

static char tmpdir[256];

static void write_bytes(const char *path, const void *p, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    CHECK(fwrite(p, 1, n, f) == n, "short write %s", path);
    fclose(f);
}

/* A hand-made file: 3 bytes of U8, then F32 [3], BF16 [3], U32 [2] back to back, with
 * a header of odd length: nothing starts aligned. */
static void odd_offsets(void) {
    const char *h = "{\"u\":{\"dtype\":\"U8\",\"shape\":[3],\"data_offsets\":[0,3]},"
                    "\"f\":{\"dtype\":\"F32\",\"shape\":[3],\"data_offsets\":[3,15]},"
                    "\"b\":{\"dtype\":\"BF16\",\"shape\":[3],\"data_offsets\":[15,21]},"
                    "\"q\":{\"dtype\":\"U32\",\"shape\":[2],\"data_offsets\":[21,29]}} ";
    size_t hl = strlen(h);
    if (hl % 2 == 0) hl--; /* odd: drop the trailing space */
    uint8_t buf[512];
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)hl >> (8 * i));
    memcpy(buf + 8, h, hl);
    uint8_t *d = buf + 8 + hl;
    const float fv[3] = {1.5f, -2.25f, 3.0e-3f};
    const uint16_t bv[3] = {0x3f80, 0xc000, 0x4049};
    const uint32_t qv[2] = {0xdeadbeefu, 0x01234567u};
    d[0] = 7, d[1] = 8, d[2] = 9;
    memcpy(d + 3, fv, 12);
    memcpy(d + 15, bv, 6);
    memcpy(d + 21, qv, 8);
    char path[300];
    snprintf(path, sizeof path, "%s/odd.safetensors", tmpdir);
    write_bytes(path, buf, 8 + hl + 29);
    st_file *f = st_open(path);
    CHECK(f != NULL, "st_open: %s", celer_last_error());
    if (!f) return;
    const st_tensor *tf = st_find(f, "f"), *tb = st_find(f, "b"), *tq = st_find(f, "q"), *tu = st_find(f, "u");
    CHECK(tf && tb && tq && tu, "tensors missing");
    if (!tf || !tb || !tq || !tu) { st_close(f); return; }
    CHECK((uintptr_t)tf->data % 4 == 0 && (uintptr_t)tb->data % 4 == 0 && (uintptr_t)tq->data % 4 == 0,
          "misaligned data: f %p b %p q %p", tf->data, tb->data, tq->data);
    const float *fp = tf->data;
    const uint16_t *bp = tb->data;
    const uint32_t *qp = tq->data;
    const uint8_t *up = tu->data;
    for (int i = 0; i < 3; i++) CHECK(fp[i] == fv[i] && bp[i] == bv[i] && up[i] == 7 + i, "element %d differs", i);
    CHECK(qp[0] == qv[0] && qp[1] == qv[1], "u32 differs");
    st_close(f);
}

/* Copies models/default into dir, with model.safetensors' header one space longer. */
static int misaligned_default(const char *dir) {
    mkdir(dir, 0755);
    static const char *const files[] = {"config.json", "generation_config.json", "tokenizer.json", "tokenizer_config.json"};
    char src[512], dst[512], cwd[400];
    if (!getcwd(cwd, sizeof cwd)) return -1;
    for (size_t i = 0; i < sizeof files / sizeof *files; i++) {
        snprintf(src, sizeof src, "%s/models/default/%s", cwd, files[i]);
        snprintf(dst, sizeof dst, "%s/%s", dir, files[i]);
        if (symlink(src, dst) != 0) return -1;
    }
    FILE *f = fopen("models/default/model.safetensors", "rb");
    if (!f) return -1;
    fseek(f, 0, SEEK_END);
    size_t n = (size_t)ftell(f);
    fseek(f, 0, SEEK_SET);
    uint8_t *b = malloc(n + 1);
    size_t got = fread(b, 1, n, f);
    fclose(f);
    if (got != n) { free(b); return -1; }
    uint64_t hl = 0;
    for (int i = 0; i < 8; i++) hl |= (uint64_t)b[i] << (8 * i);
    /* the header grows by one trailing space: 8 + hl + 1 is odd when 8 + hl was even */
    memmove(b + 8 + hl + 1, b + 8 + hl, n - 8 - hl);
    b[8 + hl] = ' ';
    hl++;
    for (int i = 0; i < 8; i++) b[i] = (uint8_t)(hl >> (8 * i));
    snprintf(dst, sizeof dst, "%s/model.safetensors", dir);
    write_bytes(dst, b, n + 1);
    free(b);
    return (8 + hl) % 2 == 1 ? 0 : -1;
}

static void default_model_misaligned(void) {
    char dir[300];
    snprintf(dir, sizeof dir, "%s/default", tmpdir);
    CHECK(misaligned_default(dir) == 0, "could not write the misaligned copy");
    /* transformers' top logits after "In the beginning God" (tests/test_default_model.c) */
    static const int32_t ids[] = {0, 1145, 264, 2087, 392};
    static const int32_t top[] = {274, 544, 3384, 1};
    static const float want[] = {12.317714f, 8.075996f, 7.554333f, 7.513818f};
    const char *dirs[2] = {"models/default", dir};
    float *lg[2] = {NULL, NULL};
    int nv = 0;
    for (int k = 0; k < 2; k++) {
        celer_model *m = celer_model_open(dirs[k], 2);
        CHECK(m != NULL, "%s: %s", dirs[k], celer_last_error());
        if (!m) break;
        celer_model_info in;
        celer_model_get_info(m, &in);
        nv = in.vocab_size;
        celer_session *s = celer_session_new(m, 64, 16);
        CHECK(s && celer_session_eval(s, ids, 5, NULL, 0) == 0, "eval: %s", celer_last_error());
        if (s) {
            lg[k] = malloc((size_t)nv * sizeof(float));
            memcpy(lg[k], celer_session_logits(s), (size_t)nv * sizeof(float));
        }
        celer_session_free(s);
        celer_model_free(m);
    }
    if (lg[0] && lg[1]) {
        for (int k = 0; k < 4; k++)
            CHECK(fabsf(lg[1][top[k]] - want[k]) <= 2e-3f, "logit[%d] = %.6f, transformers %.6f", top[k], lg[1][top[k]], want[k]);
        CHECK(!memcmp(lg[0], lg[1], (size_t)nv * sizeof(float)), "misaligned copy's logits differ from the aligned file's");
    }
    free(lg[0]);
    free(lg[1]);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/celer-unaligned-XXXXXX");
    if (!mkdtemp(tmpdir)) { printf("cannot make a temporary directory\n"); return 1; }
    RUN(odd_offsets);
    RUN(default_model_misaligned);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd)) {}
    return harness_done();
}
