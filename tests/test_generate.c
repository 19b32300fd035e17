/* tests/test_generate.c: the generation loop (engine/generate.c) and stop strings
 * (tokenizer/stop.c).
 *   - several sessions stepped together, prompt chunks and decode tokens mixed under a
 *     small budget, sessions joining late: greedy tokens equal transformers' greedy
 *     continuation of the fixtures (seq_a) and each session generating alone;
 *   - finish reasons and limits: max_tokens, stop token, stop string, n_gen 0, the
 *     context filling (a finish, not an error), cancel; what the session holds after;
 *   - the pipelined path on the CPU: a stand-in device sampler (the host's filters
 *     behind backend_ops.sample/sampled) gives the same tokens, finishes and session
 *     and sampler state as the host loop, also when a second sequence joins mid-way;
 *   - the batched pipeline on the CPU (the stand-in behind sample_rows/sampled_rows
 *     too): seven sequences, greedy and sampled (one with a penalty: host-sampled
 *     beside the pipeline), ending by max_tokens, stop tokens (one step late,
 *     undone), a full context and a cancel, one joining mid-way: the
 *     same tokens, finishes, session contents and follow-up generations as the host
 *     loop and as the unpipelined batched steps, with steps really queued ahead;
 *   - stop strings split across tokens of a real tokenizer (Llama 3's), held back
 *     while they may still complete. */
#include <stdlib.h>
#include <string.h>

#include "base/err.h"
#include "base/settings.h"
#include "engine/engine.h"
#include "engine/sample.h"
#include "fixture_util.h"
#include "harness.h"

/* ---------------------------------------------------------------- helpers */

typedef struct {
    int32_t tok[512];
    int n, finish, pos;
    char text[4096];
    size_t text_len;
} run_out;

/* Steps g until every sequence finished, collecting each sequence's tokens and text
 * into outs[id]. Cancels sequence cancel_id after cancel_after of its tokens. */
static int run_all(celer_gen *g, run_out *outs, int cancel_id, int cancel_after) {
    for (int guard = 0; guard < 100000 && celer_gen_active(g); guard++) {
        const celer_gen_event *ev;
        int n = celer_gen_step(g, &ev);
        if (n < 0) return -1;
        for (int k = 0; k < n; k++) {
            run_out *o = &outs[ev[k].seq];
            if (ev[k].token >= 0) o->tok[o->n++] = ev[k].token;
            if (ev[k].n_generated != o->n) return -2;
            if (o->text_len + ev[k].text_len < sizeof o->text) {
                memcpy(o->text + o->text_len, ev[k].text, ev[k].text_len);
                o->text_len += ev[k].text_len;
            }
            o->finish = ev[k].finish;
            if (ev[k].finish == CELER_FINISH_ERROR) printf("  error: %s\n", ev[k].error);
            if (ev[k].seq == cancel_id && !ev[k].finish && o->n == cancel_after) celer_gen_cancel(g, cancel_id);
        }
    }
    return 0;
}

/* ---------------------------------------------------------------- several sessions */

/* Three sessions: seq_a's prompt (whose greedy continuation transformers recorded),
 * seq_b's first tokens, and seq_a's prompt less its first token; the third joins
 * after a few steps. Budget 3: prompts go in as chunks beside decode tokens. */
