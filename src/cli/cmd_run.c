/* cli/cmd_run.c: `celer run [MODEL]`: an interactive chat on a checkpoint directory
 * (the embedded default model when none is given). Each turn renders the whole
 * conversation with the tokenizer's chat template, keeps the longest prefix the
 * session already holds in its KV cache and feeds only the rest, then streams the
 * sampled answer. Ctrl-C stops an answer; /reset, /system TEXT, /stats, /quit.
 * -p TEXT answers once and exits without reading standard input. At a terminal,
 * libedit gives line editing and history ($HOME/.celer_history) unless built with
 * EDITLINE=0. */
#include <errno.h>
#include <limits.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include <jansson.h>
#ifdef CELER_HAVE_EDITLINE
#include <histedit.h>
#include <langinfo.h>
#include <locale.h>
#include <wchar.h>
#endif

#include "celer.h"
#include "celer_tokenizer.h"
#include "cli/args.h"
#include "cli/commands.h"
#include "cli/default_model.h"
#include "cli/load.h"
#include "cli/sampling.h"

static const opt_spec opts[] = {
    {"--model", "-m", "DIR|ORG/NAME", "checkpoint directory, or a hub name in the Hugging Face cache (default: the embedded default model)"},
    {"--prompt", "-p", "TEXT", "answer TEXT once and exit (standard input is not read)"},
    {"--file", "-f", "FILE", "answer the text of FILE once and exit (as -p)"},
    {"--system", NULL, "TEXT", "system prompt"},
    {"--stop", NULL, "TEXT", "end an answer where its text contains TEXT"},
    {"--n-predict", "-n", "N", "most tokens per answer (default -1: until end of turn or the context is full; 0: none)"},
    {"--ctx-size", "-c", "N", "context size in tokens (default: the model's, at most 4096)"},
    {"--threads", "-t", "N", "CPU threads (default: all cores)"},
    {"--device", NULL, "DEV", "cpu, cuda, cuda:N or auto (default auto: the GPU when one is present, else the CPU)"},
    {"--quiet", "-q", NULL, "no status lines on stderr (loading, per-answer speed)"},
    {"--parse-special-in-content", NULL, NULL, "special tokens typed in a message are control tokens (transformers' behaviour; default: text)"},
    {"--grammar", NULL, "FILE", "every answer matches a GBNF grammar (docs/grammar.md)"},
    {"--json-schema", NULL, "FILE", "every answer is JSON valid against a JSON Schema (docs/grammar.md)"},
    CLI_SAMPLING_OPTS,
};

/* Set by SIGINT; an answer in progress checks it after every token. */
static volatile sig_atomic_t interrupted;
static void on_sigint(int sig) {
    (void)sig;
    interrupted = 1;
}

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

typedef struct {
    celer_model *m;
    celer_tokenizer *tk;
    celer_session *s;
    celer_sampler *smp;
    const char *stop_text;    /* --stop, or NULL */
    celer_grammar *gram;      /* --grammar / --json-schema: every answer matches it, or NULL */
    celer_grammar_vocab *gv;
    celer_model_info info;
    int ctx, n_predict, quiet;
    int parse_special;        /* --parse-special-in-content */
    int32_t eos[2];           /* the model's and the tokenizer's end-of-turn ids (-1: none) */
    json_t *msgs;             /* [{role, content}] of the conversation, system excluded */
    char *system;             /* system prompt or NULL */
    int32_t *hist;            /* [ctx] the tokens the session holds */
    int n_hist;
    int32_t *ans;             /* [ctx] the current answer's ids */
    double t_first;           /* when the current answer's first token came */
    /* statistics: the last turn, and totals */
    int last_new, last_reused, last_gen;
    double last_prefill_s, last_gen_s;
    long turns, tot_new, tot_reused, tot_gen;
    double tot_gen_s;
} chat;

/* ---------------------------------------------------------------- one turn */

