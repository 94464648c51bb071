/* openai.c — request parsing and response shapes of openai.h. */
#include "server/openai.h"

#include <cjson/cJSON.h>
#include <math.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"

bool oai_fail(oai_error *e, int status, const char *param, const char *fmt, ...) {
    e->status = status;
    e->type = status == 401 ? "authentication_error"
              : status == 429 ? "rate_limit_error"
              : status >= 500 ? "server_error"
                              : "invalid_request_error";
    snprintf(e->param, sizeof e->param, "%s", param ? param : "");
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(e->message, sizeof e->message, fmt, ap);
    va_end(ap);
    return false;
}

char *oai_error_json(const oai_error *e) {
    cJSON *root = cJSON_CreateObject(), *err = cJSON_AddObjectToObject(root, "error");
    cJSON_AddStringToObject(err, "message", e->message);
    cJSON_AddStringToObject(err, "type", e->type ? e->type : "invalid_request_error");
    if (e->param[0]) cJSON_AddStringToObject(err, "param", e->param);
    else cJSON_AddNullToObject(err, "param");
    if (e->code) cJSON_AddStringToObject(err, "code", e->code);
    else cJSON_AddNullToObject(err, "code");
    char *s = cJSON_PrintUnformatted(root);
    cJSON_Delete(root);
    return s;
}

const cJSON *oai_get(const cJSON *o, const char *k) {
    const cJSON *v = cJSON_IsObject(o) ? cJSON_GetObjectItemCaseSensitive(o, k) : NULL;
    return v && !cJSON_IsNull(v) ? v : NULL;
}

bool oai_copy_field(const cJSON *from, const char *k, cJSON *to, const char *as) {
    const cJSON *v = oai_get(from, k);
    if (v) cJSON_AddItemToObject(to, as, cJSON_Duplicate(v, true));
    return v != NULL;
}

void oai_copy_fields(const cJSON *from, cJSON *to, const char *const *map) {
    for (; map[0]; map += 2) oai_copy_field(from, map[0], to, map[1]);
}

void oai_add_message(cJSON *msgs, const char *role, const char *text) {
    cJSON *m = cJSON_CreateObject();
    cJSON_AddStringToObject(m, "role", role);
    cJSON_AddStringToObject(m, "content", text);
    cJSON_AddItemToArray(msgs, m);
}

brisk_status oai_server_init(oai_server *srv) {
    int nv = brisk_n_vocab(srv->model);
    char buf[1100];
    size_t mx = 1;
    for (int t = 0; t < nv; t++) {
        size_t len = 0; /* control tokens included: the prompt's text may spell them */
        if (brisk_token_to_piece(srv->model, t, true, buf, sizeof buf, &len) == BRISK_OK && len > mx) mx = len;
    }
    srv->max_piece = mx;
    return BRISK_OK;
}

bool oai_model_ok(const oai_server *srv, const char *name, oai_error *e) {
    if (!strcmp(name, srv->model_id)) return true;
    for (int i = 0; i < srv->n_names; i++)
        if (!strcmp(name, srv->names[i])) return true;
    oai_fail(e, 404, "model", "The model '%s' does not exist; this server has '%s' (add names with --alias)", name,
             srv->model_id);
    e->code = "model_not_found";
    return false;
}

cJSON *oai_parse_body(const char *body, size_t len, oai_error *e) {
    /* cJSON ends a string at an escaped NUL: the rest of a prompt would vanish unseen */
    for (size_t i = 0; i + 1 < len; i++) {
        if (body[i] != '\\') continue;
        if (body[i + 1] == 'u' && i + 5 < len && !memcmp(body + i + 2, "0000", 4))
            return oai_fail(e, 400, NULL, "strings must not contain NUL characters (\\u0000)"), NULL;
        i++; /* the escaped character */
    }
    cJSON *root = cJSON_ParseWithLength(body, len);
    if (!root) return oai_fail(e, 400, NULL, "the body is not valid JSON"), NULL;
    if (!cJSON_IsObject(root)) {
        cJSON_Delete(root);
        return oai_fail(e, 400, NULL, "the body must be a JSON object"), NULL;
    }
    return root;
}

/* Length of the valid UTF-8 sequence at s (n bytes left), 0 when invalid. */
static size_t utf8_len(const unsigned char *s, size_t n) {
    unsigned c = s[0];
    size_t k = c < 0x80 ? 1 : (c & 0xE0) == 0xC0 ? 2 : (c & 0xF0) == 0xE0 ? 3 : (c & 0xF8) == 0xF0 ? 4 : 0;
    if (!k || k > n || (k == 2 && c < 0xC2) || (k == 4 && c > 0xF4)) return 0;
    for (size_t i = 1; i < k; i++)
        if ((s[i] & 0xC0) != 0x80) return 0;
    if (k == 3 && ((c == 0xE0 && s[1] < 0xA0) || (c == 0xED && s[1] >= 0xA0))) return 0; /* overlong, surrogate */
    if (k == 4 && ((c == 0xF0 && s[1] < 0x90) || (c == 0xF4 && s[1] >= 0x90))) return 0;
    return k;
}

static bool utf8_valid(const char *s, size_t n) {
    bool valid = true;
    for (size_t i = 0, k; i < n && valid; i += k) valid = (k = utf8_len((const unsigned char *)s + i, n - i)) > 0;
    return valid;
}

void oai_token_text(const char *s, size_t n, char *out, size_t cap) {
    if (!cap) return;
    const unsigned char *u = (const unsigned char *)s;
    size_t o = 0;
    if (utf8_valid(s, n)) {
        o = n < cap ? n : cap - 1;
        if (o) memcpy(out, s, o);
    } else {
        o = (size_t)snprintf(out, cap, "bytes:");
        for (size_t i = 0; i < n && o + 5 < cap; i++) o += (size_t)snprintf(out + o, cap - o, "\\x%02x", u[i]);
    }
    out[o < cap ? o : cap - 1] = 0;
}

/* ---- typed field access: absent or null -> false with no error --------- */

static const cJSON *field(const cJSON *o, const char *key) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(o, key);
    return v && !cJSON_IsNull(v) ? v : NULL;
}

/* A number in [lo, hi] (integer when asked). *ok false on a type or range error (e filled). */
static bool get_num(const cJSON *o, const char *key, double lo, double hi, bool integer, double *out, bool *ok,
                    oai_error *e) {
    const cJSON *v = field(o, key);
    if (!v) return false;
    if (!cJSON_IsNumber(v) || (integer && v->valuedouble != floor(v->valuedouble)))
        return *ok = oai_fail(e, 400, key, "'%s' must be %s", key, integer ? "an integer" : "a number");
    if (!(v->valuedouble >= lo && v->valuedouble <= hi))
        return *ok = oai_fail(e, 400, key, "'%s' must be between %g and %g, got %g", key, lo, hi, v->valuedouble);
    *out = v->valuedouble;
    return true;
}

