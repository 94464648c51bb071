/* openai.h — the OpenAI API shapes: request bodies of /v1/chat/completions and
 * /v1/completions into scheduler requests, generated output into responses
 * and SSE chunks, errors into {"error": {...}}. No I/O here.
 */
#ifndef BK_SERVER_OPENAI_H
#define BK_SERVER_OPENAI_H
#include <cjson/cJSON.h>
#include <stdbool.h>

#include "brisk.h"
#include "server/chat.h"
#include "server/scheduler.h"
#include "server/strbuf.h"

typedef struct oai_error {
    int status;          /* HTTP status */
    const char *type;    /* "invalid_request_error", ... */
    const char *code;    /* NULL or a code ("context_length_exceeded") */
    char param[64];      /* "" or the offending field */
    char message[512];
    int n_prompt, n_ctx; /* code "context_length_exceeded": the prompt's tokens (at least) and the context's */
} oai_error;

/* Fills e (and returns false, for `return oai_fail(...)`). */
bool oai_fail(oai_error *e, int status, const char *param, const char *fmt, ...) BK_PRINTF(4, 5);
/* {"error": {"message", "type", "param", "code"}} */
char *oai_error_json(const oai_error *e);

typedef struct oai_server {  /* what every request reads; read-only after oai_server_init */
    brisk_model *model;
    const chat_fmt *fmt;
    const char *model_id;
    int n_parallel;          /* slots: the largest `n` a request may ask for */
    const char *const *names; /* (n_names) other names `model` may give (file name, --alias) */
    int n_names;
    int n_ctx_slot;          /* tokens a request may hold */
    size_t max_piece;        /* bytes of the longest token: a text longer than n_ctx_slot * max_piece
                                bytes cannot fit and is refused before tokenizing; set by init */
} oai_server;

/* Request mapping shared by the APIs that become a chat request (anthropic.c, responses.c). */
/* Field k of o; NULL when o is not an object, or k is absent or null. */
const cJSON *oai_get(const cJSON *o, const char *k);
/* Copies field k of from (a deep copy) into to as `as`; false when from has none. */
bool oai_copy_field(const cJSON *from, const char *k, cJSON *to, const char *as);
/* oai_copy_field for each pair of map (source name, chat name), which ends with a NULL. */
void oai_copy_fields(const cJSON *from, cJSON *to, const char *const *map);
/* Appends {"role": role, "content": text} to the array msgs. */
void oai_add_message(cJSON *msgs, const char *role, const char *text);

/* Measures the vocabulary (max_piece). */
brisk_status oai_server_init(oai_server *srv);
/* Whether a request's `model` names this server's model; false fills e (404). */
bool oai_model_ok(const oai_server *srv, const char *name, oai_error *e);
/* Parses body as a JSON object; NULL and e on bad JSON, a NUL character
 * (cJSON would cut the string there) or not an object. */
cJSON *oai_parse_body(const char *body, size_t len, oai_error *e);
/* A token's text for JSON: valid UTF-8 as is; a piece holding bytes that
 * are not valid UTF-8 (part of a character) becomes "bytes:\xe4\xbd" as
 * OpenAI writes them (the raw bytes go in `bytes`). */
void oai_token_text(const char *s, size_t n, char *out, size_t cap);

typedef struct oai_choice {  /* the output state of one of a job's n choices */
    chat_parser parser;      /* chat: content / reasoning / tool calls */
    bool head_sent;          /* streaming: the role chunk went out */
    bool done;               /* streaming: the finish chunk went out */
    int calls_sent;          /* streaming: tool calls sent */
    strbuf text;             /* completions: text so far (non-streaming) */
    size_t lp_offset;        /* completions streaming with logprobs: the next token's text_offset */
} oai_choice;

