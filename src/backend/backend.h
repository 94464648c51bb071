/* backend.h — the narrow op interface between an architecture's forward pass
 * and the device that runs it.
 *
 * An architecture file (src/model/<arch>.c) calls these ops; it never knows
 * which device runs them. A backend never knows which architecture calls it.
 * The CPU backend (backend/cpu/) is always built and is the reference every
 * other backend is tested against.
 *
 * Memory: activations, scratch and the KV cache are backend memory, obtained
 * once from alloc() at context creation ("sizes first, then allocate once");
 * no op allocates. Pointers passed to ops are backend pointers (host pointers
 * on the CPU, device pointers on a GPU). Activations are f32, row-major
 * (n_tokens, width).
 */
#ifndef BK_BACKEND_H
#define BK_BACKEND_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "brisk.h"

/* A weight matrix y = W x with W (n_out, n_in) stored row by row in a ggml
 * type (ne[0] = n_in), or a vector (n_out = 1) such as a norm weight.
 *
 * A MoE expert tensor (GGUF ne {n_in, rows, n_expert}) is one bk_weight of
 * n_out = n_expert * rows rows: expert e owns the contiguous rows
 * [e * rows, (e + 1) * rows), so n_out * row_bytes is still the whole tensor.
 *
 * expert_ptrs, when set (moe_ffn's expert tensors only), places each expert on
 * its own: expert e's rows start at expert_ptrs[e] (rows * row_bytes bytes, at
 * least 16-byte aligned, readable for 256 bytes past the end), and host / dev are
 * not read. The array (n_expert) is backend memory read by the op when it runs, so
 * a CUDA graph that captured the op follows later changes of its entries; an entry
 * may point at device memory or at mapped host memory (moe.c's expert cache:
 * a GPU slot, or the expert's bytes in pinned host memory read over PCIe). */
typedef struct bk_weight {
    const char *name;   /* tensor name, for messages */
    uint32_t type;      /* ggml type id */
    int64_t n_in;       /* elements per row (ne[0]) */
    int64_t n_out;      /* rows (all experts' rows for an expert tensor) */
    size_t row_bytes;   /* bytes per row */
    const void *host;   /* mapped file data */
    void *dev;          /* backend copy, or NULL when the backend reads host memory */
    int n_expert;       /* experts stacked in the rows (0 or 1: an ordinary matrix) */
    const void *const *expert_ptrs; /* (n_expert) backend memory: each expert's first row, or NULL (see above) */
    bool dev_pooled;    /* dev lies in its backend's weight pool, freed with that backend (not alone) */
} bk_weight;

typedef enum bk_rope_mode { BK_ROPE_NORM = 0, BK_ROPE_NEOX = 2 } bk_rope_mode;

typedef struct bk_rope_params {
    int n_rot;            /* dims rotated per head (<= head_dim) */
    bk_rope_mode mode;    /* NORM: pairs (2i, 2i+1); NEOX: pairs (i, i + n_rot/2) */
    float freq_base;      /* theta */
    float freq_scale;     /* 1/linear factor */
    float ext_factor;     /* YaRN mix (0: off) */
    float attn_factor;    /* YaRN magnitude scale */
    float beta_fast, beta_slow;
    int n_ctx_orig;       /* YaRN original context */
    const float *freq_factors; /* (n_rot/2) or NULL (Llama 3 rope_freqs) */
} bk_rope_params;

/* The paged KV cache of one layer as the attention op sees it. Page p of
 * layer l holds block_size token slots of kv_dim values (K and V apart). */
typedef struct bk_kv_view {
    void *k;             /* (n_pages, block_size, n_head_kv, head_dim) in kv_type */
    void *v;             /* same shape */
    int kv_type;         /* brisk_kv_type (see bk_kv_block_bytes) */
    int block_size;      /* tokens per page */
    /* A recurrent (Gated DeltaNet) layer has no pages (k, v NULL) but a fixed
     * state per sequence slot; slot n_seq_max stays zero (brisk_seq_clear
     * copies it). Both NULL for an attention layer. */
    float *conv;         /* (n_seq_max + 1, d_conv - 1, conv_dim) the short conv's last inputs, oldest first */
    float *ssm;          /* (n_seq_max + 1, n_v_heads, d_state, d_state) delta-rule state, row = value dim */
    /* The layer's inputs of the context's last pass when it had at most BK_REC_KEEP entries: its conv
     * input rows (conv_dim), then its beta and decay logits (n_v_heads each), each part BK_REC_KEEP rows
     * long; a rollback replays the state from a checkpoint through them (engine/context.c). NULL: not kept. */
    float *rec_in;
    /* Block-sparse attention (opt-in; the CPU backend's, cpu_attn_sparse.h): each page's per-channel
     * min and max of its keys as the cache holds them (dequantized; q4_0h: the rotated keys), which
     * bound q.k over the page, and the pages each query group reads. ksum NULL: dense attention. */
    float *ksum;         /* (n_pages, 2, n_head_kv * head_dim) min row, then max row; backend memory */
    int sparse_k;        /* pages read per query group, the first page and the local window included */
    int64_t *sparse_stats; /* (5) recall counters (cpu_attn_sparse.h), NULL: not measured */
} bk_kv_view;

