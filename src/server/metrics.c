/* server/metrics.c: the server's counters and latency histograms, rendered in the
 * Prometheus text exposition format (version 0.0.4). One mutex guards them all;
 * they are touched a few times per token, never in a hot loop. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/server.h"

static const double ttft_le[] = {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30};
static const double tok_le[] = {0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1};
#define N_TTFT (int)(sizeof ttft_le / sizeof ttft_le[0])
#define N_TOK (int)(sizeof tok_le / sizeof tok_le[0])

typedef struct {
    uint64_t count, le[16];    /* le[i]: observations <= bound i (cumulative at render) */
    double sum;
} histo;

struct srv_metrics {
    pthread_mutex_t mu;
    uint64_t req_2xx, req_4xx, req_5xx, req_503, req_401;
    uint64_t prompt_tokens, cached_tokens, cache_hits, gen_tokens, cancelled;
    histo ttft, tok;
};

srv_metrics *srv_metrics_new(void) {
    srv_metrics *m = calloc(1, sizeof *m);
    if (m) pthread_mutex_init(&m->mu, NULL);
    return m;
}

void srv_metrics_free(srv_metrics *m) {
    if (!m) return;
    pthread_mutex_destroy(&m->mu);
    free(m);
}

void srv_metrics_request(srv_metrics *m, int status) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    if (status < 400) m->req_2xx++;
    else if (status < 500) m->req_4xx++;
    else m->req_5xx++;
    if (status == 503) m->req_503++;
    if (status == 401) m->req_401++;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_tokens(srv_metrics *m, int prompt, int cached, int generated) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->prompt_tokens += (uint64_t)prompt;
    m->cached_tokens += (uint64_t)cached;
    m->cache_hits += cached > 0;
    m->gen_tokens += (uint64_t)generated;
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_cancelled(srv_metrics *m) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    m->cancelled++;
    pthread_mutex_unlock(&m->mu);
}

static void observe(histo *h, const double *le, int n, double v) {
    h->count++;
    h->sum += v;
    for (int i = 0; i < n; i++)
        if (v <= le[i]) {
            h->le[i]++;
            break;
        }
}

void srv_metrics_ttft(srv_metrics *m, double s) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    observe(&m->ttft, ttft_le, N_TTFT, s);
    pthread_mutex_unlock(&m->mu);
}

void srv_metrics_token_latency(srv_metrics *m, double s) {
    if (!m) return;
    pthread_mutex_lock(&m->mu);
    observe(&m->tok, tok_le, N_TOK, s);
    pthread_mutex_unlock(&m->mu);
}

static void put_histo(srv_buf *b, const char *name, const char *help, const histo *h, const double *le, int n) {
    char line[256];
    snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s histogram\n", name, help, name);
    srv_buf_add(b, line, strlen(line));
    uint64_t cum = 0;
    for (int i = 0; i < n; i++) {
        cum += h->le[i];
        snprintf(line, sizeof line, "%s_bucket{le=\"%g\"} %llu\n", name, le[i], (unsigned long long)cum);
        srv_buf_add(b, line, strlen(line));
    }
    snprintf(line, sizeof line, "%s_bucket{le=\"+Inf\"} %llu\n%s_sum %.6f\n%s_count %llu\n", name,
             (unsigned long long)h->count, name, h->sum, name, (unsigned long long)h->count);
    srv_buf_add(b, line, strlen(line));
}

static void put(srv_buf *b, const char *name, const char *type, const char *help, const char *labels, double v) {
    char line[384];
    if (help) {
        snprintf(line, sizeof line, "# HELP %s %s\n# TYPE %s %s\n", name, help, name, type);
        srv_buf_add(b, line, strlen(line));
    }
    snprintf(line, sizeof line, "%s%s %.17g\n", name, labels ? labels : "", v);
    srv_buf_add(b, line, strlen(line));
}

