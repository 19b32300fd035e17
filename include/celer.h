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
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct celer_model celer_model;
typedef struct celer_session celer_session;

/* The message of the last failure on this thread ("" if none). */
const char *celer_last_error(void);

/* The value of one of the environment variables celer reads (CELER_*, llama-server's
 * LLAMA_ARG_*, HOME: the table in docs/settings.md), read once per process; NULL when
 * unset or when name is not in the table. */
const char *celer_setting(const char *name);
/* Sets one of those for this process, as a command-line flag that stands for one
 * does (`--precision` sets CELER_PRECISION); value NULL goes back to the
 * environment. Call before opening models; not thread-safe against readers. -1 when
 * name is not in the table. */
int celer_setting_set(const char *name, const char *value);
/* Prints that table (name, type, default, meaning, value when set) to f. */
void celer_settings_print(FILE *f);
/* The CPU kernel level in force ("avx512 +bf16 +vnni, fast 4-bit decode: int16", "avx2",
 * "generic": the best this processor runs, or the one CELER_CPU forces; at avx512 also
 * the kernel CELER_CPU_Q4DEC picks for fast 4-bit decode products); static storage. */
const char *celer_cpu_kernels(void);
/* The float32 FMA peak of that level with n_threads threads at once, GFLOP/s,
 * measured now by a register-only loop (~0.5 s); -1 on error. */
double celer_cpu_fma_peak(int n_threads);

/* Opens a checkpoint directory with n_threads CPU threads (<= 0: all cores).
 * Weights are mapped, not copied. NULL on error. */
celer_model *celer_model_open(const char *dir, int n_threads);
/* The same on a named device: "cpu", "cuda", "cuda:N", or NULL/"auto" (what
 * celer_model_open does: $CELER_DEVICE when set, else a GPU when one is present and
 * libceler-cuda.so loads, else the CPU). */
celer_model *celer_model_open_on(const char *dir, int n_threads, const char *device);
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
    const char *precision;    /* "fast" or "exact" (CELER_PRECISION; default fast on a GPU, exact on the CPU) */
    const char *kv_dtype;     /* the KV cache's element type, "f32" or "bf16" (CELER_KV_DTYPE) */
} celer_model_info;

void celer_model_get_info(const celer_model *m, celer_model_info *info);

/* A model family the loader reads. */
typedef struct {
    const char *name;                 /* the family description, e.g. "gemma3" */
    const char *title;                /* the name its publisher uses, e.g. "Gemma 3" */
    const char *const *model_types;   /* config.json model_type values it reads, NULL-terminated */
} celer_family;

/* The families celer_model_open accepts, in the order it tries them; *n gets their
 * count. Static storage; never fails. */
const celer_family *celer_families(int *n);

#define CELER_MAX_DTYPES 8

/* The checkpoint's tensors as stored (what mapping the weights takes). */
typedef struct {
    uint64_t file_bytes;       /* bytes of every tensor in every safetensors shard */
    int64_t tensors;
    int shards;
    int n_dtypes;
    struct {
        const char *dtype;     /* safetensors dtype, e.g. "BF16", "U32" (packed MLX codes) */
        uint64_t bytes;
        int64_t tensors;
    } dtypes[CELER_MAX_DTYPES]; /* [n_dtypes], most bytes first */
} celer_weights_info;

void celer_model_weights_info(const celer_model *m, celer_weights_info *out);

/* The KV cache of a session with ctx tokens of context: keys and values (float32;
 * the 4-byte position of each row is not counted), by cache kind as sessions choose
 * it: a layer whose sliding window is shorter than the context gets a rotating cache
 * that holds its last `window` rows (up to window - 1 + T while a prompt chunk of T
 * tokens goes in); a layer that reads another layer's cache (Gemma 4 KV sharing)
 * holds none; every other layer a dense one that holds every position. */
