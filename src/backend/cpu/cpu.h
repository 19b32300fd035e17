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
    struct tp_host_group_s *tp; /* the host group of a multi-rank model (collective.c), or NULL */
    void *xprep;           /* the fast precision's prepared activations (fast.c), grown on demand */
    long xprep_bytes;
    long pack_budget;      /* bytes weights may still pack (pack.c); -1 until the first */
    float *attn_part;      /* decode attention's per-split softmax state (attention.c), grown on demand */
    long attn_part_floats;
    void *attn_jobs;       /* a batched decode step's per-sequence jobs (attention.c), grown on demand */
    int attn_jobs_cap;
} cpu_backend;

/* Rows the portable kernel dequantizes at once. */
#define MM_TILE 8
/* Register tile of the packed GEMM (matmul_avx2.c): MM_MR activation rows times
 * MM_NR weight rows. The packed weight panel is [cols, MM_NR] float32. */
#define MM_MR 6
#define MM_NR 16
/* Register tile of the AVX-512 GEMM (matmul_avx512.c): panel [cols, MM512_NR]. */
#define MM512_MR 12
#define MM512_NR 32
/* Floats of per-thread scratch any matmul kernel may use for rows of `cols`:
 * the AVX-512 GEMM's packed panel [cols, MM512_NR] plus its 8-row dequant staging
 * [8, cols] (40 cols), more than the AVX2 GEMM's (24), the portable kernel's
 * [MM_TILE, cols] and the quantized GEMV's per-group activation sums, row scales and
 * transformed activations (< 5 cols); plus the GEMMs' edge tiles. Callers allocate
 * it 64-byte aligned. */
#define MM_SCRATCH(cols) (44L * (long)(cols) + 1024L)

/* Computes rows [r0, r1) of W [rows, cols] @ x [T, cols] -> y [T, rows].
 * scratch holds MM_SCRATCH(w->cols) floats owned by the calling thread, 64-byte
 * aligned. Each y element depends only on its weight row and x row (never on r0, r1
 * or the thread count), so any split of the rows gives bit-identical results. */
typedef void (*mm_kernel)(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch);

/* y[i] = silu(g[i]) u[i] for i < n at the avx512 level (ops_avx512.c): exp512's
 * polynomial, within a few ulp of the portable expf form. */
void glu_silu_avx512(const float *g, const float *u, float *y, long n);

/* Kernel levels (cpu_level.c): each includes the ones below it. */
enum { CPU_GENERIC = 0, CPU_AVX2 = 1, CPU_AVX512 = 2 };
/* The best level this processor and OS run. */
int cpu_level_hw(void);
/* The level in force: CELER_CPU (CELER_NO_SIMD=1: generic) when it names one the
 * processor has, else cpu_level_hw(). */
int cpu_level(void);
/* 0, or -1 and an error naming CELER_CPU's value when it is not a level or asks for
 * one this processor lacks (backend_cpu_new fails then). */
int cpu_level_check(void);
const char *cpu_level_name(int level);
/* Tests only: behave as if the processor ran at most `level` (-1: as it is), so the
 * errors and skips of a lesser processor are tested on this one. */
void cpu_level_pretend_hw(int level);
/* AVX512_BF16 / AVX512_VNNI present and the level in force is avx512. */
int cpu_has_avx512_bf16(void);
int cpu_has_avx512_vnni(void);
/* cpu_level() >= CPU_AVX2 */
int cpu_has_avx2(void);

/* The fastest kernel for this weight format, batch size and cpu_level(). */
mm_kernel mm_select(const weight *w, int T);
/* The same at a given level (<= cpu_level_hw(); tests compare every level). */
mm_kernel mm_select_level(const weight *w, int T, int level);
/* A short name for a kernel ("avx2 gemv bf16", "portable", ...), for benchmarks. */
const char *mm_kernel_name(mm_kernel k);
/* The portable reference kernel (every format; tests compare against it). */
void mm_portable(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch);
/* AVX2+FMA kernels (matmul_avx2.c), or NULL when the format has none there. */
mm_kernel mm_select_avx2(const weight *w, int T);
const char *mm_kernel_name_avx2(mm_kernel k);
/* The GEMMs' panel packing (AVX2 code, shared by the AVX-512 GEMM): weight rows
 * [r, r + nr) dequantized to panel [cols, np] (np % 8 == 0, nr <= np, missing rows
 * zero; panel 32-byte aligned), stage [8, cols] scratch. */
