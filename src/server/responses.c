/* responses.c — the Responses API of responses.h. A request is translated to
 * the OpenAI chat shape (instructions -> a system message, message items ->
 * messages, consecutive reasoning / assistant message / function_call items
 * -> one assistant message with reasoning_content and tool_calls,
 * function_call_output items -> tool messages, Responses tools -> chat tools)
 * and parsed by oai_parse_chat, so templates, sampling and the output parser
 * are shared; only the answer's shape is the Responses API's. */
#include "server/responses.h"

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

/* ---- the store ----------------------------------------------------------- */

typedef struct resp_entry {
    char id[48];
    char *items;         /* JSON array: the conversation's input and output items */
    size_t bytes;
} resp_entry;

struct resp_store {
    pthread_mutex_t mu;
    resp_entry *e;       /* (cap) a ring: head is the oldest */
    int cap, head, n;
    size_t bytes, max_bytes;
};

brisk_status resp_store_new(size_t max_bytes, int max_entries, resp_store **out) {
    resp_store *st = calloc(1, sizeof *st);
    if (!st || !(st->e = calloc((size_t)max_entries, sizeof *st->e))) {
        free(st);
        return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    pthread_mutex_init(&st->mu, NULL);
    st->cap = max_entries;
    st->max_bytes = max_bytes;
    *out = st;
    return BRISK_OK;
}

void resp_store_free(resp_store *st) {
    if (!st) return;
    for (int i = 0; i < st->n; i++) free(st->e[(st->head + i) % st->cap].items);
    pthread_mutex_destroy(&st->mu);
    free(st->e);
    free(st);
}

static void drop_oldest(resp_store *st) {
    resp_entry *old = &st->e[st->head];
    st->bytes -= old->bytes;
    free(old->items);
    *old = (resp_entry){0};
    st->head = (st->head + 1) % st->cap;
    st->n--;
}

/* Takes items (malloc'd). A conversation larger than the whole budget is not kept. */
static void store_put(resp_store *st, const char *id, char *items) {
    size_t bytes = strlen(items);
    if (bytes > st->max_bytes) {
        free(items);
        return;
    }
    pthread_mutex_lock(&st->mu);
    while (st->n && (st->n == st->cap || st->bytes + bytes > st->max_bytes)) drop_oldest(st);
    resp_entry *e = &st->e[(st->head + st->n++) % st->cap];
    snprintf(e->id, sizeof e->id, "%s", id);
    e->items = items;
    e->bytes = bytes;
    st->bytes += bytes;
    pthread_mutex_unlock(&st->mu);
}

/* The stored conversation of id (caller deletes), or NULL. */
static cJSON *store_get(resp_store *st, const char *id) {
    cJSON *items = NULL;
    pthread_mutex_lock(&st->mu);
    for (int i = st->n - 1; i >= 0 && !items; i--) {
        resp_entry *e = &st->e[(st->head + i) % st->cap];
        if (!strcmp(e->id, id)) items = cJSON_Parse(e->items);
    }
    pthread_mutex_unlock(&st->mu);
    return items;
}

/* ---- a job's state --------------------------------------------------------- */

typedef struct resp_state {
    resp_store *store;   /* where the finished response goes; NULL: store false */
    cJSON *echo;         /* the request's fields every Response repeats (instructions, tools, ...) */
    cJSON *conv;         /* the conversation's items so far: previous response's, then this input */
    cJSON *output;       /* output items finished so far */
    cJSON *namespaces;   /* {function name: its namespace tool's name}, or NULL */
    cJSON *customs;      /* {name: true} of the custom (freeform) tools, or NULL */
    bool summary;        /* reasoning.summary was asked: the thinking is the summary too */
    int seq;             /* streaming: the next sequence_number */
    int open;            /* streaming: the open output item (0 none, 1 message, 2 reasoning) */
    bool had_message;    /* streaming: a message item went out */
    strbuf text;         /* streaming: the open item's text so far */
} resp_state;

static void state_free(void *p) {
    resp_state *s = p;
    if (!s) return;
    cJSON_Delete(s->echo);
    cJSON_Delete(s->conv);
    cJSON_Delete(s->output);
    cJSON_Delete(s->namespaces);
    cJSON_Delete(s->customs);
    sb_free(&s->text);
    free(s);
}

/* ---- request: Responses -> chat ------------------------------------------ */

static const char *str(const cJSON *o, const char *k) {
    const cJSON *v = oai_get(o, k);
    return cJSON_IsString(v) ? v->valuestring : NULL;
}

/* The text of a string or of an array of text parts (input_text, output_text,
 * text, refusal; parts_key: "text") into b; false on another part. */
static bool parts_text(const cJSON *c, strbuf *b, oai_error *e) {
    if (!c) return true;
    if (cJSON_IsString(c)) {
        sb_puts(b, c->valuestring);
        return true;
    }
    if (!cJSON_IsArray(c)) return oai_fail(e, 400, "input", "content must be a string or an array of parts");
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const char *t = str(part, "type"), *x = str(part, "text");
        if (t && !strcmp(t, "refusal")) x = str(part, "refusal");
        if (!t || !x || (strcmp(t, "input_text") && strcmp(t, "output_text") && strcmp(t, "text") && strcmp(t, "refusal")))
            return oai_fail(e, 400, "input", "content parts of type '%s' are not supported", t ? t : "?");
        sb_puts(b, x);
    }
    return true;
}

