/* server/reqlog.c: what the server says about its requests. One line per request on
 * stderr (text or one JSON object; `--quiet`: failed requests only, `-v`: more
 * fields), the server's own messages in the same format, llama-server's `timings`
 * of a job and its GET /slots array. A line is written with one call under
 * stderr's lock, so lines of concurrent requests never mix; every string from the
 * client is escaped, so a request cannot forge a line. Field names are documented
 * in docs/server.md ("Request log") and are stable. */
#include <arpa/inet.h>
#include <math.h>
#include <netdb.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "server/server.h"

/* ---- timings ---- */

void srv_timings_get_locked(const srv_job *j, srv_timings *t) {
    int gen = 0;
    for (int c = 0; c < j->req->n; c++) gen += j->n_gen[c];
    memset(t, 0, sizeof *t);
    t->cache_n = j->n_cached;
    t->prompt_n = j->n_prompt - j->n_cached;
    t->predicted_n = gen;
    /* as llama-server counts them: the prompt from the moment a slot took the job to
     * its first token (which the prompt's last forward yields), generation from that
     * token to the latest one */
    if (j->t_first > 0 && j->t_start > 0) {
        t->prompt_ms = (j->t_first - j->t_start) * 1e3;
        t->predicted_ms = (j->t_last - j->t_first) * 1e3;
        t->ttft_ms = (j->t_first - j->t_submit) * 1e3;
    } else {
        t->ttft_ms = -1;
    }
}

void srv_timings_get(srv_job *j, srv_timings *t) {
    pthread_mutex_lock(&j->mu);
    srv_timings_get_locked(j, t);
    pthread_mutex_unlock(&j->mu);
}

static double per(double a, double b) { return b > 0 ? a / b : 0; }

/* Milliseconds rounded to the microsecond (JSON has no infinities: a rate over no
 * time is 0). */
static double r3(double v) { return isfinite(v) ? round(v * 1e3) / 1e3 : 0; }

json_t *srv_timings_json(const srv_timings *in) {
    /* the rates from the times as printed, so a client recomputing them gets the same */
    srv_timings r = *in, *t = &r;
    r.prompt_ms = r3(r.prompt_ms);
    r.predicted_ms = r3(r.predicted_ms);
    return json_pack("{s:i, s:i, s:f, s:f, s:f, s:i, s:f, s:f, s:f}", "cache_n", t->cache_n, "prompt_n", t->prompt_n,
                     "prompt_ms", r3(t->prompt_ms), "prompt_per_token_ms", r3(per(t->prompt_ms, t->prompt_n)),
                     "prompt_per_second", r3(per(t->prompt_n * 1e3, t->prompt_ms)), "predicted_n", t->predicted_n,
                     "predicted_ms", r3(t->predicted_ms), "predicted_per_token_ms", r3(per(t->predicted_ms, t->predicted_n)),
                     "predicted_per_second", r3(per(t->predicted_n * 1e3, t->predicted_ms)));
}

/* ---- the log line ---- */

void srv_peer_name(int fd, char *out, size_t n) {
    struct sockaddr_storage a;
    socklen_t al = sizeof a;
    char host[INET6_ADDRSTRLEN + 1], port[16];
    if (fd < 0 || getpeername(fd, (struct sockaddr *)&a, &al) != 0 ||
        getnameinfo((struct sockaddr *)&a, al, host, sizeof host, port, sizeof port, NI_NUMERICHOST | NI_NUMERICSERV) != 0) {
        snprintf(out, n, "-");
        return;
    }
    snprintf(out, n, a.ss_family == AF_INET6 ? "[%s]:%s" : "%s:%s", host, port);
}

/* time: UTC with milliseconds, 2026-12-01T14:03:07.123Z */
static void now_iso(char *out, size_t n) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    struct tm tm;
    gmtime_r(&ts.tv_sec, &tm);
    char b[24];
    if (!strftime(b, sizeof b, "%Y-%m-%dT%H:%M:%S", &tm)) b[0] = 0;
    snprintf(out, n, "%.19s.%03dZ", b, (int)(ts.tv_nsec / 1000000L % 1000));
}

