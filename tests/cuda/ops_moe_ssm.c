/* ops_moe_ssm.c — test_cuda_ops's mixture-of-experts and Gated DeltaNet cases (router, grouped
 * expert products, expert tables, conv and delta-rule recurrence, sigmoid gates). Not a
 * translation unit of its own: tests/test_cuda_ops.c includes it, because test.h keeps its
 * pass/fail counters per file and the cases share that file's backends and helpers. */

/* ---- mixture of experts ---- */

/* A row's k router slots on the GPU (ig) against the CPU's (ic), slot by slot: the same expert in
 * the same slot, or, only at a near tie, another whose router logit is within ROUTE_TIE of the
 * row's max |logit| from the CPU's pick (the CPU's polynomial exp and the GPU's expf differ in the
 * last bits and may order two such experts either way); every id in range and none twice. The
 * number of bad slots. */
#define ROUTE_TIE 1e-5
static int route_slots_bad(const float *logits, int n_expert, int k, const int32_t *ic, const int32_t *ig) {
    double mx = 0;
    for (int e = 0; e < n_expert; e++) mx = fmax(mx, fabs((double)logits[e]));
    int bad = 0;
    for (int j = 0; j < k; j++) {
        bool dup = false;
        for (int i = 0; i < j; i++) dup |= ig[i] == ig[j];
        if (ig[j] < 0 || ig[j] >= n_expert || dup) bad++;
        else if (ig[j] != ic[j] && fabs((double)logits[ig[j]] - logits[ic[j]]) > ROUTE_TIE * fmax(mx, 1.0)) bad++;
    }
    return bad;
}

/* Router: the same experts in the same order (route_slots_bad) and weights within 1e-5. */
static void check_moe_route(int n, int n_expert, int k, bool norm, float scale) {
    size_t nl = (size_t)n * n_expert, nk = (size_t)n * k;
    float *lg = malloc(nl * 4), *wc = malloc(nk * 4), *wg = malloc(nk * 4);
    int32_t *ic = malloc(nk * 4), *ig = malloc(nk * 4);
    fill(lg, nl, 4.0f);
    float *dl = dev_copy(lg, nl * 4), *dw = dev_copy(NULL, nk * 4);
    int32_t *di = dev_copy(NULL, nk * 4);
    cpu->ops->moe_route(cpu, lg, n, n_expert, k, norm, scale, ic, wc);
    gpu->ops->moe_route(gpu, dl, n, n_expert, k, norm, scale, di, dw);
    dev_read(di, ig, nk * 4);
    dev_read(dw, wg, nk * 4);
    int bad = 0;
    for (size_t i = 0; i < nk; i++) bad += fabs((double)wg[i] - wc[i]) > 1e-5 * fabs((double)wc[i]) + 1e-7;
    for (int r = 0; r < n; r++)
        bad += route_slots_bad(lg + (size_t)r * n_expert, n_expert, k, ic + (size_t)r * k, ig + (size_t)r * k);
    if (bad)
        fprintf(stderr, "  moe_route n %d experts %d k %d norm %d scale %g: %d entries differ\n", n, n_expert, k, norm,
                scale, bad);
    CHECK(bad == 0);
    gpu->ops->release(gpu, dl); gpu->ops->release(gpu, dw); gpu->ops->release(gpu, di);
    free(lg); free(wc); free(wg); free(ic); free(ig);
}

/* The router op (fused: product and routing in one launch at one token, on float weights) against the
 * GPU's own matmul + moe_route bit for bit (the fused kernel's product is the split-K GEMV's), and on
 * f32 routers against the CPU's: logits within 1e-5, weights within 1e-5 slot by slot, ids and
 * order as route_slots_bad allows (other types quantize x differently on the two sides). Twice in a row:
 * the finished-block counter must be back at zero. Each time also with a second one-row product of
 * the same x (the shared expert's gate, joined to the launch as one more block): the routing
 * unchanged, out2 the GPU's own matmul of that row bit for bit. */
static void check_moe_router(uint32_t type, int64_t n_in, int n_expert, int k) {
    size_t rb;
    void *hw = make_weight(type, n_in, n_expert, &rb), *hw2 = make_weight(type, n_in, 1, &rb);
    bk_weight wc = {.name = "ffn_gate_inp", .type = type, .n_in = n_in, .n_out = n_expert, .row_bytes = rb, .host = hw},
              wg = wc, w2 = {.name = "ffn_gate_inp_shexp", .type = type, .n_in = n_in, .n_out = 1, .row_bytes = rb,
                             .host = hw2};
    CHECK_OK(gpu->ops->bind_weight(gpu, &wg));
    CHECK_OK(gpu->ops->bind_weight(gpu, &w2));
    const bk_weight *wp = &wg, *wp2 = &w2;
    size_t nl = (size_t)n_expert * 4, nk = (size_t)k * 4;
    float *x = malloc((size_t)n_in * 4), *lc = malloc(nl), *lg = malloc(nl), *lu = malloc(nl);
    float *wtc = malloc(nk), *wtg = malloc(nk), *wtu = malloc(nk);
    int32_t *ic = malloc(nk), *ig = malloc(nk), *iu = malloc(nk);
    CHECK(gpu->ops->moe_router != NULL);
    for (int rep = 0; rep < 2 && gpu->ops->moe_router; rep++) {
        fill(x, (size_t)n_in, 1.0f);
        float *dx = dev_copy(x, (size_t)n_in * 4), *dl = dev_copy(NULL, nl), *dw = dev_copy(NULL, nk),
              *ul = dev_copy(NULL, nl), *uw = dev_copy(NULL, nk);
        int32_t *di = dev_copy(NULL, nk), *ui = dev_copy(NULL, nk);
        gpu->ops->moe_router(gpu, &wg, dx, 1, k, true, 0.0f, dl, di, dw, NULL, NULL);
        gpu->ops->matmul(gpu, 1, &wp, NULL, dx, 1, &ul);
        gpu->ops->moe_route(gpu, ul, 1, n_expert, k, true, 0.0f, ui, uw);
        dev_read(dl, lg, nl); dev_read(di, ig, nk); dev_read(dw, wtg, nk);
        dev_read(ul, lu, nl); dev_read(ui, iu, nk); dev_read(uw, wtu, nk);
        CHECK(!memcmp(lg, lu, nl) && !memcmp(ig, iu, nk) && !memcmp(wtg, wtu, nk));
        float *d2 = dev_copy(NULL, 4), *u2 = dev_copy(NULL, 4), o2[2];
        gpu->ops->moe_router(gpu, &wg, dx, 1, k, true, 0.0f, ul, ui, uw, &w2, d2);
        gpu->ops->matmul(gpu, 1, &wp2, NULL, dx, 1, &u2);
        dev_read(ul, lu, nl); dev_read(ui, iu, nk); dev_read(uw, wtu, nk);
        dev_read(d2, o2, 4); dev_read(u2, o2 + 1, 4);
        CHECK(!memcmp(lg, lu, nl) && !memcmp(ig, iu, nk) && !memcmp(wtg, wtu, nk) && !memcmp(o2, o2 + 1, 4));
        gpu->ops->release(gpu, d2); gpu->ops->release(gpu, u2);
        if (type == QT_F32) {
            bk_moe_router(cpu, &wc, x, 1, k, true, 0.0f, lc, ic, wtc, NULL, NULL);
            CHECK(rel_err(lg, lc, (size_t)n_expert) <= 1e-5);
            int bad = 0;
            for (int j = 0; j < k; j++) bad += fabs((double)wtg[j] - wtc[j]) > 1e-5 * fabs((double)wtc[j]) + 1e-7;
            bad += route_slots_bad(lc, n_expert, k, ic, ig); /* as check_moe_route: ids and order */
            if (bad) fprintf(stderr, "  moe_router %lld x %d k %d: %d slots differ from the CPU\n", (long long)n_in,
                             n_expert, k, bad);
            CHECK(bad == 0);
        }
        float *fl[] = {dx, dl, dw, ul, uw};
        for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++) gpu->ops->release(gpu, fl[i]);
        gpu->ops->release(gpu, di); gpu->ops->release(gpu, ui);
    }
    bk_cuda_release_weight(&wg);
    bk_cuda_release_weight(&w2);
    free(hw); free(hw2); free(x); free(lc); free(lg); free(lu); free(wtc); free(wtg); free(wtu); free(ic); free(ig); free(iu);
}

