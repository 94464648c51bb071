/* server.h — `brisk serve`: an OpenAI-compatible HTTP server over one model
 * and one context (libmicrohttpd, one thread per connection; generation runs
 * on the scheduler thread of scheduler.h, so a slow or vanished client only
 * holds its own connection thread).
 *
 * Endpoints: POST /v1/chat/completions, /v1/completions (streaming or not),
 * /tokenize, /detokenize, /apply-template; GET /v1/models, /health, /metrics.
 */
#ifndef BK_SERVER_SERVER_H
#define BK_SERVER_SERVER_H
#include <stddef.h>

#include "brisk.h"

typedef struct server_config {
    const char *host;     /* IPv4 or IPv6 literal; "127.0.0.1" by default */
    int port;             /* 0: any free port (server_port tells which) */
    const char *api_key;  /* NULL: no auth; else "Authorization: Bearer KEY" on every route but /health */
    const char *model_id; /* the name /v1/models reports */
    const char *chat_template; /* NULL: the model's; "chatml"; or a Jinja source */
    size_t max_body;      /* request bytes before 413 */
    int n_parallel;       /* slots (KV sequences) */
    int n_ctx_slot;       /* tokens per request: prompt + completion */
    int prefill_chunk;    /* prompt tokens per step */
    int max_queue;        /* waiting requests before 429 */
    int ckpt_interval;    /* recurrent models: prompt tokens between state checkpoints (the KV block size; the
                             context needs n_seq_checkpoints > 0); 0: none */
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