/* Appends n bytes to the growing string *p (NUL-terminated). -1 on out of memory. */
static int text_append(char **p, size_t *len, size_t *cap, const char *t, size_t n) {
    if (*len + n + 1 > *cap) {
        size_t c = *cap ? *cap * 2 : 256;
        while (c < *len + n + 1) c *= 2;
        char *q = realloc(*p, c);
        if (!q) return -1;
        *p = q;
        *cap = c;
    }
    memcpy(*p + *len, t, n);
    *len += n;
    (*p)[*len] = 0;
    return 0;
}

/* The prompt for the conversation plus a new user message: the chat template with
 * the generation prompt, or the user's text alone when the tokenizer has none.
 * Returns the token count (ids malloc'd) or -1. */
static int render_prompt(chat *c, const char *user, int32_t **ids) {
    if (!celer_tokenizer_has_template(c->tk)) return celer_tokenize(c->tk, user, strlen(user), 1, ids);
    json_t *all = json_array();
    if (c->system) json_array_append_new(all, json_pack("{s:s,s:s}", "role", "system", "content", c->system));
    json_array_extend(all, c->msgs);
    json_array_append_new(all, json_pack("{s:s,s:s}", "role", "user", "content", user));
    char *js = json_dumps(all, JSON_COMPACT);
    json_decref(all);
    celer_chat_request rq = {js, NULL, NULL, 1, c->parse_special};
    int n = js ? celer_chat_encode(c->tk, &rq, ids, NULL) : -1;
    free(js);
    return n;
}

/* Answers one user message. 0 ok (also when interrupted), -1 on error (printed;
 * the conversation is unchanged). */
