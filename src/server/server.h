/* server/server.h: the pieces of `celer serve` and how they meet. The server is a
 * client of include/celer.h only.
 *
 *   http.c       libmicrohttpd glue: routing, bearer key, body limit, waiting for a
 *                job while watching the socket, streaming through a content reader
 *   openai.c     request JSON -> srv_request (validated), srv_job -> response JSON
 *                (OpenAI chat/completions, llama-server /completion), error bodies
 *   sse.c        a job's event channel (scheduler -> HTTP thread) and SSE framing
 *   scheduler.c  one thread that owns the model and every session (slot): admits
 *                queued jobs, and runs the generation loop (celer_gen_step: chunked
 *                prefill and every slot's decode token in one batched forward,
 *                sampling, stop tokens and strings, limits), caches
 *   guard.c      deadlines for headers and bodies (a reaper thread), early answers
 *                written on the socket, the account of request memory
 *   metrics.c    counters and histograms in Prometheus text format
 *   reqlog.c     the request log (one line per request on stderr, text or JSON),
 *                llama-server's `timings` and /slots objects, response ids
 *   server.c     start (bind), load, run, drain, free
 *
 * Threads: libmicrohttpd runs one thread per connection; each parses its request,
 * submits a job and waits on the job's condition variable. The scheduler thread is
 * the only one that touches the model, sessions, samplers and the prompt cache. A job
 * is reference counted (the HTTP side and the scheduler each hold one reference).
 * guard.c's reaper thread only reads the registry of connections and shuts sockets. */
#ifndef CELER_SERVER_H
#define CELER_SERVER_H
#include <jansson.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "celer.h"
#include "server/toolcall.h"

/* A growing byte buffer (sse.c). */
typedef struct {
    char *p;
    size_t len, cap, off;       /* bytes [off, len) are not yet sent */
} srv_buf;

/* ---- configuration (cli/cmd_serve.c fills it) ---- */
typedef struct {
    const char *model_dir;
    const char *tokenizer_dir;  /* NULL: model_dir */
    const char *alias;          /* model id in /v1/models; NULL: the directory's name */
    const char *host;           /* "127.0.0.1" */
    int port;                   /* 0: the kernel picks one (printed on stderr) */
    int n_parallel;             /* slots */
    int ctx_size;               /* tokens of context per slot; 0: min(model, 4096) */
    int n_predict;              /* default max_tokens; -1: until the context is full */
    int n_threads;              /* CPU threads of the model; 0: all cores */
    const char *device;         /* "cpu", "cuda", "cuda:N"; NULL: auto (a GPU when present) */
    int batch_size;             /* prompt tokens prefilled per step (all slots together) */
    const char *api_key;        /* NULL: no authentication */
    int metrics;                /* serve GET /metrics */
    int cache_prompt;           /* use the prompt cache */
    size_t cache_bytes;         /* prompt cache budget */
    int queue_size;             /* jobs waiting for a slot before 503 */
    size_t max_body;            /* request body limit in bytes (413 above) */
    int max_prompt;             /* prompt tokens at most (400 above); 0: the context less one */
    int max_tokens;             /* max_tokens a request may ask for (400 above); 0: the context */
    int max_concurrent;         /* connections handled at once (503 above); 0: CELER_SERVE_MAX_CONCURRENT */
    int timeout_s;              /* idle connection timeout in seconds; 0: CELER_SERVE_TIMEOUT_S */
    int header_timeout_s;       /* seconds to complete the request headers; 0: CELER_SERVE_HEADER_TIMEOUT_S */
    int min_body_rate;          /* body bytes per second at least; 0: CELER_SERVE_MIN_BODY_RATE */
    size_t requests_ram;        /* request memory of all connections together (503 above); 0: the default */
    int quiet;                  /* stderr: errors only (failed requests, fatal errors) */
    int verbose;                /* the request log adds headers, sampling, slot, finish reason */
    int log_json;               /* stderr lines are JSON objects (--log-format json) */
    int slots;                  /* serve GET /slots */
    int no_log;                 /* no request log at all (fuzz/: inputs by the million) */
    const char *cors_origin;    /* Access-Control-Allow-Origin for every answer, or NULL */
    int strict_model;           /* a request naming another model gets 404 (default: served) */
    int parse_special_in_content; /* special tokens in message text are control tokens (default: text) */
} srv_config;