/* The assistant turn being collected: reasoning, message and function_call
 * items that follow each other are one assistant message in the chat shape. */
typedef struct turn {
    bool on;
    strbuf text, think;
    cJSON *calls;
} turn;

static void turn_flush(turn *t, cJSON *out) {
    if (t->on) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "assistant");
        cJSON_AddStringToObject(m, "content", t->text.p ? t->text.p : "");
        if (t->think.len) cJSON_AddStringToObject(m, "reasoning_content", t->think.p);
        if (t->calls) cJSON_AddItemToObject(m, "tool_calls", t->calls);
        cJSON_AddItemToArray(out, m);
    } else
        cJSON_Delete(t->calls);
    sb_free(&t->text);
    sb_free(&t->think);
    *t = (turn){0};
}

/* The text of a reasoning item: its reasoning_text content, else its summary. */
static void reasoning_text(const cJSON *item, strbuf *b) {
    const cJSON *arr = oai_get(item, "content"), *p;
    if (!cJSON_GetArraySize(arr)) arr = oai_get(item, "summary");
    cJSON_ArrayForEach(p, arr) if (str(p, "text")) sb_puts(b, str(p, "text"));
}

/* One input item into out (or into the assistant turn t). */
static bool add_item(const cJSON *it, turn *t, cJSON *out, oai_error *e) {
    const char *type = str(it, "type");
    if (!type && str(it, "role")) type = "message";
    if (!type) return oai_fail(e, 400, "input", "each input item needs a type");
    if (!strcmp(type, "message")) {
        const char *role = str(it, "role");
        if (!role || (strcmp(role, "user") && strcmp(role, "assistant") && strcmp(role, "system") && strcmp(role, "developer")))
            return oai_fail(e, 400, "input", "a message needs a role of user, assistant, system or developer");
        if (!strcmp(role, "assistant")) {
            t->on = true;
            return parts_text(oai_get(it, "content"), &t->text, e);
        }
        turn_flush(t, out);
        strbuf b = {0};
        bool ok = parts_text(oai_get(it, "content"), &b, e);
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", !strcmp(role, "developer") ? "system" : role);
        cJSON_AddStringToObject(m, "content", b.p ? b.p : "");
        cJSON_AddItemToArray(out, m);
        sb_free(&b);
        return ok;
    }
    if (!strcmp(type, "function_call")) {
        const char *id = str(it, "call_id"), *name = str(it, "name"), *args = str(it, "arguments");
        if (!id || !name) return oai_fail(e, 400, "input", "a function_call item needs a call_id and a name");
        t->on = true;
        if (!t->calls) t->calls = cJSON_CreateArray();
        cJSON *c = cJSON_CreateObject(), *fn;
        cJSON_AddStringToObject(c, "id", id);
        cJSON_AddStringToObject(c, "type", "function");
        fn = cJSON_AddObjectToObject(c, "function");
        cJSON_AddStringToObject(fn, "name", name);
        cJSON_AddStringToObject(fn, "arguments", args ? args : "{}");
        cJSON_AddItemToArray(t->calls, c);
        return true;
    }
    if (!strcmp(type, "custom_tool_call")) { /* a custom tool's call: its input becomes the one argument */
        const char *id = str(it, "call_id"), *name = str(it, "name"), *input = str(it, "input");
        if (!id || !name) return oai_fail(e, 400, "input", "a custom_tool_call item needs a call_id and a name");
        t->on = true;
        if (!t->calls) t->calls = cJSON_CreateArray();
        cJSON *c = cJSON_CreateObject(), *fn, *args = cJSON_CreateObject();
        cJSON_AddStringToObject(args, "input", input ? input : "");
        char *a = cJSON_PrintUnformatted(args);
        cJSON_Delete(args);
        cJSON_AddStringToObject(c, "id", id);
        cJSON_AddStringToObject(c, "type", "function");
        fn = cJSON_AddObjectToObject(c, "function");
        cJSON_AddStringToObject(fn, "name", name);
        cJSON_AddStringToObject(fn, "arguments", a ? a : "{}");
        free(a);
        cJSON_AddItemToArray(t->calls, c);
        return true;
    }
    if (!strcmp(type, "function_call_output") || !strcmp(type, "custom_tool_call_output")) {
        const char *id = str(it, "call_id");
        if (!id) return oai_fail(e, 400, "input", "a %s item needs a call_id", type);
        turn_flush(t, out);
        strbuf b = {0};
        bool ok = parts_text(oai_get(it, "output"), &b, e);
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "role", "tool");
        cJSON_AddStringToObject(m, "tool_call_id", id);
        cJSON_AddStringToObject(m, "content", b.p ? b.p : "");
        cJSON_AddItemToArray(out, m);
        sb_free(&b);
        return ok;
    }
    if (!strcmp(type, "reasoning")) {
        if (t->text.len || t->calls) turn_flush(t, out); /* reasoning opens a new turn */
        t->on = true;
        reasoning_text(it, &t->think);
        return true;
    }
    return oai_fail(e, 400, "input", "input items of type '%s' are not supported", type);
}

