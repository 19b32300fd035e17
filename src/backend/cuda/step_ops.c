/* backend/cuda/step_ops.c: the CUDA backend's arithmetic ops and decode-step graphs.
 *
 * Every op is first described as a step_op (cuda_backend.h). Outside a step it runs
 * at once. Between step_begin and step_end (a decode step: a few tokens) ops are
 * only recorded: the op list plus a block of values that change every step (token
 * ids, positions, each cache's write slot and key count). At step_end the values go
 * to the device in one copy and the ops run as a CUDA graph when the same list was
 * captured before (the common case: only the values differ from the last step), are
 * captured when the list repeats the previous step's, and run one by one otherwise.
 * A graph's kernels read the values from device memory, so one capture serves every
 * step until the list changes: a cache buffer moves, attention needs another split
 * count (every 256 keys), a work buffer grows.
 *
 * Ops that need the host in the middle of a step (a download, a free, expert
 * routing, a product without a matrix-vector kernel) end the recording first: what
 * was recorded runs, and the rest of the step runs op by op. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/settings.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "base/err.h"

/* ---- running one op ------------------------------------------------------------- */

static int gemm_ok(const weight *w, int T) { return T <= CUK_MV_MAX_T && cuk_matvec_supports(w); }

/* Work space op e needs, grown before it is recorded or run (never while a graph is
 * being captured); 0 when it could not be had. */
static int reserve_work(cuda_backend *c, const step_op *e) {
    switch (e->op) {
    case SOP_MATMUL: {
        const weight *w = &e->u.mm.w;
        const int T = e->u.mm.T;
        if (gemm_ok(w, T)) return cuda_grow(c, &c->mv, cuk_matvec_work(T, w->cols), "matvec work") != NULL;
        const int64_t wrows = w->fmt == WF_BF16 ? 0 : (w->rows < 4096 ? w->rows : 4096);
        return cuda_grow(c, &c->xbf, cuk_gemm_xbf_elems(T, w->cols) * 2, "gemm staging") &&
               (!wrows || cuda_grow(c, &c->wbf, cuk_gemm_wbf_elems(wrows, w->cols) * 2, "gemm staging"));
    }
    case SOP_SAMPLE: return cuda_grow(c, &c->smp, cuk_sample_work(e->u.smp.V), "sampler work") != NULL;
    case SOP_ATTN:
        return cuda_grow(c, &c->att,
                         cuk_attention_work(e->u.attn.T, e->u.attn.p.n_heads, e->u.attn.p.head_dim, e->u.attn.kv.n) *
                             sizeof(float),
                         "attention work") != NULL;
    default: return 1;
    }
}

static void run_op_now(cuda_backend *c, const step_op *e, const char *vals);

/* Enqueues e; vals is the device copy of its values (the value block + e->dyn).
 * Under CELER_PROFILE=1 each op is timed alone with events (slow, for profiles). */
static void run_op(cuda_backend *c, const step_op *e, const char *vals) {
    if (!c->profile) {
        run_op_now(c, e, vals);
        return;
    }
    cudaEventRecord(c->prof_ev[0], c->stream);
    run_op_now(c, e, vals);
    cudaEventRecord(c->prof_ev[1], c->stream);
    float ms = 0;
    if (cudaEventSynchronize(c->prof_ev[1]) != cudaSuccess || cudaEventElapsedTime(&ms, c->prof_ev[0], c->prof_ev[1]) != cudaSuccess)
        return;
    int k = e->op;
    if (k == SOP_MATMUL && gemm_ok(&e->u.mm.w, e->u.mm.T)) {
        k = SOP_KINDS; /* matrix-vector products apart from GEMMs, with their bytes */
        c->prof_bytes[k] += (double)e->u.mm.w.nbytes;
    }
    c->prof_ms[k] += ms;
    c->prof_n[k]++;
}