/* ---- a parsed, validated request ---- */
enum { SRV_CHAT = 1, SRV_COMPLETION, SRV_NATIVE };
enum { SRV_FINISH_NONE = 0, SRV_FINISH_STOP, SRV_FINISH_LENGTH };

typedef struct {
    int kind;                   /* SRV_CHAT, SRV_COMPLETION (OpenAI) or SRV_NATIVE (/completion) */
    char *model;                /* echoed in responses */
    int32_t *prompt;            /* [n_prompt] token ids */
    int n_prompt;
    int max_tokens;             /* generated tokens at most (>= 0) */
    celer_sampler_params sp;    /* sp.stop points into stop_ids */
    int32_t *stop_ids;          /* [n_stop_ids] token ids that end generation */
    int n_stop_ids;
    char **stop;                /* [n_stop] stop strings (not sent) */
    int n_stop;
    int n;                      /* choices */
    int stream;
    int include_usage;          /* stream_options.include_usage */
    int logprobs;               /* report logprobs of chosen tokens */
    int top_logprobs;           /* alternatives per token (0..20) */
    int cache_prompt;           /* may use / fill the prompt cache */
    int return_tokens;          /* native: token ids in the response */
    struct tc_request *tools;   /* chat: tools, tool_choice, parallel_tool_calls (toolcall.h), or NULL */
    int keep_special;           /* the text keeps special tokens (the tool-call markers are some) */
    /* constrained decoding (docs/grammar.md): the compiled grammar of response_format,
     * "grammar" or "json_schema" (owned), or NULL; with triggers the grammar is lazy
     * (celer_grammar_state_new), each choice gets its own state */
    celer_grammar *grammar;
    char **grammar_triggers;    /* [n_grammar_triggers] */
    int n_grammar_triggers;
} srv_request;

void srv_request_free(srv_request *r);

/* ---- what the scheduler sends back: events on the job's channel ---- */
typedef struct srv_event {
    struct srv_event *next;
    int choice;
    char *text;                 /* new text (may be empty), malloc'd */
    size_t len;
    int32_t *tokens;            /* [n_tokens] ids generated with this text */
    int n_tokens;
    json_t *logprobs;           /* array of {token, logprob, bytes, top_logprobs}, or NULL */
    int finish;                 /* SRV_FINISH_*: the choice ended with this event */
} srv_event;

void srv_event_free(srv_event *e);

typedef struct srv_job {
    pthread_mutex_t mu;
    pthread_cond_t cv;          /* signalled on every new event and at the end */
    int refs;
    srv_request *req;           /* owned */
    char id[48];                /* "chatcmpl-" + 29 random base62 characters */
    uint64_t task;              /* the job's number (/slots' id_task), from 1 */
    int64_t created;            /* unix seconds */
    double t_submit;            /* monotonic seconds */
    /* written by the scheduler under mu */
    srv_event *head, *tail;     /* events not yet taken by the HTTP side */
    int n_prompt, n_cached;     /* usage */
    int *n_gen;                 /* [req->n] tokens generated per choice */
    int n_finished;             /* choices finished */
    int done;                   /* every choice finished (or failed) */
    int slot;                   /* the slot of choice 0; -1 until one takes it */
    double t_start;             /* monotonic: a slot took it (its prompt began) */
    double t_first, t_last;     /* monotonic: its first and latest generated token (0: none) */
    int finish;                 /* SRV_FINISH_* of choice 0 */
    int status;                 /* 0, or the HTTP status of a failure */
    char *error;                /* failure message, malloc'd */
    /* written by the HTTP side under mu */
    int cancelled;              /* the client went away */
} srv_job;

/* A job for req (taking ownership) with refs = 1 and a fresh id: id_prefix, '-', 29
 * base62 characters from getrandom(2). NULL (req freed, celer_last_error says why)
 * on out of memory or when the system has no random bytes to give. */
srv_job *srv_job_new(srv_request *req, const char *id_prefix);
/* Writes prefix-XXXX (n_random base62 characters from getrandom) into out[n].
 * 0, or -1 (message set) when no random bytes could be read or out is too small. */
