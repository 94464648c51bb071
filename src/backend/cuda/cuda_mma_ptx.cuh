/* cuda_mma_ptx.cuh — the PTX wrappers of the tensor-core attention kernels (cuda_attn_prefill.cu,
 * cuda_attn_mma.cu): cp.async copies into shared memory, ldmatrix, mma.sync m16n8k16 with f16
 * inputs and f32 accumulators. */
#ifndef BK_CUDA_MMA_PTX_CUH
#define BK_CUDA_MMA_PTX_CUH
#include <cuda_fp16.h>
#include <stdint.h>

/* cp.async and mma.m16n8k16 need sm_80: an older CUDA_ARCH compiles the kernel empty and
 * cuda_attn_prefill_supported sends such devices to the tile kernel. */
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
#define FA_ARCH_OK 0
#else
#define FA_ARCH_OK 1
#endif

/* ---- PTX wrappers (sm_80+) ---- */
#if FA_ARCH_OK
__device__ __forceinline__ uint32_t fa_smem_addr(const void *p) {
    return (uint32_t)__cvta_generic_to_shared(p);
}
/* 16 bytes global -> shared, asynchronous (L2 only: K/V rows are read once per block) */
__device__ __forceinline__ void fa_cp_async16(void *dst, const void *src) {
    asm volatile("cp.async.cg.shared.global [%0], [%1], 16;\n" ::"r"(fa_smem_addr(dst)), "l"(src));
}
__device__ __forceinline__ void fa_cp_commit() { asm volatile("cp.async.commit_group;\n" ::); }
__device__ __forceinline__ void fa_cp_wait_all() { asm volatile("cp.async.wait_group 0;\n" ::: "memory"); }
/* four 8x8 f16 matrices; lanes 8j .. 8j + 7 give the row addresses of matrix j */
__device__ __forceinline__ void fa_ldsm_x4(uint32_t r[4], const __half *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(fa_smem_addr(p))
                 : "memory");
}
__device__ __forceinline__ void fa_ldsm_x4_t(uint32_t r[4], const __half *p) {
    asm volatile("ldmatrix.sync.aligned.m8n8.x4.trans.shared.b16 {%0, %1, %2, %3}, [%4];\n"
                 : "=r"(r[0]), "=r"(r[1]), "=r"(r[2]), "=r"(r[3])
                 : "r"(fa_smem_addr(p))
                 : "memory");
}
/* c (16x8 f32) += a (16x16 f16, row) b (16x8 f16, col) */
__device__ __forceinline__ void fa_mma(float c[4], const uint32_t a[4], uint32_t b0, uint32_t b1) {
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, "
                 "{%8, %9}, {%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "r"(b0), "r"(b1));
}
/* two floats as f16 (round to nearest even), x in the low half */
__device__ __forceinline__ uint32_t fa_pack(float x, float y) {
    __half2 h = __floats2half2_rn(x, y);
    return *(const uint32_t *)&h;
}
/* 8 bytes global -> shared (q8_0 cache rows: 8-byte aligned at head_dim 128 and 256) */
__device__ __forceinline__ void fa_cp_async8(void *dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 8;\n" ::"r"(fa_smem_addr(dst)), "l"(src));
}
/* 4 bytes global -> shared (q8_0 / q4_0 cache rows at head_dim 64: 68 and 36 bytes) */
__device__ __forceinline__ void fa_cp_async4(void *dst, const void *src) {
    asm volatile("cp.async.ca.shared.global [%0], [%1], 4;\n" ::"r"(fa_smem_addr(dst)), "l"(src));
}
/* waits until at most N of the thread's committed groups are still in flight */
template <int N> __device__ __forceinline__ void fa_cp_wait() {
    asm volatile("cp.async.wait_group %0;\n" ::"n"(N) : "memory");
}
#endif /* FA_ARCH_OK */
#endif
