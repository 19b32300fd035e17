/* server/page.c: the chat page of `celer serve` (GET /). The page is
 * src/server/page/chat.html, built into the binary as a byte list by the Makefile
 * (xxd -i into BUILD/gen/chat_html.inc); it is plain HTML, CSS and JavaScript with no
 * external resource. Its Content-Security-Policy names the SHA-256 of its one inline
 * <script> and one inline <style>, so nothing else, injected or not, can run or style
 * it; connections go only to this server ('self'). */
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "io/sha256.h"
#include "server/page.h"

static const unsigned char chat_html[] = {
#include "chat_html.inc"
};

static char csp[512];
static pthread_once_t csp_once = PTHREAD_ONCE_INIT;

/* Base64 (RFC 4648, padded) of n bytes into out, which holds 4 * ceil(n / 3) + 1. */
static void base64(const uint8_t *p, size_t n, char *out) {
    static const char A[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    size_t o = 0;
    for (size_t i = 0; i < n; i += 3) {
        uint32_t v = (uint32_t)p[i] << 16 | (i + 1 < n ? (uint32_t)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        out[o++] = A[v >> 18 & 63];
        out[o++] = A[v >> 12 & 63];
        out[o++] = i + 1 < n ? A[v >> 6 & 63] : '=';
        out[o++] = i + 2 < n ? A[v & 63] : '=';
    }
    out[o] = 0;
}

/* 'sha256-BASE64' of the text between the first OPEN and the next CLOSE in the page
 * (what the browser hashes for an inline element), or 'none' when there is none. */
static void element_hash(const char *open, const char *close, char out[64]) {
    const char *h = (const char *)chat_html, *end = h + sizeof chat_html;
    const char *a = memmem(h, (size_t)(end - h), open, strlen(open));
    const char *b = a ? memmem(a + strlen(open), (size_t)(end - a - strlen(open)), close, strlen(close)) : NULL;
    if (!b) {
        snprintf(out, 64, "'none'");
        return;
    }
    a += strlen(open);
    sha256_ctx c;
    uint8_t d[32];
    char b64[45];
    sha256_init(&c);
    sha256_update(&c, a, (size_t)(b - a));
    sha256_final(&c, d);
    base64(d, sizeof d, b64);
    snprintf(out, 64, "'sha256-%s'", b64);
}

static void build_csp(void) {
    char script[64], style[64];
    element_hash("<script>", "</script>", script);
    element_hash("<style>", "</style>", style);
    snprintf(csp, sizeof csp,
             "default-src 'none'; script-src %s; style-src %s; connect-src 'self'; img-src 'self' data:; "
             "base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
             script, style);
}

enum MHD_Result srv_page_reply(srv *s, struct MHD_Connection *c, const char *method) {
    int status = strcmp(method, "GET") == 0 || strcmp(method, "HEAD") == 0 ? 200 : 405;
    static const char use_get[] = "use GET";
    struct MHD_Response *r = status == 200 ? MHD_create_response_from_buffer(sizeof chat_html, (void *)chat_html, MHD_RESPMEM_PERSISTENT)
                                           : MHD_create_response_from_buffer(sizeof use_get - 1, (void *)use_get, MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    pthread_once(&csp_once, build_csp);
    MHD_add_response_header(r, "Content-Type", status == 200 ? "text/html; charset=utf-8" : "text/plain; charset=utf-8");
    if (status == 405) MHD_add_response_header(r, "Allow", "GET, HEAD");
    MHD_add_response_header(r, "Content-Security-Policy", csp);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    enum MHD_Result rc = MHD_queue_response(c, (unsigned)status, r);
    MHD_destroy_response(r);
    srv_metrics_request(s->metrics, status);
    return rc;
}
