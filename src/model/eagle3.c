/* eagle3.c — the EAGLE-3 drafter: loading llama.cpp's eagle3 GGUF and its forward pass (see eagle3.h). */
#include "model/eagle3.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "base/status.h"
#include "format/gguf.h"
#include "model/model.h"
#include "quant/quant.h"

#define EAGLE3_BATCH 512    /* entries per call: a prompt is encoded and decoded in chunks of this */
#define EAGLE3_KV_BLOCK 16  /* tokens per page of the one sequence's cache */

struct eagle3 {
    /* g, be and d2t are shared by the siblings of one eagle3_open (eagle3_open_sibling: a server's
     * slots), *refs of them; the last one freed closes them */
    gguf_file *g;
    bk_backend *be;                 /* its own backend, the CPU's or the target's GPU's (the siblings run one at
                                     * a time) */
    bool gpu;                       /* be is a GPU's: its weights have device copies, inputs are uploaded and
                                     * outputs read back into the host mirrors below */
    bool own_output;                /* the LM head is the file's (else the target's, not released here) */
    int *refs;
    int n_embd, n_embd_tgt, n_head, n_head_kv, head_dim, n_ff, n_vocab, n_ctx;
    int n_draft;                    /* the LM head's rows: n_vocab, or the draft vocabulary's size (d2t) */
    int32_t *d2t;                   /* (n_draft) target token id of each draft row, or NULL */
    float rms_eps;
    bool norm_before_residual, norm_before_fc;
    int32_t layers[3];              /* target layers whose inputs fc fuses */
    bk_rope_params rope;
    bk_weight fc;                   /* (n_embd, 3 n_embd_tgt) */
    bk_weight enc_norm;             /* (3 n_embd_tgt) with norm_before_fc */
    bk_weight tok_embd, output;     /* (n_vocab, n_embd) / (n_draft, n_embd): own or the target's */
    bk_weight output_norm;          /* (n_embd) */
    bk_weight rope_freqs;           /* (head_dim / 2) Llama 3's RoPE factors, or none */
    bk_weight attn_norm, attn_norm_2, ffn_norm; /* (n_embd) */
    bk_weight wq, wk, wv;           /* (n_head*hd, 2 n_embd), (n_kv*hd, 2 n_embd) x2 */
    bk_weight wo;                   /* (n_embd, n_head*hd) */
    bk_weight w_gate, w_up, w_down; /* (n_ff, n_embd) x2, (n_embd, n_ff) */
    /* the KV cache of one sequence: pages in order, so slot = position */
    bk_kv_view kv;
    int32_t *table;                 /* (n_pages) identity block table */
    int32_t len;                    /* positions held */
    /* per-call scratch, backend memory (the CPU's: host), EAGLE3_BATCH rows each */
    float *feat;    /* (n, 3 n_embd_tgt) normed fc input (norm_before_fc) */
    float *emb;     /* (n, n_embd) */
    float *cat;     /* (n, 2 n_embd) [attn_norm(emb) ; attn_norm_2(g)] */
    float *gn;      /* (n, n_embd) attn_norm_2(g) */
    float *q, *k, *v, *att;         /* (n, n_head*hd), (n, n_kv*hd) x2, (n, n_head*hd) */
    float *x, *xb;  /* (n, n_embd) residual, normed / branch output */
    float *hb, *hb2;/* (n, n_ff) */
    float *out;     /* (n_embd) the last entry's output norm */
    float *logits;  /* (n_vocab) */
    float *dlogits; /* (n_draft) the LM head's, scattered into logits through d2t (NULL without one) */
    int32_t *pos, *slot;            /* (n) */
    const int32_t **tables;         /* (n) */
    int32_t *seq;                   /* (n) zeros */
    int n_last;                     /* entries of the last decode */
    bool have_logits;
    void *mem;                      /* the one allocation the scratch is carved from */
    /* on a GPU: the inputs' device rows, and the host mirrors of the outputs (NULL on the CPU, whose
     * backend memory is the host's) */
    float *gin;     /* (n, n_embd) the g rows, uploaded */
    float *fin;     /* (n, 3 n_embd_tgt) the features, uploaded */
    float *h_x;     /* (n, n_embd) host: the last decode's h rows */
    float *h_logits;/* (n_vocab) host */
    float *h_dlogits;/* (n_draft) host, with d2t */
};

