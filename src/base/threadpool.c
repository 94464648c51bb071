#include "base/threadpool.h"
#include "base/status.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#if defined(__x86_64__)
#include <immintrin.h>
#define CPU_RELAX() _mm_pause()
#else
#define CPU_RELAX() ((void)0)
#endif

/* Spins before a worker sleeps at poll 50 (the default): ~50 µs, longer than the gap between the ops
 * of one decode step; poll p spins SPIN_ITERS * p / 50. */
#define SPIN_ITERS 20000
#define POLL_DEFAULT 50

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
    int spin_iters;              /* a worker's polls before it sleeps (the placement's poll) */
    int prio;                    /* brisk_cpu_placement.prio */
    cpu_set_t *sets;             /* n: thread ith's CPUs, or NULL: no affinity */
    pthread_t caller;            /* the thread last placed as ith 0 (threadpool_run) */
    bool caller_placed;
};

typedef struct {
    threadpool *tp;
    int ith;
} worker_arg;

/* The calling thread's scheduling class for prio (ggml's choice on Linux); a failure (SCHED_FIFO
 * wants CAP_SYS_NICE) is warned about once a process, and the thread runs on as it was. */
static void apply_prio(int prio) {
    if (prio == 0) return; /* normal: inherited */
    static const int fifo[4] = {0, 40, 80, 90};
    struct sched_param sp = {.sched_priority = prio < 0 ? 0 : fifo[prio]};
    int err = pthread_setschedparam(pthread_self(), prio < 0 ? SCHED_BATCH : SCHED_FIFO, &sp);
    static atomic_int warned;
    if (err && !atomic_exchange(&warned, 1))
        fprintf(stderr, "brisk: --prio %d: cannot set the threads' priority (%s); they run at the one they had\n",
                prio, strerror(err));
}

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
    apply_prio(tp->prio); /* (its affinity was set before it started: threadpool_new_ex) */
    unsigned seen = 0;
    for (;;) {
        unsigned g;
        int spins = 0;
        while ((g = atomic_load_explicit(&tp->generation, memory_order_acquire)) == seen &&
               !atomic_load(&tp->stop)) {
            if (++spins < tp->spin_iters) {
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

/* Each thread's CPU set from the placement: the mask's CPUs for every thread, or (strict) thread ith
 * alone on the ith CPU of the mask, round robin (ggml_thread_cpumask_next). An empty mask: none, or
 * (strict) the CPUs this process may run on. With numa, the nodes' CPUs instead (place_numa). */
static cpu_set_t proc_allowed; /* the CPUs the process could use before any pool placed a thread */
static void read_allowed(void) {
    if (sched_getaffinity(0, sizeof proc_allowed, &proc_allowed) != 0) CPU_ZERO(&proc_allowed);
}

/* "0-3,8,10-11" (sysfs's cpulist) into set; false if it does not parse. */
static bool parse_cpulist(const char *s, cpu_set_t *set) {
    CPU_ZERO(set);
    while (*s && *s != '\n') {
        char *e;
        long lo = strtol(s, &e, 10), hi = lo;
        if (e == s || lo < 0) return false;
        if (*e == '-') {
            s = e + 1;
            hi = strtol(s, &e, 10);
            if (e == s || hi < lo) return false;
        }
        for (long c = lo; c <= hi && c < CPU_SETSIZE; c++) CPU_SET((int)c, set);
        s = *e == ',' ? e + 1 : e;
    }
    return true;
}

/* The CPUs of NUMA node n (sysfs), false past the last node or without the information. */
static bool numa_node_cpus(int n, cpu_set_t *set) {
    char path[96], line[4096];
    snprintf(path, sizeof path, "/sys/devices/system/node/node%d/cpulist", n);
    FILE *f = fopen(path, "r");
    if (!f) return false;
    bool ok = fgets(line, sizeof line, f) && parse_cpulist(line, set);
    fclose(f);
    return ok;
}

/* --numa (ggml's strategies): thread ith's set from the nodes' CPUs, within the process's. */
static brisk_status place_numa(threadpool *tp, int numa, const cpu_set_t *allowed) {
    if (!(tp->sets = calloc((size_t)tp->n, sizeof *tp->sets))) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    cpu_set_t node[64];
    int n_nodes = 0;
    while (n_nodes < 64 && numa_node_cpus(n_nodes, &node[n_nodes])) n_nodes++;
    int here = 0; /* isolate: the node of the CPU this thread runs on now */
    const int cpu = sched_getcpu();
    for (int i = 0; i < n_nodes && cpu >= 0; i++)
        if (CPU_ISSET(cpu, &node[i])) here = i;
    for (int t = 0; t < tp->n; t++) {
        tp->sets[t] = *allowed;
        if (numa == BRISK_NUMA_NUMACTL || n_nodes == 0) continue;
        const int nd = numa == BRISK_NUMA_DISTRIBUTE ? t % n_nodes : here;
        cpu_set_t s;
        CPU_AND(&s, &node[nd], allowed);
        if (CPU_COUNT(&s)) tp->sets[t] = s; /* (a node the process may not use: anywhere it may) */
    }
    return BRISK_OK;
}

static brisk_status place_threads(threadpool *tp, const threadpool_params *p) {
    /* (not the calling thread's set now: an earlier pool may have placed it on one CPU) */
    static pthread_once_t once = PTHREAD_ONCE_INIT;
    pthread_once(&once, read_allowed);
    cpu_set_t allowed = proc_allowed, want;
    if (p->numa) return place_numa(tp, p->numa, &allowed);
    CPU_ZERO(&want);
    bool any = false;
    for (int i = 0; i < BRISK_CPU_MASK_WORDS * 64 && i < CPU_SETSIZE; i++)
        if (p->mask[i / 64] >> (i % 64) & 1) {
            CPU_SET(i, &want);
            any = true;
        }
    if (!any && !p->strict) return BRISK_OK;
    if (!any) want = allowed;
    cpu_set_t usable;
    CPU_AND(&usable, &want, &allowed);
    if (CPU_COUNT(&usable) == 0)
        return bk_fail(BRISK_ERR_INVALID_ARG, "the CPU mask names no CPU this process may run on (it may use %d: "
                                              "see taskset -p, or nproc)", CPU_COUNT(&allowed));
    if (!(tp->sets = calloc((size_t)tp->n, sizeof *tp->sets))) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    for (int t = 0, cpu = -1; t < tp->n; t++) {
        CPU_ZERO(&tp->sets[t]);
        if (!p->strict) {
            tp->sets[t] = usable;
            continue;
        }
        do cpu = (cpu + 1) % CPU_SETSIZE;
        while (!CPU_ISSET(cpu, &usable));
        CPU_SET(cpu, &tp->sets[t]);
    }
    return BRISK_OK;
}

brisk_status threadpool_new(int n_threads, threadpool **out) { return threadpool_new_ex(n_threads, NULL, out); }

brisk_status threadpool_new_ex(int n_threads, const threadpool_params *p, threadpool **out) {
    *out = NULL;
    if (n_threads < 1) n_threads = 1;
    if (p && (p->poll < 0 || p->poll > 100))
        return bk_fail(BRISK_ERR_INVALID_ARG, "poll %d: the polling level is 0 to 100", p->poll);
    if (p && (p->numa < BRISK_NUMA_NONE || p->numa > BRISK_NUMA_NUMACTL))
        return bk_fail(BRISK_ERR_INVALID_ARG, "numa %d: none (0), distribute (1), isolate (2) or numactl (3)", p->numa);
    bool masked = false;
    for (int w = 0; p && w < BRISK_CPU_MASK_WORDS; w++) masked |= p->mask[w] != 0;
    if (p && p->numa && (masked || p->strict))
        return bk_fail(BRISK_ERR_INVALID_ARG, "--numa places the threads by node: give it or a CPU mask / --cpu-strict, "
                                              "not both");
    if (p && (p->prio < -1 || p->prio > 3))
        return bk_fail(BRISK_ERR_INVALID_ARG, "prio %d: -1 (low), 0 (normal), 1 (medium), 2 (high) or 3 (realtime)",
                       p->prio);
    threadpool *tp = calloc(1, sizeof *tp);
    if (!tp) return bk_fail(BRISK_ERR_NOMEM, "threadpool: out of memory");
    tp->n = n_threads;
    tp->spin_iters = SPIN_ITERS / POLL_DEFAULT * (p ? p->poll : POLL_DEFAULT);
    tp->prio = p ? p->prio : 0;
    pthread_mutex_init(&tp->mu, NULL);
    pthread_cond_init(&tp->cv, NULL);
    tp->threads = calloc((size_t)n_threads, sizeof *tp->threads);
    brisk_status s = tp->threads ? BRISK_OK : bk_fail(BRISK_ERR_NOMEM, "threadpool: out of memory");
    if (s == BRISK_OK && p) s = place_threads(tp, p);
    if (s != BRISK_OK) {
        tp->n = 1; /* no worker started */
        threadpool_free(tp);
        return s;
    }
    for (int i = 1; i < n_threads; i++) {
        worker_arg *wa = malloc(sizeof *wa);
        if (wa) {
            wa->tp = tp;
            wa->ith = i;
        }
        pthread_attr_t at;
        pthread_attr_init(&at);
        int err = wa ? 0 : ENOMEM;
        if (!err && tp->sets) err = pthread_attr_setaffinity_np(&at, sizeof tp->sets[i], &tp->sets[i]);
        if (!err) err = pthread_create(&tp->threads[i], &at, worker_main, wa);
        pthread_attr_destroy(&at);
        if (err) {
            free(wa);
            tp->n = i; /* only join what started */
            threadpool_free(tp);
            return bk_fail(err == ENOMEM || err == EAGAIN ? BRISK_ERR_NOMEM : BRISK_ERR_INVALID_ARG,
                           "threadpool: cannot start thread %d: %s", i, strerror(err));
        }
    }
    *out = tp;
    return BRISK_OK;
}

void threadpool_thread_mask(const threadpool *tp, int ith, uint64_t mask[BRISK_CPU_MASK_WORDS]) {
    cpu_set_t set;
    memset(mask, 0, BRISK_CPU_MASK_WORDS * sizeof *mask);
    int err = ith == 0 ? pthread_getaffinity_np(pthread_self(), sizeof set, &set)
                       : pthread_getaffinity_np(tp->threads[ith], sizeof set, &set);
    if (err) return;
    for (int i = 0; i < BRISK_CPU_MASK_WORDS * 64 && i < CPU_SETSIZE; i++)
        if (CPU_ISSET(i, &set)) mask[i / 64] |= (uint64_t)1 << (i % 64);
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
    free(tp->sets);
    free(tp);
}

int threadpool_size(const threadpool *tp) { return tp ? tp->n : 1; }

/* The calling thread takes thread 0's placement the first time it runs a job (a later caller too). */
static void place_caller(threadpool *tp) {
    if ((!tp->sets && !tp->prio) || (tp->caller_placed && pthread_equal(tp->caller, pthread_self()))) return;
    if (tp->sets) pthread_setaffinity_np(pthread_self(), sizeof tp->sets[0], &tp->sets[0]);
    apply_prio(tp->prio);
    tp->caller = pthread_self();
    tp->caller_placed = true;
}

void threadpool_run(threadpool *tp, threadpool_fn fn, void *arg) {
    if (tp) place_caller(tp);
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
