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

brisk_status moe_ffn_residual(const brisk_model *m, bk_backend *be, const fwd_batch *b, fwd_scratch *s, int l,
                              bool shared) {
    const layer_weights *L = &m->layers[l];
    if (L->exps_host && !s->moe_offload) /* (the context makes one for every stage with such layers) */
        return bk_fail(BRISK_ERR_BACKEND, "layer %d keeps its experts in host memory, but the context has no CPU "
                       "backend for them", l);
    const bk_moe_layer ml = {&L->gate_exps, &L->up_exps, &L->down_exps,
                             shared ? &L->gate_shexp : NULL, shared ? &L->up_shexp : NULL,
                             shared ? &L->down_shexp : NULL, L->exps_host ? s->moe_offload : NULL, l};
    const bk_moe_io io = {.h = s->xb, .n = b->n, .k = m->hp.n_expert_used, .n_embd = m->hp.n_embd,
                          .ids = s->moe_ids, .w = s->moe_w, .sh_logit = s->sh_gate, .x = s->x, .out = s->moe_out,
                          .sh = s->sh, .ff_tmp = s->hb2, .ff = s->hb, .tp = m->tp_size, .e0 = m->tp_expert0,
                          .e1 = m->tp_expert0 + m->tp_n_expert_local};
    return bk_moe_ffn(be, &ml, &io);
}

brisk_status qwen3moe_forward(const brisk_model *m, bk_backend *be, const bk_kv_view *kv,
                              const fwd_batch *b, fwd_scratch *s, int l0, int l1) {
    const model_hparams *hp = &m->hp;
    const bk_backend_ops *op = be->ops;
    int n = b->n, d = hp->n_embd, k = hp->n_expert_used;
    /* expert parallelism: a rank holds a slice of the router's n_expert experts (a world of one: all) */
    if (!op->moe_route || !op->moe_ffn || (m->tp_size > 1 && !op->moe_ids_local))
        return bk_fail(BRISK_ERR_UNSUPPORTED, "the %s backend has no MoE ops", op->name);

    if (l0 == 0) op->get_rows(be, &m->tok_embd, b->tokens, n, s->x);
    for (int l = l0; l < l1; l++) {
        const layer_weights *L = &m->layers[l];
        fwd_tap(be, s, l, n, d);
        decoder_attention(m, be, kv, b, s, l);

        op->rms_norm(be, s->x, &L->ffn_norm, s->xb, n, d, hp->rms_eps);
        bk_moe_router(be, &L->ffn_gate_inp, s->xb, n, k, true, 0.0f, s->moe_logits, s->moe_ids, s->moe_w, NULL, NULL);
        moe_count_experts(m, be, b, s, l);
        BK_TRY(moe_ffn_residual(m, be, b, s, l, false));
    }
    if (l1 == hp->n_layer && b->n_out) decoder_logits(m, be, b, s);
    return BRISK_OK;
}