void cuda_profile_print(const cuda_backend *c) {
    static const char *names[SOP_KINDS + 1] = {"gemm (prefill products)", "rmsnorm", "rope", "attention", "glu", "scale",
                                               "softcap", "add", "embed", "copy", "upload", "put_rows (KV write)", "sample",
                                               "add_rmsnorm", "qk_norm_rope", "matvec (decode products)"};
    const double nf = c->n_forwards > 0 ? (double)c->n_forwards : 1;
    double total = 0;
    for (int k = 0; k <= SOP_KINDS; k++) total += c->prof_ms[k];
    fprintf(stderr, "cuda profile: %ld forwards, %.3f ms of kernel time per forward (each op timed alone)\n", c->n_forwards,
            total / nf);
    for (int k = 0; k <= SOP_KINDS; k++) {
        if (!c->prof_n[k]) continue;
        fprintf(stderr, "  %-26s %7.1f calls %9.1f us %5.1f%%", names[k], c->prof_n[k] / nf, 1e3 * c->prof_ms[k] / nf,
                100.0 * c->prof_ms[k] / (total > 0 ? total : 1));
        if (c->prof_bytes[k] > 0) fprintf(stderr, "  %7.0f GB/s", c->prof_bytes[k] / (c->prof_ms[k] * 1e-3) / 1e9);
        fprintf(stderr, "\n");
    }
}

static void run_op_now(cuda_backend *c, const step_op *e, const char *vals) {
    cudaStream_t st = c->stream;
    switch (e->op) {
    case SOP_MATMUL: {
        const weight *w = &e->u.mm.w;
        const int T = e->u.mm.T;
        if (gemm_ok(w, T)) {
            RUN(cuk_matvec(w, e->u.mm.x, e->u.mm.y, T, c->mv.p, st));
        } else {
            const int64_t wrows = w->fmt == WF_BF16 ? 0 : (w->rows < 4096 ? w->rows : 4096);
            RUN(cuk_gemm(c->blas, w, e->u.mm.x, e->u.mm.y, T, c->xbf.p, wrows ? c->wbf.p : NULL, wrows, st));
        }
        break;
    }
    case SOP_RMSNORM:
        RUN(cuk_rmsnorm(e->u.norm.x, e->u.norm.w, e->u.norm.y, e->u.norm.T, e->u.norm.n, e->u.norm.eps, e->u.norm.plus_one, st));
        break;
    case SOP_ROPE:
        RUN(cuk_rope(e->u.rope.x, e->u.rope.T, e->u.rope.n_heads, e->u.rope.head_dim, e->u.rope.pos, e->u.rope.inv_freq,
                     e->u.rope.dim, e->u.rope.factor, st));
        break;
    case SOP_ATTN:
        RUN(cuk_attention(e->u.attn.q, e->u.attn.qpos, e->u.attn.T, &e->u.attn.kv, e->dyn >= 0 ? (const int32_t *)vals : NULL,
                          &e->u.attn.p, e->u.attn.out, c->att.p, st));
        break;
    case SOP_ADD_RMSNORM:
        RUN(cuk_add_rmsnorm(e->u.addnorm.x, e->u.addnorm.d, e->u.addnorm.dw, e->u.addnorm.w, e->u.addnorm.y, e->u.addnorm.T,
                            e->u.addnorm.n, e->u.addnorm.eps, e->u.addnorm.plus_one, st));
        break;
    case SOP_QK_NORM_ROPE:
        RUN(cuk_qk_norm_rope(e->u.qk.q, e->u.qk.k, e->u.qk.T, e->u.qk.n_heads, e->u.qk.n_kv, e->u.qk.head_dim, e->u.qk.norm,
                             e->u.qk.qw, e->u.qk.kw, e->u.qk.eps, e->u.qk.plus_one, e->u.qk.pos, e->u.qk.inv_freq,
                             e->u.qk.dim, e->u.qk.factor, st));
        break;
    case SOP_GLU: RUN(cuk_glu(e->u.glu.g, e->u.glu.u, e->u.glu.n, e->u.glu.act, st)); break;
    case SOP_SCALE: RUN(cuk_scale(e->u.scale.x, e->u.scale.n, e->u.scale.s, st)); break;
    case SOP_SOFTCAP: RUN(cuk_softcap(e->u.scale.x, e->u.scale.n, e->u.scale.s, st)); break;
    case SOP_ADD: RUN(cuk_add(e->u.add.y, e->u.add.x, e->u.add.n, st)); break;
    case SOP_EMBED: RUN(cuk_embed(&e->u.embed.w, e->u.embed.tok, e->u.embed.T, e->u.embed.scale, e->u.embed.x, st)); break;
    case SOP_COPY:
    case SOP_UPLOAD:
        c->n_calls++;
        cuda_ok(c, cudaMemcpyAsync(e->u.copy.dst, e->op == SOP_UPLOAD ? vals : e->u.copy.src, e->u.copy.n,
                                   cudaMemcpyDeviceToDevice, st),
                "copy");
        break;
    case SOP_SAMPLE:
        RUN(cuk_sample(e->u.smp.logits, e->u.smp.V, &e->u.smp.p, (const double *)vals, e->u.smp.tok, e->u.smp.host,
                       c->smp.p, st));
        break;
    case SOP_PUT_ROWS: {
        /* values: the slot (recorded steps only), then the n positions */
        const int32_t *v = (const int32_t *)vals;
        const int rec = e->u.put.slot < 0;
        RUN(cuk_put_rows(e->u.put.kd, e->u.put.vd, e->u.put.pd, e->u.put.row, e->u.put.slot, rec ? v : NULL, e->u.put.k,
                         e->u.put.v, rec ? v + 1 : v, e->u.put.n, st));
        break;
    }
    }
}

