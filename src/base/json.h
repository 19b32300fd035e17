/* base/json.h: thin helpers over jansson for reading typed keys with errors that name
 * the file and the key. `where` is the file (or object path) used in messages. */
#ifndef CELER_JSON_H
#define CELER_JSON_H
#include <jansson.h>
#include <stdint.h>

/* Parses a JSON file; on failure the message names path, line and column. */
json_t *json_load_path(const char *path);

/* Each getter: key absent (or JSON null) -> *out = def, returns 0 (or -1 when
 * required and absent); present with the wrong type -> error naming where and key. */
int jget_int(const json_t *o, const char *key, int64_t def, int64_t *out, const char *where);
int jget_int_req(const json_t *o, const char *key, int64_t *out, const char *where);
int jget_num(const json_t *o, const char *key, double def, double *out, const char *where);
int jget_bool(const json_t *o, const char *key, int def, int *out, const char *where);
/* Borrowed string or def. */
int jget_str(const json_t *o, const char *key, const char *def, const char **out, const char *where);
#endif
