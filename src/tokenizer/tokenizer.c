/* tokenizer/tokenizer.c: celer_tokenizer: loads tokenizer.json (+ tokenizer_config.json,
 * chat_template.jinja), matches added tokens (longest match first, never split), runs
 * normalizer -> pre-tokenizer -> BPE on the text between them, adds BOS/EOS as the
 * config says, and decodes ids back through the decoder chain. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/err.h"
#include "base/mem.h"
#include "tokenizer/tok.h"

/* ---- added-token trie */
static int trie_init(tk_trie *t) {
    memset(t, 0, sizeof *t);
    t->empty = 1;
    t->cap = 64;
    t->term = malloc(t->cap * sizeof *t->term);
    if (!t->term || tk_u64map_init(&t->edges, 256)) return err_set("out of memory");
    t->term[0] = -1;
    t->n_nodes = 1;
    return 0;
}

static void trie_free(tk_trie *t) {
    tk_u64map_free(&t->edges);
    free(t->term);
    memset(t, 0, sizeof *t);
}

static int trie_add(tk_trie *t, const char *s, size_t n, int32_t idx) {
    if (!n) return 0;
    uint32_t node = 0;
    for (size_t i = 0; i < n; i++) {
        uint64_t key = (uint64_t)node << 8 | (unsigned char)s[i], child;
        if (tk_u64map_get(&t->edges, key, &child)) { node = (uint32_t)child; continue; }
        if (t->n_nodes == t->cap) {
            int32_t *nt = realloc(t->term, 2 * t->cap * sizeof *nt);
            if (!nt) return err_set("out of memory");
            t->term = nt;
            t->cap *= 2;
        }
        t->term[t->n_nodes] = -1;
        if (tk_u64map_put(&t->edges, key, t->n_nodes)) return -1;
        node = t->n_nodes++;
    }
    t->term[node] = idx;
    t->first[(unsigned char)s[0]] = 1;
    t->empty = 0;
    return 0;
}

/* Longest token starting at s[0], or -1; *len gets its length. */
static int32_t trie_match(const tk_trie *t, const char *s, size_t n, size_t *len) {
    uint32_t node = 0;
    int32_t best = -1;
    for (size_t i = 0; i < n; i++) {
        uint64_t child;
        if (!tk_u64map_get(&t->edges, (uint64_t)node << 8 | (unsigned char)s[i], &child)) break;
        node = (uint32_t)child;
        if (t->term[node] >= 0) { best = t->term[node]; *len = i + 1; }
    }
    return best;
}

/* ---- loading */
static char *dupn(const char *s, size_t n) {
    char *p = malloc(n + 1);
    if (p) { memcpy(p, s, n); p[n] = 0; }
    return p;
}