static int chat_turn(chat *c, const char *user) {
    int32_t *ids = NULL;
    int n = render_prompt(c, user, &ids);
    /* a full context drops the oldest exchanges until a quarter of it is free */
    int dropped = 0;
    while (n > 0 && n > c->ctx - c->ctx / 4 && json_array_size(c->msgs) >= 2) {
        json_array_remove(c->msgs, 0);
        json_array_remove(c->msgs, 0);
        dropped++;
        free(ids);
        ids = NULL;
        n = render_prompt(c, user, &ids);
    }
    if (dropped && !c->quiet)
        fprintf(stderr, "(dropped the %d oldest exchange%s to fit the context)\n", dropped, dropped > 1 ? "s" : "");
    if (n < 0) {
        cli_error("run", "%s", celer_last_error());
        return -1;
    }
    if (n == 0 || n >= c->ctx) {
        cli_error("run", "the conversation is %d tokens, the context %d: /reset to start over", n, c->ctx);
        free(ids);
        return -1;
    }
    /* keep what the cache already holds: the longest common prefix, less one token
     * so that there is something to feed for fresh logits */
    int keep = 0;
    while (keep < c->n_hist && keep < n && c->hist[keep] == ids[keep]) keep++;
    if (keep >= n) keep = n - 1;
    if (celer_session_rewind(c->s, keep) != 0) keep = 0, celer_session_rewind(c->s, 0);
    c->n_hist = keep;
    /* the answer streams through the generation loop: its text stream cuts it at
     * --stop, end-of-turn tokens add no text, Ctrl-C cancels it; the loop ends it
     * at -n tokens or when the context is full */
    celer_textstream *ts = celer_textstream_new(c->tk, 1, &c->stop_text, c->stop_text ? 1 : 0);
    celer_grammar_state *gst = c->gram ? celer_grammar_state_new(c->gram, c->gv, NULL, 0) : NULL;
    celer_gen *g = ts && (gst || !c->gram) ? celer_gen_new(c->m, 0) : NULL;
    celer_gen_seq q = {.session = c->s, .sampler = c->smp, .prompt = ids + keep, .n_prompt = n - keep,
                       .max_tokens = c->n_predict, /* < 0: no limit */ .stop_token = c->eos[0], .text = ts,
                       .grammar = gst};
    int id = g ? celer_gen_add(g, &q) : -1;
    if (id < 0) {
        cli_error("run", "%s", celer_last_error());
        celer_grammar_state_free(gst);
        celer_gen_free(g);
        celer_textstream_free(ts);
        free(ids);
        return -1;
    }
    c->t_first = 0;
    double t0 = now();
    int k = 0, finish = CELER_FINISH_NONE;
    char why[512] = "";
    size_t alen = 0, acap = 0;
    char *answer = NULL;       /* the text shown, which the conversation keeps */
    while (!finish) {
        if (interrupted) {
            celer_gen_cancel(g, id);
            size_t len = 0;
            const char *rest = celer_textstream_flush(ts, &len, NULL);
            if (rest && len && text_append(&answer, &alen, &acap, rest, len) == 0) fwrite(rest, 1, len, stdout);
            break;
        }
        const celer_gen_event *ev;
        if (celer_gen_step(g, &ev) <= 0) break;
        if (ev->token >= 0) {
            if (c->t_first == 0) c->t_first = now();
            c->ans[k++] = ev->token;
        }
        if (ev->text_len && text_append(&answer, &alen, &acap, ev->text, ev->text_len) == 0) {
            fwrite(ev->text, 1, ev->text_len, stdout);
            fflush(stdout);
        }
        if ((finish = ev->finish) == CELER_FINISH_ERROR) snprintf(why, sizeof why, "%s", ev->error);
    }
    double t1 = now();
    celer_gen_free(g);
    celer_grammar_state_free(gst);
    celer_textstream_free(ts);
    printf("\n");
    fflush(stdout);
    if (finish == CELER_FINISH_ERROR) {
        cli_error("run", "%s", why);
        c->n_hist = 0;
        celer_session_rewind(c->s, 0);
        free(answer);
        free(ids);
        return -1;
    }
    /* the session now holds ids and every generated token but the last */
    int pos = celer_session_pos(c->s);
    memcpy(c->hist, ids, (size_t)n * sizeof *ids);
    if (pos > n) memcpy(c->hist + n, c->ans, (size_t)(pos - n) * sizeof *ids);
    c->n_hist = pos;
    json_array_append_new(c->msgs, json_pack("{s:s,s:s}", "role", "user", "content", user));
    json_array_append_new(c->msgs, json_pack("{s:s,s:s}", "role", "assistant", "content", answer ? answer : ""));
    free(answer);
    free(ids);
    /* statistics */
    c->last_new = n - keep;
    c->last_reused = keep;
    c->last_gen = k;
    c->last_prefill_s = (c->t_first ? c->t_first : t1) - t0;
    c->last_gen_s = c->t_first ? t1 - c->t_first : 0;
    c->turns++;
    c->tot_new += c->last_new;
    c->tot_reused += keep;
    c->tot_gen += k;
    c->tot_gen_s += c->last_gen_s;
    if (!c->quiet)
        fprintf(stderr, "[%d tokens, %.1f tok/s; prompt %d new + %d cached%s]\n", k,
                k > 1 && c->last_gen_s > 0 ? (k - 1) / c->last_gen_s : 0.0, c->last_new, keep,
                interrupted ? "; interrupted" : "");
    return 0;
}

/* ---------------------------------------------------------------- commands */

static void print_stats(const chat *c) {
    long prompt = c->tot_new + c->tot_reused;
    printf("context: %d of %d tokens; %ld turns\n", c->n_hist, c->ctx, c->turns);
    if (c->turns) {
        printf("last turn: prompt %d new + %d reused from the cache, %d generated at %.1f tok/s\n", c->last_new,
               c->last_reused, c->last_gen, c->last_gen > 1 && c->last_gen_s > 0 ? (c->last_gen - 1) / c->last_gen_s : 0.0);
        printf("total: %ld prompt tokens, %ld reused from the cache (%.0f%%); %ld generated at %.1f tok/s\n", prompt,
               c->tot_reused, prompt ? 100.0 * c->tot_reused / prompt : 0.0, c->tot_gen,
               c->tot_gen_s > 0 ? (c->tot_gen - c->turns) / c->tot_gen_s : 0.0);
    }
    fflush(stdout);
}

