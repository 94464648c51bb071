/* attn_lab.cu — one decode token's attention over a deep paged cache, alone: the tensor-core kernel
 * (cuda_attn_mma.cu) beside the warp-per-row kernel (cuda_attn_decode.cu, BRISK_CUDA_DISABLE=attn_mma),
 * on the attention shapes of the supported models, at depths 4K-1M, f16, q8_0 and q4_0 caches, as the KV
 * bytes read over the time and their share of the copy bandwidth (issue 28 asks 80%), with the
 * largest relative difference between the two kernels' outputs; then the prefill kernel's rate for a
 * chunk of 2,048 tokens after a prefix of 0-256K (prefill_rows), with one and (head dims 64 and
 * 128) two m-tiles a warp (cuda_attn_prefill.cu, included here for fa_launch). No model prefill: the cache is
 * filled with random values on the device, so a lease measures every shape in seconds.
 *
 *   nvcc -std=c++17 -O3 -arch=sm_90a -Iinclude -Isrc dev/kernels/attn_lab.cu build/libbrisk.a -o build/attn_lab \
 *        -lpcre2-8 -lcjson -lmicrohttpd -ldl
 *   build/attn_lab [MAX_DEPTH [KV [MIN_DEPTH]]]  (default 1048576; rows past the GPU's memory are skipped;
 *                                        KV: f16, q8_0 or q4_0 alone, and then no prefill rows;
 *                                        KV = prefill: the prefill rows alone, prefixes up to MAX_DEPTH;
 *                                        KV = splits: the key-range split swept at brisk's ubatch alone;
 *                                        KV = fw: the warpgroup-MMA prefill kernel beside the mma.sync one)
 *   LAB_SHAPE=i: the decode rows of shape i alone (0: 16/2 x 256 ... 3: 32/4 x 128), e.g. under
 *   `ncu -k regex:attn_dec_mma --launch-count 1`
 *
 * Each time is a replayed CUDA graph of 16 launches back to back (programmatic launches, as in a
 * decode step), over a cache several times the 50 MB L2 from 4K positions up (the smallest rows
 * partly hit it: read their GB/s as an upper bound). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/backend/cuda/cuda_attn_prefill.cu" /* fa_launch<KT, D, MT>, fa_plan */
#include "backend/cuda/cuda_internal.cuh"
#include "lab.cuh"

/* random cache contents: f16 values in [-1, 1], or q8_0 / q4_0 blocks (scale 1/64, random quants) */
__global__ void fill_kernel(uint8_t *p, size_t bytes, int kt, uint32_t seed) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < bytes / 2; i += (size_t)gridDim.x * blockDim.x) {
        uint32_t h = (uint32_t)i * 2654435761u ^ seed;
        h ^= h >> 15;
        h *= 2246822519u;
        h ^= h >> 13;
        uint16_t v;
        if (kt == KT_F16) v = __half_as_ushort(__float2half((float)(h % 2001) / 1000.0f - 1.0f));
        else if ((2 * i) % (kt == KT_Q8_0 ? 34 : 18) == 0) v = __half_as_ushort(__float2half(1.0f / 64)); /* a block's scale */
        else v = (uint16_t)h;
        ((uint16_t *)p)[i] = v;
    }
}

template <typename F> static float time_graph(cudaStream_t st, int reps, const F &call) {
    for (int i = 0; i < 2; i++) call(); /* warm-up, and the kernels' one-time attributes outside the capture */
    CK(cudaStreamSynchronize(st));
    cudaGraph_t g;
    cudaGraphExec_t ge;
    CK(cudaStreamBeginCapture(st, cudaStreamCaptureModeGlobal));
    for (int i = 0; i < 16; i++) call();
    CK(cudaStreamEndCapture(st, &g));
    CK(cudaGraphInstantiate(&ge, g, 0));
    CK(cudaGraphLaunch(ge, st));
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaEventRecord(a, st);
    for (int r = 0; r < reps; r++) CK(cudaGraphLaunch(ge, st));
    cudaEventRecord(b, st);
    CK(cudaEventSynchronize(b));
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    cudaGraphExecDestroy(ge);
    cudaGraphDestroy(g);
    return ms / (reps * 16);
}

