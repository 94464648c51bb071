/* ops_handover.c — test_cuda_ops's checks of one token's products on float weights streamed
 * (BRISK_CUDA_MMVF=1, cuda_mmvf.cu) and of the one-token hand-over between products
 * (BRISK_CUDA_NQ=3, cuda_gemv.cu), each on a backend of its own with its switch on. Not a
 * translation unit of its own: tests/test_cuda_ops.c includes it after its matmul helpers
 * (check_matmul, check_matmul_add, check_matmul_swiglu, check_matmul_multi, on_backend_with). */

/* One token's products on float weights streamed through shared memory (cuda_mmvf.cu, on with
 * BRISK_CUDA_MMVF=1) for F16, BF16 and F32: rows enough for every warp's ring to wrap round
 * (20,000), rows cut into several chunks (12,288 and 5,120 columns: 2-8 chunks of unequal last
 * size), rows of one chunk, a bias, y += (matmul_add), the fused gate/up/SwiGLU, three matrices in
 * one launch, and rows the kernel refuses (bytes no multiple of 16, fewer than 1,024 rows: the
 * float GEMV; these pass either way, the others only check results, not which kernel ran). */
static void float_stream_cases(void) {
    static const uint32_t ty[] = {QT_F16, QT_BF16, QT_F32};
    show_err = true;
    for (size_t ti = 0; ti < sizeof ty / sizeof ty[0]; ti++) {
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
    }
    show_err = false;
}
static void test_matmul_float_stream(void) { on_backend_with("BRISK_CUDA_MMVF", "1", float_stream_cases); }

/* The one-token hand-over between products (BRISK_CUDA_NQ=3, cuda_gemv.cu): a layer's chain as the
 * decode step runs it, against the CPU's ops one by one:
 *   x += att Wo^T (matmul_add_norm: y times ffn_norm's weight quantized on the way),
 *   h = silu(xn Wg^T) * (xn Wu^T), xn = rms_norm(x) (norm_swiglu on that hand-over; h quantized on the way),
 *   x += h Wd^T (matmul_add_norm for attn_norm), then q, k, v = xn' W^T (norm_matmul on it).
 * t3: the third of q, k, v in another type (F16: the hand-over takes the first two, the norm kernel
 * the rest). ff of 12,288 on Q4_K: the down product's rows are shared by warps (cuda_mmvs.cu's
 * segments). The residual x after each add, h and q, k, v are compared (int8 activations: 3e-2). */
