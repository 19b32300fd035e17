/* cli/cmd_tokenize.c: `celer tokenize`, `celer detokenize` and `celer chat-template`:
 * the tokenizer of a checkpoint directory from the command line, one JSON value per
 * line in and out, so that scripts can compare with Hugging Face line by line. */
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "celer.h"
#include "celer_tokenizer.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "tokenizer/tjson.h"

/* The tokenizer's directory: --tokenizer, else --model, else the default model, as
 * for the other commands (buf: n >= PATH_MAX bytes). NULL after a usage error. */
static const char *tokenizer_dir(const args *a, char *buf, size_t n) {
    const char *d = args_get(a, "--tokenizer");
    if (!d) d = args_get(a, "--model");
    if (!d) d = cli_default_model(buf, n);
    if (!d)
        args_usage_error(a, "missing --tokenizer DIR (or -m DIR), and the default model (models/default) is not "
                            "there: give -m DIR, or set CELER_DEFAULT_MODEL to a checkpoint directory");
    return d;
}

static celer_tokenizer *open_tokenizer(const args *a, const char *dir) {
    char hubbuf[PATH_MAX + 64]; /* a hub name's snapshot in the Hugging Face cache */
    if (!(dir = cli_model_resolve(a->cmd, dir, hubbuf, sizeof hubbuf, 0))) return NULL;
    celer_tokenizer *t = celer_tokenizer_open(dir);
    if (!t) cli_error(a->cmd, "%s", celer_last_error());
    return t;
}

/* The start of tokenize and detokenize: parses the command line and opens the
 * tokenizer. NULL when the command is over, *status its exit status (0 after --help,
 * 2 on a usage error, 1 when the tokenizer does not open); else *status is 0. */
static celer_tokenizer *start_tokenizer(args *a, int argc, char **argv, int *status) {
    int rc = args_parse(a, argc, argv);
    if (rc) {
        *status = rc == 1 ? 0 : 2;
        return NULL;
    }
    char defbuf[PATH_MAX + 64];
    const char *dir = tokenizer_dir(a, defbuf, sizeof defbuf);
    celer_tokenizer *t = dir ? open_tokenizer(a, dir) : NULL;
    *status = t ? 0 : dir ? 1 : 2;
    return t;
}

/* Writes s as a JSON string (UTF-8 kept, as json.dumps(ensure_ascii=False)). */
static void put_json_string(FILE *f, const char *s, size_t n) {
    fputc('"', f);
    size_t run = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c >= 0x20 && c != '"' && c != '\\') continue;
        fwrite(s + run, 1, i - run, f);
        run = i + 1;
        switch (c) {
        case '"': fputs("\\\"", f); break;
        case '\\': fputs("\\\\", f); break;
        case '\n': fputs("\\n", f); break;
        case '\r': fputs("\\r", f); break;
        case '\t': fputs("\\t", f); break;
        case '\b': fputs("\\b", f); break;
        case '\f': fputs("\\f", f); break;
        default: fprintf(f, "\\u%04x", c);
        }
    }
    fwrite(s + run, 1, n - run, f);
    fputc('"', f);
}

static void put_ids(const int32_t *ids, int n) {
    putchar('[');
    for (int i = 0; i < n; i++) printf(i ? ", %d" : "%d", ids[i]);
    fputs("]\n", stdout);
}

static int blank(const char *s, size_t n) {
    for (size_t i = 0; i < n; i++)
        if (s[i] != ' ' && s[i] != '\t' && s[i] != '\r' && s[i] != '\n') return 0;
    return 1;
}

static const opt_spec tok_opts[] = {
    {"--tokenizer", "-m", "DIR|ORG/NAME", "checkpoint or tokenizer directory, or a hub name (tokenizer.json, tokenizer_config.json; default: the embedded default model)"},
    {"--model", NULL, "DIR|ORG/NAME", "same as --tokenizer"},
    {"--special", NULL, NULL, "add BOS/EOS as the tokenizer config says (transformers' default)"},
    {"--text", NULL, "STR", "tokenize this one string instead of reading standard input"},
};

