/* cuda_wgmma_ptx.cuh — Hopper's warpgroup MMA (wgmma.mma_async, sm_90a) for the prefill attention
 * (cuda_attn_prefill.cu's fw kernel): f16 inputs, f32 accumulators, M = 64 rows a warpgroup, K = 16.
 *
 * Accumulators: d[j][e] of an m64nN product is, for the thread of lane l in warp w of the warpgroup,
 * row 16 w + l / 4 + 8 (e / 2), column 8 j + 2 (l % 4) + e % 2: warp w's rows in the layout of
 * mma.sync m16n8's C fragment, repeated over the N / 8 column tiles. The A operand in registers has
 * mma.sync m16n8k16's A layout (rows 16 w ..): so S's accumulators of columns 16 c .. 16 c + 15 are,
 * rounded to f16, the A fragment of key chunk c of P V (as in the mma.sync kernel).
 *
 * Shared memory operands are described by 64-bit descriptors (fw_desc) over 128-byte-swizzled tiles
 * (see fw_swz in cuda_attn_prefill.cu). scale_d = 0 makes the product overwrite d (the first K step).
 * Every wrapper needs sm_90a (FW_ARCH_OK); the kernel that uses them compiles empty elsewhere. */
#ifndef BK_CUDA_WGMMA_PTX_CUH
#define BK_CUDA_WGMMA_PTX_CUH
#include <stdint.h>

#if defined(__CUDA_ARCH__) && defined(__CUDA_ARCH_FEAT_SM90_ALL)
#define FW_ARCH_OK 1
#else
#define FW_ARCH_OK 0
#endif

#if FW_ARCH_OK
/* A shared-memory matrix descriptor: start address, leading and stride byte offsets (16-byte units),
 * 128-byte swizzle (layout type 1, bits 62-63). */
__device__ __forceinline__ uint64_t fw_desc(uint32_t saddr, uint32_t lbo, uint32_t sbo) {
    return (uint64_t)((saddr & 0x3FFFF) >> 4) | (uint64_t)((lbo >> 4) & 0x3FFF) << 16 |
           (uint64_t)((sbo >> 4) & 0x3FFF) << 32 | (uint64_t)1 << 62;
}
/* before the first wgmma that reads registers written since the last (accumulators, A fragments) */
__device__ __forceinline__ void fw_fence() { asm volatile("wgmma.fence.sync.aligned;\n" ::: "memory"); }
__device__ __forceinline__ void fw_commit() { asm volatile("wgmma.commit_group.sync.aligned;\n" ::: "memory"); }
template <int N> __device__ __forceinline__ void fw_wait() {
    asm volatile("wgmma.wait_group.sync.aligned %0;\n" ::"n"(N) : "memory");
}
/* the threads' shared-memory writes (st.shared, cp.async) made visible to the async proxy wgmma reads with;
 * then a barrier */
__device__ __forceinline__ void fw_fence_smem() { asm volatile("fence.proxy.async.shared::cta;\n" ::: "memory"); }

#define FW_F4(d, j) "+f"(d[j][0]), "+f"(d[j][1]), "+f"(d[j][2]), "+f"(d[j][3])
#define FW_F8(d, j) FW_F4(d, j), FW_F4(d, j + 1)
#define FW_F16(d, j) FW_F8(d, j), FW_F8(d, j + 2)
#define FW_F32(d, j) FW_F16(d, j), FW_F16(d, j + 4)
#define FW_F64(d, j) FW_F32(d, j), FW_F32(d, j + 8)
#define FW_F128(d, j) FW_F64(d, j), FW_F64(d, j + 16)

