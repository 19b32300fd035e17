/* backend/cuda/moe.cu: the element-wise pieces of a mixture-of-experts layer on the
 * GPU: gathering the rows routed to one expert, its gated activation in any of the
 * three gate/up layouts (gpt-oss's clamped SwiGLU included), and the weighted
 * scatter back. The expert products themselves are ordinary matmuls. */
#include "backend/cuda/common.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

static inline unsigned blocks_for(long n, int per) { return (unsigned)((n + per - 1) / per); }

__global__ void kernel_gather(const float *x, const int32_t *idx, int n, long H, float *xg) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)n * H) return;
    const long r = i / H;
    xg[i] = x[(long)idx[r] * H + i % H];
}

extern "C" int cuk_gather_rows(const float *x, const int32_t *idx, int n, long H, float *xg, cuk_stream s) {
    kernel_gather<<<blocks_for((long)n * H, 256), 256, 0, (cudaStream_t)s>>>(x, idx, n, H, xg);
    return cuk_check("gather_rows");
}

/* Rows of one expert are distinct tokens, so no two threads add into one element. */
__global__ void kernel_scatter(const float *o, const int32_t *idx, const float *w, int n, long H, float *out) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)n * H) return;
    const long r = i / H;
    out[(long)idx[r] * H + i % H] += w[r] * o[i];
}

extern "C" int cuk_scatter_add(const float *o, const int32_t *idx, const float *w, int n, long H, float *out, cuk_stream s) {
    kernel_scatter<<<blocks_for((long)n * H, 256), 256, 0, (cudaStream_t)s>>>(o, idx, w, n, H, out);
    return cuk_check("scatter_add");
}

__global__ void kernel_moe_act(const float *g, const float *u, long gs, long gi, long I, int n, int act, float alpha,
                               float limit, float *a) {
    const long i = (long)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (long)n * I) return;
    const long r = i / I, c = i % I;
    float gv = g[r * gs + c * gi], uv = u[r * gs + c * gi];
    float y;
    if (act == 0) {
        y = gv / (1.f + expf(-gv)) * uv;
    } else if (act == 1) {
        const float k = 0.7978845608028654f;
        y = 0.5f * gv * (1.f + tanhf(k * (gv + 0.044715f * gv * gv * gv))) * uv;
    } else {
        gv = fminf(gv, limit);
        uv = fminf(fmaxf(uv, -limit), limit);
        y = (uv + 1.f) * (gv / (1.f + expf(-alpha * gv)));
    }
    a[i] = y;
}

extern "C" int cuk_moe_act(const float *g, const float *u, long gs, long gi, long I, int n, int act, float alpha, float limit,
                           float *a, cuk_stream s) {
    kernel_moe_act<<<blocks_for((long)n * I, 256), 256, 0, (cudaStream_t)s>>>(g, u, gs, gi, I, n, act, alpha, limit, a);
    return cuk_check("moe_act");
}