/* fa_launch<KT, hd, MT> by value (MT = 2: head dims 64 and 128 only) */
template <int MT>
static void fa_mt(cuda_backend *cb, int kt, int hd, const float *q, const bk_kv_view *kv, int n, const int32_t *pos,
                  const int32_t *off, const int32_t *tabs, int nh, int nkv, float scale, float *out, int n_split = 1,
                  float *part = NULL) {
#define FA_LAB_ARGS cb, q, kv, n, pos, off, tabs, nh, nkv, scale, out, n_split, part
#define FA_LAB_D(KK)                                                                                             \
    {                                                                                                            \
        if (hd == 64) fa_launch<KK, 64, MT>(FA_LAB_ARGS);                                                        \
        else if (hd == 128) fa_launch<KK, 128, MT>(FA_LAB_ARGS);                                                 \
        else if constexpr (MT == 1) fa_launch<KK, 256, 1>(FA_LAB_ARGS);                                          \
    }
    if (kt == KT_F16) FA_LAB_D(KT_F16)
    else if (kt == KT_Q8_0) FA_LAB_D(KT_Q8_0)
    else FA_LAB_D(KT_Q4_0)
#undef FA_LAB_D
#undef FA_LAB_ARGS
}

/* One prefill case on the device: a paged cache of D + C positions (pages shuffled), a chunk of C
 * query rows at positions D.., one sequence. */
struct fa_case {
    uint8_t *kc, *vc;
    int32_t *d_meta; /* pos (C), table offsets (C), the table */
    float *q, *out;
    size_t nq;
    bk_kv_view kv;
};
static fa_case fa_case_new(int kt, int nh, int nkv, int hd, long D, int C, int bs) {
    fa_case c;
    const size_t row = kt == KT_F16 ? (size_t)nkv * hd * 2 : (size_t)nkv * hd / 32 * kt_block_bytes(kt);
    const long n_pages = (D + C) / bs + 1;
    const size_t bytes = (size_t)n_pages * bs * row;
    CK(cudaMalloc(&c.kc, bytes));
    CK(cudaMalloc(&c.vc, bytes));
    fill_kernel<<<1024, 256>>>(c.kc, bytes, kt, 3u);
    fill_kernel<<<1024, 256>>>(c.vc, bytes, kt, 4u);
    int32_t *meta = (int32_t *)malloc((2 * C + n_pages) * 4);
    for (int i = 0; i < C; i++) meta[i] = (int32_t)(D + i), meta[C + i] = 0;
    for (long i = 0; i < n_pages; i++) meta[2 * C + i] = (int32_t)i;
    for (long i = n_pages - 1; i > 0; i--) { /* shuffled pages */
        long j = rnd() % (i + 1);
        int32_t x = meta[2 * C + i];
        meta[2 * C + i] = meta[2 * C + j];
        meta[2 * C + j] = x;
    }
    CK(cudaMalloc(&c.d_meta, (2 * C + n_pages) * 4));
    CK(cudaMemcpy(c.d_meta, meta, (2 * C + n_pages) * 4, cudaMemcpyHostToDevice));
    free(meta);
    c.nq = (size_t)C * nh * hd;
    CK(cudaMalloc(&c.q, c.nq * 4));
    CK(cudaMalloc(&c.out, c.nq * 4));
    fill_kernel<<<1024, 256>>>((uint8_t *)c.q, c.nq * 4, KT_F16, 5u); /* (f16 pairs read as floats: small values) */
    c.kv = (bk_kv_view){.k = c.kc, .v = c.vc, .kv_type = kt, .block_size = bs};
    return c;
}
static void fa_case_free(fa_case &c) {
    cudaFree(c.kc);
    cudaFree(c.vc);
    cudaFree(c.d_meta);
    cudaFree(c.q);
    cudaFree(c.out);
}

