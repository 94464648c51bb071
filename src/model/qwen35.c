/* qwen35.c — the Qwen3.5/3.6 and Qwen3-Next hybrid decoder (llama.cpp: qwen35,
 * qwen35moe, qwen3next): Gated DeltaNet layers with a recurrent state, and every
 * full_attn_interval-th layer gated full attention.
 *
 *   x = embed(tokens)
 *   for each layer:
 *     h = rmsnorm(x) * attn_norm
 *     if Gated DeltaNet:                       (state per sequence: conv inputs, S per value head)
 *       u = silu(causal_conv1d(Wqkv h))         q|k|v heads, conv carried across steps
 *       beta = sigmoid(Wbeta h), g = ssm_a * softplus(Walpha h + dt_bias)
 *       S = exp(g) S + beta (v - S k) k^T       q, k L2-normed; v-head i reads k-head
 *                                             i mod n_k (qwen35*) or i / (n_v / n_k) (qwen3next)
 *       o = S q / sqrt(d)
 *       x += Wout (rmsnorm(o) * ssm_norm * silu(Wz h))
 *     else (gated attention):
 *       q|gate = Wq h (per head: hd query rows, then hd gate rows); k, v = Wk h, Wv h
 *       q, k = rmsnorm_head(q) * q_norm, rmsnorm_head(k) * k_norm
 *       q, k = rope(q, k; first n_rot dims, NEOX)   (M-RoPE with equal text positions)
 *       x += Wo (attention(q, k, v) * sigmoid(gate))
 *     h = rmsnorm(x) * post_attention_norm
 *     x += Wdown (silu(Wgate h) * Wup h)                               (qwen35)
 *     x += moe(h) + sigmoid(w_sh . h) * shared_expert(h)               (qwen35moe, qwen3next)
 *   logits = Wout (rmsnorm(x) * output_norm)
 *
 * In the files every norm weight already carries HF's (1 + w) offset.
 *
 * Multi-token prediction (qwen35_mtp_forward; llama.cpp's graph_mtp): the
 * files may carry nextn_predict_layers MTP blocks after the trunk, a draft
 * model built in. Block N takes the trunk's final-norm hidden state h of
 * position p-1 and the token x at p (the token that h predicted) and gives
 * draft logits for position p+1:
 *
 *   x = eh_proj [rmsnorm(embed(x)) * enorm ; rmsnorm(h) * hnorm]   (embedding first)
 *   x += gated attention (a full-attention layer, its own KV cache); x += FFN (the trunk's kind)
 *   h' = rmsnorm(x) * shared_head_norm (absent: output_norm)
 *   logits = shared_head_head h' (absent: the trunk's LM head)
 *
 * Chained, h' and the drafted token are the next step's inputs (engine/drafter.c).
 *
 * Tensor parallelism (engine/shard.h; the two all-reduces of a layer as in
 * llama.c): a gated attention layer is split by whole heads as qwen3's (a
 * head's gate rows travel with its query rows; Wo by columns). A Gated
 * DeltaNet layer is split by whole key heads with the value heads that read
 * them: in the files' tiled order those are n_v / n_k runs of heads, n_k
 * apart, gathered into a packed copy (shard_gather) of Wqkv's q, k and v rows
 * and conv channels, Wz, Wbeta, Walpha rows, dt_bias and ssm_a, and Wout's
 * columns, so a rank runs the recurrence for its own value heads and its
 * state holds only theirs; Wout's partial products are all-reduced. The
 * dense FFN splits as qwen3's. qwen35moe places the routed experts by expert
 * as qwen3moe.c does and splits the shared expert's width; its gate (one
 * logit a token) is replicated, so each rank's routed partial sum plus its
 * gated shared partial is summed by one all-reduce: sum_r (m_r + sigmoid(g)
 * s_r) = m + sigmoid(g) s. */
#include <math.h>

#include "base/status.h"
#include "model/arch.h"

static void gated_attention(const brisk_model *m, bk_backend *be, const bk_kv_view *kv, const fwd_batch *b,
                            fwd_scratch *s, int l) {
    const model_hparams *hp = &m->hp;
    const layer_weights *L = &m->layers[l];
    int n = b->n, hd = hp->head_dim, nh = hp->n_head;

    const bk_weight *w[3] = {&L->wq, &L->wk, &L->wv};
    float *out[3] = {s->qg, s->k, s->v};
    bk_norm_matmul(be, s->x, &L->attn_norm, hp->rms_eps, s->xb, n, 3, w, NULL, out);
    /* each head's query rows out of the query|gate rows: (n * nh) rows of hd, 2 * hd apart; the output
     * gate read in place: head rows of hd whose gate rows lie 2 * hd apart in qg */
    const bk_attn_rope_in in = {.q_src = s->qg, .q_pitch = 2 * hd, .q = s->q, .k = s->k, .v = s->v,
                                .q_norm = &L->q_norm, .k_norm = &L->k_norm, .eps = hp->rms_eps, .rope = &hp->rope,
                                .gate = s->qg + hd, .gate_pitch = 2 * hd};
    bk_attention_rope(be, &in, &kv[l], &b->ab, nh, hp->n_head_kv, hd, 1.0f / sqrtf((float)hd), s->att);
    residual_matmul(m, be, &L->wo, s->att, n, s->xb, s->x);
}