typedef struct {
    int ctx;                        /* the context it describes */
    int dense_layers, rotating_layers;
    int shared_layers;              /* layers that read another layer's cache (none of their own) */
    int window;                     /* the largest window of the rotating layers (0: none) */
    uint64_t dense_token_bytes;     /* bytes each token adds over the dense layers */
    uint64_t rotating_token_bytes;  /* bytes each token adds over the rotating layers until their windows fill */
    uint64_t dense_bytes;           /* the dense layers at ctx tokens: ctx * dense_token_bytes */
    uint64_t rotating_bytes;        /* the rotating layers at ctx tokens: window rows each */
} celer_kv_info;

/* Fills out for a context of ctx tokens (<= 0: the model's max context); its
 * dense_bytes + rotating_bytes is celer_model_kv_bytes(m, ctx). Never fails. */
void celer_model_kv_info(const celer_model *m, int ctx, celer_kv_info *out);

/* Bytes of keys and values (float32) the caches of a session of m hold with n_tokens
 * tokens in its context: shared layers hold none, sliding-window layers at most their
 * window, the others every token. It is what celer_session_kv_stats reports as
 * held_bytes after single-token steps (a prompt chunk of T tokens briefly adds up to
 * T - 1 rows to each rotating cache), and the one figure `celer inspect`, `celer
 * bench` and the server's /metrics report. 0 for n_tokens <= 0. Never fails. */
uint64_t celer_model_kv_bytes(const celer_model *m, int n_tokens);

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

/* Feeds n_tokens[i] tokens (tokens[i]) to sessions[i] for each of the n distinct
 * sessions of one model, as one step (the server's continuous batching: several
 * conversations share each decode step's matrix products). Afterwards
 * celer_session_logits(sessions[i]) holds session i's last logits, for the sessions
 * whose want_logits[i] is non-zero (want_logits NULL: all of them); the others skip
 * the output layer and have no logits (a prompt chunk that is not its prompt's last).
 * On error no session advances. */
int celer_batch_eval(celer_session *const *sessions, const int32_t *const *tokens, const int *n_tokens,
                     const unsigned char *want_logits, int n);

/* ---- Sampling (llama.cpp's knobs) --------------------------------------------
 * A sampler turns logits into a token: penalties over a window of recent tokens,
 * then (when temperature > 0) top-k, top-p, min-p, temperature, and a draw from
 * its own seeded RNG; temperature <= 0 is argmax of the penalized logits (lowest
 * id on ties). The same seed, parameters and token history give the same picks. */
typedef struct celer_sampler celer_sampler;

typedef struct {
    float temperature;        /* <= 0: greedy */
    int top_k;                /* keep the k most likely; <= 0: off */
    float top_p;              /* keep the smallest set with mass >= top_p; >= 1: off */
    float min_p;              /* keep p >= min_p * p_max; <= 0: off */
    float repeat_penalty;     /* logit / r if > 0 else logit * r, per recent token; 1: off */
    float presence_penalty;   /* logit -= presence, per distinct recent token; 0: off */
    float frequency_penalty;  /* logit -= frequency * count in the window; 0: off */
    int penalty_last_n;       /* recent tokens the penalties look at; 0: none */
    uint64_t seed;
    const int32_t *stop;      /* token ids that end generation (copied), or NULL */
    int n_stop;
} celer_sampler_params;

/* Fills p with the defaults: greedy (temperature 0); llama.cpp's filter values for
 * when temperature is raised (top_k 40, top_p 0.95, min_p 0.05); penalties off with
 * a window of 64; seed 0; no stop tokens. */
void celer_sampler_params_default(celer_sampler_params *p);
/* A sampler for logits of n_vocab entries. All buffers are allocated here, so
 * sampling allocates nothing. NULL on error (bad parameters, out of memory). */
celer_sampler *celer_sampler_new(const celer_sampler_params *p, int n_vocab);
void celer_sampler_free(celer_sampler *smp);
/* Picks a token from logits [n_vocab] (read only). Does not add it to the
 * history: call celer_sampler_accept for that. */
