/* context.c — a model's runtime state: backend, paged KV cache, per-step
 * scratch and logits; brisk_decode() splits a batch into micro-batches and
 * runs each through the architecture's forward pass.
 *
 * A model whose layers are split across two backends (partial offload, see
 * brisk_model_params) runs as two stages, each with its own backend, scratch,
 * recurrent state and checkpoints and its layers' KV pages; the block tables
 * are shared. A forward pass runs the first stage's layers, copies the
 * residual stream across, then the second's.
 *
 * A GPU stage whose layers keep their experts in host memory (n_cpu_moe)
 * holds a moe_offload (backend/moe.h): a CPU backend of its own and host
 * buffers, through which those layers' expert FFN runs on the CPU, and with
 * cache_experts / cache_gpu_mem a hot-expert cache on the stage's device
 * (sized by make_cache after the KV cache and scratch, from what is left).
 * Such a stage runs its passes eagerly when they wait for the host (the CPU
 * runs experts: --n-cpu-moe without a cache, BRISK_XCACHE_MISS=cpu|copy) and
 * as CUDA graphs when its cache reads misses from mapped host memory.
 *
 * Multi-token prediction (engine/mtp.h): a target context may keep every
 * entry's final-norm hidden state (copied to the host after each pass), and
 * an MTP context runs a model's MTP block instead of its trunk: one CPU stage
 * of that one full-attention layer, with its own KV cache, whose batches
 * carry an h row beside each token. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "base/status.h"
#include "engine/kv_cache.h"
#include "engine/mtp.h"
#include "engine/pooling.h"
#include "engine/tp.h"
#include "model/arch.h"

/* Entries per forward pass when brisk_context_params.n_ubatch is 0; bounds the scratch. A model on a
 * GPU takes 2048: on an H100 (bench/cuda/prefill_ub.sh, session 28) the prefill ran 1.36x (qwen3-8b),
 * 1.35x (qwen3.6-27b) and 1.14x (qwen3.6-35b-a3b) faster at 32K tokens than with 512, 1.26x at 128K
 * (8b), 1.08-1.25x at 4K, with the same logits (KL divergence of two 8K chunks: median 0). The CPU
 * keeps llama.cpp's 512 (not measured there). */
#define UBATCH_DEFAULT 512
#define UBATCH_DEFAULT_GPU 2048

/* Rows of logits a forward pass of up to n_ubatch entries computes (brisk_context_params.n_outputs_max). */
static int outs_for(const brisk_context_params *p, int n_ubatch) {
    if (p->embeddings) return n_ubatch; /* hidden rows only (n_embd floats each): a mean pools them all */
    int cap = p->n_outputs_max > 0 ? p->n_outputs_max : p->n_seq_max > 64 ? p->n_seq_max : 64;
    return cap < n_ubatch ? cap : n_ubatch;
}

/* Each architecture's forward pass (model/<arch>.c). */
static const arch_forward_fn forward_by_arch[ARCH_COUNT] = {
    [ARCH_LLAMA] = llama_forward,
    [ARCH_QWEN2] = llama_forward,
    [ARCH_QWEN3] = llama_forward,
    [ARCH_QWEN3MOE] = qwen3moe_forward,
    [ARCH_QWEN35] = qwen35_forward,
    [ARCH_QWEN35MOE] = qwen35_forward,
    [ARCH_QWEN3NEXT] = qwen35_forward,
};

/* The MTP head of each architecture that has one (an MTP context's forward pass). */
static const arch_forward_fn mtp_forward_by_arch[ARCH_COUNT] = {
    [ARCH_QWEN35] = qwen35_mtp_forward,
    [ARCH_QWEN35MOE] = qwen35_mtp_forward,
    [ARCH_QWEN3NEXT] = qwen35_mtp_forward,
};

/* The recurrent state moved on through a kept pass's first entries, per architecture with recurrent layers
 * (model/arch.h's qwen35_rec_replay). */
typedef brisk_status (*arch_rec_replay_fn)(const brisk_model *m, bk_backend *be, const bk_kv_view *kv, fwd_scratch *s,
                                           int l0, int l1, int seq, int row0, int n);
static const arch_rec_replay_fn rec_replay_by_arch[ARCH_COUNT] = {
    [ARCH_QWEN35] = qwen35_rec_replay,
    [ARCH_QWEN35MOE] = qwen35_rec_replay,
    [ARCH_QWEN3NEXT] = qwen35_rec_replay,
};

/* Consecutive layers [l0, l1) on one backend. */
typedef struct ctx_stage {
    bk_backend *be;
    int l0, l1;
    int n_rec;           /* recurrent layers among them */
    void *rs_mem;        /* their per-sequence state, see rs_layer_floats */
    void *ck_mem;        /* (n_seq_max, n_ckpt) snapshots of one sequence's state in these layers, see ck_xfer */
    void *rk_mem;        /* their layers' kept inputs (bk_kv_view.rec_in, rk_bytes), or NULL */
    fwd_scratch s;
    void *scratch_mem;   /* backend memory carved into s (and pp_x) */
    float *pp_x;         /* pipeline parallelism: (n_ubatch, n_embd) the residual stream received from the
                          * rank before (rank 0: from the last rank, for the logits), else NULL */
} ctx_stage;

struct brisk_context {
    brisk_model *model;
    brisk_context_params p;
    ctx_stage st[2];     /* the first runs the embedding, the last the output layer */
    int n_stage;         /* 1, or 2 for a split model */
    arch_forward_fn forward;
    kv_cache *kv;        /* pages for the attention layers only (hp.n_attn_layers), each on its stage's backend */
    bk_kv_view *views;   /* (n_layer) */
    bool recurrent;      /* the model has recurrent layers */
    int n_ckpt;          /* snapshots per sequence; 0 without recurrent state */
    int32_t *ck_pos;     /* (n_seq_max, n_ckpt) the length each snapshot was taken at, -1: free */
    /* The recurrent layers' kept inputs (bk_kv_view.rec_in) hold the last pass's rows when it had at most
     * BK_REC_KEEP entries; per sequence (n_seq_max), rk_n[s] of them from row rk_row0[s] were s's entries at
     * positions rk_pos0[s].. (its entries there being consecutive rows and positions; 0: none). With the
     * snapshot taken at rk_pos0[s] they cut s back into that run without decoding it again. */
    int32_t *rk_n, *rk_row0, *rk_pos0;
    int n_ubatch;
    int n_out_cap;       /* rows of logits a forward pass computes at most (outs_for) */
    int64_t *expert_counts; /* (n_layer, n_expert) routing statistics, or NULL (fwd_scratch.expert_counts) */
    int32_t *ids_host;      /* (n_ubatch, n_expert_used) */
    int64_t expert_reads[2];/* sum over (pass, MoE layer) of distinct experts routed; such pairs (fwd_scratch) */
    uint8_t *expert_seen;   /* (n_expert) scratch of that count */
    int32_t *tokens, *pos, *slot, *seq, *out_idx; /* (n_ubatch) */
    int32_t *pp_out;        /* (n_ubatch) pipeline parallelism: out_idx cut by micro-batch */
    const int32_t **tables; /* (n_ubatch) */
    float *logits;       /* (n_logits_cap, n_vocab) host */
    int n_logits_cap;
    int *logit_row;      /* (n_batch) entry -> row in logits, -1 if none */
    int n_last;          /* entries in the last batch */
    /* embeddings (brisk_context_params.embeddings), else NULL / 0 */
    brisk_pooling pooling; /* resolved */
    int n_embd_out;      /* floats of a pooled vector */
    uint8_t *want;       /* (n_batch) entries of the current batch that produce a hidden row */
    float *embd;         /* (n_batch, n_embd) host: the hidden rows of the last batch, by logit_row */
    float *pooled;       /* (n_seq_max, max(n_embd, n_embd_out)) each sequence's pooled vector */
    int32_t *pool_n;     /* (n_seq_max) rows pooled into it in the last batch; 0: none */
    int32_t *pick;       /* (2, n_seq_max) CLS/LAST: the chosen entry and its position */
    float *head_tmp;     /* (2 * n_embd + n_embd_out) the reranking head's scratch and output */
    brisk_memory_report mem;
    /* multi-token prediction (engine/mtp.h) */
    bool mtp;            /* an MTP context: its one stage runs MTP block n_layer (mtp_forward_by_arch) */
    const float *mtp_in; /* (n, n_embd) host: the h rows of the batch mtp_decode is running, else NULL */
    float *hidden;       /* (n_batch, n_embd) host: the last batch's final-norm rows (mtp_keep_hidden, or an MTP
                            context's output h), or NULL */
    void *hidden_mem;    /* backend memory of the last stage's s.hidden (and an MTP context's mtp_h, mtp_eh) */
    /* EAGLE-3 features (eagle3_keep_layers) */
    float *taps;         /* (n_batch, n_tap * n_embd) host: the last batch's tapped layer inputs, or NULL */
    void *taps_mem;      /* backend memory of the stage's s.taps (n_ubatch rows) */
};

int brisk_kv_type_from_name(const char *name) {
    static const char *const names[] = {"f32", "f16", "q8_0", "q4_0", "q4_0h"}; /* indexed by brisk_kv_type */
    for (int i = 0; i < 5; i++)
        if (name && !strcmp(name, names[i])) return i;
    return -1;
}

brisk_context_params brisk_context_default_params(void) {
    brisk_context_params p = {.n_ctx = 0, .n_seq_max = 1, .n_batch = 512, .n_threads = 0,
                              .kv_type = BRISK_KV_F16, .kv_block_size = 16, .pooling = BRISK_POOLING_UNSPECIFIED,
                              .cpu = {.poll = 50}};
    return p;
}

void brisk_context_free(brisk_context *c) {
    if (!c) return;
    if (c->model) tp_mirror(c->model, TP_CONTEXT_FREE, NULL, NULL, 0);
    kv_cache_free(c->kv);
    if (c->hidden_mem) c->st[c->n_stage - 1].be->ops->release(c->st[c->n_stage - 1].be, c->hidden_mem);
    if (c->taps_mem) c->st[0].be->ops->release(c->st[0].be, c->taps_mem);
    for (int i = 0; i < 2; i++) {
        ctx_stage *st = &c->st[i];
        if (!st->be) continue;
        if (st->scratch_mem) st->be->ops->release(st->be, st->scratch_mem);
        if (st->rs_mem) st->be->ops->release(st->be, st->rs_mem);
        if (st->ck_mem) st->be->ops->release(st->be, st->ck_mem);
        if (st->rk_mem) st->be->ops->release(st->be, st->rk_mem);
        moe_offload_free(st->s.moe_offload); /* its expert cache lives on st->be */
        st->be->ops->free(st->be);
    }
    free(c->views);
    free(c->ck_pos);
    free(c->rk_n);
    free(c->tokens);
    free(c->pos);
    free(c->slot);
    free(c->seq);
    free(c->out_idx);
    free(c->pp_out);
    free(c->tables);
    free(c->logits);
    free(c->logit_row);
    free(c->expert_counts);
    free(c->ids_host);
    free(c->expert_seen);
    free(c->want);
    free(c->embd);
    free(c->pooled);
    free(c->pool_n);
    free(c->pick);
    free(c->head_tmp);
    free(c->hidden);
    free(c->taps);
    free(c);
}

