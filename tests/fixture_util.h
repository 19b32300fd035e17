/* tests/fixture_util.h: helpers for the fixture tests (tests/fixtures/models/<name>:
 * a checkpoint plus ref.safetensors with seq_a/logits_a, seq_b/logits_b and ref.json).
 * Header-only so each test binary stays one file. */
#ifndef CELER_FIXTURE_UTIL_H
#define CELER_FIXTURE_UTIL_H
#include <dirent.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/json.h"
#include "base/settings.h"
#include "celer.h"
#include "io/safetensors.h"

typedef struct {
    st_file *ref;
    const int32_t *seq[2];      /* seq_a, seq_b */
    int len[2];
    const float *logits[2];     /* [len, V] */
    int vocab;
    int prompt_len, n_generated, branch;
} fixture_ref;

static inline int fixture_load(const char *dir, fixture_ref *r) {
    char p[512];
    memset(r, 0, sizeof *r);
    snprintf(p, sizeof p, "%s/ref.safetensors", dir);
    if (!(r->ref = st_open(p))) return -1;
    const char *names[2][2] = {{"seq_a", "logits_a"}, {"seq_b", "logits_b"}};
    for (int i = 0; i < 2; i++) {
        const st_tensor *s = st_find(r->ref, names[i][0]), *l = st_find(r->ref, names[i][1]);
        if (!s || !l) return -1;
        r->seq[i] = s->data;
        r->len[i] = (int)s->shape[0];
        r->logits[i] = l->data;
        r->vocab = (int)l->shape[1];
    }
    snprintf(p, sizeof p, "%s/ref.json", dir);
    json_t *j = json_load_path(p);
    if (!j) return -1;
    int64_t v;
    jget_int(j, "prompt_len", 0, &v, p); r->prompt_len = (int)v;
    jget_int(j, "n_generated", 0, &v, p); r->n_generated = (int)v;
    jget_int(j, "branch", 0, &v, p); r->branch = (int)v;
    json_decref(j);
    return 0;
}

static inline void fixture_free(fixture_ref *r) { st_close(r->ref); }

#define FIXTURE_MODELS "tests/fixtures/models"
#define FIXTURE_MAX 64

static inline int fixture_name_cmp(const void *a, const void *b) { return strcmp((const char *)a, (const char *)b); }

/* The model fixtures: the names of the directories FIXTURE_MODELS/<name> that hold a
 * config.json, sorted, into names[FIXTURE_MAX]; their count, or -1 when the
 * directory cannot be read (the tests run from the repository root). A new fixture
 * is tested by every test that scans, with no list to update. */
static inline int fixture_names(char names[FIXTURE_MAX][64]) {
    DIR *d = opendir(FIXTURE_MODELS);
    if (!d) return -1;
    int n = 0;
    struct dirent *e;
    char cfg[600];
    while ((e = readdir(d)) && n < FIXTURE_MAX) {
        if (e->d_name[0] == '.' || strlen(e->d_name) >= 64) continue;
        snprintf(cfg, sizeof cfg, FIXTURE_MODELS "/%s/config.json", e->d_name);
        FILE *f = fopen(cfg, "r");
        if (!f) continue;
        fclose(f);
        strcpy(names[n++], e->d_name);
    }
    closedir(d);
    qsort(names, (size_t)n, sizeof names[0], fixture_name_cmp);
    return n;
}

/* One case (harness.h's RUN_CASE) of fn(name) for every model fixture; fewer than
 * `least` fixtures (a lost directory) is one more failure. */
#define FIXTURE_CASES(fn, least)                                                        \
    do {                                                                                \
        char fx_names_[FIXTURE_MAX][64];                                                \
        int fx_n_ = fixture_names(fx_names_);                                           \
        for (int fx_i_ = 0; fx_i_ < fx_n_; fx_i_++) RUN_CASE(fx_names_[fx_i_], fn(fx_names_[fx_i_])); \
        if (fx_n_ < (least)) {                                                          \
            printf("FAIL only %d model fixtures in " FIXTURE_MODELS "\n", fx_n_);       \
            h_failed++;                                                                 \
        }                                                                               \
    } while (0)

/* Rows of got [n, vocab] whose argmax differs from ref's where ref's top two logits
 * are more than `gap` apart (the GPU tolerance's argmax rule). */
static inline int fixture_argmax_flips(const float *got, const float *ref, int n, int vocab, float gap) {
    int bad = 0;
    for (int r = 0; r < n; r++) {
        const float *g = got + (long)r * vocab, *f = ref + (long)r * vocab;
        int ga = 0, fa = 0;
        for (int i = 1; i < vocab; i++) {
            if (g[i] > g[ga]) ga = i;
            if (f[i] > f[fa]) fa = i;
        }
        float second = -INFINITY;
        for (int i = 0; i < vocab; i++)
            if (i != fa && f[i] > second) second = f[i];
        bad += f[fa] - second > gap && ga != fa;
    }
    return bad;
}

/* Feeds tokens [n] through a fresh session `chunk` at a time (0: all at once) and
 * returns max |logit - ref| over every row, or -1 on error; *flips (if not NULL)
 * gets fixture_argmax_flips with gap 0.05. */
static inline double fixture_compare(celer_model *m, const int32_t *tok, int n, const float *ref, int vocab, int chunk,
                                     int *flips) {
    float *got = malloc((size_t)n * vocab * sizeof *got);
    celer_session *s = celer_session_new(m, n, chunk ? chunk : n);
    double err = -1;
    if (flips) *flips = -1;
    if (got && s && celer_session_eval(s, tok, n, got, 1) == 0) {
        err = 0;
        for (long i = 0; i < (long)n * vocab; i++) {
            double d = got[i] - ref[i];
            if (d < 0) d = -d;
            if (!(d <= err)) err = d; /* NaN propagates */
        }
        if (flips) *flips = fixture_argmax_flips(got, ref, n, vocab, 0.05f);
    }
    celer_session_free(s);
    free(got);
    return err;
}

static inline double fixture_max_err(celer_model *m, const int32_t *tok, int n, const float *ref, int vocab, int chunk) {
    return fixture_compare(m, tok, n, ref, vocab, chunk, NULL);
}

/* The fixture tests hold a GPU to the exact precision (CELER_PRECISION=exact: two-term
 * bf16 products, float32 KV cache) at 5e-2; the fast precision, the GPU's default,
 * has its own envelope test (tests/cuda/test_cuda_precision.c). Call before opening
 * a model. No effect on the CPU, which is always exact. */
static inline void fixture_select_exact(void) { setting_override(SET_CELER_PRECISION, "exact"); }

/* Logit tolerance against transformers: 2e-3 on the CPU, 5e-2 on a GPU
 * ($CELER_DEVICE=cuda..., as `make test-cuda` runs the fixture tests). */
static inline double fixture_tolerance(void) {
    const char *d = getenv("CELER_DEVICE");
    return d && strncmp(d, "cuda", 4) == 0 ? 5e-2 : 2e-3;
}
#endif
