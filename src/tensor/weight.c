/* tensor/weight.c: binds checkpoint tensors as weights (plain, MLX-quantized, MXFP4;
 * single matrices or per-expert slices of stacked expert tensors),
 * reads the quantization settings of config.json, and dequantizes rows. */
#include "tensor/weight_bind.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "tensor/dtype.h"

static int parse_spec(const json_t *o, const quant_spec *base, quant_spec *s, const char *where, const char *what) {
    *s = *base;
    json_t *b = json_object_get(o, "bits"), *g = json_object_get(o, "group_size"), *m = json_object_get(o, "mode");
    if (b && !json_is_integer(b)) return err_set("%s: %s: \"bits\" must be an integer", where, what);
    if (g && !json_is_integer(g)) return err_set("%s: %s: \"group_size\" must be an integer", where, what);
    if (m && !json_is_string(m)) return err_set("%s: %s: \"mode\" must be a string", where, what);
    if (s->mode == QM_NONE) s->mode = QM_AFFINE;
    if (m) {
        const char *ms = json_string_value(m);
        if (strcmp(ms, "affine") == 0) s->mode = QM_AFFINE;
        else if (strcmp(ms, "mxfp4") == 0) { s->mode = QM_MXFP4; s->bits = 4; s->group = 32; }
        else return err_set("%s: %s: unsupported quantization mode \"%s\" (supported: affine, mxfp4)", where, what, ms);
    }
    if (b) s->bits = (int)json_integer_value(b);
    if (g) s->group = (int)json_integer_value(g);
    if (!b && !base->bits) s->bits = 4;   /* MLX's defaults */
    if (!g && !base->group) s->group = s->mode == QM_MXFP4 ? 32 : 64;
    return quant_spec_check(s, what) == 0 ? 0 : err_prefix("%s", where);
}

int quant_spec_check(const quant_spec *s, const char *module) {
    if (s->mode == QM_NONE) return 0;
    if (s->mode == QM_MXFP4) {
        if (s->bits != 4 || s->group != 32)
            return err_set("%s: mxfp4 needs bits 4 and group_size 32, got bits %d group_size %d", module, s->bits, s->group);
        return 0;
    }
    int b = s->bits;
    if (b != 2 && b != 3 && b != 4 && b != 5 && b != 6 && b != 8)
        return err_set("%s: unsupported quantization bits %d (supported: 2, 3, 4, 5, 6, 8)", module, b);
    if (s->group != 32 && s->group != 64 && s->group != 128)
        return err_set("%s: unsupported group_size %d (supported: 32, 64, 128)", module, s->group);
    return 0;
}

int quant_cfg_init(quant_cfg *q, const json_t *config, const char *where) {
    memset(q, 0, sizeof *q);
    q->where = where;
    const json_t *o = json_object_get(config, "quantization");
    if (!o || json_is_null(o)) {
        /* MLX also writes quantization_config; transformers' quant methods (mxfp4 experts
         * of gpt-oss, ...) are handled by the family that uses them. */
        const json_t *qc = json_object_get(config, "quantization_config");
        if (qc && json_object_get(qc, "bits") && !json_object_get(qc, "quant_method")) o = qc;
    }
    if (!o || json_is_null(o)) return 0;
    if (!json_is_object(o)) return err_set("%s: \"quantization\" must be an object", where);
    quant_spec none = {QM_NONE, 0, 0};
    if (parse_spec(o, &none, &q->dflt, where, "quantization") != 0) return -1;
    q->obj = o;
    return 0;
}

int quant_cfg_lookup(const quant_cfg *q, const char *module, quant_spec *out) {
    *out = q->dflt;
    if (!q->obj) return 0;
    const json_t *ov = json_object_get(q->obj, module);
    if (!ov) return 0;
    if (json_is_false(ov)) { out->mode = QM_NONE; return 0; }
    if (json_is_true(ov)) return 0;
    if (!json_is_object(ov)) return err_set("%s: quantization[\"%s\"] must be an object or false", q->where, module);
    return parse_spec(ov, &q->dflt, out, q->where, module);
}

static void shape_str(const st_tensor *t, char *buf, size_t n) {
    size_t k = (size_t)snprintf(buf, n, "%s [", st_dtype_name(t->dtype));
    for (int i = 0; i < t->ndim && k < n; i++)
        k += (size_t)snprintf(buf + k, n - k, "%s%lld", i ? ", " : "", (long long)t->shape[i]);
    if (k < n) snprintf(buf + k, n - k, "]");
}

