/* tests/server/loadgen.c: the server load benchmark of docs/benchmarks/server.md (same
 * measurement and JSON as loadgen.mjs, for machines without node). Build and run:
 *   cc -O2 -pthread tests/server/loadgen.c -o loadgen
 *   ./loadgen PORT CONCURRENCY REQUESTS MAX_TOKENS [PROMPT_WORDS] [-o json|md]
 *   ./loadgen --table FILE      (the JSON lines of earlier runs as one markdown table)
 * CONCURRENCY threads each keep one streaming /v1/completions request (greedy,
 * ignore_eos, no prompt cache, a PROMPT_WORDS-word prompt that differs per request)
 * in flight on 127.0.0.1 until REQUESTS have finished. Tokens are counted from the
 * final usage chunk (stream_options.include_usage); times are taken per SSE event with a
 * choice, one per token except where a token completes no text (part of a UTF-8
 * character), whose text rides with the next. Reported: aggregate output tokens/s over the run; time to first token
 * (request sent to first token read) p50/p99 over requests; inter-token latency
 * (the gap between two tokens of one stream as read) p50/p99/mean over every gap of
 * every request; and the decode rate while every stream decodes, CONCURRENCY / mean
 * gap. Tokens that arrive in one read share its time (their gaps read 0), as a
 * client sees them. The JSON also gives the TTFT quantiles of the requests after the
 * first CONCURRENCY (ttft_steady_*: the opening burst, every client's first request
 * at once, left out: what a request meets once the server runs at this load) and the
 * mean prompt length in tokens from the usage chunk (prompt_tokens_mean). -o json (default): one JSON line; -o md: a markdown table row
 * with its header. */
#include <arpa/inet.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

static int port, conc, total, max_tokens, words;
static int next_req;
static pthread_mutex_t mu = PTHREAD_MUTEX_INITIALIZER;
static double *ttft;             /* [total] */
static double *ttft_steady;      /* [total] of the requests past the first conc */
static int n_ttft, n_steady, errors;
static long prompt_tokens;
static double *gaps;             /* every inter-token gap, seconds */
static long n_gaps, cap_gaps;
static long tokens_out;

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* One request i; its first-token time and gaps are added under mu. */
static void one(int i) {
    static const char *vocab[] = {"and", "the", "lord", "said", "unto", "moses", "in", "that", "day", "of", "his", "people", "went", "out"};
    char prompt[16384] = "", body[17000], req[18000];
    size_t pl = 0;
    for (int k = 0; k < words && pl + 16 < sizeof prompt; k++)
        pl += (size_t)snprintf(prompt + pl, sizeof prompt - pl, "%s%s", vocab[(i * 7 + k * 3) % 14], k + 1 < words ? " " : "");
    int bl = snprintf(body, sizeof body,
                      "{\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,"
                      "\"stream_options\":{\"include_usage\":true},\"cache_prompt\":false}", prompt, max_tokens);
    int rl = snprintf(req, sizeof req,
                      "POST /v1/completions HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
                      "Content-Length: %d\r\nConnection: close\r\n\r\n%s", bl, body);
    int fd = socket(AF_INET, SOCK_STREAM, 0), one_ = 1;
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one_, sizeof one_);
    struct sockaddr_in a = {.sin_family = AF_INET, .sin_port = htons((uint16_t)port)};
    inet_pton(AF_INET, "127.0.0.1", &a.sin_addr);
    double t0 = now(), first = 0, last = 0;
    if (connect(fd, (struct sockaddr *)&a, sizeof a) != 0 || write(fd, req, (size_t)rl) != rl) {
        perror("loadgen: request");
        exit(1);
    }
    double *my_gaps = malloc((size_t)max_tokens * sizeof *my_gaps); /* [max_tokens - 1] gaps at most */
    long n_my = 0;
    if (!my_gaps) { perror("loadgen"); exit(1); }
    char buf[65536];
    size_t carry = 0;
    int got = 0, status = 0, usage = -1, ptok = -1;
    for (;;) {
        ssize_t k = read(fd, buf + carry, sizeof buf - carry - 1);
        if (k <= 0) break;
        double t = now();
        size_t n = carry + (size_t)k;
        buf[n] = 0;
        if (!status && sscanf(buf, "HTTP/1.1 %d", &status) != 1) status = -1;
        /* count complete events that carry a choice ("text": appears once per choice) */
        char *p = buf, *end;
        while ((end = strstr(p, "\n\n"))) {
            *end = 0;
            const char *u = strstr(p, "\"completion_tokens\":");
            if (u) usage = atoi(u + strlen("\"completion_tokens\":"));
            const char *pt = strstr(p, "\"prompt_tokens\":");
            if (pt) ptok = atoi(pt + strlen("\"prompt_tokens\":"));
            if (strstr(p, "data: {") && strstr(p, "\"text\":")) {
                if (!got) first = t;
                else if (n_my < max_tokens) my_gaps[n_my++] = t - last;
                last = t;
                got++;
            }
            p = end + 2;
        }
        carry = n - (size_t)(p - buf);
        memmove(buf, p, carry);
        if (carry >= sizeof buf - 1) carry = 0; /* an event larger than the buffer: drop it */
    }
    close(fd);
    pthread_mutex_lock(&mu);
    if (status != 200 || !got || usage < 0) errors++; /* no 200, no token, or no usage chunk */
    else {
        ttft[n_ttft++] = first - t0;
        if (i >= conc) ttft_steady[n_steady++] = first - t0;
        prompt_tokens += ptok > 0 ? ptok : 0;
    }
    tokens_out += usage > 0 ? usage : 0;
    if (n_gaps + n_my > cap_gaps) {
        long c = (n_gaps + n_my) * 2;
        double *g = realloc(gaps, (size_t)c * sizeof *g);
        if (!g) { perror("loadgen"); exit(1); }
        gaps = g, cap_gaps = c;
    }
    memcpy(gaps + n_gaps, my_gaps, (size_t)n_my * sizeof *gaps);
    n_gaps += n_my;
    pthread_mutex_unlock(&mu);
    free(my_gaps);
}