static void check_handover(uint32_t type, uint32_t t3, int64_t d, int64_t ff) {
    const float eps = 1e-6f;
    const int64_t no[3] = {d, d / 4, d / 4};
    size_t rb;
    /* weights: 0 wo, 1 gate, 2 up, 3 down, 4..6 q, k, v */
    const int64_t win[7] = {d, d, d, ff, d, d, d}, wout[7] = {d, ff, ff, d, no[0], no[1], no[2]};
    void *hs[7];
    bk_weight wc[7], wg[7];
    for (int i = 0; i < 7; i++) {
        uint32_t t = i == 6 ? t3 : type;
        hs[i] = make_weight(t, win[i], wout[i], &rb);
        wc[i] = (bk_weight){.name = "w", .type = t, .n_in = win[i], .n_out = wout[i], .row_bytes = rb, .host = hs[i]};
        wg[i] = wc[i];
        CHECK_OK(cpu->ops->bind_weight(cpu, &wc[i]));
        CHECK_OK(gpu->ops->bind_weight(gpu, &wg[i]));
    }
    float *nw[2];
    bk_weight nc[2], ng[2];
    for (int i = 0; i < 2; i++) {
        nw[i] = malloc((size_t)d * 4);
        fill(nw[i], (size_t)d, 1.0f);
        for (int64_t j = 0; j < d; j++) nw[i][j] += 1.5f; /* weights around 1.5, some near 0.5 */
        nc[i] = (bk_weight){.name = "norm", .type = QT_F32, .n_in = d, .n_out = 1, .row_bytes = (size_t)d * 4,
                            .host = nw[i]};
        ng[i] = nc[i];
        CHECK_OK(gpu->ops->bind_weight(gpu, &ng[i]));
    }
    float *x = malloc((size_t)d * 4), *att = malloc((size_t)d * 4), *xn = malloc((size_t)d * 4);
    float *h = malloc((size_t)ff * 4), *tmp = malloc((size_t)ff * 4), *q[3], *got = malloc((size_t)ff * 4);
    fill(x, (size_t)d, 2.0f);
    fill(att, (size_t)d, 1.0f);
    float *dx = dev_copy(x, (size_t)d * 4), *datt = dev_copy(att, (size_t)d * 4), *dxn = dev_copy(NULL, (size_t)d * 4);
    float *dh = dev_copy(NULL, (size_t)ff * 4), *dt = dev_copy(NULL, (size_t)ff * 4), *dq[3];
    for (int i = 0; i < 3; i++) {
        q[i] = malloc((size_t)no[i] * 4);
        dq[i] = dev_copy(NULL, (size_t)no[i] * 4);
    }
    const bk_weight *qc[3] = {&wc[4], &wc[5], &wc[6]}, *qg[3] = {&wg[4], &wg[5], &wg[6]};
    /* the CPU, op by op */
    bk_matmul_add(cpu, &wc[0], att, 1, tmp, x);
    float *x1 = malloc((size_t)d * 4);
    memcpy(x1, x, (size_t)d * 4);
    bk_norm_swiglu(cpu, x, &nc[0], eps, xn, 1, &wc[1], &wc[2], tmp, h);
    bk_matmul_add(cpu, &wc[3], h, 1, tmp, x);
    bk_norm_matmul(cpu, x, &nc[1], eps, xn, 1, 3, qc, NULL, q);
    /* the GPU, handed over; xn poisoned: where the hand-over takes every product (t3 == type) the
     * norm kernel never runs and xn stays as it was (matmul_add_norm's contract), which shows the
     * hand-over's path ran */
    for (int64_t j = 0; j < d; j++) got[j] = NAN;
    CHECK_OK(bk_cuda_write(gpu, dxn, got, (size_t)d * 4));
    gpu->ops->matmul_add_norm(gpu, &wg[0], datt, 1, dx, &ng[0], eps);
    dev_read(dx, got, (size_t)d * 4);
    double e_x1 = rel_err(got, x1, (size_t)d);
    gpu->ops->norm_swiglu(gpu, dx, &ng[0], eps, dxn, 1, &wg[1], &wg[2], dt, dh);
    dev_read(dh, got, (size_t)ff * 4);
    double e_h = rel_err(got, h, (size_t)ff);
    gpu->ops->matmul_add_norm(gpu, &wg[3], dh, 1, dx, &ng[1], eps);
    dev_read(dx, got, (size_t)d * 4);
    double e_x2 = rel_err(got, x, (size_t)d), e_q[3];
    gpu->ops->norm_matmul(gpu, dx, &ng[1], eps, dxn, 1, 3, qg, NULL, dq);
    for (int i = 0; i < 3; i++) {
        dev_read(dq[i], got, (size_t)no[i] * 4);
        e_q[i] = rel_err(got, q[i], (size_t)no[i]);
    }
    dev_read(dxn, got, (size_t)d * 4);
    const bool xn_untouched = isnan(got[0]) && isnan(got[d - 1]);
    if (t3 == type && !xn_untouched) fprintf(stderr, "  handover %s d %lld: the norm kernel ran (xn written)\n",
                                             quant_type_name(type), (long long)d);
    CHECK(t3 != type || xn_untouched);
    bool ok = e_x1 < 3e-2 && e_h < 3e-2 && e_x2 < 3e-2 && e_q[0] < 3e-2 && e_q[1] < 3e-2 && e_q[2] < 3e-2;
    if (show_err || !ok)
        fprintf(stderr, "  handover %s/%s d %lld ff %lld: x %.2e h %.2e x' %.2e q %.2e k %.2e v %.2e\n",
                quant_type_name(type), quant_type_name(t3), (long long)d, (long long)ff, e_x1, e_h, e_x2, e_q[0],
                e_q[1], e_q[2]);
    CHECK(ok);
    for (int i = 0; i < 7; i++) {
        bk_cuda_release_weight(&wg[i]);
        free(hs[i]);
    }
    for (int i = 0; i < 2; i++) {
        bk_cuda_release_weight(&ng[i]);
        free(nw[i]);
    }
    for (int i = 0; i < 3; i++) {
        gpu->ops->release(gpu, dq[i]);
        free(q[i]);
    }
    gpu->ops->release(gpu, dx); gpu->ops->release(gpu, datt); gpu->ops->release(gpu, dxn);
    gpu->ops->release(gpu, dh); gpu->ops->release(gpu, dt);
    free(x); free(att); free(xn); free(h); free(tmp); free(got); free(x1);
}
static void handover_cases(void) {
    static const uint32_t ty[] = {QT_Q4_K, QT_Q6_K, QT_Q8_0, QT_Q4_0, QT_Q5_K};
    for (size_t ti = 0; ti < sizeof ty / sizeof ty[0]; ti++) {
        check_handover(ty[ti], ty[ti], 2048, 6144);
        check_handover(ty[ti], QT_F16, 4096, 12288);
    }
    check_handover(QT_Q4_K, QT_Q6_K, 5120, 17408); /* qwen3.6-27b's widths */
}
static void test_handover(void) { on_backend_with("BRISK_CUDA_NQ", "3", handover_cases); }
