// spec.c — llamacpp-ref's speculative drafters: mtp and eagle3 (see harness.h, usage() in harness.c).
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "harness.h"

// ---------------------------------------------------------------------------
// mtp: the multi-token-prediction head (Qwen3.5/3.6 nextn layers) as common/speculative.cpp's
// draft-mtp drives it, through the same calls: the model loaded with load_mtp, a second context of
// type LLAMA_CONTEXT_TYPE_MTP, and the staging API of src/llama-ext.h (C++ symbols, resolved by their
// mangled names) for the target's final-norm hidden states h ("h_nextn") and the head's own.
// 1. The target decodes the prompt p[0, N) (h of every position kept, unmasked), its greedy token t.
// 2. The head catches up on the prompt in one batch: entry i = (p[i], h[i-1]) at position i, entry 0
//    with a zero h (speculative.cpp's first pending_h), logits for every entry.
// 3. n chained drafts: (t, h[N-1]) at N, then (draft j, the head's own h of step j) at N + 1 + j.
// Prints t and the n drafts; --logits-out gets the N + n rows (eval's file layout).

typedef void (*set_nextn_fn)(struct llama_context *, bool, bool);
typedef float *(*get_nextn_fn)(struct llama_context *);
typedef float *(*get_nextn_ith_fn)(struct llama_context *, int32_t);

/* The chained drafts both drafters run after their catch-up: draft j decodes token out[j] at position
 * pos0 + j with the last output row h as its embedding; out[j + 1] is its argmax and h its new
 * output row; each draft's logits go to lf when set. Returns 0 or the failure's code. */
static int chain_drafts(struct llama_context *dft, get_nextn_ith_fn get_nextn_ith, struct llama_batch *b,
                        llama_token *out, float *h, int n_draft, int pos0, int d, int n_vocab, FILE *lf,
                        const struct opts *o, const char *what) {
    for (int j = 0; j < n_draft; j++) {
        b->n_tokens = 0;
        batch_put(b, out[j], pos0 + j, 0, true);
        memcpy(b->embd, h, sizeof(float) * (size_t)d);
        if (L.llama_decode(dft, *b) != 0) return fail("%s decode %d failed: %s", what, j, llama_error());
        const float *lg = L.llama_get_logits_ith(dft, 0);
        out[j + 1] = argmax(lg, n_vocab);
        memcpy(h, get_nextn_ith(dft, 0), sizeof(float) * (size_t)d);
        if (lf && fwrite(lg, sizeof(float), (size_t)n_vocab, lf) != (size_t)n_vocab)
            return fail("cannot write %s: %s", o->logits_out, strerror(errno));
    }
    return 0;
}