static void test_moe_route(void) {
    check_moe_router(QT_F32, 2048, 128, 8); /* Qwen3-30B-A3B's router */
    check_moe_router(QT_F32, 2048, 256, 8); /* Qwen3.6-35B-A3B's */
    check_moe_router(QT_F16, 1024, 60, 4);
    check_moe_router(QT_F32, 512, 60, 4);  /* not fused (narrow rows): the product and moe_route */
    check_moe_router(QT_Q8_0, 256, 64, 4); /* not fused: the product and moe_route */
    check_moe_route(1, 8, 2, true, 0.0f);
    check_moe_route(37, 128, 8, true, 0.0f);
    check_moe_route(5, 256, 8, true, 2.5f);
    check_moe_route(3, 60, 4, false, 0.0f);
    check_moe_route(2, 1024, 16, true, 0.0f);
    check_moe_route(600, 64, 6, true, 1.0f);
}

/* Expert FFN on random expert tensors and random routes (k distinct experts
 * per token, random weights): against a double-precision reference on the
 * dequantized weights (1e-4: f32 activations and sums on the GPU) and
 * against the CPU (which quantizes activations to the weights' vec_dot type:
 * held to twice the CPU's own distance from the reference, + 1e-4).
 * skip > 0: every skip-th entry gets expert id -1 (computed elsewhere: it adds nothing).
 * ids_in (n, k), when not NULL: the routing to use instead (ids < n_expert, or -1). */
static void check_moe_ffn_ids(uint32_t tg, uint32_t tu, uint32_t td, int64_t n_embd, int64_t n_ff, int n_expert,
                              int k, int n, int skip, const int32_t *ids_in) {
    size_t rg, ru, rd;
    void *hg = make_weight(tg, n_embd, n_expert * n_ff, &rg), *hu = make_weight(tu, n_embd, n_expert * n_ff, &ru),
         *hd = make_weight(td, n_ff, n_expert * n_embd, &rd);
    bk_weight gc = {.name = "gate_exps", .type = tg, .n_in = n_embd, .n_out = n_expert * n_ff, .row_bytes = rg,
                    .host = hg, .n_expert = n_expert},
              uc = {.name = "up_exps", .type = tu, .n_in = n_embd, .n_out = n_expert * n_ff, .row_bytes = ru,
                    .host = hu, .n_expert = n_expert},
              dc = {.name = "down_exps", .type = td, .n_in = n_ff, .n_out = n_expert * n_embd, .row_bytes = rd,
                    .host = hd, .n_expert = n_expert},
              gg = gc, ug = uc, dg = dc;
    CHECK_OK(gpu->ops->bind_weight(gpu, &gg));
    CHECK_OK(gpu->ops->bind_weight(gpu, &ug));
    CHECK_OK(gpu->ops->bind_weight(gpu, &dg));
    size_t nx = (size_t)n * n_embd, nk = (size_t)n * k;
    float *x = malloc(nx * 4), *yc = malloc(nx * 4), *yg = malloc(nx * 4), *ref = malloc(nx * 4), *w = malloc(nk * 4);
    int32_t *ids = malloc(nk * 4);
    fill(x, nx, 1.0f);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < k; j++) {
            int e = ids_in ? ids_in[(size_t)t * k + j] : 0, dup = !ids_in;
            while (dup) { /* distinct experts per token, skewed towards the low ids */
                e = (int)(rnd() % (uint32_t)n_expert);
                if (rnd() % 2) e /= 2;
                dup = 0;
                for (int q = 0; q < j; q++) dup |= ids[(size_t)t * k + q] == e;
            }
            ids[(size_t)t * k + j] = e;
            w[(size_t)t * k + j] = 0.1f + (rnd() % 1000) / 1000.0f;
        }
    for (size_t i = 0; skip > 0 && i < nk; i++)
        if (i % (size_t)skip == (size_t)skip - 1) ids[i] = -1;
    float *dx = dev_copy(x, nx * 4), *dy = dev_copy(NULL, nx * 4), *dw = dev_copy(w, nk * 4);
    int32_t *di = dev_copy(ids, nk * 4);
    cpu->ops->moe_ffn(cpu, &gc, &uc, &dc, x, n, ids, w, k, yc);
    gpu->ops->moe_ffn(gpu, &gg, &ug, &dg, dx, n, di, dw, k, dy);
    dev_read(dy, yg, nx * 4);
    /* reference: each used expert dequantized once */
    float *wgd = malloc((size_t)n_ff * n_embd * 4), *wud = malloc((size_t)n_ff * n_embd * 4),
          *wdd = malloc((size_t)n_embd * n_ff * 4);
    double *acc = calloc(nx, sizeof(double)), *hh = malloc((size_t)n_ff * sizeof(double));
    for (int e = 0; e < n_expert; e++) {
        bool used = false;
        for (size_t i = 0; i < nk && !used; i++) used = ids[i] == e;
        if (!used) continue;
        for (int64_t r = 0; r < n_ff; r++) {
            quant_dequantize(tg, (const uint8_t *)hg + ((size_t)e * n_ff + r) * rg, wgd + r * n_embd, n_embd);
            quant_dequantize(tu, (const uint8_t *)hu + ((size_t)e * n_ff + r) * ru, wud + r * n_embd, n_embd);
        }
        for (int64_t r = 0; r < n_embd; r++)
            quant_dequantize(td, (const uint8_t *)hd + ((size_t)e * n_embd + r) * rd, wdd + r * n_ff, n_ff);
        for (size_t i = 0; i < nk; i++) {
            if (ids[i] != e) continue;
            const float *xt = x + (i / k) * n_embd;
            for (int64_t r = 0; r < n_ff; r++) {
                double g = 0, u = 0;
                for (int64_t c = 0; c < n_embd; c++) {
                    g += (double)wgd[r * n_embd + c] * xt[c];
                    u += (double)wud[r * n_embd + c] * xt[c];
                }
                hh[r] = g / (1.0 + exp(-g)) * u;
            }
            for (int64_t r = 0; r < n_embd; r++) {
                double s = 0;
                for (int64_t c = 0; c < n_ff; c++) s += (double)wdd[r * n_ff + c] * hh[c];
                acc[(i / k) * n_embd + r] += w[i] * s;
            }
        }
    }
    for (size_t i = 0; i < nx; i++) ref[i] = (float)acc[i];
    double e_ref = rel_err(yg, ref, nx), e_cpu = rel_err(yg, yc, nx), c_ref = rel_err(yc, ref, nx);
    /* Q8_0/Q4_0/Q4_K/Q6_K products quantize their activations to int8 blocks of
     * 32 (as cuda_mmvq.cu; the CPU does the same to q8_0/q8_K): then the GPU is
     * held to twice the CPU's own error, and to three times it against the CPU */
#define Q8T(t) ((t) == QT_Q8_0 || (t) == QT_Q4_0 || (t) == QT_Q4_K || (t) == QT_Q6_K)
    bool q8 = Q8T(tg) || Q8T(tu) || Q8T(td);
