/* tests/cuda/test_cuda_batch.c: batched decode steps on the GPU (issue 16) against each
 * sequence alone. For llama (dense caches), gemma3 (rotating caches, window 16,
 * softcaps) and gpt_oss (sinks, experts): 12 sessions with prompts of different
 * lengths (3 to 47 tokens) are first decoded greedily each alone, one token per
 * forward (the single-sequence path: its own attention op and graphs), recording
 * every step's logits and token. Then the same prompts run as one batch: every step
 * is one celer_batch_eval over all live sessions, fed the tokens the lone runs chose
 * (so every step's logits are comparable), with sessions leaving at different steps
 * (12 -> 7 -> 3 rows: buckets 16, 8 and 4, padding rows in each, the 16-row bucket
 * through cuBLAS inside the graph). Checks: every logit within 5e-2 of the lone
 * run's and the same clear top token; the batch run with step graphs (CELER_GRAPH=1)
 * and without (0) identical bit for bit; and the generation loop (celer_gen, the
 * batched device sampler) producing, greedily, the tokens of the lone runs up to the
 * first step whose top two logits are too close to call. Then the pipelined batched
 * loop (CELER_BATCH_PIPELINE: step N+1 queued before step N's tokens are read) against
 * the same loop unpipelined, with stop tokens met mid-way (rows that end one step
 * late), a cancel, and sampled rows beside greedy ones: the same tokens and finishes
 * bit for bit, the sessions holding the same tokens, and one more token fed to each
 * session giving the same logits bit for bit (the speculative step's KV rows do not
 * count). Run by `make test-cuda`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/settings.h"
#include "celer.h"
#include "fixture_util.h"
#include "harness.h"

enum { N = 12, STEPS = 40, MAXP = 48 };

static const int prompt_len[N] = {3, 17, 40, 9, 25, 47, 5, 31, 12, 20, 38, 7};
/* the step after which sequence i leaves the batch */
static int steps_of(int i) { return i < 3 ? STEPS : i < 7 ? 28 : 14; }

typedef struct {
    int V;
    int32_t prompt[N][MAXP];
    int32_t tok[N][STEPS];        /* the lone run's greedy tokens */
    float margin[N][STEPS];       /* its top-two logit gap at each step */
    float *logits[N];             /* [STEPS, V] the lone run's logits before each token */
} lone_run;

static int argmax2(const float *x, int V, float *gap) {
    int b = 0;
    for (int i = 1; i < V; i++)
        if (x[i] > x[b]) b = i;
    float second = -INFINITY;
    for (int i = 0; i < V; i++)
        if (i != b && x[i] > second) second = x[i];
    *gap = x[b] - second;
    return b;
}

static int lone(celer_model *m, lone_run *r) {
    for (int i = 0; i < N; i++) {
        celer_session *s = celer_session_new(m, 256, 64);
        if (!s) return -1;
        float *row = r->logits[i];
        int rc = celer_session_eval(s, r->prompt[i], prompt_len[i], row, 0);
        for (int t = 0; t < steps_of(i) && rc == 0; t++) {
            r->tok[i][t] = argmax2(row, r->V, &r->margin[i][t]);
            if (t + 1 < steps_of(i)) {
                row += r->V;
                rc = celer_session_eval(s, &r->tok[i][t], 1, row, 0);
            }
        }
        celer_session_free(s);
        if (rc != 0) return -1;
    }
    return 0;
}

/* The batch run, teacher-forced with the lone run's tokens: logits into out[i]. */
static int batched(celer_model *m, const lone_run *r, float **out) {
    celer_session *ss[N] = {0};
    int rc = 0;
    for (int i = 0; i < N && rc == 0; i++) {
        if (!(ss[i] = celer_session_new(m, 256, 64))) rc = -1;
        /* prompts alone (prefill is not what this test is about) */
        if (rc == 0) rc = celer_session_eval(ss[i], r->prompt[i], prompt_len[i], out[i], 0);
    }
    for (int t = 1; t < STEPS && rc == 0; t++) {
        celer_session *bs[N];
        const int32_t *bt[N];
        int bn[N], idx[N], n = 0;
        for (int i = 0; i < N; i++) {
            if (t >= steps_of(i)) continue;
            bs[n] = ss[i];
            bt[n] = &r->tok[i][t - 1];
            bn[n] = 1;
            idx[n++] = i;
        }
        rc = celer_batch_eval(bs, bt, bn, NULL, n);
        for (int k = 0; k < n && rc == 0; k++)
            memcpy(out[idx[k]] + (size_t)t * r->V, celer_session_logits(bs[k]), sizeof(float) * (size_t)r->V);
    }
    if (rc != 0) fprintf(stderr, "batch: %s\n", celer_last_error());
    for (int i = 0; i < N; i++) celer_session_free(ss[i]);
    return rc;
}

