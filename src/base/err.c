/* base/err.c: the thread-local error message behind err.h. */
#include "base/err.h"

#include <stdio.h>
#include <string.h>

#define ERR_CAP 2048
static _Thread_local char err_buf[ERR_CAP];

int err_set(const char *fmt, ...) {
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err_buf, sizeof err_buf, fmt, ap);
    va_end(ap);
    return -1;
}

int err_prefix(const char *fmt, ...) {
    char head[ERR_CAP], old[ERR_CAP];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(head, sizeof head, fmt, ap);
    va_end(ap);
    memcpy(old, err_buf, sizeof old);
    size_t n = strlen(head);
    if (n > ERR_CAP - 3) n = ERR_CAP - 3;
    memcpy(err_buf, head, n);
    memcpy(err_buf + n, ": ", 2);
    size_t m = strlen(old);
    if (m > ERR_CAP - 1 - n - 2) m = ERR_CAP - 1 - n - 2;
    memcpy(err_buf + n + 2, old, m);
    err_buf[n + 2 + m] = 0;
    return -1;
}

const char *err_msg(void) { return err_buf; }

void err_clear(void) { err_buf[0] = 0; }