static void *worker(void *arg) {
    (void)arg;
    for (;;) {
        pthread_mutex_lock(&mu);
        int i = next_req < total ? next_req++ : -1;
        pthread_mutex_unlock(&mu);
        if (i < 0) return NULL;
        one(i);
    }
}

static int cmp(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

/* The p-quantile of v [n] (sorted here): the value at index floor(p * n). */
static double q(double *v, long n, double p) {
    if (!n) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp);
    long i = (long)(p * n);
    return v[i < n ? i : n - 1];
}

static const char *const keys[] = {"concurrency", "requests", "prompt_words", "max_tokens", "out_tok_per_s", "ttft_p50_ms",
                                   "ttft_p99_ms", "itl_p50_ms", "itl_p99_ms", "itl_mean_ms", "decode_tok_per_s", "errors"};
enum { NK = sizeof keys / sizeof keys[0] };

static void md_header(void) {
    printf("| clients | requests | prompt words | max tokens | output tok/s | TTFT p50 ms | TTFT p99 ms | ITL p50 ms "
           "| ITL p99 ms | ITL mean ms | decode tok/s | errors |\n");
    printf("|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|--:|\n");
}

static void md_row(const double *v) {
    printf("| %.0f | %.0f | %.0f | %.0f | %.1f | %.1f | %.1f | %.2f | %.2f | %.2f | %.1f | %.0f |\n", v[0], v[1], v[2], v[3],
           v[4], v[5], v[6], v[7], v[8], v[9], v[10], v[11]);
}