static bool get_bool(const cJSON *o, const char *key, bool *out, bool *ok, oai_error *e) {
    const cJSON *v = field(o, key);
    if (!v) return false;
    if (!cJSON_IsBool(v)) return *ok = oai_fail(e, 400, key, "'%s' must be a boolean", key);
    *out = cJSON_IsTrue(v);
    return true;
}

/* Content as a string: a string, or an array of {"type":"text","text":...} parts. */
static bool content_text(const cJSON *c, strbuf *b, oai_error *e) {
    if (!c || cJSON_IsNull(c)) return true;
    if (cJSON_IsString(c)) {
        sb_puts(b, c->valuestring);
        return true;
    }
    if (!cJSON_IsArray(c)) return oai_fail(e, 400, "messages", "message content must be a string or an array of parts");
    const cJSON *part;
    cJSON_ArrayForEach(part, c) {
        const cJSON *t = cJSON_GetObjectItemCaseSensitive(part, "type");
        const cJSON *x = cJSON_GetObjectItemCaseSensitive(part, "text");
        if (!cJSON_IsString(t) || strcmp(t->valuestring, "text") || !cJSON_IsString(x))
            return oai_fail(e, 400, "messages", "only text content parts are supported");
        sb_puts(b, x->valuestring);
    }
    return true;
}

/* Messages with string contents, checked roles; NULL and e on a bad shape. */
static cJSON *normalize_messages(const cJSON *msgs, oai_error *e) {
    if (!cJSON_IsArray(msgs) || cJSON_GetArraySize(msgs) == 0)
        return oai_fail(e, 400, "messages", "'messages' must be a non-empty array"), NULL;
    cJSON *out = cJSON_CreateArray();
    const cJSON *m;
    cJSON_ArrayForEach(m, msgs) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        static const char *const roles[] = {"system", "user", "assistant", "tool", "developer"};
        bool known = false;
        for (size_t i = 0; cJSON_IsString(role) && i < sizeof roles / sizeof *roles; i++)
            known |= !strcmp(role->valuestring, roles[i]);
        if (!cJSON_IsObject(m) || !known) {
            cJSON_Delete(out);
            return oai_fail(e, 400, "messages",
                            "each message must be an object with a role of system, user, assistant, tool or developer"),
                   NULL;
        }
        strbuf b = {0};
        if (!content_text(cJSON_GetObjectItemCaseSensitive(m, "content"), &b, e)) {
            sb_free(&b);
            cJSON_Delete(out);
            return NULL;
        }
        cJSON *n = cJSON_Duplicate(m, true);
        char *text = sb_take(&b);
        cJSON_ReplaceItemInObjectCaseSensitive(n, "role",
                                               cJSON_CreateString(strcmp(role->valuestring, "developer") ? role->valuestring : "system"));
        cJSON_DeleteItemFromObjectCaseSensitive(n, "content");
        cJSON_AddStringToObject(n, "content", text ? text : "");
        free(text);
        /* OpenAI sends tool-call arguments as a JSON string; templates iterate
         * them as a mapping (Qwen3.5/3.6 `arguments|items`), as HF's apply does. */
        cJSON *calls = cJSON_GetObjectItemCaseSensitive(n, "tool_calls"), *call;
        cJSON_ArrayForEach(call, calls) {
            cJSON *fn = cJSON_GetObjectItemCaseSensitive(call, "function");
            cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
            if (!cJSON_IsString(args)) continue;
            cJSON *obj = cJSON_Parse(args->valuestring);
            if (cJSON_IsObject(obj)) cJSON_ReplaceItemInObjectCaseSensitive(fn, "arguments", obj);
            else cJSON_Delete(obj);
        }
        cJSON_AddItemToArray(out, n);
    }
    return out;
}

static bool parse_stop(const cJSON *root, sched_gen_params *p, oai_error *e) {
    const cJSON *v = field(root, "stop");
    if (!v) return true;
    const cJSON *one = v, *it;
    if (cJSON_IsString(v)) goto add;
    if (!cJSON_IsArray(v)) return oai_fail(e, 400, "stop", "'stop' must be a string or an array of strings");
    if (cJSON_GetArraySize(v) > SCHED_MAX_STOP)
        return oai_fail(e, 400, "stop", "at most %d stop strings", SCHED_MAX_STOP);
    cJSON_ArrayForEach(it, v) {
        one = it;
    add:
        if (!cJSON_IsString(one)) return oai_fail(e, 400, "stop", "'stop' must be a string or an array of strings");
        if (!one->valuestring[0]) return oai_fail(e, 400, "stop", "stop strings must not be empty");
        if (!(p->stop[p->n_stop++] = strdup(one->valuestring))) return oai_fail(e, 500, NULL, "out of memory");
        if (one == v) break;
    }
    return true;
}

/* logit_bias: {"token id": bias in [-100, 100], ...} */
static bool parse_bias(const oai_server *srv, const cJSON *root, sched_gen_params *p, oai_error *e) {
    const cJSON *b = field(root, "logit_bias"), *it;
    if (!b) return true;
    if (!cJSON_IsObject(b)) return oai_fail(e, 400, "logit_bias", "'logit_bias' must be an object of token id -> bias");
    int n = cJSON_GetArraySize(b), nv = brisk_n_vocab(srv->model);
    if (n > 1024) return oai_fail(e, 400, "logit_bias", "at most 1024 logit_bias entries");
    if (!n) return true;
    if (!(p->bias_id = malloc((size_t)n * sizeof *p->bias_id)) || !(p->bias = malloc((size_t)n * sizeof *p->bias)))
        return oai_fail(e, 500, NULL, "out of memory");
    cJSON_ArrayForEach(it, b) {
        char *end = NULL;
        long id = strtol(it->string, &end, 10);
        if (!it->string[0] || *end || id < 0 || id >= nv)
            return oai_fail(e, 400, "logit_bias", "logit_bias keys must be token ids in [0, %d), got '%s'", nv,
                            it->string);
        if (!cJSON_IsNumber(it) || !(it->valuedouble >= -100 && it->valuedouble <= 100))
            return oai_fail(e, 400, "logit_bias", "logit_bias values must be numbers in [-100, 100]");
        p->bias_id[p->n_bias] = (brisk_token)id;
        p->bias[p->n_bias++] = (float)it->valuedouble;
    }
    return true;
}

