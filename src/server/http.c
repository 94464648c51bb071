/* http.c — libmicrohttpd glue of server.h: routing, auth, body limits,
 * responses and the SSE stream of a running request.
 *
 * Every connection has its own thread (MHD_USE_THREAD_PER_CONNECTION), so a
 * request may block while its generation runs: the thread sleeps on the
 * request's condition variable and, every 100 ms, checks that the client is
 * still connected; a client that went away cancels its request, which frees
 * its slot before the scheduler's next step.
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <time.h>

#include "base/status.h"
#include "server/openai.h"
#include "server/server.h"
#include "server/webui/webui.h"

struct server {
    server_config cfg;
    char model_id[256];
    char *api_key;
    chat_fmt *fmt;
    oai_server oai;
    sched *sch;
    struct MHD_Daemon *d;
    int port;
    atomic_bool stopping;
    atomic_ullong http_requests, resp_2xx, resp_4xx, resp_5xx, disconnects;
};

typedef struct conn {
    server *srv;
    int fd;              /* the client socket, polled for a hang-up while we wait */
    strbuf body;
    bool too_large;
    oai_job job;
    bool have_job;
    sched_req *req;      /* our reference, NULL until parsed */
    bool submitted;
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
} conn;

/* ---- responses ------------------------------------------------------------ */

static void count_status(server *srv, int status) {
    if (status < 300) atomic_fetch_add(&srv->resp_2xx, 1);
    else if (status < 500) atomic_fetch_add(&srv->resp_4xx, 1);
    else atomic_fetch_add(&srv->resp_5xx, 1);
}

static void common_headers(struct MHD_Response *r, const char *type) {
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
}