#define BK_REC_KEEP 16 /* entries of a pass whose recurrent inputs are kept (a speculative verify: 1 + drafts) */

/* Bytes of one 32-value block of a quantized KV type (q8_0 34, q4_0 18: ggml's
 * layouts, f16 scale first), 0 for f32 and f16, whose elements are addressed
 * one by one. Element e of a quantized row lies in block e / 32, so a row of a
 * head starts at a block boundary only when head_dim % 32 == 0 (checked at
 * context creation). */
static inline size_t bk_kv_block_bytes(int kv_type) {
    return kv_type == BRISK_KV_Q8_0 ? 34 : kv_type == BRISK_KV_Q4_0 || kv_type == BRISK_KV_Q4_0H ? 18 : 0;
}

/* Where each batch entry's K/V goes and what it attends to. */
typedef struct bk_attn_batch {
    int n_tokens;
    const int32_t *pos;        /* (n_tokens) position of each entry */
    const int32_t *slot;       /* (n_tokens) cache slot = page * block_size + offset, for the write */
    const int32_t *const *block_table; /* (n_tokens) -> pages of the entry's sequence */
    const int32_t *seq;        /* (n_tokens) sequence of each entry (the recurrent state slot) */
    /* entry i attends to positions [0, pos[i]] of its sequence */
} bk_attn_batch;

/* One transfer of a p2p group: n floats of backend memory to (send) or from rank peer. */
typedef struct bk_p2p {
    float *buf;
    size_t n;
    int peer;
    bool send;
} bk_p2p;

/* One forward pass's inputs, shown to the backend before its ops (see step_begin). */
typedef struct bk_step {
    int n_tokens;
    const int32_t *tokens;    /* (n_tokens) the ids get_rows will receive */
    const bk_attn_batch *ab;  /* positions, slots and tables rope and attention will receive */
    int kv_block_size;        /* tokens per cache page */
    int n_out;                /* entries that want logits */
    const int32_t *out_idx;   /* (n_out) */
    const bk_weight *emb;     /* the token embedding get_rows will read, when the pass starts with it
                                 (a GPU backend gathers rows of one kept in host memory here); or NULL */
    int variant;              /* which optional ops the pass issues for the same batch shape (bit 0: it keeps
                                 every entry's final-norm h, bit 1: layer inputs for EAGLE-3), so that a
                                 graph captured before a target started keeping them is not replayed */
} bk_step;

typedef struct bk_backend bk_backend;

#define BK_MOE_MAX_EXPERTS 1024 /* as llama.cpp's LLAMA_MAX_EXPERTS */

/* One attention block's inputs as the QKV product leaves them, for attention_rope: q's heads at q_src
 * (n * n_head rows of head_dim, q_pitch floats apart), k and v (n, n_head_kv * head_dim); q (scratch
 * for the rotated q, n * n_head * head_dim) and k are written when the ops run one by one. */
typedef struct bk_attn_rope_in {
    const float *q_src;
    int q_pitch;
    float *q, *k;
    const float *v;
    const bk_weight *q_norm, *k_norm; /* QK-norm weights, NULL: none */
    float eps;
    const bk_rope_params *rope;
    const float *gate; /* the output gate (see attention_gated), NULL: none */
    int gate_pitch;
} bk_attn_rope_in;