/* ---- recording ------------------------------------------------------------------- */

/* Room for `bytes` more values (8-byte aligned); NULL when the block is full. */
static char *value_space(cuda_backend *c, size_t bytes, int *off) {
    size_t at = (c->n_values + 7) & ~(size_t)7;
    if (at + bytes > STEP_VALUES) return NULL;
    *off = (int)at;
    c->n_values = at + bytes;
    return c->values + at;
}

/* Where op e's values are on the device. */
static const char *values_of(const cuda_backend *c, const step_op *e) {
    return (const char *)c->dvalues + (e->dyn >= 0 ? e->dyn : 0);
}

/* Uploads the values and runs ops [0, n) one by one. */
static void run_list(cuda_backend *c, const step_op *ops, int n) {
    if (c->n_values) cuda_stage_upload(c, c->dvalues, c->values, c->n_values);
    cuk_set_pdl(1);
    for (int i = 0; i < n && !c->failed; i++) run_op(c, &ops[i], values_of(c, &ops[i]));
    cuk_set_pdl(0);
}

void cuda_step_stop(cuda_backend *c) {
    if (!c->recording) return;
    c->recording = 0;
    run_list(c, c->tape, c->n_tape);
    c->n_tape = 0;
    c->n_values = 0;
}

/* Records e (with `nv` bytes of values from vals, or none) or runs it now. */
static void submit(cuda_backend *c, step_op *e, const void *vals, size_t nv) {
    if (c->failed) return;
    if (!reserve_work(c, e)) return;
    if (c->recording) {
        int off = -1;
        char *dst = nv ? value_space(c, nv, &off) : NULL;
        if (nv && !dst) {
            cuda_step_stop(c); /* more values than a step holds: the rest runs op by op */
        } else {
            if (c->n_tape == c->cap_tape) {
                int cap = c->cap_tape ? 2 * c->cap_tape : 512;
                step_op *t = realloc(c->tape, (size_t)cap * sizeof *t);
                if (!t) {
                    cuda_step_stop(c);
                    goto now;
                }
                c->tape = t;
                c->cap_tape = cap;
            }
            if (nv) memcpy(dst, vals, nv);
            e->dyn = off;
            c->tape[c->n_tape++] = *e;
            return;
        }
    }
now:
    /* at once: values (if any) through the value block, which stream order keeps
     * from being overwritten before this op has read them */
    e->dyn = -1;
    if (nv) {
        if (nv > STEP_VALUES) {
            err_set("cuda: %zu bytes of op values exceed the %zu-byte block", nv, STEP_VALUES);
            cuda_fail(c);
            return;
        }
        cuda_stage_upload(c, c->dvalues, vals, nv);
        e->dyn = 0;
    }
    run_op(c, e, c->dvalues);
}

/* A zeroed op (so recorded steps compare byte for byte). */
static step_op op_new(int kind) {
    step_op e;
    memset(&e, 0, sizeof e);
    e.op = kind;
    e.dyn = -1;
    return e;
}

int cuda_step_begin(backend *b, int T) {
    cuda_backend *c = cu(b);
    if (c->graphs_off < 0) /* first call: CELER_GRAPH=0 turns graphs off for A/B runs */
        c->graphs_off = !setting_flag(SET_CELER_GRAPH);
    if (c->graphs_off || c->profile || c->failed || T > CUK_MV_MAX_T || !c->dvalues) return 0;
    c->recording = 1;
    c->n_tape = 0;
    c->n_values = 0;
    return 1;
}

static int same_ops(const step_op *a, int na, const step_op *b, int nb) {
    return na == nb && memcmp(a, b, (size_t)na * sizeof *a) == 0;
}

