/* cli/default_model.c: finds the embedded default model (cli/default_model.h). */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "celer.h"
#include "cli/default_model.h"

static int has_config(const char *dir) {
    char p[PATH_MAX + 128];
    struct stat st;
    if ((size_t)snprintf(p, sizeof p, "%.*s/config.json", PATH_MAX, dir) >= sizeof p) return 0;
    return stat(p, &st) == 0 && S_ISREG(st.st_mode);
}

const char *cli_default_model(char *buf, size_t n) {
    const char *env = celer_setting("CELER_DEFAULT_MODEL");
    if (env && *env) return env;
    char exe[PATH_MAX];
    ssize_t k = readlink("/proc/self/exe", exe, sizeof exe - 1);
    if (k > 0 && n >= PATH_MAX) {
        exe[k] = '\0';
        char *slash = strrchr(exe, '/');
        if (slash) {
            *slash = '\0';
            const char *rel[] = {"/../models/default", "/../share/celer/models/default", "/models/default"};
            for (size_t i = 0; i < sizeof rel / sizeof rel[0]; i++) {
                char cand[PATH_MAX + 64];
                snprintf(cand, sizeof cand, "%s%s", exe, rel[i]);
                if (has_config(cand) && realpath(cand, buf)) return buf;
            }
        }
    }
    return has_config("models/default") ? "models/default" : NULL;
}

const char *cli_model_arg(const args *a, char *buf, size_t n) {
    const char *dir = args_get(a, "--model");
    if (dir) return dir;
    if ((dir = cli_default_model(buf, n))) return dir;
    args_usage_error(a, "missing -m DIR, and the default model (models/default) is not there: give -m DIR, or "
                        "set CELER_DEFAULT_MODEL to a checkpoint directory");
    return NULL;
}
