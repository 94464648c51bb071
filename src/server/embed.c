/* embed.c — the embeddings and rerank endpoints of embed.h. */
#include "server/embed.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

/* The inputs being built: tokens one after another, an offset per input. */
typedef struct inputs {
    brisk_token *tok;
    int n, cap;
    int *off;  /* (n_in + 1) */
    int n_in, off_cap;
} inputs;

static bool push_tokens(inputs *in, const brisk_token *t, int n, oai_error *e) {
    if (n == 0) return true; /* an empty text (end_input refuses the empty input) */
    if (in->n + n > in->cap) {
        int cap = (in->n + n) * 2 + 64;
        brisk_token *p = realloc(in->tok, (size_t)cap * sizeof *p);
        if (!p) return oai_fail(e, 500, NULL, "out of memory");
        in->tok = p, in->cap = cap;
    }
    memcpy(in->tok + in->n, t, (size_t)n * sizeof *t);
    in->n += n;
    return true;
}

/* Ends the current input (its tokens pushed since the last end). */
static bool end_input(inputs *in, const char *param, oai_error *e) {
    int start = in->n_in ? in->off[in->n_in] : 0;
    if (in->n == start) return oai_fail(e, 400, param, "an input is empty");
    if (in->n_in + 2 > in->off_cap) {
        int cap = in->off_cap * 2 + 8;
        int *p = realloc(in->off, (size_t)cap * sizeof *p);
        if (!p) return oai_fail(e, 500, NULL, "out of memory");
        in->off = p, in->off_cap = cap;
    }
    in->off[0] = 0;
    in->off[++in->n_in] = in->n;
    return true;
}

/* Appends text's tokens (add_special: BOS/EOS as the vocabulary says, as llama.cpp's server
 * tokenizes embedding inputs; control tokens spelled in the text are parsed). */
static bool push_text(const oai_server *srv, inputs *in, const char *text, bool add_special, const char *param,
                      oai_error *e) {
    size_t len = strlen(text);
    if (srv->n_ctx_slot > 0 && len / srv->max_piece > (size_t)srv->n_ctx_slot + 16)
        return oai_fail(e, 400, param, "an input of %zu bytes cannot fit a context of %d tokens", len, srv->n_ctx_slot);
    int64_t n = 0;
    brisk_status s = brisk_tokenize(srv->model, text, len, add_special, true, NULL, 0, &n);
    if (s != BRISK_OK && s != BRISK_ERR_RANGE) return oai_fail(e, 400, param, "tokenize: %s", brisk_last_error());
    if (n > (1 << 24)) return oai_fail(e, 400, param, "an input is too long (%lld tokens)", (long long)n);
    brisk_token *t = malloc((size_t)(n > 0 ? n : 1) * sizeof *t);
    if (!t) return oai_fail(e, 500, NULL, "out of memory");
    bool ok = brisk_tokenize(srv->model, text, len, add_special, true, t, n, &n) == BRISK_OK;
    if (!ok) oai_fail(e, 400, param, "tokenize: %s", brisk_last_error());
    else ok = push_tokens(in, t, (int)n, e);
    free(t);
    return ok;
}

/* One input of /v1/embeddings: a string or an array of token ids. */
static bool push_input(const oai_server *srv, inputs *in, const cJSON *x, oai_error *e) {
    if (cJSON_IsString(x)) return push_text(srv, in, x->valuestring, true, "input", e) && end_input(in, "input", e);
    if (!cJSON_IsArray(x)) return oai_fail(e, 400, "input", "input must be a string, an array of strings or of token arrays");
    int nv = brisk_n_vocab(srv->model);
    const cJSON *t;
    cJSON_ArrayForEach(t, x) {
        if (!cJSON_IsNumber(t) || t->valuedouble != (double)(int)t->valuedouble || t->valueint < 0 || t->valueint >= nv)
            return oai_fail(e, 400, "input", "a token id must be an integer in [0, %d)", nv);
        brisk_token id = t->valueint;
        if (!push_tokens(in, &id, 1, e)) return false;
    }
    return end_input(in, "input", e);
}

