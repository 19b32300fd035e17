/* io/safetensors.c: mmap reader with full header validation, and a small writer. */
#include "io/safetensors.h"

#include <errno.h>
#include <fcntl.h>
#include <jansson.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/err.h"
#include "base/limits.h"
#include "base/mem.h"

/* Limits (base/limits.h): a header above 256 MiB or 131072 tensors is not a real checkpoint. */
#define ST_MAX_HEADER CELER_MAX_ST_HEADER
_Static_assert(ST_MAX_DIMS == CELER_MAX_ST_DIMS, "base/limits.h and io/safetensors.h disagree on dimensions");

static const struct { const char *name; size_t size; } dtypes[ST_N_DTYPES] = {
    [ST_F64] = {"F64", 8},   [ST_F32] = {"F32", 4},   [ST_F16] = {"F16", 2},
    [ST_BF16] = {"BF16", 2}, [ST_I64] = {"I64", 8},   [ST_I32] = {"I32", 4},
    [ST_I16] = {"I16", 2},   [ST_I8] = {"I8", 1},     [ST_U64] = {"U64", 8},
    [ST_U32] = {"U32", 4},   [ST_U16] = {"U16", 2},   [ST_U8] = {"U8", 1},
    [ST_BOOL] = {"BOOL", 1}, [ST_F8_E4M3] = {"F8_E4M3", 1}, [ST_F8_E5M2] = {"F8_E5M2", 1},
    [ST_E8M0] = {"E8M0", 1},
};

const char *st_dtype_name(st_dtype d) { return d < ST_N_DTYPES ? dtypes[d].name : "?"; }
size_t st_dtype_size(st_dtype d) { return d < ST_N_DTYPES ? dtypes[d].size : 0; }

int64_t st_numel(const st_tensor *t) {
    int64_t n = 1;
    for (int i = 0; i < t->ndim; i++) n *= t->shape[i];
    return n;
}

static int cmp_name(const void *a, const void *b) {
    return strcmp(((const st_tensor *)a)->name, ((const st_tensor *)b)->name);
}

typedef struct { uint64_t begin, end; int idx; } span;
static int cmp_span(const void *a, const void *b) {
    const span *x = a, *y = b;
    return x->begin < y->begin ? -1 : x->begin > y->begin ? 1 : (x->end > y->end) - (x->end < y->end);
}

/* Fills t from one header entry; data_len is the size of the data section. */
static int parse_entry(const char *key, json_t *v, const uint8_t *data, uint64_t data_len,
                       st_tensor *t, span *sp) {
    if (!json_is_object(v)) return err_set("tensor \"%s\": header entry is not an object", key);
    const char *ds = json_string_value(json_object_get(v, "dtype"));
    if (!ds) return err_set("tensor \"%s\": missing \"dtype\"", key);
    int d;
    for (d = 0; d < ST_N_DTYPES; d++)
        if (strcmp(ds, dtypes[d].name) == 0) break;
    if (d == ST_N_DTYPES) return err_set("tensor \"%s\": unknown dtype \"%s\"", key, ds);
    t->dtype = (st_dtype)d;
    json_t *sh = json_object_get(v, "shape");
    if (!json_is_array(sh)) return err_set("tensor \"%s\": missing \"shape\" array", key);
    if (json_array_size(sh) > ST_MAX_DIMS)
        return err_set("tensor \"%s\": %zu dimensions (at most %d)", key, json_array_size(sh), ST_MAX_DIMS);
    t->ndim = (int)json_array_size(sh);
    uint64_t numel = 1;
    for (int i = 0; i < t->ndim; i++) {
        json_t *e = json_array_get(sh, (size_t)i);
        if (!json_is_integer(e) || json_integer_value(e) < 0)
            return err_set("tensor \"%s\": shape[%d] is not a non-negative integer", key, i);
        t->shape[i] = json_integer_value(e);
        if (t->shape[i] && numel > UINT64_MAX / 16 / (uint64_t)t->shape[i])
            return err_set("tensor \"%s\": shape too large", key);
        numel *= (uint64_t)t->shape[i];
    }
    json_t *off = json_object_get(v, "data_offsets");
    if (!json_is_array(off) || json_array_size(off) != 2 ||
        !json_is_integer(json_array_get(off, 0)) || !json_is_integer(json_array_get(off, 1)))
        return err_set("tensor \"%s\": \"data_offsets\" must be [begin, end]", key);
    json_int_t b = json_integer_value(json_array_get(off, 0));
    json_int_t e = json_integer_value(json_array_get(off, 1));
    if (b < 0 || e < b) return err_set("tensor \"%s\": data_offsets [%lld, %lld] are not ordered", key, (long long)b, (long long)e);
    if ((uint64_t)e > data_len)
        return err_set("tensor \"%s\": data_offsets [%lld, %lld] run past the data section (%llu bytes)",
                       key, (long long)b, (long long)e, (unsigned long long)data_len);
    uint64_t want = numel * dtypes[d].size;
    if ((uint64_t)(e - b) != want)
        return err_set("tensor \"%s\": %s shape of %llu elements needs %llu bytes, data_offsets give %llu",
                       key, ds, (unsigned long long)numel, (unsigned long long)want,
                       (unsigned long long)(e - b));
    t->data = data + b;
    t->nbytes = (size_t)want;
    sp->begin = (uint64_t)b;
    sp->end = (uint64_t)e;
    return 0;
}

