/* model.h — a loaded model: hyperparameters from GGUF metadata, weights bound
 * by name (mapped from the file, never copied on the CPU), the tokenizer, and
 * the architecture's forward pass.
 *
 * Supported architectures: llama (Llama 2/3, TinyLlama, stories), qwen2
 * (q/k/v biases), qwen3 (QK-norm). All share one decoder-block structure and
 * differ in the flags below; see model/llama.c. qwen3moe (model/qwen3moe.c)
 * is qwen3 with a routed mixture of experts in place of the dense FFN.
 * qwen35 / qwen35moe (model/qwen35.c) are the Qwen3.5/3.6 hybrids: Gated
 * DeltaNet layers with a per-sequence recurrent state, and every
 * full_attn_interval-th layer gated full attention with partial RoPE.
 * Their files may also carry multi-token-prediction (nextn) blocks after the
 * trunk, bound as extra layers plus model_nextn (qwen35.c's qwen35_mtp_forward).
 * qwen3next (Qwen3-Next, the same forward pass) is qwen35moe with the value
 * heads in HF's grouped order, one ssm_ba tensor for beta and alpha and, in
 * older files, one fused ssm_in for q|k|v and z; the loader maps those onto
 * qwen35moe's weights (bind_deltanet).
 */
#ifndef BK_MODEL_H
#define BK_MODEL_H
#include "backend/backend.h"
#include "brisk.h"
#include "format/gguf.h"
#include "tokenizer/tokenizer.h"

typedef enum model_arch { ARCH_LLAMA = 0, ARCH_QWEN2, ARCH_QWEN3, ARCH_QWEN3MOE, ARCH_QWEN35, ARCH_QWEN35MOE,
                         ARCH_QWEN3NEXT, ARCH_COUNT } model_arch;

/* The file's RoPE keys as llama.cpp's loader reads them (llama_hparams' rope_* and yarn_*),
 * kept apart from hparams.rope, which model_rope_resolve computes from them and a load's
 * overrides the way llama_context's constructor computes its cparams. */
typedef struct model_rope_file {
    brisk_rope_scaling type; /* rope.scaling.type: NONE, YARN, or LINEAR (also when absent, as llama.cpp) */
    float freq_base;         /* rope.freq_base (10000) */
    float freq_scale;        /* 1/rope.scaling.factor (older files: rope.scale_linear); 1 without one */
    float attn_factor;       /* rope.scaling.attn_factor (1): multiplies cos/sin under every scaling */
    float yarn_ext_factor;   /* rope.scaling.yarn_ext_factor of a yarn file; -1: none (then 1 under YaRN) */
    float yarn_attn_factor;  /* rope.scaling.yarn_attn_factor (1): used only with ext_factor 0 */
    float yarn_beta_fast, yarn_beta_slow; /* rope.scaling.yarn_beta_* (32, 1) */
    int orig_ctx;            /* rope.scaling.original_context_length, else context_length */
    int n_ctx_train;         /* context_length, before YaRN stretches it (model_rope_resolve) */
} model_rope_file;