/* The generation loop over all N at once (greedy): tokens into got[i]. */
static int generated(celer_model *m, const lone_run *r, int32_t got[N][STEPS], int n_got[N]) {
    celer_gen *g = celer_gen_new(m, 0);
    celer_session *ss[N] = {0};
    int rc = g ? 0 : -1;
    for (int i = 0; i < N && rc == 0; i++) {
        n_got[i] = 0;
        if (!(ss[i] = celer_session_new(m, 256, 64))) rc = -1;
        celer_gen_seq q = {.session = ss[i], .prompt = r->prompt[i], .n_prompt = prompt_len[i],
                           .max_tokens = steps_of(i), .stop_token = -1};
        if (rc == 0 && celer_gen_add(g, &q) != i) rc = -1;
    }
    while (rc == 0 && celer_gen_active(g) > 0) {
        const celer_gen_event *ev;
        const int n = celer_gen_step(g, &ev);
        if (n < 0) rc = -1;
        for (int k = 0; k < n; k++) {
            if (ev[k].finish == CELER_FINISH_ERROR) {
                fprintf(stderr, "generate: %s\n", ev[k].error);
                rc = -1;
            }
            if (ev[k].token >= 0 && n_got[ev[k].seq] < STEPS) got[ev[k].seq][n_got[ev[k].seq]++] = ev[k].token;
        }
    }
    if (rc != 0) fprintf(stderr, "generate: %s\n", celer_last_error());
    celer_gen_free(g);
    for (int i = 0; i < N; i++) celer_session_free(ss[i]);
    return rc;
}

/* The loop over all N with stop tokens stop[i] (-1: none), sequence 2 cancelled after
 * 10 tokens (cancel set), and every fourth sequence sampled (temperature 0.8, its own seed); the
 * tokens into got[i], the finishes into fin[i], what each session holds into pos[i],
 * and the logits after one more token (id 1) fed to each session into next[i] [V]. */
typedef struct {
    int32_t got[N][STEPS];
    int n_got[N], fin[N], pos[N];
    float *next[N];
} loop_run;

static int looped(celer_model *m, const lone_run *r, const int32_t *stop, int cancel, loop_run *o) {
    celer_gen *g = celer_gen_new(m, 0);
    celer_session *ss[N] = {0};
    celer_sampler *smp[N] = {0};
    int rc = g ? 0 : -1;
    for (int i = 0; i < N && rc == 0; i++) {
        o->n_got[i] = 0;
        o->fin[i] = -1;
        celer_sampler_params sp;
        celer_sampler_params_default(&sp);
        if (i % 4 == 3) {
            sp.temperature = 0.8f;
            sp.seed = 40 + (uint64_t)i;
        }
        if (!(ss[i] = celer_session_new(m, 256, 64)) || !(smp[i] = celer_sampler_new(&sp, r->V))) rc = -1;
        celer_gen_seq q = {.session = ss[i], .sampler = smp[i], .prompt = r->prompt[i], .n_prompt = prompt_len[i],
                           .max_tokens = steps_of(i), .stop_token = stop[i]};
        if (rc == 0 && celer_gen_add(g, &q) != i) rc = -1;
    }
    while (rc == 0 && celer_gen_active(g) > 0) {
        const celer_gen_event *ev;
        const int n = celer_gen_step(g, &ev);
        if (n < 0) rc = -1;
        for (int k = 0; k < n; k++) {
            const int i = ev[k].seq;
            if (ev[k].finish == CELER_FINISH_ERROR) {
                fprintf(stderr, "generate: %s\n", ev[k].error);
                rc = -1;
            }
            if (ev[k].token >= 0 && o->n_got[i] < STEPS) o->got[i][o->n_got[i]++] = ev[k].token;
            if (ev[k].finish) o->fin[i] = ev[k].finish;
            if (cancel && i == 2 && o->n_got[i] == 10 && !ev[k].finish) celer_gen_cancel(g, i);
        }
    }
    if (rc != 0) fprintf(stderr, "generate: %s\n", celer_last_error());
    celer_gen_free(g);
    const int32_t one = 1;
    for (int i = 0; i < N; i++) {
        o->pos[i] = ss[i] ? celer_session_pos(ss[i]) : -1;
        if (rc == 0 && celer_session_eval(ss[i], &one, 1, o->next[i], 0) != 0) rc = -1;
        celer_session_free(ss[i]);
        celer_sampler_free(smp[i]);
    }
    return rc;
}

