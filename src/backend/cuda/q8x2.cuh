/* backend/cuda/q8x2.cuh: the fast precision's two-term int8 activations, which the
 * one-row 4-bit product (matvec.cu, kernel_mv_q4g_i8) multiplies on dp4a: their layout
 * and the warp-wide quantization of one 64-value piece, shared by the product's own
 * quantizing launch and by the kernels that write them ahead of it (ops.cu: add +
 * RMSNorm, GLU), so both give the same bytes.
 *
 * Per piece of 64 values: d = max|x| / 127, h = rn(x / d), l = rn((x / d - h) * 254),
 * both int8, so x = d (h + l / 254) to within d / 508 (about 16 bits of the piece's
 * largest value; bf16 keeps 8 bits of each value). XQ_W words a piece: word 4i + k
 * holds, for values 8i .. 8i + 7, k = 0: h of the even ones, 1: h of the odd ones, 2
 * and 3: the same for l (byte b: value 8i + 2b, or 8i + 2b + 1), the order in which
 * (w & 0x0f0f0f0f) and (w >> 4 & 0x0f0f0f0f) give a word's eight 4-bit codes; word
 * 32: d / 254, word 33: the piece's float sum (the bias term), 34-35 zero (a 36-word
 * stride puts the 8 lanes of a quarter-warp's 16-byte loads in different bank groups).
 * Includers include common.cuh first. */
#ifndef CELER_CUDA_Q8X2_CUH
#define CELER_CUDA_Q8X2_CUH

#define XQ_W 36

/* The whole warp calls it: lane l holds values 2l and 2l + 1 of the piece (a, b);
 * dst: the piece's XQ_W words. */
__device__ __forceinline__ void q8x2_piece(float a, float b, uint32_t *dst) {
    const int lane = threadIdx.x & 31;
    float amax = fmaxf(fabsf(a), fabsf(b)), sum = a + b;
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        amax = fmaxf(amax, __shfl_xor_sync(0xffffffffu, amax, o));
        sum += __shfl_xor_sync(0xffffffffu, sum, o);
    }
    const float inv = amax > 0.f ? 127.f / amax : 0.f;
    const float sa = a * inv, sb = b * inv;
    const int ha = max(-127, min(127, __float2int_rn(sa))), hb = max(-127, min(127, __float2int_rn(sb)));
    const int la = max(-127, min(127, __float2int_rn((sa - (float)ha) * 254.f)));
    const int lb = max(-127, min(127, __float2int_rn((sb - (float)hb) * 254.f)));
    /* this lane's bytes (h even, h odd, l even, l odd); lane 4i + k gathers byte k of
     * lanes 4i .. 4i + 3 into word 4i + k (a 4 x 4 byte transpose within the quad) */
    const uint32_t mine = (uint32_t)(ha & 0xff) | (uint32_t)(hb & 0xff) << 8 | (uint32_t)(la & 0xff) << 16 |
                          (uint32_t)(lb & 0xff) << 24;
    const uint32_t k = (uint32_t)(lane & 3), sel = k | (4u + k) << 4;
    uint32_t q[4];
#pragma unroll
    for (int i = 0; i < 4; i++) q[i] = __shfl_sync(0xffffffffu, mine, (lane & ~3) | i);
    dst[lane] = __byte_perm(__byte_perm(q[0], q[1], sel), __byte_perm(q[2], q[3], sel), 0x5410);
    if (lane < 4) dst[32 + lane] = lane == 0 ? __float_as_uint(amax / (127.f * 254.f)) : lane == 1 ? __float_as_uint(sum) : 0u;
}

#endif