/* Sends body (malloc'd; taken) with status. */
static enum MHD_Result send_body(server *srv, struct MHD_Connection *con, int status, char *body, const char *type,
                                 const char *retry_after) {
    if (!body) return MHD_NO;
    struct MHD_Response *r = MHD_create_response_from_buffer(strlen(body), body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    common_headers(r, type);
    if (retry_after) MHD_add_response_header(r, "Retry-After", retry_after);
    enum MHD_Result ok = MHD_queue_response(con, (unsigned)status, r);
    MHD_destroy_response(r);
    count_status(srv, status);
    return ok;
}

static enum MHD_Result send_json(server *srv, struct MHD_Connection *con, int status, char *body) {
    return send_body(srv, con, status, body, "application/json", NULL);
}

static enum MHD_Result send_error(server *srv, struct MHD_Connection *con, const oai_error *e) {
    return send_body(srv, con, e->status, oai_error_json(e), "application/json", e->status == 429 ? "1" : NULL);
}

static enum MHD_Result fail(server *srv, struct MHD_Connection *con, int status, const char *param, const char *msg) {
    oai_error e = {0};
    oai_fail(&e, status, param, "%s", msg);
    return send_error(srv, con, &e);
}

/* ---- waiting on a request ------------------------------------------------- */

/* The client hung up (or the socket failed). */
static bool client_gone(int fd) {
    if (fd < 0) return false;
    struct pollfd p = {.fd = fd, .events = POLLIN | POLLRDHUP};
    if (poll(&p, 1, 0) <= 0) return false;
    if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
    char ch;
    return (p.revents & POLLIN) && recv(fd, &ch, 1, MSG_PEEK | MSG_DONTWAIT) == 0;
}

/* Lock held: r has output the connection has not formatted yet. */
static bool has_news(const conn *c, bool whole) {
    const sched_req *r = c->req;
    if (r->finish != SCHED_RUNNING) return true;
    if (whole) return false;
    for (int i = 0; i < c->n_cc; i++) {
        const sched_choice *ch = &r->ch[i];
        if (ch->n_visible > c->cc[i].text_done || (r->p.logprobs && ch->n_toks > c->cc[i].toks_done) ||
            (ch->finish != SCHED_RUNNING && c->cd[i].finish == SCHED_RUNNING))
            return true;
    }
    return false;
}

/* Lock held: copies choice i's new output into c->cc[i] and c->cd[i]; false on OOM. */
static bool copy_choice(conn *c, int i) {
    const sched_req *r = c->req;
    const sched_choice *ch = &r->ch[i];
    struct conn_choice *k = &c->cc[i];
    sb_reset(&k->text);
    sb_append(&k->text, ch->text ? ch->text + k->text_done : "", ch->n_visible - k->text_done);
    k->text_done = ch->n_visible;
    int nt = r->p.logprobs ? ch->n_toks - k->toks_done : 0;
    if (nt > k->toks_cap) {
        sched_token *t = realloc(k->toks, (size_t)nt * sizeof *t);
        if (t) k->toks = t, k->toks_cap = nt;
        else nt = 0;
    }
    if (nt > 0) memcpy(k->toks, ch->toks + k->toks_done, (size_t)nt * sizeof *k->toks);
    k->toks_done += nt;
    c->cd[i] = (oai_choice_delta){.text = k->text.p ? k->text.p : "", .len = k->text.len, .toks = k->toks,
                                  .n_toks = nt, .finish = ch->finish, .n_gen = ch->n_toks};
    return !k->text.failed;
}

/* Sleeps until the request has news (whole: until it finishes), then copies
 * the delta into c and d. false: the client went away or the server stops
 * (the request is cancelled). */
static bool wait_delta(conn *c, bool whole, oai_delta *d) {
    server *srv = c->srv;
    sched_lock(srv->sch);
    while (!has_news(c, whole)) {
        sched_wait(srv->sch, c->req, 100);
        if (!has_news(c, whole) && (client_gone(c->fd) || atomic_load(&srv->stopping))) {
            sched_unlock(srv->sch);
            sched_cancel(srv->sch, c->req);
            return false;
        }
    }
    sched_req *r = c->req;
    bool ok = true;
    for (int i = 0; i < c->n_cc; i++) ok &= copy_choice(c, i);
    snprintf(c->error, sizeof c->error, "%s", r->error);
    *d = (oai_delta){.n = c->n_cc, .ch = c->cd, .finish = r->finish, .error = c->error, .n_prompt = r->n_prompt,
                     .n_cached = r->n_cached};
    sched_unlock(srv->sch);
    return ok;
}

static ssize_t stream_cb(void *cls, uint64_t pos, char *buf, size_t max) {
    conn *c = cls;
    while (c->out_off == c->out.len) {
        if (c->out_done) return MHD_CONTENT_READER_END_OF_STREAM;
        sb_reset(&c->out);
        c->out_off = 0;
        oai_delta d;
        if (!wait_delta(c, false, &d)) return MHD_CONTENT_READER_END_WITH_ERROR;
        oai_stream_events(&c->srv->oai, &c->job, &d, &c->out);
        if (c->out.failed) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (d.finish != SCHED_RUNNING) c->out_done = true;
    }
    size_t n = c->out.len - c->out_off < max ? c->out.len - c->out_off : max;
    memcpy(buf, c->out.p + c->out_off, n);
    c->out_off += n;
    return (ssize_t)n;
}

/* ---- endpoints ------------------------------------------------------------- */

static enum MHD_Result completions(server *srv, struct MHD_Connection *con, conn *c, bool chat) {
    oai_error e = {0};
    bool ok = oai_parse(&srv->oai, c->body.p ? c->body.p : "", c->body.len, chat, &c->job, &e);
    c->have_job = true;
    c->req = c->job.req;
    if (!ok) return send_error(srv, con, &e);
    c->n_cc = c->req->n_choices;
    c->cc = calloc((size_t)c->n_cc, sizeof *c->cc);
    c->cd = calloc((size_t)c->n_cc, sizeof *c->cd);
    if (!c->cc || !c->cd) return fail(srv, con, 500, NULL, "out of memory");
    brisk_status st = sched_submit(srv->sch, c->req);
    if (st != BRISK_OK) {
        int status = st == BRISK_ERR_RANGE ? 400 : st == BRISK_ERR_NOMEM ? 429 : st == BRISK_ERR_INVALID_ARG ? 400 : 503;
        if (st == BRISK_ERR_RANGE) e.code = "context_length_exceeded";
        oai_fail(&e, status, st == BRISK_ERR_RANGE ? (chat ? "messages" : "prompt") : NULL, "%s", brisk_last_error());
        return send_error(srv, con, &e);
    }
    c->submitted = true;
    if (c->job.stream) {
        struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_cb, c, NULL);
        if (!r) return MHD_NO;
        common_headers(r, "text/event-stream");
        MHD_add_response_header(r, "Cache-Control", "no-cache");
        enum MHD_Result res = MHD_queue_response(con, MHD_HTTP_OK, r);
        MHD_destroy_response(r);
        count_status(srv, 200);
        return res;
    }
    oai_delta d;
    if (!wait_delta(c, true, &d)) return MHD_NO; /* the client left: close */
    if (d.finish == SCHED_FINISH_ERROR || d.finish == SCHED_FINISH_CANCELLED)
        return fail(srv, con, 500, NULL, d.error[0] ? d.error : "generation cancelled");
    char *body = oai_response(&srv->oai, &c->job, &d);
    return body ? send_json(srv, con, 200, body) : fail(srv, con, 500, NULL, "out of memory");
}