static int parse_post(celer_tokenizer *t, const tj_val *pp, const char *where) {
    if (!pp || pp->type == TJ_NULL) return 0;
    const tj_val *ty = tj_get(pp, "type");
    if (!ty || ty->type != TJ_STR) return err_set("%s: post_processor without a \"type\"", where);
    const char *s = ty->u.s;
    if (!strcmp(s, "ByteLevel")) return 0;
    if (!strcmp(s, "Sequence")) {
        const tj_val *a = tj_get(pp, "processors");
        if (!a || a->type != TJ_ARR) return err_set("%s: Sequence post_processor without \"processors\"", where);
        for (uint32_t i = 0; i < a->n; i++)
            if (parse_post(t, &a->u.items[i], where)) return -1;
        return 0;
    }
    if (!strcmp(s, "RobertaProcessing") || !strcmp(s, "BertProcessing")) {
        const tj_val *c = tj_get(pp, "cls"), *e = tj_get(pp, "sep");
        if (!c || c->type != TJ_ARR || c->n != 2 || c->u.items[1].type != TJ_NUM || !e || e->type != TJ_ARR || e->n != 2 ||
            e->u.items[1].type != TJ_NUM)
            return err_set("%s: %s needs \"cls\" and \"sep\" as [token, id]", where, s);
        free(t->post.pre);
        free(t->post.post);
        t->post.pre = malloc(sizeof(int32_t));
        t->post.post = malloc(sizeof(int32_t));
        if (!t->post.pre || !t->post.post) return err_set("out of memory");
        t->post.pre[0] = (int32_t)c->u.items[1].u.num;
        t->post.post[0] = (int32_t)e->u.items[1].u.num;
        t->post.n_pre = t->post.n_post = 1;
        return 0;
    }
    if (strcmp(s, "TemplateProcessing"))
        return err_set("%s: unsupported post_processor type \"%s\" (celer supports TemplateProcessing, ByteLevel, "
                       "RobertaProcessing, BertProcessing, Sequence)", where, s);
    const tj_val *single = tj_get(pp, "single"), *sp = tj_get(pp, "special_tokens");
    if (!single || single->type != TJ_ARR) return err_set("%s: TemplateProcessing without \"single\"", where);
    int seen_a = 0;
    free(t->post.pre);
    free(t->post.post);
    t->post.pre = t->post.post = NULL;
    t->post.n_pre = t->post.n_post = 0;
    for (uint32_t i = 0; i < single->n; i++) {
        const tj_val *it = &single->u.items[i], *st = tj_get(it, "SpecialToken");
        if (tj_get(it, "Sequence")) { seen_a = 1; continue; }
        if (!st) return err_set("%s: TemplateProcessing.single[%u] is neither SpecialToken nor Sequence", where, i);
        const tj_val *id = tj_get(st, "id");
        const tj_val *def = id && id->type == TJ_STR ? tj_get(sp, id->u.s) : NULL;
        const tj_val *ids = tj_get(def, "ids");
        if (!ids || ids->type != TJ_ARR)
            return err_set("%s: TemplateProcessing special token \"%s\" is not in special_tokens", where,
                           id && id->type == TJ_STR ? id->u.s : "?");
        int32_t **dst = seen_a ? &t->post.post : &t->post.pre;
        int *dn = seen_a ? &t->post.n_post : &t->post.n_pre;
        int32_t *nd = realloc(*dst, (size_t)(*dn + (int)ids->n + 1) * sizeof *nd);
        if (!nd) return err_set("out of memory");
        *dst = nd;
        for (uint32_t k = 0; k < ids->n; k++) nd[(*dn)++] = (int32_t)ids->u.items[k].u.num;
    }
    return 0;
}

/* bos_token / eos_token in tokenizer_config.json: a string or {"content": ...}. */
static const tj_val *config_token(const tj_val *cfg, const char *key) {
    const tj_val *v = tj_get(cfg, key);
    if (v && v->type == TJ_OBJ) v = tj_get(v, "content");
    return v && v->type == TJ_STR ? v : NULL;
}

static int load_config(celer_tokenizer *t, const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/tokenizer_config.json", dir) >= (int)sizeof path) return err_set("%s: path too long", dir);
    struct stat st;
    if (stat(path, &st) != 0) return 0; /* optional */
    tj_doc *doc = tj_load(path);
    if (!doc) return -1;
    const tj_val *cfg = tj_root(doc);
    int rc = -1;
    if (cfg->type != TJ_OBJ) { err_set("%s: not a JSON object", path); goto out; }
    const tj_val *b = config_token(cfg, "bos_token"), *e = config_token(cfg, "eos_token");
    if (b) {
        if (!(t->bos_token = dupn(b->u.s, b->n))) goto oom;
        t->bos_id = celer_tokenizer_token_id(t, t->bos_token);
    }
    if (e) {
        if (!(t->eos_token = dupn(e->u.s, e->n))) goto oom;
        t->eos_id = celer_tokenizer_token_id(t, t->eos_token);
    }
    const tj_val *ab = tj_get(cfg, "add_bos_token"), *ae = tj_get(cfg, "add_eos_token");
    if ((ab && ab->type != TJ_NULL) || (ae && ae->type != TJ_NULL)) {
        /* transformers rebuilds the post-processor from these flags */
        int add_b = ab && ab->type == TJ_TRUE && t->bos_id >= 0, add_e = ae && ae->type == TJ_TRUE && t->eos_id >= 0;
        free(t->post.pre);
        free(t->post.post);
        t->post.pre = malloc(sizeof(int32_t));
        t->post.post = malloc(sizeof(int32_t));
        if (!t->post.pre || !t->post.post) goto oom;
        t->post.n_pre = add_b;
        t->post.n_post = add_e;
        t->post.pre[0] = t->bos_id;
        t->post.post[0] = t->eos_id;
    }
    if (!t->chat_template) {
        const tj_val *ct = tj_get(cfg, "chat_template");
        const tj_val *pick = NULL;
        if (ct && ct->type == TJ_STR) pick = ct;
        else if (ct && ct->type == TJ_ARR) {
            for (uint32_t i = 0; i < ct->n; i++) {
                const tj_val *nm = tj_get(&ct->u.items[i], "name"), *tp = tj_get(&ct->u.items[i], "template");
                if (tp && tp->type == TJ_STR && (!pick || tj_is_str(nm, "default"))) {
                    if (!pick || tj_is_str(nm, "default")) pick = tp;
                    if (tj_is_str(nm, "default")) break;
                }
            }
        } else if (ct && ct->type != TJ_NULL) {
            err_set("%s: chat_template must be a string or a list of {name, template}", path);
            goto out;
        }
        if (pick) {
            if (memchr(pick->u.s, 0, pick->n)) {
                err_set("%s: chat_template contains a NUL byte", path);
                goto out;
            }
            if (!(t->chat_template = dupn(pick->u.s, pick->n)) || !(t->tmpl_where = mem_strdup(path))) goto oom;
        }
    }
    rc = 0;
    goto out;
oom:
    err_set("out of memory");
out:
    tj_free(doc);
    return rc;
}