/* One function tool into the chat tools otools. */
static bool add_function(const cJSON *t, cJSON *otools, oai_error *e) {
    const char *name = str(t, "name");
    if (!name) return oai_fail(e, 400, "tools", "each function tool needs a name");
    cJSON *ot = cJSON_CreateObject(), *fn;
    cJSON_AddStringToObject(ot, "type", "function"); /* first: a template's tojson keeps the order */
    fn = cJSON_AddObjectToObject(ot, "function");
    cJSON_AddStringToObject(fn, "name", name);
    if (str(t, "description")) cJSON_AddStringToObject(fn, "description", str(t, "description"));
    if (oai_get(t, "parameters")) cJSON_AddItemToObject(fn, "parameters", cJSON_Duplicate(oai_get(t, "parameters"), true));
    cJSON_AddItemToArray(otools, ot);
    return true;
}

/* A custom (freeform) tool: the model writes free text, its input. It is offered as a function of one
 * string argument, "input"; its calls come back as custom_tool_call items. A grammar format (lark or
 * regex) is shown to the model in the description but not enforced: brisk reads neither syntax. */
static bool add_custom(const cJSON *t, cJSON *otools, resp_state *s, oai_error *e) {
    const char *name = str(t, "name"), *desc = str(t, "description");
    if (!name) return oai_fail(e, 400, "tools", "each custom tool needs a name");
    const cJSON *fmt = oai_get(t, "format");
    const char *ft = str(fmt, "type"), *syntax = str(fmt, "syntax"), *def = str(fmt, "definition");
    bool grammar = ft && !strcmp(ft, "grammar");
    if (fmt && !(ft && !strcmp(ft, "text")) &&
        !(grammar && syntax && (!strcmp(syntax, "lark") || !strcmp(syntax, "regex")) && def))
        return oai_fail(e, 400, "tools", "a custom tool's format must be {type: text} or {type: grammar, syntax: lark or regex, definition}");
    cJSON *ot = cJSON_CreateObject(), *fn, *params, *props;
    cJSON_AddStringToObject(ot, "type", "function");
    fn = cJSON_AddObjectToObject(ot, "function");
    cJSON_AddStringToObject(fn, "name", name);
    strbuf d = {0};
    if (desc) sb_puts(&d, desc);
    if (grammar) sb_printf(&d, "%sIts input follows this %s grammar:\n%s", desc ? "\n\n" : "", syntax, def);
    if (d.len) cJSON_AddStringToObject(fn, "description", d.p);
    sb_free(&d);
    params = cJSON_AddObjectToObject(fn, "parameters");
    cJSON_AddStringToObject(params, "type", "object");
    props = cJSON_AddObjectToObject(params, "properties");
    cJSON_AddStringToObject(cJSON_AddObjectToObject(props, "input"), "type", "string");
    cJSON_AddItemToArray(cJSON_AddArrayToObject(params, "required"), cJSON_CreateString("input"));
    cJSON_AddItemToArray(otools, ot);
    if (!s->customs) s->customs = cJSON_CreateObject();
    cJSON_AddTrueToObject(s->customs, name);
    return true;
}

/* Responses tools -> chat tools; tool_choice likewise. A namespace's
 * functions are offered by their own names (s->namespaces maps each back, for
 * the function_call items); hosted tools (web_search, file_search, ...) are
 * the provider's to run, and brisk runs none: the model is not offered them,
 * as clients such as Codex list them whatever the provider. */
