/* server/http.c: libmicrohttpd glue. One thread per connection (libmicrohttpd's
 * THREAD_PER_CONNECTION mode). When a request's headers are complete the handler
 * refuses at once what needs no body: too many connections (503), a missing or
 * wrong key (401), a Content-Length over --max-body (413), conflicting
 * Content-Length headers (400), a transfer coding other than chunked (501). It then
 * gathers the body, answering 413 and closing as soon as a chunked body passes
 * --max-body, and accounting it against --requests-ram (guard.c, which also holds
 * the header and body deadlines). It routes, and for a generation submits a job and
 * either waits for it (plain responses) or hands libmicrohttpd a content reader that
 * blocks on the job's events (server-sent events). While it waits, the thread looks
 * at the socket every 50 ms: a client that went away cancels its job (a queued job
 * leaves the queue at once; a running one frees its slot on the next step). */
#include <errno.h>
#include <jansson.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <sys/socket.h>
#include <time.h>

#include "base/err.h"
#include "base/limits.h"
#include "server/page.h"
#include "server/server.h"

typedef struct {
    srv_buf body;
    int too_big;
    int too_many;             /* over --max-concurrent connections */
    int counted;              /* counted in s->active (a generation request) */
    int http11;               /* the request is HTTP/1.1 (it may get a 100 Continue) */
    srv_conn *conn;           /* guard.c's record of the connection */
    size_t parse_cost;        /* request memory reserved for parsing the body */
    double t0;
    srv_reqlog log;           /* its line in the request log, written when it completes */
} conn_ctx;

/* Watching a waiting client: has it gone? */
typedef struct {
    int fd;
    int can_probe;            /* HTTP/1.1 before the response: a 100 Continue may be sent */
    int stream;               /* an event stream: the probe is an SSE comment line */
    int want_probe;           /* the stream should send its probe now */
    int probed;               /* something was written after its FIN */
} peer;

typedef struct {
    srv *s;
    srv_job *j;               /* one reference */
    peer p;
    srv_buf out;
    unsigned char *started;   /* [n] the choice has sent its first chunk */
    int finished;             /* the closing frames are in out */
    double t0;
} stream_ctx;

static const char *JSON = "application/json; charset=utf-8";

/* 1 when the client has gone. A FIN alone does not say so: a client may shut its
 * sending side after the request (shutdown(SHUT_WR)) and still read the answer. So
 * after a FIN the server writes something the client ignores if it is listening (an
 * interim "100 Continue", which HTTP/1.1 clients must accept before any response, or
 * the stream's own bytes), and a client that closed the socket answers that with a
 * reset: the socket's state becomes TCP_CLOSE, or the peek fails. */