static int want_2d(const checkpoint *c, const st_tensor *t, const char *name, int64_t r, int64_t cl, const char *want_dt) {
    if (t->ndim == 2 && t->shape[0] == r && t->shape[1] == cl) return 0;
    char got[128];
    shape_str(t, got, sizeof got);
    return err_set("%s: %s: want %s [%lld, %lld], got %s", ckpt_where(c, name), name, want_dt,
                   (long long)r, (long long)cl, got);
}

static int scale_dtype(const checkpoint *c, const st_tensor *t, const char *name, scale_type *st) {
    switch (t->dtype) {
    case ST_BF16: *st = SC_BF16; return 0;
    case ST_F16: *st = SC_F16; return 0;
    case ST_F32: *st = SC_F32; return 0;
    default: return err_set("%s: %s: scales/biases must be BF16, F16 or F32, got %s", ckpt_where(c, name), name, st_dtype_name(t->dtype));
    }
}

int weight_bind(weight *w, const checkpoint *c, const quant_cfg *q, const char *module, int64_t rows, int64_t cols) {
    char name[512], sname[512], bname[512];
    memset(w, 0, sizeof *w);
    w->rows = rows;
    w->cols = cols;
    snprintf(name, sizeof name, "%s.weight", module);
    snprintf(sname, sizeof sname, "%s.scales", module);
    snprintf(bname, sizeof bname, "%s.biases", module);
    const st_tensor *t = ckpt_find(c, name);
    if (!t) return err_set("%s: missing weight \"%s\"", c->dir, name);
    const st_tensor *sc = ckpt_find(c, sname);
    if (!sc) {
        switch (t->dtype) {
        case ST_F32: w->fmt = WF_F32; break;
        case ST_F16: w->fmt = WF_F16; break;
        case ST_BF16: w->fmt = WF_BF16; break;
        default:
            return err_set("%s: %s: dtype %s is not a float weight and there is no %s (want BF16, F16 or F32)",
                           ckpt_where(c, name), name, st_dtype_name(t->dtype), sname);
        }
        if (want_2d(c, t, name, rows, cols, st_dtype_name(t->dtype)) != 0) return -1;
        w->data = t->data;
        w->nbytes = t->nbytes;
        return 0;
    }
    quant_spec s;
    if (quant_cfg_lookup(q, module, &s) != 0) return -1;
    if (s.mode == QM_NONE)
        return err_set("%s: %s exists but config.json has no quantization for \"%s\" (add a \"quantization\" object)",
                       ckpt_where(c, sname), sname, module);
    if (quant_spec_check(&s, module) != 0) return err_prefix("%s", q->where);
    if ((cols * s.bits) % 32 != 0 || cols % s.group != 0)
        return err_set("%s: %s: in-dimension %lld is not a multiple of group_size %d and of 32/bits",
                       ckpt_where(c, name), name, (long long)cols, s.group);
    if (t->dtype != ST_U32 && t->dtype != ST_I32)
        return err_set("%s: %s: packed quantized weight must be U32 or I32, got %s", ckpt_where(c, name), name, st_dtype_name(t->dtype));
    if (want_2d(c, t, name, rows, cols * s.bits / 32, "U32") != 0) return -1;
    int64_t ng = cols / s.group;
    w->bits = s.bits;
    w->group = s.group;
    w->data = t->data;
    w->scales = sc->data;
    w->nbytes = t->nbytes + sc->nbytes;
    if (s.mode == QM_MXFP4) {
        w->fmt = WF_MXFP4;
        if (sc->dtype != ST_U8) return err_set("%s: %s: mxfp4 scales must be U8 (e8m0), got %s", ckpt_where(c, sname), sname, st_dtype_name(sc->dtype));
        return want_2d(c, sc, sname, rows, ng, "U8");
    }
    w->fmt = WF_AFFINE;
    const st_tensor *bi = ckpt_find(c, bname);
    if (!bi) return err_set("%s: missing \"%s\" (affine quantization needs scales and biases)", c->dir, bname);
    if (scale_dtype(c, sc, sname, &w->stype) != 0) return -1;
    if (want_2d(c, sc, sname, rows, ng, st_dtype_name(sc->dtype)) != 0) return -1;
    if (bi->dtype != sc->dtype) return err_set("%s: %s has dtype %s but %s has %s", ckpt_where(c, bname), bname, st_dtype_name(bi->dtype), sname, st_dtype_name(sc->dtype));
    if (want_2d(c, bi, bname, rows, ng, st_dtype_name(bi->dtype)) != 0) return -1;
    w->biases = bi->data;
    w->nbytes += bi->nbytes;
    return 0;
}

