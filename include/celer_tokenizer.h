/* celer_tokenizer.h: text <-> token ids and chat templates, agreeing with Hugging Face
 * tokenizers / transformers on the files real checkpoints ship (tokenizer.json,
 * tokenizer_config.json, chat_template.jinja).
 *
 *     celer_tokenizer *t = celer_tokenizer_open("path/to/ckpt");
 *     int32_t *ids;
 *     int n = celer_tokenize(t, "Hello!", 6, 1, &ids);          // 1: add BOS/EOS as configured
 *     char *text = celer_detokenize(t, ids, n, 0, NULL);        // "Hello!" (plus BOS text if added)
 *     free(ids); free(text);
 *     char *prompt = celer_chat_render(t, "[{\"role\":\"user\",\"content\":\"Hi\"}]", NULL, 1);
 *     free(prompt);
 *     celer_tokenizer_free(t);
 *
 * Every function that can fail returns NULL or -1 and leaves a message in
 * celer_last_error(). Strings returned to the caller are malloc'd and freed with free().
 * A tokenizer is immutable after open: it may be used from several threads at once.
 */
#ifndef CELER_TOKENIZER_H
#define CELER_TOKENIZER_H
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef struct celer_tokenizer celer_tokenizer;

/* Opens the tokenizer of a checkpoint directory: DIR/tokenizer.json, plus
 * DIR/tokenizer_config.json and DIR/chat_template.jinja when present. `path` may also
 * name a tokenizer.json file directly. NULL on error (an unsupported component is named). */
celer_tokenizer *celer_tokenizer_open(const char *path);
void celer_tokenizer_free(celer_tokenizer *t);

/* Encodes len bytes of text (invalid UTF-8 is replaced by U+FFFD first, as Python's
 * errors="replace" would). add_special: add BOS/EOS as the tokenizer config says
 * (transformers' default); 0 = tokenizers' encode(text, add_special_tokens=False).
 * On success *ids gets a malloc'd array (never NULL, free it) and the count is returned;
 * -1 on error with *ids = NULL. */
int celer_tokenize(const celer_tokenizer *t, const char *text, size_t len, int add_special, int32_t **ids);

/* Decodes ids to text (decode(ids, skip_special_tokens=skip_special)); unknown ids are
 * skipped as tokenizers does. Returns a malloc'd NUL-terminated string (its byte length
 * in *len when len is not NULL), or NULL on error. */
char *celer_detokenize(const celer_tokenizer *t, const int32_t *ids, size_t n, int skip_special, size_t *len);

/* The bytes token id adds in the middle of a text, as they are: a piece of a UTF-8
 * sequence stays that piece (no U+FFFD), a Metaspace token keeps its space (what
 * constrained decoding matches tokens by). Special tokens: their text. Returns a
 * malloc'd buffer (NUL-terminated; its length in *len; "" for an unknown id), NULL on
 * out of memory. */
char *celer_tokenizer_token_bytes(const celer_tokenizer *t, int32_t id, size_t *len);

/* Vocabulary size including added tokens (largest id + 1). */
int celer_tokenizer_n_vocab(const celer_tokenizer *t);
/* Id of a token string (added tokens first, then the model vocab), or -1. */
int32_t celer_tokenizer_token_id(const celer_tokenizer *t, const char *token);
/* Token string of an id (borrowed, valid while t lives), or NULL. */
const char *celer_tokenizer_token(const celer_tokenizer *t, int32_t id);
/* BOS / EOS ids from tokenizer_config.json (bos_token / eos_token), -1 when none. */
int32_t celer_tokenizer_bos(const celer_tokenizer *t);
int32_t celer_tokenizer_eos(const celer_tokenizer *t);
/* 1 when id is a special added token (BOS, EOS, <|im_end|>, ...). */
int celer_tokenizer_is_special(const celer_tokenizer *t, int32_t id);

/* Streaming detokenizer: feed ids one at a time as they are generated; each call
 * returns the text that became final. Never returns a broken UTF-8 sequence and returns
 * every decoded byte exactly once: concatenating every put and the final flush equals
 * celer_detokenize of all ids. */
typedef struct celer_detok celer_detok;
celer_detok *celer_detok_new(const celer_tokenizer *t, int skip_special);
/* Returns the new text (possibly ""), owned by the stream and valid until the next call
 * on it; its byte length in *len when len is not NULL. NULL on error. */
