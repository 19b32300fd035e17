/* tests/test_util.h: file helpers for tests that build checkpoints on the fly in a
 * temporary directory. Header-only. */
#ifndef CELER_TEST_UTIL_H
#define CELER_TEST_UTIL_H
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char tu_root[256];

/* A fresh temporary directory for this test binary (removed by tu_cleanup). */
static inline const char *tu_tmpdir(void) {
    if (!tu_root[0]) {
        snprintf(tu_root, sizeof tu_root, "/tmp/celer-test-XXXXXX");
        if (!mkdtemp(tu_root)) { perror("mkdtemp"); exit(1); }
    }
    return tu_root;
}

static inline void tu_cleanup(void) {
    if (tu_root[0]) {
        char cmd[300];
        snprintf(cmd, sizeof cmd, "rm -rf '%s'", tu_root);
        if (system(cmd) != 0) fprintf(stderr, "cannot remove %s\n", tu_root);
    }
}

/* Makes dir <tmp>/name and returns its path (static buffer rotation of 4). */
static inline const char *tu_dir(const char *name) {
    static char bufs[4][512];
    static int k;
    char *p = bufs[k++ & 3];
    snprintf(p, 512, "%s/%s", tu_tmpdir(), name);
    char cmd[600];
    snprintf(cmd, sizeof cmd, "mkdir -p '%s'", p);
    if (system(cmd) != 0) exit(1);
    return p;
}

static inline int tu_write(const char *dir, const char *file, const void *data, size_t n) {
    char p[1024];
    snprintf(p, sizeof p, "%s/%s", dir, file);
    FILE *f = fopen(p, "wb");
    if (!f) return -1;
    size_t w = fwrite(data, 1, n, f);
    fclose(f);
    return w == n ? 0 : -1;
}

static inline int tu_write_str(const char *dir, const char *file, const char *s) { return tu_write(dir, file, s, strlen(s)); }

/* Symlinks dir/file to the repository file src (relative to the repo root). */
static inline int tu_link(const char *dir, const char *file, const char *src) {
    char abs[PATH_MAX], p[1024];
    if (!realpath(src, abs)) return -1;
    snprintf(p, sizeof p, "%s/%s", dir, file);
    unlink(p);
    return symlink(abs, p);
}

/* A safetensors file from a raw header string and n data bytes of zeros. */
static inline int tu_write_st(const char *dir, const char *file, const char *header, size_t data_bytes) {
    size_t hl = strlen(header);
    size_t n = 8 + hl + data_bytes;
    unsigned char *b = calloc(1, n);
    if (!b) return -1;
    for (int i = 0; i < 8; i++) b[i] = (unsigned char)((uint64_t)hl >> (8 * i));
    memcpy(b + 8, header, hl);
    int rc = tu_write(dir, file, b, n);
    free(b);
    return rc;
}
#endif
