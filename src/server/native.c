/* native.c — llama-server's /completion over the OpenAI completions machinery (native.h). The
 * request is translated into a /v1/completions body (llama.cpp's names mapped, its forms normalised)
 * and parsed by openai.c; what has no OpenAI name (temperatures outside 0-2, repeat_last_n, samplers)
 * is set on the parsed request afterwards. */
#include "server/native.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

typedef struct nat_state {
    bool return_tokens, timings_per_token;
    int n_probs;
    cJSON *fields;   /* response_fields: strings, or NULL */
    cJSON *settings; /* generation_settings */
    char *prompt;    /* the prompt as its tokens spell it, once a result needs it */
} nat_state;

static void nat_free(void *p) {
    nat_state *st = p;
    if (!st) return;
    cJSON_Delete(st->fields);
    cJSON_Delete(st->settings);
    free(st->prompt);
    free(st);
}

/* 1: o[key] is a number (in *v); 0: absent or null; -1: another type (e filled). */
static int num(const cJSON *o, const char *key, double *v, oai_error *e) {
    const cJSON *x = oai_get(o, key);
    if (!x) return 0;
    if (cJSON_IsBool(x)) { /* llama.cpp's JSON reads true as 1 */
        *v = cJSON_IsTrue(x);
        return 1;
    }
    if (!cJSON_IsNumber(x)) return oai_fail(e, 400, key, "'%s' must be a number", key), -1;
    *v = x->valuedouble;
    return 1;
}

/* Sampler settings brisk lacks: accepted at their "off" value (llama.cpp's default), refused otherwise
 * by name, so that a request never silently samples other than it asked. top_n_sigma is off at <= 0. */
static const struct { const char *name; double off; } nat_unsupported[] = {
    {"typical_p", 1}, {"mirostat", 0}, {"dry_multiplier", 0}, {"xtc_probability", 0}, {"dynatemp_range", 0},
    {"n_indent", 0}, {"t_max_predict_ms", 0},
};

static bool check_unsupported(const cJSON *r, oai_error *e) {
    double v;
    for (size_t i = 0; i < sizeof nat_unsupported / sizeof *nat_unsupported; i++) {
        int k = num(r, nat_unsupported[i].name, &v, e);
        if (k < 0) return false;
        if (k > 0 && v != nat_unsupported[i].off)
            return oai_fail(e, 400, nat_unsupported[i].name, "'%s' is not supported by brisk: leave it at %g",
                            nat_unsupported[i].name, nat_unsupported[i].off);
    }
    int k = num(r, "top_n_sigma", &v, e);
    if (k < 0) return false;
    if (k > 0 && v > 0) return oai_fail(e, 400, "top_n_sigma", "'top_n_sigma' is not supported by brisk: leave it at -1");
    const cJSON *x = oai_get(r, "post_sampling_probs");
    if (cJSON_IsTrue(x))
        return oai_fail(e, 400, "post_sampling_probs", "'post_sampling_probs' is not supported: n_probs gives the "
                        "model's log-probabilities before sampling");
    x = oai_get(r, "lora");
    if (x && (!cJSON_IsArray(x) || cJSON_GetArraySize(x) > 0))
        return oai_fail(e, 400, "lora", "brisk serves no LoRA adapters");
    return true;
}

/* One prompt's tokens into a JSON array of ids: a text (BOS as the tokenizer adds it), token ids, or
 * ids and texts mixed (BOS only when the first element is a text, as llama-server's tokenize_mixed). */
static cJSON *prompt_ids(const oai_server *srv, const cJSON *p, oai_error *e) {
    cJSON *ids = cJSON_CreateArray();
    const cJSON *x;
    bool first = true;
    cJSON_ArrayForEach(x, p) {
        if (cJSON_IsNumber(x)) cJSON_AddItemToArray(ids, cJSON_CreateNumber(x->valuedouble));
        else if (cJSON_IsString(x)) {
            sched_req r = {0};
            if (!oai_tokenize_prompt(srv, x->valuestring, strlen(x->valuestring), first, &r, e)) {
                free(r.prompt);
                cJSON_Delete(ids);
                return NULL;
            }
            for (int i = 0; i < r.n_prompt; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(r.prompt[i]));
            free(r.prompt);
        } else {
            cJSON_Delete(ids);
            oai_fail(e, 400, "prompt", "a prompt array holds token ids and strings");
            return NULL;
        }
        first = false;
    }
    return ids;
}

/* `prompt` into o: a string as is; a {"prompt_string"} object's string; one prompt in an array (ids,
 * texts or both). Several prompts in one request are refused: one request per prompt. */
