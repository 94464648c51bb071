/* http.h — what http.c (routing, responses) and guard.c (deadlines, parked
 * requests) share inside the server: the server and connection structs.
 * Not a public header: server.h is the server's interface.
 *
 * Ownership: a `conn` is one HTTP request (MHD's con_cls), created when its
 * headers are in and freed by the completion callback; a `sock` is one TCP
 * connection (MHD's socket context), created on accept and freed on close.
 * The parked list and each conn's park fields are guarded by the scheduler's
 * lock; the socket list by sock_mu.
 */
#ifndef BK_SERVER_HTTP_H
#define BK_SERVER_HTTP_H
#include <microhttpd.h>
#include <pthread.h>
#include <stdatomic.h>

#include "server/anthropic.h"
#include "server/embed.h"
#include "server/openai.h"
#include "server/native.h"
#include "server/responses.h"
#include "server/server.h"

enum { API_OPENAI, API_ANTHROPIC, API_RESPONSES, API_EMBED, API_NATIVE };

typedef struct sock {
    int fd;
    double t0;           /* monotonic seconds: the connection opened or its last response ended */
    bool busy;           /* its request is read (the deadline does not apply while it is served) */
    bool shut;           /* the guard shut it down for its deadline */
    struct sock *prev, *next;
} sock;

typedef struct conn conn;

typedef struct server {
    server_config cfg;
    char model_id[256];
    char *api_key;
    char **cors;         /* (n_cors) origins that may read answers cross-origin; "*": any */
    int n_cors;
    char **names;        /* (n_names) model names requests may give: the id, the file name, aliases */
    int n_names;
    chat_fmt *fmt;
    char *chat_template; /* the template's source for /props ("" for the built-in ChatML) */
    oai_server oai;
    sched *sch;
    resp_store *resps;   /* /v1/responses: past conversations for previous_response_id */
    struct MHD_Daemon *d;
    int port;
    atomic_bool stopping;
    atomic_ullong http_requests, resp_2xx, resp_4xx, resp_5xx, disconnects, deadline_closes;
    conn *parked;        /* requests waiting for tokens (scheduler lock) */
    pthread_mutex_t sock_mu;
    sock *socks;         /* open connections (sock_mu) */
    int n_socks;
    pthread_t guard;
    bool guard_started;
} server;

struct conn {
    server *srv;
    struct MHD_Connection *con;
    int fd;              /* the client socket, polled for a hang-up while parked */
    sock *sk;
    int api;             /* API_OPENAI, API_ANTHROPIC, API_RESPONSES, API_EMBED or API_NATIVE (llama-server's
                            /completion): the shape of answers and errors */
    char cors[256];      /* the Origin this answer may be read from; "" none */
    strbuf body;
    bool too_large;
    oai_job job;
    bool have_job;
    emb_job ejob;        /* API_EMBED: /v1/embeddings, /v1/rerank */
    bool have_ejob;
    sched_req *req;      /* our reference, NULL until parsed */
    bool submitted;
    bool whole;          /* waits for the whole answer (not streaming) */
    bool parked;         /* suspended until news (scheduler lock) */
    conn *park_prev, *park_next;
    strbuf out;          /* SSE bytes not yet handed to MHD */
    size_t out_off;
    bool out_done;
    struct conn_choice {
        size_t text_done; /* bytes of the choice's text already formatted */
        int toks_done;
        strbuf text;      /* the delta being formatted */
        sched_token *toks; /* (toks_cap) logprob records of the delta */
        int toks_cap;
    } *cc;               /* (n_cc) one per choice of the request */
    oai_choice_delta *cd; /* (n_cc) */
    int n_cc;
    char error[256];
    /* access log */
    char method[8], url[160], addr[64];
    int status;
    unsigned long long bytes;
    double t0;
};

double http_now(void); /* monotonic seconds */
/* The client hung up (or the socket failed). */
bool http_client_gone(int fd);
/* Scheduler lock held: resumes a parked connection (no-op when not parked). */
void http_unpark(conn *c);

/* props.c: GET /v1/models, /v1/models/{id} (NULL id: the list; an unknown one: NULL, a 404),
 * /props and /slots as llama-server shapes them (the fields brisk has). Bodies are malloc'd. */
char *props_models_json(server *srv, const char *id);
char *props_json(server *srv);
char *props_slots_json(server *srv);

/* guard.c: the thread that closes connections past their request deadline
 * and resumes parked requests whose client left (or all, when stopping). */
brisk_status guard_start(server *srv);
void guard_stop(server *srv);
/* MHD_OPTION_NOTIFY_CONNECTION: tracks sockets for the deadline. */
void guard_notify(void *cls, struct MHD_Connection *con, void **socket_context, enum MHD_ConnectionNotificationCode code);
/* The request on sk has been read / answered (keep-alive: the next one's clock starts). */
void guard_busy(server *srv, sock *sk, bool busy);
#endif