template <int N> struct fw_mma;
template <> struct fw_mma<32> {
    /* d (64 x 32) (+)= A (64 x 16, shared: desc a) B (16 x 32, shared, K-major: desc b) */
    static __device__ __forceinline__ void ss(float (&d)[4][4], uint64_t a, uint64_t b, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %18, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {"
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, %16, %17, p, 1, 1, 0, 0;\n}\n"
                     : FW_F16(d, 0)
                     : "l"(a), "l"(b), "r"(scale_d));
    }
    /* d (64 x 32) (+)= A (64 x 16, registers: a) B (16 x 32, shared, MN-major: desc b) */
    static __device__ __forceinline__ void rs(float (&d)[4][4], const uint32_t (&a)[4], uint64_t b, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %21, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n32k16.f32.f16.f16 {"
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15}, {%16, %17, %18, %19}, %20, p, 1, 1, 1;\n}\n"
                     : FW_F16(d, 0)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d));
    }
};
template <> struct fw_mma<64> {
    /* d (64 x 64) (+)= A (64 x 16, shared: desc a) B (16 x 64, shared, K-major: desc b) */
    static __device__ __forceinline__ void ss(float (&d)[8][4], uint64_t a, uint64_t b, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %34, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, %32, %33, p, 1, 1, 0, 0;\n}\n"
                     : FW_F32(d, 0)
                     : "l"(a), "l"(b), "r"(scale_d));
    }
    /* d (64 x 64) (+)= A (64 x 16, registers: a) B (16 x 64, shared, MN-major: desc b) */
    static __device__ __forceinline__ void rs(float (&d)[8][4], const uint32_t (&a)[4], uint64_t b, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %37, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n64k16.f32.f16.f16 {"
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31}, {%32, %33, %34, %35}, %36, p, 1, 1, 1;\n}\n"
                     : FW_F32(d, 0)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d));
    }
};
template <> struct fw_mma<128> {
    /* d (64 x 128) (+)= A (64 x 16, shared: desc a) B (16 x 128, shared, K-major: desc b) */
    static __device__ __forceinline__ void ss(float (&d)[16][4], uint64_t a, uint64_t b, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %66, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, %64, %65, p, 1, 1, 0, 0;\n}\n"
                     : FW_F64(d, 0)
                     : "l"(a), "l"(b), "r"(scale_d));
    }
    /* d (64 x 128) (+)= A (64 x 16, registers: a) B (16 x 128, shared, MN-major: desc b) */
    static __device__ __forceinline__ void rs(float (&d)[16][4], const uint32_t (&a)[4], uint64_t b, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %69, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n128k16.f32.f16.f16 {"
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63}, {%64, %65, %66, %67}, %68, p, 1, 1, 1;\n}\n"
                     : FW_F64(d, 0)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d));
    }
};
template <> struct fw_mma<256> {
    /* d (64 x 256) (+)= A (64 x 16, shared: desc a) B (16 x 256, shared, K-major: desc b) */
    static __device__ __forceinline__ void ss(float (&d)[32][4], uint64_t a, uint64_t b, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %130, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {"
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, %128, %129, p, 1, 1, 0, 0;\n}\n"
                     : FW_F128(d, 0)
                     : "l"(a), "l"(b), "r"(scale_d));
    }
    /* d (64 x 256) (+)= A (64 x 16, registers: a) B (16 x 256, shared, MN-major: desc b) */
    static __device__ __forceinline__ void rs(float (&d)[32][4], const uint32_t (&a)[4], uint64_t b, int scale_d) {
        asm volatile("{\n.reg .pred p;\nsetp.ne.b32 p, %133, 0;\n"
                     "wgmma.mma_async.sync.aligned.m64n256k16.f32.f16.f16 {"
                     "%0, %1, %2, %3, %4, %5, %6, %7, %8, %9, %10, %11, %12, %13, %14, %15, %16, %17, %18, %19, %20, %21, %22, %23, %24, %25, %26, %27, %28, %29, %30, %31, %32, %33, %34, %35, %36, %37, %38, %39, %40, %41, %42, %43, %44, %45, %46, %47, %48, %49, %50, %51, %52, %53, %54, %55, %56, %57, %58, %59, %60, %61, %62, %63, %64, %65, %66, %67, %68, %69, %70, %71, %72, %73, %74, %75, %76, %77, %78, %79, %80, %81, %82, %83, %84, %85, %86, %87, %88, %89, %90, %91, %92, %93, %94, %95, %96, %97, %98, %99, %100, %101, %102, %103, %104, %105, %106, %107, %108, %109, %110, %111, %112, %113, %114, %115, %116, %117, %118, %119, %120, %121, %122, %123, %124, %125, %126, %127}, {%128, %129, %130, %131}, %132, p, 1, 1, 1;\n}\n"
                     : FW_F128(d, 0)
                     : "r"(a[0]), "r"(a[1]), "r"(a[2]), "r"(a[3]), "l"(b), "r"(scale_d));
    }
};
#undef FW_F4
#undef FW_F8
#undef FW_F16
#undef FW_F32
#undef FW_F64
#undef FW_F128
#endif /* FW_ARCH_OK */
#endif
