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

brisk_status threadpool_new(int n_threads, threadpool **out);
void threadpool_free(threadpool *tp);
int threadpool_size(const threadpool *tp);
void threadpool_run(threadpool *tp, threadpool_fn fn, void *arg);
/* Splits [0, n) into nth near-equal ranges: this thread's is [*lo, *hi). */
void threadpool_range(long n, int ith, int nth, long *lo, long *hi);
#endif