static bool parse_sampling(const oai_server *srv, const cJSON *root, bool chat, oai_job *job, oai_error *e) {
    sched_gen_params *p = &job->req->p;
    bool ok = true;
    double v;
    if (get_num(root, "temperature", 0, 2, false, &v, &ok, e)) p->sp.temp = (float)v;
    if (get_num(root, "top_p", 0, 1, false, &v, &ok, e)) p->sp.top_p = (float)v;
    if (get_num(root, "top_k", 0, 1 << 20, true, &v, &ok, e)) p->sp.top_k = (int)v;
    if (get_num(root, "min_p", 0, 1, false, &v, &ok, e)) p->sp.min_p = (float)v;
    if (get_num(root, "presence_penalty", -2, 2, false, &v, &ok, e)) p->sp.presence_penalty = (float)v;
    if (get_num(root, "frequency_penalty", -2, 2, false, &v, &ok, e)) p->sp.frequency_penalty = (float)v;
    if (get_num(root, "repeat_penalty", 0, 10, false, &v, &ok, e)) p->sp.repeat_penalty = (float)v;
    if (get_num(root, "seed", -9.2e18, 1.8e19, true, &v, &ok, e)) p->sp.seed = (uint64_t)(int64_t)v;
    else { /* a count as well: two requests in one second, their job at one address, would sample alike */
        static atomic_ullong n_unseeded;
        p->sp.seed = ((uint64_t)time(NULL) + atomic_fetch_add(&n_unseeded, 1) * 0xBF58476D1CE4E5B9ull) *
                         0x9E3779B97F4A7C15ull ^ (uint64_t)(uintptr_t)job;
    }
    if (get_num(root, "max_tokens", 0, 1 << 30, true, &v, &ok, e)) p->max_tokens = (int)v;
    if (get_num(root, "max_completion_tokens", 0, 1 << 30, true, &v, &ok, e)) p->max_tokens = (int)v;
    job->n = 1;
    if (get_num(root, "n", 1, 128, true, &v, &ok, e)) {
        if (v > srv->n_parallel)
            ok = oai_fail(e, 400, "n", "n is %d but the server decodes at most %d sequences at once (--parallel)",
                          (int)v, srv->n_parallel);
        else job->n = (int)v;
    }
    get_bool(root, "ignore_eos", &p->ignore_eos, &ok, e);
    /* llama-server's per-request speculation fields (what its /slots shows under params); n_max 0 opts out,
     * more than the server's --draft-max gets the server's */
    if (get_num(root, "speculative.n_max", 0, DRAFTER_MAX_DRAFT, true, &v, &ok, e)) p->spec_n_max = (int)v;
    if (get_num(root, "speculative.n_min", 0, DRAFTER_MAX_DRAFT, true, &v, &ok, e)) p->spec_n_min = (int)v;
    if (ok) ok = parse_bias(srv, root, p, e);
    if (!chat) get_bool(root, "echo", &job->echo, &ok, e);
    if (chat) {
        get_bool(root, "logprobs", &job->logprobs, &ok, e);
        if (get_num(root, "top_logprobs", 0, SCHED_MAX_TOP_LOGPROBS, true, &v, &ok, e)) job->top_logprobs = (int)v;
    } else if (get_num(root, "logprobs", 0, SCHED_MAX_TOP_LOGPROBS, true, &v, &ok, e)) {
        job->logprobs = true;
        job->top_logprobs = (int)v;
    }
    if (!ok) return false;
    p->logprobs = job->logprobs;
    p->top_logprobs = job->top_logprobs;
    return parse_stop(root, p, e);
}

/* Structured output: response_format {type: text | json_object | json_schema}
 * or a GBNF `grammar` string become *g (NULL: free text). */
static bool parse_grammar1(const oai_server *srv, const cJSON *root, brisk_grammar **g, oai_error *e) {
    const cJSON *rf = field(root, "response_format"), *gr = field(root, "grammar");
    const cJSON *rt = cJSON_IsObject(rf) ? cJSON_GetObjectItemCaseSensitive(rf, "type") : NULL;
    brisk_status st = BRISK_OK;
    if (rf && !cJSON_IsString(rt))
        return oai_fail(e, 400, "response_format", "'response_format' must be an object with a string 'type'");
    if (gr && !cJSON_IsString(gr)) return oai_fail(e, 400, "grammar", "'grammar' must be a string (GBNF)");
    bool text = !rf || !strcmp(rt->valuestring, "text");
    if (gr && !text) return oai_fail(e, 400, "grammar", "use 'grammar' or a JSON 'response_format', not both");
    if (gr) {
        if ((st = brisk_grammar_new(srv->model, gr->valuestring, "root", g)) != BRISK_OK)
            return oai_fail(e, st == BRISK_ERR_NOMEM ? 500 : 400, "grammar", "%s", brisk_last_error());
        return true;
    }
    if (text) return true;
    if (!strcmp(rt->valuestring, "json_object")) st = brisk_grammar_from_json_schema(srv->model, NULL, g);
    else if (!strcmp(rt->valuestring, "json_schema")) {
        const cJSON *js = field(rf, "json_schema"), *schema = js ? field(js, "schema") : NULL;
        if (!cJSON_IsObject(js))
            return oai_fail(e, 400, "response_format", "'response_format.json_schema' must be an object");
        if (schema && !cJSON_IsObject(schema) && !cJSON_IsBool(schema))
            return oai_fail(e, 400, "response_format", "'response_format.json_schema.schema' must be an object");
        char *text_schema = schema ? cJSON_PrintUnformatted(schema) : NULL;
        if (schema && !text_schema) return oai_fail(e, 500, NULL, "out of memory");
        st = brisk_grammar_from_json_schema(srv->model, text_schema, g);
        free(text_schema);
    } else
        return oai_fail(e, 400, "response_format", "'response_format.type' must be text, json_object or json_schema");
    if (st != BRISK_OK)
        return oai_fail(e, st == BRISK_ERR_NOMEM ? 500 : 400, "response_format", "%s", brisk_last_error());
    return true;
}

/* Every choice gets its own grammar: a grammar holds one parse position. */
static bool parse_grammar(const oai_server *srv, const cJSON *root, sched_req *r, oai_error *e) {
    for (int i = 0; i < r->n_choices; i++)
        if (!parse_grammar1(srv, root, &r->ch[i].grammar, e)) return false;
    return true;
}

/* A prompt too long for the context by its bytes alone is refused before
 * tokenizing it: a token spells at most max_piece bytes, so such a text
 * cannot fit, and tokenizing megabytes only to refuse them costs time and
 * memory. */
bool oai_tokenize_prompt(const oai_server *srv, const char *text, size_t len, bool add_special, sched_req *r,
                         oai_error *e) {
    if (srv->n_ctx_slot > 0 && len / srv->max_piece > (size_t)srv->n_ctx_slot + 16) {
        oai_fail(e, 400, "prompt",
                 "the prompt is %zu bytes, more than a context of %d tokens can hold (a token spells at most %zu "
                 "bytes); shorten it or start the server with a larger -c",
                 len, srv->n_ctx_slot, srv->max_piece);
        e->code = "context_length_exceeded";
        e->n_prompt = (int)(len / srv->max_piece);
        e->n_ctx = srv->n_ctx_slot;
        return false;
    }
    return oai_tokenize_text(srv, text, len, add_special, true, r, e);
}