static int parse_header(st_file *f, const char *hdr, size_t hlen, const uint8_t *data, uint64_t data_len) {
    json_error_t je;
    json_t *root = json_loadb(hdr, hlen, 0, &je);
    if (!root) return err_set("header is not valid JSON (column %d: %s)", je.column, je.text);
    if (!json_is_object(root)) {
        json_decref(root);
        return err_set("header is not a JSON object");
    }
    size_t n = json_object_size(root);
    size_t n_tensors = n - (json_object_get(root, "__metadata__") != NULL);
    if (n_tensors > CELER_MAX_ST_TENSORS) {
        json_decref(root);
        return err_set("header lists %zu tensors, over the limit of %d per file", n_tensors, CELER_MAX_ST_TENSORS);
    }
    f->t = calloc(n ? n : 1, sizeof *f->t);
    span *sp = calloc(n ? n : 1, sizeof *sp);
    int rc = 0;
    if (!f->t || !sp) { rc = err_set("out of memory reading header"); goto done; }
    const char *key;
    json_t *v;
    json_object_foreach(root, key, v) {
        if (strcmp(key, "__metadata__") == 0) continue;
        st_tensor *t = &f->t[f->n];
        if ((rc = parse_entry(key, v, data, data_len, t, &sp[f->n])) != 0) goto done;
        if (!(t->name = strdup(key))) { rc = err_set("out of memory"); goto done; }
        sp[f->n].idx = f->n;
        f->n++;
    }
    qsort(sp, (size_t)f->n, sizeof *sp, cmp_span);
    for (int i = 1; i < f->n; i++) {
        if (sp[i].begin < sp[i - 1].end && sp[i].end > sp[i].begin) {
            rc = err_set("tensors \"%s\" and \"%s\" overlap (bytes %llu-%llu and %llu-%llu)",
                         f->t[sp[i - 1].idx].name, f->t[sp[i].idx].name,
                         (unsigned long long)sp[i - 1].begin, (unsigned long long)sp[i - 1].end,
                         (unsigned long long)sp[i].begin, (unsigned long long)sp[i].end);
            goto done;
        }
    }
    qsort(f->t, (size_t)f->n, sizeof *f->t, cmp_name);
done:
    free(sp);
    json_decref(root);
    return rc;
}

/* The format lets the header length (and offsets) put a tensor at any byte; readers
 * load its elements as float / uint16 / uint32 words, which must be aligned. Writers
 * pad headers to 8 bytes, so real files need no copy. */