/* input: a string, an array of strings, an array of token ids (one input), or of token arrays. */
static bool embeddings_inputs(const oai_server *srv, const cJSON *root, inputs *in, oai_error *e) {
    const cJSON *x = cJSON_GetObjectItemCaseSensitive(root, "input");
    if (!x) x = cJSON_GetObjectItemCaseSensitive(root, "content"); /* llama.cpp's non-OpenAI name */
    if (!x) return oai_fail(e, 400, "input", "input is required");
    if (cJSON_IsArray(x) && cJSON_GetArraySize(x) == 0) return oai_fail(e, 400, "input", "input is an empty array");
    if (cJSON_IsArray(x) && cJSON_IsNumber(cJSON_GetArrayItem(x, 0))) return push_input(srv, in, x, e);
    if (!cJSON_IsArray(x)) return push_input(srv, in, x, e);
    const cJSON *it;
    cJSON_ArrayForEach(it, x) if (!push_input(srv, in, it, e)) return false;
    return true;
}

/* Whether the vocabulary appends EOS to a text (tokenizer.ggml.add_eos_token): "" tokenized with
 * its special tokens ends in EOS. */
static bool adds_eos(const brisk_model *m) {
    brisk_token t[4];
    int64_t n = 0;
    brisk_token eos = brisk_token_eos(m);
    return eos >= 0 && brisk_tokenize(m, "", 0, true, false, t, 4, &n) == BRISK_OK && n > 0 && t[n - 1] == eos;
}

/* Rank: one input per document, query and document in the model's rerank template, or as
 * llama.cpp joins them without one. */
static bool rank_inputs(const oai_server *srv, const char *query, char **docs, int n, inputs *in, oai_error *e) {
    char *tmpl = brisk_model_meta_str(srv->model, "tokenizer.chat_template.rerank");
    bool ok = true, eos = adds_eos(srv->model);
    brisk_token bos = brisk_token_bos(srv->model), end = brisk_token_eos(srv->model);
    for (int i = 0; ok && i < n; i++) {
        if (tmpl) {
            strbuf b = {0};
            for (const char *p = tmpl; *p;) {
                if (!strncmp(p, "{query}", 7)) sb_puts(&b, query), p += 7;
                else if (!strncmp(p, "{document}", 10)) sb_puts(&b, docs[i]), p += 10;
                else sb_append(&b, p++, 1);
            }
            char *text = sb_take(&b);
            ok = text ? push_text(srv, in, text, false, "documents", e) : oai_fail(e, 500, NULL, "out of memory");
            free(text);
        } else {
            if (brisk_add_bos(srv->model) && bos >= 0) ok = push_tokens(in, &bos, 1, e);
            ok = ok && push_text(srv, in, query, false, "query", e);
            if (ok && eos) ok = push_tokens(in, &end, 1, e);
            ok = ok && push_text(srv, in, docs[i], false, "documents", e);
            if (ok && eos) ok = push_tokens(in, &end, 1, e);
        }
        ok = ok && end_input(in, "documents", e);
    }
    free(tmpl);
    return ok;
}

