/* anthropic.c — the Messages API of anthropic.h. A request is translated to
 * the OpenAI chat shape (system -> a system message, tool_use blocks ->
 * tool_calls, tool_result blocks -> tool messages, thinking blocks ->
 * reasoning_content, tools' input_schema -> parameters) and parsed by
 * oai_parse_chat, so templates, sampling and the output parser are shared;
 * only the answer's shape is Anthropic's. */
#include "server/anthropic.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

char *anth_error_json(const oai_error *e) {
    const char *type = e->status == 400   ? "invalid_request_error"
                       : e->status == 401 ? "authentication_error"
                       : e->status == 403 ? "permission_error"
                       : e->status == 404 ? "not_found_error"
                       : e->status == 413 ? "request_too_large"
                       : e->status == 429 ? "rate_limit_error"
                       : e->status >= 500 ? "api_error"
                                          : "invalid_request_error";
    cJSON *o = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(o, "error");
    cJSON_AddStringToObject(o, "type", "error");
    cJSON_AddStringToObject(err, "type", type);
    char too_long[96]; /* Anthropic's words, which clients such as Claude Code match to start compacting */
    snprintf(too_long, sizeof too_long, "prompt is too long: %d tokens > %d maximum", e->n_prompt, e->n_ctx);
    bool ctx = e->code && !strcmp(e->code, "context_length_exceeded");
    cJSON_AddStringToObject(err, "message", ctx ? too_long : e->message);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* ---- request: Messages -> chat ------------------------------------------- */

/* Text of a string or of an array of text blocks into b; false on another block. */
static bool blocks_text(const cJSON *c, strbuf *b, oai_error *e, const char *param) {
    if (!c) return true;
    if (cJSON_IsString(c)) {
        sb_puts(b, c->valuestring);
        return true;
    }
    if (!cJSON_IsArray(c)) return oai_fail(e, 400, param, "'%s' must be a string or an array of text blocks", param);
    const cJSON *blk;
    cJSON_ArrayForEach(blk, c) {
        const cJSON *t = oai_get(blk, "type"), *x = oai_get(blk, "text");
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") || !cJSON_IsString(x))
            return oai_fail(e, 400, param, "'%s': only text blocks are supported here", param);
        sb_puts(b, x->valuestring);
    }
    return true;
}

/* One Messages message into one or more chat messages appended to out. */
static bool add_message(const cJSON *m, cJSON *out, oai_error *e) {
    const cJSON *role = oai_get(m, "role"), *content = oai_get(m, "content");
    if (cJSON_IsString(role) && !strcmp(role->valuestring, "system")) return true; /* in the system prompt: to_chat */
    if (!cJSON_IsString(role) || (strcmp(role->valuestring, "user") && strcmp(role->valuestring, "assistant")))
        return oai_fail(e, 400, "messages", "each message needs a role of user, assistant or system");
    bool asst = role->valuestring[0] == 'a';
    strbuf text = {0}, think = {0};
    cJSON *calls = NULL;
    bool ok = true;
    if (cJSON_IsString(content)) sb_puts(&text, content->valuestring);
    else if (!cJSON_IsArray(content)) ok = oai_fail(e, 400, "messages", "message content must be a string or an array of blocks");
    const cJSON *blk, *arr = cJSON_IsArray(content) ? content : NULL;
    cJSON_ArrayForEach(blk, arr) {
        const cJSON *t = oai_get(blk, "type");
        const char *type = cJSON_IsString(t) ? t->valuestring : "";
        if (!ok) break;
        if (!strcmp(type, "text")) ok = blocks_text(oai_get(blk, "text"), &text, e, "messages");
        else if (!strcmp(type, "thinking") && asst) ok = blocks_text(oai_get(blk, "thinking"), &think, e, "messages");
        else if (!strcmp(type, "redacted_thinking")) continue;
        else if (!strcmp(type, "tool_use") && asst) {
            const cJSON *id = oai_get(blk, "id"), *name = oai_get(blk, "name"), *input = oai_get(blk, "input");
            if (!cJSON_IsString(id) || !cJSON_IsString(name)) {
                ok = oai_fail(e, 400, "messages", "a tool_use block needs an id and a name");
                break;
            }
            if (!calls) calls = cJSON_CreateArray();
            cJSON *c = cJSON_CreateObject(), *fn;
            cJSON_AddStringToObject(c, "id", id->valuestring);
            cJSON_AddStringToObject(c, "type", "function"); /* before function: a template's tojson keeps the order */
            fn = cJSON_AddObjectToObject(c, "function");
            cJSON_AddStringToObject(fn, "name", name->valuestring);
            char *args = input ? cJSON_PrintUnformatted(input) : NULL;
            cJSON_AddStringToObject(fn, "arguments", args ? args : "{}");
            free(args);
            cJSON_AddItemToArray(calls, c);
        } else if (!strcmp(type, "tool_result") && !asst) {
            const cJSON *id = oai_get(blk, "tool_use_id");
            strbuf r = {0};
            ok = blocks_text(oai_get(blk, "content"), &r, e, "messages");
            cJSON *tm = cJSON_CreateObject();
            cJSON_AddStringToObject(tm, "role", "tool");
            cJSON_AddStringToObject(tm, "tool_call_id", cJSON_IsString(id) ? id->valuestring : "");
            cJSON_AddStringToObject(tm, "content", r.p ? r.p : "");
            cJSON_AddItemToArray(out, tm); /* results answer the previous turn: before this turn's text */
            sb_free(&r);
        } else
            ok = oai_fail(e, 400, "messages", "content blocks of type '%s' are not supported in a %s message", type,
                          role->valuestring);
    }
    if (ok && (text.len || calls || think.len || !cJSON_IsArray(content) || cJSON_GetArraySize(content) == 0)) {
        cJSON *cm = cJSON_CreateObject();
        cJSON_AddStringToObject(cm, "role", role->valuestring);
        cJSON_AddStringToObject(cm, "content", text.p ? text.p : "");
        if (think.len) cJSON_AddStringToObject(cm, "reasoning_content", think.p);
        if (calls) cJSON_AddItemToObject(cm, "tool_calls", calls), calls = NULL;
        cJSON_AddItemToArray(out, cm);
    }
    cJSON_Delete(calls);
    sb_free(&text);
    sb_free(&think);
    return ok;
}

/* The chat request (caller frees) for a Messages body; NULL and e on a bad one.
 * count: /count_tokens (max_tokens not required). */
static cJSON *to_chat(const oai_server *srv, const cJSON *root, bool count, bool *thinking, bool *hide, oai_error *e) {
    const cJSON *model = oai_get(root, "model"), *msgs = oai_get(root, "messages"), *mt = oai_get(root, "max_tokens");
    if (!cJSON_IsString(model)) return oai_fail(e, 400, "model", "'model' is required"), NULL;
    if (!oai_model_ok(srv, model->valuestring, e)) return NULL;
    if (!count && (!cJSON_IsNumber(mt) || mt->valuedouble < 1))
        return oai_fail(e, 400, "max_tokens", "'max_tokens' is required: a positive integer"), NULL;
    if (!cJSON_IsArray(msgs) || !cJSON_GetArraySize(msgs))
        return oai_fail(e, 400, "messages", "'messages' must be a non-empty array"), NULL;
    cJSON *oa = cJSON_CreateObject(), *out = cJSON_AddArrayToObject(oa, "messages");
    strbuf sys = {0};
    bool ok = blocks_text(oai_get(root, "system"), &sys, e, "system");
    /* System messages among the messages (Claude Code puts its environment after the first user
     * message) join the system prompt: most templates take a system message only first. */
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = oai_get(m, "role");
        if (!ok || !cJSON_IsString(role) || strcmp(role->valuestring, "system")) continue;
        if (sys.len) sb_puts(&sys, "\n\n");
        ok = blocks_text(oai_get(m, "content"), &sys, e, "messages");
    }
    if (ok && sys.len) oai_add_message(out, "system", sys.p);
    sb_free(&sys);
    cJSON_ArrayForEach(m, msgs) if (ok) ok = add_message(m, out, e);
    const cJSON *tools = oai_get(root, "tools"), *t;
    if (ok && tools && !cJSON_IsArray(tools)) ok = oai_fail(e, 400, "tools", "'tools' must be an array");
    cJSON *otools = cJSON_CreateArray();
    const cJSON *in_tools = ok ? tools : NULL;
    cJSON_ArrayForEach(t, in_tools) {
        const cJSON *name = oai_get(t, "name"), *type = oai_get(t, "type");
        if (!cJSON_IsString(name)) {
            ok = oai_fail(e, 400, "tools", "each tool needs a name");
            break;
        }
        /* Server tools (a versioned type: web_search_20250305, ...) are the provider's to run and
         * brisk runs none; deferred tools (defer_loading) stay out of the prompt until a tool
         * search loads them, and brisk has no tool search: the model is offered neither. */
        if ((cJSON_IsString(type) && strcmp(type->valuestring, "custom")) || cJSON_IsTrue(oai_get(t, "defer_loading")))
            continue;
        cJSON *ot = cJSON_CreateObject(), *fn;
        cJSON_AddStringToObject(ot, "type", "function"); /* as /v1/chat/completions clients order it */
        fn = cJSON_AddObjectToObject(ot, "function");
        cJSON_AddStringToObject(fn, "name", name->valuestring);
        oai_copy_field(t, "description", fn, "description");
        oai_copy_field(t, "input_schema", fn, "parameters");
        cJSON_AddItemToArray(otools, ot);
    }
    if (cJSON_GetArraySize(otools)) cJSON_AddItemToObject(oa, "tools", otools);
    else cJSON_Delete(otools);
    const cJSON *tc = oai_get(root, "tool_choice"), *tct = tc ? oai_get(tc, "type") : NULL;
    if (ok && tc) {
        const char *k = cJSON_IsString(tct) ? tct->valuestring : "";
        if (!strcmp(k, "auto") || !strcmp(k, "none")) cJSON_AddStringToObject(oa, "tool_choice", k);
        else if (!strcmp(k, "any")) cJSON_AddStringToObject(oa, "tool_choice", "required");
        else if (!strcmp(k, "tool") && cJSON_IsString(oai_get(tc, "name"))) {
            cJSON *o = cJSON_AddObjectToObject(oa, "tool_choice"), *fn;
            cJSON_AddStringToObject(o, "type", "function");
            fn = cJSON_AddObjectToObject(o, "function");
            cJSON_AddStringToObject(fn, "name", oai_get(tc, "name")->valuestring);
        } else ok = oai_fail(e, 400, "tool_choice", "'tool_choice.type' must be auto, any, tool (with a name) or none");
        /* at most one call: the chat request's parallel_tool_calls, inverted (absent: its default) */
        const cJSON *dp = oai_get(tc, "disable_parallel_tool_use");
        if (ok && dp && !cJSON_IsBool(dp))
            ok = oai_fail(e, 400, "tool_choice", "'tool_choice.disable_parallel_tool_use' must be a boolean");
        else if (ok && dp) cJSON_AddBoolToObject(oa, "parallel_tool_calls", !cJSON_IsTrue(dp));
    }
    /* adaptive: the model decides whether to think, which a thinking model's template does when enabled */
    const cJSON *th = oai_get(root, "thinking"), *tht = th ? oai_get(th, "type") : NULL, *thd = th ? oai_get(th, "display") : NULL;
    *thinking = cJSON_IsString(tht) && (!strcmp(tht->valuestring, "enabled") || !strcmp(tht->valuestring, "adaptive"));
    *hide = cJSON_IsString(thd) && !strcmp(thd->valuestring, "omitted");
    if (ok && th && !(cJSON_IsString(tht) && (*thinking || !strcmp(tht->valuestring, "disabled"))))
        ok = oai_fail(e, 400, "thinking", "'thinking.type' must be enabled, adaptive or disabled");
    if (ok && thd && !(cJSON_IsString(thd) && (*hide || !strcmp(thd->valuestring, "summarized"))))
        ok = oai_fail(e, 400, "thinking", "'thinking.display' must be summarized or omitted");
    cJSON *kw = cJSON_AddObjectToObject(oa, "chat_template_kwargs");
    cJSON_AddBoolToObject(kw, "enable_thinking", *thinking); /* Anthropic's default: off */
    if (!count) cJSON_AddNumberToObject(oa, "max_tokens", mt->valuedouble);
    static const char *const fields[] = {"temperature", "temperature", "top_p", "top_p", "top_k", "top_k",
                                         "stop_sequences", "stop", "stream", "stream",
                                         "grammar", "grammar", /* brisk's extensions, as on /v1/chat/completions */
                                         "ignore_eos", "ignore_eos", "model", "model", NULL}; /* (the name asked for) */
    oai_copy_fields(root, oa, fields);
    if (!ok) {
        cJSON_Delete(oa);
        return NULL;
    }
    return oa;
}