/* --table FILE: every JSON line of FILE (this program's own) as one markdown table. */
static int table(const char *path) {
    FILE *f = fopen(path, "r");
    if (!f) { perror(path); return 1; }
    char line[4096];
    md_header();
    while (fgets(line, sizeof line, f)) {
        double v[NK];
        int ok = 1;
        for (int k = 0; k < NK && ok; k++) {
            char pat[64];
            snprintf(pat, sizeof pat, "\"%s\":", keys[k]);
            const char *p = strstr(line, pat);
            ok = p && sscanf(p + strlen(pat), "%lf", &v[k]) == 1;
        }
        if (ok) md_row(v);
    }
    fclose(f);
    return 0;
}

int main(int argc, char **argv) {
    const char *fmt = "json", *pos[5];
    int np = 0;
    if (argc == 3 && !strcmp(argv[1], "--table")) return table(argv[2]);
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-o") && i + 1 < argc) fmt = argv[++i];
        else if (np < 5) pos[np++] = argv[i];
        else np = 6;
    }
    if (np < 4 || np > 5 || (strcmp(fmt, "json") && strcmp(fmt, "md"))) {
        fprintf(stderr, "usage: loadgen PORT CONCURRENCY REQUESTS MAX_TOKENS [PROMPT_WORDS] [-o json|md]\n"
                        "       loadgen --table FILE\n");
        return 2;
    }
    port = atoi(pos[0]), conc = atoi(pos[1]), total = atoi(pos[2]), max_tokens = atoi(pos[3]);
    words = np > 4 ? atoi(pos[4]) : 32;
    if (port <= 0 || conc <= 0 || conc > 256 || total <= 0 || max_tokens <= 0 || words <= 0 || words > 2000) {
        fprintf(stderr, "loadgen: want PORT > 0, 1..256 clients, REQUESTS > 0, MAX_TOKENS > 0, 1..2000 prompt words\n");
        return 2;
    }
    ttft = calloc((size_t)total, sizeof *ttft);
    ttft_steady = calloc((size_t)total, sizeof *ttft_steady);
    pthread_t th[256];
    double t0 = now();
    for (int i = 0; i < conc; i++) pthread_create(&th[i], NULL, worker, NULL);
    for (int i = 0; i < conc; i++) pthread_join(th[i], NULL);
    double secs = now() - t0, sum = 0;
    for (long i = 0; i < n_gaps; i++) sum += gaps[i];
    double itl = n_gaps ? sum / n_gaps : 0; /* mean inter-token time */
    double v[NK] = {conc, total, words, max_tokens, tokens_out / secs, q(ttft, n_ttft, 0.5) * 1e3,
                    q(ttft, n_ttft, 0.99) * 1e3, q(gaps, n_gaps, 0.5) * 1e3, q(gaps, n_gaps, 0.99) * 1e3, itl * 1e3,
                    itl > 0 ? conc / itl : 0, errors};
    if (!strcmp(fmt, "md")) {
        md_header();
        md_row(v);
    } else {
        printf("{\"concurrency\":%d,\"requests\":%d,\"prompt_words\":%d,\"max_tokens\":%d,\"seconds\":%.3f,\"req_per_s\":%.3f,"
               "\"tokens\":%ld,\"out_tok_per_s\":%.1f,\"ttft_p50_ms\":%.1f,\"ttft_p99_ms\":%.1f,\"itl_p50_ms\":%.2f,\"itl_p99_ms\":%.2f,"
               "\"itl_mean_ms\":%.2f,\"decode_tok_per_s\":%.1f,\"errors\":%d,\"ttft_steady_p50_ms\":%.1f,"
               "\"ttft_steady_p99_ms\":%.1f,\"prompt_tokens_mean\":%.1f}\n",
               conc, total, words, max_tokens, secs, total / secs, tokens_out, v[4], v[5], v[6], v[7], v[8], v[9], v[10], errors,
               q(ttft_steady, n_steady, 0.5) * 1e3, q(ttft_steady, n_steady, 0.99) * 1e3,
               n_ttft ? (double)prompt_tokens / n_ttft : 0);
    }
    free(ttft);
    free(ttft_steady);
    free(gaps);
    return errors ? 1 : 0;
}
