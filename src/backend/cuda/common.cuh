/* backend/cuda/common.cuh: helpers shared by the CUDA kernel files: error checks,
 * warp reductions, bf16/f16 loads. */
#ifndef CELER_CUDA_COMMON_CUH
#define CELER_CUDA_COMMON_CUH
#include <cuda_fp16.h>
#include <cuda_runtime.h>
#include <stdint.h>
#include <stdlib.h>

extern "C" {
#include "base/err.h"
#include "base/settings.h"
}

/* An A/B switch (base/settings.h) read once (cache starts at -1). */
static inline int cuk_env_flag(setting_id id, int *cache) {
    if (*cache < 0) *cache = setting_flag(id);
    return *cache;
}

/* The current device's SM count, asked once per device (launch sizing). */
static inline int cuk_sm_count(void) {
    static int sms[16];
    int dev = 0;
    cudaGetDevice(&dev);
    if (dev < 0 || dev >= 16) dev = 15;
    if (!sms[dev] && cudaDeviceGetAttribute(&sms[dev], cudaDevAttrMultiProcessorCount, dev) != cudaSuccess) sms[dev] = 0;
    return sms[dev] > 0 ? sms[dev] : 132;
}

/* After a launch: the launch error, if any, as an err_set message naming the kernel. */
static inline int cuk_check(const char *what) {
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess) return err_set("cuda %s: %s", what, cudaGetErrorString(e));
    return 0;
}

/* Programmatic dependent launch (sm_90): a kernel started with cuk_launch may begin
 * while the kernel before it is finishing, which hides most of the gap between two
 * kernels of a decode step. cuk_pdl_start() lets the next kernel launch (its blocks
 * then wait in their own cuk_pdl_start) and waits until every earlier kernel has
 * finished and its writes are visible. Every kernel started with cuk_launch calls
 * it before it reads or writes anything earlier kernels touch (weights, which no
 * kernel writes, may be read first). Only decode steps launch this way (below);
 * CELER_PDL=0 launches plainly, for A/B runs. */
__device__ __forceinline__ void cuk_pdl_start() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

/* The small kernels of a decode step, by kind: the bits of the launch-order mask. A
 * kind whose bit is set lets the next kernel launch only once the kernel before it has
 * finished, so a product that follows starts (and asks for its first weights) while
 * the small kernel runs, not while the product before it still streams its own. Which
 * order is faster depends on the model (docs/benchmarks/cuda-batched.md, twelfth
 * session: every kind late gave gemma3-4b +8.5%, llama3-8b -1.3% and its q4 -3.5%), so
 * the mask is a value read at run time: each step graph times both orders over its
 * first replays and keeps the faster (late_order.c; CELER_PDL_LATE fixes it). */
#define CUK_LATE_NORM 1  /* rmsnorm, add + rmsnorm */
#define CUK_LATE_ROPE 2  /* q/k norm + RoPE, RoPE */
#define CUK_LATE_GLU 4   /* gated activations */
#define CUK_LATE_PUT 8   /* KV row writes */
#define CUK_LATE_ATTN 16 /* attention (CUDA-core and flash) and the merges of its splits */
#define CUK_LATE_OTHER 32
#define CUK_LATE_ALL 63

/* The mask in force. Without relocatable device code every .cu file has its own copy;
 * each registers a setter and a getter below (a static initializer), and
 * cuk_set_late (ops.cu) sets them all. */
static __constant__ int cuk_late_mask;

__device__ __forceinline__ void cuk_pdl_start_small(int kind) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    if (cuk_late_mask & kind) {
        asm volatile("griddepcontrol.wait;" ::: "memory");
        asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
        return;
    }
#endif
    cuk_pdl_start();
}

/* src: a device address holding the mask (a stream-ordered copy, no host staging) */
typedef struct {
    void (*set)(const int *src, cudaStream_t s);
    int (*get)(void);
} cuk_late_file;
extern "C" int cuk_late_register(cuk_late_file f);
static void cuk_late_set_here(const int *src, cudaStream_t s) {
    cudaMemcpyToSymbolAsync(cuk_late_mask, src, sizeof(int), 0, cudaMemcpyDeviceToDevice, s);
}
static int cuk_late_get_here(void) {
    int m = -1;
    if (cudaMemcpyFromSymbol(&m, cuk_late_mask, sizeof m) != cudaSuccess) return -1;
    return m;
}
__attribute__((unused)) static const int cuk_late_registered = cuk_late_register({cuk_late_set_here, cuk_late_get_here});

/* Set (cuk_set_pdl) while a recorded decode step is captured or run: prefill's large
 * grids measured slower with early launches (their waiting blocks hold SM slots). */
extern thread_local int cuk_pdl_step;