bool anth_parse(const oai_server *srv, const char *body, size_t len, oai_job *job, oai_error *e) {
    memset(job, 0, sizeof *job);
    cJSON *root = oai_parse_body(body, len, e);
    if (!root) return false;
    bool thinking = false, hide = false;
    cJSON *oa = to_chat(srv, root, false, &thinking, &hide, e);
    cJSON_Delete(root);
    if (!oa) return false;
    bool ok = oai_parse_chat(srv, oa, job, e);
    cJSON_Delete(oa);
    job->anth_hide_thinking = hide;
    char id[sizeof job->id];
    snprintf(id, sizeof id, "msg_%s", job->id + strlen("chatcmpl-"));
    memcpy(job->id, id, sizeof id);
    return ok;
}

char *anth_count_tokens(const oai_server *srv, const char *body, size_t len, oai_error *e) {
    cJSON *root = oai_parse_body(body, len, e);
    if (!root) return NULL;
    bool thinking = false, hide = false;
    cJSON *oa = to_chat(srv, root, true, &thinking, &hide, e);
    cJSON_Delete(root);
    if (!oa) return NULL;
    oai_job job;
    char *res = NULL;
    if (oai_parse_chat(srv, oa, &job, e)) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddNumberToObject(o, "input_tokens", job.req->n_prompt);
        res = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
    }
    oai_job_free(&job);
    sched_req_free(job.req);
    cJSON_Delete(oa);
    return res;
}

