/* speculative.h — speculative decoding: a small draft model proposes up to
 * n_draft tokens greedily, the target checks them all in one batch, and the
 * target's own sampler decides every emitted token.
 *
 * Each emitted token is sampled once, from the target's logits after exactly
 * the tokens emitted before it, with the sampler's usual accept history; a
 * draft token only saves the target a decode step when the sample equals it.
 * So the output is the target's own (the same tokens as plain decoding with
 * the same seed, up to batch-vs-single rounding in the target's kernels),
 * whatever the sampler settings; only the speed depends on the draft.
 *
 * Both contexts decode sequence 0 and must be empty. Rejected positions are
 * cut from the caches; for models with recurrent state (qwen35) the contexts
 * need n_seq_checkpoints >= 1: the state is snapshotted before a round and a
 * partly accepted round is re-decoded from the snapshot. */
#ifndef BK_SPECULATIVE_H
#define BK_SPECULATIVE_H
#include <stdbool.h>
#include <stdint.h>

#include "brisk.h"

typedef struct spec_stats {
    int64_t rounds;   /* target batches after the prompt */
    int64_t drafted;  /* draft tokens proposed */
    int64_t accepted; /* draft tokens the target's samples matched */
    int64_t emitted;  /* tokens emitted */
} spec_stats;

/* Called for each sampled token before it is accepted; return false to stop
 * (end of generation, a token limit): that token is then not accepted. */
typedef bool (*spec_emit_fn)(void *user, brisk_token tok);

/* Decodes the prompt in both contexts, then generates until emit returns
 * false or the context (ctx_size positions) is full. A round proposes up to
 * n_draft tokens and stops at the first whose draft probability is below
 * p_min (0: always n_draft). */
brisk_status spec_generate(brisk_context *target, brisk_context *draft, int n_vocab, brisk_sampler *smp,
                           const brisk_token *prompt, int64_t n_prompt, int n_draft, float p_min,
                           int32_t ctx_size, spec_emit_fn emit, void *user, spec_stats *stats);

/* Whether two models can pair (same vocabulary size and special tokens); if not, why in msg. */
bool spec_compatible(const brisk_model *target, const brisk_model *draft, char *msg, size_t cap);

#endif
