/* tokenizer/tok.h: the inside of a celer_tokenizer, shared by its files:
 * util.c (buffers, UTF-8, hash maps), normalize.c, pretokenize.c, bpe.c, decode.c,
 * tokenizer.c (loading, added tokens, post-processing, the public API).
 * Invariant: after celer_tokenizer_open returns, nothing in here is written again, so
 * one tokenizer may serve many threads (per-call scratch lives on the caller's side). */
#ifndef CELER_TOK_H
#define CELER_TOK_H
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stddef.h>
#include <stdint.h>

#include "celer_tokenizer.h"
#include "tokenizer/tjson.h"

/* ---- growable byte buffer: appends never fail loudly; oom is sticky, checked once */
typedef struct {
    char *p;
    size_t n, cap;
    int oom;
} tk_buf;

void tkb_reserve(tk_buf *b, size_t extra);
void tkb_put(tk_buf *b, const void *s, size_t n);
static inline void tkb_putc(tk_buf *b, char c) {
    if (b->n + 1 >= b->cap) tkb_reserve(b, 1);
    if (!b->oom) b->p[b->n++] = c;
}
void tkb_free(tk_buf *b);
/* NUL-terminates (not counted in n) and returns p, or NULL when out of memory. */
char *tkb_cstr(tk_buf *b);

/* ---- UTF-8 */
/* Decodes one code point at s (n > 0 bytes left); returns its length. Assumes valid UTF-8. */
static inline int utf8_dec(const unsigned char *s, size_t n, uint32_t *cp) {
    unsigned c = s[0];
    if (c < 0x80 || n < 2) { *cp = c; return 1; }
    if (c < 0xE0) { *cp = ((c & 31u) << 6) | (s[1] & 63u); return 2; }
    if (c < 0xF0 || n < 4) { *cp = n >= 3 ? ((c & 15u) << 12) | ((s[1] & 63u) << 6) | (s[2] & 63u) : 0xFFFD; return n >= 3 ? 3 : (int)n; }
    *cp = ((c & 7u) << 18) | ((s[1] & 63u) << 12) | ((s[2] & 63u) << 6) | (s[3] & 63u);
    return 4;
}
static inline int utf8_len(unsigned char c) { return c < 0x80 ? 1 : c < 0xE0 ? 2 : c < 0xF0 ? 3 : 4; }
int utf8_enc(uint32_t cp, char *out);
/* Appends s to b, replacing each maximal invalid subsequence by U+FFFD (Rust's
 * String::from_utf8_lossy, Python's errors="replace"). */
void utf8_lossy(tk_buf *b, const char *s, size_t n);
/* 1 when s is valid UTF-8. */
int utf8_valid(const char *s, size_t n);
/* Length of the longest prefix of s that does not end inside a (possibly) valid sequence. */
int tk_is_space(uint32_t cp);     /* Unicode White_Space */
int tk_is_alnum(uint32_t cp);

/* ---- hashing and maps */
uint64_t tk_hash(const char *s, size_t n);

/* string -> int32, keys copied into a pool */
typedef struct {
    char *pool;
    size_t pool_n, pool_cap;
    uint64_t *koff;     /* [n]: offset << 24 | length (length < 16M) */
    int32_t *val;       /* [n] */
    uint32_t n, cap_e;
    uint64_t *slot;     /* [mask+1]: hash tag << 32 | (entry index + 1), 0 = empty */
    uint32_t mask;
} tk_strmap;
int tk_strmap_init(tk_strmap *m, uint32_t expect);
/* Adds key -> v (replacing an existing key's value). -1 when out of memory. */
int tk_strmap_put(tk_strmap *m, const char *k, size_t n, int32_t v);
/* The same with the key's tk_hash already computed. */
int tk_strmap_put_h(tk_strmap *m, const char *k, size_t n, int32_t v, uint64_t h);
/* Value or -1. */
int32_t tk_strmap_get(const tk_strmap *m, const char *k, size_t n);
/* The same with the key's tk_hash already computed. */
int32_t tk_strmap_get_h(const tk_strmap *m, const char *k, size_t n, uint64_t h);
static inline void tk_strmap_prefetch(const tk_strmap *m, uint64_t h) {
    if (m->slot) __builtin_prefetch(&m->slot[(uint32_t)h & m->mask]);
}
void tk_strmap_free(tk_strmap *m);

/* uint64 -> uint64; keys and values interleaved so that a lookup touches one line */
typedef struct {
    uint64_t *kv;       /* [2 * (mask + 1)]: key, value; key ~0 = empty */
    uint32_t n, mask;
} tk_u64map;
int tk_u64map_init(tk_u64map *m, uint32_t expect);
int tk_u64map_put(tk_u64map *m, uint64_t k, uint64_t v);
static inline uint32_t tk_u64map_slot(const tk_u64map *m, uint64_t k) {
    return (uint32_t)((k * 0x9E3779B97F4A7C15ull) >> 32) & m->mask;
}
static inline void tk_u64map_prefetch(const tk_u64map *m, uint64_t k) { __builtin_prefetch(&m->kv[2 * tk_u64map_slot(m, k)], 1); }
/* 1 and *v when found, else 0. */
static inline int tk_u64map_get(const tk_u64map *m, uint64_t k, uint64_t *v) {
    if (!m->kv) return 0;
    uint32_t i = tk_u64map_slot(m, k);
    for (;;) {
        uint64_t kk = m->kv[2 * i];
        if (kk == k) { *v = m->kv[2 * i + 1]; return 1; }
        if (kk == ~0ull) return 0;
        i = (i + 1) & m->mask;
    }
}
void tk_u64map_free(tk_u64map *m);

