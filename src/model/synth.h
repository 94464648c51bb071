/* synth.h — random-weight models of real shapes, written as GGUF, for tests
 * and benchmarks (no weights can be downloaded here).
 *
 * Architectures: llama, qwen2, qwen3 (dense), qwen3moe (routed experts) and
 * qwen35 / qwen35moe (the Qwen3.5/3.6 hybrid: Gated DeltaNet layers with a
 * gated full-attention layer every full_attn_interval-th, dense FFN or routed
 * experts plus a shared expert), optionally with multi-token-prediction
 * (MTP, "nextn") blocks after the trunk (n_mtp); and eagle3, an EAGLE-3 drafter for
 * such a target (llama.cpp's eagle3 arch: fc over three target layers' hidden states, one decoder layer
 * whose q/k/v read [attn_norm(embedding) ; attn_norm_2(g)], its own LM head, the target's embedding). Tensor names, shapes and metadata keys are
 * those llama.cpp's converter writes, so llama.cpp loads the files.
 *
 * Weights: matrices are N(0, 1/n_in) (the embedding N(0, 0.02^2)); the
 * matrices that end a residual branch (attn_output, ssm_out, ffn_down*) are
 * further damped by 1/sqrt(2 n_layer) so the residual stream stays O(1)
 * through deep stacks; norm weights are 1 (GGUF stores Qwen3.5's 1+w), the
 * DeltaNet ssm_a = -exp(A_log) is uniform in [-16, -1], ssm_dt.bias is 1.
 *
 * Expert skew (expert_skew = S > 0): the router row (ffn_gate_inp) of the
 * expert with popularity rank r (a seeded permutation per layer; rank 0 the
 * most popular) is scaled by (r+1)^(-S/4). A router logit is then roughly
 * N(0, scale^2), and an expert with a wider logit lands in the top-k more
 * often, falling off with rank like a power law, as real routers' load does.
 * Measured on i.i.d. Gaussian inputs, 128 experts, top-8, the top 10% of
 * experts get this share of the picks (uniform: 10%): S=0.5 18%, S=1 27%,
 * S=2 41%, S=4 56%; with S=1 the most popular expert is picked 4.4x as often
 * as the uniform rate, the least popular 0.4x. S = 0: all experts equal.
 *
 * Determinism: every row is generated from a counter-based generator keyed
 * by (seed, tensor name, row), so the bytes are the same for any thread count.
 *
 * Output types: with ftype set (a llama-quantize name such as "Q4_K_M"), each
 * tensor gets the type llama-quantize would give it for that mix
 * (quant_mix.h); otherwise every matrix gets `type` (norms and other vectors,
 * routers and the DeltaNet conv stay f32). Rows whose width is no multiple of
 * a type's block fall back as llama.cpp does.
 *
 * Streaming: rows are generated and quantized by n_threads workers in chunks
 * into one of two slabs (~32 MiB each) while the previous slab is written, so
 * memory stays bounded for any model size. The file is written as
 * OUT.tmp.XXXXXX and renamed over OUT when complete (base/atomic_file.h): an
 * interrupted synth never leaves a truncated OUT (a killed one may leave
 * OUT.tmp.XXXXXX; the CLI removes it on SIGINT/SIGTERM/SIGHUP).
 * The vocabulary (tokenizer.* keys) is copied from a vocab GGUF, padded with
 * "[PADn]" tokens up to n_vocab as the converter pads real checkpoints. */
#ifndef BK_SYNTH_H
#define BK_SYNTH_H
#include <stdbool.h>
#include <stdint.h>
#include "brisk.h"