int32_t celer_sampler_sample(celer_sampler *smp, const float *logits);
/* Adds a token (prompt or generated) to the penalty window. */
void celer_sampler_accept(celer_sampler *smp, int32_t token);
/* 1 when token is one of the stop tokens. */
int celer_sampler_is_stop(const celer_sampler *smp, int32_t token);
/* Empties the history and restarts the RNG from seed. */
void celer_sampler_reset(celer_sampler *smp, uint64_t seed);

/* ---- Constrained decoding: GBNF grammars and JSON Schema (docs/grammar.md) ------
 * A grammar (llama.cpp's GBNF: rules, alternation, grouping, literals with escapes,
 * character classes, * + ? {m,n}, comments) is compiled once into a pushdown
 * automaton over bytes (UTF-8 is matched byte by byte) and may be shared by any
 * number of requests and threads. A vocabulary index (a byte trie over every
 * token's decoded bytes) is built once per tokenizer. Each generated sequence owns a
 * grammar state: at every step it gives the mask of tokens whose bytes the automaton
 * can take from where it stands (computed lazily, cached per automaton state), and
 * it advances by the token sampled. End-of-sequence (the sequence's stop tokens) is
 * allowed exactly when the automaton accepts. Special tokens are allowed only where
 * a literal of the grammar spells their text.
 *
 *     celer_grammar *g = celer_grammar_compile("root ::= \"yes\" | \"no\"", (size_t)-1);
 *     celer_grammar_vocab *v = celer_grammar_vocab_new(tok);            // once per tokenizer
 *     celer_grammar_state *st = celer_grammar_state_new(g, v, NULL, 0);  // per request
 *     celer_gen_seq q = {..., .grammar = st};                            // the loop masks and advances it
 */
typedef struct celer_grammar celer_grammar;
typedef struct celer_grammar_vocab celer_grammar_vocab;
typedef struct celer_grammar_state celer_grammar_state;
typedef struct celer_tokenizer celer_tokenizer;
struct json_t; /* jansson's */

/* Compiles GBNF text of len bytes (len (size_t)-1: NUL-terminated) whose start rule is
 * "root". NULL on error with a message "grammar: line L, column C: REASON" (undefined
 * rule, left recursion, bad escape, unterminated literal or class, a limit of
 * src/base/limits.h exceeded, ...). */
celer_grammar *celer_grammar_compile(const char *text, size_t len);
void celer_grammar_free(celer_grammar *g);
/* 1 when the grammar matches all n bytes of s, 0 when it does not, -1 on error
 * (an automaton limit: the message says which). */
int celer_grammar_match(const celer_grammar *g, const char *s, size_t n);

/* JSON Schema -> GBNF text (malloc'd, free() it). The schema's own rule is named
 * prefix and every helper rule prefix-NAME, so several schemas converted with
 * distinct prefixes join into one grammar:
 *     root ::= "<tool_call>\n" (tool-a | tool-b) "\n</tool_call>"
 * With prefix "root" the text is a complete grammar. Whitespace between tokens as
 * llama.cpp's converter allows it. NULL on error with a message naming the
 * unsupported keyword (or bad value) and its JSON pointer, e.g.
 * "json schema: /properties/age: unsupported keyword \"multipleOf\"". The schema
 * {"type": "json_object"} (OpenAI's response_format) means any JSON object. */
char *celer_json_schema_to_gbnf(const struct json_t *schema, const char *prefix);
/* The same from JSON text of len bytes ((size_t)-1: NUL-terminated). */
char *celer_json_schema_text_to_gbnf(const char *json, size_t len, const char *prefix);

/* The vocabulary index of a tokenizer (borrowed only while building: the index keeps
 * what it needs). Immutable once built; share it across requests and threads.
 * NULL on error. */