char *srv_metrics_render(srv_metrics *m, const srv_sched_stats *st) {
    srv_buf b = {0};
    pthread_mutex_lock(&m->mu);
    const char *reqh = "HTTP requests answered, by status class";
    put(&b, "celer_requests_total", "counter", reqh, "{code=\"2xx\"}", (double)m->req_2xx);
    put(&b, "celer_requests_total", NULL, NULL, "{code=\"4xx\"}", (double)m->req_4xx);
    put(&b, "celer_requests_total", NULL, NULL, "{code=\"5xx\"}", (double)m->req_5xx);
    put(&b, "celer_requests_rejected_total", "counter", "requests refused because the queue was full or the server draining (503)",
        NULL, (double)m->req_503);
    put(&b, "celer_requests_unauthorized_total", "counter", "requests without the right bearer key (401)", NULL,
        (double)m->req_401);
    put(&b, "celer_requests_cancelled_total", "counter", "requests whose client went away before the end (slot freed at once)",
        NULL, (double)m->cancelled);
    put(&b, "celer_prompt_tokens_total", "counter", "prompt tokens of admitted requests", NULL, (double)m->prompt_tokens);
    put(&b, "celer_completion_tokens_total", "counter", "generated tokens", NULL, (double)m->gen_tokens);
    put(&b, "celer_prompt_cache_hits_total", "counter", "requests that reused a cached prompt prefix", NULL,
        (double)m->cache_hits);
    put(&b, "celer_prompt_cache_reused_tokens_total", "counter", "prompt tokens served from the prompt cache", NULL,
        (double)m->cached_tokens);
    put_histo(&b, "celer_time_to_first_token_seconds", "time from request to its first generated token", &m->ttft,
              ttft_le, N_TTFT);
    put_histo(&b, "celer_time_per_output_token_seconds", "time between consecutive generated tokens of a stream",
              &m->tok, tok_le, N_TOK);
    pthread_mutex_unlock(&m->mu);
    put(&b, "celer_queue_depth", "gauge", "requests waiting for a slot", NULL, st ? st->queued : 0);
    put(&b, "celer_slots_busy", "gauge", "slots serving a request", NULL, st ? st->busy : 0);
    put(&b, "celer_slots_total", "gauge", "slots (--parallel)", NULL, st ? st->slots : 0);
    put(&b, "celer_kv_tokens_in_use", "gauge", "tokens the busy slots hold", NULL, st ? (double)st->kv_tokens : 0);
    put(&b, "celer_kv_bytes_in_use", "gauge",
        "KV cache bytes of the tokens the busy slots hold (per slot what celer inspect -c TOKENS reports)", NULL,
        st ? (double)st->kv_bytes : 0);
    put(&b, "celer_prompt_cache_bytes", "gauge", "bytes the prompt cache accounts for", NULL,
        st ? (double)st->cache_bytes : 0);
    put(&b, "celer_prompt_cache_entries", "gauge", "entries in the prompt cache", NULL, st ? st->cache_entries : 0);
    celer_kv_pool_stats ps; /* the block pool host caches draw from (docs/kv-cache.md) */
    celer_kv_pool_get(&ps);
    put(&b, "celer_kv_pool_blocks_used", "gauge", "KV pool blocks held by slots, snapshots and the prompt cache", NULL,
        (double)ps.used_blocks);
    put(&b, "celer_kv_pool_bytes_used", "gauge", "bytes of the KV pool blocks in use", NULL, (double)ps.used_bytes);
    put(&b, "celer_kv_pool_bytes_budget", "gauge", "the KV pool's budget (--kv-budget)", NULL, (double)ps.budget_bytes);
    put(&b, "celer_kv_pool_cow_blocks_total", "counter", "KV blocks copied because a write touched a shared one", NULL,
        (double)ps.cow_blocks);
    /* llama-server's names for the same figures, so dashboards built for it work */
    put(&b, "llamacpp:prompt_tokens_total", "counter", "= celer_prompt_tokens_total", NULL, (double)m->prompt_tokens);
    put(&b, "llamacpp:tokens_predicted_total", "counter", "= celer_completion_tokens_total", NULL, (double)m->gen_tokens);
    put(&b, "llamacpp:requests_processing", "gauge", "= celer_slots_busy", NULL, st ? st->busy : 0);
    put(&b, "llamacpp:requests_deferred", "gauge", "= celer_queue_depth", NULL, st ? st->queued : 0);
    put(&b, "llamacpp:kv_cache_tokens", "gauge", "= celer_kv_tokens_in_use", NULL, st ? (double)st->kv_tokens : 0);
    if (!b.p) srv_buf_add(&b, "", 0);
    return b.p;
}
