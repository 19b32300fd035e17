/* base/mem.h: allocation helpers. They return NULL and set an error naming what was
 * being allocated when memory runs out; none of them aborts. */
#ifndef CELER_MEM_H
#define CELER_MEM_H
#include <stddef.h>

void *mem_alloc(size_t n, const char *what);             /* malloc, error on failure */
void *mem_calloc(size_t n, size_t size, const char *what);
void *mem_aligned(size_t n, const char *what);           /* 64-byte aligned, free() it */
char *mem_strdup(const char *s);
/* Appends s[n] and a NUL to the text *buf of *len bytes (capacity *cap, doubling as it
 * grows; *buf NULL and both 0 to start). 0, or -1 with an error naming what; *buf is
 * then unchanged. */
int mem_append(char **buf, size_t *len, size_t *cap, const char *s, size_t n, const char *what);
/* Reads a whole file into a NUL-terminated buffer; *len gets its size. */
char *mem_read_file(const char *path, size_t *len);
#endif
