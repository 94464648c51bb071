/* llama.c — the decoder of llama, qwen2 and qwen3 (one block structure):
 *
 *   x = embed(tokens)
 *   for each layer:
 *     h = rmsnorm(x) * attn_norm
 *     q, k, v = Wq h (+bq), Wk h (+bk), Wv h (+bv)
 *     q, k = rmsnorm_head(q) * q_norm, rmsnorm_head(k) * k_norm      (qwen3)
 *     q, k = rope(q, pos), rope(k, pos)                   (NORM: llama, NEOX: qwen)
 *     x += Wo attention(q, k, v; paged cache, causal, GQA)
 *     h = rmsnorm(x) * ffn_norm
 *     x += Wdown (silu(Wgate h) * Wup h)
 *   logits = Wout (rmsnorm(x) * output_norm)     for the entries that want them
 *
 * The attention block and the LM head are shared with the MoE decoder
 * (model/qwen3moe.c), which replaces only the FFN.
 *
 * Tensor parallelism (brisk_model_params.tp_size, engine/tp.h): each rank
 * holds whole heads of q/k/v and its slice of the FFN width, so everything up
 * to the two branch-closing products runs on its shard alone; Wo and Wdown
 * hold the matching input columns and give partial products, which are
 * summed over the ranks (the backend's all_reduce) before the residual add.
 * Norms, embedding and LM head are replicated: every rank computes the same
 * logits (only rank 0 samples them).
 */
#include <math.h>
#include <string.h>

#include "model/arch.h"

/* y += x W^T for a weight that closes a residual branch (attention output, FFN down). Sharded
 * (m->tp_size > 0), W holds this rank's input columns: the partial product goes to tmp, is
 * summed over the ranks (all_reduce) and then added, so the residual y stays the same on every
 * rank. Otherwise the product is added in one fused op. */
void residual_matmul(const brisk_model *m, bk_backend *be, const bk_weight *w, const float *x, int n, float *tmp,
                     float *y) {
    if (m->tp_size > 0 && be->ops->all_reduce) {
        size_t len = (size_t)n * (size_t)w->n_out;
        be->ops->matmul(be, 1, &w, NULL, x, n, &tmp);
        be->ops->all_reduce(be, tmp, len);
        be->ops->add(be, y, tmp, len);
        return;
    }
    bk_matmul_add(be, w, x, n, tmp, y);
}

void decoder_attention(const brisk_model *m, bk_backend *be, const bk_kv_view *kv, const fwd_batch *b,
                       fwd_scratch *s, int l) {
    const model_hparams *hp = &m->hp;
    const layer_weights *L = &m->layers[l];
    int n = b->n, hd = hp->head_dim;
    float scale = 1.0f / sqrtf((float)hd);

    const bk_weight *qkv[3] = {&L->wq, &L->wk, &L->wv};
    const bk_weight *bias[3] = {L->bq.host ? &L->bq : NULL, L->bk.host ? &L->bk : NULL,
                                L->bv.host ? &L->bv : NULL};
    float *qkv_out[3] = {s->q, s->k, s->v};
    bk_norm_matmul(be, s->x, &L->attn_norm, hp->rms_eps, s->xb, n, 3, qkv, hp->qkv_bias ? bias : NULL, qkv_out);
    const bk_attn_rope_in in = {.q_src = s->q, .q_pitch = hd, .q = s->q, .k = s->k, .v = s->v,
                                .q_norm = hp->qk_norm ? &L->q_norm : NULL, .k_norm = hp->qk_norm ? &L->k_norm : NULL,
                                .eps = hp->rms_eps, .rope = &hp->rope};
    bk_attention_rope(be, &in, &kv[l], &b->ab, hp->n_head, hp->n_head_kv, hd, scale, s->att);
    residual_matmul(m, be, &L->wo, s->att, n, s->xb, s->x);
}

void decoder_logits(const brisk_model *m, bk_backend *be, const fwd_batch *b, fwd_scratch *s) {
    const model_hparams *hp = &m->hp;
    const bk_backend_ops *op = be->ops;
    int d = hp->n_embd;
    /* Only the rows that want logits go through the final norm and the LM head. Consecutive rows (a
     * decode step's, a prompt's last) go straight through the norm: no copy, whose graph node would
     * also stop the next kernels' early launch on a GPU. */
    bool run = true;
    for (int i = 1; i < b->n_out && run; i++) run = b->out_idx[i] == b->out_idx[0] + i;
    if (run) {
        op->rms_norm(be, s->x + (size_t)b->out_idx[0] * d, &m->output_norm, s->out, b->n_out, d, hp->rms_eps);
    } else {
        for (int i = 0; i < b->n_out; i++)
            op->copy(be, s->out + (size_t)i * d, s->x + (size_t)b->out_idx[i] * d, (size_t)d * sizeof(float));
        op->rms_norm(be, s->out, &m->output_norm, s->out, b->n_out, d, hp->rms_eps);
    }
    if (b->hidden_only) return;
    const bk_weight *wout = &m->output;
    op->matmul(be, 1, &wout, NULL, s->out, b->n_out, &s->logits);
}

brisk_status llama_forward(const brisk_model *m, bk_backend *be, const bk_kv_view *kv,
                           const fwd_batch *b, fwd_scratch *s, int l0, int l1) {
    const model_hparams *hp = &m->hp;
    const bk_backend_ops *op = be->ops;
    int n = b->n;

    if (l0 == 0) op->get_rows(be, &m->tok_embd, b->tokens, n, s->x);
    for (int l = l0; l < l1; l++) {
        const layer_weights *L = &m->layers[l];
        fwd_tap(be, s, l, n, hp->n_embd);
        decoder_attention(m, be, kv, b, s, l);

        bk_norm_swiglu(be, s->x, &L->ffn_norm, hp->rms_eps, s->xb, n, &L->w_gate, &L->w_up, s->hb2, s->hb);
        residual_matmul(m, be, &L->w_down, s->hb, n, s->xb, s->x);
    }
    if (l1 == hp->n_layer && b->n_out) decoder_logits(m, be, b, s);
    return BRISK_OK;
}
