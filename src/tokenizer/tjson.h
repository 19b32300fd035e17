/* tokenizer/tjson.h: a small, fast read-only JSON document for tokenizer files.
 * tokenizer.json files are tens of megabytes (a 262k-entry vocab object and half a
 * million merges); a general DOM with a hash table per object is too slow to load at
 * every start, so this one parses into one arena: strings are unescaped in place in
 * the (owned) text buffer, objects are arrays of key/value pairs in file order.
 * Invariant: every tj_val points into its tj_doc; freeing the doc frees them all. */
#ifndef CELER_TJSON_H
#define CELER_TJSON_H
#include <stddef.h>
#include <stdint.h>

typedef enum { TJ_NULL, TJ_FALSE, TJ_TRUE, TJ_NUM, TJ_STR, TJ_ARR, TJ_OBJ } tj_type;

typedef struct tj_val tj_val;
struct tj_val {
    uint32_t type;          /* tj_type */
    uint32_t n;             /* TJ_STR: byte length; TJ_ARR: items; TJ_OBJ: pairs; TJ_NUM: 1 if written as a float */
    union {
        const char *s;      /* TJ_STR: NUL-terminated (may also contain NULs) */
        double num;         /* TJ_NUM */
        tj_val *items;      /* TJ_ARR: [n]; TJ_OBJ: [2n] key, value, key, value ... */
    } u;
};

typedef struct tj_doc tj_doc;

/* Parses text (len bytes; copied). NULL on error with a message naming `where`,
 * the line and the column. */
tj_doc *tj_parse(const char *text, size_t len, const char *where);
/* Reads and parses a file. NULL on error (message names the path). */
tj_doc *tj_load(const char *path);
void tj_free(tj_doc *d);
const tj_val *tj_root(const tj_doc *d);

/* Member of an object by key (first match), NULL when absent or o is not an object. */
const tj_val *tj_get(const tj_val *o, const char *key);
/* 1 when v is a string equal to s. */
int tj_is_str(const tj_val *v, const char *s);
#endif
