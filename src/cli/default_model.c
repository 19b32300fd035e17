/* cli/default_model.c: the model directory of a command (cli/default_model.h): a
 * local directory, a hub name looked up in the Hugging Face cache, or the embedded
 * default model. */
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "celer.h"
#include "cli/default_model.h"
#include "cli/pull.h"

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

/* Asks on the terminal whether to pull name; 1 for yes. */
static int ask_pull(const char *cmd, const char *name) {
    char cache[PATH_MAX];
    const char *ep = celer_setting("HF_ENDPOINT");
    fprintf(stderr, "celer %s: %s is not in the Hugging Face cache (%s).\nDownload it from %s now? [y/N] ", cmd, name,
            celer_hub_cache_dir(cache, sizeof cache) ? cache : "no cache directory", ep ? ep : "https://huggingface.co");
    fflush(stderr);
    char line[64];
    if (!fgets(line, sizeof line, stdin)) {
        fputc('\n', stderr);
        return 0;
    }
    return line[0] == 'y' || line[0] == 'Y';
}

const char *cli_model_resolve(const char *cmd, const char *name, char *buf, size_t n, int offer) {
    struct stat st;
    if (!name || stat(name, &st) == 0 || !celer_hub_is_name(name)) return name; /* a local path wins */
    char want[PATH_MAX];
    snprintf(want, sizeof want, "%s", name); /* name may live in buf */
    if (celer_hub_resolve(want, buf, n) == 0) return buf;
    if (offer && isatty(0) && isatty(2)) {
        if (ask_pull(cmd, want)) {
            if (cli_pull(cmd, want, NULL, 0, 0, buf, n)) return NULL;
            return buf;
        }
        cli_error(cmd, "%s was not downloaded; get it with: celer pull %s", want, want);
        return NULL;
    }
    cli_error(cmd, "%s", celer_last_error());
    return NULL;
}

const char *cli_model_arg(const args *a, char *buf, size_t n, int *status) {
    const char *dir = args_get(a, "--model");
    *status = 1; /* a hub name not cached is not a usage error: `celer pull NAME` mends it */
    if (dir) return cli_model_resolve(a->cmd, dir, buf, n, 0);
    if ((dir = cli_default_model(buf, n))) return cli_model_resolve(a->cmd, dir, buf, n, 0);
    args_usage_error(a, "missing -m DIR, and the default model (models/default) is not there: give -m DIR, or "
                        "set CELER_DEFAULT_MODEL to a checkpoint directory");
    *status = 2;
    return NULL;
}
