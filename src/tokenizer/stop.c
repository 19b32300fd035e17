/* tokenizer/stop.c: stop strings over streamed text (celer_textstream), the one place
 * they are matched: the CLI (--stop) and the server ("stop") both go through here,
 * driven by the generation loop (engine/generate.c).
 *
 * The stream sits on the streaming detokenizer (decode.c), which never returns a
 * broken UTF-8 sequence. It keeps `held`: the text that is not final yet. Invariant:
 * after every call, held is the longest tail of the text so far that is a proper
 * prefix of some stop string. Any occurrence of a stop string that is still being
 * written therefore starts inside held (its part written so far is such a tail), so
 * searching held alone finds every stop string, however the tokens split it. At a
 * hit the text before the earliest occurrence is returned and the stream is closed. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "celer_tokenizer.h"

struct celer_textstream {
    celer_detok *dt;
    char **stop;          /* [n_stop] non-empty stop strings */
    size_t *stop_len;     /* [n_stop] */
    int n_stop;
    char *held;           /* [cap] not yet final: held[0, held_len) */
    size_t held_len, cap;
    char *out;            /* [cap] what the last call returns */
    int hit;              /* a stop string appeared: nothing more is returned */
};

celer_textstream *celer_textstream_new(const celer_tokenizer *t, int skip_special, const char *const *stop,
                                       int n_stop) {
    if (n_stop < 0 || (n_stop > 0 && !stop)) {
        err_set("text stream: bad stop strings (%d)", n_stop);
        return NULL;
    }
    celer_textstream *s = calloc(1, sizeof *s);
    if (!s) goto oom;
    if (t && !(s->dt = celer_detok_new(t, skip_special))) {
        free(s);
        return NULL;
    }
    if (n_stop && (!(s->stop = calloc((size_t)n_stop, sizeof *s->stop)) ||
                   !(s->stop_len = calloc((size_t)n_stop, sizeof *s->stop_len))))
        goto oom;
    for (int i = 0; i < n_stop; i++) {
        if (!stop[i] || !stop[i][0]) continue;
        if (!(s->stop[s->n_stop] = strdup(stop[i]))) goto oom;
        s->stop_len[s->n_stop++] = strlen(stop[i]);
    }
    return s;
oom:
    celer_textstream_free(s);
    err_set("text stream: out of memory");
    return NULL;
}

void celer_textstream_free(celer_textstream *s) {
    if (!s) return;
    celer_detok_free(s->dt);
    for (int i = 0; i < s->n_stop; i++) free(s->stop[i]);
    free(s->stop);
    free(s->stop_len);
    free(s->held);
    free(s->out);
    free(s);
}

/* Room for n bytes (and a NUL) in held and out. */
static int reserve(celer_textstream *s, size_t n) {
    if (n + 1 <= s->cap) return 0;
    size_t cap = s->cap ? s->cap : 64;
    while (cap < n + 1) cap *= 2;
    char *h = realloc(s->held, cap);
    if (h) s->held = h;
    char *o = h ? realloc(s->out, cap) : NULL;
    if (o) s->out = o;
    if (!h || !o) return err_set("text stream: out of memory");
    s->cap = cap;
    return 0;
}

/* Appends text to held, then moves what became final to out (NUL-terminated). At
 * the end (final), nothing is held back. */
static const char *advance(celer_textstream *s, const char *text, size_t n, int final, size_t *len, int *hit) {
    size_t out_len = 0;
    if (!s->hit && reserve(s, s->held_len + n) != 0) return NULL;
    if (!s->hit && n) {
        memcpy(s->held + s->held_len, text, n);
        s->held_len += n;
    }
    if (!s->hit) {
        /* the earliest occurrence of any stop string */
        const char *first = NULL;
        for (int i = 0; i < s->n_stop; i++) {
            const char *at = memmem(s->held, s->held_len, s->stop[i], s->stop_len[i]);
            if (at && (!first || at < first)) first = at;
        }
        size_t keep = 0;
        if (first) {
            out_len = (size_t)(first - s->held);
            s->hit = 1;
        } else if (!final) {
            /* the longest tail that is a proper prefix of a stop string */
            for (int i = 0; i < s->n_stop; i++) {
                size_t k = s->stop_len[i] - 1 < s->held_len ? s->stop_len[i] - 1 : s->held_len;
                for (; k > keep; k--)
                    if (memcmp(s->held + s->held_len - k, s->stop[i], k) == 0) {
                        keep = k;
                        break;
                    }
            }
            out_len = s->held_len - keep;
        } else {
            out_len = s->held_len;
        }
        memcpy(s->out, s->held, out_len);
        if (s->hit) s->held_len = 0;
        else {
            memmove(s->held, s->held + out_len, keep);
            s->held_len = keep;
        }
    }
    if (!s->out && reserve(s, 0) != 0) return NULL;
    s->out[out_len] = 0;
    if (len) *len = out_len;
    if (hit) *hit = s->hit;
    return s->out;
}

const char *celer_textstream_put_text(celer_textstream *s, const char *text, size_t n, size_t *len, int *hit) {
    return advance(s, text, n, 0, len, hit);
}

const char *celer_textstream_put(celer_textstream *s, int32_t id, size_t *len, int *hit) {
    size_t n = 0;
    const char *piece = "";
    if (!s->hit && s->dt && !(piece = celer_detok_put(s->dt, id, &n))) return NULL;
    return advance(s, piece, n, 0, len, hit);
}

const char *celer_textstream_flush(celer_textstream *s, size_t *len, int *hit) {
    size_t n = 0;
    const char *rest = "";
    if (!s->hit && s->dt && !(rest = celer_detok_flush(s->dt, &n))) return NULL;
    return advance(s, rest, n, 1, len, hit);
}