celer_grammar_vocab *celer_grammar_vocab_new(const celer_tokenizer *t);
void celer_grammar_vocab_free(celer_grammar_vocab *v);
int celer_grammar_vocab_size(const celer_grammar_vocab *v);

/* A state of g over vocabulary v (both borrowed: they outlive the state). With
 * n_triggers > 0 the state is lazy (llama.cpp's grammar_lazy / grammar_triggers):
 * every token is allowed until one of the trigger strings appears in the generated
 * text; the grammar then applies from the start of that trigger (the trigger's own
 * bytes must be the grammar's first) to the end of the text and constrains every
 * token after. NULL on error. */
celer_grammar_state *celer_grammar_state_new(const celer_grammar *g, const celer_grammar_vocab *v,
                                             const char *const *triggers, int n_triggers);
void celer_grammar_state_free(celer_grammar_state *st);
/* 1 once the grammar constrains (at once without triggers). */
int celer_grammar_state_active(const celer_grammar_state *st);
/* 1 when the text so far is a complete match (an inactive lazy state: 1). */
int celer_grammar_state_accepting(const celer_grammar_state *st);
/* The tokens allowed now: a bitset of celer_grammar_vocab_size(v) bits (token t is
 * allowed when mask[t / 32] >> (t % 32) & 1), stop tokens not included (they are
 * allowed exactly when accepting). Valid until the next call on st. NULL with a
 * message on error (the automaton exceeded a limit). An inactive state: every bit set. */
const uint32_t *celer_grammar_state_mask(celer_grammar_state *st);
/* Advances by a generated token (its bytes; a lazy state looks for its triggers).
 * -1 with a message when the grammar does not allow it (the state is unchanged). */
int celer_grammar_state_accept_token(celer_grammar_state *st, int32_t token);
/* Advances by text (e.g. a prefix the caller forces). -1 when not allowed (unchanged). */
int celer_grammar_state_accept_bytes(celer_grammar_state *st, const char *s, size_t n);

/* ---- Generation: the one loop (engine/generate.c, docs/engine-core.md) ---------
 * A generator steps any number of sequences (each a session of one model with its
 * own sampler) together. Each step feeds every sequence its new tokens in one
 * batched forward (the token each decoding sequence sampled last, then chunks of the
 * prompts being prefilled, under a per-step token budget), samples every sequence
 * that has fresh logits, and reports one event per sequence that produced a token
 * or finished. A sequence ends on one of its stop tokens, on a stop string of its
 * text stream, after max_tokens tokens, when the context is full (the token just
 * sampled cannot be fed), or on an error; its session then holds the prompt and
 * every generated token but the last (the last is never fed).
 * Where the backend samples on the device and exactly one sequence is running (no
 * logits wanted on the host, no penalties), the step is pipelined: the forward for
 * token N+1 is queued before token N is read back; a step queued past the end is
 * undone (the session rewinds, the sampler takes back its draw), so the tokens and
 * the state left behind are those of the host loop. */
typedef struct celer_gen celer_gen;
typedef struct celer_textstream celer_textstream;

typedef enum {
    CELER_FINISH_NONE = 0,     /* still generating */
    CELER_FINISH_STOP_TOKEN,   /* sampled a stop token (reported as the last token) */
    CELER_FINISH_STOP_STRING,  /* the text reached a stop string (the text stops before it) */
    CELER_FINISH_LENGTH,       /* max_tokens generated (also max_tokens 0: the prompt fed, nothing generated) */
    CELER_FINISH_CONTEXT,      /* the context is full: the token just generated cannot be fed */
    CELER_FINISH_ERROR,        /* a forward or the device sampler failed (message in the event) */
} celer_finish;

/* Short name of a finish reason ("stop_token", "stop_string", "length", "context", "error", "none"). */
const char *celer_finish_name(int finish);