/* The drafter's own weights: those a GPU backend holds device copies of (the embedding stays in host
 * memory, as the target's does: get_rows gathers a step's rows there). */
#define OWN_WEIGHTS(e)                                                                                        \
    {&(e)->fc, &(e)->enc_norm, &(e)->output_norm, &(e)->attn_norm, &(e)->attn_norm_2, &(e)->ffn_norm,       \
     &(e)->wq, &(e)->wk, &(e)->wv, &(e)->wo, &(e)->w_gate, &(e)->w_up, &(e)->w_down,                       \
     (e)->own_output ? &(e)->output : NULL}

static brisk_status get_u32(const gguf_file *g, const char *suffix, bool required, int64_t dflt, int64_t lo,
                            int64_t hi, int *out) {
    char key[96];
    snprintf(key, sizeof key, "eagle3.%s", suffix);
    int64_t v;
    brisk_status s = gguf_get_i64(g, key, &v);
    if (s == BRISK_ERR_NOT_FOUND && !required) v = dflt;
    else if (s == BRISK_ERR_NOT_FOUND) return bk_fail(BRISK_ERR_FORMAT, "eagle3: missing metadata key %s", key);
    else if (s != BRISK_OK) return s;
    if (v < lo || v > hi)
        return bk_fail(BRISK_ERR_FORMAT, "eagle3: %s = %lld is out of range [%lld, %lld]", key, (long long)v,
                       (long long)lo, (long long)hi);
    *out = (int)v;
    return BRISK_OK;
}

/* Binds tensor name of shape (ne0, ne1) (ne1 0: a vector, f32) from the file's map. */
static brisk_status bind(eagle3 *e, const char *name, int64_t ne0, int64_t ne1, bool required, bk_weight *w) {
    memset(w, 0, sizeof *w);
    const gguf_tensor *t = gguf_find_tensor(e->g, name);
    if (!t) return required ? bk_fail(BRISK_ERR_FORMAT, "eagle3: missing tensor %s", name) : BRISK_OK;
    if (t->ne[0] != ne0 || t->ne[1] != (ne1 ? ne1 : 1) || t->ne[2] != 1 || t->ne[3] != 1)
        return bk_fail(BRISK_ERR_FORMAT, "eagle3: tensor %s has shape [%lld, %lld, %lld, %lld], expected [%lld, %lld]",
                       name, (long long)t->ne[0], (long long)t->ne[1], (long long)t->ne[2], (long long)t->ne[3],
                       (long long)ne0, (long long)(ne1 ? ne1 : 1));
    const quant_traits *qt = quant_get_traits(t->type);
    if (!qt || !qt->can_dequantize || (!ne1 && t->type != QT_F32))
        return bk_fail(BRISK_ERR_UNSUPPORTED, "eagle3: tensor %s has type %s, which brisk cannot read here", name,
                       quant_type_name(t->type));
    *w = (bk_weight){.name = t->name, .type = t->type, .n_in = t->ne[0], .n_out = t->ne[1],
                     .row_bytes = quant_row_size(t->type, t->ne[0]), .host = t->data};
    return BRISK_OK;
}

/* A reduced draft vocabulary, as llama.cpp's converter writes it: d2t (i64, one per LM-head row) holds the
 * target token id of each draft row, all distinct and in the target's vocabulary. The draft's logits go to
 * those ids; every other token's is -inf (llama.cpp's eagle3 graph: a fill and a set_rows). */
