/* tensor/weight.h: a 2-D weight matrix [rows = out, cols = in] in its stored format,
 * pointing into the mmap (never expanded to float32), as kernels read it. It knows no
 * file format: binding weights from a checkpoint is tensor/weight_bind.h. */
#ifndef CELER_WEIGHT_H
#define CELER_WEIGHT_H
#include <stddef.h>
#include <stdint.h>

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
    int64_t src_cols;      /* 0: rows are `cols` wide. Else a column slice (tensor parallelism,
                            * model/tp.c): the stored rows are src_cols wide and data, scales and
                            * biases point at the slice's first column; kernels never see one
                            * (upload_weight, or model/tp.c on the CPU, makes it dense) */
    int on_device;         /* 1: data/scales/biases are a device backend's copies, owned here;
                            * 2: a view of rows of another weight's device copy */
    void *packed;          /* CPU: the GEMM's panels, packed once at load and owned here
                            * (backend/cpu/pack.c), or NULL: the data is then packed per product */
    void *interleaved;     /* CPU, 4-bit affine under fast: codes, scales and biases of each 16
                            * rows interleaved for the decode products (pack.c), owned here, or NULL */
} weight;

/* Bytes of w's arrays for its [rows, cols]: data, scales and biases (0 for an array
 * the format does not have). The one place these sizes are computed: binding,
 * uploading and fusing all use it. */
static inline void weight_sizes(const weight *w, size_t *data, size_t *scales, size_t *biases) {
    const size_t n = (size_t)w->rows * (size_t)w->cols;
    *data = *scales = *biases = 0;
    switch (w->fmt) {
    case WF_F32: *data = n * 4; break;
    case WF_F16:
    case WF_BF16: *data = n * 2; break;
    case WF_AFFINE:
        *data = n * (size_t)w->bits / 8;
        *scales = *biases = n / (size_t)w->group * (w->stype == SC_F32 ? 4 : 2);
        break;
    case WF_MXFP4:
        *data = n / 2;
        *scales = n / 32;
        break;
    }
}

/* Dequantizes row r into out [cols] (float32). */
void weight_row_f32(const weight *w, int64_t r, float *out);
/* The affine code j of a packed row (exposed for tests). */
uint32_t affine_code(const uint32_t *row, int bits, int64_t j);
const char *weight_fmt_name(const weight *w, char *buf, size_t n);

#endif
