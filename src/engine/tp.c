/* tp.c — see tp.h. */
#include "engine/tp.h"

#include <errno.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/types.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "backend/cuda/cuda_backend.h"
#include "base/status.h"
#include "model/model.h"

enum { TP_LOCAL = 0, TP_ROOT, TP_WORKER };

struct tp_link {
    int role;           /* TP_LOCAL, TP_ROOT or TP_WORKER */
    int rank, size, device;
    int *fd;            /* (size) root: the socket of rank r (fd[0] unused); worker: fd[0] to rank 0 */
    pid_t *pid;         /* (size) root: the workers it started (0: started by a launcher) */
    unsigned char id[128]; /* the NCCL id of the context being made */
    tp_attach_fn attach;   /* TP_LOCAL: the test's hook */
    void *user;
    struct tp_ops *ops;    /* CPU backends given the socket all_reduce (a list, freed with the link) */
    float *rbuf;           /* (rcap) rank 0: one worker's partial sums */
    size_t rcap;
    bool broken;           /* a socket all_reduce failed: the next mirrored call reports it */
};

/* A CPU backend's op table with the socket all_reduce, and the link it runs over (the backend's
 * ops pointer points at `ops`, the first member, so the op finds its link without a global). */
typedef struct tp_ops {
    bk_backend_ops ops;
    tp_link *t;
    struct tp_ops *next;
} tp_ops;

typedef struct tp_msg {
    int32_t op, a[3];
    uint64_t bytes;     /* payload that follows */
} tp_msg;

static bool send_all(int fd, const void *p, size_t n) {
    const char *c = p;
    while (n) {
        ssize_t w = send(fd, c, n, MSG_NOSIGNAL);
        if (w < 0 && errno == EINTR) continue;
        if (w <= 0) return false;
        c += w;
        n -= (size_t)w;
    }
    return true;
}

static bool recv_all(int fd, void *p, size_t n) {
    char *c = p;
    while (n) {
        ssize_t r = recv(fd, c, n, 0);
        if (r < 0 && errno == EINTR) continue;
        if (r <= 0) return false;
        c += r;
        n -= (size_t)r;
    }
    return true;
}

static brisk_status link_alloc(int role, int rank, int size, tp_link **out) {
    tp_link *t = calloc(1, sizeof *t);
    if (t) {
        t->fd = malloc((size_t)size * sizeof *t->fd);
        t->pid = calloc((size_t)size, sizeof *t->pid);
    }
    if (!t || !t->fd || !t->pid) {
        if (t) free(t->fd), free(t->pid);
        free(t);
        return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < size; i++) t->fd[i] = -1;
    t->role = role;
    t->rank = rank;
    t->size = size;
    *out = t;
    return BRISK_OK;
}

void tp_link_free(tp_link *t) {
    if (!t) return;
    tp_msg q = {.op = TP_QUIT};
    for (int r = 0; r < t->size; r++) {
        if (t->fd[r] < 0) continue;
        if (t->role == TP_ROOT) send_all(t->fd[r], &q, sizeof q);
        close(t->fd[r]);
    }
    /* A worker that does not end within 10 s is stuck (in a collective rank 0 never joined, after
     * an error here): it is ended, by its pid. */
    for (int r = 1; t->role == TP_ROOT && r < t->size; r++) {
        if (t->pid[r] <= 0) continue;
        pid_t w;
        for (int i = 0; (w = waitpid(t->pid[r], NULL, WNOHANG)) == 0 && i < 200; i++)
            nanosleep(&(struct timespec){0, 50000000}, NULL);
        if (w == 0) {
            kill(t->pid[r], SIGTERM);
            waitpid(t->pid[r], NULL, 0);
        }
    }
    while (t->ops) {
        tp_ops *o = t->ops;
        t->ops = o->next;
        free(o);
    }
    free(t->rbuf);
    free(t->fd);
    free(t->pid);
    free(t);
}

brisk_status tp_link_local(tp_attach_fn attach, void *user, tp_link **out) {
    BK_TRY(link_alloc(TP_LOCAL, 0, 1, out));
    (*out)->attach = attach;
    (*out)->user = user;
    return BRISK_OK;
}

