/* embed.h — /v1/embeddings (OpenAI's shape) and /v1/rerank (llama.cpp's and Jina's shape) over
 * a scheduler that computes embeddings (scheduler.h: n_inputs prompts a request). Request bodies
 * into an emb_job and its sched_req; the finished request's vectors into the response body.
 * No I/O here.
 *
 * /v1/rerank scores each document against the query by what the server's pooling gives:
 *   rank (--reranking)   the model's classification head over "query, document" as one input
 *                        (its "rerank" chat template when the file has one, else
 *                        [BOS] query [EOS] document [EOS] as llama.cpp builds it): head output 0;
 *   none (--pooling none) late interaction: query and documents are separate inputs, every
 *                        token's vector L2-normalised, the score the MaxSim: all documents in
 *                        one brisk_maxsim_batch call on the HTTP thread (emb_response);
 *   mean / cls / last    the cosine of the query's and the document's pooled vectors. */
#ifndef BK_SERVER_EMBED_H
#define BK_SERVER_EMBED_H
#include "server/openai.h"

enum { EMB_SCORE_HEAD, EMB_SCORE_MAXSIM, EMB_SCORE_COSINE };

typedef struct emb_job {
    bool rerank;            /* /v1/rerank, else /v1/embeddings */
    bool base64;            /* encoding_format "base64": little-endian f32 bytes */
    int normalize;          /* llama.cpp's embd_normalize (default 2: euclidean) */
    int score;              /* rerank: EMB_SCORE_* */
    int n_docs, top_n;
    bool return_documents;
    char **docs;            /* (n_docs) rerank's documents, echoed with return_documents */
    char model[128];        /* the request's `model`, or the server's id */
    sched_req *req;         /* inputs tokenized; the caller submits it (and releases it) */
} emb_job;

/* Validates the body (sch: the pooling it serves) and builds job->req. false: e says why (4xx). */
bool emb_parse(const oai_server *srv, const sched *sch, bool rerank, const char *body, size_t len, emb_job *job,
               oai_error *e);
/* The response body of a finished request (SCHED_FINISH_STOP), or NULL on OOM. */
char *emb_response(const oai_server *srv, const emb_job *job, const sched_req *r);
void emb_job_free(emb_job *job); /* not the request */
#endif
