/* backend/cpu/moe.c: mixture-of-experts on the CPU: routing (top-k selection and
 * weights) and the experts' gated products. Only selected experts run: for each
 * expert the tokens routed to it are gathered into one batch, so its weights are
 * read once per call whatever T is, and results are scattered back weighted.
 * Experts stored [out, in] go through the backend's matmul; input-major float
 * experts (transformers' gpt-oss bf16) through xw_task here, read in place. */
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "tensor/dtype.h"

/* Indices of the k largest of v [n] into sel [k], largest first; ties keep the lower index. */
static void top_k(const float *v, int n, int k, int32_t *sel) {
    for (int j = 0; j < k; j++) {
        int best = -1;
        for (int i = 0; i < n; i++) {
            int taken = 0;
            for (int q = 0; q < j; q++) taken |= sel[q] == i;
            if (!taken && (best < 0 || v[i] > v[best])) best = i;
        }
        sel[j] = best;
    }
}

void cpu_moe_route(backend *b, const float *logits, int T, int E, int k, int kind,
                   const float *expert_scale, int32_t *sel, float *w) {
    (void)b;
    float p[256];
    for (int t = 0; t < T; t++) {
        const float *lg = logits + (long)t * E;
        int32_t *st = sel + (long)t * k;
        float *wt = w + (long)t * k;
        if (kind == 0) {
            /* gpt-oss: softmax over the k selected logits */
            top_k(lg, E, k, st);
            float m = lg[st[0]], sum = 0;
            for (int j = 0; j < k; j++) sum += wt[j] = expf(lg[st[j]] - m);
            for (int j = 0; j < k; j++) wt[j] /= sum;
        } else {
            /* Gemma 4: probabilities over all experts, top-k, renormalized, scaled */
            float m = lg[0], sum = 0;
            for (int e = 1; e < E; e++) if (lg[e] > m) m = lg[e];
            for (int e = 0; e < E; e++) sum += p[e] = expf(lg[e] - m);
            for (int e = 0; e < E; e++) p[e] /= sum;
            top_k(p, E, k, st);
            float ks = 0;
            for (int j = 0; j < k; j++) ks += wt[j] = p[st[j]];
            for (int j = 0; j < k; j++) {
                wt[j] /= ks;
                if (expert_scale) wt[j] *= expert_scale[st[j]];
            }
        }
    }
}

/* One gated activation value of gate g and up u. */
static float gated(const moe_experts *e, float g, float u) {
    switch (e->act) {
    case 0: return g / (1.0f + expf(-g)) * u;
    case 1: {
        const float c = 0.7978845608028654f; /* sqrt(2/pi) */
        return 0.5f * g * (1.0f + tanhf(c * (g + 0.044715f * g * g * g))) * u;
    }
    default: {
        /* gpt-oss: gate clamped above, up clamped both ways, (up + 1) * gate * sigmoid(alpha gate) */
        if (g > e->limit) g = e->limit;
        if (u > e->limit) u = e->limit;
        if (u < -e->limit) u = -e->limit;
        return (u + 1.0f) * (g / (1.0f + expf(-e->alpha * g)));
    }
    }
}

/* Input-major products (transformers' gpt-oss bf16 experts, used in place):
 * x [n, in] @ W [in, out] -> y [n, out], W a float weight stored [rows = in, cols = out].
 * Threads split the output columns; each walks W's rows once over its columns in
 * blocks, so W is read once per call whatever n is. */
typedef struct {
    const weight *w;
    const float *x;
    float *y;
    int n;
} xw_job;

#define XW_BLOCK 256

