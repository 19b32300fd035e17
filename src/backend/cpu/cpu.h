/* backend/cpu/cpu.h: internals shared by the CPU backend's files: the backend state,
 * the matmul kernel signature, its scratch contract and the kernel selectors, and the
 * entry points of the ops. */
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

/* Rows the portable kernel dequantizes at once. */
#define MM_TILE 8
/* Register tile of the packed GEMM (matmul_avx2.c): MM_MR activation rows times
 * MM_NR weight rows. The packed weight panel is [cols, MM_NR] float32. */
#define MM_MR 6
#define MM_NR 16
/* Floats of per-thread scratch any matmul kernel may use for rows of `cols`:
 * the GEMM's packed panel [cols, MM_NR] plus its 8-row dequant staging [8, cols]
 * (24 cols), more than the portable kernel's [MM_TILE, cols] and the quantized GEMV's
 * per-group activation sums, row scales and transformed activations (< 5 cols);
 * plus the GEMM's edge tile. Callers allocate it 64-byte aligned. */
#define MM_SCRATCH(cols) (28L * (long)(cols) + 1024L)

/* Computes rows [r0, r1) of W [rows, cols] @ x [T, cols] -> y [T, rows].
 * scratch holds MM_SCRATCH(w->cols) floats owned by the calling thread, 64-byte
 * aligned. Each y element depends only on its weight row and x row (never on r0, r1
 * or the thread count), so any split of the rows gives bit-identical results. */
typedef void (*mm_kernel)(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch);

/* The fastest kernel for this weight format, batch size and CPU. */
mm_kernel mm_select(const weight *w, int T);
/* A short name for a kernel ("avx2 gemv bf16", "portable", ...), for benchmarks. */
const char *mm_kernel_name(mm_kernel k);
/* The portable reference kernel (every format; tests compare against it). */
void mm_portable(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch);
/* AVX2+FMA kernels (matmul_avx2.c), or NULL when the format has none there. */
mm_kernel mm_select_avx2(const weight *w, int T);
const char *mm_kernel_name_avx2(mm_kernel k);
int cpu_has_avx2(void);

/* The CPU's entry point of every op of backend/ops_list.h: cpu_<op>, with the table's
 * signature (element-wise ops in cpu.c, matmul.c, attention.c, moe.c). */
#define CPU_OP_PROTO(name, mode) void cpu_##name(backend *b OP_ARGS_##name(OPA_PARAM));
BACKEND_OPS(CPU_OP_PROTO)
#undef CPU_OP_PROTO
#endif