/* The first of the environment variables names that is set, as an int; -1 when none. */
static int env_int(const char *const *names) {
    for (; *names; names++) {
        const char *v = getenv(*names);
        if (v && *v) return atoi(v);
    }
    return -1;
}
static const char *const RANK_VARS[] = {"BRISK_TP_RANK", "OMPI_COMM_WORLD_RANK", "PMI_RANK", NULL};
static const char *const SIZE_VARS[] = {"BRISK_TP_SIZE", "OMPI_COMM_WORLD_SIZE", "PMI_SIZE", NULL};
static const char *const DEVICE_VARS[] = {"BRISK_TP_DEVICE", "OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                          "LOCAL_RANK", NULL};

bool tp_env_is_worker(void) {
    return (getenv("BRISK_TP_FD") || getenv("BRISK_TP_ADDR")) && env_int(RANK_VARS) > 0;
}

/* host:port of BRISK_TP_ADDR. */
static brisk_status parse_addr(char *host, size_t cap, char *port, size_t pcap) {
    const char *a = getenv("BRISK_TP_ADDR"), *colon = a ? strrchr(a, ':') : NULL;
    if (!colon || colon == a || !colon[1] || (size_t)(colon - a) >= cap || strlen(colon + 1) >= pcap)
        return bk_fail(BRISK_ERR_INVALID_ARG, "BRISK_TP_ADDR: expected host:port, got '%s'", a ? a : "");
    memcpy(host, a, (size_t)(colon - a));
    host[colon - a] = 0;
    strcpy(port, colon + 1);
    return BRISK_OK;
}

/* Rank 0 across hosts: accepts the other ranks on BRISK_TP_ADDR's port. */
static brisk_status root_listen(tp_link *t) {
    char host[256], port[16];
    BK_TRY(parse_addr(host, sizeof host, port, sizeof port));
    int ls = socket(AF_INET6, SOCK_STREAM, 0), one = 1, zero = 0;
    if (ls < 0) return bk_fail(BRISK_ERR_IO, "tensor parallelism: socket: %s", strerror(errno));
    setsockopt(ls, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
    setsockopt(ls, IPPROTO_IPV6, IPV6_V6ONLY, &zero, sizeof zero);
    struct sockaddr_in6 sa = {.sin6_family = AF_INET6, .sin6_port = htons((uint16_t)atoi(port)),
                              .sin6_addr = IN6ADDR_ANY_INIT};
    if (bind(ls, (struct sockaddr *)&sa, sizeof sa) || listen(ls, t->size)) {
        brisk_status s = bk_fail(BRISK_ERR_IO, "tensor parallelism: listening on port %s: %s", port, strerror(errno));
        close(ls);
        return s;
    }
    for (int n = 1; n < t->size; n++) {
        int c = accept(ls, NULL, NULL);
        int32_t r = -1;
        if (c < 0 || !recv_all(c, &r, sizeof r) || r <= 0 || r >= t->size || t->fd[r] >= 0) {
            if (c >= 0) close(c);
            close(ls);
            return bk_fail(BRISK_ERR_IO, "tensor parallelism: a rank connected with a bad rank (%d)", (int)r);
        }
        setsockopt(c, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
        t->fd[r] = c;
    }
    close(ls);
    return BRISK_OK;
}

/* A worker across hosts: connects to rank 0 (retrying for a minute: it may start later). */
static brisk_status worker_connect(tp_link *t) {
    char host[256], port[16];
    BK_TRY(parse_addr(host, sizeof host, port, sizeof port));
    struct addrinfo hints = {.ai_family = AF_UNSPEC, .ai_socktype = SOCK_STREAM}, *ai = NULL;
    int e = getaddrinfo(host, port, &hints, &ai), one = 1;
    if (e) return bk_fail(BRISK_ERR_IO, "tensor parallelism: %s: %s", host, gai_strerror(e));
    int fd = -1;
    for (int tries = 0; fd < 0 && tries < 600; tries++) {
        for (struct addrinfo *p = ai; p && fd < 0; p = p->ai_next) {
            fd = socket(p->ai_family, p->ai_socktype, p->ai_protocol);
            if (fd >= 0 && connect(fd, p->ai_addr, p->ai_addrlen)) {
                close(fd);
                fd = -1;
            }
        }
        if (fd < 0) nanosleep(&(struct timespec){0, 100000000}, NULL);
    }
    freeaddrinfo(ai);
    if (fd < 0) return bk_fail(BRISK_ERR_IO, "tensor parallelism: cannot reach rank 0 at %s:%s", host, port);
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof one);
    int32_t r = t->rank;
    if (!send_all(fd, &r, sizeof r)) {
        close(fd);
        return bk_fail(BRISK_ERR_IO, "tensor parallelism: lost rank 0 at %s:%s", host, port);
    }
    t->fd[0] = fd;
    return BRISK_OK;
}

/* Rank 0 on one host: a fork + exec of this binary per worker, its socket in BRISK_TP_FD. */
static brisk_status spawn_workers(tp_link *t, int device0) {
    for (int r = 1; r < t->size; r++) {
        int sv[2];
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, sv))
            return bk_fail(BRISK_ERR_IO, "tensor parallelism: socketpair: %s", strerror(errno));
        fflush(NULL);
        pid_t pid = fork();
        if (pid < 0) {
            close(sv[0]);
            close(sv[1]);
            return bk_fail(BRISK_ERR_IO, "tensor parallelism: fork: %s", strerror(errno));
        }
        if (pid == 0) { /* the child: only async-signal-safe calls would be strictly right; exec follows */
            char v[32];
            int fd = dup(sv[1]); /* without CLOEXEC: survives the exec */
            int nul = open("/dev/null", O_RDWR);
            if (fd < 0 || nul < 0) _exit(127);
            dup2(nul, 0);
            dup2(nul, 1);
            snprintf(v, sizeof v, "%d", fd);
            setenv("BRISK_TP_FD", v, 1);
            snprintf(v, sizeof v, "%d", r);
            setenv("BRISK_TP_RANK", v, 1);
            snprintf(v, sizeof v, "%d", t->size);
            setenv("BRISK_TP_SIZE", v, 1);
            snprintf(v, sizeof v, "%d", device0 + r);
            setenv("BRISK_TP_DEVICE", v, 1);
            unsetenv("BRISK_TP_ADDR");
            execl("/proc/self/exe", "brisk", "tp-worker", (char *)NULL);
            _exit(127);
        }
        close(sv[1]);
        t->fd[r] = sv[0];
        t->pid[r] = pid;
    }
    return BRISK_OK;
}