static int align_tensors(st_file *f) {
    for (int i = 0; i < f->n; i++) {
        st_tensor *t = &f->t[i];
        size_t a = st_dtype_size(t->dtype) >= 8 ? 8 : 4;
        if (!t->nbytes || (uintptr_t)t->data % a == 0) continue;
        if (!f->copies && !(f->copies = calloc((size_t)f->n, sizeof *f->copies))) return -1;
        void *c = aligned_alloc(64, (t->nbytes + 63) / 64 * 64);
        if (!c) return -1;
        memcpy(c, t->data, t->nbytes);
        f->copies[i] = c;
        t->data = c;
    }
    return 0;
}

st_file *st_open(const char *path) {
    st_file *f = calloc(1, sizeof *f);
    if (!f) { err_set("%s: out of memory", path); return NULL; }
    f->fd = -1;
    if (!(f->path = strdup(path))) goto oom;
    f->fd = open(path, O_RDONLY | O_CLOEXEC);
    if (f->fd < 0) { err_set("%s: cannot open: %s", path, strerror(errno)); goto fail; }
    struct stat stt;
    if (fstat(f->fd, &stt) != 0 || !S_ISREG(stt.st_mode)) { err_set("%s: not a regular file", path); goto fail; }
    f->size = (size_t)stt.st_size;
    if (f->size < 8) { err_set("%s: truncated safetensors file (%zu bytes, the header length alone needs 8)", path, f->size); goto fail; }
    f->map = mmap(NULL, f->size, PROT_READ, MAP_PRIVATE, f->fd, 0);
    if (f->map == MAP_FAILED) { f->map = NULL; err_set("%s: mmap failed: %s", path, strerror(errno)); goto fail; }
    const uint8_t *p = f->map;
    uint64_t hlen = 0;
    for (int i = 0; i < 8; i++) hlen |= (uint64_t)p[i] << (8 * i);
    if (hlen > f->size - 8) {
        err_set("%s: header length %llu runs past the end of the file (%zu bytes): truncated or not safetensors",
                path, (unsigned long long)hlen, f->size);
        goto fail;
    }
    if (hlen > ST_MAX_HEADER) { err_set("%s: header of %llu bytes exceeds the %u-byte limit", path, (unsigned long long)hlen, ST_MAX_HEADER); goto fail; }
    if (parse_header(f, (const char *)p + 8, (size_t)hlen, p + 8 + hlen, f->size - 8 - hlen) != 0) {
        err_prefix("%s", path);
        goto fail;
    }
    if (align_tensors(f) != 0) goto oom;
    return f;
oom:
    err_set("%s: out of memory", path);
fail:
    st_close(f);
    return NULL;
}

void st_close(st_file *f) {
    if (!f) return;
    for (int i = 0; i < f->n; i++) {
        free(f->t[i].name);
        if (f->copies) free(f->copies[i]);
    }
    free(f->copies);
    free(f->t);
    if (f->map) munmap(f->map, f->size);
    if (f->fd >= 0) close(f->fd);
    free(f->path);
    free(f);
}

const st_tensor *st_find(const st_file *f, const char *name) {
    st_tensor key = {.name = (char *)name};
    return bsearch(&key, f->t, (size_t)f->n, sizeof *f->t, cmp_name);
}

struct st_writer {
    char *path;
    FILE *fp;
    uint64_t want, done;
    int failed;
};

static size_t out_bytes(const st_out *t) {
    uint64_t numel = 1;
    for (int d = 0; d < t->ndim; d++) numel *= (uint64_t)t->shape[d];
    return (size_t)(numel * st_dtype_size(t->dtype));
}

