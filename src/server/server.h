/* server.h — `brisk serve`: an OpenAI- and Anthropic-compatible HTTP server
 * over one model and one context. libmicrohttpd's event loop serves the
 * connections on a few threads (http.c); generation runs on the scheduler
 * thread of scheduler.h, and a request waiting for tokens holds no thread.
 *
 * Endpoints: POST /v1/chat/completions, /v1/completions (streaming or not),
 * /v1/messages, /v1/messages/count_tokens, /v1/responses, /tokenize, /detokenize,
 * /apply-template; GET /v1/models, /v1/models/{id}, /props, /slots, /health,
 * /metrics, / (the web page). Over an embeddings context (brisk_context_params.
 * embeddings) POST /v1/embeddings and /v1/rerank instead of generation (embed.h).
 *
 * Exposure: answers carry no CORS header unless an allowed origin asked;
 * requests from other origins are refused; JSON endpoints take only
 * application/json. A request's headers and body must arrive within
 * timeout_s; each client address may hold per_ip_limit connections.
 */
#ifndef BK_SERVER_SERVER_H
#define BK_SERVER_SERVER_H
#include <stdbool.h>
#include <stddef.h>

#include "brisk.h"
#include "server/scheduler.h"

typedef struct server_config {
    const char *host;     /* IPv4 or IPv6 literal; "127.0.0.1" by default */
    int port;             /* 0: any free port (server_port tells which) */
    const char *api_key;  /* NULL: no auth; else "Authorization: Bearer KEY" (or x-api-key: KEY) on every
                             route but /health and /; "" is refused */
    const char *model_id; /* the name /v1/models reports */
    const char *const *model_names; /* (n_model_names) names a request's `model` may give besides model_id;
                                       any other is a 404 */
    int n_model_names;
    const char *const *cors_origins; /* (n_cors_origins) origins allowed to read answers cross-origin; "*": any */
    int n_cors_origins;
    int http_threads;     /* threads serving connections; 0: 4 */
    int conn_limit;       /* open connections; 0: as many as the fd limit allows */
    int per_ip_limit;     /* open connections per client address; 0: 256 */
    int timeout_s;        /* seconds a request's headers and body may take, and an idle connection may stay; 0: 30 */
    bool access_log;      /* one line per request on stderr */
    const char *chat_template; /* NULL: the model's; "chatml"; or a Jinja source */
    size_t max_body;      /* request bytes before 413 */
    int n_parallel;       /* slots (KV sequences) */
    int n_ctx_slot;       /* tokens per request: prompt + completion */
    int prefill_chunk;    /* prompt tokens per step */
    int max_queue;        /* waiting requests before 429 */
    int ckpt_interval;    /* recurrent models: prompt tokens between state checkpoints (the KV block size; the
                             context needs n_seq_checkpoints > 0); 0: none */
    sched_spec spec;      /* speculative decoding (scheduler.h: the context's n_batch and checkpoints it needs);
                             spec.drafters NULL: none */
} server_config;

typedef struct server server;

/* Starts listening. The model and context (n_seq_max >= n_parallel, n_batch
 * >= n_parallel + prefill_chunk, n_ctx >= n_parallel * n_ctx_slot) stay
 * owned by the caller and must outlive the server. */
brisk_status server_start(brisk_model *model, brisk_context *ctx, const server_config *cfg, server **out);
int server_port(const server *s);
/* Ends running requests, closes connections and frees everything. Accepts NULL. */
void server_stop(server *s);
#endif