void mm_pack_panel_avx2(const weight *w, long r, long nr, float *panel, int np, float *stage);
/* AVX-512 kernels (matmul_avx512.c), or NULL where the AVX2 ones serve. */
mm_kernel mm_select_avx512(const weight *w, int T);
const char *mm_kernel_name_avx512(mm_kernel k);

/* ---- weights packed at load (pack.c) ------------------------------------------
 * bf16 weights get their 32-row GEMM panels in pair layout (u32 [ceil(cols/2), 32]
 * per panel) once, when cpu_level() is avx512 (the GEMMs that read them). */
/* 0 (also when w takes no packing, or its panels exceed *budget, which packing
 * lowers; NULL: no bound), -1 with a message. Off with CELER_CPU_PACK=0. */
int mm_pack_weight(weight *w, long *budget);
/* Half of MemAvailable in bytes (LONG_MAX where unknown): a backend's packing budget. */
long mm_pack_budget(void);
void mm_unpack_weight(weight *w);
long mm_bf16_panels_bytes(const weight *w);
/* The pair-layout panel of rows [r, r + 32) of bf16 w: the packed one, or packed
 * into own (u32 [ceil(cols/2), 32], 64-byte aligned) when w has none. */
const uint32_t *mm_bf16_panel(const weight *w, long r, uint32_t *own);
/* 4-bit affine weights (groups of 32, 64 or 128) interleaved by 16 rows for the
 * decode products under fast (w->interleaved; layout in pack.c), a second copy the
 * size of the weight, within *budget as mm_pack_weight. 0 (also when w does not
 * qualify), -1 with a message. */
int mm_q4r16_eligible(const weight *w);
int mm_pack_q4r16(weight *w, long *budget);
long mm_q4r16_block_bytes(const weight *w);
void mm_q4r16_block_parts(const weight *w, long b, const uint32_t **codes, const void **scales, const void **biases);

/* ---- the fast precision (fast.c; docs/cpu-kernels.md "Precision") -------------
 * Under CELER_PRECISION=fast (backend.fast) a product whose weight and T have a
 * rounding (mm_fast_kind) runs on prepared activations: cpu_matmul prepares x once
 * (mm_fast_prep_rows, all threads) into a buffer of mm_fast_prep_bytes, then runs
 * the kernel with that buffer as its x (an mm_kernel whose x is the prepared rows). */
/* MM_FAST_Q4DOT is the 4-bit decode shape (mm_fast_kind); mm_fast_select_level turns
 * it into MM_FAST_Q4W16 where that level runs the int16 kernel (mm_q4_decode_int16),
 * and that into MM_FAST_Q4R16 (the same rounding) where the weight is interleaved. */
enum { MM_FAST_NONE = 0, MM_FAST_BF16 = 1, MM_FAST_Q8 = 2, MM_FAST_QBF16 = 3, MM_FAST_Q4DOT = 4, MM_FAST_Q4W16 = 5,
       MM_FAST_Q4R16 = 6 };
/* MM_PREP_ROUND16: float rows on each 128-column chunk's int16 grid (mm_round16_chunk),
 * the portable reference's input for MM_FAST_Q4W16 and MM_FAST_Q4R16. */
enum { MM_PREP_NONE = 0, MM_PREP_ROUND = 1, MM_PREP_BF16 = 2, MM_PREP_Q8 = 3, MM_PREP_Q4DOT = 4, MM_PREP_Q4W16 = 5,
       MM_PREP_ROUND16 = 6, MM_PREP_Q4R16 = 7 };
/* Interleaved 4-bit weights take q4r16 from this many activation rows on (below, one
 * or two rows of a model streaming its weights ran faster on q4w16's row-major
 * layout: docs/cpu-kernels.md). */
#define MM_Q4R16_MIN_T 3
/* bf16 weights round their activations from this T on (prefill; decode is bound by
 * reading the weights, which rounding does not change). */
