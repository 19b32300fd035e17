/* tests/cuda/test_cuda_graph.c: decode steps recorded and replayed as CUDA graphs
 * (backend/cuda/step_ops.c) against the CPU and against the same steps run op by op
 * (CELER_GRAPH=0). Each model takes a 20-token prompt and then 600 single-token
 * steps, so attention crosses several 256-key split buckets (a new graph each time)
 * and sliding-window caches (gemma3's window is 16) rotate through their slots
 * (only values change: the graph is replayed); at step 300 the session goes back
 * 40 steps to a snapshot (positions, slots and key counts go back) and goes on. Every step's logits: within
 * 5e-2 of the CPU and the same clear top token, and identical bit for bit with and
 * without graphs (the kernels and their order are the same), with the small kernels'
 * launch order chosen per graph (CELER_PDL_LATE=auto, the default: each graph's
 * choice is made within the run, as CELER_STATS reports) and fixed late (63). Also
 * the measurement modes that take steps apart (CELER_PROFILE 4-9). Run by
 * `make test-cuda`. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/settings.h"
#include "celer.h"
#include "fixture_util.h"
#include "harness.h"

enum { PROMPT = 20, STEPS = 600, REWIND_AT = 300, REWIND = 40 };

/* Logits of the prompt's last row and of every step into out [1 + STEPS, V]. */
static int run(const char *dir, const char *device, int graphs, const char *late, const int32_t *tok, float *out, int V) {
    setting_override(SET_CELER_GRAPH, graphs ? "1" : "0");
    setting_override(SET_CELER_PDL_LATE, late);
    celer_model *m = celer_model_open_on(dir, 2, device);
    if (!m) return -1;
    celer_session *s = celer_session_new(m, 1024, 32);
    celer_snapshot *snap = NULL;
    int rc = s ? celer_session_eval(s, tok, PROMPT, out, 0) : -1;
    for (int i = 0; i < STEPS && rc == 0; i++) {
        if (i == REWIND_AT - REWIND && !(snap = celer_session_snapshot(s))) rc = -1;
        if (i == REWIND_AT && rc == 0) rc = celer_session_restore(s, snap);
        if (rc == 0) rc = celer_session_eval(s, &tok[PROMPT + i], 1, out + (size_t)(1 + i) * V, 0);
    }
    if (rc != 0) fprintf(stderr, "%s on %s: %s\n", dir, device, celer_last_error());
    celer_snapshot_free(snap);
    celer_session_free(s);
    celer_model_free(m);
    return rc;
}

/* The graph run with the launch order chosen per graph, CELER_STATS on and stderr
 * caught: its summary of the choices goes to chose [256]. */
static int auto_run(const char *dir, const int32_t *tok, float *out, int V, char *chose) {
    char path[] = "/tmp/celer-graph-XXXXXX";
    const int fd = mkstemp(path), saved = dup(2);
    if (fd < 0 || saved < 0) return -1;
    setting_override(SET_CELER_STATS, "1");
    fflush(stderr);
    dup2(fd, 2);
    const int rc = run(dir, "cuda", 1, NULL, tok, out, V);
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    setting_override(SET_CELER_STATS, NULL);
    char buf[1 << 16];
    const ssize_t k = pread(fd, buf, sizeof buf - 1, 0);
    buf[k > 0 ? k : 0] = 0;
    close(fd);
    unlink(path);
    const char *line = strstr(buf, "step graphs timed");
    if (line) {
        while (line > buf && line[-1] != '\n') line--;
        snprintf(chose, 256, "%.*s", (int)strcspn(line, "\n"), line);
    }
    if (rc != 0) fputs(buf, stderr);
    return rc;
}

/* dir's vocabulary size (opened on the CPU), with n random token ids of it in tok
 * (from seed); 0 when the model did not open. */
static int random_tokens(const char *dir, int32_t *tok, int n, unsigned seed) {
    celer_model *m = celer_model_open_on(dir, 1, "cpu");
    CHECK(m != NULL, "%s: %s", dir, celer_last_error());
    if (!m) return 0;
    celer_model_info in;
    celer_model_get_info(m, &in);
    celer_model_free(m);
    for (int i = 0; i < n; i++) tok[i] = (int32_t)(rand_r(&seed) % (unsigned)(in.vocab_size - 1)) + 1;
    return in.vocab_size;
}

