/* cli/bench_batched.c: `celer bench -npl 1,8,32 -p 512 -n 128`, llama-batched-bench's
 * table through celer's one generation loop. For every (PP, TG, B) of the lists (PP
 * outermost, B innermost, as llama-batched-bench orders them), B sequences with
 * different random PP-token prompts run in lockstep through celer_gen: one step
 * prefills every prompt (as many forwards as --batch-size rows allow) and samples
 * each sequence's first token (T_PP: the time to every first token), then TG steps
 * each feed every sequence its last token and sample the next (T_TG), greedily, with
 * no stop token, so that every sequence ends with PP + TG tokens in its cache (N_KV
 * = B x (PP + TG), counted from the sessions) and TG tokens generated in T_TG
 * (counted from the loop's events). S_PP = B x PP / T_PP, S_TG = B x TG / T_TG, S =
 * N_KV / (T_PP + T_TG), as llama-batched-bench (its prompt-not-shared mode) reports
 * them. Each figure is beside its limit: a decode step reads the weights once and
 * every sequence's cache. */
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "celer.h"
#include "cli/args.h"
#include "cli/bench_batched.h"
#include "cli/default_model.h"
#include "cli/load.h"

enum { MAX_LIST = 64, MAX_SEQS = 4096, MAX_TOKENS = 1 << 20 };

/* A comma list of integers in [lo, hi] for flag lng (short spelling shrt), or def
 * when the flag is absent. 0, or 2 after a usage error naming the flag. */
static int int_list(const args *a, const char *lng, const char *shrt, long def, long lo, long hi, int *out, int *n) {
    const char *v = args_get(a, lng);
    if (!v) {
        out[0] = (int)def;
        *n = 1;
        return 0;
    }
    int k = 0;
    const char *p = v;
    for (;;) {
        while (*p == ' ') p++;
        char *end;
        long x = strtol(p, &end, 10);
        int bad = end == p || (*end && *end != ',' && *end != ' ');
        if (bad || x < lo || x > hi) {
            args_usage_error(a, "flag '%s' (%s) wants a comma list of integers in %ld..%ld, got '%s'", lng, shrt, lo, hi, v);
            return 2;
        }
        if (k == MAX_LIST) {
            args_usage_error(a, "flag '%s' (%s): more than %d values in '%s'", lng, shrt, MAX_LIST, v);
            return 2;
        }
        out[k++] = (int)x;
        p = end;
        while (*p == ' ') p++;
        if (!*p) break;
        p++; /* the comma; a trailing one leaves nothing, which is an error above */
    }
    *n = k;
    return 0;
}

typedef struct {
    int pp, tg, pl;
    double t_pp, t_tg;        /* medians over the repetitions, seconds */
    double *s_pp, *s_tg;      /* [reps] each repetition's times */
    long n_kv, n_gen;         /* counted: cache tokens at the end, tokens generated in T_TG (the last repetition) */
} brow;

typedef struct {
    celer_model *m;
    int vocab, batch;
    celer_session **s;        /* [pl] */
    int32_t *prompts;         /* [pl * pp] */
    celer_gen *g;
    int *count;               /* [pl] tokens each sequence reported */
    unsigned seed;
} brun;

static void run_free(brun *r, int pl) {
    for (int i = 0; r->s && i < pl; i++) celer_session_free(r->s[i]);
    free(r->s);
    free(r->prompts);
    free(r->count);
    celer_gen_free(r->g);
    r->s = NULL, r->prompts = NULL, r->count = NULL, r->g = NULL;
}

/* Sessions for pl sequences of pp + tg tokens. Every batched forward uses the scratch
 * of the first session in it, and in lockstep that is always sequence 0's: it gets
 * room for the largest step (every prompt, up to --batch-size rows, or one row per
 * sequence); the others only for their own prompt chunks. */
static int run_new(brun *r, int pp, int tg, int pl) {
    r->s = calloc((size_t)pl, sizeof *r->s);
    r->prompts = malloc((size_t)pl * (size_t)pp * sizeof *r->prompts);
    r->count = calloc((size_t)pl, sizeof *r->count);
    if (!r->s || !r->prompts || !r->count) return -1;
    int own = pp < r->batch ? pp : r->batch;
    long all = (long)pl * pp < r->batch ? (long)pl * pp : r->batch;
    int first = (int)(all > pl ? all : pl);
    for (int i = 0; i < pl; i++) {
        int rows = i == 0 ? first : own, ctx = pp + tg;
        /* a session's rows per forward are capped at its context */
        if (!(r->s[i] = celer_session_new(r->m, ctx > rows ? ctx : rows, rows))) return -1;
    }
    return 0;
}

