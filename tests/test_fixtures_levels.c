/* tests/test_fixtures_levels.c: the model fixtures (test_fixtures_models, transformers'
 * logits at the CPU tolerance) once per CPU kernel level forced with CELER_CPU:
 * generic, avx2, avx512. A level this processor lacks is skipped with the reason
 * printed; the unforced run (the best level) is test_fixtures_models itself. */
#include <libgen.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu.h"
#include "harness.h"

static char dir[1024];

static void run_level(int level) {
    const char *name = cpu_level_name(level);
    if (level > cpu_level_hw()) {
        printf("skip: CELER_CPU=%s: this CPU lacks it (it runs up to %s)\n", name, cpu_level_name(cpu_level_hw()));
        return;
    }
    char cmd[1200];
    snprintf(cmd, sizeof cmd, "CELER_CPU=%s %s/test_fixtures_models 2>&1", name, dir);
    FILE *p = popen(cmd, "r");
    CHECK(p != NULL, "popen %s", cmd);
    if (!p) return;
    char line[4096];
    int passed = -1, failed = -1;
    while (fgets(line, sizeof line, p)) {
        if (sscanf(line, "@@ %d passed %d failed", &passed, &failed) == 2) continue;
        if (strncmp(line, "FAIL", 4) == 0 || strstr(line, "max |logit")) printf("  [%s] %s", name, line);
    }
    int rc = pclose(p);
    CHECK(rc == 0 && passed > 0 && failed == 0, "CELER_CPU=%s: test_fixtures_models exit %d, %d passed, %d failed", name,
          rc, passed, failed);
    printf("  CELER_CPU=%s: %d fixture cases passed\n", name, passed);
}

static void fixtures_generic(void) { run_level(CPU_GENERIC); }
static void fixtures_avx2(void) { run_level(CPU_AVX2); }
static void fixtures_avx512(void) { run_level(CPU_AVX512); }

int main(int argc, char **argv) {
    (void)argc;
    char self[1024];
    snprintf(self, sizeof self, "%s", argv[0]);
    snprintf(dir, sizeof dir, "%s", dirname(self));
    RUN(fixtures_generic);
    RUN(fixtures_avx2);
    RUN(fixtures_avx512);
    return harness_done();
}
