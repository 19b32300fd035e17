/* backend/cuda/backend_cuda.c: the CUDA backend's op table, its memory, weights and
 * experts, built into libceler-cuda.so (loaded by backend/backend_open.c); the
 * arithmetic ops and decode-step graphs are in step_ops.c. Everything runs in order
 * on one stream; only downloads wait. Weights are uploaded once in a
 * format the kernels read: bf16/f16/f32, MLX affine 4/8-bit and MXFP4 as stored, any
 * other format (other affine widths) converted to bf16 on the device, input-major
 * experts transposed. Work space (matvec activations, GEMM staging, attention
 * splits, expert routing lists) grows to the largest call and is then reused.
 *
 * Ops cannot return errors (the forward pass is a straight line of them), so the
 * first failure is kept and reported by `status`, which the forward checks at its
 * end; later ops are skipped.
 *
 * Small uploads (token ids, positions) go through a pinned staging ring: a copy from
 * pageable memory would make the stream wait for all earlier work, so each decode
 * step would stall the host once per layer. With CELER_STATS=1 the backend prints
 * what a forward costs the host: calls, uploads, time enqueueing and time waiting. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/settings.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_kernels.h"
#include "base/err.h"

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

/* Keeps the first failure (err_set's message) and skips what follows. */
void cuda_fail(cuda_backend *c) {
    if (c->failed) return;
    c->failed = 1;
    snprintf(c->why, sizeof c->why, "%s", err_msg());
}

int cuda_ok(cuda_backend *c, cudaError_t e, const char *what) {
    if (e == cudaSuccess) return 1;
    err_set("cuda %s: %s", what, cudaGetErrorString(e));
    cuda_fail(c);
    return 0;
}

void *cuda_grow(cuda_backend *c, grow_buf *g, size_t bytes, const char *what) {
    if (bytes <= g->cap) return g->p;
    cuda_touch(c);
    cuda_steps_forget(c); /* captured graphs hold the old address */
    if (g->p) {
        cudaStreamSynchronize(c->stream);
        cudaFree(g->p);
        g->p = NULL;
        g->cap = 0;
    }
    size_t want = bytes + bytes / 4 + 256;
    if (!cuda_ok(c, cudaMalloc(&g->p, want), what)) return NULL;
    g->cap = want;
    return g->p;
}

/* 0, or -1 with the first failure since the last report (then cleared). */
static int take_failure(cuda_backend *c) {
    if (!c->failed) {
        cudaError_t e = cudaGetLastError();
        if (e != cudaSuccess) {
            err_set("cuda: %s", cudaGetErrorString(e));
            cuda_fail(c);
        }
    }
    if (!c->failed) return 0;
    c->failed = 0; /* reported once; the next forward starts clean */
    return err_set("%s", c->why);
}

/* The op the forward calls at its end (counted as one forward for CELER_STATS). */
static int status(backend *b) {
    cuda_backend *c = cu(b);
    c->n_forwards++;
    const double dt = c->t_mark > 0 ? now_s() - c->t_mark : 0; /* host time since the last result */
    c->t_enqueue += dt;
    if (c->n_replays != c->at_replays) { /* this forward replayed a graph */
        c->r_forwards++;
        c->r_calls += c->n_calls - c->at_calls;
        c->r_uploads += c->n_uploads - c->at_uploads;
        c->r_enqueue += dt;
    }
    c->at_calls = c->n_calls;
    c->at_uploads = c->n_uploads;
    c->at_replays = c->n_replays;
    return take_failure(c);
}

/* ---- memory ------------------------------------------------------------------ */

static void *cuda_alloc(backend *b, size_t bytes) {
    cuda_backend *c = cu(b);
    void *p = NULL;
    cuda_here(c); /* cudaMalloc allocates on the thread's current GPU */
    cuda_touch(c);
    cudaError_t e = cudaMalloc(&p, bytes ? bytes : 16);
    if (e == cudaSuccess && !cuda_ok(c, cudaMemsetAsync(p, 0, bytes ? bytes : 16, c->stream), "memset")) {
        cudaFree(p);
        return NULL;
    }
    if (e != cudaSuccess) {
        cudaGetLastError();
        size_t fr = 0, tot = 0;
        cudaMemGetInfo(&fr, &tot);
        err_set("GPU %d: cannot allocate %.1f MiB (%.1f MiB free of %.1f MiB): %s", c->id, bytes / 1048576.0,
                fr / 1048576.0, tot / 1048576.0, cudaGetErrorString(e));
        return NULL;
    }
    return p;
}