static void chat_reset(chat *c) {
    json_array_clear(c->msgs);
    c->n_hist = 0;
    celer_session_rewind(c->s, 0);
}

/* Waits until standard input (a terminal) has a line or Ctrl-C comes. SIGINT is
 * blocked except inside ppoll, so a Ctrl-C that lands just before the wait is not
 * lost (the model's threads block it for good, see cmd_run). 0: a line is ready;
 * 1: interrupted. */
static int wait_input(void) {
    sigset_t block, old;
    sigemptyset(&block);
    sigaddset(&block, SIGINT);
    pthread_sigmask(SIG_BLOCK, &block, &old);
    int r = 0;
    for (;;) {
        if (interrupted) {
            r = 1;
            break;
        }
        struct pollfd p = {0, POLLIN, 0};
        if (ppoll(&p, 1, NULL, &old) >= 0 || errno != EINTR) break;
    }
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    return r;
}

/* ---------------------------------------------------------------- line editing */

#ifdef CELER_HAVE_EDITLINE
/* libedit's native API, set up once for the whole chat. Before each prompt the
 * terminal is put in editing mode (EL_PREP_TERM) and only then does el_gets print
 * the prompt. Left to itself el_gets prints the prompt first and leaves canonical
 * mode a moment later (and readline(), libedit's compatibility layer, redoes the
 * terminal setup on every call); a key typed in that gap went through the kernel's
 * canonical line discipline, where Ctrl-D becomes an end-of-file mark that reads
 * back as a NUL byte once the terminal is raw: typed-ahead Ctrl-D was lost. */
typedef struct {
    EditLine *el;
    History *hist;
    char path[PATH_MAX];      /* history file ($HOME/.celer_history), "" for none */
} line_editor;

static char *edit_prompt(EditLine *el) {
    (void)el;
    static char p[] = "> ";
    return p;
}

/* libedit's character source: waits as wait_input does, so Ctrl-C at the prompt
 * ends the read (el_gets then returns NULL with interrupted set); decodes the
 * locale's multibyte characters (UTF-8). 1: a character, 0: end of input. */
static int edit_getc(EditLine *el, wchar_t *wc) {
    (void)el;
    static mbstate_t mb;
    for (;;) {
        if (wait_input()) {
            memset(&mb, 0, sizeof mb);
            return 0;
        }
        char ch;
        ssize_t r = read(0, &ch, 1);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return r == 0 ? 0 : -1;
        size_t k = mbrtowc(wc, &ch, 1, &mb);
        if (k == (size_t)-2) continue;  /* the middle of a character */
        if (k == (size_t)-1) {          /* not the locale's encoding: dropped */
            memset(&mb, 0, sizeof mb);
            continue;
        }
        return 1;
    }
}

/* Starts line editing when standard input and output are terminals: emacs keys,
 * ~/.editrc, history loaded from $HOME/.celer_history (none when HOME is unset).
 * 0 when not started (plain reads are used). */
static int editor_init(line_editor *ed) {
    memset(ed, 0, sizeof *ed);
    if (!isatty(0) || !isatty(1)) return 0;
    /* libedit converts lines with the C library's multibyte functions: a UTF-8
     * locale for LC_CTYPE (the user's, else C.UTF-8) */
    const char *loc = setlocale(LC_CTYPE, "");
    if (!loc || strcmp(nl_langinfo(CODESET), "UTF-8") != 0)
        if (!setlocale(LC_CTYPE, "C.UTF-8")) setlocale(LC_CTYPE, "C");
    if (!(ed->el = el_init("celer", stdin, stdout, stderr))) return 0;
    ed->hist = history_init();
    HistEvent ev;
    if (ed->hist) {
        history(ed->hist, &ev, H_SETSIZE, 1000);
        history(ed->hist, &ev, H_SETUNIQUE, 1);
        el_set(ed->el, EL_HIST, history, ed->hist);
        const char *home = celer_setting("HOME");
        if (home && *home && (size_t)snprintf(ed->path, sizeof ed->path, "%s/.celer_history", home) < sizeof ed->path)
            history(ed->hist, &ev, H_LOAD, ed->path);  /* a missing file is an empty history */
        else
            ed->path[0] = '\0';
    }
    el_set(ed->el, EL_EDITOR, "emacs");
    el_set(ed->el, EL_SIGNAL, 0);  /* Ctrl-C is ours (on_sigint, wait_input) */
    el_set(ed->el, EL_PROMPT, edit_prompt);
    el_set(ed->el, EL_GETCFN, edit_getc);
    el_set(ed->el, EL_BIND, "^R", "em-inc-search-prev", NULL);
    el_source(ed->el, NULL);       /* the user's ~/.editrc, if any */
    return 1;
}