static bool nat_prompt(const oai_server *srv, const cJSON *r, cJSON *o, oai_error *e) {
    const cJSON *p = oai_get(r, "prompt");
    if (cJSON_IsArray(p) && cJSON_GetArraySize(p) == 1 && !cJSON_IsNumber(cJSON_GetArrayItem(p, 0)))
        p = cJSON_GetArrayItem(p, 0); /* ["text"], [[ids]], [{"prompt_string"}] */
    if (cJSON_IsObject(p)) {
        const cJSON *mm = oai_get(p, "multimodal_data");
        if (mm && (!cJSON_IsArray(mm) || cJSON_GetArraySize(mm) > 0))
            return oai_fail(e, 400, "prompt", "multimodal_data: this server has no multimodal projector");
        p = oai_get(p, "prompt_string");
    }
    if (cJSON_IsString(p)) return cJSON_AddStringToObject(o, "prompt", p->valuestring) != NULL;
    if (!cJSON_IsArray(p) || cJSON_GetArraySize(p) == 0)
        return oai_fail(e, 400, "prompt", "'prompt' must be a string, token ids, or ids and strings mixed");
    const cJSON *x;
    bool flat = true;
    cJSON_ArrayForEach(x, p) flat &= cJSON_IsNumber(x) || cJSON_IsString(x);
    bool any_id = false;
    cJSON_ArrayForEach(x, p) any_id |= cJSON_IsNumber(x);
    if (!flat || !any_id)
        return oai_fail(e, 400, "prompt", "several prompts in one request are not supported: send one request per "
                        "prompt (n_cmpl gives several completions of one)");
    cJSON *ids = prompt_ids(srv, p, e);
    if (!ids) return false;
    cJSON_AddItemToObject(o, "prompt", ids);
    return true;
}

/* logit_bias as llama-server takes it: [[id or text, bias or false], ...] or {"id or text": bias}; a
 * text biases each of its tokens, false bans (-100, the least OpenAI's form allows). Into o's object. */
static bool nat_bias(const oai_server *srv, const cJSON *r, cJSON *o, oai_error *e) {
    const cJSON *b = oai_get(r, "logit_bias"), *x;
    if (!b) return true;
    if (!cJSON_IsArray(b) && !cJSON_IsObject(b))
        return oai_fail(e, 400, "logit_bias", "'logit_bias' must be an array of [token, bias] pairs or an object");
    cJSON *m = cJSON_AddObjectToObject(o, "logit_bias");
    cJSON_ArrayForEach(x, b) {
        const cJSON *key = cJSON_IsArray(b) ? cJSON_GetArrayItem(x, 0) : NULL, *val = cJSON_IsArray(b) ? cJSON_GetArrayItem(x, 1) : x;
        char idbuf[32];
        const char *text = NULL;
        if (cJSON_IsArray(b)) {
            if (!cJSON_IsArray(x) || cJSON_GetArraySize(x) != 2)
                return oai_fail(e, 400, "logit_bias", "each logit_bias pair is [token id or text, bias or false]");
            if (cJSON_IsNumber(key)) snprintf(idbuf, sizeof idbuf, "%.0f", key->valuedouble);
            else if (cJSON_IsString(key)) text = key->valuestring;
            else return oai_fail(e, 400, "logit_bias", "a logit_bias token is an id or a text");
        } else {
            char *end = NULL;
            strtol(x->string, &end, 10);
            if (x->string[0] && !*end) snprintf(idbuf, sizeof idbuf, "%s", x->string);
            else text = x->string;
        }
        double bias;
        if (cJSON_IsFalse(val)) bias = -100;
        else if (cJSON_IsNumber(val)) bias = val->valuedouble;
        else return oai_fail(e, 400, "logit_bias", "a logit_bias value is a number or false");
        if (!text) {
            cJSON_DeleteItemFromObjectCaseSensitive(m, idbuf);
            cJSON_AddNumberToObject(m, idbuf, bias);
            continue;
        }
        sched_req t = {0};
        if (!oai_tokenize_prompt(srv, text, strlen(text), false, &t, e)) return free(t.prompt), false;
        for (int i = 0; i < t.n_prompt; i++) {
            snprintf(idbuf, sizeof idbuf, "%d", (int)t.prompt[i]);
            cJSON_DeleteItemFromObjectCaseSensitive(m, idbuf);
            cJSON_AddNumberToObject(m, idbuf, bias);
        }
        free(t.prompt);
    }
    return true;
}

