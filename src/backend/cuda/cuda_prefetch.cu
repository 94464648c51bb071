/* cuda_prefetch.cu — weights asked into the L2 ahead of their product, on a side stream
 * (BRISK_CUDA_L2PF=1; off by default: staged for measurement, see bench/RESULTS.md, session 12).
 *
 * Why: a decode step is a chain of dependent kernels, and between the bandwidth-bound products run
 * latency-bound ones (QK-norm + rope, the attention, RMS norms) during which the HBM idles:
 * BRISK_CUDA_ABLATE put the attention alone at ~7 us a layer for qwen3-8b at short depth, time in
 * which the HBM could move ~30 MB. Here the model names the weights it reads next (the attention
 * output projection, the FFN's first rows) right after it issues the q/k/v product; the backend forks
 * a side stream from the main one at that point and launches Hopper's bulk L2 prefetch over them
 * (cp.async.bulk.prefetch.L2, no data returned to the SMs), so the product that reads them later
 * finds part of its bytes in the L2 (50 MB on the H200). The side stream joins the main one at the
 * step's end (before a capture ends, and before any read), so a captured graph holds the fork and
 * the join. Decode-sized steps only (at most GRAPH-sized batches): prefill products are not short of
 * bandwidth time. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"

#define PF_CHUNK (64 * 1024) /* bytes per prefetch request */
#define PF_MAX_TOKENS 16

__global__ void l2_prefetch_kernel(const uint8_t *p, size_t bytes) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 900
    const size_t step = (size_t)gridDim.x * blockDim.x * PF_CHUNK;
    for (size_t off = ((size_t)blockIdx.x * blockDim.x + threadIdx.x) * PF_CHUNK; off < bytes; off += step) {
        size_t n = bytes - off < PF_CHUNK ? bytes - off : PF_CHUNK;
        n &= ~(size_t)15;
        if (n) asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(p + off), "r"((uint32_t)n) : "memory");
    }
#else
    (void)p;
    (void)bytes;
#endif
}

brisk_status cuda_prefetch_init(cuda_backend *cb, int cc_major) {
    const char *e = getenv("BRISK_CUDA_L2PF");
    if (!e || strcmp(e, "1") || cc_major < 9) return BRISK_OK;
    CU_TRY(cudaStreamCreateWithFlags(&cb->pf_stream, cudaStreamNonBlocking));
    CU_TRY(cudaEventCreateWithFlags(&cb->pf_fork, cudaEventDisableTiming));
    CU_TRY(cudaEventCreateWithFlags(&cb->pf_join, cudaEventDisableTiming));
    const char *mb = getenv("BRISK_CUDA_L2PF_MB");
    cb->pf_cap = (size_t)(mb ? atoi(mb) : 12) << 20;
    return BRISK_OK;
}

void cuda_prefetch_free(cuda_backend *cb) {
    if (cb->pf_stream) {
        cudaStreamSynchronize(cb->pf_stream);
        cudaStreamDestroy(cb->pf_stream);
    }
    if (cb->pf_fork) cudaEventDestroy(cb->pf_fork);
    if (cb->pf_join) cudaEventDestroy(cb->pf_join);
    cb->pf_stream = NULL;
    cb->pf_fork = cb->pf_join = NULL;
}

/* The main stream waits for the side stream's prefetches: a capture must end joined. */
void cuda_prefetch_join(cuda_backend *cb) {
    if (!cb->pf_pending) return;
    cb->pf_pending = false;
    CU_OP(cb, cudaStreamWaitEvent(cb->stream, cb->pf_join, 0));
}

extern "C" void cuda_prefetch(bk_backend *be, const bk_weight *w, int n) {
    cuda_backend *cb = (cuda_backend *)be;
    if (!cb->pf_stream || !cb->step_on || n > PF_MAX_TOKENS || !w || !w->dev) return;
    size_t bytes = (size_t)w->n_out * w->row_bytes;
    if (bytes > cb->pf_cap) bytes = cb->pf_cap; /* of the L2's 50 MB: the rows a product reads first */
    if ((uintptr_t)w->dev % 16 || bytes < 16) return;
    CU_OP(cb, cudaEventRecord(cb->pf_fork, cb->stream));
    CU_OP(cb, cudaStreamWaitEvent(cb->pf_stream, cb->pf_fork, 0));
    unsigned blocks = (unsigned)((bytes + (size_t)PF_CHUNK * 32 - 1) / ((size_t)PF_CHUNK * 32));
    l2_prefetch_kernel<<<blocks, 32, 0, cb->pf_stream>>>((const uint8_t *)w->dev, bytes);
    CU_OP(cb, cudaGetLastError());
    CU_OP(cb, cudaEventRecord(cb->pf_join, cb->pf_stream));
    cb->pf_pending = true;
}
