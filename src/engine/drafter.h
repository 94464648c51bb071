/* drafter.h — who proposes the tokens that speculative decoding
 * (engine/speculative.h) verifies. One interface, five kinds:
 *
 *   model   a small draft model of the same vocabulary decodes greedily
 *           (its own context, rolled back after each round);
 *   mtp     the target's own multi-token-prediction head (Qwen3.5/3.6's
 *           nextn block, engine/mtp.h) drafts greedily from the target's
 *           hidden states: as llama.cpp's --spec-type draft-mtp, the head
 *           catches up on every batch the target decodes (its KV cache
 *           then holds (token, target h) pairs of the settled positions),
 *           and a round chains it: the last emitted token with the target's
 *           h before it, then each proposal with the head's own output h;
 *   eagle3  an EAGLE-3 drafter (model/eagle3.h) drafts greedily from the inputs of three target layers,
 *           fused by its fc into one row g per position; as llama.cpp's --spec-type draft-eagle3 its
 *           cache holds the pairs (token P+1, g_P) of the settled positions (the last one waits for its
 *           next token), and a round chains it: the last emitted token with the pending g, then each
 *           proposal with the drafter's own output h;
 *   lookup  prompt lookup (llama.cpp's ngram-simple idea): the longest suffix
 *           of the history, n_max tokens down to n_min, is searched for in the
 *           history itself, most recent occurrence first, and what followed it
 *           is proposed (copied with overlap, so a loop keeps proposing itself);
 *   cache   an n-gram cache over the sequence's own history (llama.cpp's
 *           ngram-cache "context" cache): counts of which token followed every
 *           1..4-gram; a token is proposed when the largest n-gram seen enough
 *           times has a clear favourite (llama.cpp's lax thresholds), and the
 *           draft extends one token at a time while that holds;
 *   replay  for `brisk bench --spec-replay`: given the target's own greedy
 *           continuation, proposes its next n_match tokens and then wrong ones,
 *           so every round accepts exactly n_match (a fixed acceptance rate).
 *
 * The n-gram kinds need no model and propose nothing when the history holds
 * no match, so a round without a hit is a plain one-token step.
 *
 * Protocol, with hist[0, n) the prompt and the tokens emitted so far (the
 * target has decoded all but hist[n-1]): drafter_begin once with the prompt,
 * before the target decodes it; drafter_process after each batch the target
 * decodes of the prompt and of each round (not its re-decodes after a cut);
 * then per round drafter_draft (proposals for hist[n], hist[n+1], ...) and,
 * once the round's tokens are appended, drafter_sync with the new n.
 * A drafter belongs to one sequence; the model kind borrows its context (the
 * caller frees it after the drafter; drafters may share it, one sequence each), the mtp kind borrows the target's and
 * owns its MTP context. All sizes are fixed at _new: no allocation happens
 * per round. */
#ifndef BK_DRAFTER_H
#define BK_DRAFTER_H
#include <stdbool.h>
#include <stdint.h>

#include "brisk.h"

typedef struct drafter drafter;

typedef enum drafter_kind {
    DRAFTER_MODEL,
    DRAFTER_MTP,
    DRAFTER_LOOKUP,
    DRAFTER_CACHE,
    DRAFTER_REPLAY,
    DRAFTER_EAGLE3,
} drafter_kind;

#define DRAFTER_MAX_DRAFT 64  /* proposals per round, at most */
#define DRAFTER_NGRAM_MAX 4   /* the longest n-gram either n-gram kind matches (llama.cpp's LLAMA_NGRAM_MAX) */

/* A draft model's context (n_seq_checkpoints >= 1 when the model is recurrent), borrowed; the
 * drafter decodes its sequence seq (empty), so drafters of several sequences (a server's slots)
 * can share one context, one sequence each. A round stops proposing at the first token whose
 * draft probability is below p_min (0: never). */
brisk_status drafter_new_model(brisk_context *draft, int seq, int n_vocab, float p_min, drafter **out);
/* The MTP head of target's model (model->n_mtp > 0): makes target keep its hidden states (mtp_keep_hidden) and
 * an MTP context of params' n_ctx, n_threads and kv_type (target's, borrowed: freed after the drafter). A
 * round stops proposing below p_min, as the model kind. BRISK_ERR_UNSUPPORTED where engine/mtp.h says. */
brisk_status drafter_new_mtp(brisk_context *target, brisk_model *model, const brisk_context_params *params,
                             float p_min, drafter **out);
/* The EAGLE-3 drafter at path (llama.cpp's eagle3 GGUF) for target, a context of model: makes target keep the
 * drafter's three layer inputs (eagle3_keep_layers); the drafter's cache holds n_ctx positions, its CPU
 * backend n_threads. A round stops proposing below p_min, as the model kind. BRISK_ERR_UNSUPPORTED /
 * FORMAT with a message where model/eagle3.h or engine/mtp.h says. like (or NULL): an EAGLE-3 drafter of the
 * same target whose weights, file and backend this one shares (eagle3_open_sibling; path and n_threads
 * unused): a server's slots. */
brisk_status drafter_new_eagle3(brisk_context *target, const brisk_model *model, const char *path, int n_ctx,
                                int n_threads, float p_min, const drafter *like, drafter **out);
