/* fuzz/replay_server_request.h: what fuzz_server_request does with one input,
 * shared with tests/test_fuzz_regress.c, which replays its seeds and every input that
 * once broke it: the server's request parsing without a socket or a model.
 * The first input byte picks the endpoint (low 3 bits: /v1/chat/completions,
 * /v1/completions, /completion, /tokenize, /detokenize) and the server (bit 3: the
 * Qwen3 tokenizer with a 4096-token context, or the default model's tokenizer with a
 * 256-token context, --max-prompt 128, --max-tokens 64 and 2 slots); the rest is the
 * request body. openai_parse is the function http.c calls (srv_prepare_requests fills
 * what it reads, as srv_load does). A request it accepts is then answered: a job
 * with one event per choice carrying the body's bytes as text (arbitrary bytes, as a
 * detokenizer can produce), the prompt's ids and logprobs, rendered as the plain
 * response, the SSE frames and the stream's end. A refusal must carry a status in
 * 400..599 and a message.
 *
 * With bit 7 of the first byte set the input goes over a socket instead, to a live
 * server (srv_start on 127.0.0.1, a tokenizer and no model: generations answer 503,
 * /tokenize and /detokenize work; --max-body 4096, --header-timeout 1). The second
 * byte says how: bits 0-2 the path, bit 3 a chunked body (else Content-Length), bit 4
 * the rest is the whole request (request line and headers too) sent verbatim, bits 5-6
 * how many pieces (1, 4, 16, 64) the bytes are trickled in, with a yield between
 * pieces, piece sizes drawn from the input. Then the client half-closes and reads
 * until the server closes. Promised: an answer that begins with a status line (or,
 * for a verbatim request, none) within 8 s; a built request over --max-body gets 413
 * (or 408; /health, which takes GET only, may answer 405 first). */
#ifndef CELER_REPLAY_SERVER_REQUEST_H
#define CELER_REPLAY_SERVER_REQUEST_H

#include <errno.h>
#include <jansson.h>
#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <sys/socket.h>
#include <netinet/in.h>
#include <arpa/inet.h>
#include <unistd.h>
#include <stdlib.h>
#include <string.h>

#include "celer.h"
#include "server/server.h"

static srv rs_servers[2];

static int rs_setup(srv *s, const char *tok_dir, const char *model_dir, int ctx, int np, int max_prompt, int max_tokens) {
    s->cfg.model_dir = model_dir;
    s->cfg.host = "127.0.0.1";
    s->cfg.n_parallel = np;
    s->cfg.ctx_size = ctx;
    s->cfg.n_predict = -1;
    s->cfg.batch_size = 512;
    s->cfg.cache_prompt = 1;
    s->cfg.max_body = 8 << 20;
    s->cfg.max_prompt = max_prompt;
    s->cfg.max_tokens = max_tokens;
    s->cfg.queue_size = 64;
    if (!(s->tok = celer_tokenizer_open(tok_dir))) {
        fprintf(stderr, "server request replay: %s (run `make tests` first to unpack the fixtures)\n", celer_last_error());
        return -1;
    }
    s->info.vocab_size = celer_tokenizer_n_vocab(s->tok);
    s->info.eos_token = -1;
    s->info.max_context = ctx;
    s->info.model_type = "llama";
    s->info.format = "fuzz";
    return srv_prepare_requests(s);
}

/* The two servers (run from the repository root). -1 on error. */
static inline int replay_server_init(void) {
    if (rs_setup(&rs_servers[0], "tests/fixtures/tokenizers/qwen3", "tests/fixtures/tokenizers/qwen3", 4096, 4, 0, 0) ||
        rs_setup(&rs_servers[1], "models/default", "models/default", 256, 2, 128, 64))
        return -1;
    return 0;
}

#define RS_BROKEN(...) (fprintf(stderr, "server request replay: " __VA_ARGS__), fputc('\n', stderr), -1)

/* ---- over a socket ---- */

static srv *rs_live;

static srv *rs_live_server(void) {
    if (rs_live) return rs_live;
    srv_config cfg = {0};
    cfg.model_dir = "models/default";
    cfg.host = "127.0.0.1";
    cfg.n_parallel = 2;
    cfg.ctx_size = 256;
    cfg.n_predict = -1;
    cfg.batch_size = 64;
    cfg.max_body = 4096;
    cfg.queue_size = 4;
    cfg.max_concurrent = 64; /* libFuzzer opens connections fast; their threads end a little later */
    cfg.timeout_s = 5;
    cfg.header_timeout_s = 1;
    cfg.quiet = 1;
    cfg.no_log = 1; /* no request log line per input */
    srv *s = srv_start(&cfg);
    if (!s) return NULL;
    if (!(s->tok = celer_tokenizer_open("models/default"))) {
        srv_free(s);
        return NULL;
    }
    s->info.vocab_size = celer_tokenizer_n_vocab(s->tok);
    s->info.eos_token = -1;
    s->info.max_context = 256;
    s->info.model_type = "llama";
    s->info.format = "fuzz";
    if (srv_prepare_requests(s) != 0) {
        srv_free(s);
        return NULL;
    }
    __atomic_store_n(&s->ready, 1, __ATOMIC_RELEASE); /* no scheduler: generations answer 503 */
    return rs_live = s;
}