static int load_template_file(celer_tokenizer *t, const char *dir) {
    char path[4096];
    if (snprintf(path, sizeof path, "%s/chat_template.jinja", dir) >= (int)sizeof path) return err_set("%s: path too long", dir);
    struct stat st;
    if (stat(path, &st) != 0) return 0;
    size_t n;
    char *s = mem_read_file(path, &n);
    if (!s) return -1;
    t->chat_template = s;
    if (memchr(s, 0, n)) return err_set("%s: the template contains a NUL byte", path);
    if (!(t->tmpl_where = mem_strdup(path))) return -1;
    return 0;
}

static int load_tokenizer_json(celer_tokenizer *t, const char *path) {
    tj_doc *doc = tj_load(path);
    if (!doc) return -1;
    const tj_val *root = tj_root(doc), *v;
    int rc = -1;
    if (root->type != TJ_OBJ) { err_set("%s: not a JSON object", path); goto out; }
    static const char *const known[] = {"version", "truncation", "padding", "added_tokens", "normalizer",
                                        "pre_tokenizer", "model", "post_processor", "decoder"};
    for (uint32_t i = 0; i < root->n; i++) {
        const tj_val *k = &root->u.items[2 * i];
        size_t j;
        for (j = 0; j < sizeof known / sizeof *known; j++)
            if (tj_is_str(k, known[j])) break;
        if (j == sizeof known / sizeof *known) { err_set("%s: unknown top-level key \"%s\"", path, k->u.s); goto out; }
    }
    const tj_val *model = tj_get(root, "model");
    if (!model || model->type != TJ_OBJ) { err_set("%s: no \"model\" object", path); goto out; }
    if (tk_bpe_parse(&t->bpe, model, path)) goto out;
    if ((v = tj_get(root, "normalizer")) && v->type != TJ_NULL && !(t->norm = tk_norm_parse(v, path))) goto out;
    if ((v = tj_get(root, "pre_tokenizer")) && v->type != TJ_NULL && !(t->pre = tk_pre_parse(v, path))) goto out;
    if ((v = tj_get(root, "decoder")) && v->type != TJ_NULL && !(t->dec = tk_dec_parse(v, path))) goto out;
    if (parse_post(t, tj_get(root, "post_processor"), path)) goto out;
    if ((v = tj_get(root, "truncation")) && v->type != TJ_NULL) { err_set("%s: truncation is not supported", path); goto out; }
    /* added tokens */
    const tj_val *at = tj_get(root, "added_tokens");
    if (at && at->type != TJ_ARR) { err_set("%s: added_tokens must be an array", path); goto out; }
    uint32_t na = at ? at->n : 0;
    t->added = calloc(na ? na : 1, sizeof *t->added);
    if (!t->added || tk_strmap_init(&t->added_map, na) || trie_init(&t->trie_raw) || trie_init(&t->trie_norm)) goto oom;
    for (uint32_t i = 0; i < na; i++) {
        const tj_val *a = &at->u.items[i], *c = tj_get(a, "content"), *id = tj_get(a, "id");
        if (!c || c->type != TJ_STR || !id || id->type != TJ_NUM || id->u.num < 0 || id->u.num > 2e9) {
            err_set("%s: added_tokens[%u] needs \"content\" and \"id\"", path, i);
            goto out;
        }
        tk_added *ad = &t->added[t->n_added];
        if (!(ad->content = dupn(c->u.s, c->n))) goto oom;
        t->n_added++;
        ad->n = c->n;
        ad->id = (int32_t)id->u.num;
        ad->special = (v = tj_get(a, "special")) && v->type == TJ_TRUE;
        ad->lstrip = (v = tj_get(a, "lstrip")) && v->type == TJ_TRUE;
        ad->rstrip = (v = tj_get(a, "rstrip")) && v->type == TJ_TRUE;
        ad->single_word = (v = tj_get(a, "single_word")) && v->type == TJ_TRUE;
        /* tokenizers' default: normalized unless special */
        ad->normalized = (v = tj_get(a, "normalized")) ? v->type == TJ_TRUE : !ad->special;
        if (tk_strmap_put(&t->added_map, c->u.s, c->n, (int32_t)t->n_added - 1)) {
            err_prefix("%s: added_tokens[%u]", path, i);
            goto out;
        }
        if (trie_add(ad->normalized && t->norm ? &t->trie_norm : &t->trie_raw, c->u.s, c->n, t->n_added - 1)) goto out;
    }
    /* id -> token table */
    int32_t maxid = -1;
    for (uint32_t e = 0; e < t->bpe.vocab.n; e++)
        if (t->bpe.vocab.val[e] > maxid) maxid = t->bpe.vocab.val[e];
    for (int i = 0; i < t->n_added; i++)
        if (t->added[i].id > maxid) maxid = t->added[i].id;
    /* the id -> token tables are dense: a lone huge id (the file allows up to 2e9) would
     * ask for gigabytes; real vocabularies number their tokens from 0 with few gaps */
    const long defined = (long)t->bpe.vocab.n + t->n_added, id_cap = 2 * defined + 65536;
    if ((long)maxid >= id_cap || maxid >= (1 << 24)) {
        err_set("%s: token id %d is far past the %ld tokens the file defines (ids must number them from 0 "
                "with few gaps: at most %ld)", path, (int)maxid, defined, id_cap < (1 << 24) ? id_cap - 1 : (1L << 24) - 1);
        goto out;
    }
    t->n_vocab = maxid + 1;
    t->id_tok = calloc((size_t)t->n_vocab + 1, sizeof *t->id_tok);
    t->id_len = calloc((size_t)t->n_vocab + 1, sizeof *t->id_len);
    t->id_special = calloc((size_t)t->n_vocab + 1, 1);
    if (!t->id_tok || !t->id_len || !t->id_special) goto oom;
    for (uint32_t e = 0; e < t->bpe.vocab.n; e++) {
        int32_t id = t->bpe.vocab.val[e];
        uint64_t ko = t->bpe.vocab.koff[e];
        t->id_tok[id] = t->bpe.vocab.pool + (ko >> 24);
        t->id_len[id] = (uint32_t)(ko & 0xFFFFFF);
    }
    for (int i = 0; i < t->n_added; i++) {
        t->id_tok[t->added[i].id] = t->added[i].content;
        t->id_len[t->added[i].id] = (uint32_t)t->added[i].n;
        t->id_special[t->added[i].id] = (uint8_t)t->added[i].special;
    }
    rc = 0;
    goto out;
oom:
    err_set("out of memory loading %s", path);
out:
    tj_free(doc);
    return rc;
}