static int client_gone(peer *p) {
    if (p->fd < 0) return 0;
    char b;
    ssize_t k = recv(p->fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (k > 0) return 0;
    if (k < 0) return errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
    struct tcp_info ti;
    socklen_t tl = sizeof ti;
    if (getsockopt(p->fd, IPPROTO_TCP, TCP_INFO, &ti, &tl) == 0 && ti.tcpi_state == TCP_CLOSE) return 1;
    if (p->probed) return 0; /* half-closed: still reading */
    if (p->stream) { /* libmicrohttpd may hold the headers back until the first bytes */
        p->probed = p->want_probe = 1;
        return 0;
    }
    if (!p->can_probe) return 1; /* HTTP/1.0: nothing may be written before the answer */
    static const char cont[] = "HTTP/1.1 100 Continue\r\n\r\n";
    p->probed = 1;
    return send(p->fd, cont, sizeof cont - 1, MSG_NOSIGNAL | MSG_DONTWAIT) < 0;
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

static void cancel_job(srv *s, srv_job *j) {
    pthread_mutex_lock(&j->mu);
    int was_done = j->done, was = j->cancelled;
    j->cancelled = 1;
    pthread_mutex_unlock(&j->mu);
    if (was_done || was || !s->sched) return;
    /* a queued job gives its place back now; a running one leaves on the next step */
    if (srv_sched_cancel(s->sched, j)) srv_metrics_cancelled(s->metrics);
    else srv_sched_wake(s->sched);
}

/* Waits up to 50 ms for j->cv; j->mu is held. */
static void wait_50ms(srv_job *j) { srv_timed_wait(&j->cv, &j->mu, 50); }

/* --cors-origin: browsers on that origin may read the answers. */
static void add_cors(const srv *s, struct MHD_Response *r) {
    if (!s->cfg.cors_origin) return;
    MHD_add_response_header(r, "Access-Control-Allow-Origin", s->cfg.cors_origin);
    if (strcmp(s->cfg.cors_origin, "*") != 0) MHD_add_response_header(r, "Vary", "Origin");
}

/* The request log's error field: the message of an error body {"error":{"message"}}. */
static void log_error(conn_ctx *cc, const char *body) {
    json_t *o = json_loads(body, 0, NULL);
    const char *m = json_string_value(json_object_get(json_object_get(o, "error"), "message"));
    snprintf(cc->log.error, sizeof cc->log.error, "%s", m ? m : "");
    json_decref(o);
}

/* Queues a response with body (malloc'd, taken); the request log notes its status. */
static enum MHD_Result reply(srv *s, struct MHD_Connection *c, conn_ctx *cc, int status, const char *ctype, char *body) {
    if (!body) {
        status = 500;
        body = openai_error_json(500, "out of memory", NULL);
    }
    cc->log.status = status;
    if (status >= 400) log_error(cc, body);
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    add_cors(s, r);
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    if (status == 503) MHD_add_response_header(r, "Retry-After", "1");
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    srv_metrics_request(s->metrics, status);
    return rc;
}

static enum MHD_Result reply_error(srv *s, struct MHD_Connection *c, conn_ctx *cc, int status, const char *msg, const char *param) {
    return reply(s, c, cc, status, JSON, openai_error_json(status, msg, param));
}

/* ---- streaming ---- */

static ssize_t stream_read(void *cls, uint64_t pos, char *buf, size_t max) {
    stream_ctx *sc = cls;
    srv_job *j = sc->j;
    (void)pos;
    for (;;) {
        if (sc->out.off < sc->out.len) {
            size_t n = sc->out.len - sc->out.off;
            if (n > max) n = max;
            memcpy(buf, sc->out.p + sc->out.off, n);
            sc->out.off += n;
            return (ssize_t)n;
        }
        if (sc->finished) return MHD_CONTENT_READER_END_OF_STREAM;
        pthread_mutex_lock(&j->mu);
        if (!j->head && !j->done) wait_50ms(j);
        srv_event *ev = srv_job_take_locked(j);
        int done = j->done;
        pthread_mutex_unlock(&j->mu);
        int rc = 0;
        for (srv_event *e = ev; e && !rc; e = e->next) {
            rc = openai_stream_event(sc->s, j, e, !sc->started[e->choice], &sc->out);
            sc->started[e->choice] = 1;
        }
        srv_event_free(ev);
        if (!rc && done) {
            rc = openai_stream_end(sc->s, j, &sc->out);
            sc->finished = 1;
        }
        if (rc) {
            cancel_job(sc->s, j);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (sc->out.off == sc->out.len && client_gone(&sc->p)) {
            cancel_job(sc->s, j);
            return MHD_CONTENT_READER_END_WITH_ERROR;
        }
        if (sc->p.want_probe) { /* a FIN: an SSE comment (ignored by readers) is the probe */
            sc->p.want_probe = 0;
            if (srv_buf_add(&sc->out, ":\n\n", 3)) {
                cancel_job(sc->s, j);
                return MHD_CONTENT_READER_END_WITH_ERROR;
            }
        }
    }
}

static void stream_free(void *cls) {
    stream_ctx *sc = cls;
    if (!sc) return;
    cancel_job(sc->s, sc->j); /* no-op for a finished job */
    srv_job_unref(sc->j);
    srv_buf_free(&sc->out);
    free(sc->started);
    free(sc);
}

/* ---- generation ---- */

static enum MHD_Result generate(srv *s, struct MHD_Connection *c, int kind, conn_ctx *cc) {
    int status = 0;
    char *msg = NULL;
    const char *param = NULL;
    srv_request *r = openai_parse(s, kind, cc->body.p ? cc->body.p : "", cc->body.len, &status, &msg, &param);
    if (!r) {
        enum MHD_Result rc = reply_error(s, c, cc, status, msg, param);
        free(msg);
        return rc;
    }
    srv_job *j = srv_job_new(r, kind == SRV_CHAT ? "chatcmpl" : "cmpl");
    if (!j) return reply_error(s, c, cc, 500, celer_last_error(), NULL);
    if (srv_sched_submit(s->sched, j) != 0) {
        srv_job_unref(j);
        return reply_error(s, c, cc, 503,
                           __atomic_load_n(&s->draining, __ATOMIC_ACQUIRE)
                               ? "the server is shutting down"
                               : "the server is busy: the request queue is full (--queue-size); try again later",
                           NULL);
    }
    srv_job_ref(j); /* the request log's: its counts and times are read when the request completes */
    cc->log.job = j;
    /* the prompt is tokens now: the parse's memory is free again */
    guard_unreserve(s, cc->conn, cc->parse_cost);
    cc->parse_cost = 0;
    peer p = {.fd = conn_fd(c), .can_probe = cc->http11};
    if (j->req->stream) {
        stream_ctx *sc = calloc(1, sizeof *sc);
        if (sc) sc->started = calloc((size_t)j->req->n, 1);
        struct MHD_Response *resp = sc && sc->started
                                        ? MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_read, sc, stream_free)
                                        : NULL;
        if (!resp) {
            cancel_job(s, j);
            srv_job_unref(j);
            if (sc) free(sc->started);
            free(sc);
            return MHD_NO;
        }
        sc->s = s;
        sc->j = j;
        sc->p = p;
        sc->p.stream = 1;
        sc->t0 = cc->t0;
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        add_cors(s, resp);
        enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        srv_metrics_request(s->metrics, 200);
        cc->log.status = 200;
        return rc;
    }
    pthread_mutex_lock(&j->mu);
    int gone = 0;
    while (!j->done && !gone) {
        wait_50ms(j);
        if (!j->done) {
            pthread_mutex_unlock(&j->mu);
            gone = client_gone(&p);
            pthread_mutex_lock(&j->mu);
        }
    }
    srv_event *ev = srv_job_take_locked(j);
    int jst = j->status;
    pthread_mutex_unlock(&j->mu);
    enum MHD_Result rc;
    if (gone) {
        cancel_job(s, j);
        cc->log.status = 499; /* nginx's "client closed request": nothing was answered */
        cc->log.disconnected = 1;
        rc = MHD_NO;
    } else if (jst) {
        rc = reply_error(s, c, cc, jst, j->error, NULL);
    } else {
        rc = reply(s, c, cc, 200, JSON, openai_response_json(s, j, ev));
    }
    srv_event_free(ev);
    srv_job_unref(j);
    return rc;
}

/* ---- routing ---- */

/* key == the n bytes at h, in time that depends on the key's length only; a NUL in
 * the header never matches (the key cannot hold one). */
static int key_equal(const char *h, size_t n, const char *key) {
    size_t k = strlen(key);
    unsigned diff = n != k;
    for (size_t i = 0; i < k; i++) diff |= (unsigned)((i < n ? (unsigned char)h[i] : 0u) ^ (unsigned char)key[i]);
    return diff == 0 && !memchr(h, 0, n);
}

/* The key comes as 'Authorization: Bearer KEY' or 'X-Api-Key: KEY' (both compared in
 * constant time). */
static int authorized(srv *s, struct MHD_Connection *c) {
    if (!s->cfg.api_key) return 1;
    const char *h = NULL;
    size_t n = 0;
    if (MHD_lookup_connection_value_n(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION,
                                      strlen(MHD_HTTP_HEADER_AUTHORIZATION), &h, &n) == MHD_YES &&
        h && n >= 7 && strncasecmp(h, "Bearer ", 7) == 0) {
        h += 7, n -= 7;
        while (n && *h == ' ') h++, n--;
        return key_equal(h, n, s->cfg.api_key);
    }
    if (MHD_lookup_connection_value_n(c, MHD_HEADER_KIND, "X-Api-Key", 9, &h, &n) == MHD_YES && h)
        return key_equal(h, n, s->cfg.api_key);
    return 0;
}

static int max_concurrent(const srv *s) { return s->cfg.max_concurrent > 0 ? s->cfg.max_concurrent : CELER_SERVE_MAX_CONCURRENT; }

/* Paths that need no key. */
static int is_public(const char *url) {
    const srv_endpoint *e = srv_endpoint_find(url);
    return e && e->public;
}

/* Reserves what parsing the body may cost; answers 413 (over the request's budget) or
 * 503 (over --requests-ram) and returns 0 when it cannot. */
static int reserve_parse(srv *s, struct MHD_Connection *c, conn_ctx *cc, enum MHD_Result *rc);

static enum MHD_Result route(srv *s, struct MHD_Connection *c, const char *url, const char *method, conn_ctx *cc) {
    const srv_endpoint *e = srv_endpoint_find(url);
    int ready = __atomic_load_n(&s->ready, __ATOMIC_ACQUIRE);
    if (e && e->kind == SRV_EP_HEALTH) {
        if (strcmp(method, e->method) != 0) return reply_error(s, c, cc, 405, "use GET", NULL);
        if (!ready) return reply_error(s, c, cc, 503, "Loading model", NULL);
        return reply(s, c, cc, 200, JSON, strdup("{\"status\":\"ok\"}"));
    }
    if (e && e->kind == SRV_EP_PAGE) return srv_page_reply(s, c, method); /* page.c; it asks for the key itself */
    if (!(e && e->public) && !authorized(s, c))
        return reply_error(s, c, cc, 401, "Invalid API key: send 'Authorization: Bearer KEY' (or 'X-Api-Key: KEY')", NULL);
    if (cc->too_many) {
        char m[128];
        snprintf(m, sizeof m, "the server is busy: more than %d connections are open (--max-concurrent); try again later",
                 max_concurrent(s));
        return reply_error(s, c, cc, 503, m, NULL);
    }
    if (cc->too_big) {
        char m[128];
        snprintf(m, sizeof m, "the request body exceeds %zu bytes (--max-body)", s->cfg.max_body);
        return reply_error(s, c, cc, 413, m, NULL);
    }
    if (!e) return reply_error(s, c, cc, 404, "no such endpoint", NULL);
    if (!ready) return reply_error(s, c, cc, 503, "Loading model", NULL);
    if (strcmp(method, e->method) != 0)
        return reply_error(s, c, cc, 405, strcmp(e->method, "GET") == 0 ? "use GET" : "use POST", NULL);
    int post = strcmp(e->method, "POST") == 0;
    if (post) {
        enum MHD_Result rrc;
        if (!reserve_parse(s, c, cc, &rrc)) return rrc;
    }
    const char *body = post ? (cc->body.p ? cc->body.p : "") : NULL;
    size_t len = post ? cc->body.len : 0;
    if (e->kind == SRV_EP_HANDLER) {
        int status = 200;
        const char *ctype = JSON;
        char *out = e->handler(s, body, len, &status, &ctype);
        return reply(s, c, cc, status, ctype, out);
    }
    if (__atomic_load_n(&s->draining, __ATOMIC_ACQUIRE)) return reply_error(s, c, cc, 503, "the server is shutting down", NULL);
    if (!s->sched) return reply_error(s, c, cc, 503, "Loading model", NULL); /* a server without a model (fuzz/) */
    __atomic_add_fetch(&s->active, 1, __ATOMIC_ACQ_REL);
    cc->counted = 1;
    return generate(s, c, e->generation, cc);
}

static int reserve_parse(srv *s, struct MHD_Connection *c, conn_ctx *cc, enum MHD_Result *rc) {
    size_t values = 0, cost = openai_request_cost(cc->body.p ? cc->body.p : "", cc->body.len, &values);
    size_t budget = openai_request_budget(cc->body.len);
    char m[256];
    if (cost > budget) {
        snprintf(m, sizeof m,
                 "the request body (%zu bytes, %zu JSON values) needs about %zu bytes of memory, over its budget of %zu "
                 "(%d x the body + %u)",
                 cc->body.len, values, cost, budget, CELER_SERVE_REQUEST_MEM_FACTOR, CELER_SERVE_REQUEST_MEM_BASE);
        *rc = reply_error(s, c, cc, 413, m, NULL);
        return 0;
    }
    if (guard_reserve(s, cc->conn, cost) != 0) {
        *rc = reply_error(s, c, cc, 503, "the server is busy: requests hold all the memory set aside for them (--requests-ram); try again later", NULL);
        return 0;
    }
    cc->parse_cost = cost;
    return 1;
}

/* Counts the values of a header (a request may repeat one). */
typedef struct {
    const char *name;
    int n, differ;
    const char *first;
} hdr_count;

static enum MHD_Result count_header(void *cls, enum MHD_ValueKind kind, const char *key, const char *value) {
    hdr_count *h = cls;
    (void)kind;
    if (!key || strcasecmp(key, h->name) != 0) return MHD_YES;
    if (h->n++ == 0) h->first = value;
    else if (!value || !h->first || strcmp(value, h->first) != 0) h->differ = 1;
    return MHD_YES;
}

/* What the headers alone condemn: 0, or an HTTP status with a message in m. */
static int check_headers(struct MHD_Connection *c, char *m, size_t mn) {
    hdr_count cl = {MHD_HTTP_HEADER_CONTENT_LENGTH, 0, 0, NULL}, te = {MHD_HTTP_HEADER_TRANSFER_ENCODING, 0, 0, NULL};
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_header, &cl);
    MHD_get_connection_values(c, MHD_HEADER_KIND, count_header, &te);
    if (cl.differ) return snprintf(m, mn, "the request has conflicting Content-Length headers"), 400;
    if (te.n > 1 || (te.n == 1 && strcasecmp(te.first ? te.first : "", "chunked") != 0)) {
        snprintf(m, mn, "Transfer-Encoding '%.60s' is not supported: send the body as is or chunked", te.first ? te.first : "");
        return 501;
    }
    if (te.n && cl.n) return snprintf(m, mn, "the request has both Transfer-Encoding and Content-Length"), 400;
    return 0;
}

static srv_conn *conn_of(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_SOCKET_CONTEXT);
    return ci ? ci->socket_context : NULL;
}