/* On a broken promise of the live server: every thread's stack (gdb, or eu-stack from
 * elfutils, whichever is installed) and the server's sockets, on stderr. */
static void rs_dump_server(int port) {
    char cmd[512];
    snprintf(cmd, sizeof cmd,
             "exec 1>&2; echo '== sockets of port %d'; ss -tanoi '( sport = :%d or dport = :%d )' 2>&1 | head -n 60; "
             "echo '== threads of %d'; if command -v gdb >/dev/null; then gdb -q -batch -p %d -ex 'thread apply all bt' 2>&1 "
             "| grep -v '^\\[New LWP'; elif command -v eu-stack >/dev/null; then eu-stack -p %d 2>&1; fi",
             port, port, port, (int)getpid(), (int)getpid(), (int)getpid());
    if (system(cmd) != 0) fprintf(stderr, "(no stacks: neither gdb nor eu-stack ran)\n");
}

static int rs_send_all(int fd, const uint8_t *p, size_t n) {
    while (n) {
        ssize_t k = send(fd, p, n, MSG_NOSIGNAL);
        if (k < 0 && errno == EINTR) continue; /* a signal (libFuzzer's alarm) is no answer */
        if (k <= 0) return -1; /* the server closed first: allowed */
        p += k, n -= (size_t)k;
    }
    return 0;
}