static void graph_drop(step_graph *g) {
    if (g->exec) cudaGraphExecDestroy(g->exec);
    free(g->ops);
    memset(g, 0, sizeof *g);
}

/* Captures the tape into a graph in the least recently used slot; NULL (and graphs
 * off, with a note under CELER_STATS) if capture is refused. */
static step_graph *capture(cuda_backend *c) {
    step_graph *g = &c->graphs[0];
    for (int i = 1; i < STEP_GRAPHS; i++)
        if (c->graphs[i].used < g->used) g = &c->graphs[i];
    graph_drop(g);
    if (!(g->ops = malloc((size_t)c->n_tape * sizeof *g->ops))) return NULL;
    memcpy(g->ops, c->tape, (size_t)c->n_tape * sizeof *g->ops);
    g->n = c->n_tape;
    cudaGraph_t graph = NULL;
    cudaError_t e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed);
    if (e == cudaSuccess) {
        cuk_set_pdl(1);
        for (int i = 0; i < c->n_tape && !c->failed; i++)
            run_op(c, &c->tape[i], values_of(c, &c->tape[i]));
        cuk_set_pdl(0);
        e = cudaStreamEndCapture(c->stream, &graph);
    }
    if (e == cudaSuccess && !c->failed) e = cudaGraphInstantiate(&g->exec, graph, 0);
    if (graph) cudaGraphDestroy(graph);
    if (e != cudaSuccess || c->failed || !g->exec) {
        if (setting_flag(SET_CELER_STATS))
            fprintf(stderr, "cuda: step graphs off: capture failed (%s)\n", c->failed ? c->why : cudaGetErrorString(e));
        cudaGetLastError();
        c->failed = 0;
        c->graphs_off = 1;
        graph_drop(g);
        return NULL;
    }
    c->n_captures++;
    return g;
}

void cuda_step_end(backend *b) {
    cuda_backend *c = cu(b);
    if (!c->recording) return;
    c->recording = 0;
    if (c->failed || !c->n_tape) {
        c->n_tape = c->n_values = 0;
        return;
    }
    c->steps++;
    step_graph *g = NULL;
    for (int i = 0; i < STEP_GRAPHS && !g; i++)
        if (c->graphs[i].exec && same_ops(c->graphs[i].ops, c->graphs[i].n, c->tape, c->n_tape)) g = &c->graphs[i];
    if (!g && same_ops(c->last, c->n_last, c->tape, c->n_tape)) {
        if (c->n_values) cuda_stage_upload(c, c->dvalues, c->values, c->n_values);
        g = capture(c);
        if (!g) { /* run it op by op instead */
            run_list(c, c->tape, c->n_tape);
            c->n_tape = c->n_values = 0;
            return;
        }
    } else if (g && c->n_values) {
        cuda_stage_upload(c, c->dvalues, c->values, c->n_values);
    }
    if (g) {
        g->used = c->steps;
        c->n_replays++;
        cuda_ok(c, cudaGraphLaunch(g->exec, c->stream), "graph launch");
    } else {
        /* a new list: run it, and keep it to capture if the next step repeats it */
        run_list(c, c->tape, c->n_tape);
        step_op *t = c->last; /* the arrays swap: the old `last` is the next tape */
        const int tc = c->cap_last;
        c->last = c->tape;
        c->cap_last = c->cap_tape;
        c->n_last = c->n_tape;
        c->tape = t;
        c->cap_tape = tc;
    }
    c->n_tape = 0;
    c->n_values = 0;
}

/* Graphs hold work-buffer addresses: a buffer that moves makes them stale. */
void cuda_steps_forget(cuda_backend *c) {
    for (int i = 0; i < STEP_GRAPHS; i++) graph_drop(&c->graphs[i]);
    c->n_last = 0;
}

void cuda_steps_free(cuda_backend *c) {
    cuda_steps_forget(c);
    free(c->tape);
    free(c->last);
    free(c->values);
    cudaFree(c->dvalues);
}

/* ---- the ops ----------------------------------------------------------------------- */

void cuda_matmul(backend *b, const weight *w, const float *x, float *y, int T) {
    cuda_backend *c = cu(b);
    if (c->recording && !gemm_ok(w, T)) cuda_step_stop(c); /* cuBLAS stays out of graphs */
    step_op e = op_new(SOP_MATMUL);
    e.u.mm.w = *w;
    e.u.mm.x = x;
    e.u.mm.y = y;
    e.u.mm.T = T;
    submit(c, &e, NULL, 0);
}

