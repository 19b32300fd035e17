/* backend/cuda/kv_elem.cuh: reading and writing KV cache elements of either element
 * type (kv_dtype: float32, or bf16 stored as uint16_t) as float, so one kernel
 * template serves both caches. */
#ifndef CELER_CUDA_KV_ELEM_CUH
#define CELER_CUDA_KV_ELEM_CUH
#include <stdint.h>

#include "backend/cuda/common.cuh"
extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

__device__ __forceinline__ float kv_ld(const float *p) { return *p; }
__device__ __forceinline__ float kv_ld(const uint16_t *p) { return __uint_as_float((uint32_t)*p << 16); }

/* A KV cache element from float: float32 rows copied, bf16 rows rounded to nearest
 * even (as the host rounds). */
__device__ __forceinline__ void kv_store(float *p, float x) { *p = x; }
__device__ __forceinline__ void kv_store(uint16_t *p, float x) { *p = f2bf16(x); }

/* The pool row of view row j: blocks NULL (a contiguous view) j itself, else row
 * j % CUK_KV_BLOCK of block blocks[j / CUK_KV_BLOCK] (a paged view, kv/pool.h). */
__device__ __forceinline__ long kv_slot(const int32_t *__restrict__ blocks, int j) {
    return blocks ? (long)blocks[j / CUK_KV_BLOCK] * CUK_KV_BLOCK + j % CUK_KV_BLOCK : (long)j;
}

/* A run of at most CUK_KV_BLOCK view rows from j0 (rows below end exist) spans at
 * most two blocks: two table lookups serve the run. Row j0 + j's pool row is
 * kv_run_slot(r, j). */
struct kv_run {
    long a, b;  /* j < split: a + j; else b + j */
    int split;
};
__device__ __forceinline__ kv_run kv_run_at(const int32_t *__restrict__ blocks, int j0, int end) {
    kv_run r;
    if (!blocks) {
        r.a = r.b = j0;
        r.split = CUK_KV_BLOCK;
        return r;
    }
    const int off = j0 % CUK_KV_BLOCK, next = j0 - off + CUK_KV_BLOCK;
    r.split = CUK_KV_BLOCK - off;
    r.a = (long)blocks[j0 / CUK_KV_BLOCK] * CUK_KV_BLOCK + off;
    r.b = next < end ? (long)blocks[next / CUK_KV_BLOCK] * CUK_KV_BLOCK - r.split : r.a;
    return r;
}
__device__ __forceinline__ long kv_run_slot(const kv_run &r, int j) { return (j < r.split ? r.a : r.b) + j; }

/* The element type of a kv_dtype, for templates: KVT_F32 -> float, KVT_BF16 -> uint16_t. */
template <int DT> struct kv_elem { typedef float type; };
template <> struct kv_elem<1> { typedef uint16_t type; };
#endif