static void cuda_release(backend *b, void *p) {
    cuda_here(cu(b));
    if (!p) return;
    cuda_step_stop(cu(b)); /* recorded ops may still use it */
    cuda_touch(cu(b));
    cudaStreamSynchronize(cu(b)->stream);
    cudaFree(p);
}

void cuda_stage_upload(cuda_backend *c, void *dst, const void *host, size_t n) {
    if (!n || c->failed) return;
    c->n_uploads++;
    cuda_touch(c);
    if (!c->stage || n > STAGE_HALF / 4) { /* large (weights at load time): the plain copy */
        cuda_ok(c, cudaMemcpyAsync(dst, host, n, cudaMemcpyHostToDevice, c->stream), "upload");
        return;
    }
    if (c->used + n > STAGE_HALF) {
        /* move to the other half once the copies that read it last have run */
        cuda_ok(c, cudaEventRecord(c->left[c->half], c->stream), "upload");
        c->pending[c->half] = 1;
        c->half ^= 1;
        c->used = 0;
        if (c->pending[c->half]) {
            cuda_ok(c, cudaEventSynchronize(c->left[c->half]), "upload");
            c->pending[c->half] = 0;
        }
    }
    char *p = c->stage + (size_t)c->half * STAGE_HALF + c->used;
    memcpy(p, host, n);
    c->used += (n + 15) & ~(size_t)15;
    const int tl = tl_begin(c, TL_HOST_UPLOAD);
    cuda_ok(c, cudaMemcpyAsync(dst, p, n, cudaMemcpyHostToDevice, c->stream), "upload");
    if (tl) tl_end(c);
}

static void cuda_upload(backend *b, void *dst, const void *host, size_t n) {
    cuda_here(cu(b));
    if (!n || cu(b)->failed || cuda_step_upload(b, dst, host, n)) return;
    cuda_stage_upload(cu(b), dst, host, n);
}

static void cuda_download(backend *b, void *host, const void *src, size_t n) {
    cuda_here(cu(b));
    cuda_backend *c = cu(b);
    cuda_step_stop(c);
    if (c->failed) {
        memset(host, 0, n);
        return;
    }
    cuda_wait_begin(c);
    if (cuda_ok(c, cudaMemcpyAsync(host, src, n, cudaMemcpyDeviceToHost, c->stream), "download"))
        cuda_ok(c, cudaStreamSynchronize(c->stream), "download");
    cuda_wait_end(c);
}

/* CELER_STATS: host time spent waiting for results, and the mark from which host
 * time is counted as enqueueing */
void cuda_wait_begin(cuda_backend *c) { c->t_wait_start = now_s(); }

void cuda_wait_end(cuda_backend *c) {
    c->n_waits++;
    c->t_mark = now_s();
    c->t_wait += c->t_mark - c->t_wait_start;
}

/* ---- weights ----------------------------------------------------------------- */

static void *dup_up(backend *b, const void *host, size_t n) {
    void *d = cuda_alloc(b, n);
    if (d) cuda_upload(b, d, host, n);
    return d;
}

static void release_weight(backend *b, weight *w) {
    cuda_release(b, (void *)w->data);
    cuda_release(b, (void *)w->scales);
    cuda_release(b, (void *)w->biases);
    w->data = w->scales = w->biases = NULL;
    w->on_device = 0;
}

/* An input-major float weight w [in, out] as its transpose [out, in] in the same
 * format, on the host (element size es). */
static void *transpose_host(const weight *w, size_t es) {
    const size_t R = (size_t)w->rows, C = (size_t)w->cols;
    char *t = malloc(R * C * es + 1);
    if (!t) return NULL;
    const char *s = w->data;
    for (size_t r = 0; r < R; r++)
        for (size_t j = 0; j < C; j++) memcpy(t + (j * R + r) * es, s + (r * C + j) * es, es);
    return t;
}