static brisk_status read_d2t(eagle3 *e) {
    const gguf_tensor *t = gguf_find_tensor(e->g, "d2t");
    if (!t) return BRISK_OK;
    if (t->type != QT_I64 || t->ne[1] != 1 || t->ne[2] != 1 || t->ne[3] != 1 || t->ne[0] < 1 || t->ne[0] > e->n_vocab)
        return bk_fail(BRISK_ERR_FORMAT, "eagle3: d2t must be an i64 vector of 1..%d target ids (it is %s [%lld, %lld])",
                       e->n_vocab, quant_type_name(t->type), (long long)t->ne[0], (long long)t->ne[1]);
    e->n_draft = (int)t->ne[0];
    uint8_t *seen = calloc((size_t)e->n_vocab, 1);
    if (!(e->d2t = malloc((size_t)e->n_draft * sizeof *e->d2t)) || !seen) {
        free(seen);
        return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    for (int i = 0; i < e->n_draft; i++) {
        int64_t v;
        memcpy(&v, (const uint8_t *)t->data + 8 * (size_t)i, 8);
        if (v < 0 || v >= e->n_vocab || seen[v]) {
            free(seen);
            return bk_fail(BRISK_ERR_FORMAT, "eagle3: d2t[%d] = %lld is %s", i, (long long)v,
                           v < 0 || v >= e->n_vocab ? "outside the target's vocabulary" : "a repeated target id");
        }
        seen[v] = 1;
        e->d2t[i] = (int32_t)v;
    }
    free(seen);
    return BRISK_OK;
}

static brisk_status read_hparams(eagle3 *e, const brisk_model *target) {
    const gguf_file *g = e->g;
    const char *arch;
    size_t len;
    if (gguf_get_str(g, "general.architecture", &arch, &len) != BRISK_OK || len != 6 || memcmp(arch, "eagle3", 6))
        return bk_fail(BRISK_ERR_FORMAT, "eagle3: the file's general.architecture is not eagle3");
    int n_layer, ctx;
    BK_TRY(get_u32(g, "block_count", true, 0, 1, 1 << 20, &n_layer));
    if (n_layer != 1) return bk_fail(BRISK_ERR_UNSUPPORTED, "eagle3: %d layers (llama.cpp's eagle3 has one)", n_layer);
    BK_TRY(get_u32(g, "embedding_length", true, 0, 1, 1 << 20, &e->n_embd));
    BK_TRY(get_u32(g, "attention.head_count", true, 0, 1, 4096, &e->n_head));
    BK_TRY(get_u32(g, "attention.head_count_kv", false, e->n_head, 1, e->n_head, &e->n_head_kv));
    if (e->n_head % e->n_head_kv)
        return bk_fail(BRISK_ERR_FORMAT, "eagle3: %d heads over %d KV heads", e->n_head, e->n_head_kv);
    BK_TRY(get_u32(g, "attention.key_length", false, e->n_embd / e->n_head, 2, 4096, &e->head_dim));
    int vlen;
    BK_TRY(get_u32(g, "attention.value_length", false, e->head_dim, 2, 4096, &vlen));
    if (vlen != e->head_dim || e->head_dim % 2)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "eagle3: head sizes k %d, v %d", e->head_dim, vlen);
    BK_TRY(get_u32(g, "feed_forward_length", true, 0, 1, 1 << 22, &e->n_ff));
    BK_TRY(get_u32(g, "context_length", false, 4096, 1, 1 << 24, &ctx));
    BK_TRY(get_u32(g, "target_hidden_size", true, 0, 1, 1 << 20, &e->n_embd_tgt));
    if (gguf_get_f32(g, "eagle3.attention.layer_norm_rms_epsilon", &e->rms_eps) != BRISK_OK)
        return bk_fail(BRISK_ERR_FORMAT, "eagle3: missing metadata key eagle3.attention.layer_norm_rms_epsilon");
    e->norm_before_residual = e->norm_before_fc = false;
    gguf_get_bool(g, "eagle3.norm_before_residual", &e->norm_before_residual);
    gguf_get_bool(g, "eagle3.norm_before_fc", &e->norm_before_fc);
    gguf_value_type et;
    const void *ids;
    uint64_t n_ids;
    if (gguf_get_arr(g, "eagle3.target_layers", &et, &n_ids, &ids) != BRISK_OK || n_ids != 3 ||
        (et != GGUF_TYPE_INT32 && et != GGUF_TYPE_UINT32))
        return bk_fail(BRISK_ERR_FORMAT, "eagle3: eagle3.target_layers must hold three layer ids");
    memcpy(e->layers, ids, sizeof e->layers);
    const model_hparams *th = &target->hp;
    for (int i = 0; i < 3; i++)
        /* n_layer would be the final hidden state: llama.cpp's graphs keep that input only for deepseek4 and
         * nemotron-h (res->t_layer_inp[n_layer]); for the architectures brisk runs it aborts on one too */
        if (e->layers[i] < 0 || e->layers[i] >= th->n_layer)
            return bk_fail(BRISK_ERR_UNSUPPORTED, "eagle3: target layer %d (the target has %d layers; brisk reads "
                           "layer inputs only)", e->layers[i], th->n_layer);
    if (e->n_embd_tgt != th->n_embd)
        return bk_fail(BRISK_ERR_FORMAT, "eagle3: drafted for a target of width %d, this one is %d", e->n_embd_tgt,
                       th->n_embd);
    /* RoPE as llama.cpp resolves a context's from the file's keys (eagle3.rope.freq_base and the
     * rope.scaling.* of a linear or YaRN drafter): over the whole head, NORM */
    model_hparams rh;
    memset(&rh, 0, sizeof rh);
    rh.n_ctx_train = ctx;
    rh.rope = (bk_rope_params){.n_rot = e->head_dim, .mode = BK_ROPE_NORM};
    BK_TRY(model_read_rope_file(g, "eagle3", ctx, &rh.rope_file));
    BK_TRY(model_rope_resolve(&rh, NULL));
    e->rope = rh.rope;
    e->n_vocab = e->n_draft = th->n_vocab;
    return read_d2t(e);
}