/* OPTIONS: what the path allows; with --cors-origin, a CORS preflight answer (browsers
 * send it without the key, so it is answered before the key is checked). */
static enum MHD_Result preflight(srv *s, struct MHD_Connection *c, conn_ctx *cc, const char *url) {
    const srv_endpoint *e = srv_endpoint_find(url);
    if (!e) return reply_error(s, c, cc, 404, "no such endpoint", NULL);
    struct MHD_Response *r = MHD_create_response_from_buffer(0, (void *)"", MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    char allow[32];
    snprintf(allow, sizeof allow, "%s, OPTIONS", e->method);
    MHD_add_response_header(r, "Allow", allow);
    if (s->cfg.cors_origin) {
        add_cors(s, r);
        MHD_add_response_header(r, "Access-Control-Allow-Methods", allow);
        MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type, X-Api-Key");
        MHD_add_response_header(r, "Access-Control-Max-Age", "600");
    }
    enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_NO_CONTENT, r);
    MHD_destroy_response(r);
    srv_metrics_request(s->metrics, MHD_HTTP_NO_CONTENT);
    cc->log.status = MHD_HTTP_NO_CONTENT;
    return rc;
}

/* ---- the request log ---- */

static void copy_header(struct MHD_Connection *c, const char *name, char *out, size_t n) {
    const char *v = MHD_lookup_connection_value(c, MHD_HEADER_KIND, name);
    snprintf(out, n, "%s", v ? v : "");
}

