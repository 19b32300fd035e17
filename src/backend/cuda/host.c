/* backend/cuda/host.c: the functions of libceler that libceler-cuda.so's code calls
 * (err_set, err_msg, setting_*), here forwarded to the program that opened the
 * library through the table it passed (cuda_host_api, backend/backend.h). The
 * library links nothing of libceler and the program exports nothing, so there is
 * one error message and one settings table: the program's. Linked only into the
 * shared library (static CUDA test binaries link libceler itself); hidden, so they
 * never stand in for the program's own. */
#include <stdarg.h>
#include <stdio.h>

#include "backend/cuda/cuda_backend.h"
#include "base/err.h"
#include "base/settings.h"

#define HIDDEN __attribute__((visibility("hidden")))

static const cuda_host_api *g_host;

void cuda_host_set(const cuda_host_api *h) { g_host = h; }

const cuda_host_api *cuda_host(void) { return g_host; }

HIDDEN int err_set(const char *fmt, ...) {
    char msg[2048]; /* base/err.c keeps as much */
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    return g_host->err_set("%s", msg);
}

HIDDEN const char *err_msg(void) { return g_host->err_msg(); }

HIDDEN int setting_flag(setting_id id) { return g_host->setting_flag(id); }

HIDDEN long setting_int(setting_id id) { return g_host->setting_int(id); }

HIDDEN const char *setting_str(setting_id id) { return g_host->setting_str(id); }
