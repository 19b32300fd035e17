/* tests/test_tokenizer_jinja.c: the Jinja interpreter against Python's jinja2 in the
 * environment transformers uses (tests/fixtures/tokenizers/jinja/cases.json, written by
 * gen_cases.py there): every case renders byte for byte, or fails where jinja2 fails,
 * with raise_exception's own message and a line:column for syntax errors. */
#include <jansson.h>
#include <stdlib.h>
#include <time.h>

#include "celer.h"
#include "celer_tokenizer.h"
#include "harness.h"

static void cases(void) {
    json_error_t je;
    json_t *r = json_load_file("tests/fixtures/tokenizers/jinja/cases.json", 0, &je);
    CHECK(r != NULL, "cases.json: %s", je.text);
    if (!r) return;
    size_t i;
    json_t *c;
    int good = 0, n = 0;
    json_array_foreach(r, i, c) {
        n++;
        const char *name = json_string_value(json_object_get(c, "name"));
        json_t *tv = json_object_get(c, "template");
        char *vars = json_dumps(json_object_get(c, "vars"), JSON_COMPACT);
        char *got = celer_jinja_render(json_string_value(tv), json_string_length(tv), vars);
        const char *want = json_string_value(json_object_get(c, "rendered"));
        const char *err = json_string_value(json_object_get(c, "error"));
        int ok;
        if (want) {
            ok = got && !strcmp(got, want);
            CHECK(ok, "%s: rendered\n[%s]\nwant\n[%s]\n%s", name, got ? got : "(null)", want, got ? "" : celer_last_error());
        } else {
            const char *msg = celer_last_error();
            ok = got == NULL;
            CHECK(ok, "%s: rendered [%s], want a %s error", name, got ? got : "", err);
            if (ok && !strncmp(name, "err_raise", 9)) {
                CHECK_STR_HAS(msg, json_string_value(json_object_get(c, "python_error")));
            }
            if (ok && !strcmp(err, "syntax")) {
                /* names the line: "template:L:C: ..." */
                CHECK(strstr(msg, "template:") && strchr(msg + 9, ':'), "%s: message without a position: %s", name, msg);
            }
        }
        good += ok;
        free(got);
        free(vars);
    }
    printf("  %d/%d jinja cases agree with jinja2\n", good, n);
    json_decref(r);
}

static void error_positions(void) {
    char *s = celer_jinja_render("a\nb {{ x | nosuch }}", strlen("a\nb {{ x | nosuch }}"), NULL);
    CHECK(!s, "unknown filter renders");
    CHECK_STR_HAS(celer_last_error(), "template:2:");
    CHECK_STR_HAS(celer_last_error(), "nosuch");
    s = celer_jinja_render("{% for x in y %}\n{% endif %}", strlen("{% for x in y %}\n{% endif %}"), NULL);
    CHECK(!s, "mismatched end renders");
    CHECK_STR_HAS(celer_last_error(), "template:2:");
    s = celer_jinja_render("x {{ raise_exception('Conversation roles must alternate') }}", strlen("x {{ raise_exception('Conversation roles must alternate') }}"), NULL);
    CHECK(!s, "raise_exception renders");
    CHECK_STR_HAS(celer_last_error(), "Conversation roles must alternate");
    s = celer_jinja_render("{{ 'x' }}", strlen("{{ 'x' }}"), "[1, 2]");
    CHECK(!s, "non-object variables accepted");
    s = celer_jinja_render("{{ 'unterminated }}", strlen("{{ 'unterminated }}"), NULL);
    CHECK(!s, "unterminated string renders");
    CHECK_STR_HAS(celer_last_error(), "template:1:");
}

static void strftime_now(void) {
    char *s = celer_jinja_render("{{ strftime_now('%Y-%m-%d') }}", strlen("{{ strftime_now('%Y-%m-%d') }}"), NULL);
    char want[32];
    time_t t = time(NULL);
    struct tm tmv;
    localtime_r(&t, &tmv);
    strftime(want, sizeof want, "%Y-%m-%d", &tmv);
    CHECK(s && !strcmp(s, want), "strftime_now gave %s, want %s", s ? s : "(null)", want);
    free(s);
}

int main(void) {
    RUN(cases);
    RUN(error_positions);
    RUN(strftime_now);
    return harness_done();
}