typedef struct model_hparams {
    model_arch arch;
    int n_vocab, n_embd, n_layer;
    int n_head, n_head_kv, head_dim; /* head_dim = attention.key_length or n_embd/n_head */
    int n_ff;       /* dense FFN width (unused by qwen3moe, whose every layer is MoE) */
    int n_ctx_train;
    /* MoE (qwen3moe): router softmax -> top n_expert_used -> weights renormalised
     * to sum 1 (llama.cpp hard-codes both for qwen3moe and ignores any
     * expert_weights_norm/scale keys) -> weighted sum of SwiGLU experts of n_ff_exp. */
    int n_expert, n_expert_used, n_ff_exp;
    int n_ff_shexp; /* qwen35moe: the shared expert's width, its output scaled by sigmoid(w . x) */
    /* Gated DeltaNet (qwen35*), keys ssm.* as llama.cpp's loader reads them.
     * Layer l is full attention iff (l + 1) % full_attn_interval == 0. */
    int ssm_d_conv;    /* ssm.conv_kernel: taps of the causal depthwise conv */
    int ssm_d_state;   /* ssm.state_size: head size of q, k and v */
    int ssm_n_k_heads; /* ssm.group_count: q/k heads */
    int ssm_n_v_heads; /* ssm.time_step_rank: value heads (ssm.inner_size = n_v_heads * d_state) */
    int full_attn_interval;
    int n_nextn;       /* nextn_predict_layers: multi-token-prediction blocks stored after the trunk's n_layer
                          (blk.n_layer ...); the trunk never runs them (brisk_model.nextn) */
    bool ssm_v_grouped; /* qwen3next: value head i reads key head i / (n_v / n_k), HF's order; qwen35*:
                           key head i mod n_k (llama.cpp's converter tiles the value heads) */
    int n_attn_layers; /* layers with a KV cache (all but the recurrent ones) */
    float rms_eps;
    bool qk_norm;   /* qwen3: RMSNorm over head_dim on q and k before RoPE */
    bool qkv_bias;  /* qwen2 */
    bool tied_output; /* no output.weight: the LM head is token_embd */
    int pooling_type; /* <arch>.pooling_type (brisk_pooling; 0, none, without the key) */
    bk_rope_params rope;      /* as the forward pass rotates: rope_file resolved with the load's overrides */
    model_rope_file rope_file;
} model_hparams;

/* Is layer l a recurrent (Gated DeltaNet) layer? (An MTP block, l >= n_layer, is full attention.) */
static inline bool model_layer_recurrent(const model_hparams *hp, int l) {
    return hp->full_attn_interval > 0 && l < hp->n_layer && (l + 1) % hp->full_attn_interval != 0;
}

typedef struct layer_weights {
    bk_weight attn_norm;            /* (n_embd) f32 */
    bk_weight wq, wk, wv, wo;       /* (n_head*hd, n_embd), (n_kv*hd, n_embd) x2, (n_embd, n_head*hd);
                                       qwen35: wq (n_head*2*hd, n_embd), per head hd query then hd gate rows */
    bk_weight bq, bk, bv;           /* biases, qwen2 only (type 0 / n_out 0 when absent) */
    bk_weight q_norm, k_norm;       /* (head_dim), qwen3 only */
    bk_weight ffn_norm;             /* (n_embd); the hybrids: post_attention_norm */
    /* Gated DeltaNet layer (qwen35): conv_dim = (2 n_k_heads + n_v_heads) d_state, value_dim = n_v_heads d_state */
    bk_weight ssm_qkv;              /* attn_qkv (conv_dim, n_embd) */
    bk_weight ssm_z;                /* attn_gate (value_dim, n_embd): the output norm's SiLU gate */
    bk_weight ssm_conv1d;           /* (conv_dim, d_conv) f32 */
    bk_weight ssm_dt_bias, ssm_a;   /* (n_v_heads) f32: softplus bias, -exp(A_log) */
    bk_weight ssm_beta, ssm_alpha;  /* (n_v_heads, n_embd); qwen3next: rows picked out of ssm_ba */
    bk_weight ssm_norm;             /* (d_state) */
    bk_weight ssm_out;              /* (n_embd, value_dim) */
    bk_weight gate_inp_shexp;       /* qwen35moe shared expert: gate (n_embd) f32, FFN (n_ff_shexp) */
    bk_weight gate_shexp, up_shexp, down_shexp;
    bk_weight w_gate, w_up, w_down; /* (n_ff, n_embd) x2, (n_embd, n_ff) */
    bk_weight ffn_gate_inp;         /* MoE router (n_expert, n_embd) */
    bk_weight gate_exps, up_exps;   /* (n_expert * n_ff_exp, n_embd), n_expert set; tensor parallelism:
                                       the rank's tp_n_expert_local experts */
    bk_weight down_exps;            /* (n_expert * n_embd, n_ff_exp) */
    bool exps_host;                 /* a GPU layer whose experts stay in host memory (n_cpu_moe): its
                                       expert FFN runs through backend/moe.h */
} layer_weights;

/* A multi-token-prediction (nextn) block's own tensors (llama.cpp's layer.nextn); the block's attention and
 * FFN are ordinary layer_weights at m->layers[n_layer + i]. See qwen35.c's qwen35_mtp_forward. */