brisk_status tp_launch(int n_ranks, int device0, tp_link **out) {
    *out = NULL;
    if (n_ranks < 1) return bk_fail(BRISK_ERR_INVALID_ARG, "--tp %d: expected 1 or more ranks", n_ranks);
    tp_link *t;
    BK_TRY(link_alloc(TP_ROOT, 0, n_ranks, &t));
    t->device = device0;
    brisk_status s = BRISK_OK;
    if (n_ranks > 1 && getenv("BRISK_TP_ADDR")) {
        int size = env_int(SIZE_VARS), dev = env_int(DEVICE_VARS);
        if (size != n_ranks)
            s = bk_fail(BRISK_ERR_INVALID_ARG, "--tp %d, but the launcher started %d ranks", n_ranks, size);
        if (dev >= 0) t->device = dev;
        if (s == BRISK_OK) s = root_listen(t);
    } else if (n_ranks > 1) {
        s = spawn_workers(t, device0);
    }
    if (s != BRISK_OK) {
        tp_link_free(t);
        return s;
    }
    *out = t;
    return BRISK_OK;
}

static brisk_status send_msg(tp_link *t, int op, const int32_t *a, const void *p1, size_t n1, const void *p2,
                             size_t n2) {
    tp_msg h = {.op = op, .bytes = n1 + n2};
    if (a) memcpy(h.a, a, sizeof h.a);
    for (int r = 1; r < t->size; r++)
        if (!send_all(t->fd[r], &h, sizeof h) || (n1 && !send_all(t->fd[r], p1, n1)) ||
            (n2 && !send_all(t->fd[r], p2, n2)))
            return bk_fail(BRISK_ERR_IO, "tensor parallelism: rank %d is gone", r);
    return BRISK_OK;
}

brisk_status tp_model_load(tp_link *t, const char *path, const brisk_model_params *mp, brisk_model **out) {
    *out = NULL;
    brisk_model_params p = *mp;
    if (p.pp_size > 0) /* pipeline ranks (the caller asked for them with pp_size) */
        p.pp_rank = 0, p.pp_size = t->size;
    else
        p.tp_rank = 0, p.tp_size = t->size;
    p.device = t->device;
    BK_TRY(send_msg(t, TP_MODEL_LOAD, NULL, &p, sizeof p, path, strlen(path) + 1));
    brisk_status s = brisk_model_load(path, &p, out);
    char msg[512] = "";
    if (s != BRISK_OK) snprintf(msg, sizeof msg, "%s", brisk_last_error());
    for (int r = 1; r < t->size; r++) { /* every rank answers, even after a failure */
        int32_t st = BRISK_ERR_IO;
        uint32_t len = 0;
        char m[512] = "connection lost";
        if (recv_all(t->fd[r], &st, sizeof st) && recv_all(t->fd[r], &len, sizeof len) && len < sizeof m &&
            recv_all(t->fd[r], m, len))
            m[len] = 0;
        if (st != BRISK_OK && s == BRISK_OK) {
            s = (brisk_status)st;
            snprintf(msg, sizeof msg, "tensor-parallel rank %d: %s", r, m);
        }
    }
    if (s != BRISK_OK) {
        brisk_model_free(*out);
        *out = NULL;
        return bk_fail(s, "%s", msg);
    }
    (*out)->tp = t;
    (*out)->tp_free = tp_link_free;
    return BRISK_OK;
}