static void several_sessions(const char *name) {
    char dir[256];
    snprintf(dir, sizeof dir, "tests/fixtures/models/%s", name);
    fixture_ref r;
    celer_model *m = celer_model_open(dir, 2);
    CHECK(m != NULL, "%s: %s", name, celer_last_error());
    if (!m) return;
    if (fixture_load(dir, &r) != 0) {
        CHECK(0, "%s: reference: %s", name, celer_last_error());
        celer_model_free(m);
        return;
    }
    enum { N = 3 };
    const int32_t *prompt[N] = {r.seq[0], r.seq[1], r.seq[0] + 1};
    const int np[N] = {r.prompt_len, r.prompt_len + 2 < r.len[1] ? r.prompt_len + 2 : r.len[1], r.prompt_len - 1};
    const int gen = r.n_generated;
    /* alone */
    int32_t alone[N][256];
    int n_alone[N];
    for (int i = 0; i < N; i++) {
        celer_session *s = celer_session_new(m, np[i] + gen, 64);
        n_alone[i] = s ? celer_generate_greedy(s, prompt[i], np[i], gen, -1, alone[i]) : -1;
        CHECK(n_alone[i] == gen, "%s: session %d alone: %d tokens: %s", name, i, n_alone[i], celer_last_error());
        celer_session_free(s);
    }
    /* together */
    static run_out outs[N];
    memset(outs, 0, sizeof outs);
    celer_session *ss[N] = {0};
    celer_gen *g = celer_gen_new(m, 3);
    int ids[N] = {-1, -1, -1};
    for (int i = 0; i < N; i++) ss[i] = celer_session_new(m, np[i] + gen, 4);
    for (int i = 0; i < 2; i++) {
        celer_gen_seq q = {.session = ss[i], .prompt = prompt[i], .n_prompt = np[i], .max_tokens = gen, .stop_token = -1};
        ids[i] = celer_gen_add(g, &q);
    }
    /* a few steps, then the third joins */
    for (int st = 0; st < 4; st++) {
        const celer_gen_event *ev;
        int n = celer_gen_step(g, &ev);
        for (int k = 0; k < n; k++) {
            run_out *o = &outs[ev[k].seq];
            if (ev[k].token >= 0) o->tok[o->n++] = ev[k].token;
            o->finish = ev[k].finish;
        }
    }
    celer_gen_seq q3 = {.session = ss[2], .prompt = prompt[2], .n_prompt = np[2], .max_tokens = gen, .stop_token = -1};
    ids[2] = celer_gen_add(g, &q3);
    CHECK(ids[0] == 0 && ids[1] == 1 && ids[2] == 2, "%s: ids %d %d %d", name, ids[0], ids[1], ids[2]);
    /* the rest, checking the budget: at most 3 tokens go in per step, and prompt
     * chunks share steps with decode tokens */
    int mixed = 0, over = 0;
    for (int guard = 0; guard < 10000 && celer_gen_active(g); guard++) {
        int before[N], fed = 0, prefill = 0, decode = 0;
        for (int i = 0; i < N; i++) before[i] = celer_session_pos(ss[i]);
        const celer_gen_event *ev;
        int n = celer_gen_step(g, &ev);
        for (int i = 0; i < N; i++) {
            int d = celer_session_pos(ss[i]) - before[i];
            fed += d;
            if (d > 0 && before[i] >= np[i]) decode++;
            else if (d > 0) prefill++;
        }
        over += fed > 3;
        mixed += prefill && decode;
        for (int k = 0; k < n; k++) {
            run_out *o = &outs[ev[k].seq];
            if (ev[k].token >= 0) o->tok[o->n++] = ev[k].token;
            o->finish = ev[k].finish;
        }
    }
    CHECK(over == 0, "%s: %d steps fed more than the budget of 3 tokens", name, over);
    CHECK(mixed > 0, "%s: no step mixed prompt chunks and decode tokens", name);
    for (int i = 0; i < N; i++) {
        CHECK(outs[i].n == gen && outs[i].finish == CELER_FINISH_LENGTH, "%s: session %d: %d tokens, finish %s", name,
              i, outs[i].n, celer_finish_name(outs[i].finish));
        CHECK(memcmp(outs[i].tok, alone[i], (size_t)gen * sizeof(int32_t)) == 0,
              "%s: session %d: tokens differ from generating alone", name, i);
        CHECK(celer_session_pos(ss[i]) == np[i] + gen - 1, "%s: session %d holds %d tokens, want %d", name, i,
              celer_session_pos(ss[i]), np[i] + gen - 1);
    }
    int same = 0;
    while (same < gen && outs[0].tok[same] == r.seq[0][r.prompt_len + same]) same++;
    CHECK(same == gen, "%s: batched greedy output diverges from transformers at generated token %d", name, same);
    celer_gen_free(g);
    for (int i = 0; i < N; i++) celer_session_free(ss[i]);
    fixture_free(&r);
    celer_model_free(m);
}

static void several_llama(void) { several_sessions("llama"); }
static void several_qwen3(void) { several_sessions("qwen3"); }
static void several_gemma3(void) { several_sessions("gemma3"); } /* sliding-window caches */

/* ---------------------------------------------------------------- finishes */

static const int32_t PROMPT[] = {0, 301, 359, 477, 294, 606}; /* "And it came to pass" */
enum { NP = 6 };

/* One sequence on the default model; out gets the tokens, finish and session pos. */
static void one(celer_model *m, int ctx, const int32_t *prompt, int np, int max_tokens, int32_t stop, run_out *o) {
    memset(o, 0, sizeof *o);
    celer_session *s = celer_session_new(m, ctx, 16);
    celer_gen *g = celer_gen_new(m, 0);
    celer_gen_seq q = {.session = s, .prompt = prompt, .n_prompt = np, .max_tokens = max_tokens, .stop_token = stop};
    int id = s && g ? celer_gen_add(g, &q) : -1;
    if (id < 0) o->finish = -1;
    else run_all(g, o, -1, 0);
    o->pos = s ? celer_session_pos(s) : -1;
    celer_gen_free(g);
    celer_session_free(s);
}