/* The request's line begins: who asks what. */
static void log_start(srv *s, struct MHD_Connection *c, conn_ctx *cc, const char *url, const char *method) {
    srv_reqlog *l = &cc->log;
    l->t0 = cc->t0;
    snprintf(l->method, sizeof l->method, "%s", method ? method : "-");
    snprintf(l->path, sizeof l->path, "%s", url ? url : "-");
    srv_peer_name(conn_fd(c), l->client, sizeof l->client);
    if (!s->cfg.verbose) return;
    copy_header(c, MHD_HTTP_HEADER_USER_AGENT, l->user_agent, sizeof l->user_agent);
    copy_header(c, MHD_HTTP_HEADER_CONTENT_TYPE, l->content_type, sizeof l->content_type);
    l->has_key = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION) ||
                 MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
}

/* The request is over (answered, streamed to the end, or its connection gone): its
 * line goes out, and the log's job reference is dropped. */
static void log_end(srv *s, struct MHD_Connection *c, conn_ctx *cc, enum MHD_RequestTerminationCode toe) {
    srv_reqlog *l = &cc->log;
    if (!l->status) { /* answered by page.c, or by the guard on the socket (408) */
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_HTTP_STATUS);
        l->status = ci ? (int)ci->http_status : 0;
        int gs = guard_answered(s, cc->conn, l->error, sizeof l->error);
        if (gs) l->status = gs;
    }
    if (l->job) {
        pthread_mutex_lock(&l->job->mu);
        int cut = l->job->cancelled && !l->job->done;
        pthread_mutex_unlock(&l->job->mu);
        /* a stream that did not reach its end: the client went away (or the write failed) */
        if (l->status < 400 && (toe != MHD_REQUEST_TERMINATED_COMPLETED_OK || cut)) l->disconnected = 1;
    } else if (!l->status) {
        l->status = 499, l->disconnected = 1;
    }
    srv_log_request(&s->cfg, l);
    srv_job_unref(l->job);
    l->job = NULL;
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    srv *s = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) { /* the headers are complete; nothing of the body is read yet */
        if (!(cc = calloc(1, sizeof *cc))) return MHD_NO;
        cc->t0 = srv_now();
        cc->http11 = version && strcmp(version, MHD_HTTP_VERSION_1_1) == 0;
        cc->conn = conn_of(c);
        *con_cls = cc;
        log_start(s, c, cc, url, method);
        guard_phase(s, cc->conn, SRV_CONN_BODY);
        if (strcmp(method, "OPTIONS") == 0) return preflight(s, c, cc, url);
        if (__atomic_load_n(&s->conns, __ATOMIC_ACQUIRE) > max_concurrent(s)) {
            cc->too_many = 1; /* answer before reading the body */
            return route(s, c, url, method, cc);
        }
        if (!is_public(url) && !authorized(s, c)) return route(s, c, url, method, cc); /* 401 */
        char m[160];
        int st = check_headers(c, m, sizeof m);
        if (st) return reply_error(s, c, cc, st, m, NULL);
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body) {
            cc->too_big = 1; /* answer before reading the body */
            return route(s, c, url, method, cc);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        size_t n = *upload_size;
        *upload_size = 0;
        guard_body(s, cc->conn, n);
        char m[160];
        if (cc->body.len + n > s->cfg.max_body) {
            /* a chunked body past the limit: libmicrohttpd cannot queue a response in the
             * middle of a body, so the answer goes straight onto the socket and the
             * connection closes; the rest of the upload is never read */
            snprintf(m, sizeof m, "the request body exceeds %zu bytes (--max-body)", s->cfg.max_body);
            guard_answer(s, cc->conn, 413, m);
            cc->log.status = 413;
            snprintf(cc->log.error, sizeof cc->log.error, "%s", m);
            return MHD_NO;
        }
        if (guard_reserve(s, cc->conn, n) != 0) {
            static const char busy[] =
                "the server is busy: requests hold all the memory set aside for them (--requests-ram); try again later";
            guard_answer(s, cc->conn, 503, busy);
            cc->log.status = 503;
            snprintf(cc->log.error, sizeof cc->log.error, "%s", busy);
            return MHD_NO;
        }
        if (srv_buf_add(&cc->body, upload, n)) return MHD_NO;
        cc->log.body_bytes = cc->body.len;
        return MHD_YES;
    }
    guard_phase(s, cc->conn, SRV_CONN_BUSY);
    return route(s, c, url, method, cc);
}