brisk_status tp_context_begin(const brisk_model *m, const brisk_context_params *p) {
    tp_link *t = m->tp;
    if (!t || t->role != TP_ROOT) return BRISK_OK;
    if (bk_backend_is_cuda(m->be, NULL)) BK_TRY(bk_cuda_nccl_unique_id(t->id));
    brisk_context_params cp = *p;
    cp.expert_stats = NULL; /* a pointer: the workers' MoE-free models never read it */
    return send_msg(t, TP_CONTEXT_NEW, NULL, &cp, sizeof cp, t->id, sizeof t->id);
}

/* The CPU's all_reduce between processes (no NCCL): each worker sends its partial sums to rank 0,
 * which adds them in rank order and sends the sum back to each. A socket round trip per call, so
 * slow; it lets the multi-process path run where there is no GPU (tests/test_tp.c). */
static void sock_all_reduce(bk_backend *be, float *x, size_t n) {
    tp_link *t = ((const tp_ops *)be->ops)->t;
    size_t bytes = n * sizeof(float);
    if (t->broken || !n) return;
    if (t->role == TP_WORKER) {
        t->broken = !send_all(t->fd[0], x, bytes) || !recv_all(t->fd[0], x, bytes);
        return;
    }
    if (n > t->rcap) {
        float *nb = realloc(t->rbuf, bytes);
        if (!nb) {
            t->broken = true;
            return;
        }
        t->rbuf = nb;
        t->rcap = n;
    }
    for (int r = 1; r < t->size && !t->broken; r++) {
        if (!recv_all(t->fd[r], t->rbuf, bytes)) t->broken = true;
        for (size_t i = 0; !t->broken && i < n; i++) x[i] += t->rbuf[i];
    }
    for (int r = 1; r < t->size && !t->broken; r++) t->broken = !send_all(t->fd[r], x, bytes);
}

brisk_status tp_attach(const brisk_model *m, bk_backend *be) {
    tp_link *t = m->tp;
    bool pp = m->pp_size > 0;
    int rank = pp ? m->pp_rank : m->tp_rank, size = pp ? m->pp_size : m->tp_size;
    if (size < 1) return BRISK_OK;
    if (t && t->role == TP_LOCAL) return t->attach(t->user, be, rank);
    if (bk_backend_is_cuda(be, NULL)) {
        if (!t) return bk_fail(BRISK_ERR_INVALID_ARG, "%s parallelism on CUDA: the model was not loaded by tp_model_load",
                               pp ? "pipeline" : "tensor");
        return bk_cuda_nccl_init(be, t->id, rank, size);
    }
    if (size == 1) return BRISK_OK;
    if (pp) /* the CPU's socket link is a star through rank 0, not the ring a pipeline needs */
        return bk_fail(BRISK_ERR_UNSUPPORTED, "pipeline parallelism runs on CUDA devices (over NCCL); on the CPU "
                                              "use --tp N");
    if (!t) return bk_fail(BRISK_ERR_UNSUPPORTED, "tensor parallelism over %d CPU ranks needs their link", m->tp_size);
    tp_ops *o = calloc(1, sizeof *o);
    if (!o) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    o->ops = *be->ops;
    o->ops.all_reduce = sock_all_reduce;
    o->t = t;
    o->next = t->ops;
    t->ops = o;
    be->ops = &o->ops;
    return BRISK_OK;
}

brisk_status tp_mirror(const brisk_model *m, int op, const int32_t *a, const void *data, size_t bytes) {
    tp_link *t = m->tp;
    if (t && t->broken) return bk_fail(BRISK_ERR_IO, "tensor parallelism: a rank was lost in an all-reduce");
    if (!t || t->role != TP_ROOT || t->size < 2) return BRISK_OK;
    return send_msg(t, op, a, data, bytes, NULL, 0);
}

/* ---- the worker ---- */

/* Answers a TP_MODEL_LOAD. */
static bool reply(tp_link *t, brisk_status s) {
    const char *m = s == BRISK_OK ? "" : brisk_last_error();
    int32_t st = s;
    uint32_t len = (uint32_t)strnlen(m, 511);
    return send_all(t->fd[0], &st, sizeof st) && send_all(t->fd[0], &len, sizeof len) && send_all(t->fd[0], m, len);
}

