/* native.h — llama-server's own completion API (POST /completion and /completions; /v1/completions
 * is OpenAI's, in openai.h): the request's llama.cpp names (n_predict, n_probs, n_cmpl, mixed token and
 * text prompts, logit_bias as pairs, json_schema, samplers, response_fields, return_tokens) become an
 * OpenAI completions job of openai.h, and its output becomes llama-server's shapes: one result object
 * (an array of them for n_cmpl > 1) with content, tokens, stop_type, stopping_word, generation_settings,
 * timings and completion_probabilities; streamed as `data: {...}` events, one per delta, the last with
 * "stop": true and no [DONE]. Sampler settings brisk does not have (typical_p, mirostat, DRY, XTC,
 * dynamic temperature, top-n-sigma) are accepted at their "off" values and refused otherwise, by name.
 * No I/O here.
 */
#ifndef BK_SERVER_NATIVE_H
#define BK_SERVER_NATIVE_H
#include "server/openai.h"

/* Validates a /completion request and builds job (as oai_parse does); the native state lives in
 * job->ext (freed by oai_job_free). */
bool nat_parse(const oai_server *srv, const char *body, size_t len, oai_job *job, oai_error *e);
/* /infill (llama-server's code completion, as llama.vim and llama.vscode call it): input_prefix,
 * input_suffix, input_extra chunks and an optional prompt laid out with the model's FIM tokens
 * (infill_ids in native.c), then the request as /completion takes it. */
bool nat_parse_infill(const oai_server *srv, const char *body, size_t len, oai_job *job, oai_error *e);
/* Non-streaming: the result (or the array of n_cmpl results) once d has finished (else NULL). */
char *nat_response(const oai_server *srv, oai_job *job, const oai_delta *d);
/* Streaming: appends the events for d. */
void nat_stream_events(const oai_server *srv, oai_job *job, const oai_delta *d, strbuf *out);
#endif
