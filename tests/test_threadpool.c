/* test_threadpool.c — base/threadpool: every ith of a job runs exactly once, the caller's is 0,
 * no two threads run one ith at once, and a job returns only when all are done; with more threads
 * than cores (a worker often off its core: the caller then claims its share) and across thousands
 * of back-to-back jobs, as a decode step issues them. */
#include <stdatomic.h>
#include <pthread.h>
#include <stdlib.h>

#include "base/threadpool.h"
#include "test.h"

enum { MAXT = 16 };

typedef struct job {
    _Atomic int hits[MAXT];   /* runs of each ith in this job */
    _Atomic int inside[MAXT]; /* threads inside each ith right now */
    _Atomic int overlap;      /* an ith entered twice at once */
    pthread_t caller;
    _Atomic int caller_ran_0, zero_elsewhere;
    long work;                /* a little arithmetic, so tasks overlap in time */
    volatile double sink;
} job;

static void task(void *arg, int ith, int nth) {
    job *j = arg;
    (void)nth;
    if (atomic_fetch_add(&j->inside[ith], 1) != 0) atomic_store(&j->overlap, 1);
    if (ith == 0) {
        if (pthread_equal(pthread_self(), j->caller)) atomic_store(&j->caller_ran_0, 1);
        else atomic_store(&j->zero_elsewhere, 1);
    }
    double x = ith;
    for (long i = 0; i < j->work; i++) x = x * 1.0000001 + 1e-9;
    j->sink = x;
    atomic_fetch_add(&j->hits[ith], 1);
    atomic_fetch_sub(&j->inside[ith], 1);
}

static void run_many(int n_threads, int n_jobs, long work) {
    threadpool *tp = NULL;
    CHECK_OK(threadpool_new(n_threads, &tp));
    if (!tp) return;
    CHECK(threadpool_size(tp) == n_threads);
    int bad = 0;
    job *j = calloc(1, sizeof *j);
    for (int r = 0; r < n_jobs && j; r++) {
        for (int i = 0; i < MAXT; i++) atomic_store(&j->hits[i], 0);
        j->caller = pthread_self();
        j->work = work;
        atomic_store(&j->caller_ran_0, 0);
        threadpool_run(tp, task, j);
        for (int i = 0; i < n_threads; i++) bad += atomic_load(&j->hits[i]) != 1; /* all done on return */
        for (int i = n_threads; i < MAXT; i++) bad += atomic_load(&j->hits[i]) != 0;
        bad += !atomic_load(&j->caller_ran_0);
    }
    printf("  %d threads, %d jobs: %d bad jobs, overlap %d, ith 0 off the caller %d\n", n_threads, n_jobs, bad,
           j ? atomic_load(&j->overlap) : -1, j ? atomic_load(&j->zero_elsewhere) : -1);
    CHECK(j && bad == 0 && !atomic_load(&j->overlap) && !atomic_load(&j->zero_elsewhere));
    free(j);
    threadpool_free(tp);
}

static void test_each_once(void) {
    run_many(1, 100, 10);
    run_many(2, 20000, 0);   /* back to back, as decode's ops */
    run_many(4, 5000, 200);
    run_many(MAXT, 2000, 50); /* far more threads than this machine's cores */
}

static void test_range(void) {
    for (long n = 0; n < 50; n++)
        for (int nth = 1; nth <= 7; nth++) {
            long next = 0;
            for (int ith = 0; ith < nth; ith++) {
                long lo, hi;
                threadpool_range(n, ith, nth, &lo, &hi);
                CHECK(lo == next && hi >= lo && hi - lo <= n / nth + 1);
                next = hi;
            }
            CHECK(next == n);
        }
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"each_once", test_each_once},
        {"range", test_range},
    };
    return test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
