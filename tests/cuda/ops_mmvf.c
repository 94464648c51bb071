/* ops_mmvf.c — test_cuda_ops's checks of one token's products on float weights streamed
 * (cuda_mmvf.cu, on by default; BRISK_CUDA_DISABLE=mmvf: the float GEMV). Not a
 * translation unit of its own: tests/test_cuda_ops.c includes it after its matmul helpers
 * (check_matmul, check_matmul_add, check_matmul_swiglu, check_matmul_multi, on_backend_with). */

/* One token's products on float weights streamed through shared memory (cuda_mmvf.cu) for F16,
 * BF16 and F32: rows enough for every warp's ring to wrap round (20,000), rows cut into several chunks (12,288 and 5,120 columns: 2-8 chunks of unequal last
 * size), rows of one chunk, a bias, y += (matmul_add), the fused gate/up/SwiGLU, three matrices in
 * one launch, and rows the kernel refuses (bytes no multiple of 16, fewer than 1,024 rows: the
 * float GEMV); the kernel's launch counter shows it ran for the others. */
static void float_stream_cases(void) {
    static const uint32_t ty[] = {QT_F16, QT_BF16, QT_F32};
    show_err = true;
    for (size_t ti = 0; ti < sizeof ty / sizeof ty[0]; ti++) {
        const long f0 = bk_cuda_path_launches(gpu, "mmvf"); /* -1: not run on this device (before sm_90) */
        check_matmul(ty[ti], 4096, 20000, 1, true);
        check_matmul(ty[ti], 12288, 1500, 1, false);
        check_matmul(ty[ti], 5120, 2100, 1, true);
        check_matmul(ty[ti], 256, 3000, 1, false);
        check_matmul(ty[ti], 1028, 1100, 1, false); /* F16 / BF16 rows of 2,056 bytes: refused (F32: taken) */
        check_matmul(ty[ti], 2048, 500, 1, false);  /* too few rows: refused */
        check_matmul_add(ty[ti], 4096, 1100, 1);
        check_matmul_add(ty[ti], 12288, 1024, 1);
        check_matmul_swiglu(ty[ti], 4096, 1500, 1, false);
        check_matmul_swiglu(ty[ti], 2048, 3000, 1, true);
        const uint32_t same[3] = {ty[ti], ty[ti], ty[ti]};
        const int64_t no[3] = {2048, 512, 512};
        check_matmul_multi(same, 4096, no, 1);
        /* the streamed kernel ran: for the rows it takes (those it refuses pass either way) */
        if (f0 >= 0) CHECK(bk_cuda_path_launches(gpu, "mmvf") - f0 >= 5);
    }
    show_err = false;
}
static void test_matmul_float_stream(void) { float_stream_cases(); }
