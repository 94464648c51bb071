/*
 * brisk.h — the public C API of brisk, an LLM inference engine.
 *
 * Ownership: every brisk_*_load / brisk_*_new has a matching *_free that
 * accepts NULL. Functions return a brisk_status; on failure a one-line
 * message is available from brisk_last_error() (thread-local, valid until
 * the next failing call on the same thread). No function exits or aborts on
 * bad input.
 *
 * Flow: brisk_model_load() maps a GGUF file (weights are mapped, not copied),
 * brisk_context_new() sizes and allocates the paged KV cache once, then each
 * brisk_decode() call runs one batch of (token, position, sequence, wants
 * logits) entries through the model. Sequences are independent unless they
 * share a prefix through brisk_seq_share_prefix().
 */
#ifndef BRISK_H
#define BRISK_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

typedef enum brisk_status {
    BRISK_OK = 0,
    BRISK_ERR_INVALID_ARG = -1, /* a bad argument from the caller */
    BRISK_ERR_IO = -2,          /* open/read/mmap/write failed */
    BRISK_ERR_FORMAT = -3,      /* a corrupt, truncated or inconsistent file */
    BRISK_ERR_UNSUPPORTED = -4, /* valid input that brisk does not handle */
    BRISK_ERR_NOMEM = -5,       /* an allocation failed */
    BRISK_ERR_RANGE = -6,       /* out of range: context full, too many tokens */
    BRISK_ERR_NOT_FOUND = -7,   /* a key, tensor or sequence is missing */
    BRISK_ERR_BACKEND = -8,     /* the compute backend failed */
} brisk_status;

/* The message of the last failure on this thread ("" if none). */
const char *brisk_last_error(void);
/* A short fixed name for a status ("format error", ...). */
const char *brisk_status_str(brisk_status s);

typedef int32_t brisk_token;
typedef struct brisk_model brisk_model;
typedef struct brisk_context brisk_context;

/* ---- models ---------------------------------------------------------- */

/* Partial offload (llama.cpp's -ngl): with 0 < n_gpu_layers < n_layer the
 * token embedding and layers [0, n_layer - n_gpu_layers) run on the CPU, the
 * last n_gpu_layers layers and the output layer (final norm, LM head) on the
 * GPU; each layer's KV cache and recurrent state live with it, and each batch
 * crosses once (the residual stream, n_embd floats a token). n_gpu_layers
 * >= n_layer or -1: all on the GPU; 0, or no GPU: all on the CPU.
 *
 * Experts in host memory (llama.cpp's --n-cpu-moe): with n_cpu_moe > 0 the
 * routed-expert tensors of layers [0, n_cpu_moe) of a MoE model stay in host
 * memory (read from the mapping, never copied) and those layers' expert FFN
 * runs on the CPU; everything else of a GPU layer (attention, norms, router,
 * shared expert) stays on the GPU. Each such layer sends its normed input and
 * routing (n_embd floats and 2 * n_expert_used values a token) to the host
 * and the experts' sum back. No effect without a GPU or on layers that run on
 * the CPU anyway. Decode steps of such a model are not captured as CUDA
 * graphs (host work inside the pass). */
/* RoPE context extension: overrides of the GGUF's rope keys, with llama.cpp's
 * flags and meanings (llama_context_params' rope_* / yarn_* fields, v0.4.0). Each
 * field's "not set" value (what brisk_model_default_params gives) keeps the file's.
 * With YaRN on (the resolved type is yarn and the extrapolation mix is not 0), the
 * rotation blends interpolated and extrapolated angles per dimension between the
 * correction dims that beta_fast / beta_slow pick out of orig_ctx, and scales
 * cos/sin by 1 + 0.1 ln(1 / freq_scale) (times the file's rope.scaling.attn_factor).
 * As in llama.cpp, attn_factor then has no effect: it is used with ext_factor 0 only. */
typedef enum brisk_rope_scaling {
    BRISK_ROPE_SCALING_MODEL = 0, /* the file's rope.scaling.type (no key: linear) */
    BRISK_ROPE_SCALING_NONE,      /* no scaling: freq_scale is 1 whatever else says */
    BRISK_ROPE_SCALING_LINEAR,    /* positions times freq_scale (ext_factor defaults to 0) */
    BRISK_ROPE_SCALING_YARN,      /* YaRN (ext_factor defaults to 1) */
} brisk_rope_scaling;