static brisk_status bind_all(eagle3 *e, const brisk_model *target) {
    int64_t d = e->n_embd, qd = (int64_t)e->n_head * e->head_dim, kvd = (int64_t)e->n_head_kv * e->head_dim;
    BK_TRY(bind(e, "fc.weight", 3 * (int64_t)e->n_embd_tgt, d, true, &e->fc));
    if (e->norm_before_fc) BK_TRY(bind(e, "enc.output_norm.weight", 3 * (int64_t)e->n_embd_tgt, 0, true, &e->enc_norm));
    BK_TRY(bind(e, "output_norm.weight", d, 0, true, &e->output_norm));
    BK_TRY(bind(e, "output.weight", d, e->n_draft, e->d2t != NULL, &e->output)); /* a draft vocabulary's own */
    BK_TRY(bind(e, "token_embd.weight", d, e->n_vocab, false, &e->tok_embd));
    e->own_output = e->output.host != NULL;
    if (!e->output.host) e->output = target->output;
    if (!e->tok_embd.host) e->tok_embd = target->tok_embd;
    if (e->output.n_in != d || e->tok_embd.n_in != d || !e->output.host || !e->tok_embd.host)
        return bk_fail(BRISK_ERR_FORMAT, "eagle3: the target's embedding or LM head (width %lld) cannot serve a "
                       "drafter of width %lld", (long long)target->output.n_in, (long long)d);
    BK_TRY(bind(e, "blk.0.attn_norm.weight", d, 0, true, &e->attn_norm));
    BK_TRY(bind(e, "blk.0.attn_norm_2.weight", d, 0, true, &e->attn_norm_2));
    BK_TRY(bind(e, "blk.0.attn_q.weight", 2 * d, qd, true, &e->wq));
    BK_TRY(bind(e, "blk.0.attn_k.weight", 2 * d, kvd, true, &e->wk));
    BK_TRY(bind(e, "blk.0.attn_v.weight", 2 * d, kvd, true, &e->wv));
    BK_TRY(bind(e, "blk.0.attn_output.weight", qd, d, true, &e->wo));
    BK_TRY(bind(e, "blk.0.ffn_norm.weight", d, 0, true, &e->ffn_norm));
    BK_TRY(bind(e, "blk.0.ffn_gate.weight", d, e->n_ff, true, &e->w_gate));
    BK_TRY(bind(e, "blk.0.ffn_up.weight", d, e->n_ff, true, &e->w_up));
    BK_TRY(bind(e, "blk.0.ffn_down.weight", e->n_ff, d, true, &e->w_down));
    /* Llama 3's RoPE scaling (rope_freqs.weight: llama.cpp names it without a layer, as for llama) */
    BK_TRY(bind(e, "rope_freqs.weight", e->head_dim / 2, 0, false, &e->rope_freqs));
    e->rope.freq_factors = e->rope_freqs.host;
    return BRISK_OK;
}