static int upload_weight(backend *b, weight *w, int transposed) {
    cuda_backend *c = cu(b);
    int rc = 0;
    if (transposed) {
        if (w->fmt != WF_F32 && w->fmt != WF_F16 && w->fmt != WF_BF16)
            return err_set("input-major expert weights must be a float format");
        size_t es = w->fmt == WF_F32 ? 4 : 2;
        void *t = transpose_host(w, es);
        if (!t) return err_set("out of memory transposing an expert weight");
        int64_t r = w->rows;
        w->rows = w->cols;
        w->cols = r;
        w->data = dup_up(b, t, (size_t)w->rows * (size_t)w->cols * es);
        cudaStreamSynchronize(c->stream); /* t is freed next: the copy must be done */
        free(t);
        if (!w->data) return -1;
        w->on_device = 1;
        rc = 1;
    } else if (w->src_cols) {
        /* a rank's column slice (tensor parallelism): each array's rows copied with
         * the stored rows' pitch, straight from the mapping */
        weight one = *w, src = *w;
        one.rows = src.rows = 1;
        src.cols = w->src_cols;
        size_t d[3], sp[3];
        weight_sizes(&one, &d[0], &d[1], &d[2]);
        weight_sizes(&src, &sp[0], &sp[1], &sp[2]);
        const void *h[3] = {w->data, w->scales, w->biases};
        const void **f[3] = {&w->data, &w->scales, &w->biases};
        w->data = w->scales = w->biases = NULL;
        w->on_device = 1;
        w->src_cols = 0;
        for (int a = 0; a < 3; a++) {
            if (!h[a] || !d[a]) continue;
            void *p = cuda_alloc(b, d[a] * (size_t)w->rows);
            if (!p) {
                release_weight(b, w);
                return -1;
            }
            *f[a] = p;
            cuda_ok(c, cudaMemcpy2DAsync(p, d[a], h[a], sp[a], d[a], (size_t)w->rows, cudaMemcpyHostToDevice, c->stream),
                    "upload (column slice)");
        }
    } else {
        size_t nd, ns, nb;
        weight_sizes(w, &nd, &ns, &nb);
        const void *hd = w->data, *hs = w->scales, *hb = w->biases;
        w->data = w->scales = w->biases = NULL;
        w->on_device = 1;
        if (!(w->data = dup_up(b, hd, nd)) || (ns && hs && !(w->scales = dup_up(b, hs, ns))) ||
            (nb && hb && !(w->biases = dup_up(b, hb, nb)))) {
            release_weight(b, w);
            return -1;
        }
    }
    if (!cuk_matvec_supports(w) && w->fmt != WF_BF16) {
        /* a format the decode kernels do not read: convert once to bf16 */
        size_t n = (size_t)w->rows * (size_t)w->cols * 2;
        uint16_t *bf = cuda_alloc(b, n);
        if (!bf) {
            release_weight(b, w);
            return -1;
        }
        if (cuk_weight_to_bf16(w, 0, w->rows, bf, c->stream) != 0) {
            cuda_release(b, bf);
            release_weight(b, w);
            return -1;
        }
        weight nw = *w;
        release_weight(b, w);
        nw.fmt = WF_BF16;
        nw.data = bf;
        nw.scales = nw.biases = NULL;
        nw.bits = nw.group = 0;
        nw.on_device = 1;
        *w = nw;
    }
    if (c->failed) return take_failure(c);
    return rc;
}