int tk_jinja_check(const char *tmpl, size_t tmpl_len, const char *where);

/* A chat template is parsed when the tokenizer opens, so that one the interpreter
 * cannot run (a syntax error, an expression nested past the limits) is refused at
 * start-up, naming its file and line, instead of failing every chat request. */
static int check_template(const celer_tokenizer *t) {
    return t->chat_template ? tk_jinja_check(t->chat_template, strlen(t->chat_template), t->tmpl_where) : 0;
}

celer_tokenizer *celer_tokenizer_open(const char *path) {
    tk_byte_map_init();
    struct stat st;
    if (stat(path, &st) != 0) {
        err_set("%s: no such file or directory", path);
        return NULL;
    }
    char dir[4096], file[4096];
    if (S_ISDIR(st.st_mode)) {
        snprintf(dir, sizeof dir, "%s", path);
        snprintf(file, sizeof file, "%s/tokenizer.json", path);
    } else {
        snprintf(file, sizeof file, "%s", path);
        snprintf(dir, sizeof dir, "%s", path);
        char *sl = strrchr(dir, '/');
        if (sl) *sl = 0;
        else snprintf(dir, sizeof dir, ".");
    }
    celer_tokenizer *t = calloc(1, sizeof *t);
    if (!t) { err_set("out of memory"); return NULL; }
    t->bos_id = t->eos_id = -1;
    if (!(t->path = mem_strdup(file)) || load_tokenizer_json(t, file) || load_template_file(t, dir) || load_config(t, dir) ||
        check_template(t)) {
        celer_tokenizer_free(t);
        return NULL;
    }
    return t;
}

