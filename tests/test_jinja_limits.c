/* tests/test_jinja_limits.c: the chat-template interpreter against hostile templates
 * (issue #23): expressions, blocks, macro calls and values nested past every limit
 * are refused with a message instead of overflowing the stack; memory and work done
 * inside filters, tests and operators count against the render's budgets; nothing is
 * silently cut short (string repetition, strftime_now, NUL bytes). Every case is
 * bounded: a limit hit stops the render within the step budget (seconds at most).
 * The expected outputs that are not errors are what jinja2 renders. */
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/limits.h"
#include "celer.h"
#include "celer_tokenizer.h"
#include "harness.h"

/* "{{ HEAD" + n copies of LINK + " }}", wrapped in an if that never runs when
 * dead is set (a limit found when parsing holds there too) */
static char *chain(const char *head, const char *link, int n, int dead) {
    size_t hl = strlen(head), ll = strlen(link), cap = hl + ll * (size_t)n + 64;
    char *t = malloc(cap);
    size_t k = (size_t)sprintf(t, "%s{{ %s", dead ? "{% if false %}" : "", head);
    for (int i = 0; i < n; i++) {
        memcpy(t + k, link, ll);
        k += ll;
    }
    k += (size_t)sprintf(t + k, " }}%s", dead ? "{% endif %}" : "");
    return t;
}

static void expect_error(const char *name, const char *tmpl, const char *vars, const char *want) {
    char *out = celer_jinja_render(tmpl, strlen(tmpl), vars);
    CHECK(out == NULL, "%s: rendered %zu bytes", name, out ? strlen(out) : 0);
    CHECK_STR_HAS(celer_last_error(), want);
    free(out);
}

static void expect_out(const char *name, const char *tmpl, const char *vars, const char *want) {
    char *out = celer_jinja_render(tmpl, strlen(tmpl), vars);
    CHECK(out && !strcmp(out, want), "%s: got \"%.80s\" (%s), want \"%.80s\"", name, out ? out : "(null)",
          out ? "" : celer_last_error(), want);
    free(out);
}

/* Issue #23 item 1: 10,000 links of a left-nested chain made eval recurse until
 * SIGSEGV. Each kind is refused when parsed, even inside a branch that never runs,
 * with the template's line and column. */
static void long_chains(void) {
    static const char *const links[][2] = {
        {"'x'", "|upper"},  {"'x'", " + 'x'"}, {"1", " and 1"},  {"1", " < 1"},        {"x", ".x"},
        {"x", "[0]"},       {"'x'", " ~ 'x'"}, {"1", " or 1"},   {"1", " * 1"},        {"1", " ** 1"},
        {"x", "()"},        {"x", " is defined"}, {"1", " - 1"}, {"1", " if 1 else 1"}, {"x", "[0:1]"},
    };
    for (size_t i = 0; i < sizeof links / sizeof *links; i++)
        for (int dead = 0; dead < 2; dead++) {
            char *t = chain(links[i][0], links[i][1], 10000, dead);
            char name[64];
            snprintf(name, sizeof name, "%s x 10000%s", links[i][1], dead ? " (dead branch)" : "");
            expect_error(name, t, NULL, "template:1:");
            expect_error(name, t, NULL, "nested too deeply");
            free(t);
        }
    /* prefix operators and brackets nest the other way */
    static const char *const opens[][3] = {{"not ", "1", ""}, {"-", "1", ""}, {"(", "1", ")"}, {"[", "1", "]"},
                                           {"{1: ", "1", "}"}, {"x(", "1", ")"}, {"'a'|replace('a', ", "'b'", ")"}};
    for (size_t i = 0; i < sizeof opens / sizeof *opens; i++) {
        size_t ol = strlen(opens[i][0]), cl = strlen(opens[i][2]);
        char *t = malloc(10000 * (ol + cl) + 64);
        size_t k = (size_t)sprintf(t, "{{ ");
        for (int j = 0; j < 10000; j++, k += ol) memcpy(t + k, opens[i][0], ol);
        k += (size_t)sprintf(t + k, "%s", opens[i][1]);
        for (int j = 0; j < 10000; j++, k += cl) memcpy(t + k, opens[i][2], cl);
        strcpy(t + k, " }}");
        expect_error(opens[i][0], t, NULL, "nested too deeply");
        free(t);
    }
}

/* A chain as tall as the limit still renders. jinja2 itself stops (Python's
 * recursion limit) at about 330 filters or 490 operators in a chain, so the limit
 * refuses nothing jinja2 renders. */
