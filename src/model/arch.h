/* arch.h — what an architecture's forward pass receives from the engine. */
#ifndef BK_ARCH_H
#define BK_ARCH_H
#include "backend/backend.h"
#include "backend/moe.h"
#include "model/model.h"

/* Per-step activations, allocated once by the context for n_max tokens. */
typedef struct fwd_scratch {
    float *x;    /* (n, n_embd) residual stream */
    float *xb;   /* (n, n_embd) normed input / branch output */
    float *q;    /* (n, n_head*head_dim) */
    float *k;    /* (n, n_head_kv*head_dim) */
    float *v;    /* (n, n_head_kv*head_dim) */
    float *att;  /* (n, n_head*head_dim) attention output */
    float *hb;   /* (n, n_ff) gate, then silu(gate)*up */
    float *hb2;  /* (n, n_ff) up */
    float *moe_logits; /* (n, n_expert) router logits (MoE only) */
    int32_t *moe_ids;  /* (n, n_expert_used) chosen experts */
    float *moe_w;      /* (n, n_expert_used) their weights */
    float *moe_out;    /* (n, n_embd) the experts' weighted sum */
    float *out;  /* (n_out, n_embd) rows that produce logits */
    float *logits; /* (n_out, n_vocab) in backend memory */
    /* qwen35 (NULL / empty otherwise); att is (n, max(n_head*head_dim, value_dim)) there */
    float *qg;       /* (n, max(2*n_head*head_dim, conv_dim)) query|gate, or DeltaNet q|k|v before the conv */
    float *gz;       /* (n, value_dim) the DeltaNet z (gated attention reads its gate in place, in qg) */
    float *conv;     /* (n, conv_dim) conv output */
    float *dn_beta;  /* (n, n_v_heads) beta logits */
    float *dn_alpha; /* (n, n_v_heads) decay logits */
    float *sh;       /* (n, n_embd) shared expert output (qwen35moe) */
    float *sh_gate;  /* (n) its gate logit */
    /* multi-token prediction (engine/mtp.h; NULL otherwise) */
    float *hidden;   /* (n, n_embd) every entry's final-norm output: a target's (the MTP head's h input) or an
                        MTP context's own (the next draft step's h) */
    float *mtp_h;    /* (n, n_embd) an MTP context: the batch's input h rows */
    float *mtp_eh;   /* (n, 2 n_embd) an MTP context: [enorm(embedding) ; hnorm(h)], eh_proj's input */
    /* EAGLE-3 features (engine/mtp.h's eagle3_keep_layers; NULL / 0 otherwise) */
    float *taps;     /* (n, n_tap * n_embd) each entry's inputs of layers tap_layer[0, n_tap), side by side */
    int n_tap;
    int tap_layer[3];
    /* routing statistics (brisk_context_params.collect_expert_stats), host memory, or NULL */
    int64_t *expert_counts; /* (n_layer, n_expert) */
    int32_t *ids_host;      /* (n, n_expert_used) a layer's choices read back */
    int64_t *expert_reads;  /* (2) distinct experts summed over (pass, MoE layer), and such pairs */
    uint8_t *expert_seen;   /* (n_expert) which experts this pass's layer routed to */
    /* runs the experts of layers with exps_host (n_cpu_moe) on the CPU; NULL when the stage has none */
    moe_offload *moe_offload;
} fwd_scratch;

typedef struct fwd_batch {
    int n;                 /* entries */
    const int32_t *tokens; /* (n) */
    bk_attn_batch ab;      /* positions, cache slots, block tables */
    int n_out;             /* entries that want logits */
    const int32_t *out_idx;/* (n_out) their indices, increasing */
    bool hidden_only;      /* embeddings: the final norm into s->out, no LM head (s->logits unused) */
} fwd_batch;

/* An architecture's forward pass over layers [l0, l1) of the batch: first,
 * when l0 == 0, the token embedding into s->x; last, when l1 == n_layer, the
 * final norm and LM head write n_out rows of logits to s->logits. The context
 * runs a model on one backend as one call (0, n_layer), a model split across
 * two backends as two, s->x copied from the first's scratch to the second's.
 * The context picks one by model_arch. */
