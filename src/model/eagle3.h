/* eagle3.h — an EAGLE-3 drafter (llama.cpp's "eagle3" GGUF arch) and its forward pass.
 *
 * EAGLE-3 drafts from the target's own features: the inputs of three target
 * layers (eagle3.target_layers, "low, mid, high") at each position P,
 * concatenated, are fused into one row by fc:
 *
 *   g_P = fc(enc_norm?(concat(x_l0, x_l1, x_l2)_P))          (n_embd_tgt * 3 -> n_embd)
 *
 * and one decoder layer (blk.0) takes the pair (token t_{P+1}, g_P) at RoPE
 * position P:
 *
 *   a = [attn_norm(embed(t_{P+1})) ; attn_norm_2(g_P)]          (2 n_embd)
 *   x = Wo attention(rope(Wq a), rope(Wk a), Wv a) + (norm_before_residual ? attn_norm_2(g_P) : g_P)
 *   x += Wdown(silu(Wgate ffn_norm(x)) * Wup ffn_norm(x))
 *   h = x (the "prenorm" row: the next chained step's g), logits = output(output_norm(x))
 *
 * The embedding (token_embd) and the LM head (output) are the drafter's own
 * when the file has them, else the target's. The attention has its own KV
 * cache of one sequence (f32, n_ctx positions), cut back with eagle3_cut.
 * llama.cpp's RoPE for the arch is NORM over the whole head.
 *
 * A reduced draft vocabulary (d2t: the target id of each LM-head row) gives
 * the other tokens' logits as -inf, as llama.cpp does. RoPE scaling (Llama 3's
 * rope_freqs, eagle3.rope.scaling.* linear or YaRN) as llama.cpp resolves it.
 * Not supported (BRISK_ERR_UNSUPPORTED): more than one layer. It runs where the target's last layer runs: on
 * the CPU (its own CPU backend of n_threads) from the file's map, or on that GPU (its own CUDA backend, device
 * copies of its weights; its inputs uploaded and its outputs read back, n_embd floats an entry). */
#ifndef BK_EAGLE3_H
#define BK_EAGLE3_H
#include "brisk.h"

typedef struct eagle3 eagle3;

/* Opens the drafter at path for target (borrowed: its embedding or LM head may serve; free the drafter
 * first), a KV cache of n_ctx positions. BRISK_ERR_FORMAT / UNSUPPORTED with a message for a file
 * that is not an EAGLE-3 drafter of this target. */
brisk_status eagle3_open(const char *path, const brisk_model *target, int n_ctx, int n_threads, eagle3 **out);
/* Another drafter of the same file and target (a server's slot): base's weights, file map and CPU backend,
 * shared (never used by two at once), its own cache of n_ctx positions and scratch. Any of them may be
 * freed first. */
brisk_status eagle3_open_sibling(const eagle3 *base, int n_ctx, eagle3 **out);
void eagle3_free(eagle3 *e);

int eagle3_n_embd(const eagle3 *e);           /* the drafter's width (g and h rows) */
const int32_t *eagle3_target_layers(const eagle3 *e); /* (3) target layers whose inputs fc fuses */
int eagle3_max_batch(const eagle3 *e);        /* entries per eagle3_encode / eagle3_decode call */

/* g (n, n_embd) = fc over feat (n, 3 n_embd_tgt): the three layers' rows side by side. */
brisk_status eagle3_encode(eagle3 *e, const float *feat, int n, float *g);
/* Decodes n (<= eagle3_max_batch) entries: tokens[i] with g row i at position pos0 + i (the cache holds
 * exactly pos0 positions before it). Each entry's h through eagle3_hidden; with logits, the last entry's
 * logits through eagle3_logits. */
brisk_status eagle3_decode(eagle3 *e, const int32_t *tokens, const float *g, int32_t pos0, int n, bool logits);
const float *eagle3_hidden(const eagle3 *e, int i); /* entry i of the last decode (n_embd), or NULL */
const float *eagle3_logits(const eagle3 *e);        /* (n_vocab) of the last decode's last entry, or NULL */
int32_t eagle3_len(const eagle3 *e);                /* positions in the cache */
void eagle3_cut(eagle3 *e, int32_t keep);           /* keeps positions [0, keep) */
/* Grows the cache to n positions (<= n_ctx) with blank pairs (zero K and V): a prefix the target reused
 * without decoding it, which the drafter never saw (its drafts are worse there; a server slot's). */
brisk_status eagle3_extend_blank(eagle3 *e, int32_t n);
#endif
