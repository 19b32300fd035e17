/* tests/test_tokenizer_chat.c: chat templates. Every chat of the fixture ref.json files
 * rendered byte for byte as transformers' apply_chat_template renders it, and its ids as
 * transformers tokenizes the rendered text. */
#include <jansson.h>
#include <stdlib.h>
#include <sys/stat.h>
#include <unistd.h>

#include "celer.h"
#include "celer_tokenizer.h"
#include "harness.h"

static void check_chats(const char *name) {
    char dir[256], ref[300];
    snprintf(dir, sizeof dir, "tests/fixtures/tokenizers/%s", name);
    snprintf(ref, sizeof ref, "%s/ref.json", dir);
    json_error_t je;
    json_t *r = json_load_file(ref, 0, &je);
    CHECK(r != NULL, "%s: %s", ref, je.text);
    if (!r) return;
    celer_tokenizer *t = celer_tokenizer_open(dir);
    CHECK(t != NULL, "%s: %s", name, celer_last_error());
    size_t i;
    json_t *ch;
    int good = 0, n = 0;
    json_array_foreach(json_object_get(r, "chats"), i, ch) {
        if (!t) break;
        n++;
        char *msgs = json_dumps(json_object_get(ch, "messages"), JSON_COMPACT);
        const char *want = json_string_value(json_object_get(ch, "rendered"));
        char *got = celer_chat_render(t, msgs, NULL, json_is_true(json_object_get(ch, "add_generation_prompt")));
        int ok = got && !strcmp(got, want);
        CHECK(ok, "%s chat %zu: rendered\n%s\nwant\n%s\n(%s)", name, i, got ? got : "(null)", want, got ? "" : celer_last_error());
        /* the rendered text tokenizes to the reference ids (special tokens matched in the text, nothing added) */
        if (got) {
            int32_t *ids;
            int k = celer_tokenize(t, want, strlen(want), 0, &ids);
            json_t *w = json_object_get(ch, "ids");
            int same = k >= 0 && (size_t)k == json_array_size(w);
            for (int q = 0; same && q < k; q++) same = ids[q] == json_integer_value(json_array_get(w, (size_t)q));
            CHECK(same, "%s chat %zu: ids of the rendered text differ", name, i);
            ok &= same;
            free(ids);
            /* celer_chat_encode gives the same ids with special tokens parsed in content
             * (transformers' behaviour) and, these messages holding none, without */
            for (int ps = 0; ps < 2; ps++) {
                celer_chat_request rq = {msgs, NULL, NULL, json_is_true(json_object_get(ch, "add_generation_prompt")), ps};
                char *txt = NULL;
                k = celer_chat_encode(t, &rq, &ids, &txt);
                same = k >= 0 && (size_t)k == json_array_size(w) && txt && !strcmp(txt, want);
                for (int q = 0; same && q < k; q++) same = ids[q] == json_integer_value(json_array_get(w, (size_t)q));
                CHECK(same, "%s chat %zu: celer_chat_encode (parse_special_in_content %d) differs", name, i, ps);
                ok &= same;
                free(ids);
                free(txt);
            }
        }
        good += ok;
        free(got);
        free(msgs);
    }
    printf("  %s: %d/%d chats\n", name, good, n);
    celer_tokenizer_free(t);
    json_decref(r);
}

static void gemma3(void) { check_chats("gemma3"); }
static void llama3(void) { check_chats("llama3"); }
static void qwen3(void) { check_chats("qwen3"); }

/* A checkpoint directory whose template is a chat_template.jinja file beside
 * tokenizer.json (as gpt-oss checkpoints ship theirs): here the harmony-style template
 * of the jinja fixtures, with messages and tools; the expected prompt is Python jinja2's. */
static char tmpdir[256];

static const char *case_rendered(json_t *cases, const char *name, json_t **vars) {
    size_t i;
    json_t *c;
    json_array_foreach(cases, i, c) {
        if (!strcmp(json_string_value(json_object_get(c, "name")), name)) {
            *vars = json_object_get(c, "vars");
            return json_string_value(json_object_get(c, "rendered"));
        }
    }
    return NULL;
}

