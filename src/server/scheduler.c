/* scheduler.c — the batching loop of scheduler.h. */
#include "server/scheduler.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "base/status.h"

#define CKPT_END_MARGIN 4 /* prompt tokens a checkpoint stays before the end of a prompt */
#define PROMPT_LP_CHUNK 64 /* prompt entries a step decodes with logits for prompt_logprobs: 64 rows of logits */

typedef struct slot {
    int id;                /* KV sequence */
    sched_req *req;        /* NULL: idle (its cache stays for prefix reuse) */
    int ci;                /* the request's choice this slot decodes */
    bool fork_wait;        /* a choice > 0: waits for the prompt of the request's first slot */
    bool fork_failed;      /* sharing that prompt failed: the request ends with an error */
    brisk_sampler *smp;
    brisk_token *cache;    /* (n_ctx_slot) tokens whose KV is in sequence id */
    int n_cache;
    int n_fed;             /* prompt tokens in the cache (reused or decoded) */
    int max_gen, n_gen;
    bool generating;       /* next holds a sampled token to feed */
    brisk_token next;
    int logit_idx;         /* batch entry whose logits this slot samples from, -1: none */
    int embd_idx;          /* embeddings: the batch entry of its input's first token */
    int n_chunk;           /* prompt tokens of this slot in the current batch */
    sched_token *rec;      /* (1 + spec n_max) the tokens sampled this step */
    int n_rec;
    /* speculative decoding */
    drafter *dr;           /* borrowed (sched_spec.drafters[id]); NULL: none */
    bool dr_tgt;           /* the mtp or eagle3 kind: drafts from the target's own states, so it sees every
                            * batch of the slot's request (drafter_process_at: the slot's rows of the batch) */
    int n_seen;            /* mtp, eagle3: prompt tokens its cache still holds from the slot's last request */
    int chunk_idx;         /* the batch entry of this slot's first prompt token in the current batch */
    bool dr_begun;         /* drafter_begin ran for the current request */
    bool dr_failed;        /* the drafter failed: the request goes on without speculation */
    bool dr_asked;         /* the drafter proposed this step (it is synced after the step) */
    bool spec_err;         /* rolling back rejected drafts failed: the request ends with an error */
    int n_draft;           /* proposals in this step's batch, after next */
    brisk_token draft[DRAFTER_MAX_DRAFT];
    brisk_detok dt;
    double last_used;
} slot;

/* Lockstep drafting's arguments (drafter_draft_models), one entry per slot. */
typedef struct spec_lanes {
    drafter **dr;
    const brisk_token **hist;
    int32_t *n;
    int *k_max, *k;
    brisk_token **out;
    struct slot **sl;
} spec_lanes;

struct sched {
    brisk_model *model;
    brisk_context *ctx;
    sched_params p;
    int n_vocab;
    pthread_t thread;
    bool thread_started;
    pthread_mutex_t mu;
    pthread_cond_t cv;     /* work for the scheduler thread */
    bool stopping;
    slot *slots;           /* (n_parallel) */
    sched_req **queue;     /* (max_queue) ring */
    int q_head, q_len;
    brisk_batch_entry *batch; /* (n_parallel + prefill_chunk) */
    float *biased;         /* (n_vocab) logits plus a request's logit_bias */
    int rr;                /* first slot offered prefill next step (fairness) */
    int ckpt;              /* recurrent state checkpoints every ckpt prompt tokens, 0: none */
    sched_stats st;
    double rate_t0;
    uint64_t rate_n0;
    int n_embd_out;        /* embeddings: floats of a vector (brisk_context_n_embd_out); 0: generation */
    brisk_pooling pooling;
    spec_lanes lanes;      /* (n_parallel each) */
};

static double now_s(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

sched_req *sched_req_new(void) {
    sched_req *r = calloc(1, sizeof *r);
    if (!r) return NULL;
    if (pthread_cond_init(&r->cv, NULL)) {
        free(r);
        return NULL;
    }
    if (!(r->ch = calloc(1, sizeof *r->ch))) {
        pthread_cond_destroy(&r->cv);
        free(r);
        return NULL;
    }
    r->n_choices = 1;
    r->ch[0].slot = -1;
    r->refs = 1;
    r->p.sp = brisk_sampler_default_params();
    r->p.max_tokens = -1;
    r->p.spec_n_max = r->p.spec_n_min = -1;
    return r;
}

brisk_status sched_req_set_choices(sched_req *r, int n) {
    if (n < 1 || n > 128) return bk_fail(BRISK_ERR_INVALID_ARG, "choices: %d not in [1, 128]", n);
    sched_choice *ch = calloc((size_t)n, sizeof *ch);
    if (!ch) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n; i++) ch[i].slot = -1;
    for (int i = 0; i < r->n_choices; i++) brisk_grammar_free(r->ch[i].grammar);
    free(r->ch);
    r->ch = ch;
    r->n_choices = n;
    return BRISK_OK;
}

brisk_status sched_req_set_inputs(sched_req *r, const int *off, int n) {
    if (n < 1) return bk_fail(BRISK_ERR_INVALID_ARG, "no input");
    for (int i = 0; i < n; i++)
        if (off[i + 1] <= off[i]) return bk_fail(BRISK_ERR_INVALID_ARG, "input %d is empty", i);
    int *o = malloc((size_t)(n + 1) * sizeof *o);
    if (!o) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    memcpy(o, off, (size_t)(n + 1) * sizeof *o);
    free(r->in_off);
    r->in_off = o;
    r->n_inputs = n;
    return BRISK_OK;
}

void sched_req_free(sched_req *r) {
    if (!r) return;
    for (int i = 0; i < r->p.n_stop; i++) free(r->p.stop[i]);
    free(r->p.bias_id);
    free(r->p.bias);
    for (int i = 0; i < r->n_choices; i++) {
        brisk_grammar_free(r->ch[i].grammar);
        free(r->ch[i].text);
        free(r->ch[i].toks);
    }
    free(r->ch);
    free(r->prompt);
    free(r->prompt_lp);
    free(r->in_off);
    free(r->embd);
    pthread_cond_destroy(&r->cv);
    free(r);
}

/* Lock held. */
static void req_unref(sched_req *r) {
    if (--r->refs == 0) sched_req_free(r);
}

void sched_req_release(sched *s, sched_req *r) {
    if (!r) return;
    pthread_mutex_lock(&s->mu);
    req_unref(r);
    pthread_mutex_unlock(&s->mu);
}

void sched_lock(sched *s) { pthread_mutex_lock(&s->mu); }
void sched_unlock(sched *s) { pthread_mutex_unlock(&s->mu); }
int sched_n_ctx_slot(const sched *s) { return s->p.n_ctx_slot; }
bool sched_embeddings(const sched *s) { return s->n_embd_out > 0; }
brisk_pooling sched_pooling(const sched *s) { return s->pooling; }
const sched_spec *sched_get_spec(const sched *s) { return &s->p.spec; }