/* backend_ops.fill_weight: random arrays of w's shape made on the device. */
static int fill_weight(backend *b, weight *w, uint64_t seed) {
    cuda_backend *c = cu(b);
    w->src_cols = 0;
    size_t n[3];
    weight_sizes(w, &n[0], &n[1], &n[2]);
    const int have[3] = {1, w->scales != NULL, w->biases != NULL};
    const void **f[3] = {&w->data, &w->scales, &w->biases};
    w->data = w->scales = w->biases = NULL;
    w->on_device = 1;
    const int ss = w->stype == SC_F32 ? 4 : 2, sk = w->stype == SC_F32 ? 3 : w->stype == SC_F16 ? 2 : 1;
    for (int a = 0; a < 3; a++) {
        if (!have[a] || !n[a]) continue;
        void *p = cuda_alloc(b, n[a]);
        if (!p) {
            release_weight(b, w);
            return -1;
        }
        *f[a] = p;
        int rc = 0;
        if (a == 0 && (w->fmt == WF_AFFINE || w->fmt == WF_MXFP4)) rc = cuk_fill(p, n[a], 0, 0, 0, seed, c->stream);
        else if (a == 0) rc = cuk_fill(p, n[a] / (w->fmt == WF_F32 ? 4 : 2), w->fmt == WF_F32 ? 3 : w->fmt == WF_F16 ? 2 : 1,
                                       -0.03f, 0.03f, seed, c->stream);
        else if (w->fmt == WF_MXFP4) rc = cuda_ok(c, cudaMemsetAsync(p, 120, n[a], c->stream), "fill") ? 0 : -1; /* 2^-7 */
        else rc = cuk_fill(p, n[a] / (size_t)ss, sk, a == 1 ? 0.001f : -0.01f, a == 1 ? 0.003f : 0.0f, seed + (uint64_t)a,
                           c->stream);
        if (rc != 0) {
            release_weight(b, w);
            return -1;
        }
    }
    return take_failure(c);
}

/* One allocation per array (data, scales, biases) holding every part's rows in order. */
static int upload_fused(backend *b, weight *const *parts, int n, weight *out) {
    const weight *p0 = parts[0];
    size_t nd = 0, ns = 0, nb = 0, d, sc, bi;
    int64_t rows = 0;
    for (int i = 0; i < n; i++) {
        const weight *w = parts[i];
        if (w->on_device || w->fmt != p0->fmt || w->cols != p0->cols || w->bits != p0->bits || w->group != p0->group ||
            w->stype != p0->stype || !cuk_matvec_supports(w) || (w->scales == NULL) != (p0->scales == NULL) ||
            (w->biases == NULL) != (p0->biases == NULL))
            return 1;
        weight_sizes(w, &d, &sc, &bi);
        nd += d, ns += sc, nb += bi, rows += w->rows;
    }
    weight f = *p0;
    f.rows = rows;
    f.nbytes = 0;
    f.data = f.scales = f.biases = NULL;
    f.on_device = 1;
    if (!(f.data = cuda_alloc(b, nd)) || (ns && !(f.scales = cuda_alloc(b, ns))) || (nb && !(f.biases = cuda_alloc(b, nb)))) {
        release_weight(b, &f);
        return -1;
    }
    size_t od = 0, os = 0, ob = 0;
    for (int i = 0; i < n; i++) {
        weight *w = parts[i];
        weight_sizes(w, &d, &sc, &bi);
        cuda_upload(b, (char *)f.data + od, w->data, d);
        if (sc) cuda_upload(b, (char *)f.scales + os, w->scales, sc);
        if (bi) cuda_upload(b, (char *)f.biases + ob, w->biases, bi);
        w->data = (char *)f.data + od;
        w->scales = sc ? (char *)f.scales + os : NULL;
        w->biases = bi ? (char *)f.biases + ob : NULL;
        w->on_device = 2;
        f.nbytes += w->nbytes;
        od += d, os += sc, ob += bi;
    }
    *out = f;
    return take_failure(cu(b));
}

/* ---- expert routing and experts (op by op: the host groups tokens by expert) ---- */

/* Host staging for routing: bytes, grown as needed. */
static void *host_stage(cuda_backend *c, size_t bytes) {
    if (bytes <= c->host_route_cap) return c->host_route;
    void *p = realloc(c->host_route, bytes);
    if (!p) {
        err_set("out of memory staging %zu bytes of expert routing", bytes);
        cuda_fail(c);
        return NULL;
    }
    c->host_route = p;
    c->host_route_cap = bytes;
    return p;
}

/* Routing is a few hundred floats per token: it runs on the host, exactly as the
 * CPU backend computes it. */
