/* ops_iq.c — test_cuda_ops's checks of the codebook, ternary and FP4 weight types (IQ1_S, IQ1_M,
 * IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, TQ1_0, TQ2_0, NVFP4, Q1_0, Q2_0; cuda_iq.cuh). Not a
 * translation unit of its own: tests/test_cuda_ops.c includes it after its helpers (check_matmul
 * and the others, on_backend_with, on_blas_backend, check_moe_ffn). The weights are random bytes
 * with finite scales (make_weight); the products are held to the tolerances of the header
 * (matmul_tol: the float paths 2e-5 vs the double reference, tensor cores 3e-3). */

static const uint32_t iq_types[] = {QT_IQ2_XXS, QT_IQ2_XS, QT_IQ2_S, QT_IQ3_XXS, QT_IQ3_S, QT_IQ1_S,
                                    QT_IQ1_M,   QT_TQ1_0,  QT_TQ2_0, QT_NVFP4,   QT_Q1_0,  QT_Q2_0};
#define N_IQ (int)(sizeof iq_types / sizeof iq_types[0])

/* get_rows_iq: rows decoded on the GPU (deq8 -> iq_deq8) equal the CPU's, bit for bit. */
static void test_get_rows_iq(void) {
    for (int ti = 0; ti < N_IQ; ti++) check_get_rows(iq_types[ti], 1024, true);
}

/* matmul_iq: the products of every type on the default paths: one token and up to 8 on the float
 * GEMV (deq8), 9 to 127 on tensor cores with f16 inputs (cuda_mma.cu), 130 (the cuBLAS minimum
 * is 128) through the f16 dequantization + cuBLAS; a bias, y +=, gate/up + SwiGLU, three matrices
 * in one call. */
static void test_matmul_iq(void) {
    static const struct { int64_t n_in, n_out; int n; } shapes[] = {
        {256, 67, 1}, {512, 129, 3}, {1024, 300, 8}, {512, 70, 16}, {768, 200, 37}, {4096, 33, 1}, {256, 64, 130}};
    show_err = true;
    for (int ti = 0; ti < N_IQ; ti++) {
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            check_matmul(iq_types[ti], shapes[s].n_in, shapes[s].n_out, shapes[s].n, s == 1);
        check_matmul_add(iq_types[ti], 1024, 300, 1);
        check_matmul_swiglu(iq_types[ti], 1024, 500, 1, true);
        check_matmul_swiglu(iq_types[ti], 512, 256, 4, false);
        const uint32_t same[3] = {iq_types[ti], iq_types[ti], iq_types[ti]};
        const int64_t no[3] = {512, 128, 128};
        check_matmul_multi(same, 1024, no, 1);
    }
    show_err = false;
}

/* matmul_iq_cublas: 300 tokens of every type through cuBLAS (the counter says it took each). */
static int iq_cublas_cases(void) {
    for (int ti = 0; ti < N_IQ; ti++) check_matmul(iq_types[ti], 512, 700, 300, ti % 2 == 0);
    return N_IQ;
}
static void test_matmul_iq_cublas(void) { on_blas_backend(iq_cublas_cases); }

/* moe_ffn_iq: the routed experts of every type (the float paths of cuda_moe.cu) at decode and on a
 * small batch, and an IQ2_XXS/IQ3_XXS-like mix with a Q4_K down. */
static void test_moe_ffn_iq(void) {
    for (int ti = 0; ti < N_IQ; ti++) {
        check_moe_ffn(iq_types[ti], iq_types[ti], iq_types[ti], 256, 256, 8, 2, 1, 0);
        check_moe_ffn(iq_types[ti], iq_types[ti], iq_types[ti], 512, 256, 16, 4, 9, 0);
    }
    check_moe_ffn(QT_IQ2_XXS, QT_IQ3_XXS, QT_Q4_K, 256, 256, 8, 2, 5, 0);
}