/* ---- answers ------------------------------------------------------------- */

static const char *stop_reason(const oai_job *job, sched_finish f) {
    if (f == SCHED_FINISH_LENGTH) return "max_tokens";
    return job->ch[0].parser.n_calls ? "tool_use" : "end_turn";
}

static void tool_id(const oai_job *job, int k, char *id, size_t cap) {
    snprintf(id, cap, "toolu_%s_%d", job->id + 4, k);
}

static cJSON *tool_use_block(const oai_job *job, int k, bool with_input) {
    const chat_tool_call *c = &job->ch[0].parser.calls[k];
    cJSON *b = cJSON_CreateObject();
    char id[96];
    tool_id(job, k, id, sizeof id);
    cJSON_AddStringToObject(b, "type", "tool_use");
    cJSON_AddStringToObject(b, "id", id);
    cJSON_AddStringToObject(b, "name", c->name);
    cJSON *in = with_input ? cJSON_Parse(c->arguments) : NULL;
    cJSON_AddItemToObject(b, "input", cJSON_IsObject(in) ? in : (cJSON_Delete(in), cJSON_CreateObject()));
    return b;
}

static cJSON *usage(const oai_delta *d, bool final) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", d->n_prompt - d->n_cached);
    cJSON_AddNumberToObject(u, "cache_read_input_tokens", d->n_cached);
    cJSON_AddNumberToObject(u, "output_tokens", final && d->n ? d->ch[0].n_gen : 0);
    return u;
}