/* The OpenAI body of a /completion request: names mapped, forms normalised; NULL and e on bad input. */
static cJSON *translate(const oai_server *srv, const cJSON *r, nat_state *st, oai_error *e) {
    static const char *const same[] = {"stream", "stop", "grammar", "ignore_eos", "top_k", "top_p", "min_p",
                                       "presence_penalty", "frequency_penalty", "repeat_penalty", "response_format",
                                       "speculative.n_max", "speculative.n_min", NULL};
    cJSON *o = cJSON_CreateObject();
    for (int i = 0; same[i]; i++) oai_copy_field(r, same[i], o, same[i]);
    double v;
    int k;
    bool ok = check_unsupported(r, e);
    if (ok && (k = num(r, "seed", &v, e)) != 0) { /* -1 (and llama.cpp's LLAMA_DEFAULT_SEED): a random seed */
        if (k < 0) ok = false;
        else if (v != -1 && v != 4294967295.0) cJSON_AddNumberToObject(o, "seed", v);
    }
    if (ok && ((k = num(r, "n_predict", &v, e)) != 0 || (k = num(r, "max_tokens", &v, e)) != 0)) {
        if (k < 0) ok = false;
        else if (v != floor(v) || v < -1) ok = oai_fail(e, 400, "n_predict", "'n_predict' must be -1 (no limit) or a count");
        else if (v >= 0) cJSON_AddNumberToObject(o, "max_tokens", v);
    }
    if (ok && ((k = num(r, "n_cmpl", &v, e)) != 0 || (k = num(r, "n", &v, e)) != 0)) {
        if (k < 0) ok = false;
        else cJSON_AddNumberToObject(o, "n", v);
    }
    if (ok && (k = num(r, "n_probs", &v, e)) != 0) {
        if (k < 0) ok = false;
        else if (v != floor(v) || v < 0 || v > SCHED_MAX_TOP_LOGPROBS)
            ok = oai_fail(e, 400, "n_probs", "'n_probs' must be between 0 and %d", SCHED_MAX_TOP_LOGPROBS);
        else if (v > 0) {
            st->n_probs = (int)v;
            cJSON_AddNumberToObject(o, "logprobs", v);
        }
    }
    const cJSON *js = oai_get(r, "json_schema");
    if (ok && js) {
        if (oai_get(r, "response_format") || oai_get(r, "grammar"))
            ok = oai_fail(e, 400, "json_schema", "use one of json_schema, response_format and grammar");
        else {
            cJSON *rf = cJSON_AddObjectToObject(o, "response_format");
            cJSON_AddStringToObject(rf, "type", "json_schema");
            cJSON_AddItemToObject(cJSON_AddObjectToObject(rf, "json_schema"), "schema", cJSON_Duplicate(js, true));
        }
    }
    if (ok) ok = nat_bias(srv, r, o, e);
    if (ok) ok = nat_prompt(srv, r, o, e);
    if (!ok) {
        cJSON_Delete(o);
        return NULL;
    }
    return o;
}

/* The settings with no OpenAI name, on the parsed request: temperature (any; <= 0 greedy),
 * repeat_last_n (-1: the context) and the sampler list (a sampler brisk has and the list leaves out is
 * off; without temperature the distribution is sampled as it stands). */