#undef Q8T
    double tol_ref = q8 ? 2 * c_ref + 1e-4 : 1e-4, tol_cpu = (q8 ? 3 : 2) * c_ref + 1e-4;
    if (show_err || !(e_ref <= tol_ref) || !(e_cpu <= tol_cpu))
        fprintf(stderr, "  moe_ffn %s/%s/%s embd %lld ff %lld experts %d k %d n %d skip %d: vs ref %.2e, vs cpu %.2e "
                "(cpu vs ref %.2e)\n", quant_type_name(tg), quant_type_name(tu), quant_type_name(td), (long long)n_embd,
                (long long)n_ff, n_expert, k, n, skip, e_ref, e_cpu, c_ref);
    CHECK(e_ref <= tol_ref);
    CHECK(e_cpu <= tol_cpu);
    gpu->ops->release(gpu, dx); gpu->ops->release(gpu, dy); gpu->ops->release(gpu, dw); gpu->ops->release(gpu, di);
    bk_cuda_release_weight(&gg); bk_cuda_release_weight(&ug); bk_cuda_release_weight(&dg);
    free(hg); free(hu); free(hd); free(x); free(yc); free(yg); free(ref); free(w); free(ids);
    free(wgd); free(wud); free(wdd); free(acc); free(hh);
}

static void check_moe_ffn(uint32_t tg, uint32_t tu, uint32_t td, int64_t n_embd, int64_t n_ff, int n_expert, int k,
                          int n, int skip) {
    check_moe_ffn_ids(tg, tu, td, n_embd, n_ff, n_expert, k, n, skip, NULL);
}

static void test_moe_ffn(void) {
    /* every type: decode (1 token), a small batch, and two sequences' worth */
    for (int ti = 0; ti < N_TYPES; ti++) {
        check_moe_ffn(types[ti], types[ti], types[ti], 256, 256, 8, 2, 1, 0);
        check_moe_ffn(types[ti], types[ti], types[ti], 512, 256, 16, 4, 9, 0);
    }
    /* a Q4_K_M-like mix: gate and up of different types (two passes), down apart */
    check_moe_ffn(QT_Q4_K, QT_Q5_K, QT_Q6_K, 256, 256, 8, 2, 5, 0);
    check_moe_ffn(QT_Q8_0, QT_Q4_0, QT_F16, 256, 256, 8, 3, 1, 0);
    /* more entries than one chunk (4096 / k tokens per pass), many experts idle or popular */
    check_moe_ffn(QT_F32, QT_F32, QT_F32, 64, 32, 64, 8, 600, 0);
    check_moe_ffn(QT_Q4_K, QT_Q4_K, QT_Q6_K, 256, 256, 32, 8, 520, 0);
    /* float rows that are no multiple of 8 (scalar path) */
    check_moe_ffn(QT_F16, QT_F16, QT_F32, 100, 36, 4, 2, 3, 0);
    /* entries of expert -1 (the hot-expert cache's) on the GEMV-style kernels: decode and a small batch */
    check_moe_ffn(QT_Q4_K, QT_Q4_K, QT_Q6_K, 256, 256, 8, 2, 1, 2);
    check_moe_ffn(QT_Q8_0, QT_F16, QT_Q4_0, 256, 256, 16, 4, 9, 3);
}

/* Grouped tensor-core expert products (cuda_mmq.cuh through cuda_moe.cu: >= 64 entries by
 * default): 64 and 512 tokens, 8 of 32 or 64 experts (token tiles of 16..64 entries, one and
 * several chunks), the fused silu(gate) * up epilogue and the two-stage one (gate and up of
 * different types, one of them on the old kernel), n_ff no multiple of the 32-row tiles, and
 * entries of expert -1. */
/* moe_ffn_shared (one token: the shared expert as slot k of the routed launches, closing the
 * residual) against the GPU's separate ops (moe_ffn, the shared expert's SwiGLU and down,
 * gated_residual): within 1e-6 relative, and within 5e-2 of the CPU's separate ops (int8 activations
 * in blocks of 32 here, q8_K there: ~1.4e-2 seen on the 35B shape). Refused
 * (false, x untouched) at two tokens and when the shared down's type differs from the routed one.
 * Without a shared expert (qwen3moe's layer end): moe_ffn then add, bit for bit. */
static void check_moe_ffn_shared(uint32_t tgu, uint32_t td, int64_t n_embd, int64_t n_ff, int n_expert, int k) {
    size_t rg, rd;
    void *hg = make_weight(tgu, n_embd, n_expert * n_ff, &rg), *hu = make_weight(tgu, n_embd, n_expert * n_ff, &rg),
         *hd = make_weight(td, n_ff, n_expert * n_embd, &rd), *sg = make_weight(tgu, n_embd, n_ff, &rg),
         *su = make_weight(tgu, n_embd, n_ff, &rg), *sd = make_weight(td, n_ff, n_embd, &rd);
    bk_weight wc[6] = {
        {.name = "gate_exps", .type = tgu, .n_in = n_embd, .n_out = n_expert * n_ff, .row_bytes = rg, .host = hg,
         .n_expert = n_expert},
        {.name = "up_exps", .type = tgu, .n_in = n_embd, .n_out = n_expert * n_ff, .row_bytes = rg, .host = hu,
         .n_expert = n_expert},
        {.name = "down_exps", .type = td, .n_in = n_ff, .n_out = n_expert * n_embd, .row_bytes = rd, .host = hd,
         .n_expert = n_expert},
        {.name = "gate_shexp", .type = tgu, .n_in = n_embd, .n_out = n_ff, .row_bytes = rg, .host = sg},
        {.name = "up_shexp", .type = tgu, .n_in = n_embd, .n_out = n_ff, .row_bytes = rg, .host = su},
        {.name = "down_shexp", .type = td, .n_in = n_ff, .n_out = n_embd, .row_bytes = rd, .host = sd}},
              wg[6];
    for (int i = 0; i < 6; i++) {
        wg[i] = wc[i];
        CHECK_OK(gpu->ops->bind_weight(gpu, &wg[i]));
    }
    size_t nx = (size_t)n_embd, nf = (size_t)n_ff, nk = (size_t)k;
    float *h = malloc(nx * 4), *x0 = malloc(nx * 4), *w = malloc(nk * 4), g = 0.7f, *xf = malloc(nx * 4),
          *xu = malloc(nx * 4), *xc = malloc(nx * 4), *m = malloc(nx * 4), *s = malloc(nx * 4), *t1 = malloc(nf * 4),
          *t2 = malloc(nf * 4);
    int32_t *ids = malloc(nk * 4);
    fill(h, nx, 1.0f);
    fill(x0, nx, 1.0f);
    for (int j = 0; j < k; j++) ids[j] = (j * 7 + 3) % n_expert, w[j] = 0.1f + 0.1f * (float)j;
    float *dh = dev_copy(h, nx * 4), *dxf = dev_copy(x0, nx * 4), *dxu = dev_copy(x0, nx * 4),
          *dm = dev_copy(NULL, nx * 4), *ds = dev_copy(NULL, nx * 4), *dt1 = dev_copy(NULL, nf * 4),
          *dt2 = dev_copy(NULL, nf * 4), *dw = dev_copy(w, nk * 4), *dg = dev_copy(&g, 4);
    int32_t *di = dev_copy(ids, nk * 4);
    CHECK(gpu->ops->moe_ffn_shared != NULL);
    bool done = gpu->ops->moe_ffn_shared(gpu, &wg[0], &wg[1], &wg[2], &wg[3], &wg[4], &wg[5], dh, 1, di, dw, k, dg, dxf);
    CHECK(done);
    /* the separate ops, on the GPU and on the CPU */
    bk_backend *be[2] = {gpu, cpu};
    for (int b = 0; b < 2; b++) {
        bk_weight *W = b ? wc : wg;
        const bk_weight *dn = &W[5];
        float *hh = b ? h : dh, *xx = b ? xc : dxu, *mm = b ? m : dm, *ss = b ? s : ds, *a1 = b ? t1 : dt1,
              *a2 = b ? t2 : dt2;
        if (b) memcpy(xc, x0, nx * 4);
        be[b]->ops->moe_ffn(be[b], &W[0], &W[1], &W[2], hh, 1, b ? ids : di, b ? w : dw, k, mm);
        bk_matmul_swiglu(be[b], &W[3], &W[4], hh, 1, a2, a1);
        be[b]->ops->matmul(be[b], 1, &dn, NULL, a1, 1, &ss);
        bk_gated_residual(be[b], xx, mm, ss, b ? &g : dg, 1, (int)n_embd);
    }
    dev_read(dxf, xf, nx * 4);
    dev_read(dxu, xu, nx * 4);
    double e_gpu = rel_err(xf, xu, nx), e_cpu = rel_err(xf, xc, nx);
    if (show_err || !(e_gpu <= 1e-6) || !(e_cpu <= 5e-2))
        fprintf(stderr, "  moe_ffn_shared %s/%s embd %lld ff %lld experts %d k %d: vs separate ops %.2e, vs cpu %.2e\n",
                quant_type_name(tgu), quant_type_name(td), (long long)n_embd, (long long)n_ff, n_expert, k, e_gpu,
                e_cpu);
    CHECK(e_gpu <= 1e-6);
    CHECK(e_cpu <= 5e-2);
    /* not applicable: nothing launched, x as it was */
    bk_weight other = wg[5];
    other.type = td == QT_Q8_0 ? QT_Q4_0 : QT_Q8_0;
    CHECK(!gpu->ops->moe_ffn_shared(gpu, &wg[0], &wg[1], &wg[2], &wg[3], &wg[4], &other, dh, 1, di, dw, k, dg, dxf));
    CHECK(!gpu->ops->moe_ffn_shared(gpu, &wg[0], &wg[1], &wg[2], &wg[3], &wg[4], &wg[5], dh, 2, di, dw, k, dg, dxf));
    dev_read(dxf, xu, nx * 4);
    CHECK(!memcmp(xu, xf, nx * 4));
    /* without a shared expert (qwen3moe): x += moe_ffn(h), bit for bit moe_ffn then add */
    float *dxr = dev_copy(x0, nx * 4), *dxa = dev_copy(x0, nx * 4);
    CHECK(gpu->ops->moe_ffn_shared(gpu, &wg[0], &wg[1], &wg[2], NULL, NULL, NULL, dh, 1, di, dw, k, NULL, dxr));
    gpu->ops->moe_ffn(gpu, &wg[0], &wg[1], &wg[2], dh, 1, di, dw, k, dm);
    gpu->ops->add(gpu, dxa, dm, nx);
    dev_read(dxr, xf, nx * 4);
    dev_read(dxa, xu, nx * 4);
    CHECK(!memcmp(xu, xf, nx * 4));
    gpu->ops->release(gpu, dxr); gpu->ops->release(gpu, dxa);
    float *fl[] = {dh, dxf, dxu, dm, ds, dt1, dt2, dw, dg};
    for (size_t i = 0; i < sizeof fl / sizeof fl[0]; i++) gpu->ops->release(gpu, fl[i]);
    gpu->ops->release(gpu, di);
    for (int i = 0; i < 6; i++) bk_cuda_release_weight(&wg[i]);
    free(hg); free(hu); free(hd); free(sg); free(su); free(sd); free(h); free(x0); free(w); free(xf); free(xu);
    free(xc); free(m); free(s); free(t1); free(t2); free(ids);
}

