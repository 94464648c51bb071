/* fuzz_server_request.c — libFuzzer target for the server's request parsers: the bodies of OpenAI's
 * /v1/chat/completions and /v1/completions (openai.h), Anthropic's /v1/messages and count_tokens
 * (anthropic.h), OpenAI's /v1/responses (responses.h) and llama-server's /completion and /infill
 * (native.h), each into a scheduler request as the server builds it, over the qwen2 vocabulary
 * ($SHARED/data or ../shared/data) and the Qwen3.5 chat template (tests/data/chat_templates; XML tool
 * calls, reasoning).
 *
 * Input: byte 0 picks the parser (b % 7), the rest is the body. Checks: a refusal has a 4xx/5xx status
 * and a message; an accepted request has 1..128 choices, a prompt of token ids inside the vocabulary
 * that fits the slot's context (or is left to the scheduler's own check: the context test is there),
 * sampling settings in their ranges, and at most SCHED_MAX_STOP stop strings; everything is freed (ASan
 * finds leaks). A failed check aborts. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/anthropic.h"
#include "server/native.h"
#include "server/openai.h"
#include "server/responses.h"

#define CHECK(cond)                                                                               \
    do {                                                                                          \
        if (!(cond)) {                                                                            \
            fprintf(stderr, "fuzz_server_request: line %d: %s does not hold\n", __LINE__, #cond); \
            abort();                                                                              \
        }                                                                                         \
    } while (0)

static oai_server g_srv;
static resp_store *g_store;

static char *slurp(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *s = malloc((size_t)n + 1);
    if (s && fread(s, 1, (size_t)n, f) != (size_t)n) {
        free(s);
        s = NULL;
    }
    if (s) s[n] = 0;
    fclose(f);
    return s;
}

int LLVMFuzzerInitialize(int *argc, char ***argv) {
    (void)argc, (void)argv;
    const char *shared = getenv("SHARED");
    char path[1024];
    snprintf(path, sizeof path, "%s/data/llama.cpp-vocab/ggml-vocab-qwen2.gguf", shared ? shared : "../shared");
    brisk_model_params mp = brisk_model_default_params();
    mp.vocab_only = true;
    brisk_model *m = NULL;
    chat_fmt *fmt = NULL;
    char *tmpl = slurp("tests/data/chat_templates/qwen3.5.jinja");
    if (!tmpl || brisk_model_load(path, &mp, &m) != BRISK_OK || chat_fmt_new(m, tmpl, &fmt) != BRISK_OK ||
        resp_store_new(1 << 20, 64, &g_store) != BRISK_OK) {
        fprintf(stderr, "fuzz_server_request: setup: %s\n", brisk_last_error());
        abort();
    }
    free(tmpl);
    static const char *const names[] = {"alias"};
    g_srv = (oai_server){.model = m, .fmt = fmt, .model_id = "m", .n_parallel = 4, .names = names, .n_names = 1,
                         .n_ctx_slot = 4096};
    CHECK(oai_server_init(&g_srv) == BRISK_OK);
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 1) return 0;
    const char *body = (const char *)data + 1;
    size_t len = size - 1;
    oai_job job;
    oai_error e = {0};
    bool ok = false;
    int which = data[0] % 7;
    if (which == 6) { /* count_tokens answers a body, no job */
        char *res = anth_count_tokens(&g_srv, body, len, &e);
        CHECK(res || (e.status >= 400 && e.status < 600 && e.message[0]));
        free(res);
        return 0;
    }
    switch (which) {
    case 0: ok = oai_parse(&g_srv, body, len, true, &job, &e); break;
    case 1: ok = oai_parse(&g_srv, body, len, false, &job, &e); break;
    case 2: ok = anth_parse(&g_srv, body, len, &job, &e); break;
    case 3: ok = resp_parse(&g_srv, g_store, body, len, &job, &e); break;
    case 4: ok = nat_parse(&g_srv, body, len, &job, &e); break;
    default: ok = nat_parse_infill(&g_srv, body, len, &job, &e); break;
    }
    if (!ok) CHECK(e.status >= 400 && e.status < 600 && e.message[0]);
    else {
        const sched_req *r = job.req;
        int nv = brisk_n_vocab(g_srv.model);
        CHECK(r && job.n >= 1 && job.n <= 128 && r->n_choices == job.n && job.ch);
        CHECK(r->n_prompt >= 0 && (r->n_prompt == 0 || r->prompt));
        for (int i = 0; i < r->n_prompt; i++) CHECK(r->prompt[i] >= 0 && r->prompt[i] < nv);
        CHECK(r->p.n_stop >= 0 && r->p.n_stop <= SCHED_MAX_STOP);
        for (int i = 0; i < r->p.n_stop; i++) CHECK(r->p.stop[i] && r->p.stop[i][0]);
        CHECK(r->p.top_logprobs >= 0 && r->p.top_logprobs <= SCHED_MAX_TOP_LOGPROBS);
        CHECK(r->p.sp.temp >= 0 && r->p.sp.top_p >= 0 && r->p.sp.min_p >= 0);
        for (int i = 0; i < r->p.n_bias; i++) CHECK(r->p.bias_id[i] >= 0 && r->p.bias_id[i] < nv);
    }
    if (job.req) sched_req_free(job.req);
    oai_job_free(&job);
    return 0;
}