static inline int cuk_pdl_enabled() {
    static int on = -1;
    if (on < 0) {
        on = setting_flag(SET_CELER_PDL);
    }
    return on && cuk_pdl_step;
}

/* k<<<g, b, smem, s>>>(a...) in thread-block clusters of shape cl (all 1: none; g a
 * multiple of cl in each dimension), allowed to overlap the kernel before it (see
 * above); errors are left for cuk_check. */
template <typename... P, typename... A>
static inline void cuk_launch_cluster(void (*k)(P...), dim3 g, dim3 b, size_t smem, cudaStream_t s, dim3 cl, A... a) {
    cudaLaunchAttribute at[2];
    int na = 0;
    if (cl.x * cl.y * cl.z > 1) {
        at[na].id = cudaLaunchAttributeClusterDimension;
        at[na].val.clusterDim.x = cl.x;
        at[na].val.clusterDim.y = cl.y;
        at[na].val.clusterDim.z = cl.z;
        na++;
    }
    if (cuk_pdl_enabled()) {
        at[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[na].val.programmaticStreamSerializationAllowed = 1;
        na++;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = g;
    cfg.blockDim = b;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = s;
    cfg.attrs = at;
    cfg.numAttrs = na;
    cudaLaunchKernelEx(&cfg, k, a...);
}

/* k<<<g, b, smem, s>>>(a...), allowed to overlap the kernel before it (see above);
 * errors are left for cuk_check. */
template <typename... P, typename... A>
static inline void cuk_launch(void (*k)(P...), dim3 g, dim3 b, size_t smem, cudaStream_t s, A... a) {
    cuk_launch_cluster(k, g, b, smem, s, dim3(1, 1, 1), a...);
}

__device__ __forceinline__ float warp_sum(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

__device__ __forceinline__ float warp_max(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, o));
    return v;
}

/* act 0: SiLU(v) * w, else GELU (tanh form)(v) * w: the GLU kernels and the products
 * that apply it to their own rows (the same expression, so the same bits) */
__device__ __forceinline__ float glu_act(float v, float w, int act) {
    if (act == 0) return v / (1.f + expf(-v)) * w;
    const float k = 0.7978845608028654f;
    return 0.5f * v * (1.f + tanhf(k * (v + 0.044715f * v * v * v))) * w;
}

__device__ __forceinline__ float bf16f(uint16_t b) { return __uint_as_float((uint32_t)b << 16); }
/* the two bf16 halves of a 32-bit word */
__device__ __forceinline__ float bf16lo(uint32_t w) { return __uint_as_float(w << 16); }
__device__ __forceinline__ float bf16hi(uint32_t w) { return __uint_as_float(w & 0xffff0000u); }

__device__ __forceinline__ float f16f(uint16_t h) { return __half2float(__ushort_as_half(h)); }

/* Round to nearest even, as the CPU side does. */
__device__ __forceinline__ uint16_t f2bf16(float f) {
    uint32_t u = __float_as_uint(f);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

__device__ __forceinline__ float scale_load(const void *p, int stype, int64_t i) {
    if (stype == 0) return bf16f(((const uint16_t *)p)[i]);
    if (stype == 1) return f16f(((const uint16_t *)p)[i]);
    return ((const float *)p)[i];
}

/* scale_load with the scale type known at compile time (ST 0 bf16, 1 f16, 2 f32),
 * through the read-only cache */
template <int ST>
__device__ __forceinline__ float scale_ld(const void *p, long i) {
    if (ST == 0) return bf16f(__ldg((const unsigned short *)p + i));
    if (ST == 1) return __half2float(__ushort_as_half(__ldg((const unsigned short *)p + i)));
    return __ldg((const float *)p + i);
}

/* cp.async: 16 bytes global -> shared (through L2 only), groups committed and waited
 * for (at most N groups left in flight). */
__device__ __forceinline__ void cuk_cp16(void *s, const void *g) {
    const uint32_t a = (uint32_t)__cvta_generic_to_shared(s);
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;" ::"r"(a), "l"(g));
}
__device__ __forceinline__ void cuk_cp_commit() { asm volatile("cp.async.commit_group;" ::: "memory"); }
template <int N> __device__ __forceinline__ void cuk_cp_wait() { asm volatile("cp.async.wait_group %0;" ::"n"(N) : "memory"); }

/* A 16-byte load that bypasses L1 allocation hints: weights are read once. */
__device__ __forceinline__ uint4 ld_stream(const void *p) {
    uint4 r;
    asm volatile("ld.global.nc.L1::no_allocate.v4.u32 {%0,%1,%2,%3}, [%4];"
                 : "=r"(r.x), "=r"(r.y), "=r"(r.z), "=r"(r.w)
                 : "l"(p));
    return r;
}
#endif