static void test_moe_ffn_shared(void) {
    check_moe_ffn_shared(QT_Q4_K, QT_Q6_K, 2048, 512, 256, 8); /* Qwen3.6-35B-A3B's layer */
    check_moe_ffn_shared(QT_Q4_K, QT_Q4_K, 2048, 512, 64, 10);
    check_moe_ffn_shared(QT_Q8_0, QT_Q8_0, 256, 256, 8, 2); /* tiny-qwen35moe's */
}

static void test_moe_ffn_mmq(void) {
    show_err = true;
    check_moe_ffn(QT_Q4_K, QT_Q4_K, QT_Q6_K, 256, 256, 32, 8, 64, 0);
    check_moe_ffn(QT_Q8_0, QT_Q8_0, QT_Q8_0, 256, 160, 64, 8, 64, 5);
    check_moe_ffn(QT_Q4_0, QT_Q4_0, QT_Q4_0, 256, 96, 32, 8, 512, 0);
    check_moe_ffn(QT_Q4_K, QT_Q4_K, QT_Q6_K, 512, 256, 64, 8, 512, 7);
    check_moe_ffn(QT_Q6_K, QT_Q6_K, QT_Q4_K, 256, 512, 32, 8, 512, 3);
    check_moe_ffn(QT_Q4_K, QT_Q5_K, QT_Q6_K, 256, 256, 32, 8, 64, 4);  /* up on the old kernel: stage 1 */
    check_moe_ffn(QT_Q8_0, QT_Q4_0, QT_Q8_0, 256, 256, 64, 8, 512, 0); /* both stages on mmq */
    show_err = false;
}

/* Expert parallelism (a tensor-parallel rank of a MoE model: engine/shard.h's SHARD_EXPERTS). Token
 * t's k distinct experts among the whole model's n_ranks * n_expert put (t + in0) % (min(k, n_expert)
 * + 1) of its slots, at random places, on `rank`'s slice [rank * n_expert, (rank + 1) * n_expert) and
 * the rest elsewhere. moe_ids_local makes the ids local to the slice (the GPU's bit for bit the
 * CPU's: id - e0 in range, else -1), then moe_ffn runs on the slice's n_expert experts (k may exceed
 * them) against the CPU and the reference as check_moe_ffn: one token (the vec kernels; with in0 = 0
 * none of its experts is here: a zero row) and batches (grouped, tensor-core mmq, two chunks). */
static void check_moe_ep(uint32_t type, int64_t n_embd, int64_t n_ff, int n_expert, int k, int n, int n_ranks,
                         int rank, int in0) {
    const int e0 = rank * n_expert, e1 = e0 + n_expert, n_other = (n_ranks - 1) * n_expert,
              cmax = k < n_expert ? k : n_expert;
    CHECK(n_ranks >= 2 && k <= n_other); /* else a token's slots cannot all be elsewhere */
    if (n_ranks < 2 || k > n_other) return;
    size_t nk = (size_t)n * k;
    int32_t *ids = malloc(nk * 4), *lc = malloc(nk * 4), *lg = malloc(nk * 4);
    for (int t = 0; t < n; t++) {
        int32_t *id = ids + (size_t)t * k;
        int c = (t + in0) % (cmax + 1);
        for (int j = 0; j < k; j++) {
            int e, dup;
            do { /* the first c slots here, the others on other ranks; distinct */
                e = j < c ? e0 + (int)(rnd() % (uint32_t)n_expert) : (int)(rnd() % (uint32_t)n_other);
                if (j >= c && e >= e0) e += n_expert;
                dup = 0;
                for (int q = 0; q < j; q++) dup |= id[q] == e;
            } while (dup);
            id[j] = e;
        }
        for (int j = k - 1; j > 0; j--) { /* at random slots */
            int q = (int)(rnd() % (uint32_t)(j + 1));
            int32_t v = id[j];
            id[j] = id[q];
            id[q] = v;
        }
    }
    memcpy(lc, ids, nk * 4);
    cpu->ops->moe_ids_local(cpu, lc, (int)nk, e0, e1);
    int32_t *di = dev_copy(ids, nk * 4);
    CHECK(gpu->ops->moe_ids_local != NULL);
    if (gpu->ops->moe_ids_local) gpu->ops->moe_ids_local(gpu, di, (int)nk, e0, e1);
    dev_read(di, lg, nk * 4);
    bool same = !memcmp(lc, lg, nk * 4);
    for (size_t i = 0; i < nk; i++) same &= lc[i] == (ids[i] >= e0 && ids[i] < e1 ? ids[i] - e0 : -1);
    if (!same) fprintf(stderr, "  moe_ids_local %zu ids, experts [%d, %d): differ\n", nk, e0, e1);
    CHECK(same);
    check_moe_ffn_ids(type, type, type, n_embd, n_ff, n_expert, k, n, 0, lc);
    gpu->ops->release(gpu, di);
    free(ids); free(lc); free(lg);
}