static int want_nd(const checkpoint *c, const st_tensor *t, const char *name, int nd, const int64_t *shape, const char *want_dt) {
    int ok = t->ndim == nd;
    for (int i = 0; ok && i < nd; i++) ok = t->shape[i] == shape[i];
    if (ok) return 0;
    char want[128], got[128];
    size_t k = (size_t)snprintf(want, sizeof want, "%s [", want_dt);
    for (int i = 0; i < nd && k < sizeof want; i++)
        k += (size_t)snprintf(want + k, sizeof want - k, "%s%lld", i ? ", " : "", (long long)shape[i]);
    if (k < sizeof want) snprintf(want + k, sizeof want - k, "]");
    shape_str(t, got, sizeof got);
    return err_set("%s: %s: want %s, got %s", ckpt_where(c, name), name, want, got);
}

static int is_float_dtype(st_dtype d, weight_fmt *f) {
    switch (d) {
    case ST_F32: *f = WF_F32; return 1;
    case ST_F16: *f = WF_F16; return 1;
    case ST_BF16: *f = WF_BF16; return 1;
    default: return 0;
    }
}

/* Quantized slices point at packed u32 words; a misaligned tensor cannot be read so. */
static int check_aligned(const checkpoint *c, const st_tensor *t, const char *name) {
    if (((uintptr_t)t->data & 3) == 0) return 0;
    return err_set("%s: %s: packed data is not 4-byte aligned in the file", ckpt_where(c, name), name);
}

/* Points the n experts' arrays at consecutive slices of stacked tensors; every
 * expert's format and shape are already set. */
static void bind_slices(weight *w, int n, const char *data, const char *scales, const char *biases) {
    size_t d, s, b;
    weight_sizes(w, &d, &s, &b);
    for (int e = 0; e < n; e++) {
        w[e].data = data + e * d;
        w[e].scales = scales ? scales + e * s : NULL;
        w[e].biases = biases ? biases + e * b : NULL;
        w[e].nbytes = d + (scales ? s : 0) + (biases ? b : 0);
    }
}

