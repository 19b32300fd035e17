/* base/err.h: error reporting. Library functions that fail return -1 (or NULL) and
 * leave one message describing what failed and where (file, key, offset) in a
 * thread-local buffer; callers add context with err_prefix. The buffer is the one
 * documented piece of per-thread global state. */
#ifndef CELER_ERR_H
#define CELER_ERR_H
#include <stdarg.h>

#if defined(__GNUC__)
#define CEL_PRINTF(a, b) __attribute__((format(printf, a, b)))
#else
#define CEL_PRINTF(a, b)
#endif

/* Sets the message (replacing any earlier one) and returns -1. */
int err_set(const char *fmt, ...) CEL_PRINTF(1, 2);
/* Prepends "context: " to the current message and returns -1. */
int err_prefix(const char *fmt, ...) CEL_PRINTF(1, 2);
/* The current message ("" when none). Valid until the next err_* call on this thread. */
const char *err_msg(void);
void err_clear(void);
#endif