static void graphs_match(const char *dir) {
    int32_t tok[PROMPT + STEPS];
    const int V = random_tokens(dir, tok, PROMPT + STEPS, 11);
    if (!V) return;
    const size_t rows = 1 + STEPS, n = rows * (size_t)V;
    float *cpu = malloc(n * sizeof *cpu), *g = malloc(n * sizeof *g), *ng = malloc(n * sizeof *ng),
          *late = malloc(n * sizeof *late);
    CHECK(cpu && g && ng && late, "out of memory");
    char chose[256] = "";
    if (cpu && g && ng && late && run(dir, "cpu", 0, NULL, tok, cpu, V) == 0 && auto_run(dir, tok, g, V, chose) == 0 &&
        run(dir, "cuda", 1, "63", tok, late, V) == 0 && run(dir, "cuda", 0, NULL, tok, ng, V) == 0) {
        double e = 0;
        size_t differ = 0, differ_late = 0;
        for (size_t i = 0; i < n; i++) {
            double d = fabs((double)cpu[i] - g[i]);
            if (!(d <= e)) e = d;
            differ += memcmp(&g[i], &ng[i], sizeof *g) != 0;
            differ_late += memcmp(&late[i], &ng[i], sizeof *g) != 0;
        }
        int flips = fixture_argmax_flips(g, cpu, (int)rows, V, 0.05f);
        printf("  %s: %zu steps: max |graph - cpu| = %.3g, %d clear top-token differences, %zu values differ "
               "from the op-by-op run (%zu launching late); %s\n", dir, rows, e, flips, differ, differ_late, chose);
        CHECK(e <= 5e-2, "%s: max |graph - cpu| = %g (tolerance 5e-2)", dir, e);
        CHECK(flips == 0, "%s: %d steps with a different clear top token", dir, flips);
        CHECK(differ == 0, "%s: %zu logits differ between graph and op-by-op runs", dir, differ);
        CHECK(differ_late == 0, "%s: %zu logits differ between late-launching graphs and op-by-op runs", dir, differ_late);
        CHECK(strstr(chose, "timed their small kernels' launch order") != NULL,
              "%s: no step graph chose its launch order (CELER_STATS said: %s)", dir, chose);
    } else {
        CHECK(0, "%s: a run failed", dir);
    }
    free(cpu);
    free(g);
    free(ng);
    free(late);
}

/* The fast precision on llama-q4: in the graphs, each norm and GLU writes the two-term
 * int8 activations its one-row 4-bit product reads (the op list names the product); op
 * by op, each product quantizes them itself. The same bytes, so the same logits bit for
 * bit; and near the CPU's (the fast precision's own envelope is test_cuda_precision's). */
static void llama_q4_fast(void) {
    const char *dir = "tests/fixtures/models/llama-q4";
    setting_override(SET_CELER_PRECISION, "fast");
    setting_override(SET_CUK_MV_I8X2, "2"); /* the fixture's rows (128, 256 columns) too */
    int32_t tok[PROMPT + STEPS];
    const int V = random_tokens(dir, tok, PROMPT + STEPS, 12);
    if (V) {
        const size_t n = (size_t)(1 + STEPS) * V;
        float *g = malloc(n * sizeof *g), *ng = malloc(n * sizeof *ng), *cpu = malloc(n * sizeof *cpu);
        CHECK(g && ng && cpu, "out of memory");
        if (g && ng && cpu && run(dir, "cuda", 1, "63", tok, g, V) == 0 && run(dir, "cuda", 0, NULL, tok, ng, V) == 0 &&
            run(dir, "cpu", 0, NULL, tok, cpu, V) == 0) {
            size_t differ = 0;
            double e = 0;
            for (size_t i = 0; i < n; i++) {
                differ += memcmp(&g[i], &ng[i], sizeof *g) != 0;
                const double d = fabs((double)g[i] - cpu[i]);
                if (!(d <= e)) e = d;
            }
            printf("  %s, fast: %zu values differ between graph and op-by-op runs; max |graph - cpu (fast)| = %.3g\n", dir,
                   differ, e);
            CHECK(differ == 0, "%s (fast): %zu logits differ between graph and op-by-op runs", dir, differ);
            CHECK(e <= 0.25, "%s (fast): max |graph - cpu| = %g", dir, e);
        } else {
            CHECK(0, "%s (fast): a run failed", dir);
        }
        free(g);
        free(ng);
        free(cpu);
    }
    fixture_select_exact();
}