static void finishes(void) {
    celer_model *m = celer_model_open("models/default", 2);
    CHECK(m != NULL, "models/default: %s", celer_last_error());
    if (!m) return;
    run_out base, o;
    one(m, 64, PROMPT, NP, 20, -1, &base);
    CHECK(base.n == 20 && base.finish == CELER_FINISH_LENGTH && base.pos == NP + 19,
          "max_tokens 20: %d tokens, finish %s, session %d", base.n, celer_finish_name(base.finish), base.pos);
    /* a stop token first produced at index 7: generation ends there, with it */
    int at = 7;
    while (at > 0) {
        int first = 1;
        for (int i = 0; i < at; i++) first &= base.tok[i] != base.tok[at];
        if (first) break;
        at++;
    }
    one(m, 64, PROMPT, NP, 20, base.tok[at], &o);
    CHECK(o.n == at + 1 && o.finish == CELER_FINISH_STOP_TOKEN && o.tok[at] == base.tok[at] && o.pos == NP + at,
          "stop token %d (index %d): %d tokens, finish %s, session %d", base.tok[at], at, o.n,
          celer_finish_name(o.finish), o.pos);
    /* the context fills: the token sampled when the session holds ctx tokens is the
     * last (it cannot be fed); a finish, not an error */
    one(m, NP + 4, PROMPT, NP, -1, -1, &o);
    CHECK(o.n == 5 && o.finish == CELER_FINISH_CONTEXT && o.pos == NP + 4 && memcmp(o.tok, base.tok, 5 * 4) == 0,
          "context %d: %d tokens, finish %s, session %d", NP + 4, o.n, celer_finish_name(o.finish), o.pos);
    one(m, NP + 4, PROMPT, NP, 100, -1, &o);
    CHECK(o.n == 5 && o.finish == CELER_FINISH_CONTEXT, "context %d, max_tokens 100: %d tokens, finish %s", NP + 4,
          o.n, celer_finish_name(o.finish));
    one(m, NP + 4, PROMPT, NP, 5, -1, &o); /* both limits at once: max_tokens is named */
    CHECK(o.n == 5 && o.finish == CELER_FINISH_LENGTH, "context and max_tokens together: %d tokens, finish %s", o.n,
          celer_finish_name(o.finish));
    /* a prompt that fills the context exactly still gives one token */
    one(m, NP, PROMPT, NP, 10, -1, &o);
    CHECK(o.n == 1 && o.finish == CELER_FINISH_CONTEXT && o.pos == NP && o.tok[0] == base.tok[0],
          "prompt = context: %d tokens, finish %s", o.n, celer_finish_name(o.finish));
    /* n_gen 0: the prompt goes in, nothing comes out */
    one(m, 64, PROMPT, NP, 0, -1, &o);
    CHECK(o.n == 0 && o.finish == CELER_FINISH_LENGTH && o.pos == NP, "max_tokens 0: %d tokens, finish %s, session %d",
          o.n, celer_finish_name(o.finish), o.pos);
    /* a prompt longer than the context is refused when added */
    one(m, NP - 1, PROMPT, NP, 10, -1, &o);
    CHECK(o.finish == -1, "a prompt longer than the context was accepted");
    CHECK_STR_HAS(celer_last_error(), "context full");
    /* cancel after 4 tokens: the session holds the prompt and 3 of them */
    memset(&o, 0, sizeof o);
    celer_session *s = celer_session_new(m, 64, 16);
    celer_gen *g = celer_gen_new(m, 0);
    celer_gen_seq q = {.session = s, .prompt = PROMPT, .n_prompt = NP, .max_tokens = 20, .stop_token = -1};
    int id = celer_gen_add(g, &q);
    run_all(g, &o, id, 4);
    CHECK(o.n == 4 && celer_session_pos(s) == NP + 3 && memcmp(s->tokens + NP, base.tok, 3 * 4) == 0,
          "cancel after 4: %d tokens, session %d", o.n, celer_session_pos(s));
    /* n_prompt 0 continues from the session's logits: the same tokens as one run */
    int32_t t5[5];
    celer_session_rewind(s, 0);
    int n1 = celer_generate_greedy(s, PROMPT, NP, 3, -1, t5);
    int32_t last = t5[2];
    CHECK(celer_session_eval(s, &last, 1, NULL, 0) == 0, "%s", celer_last_error());
    int n2 = celer_generate(s, NULL, NULL, 0, 2, -1, t5 + 3, NULL);
    CHECK(n1 == 3 && n2 == 2 && memcmp(t5, base.tok, sizeof t5) == 0, "continuing from logits: %d + %d tokens", n1, n2);
    /* bad additions */
    celer_session_rewind(s, 0);
    celer_gen_seq bad = {.session = s, .prompt = NULL, .n_prompt = 0, .max_tokens = 3, .stop_token = -1};
    CHECK(celer_gen_add(g, &bad) < 0, "no prompt and no logits accepted");
    CHECK_STR_HAS(celer_last_error(), "no logits");
    const int32_t oob[2] = {1, 999999};
    bad.prompt = oob;
    bad.n_prompt = 2;
    CHECK(celer_gen_add(g, &bad) < 0, "out-of-range prompt token accepted");
    CHECK_STR_HAS(celer_last_error(), "999999");
    bad.prompt = PROMPT;
    bad.n_prompt = NP;
    CHECK(celer_gen_add(g, &bad) >= 0 && celer_gen_add(g, &bad) < 0, "one session added twice");
    CHECK_STR_HAS(celer_last_error(), "already generating");
    celer_gen_free(g);
    celer_gen_free(NULL);
    celer_session_free(s);
    celer_model_free(m);
}

/* A stop string on the generated text: the text stops before it, the sequence ends
 * on the token that completes it, and every streamed piece is final. */
static void stop_string_in_loop(void) {
    celer_model *m = celer_model_open("models/default", 2);
    celer_tokenizer *tk = celer_tokenizer_open("models/default");
    CHECK(m && tk, "%s", celer_last_error());
    if (!m || !tk) {
        celer_model_free(m);
        celer_tokenizer_free(tk);
        return;
    }
    run_out base;
    one(m, 64, PROMPT, NP, 30, -1, &base);
    char *full = celer_detokenize(tk, base.tok, (size_t)base.n, 1, NULL);
    /* a stop string that spans two tokens: the last 2 bytes of token 10's text and the
     * first 2 bytes of token 11's */
    char *upto10 = celer_detokenize(tk, base.tok, 11, 1, NULL);
    char *upto9 = celer_detokenize(tk, base.tok, 10, 1, NULL);
    size_t l10 = strlen(upto10), l9 = strlen(upto9);
    CHECK(l10 - l9 >= 2 && strlen(full) >= l10 + 2, "token 10 is too short for this test");
    char stop[5] = {upto10[l10 - 2], upto10[l10 - 1], full[l10], full[l10 + 1], 0};
    const char *cut = strstr(full, stop);
    size_t want_len = (size_t)(cut - full);
    const char *stops[] = {stop};
    celer_textstream *ts = celer_textstream_new(tk, 1, stops, 1);
    celer_session *s = celer_session_new(m, 64, 16);
    celer_gen *g = celer_gen_new(m, 0);
    celer_gen_seq q = {.session = s, .prompt = PROMPT, .n_prompt = NP, .max_tokens = 30, .stop_token = -1, .text = ts};
    static run_out o;
    memset(&o, 0, sizeof o);
    celer_gen_add(g, &q);
    run_all(g, &o, -1, 0);
    /* the token that completes the stop string: the first whose text reaches past it */
    int k = 0;
    for (; k < base.n; k++) {
        char *t = celer_detokenize(tk, base.tok, (size_t)k + 1, 1, NULL);
        size_t tl = strlen(t);
        free(t);
        if (tl >= want_len + strlen(stop)) break;
    }
    CHECK(o.finish == CELER_FINISH_STOP_STRING && o.n == k + 1, "stop \"%s\": finish %s after %d tokens, want %d",
          stop, celer_finish_name(o.finish), o.n, k + 1);
    CHECK(o.text_len == want_len && memcmp(o.text, full, want_len) == 0, "stop \"%s\": text \"%.*s\", want \"%.*s\"",
          stop, (int)o.text_len, o.text, (int)want_len, full);
    CHECK(celer_session_pos(s) == NP + k, "session holds %d tokens, want %d", celer_session_pos(s), NP + k);
    celer_gen_free(g);
    celer_session_free(s);
    celer_textstream_free(ts);
    free(full);
    free(upto10);
    free(upto9);
    celer_tokenizer_free(tk);
    celer_model_free(m);
}