/* Prompt lookup; 1 <= n_min <= n_max <= DRAFTER_NGRAM_MAX. */
brisk_status drafter_new_lookup(int n_min, int n_max, drafter **out);
/* N-gram cache (1..DRAFTER_NGRAM_MAX-grams) over histories of up to n_hist_max tokens. */
brisk_status drafter_new_cache(int32_t n_hist_max, drafter **out);
/* Replays ref[0, n_ref) (the prompt then the target's greedy continuation; copied): a round at
 * n proposes ref[n, n + n_match) then (ref[i] + 1) % n_vocab up to its k_max. */
brisk_status drafter_new_replay(const brisk_token *ref, int32_t n_ref, int n_match, int n_vocab, drafter **out);
/* The replay drafter also drives inner (borrowed; not a replay): begins, feeds and syncs it as
 * spec_generate would, and asks it for as many proposals each round, which it drops. A round then
 * costs what one of inner's does, at the replay's acceptance (`brisk bench --spec-mtp K:RATE`). */
brisk_status drafter_replay_over(drafter *replay, drafter *inner);
void drafter_free(drafter *d);

drafter_kind drafter_get_kind(const drafter *d);

/* With the prompt hist[0, n): every kind starts over (a drafter may serve one sequence after another,
 * as a server slot's does): the model kind clears its context and prefills hist[0, n-1), the cache
 * forgets what it indexed and indexes hist, the mtp kind starts its context over. */
brisk_status drafter_begin(drafter *d, const brisk_token *hist, int32_t n);
/* The target has just decoded batch[0, n) (sequence 0, consecutive positions; n <= DRAFTER_FEED_CHUNK), its
 * hidden states still there: the mtp kind runs its head over the batch's tokens with the target's h shifted
 * one position (the first entry pairs with the h kept from the batch before). The other kinds ignore it. */
brisk_status drafter_process(drafter *d, const brisk_batch_entry *batch, int n);
/* drafter_process for a batch of several sequences (a server's step): this drafter's entries are
 * batch[first, first + n), consecutive positions of its sequence (any length; the target's hidden
 * states and EAGLE-3 layer inputs are kept per batch entry, so row first + i is this entry's). */
brisk_status drafter_process_at(drafter *d, const brisk_batch_entry *batch, int first, int n);
/* drafter_begin where the target already holds hist[0, n_have) (a reused prefix it decodes no more),
 * of which this drafter saw hist[0, n_seen) with its last sequence (a server slot's own cache): the
 * mtp and eagle3 kinds keep what they saw of it and leave the rest blank (their drafts for such a prompt
 * are worse; the output is the same); the other kinds begin as drafter_begin. */
brisk_status drafter_begin_at(drafter *d, const brisk_token *hist, int32_t n, int32_t n_have, int32_t n_seen);
/* Proposes *k <= k_max (<= DRAFTER_MAX_DRAFT) tokens into out to follow hist[0, n); *k = 0: no proposal. */
brisk_status drafter_draft(drafter *d, const brisk_token *hist, int32_t n, int k_max, brisk_token *out, int *k);
/* drafter_draft for n_d (<= DRAFTER_FEED_CHUNK) model drafters that share one context (distinct
 * sequences) in lockstep: the same proposals, but each draft step is one brisk_decode for all of them
 * (a server's slots; the context's n_batch >= n_d). Drafter i proposes k[i] <= k_max[i] tokens into
 * out[i] to follow hist[i][0, n[i]). */
brisk_status drafter_draft_models(drafter *const *d, int n_d, const brisk_token *const *hist, const int32_t *n,
                                  const int *k_max, brisk_token *const *out, int *k);
/* The round ended with hist[0, n) emitted: the model and mtp kinds cut their caches back to n-1
 * positions (the model kind restoring its snapshot from the round's start where recurrent state
 * needs it; the mtp kind keeps the target's h of position n-2 for the next round), the cache
 * indexes the new tokens. */
brisk_status drafter_sync(drafter *d, const brisk_token *hist, int32_t n);

/* Whether two models can pair (same vocabulary size and special tokens); if not, why in msg. */
bool drafter_model_compatible(const brisk_model *target, const brisk_model *draft, char *msg, size_t cap);

/* The lookup kind's search, exposed for tests: the longest suffix of hist[0, n) of n_max..n_min
 * tokens that occurs earlier, most recent occurrence first; what followed it, copied with overlap,
 * up to k_max tokens into out. Returns the count (0: no match) and the matched length in *n_match. */
int drafter_lookup_search(const brisk_token *hist, int32_t n, int n_min, int n_max, int k_max, brisk_token *out,
                          int *n_match);

/* Decodes hist[from, to) into sequence 0 of ctx in batches of DRAFTER_FEED_CHUNK entries (batch holds
 * that many), logits for the last entry only: at index (to - 1 - from) % DRAFTER_FEED_CHUNK. The draft
 * model's catch-up and spec_generate's prompt and re-decodes. */
#define DRAFTER_FEED_CHUNK 512
brisk_status drafter_feed(brisk_context *ctx, const brisk_token *hist, int32_t from, int32_t to,
                          brisk_batch_entry *batch);
#endif