/* The per-step activations of fwd_scratch, in floats, each rounded to 16. */
#define N_SCRATCH 21
static size_t max3(size_t a, size_t b, size_t c) { return a > b ? (a > c ? a : c) : (b > c ? b : c); }
/* head: the LM head's logits are sized (not for embeddings). */
static void scratch_sizes(const model_hparams *hp, size_t n, size_t n_out, bool head, size_t sizes[N_SCRATCH]) {
    size_t d = hp->n_embd, qd = (size_t)hp->n_head * hp->head_dim, kvd = (size_t)hp->n_head_kv * hp->head_dim,
           ff = hp->n_ff > hp->n_ff_shexp ? hp->n_ff : hp->n_ff_shexp, ne = (size_t)hp->n_expert,
           nk = (size_t)hp->n_expert_used, dm = ne ? d : 0;
    /* Gated DeltaNet and gated attention (0 for the other architectures) */
    bool hy = hp->full_attn_interval > 0;
    size_t nv = (size_t)hp->ssm_n_v_heads, vd = nv * hp->ssm_d_state,
           conv = (2 * (size_t)hp->ssm_n_k_heads + nv) * hp->ssm_d_state, sh = hp->n_ff_shexp ? d : 0;
    size_t s[N_SCRATCH] = {n * d,  n * d,  n * qd, n * kvd, n * kvd, n * max3(qd, vd, 0), n * ff, n * ff,
                           n * ne, n * nk, n * nk, n * dm,  n_out * d, head ? n_out * (size_t)hp->n_vocab : 0,
                           hy ? n * max3(2 * qd, conv, 0) : 0, hy ? n * vd : 0, n * conv,
                           n * nv, n * nv, n * sh, sh ? n : 0};
    for (int i = 0; i < N_SCRATCH; i++) sizes[i] = (s[i] + 15) & ~(size_t)15;
}

/* n_out: rows of logits when the stage runs the output layer (out and logits are sized), else 0. */
static size_t scratch_bytes(const model_hparams *hp, size_t n, size_t n_out, bool head) {
    size_t sizes[N_SCRATCH], total = 0;
    scratch_sizes(hp, n, n_out, head, sizes);
    for (int i = 0; i < N_SCRATCH; i++) total += sizes[i];
    return total * sizeof(float);
}

static bool is_last(const brisk_context *c, const ctx_stage *st) { return st == &c->st[c->n_stage - 1]; }

/* Pipeline parallelism over more than one rank (engine/context.c's pp_forward). */
static bool pipelined(const brisk_model *m) { return m->pp_size > 1; }

/* Whether a stage computes logits: the last one, or in a pipeline rank 0's (its only stage). */
static bool runs_logits(const brisk_context *c, const ctx_stage *st) {
    return pipelined(c->model) ? c->model->pp_rank == 0 : is_last(c, st);
}

/* A stage's scratch bytes, with a pipeline's receive buffer. */
static size_t stage_scratch_bytes(const brisk_model *m, size_t n_ubatch, size_t n_out, bool head) {
    return scratch_bytes(&m->hp, n_ubatch, n_out, head) +
           (pipelined(m) ? n_ubatch * (size_t)m->hp.n_embd * sizeof(float) : 0);
}

static brisk_status alloc_scratch(brisk_context *c, ctx_stage *st) {
    size_t sizes[N_SCRATCH];
    fwd_scratch *s = &st->s;
    size_t n_out = runs_logits(c, st) ? (size_t)c->n_out_cap : 0;
    scratch_sizes(&c->model->hp, (size_t)c->n_ubatch, n_out, !c->p.embeddings, sizes);
    float **dst[N_SCRATCH] = {&s->x,          &s->xb,     &s->q,        &s->k,
                              &s->v,          &s->att,    &s->hb,       &s->hb2,
                              &s->moe_logits, (float **)&s->moe_ids, &s->moe_w, &s->moe_out,
                              &s->out,        &s->logits, &s->qg,       &s->gz,
                              &s->conv,       &s->dn_beta, &s->dn_alpha, &s->sh,
                              &s->sh_gate};
    BK_TRY(st->be->ops->alloc(st->be, stage_scratch_bytes(c->model, (size_t)c->n_ubatch, n_out, !c->p.embeddings),
                              &st->scratch_mem));
    float *p = st->scratch_mem;
    for (int i = 0; i < N_SCRATCH; i++) {
        *dst[i] = p;
        p += sizes[i];
    }
    if (pipelined(c->model)) st->pp_x = p;
    return BRISK_OK;
}

/* A recurrent layer's state, in floats: per sequence slot (n_seq_max of them
 * plus one that stays zero, the source of brisk_seq_clear) the conv's last
 * d_conv - 1 inputs and the n_v_heads delta-rule matrices. */
static void rs_layer_floats(const model_hparams *hp, size_t *conv, size_t *ssm) {
    size_t ds = (size_t)hp->ssm_d_state;
    *conv = (size_t)(hp->ssm_d_conv - 1) * (2 * (size_t)hp->ssm_n_k_heads + hp->ssm_n_v_heads) * ds;
    *ssm = (size_t)hp->ssm_n_v_heads * ds * ds;
}

/* Backend bytes of the recurrent state of n_rec layers. */
static size_t rs_bytes(const model_hparams *hp, int n_rec, int n_seq_max) {
    size_t conv, ssm;
    rs_layer_floats(hp, &conv, &ssm);
    return (size_t)n_rec * (size_t)(n_seq_max + 1) * (conv + ssm) * sizeof(float);
}

/* Backend bytes of n_rec layers' kept inputs (bk_kv_view.rec_in): with snapshots, so that a cut back
 * into the last pass replays the state instead of decoding again (keep_recurrent_inputs, speculative decoding's
 * callers only: the copies cost every short pass); not under tensor or pipeline parallelism. */
static size_t rk_bytes(const brisk_model *m, const model_hparams *hp, int n_rec, int n_ckpt, bool keep) {
    if (!n_ckpt || !keep || (m && (m->tp_size > 0 || m->pp_size > 0))) return 0;
    size_t per = (2 * (size_t)hp->ssm_n_k_heads + hp->ssm_n_v_heads) * hp->ssm_d_state + 2 * (size_t)hp->ssm_n_v_heads;
    return (size_t)n_rec * BK_REC_KEEP * per * sizeof(float);
}

/* Allocates a stage's recurrent state once and points its recurrent layers' views into it (and their
 * rec_in into the kept inputs' buffer, when the context keeps them). */
static brisk_status alloc_rs(brisk_context *c, ctx_stage *st) {
    const model_hparams *hp = &c->model->hp;
    if (!st->n_rec) return BRISK_OK;
    size_t rk = rk_bytes(c->model, hp, st->n_rec, c->n_ckpt, c->p.keep_recurrent_inputs);
    if (rk) {
        BK_TRY(st->be->ops->alloc(st->be, rk, &st->rk_mem));
        float *q = st->rk_mem;
        for (int l = st->l0; l < st->l1; l++)
            if (model_layer_recurrent(hp, l)) {
                c->views[l].rec_in = q;
                q += rk / sizeof(float) / (size_t)st->n_rec;
            }
    }
    BK_TRY(st->be->ops->alloc(st->be, rs_bytes(hp, st->n_rec, c->p.n_seq_max), &st->rs_mem));
    size_t conv, ssm, slots = (size_t)c->p.n_seq_max + 1;
    rs_layer_floats(hp, &conv, &ssm);
    float *p = st->rs_mem;
    for (int l = st->l0; l < st->l1; l++) {
        if (!model_layer_recurrent(hp, l)) continue;
        c->views[l].conv = p;
        c->views[l].ssm = p + slots * conv;
        p += slots * (conv + ssm);
    }
    return BRISK_OK;
}

/* One snapshot of a sequence's state in n_rec recurrent layers, in floats: each layer's conv and ssm state. */
static size_t ck_floats(const model_hparams *hp, int n_rec) {
    size_t conv, ssm;
    rs_layer_floats(hp, &conv, &ssm);
    return (size_t)n_rec * (conv + ssm);
}

static size_t ck_bytes(const model_hparams *hp, int n_rec, int n_seq_max, int n_ckpt) {
    return (size_t)n_seq_max * (size_t)n_ckpt * ck_floats(hp, n_rec) * sizeof(float);
}

/* Snapshot k (seq * n_ckpt + j) to or from the live recurrent state of seq, in every stage. */
static void ck_xfer(brisk_context *c, int k, int seq, bool save) {
    const model_hparams *hp = &c->model->hp;
    size_t conv, ssm;
    rs_layer_floats(hp, &conv, &ssm);
    for (int i = 0; i < c->n_stage; i++) {
        const ctx_stage *st = &c->st[i];
        if (!st->n_rec) continue;
        float *snap = (float *)st->ck_mem + (size_t)k * ck_floats(hp, st->n_rec);
        for (int l = st->l0; l < st->l1; l++) {
            const bk_kv_view *v = &c->views[l];
            if (!v->conv) continue;
            float *lc = v->conv + (size_t)seq * conv, *ls = v->ssm + (size_t)seq * ssm;
            st->be->ops->copy(st->be, save ? snap : lc, save ? lc : snap, conv * sizeof(float));
            st->be->ops->copy(st->be, save ? snap + conv : ls, save ? ls : snap + conv, ssm * sizeof(float));
            snap += conv + ssm;
        }
    }
}

/* The snapshot of seq taken at length pos, -1 if none. */
static int ck_find(const brisk_context *c, int seq, int32_t pos) {
    for (int j = 0; j < c->n_ckpt; j++)
        if (c->ck_pos[(size_t)seq * c->n_ckpt + j] == pos) return j;
    return -1;
}

/* Forgets seq's snapshots past pos (pos 0: all of them). */
static void ck_drop_after(brisk_context *c, int seq, int32_t pos) {
    for (int j = 0; j < c->n_ckpt; j++)
        if (c->ck_pos[(size_t)seq * c->n_ckpt + j] > pos) c->ck_pos[(size_t)seq * c->n_ckpt + j] = -1;
}