typedef struct bk_backend_ops {
    const char *name;
    void (*free)(bk_backend *be);
    /* Memory for activations, scratch and caches (zeroed). */
    brisk_status (*alloc)(bk_backend *be, size_t bytes, void **out);
    void (*release)(bk_backend *be, void *p);
    /* Makes a weight usable by this backend (the CPU reads the mapping in place). */
    brisk_status (*bind_weight)(bk_backend *be, bk_weight *w);

    /* out[i,:] = row ids[i] of emb, dequantized to f32. */
    void (*get_rows)(bk_backend *be, const bk_weight *emb, const int32_t *ids, int n, float *out);
    /* y = x / rms(x) * w over rows of width dim (y may alias x). w is an f32 vector. */
    void (*rms_norm)(bk_backend *be, const float *x, const bk_weight *w, float *y, int n_rows,
                     int dim, float eps);
    /* For each of n_w matrices: y[j] (n, W[j].n_out) = x (n, n_in) W[j]^T (+ bias[j] if set).
     * One call for matrices sharing an input (q/k/v, gate/up) lets the backend
     * convert x once and run them as one parallel job. */
    void (*matmul)(bk_backend *be, int n_w, const bk_weight *const *w, const bk_weight *const *bias,
                   const float *x, int n, float *const *y);
    /* Rotates n_heads heads of head_dim in x (n, n_heads*head_dim) at positions pos. */
    void (*rope)(bk_backend *be, float *x, int n, int n_heads, int head_dim, const int32_t *pos,
                 const bk_rope_params *rp);
    /* Writes k, v (n, n_head_kv*head_dim) into the cache slots, then
     * out (n, n_head*head_dim) = softmax(q k^T * scale, causal) v per head, GQA.
     * k = v = NULL: the step's rows are in the cache already (qk_norm_rope_kv returned true). */
    void (*attention)(bk_backend *be, const float *q, const float *k, const float *v,
                      const bk_kv_view *kv, const bk_attn_batch *ab, int n_head, int n_head_kv,
                      int head_dim, float scale, float *out);
    /* out = silu(gate) * up, elementwise over n values. */
    void (*swiglu)(bk_backend *be, const float *gate, const float *up, float *out, size_t n);
    /* x += y, n values. */
    void (*add)(bk_backend *be, float *x, const float *y, size_t n);
    /* Optional (NULL: matmul then add, see bk_matmul_add): y (n, W.n_out) += x W^T,
     * the residual add folded into the product (a GPU saves a kernel and a
     * pass over y). x and y do not overlap. */
    void (*matmul_add)(bk_backend *be, const bk_weight *w, const float *x, int n, float *y);
    /* Optional (NULL: bk_matmul_swiglu's matmul + swiglu): out (n, n_ff) = silu(x Wgate^T) * (x Wup^T),
     * the FFN's two products and its gate in one pass (a GPU reads x once and never stores the
     * two products); tmp (n, n_ff) is scratch a backend may use when it cannot fuse. */
    void (*matmul_swiglu)(bk_backend *be, const bk_weight *gate, const bk_weight *up, const float *x, int n,
                          float *tmp, float *out);
    /* Optional (NULL: bk_qk_norm_rope's rms_norm + rope per tensor): the per-head RMS norm of q and k
     * (when q_norm / k_norm are set: weights of head_dim) and their rotation, in place, one pass.
     * q (n, n_head*head_dim), k (n, n_head_kv*head_dim). */
    void (*qk_norm_rope)(bk_backend *be, float *q, float *k, int n, int n_head, int n_head_kv, int head_dim,
                         const bk_weight *q_norm, const bk_weight *k_norm, float eps, const int32_t *pos,
                         const bk_rope_params *rp);
    /* Copies backend memory to host (the logits), and waits for the device. */
    brisk_status (*read)(bk_backend *be, const void *src, void *dst, size_t bytes);
    /* Copies between two cache pages (copy-on-write of shared pages). */
    void (*copy)(bk_backend *be, void *dst, const void *src, size_t bytes);

    /* Optional (NULL on the CPU): a forward pass bracketed as one step, so a
     * GPU backend can upload the step's inputs once and replay a captured
     * graph of the whole pass. The ops between them must receive the step's
     * own arrays (tokens, ab). step_begin sets *replayed when the backend has
     * already run the pass: the caller then issues no ops and no step_end.
     * Otherwise the caller issues the ops, then step_end; when step_end sets
     * *rerun (a capture failed), the caller issues the same ops once more and
     * they run eagerly (no second step_end). */
    brisk_status (*step_begin)(bk_backend *be, const bk_step *st, bool *replayed);
    brisk_status (*step_end)(bk_backend *be, bool *rerun);

    /* ---- mixture of experts (n_expert <= BK_MOE_MAX_EXPERTS) ---- */
    /* The router, per token t < n: p = softmax(logits[t]) over n_expert (fp32);
     * ids[t] (k) = the k most probable experts, most probable first (ties: the
     * lower id); weights[t] (k) = their p, divided by their sum when norm (the
     * sum clamped below at 2^-14, as llama.cpp does), times scale when scale is
     * not 0 or 1. logits (n, n_expert), ids and weights (n, k): backend memory. */
    void (*moe_route)(bk_backend *be, const float *logits, int n, int n_expert, int k, bool norm,
                      float scale, int32_t *ids, float *weights);
    /* out (n, n_embd) = sum over j < k, in j order, of
     *   weights[t,j] * down_e (silu(gate_e x[t]) * up_e x[t]),  e = ids[t,j],
     * with gate, up (n_expert * n_ff, n_embd) and down (n_expert * n_embd, n_ff)
     * expert tensors (bk_weight.n_expert). The batch is grouped by expert, so
     * an active expert's weights are read once per call; experts no token
     * chose are not read. An entry whose id is < 0 is skipped, as if its weight
     * were 0 (a row with none is 0): moe.c splits one routing between a
     * GPU's expert cache and the CPU this way, and a tensor-parallel rank
     * keeps the slots of its own experts (moe_ids_local; k may then exceed
     * the n_expert it holds). x (n, n_embd), out: backend memory, not aliased. */
    void (*moe_ffn)(bk_backend *be, const bk_weight *gate, const bk_weight *up, const bk_weight *down,
                    const float *x, int n, const int32_t *ids, const float *weights, int k, float *out);

    /* ---- Gated DeltaNet (qwen35); see backend/cpu/cpu_ssm.c ----
     * A batch may hold entries of several sequences, each sequence's entries
     * in position order; seq (n) picks each entry's state slot. conv and ssm
     * are a layer's bk_kv_view.conv / .ssm and are updated in place. */
    /* out[t,c] = silu(sum_j w[c,j] * u[j]) over the window u = the d_conv - 1
     * carried inputs of entry t's sequence then x[t,c]; the window's tail
     * becomes the carried state. x, out (n, channels); w: ne {d_conv, channels} f32. */
    void (*ssm_conv)(bk_backend *be, const float *x, const bk_weight *w, float *conv, const int32_t *seq, int n,
                     int channels, int d_conv, float *out);
    /* The gated delta rule, per entry t and value head h, as llama.cpp computes it. Value head h
     * reads key head h % n_k_heads (the "tiled" order of qwen35 GGUFs) or, v_grouped, key head
     * h / (n_v_heads / n_k_heads) (HF's order, kept by qwen3next GGUFs):
     *   q, k = l2norm(q_t), l2norm(k_t) (x / max(|x|, eps)); beta = sigmoid(b[t,h]);
     *   g = a_scale[h] * softplus(a[t,h] + a_bias[h]);  S *= exp(g);
     *   S += beta (v - S k) k^T;  out[t,h] = S q / sqrt(d)          (S: d x d, row = value dim)
     * qkv (n, (2 * n_k_heads + n_v_heads) * d): q heads, k heads, v heads;
     * b, a (n, n_v_heads); a_bias (ssm_dt.bias), a_scale (ssm_a = -exp(A_log)): f32 vectors;
     * out (n, n_v_heads * d). */
    void (*gated_delta)(bk_backend *be, const float *qkv, const float *b, const float *a, const bk_weight *a_bias,
                        const bk_weight *a_scale, float *ssm, const int32_t *seq, int n, int n_k_heads,
                        int n_v_heads, bool v_grouped, int d, float eps, float *out);
    /* x[r,i] *= sigmoid(gate[r, gate_width == 1 ? 0 : i]) over n_rows rows of
     * width; gate (n_rows, gate_width), gate_width 1 or >= width (row r's gate
     * starts r * gate_width floats in). The output gate of gated attention
     * (rows of a head, gate_width = 2 * head_dim: read in place from the query|gate
     * rows) and of the shared expert (gate_width = 1). */
    void (*sigmoid_mul)(bk_backend *be, float *x, const float *gate, int n_rows, int width, int gate_width);

    /* Optional (NULL: one copy per row, see bk_copy_rows): n_rows rows of row_bytes from src
     * (rows src_pitch bytes apart) to dst (dst_pitch apart), in one operation. Splitting
     * interleaved heads (qwen35's query|gate rows) would otherwise be n * n_head copies. */
    void (*copy_rows)(bk_backend *be, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                      size_t row_bytes, size_t n_rows);

    /* Optional (NULL: one rank): x (n floats, backend memory) = its sum over the ranks of a
     * tensor-parallel group (engine/tp.h), in place, queued on the backend's stream like any op
     * (a CUDA graph captures it). The sharded forward pass calls it on the partial products of
     * the column-split weights (attention output, FFN down) before adding them to the residual. */
    void (*all_reduce)(bk_backend *be, float *x, size_t n);
    /* Optional (NULL: no pipeline parallelism on this backend): the sends and receives of
     * list[0..n) between ranks of a pipeline (engine/context.c's pp schedule) as one group, queued
     * on the backend's stream: they progress together, so two ranks that each send to and receive
     * from the other in one group cannot wait on each other. A send's buffer may be reused and a
     * receive's read by the ops queued after it. Fails (with a message) when the transport does. */
    brisk_status (*p2p)(bk_backend *be, const struct bk_p2p *list, int n);

    /* Optional (NULL: sigmoid_mul, add, add; see bk_gated_residual): x[r,i] += m[r,i] + s[r,i] *
     * sigmoid(gate[r]) in one pass, rounded as those three ops round (qwen35moe closes each MoE
     * layer so: routed experts m plus the gated shared expert s). m and s are scratch. */
    void (*gated_residual)(bk_backend *be, float *x, float *m, float *s, const float *gate, int n_rows, int width);
    /* Optional (NULL: matmul then moe_route, see bk_moe_router): the MoE router's logits (n, w.n_out)
     * = x W^T and the routing of moe_route on them, in one pass where the backend can (a GPU's last
     * block to finish the product routes the token). w2 (NULL: none): a second product of the same
     * x, out2 (n, w2.n_out) = x W2^T, joined to the router's launch where it can (qwen35moe's shared
     * expert gate: one logit a token, else a launch of its own each MoE layer). */
    void (*moe_router)(bk_backend *be, const bk_weight *w, const float *x, int n, int k, bool norm, float scale,
                       float *logits, int32_t *ids, float *weights, const bk_weight *w2, float *out2);
    /* Expert parallelism (engine/shard.h's SHARD_EXPERTS): ids (n values, backend memory, in place)
     * made local to a rank that holds experts [e0, e1): an id in range becomes id - e0, any other -1,
     * so moe_ffn on the rank's expert slice skips the slot (its weight is left as it is). Needed
     * only by a sharded MoE model (NULL: such a model cannot run on the backend). */
    void (*moe_ids_local)(bk_backend *be, int32_t *ids, int n, int e0, int e1);
    /* Optional (NULL, or false returned with nothing launched: the separate ops): a MoE layer's end
     * in one pass where the backend can: with a gated shared expert (qwen35moe, qwen3next; gs, us,
     * ds: its gate, up and down, run as one more expert beside the routed ones)
     *   x += moe_ffn(h) + sigmoid(sh_logit) * down_s(silu(gate_s h) * up_s h)
     * rounded as moe_ffn, the shared expert's products, then gated_residual round (sh_logit (n));
     * without (gs, us, ds, sh_logit NULL: qwen3moe) x += moe_ffn(h), rounded as moe_ffn then add. */
    bool (*moe_ffn_shared)(bk_backend *be, const bk_weight *gate, const bk_weight *up, const bk_weight *down,
                           const bk_weight *gs, const bk_weight *us, const bk_weight *ds, const float *h, int n,
                           const int32_t *ids, const float *weights, int k, const float *sh_logit, float *x);
    /* Optional (NULL, or false returned with nothing launched: qk_norm_rope, and the attention writes
     * the cache): qk_norm_rope's work with q's heads read from q_src (n * n_head head rows, q_pitch
     * floats apart; q_src = q, q_pitch = head_dim: in place) into q, and the rotated k with v stored
     * into the cache slots of ab (as the attention would store them) instead of k (a GPU saves the
     * attention's cache-write launch, and with q_src a copy of q). The attention then gets k = v = NULL. */
    bool (*qk_norm_rope_kv)(bk_backend *be, float *q, const float *q_src, int q_pitch, float *k, const float *v, int n,
                            int n_head, int n_head_kv, int head_dim, const bk_weight *q_norm, const bk_weight *k_norm,
                            float eps, const int32_t *pos, const bk_rope_params *rp, const bk_kv_view *kv);
    /* Optional (NULL: ssm_conv, gated_delta, rms_norm, swiglu; see bk_gated_delta_gate): with conv_w,
     * x (n, (2 n_k_heads + n_v_heads) d) through ssm_conv (conv_w, its carried inputs conv, d_conv) into
     * conv_out (then scratch: its contents unspecified), else x is the rule's input; then gated_delta's
     * out, each head's d outputs RMS-normalised with norm (d) and gated: out = silu(z) * norm(out), z as
     * out (qwen35's Gated DeltaNet from its qkv product to the output projection), in one pass where
     * the backend can. */
    void (*gated_delta_gate)(bk_backend *be, const float *x, const bk_weight *conv_w, float *conv, int d_conv,
                             float *conv_out, const float *b, const float *a, const bk_weight *a_bias,
                             const bk_weight *a_scale, float *ssm, const int32_t *seq, int n, int n_k_heads,
                             int n_v_heads, bool v_grouped, int d, float eps, const bk_weight *norm, float norm_eps,
                             const float *z, float *out);
    /* Optional (NULL, or false returned with nothing launched: attention, then sigmoid_mul; see
     * bk_attention_gated): attention's out, each value (token t, head h, dimension d) then multiplied
     * by sigmoid(gate[(t * n_head + h) * gate_pitch + d]) as sigmoid_mul does (qwen35's output gate),
     * in the attention's own pass where the backend can. */
    bool (*attention_gated)(bk_backend *be, const float *q, const float *k, const float *v, const bk_kv_view *kv,
                            const bk_attn_batch *ab, int n_head, int n_head_kv, int head_dim, float scale,
                            const float *gate, int gate_pitch, float *out);
    /* Optional (NULL, or false returned with nothing launched: bk_qk_norm_rope_kv, then attention or
     * attention_gated; see bk_attention_rope): a decode step's QK-norm, rope, cache write and attention
     * from the QKV product's rows (in), each result as the separate ops give it (a GPU normalises and
     * rotates in the attention's own launch and takes the step's K/V row from there, not from the cache). */
    bool (*attention_rope)(bk_backend *be, const bk_attn_rope_in *in, const bk_kv_view *kv, const bk_attn_batch *ab,
                           int n_head, int n_head_kv, int head_dim, float scale, float *out);
} bk_backend_ops;

