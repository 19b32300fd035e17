/* base/pool.c: a spin-then-sleep thread pool with dynamic task claiming. */
#include "base/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "base/err.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

#define SPIN_ITERS 200000

struct pool {
    int n;                       /* threads including the caller */
    pthread_t *th;               /* [n - 1] */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    atomic_int gen;              /* bumped once per run */
    atomic_int next;             /* next unclaimed task */
    atomic_int busy;             /* workers still inside the current run */
    atomic_int quit;
    int n_tasks;
    pool_fn fn;
    void *ctx;
};

static void do_tasks(pool *p) {
    for (;;) {
        int t = atomic_fetch_add_explicit(&p->next, 1, memory_order_relaxed);
        if (t >= p->n_tasks) break;
        p->fn(p->ctx, t, p->n_tasks);
    }
}

static void *worker(void *arg) {
    pool *p = arg;
    int seen = 0;
    for (;;) {
        int spins = 0;
        while (atomic_load_explicit(&p->gen, memory_order_acquire) == seen &&
               !atomic_load(&p->quit)) {
            if (++spins < SPIN_ITERS) { cpu_relax(); continue; }
            pthread_mutex_lock(&p->mu);
            while (atomic_load(&p->gen) == seen && !atomic_load(&p->quit))
                pthread_cond_wait(&p->cv, &p->mu);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->quit)) return NULL;
        seen = atomic_load_explicit(&p->gen, memory_order_acquire);
        do_tasks(p);
        atomic_fetch_sub_explicit(&p->busy, 1, memory_order_release);
    }
}

pool *pool_new(int n_threads) {
    if (n_threads < 1) n_threads = 1;
    pool *p = calloc(1, sizeof *p);
    if (!p) { err_set("out of memory creating thread pool"); return NULL; }
    p->n = n_threads;
    pthread_mutex_init(&p->mu, NULL);
    pthread_cond_init(&p->cv, NULL);
    p->th = calloc((size_t)n_threads, sizeof *p->th);
    if (!p->th) { free(p); err_set("out of memory creating thread pool"); return NULL; }
    for (int i = 0; i < n_threads - 1; i++) {
        if (pthread_create(&p->th[i], NULL, worker, p) != 0) {
            p->n = i + 1; /* only i workers exist */
            pool_free(p);
            err_set("cannot start thread %d of %d", i + 1, n_threads);
            return NULL;
        }
    }
    return p;
}

void pool_free(pool *p) {
    if (!p) return;
    pthread_mutex_lock(&p->mu);
    atomic_store(&p->quit, 1);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    for (int i = 0; i < p->n - 1; i++) pthread_join(p->th[i], NULL);
    pthread_mutex_destroy(&p->mu);
    pthread_cond_destroy(&p->cv);
    free(p->th);
    free(p);
}

int pool_threads(const pool *p) { return p ? p->n : 1; }

void pool_run(pool *p, int n_tasks, pool_fn fn, void *ctx) {
    if (n_tasks <= 0) return;
    if (!p || p->n == 1 || n_tasks == 1) {
        for (int i = 0; i < n_tasks; i++) fn(ctx, i, n_tasks);
        return;
    }
    p->fn = fn;
    p->ctx = ctx;
    p->n_tasks = n_tasks;
    atomic_store_explicit(&p->next, 0, memory_order_relaxed);
    atomic_store_explicit(&p->busy, p->n - 1, memory_order_relaxed);
    pthread_mutex_lock(&p->mu);
    atomic_fetch_add_explicit(&p->gen, 1, memory_order_release);
    pthread_cond_broadcast(&p->cv);
    pthread_mutex_unlock(&p->mu);
    do_tasks(p);
    while (atomic_load_explicit(&p->busy, memory_order_acquire) > 0) cpu_relax();
}

void pool_range(long n, int i, int n_tasks, long align, long *lo, long *hi) {
    if (align < 1) align = 1;
    long units = (n + align - 1) / align;
    long a = units * i / n_tasks, b = units * (i + 1) / n_tasks;
    *lo = a * align < n ? a * align : n;
    *hi = b * align < n ? b * align : n;
}