static bool seq_ok(const brisk_context *c, int seq) { return seq >= 0 && seq < c->p.n_seq_max; }

/* Copies the recurrent state of slot src (n_seq_max: the zero slot) to dst. */
static void rs_copy(brisk_context *c, int src, int dst) {
    const model_hparams *hp = &c->model->hp;
    size_t conv, ssm;
    rs_layer_floats(hp, &conv, &ssm);
    for (int i = 0; i < c->n_stage; i++) {
        const ctx_stage *st = &c->st[i];
        for (int l = st->l0; st->rs_mem && l < st->l1; l++) {
            const bk_kv_view *v = &c->views[l];
            if (!v->conv) continue;
            st->be->ops->copy(st->be, v->conv + (size_t)dst * conv, v->conv + (size_t)src * conv, conv * sizeof(float));
            st->be->ops->copy(st->be, v->ssm + (size_t)dst * ssm, v->ssm + (size_t)src * ssm, ssm * sizeof(float));
        }
    }
}

/* The stage's moe_offload when some of its layers keep their experts in host memory (n_cpu_moe):
 * their tensors handed over as a table. */
static brisk_status make_offload(brisk_context *c, ctx_stage *st) {
    const brisk_model *m = c->model;
    int n_host = 0;
    const bk_weight *(*exps)[3] = calloc(st->l1 > st->l0 ? (size_t)(st->l1 - st->l0) : 1, sizeof *exps);
    if (!exps) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    for (int l = st->l0; l < st->l1; l++) {
        const layer_weights *L = &m->layers[l];
        if (!L->exps_host) continue;
        exps[l - st->l0][0] = &L->gate_exps;
        exps[l - st->l0][1] = &L->up_exps;
        exps[l - st->l0][2] = &L->down_exps;
        n_host++;
    }
    const moe_host_experts hx = {st->l0, st->l1, m->hp.n_expert, m->hp.n_expert_used, m->hp.n_embd, exps};
    brisk_status s = n_host ? moe_offload_new(c->p.n_threads, &c->p.cpu, c->n_ubatch, &hx, &st->s.moe_offload)
                            : BRISK_OK;
    free(exps);
    return s;
}

/* The stages of a model: one, or two when its layers are split (model_split).
 * Each gets a backend of its own: the CPU's, or for a GPU stage a CUDA
 * backend (own stream and staging) on the device that holds its weights;
 * and a moe_offload when some of its layers keep their experts in host memory. */
static brisk_status make_stages(brisk_context *c) {
    const brisk_model *m = c->model;
    int n_layer = m->hp.n_layer, split = model_split(m), dev = 0;
    if (c->mtp) { /* the first MTP block, where the trunk's last layer runs (bind_mtp put its weights there) */
        c->n_stage = 1;
        c->st[0].l0 = n_layer;
        c->st[0].l1 = n_layer + 1;
        return bk_backend_is_cuda(m->be, &dev) ? bk_cuda_backend_new(dev, &c->st[0].be)
                                               : bk_cpu_backend_new_placed(c->p.n_threads, &c->p.cpu, &c->st[0].be);
    }
    c->n_stage = split ? 2 : 1;
    c->st[0].l0 = 0;
    c->st[0].l1 = split ? split : n_layer;
    if (m->pp_size > 0) { /* pipeline parallelism: this rank's layers (never split) */
        c->st[0].l0 = m->pp_l0;
        c->st[0].l1 = m->pp_l1;
    }
    c->st[1].l0 = split;
    c->st[1].l1 = n_layer;
    for (int i = 0; i < c->n_stage; i++) {
        ctx_stage *st = &c->st[i];
        bool gpu = bk_backend_is_cuda(m->be, &dev) && (i == 1 || !split);
        BK_TRY(gpu ? bk_cuda_backend_new(dev, &st->be) : bk_cpu_backend_new_placed(c->p.n_threads, &c->p.cpu, &st->be));
        BK_TRY(tp_attach(m, st->be)); /* tensor parallelism: the backend's all_reduce over the ranks */
        for (int l = st->l0; l < st->l1; l++) st->n_rec += model_layer_recurrent(&m->hp, l);
        BK_TRY(make_offload(c, st));
    }
    return BRISK_OK;
}

/* The share of a context's memory of the stage of layers [l0, l1): KV pages, recurrent state and
 * snapshots; scratch for micro-batches of n_ubatch (with the output layer's when last). */
static void stage_bytes(const brisk_model *m, const model_hparams *hp, const brisk_context_params *p, int n_ubatch,
                        int l0, int l1, bool last, uint64_t *kv, uint64_t *scratch) {
    int n_rec = 0;
    for (int l = l0; l < l1; l++) n_rec += model_layer_recurrent(hp, l);
    int n_attn = (l1 - l0) - n_rec;
    *kv = kv_cache_size_for(n_attn, hp->n_head_kv * hp->head_dim, p->n_ctx, p->n_seq_max, p->kv_block_size,
                            p->kv_type) +
          rs_bytes(hp, n_rec, p->n_seq_max) + ck_bytes(hp, n_rec, p->n_seq_max, p->n_seq_checkpoints) +
          (n_rec ? rk_bytes(m, hp, n_rec, p->n_seq_checkpoints, p->keep_recurrent_inputs) : 0);
    size_t n_out = last ? (size_t)outs_for(p, n_ubatch) : 0;
    *scratch = m ? stage_scratch_bytes(m, (size_t)n_ubatch, n_out, !p->embeddings)
                 : scratch_bytes(hp, (size_t)n_ubatch, n_out, !p->embeddings);
}

/* What a CUDA backend allocates for itself besides alloc(): staging, and the MoE op's chunk
 * when some of its layers run their experts there. */
static uint64_t cuda_extra_bytes(const model_hparams *hp, bool gpu_experts) {
    return bk_cuda_backend_overhead() +
           bk_cuda_moe_scratch_bytes(hp->n_embd, hp->n_ff_exp, gpu_experts ? hp->n_expert : 0, hp->n_expert_used);
}

/* The hot-expert cache of a stage whose layers [l0, l1) keep their experts in host memory (some of
 * them): slots per layer and spare slots. cache_experts fixes the slots; else cache_gpu_mem less
 * `used` (the GPU's other bytes: weights, KV cache, scratch) is spread over those layers' slots,
 * each layer's sized by its experts, after the spare slots (a copied miss is worth most in a
 * prefill, where many experts miss at once) and the buffers. */
static void cache_size(const brisk_model *m, const brisk_context_params *p, const moe_offload *mo, uint64_t used,
                       int *slots, int *spare) {
    const model_hparams *hp = &m->hp;
    int ne = hp->n_expert, want_spare = 2 * hp->n_expert_used > ne / 8 ? 2 * hp->n_expert_used : ne / 8;
    *slots = *spare = 0;
    uint64_t se, emax; /* one slot in every layer; the largest expert */
    if (!moe_cache_layers(mo, &se, &emax) || !ne) return;
    if (p->cache_experts > 0) {
        *slots = p->cache_experts < ne ? p->cache_experts : ne;
    } else if (p->cache_gpu_mem > used) {
        uint64_t fixed = moe_cache_bytes(mo, 0, 0), left = p->cache_gpu_mem - used;
        uint64_t t = left > fixed ? left - fixed : 0;
        uint64_t sp = t / (se + emax); /* no more spare slots than slots in a layer */
        if (sp > (uint64_t)want_spare) sp = (uint64_t)want_spare;
        uint64_t per = (t - sp * emax) / se;
        *slots = per < (uint64_t)ne ? (int)per : ne;
        want_spare = (int)sp;
    }
    if (*slots <= 0) return;
    *spare = *slots >= ne ? 0 : ne - *slots < want_spare ? ne - *slots : want_spare;
}

/* Checks p and fills in its defaults for the model (see brisk_context_params). */
static brisk_status fix_params(const model_hparams *hp, brisk_context_params *p) {
    if (p->n_ctx <= 0) p->n_ctx = hp->n_ctx_train < 4096 ? hp->n_ctx_train : 4096;
    if (p->n_seq_max <= 0) p->n_seq_max = 1;
    if (p->n_batch <= 0) p->n_batch = 512;
    if (p->kv_block_size <= 0) p->kv_block_size = 16;
    if (p->kv_type < BRISK_KV_F32 || p->kv_type > BRISK_KV_Q4_0H)
        return bk_fail(BRISK_ERR_INVALID_ARG, "unknown KV cache type %d", (int)p->kv_type);
    if (bk_kv_block_bytes(p->kv_type) && hp->head_dim % 32 != 0)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "a %s KV cache needs a head size that is a multiple of 32 (this model: %d)",
                       p->kv_type == BRISK_KV_Q8_0 ? "q8_0" : p->kv_type == BRISK_KV_Q4_0 ? "q4_0" : "q4_0h", hp->head_dim);
    if (p->n_seq_max > 4096) return bk_fail(BRISK_ERR_INVALID_ARG, "n_seq_max %d is too large", p->n_seq_max);
    if (p->n_seq_checkpoints < 0 || p->n_seq_checkpoints > 256)
        return bk_fail(BRISK_ERR_INVALID_ARG, "n_seq_checkpoints %d not in [0, 256]", p->n_seq_checkpoints);
    if (hp->n_attn_layers == hp->n_layer) p->n_seq_checkpoints = 0;
    if (p->embeddings && (p->pooling < BRISK_POOLING_UNSPECIFIED || p->pooling > BRISK_POOLING_RANK))
        return bk_fail(BRISK_ERR_INVALID_ARG, "unknown pooling type %d", p->pooling);
    if (p->attn_sparse_k < 0) return bk_fail(BRISK_ERR_INVALID_ARG, "attn_sparse_k %d is negative", p->attn_sparse_k);
    if (p->attn_sparse_k > 0 && hp->head_dim > 1024)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "block-sparse attention: head size %d above 1024", hp->head_dim);
    return BRISK_OK;
}

static int ubatch_for(const brisk_context_params *p, bool gpu) {
    int u = p->n_ubatch > 0 ? p->n_ubatch : gpu ? UBATCH_DEFAULT_GPU : UBATCH_DEFAULT;
    return p->n_batch < u ? p->n_batch : u;
}