/* ---- patterns (Split, Replace): a literal string or a PCRE2 regex */
typedef struct {
    char *lit;          /* literal (when re is NULL) */
    size_t lit_n;
    pcre2_code *re;
    pcre2_match_context *mc;  /* the match, depth and heap limits (read-only after compile) */
    char *label;        /* "FILE: regex /.../", for messages */
} tk_pattern;
/* Reads {"String": s} or {"Regex": r}. */
int tk_pattern_parse(tk_pattern *p, const tj_val *v, const char *where);
int tk_pattern_compile_regex(tk_pattern *p, const char *re, size_t n, const char *where);
void tk_pattern_free(tk_pattern *p);
/* All non-overlapping matches in s, as [start, end) pairs in *out (2 per match,
 * malloc'd, may be NULL when none). Returns the count, -1 on error: a regex that
 * crosses the PCRE2 match/depth/heap limits, or whose matching rescans more than
 * CELER_MAX_REGEX_SCAN bytes per byte of s (plus CELER_MAX_REGEX_SCAN_SLACK), fails
 * with a message naming the file and the regex instead of running for minutes. */
long tk_pattern_find(const tk_pattern *p, const char *s, size_t n, size_t **out);

/* ---- pieces: spans of one text buffer */
typedef struct {
    size_t off, len;
    int first;          /* starts at offset 0 of the original input (Metaspace "first") */
} tk_span;
typedef struct {
    tk_buf text;
    tk_span *v;
    size_t n, cap;
    int oom;
} tk_pieces;
void tkp_add(tk_pieces *p, const char *s, size_t n, int first);
void tkp_clear(tk_pieces *p);
void tkp_free(tk_pieces *p);

/* ---- normalizers */
typedef enum { NZ_SEQ, NZ_NFC, NZ_NFD, NZ_NFKC, NZ_NFKD, NZ_LOWER, NZ_STRIP, NZ_REPLACE, NZ_PREPEND, NZ_STRIP_ACCENTS } nz_kind;
typedef struct tk_norm tk_norm;
struct tk_norm {
    nz_kind kind;
    char *label;          /* "FILE: normalizer.normalizers[i] (Replace)", for messages */
    tk_norm **kids;
    int n_kids;
    tk_pattern pat;       /* NZ_REPLACE */
    char *content;        /* NZ_REPLACE, NZ_PREPEND */
    size_t content_n;
    int left, right;      /* NZ_STRIP */
};
tk_norm *tk_norm_parse(const tj_val *v, const char *where);
void tk_norm_free(tk_norm *n);
/* Normalizes s into out (cleared first). -1 on error, also when the output of any
 * step would pass CELER_MAX_NORM_GROWTH * len + CELER_MAX_NORM_SLACK bytes (the
 * message names the normalizer that grew it). */
int tk_norm_apply(const tk_norm *n, const char *s, size_t len, tk_buf *out);

/* ---- pre-tokenizers */
typedef enum { SB_REMOVED, SB_ISOLATED, SB_MERGED_PREV, SB_MERGED_NEXT, SB_CONTIGUOUS } split_behavior;
typedef enum { PT_SEQ, PT_SPLIT, PT_BYTELEVEL, PT_METASPACE, PT_DIGITS, PT_WHITESPACE, PT_WSSPLIT, PT_PUNCT } pt_kind;
typedef enum { PS_ALWAYS, PS_FIRST, PS_NEVER } prepend_scheme;
typedef struct tk_pre tk_pre;
struct tk_pre {
    pt_kind kind;
    tk_pre **kids;
    int n_kids;
    tk_pattern pat;         /* PT_SPLIT; ByteLevel's GPT-2 regex when use_regex */
    split_behavior behavior;
    int invert;
    int add_prefix_space, use_regex;  /* PT_BYTELEVEL */
    char repl[8];           /* PT_METASPACE replacement (UTF-8) */
    int repl_n;
    prepend_scheme scheme;
    int split;
    int individual_digits;  /* PT_DIGITS */
};
tk_pre *tk_pre_parse(const tj_val *v, const char *where);
void tk_pre_free(tk_pre *p);
/* Splits every piece of in into out (cleared first). -1 on error. */
int tk_pre_apply(const tk_pre *p, const tk_pieces *in, tk_pieces *out);
/* The GPT-2 byte -> printable character map, as UTF-8 (1 or 2 bytes). */
extern const char *const tk_byte_char[256];
void tk_byte_map_init(void);
/* Byte of a byte-level character, or -1. */
int tk_char_byte(uint32_t cp);