/* Sizes first, then one allocation carved into the scratch; the cache apart. */
static brisk_status alloc_state(eagle3 *e) {
    size_t n = EAGLE3_BATCH, d = (size_t)e->n_embd, qd = (size_t)e->n_head * e->head_dim;
    size_t kvd = (size_t)e->n_head_kv * e->head_dim, ff = (size_t)e->n_ff;
    size_t floats = n * 3 * (size_t)e->n_embd_tgt + n * d * 5 + n * 2 * d + n * qd * 2 + n * kvd * 2 + n * ff * 2 +
                    d + (size_t)e->n_vocab + (e->d2t ? (size_t)e->n_draft : 0) +
                    (e->gpu ? n * d + n * 3 * (size_t)e->n_embd_tgt : 0);
    BK_TRY(e->be->ops->alloc(e->be, floats * sizeof(float), &e->mem));
    float *p = e->mem;
#define CARVE(field, count) (e->field = p, p += (count))
    CARVE(feat, n * 3 * (size_t)e->n_embd_tgt);
    CARVE(emb, n * d);
    CARVE(gn, n * d);
    CARVE(x, n * d);
    CARVE(xb, n * d);
    CARVE(cat, n * 2 * d);
    CARVE(q, n * qd);
    CARVE(att, n * qd);
    CARVE(k, n * kvd);
    CARVE(v, n * kvd);
    CARVE(hb, n * ff);
    CARVE(hb2, n * ff);
    CARVE(out, d);
    CARVE(logits, (size_t)e->n_vocab);
    if (e->d2t) CARVE(dlogits, (size_t)e->n_draft);
    if (e->gpu) {
        CARVE(gin, n * d);
        CARVE(fin, n * 3 * (size_t)e->n_embd_tgt);
    }
#undef CARVE
    if (e->gpu && (!(e->h_x = malloc(n * d * sizeof(float))) ||
                   !(e->h_logits = malloc((size_t)e->n_vocab * sizeof(float))) ||
                   (e->d2t && !(e->h_dlogits = malloc((size_t)e->n_draft * sizeof(float))))))
        return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    int n_pages = (e->n_ctx + EAGLE3_KV_BLOCK - 1) / EAGLE3_KV_BLOCK;
    size_t kv_bytes = (size_t)n_pages * EAGLE3_KV_BLOCK * kvd * sizeof(float);
    BK_TRY(e->be->ops->alloc(e->be, kv_bytes, &e->kv.k));
    BK_TRY(e->be->ops->alloc(e->be, kv_bytes, &e->kv.v));
    e->kv.kv_type = BRISK_KV_F32;
    e->kv.block_size = EAGLE3_KV_BLOCK;
    e->table = malloc((size_t)n_pages * sizeof *e->table);
    e->pos = malloc(n * sizeof *e->pos);
    e->slot = malloc(n * sizeof *e->slot);
    e->seq = calloc(n, sizeof *e->seq);
    e->tables = malloc(n * sizeof *e->tables);
    if (!e->table || !e->pos || !e->slot || !e->seq || !e->tables) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    for (int i = 0; i < n_pages; i++) e->table[i] = i;
    for (size_t i = 0; i < n; i++) e->tables[i] = e->table;
    return BRISK_OK;
}