static bool add_tools(const cJSON *root, cJSON *oa, resp_state *s, oai_error *e) {
    const cJSON *tools = oai_get(root, "tools"), *t;
    if (tools && !cJSON_IsArray(tools)) return oai_fail(e, 400, "tools", "'tools' must be an array");
    cJSON *otools = cJSON_CreateArray();
    bool ok = true;
    cJSON_ArrayForEach(t, tools) {
        const char *type = str(t, "type");
        if (!type) ok = oai_fail(e, 400, "tools", "each tool needs a type");
        else if (!strcmp(type, "function")) ok = add_function(t, otools, e);
        else if (!strcmp(type, "custom")) ok = add_custom(t, otools, s, e);
        else if (!strcmp(type, "namespace")) {
            const cJSON *inner = oai_get(t, "tools"), *f;
            const char *ns = str(t, "name");
            if (!ns || !cJSON_IsArray(inner)) ok = oai_fail(e, 400, "tools", "a namespace tool needs a name and tools");
            const cJSON *fns = ok ? inner : NULL;
            cJSON_ArrayForEach(f, fns) {
                if (!ok) break;
                if (!str(f, "type") || strcmp(str(f, "type"), "function")) continue; /* hosted, as above */
                ok = add_function(f, otools, e);
                if (ok && !s->namespaces) s->namespaces = cJSON_CreateObject();
                if (ok) cJSON_AddStringToObject(s->namespaces, str(f, "name"), ns);
            }
        }
        if (!ok) break;
    }
    if (ok && cJSON_GetArraySize(otools)) cJSON_AddItemToObject(oa, "tools", otools);
    else cJSON_Delete(otools);
    if (!ok) return false;
    const cJSON *tc = oai_get(root, "tool_choice");
    if (!tc) return true;
    if (cJSON_IsString(tc) && (!strcmp(tc->valuestring, "auto") || !strcmp(tc->valuestring, "none") ||
                               !strcmp(tc->valuestring, "required"))) {
        cJSON_AddStringToObject(oa, "tool_choice", tc->valuestring);
        return true;
    }
    const char *type = str(tc, "type"), *name = str(tc, "name");
    if (!type || (strcmp(type, "function") && strcmp(type, "custom")) || !name)
        return oai_fail(e, 400, "tool_choice", "'tool_choice' must be auto, none, required, {type: function, name} or {type: custom, name}");
    cJSON *o = cJSON_AddObjectToObject(oa, "tool_choice"), *fn;
    cJSON_AddStringToObject(o, "type", "function");
    fn = cJSON_AddObjectToObject(o, "function");
    cJSON_AddStringToObject(fn, "name", name);
    return true;
}

/* text.format -> response_format; reasoning.effort "none"/"minimal" -> no thinking. */
static bool add_format(const cJSON *root, cJSON *oa, resp_state *s, oai_error *e) {
    const cJSON *fmt = oai_get(oai_get(root, "text"), "format");
    const char *ft = str(fmt, "type");
    if (fmt && !ft) return oai_fail(e, 400, "text", "'text.format' needs a type");
    if (ft && !strcmp(ft, "json_schema")) {
        cJSON *rf = cJSON_AddObjectToObject(oa, "response_format"), *js;
        cJSON_AddStringToObject(rf, "type", "json_schema");
        js = cJSON_AddObjectToObject(rf, "json_schema");
        cJSON_AddStringToObject(js, "name", str(fmt, "name") ? str(fmt, "name") : "schema");
        if (oai_get(fmt, "schema")) cJSON_AddItemToObject(js, "schema", cJSON_Duplicate(oai_get(fmt, "schema"), true));
    } else if (ft && !strcmp(ft, "json_object")) {
        cJSON_AddItemToObject(oa, "response_format", cJSON_Duplicate(fmt, true));
    } else if (ft && strcmp(ft, "text"))
        return oai_fail(e, 400, "text", "'text.format.type' must be text, json_object or json_schema");
    const cJSON *rs = oai_get(root, "reasoning");
    const char *effort = str(rs, "effort");
    s->summary = str(rs, "summary") != NULL;
    if (effort && (!strcmp(effort, "none") || !strcmp(effort, "minimal"))) {
        cJSON *kw = cJSON_AddObjectToObject(oa, "chat_template_kwargs");
        cJSON_AddBoolToObject(kw, "enable_thinking", false);
    }
    return true;
}

/* The conversation: the previous response's items, then this request's input. */
static bool conversation(resp_store *st, const cJSON *root, resp_state *s, oai_error *e) {
    const cJSON *input = oai_get(root, "input"), *prev = oai_get(root, "previous_response_id");
    if (prev && !cJSON_IsString(prev))
        return oai_fail(e, 400, "previous_response_id", "'previous_response_id' must be a string");
    if (prev && !(s->conv = store_get(st, prev->valuestring))) {
        oai_fail(e, 400, "previous_response_id", "Previous response with id '%s' not found.", prev->valuestring);
        e->code = "previous_response_not_found";
        return false;
    }
    if (!s->conv) s->conv = cJSON_CreateArray();
    if (cJSON_IsString(input)) {
        cJSON *m = cJSON_CreateObject();
        cJSON_AddStringToObject(m, "type", "message");
        cJSON_AddStringToObject(m, "role", "user");
        cJSON_AddStringToObject(m, "content", input->valuestring);
        cJSON_AddItemToArray(s->conv, m);
    } else if (cJSON_IsArray(input)) {
        const cJSON *it;
        cJSON_ArrayForEach(it, input) cJSON_AddItemToArray(s->conv, cJSON_Duplicate(it, true));
    } else
        return oai_fail(e, 400, "input", "'input' must be a string or an array of items");
    if (!cJSON_GetArraySize(s->conv)) return oai_fail(e, 400, "input", "'input' is empty");
    return true;
}