/* ---- BPE model */
typedef struct {
    tk_strmap vocab;        /* token -> id (model vocabulary) */
    tk_u64map merges;       /* (left id << 32 | right id) -> (rank << 32 | merged id) */
    int32_t unk_id;         /* -1 when none */
    int byte_fallback, fuse_unk, ignore_merges;
    char *cont_prefix, *eow_suffix;   /* NULL when empty */
    int32_t byte_id[256];   /* ids of <0xXX>, -1 when missing */
    /* SentencePiece-style words ("▁the▁cat") split before each "▁" that follows a
     * character c, unless some token contains c + "▁": then no merge can cross the
     * split and the pieces can use the word cache. */
    int sp_split;
    uint32_t sp_join[32];   /* the characters c that a token joins to a following "▁" */
    int n_sp_join;
} tk_bpe;
int tk_bpe_parse(tk_bpe *b, const tj_val *model, const char *where);
void tk_bpe_free(tk_bpe *b);
/* Scratch for tk_bpe_word, reused across words of one call. */
typedef struct tk_bpe_scratch tk_bpe_scratch;
tk_bpe_scratch *tk_bpe_scratch_new(void);
void tk_bpe_scratch_free(tk_bpe_scratch *s);
/* Appends the ids of one pre-token to *ids (growing it). -1 on error. */
int tk_bpe_word(const tk_bpe *b, tk_bpe_scratch *s, const char *w, size_t n, int32_t **ids, size_t *nids, size_t *cap);

/* ---- decoders */
typedef enum { DC_SEQ, DC_BYTELEVEL, DC_METASPACE, DC_REPLACE, DC_BYTEFALLBACK, DC_FUSE, DC_STRIP } dc_kind;
typedef struct tk_dec tk_dec;
struct tk_dec {
    dc_kind kind;
    tk_dec **kids;
    int n_kids;
    tk_pattern pat;
    char *content;
    size_t content_n;
    char repl[8];
    int repl_n;
    prepend_scheme scheme;
    uint32_t strip_cp;
    int strip_start, strip_stop;
};
tk_dec *tk_dec_parse(const tj_val *v, const char *where);
void tk_dec_free(tk_dec *d);
/* Applies the decoder chain to the token strings in io (replaced by the result). */
int tk_dec_apply(const tk_dec *d, tk_pieces *io);
/* raw 1: the bytes as they are (celer_tokenizer_token_bytes), no U+FFFD, no first-piece rules. */
int tk_dec_apply_mode(const tk_dec *d, tk_pieces *io, int raw);

/* ---- added tokens */
typedef struct {
    char *content;
    size_t n;
    int32_t id;
    int special, lstrip, rstrip, normalized, single_word;
} tk_added;

/* byte trie over added token contents */
typedef struct {
    tk_u64map edges;        /* node << 8 | byte -> child node */
    int32_t *term;          /* [n_nodes] added-token index ending here, or -1 */
    uint32_t n_nodes, cap;
    uint8_t first[256];     /* bytes that can start a token */
    int empty;
} tk_trie;

/* post-processor: ids to put before and after the sequence when add_special */
typedef struct {
    int32_t *pre, *post;
    int n_pre, n_post;
} tk_post;

struct celer_tokenizer {
    char *path;
    tk_bpe bpe;
    tk_norm *norm;
    tk_pre *pre;
    tk_dec *dec;
    tk_added *added;
    int n_added;
    tk_strmap added_map;     /* content -> index into added */
    tk_trie trie_raw, trie_norm;
    tk_post post;
    char **id_tok;           /* [n_vocab] borrowed token strings (NULL for holes) */
    uint32_t *id_len;        /* [n_vocab] */
    uint8_t *id_special;     /* [n_vocab] */
    int n_vocab;
    int32_t bos_id, eos_id;
    char *bos_token, *eos_token;
    char *chat_template;     /* NULL when none */
    char *tmpl_where;        /* file the template came from, for messages */
};

/* ---- message text kept as text (chat.c, tokenizer.c; docs/tokenizer.md)
 * chat.c writes TK_MARK (U+FDD0, a Unicode noncharacter) after the first character of
 * every special-token occurrence inside message strings, and doubles every TK_MARK the
 * user wrote, before the template renders them; the added-token matcher cannot match
 * across the mark, and the encoder then drops single marks and undoubles double ones in
 * the text between control tokens, encoding it as ordinary text. */
#define TK_MARK "\xEF\xB7\x90"
#define TK_MARK_N 3
/* 1 when a special added token starts at s (n bytes left). */
int tk_special_starts_at(const celer_tokenizer *t, const char *s, size_t n);
/* Appends s to b without its marks (single marks dropped, double ones made single). */
void tk_unmark(tk_buf *b, const char *s, size_t n);
/* celer_tokenize(t, s, n, 0, ids) for marked text: special tokens are matched only
 * outside marked spans; the text around marks is encoded as ordinary text. */
int tk_encode_marked(const celer_tokenizer *t, const char *s, size_t n, int32_t **ids);

/* jinja.c */
typedef struct jj_env jj_env;
#endif