static bool native_settings(const oai_server *srv, const cJSON *r, sched_req *q, nat_state *st, oai_error *e) {
    double v;
    int k;
    if (num(r, "seed", &v, e) <= 0 || v == -1 || v == 4294967295.0)
        q->p.sp.seed &= 0xffffffffu; /* a random seed as llama.cpp's (32 bits): generation_settings replays it */
    if ((k = num(r, "temperature", &v, e)) < 0) return false;
    if (k) q->p.sp.temp = v > 0 ? (float)v : 0;
    if ((k = num(r, "repeat_last_n", &v, e)) < 0) return false;
    if (k) {
        if (v != floor(v) || v < -1) return oai_fail(e, 400, "repeat_last_n", "'repeat_last_n' must be -1 or a count");
        q->p.sp.repeat_last_n = v < 0 || v > srv->n_ctx_slot ? srv->n_ctx_slot : (int)v;
    }
    const cJSON *s = oai_get(r, "samplers"), *x;
    if (s) {
        static const char *const known[] = {"dry", "top_k", "typ_p", "typical_p", "top_p", "min_p", "xtc",
                                            "temperature", "top_n_sigma", "infill", "penalties", "adaptive_p", NULL};
        bool has[12] = {0};
        if (!cJSON_IsArray(s)) return oai_fail(e, 400, "samplers", "'samplers' must be an array of sampler names");
        cJSON_ArrayForEach(x, s) {
            int i = 0;
            while (known[i] && !(cJSON_IsString(x) && !strcmp(x->valuestring, known[i]))) i++;
            if (!known[i]) return oai_fail(e, 400, "samplers", "unknown sampler in 'samplers'");
            has[i] = true;
        }
        if (!has[1]) q->p.sp.top_k = 0;
        if (!has[4]) q->p.sp.top_p = 1;
        if (!has[5]) q->p.sp.min_p = 0;
        if (!has[7] && q->p.sp.temp > 0) q->p.sp.temp = 1;
        if (!has[10]) q->p.sp.repeat_penalty = 1, q->p.sp.presence_penalty = q->p.sp.frequency_penalty = 0;
    }
    bool ok = true;
    const cJSON *b = oai_get(r, "return_tokens");
    if (b && !cJSON_IsBool(b)) ok = oai_fail(e, 400, "return_tokens", "'return_tokens' must be a boolean");
    st->return_tokens = cJSON_IsTrue(b);
    st->timings_per_token = cJSON_IsTrue(oai_get(r, "timings_per_token"));
    const cJSON *f = oai_get(r, "response_fields");
    if (ok && f) {
        bool strings = cJSON_IsArray(f);
        cJSON_ArrayForEach(x, f) strings &= cJSON_IsString(x);
        if (!strings) ok = oai_fail(e, 400, "response_fields", "'response_fields' must be an array of strings");
        else st->fields = cJSON_Duplicate(f, true);
    }
    return ok;
}

/* A float setting as its float reads (0.95, not 0.949999988079071). */
static double fl(float f) {
    char b[32];
    snprintf(b, sizeof b, "%.7g", f);
    return strtod(b, NULL);
}

/* generation_settings: the request's settings as brisk samples them. */
static cJSON *settings_json(const oai_job *job, const nat_state *st) {
    const sched_gen_params *p = &job->req->p;
    cJSON *g = cJSON_CreateObject();
    cJSON_AddNumberToObject(g, "seed", (double)p->sp.seed);
    cJSON_AddNumberToObject(g, "temperature", fl(p->sp.temp));
    cJSON_AddNumberToObject(g, "top_k", p->sp.top_k);
    cJSON_AddNumberToObject(g, "top_p", fl(p->sp.top_p));
    cJSON_AddNumberToObject(g, "min_p", fl(p->sp.min_p));
    cJSON_AddNumberToObject(g, "repeat_last_n", p->sp.repeat_last_n);
    cJSON_AddNumberToObject(g, "repeat_penalty", fl(p->sp.repeat_penalty));
    cJSON_AddNumberToObject(g, "presence_penalty", fl(p->sp.presence_penalty));
    cJSON_AddNumberToObject(g, "frequency_penalty", fl(p->sp.frequency_penalty));
    cJSON_AddNumberToObject(g, "max_tokens", p->max_tokens);
    cJSON_AddNumberToObject(g, "n_predict", p->max_tokens);
    cJSON_AddBoolToObject(g, "ignore_eos", p->ignore_eos);
    cJSON_AddBoolToObject(g, "stream", job->stream);
    cJSON_AddNumberToObject(g, "n_probs", st->n_probs);
    cJSON *stop = cJSON_AddArrayToObject(g, "stop");
    for (int i = 0; i < p->n_stop; i++) cJSON_AddItemToArray(stop, cJSON_CreateString(p->stop[i]));
    cJSON *smp = cJSON_AddArrayToObject(g, "samplers"); /* brisk's chain, in its order */
    if (p->sp.repeat_penalty != 1 || p->sp.presence_penalty != 0 || p->sp.frequency_penalty != 0)
        cJSON_AddItemToArray(smp, cJSON_CreateString("penalties"));
    if (p->sp.top_k > 0) cJSON_AddItemToArray(smp, cJSON_CreateString("top_k"));
    if (p->sp.top_p < 1) cJSON_AddItemToArray(smp, cJSON_CreateString("top_p"));
    if (p->sp.min_p > 0) cJSON_AddItemToArray(smp, cJSON_CreateString("min_p"));
    if (p->sp.temp > 0) cJSON_AddItemToArray(smp, cJSON_CreateString("temperature"));
    cJSON_AddNumberToObject(g, "speculative.n_max", p->spec_n_max);
    cJSON_AddNumberToObject(g, "speculative.n_min", p->spec_n_min);
    cJSON_AddBoolToObject(g, "timings_per_token", st->timings_per_token);
    cJSON_AddBoolToObject(g, "post_sampling_probs", false);
    return g;
}