void cuda_moe_route(backend *b, const float *logits, int T, int E, int k, int kind, const float *expert_scale,
                           int32_t *sel, float *w) {
    cuda_backend *c = cu(b);
    cuda_step_stop(c);
    if (c->failed) return;
    const size_t nl = (size_t)T * E, ns = (size_t)T * k;
    char *h = host_stage(c, (nl + (size_t)E + 2 * ns) * 4);
    if (!h) return;
    float *hl = (float *)h, *hs = hl + nl, *hw = hs + E;
    int32_t *hsel = (int32_t *)(hw + ns);
    cuda_download(b, hl, logits, nl * 4);
    if (expert_scale) cuda_download(b, hs, expert_scale, (size_t)E * 4);
    cuda_host()->moe_route(NULL, hl, T, E, k, kind, expert_scale ? hs : NULL, hsel, hw); /* the CPU's router */
    cuda_upload(b, sel, hsel, ns * 4);
    cuda_upload(b, w, hw, ns * 4);
    cudaStreamSynchronize(c->stream); /* the staging is reused by the next call */
}

static const float *bias_of(const float *base, long off) { return base ? base + off : NULL; }

/* The expert products below read each weight as [out, in]: input-major experts must
 * have been transposed at upload (a swapped weight would read past its input into
 * the output it writes). Every expert of a layer is bound alike, so the first one
 * stands for all (this runs every layer of every forward). */
static int experts_ok(const moe_experts *e) {
    const long H = e->hidden, I = e->inter;
    if (e->in_major) return err_set("cuda moe: input-major expert weights reached the GPU untransposed");
    if (e->n_experts < 1) return 0;
    const weight *a = e->layout == MOE_GU_SPLIT ? &e->gate[0] : &e->gate_up[0], *d = &e->down[0];
    const long want = e->layout == MOE_GU_SPLIT ? I : 2 * I;
    if (a->rows != want || a->cols != H || d->rows != H || d->cols != I)
        return err_set("cuda moe: experts are [%lld, %lld] and [%lld, %lld]; want [%ld, %ld] and [%ld, %ld]",
                       (long long)a->rows, (long long)a->cols, (long long)d->rows, (long long)d->cols, want, H, H, I);
    return 0;
}

void cuda_moe(backend *b, const moe_experts *e, const float *x, const int32_t *sel, const float *w, int T, float *out,
                     float *work) {
    cuda_backend *c = cu(b);
    cuda_step_stop(c);
    if (c->failed) return;
    const long H = e->hidden, I = e->inter;
    const int k = e->top_k;
    const size_t ns = (size_t)T * k;
    if (experts_ok(e) != 0) {
        cuda_fail(c);
        return;
    }
    /* host: which tokens each expert takes (grouped by expert, in token order) */
    char *h = host_stage(c, ns * 16 + (size_t)(e->n_experts + 1) * 4);
    if (!h) return;
    int32_t *hsel = (int32_t *)h;            /* [T, k] selections */
    float *hw = (float *)(hsel + ns);        /* [T, k] their weights */
    int32_t *hidx = (int32_t *)(hw + ns);    /* [n] tokens, grouped by expert */
    float *hwg = (float *)(hidx + ns);       /* [n] their weights */
    int32_t *off = (int32_t *)(hwg + ns);    /* [E + 1] group starts */
    cuda_download(b, hsel, sel, ns * 4);
    cuda_download(b, hw, w, ns * 4);
    int n = 0;
    for (int ex = 0; ex < e->n_experts; ex++) {
        off[ex] = n;
        for (int t = 0; t < T; t++)
            for (int j = 0; j < k; j++)
                if (hsel[(size_t)t * k + j] == ex) {
                    hidx[n] = t;
                    hwg[n] = hw[(size_t)t * k + j];
                    n++;
                }
    }
    off[e->n_experts] = n;
    int32_t *didx = cuda_grow(c, &c->moe_idx, ns * 4 + 16, "expert lists");
    float *dw = cuda_grow(c, &c->moe_w, ns * 4 + 16, "expert weights");
    if (!didx || !dw) return;
    cuda_upload(b, didx, hidx, (size_t)n * 4);
    cuda_upload(b, dw, hwg, (size_t)n * 4);
    cudaStreamSynchronize(c->stream); /* staging is rewritten by the next call */
    float *xg = work;                 /* [T, H] gathered inputs */
    float *gu = xg + (long)T * H;     /* [T, 2I] gate and up outputs */
    float *a = gu + (long)T * 2 * I;  /* [T, I] activations */
    float *o = a + (long)T * I;       /* [T, H] expert outputs */
    cuda_touch(c);
    if (!cuda_ok(c, cudaMemsetAsync(out, 0, (size_t)T * H * 4, c->stream), "moe")) return;
    for (int ex = 0; ex < e->n_experts; ex++) {
        const int m = off[ex + 1] - off[ex];
        if (!m) continue;
        const int32_t *ix = didx + off[ex];
        RUN(cuk_gather_rows(x, ix, m, H, xg, c->stream));
        const float *g, *u;
        long gs, gi;
        if (e->layout == MOE_GU_SPLIT) {
            cuda_matmul(b, &e->gate[ex], xg, gu, m);
            cuda_matmul(b, &e->up[ex], xg, gu + (long)T * I, m);
            if (e->gate_bias) RUN(cuk_add_rows(gu, e->gate_bias + ex * I, m, I, c->stream));
            if (e->up_bias) RUN(cuk_add_rows(gu + (long)T * I, e->up_bias + ex * I, m, I, c->stream));
            g = gu, u = gu + (long)T * I, gs = I, gi = 1;
        } else {
            cuda_matmul(b, &e->gate_up[ex], xg, gu, m);
            const float *bb = bias_of(e->gate_up_bias, ex * 2 * I);
            if (bb) RUN(cuk_add_rows(gu, bb, m, 2 * I, c->stream));
            gs = 2 * I;
            if (e->layout == MOE_GU_INTERLEAVED) g = gu, u = gu + 1, gi = 2;
            else g = gu, u = gu + I, gi = 1;
        }
        RUN(cuk_moe_act(g, u, gs, gi, I, m, e->act, e->alpha, e->limit, a, c->stream));
        cuda_matmul(b, &e->down[ex], a, o, m);
        if (e->down_bias) RUN(cuk_add_rows(o, e->down_bias + ex * H, m, H, c->stream));
        RUN(cuk_scatter_add(o, ix, dw + off[ex], m, H, out, c->stream));
    }
}

