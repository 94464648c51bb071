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
 * order. Each such kernel calls pdl_wait() first and pdl_allow_next() right
 * after: the next kernel can then be scheduled while this one runs, but never
 * more than one kernel waits ahead (its own trigger comes after its wait).
 * Kernels launched the ordinary way stay full barriers. Stream capture keeps
 * these edges in the graph. BRISK_CUDA_PDL=0 (or a device before sm_90)
 * launches them the ordinary way; the two device calls are then no-ops. */
#ifndef BK_CUDA_PDL_CUH
#define BK_CUDA_PDL_CUH
#include <utility>

#include "backend/cuda/cuda_internal.cuh"

__device__ __forceinline__ void pdl_wait() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.wait;" ::: "memory");
#endif
}

__device__ __forceinline__ void pdl_allow_next() {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    asm volatile("griddepcontrol.launch_dependents;" ::: "memory");
#endif
}

/* kernel<<<grid, block, smem, cb->stream>>>(args...), as a programmatic dependent launch unless off.
 * Errors surface through CU_LAUNCHED's cudaGetLastError like those of <<<>>>. */
template <typename... P, typename... A>
static inline void pdl_launch(cuda_backend *cb, void (*kernel)(P...), dim3 grid, dim3 block, size_t smem, A &&...args) {
    if (cb->pdl_off) {
        kernel<<<grid, block, smem, cb->stream>>>(std::forward<A>(args)...);
        return;
    }
    cudaLaunchAttribute at[1];
    at[0].id = cudaLaunchAttributeProgrammaticStreamSerialization;
    at[0].val.programmaticStreamSerializationAllowed = 1;
    cudaLaunchConfig_t cfg = {};
    cfg.gridDim = grid;
    cfg.blockDim = block;
    cfg.dynamicSmemBytes = smem;
    cfg.stream = cb->stream;
    cfg.attrs = at;
    cfg.numAttrs = 1;
    (void)cudaLaunchKernelEx(&cfg, kernel, std::forward<A>(args)...);
}
#endif