/* What every Response repeats of its request; parallel: the parallel_tool_calls it ran with. */
static cJSON *echo(const cJSON *root, bool parallel) {
    cJSON *o = cJSON_CreateObject(), *r;
    const char *keys[] = {"instructions", "max_output_tokens", "previous_response_id"};
    for (size_t i = 0; i < sizeof keys / sizeof *keys; i++) {
        if (oai_get(root, keys[i])) oai_copy_field(root, keys[i], o, keys[i]);
        else cJSON_AddNullToObject(o, keys[i]);
    }
    cJSON_AddNumberToObject(o, "temperature", cJSON_IsNumber(oai_get(root, "temperature")) ? oai_get(root, "temperature")->valuedouble : 1);
    cJSON_AddNumberToObject(o, "top_p", cJSON_IsNumber(oai_get(root, "top_p")) ? oai_get(root, "top_p")->valuedouble : 1);
    if (oai_get(root, "tools")) oai_copy_field(root, "tools", o, "tools");
    else cJSON_AddArrayToObject(o, "tools");
    if (oai_get(root, "tool_choice")) oai_copy_field(root, "tool_choice", o, "tool_choice");
    else cJSON_AddStringToObject(o, "tool_choice", "auto");
    cJSON_AddBoolToObject(o, "parallel_tool_calls", parallel);
    r = cJSON_AddObjectToObject(o, "reasoning");
    const char *effort = str(oai_get(root, "reasoning"), "effort"), *summary = str(oai_get(root, "reasoning"), "summary");
    if (effort) cJSON_AddStringToObject(r, "effort", effort);
    else cJSON_AddNullToObject(r, "effort");
    if (summary) cJSON_AddStringToObject(r, "summary", summary);
    else cJSON_AddNullToObject(r, "summary");
    if (oai_get(root, "text")) oai_copy_field(root, "text", o, "text");
    else cJSON_AddStringToObject(cJSON_AddObjectToObject(cJSON_AddObjectToObject(o, "text"), "format"), "type", "text");
    cJSON_AddBoolToObject(o, "store", !cJSON_IsFalse(oai_get(root, "store")));
    cJSON_AddStringToObject(o, "truncation", "disabled");
    if (cJSON_IsObject(oai_get(root, "metadata"))) oai_copy_field(root, "metadata", o, "metadata");
    else cJSON_AddObjectToObject(o, "metadata");
    return o;
}

/* The chat request (caller frees) for a Responses body; NULL and e on a bad one. */
static cJSON *to_chat(const oai_server *srv, resp_store *st, const cJSON *root, resp_state *s, oai_error *e) {
    const cJSON *model = oai_get(root, "model"), *mt = oai_get(root, "max_output_tokens"), *ins = oai_get(root, "instructions");
    if (!cJSON_IsString(model)) return oai_fail(e, 400, "model", "'model' is required"), NULL;
    if (!oai_model_ok(srv, model->valuestring, e)) return NULL;
    if (mt && (!cJSON_IsNumber(mt) || mt->valuedouble < 1))
        return oai_fail(e, 400, "max_output_tokens", "'max_output_tokens' must be a positive integer"), NULL;
    if (ins && !cJSON_IsString(ins))
        return oai_fail(e, 400, "instructions", "'instructions' must be a string"), NULL;
    if (cJSON_IsTrue(oai_get(root, "background")))
        return oai_fail(e, 400, "background", "background responses are not supported"), NULL;
    if (oai_get(root, "conversation"))
        return oai_fail(e, 400, "conversation", "conversations are not supported; use previous_response_id"), NULL;
    if (!conversation(st, root, s, e)) return NULL;
    cJSON *oa = cJSON_CreateObject(), *out = cJSON_AddArrayToObject(oa, "messages");
    if (ins) oai_add_message(out, "system", ins->valuestring); /* not stored: a later turn's instructions replace it */
    turn t = {0};
    bool ok = true;
    const cJSON *it;
    cJSON_ArrayForEach(it, s->conv) if (ok) ok = add_item(it, &t, out, e);
    turn_flush(&t, out);
    if (ok) ok = add_tools(root, oa, s, e);
    if (ok) ok = add_format(root, oa, s, e);
    if (mt) cJSON_AddNumberToObject(oa, "max_tokens", mt->valuedouble);
    static const char *const fields[] = {"temperature", "temperature", "top_p", "top_p", "stream", "stream",
                                         "grammar", "grammar", /* brisk's extensions, as on /v1/chat/completions; */
                                         "ignore_eos", "ignore_eos", /* llama-server passes every field on */
                                         "parallel_tool_calls", "parallel_tool_calls",
                                         "model", "model", NULL}; /* answered with the name asked for */
    oai_copy_fields(root, oa, fields);
    if (!ok) {
        cJSON_Delete(oa);
        return NULL;
    }
    return oa;
}

