/* io/hub_pull.c: celer_hub_pull: downloads a checkpoint from the Hugging Face hub
 * into the hub cache (layout in io/hub.h) with libcurl.
 *
 * Order of work: the file list and commit come from the hub API
 * (GET /api/models/ORG/NAME/revision/REV?blobs=true: "sha", "siblings[].rfilename",
 * blobId, size, lfs.sha256); each file comes from /ORG/NAME/resolve/COMMIT/FILE
 * (redirects followed) into blobs/ETAG.incomplete, resumed with Range after a drop,
 * checked (size; SHA-256 for LFS files) and only then renamed to blobs/ETAG. Links
 * under snapshots/COMMIT/ and refs/REV are written after every file is in, so a
 * failed pull leaves no snapshot that looks complete. */
#include <ctype.h>
#include <curl/curl.h>
#include <errno.h>
#include <fcntl.h>
#include <fnmatch.h>
#include <jansson.h>
#include <limits.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/file.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <time.h>
#include <unistd.h>

#include "base/err.h"
#include "base/settings.h"
#include "celer.h"
#include "io/hub.h"
#include "io/sha256.h"

#define PULL_TRIES 5            /* attempts per file when the connection drops */
#define PULL_MAX_FILES 100000
#define API_MAX_BYTES (64u << 20) /* the API's JSON answer (siblings of big repos) */

/* The files a run reads: config, generation defaults, tokenizer, chat templates,
 * weights. Matched against the whole repository path ('*' does not cross '/'). */
static const char *const run_files[] = {
    "config.json",          "generation_config.json",  "tokenizer.json", "tokenizer_config.json",
    "special_tokens_map.json", "chat_template.jinja", "chat_template.json", "*.safetensors",
    "model.safetensors.index.json",
};

typedef struct {
    char *path;        /* rfilename (owned) */
    char etag[129];    /* the blob's name: sha256 (LFS) or git blob sha1; "" until known */
    int64_t size;      /* -1: unknown */
    int skip;          /* a shard the index does not name */
} pull_file;

/* One transfer's response: what the header callback saw and where the body goes. */
typedef struct {
    FILE *out;             /* body sink for a 2xx answer, or NULL: into mem */
    int out_errno;         /* a failed write (disk full) */
    uint64_t resume_from;  /* the Range start asked for (0: none) */
    int body_started;
    char *mem;             /* body in memory (API answers; error bodies) */
    size_t mem_n, mem_cap, mem_max;
    char etag[160], linked_etag[160], commit[64], err_code[64], err_msg[256];
    int64_t linked_size;
    /* progress */
    const celer_pull_params *p;
    const char *file;
    uint64_t total;
} xfer;

typedef struct {
    CURL *curl;
    struct curl_slist *headers;
    const char *endpoint, *token;
    hub_name h;
    char name[HUB_MAX_ID + HUB_MAX_REV + 2];  /* as given, for messages */
    char repo_dir[PATH_MAX];
    const celer_pull_params *p;
} puller;

/* ---------------------------------------------------------------- small helpers */

/* Percent-encodes s into out (n bytes); '/' kept when keep_slash. NULL if it does not fit. */
static char *url_escape(const char *s, int keep_slash, char *out, size_t n) {
    static const char hex[] = "0123456789ABCDEF";
    size_t k = 0;
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        int plain = isalnum(c) || strchr("-._~", c) || (keep_slash && c == '/');
        if (k + (plain ? 1 : 3) >= n) return NULL;
        if (plain) out[k++] = (char)c;
        else out[k++] = '%', out[k++] = hex[c >> 4], out[k++] = hex[c & 15];
    }
    out[k] = '\0';
    return out;
}

/* An ETag header value as a blob name: W/ and quotes dropped; NULL unless it is a
 * safe file name (hex, letters, digits, '-', '_'). */
static const char *etag_clean(const char *v, char *out, size_t n) {
    if (strncmp(v, "W/", 2) == 0) v += 2;
    size_t k = 0;
    for (; *v; v++) {
        if (*v == '"') continue;
        if (!isalnum((unsigned char)*v) && *v != '-' && *v != '_') return NULL;
        if (k + 1 >= n) return NULL;
        out[k++] = *v;
    }
    out[k] = '\0';
    return k ? out : NULL;
}

