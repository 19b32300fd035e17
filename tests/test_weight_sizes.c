/* tests/test_weight_sizes.c: weight_sizes (tensor/weight.h), the one place weight byte
 * sizes are computed (binding, the CUDA upload and fusion use it), against the sizes
 * of the tensors in the fixture checkpoints' files: every 2-D weight bound from a
 * checkpoint (plain, MLX affine, MXFP4) and every expert stack, whose slices must
 * tile the stored tensor exactly. */
#include <stdint.h>
#include <stdio.h>
#include <string.h>

#include "base/err.h"
#include "harness.h"
#include "tensor/weight_bind.h"

static const st_tensor *find(const checkpoint *c, const char *module, const char *suffix) {
    char name[1024];
    snprintf(name, sizeof name, "%.500s%.16s", module, suffix);
    return ckpt_find(c, name);
}

/* Binds every 2-D "<module>.weight" of the checkpoint in dir and checks weight_sizes
 * against the bytes its data, scales and biases tensors hold; returns how many. */
static int check_all_weights(const char *dir) {
    checkpoint *c = ckpt_open(dir);
    CHECK(c != NULL, "%s: %s", dir, err_msg());
    if (!c) return 0;
    quant_cfg q;
    CHECK(quant_cfg_init(&q, c->config, dir) == 0, "%s: %s", dir, err_msg());
    int n = 0;
    for (int s = 0; s < c->n_shards; s++)
        for (int i = 0; i < c->shards[s]->n; i++) {
            const st_tensor *t = &c->shards[s]->t[i];
            size_t len = strlen(t->name);
            if (t->ndim != 2 || len < 8 || strcmp(t->name + len - 7, ".weight") != 0) continue;
            char module[512];
            snprintf(module, sizeof module, "%.*s", (int)(len - 7), t->name);
            const st_tensor *sc = find(c, module, ".scales"), *bi = find(c, module, ".biases");
            int64_t cols = t->shape[1];
            if (sc) { /* packed codes: the logical width is 32 / bits codes per word */
                quant_spec qs;
                CHECK(quant_cfg_lookup(&q, module, &qs) == 0, "%s: %s", module, err_msg());
                cols = t->shape[1] * 32 / qs.bits;
            }
            weight w;
            if (weight_bind(&w, c, &q, module, t->shape[0], cols) != 0) {
                CHECK(0, "%s: %s", module, err_msg());
                continue;
            }
            size_t d, ss, bb;
            weight_sizes(&w, &d, &ss, &bb);
            CHECK(d == t->nbytes, "%s: data %zu bytes, the file has %zu", module, d, t->nbytes);
            CHECK(ss == (sc ? sc->nbytes : 0), "%s: scales %zu bytes, the file has %zu", module, ss, sc ? sc->nbytes : 0);
            CHECK(bb == (bi ? bi->nbytes : 0), "%s: biases %zu bytes, the file has %zu", module, bb, bi ? bi->nbytes : 0);
            CHECK(d + ss + bb == w.nbytes, "%s: sizes sum to %zu, nbytes %zu", module, d + ss + bb, w.nbytes);
            n++;
        }
    ckpt_close(c);
    return n;
}

static void test_plain_weights(void) {
    CHECK(check_all_weights("tests/fixtures/models/qwen3") > 10, "too few weights bound");
    CHECK(check_all_weights("tests/fixtures/models/gpt_oss-mxfp4") > 10, "too few weights bound");
}

static void test_affine_weights(void) {
    CHECK(check_all_weights("tests/fixtures/models/llama-q4") > 10, "too few weights bound");
    CHECK(check_all_weights("tests/fixtures/models/qwen3-q4") > 10, "too few weights bound");
}

/* The n slices of an expert stack tile its tensors: each slice starts where the last
 * ended and the last ends at the tensor's end. */
static void check_tiles(const char *what, const weight *w, int n, const st_tensor *data, const st_tensor *scales) {
    for (int e = 0; e < n; e++) {
        size_t d, s, b;
        weight_sizes(&w[e], &d, &s, &b);
        CHECK((const char *)w[e].data == (const char *)data->data + e * d, "%s: expert %d data at the wrong offset", what, e);
        if (e == n - 1)
            CHECK((const char *)w[e].data + d == (const char *)data->data + data->nbytes,
                  "%s: data slices end %zu bytes short of the tensor", what,
                  (size_t)((const char *)data->data + data->nbytes - ((const char *)w[e].data + d)));
        if (scales) {
            CHECK((const char *)w[e].scales == (const char *)scales->data + e * s, "%s: expert %d scales at the wrong offset",
                  what, e);
            if (e == n - 1)
                CHECK((const char *)w[e].scales + s == (const char *)scales->data + scales->nbytes,
                      "%s: scale slices do not end at the tensor's end", what);
        }
    }
}

static void test_expert_stacks(void) {
    weight w[4];
    int im = -1;
    quant_cfg q;
    /* original gpt-oss MXFP4: blocks [4, 128, 4, 16] and scales [4, 128, 4] */
    checkpoint *c = ckpt_open("tests/fixtures/models/gpt_oss-mxfp4");
    CHECK(c != NULL, "%s", err_msg());
    if (c) {
        CHECK(quant_cfg_init(&q, c->config, "config.json") == 0, "%s", err_msg());
        const char *name = "model.layers.0.mlp.experts.down_proj";
        CHECK(weight_bind_experts(w, c, &q, name, 4, 128, 128, 0, &im) == 0, "%s", err_msg());
        check_tiles(name, w, 4, find(c, name, "_blocks"), find(c, name, "_scales"));
        ckpt_close(c);
    }
    /* transformers bf16, input-major gate_up [4, 128, 256] */
    c = ckpt_open("tests/fixtures/models/gpt_oss");
    CHECK(c != NULL, "%s", err_msg());
    if (c) {
        CHECK(quant_cfg_init(&q, c->config, "config.json") == 0, "%s", err_msg());
        const char *name = "model.layers.0.mlp.experts.gate_up_proj";
        CHECK(weight_bind_experts(w, c, &q, name, 4, 256, 128, 1, &im) == 0, "%s", err_msg());
        CHECK(im == 1, "in_major %d", im);
        check_tiles(name, w, 4, find(c, name, ""), NULL);
        ckpt_close(c);
    }
}

int main(void) {
    RUN(test_plain_weights);
    RUN(test_affine_weights);
    RUN(test_expert_stacks);
    return harness_done();
}