static void gated_deltanet(const brisk_model *m, bk_backend *be, const bk_kv_view *kv, const fwd_batch *b,
                           fwd_scratch *s, int l) {
    const model_hparams *hp = &m->hp;
    const layer_weights *L = &m->layers[l];
    int n = b->n, ds = hp->ssm_d_state, nk = hp->ssm_n_k_heads, nv = hp->ssm_n_v_heads;

    const bk_weight *w[4] = {&L->ssm_qkv, &L->ssm_z, &L->ssm_beta, &L->ssm_alpha};
    float *out[4] = {s->qg, s->gz, s->dn_beta, s->dn_alpha};
    bk_norm_matmul(be, s->x, &L->attn_norm, hp->rms_eps, s->xb, n, 4, w, NULL, out);
    if (kv[l].rec_in && n <= BK_REC_KEEP) { /* kept: a rollback replays the state through them */
        size_t cd = (size_t)(2 * nk + nv) * ds, f = sizeof(float);
        be->ops->copy(be, kv[l].rec_in, s->qg, (size_t)n * cd * f);
        be->ops->copy(be, kv[l].rec_in + BK_REC_KEEP * cd, s->dn_beta, (size_t)n * nv * f);
        be->ops->copy(be, kv[l].rec_in + BK_REC_KEEP * (cd + nv), s->dn_alpha, (size_t)n * nv * f);
    }
    /* the short conv, the rule, then silu(z) * norm(o) head by head */
    bk_gated_delta_gate(be, s->qg, &L->ssm_conv1d, kv[l].conv, hp->ssm_d_conv, s->conv, s->dn_beta, s->dn_alpha,
                        &L->ssm_dt_bias, &L->ssm_a, kv[l].ssm, b->ab.seq, n, nk, nv, hp->ssm_v_grouped, ds, hp->rms_eps,
                        &L->ssm_norm, hp->rms_eps, s->gz, s->att);
    residual_matmul(m, be, &L->ssm_out, s->att, n, s->xb, s->x);
}

/* x += the FFN of layer l on h = s->xb = rms_norm(x): dense SwiGLU, or routed experts plus
 * the gated shared expert (summed before the residual, as llama.cpp does). l1: the end of the
 * layers this pass runs (the dense down product's next norm is layer l + 1's, when it runs). */
static brisk_status ffn(const brisk_model *m, bk_backend *be, const fwd_batch *b, fwd_scratch *s, int l, int l1) {
    const model_hparams *hp = &m->hp;
    const bk_backend_ops *op = be->ops;
    const layer_weights *L = &m->layers[l];
    int n = b->n, d = hp->n_embd;
    if (!hp->n_expert) { /* tmp: h (s->xb), spent; s->att may be narrower than n_embd on a rank */
        bk_norm_swiglu(be, s->x, &L->ffn_norm, hp->rms_eps, s->xb, n, &L->w_gate, &L->w_up, s->hb2, s->hb);
        residual_matmul(m, be, &L->w_down, s->hb, n, s->xb, s->x);
        return BRISK_OK;
    }
    op->rms_norm(be, s->x, &L->ffn_norm, s->xb, n, d, hp->rms_eps);
    /* Every product of h first (router, shared expert's gate, its gate and up with their SwiGLU),
     * then the routed experts: a GPU quantizes h once for all of them (cuda_matmul.cu's tag), the
     * experts included. */
    bk_moe_router(be, &L->ffn_gate_inp, s->xb, n, hp->n_expert_used, true, 0.0f, s->moe_logits, s->moe_ids,
                  s->moe_w, &L->gate_inp_shexp, s->sh_gate);
    moe_count_experts(m, be, b, s, l);
    /* the shared expert as one more of the routed where the backend fuses them (the next layer's norm
     * may take its input from it) */
    return moe_ffn_residual(m, be, b, s, l, true);
}

brisk_status qwen35_forward(const brisk_model *m, bk_backend *be, const bk_kv_view *kv, const fwd_batch *b,
                            fwd_scratch *s, int l0, int l1) {
    const model_hparams *hp = &m->hp;
    const bk_backend_ops *op = be->ops;
    int n = b->n;
    if (!op->ssm_conv || !op->gated_delta || !op->sigmoid_mul || (hp->n_expert && (!op->moe_route || !op->moe_ffn)) ||
        (hp->n_expert && m->tp_size > 1 && !op->moe_ids_local))
        return bk_fail(BRISK_ERR_UNSUPPORTED, "the %s backend lacks the ops of %s", op->name, m->arch_name);

    if (l0 == 0) op->get_rows(be, &m->tok_embd, b->tokens, n, s->x);
    for (int l = l0; l < l1; l++) {
        fwd_tap(be, s, l, n, hp->n_embd);
        if (model_layer_recurrent(hp, l)) gated_deltanet(m, be, kv, b, s, l);
        else gated_attention(m, be, kv, b, s, l);
        BK_TRY(ffn(m, be, b, s, l, l1));
    }
    /* a target that feeds an MTP head keeps every entry's final-norm h (llama.cpp's h_nextn) */
    if (l1 == hp->n_layer && s->hidden) op->rms_norm(be, s->x, &m->output_norm, s->hidden, n, hp->n_embd, hp->rms_eps);
    if (l1 == hp->n_layer && b->n_out) decoder_logits(m, be, b, s);
    return BRISK_OK;
}

