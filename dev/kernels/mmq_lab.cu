/* mmq_lab.cu — the batched integer product's lab: cuda_mmq.cu (int8 tensor cores, one launch per
 * 64 tokens) against cuda_mmvq.cu (the integer-dot GEMV, one launch per 16-token slice) and
 * cuda_blas.cu (cuBLAS on weights dequantized to f16, x converted per call), per weight type,
 * shape (n_out x n_in) and batch n, and mmq's output against mmvq's on the same quantized x.
 *
 *   make -j2 && nvcc -std=c++17 -O3 -arch=sm_90a -Iinclude -Isrc dev/kernels/mmq_lab.cu build/libbrisk.a \
 *        -o build/mmq_lab -lpcre2-8 -lcjson -lmicrohttpd -ldl
 *   build/mmq_lab            (one table; add -Xptxas -v to the build to see registers and spills)
 *   build/mmq_lab q4_K 12288 4096 32   (one type, shape and batch: what a profiler run wants; "all", 0 0: any)
 *
 * It drives the mainline code through a real backend (bk_cuda_backend_new), on its stream, timed
 * with CUDA events (best of the mean of ~30 ms of calls, after a warm-up):
 *   mmvq    cuda_mmvq: ceil(n / 16) launches, each reading all of W
 *   mmq     cuda_mmq: one launch, token tiles of 8, 16 or 32 (programmatic: back-to-back calls overlap the
 *           next call's first weight loads with the previous call's tail, as in a decode step)
 *   cublas  cuda_blas_matmul: x to f16, per row chunk a dequantize launch and a GEMM
 *   x1      mmq's time over a 1-token mmvq's (the goal: ~1.3-1.5 at 8-16 tokens)
 *   GB/s    weight bytes / time (and % of the device-to-device copy bandwidth)
 *   diff    relative L2 distance of mmq's and mmvq's outputs: both scale the same int32 group sums
 *           (group_dot's math), so only the fp32 summation order differs: ~1e-7..1e-6. More
 *           means a fragment-layout bug; the line says FAIL above 1e-4.
 * Weights hold random bytes with valid f16 scales (every quant bit pattern is a valid value);
 * small matrices rotate copies so that no product reads its weights from the 50 MB L2. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"
#include "lab.cuh"

/* Host rows of a block type: random bytes with small f16 scales at their offsets. */
static uint8_t *make_weight(uint32_t type, int64_t n_in, int64_t n_out, size_t *row_bytes) {
    *row_bytes = quant_row_size(type, n_in);
    size_t bytes = *row_bytes * (size_t)n_out;
    uint8_t *w = (uint8_t *)malloc(bytes);
    for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)rnd();
    int off[2] = {0, -1}; /* f16 fields per block: Q8_0 d; Q4_K d, dmin; Q6_K d */
    if (type == QT_Q4_K) off[1] = 2;
    if (type == QT_Q6_K) off[0] = 208;
    size_t bb = (size_t)quant_get_traits(type)->block_bytes;
    for (size_t b = 0; b < bytes / bb; b++)
        for (int k = 0; k < 2; k++)
            if (off[k] >= 0) {
                uint16_t h = quant_f32_to_f16(frand() * 0.02f);
                memcpy(w + b * bb + off[k], &h, 2);
            }
    return w;
}