typedef struct {
    celer_session *session;    /* tokens go after those already in it */
    celer_sampler *sampler;    /* NULL: greedy (argmax, lowest id on ties); its stop tokens end the sequence */
    const int32_t *prompt;     /* [n_prompt] fed first (copied); they enter the sampler's penalty window.
                                * n_prompt 0: the first token comes from the session's last logits */
    int n_prompt;
    int max_tokens;            /* tokens to generate at most; < 0: until the context is full */
    int32_t stop_token;        /* one more stop token (e.g. end-of-sequence), or -1 */
    celer_textstream *text;    /* NULL, or the text of the tokens and its stop strings (borrowed;
                                * stop tokens add no text) */
    int want_logits;           /* events carry the logits each token was sampled from (the host samples) */
    /* called once the prompt is in the session, before its first token is sampled
     * (session at exactly the prompt: the moment to snapshot or cache it); may be NULL */
    void (*on_prompt)(celer_session *s, void *user);
    void *user;                /* given back in events and to on_prompt */
    /* NULL, or the grammar state that constrains this sequence (borrowed; one per
     * sequence): each token is sampled from the logits masked by it and advances it;
     * stop tokens are allowed exactly when it accepts; no allowed token (a dead end)
     * ends the sequence with CELER_FINISH_ERROR, and a complete text after which the
     * grammar allows nothing (no stop token given) with CELER_FINISH_STOP_TOKEN and
     * token -1. Such a sequence samples on the host. */
    celer_grammar_state *grammar;
} celer_gen_seq;

typedef struct {
    int seq;                   /* the id celer_gen_add returned */
    void *user;
    int32_t token;             /* the token generated, or -1 (a finish without a token) */
    const float *logits;       /* [vocab] what token was sampled from, with want_logits (else NULL) */
    const char *text;          /* text that became final with this token (with a text stream; else "") */
    size_t text_len;
    int n_generated;           /* tokens generated so far, this one included */
    int finish;                /* celer_finish: CELER_FINISH_NONE while the sequence goes on */
    const char *error;         /* with CELER_FINISH_ERROR: what failed */
} celer_gen_event;

/* A generator for sessions of model m that feeds at most token_budget tokens per
 * step (<= 0: unlimited): decode tokens first, prompt chunks share the rest (a
 * prefilling prompt gets at least one token per step). NULL on out of memory. */
celer_gen *celer_gen_new(celer_model *m, int token_budget);
/* Undoes any step in flight (as celer_gen_cancel) and frees the generator (not the
 * sessions, samplers or text streams). */
void celer_gen_free(celer_gen *g);
/* Adds a sequence; returns its id (>= 0), or -1 (a session of another model or
 * already in use, a prompt that does not fit the context, n_prompt 0 and no logits). */
int celer_gen_add(celer_gen *g, const celer_gen_seq *seq);
/* Ends sequence id now without an event (the caller gave up on it: Ctrl-C, a client
 * that left); a pipelined step in flight is undone, leaving the session holding every
 * reported token but the last, as after a finish. */
void celer_gen_cancel(celer_gen *g, int id);
/* Sequences added and not finished or cancelled. */
int celer_gen_active(const celer_gen *g);
/* One step. *events gets the step's events (valid until the next step, cancel or
 * free; celer_gen_add keeps them) and the count is returned; 0 when no sequence is
 * running, -1 when out of memory (nothing was done). A failed forward or sampler is
 * a CELER_FINISH_ERROR event of the sequence it belongs to (the others go on). */
int celer_gen_step(celer_gen *g, const celer_gen_event **events);

/* One sequence start to end: feeds prompt, generates up to max_tokens tokens into out
 * (may be NULL; room for max_tokens tokens, or with max_tokens < 0 for the context left
 * after the prompt plus one: the last token needs no room), stopping
 * after a stop token of smp or stop_token (>= 0). *finish (may be NULL) gets the
 * reason. Returns the count, or -1 on error. */
int celer_generate(celer_session *s, celer_sampler *smp, const int32_t *prompt, int n_prompt, int max_tokens,
                   int32_t stop_token, int32_t *out, int *finish);