typedef struct brisk_rope_overrides {
    brisk_rope_scaling scaling; /* --rope-scaling */
    float freq_base;            /* --rope-freq-base: theta; 0: rope.freq_base */
    float freq_scale;           /* --rope-freq-scale, or 1/N of --rope-scale N; 0: 1/rope.scaling.factor */
    int orig_ctx;               /* --yarn-orig-ctx: the trained context YaRN extends; 0:
                                   rope.scaling.original_context_length, else context_length */
    float ext_factor;           /* --yarn-ext-factor: extrapolation mix; < 0: rope.scaling.yarn_ext_factor of a
                                   yarn file, else 1 with YaRN and 0 otherwise */
    float attn_factor;          /* --yarn-attn-factor: cos/sin scale when ext_factor is 0; < 0: the file's */
    float beta_fast, beta_slow; /* --yarn-beta-fast / --yarn-beta-slow: rotations per orig_ctx bounding the
                                   blend; < 0: rope.scaling.yarn_beta_*, else 32 and 1 */
} brisk_rope_overrides;

typedef struct brisk_model_params {
    bool vocab_only;   /* load metadata and tokenizer, no weights */
    int n_gpu_layers;  /* layers on the GPU, the last ones; -1: all, when one is present */
    int device;        /* GPU index */
    bool progress;     /* print loading progress on stderr */
    bool split_cpu;    /* for tests without a GPU: split as n_gpu_layers says, with a second CPU
                          backend in the GPU's place (also set by the environment's BRISK_SPLIT_CPU=1) */
    int n_cpu_moe;     /* MoE: layers [0, n_cpu_moe) keep their routed experts in host memory; <= 0: none */
    bool no_mmap;      /* read the file into (huge-page) memory instead of mapping it (llama.cpp's --no-mmap) */
    /* Tensor parallelism (llama, qwen2, qwen3, qwen3moe): this process is rank tp_rank of tp_size and
     * holds its shard of the attention heads and FFN columns, or of a qwen3moe's experts (whole experts
     * a rank; with every expert in GPU memory: no n_cpu_moe) (engine/tp.h runs the ranks); 0: off */
    int tp_rank, tp_size;
    /* Pipeline parallelism (any architecture; not with tp_size): this process is rank pp_rank of
     * pp_size and holds a contiguous run of the layers (model_pp_layers), rank 0 also the embedding
     * and the output layer: the residual stream goes rank to rank and back to rank 0 for the
     * logits (engine/context.c); 0: off */
    int pp_rank, pp_size;
    brisk_rope_overrides rope; /* RoPE scaling over the file's keys (see above) */
} brisk_model_params;

brisk_model_params brisk_model_default_params(void);
brisk_status brisk_model_load(const char *path, const brisk_model_params *params,
                              brisk_model **out);
void brisk_model_free(brisk_model *model);

typedef struct brisk_model_info {
    const char *arch;       /* general.architecture */
    const char *name;       /* general.name or "" */
    int n_vocab, n_embd, n_layer, n_head, n_head_kv, head_dim, n_ff;
    int n_ctx_train;
    uint64_t n_params;      /* weights counted by element */
    uint64_t weight_bytes;  /* bytes of tensor data */
    uint64_t decode_bytes;  /* weight bytes read per decoded token (the embedding table only as the LM head;
                               MoE: of each layer's experts only the n_expert_used a token routes to);
                               brisk_decode_bytes counts a whole step (KV, recurrent state, batches) */
    int n_expert, n_expert_used; /* MoE: routed experts a layer has, and picks per token; 0: dense */
    int gpu_device;         /* CUDA device holding the weights, or -1 (CPU) */
    int n_gpu_layers;       /* layers on that device (the last ones; the output layer with them),
                               or on the second CPU backend of a split_cpu model; 0: none */
    int n_cpu_moe;          /* layers [0, n_cpu_moe) keep their routed experts in host memory (see
                               brisk_model_params); 0: none, or no GPU (nor split_cpu) */
    uint64_t cpu_moe_bytes; /* bytes of those experts that would otherwise be on the GPU */
} brisk_model_info;
void brisk_model_get_info(const brisk_model *model, brisk_model_info *out);
/* A string metadata value of the model's GGUF ("tokenizer.chat_template", ...)
 * as a new NUL-terminated copy the caller free()s; NULL when the key is
 * absent, not a string, or memory runs out. */
char *brisk_model_meta_str(const brisk_model *model, const char *key);
/* Measured device-to-device copy bandwidth of CUDA device `device` in GB/s
 * (bytes read + written per second, 1 GiB copies): the roofline that speed
 * figures on that GPU are shares of. 0 when there is no such device. */
double brisk_gpu_bandwidth(int device);

/* ---- tokenizer ------------------------------------------------------- */

/* Tokenize text. add_special adds BOS/EOS as the model's metadata asks;
 * parse_special turns "<|im_start|>"-style text into control tokens.
 * Writes at most cap ids to out, sets *n_out to the number the text needs
 * (BRISK_ERR_RANGE if it exceeds cap). */