/* The prefill kernel (cuda_attn_prefill.cu) for one chunk of C query tokens of one sequence after a
 * prefix of D cached positions (a long prompt's later chunks, or a new turn after a long
 * conversation): its time a token and the tensor-core rate (4 flops a query row, key and
 * dimension, Q K^T and P V, over the keys the causal mask keeps) with one m-tile a warp (MT = 1) and,
 * at head dims 64 and 128, two (MT = 2), the speed-up, the largest relative difference of MT = 2's
 * output from MT = 1's (each row sees the same key tiles in the same order: 0 expected; NaN flagged),
 * and what cuda_attn_prefill's dispatch picks (fa_plan: MT and the key-range split) and its rate. Issue 28 asks that pp at
 * 32K-262K stay within 1.5x of pp512's time a token; this is the attention's part of it. */
static void prefill_rows(cuda_backend *cb, long max_depth) {
    printf("\n| prefill shape (q/kv heads x dim) | KV | chunk | prefix | MT=1 ms | us a token | MT=1 TFLOP/s | "
           "MT=2 TFLOP/s | MT=2 speed-up | MT=2 rel | dispatch (MT, splits) | its TFLOP/s | its rel |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    /* qwen3-8b, qwen3.6-27b, qwen3.6-35b-a3b; 32/8 x 64: head dim 64 on the 8b's heads (no model of ours) */
    static const int shapes[][3] = {{32, 8, 128}, {24, 4, 256}, {16, 2, 256}, {32, 8, 64}};
    static const long prefixes[] = {0, 4096, 32768, 131072, 262144};
    const int bs = 16;
    for (int C : {2048, 512}) /* the lab's chunk; brisk's ubatch */
    for (int kt : {KT_F16, KT_Q8_0, KT_Q4_0})
        for (auto &sh : shapes)
            for (long D : prefixes) {
                if (D > max_depth) continue;
                const int nh = sh[0], nkv = sh[1], hd = sh[2];
                const long n_keys = D + C;
                fa_case fc = fa_case_new(kt, nh, nkv, hd, D, C, bs);
                const size_t nq = fc.nq;
                float *q = fc.q, *out = fc.out;
                const bk_kv_view kv = fc.kv;
                int32_t *d_meta = fc.d_meta;
                const float scale = 1.0f / sqrtf((float)hd);
                const double flops = 4.0 * nh * hd * ((double)C * D + (double)C * (C + 1) / 2);
                const int32_t *d_pos = d_meta, *d_off = d_meta + C, *d_tabs = d_meta + 2 * C;
                auto call1 = [&]() { fa_mt<1>(cb, kt, hd, q, &kv, C, d_pos, d_off, d_tabs, nh, nkv, scale, out); };
                const float ms = time_ms(cb->stream, [&](int) { call1(); });
                check_backend(cb);
                printf("| %d/%d x %d | %s | %d | %ld | %.2f | %.1f | %.0f |", nh, nkv, hd,
                       kt == KT_F16 ? "f16" : kt == KT_Q8_0 ? "q8_0" : "q4_0", C, D, ms, ms * 1e3 / C,
                       flops / (ms * 1e9));
                float *h1 = (float *)malloc(nq * 4), *h2 = (float *)malloc(nq * 4);
                CK(cudaMemcpy(h1, out, nq * 4, cudaMemcpyDeviceToHost));
                if (hd <= 128) {
                    CK(cudaMemset(out, 0xff, nq * 4)); /* NaN: a row MT = 2 leaves unwritten shows */
                    auto call2 = [&]() { fa_mt<2>(cb, kt, hd, q, &kv, C, d_pos, d_off, d_tabs, nh, nkv, scale, out); };
                    const float ms2 = time_ms(cb->stream, [&](int) { call2(); });
                    check_backend(cb);
                    CK(cudaMemcpy(h2, out, nq * 4, cudaMemcpyDeviceToHost));
                    bool nan = false;
                    for (size_t i = 0; i < nq && !nan; i++) nan = h2[i] != h2[i];
                    printf(" %.0f | %.2fx | %s%.1e |", flops / (ms2 * 1e9), ms / ms2, nan ? "NaN! " : "",
                           max_rel(h2, h1, (int64_t)nq));
                } else {
                    printf(" | | |");
                }
                /* what cuda_attn_prefill picks (MT and the key-range split) and its rate */
                const fa_shape shp = fa_plan(cb, kt, C, nh, nkv, hd, (int)n_keys);
                const int mt = shp.mt, nsp = shp.n_split;
                CK(cudaMemset(out, 0xff, nq * 4));
                auto calld = [&]() {
                    cuda_attn_prefill(cb, q, &kv, C, (int)n_keys, d_pos, d_off, d_tabs, nh, nkv, hd, scale, out);
                };
                const float msd = time_ms(cb->stream, [&](int) { calld(); });
                check_backend(cb);
                CK(cudaMemcpy(h2, out, nq * 4, cudaMemcpyDeviceToHost));
                bool nan = false;
                for (size_t i = 0; i < nq && !nan; i++) nan = h2[i] != h2[i];
                printf(" MT=%d, %d | %.0f | %s%.1e |\n", mt, nsp, flops / (msd * 1e9), nan ? "NaN! " : "",
                       max_rel(h2, h1, (int64_t)nq));
                free(h1);
                free(h2);
                fflush(stdout);
                fa_case_free(fc);
            }
}

/* Resident blocks a multiprocessor of the split instance fa_launch<KT, hd, MT> runs (its registers and
 * shared memory), for the wave count of a grid. */
template <int MT> static int fa_resident(int kt, int hd) {
    int nb = 0;
#define FA_RES(KK, DD)                                                                                           \
    do {                                                                                                         \
        auto k_ = fa_prefill_kernel<KK, DD, fa_tile<KK, DD, MT>::BN, MT, true>;                                  \
        /* above 48 KB the occupancy counts only what the kernel is allowed (fa_launch's attribute) */           \
        CK(cudaFuncSetAttribute(k_, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)fa_tile<KK, DD, MT>::smem)); \
        CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&nb, k_, FA_THREADS, fa_tile<KK, DD, MT>::smem));      \
    } while (0)
