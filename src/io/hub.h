/* io/hub.h: Hugging Face hub names and the local hub cache, shared by the lookup
 * (io/hub.c) and the download (io/hub_pull.c). The cache layout is huggingface_hub's:
 *
 *   CACHE/models--ORG--NAME/refs/REVISION          the commit REVISION points at (text)
 *   CACHE/models--ORG--NAME/snapshots/COMMIT/FILE  -> ../../blobs/ETAG (relative symlink)
 *   CACHE/models--ORG--NAME/blobs/ETAG             the file's bytes (ETAG: sha256 for LFS
 *                                                  files, the git blob sha1 otherwise)
 *   CACHE/models--ORG--NAME/blobs/ETAG.incomplete  a download in progress (resumable)
 */
#ifndef CELER_IO_HUB_H
#define CELER_IO_HUB_H
#include <stddef.h>

#define HUB_MAX_ID 96    /* the hub's longest repository id */
#define HUB_MAX_REV 255

typedef struct {
    char repo[HUB_MAX_ID + 1];   /* "ORG/NAME" */
    char rev[HUB_MAX_REV + 1];   /* "main" when the name has no @REVISION */
    int rev_given;               /* 1 when the name had @REVISION */
} hub_name;

/* Parses ORG/NAME[@REVISION] into *h. 0, or -1 with a message saying what is wrong. */
int hub_parse(const char *s, hub_name *h);
/* 1 when rev is a full commit hash (40 lower-case hex digits). */
int hub_is_commit(const char *rev);
/* CACHE/models--ORG--NAME into buf (n bytes). 0, or -1 with a message (no cache
 * directory can be found, or the path does not fit). */
int hub_repo_dir(const hub_name *h, char *buf, size_t n);
/* mkdir -p of path (mode 0755). 0, or -1 with a message naming the directory. */
int hub_mkdirs(const char *path);
#endif
