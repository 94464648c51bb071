/* hfconfig.h — a Hugging Face config.json read into the hyperparameters
 * that `brisk convert` needs, for the architectures it converts.
 *
 * As llama.cpp's converter does, a nested "text_config" (Qwen3.5's
 * ConditionalGeneration configs) is merged over the top level, and RoPE
 * settings are read from "rope_parameters" (transformers 5) or
 * "rope_scaling", with top-level rope_theta / partial_rotary_factor as
 * fallbacks. Missing optional values are -1 (integers) or NAN (floats);
 * the hybrid architectures' documented defaults (conv kernel 4, full
 * attention every 4th layer, partial rotary 0.25) are filled in, the
 * attention interval from "layer_types" when only that is given (as
 * transformers 5 saves Qwen3-Next). Layouts brisk cannot run are refused:
 * dense layers inside a MoE model (decoder_sparse_step != 1, a non-empty
 * mlp_only_layers), layer_types that no fixed interval explains.
 * quantization_config: "fp8" (fine-grained E4M3 with block scales, Qwen's
 * official FP8 checkpoints) gives fp8_block; any other quant_method is
 * refused. The struct owns no memory.
 */
#ifndef BK_HFCONFIG_H
#define BK_HFCONFIG_H
#include <stdbool.h>
#include <stdint.h>
#include "brisk.h"

typedef enum hf_arch { HF_LLAMA, HF_QWEN2, HF_QWEN3, HF_QWEN3_MOE, HF_QWEN35, HF_QWEN35_MOE, HF_QWEN3_NEXT } hf_arch;

/* Special token kinds, in llama.cpp's SpecialVocab order. */
enum { HF_TOK_BOS, HF_TOK_EOS, HF_TOK_UNK, HF_TOK_SEP, HF_TOK_PAD, HF_TOK_CLS, HF_TOK_MASK, HF_TOK_COUNT };

typedef struct hf_config {
    hf_arch arch;
    const char *gguf_arch;       /* "llama", "qwen2", "qwen3", "qwen3moe", "qwen35", "qwen35moe", "qwen3next" */
    char hf_class[64];           /* architectures[0] */
    int64_t n_vocab, n_embd, n_layer, n_head, n_head_kv;
    int64_t head_dim;            /* config's head_dim, -1 if absent */
    int64_t n_ff;                /* intermediate_size, -1 if absent */
    int64_t n_ctx;               /* max_position_embeddings, -1 if absent */
    double rms_eps, rope_theta;  /* NAN if absent */
    bool tied;                   /* tie_word_embeddings */
    /* RoPE scaling ("" if none): "linear", "yarn", "llama3", ... */
    char rope_type[16];
    double rope_factor, rope_low_freq, rope_high_freq; /* NAN if absent */
    double yarn_ext_factor, yarn_attn_factor, yarn_beta_fast, yarn_beta_slow;
    int64_t rope_orig_ctx;
    double partial_rotary;       /* NAN if absent (hybrids: 0.25) */
    int mrope[4];
    bool has_mrope;
    int64_t token_id[HF_TOK_COUNT]; /* <kind>_token_id, -1 if absent or not an integer */
    /* MoE */
    int64_t n_expert, n_expert_used, n_ff_exp, n_ff_shexp;
    /* Gated DeltaNet (qwen35*, qwen3next) */
    int64_t ssm_conv, ssm_k_dim, ssm_v_dim, ssm_n_k, ssm_n_v, full_attn_interval;
    int64_t n_mtp;               /* mtp_num_hidden_layers, 0 if absent */
    /* quantization_config {quant_method: "fp8", fmt: "e4m3", weight_block_size: [r, c]}:
     * F8_E4M3 weights come with <name>_scale_inv, one scale per r x c block; 0, 0 if none */
    int64_t fp8_block[2];
} hf_config;

/* Reads and checks path (shapes positive and consistent). BRISK_ERR_UNSUPPORTED
 * names the architecture when it is none of the above. */
brisk_status hf_config_load(const char *path, hf_config *c);
/* Parses the JSON text (len bytes) instead, for tests. */
brisk_status hf_config_parse(const char *json, size_t len, hf_config *c);
#endif
