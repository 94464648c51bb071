/* cuda_pdl.cuh — programmatic dependent launch (Hopper and later) for the
 * decode step's small kernels.
 *
 * Why: a decode step is ~400 kernels of 2-30 us; between two of them the GPU
 * drains the first grid, then schedules the second (launch and ramp, ~1-2 us
 * each even inside a CUDA graph). A kernel launched with
 * cudaLaunchAttributeProgrammaticStreamSerialization may be scheduled while
 * its predecessor still runs; it must call pdl_wait() before it touches
 * memory (griddepcontrol.wait returns once the predecessor grid has completed
 * and its writes are visible), so the results are those of ordinary stream
 * order. pdl_wait() first lets the next kernel launch (launch_dependents),
 * then waits: while a small kernel (a norm, the rope, the attention) waits on
 * the product before it, the product after it is already resident where room
 * frees up and streams its weights, which depend on nothing, so the weights
 * of one product follow the last bytes of the one before without the small
 * kernel's time and launch between them (H200, qwen3-8b tg128: 393.9 with the
 * trigger after the wait, 406.1 before it; bench/RESULTS.md, session 14).
 * Chains cannot deadlock: a grid's dependents launch only once all of its
 * blocks have started, so every kernel that waits has its predecessor fully
 * resident. A kernel may only read memory written by earlier kernels after
 * pdl_wait (their completion is transitive through the chain of waits).
 * A build with -DBK_PDL_LATE triggers after the wait instead (never more than
 * one kernel waits ahead), for A/B.
 * Kernels launched the ordinary way stay full barriers. Stream capture keeps
 * these edges in the graph. BRISK_CUDA_DISABLE=pdl (or a device before sm_90)
 * launches them the ordinary way; the two device calls are then no-ops. */
#ifndef BK_CUDA_PDL_CUH
#define BK_CUDA_PDL_CUH
#include <utility>

#include "backend/cuda/cuda_internal.cuh"

__device__ __forceinline__ void pdl_wait() {
    bk_trace_mark(BK_TRACE_START); /* (a trace build only: cuda_trace.cuh) */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
#ifndef BK_PDL_LATE
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    asm volatile("griddepcontrol.wait;" ::: "memory");
#ifdef BK_PDL_LATE
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
#endif
    bk_trace_mark(BK_TRACE_WAIT);
}

/* The batched products (cuda_mmqh.cu, cuda_mmq.cuh) let the next kernel launch only once they pass
 * their own wait, as before the early trigger: they take whole SMs for many rounds, and the batched
 * decode lost with every kernel triggering first (H200, qwen3-8b at 32 sequences: 3,864 against
 * 4,016 with all triggers late, one lease; with this, 3,737 against 3,804 in another, within the
 * lease's spread; 8 sequences level). */
__device__ __forceinline__ void pdl_wait_late() {
    bk_trace_mark(BK_TRACE_START);
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
    bk_trace_mark(BK_TRACE_WAIT);
}

/* kernel<<<grid, block, smem, cb->stream>>>(args...), as a programmatic dependent launch unless off, in
 * clusters of cluster_x blocks along x when cluster_x > 0 (gridDim.x a multiple of it). Errors surface
 * through CU_LAUNCHED's cudaGetLastError like those of <<<>>>. */
template <typename... P, typename... A>
static inline void pdl_launch_ex(cuda_backend *cb, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                                 unsigned cluster_x, A &&...args) {
    if (cb->pdl_off && !cluster_x) {
        kernel<<<grid, block, smem, cb->stream>>>(std::forward<A>(args)...);
        return;
    }
    cudaLaunchAttribute at[2];
    unsigned na = 0;
    if (cluster_x) {
        at[na].id = cudaLaunchAttributeClusterDimension;
        at[na].val.clusterDim.x = cluster_x;
        at[na].val.clusterDim.y = 1;
        at[na].val.clusterDim.z = 1;
        na++;
    }
    if (!cb->pdl_off) {
        at[na].id = cudaLaunchAttributeProgrammaticStreamSerialization;
        at[na].val.programmaticStreamSerializationAllowed = 1;
        na++;
    }
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = cb->stream;
    cfg.attrs = at;
    cfg.numAttrs = na;
    (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}
template <typename... P, typename... A>
static inline void pdl_launch(cuda_backend *cb, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A &&...args) {
    pdl_launch_ex(cb, kernel, grid, block, smem, 0u, std::forward<A>(args)...);
}
template <typename... P, typename... A>
static inline void pdl_launch_cluster(cuda_backend *cb, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem,
                                      unsigned cluster_x, A &&...args) {
    pdl_launch_ex(cb, kernel, grid, block, smem, cluster_x, std::forward<A>(args)...);
}
#endif