const char *celer_detok_put(celer_detok *d, int32_t id, size_t *len);
/* Returns whatever is still held back (an incomplete UTF-8 tail decodes as U+FFFD). */
const char *celer_detok_flush(celer_detok *d, size_t *len);
void celer_detok_free(celer_detok *d);

/* The streaming detokenizer with stop strings (the one place they are matched, for
 * the CLI and the server alike): text is returned once it is final, a stop string is
 * found however the tokens split it, and text that may still become the start of a
 * stop string is held back until it cannot. At a stop string the text before it is
 * returned and nothing after it, ever. */
typedef struct celer_textstream celer_textstream;
/* A stream over t (skip_special as celer_detok_new) with n_stop stop strings (copied;
 * empty ones are ignored; stop may be NULL when n_stop is 0). NULL on error. */
celer_textstream *celer_textstream_new(const celer_tokenizer *t, int skip_special, const char *const *stop,
                                       int n_stop);
/* Adds a token. Returns the text that became final (valid until the next call on the
 * stream), its length in *len; *hit (may be NULL) is 1 once a stop string appeared.
 * NULL on out of memory. */
const char *celer_textstream_put(celer_textstream *s, int32_t id, size_t *len, int *hit);
/* Adds text directly (what put does after detokenizing). */
const char *celer_textstream_put_text(celer_textstream *s, const char *text, size_t n, size_t *len, int *hit);
/* The end of the text: the detokenizer's last bytes and whatever was held back (cut at
 * a stop string they complete, *hit then 1). */
const char *celer_textstream_flush(celer_textstream *s, size_t *len, int *hit);
void celer_textstream_free(celer_textstream *s);

/* Renders the tokenizer's chat template (chat_template.jinja, else tokenizer_config.json
 * "chat_template", the "default" one when it is a named list) with messages (a JSON
 * array of {"role","content",...}), tools (a JSON array or NULL) and
 * add_generation_prompt, plus bos_token / eos_token from the config. Returns a malloc'd
 * string, or NULL with a message: a template error names the line and column, and
 * raise_exception reports the template's own message. */
char *celer_chat_render(const celer_tokenizer *t, const char *messages_json, const char *tools_json,
                        int add_generation_prompt);
/* The same with extra template variables: extra_vars_json is a JSON object (or NULL)
 * whose keys become variables, overriding the ones above, e.g.
 * {"enable_thinking": false} for Qwen3 or {"reasoning_effort": "high"} for gpt-oss
 * (transformers passes such keyword arguments of apply_chat_template the same way). */
char *celer_chat_render_vars(const celer_tokenizer *t, const char *messages_json, const char *tools_json,
                             int add_generation_prompt, const char *extra_vars_json);
/* A chat to encode: what celer_chat_render_vars takes, plus how message text is read. */
typedef struct {
    const char *messages_json;    /* JSON array of {"role", "content", ...}; required */
    const char *tools_json;       /* JSON array, or NULL */
    const char *extra_vars_json;  /* JSON object of extra template variables, or NULL */
    int add_generation_prompt;
    /* 0 (the default, as OpenAI's API does): special tokens (added tokens marked
     * "special": true, like <|im_end|>) written inside message and tool strings are
     * encoded as ordinary text, so a user cannot forge turns; only the special tokens
     * the template itself writes are control tokens. 1: transformers' behaviour,
     * apply_chat_template(tokenize=True): special tokens are matched everywhere in the
     * rendered text, the user's text included. */
    int parse_special_in_content;
} celer_chat_request;

/* Renders the chat template (as celer_chat_render_vars) and encodes the result, no
 * BOS/EOS added (the template writes them). On success *ids gets a malloc'd array
 * (free it) and the count is returned; when text is not NULL, *text gets the rendered
 * prompt (malloc'd; exactly what celer_chat_render_vars returns). -1 on error with
 * *ids (and *text) NULL. How content is kept as text: docs/tokenizer.md. */
int celer_chat_encode(const celer_tokenizer *t, const celer_chat_request *req, int32_t **ids, char **text);

/* 1 when the tokenizer has a chat template. */
int celer_tokenizer_has_template(const celer_tokenizer *t);

/* Renders any Jinja template with the variables of a JSON object (vars_json may be NULL).
 * The same interpreter as celer_chat_render; returns a malloc'd string or NULL. */
char *celer_jinja_render(const char *tmpl, size_t tmpl_len, const char *vars_json);

#ifdef __cplusplus
}
#endif
#endif