brisk_status brisk_tokenize(const brisk_model *model, const char *text, size_t len,
                            bool add_special, bool parse_special, brisk_token *out,
                            int64_t cap, int64_t *n_out);
/* The raw bytes of one token (control tokens render as "" unless special). */
brisk_status brisk_token_to_piece(const brisk_model *model, brisk_token tok, bool special,
                                  char *buf, size_t cap, size_t *len);
brisk_token brisk_token_bos(const brisk_model *model); /* -1 if none */
brisk_token brisk_token_eos(const brisk_model *model);
bool brisk_token_is_eog(const brisk_model *model, brisk_token tok);
bool brisk_add_bos(const brisk_model *model);
/* Fill-in-the-middle tokens (code models: Qwen2.5/3-Coder's <|fim_prefix|> ...): from the GGUF's
 * tokenizer.ggml.fim_*_token_id, else found by their texts as llama.cpp finds them; -1 if none. */
enum brisk_fim { BRISK_FIM_PRE, BRISK_FIM_SUF, BRISK_FIM_MID, BRISK_FIM_PAD, BRISK_FIM_REP, BRISK_FIM_SEP };
brisk_token brisk_token_fim(const brisk_model *model, int kind);
int brisk_n_vocab(const brisk_model *model);

/* Streaming detokenizer: feeds token pieces and emits only complete UTF-8. */
typedef struct brisk_detok {
    char pending[8]; /* bytes of an incomplete UTF-8 sequence */
    int n_pending;
} brisk_detok;
/* Appends the printable text for tok to buf (NUL-terminated); *len gets its length. */
brisk_status brisk_detok_push(const brisk_model *model, brisk_detok *st, brisk_token tok,
                              char *buf, size_t cap, size_t *len);

/* ---- contexts and batches -------------------------------------------- */

/* KV cache element types. Q8_0: blocks of 32 values with one f16 scale (34
 * bytes per 32, ggml's q8_0), about half of f16. Q4_0: blocks of 32 4-bit
 * values with one f16 scale (18 bytes per 32, ggml's q4_0), about a quarter
 * of f16. Q4_0H: q4_0, each head's K row rotated by a fixed orthogonal
 * (Hadamard) rotation first, which spreads the keys' outlier channels over
 * the blocks (src/quant/kv_rot.h; brisk's own, CPU only for now). All three
 * need head_dim % 32 == 0. */
typedef enum brisk_kv_type {
    BRISK_KV_F32 = 0, BRISK_KV_F16 = 1, BRISK_KV_Q8_0 = 2, BRISK_KV_Q4_0 = 3, BRISK_KV_Q4_0H = 4
} brisk_kv_type;
/* "f32", "f16", "q8_0", "q4_0", "q4_0h" -> type; -1 for an unknown name. */
int brisk_kv_type_from_name(const char *name);

/* Where a context's CPU threads run and how they wait for work: llama.cpp's -C/--cpu-mask,
 * -Cr/--cpu-range, --cpu-strict, --prio and --poll, with its meanings. */
#define BRISK_CPU_MASK_WORDS 16 /* 1,024 CPUs */
typedef struct brisk_cpu_placement {
    uint64_t mask[BRISK_CPU_MASK_WORDS]; /* bit i % 64 of word i / 64: CPU i may run the threads; all zero:
                                            wherever the OS puts them (unless strict) */
    bool strict;  /* thread j alone on the j-th CPU of the mask (of the CPUs this process may use when the
                     mask is empty), round robin, as llama.cpp's --cpu-strict 1 */
    int prio;     /* -1 low (SCHED_BATCH), 0 normal (inherited), 1 medium, 2 high, 3 realtime (SCHED_FIFO
                     at 40, 80, 90, as ggml; a priority the process may not take is warned about once) */
    int poll;     /* 0-100: how long an idle thread polls for the next job before it sleeps; 50 (about
                     50 us, longer than the gaps of a decode step) by default, 0: sleeps at once */
    int numa;     /* a brisk_numa (llama.cpp's --numa), instead of mask and strict: distribute puts thread j
                     on the CPUs of NUMA node j % nodes, isolate every thread on the node the pool was made
                     on, numactl on the CPUs the process was started with (numactl's) */
} brisk_cpu_placement;
enum brisk_numa { BRISK_NUMA_NONE = 0, BRISK_NUMA_DISTRIBUTE = 1, BRISK_NUMA_ISOLATE = 2, BRISK_NUMA_NUMACTL = 3 };