bool resp_parse(const oai_server *srv, resp_store *st, const char *body, size_t len, oai_job *job, oai_error *e) {
    memset(job, 0, sizeof *job);
    cJSON *root = oai_parse_body(body, len, e);
    if (!root) return false;
    resp_state *s = calloc(1, sizeof *s);
    if (!s) {
        cJSON_Delete(root);
        return oai_fail(e, 500, NULL, "out of memory");
    }
    cJSON *oa = to_chat(srv, st, root, s, e);
    bool ok = oa && oai_parse_chat(srv, oa, job, e); /* memsets job: s goes in after */
    cJSON_Delete(oa);
    if (!ok && e->code && !strcmp(e->code, "context_length_exceeded")) snprintf(e->param, sizeof e->param, "input");
    s->echo = echo(root, job->parallel_tools);
    s->output = cJSON_CreateArray();
    s->store = cJSON_IsFalse(oai_get(root, "store")) ? NULL : st;
    cJSON_Delete(root);
    job->ext = s;
    job->ext_free = state_free;
    if (ok && job->n != 1) ok = oai_fail(e, 400, "n", "the Responses API gives one output");
    char id[sizeof job->id];
    snprintf(id, sizeof id, "resp_%s", job->id[0] ? job->id + strlen("chatcmpl-") : "0");
    memcpy(job->id, id, sizeof id);
    return ok;
}

/* ---- answers ------------------------------------------------------------- */

/* The id of output item k: the response's, with a kind prefix. */
static void item_id(const oai_job *job, const char *prefix, int k, char *out, size_t cap) {
    snprintf(out, cap, "%s_%s_%d", prefix, job->id + 5, k);
}

static cJSON *text_part(const char *text) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", "output_text");
    cJSON_AddStringToObject(p, "text", text);
    cJSON_AddArrayToObject(p, "annotations");
    cJSON_AddArrayToObject(p, "logprobs");
    return p;
}

static cJSON *reasoning_part(const char *type, const char *text) {
    cJSON *p = cJSON_CreateObject();
    cJSON_AddStringToObject(p, "type", type);
    cJSON_AddStringToObject(p, "text", text);
    return p;
}

/* Output item k: a message (kind 1) or reasoning (2) with text; text NULL: as
 * it opens (no content yet, in progress). */
static cJSON *text_item(const oai_job *job, const resp_state *s, int kind, int k, const char *text) {
    cJSON *it = cJSON_CreateObject();
    char id[96];
    item_id(job, kind == 1 ? "msg" : "rs", k, id, sizeof id);
    cJSON_AddStringToObject(it, "id", id);
    cJSON_AddStringToObject(it, "type", kind == 1 ? "message" : "reasoning");
    if (kind == 1) cJSON_AddStringToObject(it, "role", "assistant");
    cJSON_AddStringToObject(it, "status", text ? "completed" : "in_progress");
    if (kind == 2) {
        cJSON *sum = cJSON_AddArrayToObject(it, "summary");
        if (text && s->summary) cJSON_AddItemToArray(sum, reasoning_part("summary_text", text));
    }
    cJSON *content = cJSON_AddArrayToObject(it, "content");
    if (text) cJSON_AddItemToArray(content, kind == 1 ? text_part(text) : reasoning_part("reasoning_text", text));
    return it;
}

/* A custom tool's call: its input is the "input" argument (the arguments' text when they hold none). */
static bool custom_input(const resp_state *s, const chat_tool_call *c, strbuf *input) {
    if (!cJSON_GetObjectItemCaseSensitive(s->customs, c->name)) return false;
    cJSON *a = cJSON_Parse(c->arguments ? c->arguments : "");
    const char *in = str(a, "input");
    sb_puts(input, in ? in : c->arguments ? c->arguments : "");
    cJSON_Delete(a);
    return true;
}

static cJSON *call_item(const oai_job *job, const resp_state *s, const chat_tool_call *c, int call, int k, bool done) {
    cJSON *it = cJSON_CreateObject();
    char id[96];
    strbuf input = {0};
    if (custom_input(s, c, &input)) { /* as OpenAI's: no status */
        item_id(job, "ctc", k, id, sizeof id);
        cJSON_AddStringToObject(it, "id", id);
        cJSON_AddStringToObject(it, "type", "custom_tool_call");
        item_id(job, "call", call, id, sizeof id);
        cJSON_AddStringToObject(it, "call_id", id);
        cJSON_AddStringToObject(it, "name", c->name);
        cJSON_AddStringToObject(it, "input", done && input.p ? input.p : "");
        sb_free(&input);
        return it;
    }
    item_id(job, "fc", k, id, sizeof id);
    cJSON_AddStringToObject(it, "id", id);
    cJSON_AddStringToObject(it, "type", "function_call");
    cJSON_AddStringToObject(it, "status", done ? "completed" : "in_progress");
    item_id(job, "call", call, id, sizeof id);
    cJSON_AddStringToObject(it, "call_id", id);
    cJSON_AddStringToObject(it, "name", c->name);
    const char *ns = str(s->namespaces, c->name);
    if (ns) cJSON_AddStringToObject(it, "namespace", ns);
    cJSON_AddStringToObject(it, "arguments", done ? c->arguments : "");
    return it;
}