static void test_moe_ffn_ep(void) {
    check_moe_ep(QT_Q8_0, 256, 256, 16, 8, 1, 8, 3, 2);  /* Qwen3-30B-A3B's 128 experts on 8 ranks: the vec kernels */
    check_moe_ep(QT_Q4_K, 256, 256, 2, 4, 1, 4, 1, 2);   /* k 4 > the 2 experts here, both chosen */
    check_moe_ep(QT_Q8_0, 256, 256, 2, 4, 1, 4, 0, 0);   /* none of the token's experts here: 0 */
    check_moe_ep(QT_F16, 256, 256, 4, 8, 9, 4, 2, 1);    /* grouped kernels, float activations */
    check_moe_ep(QT_Q8_0, 256, 256, 4, 8, 5, 4, 1, 0);   /* grouped kernels, int8 dots (40 entries: no mmq) */
    check_moe_ep(QT_Q4_K, 256, 256, 16, 8, 64, 8, 5, 1); /* tensor-core mmq */
    check_moe_ep(QT_Q8_0, 256, 256, 4, 8, 600, 4, 3, 2); /* two chunks (512 tokens a pass) */
}

/* Experts placed one by one (bk_weight.expert_ptrs, backend/moe.c's map mode): tables mixing
 * device slots (in another order than the experts') and experts read over PCIe from pinned, mapped
 * host memory give the contiguous tensors' result bit for bit, on the GEMV-style kernels (1 and 9
 * tokens) and the grouped mmq ones (64, 512), fused and two-stage gate/up; and the routing
 * counters (bk_cuda_expert_count) add up to the routing, twice. */
static void check_moe_table(uint32_t tg, uint32_t tu, uint32_t td, int64_t n_embd, int64_t n_ff, int n_expert, int k,
                            int n) {
    const uint32_t ty[3] = {tg, tu, td};
    const int64_t n_in[3] = {n_embd, n_embd, n_ff}, rows[3] = {n_ff, n_ff, n_embd};
    bk_cuda_copier *cp = NULL;
    CHECK_OK(bk_cuda_copier_new(gpu, &cp));
    if (!cp) return;
    bk_weight wc[3], wt[3];
    void *hw[3], *hmap[3], *slots[3], *tabd[3];
    int n_slot = (n_expert + 1) / 2;
    for (int i = 0; i < 3; i++) {
        size_t rb;
        hw[i] = make_weight(ty[i], n_in[i], n_expert * rows[i], &rb);
        size_t eb = rb * (size_t)rows[i], bytes = eb * (size_t)n_expert, al = (bytes + 256 + 4095) & ~(size_t)4095;
        hmap[i] = aligned_alloc(4096, al);
        memset(hmap[i], 0, al);
        memcpy(hmap[i], hw[i], bytes);
        CHECK(bk_cuda_copier_pin(cp, hmap[i], al));
        wc[i] = (bk_weight){.name = "exps", .type = ty[i], .n_in = n_in[i], .n_out = n_expert * rows[i],
                            .row_bytes = rb, .host = hw[i], .n_expert = n_expert};
        CHECK_OK(gpu->ops->bind_weight(gpu, &wc[i]));
        /* even experts in slots n_slot - 1 - e / 2, odd ones read from the mapping */
        slots[i] = dev_copy(NULL, eb * (size_t)n_slot + 256);
        const void **tab = malloc((size_t)n_expert * sizeof *tab);
        for (int e = 0; e < n_expert; e++) {
            const uint8_t *src = (const uint8_t *)hw[i] + (size_t)e * eb;
            if (e % 2 == 0) {
                uint8_t *d = (uint8_t *)slots[i] + (size_t)(n_slot - 1 - e / 2) * eb;
                CHECK_OK(bk_cuda_write(gpu, d, src, eb));
                tab[e] = d;
            } else {
                tab[e] = bk_cuda_copier_device_ptr(cp, (const uint8_t *)hmap[i] + (size_t)e * eb);
                CHECK(tab[e] != NULL);
            }
        }
        tabd[i] = dev_copy(tab, (size_t)n_expert * sizeof *tab);
        free(tab);
        wt[i] = wc[i];
        wt[i].dev = NULL;
        wt[i].host = NULL;
        wt[i].expert_ptrs = (const void *const *)tabd[i];
    }
    size_t nx = (size_t)n * n_embd, nk = (size_t)n * k;
    float *x = malloc(nx * 4), *w = malloc(nk * 4), *y0 = malloc(nx * 4), *y1 = malloc(nx * 4);
    int32_t *ids = malloc(nk * 4), *cached = malloc((size_t)n_expert * 4);
    uint32_t *cnt = calloc((size_t)n_expert + 1, 4), *want = calloc((size_t)n_expert + 1, 4);
    fill(x, nx, 1.0f);
    for (int t = 0; t < n; t++)
        for (int j = 0; j < k; j++) {
            int e, dup;
            do {
                e = (int)(rnd() % (uint32_t)n_expert);
                dup = 0;
                for (int q = 0; q < j; q++) dup |= ids[(size_t)t * k + q] == e;
            } while (dup);
            ids[(size_t)t * k + j] = e;
            w[(size_t)t * k + j] = 0.1f + (rnd() % 1000) / 1000.0f;
        }
    for (int e = 0; e < n_expert; e++) cached[e] = e % 2 == 0;
    for (size_t i = 0; i < nk; i++) {
        want[ids[i]] += 2;
        want[n_expert] += cached[ids[i]] ? 2 : 0;
    }
    float *dx = dev_copy(x, nx * 4), *dy = dev_copy(NULL, nx * 4), *dw = dev_copy(w, nk * 4);
    int32_t *di = dev_copy(ids, nk * 4), *dcached = dev_copy(cached, (size_t)n_expert * 4);
    uint32_t *dcnt = dev_copy(cnt, ((size_t)n_expert + 1) * 4);
    CHECK_OK(gpu->ops->read(gpu, dx, y0, 4)); /* (an error left by the setup) */
    gpu->ops->moe_ffn(gpu, &wc[0], &wc[1], &wc[2], dx, n, di, dw, k, dy);
    CHECK_OK(gpu->ops->read(gpu, dy, y0, nx * 4)); /* contiguous */
    gpu->ops->moe_ffn(gpu, &wt[0], &wt[1], &wt[2], dx, n, di, dw, k, dy);
    CHECK_OK(gpu->ops->read(gpu, dy, y1, nx * 4)); /* through the tables */
    bk_cuda_expert_count(gpu, di, (int)nk, n_expert, dcached, dcnt);
    bk_cuda_expert_count(gpu, di, (int)nk, n_expert, dcached, dcnt);
    CHECK_OK(gpu->ops->read(gpu, dcnt, cnt, ((size_t)n_expert + 1) * 4)); /* counters */
    size_t diff = 0;
    for (size_t i = 0; i < nx; i++) diff += memcmp(&y0[i], &y1[i], 4) != 0;
    if (diff || memcmp(cnt, want, ((size_t)n_expert + 1) * 4))
        fprintf(stderr, "  moe table %s/%s/%s experts %d k %d n %d: %zu of %zu outputs differ; hits counted %u of %u\n",
                quant_type_name(tg), quant_type_name(tu), quant_type_name(td), n_expert, k, n, diff, nx, cnt[n_expert],
                want[n_expert]);
    CHECK(diff == 0);
    CHECK(!memcmp(cnt, want, ((size_t)n_expert + 1) * 4));
    gpu->ops->release(gpu, dx); gpu->ops->release(gpu, dy); gpu->ops->release(gpu, dw); gpu->ops->release(gpu, di);
    gpu->ops->release(gpu, dcached); gpu->ops->release(gpu, dcnt);
    for (int i = 0; i < 3; i++) {
        gpu->ops->release(gpu, slots[i]);
        gpu->ops->release(gpu, tabd[i]);
        bk_cuda_release_weight(&wc[i]);
    }
    bk_cuda_copier_free(cp); /* unpins */
    for (int i = 0; i < 3; i++) {
        free(hw[i]);
        free(hmap[i]);
    }
    free(x); free(w); free(y0); free(y1); free(ids); free(cached); free(cnt); free(want);
}