typedef struct model_nextn {
    bk_weight eh_proj;          /* (n_embd, 2 n_embd): input columns [embedding ; hidden] */
    bk_weight enorm, hnorm;     /* (n_embd) f32: the token embedding's and the hidden state's norms */
    bk_weight embed_tokens;     /* (n_vocab, n_embd) optional (absent: the model's token_embd) */
    bk_weight shared_head_head; /* (n_vocab, n_embd) optional (absent: the model's LM head) */
    bk_weight shared_head_norm; /* (n_embd) optional (absent: output_norm) */
} model_nextn;

struct brisk_model {
    gguf_file *gguf;
    tokenizer *tok;
    model_hparams hp;
    bool vocab_only;
    bk_backend *be;       /* GPU backend holding device copies of layers [n_cpu_layers, n_layer) and the
                             output layer; NULL: the CPU reads the map */
    int n_cpu_layers;     /* layers [0, n_cpu_layers) and the token embedding run on the CPU; the rest on be,
                             or (be NULL, a split_cpu model) on a second CPU backend. See model_split. */
    int n_cpu_moe;        /* layers [0, n_cpu_moe) keep their experts in host memory (brisk_model_params);
                             0 when no layer runs off the CPU */
    uint64_t gpu_weight_bytes; /* bytes of the device copies */
    uint64_t cpu_moe_bytes;    /* expert bytes kept in host memory by n_cpu_moe (of layers off the CPU) */
    bk_weight tok_embd;   /* (n_vocab, n_embd) */
    bk_weight output_norm;/* (n_embd) */
    bk_weight output;     /* (n_vocab, n_embd); a copy of tok_embd's description when tied */
    bk_weight rope_freqs; /* optional (n_rot/2) f32 */
    /* the classification head of a reranker (pooling rank), host memory, each optional (host NULL):
     * cls (n_embd, n_embd) and cls.bias, then cls.output (n_cls_out, n_embd) and cls.output.bias */
    bk_weight cls, cls_b, cls_out, cls_out_b;
    layer_weights *layers;/* (n_layer + n_mtp): the trunk, then the MTP blocks */
    model_nextn *nextn;   /* (n_mtp) the MTP blocks' own tensors, or NULL */
    int n_mtp;            /* MTP blocks bound (hp.n_nextn when the file holds their tensors, else 0; never
                             with tensor or pipeline parallelism). Bound for the CPU, whatever -ngl says, and
                             not counted in n_params / weight_bytes (mtp_bytes): plain decoding never reads them */
    uint64_t mtp_params, mtp_bytes;
    uint64_t n_params, weight_bytes;
    char arch_name[32];
    char name[128];
    void *grammar_vocab;              /* engine/grammar.c's token trie, built on first use */
    void (*grammar_vocab_free)(void *);
    /* Tensor parallelism (brisk_model_params.tp_size > 0): this rank's shard of q/k/v and gate/up
     * (rows: whole heads) and of the attention output and down (columns); hp.n_head, n_head_kv and
     * n_ff are this rank's. The forward pass all-reduces the column-split products. A MoE model
     * (qwen3moe) holds whole experts instead of FFN columns: the expert tensors are the rank's
     * slice [tp_expert0, tp_expert0 + tp_n_expert_local) while hp.n_expert, which the router
     * spans, stays the whole model's (and hp.n_ff, unused there, is not split). qwen35*: hp's
     * ssm_n_k_heads / ssm_n_v_heads (Gated DeltaNet heads, by whole key heads with their value
     * heads, see shard.h's shard_gather) and n_ff_shexp (the shared expert) are the rank's too. */
    int tp_rank, tp_size;
    int tp_n_head, tp_n_head_kv, tp_n_ff;                  /* the whole model's */
    int tp_ssm_n_k_heads, tp_ssm_n_v_heads, tp_n_ff_shexp; /* the whole model's (qwen35*) */
    int tp_expert0, tp_n_expert_local;    /* MoE: this rank's experts (0, 0 without experts) */
    void **tp_packed;                 /* (n_tp_packed) host copies of column shards packed for upload */
    int n_tp_packed;
    /* Pipeline parallelism (brisk_model_params.pp_size > 0): this rank holds layers [pp_l0, pp_l1)
     * (model_pp_layers), rank 0 also the embedding, the final norm and the LM head; the other
     * layers are not bound. The link (tp below) runs the ranks as for tensor parallelism. */
    int pp_rank, pp_size, pp_l0, pp_l1;
    struct tp_link *tp;               /* engine/tp.h: the ranks this one mirrors its calls to, or NULL */
    void (*tp_free)(struct tp_link *);
};