static cJSON *message(const oai_server *srv, const oai_job *job) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "id", job->id);
    cJSON_AddStringToObject(m, "type", "message");
    cJSON_AddStringToObject(m, "role", "assistant");
    cJSON_AddStringToObject(m, "model", job->model);
    return m;
}

char *anth_response(const oai_server *srv, oai_job *job, const oai_delta *d) {
    if (d->n < 1) return NULL;
    chat_parser *p = &job->ch[0].parser;
    chat_parser_push(p, d->ch[0].text, d->ch[0].len, d->ch[0].finish != SCHED_RUNNING);
    if (d->finish == SCHED_RUNNING) return NULL;
    cJSON *m = message(srv, job), *content = cJSON_AddArrayToObject(m, "content");
    if (p->reasoning.len) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "thinking");
        cJSON_AddStringToObject(b, "thinking", job->anth_hide_thinking ? "" : p->reasoning.p);
        cJSON_AddStringToObject(b, "signature", "");
        cJSON_AddItemToArray(content, b);
    }
    if (p->content.len || !p->n_calls) {
        cJSON *b = cJSON_CreateObject();
        cJSON_AddStringToObject(b, "type", "text");
        cJSON_AddStringToObject(b, "text", p->content.p ? p->content.p : "");
        cJSON_AddItemToArray(content, b);
    }
    for (int k = 0; k < p->n_calls; k++) cJSON_AddItemToArray(content, tool_use_block(job, k, true));
    cJSON_AddStringToObject(m, "stop_reason", stop_reason(job, d->ch[0].finish));
    cJSON_AddNullToObject(m, "stop_sequence");
    cJSON_AddItemToObject(m, "usage", usage(d, true));
    char *s = cJSON_PrintUnformatted(m);
    cJSON_Delete(m);
    return s;
}

