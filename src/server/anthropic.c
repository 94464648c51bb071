/* anthropic.c — the Messages API of anthropic.h. */
#include "server/anthropic.h"

#include <stdlib.h>
#include <string.h>

char *anth_error_json(const oai_error *e) {
    return oai_error_json(e);
}

bool anth_parse(const oai_server *srv, const char *body, size_t len, oai_job *job, oai_error *e) {
    memset(job, 0, sizeof *job);
    return oai_fail(e, 404, NULL, "not yet");
}

char *anth_response(const oai_server *srv, oai_job *job, const oai_delta *d) { return NULL; }
void anth_stream_events(const oai_server *srv, oai_job *job, const oai_delta *d, strbuf *out) {}
char *anth_count_tokens(const oai_server *srv, const char *body, size_t len, oai_error *e) {
    return oai_fail(e, 404, NULL, "not yet"), NULL;
}