/* Best of several 1 GiB device-to-device copies, timed with events after a warm-up. */
static double bandwidth(backend *b) {
    cuda_backend *c = cu(b);
    const size_t n = (size_t)1 << 30;
    void *src = NULL, *dst = NULL;
    cudaEvent_t e0 = NULL, e1 = NULL;
    double best = -1;
    if (cudaMalloc(&src, n) == cudaSuccess && cudaMalloc(&dst, n) == cudaSuccess &&
        cudaEventCreate(&e0) == cudaSuccess && cudaEventCreate(&e1) == cudaSuccess) {
        cudaMemsetAsync(src, 1, n, c->stream);
        for (int i = 0; i < 8; i++) {
            cudaEventRecord(e0, c->stream);
            cudaMemcpyAsync(dst, src, n, cudaMemcpyDeviceToDevice, c->stream);
            cudaEventRecord(e1, c->stream);
            cudaEventSynchronize(e1);
            float ms = 0;
            cudaEventElapsedTime(&ms, e0, e1);
            double gbs = 2.0 * (double)n / (ms * 1e-3) / 1e9;
            if (i > 0 && gbs > best) best = gbs;
        }
    }
    cudaGetLastError();
    if (e0) cudaEventDestroy(e0);
    if (e1) cudaEventDestroy(e1);
    cudaFree(src);
    cudaFree(dst);
    return best;
}

