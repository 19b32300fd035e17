/* server/server.c: the life of a server: bind and answer /health (503) at once,
 * load the model and tokenizer, serve, and on shutdown refuse new work, finish
 * what is in flight, and free everything. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/err.h"
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

int srv_load(srv *s) {
    const char *tdir = s->cfg.tokenizer_dir ? s->cfg.tokenizer_dir : s->cfg.model_dir;
    if (!(s->tok = celer_tokenizer_open(tdir))) return err_prefix("tokenizer");
    if (!(s->model = celer_model_open_on(s->cfg.model_dir, s->cfg.n_threads, s->cfg.device))) return -1;
    celer_model_get_info(s->model, &s->info);
    if (s->cfg.ctx_size <= 0) s->cfg.ctx_size = s->info.max_context > 0 && s->info.max_context < 4096 ? s->info.max_context : 4096;
    if (s->cfg.batch_size <= 0) s->cfg.batch_size = 512;
    if (s->cfg.batch_size > s->cfg.ctx_size) s->cfg.batch_size = s->cfg.ctx_size;
    if (srv_prepare_requests(s) != 0) return -1;
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