static void test_moe_ffn_table(void) {
    check_moe_table(QT_Q4_K, QT_Q4_K, QT_Q6_K, 256, 256, 32, 8, 1);   /* decode, GEMV kernels */
    check_moe_table(QT_Q4_K, QT_Q5_K, QT_Q6_K, 256, 256, 32, 8, 9);   /* gate/up apart, float path for up */
    check_moe_table(QT_F16, QT_F16, QT_F32, 256, 128, 16, 4, 3);      /* float kernels */
    check_moe_table(QT_Q4_K, QT_Q4_K, QT_Q6_K, 256, 256, 32, 8, 64);  /* grouped mmq, fused gate/up */
    check_moe_table(QT_Q8_0, QT_Q4_0, QT_Q8_0, 256, 256, 64, 8, 512); /* mmq, two stages */
}

/* ---- Gated DeltaNet ----
 * Every case runs on `gpu` and, when made, on gpu_gd_off (BRISK_CUDA_DISABLE=gd_chunk:
 * the token-by-token kernels), from the same inputs, against the CPU.
 * Batches of >= 17 entries take the parallel conv, and sequences with >= 16
 * entries in the batch (d <= 128) the chunked delta rule (chunks of 64, fp32
 * products; dev/kernels/gated_delta_lab.c measured 3e-7 relative against a
 * double-precision recurrence, the fp32 recurrence 2-6e-7), the batch's other
 * sequences the recurrent kernel in the same call. Tolerances are
 * the same for both forms: conv outputs 1e-6, carried inputs exact; delta
 * rule outputs and states 1e-4. test_ssm prints the largest errors seen. */
static bk_backend *gpu_gd_off;
static double ssm_worst[2][3]; /* [gpu, gpu_gd_off][conv out, delta out, delta state] */

/* Sequence slots: at least three (the last one stays zero in a context), more when seq names more. */
static int ssm_slots(const int32_t *seq, int n) {
    int s = 3;
    for (int t = 0; t < n; t++)
        if (seq[t] + 1 > s) s = seq[t] + 1;
    return s;
}

/* Outputs 1e-6 (only SiLU's exp differs), carried inputs exact. */
static void check_ssm_conv(int channels, int d_conv, int n, const int32_t *seq) {
    const int slots = ssm_slots(seq, n);
    size_t nx = (size_t)n * channels, ns = (size_t)slots * (d_conv - 1) * channels;
    float *x = malloc(nx * 4), *w = malloc((size_t)d_conv * channels * 4), *st = malloc(ns * 4 + 4),
          *stg = malloc(ns * 4 + 4), *oc = malloc(nx * 4), *og = malloc(nx * 4);
    fill(x, nx, 2.0f);
    fill(w, (size_t)d_conv * channels, 1.0f);
    fill(st, ns, 2.0f);
    bk_weight wc = {.name = "conv1d", .type = QT_F32, .n_in = d_conv, .n_out = channels,
                    .row_bytes = (size_t)d_conv * 4, .host = w},
              wg = wc;
    CHECK_OK(gpu->ops->bind_weight(gpu, &wg));
    bk_backend *gs[2] = {gpu, gpu_gd_off};
    float *dx = dev_copy(x, nx * 4), *dout = dev_copy(NULL, nx * 4), *ds[2];
    for (int g = 0; g < 2; g++) ds[g] = gs[g] ? dev_copy(st, ns * 4 + 4) : NULL;
    cpu->ops->ssm_conv(cpu, x, &wc, st, seq, n, channels, d_conv, oc);
    for (int g = 0; g < 2; g++) {
        if (!gs[g]) continue;
        gs[g]->ops->ssm_conv(gs[g], dx, &wg, ds[g], seq, n, channels, d_conv, dout);
        CHECK_OK(gs[g]->ops->read(gs[g], dout, og, nx * 4));
        CHECK_OK(gs[g]->ops->read(gs[g], ds[g], stg, ns * 4));
        double e = rel_err(og, oc, nx);
        bool st_ok = !memcmp(stg, st, ns * 4);
        if (!(e <= 1e-6) || !st_ok)
            fprintf(stderr, "  ssm_conv%s channels %d d_conv %d n %d slots %d: out %.2e, carried inputs %s\n",
                    g ? " (GD_CHUNK=0)" : "", channels, d_conv, n, slots, e, st_ok ? "equal" : "DIFFER");
        CHECK(e <= 1e-6);
        CHECK(st_ok);
        if (!(e <= ssm_worst[g][0])) ssm_worst[g][0] = e;
        gpu->ops->release(gpu, ds[g]);
    }
    gpu->ops->release(gpu, dx); gpu->ops->release(gpu, dout);
    bk_cuda_release_weight(&wg);
    free(x); free(w); free(st); free(stg); free(oc); free(og);
}

/* Whether two device buffers hold the same bytes. */
static bool dev_same(const void *x, const void *y, size_t bytes) {
    void *u = malloc(bytes), *v = malloc(bytes);
    dev_read(x, u, bytes);
    dev_read(y, v, bytes);
    bool same = !memcmp(u, v, bytes);
    free(u);
    free(v);
    return same;
}

/* The rule with the heads' RMS norm and output gate in one launch (gated_delta_gate) against the
 * GPU's gated_delta, rms_norm and swiglu on check_gated_delta's inputs (dq, db, da on the GPU, the
 * state st0 on the host): outputs and state bit for bit (the same arithmetic), fused or not (head
 * sizes other than 32-128 in steps of 32, and batches with a sequence of 16 entries or more, take
 * the three ops inside the op). Then with the short conv first (d_conv 4, dq as its input: the
 * conv in the rule's launch, a cluster of blocks per key head) against ssm_conv and the three ops:
 * the outputs, the state and the conv's carried inputs bit for bit. */