int cmd_mtp(const struct opts *o) {
    if (!o->p) return fail("mtp needs -p \"IDS\"");
    set_nextn_fn set_nextn = (set_nextn_fn)dlsym(L.llama, "_Z26llama_set_embeddings_nextnP13llama_contextbb");
    get_nextn_fn get_nextn = (get_nextn_fn)dlsym(L.llama, "_Z26llama_get_embeddings_nextnP13llama_context");
    get_nextn_ith_fn get_nextn_ith =
        (get_nextn_ith_fn)dlsym(L.llama, "_Z30llama_get_embeddings_nextn_ithP13llama_contexti");
    if (!set_nextn || !get_nextn || !get_nextn_ith) return fail("this libllama has no llama_*_embeddings_nextn");
    llama_token *prompt = NULL;
    int n_prompt = 0, n_draft = o->n_gen < 0 ? 4 : o->n_gen;
    if (parse_id_list(o->p, &prompt, &n_prompt)) return 1;
    struct llama_model_params mp = L.llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.load_mode = LLAMA_LOAD_MODE_MMAP;
    mp.use_extra_bufts = false;
    mp.load_mtp = true;
    clear_error();
    struct llama_model *m = L.llama_model_load_from_file(o->model, mp);
    if (!m) return free(prompt), fail("cannot load model '%s': %s", o->model, llama_error());
    const int n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(m)), n_embd = L.llama_model_n_embd(m);
    struct llama_context_params cp = L.llama_context_default_params();
    cp.n_ctx = (uint32_t)(n_prompt + n_draft + 16);
    cp.n_batch = cp.n_ubatch = (uint32_t)(n_prompt > 512 ? n_prompt : 512);
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = o->n_threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = cp.type_v = o->kv_type;
    cp.no_perf = true;
    struct llama_context *tgt = L.llama_init_from_model(m, cp), *dft = NULL;
    cp.ctx_type = LLAMA_CONTEXT_TYPE_MTP;
    cp.ctx_other = tgt;
    if (tgt) dft = L.llama_init_from_model(m, cp);
    int rc = tgt && dft ? 0 : fail("cannot create the target and MTP contexts: %s", llama_error());
    FILE *lf = NULL;
    if (rc == 0 && o->logits_out) {
        int32_t hdr[2] = {n_vocab, n_prompt + n_draft};
        lf = fopen(o->logits_out, "wb");
        if (!lf || fwrite(hdr, sizeof hdr, 1, lf) != 1) rc = fail("cannot write %s: %s", o->logits_out, strerror(errno));
    }
    struct llama_batch b = L.llama_batch_init(n_prompt, n_embd, 1); // embd rows; the tokens beside them:
    llama_token *tok = malloc(sizeof *tok * (size_t)n_prompt);     // speculative.cpp's MTP batch carries both
    float *h = calloc((size_t)n_embd, sizeof *h);
    llama_token *out = malloc(sizeof *out * (size_t)(n_draft + 1));
    if (rc == 0 && (!tok || !h || !out)) rc = fail("out of memory");
    if (rc == 0) {
        set_nextn(tgt, true, false); // every position's h
        set_nextn(dft, true, true);  // the head's output rows
        b.token = tok;
        for (int i = 0; i < n_prompt; i++) batch_put(&b, prompt[i], i, 0, i == n_prompt - 1);
        struct llama_batch tb = b;
        tb.embd = NULL;
        if (L.llama_decode(tgt, tb) != 0) rc = fail("target decode failed: %s", llama_error());
    }
    if (rc == 0) {
        out[0] = argmax(L.llama_get_logits_ith(tgt, -1), n_vocab);
        const float *ht = get_nextn(tgt); // (n_prompt, n_embd)
        memset(b.embd, 0, sizeof(float) * (size_t)n_embd);
        memcpy(b.embd + n_embd, ht, sizeof(float) * (size_t)n_embd * (size_t)(n_prompt - 1));
        memcpy(h, ht + (size_t)(n_prompt - 1) * n_embd, sizeof(float) * (size_t)n_embd);
        for (int i = 0; i < n_prompt; i++) b.logits[i] = true;
        if (L.llama_decode(dft, b) != 0) rc = fail("MTP catch-up decode failed: %s", llama_error());
        for (int i = 0; i < n_prompt && rc == 0 && lf; i++)
            if (fwrite(L.llama_get_logits_ith(dft, i), sizeof(float), (size_t)n_vocab, lf) != (size_t)n_vocab)
                rc = fail("cannot write %s: %s", o->logits_out, strerror(errno));
    }
    if (rc == 0)
        rc = chain_drafts(dft, get_nextn_ith, &b, out, h, n_draft, n_prompt, n_embd, n_vocab, lf, o, "MTP draft");
    if (lf && fclose(lf) != 0 && rc == 0) rc = fail("cannot write %s: %s", o->logits_out, strerror(errno));
    if (rc == 0) print_ids(out, n_draft + 1);
    free(out);
    free(h);
    b.token = NULL; // ours: llama_batch_free frees only what llama_batch_init made (embd then)
    free(tok);
    L.llama_batch_free(b);
    if (dft) L.llama_free(dft);
    if (tgt) L.llama_free(tgt);
    L.llama_model_free(m);
    free(prompt);
    return rc;
}