static double rel_l2(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (a[i] != a[i] || b[i] != b[i]) return INFINITY;
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

#define MAX_N 128
#define MAX_IN 12288
#define MAX_OUT 151936

int main(int argc, char **argv) {
    /* optional filters: type name, n_out n_in, batch */
    const char *f_type = argc > 1 && strcmp(argv[1], "all") ? argv[1] : NULL; /* "all": every type */
    int64_t f_out = argc > 3 ? atoll(argv[2]) : 0, f_in = argc > 3 ? atoll(argv[3]) : 0;
    int f_n = argc > 4 ? atoi(argv[4]) : 0;
    setenv("BRISK_CUDA_CUBLAS_MIN_TOK", "1", 1); /* cuda_blas_matmul takes every batch here */
    bk_backend *be = NULL;
    if (bk_cuda_backend_new(0, &be) != BRISK_OK) {
        printf("no CUDA backend: %s\n", brisk_last_error());
        return 1;
    }
    cuda_backend *cb = (cuda_backend *)be;
    cudaStream_t st = cb->stream;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, cb->device));
    double bw = copy_bw();
    bool blas = bk_cuda_blas_products(be) >= 0;
    printf("%s, %d SMs, copy bandwidth %.0f GB/s; cuBLAS %s\n\n", prop.name, prop.multiProcessorCount, bw,
           blas ? "loaded" : "NOT loaded");

    size_t nx = (size_t)MAX_N * MAX_IN, ny = (size_t)MAX_N * MAX_OUT;
    float *xh = (float *)malloc(nx * sizeof(float));
    for (size_t i = 0; i < nx; i++) xh[i] = frand();
    float *x, *y1, *y2, *y3;
    CK(cudaMalloc(&x, nx * sizeof(float)));
    CK(cudaMemcpy(x, xh, nx * sizeof(float), cudaMemcpyHostToDevice));
    free(xh);
    CK(cudaMalloc(&y1, ny * sizeof(float)));
    CK(cudaMalloc(&y2, ny * sizeof(float)));
    CK(cudaMalloc(&y3, ny * sizeof(float)));
    float *h1 = (float *)malloc(ny * sizeof(float)), *h2 = (float *)malloc(ny * sizeof(float));

    static const struct { uint32_t type; const char *name; } types[] = {
        {QT_Q4_K, "q4_K"}, {QT_Q6_K, "q6_K"}, {QT_Q8_0, "q8_0"}};
    static const int64_t shapes[][2] = {{4096, 4096}, {12288, 4096}, {4096, 12288}, {151936, 4096}}; /* n_out, n_in */
    static const int ns[] = {1, 2, 4, 8, 16, 32, 48, 64, 128};
    printf("| type | n_out x n_in   |   n | mmvq us |  GB/s  %%bw | mmq us |  GB/s  %%bw |   x1 | cublas us "
           "| best   | diff    |\n");
    printf("|------|----------------|-----|---------|-----------|--------|-----------|------|--------|-----------"
           "|--------|---------|---------|\n");
    int fails = 0;
    for (auto &ty : types) {
        if (f_type && strcmp(f_type, ty.name)) continue;
        for (auto &sh : shapes) {
            int64_t n_out = f_out ? f_out : sh[0], n_in = f_in ? f_in : sh[1];
            if (f_out && &sh != &shapes[0]) break; /* the one shape asked for */
            size_t rb;
            uint8_t *h = make_weight(ty.type, n_in, n_out, &rb);
            size_t bytes = rb * (size_t)n_out;
            int nW = (int)(200e6 / bytes) + 1;
            if (nW > 8) nW = 8;
            bk_weight w[8];
            for (int i = 0; i < nW; i++) {
                w[i] = (bk_weight){.name = "w", .type = ty.type, .n_in = n_in, .n_out = n_out, .row_bytes = rb,
                                   .host = h};
                if (be->ops->bind_weight(be, &w[i]) != BRISK_OK) {
                    printf("bind: %s\n", brisk_last_error());
                    return 1;
                }
            }
            free(h);
            float t_one = 0;
            for (int n : ns) {
                if (f_n && n != f_n) continue;
                if (!cuda_mmvq_quantize(cb, x, n_in, n)) {
                    printf("(x of %d x %lld does not fit the activation buffer)\n", n, (long long)n_in);
                    continue;
                }
                float t_v = time_ms(st, [&](int i) { cuda_mmvq(cb, &w[i % nW], NULL, n, y1, 0); });
                float t_q = time_ms(st, [&](int i) { cuda_mmq(cb, &w[i % nW], NULL, n, y2, 0); });
                /* the f16 kernel: its conversion of x, then the product (and the product alone) */
                float t_h = -1, t_hp = -1;
                double dh = -1;
                if (n <= 64 && cuda_mmqh_supported(cb, ty.type, n_in) && cuda_mmqh_prepare(cb, x, n_in, n)) {
                    t_hp = time_ms(st, [&](int i) {
                        cuda_mmqh_prepare(cb, x, n_in, n);
                        const bk_weight *wp = &w[i % nW];
                        cuda_mmqh(cb, 1, &wp, NULL, n, &y3, 0);
                    });
                    t_h = time_ms(st, [&](int i) {
                        const bk_weight *wp = &w[i % nW];
                        cuda_mmqh(cb, 1, &wp, NULL, n, &y3, 0);
                    });
                    const bk_weight *wp = &w[0];
                    cuda_mmqh_prepare(cb, x, n_in, n);
                    cuda_mmqh(cb, 1, &wp, NULL, n, &y3, 0);
                    cuda_mmvq(cb, &w[0], NULL, n, y1, 0);
                    CK(cudaStreamSynchronize(st));
                    check_backend(cb);
                    CK(cudaMemcpy(h1, y3, (size_t)n * n_out * sizeof(float), cudaMemcpyDeviceToHost));
                    CK(cudaMemcpy(h2, y1, (size_t)n * n_out * sizeof(float), cudaMemcpyDeviceToHost));
                    dh = rel_l2(h1, h2, (size_t)n * n_out); /* against mmvq (int8 activations: ~1e-2) */
                }
                if (t_h > 0) {
                    double gh = bytes / (t_h * 1e6);
                    printf("| %-4s | %6lld x %-5lld | %3d | mmqh %7.1f us (with x's conversion %7.1f) | %5.0f GB/s %3.0f%% | "
                           "vs mmvq %.1e |%s\n",
                           ty.name, (long long)n_out, (long long)n_in, n, t_h * 1e3, t_hp * 1e3, gh, 100 * gh / bw, dh,
                           dh <= 5e-2 ? "" : " FAIL");
                    fails += !(dh <= 5e-2);
                }
                size_t cnt = (size_t)n * n_out;
                if (n == 1) t_one = t_v;
                float t_b = 0;
                if (blas)
                    t_b = time_ms(st, [&](int i) {
                        bool x16 = false;
                        cuda_blas_matmul(cb, &w[i % nW], NULL, x, n, y3, 0, &x16);
                    });
                /* the same copy for both outputs */
                cuda_mmvq(cb, &w[0], NULL, n, y1, 0);
                cuda_mmq(cb, &w[0], NULL, n, y2, 0);
                CK(cudaStreamSynchronize(st));
                CK(cudaGetLastError());
                check_backend(cb);
                CK(cudaMemcpy(h1, y1, cnt * sizeof(float), cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(h2, y2, cnt * sizeof(float), cudaMemcpyDeviceToHost));
                double diff = rel_l2(h2, h1, cnt);
                bool bad = !(diff <= 1e-4);
                fails += bad;
                double gv = bytes / (t_v * 1e6), gq = bytes / (t_q * 1e6);
                const char *best = t_q <= t_v && (!blas || t_q <= t_b) ? "mmq" : t_v <= t_b || !blas ? "mmvq" : "cublas";
                printf("| %-4s | %6lld x %-5lld | %3d | %7.1f | %5.0f %3.0f%% | %6.1f | %5.0f %3.0f%% | %4.2f | "
                       "%9.1f | %-6s | %.1e |%s\n",
                       ty.name, (long long)n_out, (long long)n_in, n, t_v * 1e3, gv, 100 * gv / bw, t_q * 1e3, gq,
                       100 * gq / bw, t_one > 0 ? t_q / t_one : 0.0, t_b * 1e3, best, diff, bad ? " FAIL" : "");
                fflush(stdout);
            }
            for (int i = 0; i < nW; i++) bk_cuda_release_weight(&w[i]);
        }
    }
    printf("\n%d product(s) differ from mmvq by more than 1e-4\n", fails);
    free(h1);
    free(h2);
    cudaFree(x);
    cudaFree(y1);
    cudaFree(y2);
    cudaFree(y3);
    be->ops->free(be);
    return fails ? 1 : 0;
}
