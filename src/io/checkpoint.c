/* io/checkpoint.c: opens a checkpoint directory (config.json, single or sharded
 * safetensors) and finds tensors across shards. */
#include "io/checkpoint.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/err.h"
#include "base/json.h"

static char *join(const char *dir, const char *name) {
    size_t n = strlen(dir) + strlen(name) + 2;
    char *p = malloc(n);
    if (p) snprintf(p, n, "%s/%s", dir, name);
    return p;
}

static int add_shard(checkpoint *c, const char *file) {
    for (int i = 0; i < c->n_shards; i++) {
        const char *p = c->shards[i]->path, *slash = strrchr(p, '/');
        if (strcmp(slash ? slash + 1 : p, file) == 0) return 0;
    }
    if (strchr(file, '/') || strcmp(file, "..") == 0)
        return err_set("%s/model.safetensors.index.json: shard name \"%s\" is not a plain file name", c->dir, file);
    char *path = join(c->dir, file);
    if (!path) return err_set("out of memory");
    st_file *f = st_open(path);
    free(path);
    if (!f) return -1;
    st_file **ns = realloc(c->shards, (size_t)(c->n_shards + 1) * sizeof *ns);
    if (!ns) { st_close(f); return err_set("out of memory"); }
    c->shards = ns;
    c->shards[c->n_shards++] = f;
    return 0;
}

static int open_index(checkpoint *c, const char *index_path) {
    json_t *idx = json_load_path(index_path);
    if (!idx) return -1;
    json_t *wm = json_object_get(idx, "weight_map");
    int rc = 0;
    if (!json_is_object(wm)) {
        rc = err_set("%s: missing \"weight_map\" object", index_path);
    } else {
        const char *name;
        json_t *v;
        json_object_foreach(wm, name, v) {
            if (!json_is_string(v)) { rc = err_set("%s: weight_map[\"%s\"] is not a file name", index_path, name); break; }
            if ((rc = add_shard(c, json_string_value(v))) != 0) break;
        }
        if (rc == 0) {
            json_object_foreach(wm, name, v) {
                const char *want = json_string_value(v);
                const char *got = ckpt_where(c, name);
                const char *slash = strrchr(got, '/');
                if (!ckpt_find(c, name) || strcmp(slash ? slash + 1 : got, want) != 0) {
                    rc = err_set("%s: tensor \"%s\" is listed in shard %s but not found there", index_path, name, want);
                    break;
                }
            }
        }
    }
    json_decref(idx);
    return rc;
}

checkpoint *ckpt_open(const char *dir) {
    checkpoint *c = calloc(1, sizeof *c);
    if (!c) { err_set("out of memory"); return NULL; }
    if (!(c->dir = strdup(dir)) || !(c->config_path = join(dir, "config.json"))) {
        err_set("out of memory");
        goto fail;
    }
    if (access(dir, F_OK) != 0) { err_set("%s: no such checkpoint directory", dir); goto fail; }
    if (access(c->config_path, F_OK) != 0) {
        err_set("%s: missing config.json (is this a Hugging Face or mlx-community checkpoint directory?)", dir);
        goto fail;
    }
    if (!(c->config = json_load_path(c->config_path))) goto fail;
    if (!json_is_object(c->config)) { err_set("%s: not a JSON object", c->config_path); goto fail; }
    char *index = join(dir, "model.safetensors.index.json");
    if (!index) { err_set("out of memory"); goto fail; }
    int rc;
    if (access(index, F_OK) == 0) {
        rc = open_index(c, index);
    } else {
        char *single = join(dir, "model.safetensors");
        if (single && access(single, F_OK) != 0)
            rc = err_set("%s: no model.safetensors or model.safetensors.index.json", dir);
        else
            rc = add_shard(c, "model.safetensors");
        free(single);
    }
    free(index);
    if (rc != 0) goto fail;
    return c;
fail:
    ckpt_close(c);
    return NULL;
}

void ckpt_close(checkpoint *c) {
    if (!c) return;
    for (int i = 0; i < c->n_shards; i++) st_close(c->shards[i]);
    free(c->shards);
    json_decref(c->config);
    free(c->config_path);
    free(c->dir);
    free(c);
}

const st_tensor *ckpt_find(const checkpoint *c, const char *name) {
    for (int i = 0; i < c->n_shards; i++) {
        const st_tensor *t = st_find(c->shards[i], name);
        if (t) return t;
    }
    return NULL;
}

const char *ckpt_where(const checkpoint *c, const char *name) {
    for (int i = 0; i < c->n_shards; i++)
        if (st_find(c->shards[i], name)) return c->shards[i]->path;
    return c->n_shards == 1 ? c->shards[0]->path : c->dir;
}

size_t ckpt_bytes(const checkpoint *c) {
    size_t n = 0;
    for (int i = 0; i < c->n_shards; i++)
        for (int j = 0; j < c->shards[i]->n; j++) n += c->shards[i]->t[j].nbytes;
    return n;
}
