/* offload.h — moving activations between the CPU and a GPU backend: the
 * residual stream handed from one stage of a split model to the next, and
 * the routed experts of layers whose expert tensors stay in host memory
 * (brisk_model_params.n_cpu_moe), run on the CPU for a GPU stage.
 *
 * A moe_offload owns a CPU backend (its own thread pool) and host buffers
 * for one micro-batch, allocated once at context creation; the context frees
 * it. The forward pass reaches it through fwd_scratch.moe_offload (arch.h). */
#ifndef BK_OFFLOAD_H
#define BK_OFFLOAD_H
#include "backend/backend.h"
#include "model/arch.h"

/* Copies bytes from src (backend memory of `from`) to dst (backend memory of
 * `to`), one of the two a CPU backend (host memory); a GPU copies and waits. */
brisk_status offload_transfer(bk_backend *from, const void *src, bk_backend *to, void *dst, size_t bytes);

/* A CPU backend of n_threads (0: all cores) and host buffers for n_max tokens
 * of n_embd floats routed to k experts each. */
brisk_status moe_offload_new(int n_threads, int n_max, int n_embd, int k, moe_offload **out);
void moe_offload_free(moe_offload *mo);
#endif