typedef struct synth_config {
    const char *arch;  /* "llama", "qwen2", "qwen3", "qwen3moe", "qwen35", "qwen35moe", "qwen3next", "eagle3" */
    const char *name;
    int n_vocab;       /* 0: the vocab file's token count */
    int n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff, n_ctx; /* n_ff 0: no dense FFN key */
    float rope_base, rms_eps;
    bool tied;         /* no output.weight */
    uint32_t type;     /* ggml type of every matrix when ftype is NULL */
    uint64_t seed;
    const char *rope_scaling; /* NULL, "linear" or "yarn" */
    float rope_factor;        /* context extension factor */
    int rope_orig_ctx;        /* original context (yarn) */
    /* MoE (qwen3moe, qwen35moe, qwen3next) */
    int n_expert, n_expert_used, n_ff_exp, n_ff_shexp; /* n_ff_shexp: the hybrids' shared expert */
    float expert_skew;        /* Zipf-like router popularity exponent, 0 = uniform */
    /* hybrid (qwen35, qwen35moe, qwen3next) */
    int n_rot;                /* rotary dims (0: head_dim) */
    int ssm_d_conv, ssm_d_state, ssm_n_group, ssm_dt_rank; /* conv kernel, head dim, QK heads, V heads */
    int full_attn_interval;   /* every n-th layer is full attention */
    int rope_sections[4];     /* IMRoPE sections (qwen35*) */
    bool ssm_in;              /* qwen3next: the fused ssm_in of older files, not attn_qkv + attn_gate */
    int n_mtp;                /* multi-token-prediction blocks after the n_layer trunk (nextn_predict_layers; the
                               * hybrids): each a full-attention block with the trunk's FFN kind plus
                               * blk.N.nextn.{eh_proj, enorm, hnorm, shared_head_norm}, as llama.cpp's converter
                               * writes Qwen3.5/3.6's mtp.* (embed_tokens and shared_head_head left out: the
                               * trunk's embedding and LM head serve, as in those checkpoints) */
    /* eagle3: the target's layers whose inputs fc fuses (eagle3.target_layers) and its n_embd */
    int eagle3_layers[3];
    int eagle3_target_embd;
    int eagle3_draft_vocab;   /* > 0: a reduced draft vocabulary of this many tokens, its LM head that many rows
                               * and d2t (i64) mapping draft row i to a target token id, as llama.cpp's
                               * converter writes EAGLE-3 checkpoints' d2t (absolute ids, all distinct) */
    bool eagle3_rope_llama3;  /* rope_freqs.weight: Llama 3's RoPE scaling factors (factor 8, low 1,
                               * high 4, original context 8192), as EAGLE-3 drafters for Llama 3.1 carry */
    /* writing */
    const char *ftype;        /* llama-quantize mix name ("Q4_K_M", "Q8_0", "F16", ...) or NULL */
    bool pure;                /* with ftype: every matrix gets the mix's base type */
    int n_threads;            /* <= 0: one per core */
    size_t slab_bytes;        /* output bytes per generation step; 0: 32 MiB (tests use small ones) */
    bool bigram;              /* nearly a bigram model of its embedding, with wide greedy margins: the embedding
                               * at std 1 (not 0.02), the trunk's residual branches (each block's output
                               * projection) at a quarter of their std, an MTP block's at zero, its eh_proj [I | 0],
                               * so that the block drafts the trunk's bigram: speculation's acceptance on real
                               * shapes, and the same greedy text from any rounding (tests/test_mtp.c's patch) */
    int64_t repeat_rows;      /* > 0: matrices repeat their first N rows (fast, for speed benchmarks;
                               * the router keeps distinct rows, so --expert-skew still holds) */
} synth_config;

/* Fills c from a preset name (see synth_preset_names). BRISK_ERR_NOT_FOUND for unknown names. */
brisk_status synth_preset(const char *name, synth_config *c);
const char *const *synth_preset_names(void); /* NULL-terminated */

typedef struct synth_stats {
    uint64_t bytes;    /* tensor data written */
    int64_t n_tensors;
    double seconds;    /* wall time of the whole write */
    int n_threads;
} synth_stats;

/* Writes the model to out_path (via out_path.tmp.XXXXXX, renamed at the end;
 * BRISK_ERR_INVALID_ARG if out_path is vocab_path's file).
 * vocab_path NULL: a built-in byte-level SentencePiece vocabulary.
 * progress: a live line on stderr (tensor i/N, MB/s, ETA). stats may be NULL. */
brisk_status synth_write_ex(const synth_config *c, const char *vocab_path, const char *out_path, bool progress,
                            synth_stats *stats);
brisk_status synth_write(const synth_config *c, const char *vocab_path, const char *out_path, bool progress);
#endif