static void chain_at_limit(void) {
    char *t = chain("'x'", "|upper", CELER_MAX_TEMPLATE_EXPR_DEPTH - 1, 0);
    expect_out("|upper at the limit", t, NULL, "X");
    free(t);
    t = chain("1", " + 1", 491, 0);
    expect_out("491 additions (jinja2's most)", t, NULL, "492");
    free(t);
    t = chain("'x'", "|upper", CELER_MAX_TEMPLATE_EXPR_DEPTH, 0);
    char want[128];
    snprintf(want, sizeof want, "expression nested too deeply (over %d levels", CELER_MAX_TEMPLATE_EXPR_DEPTH);
    expect_error("|upper past the limit", t, NULL, "template:1:");
    expect_error("|upper past the limit", t, NULL, want);
    free(t);
}

/* Macro calls multiply the depth of what each level evaluates: 200 levels of an
 * expression 390 deep is 78,000 frames, stopped at CELER_MAX_TEMPLATE_NESTING. */
static void nested_macro_calls(void) {
    size_t cap = 390 * 8 + 256;
    char *t = malloc(cap);
    size_t k = (size_t)sprintf(t, "{%% macro f(n) %%}{{ f(n + 1)");
    for (int i = 0; i < 390; i++) k += (size_t)sprintf(t + k, "|upper");
    sprintf(t + k, " }}{%% endmacro %%}{{ f(0) }}");
    expect_error("macros x long chains", t, NULL, "nested too deeply");
    free(t);
    /* blocks inside macros */
    t = malloc(200 * 24 + 256);
    k = (size_t)sprintf(t, "{%% macro f(n) %%}");
    for (int i = 0; i < 190; i++) k += (size_t)sprintf(t + k, "{%% if 1 %%}");
    k += (size_t)sprintf(t + k, "{{ f(n + 1) }}");
    for (int i = 0; i < 190; i++) k += (size_t)sprintf(t + k, "{%% endif %%}");
    sprintf(t + k, "{%% endmacro %%}{{ f(0) }}");
    expect_error("macros x blocks", t, NULL, "nested too deeply");
    free(t);
    /* map('map', 'map', ..., 'upper') applies map inside map once per argument */
    t = malloc(100000 * 7 + 64);
    k = (size_t)sprintf(t, "{{ ['x']|map(");
    for (int i = 0; i < 100000; i++) k += (size_t)sprintf(t + k, "'map', ");
    sprintf(t + k, "'upper')|list }}");
    expect_error("map inside map", t, NULL, "filter nested too deeply");
    free(t);
    expect_out("map('map', 'upper')", "{{ [['a', 'b'], 'c']|map('map', 'upper')|map('list')|list }}", NULL,
               "[['A', 'B'], ['C']]");
}

/* Values a template builds can be nested without end, or refer to themselves:
 * printing, tojson and == stop at the nesting limit. */
static void deep_values(void) {
    const char *build = "{% set ns = namespace(x=[], y=[]) %}{% for i in range(5000) %}"
                        "{% set ns.x = [ns.x] %}{% set ns.y = [ns.y] %}{% endfor %}";
    const char *uses[] = {"{{ ns.x|tojson }}", "{{ ns.x }}", "{{ ns.x == ns.y }}", "{{ ns.x in [ns.y] }}",
                          "{{ ns.x|string|length }}", "{{ [ns.x, ns.y]|unique|length }}"};
    for (size_t i = 0; i < sizeof uses / sizeof *uses; i++) {
        char t[512];
        snprintf(t, sizeof t, "%s%s", build, uses[i]);
        expect_error(uses[i], t, NULL, "value nested too deeply");
        expect_error(uses[i], t, NULL, "template:1:");
    }
    const char *self = "{% set ns = namespace(a=1) %}{% set ns.me = ns %}{{ ns|tojson }}";
    expect_error("namespace holding itself", self, NULL, "value nested too deeply");
    /* shared, not nested: 2^64 elements reached through 64 levels */
    const char *dag = "{% set ns = namespace(x=1, y=1) %}{% for i in range(64) %}{% set ns.x = [ns.x, ns.x] %}"
                      "{% set ns.y = [ns.y, ns.y] %}{% endfor %}";
    char t[512];
    snprintf(t, sizeof t, "%s{{ ns.x == ns.y }}", dag);
    expect_error("== over a DAG", t, NULL, "rendering takes more than 10000000 steps");
    snprintf(t, sizeof t, "%s{{ ns.x|tojson|length }}", dag);
    expect_error("tojson over a DAG", t, NULL, "rendering takes more than 10000000 steps");
}

