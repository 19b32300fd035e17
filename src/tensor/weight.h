/* tensor/weight.h: a 2-D weight matrix [rows = out, cols = in] in its stored format,
 * pointing into the mmap (never expanded to float32), and the quantization settings
 * that say how a checkpoint stores each module. */
#ifndef CELER_WEIGHT_H
#define CELER_WEIGHT_H
#include <jansson.h>
#include <stddef.h>
#include <stdint.h>

#include "io/checkpoint.h"

typedef enum {
    WF_F32,
    WF_F16,
    WF_BF16,
    WF_AFFINE, /* MLX affine: w = code * scale + bias, `bits` per code, packed LSB first in u32 */
    WF_MXFP4,  /* e2m1 codes (8 per u32, LSB first), e8m0 scale per 32, no bias */
} weight_fmt;

typedef enum { SC_BF16, SC_F16, SC_F32 } scale_type;

typedef struct {
    weight_fmt fmt;
    int64_t rows, cols;
    const void *data;      /* F32/F16/BF16: [rows, cols]; AFFINE/MXFP4: u32 [rows, cols * bits / 32] */
    const void *scales;    /* AFFINE: [rows, cols / group] (scale_type); MXFP4: u8 [rows, cols / 32] */
    const void *biases;    /* AFFINE: [rows, cols / group] (scale_type); else NULL */
    scale_type stype;
    int bits, group;       /* quantized formats */
    size_t nbytes;         /* bytes one full product reads */
    int on_device;         /* 1: data/scales/biases are a device backend's copies, owned here;
                            * 2: a view of rows of another weight's device copy */
} weight;

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
/* Dequantizes row r into out [cols] (float32). */
void weight_row_f32(const weight *w, int64_t r, float *out);
/* The affine code j of a packed row (exposed for tests). */
uint32_t affine_code(const uint32_t *row, int bits, int64_t j);
const char *weight_fmt_name(const weight *w, char *buf, size_t n);

/* Loads a float tensor of the given shape [ndim] into a new float32 array (row-major);
 * NULL with want versus got when it is missing or shaped otherwise. */
float *tensor_load_f32(const checkpoint *c, const char *name, int ndim, const int64_t *shape);
/* Loads a 1-D tensor of n elements (any float dtype) into a new float32 array. */
float *vec_load_f32(const checkpoint *c, const char *name, int64_t n);
#endif