int weight_bind_experts(weight *w, const checkpoint *c, const quant_cfg *q, const char *name, int n,
                        int64_t rows, int64_t cols, int in_major, int *in_major_out) {
    char nb[512], ns[512], nw[512], nbi[512];
    *in_major_out = 0;
    memset(w, 0, (size_t)n * sizeof *w);
    for (int e = 0; e < n; e++) w[e].rows = rows, w[e].cols = cols;
    const st_tensor *t = ckpt_find(c, name);
    weight_fmt f;
    if (t) {
        /* transformers: one float tensor [n, rows, cols], or [n, cols, rows] (in_major),
         * which is bound as stored: each slice is the transpose [cols, rows] */
        if (!is_float_dtype(t->dtype, &f))
            return err_set("%s: %s: dtype %s is not a float weight (want BF16, F16 or F32)", ckpt_where(c, name), name, st_dtype_name(t->dtype));
        int64_t want[3] = {n, in_major ? cols : rows, in_major ? rows : cols};
        if (want_nd(c, t, name, 3, want, st_dtype_name(t->dtype)) != 0) return -1;
        for (int e = 0; e < n; e++) w[e].fmt = f, w[e].rows = want[1], w[e].cols = want[2];
        bind_slices(w, n, t->data, NULL, NULL);
        *in_major_out = in_major;
        return 0;
    }
    snprintf(nb, sizeof nb, "%s_blocks", name);
    snprintf(ns, sizeof ns, "%s_scales", name);
    const st_tensor *bl = ckpt_find(c, nb), *sc = ckpt_find(c, ns);
    if (bl || sc) {
        /* original gpt-oss MXFP4: codes [n, rows, cols/32, 16] bytes, 2 per byte, low nibble first */
        if (!bl || !sc) return err_set("%s: MXFP4 experts need both %s and %s", c->dir, nb, ns);
        if (cols % 32) return err_set("%s: %s: in-dimension %lld is not a multiple of 32", ckpt_where(c, nb), nb, (long long)cols);
        int64_t wb[4] = {n, rows, cols / 32, 16}, ws[3] = {n, rows, cols / 32};
        if (bl->dtype != ST_U8) return err_set("%s: %s: want U8 blocks, got %s", ckpt_where(c, nb), nb, st_dtype_name(bl->dtype));
        if (sc->dtype != ST_U8) return err_set("%s: %s: want U8 (e8m0) scales, got %s", ckpt_where(c, ns), ns, st_dtype_name(sc->dtype));
        if (want_nd(c, bl, nb, 4, wb, "U8") || want_nd(c, sc, ns, 3, ws, "U8") || check_aligned(c, bl, nb)) return -1;
        for (int e = 0; e < n; e++) w[e].fmt = WF_MXFP4, w[e].bits = 4, w[e].group = 32;
        bind_slices(w, n, bl->data, sc->data, NULL);
        return 0;
    }
    snprintf(nw, sizeof nw, "%s.weight", name);
    snprintf(ns, sizeof ns, "%s.scales", name);
    snprintf(nbi, sizeof nbi, "%s.biases", name);
    if (!(t = ckpt_find(c, nw)))
        return err_set("%s: missing expert weights \"%s\" (looked for %s, %s_blocks and %s)", c->dir, name, name, name, nw);
    if (!(sc = ckpt_find(c, ns))) {
        if (!is_float_dtype(t->dtype, &f))
            return err_set("%s: %s: dtype %s is not a float weight and there is no %s", ckpt_where(c, nw), nw, st_dtype_name(t->dtype), ns);
        int64_t want[3] = {n, rows, cols};
        if (want_nd(c, t, nw, 3, want, st_dtype_name(t->dtype)) != 0) return -1;
        for (int e = 0; e < n; e++) w[e].fmt = f;
        bind_slices(w, n, t->data, NULL, NULL);
        return 0;
    }
    /* mlx-community: packed u32 codes [n, rows, cols*bits/32] with per-group scales */
    quant_spec s;
    if (quant_cfg_lookup(q, name, &s) != 0) return -1;
    if (s.mode == QM_NONE)
        return err_set("%s: %s exists but config.json has no quantization for \"%s\"", ckpt_where(c, ns), ns, name);
    if (quant_spec_check(&s, name) != 0) return err_prefix("%s", q->where);
    if ((cols * s.bits) % 32 != 0 || cols % s.group != 0)
        return err_set("%s: %s: in-dimension %lld is not a multiple of group_size %d and of 32/bits", ckpt_where(c, nw), nw, (long long)cols, s.group);
    if (t->dtype != ST_U32 && t->dtype != ST_I32)
        return err_set("%s: %s: packed quantized weight must be U32 or I32, got %s", ckpt_where(c, nw), nw, st_dtype_name(t->dtype));
    int64_t wq[3] = {n, rows, cols * s.bits / 32}, wsc[3] = {n, rows, cols / s.group};
    if (want_nd(c, t, nw, 3, wq, "U32") || check_aligned(c, t, nw)) return -1;
    const st_tensor *bi = NULL;
    scale_type stype = SC_BF16;
    if (s.mode == QM_MXFP4) {
        if (sc->dtype != ST_U8) return err_set("%s: %s: mxfp4 scales must be U8 (e8m0), got %s", ckpt_where(c, ns), ns, st_dtype_name(sc->dtype));
        if (want_nd(c, sc, ns, 3, wsc, "U8")) return -1;
    } else {
        if (!(bi = ckpt_find(c, nbi))) return err_set("%s: missing \"%s\" (affine quantization needs scales and biases)", c->dir, nbi);
        if (scale_dtype(c, sc, ns, &stype) || want_nd(c, sc, ns, 3, wsc, st_dtype_name(sc->dtype))) return -1;
        if (bi->dtype != sc->dtype) return err_set("%s: %s has dtype %s but %s has %s", ckpt_where(c, nbi), nbi, st_dtype_name(bi->dtype), ns, st_dtype_name(sc->dtype));
        if (want_nd(c, bi, nbi, 3, wsc, st_dtype_name(bi->dtype))) return -1;
    }
    for (int e = 0; e < n; e++) {
        w[e].fmt = s.mode == QM_MXFP4 ? WF_MXFP4 : WF_AFFINE;
        w[e].bits = s.bits, w[e].group = s.group, w[e].stype = stype;
    }
    bind_slices(w, n, t->data, sc->data, bi ? bi->data : NULL);
    return 0;
}

