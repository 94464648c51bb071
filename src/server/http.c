/* http.c — libmicrohttpd glue of server.h: routing, auth, origin and body
 * checks, responses, the SSE stream of a running request, and the access log.
 *
 * Connections are served by MHD's event loop on a small pool of threads
 * (MHD_USE_INTERNAL_POLLING_THREAD + MHD_OPTION_THREAD_POOL_SIZE), so an idle
 * or slow client costs a socket and a little memory, never a thread. No
 * handler may block: a request waiting for generated tokens is parked
 * (MHD_suspend_connection) and the scheduler's news callback resumes it; a
 * streaming response's content reader parks itself the same way and returns
 * 0 when no bytes are ready. While parked MHD does not see a hang-up, so the
 * guard thread (guard.c) polls parked sockets and resumes those whose client
 * left; the resumed handler cancels the request. Parking and resuming happen
 * under the scheduler's lock, so a resume can never come before its suspend.
 */
#include <arpa/inet.h>
#include <microhttpd.h>
#include <netinet/in.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>

#include "base/status.h"
#include "server/http.h"
#include "server/webui/webui.h"

/* ---- responses ------------------------------------------------------------ */

static void count_status(server *srv, conn *c, int status) {
    if (status < 300) atomic_fetch_add(&srv->resp_2xx, 1);
    else if (status < 500) atomic_fetch_add(&srv->resp_4xx, 1);
    else atomic_fetch_add(&srv->resp_5xx, 1);
    if (c) c->status = status;
}

/* The origin a browser request came from may read the answer only when
 * --cors-origin allows it (no header at all otherwise: same-origin only). */
static void common_headers(conn *c, struct MHD_Response *r, const char *type) {
    MHD_add_response_header(r, "Content-Type", type);
    MHD_add_response_header(r, "X-Content-Type-Options", "nosniff");
    if (c && c->cors[0]) {
        MHD_add_response_header(r, "Access-Control-Allow-Origin", c->cors);
        MHD_add_response_header(r, "Vary", "Origin");
    }
}

/* Sends body (malloc'd; taken) with status. */
static enum MHD_Result send_body(server *srv, struct MHD_Connection *con, conn *c, int status, char *body,
                                 const char *type, const char *retry_after) {
    if (!body) return MHD_NO;
    size_t n = strlen(body);
    struct MHD_Response *r = MHD_create_response_from_buffer(n, body, MHD_RESPMEM_MUST_FREE);
    if (!r) {
        free(body);
        return MHD_NO;
    }
    common_headers(c, r, type);
    if (retry_after) MHD_add_response_header(r, "Retry-After", retry_after);
    enum MHD_Result ok = MHD_queue_response(con, (unsigned)status, r);
    MHD_destroy_response(r);
    count_status(srv, c, status);
    if (c) c->bytes += n;
    return ok;
}

static enum MHD_Result send_json(server *srv, struct MHD_Connection *con, conn *c, int status, char *body) {
    return send_body(srv, con, c, status, body, "application/json", NULL);
}

static enum MHD_Result send_error(server *srv, struct MHD_Connection *con, conn *c, const oai_error *e) {
    char *body = c && c->api == API_ANTHROPIC ? anth_error_json(e) : oai_error_json(e);
    return send_body(srv, con, c, e->status, body, "application/json", e->status == 429 ? "1" : NULL);
}

static enum MHD_Result fail(server *srv, struct MHD_Connection *con, conn *c, int status, const char *param,
                            const char *msg) {
    oai_error e = {0};
    oai_fail(&e, status, param, "%s", msg);
    return send_error(srv, con, c, &e);
}

/* ---- waiting on a request ------------------------------------------------- */

/* Lock held: r has output the connection has not formatted yet. */
static bool has_news(const conn *c) {
    const sched_req *r = c->req;
    if (r->finish != SCHED_RUNNING) return true;
    if (c->whole) return false;
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
    int nt = r->p.logprobs || c->api == API_NATIVE ? ch->n_toks - k->toks_done : 0; /* /completion streams ids */
    if (nt > k->toks_cap) {
        sched_token *t = realloc(k->toks, (size_t)nt * sizeof *t);
        if (t) k->toks = t, k->toks_cap = nt;
        else nt = 0;
    }
    if (nt > 0) memcpy(k->toks, ch->toks + k->toks_done, (size_t)nt * sizeof *k->toks);
    k->toks_done += nt;
    c->cd[i] = (oai_choice_delta){.text = k->text.p ? k->text.p : "", .len = k->text.len, .toks = k->toks,
                                  .n_toks = nt, .finish = ch->finish, .n_gen = ch->n_toks, .stop_hit = ch->stop_hit,
                                  .slot = ch->slot};
    return !k->text.failed;
}

