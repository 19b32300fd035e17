/* io/safetensors.h: read-only access to .safetensors files by mmap (weights are never
 * copied) and a writer for small F32/I32 outputs. st_open validates the whole header:
 * every tensor's dtype, shape and byte range, with no range outside the data section
 * and no two ranges overlapping. */
#ifndef CELER_SAFETENSORS_H
#define CELER_SAFETENSORS_H
#include <stddef.h>
#include <stdint.h>

typedef enum {
    ST_F64, ST_F32, ST_F16, ST_BF16, ST_I64, ST_I32, ST_I16, ST_I8,
    ST_U64, ST_U32, ST_U16, ST_U8, ST_BOOL, ST_F8_E4M3, ST_F8_E5M2, ST_E8M0,
    ST_N_DTYPES
} st_dtype;

#define ST_MAX_DIMS 8

typedef struct {
    char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;   /* inside the mapping, or an aligned copy (see st_file.copies) */
    size_t nbytes;
} st_tensor;

typedef struct {
    char *path;
    int fd;
    void *map;          /* the whole file, PROT_READ */
    size_t size;
    int n;
    st_tensor *t;       /* [n], sorted by name */
    void **copies;      /* [n] or NULL: aligned copies of tensors the file misaligns */
} st_file;

/* Opens and validates path; NULL with an error naming the file and the problem.
 * Every tensor's data is aligned to its element size (4 bytes at least: packed
 * weights are read as uint32 words): a file whose header length or offsets misalign a
 * tensor gets that tensor copied once, here, into memory the st_file owns. */
st_file *st_open(const char *path);
void st_close(st_file *f);
/* The tensor called name, or NULL. */
const st_tensor *st_find(const st_file *f, const char *name);

const char *st_dtype_name(st_dtype d);
size_t st_dtype_size(st_dtype d);
int64_t st_numel(const st_tensor *t);

/* A tensor to write: name, dtype (F32, I32, BF16, U32, ...), shape, data. */
typedef struct {
    const char *name;
    st_dtype dtype;
    int ndim;
    int64_t shape[ST_MAX_DIMS];
    const void *data;
} st_out;

/* Writes tensors to path (metadata may be NULL: a JSON object's text). -1 on error. */
int st_write(const char *path, const st_out *ts, int n, const char *metadata_json);

/* Streaming writer for files too big to hold in memory: the header is written from
 * ts (data ignored), then the caller appends every tensor's bytes in order. */
typedef struct st_writer st_writer;
st_writer *st_writer_open(const char *path, const st_out *ts, int n, const char *metadata_json);
int st_writer_write(st_writer *w, const void *buf, size_t n);
/* The next n data bytes as a hole (a sparse file: zeros that take no disk). */
int st_writer_skip(st_writer *w, size_t n);
/* Checks that exactly the announced bytes were written, closes; -1 on any error. */
int st_writer_close(st_writer *w);
/* Closes and deletes a partial file. */
void st_writer_abort(st_writer *w);
#endif
