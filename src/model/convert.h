/* convert.h — Hugging Face checkpoints (config.json, tokenizer.json,
 * tokenizer_config.json, *.safetensors) to GGUF, with the tensor names,
 * shapes, transforms and metadata that llama.cpp's convert_hf_to_gguf.py
 * writes, so llama.cpp and brisk load the result alike.
 *
 * Architectures: llama (q/k rows permuted for llama.cpp's adjacent-pair
 * RoPE; llama3 RoPE scaling as a rope_freqs tensor), qwen2, qwen3,
 * qwen3_moe (per-expert or fused expert tensors stacked into 3-D
 * *_exps), qwen3_5 / qwen3_5_moe (norm weights stored as 1+w, A_log as
 * -exp(A_log), the conv squeezed, DeltaNet value heads reordered from
 * grouped to tiled order; vision weights are dropped), qwen3_next
 * (the same, but value heads stay grouped, as llama.cpp's qwen3next wants;
 * the fused in_proj_qkvz, per key head [q | k | v | z], is split into
 * attn_qkv and attn_gate; in_proj_ba is kept whole as ssm_ba). The hybrids'
 * multi-token-prediction head (mtp.*: mtp_num_hidden_layers blocks, else as
 * many as the checkpoint's mtp.layers.N) is kept as llama.cpp's converter
 * keeps it: blocks n_layer.. after the trunk (block_count counts them,
 * nextn_predict_layers says how many), mtp.layers.J as block n_layer + J,
 * and fc / pre_fc_norm_embedding / pre_fc_norm_hidden / norm as
 * blk.<n_layer>.nextn.{eh_proj, enorm, hnorm, shared_head_norm}; no_mtp
 * drops it (llama.cpp's --no-mtp).
 *
 * Weights: safetensors are mapped, never read whole. Each output tensor
 * is produced row by row by n_threads workers (gather from one or more
 * sources, permute, convert to f32, then to the output type) into one of
 * two ~32 MiB slabs while the previous one is written, so memory stays
 * bounded whatever the checkpoint size; source pages are released once
 * a tensor is done. Output types: f32, f16, bf16 or q8_0 for every matrix
 * (as the converter's --outtype; q8_0 rows that are no multiple of 32 fall
 * back to f16), or a llama-quantize mix name (Q4_K_M, Q6_K, ...) that
 * picks each tensor's type as llama-quantize would. Norms, biases, routers
 * and the DeltaNet conv stay f32.
 *
 * The file is written to OUT.tmp.XXXXXX and renamed over OUT when complete
 * (base/atomic_file.h); an OUT that is one of the checkpoint's files is
 * refused (BRISK_ERR_INVALID_ARG).
 */
#ifndef BK_CONVERT_H
#define BK_CONVERT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "brisk.h"
#include "format/gguf.h"
#include "format/hfconfig.h"

typedef struct convert_opts {
    const char *type;   /* "f32", "f16" (NULL), "bf16", "q8_0", or a llama-quantize mix name */
    int n_threads;      /* <= 0: one per core */
    bool progress;      /* a live line on stderr */
    const char *pre;    /* tokenizer.ggml.pre override; NULL: detected */
    size_t slab_bytes;  /* 0: 32 MiB (tests use small ones) */
    bool no_mtp;        /* drop the multi-token-prediction head */
} convert_opts;

typedef struct convert_stats {
    int64_t n_tensors;
    uint64_t bytes;     /* tensor data written */
    double seconds;
    int n_threads;
    char pre[32];       /* the pre-tokenizer written */
} convert_stats;

/* Converts the checkpoint in hf_dir to out_path. stats may be NULL. */
brisk_status convert_hf(const char *hf_dir, const char *out_path, const convert_opts *o, convert_stats *stats);

/* Internal to the converter (convert_vocab.c): writes the tokenizer.* keys
 * from dir's tokenizer.json / tokenizer_config.json / chat_template.jinja and
 * config.json's *_token_id, padded to c->n_vocab tokens. pre: forced name or
 * NULL to detect; the name written goes to pre_out. */
brisk_status convert_write_vocab(gguf_writer *w, const char *dir, const hf_config *c, const char *pre,
                                 char *pre_out, size_t pre_cap);
/* The pre-tokenizer name llama.cpp's converter gives a tokenizer whose
 * tokenization of its check string hashes (SHA-256 of Python's str() of the
 * id list) to hex; NULL if unknown. */
const char *convert_pre_from_hash(const char *hex);
#endif