/* Appends s for a text line: printable ASCII and valid UTF-8 as they are, anything
 * else (control characters, stray bytes), the quote and the backslash as \xNN, so
 * the line stays one line and a quoted value stays quoted; with field set, spaces
 * too (a path cannot shift the fields after it). */
static void add_esc(srv_buf *b, const char *s, int field) {
    size_t n = strlen(s);
    int utf8 = srv_utf8_valid(s, n);
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if ((c >= 0x20 && c < 0x7f && c != '"' && c != '\\' && !(field && c == ' ')) || (c >= 0x80 && utf8)) {
            srv_buf_add(b, (const char *)&c, 1);
        } else {
            char e[8];
            snprintf(e, sizeof e, "\\x%02x", c);
            srv_buf_add(b, e, 4);
        }
    }
}

static void add_escaped(srv_buf *b, const char *s) { add_esc(b, s, 0); }
static void add_field(srv_buf *b, const char *s) { add_esc(b, s, 1); }

/* A JSON string of s (invalid UTF-8 escaped as in text lines). */
static json_t *jtext(const char *s) {
    if (srv_utf8_valid(s, strlen(s))) return json_string(s);
    srv_buf b = {0};
    add_escaped(&b, s);
    json_t *o = json_string(b.p ? b.p : "");
    srv_buf_free(&b);
    return o;
}

/* One line out, in one write under stderr's lock. */
static void emit_line(srv_buf *b) {
    if (!b->p) return;
    srv_buf_add(b, "\n", 1);
    flockfile(stderr);
    fwrite(b->p, 1, b->len, stderr);
    fflush(stderr);
    funlockfile(stderr);
}

