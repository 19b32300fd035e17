/* backend/cuda/fill.cu: random weights made in device memory (`celer bench --synth`,
 * docs/tensor-parallel.md): a counter-based hash of (seed, index) per element, so no
 * host buffer and no file ever holds them. */
#include "backend/cuda/common.cuh"
#include "backend/cuda/cuda_kernels.h"

__device__ static inline uint64_t mix64(uint64_t z) {
    z += 0x9E3779B97F4A7C15ull;
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

/* kind 0: random bytes; 1, 2, 3: bf16, f16, f32 uniform in [lo, hi) */
__global__ void kernel_fill(void *p, size_t n, int kind, float lo, float hi, uint64_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n; i += (size_t)gridDim.x * blockDim.x) {
        const uint64_t h = mix64(seed ^ mix64(i));
        const float u = lo + (hi - lo) * (float)(h >> 40) * (1.0f / 16777216.0f);
        switch (kind) {
        case 0: ((uint8_t *)p)[i] = (uint8_t)h; break;
        case 1: ((uint16_t *)p)[i] = (uint16_t)(__float_as_uint(u) >> 16); break;
        case 2: ((__half *)p)[i] = __float2half(u); break;
        default: ((float *)p)[i] = u; break;
        }
    }
}

extern "C" int cuk_fill(void *p, size_t n, int kind, float lo, float hi, uint64_t seed, cuk_stream s) {
    if (!n) return 0;
    const size_t blocks = (n + 255) / 256 < 65536 ? (n + 255) / 256 : 65536;
    kernel_fill<<<(unsigned)blocks, 256, 0, (cudaStream_t)s>>>(p, n, kind, lo, hi, seed);
    return cuk_check("fill");
}