static bool parse_root(const oai_server *srv, cJSON *root, oai_job *job, oai_error *e) {
    nat_state *st = calloc(1, sizeof *st);
    cJSON *o = st ? translate(srv, root, st, e) : NULL;
    bool ok = o && oai_parse_completion(srv, o, job, e); /* clears job: the state goes in after */
    if (!st) oai_fail(e, 500, NULL, "out of memory");
    job->ext = st;
    job->ext_free = nat_free;
    if (ok) ok = native_settings(srv, root, job->req, st, e);
    if (ok && !(st->settings = settings_json(job, st))) ok = oai_fail(e, 500, NULL, "out of memory");
    cJSON_Delete(o);
    cJSON_Delete(root);
    return ok;
}

/* ---- /infill ------------------------------------------------------------- */

/* Appends the tokens of a text to ids; code, not markup: its special-token texts stay text (llama-server's
 * parse_special false). */
static bool add_text(const oai_server *srv, const char *text, cJSON *ids, oai_error *e) {
    sched_req q = {0};
    bool ok = oai_tokenize_text(srv, text, strlen(text), false, false, &q, e);
    for (int i = 0; ok && i < q.n_prompt; i++) cJSON_AddItemToArray(ids, cJSON_CreateNumber(q.prompt[i]));
    free(q.prompt);
    return ok;
}

/* add_text of x: a text, or ids and texts mixed. */
static bool add_code(const oai_server *srv, const cJSON *x, const char *name, cJSON *ids, oai_error *e) {
    const cJSON *it;
    if (cJSON_IsString(x)) return add_text(srv, x->valuestring, ids, e);
    if (!cJSON_IsArray(x)) return oai_fail(e, 400, name, "'%s' must be a string (or token ids and strings)", name);
    cJSON_ArrayForEach(it, x) {
        if (cJSON_IsNumber(it)) cJSON_AddItemToArray(ids, cJSON_CreateNumber(it->valuedouble));
        else if (!add_code(srv, it, name, ids, e)) return false;
    }
    return true;
}

static void add_id(cJSON *ids, brisk_token t) { cJSON_AddItemToArray(ids, cJSON_CreateNumber(t)); }

/* Moves the last n of from's items (all when n is larger) to the end of to. */
static void move_tail(cJSON *to, cJSON *from, int n) {
    int skip = cJSON_GetArraySize(from) - n;
    const cJSON *it;
    int i = 0;
    cJSON_ArrayForEach(it, from) if (i++ >= skip) add_id(to, (brisk_token)it->valuedouble);
}

/* llama-server's infill prompt (its format_prompt_infill, the repository-level FIM layout of Qwen2.5-Coder):
 *   [FIM_REP]myproject\n [FIM_SEP]file\n chunk ... [FIM_SEP]filename\n [BOS] [FIM_PRE]prefix prompt
 *   [FIM_SUF]suffix [FIM_MID]
 * (without FIM_REP / FIM_SEP the chunks are joined by a "--- snippet ---" line). The prefix keeps its
 * last 3/4 of a batch (llama-server's 2048; half the slot's context when that is less), the suffix its
 * first 1/4 less the prompt; the extra chunks, their last tokens first, fill the context but the batch
 * and twice n_predict (llama-server counts its server-wide n_predict there: -1 unless set). */
