/* tests/cuda/test_cuda_decode.c: the pipelined generation loop (engine/generate.c) with the
 * device sampler against the host loop on the same GPU (CELER_DEVICE_SAMPLE=0): the
 * same tokens for greedy and sampled settings, stopping on a stop token at the same
 * place, and the session and sampler left exactly as the host loop leaves them (a
 * second generation after a follow-up prompt gives the same tokens again), also when
 * the context fills (finish `context`, not an error, on both paths). Models:
 * the default model and gemma3's fixture (sliding-window caches, so undoing the
 * extra step rewinds a rotating cache). Also weights made on the device
 * (CELER_SYNTH_FILL, `--synth`) for gpt_oss's input-major experts: one-token forwards
 * equal one forward over the prompt (within the GPU tolerance) and are the same bits
 * in two runs. Run by `make test-cuda`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/settings.h"
#include "celer.h"
#include "harness.h"

enum { N1 = 120, N2 = 40 };

typedef struct {
    int32_t a[N1], b[N2];
    int na, nb, pos;
} result;

static int gen(const char *dir, int device_sampling, const celer_sampler_params *sp, int32_t stop, result *r) {
    setting_override(SET_CELER_DEVICE_SAMPLE, device_sampling ? "1" : "0");
    celer_model *m = celer_model_open_on(dir, 2, "cuda");
    if (!m) return -1;
    celer_model_info in;
    celer_model_get_info(m, &in);
    celer_session *s = celer_session_new(m, 1024, 16);
    celer_sampler *smp = s ? celer_sampler_new(sp, in.vocab_size) : NULL;
    const int32_t p1[5] = {1, 17, 42, 99, 7}, p2[3] = {5, 6, 8};
    int rc = -1;
    if (smp && (r->na = celer_generate(s, smp, p1, 5, N1, stop, r->a, NULL)) >= 0 &&
        (r->nb = celer_generate(s, smp, p2, 3, N2, -1, r->b, NULL)) >= 0) {
        r->pos = celer_session_pos(s);
        rc = 0;
    }
    if (rc != 0) fprintf(stderr, "%s: %s\n", dir, celer_last_error());
    celer_sampler_free(smp);
    celer_session_free(s);
    celer_model_free(m);
    return rc;
}

static void same_tokens(const char *dir, const char *what, const celer_sampler_params *sp) {
    result host, dev;
    memset(&host, 0, sizeof host);
    memset(&dev, 0, sizeof dev);
    if (gen(dir, 0, sp, -1, &host) != 0 || gen(dir, 1, sp, -1, &dev) != 0) {
        CHECK(0, "%s %s: a run failed", dir, what);
        return;
    }
    CHECK(host.na == dev.na && memcmp(host.a, dev.a, sizeof host.a) == 0, "%s %s: first generation differs", dir, what);
    CHECK(host.nb == dev.nb && memcmp(host.b, dev.b, sizeof host.b) == 0, "%s %s: second generation differs", dir, what);
    /* stop on a token first produced mid-way */
    const int32_t stop = host.a[N1 / 3];
    int at = 0;
    while (host.a[at] != stop) at++;
    result hs, ds;
    memset(&hs, 0, sizeof hs);
    memset(&ds, 0, sizeof ds);
    if (gen(dir, 0, sp, stop, &hs) != 0 || gen(dir, 1, sp, stop, &ds) != 0) {
        CHECK(0, "%s %s: a run with a stop token failed", dir, what);
        return;
    }
    CHECK(hs.na == at + 1 && ds.na == at + 1, "%s %s: stop token %d at %d: host stopped after %d, device after %d",
          dir, what, stop, at, hs.na, ds.na);
    CHECK(hs.pos == ds.pos, "%s %s: session at %d tokens after the host loop, %d after the device loop", dir, what,
          hs.pos, ds.pos);
    int first = 0;
    while (first < N2 && hs.b[first] == ds.b[first]) first++;
    CHECK(hs.nb == ds.nb && first == N2, "%s %s: generation after a stop differs (%d and %d tokens; from token %d: host %d, device %d)",
          dir, what, hs.nb, ds.nb, first, first < N2 ? hs.b[first] : -1, first < N2 ? ds.b[first] : -1);
    printf("  %s %s: %d + %d tokens the same; stop at %d the same; session at %d\n", dir, what, dev.na, dev.nb, at,
           ds.pos);
}

/* The context fills mid-generation: both loops end with finish `context` after the
 * same tokens, the session full; a generation after restoring the prompt's snapshot
 * gives the same tokens. */
static int fill(const char *dir, int device_sampling, const celer_sampler_params *sp, int32_t *out, int *n, int *fin,
                int32_t *out2, int *n2) {
    setting_override(SET_CELER_DEVICE_SAMPLE, device_sampling ? "1" : "0");
    celer_model *m = celer_model_open_on(dir, 2, "cuda");
    if (!m) return -1;
    celer_model_info in;
    celer_model_get_info(m, &in);
    celer_session *s = celer_session_new(m, 40, 16);
    celer_sampler *smp = s ? celer_sampler_new(sp, in.vocab_size) : NULL;
    const int32_t p1[5] = {1, 17, 42, 99, 7}, p2[3] = {5, 6, 8};
    int rc = -1;
    /* back to the prompt through a snapshot: a rotating cache (gemma3's window 16) cannot
     * rewind 20 tokens once it has wrapped */
    celer_snapshot *snap = NULL;
    if (smp && celer_session_eval(s, p1, 5, NULL, 0) == 0 && (snap = celer_session_snapshot(s)) &&
        (*n = celer_generate(s, smp, NULL, 0, -1, -1, out, fin)) >= 0 && celer_session_pos(s) == 40 &&
        celer_session_restore(s, snap) == 0 && (*n2 = celer_generate(s, smp, p2, 3, 10, -1, out2, NULL)) >= 0)
        rc = 0;
    celer_snapshot_free(snap);
    if (rc != 0) fprintf(stderr, "%s: %s (session at %d)\n", dir, celer_last_error(), s ? celer_session_pos(s) : -1);
    celer_sampler_free(smp);
    celer_session_free(s);
    celer_model_free(m);
    return rc;
}

