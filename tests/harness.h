/* tests/harness.h: the tiny test harness every tests/test_*.c includes.
 * A test binary runs its cases with RUN(fn), each case records failures with CHECK*,
 * and main ends with `return harness_done();`, which prints the counts that
 * tests/run.sh adds up. Tests run from the repository root. */
#ifndef CELER_TEST_HARNESS_H
#define CELER_TEST_HARNESS_H
#include <math.h>
#include <stdio.h>
#include <string.h>

static int h_passed, h_failed, h_case_failed;
static const char *h_case;

#define CHECK(cond, ...)                                                     \
    do {                                                                     \
        if (!(cond)) {                                                       \
            h_case_failed = 1;                                               \
            printf("  %s:%d: %s: ", __FILE__, __LINE__, h_case);             \
            printf(__VA_ARGS__);                                             \
            printf("\n");                                                    \
        }                                                                    \
    } while (0)

#define CHECK_NEAR(a, b, tol) \
    CHECK(fabs((double)(a) - (double)(b)) <= (tol), "%s = %.9g, want %.9g (tol %g)", #a, (double)(a), (double)(b), (double)(tol))

#define CHECK_STR_HAS(s, sub) \
    CHECK((s) && strstr((s), (sub)), "message \"%s\" should mention \"%s\"", (s) ? (s) : "(null)", (sub))

/* RUN for a case known at run time: name (a string), then the call that runs it. */
#define RUN_CASE(name, call)                                                 \
    do {                                                                     \
        h_case = (name);                                                     \
        h_case_failed = 0;                                                   \
        call;                                                                \
        if (h_case_failed) { h_failed++; printf("FAIL %s\n", h_case); }      \
        else { h_passed++; printf("ok   %s\n", h_case); }                    \
        fflush(stdout);                                                      \
    } while (0)

#define RUN(fn) RUN_CASE(#fn, fn())

static inline int harness_done(void) {
    printf("@@ %d passed %d failed\n", h_passed, h_failed);
    return h_failed ? 1 : 0;
}
#endif
