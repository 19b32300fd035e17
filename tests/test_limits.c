/* tests/test_limits.c: every file and template limit of src/base/limits.h is hit
 * once, just past it, and must give its one clear message (naming the file or the
 * template position and the limit); where cheap, the value at the limit must still
 * pass. The server's limits are tested by tests/cli_limits.sh. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/limits.h"
#include "celer.h"
#include "celer_tokenizer.h"
#include "harness.h"
#include "io/safetensors.h"

static char tmpdir[256];

static void write_file(const char *path, const void *data, size_t n) {
    FILE *f = fopen(path, "wb");
    CHECK(f != NULL, "cannot write %s", path);
    if (!f) return;
    if (n) CHECK(fwrite(data, 1, n, f) == n, "short write %s", path);
    fclose(f);
}

/* ---- safetensors ---- */

static void st_header_size(void) {
    /* a sparse file whose header length is one byte over the limit */
    char path[512];
    snprintf(path, sizeof path, "%s/big_header.safetensors", tmpdir);
    uint64_t hlen = (uint64_t)CELER_MAX_ST_HEADER + 1;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)(hlen >> (8 * i));
    write_file(path, len8, 8);
    CHECK(truncate(path, (off_t)(8 + hlen)) == 0, "truncate");
    st_file *f = st_open(path);
    CHECK(f == NULL, "opened a file with a %llu-byte header", (unsigned long long)hlen);
    CHECK_STR_HAS(celer_last_error(), "big_header.safetensors");
    CHECK_STR_HAS(celer_last_error(), "exceeds the 268435456-byte limit");
    st_close(f);
    unlink(path);
}

/* A file with n one-float tensors "t0".."t{n-1}". */
static void write_tensors(const char *path, int n) {
    size_t cap = (size_t)n * 80 + 64, k = 0;
    char *h = malloc(cap);
    k += (size_t)snprintf(h + k, cap - k, "{\"__metadata__\":{\"format\":\"pt\"}");
    for (int i = 0; i < n; i++)
        k += (size_t)snprintf(h + k, cap - k, ",\"t%d\":{\"dtype\":\"F32\",\"shape\":[1],\"data_offsets\":[%d,%d]}", i, 4 * i, 4 * i + 4);
    k += (size_t)snprintf(h + k, cap - k, "}");
    while (k % 8) h[k++] = ' ';
    size_t total = 8 + k + 4 * (size_t)n;
    uint8_t *buf = calloc(1, total);
    for (int i = 0; i < 8; i++) buf[i] = (uint8_t)((uint64_t)k >> (8 * i));
    memcpy(buf + 8, h, k);
    write_file(path, buf, total);
    free(buf);
    free(h);
}

static void st_tensor_count(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/many.safetensors", tmpdir);
    write_tensors(path, CELER_MAX_ST_TENSORS);
    st_file *f = st_open(path);
    CHECK(f != NULL, "%d tensors (the limit) refused: %s", CELER_MAX_ST_TENSORS, celer_last_error());
    st_close(f);
    write_tensors(path, CELER_MAX_ST_TENSORS + 1);
    f = st_open(path);
    CHECK(f == NULL, "opened a file with %d tensors", CELER_MAX_ST_TENSORS + 1);
    CHECK_STR_HAS(celer_last_error(), "many.safetensors");
    CHECK_STR_HAS(celer_last_error(), "header lists 131073 tensors, over the limit of 131072 per file");
    st_close(f);
    unlink(path);
}

static void st_dims(void) {
    char path[512];
    snprintf(path, sizeof path, "%s/dims.safetensors", tmpdir);
    const char *h = "{\"x\":{\"dtype\":\"F32\",\"shape\":[1,1,1,1,1,1,1,1,1],\"data_offsets\":[0,4]}}    ";
    size_t k = strlen(h);
    uint8_t buf[256] = {0};
    buf[0] = (uint8_t)k;
    memcpy(buf + 8, h, k);
    write_file(path, buf, 8 + k + 4);
    st_file *f = st_open(path);
    CHECK(f == NULL, "opened a tensor of %d dimensions", CELER_MAX_ST_DIMS + 1);
    CHECK_STR_HAS(celer_last_error(), "dims.safetensors");
    CHECK_STR_HAS(celer_last_error(), "tensor \"x\": 9 dimensions (at most 8)");
    st_close(f);
    unlink(path);
}

/* ---- tokenizer.json ---- */

static celer_tokenizer *open_json(const char *name, const char *json) {
    char dir[512], path[600];
    snprintf(dir, sizeof dir, "%s/%s", tmpdir, name);
    mkdir(dir, 0755);
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    write_file(path, json, strlen(json));
    return celer_tokenizer_open(dir);
}