static bool rerank_parse(const oai_server *srv, const cJSON *root, emb_job *job, inputs *in, oai_error *e) {
    const cJSON *q = cJSON_GetObjectItemCaseSensitive(root, "query");
    const cJSON *d = cJSON_GetObjectItemCaseSensitive(root, "documents");
    if (!d) d = cJSON_GetObjectItemCaseSensitive(root, "texts"); /* TEI's name */
    if (!cJSON_IsString(q)) return oai_fail(e, 400, "query", "query must be a string");
    if (!cJSON_IsArray(d) || cJSON_GetArraySize(d) == 0)
        return oai_fail(e, 400, "documents", "documents must be a non-empty array of strings");
    job->n_docs = cJSON_GetArraySize(d);
    if (!(job->docs = calloc((size_t)job->n_docs, sizeof *job->docs))) return oai_fail(e, 500, NULL, "out of memory");
    for (int i = 0; i < job->n_docs; i++) {
        const cJSON *x = cJSON_GetArrayItem(d, i);
        if (cJSON_IsObject(x)) x = cJSON_GetObjectItemCaseSensitive(x, "text"); /* Jina's {"text": ...} */
        if (!cJSON_IsString(x)) return oai_fail(e, 400, "documents", "documents must be strings");
        if (!(job->docs[i] = strdup(x->valuestring))) return oai_fail(e, 500, NULL, "out of memory");
    }
    const cJSON *tn = cJSON_GetObjectItemCaseSensitive(root, "top_n");
    job->top_n = job->n_docs;
    if (tn && !cJSON_IsNull(tn)) {
        if (!cJSON_IsNumber(tn) || tn->valuedouble < 1 || tn->valuedouble != (double)(int)tn->valuedouble)
            return oai_fail(e, 400, "top_n", "top_n must be a positive integer");
        if (tn->valueint < job->top_n) job->top_n = tn->valueint;
    }
    const cJSON *rd = cJSON_GetObjectItemCaseSensitive(root, "return_documents");
    if (rd && !cJSON_IsBool(rd)) return oai_fail(e, 400, "return_documents", "return_documents must be a boolean");
    job->return_documents = cJSON_IsTrue(rd);
    if (job->score == EMB_SCORE_HEAD) return rank_inputs(srv, q->valuestring, job->docs, job->n_docs, in, e);
    /* the query is input 0, document i input i + 1 */
    if (!push_text(srv, in, q->valuestring, true, "query", e) || !end_input(in, "query", e)) return false;
    for (int i = 0; i < job->n_docs; i++)
        if (!push_text(srv, in, job->docs[i], true, "documents", e) || !end_input(in, "documents", e)) return false;
    return true;
}

static int n_embd(const brisk_model *m) {
    brisk_model_info info;
    brisk_model_get_info(m, &info);
    return info.n_embd;
}

bool emb_parse(const oai_server *srv, const sched *sch, bool rerank, const char *body, size_t len, emb_job *job,
               oai_error *e) {
    memset(job, 0, sizeof *job);
    job->rerank = rerank;
    job->normalize = 2;
    snprintf(job->model, sizeof job->model, "%s", srv->model_id);
    if (!sched_embeddings(sch))
        return oai_fail(e, 501, NULL, "this server does not compute %s: start it with %s",
                        rerank ? "rerank scores" : "embeddings", rerank ? "--reranking (or --embeddings)" : "--embeddings");
    brisk_pooling pl = sched_pooling(sch);
    if (!rerank && pl == BRISK_POOLING_NONE)
        return oai_fail(e, 400, NULL, "pooling none gives a vector per token, which /v1/embeddings (OpenAI's shape) "
                                      "cannot return; start the server with another --pooling");
    if (!rerank && pl == BRISK_POOLING_RANK)
        return oai_fail(e, 400, NULL, "this server serves rerank scores (--reranking): use /v1/rerank");
    job->score = pl == BRISK_POOLING_RANK ? EMB_SCORE_HEAD : pl == BRISK_POOLING_NONE ? EMB_SCORE_MAXSIM : EMB_SCORE_COSINE;
    cJSON *root = oai_parse_body(body, len, e);
    if (!root) return false;
    inputs in = {0};
    bool ok = true;
    const cJSON *m = cJSON_GetObjectItemCaseSensitive(root, "model");
    if (m && !cJSON_IsNull(m)) {
        if (!cJSON_IsString(m)) ok = oai_fail(e, 400, "model", "model must be a string");
        else if ((ok = oai_model_ok(srv, m->valuestring, e))) snprintf(job->model, sizeof job->model, "%s", m->valuestring);
    }
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(root, "encoding_format");
    if (ok && f && !cJSON_IsNull(f)) {
        if (cJSON_IsString(f) && !strcmp(f->valuestring, "base64")) job->base64 = true;
        else if (!cJSON_IsString(f) || strcmp(f->valuestring, "float"))
            ok = oai_fail(e, 400, "encoding_format", "encoding_format must be \"float\" or \"base64\"");
    }
    const cJSON *nz = cJSON_GetObjectItemCaseSensitive(root, "embd_normalize");
    if (ok && nz && !cJSON_IsNull(nz)) {
        if (!cJSON_IsNumber(nz) || nz->valuedouble < -1 || nz->valuedouble > 64 || nz->valuedouble != (int)nz->valuedouble)
            ok = oai_fail(e, 400, "embd_normalize", "embd_normalize must be an integer in [-1, 64]");
        else job->normalize = nz->valueint;
    }
    const cJSON *dim = cJSON_GetObjectItemCaseSensitive(root, "dimensions");
    if (ok && dim && !cJSON_IsNull(dim) &&
        (!cJSON_IsNumber(dim) || dim->valueint != n_embd(srv->model)))
        ok = oai_fail(e, 400, "dimensions", "this model's embeddings have %d dimensions (no truncation)",
                      n_embd(srv->model));
    if (ok) ok = rerank ? rerank_parse(srv, root, job, &in, e) : embeddings_inputs(srv, root, &in, e);
    cJSON_Delete(root);
    if (ok && !(job->req = sched_req_new())) ok = oai_fail(e, 500, NULL, "out of memory");
    if (ok && sched_req_set_inputs(job->req, in.off, in.n_in) != BRISK_OK) ok = oai_fail(e, 400, NULL, "%s", brisk_last_error());
    if (ok) {
        job->req->prompt = in.tok;
        job->req->n_prompt = in.n;
        in.tok = NULL;
    }
    free(in.tok);
    free(in.off);
    return ok;
}

