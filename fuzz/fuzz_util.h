/* fuzz/fuzz_util.h: helpers shared by the libFuzzer harnesses: a private scratch
 * directory in /dev/shm (or /tmp) and writing the input to a file there, since the
 * parsers under test read files (safetensors by mmap). */
#ifndef CELER_FUZZ_UTIL_H
#define CELER_FUZZ_UTIL_H
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

static char fz_dir[256];

static inline const char *fz_scratch(void) {
    if (!fz_dir[0]) {
        snprintf(fz_dir, sizeof fz_dir, "%s/celer-fuzz-%d", access("/dev/shm", W_OK) == 0 ? "/dev/shm" : "/tmp", (int)getpid());
        char cmd[300];
        snprintf(cmd, sizeof cmd, "mkdir -p '%s'", fz_dir);
        if (system(cmd) != 0) abort();
    }
    return fz_dir;
}

/* Writes data to <scratch>/name and returns the path (static buffer). */
static inline const char *fz_file(const char *name, const uint8_t *data, size_t n) {
    static char p[512];
    snprintf(p, sizeof p, "%s/%s", fz_scratch(), name);
    FILE *f = fopen(p, "wb");
    if (!f) abort();
    if (n && fwrite(data, 1, n, f) != n) abort();
    fclose(f);
    return p;
}

/* Symlinks <scratch>/name to a repository file (the harness runs from the repo root). */
static inline void fz_link(const char *name, const char *src) {
    char abs[PATH_MAX], p[512];
    if (!realpath(src, abs)) { fprintf(stderr, "fuzz: missing %s (run from the repository root)\n", src); abort(); }
    snprintf(p, sizeof p, "%s/%s", fz_scratch(), name);
    unlink(p);
    if (symlink(abs, p) != 0) abort();
}

/* A NUL-terminated copy of the input. */
static inline char *fz_str(const uint8_t *data, size_t n) {
    char *s = malloc(n + 1);
    if (!s) abort();
    memcpy(s, data, n);
    s[n] = 0;
    return s;
}
#endif