brisk_status brisk_model_fit_n_cpu_moe(const char *path, const brisk_model_params *mp, const brisk_context_params *cp,
                                       uint64_t gpu_mem, int *n_cpu_moe) {
    *n_cpu_moe = 0;
    brisk_model_params dmp = brisk_model_default_params();
    brisk_context_params p = cp ? *cp : brisk_context_default_params();
    if (!mp) mp = &dmp;
    if (!model_split_cpu(mp) && bk_cuda_device_count() == 0) return BRISK_OK; /* no GPU */
    gguf_file *g = NULL;
    BK_TRY(gguf_open(path, &g));
    model_hparams hp;
    brisk_status s = model_read_hparams(g, &hp);
    if (s == BRISK_OK) s = model_rope_resolve(&hp, &mp->rope); /* YaRN may stretch the default n_ctx */
    const gguf_tensor *te = gguf_find_tensor(g, "token_embd.weight");
    hp.n_vocab = te ? (int)te->ne[1] : 0; /* the LM head's rows, as the loader pads the vocabulary */
    if (s == BRISK_OK && !hp.n_expert) s = bk_fail(BRISK_ERR_UNSUPPORTED, "%s has no experts", path);
    if (s == BRISK_OK) s = fix_params(&hp, &p);
    int n_layer = hp.n_layer, ngl = mp->n_gpu_layers;
    int l0 = ngl < 0 || ngl > n_layer ? 0 : n_layer - ngl; /* the first GPU layer */
    uint64_t need = 0;
    const bool gpu = !model_split_cpu(mp); /* (the split_cpu stand-in's stage is a CPU one: its ubatch) */
    /* n = l0 keeps every expert of the GPU's layers there; each further n moves one layer's to the host */
    for (int n = l0; s == BRISK_OK && l0 < n_layer && n <= n_layer; n++) {
        uint64_t kv, scratch;
        stage_bytes(NULL, &hp, &p, ubatch_for(&p, gpu), l0, n_layer, true, &kv, &scratch);
        need = model_gpu_bytes(g, n_layer, l0, n) + kv + scratch + cuda_extra_bytes(&hp, n < n_layer);
        if (need <= gpu_mem) {
            *n_cpu_moe = n > l0 ? n : 0;
            break;
        }
        if (n == n_layer)
            s = bk_fail(BRISK_ERR_NOMEM,
                        "%s: with every expert in host memory the GPU still needs %.0f MiB (weights, KV cache for %d "
                        "tokens, scratch), more than %.0f MiB", path, need / 1048576.0, p.n_ctx, gpu_mem / 1048576.0);
    }
    gguf_close(g);
    return s;
}

/* Copies the residual stream (n tokens) from one stage's scratch to the next's:
 * one of the two backends is the CPU. */
static brisk_status stage_transfer(brisk_context *c, const ctx_stage *from, const ctx_stage *to, int n) {
    size_t bytes = (size_t)n * (size_t)c->model->hp.n_embd * sizeof(float);
    return offload_transfer(from->be, from->s.x, to->be, to->s.x, bytes);
}

/* The stage's hot-expert cache (brisk_context_params.cache_experts), when it has layers with experts
 * in host memory and one was asked for: sized (cache_size), checked against the device's free memory,
 * filled from the calibration counts if given. */
static brisk_status make_cache(brisk_context *c, ctx_stage *st) {
    const brisk_model *m = c->model;
    const brisk_context_params *p = &c->p;
    if (!st->s.moe_offload || (p->cache_experts <= 0 && !p->cache_gpu_mem)) return BRISK_OK;
    if (p->expert_stats && (p->expert_stats_layers != m->hp.n_layer || p->expert_stats_experts != m->hp.n_expert))
        return bk_fail(BRISK_ERR_INVALID_ARG,
                       "expert statistics of %d layers x %d experts do not fit this model (%d x %d)",
                       p->expert_stats_layers, p->expert_stats_experts, m->hp.n_layer, m->hp.n_expert);
    int slots, spare;
    uint64_t se, emax;
    int n_off = moe_cache_layers(st->s.moe_offload, &se, &emax); /* (for the message) */
    uint64_t used = m->gpu_weight_bytes + c->mem.kv_bytes + c->mem.scratch_bytes;
    cache_size(m, p, st->s.moe_offload, used, &slots, &spare);
    if (slots <= 0) return BRISK_OK;
    uint64_t bytes = moe_cache_bytes(st->s.moe_offload, slots, spare);
    int dev;
    if (bk_backend_is_cuda(st->be, &dev)) {
        size_t fr = 0, tot = 0;
        BK_TRY(bk_cuda_mem_info(dev, &fr, &tot));
        if (bytes > fr)
            return bk_fail(BRISK_ERR_NOMEM,
                           "the expert cache (%d experts in each of %d layers, %d spare) needs %.0f MiB on CUDA "
                           "device %d, but %.0f MiB are free; lower --cache-experts", slots, n_off, spare,
                           bytes / 1048576.0, dev, fr / 1048576.0);
    }
    c->mem.expert_cache_bytes += bytes;
    return moe_offload_cache(st->s.moe_offload, st->be, slots, spare, p->expert_stats);
}

/* An embeddings context's pooling (the file's when unspecified) and host buffers. */
static brisk_status embeddings_init(brisk_context *c) {
    const brisk_model *m = c->model;
    int d = m->hp.n_embd, n_seq = c->p.n_seq_max;
    c->pooling = BRISK_POOLING_NONE;
    if (!c->p.embeddings) return BRISK_OK;
    if (m->tp_size > 0 || m->pp_size > 0)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "embeddings: not with tensor or pipeline parallelism");
    c->pooling = c->p.pooling == BRISK_POOLING_UNSPECIFIED ? (brisk_pooling)m->hp.pooling_type
                                                          : (brisk_pooling)c->p.pooling;
    c->n_embd_out = d;
    if (c->pooling == BRISK_POOLING_RANK && !(c->n_embd_out = pooling_rank_outputs(m)))
        return bk_fail(BRISK_ERR_UNSUPPORTED, "pooling rank needs a reranker's classification head (cls or "
                       "cls.output tensors), which %s lacks", m->name[0] ? m->name : "this model");
    int w = c->n_embd_out > d ? c->n_embd_out : d;
    c->want = calloc((size_t)c->p.n_batch, 1);
    c->embd = malloc((size_t)c->p.n_batch * d * sizeof(float));
    c->pooled = malloc((size_t)n_seq * w * sizeof(float));
    c->pool_n = calloc((size_t)n_seq, sizeof(int32_t));
    c->pick = malloc(2 * (size_t)n_seq * sizeof(int32_t));
    c->head_tmp = malloc((2 * (size_t)d + (size_t)c->n_embd_out) * sizeof(float));
    if (!c->want || !c->embd || !c->pooled || !c->pool_n || !c->pick || !c->head_tmp)
        return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    return BRISK_OK;
}

/* Host rows (n_batch) and backend scratch (n_ubatch, the last stage's) for every entry's final-norm h; an MTP
 * context also gets its h input and eh_proj input rows. */
static brisk_status alloc_hidden(brisk_context *c) {
    ctx_stage *st = &c->st[c->n_stage - 1];
    size_t d = (size_t)c->model->hp.n_embd, n = (size_t)c->n_ubatch, floats = n * d * (c->mtp ? 4 : 1);
    if (!(c->hidden = malloc((size_t)c->p.n_batch * d * sizeof(float)))) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    BK_TRY(st->be->ops->alloc(st->be, floats * sizeof(float), &c->hidden_mem));
    c->mem.scratch_bytes += floats * sizeof(float);
    st->s.hidden = c->hidden_mem;
    if (c->mtp) {
        st->s.mtp_h = st->s.hidden + n * d;
        st->s.mtp_eh = st->s.mtp_h + n * d;
    }
    return BRISK_OK;
}

