/* test_threadpool.c — base/threadpool: every ith of a job runs exactly once, the caller's is 0,
 * no two threads run one ith at once, and a job returns only when all are done; with more threads
 * than cores (a worker often off its core: the caller then claims its share) and across thousands
 * of back-to-back jobs, as a decode step issues them. */
#include <sched.h>
#include <stdatomic.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

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

/* A task that counts: a placed pool still runs every job. */
static void count_task(void *arg, int ith, int nth) {
    (void)ith, (void)nth;
    atomic_fetch_add((atomic_int *)arg, 1);
}

static int mask_count(const uint64_t *m) {
    int n = 0;
    for (int w = 0; w < BRISK_CPU_MASK_WORDS; w++) n += __builtin_popcountll(m[w]);
    return n;
}

/* llama.cpp's --cpu-mask / --cpu-strict / --poll: each thread's affinity is the mask (every thread
 * on every CPU of it), or with strict the mask's CPUs one each, round robin; the caller (ith 0) takes
 * thread 0's when it runs a job; a mask of no usable CPU, a poll or prio out of range are refused. */
static void test_placement(void) {
    cpu_set_t allowed;
    CHECK(sched_getaffinity(0, sizeof allowed, &allowed) == 0);
    int first = -1, second = -1;
    for (int c = 0; c < CPU_SETSIZE && second < 0; c++)
        if (CPU_ISSET(c, &allowed)) first < 0 ? (void)(first = c) : (void)(second = c);
    threadpool_params p = {.poll = 50};
    p.mask[first / 64] |= (uint64_t)1 << (first % 64);
    threadpool *tp = NULL;
    CHECK_OK(threadpool_new_ex(3, &p, &tp));
    atomic_int n = 0;
    for (int j = 0; j < 100; j++) threadpool_run(tp, count_task, &n);
    CHECK(atomic_load(&n) == 300);
    for (int t = 0; t < 3; t++) {
        uint64_t m[BRISK_CPU_MASK_WORDS];
        threadpool_thread_mask(tp, t, m);
        CHECK(mask_count(m) == 1 && (m[first / 64] >> (first % 64) & 1));
    }
    threadpool_free(tp);
    if (second >= 0) { /* strict over two CPUs: threads 0, 1, 2 on first, second, first */
        p.mask[second / 64] |= (uint64_t)1 << (second % 64);
        p.strict = true;
        p.poll = 0; /* (no polling: every wait sleeps) */
        CHECK_OK(threadpool_new_ex(3, &p, &tp));
        atomic_store(&n, 0);
        for (int j = 0; j < 100; j++) threadpool_run(tp, count_task, &n);
        CHECK(atomic_load(&n) == 300);
        const int want[3] = {first, second, first};
        for (int t = 0; t < 3; t++) {
            uint64_t m[BRISK_CPU_MASK_WORDS];
            threadpool_thread_mask(tp, t, m);
            CHECK(mask_count(m) == 1 && (m[want[t] / 64] >> (want[t] % 64) & 1));
        }
        threadpool_free(tp);
    }
    /* the caller's own affinity back as it was for the other cases */
    CHECK(sched_setaffinity(0, sizeof allowed, &allowed) == 0);
    /* refusals: a mask of CPUs this process may not use, out-of-range values */
    threadpool_params bad = {.poll = 50};
    int off = -1;
    for (int c = BRISK_CPU_MASK_WORDS * 64 - 1; c >= 0 && off < 0; c--)
        if (c >= CPU_SETSIZE || !CPU_ISSET(c, &allowed)) off = c;
    if (off >= 0) {
        bad.mask[off / 64] = (uint64_t)1 << (off % 64);
        tp = NULL;
        CHECK(threadpool_new_ex(2, &bad, &tp) == BRISK_ERR_INVALID_ARG && !tp);
        CHECK(strstr(brisk_last_error(), "names no CPU") != NULL);
    }
    /* --numa: every thread on its node's CPUs (distribute: node j % nodes; isolate: the caller's),
     * numactl on the process's; this machine's nodes from sysfs, or (none listed) the process's CPUs */
    for (int numa = BRISK_NUMA_DISTRIBUTE; numa <= BRISK_NUMA_NUMACTL; numa++) {
        threadpool_params pn = {.poll = 50, .numa = numa};
        tp = NULL;
        CHECK_OK(threadpool_new_ex(3, &pn, &tp));
        if (!tp) continue;
        atomic_store(&n, 0);
        threadpool_run(tp, count_task, &n);
        CHECK(atomic_load(&n) == 3);
        for (int t = 1; t < 3; t++) { /* (the workers: the caller is ith 0 too, checked above) */
            uint64_t m[BRISK_CPU_MASK_WORDS];
            threadpool_thread_mask(tp, t, m);
            int in = 0;
            for (int c = 0; c < BRISK_CPU_MASK_WORDS * 64 && c < CPU_SETSIZE; c++)
                if (m[c / 64] >> (c % 64) & 1) in += CPU_ISSET(c, &allowed) ? 1 : -1000;
            CHECK(in > 0); /* some CPUs, all of them the process's */
        }
        threadpool_free(tp);
        CHECK(sched_setaffinity(0, sizeof allowed, &allowed) == 0);
    }
    threadpool_params both = {.poll = 50, .numa = BRISK_NUMA_ISOLATE, .strict = true};
    CHECK(threadpool_new_ex(2, &both, &tp) == BRISK_ERR_INVALID_ARG);
    threadpool_params pl = {.poll = 101};
    CHECK(threadpool_new_ex(2, &pl, &tp) == BRISK_ERR_INVALID_ARG);
    pl.poll = 50;
    pl.prio = 4;
    CHECK(threadpool_new_ex(2, &pl, &tp) == BRISK_ERR_INVALID_ARG);
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"each_once", test_each_once},
        {"range", test_range},
        {"placement", test_placement},
    };
    return test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