struct bk_backend {
    const bk_backend_ops *ops;
};

/* The CPU backend with n_threads workers (0: all cores). */
brisk_status bk_cpu_backend_new(int n_threads, bk_backend **out);
/* The same with its threads placed (brisk.h's brisk_cpu_placement; NULL: as bk_cpu_backend_new). */
brisk_status bk_cpu_backend_new_placed(int n_threads, const brisk_cpu_placement *place, bk_backend **out);
/* Bytes of the repacked weight copies (cpu_repack.h) a CPU backend has made
 * so far (each on the first pass that reads its matrix); 0 for another backend. */
size_t bk_cpu_weight_copy_bytes(const bk_backend *be);
/* Whether a CPU backend makes such copies of MoE expert tensors too (on at creation). The hot-expert
 * cache's miss backend turns it off: its misses are a minority of the routings, and a copy of
 * every expert it might run would double the host memory the cache is there to spare. No-op for
 * another backend. */
void bk_cpu_expert_copies(bk_backend *be, bool on);
/* y += x W^T through the backend's fused op, or as matmul into tmp (n, W.n_out) then add. */
static inline void bk_matmul_add(bk_backend *be, const bk_weight *w, const float *x, int n, float *tmp, float *y) {
    if (be->ops->matmul_add) {
        be->ops->matmul_add(be, w, x, n, y);
        return;
    }
    be->ops->matmul(be, 1, &w, NULL, x, n, &tmp);
    be->ops->add(be, y, tmp, (size_t)n * (size_t)w->n_out);
}
/* out = silu(x Wgate^T) * (x Wup^T) through the backend's fused op, or as two products and swiglu. */
static inline void bk_matmul_swiglu(bk_backend *be, const bk_weight *gate, const bk_weight *up, const float *x, int n,
                                    float *tmp, float *out) {
    if (be->ops->matmul_swiglu) {
        be->ops->matmul_swiglu(be, gate, up, x, n, tmp, out);
        return;
    }
    const bk_weight *gu[2] = {gate, up};
    float *gu_out[2] = {out, tmp};
    be->ops->matmul(be, 2, gu, NULL, x, n, gu_out);
    be->ops->swiglu(be, out, tmp, out, (size_t)n * (size_t)gate->n_out);
}
/* xn = rms_norm(x) * norm, then y[j] = xn W[j]^T (+ bias[j]). (A GPU's norm quantizes its output on
 * the way for the products; running the norm inside the product measured slower: docs/experiments.md.) */
