/* cli/args.c: table-driven flag parsing, usage text and token lists. */
#include "cli/args.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "celer.h"

static void print_help(const args *a) {
    printf("usage: celer %s %s\n\n%s\n\noptions:\n", a->cmd, a->usage, a->about);
    for (int i = 0; i < a->n; i++) {
        char left[64];
        snprintf(left, sizeof left, "%s%s%s%s%s", a->opts[i].shrt ? a->opts[i].shrt : "", a->opts[i].shrt ? ", " : "",
                 a->opts[i].lng, a->opts[i].meta ? " " : "", a->opts[i].meta ? a->opts[i].meta : "");
        printf("  %-28s %s\n", left, a->opts[i].help);
    }
    printf("  %-28s %s\n", "-h, --help", "show this help");
}

void args_usage_error(const args *a, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "celer %s: error: ", a->cmd);
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fprintf(stderr, "\nusage: celer %s %s\n(see celer %s --help)\n", a->cmd, a->usage, a->cmd);
}

int args_parse(args *a, int argc, char **argv) {
    memset(a->val, 0, sizeof a->val);
    for (int i = 0; i < argc; i++) {
        const char *s = argv[i];
        if (strcmp(s, "-h") == 0 || strcmp(s, "--help") == 0) {
            print_help(a);
            return 1;
        }
        const char *eq = strchr(s, '=');
        size_t nlen = eq && s[0] == '-' && s[1] == '-' ? (size_t)(eq - s) : strlen(s);
        int k;
        for (k = 0; k < a->n; k++) {
            const opt_spec *o = &a->opts[k];
            if ((strlen(o->lng) == nlen && strncmp(o->lng, s, nlen) == 0) ||
                (o->shrt && strcmp(o->shrt, s) == 0))
                break;
        }
        if (k == a->n) {
            if (s[0] == '-') args_usage_error(a, "unknown flag '%s'", s);
            else args_usage_error(a, "unexpected argument '%s'", s);
            return 2;
        }
        if (!a->opts[k].meta) {
            a->val[k] = "1";
        } else if (eq && nlen != strlen(s)) {
            a->val[k] = eq + 1;
        } else if (i + 1 < argc) {
            a->val[k] = argv[++i];
        } else {
            args_usage_error(a, "flag '%s' needs a value (%s)", s, a->opts[k].meta);
            return 2;
        }
    }
    return 0;
}

const char *args_get(const args *a, const char *lng) {
    for (int k = 0; k < a->n; k++)
        if (strcmp(a->opts[k].lng, lng) == 0) return a->val[k];
    return NULL;
}

int args_int(const args *a, const char *lng, long def, long lo, long hi, long *out) {
    const char *v = args_get(a, lng);
    if (!v) { *out = def; return 0; }
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (errno || end == v || *end || x < lo || x > hi) {
        args_usage_error(a, "flag '%s' wants an integer in %ld..%ld, got '%s'", lng, lo, hi, v);
        return 2;
    }
    *out = x;
    return 0;
}

int32_t *parse_token_list(const char *s, int *n, const char *what) {
    int cap = 64, k = 0;
    int32_t *t = malloc((size_t)cap * sizeof *t);
    if (!t) return NULL;
    const char *p = s;
    for (;;) {
        while (*p == ',' || *p == ' ' || *p == '\n' || *p == '\t' || *p == '\r') p++;
        if (!*p) break;
        char *end;
        errno = 0;
        long v = strtol(p, &end, 10);
        if (end == p || errno || v < 0 || v > INT32_MAX) {
            fprintf(stderr, "error: %s: '%.20s' is not a token id (want non-negative integers separated by commas)\n", what, p);
            free(t);
            return NULL;
        }
        if (k == cap) {
            int32_t *nt = realloc(t, (size_t)(cap *= 2) * sizeof *t);
            if (!nt) { free(t); return NULL; }
            t = nt;
        }
        t[k++] = (int32_t)v;
        p = end;
    }
    if (k == 0) {
        fprintf(stderr, "error: %s: no token ids given\n", what);
        free(t);
        return NULL;
    }
    *n = k;
    return t;
}

char *cli_read_file(const char *cmd, const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) {
        cli_error(cmd, "%s: cannot open: %s", path, strerror(errno));
        return NULL;
    }
    size_t len = 0, cap = 4096;
    char *buf = malloc(cap);
    size_t got;
    while (buf && (got = fread(buf + len, 1, cap - len - 1, f)) > 0) {
        len += got;
        if (cap - len < 2) {
            char *nb = realloc(buf, cap *= 2);
            if (!nb) { free(buf); buf = NULL; }
            else buf = nb;
        }
    }
    fclose(f);
    if (!buf) { cli_error(cmd, "%s: out of memory", path); return NULL; }
    buf[len] = 0;
    return buf;
}

int32_t *read_token_file(const char *path, int *n) {
    char *buf = cli_read_file(NULL, path);
    if (!buf) return NULL;
    int32_t *t = parse_token_list(buf, n, path);
    free(buf);
    return t;
}

void cli_error(const char *cmd, const char *fmt, ...) {
    va_list ap;
    fprintf(stderr, "celer%s%s: error: ", cmd ? " " : "", cmd ? cmd : "");
    va_start(ap, fmt);
    vfprintf(stderr, fmt, ap);
    va_end(ap);
    fputc('\n', stderr);
}

int cli_stderr_is_tty(void) { return isatty(2); }