bool oai_tokenize_text(const oai_server *srv, const char *text, size_t len, bool add_special, bool parse_special,
                       sched_req *r, oai_error *e) {
    int64_t n = 0;
    brisk_status s = brisk_tokenize(srv->model, text, len, add_special, parse_special, NULL, 0, &n);
    if (s != BRISK_OK && s != BRISK_ERR_RANGE) return oai_fail(e, 400, "prompt", "tokenize: %s", brisk_last_error());
    if (n > (1 << 24)) return oai_fail(e, 400, "prompt", "the prompt is too long (%lld tokens)", (long long)n);
    if (!(r->prompt = malloc((size_t)(n > 0 ? n : 1) * sizeof *r->prompt))) return oai_fail(e, 500, NULL, "out of memory");
    if (brisk_tokenize(srv->model, text, len, add_special, parse_special, r->prompt, n, &n) != BRISK_OK)
        return oai_fail(e, 400, "prompt", "tokenize: %s", brisk_last_error());
    r->n_prompt = (int)n;
    return true;
}

/* The prompt of /v1/completions: a string, one string in an array, or token ids. */
static bool completion_prompt(const oai_server *srv, const cJSON *root, oai_job *job, oai_error *e) {
    sched_req *r = job->req;
    const cJSON *p = field(root, "prompt");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 &&
        (cJSON_IsString(cJSON_GetArrayItem(p, 0)) || cJSON_IsArray(cJSON_GetArrayItem(p, 0))))
        p = cJSON_GetArrayItem(p, 0); /* ["text"] or [[ids]]: one prompt in a batch of one */
    if (cJSON_IsString(p)) {
        if (job->echo && !(job->echo_text = strdup(p->valuestring))) return oai_fail(e, 500, NULL, "out of memory");
        return oai_tokenize_prompt(srv, p->valuestring, strlen(p->valuestring), true, r, e);
    }
    if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) == 0)
        return oai_fail(e, 400, "prompt", "'prompt' must be a string or an array of token ids");
    int n = cJSON_GetArraySize(p), i = 0, nv = brisk_n_vocab(srv->model);
    if (!(r->prompt = malloc((size_t)n * sizeof *r->prompt))) return oai_fail(e, 500, NULL, "out of memory");
    const cJSON *t;
    cJSON_ArrayForEach(t, p) {
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 || t->valuedouble >= nv)
            return oai_fail(e, 400, "prompt", "a prompt array holds one string or token ids in [0, %d)", nv);
        r->prompt[i++] = (brisk_token)t->valuedouble;
    }
    r->n_prompt = n;
    if (job->echo) { /* the prompt's text, as a detokenizer prints it */
        strbuf b = {0};
        brisk_detok dt = {0};
        char buf[1100];
        for (i = 0; i < n; i++) {
            size_t k = 0;
            if (brisk_detok_push(srv->model, &dt, r->prompt[i], buf, sizeof buf, &k) == BRISK_OK) sb_append(&b, buf, k);
        }
        if (!(job->echo_text = sb_take(&b))) return oai_fail(e, 500, NULL, "out of memory");
    }
    return true;
}

/* Renders the request's messages (and tools unless tool_choice is "none") with the chat template. */
static bool render_chat(const oai_server *srv, const cJSON *root, char **text, size_t *len, bool *tools_on,
                        oai_error *e) {
    cJSON *msgs = normalize_messages(cJSON_GetObjectItemCaseSensitive(root, "messages"), e);
    if (!msgs) return false;
    const cJSON *tools = field(root, "tools"), *tc = field(root, "tool_choice");
    bool ok = true, think = true;
    if (tools && !cJSON_IsArray(tools)) ok = oai_fail(e, 400, "tools", "'tools' must be an array");
    else if (tc && !cJSON_IsString(tc) && !cJSON_IsObject(tc))
        ok = oai_fail(e, 400, "tool_choice", "'tool_choice' must be a string or an object");
    if (tools && cJSON_GetArraySize(tools) == 0) tools = NULL;
    if (tc && cJSON_IsString(tc) && !strcmp(tc->valuestring, "none")) tools = NULL;
    *tools_on = tools != NULL;
    const cJSON *kw = field(root, "chat_template_kwargs");
    if (ok && kw) get_bool(kw, "enable_thinking", &think, &ok, e);
    if (ok && chat_fmt_render(srv->fmt, msgs, tools, think, text, len) != BRISK_OK)
        ok = oai_fail(e, 400, "messages", "chat template: %s", brisk_last_error());
    cJSON_Delete(msgs);
    return ok;
}

/* tool_choice "auto" with tools: llama.cpp's lazy grammar. The answer is free until it opens a call
 * where chat_parser reads calls: <tool_call> outside <think>...</think>, or anywhere with the XML
 * syntax, whose <tool_call> also ends the reasoning (llama.cpp replays that end into the grammar), and
 * with Qwen3-Coder's also at <function=NAME> of a tool (chat_tool_lazy_gbnf); from there the grammar
 * holds the call (the calls, with parallel_tool_calls) to the tools' schemas. A request's own grammar or
 * response_format wins; a tool schema the grammar cannot express leaves the answer free (as before), not
 * an error, since no call was demanded. */
static bool lazy_tool(const oai_server *srv, const cJSON *root, bool in_reasoning, oai_job *job, oai_error *e) {
    if (field(root, "grammar") || field(root, "response_format")) return true;
    char *gbnf = NULL, **trig = NULL;
    int n_trig = 0;
    chat_tool_syntax syntax = chat_fmt_tool_syntax(srv->fmt);
    bool xml = syntax != CHAT_TOOLS_JSON;
    brisk_status st = chat_tool_lazy_gbnf(field(root, "tools"), syntax, job->parallel_tools, &gbnf, &trig, &n_trig);
    if (st == BRISK_ERR_NOMEM) return oai_fail(e, 500, NULL, "out of memory");
    if (st != BRISK_OK) return true;
    for (int i = 0; st == BRISK_OK && i < job->n; i++) {
        brisk_grammar **g = &job->req->ch[i].grammar;
        st = brisk_grammar_new(srv->model, gbnf, "root", g);
        if (st == BRISK_OK)
            st = brisk_grammar_set_triggers(*g, (const char *const *)trig, n_trig, xml ? NULL : "<think>",
                                            xml ? NULL : "</think>", in_reasoning && !xml);
    }
    free(gbnf);
    free(trig);
    if (st != BRISK_OK) return oai_fail(e, st == BRISK_ERR_NOMEM ? 500 : 400, "tools", "%s", brisk_last_error());
    return true;
}

/* tool_choice "required" or a named function: every choice's grammar forces
 * one call in the parser's syntax (after closing a <think> the prompt opened),
 * or with parallel_tool_calls one or more. parallel_tool_calls defaults, as
 * llama.cpp's, to whether the template renders several calls of a message. */