static inline void bk_norm_matmul(bk_backend *be, const float *x, const bk_weight *norm, float eps, float *xn, int n,
                                  int n_w, const bk_weight *const *w, const bk_weight *const *bias, float *const *y) {
    be->ops->rms_norm(be, x, norm, xn, n, (int)w[0]->n_in, eps);
    be->ops->matmul(be, n_w, w, bias, xn, n, y);
}
/* xn = rms_norm(x) * norm, then out = silu(xn Wgate^T) * (xn Wup^T). */
static inline void bk_norm_swiglu(bk_backend *be, const float *x, const bk_weight *norm, float eps, float *xn, int n,
                                  const bk_weight *gate, const bk_weight *up, float *tmp, float *out) {
    be->ops->rms_norm(be, x, norm, xn, n, (int)gate->n_in, eps);
    bk_matmul_swiglu(be, gate, up, xn, n, tmp, out);
}
/* x += m + s * sigmoid(gate[row]) through the backend's fused op, or as s *= sigmoid(gate); m += s; x += m. */
static inline void bk_gated_residual(bk_backend *be, float *x, float *m, float *s, const float *gate, int n_rows,
                                     int width) {
    if (be->ops->gated_residual) {
        be->ops->gated_residual(be, x, m, s, gate, n_rows, width);
        return;
    }
    size_t n = (size_t)n_rows * (size_t)width;
    be->ops->sigmoid_mul(be, s, gate, n_rows, width, 1);
    be->ops->add(be, m, s, n);
    be->ops->add(be, x, m, n);
}
/* ssm_conv of x into conv_out when conv_w is given, then gated_delta into out, then out = silu(z) *
 * rms_norm(out) head by head (norm: d weights): the backend's fused op, or the separate ops. */
