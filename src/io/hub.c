/* io/hub.c: hub names (ORG/NAME[@REVISION]) and their lookup in the local Hugging
 * Face cache, the way huggingface_hub finds them (io/hub.h has the layout). Reads
 * only; io/hub_pull.c writes. */
#include "io/hub.h"

#include <ctype.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/settings.h"
#include "celer.h"

/* One part of a repository id: letters, digits, '-', '_', '.'; not starting or
 * ending with '-' or '.'; no "--" or ".." (huggingface_hub's validate_repo_id). */
static int id_part_ok(const char *s, size_t n) {
    if (n == 0 || s[0] == '-' || s[0] == '.' || s[n - 1] == '-' || s[n - 1] == '.') return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (!isalnum(c) && c != '-' && c != '_' && c != '.') return 0;
        if (i && (c == '-' || c == '.') && s[i - 1] == c) return 0;
    }
    return 1;
}

/* A revision: a branch, tag or commit; refs/pr/N and branch names with '/' allowed.
 * What git refuses in a ref name (control bytes, space, ~^:?*[\, "..", "//", a
 * leading or trailing '/') is refused. */
static int rev_ok(const char *r) {
    size_t n = strlen(r);
    if (n == 0 || n > HUB_MAX_REV || r[0] == '/' || r[n - 1] == '/' || r[0] == '.' || strstr(r, "..") ||
        strstr(r, "//") || strstr(r, "/."))
        return 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)r[i];
        if (c <= ' ' || c == 0x7f || strchr("~^:?*[\\", c)) return 0;
    }
    return 1;
}

int hub_parse(const char *s, hub_name *h) {
    memset(h, 0, sizeof *h);
    const char *at = strchr(s, '@'), *end = at ? at : s + strlen(s);
    const char *slash = memchr(s, '/', (size_t)(end - s));
    size_t n = (size_t)(end - s);
    if (!slash || n > HUB_MAX_ID || !id_part_ok(s, (size_t)(slash - s)) ||
        !id_part_ok(slash + 1, (size_t)(end - slash - 1)))
        return err_set("'%s' is not a hub model name (ORG/NAME[@REVISION]: letters, digits, '-', '_', '.', "
                       "at most %d characters before the '@')", s, HUB_MAX_ID);
    memcpy(h->repo, s, n);
    if (at) {
        if (!rev_ok(at + 1)) return err_set("'%s': '%s' is not a revision (a branch, tag or commit)", s, at + 1);
        strcpy(h->rev, at + 1);
        h->rev_given = 1;
    } else {
        strcpy(h->rev, "main");
    }
    return 0;
}

int hub_is_commit(const char *rev) {
    size_t i = 0;
    for (; rev[i]; i++)
        if (!isxdigit((unsigned char)rev[i]) || isupper((unsigned char)rev[i])) return 0;
    return i == 40;
}

/* The cache root into buf: huggingface_hub's order of variables; "~/" expanded. */
static int cache_dir(char *buf, size_t n) {
    const char *v, *home = setting_str(SET_HOME);
    const char *suffix = "";
    if ((v = setting_str(SET_HF_HUB_CACHE))) suffix = "";
    else if ((v = setting_str(SET_HF_HOME))) suffix = "/hub";
    else if ((v = setting_str(SET_XDG_CACHE_HOME))) suffix = "/huggingface/hub";
    else if ((v = home)) suffix = "/.cache/huggingface/hub";
    else return err_set("no Hugging Face cache: none of HF_HUB_CACHE, HF_HOME, XDG_CACHE_HOME, HOME is set");
    int k;
    if (v[0] == '~' && (v[1] == '/' || v[1] == '\0') && home) k = snprintf(buf, n, "%s%s%s", home, v + 1, suffix);
    else k = snprintf(buf, n, "%s%s", v, suffix);
    if (k < 0 || (size_t)k >= n) return err_set("the Hugging Face cache path is too long (%s...)", v);
    return 0;
}

int hub_repo_dir(const hub_name *h, char *buf, size_t n) {
    char root[PATH_MAX];
    if (cache_dir(root, sizeof root)) return -1;
    const char *slash = strchr(h->repo, '/');
    int k = snprintf(buf, n, "%s/models--%.*s--%s", root, (int)(slash - h->repo), h->repo, slash + 1);
    if (k < 0 || (size_t)k >= n) return err_set("%s: the cache path is too long", root);
    return 0;
}

int hub_mkdirs(const char *path) {
    char p[PATH_MAX];
    if (strlen(path) >= sizeof p) return err_set("%s: path too long", path);
    strcpy(p, path);
    for (char *s = p + 1;; s++) {
        if (*s != '/' && *s) continue;
        char c = *s;
        *s = '\0';
        if (mkdir(p, 0755) != 0 && errno != EEXIST) return err_set("cannot create directory %s: %s", p, strerror(errno));
        *s = c;
        if (!c) break;
    }
    struct stat st;
    if (stat(path, &st) != 0 || !S_ISDIR(st.st_mode)) return err_set("%s: not a directory", path);
    return 0;
}

/* ---------------------------------------------------------------- public API */

int celer_hub_is_name(const char *s) {
    hub_name h;
    char keep[2048];
    snprintf(keep, sizeof keep, "%s", err_msg()); /* a question, not a failure: leave the message */
    int ok = s && hub_parse(s, &h) == 0;
    err_set("%s", keep);
    return ok;
}

const char *celer_hub_cache_dir(char *buf, size_t n) { return cache_dir(buf, n) == 0 ? buf : NULL; }

static int is_dir(const char *p) {
    struct stat st;
    return stat(p, &st) == 0 && S_ISDIR(st.st_mode);
}

int celer_hub_resolve(const char *name, char *buf, size_t n) {
    hub_name h;
    char repo[PATH_MAX], p[PATH_MAX + 512], commit[128];
    if (hub_parse(name, &h) || hub_repo_dir(&h, repo, sizeof repo)) return -1;
    const char *how = "download it with: celer pull";
    if (!is_dir(repo))
        return err_set("%s is not a local directory, and not in the Hugging Face cache (no %s); %s %s", name, repo, how,
                       name);
    if (hub_is_commit(h.rev)) {
        strcpy(commit, h.rev);
    } else {
        snprintf(p, sizeof p, "%s/refs/%s", repo, h.rev);
        FILE *f = fopen(p, "r");
        if (!f)
            return err_set("%s: revision '%s' is not in the Hugging Face cache (no %s); %s %s", name, h.rev, p, how,
                           name);
        size_t k = fread(commit, 1, sizeof commit - 1, f);
        fclose(f);
        commit[k] = '\0';
        while (k && isspace((unsigned char)commit[k - 1])) commit[--k] = '\0';
        if (!hub_is_commit(commit))
            return err_set("%s: %s does not hold a commit hash (40 hex digits); %s %s", name, p, how, name);
    }
    int k = snprintf(buf, n, "%s/snapshots/%s", repo, commit);
    if (k < 0 || (size_t)k >= n) return err_set("%s: the snapshot path is too long", repo);
    if (!is_dir(buf)) {
        err_set("%s: snapshot %s is not in the Hugging Face cache (no %s); %s %s", name, commit, buf, how, name);
        buf[0] = '\0';
        return -1;
    }
    return 0;
}
