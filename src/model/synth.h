/* synth.h — random-weight models of real shapes, written as GGUF, for tests
 * and benchmarks (no weights can be downloaded here). Weights are N(0, std)
 * with std = 0.02 for the embedding and 1/sqrt(n_in) scaled for matrices so
 * activations stay finite through deep stacks; norm weights are 1. The
 * vocabulary (tokenizer.* keys) is copied from a vocab GGUF. Tensors are
 * generated and written one at a time (memory stays bounded). */
#ifndef BK_SYNTH_H
#define BK_SYNTH_H
#include <stdbool.h>
#include <stdint.h>
#include "brisk.h"

typedef struct synth_config {
    const char *arch;  /* "llama", "qwen2" or "qwen3" */
    const char *name;
    int n_vocab;       /* 0: the vocab file's token count */
    int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx;
    float rope_base, rms_eps;
    bool tied;         /* no output.weight */
    uint32_t type;     /* ggml type of the matrices (f32, f16, bf16, q8_0, q4_0, ...) */
    uint64_t seed;
    const char *rope_scaling; /* NULL, "linear" or "yarn" */
    float rope_factor;        /* context extension factor */
    int rope_orig_ctx;        /* original context (yarn) */
} synth_config;

/* Fills c from a preset name ("qwen3-0.6b", "qwen3-8b", "llama3-8b", "tiny-llama", "tiny-qwen3").
 * BRISK_ERR_NOT_FOUND for unknown names. */
brisk_status synth_preset(const char *name, synth_config *c);
const char *const *synth_preset_names(void); /* NULL-terminated */
/* vocab_path NULL: a built-in byte-level SentencePiece vocabulary. */
brisk_status synth_write(const synth_config *c, const char *vocab_path, const char *out_path,
                         bool progress);
#endif