void sched_wait(sched *s, sched_req *r, int timeout_ms) {
    struct timespec ts;
    clock_gettime(CLOCK_REALTIME, &ts);
    ts.tv_sec += timeout_ms / 1000;
    ts.tv_nsec += (long)(timeout_ms % 1000) * 1000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    pthread_cond_timedwait(&r->cv, &s->mu, &ts);
}

/* Lock held: tells r's reader there is news. */
static void wake(sched_req *r) {
    pthread_cond_broadcast(&r->cv);
    if (r->on_news) r->on_news(r->on_news_arg);
}

/* Lock held: ends r and every choice still running with a reason (and message), wakes its reader. */
static void req_finish(sched *s, sched_req *r, sched_finish f, const char *msg) {
    if (r->finish != SCHED_RUNNING) return;
    r->finish = f;
    r->t_end = now_s();
    if (msg) snprintf(r->error, sizeof r->error, "%s", msg);
    if (f == SCHED_FINISH_ERROR) s->st.requests_failed++;
    for (int i = 0; i < r->n_choices; i++) {
        sched_choice *c = &r->ch[i];
        if (c->finish == SCHED_RUNNING) c->finish = f;
        c->n_visible = c->text_len;
    }
    wake(r);
}

/* Lock held: choice ci of r ends; an error or a cancel ends the whole request,
 * the last choice to stop or reach its length ends it too. */
static void choice_finish(sched *s, sched_req *r, int ci, sched_finish f, const char *msg) {
    sched_choice *c = &r->ch[ci];
    if (f == SCHED_FINISH_ERROR || f == SCHED_FINISH_CANCELLED) {
        req_finish(s, r, f, msg);
        return;
    }
    if (c->finish != SCHED_RUNNING) return;
    c->finish = f;
    c->n_visible = c->text_len;
    if (--r->n_running == 0) req_finish(s, r, f, NULL);
    wake(r);
}

/* Lock held: the slot's choice ends; the slot becomes idle with its cache. */
static void slot_release(sched *s, slot *sl, sched_finish f, const char *msg) {
    if (!sl->req) return;
    sched_req *r = sl->req;
    if (!r->n_inputs) choice_finish(s, r, sl->ci, f, msg);
    else if (f == SCHED_FINISH_ERROR || f == SCHED_FINISH_CANCELLED) req_finish(s, r, f, msg);
    else if (--r->n_running == 0) req_finish(s, r, f, NULL); /* its last input */
    req_unref(sl->req);
    sl->req = NULL;
    sl->generating = false;
    sl->fork_wait = false;
    brisk_sampler_free(sl->smp);
    sl->smp = NULL;
    sl->last_used = now_s();
}

/* An embeddings request fits: each input in one step (prefill_chunk) and in a slot. */
static brisk_status check_inputs(const sched *s, const sched_req *r) {
    if (!r->n_inputs != !s->n_embd_out)
        return bk_fail(BRISK_ERR_UNSUPPORTED, s->n_embd_out ? "this server computes embeddings (--embeddings or "
                       "--reranking): it does not generate" : "this server does not compute embeddings: start it "
                       "with --embeddings (or --reranking)");
    if (r->in_off[r->n_inputs] != r->n_prompt) return bk_fail(BRISK_ERR_INVALID_ARG, "inputs and prompt disagree");
    int cap = s->p.prefill_chunk < s->p.n_ctx_slot ? s->p.prefill_chunk : s->p.n_ctx_slot;
    for (int i = 0; i < r->n_inputs; i++)
        if (r->in_off[i + 1] - r->in_off[i] > cap)
            return bk_fail(BRISK_ERR_RANGE, "input %d has %d tokens, more than the %d an embedding takes (the "
                           "smaller of -b and -c)", i, r->in_off[i + 1] - r->in_off[i], cap);
    return BRISK_OK;
}