brisk_status eagle3_open(const char *path, const brisk_model *target, int n_ctx, int n_threads, eagle3 **out) {
    *out = NULL;
    if (!target || target->vocab_only || n_ctx < 1)
        return bk_fail(BRISK_ERR_INVALID_ARG, "eagle3_open: needs a target loaded with its weights and n_ctx >= 1");
    eagle3 *e = calloc(1, sizeof *e);
    if (!e) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    e->n_ctx = n_ctx;
    brisk_status s = (e->refs = malloc(sizeof *e->refs)) ? gguf_open(path, &e->g) : bk_fail(BRISK_ERR_NOMEM, "out of memory");
    if (e->refs) *e->refs = 1;
    if (s == BRISK_OK) s = read_hparams(e, target);
    if (s == BRISK_OK) s = bind_all(e, target);
    /* where the target's last layer runs (its taps and LM head are there): its GPU, or the CPU */
    int dev;
    e->gpu = bk_backend_is_cuda(target->be, &dev);
    if (s == BRISK_OK) s = e->gpu ? bk_cuda_backend_new(dev, &e->be) : bk_cpu_backend_new(n_threads, &e->be);
    bk_weight *own[] = OWN_WEIGHTS(e);
    for (size_t i = 0; e->gpu && s == BRISK_OK && i < sizeof own / sizeof *own; i++)
        if (own[i] && own[i]->host) s = e->be->ops->bind_weight(e->be, own[i]);
    if (s == BRISK_OK) s = alloc_state(e);
    if (s != BRISK_OK) {
        eagle3_free(e);
        return s;
    }
    *out = e;
    return BRISK_OK;
}

brisk_status eagle3_open_sibling(const eagle3 *base, int n_ctx, eagle3 **out) {
    *out = NULL;
    if (!base || n_ctx < 1) return bk_fail(BRISK_ERR_INVALID_ARG, "eagle3_open_sibling: a drafter and n_ctx >= 1");
    eagle3 *e = malloc(sizeof *e);
    if (!e) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    *e = *base; /* the hyperparameters, the weights (views of the shared map or the target's), g, be, d2t */
    (*e->refs)++;
    e->n_ctx = n_ctx;
    e->mem = e->kv.k = e->kv.v = NULL; /* its own cache and scratch */
    e->table = NULL, e->pos = e->slot = e->seq = NULL, e->tables = NULL;
    e->gin = e->fin = e->h_x = e->h_logits = e->h_dlogits = NULL;
    e->len = 0, e->n_last = 0, e->have_logits = false;
    brisk_status s = alloc_state(e);
    if (s != BRISK_OK) {
        eagle3_free(e);
        return s;
    }
    *out = e;
    return BRISK_OK;
}

void eagle3_free(eagle3 *e) {
    if (!e) return;
    const bool last = !e->refs || --*e->refs == 0;
    if (last && e->gpu) { /* the device copies of its own weights, before the backend goes */
        bk_weight *own[] = OWN_WEIGHTS(e);
        for (size_t i = 0; i < sizeof own / sizeof *own; i++)
            if (own[i]) bk_cuda_release_weight(own[i]);
    }
    if (e->be) {
        if (e->mem) e->be->ops->release(e->be, e->mem);
        if (e->kv.k) e->be->ops->release(e->be, e->kv.k);
        if (e->kv.v) e->be->ops->release(e->be, e->kv.v);
        if (last) e->be->ops->free(e->be);
    }
    if (last) {
        gguf_close(e->g);
        free(e->d2t);
        free(e->refs);
    }
    free(e->table);
    free(e->pos);
    free(e->slot);
    free(e->seq);
    free(e->tables);
    free(e->h_x);
    free(e->h_logits);
    free(e->h_dlogits);
    free(e);
}