static cJSON *usage(const oai_delta *d) {
    int n_gen = d->n ? d->ch[0].n_gen : 0;
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "input_tokens", d->n_prompt);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "input_tokens_details"), "cached_tokens", d->n_cached);
    cJSON_AddNumberToObject(u, "output_tokens", n_gen);
    cJSON_AddNumberToObject(cJSON_AddObjectToObject(u, "output_tokens_details"), "reasoning_tokens", 0);
    cJSON_AddNumberToObject(u, "total_tokens", d->n_prompt + n_gen);
    return u;
}

/* The Response: d NULL while in progress; else finished, with its output and usage. */
static cJSON *response(const oai_server *srv, const oai_job *job, const resp_state *s, const oai_delta *d) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", job->id);
    cJSON_AddStringToObject(o, "object", "response");
    cJSON_AddNumberToObject(o, "created_at", (double)job->created);
    bool cut = d && d->n && d->ch[0].finish == SCHED_FINISH_LENGTH;
    cJSON_AddStringToObject(o, "status", !d ? "in_progress" : cut ? "incomplete" : "completed");
    cJSON_AddNullToObject(o, "error");
    if (cut) cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "incomplete_details"), "reason", "max_output_tokens");
    else cJSON_AddNullToObject(o, "incomplete_details");
    cJSON_AddStringToObject(o, "model", job->model);
    cJSON_AddItemToObject(o, "output", d ? cJSON_Duplicate(s->output, true) : cJSON_CreateArray());
    if (d) cJSON_AddItemToObject(o, "usage", usage(d));
    else cJSON_AddNullToObject(o, "usage");
    const cJSON *f;
    cJSON_ArrayForEach(f, s->echo) cJSON_AddItemToObject(o, f->string, cJSON_Duplicate(f, true));
    return o;
}

/* A finished response's conversation goes into the store (unless store: false). */
static void keep(const oai_job *job, resp_state *s) {
    if (!s->store) return;
    const cJSON *it;
    cJSON_ArrayForEach(it, s->output) cJSON_AddItemToArray(s->conv, cJSON_Duplicate(it, true));
    char *items = cJSON_PrintUnformatted(s->conv);
    if (items) store_put(s->store, job->id, items);
}

char *resp_response(const oai_server *srv, oai_job *job, const oai_delta *d) {
    if (d->n < 1) return NULL;
    resp_state *s = job->ext;
    chat_parser *p = &job->ch[0].parser;
    chat_parser_push(p, d->ch[0].text, d->ch[0].len, d->ch[0].finish != SCHED_RUNNING);
    if (d->finish == SCHED_RUNNING) return NULL;
    if (p->reasoning.len) cJSON_AddItemToArray(s->output, text_item(job, s, 2, cJSON_GetArraySize(s->output), p->reasoning.p));
    if (p->content.len || !p->n_calls)
        cJSON_AddItemToArray(s->output, text_item(job, s, 1, cJSON_GetArraySize(s->output), p->content.p ? p->content.p : ""));
    for (int k = 0; k < p->n_calls; k++)
        cJSON_AddItemToArray(s->output, call_item(job, s, &p->calls[k], k, cJSON_GetArraySize(s->output), true));
    keep(job, s);
    cJSON *o = response(srv, job, s, d);
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return js;
}

/* One SSE event: "event: TYPE" and the object, which carries the type and the next sequence_number. */
static void event(resp_state *s, strbuf *out, const char *type, cJSON *o) {
    cJSON_AddStringToObject(o, "type", type);
    cJSON_AddNumberToObject(o, "sequence_number", s->seq++);
    char *js = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!js) {
        out->failed = true;
        return;
    }
    sb_printf(out, "event: %s\ndata: %s\n\n", type, js);
    free(js);
}

/* {item_id, output_index, content_index} of the open item's one content part. */
static cJSON *at_part(const oai_job *job, const resp_state *s, int kind) {
    cJSON *o = cJSON_CreateObject();
    char id[96];
    int k = cJSON_GetArraySize(s->output);
    item_id(job, kind == 1 ? "msg" : "rs", k, id, sizeof id);
    cJSON_AddStringToObject(o, "item_id", id);
    cJSON_AddNumberToObject(o, "output_index", k);
    cJSON_AddNumberToObject(o, "content_index", 0);
    return o;
}

static cJSON *at_item(cJSON *item, int k) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "output_index", k);
    cJSON_AddItemToObject(o, "item", item);
    return o;
}

/* Ends the open message or reasoning item: its .done events, then it joins the output. */
static void close_item(const oai_job *job, resp_state *s, strbuf *out) {
    if (!s->open) return;
    int kind = s->open, k = cJSON_GetArraySize(s->output);
    const char *text = s->text.p ? s->text.p : "";
    cJSON *o = at_part(job, s, kind);
    cJSON_AddStringToObject(o, "text", text);
    if (kind == 1) cJSON_AddArrayToObject(o, "logprobs");
    event(s, out, kind == 1 ? "response.output_text.done" : "response.reasoning_text.done", o);
    o = at_part(job, s, kind);
    cJSON_AddItemToObject(o, "part", kind == 1 ? text_part(text) : reasoning_part("reasoning_text", text));
    event(s, out, "response.content_part.done", o);
    cJSON *item = text_item(job, s, kind, k, text);
    cJSON_AddItemToArray(s->output, cJSON_Duplicate(item, true));
    event(s, out, "response.output_item.done", at_item(item, k));
    sb_reset(&s->text);
    s->open = 0;
}

