/* backend/cpu/cpu_level.c: which set of CPU kernels runs: the best this processor
 * and its OS support (cpuid + xgetbv, probed once), unless CELER_CPU forces a lower
 * one (generic, avx2, avx512; CELER_NO_SIMD=1 is kept as a spelling of generic).
 * Forcing a level the processor lacks is an error at backend creation, never a
 * silent fallback. Every kernel selector asks cpu_level(). */
#include <stdio.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "base/err.h"
#include "base/settings.h"
#include "celer.h"

typedef struct {
    int level;       /* CPU_GENERIC .. CPU_AVX512: the best the hardware runs */
    int bf16, vnni;  /* AVX512_BF16, AVX512_VNNI (only meaningful with avx512) */
} cpu_caps;

#if defined(__x86_64__) && defined(__GNUC__)
#include <cpuid.h>

static cpu_caps probe(void) {
    cpu_caps c = {CPU_GENERIC, 0, 0};
    unsigned a, b, cx, d;
    if (!__get_cpuid(1, &a, &b, &cx, &d)) return c;
    const unsigned fma = 1u << 12, osxsave = 1u << 27, avx = 1u << 28, f16c = 1u << 29;
    if ((cx & (fma | osxsave | avx | f16c)) != (fma | osxsave | avx | f16c)) return c;
    unsigned lo, hi;
    __asm__("xgetbv" : "=a"(lo), "=d"(hi) : "c"(0));
    if ((lo & 6) != 6) return c; /* XMM and YMM state saved by the OS */
    if (!__get_cpuid_count(7, 0, &a, &b, &cx, &d)) return c;
    if (!((b >> 5) & 1)) return c; /* AVX2 */
    c.level = CPU_AVX2;
    /* AVX-512 F (16), DQ (17), BW (30), VL (31), and opmask + ZMM state (xcr0 bits 5-7) */
    const unsigned f512 = (1u << 16) | (1u << 17) | (1u << 30) | (1u << 31);
    if ((b & f512) != f512 || (lo & 0xe0) != 0xe0) return c;
    c.level = CPU_AVX512;
    c.vnni = (cx >> 11) & 1;
    unsigned a1, b1, c1, d1;
    if (__get_cpuid_count(7, 1, &a1, &b1, &c1, &d1)) c.bf16 = (a1 >> 5) & 1;
    return c;
}
#else
static cpu_caps probe(void) { return (cpu_caps){CPU_GENERIC, 0, 0}; }
#endif

static int pretend = -1; /* cpu_level_pretend_hw: tests only */

static cpu_caps caps(void) {
    static cpu_caps c;
    static int done; /* a benign race: every thread computes the same value */
    if (!done) {
        c = probe();
        done = 1;
    }
    if (pretend >= 0 && pretend < c.level) return (cpu_caps){pretend, 0, 0};
    return c;
}

void cpu_level_pretend_hw(int level) { pretend = level; }

static const char *const names[] = {"generic", "avx2", "avx512"};

const char *cpu_level_name(int level) { return level >= 0 && level <= CPU_AVX512 ? names[level] : "?"; }

int cpu_level_hw(void) { return caps().level; }

int cpu_has_avx512_bf16(void) { return cpu_level() >= CPU_AVX512 && caps().bf16; }
int cpu_has_avx512_vnni(void) { return cpu_level() >= CPU_AVX512 && caps().vnni; }

/* The level CELER_CPU (or CELER_NO_SIMD) asks for, -1 when unset, -2 when unknown. */
static int requested(void) {
    const char *v = setting_str(SET_CELER_CPU);
    if (v) {
        for (int i = 0; i <= CPU_AVX512; i++)
            if (strcmp(v, names[i]) == 0) return i;
        return -2;
    }
    return setting_flag(SET_CELER_NO_SIMD) ? CPU_GENERIC : -1;
}

int cpu_level(void) {
    int r = requested(), hw = caps().level;
    /* an invalid request is reported by cpu_level_check; kernels never go above hw */
    return r < 0 || r > hw ? hw : r;
}

int cpu_level_check(void) {
    int r = requested(), hw = caps().level;
    const char *q4 = setting_str(SET_CELER_CPU_Q4DEC);
    if (q4 && strcmp(q4, "auto") != 0 && strcmp(q4, "bf16") != 0 && strcmp(q4, "int16") != 0)
        return err_set("CELER_CPU_Q4DEC=%s: not a 4-bit decode kernel (auto, bf16 or int16)", q4);
    if (r == -2)
        return err_set("CELER_CPU=%s: not a CPU kernel level (generic, avx2 or avx512)", setting_str(SET_CELER_CPU));
    if (r > hw)
        return err_set("CELER_CPU=%s: this processor (or its OS) lacks %s; the best it runs is %s", names[r],
                       r == CPU_AVX512 ? "AVX-512 F/BW/VL/DQ" : "AVX2+FMA+F16C", names[hw]);
    return 0;
}

const char *celer_cpu_kernels(void) {
    static char buf[7][64]; /* one per level, feature set and 4-bit decode kernel: callers may keep the pointer */
    const int w16 = mm_q4_decode_int16(), rows16 = w16 && setting_flag(SET_CELER_CPU_PACK);
    int l = cpu_level(), i = l == CPU_AVX512 ? 3 + (cpu_has_avx512_bf16() || cpu_has_avx512_vnni()) + w16 + rows16 : l;
    /* int16 with the weights interleaved by 16 rows (pack.c) from 3 rows a product */
    const char *q4 = l < CPU_AVX512 || !(cpu_has_avx512_bf16() || cpu_has_avx512_vnni()) ? ""
                     : rows16 ? ", fast 4-bit decode: int16, rows x16"
                     : w16    ? ", fast 4-bit decode: int16"
                              : ", fast 4-bit decode: bf16";
    snprintf(buf[i], sizeof buf[i], "%s%s%s%s", names[l], cpu_has_avx512_bf16() ? " +bf16" : "",
             cpu_has_avx512_vnni() ? " +vnni" : "", q4);
    return buf[i];
}