static char *repeat(char c, size_t n) {
    char *s = malloc(n + 1);
    memset(s, c, n);
    s[n] = 0;
    return s;
}

/* {"model": BPE with vocab {a, b, ab, <long token>}, merges [...]} with the long
 * token (n bytes of 'x') in the vocab, or in added_tokens, or as a merge. */
static celer_tokenizer *tokenizer_with(const char *name, const char *where, size_t n) {
    char *x = repeat('x', n), *half = repeat('y', n / 2), *rest = repeat('z', n - n / 2);
    size_t cap = 3 * n + 1024;
    char *j = malloc(cap);
    if (!strcmp(where, "vocab"))
        snprintf(j, cap, "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"%s\": 3}, \"merges\": [\"a b\"]}}", x);
    else if (!strcmp(where, "added"))
        snprintf(j, cap,
                 "{\"added_tokens\": [{\"id\": 3, \"content\": \"%s\", \"special\": true}], "
                 "\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}}",
                 x);
    else
        snprintf(j, cap,
                 "{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2, \"%s\": 3, \"%s\": 4, \"%s%s\": 5}, "
                 "\"merges\": [\"a b\", \"%s %s\"]}}",
                 half, rest, half, rest, half, rest);
    celer_tokenizer *t = open_json(name, j);
    free(j);
    free(x);
    free(half);
    free(rest);
    return t;
}

static void token_bytes(void) {
    celer_tokenizer *t = tokenizer_with("tok_at_limit", "vocab", CELER_MAX_TOKEN_BYTES);
    CHECK(t != NULL, "a %d-byte token (the limit) refused: %s", CELER_MAX_TOKEN_BYTES, celer_last_error());
    celer_tokenizer_free(t);
    t = tokenizer_with("tok_over", "vocab", CELER_MAX_TOKEN_BYTES + 1);
    CHECK(t == NULL, "opened a tokenizer with a %d-byte token", CELER_MAX_TOKEN_BYTES + 1);
    CHECK_STR_HAS(celer_last_error(), "tok_over/tokenizer.json: model.vocab");
    CHECK_STR_HAS(celer_last_error(), "token of 65537 bytes exceeds the 65536-byte limit");
    celer_tokenizer_free(t);
    t = tokenizer_with("added_over", "added", CELER_MAX_TOKEN_BYTES + 1);
    CHECK(t == NULL, "opened a tokenizer with a %d-byte added token", CELER_MAX_TOKEN_BYTES + 1);
    CHECK_STR_HAS(celer_last_error(), "added_over/tokenizer.json: added_tokens[0]");
    CHECK_STR_HAS(celer_last_error(), "exceeds the 65536-byte limit");
    celer_tokenizer_free(t);
}

static void merge_bytes(void) {
    celer_tokenizer *t = tokenizer_with("merge_at_limit", "merge", CELER_MAX_MERGE_BYTES);
    CHECK(t != NULL, "a %d-byte merge (the limit) refused: %s", CELER_MAX_MERGE_BYTES, celer_last_error());
    celer_tokenizer_free(t);
    t = tokenizer_with("merge_over", "merge", CELER_MAX_MERGE_BYTES + 1);
    CHECK(t == NULL, "opened a tokenizer with a %d-byte merge", CELER_MAX_MERGE_BYTES + 1);
    CHECK_STR_HAS(celer_last_error(), "merge_over/tokenizer.json: model.merges[1] has 1025 bytes, over the 1024-byte limit");
    celer_tokenizer_free(t);
}

static void json_depth(void) {
    /* tokenizer.json nested one level past the limit (inside an unknown-to-nobody key) */
    size_t d = CELER_MAX_JSON_DEPTH + 1;
    char *j = malloc(2 * d + 200);
    size_t k = (size_t)sprintf(j, "{\"model\": ");
    for (size_t i = 0; i < d; i++) j[k++] = '[';
    for (size_t i = 0; i < d; i++) j[k++] = ']';
    strcpy(j + k, "}");
    celer_tokenizer *t = open_json("deep", j);
    CHECK(t == NULL, "opened a tokenizer.json nested %zu deep", d + 1);
    CHECK_STR_HAS(celer_last_error(), "deep/tokenizer.json");
    CHECK_STR_HAS(celer_last_error(), "invalid JSON at line 1, column 522: nested too deeply");
    celer_tokenizer_free(t);
    free(j);
}

/* ---- templates ---- */

static void expect_render_error(const char *name, const char *tmpl, size_t n, const char *want) {
    char *out = celer_jinja_render(tmpl, n, NULL);
    CHECK(out == NULL, "%s: rendered (%zu bytes)", name, out ? strlen(out) : 0);
    CHECK_STR_HAS(celer_last_error(), want);
    free(out);
}

