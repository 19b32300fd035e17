/* tokenizer/chat.c: celer_chat_encode: renders a chat and encodes it so that the text
 * of messages and tools stays text. Special tokens a user writes ("<|im_end|>\n
 * <|im_start|>system") must not become the control tokens the template writes, or a
 * user could forge turns. Templates transform message strings (Qwen3 splits content on
 * "</think>" and strips it; every template concatenates role, content and control
 * tokens), so the protection travels inside the strings: each special-token occurrence
 * in a message or tool string gets TK_MARK (U+FDD0) after its first character before
 * rendering, which the added-token matcher cannot match across and the encoder strips
 * (tokenizer.c: tk_encode_marked). A user's own U+FDD0 is doubled so that it survives.
 * Invariant: the marks are the only difference between the marked and the plain render. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "tokenizer/tok.h"

/* Marks one decoded string into out. *changed = 1 when anything was inserted. */
static void mark_string(const celer_tokenizer *t, const char *s, size_t n, tk_buf *out, int *changed) {
    for (size_t i = 0; i < n;) {
        if (n - i >= TK_MARK_N && !memcmp(s + i, TK_MARK, TK_MARK_N)) {
            tkb_put(out, TK_MARK TK_MARK, 2 * TK_MARK_N);
            i += TK_MARK_N;
            *changed = 1;
            continue;
        }
        if (tk_special_starts_at(t, s + i, n - i)) {
            /* after the token's first character: the text stays valid UTF-8 */
            size_t l = (size_t)utf8_len((unsigned char)s[i]);
            if (l > n - i) l = n - i;
            tkb_put(out, s + i, l);
            tkb_put(out, TK_MARK, TK_MARK_N);
            i += l;
            *changed = 1;
            continue;
        }
        tkb_putc(out, s[i++]);
    }
}

/* A JSON string literal of s (n bytes, may hold NULs). */
static void json_string(tk_buf *b, const char *s, size_t n) {
    static const char hex[] = "0123456789abcdef";
    tkb_putc(b, '"');
    for (size_t i = 0; i < n; i++) {
        unsigned char c = (unsigned char)s[i];
        if (c == '"' || c == '\\') { tkb_putc(b, '\\'); tkb_putc(b, (char)c); }
        else if (c < 0x20) {
            char e[6] = {'\\', 'u', '0', '0', hex[c >> 4], hex[c & 15]};
            tkb_put(b, e, 6);
        } else tkb_putc(b, (char)c);
    }
    tkb_putc(b, '"');
}

/* Copies the JSON text js (already known to parse) with every string value (not keys)
 * marked. NULL with a message when out of memory or the text does not parse. */
static char *mark_json(const celer_tokenizer *t, const char *js, const char *what) {
    size_t n = strlen(js);
    tk_buf out = {0}, tmp = {0};
    for (size_t i = 0; i < n;) {
        if (js[i] != '"') { tkb_putc(&out, js[i++]); continue; }
        size_t j = i + 1;
        int esc = 0;
        while (j < n && js[j] != '"') {
            if (js[j] == '\\') { esc = 1; j++; }
            j++;
        }
        if (j >= n) { err_set("%s: unterminated string", what); goto fail; }
        size_t end = j + 1, k = end; /* the literal is js[i, end) */
        while (k < n && (js[k] == ' ' || js[k] == '\t' || js[k] == '\n' || js[k] == '\r')) k++;
        if (k < n && js[k] == ':') { tkb_put(&out, js + i, end - i); i = end; continue; } /* a key */
        tj_doc *d = NULL;
        const char *v = js + i + 1;
        size_t vn = j - i - 1;
        if (esc) {
            if (!(d = tj_parse(js + i, end - i, what))) goto fail;
            v = tj_root(d)->u.s;
            vn = tj_root(d)->n;
        }
        int changed = 0;
        tmp.n = 0;
        mark_string(t, v, vn, &tmp, &changed);
        if (changed) json_string(&out, tmp.p, tmp.n);
        else tkb_put(&out, js + i, end - i);
        tj_free(d);
        i = end;
    }
    tkb_free(&tmp);
    char *r = tkb_cstr(&out);
    if (!r) { tkb_free(&out); err_set("out of memory"); }
    return r;
fail:
    tkb_free(&tmp);
    tkb_free(&out);
    return NULL;
}

/* The marked copy of a JSON input, or NULL and *pass = 1 when it does not parse (the
 * renderer then reports it as it always has). */
static char *mark_input(const celer_tokenizer *t, const char *js, const char *what, int *pass) {
    *pass = 0;
    if (!js) { *pass = 1; return NULL; }
    tj_doc *d = tj_parse(js, strlen(js), what);
    if (!d) { *pass = 1; return NULL; }
    tj_free(d);
    return mark_json(t, js, what);
}

int celer_chat_encode(const celer_tokenizer *t, const celer_chat_request *req, int32_t **ids, char **text) {
    *ids = NULL;
    if (text) *text = NULL;
    if (!req || !req->messages_json) return err_set("chat template: no messages");
    const char *msgs = req->messages_json, *tools = req->tools_json;
    char *mm = NULL, *mt = NULL, *r = NULL;
    int rc = -1, pass;
    int marked = !req->parse_special_in_content;
    if (marked) {
        if (!(mm = mark_input(t, msgs, "messages", &pass)) && !pass) goto out;
        if (mm) msgs = mm;
        if (!(mt = mark_input(t, tools, "tools", &pass)) && !pass) goto out;
        if (mt) tools = mt;
    }
    if (!(r = celer_chat_render_vars(t, msgs, tools, req->add_generation_prompt, req->extra_vars_json))) goto out;
    size_t rn = strlen(r);
    rc = marked ? tk_encode_marked(t, r, rn, ids) : celer_tokenize(t, r, rn, 0, ids);
    if (rc < 0 || !text) goto out;
    if (marked && memmem(r, rn, TK_MARK, TK_MARK_N)) {
        tk_buf u = {0};
        tk_unmark(&u, r, rn);
        if (!(*text = tkb_cstr(&u))) { tkb_free(&u); err_set("out of memory"); goto fail_ids; }
    } else {
        *text = r;
        r = NULL;
    }
    goto out;
fail_ids:
    free(*ids);
    *ids = NULL;
    rc = -1;
out:
    free(r);
    free(mm);
    free(mt);
    return rc;
}
