/* backend/backend_open.c: picks the backend a device string names. The CUDA backend
 * lives in its own shared library (libceler-cuda.so, next to the executable or named
 * by $CELER_CUDA_LIB) so that the celer binary runs on machines without the CUDA
 * libraries; it is loaded with dlopen the first time a GPU is asked for, and given
 * the few functions of the program it calls (cuda_host_api): the program exports
 * nothing. */
#include <dlfcn.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/settings.h"
#include "backend/backend.h"
#include "backend/cpu/cpu.h"
#include "base/err.h"

/* dlopen handle of libceler-cuda.so, kept for the life of the process (backends
 * made from it may outlive any one caller). */
static void *g_cuda_lib;

static void *try_open(const char *path, char *tried, size_t nt) {
    size_t k = strlen(tried), pl = strlen(path);
    if (k + pl + 3 < nt) {
        if (k) {
            memcpy(tried + k, ", ", 2);
            k += 2;
        }
        memcpy(tried + k, path, pl + 1);
    }
    return dlopen(path, RTLD_NOW | RTLD_LOCAL);
}

/* The library next to the executable, one or two folders up (build/tests/...), or
 * $CELER_CUDA_LIB. */
static void *open_cuda_lib(char *tried, size_t nt, char *why, size_t nw) {
    if (g_cuda_lib) return g_cuda_lib;
    void *h = NULL;
    const char *env = setting_str(SET_CELER_CUDA_LIB);
    if (env && *env) {
        h = try_open(env, tried, nt);
    } else {
        char exe[PATH_MAX];
        ssize_t n = readlink("/proc/self/exe", exe, sizeof exe - 1);
        if (n > 0) {
            exe[n] = 0;
            for (int up = 0; up < 3 && !h; up++) {
                char *slash = strrchr(exe, '/');
                if (!slash) break;
                *slash = 0;
                char path[PATH_MAX + 32];
                snprintf(path, sizeof path, "%s/libceler-cuda.so", exe);
                if (access(path, R_OK) == 0) h = try_open(path, tried, nt);
            }
        }
    }
    if (!h) {
        const char *e = dlerror();
        snprintf(why, nw, "%s", e ? e : "not found");
    }
    return g_cuda_lib = h;
}

/* What the library calls back into (it links nothing of libceler). */
static const cuda_host_api g_host = {
    .err_set = err_set,
    .err_msg = err_msg,
    .setting_flag = setting_flag,
    .setting_int = setting_int,
    .setting_str = setting_str,
    .moe_route = cpu_moe_route,
};

static backend *open_cuda(int id, int64_t max_cols) {
    char tried[1024] = "", why[512] = "";
    void *h = open_cuda_lib(tried, sizeof tried, why, sizeof why);
    if (!h) {
        err_set("--device cuda: cannot load libceler-cuda.so (%s%s%s); build it with `make cuda` on a machine with nvcc, "
                "or set CELER_CUDA_LIB to its path", tried[0] ? "tried " : "", tried, why[0] ? why : "");
        return NULL;
    }
    backend_cuda_new_fn make = (backend_cuda_new_fn)dlsym(h, BACKEND_CUDA_ENTRY);
    if (!make) {
        err_set("libceler-cuda.so has no %s (a stale build? run `make cuda`)", BACKEND_CUDA_ENTRY);
        return NULL;
    }
    return make(id, max_cols, &g_host);
}

/* A GPU the driver exposes: its device node exists. Checked before loading the
 * library so CPU-only machines never pay for loading it. */
static int gpu_present(void) { return access("/dev/nvidiactl", F_OK) == 0; }

backend *backend_open(const char *device, int n_threads, int64_t max_cols) {
    if (!device || !*device || strcmp(device, "auto") == 0) {
        const char *env = setting_str(SET_CELER_DEVICE);
        if (env && *env && strcmp(env, "auto") != 0) return backend_open(env, n_threads, max_cols);
        if (gpu_present()) {
            backend *b = open_cuda(0, max_cols);
            if (b) return b;
            err_clear();
        }
        return backend_cpu_new(n_threads, max_cols);
    }
    if (strcmp(device, "cpu") == 0) return backend_cpu_new(n_threads, max_cols);
    if (strncmp(device, "cuda", 4) == 0) {
        int id = 0;
        if (device[4] == ':') {
            char *end;
            long v = strtol(device + 5, &end, 10);
            if (end == device + 5 || *end || v < 0 || v > 255) {
                err_set("--device %s: expected cuda or cuda:N with N a GPU number", device);
                return NULL;
            }
            id = (int)v;
        } else if (device[4]) {
            err_set("unknown device \"%s\" (expected cpu, cuda, cuda:N or auto)", device);
            return NULL;
        }
        return open_cuda(id, max_cols);
    }
    err_set("unknown device \"%s\" (expected cpu, cuda, cuda:N or auto)", device);
    return NULL;
}

void backend_free(backend *b) {
    if (b) b->ops->destroy(b);
}

int backend_threads(const backend *b) { return b->threads; }
