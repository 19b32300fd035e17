/* tensor/dtype.h: scalar conversions between the stored float formats and float32. */
#ifndef CELER_DTYPE_H
#define CELER_DTYPE_H
#include <stdint.h>
#include <string.h>

static inline float bf16_to_f32(uint16_t b) {
    uint32_t u = (uint32_t)b << 16;
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* Round to nearest even, as torch does; NaN stays NaN. */
static inline uint16_t f32_to_bf16(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    if ((u & 0x7fffffffu) > 0x7f800000u) return (uint16_t)((u >> 16) | 0x40);
    u += 0x7fffu + ((u >> 16) & 1);
    return (uint16_t)(u >> 16);
}

static inline float f16_to_f32(uint16_t h) {
    uint32_t s = (uint32_t)(h & 0x8000) << 16, e = (h >> 10) & 0x1f, m = h & 0x3ff, u;
    if (e == 0) {
        if (m == 0) {
            u = s;
        } else { /* subnormal: renormalize */
            e = 127 - 15 + 1;
            while (!(m & 0x400)) { m <<= 1; e--; }
            u = s | (e << 23) | ((m & 0x3ff) << 13);
        }
    } else if (e == 31) {
        u = s | 0x7f800000u | (m << 13);
    } else {
        u = s | ((e + 127 - 15) << 23) | (m << 13);
    }
    float f;
    memcpy(&f, &u, 4);
    return f;
}

/* e8m0: a bare exponent, 2^(s - 127); 255 is NaN. */
static inline float e8m0_to_f32(uint8_t s) {
    uint32_t u = s == 0 ? 0x00400000u : (uint32_t)s << 23;
    if (s == 255) u = 0x7fc00000u;
    float f;
    memcpy(&f, &u, 4);
    return f;
}
#endif