/* brisk_context_new, or (mtp) an MTP context of the model (engine/mtp.h). */
static brisk_status context_new(brisk_model *model, const brisk_context_params *params, bool mtp,
                                brisk_context **out) {
    *out = NULL;
    if (!model || model->vocab_only)
        return bk_fail(BRISK_ERR_INVALID_ARG, "a context needs a model loaded with its weights");
    brisk_context_params p = params ? *params : brisk_context_default_params();
    const model_hparams *hp = &model->hp;
    BK_TRY(fix_params(hp, &p));
    const arch_forward_fn *fwd = mtp ? mtp_forward_by_arch : forward_by_arch;
    if ((unsigned)hp->arch >= ARCH_COUNT || !fwd[hp->arch])
        return bk_fail(BRISK_ERR_UNSUPPORTED, "no %s for architecture %s", mtp ? "MTP head" : "forward pass",
                       model->arch_name);
    if (mtp && !model->n_mtp)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "the model has no multi-token-prediction (nextn) layers%s",
                       hp->n_nextn ? " bound (its file lacks their tensors, or tensor/pipeline parallelism is on)" : "");
    if (mtp) p.n_seq_checkpoints = 0; /* attention only: a cut needs no snapshot */
    else BK_TRY(tp_context_begin(model, &p)); /* tensor parallelism: the other ranks make theirs meanwhile */
    brisk_context *c = calloc(1, sizeof *c);
    if (!c) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    c->model = model;
    c->mtp = mtp;
    c->forward = fwd[hp->arch];
    c->p = p;
    int gpu_dev;
    c->n_ubatch = ubatch_for(&p, bk_backend_is_cuda(model->be, &gpu_dev));
    c->n_out_cap = outs_for(&p, c->n_ubatch);
    c->recurrent = !mtp && hp->n_attn_layers < hp->n_layer;
    bk_backend **kv_be = NULL; /* (n_attn_layers) the backend of each attention layer's pages */
    brisk_status s = make_stages(c);
    if (s != BRISK_OK) goto fail;
    c->mem.device = -1;
    for (int i = 0; i < c->n_stage; i++) {
        uint64_t kv, scratch;
        stage_bytes(model, hp, &c->p, c->n_ubatch, c->st[i].l0, c->st[i].l1, runs_logits(c, &c->st[i]), &kv,
                    &scratch);
        int dev;
        if (!bk_backend_is_cuda(c->st[i].be, &dev)) {
            if (c->mem.device < 0) c->mem.kv_bytes += kv, c->mem.scratch_bytes += scratch;
            continue;
        }
        /* A context that cannot fit is refused here, with what it needs, never
         * by an allocation failing halfway or in the middle of generation. The
         * report is the GPU's share. */
        c->mem.device = dev;
        c->mem.weight_bytes = model->gpu_weight_bytes;
        c->mem.kv_bytes = kv;
        bool gpu_experts = false; /* n_cpu_moe may keep every expert of the stage on the host */
        for (int l = c->st[i].l0; hp->n_expert && l < c->st[i].l1; l++) gpu_experts |= !model->layers[l].exps_host;
        c->mem.scratch_bytes = scratch + cuda_extra_bytes(hp, gpu_experts || p.cache_experts > 0 ||
                                                                   p.cache_gpu_mem > 0);
        size_t fr = 0, tot = 0;
        s = bk_cuda_mem_info(dev, &fr, &tot);
        if (s != BRISK_OK) goto fail;
        c->mem.device_free = fr;
        c->mem.device_total = tot;
        uint64_t need = c->mem.kv_bytes + c->mem.scratch_bytes;
        if (need > fr) {
            s = bk_fail(BRISK_ERR_NOMEM,
                        "the context needs %.0f MiB on CUDA device %d (KV cache %.0f MiB for %d tokens x %d "
                        "sequences, of it %.0f MiB for %d recurrent-state snapshots per sequence; scratch %.0f "
                        "MiB for batches of %d) but %.0f MiB are free; lower -c, --parallel, -b or "
                        "--ctx-checkpoints",
                        need / 1048576.0, dev, c->mem.kv_bytes / 1048576.0, p.n_ctx, p.n_seq_max,
                        ck_bytes(hp, c->st[i].n_rec, p.n_seq_max, p.n_seq_checkpoints) / 1048576.0,
                        p.n_seq_checkpoints, c->mem.scratch_bytes / 1048576.0, c->n_ubatch, fr / 1048576.0);
            goto fail;
        }
    }
    c->views = calloc((size_t)(hp->n_layer + model->n_mtp), sizeof *c->views);
    kv_be = calloc((size_t)hp->n_attn_layers + 1, sizeof *kv_be);
    c->tokens = calloc((size_t)c->n_ubatch, sizeof(int32_t));
    c->pos = calloc((size_t)c->n_ubatch, sizeof(int32_t));
    c->slot = calloc((size_t)c->n_ubatch, sizeof(int32_t));
    c->seq = calloc((size_t)c->n_ubatch, sizeof(int32_t));
    c->out_idx = calloc((size_t)c->n_ubatch, sizeof(int32_t));
    c->pp_out = calloc((size_t)c->n_ubatch, sizeof(int32_t));
    c->tables = calloc((size_t)c->n_ubatch, sizeof(int32_t *));
    c->logit_row = calloc((size_t)p.n_batch, sizeof(int));
    c->n_logits_cap = p.n_seq_max;
    c->logits = calloc((size_t)c->n_logits_cap * hp->n_vocab, sizeof(float));
    if (!c->views || !kv_be || !c->tokens || !c->pos || !c->slot || !c->seq || !c->out_idx || !c->pp_out || !c->tables ||
        !c->logit_row || !c->logits) {
        s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
        goto fail;
    }
    /* Attention layer l uses the cache's layer a (the number of attention layers before l). */
    int n_attn = 0; /* the context's attention layers: all, or a pipeline rank's */
    for (int i = 0; i < c->n_stage; i++)
        for (int l = c->st[i].l0; l < c->st[i].l1; l++)
            if (!model_layer_recurrent(hp, l)) kv_be[n_attn++] = c->st[i].be;
    for (int a = 0, dev; a < n_attn && p.attn_sparse_k > 0; a++)
        if (bk_backend_is_cuda(kv_be[a], &dev)) {
            s = bk_fail(BRISK_ERR_UNSUPPORTED, "block-sparse attention (--attn-sparse) runs on the CPU only for now "
                                               "(-ngl 0); layer %d's cache is on CUDA device %d", a, dev);
            goto fail;
        }
    s = kv_cache_new(kv_be, n_attn, hp->n_head_kv * hp->head_dim, p.n_ctx, p.n_seq_max, p.kv_block_size,
                     p.kv_type, &c->kv);
    if (s == BRISK_OK && p.attn_sparse_k > 0) s = kv_cache_enable_sparse(c->kv, p.attn_sparse_k, p.attn_sparse_measure);
    if (s != BRISK_OK) goto fail;
    for (int i = 0, a = 0; i < c->n_stage; i++)
        for (int l = c->st[i].l0; l < c->st[i].l1; l++)
            if (!model_layer_recurrent(hp, l)) c->views[l] = kv_cache_view(c->kv, a++);
    c->n_ckpt = p.n_seq_checkpoints;
    for (int i = 0; i < c->n_stage; i++) {
        ctx_stage *st = &c->st[i];
        s = alloc_rs(c, st);
        if (s == BRISK_OK && c->n_ckpt > 0 && st->n_rec > 0)
            s = st->be->ops->alloc(st->be, ck_bytes(hp, st->n_rec, p.n_seq_max, c->n_ckpt), &st->ck_mem);
        if (s == BRISK_OK) s = alloc_scratch(c, st);
        if (s == BRISK_OK) s = make_cache(c, st);
        if (s != BRISK_OK) goto fail;
    }
    if (mtp && (s = alloc_hidden(c)) != BRISK_OK) goto fail;
    if (c->n_ckpt > 0) {
        if (!(c->ck_pos = malloc((size_t)p.n_seq_max * c->n_ckpt * sizeof *c->ck_pos))) {
            s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
            goto fail;
        }
        for (size_t i = 0; i < (size_t)p.n_seq_max * c->n_ckpt; i++) c->ck_pos[i] = -1;
        bool kept = false; /* the stages' recurrent inputs kept (alloc_rs, rk_bytes): their runs' bookkeeping */
        for (int i = 0; i < c->n_stage; i++) kept |= c->st[i].rk_mem != NULL;
        if (kept && !(c->rk_n = calloc(3 * (size_t)p.n_seq_max, sizeof *c->rk_n))) {
            s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
            goto fail;
        }
        if (c->rk_n) c->rk_row0 = c->rk_n + p.n_seq_max, c->rk_pos0 = c->rk_row0 + p.n_seq_max;
    }
    if (p.collect_expert_stats && hp->n_expert > 0) {
        /* read back per layer: a host sync inside the step, so the CPU backend only */
        if (c->mem.device >= 0) {
            s = bk_fail(BRISK_ERR_UNSUPPORTED, "expert statistics are collected on the CPU (load with -ngl 0)");
            goto fail;
        }
        c->expert_counts = calloc((size_t)hp->n_layer * hp->n_expert, sizeof(int64_t));
        c->ids_host = malloc((size_t)c->n_ubatch * hp->n_expert_used * sizeof(int32_t));
        c->expert_seen = malloc((size_t)hp->n_expert);
        if (!c->expert_counts || !c->ids_host || !c->expert_seen) {
            s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
            goto fail;
        }
        for (int i = 0; i < c->n_stage; i++) {
            c->st[i].s.expert_counts = c->expert_counts;
            c->st[i].s.ids_host = c->ids_host;
            c->st[i].s.expert_reads = c->expert_reads;
            c->st[i].s.expert_seen = c->expert_seen;
        }
    }
    s = embeddings_init(c);
    if (s != BRISK_OK) goto fail;
    free(kv_be);
    *out = c;
    return BRISK_OK;
fail:
    free(kv_be);
    brisk_context_free(c);
    return s;
}

brisk_status brisk_context_new(brisk_model *model, const brisk_context_params *params, brisk_context **out) {
    return context_new(model, params, false, out);
}

brisk_status mtp_context_new(brisk_model *model, const brisk_context_params *params, brisk_context **out) {
    return context_new(model, params, true, out);
}

brisk_status mtp_keep_hidden(brisk_context *c) {
    if (c->hidden) return BRISK_OK;
    const brisk_model *m = c->model;
    if (m->hp.arch >= ARCH_COUNT || !mtp_forward_by_arch[m->hp.arch])
        return bk_fail(BRISK_ERR_UNSUPPORTED, "multi-token prediction: %s has no MTP head", m->arch_name);
    if (m->tp_size > 0 || pipelined(m))
        return bk_fail(BRISK_ERR_UNSUPPORTED, "multi-token prediction with tensor or pipeline parallelism is not supported");
    /* (a GPU stage's graphs captured before now lack the h rows' norm: bk_step.variant tells them apart) */
    return alloc_hidden(c);
}

const float *mtp_hidden(const brisk_context *c, int i) {
    if (!c->hidden || i < 0 || i >= c->n_last) return NULL;
    return c->hidden + (size_t)i * c->model->hp.n_embd;
}

brisk_status eagle3_keep_layers(brisk_context *c, const int32_t *layers, int n) {
    const brisk_model *m = c->model;
    fwd_scratch *s = &c->st[0].s;
    if (n < 1 || n > 3) return bk_fail(BRISK_ERR_INVALID_ARG, "eagle3_keep_layers: %d layers (1..3)", n);
    if (c->taps) { /* a second drafter of the same target: the same layers, or none */
        bool same = s->n_tap == n;
        for (int k = 0; same && k < n; k++) same = s->tap_layer[k] == layers[k];
        return same ? BRISK_OK : bk_fail(BRISK_ERR_INVALID_ARG, "eagle3_keep_layers: the context keeps other layers");
    }
    /* (a GPU's graphs captured before now lack the taps' copies: bk_step.variant tells them apart) */
    if (c->mtp || c->n_stage != 1 || m->tp_size > 0 || pipelined(m))
        return bk_fail(BRISK_ERR_UNSUPPORTED, "EAGLE-3 needs the target in one stage, without tensor or pipeline "
                                              "parallelism (all layers on the GPU, -ngl 99, or on the CPU, -ngl 0)");
    for (int k = 0; k < n; k++)
        if (layers[k] < 0 || layers[k] >= m->hp.n_layer)
            return bk_fail(BRISK_ERR_INVALID_ARG, "eagle3_keep_layers: layer %d of %d", layers[k], m->hp.n_layer);
    size_t w = (size_t)n * m->hp.n_embd, bytes = (size_t)c->n_ubatch * w * sizeof(float);
    float *host = malloc((size_t)c->p.n_batch * w * sizeof(float));
    if (!host) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    brisk_status st = c->st[0].be->ops->alloc(c->st[0].be, bytes, &c->taps_mem);
    if (st != BRISK_OK) {
        free(host);
        return st;
    }
    c->taps = host;
    c->mem.scratch_bytes += bytes;
    s->taps = c->taps_mem;
    s->n_tap = n;
    for (int k = 0; k < n; k++) s->tap_layer[k] = layers[k];
    return BRISK_OK;
}

const float *eagle3_features(const brisk_context *c, int i) {
    if (!c->taps || i < 0 || i >= c->n_last) return NULL;
    return c->taps + (size_t)i * c->st[0].s.n_tap * c->model->hp.n_embd;
}

brisk_status mtp_decode(brisk_context *c, const brisk_batch_entry *e, const float *h, int n) {
    if (!c->mtp) return bk_fail(BRISK_ERR_INVALID_ARG, "mtp_decode: not an MTP context");
    c->mtp_in = h;
    brisk_status s = brisk_decode(c, e, n);
    c->mtp_in = NULL;
    return s;
}

