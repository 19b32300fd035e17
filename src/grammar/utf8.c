/* grammar/utf8.c: turns codepoint ranges (a character class) into sequences of byte
 * ranges, so that the automaton, which reads bytes, matches whole UTF-8 characters.
 * A range is split where the encoded length changes and then until every byte
 * position ranges independently (the classic construction RE2 and Rust's
 * utf8-ranges describe); surrogates (U+D800..U+DFFF) are never matched. */
#include "grammar/grammar.h"

static int enc(uint32_t cp, uint8_t *o) {
    if (cp < 0x80) {
        o[0] = (uint8_t)cp;
        return 1;
    }
    if (cp < 0x800) {
        o[0] = (uint8_t)(0xC0 | (cp >> 6));
        o[1] = (uint8_t)(0x80 | (cp & 0x3F));
        return 2;
    }
    if (cp < 0x10000) {
        o[0] = (uint8_t)(0xE0 | (cp >> 12));
        o[1] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
        o[2] = (uint8_t)(0x80 | (cp & 0x3F));
        return 3;
    }
    o[0] = (uint8_t)(0xF0 | (cp >> 18));
    o[1] = (uint8_t)(0x80 | ((cp >> 12) & 0x3F));
    o[2] = (uint8_t)(0x80 | ((cp >> 6) & 0x3F));
    o[3] = (uint8_t)(0x80 | (cp & 0x3F));
    return 4;
}

static int split(uint32_t lo, uint32_t hi, utf8_seq_cb cb, void *ctx) {
    if (lo > hi) return 0;
    static const uint32_t bounds[] = {0x7F, 0x7FF, 0xFFFF};
    for (int i = 0; i < 3; i++)
        if (lo <= bounds[i] && hi > bounds[i])
            return split(lo, bounds[i], cb, ctx) ? -1 : split(bounds[i] + 1, hi, cb, ctx);
    if (lo <= 0xDFFF && hi >= 0xD800) {
        if (lo < 0xD800 && split(lo, 0xD7FF, cb, ctx)) return -1;
        return hi > 0xDFFF ? split(0xE000, hi, cb, ctx) : 0;
    }
    uint8_t a[4], b[4];
    int n = enc(lo, a);
    for (int i = 1; i < n; i++) {
        uint32_t m = (1u << (6 * i)) - 1;
        if ((lo & ~m) != (hi & ~m)) {
            if ((lo & m) != 0) return split(lo, lo | m, cb, ctx) ? -1 : split((lo | m) + 1, hi, cb, ctx);
            if ((hi & m) != m) return split(lo, (hi & ~m) - 1, cb, ctx) ? -1 : split(hi & ~m, hi, cb, ctx);
        }
    }
    enc(hi, b);
    return cb(ctx, n, a, b);
}

int utf8_ranges(const uint32_t *r, int n, utf8_seq_cb cb, void *ctx) {
    for (int i = 0; i < n; i++) {
        uint32_t hi = r[2 * i + 1] > 0x10FFFF ? 0x10FFFF : r[2 * i + 1];
        if (split(r[2 * i], hi, cb, ctx)) return -1;
    }
    return 0;
}