static bool force_tool(const oai_server *srv, const cJSON *root, bool in_reasoning, oai_job *job, oai_error *e) {
    bool ok = true;
    job->parallel_tools = chat_fmt_parallel_tools(srv->fmt);
    get_bool(root, "parallel_tool_calls", &job->parallel_tools, &ok, e);
    if (!ok) return false;
    const cJSON *tc = field(root, "tool_choice"), *fn = cJSON_IsObject(tc) ? field(tc, "function") : NULL;
    const cJSON *name = fn ? field(fn, "name") : NULL;
    if (cJSON_IsString(tc) && !strcmp(tc->valuestring, "required")) job->tool_mode = 1;
    else if (cJSON_IsString(name)) job->tool_mode = 2;
    else if (cJSON_IsObject(tc))
        return oai_fail(e, 400, "tool_choice", "'tool_choice' must be {\"type\": \"function\", \"function\": {\"name\": ...}}");
    else if (cJSON_IsString(tc) && strcmp(tc->valuestring, "auto") && strcmp(tc->valuestring, "none"))
        return oai_fail(e, 400, "tool_choice", "'tool_choice' must be none, auto, required or a function");
    if (!job->tool_mode) return job->tools ? lazy_tool(srv, root, in_reasoning, job, e) : true;
    if (!job->tools) return oai_fail(e, 400, "tool_choice", "'tool_choice' asks for a tool call but no tools were given");
    if (field(root, "grammar") || field(root, "response_format"))
        return oai_fail(e, 400, "tool_choice", "a forced tool call cannot be combined with 'grammar' or 'response_format'");
    char *gbnf = NULL;
    brisk_status st = chat_tool_gbnf(field(root, "tools"), job->tool_mode == 2 ? name->valuestring : NULL, in_reasoning,
                                     job->parallel_tools, chat_fmt_tool_syntax(srv->fmt) != CHAT_TOOLS_JSON, &gbnf);
    for (int i = 0; st == BRISK_OK && i < job->n; i++) st = brisk_grammar_new(srv->model, gbnf, "root", &job->req->ch[i].grammar);
    free(gbnf);
    if (st != BRISK_OK) return oai_fail(e, st == BRISK_ERR_NOMEM ? 500 : 400, "tool_choice", "%s", brisk_last_error());
    return true;
}

static bool chat_prompt(const oai_server *srv, const cJSON *root, oai_job *job, oai_error *e) {
    char *text = NULL;
    size_t len = 0;
    if (!render_chat(srv, root, &text, &len, &job->tools, e)) return false;
    /* Generation starts inside <think> when the template opened it. */
    bool in_reasoning = chat_prompt_opens_think(text, len);
    if (!force_tool(srv, root, in_reasoning, job, e)) {
        free(text);
        return false;
    }
    /* the tools type an XML call's parameter values: one copy for every choice, as the body goes first */
    if (job->tools && !(job->tool_defs = cJSON_Duplicate(field(root, "tools"), true))) {
        free(text);
        return oai_fail(e, 500, NULL, "out of memory");
    }
    for (int i = 0; i < job->n; i++) {
        chat_parser_init(&job->ch[i].parser, job->tools, in_reasoning);
        chat_parser_set_tools(&job->ch[i].parser, job->tool_defs, chat_fmt_tool_syntax(srv->fmt));
    }
    /* A template that writes the BOS itself gets no second one. */
    bool has_bos = chat_prompt_has_bos(srv->model, text, len);
    bool ok = oai_tokenize_prompt(srv, text, len, !has_bos, job->req, e);
    free(text);
    return ok;
}

char *oai_apply_template(const oai_server *srv, const char *body, size_t len, oai_error *e) {
    cJSON *root = oai_parse_body(body, len, e);
    char *text = NULL, *res = NULL;
    size_t n = 0;
    bool tools;
    if (!root) return NULL;
    if (render_chat(srv, root, &text, &n, &tools, e)) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddStringToObject(o, "prompt", text);
        res = cJSON_PrintUnformatted(o);
        cJSON_Delete(o);
    }
    free(text);
    cJSON_Delete(root);
    return res;
}

/* The parts of a request both endpoints share, on a parsed body. */
static bool parse_root(const oai_server *srv, const cJSON *root, bool chat, oai_job *job, oai_error *e) {
    job->chat = chat;
    job->created = (long long)time(NULL);
    static unsigned long long counter;
    snprintf(job->id, sizeof job->id, "%s-%llx%llx", chat ? "chatcmpl" : "cmpl", (unsigned long long)job->created,
             __atomic_add_fetch(&counter, 1, __ATOMIC_RELAXED));
    if (!(job->req = sched_req_new())) return oai_fail(e, 500, NULL, "out of memory");
    const cJSON *model = field(root, "model");
    if (model && !cJSON_IsString(model)) return oai_fail(e, 400, "model", "'model' must be a string");
    if (model && !oai_model_ok(srv, model->valuestring, e)) return false;
    snprintf(job->model, sizeof job->model, "%s", model ? model->valuestring : srv->model_id);
    bool ok = true;
    get_bool(root, "stream", &job->stream, &ok, e);
    const cJSON *so = field(root, "stream_options");
    if (so && !cJSON_IsObject(so)) ok = oai_fail(e, 400, "stream_options", "'stream_options' must be an object");
    else if (so) get_bool(so, "include_usage", &job->include_usage, &ok, e);
    if (ok) ok = parse_sampling(srv, root, chat, job, e);
    if (ok && job->echo && job->logprobs) job->req->p.prompt_logprobs = true; /* the prompt's logprobs too */
    if (ok && sched_req_set_choices(job->req, job->n) != BRISK_OK) ok = oai_fail(e, 500, NULL, "out of memory");
    if (ok && !(job->ch = calloc((size_t)job->n, sizeof *job->ch))) ok = oai_fail(e, 500, NULL, "out of memory");
    if (ok) ok = parse_grammar(srv, root, job->req, e);
    if (ok) ok = chat ? chat_prompt(srv, root, job, e) : completion_prompt(srv, root, job, e);
    return ok;
}

bool oai_parse_chat(const oai_server *srv, const cJSON *root, oai_job *job, oai_error *e) {
    memset(job, 0, sizeof *job);
    return parse_root(srv, root, true, job, e);
}

bool oai_parse_completion(const oai_server *srv, const cJSON *root, oai_job *job, oai_error *e) {
    memset(job, 0, sizeof *job);
    return parse_root(srv, root, false, job, e);
}

bool oai_parse(const oai_server *srv, const char *body, size_t len, bool chat, oai_job *job, oai_error *e) {
    memset(job, 0, sizeof *job);
    cJSON *root = oai_parse_body(body, len, e);
    if (!root) return false;
    bool ok = parse_root(srv, root, chat, job, e);
    cJSON_Delete(root);
    return ok;
}