static void addf(srv_buf *b, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void addf(srv_buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int k = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (k > 0) srv_buf_add(b, tmp, (size_t)k < sizeof tmp ? (size_t)k : sizeof tmp - 1);
}

/* Adds key="value" (escaped) to a text line. */
static void add_kv(srv_buf *b, const char *key, const char *v) {
    addf(b, " %s=\"", key);
    add_escaped(b, v);
    srv_buf_add(b, "\"", 1);
}

static const char *finish_name(int f) { return f == SRV_FINISH_STOP ? "stop" : f == SRV_FINISH_LENGTH ? "length" : "none"; }

/* A job's figures for the log, read under its lock. */
typedef struct {
    srv_timings t;
    int slot, finish, stream, n, max_tokens, has_first;
    celer_sampler_params sp;
    char id[48];
} job_view;

static void view_job(srv_job *j, job_view *v) {
    pthread_mutex_lock(&j->mu);
    srv_timings_get_locked(j, &v->t);
    v->slot = j->slot;
    v->finish = j->finish;
    v->has_first = j->t_first > 0;
    pthread_mutex_unlock(&j->mu);
    v->stream = j->req->stream;
    v->n = j->req->n;
    v->max_tokens = j->req->max_tokens;
    v->sp = j->req->sp;
    memcpy(v->id, j->id, sizeof v->id);
}

void srv_log_request(const srv_config *cfg, srv_reqlog *r) {
    int failed = r->status >= 400 && !r->disconnected;
    if (cfg->no_log || (cfg->quiet && !failed)) return;
    double total_ms = (srv_now() - r->t0) * 1e3;
    char when[40];
    now_iso(when, sizeof when);
    job_view v;
    if (r->job) view_job(r->job, &v);
    double tps = r->job ? per(v.t.predicted_n * 1e3, r3(v.t.predicted_ms)) : 0; /* = timings.predicted_per_second */
    srv_buf b = {0};
    if (!cfg->log_json) {
        /* 2026-12-01T14:03:07.123Z 127.0.0.1:51234 POST /v1/chat/completions 200 prompt=12 cached=0 gen=40 ttft_ms=35.1 tok_s=151.2 total_ms=310.4 */
        srv_buf_add(&b, when, strlen(when));
        srv_buf_add(&b, " ", 1);
        add_field(&b, r->client);
        srv_buf_add(&b, " ", 1);
        add_field(&b, r->method);
        srv_buf_add(&b, " ", 1);
        add_field(&b, r->path);
        addf(&b, " %d", r->status);
        if (r->job) {
            addf(&b, " prompt=%d cached=%d gen=%d", v.t.prompt_n + v.t.cache_n, v.t.cache_n, v.t.predicted_n);
            if (v.has_first) addf(&b, " ttft_ms=%.1f tok_s=%.1f", v.t.ttft_ms, tps);
        }
        addf(&b, " total_ms=%.1f", total_ms);
        if (r->disconnected) srv_buf_add(&b, " disconnected", 13);
        if (r->status >= 400 && r->error[0]) add_kv(&b, "error", r->error);
        if (cfg->verbose) {
            if (r->job) {
                addf(&b, " id=%s slot=%d finish=%s stream=%d n=%d max_tokens=%d temperature=%g top_k=%d top_p=%g min_p=%g seed=%llu",
                     v.id, v.slot, finish_name(v.finish), v.stream, v.n, v.max_tokens, v.sp.temperature, v.sp.top_k,
                     v.sp.top_p, v.sp.min_p, (unsigned long long)v.sp.seed);
                addf(&b, " prompt_ms=%.1f predicted_ms=%.1f", v.t.prompt_ms, v.t.predicted_ms);
            }
            addf(&b, " body_bytes=%zu key=%d", r->body_bytes, r->has_key);
            add_kv(&b, "content_type", r->content_type);
            add_kv(&b, "user_agent", r->user_agent);
        }
    } else {
        json_t *o = json_object();
        json_object_set_new(o, "time", json_string(when));
        json_object_set_new(o, "level", json_string(failed ? "error" : "info"));
        json_object_set_new(o, "client", jtext(r->client));
        json_object_set_new(o, "method", jtext(r->method));
        json_object_set_new(o, "path", jtext(r->path));
        json_object_set_new(o, "status", json_integer(r->status));
        json_object_set_new(o, "prompt_tokens", json_integer(r->job ? v.t.prompt_n + v.t.cache_n : 0));
        json_object_set_new(o, "cached_tokens", json_integer(r->job ? v.t.cache_n : 0));
        json_object_set_new(o, "generated_tokens", json_integer(r->job ? v.t.predicted_n : 0));
        json_object_set_new(o, "ttft_ms", r->job && v.has_first ? json_real(r3(v.t.ttft_ms)) : json_null());
        json_object_set_new(o, "tokens_per_second", r->job && v.has_first ? json_real(r3(tps)) : json_null());
        json_object_set_new(o, "total_ms", json_real(r3(total_ms)));
        json_object_set_new(o, "disconnected", json_boolean(r->disconnected));
        json_object_set_new(o, "error", r->status >= 400 && r->error[0] ? jtext(r->error) : json_null());
        if (cfg->verbose) {
            if (r->job) {
                json_object_set_new(o, "id", json_string(v.id));
                json_object_set_new(o, "slot", json_integer(v.slot));
                json_object_set_new(o, "finish_reason", v.finish ? json_string(finish_name(v.finish)) : json_null());
                json_object_set_new(o, "stream", json_boolean(v.stream));
                json_object_set_new(o, "n", json_integer(v.n));
                json_object_set_new(o, "max_tokens", json_integer(v.max_tokens));
                json_object_set_new(o, "sampling", json_pack("{s:f, s:i, s:f, s:f, s:I}", "temperature", r3(v.sp.temperature),
                                                             "top_k", v.sp.top_k, "top_p", r3(v.sp.top_p), "min_p",
                                                             r3(v.sp.min_p), "seed", (json_int_t)v.sp.seed));
                json_object_set_new(o, "prompt_ms", json_real(r3(v.t.prompt_ms)));
                json_object_set_new(o, "predicted_ms", json_real(r3(v.t.predicted_ms)));
            }
            json_object_set_new(o, "body_bytes", json_integer((json_int_t)r->body_bytes));
            json_object_set_new(o, "has_key", json_boolean(r->has_key));
            json_object_set_new(o, "content_type", jtext(r->content_type));
            json_object_set_new(o, "user_agent", jtext(r->user_agent));
        }
        char *line = json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12));
        json_decref(o);
        if (line) srv_buf_add(&b, line, strlen(line));
        free(line);
    }
    emit_line(&b);
    srv_buf_free(&b);
}