/* One timed run: pl sequences of pp prompt tokens, each generating tg + 1 tokens
 * (the first from the prefill's logits, then tg from as many decode forwards). */
static int run_once(brun *r, int pp, int tg, int pl, double *t_pp, double *t_tg, long *n_kv, long *n_gen) {
    celer_gen_free(r->g);
    if (!(r->g = celer_gen_new(r->m, 0))) return -1; /* no budget: every prompt in the first step */
    for (int i = 0; i < pl; i++) {
        celer_session_rewind(r->s[i], 0);
        r->count[i] = 0;
        int32_t *p = r->prompts + (size_t)i * pp;
        for (int k = 0; k < pp; k++) p[k] = (int32_t)(rand_r(&r->seed) % (unsigned)r->vocab);
        celer_gen_seq q = {.session = r->s[i], .prompt = p, .n_prompt = pp, .max_tokens = tg + 1, .stop_token = -1};
        if (celer_gen_add(r->g, &q) != i) return -1;
    }
    int firsts = 0;
    long after = 0;
    double t0 = bench_now(), t1 = -1;
    for (;;) {
        const celer_gen_event *ev;
        int n = celer_gen_step(r->g, &ev);
        if (n < 0) return -1;
        if (n == 0) break;
        for (int k = 0; k < n; k++) {
            const celer_gen_event *e = &ev[k];
            if (e->finish == CELER_FINISH_ERROR) {
                fprintf(stderr, "celer bench: error: sequence %d: %s\n", e->seq, e->error);
                return -1;
            }
            if (e->token >= 0 && r->count[e->seq]++ == 0) firsts++;
            else if (e->token >= 0) after++;
            if (e->finish && e->finish != CELER_FINISH_LENGTH) {
                fprintf(stderr, "celer bench: error: sequence %d ended early (%s) after %d tokens\n", e->seq,
                        celer_finish_name(e->finish), r->count[e->seq]);
                return -1;
            }
        }
        if (t1 < 0 && firsts == pl) t1 = bench_now();
    }
    double t2 = bench_now();
    if (t1 < 0) return -1;
    *t_pp = t1 - t0;
    *t_tg = t2 - t1;
    *n_gen = after;
    *n_kv = 0;
    for (int i = 0; i < pl; i++) *n_kv += celer_session_pos(r->s[i]);
    return 0;
}

static int cmp_double(const void *a, const void *b) {
    double x = *(const double *)a, y = *(const double *)b;
    return (x > y) - (x < y);
}

static double median(const double *v, int n) {
    double *c = malloc((size_t)n * sizeof *c);
    if (!c) return v[0];
    memcpy(c, v, (size_t)n * sizeof *c);
    qsort(c, (size_t)n, sizeof *c, cmp_double);
    double m = n % 2 ? c[n / 2] : (c[n / 2 - 1] + c[n / 2]) / 2;
    free(c);
    return m;
}

/* Bytes one decode step of row b reads: the weights once, plus every sequence's
 * cache (its mean over the TG steps). */
static double step_bytes(const celer_model *m, const celer_model_info *in, const brow *b) {
    return (double)in->weight_bytes + (double)b->pl * bench_mean_kv_bytes(m, b->pp, b->tg);
}