/* ---------------------------------------------------------------- stop strings */

/* Feeds ids one at a time; out gets everything returned; *hit_at the index of the
 * token at which the stream reported a hit (-1: none). Checks on the way that what
 * was returned is always a prefix of want (nothing past a stop string, nothing that
 * is later taken back). */
static void stream(const celer_tokenizer *tk, const int32_t *ids, int n, const char *const *stops, int n_stop,
                   const char *want, char *out, int *hit_at) {
    celer_textstream *ts = celer_textstream_new(tk, 0, stops, n_stop);
    size_t len = 0, wl = strlen(want);
    *hit_at = -1;
    out[0] = 0;
    for (int i = 0; ts && i <= n; i++) {
        size_t l = 0;
        int hit = 0;
        const char *p = i < n ? celer_textstream_put(ts, ids[i], &l, &hit) : celer_textstream_flush(ts, &l, &hit);
        CHECK(p != NULL, "put: %s", celer_last_error());
        if (!p) break;
        memcpy(out + len, p, l);
        len += l;
        out[len] = 0;
        CHECK(len <= wl && memcmp(out, want, len) == 0, "after token %d the text \"%s\" is not a prefix of \"%s\"", i,
              out, want);
        if (hit && *hit_at < 0) *hit_at = i;
    }
    celer_textstream_free(ts);
}

static void stop_strings_real_tokenizer(void) {
    celer_tokenizer *tk = celer_tokenizer_open("tests/fixtures/tokenizers/llama3");
    CHECK(tk != NULL, "%s", celer_last_error());
    if (!tk) return;
    const char *text = "The quick brown fox jumps over the lazy dog. Naïve café owners say: ¿qué tal?";
    int32_t *ids;
    int n = celer_tokenize(tk, text, strlen(text), 0, &ids);
    CHECK(n > 10, "tokenize: %d", n);
    char out[512];
    int hit_at;
    /* each token's text and where it ends */
    size_t ends[128];
    for (int i = 0; i < n && i < 128; i++) {
        char *t = celer_detokenize(tk, ids, (size_t)i + 1, 0, NULL);
        ends[i] = strlen(t);
        free(t);
    }
    /* "ick brown fo" spans three tokens (" quick", " brown", " fox") and starts and
     * ends inside tokens */
    const char *s1[] = {"ick brown fo"};
    stream(tk, ids, n, s1, 1, "The qu", out, &hit_at);
    CHECK(strcmp(out, "The qu") == 0, "stop inside tokens: \"%s\"", out);
    int want_at = 0;
    while (ends[want_at] < strlen("The quick brown fo")) want_at++;
    CHECK(hit_at == want_at, "the hit came at token %d, want %d (the token that completes it)", hit_at, want_at);
    /* held back: after " brown" the text ends "The quick brown", a prefix of the stop
     * string is "ick brown", so only "The qu" may have been returned: checked by the
     * prefix rule in stream(); here, a stop string that never completes is returned
     * in full at the end */
    const char *s2[] = {"lazy cat"};
    stream(tk, ids, n, s2, 1, text, out, &hit_at);
    CHECK(strcmp(out, text) == 0 && hit_at < 0, "no stop: \"%s\"", out);
    /* several stop strings: the earliest occurrence wins; multi-byte UTF-8 */
    const char *s3[] = {"tal", "café", "", "dog."};
    stream(tk, ids, n, s3, 4, "The quick brown fox jumps over the lazy ", out, &hit_at);
    CHECK(strcmp(out, "The quick brown fox jumps over the lazy ") == 0, "earliest of several: \"%s\"", out);
    const char *s4[] = {"é own"};
    stream(tk, ids, n, s4, 1, "The quick brown fox jumps over the lazy dog. Naïve caf", out, &hit_at);
    CHECK(strcmp(out, "The quick brown fox jumps over the lazy dog. Naïve caf") == 0, "UTF-8 stop: \"%s\"", out);
    /* the stop string is the whole text's first token */
    const char *s5[] = {"The"};
    stream(tk, ids, n, s5, 1, "", out, &hit_at);
    CHECK(out[0] == 0 && hit_at == 0, "stop at once: \"%s\" at %d", out, hit_at);
    free(ids);
    celer_tokenizer_free(tk);
}