/* celer_generate greedily (no sampler). */
int celer_generate_greedy(celer_session *s, const int32_t *prompt, int n_prompt, int n_gen, int32_t stop_token,
                          int32_t *out);

/* ---- KV cache: statistics, snapshots, cache files, prompt cache --------------
 * (docs/kv-cache.md). A snapshot shares the session's cache buffers (O(1): no row
 * is copied); the session keeps writing in place where no snapshot can see, and
 * copies a buffer first where one can. CELER_KV_INPLACE_WRITE=0 makes every write
 * copy (same results, bit for bit). CELER_STATS=1 prints one line per session on
 * stderr when it is freed: "kv: inplace_rows=N copied_bytes=N cow_copies=N cow_blocks=N". */
typedef struct celer_snapshot celer_snapshot;
typedef struct celer_prompt_cache celer_prompt_cache;

typedef struct {
    uint64_t inplace_rows;    /* rows written into a cache buffer without copying it first */
    uint64_t copied_bytes;    /* bytes of cached rows copied or moved (never the new rows) */
    uint64_t cow_copies;      /* buffer copies (shared buffers, or the copying path) */
    uint64_t allocs;          /* cache buffers created plus memory commit steps */
    uint64_t held_bytes;      /* keys and values of the rows its caches hold now (float32) */
    uint64_t cow_blocks;      /* pool blocks copied because a write touched a block shared with another cache */
} celer_kv_stats;

/* What this session's cache writes have done since it was created, and what its
 * caches hold now. */
void celer_session_kv_stats(const celer_session *s, celer_kv_stats *out);

/* The KV block pools: sessions take their rows in blocks of block_rows tokens per
 * layer from a pool with a byte budget (docs/kv-cache.md): host caches from one
 * process-wide pool in host memory, device caches from their GPU's pool in device
 * memory. celer_kv_pool_get reports the first GPU's pool once one exists (a model
 * on a GPU has written rows), else the host's. */
typedef struct {
    uint64_t budget_bytes;    /* the most its blocks may take */
    uint64_t used_bytes;      /* bytes of blocks some cache or snapshot holds */
    int64_t used_blocks;      /* blocks some cache or snapshot holds */
    int64_t committed_blocks; /* blocks whose memory is committed (in use or free for reuse) */
    uint64_t cow_blocks;      /* blocks copied because a write touched a shared one */
    int block_rows;           /* tokens per block */
} celer_kv_pool_stats;
void celer_kv_pool_get(celer_kv_pool_stats *out);
/* Sets the pools' budget (bytes > 0): the host pool's and every GPU pool's, now and
 * later. Lowering it under what is in use refuses new blocks until enough are
 * released. -1 with a message when bytes is 0. */
int celer_kv_pool_set_budget(uint64_t bytes);
/* The budget as a fraction 0 < f <= 1 (vLLM's gpu-memory-utilization, for the KV
 * cache alone): the host pool's is f of the host memory available now, a GPU pool's
 * f of that GPU's free memory when the pool is created (its first cache write: after
 * the model's weights are loaded) or now for a pool that exists (its own blocks
 * counted as free). -1 with a message outside (0, 1]. */
int celer_kv_pool_set_budget_fraction(double f);
/* 1 when m's sessions keep their KV rows in a pool (host and device caches both do). */
int celer_model_kv_paged(const celer_model *m);

/* The session's state now (caches, tokens, last logits), sharing its buffers.
 * Valid after the session is freed. NULL on out of memory. */
celer_snapshot *celer_session_snapshot(celer_session *s);
void celer_snapshot_free(celer_snapshot *snap);
/* Tokens the snapshot holds. */
int celer_snapshot_pos(const celer_snapshot *snap);
/* Puts the session back to snap (of a session of the same model); the snapshot
 * stays valid and may be restored again, into any number of sessions (branches).
 * -1 leaves the session unchanged. */