static char *models_json(server *srv) {
    char *s = NULL;
    cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "data"), *m = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "object", "list");
    cJSON_AddStringToObject(m, "id", srv->model_id);
    cJSON_AddStringToObject(m, "object", "model");
    cJSON_AddNumberToObject(m, "created", (double)time(NULL));
    cJSON_AddStringToObject(m, "owned_by", "brisk");
    cJSON_AddItemToArray(a, m);
    s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static char *metrics_text(server *srv) {
    sched_stats st;
    sched_get_stats(srv->sch, &st);
    strbuf b = {0};
#define METRIC(name, type, help, fmt, v) \
    sb_printf(&b, "# HELP brisk_" name " " help "\n# TYPE brisk_" name " " type "\nbrisk_" name " " fmt "\n", v)
    METRIC("requests_total", "counter", "Completion requests accepted.", "%llu", (unsigned long long)st.requests);
    METRIC("requests_failed_total", "counter", "Accepted requests that ended in an error.", "%llu",
           (unsigned long long)st.requests_failed);
    METRIC("http_requests_total", "counter", "HTTP requests received.", "%llu",
           (unsigned long long)atomic_load(&srv->http_requests));
    sb_printf(&b, "# HELP brisk_http_responses_total HTTP responses by status class.\n"
                  "# TYPE brisk_http_responses_total counter\n"
                  "brisk_http_responses_total{class=\"2xx\"} %llu\nbrisk_http_responses_total{class=\"4xx\"} %llu\n"
                  "brisk_http_responses_total{class=\"5xx\"} %llu\n",
              (unsigned long long)atomic_load(&srv->resp_2xx), (unsigned long long)atomic_load(&srv->resp_4xx),
              (unsigned long long)atomic_load(&srv->resp_5xx));
    METRIC("client_disconnects_total", "counter", "Requests cancelled because the client went away.", "%llu",
           (unsigned long long)atomic_load(&srv->disconnects));
    METRIC("prompt_tokens_total", "counter", "Prompt tokens of accepted requests.", "%llu",
           (unsigned long long)st.prompt_tokens);
    METRIC("prompt_tokens_cached_total", "counter", "Prompt tokens reused from the KV cache.", "%llu",
           (unsigned long long)st.cached_tokens);
    METRIC("generated_tokens_total", "counter", "Tokens generated.", "%llu", (unsigned long long)st.generated_tokens);
    METRIC("decode_steps_total", "counter", "Batched decode steps.", "%llu", (unsigned long long)st.steps);
    METRIC("queue_length", "gauge", "Requests waiting for a slot.", "%d", st.queue_len);
    METRIC("slots_active", "gauge", "Slots running a request.", "%d", st.active);
    METRIC("slots_total", "gauge", "Slots (parallel sequences).", "%d", st.n_parallel);
    METRIC("kv_cache_tokens", "gauge", "Tokens held in the KV cache over all slots.", "%lld", (long long)st.kv_tokens);
    METRIC("kv_cache_capacity_tokens", "gauge", "KV cache capacity in tokens.", "%lld", (long long)st.kv_capacity);
    METRIC("kv_cache_usage_ratio", "gauge", "KV cache use, 0 to 1.", "%.4f",
           st.kv_capacity ? (double)st.kv_tokens / (double)st.kv_capacity : 0.0);
    METRIC("generation_tokens_per_second", "gauge", "Generated tokens per second over the last seconds.", "%.2f",
           st.gen_tok_per_s);
#undef METRIC
    return sb_take(&b);
}

/* GET /: the web chat page (webui.h). Revalidated on every load (no-cache +
 * ETag: a new build's page shows at once, an unchanged one costs a 304); the
 * policy lets the page reach this server only, so model output that slipped
 * into the DOM could load nothing. */
static enum MHD_Result send_page(server *srv, struct MHD_Connection *con) {
    const char *inm = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "If-None-Match");
    bool same = inm && !strcmp(inm, webui_index_html_etag);
    struct MHD_Response *r = same ? MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT)
                                  : MHD_create_response_from_buffer(webui_index_html_len, (void *)webui_index_html,
                                                                    MHD_RESPMEM_PERSISTENT);
    if (!r) return MHD_NO;
    MHD_add_response_header(r, "Content-Type", "text/html; charset=utf-8");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    MHD_add_response_header(r, "ETag", webui_index_html_etag);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    MHD_add_response_header(r, "Referrer-Policy", "no-referrer");
    MHD_add_response_header(r, "Content-Security-Policy",
                            "default-src 'none'; script-src 'unsafe-inline'; style-src 'unsafe-inline'; "
                            "connect-src 'self'; img-src 'self' data:; base-uri 'none'; form-action 'none'; "
                            "frame-ancestors 'none'");
    enum MHD_Result ok = MHD_queue_response(con, same ? MHD_HTTP_NOT_MODIFIED : MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    count_status(srv, same ? 304 : 200);
    return ok;
}

