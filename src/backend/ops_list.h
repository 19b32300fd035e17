/* backend/ops_list.h: every arithmetic op of a backend, described once: its name, its
 * arguments and its shape contract. Everything else is generated from this list:
 * the op table's members (backend.h), the CPU entry points cpu_<op> (cpu/cpu.h, the
 * CPU table in cpu/cpu.c), the CUDA kernel launchers cuk_<op> (cuda/cuda_kernels.h),
 * the CUDA step records, their kinds, recorders, dispatch and profile names
 * (cuda/cuda_backend.h, cuda/step_ops.c). docs/howto.md "Add an op" says how to add
 * one.
 *
 * An op is OP_ARGS_<name>(A), its arguments in call order after the backend, each
 *   A(V, type, name)   passed and recorded by value (pointers to backend memory,
 *                      counts, scalars);
 *   A(S, type, name)   passed as `const type *name` (may be NULL) and recorded as a
 *                      copy of *name, so two steps that pass equal structs record the
 *                      same bytes (a struct type with padding must come from storage
 *                      that does not change between steps, or be re-copied field by
 *                      field in the op's CUSTOM hook: attention's attn_kv);
 * and a row X(name, mode) of BACKEND_OPS, where mode says how the CUDA backend runs it:
 *   KERNEL  recorded, then launched as cuk_<name>(arguments, stream) (S arguments as
 *           pointers to the recorded copies); nothing to write but the two kernels;
 *   CUSTOM  recorded, launched by hand-written code in cuda/step_ops.c (a choice of
 *           kernels, work space, values that change every step);
 *   HOST    never recorded: the backend writes cuda_<name> itself (the host must
 *           look at the data in the middle of the op).
 *
 * For example OP_ARGS_scale and X(scale, KERNEL) give the table member
 *   void (*scale)(backend *b, float *x, long n, float s);
 * the CPU entry `void cpu_scale(backend *b, float *x, long n, float s)` (written in
 * cpu/cpu.c), the CUDA launcher `int cuk_scale(float *x, long n, float s, cuk_stream)`
 * (written in cuda/ops.cu), and, generated, the record op_scale_args { float *x;
 * long n; float s; }, its kind SOP_scale, its recorder cuda_scale and its launch. */
#ifndef CELER_OPS_LIST_H
#define CELER_OPS_LIST_H

/* W [rows, cols] @ x [T, cols] -> y [T, rows] */
#define OP_ARGS_matmul(A) A(S, weight, w) A(V, const float *, x) A(V, float *, y) A(V, int, T)

/* y [T, n] = x * rsqrt(mean(x^2) + eps) * (w or 1 + w or 1 when w is NULL); y may be x */
#define OP_ARGS_rmsnorm(A) \
    A(V, const float *, x) A(V, const float *, w) A(V, float *, y) A(V, int, T) A(V, int, n) A(V, float, eps) \
    A(V, int, plus_one)

/* A residual add fused with the norms around it: x [T, n] += d', with d' = d *
 * rsqrt(mean(d^2) + eps) * (dw | 1 + dw) when dw is not NULL (a post-norm) and d
 * otherwise; then, when y is not NULL, y [T, n] = rmsnorm(x) as rmsnorm does with
 * w (NULL: no weight). y may be d. Same arithmetic as the separate ops. */
#define OP_ARGS_add_rmsnorm(A) \
    A(V, float *, x) A(V, const float *, d) A(V, const float *, dw) A(V, const float *, w) A(V, float *, y) \
    A(V, int, T) A(V, int, n) A(V, float, eps) A(V, int, plus_one)

/* Per head of q [T, n_heads, head_dim] and k [T, n_kv, head_dim] (k may be NULL),
 * in place: RMSNorm with qw / kw (NULL: no weight) when norm, then RoPE at
 * positions pos [T] when r is not NULL. Same arithmetic as rmsnorm and rope. */
#define OP_ARGS_qk_norm_rope(A) \
    A(V, float *, q) A(V, float *, k) A(V, int, T) A(V, int, n_heads) A(V, int, n_kv) A(V, int, head_dim) \
    A(V, int, norm) A(V, const float *, qw) A(V, const float *, kw) A(V, float, eps) A(V, int, plus_one) \
    A(V, const int32_t *, pos) A(S, rope_table, r)

/* x [T, n_heads, head_dim] rotated in place at positions pos [T] */
#define OP_ARGS_rope(A) \
    A(V, float *, x) A(V, int, T) A(V, int, n_heads) A(V, int, head_dim) A(V, const int32_t *, pos) \
    A(S, rope_table, r)