/* One SSE event: "event: TYPE" and the object (which carries the same type). */
static void event(strbuf *out, const char *type, cJSON *o) {
    cJSON_AddItemToObject(o, "type", cJSON_CreateString(type));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) {
        out->failed = true;
        return;
    }
    sb_printf(out, "event: %s\ndata: %s\n\n", type, s);
    free(s);
}

static cJSON *indexed(int index) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", index);
    return o;
}

static void close_block(oai_job *job, strbuf *out) {
    if (!job->anth_open) return;
    event(out, "content_block_stop", indexed(job->anth_block++));
    job->anth_open = 0;
}

/* Opens a text (1) or thinking (2) block unless that kind is open. */
static void open_block(oai_job *job, int kind, strbuf *out) {
    if (job->anth_open == kind) return;
    close_block(job, out);
    cJSON *o = indexed(job->anth_block), *b = cJSON_AddObjectToObject(o, "content_block");
    cJSON_AddStringToObject(b, "type", kind == 1 ? "text" : "thinking");
    cJSON_AddStringToObject(b, kind == 1 ? "text" : "thinking", "");
    if (kind == 2) cJSON_AddStringToObject(b, "signature", "");
    event(out, "content_block_start", o);
    job->anth_open = kind;
}

static void delta(oai_job *job, int kind, strbuf *text, strbuf *out) {
    if (!text->len) return;
    open_block(job, kind, out);
    if (kind == 2 && job->anth_hide_thinking) { /* the block is there, its text is not */
        sb_reset(text);
        return;
    }
    cJSON *o = indexed(job->anth_block), *dl = cJSON_AddObjectToObject(o, "delta");
    cJSON_AddStringToObject(dl, "type", kind == 1 ? "text_delta" : "thinking_delta");
    cJSON_AddStringToObject(dl, kind == 1 ? "text" : "thinking", text->p);
    event(out, "content_block_delta", o);
    sb_reset(text);
}

void anth_stream_events(const oai_server *srv, oai_job *job, const oai_delta *d, strbuf *out) {
    oai_choice *c = &job->ch[0];
    if (d->finish == SCHED_FINISH_ERROR || d->finish == SCHED_FINISH_CANCELLED) {
        cJSON *o = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(o, "error");
        cJSON_AddStringToObject(err, "type", "api_error");
        cJSON_AddStringToObject(err, "message", d->error && d->error[0] ? d->error : "generation cancelled");
        event(out, "error", o);
        return;
    }
    if (!c->head_sent) {
        cJSON *o = cJSON_CreateObject(), *m = message(srv, job);
        cJSON_AddArrayToObject(m, "content");
        cJSON_AddNullToObject(m, "stop_reason");
        cJSON_AddNullToObject(m, "stop_sequence");
        cJSON_AddItemToObject(m, "usage", usage(d, false));
        cJSON_AddItemToObject(o, "message", m);
        event(out, "message_start", o);
        c->head_sent = true;
    }
    if (d->n < 1 || c->done) return;
    bool fin = d->ch[0].finish != SCHED_RUNNING;
    chat_parser *p = &c->parser;
    if (!chat_parser_push(p, d->ch[0].text, d->ch[0].len, fin)) out->failed = true;
    delta(job, 2, &p->reasoning, out);
    delta(job, 1, &p->content, out);
    for (; c->calls_sent < p->n_calls; c->calls_sent++) {
        close_block(job, out);
        cJSON *o = indexed(job->anth_block);
        cJSON_AddItemToObject(o, "content_block", tool_use_block(job, c->calls_sent, false));
        event(out, "content_block_start", o);
        o = indexed(job->anth_block);
        cJSON *dl = cJSON_AddObjectToObject(o, "delta");
        cJSON_AddStringToObject(dl, "type", "input_json_delta");
        cJSON_AddStringToObject(dl, "partial_json", p->calls[c->calls_sent].arguments);
        event(out, "content_block_delta", o);
        event(out, "content_block_stop", indexed(job->anth_block++));
    }
    if (!fin) return;
    close_block(job, out);
    cJSON *o = cJSON_CreateObject(), *dl = cJSON_AddObjectToObject(o, "delta");
    cJSON_AddStringToObject(dl, "stop_reason", stop_reason(job, d->ch[0].finish));
    cJSON_AddNullToObject(dl, "stop_sequence");
    cJSON_AddItemToObject(o, "usage", usage(d, true));
    event(out, "message_delta", o);
    event(out, "message_stop", cJSON_CreateObject());
    c->done = true;
}