/* The stream on plain text: overlapping prefixes ("aab" in "aaab") and hold-back. */
static void stop_strings_text(void) {
    const char *st[] = {"aab"};
    celer_textstream *ts = celer_textstream_new(NULL, 0, st, 1);
    size_t l;
    int hit;
    const char *p = celer_textstream_put_text(ts, "xa", 2, &l, &hit);
    CHECK(l == 1 && p[0] == 'x' && !hit, "\"xa\": returned \"%s\"", p);
    p = celer_textstream_put_text(ts, "a", 1, &l, &hit);
    CHECK(l == 0 && !hit, "\"xaa\": returned \"%s\"", p);
    p = celer_textstream_put_text(ts, "a", 1, &l, &hit);
    CHECK(l == 1 && p[0] == 'a' && !hit, "\"xaaa\": returned \"%s\"", p);
    p = celer_textstream_put_text(ts, "bzz", 3, &l, &hit);
    CHECK(l == 0 && hit, "\"xaaabzz\": returned \"%s\", hit %d", p, hit);
    p = celer_textstream_put_text(ts, "more", 4, &l, &hit);
    CHECK(l == 0 && hit, "after a hit: returned \"%s\"", p);
    celer_textstream_free(ts);
    ts = celer_textstream_new(NULL, 0, st, 1);
    celer_textstream_put_text(ts, "zaa", 3, &l, &hit);
    p = celer_textstream_flush(ts, &l, &hit);
    CHECK(l == 2 && memcmp(p, "aa", 2) == 0 && !hit, "flush gives back the held \"aa\": \"%s\"", p);
    celer_textstream_free(ts);
    celer_textstream_free(NULL);
}

/* ---------------------------------------------------------------- the pipelined path */

/* A stand-in device sampler on the CPU backend: the host's filters (no penalties)
 * with the uniform draw the loop passes, its token written where the next step's
 * embedding reads it (the scratch's token ids) and kept in a result slot until read. */
static struct {
    backend_ops ops;
    const backend_ops *orig;
    celer_sampler *smp;
    int32_t slot[SAMPLE_SLOTS];
    int32_t rows[SAMPLE_SLOTS][SAMPLE_MAX_ROWS];
    int n_rows[SAMPLE_SLOTS];
    int busy[SAMPLE_SLOTS];
    int queued, read, misuse;
    int ahead;              /* batched draws queued while another slot was unread */
    int fail_at, n_reads;   /* sampled_rows call fail_at (1-based) fails, as a device error would */
} fake;

/* The stand-in's pick from logits [V] with p and the draw u. */
static int32_t fake_pick(const float *logits, int V, const sample_params *p, double u) {
    celer_sampler_params sp;
    celer_sampler_params_default(&sp);
    sp.temperature = p->temperature;
    sp.top_k = p->top_k;
    sp.top_p = p->top_p;
    sp.min_p = p->min_p;
    celer_sampler_free(fake.smp);
    fake.smp = celer_sampler_new(&sp, V);
    const int32_t *ids;
    const float *probs;
    int n = sample_candidates(fake.smp, logits, &ids, &probs), t = ids[n - 1];
    double cum = 0;
    for (int i = 0; i < n; i++)
        if (u < (cum += probs[i])) {
            t = ids[i];
            break;
        }
    return t;
}

static int fake_sample(backend *b, const float *logits, int V, const sample_params *p, double u, int32_t *tok, int slot) {
    (void)b;
    const int32_t t = fake_pick(logits, V, p, u);
    if (fake.busy[slot]) fake.misuse++; /* a slot reused before it was read */
    fake.busy[slot] = 1;
    fake.slot[slot] = t;
    tok[0] = t;
    fake.queued++;
    return 0;
}

static int32_t fake_sampled(backend *b, int slot) {
    (void)b;
    if (!fake.busy[slot]) {
        fake.misuse++;
        return -1;
    }
    fake.busy[slot] = 0;
    fake.read++;
    return fake.slot[slot];
}

/* Rows [n] of logits [n, V], each as fake_sample, into tok [n] and a slot. */
static int fake_sample_rows(backend *b, const float *logits, int V, int n, const sample_params *p, const double *u,
                            int32_t *tok, int slot) {
    (void)b;
    if (n <= 0 || n > SAMPLE_MAX_ROWS || slot < 0 || slot >= SAMPLE_SLOTS) {
        fake.misuse++;
        return -1;
    }
    if (fake.busy[slot]) fake.misuse++;
    for (int k = 0; k < SAMPLE_SLOTS; k++) fake.ahead += k != slot && fake.busy[k];
    for (int i = 0; i < n; i++) tok[i] = fake.rows[slot][i] = fake_pick(logits + (size_t)i * V, V, &p[i], u[i]);
    fake.busy[slot] = 1;
    fake.n_rows[slot] = n;
    fake.queued++;
    return 0;
}

static int fake_sampled_rows(backend *b, int slot, int32_t *out, int n) {
    (void)b;
    if (!fake.busy[slot] || n != fake.n_rows[slot]) {
        fake.misuse++;
        return err_set("stand-in sampler: slot %d read with %d rows (busy %d, %d rows drawn)", slot, n,
                       fake.busy[slot], fake.n_rows[slot]);
    }
    fake.busy[slot] = 0;
    fake.read++;
    if (fake.fail_at && ++fake.n_reads == fake.fail_at) return err_set("stand-in sampler: injected device failure");
    memcpy(out, fake.rows[slot], (size_t)n * sizeof *out);
    return 0;
}

