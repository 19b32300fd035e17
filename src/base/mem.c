/* base/mem.c: allocation helpers that report instead of aborting. */
#include "base/mem.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"

void *mem_alloc(size_t n, const char *what) {
    void *p = malloc(n ? n : 1);
    if (!p) err_set("out of memory allocating %zu bytes for %s", n, what);
    return p;
}

void *mem_calloc(size_t n, size_t size, const char *what) {
    void *p = calloc(n ? n : 1, size ? size : 1);
    if (!p) err_set("out of memory allocating %zu x %zu bytes for %s", n, size, what);
    return p;
}

void *mem_aligned(size_t n, const char *what) {
    void *p = NULL;
    size_t r = (n + 63) & ~(size_t)63;
    if (posix_memalign(&p, 64, r ? r : 64) != 0) {
        err_set("out of memory allocating %zu bytes for %s", n, what);
        return NULL;
    }
    return p;
}

char *mem_strdup(const char *s) {
    size_t n = strlen(s) + 1;
    char *p = mem_alloc(n, "string");
    if (p) memcpy(p, s, n);
    return p;
}

int mem_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n, const char *what) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap : 64;
        while (c < *len + n + 1) c *= 2;
        char *p = realloc(*buf, c);
        if (!p) return err_set("out of memory growing %s to %zu bytes", what, c);
        *buf = p;
        *cap = c;
    }
    if (n) memcpy(*buf + *len, s, n);
    *len += n;
    (*buf)[*len] = 0;
    return 0;
}

char *mem_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        err_set("%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (cap - n < 65536) {
            cap = cap ? cap * 2 : 65536 + 1;
            char *nb = realloc(buf, cap);
            if (!nb) {
                free(buf);
                fclose(f);
                err_set("%s: out of memory reading file", path);
                return NULL;
            }
            buf = nb;
        }
        size_t got = fread(buf + n, 1, cap - n - 1, f);
        n += got;
        if (got == 0) break;
    }
    int bad = ferror(f);
    fclose(f);
    if (bad) {
        free(buf);
        err_set("%s: read error", path);
        return NULL;
    }
    buf[n] = 0;
    if (len) *len = n;
    return buf;
}