static long max_rss_kib(void) {
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return ru.ru_maxrss;
}

/* Issue #23 item 7: memory the render needs, wherever it is (values, temporary
 * buffers, the output), counts against CELER_MAX_TEMPLATE_MEMORY, and a request
 * for more is refused before it is allocated. */
static void memory_budget(void) {
    long rss0 = max_rss_kib();
    const char *mem = "rendering needs more than 268435456 bytes of memory (the limit)";
    expect_error("s * 1000000", "{% set s = 'x' * 1000000 %}{{ (s * 1000000)|length }}", NULL, mem);
    expect_error("'x' * 1e9", "{{ ('x' * 1000000000)|length }}", NULL, mem);
    expect_error("tojson indent 1e9", "{{ [[1]]|tojson(indent=1000000000) }}", NULL, mem);
    expect_error("tojson indent 1.5e9", "{{ [[[1]]]|tojson(indent=1500000000) }}", NULL, mem);
    /* a 200 MB string fits; so does its tojson copy alone, but not both */
    expect_error("tojson of 200 MB", "{{ ('x' * 200000000)|tojson|length }}", NULL, mem);
    expect_error("indent of 100 MB lines", "{{ ('x\\n' * 100000)|indent(2000) }}", NULL, "template:1:");
    long grown = max_rss_kib() - rss0;
    CHECK(grown < 700 * 1024, "the process grew by %ld MiB rendering within a 256 MiB budget", grown / 1024);
}

/* Issue #23 item 8: no silent truncation. */
static void exact_results(void) {
    expect_out("'x' * 2000000", "{{ ('x' * 2000000)|length }}", NULL, "2000000");
    expect_out("'ab' * 0", "[{{ 'ab' * 0 }}{{ 'ab' * -3 }}]", NULL, "[]");
    expect_out("3 * 'ab'", "{{ 3 * 'ab' }}", NULL, "ababab");
    /* strftime_now: the whole result, however long; empty stays empty */
    char *out = celer_jinja_render("{{ strftime_now('%Y' * 100000) }}", strlen("{{ strftime_now('%Y' * 100000) }}"), NULL);
    CHECK(out && strlen(out) == 400000, "strftime_now('%%Y' * 100000): %zu bytes (%s), want 400000",
          out ? strlen(out) : 0, out ? "" : celer_last_error());
    if (out) {
        time_t now = time(NULL);
        struct tm tmv;
        localtime_r(&now, &tmv);
        char year[16];
        snprintf(year, sizeof year, "%04d", tmv.tm_year + 1900);
        int same = 1;
        for (size_t i = 0; i + 4 <= strlen(out) && same; i += 4) same = !memcmp(out + i, year, 4);
        CHECK(same, "strftime_now('%%Y' * 100000) is not the year repeated");
    }
    free(out);
    expect_out("strftime_now('')", "[{{ strftime_now('') }}]", NULL, "[]");
    expect_error("strftime_now with NUL", "{{ strftime_now('%Y\\0%m') }}", NULL, "embedded null character");
    /* a NUL byte in the output would end the C string the caller gets */
    expect_error("NUL from a literal", "a{{ 'b\\0c' }}d", NULL, "template:1:2: the output would contain a NUL byte");
    expect_error("NUL from a variable", "{{ x }}", "{\"x\": \"a\\u0000b\"}", "NUL byte (at offset 1)");
    expect_out("NUL inside a value", "{{ x|length }} {{ x|replace('\\0', '-') }}", "{\"x\": \"a\\u0000b\"}", "3 a-b");
    /* tojson's indent is json.dumps's: negative means newlines only */
    expect_out("tojson indent -1", "{{ [1]|tojson(indent=-1) }}", NULL, "[\n1\n]");
    expect_out("tojson indent 2", "{{ {'a': [1]}|tojson(indent=2) }}", NULL, "{\n  \"a\": [\n    1\n  ]\n}");
}

/* Work inside filters, tests and operators counts as steps: each element visited,
 * each 64 bytes read or written. */