static int is_sha256(const char *s) {
    size_t i = 0;
    for (; s[i]; i++)
        if (!isxdigit((unsigned char)s[i])) return 0;
    return i == 64;
}

/* A repository path that is safe under snapshots/COMMIT/: relative, no "." or ".."
 * part, no empty part, no backslash. */
static int rpath_ok(const char *s) {
    if (!*s || *s == '/' || strchr(s, '\\') || strlen(s) > 1024) return 0;
    for (const char *p = s;;) {
        const char *e = strchr(p, '/');
        size_t n = e ? (size_t)(e - p) : strlen(p);
        if (n == 0 || (n == 1 && p[0] == '.') || (n == 2 && p[0] == '.' && p[1] == '.')) return 0;
        if (!e) return 1;
        p = e + 1;
    }
}

static int64_t file_size(const char *path) {
    struct stat st;
    return stat(path, &st) == 0 ? (int64_t)st.st_size : -1;
}

static const char *fmt_bytes(uint64_t b, char *buf, size_t n) {
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    snprintf(buf, n, u ? "%.1f %s" : "%.0f %s", v, unit[u]);
    return buf;
}

static void sleep_ms(long ms) {
    struct timespec t = {ms / 1000, (ms % 1000) * 1000000L};
    nanosleep(&t, NULL);
}

/* ---------------------------------------------------------------- libcurl */

static size_t on_header(char *b, size_t size, size_t nitems, void *ud) {
    xfer *x = ud;
    size_t n = size * nitems;
    char line[512];
    size_t k = n < sizeof line - 1 ? n : sizeof line - 1;
    memcpy(line, b, k);
    line[k] = '\0';
    while (k && (line[k - 1] == '\r' || line[k - 1] == '\n')) line[--k] = '\0';
    char *colon = strchr(line, ':');
    if (!colon) return n;
    *colon = '\0';
    const char *v = colon + 1;
    while (*v == ' ' || *v == '\t') v++;
    /* The first answer of a redirect chain is the hub's: its values win over a CDN's. */
    struct { const char *name; char *dst; size_t cap; } keep[] = {
        {"etag", x->etag, sizeof x->etag},          {"x-linked-etag", x->linked_etag, sizeof x->linked_etag},
        {"x-repo-commit", x->commit, sizeof x->commit}, {"x-error-code", x->err_code, sizeof x->err_code},
        {"x-error-message", x->err_msg, sizeof x->err_msg},
    };
    for (size_t i = 0; i < sizeof keep / sizeof keep[0]; i++)
        if (strcasecmp(line, keep[i].name) == 0 && !keep[i].dst[0]) snprintf(keep[i].dst, keep[i].cap, "%s", v);
    if (strcasecmp(line, "x-linked-size") == 0 && x->linked_size < 0) x->linked_size = strtoll(v, NULL, 10);
    return n;
}

static int mem_add(xfer *x, const char *b, size_t n) {
    if (x->mem_n + n > x->mem_max) n = x->mem_max > x->mem_n ? x->mem_max - x->mem_n : 0;
    if (!n) return 0;
    if (x->mem_n + n + 1 > x->mem_cap) {
        size_t cap = x->mem_cap ? x->mem_cap : 4096;
        while (cap < x->mem_n + n + 1) cap *= 2;
        char *m = realloc(x->mem, cap);
        if (!m) return -1;
        x->mem = m, x->mem_cap = cap;
    }
    memcpy(x->mem + x->mem_n, b, n);
    x->mem_n += n;
    x->mem[x->mem_n] = '\0';
    return 0;
}

/* The body sink; the handle is beside the transfer for the status code. */
typedef struct {
    xfer *x;
    CURL *curl;
} body_ctx;

static size_t on_body2(char *b, size_t size, size_t nitems, void *ud) {
    body_ctx *bc = ud;
    xfer *x = bc->x;
    size_t n = size * nitems;
    long code = 0;
    curl_easy_getinfo(bc->curl, CURLINFO_RESPONSE_CODE, &code);
    if (code < 200 || code >= 300 || !x->out) {
        x->mem_max = x->out ? 4096 : x->mem_max; /* an error page: keep its start for the message */
        return mem_add(x, b, n) == 0 ? n : 0;
    }
    if (!x->body_started) {
        x->body_started = 1;
        if (code == 200 && x->resume_from) { /* the server ignored Range: start over */
            fflush(x->out);
            if (ftruncate(fileno(x->out), 0) != 0 || fseek(x->out, 0, SEEK_SET) != 0) {
                x->out_errno = errno;
                return 0;
            }
            x->resume_from = 0;
        }
    }
    if (fwrite(b, 1, n, x->out) != n) {
        x->out_errno = errno ? errno : EIO;
        return 0;
    }
    return n;
}