/* q [T, n_heads, head_dim] at positions qpos [T] over kv -> out [T, n_heads, head_dim]; causal */
#define OP_ARGS_attention(A) \
    A(V, const float *, q) A(V, const int32_t *, qpos) A(V, int, T) A(S, attn_kv, kv) A(S, attn_params, p) \
    A(V, float *, out)

/* A decode step of n sequences, one query row each, in one op: row i of
 * q [n, n_heads, head_dim] at position qpos[i] (backend memory) attends over its own
 * cache's view kvs[i] (a host array [n]; a view with k NULL or n 0 is a padding row,
 * whose output is zero) -> out [n, n_heads, head_dim], as attention computes each
 * row alone. max_keys bounds every kvs[i].n (a device backend sizes its key splits
 * by it); dtype is the kv_dtype of every view (one per model). */
#define OP_ARGS_attention_batch(A) \
    A(V, const float *, q) A(V, const int32_t *, qpos) A(V, int, n) A(V, const attn_kv *, kvs) A(V, int, max_keys) \
    A(V, int, dtype) A(S, attn_params, p) A(V, float *, out)

/* y [T, n] <- silu(g) * u (act 0) or gelu_tanh(g) * u (act 1), where row t of g
 * starts at g + t ldg and of u at u + t ldu (ldg, ldu >= n): the halves of a fused
 * gate|up product's rows (ldg = ldu = 2n), or a gate against one layer's slice of
 * wider rows. y may be g when ldg == n. */
#define OP_ARGS_glu(A) \
    A(V, const float *, g) A(V, long, ldg) A(V, const float *, u) A(V, long, ldu) A(V, float *, y) A(V, int, T) \
    A(V, long, n) A(V, int, act)

/* x [T, n0 + n1 + n2] (a fused q|k|v product's rows) -> y0 [T, n0], y1 [T, n1] and
 * y2 [T, n2] (n2 may be 0 with y2 NULL); no y may overlap x. */
#define OP_ARGS_split_cols(A) \
    A(V, const float *, x) A(V, int, T) A(V, long, n0) A(V, long, n1) A(V, long, n2) A(V, float *, y0) \
    A(V, float *, y1) A(V, float *, y2)

/* x [n] *= s */
#define OP_ARGS_scale(A) A(V, float *, x) A(V, long, n) A(V, float, s)

/* x [n] <- cap * tanh(x / cap) */
#define OP_ARGS_softcap(A) A(V, float *, x) A(V, long, n) A(V, float, cap)

/* Router logits [T, E] -> the top k experts of each token sel [T, k] and their
 * weights w [T, k]. kind 0: top-k of the logits, softmax over the k; kind 1:
 * softmax over all E, top-k, renormalized to sum 1, times expert_scale[e] (or 1). */
#define OP_ARGS_moe_route(A) \
    A(V, const float *, logits) A(V, int, T) A(V, int, E) A(V, int, k) A(V, int, kind) \
    A(V, const float *, expert_scale) A(V, int32_t *, sel) A(V, float *, w)

/* out [T, H] = sum over j < k of w[t, j] * expert_{sel[t, j]}(x [T, H]) where
 * expert(x) = down(act(gate(x) + bg, up(x) + bu)) + bd. Only the selected experts
 * run, each over the tokens routed to it. work holds MOE_WORK(T, H, I) floats. */
#define OP_ARGS_moe(A) \
    A(S, moe_experts, e) A(V, const float *, x) A(V, const int32_t *, sel) A(V, const float *, w) A(V, int, T) \
    A(V, float *, out) A(V, float *, work)

/* y [n] += x */
#define OP_ARGS_add(A) A(V, float *, y) A(V, const float *, x) A(V, long, n)

/* x [T, cols] = rows tok [T] (backend memory) of the embedding weight, times scale */
#define OP_ARGS_embed(A) A(S, weight, w) A(V, const int32_t *, tok) A(V, int, T) A(V, float, scale) A(V, float *, x)

/* Slots [slot, slot + n) of a cache buffer <- rows k, v [n, row] (backend memory):
 * kd, vd [slots, row] of element type dtype (kv_dtype: float32 rows are copied,
 * bf16 rows rounded to nearest even) and their positions pd [slots] <- pos [n]
 * (host memory). */
#define OP_ARGS_put_rows(A) \
    A(V, void *, kd) A(V, void *, vd) A(V, int32_t *, pd) A(V, long, row) A(V, int, slot) A(V, const float *, k) \
    A(V, const float *, v) A(V, const int32_t *, pos) A(V, int, n) A(V, int, dtype)

