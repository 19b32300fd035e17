/* tests/test_default_model.c: the embedded default model (models/default, MLX q4)
 * against transformers. The expected ids and logits below were computed by
 * train/reference_default.py: LlamaForCausalLM in float32 on the q4 checkpoint
 * dequantized back to float (what celer computes with), greedy, no cache
 * (train/record/ref.json keeps the full record). */
#include <stdlib.h>

#include "celer.h"
#include "harness.h"

#define DEFAULT_DIR "models/default"

typedef struct {
    const char *prompt;     /* the text the ids encode (for messages) */
    int32_t ids[8];
    int n;
    int32_t want[40];       /* transformers' greedy continuation */
    int32_t top_ids[4];     /* top logits after the prompt */
    float top_vals[4];
} greedy_case;

static const greedy_case cases[] = {
    {"And it came to pass", {0, 301, 359, 477, 294, 606}, 6,
     {17, 439, 264, 416, 506, 3301, 372, 491, 294, 264, 416, 506, 472, 17, 302, 314, 393, 325, 264, 416,
      17, 1514, 349, 264, 416, 506, 472, 300, 4035, 1283, 2608, 19, 204, 301, 264, 416, 393, 325, 264, 416},
     {17, 292, 527, 587}, {12.075586f, 11.630779f, 9.509272f, 9.476141f}},
    {"In the beginning God", {0, 1145, 264, 2087, 392}, 5,
     {274, 435, 477, 674, 407, 264, 2087, 274, 264, 2927, 452, 17, 273, 407, 264, 2087, 274, 264, 2927, 452,
      17, 273, 407, 264, 2087, 274, 264, 2927, 452, 17, 273, 407, 264, 2087, 274, 264, 2927, 452, 17, 273},
     {274, 544, 3384, 1}, {12.317714f, 8.075996f, 7.554333f, 7.513818f}},
    {"Blessed are", {0, 2543, 424}, 3,
     {264, 579, 274, 264, 346, 384, 264, 346, 943, 693, 17, 546, 17, 204, 2917, 325, 264, 496, 274, 435,
      17, 273, 443, 325, 342, 17, 2797, 403, 399, 349, 1199, 325, 264, 496, 274, 435, 17, 403, 318, 349},
     {264, 338, 365, 403}, {10.358692f, 9.867846f, 7.996746f, 7.845858f}},
};

/* The chat template rendered for [{user: "In the beginning"}] with the generation
 * prompt, and the greedy answer up to and including <|eos|> (id 1). */
static const int32_t chat_prompt[] = {0, 4, 204, 1145, 264, 2087, 1, 5, 204};
static const int32_t chat_answer[] = {608, 264, 1034, 274, 2771, 416, 274, 705, 1551, 3732, 264, 412, 274, 3732,
                                      416, 274, 705, 416, 274, 705, 17, 273, 1557, 292, 329, 2163, 19, 1};

static celer_model *open_default(void) {
    celer_model *m = celer_model_open(DEFAULT_DIR, 2);
    CHECK(m != NULL, "%s: %s", DEFAULT_DIR, celer_last_error());
    return m;
}

static void shape_and_format(void) {
    celer_model *m = open_default();
    if (!m) return;
    celer_model_info in;
    celer_model_get_info(m, &in);
    CHECK(strcmp(in.model_type, "llama") == 0, "model_type %s, want llama", in.model_type);
    CHECK(strcmp(in.format, "q4/g64") == 0, "format %s, want q4/g64", in.format);
    CHECK(in.vocab_size == 4096 && in.hidden_size == 256 && in.n_layers == 8,
          "vocab %d hidden %d layers %d, want 4096 256 8", in.vocab_size, in.hidden_size, in.n_layers);
    CHECK(in.bos_token == 0 && in.eos_token == 1, "bos %d eos %d, want 0 1", in.bos_token, in.eos_token);
    CHECK(in.n_params == 7344384, "n_params %lld, want 7344384", (long long)in.n_params);
    celer_model_free(m);
}

static void greedy_matches_transformers(void) {
    celer_model *m = open_default();
    if (!m) return;
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        const greedy_case *g = &cases[c];
        celer_session *s = celer_session_new(m, 128, 64);
        CHECK(s != NULL, "session: %s", celer_last_error());
        if (!s) break;
        /* logits after the prompt: transformers' top values (float32 on both sides) */
        CHECK(celer_session_eval(s, g->ids, g->n, NULL, 0) == 0, "eval: %s", celer_last_error());
        const float *lg = celer_session_logits(s);
        for (int k = 0; k < 4; k++)
            CHECK(fabsf(lg[g->top_ids[k]] - g->top_vals[k]) <= 2e-3f, "\"%s\": logit[%d] = %.6f, transformers %.6f",
                  g->prompt, g->top_ids[k], lg[g->top_ids[k]], g->top_vals[k]);
        celer_session_rewind(s, 0);
        int32_t out[40];
        int n = celer_generate_greedy(s, g->ids, g->n, 40, -1, out);
        CHECK(n == 40, "\"%s\": generated %d of 40: %s", g->prompt, n, celer_last_error());
        int same = 0;
        while (same < n && out[same] == g->want[same]) same++;
        CHECK(same == 40, "\"%s\": diverges from transformers at generated token %d (%d, want %d)", g->prompt, same,
              same < n ? out[same] : -1, g->want[same < 40 ? same : 39]);
        celer_session_free(s);
    }
    celer_model_free(m);
}

static void chat_answer_stops_at_eos(void) {
    celer_model *m = open_default();
    if (!m) return;
    celer_session *s = celer_session_new(m, 256, 64);
    int32_t out[80];
    int n = s ? celer_generate_greedy(s, chat_prompt, 9, 80, 1, out) : -1;
    int want = (int)(sizeof chat_answer / sizeof chat_answer[0]);
    CHECK(n == want, "chat answer: %d tokens, want %d (through <|eos|>): %s", n, want, celer_last_error());
    for (int i = 0; i < n && i < want; i++)
        if (out[i] != chat_answer[i]) {
            CHECK(0, "chat answer diverges at token %d: %d, want %d", i, out[i], chat_answer[i]);
            break;
        }
    celer_session_free(s);
    celer_model_free(m);
}

int main(void) {
    RUN(shape_and_format);
    RUN(greedy_matches_transformers);
    RUN(chat_answer_stops_at_eos);
    return harness_done();
}
