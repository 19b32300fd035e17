/* tests/server/loadgen.c: the load generator of docs/benchmarks/server.md in C, for
 * machines without node (same output as loadgen.mjs). Build and run:
 *   cc -O2 -pthread tests/server/loadgen.c -o loadgen
 *   ./loadgen PORT CONCURRENCY REQUESTS MAX_TOKENS [PROMPT_WORDS]
 * CONCURRENCY threads each keep one streaming /v1/completions request (greedy,
 * ignore_eos, no prompt cache) in flight on 127.0.0.1 until REQUESTS have finished;
 * a token is an SSE event with a choice. Prints one JSON line. */
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
static double *ttft;          /* [total] */
static int n_ttft;
static long tokens_out;
static double span_sum;          /* sum over requests of (last - first) */
static long span_tokens;         /* sum over requests of (tokens - 1) */

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void one(int i) {
    static const char *vocab[] = {"and", "the", "lord", "said", "unto", "moses", "in", "that", "day", "of", "his", "people", "went", "out"};
    char prompt[4096] = "", body[8192], req[9000];
    for (int k = 0; k < words; k++) {
        strcat(prompt, vocab[(i * 7 + k * 3) % 14]);
        if (k + 1 < words) strcat(prompt, " ");
    }
    int bl = snprintf(body, sizeof body,
                      "{\"prompt\":\"%s\",\"max_tokens\":%d,\"temperature\":0,\"ignore_eos\":true,\"stream\":true,"
                      "\"cache_prompt\":false}", prompt, max_tokens);
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
    char buf[65536];
    size_t carry = 0;
    int got = 0;
    for (;;) {
        ssize_t k = read(fd, buf + carry, sizeof buf - carry - 1);
        if (k <= 0) break;
        double t = now();
        size_t n = carry + (size_t)k;
        buf[n] = 0;
        /* count complete events that carry a choice ("text": appears once per choice) */
        char *p = buf, *end;
        while ((end = strstr(p, "\n\n"))) {
            *end = 0;
            if (strstr(p, "data: {") && strstr(p, "\"text\":")) {
                if (!got) first = t;
                last = t;
                got++;
            }
            p = end + 2;
        }
        carry = n - (size_t)(p - buf);
        memmove(buf, p, carry);
    }
    close(fd);
    pthread_mutex_lock(&mu);
    ttft[n_ttft++] = first - t0;
    tokens_out += got;
    if (got > 1) span_sum += last - first, span_tokens += got - 1;
    pthread_mutex_unlock(&mu);
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

static double q(double *v, int n, double p) {
    if (!n) return 0;
    qsort(v, (size_t)n, sizeof *v, cmp);
    int i = (int)(p * n);
    return v[i < n ? i : n - 1];
}

int main(int argc, char **argv) {
    if (argc < 5) {
        fprintf(stderr, "usage: loadgen PORT CONCURRENCY REQUESTS MAX_TOKENS [PROMPT_WORDS]\n");
        return 2;
    }
    port = atoi(argv[1]), conc = atoi(argv[2]), total = atoi(argv[3]), max_tokens = atoi(argv[4]);
    words = argc > 5 ? atoi(argv[5]) : 32;
    ttft = calloc((size_t)total, sizeof *ttft);
    pthread_t th[256];
    double t0 = now();
    for (int i = 0; i < conc && i < 256; i++) pthread_create(&th[i], NULL, worker, NULL);
    for (int i = 0; i < conc && i < 256; i++) pthread_join(th[i], NULL);
    double secs = now() - t0;
    double itl = span_tokens ? span_sum / span_tokens : 0; /* mean inter-token time */
    printf("{\"concurrency\":%d,\"requests\":%d,\"max_tokens\":%d,\"seconds\":%.3f,\"req_per_s\":%.3f,"
           "\"out_tok_per_s\":%.1f,\"ttft_p50_ms\":%.1f,\"ttft_p99_ms\":%.1f,\"itl_mean_ms\":%.2f,\"decode_tok_per_s\":%.1f}\n",
           conc, total, max_tokens, secs, total / secs, tokens_out / secs, q(ttft, n_ttft, 0.5) * 1e3,
           q(ttft, n_ttft, 0.99) * 1e3, itl * 1e3, itl > 0 ? conc / itl : 0);
    free(ttft);
    return 0;
}