typedef struct brisk_context_params {
    int n_ctx;         /* KV cache capacity in tokens, shared by all sequences; 0: model's train ctx capped at 4096 */
    int n_seq_max;     /* sequences that may be live at once */
    int n_batch;       /* most entries in one brisk_decode call */
    int n_ubatch;      /* most entries in one forward pass (llama.cpp's -ub): a longer call runs as several
                          passes; bounds the scratch. 0: 2048 for a model on a GPU, else 512 */
    int n_threads;     /* CPU threads; 0: all cores */
    brisk_kv_type kv_type;
    int kv_block_size; /* tokens per KV page (default 16) */
    int n_seq_checkpoints; /* recurrent models: state snapshots each sequence keeps (brisk_seq_checkpoint); default 0 */
    /* Recurrent models with snapshots, for speculative decoding's callers: each pass of at most 16 entries
     * keeps its recurrent layers' inputs, so that a cut back into it (a rejected draft, brisk_seq_keepable)
     * replays the state from the snapshot at its start instead of decoding again. Costs 3 copies per
     * recurrent layer in every such pass: off by default, set only where drafts are verified. */
    bool keep_recurrent_inputs;
    bool collect_expert_stats; /* MoE models on the CPU: count each token's routed experts (brisk_context_expert_counts) */
    /* Hot-expert cache (MoE, experts in host memory by n_cpu_moe, on a GPU stage): each such layer keeps
     * copies of its most used experts on the GPU. A token's entries routed to a cached expert run there,
     * the others on the CPU at the same time (or, for a large batch, copied to spare GPU slots when that
     * is cheaper), and the two sums are added. The cache is refreshed while the model runs (decayed
     * routing counts; a hotter expert replaces the coldest cached one through an asynchronous copy).
     * Off by default (both sizes 0). */
    int cache_experts;          /* experts cached per such layer; 0: as cache_gpu_mem allows */
    uint64_t cache_gpu_mem;     /* with cache_experts 0: the bytes the model and this context may take on the
                                   GPU (--gpu-mem); the cache takes what the rest leaves; 0: no cache */
    const int64_t *expert_stats;/* (expert_stats_layers, expert_stats_experts) routing counts of a calibration
                                   run (brisk_expert_stats_read) that pick the first cached experts; NULL: the
                                   first batches' counts pick them. Read at creation only. */
    int expert_stats_layers, expert_stats_experts; /* must equal the model's n_layer and expert count */
    /* Rows of logits one forward pass computes at most: a batch whose entries want more runs as
     * several passes (the same logits). The output layer's scratch is sized for these rows (a row is
     * n_vocab floats: 0.6 MB for a 152K vocabulary). 0: n_seq_max, at least 64; a user of every
     * position's logits (perplexity) sets n_batch. */
    int n_outputs_max;
    /* Embeddings instead of logits (llama.cpp's --embeddings): brisk_decode computes each wanted
     * entry's hidden state after the final norm (n_embd floats; no LM head) and, with a pooling
     * other than NONE, pools each sequence's entries of the call (brisk_get_embeddings_seq). */
    bool embeddings;
    int pooling;       /* a brisk_pooling; BRISK_POOLING_UNSPECIFIED: the file's <arch>.pooling_type (none without) */
    /* Block-sparse attention (CPU backend only; off by default, 0): each query group (the q heads of
     * one KV head, for one token, or a block of a prompt's tokens) reads only attn_sparse_k KV pages of
     * kv_block_size tokens: the first page and the local window (its own page and the one before)
     * always, then the pages whose per-channel key min/max bound q.k highest (Quest, Tang et al.
     * 2024). Exact attention over the pages read; attn_sparse_k >= the pages of a span: dense's result
     * bit for bit. The summaries take 2 / kv_block_size of an f16 cache's bytes. docs/long-context.md. */
    int attn_sparse_k;
    bool attn_sparse_measure; /* with attn_sparse_k: also compute dense attention to measure the choice
                                 (slow; brisk_context_attn_sparse_recall) */
    brisk_cpu_placement cpu;  /* the CPU threads' placement (the CPU backend's, and the host experts') */
} brisk_context_params;

brisk_context_params brisk_context_default_params(void);
/* For a GPU budget (llama.cpp users' --n-cpu-moe picked for them): the smallest n_cpu_moe with which
 * the GPU's share of the MoE model at path, loaded with mp (its n_gpu_layers), and of one context
 * made with cp (NULL: defaults) fits in gpu_mem bytes: the non-expert weights of the GPU's layers,
 * KV cache, recurrent state and scratch, and the experts of as many layers as fit, the last ones
 * first. An estimate of what brisk_model_load and brisk_context_new allocate there (the driver's own
 * memory not counted). 0 without a GPU (and without split_cpu) or when everything fits;
 * BRISK_ERR_NOMEM with the figures when even every expert in host memory does not fit;
 * BRISK_ERR_UNSUPPORTED for a model without experts. */