static void xw_task(void *ctx, int task, int n_tasks) {
    const xw_job *j = ctx;
    const long in = (long)j->w->rows, out = (long)j->w->cols;
    long lo, hi;
    pool_range(out, task, n_tasks, 16, &lo, &hi);
    float seg[XW_BLOCK];
    for (long o0 = lo; o0 < hi; o0 += XW_BLOCK) {
        long nb = hi - o0 < XW_BLOCK ? hi - o0 : XW_BLOCK;
        for (int t = 0; t < j->n; t++) memset(j->y + t * out + o0, 0, (size_t)nb * sizeof(float));
        for (long i = 0; i < in; i++) {
            switch (j->w->fmt) {
            case WF_BF16: {
                const uint16_t *p = (const uint16_t *)j->w->data + i * out + o0;
                for (long o = 0; o < nb; o++) seg[o] = bf16_to_f32(p[o]);
                break;
            }
            case WF_F16: {
                const uint16_t *p = (const uint16_t *)j->w->data + i * out + o0;
                for (long o = 0; o < nb; o++) seg[o] = f16_to_f32(p[o]);
                break;
            }
            default: memcpy(seg, (const float *)j->w->data + i * out + o0, (size_t)nb * sizeof(float)); break;
            }
            for (int t = 0; t < j->n; t++) {
                float a = j->x[(long)t * in + i];
                float *yr = j->y + (long)t * out + o0;
                for (long o = 0; o < nb; o++) yr[o] += a * seg[o];
            }
        }
    }
}

/* y [n, out] = x [n, in] times expert weight w: W x for [out, in] weights, x W for
 * input-major ones. */
static void expert_product(backend *b, const moe_experts *e, const weight *w, const float *x, float *y, int n) {
    if (!e->in_major) {
        cpu_matmul(b, w, x, y, n);
        return;
    }
    cpu_backend *c = b->impl;
    xw_job j = {w, x, y, n};
    pool_run(c->pool, c->n_threads, xw_task, &j);
}

static void add_rows(float *y, const float *bias, int n, long width) {
    if (!bias) return;
    for (int r = 0; r < n; r++)
        for (long i = 0; i < width; i++) y[(long)r * width + i] += bias[i];
}

void cpu_moe(backend *b, const moe_experts *e, const float *x, const int32_t *sel, const float *w,
             int T, float *out, float *work) {
    const long H = e->hidden, I = e->inter;
    const int k = e->top_k;
    int32_t *tok = (int32_t *)work;          /* [T] tokens routed to the current expert */
    float *wt = work + T;                    /* [T] their routing weights */
    float *xg = wt + T;                      /* [T, H] gathered inputs */
    float *gu = xg + (long)T * H;            /* [T, 2I] gate and up outputs */
    float *a = gu + (long)T * 2 * I;         /* [T, I] activations */
    float *o = a + (long)T * I;              /* [T, H] expert outputs */
    memset(out, 0, (size_t)T * (size_t)H * sizeof *out);
    for (int ex = 0; ex < e->n_experts; ex++) {
        int n = 0;
        for (int t = 0; t < T; t++)
            for (int j = 0; j < k; j++)
                if (sel[(long)t * k + j] == ex) {
                    tok[n] = t;
                    wt[n] = w[(long)t * k + j];
                    memcpy(xg + (long)n * H, x + (long)t * H, (size_t)H * sizeof *xg);
                    n++;
                }
        if (!n) continue;
        /* gate/up: element i of row r is g[r * gs + i * gi], u[r * gs + i * gi] */
        const float *g, *u;
        long gs, gi;
        if (e->layout == MOE_GU_SPLIT) {
            cpu_matmul(b, &e->gate[ex], xg, gu, n);
            cpu_matmul(b, &e->up[ex], xg, gu + (long)T * I, n);
            add_rows(gu, e->gate_bias ? e->gate_bias + ex * I : NULL, n, I);
            add_rows(gu + (long)T * I, e->up_bias ? e->up_bias + ex * I : NULL, n, I);
            g = gu, u = gu + (long)T * I, gs = I, gi = 1;
        } else {
            expert_product(b, e, &e->gate_up[ex], xg, gu, n);
            add_rows(gu, e->gate_up_bias ? e->gate_up_bias + ex * 2 * I : NULL, n, 2 * I);
            gs = 2 * I;
            if (e->layout == MOE_GU_INTERLEAVED) g = gu, u = gu + 1, gi = 2;
            else g = gu, u = gu + I, gi = 1;
        }
        for (int r = 0; r < n; r++)
            for (long i = 0; i < I; i++) a[r * I + i] = gated(e, g[r * gs + i * gi], u[r * gs + i * gi]);
        expert_product(b, e, &e->down[ex], a, o, n);
        add_rows(o, e->down_bias ? e->down_bias + ex * H : NULL, n, H);
        for (int r = 0; r < n; r++) {
            float *dst = out + (long)tok[r] * H;
            const float *src = o + (long)r * H;
            for (long i = 0; i < H; i++) dst[i] += wt[r] * src[i];
        }
    }
}
