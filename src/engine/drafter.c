/* drafter.c — the proposers of speculative decoding (see drafter.h). */
#include "engine/drafter.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "engine/mtp.h"
#include "model/eagle3.h"

#define PREFILL_CHUNK DRAFTER_FEED_CHUNK

/* The n-gram cache: which token followed each 1..DRAFTER_NGRAM_MAX-gram of the history, with
 * counts. Keys point into the history (the n-gram's first occurrence) instead of holding tokens;
 * both tables are open-addressed, sized at _new for every n-gram a full history can hold. */
typedef struct ng_key {
    int32_t start;    /* first occurrence in hist; -1: empty slot */
    int32_t n;        /* tokens in the n-gram */
    int32_t sum;      /* times any token followed it */
    int32_t best_tok; /* the token that followed it most often (the latest to reach that count) */
    int32_t best_cnt;
} ng_key;

typedef struct ng_pair {
    int32_t key; /* index into keys; -1: empty slot */
    int32_t tok;
    int32_t cnt;
} ng_pair;

struct drafter {
    drafter_kind kind;
    /* model */
    brisk_context *ctx;        /* borrowed */
    int seq;                   /* the model kind's sequence in ctx */
    int n_vocab;
    float p_min;
    int32_t snap;              /* the draft cache's length when the round began */
    brisk_batch_entry *batch;  /* (PREFILL_CHUNK) */
    /* mtp (ctx: the MTP context, owned; batch and p_min as the model kind's) */
    brisk_context *target;     /* borrowed: keeps its hidden states */
    int n_embd;
    float *h_in;               /* (PREFILL_CHUNK, n_embd) a processed batch's h rows, shifted one entry */
    float *pending_h;          /* (n_embd) the target's h of the position before the MTP context's next one */
    float *chain_h;            /* (n_embd) a draft step's output h: the next step's input */
    float *verify_h;           /* (DRAFTER_MAX_DRAFT + 1, n_embd) the tail of the last processed batch's target h */
    int32_t verify_pos0;       /* the position of its first row */
    int verify_rows;
    /* eagle3 (target, n_embd (the drafter's), p_min, chain_h and verify_h (its g rows) as mtp's) */
    eagle3 *e3;                /* owned */
    int32_t *e3_tok;           /* (PREFILL_CHUNK) a processed batch's tokens, shifted one entry */
    float *e3_g;               /* (PREFILL_CHUNK + 1, n_embd) the pending g row, then the batch's g rows */
    int32_t pending_pos;       /* the position of the g row in e3_g[0] (the deferred pair's); -1: none */
    /* lookup */
    int n_min, n_max;
    /* cache */
    const brisk_token *hist;   /* the caller's history, as of the last call (keys point into it) */
    int32_t n_hist_max, n_indexed;
    ng_key *keys;              /* (cap) */
    ng_pair *pairs;            /* (cap) */
    uint32_t cap;              /* a power of two */
    /* replay */
    brisk_token *ref;          /* (n_ref) */
    int32_t n_ref;
    int n_match;
    drafter *inner;            /* borrowed (drafter_replay_over), or NULL */
};

static brisk_status alloc_drafter(drafter_kind kind, drafter **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    (*out)->kind = kind;
    return BRISK_OK;
}

