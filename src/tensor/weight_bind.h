/* tensor/weight_bind.h: binding checkpoint tensors as weights (tensor/weight.h), and
 * the quantization settings of config.json that say how a checkpoint stores each
 * module. The checkpoint and JSON layers stop here: kernels include only weight.h. */
#ifndef CELER_WEIGHT_BIND_H
#define CELER_WEIGHT_BIND_H
#include <jansson.h>

#include "io/checkpoint.h"
#include "tensor/weight.h"

typedef enum { QM_NONE, QM_AFFINE, QM_MXFP4 } quant_mode;

typedef struct {
    quant_mode mode;
    int bits, group;
} quant_spec;

/* The "quantization" object of config.json: defaults plus per-module overrides. */
typedef struct {
    quant_spec dflt;       /* mode QM_NONE when the checkpoint is not quantized */
    const json_t *obj;     /* borrowed; overrides are looked up here by module path */
    const char *where;     /* config path, for messages */
} quant_cfg;

/* Reads config["quantization"] (or "quantization_config" when it has bits). */
int quant_cfg_init(quant_cfg *q, const json_t *config, const char *where);
/* The spec for a module path such as "model.layers.0.mlp.down_proj". */
int quant_cfg_lookup(const quant_cfg *q, const char *module, quant_spec *out);
/* Validates a spec (supported mode, bits and group); -1 with a message otherwise. */
int quant_spec_check(const quant_spec *s, const char *module);

/* Binds module's weight ("<module>.weight", plus ".scales"/".biases" when quantized)
 * with logical shape [rows, cols]; errors say want versus got. */
int weight_bind(weight *w, const checkpoint *c, const quant_cfg *q, const char *module,
                int64_t rows, int64_t cols);
/* Binds the n experts of a stacked expert tensor as n weights [rows, cols] each,
 * pointing into the mapping (one slice per expert). Accepted spellings of `name`:
 *   name                       F32/F16/BF16 [n, rows, cols] (transformers); with
 *                              in_major the stored layout is [n, cols, rows] and each
 *                              slice is bound as it is stored, [cols, rows] (the
 *                              transpose: y = x W, see backend moe_experts.in_major),
 *                              and *in_major_out is set to 1;
 *   name_blocks, name_scales   U8 [n, rows, cols/32, 16] e2m1 codes and U8 [n, rows,
 *                              cols/32] e8m0 scales (original gpt-oss MXFP4);
 *   name.weight (.scales, .biases)  mlx-community per-expert stacks, plain or in the
 *                              quantization config.json gives that module (affine, mxfp4).
 * Errors name the tensor with want versus got. *in_major_out is 0 for the other
 * spellings (their slices are [rows, cols]). Nothing is copied. */
int weight_bind_experts(weight *w, const checkpoint *c, const quant_cfg *q, const char *name, int n,
                        int64_t rows, int64_t cols, int in_major, int *in_major_out);
/* Loads a float tensor of the given shape [ndim] into a new float32 array (row-major);
 * NULL with want versus got when it is missing or shaped otherwise. */
float *tensor_load_f32(const checkpoint *c, const char *name, int ndim, const int64_t *shape);
/* Loads a 1-D tensor of n elements (any float dtype) into a new float32 array. */
float *vec_load_f32(const checkpoint *c, const char *name, int64_t n);
#endif
