/* offload.h — moving activations between the CPU and a GPU backend: the
 * residual stream handed from one stage of a split model to the next, and
 * the routed experts of layers whose expert tensors stay in host memory
 * (brisk_model_params.n_cpu_moe), run on the CPU for a GPU stage, with an
 * optional hot-expert cache on the GPU (brisk_context_params.cache_experts).
 *
 * A moe_offload owns a CPU backend (its own thread pool) and host buffers
 * for one micro-batch, allocated once at context creation; the context frees
 * it. The forward pass reaches it through fwd_scratch.moe_offload (arch.h).
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
 * between passes (moe_offload_step). See offload.c for the modes, the split
 * of a batch, the cost rules and the refresh. */
#ifndef BK_OFFLOAD_H
#define BK_OFFLOAD_H
#include "backend/backend.h"
#include "model/arch.h"

/* Copies bytes from src (backend memory of `from`) to dst (backend memory of
 * `to`), one of the two a CPU backend (host memory); a GPU copies and waits. */
brisk_status offload_transfer(bk_backend *from, const void *src, bk_backend *to, void *dst, size_t bytes);

/* A CPU backend of n_threads (0: all cores) placed as place says (NULL: anywhere) and host buffers
 * for n_max tokens of n_embd floats routed to k experts each. */
brisk_status moe_offload_new(int n_threads, const brisk_cpu_placement *place, int n_max, int n_embd, int k,
                             moe_offload **out);
void moe_offload_free(moe_offload *mo);

/* Bytes of one expert of layer l (gate, up and down rows), and the cache's backend memory for
 * `slots` slots in each layer of [l0, l1) with its experts in host memory, `spare` spare slots and
 * its buffers for n_max tokens (0 when no layer there keeps its experts in host memory). */
uint64_t moe_cache_expert_bytes(const brisk_model *m, int l);
/* The layers of [l0, l1) with experts in host memory: their number, the sum of one expert of each
 * (*sum) and the largest (*max). */
int moe_cache_layers(const brisk_model *m, int l0, int l1, uint64_t *sum, uint64_t *max);
uint64_t moe_cache_bytes(const brisk_model *m, int l0, int l1, int slots, int spare, int n_max);
/* Gives mo a hot-expert cache on be (the stage's backend) for the layers of [l0, l1) whose experts
 * are in host memory: `slots` per layer, `spare` shared. stats (n_layer, n_expert) or NULL picks the
 * first experts (the most routed of each layer, copied before this returns); without it the cache
 * fills from the first batches' counts. */
brisk_status moe_offload_cache(moe_offload *mo, bk_backend *be, const brisk_model *m, int l0, int l1, int slots,
                               int spare, const int64_t *stats);
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
