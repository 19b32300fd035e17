/* tests/test_kv_registry.c: the family registry's KV figure is what sessions really
 * hold. For every model fixture (tests/fixtures/models/<each>, and models/default),
 * a session is filled to its context one token at a time and after every token
 * celer_model_kv_bytes(m, n) must equal held_bytes of celer_session_kv_stats (the
 * rows the caches hold, summed by the kv layer), at a context within the fixtures'
 * sliding window (every cache dense) and at one past it (rotating caches). The
 * fixtures cover KV sharing (gemma4_moe: two layers read another's cache), sliding
 * windows (gemma3, gemma4, gpt_oss, exaone4) and per-layer head sizes (gemma4).
 * celer_model_kv_info must agree with it, and the registry's list must name every
 * family once with a title and model_types no two families share. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "celer.h"
#include "fixture_util.h"
#include "harness.h"

/* Fills a session of ctx tokens one token at a time; every step compares. */
static void fill_one_by_one(celer_model *m, const char *name, int ctx, int vocab) {
    celer_session *s = celer_session_new(m, ctx, 8);
    CHECK(s != NULL, "%s: session of %d: %s", name, ctx, celer_last_error());
    if (!s) return;
    int bad = 0;
    for (int n = 1; n <= ctx && !bad; n++) {
        int32_t t = (int32_t)((7 * n + 3) % vocab);
        if (celer_session_eval(s, &t, 1, NULL, 0) != 0) {
            CHECK(0, "%s: eval at %d: %s", name, n, celer_last_error());
            break;
        }
        celer_kv_stats st;
        celer_session_kv_stats(s, &st);
        uint64_t want = celer_model_kv_bytes(m, n);
        if (st.held_bytes != want) {
            CHECK(0, "%s, context %d: after %d tokens the caches hold %llu bytes, the registry says %llu", name, ctx, n,
                  (unsigned long long)st.held_bytes, (unsigned long long)want);
            bad = 1;
        }
    }
    /* kv_info describes the same caches: its total is the registry's figure at ctx */
    celer_kv_info kv;
    celer_model_kv_info(m, ctx, &kv);
    celer_model_info in;
    celer_model_get_info(m, &in);
    CHECK(kv.dense_bytes + kv.rotating_bytes == celer_model_kv_bytes(m, ctx),
          "%s: kv_info at %d says %llu + %llu, kv_bytes %llu", name, ctx, (unsigned long long)kv.dense_bytes,
          (unsigned long long)kv.rotating_bytes, (unsigned long long)celer_model_kv_bytes(m, ctx));
    CHECK(kv.dense_layers + kv.rotating_layers + kv.shared_layers == in.n_layers, "%s: kv_info counts %d + %d + %d of %d layers",
          name, kv.dense_layers, kv.rotating_layers, kv.shared_layers, in.n_layers);
    celer_session_free(s);
}

/* A prompt chunk of T tokens may leave up to T - 1 extra rows in each rotating
 * cache (the rows its first query needs); one more single-token step drops them. */
static void chunk_then_step(celer_model *m, const char *name, int vocab) {
    const int ctx = 48, T = 30;
    celer_session *s = celer_session_new(m, ctx, T);
    CHECK(s != NULL, "%s: %s", name, celer_last_error());
    if (!s) return;
    int32_t tok[31];
    for (int i = 0; i < 31; i++) tok[i] = (int32_t)((5 * i + 1) % vocab);
    celer_kv_info kv;
    celer_model_kv_info(m, ctx, &kv);
    celer_kv_stats st;
    if (celer_session_eval(s, tok, T, NULL, 0) == 0) {
        celer_session_kv_stats(s, &st);
        uint64_t want = celer_model_kv_bytes(m, T), slack = (uint64_t)(T - 1) * kv.rotating_token_bytes;
        CHECK(st.held_bytes >= want && st.held_bytes <= want + slack, "%s: after a chunk of %d: %llu held, want %llu..%llu",
              name, T, (unsigned long long)st.held_bytes, (unsigned long long)want, (unsigned long long)(want + slack));
    } else CHECK(0, "%s: %s", name, celer_last_error());
    if (celer_session_eval(s, tok + T, 1, NULL, 0) == 0) {
        celer_session_kv_stats(s, &st);
        CHECK(st.held_bytes == celer_model_kv_bytes(m, T + 1), "%s: after one more token %llu held, the registry says %llu",
              name, (unsigned long long)st.held_bytes, (unsigned long long)celer_model_kv_bytes(m, T + 1));
    } else CHECK(0, "%s: %s", name, celer_last_error());
    celer_session_free(s);
}

static int n_checked, saw_shared, saw_rotating;

static void check_dir(const char *dir, const char *name) {
    celer_model *m = celer_model_open_on(dir, 1, "cpu");
    CHECK(m != NULL, "%s: %s", name, celer_last_error());
    if (!m) return;
    celer_model_info in;
    celer_model_get_info(m, &in);
    CHECK(celer_model_kv_bytes(m, 0) == 0, "%s: no tokens, %llu bytes", name, (unsigned long long)celer_model_kv_bytes(m, 0));
    fill_one_by_one(m, name, 12, in.vocab_size); /* within every fixture's window (16): dense caches */
    fill_one_by_one(m, name, 40, in.vocab_size); /* past it: rotating caches */
    chunk_then_step(m, name, in.vocab_size);
    celer_kv_info kv;
    celer_model_kv_info(m, 40, &kv);
    saw_shared |= kv.shared_layers > 0;
    saw_rotating |= kv.rotating_layers > 0;
    n_checked++;
    celer_model_free(m);
}

static void every_fixture(void) {
    char names[FIXTURE_MAX][64], dir[600];
    int n = fixture_names(names);
    CHECK(n >= 0, "cannot list " FIXTURE_MODELS);
    for (int i = 0; i < n; i++) {
        snprintf(dir, sizeof dir, FIXTURE_MODELS "/%.63s", names[i]);
        check_dir(dir, names[i]);
    }
    check_dir("models/default", "models/default");
    CHECK(n_checked >= 12, "only %d models checked", n_checked);
    CHECK(saw_shared && saw_rotating, "no fixture with %s", saw_shared ? "rotating caches" : "shared layers");
}

/* Every family has a name, a title and model_types, and no model_type is read by
 * two families (the loader would silently take the first). */
static void family_list(void) {
    int n;
    const celer_family *f = celer_families(&n);
    CHECK(n >= 6, "%d families", n);
    for (int i = 0; i < n; i++) {
        CHECK(f[i].name && f[i].name[0] && f[i].title && f[i].title[0], "family %d lacks a name or title", i);
        CHECK(f[i].model_types && f[i].model_types[0], "family %s reads no model_type", f[i].name);
        for (int j = 0; j < i; j++) CHECK(strcmp(f[i].name, f[j].name) != 0, "family %s listed twice", f[i].name);
        for (const char *const *t = f[i].model_types; t && *t; t++)
            for (int j = 0; j < i; j++)
                for (const char *const *u = f[j].model_types; *u; u++)
                    CHECK(strcmp(*t, *u) != 0, "model_type %s is read by %s and %s", *t, f[j].name, f[i].name);
    }
}

int main(void) {
    RUN(family_list);
    RUN(every_fixture);
    return harness_done();
}