brisk_status brisk_context_attn_sparse_recall(const brisk_context *c, double *recall, double *mass, double *mass_best,
                                              int64_t *groups) {
    int64_t st[KV_SPARSE_N_STATS]; /* cpu_attn_sparse.h's counters: hits, wanted, mass, best mass, groups */
    if (!c->kv || !kv_cache_sparse_stats(c->kv, st))
        return bk_fail(BRISK_ERR_UNSUPPORTED, "the context was made without attn_sparse_measure");
    *recall = st[1] ? (double)st[0] / (double)st[1] : 1.0;
    *mass = st[4] ? (double)st[2] * 1e-9 / (double)st[4] : 1.0;
    *mass_best = st[4] ? (double)st[3] * 1e-9 / (double)st[4] : 1.0;
    *groups = st[4];
    return BRISK_OK;
}

brisk_status brisk_context_expert_counts(const brisk_context *c, int64_t *counts, int64_t cap, int *n_layer,
                                         int *n_expert) {
    const model_hparams *hp = &c->model->hp;
    if (!c->expert_counts)
        return bk_fail(BRISK_ERR_UNSUPPORTED, hp->n_expert ? "the context was made without collect_expert_stats"
                                                           : "the model has no experts");
    int64_t n = (int64_t)hp->n_layer * hp->n_expert;
    if (n_layer) *n_layer = hp->n_layer;
    if (n_expert) *n_expert = hp->n_expert;
    if (counts && cap >= n) memcpy(counts, c->expert_counts, (size_t)n * sizeof(int64_t));
    return counts && cap < n ? bk_fail(BRISK_ERR_RANGE, "%lld counts do not fit in %lld", (long long)n, (long long)cap)
                             : BRISK_OK;
}

brisk_status brisk_context_expert_reads(const brisk_context *c, int64_t *reads, int64_t *passes) {
    BK_TRY(brisk_context_expert_counts(c, NULL, 0, NULL, NULL));
    if (reads) *reads = c->expert_reads[0];
    if (passes) *passes = c->expert_reads[1];
    return BRISK_OK;
}

brisk_status brisk_decode_bytes(const brisk_model *m, brisk_kv_type kv_type, int64_t depth, int n_seq,
                                double experts_read, brisk_step_bytes *out) {
    return brisk_decode_bytes_sparse(m, kv_type, depth, n_seq, experts_read, 0, 16, out);
}

/* K and V rows one token at position depth reads in one attention layer, and the key-summary bytes
 * (per page and KV head a min and a max of head_dim floats) it scores, under attn_sparse_k pages of
 * block tokens (0: dense; no choice either when the pages fit in k). */
static void sparse_rows(int64_t depth, int sparse_k, int block, size_t summary_page, int64_t *rows,
                        uint64_t *summaries) {
    int64_t pages = depth / block + 1, last = depth + 1 - (pages - 1) * block; /* rows of the last page */
    *rows = depth + 1;
    *summaries = 0;
    if (sparse_k <= 0 || sparse_k >= pages) return;
    *rows = (int64_t)(sparse_k - 1) * block + last; /* k pages, one of them the token's own */
    *summaries = (uint64_t)pages * summary_page;
}

brisk_status brisk_decode_bytes_sparse(const brisk_model *m, brisk_kv_type kv_type, int64_t depth, int n_seq,
                                       double experts_read, int sparse_k, int block_size, brisk_step_bytes *out) {
    memset(out, 0, sizeof *out);
    if (sparse_k < 0 || block_size < 1)
        return bk_fail(BRISK_ERR_INVALID_ARG, "brisk_decode_bytes_sparse: bad k %d or page size %d", sparse_k, block_size);
    const model_hparams *hp = &m->hp;
    if (depth < 0 || n_seq < 1 || kv_type < BRISK_KV_F32 || kv_type > BRISK_KV_Q4_0H)
        return bk_fail(BRISK_ERR_INVALID_ARG, "brisk_decode_bytes: bad depth %lld, n_seq %d or KV type %d",
                       (long long)depth, n_seq, (int)kv_type);
    if (m->vocab_only) return bk_fail(BRISK_ERR_INVALID_ARG, "brisk_decode_bytes: a vocab-only model has no weights");
    /* Without measured routing, the most a step can read: every token's own top-k, all distinct
     * (exact for one sequence), never more than the layer's experts. */
    if (experts_read <= 0) experts_read = (double)n_seq * hp->n_expert_used;
    out->weights = model_step_weight_bytes(m, experts_read);
    if (!hp->tied_output && (m->pp_size <= 0 || m->pp_rank == 0))
        out->weights += (uint64_t)n_seq * m->tok_embd.row_bytes; /* the looked-up rows */
    size_t conv, ssm, kv_row = kv_cache_row_bytes(kv_type, hp->n_head_kv * hp->head_dim);
    rs_layer_floats(hp, &conv, &ssm);
    for (int l = 0; l < hp->n_layer; l++) {
        if (m->pp_size > 0 && (l < m->pp_l0 || l >= m->pp_l1)) continue; /* another rank's */
        if (model_layer_recurrent(hp, l)) /* the state is read, updated and written back each step */
            out->state += 2 * (uint64_t)n_seq * (conv + ssm) * sizeof(float);
        else { /* each token's K and V history, its own row included (block-sparse: the pages it reads) */
            int64_t rows;
            uint64_t summaries;
            sparse_rows(depth, sparse_k, block_size, 2 * (size_t)hp->n_head_kv * hp->head_dim * sizeof(float), &rows,
                        &summaries);
            out->kv += (uint64_t)n_seq * (2 * (uint64_t)rows * kv_row + summaries);
        }
    }
    out->total = out->weights + out->kv + out->state;
    return BRISK_OK;
}

/* Grows the host logits buffer to hold n rows (only when a batch asks for more rows than any before). */
static brisk_status reserve_logits(brisk_context *c, int n) {
    if (n <= c->n_logits_cap) return BRISK_OK;
    float *nl = realloc(c->logits, (size_t)n * c->model->hp.n_vocab * sizeof(float));
    if (!nl) return bk_fail(BRISK_ERR_NOMEM, "cannot hold logits for %d entries", n);
    c->logits = nl;
    c->n_logits_cap = n;
    return BRISK_OK;
}

/* The table an MTP context's pass gathers its tokens' rows from (qwen35_mtp_forward): the block's own
 * embedding, else the trunk's. */
static const bk_weight *mtp_embedding(const brisk_model *m) {
    return m->nextn[0].embed_tokens.host ? &m->nextn[0].embed_tokens : &m->tok_embd;
}

/* A stage's layers of one forward pass, bracketed as a backend step when the
 * backend takes steps (the CUDA backend replays a captured graph of them).
 * A stage with experts in host memory runs its ops unbracketed when the pass
 * waits for the host (the CPU's share of the experts, copies decided from the
 * routing: they cannot be captured in a graph; each op then uploads its own
 * inputs); one whose host experts are all behind a map-mode cache
 * (moe_offload_no_sync) never does and takes steps as any other. The cache's
 * refresh runs between passes (moe_offload_step), outside any capture. */
static brisk_status run_stage(brisk_context *c, ctx_stage *stg, const fwd_batch *fb) {
    const bk_backend_ops *op = stg->be->ops;
    moe_offload *mo = stg->s.moe_offload;
    BK_TRY(moe_offload_step(mo));
    if (!op->step_begin || (mo && !moe_offload_no_sync(mo, fb->n)))
        return c->forward(c->model, stg->be, c->views, fb, &stg->s, stg->l0, stg->l1);
    bk_step st = {.n_tokens = fb->n, .tokens = fb->tokens, .ab = &fb->ab, .n_out = fb->n_out,
                  .out_idx = fb->out_idx, .kv_block_size = c->p.kv_block_size,
                  .emb = c->mtp ? mtp_embedding(c->model) : stg->l0 == 0 ? &c->model->tok_embd : NULL,
                  .variant = (stg->s.hidden ? 1 : 0) | (stg->s.n_tap ? 2 : 0)};
    bool replayed = false, rerun = false;
    BK_TRY(op->step_begin(stg->be, &st, &replayed));
    if (replayed) return BRISK_OK;
    BK_TRY(c->forward(c->model, stg->be, c->views, fb, &stg->s, stg->l0, stg->l1));
    BK_TRY(op->step_end(stg->be, &rerun));
    return rerun ? c->forward(c->model, stg->be, c->views, fb, &stg->s, stg->l0, stg->l1) : BRISK_OK;
}

brisk_status brisk_context_expert_cache_stats(const brisk_context *c, int layer, brisk_expert_cache_stats *out) {
    memset(out, 0, sizeof *out);
    if (!c) return bk_fail(BRISK_ERR_INVALID_ARG, "brisk_context_expert_cache_stats: null context");
    if (layer < -1 || layer >= c->model->hp.n_layer)
        return bk_fail(BRISK_ERR_RANGE, "layer %d out of range [-1, %d)", layer, c->model->hp.n_layer);
    for (int i = 0; i < c->n_stage; i++) moe_offload_cache_stats(c->st[i].s.moe_offload, layer, out);
    return BRISK_OK;
}

/* One forward pass: the stages in turn, the residual stream handed on between them. */
static brisk_status run_forward(brisk_context *c, const fwd_batch *fb) {
    for (int i = 0; i < c->n_stage; i++) {
        if (i > 0) BK_TRY(stage_transfer(c, &c->st[i - 1], &c->st[i], fb->n));
        BK_TRY(run_stage(c, &c->st[i], fb));
    }
    return BRISK_OK;
}

/* Pipeline parallelism: a micro-batch's entries [o, o + n) of fb. Its logit rows are fb's out_idx
 * entries in that range, made relative (written to idx, which has room for them). */
static fwd_batch pp_slice(const fwd_batch *fb, int o, int n, int32_t *idx) {
    fwd_batch mb = {.n = n, .tokens = fb->tokens + o,
                    .ab = {.n_tokens = n, .pos = fb->ab.pos + o, .slot = fb->ab.slot + o,
                           .block_table = fb->ab.block_table + o, .seq = fb->ab.seq + o},
                    .out_idx = idx};
    for (int i = 0; i < fb->n_out; i++)
        if (fb->out_idx[i] >= o && fb->out_idx[i] < o + n) idx[mb.n_out++] = fb->out_idx[i] - o;
    return mb;
}

#define PP_MAX_MICRO 16 /* micro-batches of one forward pass */

