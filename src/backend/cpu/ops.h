/* backend/cpu/ops.h: CPU entry points of the op table defined outside cpu.c
 * (mixture-of-experts routing and expert products, moe.c). */
#ifndef CELER_CPU_OPS_H
#define CELER_CPU_OPS_H
#include "backend/backend.h"

void cpu_moe_route(backend *b, const float *logits, int T, int E, int k, int kind,
                   const float *expert_scale, int32_t *sel, float *w);
void cpu_moe(backend *b, const moe_experts *e, const float *x, const int32_t *sel, const float *w,
             int T, float *out, float *work);
#endif
