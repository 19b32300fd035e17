/* io/checkpoint.h: a checkpoint directory: config.json plus one or more safetensors
 * shards (model.safetensors, or the shards named by model.safetensors.index.json).
 * Knows files, not models: it finds tensors by name across shards. */
#ifndef CELER_CHECKPOINT_H
#define CELER_CHECKPOINT_H
#include <jansson.h>

#include "io/safetensors.h"

typedef struct {
    char *dir;
    char *config_path;
    json_t *config;        /* parsed config.json (owned) */
    int n_shards;
    st_file **shards;      /* [n_shards] */
} checkpoint;

/* Opens dir; NULL with an error naming the file at fault. */
checkpoint *ckpt_open(const char *dir);
void ckpt_close(checkpoint *c);
/* The tensor called name in any shard, or NULL. */
const st_tensor *ckpt_find(const checkpoint *c, const char *name);
/* The path of the shard holding name (for messages), or the directory. */
const char *ckpt_where(const checkpoint *c, const char *name);
/* Bytes of all tensors in all shards. */
size_t ckpt_bytes(const checkpoint *c);
#endif
