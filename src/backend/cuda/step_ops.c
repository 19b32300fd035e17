/* backend/cuda/step_ops.c: the CUDA backend's arithmetic ops and decode-step graphs.
 *
 * Every op is first described as a step_op (cuda_backend.h): the recorder of each op
 * of backend/ops_list.h is generated from the list (its arguments copied into the
 * record); KERNEL ops are launched from the record by generated code, and only the
 * CUSTOM ops (matmul, attention, put_rows) and the backend's own step ops (copy,
 * upload, sample) have hand-written cases here. Outside a step an op runs
 * at once. Between step_begin and step_end (a decode step: a few tokens) ops are
 * only recorded: the op list plus a block of values that change every step (token
 * ids, positions, each cache's write slot and key count). At step_end the values go
 * to the device in one copy and the ops run as a CUDA graph when the same list was
 * captured before (the common case: only the values differ from the last step), are
 * captured when the list repeats the previous step's, and run one by one otherwise.
 * A graph's kernels read the values from device memory, so one capture serves every
 * step until the list changes: attention needs another split
 * count (every 256 keys), a work buffer grows.
 *
 * Ops that need the host in the middle of a step (a download, a free, expert
 * routing, a product without a matrix-vector kernel) end the recording first: what
 * was recorded runs, and the rest of the step runs op by op. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/settings.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "base/err.h"

/* The records copy these structs byte for byte (ops_list.h, S arguments): the forward
 * builds them per step, so they must have no padding (attn_kv's is cleared in
 * custom_record). */
_Static_assert(sizeof(attn_params) == 6 * sizeof(int) + sizeof(const float *), "attn_params must have no padding");

/* ---- running one op ------------------------------------------------------------- */

/* 1 when a product of T rows runs on the matrix-vector kernels (else cuBLAS): up to
 * CUK_MV_BATCH_MAX rows (at most CUK_MV_MAX_T). Its default, 4, is measured: a decode
 * step of 8 llama3-8b rows ran at 704 tok/s on the matvec kernels and 1,202 through
 * cuBLAS (docs/benchmarks/cuda-batched.md); qwen3-0.6b the same either way. */
static int gemm_ok(const weight *w, int T) {
    static int max = -1;
    if (max < 0) {
        const long v = setting_int(SET_CUK_MV_BATCH_MAX);
        max = v >= 1 && v <= CUK_MV_MAX_T ? (int)v : CUK_MV_MAX_T;
    }
    return (T <= max || T == 1) && cuk_matvec_supports(w);
}

/* 1 when a product of T rows runs on the tensor-core decode kernel (skinny.cu): bf16
 * weights, CUK_SKINNY_MIN_T..CUK_SKINNY_MAX_T rows (CUK_SKINNY=0: never). It is tried
 * before the matrix-vector kernels, so the minimum decides which one small batches get. */
static int skinny_rows(int T) {
    static int on = -1, min = -1;
    if (on < 0) {
        on = setting_flag(SET_CUK_SKINNY);
        const long v = setting_int(SET_CUK_SKINNY_MIN_T);
        min = v >= 1 && v <= CUK_SKINNY_MAX_T ? (int)v : CUK_SKINNY_MAX_T + 1;
    }
    return on && T >= min && T <= CUK_SKINNY_MAX_T;
}

static int skinny_ok(const weight *w, int T) { return skinny_rows(T) && cuk_skinny_supports(w); }

/* Work space op e needs, grown before it is recorded or run (never while a graph is
 * being captured); 0 when it could not be had. */
static int reserve_work(cuda_backend *c, const step_op *e) {
    switch (e->op) {
    case SOP_matmul: {
        const weight *w = &e->u.matmul.w;
        const int T = e->u.matmul.T;
        if (PROF_READS(c) && !cuda_grow(c, &c->mv, 16, "read floor")) return 0; /* its sink */
        if (skinny_ok(w, T)) return cuda_grow(c, &c->xbf, cuk_gemm_xbf_elems(T, w->cols) * 2, "gemm staging") != NULL;
        if (gemm_ok(w, T)) return cuda_grow(c, &c->mv, cuk_matvec_work(T, w->cols), "matvec work") != NULL;
        if (cuk_qgemm_wanted(w, T, c->self->fast)) { /* the fused kernel stages the activations alone */
            const size_t part = cuk_qgemm_work(w, T, c->self->fast);
            return cuda_grow(c, &c->xbf, cuk_gemm_xbf_elems(T, w->cols) * 2, "gemm staging") &&
                   (!part || cuda_grow(c, &c->y2, part, "gemm staging"));
        }
        const int64_t wrows = cuk_gemm_wbf_rows(w);
        const size_t y2 = cuk_gemm_y2_elems(T, wrows ? wrows : w->rows) * sizeof(float);
        return cuda_grow(c, &c->xbf, cuk_gemm_xbf_elems(T, w->cols) * 2, "gemm staging") &&
               (!wrows || cuda_grow(c, &c->wbf, cuk_gemm_wbf_elems(wrows, w->cols) * 2, "gemm staging")) &&
               (!y2 || cuda_grow(c, &c->y2, y2, "gemm staging"));
    }
    case SOP_gather_cols: /* every rank's part, gathered before the columns move */
        return !c->nccl || cuda_grow(c, &c->gath,
                                     (size_t)c->self->tp_world * (size_t)e->u.gather_cols.T * (size_t)e->u.gather_cols.w *
                                         sizeof(float),
                                     "gather work") != NULL;
    case SOP_sample:
        return cuda_grow(c, &c->smp, cuk_sample_work(e->u.smp.V) * (size_t)(e->u.smp.rows > 0 ? e->u.smp.rows : 1),
                         "sampler work") != NULL;
    case SOP_attention_batch: {
        const op_attention_batch_args *a = &e->u.attention_batch;
        const size_t n = cuk_attention_batch_work(a->n, a->p.n_heads, a->p.head_dim, a->max_keys) * sizeof(float);
        return !n || cuda_grow(c, &c->att, n, "attention work") != NULL;
    }
    case SOP_attention:
        return cuda_grow(c, &c->att,
                         cuk_attention_work(e->u.attention.T, e->u.attention.p.n_heads, e->u.attention.p.head_dim,
                                            e->u.attention.kv.n) *
                             sizeof(float),
                         "attention work") != NULL;
    default: return 1;
    }
}

static void run_op_now(cuda_backend *c, const step_op *e, const step_op *next, const char *vals);