int celer_session_restore(celer_session *s, const celer_snapshot *snap);

/* Writes the session's cache, tokens and last logits to a safetensors file
 * (versioned metadata names the model, every layer's cache kind and window). */
int celer_session_save_cache(const celer_session *s, const char *path);
/* Replaces the session's state with a file written by celer_session_save_cache.
 * Refuses, leaving the session unchanged, a file made for another model or cache
 * layout, a truncated or corrupt one, or one larger than the session's context. */
int celer_session_load_cache(celer_session *s, const char *path);

/* An in-memory prompt cache for model m: snapshots keyed by their token sequences
 * (a radix tree), least recently used evicted while their bytes exceed budget.
 * Not thread-safe: callers serialize access. */
celer_prompt_cache *celer_prompt_cache_new(celer_model *m, size_t budget_bytes);
void celer_prompt_cache_free(celer_prompt_cache *pc);
/* Keeps a snapshot of s keyed by s's tokens (replacing one with the same key) and
 * evicts down to the budget. Returns the entry's id (> 0), or 0 with a message
 * (the snapshot alone exceeds the budget, out of memory). */
uint64_t celer_prompt_cache_insert(celer_prompt_cache *pc, celer_session *s);
/* The longest prefix of tokens [n] an entry can serve: an entry whose key is a
 * prefix of tokens, or one that shares a longer prefix and can be taken back to it
 * (rotating caches that have wrapped often cannot). Returns that length (0: miss)
 * and the entry's id in *id; never more than n, and n only for an entry of exactly
 * these tokens (it holds their logits). Marks the entry used. */
int celer_prompt_cache_lookup(celer_prompt_cache *pc, const int32_t *tokens, int n, uint64_t *id);
/* Restores entry id into s, taken back to its first n tokens. -1 when the entry
 * was evicted or cannot go back to n (the session is unchanged). */
int celer_prompt_cache_restore(celer_prompt_cache *pc, uint64_t id, int n, celer_session *s);
/* lookup + restore: puts s at the longest cached prefix of tokens and returns its
 * length; the caller evaluates tokens[returned..n). 0 (session untouched) on a miss. */
int celer_prompt_cache_prepare(celer_prompt_cache *pc, celer_session *s, const int32_t *tokens, int n);
/* Entries and the bytes they account for. */
int celer_prompt_cache_count(const celer_prompt_cache *pc);
size_t celer_prompt_cache_bytes(const celer_prompt_cache *pc);
/* Writes every entry to one safetensors file / adds the entries of such a file,
 * oldest first (checked like celer_session_load_cache: a bad file adds nothing). */
int celer_prompt_cache_save(const celer_prompt_cache *pc, const char *path);
int celer_prompt_cache_load(celer_prompt_cache *pc, const char *path);

/* Writes a safetensors file with one float32 tensor of the given shape. */
int celer_save_f32(const char *path, const char *name, const float *data, int ndim, const int64_t *shape);

/* Writes a random-weight checkpoint of a published model's shape (see
 * celer_synth_shapes) into dir: config.json and model.safetensors, bf16 or, with
 * q4, MLX affine 4-bit (group 64). progress may be NULL. */
int celer_synth(const char *shape, const char *dir, int q4, uint64_t seed,
                void (*progress)(double done, void *ctx), void *ctx);
/* The same shape as config.json and a sparse model.safetensors whose matrices are
 * holes (zeros taking no disk; the vectors are written): what `bench --synth` opens
 * with CELER_SYNTH_FILL=1, so a GPU makes the weights in its own memory. */
int celer_synth_sparse(const char *shape, const char *dir);
/* NULL-terminated list of shape names celer_synth knows. */
const char *const *celer_synth_shapes(void);

/* Measures the memory read bandwidth of this machine with n_threads, in GB/s. */
double celer_measure_read_bandwidth(int n_threads);
/* The bandwidth decode on m's device is measured against, in GB/s, measured now: the
 * CPU's read bandwidth (its threads), or a GPU's device-to-device copy bandwidth
 * ((read + written bytes) / time). -1 on failure. */
