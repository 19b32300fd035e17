/* server/server.c: the life of a server: bind and answer /health (503) at once,
 * load the model and tokenizer, serve, and on shutdown refuse new work, finish
 * what is in flight, and free everything. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
#include "base/json.h"
#include "server/server.h"

srv *srv_start(const srv_config *cfg) {
    srv *s = calloc(1, sizeof *s);
    if (!s) {
        err_set("out of memory");
        return NULL;
    }
    s->cfg = *cfg;
    if (!(s->metrics = srv_metrics_new()) || http_start(s) != 0) {
        srv_free(s);
        return NULL;
    }
    return s;
}

static void add_eos(srv *s, long long id) {
    if (id < 0 || id >= s->info.vocab_size) return;
    for (int i = 0; i < s->n_eos; i++)
        if (s->eos_ids[i] == id) return;
    int32_t *p = realloc(s->eos_ids, (size_t)(s->n_eos + 1) * sizeof *p);
    if (!p) return;
    s->eos_ids = p;
    s->eos_ids[s->n_eos++] = (int32_t)id;
}

/* Tokens that end a generation: the config's and tokenizer's EOS, generation_config's
 * eos_token_id (a number or a list), and the end-of-turn tokens chat templates use. */
static void collect_eos(srv *s) {
    add_eos(s, s->info.eos_token);
    add_eos(s, celer_tokenizer_eos(s->tok));
    char path[4096];
    snprintf(path, sizeof path, "%s/generation_config.json", s->cfg.model_dir);
    FILE *f = fopen(path, "rb");
    if (f) {
        fclose(f);
        json_t *g = json_load_path(path);
        json_t *e = g ? json_object_get(g, "eos_token_id") : NULL;
        if (json_is_integer(e)) add_eos(s, json_integer_value(e));
        size_t i;
        json_t *x;
        if (json_is_array(e)) json_array_foreach(e, i, x) if (json_is_integer(x)) add_eos(s, json_integer_value(x));
        json_decref(g);
        err_clear();
    }
    static const char *const eot[] = {"<|im_end|>", "<end_of_turn>", "<|eot_id|>", "<|end|>", "<|return|>", "<|call|>",
                                      "<|endoftext|>", "[|endofturn|]"};
    for (size_t i = 0; i < sizeof eot / sizeof eot[0]; i++) add_eos(s, celer_tokenizer_token_id(s->tok, eot[i]));
}

int srv_load(srv *s) {
    const char *tdir = s->cfg.tokenizer_dir ? s->cfg.tokenizer_dir : s->cfg.model_dir;
    if (!(s->tok = celer_tokenizer_open(tdir))) return err_prefix("tokenizer");
    if (!(s->model = celer_model_open(s->cfg.model_dir, s->cfg.n_threads))) return -1;
    celer_model_get_info(s->model, &s->info);
    if (s->cfg.ctx_size <= 0) s->cfg.ctx_size = s->info.max_context > 0 && s->info.max_context < 4096 ? s->info.max_context : 4096;
    if (s->cfg.batch_size <= 0) s->cfg.batch_size = 512;
    if (s->cfg.batch_size > s->cfg.ctx_size) s->cfg.batch_size = s->cfg.ctx_size;
    s->has_template = celer_tokenizer_has_template(s->tok);
    if (s->cfg.alias) {
        s->model_id = strdup(s->cfg.alias);
    } else {
        size_t n = strlen(s->cfg.model_dir);
        while (n > 1 && s->cfg.model_dir[n - 1] == '/') n--;
        size_t b = n;
        while (b > 0 && s->cfg.model_dir[b - 1] != '/') b--;
        s->model_id = strndup(s->cfg.model_dir + b, n - b);
    }
    if (!s->model_id) return err_set("out of memory");
    collect_eos(s);
    if (!(s->sched = srv_sched_new(s->model, s->tok, &s->cfg, s->metrics))) return err_prefix("scheduler");
    __atomic_store_n(&s->ready, 1, __ATOMIC_RELEASE);
    return 0;
}

void srv_stop(srv *s) {
    if (!s) return;
    __atomic_store_n(&s->draining, 1, __ATOMIC_RELEASE);
    srv_sched_drain(s->sched);
    /* the jobs are finished; let their responses reach the clients (bounded) */
    for (int i = 0; i < 3000 && __atomic_load_n(&s->active, __ATOMIC_ACQUIRE) > 0; i++)
        nanosleep(&(struct timespec){0, 10 * 1000000L}, NULL);
    http_stop(s);
}

void srv_free(srv *s) {
    if (!s) return;
    http_stop(s);
    srv_sched_free(s->sched);
    celer_model_free(s->model);
    celer_tokenizer_free(s->tok);
    srv_metrics_free(s->metrics);
    free(s->eos_ids);
    free(s->model_id);
    free(s);
}