/* CELER_PROFILE: ms of GPU time for op e, summed by kind */
static void prof_add(cuda_backend *c, const step_op *e, float ms) {
    int k = e->op;
    if (k == SOP_matmul && (skinny_ok(&e->u.matmul.w, e->u.matmul.T) || gemm_ok(&e->u.matmul.w, e->u.matmul.T))) {
        k = SOP_KINDS; /* matrix-vector products apart from GEMMs, with their bytes */
        const weight *w = &e->u.matmul.w;
        c->prof_bytes[k] += (double)w->nbytes;
        int i = 0;
        while (i < c->n_prof_shapes && (c->prof_shape[i].rows != w->rows || c->prof_shape[i].cols != w->cols ||
                                        c->prof_shape[i].fmt != (int)w->fmt))
            i++;
        if (i == c->n_prof_shapes && i < PROF_SHAPES) {
            c->prof_shape[i].rows = w->rows;
            c->prof_shape[i].cols = w->cols;
            c->prof_shape[i].fmt = (int)w->fmt;
            c->n_prof_shapes++;
        }
        if (i < c->n_prof_shapes) {
            c->prof_shape[i].ms += ms;
            c->prof_shape[i].bytes += (double)w->nbytes;
            c->prof_shape[i].n++;
        }
    }
    c->prof_ms[k] += ms;
    c->prof_n[k]++;
}

/* Enqueues e; vals is the device copy of its values (the value block + e->dyn); next:
 * the op after it where the list is known (recorded steps), else NULL.
 * Under CELER_PROFILE=1 each op is timed alone with events (slow, for profiles). */
static void run_op(cuda_backend *c, const step_op *e, const step_op *next, const char *vals) {
    if (c->profile != 1) {
        const int tl = tl_begin(c, e->op);
        run_op_now(c, e, next, vals);
        if (tl) tl_end(c);
        return;
    }
    cudaEventRecord(c->prof_ev[0], c->stream);
    run_op_now(c, e, next, vals);
    cudaEventRecord(c->prof_ev[1], c->stream);
    float ms = 0;
    if (cudaEventSynchronize(c->prof_ev[1]) == cudaSuccess && cudaEventElapsedTime(&ms, c->prof_ev[0], c->prof_ev[1]) == cudaSuccess)
        prof_add(c, e, ms);
}

/* CELER_PROFILE=2: after a replay of g, each op's time between the event nodes around
 * it. The nodes end each kernel's programmatic overlap with the next, so a small op's
 * time includes its whole launch: shares of small ops are upper bounds. */
static void prof_graph(cuda_backend *c, const step_graph *g) {
    if (!g->ev || cudaEventSynchronize(g->ev[g->n]) != cudaSuccess) return;
    for (int i = 0; i < g->n; i++) {
        float ms = 0;
        if (c->profile == 7 && g->ops[i].op != SOP_matmul) continue; /* left out of the replay */
        if (cudaEventElapsedTime(&ms, g->ev[i], g->ev[i + 1]) == cudaSuccess) prof_add(c, &g->ops[i], ms);
    }
    c->prof_replays++;
}

/* Each op kind's name (profiles; CELER_PROFILE_KEEP) */
static const char *const op_names[TL_KINDS] = {
#define CUDA_OP_NAME(name) [SOP_##name] = #name,
#define CUDA_OP_NAME_IF(name, mode) OPS_IF_RECORDED(name, mode, CUDA_OP_NAME)
    BACKEND_OPS(CUDA_OP_NAME_IF)
#undef CUDA_OP_NAME_IF
#undef CUDA_OP_NAME
    [SOP_copy] = "copy",
    [SOP_upload] = "upload",
    [SOP_sample] = "sample",
    [SOP_put_batch] = "put_rows (batch)",
    [SOP_KINDS] = "matmul (matvec, decode)",
    [TL_GRAPH] = "graph replay",
    [TL_HOST_UPLOAD] = "upload (host to device)",
};

/* The op kind named `name` (CELER_PROFILE_KEEP), or -1. */
int cuda_op_kind(const char *name) {
    for (int k = 0; name && k < SOP_KINDS; k++)
        if (op_names[k] && strcmp(op_names[k], name) == 0) return k;
    return -1;
}

void cuda_profile_print(cuda_backend *c) {
    if (c->profile == 3) {
        tl_print(c, op_names);
        return;
    }
    if (c->profile >= 4) {
        static const char *const part[] = {"only the products", "all but the products", "a read of each product's weights",
                                           "a read of each product's weights, timed apart",
                                           "the products and an empty kernel for every other launch",
                                           "a read of each product's weights and an empty kernel for every other launch"};
        fprintf(stderr, "cuda profile: decode steps ran %s (CELER_PROFILE=%d); their outputs were not computed\n",
                part[c->profile - 4], c->profile);
        if (c->profile != 7) return;
    }
    const long nr = PROF_EVENTS(c) ? c->prof_replays : c->n_forwards;
    const double nf = nr > 0 ? (double)nr : 1;
    double total = 0;
    for (int k = 0; k <= SOP_KINDS; k++) total += c->prof_ms[k];
    fprintf(stderr, "cuda profile: %ld %s, %.3f ms of kernel time per %s\n", nr,
            PROF_EVENTS(c) ? "graph replays" : "forwards", total / nf,
            PROF_EVENTS(c) ? "replay (ops timed inside the graph, event nodes between them)" : "forward (each op timed alone)");
    for (int k = 0; k <= SOP_KINDS; k++) {
        if (!c->prof_n[k]) continue;
        fprintf(stderr, "  %-26s %7.1f calls %9.1f us %5.1f%%", op_names[k], c->prof_n[k] / nf, 1e3 * c->prof_ms[k] / nf,
                100.0 * c->prof_ms[k] / (total > 0 ? total : 1));
        if (c->prof_bytes[k] > 0) fprintf(stderr, "  %7.0f GB/s", c->prof_bytes[k] / (c->prof_ms[k] * 1e-3) / 1e9);
        fprintf(stderr, "\n");
    }
    /* the products by shape: where small matrices read below the large ones' rate */
    static const char *const fmts[] = {[WF_F32] = "f32", [WF_F16] = "f16", [WF_BF16] = "bf16", [WF_AFFINE] = "affine",
                                       [WF_MXFP4] = "mxfp4"};
    for (int i = 0; i < c->n_prof_shapes; i++) {
        const double ms = c->prof_shape[i].ms;
        const int f = c->prof_shape[i].fmt;
        fprintf(stderr, "    %6lld x %-6lld %-6s %6.1f calls %8.1f us %7.2f MB a call %7.0f GB/s\n",
                (long long)c->prof_shape[i].rows, (long long)c->prof_shape[i].cols,
                f >= 0 && f <= WF_MXFP4 ? fmts[f] : "?",
                c->prof_shape[i].n / nf, 1e3 * ms / nf, c->prof_shape[i].bytes / c->prof_shape[i].n / 1e6,
                c->prof_shape[i].bytes / (ms > 0 ? ms * 1e-3 : 1) / 1e9);
    }
}