/* One forward pass over a pipeline of N ranks (model->pp_size), as every rank runs it. The batch
 * is cut into M micro-batches (one per rank, when it has the entries) that go round the ranks:
 * rank 0 embeds and runs its layers, each rank hands the residual stream to the next, and the
 * last hands it back to rank 0, which runs the final norm and the LM head. Time runs in ticks:
 * at tick t rank r runs micro-batch t - r, then in one p2p group sends it on and receives
 * micro-batch t + 1 - r (rank 0: the returning t - N + 1). A send and its receive are in the
 * same tick on both ranks and each rank's groups are in tick order, so the ranks cannot wait on
 * each other in a cycle; and from the second tick on every rank has a micro-batch to run. */
static brisk_status pp_forward(brisk_context *c, const fwd_batch *fb) {
    const brisk_model *m = c->model;
    ctx_stage *st = &c->st[0];
    bk_backend *be = st->be;
    int N = m->pp_size, r = m->pp_rank, d = m->hp.n_embd, V = m->hp.n_vocab;
    int M = fb->n < N ? fb->n : N;
    if (M > PP_MAX_MICRO) M = PP_MAX_MICRO;
    if (!be->ops->p2p) return bk_fail(BRISK_ERR_UNSUPPORTED, "pipeline parallelism: the %s backend has no p2p", be->ops->name);
    fwd_batch mb[PP_MAX_MICRO];
    int row[PP_MAX_MICRO]; /* each micro-batch's first row of logits */
    for (int i = 0, k = 0; i < M; i++) {
        int o = (int)((int64_t)fb->n * i / M), e = (int)((int64_t)fb->n * (i + 1) / M);
        mb[i] = pp_slice(fb, o, e - o, c->pp_out + k);
        row[i] = k;
        k += mb[i].n_out;
    }
    for (int t = 0; t < M + N - 1; t++) {
        int run = t - r, recv = r > 0 ? t + 1 - r : t - (N - 1);
        bool runs = run >= 0 && run < M, recvs = recv >= 0 && recv < M;
        if (runs) {
            if (r > 0) be->ops->copy(be, st->s.x, st->pp_x, (size_t)mb[run].n * d * sizeof(float));
            /* no logits here: the last rank's forward ends the layers without the LM head, which
             * only rank 0 holds (it runs it below on the returned stream) */
            fwd_batch layers_only = mb[run];
            layers_only.n_out = 0;
            BK_TRY(run_stage(c, st, &layers_only));
        }
        bk_p2p g[2];
        int ng = 0;
        if (runs) g[ng++] = (bk_p2p){.buf = st->s.x, .n = (size_t)mb[run].n * d, .peer = (r + 1) % N, .send = true};
        if (recvs) g[ng++] = (bk_p2p){.buf = st->pp_x, .n = (size_t)mb[recv].n * d, .peer = r > 0 ? r - 1 : N - 1};
        if (ng) BK_TRY(be->ops->p2p(be, g, ng));
        if (r == 0 && recvs && mb[recv].n_out) { /* its logits rows, from the returned stream */
            fwd_scratch s = st->s;
            s.x = st->pp_x;
            s.out += (size_t)row[recv] * d;
            s.logits += (size_t)row[recv] * V;
            decoder_logits(m, be, &mb[recv], &s);
        }
    }
    return BRISK_OK;
}

/* Whether entry i of the batch produces an output row (logits, or a hidden state). */
static bool wants(const brisk_context *c, const brisk_batch_entry *e, int i) {
    return c->want ? c->want[i] != 0 : e[i].logits;
}

/* Embeddings: which entries produce a hidden row (c->want). Pooling none: those that ask; mean:
 * all; cls / last (and rank, by the architecture as llama.cpp): each sequence's entry at its
 * lowest / highest position in the batch. */
static void embeddings_want(brisk_context *c, const brisk_batch_entry *e, int n) {
    brisk_pooling pl = c->pooling;
    bool last = pl == BRISK_POOLING_LAST || (pl == BRISK_POOLING_RANK && c->model->hp.arch == ARCH_QWEN3);
    int32_t *idx = c->pick, *pos = c->pick + c->p.n_seq_max;
    for (int i = 0; i < n; i++) {
        c->want[i] = pl == BRISK_POOLING_MEAN || (pl == BRISK_POOLING_NONE && e[i].logits);
        idx[e[i].seq] = -1;
    }
    if (pl == BRISK_POOLING_NONE || pl == BRISK_POOLING_MEAN) return;
    for (int i = 0; i < n; i++) {
        int q = e[i].seq;
        if (idx[q] < 0 || (last ? e[i].pos >= pos[q] : e[i].pos < pos[q])) idx[q] = i, pos[q] = e[i].pos;
    }
    for (int i = 0; i < n; i++) c->want[i] = idx[e[i].seq] == i;
}

/* Each sequence's pooled vector from the batch's hidden rows: their mean, or the one row
 * embeddings_want chose, through the reranking head for rank. */
static brisk_status embeddings_pool(brisk_context *c, const brisk_batch_entry *e, int n) {
    const brisk_model *m = c->model;
    int d = m->hp.n_embd, w = c->n_embd_out > d ? c->n_embd_out : d;
    memset(c->pool_n, 0, (size_t)c->p.n_seq_max * sizeof *c->pool_n);
    for (int i = 0; i < n; i++) {
        if (c->logit_row[i] < 0) continue;
        float *dst = c->pooled + (size_t)e[i].seq * w;
        const float *row = c->embd + (size_t)c->logit_row[i] * d;
        if (c->pool_n[e[i].seq]++ == 0) memcpy(dst, row, (size_t)d * sizeof(float));
        else for (int k = 0; k < d; k++) dst[k] += row[k];
    }
    for (int q = 0; q < c->p.n_seq_max; q++) {
        float *dst = c->pooled + (size_t)q * w;
        if (c->pool_n[q] > 1) /* mean: llama.cpp weighs each row by 1/n */
            for (int k = 0; k < d; k++) dst[k] *= 1.0f / (float)c->pool_n[q];
        if (c->pool_n[q] && c->pooling == BRISK_POOLING_RANK) {
            float *out = c->head_tmp + 2 * (size_t)d;
            BK_TRY(pooling_rank_head(m, dst, out, c->head_tmp));
            memcpy(dst, out, (size_t)c->n_embd_out * sizeof(float));
        }
    }
    return BRISK_OK;
}

brisk_status brisk_decode(brisk_context *c, const brisk_batch_entry *e, int n) {
    if (!c || (!e && n > 0)) return bk_fail(BRISK_ERR_INVALID_ARG, "brisk_decode: null argument");
    if (n < 0 || n > c->p.n_batch)
        return bk_fail(BRISK_ERR_RANGE, "batch of %d entries exceeds n_batch %d", n, c->p.n_batch);
    const model_hparams *hp = &c->model->hp;
    int n_out = 0;
    for (int i = 0; i < n; i++) {
        if (e[i].token < 0 || e[i].token >= hp->n_vocab)
            return bk_fail(BRISK_ERR_INVALID_ARG, "entry %d: token %d out of range [0, %d)", i, e[i].token,
                           hp->n_vocab);
        if (e[i].seq < 0 || e[i].seq >= c->p.n_seq_max)
            return bk_fail(BRISK_ERR_INVALID_ARG, "entry %d: sequence %d out of range [0, %d)", i, e[i].seq,
                           c->p.n_seq_max);
    }
    if (c->mtp && !c->mtp_in && n > 0)
        return bk_fail(BRISK_ERR_INVALID_ARG, "an MTP context decodes through mtp_decode (a hidden row per entry)");
    if (c->want) embeddings_want(c, e, n);
    for (int i = 0; i < n; i++) c->logit_row[i] = wants(c, e, i) ? n_out++ : -1;
    if (!c->p.embeddings) BK_TRY(reserve_logits(c, n_out));
    BK_TRY(tp_mirror(c->model, TP_DECODE, (const int32_t[3]){n, 0, 0}, e, (size_t)n * sizeof *e));
    c->n_last = 0;
    if (c->rk_n) memset(c->rk_n, 0, (size_t)c->p.n_seq_max * sizeof *c->rk_n); /* a pass overwrites the kept rows */
    int row = 0, passes = 0;
    for (int b0 = 0, nb; b0 < n; b0 += nb, passes++) {
        /* a pass takes up to n_ubatch entries, of them up to n_out_cap wanting logits */
        int nb_out = 0, want = 0;
        for (nb = 0; b0 + nb < n && nb < c->n_ubatch && !(wants(c, e, b0 + nb) && want == c->n_out_cap); nb++)
            want += wants(c, e, b0 + nb);
        for (int i = 0; i < nb; i++) {
            const brisk_batch_entry *x = &e[b0 + i];
            c->tokens[i] = x->token;
            c->pos[i] = x->pos;
            c->seq[i] = x->seq;
            if (c->recurrent && x->pos != kv_cache_seq_len(c->kv, x->seq))
                return bk_fail(BRISK_ERR_UNSUPPORTED,
                               "entry %d: sequence %d of a recurrent model continues at position %d, not %d "
                               "(its state cannot be rewound; clear the sequence to start over)",
                               b0 + i, x->seq, kv_cache_seq_len(c->kv, x->seq), x->pos);
            BK_TRY(kv_cache_claim(c->kv, x->seq, x->pos, &c->slot[i]));
            if (wants(c, e, b0 + i)) c->out_idx[nb_out++] = i;
        }
        /* Tables are read after every claim of the micro-batch: a claim may add pages. */
        for (int i = 0; i < nb; i++) c->tables[i] = kv_cache_table(c->kv, e[b0 + i].seq);
        fwd_batch fb = {.n = nb, .tokens = c->tokens,
                        .ab = {.n_tokens = nb, .pos = c->pos, .slot = c->slot, .block_table = c->tables,
                               .seq = c->seq},
                        .n_out = nb_out, .out_idx = c->out_idx, .hidden_only = c->p.embeddings};
        const ctx_stage *last = &c->st[c->n_stage - 1];
        size_t h_bytes = (size_t)nb * hp->n_embd * sizeof(float);
        if (c->mtp) { /* the batch's h rows, from host memory: uploaded to a GPU (before its step), copied on the CPU */
            const float *h = c->mtp_in + (size_t)b0 * hp->n_embd;
            if (bk_backend_is_cuda(last->be, NULL)) BK_TRY(bk_cuda_write(last->be, last->s.mtp_h, h, h_bytes));
            else last->be->ops->copy(last->be, last->s.mtp_h, h, h_bytes);
        }
        BK_TRY(pipelined(c->model) ? pp_forward(c, &fb) : run_forward(c, &fb));
        if (c->hidden)
            BK_TRY(last->be->ops->read(last->be, last->s.hidden, c->hidden + (size_t)b0 * hp->n_embd, h_bytes));
        if (c->taps)
            BK_TRY(last->be->ops->read(last->be, last->s.taps, c->taps + (size_t)b0 * last->s.n_tap * hp->n_embd,
                                       (size_t)last->s.n_tap * h_bytes));
        if (nb_out && c->p.embeddings)
            BK_TRY(last->be->ops->read(last->be, last->s.out, c->embd + (size_t)row * hp->n_embd,
                                       (size_t)nb_out * hp->n_embd * sizeof(float)));
        else if (nb_out && runs_logits(c, last))
            BK_TRY(last->be->ops->read(last->be, last->s.logits, c->logits + (size_t)row * hp->n_vocab,
                                       (size_t)nb_out * hp->n_vocab * sizeof(float)));
        row += nb_out;
    }
    c->n_last = n;
    /* kept rows: each sequence's entries of a one-pass batch, when they are one run of rows and positions */
    for (int i = 0; c->rk_n && passes == 1 && n <= BK_REC_KEEP && i < n; i++) {
        int s = e[i].seq;
        if (!c->rk_n[s]) c->rk_row0[s] = i, c->rk_pos0[s] = e[i].pos, c->rk_n[s] = 1;
        else if (c->rk_n[s] > 0 && i == c->rk_row0[s] + c->rk_n[s] && e[i].pos == c->rk_pos0[s] + c->rk_n[s])
            c->rk_n[s]++;
        else c->rk_n[s] = -1; /* not one run */
    }
    for (int s = 0; c->rk_n && s < c->p.n_seq_max; s++)
        if (c->rk_n[s] < 0) c->rk_n[s] = 0;
    return c->p.embeddings && c->pooling != BRISK_POOLING_NONE ? embeddings_pool(c, e, n) : BRISK_OK;
}

