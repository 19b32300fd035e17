/* server/http.c: libmicrohttpd glue. One thread per connection (libmicrohttpd's
 * THREAD_PER_CONNECTION mode): a handler gathers the body (refusing it past
 * --max-body), checks the bearer key, routes, and for a generation submits a job
 * and then either waits for it (plain responses) or hands a content reader to
 * libmicrohttpd that blocks on the job's events (server-sent events). While it
 * waits, the thread peeks at the socket every 50 ms: a client that went away
 * cancels its job, and the scheduler frees the slot on its next step. Connections
 * over --max-concurrent get 503 before their body is read; idle ones close after
 * --timeout seconds. */
#include <errno.h>
#include <microhttpd.h>
#include <netdb.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
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
    double t0;
} conn_ctx;

typedef struct {
    srv *s;
    srv_job *j;               /* one reference */
    int fd;
    srv_buf out;
    unsigned char *started;   /* [n] the choice has sent its first chunk */
    int finished;             /* the closing frames are in out */
    double t0;
} stream_ctx;

static const char *JSON = "application/json; charset=utf-8";

/* 1 when the peer has closed its side (or the socket failed). */
static int client_gone(int fd) {
    if (fd < 0) return 0;
    char b;
    ssize_t k = recv(fd, &b, 1, MSG_PEEK | MSG_DONTWAIT);
    if (k == 0) return 1;
    return k < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR;
}

static int conn_fd(struct MHD_Connection *c) {
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(c, MHD_CONNECTION_INFO_CONNECTION_FD);
    return ci ? ci->connect_fd : -1;
}

static void cancel_job(srv *s, srv_job *j) {
    pthread_mutex_lock(&j->mu);
    int was_done = j->done;
    j->cancelled = 1;
    pthread_mutex_unlock(&j->mu);
    if (!was_done && s->sched) srv_sched_wake(s->sched);
}

/* Waits up to 50 ms for j->cv; j->mu is held. */
static void wait_50ms(srv_job *j) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += 50 * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&j->cv, &j->mu, &ts);
}

/* Queues a response with body (malloc'd, taken). */
static enum MHD_Result reply(srv *s, struct MHD_Connection *c, int status, const char *ctype, char *body) {
    if (!body) {
        status = 500;
        body = openai_error_json(500, "out of memory", NULL);
    }
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    MHD_add_response_header(r, "Content-Type", ctype);
    if (status == 401) MHD_add_response_header(r, "WWW-Authenticate", "Bearer");
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    srv_metrics_request(s->metrics, status);
    return rc;
}

static enum MHD_Result reply_error(srv *s, struct MHD_Connection *c, int status, const char *msg, const char *param) {
    return reply(s, c, status, JSON, openai_error_json(status, msg, param));
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
        if (sc->out.off == sc->out.len && client_gone(sc->fd)) {
            cancel_job(sc->s, j);
            return MHD_CONTENT_READER_END_WITH_ERROR;
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
        enum MHD_Result rc = reply_error(s, c, status, msg, param);
        free(msg);
        return rc;
    }
    srv_job *j = srv_job_new(r, kind == SRV_CHAT ? "chatcmpl" : "cmpl");
    if (!j) return reply_error(s, c, 500, "out of memory", NULL);
    if (srv_sched_submit(s->sched, j) != 0) {
        srv_job_unref(j);
        return reply_error(s, c, 503,
                           __atomic_load_n(&s->draining, __ATOMIC_ACQUIRE)
                               ? "the server is shutting down"
                               : "the server is busy: the request queue is full (--queue-size); try again later",
                           NULL);
    }
    int fd = conn_fd(c);
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
        sc->fd = fd;
        sc->t0 = cc->t0;
        MHD_add_response_header(resp, "Content-Type", "text/event-stream");
        MHD_add_response_header(resp, "Cache-Control", "no-cache");
        enum MHD_Result rc = MHD_queue_response(c, MHD_HTTP_OK, resp);
        MHD_destroy_response(resp);
        srv_metrics_request(s->metrics, 200);
        return rc;
    }
    pthread_mutex_lock(&j->mu);
    int gone = 0;
    while (!j->done && !gone) {
        wait_50ms(j);
        if (!j->done) {
            pthread_mutex_unlock(&j->mu);
            gone = client_gone(fd);
            pthread_mutex_lock(&j->mu);
        }
    }
    srv_event *ev = srv_job_take_locked(j);
    int jst = j->status;
    pthread_mutex_unlock(&j->mu);
    enum MHD_Result rc;
    if (gone) {
        cancel_job(s, j);
        rc = MHD_NO;
    } else if (jst) {
        rc = reply_error(s, c, jst, j->error, NULL);
    } else {
        rc = reply(s, c, 200, JSON, openai_response_json(s, j, ev));
    }
    srv_event_free(ev);
    srv_job_unref(j);
    return rc;
}