static void destroy(backend *b) {
    cuda_backend *c = cu(b);
    if (c) {
        if (setting_flag(SET_CELER_STATS) && c->n_forwards > 0)
            fprintf(stderr, "cuda: %ld forwards (%ld step graph launches, %ld captures); per forward: %.0f kernel calls "
                            "enqueued one by one, %.1f uploads, %.2f waits, %.3f ms on the host from the last result to "
                            "the end of enqueueing, %.3f ms waiting for results\n",
                    c->n_forwards, c->n_replays, c->n_captures, (double)c->n_calls / c->n_forwards,
                    (double)c->n_uploads / c->n_forwards, (double)c->n_waits / c->n_forwards,
                    1e3 * c->t_enqueue / c->n_forwards, 1e3 * c->t_wait / c->n_forwards);
        if (setting_flag(SET_CELER_STATS) && c->r_forwards > 0)
            fprintf(stderr, "cuda: of them %ld replayed a step graph; per such forward: %.1f kernel calls enqueued one by "
                            "one, %.1f uploads, %.3f ms on the host from the last result to the end of enqueueing\n",
                    c->r_forwards, (double)c->r_calls / c->r_forwards, (double)c->r_uploads / c->r_forwards,
                    1e3 * c->r_enqueue / c->r_forwards);
        if (setting_flag(SET_CELER_STATS) && c->n_late_chosen > 0)
            fprintf(stderr, "cuda: %ld step graphs timed their small kernels' launch order: %ld chose late\n",
                    c->n_late_chosen, c->n_late_late);
        if (c->profile && c->n_forwards > 0) cuda_profile_print(c);
        if (c->stream) cudaStreamSynchronize(c->stream);
        cuda_steps_free(c);
        tl_free(c);
        for (int i = 0; i < 2; i++)
            if (c->prof_ev[i]) cudaEventDestroy(c->prof_ev[i]);
        cuda_tp_leave(c);
        grow_buf *g[] = {&c->mv, &c->xbf, &c->wbf, &c->att, &c->moe_idx, &c->moe_w, &c->smp, &c->y2, &c->gath};
        for (size_t i = 0; i < sizeof g / sizeof g[0]; i++) cudaFree(g[i]->p);
        if (c->blas) cublasDestroy(c->blas);
        cudaFree(c->blas_ws);
        if (c->stream) cudaStreamDestroy(c->stream);
        free(c->host_route);
        if (c->stage) cudaFreeHost(c->stage);
        for (int i = 0; i < 2; i++)
            if (c->left[i]) cudaEventDestroy(c->left[i]);
        for (int i = 0; i < SAMPLE_SLOTS; i++)
            if (c->sample_done[i]) cudaEventDestroy(c->sample_done[i]);
        if (c->sampled) cudaFreeHost(c->sampled);
        free(c);
    }
    free(b);
}

static const backend_ops cuda_ops = {
    .name = "CUDA",
    .on_device = 1,
    .alloc = cuda_alloc,
    .release = cuda_release,
    .copy = cuda_step_copy,
    .upload = cuda_upload,
    .download = cuda_download,
    .upload_weight = upload_weight,
    .upload_fused = upload_fused,
    .release_weight = release_weight,
    .destroy = destroy,
    .status = status,
    .bandwidth = bandwidth,
    .step_begin = cuda_step_begin,
    .step_end = cuda_step_end,
    .sample = cuda_sample,
    .sampled = cuda_sampled,
    .sample_rows = cuda_sample_rows,
    .sampled_rows = cuda_sampled_rows,
    .tp_join = cuda_tp_join,
    .tp_unique_id = cuda_tp_unique_id,
    .use_here = cuda_use_here,
    .fill_weight = fill_weight,
    .vm_reserve = cuda_vm_reserve,
    .vm_map = cuda_vm_map,
    .vm_free = cuda_vm_free,
    .mem_info = cuda_mem_info,
#define CUDA_OP_ENTRY(name, mode) .name = cuda_##name,
    BACKEND_OPS(CUDA_OP_ENTRY)
#undef CUDA_OP_ENTRY
};

