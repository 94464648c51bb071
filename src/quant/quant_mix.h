/* quant_mix.h — llama.cpp's quantization mixes ("file types" such as Q4_K_M):
 * which tensor type every tensor of a model gets.
 *
 * The rules are llama.cpp's (src/llama-quant.cpp, v0.4.0), so that
 * `brisk quantize M out.gguf Q4_K_M` and `llama-quantize M out.gguf Q4_K_M`
 * choose the same type for each tensor:
 *  - only tensors of 2+ dims whose name ends in "weight" are converted (not
 *    norms, MoE routers, position embeddings, a few small special tensors);
 *  - output.weight (and token_embd.weight when tied to it) gets Q6_K unless
 *    the mix is Q8_0 (Q8_0 when its rows are not a multiple of the block);
 *  - attn_v / ffn_down / attn_output get more bits in the K mixes: by layer
 *    (the first and last eighth and every third layer between, "use_more_bits"),
 *    by GQA factor, expert count (8-expert models) and 70B-ness, counted in
 *    llama.cpp's tensor order (by layer, then by name);
 *  - a type whose block does not divide the row length falls back
 *    (the IQ2/IQ3 types and IQ4_XS->IQ4_NL, Q2_K/Q3_K->Q4_0, Q4_K->Q5_0, Q5_K->Q5_1, Q6_K->Q8_0, then F16).
 * With `pure`, every convertible tensor gets the mix's base type (still with
 * the fallback), like llama-quantize --pure. */
#ifndef BK_QUANT_MIX_H
#define BK_QUANT_MIX_H
#include <stdbool.h>
#include <stdint.h>

#include "brisk.h"
#include "format/gguf.h"

typedef struct quant_ftype {
    const char *name;      /* llama-quantize's name: "Q4_K_M" */
    uint32_t id;           /* LLAMA_FTYPE_*, written as general.file_type */
    uint32_t base_type;    /* the type most tensors get (quant_type) */
} quant_ftype;

/* Case-insensitive, llama-quantize's names and aliases (Q3_K = Q3_K_M,
 * Q4_K = Q4_K_M, Q5_K = Q5_K_M). NULL if unknown. */
const quant_ftype *quant_ftype_find(const char *name);
/* The i-th mix (i = 0, 1, ...; NULL past the end), for help texts. */
const quant_ftype *quant_ftype_at(int i);

typedef struct quant_mix_opts {
    bool pure;        /* every convertible tensor gets base_type */
    bool has_imatrix; /* changes a few rules, as in llama.cpp */
} quant_mix_opts;

/* Chooses types[i] for every tensor i of g (types has gguf_tensor_count(g)
 * entries; a tensor that keeps its type gets its own type). Fails with a
 * message on a model the rules cannot place (e.g. a Q2_K_S tensor that needs
 * an imatrix, a shape no type fits). *n_fallback (may be NULL) counts the
 * tensors that fell back to another type for their row length. */
brisk_status quant_mix_plan(const gguf_file *g, const quant_ftype *ft, const quant_mix_opts *o, uint32_t *types,
                            int *n_fallback);

/* A tensor of a model still to be written (synth, convert). */
typedef struct quant_mix_tensor {
    const char *name;
    int n_dims;
    int64_t ne[3];
    bool keep_f32;    /* the writer keeps it f32 whatever the mix (norms, routers) */
} quant_mix_tensor;

/* quant_mix_plan for a model that exists only as metadata and shapes: w holds
 * the metadata the rules read (architecture, layer and head counts; no
 * tensors yet); this writes a skeleton to a scratch file beside near_path
 * (each tensor at its real row length with at most two rows and experts),
 * plans it, and removes it.
 * types[i] is the mix's type for tensor i, or QT_COUNT where the mix leaves
 * the tensor as it is. Consumes w. */
brisk_status quant_mix_plan_shapes(gguf_writer *w, int n, const quant_mix_tensor *t, const quant_ftype *ft,
                                   const quant_mix_opts *o, const char *near_path, uint32_t *types);

#endif
