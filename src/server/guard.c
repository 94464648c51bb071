/* guard.c — the server's watchman (http.h): one thread that, every 100 ms,
 * shuts down connections whose request has not fully arrived within
 * --timeout seconds (MHD's own timeout restarts on every byte, so a client
 * dribbling a header line now and then would hold its socket for ever), and
 * resumes parked requests whose client hung up (MHD does not watch a
 * suspended socket) or, when the server stops, all of them.
 */
#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "base/status.h"
#include "server/http.h"

double http_now(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + (double)ts.tv_nsec * 1e-9;
}

bool http_client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    char ch;
    return (p.revents & POLLIN) && recv(fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

void guard_notify(void *cls, struct MHD_Connection *con, void **socket_context,
                  enum MHD_ConnectionNotificationCode code) {
    server *srv = cls;
    sock *sk = *socket_context;
    pthread_mutex_lock(&srv->sock_mu);
    if (code == MHD_CONNECTION_NOTIFY_STARTED && !sk && (sk = calloc(1, sizeof *sk))) {
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_CONNECTION_FD);
        sk->fd = ci ? ci->connect_fd : -1;
        sk->t0 = http_now();
        sk->next = srv->socks;
        if (srv->socks) srv->socks->prev = sk;
        srv->socks = sk;
        srv->n_socks++;
        *socket_context = sk;
    } else if (code == MHD_CONNECTION_NOTIFY_CLOSED && sk) {
        /* MHD closes the fd after this returns: under sock_mu the guard can
         * never shut down a number that a new connection has reused */
        if (sk->prev) sk->prev->next = sk->next;
        else srv->socks = sk->next;
        if (sk->next) sk->next->prev = sk->prev;
        srv->n_socks--;
        free(sk);
        *socket_context = NULL;
    }
    pthread_mutex_unlock(&srv->sock_mu);
}

void guard_busy(server *srv, sock *sk, bool busy) {
    if (!sk) return;
    pthread_mutex_lock(&srv->sock_mu);
    sk->busy = busy;
    if (!busy) sk->t0 = http_now();
    pthread_mutex_unlock(&srv->sock_mu);
}

static void sweep(server *srv) {
    bool stopping = atomic_load(&srv->stopping);
    sched_lock(srv->sch);
    for (conn *c = srv->parked, *next; c; c = next) {
        next = c->park_next;
        if (stopping || http_client_gone(c->fd)) http_unpark(c); /* its handler cancels the request */
    }
    sched_unlock(srv->sch);
    double now = http_now(), limit = srv->cfg.timeout_s;
    pthread_mutex_lock(&srv->sock_mu);
    for (sock *sk = srv->socks; sk; sk = sk->next) {
        if (sk->busy || sk->shut || now - sk->t0 < limit || sk->fd < 0) continue;
        /* MHD then reads EOF and closes it (the fd stays MHD's to close) */
        shutdown(sk->fd, SHUT_RDWR);
        sk->shut = true;
        atomic_fetch_add(&srv->deadline_closes, 1);
    }
    pthread_mutex_unlock(&srv->sock_mu);
}

static void *guard_main(void *arg) {
    server *srv = arg;
    while (!atomic_load(&srv->stopping)) {
        nanosleep(&(struct timespec){0, 100 * 1000 * 1000}, NULL);
        sweep(srv);
    }
    return NULL;
}

brisk_status guard_start(server *srv) {
    if (pthread_create(&srv->guard, NULL, guard_main, srv)) return bk_fail(BRISK_ERR_NOMEM, "cannot start a thread");
    srv->guard_started = true;
    return BRISK_OK;
}

void guard_stop(server *srv) {
    if (!srv->guard_started) return;
    atomic_store(&srv->stopping, true);
    pthread_join(srv->guard, NULL);
    srv->guard_started = false;
    sweep(srv); /* the last pass resumes every parked request */
}