int srv_random_id(char *out, size_t n, const char *prefix, int n_random);
void srv_job_ref(srv_job *j);
void srv_job_unref(srv_job *j);
/* Scheduler side: appends an event (taking ownership) and wakes the waiter. */
void srv_job_push(srv_job *j, srv_event *e);
/* Scheduler side: marks a choice finished (finish reason already pushed). */
void srv_job_finish_choice(srv_job *j);
/* Scheduler side: fails the whole job with an HTTP status and a message. */
void srv_job_fail(srv_job *j, int status, const char *msg);
/* HTTP side: takes every pending event (caller frees them), under j->mu held by caller. */
srv_event *srv_job_take_locked(srv_job *j);

/* ---- the scheduler ---- */
typedef struct srv_sched srv_sched;
typedef struct srv_metrics srv_metrics;

typedef struct {
    int queued, busy, slots;
    uint64_t kv_tokens;         /* tokens the busy slots' sessions hold */
    uint64_t kv_bytes;          /* their KV bytes: celer_model_kv_bytes of each, summed */
    uint64_t cache_bytes;       /* bytes the prompt cache accounts for */
    int cache_entries;
} srv_sched_stats;

/* Starts the scheduler thread over model m (which it then owns for inference; the
 * caller keeps it alive until srv_sched_free). NULL on error. */
srv_sched *srv_sched_new(celer_model *m, const celer_tokenizer *tok, const srv_config *cfg, srv_metrics *met);
/* Queues a job (taking a reference). 0, or -1 when the queue is full or the
 * scheduler is draining (the caller answers 503). */
int srv_sched_submit(srv_sched *s, srv_job *j);
/* Takes a cancelled job out of the queue at once (its place is free for the next
 * request); 1 when it was queued, 0 when it was not (already in a slot or gone). */
int srv_sched_cancel(srv_sched *s, srv_job *j);
/* Wakes the scheduler (a job was cancelled). */
void srv_sched_wake(srv_sched *s);
void srv_sched_get_stats(srv_sched *s, srv_sched_stats *out);

/* One slot as of the scheduler's last step (GET /slots). An idle slot keeps the
 * parameters of its last job. */
typedef struct {
    int id;
    int busy;                   /* serving a job */
    int64_t task;               /* that job's number; -1: none yet */
    int choice;                 /* which choice of the job */
    int n_ctx;                  /* tokens of context */
    int n_past;                 /* tokens in its session now */
    int n_prompt, n_cached;     /* the job's prompt tokens, of which from the prompt cache */
    int n_decoded;              /* tokens generated for this choice */
    int max_tokens;             /* the job's limit */
    int stream, n_stop, logprobs;
    celer_sampler_params sp;    /* sp.stop is NULL (the ids are not copied) */
} srv_slot_info;

/* Copies the slots' state into out[max]; returns how many there are (at most max
 * written). */
int srv_sched_get_slots(srv_sched *s, srv_slot_info *out, int max);
/* Refuses new jobs, finishes queued and running ones, stops the thread. */
void srv_sched_drain(srv_sched *s);
void srv_sched_free(srv_sched *s);

/* ---- metrics ---- */
srv_metrics *srv_metrics_new(void);
void srv_metrics_free(srv_metrics *m);
void srv_metrics_request(srv_metrics *m, int status);
void srv_metrics_tokens(srv_metrics *m, int prompt, int cached, int generated);
/* A job left because its client went away. */
void srv_metrics_cancelled(srv_metrics *m);
void srv_metrics_ttft(srv_metrics *m, double seconds);
void srv_metrics_token_latency(srv_metrics *m, double seconds);
/* The Prometheus text exposition (malloc'd). */
char *srv_metrics_render(srv_metrics *m, const srv_sched_stats *st);

/* ---- the request log and timings (reqlog.c) ---- */
typedef struct srv srv;

