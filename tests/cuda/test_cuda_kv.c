/* tests/cuda/test_cuda_kv.c: the KV cache in device memory over a whole context, on
 * the GPU against the CPU: the default model (context 1024) fed 1000 tokens in chunks
 * of 37 (so device buffers outgrow themselves several times: 256 -> 512 -> 1024 rows)
 * and then one at a time, with a snapshot taken at 300 tokens that keeps the old
 * buffer alive while the session grows past it; after the run the snapshot is
 * restored and continued, which must match the CPU's continuation. Logits within the
 * GPU tolerance (5e-2) and the same top token wherever the CPU's top two differ by
 * more than 0.05. Run by `make test-cuda` on the GPU machine. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>

#include "celer.h"
#include "fixture_util.h"
#include "harness.h"

enum { N = 1000, SNAP = 300, CONT = 40, V_MAX = 4096 };

/* Feeds tok [N] (chunks of 37 up to 900, then single steps), snapshotting at SNAP;
 * then restores the snapshot and feeds cont [CONT]. Logits of every row into out
 * [N + CONT, V]. 0 or -1. */
static int run(const char *device, const int32_t *tok, const int32_t *cont, float *out, int *V) {
    celer_model *m = celer_model_open_on("models/default", 2, device);
    if (!m) return -1;
    celer_model_info in;
    celer_model_get_info(m, &in);
    *V = in.vocab_size;
    celer_session *s = celer_session_new(m, 1024, 64);
    celer_snapshot *snap = NULL;
    int rc = s ? 0 : -1;
    for (int i = 0; i < N && rc == 0;) {
        int n = i < 900 ? (i + 37 <= SNAP || i >= SNAP ? 37 : SNAP - i) : 1;
        if (i + n > N) n = N - i;
        rc = celer_session_eval(s, tok + i, n, out + (size_t)i * *V, 1);
        i += n;
        if (rc == 0 && i == SNAP && !(snap = celer_session_snapshot(s))) rc = -1;
    }
    if (rc == 0 && snap) rc = celer_session_restore(s, snap);
    if (rc == 0) rc = celer_session_eval(s, cont, CONT, out + (size_t)N * *V, 1);
    if (rc != 0) fprintf(stderr, "%s: %s\n", device, celer_last_error());
    celer_snapshot_free(snap);
    celer_session_free(s);
    celer_model_free(m);
    return rc;
}

static void device_cache_matches_cpu(void) {
    int32_t tok[N], cont[CONT];
    unsigned seed = 7;
    for (int i = 0; i < N; i++) tok[i] = (int32_t)(rand_r(&seed) % 4000) + 1;
    for (int i = 0; i < CONT; i++) cont[i] = (int32_t)(rand_r(&seed) % 4000) + 1;
    size_t rows = N + CONT;
    float *a = malloc(rows * V_MAX * sizeof *a), *b = malloc(rows * V_MAX * sizeof *b);
    int V = 0;
    CHECK(a && b, "out of memory");
    if (!a || !b) goto out;
    CHECK(run("cpu", tok, cont, a, &V) == 0, "cpu run");
    CHECK(run("cuda", tok, cont, b, &V) == 0, "cuda run");
    double e = 0;
    for (size_t i = 0; i < rows * (size_t)V; i++) {
        double d = fabs((double)a[i] - b[i]);
        if (!(d <= e)) e = d;
    }
    int flips = fixture_argmax_flips(b, a, (int)rows, V, 0.05f);
    printf("  %zu rows: max |gpu - cpu| = %.3g, %d clear top-token differences\n", rows, e, flips);
    CHECK(e <= 5e-2, "max |gpu - cpu| = %g over %zu rows (tolerance 5e-2)", e, rows);
    CHECK(flips == 0, "%d rows with a different clear top token", flips);
out:
    free(a);
    free(b);
}

int main(void) {
    fixture_select_exact(); /* the 5e-2 tolerance is the exact precision's */
    RUN(device_cache_matches_cpu);
    return harness_done();
}