/* rows: the batched sampler too (else the loop samples batches on the host). */
static void fake_install_rows(celer_model *m, int on, int rows) {
    backend *b = m->m->be;
    if (on) {
        fake.orig = b->ops;
        fake.ops = *b->ops;
        fake.ops.sample = fake_sample;
        fake.ops.sampled = fake_sampled;
        if (rows) {
            fake.ops.sample_rows = fake_sample_rows;
            fake.ops.sampled_rows = fake_sampled_rows;
        }
        b->ops = &fake.ops;
    } else {
        b->ops = fake.orig;
        celer_sampler_free(fake.smp);
        fake.smp = NULL;
    }
}

static void fake_install(celer_model *m, int on) { fake_install_rows(m, on, 0); }

typedef struct {
    run_out a, b;           /* a first generation, and one after a follow-up prompt */
    int pos;
} pipe_result;

/* Two generations on one session and sampler, the second after a follow-up prompt
 * (so the state the first leaves behind matters). join: a second sequence joins
 * the first generation after 5 steps. cancel_after > 0: the first is cancelled. */
static void pipe_run(celer_model *m, const celer_sampler_params *sp, int ctx, int max1, int32_t stop, int join,
                     int cancel_after, pipe_result *r) {
    memset(r, 0, sizeof *r);
    celer_session *s = celer_session_new(m, ctx, 16), *s2 = celer_session_new(m, 64, 16);
    celer_sampler *smp = celer_sampler_new(sp, 4096);
    celer_gen *g = celer_gen_new(m, 0);
    celer_gen_seq q = {.session = s, .sampler = smp, .prompt = PROMPT, .n_prompt = NP, .max_tokens = max1,
                       .stop_token = stop};
    int id = celer_gen_add(g, &q);
    static run_out other[2];
    memset(other, 0, sizeof other);
    run_out *outs[2] = {&r->a, &other[1]};
    for (int st = 0; celer_gen_active(g) && st < 100000; st++) {
        if (join && st == 5) {
            celer_gen_seq q2 = {.session = s2, .prompt = PROMPT + 1, .n_prompt = NP - 1, .max_tokens = 8, .stop_token = -1};
            CHECK(celer_gen_add(g, &q2) == 1, "join: %s", celer_last_error());
        }
        const celer_gen_event *ev;
        int n = celer_gen_step(g, &ev);
        for (int k = 0; k < n; k++) {
            run_out *o = outs[ev[k].seq];
            if (ev[k].token >= 0) o->tok[o->n++] = ev[k].token;
            o->finish = ev[k].finish;
            if (ev[k].seq == id && cancel_after && o->n == cancel_after && !ev[k].finish) celer_gen_cancel(g, id);
        }
    }
    celer_gen_free(g);
    const int32_t follow[3] = {5, 6, 8};
    r->pos = celer_session_pos(s);
    if (r->pos + 3 > ctx) celer_session_rewind(s, NP); /* a full context: room for the follow-up */
    r->b.n = celer_generate(s, smp, follow, 3, 12, -1, r->b.tok, &r->b.finish);
    if (r->b.n < 0) printf("  follow-up: %s\n", celer_last_error());
    celer_sampler_free(smp);
    celer_session_free(s);
    celer_session_free(s2);
}

static void same_as_host(celer_model *m, const char *what, const celer_sampler_params *sp, int ctx, int max1,
                         int32_t stop, int join, int cancel_after) {
    pipe_result h, d;
    pipe_run(m, sp, ctx, max1, stop, join, cancel_after, &h);
    fake_install(m, 1);
    memset(fake.busy, 0, sizeof fake.busy);
    fake.queued = fake.read = fake.misuse = 0;
    pipe_run(m, sp, ctx, max1, stop, join, cancel_after, &d);
    int queued = fake.queued, read = fake.read, misuse = fake.misuse;
    fake_install(m, 0);
    CHECK(queued > 0, "%s: the device path was not taken", what);
    CHECK(queued == read && misuse == 0, "%s: %d draws queued, %d read, %d misuses", what, queued, read, misuse);
    CHECK(h.a.n == d.a.n && memcmp(h.a.tok, d.a.tok, (size_t)h.a.n * 4) == 0 && h.a.finish == d.a.finish,
          "%s: first generation: host %d tokens (%s), pipelined %d (%s)", what, h.a.n, celer_finish_name(h.a.finish),
          d.a.n, celer_finish_name(d.a.finish));
    CHECK(h.pos == d.pos, "%s: the session holds %d tokens after the host loop, %d after the pipelined", what, h.pos,
          d.pos);
    CHECK(h.b.n > 0 && h.b.n == d.b.n && memcmp(h.b.tok, d.b.tok, sizeof h.b.tok) == 0,
          "%s: the generation after it differs (%d vs %d tokens): the state left behind differs", what, h.b.n, d.b.n);
}

static void pipelined_matches_host(void) {
    celer_model *m = celer_model_open("models/default", 2);
    CHECK(m != NULL, "models/default: %s", celer_last_error());
    if (!m) return;
    setting_override(SET_CELER_DEVICE_SAMPLE, "1");
    celer_sampler_params sp;
    celer_sampler_params_default(&sp);
    same_as_host(m, "greedy", &sp, 64, 20, -1, 0, 0);
    sp.temperature = 0.9f;
    sp.seed = 11;
    same_as_host(m, "t0.9 max_tokens", &sp, 64, 20, -1, 0, 0);
    pipe_result h;
    pipe_run(m, &sp, 64, 20, -1, 0, 0, &h);
    same_as_host(m, "t0.9 stop token", &sp, 64, 20, h.a.tok[9], 0, 0);
    same_as_host(m, "t0.9 context full", &sp, NP + 7, -1, -1, 0, 0);
    same_as_host(m, "t0.9 cancel", &sp, 64, 20, -1, 0, 6);
    same_as_host(m, "t0.9 a second sequence joins", &sp, 64, 20, -1, 1, 0);
    celer_model_free(m);
}