/* Scheduler lock held: suspends c's connection until http_unpark. */
static void park(conn *c) {
    server *srv = c->srv;
    c->parked = true;
    c->park_prev = NULL;
    c->park_next = srv->parked;
    if (srv->parked) srv->parked->park_prev = c;
    srv->parked = c;
    MHD_suspend_connection(c->con);
}

void http_unpark(conn *c) {
    if (!c->parked) return;
    server *srv = c->srv;
    if (c->park_prev) c->park_prev->park_next = c->park_next;
    else srv->parked = c->park_next;
    if (c->park_next) c->park_next->park_prev = c->park_prev;
    c->parked = false;
    MHD_resume_connection(c->con);
}

/* The scheduler's news callback (its lock held): wakes the connection when
 * there is something for it to send. */
static void on_news(void *arg) {
    conn *c = arg;
    if (c->parked && has_news(c)) http_unpark(c);
}

/* Takes the request's new output (c->whole: only once it has finished) into
 * d. 1: d is filled; 0: nothing yet, the connection is parked until there is;
 * -1: the client went away or the server stops (the request is cancelled). */
static int take_delta(conn *c, oai_delta *d) {
    server *srv = c->srv;
    sched_lock(srv->sch);
    if (!has_news(c)) {
        if (http_client_gone(c->fd) || atomic_load(&srv->stopping)) {
            sched_unlock(srv->sch);
            sched_cancel(srv->sch, c->req);
            return -1;
        }
        park(c);
        sched_unlock(srv->sch);
        return 0;
    }
    sched_req *r = c->req;
    bool ok = true;
    for (int i = 0; i < c->n_cc; i++) ok &= copy_choice(c, i);
    snprintf(c->error, sizeof c->error, "%s", r->error);
    double t_first = r->t_first_token ? r->t_first_token : r->t_end;
    *d = (oai_delta){.n = c->n_cc, .ch = c->cd, .finish = r->finish, .error = c->error, .n_prompt = r->n_prompt,
                     .n_cached = r->n_cached, .n_drafted = r->n_drafted, .n_draft_accepted = r->n_draft_accepted,
                     .prompt_ms = t_first ? 1e3 * (t_first - r->t_submit) : 0,
                     .predicted_ms = r->t_end && t_first ? 1e3 * (r->t_end - t_first) : 0};
    sched_unlock(srv->sch);
    return ok ? 1 : -1;
}

static ssize_t stream_cb(void *cls, uint64_t pos, char *buf, size_t max) {
    conn *c = cls;
    while (c->out_off == c->out.len) {
        if (c->out_done) return MHD_CONTENT_READER_END_OF_STREAM;
        sb_reset(&c->out);
        c->out_off = 0;
        oai_delta d;
        int got = take_delta(c, &d);
        if (got == 0) return 0; /* parked: MHD calls again once resumed */
        if (got < 0) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (c->api == API_ANTHROPIC) anth_stream_events(&c->srv->oai, &c->job, &d, &c->out);
        else if (c->api == API_RESPONSES) resp_stream_events(&c->srv->oai, &c->job, &d, &c->out);
        else if (c->api == API_NATIVE) nat_stream_events(&c->srv->oai, &c->job, &d, &c->out);
        else oai_stream_events(&c->srv->oai, &c->job, &d, &c->out);
        if (c->out.failed) return MHD_CONTENT_READER_END_WITH_ERROR;
        if (d.finish != SCHED_RUNNING) c->out_done = true;
    }
    size_t n = c->out.len - c->out_off < max ? c->out.len - c->out_off : max;
    memcpy(buf, c->out.p + c->out_off, n);
    c->out_off += n;
    c->bytes += n;
    return (ssize_t)n;
}

/* ---- endpoints ------------------------------------------------------------- */

/* The answer of a submitted non-streaming request once it has finished; until
 * then the connection stays parked and MHD calls the handler again on news. */
static enum MHD_Result answer(server *srv, struct MHD_Connection *con, conn *c) {
    oai_delta d;
    int got = take_delta(c, &d);
    if (got == 0) return MHD_YES;
    if (got < 0) return MHD_NO; /* the client left: close */
    if (d.finish == SCHED_FINISH_ERROR || d.finish == SCHED_FINISH_CANCELLED)
        return fail(srv, con, c, 500, NULL, d.error[0] ? d.error : "generation cancelled");
    char *body = c->api == API_EMBED       ? emb_response(&srv->oai, &c->ejob, c->req)
                 : c->api == API_ANTHROPIC ? anth_response(&srv->oai, &c->job, &d)
                 : c->api == API_RESPONSES ? resp_response(&srv->oai, &c->job, &d)
                 : c->api == API_NATIVE    ? nat_response(&srv->oai, &c->job, &d)
                                           : oai_response(&srv->oai, &c->job, &d);
    return body ? send_json(srv, con, c, 200, body) : fail(srv, con, c, 500, NULL, "out of memory");
}