static void template_file(void) {
    char dir[300], src[1024], dst[600], cwd[512];
    snprintf(dir, sizeof dir, "%s/ckpt", tmpdir);
    mkdir(dir, 0755);
    if (!getcwd(cwd, sizeof cwd)) { CHECK(0, "getcwd"); return; }
    snprintf(src, sizeof src, "%s/tests/fixtures/tokenizers/qwen3/tokenizer.json", cwd);
    snprintf(dst, sizeof dst, "%s/tokenizer.json", dir);
    CHECK(symlink(src, dst) == 0, "symlink %s", dst);
    snprintf(src, sizeof src, "%s/tests/fixtures/tokenizers/qwen3/tokenizer_config.json", cwd);
    snprintf(dst, sizeof dst, "%s/tokenizer_config.json", dir);
    CHECK(symlink(src, dst) == 0, "symlink %s", dst);
    snprintf(src, sizeof src, "%s/tests/fixtures/tokenizers/jinja/harmony_style.jinja", cwd);
    snprintf(dst, sizeof dst, "%s/chat_template.jinja", dir);
    CHECK(symlink(src, dst) == 0, "symlink %s", dst);
    json_t *cases = json_load_file("tests/fixtures/tokenizers/jinja/cases.json", 0, NULL);
    CHECK(cases != NULL, "cases.json");
    celer_tokenizer *t = celer_tokenizer_open(dir);
    CHECK(t != NULL, "%s", celer_last_error());
    if (t && cases) {
        static const char *const names[] = {"harmony_tools", "harmony_final"};
        for (int k = 0; k < 2; k++) {
            json_t *vars = NULL;
            const char *want = case_rendered(cases, names[k], &vars);
            char *msgs = json_dumps(json_object_get(vars, "messages"), 0);
            json_t *tl = json_object_get(vars, "tools");
            char *tools = tl && !json_is_null(tl) ? json_dumps(tl, 0) : NULL;
            char *got = celer_chat_render(t, msgs, tools, json_is_true(json_object_get(vars, "add_generation_prompt")));
            CHECK(want && got && !strcmp(got, want), "%s: rendered\n%s\nwant\n%s\n%s", names[k], got ? got : "(null)",
                  want ? want : "", got ? "" : celer_last_error());
            free(got);
            free(msgs);
            free(tools);
        }
        /* the template's own exception, with the file it came from */
        char *got = celer_chat_render(t, "[{\"role\": \"robot\", \"content\": \"x\"}]", NULL, 1);
        CHECK(!got, "bad role rendered");
        CHECK_STR_HAS(celer_last_error(), "chat_template.jinja:");
        CHECK_STR_HAS(celer_last_error(), "unexpected role robot at message 1");
        free(got);
    }
    celer_tokenizer_free(t);
    json_decref(cases);
}

/* Qwen3's own template with tools, tool calls, tool responses and reasoning, and with
 * enable_thinking=false passed as an extra variable; expected output from jinja2. */
static void qwen3_options(void) {
    json_t *cases = json_load_file("tests/fixtures/tokenizers/jinja/cases.json", 0, NULL);
    celer_tokenizer *t = celer_tokenizer_open("tests/fixtures/tokenizers/qwen3");
    CHECK(cases && t, "load: %s", celer_last_error());
    static const char *const names[] = {"qwen3_tools", "qwen3_no_thinking"};
    for (int k = 0; k < 2 && cases && t; k++) {
        json_t *vars = NULL;
        const char *want = case_rendered(cases, names[k], &vars);
        char *msgs = json_dumps(json_object_get(vars, "messages"), 0);
        json_t *tl = json_object_get(vars, "tools");
        char *tools = tl && !json_is_null(tl) ? json_dumps(tl, 0) : NULL;
        json_t *ex = json_object_get(vars, "enable_thinking");
        const char *extra = ex ? (json_is_true(ex) ? "{\"enable_thinking\": true}" : "{\"enable_thinking\": false}") : NULL;
        char *got = celer_chat_render_vars(t, msgs, tools, 1, extra);
        CHECK(want && got && !strcmp(got, want), "%s: rendered\n%s\nwant\n%s\n%s", names[k], got ? got : "(null)",
              want ? want : "", got ? "" : celer_last_error());
        free(got);
        free(msgs);
        free(tools);
    }
    char *bad = t ? celer_chat_render_vars(t, "[]", NULL, 1, "[1]") : NULL;
    CHECK(!bad, "non-object template variables accepted");
    celer_tokenizer_free(t);
    json_decref(cases);
}

/* tokenizer_config.json may carry a list of named templates; "default" is used. */
static void named_templates(void) {
    char dir[300], src[1024], dst[600], cwd[512];
    snprintf(dir, sizeof dir, "%s/named", tmpdir);
    mkdir(dir, 0755);
    if (!getcwd(cwd, sizeof cwd)) { CHECK(0, "getcwd"); return; }
    snprintf(src, sizeof src, "%s/tests/fixtures/tokenizers/qwen3/tokenizer.json", cwd);
    snprintf(dst, sizeof dst, "%s/tokenizer.json", dir);
    CHECK(symlink(src, dst) == 0, "symlink %s", dst);
    snprintf(dst, sizeof dst, "%s/tokenizer_config.json", dir);
    FILE *f = fopen(dst, "w");
    if (!f) { CHECK(0, "cannot write %s", dst); return; }
    fputs("{\"eos_token\": \"<|im_end|>\", \"chat_template\": [{\"name\": \"tool_use\", \"template\": \"TOOLS\"}, "
          "{\"name\": \"default\", \"template\": \"{% for m in messages %}[{{ m.role }}:{{ m.content }}]{% endfor %}{{ eos_token }}\"}]}",
          f);
    fclose(f);
    celer_tokenizer *t = celer_tokenizer_open(dir);
    CHECK(t != NULL, "%s", celer_last_error());
    char *got = t ? celer_chat_render(t, "[{\"role\": \"user\", \"content\": \"hi\"}]", NULL, 0) : NULL;
    CHECK(got && !strcmp(got, "[user:hi]<|im_end|>"), "named default template gave %s", got ? got : celer_last_error());
    free(got);
    celer_tokenizer_free(t);
}

int main(void) {
    snprintf(tmpdir, sizeof tmpdir, "/tmp/celer-tokchat-XXXXXX");
    if (!mkdtemp(tmpdir)) { printf("cannot make a temporary directory\n"); return 1; }
    RUN(template_file);
    RUN(named_templates);
    RUN(qwen3_options);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf %s", tmpdir);
    if (system(cmd) != 0) printf("could not remove %s\n", tmpdir);
    RUN(llama3);
    RUN(qwen3);
    RUN(gemma3);
    return harness_done();
}