/* Sequences [0, N) of a and b: the same tokens, finishes and session lengths, and
 * (logits set) the same logits after one more token, bit for bit. */
static int loops_differ(const char *dir, const char *what, const loop_run *a, const loop_run *b, int V, int logits) {
    int differ = 0;
    for (int i = 0; i < N; i++) {
        if (a->n_got[i] != b->n_got[i] || a->fin[i] != b->fin[i] || a->pos[i] != b->pos[i] ||
            memcmp(a->got[i], b->got[i], (size_t)a->n_got[i] * sizeof(int32_t)) != 0 ||
            (logits && memcmp(a->next[i], b->next[i], (size_t)V * sizeof(float)) != 0)) {
            if (differ++ < 5)
                printf("  %s (%s): sequence %d: unpipelined %d tokens (finish %d, session %d), pipelined %d (finish "
                       "%d, session %d)\n", dir, what, i, a->n_got[i], a->fin[i], a->pos[i], b->n_got[i], b->fin[i],
                       b->pos[i]);
        }
    }
    return differ;
}

/* Pipelined against unpipelined batched steps (see the top). Without stop tokens or
 * a cancel every step has the same rows both ways: everything bit for bit. With them
 * the step after a row ends carries that row pipelined (its speculative token), so
 * the products may run at another row count and round differently: the greedy tokens
 * must agree up to the lone run's first near tie (gap under `tie`), each row must stop
 * exactly, and the logits after it must match the lone run's path within the
 * batched-vs-alone tolerance (a speculative KV row left in the cache would add a key
 * the lone run does not have). */