void oai_job_free(oai_job *job) {
    for (int i = 0; job->ch && i < job->n; i++) {
        chat_parser_free(&job->ch[i].parser);
        sb_free(&job->ch[i].text);
    }
    free(job->ch);
    job->ch = NULL;
    cJSON_Delete(job->tool_defs); /* after the parsers that read it */
    job->tool_defs = NULL;
    free(job->echo_text);
    job->echo_text = NULL;
    if (job->ext_free) job->ext_free(job->ext);
    job->ext = NULL;
    job->ext_free = NULL;
}

/* ---- responses ---------------------------------------------------------- */

static cJSON *bytes_array(const char *s, size_t n) {
    cJSON *a = cJSON_CreateArray();
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber((unsigned char)s[i]));
    return a;
}

/* The token's bytes into buf (cap 512) and its JSON-safe text into txt (cap 2100). */
static size_t piece(const oai_server *srv, brisk_token t, char *buf, size_t cap, char *txt) {
    size_t len = 0;
    if (brisk_token_to_piece(srv->model, t, false, buf, cap - 1, &len) != BRISK_OK) len = 0;
    buf[len] = 0;
    oai_token_text(buf, len, txt, 2100);
    return len;
}

/* Chat logprobs: {"content": [{token, logprob, bytes, top_logprobs: [...]}, ...]} */
static cJSON *chat_logprobs(const oai_server *srv, const sched_token *toks, int n) {
    cJSON *lp = cJSON_CreateObject(), *content = cJSON_AddArrayToObject(lp, "content");
    char buf[512], txt[2100];
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        size_t len = piece(srv, toks[i].id, buf, sizeof buf, txt);
        cJSON_AddStringToObject(o, "token", txt);
        cJSON_AddNumberToObject(o, "logprob", toks[i].logprob);
        cJSON_AddItemToObject(o, "bytes", bytes_array(buf, len));
        cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
        for (int k = 0; k < toks[i].n_top; k++) {
            cJSON *t = cJSON_CreateObject();
            len = piece(srv, toks[i].top_id[k], buf, sizeof buf, txt);
            cJSON_AddStringToObject(t, "token", txt);
            cJSON_AddNumberToObject(t, "logprob", toks[i].top_lp[k]);
            cJSON_AddItemToObject(t, "bytes", bytes_array(buf, len));
            cJSON_AddItemToArray(top, t);
        }
        cJSON_AddItemToArray(content, o);
    }
    return lp;
}

/* Appends n tokens to completions logprobs lp (text_logprobs), the first at text offset *offset (moved on);
 * first_none: the first has no logprob (a prompt's first token: nothing before it), null in both lists. */
static void add_text_logprobs(const oai_server *srv, cJSON *lp, const sched_token *toks, int n, size_t *offset,
                              bool first_none) {
    cJSON *tk = cJSON_GetObjectItemCaseSensitive(lp, "tokens"), *tl = cJSON_GetObjectItemCaseSensitive(lp, "token_logprobs"),
          *top = cJSON_GetObjectItemCaseSensitive(lp, "top_logprobs"), *off = cJSON_GetObjectItemCaseSensitive(lp, "text_offset");
    char buf[512], txt[2100];
    for (int i = 0; i < n; i++) {
        size_t len = piece(srv, toks[i].id, buf, sizeof buf, txt);
        cJSON_AddItemToArray(tk, cJSON_CreateString(txt));
        cJSON_AddItemToArray(off, cJSON_CreateNumber((double)*offset));
        *offset += len;
        if (i == 0 && first_none) {
            cJSON_AddItemToArray(tl, cJSON_CreateNull());
            cJSON_AddItemToArray(top, cJSON_CreateNull());
            continue;
        }
        cJSON_AddItemToArray(tl, cJSON_CreateNumber(toks[i].logprob));
        cJSON *m = cJSON_CreateObject();
        for (int k = 0; k < toks[i].n_top; k++) {
            piece(srv, toks[i].top_id[k], buf, sizeof buf, txt);
            if (!cJSON_GetObjectItemCaseSensitive(m, txt)) cJSON_AddNumberToObject(m, txt, toks[i].top_lp[k]);
        }
        cJSON_AddItemToArray(top, m);
    }
}

/* Completions logprobs: {"tokens", "token_logprobs", "top_logprobs", "text_offset"}; with echo (the
 * request's prompt_lp) the prompt's tokens first, as OpenAI's legacy completions give them, then toks;
 * text offsets from *at (moved on: a stream's chunks continue the count), or from 0 when at is NULL. */
static cJSON *text_logprobs(const oai_server *srv, const sched_req *r, const sched_token *toks, int n, size_t *at) {
    cJSON *lp = cJSON_CreateObject();
    cJSON_AddArrayToObject(lp, "tokens");
    cJSON_AddArrayToObject(lp, "token_logprobs");
    cJSON_AddArrayToObject(lp, "top_logprobs");
    cJSON_AddArrayToObject(lp, "text_offset");
    size_t offset = at ? *at : 0;
    if (r && r->prompt_lp) add_text_logprobs(srv, lp, r->prompt_lp, r->n_prompt, &offset, true);
    add_text_logprobs(srv, lp, toks, n, &offset, false);
    if (at) *at = offset;
    return lp;
}

/* Usage as OpenAI counts it for n choices: the prompt once, the completions summed. */
static cJSON *usage(const oai_delta *d) {
    int n_gen = 0;
    for (int i = 0; i < d->n; i++) n_gen += d->ch[i].n_gen;
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", d->n_prompt);
    cJSON_AddNumberToObject(u, "completion_tokens", n_gen);
    cJSON_AddNumberToObject(u, "total_tokens", d->n_prompt + n_gen);
    cJSON *pd = cJSON_AddObjectToObject(u, "prompt_tokens_details");
    cJSON_AddNumberToObject(pd, "cached_tokens", d->n_cached);
    return u;
}

/* llama-server's per-response timings; draft_n and draft_n_accepted only when the request speculated, as
 * there. prompt_ms runs from the request's arrival (queueing included) to its first token. */
cJSON *oai_timings(const oai_delta *d) {
    int n_gen = 0, n_proc = d->n_prompt - d->n_cached;
    for (int i = 0; i < d->n; i++) n_gen += d->ch[i].n_gen;
    cJSON *t = cJSON_CreateObject();
    cJSON_AddNumberToObject(t, "cache_n", d->n_cached);
    cJSON_AddNumberToObject(t, "prompt_n", n_proc);
    cJSON_AddNumberToObject(t, "prompt_ms", d->prompt_ms);
    cJSON_AddNumberToObject(t, "prompt_per_token_ms", n_proc > 0 ? d->prompt_ms / n_proc : 0);
    cJSON_AddNumberToObject(t, "prompt_per_second", d->prompt_ms > 0 ? 1e3 * n_proc / d->prompt_ms : 0);
    cJSON_AddNumberToObject(t, "predicted_n", n_gen);
    cJSON_AddNumberToObject(t, "predicted_ms", d->predicted_ms);
    cJSON_AddNumberToObject(t, "predicted_per_token_ms", n_gen > 0 ? d->predicted_ms / n_gen : 0);
    cJSON_AddNumberToObject(t, "predicted_per_second", d->predicted_ms > 0 ? 1e3 * n_gen / d->predicted_ms : 0);
    if (d->n_drafted > 0) {
        cJSON_AddNumberToObject(t, "draft_n", (double)d->n_drafted);
        cJSON_AddNumberToObject(t, "draft_n_accepted", (double)d->n_draft_accepted);
    }
    return t;
}