/* Submits the parsed job; a stream is answered at once, the rest when done. */
static enum MHD_Result submit(server *srv, struct MHD_Connection *con, conn *c, bool chat) {
    oai_error e = {0};
    c->n_cc = c->req->n_choices;
    c->cc = calloc((size_t)c->n_cc, sizeof *c->cc);
    c->cd = calloc((size_t)c->n_cc, sizeof *c->cd);
    if (!c->cc || !c->cd) return fail(srv, con, c, 500, NULL, "out of memory");
    c->req->on_news = on_news;
    c->req->on_news_arg = c;
    brisk_status st = sched_submit(srv->sch, c->req);
    if (st != BRISK_OK) {
        int status = st == BRISK_ERR_RANGE ? 400 : st == BRISK_ERR_NOMEM ? 429 : st == BRISK_ERR_INVALID_ARG ? 400 : 503;
        const char *param = c->api == API_RESPONSES || c->api == API_EMBED ? "input" : chat ? "messages" : "prompt";
        oai_fail(&e, status, st == BRISK_ERR_RANGE ? param : NULL, "%s", brisk_last_error());
        if (st == BRISK_ERR_RANGE) {
            e.code = "context_length_exceeded";
            e.n_prompt = c->req->n_prompt;
            e.n_ctx = srv->oai.n_ctx_slot;
        }
        return send_error(srv, con, c, &e);
    }
    c->submitted = true;
    c->whole = !c->job.stream;
    if (c->whole) return answer(srv, con, c);
    struct MHD_Response *r = MHD_create_response_from_callback(MHD_SIZE_UNKNOWN, 16384, stream_cb, c, NULL);
    if (!r) return MHD_NO;
    common_headers(c, r, "text/event-stream");
    MHD_add_response_header(r, "Cache-Control", "no-cache");
    enum MHD_Result res = MHD_queue_response(con, MHD_HTTP_OK, r);
    MHD_destroy_response(r);
    count_status(srv, c, 200);
    return res;
}

/* A generation endpoint on a server that computes embeddings: 501 with what to do. */
static bool generates(server *srv, struct MHD_Connection *con, conn *c, enum MHD_Result *res) {
    if (!sched_embeddings(srv->sch)) return true;
    *res = fail(srv, con, c, 501, NULL, "this server computes embeddings (--embeddings or --reranking): it does "
                "not generate; use /v1/embeddings or /v1/rerank");
    return false;
}

/* /v1/embeddings and /v1/rerank (embed.h). */
static enum MHD_Result embeddings(server *srv, struct MHD_Connection *con, conn *c, bool rerank) {
    oai_error e = {0};
    bool ok = emb_parse(&srv->oai, srv->sch, rerank, c->body.p ? c->body.p : "", c->body.len, &c->ejob, &e);
    c->have_ejob = true;
    c->req = c->ejob.req;
    if (!ok) return send_error(srv, con, c, &e);
    return submit(srv, con, c, false);
}

static enum MHD_Result completions(server *srv, struct MHD_Connection *con, conn *c, bool chat) {
    oai_error e = {0};
    enum MHD_Result res;
    if (!generates(srv, con, c, &res)) return res;
    bool ok = oai_parse(&srv->oai, c->body.p ? c->body.p : "", c->body.len, chat, &c->job, &e);
    c->have_job = true;
    c->req = c->job.req;
    if (!ok) return send_error(srv, con, c, &e);
    return submit(srv, con, c, chat);
}

/* llama-server's own /completion and /infill (native.h). */
static enum MHD_Result native_completion(server *srv, struct MHD_Connection *con, conn *c) {
    oai_error e = {0};
    enum MHD_Result res;
    if (!generates(srv, con, c, &res)) return res;
    const char *body = c->body.p ? c->body.p : "";
    bool ok = !strcmp(c->url, "/infill") ? nat_parse_infill(&srv->oai, body, c->body.len, &c->job, &e)
                                         : nat_parse(&srv->oai, body, c->body.len, &c->job, &e);
    c->have_job = true;
    c->req = c->job.req;
    if (!ok) return send_error(srv, con, c, &e);
    return submit(srv, con, c, false);
}