static cJSON *infill_ids(const oai_server *srv, const cJSON *r, oai_error *e) {
    brisk_token fim[6];
    for (int k = 0; k < 6; k++) fim[k] = brisk_token_fim(srv->model, k);
    if (fim[BRISK_FIM_PRE] < 0 || fim[BRISK_FIM_SUF] < 0 || fim[BRISK_FIM_MID] < 0)
        return oai_fail(e, 400, NULL, "this model has no fill-in-the-middle tokens: /infill needs a code model"), NULL;
    const cJSON *pre = oai_get(r, "input_prefix"), *suf = oai_get(r, "input_suffix"), *extra = oai_get(r, "input_extra");
    const cJSON *prompt = oai_get(r, "prompt"), *ch;
    if (!pre || !suf) return oai_fail(e, 400, pre ? "input_suffix" : "input_prefix", "'%s' is required",
                                      pre ? "input_suffix" : "input_prefix"), NULL;
    if (prompt && !cJSON_IsString(prompt)) return oai_fail(e, 400, "prompt", "'prompt' must be a string"), NULL;
    if (extra && !cJSON_IsArray(extra))
        return oai_fail(e, 400, "input_extra", "'input_extra' must be an array of {\"filename\", \"text\"}"), NULL;
    cJSON_ArrayForEach(ch, extra) {
        const cJSON *f = oai_get(ch, "filename");
        if (!cJSON_IsString(oai_get(ch, "text")) || (f && !cJSON_IsString(f)))
            return oai_fail(e, 400, "input_extra", "an input_extra chunk is {\"text\": string, \"filename\": string}"), NULL;
    }
    cJSON *tp = cJSON_CreateArray(), *ts = cJSON_CreateArray(), *tx = cJSON_CreateArray(), *tq = cJSON_CreateArray();
    cJSON *out = NULL;
    char name[1100];
    bool ok = add_code(srv, pre, "input_prefix", tp, e) && add_code(srv, suf, "input_suffix", ts, e);
    if (ok && prompt && prompt->valuestring[0]) { /* the prompt's own markup is parsed, as llama-server does */
        sched_req q = {0};
        ok = oai_tokenize_prompt(srv, prompt->valuestring, strlen(prompt->valuestring), false, &q, e);
        for (int i = 0; ok && i < q.n_prompt; i++) add_id(tq, q.prompt[i]);
        free(q.prompt);
    }
    if (ok && fim[BRISK_FIM_REP] >= 0) {
        add_id(tx, fim[BRISK_FIM_REP]);
        ok = add_text(srv, "myproject\n", tx, e);
    }
    cJSON_ArrayForEach(ch, extra) {
        if (!ok) break;
        const cJSON *f = oai_get(ch, "filename");
        if (fim[BRISK_FIM_SEP] >= 0) {
            add_id(tx, fim[BRISK_FIM_SEP]);
            snprintf(name, sizeof name, "%s\n", f ? f->valuestring : "tmp");
        } else
            snprintf(name, sizeof name, "\n\n--- snippet ---\n\n");
        ok = add_text(srv, name, tx, e) && add_text(srv, oai_get(ch, "text")->valuestring, tx, e);
    }
    if (ok && fim[BRISK_FIM_SEP] >= 0) {
        add_id(tx, fim[BRISK_FIM_SEP]);
        ok = add_text(srv, "filename\n", tx, e);
    }
    if (ok) {
        double np = -1;
        if (num(r, "n_predict", &np, e) <= 0 && num(r, "max_tokens", &np, e) <= 0) np = -1;
        /* the extras leave room for twice the generation, at least 4 tokens */
        int n_pred = np > srv->n_ctx_slot ? srv->n_ctx_slot : np > 2 ? (int)np : 2;
        int n_ctx = srv->n_ctx_slot, n_batch = n_ctx / 2 < 2048 ? n_ctx / 2 : 2048, n_q = cJSON_GetArraySize(tq);
        int n_pre = cJSON_GetArraySize(tp), n_suf = cJSON_GetArraySize(ts), n_ext = cJSON_GetArraySize(tx);
        int take_pre = n_pre < 3 * (n_batch / 4) ? n_pre : 3 * (n_batch / 4);
        int room_suf = n_batch / 4 - (2 + n_q), take_suf = n_suf < room_suf ? n_suf : room_suf > 0 ? room_suf : 0;
        int room_ext = n_ctx - n_batch - 2 * n_pred, take_ext = room_ext < 0 ? 0 : room_ext < n_ext ? room_ext : n_ext;
        out = cJSON_CreateArray();
        move_tail(out, tx, take_ext);
        if (brisk_add_bos(srv->model)) add_id(out, brisk_token_bos(srv->model));
        add_id(out, fim[BRISK_FIM_PRE]);
        move_tail(out, tp, take_pre);
        move_tail(out, tq, n_q);
        add_id(out, fim[BRISK_FIM_SUF]);
        int i = 0;
        cJSON_ArrayForEach(ch, ts) if (i++ < take_suf) add_id(out, (brisk_token)ch->valuedouble);
        add_id(out, fim[BRISK_FIM_MID]);
    }
    cJSON_Delete(tp);
    cJSON_Delete(ts);
    cJSON_Delete(tx);
    cJSON_Delete(tq);
    return out;
}

/* A /completion body, or an /infill one whose prompt becomes infill_ids' tokens. */
static bool parse_body(const oai_server *srv, const char *body, size_t len, bool infill, oai_job *job, oai_error *e) {
    memset(job, 0, sizeof *job);
    cJSON *root = oai_parse_body(body, len, e);
    if (!root) return false;
    if (infill) {
        cJSON *ids = infill_ids(srv, root, e);
        if (!ids) return cJSON_Delete(root), false;
        cJSON_DeleteItemFromObjectCaseSensitive(root, "prompt");
        cJSON_AddItemToObject(root, "prompt", ids);
    }
    return parse_root(srv, root, job, e);
}