/* ---- routing ---- */

static int authorized(srv *s, struct MHD_Connection *c) {
    if (!s->cfg.api_key) return 1;
    const char *h = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_AUTHORIZATION);
    if (h && strncasecmp(h, "Bearer ", 7) == 0) {
        h += 7;
        while (*h == ' ') h++;
        size_t a = strlen(h), b = strlen(s->cfg.api_key);
        unsigned diff = a != b;
        for (size_t i = 0; i < a && i < b; i++) diff |= (unsigned)(h[i] ^ s->cfg.api_key[i]);
        return diff == 0;
    }
    const char *x = MHD_lookup_connection_value(c, MHD_HEADER_KIND, "X-Api-Key");
    return x && strcmp(x, s->cfg.api_key) == 0;
}

static int max_concurrent(const srv *s) { return s->cfg.max_concurrent > 0 ? s->cfg.max_concurrent : CELER_SERVE_MAX_CONCURRENT; }

static int is(const char *url, const char *a, const char *b) { return strcmp(url, a) == 0 || (b && strcmp(url, b) == 0); }

static enum MHD_Result route(srv *s, struct MHD_Connection *c, const char *url, const char *method, conn_ctx *cc) {
    int get = strcmp(method, "GET") == 0, post = strcmp(method, "POST") == 0;
    int ready = __atomic_load_n(&s->ready, __ATOMIC_ACQUIRE);
    if (is(url, "/health", "/v1/health")) {
        if (!get) return reply_error(s, c, 405, "use GET", NULL);
        if (!ready) return reply_error(s, c, 503, "Loading model", NULL);
        return reply(s, c, 200, JSON, strdup("{\"status\":\"ok\"}"));
    }
    if (is(url, "/", NULL)) return srv_page_reply(s, c, method); /* the chat page (page.c); it asks for the key itself */
    int public = is(url, "/v1/models", "/models");
    if (!public && !authorized(s, c)) return reply_error(s, c, 401, "Invalid API key: send 'Authorization: Bearer KEY'", NULL);
    if (cc->too_many) {
        char m[128];
        snprintf(m, sizeof m, "the server is busy: more than %d connections are open (--max-concurrent); try again later",
                 max_concurrent(s));
        return reply_error(s, c, 503, m, NULL);
    }
    if (cc->too_big) {
        char m[128];
        snprintf(m, sizeof m, "the request body exceeds %zu bytes (--max-body)", s->cfg.max_body);
        return reply_error(s, c, 413, m, NULL);
    }
    int kind = is(url, "/v1/chat/completions", "/chat/completions") ? SRV_CHAT
               : is(url, "/v1/completions", "/completions")         ? SRV_COMPLETION
               : is(url, "/completion", NULL)                        ? SRV_NATIVE
                                                                     : 0;
    int known = kind || public || is(url, "/metrics", NULL) || is(url, "/tokenize", "/detokenize");
    if (!known) return reply_error(s, c, 404, "no such endpoint", NULL);
    if (!ready) return reply_error(s, c, 503, "Loading model", NULL);
    if (public || is(url, "/metrics", NULL)) {
        if (!get) return reply_error(s, c, 405, "use GET", NULL);
        if (public) return reply(s, c, 200, JSON, openai_models_json(s));
        if (!s->cfg.metrics) return reply_error(s, c, 501, "metrics are off: start the server with --metrics", NULL);
        srv_sched_stats st;
        srv_sched_get_stats(s->sched, &st);
        return reply(s, c, 200, "text/plain; version=0.0.4; charset=utf-8", srv_metrics_render(s->metrics, &st));
    }
    if (!post) return reply_error(s, c, 405, "use POST", NULL);
    const char *body = cc->body.p ? cc->body.p : "";
    int status = 200;
    if (is(url, "/tokenize", NULL)) {
        char *out = openai_tokenize_json(s, body, cc->body.len, &status);
        return reply(s, c, status, JSON, out);
    }
    if (is(url, "/detokenize", NULL)) {
        char *out = openai_detokenize_json(s, body, cc->body.len, &status);
        return reply(s, c, status, JSON, out);
    }
    if (__atomic_load_n(&s->draining, __ATOMIC_ACQUIRE)) return reply_error(s, c, 503, "the server is shutting down", NULL);
    __atomic_add_fetch(&s->active, 1, __ATOMIC_ACQ_REL);
    cc->counted = 1;
    return generate(s, c, kind, cc);
}

