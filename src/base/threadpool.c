#include "base/threadpool.h"
#include "base/status.h"

#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdlib.h>
#if defined(__x86_64__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* Spins before a worker sleeps: ~50 µs, longer than the gap between the ops of one decode step. */
#define SPIN_ITERS 20000

struct threadpool {
    int n;
    pthread_t *threads;
    threadpool_fn fn;
    void *arg;
    _Atomic unsigned generation; /* bumped for every job */
    _Atomic int next;            /* the job's next unclaimed task (ith) */
    _Atomic int done;            /* the job's tasks finished */
    _Atomic int stop;
    pthread_mutex_t mu;
    pthread_cond_t cv;
};

typedef struct {
    threadpool *tp;
    int ith;
} worker_arg;

/* Runs the job's unclaimed tasks. A task is one ith of fn(arg, ith, n): whichever thread claims it
 * runs it, so a worker that is off its core (a machine with more runnable threads than cores) or
 * still waking leaves its share to the threads that are running, the caller included, instead of
 * holding the job up. fn and arg are read only after a claim, which orders them after the job's
 * setup (threadpool_run writes them before it opens the tasks). */
static void run_tasks(threadpool *tp) {
    for (int t; (t = atomic_fetch_add_explicit(&tp->next, 1, memory_order_acq_rel)) < tp->n;) {
        tp->fn(tp->arg, t, tp->n);
        atomic_fetch_add_explicit(&tp->done, 1, memory_order_acq_rel);
    }
}

static void *worker_main(void *p) {
    worker_arg wa = *(worker_arg *)p;
    free(p);
    threadpool *tp = wa.tp;
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&tp->generation, memory_order_acquire)) == seen &&
               !atomic_load(&tp->stop)) {
            if (++spins < SPIN_ITERS) {
                CPU_RELAX();
                continue;
            }
            pthread_mutex_lock(&tp->mu);
            while (atomic_load(&tp->generation) == seen && !atomic_load(&tp->stop))
                pthread_cond_wait(&tp->cv, &tp->mu);
            pthread_mutex_unlock(&tp->mu);
        }
        if (atomic_load(&tp->stop)) return NULL;
        seen = g;
        run_tasks(tp);
    }
}

brisk_status threadpool_new(int n_threads, threadpool **out) {
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    threadpool *tp = calloc(1, sizeof *tp);
    if (!tp) return bk_fail(BRISK_ERR_NOMEM, "threadpool: out of memory");
    tp->n = n_threads;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    tp->threads = calloc((size_t)n_threads, sizeof *tp->threads);
    if (!tp->threads) {
        threadpool_free(tp);
        return bk_fail(BRISK_ERR_NOMEM, "threadpool: out of memory");
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) {
            wa->tp = tp;
            wa->ith = i;
        }
        if (!wa || pthread_create(&tp->threads[i], NULL, worker_main, wa) != 0) {
            free(wa);
            tp->n = i; /* only join what started */
            threadpool_free(tp);
            return bk_fail(BRISK_ERR_NOMEM, "threadpool: cannot start thread %d", i);
        }
    }
    *out = tp;
    return BRISK_OK;
}

void threadpool_free(threadpool *tp) {
    if (!tp) return;
    pthread_mutex_lock(&tp->mu);
    atomic_store(&tp->stop, 1);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    for (int i = 1; i < tp->n; i++)
        if (tp->threads) pthread_join(tp->threads[i], NULL);
    pthread_mutex_destroy(&tp->mu);
    pthread_cond_destroy(&tp->cv);
    free(tp->threads);
    free(tp);
}

int threadpool_size(const threadpool *tp) { return tp ? tp->n : 1; }

void threadpool_run(threadpool *tp, threadpool_fn fn, void *arg) {
    if (!tp || tp->n == 1) {
        fn(arg, 0, 1);
        return;
    }
    tp->fn = fn;
    tp->arg = arg;
    atomic_store_explicit(&tp->done, 0, memory_order_relaxed);
    atomic_store_explicit(&tp->next, 1, memory_order_release); /* task 0 is the caller's */
    pthread_mutex_lock(&tp->mu);
    atomic_fetch_add_explicit(&tp->generation, 1, memory_order_acq_rel);
    pthread_cond_broadcast(&tp->cv);
    pthread_mutex_unlock(&tp->mu);
    fn(arg, 0, tp->n);
    atomic_fetch_add_explicit(&tp->done, 1, memory_order_acq_rel);
    run_tasks(tp); /* what no worker has claimed yet */
    /* The tasks other threads claimed: spin (microseconds in a decode step), then yield, so that a
     * worker that lost its core mid-task gets it back. With a fixed task a thread and a spinning
     * caller, 2 threads on 2 busy cores ran stories260K's pp2 at 22-29 tokens/s (a batch in ~80 ms)
     * in some runs, against ~10,000 in others. */
    for (int spins = 0; atomic_load_explicit(&tp->done, memory_order_acquire) < tp->n;)
        if (++spins < SPIN_ITERS) CPU_RELAX();
        else sched_yield();
}

void threadpool_range(long n, int ith, int nth, long *lo, long *hi) {
    long per = n / nth, rem = n % nth;
    *lo = ith * per + (ith < rem ? ith : rem);
    *hi = *lo + per + (ith < rem ? 1 : 0);
}