static void pipelined_equals_unpipelined(celer_model *m, const lone_run *r, const char *dir, float tie) {
    static loop_run a, b;
    int ok = 1;
    for (int i = 0; i < N; i++) {
        a.next[i] = calloc((size_t)r->V, sizeof(float));
        b.next[i] = calloc((size_t)r->V, sizeof(float));
        ok &= a.next[i] && b.next[i];
    }
    int32_t stop[N];
    for (int i = 0; i < N; i++) stop[i] = -1;
    setting_override(SET_CELER_BATCH_PIPELINE, "0");
    CHECK(ok && looped(m, r, stop, 0, &a) == 0, "%s: unpipelined loop", dir);
    setting_override(SET_CELER_BATCH_PIPELINE, "1");
    CHECK(ok && looped(m, r, stop, 0, &b) == 0, "%s: pipelined loop", dir);
    int differ = ok ? loops_differ(dir, "same rows", &a, &b, r->V, 1) : 0;
    CHECK(differ == 0, "%s: %d sequences differ between pipelined and unpipelined batched steps", dir, differ);
    /* stop tokens each odd sequence meets mid-way (at their first occurrence) */
    for (int i = 1; i < N; i += 2)
        if (a.n_got[i] >= 8) stop[i] = a.got[i][4 + i % 4];
    setting_override(SET_CELER_BATCH_PIPELINE, "0");
    CHECK(ok && looped(m, r, stop, 1, &a) == 0, "%s: unpipelined loop with stop tokens", dir);
    setting_override(SET_CELER_BATCH_PIPELINE, "1");
    CHECK(ok && looped(m, r, stop, 1, &b) == 0, "%s: pipelined loop with stop tokens", dir);
    differ = 0;
    for (int i = 0; i < N && ok; i++) {
        if (i % 4 == 3) continue; /* sampled: compared in the run above */
        for (int t = 0; t < a.n_got[i] && t < b.n_got[i] && r->margin[i][t] >= tie; t++)
            if (a.got[i][t] != b.got[i][t]) {
                if (differ++ < 5)
                    printf("  %s (stops): sequence %d step %d: unpipelined %d, pipelined %d\n", dir, i, t, a.got[i][t],
                           b.got[i][t]);
                break;
            }
    }
    int stopped = 0, bad = 0;
    double e = 0;
    float *alone = calloc((size_t)r->V, sizeof(float));
    for (int i = 0; i < N && ok && alone; i++) {
        /* where it must end: the first stop token, the cancel, or max_tokens */
        int want = i == 2 ? 10 : steps_of(i), want_fin = i == 2 ? -1 : CELER_FINISH_LENGTH;
        for (int t = 0; t < b.n_got[i] && stop[i] >= 0; t++)
            if (b.got[i][t] == stop[i] && t + 1 <= want) {
                want = t + 1;
                want_fin = CELER_FINISH_STOP_TOKEN;
                break;
            }
        stopped += want_fin == CELER_FINISH_STOP_TOKEN;
        if (b.n_got[i] != want || b.fin[i] != want_fin || b.pos[i] != prompt_len[i] + want - 1) {
            if (bad++ < 5)
                printf("  %s: sequence %d: %d tokens (finish %d), session %d; want %d tokens (finish %d), session %d\n",
                       dir, i, b.n_got[i], b.fin[i], b.pos[i], want, want_fin, prompt_len[i] + want - 1);
            continue;
        }
        /* the lone path over the same tokens, then token 1 */
        celer_session *s = celer_session_new(m, 256, 64);
        int rc = s ? celer_session_eval(s, r->prompt[i], prompt_len[i], alone, 0) : -1;
        for (int t = 0; t + 1 < b.n_got[i] && rc == 0; t++) rc = celer_session_eval(s, &b.got[i][t], 1, alone, 0);
        const int32_t one = 1;
        if (rc == 0) rc = celer_session_eval(s, &one, 1, alone, 0);
        celer_session_free(s);
        CHECK(rc == 0, "%s: sequence %d alone: %s", dir, i, celer_last_error());
        for (int v = 0; v < r->V && rc == 0; v++) {
            const double d = fabs((double)alone[v] - b.next[i][v]);
            if (!(d <= e)) e = d;
        }
    }
    free(alone);
    printf("  %s: pipelined loop with stops: %d sequences differ from unpipelined, %d ended on a stop token, %d "
           "ended at the wrong place; next logits vs alone %.3g\n", dir, differ, stopped, bad, e);
    CHECK(differ == 0, "%s: %d sequences differ between pipelined and unpipelined batched steps (stops)", dir, differ);
    CHECK(stopped >= 3 && bad == 0, "%s: %d stop-token finishes, %d sequences ended at the wrong place", dir, stopped,
          bad);
    CHECK(e <= 5e-2, "%s: the logits after a pipelined run differ from the lone path's by %g", dir, e);
    for (int i = 0; i < N; i++) {
        free(a.next[i]);
        free(b.next[i]);
        a.next[i] = b.next[i] = NULL;
    }
}

/* In each precision (exact: every logit within 5e-2 and the tokens of the lone run
 * until a near tie; fast: bf16 products and a bf16 cache, the same checks, ties
 * judged against the deviation measured). */
static const char *precision = "exact";

