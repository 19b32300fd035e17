/* backend/cuda/prefetch.cu: L2 prefetch of a weight's first bytes. A decode step's
 * small kernels (norms, RoPE, the KV write, attention, the GLU) leave the memory
 * bus nearly idle between two products; step_ops.c launches this on a side stream
 * as each such run of small kernels starts, so the next product finds the head of
 * its weights in L2. The copy engine-free bulk prefetch (sm_90) moves the bytes;
 * the kernel's threads only issue it. */
#include "backend/cuda/common.cuh"

extern "C" {
#include "backend/cuda/cuda_kernels.h"
}

#define PF_CHUNK (16 << 10) /* bytes one bulk prefetch asks for */

/* Three ranges (the weight's data, scales and biases; a NULL range is skipped), each
 * 16-byte aligned with a size a multiple of 16: one chunk a thread, grid-strided. */
__global__ void kernel_l2_prefetch(const char *a, size_t na, const char *b, size_t nb, const char *c, size_t nc) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const size_t ca = (na + PF_CHUNK - 1) / PF_CHUNK, cb = (nb + PF_CHUNK - 1) / PF_CHUNK,
                 cc = (nc + PF_CHUNK - 1) / PF_CHUNK;
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < ca + cb + cc; i += (size_t)gridDim.x * blockDim.x) {
        const char *p;
        size_t n, off;
        if (i < ca) { p = a; n = na; off = i * PF_CHUNK; }
        else if (i < ca + cb) { p = b; n = nb; off = (i - ca) * PF_CHUNK; }
        else { p = c; n = nc; off = (i - ca - cb) * PF_CHUNK; }
        const unsigned len = (unsigned)(n - off < PF_CHUNK ? n - off : PF_CHUNK);
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"(len) : "memory");
    }
#endif
}

/* Bytes of one array a prefetch may ask for: n scaled by frac, kept 16-byte whole;
 * 0 for an array that is absent or not 16-byte aligned. */
static size_t pf_bytes(const void *p, size_t n, double frac) {
    if (!p || ((uintptr_t)p & 15)) return 0;
    return (size_t)((double)n * frac) & ~(size_t)15;
}

extern "C" int cuk_l2_prefetch(const weight *w, size_t cap, cuk_stream s) {
    size_t nd, ns, nb;
    weight_sizes(w, &nd, &ns, &nb);
    const size_t all = nd + ns + nb;
    if (!all || !cap) return 0;
    const double frac = all <= cap ? 1.0 : (double)cap / (double)all; /* the first rows of every array */
    const size_t a = pf_bytes(w->data, nd, frac), b = pf_bytes(w->scales, ns, frac), c = pf_bytes(w->biases, nb, frac);
    const size_t chunks = (a + b + c + PF_CHUNK - 1) / PF_CHUNK;
    if (!chunks) return 0;
    const unsigned threads = 32, blocks = (unsigned)((chunks + threads - 1) / threads < 64 ? (chunks + threads - 1) / threads : 64);
    kernel_l2_prefetch<<<blocks, threads, 0, (cudaStream_t)s>>>((const char *)w->data, a, (const char *)w->scales, b,
                                                               (const char *)w->biases, c);
    return cuk_check("l2 prefetch");
}