brisk_status sched_submit(sched *s, sched_req *r) {
    if (r->n_prompt <= 0) return bk_fail(BRISK_ERR_INVALID_ARG, "the prompt is empty");
    if (r->n_inputs || s->n_embd_out) {
        BK_TRY(check_inputs(s, r));
        r->n_embd_out = s->n_embd_out;
        r->n_embd_rows = s->pooling == BRISK_POOLING_NONE ? r->n_prompt : r->n_inputs;
        if (!(r->embd = malloc((size_t)r->n_embd_rows * s->n_embd_out * sizeof(float))))
            return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    if (r->n_choices > s->p.n_parallel)
        return bk_fail(BRISK_ERR_INVALID_ARG,
                       "n is %d but the server decodes at most %d sequences at once (--parallel)", r->n_choices,
                       s->p.n_parallel);
    if (!r->n_inputs && r->n_prompt >= s->p.n_ctx_slot) /* (inputs are checked one by one) */
        return bk_fail(BRISK_ERR_RANGE,
                       "the prompt has %d tokens but the context holds %d (prompt and completion together); "
                       "shorten it or start the server with a larger -c",
                       r->n_prompt, s->p.n_ctx_slot);
    pthread_mutex_lock(&s->mu);
    brisk_status st = BRISK_OK;
    if (s->stopping) st = bk_fail(BRISK_ERR_UNSUPPORTED, "the server is shutting down");
    else if (s->q_len >= s->p.max_queue)
        st = bk_fail(BRISK_ERR_NOMEM, "the server is busy (%d requests queued); retry later", s->q_len);
    else {
        r->refs++;
        r->n_running = r->n_inputs ? r->n_inputs : r->n_choices;
        r->t_submit = now_s();
        s->queue[(s->q_head + s->q_len++) % s->p.max_queue] = r;
        s->st.requests++;
        pthread_cond_signal(&s->cv);
    }
    pthread_mutex_unlock(&s->mu);
    return st;
}

void sched_cancel(sched *s, sched_req *r) {
    pthread_mutex_lock(&s->mu);
    r->cancelled = true;
    /* A queued request leaves the queue now: it must not hold a place others could get. */
    for (int i = 0; i < s->q_len; i++) {
        int at = (s->q_head + i) % s->p.max_queue;
        if (s->queue[at] != r) continue;
        for (int j = i; j + 1 < s->q_len; j++)
            s->queue[(s->q_head + j) % s->p.max_queue] = s->queue[(s->q_head + j + 1) % s->p.max_queue];
        s->q_len--;
        req_finish(s, r, SCHED_FINISH_CANCELLED, NULL);
        req_unref(r);
        break;
    }
    pthread_cond_signal(&s->cv);
    pthread_mutex_unlock(&s->mu);
}

static int common_prefix(const brisk_token *a, int na, const brisk_token *b, int nb) {
    int n = na < nb ? na : nb, i = 0;
    while (i < n && a[i] == b[i]) i++;
    return i;
}

/* Lock held: binds sl to choice ci of r: a sampler seeded seed + ci that has
 * seen the prompt, and the choice's grammar. */
static brisk_status slot_bind(sched *s, slot *sl, sched_req *r, int ci) {
    brisk_sampler_params sp = r->p.sp;
    sp.seed += (uint64_t)ci;
    BK_TRY(brisk_sampler_new(&sp, s->n_vocab, &sl->smp));
    for (int i = 0; i < r->n_prompt; i++) brisk_sampler_accept(sl->smp, r->prompt[i]);
    brisk_sampler_set_grammar(sl->smp, r->ch[ci].grammar); /* after the prompt: the grammar sees generated tokens only */
    r->ch[ci].grammar = NULL;
    sl->req = r;
    sl->ci = ci;
    r->ch[ci].slot = sl->id;
    sl->n_gen = 0;
    int room = s->p.n_ctx_slot - r->n_prompt;
    sl->max_gen = r->p.max_tokens >= 0 && r->p.max_tokens < room ? r->p.max_tokens : room;
    sl->generating = false;
    sl->fork_wait = ci > 0;
    sl->dt = (brisk_detok){0};
    sl->dr_begun = sl->dr_failed = false;
    /* the mtp and eagle3 kinds run over every token of the request: not for a request that opts out,
     * nor for choices > 0, which take the first one's prompt without having seen it */
    if (sl->dr_tgt && (r->p.spec_n_max == 0 || ci > 0)) sl->dr_failed = true;
    return BRISK_OK;
}

/* Lock held: the idle slot used longest ago, -1 if none. */
static int idle_lru(const sched *s) {
    int best = -1;
    for (int i = 0; i < s->p.n_parallel; i++)
        if (!s->slots[i].req && (best < 0 || s->slots[i].last_used < s->slots[best].last_used)) best = i;
    return best;
}

/* Lock held: puts r into an idle slot, reusing the longest cached prefix;
 * choices 1..n-1 take further idle slots (admit made sure there are enough)
 * that wait for the prompt (fork_choices). */
static void slot_start(sched *s, sched_req *r) {
    int target = -1, t_lcp = -1, src = -1, s_lcp = 0;
    for (int i = 0; i < s->p.n_parallel; i++) {
        slot *sl = &s->slots[i];
        /* the last prompt token gives the logits; a recurrent state restarts at a checkpoint */
        int l = r->p.prompt_logprobs ? 0 : common_prefix(sl->cache, sl->n_cache, r->prompt, r->n_prompt - 1);
        l = brisk_seq_keepable(s->ctx, sl->id, l);
        if (l > s_lcp) s_lcp = l, src = i;
        if (sl->req) continue;
        if (l > t_lcp || (l == t_lcp && sl->last_used < s->slots[target].last_used)) t_lcp = l, target = i;
    }
    slot *sl = &s->slots[target];
    int reuse = s_lcp > t_lcp ? s_lcp : t_lcp;
    /* what its MTP head or EAGLE-3 drafter saw of the reused prefix: the slot's own cache, if its last
     * request ran it */
    sl->n_seen = sl->dr_tgt && sl->dr_begun && !sl->dr_failed ? t_lcp : 0;
    brisk_status st;
    if (src >= 0 && src != target && s_lcp > t_lcp) {
        st = brisk_seq_share_prefix(s->ctx, src, target, reuse);
        if (st == BRISK_OK) memcpy(sl->cache, s->slots[src].cache, (size_t)reuse * sizeof *sl->cache);
    } else {
        if (reuse > t_lcp) reuse = t_lcp;
        st = brisk_seq_remove(s->ctx, target, reuse, -1);
    }
    if (st == BRISK_ERR_UNSUPPORTED) { /* not expected after brisk_seq_keepable: start over */
        reuse = 0;
        st = brisk_seq_clear(s->ctx, target);
    }
    if (st != BRISK_OK) {
        brisk_seq_clear(s->ctx, target);
        sl->n_cache = 0;
        req_finish(s, r, SCHED_FINISH_ERROR, brisk_last_error());
        req_unref(r);
        return;
    }
    sl->n_cache = sl->n_fed = reuse;
    r->n_cached = reuse;
    s->st.prompt_tokens += (uint64_t)r->n_prompt;
    s->st.cached_tokens += (uint64_t)reuse;
    if (r->p.prompt_logprobs && !r->prompt_lp) {
        if (!(r->prompt_lp = calloc((size_t)r->n_prompt, sizeof *r->prompt_lp))) {
            req_finish(s, r, SCHED_FINISH_ERROR, "out of memory");
            req_unref(r);
            return;
        }
        for (int i = 0; i < r->n_prompt; i++) r->prompt_lp[i].id = r->prompt[i];
    }
    if (r->p.max_tokens == 0 && !r->p.prompt_logprobs) { /* nothing to generate: no slot needed */
        for (int ci = 0; ci < r->n_choices; ci++) choice_finish(s, r, ci, SCHED_FINISH_LENGTH, NULL);
        req_unref(r);
        return;
    }
    /* The queue's reference goes to the first slot, each further slot takes one. */
    for (int ci = 0; ci < r->n_choices && r->finish == SCHED_RUNNING; ci++) {
        slot *c = ci ? &s->slots[idle_lru(s)] : sl;
        if (ci) {
            brisk_seq_clear(s->ctx, c->id);
            c->n_cache = c->n_fed = 0;
            r->refs++;
        }
        if ((st = slot_bind(s, c, r, ci)) != BRISK_OK) {
            req_finish(s, r, SCHED_FINISH_ERROR, brisk_last_error());
            req_unref(r);
        }
    }
}

/* Lock held: frees the slots of requests cancelled or ended by an error of another choice. */
static void reap(sched *s) {
    for (int i = 0; i < s->p.n_parallel; i++) {
        const sched_req *r = s->slots[i].req;
        if (!r) continue;
        if (r->cancelled) slot_release(s, &s->slots[i], SCHED_FINISH_CANCELLED, NULL);
        else if (r->finish != SCHED_RUNNING) slot_release(s, &s->slots[i], r->finish, NULL);
    }
}

/* Lock held: frees the slots of cancelled requests, then fills idle slots from the queue. */
/* Lock held: hands r's next inputs to idle slots, each with a reference and a cleared sequence;
 * true once every input has one (r leaves the queue). */
static bool start_inputs(sched *s, sched_req *r) {
    int i;
    while (r->next_input < r->n_inputs && (i = idle_lru(s)) >= 0) {
        slot *sl = &s->slots[i];
        brisk_seq_clear(s->ctx, sl->id);
        sl->n_cache = sl->n_fed = 0;
        sl->req = r;
        sl->ci = r->next_input++;
        sl->generating = sl->fork_wait = false;
        r->refs++;
        s->st.prompt_tokens += (uint64_t)(r->in_off[sl->ci + 1] - r->in_off[sl->ci]);
    }
    return r->next_input == r->n_inputs;
}

static void admit(sched *s) {
    reap(s);
    while (s->q_len > 0) {
        int idle = 0;
        for (int i = 0; i < s->p.n_parallel; i++) idle += !s->slots[i].req;
        sched_req *r = s->queue[s->q_head];
        if (r->n_inputs && !r->cancelled) {
            if (!start_inputs(s, r)) break;
            s->q_head = (s->q_head + 1) % s->p.max_queue;
            s->q_len--;
            req_unref(r); /* the queue's */
            continue;
        }
        if (!r->cancelled && idle < r->n_choices) break;
        s->q_head = (s->q_head + 1) % s->p.max_queue;
        s->q_len--;
        if (r->cancelled) {
            req_finish(s, r, SCHED_FINISH_CANCELLED, NULL);
            req_unref(r);
            continue;
        }
        slot_start(s, r);
    }
    reap(s);
}

/* The most proposals sl's drafter may make this step: its request's speculative.n_max (at most the
 * server's), fewer where the request's token limit or the slot's context would end the round early. */
static int spec_k_max(const sched *s, const slot *sl) {
    const sched_req *r = sl->req;
    if (!sl->dr || sl->dr_failed || r->n_inputs) return 0;
    int k = r->p.spec_n_max >= 0 && r->p.spec_n_max < s->p.spec.n_max ? r->p.spec_n_max : s->p.spec.n_max;
    int left = sl->max_gen - sl->n_gen - 1;       /* a round emits up to k + 1 tokens */
    int room = s->p.n_ctx_slot - 1 - sl->n_cache; /* it decodes positions n_cache .. n_cache + k */
    if (k > left) k = left;
    if (k > room) k = room;
    return k > 0 ? k : 0;
}

/* Before sl's drafter proposes: its history is the cache then next (hist[0, n), n = n_cache + 1);
 * the drafter catches up on the tokens since its last round, or begins on the request. false: the
 * drafter failed, which turns speculation off for the rest of the request (it goes on without). */
static bool spec_prepare(slot *sl) {
    int32_t n = sl->n_cache + 1;
    if (sl->dr_tgt && !sl->dr_begun) sl->dr_failed = true; /* it must have seen the prompt */
    if (sl->dr_failed) return false;
    sl->cache[sl->n_cache] = sl->next; /* fed this step */
    brisk_status st = sl->dr_begun ? drafter_sync(sl->dr, sl->cache, n) : drafter_begin(sl->dr, sl->cache, n);
    sl->dr_begun = sl->dr_asked = true;
    if (st != BRISK_OK) sl->dr_failed = true;
    return st == BRISK_OK;
}

/* How many of k proposals go into the batch: none below the request's n_min; a recurrent state is
 * snapshotted first (it cannot be cut back otherwise). */
static int spec_keep(sched *s, const slot *sl, int k) {
    int n_min = sl->req->p.spec_n_min >= 0 ? sl->req->p.spec_n_min : s->p.spec.n_min;
    if (k < n_min || k == 0) return 0;
    return brisk_seq_checkpoint(s->ctx, sl->id) == BRISK_OK ? k : 0;
}

/* Each generating slot's proposals for this step into sl->draft / n_draft, within its share of
 * the step's draft rows (see build_batch). Draft models sharing a context propose in lockstep: one
 * draft decode per draft step for all slots instead of one per slot. */
static void spec_draft_all(sched *s, int n_gen, int n_spec) {
    int rows = s->p.spec.max_rows - n_gen, m = 0, j = 0;
    if (rows <= 0 || n_spec <= 0) return;
    int base = rows / n_spec, extra = rows % n_spec;
    spec_lanes *ls = &s->lanes;
    for (int i = 0; i < s->p.n_parallel; i++) {
        slot *sl = &s->slots[i];
        if (!sl->req || !sl->generating) continue;
        int k = spec_k_max(s, sl), share = base + (j < extra);
        if (k <= 0) continue;
        j++;
        if (k > share) k = share;
        if (k <= 0 || !spec_prepare(sl)) continue;
        if (drafter_get_kind(sl->dr) == DRAFTER_MODEL) {
            ls->dr[m] = sl->dr;
            ls->hist[m] = sl->cache;
            ls->n[m] = sl->n_cache + 1;
            ls->k_max[m] = k;
            ls->out[m] = sl->draft;
            ls->sl[m++] = sl;
            continue;
        }
        int got = 0;
        if (drafter_draft(sl->dr, sl->cache, sl->n_cache + 1, k, sl->draft, &got) != BRISK_OK) sl->dr_failed = true;
        else sl->n_draft = spec_keep(s, sl, got);
    }
    if (!m) return;
    bool ok = drafter_draft_models(ls->dr, m, ls->hist, ls->n, ls->k_max, ls->out, ls->k) == BRISK_OK;
    for (int i = 0; i < m; i++) {
        if (!ok) ls->sl[i]->dr_failed = true;
        else ls->sl[i]->n_draft = spec_keep(s, ls->sl[i], ls->k[i]);
    }
}

/* One token per generating slot (with its drafts), then prompt chunks up to prefill_chunk. Returns
 * the entry count.
 *
 * Speculation's share of a step: while a step is memory-bound (weights read once for all rows), a
 * verify row costs little; once the batch is wide the step is compute-bound and every row costs its
 * share, so a rejected draft row takes time the other slots' tokens need. The generating slots' rows
 * are therefore capped at spec.max_rows (default 1 + n_max: the verify width of one stream
 * speculating alone, as `brisk run` does): plain tokens first, drafts in what is left, shared evenly
 * (the remainder to the first slots). With max_rows slots generating nobody drafts.
 * Prompt chunks are not counted: a step holding one is compute-bound already, and drafts are a small
 * part of it. */
static int build_batch(sched *s) {
    int n = 0, n_gen = 0, n_spec = 0;
    for (int i = 0; i < s->p.n_parallel; i++) {
        slot *sl = &s->slots[i];
        sl->logit_idx = -1;
        sl->n_chunk = sl->n_draft = 0;
        sl->dr_asked = sl->spec_err = false;
        if (!sl->req || !sl->generating) continue;
        n_gen++;
        n_spec += spec_k_max(s, sl) > 0;
    }
    spec_draft_all(s, n_gen, n_spec);
    for (int i = 0; i < s->p.n_parallel; i++) {
        slot *sl = &s->slots[i];
        if (!sl->req || !sl->generating) continue;
        sl->logit_idx = n;
        s->batch[n++] = (brisk_batch_entry){sl->next, sl->n_cache, sl->id, true};
        for (int j = 0; j < sl->n_draft; j++)
            s->batch[n++] = (brisk_batch_entry){sl->draft[j], sl->n_cache + 1 + j, sl->id, true};
    }
    int budget = s->p.prefill_chunk;
    for (int k = 0; k < s->p.n_parallel && budget > 0; k++) {
        slot *sl = &s->slots[(s->rr + k) % s->p.n_parallel];
        if (!sl->req || sl->generating || sl->fork_wait) continue;
        const sched_req *r = sl->req;
        if (r->n_inputs) { /* an input goes whole into one step, or waits for the next */
            int o = r->in_off[sl->ci], len = r->in_off[sl->ci + 1] - o;
            if (sl->n_fed || len > budget) continue;
            sl->embd_idx = n;
            for (int j = 0; j < len; j++)
                s->batch[n++] = (brisk_batch_entry){r->prompt[o + j], j, sl->id, s->pooling == BRISK_POOLING_NONE};
            sl->n_chunk = len;
            budget -= len;
            continue;
        }
        int take = r->n_prompt - sl->n_fed;
        if (take > budget) take = budget;
        if (r->p.prompt_logprobs && take > PROMPT_LP_CHUNK) take = PROMPT_LP_CHUNK; /* each entry a logits row */
        if (sl->dr_tgt && !sl->dr_begun && !sl->dr_failed) { /* before the request's first batch */
            sl->dr_begun = true;
            if (drafter_begin_at(sl->dr, r->prompt, r->n_prompt, sl->n_fed, sl->n_seen) != BRISK_OK)
                sl->dr_failed = true;
        }
        sl->chunk_idx = n;
        /* End on a checkpoint boundary; near the prompt's end, on one a few tokens before it: a
         * follow-up turn re-renders the generation prompt ("<think>\n") differently. */
        int end = sl->n_fed + take, limit = end == r->n_prompt ? end - CKPT_END_MARGIN : end;
        int cut = s->ckpt && limit > 0 ? limit / s->ckpt * s->ckpt : 0;
        if (cut > sl->n_fed && cut < end) take = cut - sl->n_fed;
        for (int j = 0; j < take; j++) {
            int p = sl->n_fed + j;
            bool last = p == r->n_prompt - 1;
            if (last) sl->logit_idx = n;
            s->batch[n++] = (brisk_batch_entry){r->prompt[p], p, sl->id, last || r->p.prompt_logprobs};
        }
        sl->n_chunk = take;
        budget -= take;
    }
    s->rr = (s->rr + 1) % s->p.n_parallel;
    return n;
}

/* The log-softmax of tok and the top-k alternatives. */
static void logprobs(const float *logits, int n_vocab, sched_token *rec, int k) {
    float mx = logits[0];
    for (int i = 1; i < n_vocab; i++) mx = logits[i] > mx ? logits[i] : mx;
    double sum = 0;
    for (int i = 0; i < n_vocab; i++) sum += exp((double)(logits[i] - mx));
    float lse = mx + (float)log(sum);
    rec->logprob = logits[rec->id] - lse;
    rec->n_top = 0;
    for (int i = 0; i < n_vocab && k > 0; i++) {
        float l = logits[i];
        if (rec->n_top == k && l <= rec->top_lp[k - 1]) continue;
        int j = rec->n_top < k ? rec->n_top++ : k - 1;
        while (j > 0 && rec->top_lp[j - 1] < l) {
            rec->top_lp[j] = rec->top_lp[j - 1];
            rec->top_id[j] = rec->top_id[j - 1];
            j--;
        }
        rec->top_lp[j] = l;
        rec->top_id[j] = i;
    }
    for (int j = 0; j < rec->n_top; j++) rec->top_lp[j] -= lse;
}

static bool text_append(sched_choice *c, const char *p, size_t n) {
    if (c->text_len + n + 1 > c->text_cap) {
        size_t cap = c->text_cap ? c->text_cap : 256;
        while (cap < c->text_len + n + 1) cap *= 2;
        char *t = realloc(c->text, cap);
        if (!t) return false;
        c->text = t;
        c->text_cap = cap;
    }
    memcpy(c->text + c->text_len, p, n);
    c->text_len += n;
    c->text[c->text_len] = 0;
    return true;
}

/* Bytes at the end of c's text that could still begin a stop string. */
static size_t stop_holdback(const sched_req *r, const sched_choice *c) {
    size_t hold = 0;
    for (int i = 0; i < r->p.n_stop; i++) {
        size_t sl = strlen(r->p.stop[i]);
        for (size_t k = sl - 1; k > hold; k--)
            if (k <= c->text_len && !memcmp(c->text + c->text_len - k, r->p.stop[i], k)) {
                hold = k;
                break;
            }
    }
    return hold;
}

/* Lock held: publishes the slot's sampled token to its choice; ends the
 * choice on end-of-generation, a stop string or the length limit. */
static void publish(sched *s, slot *sl, const sched_token *t) {
    sched_req *r = sl->req;
    sched_choice *c = &r->ch[sl->ci];
    brisk_token tok = t->id;
    sl->n_gen++;
    s->st.generated_tokens++;
    if (r->t_first_token == 0) r->t_first_token = now_s();
    if (!r->p.ignore_eos && brisk_token_is_eog(s->model, tok)) {
        slot_release(s, sl, SCHED_FINISH_STOP, NULL);
        return;
    }
    if (c->n_toks == c->toks_cap) {
        int cap = c->toks_cap ? 2 * c->toks_cap : 64;
        sched_token *nt = realloc(c->toks, (size_t)cap * sizeof *nt);
        if (!nt) {
            slot_release(s, sl, SCHED_FINISH_ERROR, "out of memory");
            return;
        }
        c->toks = nt;
        c->toks_cap = cap;
    }
    c->toks[c->n_toks++] = *t;
    char piece[1100];
    size_t len = 0;
    if (brisk_detok_push(s->model, &sl->dt, tok, piece, sizeof piece, &len) != BRISK_OK) len = 0;
    size_t old = c->text_len;
    if (!text_append(c, piece, len)) {
        slot_release(s, sl, SCHED_FINISH_ERROR, "out of memory");
        return;
    }
    for (int i = 0; i < r->p.n_stop; i++) {
        size_t stl = strlen(r->p.stop[i]);
        size_t from = old + 1 > stl ? old + 1 - stl : 0;
        const char *hit = c->text_len >= stl ? memmem(c->text + from, c->text_len - from, r->p.stop[i], stl) : NULL;
        if (hit) {
            c->text_len = (size_t)(hit - c->text);
            c->text[c->text_len] = 0;
            c->stop_hit = 1 + i;
            slot_release(s, sl, SCHED_FINISH_STOP, NULL);
            return;
        }
    }
    if (sl->n_gen >= sl->max_gen) {
        slot_release(s, sl, SCHED_FINISH_LENGTH, NULL);
        return;
    }
    size_t vis = c->text_len - stop_holdback(r, c);
    if (vis > c->n_visible) c->n_visible = vis;
    sl->next = tok;
    sl->generating = true;
    wake(r);
}

/* The first slot of a request with n > 1 choices has just decoded its
 * prompt: the slots of the other choices take its whole sequence (shared
 * pages; a recurrent state is copied) and sample from the same logits. */
static void fork_choices(sched *s, const slot *lead) {
    for (int i = 0; i < s->p.n_parallel; i++) {
        slot *f = &s->slots[i];
        if (f->req != lead->req || !f->fork_wait) continue;
        f->fork_wait = false;
        if (brisk_seq_share_prefix(s->ctx, lead->id, f->id, lead->n_cache) != BRISK_OK) {
            f->fork_failed = true;
            continue;
        }
        memcpy(f->cache, lead->cache, (size_t)lead->n_cache * sizeof *f->cache);
        f->n_cache = f->n_fed = lead->n_cache;
        f->logit_idx = lead->logit_idx;
    }
}

/* Runs one batch. */
/* After a step: copies the vector(s) of sl's input into its request (this thread owns r->embd
 * until the request finishes); n_fed -1 marks a missing one. */
static void embd_collect(sched *s, slot *sl) {
    sched_req *r = sl->req;
    int o = r->in_off[sl->ci], len = r->in_off[sl->ci + 1] - o, d = s->n_embd_out, at = sl->embd_idx;
    size_t row = sizeof(float) * (size_t)d;
    sl->n_fed = len;
    if (s->pooling != BRISK_POOLING_NONE) {
        const float *v = brisk_get_embeddings_seq(s->ctx, sl->id);
        if (v) memcpy(r->embd + (size_t)sl->ci * d, v, row);
        else sl->n_fed = -1;
        return;
    }
    for (int j = 0; j < len; j++) {
        const float *v = brisk_get_embeddings_ith(s->ctx, at + j);
        if (v) memcpy(r->embd + (size_t)(o + j) * d, v, row);
        else sl->n_fed = -1;
    }
}

/* Cuts sl's sequence back to its cache (n_cache tokens) after a step that verified drafts; the
 * sequence was snap tokens long before it. Where a recurrent state allows no direct cut, restores the
 * snapshot at snap and appends the accepted tokens to the re-decode batch (s->batch from *nr). */
static brisk_status spec_cut(sched *s, slot *sl, int32_t snap, int *nr) {
    int32_t keep = sl->n_cache;
    if (brisk_seq_len(s->ctx, sl->id) <= keep) return BRISK_OK;
    if (brisk_seq_keepable(s->ctx, sl->id, keep) == keep) return brisk_seq_remove(s->ctx, sl->id, keep, -1);
    if (brisk_seq_keepable(s->ctx, sl->id, snap) != snap)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "speculative: cannot roll back a recurrent state (no checkpoint)");
    BK_TRY(brisk_seq_remove(s->ctx, sl->id, snap, -1));
    for (int32_t p = snap; p < keep; p++) s->batch[(*nr)++] = (brisk_batch_entry){sl->cache[p], p, sl->id, false};
    return BRISK_OK;
}