/* CELER_PROFILE 4-9 take recorded steps apart for measurement (step_ops.c,
 * run_ops_apart): under each mode, on llama-q4 at the fast precision (its norms and
 * GLUs write int8 pieces, which the modes must account for), a prompt and 40 steps run
 * without error, through captured graphs, and leave the steps' outputs uncomputed:
 * every step's logits the same bits (the logits buffer is not written, or is written
 * from inputs no step recomputes), where the whole steps' differ; and with one small
 * kernel kind kept (CELER_PROFILE_KEEP), the runs complete. */
static void profile_parts(void) {
    const char *dir = "tests/fixtures/models/llama-q4";
    enum { N = 40 };
    setting_override(SET_CELER_PRECISION, "fast");
    setting_override(SET_CELER_GRAPH, "1"); /* the modes act on recorded steps; run() left it as its last call set it */
    setting_override(SET_CELER_PDL_LATE, NULL);
    int32_t tok[PROMPT + N];
    const int V = random_tokens(dir, tok, PROMPT + N, 13);
    float *out = V ? malloc((size_t)(1 + N) * V * sizeof *out) : NULL;
    CHECK(!V || out != NULL, "out of memory");
    static const struct {
        int mode;
        const char *keep; /* CELER_PROFILE_KEEP */
    } runs[] = {{0, NULL}, {4, NULL}, {5, NULL}, {6, NULL}, {7, NULL}, {8, NULL}, {9, NULL}, {8, "add_rmsnorm"}, {9, "attention"}};
    for (size_t r = 0; r < sizeof runs / sizeof *runs && out; r++) {
        const int mode = runs[r].mode;
        char v[4];
        snprintf(v, sizeof v, "%d", mode);
        setting_override(SET_CELER_PROFILE, v);
        setting_override(SET_CELER_PROFILE_KEEP, runs[r].keep);
        celer_model *m = celer_model_open_on(dir, 1, "cuda");
        celer_session *s = m ? celer_session_new(m, 256, 32) : NULL;
        int rc = s ? celer_session_eval(s, tok, PROMPT, out, 0) : -1;
        for (int i = 0; i < N && rc == 0; i++) rc = celer_session_eval(s, &tok[PROMPT + i], 1, out + (size_t)(1 + i) * V, 0);
        CHECK(rc == 0, "CELER_PROFILE=%d: %s", mode, celer_last_error());
        size_t same = 0; /* steps whose logits are those of the step before, bit for bit */
        for (int i = 2; i <= N && rc == 0; i++)
            same += memcmp(out + (size_t)i * V, out + (size_t)(i - 1) * V, (size_t)V * sizeof *out) == 0;
        printf("  CELER_PROFILE=%d%s%s: %zu of %d steps repeat the logits of the step before\n", mode,
               runs[r].keep ? ", keeping " : "", runs[r].keep ? runs[r].keep : "", same, N - 1);
        if (mode == 0) CHECK(rc == 0 && same == 0, "whole steps: %zu steps repeat their logits", same);
        else if (!runs[r].keep) /* with a kind kept (a norm), values may flow into the logits: it must only run */
            CHECK(rc == 0 && same == (size_t)(N - 1), "CELER_PROFILE=%d: only %zu of %d steps left their logits alone", mode,
                  same, N - 1);
        celer_session_free(s);
        celer_model_free(m);
    }
    setting_override(SET_CELER_PROFILE, NULL);
    setting_override(SET_CELER_PROFILE_KEEP, NULL);
    free(out);
    fixture_select_exact();
}

static void default_model(void) { graphs_match("models/default"); }
static void gemma3_rotating(void) { graphs_match("tests/fixtures/models/gemma3"); }
static void llama_q4(void) { graphs_match("tests/fixtures/models/llama-q4"); }

int main(void) {
    fixture_select_exact(); /* the 5e-2 tolerance is the exact precision's */
    RUN(default_model);
    RUN(gemma3_rotating);
    RUN(llama_q4);
    RUN(llama_q4_fast);
    RUN(profile_parts);
    return harness_done();
}