void celer_tokenizer_free(celer_tokenizer *t) {
    if (!t) return;
    tk_bpe_free(&t->bpe);
    tk_norm_free(t->norm);
    tk_pre_free(t->pre);
    tk_dec_free(t->dec);
    for (int i = 0; i < t->n_added; i++) free(t->added[i].content);
    free(t->added);
    tk_strmap_free(&t->added_map);
    trie_free(&t->trie_raw);
    trie_free(&t->trie_norm);
    free(t->post.pre);
    free(t->post.post);
    free(t->id_tok);
    free(t->id_len);
    free(t->id_special);
    free(t->bos_token);
    free(t->eos_token);
    free(t->chat_template);
    free(t->tmpl_where);
    free(t->path);
    free(t);
}

/* ---- queries */
int celer_tokenizer_n_vocab(const celer_tokenizer *t) { return t->n_vocab; }
int32_t celer_tokenizer_bos(const celer_tokenizer *t) { return t->bos_id; }
int32_t celer_tokenizer_eos(const celer_tokenizer *t) { return t->eos_id; }
int celer_tokenizer_has_template(const celer_tokenizer *t) { return t->chat_template != NULL; }

int32_t celer_tokenizer_token_id(const celer_tokenizer *t, const char *tok) {
    size_t n = strlen(tok);
    int32_t a = tk_strmap_get(&t->added_map, tok, n);
    if (a >= 0) return t->added[a].id;
    return tk_strmap_get(&t->bpe.vocab, tok, n);
}

const char *celer_tokenizer_token(const celer_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab ? t->id_tok[id] : NULL;
}

int celer_tokenizer_is_special(const celer_tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->id_special[id];
}

/* ---- encoding */
typedef struct {
    int32_t *ids;
    size_t n, cap;
    tk_bpe_scratch *bpe;
    tk_pieces a, b;
    tk_buf norm;
    int text_only;      /* inside a marked span: special added tokens are not matched */
} enc_state;

static int push_id(enc_state *e, int32_t id) {
    if (e->n == e->cap) {
        size_t nc = e->cap ? e->cap * 2 : 64;
        int32_t *ni = realloc(e->ids, nc * sizeof *ni);
        if (!ni) return err_set("out of memory for token ids");
        e->ids = ni;
        e->cap = nc;
    }
    e->ids[e->n++] = id;
    return 0;
}

/* Pre-tokenizes and BPE-encodes normalized text (no added tokens inside). */
static int encode_plain(const celer_tokenizer *t, enc_state *e, const char *s, size_t n, int first) {
    if (!n) return 0;
    tkp_clear(&e->a);
    tkp_add(&e->a, s, n, first);
    tk_pieces *p = &e->a;
    if (t->pre) {
        if (tk_pre_apply(t->pre, &e->a, &e->b)) return -1;
        p = &e->b;
    }
    if (p->oom) return err_set("out of memory encoding");
    for (size_t i = 0; i < p->n; i++)
        if (tk_bpe_word(&t->bpe, e->bpe, p->text.p + p->v[i].off, p->v[i].len, &e->ids, &e->n, &e->cap)) return -1;
    return 0;
}

static int is_word_char(const char *s, size_t n, size_t at, int before) {
    uint32_t cp;
    if (before) {
        if (at == 0) return 0;
        size_t q = at - 1;
        while (q > 0 && ((unsigned char)s[q] & 0xC0) == 0x80) q--;
        utf8_dec((const unsigned char *)s + q, at - q, &cp);
    } else {
        if (at >= n) return 0;
        utf8_dec((const unsigned char *)s + at, n - at, &cp);
    }
    return cp == '_' || (cp < 128 ? ((cp | 32) >= 'a' && (cp | 32) <= 'z') || (cp >= '0' && cp <= '9') : !tk_is_space(cp));
}

/* Splits s at the tokens of trie; text between them goes to fn (plain text) */
typedef int (*text_fn)(const celer_tokenizer *t, enc_state *e, const char *s, size_t n, int first);

