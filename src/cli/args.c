/* cli/args.c: table-driven flag parsing, usage text and token lists. */
#include "cli/args.h"

#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "celer.h"

/* Other tools' spellings (llama.cpp, mlx-lm) of a flag a command has under its own
 * name: accepted where the command has the target flag and no flag of that spelling
 * itself (serve's own --max-tokens is a server limit, not -n). -ngl's layer count
 * becomes a device: 0 the CPU, N > 0 the GPU (celer runs a model on one device). */
static const struct {
    const char *lng, *shrt, *target, *meaning;
} aliases[] = {
    {"--max-tokens", NULL, "--n-predict", "= -n (mlx-lm)"},
    {"--temperature", NULL, "--temp", "= --temp (mlx-lm)"},
    {"--system-prompt", "-sys", "--system", "= --system (llama.cpp)"},
    {"--n-gpu-layers", "-ngl", "--device", "N: 0 = --device cpu, N > 0 = --device cuda (llama.cpp)"},
};

/* llama.cpp flags with no celer counterpart. Where what they ask for is what celer
 * always does (noop_in: "*" for every command, else the one command), they are
 * accepted with a note; elsewhere they are a usage error whose message says what to
 * do instead. arg: 0 a switch, 1 a value, 2 an optional on/off/auto. */
static const struct {
    const char *lng, *shrt;
    int arg;
    const char *noop_in, *note, *instead;
} foreign[] = {
    {"--flash-attn", "-fa", 2, "*", "flash attention is always on here; the flag is not needed", NULL},
    {"--jinja", NULL, 0, "*", "chat templates are always the model's own Jinja template here; the flag is not needed", NULL},
    {"--conversation", "-cnv", 0, "run", "celer run is always a conversation; the flag is not needed",
     "a conversation is celer run (celer run [MODEL])"},
    {"--no-conversation", "-no-cnv", 0, "generate", "celer generate answers once; the flag is not needed",
     "one answer without a conversation is celer run -p TEXT or celer generate -p TEXT"},
    {"--hf-repo", "-hf", 1, NULL, NULL, "give the hub name as the model (celer run ORG/NAME, or -m ORG/NAME)"},
    {"--mlock", NULL, 0, NULL, NULL, "celer maps the weights and has no --mlock"},
    {"--no-mmap", NULL, 0, NULL, NULL, "celer always maps the weights; there is no --no-mmap"},
};

/* Flags every command that loads a model (has --device) accepts, each standing for
 * a setting (docs/settings.md) for this process: set by args_parse, applied when the
 * command reads --device (cli_device_flag, cli/load.c). */
static const struct {
    const char *lng, *meta, *setting, *help;
    const char *values[3];
} globals[] = {
    {"--precision", "P", "CELER_PRECISION",
     "fast or exact: arithmetic (GPU default fast: bf16 activations and KV cache; CPU default exact, fast rounds prefill and 4-bit decode activations to bf16)",
     {"fast", "exact", NULL}},
    /* tensor parallelism (docs/tensor-parallel.md): values checked where the model opens */
    {"--tp", "N", "CELER_TP", "split the model over N GPUs (tensor parallelism; with --device cpu: N threads)", {NULL}},
    {"--tp-master", "ADDR:PORT", "CELER_TP_MASTER", "several hosts: where rank 0 publishes the NCCL group id", {NULL}},
    {"--tp-rank-offset", "R", "CELER_TP_RANK_OFFSET", "several hosts: the global rank of this host's first GPU", {NULL}},
    {"--tp-world", "W", "CELER_TP_WORLD", "several hosts: the ranks over all hosts (default --tp)", {NULL}},
};
static const char *global_val[sizeof globals / sizeof globals[0]];

void args_apply_globals(void) {
    for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++)
        if (global_val[i]) celer_setting_set(globals[i].setting, global_val[i]);
}

static int find_opt(const args *a, const char *lng) {
    for (int k = 0; k < a->n; k++)
        if (strcmp(a->opts[k].lng, lng) == 0) return k;
    return -1;
}

/* 1 when flag s (its name nlen bytes) is one of the command's own. */
static int own_flag(const args *a, const char *s, size_t nlen) {
    for (int k = 0; k < a->n; k++) {
        const opt_spec *o = &a->opts[k];
        if ((strlen(o->lng) == nlen && strncmp(o->lng, s, nlen) == 0) || (o->shrt && strcmp(o->shrt, s) == 0)) return 1;
    }
    return 0;
}

static int name_is(const char *s, size_t nlen, const char *lng, const char *shrt) {
    return (strlen(lng) == nlen && strncmp(lng, s, nlen) == 0) || (shrt && strcmp(shrt, s) == 0);
}