/* ---------------------------------------------------------------- the batched pipeline */

enum { BN = 7 };

typedef struct {
    run_out o[BN];          /* each sequence's tokens and finish */
    run_out f[BN];          /* a follow-up generation on its session and sampler */
    int pos[BN];            /* what its session held after it */
    int32_t last[BN];       /* the last token the session holds */
} batch_result;

/* Seven sequences in one loop: 0 and 4 greedy, the others sampled (each its own seed;
 * sequence 2 with a repeat penalty: the host samples it, beside the pipeline);
 * max_tokens, stop tokens stop[i] (-1: none), sequence 3 in a context that fills,
 * sequence 5 cancelled after 6 tokens, sequence 6 joining at step 4. */
static void batch_run(celer_model *m, const int32_t *stop, batch_result *r) {
    memset(r, 0, sizeof *r);
    static const int max_tok[BN] = {20, 14, 25, -1, 9, 20, 11};
    celer_session *s[BN];
    celer_sampler *smp[BN];
    celer_gen *g = celer_gen_new(m, 0);
    for (int i = 0; i < BN; i++) {
        celer_sampler_params sp;
        celer_sampler_params_default(&sp);
        if (i != 0 && i != 4) {
            sp.temperature = 0.9f;
            sp.seed = 100 + (uint64_t)i;
        }
        if (i == 2) {
            sp.repeat_penalty = 1.3f;
            sp.penalty_last_n = 16;
        }
        s[i] = celer_session_new(m, i == 3 ? NP + 12 : 64, 16);
        smp[i] = celer_sampler_new(&sp, 4096);
    }
    for (int st = 0; st < 100000; st++) {
        for (int i = 0; i < BN; i++) {
            if (i == 6 ? st != 4 : st != 0) continue;
            celer_gen_seq q = {.session = s[i], .sampler = smp[i], .prompt = PROMPT + i % 3, .n_prompt = NP - i % 3,
                               .max_tokens = max_tok[i], .stop_token = stop[i]};
            CHECK(celer_gen_add(g, &q) == i, "add %d: %s", i, celer_last_error());
        }
        if (st > 4 && !celer_gen_active(g)) break;
        const celer_gen_event *ev;
        const int n = celer_gen_step(g, &ev);
        CHECK(n >= 0, "step: %s", celer_last_error());
        for (int k = 0; k < n; k++) {
            run_out *o = &r->o[ev[k].seq];
            if (ev[k].token >= 0) o->tok[o->n++] = ev[k].token;
            CHECK(ev[k].n_generated == o->n, "sequence %d: n_generated %d after %d tokens", ev[k].seq,
                  ev[k].n_generated, o->n);
            o->finish = ev[k].finish;
            if (ev[k].finish == CELER_FINISH_ERROR) printf("  error: %s\n", ev[k].error);
            if (ev[k].seq == 5 && o->n == 6 && !ev[k].finish) celer_gen_cancel(g, 5);
        }
    }
    celer_gen_free(g);
    const int32_t follow[2] = {5, 6};
    for (int i = 0; i < BN; i++) {
        r->pos[i] = celer_session_pos(s[i]);
        r->last[i] = r->pos[i] > 0 ? s[i]->tokens[r->pos[i] - 1] : -1;
        if (r->pos[i] + 2 > s[i]->ctx) celer_session_rewind(s[i], NP);
        r->f[i].n = celer_generate(s[i], smp[i], follow, 2, 6, -1, r->f[i].tok, &r->f[i].finish);
        celer_sampler_free(smp[i]);
        celer_session_free(s[i]);
    }
}

static int batch_same(const char *what, const batch_result *a, const batch_result *b) {
    int ok = 1;
    for (int i = 0; i < BN; i++) {
        const run_out *x = &a->o[i], *y = &b->o[i];
        if (x->n != y->n || memcmp(x->tok, y->tok, (size_t)x->n * 4) != 0 || x->finish != y->finish) {
            printf("  %s: sequence %d: %d tokens (%s) against %d (%s)\n", what, i, x->n, celer_finish_name(x->finish),
                   y->n, celer_finish_name(y->finish));
            ok = 0;
        }
        if (a->pos[i] != b->pos[i] || a->last[i] != b->last[i]) {
            printf("  %s: sequence %d: the session holds %d tokens (last %d) against %d (last %d)\n", what, i,
                   a->pos[i], a->last[i], b->pos[i], b->last[i]);
            ok = 0;
        }
        if (a->f[i].n <= 0 || a->f[i].n != b->f[i].n || memcmp(a->f[i].tok, b->f[i].tok, sizeof a->f[i].tok) != 0) {
            printf("  %s: sequence %d: the follow-up generation differs (%d vs %d tokens)\n", what, i, a->f[i].n,
                   b->f[i].n);
            ok = 0;
        }
    }
    return ok;
}

