/* bench/bench_batch.c: where a batched decode step's time goes on the CPU. B
 * sequences of a checkpoint (e.g. `celer synth --shape qwen3-0.6b --q4`) are prefilled
 * with P random tokens each, then N steps of the generation loop (celer_gen, greedy,
 * every sequence in lockstep) run while every backend op is timed through a wrapper
 * of the op table: the layers' matrix products, the LM head's, attention, the other
 * arithmetic ops, and what lies outside the ops (the loop, the batch bookkeeping, the
 * logits copies, host sampling). Sampling alone is timed apart, on the same logits.
 *   bench_batch -m DIR [-t THREADS] [-b 1,2,4,8] [-p 32] [-n 16] [-c] [-x]
 * -x leaves the op table alone (only the step time and sampling are measured); -c times by the calling thread's CPU time: with -t 1 the figures stay meaningful on
 * a loaded machine. Prints one row per B: ms per step by part, and the aggregate
 * tokens/s (B x steps / time) against B = 1. docs/benchmarks/cpu-batched.md. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "celer.h"
#include "engine/engine.h"

static clockid_t clk = CLOCK_MONOTONIC;
static double now(void) {
    struct timespec ts;
    clock_gettime(clk, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

enum { P_MM, P_HEAD, P_ATTN, P_OTHER, P_N };
static double t_part[P_N];
static backend_ops real, timed;
static const weight *head;

#define WRAP(name, mode)                                                            \
    static void w_##name(backend *b OP_ARGS_##name(OPA_PARAM)) {                    \
        double t0 = now();                                                          \
        real.name(b OP_ARGS_##name(ARG));                                           \
        t_part[which_##name] += now() - t0;                                           \
    }
#define ARG(k, t, n) , n
/* which part each op's time goes to */
#define which_matmul (w == head ? P_HEAD : P_MM)
#define which_attention P_ATTN
#define which_attention_batch P_ATTN
#define which_split_cols P_OTHER
#define which_gather_cols P_OTHER
#define which_embed_range P_OTHER
#define which_all_reduce P_OTHER
#define which_rmsnorm P_OTHER
#define which_add_rmsnorm P_OTHER
#define which_qk_norm_rope P_OTHER
#define which_rope P_OTHER
#define which_glu P_OTHER
#define which_scale P_OTHER
#define which_softcap P_OTHER
#define which_moe_route P_OTHER
#define which_moe P_OTHER
#define which_add P_OTHER
#define which_embed P_OTHER
#define which_put_rows P_OTHER
BACKEND_OPS(WRAP)

static int parse_list(const char *s, int *v, int cap) {
    int n = 0;
    for (char *e; *s && n < cap; s = *e ? e + 1 : e) {
        v[n] = (int)strtol(s, &e, 10);
        if (e == s || v[n] <= 0) return -1;
        n++;
    }
    return n;
}

int main(int argc, char **argv) {
    const char *dir = NULL;
    int threads = 2, P = 32, N = 16, Bs[16] = {1, 2, 4, 8}, nB = 4, wrap = 1;
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "-m") && i + 1 < argc) dir = argv[++i];
        else if (!strcmp(argv[i], "-t") && i + 1 < argc) threads = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-p") && i + 1 < argc) P = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-n") && i + 1 < argc) N = atoi(argv[++i]);
        else if (!strcmp(argv[i], "-b") && i + 1 < argc) nB = parse_list(argv[++i], Bs, 16);
        else if (!strcmp(argv[i], "-c")) clk = CLOCK_THREAD_CPUTIME_ID;
        else if (!strcmp(argv[i], "-x")) wrap = 0;
        else nB = -1;
    }
    if (!dir || nB <= 0 || P <= 0 || N <= 0) {
        fprintf(stderr, "usage: bench_batch -m DIR [-t THREADS] [-b 1,2,4,8] [-p 32] [-n 16] [-c] [-x]\n");
        return 2;
    }
    celer_model *cm = celer_model_open_on(dir, threads, "cpu");
    if (!cm) { fprintf(stderr, "bench_batch: %s\n", celer_last_error()); return 1; }
    celer_model_info in;
    celer_model_get_info(cm, &in);
    backend *be = cm->m->be;
    real = *be->ops;
    timed = real;
