/* backend/cuda/kv_elem.cuh: reading and writing KV cache elements of either element
 * type (kv_dtype: float32, or bf16 stored as uint16_t) as float, so one kernel
 * template serves both caches. */
#ifndef CELER_CUDA_KV_ELEM_CUH
#define CELER_CUDA_KV_ELEM_CUH
#include <stdint.h>

#include "backend/cuda/common.cuh"

__device__ __forceinline__ float kv_ld(const float *p) { return *p; }
__device__ __forceinline__ float kv_ld(const uint16_t *p) { return __uint_as_float((uint32_t)*p << 16); }

/* A KV cache element from float: float32 rows copied, bf16 rows rounded to nearest
 * even (as the host rounds). */
__device__ __forceinline__ void kv_store(float *p, float x) { *p = x; }
__device__ __forceinline__ void kv_store(uint16_t *p, float x) { *p = f2bf16(x); }

/* The element type of a kv_dtype, for templates: KVT_F32 -> float, KVT_BF16 -> uint16_t. */
template <int DT> struct kv_elem { typedef float type; };
template <> struct kv_elem<1> { typedef uint16_t type; };
#endif