void emb_job_free(emb_job *job) {
    for (int i = 0; job->docs && i < job->n_docs; i++) free(job->docs[i]);
    free(job->docs);
    job->docs = NULL;
}

static cJSON *usage(int n) {
    cJSON *u = cJSON_CreateObject();
    cJSON_AddNumberToObject(u, "prompt_tokens", n);
    cJSON_AddNumberToObject(u, "total_tokens", n);
    return u;
}

/* base64 of n bytes (RFC 4648, padded); the caller frees. */
static char *base64(const unsigned char *p, size_t n) {
    static const char a[] = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    char *o = malloc((n + 2) / 3 * 4 + 1), *w = o;
    if (!o) return NULL;
    for (size_t i = 0; i < n; i += 3) {
        unsigned v = (unsigned)p[i] << 16 | (i + 1 < n ? (unsigned)p[i + 1] << 8 : 0) | (i + 2 < n ? p[i + 2] : 0);
        *w++ = a[v >> 18 & 63];
        *w++ = a[v >> 12 & 63];
        *w++ = i + 1 < n ? a[v >> 6 & 63] : '=';
        *w++ = i + 2 < n ? a[v & 63] : '=';
    }
    *w = 0;
    return o;
}

/* The data array of /v1/embeddings: each input's vector, normalised as asked. */
static bool embeddings_data(const emb_job *job, const sched_req *r, float *tmp, cJSON *data) {
    for (int i = 0; i < r->n_embd_rows; i++) {
        brisk_embd_normalize(r->embd + (size_t)i * r->n_embd_out, tmp, r->n_embd_out, job->normalize);
        cJSON *o = cJSON_CreateObject();
        if (!o) return false;
        cJSON_AddItemToArray(data, o);
        cJSON_AddStringToObject(o, "object", "embedding");
        cJSON_AddNumberToObject(o, "index", i);
        if (job->base64) { /* the floats' bytes: little-endian on every host brisk runs on */
            char *s = base64((const unsigned char *)tmp, (size_t)r->n_embd_out * sizeof(float));
            if (!s) return false;
            cJSON_AddStringToObject(o, "embedding", s);
            free(s);
        } else {
            cJSON *v = cJSON_AddArrayToObject(o, "embedding");
            for (int k = 0; v && k < r->n_embd_out; k++) cJSON_AddItemToArray(v, cJSON_CreateNumber(tmp[k]));
            if (!v) return false;
        }
    }
    return true;
}

