/* ops_attn_fused.c — test_cuda_ops's checks of the decode attention's fused forms (the output gate,
 * and QK-norm + rope + the cache write in the attention's launch), each bit for bit against the ops
 * it replaces. Not a translation unit of its own: tests/test_cuda_ops.c includes it before
 * check_attention_ex, which calls these on its inputs (test.h keeps its counters per file). */

/* The output gate in the attention's launch (attention_gated, with the step's K and V rows already in
 * the cache) against the GPU's attention then sigmoid_mul, bit for bit, gate rows 2 * hd apart as
 * qwen35's query|gate rows: it must run for decode-sized batches on the decode kernels (up to 64
 * tokens, head sizes 32-256 in steps of 32 or 64, not on the tile kernel) and decline otherwise. */
static void check_attention_gated(const bk_kv_view *kv, const bk_attn_batch *ab, const float *dq, int n_head,
                                  int n_head_kv, int hd, float scale, size_t nq) {
    CHECK(gpu->ops->attention_gated != NULL);
    if (!gpu->ops->attention_gated) return;
    float *g = malloc(2 * nq * 4), *a = malloc(nq * 4), *b = malloc(nq * 4);
    fill(g, 2 * nq, 4.0f);
    float *dg = dev_copy(g, 2 * nq * 4), *da = dev_copy(NULL, nq * 4), *db = dev_copy(NULL, nq * 4);
    bool did = gpu->ops->attention_gated(gpu, dq, NULL, NULL, kv, ab, n_head, n_head_kv, hd, scale, dg + hd, 2 * hd,
                                         da);
    bool expect = ab->n_tokens <= 64 && (hd == 32 || hd == 64 || hd == 128 || hd == 256);
    CHECK(did == expect);
    if (did) {
        gpu->ops->attention(gpu, dq, NULL, NULL, kv, ab, n_head, n_head_kv, hd, scale, db);
        gpu->ops->sigmoid_mul(gpu, db, dg + hd, ab->n_tokens * n_head, hd, 2 * hd);
        dev_read(da, a, nq * 4);
        dev_read(db, b, nq * 4);
        bool same = !memcmp(a, b, nq * 4);
        if (!same)
            fprintf(stderr, "  attention_gated kv %d heads %d/%d hd %d n %d: differs from attention + sigmoid_mul\n",
                    kv->kv_type, n_head, n_head_kv, hd, ab->n_tokens);
        CHECK(same);
    }
    gpu->ops->release(gpu, dg); gpu->ops->release(gpu, da); gpu->ops->release(gpu, db);
    free(g); free(a); free(b);
}

/* One step's QK-norm, rope, cache write and attention in the attention's launch (attention_rope), on
 * copies of the caches as they were before the step (kc0, vc0), against qk_norm_rope_kv + attention
 * (out, and the caches vw holds after it): the output and both caches bit for bit; then with the
 * output gate (q|gate rows: the gate at dqg + hd) against that output through sigmoid_mul. It must
 * run for decode-sized steps whose tokens are of different sequences, and decline otherwise. */
static void check_attention_rope(const bk_kv_view *vw, const void *kc0, const void *vc0, size_t cache_bytes,
                                 const bk_attn_batch *ab, const float *dqg, float *dk, const float *dv,
                                 const bk_weight *qn, const bk_weight *kn, const bk_rope_params *rp, int n_head,
                                 int n_head_kv, int hd, float scale, const float *dout, int bs) {
    CHECK(gpu->ops->attention_rope != NULL);
    if (!gpu->ops->attention_rope) return;
    const int n = ab->n_tokens;
    size_t nq = (size_t)n * n_head * hd;
    bool distinct = true;
    for (int t = 1; t < n; t++)
        for (int u = 0; u < t; u++) distinct &= ab->block_table[t] != ab->block_table[u];
    for (int gated = 0; gated < 2; gated++) {
        void *kc = dev_copy(NULL, cache_bytes), *vc = dev_copy(NULL, cache_bytes);
        gpu->ops->copy(gpu, kc, kc0, cache_bytes);
        gpu->ops->copy(gpu, vc, vc0, cache_bytes);
        bk_kv_view v2 = *vw;
        v2.k = kc;
        v2.v = vc;
        float *q = dev_copy(NULL, nq * 4), *o = dev_copy(NULL, nq * 4), *ref = dev_copy(NULL, nq * 4);
        gpu->ops->copy(gpu, ref, dout, nq * 4);
        if (gated) gpu->ops->sigmoid_mul(gpu, ref, dqg + hd, n * n_head, hd, 2 * hd);
        bk_attn_rope_in in = {.q_src = dqg, .q_pitch = 2 * hd, .q = q, .k = dk, .v = dv, .q_norm = qn, .k_norm = kn,
                              .eps = 1e-6f, .rope = rp, .gate = gated ? dqg + hd : NULL, .gate_pitch = 2 * hd};
        int32_t *tok = calloc((size_t)n, sizeof *tok);
        static int32_t key_row = 5000; /* a capture of its own (see check_attention_ex) */
        int32_t out_row = key_row++;
        bk_step st = {.n_tokens = n, .tokens = tok, .ab = ab, .kv_block_size = bs, .n_out = 1, .out_idx = &out_row};
        bool replayed = false, rerun = false;
        CHECK_OK(gpu->ops->step_begin(gpu, &st, &replayed));
        bool did = gpu->ops->attention_rope(gpu, &in, &v2, ab, n_head, n_head_kv, hd, scale, o);
        CHECK_OK(gpu->ops->step_end(gpu, &rerun));
        CHECK(did == (distinct && n <= 64));
        if (did) {
            float *a = malloc(nq * 4), *b = malloc(nq * 4);
            uint8_t *ca = malloc(cache_bytes), *cb = malloc(cache_bytes);
            dev_read(o, a, nq * 4);
            dev_read(ref, b, nq * 4);
            bool same_o = !memcmp(a, b, nq * 4);
            dev_read(kc, ca, cache_bytes);
            dev_read(vw->k, cb, cache_bytes);
            bool same_k = !memcmp(ca, cb, cache_bytes);
            dev_read(vc, ca, cache_bytes);
            dev_read(vw->v, cb, cache_bytes);
            bool same_v = !memcmp(ca, cb, cache_bytes);
            if (!same_o || !same_k || !same_v)
                fprintf(stderr, "  attention_rope%s kv %d heads %d/%d hd %d n %d: out %s, k cache %s, v cache %s\n",
                        gated ? " gated" : "", vw->kv_type, n_head, n_head_kv, hd, n, same_o ? "same" : "DIFFERS",
                        same_k ? "same" : "DIFFERS", same_v ? "same" : "DIFFERS");
            CHECK(same_o && same_k && same_v);
            free(a); free(b); free(ca); free(cb);
        }
        free(tok);
        gpu->ops->release(gpu, kc); gpu->ops->release(gpu, vc);
        gpu->ops->release(gpu, q); gpu->ops->release(gpu, o); gpu->ops->release(gpu, ref);
    }
}