uint32_t affine_code(const uint32_t *row, int bits, int64_t j) {
    int64_t bit = j * bits;
    int64_t wi = bit >> 5;
    int sh = (int)(bit & 31);
    uint64_t v = row[wi] >> sh;
    if (sh + bits > 32) v |= (uint64_t)row[wi + 1] << (32 - sh);
    return (uint32_t)v & ((1u << bits) - 1);
}

static float scale_at(const void *p, scale_type st, int64_t i) {
    switch (st) {
    case SC_BF16: return bf16_to_f32(((const uint16_t *)p)[i]);
    case SC_F16: return f16_to_f32(((const uint16_t *)p)[i]);
    default: return ((const float *)p)[i];
    }
}

static const float e2m1_values[16] = {0.0f, 0.5f, 1.0f, 1.5f, 2.0f, 3.0f, 4.0f, 6.0f,
                                      -0.0f, -0.5f, -1.0f, -1.5f, -2.0f, -3.0f, -4.0f, -6.0f};

void weight_row_f32(const weight *w, int64_t r, float *out) {
    int64_t n = w->cols;
    switch (w->fmt) {
    case WF_F32:
        memcpy(out, (const float *)w->data + r * n, (size_t)n * sizeof(float));
        return;
    case WF_F16: {
        const uint16_t *p = (const uint16_t *)w->data + r * n;
        for (int64_t j = 0; j < n; j++) out[j] = f16_to_f32(p[j]);
        return;
    }
    case WF_BF16: {
        const uint16_t *p = (const uint16_t *)w->data + r * n;
        for (int64_t j = 0; j < n; j++) out[j] = bf16_to_f32(p[j]);
        return;
    }
    case WF_AFFINE: {
        const uint32_t *row = (const uint32_t *)w->data + r * (n * w->bits / 32);
        int64_t ng = n / w->group;
        for (int64_t g = 0; g < ng; g++) {
            float s = scale_at(w->scales, w->stype, r * ng + g), b = scale_at(w->biases, w->stype, r * ng + g);
            for (int64_t j = g * w->group; j < (g + 1) * w->group; j++) out[j] = (float)affine_code(row, w->bits, j) * s + b;
        }
        return;
    }
    case WF_MXFP4: {
        const uint32_t *row = (const uint32_t *)w->data + r * (n / 8);
        const uint8_t *sc = (const uint8_t *)w->scales + r * (n / 32);
        for (int64_t j = 0; j < n; j++) out[j] = e2m1_values[affine_code(row, 4, j)] * e8m0_to_f32(sc[j / 32]);
        return;
    }
    }
}

const char *weight_fmt_name(const weight *w, char *buf, size_t n) {
    switch (w->fmt) {
    case WF_F32: snprintf(buf, n, "f32"); break;
    case WF_F16: snprintf(buf, n, "f16"); break;
    case WF_BF16: snprintf(buf, n, "bf16"); break;
    case WF_AFFINE: snprintf(buf, n, "q%d/g%d", w->bits, w->group); break;
    case WF_MXFP4: snprintf(buf, n, "mxfp4"); break;
    }
    return buf;
}

float *vec_load_f32(const checkpoint *c, const char *name, int64_t n) { return tensor_load_f32(c, name, 1, &n); }

float *tensor_load_f32(const checkpoint *c, const char *name, int ndim, const int64_t *shape) {
    const st_tensor *t = ckpt_find(c, name);
    if (!t) { err_set("%s: missing weight \"%s\"", c->dir, name); return NULL; }
    if (want_nd(c, t, name, ndim, shape, st_dtype_name(t->dtype)) != 0) return NULL;
    int64_t n = st_numel(t);
    float *v = malloc((size_t)(n ? n : 1) * sizeof *v);
    if (!v) { err_set("out of memory loading %s", name); return NULL; }
    for (int64_t i = 0; i < n; i++) {
        switch (t->dtype) {
        case ST_F32: v[i] = ((const float *)t->data)[i]; break;
        case ST_BF16: v[i] = bf16_to_f32(((const uint16_t *)t->data)[i]); break;
        case ST_F16: v[i] = f16_to_f32(((const uint16_t *)t->data)[i]); break;
        default:
            free(v);
            err_set("%s: %s: dtype %s is not a float type", ckpt_where(c, name), name, st_dtype_name(t->dtype));
            return NULL;
        }
    }
    return v;
}
