/* bench/bench_kv.c: decode step time and cache bytes copied per step, KV writes in
 * place versus the copying path (CELER_KV_INPLACE_WRITE=0), A/B interleaved step by
 * step, at given context lengths, on any checkpoint (e.g. `celer synth` shapes).
 *   bench_kv -m DIR [-c 16,512,2048] [-n STEPS] [-w WARMUP] [-t THREADS] [--real-prefill]
 * For each context C: the caches are filled to C - 1 positions with random rows
 * (or by a real prefill with --real-prefill; decode cost does not depend on the
 * values), one real token gives logits, and that state is snapshotted and restored
 * into two sessions, one per arm. Then STEPS greedy steps alternate between the arms
 * (the arm going first alternates too); the first WARMUP steps of each arm are not
 * counted (they pay the one-time copy of the shared restored buffers and the ring
 * compaction after the fill). Every step checks that both arms produce bit-identical
 * logits (the greedy-identity check). Prints one markdown row per context and arm. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/settings.h"
#include "celer.h"
#include "engine/engine.h"

static double now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static int cmp_d(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(double *v, int n) {
    qsort(v, (size_t)n, sizeof *v, cmp_d);
    return n ? (n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2])) : 0;
}

static uint64_t rng = 0x9e3779b97f4a7c15ull;
static float frand(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (float)((rng >> 40) & 0xffff) / 65536.0f - 0.5f;
}

/* Fills s's caches with random rows for positions 0..n-1 (n < ctx), as a prefill in
 * chunks of the session's batch would leave them, and sets its tokens. */
static int fill_random(celer_session *s, int n) {
    const model *m = s->cm->m;
    long kd = 0;
    for (int l = 0; l < m->cfg.n_layers; l++)
        if ((long)m->plan[l].n_kv * m->plan[l].head_dim > kd) kd = (long)m->plan[l].n_kv * m->plan[l].head_dim;
    int T = s->max_T;
    float *k = malloc((size_t)T * kd * sizeof(float)), *v = malloc((size_t)T * kd * sizeof(float));
    int32_t *pos = malloc((size_t)T * sizeof(int32_t));
    for (long i = 0; i < (long)T * kd; i++) {
        k[i] = frand();
        v[i] = frand();
    }
    for (int p0 = 0; p0 < n; p0 += T) {
        int t = n - p0 < T ? n - p0 : T;
        for (int i = 0; i < t; i++) pos[i] = p0 + i;
        for (int l = 0; l < m->cfg.n_layers; l++)
            if (m->plan[l].kv_source < 0 && kv_append(s->caches[l], k, v, pos, t) != 0) return -1;
    }
    for (int i = 0; i < n; i++) s->tokens[i] = (int32_t)(i % m->cfg.vocab);
    s->pos = n;
    free(k);
    free(v);
    free(pos);
    return 0;
}

static size_t held_bytes(const celer_session *s) {
    size_t b = 0;
    for (int l = 0; l < s->cm->m->cfg.n_layers; l++) b += kv_view_bytes(s->caches[l]);
    return b;
}