typedef brisk_status (*arch_forward_fn)(const brisk_model *m, bk_backend *be, const bk_kv_view *kv,
                                        const fwd_batch *b, fwd_scratch *s, int l0, int l1);
brisk_status llama_forward(const brisk_model *m, bk_backend *be, const bk_kv_view *kv,
                           const fwd_batch *b, fwd_scratch *s, int l0, int l1);
brisk_status qwen3moe_forward(const brisk_model *m, bk_backend *be, const bk_kv_view *kv,
                              const fwd_batch *b, fwd_scratch *s, int l0, int l1);
brisk_status qwen35_forward(const brisk_model *m, bk_backend *be, const bk_kv_view *kv, const fwd_batch *b,
                            fwd_scratch *s, int l0, int l1);
/* The recurrent state of sequence seq in layers [l0, l1) moved on through entries [row0, row0 + n) (its own, in
 * position order; row0 + n <= BK_REC_KEEP) of the pass that kept its layers' inputs (bk_kv_view.rec_in), without
 * the rest of the model: the context restores the checkpoint taken before that pass, then cuts the pass's
 * rejected tail (a speculative verify) this way instead of decoding the kept entries again. */
brisk_status qwen35_rec_replay(const brisk_model *m, bk_backend *be, const bk_kv_view *kv, fwd_scratch *s, int l0,
                               int l1, int seq, int row0, int n);
/* The multi-token-prediction head (model/qwen35.c): MTP block l0 (>= n_layer; l1 = l0 + 1) over the batch's
 * tokens and s->mtp_h, its own KV cache kv[l0]; s->hidden gets every entry's output h, s->logits the draft
 * logits of the entries that want them. The same arch_forward_fn signature, run by an MTP context. */
brisk_status qwen35_mtp_forward(const brisk_model *m, bk_backend *be, const bk_kv_view *kv, const fwd_batch *b,
                                fwd_scratch *s, int l0, int l1);

/* EAGLE-3's features: when layer l is tapped, its input s->x (n rows of d) goes to its column of s->taps.
 * Every forward pass calls it at the top of each layer. */
static inline void fwd_tap(bk_backend *be, fwd_scratch *s, int l, int n, int d) {
    size_t row = (size_t)d * sizeof(float);
    for (int k = 0; k < s->n_tap; k++)
        if (s->tap_layer[k] == l)
            bk_copy_rows(be, s->taps + (size_t)k * d, (size_t)s->n_tap * row, s->x, row, row, (size_t)n);
}

/* Pieces the decoders share (model/llama.c): x += the attention block of layer l
 * (norm, q/k/v, QK-norm, RoPE, cached attention, output projection); and the final norm and LM
 * head over the rows that want logits. */
void decoder_attention(const brisk_model *m, bk_backend *be, const bk_kv_view *kv, const fwd_batch *b,
                       fwd_scratch *s, int l);
void decoder_logits(const brisk_model *m, bk_backend *be, const fwd_batch *b, fwd_scratch *s);
/* (model/llama.c) y (n, w.n_out) += x W^T for a weight that closes a residual branch; tensor-parallel,
 * the rank's partial product is summed over the ranks (all_reduce) in tmp (n, w.n_out) first. */
void residual_matmul(const brisk_model *m, bk_backend *be, const bk_weight *w, const float *x, int n, float *tmp,
                     float *y);
/* (model/qwen3moe.c) Adds layer l's routed experts (s->moe_ids) to s->expert_counts, if kept, and
 * the number of distinct ones (the expert weights the pass reads) to s->expert_reads. */
void moe_count_experts(const brisk_model *m, bk_backend *be, const fwd_batch *b, fwd_scratch *s, int l);
/* (model/qwen3moe.c) s->x += layer l's routed experts over s->xb as s->moe_ids and s->moe_w chose them
 * and, shared, its gated shared expert (the gate's logit in s->sh_gate): backend/moe.h's bk_moe_ffn,
 * the experts on be or in host memory (s->moe_offload). */
brisk_status moe_ffn_residual(const brisk_model *m, bk_backend *be, const fwd_batch *b, fwd_scratch *s, int l,
                              bool shared);
#endif