/* x [T, cols] = rows tok - lo of w for the tokens lo <= tok < lo + w.rows, zero rows
 * for the others, times scale: one rank's share of a vocabulary-split embedding (the
 * ranks' shares summed by all_reduce give embed's rows). */
#define OP_ARGS_embed_range(A) \
    A(S, weight, w) A(V, const int32_t *, tok) A(V, int, T) A(V, float, scale) A(V, float *, x) A(V, int, lo)

/* Tensor parallelism (backend.h tp_rank, tp_world; docs/tensor-parallel.md). Every
 * rank of a group calls the collectives in the same order with the same sizes.
 * all_reduce: x [n] <- the sum of x over the ranks, in place, the same bits on every
 * rank (a rank of one: nothing on the CPU; NCCL's one-rank sum on a GPU joined to a
 * communicator). */
#define OP_ARGS_all_reduce(A) A(V, float *, x) A(V, long, n)

/* The vocabulary-split logits gathered: rank r's part [T, n_r] (n_r = min(w, W - r w)
 * columns; its buffer holds T w floats) goes to columns [r w, r w + n_r) of full
 * [T, W] on every rank that passes full (a process's first rank; the others pass
 * NULL). */
#define OP_ARGS_gather_cols(A) A(V, float *, full) A(V, const float *, part) A(V, int, T) A(V, int, w) A(V, int, W)

#define BACKEND_OPS(X)      \
    X(matmul, CUSTOM)       \
    X(rmsnorm, KERNEL)      \
    X(add_rmsnorm, KERNEL)  \
    X(qk_norm_rope, KERNEL) \
    X(rope, KERNEL)         \
    X(attention, CUSTOM)    \
    X(attention_batch, CUSTOM) \
    X(glu, KERNEL)          \
    X(split_cols, KERNEL)   \
    X(scale, KERNEL)        \
    X(softcap, KERNEL)      \
    X(moe_route, HOST)      \
    X(moe, HOST)            \
    X(add, KERNEL)          \
    X(embed, KERNEL)        \
    X(put_rows, CUSTOM)     \
    X(embed_range, KERNEL)  \
    X(all_reduce, CUSTOM)   \
    X(gather_cols, CUSTOM)

/* ---- expanding an argument list (A is one of these) ---------------------------- */

/* ", type name" as a parameter of the op-table entry (after `backend *b`) */
#define OPA_PARAM(k, t, n) , OPA_PTYPE_##k(t) n
#define OPA_PTYPE_V(t) t
#define OPA_PTYPE_S(t) const t *
/* "type name," as a parameter of a kernel launcher (before the stream) */
#define OPA_KPARAM(k, t, n) OPA_PTYPE_##k(t) n,
/* the field of a record (an S argument: the copy and whether there was one) */
#define OPA_FIELD(k, t, n) OPA_FIELD_##k(t, n)
#define OPA_FIELD_V(t, n) t n;
#define OPA_FIELD_S(t, n) t n; int n##_set;
/* stores parameter n into the zeroed record *a_ */
#define OPA_STORE(k, t, n) OPA_STORE_##k(n)
#define OPA_STORE_V(n) a_->n = n;
#define OPA_STORE_S(n) if (n) { memcpy(&a_->n, n, sizeof a_->n); a_->n##_set = 1; }
/* "a_->n," as an argument of a kernel launcher, from the record *a_ */
#define OPA_ARG(k, t, n) OPA_ARG_##k(n),
#define OPA_ARG_V(n) a_->n
#define OPA_ARG_S(n) (a_->n##_set ? &a_->n : NULL)

/* Expands X(name) for the ops of one CUDA mode only: OPS_IF_KERNEL(name, mode, X) */
#define OPS_IF_KERNEL(name, mode, X) OPS_IF_KERNEL_##mode(name, X)
#define OPS_IF_KERNEL_KERNEL(name, X) X(name)
#define OPS_IF_KERNEL_CUSTOM(name, X)
#define OPS_IF_KERNEL_HOST(name, X)
/* ... and for the recorded ops (KERNEL and CUSTOM) */
#define OPS_IF_RECORDED(name, mode, X) OPS_IF_RECORDED_##mode(name, X)
#define OPS_IF_RECORDED_KERNEL(name, X) X(name)
#define OPS_IF_RECORDED_CUSTOM(name, X) X(name)
#define OPS_IF_RECORDED_HOST(name, X)
#endif