static inline void bk_gated_delta_gate(bk_backend *be, const float *x, const bk_weight *conv_w, float *conv, int d_conv,
                                       float *conv_out, const float *b, const float *a, const bk_weight *a_bias,
                                       const bk_weight *a_scale, float *ssm, const int32_t *seq, int n, int n_k_heads,
                                       int n_v_heads, bool v_grouped, int d, float eps, const bk_weight *norm,
                                       float norm_eps, const float *z, float *out) {
    if (be->ops->gated_delta_gate) {
        be->ops->gated_delta_gate(be, x, conv_w, conv, d_conv, conv_out, b, a, a_bias, a_scale, ssm, seq, n, n_k_heads,
                                  n_v_heads, v_grouped, d, eps, norm, norm_eps, z, out);
        return;
    }
    if (conv_w) {
        be->ops->ssm_conv(be, x, conv_w, conv, seq, n, (2 * n_k_heads + n_v_heads) * d, d_conv, conv_out);
        x = conv_out;
    }
    be->ops->gated_delta(be, x, b, a, a_bias, a_scale, ssm, seq, n, n_k_heads, n_v_heads, v_grouped, d, eps, out);
    be->ops->rms_norm(be, out, norm, out, n * n_v_heads, d, norm_eps);
    be->ops->swiglu(be, z, out, out, (size_t)n * n_v_heads * d);
}
/* attention into out, then out *= sigmoid(gate) value by value (gate rows of n_head * head_dim values
 * gate_pitch apart per head): the backend's fused op, or the two. */