/* Opens a message (1) or reasoning (2) item with its one content part, unless that kind is open. */
static void open_item(const oai_job *job, resp_state *s, int kind, strbuf *out) {
    if (s->open == kind) return;
    close_item(job, s, out);
    int k = cJSON_GetArraySize(s->output);
    event(s, out, "response.output_item.added", at_item(text_item(job, s, kind, k, NULL), k));
    cJSON *o = at_part(job, s, kind);
    cJSON_AddItemToObject(o, "part", kind == 1 ? text_part("") : reasoning_part("reasoning_text", ""));
    event(s, out, "response.content_part.added", o);
    s->open = kind;
    if (kind == 1) s->had_message = true;
}

static void delta(const oai_job *job, resp_state *s, int kind, strbuf *text, strbuf *out) {
    if (!text->len) return;
    open_item(job, s, kind, out);
    cJSON *o = at_part(job, s, kind);
    cJSON_AddStringToObject(o, "delta", text->p);
    if (kind == 1) cJSON_AddArrayToObject(o, "logprobs");
    event(s, out, kind == 1 ? "response.output_text.delta" : "response.reasoning_text.delta", o);
    sb_append(&s->text, text->p, text->len);
    sb_reset(text);
}

/* A parsed function call: it comes whole, so its events go out together. */
static void call_events(const oai_job *job, resp_state *s, int call, strbuf *out) {
    const chat_tool_call *c = &job->ch[0].parser.calls[call];
    close_item(job, s, out);
    int k = cJSON_GetArraySize(s->output);
    char id[96];
    strbuf input = {0};
    bool custom = custom_input(s, c, &input);
    const char *text = custom ? (input.p ? input.p : "") : c->arguments;
    item_id(job, custom ? "ctc" : "fc", k, id, sizeof id);
    event(s, out, "response.output_item.added", at_item(call_item(job, s, c, call, k, false), k));
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "item_id", id);
    cJSON_AddNumberToObject(o, "output_index", k);
    cJSON_AddStringToObject(o, "delta", text);
    event(s, out, custom ? "response.custom_tool_call_input.delta" : "response.function_call_arguments.delta", o);
    o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "item_id", id);
    cJSON_AddNumberToObject(o, "output_index", k);
    cJSON_AddStringToObject(o, custom ? "input" : "arguments", text);
    event(s, out, custom ? "response.custom_tool_call_input.done" : "response.function_call_arguments.done", o);
    sb_free(&input);
    cJSON *item = call_item(job, s, c, call, k, true);
    cJSON_AddItemToArray(s->output, cJSON_Duplicate(item, true));
    event(s, out, "response.output_item.done", at_item(item, k));
}

void resp_stream_events(const oai_server *srv, oai_job *job, const oai_delta *d, strbuf *out) {
    resp_state *s = job->ext;
    oai_choice *c = &job->ch[0];
    if (d->finish == SCHED_FINISH_ERROR || d->finish == SCHED_FINISH_CANCELLED) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "code", "server_error");
        cJSON_AddStringToObject(o, "message", d->error && d->error[0] ? d->error : "generation cancelled");
        cJSON_AddNullToObject(o, "param");
        event(s, out, "error", o);
        return;
    }
    if (!c->head_sent) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "response", response(srv, job, s, NULL));
        event(s, out, "response.created", o);
        o = cJSON_CreateObject();
        cJSON_AddItemToObject(o, "response", response(srv, job, s, NULL));
        event(s, out, "response.in_progress", o);
        c->head_sent = true;
    }
    if (d->n < 1 || c->done) return;
    bool fin = d->ch[0].finish != SCHED_RUNNING;
    chat_parser *p = &c->parser;
    if (!chat_parser_push(p, d->ch[0].text, d->ch[0].len, fin)) out->failed = true;
    delta(job, s, 2, &p->reasoning, out);
    delta(job, s, 1, &p->content, out);
    for (; c->calls_sent < p->n_calls; c->calls_sent++) call_events(job, s, c->calls_sent, out);
    if (!fin) return;
    if (!s->had_message && !p->n_calls) open_item(job, s, 1, out); /* as the whole answer has: an empty message */
    close_item(job, s, out);
    keep(job, s);
    cJSON *o = cJSON_CreateObject();
    cJSON *r = response(srv, job, s, d);
    bool cut = !strcmp(cJSON_GetObjectItem(r, "status")->valuestring, "incomplete");
    cJSON_AddItemToObject(o, "response", r);
    /* llama-server adds its timings to this last event (beside "response"; not in the non-streamed body) */
    cJSON_AddItemToObject(o, "timings", oai_timings(d));
    event(s, out, cut ? "response.incomplete" : "response.completed", o);
    c->done = true;
}