static bool auth_ok(server *srv, struct MHD_Connection *con) {
    const char *h = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Authorization");
    if (!h || strncmp(h, "Bearer ", 7)) return false;
    h += 7;
    size_t n = strlen(h), k = strlen(srv->api_key);
    unsigned diff = n != k; /* compared in constant time: no early exit on the first wrong byte */
    for (size_t i = 0; i < k; i++) diff |= (unsigned char)srv->api_key[i] ^ (unsigned char)(i < n ? h[i] : 0);
    return diff == 0;
}

static enum MHD_Result route(server *srv, struct MHD_Connection *con, conn *c, const char *url, const char *method) {
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    const char *p = !strncmp(url, "/v1/", 4) ? url + 3 : url;
    if (!strcmp(p, "/chat/completions") || !strcmp(p, "/completions")) {
        if (!post) return fail(srv, con, 405, NULL, "use POST");
        return completions(srv, con, c, p[1] == 'c' && p[2] == 'h');
    }
    if (!strcmp(p, "/tokenize") || !strcmp(p, "/detokenize") || !strcmp(p, "/apply-template")) {
        if (!post) return fail(srv, con, 405, NULL, "use POST");
        oai_error e = {0};
        const char *body = c->body.p ? c->body.p : "";
        char *res = p[1] == 't' ? oai_tokenize(&srv->oai, body, c->body.len, &e)
                    : p[1] == 'd' ? oai_detokenize(&srv->oai, body, c->body.len, &e)
                                  : oai_apply_template(&srv->oai, body, c->body.len, &e);
        return res ? send_json(srv, con, 200, res) : send_error(srv, con, &e);
    }
    if (!strcmp(p, "/health") || !strcmp(p, "/models") || !strcmp(p, "/metrics")) {
        if (!get) return fail(srv, con, 405, NULL, "use GET");
        if (p[1] == 'h') return send_json(srv, con, 200, strdup("{\"status\":\"ok\"}"));
        if (p[2] == 'o') return send_json(srv, con, 200, models_json(srv));
        return send_body(srv, con, 200, metrics_text(srv), "text/plain; version=0.0.4", NULL);
    }
    if (!strcmp(url, "/") || !strcmp(url, "/index.html")) {
        if (!get && strcmp(method, "HEAD")) return fail(srv, con, 405, NULL, "use GET");
        return send_page(srv, con);
    }
    return fail(srv, con, 404, NULL, "no such endpoint");
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *con, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    server *srv = cls;
    conn *c = *con_cls;
    if (!c) { /* headers are in; the body (if any) comes in later calls */
        if (!(c = calloc(1, sizeof *c))) return MHD_NO;
        c->srv = srv;
        c->fd = -1;
        *con_cls = c;
        atomic_fetch_add(&srv->http_requests, 1);
        const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_CONNECTION_FD);
        if (ci) c->fd = ci->connect_fd;
        if (!strcmp(method, "OPTIONS")) {
            struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
            if (!r) return MHD_NO;
            MHD_add_response_header(r, "Access-Control-Allow-Origin", "*");
            MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
            MHD_add_response_header(r, "Access-Control-Allow-Headers", "Authorization, Content-Type");
            enum MHD_Result ok = MHD_queue_response(con, 204, r);
            MHD_destroy_response(r);
            return ok;
        }
        /* the page asks for the key itself (a browser cannot send it when loading /) */
        bool public_url = !strcmp(url, "/health") || !strcmp(url, "/") || !strcmp(url, "/index.html");
        if (srv->api_key && !public_url && !auth_ok(srv, con))
            return fail(srv, con, 401, NULL, "a valid API key is required (Authorization: Bearer KEY)");
        /* A body over the limit is read and dropped so the client sees the
         * 413 (answering before it is read resets the connection under the
         * sender); one far over it is refused at once. */
        const char *cl = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Content-Length");
        if (cl && strtoull(cl, NULL, 10) > 4 * srv->cfg.max_body)
            return fail(srv, con, 413, NULL, "the request body is too large");
        return MHD_YES;
    }
    if (*upload_size) {
        if (!c->too_large) {
            if (c->body.len + *upload_size > srv->cfg.max_body) {
                c->too_large = true;
                sb_free(&c->body);
            } else sb_append(&c->body, upload, *upload_size);
        }
        *upload_size = 0;
        return MHD_YES;
    }
    if (c->too_large) return fail(srv, con, 413, NULL, "the request body is too large");
    if (c->body.failed) return fail(srv, con, 500, NULL, "out of memory");
    return route(srv, con, c, url, method);
}

