/* server/guard.c: what keeps slow and greedy clients from starving the others.
 *
 *   registry     every open connection (its socket, and the phase of its current
 *                request: waiting for headers, receiving the body, being answered)
 *   reaper       a thread that every 100 ms closes connections whose request headers
 *                are not complete --header-timeout seconds after the connection (or
 *                its previous response), and connections whose body arrives slower
 *                than --min-body-rate bytes per second (after a grace of
 *                --header-timeout), answering 408 first; libmicrohttpd only has an
 *                idle timeout, which a byte a second keeps resetting
 *   early answer a response written straight onto the socket, for the cases where
 *                libmicrohttpd cannot queue one (in the middle of a body: its
 *                MHD_queue_response refuses until the upload is complete)
 *   memory       the account of request memory (bodies as they arrive, the estimated
 *                cost of parsing them) against --requests-ram: past it, 503
 *
 * The registry's mutex is held while the reaper writes to or shuts a socket, and
 * libmicrohttpd tells us a connection is closed (guard_close) before it closes the
 * descriptor, so the reaper never touches a descriptor that was reused. */
#include <errno.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "base/limits.h"
#include "server/server.h"

struct srv_conn {
    srv_conn *prev, *next;
    int fd;
    int phase;                /* SRV_CONN_* */
    int kept;                 /* a request was answered before on this connection */
    double t_phase;           /* monotonic seconds: when the phase began */
    uint64_t body;            /* body bytes of the current request so far */
    int answered;             /* an early answer went out on the socket: its status */
    char msg[160];            /* and its message (the request log's error) */
    size_t reserved;          /* request memory held (--requests-ram) */
};

struct srv_guard {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    pthread_t th;
    int started, stop;
    srv_conn *head;
    srv *s;
    size_t used;              /* request memory reserved by all connections */
};

static const char *reason(int status) {
    switch (status) {
    case 400: return "Bad Request";
    case 401: return "Unauthorized";
    case 408: return "Request Timeout";
    case 413: return "Content Too Large";
    case 501: return "Not Implemented";
    case 503: return "Service Unavailable";
    default: return "Error";
    }
}

/* Writes a whole response with Connection: close; mu held. 0 when it went out. */
static int answer_locked(srv *s, srv_conn *c, int status, const char *msg) {
    if (c->answered || c->fd < 0) return -1;
    c->answered = status;
    snprintf(c->msg, sizeof c->msg, "%s", msg);
    if (c->phase == SRV_CONN_HEADERS) { /* no request yet, so http.c logs nothing: the line goes out here */
        srv_reqlog l = {.t0 = c->t_phase, .status = status};
        snprintf(l.method, sizeof l.method, "-");
        snprintf(l.path, sizeof l.path, "-");
        snprintf(l.error, sizeof l.error, "%s", msg);
        srv_peer_name(c->fd, l.client, sizeof l.client);
        srv_log_request(&s->cfg, &l);
    }
    char *body = openai_error_json(status, msg, NULL);
    if (!body) return -1;
    char head[512];
    int hn = snprintf(head, sizeof head,
                      "HTTP/1.1 %d %s\r\nContent-Type: application/json; charset=utf-8\r\nContent-Length: %zu\r\n"
                      "Connection: close\r\n%s\r\n",
                      status, reason(status), strlen(body), status == 503 ? "Retry-After: 1\r\n" : "");
    int rc = -1;
    if (hn > 0 && (size_t)hn < sizeof head) {
        /* small: the socket buffer takes it at once; a client that does not read loses it */
        struct iovec v[2] = {{head, (size_t)hn}, {body, strlen(body)}};
        struct msghdr mh = {.msg_iov = v, .msg_iovlen = 2};
        rc = sendmsg(c->fd, &mh, MSG_NOSIGNAL | MSG_DONTWAIT) > 0 ? 0 : -1;
    }
    free(body);
    srv_metrics_request(s->metrics, status);
    return rc;
}

void srv_timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, long ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_nsec += ms % 1000 * 1000000L;
    ts.tv_sec += ms / 1000;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(cv, mu, &ts);
}

static void *reaper(void *arg) {
    srv_guard *g = arg;
    srv *s = g->s;
    double ht = s->cfg.header_timeout_s > 0 ? s->cfg.header_timeout_s : CELER_SERVE_HEADER_TIMEOUT_S;
    double rate = s->cfg.min_body_rate > 0 ? (double)s->cfg.min_body_rate : CELER_SERVE_MIN_BODY_RATE;
    pthread_mutex_lock(&g->mu);
    while (!g->stop) {
        srv_timed_wait(&g->cv, &g->mu, 100);
        double now = srv_now();
        for (srv_conn *c = g->head; c && !g->stop; c = c->next) {
            if (c->fd < 0) continue;
            double el = now - c->t_phase;
            char msg[160];
            if (c->phase == SRV_CONN_HEADERS && el > ht) {
                /* a connection kept alive after an answer is closed quietly, as an idle one */
                if (!c->kept) {
                    snprintf(msg, sizeof msg, "the request headers did not arrive within %g s (--header-timeout)", ht);
                    answer_locked(s, c, 408, msg);
                }
            } else if (c->phase == SRV_CONN_BODY && el > ht && (double)c->body < rate * (el - ht)) {
                snprintf(msg, sizeof msg, "the request body arrived slower than %g bytes/s (--min-body-rate)", rate);
                answer_locked(s, c, 408, msg);
            } else {
                continue;
            }
            /* libmicrohttpd's thread sees the end of its socket and closes the connection */
            shutdown(c->fd, SHUT_RDWR);
            c->fd = -1;
        }
    }
    pthread_mutex_unlock(&g->mu);
    return NULL;
}

