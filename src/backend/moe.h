/* moe.h — a layer's mixture of experts wherever its experts live, as one
 * op for the model (bk_moe_ffn): on the stage's backend, or in host memory
 * (brisk_model_params.n_cpu_moe) run on the CPU for a GPU stage, with an
 * optional hot-expert cache on the GPU (brisk_context_params.cache_experts).
 * Also the copy of activations between a CPU and a GPU backend.
 *
 * A moe_offload owns a CPU backend (its own thread pool) and host buffers
 * for one micro-batch, allocated once at context creation, and the table of
 * its stage's host experts; the context frees it. The forward pass hands it
 * to bk_moe_ffn through bk_moe_layer.host.
 *
 * The hot-expert cache, per layer with experts in host memory: C slots on
 * the stage's backend holding copies of C experts (three compact bk_weights,
 * n_expert = C, the rows laid out as the model's), a map expert -> slot, and
 * decayed routing counts; plus P spare slots shared by the layers (layers run
 * one after another) for missed experts copied for one batch. By default
 * (map mode) each cached layer also has device tables of expert pointers
 * (slot or mapped host bytes) and routing counters: the GPU reads misses over
 * PCIe and never waits for the host, so the step can be a CUDA graph; the
 * host reads the counters back every few passes and refreshes the cache
 * between passes (moe_offload_step). See moe.c for the modes, the split
 * of a batch, the cost rules and the refresh. */
#ifndef BK_MOE_H
#define BK_MOE_H
#include "backend/backend.h"
#include "brisk.h"

typedef struct moe_offload moe_offload;

/* One layer's feed-forward block of routed experts, and its shared expert if it has one (qwen35moe). */
typedef struct bk_moe_layer {
    const bk_weight *gate, *up, *down;          /* the routed experts (n_expert each) */
    const bk_weight *gate_sh, *up_sh, *down_sh; /* the shared expert, or NULL (qwen3moe) */
    moe_offload *host; /* the experts are in host memory: the stage's offload; NULL: they are on be */
    int layer;         /* the model's layer index (the offload's cache is per layer) */
} bk_moe_layer;

/* A batch through it: the router's choices, the residual it adds to and its scratch (backend memory). */
typedef struct bk_moe_io {
    const float *h;        /* (n, n_embd) the normed input */
    int n, k, n_embd;      /* tokens; experts routed a token; the rows' width */
    int32_t *ids;          /* (n, k) the chosen experts (expert parallelism rewrites them in place) */
    const float *w;        /* (n, k) their weights */
    const float *sh_logit; /* (n) the shared expert's gate logit (with gate_sh) */
    float *x;              /* (n, n_embd) the residual stream */
    float *out, *sh;       /* (n, n_embd) scratch: the experts' sum; the shared expert's output */
    float *ff_tmp, *ff;    /* (n, n_ff_shexp) scratch: the shared expert's products and SwiGLU */
    int tp;                /* tensor-parallel ranks (0: none): the sum is all-reduced before x */
    int e0, e1;            /* tp > 1: this rank holds experts [e0, e1) and runs only those */
} bk_moe_io;

/* x += sum over the k chosen experts e of w_e down_e(silu(gate_e h) * up_e h), plus with a shared
 * expert sigmoid(sh_logit) down_sh(silu(gate_sh h) * up_sh h): the backend's fused op where it has
 * one (moe_ffn_shared: experts on be, or cached ones through the offload's tables; no tensor
 * parallelism), else moe_ffn on be or through the offload, then the shared expert and the add
 * (gated_residual). Rounded as those ops. */
brisk_status bk_moe_ffn(bk_backend *be, const bk_moe_layer *L, const bk_moe_io *io);

/* Copies bytes from src (backend memory of `from`) to dst (backend memory of
 * `to`), one of the two a CPU backend (host memory); a GPU copies and waits. */
brisk_status offload_transfer(bk_backend *from, const void *src, bk_backend *to, void *dst, size_t bytes);

/* A stage's experts in host memory: exps[l - l0] holds layer l's gate, up and down tensors (of n_expert
 * experts each) for l in [l0, l1), or NULLs for a layer whose experts are on the stage's backend. */
typedef struct moe_host_experts {
    int l0, l1;
    int n_expert, n_expert_used, n_embd;
    const bk_weight *(*exps)[3];
} moe_host_experts;

/* A CPU backend of n_threads (0: all cores) placed as place says (NULL: anywhere), host buffers for
 * n_max tokens, and a copy of hx's table. */
brisk_status moe_offload_new(int n_threads, const brisk_cpu_placement *place, int n_max, const moe_host_experts *hx,
                             moe_offload **out);
void moe_offload_free(moe_offload *mo);

/* The layers with experts in host memory: their number, the sum of one expert of each (*sum) and
 * the largest (*max). The layers' experts share a shape but not always a type (Q4_K_M gives some
 * layers' down products Q6_K), so each layer's slots are sized by its own experts, and the spare
 * slots by the largest. */
int moe_cache_layers(const moe_offload *mo, uint64_t *sum, uint64_t *max);
/* The cache's backend memory for `slots` slots in each of those layers, `spare` spare slots and its
 * buffers for the offload's n_max tokens. */
uint64_t moe_cache_bytes(const moe_offload *mo, int slots, int spare);
/* Gives mo a hot-expert cache on be (the stage's backend): `slots` per layer, `spare` shared. stats
 * (the model's n_layer x n_expert counts) or NULL picks the first experts (the most routed of each
 * layer, copied before this returns); without it the cache fills from the first batches' counts. */
brisk_status moe_offload_cache(moe_offload *mo, bk_backend *be, int slots, int spare, const int64_t *stats);
/* Adds the cache's counters (layer -1: all its layers) to out; false when mo has no cache. In map
 * mode it first reads the device counters back and waits for them (exact figures; not for the
 * decode loop). */
bool moe_offload_cache_stats(moe_offload *mo, int layer, brisk_expert_cache_stats *out);
/* Between forward passes of the stage (never inside a captured step): lets finished copies into the
 * tables, folds a landed counter readback in and runs the refresh on it, and queues the next
 * readback every BRISK_XCACHE_READ_EVERY (16) passes (every pass while a slot is empty). A no-op
 * unless the cache is in map mode. */
brisk_status moe_offload_step(moe_offload *mo);
/* True when a pass of n tokens through mo's layers never waits for the host (every host-expert
 * layer cached in map mode, and n within the map rule): the stage may capture it as a graph. */
bool moe_offload_no_sync(const moe_offload *mo, int n);
#endif