static enum MHD_Result messages(server *srv, struct MHD_Connection *con, conn *c) {
    oai_error e = {0};
    enum MHD_Result res;
    if (!generates(srv, con, c, &res)) return res;
    bool ok = anth_parse(&srv->oai, c->body.p ? c->body.p : "", c->body.len, &c->job, &e);
    c->have_job = true;
    c->req = c->job.req;
    if (!ok) return send_error(srv, con, c, &e);
    return submit(srv, con, c, true);
}

static enum MHD_Result responses(server *srv, struct MHD_Connection *con, conn *c) {
    oai_error e = {0};
    enum MHD_Result res;
    if (!generates(srv, con, c, &res)) return res;
    bool ok = resp_parse(&srv->oai, srv->resps, c->body.p ? c->body.p : "", c->body.len, &c->job, &e);
    c->have_job = true;
    c->req = c->job.req;
    if (!ok) return send_error(srv, con, c, &e);
    return submit(srv, con, c, true);
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
    METRIC("deadline_closes_total", "counter", "Connections closed because a request did not arrive in time.", "%llu",
           (unsigned long long)atomic_load(&srv->deadline_closes));
    pthread_mutex_lock(&srv->sock_mu);
    int n_socks = srv->n_socks;
    pthread_mutex_unlock(&srv->sock_mu);
    METRIC("http_connections", "gauge", "Open HTTP connections.", "%d", n_socks);
    METRIC("prompt_tokens_total", "counter", "Prompt tokens of accepted requests.", "%llu",
           (unsigned long long)st.prompt_tokens);
    METRIC("prompt_tokens_cached_total", "counter", "Prompt tokens reused from the KV cache.", "%llu",
           (unsigned long long)st.cached_tokens);
    METRIC("generated_tokens_total", "counter", "Tokens generated.", "%llu", (unsigned long long)st.generated_tokens);
    METRIC("decode_steps_total", "counter", "Batched decode steps.", "%llu", (unsigned long long)st.steps);
    /* llama-server's speculative counters, under brisk's prefix */
    METRIC("spec_decode_num_draft_tokens_total", "counter", "Speculative: draft tokens verified.", "%llu",
           (unsigned long long)st.draft_tokens);
    METRIC("spec_decode_num_accepted_tokens_total", "counter", "Speculative: draft tokens the target accepted.",
           "%llu", (unsigned long long)st.draft_accepted);
    METRIC("spec_decode_num_drafts_total", "counter", "Speculative: slot rounds that verified drafts.", "%llu",
           (unsigned long long)st.draft_rounds);
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
static enum MHD_Result send_page(server *srv, struct MHD_Connection *con, conn *c) {
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
    count_status(srv, c, same ? 304 : 200);
    if (!same) c->bytes += webui_index_html_len;
    return ok;
}

/* Anthropic's clients send the key as x-api-key; OpenAI's as a bearer token. */
static bool auth_ok(server *srv, struct MHD_Connection *con) {
    const char *h = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Authorization");
    if (h && !strncmp(h, "Bearer ", 7)) h += 7;
    else h = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "x-api-key");
    if (!h) return false;
    size_t n = strlen(h), k = strlen(srv->api_key);
    unsigned diff = n != k; /* compared in constant time: no early exit on the first wrong byte */
    for (size_t i = 0; i < k; i++) diff |= (unsigned char)srv->api_key[i] ^ (unsigned char)(i < n ? h[i] : 0);
    return diff == 0;
}

/* A browser sends Origin with every cross-origin request and with same-origin
 * POSTs. Allowed: none (not a browser), this server's own origin (the web
 * page), or one --cors-origin names; c->cors gets the one answers may
 * expose. Anything else is refused before it does work: a page on another
 * site could otherwise drive the model with "simple" requests that need no
 * preflight. */
static bool origin_ok(server *srv, struct MHD_Connection *con, conn *c) {
    const char *o = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Origin");
    if (!o) return true;
    for (int i = 0; i < srv->n_cors; i++)
        if (!strcmp(srv->cors[i], "*") || !strcasecmp(srv->cors[i], o)) {
            snprintf(c->cors, sizeof c->cors, "%s", o);
            return true;
        }
    const char *host = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Host");
    return host && !strncasecmp(o, "http://", 7) && !strcasecmp(o + 7, host);
}

/* JSON endpoints take JSON only: a form or text/plain body is what a
 * cross-site page can send without asking first. */
static bool json_type(struct MHD_Connection *con) {
    const char *t = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Content-Type");
    if (!t || strncasecmp(t, "application/json", 16)) return false;
    return t[16] == 0 || t[16] == ';' || t[16] == ' ';
}