int bench_batched(const args *a, const char *dir) {
    if (args_get(a, "--n-depth")) {
        args_usage_error(a, "flag '--n-depth' (-d) is not used with -npl: each sequence starts from an empty cache");
        return 2;
    }
    const char *fmt = args_get(a, "--output");
    int pls[MAX_LIST], pps[MAX_LIST], tgs[MAX_LIST], n_pl, n_pp, n_tg;
    long reps, threads, ctx_flag, batch;
    if (int_list(a, "--n-parallel", "-npl", 1, 1, MAX_SEQS, pls, &n_pl) ||
        int_list(a, "--n-prompt", "-p", 512, 1, MAX_TOKENS, pps, &n_pp) ||
        int_list(a, "--n-gen", "-n", 128, 1, MAX_TOKENS, tgs, &n_tg) ||
        args_int(a, "--repetitions", 1, 1, 1000, &reps) || args_int(a, "--threads", 0, 1, 1024, &threads) ||
        args_int(a, "--ctx-size", 0, 1, 1L << 30, &ctx_flag) || args_int(a, "--batch-size", 512, 1, 1 << 20, &batch))
        return 2;
    if (!fmt) fmt = "md";
    if (strcmp(fmt, "md") != 0 && strcmp(fmt, "json") != 0) {
        args_usage_error(a, "-o wants md or json, got '%s'", fmt);
        return 2;
    }
    int tty = cli_stderr_is_tty();
    celer_model *m = cli_model_open("bench", dir, (int)threads, 0);
    if (!m) {
        cli_error("bench", "%s", celer_last_error());
        return 1;
    }
    celer_model_info in;
    celer_model_get_info(m, &in);
    long n_kv_max = ctx_flag ? ctx_flag : in.max_context;
    /* every combination must fit: one sequence in the model's context, all of them in -c */
    for (int i = 0; i < n_pp; i++)
        for (int j = 0; j < n_tg; j++) {
            if ((long)pps[i] + tgs[j] > in.max_context) {
                args_usage_error(a, "flags '--n-prompt' (-p) and '--n-gen' (-n): a sequence of %d + %d tokens exceeds the "
                                 "model's context of %d tokens", pps[i], tgs[j], in.max_context);
                celer_model_free(m);
                return 2;
            }
            for (int k = 0; k < n_pl; k++)
                if ((long)pls[k] * (pps[i] + tgs[j]) > n_kv_max) {
                    args_usage_error(a, "flag '--n-parallel' (-npl): %d sequences of %d + %d tokens need N_KV = %ld cache "
                                     "tokens, over the %ld of %s (raise -c)", pls[k], pps[i], tgs[j],
                                     (long)pls[k] * (pps[i] + tgs[j]), n_kv_max,
                                     ctx_flag ? "-c" : "the model's context (the default of -c)");
                    celer_model_free(m);
                    return 2;
                }
        }
    int gpu = strcmp(in.backend, "CPU") != 0, status = 0, nr = n_pp * n_tg * n_pl;
    if (tty) fprintf(stderr, "bench: measuring %s bandwidth\n", gpu ? "device copy" : "read");
    double bw = celer_model_bandwidth(m);
    brow *rows = calloc((size_t)nr, sizeof *rows);
    brun r = {.m = m, .vocab = in.vocab_size, .batch = (int)batch, .seed = 42};
    if (!rows) {
        cli_error("bench", "out of memory");
        celer_model_free(m);
        return 1;
    }
    for (int i = 0, ri = 0; i < n_pp && status == 0; i++)
        for (int j = 0; j < n_tg && status == 0; j++)
            for (int k = 0; k < n_pl && status == 0; k++, ri++) {
                brow *b = &rows[ri];
                *b = (brow){.pp = pps[i], .tg = tgs[j], .pl = pls[k]};
                b->s_pp = calloc((size_t)reps, sizeof *b->s_pp);
                b->s_tg = calloc((size_t)reps, sizeof *b->s_tg);
                double tp, tt;
                long nkv, ngen;
                /* warm-up at this batch size (a short generation: first-use costs, a
                 * device's graphs for this many rows), then the timed runs. On a GPU
                 * the warm-up's prompts are full length: a product picks its kernel
                 * by row count (qgemm.cu), so short prompts would leave the timed
                 * prompt's path and its work buffers cold (cheap there; on the CPU a
                 * full prompt per batch size would cost seconds) */
                const int warm_pp = gpu || b->pp < 8 ? b->pp : 8;
                status = !b->s_pp || !b->s_tg || run_new(&r, b->pp, b->tg, b->pl) != 0 ||
                         run_once(&r, warm_pp, b->tg < 2 ? b->tg : 2, b->pl, &tp, &tt, &nkv, &ngen) != 0;
                for (int rep = 0; rep < reps && status == 0; rep++) {
                    if (tty) fprintf(stderr, "\rbench: pp%d tg%d B%d run %d/%ld ", b->pp, b->tg, b->pl, rep + 1, reps);
                    status = run_once(&r, b->pp, b->tg, b->pl, &b->s_pp[rep], &b->s_tg[rep], &b->n_kv, &b->n_gen) != 0;
                }
                run_free(&r, b->pl);
                if (status) {
                    const char *msg = celer_last_error();
                    cli_error("bench", "pp%d tg%d B%d: %s", b->pp, b->tg, b->pl, msg[0] ? msg : "out of memory");
                    break;
                }
                b->t_pp = median(b->s_pp, (int)reps);
                b->t_tg = median(b->s_tg, (int)reps);
            }
    if (tty) fprintf(stderr, "\r%40s\r", "");
    if (status == 0) {
        char label[96];
        bench_model_label(&in, label, sizeof label);
        const char *what = gpu ? "copy" : "read";
        if (strcmp(fmt, "md") == 0) {
            printf("model: %s, %.2f GiB, %.2f B params, backend %s, %d threads; n_kv_max = %ld, n_batch = %ld, "
                   "repetitions %ld (median)\n\n",
                   label, (double)in.weight_bytes / (1024.0 * 1024 * 1024), (double)in.n_params / 1e9, in.backend,
                   in.threads, n_kv_max, batch, reps);
            printf("|%6s | %6s | %4s | %6s | %8s | %8s | %8s | %8s | %8s | %8s |\n", "PP", "TG", "B", "N_KV", "T_PP s",
                   "S_PP t/s", "T_TG s", "S_TG t/s", "T s", "S t/s");
            printf("|%6s-|-%6s-|-%4s-|-%6s-|-%8s-|-%8s-|-%8s-|-%8s-|-%8s-|-%8s-|\n", "------", "------", "----", "------",
                   "--------", "--------", "--------", "--------", "--------", "--------");
            for (int i = 0; i < nr; i++) {
                const brow *b = &rows[i];
                double t = b->t_pp + b->t_tg;
                printf("|%6d | %6d | %4d | %6ld | %8.3f | %8.2f | %8.3f | %8.2f | %8.3f | %8.2f |\n", b->pp, b->tg, b->pl,
                       b->n_kv, b->t_pp, (double)b->pl * b->pp / b->t_pp, b->t_tg, (double)b->n_gen / b->t_tg, t,
                       (double)b->n_kv / t);
            }
            printf("\n%s bandwidth: %.1f GB/s (%s, measured now)\n", what, bw, gpu ? in.backend : "this run's threads");
            for (int i = 0; i < nr; i++) {
                const brow *b = &rows[i];
                double bytes = step_bytes(m, &in, b), gbs = bytes * b->tg / b->t_tg / 1e9;
                printf("pp%d tg%d B%d: %.3f GB read per decode step (weights once + %d cache%s) -> %.1f GB/s = %.0f%% of "
                       "the %s bandwidth\n", b->pp, b->tg, b->pl, bytes / 1e9, b->pl, b->pl == 1 ? "" : "s", gbs, 100 * gbs / bw, what);
            }
        } else {
            printf("[\n");
            for (int i = 0; i < nr; i++) {
                const brow *b = &rows[i];
                double t = b->t_pp + b->t_tg, bytes = step_bytes(m, &in, b);
                printf("  {\"model\": \"%s\", \"model_type\": \"%s\", \"format\": \"%s\", \"size_bytes\": %llu, "
                       "\"n_params\": %lld, \"backend\": \"%s\", \"n_threads\": %d, \"n_kv_max\": %ld, \"n_batch\": %ld, "
                       "\"pp\": %d, \"tg\": %d, \"pl\": %d, \"n_kv\": %ld, \"n_gen\": %ld, \"t_pp\": %.9f, "
                       "\"speed_pp\": %.4f, \"t_tg\": %.9f, \"speed_tg\": %.4f, \"t\": %.9f, \"speed\": %.4f, "
                       "\"samples_t_pp\": [",
                       label, in.model_type, in.format, (unsigned long long)in.weight_bytes, (long long)in.n_params,
                       in.backend, in.threads, n_kv_max, batch, b->pp, b->tg, b->pl, b->n_kv, b->n_gen, b->t_pp,
                       (double)b->pl * b->pp / b->t_pp, b->t_tg, (double)b->n_gen / b->t_tg, t, (double)b->n_kv / t);
                for (int k = 0; k < reps; k++) printf("%s%.9f", k ? ", " : "", b->s_pp[k]);
                printf("], \"samples_t_tg\": [");
                for (int k = 0; k < reps; k++) printf("%s%.9f", k ? ", " : "", b->s_tg[k]);
                printf("], \"read_bandwidth_gbs\": %.3f, \"bytes_per_step\": %.0f, \"gbs\": %.3f, "
                       "\"bandwidth_ratio\": %.4f}%s\n", bw, bytes, bytes * b->tg / b->t_tg / 1e9,
                       bytes * b->tg / b->t_tg / 1e9 / bw, i + 1 < nr ? "," : "");
            }
            printf("]\n");
        }
    }
    for (int i = 0; i < nr; i++) free(rows[i].s_pp), free(rows[i].s_tg);
    free(rows);
    celer_model_free(m);
    return status;
}