static int rs_wire(const uint8_t *data, size_t n) {
    srv *s = rs_live_server();
    if (!s) return RS_BROKEN("cannot start the live server: %s", celer_last_error());
    if (n < 2) return 0;
    static const char *const paths[8] = {"/tokenize", "/detokenize", "/v1/completions", "/v1/chat/completions",
                                         "/completion", "/health", "/metrics", "/nothing"};
    unsigned how = data[1];
    const uint8_t *in = data + 2;
    size_t in_n = n - 2;
    int chunked = how & 8, verbatim = how & 16, pieces = 1 << (2 * ((how >> 5) & 3));
    /* the bytes to send */
    srv_buf req = {0};
    if (verbatim) {
        srv_buf_add(&req, (const char *)in, in_n);
    } else {
        char head[256];
        snprintf(head, sizeof head, "POST %s HTTP/1.1\r\nHost: fuzz\r\nContent-Type: application/json\r\n", paths[how & 7]);
        srv_buf_add(&req, head, strlen(head));
        if (chunked) {
            srv_buf_add(&req, "Transfer-Encoding: chunked\r\n\r\n", 30);
            for (size_t off = 0, i = 0; off < in_n; i++) { /* chunk sizes from the input */
                size_t c = 1 + (in[i % in_n] % 97) * (1 + (i & 3) * 40);
                if (c > in_n - off) c = in_n - off;
                snprintf(head, sizeof head, "%zx\r\n", c);
                srv_buf_add(&req, head, strlen(head));
                srv_buf_add(&req, (const char *)in + off, c);
                srv_buf_add(&req, "\r\n", 2);
                off += c;
            }
            srv_buf_add(&req, "0\r\n\r\n", 5);
        } else {
            snprintf(head, sizeof head, "Content-Length: %zu\r\n\r\n", in_n);
            srv_buf_add(&req, head, strlen(head));
            srv_buf_add(&req, (const char *)in, in_n);
        }
    }
    /* Each input comes from another loopback address (127.0.x.y): the server closes
     * first and keeps each connection in TIME_WAIT for a minute, and at hundreds of
     * inputs a second one source address would run out of ports. */
    static unsigned rs_src;
    int fd = -1;
    for (int tries = 0; tries < 50 && fd < 0; tries++) {
        struct sockaddr_in a = {0}, from = {0};
        a.sin_family = from.sin_family = AF_INET;
        a.sin_port = htons((uint16_t)s->port);
        a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
        from.sin_addr.s_addr = htonl(0x7f000000u | (1 + rs_src++ % 0xfffeu));
        fd = socket(AF_INET, SOCK_STREAM, 0);
        if (fd >= 0 && (bind(fd, (struct sockaddr *)&from, sizeof from) != 0 || connect(fd, (struct sockaddr *)&a, sizeof a) != 0)) {
            close(fd);
            fd = -1;
            usleep(20000);
        }
    }
    if (fd < 0) {
        srv_buf_free(&req);
        return RS_BROKEN("cannot connect to the live server");
    }
    /* trickle: `pieces` sends of sizes drawn from the input, a yield between them */
    size_t off = 0;
    for (int k = 0; k < pieces && off < req.len; k++) {
        size_t left = req.len - off, c = k == pieces - 1 ? left : (left / (size_t)(pieces - k)) * (1 + in_n % 3) / 2 + 1;
        if (c > left) c = left;
        if (rs_send_all(fd, (const uint8_t *)req.p + off, c)) break;
        off += c;
        sched_yield();
    }
    shutdown(fd, SHUT_WR); /* half-closed: the answer must still come */
    char buf[4096], first[16] = {0};
    size_t got = 0, total = 0;
    int rc = 0;
    double end = srv_now() + 8; /* under libFuzzer's 10 s per input; a loaded machine can stall seconds */
    for (;;) {
        int left = (int)((end - srv_now()) * 1000);
        struct pollfd p = {fd, POLLIN, 0};
        /* A signal ends poll and recv early with EINTR whatever its SA_RESTART: libFuzzer's
         * per-input alarm (SIGALRM every -timeout/2 + 1 s) did, and read as "no answer
         * within 8 s" it was the stall seen only under fuzzing (tests/test_fuzz_regress.c
         * replays with such a signal every millisecond). */
        int r = left > 0 ? poll(&p, 1, left) : 0;
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) {
            rc = RS_BROKEN("the server neither answered nor closed within 8 s (%zu bytes sent of %zu, %zu answered: '%s')",
                           off, req.len, total, first);
            rs_dump_server(s->port);
            break;
        }
        ssize_t k = recv(fd, buf, sizeof buf, 0);
        if (k < 0 && errno == EINTR) continue;
        if (k <= 0) break;
        total += (size_t)k;
        for (ssize_t i = 0; i < k && got < sizeof first - 1; i++) first[got++] = buf[i];
        if (got >= 12 && strncmp(first, "HTTP/1.1 100", 12) == 0) { /* an interim answer: skip it */
            got = 0;
            memset(first, 0, sizeof first);
        }
    }
    close(fd);
    int status = got >= 12 && strncmp(first, "HTTP/1.", 7) == 0 ? atoi(first + 9) : 0;
    if (!rc && !verbatim && (status < 200 || status > 599))
        rc = RS_BROKEN("%s: no status line (got '%s')", paths[how & 7], first);
    /* /health answers a method other than GET with 405 before it looks at the body */
    if (!rc && !verbatim && in_n > 4096 && status != 413 && status != 408 && !(status == 405 && (how & 7) == 5))
        rc = RS_BROKEN("%s: a %zu-byte body answered %d, not 413", paths[how & 7], in_n, status);
    srv_buf_free(&req);
    return rc;
}

static inline void replay_server_free(void) {
    if (rs_live) {
        srv_stop(rs_live);
        srv_free(rs_live);
        rs_live = NULL;
    }
    for (int i = 0; i < 2; i++) {
        celer_tokenizer_free(rs_servers[i].tok);
        free(rs_servers[i].eos_ids);
        free(rs_servers[i].model_id);
        memset(&rs_servers[i], 0, sizeof rs_servers[i]);
    }
}


static json_t *rs_logprobs(const celer_tokenizer *t, const int32_t *ids, int n, int top) {
    json_t *a = json_array();
    for (int i = 0; i < n; i++) {
        const char *tok = celer_tokenizer_token(t, ids[i]);
        json_t *name = tok ? json_string(tok) : NULL; /* NULL when not UTF-8 */
        json_t *alts = json_array();
        for (int k = 0; k < top; k++)
            json_array_append_new(alts, json_pack("{s:O, s:f}", "token", name ? name : json_null(), "logprob", -1.0 - k));
        json_t *x = json_pack("{s:s, s:f, s:[], s:o}", "token", name ? json_string_value(name) : "?", "logprob", -0.5, "bytes",
                              "top_logprobs", alts);
        json_decref(name);
        json_array_append_new(a, x);
    }
    return a;
}

