/* threadpool.h — a fixed pool of worker threads for data-parallel loops.
 * threadpool_run() calls fn(arg, ith, nth) once for each ith in [0, nth)
 * and returns when all are done: the caller runs ith 0, and each other ith
 * runs on whichever thread claims it first (a worker, or the caller once its
 * own is done), so a worker off its core does not hold a job up. An ith runs
 * on one thread at a time (per-ith scratch is safe); fn must not wait for
 * another ith of the same job. Workers spin briefly between jobs (decode
 * issues hundreds of short jobs per token) and then sleep. */
#ifndef BK_THREADPOOL_H
#define BK_THREADPOOL_H
#include "brisk.h"

typedef struct threadpool threadpool;
typedef void (*threadpool_fn)(void *arg, int ith, int nth);

/* Where the threads run (brisk.h's brisk_cpu_placement: mask, strict, prio, poll). The caller of
 * threadpool_run is ith 0: it is placed as thread 0 when it first runs a job (as ggml places its
 * main thread). */
typedef struct brisk_cpu_placement threadpool_params;

brisk_status threadpool_new(int n_threads, threadpool **out);
/* p NULL: threadpool_new's (no placement, poll 50). BRISK_ERR_INVALID_ARG with a message for a
 * placement that names no CPU this process may run on, or values out of range. */
brisk_status threadpool_new_ex(int n_threads, const threadpool_params *p, threadpool **out);
/* CPUs allowed to thread ith (its affinity; all of this process's when it has none) as a
 * brisk_cpu_placement mask; for tests. */
void threadpool_thread_mask(const threadpool *tp, int ith, uint64_t mask[BRISK_CPU_MASK_WORDS]);
void threadpool_free(threadpool *tp);
int threadpool_size(const threadpool *tp);
void threadpool_run(threadpool *tp, threadpool_fn fn, void *arg);
/* Splits [0, n) into nth near-equal ranges: this thread's is [*lo, *hi). */
void threadpool_range(long n, int ith, int nth, long *lo, long *hi);
#endif