static void batch_pipeline_matches_host(void) {
    celer_model *m = celer_model_open("models/default", 2);
    CHECK(m != NULL, "models/default: %s", celer_last_error());
    if (!m) return;
    setting_override(SET_CELER_DEVICE_SAMPLE, "1");
    int32_t stop[BN] = {-1, -1, -1, -1, -1, -1, -1};
    static batch_result h, d0, d1;
    batch_run(m, stop, &h);
    /* stop tokens the host run meets mid-way: sequences 1, 4 and 6 end on them */
    stop[1] = h.o[1].tok[7];
    stop[4] = h.o[4].tok[3];
    stop[6] = h.o[6].tok[5];
    batch_run(m, stop, &h);
    CHECK(h.o[1].finish == CELER_FINISH_STOP_TOKEN && h.o[4].finish == CELER_FINISH_STOP_TOKEN &&
              h.o[6].finish == CELER_FINISH_STOP_TOKEN && h.o[3].finish == CELER_FINISH_CONTEXT &&
              h.o[0].finish == CELER_FINISH_LENGTH && h.o[5].n == 6,
          "host run: the finishes are not the ones the test means (%s %s %s %s %s, %d)",
          celer_finish_name(h.o[1].finish), celer_finish_name(h.o[4].finish), celer_finish_name(h.o[6].finish),
          celer_finish_name(h.o[3].finish), celer_finish_name(h.o[0].finish), h.o[5].n);
    for (int pipe = 0; pipe <= 1; pipe++) {
        setting_override(SET_CELER_BATCH_PIPELINE, pipe ? "1" : "0");
        fake_install_rows(m, 1, 1);
        memset(fake.busy, 0, sizeof fake.busy);
        fake.queued = fake.read = fake.misuse = fake.ahead = 0;
        batch_run(m, stop, pipe ? &d1 : &d0);
        const int queued = fake.queued, read = fake.read, misuse = fake.misuse, ahead = fake.ahead;
        fake_install_rows(m, 0, 1);
        const char *what = pipe ? "pipelined" : "unpipelined";
        printf("  %s: %d draws queued, %d of them ahead of an unread slot\n", what, queued, ahead);
        CHECK(queued > 10, "%s: the device path was not taken (%d draws)", what, queued);
        CHECK(queued == read && misuse == 0, "%s: %d draws queued, %d read, %d misuses", what, queued, read, misuse);
        CHECK(pipe ? ahead > 10 : ahead == 0, "%s: %d batched draws queued before the last was read", what, ahead);
        CHECK(batch_same(what, &h, pipe ? &d1 : &d0), "%s batched steps differ from the host loop", what);
    }
    setting_override(SET_CELER_BATCH_PIPELINE, "1");
    celer_model_free(m);
}

/* A device failure while the batched pipeline runs: the rows of that step end with an
 * error naming it (no token from the failed read), the loop ends, and each session is
 * left holding its prompt and every token it reported, usable for a new generation. */
static void batch_pipeline_device_failure(void) {
    celer_model *m = celer_model_open("models/default", 2);
    CHECK(m != NULL, "models/default: %s", celer_last_error());
    if (!m) return;
    setting_override(SET_CELER_DEVICE_SAMPLE, "1");
    setting_override(SET_CELER_BATCH_PIPELINE, "1");
    enum { K = 4 };
    celer_session *s[K];
    celer_gen *g = celer_gen_new(m, 0);
    for (int i = 0; i < K; i++) {
        s[i] = celer_session_new(m, 64, 16);
        celer_gen_seq q = {.session = s[i], .prompt = PROMPT + i % 3, .n_prompt = NP - i % 3, .max_tokens = 16,
                           .stop_token = -1};
        CHECK(celer_gen_add(g, &q) == i, "add %d: %s", i, celer_last_error());
    }
    fake_install_rows(m, 1, 1);
    memset(fake.busy, 0, sizeof fake.busy);
    fake.queued = fake.read = fake.misuse = fake.ahead = fake.n_reads = 0;
    fake.fail_at = 4;
    int n_tok[K] = {0}, fin[K] = {0}, errors = 0, after = 0, named = 0;
    for (int st = 0; st < 1000 && celer_gen_active(g); st++) {
        const celer_gen_event *ev;
        const int n = celer_gen_step(g, &ev);
        for (int k = 0; k < n; k++) {
            const int i = ev[k].seq;
            after += fin[i] != 0;
            if (ev[k].token >= 0) n_tok[i]++;
            if (ev[k].finish == CELER_FINISH_ERROR) {
                errors++;
                named += ev[k].error && strstr(ev[k].error, "injected") != NULL;
                CHECK(ev[k].token < 0, "sequence %d: a token with the error", i);
            }
            if (ev[k].finish) fin[i] = ev[k].finish;
        }
    }
    const int queued = fake.queued, read = fake.read, misuse = fake.misuse;
    celer_gen_free(g);
    fake.fail_at = 0;
    fake_install_rows(m, 0, 1);
    CHECK(errors == K && named == K && after == 0, "%d errors (%d naming the failure), %d events after a finish",
          errors, named, after);
    CHECK(queued == read && misuse == 0, "%d draws queued, %d read, %d misuses", queued, read, misuse);
    for (int i = 0; i < K; i++) {
        CHECK(n_tok[i] > 0 && n_tok[i] < 16, "sequence %d: %d tokens before the failure", i, n_tok[i]);
        CHECK(celer_session_pos(s[i]) == NP - i % 3 + n_tok[i], "sequence %d: the session holds %d tokens, want %d",
              i, celer_session_pos(s[i]), NP - i % 3 + n_tok[i]);
        int32_t out[4];
        CHECK(celer_generate(s[i], NULL, PROMPT, 2, 4, -1, out, NULL) == 4, "sequence %d: no generation after: %s", i,
              celer_last_error());
        celer_session_free(s[i]);
    }
    celer_model_free(m);
}

int main(void) {
    RUN(several_llama);
    RUN(several_qwen3);
    RUN(several_gemma3);
    RUN(finishes);
    RUN(stop_string_in_loop);
    RUN(stop_strings_real_tokenizer);
    RUN(stop_strings_text);
    RUN(pipelined_matches_host);
    RUN(batch_pipeline_matches_host);
    RUN(batch_pipeline_device_failure);
    return harness_done();
}