#define FA_RES_D(KK)                                                                                             \
    {                                                                                                            \
        if (hd == 64) FA_RES(KK, 64);                                                                            \
        else if (hd == 128) FA_RES(KK, 128);                                                                     \
        else if constexpr (MT == 1) FA_RES(KK, 256);                                                            \
    }
    if (kt == KT_F16) FA_RES_D(KT_F16)
    else if (kt == KT_Q8_0) FA_RES_D(KT_Q8_0)
    else FA_RES_D(KT_Q4_0)
#undef FA_RES_D
#undef FA_RES
    return nb;
}

/* The key-range split swept (prefill_splits): brisk's ubatch of 512 entries after 32K-256K prefixes, each
 * shape with the MT fa_plan picks there, TFLOP/s at 1-8 splits beside the share of the last wave's
 * resident slots the grid fills (blocks / (waves x slots); fa_plan's rule does not look at it yet: a grid
 * of 1.45 or 2.2 waves leaves a quarter of the SMs idle in its last wave, so 4 splits may beat 5, and the
 * 27b's 192 blocks may gain from a split fa_plan does not make). rel: the split against one split's output. */
static void prefill_splits(cuda_backend *cb, long max_depth) {
    printf("\n| ubatch 512: shape | KV | prefix | MT | resident a SM | TFLOP/s (fill of the last wave) at 1, 2, 3, 4, 5, "
           "6, 8 splits | fa_plan's | largest rel |\n|---|---|---|---|---|---|---|---|\n");
    static const int shapes[][3] = {{32, 8, 128}, {24, 4, 256}, {16, 2, 256}};
    static const int splits[] = {1, 2, 3, 4, 5, 6, 8};
    const int bs = 16, C = 512;
    for (int kt : {KT_F16, KT_Q8_0})
        for (auto &sh : shapes)
            for (long D : {32768L, 131072L, 262144L}) {
                if (D > max_depth) continue;
                const int nh = sh[0], nkv = sh[1], hd = sh[2];
                const long n_keys = D + C;
                fa_case fc = fa_case_new(kt, nh, nkv, hd, D, C, bs);
                const size_t nq = fc.nq;
                float *q = fc.q, *out = fc.out, *part;
                CK(cudaMalloc(&part, (size_t)C * nh * 8 * (hd + 2) * 4));
                const bk_kv_view kv = fc.kv;
                int32_t *d_meta = fc.d_meta;
                const float scale = 1.0f / sqrtf((float)hd);
                const double flops = 4.0 * nh * hd * ((double)C * D + (double)C * (C + 1) / 2);
                const int32_t *d_pos = d_meta, *d_off = d_meta + C, *d_tabs = d_meta + 2 * C;
                const fa_shape plan = fa_plan(cb, kt, C, nh, nkv, hd, (int)n_keys);
                const int mt = plan.mt, gs = fa_gq_shift(nh / nkv);
                const int res = mt == 2 ? fa_resident<2>(kt, hd) : fa_resident<1>(kt, hd);
                const long blocks = (long)((C + (FA_BM * mt >> gs) - 1) / (FA_BM * mt >> gs)) * (nh >> gs);
                const long slots = (long)(res > 0 ? res : 1) * cb->n_sm;
                float *h1 = (float *)malloc(nq * 4), *h2 = (float *)malloc(nq * 4);
                double worst = 0;
                printf("| %d/%d x %d | %s | %ld | %d | %d |", nh, nkv, hd, kt == KT_F16 ? "f16" : "q8_0", D, mt, res);
                for (int sp : splits) {
                    auto call = [&]() {
                        if (mt == 2) fa_mt<2>(cb, kt, hd, q, &kv, C, d_pos, d_off, d_tabs, nh, nkv, scale, out, sp, part);
                        else fa_mt<1>(cb, kt, hd, q, &kv, C, d_pos, d_off, d_tabs, nh, nkv, scale, out, sp, part);
                    };
                    const float ms = time_ms(cb->stream, [&](int) { call(); });
                    check_backend(cb);
                    CK(cudaMemcpy(sp == 1 ? h1 : h2, out, nq * 4, cudaMemcpyDeviceToHost));
                    if (sp > 1) worst = fmax(worst, max_rel(h2, h1, (int64_t)nq));
                    const long g = blocks * sp, waves = (g + slots - 1) / slots;
                    printf(" %.0f (%.0f%%)", flops / (ms * 1e9), 100.0 * g / (waves * slots));
                }
                printf(" | MT=%d, %d | %.1e |\n", plan.mt, plan.n_split, worst);
                fflush(stdout);
                free(h1);
                free(h2);
                cudaFree(part);
                fa_case_free(fc);
            }
}