st_writer *st_writer_open(const char *path, const st_out *ts, int n, const char *metadata_json) {
    json_t *hdr = json_object();
    if (!hdr) { err_set("out of memory"); return NULL; }
    if (metadata_json) {
        json_t *m = json_loads(metadata_json, 0, NULL);
        if (m) json_object_set_new(hdr, "__metadata__", m);
    }
    uint64_t off = 0;
    for (int i = 0; i < n; i++) {
        json_t *e = json_object(), *sh = json_array();
        for (int d = 0; d < ts[i].ndim; d++) json_array_append_new(sh, json_integer(ts[i].shape[d]));
        uint64_t nb = out_bytes(&ts[i]);
        json_object_set_new(e, "dtype", json_string(st_dtype_name(ts[i].dtype)));
        json_object_set_new(e, "shape", sh);
        json_object_set_new(e, "data_offsets", json_pack("[II]", (json_int_t)off, (json_int_t)(off + nb)));
        json_object_set_new(hdr, ts[i].name, e);
        off += nb;
    }
    char *text = json_dumps(hdr, JSON_COMPACT | JSON_PRESERVE_ORDER);
    json_decref(hdr);
    if (!text) { err_set("out of memory"); return NULL; }
    st_writer *w = calloc(1, sizeof *w);
    FILE *fp = fopen(path, "wb");
    if (!w || !fp || !(w->path = strdup(path))) {
        err_set("%s: cannot create: %s", path, strerror(errno));
        if (fp) fclose(fp);
        if (w) free(w->path);
        free(w);
        free(text);
        return NULL;
    }
    w->fp = fp;
    w->want = off;
    size_t tl = strlen(text), padded = (tl + 7) & ~(size_t)7;
    uint8_t len8[8];
    for (int i = 0; i < 8; i++) len8[i] = (uint8_t)((uint64_t)padded >> (8 * i));
    int ok = fwrite(len8, 1, 8, fp) == 8 && fwrite(text, 1, tl, fp) == tl;
    for (size_t i = tl; ok && i < padded; i++) ok = fputc(' ', fp) != EOF;
    free(text);
    if (!ok) w->failed = 1;
    return w;
}

int st_writer_write(st_writer *w, const void *buf, size_t n) {
    if (w->failed) return -1;
    if (n == 0) return 0; /* zero-size tensors: fwrite(NULL, 1, 0) is undefined */
    if (w->done + n > w->want || fwrite(buf, 1, n, w->fp) != n) {
        w->failed = 1;
        return err_set("%s: write failed: %s", w->path, w->done + n > w->want ? "more bytes than the header announced" : strerror(errno));
    }
    w->done += n;
    return 0;
}

int st_writer_skip(st_writer *w, size_t n) {
    if (w->failed) return -1;
    off_t at;
    if (w->done + n > w->want || fflush(w->fp) != 0 || (at = ftello(w->fp)) < 0 ||
        ftruncate(fileno(w->fp), at + (off_t)n) != 0 || fseeko(w->fp, at + (off_t)n, SEEK_SET) != 0) {
        w->failed = 1;
        return err_set("%s: cannot leave a hole of %zu bytes: %s", w->path, n, strerror(errno));
    }
    w->done += n;
    return 0;
}

int st_writer_close(st_writer *w) {
    if (!w) return 0;
    int bad = w->failed || w->done != w->want;
    if (fclose(w->fp) != 0) bad = 1;
    int rc = 0;
    if (bad) {
        rc = err_set("%s: write failed (%llu of %llu data bytes written)", w->path,
                     (unsigned long long)w->done, (unsigned long long)w->want);
        remove(w->path);
    }
    free(w->path);
    free(w);
    return rc;
}

void st_writer_abort(st_writer *w) {
    if (!w) return;
    w->failed = 1;
    char msg[2048];
    snprintf(msg, sizeof msg, "%s", err_msg());
    st_writer_close(w);
    err_set("%s", msg); /* keep the caller's reason */
}

int st_write(const char *path, const st_out *ts, int n, const char *metadata_json) {
    st_writer *w = st_writer_open(path, ts, n, metadata_json);
    if (!w) return -1;
    for (int i = 0; i < n; i++)
        if (st_writer_write(w, ts[i].data, out_bytes(&ts[i])) != 0) break;
    return st_writer_close(w);
}