/* After sampling (the batch's logits are no longer needed): each slot that verified drafts keeps
 * the accepted ones in its cache and cuts the rejected positions (recurrent states re-decoded from
 * their snapshots, every such slot in one batch); each drafter asked this step catches up on the
 * round's outcome (drafter_sync: the draft model cuts its own cache). A failed cut ends the slot's
 * request (spec_err); a failed drafter only stops its speculation. */
static void spec_settle(sched *s) {
    int nr = 0;
    for (int i = 0; i < s->p.n_parallel; i++) {
        slot *sl = &s->slots[i];
        if (!sl->req || sl->logit_idx < 0 || !sl->n_draft) continue;
        int32_t snap = sl->n_cache - 1; /* step() has appended next */
        int acc = sl->n_rec - 1;
        memcpy(sl->cache + sl->n_cache, sl->draft, (size_t)acc * sizeof *sl->draft);
        sl->n_cache += acc;
        if (spec_cut(s, sl, snap, &nr) != BRISK_OK) sl->spec_err = true;
    }
    if (nr > 0) {
        s->batch[nr - 1].logits = true;
        if (brisk_decode(s->ctx, s->batch, nr) != BRISK_OK)
            for (int j = 0; j < nr; j++) s->slots[s->batch[j].seq].spec_err = true;
    }
    for (int i = 0; i < s->p.n_parallel; i++) {
        slot *sl = &s->slots[i];
        if (!sl->req || !sl->dr_asked || sl->dr_failed || sl->spec_err || sl->n_cache >= s->p.n_ctx_slot) continue;
        sl->cache[sl->n_cache] = sl->rec[sl->n_rec - 1].id; /* the next step's input */
        if (drafter_sync(sl->dr, sl->cache, sl->n_cache + 1) != BRISK_OK) sl->dr_failed = true;
    }
}