brisk_status brisk_model_fit_n_cpu_moe(const char *path, const brisk_model_params *mp,
                                       const brisk_context_params *cp, uint64_t gpu_mem, int *n_cpu_moe);
brisk_status brisk_context_new(brisk_model *model, const brisk_context_params *params,
                               brisk_context **out);
void brisk_context_free(brisk_context *ctx);
/* MoE routing statistics of a context made with collect_expert_stats: how often
 * each expert was among a decoded token's top-k, per layer. Writes
 * n_layer * n_expert counts (layer-major) if cap allows, and the two sizes;
 * BRISK_ERR_UNSUPPORTED for a model without experts or a context without stats. */
brisk_status brisk_context_expert_counts(const brisk_context *ctx, int64_t *counts, int64_t cap, int *n_layer,
                                         int *n_expert);
/* With attn_sparse_measure: over the query groups so far whose choice dropped a page (all layers),
 * *recall: the share of the true top-n pages by attention mass (n: the pages read) that were read,
 * *mass: the share of the attention mass the pages read hold, *mass_best: the share the true top-n
 * pages hold (the most any n pages could); *groups: how many were measured. BRISK_ERR_UNSUPPORTED
 * for a context made without it. */
brisk_status brisk_context_attn_sparse_recall(const brisk_context *ctx, double *recall, double *mass,
                                              double *mass_best, int64_t *groups);
/* With collect_expert_stats: over every forward pass so far and each of its MoE layers, the
 * sum of the distinct experts the pass's tokens were routed to (*reads: the expert weights
 * that layer read) and the number of such (pass, layer) pairs (*passes). The difference of
 * two readings around a run of decode steps gives the run's mean distinct experts per layer
 * and step, brisk_decode_bytes's experts_read. Same errors as brisk_context_expert_counts. */
brisk_status brisk_context_expert_reads(const brisk_context *ctx, int64_t *reads, int64_t *passes);
/* Expert statistics files (`brisk calibrate -o`; JSON, see engine/expert_stats.c): counts is
 * (n_layer, n_expert), layer-major, over `tokens` tokens routed to n_expert_used experts each.
 * path is replaced whole (a temporary file beside it, renamed over it) or left as it was. */
brisk_status brisk_expert_stats_write(const char *path, const char *model_path, int n_layer, int n_expert,
                                      int n_expert_used, int64_t tokens, const int64_t *counts);
/* Reads such a file into *counts (malloc'd, the caller frees): BRISK_ERR_FORMAT with what is wrong
 * for a corrupt or truncated file, BRISK_ERR_IO when it cannot be read. */
brisk_status brisk_expert_stats_read(const char *path, int *n_layer, int *n_expert, int64_t **counts);
/* What a context's hot-expert cache (brisk_context_params.cache_experts) did so far, over all its
 * layers (layer -1) or for one layer (zeros for a layer without a cache; BRISK_ERR_RANGE past the
 * last). hits + misses is every
 * routed (token, expert) entry of the cached layers. */
typedef struct brisk_expert_cache_stats {
    int n_layers;        /* layers with a cache; 0: the context has none */
    int slots;           /* experts cached per layer */
    int spare_slots;     /* GPU slots for missed experts copied for one batch (shared by the layers) */
    int64_t hits;        /* entries whose expert was cached */
    int64_t misses;      /* the others */
    int64_t miss_copied; /* misses computed on the GPU from an expert copied for the batch (prefill) */
    int64_t copies;      /* experts copied into the cache by the refresh (and the first fill) */
    int64_t miss_copies; /* experts copied into spare slots for one batch */
} brisk_expert_cache_stats;
brisk_status brisk_context_expert_cache_stats(const brisk_context *ctx, int layer, brisk_expert_cache_stats *out);

typedef struct brisk_batch_entry {
    brisk_token token;
    int32_t pos;    /* position in its sequence */
    int32_t seq;    /* sequence id, 0 .. n_seq_max-1 */
    bool logits;    /* return logits for this entry */
} brisk_batch_entry;

/* Runs n entries through the model. Entries of one sequence must come in
 * increasing position order and continue that sequence's cache. */
/* Where a context's memory went: device -1 is the host (CPU backend). On a
 * GPU, weights + kv + scratch is what the model and this context hold there;
 * device_free/total are cudaMemGetInfo's figures when the context was made. */