static int on_progress(void *ud, curl_off_t dltotal, curl_off_t dlnow, curl_off_t ultotal, curl_off_t ulnow) {
    (void)dltotal, (void)ultotal, (void)ulnow;
    body_ctx *bc = ud;
    xfer *x = bc->x;
    if (x->p && x->p->progress && x->out && x->file)
        x->p->progress(CELER_PULL_BYTES, x->file, x->resume_from + (uint64_t)dlnow, x->total, x->p->ctx);
    return 0;
}

static void xfer_reset(xfer *x) {
    free(x->mem);
    memset(x, 0, sizeof *x);
    x->linked_size = -1;
}

/* One request: GET url (HEAD when head) with Range: bytes=from- when from > 0.
 * *code gets the final HTTP status (0 when no answer). Returns the CURLcode. */
static CURLcode http_do(puller *P, xfer *x, const char *url, int head, uint64_t from, long *code) {
    body_ctx bc = {x, P->curl};
    CURL *c = P->curl;
    curl_easy_reset(c);
    curl_easy_setopt(c, CURLOPT_URL, url);
    curl_easy_setopt(c, CURLOPT_USERAGENT, "celer/0.1 (+https://huggingface.co)");
    curl_easy_setopt(c, CURLOPT_HTTPHEADER, P->headers);
    curl_easy_setopt(c, CURLOPT_FOLLOWLOCATION, head ? 0L : 1L);
    curl_easy_setopt(c, CURLOPT_MAXREDIRS, 10L);
    curl_easy_setopt(c, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_REDIR_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(c, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(c, CURLOPT_CONNECTTIMEOUT, 30L);
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_LIMIT, 1L);  /* a stalled connection counts as dropped */
    curl_easy_setopt(c, CURLOPT_LOW_SPEED_TIME, 60L);
    curl_easy_setopt(c, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(c, CURLOPT_HEADERDATA, x);
    curl_easy_setopt(c, CURLOPT_WRITEFUNCTION, on_body2);
    curl_easy_setopt(c, CURLOPT_WRITEDATA, &bc);
    curl_easy_setopt(c, CURLOPT_NOPROGRESS, 0L);
    curl_easy_setopt(c, CURLOPT_XFERINFOFUNCTION, on_progress);
    curl_easy_setopt(c, CURLOPT_XFERINFODATA, &bc);
    if (head) curl_easy_setopt(c, CURLOPT_NOBODY, 1L);
    char range[64];
    if (from) {
        snprintf(range, sizeof range, "%llu-", (unsigned long long)from);
        curl_easy_setopt(c, CURLOPT_RANGE, range);
    }
    x->resume_from = from;
    CURLcode rc = curl_easy_perform(c);
    *code = 0;
    curl_easy_getinfo(c, CURLINFO_RESPONSE_CODE, code);
    return rc;
}

/* A transfer that ended early and can be resumed. */
static int transient(CURLcode rc) {
    return rc == CURLE_PARTIAL_FILE || rc == CURLE_RECV_ERROR || rc == CURLE_OPERATION_TIMEDOUT ||
           rc == CURLE_GOT_NOTHING || rc == CURLE_SEND_ERROR || rc == CURLE_HTTP2 || rc == CURLE_HTTP2_STREAM;
}

/* The message for an HTTP error answer (what: "the file list" or a file's path). */
static int http_error(const puller *P, const xfer *x, long code, const char *what) {
    const char *ec = x->err_code, *em = x->err_msg[0] ? x->err_msg : "";
    const char *tok = P->token ? "HF_TOKEN was sent and not accepted" : "HF_TOKEN is not set";
    if (code == 401 || code == 403) {
        if (strcmp(ec, "RepoNotFound") == 0)
            return err_set("%s: no such model on %s, or it is private (HTTP %ld; %s; a private model needs HF_TOKEN "
                           "set to a token that can read it)",
                           P->name, P->endpoint, code, tok);
        return err_set("%s: access denied to %s (HTTP %ld%s%s): the model is gated: accept its licence on %s/%s "
                       "(logged in), then set HF_TOKEN to an access token of that account (%s/settings/tokens); %s",
                       P->name, what, code, em[0] ? ": " : "", em, P->endpoint, P->h.repo, P->endpoint, tok);
    }
    if (code == 404) {
        if (strcmp(ec, "RevisionNotFound") == 0)
            return err_set("%s: no revision '%s' of %s on %s (HTTP 404)", P->name, P->h.rev, P->h.repo, P->endpoint);
        if (strcmp(ec, "RepoNotFound") == 0)
            return err_set("%s: no such model %s on %s (HTTP 404; a private model needs HF_TOKEN)", P->name, P->h.repo,
                           P->endpoint);
        if (strcmp(ec, "EntryNotFound") == 0)
            return err_set("%s: no file %s in revision '%s' (HTTP 404)", P->name, what, P->h.rev);
        return err_set("%s: no such model or revision on %s (HTTP 404 for %s)%s%s", P->name, P->endpoint, what,
                       em[0] ? ": " : "", em);
    }
    char body[200] = "";
    if (!em[0] && x->mem) snprintf(body, sizeof body, "%s", x->mem);
    for (char *s = body; *s; s++)
        if (*s == '\n' || *s == '\r') *s = ' ';
    return err_set("%s: HTTP %ld from %s for %s%s%s%s", P->name, code, P->endpoint, what, em[0] || body[0] ? ": " : "",
                   em, body);
}

static int curl_error(const puller *P, CURLcode rc, const char *what) {
    return err_set("%s: cannot download %s from %s: %s", P->name, what, P->endpoint, curl_easy_strerror(rc));
}

/* ---------------------------------------------------------------- the file list */

static int wanted(const char *path, const celer_pull_params *p) {
    for (size_t i = 0; i < sizeof run_files / sizeof run_files[0]; i++)
        if (fnmatch(run_files[i], path, FNM_PATHNAME) == 0) return 1;
    for (int i = 0; p && i < p->n_include; i++)
        if (p->include[i] && fnmatch(p->include[i], path, FNM_PATHNAME) == 0) return 2;
    return 0;
}

/* GET the API answer; fills *commit and the files to fetch (*files, *nf). */
static int list_files(puller *P, char commit[41], pull_file **files, int *nf) {
    char rev[3 * HUB_MAX_REV + 1], url[PATH_MAX + 1024];
    if (!url_escape(P->h.rev, 0, rev, sizeof rev)) return err_set("%s: revision too long", P->name);
    snprintf(url, sizeof url, "%s/api/models/%s/revision/%s?blobs=true", P->endpoint, P->h.repo, rev);
    xfer x;
    memset(&x, 0, sizeof x);
    xfer_reset(&x);
    x.mem_max = API_MAX_BYTES;
    long code;
    CURLcode rc = http_do(P, &x, url, 0, 0, &code);
    int st = -1;
    json_t *j = NULL;
    if (rc != CURLE_OK) {
        curl_error(P, rc, "the file list");
        goto out;
    }
    if (code != 200) {
        http_error(P, &x, code, "the file list");
        goto out;
    }
    json_error_t je;
    if (!x.mem || !(j = json_loadb(x.mem, x.mem_n, 0, &je)) || !json_is_object(j)) {
        err_set("%s: the hub's answer for %s is not JSON (%s)", P->name, url, x.mem ? je.text : "empty");
        goto out;
    }
    const char *sha = json_string_value(json_object_get(j, "sha"));
    json_t *sib = json_object_get(j, "siblings");
    if (!sha || !hub_is_commit(sha) || !json_is_array(sib)) {
        err_set("%s: the hub's answer for %s lacks \"sha\" (a commit) or \"siblings\"", P->name, url);
        goto out;
    }
    strcpy(commit, sha);
    size_t n = json_array_size(sib), k = 0;
    if (n > PULL_MAX_FILES) n = PULL_MAX_FILES;
    if (!(*files = calloc(n ? n : 1, sizeof **files))) {
        err_set("out of memory");
        goto out;
    }
    for (size_t i = 0; i < n; i++) {
        json_t *e = json_array_get(sib, i), *lfs = json_object_get(e, "lfs");
        const char *path = json_string_value(json_object_get(e, "rfilename"));
        if (!path || !wanted(path, P->p)) continue;
        if (!rpath_ok(path)) {
            err_set("%s: the hub lists a file with an unsafe path: '%s'", P->name, path);
            goto out;
        }
        pull_file *f = &(*files)[k];
        if (!(f->path = strdup(path))) {
            err_set("out of memory");
            goto out;
        }
        k++;
        f->size = -1;
        const char *tag = NULL;
        json_t *sz = NULL;
        if (json_is_object(lfs)) tag = json_string_value(json_object_get(lfs, "sha256")), sz = json_object_get(lfs, "size");
        else tag = json_string_value(json_object_get(e, "blobId")), sz = json_object_get(e, "size");
        if (tag && !etag_clean(tag, f->etag, sizeof f->etag)) f->etag[0] = '\0';
        if (json_is_integer(sz) && json_integer_value(sz) >= 0) f->size = json_integer_value(sz);
    }
    *nf = (int)k;
    st = 0;
out:
    json_decref(j);
    free(x.mem);
    return st;
}

/* The blob name and size of a file the API did not describe: a HEAD request, not
 * following redirects (the hub's first answer carries X-Linked-Etag and
 * X-Linked-Size for LFS files, ETag and Content-Length otherwise). */
static int head_file(puller *P, const char *url, pull_file *f) {
    xfer x;
    memset(&x, 0, sizeof x);
    xfer_reset(&x);
    x.mem_max = 4096;
    long code;
    CURLcode rc = http_do(P, &x, url, 1, 0, &code);
    int st = -1;
    if (rc != CURLE_OK) curl_error(P, rc, f->path);
    else if (code >= 400) http_error(P, &x, code, f->path);
    else if (!etag_clean(x.linked_etag[0] ? x.linked_etag : x.etag, f->etag, sizeof f->etag))
        err_set("%s: the hub gave no usable ETag for %s", P->name, f->path);
    else {
        curl_off_t cl = -1;
        curl_easy_getinfo(P->curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
        f->size = x.linked_size >= 0 ? x.linked_size : (code < 300 && cl >= 0 ? (int64_t)cl : -1);
        st = 0;
    }
    free(x.mem);
    return st;
}

/* ---------------------------------------------------------------- one file */

/* Brings blobs/ETAG of f into the cache (downloaded, resumed, checked). */
static int fetch_file(puller *P, const char *commit, pull_file *f) {
    char path_q[3 * 1024 + 1], url[PATH_MAX + 4096], blob[PATH_MAX + 256], part[PATH_MAX + 300];
    if (!url_escape(f->path, 1, path_q, sizeof path_q)) return err_set("%s: file name too long: %s", P->name, f->path);
    snprintf(url, sizeof url, "%s/%s/resolve/%s/%s", P->endpoint, P->h.repo, commit, path_q);
    if (!f->etag[0] && head_file(P, url, f)) return -1;
    snprintf(blob, sizeof blob, "%s/blobs/%s", P->repo_dir, f->etag);
    snprintf(part, sizeof part, "%s.incomplete", blob);
    const celer_pull_params *p = P->p;
    int64_t have = file_size(blob);
    if (have >= 0 && (f->size < 0 || have == f->size)) {
        if (p && p->progress) p->progress(CELER_PULL_CACHED, f->path, (uint64_t)have, (uint64_t)have, p->ctx);
        return 0;
    }
    /* Appending to the partial file; a lock keeps a second pull of the same blob out. */
    int fd = open(part, O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
    if (fd < 0) return err_set("cannot write %s: %s", part, strerror(errno));
    if (flock(fd, LOCK_EX | LOCK_NB) != 0) {
        close(fd);
        return err_set("%s: another download of %s is writing %s", P->name, f->path, part);
    }
    FILE *out = fdopen(fd, "ab");
    if (!out) {
        close(fd);
        return err_set("cannot write %s: %s", part, strerror(errno));
    }
    int st = -1;
    xfer x;
    memset(&x, 0, sizeof x);
    int64_t prev = -1;
    for (int attempt = 0;; attempt++) {
        fflush(out);
        int64_t off = file_size(part);
        if (off < 0) off = 0;
        if (off == prev && attempt >= PULL_TRIES) {
            err_set("%s: the server sends no more bytes of %s after %lld (want %lld)", P->name, f->path, (long long)off,
                    (long long)f->size);
            goto out;
        }
        prev = off;
        if (f->size >= 0 && off > f->size) { /* more than the file: not ours, start over */
            if (ftruncate(fd, 0) != 0) {
                err_set("cannot truncate %s: %s", part, strerror(errno));
                goto out;
            }
            off = 0;
        }
        if (f->size >= 0 && off == f->size) break; /* complete from an earlier run */
        if (p && p->progress)
            p->progress(attempt ? CELER_PULL_RETRY : CELER_PULL_START, f->path, (uint64_t)off,
                        f->size >= 0 ? (uint64_t)f->size : 0, p->ctx);
        xfer_reset(&x);
        x.out = out, x.p = p, x.file = f->path, x.total = f->size >= 0 ? (uint64_t)f->size : 0;
        long code;
        errno = 0;
        CURLcode rc = http_do(P, &x, url, 0, (uint64_t)off, &code);
        if (fflush(out) != 0 && !x.out_errno) x.out_errno = errno;
        if (x.out_errno) {
            err_set("%s: writing %s: %s%s", P->name, part, strerror(x.out_errno),
                    x.out_errno == ENOSPC ? " (free some space, then run the same command to resume)" : "");
            goto out;
        }
        if (rc == CURLE_OK && code >= 400) {
            http_error(P, &x, code, f->path);
            goto out;
        }
        if (rc == CURLE_OK && (code == 200 || code == 206)) {
            if (f->size < 0) { /* size from this answer when the API gave none */
                curl_off_t cl = -1;
                curl_easy_getinfo(P->curl, CURLINFO_CONTENT_LENGTH_DOWNLOAD_T, &cl);
                f->size = x.linked_size >= 0 ? x.linked_size : cl >= 0 ? (int64_t)x.resume_from + (int64_t)cl : -1;
            }
            if (f->size < 0) f->size = file_size(part);
            continue; /* loops back: off == size ends it, a short body resumes */
        }
        if (rc == CURLE_OK) {
            err_set("%s: unexpected HTTP %ld for %s", P->name, code, f->path);
            goto out;
        }
        if (!transient(rc) || attempt + 1 >= PULL_TRIES) {
            int64_t got = file_size(part);
            if (transient(rc))
                err_set("%s: the connection dropped %d times while downloading %s (%s; %lld bytes kept in %s): run the "
                        "same command again to resume",
                        P->name, PULL_TRIES, f->path, curl_easy_strerror(rc), (long long)(got > 0 ? got : 0), part);
            else curl_error(P, rc, f->path);
            goto out;
        }
        sleep_ms(500L * (attempt + 1));
    }
    /* Complete: check it before it enters the cache. */
    if (fflush(out) != 0 || fsync(fd) != 0) {
        err_set("%s: writing %s: %s", P->name, part, strerror(errno));
        goto out;
    }
    int64_t got = file_size(part);
    if (f->size >= 0 && got != f->size) {
        err_set("%s: %s has %lld bytes, the hub says %lld", P->name, f->path, (long long)got, (long long)f->size);
        unlink(part);
        goto out;
    }
    if (is_sha256(f->etag)) {
        char hex[65];
        if (sha256_file(part, hex)) goto out;
        if (strcasecmp(hex, f->etag) != 0) {
            err_set("%s: %s is corrupt: its SHA-256 is %s, the hub says %s; the download was discarded (run the "
                    "command again to download it anew)",
                    P->name, f->path, hex, f->etag);
            unlink(part);
            goto out;
        }
    }
    if (rename(part, blob) != 0) {
        err_set("cannot rename %s to %s: %s", part, blob, strerror(errno));
        goto out;
    }
    if (p && p->progress) p->progress(CELER_PULL_DONE, f->path, (uint64_t)got, (uint64_t)got, p->ctx);
    st = 0;
out:
    free(x.mem);
    fclose(out); /* also drops the lock */
    return st;
}

/* ---------------------------------------------------------------- the snapshot */

/* snapshots/COMMIT/PATH -> ../../blobs/ETAG (one more ../ per directory in PATH),
 * made as a temporary link renamed into place. */
static int link_file(const puller *P, const char *commit, const pull_file *f) {
    char link[PATH_MAX + 1200], tmp[PATH_MAX + 1300], target[PATH_MAX];
    snprintf(link, sizeof link, "%s/snapshots/%s/%s", P->repo_dir, commit, f->path);
    char *slash = strrchr(link, '/');
    *slash = '\0';
    if (hub_mkdirs(link)) return -1;
    *slash = '/';
    size_t k = 0;
    for (const char *s = f->path; *s; s++)
        if (*s == '/') k += 3;
    if (k + 6 + 6 + strlen(f->etag) >= sizeof target) return err_set("%s: path too deep", f->path);
    target[0] = '\0';
    strcat(target, "../../");
    for (const char *s = f->path; *s; s++)
        if (*s == '/') strcat(target, "../");
    strcat(target, "blobs/");
    strcat(target, f->etag);
    snprintf(tmp, sizeof tmp, "%s.celer-tmp-%ld", link, (long)getpid());
    unlink(tmp);
    if (symlink(target, tmp) != 0) return err_set("cannot create the link %s: %s", tmp, strerror(errno));
    if (rename(tmp, link) != 0) {
        int e = errno;
        unlink(tmp);
        return err_set("cannot create the link %s: %s", link, strerror(e));
    }
    return 0;
}

/* refs/REV holds the commit (no newline, as huggingface_hub writes it). */
static int write_ref(const puller *P, const char *commit) {
    char path[PATH_MAX + 600], tmp[PATH_MAX + 700];
    snprintf(path, sizeof path, "%s/refs/%s", P->repo_dir, P->h.rev);
    char *slash = strrchr(path, '/');
    *slash = '\0';
    if (hub_mkdirs(path)) return -1;
    *slash = '/';
    snprintf(tmp, sizeof tmp, "%s.celer-tmp-%ld", path, (long)getpid());
    FILE *f = fopen(tmp, "w");
    if (!f) return err_set("cannot write %s: %s", tmp, strerror(errno));
    int bad = fputs(commit, f) < 0;
    bad |= fclose(f) != 0;
    if (bad || rename(tmp, path) != 0) {
        int e = errno;
        unlink(tmp);
        return err_set("cannot write %s: %s", path, strerror(e));
    }
    return 0;
}

/* When model.safetensors.index.json is among the files, the shards it names are
 * the weights: other *.safetensors at the top level (a consolidated copy) are
 * skipped unless --include asked for them. */
static int apply_index(const puller *P, pull_file *files, int nf, int ix) {
    char blob[PATH_MAX + 256];
    snprintf(blob, sizeof blob, "%s/blobs/%s", P->repo_dir, files[ix].etag);
    json_error_t je;
    json_t *j = json_load_file(blob, 0, &je);
    json_t *wm = json_object_get(j, "weight_map");
    if (!json_is_object(wm)) {
        json_decref(j);
        return err_set("%s: model.safetensors.index.json has no \"weight_map\" object (%s)", P->name,
                       j ? "wrong shape" : je.text);
    }
    for (int i = 0; i < nf; i++) {
        const char *s = files[i].path;
        size_t n = strlen(s);
        if (strchr(s, '/') || n < 12 || strcmp(s + n - 12, ".safetensors") != 0) continue;
        int named = 0;
        const char *k;
        json_t *v;
        json_object_foreach(wm, k, v) {
            if (json_is_string(v) && strcmp(json_string_value(v), s) == 0) {
                named = 1;
                break;
            }
        }
        int asked = 0;
        for (int t = 0; P->p && t < P->p->n_include; t++)
            if (P->p->include[t] && fnmatch(P->p->include[t], s, FNM_PATHNAME) == 0) asked = 1;
        if (!named && !asked) files[i].skip = 1;
    }
    json_decref(j);
    return 0;
}

/* Small files (config, index, tokenizer) before the weights: their errors come
 * first, and the index decides which weights are needed. */
static int small_first(const void *a, const void *b) {
    const pull_file *x = a, *y = b;
    int wx = strstr(x->path, ".safetensors") && !strstr(x->path, ".index.json");
    int wy = strstr(y->path, ".safetensors") && !strstr(y->path, ".index.json");
    return wx != wy ? wx - wy : strcmp(x->path, y->path);
}

/* ---------------------------------------------------------------- entry */

static pthread_once_t curl_once = PTHREAD_ONCE_INIT;
static void curl_init(void) { curl_global_init(CURL_GLOBAL_DEFAULT); }

int celer_hub_pull(const char *name, const celer_pull_params *p, char *buf, size_t n) {
    puller P;
    memset(&P, 0, sizeof P);
    P.p = p;
    if (!name || hub_parse(name, &P.h) || hub_repo_dir(&P.h, P.repo_dir, sizeof P.repo_dir)) return -1;
    snprintf(P.name, sizeof P.name, "%s", name);
    P.endpoint = setting_str(SET_HF_ENDPOINT);
    P.token = setting_str(SET_HF_TOKEN);
    char endpoint[1024];
    snprintf(endpoint, sizeof endpoint, "%s", P.endpoint ? P.endpoint : "https://huggingface.co");
    for (size_t k = strlen(endpoint); k && endpoint[k - 1] == '/';) endpoint[--k] = '\0';
    P.endpoint = endpoint;
    pthread_once(&curl_once, curl_init);
    if (!(P.curl = curl_easy_init())) return err_set("%s: cannot start libcurl", name);
    if (P.token) {
        char auth[4200];
        snprintf(auth, sizeof auth, "Authorization: Bearer %s", P.token);
        P.headers = curl_slist_append(NULL, auth);
    }
    pull_file *files = NULL;
    int nf = 0, st = -1;
    char commit[41], dir[PATH_MAX + 64], blobs[PATH_MAX + 16];
    if (list_files(&P, commit, &files, &nf)) goto out;
    int n_weights = 0;
    for (int i = 0; i < nf; i++)
        if (fnmatch("*.safetensors", files[i].path, FNM_PATHNAME) == 0) n_weights++;
    if (n_weights == 0) {
        err_set("%s: revision %s has no *.safetensors weights at the top level (celer reads safetensors "
                "checkpoints; --include GLOB fetches other files)",
                name, P.h.rev);
        goto out;
    }
    qsort(files, (size_t)nf, sizeof *files, small_first);
    snprintf(blobs, sizeof blobs, "%s/blobs", P.repo_dir);
    if (hub_mkdirs(blobs)) goto out;
    /* Room for what is left to download, before starting. */
    uint64_t need = 0;
    for (int i = 0; i < nf; i++) {
        if (files[i].size <= 0 || !files[i].etag[0]) continue;
        char b[PATH_MAX + 256];
        snprintf(b, sizeof b, "%s/%s", blobs, files[i].etag);
        if (file_size(b) == files[i].size) continue;
        strcat(b, ".incomplete");
        int64_t part = file_size(b);
        need += (uint64_t)files[i].size - (part > 0 && part <= files[i].size ? (uint64_t)part : 0);
    }
    struct statvfs vfs;
    if (need && statvfs(blobs, &vfs) == 0 && (uint64_t)vfs.f_bavail * vfs.f_frsize < need) {
        char a[32], b[32];
        err_set("%s: not enough disk space in %s: the download needs %s, %s is free", name, blobs,
                fmt_bytes(need, a, sizeof a), fmt_bytes((uint64_t)vfs.f_bavail * vfs.f_frsize, b, sizeof b));
        goto out;
    }
    for (int i = 0; i < nf; i++) {
        if (files[i].skip) continue;
        if (fetch_file(&P, commit, &files[i])) goto out;
        if (strcmp(files[i].path, "model.safetensors.index.json") == 0 && apply_index(&P, files, nf, i)) goto out;
    }
    for (int i = 0; i < nf; i++)
        if (!files[i].skip && link_file(&P, commit, &files[i])) goto out;
    if (!hub_is_commit(P.h.rev) && write_ref(&P, commit)) goto out;
    snprintf(dir, sizeof dir, "%s/snapshots/%s", P.repo_dir, commit);
    if ((size_t)snprintf(buf, n, "%s", dir) >= n) {
        err_set("%s: the snapshot path is too long", name);
        goto out;
    }
    st = 0;
out:
    for (int i = 0; i < nf; i++) free(files[i].path);
    free(files);
    curl_slist_free_all(P.headers);
    curl_easy_cleanup(P.curl);
    return st;
}