/* After the target's step, while its hidden states (and EAGLE-3 layer inputs, one row per batch entry) are
 * there: each slot's MTP head or EAGLE-3 drafter catches up on the slot's entries of the batch (a prompt
 * chunk, or its token and drafts). */
static void spec_process(sched *s) {
    for (int i = 0; i < s->p.n_parallel; i++) {
        slot *sl = &s->slots[i];
        if (!sl->req || !sl->dr_tgt || !sl->dr_begun || sl->dr_failed) continue;
        brisk_status st = BRISK_OK;
        if (sl->n_chunk) st = drafter_process_at(sl->dr, s->batch, sl->chunk_idx, sl->n_chunk);
        else if (sl->generating && sl->logit_idx >= 0)
            st = drafter_process_at(sl->dr, s->batch, sl->logit_idx, 1 + sl->n_draft);
        if (st != BRISK_OK) sl->dr_failed = true;
    }
}

/* The logprob of each prompt token after this step's chunk entries: entry j's logits give token
 * n_fed + j + 1's (the request's p.prompt_logprobs). */
static void prompt_logprobs(sched *s, const slot *sl) {
    sched_req *r = sl->req;
    for (int j = 0; j < sl->n_chunk; j++) {
        int p = sl->n_fed + j + 1;
        const float *lg = p < r->n_prompt ? brisk_get_logits(s->ctx, sl->chunk_idx + j) : NULL;
        if (!lg) continue;
        sched_token *rec = &r->prompt_lp[p]; /* its id set with the array */
        rec->n_top = 0;
        logprobs(lg, s->n_vocab, rec, r->p.top_logprobs);
    }
}