typedef struct brisk_memory_report {
    int device;
    uint64_t weight_bytes, kv_bytes, scratch_bytes;
    uint64_t device_free, device_total;
    uint64_t expert_cache_bytes; /* the hot-expert cache's slots and buffers (in none of the above) */
    uint64_t host_copy_bytes;    /* host memory of the CPU backend's repacked weight copies, made on the
                                  * first pass that reads each matrix (in none of the above) */
} brisk_memory_report;
void brisk_context_memory(const brisk_context *ctx, brisk_memory_report *out);

brisk_status brisk_decode(brisk_context *ctx, const brisk_batch_entry *entries, int n);

/* Logits of the i-th entry of the last batch that asked for them (n_vocab floats), or NULL. */
const float *brisk_get_logits(brisk_context *ctx, int i);

/* ---- embeddings ------------------------------------------------------
 * A context made with embeddings on returns hidden states instead of logits.
 * Pooling (llama.cpp's enum llama_pooling_type, same values) says which:
 *   NONE  every entry that asks for logits gets its own vector (brisk_get_embeddings_ith);
 *   MEAN  the mean over a sequence's entries in the call;
 *   CLS   its entry at the lowest position in the call; LAST: at the highest;
 *   RANK  the classification head (the file's cls / cls.output tensors) over the CLS entry
 *         (qwen3: the LAST one, then a softmax over the head's outputs, as llama.cpp: a
 *         Qwen3-Reranker's head is the LM head's "yes" and "no" rows, output 0 the score).
 * With pooling the entries' logits flags are ignored: a sequence's whole input goes in one
 * brisk_decode call (any length up to n_batch), and the vectors are not normalised
 * (brisk_embd_normalize). Vectors stay valid until the next brisk_decode. */
typedef enum brisk_pooling {
    BRISK_POOLING_UNSPECIFIED = -1,
    BRISK_POOLING_NONE = 0,
    BRISK_POOLING_MEAN = 1,
    BRISK_POOLING_CLS = 2,
    BRISK_POOLING_LAST = 3,
    BRISK_POOLING_RANK = 4,
} brisk_pooling;
/* "none", "mean", "cls", "last", "rank" -> pooling; -2 for an unknown name. */
int brisk_pooling_from_name(const char *name);
const char *brisk_pooling_name(int pooling); /* "?" for an unknown value */
/* The context's pooling, resolved from the file's key; NONE for a context without embeddings. */
brisk_pooling brisk_context_pooling(const brisk_context *ctx);
/* Floats of a pooled vector: n_embd, or with RANK the head's outputs (2 for Qwen3-Reranker). */
int brisk_context_n_embd_out(const brisk_context *ctx);
/* Pooling NONE: the hidden state of the i-th entry of the last batch (it asked for logits), or NULL. */
const float *brisk_get_embeddings_ith(brisk_context *ctx, int i);
/* Pooling other than NONE: seq's pooled vector over its entries in the last batch, or NULL. */
const float *brisk_get_embeddings_seq(brisk_context *ctx, int seq);
/* out = in scaled as llama.cpp's embd_normalize: -1 none, 0 max |x| to 32760 (int16 range),
 * 1 taxicab, 2 euclidean (its server's default), p > 2 the p-norm. A zero vector stays zero. */
void brisk_embd_normalize(const float *in, float *out, int n, int norm);
/* Late interaction (ColBERT's MaxSim): for each of the n_q query vectors the largest dot product
 * with any of the n_d document vectors, summed. q (n_q, dim), d (n_d, dim), row-major. */
float brisk_maxsim(const float *q, int n_q, const float *d, int n_d, int dim);
/* MaxSim of one query against n_docs documents in one call: scores[j] (n_docs) = brisk_maxsim(q, n_q,
 * d + off[j] * dim, off[j + 1] - off[j], dim), 0 for an empty document. Document j is rows
 * [off[j], off[j + 1]) of d (row-major, dim floats a row); off (n_docs + 1) is nondecreasing from
 * off[0] >= 0. normalize: every row (query and documents) counts as L2-normalised
 * (brisk_embd_normalize(row, .., dim, 2)), as late-interaction models score; nothing is copied, the
 * dot products are scaled. All memory is the caller's, on the host.
 * ctx (may be NULL) is the context whose device may score: today the CPU does for every context
 * (a GPU kernel is written, on branch lab/maxsim-gpu, and lands with its measurement). Call it where
 * brisk_decode may be called (not concurrently with another call on ctx).
 * BRISK_ERR_INVALID_ARG for a negative size, dim < 1, decreasing offsets or a missing array. */
brisk_status brisk_maxsim_batch(brisk_context *ctx, const float *q, int n_q, const float *d, const int64_t *off,
                                int n_docs, int dim, bool normalize, float *scores);

/* The memory traffic of one decode step, in bytes: what a bandwidth figure (GB/s, and its share
 * of the roofline) divides by time. Of this process's layers (a pipeline or tensor-parallel rank:
 * its own). */
