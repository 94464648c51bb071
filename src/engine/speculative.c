/* speculative.c — draft-and-verify decoding (see speculative.h). */
#include "engine/speculative.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"

#define PREFILL_CHUNK DRAFTER_FEED_CHUNK
#define TRY(expr)                              \
    do {                                       \
        if ((s = (expr)) != BRISK_OK) goto out; \
    } while (0)

/* Cuts seq 0 of ctx back to `keep` positions (hist holds the tokens). Where
 * recurrent state allows no direct cut, restores the snapshot at `snap`
 * (taken before the round) and re-decodes hist[snap, keep). */
static brisk_status cut_to(brisk_context *ctx, const brisk_token *hist, int32_t keep, int32_t snap,
                           brisk_batch_entry *batch) {
    int32_t len = brisk_seq_len(ctx, 0);
    if (len <= keep) return BRISK_OK;
    if (brisk_seq_keepable(ctx, 0, keep) == keep) return brisk_seq_remove(ctx, 0, keep, -1);
    if (brisk_seq_keepable(ctx, 0, snap) != snap)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "speculative: cannot roll back a recurrent state (no checkpoint)");
    BK_TRY(brisk_seq_remove(ctx, 0, snap, -1));
    return drafter_feed(ctx, hist, snap, keep, batch);
}

brisk_status spec_generate(brisk_context *target, drafter *dr, brisk_sampler *smp, const brisk_token *prompt,
                           int64_t n_prompt, int n_draft, int n_draft_min, int32_t ctx_size, spec_emit_fn emit,
                           void *user, spec_stats *stats) {
    memset(stats, 0, sizeof *stats);
    if (n_prompt <= 0 || n_prompt >= ctx_size) return bk_fail(BRISK_ERR_INVALID_ARG, "speculative: bad prompt length");
    if (n_draft < 0) n_draft = 0;
    if (n_draft > DRAFTER_MAX_DRAFT) n_draft = DRAFTER_MAX_DRAFT;
    brisk_token *hist = malloc((size_t)ctx_size * sizeof *hist);
    brisk_batch_entry *batch = malloc(PREFILL_CHUNK * sizeof *batch);
    if (!hist || !batch) {
        free(hist);
        free(batch);
        return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    memcpy(hist, prompt, (size_t)n_prompt * sizeof *hist);
    for (int64_t i = 0; i < n_prompt; i++) brisk_sampler_accept(smp, prompt[i]); /* as plain decoding does */
    brisk_status s = drafter_begin(dr, hist, (int32_t)n_prompt);
    for (int32_t i = 0; s == BRISK_OK && i < n_prompt; i += PREFILL_CHUNK) { /* the drafter sees each chunk */
        int32_t end = n_prompt - i < PREFILL_CHUNK ? (int32_t)n_prompt : i + PREFILL_CHUNK;
        s = drafter_feed(target, hist, i, end, batch);
        if (s == BRISK_OK) s = drafter_process(dr, batch, end - i);
    }
    int32_t n = (int32_t)n_prompt; /* tokens in hist */
    const float *logits = s == BRISK_OK ? brisk_get_logits(target, ((int)n_prompt - 1) % PREFILL_CHUNK) : NULL;
    brisk_token t = logits ? brisk_sampler_sample(smp, logits) : 0;
    if (s != BRISK_OK || !emit(user, t)) goto out;
    brisk_sampler_accept(smp, t);
    hist[n++] = t;
    stats->emitted = 1;
    brisk_token d[DRAFTER_MAX_DRAFT];
    /* Invariant: hist[n-1] is the newest emitted token, not in the target's cache. */
    while (n < ctx_size) {
        int32_t pos = n - 1;
        int k = n_draft;
        if (k > ctx_size - 1 - n) k = ctx_size - 1 - n; /* the target decodes positions pos .. pos+k */
        if (k < 0) k = 0;
        /* 1. proposals for hist[n], hist[n+1], ... */
        TRY(drafter_draft(dr, hist, n, k, d, &k));
        if (k < n_draft_min) k = 0;
        /* 2. the target scores hist[n-1] and the k proposals in one batch; only a round that may
         * be cut back needs a snapshot of recurrent state */
        if (k > 0) TRY(brisk_seq_checkpoint(target, 0));
        batch[0] = (brisk_batch_entry){hist[n - 1], pos, 0, true};
        for (int i = 0; i < k; i++) batch[i + 1] = (brisk_batch_entry){d[i], pos + 1 + i, 0, true};
        TRY(brisk_decode(target, batch, k + 1));
        TRY(drafter_process(dr, batch, k + 1));
        stats->rounds++;
        stats->draft_rounds += k > 0;
        stats->drafted += k;
        /* 3. sample as plain decoding would; a draft token is kept while the samples match it */
        int m = 0;
        bool stop = false;
        for (int i = 0; i <= k; i++) {
            brisk_token x = brisk_sampler_sample(smp, brisk_get_logits(target, i));
            if (!emit(user, x)) {
                stop = true;
                break;
            }
            brisk_sampler_accept(smp, x);
            hist[n++] = x;
            m++;
            stats->emitted++;
            if (i == k || x != d[i] || n >= ctx_size) break;
            stats->accepted++;
        }
        if (stop || n >= ctx_size) break;
        /* 4. the caches keep hist[0, pos + m): the round's last sample is the next round's input */
        TRY(cut_to(target, hist, pos + m, pos, batch));
        TRY(drafter_sync(dr, hist, n));
    }
out:
    free(hist);
    free(batch);
    return s;
}