brisk_pooling brisk_context_pooling(const brisk_context *c) { return c ? c->pooling : BRISK_POOLING_NONE; }

int brisk_context_n_embd_out(const brisk_context *c) { return c && c->p.embeddings ? c->n_embd_out : 0; }

const float *brisk_get_embeddings_ith(brisk_context *c, int i) {
    if (!c || !c->p.embeddings || c->pooling != BRISK_POOLING_NONE || i < 0 || i >= c->n_last || c->logit_row[i] < 0)
        return NULL;
    return c->embd + (size_t)c->logit_row[i] * c->model->hp.n_embd;
}

const float *brisk_get_embeddings_seq(brisk_context *c, int seq) {
    if (!c || !c->p.embeddings || c->pooling == BRISK_POOLING_NONE || !seq_ok(c, seq) || !c->pool_n[seq]) return NULL;
    int d = c->model->hp.n_embd;
    return c->pooled + (size_t)seq * (c->n_embd_out > d ? c->n_embd_out : d);
}

const float *brisk_get_logits(brisk_context *c, int i) {
    if (!c || c->p.embeddings || i < 0 || i >= c->n_last || c->logit_row[i] < 0) return NULL;
    return c->logits + (size_t)c->logit_row[i] * c->model->hp.n_vocab;
}

/* The kept inputs no longer describe sequence seq past length len. */
static void rk_cut(brisk_context *c, int seq, int32_t len) {
    if (c->rk_n && c->rk_pos0[seq] + c->rk_n[seq] > len)
        c->rk_n[seq] = len > c->rk_pos0[seq] ? len - c->rk_pos0[seq] : 0;
}

/* The snapshot of seq from which the kept inputs replay its state to length len, -1 if none: they
 * describe seq's positions [rk_pos0, len) and a snapshot was taken at rk_pos0. */
static int rk_snapshot(const brisk_context *c, int seq, int32_t len) {
    if (!c->rk_n || !seq_ok(c, seq) || len <= c->rk_pos0[seq] || len > c->rk_pos0[seq] + c->rk_n[seq]) return -1;
    return ck_find(c, seq, c->rk_pos0[seq]);
}

brisk_status brisk_seq_clear(brisk_context *c, int seq) {
    BK_TRY(tp_mirror(c->model, TP_SEQ_CLEAR, (const int32_t[3]){seq, 0, 0}, NULL, 0));
    BK_TRY(kv_cache_seq_clear(c->kv, seq));
    rs_copy(c, c->p.n_seq_max, seq);
    ck_drop_after(c, seq, 0);
    rk_cut(c, seq, 0);
    return BRISK_OK;
}

brisk_status brisk_seq_remove(brisk_context *c, int seq, int32_t p0, int32_t p1) {
    BK_TRY(tp_mirror(c->model, TP_SEQ_REMOVE, (const int32_t[3]){seq, p0, p1}, NULL, 0));
    int32_t len = kv_cache_seq_len(c->kv, seq);
    if (p0 < 0) p0 = 0;
    if (p1 >= 0 && p1 < len && p0 < p1)
        return bk_fail(BRISK_ERR_UNSUPPORTED,
                       "sequence %d: only a tail can be removed ([%d, %d) leaves positions after %d)", seq,
                       p0, p1, p1);
    if (c->recurrent && p0 < len) {
        if (p0 == 0) return brisk_seq_clear(c, seq);
        int j = ck_find(c, seq, p0), r = j < 0 ? rk_snapshot(c, seq, p0) : -1; /* len > 0: seq is in range */
        if (j < 0 && r < 0)
            return bk_fail(BRISK_ERR_UNSUPPORTED,
                           "sequence %d: a recurrent model's state cannot be truncated to %d of %d positions "
                           "(only cleared, or cut back to a checkpoint or into the last pass after one)", seq,
                           p0, len);
        BK_TRY(kv_cache_seq_truncate(c->kv, seq, p0));
        ck_xfer(c, seq * c->n_ckpt + (j >= 0 ? j : r), seq, false);
        /* from the snapshot before the last pass, its first entries again through the recurrent layers alone */
        for (int i = 0; j < 0 && i < c->n_stage; i++)
            if (c->st[i].n_rec)
                BK_TRY(rec_replay_by_arch[c->model->hp.arch](c->model, c->st[i].be, c->views, &c->st[i].s, c->st[i].l0,
                                                             c->st[i].l1, seq, c->rk_row0[seq], p0 - c->rk_pos0[seq]));
        ck_drop_after(c, seq, p0);
        rk_cut(c, seq, p0);
        return BRISK_OK;
    }
    return kv_cache_seq_truncate(c->kv, seq, p0);
}

brisk_status brisk_seq_share_prefix(brisk_context *c, int src, int dst, int32_t n_tokens) {
    BK_TRY(tp_mirror(c->model, TP_SEQ_SHARE, (const int32_t[3]){src, dst, n_tokens}, NULL, 0));
    int32_t len = kv_cache_seq_len(c->kv, src);
    int j = -1;
    if (c->recurrent && n_tokens != 0 && n_tokens != len && (!seq_ok(c, src) || (j = ck_find(c, src, n_tokens)) < 0))
        return bk_fail(BRISK_ERR_UNSUPPORTED,
                       "sequence %d: a recurrent model shares only a whole sequence (%d positions) or up to a "
                       "checkpoint, not %d", src, len, n_tokens);
    BK_TRY(kv_cache_seq_share(c->kv, src, dst, n_tokens));
    if (j >= 0) ck_xfer(c, src * c->n_ckpt + j, dst, false);
    else rs_copy(c, n_tokens ? src : c->p.n_seq_max, dst);
    ck_drop_after(c, dst, 0);
    rk_cut(c, dst, 0);
    return BRISK_OK;
}

int32_t brisk_seq_len(const brisk_context *c, int seq) { return kv_cache_seq_len(c->kv, seq); }

brisk_status brisk_seq_extend_blank(brisk_context *c, int seq, int32_t n) {
    if (!seq_ok(c, seq)) return bk_fail(BRISK_ERR_INVALID_ARG, "sequence id %d out of range [0, %d)", seq, c->p.n_seq_max);
    if (n < 0) return bk_fail(BRISK_ERR_INVALID_ARG, "a negative extension (%d)", n);
    const int32_t len = kv_cache_seq_len(c->kv, seq);
    for (int32_t p = len, slot; p < len + n; p++) BK_TRY(kv_cache_claim(c->kv, seq, p, &slot));
    return BRISK_OK;
}

brisk_status brisk_seq_checkpoint(brisk_context *c, int seq) {
    BK_TRY(tp_mirror(c->model, TP_SEQ_CHECKPOINT, (const int32_t[3]){seq, 0, 0}, NULL, 0));
    if (!seq_ok(c, seq)) return bk_fail(BRISK_ERR_INVALID_ARG, "sequence id %d out of range [0, %d)", seq, c->p.n_seq_max);
    int32_t len = kv_cache_seq_len(c->kv, seq), *pos = c->ck_pos + (size_t)seq * c->n_ckpt;
    if (!c->n_ckpt || len == 0 || ck_find(c, seq, len) >= 0) return BRISK_OK;
    /* A free place, else the snapshot whose loss widens the gap between its
     * neighbours least (snapshots past len were dropped by the cut that made len). */
    int victim = -1;
    for (int k = 0; k < c->n_ckpt && victim < 0; k++)
        if (pos[k] < 0) victim = k;
    if (victim < 0) {
        int32_t best_gap = INT32_MAX;
        for (int k = 0; k < c->n_ckpt; k++) {
            int32_t prev = 0, next = len;
            for (int o = 0; o < c->n_ckpt; o++) {
                if (pos[o] < pos[k] && pos[o] > prev) prev = pos[o];
                if (pos[o] > pos[k] && pos[o] < next) next = pos[o];
            }
            if (next - prev < best_gap) best_gap = next - prev, victim = k;
        }
    }
    ck_xfer(c, seq * c->n_ckpt + victim, seq, true);
    pos[victim] = len;
    return BRISK_OK;
}

int32_t brisk_seq_keepable(const brisk_context *c, int seq, int32_t n_tokens) {
    int32_t len = kv_cache_seq_len(c->kv, seq);
    if (n_tokens >= len) return len;
    if (n_tokens <= 0) return 0;
    if (!c->recurrent || rk_snapshot(c, seq, n_tokens) >= 0) return n_tokens;
    int32_t best = 0;
    for (int j = 0; seq_ok(c, seq) && j < c->n_ckpt; j++) {
        int32_t p = c->ck_pos[(size_t)seq * c->n_ckpt + j];
        if (p <= n_tokens && p > best) best = p;
    }
    return best;
}

int brisk_context_n_checkpoints(const brisk_context *c) { return c->n_ckpt; }

void brisk_context_memory(const brisk_context *c, brisk_memory_report *out) {
    *out = c->mem;
    out->host_copy_bytes = 0;
    for (int i = 0; i < c->n_stage; i++) out->host_copy_bytes += bk_cpu_weight_copy_bytes(c->st[i].be);
}