static void template_bytes(void) {
    char *t = repeat('x', CELER_MAX_TEMPLATE_BYTES + 1);
    char *out = celer_jinja_render(t, CELER_MAX_TEMPLATE_BYTES, NULL);
    CHECK(out && strlen(out) == CELER_MAX_TEMPLATE_BYTES, "a template of %u bytes (the limit) refused: %s", CELER_MAX_TEMPLATE_BYTES,
          celer_last_error());
    free(out);
    expect_render_error("template_bytes", t, CELER_MAX_TEMPLATE_BYTES + 1, "template of 1048577 bytes exceeds the 1048576-byte limit");
    free(t);
}

static void template_output(void) {
    /* 1 KiB per iteration: 32768 iterations reach the limit, one more passes it */
    char *x = repeat('x', 1024), t[2048];
    snprintf(t, sizeof t, "{%% for i in range(%u) %%}%s{%% endfor %%}", CELER_MAX_TEMPLATE_OUTPUT / 1024, x);
    char *out = celer_jinja_render(t, strlen(t), NULL);
    CHECK(out && strlen(out) == CELER_MAX_TEMPLATE_OUTPUT, "output of %u bytes (the limit) refused: %s", CELER_MAX_TEMPLATE_OUTPUT,
          celer_last_error());
    free(out);
    snprintf(t, sizeof t, "{%% for i in range(%u) %%}%s{%% endfor %%}", CELER_MAX_TEMPLATE_OUTPUT / 1024 + 1, x);
    expect_render_error("template_output", t, strlen(t), "template:1:");
    expect_render_error("template_output", t, strlen(t), "the output exceeds 33554432 bytes (the limit)");
    free(x);
}

static void template_depth(void) {
    const char *m = "{% macro f(n) %}{{ f(n + 1) }}{% endmacro %}{{ f(0) }}";
    expect_render_error("macro", m, strlen(m), "macro recursion too deep");
    char t[4096];
    size_t k = 0;
    t[k++] = '{';
    t[k++] = '{';
    for (int i = 0; i <= CELER_MAX_TEMPLATE_EXPR_DEPTH; i++) t[k++] = '(';
    t[k++] = '1';
    for (int i = 0; i <= CELER_MAX_TEMPLATE_EXPR_DEPTH; i++) t[k++] = ')';
    t[k++] = '}';
    t[k++] = '}';
    expect_render_error("parens", t, k, "expression nested too deeply");
    k = 0;
    for (int i = 0; i <= CELER_MAX_TEMPLATE_DEPTH; i++) k += (size_t)sprintf(t + k, "{%%if 1%%}");
    expect_render_error("blocks", t, k, "nested too deeply");
}

static void template_range(void) {
    char t[128];
    snprintf(t, sizeof t, "{{ range(%d) | length }}", CELER_MAX_TEMPLATE_RANGE);
    char *out = celer_jinja_render(t, strlen(t), NULL);
    CHECK(out && !strcmp(out, "1000000"), "range(%d) (the limit) refused: %s", CELER_MAX_TEMPLATE_RANGE, celer_last_error());
    free(out);
    snprintf(t, sizeof t, "{{ range(%d) | length }}", CELER_MAX_TEMPLATE_RANGE + 1);
    expect_render_error("range", t, strlen(t), "range too large (over 1000000 elements)");
}

static void template_steps(void) {
    /* 40 empty ifs per iteration: 41 steps each; 250000 iterations pass 10M steps */
    char t[2048];
    size_t k = (size_t)sprintf(t, "{%% for i in range(250000) %%}");
    for (int i = 0; i < 40; i++) k += (size_t)sprintf(t + k, "{%% if 0 %%}{%% endif %%}");
    k += (size_t)sprintf(t + k, "{%% endfor %%}");
    expect_render_error("steps", t, k, "rendering takes more than 10000000 steps (the limit");
}

static void template_memory(void) {
    /* a string doubled 30 times would be 1 GiB */
    const char *t = "{% set ns = namespace(s='x') %}{% for i in range(30) %}{% set ns.s = ns.s ~ ns.s %}{% endfor %}{{ ns.s | length }}";
    expect_render_error("memory", t, strlen(t), "rendering needs more than 268435456 bytes of memory (the limit)");
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/celer-limits-XXXXXX");
    if (!mkdtemp(tmpdir)) return 1;
    RUN(st_header_size);
    RUN(st_tensor_count);
    RUN(st_dims);
    RUN(token_bytes);
    RUN(merge_bytes);
    RUN(json_depth);
    RUN(template_bytes);
    RUN(template_output);
    RUN(template_depth);
    RUN(template_range);
    RUN(template_steps);
    RUN(template_memory);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", tmpdir);
    if (system(cmd) != 0) return 1;
    return harness_done();
}