// ---------------------------------------------------------------------------
// eagle3: an EAGLE-3 drafter (DRAFT, the first positional argument) for the target -m as
// common/speculative.cpp's draft-eagle3 drives it: the drafter's context gets ctx_other = the target's
// (its embedding or LM head may be the target's), the target's inputs of the drafter's three layers are
// kept (llama_set_embeddings_layer_inp), llama_encode runs fc over them, and each decoder entry pairs a
// token with a g row (token and embd set in one batch).
// 1. The target decodes the prompt p[0, N), its greedy token t; g = fc(features) for every position.
// 2. Catch-up: entries (p[k+1], g[k]) at position k for k < N - 1, logits for every entry.
// 3. n chained drafts: (t, g[N-1]) at N - 1, then (draft j, the drafter's own output h of step j).
// Prints t and the n drafts; --logits-out gets the N - 1 + n rows.

typedef void (*set_layer_inp_fn)(struct llama_context *, uint32_t, bool);
typedef float *(*get_layer_inp_fn)(struct llama_context *, uint32_t);
typedef const int32_t *(*target_layers_fn)(const struct llama_model *);

int cmd_eagle3(const struct opts *o) {
    if (!o->p || o->n_pos < 1) return fail("eagle3 needs -m TARGET DRAFT -p \"IDS\"");
    set_nextn_fn set_nextn = (set_nextn_fn)dlsym(L.llama, "_Z26llama_set_embeddings_nextnP13llama_contextbb");
    get_nextn_fn get_nextn = (get_nextn_fn)dlsym(L.llama, "_Z26llama_get_embeddings_nextnP13llama_context");
    get_nextn_ith_fn get_nextn_ith =
        (get_nextn_ith_fn)dlsym(L.llama, "_Z30llama_get_embeddings_nextn_ithP13llama_contexti");
    set_layer_inp_fn set_inp = (set_layer_inp_fn)dlsym(L.llama, "_Z30llama_set_embeddings_layer_inpP13llama_contextjb");
    get_layer_inp_fn get_inp = (get_layer_inp_fn)dlsym(L.llama, "_Z30llama_get_embeddings_layer_inpP13llama_contextj");
    target_layers_fn layers_of = (target_layers_fn)dlsym(L.llama, "_Z28llama_model_target_layer_idsPK11llama_model");
    int (*encode)(struct llama_context *, struct llama_batch) = dlsym(L.llama, "llama_encode");
    if (!set_nextn || !get_nextn || !get_nextn_ith || !set_inp || !get_inp || !layers_of || !encode)
        return fail("this libllama lacks the EAGLE-3 staging API");
    llama_token *prompt = NULL;
    int n_prompt = 0, n_draft = o->n_gen < 0 ? 4 : o->n_gen;
    if (parse_id_list(o->p, &prompt, &n_prompt)) return 1;
    if (n_prompt < 2) return free(prompt), fail("eagle3 needs a prompt of two or more tokens");
    struct llama_model_params mp = L.llama_model_default_params();
    mp.n_gpu_layers = 0;
    mp.load_mode = LLAMA_LOAD_MODE_MMAP;
    mp.use_extra_bufts = false;
    clear_error();
    struct llama_model *m = L.llama_model_load_from_file(o->model, mp), *dm = NULL;
    if (m) dm = L.llama_model_load_from_file(o->pos[0], mp);
    if (!m || !dm) return free(prompt), fail("cannot load %s and %s: %s", o->model, o->pos[0], llama_error());
    const int n_vocab = L.llama_vocab_n_tokens(L.llama_model_get_vocab(m)), d_tgt = L.llama_model_n_embd(m);
    const int d = L.llama_model_n_embd(dm);
    const int32_t *ids = layers_of(dm);
    struct llama_context_params cp = L.llama_context_default_params();
    cp.n_ctx = (uint32_t)(n_prompt + n_draft + 16);
    cp.n_batch = cp.n_ubatch = (uint32_t)(n_prompt > 512 ? n_prompt : 512);
    cp.n_seq_max = 1;
    cp.n_threads = cp.n_threads_batch = o->n_threads;
    cp.flash_attn_type = LLAMA_FLASH_ATTN_TYPE_DISABLED;
    cp.type_k = cp.type_v = o->kv_type;
    cp.no_perf = true;
    struct llama_context *tgt = L.llama_init_from_model(m, cp), *dft = NULL;
    cp.ctx_other = tgt;
    if (tgt) dft = L.llama_init_from_model(dm, cp);
    int rc = tgt && dft ? 0 : fail("cannot create the target and drafter contexts: %s", llama_error());
    FILE *lf = NULL;
    if (rc == 0 && o->logits_out) {
        int32_t hdr[2] = {n_vocab, n_prompt - 1 + n_draft};
        lf = fopen(o->logits_out, "wb");
        if (!lf || fwrite(hdr, sizeof hdr, 1, lf) != 1) rc = fail("cannot write %s: %s", o->logits_out, strerror(errno));
    }
    struct llama_batch b = L.llama_batch_init(n_prompt, 3 * d_tgt > d ? 3 * d_tgt : d, 1);
    llama_token *tok = malloc(sizeof *tok * (size_t)n_prompt), *out = malloc(sizeof *out * (size_t)(n_draft + 1));
    float *g = malloc(sizeof *g * (size_t)n_prompt * d), *h = malloc(sizeof *h * (size_t)d);
    if (rc == 0 && (!tok || !out || !g || !h)) rc = fail("out of memory");
    if (rc == 0) {
        for (int k = 0; k < 3; k++) set_inp(tgt, (uint32_t)ids[k], true);
        set_nextn(dft, true, true); // the encoder's g rows and the decoder's output h
        b.token = tok;
        for (int i = 0; i < n_prompt; i++) batch_put(&b, prompt[i], i, 0, i == n_prompt - 1);
        struct llama_batch tb = b;
        tb.embd = NULL;
        if (L.llama_decode(tgt, tb) != 0) rc = fail("target decode failed: %s", llama_error());
    }
    if (rc == 0) { // features side by side per position, then fc
        out[0] = argmax(L.llama_get_logits_ith(tgt, -1), n_vocab);
        for (int k = 0; k < 3; k++) {
            const float *x = get_inp(tgt, (uint32_t)ids[k]);
            for (int i = 0; i < n_prompt; i++)
                memcpy(b.embd + ((size_t)i * 3 + k) * d_tgt, x + (size_t)i * d_tgt, sizeof(float) * (size_t)d_tgt);
        }
        struct llama_batch eb = {.n_tokens = n_prompt, .embd = b.embd};
        if (encode(dft, eb) != 0) rc = fail("drafter encode failed: %s", llama_error());
        else memcpy(g, get_nextn(dft), sizeof(float) * (size_t)n_prompt * d);
    }
    if (rc == 0) {
        b.n_tokens = 0;
        for (int k = 0; k < n_prompt - 1; k++) batch_put(&b, prompt[k + 1], k, 0, true);
        memcpy(b.embd, g, sizeof(float) * (size_t)(n_prompt - 1) * d);
        if (L.llama_decode(dft, b) != 0) rc = fail("drafter catch-up decode failed: %s", llama_error());
        for (int i = 0; i < n_prompt - 1 && rc == 0 && lf; i++)
            if (fwrite(L.llama_get_logits_ith(dft, i), sizeof(float), (size_t)n_vocab, lf) != (size_t)n_vocab)
                rc = fail("cannot write %s: %s", o->logits_out, strerror(errno));
        memcpy(h, g + (size_t)(n_prompt - 1) * d, sizeof(float) * (size_t)d);
    }
    if (rc == 0) rc = chain_drafts(dft, get_nextn_ith, &b, out, h, n_draft, n_prompt - 1, d, n_vocab, lf, o, "drafter");
    if (lf && fclose(lf) != 0 && rc == 0) rc = fail("cannot write %s: %s", o->logits_out, strerror(errno));
    if (rc == 0) print_ids(out, n_draft + 1);
    b.token = NULL;
    L.llama_batch_free(b);
    free(tok), free(out), free(g), free(h);
    if (dft) L.llama_free(dft);
    if (tgt) L.llama_free(tgt);
    L.llama_model_free(dm);
    L.llama_model_free(m);
    free(prompt);
    return rc;
}