static inline void bk_attention_gated(bk_backend *be, const float *q, const float *k, const float *v,
                                      const bk_kv_view *kv, const bk_attn_batch *ab, int n_head, int n_head_kv,
                                      int head_dim, float scale, const float *gate, int gate_pitch, float *out) {
    if (be->ops->attention_gated &&
        be->ops->attention_gated(be, q, k, v, kv, ab, n_head, n_head_kv, head_dim, scale, gate, gate_pitch, out))
        return;
    be->ops->attention(be, q, k, v, kv, ab, n_head, n_head_kv, head_dim, scale, out);
    be->ops->sigmoid_mul(be, out, gate, ab->n_tokens * n_head, head_dim, gate_pitch);
}
/* The router's logits = x W^T and moe_route on them (w.n_out experts), and out2 = x W2^T when w2 is
 * given, through the backend's fused op or as the separate ops. */
static inline void bk_moe_router(bk_backend *be, const bk_weight *w, const float *x, int n, int k, bool norm,
                                 float scale, float *logits, int32_t *ids, float *weights, const bk_weight *w2,
                                 float *out2) {
    if (be->ops->moe_router) {
        be->ops->moe_router(be, w, x, n, k, norm, scale, logits, ids, weights, w2, out2);
        return;
    }
    be->ops->matmul(be, 1, &w, NULL, x, n, &logits);
    be->ops->moe_route(be, logits, n, (int)w->n_out, k, norm, scale, ids, weights);
    if (w2) be->ops->matmul(be, 1, &w2, NULL, x, n, &out2);
}
/* Strided rows through the backend's copy_rows, or one copy per row. */
static inline void bk_copy_rows(bk_backend *be, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                                size_t row_bytes, size_t n_rows) {
    if (be->ops->copy_rows) {
        be->ops->copy_rows(be, dst, dst_pitch, src, src_pitch, row_bytes, n_rows);
        return;
    }
    for (size_t r = 0; r < n_rows; r++)
        be->ops->copy(be, (char *)dst + r * dst_pitch, (const char *)src + r * src_pitch, row_bytes);
}
/* QK-norm (weights may be NULL: no norm) and rope of q and k through the backend's fused op, or op by op. */
static inline void bk_qk_norm_rope(bk_backend *be, float *q, float *k, int n, int n_head, int n_head_kv, int head_dim,
                                   const bk_weight *q_norm, const bk_weight *k_norm, float eps, const int32_t *pos,
                                   const bk_rope_params *rp) {
    if (be->ops->qk_norm_rope) {
        be->ops->qk_norm_rope(be, q, k, n, n_head, n_head_kv, head_dim, q_norm, k_norm, eps, pos, rp);
        return;
    }
    if (q_norm) be->ops->rms_norm(be, q, q_norm, q, n * n_head, head_dim, eps);
    if (k_norm) be->ops->rms_norm(be, k, k_norm, k, n * n_head_kv, head_dim, eps);
    be->ops->rope(be, q, n, n_head, head_dim, pos, rp);
    be->ops->rope(be, k, n, n_head_kv, head_dim, pos, rp);
}
/* QK-norm and rope, and the K/V cache write where the backend folds it in (qk_norm_rope_kv): returns
 * true when k and v are in the cache (pass the attention k = v = NULL). Without the fused op, q's heads
 * come to q from q_src (head rows q_pitch floats apart) by a row copy first, unless q_src is q. */