static enum MHD_Result route(server *srv, struct MHD_Connection *con, conn *c, const char *url, const char *method) {
    bool get = !strcmp(method, "GET"), post = !strcmp(method, "POST");
    const char *p = !strncmp(url, "/v1/", 4) ? url + 3 : url;
    if (c->api == API_NATIVE) { /* llama-server's /completion (and /completions without /v1), /infill */
        if (!post) return fail(srv, con, c, 405, NULL, "use POST");
        return native_completion(srv, con, c);
    }
    if (!strcmp(p, "/chat/completions") || !strcmp(p, "/completions")) {
        if (!post) return fail(srv, con, c, 405, NULL, "use POST");
        return completions(srv, con, c, p[1] == 'c' && p[2] == 'h');
    }
    if (!strcmp(p, "/messages")) {
        if (!post) return fail(srv, con, c, 405, NULL, "use POST");
        return messages(srv, con, c);
    }
    if (!strcmp(p, "/responses")) {
        if (!post) return fail(srv, con, c, 405, NULL, "use POST");
        return responses(srv, con, c);
    }
    if (!strcmp(p, "/embeddings") || !strcmp(p, "/rerank") || !strcmp(p, "/reranking")) {
        if (!post) return fail(srv, con, c, 405, NULL, "use POST");
        return embeddings(srv, con, c, p[1] == 'r');
    }
    const char *body = c->body.p ? c->body.p : "";
    if (!strcmp(p, "/messages/count_tokens")) {
        if (!post) return fail(srv, con, c, 405, NULL, "use POST");
        oai_error e = {0};
        char *res = anth_count_tokens(&srv->oai, body, c->body.len, &e);
        return res ? send_json(srv, con, c, 200, res) : send_error(srv, con, c, &e);
    }
    if (!strcmp(p, "/tokenize") || !strcmp(p, "/detokenize") || !strcmp(p, "/apply-template")) {
        if (!post) return fail(srv, con, c, 405, NULL, "use POST");
        oai_error e = {0};
        char *res = p[1] == 't' ? oai_tokenize(&srv->oai, body, c->body.len, &e)
                    : p[1] == 'd' ? oai_detokenize(&srv->oai, body, c->body.len, &e)
                                  : oai_apply_template(&srv->oai, body, c->body.len, &e);
        return res ? send_json(srv, con, c, 200, res) : send_error(srv, con, c, &e);
    }
    if (!strncmp(p, "/models/", 8) && p[8]) { /* OpenAI's retrieve: one model */
        if (!get) return fail(srv, con, c, 405, NULL, "use GET");
        char *m = props_models_json(srv, p + 8);
        if (m) return send_json(srv, con, c, 200, m);
        oai_error e = {0};
        oai_model_ok(&srv->oai, p + 8, &e);
        return send_error(srv, con, c, &e);
    }
    if (!strcmp(url, "/props") || !strcmp(url, "/slots")) {
        if (!get) return fail(srv, con, c, 405, NULL, "use GET");
        return send_json(srv, con, c, 200, url[1] == 'p' ? props_json(srv) : props_slots_json(srv));
    }
    if (!strcmp(p, "/health") || !strcmp(p, "/models") || !strcmp(p, "/metrics")) {
        if (!get) return fail(srv, con, c, 405, NULL, "use GET");
        if (p[1] == 'h') return send_json(srv, con, c, 200, strdup("{\"status\":\"ok\"}"));
        if (p[2] == 'o') return send_json(srv, con, c, 200, props_models_json(srv, NULL));
        return send_body(srv, con, c, 200, metrics_text(srv), "text/plain; version=0.0.4", NULL);
    }
    if (!strcmp(url, "/") || !strcmp(url, "/index.html")) {
        if (!get && strcmp(method, "HEAD")) return fail(srv, con, c, 405, NULL, "use GET");
        return send_page(srv, con, c);
    }
    return fail(srv, con, c, 404, NULL, "no such endpoint");
}