static void batch_equals_alone(const char *dir) {
    setting_override(SET_CELER_PRECISION, precision);
    printf("  %s precision\n", precision);
    celer_model *m = celer_model_open_on(dir, 2, "cuda");
    CHECK(m != NULL, "%s: %s", dir, celer_last_error());
    if (!m) return;
    celer_model_info in;
    celer_model_get_info(m, &in);
    lone_run *r = calloc(1, sizeof *r);
    float *b1[N], *b0[N];
    r->V = in.vocab_size;
    unsigned seed = 7;
    int ok = 1;
    for (int i = 0; i < N; i++) {
        for (int j = 0; j < prompt_len[i]; j++) r->prompt[i][j] = (int32_t)(rand_r(&seed) % (unsigned)(r->V - 1)) + 1;
        r->logits[i] = calloc((size_t)STEPS * r->V, sizeof(float));
        b1[i] = calloc((size_t)STEPS * r->V, sizeof(float));
        b0[i] = calloc((size_t)STEPS * r->V, sizeof(float));
        ok &= r->logits[i] && b1[i] && b0[i];
    }
    CHECK(ok, "out of memory");
    setting_override(SET_CELER_GRAPH, "1");
    CHECK(ok && lone(m, r) == 0, "%s: lone runs: %s", dir, celer_last_error());
    CHECK(ok && batched(m, r, b1) == 0, "%s: batched run (graphs)", dir);
    setting_override(SET_CELER_GRAPH, "0");
    celer_model_free(m); /* a fresh backend reads CELER_GRAPH again */
    m = celer_model_open_on(dir, 2, "cuda");
    CHECK(m && batched(m, r, b0) == 0, "%s: batched run (op by op)", dir);
    setting_override(SET_CELER_GRAPH, "1");
    double e = 0;
    size_t differ = 0;
    int flips = 0;
    for (int i = 0; i < N && ok; i++) {
        const size_t n = (size_t)steps_of(i) * r->V;
        for (size_t j = 0; j < n; j++) {
            const double d = fabs((double)b1[i][j] - r->logits[i][j]);
            if (!(d <= e)) e = d;
            differ += memcmp(&b1[i][j], &b0[i][j], sizeof(float)) != 0;
        }
        flips += fixture_argmax_flips(b1[i], r->logits[i], steps_of(i), r->V, 0.05f);
    }
    printf("  %s: max |batched - alone| = %.3g, %d clear top-token differences, %zu values differ between graphs "
           "and op by op\n", dir, e, flips, differ);
    CHECK(e <= 5e-2, "%s: max |batched - alone| = %g (tolerance 5e-2)", dir, e);
    CHECK(flips == 0, "%s: %d steps with a different clear top token", dir, flips);
    CHECK(differ == 0, "%s: %zu logits differ between graph-replayed and op-by-op batched steps", dir, differ);

    /* the generation loop: batched device sampling, greedy */
    static int32_t got[N][STEPS];
    int n_got[N];
    CHECK(m && generated(m, r, got, n_got) == 0, "%s: generation loop", dir);
    int compared = 0, wrong = 0;
    /* a top-2 gap within twice the batched logits' measured deviation from the lone
     * run is a tie either run may break its own way (the fast precision rounds
     * activations to bf16, and how cuBLAS splits a product depends on its rows) */
    const float tie = fmaxf(1e-3f, (float)(2 * e));
    for (int i = 0; i < N && m; i++) {
        CHECK(n_got[i] == steps_of(i), "%s: sequence %d generated %d tokens, want %d", dir, i, n_got[i], steps_of(i));
        for (int t = 0; t < n_got[i] && t < steps_of(i); t++) {
            if (r->margin[i][t] < tie) break; /* a near tie: the paths may differ from here on */
            compared++;
            if (got[i][t] != r->tok[i][t]) {
                if (wrong++ < 5)
                    printf("  %s: sequence %d step %d: batched %d, alone %d (gap %.3g)\n", dir, i, t, got[i][t],
                           r->tok[i][t], r->margin[i][t]);
                break;
            }
        }
    }
    printf("  %s: generation loop: %d tokens compared, %d sequences differ\n", dir, compared, wrong);
    /* the fast precision's wider ties leave fewer tokens to compare */
    CHECK(compared > (strcmp(precision, "fast") == 0 ? N : N * 5) && wrong == 0, "%s: %d sequences generate other tokens batched than alone", dir, wrong);
    if (m) pipelined_equals_unpipelined(m, r, dir, tie);
    for (int i = 0; i < N; i++) {
        free(r->logits[i]);
        free(b1[i]);
        free(b0[i]);
    }
    free(r);
    celer_model_free(m);
}

static void llama(void) { batch_equals_alone("tests/fixtures/models/llama"); }
static void gemma3_rotating(void) { batch_equals_alone("tests/fixtures/models/gemma3"); }
static void gpt_oss_sinks(void) { batch_equals_alone("tests/fixtures/models/gpt_oss"); }

int main(void) {
    RUN(llama);
    RUN(gemma3_rotating);
    RUN(gpt_oss_sinks);
    precision = "fast";
    RUN(llama);
    RUN(gemma3_rotating);
    RUN(gpt_oss_sinks);
    return harness_done();
}