#define SET(name, mode) timed.name = w_##name;
    BACKEND_OPS(SET)
    if (wrap) be->ops = &timed; /* -x: the plain table (the step time without the timers' own cost) */
    head = &cm->m->lm_head;
    printf("%s, %s, %d threads, %s time; P=%d prompt tokens, N=%d decode steps per sequence\n", in.model_type, in.format,
           in.threads, clk == CLOCK_MONOTONIC ? "wall" : "thread CPU", P, N);
    printf("%4s %9s | %8s %8s %8s %8s %8s | %8s %9s %7s\n", "B", "ms/step", "matmul", "lm_head", "attn", "other",
           "outside", "sample", "tok/s", "x B=1");
    double base = 0;
    for (int bi = 0; bi < nB; bi++) {
        const int B = Bs[bi];
        celer_session **s = calloc((size_t)B, sizeof *s);
        int32_t *prompt = malloc((size_t)B * P * sizeof *prompt);
        unsigned seed = 7;
        for (int i = 0; i < B; i++) {
            int rows = i == 0 ? (B * P < 512 ? (B * P > B ? B * P : B) : 512) : P;
            if (!(s[i] = celer_session_new(cm, P + N + 8 > rows ? P + N + 8 : rows, rows))) {
                fprintf(stderr, "bench_batch: %s\n", celer_last_error());
                return 1;
            }
        }
        for (int i = 0; i < B * P; i++) prompt[i] = (int32_t)(rand_r(&seed) % (unsigned)in.vocab_size);
        celer_gen *g = celer_gen_new(cm, 0);
        for (int i = 0; i < B; i++) {
            celer_gen_seq q = {.session = s[i], .prompt = prompt + (size_t)i * P, .n_prompt = P, .max_tokens = N + 1,
                               .stop_token = -1};
            celer_gen_add(g, &q);
        }
        const celer_gen_event *ev;
        celer_gen_step(g, &ev); /* prefill + first tokens, untimed */
        memset(t_part, 0, sizeof t_part);
        double t0 = now();
        int steps = 0;
        while (celer_gen_step(g, &ev) > 0) steps++;
        double total = now() - t0;
        /* host sampling alone: B greedy picks from the last logits, as the loop does */
        celer_sampler_params sp;
        celer_sampler_params_default(&sp);
        celer_sampler *smp = celer_sampler_new(&sp, in.vocab_size);
        double ts0 = now();
        for (int r = 0; r < steps; r++)
            for (int i = 0; i < B; i++) celer_sampler_sample(smp, celer_session_logits(s[i]));
        double samp = (now() - ts0) / steps;
        celer_sampler_free(smp);
        double ms = 1e3 / steps, sum = t_part[P_MM] + t_part[P_HEAD] + t_part[P_ATTN] + t_part[P_OTHER];
        double tps = (double)B * steps / total;
        if (bi == 0) base = tps / B;
        printf("%4d %9.2f | %8.2f %8.2f %8.2f %8.2f %8.2f | %8.2f %9.2f %7.2f\n", B, total * ms, t_part[P_MM] * ms,
               t_part[P_HEAD] * ms, t_part[P_ATTN] * ms, t_part[P_OTHER] * ms, (total - sum) * ms, samp * 1e3, tps,
               base > 0 ? tps / base : 0);
        celer_gen_free(g);
        for (int i = 0; i < B; i++) celer_session_free(s[i]);
        free(s);
        free(prompt);
    }
    be->ops = &real;
    celer_model_free(cm);
    return 0;
}