/* The first call of a request (headers in): origin, preflight, auth, type, size. */
static enum MHD_Result admit(server *srv, struct MHD_Connection *con, conn *c, const char *url, const char *method) {
    if (!origin_ok(srv, con, c)) return fail(srv, con, c, 403, NULL, "this origin may not use the server (see --cors-origin)");
    if (!strcmp(method, "OPTIONS")) {
        struct MHD_Response *r = MHD_create_response_from_buffer(0, NULL, MHD_RESPMEM_PERSISTENT);
        if (!r) return MHD_NO;
        if (c->cors[0]) {
            MHD_add_response_header(r, "Access-Control-Allow-Origin", c->cors);
            MHD_add_response_header(r, "Vary", "Origin");
            MHD_add_response_header(r, "Access-Control-Allow-Methods", "GET, POST, OPTIONS");
            MHD_add_response_header(r, "Access-Control-Allow-Headers",
                                    "Authorization, Content-Type, x-api-key, anthropic-version, anthropic-beta");
            MHD_add_response_header(r, "Access-Control-Max-Age", "600");
        }
        enum MHD_Result ok = MHD_queue_response(con, 204, r);
        MHD_destroy_response(r);
        count_status(srv, c, 204);
        return ok;
    }
    /* the page asks for the key itself (a browser cannot send it when loading /) */
    bool public_url = !strcmp(url, "/health") || !strcmp(url, "/") || !strcmp(url, "/index.html");
    if (srv->api_key && !public_url && !auth_ok(srv, con))
        return fail(srv, con, c, 401, NULL, "a valid API key is required (Authorization: Bearer KEY)");
    if (!strcmp(method, "POST") && !json_type(con))
        return fail(srv, con, c, 415, NULL, "the body must be JSON (Content-Type: application/json)");
    /* A body over the limit is read and dropped so the client sees the
     * 413 (answering before it is read resets the connection under the
     * sender); one far over it is refused at once. */
    const char *cl = MHD_lookup_connection_value(con, MHD_HEADER_KIND, "Content-Length");
    if (cl && strtoull(cl, NULL, 10) > 4 * srv->cfg.max_body)
        return fail(srv, con, c, 413, NULL, "the request body is too large");
    return MHD_YES;
}

static conn *conn_new(server *srv, struct MHD_Connection *con, const char *url, const char *method) {
    conn *c = calloc(1, sizeof *c);
    if (!c) return NULL;
    c->srv = srv;
    c->con = con;
    c->fd = -1;
    c->t0 = http_now();
    const union MHD_ConnectionInfo *ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_CONNECTION_FD);
    if (ci) c->fd = ci->connect_fd;
    if ((ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_SOCKET_CONTEXT))) c->sk = ci->socket_context;
    if ((ci = MHD_get_connection_info(con, MHD_CONNECTION_INFO_CLIENT_ADDRESS)) && ci->client_addr) {
        const struct sockaddr *sa = ci->client_addr;
        if (sa->sa_family == AF_INET)
            inet_ntop(AF_INET, &((const struct sockaddr_in *)sa)->sin_addr, c->addr, sizeof c->addr);
        else if (sa->sa_family == AF_INET6)
            inet_ntop(AF_INET6, &((const struct sockaddr_in6 *)sa)->sin6_addr, c->addr, sizeof c->addr);
    }
    snprintf(c->method, sizeof c->method, "%s", method);
    snprintf(c->url, sizeof c->url, "%s", url);
    c->api = strstr(url, "/messages")     ? API_ANTHROPIC
             : strstr(url, "/responses")  ? API_RESPONSES
             : strstr(url, "/embeddings") || strstr(url, "/rerank") ? API_EMBED
             : !strcmp(url, "/completion") || !strcmp(url, "/completions") || !strcmp(url, "/infill") ? API_NATIVE
                                          : API_OPENAI;
    return c;
}

static enum MHD_Result handler(void *cls, struct MHD_Connection *con, const char *url, const char *method,
                               const char *version, const char *upload, size_t *upload_size, void **con_cls) {
    server *srv = cls;
    conn *c = *con_cls;
    if (!c) { /* headers are in; the body (if any) comes in later calls */
        if (!(c = conn_new(srv, con, url, method))) return MHD_NO;
        *con_cls = c;
        atomic_fetch_add(&srv->http_requests, 1);
        return admit(srv, con, c, url, method);
    }
    if (c->submitted) return answer(srv, con, c); /* resumed: news for a parked request */
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
    guard_busy(srv, c->sk, true); /* the whole request is in: its deadline is met */
    if (c->too_large) return fail(srv, con, c, 413, NULL, "the request body is too large");
    if (c->body.failed) return fail(srv, con, c, 500, NULL, "out of memory");
    return route(srv, con, c, url, method);
}