int cmd_tokenize(int argc, char **argv) {
    args a = {"tokenize", "[--tokenizer DIR|ORG/NAME] [--special] [--text STR]",
              "Reads one JSON string per line on standard input and prints one JSON array of token ids per line.",
              tok_opts, 4, {0}};
    int status;
    celer_tokenizer *t = start_tokenizer(&a, argc, argv, &status);
    if (!t) return status;
    int special = args_get(&a, "--special") != NULL;
    const char *text = args_get(&a, "--text");
    int32_t *ids;
    if (text) {
        int n = celer_tokenize(t, text, strlen(text), special, &ids);
        if (n < 0) { cli_error(a.cmd, "%s", celer_last_error()); status = 1; }
        else put_ids(ids, n);
        free(ids);
        celer_tokenizer_free(t);
        return status;
    }
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0;
    while ((len = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        if (blank(line, (size_t)len)) continue;
        char where[64];
        snprintf(where, sizeof where, "stdin line %ld", lineno);
        tj_doc *d = tj_parse(line, (size_t)len, where);
        if (!d) { /* plain text piped in: say what a line should be */
            cli_error(a.cmd, "%s (each line is one JSON string, like \"Hello\"; --text STR takes plain text)",
                      celer_last_error());
            status = 1;
            break;
        }
        const tj_val *v = tj_root(d);
        if (v->type != TJ_STR) {
            cli_error(a.cmd, "%s: want a JSON string, like \"Hello\"", where);
            tj_free(d);
            status = 1;
            break;
        }
        int n = celer_tokenize(t, v->u.s, v->n, special, &ids);
        tj_free(d);
        if (n < 0) { cli_error(a.cmd, "%s: %s", where, celer_last_error()); status = 1; break; }
        put_ids(ids, n);
        free(ids);
    }
    free(line);
    celer_tokenizer_free(t);
    return status;
}

static const opt_spec detok_opts[] = {
    {"--tokenizer", "-m", "DIR|ORG/NAME", "checkpoint or tokenizer directory, or a hub name (default: the embedded default model)"},
    {"--model", NULL, "DIR|ORG/NAME", "same as --tokenizer"},
    {"--skip-special", NULL, NULL, "leave special tokens (BOS, EOS, ...) out of the text"},
};

int cmd_detokenize(int argc, char **argv) {
    args a = {"detokenize", "[--tokenizer DIR|ORG/NAME] [--skip-special]",
              "Reads one JSON array of token ids per line on standard input and prints one JSON string per line.",
              detok_opts, 3, {0}};
    int status;
    celer_tokenizer *t = start_tokenizer(&a, argc, argv, &status);
    if (!t) return status;
    int skip = args_get(&a, "--skip-special") != NULL;
    char *line = NULL;
    size_t cap = 0;
    ssize_t len;
    long lineno = 0;
    int32_t *ids = NULL;
    while ((len = getline(&line, &cap, stdin)) >= 0) {
        lineno++;
        if (blank(line, (size_t)len)) continue;
        char where[64];
        snprintf(where, sizeof where, "stdin line %ld", lineno);
        tj_doc *d = tj_parse(line, (size_t)len, where);
        if (!d) {
            cli_error(a.cmd, "%s (each line is one JSON array of token ids, like [1, 2, 3])", celer_last_error());
            status = 1;
            break;
        }
        const tj_val *v = tj_root(d);
        int bad = v->type != TJ_ARR;
        free(ids);
        ids = malloc(((size_t)(bad ? 0 : v->n) + 1) * sizeof *ids);
        for (uint32_t i = 0; !bad && i < v->n; i++) {
            const tj_val *x = &v->u.items[i];
            if (x->type != TJ_NUM || x->n || x->u.num < 0 || x->u.num >= celer_tokenizer_n_vocab(t)) {
                cli_error(a.cmd, "%s: item %u is not a token id of this tokenizer (0..%d)", where, i,
                          celer_tokenizer_n_vocab(t) - 1);
                bad = 2;
                break;
            }
            ids[i] = (int32_t)x->u.num;
        }
        if (bad == 1) cli_error(a.cmd, "%s: want a JSON array of token ids, like [1, 2, 3]", where);
        if (bad || !ids) { tj_free(d); status = 1; break; }
        size_t tl;
        char *text = celer_detokenize(t, ids, v->n, skip, &tl);
        tj_free(d);
        if (!text) { cli_error(a.cmd, "%s: %s", where, celer_last_error()); status = 1; break; }
        put_json_string(stdout, text, tl);
        putchar('\n');
        free(text);
    }
    free(ids);
    free(line);
    celer_tokenizer_free(t);
    return status;
}

static const opt_spec chat_opts[] = {
    {"--tokenizer", "-m", "DIR|ORG/NAME", "checkpoint or tokenizer directory, or a hub name (its chat template; default: the embedded default model)"},
    {"--model", NULL, "DIR|ORG/NAME", "same as --tokenizer"},
    {"--messages", NULL, "FILE", "JSON array of {\"role\", \"content\"} messages"},
    {"--tools", NULL, "FILE", "JSON array of tool definitions"},
    {"--add-generation-prompt", NULL, NULL, "end with the assistant turn's opening"},
    {"--template-vars", NULL, "JSON", "extra template variables, e.g. '{\"enable_thinking\": false}'"},
};

int cmd_chat_template(int argc, char **argv) {
    args a = {"chat-template", "[--tokenizer DIR|ORG/NAME] --messages FILE.json [--add-generation-prompt] [--tools FILE.json]",
              "Renders the tokenizer's chat template and prints the prompt exactly (no newline added).", chat_opts, 6,
              {0}};
    int rc = args_parse(&a, argc, argv);
    if (rc) return rc == 1 ? 0 : 2;
    char defbuf[PATH_MAX + 64];
    const char *dir = tokenizer_dir(&a, defbuf, sizeof defbuf);
    if (!dir) return 2;
    const char *mf = args_get(&a, "--messages"), *tf = args_get(&a, "--tools");
    if (!mf) { args_usage_error(&a, "missing --messages FILE.json"); return 2; }
    char *msgs = cli_read_file(a.cmd, mf);
    char *tools = msgs && tf ? cli_read_file(a.cmd, tf) : NULL;
    if (!msgs || (tf && !tools)) {
        free(msgs);
        free(tools);
        return 1;
    }
    int status = 1;
    celer_tokenizer *t = open_tokenizer(&a, dir);
    if (t) {
        char *out = celer_chat_render_vars(t, msgs, tools, args_get(&a, "--add-generation-prompt") != NULL,
                                           args_get(&a, "--template-vars"));
        if (!out) cli_error(a.cmd, "%s", celer_last_error());
        else {
            fwrite(out, 1, strlen(out), stdout);
            status = 0;
            free(out);
        }
    }
    celer_tokenizer_free(t);
    free(msgs);
    free(tools);
    return status;
}