void srv_log_msg(const srv_config *cfg, const char *level, const char *fmt, ...) {
    int info = strcmp(level, "info") == 0;
    if (cfg->quiet && info) return;
    char msg[1024];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    srv_buf b = {0};
    if (cfg->log_json) {
        char when[40];
        now_iso(when, sizeof when);
        json_t *o = json_pack("{s:s, s:s, s:o}", "time", when, "level", level, "message", jtext(msg));
        char *line = o ? json_dumps(o, JSON_COMPACT | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(12)) : NULL;
        json_decref(o);
        if (line) srv_buf_add(&b, line, strlen(line));
        free(line);
    } else {
        srv_buf_add(&b, "celer serve: ", 13);
        if (!info) addf(&b, "%s: ", level);
        srv_buf_add(&b, msg, strlen(msg));
    }
    emit_line(&b);
    srv_buf_free(&b);
}

/* ---- GET /slots ---- */

char *srv_slots_json(srv *s) {
    int n = s->cfg.n_parallel;
    srv_slot_info *in = calloc((size_t)(n > 0 ? n : 1), sizeof *in);
    if (!in) return NULL;
    n = srv_sched_get_slots(s->sched, in, n);
    json_t *a = json_array();
    for (int i = 0; i < n; i++) {
        const srv_slot_info *x = &in[i];
        int remain = x->max_tokens < 0 ? -1 : x->max_tokens - x->n_decoded;
        json_t *params = json_pack("{s:i, s:i, s:I, s:f, s:i, s:f, s:f, s:i, s:f, s:f, s:f, s:b, s:i, s:i}", "n_predict",
                                   x->max_tokens, "max_tokens", x->max_tokens, "seed", (json_int_t)x->sp.seed, "temperature",
                                   r3(x->sp.temperature), "top_k", x->sp.top_k, "top_p", r3(x->sp.top_p), "min_p",
                                   r3(x->sp.min_p), "repeat_last_n", x->sp.penalty_last_n, "repeat_penalty",
                                   r3(x->sp.repeat_penalty), "presence_penalty", r3(x->sp.presence_penalty),
                                   "frequency_penalty", r3(x->sp.frequency_penalty), "stream", x->stream, "n_probs",
                                   x->logprobs, "n_stop", x->n_stop);
        json_t *next = json_pack("{s:b, s:i, s:i}", "has_next_token", x->busy, "n_remain", x->busy ? remain : -1, "n_decoded",
                                 x->n_decoded);
        json_t *o = json_pack("{s:i, s:I, s:i, s:b, s:b, s:i, s:i, s:i, s:i, s:o, s:o}", "id", x->id, "id_task",
                              (json_int_t)(x->busy ? x->task : -1), "n_ctx", x->n_ctx, "speculative", 0, "is_processing",
                              x->busy, "n_past", x->n_past, "n_prompt_tokens", x->n_prompt, "n_cached_tokens", x->n_cached,
                              "choice", x->choice, "params", params, "next_token", next);
        json_array_append_new(a, o);
    }
    free(in);
    char *out = json_dumps(a, JSON_COMPACT | JSON_REAL_PRECISION(12));
    json_decref(a);
    return out;
}
