/* server/endpoints.c: the table of HTTP endpoints `celer serve` answers: each one's
 * path (and alias), method, whether it needs the API key, and what answers it (a
 * handler returning the body, or the generation path). http.c looks requests up here
 * and applies the checks every endpoint shares (key, limits, readiness, method).
 * Adding an endpoint: its handler (here, or in its own file with one declaration
 * below) and one row in the table (docs/howto.md, "Add an endpoint"). */
#include <jansson.h>
#include <string.h>

#include "server/server.h"

static char *models(srv *s, const char *body, size_t len, int *status, const char **ctype) {
    (void)body, (void)len, (void)status, (void)ctype;
    return openai_models_json(s);
}

static char *metrics(srv *s, const char *body, size_t len, int *status, const char **ctype) {
    (void)body, (void)len;
    if (!s->cfg.metrics) {
        *status = 501;
        return openai_error_json(501, "metrics are off: start the server with --metrics", NULL);
    }
    if (!s->sched) {
        *status = 503;
        return openai_error_json(503, "Loading model", NULL);
    }
    srv_sched_stats st;
    srv_sched_get_stats(s->sched, &st);
    *ctype = "text/plain; version=0.0.4; charset=utf-8";
    return srv_metrics_render(s->metrics, &st);
}

static char *tokenize(srv *s, const char *body, size_t len, int *status, const char **ctype) {
    (void)ctype;
    return openai_tokenize_json(s, body, len, status);
}

static char *detokenize(srv *s, const char *body, size_t len, int *status, const char **ctype) {
    (void)ctype;
    return openai_detokenize_json(s, body, len, status);
}

/* llama-server's /props: what clients read to learn the server's shape. */
static char *props(srv *s, const char *body, size_t len, int *status, const char **ctype) {
    (void)body, (void)len, (void)status, (void)ctype;
    json_t *o = json_pack("{s:{s:i, s:i}, s:i, s:s, s:s, s:i, s:s, s:s}", "default_generation_settings", "n_ctx",
                          s->cfg.ctx_size, "n_predict", s->cfg.n_predict, "total_slots", s->cfg.n_parallel, "model_alias",
                          s->model_id, "model_path", s->cfg.model_dir ? s->cfg.model_dir : "", "n_ctx_train",
                          s->info.max_context, "model_type", s->info.model_type ? s->info.model_type : "", "format",
                          s->info.format ? s->info.format : "");
    char *out = o ? json_dumps(o, JSON_COMPACT) : NULL;
    json_decref(o);
    return out;
}

/* llama-server's /slots: each slot's task, context and sampling (reqlog.c). Off
 * unless --slots, as in llama-server (it shows other clients' parameters). */
static char *slots(srv *s, const char *body, size_t len, int *status, const char **ctype) {
    (void)body, (void)len, (void)ctype;
    if (!s->cfg.slots) {
        *status = 501;
        return openai_error_json(501, "This server does not support the slots endpoint: start it with --slots", NULL);
    }
    if (!s->sched) {
        *status = 503;
        return openai_error_json(503, "Loading model", NULL);
    }
    return srv_slots_json(s);
}

static const srv_endpoint table[] = {
    /* path                   alias                method  public kind          generation      handler */
    {"/health", "/v1/health", "GET", 1, SRV_EP_HEALTH, 0, NULL},
    {"/", NULL, "GET", 1, SRV_EP_PAGE, 0, NULL}, /* the chat page (page.c: its own headers) */
    {"/v1/models", "/models", "GET", 1, SRV_EP_HANDLER, 0, models},
    {"/props", NULL, "GET", 0, SRV_EP_HANDLER, 0, props},
    {"/metrics", NULL, "GET", 0, SRV_EP_HANDLER, 0, metrics},
    {"/slots", NULL, "GET", 0, SRV_EP_HANDLER, 0, slots},
    {"/tokenize", NULL, "POST", 0, SRV_EP_HANDLER, 0, tokenize},
    {"/detokenize", NULL, "POST", 0, SRV_EP_HANDLER, 0, detokenize},
    {"/v1/chat/completions", "/chat/completions", "POST", 0, SRV_EP_GENERATE, SRV_CHAT, NULL},
    {"/v1/completions", "/completions", "POST", 0, SRV_EP_GENERATE, SRV_COMPLETION, NULL},
    {"/completion", NULL, "POST", 0, SRV_EP_GENERATE, SRV_NATIVE, NULL},
};

const srv_endpoint *srv_endpoint_find(const char *path) {
    for (size_t i = 0; i < sizeof table / sizeof table[0]; i++)
        if (strcmp(path, table[i].path) == 0 || (table[i].alias && strcmp(path, table[i].alias) == 0)) return &table[i];
    return NULL;
}