#define MM_FAST_MIN_T 9
typedef struct {
    int kind;    /* MM_FAST_* */
    int prep;    /* MM_PREP_*: what x the kernel reads */
    mm_kernel k;
} mm_fast;
int mm_fast_kind(const weight *w, int T);
/* 1 and *f for a product with a rounding at `level` (<= cpu_level_hw()), else 0. */
int mm_fast_select_level(const weight *w, int T, int level, mm_fast *f);
long mm_fast_prep_bytes(const weight *w, int T, int prep);
/* Rows [t0, t1) of x [T, cols] into the prepared buffer out (mm_fast_prep_bytes). */
void mm_fast_prep_rows(const weight *w, const float *x, int t0, int t1, int prep, void *out);
/* The Q8 prepared row (layout in fast.c): its stride and its parts. */
long mm_q8_row_bytes(const weight *w);
void mm_q8_row_parts(const weight *w, const void *row, const int8_t **q, const float **dexp, const float **gsum,
                     const float **d);
/* Portable kernels of the roundings (x: MM_PREP_BF16 / MM_PREP_Q8 / MM_PREP_ROUND rows). */
void mm_fast_portable_bf16(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch);
void mm_fast_portable_q8(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch);
void mm_fast_portable_qbf16(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch);
/* The avx2 GEMM with its float32 panel rounded to bf16 values (MM_FAST_QBF16 on
 * MM_PREP_ROUND rows; matmul_avx2.c). */
void mm_gemm_avx2_wround(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch);
/* avx512 with AVX512_BF16 / AVX512_VNNI (matmul_avx512dot.c): the kernel of `kind`,
 * or NULL where this processor lacks the instruction or the shape has none. */
mm_kernel mm_fast_select_avx512dot(const weight *w, int T, int kind);
/* q4dot's prepared row (MM_PREP_Q4DOT; layout in matmul_avx512dot.c): its stride in
 * bytes, and row x [cols] into out. */
long mm_q4dot_row_bytes(const weight *w);
void mm_q4dot_prep_row(const weight *w, const float *x, void *out);
/* The int16 rounding of MM_FAST_Q4W16 (fast.c): x [len <= 128] onto the grid of its
 * largest |value|, q [128] = round(x / d) (zero past len); returns d. */
float mm_round16_chunk(const float *x, long len, int32_t q[128]);
/* 1 where 4-bit decode products under fast take int16 activations at the avx512
 * level (CELER_CPU_Q4DEC; auto: AVX512_VNNI, and vdpbf16ps absent or measured at under
 * 2/3 of vpdpwssd's rate; q4w16_avx512dot.c), else 0. */
int mm_q4_decode_int16(void);
/* q4w16's prepared row (MM_PREP_Q4W16; layout in q4w16_avx512dot.c). */
long mm_q4w16_row_bytes(const weight *w);
void mm_q4w16_row_parts(const weight *w, const void *row, const float **xsum, const float **d, const int16_t **xq);
void mm_q4w16(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch);
void mm_q4w16_prep_row(const weight *w, const float *x, void *out);
/* q4r16's prepared row (MM_PREP_Q4R16): q4w16's layout and rounding with xq in pair
 * order (each 8 columns as 0, 4, 1, 5, 2, 6, 3, 7; q4r16_avx512dot.c). */
void mm_q4r16_prep_row(const weight *w, const float *x, void *out);
void mm_q4r16(const weight *w, const float *x, float *y, int T, long r0, long r1, float *scratch);
const char *mm_kernel_name_avx512dot(mm_kernel k);

/* The float32 FMA peak of `level` (<= cpu_level_hw()) with n_threads threads at
 * once, GFLOP/s (best of 3 register-only runs per thread, summed); -1 on error.
 * peak.c; the per-level loops return the flops they did. */
double cpu_fma_peak(int level, int n_threads);
double cpu_fma_chains_avx2(long iters, float *sink);
double cpu_fma_chains_avx512(long iters, float *sink);

/* The CPU's entry point of every op of backend/ops_list.h: cpu_<op>, with the table's
 * signature (element-wise ops in cpu.c, matmul.c, attention.c, moe.c). */
#define CPU_OP_PROTO(name, mode) void cpu_##name(backend *b OP_ARGS_##name(OPA_PARAM));
BACKEND_OPS(CPU_OP_PROTO)
#undef CPU_OP_PROTO
/* backend_ops.tp_join: shared is the tp_host_group (collective.c). */
int cpu_tp_join(backend *b, int rank, int world, void *shared);
#endif