double celer_model_bandwidth(const celer_model *m);
/* Floating-point operations per prompt token of the layers' matrix products
 * (2 x the parameters a token uses: routed experts only; attention scores and the
 * LM head excluded). */
double celer_model_layer_flops_per_token(const celer_model *m);

/* ---- Hugging Face hub: model names, the local cache, downloads (docs/hub.md) ----
 * A hub name is ORG/NAME[@REVISION] (REVISION: a branch, tag or commit; "main" when
 * absent). The cache is huggingface_hub's, so models it, transformers or mlx-lm
 * downloaded are found, and models celer pulls are theirs too:
 *
 *     char dir[4096];
 *     if (celer_hub_resolve("Qwen/Qwen3-0.6B", dir, sizeof dir) == 0)
 *         m = celer_model_open(dir, 0);   // CACHE/models--Qwen--Qwen3-0.6B/snapshots/COMMIT
 */

/* 1 when s has the form of a hub name (ORG/NAME[@REVISION] by the hub's rules for
 * ids); says nothing about whether it exists. Leaves celer_last_error() alone. */
int celer_hub_is_name(const char *s);
/* The cache directory: $HF_HUB_CACHE, else $HF_HOME/hub, else
 * $XDG_CACHE_HOME/huggingface/hub, else $HOME/.cache/huggingface/hub. Returns buf
 * (n bytes), or NULL when none is set or the path does not fit. */
const char *celer_hub_cache_dir(char *buf, size_t n);
/* The snapshot directory of a hub name in the cache into buf (n bytes):
 * CACHE/models--ORG--NAME/snapshots/COMMIT, COMMIT read from refs/REVISION, or the
 * revision itself when it is a commit hash. Reads only. -1 when name is not a hub
 * name or is not cached; the message says where it looked and names the command
 * that downloads it (celer pull NAME). */
int celer_hub_resolve(const char *name, char *buf, size_t n);

typedef enum {
    CELER_PULL_START,   /* a file's download begins (done: bytes already there from an earlier try) */
    CELER_PULL_BYTES,   /* bytes arrived (done of total) */
    CELER_PULL_DONE,    /* the file is downloaded and checked */
    CELER_PULL_CACHED,  /* the file was already in the cache */
    CELER_PULL_RETRY,   /* the connection dropped; resuming from done */
} celer_pull_event;

typedef struct {
    const char *const *include;  /* more files to fetch: glob patterns (fnmatch, '*' stops at '/') */
    int n_include;
    /* progress, called on the pulling thread; total is 0 when unknown. May be NULL. */
    void (*progress)(celer_pull_event ev, const char *file, uint64_t done, uint64_t total, void *ctx);
    void *ctx;
} celer_pull_params;

/* Downloads hub model name (ORG/NAME[@REVISION]) from $HF_ENDPOINT into the cache,
 * with $HF_TOKEN for gated and private models: the files a run needs (config.json,
 * generation_config.json, tokenizer files, chat templates, *.safetensors (only the
 * shards model.safetensors.index.json names, when it is there) and the index) plus
 * those p->include matches. Files already cached are kept; a partial download
 * (blobs/ETAG.incomplete) is resumed; each file's size and, for LFS files, SHA-256
 * are checked before it enters the cache. The snapshot's links and refs/REVISION are
 * written only once every file is in, so a failed pull leaves nothing under
 * snapshots/. buf (n bytes) gets the snapshot directory. 0, or -1 with a message
 * (gated: accept the licence and set HF_TOKEN; no such model or revision; disk full;
 * connection lost: run again to resume). p may be NULL. */
int celer_hub_pull(const char *name, const celer_pull_params *p, char *buf, size_t n);

#include "celer_tokenizer.h"

#ifdef __cplusplus
}
#endif
#endif