static int split_added(const celer_tokenizer *t, enc_state *e, const tk_trie *trie, const char *s, size_t n, int first,
                       text_fn fn) {
    size_t start = 0, i = 0;
    while (i < n && !trie->empty) {
        if (!trie->first[(unsigned char)s[i]]) { i++; continue; }
        size_t len = 0;
        int32_t k = trie_match(trie, s + i, n - i, &len);
        if (k >= 0 && e->text_only && t->added[k].special) k = -1;
        if (k < 0) { i++; continue; }
        const tk_added *ad = &t->added[k];
        size_t a = i, b = i + len;
        if (ad->single_word && (is_word_char(s, n, a, 1) || is_word_char(s, n, b, 0))) { i++; continue; }
        if (ad->lstrip)
            while (a > start) {
                size_t q = a - 1;
                while (q > start && ((unsigned char)s[q] & 0xC0) == 0x80) q--;
                uint32_t cp;
                utf8_dec((const unsigned char *)s + q, a - q, &cp);
                if (!tk_is_space(cp)) break;
                a = q;
            }
        if (ad->rstrip)
            while (b < n) {
                uint32_t cp;
                int l = utf8_dec((const unsigned char *)s + b, n - b, &cp);
                if (!tk_is_space(cp)) break;
                b += (size_t)l;
            }
        if (fn(t, e, s + start, a - start, first && start == 0) || push_id(e, ad->id)) return -1;
        start = i = b;
    }
    return fn(t, e, s + start, n - start, first && start == 0);
}

static int encode_normalized(const celer_tokenizer *t, enc_state *e, const char *s, size_t n, int first) {
    return split_added(t, e, &t->trie_norm, s, n, first, encode_plain);
}

static int encode_raw_segment(const celer_tokenizer *t, enc_state *e, const char *s, size_t n, int first) {
    if (!n) return 0;
    if (!t->norm) return encode_plain(t, e, s, n, first);
    tk_buf nb = {0};
    if (tk_norm_apply(t->norm, s, n, &nb)) { tkb_free(&nb); return -1; }
    int rc = encode_normalized(t, e, nb.p ? nb.p : "", nb.n, first);
    tkb_free(&nb);
    return rc;
}

/* A segment between control tokens of marked text: when it holds marks, they come out
 * and the rest is encoded with special tokens unmatched (the normalized-token pass
 * included), as tokenizers' encode_special_tokens=True encodes it. */
static int encode_marked_segment(const celer_tokenizer *t, enc_state *e, const char *s, size_t n, int first) {
    if (!n || !memmem(s, n, TK_MARK, TK_MARK_N)) return encode_raw_segment(t, e, s, n, first);
    tk_buf u = {0};
    tk_unmark(&u, s, n);
    if (u.oom) { tkb_free(&u); return err_set("out of memory encoding"); }
    e->text_only = 1;
    int rc = encode_raw_segment(t, e, u.p ? u.p : "", u.n, first);
    e->text_only = 0;
    tkb_free(&u);
    return rc;
}

void tk_unmark(tk_buf *b, const char *s, size_t n) {
    size_t at = 0;
    for (;;) {
        const char *m = memmem(s + at, n - at, TK_MARK, TK_MARK_N);
        if (!m) break;
        size_t i = (size_t)(m - s);
        tkb_put(b, s + at, i - at);
        at = i + TK_MARK_N;
        if (n - at >= TK_MARK_N && !memcmp(s + at, TK_MARK, TK_MARK_N)) { /* a doubled mark: the user's own U+FDD0 */
            tkb_put(b, TK_MARK, TK_MARK_N);
            at += TK_MARK_N;
        }
    }
    tkb_put(b, s + at, n - at);
}

int tk_special_starts_at(const celer_tokenizer *t, const char *s, size_t n) {
    const tk_trie *tries[2] = {&t->trie_raw, &t->trie_norm};
    for (int k = 0; k < 2; k++) {
        const tk_trie *tr = tries[k];
        if (tr->empty || !tr->first[(unsigned char)s[0]]) continue;
        uint32_t node = 0;
        for (size_t i = 0; i < n; i++) {
            uint64_t child;
            if (!tk_u64map_get(&tr->edges, (uint64_t)node << 8 | (unsigned char)s[i], &child)) break;
            node = (uint32_t)child;
            if (tr->term[node] >= 0 && t->added[tr->term[node]].special) return 1;
        }
    }
    return 0;
}