int main(int argc, char **argv) {
    const char *dir = NULL, *ctxs = "16,512,2048";
    int steps = 24, warm = 2, threads = 0, real = 0;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "-c") && i + 1 < argc) ctxs = argv[++i];
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) steps = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-w") && i + 1 < argc) warm = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--real-prefill")) real = 1;
        else {
            fprintf(stderr, "usage: bench_kv -m DIR [-c 16,512,2048] [-n STEPS] [-w WARMUP] [-t THREADS] [--real-prefill]\n");
            return 2;
        }
    }
    if (!dir || steps <= warm) {
        fprintf(stderr, "bench_kv: need -m DIR and STEPS > WARMUP\n");
        return 2;
    }
    celer_model *cm = celer_model_open(dir, threads);
    if (!cm) {
        fprintf(stderr, "bench_kv: %s\n", celer_last_error());
        return 1;
    }
    celer_model_info info;
    celer_model_get_info(cm, &info);
    printf("model %s (%s, %s, %d layers), %d threads, %d steps per arm (%d warmup), %s fill\n\n", dir, info.model_type,
           info.format, info.n_layers, info.threads, steps, warm, real ? "real prefill" : "random-row");
    printf("| context | arm | ms/step (median) | p10 | p90 | copied bytes/step (median) | max | cache bytes held | greedy identical |\n");
    printf("|---:|---|---:|---:|---:|---:|---:|---:|---|\n");
    int status = 0;
    for (const char *c = ctxs; *c;) {
        int C = atoi(c);
        while (*c && *c != ',') c++;
        if (*c == ',') c++;
        int ctx = C + steps + 8 + 4096; /* past any window: sliding layers get rotating caches */
        celer_session *p = celer_session_new(cm, ctx, 512);
        int32_t last = 1;
        int rc = 0;
        if (real) {
            int32_t *tok = malloc((size_t)C * sizeof *tok);
            for (int i = 0; i < C; i++) tok[i] = (int32_t)(1 + (uint64_t)i * 7919 % (uint64_t)(info.vocab_size - 1));
            rc = celer_session_eval(p, tok, C, NULL, 0);
            free(tok);
        } else {
            rc = fill_random(p, C - 1) != 0 || celer_session_eval(p, &last, 1, NULL, 0) != 0;
        }
        if (rc) {
            fprintf(stderr, "bench_kv: fill %d: %s\n", C, celer_last_error());
            return 1;
        }
        celer_snapshot *snap = celer_session_snapshot(p);
        celer_session_free(p);
        celer_session *arm[2];
        for (int a = 0; a < 2; a++) {
            setting_override(SET_CELER_KV_INPLACE_WRITE, a == 0 ? "1" : "0");
            arm[a] = celer_session_new(cm, ctx, 512);
            if (!arm[a] || celer_session_restore(arm[a], snap) != 0) {
                fprintf(stderr, "bench_kv: %s\n", celer_last_error());
                return 1;
            }
        }
        setting_override(SET_CELER_KV_INPLACE_WRITE, NULL);
        celer_snapshot_free(snap);
        double *ms[2], *cb[2];
        int same = 1;
        for (int a = 0; a < 2; a++) {
            ms[a] = calloc((size_t)steps, sizeof(double));
            cb[a] = calloc((size_t)steps, sizeof(double));
        }
        for (int st = 0; st < steps; st++) {
            for (int k = 0; k < 2; k++) {
                int a = (st + k) % 2;
                celer_kv_stats s0, s1;
                celer_session_kv_stats(arm[a], &s0);
                int32_t t = celer_session_argmax(arm[a]);
                double t0 = now();
                if (celer_session_eval(arm[a], &t, 1, NULL, 0) != 0) {
                    fprintf(stderr, "bench_kv: step %d: %s\n", st, celer_last_error());
                    return 1;
                }
                ms[a][st] = (now() - t0) * 1e3;
                celer_session_kv_stats(arm[a], &s1);
                cb[a][st] = (double)(s1.copied_bytes - s0.copied_bytes);
            }
            same &= memcmp(celer_session_logits(arm[0]), celer_session_logits(arm[1]), (size_t)info.vocab_size * sizeof(float)) == 0;
        }
        for (int a = 0; a < 2; a++) {
            int n = steps - warm;
            double *t = ms[a] + warm, *b = cb[a] + warm, mx = 0;
            for (int i = 0; i < n; i++) mx = b[i] > mx ? b[i] : mx;
            double med = median(t, n), p10 = t[n / 10], p90 = t[(n * 9) / 10 < n ? (n * 9) / 10 : n - 1];
            printf("| %d | %s | %.1f | %.1f | %.1f | %.0f | %.0f | %zu | %s |\n", C, a == 0 ? "in place" : "copying (=0)", med,
                   p10, p90, median(b, n), mx, held_bytes(arm[a]), same ? "yes" : "NO");
            free(ms[a]);
            free(cb[a]);
            celer_session_free(arm[a]);
        }
        fflush(stdout);
        if (!same) status = 1;
    }
    celer_model_free(cm);
    return status;
}
