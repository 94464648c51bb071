/* scheduler.h — continuous batching of generation requests over one context.
 *
 * One scheduler thread owns the brisk_context. It keeps n_parallel slots (one
 * KV sequence each). Between steps, queued requests take free slots; each step
 * is one brisk_decode holding one token for every slot that is generating and
 * a capped chunk of prompt tokens for slots still in prefill, so a long prompt
 * never stalls running decodes. A slot keeps its tokens cached after its
 * request ends; a new prompt that shares a prefix with any slot's cache reuses
 * it (its own cache, or the pages of another slot through
 * brisk_seq_share_prefix) and reports it as cached tokens.
 *
 * A recurrent model's state cannot be rewound, so for hybrids the prompt is
 * fed in chunks that end on KV-block boundaries and the state is saved at
 * each (brisk_seq_checkpoint); a later prompt sharing a prefix restarts from
 * the latest checkpoint inside the shared part (brisk_seq_keepable).
 *
 * A request may ask for n choices (OpenAI's `n`): it waits for n idle slots,
 * one slot decodes the prompt, and when the prompt's logits are there the
 * other n - 1 slots share its whole sequence (brisk_seq_share_prefix: the
 * pages, copy-on-write, and a recurrent state) and sample from the same
 * logits, each with its own sampler (seed + choice index) and grammar.
 *
 * Requests are reference counted: the submitter holds one reference, the
 * scheduler one while the request is queued or running. The fields marked
 * "shared" are guarded by the scheduler's lock (sched_lock / sched_unlock);
 * sched_wait sleeps until the scheduler publishes new output for the request.
 * The scheduler knows nothing of HTTP or JSON.
 *
 * Speculative decoding (sched_spec: one drafter of engine/drafter.h per
 * slot): before a step each generating slot may ask its drafter for
 * proposals; they go into the same batch as the other slots' plain tokens
 * and prompt chunks, each with logits, so one brisk_decode verifies every
 * slot's drafts. The slot then samples as plain decoding would, one token
 * per verified row while the samples match the drafts, so the output is the
 * one plain decoding gives; the rejected positions are cut from the slot's
 * sequence (a recurrent state goes back to the snapshot taken before the
 * step and the accepted tokens are decoded again, all such slots in one
 * batch). Drafts shrink as the batch fills with other slots' tokens (see
 * spec_budget in scheduler.c).
 *
 * Over an embeddings context (brisk_context_params.embeddings) the scheduler
 * computes embeddings instead of generating: a request holds n_inputs prompts,
 * each input takes a free slot, and its whole prompt goes into one step (a
 * pooled vector is over one brisk_decode call), beside other slots' inputs.
 * The request ends when every input's vector(s) are in r->embd. No prefix is
 * reused (the pooled vector needs every token in the call).
 */
#ifndef BK_SERVER_SCHEDULER_H
#define BK_SERVER_SCHEDULER_H
#include <pthread.h>
#include <stdbool.h>
#include <stdint.h>

#include "brisk.h"
#include "engine/drafter.h"

#define SCHED_MAX_STOP 8
#define SCHED_MAX_TOP_LOGPROBS 20

typedef struct sched_gen_params {
    brisk_sampler_params sp;
    int max_tokens;      /* <0: up to the context */
    char *stop[SCHED_MAX_STOP]; /* owned, NUL-terminated */
    int n_stop;
    bool logprobs;
    int top_logprobs;    /* 0..SCHED_MAX_TOP_LOGPROBS */
    bool ignore_eos;
    brisk_token *bias_id; /* (n_bias) owned: OpenAI's logit_bias, added to these tokens' logits */
    float *bias;          /* (n_bias) */
    int n_bias;
    int spec_n_max;       /* proposals per round (llama-server's speculative.n_max); -1: the server's; 0: none */
    int spec_n_min;       /* no round verifies fewer (speculative.n_min); -1: the server's */
    /* Each prompt token's logprob given the tokens before it (and its top_logprobs) into the request's
     * prompt_lp: /v1/completions' echo with logprobs, the loglikelihood of evaluation harnesses. Such a
     * prompt is decoded whole (no cache reuse: the cached positions have no logits) in chunks of
     * PROMPT_LP_CHUNK, and max_tokens 0 decodes it without generating. */
    bool prompt_logprobs;
} sched_gen_params;