brisk_status drafter_new_model(brisk_context *draft, int seq, int n_vocab, float p_min, drafter **out) {
    BK_TRY(alloc_drafter(DRAFTER_MODEL, out));
    drafter *d = *out;
    d->ctx = draft;
    d->seq = seq;
    d->n_vocab = n_vocab;
    d->p_min = p_min;
    if (!(d->batch = malloc(PREFILL_CHUNK * sizeof *d->batch))) {
        drafter_free(d);
        *out = NULL;
        return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    return BRISK_OK;
}

brisk_status drafter_new_mtp(brisk_context *target, brisk_model *model, const brisk_context_params *params,
                             float p_min, drafter **out) {
    *out = NULL;
    brisk_model_info info;
    brisk_model_get_info(model, &info);
    BK_TRY(mtp_keep_hidden(target));
    BK_TRY(alloc_drafter(DRAFTER_MTP, out));
    drafter *d = *out;
    d->target = target;
    d->n_vocab = info.n_vocab;
    d->n_embd = info.n_embd;
    d->p_min = p_min;
    size_t row = (size_t)info.n_embd * sizeof(float);
    d->batch = malloc(PREFILL_CHUNK * sizeof *d->batch);
    d->h_in = malloc(PREFILL_CHUNK * row);
    d->pending_h = calloc(1, row);
    d->chain_h = malloc(row);
    d->verify_h = malloc((DRAFTER_MAX_DRAFT + 1) * row);
    brisk_context_params p = *params;
    p.n_seq_max = 1;
    p.n_batch = PREFILL_CHUNK;
    p.n_outputs_max = 0;
    p.n_seq_checkpoints = 0;
    p.collect_expert_stats = false;
    p.cache_experts = 0;
    p.cache_gpu_mem = 0;
    p.expert_stats = NULL;
    brisk_status s = d->batch && d->h_in && d->pending_h && d->chain_h && d->verify_h
                         ? mtp_context_new(model, &p, &d->ctx) : bk_fail(BRISK_ERR_NOMEM, "out of memory");
    if (s != BRISK_OK) {
        drafter_free(d);
        *out = NULL;
    }
    return s;
}

brisk_status drafter_new_eagle3(brisk_context *target, const brisk_model *model, const char *path, int n_ctx,
                                int n_threads, float p_min, const drafter *like, drafter **out) {
    *out = NULL;
    BK_TRY(alloc_drafter(DRAFTER_EAGLE3, out));
    drafter *d = *out;
    d->target = target;
    d->n_vocab = brisk_n_vocab(model);
    d->p_min = p_min;
    d->pending_pos = -1;
    brisk_status s = like && like->kind == DRAFTER_EAGLE3 ? eagle3_open_sibling(like->e3, n_ctx, &d->e3)
                     : like ? bk_fail(BRISK_ERR_INVALID_ARG, "drafter_new_eagle3: the drafter to share is no EAGLE-3 one")
                     : eagle3_open(path, model, n_ctx, n_threads, &d->e3);
    if (s == BRISK_OK) s = eagle3_keep_layers(target, eagle3_target_layers(d->e3), 3);
    if (s == BRISK_OK) {
        d->n_embd = eagle3_n_embd(d->e3);
        size_t row = (size_t)d->n_embd * sizeof(float);
        d->e3_tok = malloc(PREFILL_CHUNK * sizeof *d->e3_tok);
        d->e3_g = malloc((PREFILL_CHUNK + 1) * row);
        d->chain_h = malloc(row);
        d->verify_h = malloc((DRAFTER_MAX_DRAFT + 1) * row);
        if (!d->e3_tok || !d->e3_g || !d->chain_h || !d->verify_h) s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    if (s != BRISK_OK) {
        drafter_free(d);
        *out = NULL;
    }
    return s;
}

brisk_status drafter_new_lookup(int n_min, int n_max, drafter **out) {
    *out = NULL;
    if (n_min < 1 || n_max < n_min || n_max > DRAFTER_MAX_DRAFT)
        return bk_fail(BRISK_ERR_INVALID_ARG, "drafter: lookup n-gram sizes %d..%d (want 1 <= min <= max <= %d)",
                       n_min, n_max, DRAFTER_MAX_DRAFT);
    BK_TRY(alloc_drafter(DRAFTER_LOOKUP, out));
    (*out)->n_min = n_min;
    (*out)->n_max = n_max;
    return BRISK_OK;
}

brisk_status drafter_new_cache(int32_t n_hist_max, drafter **out) {
    *out = NULL;
    if (n_hist_max < 1 || n_hist_max > (1 << 26))
        return bk_fail(BRISK_ERR_INVALID_ARG, "drafter: n-gram cache for %d tokens", n_hist_max);
    BK_TRY(alloc_drafter(DRAFTER_CACHE, out));
    drafter *d = *out;
    /* at most n_hist_max * NGRAM_MAX keys and pairs; a load of at most 1/2 keeps probes short */
    uint32_t cap = 64;
    while (cap < 2u * (uint32_t)n_hist_max * DRAFTER_NGRAM_MAX) cap <<= 1;
    d->cap = cap;
    d->n_hist_max = n_hist_max;
    d->keys = malloc(cap * sizeof *d->keys);
    d->pairs = malloc(cap * sizeof *d->pairs);
    if (!d->keys || !d->pairs) {
        drafter_free(d);
        *out = NULL;
        return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    for (uint32_t i = 0; i < cap; i++) d->keys[i].start = -1, d->pairs[i].key = -1;
    return BRISK_OK;
}

brisk_status drafter_new_replay(const brisk_token *ref, int32_t n_ref, int n_match, int n_vocab, drafter **out) {
    *out = NULL;
    if (n_ref < 1 || n_match < 0 || n_vocab < 2) return bk_fail(BRISK_ERR_INVALID_ARG, "drafter: bad replay");
    BK_TRY(alloc_drafter(DRAFTER_REPLAY, out));
    drafter *d = *out;
    d->n_ref = n_ref;
    d->n_match = n_match;
    d->n_vocab = n_vocab;
    if (!(d->ref = malloc((size_t)n_ref * sizeof *d->ref))) {
        drafter_free(d);
        *out = NULL;
        return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    memcpy(d->ref, ref, (size_t)n_ref * sizeof *ref);
    return BRISK_OK;
}

void drafter_free(drafter *d) {
    if (!d) return;
    if (d->kind == DRAFTER_MTP) brisk_context_free(d->ctx);
    eagle3_free(d->e3);
    free(d->e3_tok);
    free(d->e3_g);
    free(d->h_in);
    free(d->pending_h);
    free(d->chain_h);
    free(d->verify_h);
    free(d->batch);
    free(d->keys);
    free(d->pairs);
    free(d->ref);
    free(d);
}

drafter_kind drafter_get_kind(const drafter *d) { return d->kind; }

bool drafter_model_compatible(const brisk_model *target, const brisk_model *draft, char *msg, size_t cap) {
    if (brisk_n_vocab(target) != brisk_n_vocab(draft)) {
        snprintf(msg, cap, "the draft's vocabulary has %d tokens, the target's %d", brisk_n_vocab(draft),
                 brisk_n_vocab(target));
        return false;
    }
    if (brisk_token_bos(target) != brisk_token_bos(draft) || brisk_token_eos(target) != brisk_token_eos(draft)) {
        snprintf(msg, cap, "the draft's special tokens (bos %d, eos %d) differ from the target's (bos %d, eos %d)",
                 brisk_token_bos(draft), brisk_token_eos(draft), brisk_token_bos(target), brisk_token_eos(target));
        return false;
    }
    return true;
}

/* ---- model ---- */

/* The draft's greedy token and its softmax probability. */
static brisk_token argmax_p(const float *x, int n, float *p) {
    int best = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[best]) best = i;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += exp((double)x[i] - x[best]);
    *p = (float)(1.0 / sum);
    return best;
}

static brisk_status feed_seq(brisk_context *ctx, int seq, const brisk_token *hist, int32_t from, int32_t to,
                             brisk_batch_entry *batch) {
    for (int32_t i = from; i < to; i += PREFILL_CHUNK) {
        int n = to - i < PREFILL_CHUNK ? to - i : PREFILL_CHUNK;
        for (int j = 0; j < n; j++) batch[j] = (brisk_batch_entry){hist[i + j], i + j, seq, i + j == to - 1};
        BK_TRY(brisk_decode(ctx, batch, n));
    }
    return BRISK_OK;
}

brisk_status drafter_feed(brisk_context *ctx, const brisk_token *hist, int32_t from, int32_t to,
                          brisk_batch_entry *batch) {
    return feed_seq(ctx, 0, hist, from, to, batch);
}

static brisk_status model_draft(drafter *d, const brisk_token *hist, int32_t n, int k_max, brisk_token *out, int *k) {
    *k = 0;
    BK_TRY(brisk_seq_checkpoint(d->ctx, d->seq));
    d->snap = brisk_seq_len(d->ctx, d->seq);
    if (k_max <= 0) return BRISK_OK;
    BK_TRY(feed_seq(d->ctx, d->seq, hist, d->snap, n, d->batch));
    /* proposals stop where the draft is unsure: a likely rejection costs a draft step and a
     * wider target batch for nothing */
    float p;
    out[0] = argmax_p(brisk_get_logits(d->ctx, (n - 1 - d->snap) % PREFILL_CHUNK), d->n_vocab, &p);
    if (p < d->p_min) return BRISK_OK;
    *k = 1;
    for (int i = 1; i < k_max; i++) {
        brisk_batch_entry e = {out[i - 1], n - 1 + i, d->seq, true};
        BK_TRY(brisk_decode(d->ctx, &e, 1));
        out[i] = argmax_p(brisk_get_logits(d->ctx, 0), d->n_vocab, &p);
        if (p < d->p_min) break;
        *k = i + 1;
    }
    return BRISK_OK;
}

brisk_status drafter_draft_models(drafter *const *d, int n_d, const brisk_token *const *hist, const int32_t *n,
                                  const int *k_max, brisk_token *const *out, int *k) {
    if (n_d <= 0) return BRISK_OK;
    if (n_d > PREFILL_CHUNK) return bk_fail(BRISK_ERR_INVALID_ARG, "drafter: %d drafters in lockstep", n_d);
    brisk_context *ctx = d[0]->ctx;
    brisk_batch_entry *b = d[0]->batch;
    int live[PREFILL_CHUNK], m = 0;
    for (int i = 0; i < n_d; i++) {
        k[i] = 0;
        if (d[i]->kind != DRAFTER_MODEL || d[i]->ctx != ctx)
            return bk_fail(BRISK_ERR_INVALID_ARG, "drafter: lockstep drafting needs draft models of one context");
        BK_TRY(brisk_seq_checkpoint(ctx, d[i]->seq));
        d[i]->snap = brisk_seq_len(ctx, d[i]->seq);
        if (k_max[i] <= 0 || d[i]->snap > n[i] - 1) continue;
        /* catch up on all but the last token alone (the first round of a sequence, or after rounds
         * it sat out); the last tokens of all go in one batch */
        BK_TRY(feed_seq(ctx, d[i]->seq, hist[i], d[i]->snap, n[i] - 1, b));
        live[m++] = i;
    }
    for (int step = 0; m > 0; step++) {
        for (int j = 0; j < m; j++) {
            int i = live[j];
            brisk_token t = step ? out[i][step - 1] : hist[i][n[i] - 1];
            b[j] = (brisk_batch_entry){t, n[i] - 1 + step, d[i]->seq, true};
        }
        BK_TRY(brisk_decode(ctx, b, m));
        int m2 = 0;
        for (int j = 0; j < m; j++) {
            int i = live[j], kmax = k_max[i] < DRAFTER_MAX_DRAFT ? k_max[i] : DRAFTER_MAX_DRAFT;
            float p;
            out[i][step] = argmax_p(brisk_get_logits(ctx, j), d[i]->n_vocab, &p);
            if (p < d[i]->p_min) continue; /* as model_draft: the proposals stop where the draft is unsure */
            k[i] = step + 1;
            if (k[i] < kmax) live[m2++] = i;
        }
        m = m2;
    }
    return BRISK_OK;
}

/* Cuts the draft's seq 0 back to `keep` positions; where recurrent state allows no direct cut,
 * restores the round's snapshot and re-decodes hist[snap, keep). */
static brisk_status model_sync(drafter *d, const brisk_token *hist, int32_t keep) {
    if (brisk_seq_len(d->ctx, d->seq) <= keep) return BRISK_OK;
    if (brisk_seq_keepable(d->ctx, d->seq, keep) == keep) return brisk_seq_remove(d->ctx, d->seq, keep, -1);
    if (brisk_seq_keepable(d->ctx, d->seq, d->snap) != d->snap)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "speculative: cannot roll back the draft's recurrent state");
    BK_TRY(brisk_seq_remove(d->ctx, d->seq, d->snap, -1));
    return feed_seq(d->ctx, d->seq, hist, d->snap, keep, d->batch);
}

/* ---- mtp ---- */

static brisk_status mtp_begin(drafter *d) {
    memset(d->pending_h, 0, (size_t)d->n_embd * sizeof(float)); /* position 0 has no h before it */
    d->verify_rows = 0;
    return brisk_seq_clear(d->ctx, 0);
}

/* The MTP context catches up on entries [first, first + n) of the target's batch (one sequence's
 * consecutive positions): entry i pairs its token with the target's h of the entry before it (the
 * first with pending_h). Keeps the entries' last rows of h for drafter_sync. */
static brisk_status mtp_process(drafter *d, const brisk_batch_entry *batch, int first, int n) {
    if (n <= 0) return BRISK_OK;
    if (n > PREFILL_CHUNK) return bk_fail(BRISK_ERR_INVALID_ARG, "drafter_process: a batch of %d entries", n);
    size_t row = (size_t)d->n_embd * sizeof(float);
    for (int i = 0; i < n; i++) {
        const float *h = i ? mtp_hidden(d->target, first + i - 1) : d->pending_h;
        if (!h) return bk_fail(BRISK_ERR_INVALID_ARG, "drafter_process: the target kept no hidden state");
        memcpy(d->h_in + (size_t)i * d->n_embd, h, row);
        d->batch[i] = batch[first + i];
        d->batch[i].seq = 0; /* the MTP context's one sequence */
        d->batch[i].logits = false;
    }
    BK_TRY(mtp_decode(d->ctx, d->batch, d->h_in, n));
    int keep = n < DRAFTER_MAX_DRAFT + 1 ? n : DRAFTER_MAX_DRAFT + 1;
    for (int i = 0; i < keep; i++)
        memcpy(d->verify_h + (size_t)i * d->n_embd, mtp_hidden(d->target, first + n - keep + i), row);
    d->verify_pos0 = batch[first + n - keep].pos;
    d->verify_rows = keep;
    memcpy(d->pending_h, d->verify_h + (size_t)(keep - 1) * d->n_embd, row);
    return BRISK_OK;
}

/* Chained greedy drafts: hist[n-1] at position n-1 with the target's h before it, then each proposal with the
 * head's own output h; the draft positions are cut again afterwards (drafter_process redoes them with the
 * target's h once it has verified them). */
static brisk_status mtp_draft(drafter *d, const brisk_token *hist, int32_t n, int k_max, brisk_token *out, int *k) {
    *k = 0;
    if (k_max <= 0) return BRISK_OK;
    if (brisk_seq_len(d->ctx, 0) != n - 1)
        return bk_fail(BRISK_ERR_INVALID_ARG, "drafter: the MTP cache holds %d positions, not %d",
                       brisk_seq_len(d->ctx, 0), n - 1);
    const float *h = d->pending_h;
    brisk_status s = BRISK_OK;
    for (int i = 0; i < k_max; i++) {
        brisk_batch_entry e = {i ? out[i - 1] : hist[n - 1], n - 1 + i, 0, true};
        if ((s = mtp_decode(d->ctx, &e, h, 1)) != BRISK_OK) break;
        float p;
        out[i] = argmax_p(brisk_get_logits(d->ctx, 0), d->n_vocab, &p);
        if (p < d->p_min) break;
        *k = i + 1;
        memcpy(d->chain_h, mtp_hidden(d->ctx, 0), (size_t)d->n_embd * sizeof(float));
        h = d->chain_h;
    }
    brisk_status cut = brisk_seq_remove(d->ctx, 0, n - 1, -1);
    return s != BRISK_OK ? s : cut;
}

/* Keeps the MTP cache's settled positions [0, keep) and the target's h at keep - 1. */
static brisk_status mtp_sync(drafter *d, int32_t keep) {
    int i = keep - 1 - d->verify_pos0;
    if (d->verify_rows && (i < 0 || i >= d->verify_rows))
        return bk_fail(BRISK_ERR_INVALID_ARG, "drafter: no target h for position %d", keep - 1);
    if (d->verify_rows) memcpy(d->pending_h, d->verify_h + (size_t)i * d->n_embd, (size_t)d->n_embd * sizeof(float));
    return brisk_seq_len(d->ctx, 0) > keep ? brisk_seq_remove(d->ctx, 0, keep, -1) : BRISK_OK;
}

/* ---- eagle3 ---- */

/* EAGLE-3's pair at position P is (token P+1, g_P) (llama.cpp's convention): a batch's last position waits
 * for the token after it, which the next batch or the draft brings (pending_pos, e3_g[0]). */
static brisk_status eagle3_begin(drafter *d) {
    d->pending_pos = -1;
    d->verify_rows = 0;
    eagle3_cut(d->e3, 0);
    return BRISK_OK;
}

/* The drafter catches up on entries [first, first + n) of the target's batch (one sequence's consecutive
 * positions): g rows from the target's kept layer inputs, then the pairs whose next token the batch holds
 * (the pending one first, when it is the position just before). Keeps the batch's last g rows for sync. */
static brisk_status eagle3_process(drafter *d, const brisk_batch_entry *batch, int first, int n) {
    if (n <= 0) return BRISK_OK;
    if (n > PREFILL_CHUNK) return bk_fail(BRISK_ERR_INVALID_ARG, "drafter_process: a batch of %d entries", n);
    const float *feat = eagle3_features(d->target, first);
    if (!feat || !eagle3_features(d->target, first + n - 1))
        return bk_fail(BRISK_ERR_INVALID_ARG, "drafter_process: the target kept no layer inputs");
    size_t row = (size_t)d->n_embd * sizeof(float);
    BK_TRY(eagle3_encode(d->e3, feat, n, d->e3_g + d->n_embd)); /* rows 1..n: g of the batch's positions */
    int32_t p0 = batch[first].pos;
    bool bridge = d->pending_pos >= 0 && d->pending_pos + 1 == p0 && eagle3_len(d->e3) == d->pending_pos;
    for (int i = 0; i < n; i++) d->e3_tok[i] = batch[first + i].token;
    /* entries: (token p0, pending g) at p0 - 1 when bridging, then (token p0+i+1, g_{p0+i}) at p0 + i */
    int m = n - 1 + bridge;
    int32_t at = bridge ? p0 - 1 : p0;
    if (eagle3_len(d->e3) != at)
        return bk_fail(BRISK_ERR_INVALID_ARG, "drafter_process: the EAGLE-3 cache holds %d positions, the batch "
                       "starts at %d", eagle3_len(d->e3), p0);
    if (m > 0) BK_TRY(eagle3_decode(d->e3, d->e3_tok + !bridge, d->e3_g + (size_t)!bridge * d->n_embd, at, m, false));
    int keep = n < DRAFTER_MAX_DRAFT + 1 ? n : DRAFTER_MAX_DRAFT + 1;
    memcpy(d->verify_h, d->e3_g + (size_t)(1 + n - keep) * d->n_embd, (size_t)keep * row);
    d->verify_pos0 = p0 + n - keep;
    d->verify_rows = keep;
    d->pending_pos = p0 + n - 1;
    memcpy(d->e3_g, d->e3_g + (size_t)n * d->n_embd, row);
    return BRISK_OK;
}

/* The target already holds [0, n_have) and decodes only what follows: the pairs (token P+1, g_P) this drafter
 * made for its slot's last sequence stay where P+1 lies in the n_seen tokens both sequences share; the rest of
 * the prefix (the deferred pair at its end too) is left blank, so the first batch lands at n_have. */
static brisk_status eagle3_begin_at(drafter *d, int32_t n_have, int32_t n_seen) {
    int32_t keep = (n_seen < n_have ? n_seen : n_have) - 1;
    if (keep < 0) keep = 0;
    if (keep > eagle3_len(d->e3)) keep = eagle3_len(d->e3);
    d->pending_pos = -1;
    d->verify_rows = 0;
    eagle3_cut(d->e3, keep);
    return eagle3_extend_blank(d->e3, n_have);
}

/* Chained greedy drafts: (hist[n-1], the pending g of position n-2) at n-2, then each proposal with the
 * drafter's own output h; the draft positions are cut again afterwards. */
static brisk_status eagle3_draft(drafter *d, const brisk_token *hist, int32_t n, int k_max, brisk_token *out,
                                 int *k) {
    *k = 0;
    if (k_max <= 0 || n < 2) return BRISK_OK;
    if (d->pending_pos != n - 2 || eagle3_len(d->e3) != n - 2)
        return bk_fail(BRISK_ERR_INVALID_ARG, "drafter: the EAGLE-3 cache holds %d positions (pending %d), not %d",
                       eagle3_len(d->e3), d->pending_pos, n - 2);
    const float *h = d->e3_g;
    brisk_status s = BRISK_OK;
    for (int i = 0; i < k_max; i++) {
        int32_t tok = i ? out[i - 1] : hist[n - 1];
        if ((s = eagle3_decode(d->e3, &tok, h, n - 2 + i, 1, true)) != BRISK_OK) break;
        float p;
        out[i] = argmax_p(eagle3_logits(d->e3), d->n_vocab, &p);
        if (p < d->p_min) break;
        *k = i + 1;
        memcpy(d->chain_h, eagle3_hidden(d->e3, 0), (size_t)d->n_embd * sizeof(float));
        h = d->chain_h;
    }
    eagle3_cut(d->e3, n - 2);
    return s;
}

/* The round ended with positions [0, keep] settled (keep = n - 1): the pairs of [0, keep - 1) stay, the g of
 * keep - 1 waits for hist[keep]. */
static brisk_status eagle3_sync(drafter *d, int32_t keep) {
    int i = keep - 1 - d->verify_pos0;
    if (keep < 1) return BRISK_OK;
    if (!d->verify_rows || i < 0 || i >= d->verify_rows)
        return bk_fail(BRISK_ERR_INVALID_ARG, "drafter: no EAGLE-3 g for position %d", keep - 1);
    memcpy(d->e3_g, d->verify_h + (size_t)i * d->n_embd, (size_t)d->n_embd * sizeof(float));
    d->pending_pos = keep - 1;
    eagle3_cut(d->e3, keep - 1);
    return BRISK_OK;
}

/* ---- lookup ---- */

int drafter_lookup_search(const brisk_token *hist, int32_t n, int n_min, int n_max, int k_max, brisk_token *out,
                          int *n_match) {
    *n_match = 0;
    for (int m = n_max < n - 1 ? n_max : n - 1; m >= n_min; m--) {
        const brisk_token *suf = hist + n - m;
        /* an earlier occurrence hist[j, j+m) with at least one token after it, the latest first */
        for (int32_t j = n - m - 1; j >= 0; j--) {
            if (hist[j + m - 1] != suf[m - 1] || memcmp(hist + j, suf, (size_t)m * sizeof *suf) != 0) continue;
            /* what followed it; past hist's end the copy reads its own output (a period of n-j-m) */
            int k = 0;
            for (; k < k_max; k++) {
                int32_t p = j + m + k;
                out[k] = p < n ? hist[p] : out[p - n];
            }
            *n_match = m;
            return k;
        }
    }
    return 0;
}

/* ---- cache ---- */

static uint32_t ng_hash(const brisk_token *q, int n) {
    uint64_t h = 0x9E3779B97F4A7C15ull * (uint64_t)(n + 1);
    for (int i = 0; i < n; i++) {
        h ^= (uint32_t)q[i];
        h *= 0xff51afd7ed558ccdull;
        h ^= h >> 33;
    }
    return (uint32_t)h;
}

/* The slot of n-gram q[0, n): its key, or the empty slot where it would go. */
static uint32_t ng_find(const drafter *d, const brisk_token *q, int n) {
    uint32_t mask = d->cap - 1, i = ng_hash(q, n) & mask;
    for (;; i = (i + 1) & mask) {
        const ng_key *e = &d->keys[i];
        if (e->start < 0) return i;
        if (e->n == n && memcmp(d->hist + e->start, q, (size_t)n * sizeof *q) == 0) return i;
    }
}

static uint32_t ng_pair_find(const drafter *d, int32_t key, brisk_token tok) {
    uint32_t mask = d->cap - 1, i = (uint32_t)(((uint64_t)(uint32_t)key * 0x9E3779B1u) ^ (uint32_t)tok * 0x85EBCA77u) & mask;
    for (;; i = (i + 1) & mask) {
        const ng_pair *e = &d->pairs[i];
        if (e->key < 0 || (e->key == key && e->tok == tok)) return i;
    }
}

/* Counts hist[i] as following each n-gram that ends at hist[i-1]. */
static void cache_index(drafter *d, int32_t i) {
    for (int n = 1; n <= DRAFTER_NGRAM_MAX && n <= i; n++) {
        uint32_t ki = ng_find(d, d->hist + i - n, n);
        ng_key *key = &d->keys[ki];
        if (key->start < 0) *key = (ng_key){i - n, n, 0, -1, 0};
        ng_pair *pr = &d->pairs[ng_pair_find(d, (int32_t)ki, d->hist[i])];
        if (pr->key < 0) *pr = (ng_pair){(int32_t)ki, d->hist[i], 0};
        pr->cnt++;
        key->sum++;
        if (pr->cnt >= key->best_cnt) key->best_tok = pr->tok, key->best_cnt = pr->cnt;
    }
}

static brisk_status cache_sync(drafter *d, const brisk_token *hist, int32_t n) {
    d->hist = hist;
    if (n > d->n_hist_max) n = d->n_hist_max; /* past its size the cache stops learning */
    for (; d->n_indexed < n; d->n_indexed++) cache_index(d, d->n_indexed);
    return BRISK_OK;
}

/* llama.cpp's lax thresholds for its context cache, by n-gram size 1..4: a favourite is proposed
 * when the n-gram was followed at least this often, by the favourite at least this share. */
static const int cache_min_seen[DRAFTER_NGRAM_MAX] = {2, 2, 1, 1};
static const int cache_min_pct[DRAFTER_NGRAM_MAX] = {66, 50, 50, 50};

static int cache_draft(drafter *d, const brisk_token *hist, int32_t n, int k_max, brisk_token *out) {
    d->hist = hist;
    int k = 0;
    while (k < k_max) {
        /* the tail of hist + out, up to NGRAM_MAX tokens */
        brisk_token q[DRAFTER_NGRAM_MAX];
        int have = n + k < DRAFTER_NGRAM_MAX ? n + k : DRAFTER_NGRAM_MAX;
        for (int i = 0; i < have; i++) {
            int32_t p = n + k - have + i;
            q[i] = p < n ? hist[p] : out[p - n];
        }
        brisk_token t = -1;
        for (int m = have; m >= 1 && t < 0; m--) {
            const ng_key *key = &d->keys[ng_find(d, q + have - m, m)];
            if (key->start < 0 || key->sum < cache_min_seen[m - 1]) continue;
            if (100 * key->best_cnt >= cache_min_pct[m - 1] * key->sum) t = key->best_tok;
        }
        if (t < 0) break;
        out[k++] = t;
    }
    return k;
}

/* ---- the interface ---- */

brisk_status drafter_replay_over(drafter *replay, drafter *inner) {
    if (replay->kind != DRAFTER_REPLAY || !inner || inner->kind == DRAFTER_REPLAY)
        return bk_fail(BRISK_ERR_INVALID_ARG, "drafter_replay_over: a replay drafter over another kind");
    replay->inner = inner;
    return BRISK_OK;
}

brisk_status drafter_begin(drafter *d, const brisk_token *hist, int32_t n) {
    switch (d->kind) {
    case DRAFTER_REPLAY: return d->inner ? drafter_begin(d->inner, hist, n) : BRISK_OK;
    case DRAFTER_MODEL: /* a server slot's drafter begins again for each request */
        BK_TRY(brisk_seq_clear(d->ctx, d->seq));
        return feed_seq(d->ctx, d->seq, hist, 0, n - 1, d->batch);
    case DRAFTER_MTP: return mtp_begin(d);
    case DRAFTER_EAGLE3: return eagle3_begin(d);
    case DRAFTER_CACHE:
        for (uint32_t i = 0; d->n_indexed && i < d->cap; i++) d->keys[i].start = -1, d->pairs[i].key = -1;
        d->n_indexed = 0;
        return cache_sync(d, hist, n);
    default: return BRISK_OK;
    }
}

brisk_status drafter_process(drafter *d, const brisk_batch_entry *batch, int n) {
    if (d->kind == DRAFTER_REPLAY) return d->inner ? drafter_process(d->inner, batch, n) : BRISK_OK;
    return d->kind == DRAFTER_MTP ? mtp_process(d, batch, 0, n)
           : d->kind == DRAFTER_EAGLE3 ? eagle3_process(d, batch, 0, n) : BRISK_OK;
}

brisk_status drafter_process_at(drafter *d, const brisk_batch_entry *batch, int first, int n) {
    if (d->kind == DRAFTER_REPLAY) return d->inner ? drafter_process_at(d->inner, batch, first, n) : BRISK_OK;
    for (int i = 0; (d->kind == DRAFTER_MTP || d->kind == DRAFTER_EAGLE3) && i < n; i += PREFILL_CHUNK) {
        int m = n - i < PREFILL_CHUNK ? n - i : PREFILL_CHUNK;
        BK_TRY(d->kind == DRAFTER_MTP ? mtp_process(d, batch, first + i, m) : eagle3_process(d, batch, first + i, m));
    }
    return BRISK_OK;
}

brisk_status drafter_begin_at(drafter *d, const brisk_token *hist, int32_t n, int32_t n_have, int32_t n_seen) {
    if (d->kind == DRAFTER_REPLAY) return d->inner ? drafter_begin_at(d->inner, hist, n, n_have, n_seen) : BRISK_OK;
    if (d->kind == DRAFTER_EAGLE3) return eagle3_begin_at(d, n_have, n_seen);
    if (d->kind != DRAFTER_MTP) return drafter_begin(d, hist, n);
    /* the pairs of the positions it saw stay; those it did not see are left blank (they only make its
     * drafts worse), as is the h before the first new position */
    int32_t keep = n_seen < n_have ? n_seen : n_have, len = brisk_seq_len(d->ctx, 0);
    if (keep < 0) keep = 0;
    if (keep > len) keep = len;
    memset(d->pending_h, 0, (size_t)d->n_embd * sizeof(float));
    d->verify_rows = 0;
    BK_TRY(keep ? brisk_seq_remove(d->ctx, 0, keep, -1) : brisk_seq_clear(d->ctx, 0));
    return n_have > keep ? brisk_seq_extend_blank(d->ctx, 0, n_have - keep) : BRISK_OK;
}

brisk_status drafter_draft(drafter *d, const brisk_token *hist, int32_t n, int k_max, brisk_token *out, int *k) {
    if (k_max > DRAFTER_MAX_DRAFT) k_max = DRAFTER_MAX_DRAFT;
    *k = 0;
    int m;
    switch (d->kind) {
    case DRAFTER_MODEL: return model_draft(d, hist, n, k_max, out, k);
    case DRAFTER_MTP: return mtp_draft(d, hist, n, k_max, out, k);
    case DRAFTER_EAGLE3: return eagle3_draft(d, hist, n, k_max, out, k);
    case DRAFTER_LOOKUP: *k = drafter_lookup_search(hist, n, d->n_min, d->n_max, k_max, out, &m); break;
    case DRAFTER_CACHE: *k = cache_draft(d, hist, n, k_max, out); break;
    case DRAFTER_REPLAY:
        if (d->inner) { /* its round's work, its proposals dropped */
            brisk_token drop[DRAFTER_MAX_DRAFT];
            BK_TRY(drafter_draft(d->inner, hist, n, k_max, drop, &m));
        }
        for (int i = 0; i < k_max; i++) {
            int32_t p = n + i;
            brisk_token t = p < d->n_ref ? d->ref[p] : 0;
            out[i] = i < d->n_match ? t : (t + 1) % d->n_vocab;
        }
        *k = k_max;
        break;
    }
    return BRISK_OK;
}

brisk_status drafter_sync(drafter *d, const brisk_token *hist, int32_t n) {
    switch (d->kind) {
    case DRAFTER_MODEL: return model_sync(d, hist, n - 1);
    case DRAFTER_MTP: return mtp_sync(d, n - 1);
    case DRAFTER_EAGLE3: return eagle3_sync(d, n - 1);
    case DRAFTER_CACHE: return cache_sync(d, hist, n);
    case DRAFTER_REPLAY: return d->inner ? drafter_sync(d->inner, hist, n) : BRISK_OK;
    default: return BRISK_OK;
    }
}