static int encode(const celer_tokenizer *t, const char *text, size_t len, int add_special, int marked, int32_t **ids);

int celer_tokenize(const celer_tokenizer *t, const char *text, size_t len, int add_special, int32_t **ids) {
    return encode(t, text, len, add_special, 0, ids);
}

int tk_encode_marked(const celer_tokenizer *t, const char *s, size_t n, int32_t **ids) { return encode(t, s, n, 0, 1, ids); }

static int encode(const celer_tokenizer *t, const char *text, size_t len, int add_special, int marked, int32_t **ids) {
    *ids = NULL;
    enc_state e = {0};
    tk_buf clean = {0};
    int rc = -1;
    if (!text && len) { err_set("tokenize: NULL text"); return -1; }
    if (!(e.bpe = tk_bpe_scratch_new())) return -1;
    const char *s = text ? text : "";
    if (!utf8_valid(s, len)) {
        utf8_lossy(&clean, s, len);
        if (clean.oom) { err_set("out of memory"); goto out; }
        s = clean.p;
        len = clean.n;
    }
    if (add_special)
        for (int i = 0; i < t->post.n_pre; i++)
            if (push_id(&e, t->post.pre[i])) goto out;
    if (split_added(t, &e, &t->trie_raw, s, len, 1, marked ? encode_marked_segment : encode_raw_segment)) goto out;
    if (add_special)
        for (int i = 0; i < t->post.n_post; i++)
            if (push_id(&e, t->post.post[i])) goto out;
    if (!e.ids && !(e.ids = malloc(sizeof *e.ids))) { err_set("out of memory"); goto out; } /* never NULL on success */
    *ids = e.ids;
    e.ids = NULL;
    rc = (int)e.n;
    if (e.n > (size_t)0x7fffffff) { err_set("tokenize: too many tokens"); free(*ids); *ids = NULL; rc = -1; }
out:
    free(e.ids);
    tk_bpe_scratch_free(e.bpe);
    tkp_free(&e.a);
    tkp_free(&e.b);
    tkb_free(&e.norm);
    tkb_free(&clean);
    return rc;
}

/* ---- decoding */
char *celer_detokenize(const celer_tokenizer *t, const int32_t *ids, size_t n, int skip_special, size_t *len) {
    tk_pieces p = {0};
    for (size_t i = 0; i < n; i++) {
        int32_t id = ids[i];
        if (id < 0 || id >= t->n_vocab || !t->id_tok[id]) continue;
        if (skip_special && t->id_special[id]) continue;
        tkp_add(&p, t->id_tok[id], t->id_len[id], 0);
    }
    if (p.oom) { tkp_free(&p); err_set("out of memory decoding"); return NULL; }
    tk_buf out = {0};
    if (t->dec) {
        if (tk_dec_apply(t->dec, &p)) { tkp_free(&p); return NULL; }
        for (size_t i = 0; i < p.n; i++) tkb_put(&out, p.text.p + p.v[i].off, p.v[i].len);
    } else {
        for (size_t i = 0; i < p.n; i++) {
            if (i) tkb_putc(&out, ' ');
            tkb_put(&out, p.text.p + p.v[i].off, p.v[i].len);
        }
    }
    tkp_free(&p);
    char *r = tkb_cstr(&out);
    if (!r) { tkb_free(&out); err_set("out of memory decoding"); return NULL; }
    if (len) *len = out.n;
    return r;
}

char *celer_tokenizer_token_bytes(const celer_tokenizer *t, int32_t id, size_t *len) {
    *len = 0;
    if (id < 0 || id >= t->n_vocab || !t->id_tok[id]) return calloc(1, 1);
    tk_pieces p = {0};
    tkp_add(&p, t->id_tok[id], t->id_len[id], 0);
    if (p.oom) { tkp_free(&p); err_set("out of memory decoding"); return NULL; }
    if (t->dec && !t->id_special[id] && tk_dec_apply_mode(t->dec, &p, 1)) { tkp_free(&p); return NULL; }
    tk_buf out = {0};
    for (size_t i = 0; i < p.n; i++) tkb_put(&out, p.text.p + p.v[i].off, p.v[i].len);
    tkp_free(&p);
    char *r = tkb_cstr(&out);
    if (!r) { tkb_free(&out); err_set("out of memory decoding"); return NULL; }
    *len = out.n;
    return r;
}

/* ---- chat templates */
char *tk_jinja_render(const char *tmpl, size_t tmpl_len, const char *where, const tj_val *vars, const char *const *extra,
                      const tj_val *extra_json_name_vals[], size_t *out_len);