static void check_gated_delta_gate(int nk, int nv, int d, int n, const int32_t *seq, bool grouped, const float *dq,
                                   const float *db, const float *da, const bk_weight *abg, const bk_weight *asg,
                                   const float *st0, size_t ns) {
    const int slots = ssm_slots(seq, n), dc = 4;
    size_t no = (size_t)n * nv * d, nc = (size_t)(2 * nk + nv) * d, ncs = (size_t)slots * (dc - 1) * nc;
    float *z = malloc(no * 4), *nw = malloc((size_t)d * 4), *cw = malloc(nc * dc * 4), *cs = malloc(ncs * 4);
    fill(z, no, 3.0f);
    fill(nw, (size_t)d, 1.0f);
    fill(cw, nc * dc, 1.0f);
    fill(cs, ncs, 2.0f);
    bk_weight nwg = {.name = "ssm_norm", .type = QT_F32, .n_in = d, .n_out = 1, .row_bytes = (size_t)d * 4, .host = nw},
              cwg = {.name = "ssm_conv1d", .type = QT_F32, .n_in = dc, .n_out = (int64_t)nc, .row_bytes = (size_t)dc * 4,
                     .host = cw};
    CHECK_OK(gpu->ops->bind_weight(gpu, &nwg));
    CHECK_OK(gpu->ops->bind_weight(gpu, &cwg));
    CHECK(gpu->ops->gated_delta_gate != NULL);
    for (int conv = 0; conv < 2 && gpu->ops->gated_delta_gate; conv++) {
        float *dz = dev_copy(z, no * 4), *st_a = dev_copy(st0, ns * 4), *st_b = dev_copy(st0, ns * 4),
              *o_a = dev_copy(NULL, no * 4), *o_b = dev_copy(NULL, no * 4), *cs_a = dev_copy(cs, ncs * 4),
              *cs_b = dev_copy(cs, ncs * 4), *co_a = dev_copy(NULL, n * nc * 4), *co_b = dev_copy(NULL, n * nc * 4);
        gpu->ops->gated_delta_gate(gpu, dq, conv ? &cwg : NULL, cs_a, dc, co_a, db, da, abg, asg, st_a, seq, n, nk, nv,
                                   grouped, d, 1e-6f, &nwg, 1e-6f, dz, o_a);
        const float *in = dq;
        if (conv) {
            gpu->ops->ssm_conv(gpu, dq, &cwg, cs_b, seq, n, (int)nc, dc, co_b);
            in = co_b;
        }
        gpu->ops->gated_delta(gpu, in, db, da, abg, asg, st_b, seq, n, nk, nv, grouped, d, 1e-6f, o_b);
        gpu->ops->rms_norm(gpu, o_b, &nwg, o_b, n * nv, d, 1e-6f);
        gpu->ops->swiglu(gpu, dz, o_b, o_b, no);
        size_t bytes[3] = {no * 4, ns * 4, ncs * 4};
        const float *xa[3] = {o_a, st_a, cs_a}, *xb[3] = {o_b, st_b, cs_b};
        static const char *what[3] = {"outputs", "states", "conv carried inputs"};
        for (int i = 0; i < 2 + conv; i++) {
            bool same = dev_same(xa[i], xb[i], bytes[i]);
            if (!same)
                fprintf(stderr, "  gated_delta_gate%s%s heads %d/%d d %d n %d: %s differ from the separate ops\n",
                        conv ? " with conv" : "", grouped ? " grouped" : "", nk, nv, d, n, what[i]);
            CHECK(same);
        }
        float *tmp[] = {dz, st_a, st_b, o_a, o_b, cs_a, cs_b, co_a, co_b};
        for (size_t i = 0; i < sizeof tmp / sizeof tmp[0]; i++) gpu->ops->release(gpu, tmp[i]);
    }
    bk_cuda_release_weight(&nwg);
    bk_cuda_release_weight(&cwg);
    free(z); free(nw); free(cw); free(cs);
}

/* Outputs and the carried states within 1e-4 (fp32 state, sums in another
 * order than the CPU's 16-lane dot products, compounded over the entries). */
/* grouped: qwen3next's value-head order (head h reads key head h / (nv / nk)), else qwen35's tiled one */
static void check_gated_delta(int nk, int nv, int d, int n, const int32_t *seq, bool grouped) {
    const int slots = ssm_slots(seq, n);
    size_t width = (size_t)(2 * nk + nv) * d, nq = (size_t)n * width, nba = (size_t)n * nv,
           ns = (size_t)slots * nv * d * d, no = (size_t)n * nv * d;
    float *qkv = malloc(nq * 4), *b = malloc(nba * 4), *a = malloc(nba * 4), *ab = malloc((size_t)nv * 4),
          *as = malloc((size_t)nv * 4), *st = malloc(ns * 4), *stg = malloc(ns * 4), *oc = malloc(no * 4),
          *og = malloc(no * 4);
    fill(qkv, nq, 1.0f);
    fill(b, nba, 3.0f);
    fill(a, nba, 3.0f);
    fill(ab, (size_t)nv, 1.0f);
    for (int h = 0; h < nv; h++) as[h] = -expf(frand()); /* -exp(A_log) */
    fill(st, ns, 0.05f);
    float *st0 = malloc(ns * 4); /* the state before the checks (the CPU's op updates st) */
    memcpy(st0, st, ns * 4);
    bk_weight abc = {.name = "ssm_dt.bias", .type = QT_F32, .n_in = nv, .n_out = 1, .row_bytes = (size_t)nv * 4,
                     .host = ab},
              asc = {.name = "ssm_a", .type = QT_F32, .n_in = nv, .n_out = 1, .row_bytes = (size_t)nv * 4, .host = as},
              abg = abc, asg = asc;
    CHECK_OK(gpu->ops->bind_weight(gpu, &abg));
    CHECK_OK(gpu->ops->bind_weight(gpu, &asg));
    bk_backend *gs[2] = {gpu, gpu_gd_off};
    float *dq = dev_copy(qkv, nq * 4), *db = dev_copy(b, nba * 4), *da = dev_copy(a, nba * 4),
          *dout = dev_copy(NULL, no * 4), *ds[2];
    for (int g = 0; g < 2; g++) ds[g] = gs[g] ? dev_copy(st, ns * 4) : NULL;
    cpu->ops->gated_delta(cpu, qkv, b, a, &abc, &asc, st, seq, n, nk, nv, grouped, d, 1e-6f, oc);
    for (int g = 0; g < 2; g++) {
        if (!gs[g]) continue;
        gs[g]->ops->gated_delta(gs[g], dq, db, da, &abg, &asg, ds[g], seq, n, nk, nv, grouped, d, 1e-6f, dout);
        CHECK_OK(gs[g]->ops->read(gs[g], dout, og, no * 4));
        CHECK_OK(gs[g]->ops->read(gs[g], ds[g], stg, ns * 4));
        double eo = rel_err(og, oc, no), es = rel_err(stg, st, ns);
        if (!(eo <= 1e-4) || !(es <= 1e-4)) {
            double mo = 0;
            size_t at = 0;
            for (size_t i = 0; i < no; i++)
                if (!(fabs((double)og[i] - oc[i]) <= mo)) mo = fabs((double)og[i] - oc[i]), at = i;
            fprintf(stderr,
                    "  gated_delta%s%s heads %d/%d d %d n %d slots %d: out %.2e, state %.2e; largest |diff| %.2e "
                    "at entry %zu head %zu row %zu (gpu %g, cpu %g)\n",
                    g ? " (GD_CHUNK=0)" : "", grouped ? " grouped" : "", nk, nv, d, n, slots, eo, es, mo, at / ((size_t)nv * d),
                    at / d % nv, at % d, og[at], oc[at]);
        }
        CHECK(eo <= 1e-4);
        CHECK(es <= 1e-4);
        if (!(eo <= ssm_worst[g][1])) ssm_worst[g][1] = eo;
        if (!(es <= ssm_worst[g][2])) ssm_worst[g][2] = es;
        gpu->ops->release(gpu, ds[g]);
    }
    check_gated_delta_gate(nk, nv, d, n, seq, grouped, dq, db, da, &abg, &asg, st0, ns);
    free(st0);
    gpu->ops->release(gpu, dq); gpu->ops->release(gpu, db); gpu->ops->release(gpu, da);
    gpu->ops->release(gpu, dout);
    bk_cuda_release_weight(&abg); bk_cuda_release_weight(&asg);
    free(qkv); free(b); free(a); free(ab); free(as); free(st); free(stg); free(oc); free(og);
}