typedef struct oai_job {     /* one completion request */
    bool chat, stream, include_usage, tools, logprobs, echo;
    char *echo_text;         /* completions with echo: the prompt, put before each choice's text */
    int tool_mode;           /* 0 auto, 1 required (a call is forced), 2 a named function */
    bool parallel_tools;     /* parallel_tool_calls: the grammar lets one or more calls follow each other */
    cJSON *tool_defs;        /* the request's tools (a copy, owned): every choice's parser reads this one */
    int anth_block;          /* /v1/messages streaming: index of the next content block */
    int anth_open;           /* /v1/messages streaming: type of the open block (0 none, 1 text, 2 thinking) */
    bool anth_hide_thinking; /* /v1/messages: thinking.display "omitted": thinking blocks carry no text */
    void *ext;               /* another API's own state (/v1/responses), freed by oai_job_free through ext_free */
    void (*ext_free)(void *ext);
    int top_logprobs;
    char id[48];
    char model[128];         /* the request's `model` (one of the server's names), else the server's id:
                                what the answer says it came from, as llama-server does */
    long long created;       /* unix seconds */
    sched_req *req;          /* prompt and sampling set by oai_parse; the caller submits it */
    int n;                   /* choices (`n`) */
    oai_choice *ch;          /* (n) */
} oai_job;

/* Validates the body and builds job->req (template rendered, tokenized).
 * false: e says why (4xx). */
bool oai_parse(const oai_server *srv, const char *body, size_t len, bool chat, oai_job *job, oai_error *e);
/* The same from a parsed chat request (root stays the caller's). */
bool oai_parse_chat(const oai_server *srv, const cJSON *root, oai_job *job, oai_error *e);
/* The same from a parsed /v1/completions request (native.c's translation of llama-server's /completion). */
bool oai_parse_completion(const oai_server *srv, const cJSON *root, oai_job *job, oai_error *e);
/* Tokenizes a prompt text into r->prompt (n_prompt); a text that cannot fit the context by its bytes
 * is refused before tokenizing (context_length_exceeded). */
bool oai_tokenize_prompt(const oai_server *srv, const char *text, size_t len, bool add_special, sched_req *r,
                         oai_error *e);
/* The same without the length check; parse_special false: special tokens' texts stay text (code). */
bool oai_tokenize_text(const oai_server *srv, const char *text, size_t len, bool add_special, bool parse_special,
                       sched_req *r, oai_error *e);
void oai_job_free(oai_job *job); /* not the request */

/* New output of one choice since the last call, copied under the lock. */
typedef struct oai_choice_delta {
    const char *text;
    size_t len;
    const sched_token *toks;
    int n_toks;
    sched_finish finish;     /* SCHED_RUNNING while more may come */
    int n_gen;               /* tokens generated so far */
    int stop_hit, slot;      /* sched_choice's */
} oai_choice_delta;

typedef struct oai_delta {
    int n;                   /* choices */
    const oai_choice_delta *ch; /* (n) */
    sched_finish finish;     /* the request's: SCHED_RUNNING while any choice runs */
    const char *error;
    int n_prompt, n_cached;
    int64_t n_drafted, n_draft_accepted; /* speculative decoding: proposals verified, and accepted */
    double prompt_ms, predicted_ms;      /* submission to the first token (queueing and prefill), then to the end */
} oai_delta;

/* llama-server's timings object for a finished request (prompt_n, prompt_ms, predicted_n, predicted_ms,
 * their per-token and per-second figures; draft_n and draft_n_accepted when it speculated). */
cJSON *oai_timings(const oai_delta *d);

/* Streaming: appends the SSE events for d (each choice's chunks carry its
 * index; when a choice ends its finish chunk; when the request ends, the
 * usage chunk if asked and "data: [DONE]"). */
void oai_stream_events(const oai_server *srv, oai_job *job, const oai_delta *d, strbuf *out);
/* Non-streaming: feeds d; when d->finish is set, returns the response body (else NULL). */
char *oai_response(const oai_server *srv, oai_job *job, const oai_delta *d);

/* /tokenize, /detokenize: the response body, or NULL and e. */
char *oai_tokenize(const oai_server *srv, const char *body, size_t len, oai_error *e);
char *oai_detokenize(const oai_server *srv, const char *body, size_t len, oai_error *e);
/* /apply-template: {"prompt": the chat request's messages rendered by the template}. */
char *oai_apply_template(const oai_server *srv, const char *body, size_t len, oai_error *e);
#endif
