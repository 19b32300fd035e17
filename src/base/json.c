/* base/json.c: typed key access over jansson with file-and-key error messages. */
#include "base/json.h"

#include "base/err.h"

json_t *json_load_path(const char *path) {
    json_error_t e;
    json_t *j = json_load_file(path, JSON_DECODE_ANY | JSON_ALLOW_NUL, &e);
    if (!j) err_set("%s:%d:%d: invalid JSON: %s", path, e.line, e.column, e.text);
    return j;
}

static const json_t *present(const json_t *o, const char *key) {
    const json_t *v = json_is_object(o) ? json_object_get(o, key) : NULL;
    return (v && !json_is_null(v)) ? v : NULL;
}

int jget_int(const json_t *o, const char *key, int64_t def, int64_t *out, const char *where) {
    const json_t *v = present(o, key);
    if (!v) { *out = def; return 0; }
    if (json_is_integer(v)) { *out = json_integer_value(v); return 0; }
    if (json_is_real(v)) {
        double d = json_real_value(v);
        /* range first: casting a double outside int64 is undefined */
        if (d >= -9.2233720368547758e18 && d < 9.2233720368547758e18 && d == (double)(int64_t)d) {
            *out = (int64_t)d;
            return 0;
        }
    }
    return err_set("%s: key \"%s\" must be an integer", where, key);
}

int jget_int_req(const json_t *o, const char *key, int64_t *out, const char *where) {
    if (!present(o, key)) return err_set("%s: missing required key \"%s\"", where, key);
    return jget_int(o, key, 0, out, where);
}

int jget_num(const json_t *o, const char *key, double def, double *out, const char *where) {
    const json_t *v = present(o, key);
    if (!v) { *out = def; return 0; }
    if (!json_is_number(v)) return err_set("%s: key \"%s\" must be a number", where, key);
    *out = json_number_value(v);
    return 0;
}

int jget_bool(const json_t *o, const char *key, int def, int *out, const char *where) {
    const json_t *v = present(o, key);
    if (!v) { *out = def; return 0; }
    if (!json_is_boolean(v)) return err_set("%s: key \"%s\" must be true or false", where, key);
    *out = json_is_true(v);
    return 0;
}

int jget_str(const json_t *o, const char *key, const char *def, const char **out, const char *where) {
    const json_t *v = present(o, key);
    if (!v) { *out = def; return 0; }
    if (!json_is_string(v)) return err_set("%s: key \"%s\" must be a string", where, key);
    *out = json_string_value(v);
    return 0;
}