static cJSON *envelope(const oai_server *srv, const oai_job *job, const char *object) {
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "id", job->id);
    cJSON_AddStringToObject(o, "object", object);
    cJSON_AddNumberToObject(o, "created", (double)job->created);
    cJSON_AddStringToObject(o, "model", job->model);
    cJSON_AddStringToObject(o, "system_fingerprint", "brisk");
    return o;
}

static const char *finish_reason(const oai_job *job, const oai_choice *c, sched_finish f) {
    if (f == SCHED_FINISH_LENGTH) return "length";
    return job->chat && c->parser.n_calls > 0 ? "tool_calls" : "stop";
}

static cJSON *tool_call_json(const chat_tool_call *c, int index, bool with_index) {
    cJSON *t = cJSON_CreateObject();
    if (with_index) cJSON_AddNumberToObject(t, "index", index);
    char id[40];
    snprintf(id, sizeof id, "call_%d_%08x", index, (unsigned)(uintptr_t)c ^ 0x5bd1e995u);
    cJSON_AddStringToObject(t, "id", id);
    cJSON_AddStringToObject(t, "type", "function");
    cJSON *fn = cJSON_AddObjectToObject(t, "function");
    cJSON_AddStringToObject(fn, "name", c->name);
    cJSON_AddStringToObject(fn, "arguments", c->arguments);
    return t;
}

static void sse(strbuf *out, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    if (!s) {
        out->failed = true;
        return;
    }
    sb_puts(out, "data: ");
    sb_puts(out, s);
    sb_puts(out, "\n\n");
    free(s);
}

/* One streaming chunk of choice `index` with a delta (chat) or text (completions). */
static cJSON *chunk(const oai_server *srv, const oai_job *job, int index, cJSON *delta_or_text, const char *finish,
                    cJSON *lp) {
    cJSON *o = envelope(srv, job, job->chat ? "chat.completion.chunk" : "text_completion");
    cJSON *ch = cJSON_AddArrayToObject(o, "choices"), *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", index);
    cJSON_AddItemToObject(c, job->chat ? "delta" : "text", delta_or_text);
    if (lp) cJSON_AddItemToObject(c, "logprobs", lp);
    else cJSON_AddNullToObject(c, "logprobs");
    if (finish) cJSON_AddStringToObject(c, "finish_reason", finish);
    else cJSON_AddNullToObject(c, "finish_reason");
    cJSON_AddItemToArray(ch, c);
    if (job->include_usage) cJSON_AddNullToObject(o, "usage");
    return o;
}

/* The SSE events of one choice's new output (and its finish chunk when it ended). */
static void stream_choice(const oai_server *srv, oai_job *job, int i, const oai_delta *all, strbuf *out) {
    const oai_choice_delta *d = &all->ch[i];
    oai_choice *c = &job->ch[i];
    if (c->done) return;
    bool fin = d->finish != SCHED_RUNNING;
    cJSON *lp = NULL;
    if (job->logprobs && d->n_toks)
        lp = job->chat ? chat_logprobs(srv, d->toks, d->n_toks) : NULL; /* completions': after the echo */
    if (!job->chat) {
        if (job->echo_text && !c->head_sent) { /* echo: the prompt first (with logprobs, the prompt's) */
            cJSON *plp = job->logprobs && job->req->prompt_lp
                             ? text_logprobs(srv, job->req, NULL, 0, &c->lp_offset) : NULL;
            sse(out, chunk(srv, job, i, cJSON_CreateString(job->echo_text), NULL, plp));
            c->head_sent = true;
        }
        if (job->logprobs && d->n_toks) lp = text_logprobs(srv, NULL, d->toks, d->n_toks, &c->lp_offset);
        if (d->len || lp) sse(out, chunk(srv, job, i, cJSON_CreateString(d->text), NULL, lp));
    } else {
        if (!c->head_sent) {
            cJSON *delta = cJSON_CreateObject();
            cJSON_AddStringToObject(delta, "role", "assistant");
            cJSON_AddStringToObject(delta, "content", "");
            sse(out, chunk(srv, job, i, delta, NULL, NULL));
            c->head_sent = true;
        }
        chat_parser *p = &c->parser;
        if (!chat_parser_push(p, d->text, d->len, fin)) out->failed = true;
        if (p->reasoning.len) {
            cJSON *delta = cJSON_CreateObject();
            cJSON_AddStringToObject(delta, "reasoning_content", p->reasoning.p);
            sse(out, chunk(srv, job, i, delta, NULL, NULL));
            sb_reset(&p->reasoning);
        }
        if (p->content.len || lp) {
            cJSON *delta = cJSON_CreateObject();
            cJSON_AddStringToObject(delta, "content", p->content.len ? p->content.p : "");
            sse(out, chunk(srv, job, i, delta, NULL, lp));
            sb_reset(&p->content);
        }
        for (; c->calls_sent < p->n_calls; c->calls_sent++) {
            cJSON *delta = cJSON_CreateObject(), *tc = cJSON_AddArrayToObject(delta, "tool_calls");
            cJSON_AddItemToArray(tc, tool_call_json(&p->calls[c->calls_sent], c->calls_sent, true));
            sse(out, chunk(srv, job, i, delta, NULL, NULL));
        }
    }
    if (!fin) return;
    cJSON *o = chunk(srv, job, i, job->chat ? cJSON_CreateObject() : cJSON_CreateString(""),
                     finish_reason(job, c, d->finish), NULL);
    if (all->finish != SCHED_RUNNING) cJSON_AddItemToObject(o, "timings", oai_timings(all)); /* the request's last */
    sse(out, o);
    c->done = true;
}

void oai_stream_events(const oai_server *srv, oai_job *job, const oai_delta *d, strbuf *out) {
    if (d->finish == SCHED_FINISH_ERROR || d->finish == SCHED_FINISH_CANCELLED) {
        oai_error e = {0};
        oai_fail(&e, 500, NULL, "%s", d->error && d->error[0] ? d->error : "generation cancelled");
        char *js = oai_error_json(&e);
        sb_printf(out, "data: %s\n\ndata: [DONE]\n\n", js ? js : "{}");
        free(js);
        return;
    }
    for (int i = 0; i < d->n && i < job->n; i++) stream_choice(srv, job, i, d, out);
    if (d->finish == SCHED_RUNNING) return;
    if (job->include_usage) {
        cJSON *o = envelope(srv, job, job->chat ? "chat.completion.chunk" : "text_completion");
        cJSON_AddArrayToObject(o, "choices");
        cJSON_AddItemToObject(o, "usage", usage(d));
        sse(out, o);
    }
    sb_puts(out, "data: [DONE]\n\n");
}