bool nat_parse(const oai_server *srv, const char *body, size_t len, oai_job *job, oai_error *e) {
    return parse_body(srv, body, len, false, job, e);
}

bool nat_parse_infill(const oai_server *srv, const char *body, size_t len, oai_job *job, oai_error *e) {
    return parse_body(srv, body, len, true, job, e);
}

/* ---- results ----------------------------------------------------------- */

static void add_token(const oai_server *srv, cJSON *o, brisk_token t, float lp) {
    char buf[512], txt[2100];
    size_t n = 0;
    if (brisk_token_to_piece(srv->model, t, false, buf, sizeof buf - 1, &n) != BRISK_OK) n = 0;
    buf[n] = 0;
    oai_token_text(buf, n, txt, sizeof txt);
    cJSON_AddNumberToObject(o, "id", t);
    cJSON_AddStringToObject(o, "token", txt);
    cJSON *b = cJSON_AddArrayToObject(o, "bytes");
    for (size_t i = 0; i < n; i++) cJSON_AddItemToArray(b, cJSON_CreateNumber((unsigned char)buf[i]));
    cJSON_AddNumberToObject(o, "logprob", lp);
}

/* completion_probabilities: per token its id, text, bytes, log-probability and the top n_probs. */
static cJSON *probs_json(const oai_server *srv, const sched_token *t, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) {
        cJSON *o = cJSON_CreateObject();
        add_token(srv, o, t[i].id, t[i].logprob);
        cJSON *top = cJSON_AddArrayToObject(o, "top_logprobs");
        for (int k = 0; k < t[i].n_top; k++) {
            cJSON *x = cJSON_CreateObject();
            add_token(srv, x, t[i].top_id[k], t[i].top_lp[k]);
            cJSON_AddItemToArray(top, x);
        }
        cJSON_AddItemToArray(a, o);
    }
    return a;
}

static cJSON *ids_json(const sched_token *t, int n) {
    cJSON *a = cJSON_CreateArray();
    for (int i = 0; i < n; i++) cJSON_AddItemToArray(a, cJSON_CreateNumber(t[i].id));
    return a;
}

/* The prompt as its tokens spell it, special tokens included (llama-server's `prompt`). */
static char *prompt_text(const oai_server *srv, const sched_req *r) {
    strbuf b = {0};
    char buf[512];
    for (int i = 0; i < r->n_prompt; i++) {
        size_t n = 0;
        if (brisk_token_to_piece(srv->model, r->prompt[i], true, buf, sizeof buf, &n) == BRISK_OK) sb_append(&b, buf, n);
    }
    return sb_take(&b);
}

/* response_fields: only the named fields, a path a/b naming a nested one (under its whole path). */
static cJSON *pick_fields(cJSON *res, const cJSON *fields) {
    cJSON *out = cJSON_CreateObject();
    const cJSON *f;
    cJSON_ArrayForEach(f, fields) {
        const cJSON *cur = res;
        char path[256];
        snprintf(path, sizeof path, "%s", f->valuestring);
        for (char *save = NULL, *k = strtok_r(path, "/", &save); k && cur; k = strtok_r(NULL, "/", &save))
            cur = cJSON_IsObject(cur) ? cJSON_GetObjectItemCaseSensitive(cur, k) : NULL;
        if (cur && !cJSON_GetObjectItemCaseSensitive(out, f->valuestring))
            cJSON_AddItemToObject(out, f->valuestring, cJSON_Duplicate(cur, true));
    }
    cJSON_Delete(res);
    return out;
}