/* fw_launch<KT, hd, PIPE> by value (head dims 128 and 256; PIPE: the pipelined fw2 kernel) */
template <bool PIPE = true>
static void fw_any(cuda_backend *cb, int kt, int hd, const float *q, const bk_kv_view *kv, int n, const int32_t *pos,
                   const int32_t *off, const int32_t *tabs, int nh, int nkv, float scale, float *out, int n_split,
                   float *part) {
#define FW_LAB_ARGS cb, q, kv, n, pos, off, tabs, nh, nkv, scale, out, n_split, part
    if (kt == KT_F16)
        hd == 128 ? fw_launch<KT_F16, 128, PIPE>(FW_LAB_ARGS) : fw_launch<KT_F16, 256, PIPE>(FW_LAB_ARGS);
    else if (kt == KT_Q8_0)
        hd == 128 ? fw_launch<KT_Q8_0, 128, PIPE>(FW_LAB_ARGS) : fw_launch<KT_Q8_0, 256, PIPE>(FW_LAB_ARGS);
    else hd == 128 ? fw_launch<KT_Q4_0, 128, PIPE>(FW_LAB_ARGS) : fw_launch<KT_Q4_0, 256, PIPE>(FW_LAB_ARGS);
#undef FW_LAB_ARGS
}

/* The warpgroup-MMA prefill kernel (fw_*, cuda_attn_prefill.cu) beside the mma.sync kernel's dispatch
 * (fa_plan: MT and splits), a chunk of 2,048 or 512 entries after a prefix of 0-256K: TFLOP/s of each,
 * the speed-up, and the largest relative difference of fw's output (unsplit, and with 1-8 splits at the
 * 512-entry ubatch) from the mma.sync kernel's MT = 1 output (same roundings, other summation order);
 * NaN flagged (the outputs start as NaN). fw_plan_splits' pick and its rate last. */
