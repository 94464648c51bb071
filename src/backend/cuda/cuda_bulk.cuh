/* cuda_bulk.cuh — Hopper's bulk-copy engine (cp.async.bulk) and its mbarriers, for the products
 * that stream weight rows into shared memory (cuda_mmvs.cu at one token, cuda_mmqh.cu for batches),
 * and the row addressing of their concatenated matrices (mmvs_mats): cuda_mmvs.cu (quantized
 * weights) and cuda_mmvf.cu (float weights) share them. */
#ifndef BK_CUDA_BULK_CUH
#define BK_CUDA_BULK_CUH
#include "backend/cuda/cuda_mmvq.cuh"

/* ---- the bulk-copy engine and its barriers (PTX ISA 8.0, sm_90; a build for an older
 * CUDA_ARCH compiles them to traps, and the backend never launches the kernel there) ---- */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 900
#define BK_NO_BULK 1
#endif
__device__ __forceinline__ uint32_t smem_u32(const void *p) { return (uint32_t)__cvta_generic_to_shared(p); }

#ifdef BK_NO_BULK
__device__ __forceinline__ void mbar_init(uint64_t *, uint32_t) { __trap(); }
__device__ __forceinline__ void mbar_init_fence() {}
__device__ __forceinline__ void mbar_expect_bytes(uint64_t *, uint32_t) {}
__device__ __forceinline__ void mbar_wait(uint64_t *, uint32_t) {}
__device__ __forceinline__ void bulk_copy_g2s(void *, const void *, uint32_t, uint64_t *, uint64_t) {}
#else
__device__ __forceinline__ void mbar_init(uint64_t *bar, uint32_t count) {
    asm volatile("mbarrier.init.shared::cta.b64 [%0], %1;" ::"r"(smem_u32(bar)), "r"(count) : "memory");
}
/* makes the barriers' initialisation visible to the copy engine */
__device__ __forceinline__ void mbar_init_fence() { asm volatile("fence.mbarrier_init.release.cluster;" ::: "memory"); }

/* an arrival on the stage's phase, announcing the bytes the copies it counts will deliver
 * (cuda_mmvs.cu: one a stage; cuda_mmqh.cu: one per lane, each for its own row) */
__device__ __forceinline__ void mbar_expect_bytes(uint64_t *bar, uint32_t bytes) {
    asm volatile("mbarrier.arrive.expect_tx.shared::cta.b64 _, [%0], %1;" ::"r"(smem_u32(bar)), "r"(bytes) : "memory");
}

__device__ __forceinline__ void mbar_wait(uint64_t *bar, uint32_t parity) {
    asm volatile("{\n\t.reg .pred done;\n"
                 "bk_mbar_wait_%=:\n\t"
                 "mbarrier.try_wait.parity.shared::cta.b64 done, [%0], %1;\n\t"
                 "@!done bra bk_mbar_wait_%=;\n}" ::"r"(smem_u32(bar)),
                 "r"(parity)
                 : "memory");
}

/* bytes (a multiple of 16) from global src to shared dst (both 16-byte aligned), counted on bar */
__device__ __forceinline__ void bulk_copy_g2s(void *dst, const void *src, uint32_t bytes, uint64_t *bar,
                                              uint64_t policy) {
    asm volatile("cp.async.bulk.shared::cluster.global.mbarrier::complete_tx::bytes.L2::cache_hint [%0], [%1], %2, [%3], %4;"
                 ::"r"(smem_u32(dst)), "l"(src), "r"(bytes), "r"(smem_u32(bar)), "l"(policy)
                 : "memory");
}
#endif

/* The copies' L2 policy for streamed weights: evict first (read once a step; the KV cache and the
 * activations should keep the L2). */
__device__ __forceinline__ uint64_t bulk_evict_first() {
    uint64_t policy = 0;
#ifndef BK_NO_BULK
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
    return policy;
}
/* Lane 0 of a warp: its ring's stage barriers initialised, then its first n_pre stages asked for
 * (issue(j) fills stage j); the products call it before pdl_wait, the weights depending on no
 * kernel before. */
template <class F> __device__ __forceinline__ void ring_start(uint64_t *bar, int stages, int64_t n_pre, F issue) {
    for (int s = 0; s < stages; s++) mbar_init(bar + s, 1);
    mbar_init_fence();
    for (int64_t j = 0; j < n_pre; j++) issue(j);
}

/* The first byte of row r of the concatenated matrices (W2: of the up matrix's row r). */
__device__ __forceinline__ const uint8_t *mmvs_row_src(const mmvs_mats &mm, int64_t r, uint32_t row_bytes) {
    const bool m1 = mm.count > 1 && r >= mm.rend[0], m2 = mm.count > 2 && r >= mm.rend[1];
    const uint8_t *W = m2 ? mm.W[2] : m1 ? mm.W[1] : mm.W[0];
    const int64_t r0 = m2 ? mm.rend[1] : m1 ? mm.rend[0] : 0;
    return W + (r - r0) * (int64_t)row_bytes;
}

/* Shared-memory bytes of a block's stage barriers (nw warps, stages each), rounded to 128. */
__host__ __device__ __forceinline__ size_t mmvs_bar_bytes(int nw, int stages) {
    return ((size_t)nw * stages * 8 + 127) & ~(size_t)127;
}

/* Row r's result: silu(a) * b (GLU), or a (+ bias) stored or added to its matrix's output. */
template <bool GLU>
__device__ __forceinline__ void mmvs_store(const mmvs_mats &mm, int64_t r, float a, float b, int accum) {
    if (GLU) {
        mm.y[0][r] = silu_f(a) * b; /* as swiglu_kernel computes it */
    } else {
        const bool m1 = mm.count > 1 && r >= mm.rend[0], m2 = mm.count > 2 && r >= mm.rend[1];
        float *y = m2 ? mm.y[2] : m1 ? mm.y[1] : mm.y[0];
        const float *bias = m2 ? mm.bias[2] : m1 ? mm.bias[1] : mm.bias[0];
        const int64_t rr = r - (m2 ? mm.rend[1] : m1 ? mm.rend[0] : 0);
        float v = a + (bias ? bias[rr] : 0.0f);
        y[rr] = accum ? y[rr] + v : v;
    }
}

/* The stages a warp asks for before its wait (BRISK_CUDA_MMVS_PRE, default 1, 0: the whole ring).
 * One, on rows of 4,096 columns and more: on the H200 (session 19, tg128) qwen3-8b ran 440.6 against
 * 426.0 with the whole ring first and qwen3.6-27b 143.1 against 142.7, the activations' loads no
 * longer queued behind the SM's 200 KB of copies. Narrower rows ask for the whole ring first: their
 * products are small and stream during the kernel before, and one stage cost qwen3.6-35b-a3b
 * (2,048 columns) 1-2%. */
#define MMVS_PRE_MIN_IN 4096
static inline int mmvs_pre_stages(const cuda_backend *cb, int64_t n_in, int stages) {
    return cb->mmvs_pre > 0 && n_in >= MMVS_PRE_MIN_IN && cb->mmvs_pre < stages ? cb->mmvs_pre : stages;
}

#endif
