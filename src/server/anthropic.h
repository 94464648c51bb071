/* anthropic.h — the Anthropic Messages API (/v1/messages) on top of the chat
 * machinery of openai.h: a request (system, also as messages; content blocks,
 * tool_use and tool_result blocks, tools, server and deferred tools being left
 * out; tool_choice, thinking) becomes an OpenAI-style chat job, and the
 * job's output becomes a Messages response or its stream of events
 * (message_start, content_block_start/delta/stop, message_delta, message_stop).
 * Errors are {"type": "error", "error": {"type", "message"}}. No I/O here.
 */
#ifndef BK_SERVER_ANTHROPIC_H
#define BK_SERVER_ANTHROPIC_H
#include "server/openai.h"

/* Validates a Messages request and builds job (as oai_parse does). */
bool anth_parse(const oai_server *srv, const char *body, size_t len, oai_job *job, oai_error *e);
/* Non-streaming: the Message once d has finished (else NULL). */
char *anth_response(const oai_server *srv, oai_job *job, const oai_delta *d);
/* Streaming: appends the events for d. */
void anth_stream_events(const oai_server *srv, oai_job *job, const oai_delta *d, strbuf *out);
/* /v1/messages/count_tokens: {"input_tokens": N}, or NULL and e. */
char *anth_count_tokens(const oai_server *srv, const char *body, size_t len, oai_error *e);
/* An error in Anthropic's shape. */
char *anth_error_json(const oai_error *e);
#endif