static void test_ssm(void) {
    /* a second backend with the switch read at creation (the environment is left as it was) */
    char *saved = list_add("BRISK_CUDA_DISABLE", "gd_chunk");
    if (bk_cuda_backend_new(0, &gpu_gd_off) != BRISK_OK) gpu_gd_off = NULL;
    list_restore("BRISK_CUDA_DISABLE", saved);
    static const int32_t one[1] = {1}, mixed[9] = {0, 1, 0, 0, 1, 1, 0, 1, 0}, run[24] = {0};
    /* conv: tiny-qwen35's channels (512) and odd ones; d_conv 4 (Qwen3.5) and 2, 1 */
    check_ssm_conv(512, 4, 1, one);
    check_ssm_conv(512, 4, 9, mixed);
    check_ssm_conv(100, 4, 24, run);
    check_ssm_conv(8192, 4, 1, one);
    check_ssm_conv(37, 2, 9, mixed);
    check_ssm_conv(37, 1, 9, mixed);
    /* delta rule: tiny-qwen35 (2/4 heads of 64), Qwen3.6-35B-A3B (16/32 of 128), odd sizes */
    check_gated_delta(2, 4, 64, 1, one, false);
    check_gated_delta(2, 4, 64, 9, mixed, false);
    check_gated_delta(16, 32, 128, 1, one, false);
    check_gated_delta(16, 32, 128, 9, mixed, false);
    check_gated_delta(1, 2, 128, 24, run, false);
    check_gated_delta(1, 3, 40, 9, mixed, false);
    check_gated_delta(2, 2, 256, 3, mixed, false);
    check_gated_delta(2, 4, 64, 9, mixed, true); /* tiny-qwen3next, qwen3-next-80b's 16/32 of 128 */
    check_gated_delta(16, 32, 128, 1, one, true);
    check_gated_delta(1, 3, 40, 9, mixed, true);
    check_gated_delta(1, 2, 32, 9, mixed, false); /* head sizes 32 and 96: gated_delta_gate's other shapes */
    check_gated_delta(1, 3, 96, 1, one, false);

    /* prefill: one sequence (slot 1), three interleaved entry by entry, three in runs of 7;
     * 63/64/65 entries around one chunk, 200 and 512 several (the last one partial) */
    static int32_t s1[600], s3[600], r3[600], few[200], many[600], dec[300];
    for (int t = 0; t < 600; t++) {
        s1[t] = 1;
        s3[t] = t % 3;
        r3[t] = t / 7 % 3;
        many[t] = t % 36; /* 36 sequences of ~17 entries: two launches of the chunked kernel */
    }
    for (int t = 0; t < 300; t++) dec[t] = t % 3 ? 0 : 1 + t / 3; /* a prefill of 200 among 100 decode entries */
    for (int t = 0; t < 200; t++) few[t] = t % 20 ? 0 : 2; /* slot 2 has 10 entries in a batch of 200 */
    static const int ns[] = {1, 63, 64, 65, 200, 512};
    for (int i = 0; i < 6; i++) {
        int n = ns[i];
        check_ssm_conv(10240, 4, n, s1); /* qwen3.6-27b's conv_dim */
        check_ssm_conv(10240, 4, n, s3);
        check_ssm_conv(512, 4, n, r3);
        check_gated_delta(16, 48, 128, n, s1, false); /* qwen3.6-27b's heads */
        check_gated_delta(16, 48, 128, n, s3, false);
        check_gated_delta(2, 4, 64, n, r3, false);
        check_gated_delta(16, 32, 128, n, s3, true);
    }
    check_ssm_conv(37, 2, 200, r3);
    check_ssm_conv(37, 1, 65, s3);
    check_ssm_conv(512, 4, 200, few);
    check_ssm_conv(100, 4, 600, many);
    check_ssm_conv(100, 4, 300, dec);
    check_gated_delta(16, 32, 128, 200, r3, false);
    check_gated_delta(1, 3, 40, 200, s3, false); /* head size 40: zero-padded 64-key tiles, a partial row tile */
    check_gated_delta(1, 2, 128, 200, few, false); /* slot 0 chunked, slot 2 (10 entries) recurrent */
    check_gated_delta(2, 4, 64, 600, many, false);
    check_gated_delta(2, 4, 64, 300, dec, false);
    check_gated_delta(2, 2, 256, 65, s1, false); /* d > 128: the recurrent kernel */
    printf("  ssm: largest relative errors vs the CPU: conv %.2e, delta rule out %.2e state %.2e", ssm_worst[0][0],
           ssm_worst[0][1], ssm_worst[0][2]);
    if (gpu_gd_off)
        printf("; gd_chunk off: conv %.2e, out %.2e, state %.2e", ssm_worst[1][0], ssm_worst[1][1],
               ssm_worst[1][2]);
    printf("\n");
    if (gpu_gd_off) gpu_gd_off->ops->free(gpu_gd_off);
    gpu_gd_off = NULL;
}

static void check_sigmoid_mul(int n_rows, int width, int gate_width) {
    size_t nx = (size_t)n_rows * width, ng = (size_t)n_rows * gate_width;
    float *x = malloc(nx * 4), *g = malloc(ng * 4), *xg = malloc(nx * 4);
    fill(x, nx, 2.0f);
    fill(g, ng, 8.0f);
    float *dx = dev_copy(x, nx * 4), *dg = dev_copy(g, ng * 4);
    cpu->ops->sigmoid_mul(cpu, x, g, n_rows, width, gate_width);
    gpu->ops->sigmoid_mul(gpu, dx, dg, n_rows, width, gate_width);
    dev_read(dx, xg, nx * 4);
    CHECK(rel_err(xg, x, nx) <= 1e-6);
    gpu->ops->release(gpu, dx); gpu->ops->release(gpu, dg);
    free(x); free(g); free(xg);
}

/* x += m + s * sigmoid(gate[row]) (qwen35moe's layer end): the fused op against the CPU's three ops
 * (1e-6: expf) and bit for bit against the GPU's own sigmoid_mul, add, add. */
static void check_gated_residual(int n_rows, int width) {
    size_t nx = (size_t)n_rows * width;
    float *x = malloc(nx * 4), *m = malloc(nx * 4), *sv = malloc(nx * 4), *g = malloc((size_t)n_rows * 4);
    float *xf = malloc(nx * 4), *xu = malloc(nx * 4);
    fill(x, nx, 2.0f);
    fill(m, nx, 1.0f);
    fill(sv, nx, 1.0f);
    fill(g, (size_t)n_rows, 8.0f);
    float *dx = dev_copy(x, nx * 4), *dm = dev_copy(m, nx * 4), *ds = dev_copy(sv, nx * 4), *dg = dev_copy(g, (size_t)n_rows * 4);
    float *ux = dev_copy(x, nx * 4), *um = dev_copy(m, nx * 4), *us = dev_copy(sv, nx * 4);
    CHECK(gpu->ops->gated_residual != NULL);
    if (gpu->ops->gated_residual) gpu->ops->gated_residual(gpu, dx, dm, ds, dg, n_rows, width);
    gpu->ops->sigmoid_mul(gpu, us, dg, n_rows, width, 1);
    gpu->ops->add(gpu, um, us, nx);
    gpu->ops->add(gpu, ux, um, nx);
    bk_gated_residual(cpu, x, m, sv, g, n_rows, width); /* the CPU has no fused op: its three ops */
    dev_read(dx, xf, nx * 4);
    dev_read(ux, xu, nx * 4);
    CHECK(rel_err(xf, x, nx) <= 1e-6);
    CHECK(memcmp(xf, xu, nx * 4) == 0);
    float *all[] = {dx, dm, ds, dg, ux, um, us};
    for (size_t i = 0; i < sizeof all / sizeof all[0]; i++) gpu->ops->release(gpu, all[i]);
    free(x); free(m); free(sv); free(g); free(xf); free(xu);
}

static void test_sigmoid_mul(void) {
    check_sigmoid_mul(1, 256, 256); /* gated attention's output gate */
    check_sigmoid_mul(7, 1000, 1000);
    check_sigmoid_mul(1, 256, 1);   /* the shared expert's scalar gate */
    check_sigmoid_mul(9, 2048, 1);
    check_gated_residual(1, 2048);
    check_gated_residual(5, 1000);
}

