/* speculative.h — speculative decoding: a drafter (engine/drafter.h: a small
 * draft model, the target's own MTP head, prompt lookup, an n-gram cache of
 * the sequence's own history) proposes up to n_draft tokens, the target checks
 * them all in one batch, and the target's own sampler decides every emitted
 * token. Each batch the target decodes of the prompt and of a round is shown
 * to the drafter (drafter_process: the MTP head catches up on it).
 *
 * Each emitted token is sampled once, from the target's logits after exactly
 * the tokens emitted before it, with the sampler's usual accept history; a
 * draft token only saves the target a decode step when the sample equals it.
 * So the output is the target's own (the same tokens as plain decoding with
 * the same seed, up to batch-vs-single rounding in the target's kernels),
 * whatever the sampler settings; only the speed depends on the drafter. A
 * round whose drafter proposes nothing (or fewer than n_draft_min tokens) is
 * a plain one-token step, without a checkpoint.
 *
 * The target decodes sequence 0 and must be empty. Rejected positions are
 * cut from its cache; for models with recurrent state (qwen35) the context
 * needs n_seq_checkpoints >= 1: the state is snapshotted before a round with
 * proposals and a partly accepted round is re-decoded from the snapshot. */
#ifndef BK_SPECULATIVE_H
#define BK_SPECULATIVE_H
#include <stdbool.h>
#include <stdint.h>

#include "brisk.h"
#include "engine/drafter.h"

typedef struct spec_stats {
    int64_t rounds;        /* target batches after the prompt */
    int64_t draft_rounds;  /* of them, rounds that verified proposals */
    int64_t drafted;       /* draft tokens proposed (and verified) */
    int64_t accepted;      /* draft tokens the target's samples matched */
    int64_t emitted;       /* tokens emitted */
} spec_stats;

/* Called for each sampled token before it is accepted; return false to stop
 * (end of generation, a token limit): that token is then not accepted. */
typedef bool (*spec_emit_fn)(void *user, brisk_token tok);

/* Decodes the prompt in the target (the drafter begins on it), then generates
 * until emit returns false or the context (ctx_size positions) is full. A
 * round verifies up to n_draft proposals (at most DRAFTER_MAX_DRAFT), none
 * when the drafter offers fewer than n_draft_min. */
brisk_status spec_generate(brisk_context *target, drafter *dr, brisk_sampler *smp, const brisk_token *prompt,
                           int64_t n_prompt, int n_draft, int n_draft_min, int32_t ctx_size, spec_emit_fn emit,
                           void *user, spec_stats *stats);

#endif
