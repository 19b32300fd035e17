/* base/pool.c: a spin-then-sleep thread pool with dynamic task claiming.
 * Invariant: a task index is claimed exactly once per run, by whichever thread gets to
 * it first (the caller included); a run is over when all its tasks are done, so the
 * caller never waits for a worker that was descheduled before claiming anything. */
#include "base/pool.h"

#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>

#include "base/err.h"

#if defined(__x86_64__) || defined(__i386__)
#include <immintrin.h>
#define cpu_relax() _mm_pause()
#else
#define cpu_relax() ((void)0)
#endif

/* Pauses a worker spins on before sleeping: a few milliseconds, longer than the gap
 * between two matmuls of a decode step, so workers sleep only when the engine idles. */
#define SPIN_ITERS 200000

/* One run's parameters. Runs alternate between two slots (by generation parity), so a
 * late worker reading the slot of a finished run never sees the next run's writes
 * half-done: a slot is rewritten only two generations later, and a claim on it can
 * succeed only while its own generation is current. */
typedef struct {
    pool_fn fn;
    void *ctx;
    atomic_int n_tasks;            /* atomic: a late worker may read it while it is rewritten */
    _Alignas(64) atomic_int done;  /* tasks finished */
} pool_job;

struct pool {
    int n;                         /* threads including the caller */
    pthread_t *th;                 /* [n - 1] */
    pthread_mutex_t mu;
    pthread_cond_t cv;
    _Alignas(64) _Atomic uint64_t state; /* generation << 32 | next unclaimed task */
    _Alignas(64) atomic_int sleepers;    /* workers in (or entering) cond_wait */
    atomic_int quit;
    pool_job job[2];               /* [generation & 1] */
};

/* Claims and runs tasks of generation gen until none is left (or gen is over). */
static void do_tasks(pool *p, uint32_t gen) {
    pool_job *j = &p->job[gen & 1];
    uint64_t s = atomic_load_explicit(&p->state, memory_order_acquire);
    for (;;) {
        if ((uint32_t)(s >> 32) != gen) return;
        int t = (int)(uint32_t)s, n = atomic_load_explicit(&j->n_tasks, memory_order_relaxed);
        if (t >= n) return;
        if (!atomic_compare_exchange_weak_explicit(&p->state, &s, s + 1, memory_order_acq_rel, memory_order_acquire))
            continue; /* s was reloaded */
        j->fn(j->ctx, t, n);
        atomic_fetch_add_explicit(&j->done, 1, memory_order_release);
        s = atomic_load_explicit(&p->state, memory_order_acquire);
    }
}

static _Thread_local int thread_index; /* 0 unless this thread is a pool worker */
int pool_thread_index(void) { return thread_index; }

typedef struct {
    pool *p;
    int index;
} worker_arg;

static uint32_t gen_of(pool *p) { return (uint32_t)(atomic_load_explicit(&p->state, memory_order_acquire) >> 32); }

static void *worker(void *arg) {
    pool *p = ((worker_arg *)arg)->p;
    thread_index = ((worker_arg *)arg)->index;
    free(arg);
    uint32_t seen = gen_of(p);
    for (;;) {
        int spins = 0;
        while (gen_of(p) == seen && !atomic_load_explicit(&p->quit, memory_order_relaxed)) {
            if (++spins < SPIN_ITERS) { cpu_relax(); continue; }
            /* announce the sleep before re-checking, so pool_run either sees a sleeper
             * (and signals under the mutex) or we see its new generation */
            pthread_mutex_lock(&p->mu);
            atomic_fetch_add(&p->sleepers, 1);
            while (gen_of(p) == seen && !atomic_load(&p->quit)) pthread_cond_wait(&p->cv, &p->mu);
            atomic_fetch_sub(&p->sleepers, 1);
            pthread_mutex_unlock(&p->mu);
        }
        if (atomic_load(&p->quit)) return NULL;
        seen = gen_of(p);
        do_tasks(p, seen);
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
        worker_arg *a = malloc(sizeof *a);
        if (a) { a->p = p; a->index = i + 1; }
        if (!a || pthread_create(&p->th[i], NULL, worker, a) != 0) {
            free(a);
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
    uint32_t gen = gen_of(p) + 1;
    pool_job *j = &p->job[gen & 1];
    j->fn = fn;
    j->ctx = ctx;
    atomic_store_explicit(&j->n_tasks, n_tasks, memory_order_relaxed);
    atomic_store_explicit(&j->done, 0, memory_order_relaxed);
    /* publish: the job slot's writes happen before the new generation is seen */
    atomic_store_explicit(&p->state, (uint64_t)gen << 32, memory_order_seq_cst);
    if (atomic_load_explicit(&p->sleepers, memory_order_seq_cst) > 0) {
        pthread_mutex_lock(&p->mu);
        pthread_cond_broadcast(&p->cv);
        pthread_mutex_unlock(&p->mu);
    }
    do_tasks(p, gen);
    while (atomic_load_explicit(&j->done, memory_order_acquire) < n_tasks) cpu_relax();
}

void pool_range(long n, int i, int n_tasks, long align, long *lo, long *hi) {
    if (align < 1) align = 1;
    long units = (n + align - 1) / align;
    long a = units * i / n_tasks, b = units * (i + 1) / n_tasks;
    *lo = a * align < n ? a * align : n;
    *hi = b * align < n ? b * align : n;
}