/* Document i's score (see embed.h); tmp holds two normalised vectors, maxsim every document's
 * late-interaction score (EMB_SCORE_MAXSIM). */
static float rerank_score(const emb_job *job, const sched_req *r, int i, float *tmp, const float *maxsim) {
    int d = r->n_embd_out;
    if (job->score == EMB_SCORE_HEAD) return r->embd[(size_t)i * d];
    if (job->score == EMB_SCORE_COSINE) {
        brisk_embd_normalize(r->embd, tmp, d, 2);
        brisk_embd_normalize(r->embd + (size_t)(i + 1) * d, tmp + d, d, 2);
        double s = 0;
        for (int k = 0; k < d; k++) s += (double)tmp[k] * tmp[d + k];
        return (float)s;
    }
    return maxsim[i];
}

/* MaxSim of every document (input i + 1, token rows [in_off[i+1], in_off[i+2])) against the query
 * (rows [0, in_off[1])), rows L2-normalised on the way, in one call. On this (the HTTP) thread, not
 * the scheduler's: scoring a long request there would hold up every other slot's decoding. NULL on
 * failure (brisk_last_error says why). */
static float *rerank_maxsim(const sched_req *r, int n_docs) {
    float *scores = malloc((size_t)n_docs * sizeof *scores);
    int64_t *off = malloc((size_t)(n_docs + 1) * sizeof *off);
    bool ok = scores && off;
    for (int i = 0; ok && i <= n_docs; i++) off[i] = r->in_off[i + 1];
    ok = ok && brisk_maxsim_batch(NULL, r->embd, r->in_off[1], r->embd, off, n_docs, r->n_embd_out, true,
                                  scores) == BRISK_OK;
    free(off);
    if (!ok) free(scores);
    return ok ? scores : NULL;
}

typedef struct scored { int index; float score; } scored;
static int by_score(const void *a, const void *b) {
    float x = ((const scored *)a)->score, y = ((const scored *)b)->score;
    return x < y ? 1 : x > y ? -1 : ((const scored *)a)->index - ((const scored *)b)->index;
}

static bool rerank_results(const emb_job *job, const sched_req *r, float *tmp, cJSON *results) {
    float *maxsim = job->score == EMB_SCORE_MAXSIM ? rerank_maxsim(r, job->n_docs) : NULL;
    scored *s = malloc((size_t)job->n_docs * sizeof *s);
    if (!s || (job->score == EMB_SCORE_MAXSIM && !maxsim)) {
        free(s);
        free(maxsim);
        return false;
    }
    for (int i = 0; i < job->n_docs; i++) s[i] = (scored){i, rerank_score(job, r, i, tmp, maxsim)};
    free(maxsim);
    qsort(s, (size_t)job->n_docs, sizeof *s, by_score);
    for (int i = 0; i < job->top_n; i++) {
        cJSON *o = cJSON_CreateObject();
        cJSON_AddItemToArray(results, o);
        cJSON_AddNumberToObject(o, "index", s[i].index);
        cJSON_AddNumberToObject(o, "relevance_score", s[i].score);
        if (job->return_documents) cJSON_AddStringToObject(cJSON_AddObjectToObject(o, "document"), "text",
                                                           job->docs[s[i].index]);
    }
    free(s);
    return true;
}

char *emb_response(const oai_server *srv, const emb_job *job, const sched_req *r) {
    float *tmp = malloc(2 * (size_t)r->n_embd_out * sizeof(float));
    cJSON *root = cJSON_CreateObject();
    bool ok = tmp && root;
    if (ok) {
        cJSON_AddStringToObject(root, "model", job->model);
        cJSON_AddStringToObject(root, "object", "list");
        cJSON_AddItemToObject(root, "usage", usage(r->n_prompt));
        cJSON *arr = cJSON_AddArrayToObject(root, job->rerank ? "results" : "data");
        ok = arr && (job->rerank ? rerank_results(job, r, tmp, arr) : embeddings_data(job, r, tmp, arr));
    }
    char *s = ok ? cJSON_PrintUnformatted(root) : NULL;
    cJSON_Delete(root);
    free(tmp);
    return s;
}