static void prefill_fw(cuda_backend *cb, long max_depth) {
    printf("\n| fw: shape | KV | chunk | prefix | mma.sync dispatch TFLOP/s | fw (one stage) TFLOP/s | rel | fw2 unsplit TFLOP/s | speed-up | rel | "
           "fw2 at 2, 3, 4, 6, 8 splits TFLOP/s | worst rel | fw_plan_splits | the dispatch TFLOP/s | over mma.sync |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    static const int shapes[][3] = {{32, 8, 128}, {24, 4, 256}, {16, 2, 256}};
    static const long prefixes[] = {0, 4096, 32768, 131072, 262144};
    const int bs = 16;
    for (int C : {2048, 512})
        for (int kt : {KT_F16, KT_Q8_0, KT_Q4_0})
            for (auto &sh : shapes)
                for (long D : prefixes) {
                    if (D > max_depth || (kt != KT_F16 && D > 131072)) continue;
                    const int nh = sh[0], nkv = sh[1], hd = sh[2];
                    const long n_keys = D + C;
                    fa_case fc = fa_case_new(kt, nh, nkv, hd, D, C, bs);
                    const size_t nq = fc.nq;
                    float *q = fc.q, *out = fc.out, *part;
                    CK(cudaMalloc(&part, (size_t)C * nh * 8 * (hd + 2) * 4));
                    const bk_kv_view kv = fc.kv;
                    const float scale = 1.0f / sqrtf((float)hd);
                    const double flops = 4.0 * nh * hd * ((double)C * D + (double)C * (C + 1) / 2);
                    const int32_t *d_pos = fc.d_meta, *d_off = fc.d_meta + C, *d_tabs = fc.d_meta + 2 * C;
                    float *ref = (float *)malloc(nq * 4), *h = (float *)malloc(nq * 4);
                    const auto fetch_rel = [&]() {
                        CK(cudaMemcpy(h, out, nq * 4, cudaMemcpyDeviceToHost));
                        bool nan = false;
                        for (size_t i = 0; i < nq && !nan; i++) nan = h[i] != h[i];
                        return nan ? 1e30 : max_rel(h, ref, (int64_t)nq);
                    };
                    fa_mt<1>(cb, kt, hd, q, &kv, C, d_pos, d_off, d_tabs, nh, nkv, scale, out);
                    CK(cudaStreamSynchronize(cb->stream));
                    check_backend(cb);
                    CK(cudaMemcpy(ref, out, nq * 4, cudaMemcpyDeviceToHost));
                    cb->attn_wgmma_off = true;
                    const float ms_old = time_ms(cb->stream, [&](int) {
                        cuda_attn_prefill(cb, q, &kv, C, (int)n_keys, d_pos, d_off, d_tabs, nh, nkv, hd, scale, out);
                    });
                    cb->attn_wgmma_off = false;
                    check_backend(cb);
                    CK(cudaMemset(out, 0xff, nq * 4));
                    const float ms0 = time_ms(cb->stream, [&](int) {
                        fw_any<false>(cb, kt, hd, q, &kv, C, d_pos, d_off, d_tabs, nh, nkv, scale, out, 1, NULL);
                    });
                    check_backend(cb);
                    const double rel0 = fetch_rel();
                    CK(cudaMemset(out, 0xff, nq * 4));
                    const float ms1 = time_ms(cb->stream, [&](int) {
                        fw_any(cb, kt, hd, q, &kv, C, d_pos, d_off, d_tabs, nh, nkv, scale, out, 1, NULL);
                    });
                    check_backend(cb);
                    const double rel1 = fetch_rel();
                    printf("| %d/%d x %d | %s | %d | %ld | %.0f | %.0f | %.1e | %.0f | %.2fx | %.1e |", nh, nkv, hd,
                           kt == KT_F16 ? "f16" : kt == KT_Q8_0 ? "q8_0" : "q4_0", C, D, flops / (ms_old * 1e9),
                           flops / (ms0 * 1e9), rel0, flops / (ms1 * 1e9), ms_old / ms1, rel1);
                    double worst = 0;
                    for (int sp : {2, 3, 4, 6, 8}) {
                        if (C != 512) break;
                        CK(cudaMemset(out, 0xff, nq * 4));
                        const float ms = time_ms(cb->stream, [&](int) {
                            fw_any(cb, kt, hd, q, &kv, C, d_pos, d_off, d_tabs, nh, nkv, scale, out, sp, part);
                        });
                        check_backend(cb);
                        worst = fmax(worst, fetch_rel());
                        printf(" %.0f", flops / (ms * 1e9));
                    }
                    const int plan = fw_plan_splits(C, nh, nkv, (int)n_keys, cb->n_sm);
                    CK(cudaMemset(out, 0xff, nq * 4));
                    const float msd = time_ms(cb->stream, [&](int) {
                        cuda_attn_prefill(cb, q, &kv, C, (int)n_keys, d_pos, d_off, d_tabs, nh, nkv, hd, scale, out);
                    });
                    check_backend(cb);
                    worst = fmax(worst, fetch_rel());
                    printf(" | %.1e | %d | %.0f | %.2fx |\n", worst, plan, flops / (msd * 1e9), ms_old / msd);
                    fflush(stdout);
                    free(ref);
                    free(h);
                    cudaFree(part);
                    fa_case_free(fc);
                }
}

int main(int argc, char **argv) {
    const long max_depth = argc > 1 ? atol(argv[1]) : 1048576;
    const char *only = argc > 2 ? argv[2] : NULL; /* one cache type's decode rows */
    const long min_depth = argc > 3 ? atol(argv[3]) : 0;
    bk_backend *be;
    if (bk_cuda_backend_new(0, &be) != BRISK_OK) {
        printf("no CUDA backend: %s\n", brisk_last_error());
        return 1;
    }
    cuda_backend *cb = (cuda_backend *)be;
    const double bw = copy_bw();
    printf("copy bandwidth %.0f GB/s, %d SMs; GB/s = KV bytes read / time; %% = share of the copy bandwidth\n", bw,
           cb->n_sm);
    printf("| shape (q/kv heads x dim) | KV | depth | tensor cores us | GB/s | %% | warp kernel us | GB/s | speed-up | rel |\n"
           "|---|---|---|---|---|---|---|---|---|---|\n");
    /* qwen3.6-35b-a3b, qwen3.6-27b, qwen3-8b / llama3-8b, qwen3-30b-a3b (32/4 of 128) */
    static const int shapes[][3] = {{16, 2, 256}, {24, 4, 256}, {32, 8, 128}, {32, 4, 128}};
    static const long depths[] = {4096, 32768, 131072, 262144, 1048576};
    const int bs = 16;
    const bool prefill_only = only && !strcmp(only, "prefill");
    if (only && !strcmp(only, "fw")) { /* the warpgroup-MMA prefill kernel's rows alone */
        prefill_fw(cb, max_depth);
        be->ops->free(be);
        return 0;
    }
    const char *shape_env = getenv("LAB_SHAPE"); /* one shape's rows (its index above): for ncu */
    for (int kt : {KT_F16, KT_Q8_0, KT_Q4_0})
        for (auto &sh : shapes)
            for (long depth : depths) {
                if (depth > max_depth || depth < min_depth) continue;
                if (shape_env && atoi(shape_env) != (int)(&sh - shapes)) continue;
                if (prefill_only) continue;
                if (only && strcmp(only, kt == KT_F16 ? "f16" : kt == KT_Q8_0 ? "q8_0" : "q4_0")) continue;
                const int nh = sh[0], nkv = sh[1], hd = sh[2];
                const size_t row = kt == KT_F16 ? (size_t)nkv * hd * 2 : (size_t)nkv * hd / 32 * kt_block_bytes(kt);
                const long n_pages = depth / bs + 1;
                const size_t bytes = (size_t)n_pages * bs * row;
                size_t free_b, total_b;
                cudaMemGetInfo(&free_b, &total_b);
                if (2 * bytes + ((size_t)1 << 30) > free_b) continue;
                uint8_t *kc, *vc;
                CK(cudaMalloc(&kc, bytes));
                CK(cudaMalloc(&vc, bytes));
                fill_kernel<<<1024, 256>>>(kc, bytes, kt, 1u);
                fill_kernel<<<1024, 256>>>(vc, bytes, kt, 2u);
                /* shuffled pages: the table's lookups as a real cache's */
                int32_t *tab = (int32_t *)malloc(n_pages * 4);
                for (long i = 0; i < n_pages; i++) tab[i] = (int32_t)i;
                for (long i = n_pages - 1; i > 0; i--) {
                    long j = rnd() % (i + 1);
                    int32_t x = tab[i];
                    tab[i] = tab[j];
                    tab[j] = x;
                }
                int32_t meta[2] = {(int32_t)(depth - 1), 0}, *d_meta, *d_tab;
                CK(cudaMalloc(&d_meta, 8));
                CK(cudaMalloc(&d_tab, n_pages * 4));
                CK(cudaMemcpy(d_meta, meta, 8, cudaMemcpyHostToDevice));
                CK(cudaMemcpy(d_tab, tab, n_pages * 4, cudaMemcpyHostToDevice));
                const size_t nq = (size_t)nh * hd;
                float *hq = (float *)malloc(nq * 4), *o1 = (float *)malloc(nq * 4), *o2 = (float *)malloc(nq * 4);
                for (size_t i = 0; i < nq; i++) hq[i] = 2.0f * frand();
                float *q, *out;
                CK(cudaMalloc(&q, nq * 4));
                CK(cudaMalloc(&out, nq * 4));
                CK(cudaMemcpy(q, hq, nq * 4, cudaMemcpyHostToDevice));
                bk_kv_view kv = {.k = kc, .v = vc, .kv_type = kt, .block_size = bs};
                const float scale = 1.0f / sqrtf((float)hd);
                auto call = [&]() {
                    cuda_attn_decode(cb, q, &kv, 1, (int)depth, d_meta, d_meta + 1, d_tab, nh, nkv, hd, scale,
                                     att_gate{}, dec_rope{}, out);
                };
                float t[2];
                float *o[2] = {o1, o2};
                for (int v = 0; v < 2; v++) {
                    cb->attn_mma_min = v == 0 ? 1 : 0;
                    t[v] = time_graph(cb->stream, depth >= 262144 ? 10 : 40, call);
                    call();
                    CK(cudaStreamSynchronize(cb->stream));
                    check_backend(cb);
                    CK(cudaMemcpy(o[v], out, nq * 4, cudaMemcpyDeviceToHost));
                }
                const double kvb = 2.0 * depth * row;
                printf("| %d/%d x %d | %s | %ld | %.1f | %.0f | %.1f%% | %.1f | %.0f | %.2fx | %.1e |\n", nh, nkv, hd,
                       kt == KT_F16 ? "f16" : kt == KT_Q8_0 ? "q8_0" : "q4_0", depth, t[0] * 1e3, kvb / (t[0] * 1e6), 100 * kvb / (t[0] * 1e6) / bw,
                       t[1] * 1e3, kvb / (t[1] * 1e6), t[1] / t[0], max_rel(o1, o2, (int64_t)nq));
                fflush(stdout);
                cudaFree(kc); cudaFree(vc); cudaFree(d_meta); cudaFree(d_tab); cudaFree(q); cudaFree(out);
                free(tab); free(hq); free(o1); free(o2);
            }
    cb->attn_mma_min = 1;
    if (!only || prefill_only) prefill_rows(cb, max_depth);
    if (!only || prefill_only || !strcmp(only, "splits")) prefill_splits(cb, max_depth);
    be->ops->free(be);
    return 0;
}