static inline bool bk_qk_norm_rope_kv(bk_backend *be, float *q, const float *q_src, int q_pitch, float *k,
                                      const float *v, int n, int n_head, int n_head_kv, int head_dim,
                                      const bk_weight *q_norm, const bk_weight *k_norm, float eps, const int32_t *pos,
                                      const bk_rope_params *rp, const bk_kv_view *kv) {
    if (be->ops->qk_norm_rope_kv && be->ops->qk_norm_rope_kv(be, q, q_src, q_pitch, k, v, n, n_head, n_head_kv,
                                                             head_dim, q_norm, k_norm, eps, pos, rp, kv))
        return true;
    if (q_src != q) {
        size_t row = (size_t)head_dim * sizeof(float);
        bk_copy_rows(be, q, row, q_src, (size_t)q_pitch * sizeof(float), row, (size_t)n * (size_t)n_head);
    }
    bk_qk_norm_rope(be, q, k, n, n_head, n_head_kv, head_dim, q_norm, k_norm, eps, pos, rp);
    return false;
}
/* QK-norm, rope, the cache write and the attention (with its output gate if in->gate) from the QKV
 * product's rows: the backend's fused op, or bk_qk_norm_rope_kv and the attention. */
static inline void bk_attention_rope(bk_backend *be, const bk_attn_rope_in *in, const bk_kv_view *kv,
                                     const bk_attn_batch *ab, int n_head, int n_head_kv, int head_dim, float scale,
                                     float *out) {
    if (be->ops->attention_rope && be->ops->attention_rope(be, in, kv, ab, n_head, n_head_kv, head_dim, scale, out))
        return;
    bool in_cache = bk_qk_norm_rope_kv(be, in->q, in->q_src, in->q_pitch, in->k, in->v, ab->n_tokens, n_head,
                                       n_head_kv, head_dim, in->q_norm, in->k_norm, in->eps, ab->pos, in->rope, kv);
    const float *k = in_cache ? NULL : in->k, *v = in_cache ? NULL : in->v;
    if (in->gate)
        bk_attention_gated(be, in->q, k, v, kv, ab, n_head, n_head_kv, head_dim, scale, in->gate, in->gate_pitch, out);
    else
        be->ops->attention(be, in->q, k, v, kv, ab, n_head, n_head_kv, head_dim, scale, out);
}
#endif
