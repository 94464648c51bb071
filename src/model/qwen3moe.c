/* qwen3moe.c — the Qwen3-MoE decoder (Qwen3-30B-A3B, Qwen3-235B-A22B):
 * qwen3's attention block, and in every layer a routed mixture of SwiGLU
 * experts in place of the dense FFN:
 *
 *   x = embed(tokens)
 *   for each layer:
 *     x += attention block                         (as qwen3, model/llama.c)
 *     h = rmsnorm(x) * ffn_norm
 *     p = softmax(Wr h)                            (n_expert router probabilities, fp32)
 *     E = the n_expert_used largest p; w_e = p_e / sum_E p   (renormalised)
 *     x += sum_{e in E} w_e * Wdown_e (silu(Wgate_e h) * Wup_e h)
 *   logits = Wout (rmsnorm(x) * output_norm)
 *
 * As llama.cpp's qwen3moe graph: renormalisation always on, no weight scale,
 * no shared expert.
 *
 * Tensor parallelism (engine/shard.h) places the experts by expert: attention
 * is split by heads as qwen3's; the router and norms are replicated, so every
 * rank routes over all n_expert experts and gets the same E and w_e; a rank
 * holds experts [e0, e1) and sums only the chosen ones among them (the other
 * slots' ids become -1: moe_ids_local); the all-reduce of these partial sums
 * over the ranks gives the layer's sum before the residual add.
 */
#include <string.h>

#include "base/status.h"
#include "model/arch.h"

void moe_count_experts(const brisk_model *m, bk_backend *be, const fwd_batch *b, fwd_scratch *s, int l) {
    if (!s->expert_counts) return;
    int k = m->hp.n_expert_used, ne = m->hp.n_expert;
    if (be->ops->read(be, s->moe_ids, s->ids_host, (size_t)b->n * k * sizeof(int32_t)) != BRISK_OK) return;
    memset(s->expert_seen, 0, (size_t)ne);
    int64_t distinct = 0;
    for (int i = 0; i < b->n * k; i++) {
        int e = s->ids_host[i];
        if (e < 0 || e >= ne) continue;
        s->expert_counts[(size_t)l * ne + e]++;
        distinct += !s->expert_seen[e];
        s->expert_seen[e] = 1;
    }
    s->expert_reads[0] += distinct;
    s->expert_reads[1]++;
}

brisk_status moe_experts(const brisk_model *m, bk_backend *be, const fwd_batch *b, fwd_scratch *s, int l) {
    const layer_weights *L = &m->layers[l];
    int k = m->hp.n_expert_used;
    if (L->exps_host) /* --n-cpu-moe: the experts stay in host memory; the CPU runs them, or a GPU cache with
                       * its misses on the CPU or read by the GPU from mapped host memory (offload.c) */
        return moe_offload_ffn(s->moe_offload, be, l, &L->gate_exps, &L->up_exps, &L->down_exps, s->xb, b->n,
                               s->moe_ids, s->moe_w, k, s->moe_out);
    be->ops->moe_ffn(be, &L->gate_exps, &L->up_exps, &L->down_exps, s->xb, b->n, s->moe_ids, s->moe_w, k,
                     s->moe_out);
    return BRISK_OK;
}

bool moe_residual(const brisk_model *m, bk_backend *be, const fwd_batch *b, fwd_scratch *s, int l, bool shared) {
    const layer_weights *L = &m->layers[l];
    if (m->tp_size != 0 || !be->ops->moe_ffn_shared) return false;
    const bk_weight *gate = &L->gate_exps, *up = &L->up_exps, *down = &L->down_exps;
    if (L->exps_host) { /* the hot-expert cache's tables, when this batch reads its misses in place */
        const bk_weight *t = moe_offload_tables(s->moe_offload, l, b->n);
        if (!t) return false;
        gate = &t[0], up = &t[1], down = &t[2];
        moe_offload_count_arm(s->moe_offload, be, l, b->n, true); /* the op may count the routing */
    }
    int k = m->hp.n_expert_used;
    bool done = be->ops->moe_ffn_shared(be, gate, up, down, shared ? &L->gate_shexp : NULL,
                                        shared ? &L->up_shexp : NULL, shared ? &L->down_shexp : NULL, s->xb, b->n,
                                        s->moe_ids, s->moe_w, k, shared ? s->sh_gate : NULL, s->x);
    if (L->exps_host && done) moe_offload_count(s->moe_offload, be, l, s->moe_ids, b->n, k);
    else if (L->exps_host) moe_offload_count_arm(s->moe_offload, be, l, b->n, false);
    return done;
}

brisk_status qwen3moe_forward(const brisk_model *m, bk_backend *be, const bk_kv_view *kv,
                              const fwd_batch *b, fwd_scratch *s, int l0, int l1) {
    const model_hparams *hp = &m->hp;
    const bk_backend_ops *op = be->ops;
    int n = b->n, d = hp->n_embd, k = hp->n_expert_used;
    /* expert parallelism: this rank holds experts [e0, e1) of the router's n_expert (a world of one: all) */
    bool ep = m->tp_size > 1;
    int e0 = m->tp_expert0, e1 = m->tp_expert0 + m->tp_n_expert_local;
    if (!op->moe_route || !op->moe_ffn || (ep && !op->moe_ids_local))
        return bk_fail(BRISK_ERR_UNSUPPORTED, "the %s backend has no MoE ops", op->name);

    if (l0 == 0) op->get_rows(be, &m->tok_embd, b->tokens, n, s->x);
    for (int l = l0; l < l1; l++) {
        const layer_weights *L = &m->layers[l];
        fwd_tap(be, s, l, n, d);
        decoder_attention(m, be, kv, b, s, l);

        op->rms_norm(be, s->x, &L->ffn_norm, s->xb, n, d, hp->rms_eps);
        bk_moe_router(be, &L->ffn_gate_inp, s->xb, n, k, true, 0.0f, s->moe_logits, s->moe_ids, s->moe_w, NULL, NULL);
        moe_count_experts(m, be, b, s, l);
        /* the combine closes the residual (and may hand the next layer's norm its input) */
        if (moe_residual(m, be, b, s, l, false)) continue;
        if (ep) op->moe_ids_local(be, s->moe_ids, n * k, e0, e1);
        BK_TRY(moe_experts(m, be, b, s, l));
        if (m->tp_size > 0 && op->all_reduce) op->all_reduce(be, s->moe_out, (size_t)n * d);
        op->add(be, s->x, s->moe_out, (size_t)n * d);
    }
    if (l1 == hp->n_layer && b->n_out) decoder_logits(m, be, b, s);
    return BRISK_OK;
}