void cuda_rmsnorm(backend *b, const float *x, const float *w, float *y, int T, int n, float eps, int plus_one) {
    step_op e = op_new(SOP_RMSNORM);
    e.u.norm.x = x;
    e.u.norm.w = w;
    e.u.norm.y = y;
    e.u.norm.T = T;
    e.u.norm.n = n;
    e.u.norm.plus_one = plus_one;
    e.u.norm.eps = eps;
    submit(cu(b), &e, NULL, 0);
}

void cuda_rope(backend *b, float *x, int T, int n_heads, int head_dim, const int32_t *pos, const rope_table *r) {
    step_op e = op_new(SOP_ROPE);
    e.u.rope.x = x;
    e.u.rope.pos = pos;
    e.u.rope.inv_freq = r->inv_freq;
    e.u.rope.T = T;
    e.u.rope.n_heads = n_heads;
    e.u.rope.head_dim = head_dim;
    e.u.rope.dim = r->dim;
    e.u.rope.factor = r->attn_factor;
    submit(cu(b), &e, NULL, 0);
}

void cuda_add_rmsnorm(backend *b, float *x, const float *d, const float *dw, const float *w, float *y, int T, int n,
                      float eps, int plus_one) {
    step_op e = op_new(SOP_ADD_RMSNORM);
    e.u.addnorm.x = x;
    e.u.addnorm.d = d;
    e.u.addnorm.dw = dw;
    e.u.addnorm.w = w;
    e.u.addnorm.y = y;
    e.u.addnorm.T = T;
    e.u.addnorm.n = n;
    e.u.addnorm.plus_one = plus_one;
    e.u.addnorm.eps = eps;
    submit(cu(b), &e, NULL, 0);
}

void cuda_qk_norm_rope(backend *b, float *q, float *k, int T, int n_heads, int n_kv, int head_dim, int norm,
                       const float *qw, const float *kw, float eps, int plus_one, const int32_t *pos, const rope_table *r) {
    step_op e = op_new(SOP_QK_NORM_ROPE);
    e.u.qk.q = q;
    e.u.qk.k = k;
    e.u.qk.qw = qw;
    e.u.qk.kw = kw;
    e.u.qk.pos = pos;
    e.u.qk.T = T;
    e.u.qk.n_heads = n_heads;
    e.u.qk.n_kv = n_kv;
    e.u.qk.head_dim = head_dim;
    e.u.qk.norm = norm;
    e.u.qk.plus_one = plus_one;
    e.u.qk.eps = eps;
    if (r) {
        e.u.qk.inv_freq = r->inv_freq;
        e.u.qk.dim = r->dim;
        e.u.qk.factor = r->attn_factor;
    }
    submit(cu(b), &e, NULL, 0);
}

void cuda_attention(backend *b, const float *q, const int32_t *qpos, int T, const attn_kv *kv, const attn_params *p,
                    float *out) {
    cuda_backend *c = cu(b);
    step_op e = op_new(SOP_ATTN);
    e.u.attn.q = q;
    e.u.attn.qpos = qpos;
    /* field by field: a caller's struct may carry uninitialized padding */
    e.u.attn.kv.k = kv->k;
    e.u.attn.kv.v = kv->v;
    e.u.attn.kv.pos = kv->pos;
    e.u.attn.kv.n = kv->n;
    e.u.attn.kv.row_stride = kv->row_stride;
    e.u.attn.p.n_heads = p->n_heads;
    e.u.attn.p.n_kv = p->n_kv;
    e.u.attn.p.head_dim = p->head_dim;
    e.u.attn.p.scale = p->scale;
    e.u.attn.p.window = p->window;
    e.u.attn.p.softcap = p->softcap;
    e.u.attn.p.sinks = p->sinks;
    e.u.attn.out = out;
    e.u.attn.T = T;
    if (!c->recording) {
        submit(c, &e, NULL, 0);
        return;
    }
    /* recorded: the key count is a value; the op keeps only a count with the same
     * split count, so the steps of one 256-key bucket record the same op */
    const int32_t n = kv->n;
    e.u.attn.kv.n = cuk_attention_bucket(n);
    submit(c, &e, &n, sizeof n);
}

void cuda_glu(backend *b, float *g, const float *u, long n, int act) {
    step_op e = op_new(SOP_GLU);
    e.u.glu.g = g;
    e.u.glu.u = u;
    e.u.glu.n = n;
    e.u.glu.act = act;
    submit(cu(b), &e, NULL, 0);
}