static void step(sched *s, int n) {
    brisk_status st = brisk_decode(s->ctx, s->batch, n);
    if (st == BRISK_OK && s->p.spec.drafters) spec_process(s);
    char err[256] = "";
    if (st != BRISK_OK) snprintf(err, sizeof err, "decode failed: %s", brisk_last_error());
    /* Sampling runs outside the lock: the slots belong to this thread. */
    for (int i = 0; i < s->p.n_parallel && st == BRISK_OK; i++) {
        slot *sl = &s->slots[i];
        if (!sl->req) continue;
        if (sl->req->n_inputs) { /* embeddings: the input's vector(s) */
            if (sl->n_chunk) embd_collect(s, sl);
            continue;
        }
        if (sl->generating) sl->cache[sl->n_cache++] = sl->next;
        if (sl->req->p.prompt_logprobs) prompt_logprobs(s, sl);
        for (int j = 0; j < sl->n_chunk; j++) sl->cache[sl->n_cache++] = sl->req->prompt[sl->n_fed + j];
        sl->n_fed += sl->n_chunk;
        /* a failed snapshot only costs a later prompt its reuse */
        if (s->ckpt && sl->n_chunk && sl->n_fed % s->ckpt == 0) brisk_seq_checkpoint(s->ctx, sl->id);
    }
    for (int i = 0; i < s->p.n_parallel && st == BRISK_OK; i++) {
        const slot *sl = &s->slots[i];
        if (sl->req && sl->logit_idx >= 0 && !sl->generating && sl->req->n_choices > 1) fork_choices(s, sl);
    }
    for (int i = 0; i < s->p.n_parallel && st == BRISK_OK; i++) {
        slot *sl = &s->slots[i];
        if (!sl->req || sl->logit_idx < 0) continue;
        /* as plain decoding: each token sampled from the logits after exactly the tokens before it; a
         * draft only saves a step while the samples match it */
        sl->n_rec = 0;
        for (int j = 0; j <= sl->n_draft; j++) {
            sched_token *rec = &sl->rec[sl->n_rec++];
            const float *lg = brisk_get_logits(s->ctx, sl->logit_idx + j);
            const sched_gen_params *gp = &sl->req->p;
            if (gp->n_bias) { /* logprobs then report what was sampled from */
                memcpy(s->biased, lg, (size_t)s->n_vocab * sizeof *lg);
                for (int k = 0; k < gp->n_bias; k++) s->biased[gp->bias_id[k]] += gp->bias[k];
                lg = s->biased;
            }
            rec->id = brisk_sampler_sample(sl->smp, lg);
            brisk_sampler_accept(sl->smp, rec->id);
            rec->n_top = 0;
            rec->logprob = 0;
            if (gp->logprobs) logprobs(lg, s->n_vocab, rec, gp->top_logprobs);
            if (j == sl->n_draft || rec->id != sl->draft[j]) break;
        }
    }
    if (st == BRISK_OK) spec_settle(s);
    pthread_mutex_lock(&s->mu);
    s->st.steps++;
    for (int i = 0; i < s->p.n_parallel; i++) {
        slot *sl = &s->slots[i];
        if (!sl->req) continue;
        if (sl->fork_failed) {
            sl->fork_failed = false;
            brisk_seq_clear(s->ctx, sl->id);
            sl->n_cache = 0;
            slot_release(s, sl, SCHED_FINISH_ERROR, "cannot share the prompt between choices");
            continue;
        }
        if (st != BRISK_OK) {
            if (sl->logit_idx < 0 && !sl->n_chunk) continue;
            brisk_seq_clear(s->ctx, sl->id);
            sl->n_cache = 0;
            slot_release(s, sl, SCHED_FINISH_ERROR, err);
            continue;
        }
        if (sl->req->n_inputs && sl->n_chunk) { /* an input done: its sequence is not kept */
            brisk_seq_clear(s->ctx, sl->id);
            sl->n_cache = 0;
            sl->req->started = true;
            slot_release(s, sl, sl->n_fed < 0 ? SCHED_FINISH_ERROR : SCHED_FINISH_STOP, "no embeddings came out");
            continue;
        }
        if (sl->logit_idx < 0) continue;
        if (!sl->req->started) {
            sl->req->started = true;
            wake(sl->req);
        }
        if (sl->spec_err) { /* its sequence no longer matches its cache: cleared even when cancelled */
            brisk_seq_clear(s->ctx, sl->id);
            sl->n_cache = 0;
            slot_release(s, sl, SCHED_FINISH_ERROR, "speculative decoding: rolling back rejected drafts failed");
            continue;
        }
        if (sl->req->cancelled || sl->req->finish != SCHED_RUNNING) continue;
        if (sl->n_draft) {
            sl->req->n_drafted += sl->n_draft;
            sl->req->n_draft_accepted += sl->n_rec - 1;
            s->st.draft_tokens += (uint64_t)sl->n_draft;
            s->st.draft_accepted += (uint64_t)(sl->n_rec - 1);
            s->st.draft_rounds++;
        }
        if (sl->max_gen == 0) { /* a prompt decoded for its logprobs only (max_tokens 0) */
            slot_release(s, sl, SCHED_FINISH_LENGTH, NULL);
            continue;
        }
        /* publish may end the choice (and free the slot) at any of them */
        for (int j = 0; j < sl->n_rec && sl->req; j++) publish(s, sl, &sl->rec[j]);
    }
    double t = now_s();
    if (t - s->rate_t0 >= 2.0) {
        s->st.gen_tok_per_s = (double)(s->st.generated_tokens - s->rate_n0) / (t - s->rate_t0);
        s->rate_t0 = t;
        s->rate_n0 = s->st.generated_tokens;
    }
}