static void print_help(const args *a) {
    printf("usage: celer %s %s\n\n%s\n\noptions:\n", a->cmd, a->usage, a->about);
    for (int i = 0; i < a->n; i++) {
        char left[64];
        snprintf(left, sizeof left, "%s%s%s%s%s", a->opts[i].shrt ? a->opts[i].shrt : "", a->opts[i].shrt ? ", " : "",
                 a->opts[i].lng, a->opts[i].meta ? " " : "", a->opts[i].meta ? a->opts[i].meta : "");
        printf("  %-28s %s\n", left, a->opts[i].help);
    }
    if (find_opt(a, "--device") >= 0)
        for (size_t i = 0; i < sizeof globals / sizeof globals[0]; i++) {
            char left[64];
            snprintf(left, sizeof left, "%s %s", globals[i].lng, globals[i].meta);
            printf("  %-28s %s\n", left, globals[i].help);
        }
    printf("  %-28s %s\n", "-h, --help", "show this help");
    int any = 0;
    for (size_t i = 0; i < sizeof aliases / sizeof aliases[0]; i++) {
        int k = find_opt(a, aliases[i].target);
        if (k < 0 || own_flag(a, aliases[i].lng, strlen(aliases[i].lng))) continue;
        if (!any++) printf("\nother tools' spellings, accepted:\n");
        char left[64];
        snprintf(left, sizeof left, "%s%s%s %s", aliases[i].shrt ? aliases[i].shrt : "", aliases[i].shrt ? ", " : "",
                 aliases[i].lng, k >= 0 && strcmp(aliases[i].target, "--device") == 0 ? "N" : a->opts[k].meta);
        printf("  %-28s %s\n", left, aliases[i].meaning);
    }
    for (size_t i = 0; i < sizeof foreign / sizeof foreign[0]; i++) {
        if (!foreign[i].noop_in || (strcmp(foreign[i].noop_in, "*") != 0 && strcmp(foreign[i].noop_in, a->cmd) != 0)) continue;
        if (!any++) printf("\nother tools' spellings, accepted:\n");
        char left[64];
        snprintf(left, sizeof left, "%s%s%s", foreign[i].shrt ? foreign[i].shrt : "", foreign[i].shrt ? ", " : "", foreign[i].lng);
        printf("  %-28s %s\n", left, foreign[i].note);
    }
}

/* Another tool's flag s (name nlen bytes) that the command does not have as its own:
 * -1 when it is none of them; else 0 and the value stored or the flag skipped (*i
 * advanced past a value), or 2 on a usage error (printed). */
static int other_tools_flag(args *a, const char *s, size_t nlen, const char *eq, int argc, char **argv, int *i) {
    for (size_t j = 0; j < sizeof aliases / sizeof aliases[0]; j++) {
        if (!name_is(s, nlen, aliases[j].lng, aliases[j].shrt)) continue;
        int k = find_opt(a, aliases[j].target);
        if (k < 0) return -1; /* the command has nothing it could mean */
        const char *v = eq && nlen != strlen(s) ? eq + 1 : *i + 1 < argc ? argv[++*i] : NULL;
        if (!v) {
            args_usage_error(a, "flag '%s' needs a value", s);
            return 2;
        }
        if (strcmp(aliases[j].target, "--device") == 0) { /* -ngl N: a layer count, as a device */
            char *end;
            errno = 0;
            long n = strtol(v, &end, 10);
            if (strcmp(v, "all") == 0) n = 1, end = (char *)v + strlen(v);
            else if (strcmp(v, "auto") == 0) n = -1, end = (char *)v + strlen(v);
            if (errno || end == v || *end || n < -1) {
                args_usage_error(a, "flag '%.*s' wants a layer count (0: the CPU, N > 0: the GPU), got '%s'", (int)nlen, s, v);
                return 2;
            }
            v = n == 0 ? "cpu" : n > 0 ? "cuda" : "auto";
        }
        a->val[k] = v;
        return 0;
    }
    for (size_t j = 0; j < sizeof foreign / sizeof foreign[0]; j++) {
        if (!name_is(s, nlen, foreign[j].lng, foreign[j].shrt)) continue;
        int noop = foreign[j].noop_in && (strcmp(foreign[j].noop_in, "*") == 0 || strcmp(foreign[j].noop_in, a->cmd) == 0);
        if (!noop) {
            args_usage_error(a, "%.*s: %s", (int)nlen, s, foreign[j].instead);
            return 2;
        }
        if (!eq || nlen == strlen(s)) { /* skip the value it takes */
            if (foreign[j].arg == 1 && *i + 1 < argc) ++*i;
            else if (foreign[j].arg == 2 && *i + 1 < argc &&
                     (strcmp(argv[*i + 1], "on") == 0 || strcmp(argv[*i + 1], "off") == 0 || strcmp(argv[*i + 1], "auto") == 0))
                ++*i;
        }
        fprintf(stderr, "celer %s: %.*s: %s\n", a->cmd, (int)nlen, s, foreign[j].note);
        return 0;
    }
    return -1;
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
        if (k == a->n && s[0] == '-' && find_opt(a, "--device") >= 0) {
            size_t g = 0;
            while (g < sizeof globals / sizeof globals[0] && !name_is(s, nlen, globals[g].lng, NULL)) g++;
            if (g < sizeof globals / sizeof globals[0]) {
                const char *v = eq && nlen != strlen(s) ? eq + 1 : i + 1 < argc ? argv[++i] : NULL;
                int ok = 0, any = !globals[g].values[0];
                for (int j = 0; v && globals[g].values[j]; j++) ok |= strcmp(v, globals[g].values[j]) == 0;
                if (any && v && strcmp(globals[g].meta, "ADDR:PORT") != 0) { /* a count: digits */
                    ok = *v && strspn(v, "0123456789") == strlen(v) && strlen(v) < 9;
                    if (!ok) {
                        args_usage_error(a, "flag '%s' wants a number, got '%s'", globals[g].lng, v);
                        return 2;
                    }
                    if (strcmp(globals[g].lng, "--tp") == 0 && atol(v) < 1) {
                        args_usage_error(a, "flag '--tp' wants 1 or more ranks (leave it out for none), got '%s'", v);
                        return 2;
                    }
                } else if (any && v) {
                    ok = 1;
                }
                if (!ok) {
                    if (v) args_usage_error(a, "flag '%s' wants fast or exact, got '%s'", globals[g].lng, v);
                    else args_usage_error(a, "flag '%s' needs a value (%s)", globals[g].lng, globals[g].meta);
                    return 2;
                }
                global_val[g] = v;
                continue;
            }
        }
        if (k == a->n && s[0] == '-') {
            int r = other_tools_flag(a, s, nlen, eq, argc, argv, &i);
            if (r == 0) continue;
            if (r == 2) return 2;
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