/* 1 when the products of a T-row step read bf16 activations staged ahead: rows past
 * the matrix-vector kernels' (CUK_MV_BATCH_MAX: cuBLAS and the quantized GEMM convert
 * their input otherwise) or on the skinny kernel; CUK_STAGE_MIN_T > 0 sets the fewest
 * rows instead (A/B runs; 9 is the rule before the twenty-third session). */
static int stage_rows(int T) {
    static int min = -1;
    if (min < 0) {
        const long v = setting_int(SET_CUK_STAGE_MIN_T), mv = setting_int(SET_CUK_MV_BATCH_MAX);
        min = v > 0 && v < 1000000 ? (int)v : (mv >= 1 && mv <= CUK_MV_MAX_T ? (int)mv : CUK_MV_MAX_T) + 1;
    }
    return (T >= min && T > 1) || skinny_rows(T);
}

/* The fast precision: a residual add + norm, a GLU, or a batched step's attention,
 * whose output a product reads next also writes it rounded to bf16 into the GEMM
 * staging (when that is large enough: from the second forward on), so the product
 * skips its conversion pass (the same rounding, so the same bits). 1 when it ran e
 * (dry: when it would, running nothing). */
static int stage_ahead(cuda_backend *c, const step_op *e, const char *vals, cudaStream_t st, int dry) {
    if (!c->self->fast) return 0;
    /* steps whose products convert their input (stage_rows); smaller decode steps
     * leave the kernels as they were (the matrix-vector kernels read float32) */
    const float *y;
    long n;
    if (e->op == SOP_add_rmsnorm && e->u.add_rmsnorm.y) {
        const op_add_rmsnorm_args *a = &e->u.add_rmsnorm;
        y = a->y;
        n = (long)a->T * a->n;
        if (!stage_rows(a->T) || (size_t)n * 2 > c->xbf.cap) return 0;
        if (dry) return 1;
        RUN(cuk_add_rmsnorm_bf16(a->x, a->d, a->dw, a->w, a->y, a->T, a->n, a->eps, a->plus_one, c->xbf.p, st));
    } else if (e->op == SOP_glu) {
        const op_glu_args *a = &e->u.glu;
        y = a->y;
        n = (long)a->T * a->n;
        if (!stage_rows(a->T) || (size_t)n * 2 > c->xbf.cap) return 0;
        if (dry) return 1;
        RUN(cuk_glu_bf16(a->g, a->ldg, a->u, a->ldu, a->y, a->T, a->n, a->act, c->xbf.p, st));
    } else if (e->op == SOP_attention_batch) {
        /* a batched step's attention output, which the o product reads next (one key
         * split on the tensor-core kernel: cuk_attention_batch_stages) */
        static int on = -1;
        if (on < 0) on = setting_flag(SET_CUK_STAGE_ATTN);
        const op_attention_batch_args *a = &e->u.attention_batch;
        y = a->out;
        n = (long)a->n * a->p.n_heads * a->p.head_dim;
        if (!on || !stage_rows(a->n) || (size_t)n * 2 > c->xbf.cap || !cuk_attention_batch_stages(a->q, a->max_keys, &a->p, a->dtype))
            return 0;
        if (dry) return 1;
        RUN(cuk_attention_batch_bf16(a->q, a->qpos, a->n, (const cuk_attn_seq *)vals, a->max_keys, &a->p, a->dtype, a->out,
                                     c->att.p, c->xbf.p, st));
    } else {
        return 0;
    }
    c->xbf_src = c->failed ? NULL : y;
    c->xbf_n = n;
    c->xbf_seq = c->op_seq;
    return 1;
}

/* The fast precision's one-row 4-bit products read their activations as two-term int8
 * pieces (cuk_matvec_q8x2): an add + RMSNorm or GLU whose output such a product reads
 * next (next: known in recorded steps) also writes them, into the matvec work the
 * product reads, so the product skips its quantizing launch. 1 when it ran e (dry: when
 * it would, running nothing). */
static int stage_q8x2(cuda_backend *c, const step_op *e, const step_op *next, cudaStream_t st, int dry) {
    if (!c->self->fast || !next || next->op != SOP_matmul || next->u.matmul.T != 1) return 0;
    const weight *w = &next->u.matmul.w;
    if (skinny_ok(w, 1) || !gemm_ok(w, 1) || !cuk_matvec_q8x2(w) || c->mv.cap < cuk_matvec_work(1, w->cols)) return 0;
    const float *y;
    if (e->op == SOP_add_rmsnorm && e->u.add_rmsnorm.y) {
        const op_add_rmsnorm_args *a = &e->u.add_rmsnorm;
        if (a->T != 1 || a->y != next->u.matmul.x || a->n != w->cols) return 0;
        if (dry) return 1;
        y = a->y;
        RUN(cuk_add_rmsnorm_q8x2(a->x, a->d, a->dw, a->w, a->y, a->n, a->eps, a->plus_one, c->mv.p, st));
    } else if (e->op == SOP_glu) {
        const op_glu_args *a = &e->u.glu;
        if (a->T != 1 || a->y != next->u.matmul.x || a->n != w->cols) return 0;
        if (dry) return 1;
        y = a->y;
        RUN(cuk_glu_q8x2(a->g, a->u, a->y, a->n, a->act, c->mv.p, st));
    } else {
        return 0;
    }
    c->xq_src = c->failed ? NULL : y;
    c->xq_seq = c->op_seq;
    return 1;
}

/* 1 when float ranges a [na] and b [nb] do not overlap. */
static int floats_apart(const float *a, long na, const float *b, long nb) {
    const uintptr_t pa = (uintptr_t)a, pb = (uintptr_t)b;
    return pa + (uintptr_t)na * sizeof(float) <= pb || pb + (uintptr_t)nb * sizeof(float) <= pa;
}