static void *sched_main(void *arg) {
    sched *s = arg;
    pthread_mutex_lock(&s->mu);
    while (!s->stopping) {
        admit(s);
        int active = 0;
        for (int i = 0; i < s->p.n_parallel; i++) active += s->slots[i].req != NULL;
        if (!active) {
            if (now_s() - s->rate_t0 >= 2.0) s->st.gen_tok_per_s = 0;
            pthread_cond_wait(&s->cv, &s->mu);
            continue;
        }
        pthread_mutex_unlock(&s->mu);
        int n = build_batch(s);
        if (n > 0) step(s, n);
        else pthread_mutex_lock(&s->mu);
    }
    for (int i = 0; i < s->p.n_parallel; i++) slot_release(s, &s->slots[i], SCHED_FINISH_ERROR, "the server is shutting down");
    while (s->q_len > 0) {
        sched_req *r = s->queue[s->q_head];
        s->q_head = (s->q_head + 1) % s->p.max_queue;
        s->q_len--;
        req_finish(s, r, SCHED_FINISH_ERROR, "the server is shutting down");
        req_unref(r);
    }
    pthread_mutex_unlock(&s->mu);
    return NULL;
}

void sched_get_stats(sched *s, sched_stats *out) {
    pthread_mutex_lock(&s->mu);
    *out = s->st;
    out->queue_len = s->q_len;
    out->n_parallel = s->p.n_parallel;
    out->active = 0;
    out->kv_tokens = 0;
    for (int i = 0; i < s->p.n_parallel; i++) {
        out->active += s->slots[i].req != NULL;
        out->kv_tokens += s->slots[i].n_cache;
    }
    out->kv_capacity = (int64_t)s->p.n_ctx_slot * s->p.n_parallel;
    if (now_s() - s->rate_t0 > 4.0) out->gen_tok_per_s = 0;
    pthread_mutex_unlock(&s->mu);
}