int eagle3_n_embd(const eagle3 *e) { return e->n_embd; }
const int32_t *eagle3_target_layers(const eagle3 *e) { return e->layers; }
int eagle3_max_batch(const eagle3 *e) { return e ? EAGLE3_BATCH : 0; }
int32_t eagle3_len(const eagle3 *e) { return e->len; }
void eagle3_cut(eagle3 *e, int32_t keep) {
    if (keep >= 0 && keep < e->len) e->len = keep;
}

brisk_status eagle3_extend_blank(eagle3 *e, int32_t n) {
    if (n < e->len || n > e->n_ctx)
        return bk_fail(BRISK_ERR_INVALID_ARG, "eagle3_extend_blank: %d positions (the cache holds %d of %d)", n,
                       e->len, e->n_ctx);
    /* slot = position, kv_dim floats each (an f32 page of EAGLE3_KV_BLOCK slots) */
    size_t kvd = (size_t)e->n_head_kv * e->head_dim, off = (size_t)e->len * kvd, cnt = (size_t)(n - e->len) * kvd;
    if (!e->gpu) {
        memset((float *)e->kv.k + off, 0, cnt * sizeof(float));
        memset((float *)e->kv.v + off, 0, cnt * sizeof(float));
    } else if (cnt) { /* zeros uploaded a chunk at a time */
        size_t chunk = cnt < ((size_t)1 << 18) ? cnt : (size_t)1 << 18;
        float *z = calloc(chunk, sizeof(float));
        if (!z) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
        brisk_status s = BRISK_OK;
        for (size_t o = 0; s == BRISK_OK && o < cnt; o += chunk) {
            size_t m = cnt - o < chunk ? cnt - o : chunk;
            s = bk_cuda_write(e->be, (float *)e->kv.k + off + o, z, m * sizeof(float));
            if (s == BRISK_OK) s = bk_cuda_write(e->be, (float *)e->kv.v + off + o, z, m * sizeof(float));
        }
        free(z);
        BK_TRY(s);
    }
    e->len = n;
    return BRISK_OK;
}

brisk_status eagle3_encode(eagle3 *e, const float *feat, int n, float *g) {
    if (n < 0 || n > EAGLE3_BATCH) return bk_fail(BRISK_ERR_INVALID_ARG, "eagle3_encode: %d entries", n);
    if (n == 0) return BRISK_OK;
    const bk_backend_ops *op = e->be->ops;
    size_t w = 3 * (size_t)e->n_embd_tgt;
    if (e->gpu) { /* the features from host memory */
        BK_TRY(bk_cuda_write(e->be, e->fin, feat, (size_t)n * w * sizeof(float)));
        feat = e->fin;
    }
    const float *in = feat;
    if (e->norm_before_fc) {
        op->rms_norm(e->be, feat, &e->enc_norm, e->feat, n, (int)w, e->rms_eps);
        in = e->feat;
    }
    const bk_weight *fc = &e->fc;
    op->matmul(e->be, 1, &fc, NULL, in, n, &e->xb);
    return op->read(e->be, e->xb, g, (size_t)n * e->n_embd * sizeof(float));
}