static void completed(void *cls, struct MHD_Connection *con, void **con_cls, enum MHD_RequestTerminationCode toe) {
    server *srv = cls;
    conn *c = *con_cls;
    if (!c) return;
    if (c->req) {
        if (c->submitted && toe != MHD_REQUEST_TERMINATED_COMPLETED_OK) atomic_fetch_add(&srv->disconnects, 1);
        sched_lock(srv->sch); /* the scheduler must not call back into a freed conn */
        c->req->on_news = NULL;
        if (c->parked) { /* only at shutdown; MHD resumes it itself */
            c->parked = false;
            if (c->park_prev) c->park_prev->park_next = c->park_next;
            else srv->parked = c->park_next;
            if (c->park_next) c->park_next->park_prev = c->park_prev;
        }
        sched_unlock(srv->sch);
        if (c->submitted) sched_cancel(srv->sch, c->req); /* no-op for a finished request */
        sched_req_release(srv->sch, c->req);
    }
    if (srv->cfg.access_log)
        fprintf(stderr, "%s \"%s %s\" %d %llu %.0fms%s\n", c->addr[0] ? c->addr : "-", c->method, c->url,
                c->status ? c->status : 0, c->bytes, (http_now() - c->t0) * 1e3,
                toe == MHD_REQUEST_TERMINATED_COMPLETED_OK ? "" : " (closed early)");
    guard_busy(srv, c->sk, false);
    if (c->have_job) oai_job_free(&c->job);
    if (c->have_ejob) emb_job_free(&c->ejob);
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

/* Connections the process can hold: the soft fd limit raised to the hard one
 * (a daemon's usual first step; 1,024 is a common default), less a reserve
 * for model files, the listening sockets and the log. */
static unsigned conn_capacity(void) {
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl)) return 1000;
    if (rl.rlim_cur < rl.rlim_max) {
        rlim_t want = rl.rlim_max == RLIM_INFINITY || rl.rlim_max > 65536 ? 65536 : rl.rlim_max;
        if (want > rl.rlim_cur) {
            struct rlimit nl = {want, rl.rlim_max};
            if (!setrlimit(RLIMIT_NOFILE, &nl)) rl.rlim_cur = want;
        }
    }
    rlim_t n = rl.rlim_cur == RLIM_INFINITY ? 65536 : rl.rlim_cur;
    return n > 256 ? (unsigned)(n - 128) : (unsigned)n / 2;
}

static char **dup_list(const char *const *v, int n) {
    char **out = calloc((size_t)(n > 0 ? n : 1), sizeof *out);
    for (int i = 0; out && i < n; i++)
        if (!(out[i] = strdup(v[i]))) {
            while (i--) free(out[i]);
            free(out);
            return NULL;
        }
    return out;
}

static void free_list(char **v, int n) {
    for (int i = 0; v && i < n; i++) free(v[i]);
    free(v);
}

/* MHD's messages, less the ones every client that hangs up or misses its
 * deadline would print. */
static void mhd_log(void *cls, const char *fmt, va_list ap) {
    if (strstr(fmt, "closure") || strstr(fmt, "closed") || strstr(fmt, "reset by peer")) return;
    fputs("brisk serve: http: ", stderr);
    vfprintf(stderr, fmt, ap);
}

static brisk_status listen_http(server *srv, const server_config *cfg) {
    const char *host = cfg->host ? cfg->host : "127.0.0.1";
    struct sockaddr_in a4 = {0};
    struct sockaddr_in6 a6 = {0};
    struct sockaddr *sa;
    /* epoll: select() could not watch fds past 1,024 */
    unsigned flags = MHD_USE_INTERNAL_POLLING_THREAD | MHD_USE_AUTO | MHD_ALLOW_SUSPEND_RESUME | MHD_USE_ERROR_LOG;
    if (inet_pton(AF_INET, host, &a4.sin_addr) == 1) {
        a4.sin_family = AF_INET;
        a4.sin_port = htons((uint16_t)cfg->port);
        sa = (struct sockaddr *)&a4;
    } else if (inet_pton(AF_INET6, host, &a6.sin6_addr) == 1) {
        a6.sin6_family = AF_INET6;
        a6.sin6_port = htons((uint16_t)cfg->port);
        sa = (struct sockaddr *)&a6;
        flags |= MHD_USE_IPv6;
    } else
        return bk_fail(BRISK_ERR_INVALID_ARG, "--host: '%s' is not an IPv4 or IPv6 address", host);
    unsigned cap = conn_capacity(), limit = cfg->conn_limit > 0 ? (unsigned)cfg->conn_limit : cap;
    if (limit > cap) limit = cap;
    unsigned threads = cfg->http_threads > 0 ? (unsigned)cfg->http_threads : 4;
    srv->d = MHD_start_daemon(
        flags, (uint16_t)cfg->port, NULL, NULL, handler, srv, MHD_OPTION_EXTERNAL_LOGGER, mhd_log, srv, MHD_OPTION_SOCK_ADDR, sa, MHD_OPTION_NOTIFY_COMPLETED,
        completed, srv, MHD_OPTION_NOTIFY_CONNECTION, guard_notify, srv, MHD_OPTION_THREAD_POOL_SIZE, threads,
        MHD_OPTION_CONNECTION_TIMEOUT, (unsigned)srv->cfg.timeout_s, MHD_OPTION_CONNECTION_LIMIT, limit,
        MHD_OPTION_PER_IP_CONNECTION_LIMIT, (unsigned)srv->cfg.per_ip_limit, MHD_OPTION_END);
    if (!srv->d)
        return bk_fail(BRISK_ERR_IO, "cannot listen on %s:%d (in use, or not an address of this machine)", host,
                       cfg->port);
    const union MHD_DaemonInfo *di = MHD_get_daemon_info(srv->d, MHD_DAEMON_INFO_BIND_PORT);
    srv->port = di ? di->port : cfg->port;
    return BRISK_OK;
}

