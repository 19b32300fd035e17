/* backend/cpu/peak_loop.h: the register-only FMA loop of the per-level peak files
 * (peak_avx2.c, peak_avx512.c; peak.c times it), written once over the vector width.
 * The including file defines PEAK_FN (the function's name), PEAK_V (the vector type),
 * PEAK_SET1, PEAK_FMA and PEAK_LOW (lane 0 as a float) and PEAK_LANES, then includes
 * this. 12 independent FMA chains: enough to cover the FMA latency on both pipes.
 * Returns the flops done (2 a lane per FMA). */
double PEAK_FN(long iters, float *sink) {
    PEAK_V a[12], m = PEAK_SET1(0.999999f), c = PEAK_SET1(1e-7f);
    for (int i = 0; i < 12; i++) a[i] = PEAK_SET1((float)i);
    for (long k = 0; k < iters; k++) {
#define STEP(i) a[i] = PEAK_FMA(a[i], m, c);
        STEP(0) STEP(1) STEP(2) STEP(3) STEP(4) STEP(5) STEP(6) STEP(7) STEP(8) STEP(9) STEP(10) STEP(11)
#undef STEP
    }
    float s = 0;
    for (int i = 0; i < 12; i++) s += PEAK_LOW(a[i]);
    *sink = s;
    return 12.0 * 2.0 * PEAK_LANES * (double)iters;
}