/* The final result of choice i (streamed: its text and tokens went out in the partial events). */
static cJSON *result_json(const oai_server *srv, oai_job *job, const oai_delta *d, int i) {
    nat_state *st = job->ext;
    const sched_req *q = job->req;
    const sched_choice *sc = &q->ch[i]; /* finished: the scheduler no longer writes it */
    const oai_choice_delta *cd = &d->ch[i];
    const char *text = job->stream || !job->ch[i].text.p ? "" : job->ch[i].text.p;
    cJSON *o = cJSON_CreateObject();
    cJSON_AddNumberToObject(o, "index", i);
    cJSON_AddStringToObject(o, "content", text);
    cJSON_AddItemToObject(o, "tokens", ids_json(sc->toks, st->return_tokens && !job->stream ? sc->n_toks : 0));
    cJSON_AddNumberToObject(o, "id_slot", cd->slot);
    cJSON_AddBoolToObject(o, "stop", true);
    cJSON_AddStringToObject(o, "model", job->model);
    cJSON_AddNumberToObject(o, "tokens_predicted", cd->n_gen);
    cJSON_AddNumberToObject(o, "tokens_evaluated", d->n_prompt);
    cJSON_AddItemToObject(o, "generation_settings", cJSON_Duplicate(st->settings, true));
    if (!st->prompt) st->prompt = prompt_text(srv, q); /* once for all of n_cmpl's results */
    cJSON_AddStringToObject(o, "prompt", st->prompt ? st->prompt : "");
    cJSON_AddBoolToObject(o, "has_new_line", job->ch[i].text.p && strchr(job->ch[i].text.p, '\n'));
    bool limit = cd->finish == SCHED_FINISH_LENGTH;
    cJSON_AddBoolToObject(o, "truncated", limit && (q->p.max_tokens < 0 || cd->n_gen < q->p.max_tokens));
    cJSON_AddStringToObject(o, "stop_type", limit ? "limit" : cd->stop_hit ? "word" : "eos");
    cJSON_AddStringToObject(o, "stopping_word", cd->stop_hit ? q->p.stop[cd->stop_hit - 1] : "");
    cJSON_AddNumberToObject(o, "tokens_cached", d->n_cached);
    cJSON_AddItemToObject(o, "timings", oai_timings(d));
    if (st->n_probs && !job->stream) cJSON_AddItemToObject(o, "completion_probabilities", probs_json(srv, sc->toks, sc->n_toks));
    return st->fields ? pick_fields(o, st->fields) : o;
}

char *nat_response(const oai_server *srv, oai_job *job, const oai_delta *d) {
    for (int i = 0; i < d->n && i < job->n; i++) sb_append(&job->ch[i].text, d->ch[i].text, d->ch[i].len);
    if (d->finish == SCHED_RUNNING) return NULL;
    cJSON *o = NULL;
    if (job->n == 1) o = result_json(srv, job, d, 0);
    else {
        o = cJSON_CreateArray();
        for (int i = 0; i < d->n && i < job->n; i++) cJSON_AddItemToArray(o, result_json(srv, job, d, i));
    }
    char *s = cJSON_PrintUnformatted(o);
    cJSON_Delete(o);
    return s;
}

static void event(strbuf *out, cJSON *o) {
    char *s = cJSON_PrintUnformatted(o);
    sb_printf(out, "data: %s\n\n", s ? s : "{}");
    free(s);
    cJSON_Delete(o);
}

void nat_stream_events(const oai_server *srv, oai_job *job, const oai_delta *d, strbuf *out) {
    const nat_state *st = job->ext;
    if (d->finish == SCHED_FINISH_ERROR || d->finish == SCHED_FINISH_CANCELLED) {
        oai_error e = {0};
        oai_fail(&e, 500, NULL, "%s", d->error && d->error[0] ? d->error : "generation cancelled");
        char *js = oai_error_json(&e);
        sb_printf(out, "error: %s\n\n", js ? js : "{}");
        free(js);
        return;
    }
    for (int i = 0; i < d->n && i < job->n; i++) {
        const oai_choice_delta *cd = &d->ch[i];
        if (job->ch[i].done) continue;
        sb_append(&job->ch[i].text, cd->text, cd->len); /* has_new_line of the final event */
        if (cd->len || cd->n_toks) {
            cJSON *o = cJSON_CreateObject();
            cJSON_AddNumberToObject(o, "index", i);
            cJSON_AddStringToObject(o, "content", cd->text);
            cJSON_AddItemToObject(o, "tokens", ids_json(cd->toks, cd->n_toks));
            cJSON_AddBoolToObject(o, "stop", false);
            cJSON_AddNumberToObject(o, "id_slot", cd->slot);
            cJSON_AddNumberToObject(o, "tokens_predicted", cd->n_gen);
            cJSON_AddNumberToObject(o, "tokens_evaluated", d->n_prompt);
            if (st->timings_per_token) cJSON_AddItemToObject(o, "timings", oai_timings(d));
            if (st->n_probs) cJSON_AddItemToObject(o, "completion_probabilities", probs_json(srv, cd->toks, cd->n_toks));
            event(out, o);
        }
        if (cd->finish != SCHED_RUNNING) {
            event(out, result_json(srv, job, d, i));
            job->ch[i].done = true;
        }
    }
}