backend *celer_backend_cuda_new(int device_id, int64_t max_cols, const cuda_host_api *host) {
    (void)max_cols;
    cuda_host_set(host); /* before anything can call err_set */
    int n = 0;
    cudaError_t e = cudaGetDeviceCount(&n);
    if (e != cudaSuccess || n == 0) {
        cudaGetLastError();
        err_set("--device cuda: no CUDA GPU (%s)", e != cudaSuccess ? cudaGetErrorString(e) : "0 devices");
        return NULL;
    }
    if (device_id >= n) {
        err_set("--device cuda:%d: this machine has %d GPU%s (cuda:0..cuda:%d)", device_id, n, n == 1 ? "" : "s", n - 1);
        return NULL;
    }
    backend *b = calloc(1, sizeof *b);
    cuda_backend *c = calloc(1, sizeof *c);
    if (!b || !c) {
        free(b);
        free(c);
        err_set("out of memory");
        return NULL;
    }
    b->ops = &cuda_ops;
    b->impl = c;
    b->threads = 0;
    b->device_id = device_id;
    c->id = device_id;
    c->graphs_off = -1;
    late_init(c);
    const char *prec = setting_str(SET_CELER_PRECISION); /* checked by the model (model/precision.c) */
    b->fast = !(prec && strcmp(prec, "exact") == 0);
    c->self = b;
    if ((e = cudaSetDevice(device_id)) != cudaSuccess || (e = cudaStreamCreateWithFlags(&c->stream, cudaStreamNonBlocking)) != cudaSuccess) {
        err_set("GPU %d: %s", device_id, cudaGetErrorString(e));
        destroy(b);
        return NULL;
    }
    if (cublasCreate(&c->blas) != CUBLAS_STATUS_SUCCESS || cublasSetStream(c->blas, c->stream) != CUBLAS_STATUS_SUCCESS) {
        err_set("GPU %d: cannot create a cuBLAS handle", device_id);
        destroy(b);
        return NULL;
    }
    cublasSetMathMode(c->blas, CUBLAS_DEFAULT_MATH);
    /* a fixed work space: cuBLAS then allocates nothing while a step is captured */
    if (cudaMalloc(&c->blas_ws, CUBLAS_WORKSPACE) != cudaSuccess ||
        cublasSetWorkspace(c->blas, c->blas_ws, CUBLAS_WORKSPACE) != CUBLAS_STATUS_SUCCESS) {
        err_set("GPU %d: cannot set a cuBLAS work space", device_id);
        destroy(b);
        return NULL;
    }
    if (cudaMallocHost((void **)&c->stage, 2 * STAGE_HALF) != cudaSuccess ||
        cudaEventCreateWithFlags(&c->left[0], cudaEventDisableTiming) != cudaSuccess ||
        cudaEventCreateWithFlags(&c->left[1], cudaEventDisableTiming) != cudaSuccess) {
        err_set("GPU %d: cannot allocate %zu MiB of pinned staging memory", device_id, 2 * STAGE_HALF >> 20);
        destroy(b);
        return NULL;
    }
    const long prof = setting_int(SET_CELER_PROFILE);
    const char *keep = setting_str(SET_CELER_PROFILE_KEEP);
    c->profile_keep = cuda_op_kind(keep);
    if (keep && c->profile_keep < 0)
        fprintf(stderr, "cuda: CELER_PROFILE_KEEP=%s names no op kind (add_rmsnorm, qk_norm_rope, attention, glu, ...); ignored\n",
                keep);
    c->profile = prof >= 2 && prof <= 9 ? (int)prof
                 : prof == 1 && cudaEventCreate(&c->prof_ev[0]) == cudaSuccess && cudaEventCreate(&c->prof_ev[1]) == cudaSuccess
                     ? 1
                     : 0;
    /* sampled tokens: written by the sampler kernel into mapped host memory */
    int ok = cudaHostAlloc((void **)&c->sampled, SAMPLE_SLOTS * SAMPLE_MAX_ROWS * sizeof(int32_t), cudaHostAllocMapped) ==
                 cudaSuccess &&
             cudaHostGetDevicePointer((void **)&c->sampled_dev, c->sampled, 0) == cudaSuccess;
    for (int i = 0; i < SAMPLE_SLOTS && ok; i++)
        ok = cudaEventCreateWithFlags(&c->sample_done[i], cudaEventDisableTiming) == cudaSuccess;
    if (!ok) {
        err_set("GPU %d: cannot allocate mapped memory for sampled tokens", device_id);
        destroy(b);
        return NULL;
    }
    if (!(c->values = malloc(STEP_VALUES)) || cudaMalloc(&c->dvalues, STEP_VALUES) != cudaSuccess) {
        c->dvalues = NULL;
        err_set("GPU %d: cannot allocate the %zu KiB step value block", device_id, STEP_VALUES >> 10);
        destroy(b);
        return NULL;
    }
    return b;
}