typedef struct brisk_step_bytes {
    uint64_t weights; /* weights, once for the step (MoE: the routed experts read, see below), and
                         the step's rows of an untied token embedding */
    uint64_t kv;      /* K and V rows the step's tokens attend to, in the layers with a KV cache only
                         (a hybrid's full-attention layers), at the cache type's size */
    uint64_t state;   /* recurrent (Gated DeltaNet) state, read and written once per sequence: the
                         delta-rule matrices and the conv's last inputs, f32; 0 without such layers */
    uint64_t total;   /* the sum of the three */
} brisk_step_bytes;
/* A step of n_seq sequences, one token each at position depth (depth positions cached before
 * it, so each reads depth + 1 rows of K and V per attention layer), with a kv_type cache.
 * experts_read: the distinct routed experts each MoE layer reads in the step, on average, as
 * measured (brisk_context_expert_reads); <= 0: n_seq * n_expert_used, at most n_expert, the
 * most the step can read (distinct experts are counted on the CPU only; on a GPU this bound
 * is what there is). BRISK_ERR_INVALID_ARG for a negative depth, n_seq < 1 or an unknown type. */
brisk_status brisk_decode_bytes(const brisk_model *model, brisk_kv_type kv_type, int64_t depth, int n_seq,
                                double experts_read, brisk_step_bytes *out);
/* The same under block-sparse attention (brisk_context_params.attn_sparse_k pages of block_size
 * tokens; 0: dense, as brisk_decode_bytes): kv counts the K and V rows of the pages a token reads
 * and, when there are more pages than sparse_k, every page's key summary it scores. */
brisk_status brisk_decode_bytes_sparse(const brisk_model *model, brisk_kv_type kv_type, int64_t depth, int n_seq,
                                       double experts_read, int sparse_k, int block_size, brisk_step_bytes *out);

/* ---- per-sequence cache control --------------------------------------
 * Recurrent models (qwen35, qwen35moe: Gated DeltaNet layers) keep, besides
 * the KV pages of their attention layers, a fixed-size state per sequence
 * that summarises every position so far and cannot be rewound. For them a
 * batch entry must continue its sequence (pos == brisk_seq_len), removing
 * positions is only a clear (p0 == 0), and sharing is only of the whole
 * sequence (n_tokens == brisk_seq_len(src), or 0), unless the sequence holds
 * a checkpoint at that position (below); anything else returns
 * BRISK_ERR_UNSUPPORTED and changes nothing.
 *
 * Checkpoints: a context made with n_seq_checkpoints > 0 keeps up to that
 * many snapshots of each sequence's recurrent state. brisk_seq_checkpoint
 * saves seq's state at its current length P; afterwards brisk_seq_remove may
 * cut seq back to P and brisk_seq_share_prefix may share its first P
 * positions, both restoring the snapshot. When a sequence's snapshots are
 * all taken the one whose removal leaves the smallest gap between its
 * neighbours goes (never the newest); a cut drops the snapshots past it, a
 * clear or being the dst of a share drops them all. */
/* Forgets seq's cache (and recurrent state). */
brisk_status brisk_seq_clear(brisk_context *ctx, int seq);
/* Drops positions [p0, p1) of seq (p1 < 0: to the end). Only a tail can be dropped. */
brisk_status brisk_seq_remove(brisk_context *ctx, int seq, int32_t p0, int32_t p1);
/* dst (cleared first) shares src's cached positions [0, n_tokens): the pages
 * are shared, and copied on the first write into a shared page; a recurrent
 * state is copied. */
brisk_status brisk_seq_share_prefix(brisk_context *ctx, int src, int dst, int32_t n_tokens);
/* Extends seq by n positions without computing them: their cache rows stay
 * as they are (zero in a fresh context) and a recurrent state is untouched.
 * For benchmarks of decode at depth (brisk bench --blank-depth), where a
 * prefill of 1M positions would take many minutes: the step after it reads
 * the same bytes as after a real prefill, but its outputs are no model's. */
brisk_status brisk_seq_extend_blank(brisk_context *ctx, int seq, int32_t n);
/* Next position of seq (its cached length). */
int32_t brisk_seq_len(const brisk_context *ctx, int seq);
/* Snapshots seq's recurrent state at its current length (see Checkpoints
 * above); a no-op for models without recurrent state or contexts made
 * without checkpoints. */
brisk_status brisk_seq_checkpoint(brisk_context *ctx, int seq);
/* The longest prefix of seq, at most n_tokens, that brisk_seq_remove and
 * brisk_seq_share_prefix can keep: min(n_tokens, length) without recurrent
 * state; else the whole sequence if it fits, or its latest checkpoint at or
 * before n_tokens, or 0. */