static void context_full(const char *dir, const char *what, const celer_sampler_params *sp) {
    int32_t ha[64], da[64], hb[16], db[16];
    int hn = 0, dn = 0, hf = 0, df = 0, hn2 = 0, dn2 = 0;
    if (fill(dir, 0, sp, ha, &hn, &hf, hb, &hn2) != 0 || fill(dir, 1, sp, da, &dn, &df, db, &dn2) != 0) {
        CHECK(0, "%s %s: a run that fills the context failed", dir, what);
        return;
    }
    CHECK(hn == 36 && dn == 36 && hf == CELER_FINISH_CONTEXT && df == CELER_FINISH_CONTEXT,
          "%s %s: context 40 after 5 prompt tokens: host %d tokens (%s), device %d (%s); want 36 (context)", dir, what,
          hn, celer_finish_name(hf), dn, celer_finish_name(df));
    CHECK(memcmp(ha, da, sizeof(int32_t) * 36) == 0, "%s %s: tokens up to the full context differ", dir, what);
    CHECK(hn2 == dn2 && memcmp(hb, db, sizeof(int32_t) * (size_t)hn2) == 0, "%s %s: generation after it differs", dir,
          what);
}

static void run_model(const char *dir) {
    celer_sampler_params p;
    celer_sampler_params_default(&p);
    p.temperature = 0.0f;
    same_tokens(dir, "greedy", &p);
    context_full(dir, "greedy", &p);
    p.temperature = 0.8f;
    p.seed = 42;
    same_tokens(dir, "t0.8 k40 p0.95 m0.05", &p);
    context_full(dir, "t0.8", &p);
    p.temperature = 1.5f;
    p.top_k = 1000;
    p.top_p = 0.9f;
    p.min_p = 0.0f;
    p.seed = 7;
    same_tokens(dir, "t1.5 k1000 p0.9", &p);
}

/* logits [n, V] of tokens fed `batch` at a time, weights made on the device (a
 * mixture-of-experts model runs the exact arithmetic: model/precision.c) */
static int fill_logits(const char *dir, const int32_t *tok, int n, int batch, float *out, int *V) {
    setting_override(SET_CELER_SYNTH_FILL, "1");
    celer_model *m = celer_model_open_on(dir, 2, "cuda");
    setting_override(SET_CELER_SYNTH_FILL, NULL);
    if (!m) return -1;
    celer_model_info in;
    celer_model_get_info(m, &in);
    *V = in.vocab_size;
    celer_session *s = celer_session_new(m, 64, batch);
    int rc = s && celer_session_eval(s, tok, n, out, 1) == 0 ? 0 : -1;
    if (rc != 0) fprintf(stderr, "%s: %s\n", dir, celer_last_error());
    celer_session_free(s);
    celer_model_free(m);
    return rc;
}

/* Input-major experts made on the device take the layout an upload transposes them
 * to: before, their rows and columns stayed swapped, and the expert products read past
 * their inputs into the buffer they wrote (different bits run to run). */
static void synth_fill_experts(void) {
    enum { N = 12, VMAX = 1024 };
    const int32_t tok[N] = {1, 17, 42, 99, 7, 300, 5, 6, 8, 250, 3, 77};
    float *one = malloc(sizeof(float) * N * VMAX), *a = malloc(sizeof(float) * N * VMAX), *b = malloc(sizeof(float) * N * VMAX);
    int V = 0;
    const char *dir = "tests/fixtures/models/gpt_oss";
    if (fill_logits(dir, tok, N, N, one, &V) != 0 || V > VMAX || fill_logits(dir, tok, N, 1, a, &V) != 0 ||
        fill_logits(dir, tok, N, 1, b, &V) != 0) {
        CHECK(0, "%s with device-made weights: a run failed", dir);
    } else {
        CHECK(memcmp(a, b, sizeof(float) * (size_t)N * (size_t)V) == 0, "%s with device-made weights: two runs of one-token forwards differ", dir);
        double worst = 0;
        for (long i = 0; i < (long)N * V; i++) {
            const double d = fabs((double)a[i] - one[i]);
            worst = d > worst || d != d ? d : worst;
        }
        CHECK(worst <= 1e-2, "%s with device-made weights: one-token forwards against one forward: max |diff| %g", dir, worst);
    }
    free(one);
    free(a);
    free(b);
}

static void default_model(void) { run_model("models/default"); }
static void gemma3_rotating(void) { run_model("tests/fixtures/models/gemma3"); }

int main(void) {
    RUN(default_model);
    RUN(gemma3_rotating);
    RUN(synth_fill_experts);
    return harness_done();
}
