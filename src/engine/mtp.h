/* mtp.h — the engine side of multi-token prediction (MTP, llama.cpp's
 * "nextn"): Qwen3.5/3.6 files carry a draft head after the trunk
 * (model/qwen35.c's qwen35_mtp_forward), which drafts from the trunk's own
 * final-norm hidden states. engine/drafter.c's MTP kind runs it through two
 * contexts, as llama.cpp's --spec-type draft-mtp does:
 *
 *   the target, the ordinary context of the model, made to keep the
 *     final-norm hidden state h of every entry of each batch (mtp_keep_hidden);
 *   an MTP context of the same model (mtp_context_new): one full-attention
 *     layer, the MTP block, with its own paged KV cache, whose batch entries
 *     pair a token with an h row (mtp_decode). Its logits are the draft's, and
 *     mtp_hidden gives each entry's output h for the next chained step.
 *
 * The MTP entry at position p is (token x_p, h of the target at p-1): h
 * predicted x_p, and the pair predicts x_{p+1}. The MTP context's cache holds
 * these pairs for the positions the target has settled on; it is an attention
 * cache only, so brisk_seq_remove cuts it back anywhere. The MTP context runs
 * where the trunk's last layer runs, the CPU or its GPU (model.c's bind_mtp
 * binds the block's weights there); the h rows cross through host memory, as
 * the logits do (n_embd floats an entry). */
#ifndef BK_MTP_H
#define BK_MTP_H
#include "brisk.h"

/* From now on the target keeps every batch entry's final-norm hidden state (host memory, n_batch rows).
 * BRISK_ERR_UNSUPPORTED for an architecture without an MTP head, tensor or pipeline parallelism. */
brisk_status mtp_keep_hidden(brisk_context *target);
/* Entry i's hidden state (n_embd floats) of the last brisk_decode / mtp_decode, valid until the next one;
 * NULL when the context keeps none or i is out of range. */
const float *mtp_hidden(const brisk_context *c, int i);
/* A context that runs the model's first MTP block (params as brisk_context_new's: n_ctx, n_batch, n_threads,
 * kv_type; no checkpoints). BRISK_ERR_UNSUPPORTED when the model has none bound. Free with
 * brisk_context_free (before the model). */
brisk_status mtp_context_new(brisk_model *model, const brisk_context_params *params, brisk_context **out);
/* brisk_decode for an MTP context: entry i pairs e[i].token with h[i * n_embd ...] (host memory). Logits
 * through brisk_get_logits, the output h through mtp_hidden. */
brisk_status mtp_decode(brisk_context *mtp, const brisk_batch_entry *e, const float *h, int n);

/* EAGLE-3 (model/eagle3.h) drafts from the inputs of n (<= 3) layers of the target: from now on the target keeps
 * every batch entry's rows of those layers, side by side (host memory, n_batch rows of n * n_embd floats).
 * BRISK_ERR_UNSUPPORTED split over stages (a partial offload) or under tensor or pipeline parallelism; asked
 * again, the same layers are
 * kept (BRISK_ERR_INVALID_ARG for others). */
brisk_status eagle3_keep_layers(brisk_context *target, const int32_t *layers, int n);
/* Entry i's kept rows (n * n_embd floats, eagle3_keep_layers' order) of the last brisk_decode, valid until the
 * next one; NULL when the context keeps none or i is out of range. */
const float *eagle3_features(const brisk_context *c, int i);
#endif