static enum MHD_Result on_request(void *cls, struct MHD_Connection *c, const char *url, const char *method,
                                  const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    srv *s = cls;
    conn_ctx *cc = *con_cls;
    (void)version;
    if (!cc) {
        if (!(cc = calloc(1, sizeof *cc))) return MHD_NO;
        cc->t0 = srv_now();
        *con_cls = cc;
        if (__atomic_load_n(&s->conns, __ATOMIC_ACQUIRE) > max_concurrent(s)) {
            cc->too_many = 1; /* answer before reading the body */
            return route(s, c, url, method, cc);
        }
        const char *cl = MHD_lookup_connection_value(c, MHD_HEADER_KIND, MHD_HTTP_HEADER_CONTENT_LENGTH);
        if (cl && strtoull(cl, NULL, 10) > s->cfg.max_body) {
            cc->too_big = 1; /* answer before reading the body */
            return route(s, c, url, method, cc);
        }
        return MHD_YES;
    }
    if (*upload_size) {
        if (!cc->too_big) {
            if (cc->body.len + *upload_size > s->cfg.max_body) {
                cc->too_big = 1;
                srv_buf_free(&cc->body);
            } else if (srv_buf_add(&cc->body, upload, *upload_size)) {
                return MHD_NO;
            }
        }
        *upload_size = 0;
        return MHD_YES;
    }
    return route(s, c, url, method, cc);
}

/* Counts open connections (--max-concurrent). */
static void on_connection(void *cls, struct MHD_Connection *c, void **socket_context, enum MHD_ConnectionNotificationCode toe) {
    srv *s = cls;
    (void)c;
    (void)socket_context;
    if (toe == MHD_CONNECTION_NOTIFY_STARTED) __atomic_add_fetch(&s->conns, 1, __ATOMIC_ACQ_REL);
    else if (toe == MHD_CONNECTION_NOTIFY_CLOSED) __atomic_sub_fetch(&s->conns, 1, __ATOMIC_ACQ_REL);
}

static void on_completed(void *cls, struct MHD_Connection *c, void **con_cls, enum MHD_RequestTerminationCode toe) {
    srv *s = cls;
    conn_ctx *cc = *con_cls;
    (void)c;
    (void)toe;
    if (!cc) return;
    if (cc->counted) __atomic_sub_fetch(&s->active, 1, __ATOMIC_ACQ_REL);
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
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_POLL;
    if (ai->ai_family == AF_INET6) flags |= MHD_USE_IPv6;
    struct MHD_Daemon *d = MHD_start_daemon(
        flags, (uint16_t)s->cfg.port, NULL, NULL, on_request, s, MHD_OPTION_SOCK_ADDR, ai->ai_addr,
        MHD_OPTION_NOTIFY_COMPLETED, on_completed, s, MHD_OPTION_NOTIFY_CONNECTION, on_connection, s,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)(s->cfg.timeout_s > 0 ? s->cfg.timeout_s : CELER_SERVE_TIMEOUT_S),
        /* room above --max-concurrent to answer 503; beyond it libmicrohttpd closes new connections at once */
        MHD_OPTION_CONNECTION_LIMIT, (unsigned)(max_concurrent(s) + 16), MHD_OPTION_LISTENING_ADDRESS_REUSE, (unsigned)1, MHD_OPTION_END);
    freeaddrinfo(ai);
    if (!d) return err_set("cannot listen on %s:%d (in use, or not an address of this machine)", s->cfg.host, s->cfg.port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(d, MHD_DAEMON_INFO_BIND_PORT);
    s->port = di ? di->port : s->cfg.port;
    s->httpd = d;
    return 0;
}

void http_stop(srv *s) {
    if (!s->httpd) return;
    MHD_stop_daemon(s->httpd);
    s->httpd = NULL;
}