int32_t brisk_seq_keepable(const brisk_context *ctx, int seq, int32_t n_tokens);
/* Snapshots a sequence can keep: 0 for a model without recurrent state. */
int brisk_context_n_checkpoints(const brisk_context *ctx);

/* ---- sampling -------------------------------------------------------- */

typedef struct brisk_sampler_params {
    float temp;           /* <= 0: greedy */
    int top_k;            /* <= 0: off */
    float top_p;          /* >= 1: off */
    float min_p;          /* <= 0: off */
    float repeat_penalty; /* 1: off */
    float presence_penalty, frequency_penalty;
    int repeat_last_n;    /* tokens looked back for penalties */
    uint64_t seed;
} brisk_sampler_params;

typedef struct brisk_sampler brisk_sampler;
/* llama.cpp's defaults: temp 0.8, top-k 40, top-p 0.95, min-p 0.05, penalties off. */
brisk_sampler_params brisk_sampler_default_params(void);
brisk_status brisk_sampler_new(const brisk_sampler_params *params, int n_vocab, brisk_sampler **out);
void brisk_sampler_free(brisk_sampler *s);
/* Picks a token from logits (n_vocab floats; not modified). */
brisk_token brisk_sampler_sample(brisk_sampler *s, const float *logits);
/* Records a token (prompt or generated) for the penalties; with a grammar
 * set, also advances the grammar (so set it after feeding the prompt). */
void brisk_sampler_accept(brisk_sampler *s, brisk_token tok);

/* ---- grammars (structured output) ------------------------------------- */

/* A grammar constrains sampling to the sentences of a GBNF grammar
 * (llama.cpp's syntax): before its chain the sampler masks every token whose
 * bytes would leave the grammar, and end-of-generation tokens until the text
 * is complete. Token masks walk a trie of the model's token pieces, built
 * once per model on first use, and are cached per grammar state. A grammar
 * holds one parse position: use one per sequence. */
typedef struct brisk_grammar brisk_grammar;
/* GBNF text with start rule root ("root" when NULL). A bad grammar is
 * BRISK_ERR_INVALID_ARG with "grammar: line L, column C: ..." as the message. */
brisk_status brisk_grammar_new(const brisk_model *model, const char *gbnf, const char *root,
                               brisk_grammar **out);
/* A grammar for the JSON values a JSON schema accepts (schema_json: the
 * schema as JSON text; NULL: any JSON object). Objects keep the schema's
 * property order; whitespace is bounded. Unsupported keywords (pattern,
 * allOf, ...) are BRISK_ERR_UNSUPPORTED with the keyword's path. */
brisk_status brisk_grammar_from_json_schema(const brisk_model *model, const char *schema_json,
                                            brisk_grammar **out);
/* The GBNF a schema becomes, as a string the caller free()s. */
brisk_status brisk_json_schema_to_gbnf(const char *schema_json, char **gbnf);
void brisk_grammar_free(brisk_grammar *g);
/* Advances g by a token's bytes. BRISK_ERR_INVALID_ARG (g unchanged) when the
 * token leaves the grammar; end-of-generation tokens are accepted when complete. */
brisk_status brisk_grammar_accept(brisk_grammar *g, brisk_token tok);
/* Whether the text accepted so far is a complete sentence of the grammar
 * (true while a lazy grammar waits for its trigger). */
bool brisk_grammar_is_complete(const brisk_grammar *g);
/* Makes g lazy (llama.cpp's grammar triggers): tokens are unconstrained until
 * the generated text contains one of the n_triggers words of triggers outside
 * any skip_open..skip_close span (both NULL: no spans; skipping: the text
 * starts inside one, as after a prompt that opened <think>). From the earliest
 * trigger on (the longest of those starting there), the text is constrained:
 * the grammar reads that trigger and the rest of its token (only the trigger
 * when the rest leaves it). The words are copied. Call on a new grammar, which
 * must accept each trigger first; BRISK_ERR_INVALID_ARG otherwise. */
brisk_status brisk_grammar_set_triggers(brisk_grammar *g, const char *const *triggers, int n_triggers,
                                        const char *skip_open, const char *skip_close, bool skipping);
/* Whether a lazy grammar still waits for its trigger. */
bool brisk_grammar_waiting(const brisk_grammar *g);
/* Sampling with g from now on; the sampler owns g afterwards (frees it with
 * itself or when replaced). NULL detaches and frees the current one. */
void brisk_sampler_set_grammar(brisk_sampler *s, brisk_grammar *g);

#ifdef __cplusplus
}
#endif
#endif
