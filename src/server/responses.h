/* responses.h — the OpenAI Responses API (/v1/responses) on top of the chat
 * machinery of openai.h, as anthropic.h does for Messages: a request (input
 * as a string or as items: messages, function_call, function_call_output and
 * reasoning items; instructions; function tools, and the functions of
 * namespace tools, hosted tools being left out; previous_response_id)
 * becomes an OpenAI-style chat job, and the job's output becomes a Response
 * (reasoning, message and function_call output items) or its stream of events
 * (response.created ... response.completed, each with a sequence_number).
 * Errors keep OpenAI's {"error": {...}} shape. No I/O here.
 *
 * resp_store keeps the conversation (input and output items) of each stored
 * response for previous_response_id, in memory for the server's lifetime: the
 * oldest go first once the store holds more than its bytes or entries. It
 * locks itself: any thread may use it.
 */
#ifndef BK_SERVER_RESPONSES_H
#define BK_SERVER_RESPONSES_H
#include "server/openai.h"

typedef struct resp_store resp_store;

brisk_status resp_store_new(size_t max_bytes, int max_entries, resp_store **out);
void resp_store_free(resp_store *st); /* accepts NULL */

/* Validates a Responses request and builds job (as oai_parse does); a
 * finished response goes into st unless the request said store: false.
 * The job's Responses state lives in job->ext (freed by oai_job_free). */
bool resp_parse(const oai_server *srv, resp_store *st, const char *body, size_t len, oai_job *job, oai_error *e);
/* Non-streaming: the Response once d has finished (else NULL). */
char *resp_response(const oai_server *srv, oai_job *job, const oai_delta *d);
/* Streaming: appends the events for d. */
void resp_stream_events(const oai_server *srv, oai_job *job, const oai_delta *d, strbuf *out);
#endif