/* What the log line of one request says; the HTTP side fills it as the request goes. */
typedef struct {
    double t0;                  /* monotonic: its headers were complete */
    char method[16];
    char path[160];
    char client[64];            /* "ADDR:PORT" ("[ADDR]:PORT" for IPv6) */
    int status;                 /* the HTTP status answered; 0: none */
    char error[320];            /* the error message of a 4xx/5xx answer */
    int disconnected;           /* the client went away before the end */
    srv_job *job;               /* a generation request's job (one reference), or NULL */
    size_t body_bytes;          /* verbose: the request body's size */
    char user_agent[96];        /* verbose */
    char content_type[64];      /* verbose */
    int has_key;                /* verbose: an Authorization or X-Api-Key header came */
} srv_reqlog;

/* llama-server's `timings` of a job: prompt (tokens processed, not from the cache)
 * and predicted (generated) counts and times. */
typedef struct {
    int prompt_n, cache_n, predicted_n;
    double prompt_ms, predicted_ms, ttft_ms;
} srv_timings;

/* Reads the job's timings (j->mu held by the caller, or not: _locked or not). */
void srv_timings_get_locked(const srv_job *j, srv_timings *t);
void srv_timings_get(srv_job *j, srv_timings *t);
/* {prompt_n, prompt_ms, prompt_per_token_ms, prompt_per_second, predicted_n, ...,
 * cache_n} (a new reference). */
json_t *srv_timings_json(const srv_timings *t);
/* Prints the request's line on stderr (or nothing: --quiet and no error). */
void srv_log_request(const srv_config *cfg, srv_reqlog *r);
/* Prints a server message (startup, shutdown) on stderr in the log's format; level
 * "info" is silent under --quiet. */