/* One message of rank 0 on the worker's model and context. */
static brisk_status serve_one(tp_link *t, const tp_msg *h, char *pl, brisk_model **m, brisk_context **c) {
    switch (h->op) {
    case TP_MODEL_LOAD: {
        brisk_model_params p;
        if (h->bytes <= sizeof p) return bk_fail(BRISK_ERR_FORMAT, "tensor parallelism: short load message");
        memcpy(&p, pl, sizeof p);
        pl[h->bytes - 1] = 0;
        if (p.pp_size > 0)
            p.pp_rank = t->rank, p.pp_size = t->size;
        else
            p.tp_rank = t->rank, p.tp_size = t->size;
        p.device = t->device;
        brisk_status s = *m ? bk_fail(BRISK_ERR_UNSUPPORTED, "tensor parallelism: one model at a time")
                            : brisk_model_load(pl + sizeof p, &p, m);
        if (s == BRISK_OK) (*m)->tp = t; /* the link stays the worker loop's (no tp_free) */
        if (!reply(t, s)) return bk_fail(BRISK_ERR_IO, "tensor parallelism: rank 0 is gone");
        return s;
    }
    case TP_CONTEXT_NEW: {
        brisk_context_params p;
        if (h->bytes != sizeof p + sizeof t->id || !*m || *c)
            return bk_fail(BRISK_ERR_FORMAT, "tensor parallelism: unexpected context message");
        memcpy(&p, pl, sizeof p);
        memcpy(t->id, pl + sizeof p, sizeof t->id);
        return brisk_context_new(*m, &p, c);
    }
    case TP_CONTEXT_FREE:
        brisk_context_free(*c);
        *c = NULL;
        return BRISK_OK;
    default:
        break;
    }
    if (!*c) return bk_fail(BRISK_ERR_FORMAT, "tensor parallelism: message %d without a context", h->op);
    switch (h->op) {
    case TP_DECODE:
        if (h->a[0] < 0 || h->bytes != (uint64_t)h->a[0] * sizeof(brisk_batch_entry))
            return bk_fail(BRISK_ERR_FORMAT, "tensor parallelism: bad batch message");
        return brisk_decode(*c, (const brisk_batch_entry *)pl, h->a[0]);
    case TP_SEQ_CLEAR: return brisk_seq_clear(*c, h->a[0]);
    case TP_SEQ_REMOVE: return brisk_seq_remove(*c, h->a[0], h->a[1], h->a[2]);
    case TP_SEQ_SHARE: return brisk_seq_share_prefix(*c, h->a[0], h->a[1], h->a[2]);
    case TP_SEQ_CHECKPOINT: return brisk_seq_checkpoint(*c, h->a[0]);
    default: return bk_fail(BRISK_ERR_FORMAT, "tensor parallelism: unknown message %d", h->op);
    }
}

brisk_status tp_worker_main(void) {
    int rank = env_int(RANK_VARS), size = env_int(SIZE_VARS), dev = env_int(DEVICE_VARS);
    if (rank < 1 || size <= rank) return bk_fail(BRISK_ERR_INVALID_ARG, "tensor parallelism: rank %d of %d", rank, size);
    tp_link *t;
    BK_TRY(link_alloc(TP_WORKER, rank, size, &t));
    t->device = dev >= 0 ? dev : rank;
    const char *fd = getenv("BRISK_TP_FD");
    brisk_status s = BRISK_OK;
    if (fd) {
        t->fd[0] = atoi(fd);
        fcntl(t->fd[0], F_SETFD, FD_CLOEXEC);
    } else {
        s = worker_connect(t);
    }
    brisk_model *m = NULL;
    brisk_context *c = NULL;
    char *pl = NULL;
    size_t cap = 0;
    tp_msg h;
    while (s == BRISK_OK && recv_all(t->fd[0], &h, sizeof h) && h.op != TP_QUIT) {
        if (h.bytes > ((uint64_t)1 << 30)) {
            s = bk_fail(BRISK_ERR_FORMAT, "tensor parallelism: message of %llu bytes", (unsigned long long)h.bytes);
            break;
        }
        if (h.bytes + 1 > cap) {
            char *np = realloc(pl, (size_t)h.bytes + 1);
            if (!np) {
                s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
                break;
            }
            pl = np;
            cap = (size_t)h.bytes + 1;
        }
        if (h.bytes && !recv_all(t->fd[0], pl, (size_t)h.bytes)) break;
        s = serve_one(t, &h, pl, &m, &c);
    }
    if (s != BRISK_OK) fprintf(stderr, "brisk: rank %d: %s\n", rank, brisk_last_error());
    brisk_context_free(c);
    brisk_model_free(m);
    free(pl);
    tp_link_free(t);
    return s;
}