static int rs_answer(srv *s, srv_request *r, const uint8_t *text, size_t tn) {
    int top = r->top_logprobs;
    int logprobs = r->logprobs;
    srv_job *j = srv_job_new(r, r->kind == SRV_CHAT ? "chatcmpl" : "cmpl");
    if (!j) return RS_BROKEN("out of memory");
    int rc = 0;
    int ntok = j->req->n_prompt < 8 ? j->req->n_prompt : 8;
    for (int c = 0; c < j->req->n; c++) {
        srv_event *e = calloc(1, sizeof *e);
        if (!e) abort(); /* out of memory in the harness itself */
        e->choice = c;
        e->text = malloc(tn + 1);
        memcpy(e->text, text, tn);
        e->len = tn;
        e->tokens = malloc(sizeof *e->tokens * (size_t)(ntok ? ntok : 1));
        memcpy(e->tokens, j->req->prompt, sizeof *e->tokens * (size_t)ntok);
        e->n_tokens = ntok;
        e->logprobs = logprobs ? rs_logprobs(s->tok, e->tokens, ntok, top) : NULL;
        e->finish = (c & 1) ? SRV_FINISH_LENGTH : SRV_FINISH_STOP;
        j->n_gen[c] = ntok;
        srv_job_push(j, e);
        srv_job_finish_choice(j);
    }
    j->n_prompt = j->req->n_prompt;
    pthread_mutex_lock(&j->mu);
    srv_event *ev = srv_job_take_locked(j);
    pthread_mutex_unlock(&j->mu);
    char *body = openai_response_json(s, j, ev);
    json_t *chk = body ? json_loadb(body, strlen(body), JSON_ALLOW_NUL, NULL) : NULL; /* text may hold \u0000 */
    if (!chk) rc = RS_BROKEN("the response is not JSON: %s", body ? body : "(null)");
    json_decref(chk);
    free(body);
    srv_buf out = {0};
    for (srv_event *e = ev; e && !rc; e = e->next)
        if (openai_stream_event(s, j, e, 1, &out)) rc = RS_BROKEN("openai_stream_event failed");
    if (!rc && openai_stream_end(s, j, &out)) rc = RS_BROKEN("openai_stream_end failed");
    srv_buf_free(&out);
    srv_event_free(ev);
    srv_job_unref(j);
    return rc;
}

/* One input through the parser (and, when accepted, the responses). 0, or -1 when
 * a promise is broken (message on stderr). */
static inline int replay_server_request(const uint8_t *data, size_t n) {
    if (n < 1) return 0;
    if (data[0] & 0x80) return rs_wire(data, n);
    srv *s = &rs_servers[(data[0] >> 3) & 1];
    int ep = (data[0] & 7) % 5;
    const char *body = (const char *)data + 1;
    size_t len = n - 1;
    if (ep <= 2) {
        static const int kinds[3] = {SRV_CHAT, SRV_COMPLETION, SRV_NATIVE};
        int status = 0;
        char *msg = NULL;
        const char *param = NULL;
        srv_request *r = openai_parse(s, kinds[ep], body, len, &status, &msg, &param);
        if (!r) {
            if (!msg || status < 400 || status > 599) return RS_BROKEN("refused with status %d and no message", status);
            char *ej = openai_error_json(status, msg, param);
            free(msg);
            if (!ej) return RS_BROKEN("no error body");
            free(ej);
            return 0;
        }
        if (memchr(body, 0, len)) { /* a raw NUL byte is never JSON */
            srv_request_free(r);
            return RS_BROKEN("accepted a body with a NUL byte");
        }
        if (r->n < 1 || r->n > s->cfg.n_parallel || r->n_prompt < 1 || r->n_prompt >= s->cfg.ctx_size ||
            r->max_tokens < 0 || r->n_prompt + r->max_tokens > s->cfg.ctx_size ||
            (s->cfg.max_prompt && r->n_prompt > s->cfg.max_prompt) || (s->cfg.max_tokens && r->max_tokens > s->cfg.max_tokens))
        {
            int rc = RS_BROKEN("accepted out of limits: n %d, n_prompt %d, max_tokens %d", r->n, r->n_prompt, r->max_tokens);
            srv_request_free(r); /* the limits openai_parse promises the scheduler */
            return rc;
        }
        for (int i = 0; i < r->n_prompt; i++)
            if (r->prompt[i] < 0 || r->prompt[i] >= s->info.vocab_size) {
                srv_request_free(r);
                return RS_BROKEN("prompt token %d out of the vocabulary", i);
            }
        return rs_answer(s, r, data + 1, len < 64 ? len : 64);
    }
    int status = 0;
    char *out = ep == 3 ? openai_tokenize_json(s, body, len, &status) : openai_detokenize_json(s, body, len, &status);
    int broken = !out || status < 200 || status > 599;
    free(out);
    if (broken) return RS_BROKEN("/tokenize or /detokenize: status %d", status);
    return 0;
}
#endif
