/* backend/cpu/cpu.h: internals shared by the CPU backend's files. */
#ifndef CELER_CPU_H
#define CELER_CPU_H
#include "backend/backend.h"
#include "base/pool.h"

typedef struct {
    pool *pool;
    int n_threads;
    int64_t max_cols;
    float *scratch;        /* [n_threads, scratch_per] per-thread matmul scratch */
    long scratch_per;
} cpu_backend;

/* Floats of per-thread scratch a matmul kernel may use for rows of `cols`. */
#define MM_TILE 8
#define MM_SCRATCH(cols) ((long)MM_TILE * (long)(cols) + 64)

/* Computes rows [r0, r1) of W [rows, cols] @ x [T, cols] -> y [T, rows].
 * scratch holds MM_SCRATCH(w->cols) floats owned by the calling thread. */
typedef void (*mm_kernel)(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch);

/* The fastest kernel for this weight format, batch size and CPU. */
mm_kernel mm_select(const weight *w, int T);
/* The portable reference kernel (every format; tests compare against it). */
void mm_portable(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch);
/* AVX2+FMA kernels (matmul_avx2.c), or NULL when the format has none there. */
mm_kernel mm_select_avx2(const weight *w, int T);
int cpu_has_avx2(void);

void cpu_matmul(backend *b, const weight *w, const float *x, float *y, int T);
void cpu_attention(backend *b, const float *q, const int32_t *qpos, int T, const attn_kv *kv,
                   const attn_params *p, float *out);
#endif
