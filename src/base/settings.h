/* base/settings.h: every environment variable celer reads, declared once (name, type,
 * default, meaning) and read from the environment once per process. The rest of the
 * code asks this table (no getenv elsewhere); `celer --help-env` prints it and
 * docs/settings.md documents it. Tests and A/B drivers change a value in-process with
 * setting_override, never with setenv. */
#ifndef CELER_SETTINGS_H
#define CELER_SETTINGS_H

/* X(id, type, default, meaning). type: FLAG (0/1, also false/true, off/on, no/yes),
 * INT, STR. A NULL default means "unset". */
#define CELER_SETTINGS(X)                                                                                             \
    X(CELER_DEVICE, STR, "auto", "backend when --device is absent: cpu, cuda, cuda:N or auto")                      \
    X(CELER_CUDA_LIB, STR, NULL, "path of libceler-cuda.so (default: beside the celer binary, then the loader path)") \
    X(CELER_DEFAULT_MODEL, STR, NULL, "model directory used when -m is absent (default: the embedded models/default)") \
    X(CELER_STATS, FLAG, "0", "print KV-cache and device counters to stderr when a session or backend ends")        \
    X(CELER_KV_INPLACE_WRITE, FLAG, "1", "0: every KV row write takes the copying path (A/B runs; same results)")   \
    X(CELER_CPU, STR, NULL, "CPU kernel level: generic, avx2 or avx512 (default: the best this processor runs)")   \
    X(CELER_CPU_PACK, FLAG, "1", "0: no second copy of CPU weights at load (bf16 GEMM panels packed per product; 4-bit decode on the row-major layout)") \
    X(CELER_CPU_INT8, FLAG, "0", "1: with fast precision on the CPU, 4/8-bit products also take int8 activations (VNNI; outside the bf16 envelope)") \
    X(CELER_CPU_Q4DEC, STR, "auto", "4-bit products of 1-8 rows under fast precision on AVX-512: bf16 (vdpbf16ps on bf16 activations), int16 (vpdpwssd on int16 activations) or auto (int16 where vdpbf16ps measures under 2/3 of vpdpwssd's rate)") \
    X(CELER_NO_SIMD, FLAG, "0", "1: the same as CELER_CPU=generic (portable C kernels; CELER_CPU wins when set)")    \
    X(CELER_DECODE_BATCH, FLAG, "1", "0: a decode step of several sequences attends per sequence, unpadded (A/B)")    \
    X(CELER_DEVICE_SAMPLE, FLAG, "1", "0: a GPU session samples on the host and runs the unpipelined loop")         \
    X(CELER_BATCH_PIPELINE, FLAG, "1", "0: a batched decode step reads its tokens before the next is queued (A/B)")  \
    X(CELER_FUSE, FLAG, "1", "0: q/k/v and gate/up weights are uploaded separately instead of fused")              \
    X(CELER_GRAPH, FLAG, "1", "0: GPU decode steps run op by op instead of as captured CUDA graphs")               \
    X(CELER_PDL, FLAG, "1", "0: GPU kernels launch without programmatic dependent launch")                         \
    X(CELER_PDL_LATE, STR, "auto", "auto: each GPU step graph times its small kernels' two launch orders and keeps the faster; 0..63: a fixed mask by kernel kind (docs/cuda-backend.md)") \
    X(CELER_PROFILE, INT, "0", "1: time every GPU op alone (no graphs); 2: time the ops inside the step graphs; 3: a timeline of decode steps (graph replays, the ops between them, idle time); 4-9: decode steps taken apart, outputs not computed (docs/settings.md); totals at exit") \
    X(CELER_PROFILE_KEEP, STR, NULL, "under CELER_PROFILE 8 or 9: the op kind (add_rmsnorm, qk_norm_rope, attention, glu, ...) whose launches run as in the whole step") \
    X(CUK_MV_X1, FLAG, "1", "0: GPU T=1 affine products use the general kernel (A/B runs)")                        \
    X(CUK_MV_X1CFG, STR, NULL, "r2u4, r4u2, r8u1 or g64: force one T=1 affine kernel configuration (A/B runs)")   \
    X(CUK_MV_BATCH_MAX, INT, "4", "1..8: the most rows a GPU product runs with the matvec kernels (more: cuBLAS)")  \
    X(CUK_SKINNY, FLAG, "0", "1: bf16 GPU products of 5-32 rows use the tensor-core decode kernel (slower end to end today)") \
    X(CUK_SKINNY_MIN_T, INT, "5", "1..32: the fewest rows a bf16 GPU product runs with the tensor-core decode kernel")   \
    X(CUK_MV_ROWS, INT, "0", "1, 2 or 4: rows per warp of the GPU matvec kernels (0: measured default)")            \
    X(CUK_MV_INT8, FLAG, "0", "1: GPU quantized products round activations to int8 (dp4a kernels)")                \
    X(CUK_MV_I8X2, INT, "1", "0: fast-precision GPU one-row 4-bit products keep float activations; 1: two int8 terms on products of 2,048+ rows and 2,048+ columns; 2: on every shape (tests)") \
    X(CUK_SPLIT_ROPE_PUT, FLAG, "1", "0: a recorded GPU decode step of several rows splits its fused q|k|v rows in their own launch instead of in the q/k norm + RoPE kernel that writes the KV rows (A/B runs)") \
    X(CUK_STAGE_MIN_T, INT, "0", "the fewest rows whose GPU products read bf16 activations staged by the op before them (0: rows past CUK_MV_BATCH_MAX; A/B runs)") \
    X(CUK_STAGE_ATTN, FLAG, "1", "0: a batched GPU decode step's attention leaves its output's bf16 conversion to the o product instead of writing it too (A/B runs)") \
    X(CUK_ROPE_PUT, FLAG, "1", "0: a recorded GPU decode step writes its KV rows in their own launch instead of in the q/k norm + RoPE kernel (A/B runs)") \
    X(CUK_NORM_REG, INT, "2", "GPU add + RMSNorm: 2 a row that writes int8 pieces over a cluster of 8 blocks (4,096+ values), else as 1; 1 one block a row with the row in registers, 0 the loop form (a round trip a value; A/B runs, tests)") \
    X(CUK_MV_GLU, FLAG, "1", "0: a 16-bit gate|up product of up to 4 rows and the GLU after it run as two GPU launches instead of one (A/B runs, tests)") \
    X(CELER_PRECISION, STR, NULL, "fast or exact (unset: fast on the GPU, exact on the CPU; docs/cpu-kernels.md for the CPU's fast)")  \
    X(CELER_TP, INT, "0", "tensor-parallel ranks (--tp N): 0 off; N >= 1 splits the model over N GPUs, or N CPU threads") \
    X(CELER_TP_MASTER, STR, NULL, "--tp-master ADDR:PORT: rank 0's address that publishes the NCCL id (several hosts)") \
    X(CELER_TP_RANK_OFFSET, INT, "0", "--tp-rank-offset R: the global rank of this process's first GPU (several hosts)") \
    X(CELER_TP_WORLD, INT, "0", "--tp-world W: ranks over all hosts (0: --tp, one host)")  \
    X(CELER_SYNTH_FILL, FLAG, "0", "1: a GPU fills every weight with random values instead of reading the checkpoint (bench --synth)") \
    X(CELER_KV_DTYPE, STR, "auto", "auto, f32 or bf16: KV cache element type (auto: bf16 with fast precision, else f32)") \
    X(CUK_GEMM_BF16X1, FLAG, "0", "1: GPU bf16 GEMMs use one bf16 term instead of two (faster, less exact)")       \
    X(CUK_QGEMM, FLAG, "1", "0: GPU prefill products of quantized weights dequantize to bf16 for cuBLAS instead of the fused kernel") \
    X(CUK_QGEMM_MAX_T, INT, "128", "the most activation rows a GPU product of quantized weights runs with the fused dequantizing kernel (more: dequantize to bf16 for cuBLAS)") \
    X(CUK_QGEMM_MIN_ROWS, INT, "12288", "the fewest output features a GPU product of 65 or more activation rows needs to run with the fused dequantizing kernel (fewer: dequantize to bf16 for cuBLAS)") \
    X(CUK_SAMPLE_ONEBLOCK, FLAG, "0", "1: the GPU sampler uses one block at every vocabulary size")                \
    X(CUK_ATTN_NO_MMA, FLAG, "0", "1: GPU prefill over a bf16 KV cache uses the CUDA-core kernels, not flash attention on tensor cores") \
    X(CUK_ATTN_MMA_MIN_KEYS, INT, "256", "one-query GPU attention over a bf16 KV cache of at most this many keys (its bucket) uses the CUDA-core kernel, not flash attention") \
    X(CUK_FLASH_DECODE, FLAG, "1", "0: GPU attention rows that fit one 16-row tile (decode) over a bf16 cache past CUK_ATTN_MMA_MIN_KEYS keys take the 64-row flash tile instead of the lean flash-decoding kernel (A/B runs)") \
    X(CUK_ATTN_BATCH_MMA_MIN_KEYS, INT, "0", "a batched GPU decode step over a bf16 KV cache whose key bound is past this takes the lean flash-decoding kernel on tensor cores; at most this: the CUDA-core kernel (0: always tensor cores; A/B runs)") \
    X(CUK_ATTN_PER_QUERY, FLAG, "0", "1: GPU prefill attention uses the per-query kernel instead of tiles")         \
    X(CUK_ATTN_WARPS, INT, "0", "0: auto (8 for grids under two blocks an SM, else 4); 4, 8 or 16 forces the GPU decode attention's warps a block") \
    X(CELER_FUZZ_WIRE, FLAG, "0", "1: fuzz_server_request also sends inputs over a socket to a live server")       \
    X(HOME, STR, NULL, "where `celer run` keeps its history (~/.celer_history); the hub cache's last fallback")   \
    X(HF_HUB_CACHE, STR, NULL, "the Hugging Face hub cache models are looked up in and pulled to (docs/hub.md)")   \
    X(HF_HOME, STR, NULL, "Hugging Face's home: the hub cache is $HF_HOME/hub when HF_HUB_CACHE is unset")         \
    X(XDG_CACHE_HOME, STR, NULL, "the hub cache is $XDG_CACHE_HOME/huggingface/hub when HF_HOME is unset too")     \
    X(HF_ENDPOINT, STR, "https://huggingface.co", "the hub `celer pull` downloads from")                           \
    X(HF_TOKEN, STR, NULL, "celer pull: access token for gated and private models (sent as a Bearer token)")       \
    X(LLAMA_ARG_MODEL, STR, NULL, "serve: --model when the flag is absent (llama-server's name)")                  \
    X(LLAMA_ARG_ALIAS, STR, NULL, "serve: --alias")                                                                \
    X(LLAMA_ARG_HOST, STR, NULL, "serve: --host")                                                                  \
    X(LLAMA_ARG_PORT, STR, NULL, "serve: --port")                                                                  \
    X(LLAMA_ARG_CTX_SIZE, STR, NULL, "serve: --ctx-size")                                                          \
    X(LLAMA_ARG_N_PARALLEL, STR, NULL, "serve: --parallel")                                                        \
    X(LLAMA_ARG_N_PREDICT, STR, NULL, "serve: --n-predict")                                                        \
    X(LLAMA_ARG_THREADS, STR, NULL, "serve: --threads")                                                            \
    X(LLAMA_ARG_BATCH, STR, NULL, "serve: --batch-size")                                                           \
    X(LLAMA_API_KEY, STR, NULL, "serve: --api-key")                                                                \
    X(LLAMA_ARG_ENDPOINT_METRICS, STR, NULL, "serve: --metrics (1/true/on/enabled)")                               \
    X(LLAMA_ARG_NO_CACHE_PROMPT, STR, NULL, "serve: --no-cache-prompt (1/true/on/enabled)")                        \
    X(LLAMA_ARG_ENDPOINT_SLOTS, STR, NULL, "serve: --slots (1/true/on/enabled)")                                   \
    X(LLAMA_ARG_CACHE_PROMPT, STR, NULL, "serve: 0/false turns the prompt cache off (the positive spelling)")      \
    X(LLAMA_ARG_CACHE_RAM, STR, NULL, "serve: --cache-ram")                                                        \
    X(LLAMA_ARG_TIMEOUT, STR, NULL, "serve: --timeout")

typedef enum {
#define SETTING_ENUM(id, type, def, meaning) SET_##id,
    CELER_SETTINGS(SETTING_ENUM)
#undef SETTING_ENUM
        SET_COUNT
} setting_id;

/* The value in force (override, else environment, else default); NULL when unset.
 * An empty environment value counts as unset. */
const char *setting_str(setting_id id);
/* A FLAG's value: 1 or 0 (an unparsable value warns once on stderr and counts as
 * the default). */
int setting_flag(setting_id id);
/* An INT's value (an unparsable value warns once and counts as the default). */
long setting_int(setting_id id);
/* The id of a setting by its variable name, or -1. */
int setting_find(const char *name);
/* Replaces a value for this process (NULL: back to environment/default). For tests
 * and A/B drivers; not thread-safe against concurrent readers of the same id. */
void setting_override(setting_id id, const char *value);
#endif
