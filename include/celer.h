/* celer.h: the public API of celer, an LLM inference engine.
 *
 * A model is a checkpoint directory (config.json + safetensors, Hugging Face or
 * mlx-community layout) opened once; a session holds one conversation's KV caches
 * and scratch buffers and feeds tokens through the model.
 *
 *     celer_model *m = celer_model_open("path/to/ckpt", 0);   // 0: all cores
 *     if (!m) { fprintf(stderr, "%s\n", celer_last_error()); return 1; }
 *     celer_session *s = celer_session_new(m, 4096, 512);
 *     int32_t prompt[] = {1, 15043, 29892};
 *     celer_session_eval(s, prompt, 3, NULL, 0);              // prefill
 *     int32_t next = celer_session_argmax(s);                 // greedy pick
 *     celer_session_eval(s, &next, 1, NULL, 0);               // one decode step
 *     celer_session_free(s);
 *     celer_model_free(m);
 *
 * Every function that can fail returns NULL or -1 and leaves a message naming what
 * failed and where in celer_last_error() (per thread). Every *_free accepts NULL.
 */
#ifndef CELER_H
#define CELER_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct celer_model celer_model;
typedef struct celer_session celer_session;

/* The message of the last failure on this thread ("" if none). */
const char *celer_last_error(void);

/* Opens a checkpoint directory with n_threads CPU threads (<= 0: all cores).
 * Weights are mapped, not copied. NULL on error. */
celer_model *celer_model_open(const char *dir, int n_threads);
void celer_model_free(celer_model *m);

typedef struct {
    const char *model_type;   /* config.json model_type, e.g. "llama" */
    const char *family;       /* the family description used */
    const char *format;       /* weight format of the projections, e.g. "bf16", "q4/g64" */
    const char *backend;      /* "CPU" */
    int threads;
    int vocab_size, hidden_size, n_layers, max_context;
    int bos_token, eos_token; /* -1 when the config names none */
    int64_t n_params;         /* logical parameters (quantized ones counted unpacked) */
    uint64_t weight_bytes;    /* bytes of weights one token's forward reads */
} celer_model_info;

void celer_model_get_info(const celer_model *m, celer_model_info *info);

/* A session with room for ctx_size tokens of context (<= 0: the model's limit)
 * that feeds at most max_batch tokens per forward (longer inputs are split). */
celer_session *celer_session_new(celer_model *m, int ctx_size, int max_batch);
void celer_session_free(celer_session *s);

/* Feeds n tokens after those already in the session. When logits is not NULL it
 * receives [n, vocab] floats (the logits after every input token) if all_rows,
 * else [vocab] for the last token only. On error nothing is added to the session. */
int celer_session_eval(celer_session *s, const int32_t *tokens, int n, float *logits, int all_rows);
/* Logits [vocab] after the last fed token (valid after a successful eval). */
const float *celer_session_logits(const celer_session *s);
/* argmax of celer_session_logits (lowest id on ties). */
int32_t celer_session_argmax(const celer_session *s);
/* Tokens in the session's context. */
int celer_session_pos(const celer_session *s);
/* Drops the context after the first n tokens (n <= pos). */
int celer_session_rewind(celer_session *s, int n);

/* Greedy generation: feeds prompt (n_prompt tokens), then generates up to n_gen
 * tokens into out, stopping after stop_token when stop_token >= 0. Returns the
 * number generated, or -1. */
int celer_generate_greedy(celer_session *s, const int32_t *prompt, int n_prompt, int n_gen,
                          int32_t stop_token, int32_t *out);

/* Writes a safetensors file with one float32 tensor of the given shape. */
int celer_save_f32(const char *path, const char *name, const float *data, int ndim, const int64_t *shape);

/* Writes a random-weight checkpoint of a published model's shape (see
 * celer_synth_shapes) into dir: config.json and model.safetensors, bf16 or, with
 * q4, MLX affine 4-bit (group 64). progress may be NULL. */
int celer_synth(const char *shape, const char *dir, int q4, uint64_t seed,
                void (*progress)(double done, void *ctx), void *ctx);
/* NULL-terminated list of shape names celer_synth knows. */
const char *const *celer_synth_shapes(void);

/* Measures the memory read bandwidth of this machine with n_threads, in GB/s. */
double celer_measure_read_bandwidth(int n_threads);
/* Floating-point operations per prompt token of the layers' matrix products
 * (2 x their parameters; attention scores and the LM head excluded). */
double celer_model_layer_flops_per_token(const celer_model *m);
/* Bytes of KV cache one token of context adds (all layers, keys and values). */
uint64_t celer_model_kv_bytes_per_token(const celer_model *m);

#ifdef __cplusplus
}
#endif
#endif