static void scale_op(backend *b, int kind, float *x, long n, float s) {
    step_op e = op_new(kind);
    e.u.scale.x = x;
    e.u.scale.n = n;
    e.u.scale.s = s;
    submit(cu(b), &e, NULL, 0);
}

void cuda_scale(backend *b, float *x, long n, float s) { scale_op(b, SOP_SCALE, x, n, s); }

void cuda_softcap(backend *b, float *x, long n, float cap) { scale_op(b, SOP_SOFTCAP, x, n, cap); }

void cuda_add(backend *b, float *y, const float *x, long n) {
    step_op e = op_new(SOP_ADD);
    e.u.add.y = y;
    e.u.add.x = x;
    e.u.add.n = n;
    submit(cu(b), &e, NULL, 0);
}

void cuda_embed(backend *b, const weight *w, const int32_t *tok, int T, float scale, float *x) {
    step_op e = op_new(SOP_EMBED);
    e.u.embed.w = *w;
    e.u.embed.tok = tok;
    e.u.embed.x = x;
    e.u.embed.T = T;
    e.u.embed.scale = scale;
    submit(cu(b), &e, NULL, 0);
}

void cuda_put_rows(backend *b, float *kd, float *vd, int32_t *pd, long row, int slot, const float *k, const float *v,
                   const int32_t *pos, int n) {
    cuda_backend *c = cu(b);
    step_op e = op_new(SOP_PUT_ROWS);
    e.u.put.kd = kd;
    e.u.put.vd = vd;
    e.u.put.pd = pd;
    e.u.put.row = row;
    e.u.put.n = n;
    e.u.put.k = k;
    e.u.put.v = v;
    if (!c->recording) {
        e.u.put.slot = slot;
        submit(c, &e, pos, (size_t)n * sizeof(int32_t));
        return;
    }
    /* recorded: the slot and the positions are values */
    int32_t vals[1 + CUK_MV_MAX_T];
    if (n > CUK_MV_MAX_T) {
        cuda_step_stop(c);
        e.u.put.slot = slot;
        submit(c, &e, pos, (size_t)n * sizeof(int32_t));
        return;
    }
    vals[0] = slot;
    memcpy(vals + 1, pos, (size_t)n * sizeof(int32_t));
    e.u.put.slot = -1;
    submit(c, &e, vals, (size_t)(n + 1) * sizeof(int32_t));
}

void cuda_step_copy(backend *b, void *dst, const void *src, size_t n) {
    step_op e = op_new(SOP_COPY);
    e.u.copy.dst = dst;
    e.u.copy.src = src;
    e.u.copy.n = n;
    submit(cu(b), &e, NULL, 0);
}

int cuda_step_upload(backend *b, void *dst, const void *host, size_t n) {
    cuda_backend *c = cu(b);
    if (!c->recording) return 0;
    if (n > 4096) {
        cuda_step_stop(c);
        return 0;
    }
    step_op e = op_new(SOP_UPLOAD);
    e.u.copy.dst = dst;
    e.u.copy.n = n;
    submit(c, &e, host, n);
    return 1;
}

int cuda_sample(backend *b, const float *logits, int V, const sample_params *p, double u, int32_t *tok, int slot) {
    cuda_backend *c = cu(b);
    step_op e = op_new(SOP_SAMPLE);
    e.u.smp.p.temperature = p->temperature;
    e.u.smp.p.top_k = p->top_k;
    e.u.smp.p.top_p = p->top_p;
    e.u.smp.p.min_p = p->min_p;
    if (slot < 0 || slot >= SAMPLE_SLOTS || !c->sampled || !cuk_sample_supported(&e.u.smp.p)) return -1;
    e.u.smp.logits = logits;
    e.u.smp.V = V;
    e.u.smp.tok = tok;
    e.u.smp.host = c->sampled_dev + slot;
    submit(c, &e, &u, sizeof u);
    cuda_ok(c, cudaEventRecord(c->sample_done[slot], c->stream), "sample");
    return 0;
}

int32_t cuda_sampled(backend *b, int slot) {
    cuda_backend *c = cu(b);
    cuda_wait_begin(c);
    if (!c->failed) cuda_ok(c, cudaEventSynchronize(c->sample_done[slot]), "sample");
    cuda_wait_end(c);
    if (c->failed) {
        c->failed = 0; /* reported here, once */
        return err_set("%s", c->why);
    }
    return ((volatile int32_t *)c->sampled)[slot];
}