/* The first layer of the model's second stage when its layers are split
 * across two backends (0 < split < n_layer); 0 when one backend runs them all. */
static inline int model_split(const brisk_model *m) {
    return m->n_cpu_layers > 0 && m->n_cpu_layers < m->hp.n_layer ? m->n_cpu_layers : 0;
}

/* The layers [*l0, *l1) of pipeline rank `rank` of n_ranks: consecutive runs as even as the
 * count allows, the first ranks taking one more (rank 0 also runs the LM head, but the split
 * stays by layers: a layer's share of a step is the same on every rank). */
static inline void model_pp_layers(int n_layer, int rank, int n_ranks, int *l0, int *l1) {
    int base = n_layer / n_ranks, extra = n_layer % n_ranks;
    *l0 = rank * base + (rank < extra ? rank : extra);
    *l1 = *l0 + base + (rank < extra);
}

/* Bytes of weights a model puts on the GPU when layers [0, n_cpu_layers) of the n_layer of its trunk
 * run on the CPU and layers [0, n_cpu_moe) keep their experts in host memory: the other layers, the
 * output layer, the embedding when it serves as the tied LM head (else it stays in host memory), and
 * the MTP blocks after the trunk (but their own embedding) when its last layer is on the GPU. */
uint64_t model_gpu_bytes(const gguf_file *g, int n_layer, int n_cpu_layers, int n_cpu_moe);
/* Bytes of weights one forward pass over a small batch reads: every weight once, the token
 * embedding only as the tied LM head (its looked-up rows are not counted), and of each MoE
 * layer's routed experts experts_read distinct ones (at most n_expert; a fraction is an
 * average over steps). */
uint64_t model_step_weight_bytes(const brisk_model *m, double experts_read);
/* True when the layers split as for a GPU onto a second CPU backend: params->split_cpu, or
 * BRISK_SPLIT_CPU=1 (tests without a GPU; read here only). */
bool model_split_cpu(const brisk_model_params *params);
/* Reads hyperparameters for the file's architecture (BRISK_ERR_UNSUPPORTED for others). */
brisk_status model_read_hparams(const gguf_file *g, model_hparams *hp);
/* The file's RoPE keys under arch (ARCH.rope.freq_base, ARCH.rope.scaling.*) as llama.cpp's loader reads
 * them; n_ctx_train: ARCH.context_length (the default original context). */
brisk_status model_read_rope_file(const gguf_file *g, const char *arch, int n_ctx_train, model_rope_file *rf);
/* hp->rope (and hp->n_ctx_train) from hp->rope_file and the overrides o (NULL: none), as
 * llama.cpp v0.4.0 resolves its context's rope parameters: the scaling type picks ext_factor's
 * default (1 under YaRN), YaRN's cos/sin scale comes out as 1 + 0.1 ln(1/freq_scale) times
 * rope.scaling.attn_factor, and a YaRN freq_scale other than the file's stretches n_ctx_train
 * to orig_ctx / freq_scale. BRISK_ERR_INVALID_ARG (with the field) for an override out of range. */
brisk_status model_rope_resolve(model_hparams *hp, const brisk_rope_overrides *o);
/* Llama 3's RoPE scaling ("rope_type": "llama3"): the factor dividing frequency i of a head of dim (the
 * rope_freqs tensor's element i, as HF's _compute_llama3_parameters and llama.cpp's converter make it). */
float model_rope_llama3_factor(int64_t i, int64_t dim, double base, double factor, double lo, double hi,
                               double orig_ctx);
#endif