/* Counts open connections (--max-concurrent) and registers them with the guard. */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe) {
    srv *s = cls;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) {
        __atomic_add_fetch(&s->conns, 1, __ATOMIC_ACQ_REL);
        *socket_context = guard_open(s, conn_fd(c));
    } else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) {
        __atomic_sub_fetch(&s->conns, 1, __ATOMIC_ACQ_REL);
        guard_close(s, *socket_context);
        *socket_context = NULL;
    }
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv *s = cls;
    conn_ctx *cc = *con_cls;
    if (!cc) return;
    log_end(s, c, cc, toe);
    if (cc->counted) __atomic_sub_fetch(&s->active, 1, __ATOMIC_ACQ_REL);
    srv_conn *conn = conn_of(c);
    guard_unreserve(s, conn, (size_t)-1);
    guard_phase(s, conn, SRV_CONN_HEADERS); /* the next request on a kept-alive connection */
    srv_buf_free(&cc->body);
    free(cc);
    *con_cls = NULL;
}

int http_start(srv *s) {
    struct addrinfo hints = {0}, *ai = NULL;
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE;
    char port[16];
    snprintf(port, sizeof port, "%d", s->cfg.port);
    int gai = getaddrinfo(s->cfg.host, port, &hints, &ai);
    if (gai != 0 || !ai) return err_set("--host %s: %s", s->cfg.host, gai_strerror(gai));
    if (!s->guard && guard_start(s) != 0) return err_set("out of memory");
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)s->cfg.port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(s->cfg.timeout_s > 0 ? s->cfg.timeout_s : CELER_SERVE_TIMEOUT_S),
        /* room above --max-concurrent to answer 503; beyond it libmicrohttpd closes new connections at once */
        /* no MHD_OPTION_LISTENING_ADDRESS_REUSE: its SO_REUSEPORT let a second server
         * listen on a port in use and take half of its connections */
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(max_concurrent(s) + 16), MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d) return err_set("cannot listen on %s:%d (in use, or not an address of this machine)", s->cfg.host, s->cfg.port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->cfg.port;
    s->httpd = d;
    return 0;
}

void http_stop(srv *s) {
    if (s->httpd) MHD_stop_daemon(s->httpd);
    s->httpd = NULL;
    guard_stop(s);
}