void srv_log_msg(const srv_config *cfg, const char *level, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
/* "ADDR:PORT" of the socket's peer into out[n] ("-" when unknown). */
void srv_peer_name(int fd, char *out, size_t n);
/* GET /slots: llama-server's array of slot objects (malloc'd). */
char *srv_slots_json(srv *s);

/* ---- the server ---- */
struct srv {
    srv_config cfg;
    celer_model *model;
    celer_tokenizer *tok;
    celer_model_info info;
    char *model_id;             /* name in /v1/models */
    int32_t *eos_ids;           /* [n_eos] tokens that end every generation */
    int n_eos;
    int has_template;
    srv_sched *sched;
    srv_metrics *metrics;
    void *httpd;                /* struct MHD_Daemon * */
    struct srv_guard *guard;    /* guard.c */
    int port;                   /* bound port */
    volatile int ready;         /* model loaded (read with __atomic) */
    volatile int draining;      /* SIGTERM seen: refuse new work */
    volatile int active;        /* requests being handled */
    volatile int conns;         /* open connections (read with __atomic) */
};

/* Binds host:port and starts answering (/health says 503 until srv_load). NULL on error. */
srv *srv_start(const srv_config *cfg);
/* Opens the model and tokenizer and starts the scheduler. -1 on error. */
int srv_load(srv *s);
/* What openai_parse needs besides s->cfg, s->tok and s->info (vocab_size, eos_token):
 * the chat-template flag, the model id and the end-of-generation ids. srv_load calls
 * it; fuzz/fuzz_server_request.c calls it on a server with a tokenizer and no model,
 * so the parser it fuzzes is the one requests meet. -1 on out of memory. */
int srv_prepare_requests(srv *s);
/* Refuses new requests, finishes in-flight ones, stops HTTP and the scheduler. */
void srv_stop(srv *s);
void srv_free(srv *s);

/* http.c */
int http_start(srv *s);
void http_stop(srv *s);

/* guard.c: one per open connection; the phase of its current request. */
typedef struct srv_conn srv_conn;
typedef struct srv_guard srv_guard;
enum { SRV_CONN_HEADERS = 0, SRV_CONN_BODY, SRV_CONN_BUSY };
/* Starts the reaper thread (s->guard). -1 on error. */
int guard_start(srv *s);
void guard_stop(srv *s);
srv_conn *guard_open(srv *s, int fd);
/* Forgets a connection (before its descriptor is closed) and its reserved memory. */
void guard_close(srv *s, srv_conn *c);
/* The request entered a phase: its headers are complete (BODY), its body too (BUSY),
 * or it was answered and the next one may come (HEADERS). */
void guard_phase(srv *s, srv_conn *c, int phase);
void guard_body(srv *s, srv_conn *c, size_t n);
/* Writes an error response (Connection: close) straight onto the socket, then stops
 * reading gently; the caller returns MHD_NO. -1 when it could not (or one went out). */
int guard_answer(srv *s, srv_conn *c, int status, const char *msg);
/* The status of the early answer that went out on c (its message into msg[n]), or 0. */
int guard_answered(srv *s, srv_conn *c, char *msg, size_t n);
/* Reserves n bytes of request memory for c (-1: past --requests-ram); released by
 * guard_unreserve or when the connection closes. */
int guard_reserve(srv *s, srv_conn *c, size_t n);
void guard_unreserve(srv *s, srv_conn *c, size_t n);
size_t guard_used(srv *s);

/* openai.c: what parsing a body of len bytes may cost in memory: a scan (no
 * allocation) that counts its JSON values and string bytes and prices them at what
 * jansson allocates for each. *values gets the count. */
size_t openai_request_cost(const char *body, size_t len, size_t *values);
/* The memory one request may use: CELER_SERVE_REQUEST_MEM_FACTOR x its body +
 * CELER_SERVE_REQUEST_MEM_BASE (413 above). */
size_t openai_request_budget(size_t len);
/* openai.c: request parsing. Returns the request, or NULL with *status (400, 404, ...)
 * and *msg (malloc'd) set. `path` picks the kind. */
srv_request *openai_parse(srv *s, int kind, const char *body, size_t len, int *status, char **msg, const char **param);
/* An OpenAI-style error body {"error":{"message","type","param","code"}} (malloc'd). */
char *openai_error_json(int status, const char *msg, const char *param);
/* The non-streaming response of a finished job, from all its events (malloc'd). */
char *openai_response_json(srv *s, srv_job *j, srv_event *events);
/* Appends the SSE frames of one event to out (first: the choice's first event).
 * -1 on out of memory. */
int openai_stream_event(srv *s, srv_job *j, const srv_event *e, int first, srv_buf *out);
/* Appends the closing frames of a finished stream (an error, the usage chunk,
 * "[DONE]"), reading the job under its lock. */
int openai_stream_end(srv *s, srv_job *j, srv_buf *out);
/* GET /v1/models; POST /tokenize, /detokenize (status in *status). */
char *openai_models_json(srv *s);
char *openai_tokenize_json(srv *s, const char *body, size_t len, int *status);
char *openai_detokenize_json(srv *s, const char *body, size_t len, int *status);

/* Waits on cv (mu held) for at most ms milliseconds (guard.c). */
void srv_timed_wait(pthread_cond_t *cv, pthread_mutex_t *mu, long ms);

/* ---- the endpoint table (endpoints.c) ---- */
enum { SRV_EP_HEALTH = 1, SRV_EP_PAGE, SRV_EP_HANDLER, SRV_EP_GENERATE };

/* Answers one request: returns the body (NULL: out of memory) and may set *status
 * (200 when left alone) and *ctype (JSON when left alone). body is NULL for GET. */
typedef char *(*srv_handler)(srv *s, const char *body, size_t len, int *status, const char **ctype);

typedef struct {
    const char *path, *alias;   /* alias: a second path, or NULL */
    const char *method;         /* "GET" or "POST" */
    int public;                 /* answered without the API key */
    int kind;                   /* SRV_EP_* */
    int generation;             /* SRV_EP_GENERATE: SRV_CHAT, SRV_COMPLETION or SRV_NATIVE */
    srv_handler handler;        /* SRV_EP_HANDLER */
} srv_endpoint;

/* The endpoint serving path, or NULL. */
const srv_endpoint *srv_endpoint_find(const char *path);

/* sse.c: a growing byte buffer, and SSE framing. */
int srv_buf_add(srv_buf *b, const char *data, size_t n);
/* Appends "data: <json>\n\n". */
int sse_frame(srv_buf *b, const char *json);
void srv_buf_free(srv_buf *b);

/* 1 when the n bytes are valid UTF-8. */
int srv_utf8_valid(const char *p, size_t n);
/* Monotonic seconds. */
double srv_now(void);
#endif