static void completed(void *cls, struct MHD_Connection *con, void **con_cls, enum MHD_RequestTerminationCode toe) {
    server *srv = cls;
    conn *c = *con_cls;
    if (!c) return;
    if (c->req) {
        if (c->submitted && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) atomic_fetch_add(&srv->disconnects, 1);
        if (c->submitted) sched_cancel(srv->sch, c->req); /* no-op for a finished request */
        sched_req_release(srv->sch, c->req);
    }
    if (c->have_job) oai_job_free(&c->job);
    sb_free(&c->body);
    sb_free(&c->out);
    for (int i = 0; c->cc && i < c->n_cc; i++) {
        sb_free(&c->cc[i].text);
        free(c->cc[i].toks);
    }
    free(c->cc);
    free(c->cd);
    free(c);
    *con_cls = NULL;
}

/* ---- life cycle ------------------------------------------------------------ */

brisk_status server_start(brisk_model *model, brisk_context *ctx, const server_config *cfg, server **out) {
    *out = NULL;
    server *srv = calloc(1, sizeof *srv);
    if (!srv) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    srv->cfg = *cfg;
    snprintf(srv->model_id, sizeof srv->model_id, "%s", cfg->model_id ? cfg->model_id : "brisk");
    srv->cfg.host = NULL;
    srv->cfg.model_id = NULL;
    srv->cfg.chat_template = NULL;
    if (cfg->api_key && !(srv->api_key = strdup(cfg->api_key))) {
        server_stop(srv);
        return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    brisk_status s = chat_fmt_new(model, cfg->chat_template, &srv->fmt);
    if (s != BRISK_OK) {
        server_stop(srv);
        return s;
    }
    srv->oai = (oai_server){model, srv->fmt, srv->model_id, cfg->n_parallel};
    sched_params sp = {cfg->n_parallel, cfg->n_ctx_slot, cfg->prefill_chunk, cfg->max_queue, cfg->ckpt_interval};
    if ((s = sched_new(model, ctx, &sp, &srv->sch)) != BRISK_OK) {
        server_stop(srv);
        return s;
    }
    const char *host = cfg->host ? cfg->host : "127.0.0.1";
    struct sockaddr_in a4 = {0};
    struct sockaddr_in6 a6 = {0};
    struct sockaddr *sa;
    unsigned flags = MHD_USE_THREAD_PER_CONNECTION | MHD_USE_POLL_INTERNAL_THREAD | MHD_USE_ITC | MHD_USE_ERROR_LOG;
    if (inet_pton(AF_INET, host, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)cfg->port);
        sa = (struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, host, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)cfg->port);
        sa = (struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else {
        server_stop(srv);
        return bk_fail(BRISK_ERR_INVALID_ARG, "--host: '%s' is not an IPv4 or IPv6 address", host);
    }
    srv->d = MHD_start_daemon(flags, (uint16_t)cfg->port, NULL, NULL, handler, srv, MHD_OPTION_SOCK_ADDR, sa,
                              MHD_OPTION_NOTIFY_COMPLETED, completed, srv, MHD_OPTION_CONNECTION_TIMEOUT,
                              (unsigned)60, MHD_OPTION_CONNECTION_LIMIT, (unsigned)1000, MHD_OPTION_END);
    if (!srv->d) {
        server_stop(srv);
        return bk_fail(BRISK_ERR_IO, "cannot listen on %s:%d (in use, or not an address of this machine)", host,
                       cfg->port);
    }
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(srv->d, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = di ? di->port : cfg->port;
    *out = srv;
    return BRISK_OK;
}

int server_port(const server *s) { return s->port; }

void server_stop(server *srv) {
    if (!srv) return;
    atomic_store(&srv->stopping, true);
    /* Connection threads wake within 100 ms, see `stopping` and end their
     * requests; MHD joins them. The scheduler goes after: they use it. */
    if (srv->d) MHD_stop_daemon(srv->d);
    sched_free(srv->sch);
    chat_fmt_free(srv->fmt);
    free(srv->api_key);
    free(srv);
}
