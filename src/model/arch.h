/* arch.h — what an architecture's forward pass receives from the engine. */
#ifndef BK_ARCH_H
#define BK_ARCH_H
#include "backend/backend.h"
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
    float *out;  /* (n_out, n_embd) rows that produce logits */
    float *logits; /* (n_out, n_vocab) in backend memory */
} fwd_scratch;

typedef struct fwd_batch {
    int n;                 /* entries */
    const int32_t *tokens; /* (n) */
    bk_attn_batch ab;      /* positions, cache slots, block tables */
    int n_out;             /* entries that want logits */
    const int32_t *out_idx;/* (n_out) their indices, increasing */
} fwd_batch;

/* Runs the batch; writes n_out rows of logits to s->logits. */
brisk_status llama_forward(const brisk_model *m, bk_backend *be, const bk_kv_view *kv,
                           const fwd_batch *b, fwd_scratch *s);
#endif