int guard_start(srv *s) {
    srv_guard *g = calloc(1, sizeof *g);
    if (!g) return -1;
    pthread_mutex_init(&g->mu, NULL);
    pthread_cond_init(&g->cv, NULL);
    g->s = s;
    s->guard = g;
    if (pthread_create(&g->th, NULL, reaper, g) != 0) return -1;
    g->started = 1;
    return 0;
}

void guard_stop(srv *s) {
    srv_guard *g = s->guard;
    if (!g) return;
    if (g->started) {
        pthread_mutex_lock(&g->mu);
        g->stop = 1;
        pthread_cond_signal(&g->cv);
        pthread_mutex_unlock(&g->mu);
        pthread_join(g->th, NULL);
    }
    while (g->head) { /* only when the daemon never told us (it was not started) */
        srv_conn *c = g->head;
        g->head = c->next;
        free(c);
    }
    pthread_cond_destroy(&g->cv);
    pthread_mutex_destroy(&g->mu);
    free(g);
    s->guard = NULL;
}

srv_conn *guard_open(srv *s, int fd) {
    srv_guard *g = s->guard;
    srv_conn *c = g ? calloc(1, sizeof *c) : NULL;
    if (!c) return NULL;
    c->fd = fd;
    c->phase = SRV_CONN_HEADERS;
    c->t_phase = srv_now();
    pthread_mutex_lock(&g->mu);
    c->next = g->head;
    if (g->head) g->head->prev = c;
    g->head = c;
    pthread_mutex_unlock(&g->mu);
    return c;
}

void guard_close(srv *s, srv_conn *c) {
    srv_guard *g = s->guard;
    if (!g || !c) return;
    pthread_mutex_lock(&g->mu);
    if (c->prev) c->prev->next = c->next;
    else g->head = c->next;
    if (c->next) c->next->prev = c->prev;
    g->used -= c->reserved;
    pthread_mutex_unlock(&g->mu);
    free(c);
}

void guard_phase(srv *s, srv_conn *c, int phase) {
    srv_guard *g = s->guard;
    if (!g || !c) return;
    pthread_mutex_lock(&g->mu);
    if (phase == SRV_CONN_HEADERS && c->phase != SRV_CONN_HEADERS) c->kept = 1;
    c->phase = phase;
    c->t_phase = srv_now();
    c->body = 0;
    pthread_mutex_unlock(&g->mu);
}

void guard_body(srv *s, srv_conn *c, size_t n) {
    srv_guard *g = s->guard;
    if (!g || !c) return;
    pthread_mutex_lock(&g->mu);
    c->body += n;
    pthread_mutex_unlock(&g->mu);
}

int guard_answer(srv *s, srv_conn *c, int status, const char *msg) {
    srv_guard *g = s->guard;
    if (!g || !c) return -1;
    pthread_mutex_lock(&g->mu);
    int rc = answer_locked(s, c, status, msg);
    int fd = c->fd;
    pthread_mutex_unlock(&g->mu);
    if (rc != 0 || fd < 0) return rc;
    /* Close gently: no more data from us, then read (and drop) what the client is still
     * sending for a moment, so that closing with unread data does not reset the
     * connection and destroy the answer before the client reads it. Bounded in time
     * and bytes; libmicrohttpd closes the socket when the handler returns MHD_NO. */
    shutdown(fd, SHUT_WR);
    char buf[16384];
    double end = srv_now() + 1.0;
    size_t total = 0;
    while (total < (8u << 20)) {
        int left = (int)((end - srv_now()) * 1000);
        if (left <= 0) break;
        struct pollfd p = {fd, POLLIN, 0};
        if (poll(&p, 1, left) <= 0) break;
        ssize_t k = recv(fd, buf, sizeof buf, MSG_DONTWAIT);
        if (k <= 0 && !(k < 0 && (errno == EAGAIN || errno == EINTR))) break;
        if (k > 0) total += (size_t)k;
    }
    return 0;
}

int guard_answered(srv *s, srv_conn *c, char *msg, size_t n) {
    srv_guard *g = s->guard;
    if (!g || !c) return 0;
    pthread_mutex_lock(&g->mu);
    int st = c->answered;
    if (st && n) snprintf(msg, n, "%s", c->msg);
    pthread_mutex_unlock(&g->mu);
    return st;
}

int guard_reserve(srv *s, srv_conn *c, size_t n) {
    srv_guard *g = s->guard;
    if (!g || !c) return 0;
    size_t cap = s->cfg.requests_ram ? s->cfg.requests_ram : (size_t)CELER_SERVE_REQUESTS_RAM_MIB << 20;
    pthread_mutex_lock(&g->mu);
    int ok = n <= cap && g->used <= cap - n;
    if (ok) {
        g->used += n;
        c->reserved += n;
    }
    pthread_mutex_unlock(&g->mu);
    return ok ? 0 : -1;
}

void guard_unreserve(srv *s, srv_conn *c, size_t n) {
    srv_guard *g = s->guard;
    if (!g || !c) return;
    pthread_mutex_lock(&g->mu);
    if (n > c->reserved) n = c->reserved;
    c->reserved -= n;
    g->used -= n;
    pthread_mutex_unlock(&g->mu);
}

size_t guard_used(srv *s) {
    srv_guard *g = s->guard;
    if (!g) return 0;
    pthread_mutex_lock(&g->mu);
    size_t u = g->used;
    pthread_mutex_unlock(&g->mu);
    return u;
}