static void work_budget(void) {
    const char *steps = "rendering takes more than 10000000 steps";
    expect_error("unique of 100000", "{{ range(100000)|unique|length }}", NULL, steps);
    expect_error("in over a list, 100000 times",
                 "{% set big = range(100000)|list %}{% for i in range(100000) %}{% if -1 in big %}{% endif %}{% endfor %}",
                 NULL, steps);
    expect_error("in over a string, 100000 times",
                 "{% set s = 'x' * 10000000 %}{% for i in range(100000) %}{% if 'y' in s %}{% endif %}{% endfor %}",
                 NULL, steps);
    expect_error("list.count", "{% set big = range(100000)|list %}{% for i in range(1000) %}{{ big.count(1) }}{% endfor %}",
                 NULL, steps);
    expect_error("strip with a long set of characters",
                 "{% set s = 'x' * 100000 %}{{ s.strip('z' * 100000 + 'x')|length }}", NULL, steps);
    expect_error("rsplit with a long separator", "{% set s = 'x' * 400000 %}{{ s.rsplit(s[:200000] + 'y', 1)|length }}",
                 NULL, steps);
    /* sorting is n log n and stable, as Python's */
    expect_out("sort of 100000", "{{ (range(100000)|reverse|sort)[:3]|join(',') }} {{ (range(100000)|sort(reverse=true))|first }}",
               NULL, "0,1,2 99999");
    const char *items = "{% set l = [{'k': 1, 'v': 'a'}, {'k': 0, 'v': 'b'}, {'k': 1, 'v': 'c'}, {'k': 0, 'v': 'd'}] %}";
    char t[512];
    snprintf(t, sizeof t, "%s{{ l|sort(attribute='k')|map(attribute='v')|join }} "
                          "{{ l|sort(attribute='k', reverse=true)|map(attribute='v')|join }}", items);
    expect_out("stable sort", t, NULL, "bdac acbd");
    expect_out("sort strings", "{{ ['b', 'A', 'a', 'B']|sort|join }} {{ ['b', 'A', 'a', 'B']|sort(case_sensitive=true)|join }}",
               NULL, "AabB ABab");
}

/* A tokenizer whose chat template cannot be run is refused when it opens (so that
 * `celer serve` refuses it at start-up), naming the file and the line. */
static void refused_at_load(void) {
    char dir[] = "/tmp/celer-jinja-XXXXXX";
    if (!mkdtemp(dir)) { CHECK(0, "mkdtemp"); return; }
    char path[256];
    snprintf(path, sizeof path, "%s/tokenizer.json", dir);
    FILE *f = fopen(path, "w");
    fputs("{\"model\": {\"type\": \"BPE\", \"vocab\": {\"a\": 0, \"b\": 1, \"ab\": 2}, \"merges\": [\"a b\"]}}", f);
    fclose(f);
    snprintf(path, sizeof path, "%s/tokenizer_config.json", dir);
    f = fopen(path, "w");
    fputs("{\"chat_template\": \"{% for m in messages %}\\n{{ m.content", f);
    for (int i = 0; i < 10000; i++) fputs("|upper", f);
    fputs(" }}{% endfor %}\"}", f);
    fclose(f);
    celer_tokenizer *t = celer_tokenizer_open(dir);
    CHECK(t == NULL, "opened a tokenizer whose chat template nests 10000 filters");
    CHECK_STR_HAS(celer_last_error(), "tokenizer_config.json:2:");
    CHECK_STR_HAS(celer_last_error(), "expression nested too deeply");
    celer_tokenizer_free(t);
    /* a template that parses opens */
    f = fopen(path, "w");
    fputs("{\"chat_template\": \"{% for m in messages %}{{ m.content|upper }}{% endfor %}\"}", f);
    fclose(f);
    t = celer_tokenizer_open(dir);
    CHECK(t != NULL, "a good template refused: %s", celer_last_error());
    char *r = t ? celer_chat_render(t, "[{\"role\": \"user\", \"content\": \"hi\"}]", NULL, 0) : NULL;
    CHECK(r && !strcmp(r, "HI"), "render: %s", r ? r : celer_last_error());
    free(r);
    celer_tokenizer_free(t);
    /* a NUL byte would cut the template short */
    f = fopen(path, "w");
    fputs("{\"chat_template\": \"{{ 1 }}\\u0000{{ 2 }}\"}", f);
    fclose(f);
    t = celer_tokenizer_open(dir);
    CHECK(t == NULL, "opened a tokenizer whose chat template holds a NUL byte");
    CHECK_STR_HAS(celer_last_error(), "chat_template contains a NUL byte");
    celer_tokenizer_free(t);
    char cmd[300];
    snprintf(cmd, sizeof cmd, "rm -rf '%s'", dir);
    CHECK(system(cmd) == 0, "rm");
}

int main(void) {
    RUN(long_chains);
    RUN(chain_at_limit);
    RUN(nested_macro_calls);
    RUN(deep_values);
    RUN(memory_budget);
    RUN(exact_results);
    RUN(work_budget);
    RUN(refused_at_load);
    return harness_done();
}