/* The finished choice i of a non-streaming response. */
static cJSON *choice_json(const oai_server *srv, const oai_job *job, int i, sched_finish f) {
    const oai_choice *ch = &job->ch[i];
    cJSON *c = cJSON_CreateObject();
    cJSON_AddNumberToObject(c, "index", i);
    if (job->chat) {
        const chat_parser *p = &ch->parser;
        cJSON *m = cJSON_AddObjectToObject(c, "message");
        cJSON_AddStringToObject(m, "role", "assistant");
        if (p->content.len || !p->n_calls) cJSON_AddStringToObject(m, "content", p->content.p ? p->content.p : "");
        else cJSON_AddNullToObject(m, "content");
        if (p->reasoning.len) cJSON_AddStringToObject(m, "reasoning_content", p->reasoning.p);
        if (p->n_calls) {
            cJSON *tc = cJSON_AddArrayToObject(m, "tool_calls");
            for (int k = 0; k < p->n_calls; k++) cJSON_AddItemToArray(tc, tool_call_json(&p->calls[k], k, false));
        }
    } else {
        cJSON_AddStringToObject(c, "text", ch->text.p ? ch->text.p : "");
    }
    const sched_choice *sc = &job->req->ch[i]; /* finished: the scheduler no longer writes it */
    if (job->logprobs)
        cJSON_AddItemToObject(c, "logprobs", job->chat ? chat_logprobs(srv, sc->toks, sc->n_toks)
                                                       : text_logprobs(srv, job->req, sc->toks, sc->n_toks, NULL));
    else cJSON_AddNullToObject(c, "logprobs");
    cJSON_AddStringToObject(c, "finish_reason", finish_reason(job, ch, f));
    return c;
}

char *oai_response(const oai_server *srv, oai_job *job, const oai_delta *d) {
    /* Logprobs accumulate in the request; text goes through the parser (chat) or the choice's text. */
    for (int i = 0; i < d->n && i < job->n; i++) {
        const oai_choice_delta *cd = &d->ch[i];
        if (job->chat) chat_parser_push(&job->ch[i].parser, cd->text, cd->len, cd->finish != SCHED_RUNNING);
        else {
            if (job->echo_text && !job->ch[i].text.len) sb_puts(&job->ch[i].text, job->echo_text);
            sb_append(&job->ch[i].text, cd->text, cd->len);
        }
    }
    if (d->finish == SCHED_RUNNING) return NULL;
    cJSON *o = envelope(srv, job, job->chat ? "chat.completion" : "text_completion");
    cJSON *ch = cJSON_AddArrayToObject(o, "choices");
    for (int i = 0; i < d->n && i < job->n; i++) cJSON_AddItemToArray(ch, choice_json(srv, job, i, d->ch[i].finish));
    cJSON_AddItemToObject(o, "usage", usage(d));
    cJSON_AddItemToObject(o, "timings", oai_timings(d));
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

/* ---- /tokenize and /detokenize (llama.cpp's shapes) -------------------- */

char *oai_tokenize(const oai_server *srv, const char *body, size_t len, oai_error *e) {
    cJSON *root = oai_parse_body(body, len, e);
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(root, "content");
    char *res = NULL;
    bool add = false, pieces = false, special = true, ok = true;
    if (!root) return NULL;
    if (!cJSON_IsString(c)) oai_fail(e, 400, "content", "'content' must be a string");
    else if (get_bool(root, "add_special", &add, &ok, e), get_bool(root, "with_pieces", &pieces, &ok, e),
             get_bool(root, "parse_special", &special, &ok, e), ok) {
        sched_req r = {0};
        size_t cl = strlen(c->valuestring); /* parse_special false: special tokens' texts stay text */
        if (special ? oai_tokenize_prompt(srv, c->valuestring, cl, add, &r, e)
                    : oai_tokenize_text(srv, c->valuestring, cl, add, false, &r, e)) {
            cJSON *o = cJSON_CreateObject(), *a = cJSON_AddArrayToObject(o, "tokens");
            char buf[512];
            for (int i = 0; i < r.n_prompt; i++) {
                if (!pieces) {
                    cJSON_AddItemToArray(a, cJSON_CreateNumber(r.prompt[i]));
                    continue;
                }
                cJSON *t = cJSON_CreateObject();
                cJSON_AddNumberToObject(t, "id", r.prompt[i]);
                size_t pl = 0; /* control tokens show their text here */
                if (brisk_token_to_piece(srv->model, r.prompt[i], true, buf, sizeof buf - 1, &pl) != BRISK_OK) pl = 0;
                if (utf8_valid(buf, pl)) { /* llama-server's piece: the text, or its bytes where it is not UTF-8 */
                    buf[pl] = 0;
                    cJSON_AddStringToObject(t, "piece", buf);
                } else cJSON_AddItemToObject(t, "piece", bytes_array(buf, pl));
                cJSON_AddItemToArray(a, t);
            }
            res = cJSON_PrintUnformatted(o);
            cJSON_Delete(o);
        }
        free(r.prompt);
    }
    cJSON_Delete(root);
    return res;
}

char *oai_detokenize(const oai_server *srv, const char *body, size_t len, oai_error *e) {
    cJSON *root = oai_parse_body(body, len, e);
    const cJSON *toks = cJSON_GetObjectItemCaseSensitive(root, "tokens"), *t;
    if (!root) return NULL;
    if (!cJSON_IsArray(toks)) {
        cJSON_Delete(root);
        return oai_fail(e, 400, "tokens", "'tokens' must be an array of token ids"), NULL;
    }
    int nv = brisk_n_vocab(srv->model);
    strbuf b = {0};
    brisk_detok dt = {0};
    char buf[1100];
    cJSON_ArrayForEach(t, toks) {
        size_t n = 0;
        if (!cJSON_IsNumber(t) || t->valuedouble != floor(t->valuedouble) || t->valuedouble < 0 || t->valuedouble >= nv) {
            sb_free(&b);
            cJSON_Delete(root);
            return oai_fail(e, 400, "tokens", "token ids must be integers in [0, %d)", nv), NULL;
        }
        if (brisk_detok_push(srv->model, &dt, (brisk_token)t->valuedouble, buf, sizeof buf, &n) == BRISK_OK)
            sb_append(&b, buf, n);
    }
    cJSON_Delete(root);
    cJSON *o = cJSON_CreateObject();
    cJSON_AddStringToObject(o, "content", b.p ? b.p : "");
    sb_free(&b);
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}