brisk_status qwen35_rec_replay(const brisk_model *m, bk_backend *be, const bk_kv_view *kv, fwd_scratch *s, int l0,
                               int l1, int seq, int row0, int n) {
    const model_hparams *hp = &m->hp;
    const bk_backend_ops *op = be->ops;
    int ds = hp->ssm_d_state, nk = hp->ssm_n_k_heads, nv = hp->ssm_n_v_heads, cd = (2 * nk + nv) * ds;
    if (n < 1 || row0 < 0 || row0 + n > BK_REC_KEEP)
        return bk_fail(BRISK_ERR_INVALID_ARG, "recurrent replay of rows [%d, %d)", row0, row0 + n);
    int32_t seqs[BK_REC_KEEP];
    for (int i = 0; i < n; i++) seqs[i] = seq;
    for (int l = l0; l < l1; l++) {
        if (!model_layer_recurrent(hp, l)) continue;
        if (!kv[l].rec_in) return bk_fail(BRISK_ERR_INVALID_ARG, "recurrent replay: layer %d kept no inputs", l);
        const layer_weights *L = &m->layers[l];
        const float *x = kv[l].rec_in + (size_t)row0 * cd;
        const float *beta = kv[l].rec_in + (size_t)BK_REC_KEEP * cd + (size_t)row0 * nv;
        const float *alpha = beta + (size_t)BK_REC_KEEP * nv;
        /* the forward's ops on those rows (bk_gated_delta_gate's parts): the conv's and the rule's state
         * move as the pass moved them; their outputs are scratch */
        op->ssm_conv(be, x, &L->ssm_conv1d, kv[l].conv, seqs, n, cd, hp->ssm_d_conv, s->conv);
        op->gated_delta(be, s->conv, beta, alpha, &L->ssm_dt_bias, &L->ssm_a, kv[l].ssm, seqs, n, nk, nv,
                        hp->ssm_v_grouped, ds, hp->rms_eps, s->att);
    }
    return BRISK_OK;
}

brisk_status qwen35_mtp_forward(const brisk_model *m, bk_backend *be, const bk_kv_view *kv, const fwd_batch *b,
                                fwd_scratch *s, int l0, int l1) {
    const model_hparams *hp = &m->hp;
    const bk_backend_ops *op = be->ops;
    const model_nextn *nx = &m->nextn[l0 - hp->n_layer];
    int n = b->n, d = hp->n_embd;
    size_t row = (size_t)d * sizeof(float);
    if (!op->sigmoid_mul || (hp->n_expert && (!op->moe_route || !op->moe_ffn)))
        return bk_fail(BRISK_ERR_UNSUPPORTED, "the %s backend lacks the ops of %s", op->name, m->arch_name);

    /* the two normed halves side by side: eh_proj's input columns [embedding ; h] */
    op->get_rows(be, nx->embed_tokens.host ? &nx->embed_tokens : &m->tok_embd, b->tokens, n, s->xb);
    op->rms_norm(be, s->xb, &nx->enorm, s->xb, n, d, hp->rms_eps);
    op->rms_norm(be, s->mtp_h, &nx->hnorm, s->mtp_h, n, d, hp->rms_eps);
    bk_copy_rows(be, s->mtp_eh, 2 * row, s->xb, row, row, (size_t)n);
    bk_copy_rows(be, s->mtp_eh + d, 2 * row, s->mtp_h, row, row, (size_t)n);
    const bk_weight *eh = &nx->eh_proj;
    op->matmul(be, 1, &eh, NULL, s->mtp_eh, n, &s->x);

    gated_attention(m, be, kv, b, s, l0);
    BK_TRY(ffn(m, be, b, s, l0, l1));

    const bk_weight *norm = nx->shared_head_norm.host ? &nx->shared_head_norm : &m->output_norm;
    op->rms_norm(be, s->x, norm, s->hidden, n, d, hp->rms_eps);
    if (!b->n_out) return BRISK_OK;
    for (int i = 0; i < b->n_out; i++)
        op->copy(be, s->out + (size_t)i * d, s->hidden + (size_t)b->out_idx[i] * d, row);
    const bk_weight *head = nx->shared_head_head.host ? &nx->shared_head_head : &m->output;
    op->matmul(be, 1, &head, NULL, s->out, b->n_out, &s->logits);
    return BRISK_OK;
}
