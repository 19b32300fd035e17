/* cli/load.c: model opening with a status line on a terminal (cli/load.h). A helper
 * thread redraws the line while the main thread opens the model; the main thread
 * erases it. */
#include "cli/load.h"

#include <dirent.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdlib.h>
#include <stdio.h>
#include <string.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

const char *cli_fmt_bytes(uint64_t b, char *buf, size_t n) {
    static const char *unit[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    double v = (double)b;
    int u = 0;
    while (v >= 1024 && u < 4) v /= 1024, u++;
    if (u == 0) snprintf(buf, n, "%llu B", (unsigned long long)b);
    else snprintf(buf, n, "%.1f %s", v, unit[u]);
    return buf;
}

uint64_t cli_safetensors_bytes(const char *dir, int *n_files) {
    uint64_t total = 0;
    int n = 0;
    DIR *d = opendir(dir);
    if (d) {
        struct dirent *e;
        while ((e = readdir(d))) {
            size_t len = strlen(e->d_name);
            if (len < 12 || strcmp(e->d_name + len - 12, ".safetensors") != 0) continue;
            char p[PATH_MAX];
            struct stat st;
            if ((size_t)snprintf(p, sizeof p, "%s/%s", dir, e->d_name) >= sizeof p || stat(p, &st) != 0) continue;
            if (!S_ISREG(st.st_mode)) continue;
            total += (uint64_t)st.st_size;
            n++;
        }
        closedir(d);
    }
    if (n_files) *n_files = n;
    return total;
}

typedef struct {
    pthread_mutex_t mu;
    pthread_cond_t cv;
    int done;
    char line[PATH_MAX + 128];  /* the status text, without the elapsed time */
    struct timespec t0;
} status_line;

static double since(const struct timespec *t0) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)(t.tv_sec - t0->tv_sec) + (t.tv_nsec - t0->tv_nsec) * 1e-9;
}

static void *status_main(void *arg) {
    status_line *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->done) {
        struct timespec until;
        clock_gettime(CLOCK_REALTIME, &until);
        until.tv_nsec += 500000000L;
        if (until.tv_nsec >= 1000000000L) until.tv_sec++, until.tv_nsec -= 1000000000L;
        int r = pthread_cond_timedwait(&s->cv, &s->mu, &until);
        if (!s->done && r == ETIMEDOUT) {
            fprintf(stderr, "\r%s %.1f s", s->line, since(&s->t0));
            fflush(stderr);
        }
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

static const char *g_device; /* borrowed from argv */

int cli_synth_dir(const char *cmd, const char *shape, char *dir, size_t n) {
    snprintf(dir, n, "/tmp/celer-synth-XXXXXX");
    if (!mkdtemp(dir)) {
        cli_error(cmd, "--synth: cannot make %s: %s", dir, strerror(errno));
        return 1;
    }
    if (celer_synth_sparse(shape, dir) != 0) {
        cli_error(cmd, "--synth %s: %s", shape, celer_last_error());
        cli_synth_clean(dir);
        return 1;
    }
    celer_setting_set("CELER_SYNTH_FILL", "1");
    return 0;
}

void cli_synth_clean(const char *dir) {
    char p[PATH_MAX + 32];
    const char *names[] = {"model.safetensors", "config.json"};
    for (int i = 0; i < 2; i++) {
        snprintf(p, sizeof p, "%s/%s", dir, names[i]);
        unlink(p);
    }
    rmdir(dir);
}

void cli_set_device(const char *device) { g_device = device; }

int cli_device_flag(const args *a) {
    const char *d = args_get(a, "--device");
    int num = d && strncmp(d, "cuda:", 5) == 0 && d[5] && strspn(d + 5, "0123456789") == strlen(d + 5);
    if (d && !num && strcmp(d, "cpu") != 0 && strcmp(d, "cuda") != 0 && strcmp(d, "auto") != 0) {
        args_usage_error(a, "flag '--device' wants cpu, cuda, cuda:N or auto, got '%s'", d);
        return 2;
    }
    cli_set_device(d);
    args_apply_globals();
    return 0;
}

const char *cli_device(void) { return g_device; }

celer_model *cli_model_open(const char *cmd, const char *dir, int n_threads, int quiet) {
    if (quiet || !isatty(2)) return celer_model_open_on(dir, n_threads, g_device);
    status_line s;
    memset(&s, 0, sizeof s);
    pthread_mutex_init(&s.mu, NULL);
    pthread_cond_init(&s.cv, NULL);
    clock_gettime(CLOCK_MONOTONIC, &s.t0);
    int nf = 0;
    char size[32];
    uint64_t bytes = cli_safetensors_bytes(dir, &nf);
    snprintf(s.line, sizeof s.line, "celer %s: loading %.*s (%s in %d file%s) ...", cmd, PATH_MAX, dir,
             cli_fmt_bytes(bytes, size, sizeof size), nf, nf == 1 ? "" : "s");
    fprintf(stderr, "%s", s.line);
    fflush(stderr);
    pthread_t th;
    int ticking = pthread_create(&th, NULL, status_main, &s) == 0;
    celer_model *m = celer_model_open_on(dir, n_threads, g_device);
    if (ticking) {
        pthread_mutex_lock(&s.mu);
        s.done = 1;
        pthread_cond_signal(&s.cv);
        pthread_mutex_unlock(&s.mu);
        pthread_join(th, NULL);
    }
    fprintf(stderr, "\r\033[K");  /* erase the line */
    fflush(stderr);
    pthread_cond_destroy(&s.cv);
    pthread_mutex_destroy(&s.mu);
    return m;
}