static void run_op_now(cuda_backend *c, const step_op *e, const step_op *next, const char *vals) {
    cudaStream_t st = c->stream;
    c->op_seq++; /* the staged activations stay valid only from one product to the next */
    if (stage_q8x2(c, e, next, st, 0) || stage_ahead(c, e, vals, st, 0)) return;
    switch (e->op) {
/* a KERNEL op: its launcher over the recorded arguments */
#define CUDA_OP_RUN(name)                            \
    case SOP_##name: {                               \
        const op_##name##_args *a_ = &e->u.name;     \
        RUN(cuk_##name(OP_ARGS_##name(OPA_ARG) st)); \
        break;                                       \
    }
#define CUDA_OP_RUN_IF(name, mode) OPS_IF_KERNEL(name, mode, CUDA_OP_RUN)
        BACKEND_OPS(CUDA_OP_RUN_IF)
#undef CUDA_OP_RUN_IF
#undef CUDA_OP_RUN
    case SOP_matmul: {
        const weight *w = &e->u.matmul.w;
        const int T = e->u.matmul.T;
        const int sk = skinny_ok(w, T);
        if (!sk && gemm_ok(w, T)) {
            const int q8 = c->self->fast && T == 1 && c->xq_src == e->u.matmul.x && c->xq_seq + 1 == c->op_seq;
            RUN(cuk_matvec(w, e->u.matmul.x, e->u.matmul.y, T, c->mv.p, c->self->fast ? 1 + q8 : 0, st));
        } else if (!sk && cuk_qgemm_wanted(w, T, c->self->fast)) {
            RUN(cuk_qgemm(w, e->u.matmul.x, e->u.matmul.y, T, c->xbf.p,
                          cuk_qgemm_work(w, T, c->self->fast) ? c->y2.p : NULL, c->self->fast, st));
        } else {
            const int64_t wrows = cuk_gemm_wbf_rows(w);
            const float *x = e->u.matmul.x;
            const long n = (long)T * w->cols;
            /* fast: activations the previous op (a product) staged are not converted again */
            const int staged = c->self->fast && c->xbf_src == x && c->xbf_n == n && c->xbf_seq + 1 == c->op_seq;
            if (sk)
                RUN(cuk_skinny(w, x, e->u.matmul.y, T, c->xbf.p, c->self->fast ? 1 + staged : 0, st));
            else
                RUN(cuk_gemm2(c->blas, w, x, e->u.matmul.y, T, c->xbf.p, wrows ? c->wbf.p : NULL, wrows,
                              cuk_gemm_y2_elems(T, wrows ? wrows : w->rows) ? c->y2.p : NULL,
                              c->self->fast ? 1 + staged : 0, st));
            /* y must not overlap x for the staging to stay valid (never so in the forward) */
            const int apart = floats_apart(e->u.matmul.y, (long)T * w->rows, x, n);
            c->xbf_src = c->self->fast && !c->failed && apart ? x : NULL;
            c->xbf_n = n;
            c->xbf_seq = c->op_seq;
        }
        break;
    }
    case SOP_attention: {
        const op_attention_args *a = &e->u.attention;
        RUN(cuk_attention(a->q, a->qpos, a->T, &a->kv, e->dyn >= 0 ? (const cuk_kv_dyn *)vals : NULL, &a->p, a->out, c->att.p,
                          st));
        break;
    }
    case SOP_attention_batch: {
        /* values: the rows' descriptors (cuk_attn_seq [n]) */
        const op_attention_batch_args *a = &e->u.attention_batch;
        RUN(cuk_attention_batch(a->q, a->qpos, a->n, (const cuk_attn_seq *)vals, a->max_keys, &a->p, a->dtype, a->out,
                                c->att.p, st));
        break;
    }
    case SOP_all_reduce:
        RUN(cuda_nccl_all_reduce(c, e->u.all_reduce.x, e->u.all_reduce.n, st));
        break;
    case SOP_gather_cols: {
        const op_gather_cols_args *a = &e->u.gather_cols;
        RUN(cuda_nccl_gather_cols(c, a->full, a->part, a->T, a->w, a->W, c->gath.p, st));
        break;
    }
    case SOP_put_batch:
        RUN(cuk_put_batch((const cuk_put_row *)vals, e->u.pb.n, e->u.pb.row, e->u.pb.k, e->u.pb.v, e->u.pb.dtype, st));
        break;
    case SOP_put_rows: {
        /* values: the slot (recorded steps only), then the n positions */
        const op_put_rows_args *a = &e->u.put_rows;
        const int32_t *v = (const int32_t *)vals;
        const int rec = a->slot < 0;
        RUN(cuk_put_rows(a->kd, a->vd, a->pd, a->row, a->slot, rec ? v : NULL, a->k, a->v, rec ? v + 1 : v, a->n, a->dtype, st));
        break;
    }
    case SOP_copy:
    case SOP_upload:
        c->n_calls++;
        cuda_ok(c, cudaMemcpyAsync(e->u.copy.dst, e->op == SOP_upload ? vals : e->u.copy.src, e->u.copy.n,
                                   cudaMemcpyDeviceToDevice, st),
                "copy");
        break;
    case SOP_sample:
        if (e->u.smp.rows > 0) {
            /* values: the draws (double [rows]), then the parameters (cuk_sample_params [rows]) */
            const double *u = (const double *)vals;
            RUN(cuk_sample_rows(e->u.smp.logits, e->u.smp.V, e->u.smp.rows, e->u.smp.sampling,
                                (const cuk_sample_params *)(u + e->u.smp.rows), u, e->u.smp.tok, e->u.smp.host, c->smp.p,
                                st));
        } else {
            RUN(cuk_sample(e->u.smp.logits, e->u.smp.V, &e->u.smp.p, (const double *)vals, e->u.smp.tok, e->u.smp.host,
                           c->smp.p, st));
        }
        break;
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

/* The batch-size bucket of n rows: powers of two up to STEP_MAX_T, then multiples
 * of it; a step's op list depends only on the bucket of its row count. */
static int row_bucket(int n) {
    if (n > STEP_MAX_T) return (n + STEP_MAX_T - 1) / STEP_MAX_T * STEP_MAX_T;
    int b = 1;
    while (b < n) b *= 2;
    return b;
}

/* Ends the open SOP_put_batch: padding rows up to its bucket, so every step of the
 * bucket records the same op. */
static void close_put(cuda_backend *c) {
    if (!c->put_open) return;
    c->put_open = 0;
    step_op *e = &c->tape[c->n_tape - 1];
    const int want = row_bucket(e->u.pb.n);
    int off;
    char *pad = want > e->u.pb.n ? value_space(c, (size_t)(want - e->u.pb.n) * sizeof(cuk_put_row), &off) : NULL;
    if (!pad) return; /* no room: the exact count (the list then differs from a padded one) */
    memset(pad, 0, (size_t)(want - e->u.pb.n) * sizeof(cuk_put_row));
    e->u.pb.n = want;
}

/* A recorded step's q/k norm + RoPE followed by the KV writes of the same k rows (every
 * attention layer of a decode step) run as one kernel (cuk_qk_norm_rope_put): the
 * writes' launch and their wait on the RoPE go. 1 when it ran both e and put (dry: when
 * it would, running nothing). */
static int run_rope_put(cuda_backend *c, const step_op *e, const step_op *put, const char *put_vals, int dry) {
    static int on = -1;
    if (on < 0) on = setting_flag(SET_CUK_ROPE_PUT);
    if (!on || e->op != SOP_qk_norm_rope || put->op != SOP_put_batch) return 0;
    const op_qk_norm_rope_args *a = &e->u.qk_norm_rope;
    if (!a->k || put->u.pb.k != a->k || put->u.pb.real != a->T || put->u.pb.row != (long)a->n_kv * a->head_dim)
        return 0;
    if (dry) return 1;
    c->op_seq += 2;
    RUN(cuk_qk_norm_rope_put(a->q, a->k, a->T, a->n_heads, a->n_kv, a->head_dim, a->norm, a->qw, a->kw, a->eps, a->plus_one,
                             a->pos, a->r_set ? &a->r : NULL, (const cuk_put_row *)put_vals, (float *)put->u.pb.v, NULL, 0,
                             put->u.pb.dtype, c->stream));
    return 1;
}

/* A batched step's split of its fused q|k|v rows into q, k and v, then the q/k norm +
 * RoPE and KV writes above (a decode step of 2+ rows of a model without biases), as
 * one kernel reading the fused rows: the split's launch and its wait go, and q, k, v
 * hold what the three ops leave. CUK_SPLIT_ROPE_PUT=0 keeps the split's own launch.
 * 1 when it ran all three (dry: when it would, running nothing). */
static int run_split_rope_put(cuda_backend *c, const step_op *sp, const step_op *e, const step_op *put,
                              const char *put_vals, int dry) {
    static int on = -1;
    if (on < 0) on = setting_flag(SET_CUK_SPLIT_ROPE_PUT) && setting_flag(SET_CUK_ROPE_PUT);
    if (!on || sp->op != SOP_split_cols || e->op != SOP_qk_norm_rope || put->op != SOP_put_batch) return 0;
    const op_split_cols_args *s = &sp->u.split_cols;
    const op_qk_norm_rope_args *a = &e->u.qk_norm_rope;
    const long qd = (long)a->n_heads * a->head_dim, kd = (long)a->n_kv * a->head_dim;
    if (!a->k || s->T != a->T || s->y0 != a->q || s->y1 != a->k || s->n0 != qd || s->n1 != kd || s->n2 != kd ||
        put->u.pb.k != a->k || put->u.pb.v != s->y2 || put->u.pb.real != a->T || put->u.pb.row != kd)
        return 0;
    /* the fused rows must not overlap what the kernel writes */
    const long nx = (long)s->T * (qd + 2 * kd);
    if (!floats_apart(s->x, nx, s->y0, (long)s->T * qd) || !floats_apart(s->x, nx, s->y1, (long)s->T * kd) ||
        !floats_apart(s->x, nx, s->y2, (long)s->T * kd))
        return 0;
    if (dry) return 1;
    c->op_seq += 3;
    RUN(cuk_qk_norm_rope_put(a->q, a->k, a->T, a->n_heads, a->n_kv, a->head_dim, a->norm, a->qw, a->kw, a->eps, a->plus_one,
                             a->pos, a->r_set ? &a->r : NULL, (const cuk_put_row *)put_vals, s->y2, s->x, qd + 2 * kd,
                             put->u.pb.dtype, c->stream));
    return 1;
}

/* A 16-bit gate|up product of up to 4 rows on the matrix-vector kernels and the GLU of
 * its two halves after it (g the product's output, u = g + n, both rows 2n apart) as one
 * launch (cuk_matvec_glu: the same bits), unless the GLU would also stage its output
 * for the product after it (after: the op after the GLU, or NULL); CUK_MV_GLU=0 keeps
 * two launches. 1 when it ran both (dry: when it would, running nothing). */
static int run_matvec_glu(cuda_backend *c, const step_op *e, const step_op *g, const step_op *after, int dry) {
    static int on = -1;
    if (on < 0) on = setting_flag(SET_CUK_MV_GLU);
    if (!on || e->op != SOP_matmul || g->op != SOP_glu) return 0;
    const weight *w = &e->u.matmul.w;
    const op_glu_args *a = &g->u.glu;
    const int T = e->u.matmul.T;
    const long n = a->n;
    if (a->T != T || a->g != e->u.matmul.y || a->u != a->g + n || a->ldg != 2 * n || a->ldu != 2 * n || w->rows != 2 * n)
        return 0;
    if (!cuk_matvec_glu_ok(w, T, a->act) || skinny_ok(w, T) || !gemm_ok(w, T)) return 0;
    if (!floats_apart(a->y, (long)T * n, e->u.matmul.x, (long)T * w->cols)) return 0;
    if (stage_q8x2(c, g, after, c->stream, 1) || stage_ahead(c, g, NULL, c->stream, 1)) return 0;
    if (dry) return 1;
    c->op_seq += 2;
    RUN(cuk_matvec_glu(w, e->u.matmul.x, a->y, T, a->act, c->stream));
    return 1;
}

/* How the step's product e gets int8 activations under fast: 0 it does not take them
 * (not a one-row 4-bit product), 1 the norm or GLU before it (prev) writes them, 2 it
 * quantizes its input with its own launch (o's: the attention's output). */
static int q8_input(cuda_backend *c, const step_op *prev, const step_op *e) {
    const weight *w = &e->u.matmul.w;
    if (!c->self->fast || e->u.matmul.T != 1 || skinny_ok(w, 1) || !gemm_ok(w, 1) || !cuk_matvec_q8x2(w)) return 0;
    return prev && stage_q8x2(c, prev, e, c->stream, 1) ? 1 : 2;
}

/* CELER_PROFILE 4-9 take a decode step apart, for measurement only (the step's outputs
 * are not computed; the exit note says so). Each launch of the step (a product, with
 * the GLU where the two are one launch; a small kernel, or the two or three ops fused
 * into one) is kept, left out or replaced, by mode:
 *   4  products as the step runs them (reading int8 pieces where a norm or GLU would
 *      have written them), the rest left out;  5  the products left out, the rest kept;
 *   6  each product replaced by a read of its weights (cuk_read_floor), the rest left
 *      out;  7  the same, timed op by op as under 2 (beside 2: each product shape
 *      against a read of its bytes);
 *   8  products kept, every other launch an empty kernel (cuk_empty_launch: the
 *      launches' own cost);  9  reads for products and empty kernels for the rest (the
 *      floor of a step of these launches). Under 8 and 9 the launches of the kind
 *      CELER_PROFILE_KEEP names run as in the whole step (that kind's cost alone).
 * 4 and 5 against the whole step give what the products and the rest cost and how much
 * they overlap; 8 splits the rest's cost into launches and work. */
static void run_ops_apart(cuda_backend *c, const step_op *ops, int n, cudaEvent_t *ev) {
    const int mode = c->profile, reads = PROF_READS(c);
    for (int i = 0; i < n && !c->failed; i++) {
        if (ev) cudaEventRecordWithFlags(ev[i], c->stream, cudaEventRecordExternal);
        const step_op *e = &ops[i], *next = i + 1 < n ? &ops[i + 1] : NULL;
        int span = 1;
        if (e->op == SOP_matmul) {
            const int glu = next && run_matvec_glu(c, e, next, i + 2 < n ? &ops[i + 2] : NULL, 1);
            span += glu;
            const int q8 = q8_input(c, i > 0 ? &ops[i - 1] : NULL, e);
            if (reads) {
                c->op_seq++;
                if (mode == 9 && q8 == 2) RUN(cuk_empty_launch(c->stream)); /* its quantizing launch */
                RUN(cuk_read_floor(&e->u.matmul.w, c->mv.p, c->stream));
            } else if (mode != 5) {
                if (q8 == 1) {
                    c->xq_src = e->u.matmul.x; /* as if its norm or GLU had written the pieces */
                    c->xq_seq = c->op_seq;
                }
                if (!glu || !run_matvec_glu(c, e, next, i + 2 < n ? &ops[i + 2] : NULL, 0))
                    run_op(c, e, next, values_of(c, e));
            }
        } else {
            const int fused3 = i + 2 < n && run_split_rope_put(c, e, next, &ops[i + 2], values_of(c, &ops[i + 2]), 1);
            const int fused2 = !fused3 && next && run_rope_put(c, e, next, values_of(c, next), 1);
            span = fused3 ? 3 : fused2 ? 2 : 1;
            if (mode == 5 || (mode >= 8 && e->op == c->profile_keep)) { /* as the whole step runs it */
                if (fused3) run_split_rope_put(c, e, next, &ops[i + 2], values_of(c, &ops[i + 2]), 0);
                else if (fused2) run_rope_put(c, e, next, values_of(c, next), 0);
                else run_op(c, e, next, values_of(c, e));
            } else if (mode >= 8) {
                c->op_seq += span;
                RUN(cuk_empty_launch(c->stream));
            }
        }
        for (int j = 1; j < span; j++) {
            i++;
            if (ev) cudaEventRecordWithFlags(ev[i], c->stream, cudaEventRecordExternal);
        }
    }
    if (ev && !c->failed) cudaEventRecordWithFlags(ev[n], c->stream, cudaEventRecordExternal);
}

/* Runs ops [0, n) in order; ev (CELER_PROFILE=2 capture: [n + 1] events) is recorded
 * before each op and after the last (a fused pair: both before it; a fused triple:
 * the other two right after it, so its time counts as its first op's). */
static void run_ops(cuda_backend *c, const step_op *ops, int n, cudaEvent_t *ev) {
    if (c->profile >= 4) {
        run_ops_apart(c, ops, n, ev);
        return;
    }
    for (int i = 0; i < n && !c->failed; i++) {
        if (ev) cudaEventRecordWithFlags(ev[i], c->stream, cudaEventRecordExternal);
        if (i + 2 < n && c->profile != 1 &&
            run_split_rope_put(c, &ops[i], &ops[i + 1], &ops[i + 2], values_of(c, &ops[i + 2]), 0)) {
            for (int j = 0; j < 2; j++) {
                i++;
                if (ev) cudaEventRecordWithFlags(ev[i], c->stream, cudaEventRecordExternal);
            }
            continue;
        }
        if (i + 1 < n && c->profile != 1 &&
            (run_rope_put(c, &ops[i], &ops[i + 1], values_of(c, &ops[i + 1]), 0) ||
             run_matvec_glu(c, &ops[i], &ops[i + 1], i + 2 < n ? &ops[i + 2] : NULL, 0))) {
            if (ev) cudaEventRecordWithFlags(ev[++i], c->stream, cudaEventRecordExternal);
            else i++;
            continue;
        }
        run_op(c, &ops[i], i + 1 < n ? &ops[i + 1] : NULL, values_of(c, &ops[i]));
    }
    if (ev && !c->failed) cudaEventRecordWithFlags(ev[n], c->stream, cudaEventRecordExternal);
}

/* Uploads the values and runs ops [0, n). */
static void run_list(cuda_backend *c, const step_op *ops, int n) {
    if (c->n_values) cuda_stage_upload(c, c->dvalues, c->values, c->n_values);
    cuk_set_pdl(1);
    run_ops(c, ops, n, NULL);
    cuk_set_pdl(0);
}

void cuda_step_stop(cuda_backend *c) {
    if (!c->recording) return;
    close_put(c);
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
        close_put(c);
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
    run_op(c, e, NULL, c->dvalues);
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
    cuda_here(cu(b));
    cuda_backend *c = cu(b);
    if (c->graphs_off < 0) /* first call: CELER_GRAPH=0 turns graphs off for A/B runs */
        c->graphs_off = !setting_flag(SET_CELER_GRAPH);
    if (c->graphs_off || c->profile == 1 || c->failed || T > STEP_MAX_T || !c->dvalues) return 0;
    c->recording = 1;
    c->put_open = 0;
    c->n_tape = 0;
    c->n_values = 0;
    return 1;
}

static int same_ops(const step_op *a, int na, const step_op *b, int nb) {
    return na == nb && memcmp(a, b, (size_t)na * sizeof *a) == 0;
}

static void graph_drop(step_graph *g) {
    if (g->exec) cudaGraphExecDestroy(g->exec);
    for (int i = 0; g->ev && i <= g->n; i++)
        if (g->ev[i]) cudaEventDestroy(g->ev[i]);
    free(g->ev);
    free(g->ops);
    late_drop(g);
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
    if (PROF_EVENTS(c) && (g->ev = calloc((size_t)g->n + 1, sizeof *g->ev)) != NULL)
        for (int i = 0; i <= g->n; i++)
            if (cudaEventCreate(&g->ev[i]) != cudaSuccess) {
                for (int j = 0; j < i; j++) cudaEventDestroy(g->ev[j]);
                free(g->ev);
                g->ev = NULL;
                break;
            }
    cudaGraph_t graph = NULL;
    cuda_touch(c); /* a replay must not count on what the ops before it staged */
    cudaError_t e = cudaStreamBeginCapture(c->stream, cudaStreamCaptureModeRelaxed);
    if (e == cudaSuccess) {
        cuk_set_pdl(1);
        c->capturing = 1;
        run_ops(c, c->tape, c->n_tape, g->ev);
        c->capturing = 0;
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
    late_captured(c, g);
    return g;
}

void cuda_step_end(backend *b) {
    cuda_here(cu(b));
    cuda_backend *c = cu(b);
    if (!c->recording) return;
    close_put(c);
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
        cuda_touch(c);
        late_before(c, g);
        const int tl = tl_begin(c, TL_GRAPH);
        cuda_ok(c, cudaGraphLaunch(g->exec, c->stream), "graph launch");
        if (tl) tl_end(c);
        late_after(c, g);
        if (PROF_EVENTS(c)) prof_graph(c, g);
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

/* What the CUSTOM ops do before the generic path: values that change every step go
 * to the value block, and ops that cannot be captured end the recording. Returns 1
 * when it submitted e itself. */
static int custom_record(cuda_backend *c, step_op *e) {
    switch (e->op) {
    case SOP_matmul:
        /* cuBLAS products are captured too (its work space is fixed: backend_cuda.c) */
        if (c->recording && !gemm_ok(&e->u.matmul.w, e->u.matmul.T) && e->u.matmul.T > STEP_MAX_T) cuda_step_stop(c);
        return 0;
    case SOP_attention_batch: {
        /* the rows' views go to the values (their pointers and counts change from step
         * to step); the record keeps the row count and the split bucket of the longest */
        op_attention_batch_args *a = &e->u.attention_batch;
        const attn_kv *kvs = a->kvs;
        a->kvs = NULL;
        int max = 0;
        for (int i = 0; i < a->n; i++)
            if (kvs[i].k && kvs[i].n > max) max = kvs[i].n;
        if (a->max_keys > max) max = a->max_keys;
        a->max_keys = cuk_attention_batch_bucket(max);
        const size_t nv = (size_t)a->n * sizeof(cuk_attn_seq);
        if (nv > STEP_VALUES / 4) {
            err_set("cuda attention (batch): %d rows exceed the step's value block", a->n);
            cuda_fail(c);
            return 1;
        }
        cuk_attn_seq *d = malloc(nv ? nv : 1);
        if (!d) {
            err_set("cuda attention (batch): out of memory");
            cuda_fail(c);
            return 1;
        }
        memset(d, 0, nv);
        for (int i = 0; i < a->n; i++) {
            if (!kvs[i].k || kvs[i].n <= 0) continue;
            d[i].k = kvs[i].k;
            d[i].v = kvs[i].v;
            d[i].pos = kvs[i].pos;
            d[i].n = kvs[i].n;
            d[i].stride = kvs[i].row_stride;
            d[i].blocks = kvs[i].blocks; /* a paged view's table: a value, so tables may change between replays */
            if (kvs[i].blocks && kvs[i].block_rows != CUK_KV_BLOCK) {
                err_set("cuda attention (batch): paged view of %d rows a block (the kernel takes %d)", kvs[i].block_rows,
                        CUK_KV_BLOCK);
                free(d);
                cuda_fail(c);
                return 1;
            }
        }
        submit(c, e, d, nv);
        free(d);
        return 1;
    }
    case SOP_attention: {
        /* field by field: a caller's attn_kv may carry uninitialized padding */
        op_attention_args *a = &e->u.attention;
        const attn_kv kv = a->kv;
        memset(&a->kv, 0, sizeof a->kv);
        a->kv.k = kv.k;
        a->kv.v = kv.v;
        a->kv.pos = kv.pos;
        a->kv.n = kv.n;
        a->kv.row_stride = kv.row_stride;
        a->kv.dtype = kv.dtype;
        a->kv.block_rows = kv.block_rows;
        a->kv.blocks = kv.blocks;
        if (!c->recording) return 0;
        /* recorded: the key count and the block table are values; the op keeps only a
         * count with the same split count (and no table), so the steps of one 256-key
         * bucket record the same op whichever blocks the cache holds */
        cuk_kv_dyn dv;
        memset(&dv, 0, sizeof dv);
        dv.n = kv.n;
        dv.blocks = kv.blocks;
        a->kv.n = cuk_attention_bucket(kv.n);
        a->kv.blocks = NULL;
        submit(c, e, &dv, sizeof dv);
        return 1;
    }
    case SOP_put_rows: {
        op_put_rows_args *a = &e->u.put_rows;
        const int32_t *pos = a->pos;
        const int n = a->n;
        a->pos = NULL; /* host memory: the positions are values */
        if (!c->recording || n > CUK_MV_MAX_T) {
            if (c->recording) cuda_step_stop(c);
            submit(c, e, pos, (size_t)n * sizeof(int32_t));
            return 1;
        }
        if (n == 1) {
            /* one row (a decode step's): joins the open batch when its source row follows
             * the batch's last, else opens one; the row's destination is a value */
            const size_t at = (size_t)a->slot * (size_t)a->row * (size_t)kv_dtype_size(a->dtype); /* bytes */
            cuk_put_row r = {(char *)a->kd + at, (char *)a->vd + at, a->pd + a->slot, pos[0], 0};
            step_op *last = c->put_open ? &c->tape[c->n_tape - 1] : NULL;
            if (last && last->u.pb.row == a->row && last->u.pb.dtype == a->dtype &&
                last->u.pb.k + (long)last->u.pb.n * a->row == a->k &&
                last->u.pb.v + (long)last->u.pb.n * a->row == a->v) {
                int off;
                char *dst = value_space(c, sizeof r, &off);
                if (dst) {
                    memcpy(dst, &r, sizeof r);
                    last->u.pb.n++;
                    last->u.pb.real++;
                    return 1;
                }
            }
            step_op pb = op_new(SOP_put_batch);
            pb.u.pb.k = a->k;
            pb.u.pb.v = a->v;
            pb.u.pb.row = a->row;
            pb.u.pb.dtype = a->dtype;
            pb.u.pb.n = pb.u.pb.real = 1;
            submit(c, &pb, &r, sizeof r);
            c->put_open = c->recording && c->n_tape > 0 && c->tape[c->n_tape - 1].op == SOP_put_batch;
            return 1;
        }
        /* recorded: the slot and the positions are values */
        int32_t vals[1 + CUK_MV_MAX_T];
        vals[0] = a->slot;
        memcpy(vals + 1, pos, (size_t)n * sizeof(int32_t));
        a->slot = -1;
        submit(c, e, vals, (size_t)(n + 1) * sizeof(int32_t));
        return 1;
    }
    default: return 0;
    }
}

/* The recorder of each recorded op of the list: its arguments into a zeroed record
 * (op_new), then the CUSTOM hook, then recorded or run at once (submit). */
#define CUDA_OP_RECORDER(name)                                 \
    void cuda_##name(backend *b OP_ARGS_##name(OPA_PARAM)) {   \
        cuda_backend *c_ = cu(b);                              \
        cuda_here(c_);                                         \
        step_op o_ = op_new(SOP_##name);                       \
        op_##name##_args *a_ = &o_.u.name;                     \
        OP_ARGS_##name(OPA_STORE)                              \
        if (!custom_record(c_, &o_)) submit(c_, &o_, NULL, 0); \
    }
#define CUDA_OP_RECORDER_IF(name, mode) OPS_IF_RECORDED(name, mode, CUDA_OP_RECORDER)
BACKEND_OPS(CUDA_OP_RECORDER_IF)
#undef CUDA_OP_RECORDER_IF
#undef CUDA_OP_RECORDER

void cuda_step_copy(backend *b, void *dst, const void *src, size_t n) {
    cuda_here(cu(b));
    step_op e = op_new(SOP_copy);
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
    step_op e = op_new(SOP_upload);
    e.u.copy.dst = dst;
    e.u.copy.n = n;
    submit(c, &e, host, n);
    return 1;
}

/* The kernel's parameters for one row's sampling parameters (penalties are the host's). */
static cuk_sample_params kernel_params(const sample_params *p) {
    cuk_sample_params d;
    memset(&d, 0, sizeof d);
    d.temperature = p->temperature;
    d.top_k = p->top_k;
    d.top_p = p->top_p;
    d.min_p = p->min_p;
    return d;
}

/* Waits for slot's sampled tokens; a failure of the stream is reported here, once. */
static int sampled_wait(cuda_backend *c, int slot) {
    cuda_wait_begin(c);
    if (!c->failed) cuda_ok(c, cudaEventSynchronize(c->sample_done[slot]), "sample");
    cuda_wait_end(c);
    if (c->failed) {
        c->failed = 0;
        return err_set("%s", c->why);
    }
    return 0;
}

int cuda_sample(backend *b, const float *logits, int V, const sample_params *p, double u, int32_t *tok, int slot) {
    cuda_here(cu(b));
    cuda_backend *c = cu(b);
    step_op e = op_new(SOP_sample);
    e.u.smp.p = kernel_params(p);
    if (slot < 0 || slot >= SAMPLE_SLOTS || !c->sampled || !cuk_sample_supported(&e.u.smp.p)) return -1;
    e.u.smp.logits = logits;
    e.u.smp.V = V;
    e.u.smp.tok = tok;
    e.u.smp.host = c->sampled_dev + (long)slot * SAMPLE_MAX_ROWS;
    submit(c, &e, &u, sizeof u);
    cuda_ok(c, cudaEventRecord(c->sample_done[slot], c->stream), "sample");
    return 0;
}

int32_t cuda_sampled(backend *b, int slot) {
    cuda_here(cu(b));
    cuda_backend *c = cu(b);
    if (sampled_wait(c, slot) != 0) return -1;
    return ((volatile int32_t *)c->sampled)[(long)slot * SAMPLE_MAX_ROWS];
}

int cuda_sample_rows(backend *b, const float *logits, int V, int n, const sample_params *p, const double *u, int32_t *tok,
                     int slot) {
    cuda_here(cu(b));
    cuda_backend *c = cu(b);
    if (n <= 0 || n > SAMPLE_MAX_ROWS || slot < 0 || slot >= SAMPLE_SLOTS || !c->sampled) return -1;
    /* values: the draws, then the parameters */
    const size_t nv = (size_t)n * (sizeof(double) + sizeof(cuk_sample_params));
    char *vals = malloc(nv);
    if (!vals) return -1;
    double *du = (double *)vals;
    cuk_sample_params *dp = (cuk_sample_params *)(du + n);
    int sampling = 0;
    for (int i = 0; i < n; i++) {
        dp[i] = kernel_params(&p[i]);
        du[i] = u[i];
        if (!cuk_sample_supported(&dp[i])) {
            free(vals);
            return -1;
        }
        sampling |= dp[i].temperature > 0.0f;
    }
    step_op e = op_new(SOP_sample);
    e.u.smp.logits = logits;
    e.u.smp.V = V;
    e.u.smp.rows = n;
    e.u.smp.sampling = sampling;
    e.u.smp.tok = tok;
    e.u.smp.host = c->sampled_dev + (long)slot * SAMPLE_MAX_ROWS;
    submit(c, &e, vals, nv);
    free(vals);
    cuda_ok(c, cudaEventRecord(c->sample_done[slot], c->stream), "sample");
    return 0;
}

int cuda_sampled_rows(backend *b, int slot, int32_t *out, int n) {
    cuda_here(cu(b));
    cuda_backend *c = cu(b);
    if (sampled_wait(c, slot) != 0) return -1;
    const volatile int32_t *h = (const volatile int32_t *)c->sampled + (long)slot * SAMPLE_MAX_ROWS;
    for (int i = 0; i < n; i++) out[i] = h[i];
    return 0;
}