typedef struct sched_token {     /* one generated token, with logprobs when asked */
    brisk_token id;
    float logprob;
    int n_top;
    brisk_token top_id[SCHED_MAX_TOP_LOGPROBS];
    float top_lp[SCHED_MAX_TOP_LOGPROBS];
} sched_token;

typedef enum sched_finish {
    SCHED_RUNNING = 0,
    SCHED_FINISH_STOP,   /* end-of-generation token or a stop string */
    SCHED_FINISH_LENGTH, /* max_tokens or the context */
    SCHED_FINISH_ERROR,  /* error holds the message */
    SCHED_FINISH_CANCELLED,
} sched_finish;

typedef struct sched_choice {
    /* set by the submitter before sched_submit */
    brisk_grammar *grammar; /* owned until the choice's sampler takes it; NULL: free text */
    /* shared (under the scheduler lock) */
    char *text;          /* (text_cap) generated text; [0, n_visible) is final, the rest is held back */
    size_t text_len, text_cap, n_visible;
    sched_token *toks;   /* (n_toks) generated tokens (ids always, logprobs when asked) */
    int n_toks, toks_cap;
    sched_finish finish; /* this choice's end (SCHED_RUNNING while it runs) */
    int stop_hit;        /* 1 + the index in p.stop of the string that ended it; 0: none did */
    int slot;            /* the slot that decodes it, once one does (llama-server's id_slot); -1 before */
} sched_choice;

typedef struct sched_req {
    /* set by the submitter before sched_submit, read-only afterwards */
    brisk_token *prompt; /* (n_prompt) owned */
    int n_prompt;
    sched_gen_params p;  /* choice i samples with seed p.sp.seed + i */
    int n_choices;       /* 1 unless sched_req_set_choices */
    sched_choice *ch;    /* (n_choices) */
    /* shared (under the scheduler lock) */
    int n_cached;        /* prompt tokens reused from the cache */
    bool started;        /* prefill finished (cached/prompt counts are final) */
    int n_running;       /* choices not finished */
    sched_finish finish; /* the request's: set when every choice has finished (their reasons are
                            in ch[].finish), or for all of them at once on an error or a cancel */
    char error[256];
    bool cancelled;
    int refs;
    double t_submit, t_first_token, t_end; /* seconds, monotonic */
    int64_t n_drafted, n_draft_accepted; /* speculative decoding: proposals verified, and accepted */
    /* embeddings (sched_req_set_inputs): input i is prompt[in_off[i], in_off[i + 1]); n_inputs 0: generation.
     * When the request finishes with SCHED_FINISH_STOP, embd holds n_embd_rows rows of n_embd_out floats,
     * not normalised: input i's pooled vector in row i, or with pooling none one row per prompt token */
    sched_token *prompt_lp; /* (n_prompt) with p.prompt_logprobs, owned: written before `started`; entry 0
                               (no tokens before it) has none */
    int n_inputs;
    int *in_off;         /* (n_inputs + 1) owned */
    float *embd;         /* owned, written by the scheduler thread only before the request finishes */
    int n_embd_rows, n_embd_out;
    int next_input;      /* shared: inputs handed to slots so far */
    pthread_cond_t cv;
    /* set by the submitter: called with the lock held (it must not block or
     * take the lock) whenever cv is signalled; cleared under the lock */
    void (*on_news)(void *arg);
    void *on_news_arg;
} sched_req;

typedef struct sched_spec {
    const char *type;   /* --spec-type's name: "draft", "ngram-simple", "ngram-cache", "mtp", "draft-eagle3" */
    drafter **drafters; /* (n_parallel) borrowed: slot i proposes with drafters[i]; NULL: no speculation */
    int n_max;          /* proposals per round, at most (1..DRAFTER_MAX_DRAFT) */
    int n_min;          /* a round with fewer proposals verifies none */
    float p_min;        /* the drafters' (reported in /props and /slots; a drafter applies it) */
    int max_rows;       /* rows (plain tokens and drafts) a step holds before drafts shrink; 0: 1 + n_max */
} sched_spec;

