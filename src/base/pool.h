/* base/pool.h: the one thread pool. pool_run hands task indices 0..n_tasks-1 to the
 * workers and the calling thread (whoever is free claims the next one), and returns
 * when all are done. Workers spin between runs (decode issues hundreds of small runs
 * per token), then sleep. Which thread runs a task is not deterministic: a task's
 * result must not depend on it (use pool_thread_index only to pick scratch). */
#ifndef CELER_POOL_H
#define CELER_POOL_H

typedef struct pool pool;
typedef void (*pool_fn)(void *ctx, int task, int n_tasks);

/* n_threads >= 1 counts the caller; returns NULL with an error on failure. */
pool *pool_new(int n_threads);
void pool_free(pool *p);
int pool_threads(const pool *p);
/* Runs fn(ctx, i, n_tasks) for every i in [0, n_tasks). Not reentrant. */
void pool_run(pool *p, int n_tasks, pool_fn fn, void *ctx);
/* This thread's index in its pool: 0 for a caller of pool_run, 1..n-1 for the
 * workers; indexes per-thread scratch of [pool_threads] entries. */
int pool_thread_index(void);
/* Splits [0, n) into n_tasks nearly equal ranges, each a multiple of `align`
 * (except the last): the range of task i. */
void pool_range(long n, int i, int n_tasks, long align, long *lo, long *hi);
#endif