static void json_escape(tk_buf *b, const char *s) {
    tkb_putc(b, '"');
    for (; *s; s++) {
        unsigned char ch = (unsigned char)*s;
        if (ch == '"' || ch == '\\') { tkb_putc(b, '\\'); tkb_putc(b, (char)ch); }
        else if (ch < 0x20) {
            char e[8];
            snprintf(e, sizeof e, "\\u%04x", ch);
            tkb_put(b, e, 6);
        } else tkb_putc(b, (char)ch);
    }
    tkb_putc(b, '"');
}

char *celer_chat_render(const celer_tokenizer *t, const char *messages_json, const char *tools_json,
                        int add_generation_prompt) {
    return celer_chat_render_vars(t, messages_json, tools_json, add_generation_prompt, NULL);
}

char *celer_chat_render_vars(const celer_tokenizer *t, const char *messages_json, const char *tools_json,
                             int add_generation_prompt, const char *extra_vars_json) {
    if (!t->chat_template) {
        err_set("%s: the tokenizer has no chat template (no chat_template.jinja, no \"chat_template\" in "
                "tokenizer_config.json)", t->path);
        return NULL;
    }
    if (!messages_json) { err_set("chat template: no messages"); return NULL; }
    /* check each input alone first so that errors name it */
    tj_doc *m = tj_parse(messages_json, strlen(messages_json), "messages");
    if (!m) return NULL;
    int ok = tj_root(m)->type == TJ_ARR;
    tj_free(m);
    if (!ok) { err_set("messages: want a JSON array of {\"role\": ..., \"content\": ...}"); return NULL; }
    if (tools_json) {
        tj_doc *tl = tj_parse(tools_json, strlen(tools_json), "tools");
        if (!tl) return NULL;
        ok = tj_root(tl)->type == TJ_ARR || tj_root(tl)->type == TJ_NULL;
        tj_free(tl);
        if (!ok) { err_set("tools: want a JSON array"); return NULL; }
    }
    /* the inside of the extra object, spliced after ours so that its keys win */
    const char *xa = NULL, *xb = NULL;
    if (extra_vars_json) {
        tj_doc *x = tj_parse(extra_vars_json, strlen(extra_vars_json), "template variables");
        if (!x) return NULL;
        ok = tj_root(x)->type == TJ_OBJ;
        int empty = ok && tj_root(x)->n == 0;
        tj_free(x);
        if (!ok) { err_set("template variables: want a JSON object, like {\"enable_thinking\": false}"); return NULL; }
        if (!empty) {
            xa = strchr(extra_vars_json, '{') + 1;
            xb = strrchr(extra_vars_json, '}');
        }
    }
    tk_buf v = {0};
    tkb_put(&v, "{\"messages\": ", sizeof "{\"messages\": " - 1);
    tkb_put(&v, messages_json, strlen(messages_json));
    tkb_put(&v, ", \"tools\": ", sizeof ", \"tools\": " - 1);
    if (tools_json) tkb_put(&v, tools_json, strlen(tools_json));
    else tkb_put(&v, "null", sizeof "null" - 1);
    tkb_put(&v, ", \"documents\": null, \"add_generation_prompt\": ", sizeof ", \"documents\": null, \"add_generation_prompt\": " - 1);
    if (add_generation_prompt) tkb_put(&v, "true", sizeof "true" - 1);
    else tkb_put(&v, "false", sizeof "false" - 1);
    if (t->bos_token) { tkb_put(&v, ", \"bos_token\": ", sizeof ", \"bos_token\": " - 1); json_escape(&v, t->bos_token); }
    if (t->eos_token) { tkb_put(&v, ", \"eos_token\": ", sizeof ", \"eos_token\": " - 1); json_escape(&v, t->eos_token); }
    if (xa && xb > xa) {
        tkb_put(&v, ", ", 2);
        tkb_put(&v, xa, (size_t)(xb - xa));
    }
    tkb_putc(&v, '}');
    if (v.oom) { tkb_free(&v); err_set("out of memory"); return NULL; }
    tj_doc *d = tj_parse(v.p, v.n, "template variables");
    tkb_free(&v);
    if (!d) return NULL;
    char *r = tk_jinja_render(t->chat_template, strlen(t->chat_template), t->tmpl_where, tj_root(d), NULL, NULL, NULL);
    tj_free(d);
    return r;
}