/* The decoder layer over n entries (eagle3.h's equations); x ends as the h rows. */
brisk_status eagle3_decode(eagle3 *e, const int32_t *tokens, const float *g, int32_t pos0, int n, bool logits) {
    if (n < 1 || n > EAGLE3_BATCH || pos0 != e->len || pos0 + n > e->n_ctx)
        return bk_fail(BRISK_ERR_INVALID_ARG, "eagle3_decode: %d entries at position %d (the cache holds %d of %d)",
                       n, pos0, e->len, e->n_ctx);
    for (int i = 0; i < n; i++)
        if (tokens[i] < 0 || tokens[i] >= e->n_vocab)
            return bk_fail(BRISK_ERR_INVALID_ARG, "eagle3_decode: token %d out of range", tokens[i]);
    bk_backend *be = e->be;
    const bk_backend_ops *op = be->ops;
    size_t d = (size_t)e->n_embd, row = d * sizeof(float);
    for (int i = 0; i < n; i++) e->pos[i] = e->slot[i] = pos0 + i;
    e->have_logits = false;
    if (e->gpu) { /* the g rows from host memory */
        BK_TRY(bk_cuda_write(be, e->gin, g, (size_t)n * row));
        g = e->gin;
    }

    op->get_rows(be, &e->tok_embd, tokens, n, e->emb);
    op->rms_norm(be, e->emb, &e->attn_norm, e->emb, n, (int)d, e->rms_eps);
    op->rms_norm(be, g, &e->attn_norm_2, e->gn, n, (int)d, e->rms_eps);
    bk_copy_rows(be, e->cat, 2 * row, e->emb, row, row, (size_t)n);
    bk_copy_rows(be, e->cat + d, 2 * row, e->gn, row, row, (size_t)n);

    const bk_weight *qkv[3] = {&e->wq, &e->wk, &e->wv};
    float *qkv_out[3] = {e->q, e->k, e->v};
    op->matmul(be, 3, qkv, NULL, e->cat, n, qkv_out);
    op->rope(be, e->q, n, e->n_head, e->head_dim, e->pos, &e->rope);
    op->rope(be, e->k, n, e->n_head_kv, e->head_dim, e->pos, &e->rope);
    bk_attn_batch ab = {.n_tokens = n, .pos = e->pos, .slot = e->slot, .block_table = e->tables, .seq = e->seq};
    op->attention(be, e->q, e->k, e->v, &e->kv, &ab, e->n_head, e->n_head_kv, e->head_dim,
                  1.0f / sqrtf((float)e->head_dim), e->att);
    /* the residual: g itself, or its norm (norm_before_residual, RedHat's speculators) */
    op->copy(be, e->x, e->norm_before_residual ? e->gn : g, (size_t)n * row);
    bk_matmul_add(be, &e->wo, e->att, n, e->xb, e->x);

    bk_norm_swiglu(be, e->x, &e->ffn_norm, e->rms_eps, e->xb, n, &e->w_gate, &e->w_up, e->hb2, e->hb);
    bk_matmul_add(be, &e->w_down, e->hb, n, e->xb, e->x);
    e->len = pos0 + n;
    e->n_last = n;
    if (e->gpu) BK_TRY(op->read(be, e->x, e->h_x, (size_t)n * row)); /* (read waits for the device) */
    if (!logits) return BRISK_OK;
    op->rms_norm(be, e->x + (size_t)(n - 1) * d, &e->output_norm, e->out, 1, (int)d, e->rms_eps);
    const bk_weight *wout = &e->output;
    op->matmul(be, 1, &wout, NULL, e->out, 1, e->d2t ? &e->dlogits : &e->logits);
    /* host views of the logits (the CPU backend's memory is the host's; a GPU's are read back) */
    float *lg = e->gpu ? e->h_logits : e->logits, *dl = e->gpu ? e->h_dlogits : e->dlogits;
    if (e->gpu) BK_TRY(op->read(be, e->d2t ? e->dlogits : e->logits, e->d2t ? dl : lg,
                                (size_t)(e->d2t ? e->n_draft : e->n_vocab) * sizeof(float)));
    if (e->d2t) {
        for (int i = 0; i < e->n_vocab; i++) lg[i] = -INFINITY;
        for (int i = 0; i < e->n_draft; i++) lg[e->d2t[i]] = dl[i];
    }
    e->have_logits = true;
    return BRISK_OK;
}

const float *eagle3_hidden(const eagle3 *e, int i) {
    return i >= 0 && i < e->n_last ? (e->gpu ? e->h_x : e->x) + (size_t)i * e->n_embd : NULL;
}

const float *eagle3_logits(const eagle3 *e) { return e->have_logits ? (e->gpu ? e->h_logits : e->logits) : NULL; }