static void editor_end(line_editor *ed) {
    if (ed->el) el_end(ed->el);
    if (ed->hist) history_end(ed->hist);
    memset(ed, 0, sizeof *ed);
}

/* One line through libedit (see read_line). */
static char *editor_read(line_editor *ed) {
    el_set(ed->el, EL_PREP_TERM, 1);  /* editing mode before the prompt shows */
    int n = 0;
    const char *l = el_gets(ed->el, &n);
    if (!l && interrupted) {          /* Ctrl-C at the prompt: a fresh one */
        putchar('\n');
        interrupted = 0;
        return strdup("");
    }
    if (!l || n <= 0) {               /* Ctrl-D: leave on a line of our own */
        putchar('\n');
        fflush(stdout);
        return NULL;
    }
    size_t len = strlen(l);
    while (len && (l[len - 1] == '\n' || l[len - 1] == '\r')) len--;
    char *line = strndup(l, len);
    if (line && *line && ed->hist) {
        HistEvent ev;
        history(ed->hist, &ev, H_ENTER, line);
        if (ed->path[0]) history(ed->hist, &ev, H_SAVE, ed->path);  /* each line, so a kill keeps it */
    }
    return line;
}
#else
typedef struct {
    void *el;
} line_editor;
static int editor_init(line_editor *ed) { ed->el = NULL; return 0; }
static void editor_end(line_editor *ed) { (void)ed; }
static char *editor_read(line_editor *ed) { (void)ed; return NULL; }
#endif

/* Reads one line (without its newline) into a malloc'd string; NULL at end of input.
 * Ctrl-C at the prompt gives an empty line. A Ctrl-C from the prompt on counts for
 * the answer that follows. ed: line editing when started (editor_init). */
static char *read_line(int interactive, line_editor *ed) {
    interrupted = 0;
    if (interactive && ed->el) return editor_read(ed);
    if (interactive) {
        fputs("> ", stdout);
        fflush(stdout);
        if (wait_input()) {
            putchar('\n');
            interrupted = 0;
            return strdup("");
        }
    }
    char *line = NULL;
    size_t cap = 0;
    errno = 0;
    ssize_t n = getline(&line, &cap, stdin);
    if (n < 0) {
        int intr = errno == EINTR && interactive;
        free(line);
        if (intr) {  /* Ctrl-C while the line was being read */
            clearerr(stdin);
            putchar('\n');
            interrupted = 0;
            return strdup("");
        }
        return NULL;
    }
    if (n > 0 && line[n - 1] == '\n') line[--n] = '\0';
    if (n > 0 && line[n - 1] == '\r') line[--n] = '\0';
    return line;
}

static void print_help(void) {
    printf("/reset          forget the conversation (the system prompt stays)\n"
           "/system TEXT    set the system prompt (/system alone clears it)\n"
           "/stats          tokens in context, speed, and prompt-cache reuse\n"
           "/quit           leave (also Ctrl-D); Ctrl-C stops an answer\n");
}