brisk_status server_start(brisk_model *model, brisk_context *ctx, const server_config *cfg, server **out) {
    *out = NULL;
    if (cfg->api_key && !cfg->api_key[0])
        return bk_fail(BRISK_ERR_INVALID_ARG, "the API key is empty (it would let an empty bearer token in)");
    server *srv = calloc(1, sizeof *srv);
    if (!srv) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&srv->sock_mu, NULL);
    srv->cfg = *cfg;
    if (srv->cfg.timeout_s <= 0) srv->cfg.timeout_s = 30;
    if (srv->cfg.per_ip_limit <= 0) srv->cfg.per_ip_limit = 256;
    snprintf(srv->model_id, sizeof srv->model_id, "%s", cfg->model_id ? cfg->model_id : "brisk");
    srv->cfg.host = NULL;
    srv->cfg.model_id = NULL;
    srv->cfg.chat_template = NULL;
    srv->cfg.cors_origins = srv->cfg.model_names = NULL;
    srv->n_cors = cfg->n_cors_origins;
    srv->n_names = cfg->n_model_names;
    brisk_status s = BRISK_OK;
    if ((cfg->api_key && !(srv->api_key = strdup(cfg->api_key))) || !(srv->cors = dup_list(cfg->cors_origins, srv->n_cors)) ||
        !(srv->names = dup_list(cfg->model_names, srv->n_names)))
        s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
    if (s == BRISK_OK) s = chat_fmt_new(model, cfg->chat_template, &srv->fmt);
    if (s == BRISK_OK) {
        char *own = cfg->chat_template ? NULL : brisk_model_meta_str(model, "tokenizer.chat_template");
        const char *src = cfg->chat_template && strcmp(cfg->chat_template, "chatml") ? cfg->chat_template : own ? own : "";
        if (!(srv->chat_template = strdup(src))) s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
        free(own);
    }
    srv->oai = (oai_server){model, srv->fmt, srv->model_id, cfg->n_parallel, (const char *const *)srv->names,
                            srv->n_names, cfg->n_ctx_slot, 1};
    if (s == BRISK_OK) s = oai_server_init(&srv->oai);
    sched_params sp = {cfg->n_parallel, cfg->n_ctx_slot, cfg->prefill_chunk, cfg->max_queue, cfg->ckpt_interval,
                       cfg->spec};
    if (s == BRISK_OK) s = resp_store_new((size_t)64 << 20, 4096, &srv->resps); /* bytes, responses */
    if (s == BRISK_OK) s = sched_new(model, ctx, &sp, &srv->sch);
    if (s == BRISK_OK) s = guard_start(srv);
    if (s == BRISK_OK) s = listen_http(srv, cfg);
    if (s != BRISK_OK) {
        server_stop(srv);
        return s;
    }
    *out = srv;
    return BRISK_OK;
}

int server_port(const server *s) { return s->port; }

void server_stop(server *srv) {
    if (!srv) return;
    /* Parked requests are resumed first (MHD may not stop with suspended
     * connections); seeing `stopping`, their handlers cancel them and never
     * park again. The scheduler goes after MHD: the handlers use it. */
    guard_stop(srv);
    atomic_store(&srv->stopping, true);
    if (srv->d) MHD_stop_daemon(srv->d);
    sched_free(srv->sch);
    resp_store_free(srv->resps);
    chat_fmt_free(srv->fmt);
    free(srv->chat_template);
    free(srv->api_key);
    free_list(srv->cors, srv->n_cors);
    free_list(srv->names, srv->n_names);
    pthread_mutex_destroy(&srv->sock_mu);
    free(srv);
}
