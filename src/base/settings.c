/* base/settings.c: reads the environment variables of settings.h once per process
 * and answers for them; `celer --help-env` prints the table (celer_settings_print). */
#include "base/settings.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "celer.h"

typedef enum { T_FLAG, T_INT, T_STR } setting_type;

static const struct {
    const char *name;
    setting_type type;
    const char *def;
    const char *meaning;
} table[SET_COUNT] = {
#define SETTING_ROW(id, type, def, meaning) {#id, T_##type, def, meaning},
    CELER_SETTINGS(SETTING_ROW)
#undef SETTING_ROW
};

static pthread_once_t once = PTHREAD_ONCE_INIT;
static const char *env_value[SET_COUNT];     /* read once; points into environ */
static const char *volatile override_value[SET_COUNT];
static int override_set[SET_COUNT];
static int warned[SET_COUNT];

static void read_env(void) {
    for (int i = 0; i < SET_COUNT; i++) {
        const char *e = getenv(table[i].name); /* the one getenv of the program */
        env_value[i] = e && *e ? e : NULL;
    }
}

const char *setting_str(setting_id id) {
    if ((int)id < 0 || id >= SET_COUNT) return NULL;
    pthread_once(&once, read_env);
    if (override_set[id]) return override_value[id];
    return env_value[id] ? env_value[id] : table[id].def;
}

static void warn_once(setting_id id, const char *v, const char *want) {
    if (warned[id]) return;
    warned[id] = 1;
    fprintf(stderr, "celer: warning: %s=%s is not %s; using the default (%s)\n", table[id].name, v, want,
            table[id].def ? table[id].def : "unset");
}

static int parse_flag(const char *v) {
    static const char *const on[] = {"1", "true", "on", "yes"}, *const off[] = {"0", "false", "off", "no"};
    for (int i = 0; i < 4; i++) {
        if (strcasecmp(v, on[i]) == 0) return 1;
        if (strcasecmp(v, off[i]) == 0) return 0;
    }
    return -1;
}

int setting_flag(setting_id id) {
    const char *v = setting_str(id);
    if (!v) return 0;
    int f = parse_flag(v);
    if (f >= 0) return f;
    warn_once(id, v, "0 or 1");
    return table[id].def ? parse_flag(table[id].def) == 1 : 0;
}

long setting_int(setting_id id) {
    const char *v = setting_str(id);
    if (!v) return 0;
    char *end;
    long x = strtol(v, &end, 10);
    if (end != v && *end == '\0') return x;
    warn_once(id, v, "an integer");
    return table[id].def ? strtol(table[id].def, NULL, 10) : 0;
}

int setting_find(const char *name) {
    for (int i = 0; name && i < SET_COUNT; i++)
        if (strcmp(table[i].name, name) == 0) return i;
    return -1;
}

void setting_override(setting_id id, const char *value) {
    if ((int)id < 0 || id >= SET_COUNT) return;
    pthread_once(&once, read_env);
    override_value[id] = value;
    override_set[id] = value != NULL;
}

const char *celer_setting(const char *name) {
    int id = setting_find(name);
    return id < 0 ? NULL : setting_str((setting_id)id);
}

int celer_setting_set(const char *name, const char *value) {
    int id = setting_find(name);
    if (id < 0) return -1;
    setting_override((setting_id)id, value);
    return 0;
}

void celer_settings_print(FILE *f) {
    static const char *const types[] = {"0|1", "int", "text"};
    fprintf(f, "Environment variables celer reads (docs/settings.md):\n\n");
    for (int i = 0; i < SET_COUNT; i++) {
        const char *now = setting_str((setting_id)i);
        fprintf(f, "  %-26s %-4s default %-6s %s%s%s%s\n", table[i].name, types[table[i].type],
                table[i].def ? table[i].def : "unset", table[i].meaning, env_value[i] ? " [set: " : "",
                env_value[i] ? (table[i].type == T_STR && (strstr(table[i].name, "KEY") || strstr(table[i].name, "TOKEN")) ? "***" : now) : "",
                env_value[i] ? "]" : "");
    }
}
