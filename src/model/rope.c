/* model/rope.c: RoPE inverse frequencies and attention factor for each rope type,
 * computed as transformers' modeling_rope_utils does (see docs/models.md), in
 * float32 where transformers computes in float32. */
#include <math.h>
#include <stdlib.h>

#include "base/err.h"
#include "model/model.h"

static double yarn_mscale(double scale, double m) { return scale <= 1 ? 1.0 : 0.1 * m * log(scale) + 1.0; }

/* Proportional RoPE (Gemma 4 full layers): the table spans the whole head; the first
 * int(partial * hd / 2) pairs rotate with theta^(-2i/hd) (denominator hd, not the
 * rotated width) and the remaining pairs get inv_freq 0, i.e. pass through. */
static int proportional_init(rope_table *t, const rope_spec *r, int head_dim) {
    int half = head_dim / 2, na = (int)floor(r->partial * head_dim / 2);
    if (head_dim < 2 || na < 1) return err_set("rope: proportional rope rotates no channels of head_dim %d", head_dim);
    t->dim = half * 2;
    t->attn_factor = r->attn_factor > 0 ? (float)r->attn_factor : 1.0f;
    if (!(t->inv_freq = malloc((size_t)half * sizeof *t->inv_freq))) return err_set("out of memory");
    for (int i = 0; i < half; i++) {
        float expo = (float)(2 * i) / (float)head_dim;
        t->inv_freq[i] = i < na ? (1.0f / powf((float)r->theta, expo)) / (float)r->factor : 0.0f;
    }
    return 0;
}

/* longrope (Phi-3 128k): inv_freq[i] = 1 / (ext[i] * theta^(2i/dim)) in float32 with
 * ext the short or the long factors; cos and sin scaled by sqrt(1 + ln(factor) /
 * ln(original_max_position_embeddings)) when factor > 1, unless attention_factor
 * is stated. */
static int longrope_init(rope_table *t, const rope_spec *r, int dim) {
    int half = dim / 2;
    if (r->n_factors != half)
        return err_set("rope: longrope has %d factors for a rotated width of %d (want %d)", r->n_factors, dim, half);
    t->dim = dim;
    if (r->attn_factor > 0) t->attn_factor = (float)r->attn_factor;
    else t->attn_factor = r->factor <= 1 ? 1.0f : (float)sqrt(1 + log(r->factor) / log(r->orig_max_pos));
    if (!(t->inv_freq = malloc((size_t)half * sizeof *t->inv_freq))) return err_set("out of memory");
    const float *ext = r->use_long ? r->long_factor : r->short_factor;
    for (int i = 0; i < half; i++) {
        float p = powf((float)r->theta, (float)(2 * i) / (float)dim);
        t->inv_freq[i] = 1.0f / (ext[i] * p);
    }
    return 0;
}

int rope_table_init(rope_table *t, const rope_spec *r, int head_dim) {
    if (r->head_dim > 0) head_dim = r->head_dim;
    if (r->type == ROPE_PROPORTIONAL) return proportional_init(t, r, head_dim);
    if (r->type == ROPE_LONGROPE) {
        int dim = (int)(head_dim * r->partial) & ~1;
        if (dim < 2) return err_set("rope: rotated dimension %d is too small", dim);
        return longrope_init(t, r, dim);
    }
    int dim = (int)(head_dim * r->partial);
    dim &= ~1;
    if (dim < 2) return err_set("rope: rotated dimension %d is too small", dim);
    int half = dim / 2;
    t->dim = dim;
    t->attn_factor = 1.0f;
    t->inv_freq = malloc((size_t)half * sizeof *t->inv_freq);
    if (!t->inv_freq) return err_set("out of memory");
    double lo = 0, hi = 0;
    if (r->type == ROPE_YARN) {
        double ln_t = log(r->theta);
        lo = dim * log(r->orig_max_pos / (r->beta_fast * 2 * M_PI)) / (2 * ln_t);
        hi = dim * log(r->orig_max_pos / (r->beta_slow * 2 * M_PI)) / (2 * ln_t);
        if (r->truncate) { lo = floor(lo); hi = ceil(hi); }
        if (lo < 0) lo = 0;
        if (hi > dim - 1) hi = dim - 1;
        if (lo == hi) hi += 0.001;
        double af = r->attn_factor;
        if (af < 0) {
            if (r->mscale && r->mscale_all_dim)
                af = yarn_mscale(r->factor, r->mscale) / yarn_mscale(r->factor, r->mscale_all_dim);
            else
                af = yarn_mscale(r->factor, 1.0);
        }
        t->attn_factor = (float)af;
    } else if (r->attn_factor > 0) {
        t->attn_factor = (float)r->attn_factor;
    }
    for (int i = 0; i < half; i++) {
        /* transformers computes base ** (2i / dim) in float32 */
        float expo = (float)(2 * i) / (float)dim;
        double inv = 1.0 / (double)powf((float)r->theta, expo);
        switch (r->type) {
        case ROPE_NONE:
        case ROPE_PROPORTIONAL:
        case ROPE_LONGROPE:
        case ROPE_DEFAULT: break;
        case ROPE_LINEAR: inv /= r->factor; break;
        case ROPE_LLAMA3: {
            double wavelen = 2 * M_PI / inv;
            double lw = r->orig_max_pos / r->low_freq_factor, hw = r->orig_max_pos / r->high_freq_factor;
            if (wavelen > lw) {
                inv = inv / r->factor;
            } else if (wavelen >= hw) {
                double s = (r->orig_max_pos / wavelen - r->low_freq_factor) / (r->high_freq_factor - r->low_freq_factor);
                inv = (1 - s) * inv / r->factor + s * inv;
            }
            break;
        }
        case ROPE_YARN: {
            /* float32 like transformers: extrapolated 1/p, interpolated 1/(factor p), and a
             * linear ramp between the correction dims low..high */
            float p = powf((float)r->theta, expo);
            float extrap = 1.0f / p, interp = 1.0f / ((float)r->factor * p);
            float ramp = ((float)i - (float)lo) / (float)(hi - lo);
            ramp = ramp < 0 ? 0 : ramp > 1 ? 1 : ramp;
            float ef = 1.0f - ramp;
            inv = interp * (1.0f - ef) + extrap * ef;
            break;
        }
        }
        t->inv_freq[i] = (float)inv;
    }
    return 0;
}

void rope_table_free(rope_table *t) {
    if (!t) return;
    free(t->inv_freq);
    t->inv_freq = NULL;
}
