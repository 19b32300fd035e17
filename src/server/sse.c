/* server/sse.c: the channel between the scheduler and an HTTP thread (a job and its
 * event list, reference counted; the mutex guards everything the two sides share),
 * and server-sent-event framing into byte buffers. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <time.h>

#include "base/err.h"
#include "server/server.h"

double srv_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

void srv_request_free(srv_request *r) {
    if (!r) return;
    for (int i = 0; i < r->n_stop; i++) free(r->stop[i]);
    free(r->stop);
    free(r->stop_ids);
    celer_grammar_free(r->grammar);
    for (int i = 0; i < r->n_grammar_triggers; i++) free(r->grammar_triggers[i]);
    free(r->grammar_triggers);
    free(r->prompt);
    free(r->model);
    tc_request_free(r->tools);
    free(r);
}

void srv_event_free(srv_event *e) {
    while (e) {
        srv_event *next = e->next;
        free(e->text);
        free(e->tokens);
        json_decref(e->logprobs);
        free(e);
        e = next;
    }
}

/* Random ids: base62 characters drawn from getrandom(2) by rejection (bytes >= 248
 * are redrawn, so each of the 62 characters is equally likely). 29 characters carry
 * 172 bits: two requests never share an id. */
int srv_random_id(char *out, size_t n, const char *prefix, int n_random) {
    static const char b62[] = "0123456789ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz";
    size_t pl = strlen(prefix);
    if (n_random <= 0 || pl + 1 + (size_t)n_random + 1 > n) return err_set("response id: %zu bytes are too few", n);
    memcpy(out, prefix, pl);
    out[pl] = '-';
    char *p = out + pl + 1;
    int k = 0;
    unsigned char buf[64];
    while (k < n_random) {
        ssize_t got = getrandom(buf, sizeof buf, 0);
        if (got < 0) {
            if (errno == EINTR) continue;
            return err_set("response id: getrandom: %s", strerror(errno));
        }
        for (ssize_t i = 0; i < got && k < n_random; i++)
            if (buf[i] < 248) p[k++] = b62[buf[i] % 62];
    }
    p[k] = 0;
    return 0;
}

srv_job *srv_job_new(srv_request *req, const char *id_prefix) {
    static uint64_t tasks;
    srv_job *j = calloc(1, sizeof *j);
    if (!j || !(j->n_gen = calloc((size_t)(req->n > 0 ? req->n : 1), sizeof *j->n_gen))) {
        free(j);
        srv_request_free(req);
        err_set("out of memory");
        return NULL;
    }
    if (srv_random_id(j->id, sizeof j->id, id_prefix, 29) != 0) {
        free(j->n_gen);
        free(j);
        srv_request_free(req);
        return NULL;
    }
    pthread_mutex_init(&j->mu, NULL);
    pthread_cond_init(&j->cv, NULL);
    j->refs = 1;
    j->req = req;
    j->created = (int64_t)time(NULL);
    j->t_submit = srv_now();
    j->task = __atomic_add_fetch(&tasks, 1, __ATOMIC_RELAXED);
    j->slot = -1;
    return j;
}

void srv_job_ref(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    j->refs++;
    pthread_mutex_unlock(&j->mu);
}

void srv_job_unref(srv_job *j) {
    if (!j) return;
    pthread_mutex_lock(&j->mu);
    int left = --j->refs;
    pthread_mutex_unlock(&j->mu);
    if (left) return;
    srv_event_free(j->head);
    srv_request_free(j->req);
    free(j->n_gen);
    free(j->error);
    pthread_cond_destroy(&j->cv);
    pthread_mutex_destroy(&j->mu);
    free(j);
}

void srv_job_push(srv_job *j, srv_event *e) {
    pthread_mutex_lock(&j->mu);
    if (j->tail) j->tail->next = e;
    else j->head = e;
    j->tail = e;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void srv_job_finish_choice(srv_job *j) {
    pthread_mutex_lock(&j->mu);
    if (++j->n_finished >= j->req->n) j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

void srv_job_fail(srv_job *j, int status, const char *msg) {
    pthread_mutex_lock(&j->mu);
    if (!j->status) {
        j->status = status;
        j->error = strdup(msg ? msg : "internal error");
    }
    j->done = 1;
    pthread_cond_broadcast(&j->cv);
    pthread_mutex_unlock(&j->mu);
}

srv_event *srv_job_take_locked(srv_job *j) {
    srv_event *e = j->head;
    j->head = j->tail = NULL;
    return e;
}

int srv_buf_add(srv_buf *b, const char *data, size_t n) {
    if (b->off && b->off == b->len) b->off = b->len = 0;
    if (b->len + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->len + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return -1;
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->len, data, n);
    b->len += n;
    b->p[b->len] = 0;
    return 0;
}

int sse_frame(srv_buf *b, const char *json) {
    if (srv_buf_add(b, "data: ", 6) || srv_buf_add(b, json, strlen(json)) || srv_buf_add(b, "\n\n", 2)) return -1;
    return 0;
}

void srv_buf_free(srv_buf *b) {
    free(b->p);
    memset(b, 0, sizeof *b);
}

int srv_utf8_valid(const char *s, size_t n) {
    const unsigned char *p = (const unsigned char *)s;
    size_t i = 0;
    while (i < n) {
        unsigned c = p[i];
        if (c < 0x80) { i++; continue; }
        int k;
        unsigned min;
        if ((c & 0xe0) == 0xc0) { k = 1; min = 0x80; c &= 0x1f; }
        else if ((c & 0xf0) == 0xe0) { k = 2; min = 0x800; c &= 0x0f; }
        else if ((c & 0xf8) == 0xf0) { k = 3; min = 0x10000; c &= 0x07; }
        else return 0;
        for (int t = 1; t <= k; t++) {
            if (i + (size_t)t >= n || (p[i + t] & 0xc0) != 0x80) return 0;
            c = (c << 6) | (p[i + t] & 0x3f);
        }
        if (c < min || c > 0x10ffff || (c >= 0xd800 && c <= 0xdfff)) return 0;
        i += (size_t)k + 1;
    }
    return 1;
}