typedef struct sched_params {
    int n_parallel;    /* slots */
    int n_ctx_slot;    /* tokens one request may hold: prompt + completion */
    int prefill_chunk; /* prompt tokens per step, across slots */
    int max_queue;     /* waiting requests before sched_submit refuses */
    int ckpt_interval; /* recurrent models (a context with checkpoints): prompt chunks end on multiples of this
                          (the KV block size) and the state is saved there; 0: off */
    sched_spec spec;   /* speculative decoding; spec.drafters NULL: off. The context then needs
                          n_batch >= n_parallel * (1 + spec.n_max) + prefill_chunk, and for a recurrent
                          model n_seq_checkpoints >= 1 */
} sched_params;

typedef struct sched_stats {
    uint64_t requests, requests_failed, prompt_tokens, cached_tokens, generated_tokens, steps;
    uint64_t draft_tokens, draft_accepted, draft_rounds; /* speculative decoding: proposals verified, accepted,
                                                           and slot rounds that verified some */
    int queue_len, active, n_parallel;
    int64_t kv_tokens, kv_capacity; /* cached tokens over all slots (shared pages counted per slot) */
    double gen_tok_per_s;           /* generation rate over the last few seconds */
} sched_stats;

typedef struct sched sched;

/* Starts the scheduler thread over ctx (created with n_seq_max >= n_parallel
 * and n_batch >= n_parallel + prefill_chunk, more with speculation: see
 * sched_params.spec). The model, context and drafters stay owned by the
 * caller and must outlive the scheduler. */
brisk_status sched_new(brisk_model *model, brisk_context *ctx, const sched_params *p, sched **out);
/* Stops the thread; queued and running requests finish with an error. Accepts NULL. */
void sched_free(sched *s);

/* A new request with one reference (the caller's) and one choice; NULL on OOM. */
sched_req *sched_req_new(void);
/* Before sched_submit: n choices (1..128), their grammars NULL. BRISK_ERR_NOMEM keeps the old ones. */
brisk_status sched_req_set_choices(sched_req *r, int n);
/* Before sched_submit: makes r an embeddings request over n inputs, the prompt's tokens being the
 * inputs one after another (off: n + 1 offsets, copied). BRISK_ERR_INVALID_ARG for an empty input. */
brisk_status sched_req_set_inputs(sched_req *r, const int *off, int n);
/* Drops a reference; frees the request with the last one. Takes the lock itself. */
void sched_req_release(sched *s, sched_req *r);
/* Frees a request never submitted (no lock, no scheduler). */
void sched_req_free(sched_req *r);

/* Queues r (the scheduler takes its own reference). BRISK_ERR_RANGE: the
 * prompt does not fit the slot context; BRISK_ERR_NOMEM: the queue is full
 * (answer 429); BRISK_ERR_INVALID_ARG: empty prompt, or more choices than
 * slots; message set. */
brisk_status sched_submit(sched *s, sched_req *r);
/* Marks r cancelled; its slot is freed before the next step. */
void sched_cancel(sched *s, sched_req *r);

void sched_lock(sched *s);
void sched_unlock(sched *s);
/* With the lock held: sleeps until r gets new output or timeout_ms passes. */
void sched_wait(sched *s, sched_req *r, int timeout_ms);
/* Counters for /metrics (takes the lock itself). */
void sched_get_stats(sched *s, sched_stats *out);
int sched_n_ctx_slot(const sched *s);
/* One slot's state for GET /slots (llama-server's fields that brisk has). */
typedef struct sched_slot_info {
    int id;
    bool is_processing;  /* a request holds it */
    int n_prompt;        /* its request's prompt tokens (0 when idle) */
    int n_cached;        /* of them reused from the cache */
    int n_decoded;       /* tokens generated so far */
    int n_remain;        /* tokens it may still generate */
    int n_cache;         /* tokens whose KV the slot holds (kept after its request ends, for reuse) */
    int spec_n_max, spec_n_min; /* its request's speculation (0, 0: none) */
    int64_t n_drafted, n_draft_accepted; /* its request's proposals verified and accepted */
} sched_slot_info;
/* Fills out[0 .. n_parallel) (out has room for n_parallel); takes the lock itself. */
void sched_get_slots(sched *s, sched_slot_info *out);
/* Whether the scheduler computes embeddings (its context was made with embeddings), and their pooling. */
bool sched_embeddings(const sched *s);
/* The speculation the server was started with (spec.drafters NULL: none). */
const sched_spec *sched_get_spec(const sched *s);
brisk_pooling sched_pooling(const sched *s);
#endif