/* 1: leave, 0: go on. */
static int handle_command(chat *c, const char *line) {
    if (strcmp(line, "/quit") == 0 || strcmp(line, "/exit") == 0) return 1;
    if (strcmp(line, "/reset") == 0) {
        chat_reset(c);
        printf("(conversation cleared)\n");
    } else if (strcmp(line, "/stats") == 0) {
        print_stats(c);
    } else if (strncmp(line, "/system", 7) == 0 && (line[7] == '\0' || line[7] == ' ')) {
        const char *t = line + 7;
        while (*t == ' ') t++;
        free(c->system);
        c->system = *t ? strdup(t) : NULL;
        printf(*t ? "(system prompt set)\n" : "(system prompt cleared)\n");
    } else if (strcmp(line, "/help") == 0 || strcmp(line, "/?") == 0) {
        print_help();
    } else {
        printf("unknown command %s; /help lists them\n", line);
    }
    fflush(stdout);
    return 0;
}

/* ---------------------------------------------------------------- entry */

int cmd_run(int argc, char **argv) {
    args a = {"run", "[MODEL_DIR|ORG/NAME] [-p TEXT | -f FILE] [--system TEXT] [-n N] [--temp F ...]",
              "Chats with a model (the embedded default model when none is given). At a terminal: "
#ifdef CELER_HAVE_EDITLINE
              "line editing (emacs keys, ~/.editrc) and history kept in $HOME/.celer_history; "
#endif
              "/help lists the chat's commands.",
              opts,
              (int)(sizeof opts / sizeof opts[0]), {0}};
    const char *pos_model = NULL;
    if (argc > 0 && argv[0][0] != '-') {  /* celer run DIR ... */
        pos_model = argv[0];
        argc--, argv++;
    }
    int rc = args_parse(&a, argc, argv);
    if (rc) return rc == 1 ? 0 : 2;
    if (cli_device_flag(&a)) return 2;
    long n_pred, ctx, threads;
    if (args_int(&a, "--n-predict", -1, -1, 1 << 24, &n_pred) || args_int(&a, "--ctx-size", 0, 16, 1 << 24, &ctx) ||
        args_int(&a, "--threads", 0, 1, 1024, &threads))
        return 2;
    const char *dir = args_get(&a, "--model");
    if (dir && pos_model) {
        args_usage_error(&a, "give the model once (MODEL_DIR or -m)");
        return 2;
    }
    if (!dir) dir = pos_model;
    chat c = {0};
    c.quiet = args_get(&a, "--quiet") != NULL;
    c.parse_special = args_get(&a, "--parse-special-in-content") != NULL;
    c.stop_text = args_get(&a, "--stop");
    char defbuf[PATH_MAX + 64];
    if (!dir) {
        if (!(dir = cli_default_model(defbuf, sizeof defbuf))) {
            cli_error("run", "no model given and the default model (models/default) was not found; "
                             "set CELER_DEFAULT_MODEL or give a checkpoint directory");
            return 1;
        }
        if (!c.quiet) fprintf(stderr, "celer: the default model (%s)\n", dir);
    }
    char hubbuf[PATH_MAX + 64]; /* a hub name's snapshot directory; on a terminal, offers to pull it */
    if (!(dir = cli_model_resolve("run", dir, hubbuf, sizeof hubbuf, 1))) return 1;
    const char *prompt = args_get(&a, "--prompt"), *sys = args_get(&a, "--system"), *file = args_get(&a, "--file");
    if (prompt && file) {
        args_usage_error(&a, "give -p or -f, not both");
        return 2;
    }
    const char *gfile = args_get(&a, "--grammar"), *sfile = args_get(&a, "--json-schema");
    if (gfile && sfile) {
        args_usage_error(&a, "give one of --grammar and --json-schema");
        return 2;
    }
    celer_grammar *gram = NULL;
    if (gfile || sfile) { /* compiled before the model loads: a bad one is reported at once */
        char *src = cli_read_file("run", gfile ? gfile : sfile), *gbnf = src;
        if (src && sfile) gbnf = celer_json_schema_text_to_gbnf(src, (size_t)-1, "root");
        if (gbnf) gram = celer_grammar_compile(gbnf, (size_t)-1);
        if (src && !gram) cli_error("run", "%s %s: %s", gfile ? "--grammar" : "--json-schema", gfile ? gfile : sfile,
                                    celer_last_error());
        if (gbnf != src) free(gbnf);
        free(src);
        if (!gram) return 1;
    }
    char *file_text = NULL; /* -f's contents: the one message */
    if (file && !(prompt = file_text = cli_read_file("run", file))) {
        celer_grammar_free(gram);
        return 1;
    }
    if (file_text) { /* a file's last newline ends the message, not part of it */
        size_t fl = strlen(file_text);
        while (fl && (file_text[fl - 1] == '\n' || file_text[fl - 1] == '\r')) file_text[--fl] = '\0';
    }
    int status = 1;
    c.gram = gram;
    /* The model's worker threads start with SIGINT blocked, so Ctrl-C always
     * reaches this thread (and interrupts its wait at the prompt). */
    sigset_t intr;
    sigemptyset(&intr);
    sigaddset(&intr, SIGINT);
    pthread_sigmask(SIG_BLOCK, &intr, NULL);
    c.m = cli_model_open("run", dir, (int)threads, c.quiet);
    pthread_sigmask(SIG_UNBLOCK, &intr, NULL);
    if (!c.m || !(c.tk = celer_tokenizer_open(dir)) || (c.gram && !(c.gv = celer_grammar_vocab_new(c.tk)))) {
        cli_error("run", "%s", celer_last_error());
        goto done;
    }
    celer_model_get_info(c.m, &c.info);
    c.ctx = ctx ? (int)ctx : c.info.max_context > 0 && c.info.max_context < 4096 ? c.info.max_context : 4096;
    c.n_predict = (int)n_pred;
    c.eos[0] = c.info.eos_token;
    c.eos[1] = celer_tokenizer_eos(c.tk);
    celer_sampler_params sp;
    uint64_t seed;
    if (cli_sampling_params(&a, 0.8f, c.ctx, &sp, &seed)) {
        status = 2;
        goto done;
    }
    if (c.eos[1] >= 0 && c.eos[1] < c.info.vocab_size && c.eos[1] != c.eos[0]) {
        sp.stop = &c.eos[1];
        sp.n_stop = 1;
    }
    c.msgs = json_array();
    c.system = sys ? strdup(sys) : NULL;
    if (!(c.smp = celer_sampler_new(&sp, c.info.vocab_size)) || !(c.s = celer_session_new(c.m, c.ctx, 512)) ||
        !(c.hist = malloc((size_t)c.ctx * sizeof *c.hist)) ||
        !(c.ans = malloc((size_t)c.ctx * sizeof *c.ans)) || !c.msgs) {
        cli_error("run", "%s", celer_last_error()[0] ? celer_last_error() : "out of memory");
        goto done;
    }
    struct sigaction sa;
    memset(&sa, 0, sizeof sa);
    sa.sa_handler = on_sigint;  /* no SA_RESTART: Ctrl-C at the prompt interrupts the read */
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, NULL);
    if (prompt) {
        status = chat_turn(&c, prompt) == 0 ? 0 : 1;
        goto done;
    }
    int interactive = isatty(0);
    if (interactive && !c.quiet)
        fprintf(stderr, "celer: %s, %s, context %d; /help for commands, Ctrl-C stops an answer, /quit leaves\n",
                c.info.model_type, c.info.format, c.ctx);
    status = 0;
    line_editor ed;
    editor_init(&ed);
    for (;;) {
        char *line = read_line(interactive, &ed);
        if (!line) break;
        int leave = 0;
        if (line[0] == '/') leave = handle_command(&c, line);
        else if (line[0]) chat_turn(&c, line);
        free(line);
        if (leave) break;
    }
    editor_end(&ed);
done:
    free(file_text);
    json_decref(c.msgs);
    free(c.system);
    free(c.hist);
    free(c.ans);
    celer_session_free(c.s);
    celer_sampler_free(c.smp);
    celer_grammar_vocab_free(c.gv);
    celer_grammar_free(c.gram);
    celer_tokenizer_free(c.tk);
    celer_model_free(c.m);
    return status;
}