void sched_get_slots(sched *s, sched_slot_info *out) {
    pthread_mutex_lock(&s->mu);
    for (int i = 0; i < s->p.n_parallel; i++) {
        const slot *sl = &s->slots[i];
        const sched_req *r = sl->req;
        out[i] = (sched_slot_info){.id = sl->id, .is_processing = r != NULL, .n_cache = sl->n_cache};
        if (!r) continue;
        out[i].n_prompt = r->n_inputs ? r->in_off[sl->ci + 1] - r->in_off[sl->ci] : r->n_prompt;
        out[i].n_cached = r->n_inputs ? 0 : r->n_cached;
        out[i].n_decoded = r->n_inputs ? 0 : sl->n_gen;
        out[i].n_remain = r->n_inputs ? 0 : sl->max_gen - sl->n_gen;
        if (!sl->dr || r->n_inputs) continue;
        int k = r->p.spec_n_max >= 0 && r->p.spec_n_max < s->p.spec.n_max ? r->p.spec_n_max : s->p.spec.n_max;
        out[i].spec_n_max = k;
        out[i].spec_n_min = k ? (r->p.spec_n_min >= 0 ? r->p.spec_n_min : s->p.spec.n_min) : 0;
        out[i].n_drafted = r->n_drafted;
        out[i].n_draft_accepted = r->n_draft_accepted;
    }
    pthread_mutex_unlock(&s->mu);
}

void sched_free(sched *s) {
    if (!s) return;
    if (s->thread_started) {
        pthread_mutex_lock(&s->mu);
        s->stopping = true;
        pthread_cond_signal(&s->cv);
        pthread_mutex_unlock(&s->mu);
        pthread_join(s->thread, NULL);
    }
    if (s->slots)
        for (int i = 0; i < s->p.n_parallel; i++) {
            brisk_sampler_free(s->slots[i].smp);
            free(s->slots[i].cache);
            free(s->slots[i].rec);
        }
    free(s->slots);
    spec_lanes *ls = &s->lanes;
    free(ls->dr);
    free(ls->hist);
    free(ls->n);
    free(ls->k_max);
    free(ls->k);
    free(ls->out);
    free(ls->sl);
    free(s->queue);
    free(s->batch);
    free(s->biased);
    pthread_cond_destroy(&s->cv);
    pthread_mutex_destroy(&s->mu);
    free(s);
}

brisk_status sched_new(brisk_model *model, brisk_context *ctx, const sched_params *p, sched **out) {
    *out = NULL;
    if (p->n_parallel < 1 || p->n_ctx_slot < 2 || p->prefill_chunk < 1 || p->max_queue < 1)
        return bk_fail(BRISK_ERR_INVALID_ARG, "scheduler: bad limits");
    const sched_spec *sp = &p->spec;
    if (sp->drafters && (sp->n_max < 1 || sp->n_max > DRAFTER_MAX_DRAFT || sp->n_min < 0 || sp->max_rows < 0))
        return bk_fail(BRISK_ERR_INVALID_ARG, "scheduler: speculation proposes 1..%d tokens a round, not %d",
                       DRAFTER_MAX_DRAFT, sp->n_max);
    sched *s = calloc(1, sizeof *s);
    if (!s) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    pthread_mutex_init(&s->mu, NULL);
    pthread_cond_init(&s->cv, NULL);
    s->model = model;
    s->ctx = ctx;
    s->p = *p;
    if (!sp->drafters) s->p.spec = (sched_spec){0};
    else if (!s->p.spec.max_rows) s->p.spec.max_rows = 1 + s->p.spec.n_max;
    int per_slot = 1 + s->p.spec.n_max; /* rows a generating slot may put in a step */
    s->n_vocab = brisk_n_vocab(model);
    s->ckpt = brisk_context_n_checkpoints(ctx) > 0 && p->ckpt_interval > 0 ? p->ckpt_interval : 0;
    s->n_embd_out = brisk_context_n_embd_out(ctx);
    s->pooling = brisk_context_pooling(ctx);
    s->rate_t0 = now_s();
    s->slots = calloc((size_t)p->n_parallel, sizeof *s->slots);
    s->queue = calloc((size_t)p->max_queue, sizeof *s->queue);
    s->batch = calloc((size_t)p->n_parallel * per_slot + p->prefill_chunk, sizeof *s->batch);
    s->biased = malloc((size_t)s->n_vocab * sizeof *s->biased);
    if (!s->slots || !s->queue || !s->batch || !s->biased) goto oom;
    size_t np = (size_t)p->n_parallel;
    spec_lanes *ls = &s->lanes;
    ls->dr = calloc(np, sizeof *ls->dr);
    ls->hist = calloc(np, sizeof *ls->hist);
    ls->n = calloc(np, sizeof *ls->n);
    ls->k_max = calloc(np, sizeof *ls->k_max);
    ls->k = calloc(np, sizeof *ls->k);
    ls->out = calloc(np, sizeof *ls->out);
    ls->sl = calloc(np, sizeof *ls->sl);
    if (!ls->dr || !ls->hist || !ls->n || !ls->k_max || !ls->k || !ls->out || !ls->sl) goto oom;
    for (int i = 0; i < p->n_parallel; i++) {
        s->slots[i].id = i;
        s->slots[i].dr = sp->drafters ? sp->drafters[i] : NULL;
        drafter_kind kind = s->slots[i].dr ? drafter_get_kind(s->slots[i].dr) : DRAFTER_MODEL;
        s->slots[i].dr_tgt = s->slots[i].dr && (kind == DRAFTER_MTP || kind == DRAFTER_EAGLE3);
        if (!(s->slots[i].cache = malloc((size_t)p->n_ctx_slot * sizeof(brisk_token)))) goto oom;
        if (!(s->slots[i].rec = malloc((size_t)per_slot * sizeof(sched_token)))) goto oom;
    }
    if (pthread_create(&s->thread, NULL, sched_main, s)) {
        sched_free(s);
        return bk_fail(BRISK_ERR_NOMEM, "cannot start the scheduler thread");
    }
    s->thread_started = true;
    *out = s;
    return BRISK_OK;
oom:
    sched_free(s);
    return bk_fail(BRISK_ERR_NOMEM, "out of memory");
}
