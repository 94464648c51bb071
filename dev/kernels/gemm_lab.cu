/* gemm_lab.cu — the prefill product's lab: the tensor-core kernel of
 * cuda_mma.cu against cuBLAS on weights dequantized to f16 (cuda_blas.cu),
 * per weight type, shape (n_out x n_in) and batch, so the mainline keeps the
 * faster per shape (BLAS_MIN_TOK in cuda_blas.cu, BRISK_CUDA_CUBLAS_MIN_TOK to try).
 *
 *   make -j && nvcc -std=c++17 -O3 -arch=sm_90a -Iinclude -Isrc dev/kernels/gemm_lab.cu build/libbrisk.a -o build/gemm_lab
 *   build/gemm_lab            (one table; BRISK_CUDA_CUBLAS_SCRATCH_MB=N sets the weight chunk, default 64 MiB)
 *
 * It drives the mainline code through a real backend (bk_cuda_backend_new),
 * on its stream, timed with CUDA events:
 *   wmma    cuda_mma: weights decoded into shared memory per tile
 *   cublas  cuda_blas_matmul as the mainline runs it: x to f16, then per row
 *           chunk of W a dequantize launch and one cublasGemmEx
 *   gemm    cublasGemmEx alone on the whole W dequantized beforehand (the ceiling)
 *   deq     dequantizing all of W to f16 alone, GB/s of bytes read + written
 *   diff    relative L2 distance of the cublas and wmma outputs (first 256
 *           tokens); both round the inputs to f16 and sum in f32, so ~1e-4..1e-3
 * TFLOP/s count 2 n n_out n_in; "%pk" is the share of PEAK_TFLOPS (H200 SXM
 * dense f16). Weights hold random bytes with valid f16 scales (timing only:
 * correctness is tests/test_cuda_ops.c's); small matrices rotate copies so
 * no product reads its weights from the 50 MB L2 of the previous one. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"
#include "lab.cuh"

#define PEAK_TFLOPS 989.0
#define MAX_N 4096
#define MAX_DIM 12288

/* Host rows of a weight type: bf16 from random values; block types from random
 * bytes with small f16 scales at their offsets (every quant bit pattern is valid). */
static uint8_t *make_weight(uint32_t type, int64_t n_in, int64_t n_out, size_t *row_bytes) {
    *row_bytes = quant_row_size(type, n_in);
    size_t bytes = *row_bytes * (size_t)n_out;
    uint8_t *w = (uint8_t *)malloc(bytes);
    if (type == QT_BF16) {
        uint16_t *h = (uint16_t *)w;
        for (size_t i = 0; i < bytes / 2; i++) {
            float f = frand() * 0.05f;
            uint32_t u;
            memcpy(&u, &f, 4);
            h[i] = (uint16_t)(u >> 16);
        }
        return w;
    }
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

int main(void) {
    setenv("BRISK_CUDA_GRAPH_INFO", "1", 0);      /* report which cuBLAS loaded (BRISK_CUDA_DISABLE=cublas: WMMA alone) */
    setenv("BRISK_CUDA_CUBLAS_MIN_TOK", "1", 1);  /* cuda_blas_matmul takes every batch here */
    bk_backend *be = NULL;
    if (bk_cuda_backend_new(0, &be) != BRISK_OK) {
        printf("no CUDA backend: %s\n", brisk_last_error());
        return 1;
    }
    cuda_backend *cb = (cuda_backend *)be;
    cudaStream_t st = cb->stream;
    cudaDeviceProp prop;
    CK(cudaGetDeviceProperties(&prop, cb->device));
    bool blas = bk_cuda_blas_products(be) >= 0;
    printf("%s, %d SMs; cuBLAS %s; peak taken as %.0f TFLOP/s (f16 dense)\n\n", prop.name, prop.multiProcessorCount,
           blas ? "loaded" : "NOT loaded (WMMA only)", PEAK_TFLOPS);

    /* activations (MAX_N, MAX_DIM) f32 in [-1, 1], and the outputs */
    size_t nx = (size_t)MAX_N * MAX_DIM;
    float *xh = (float *)malloc(nx * sizeof(float));
    for (size_t i = 0; i < nx; i++) xh[i] = frand();
    float *x, *yw, *yb;
    half *x16, *w16;
    CK(cudaMalloc(&x, nx * sizeof(float)));
    CK(cudaMemcpy(x, xh, nx * sizeof(float), cudaMemcpyHostToDevice));
    free(xh);
    CK(cudaMalloc(&yw, nx * sizeof(float)));
    CK(cudaMalloc(&yb, nx * sizeof(float)));
    CK(cudaMalloc(&x16, nx * sizeof(half)));
    CK(cudaMalloc(&w16, (size_t)MAX_DIM * 4096 * sizeof(half))); /* the largest W below in f16 */
    const size_t cmp_max = (size_t)256 * MAX_DIM;
    float *hw = (float *)malloc(cmp_max * sizeof(float)), *hb = (float *)malloc(cmp_max * sizeof(float));

    static const struct { uint32_t type; const char *name; } types[] = {
        {QT_Q4_K, "q4_K"}, {QT_Q6_K, "q6_K"}, {QT_Q8_0, "q8_0"}, {QT_BF16, "bf16"}};
    static const int64_t shapes[][2] = {{4096, 4096}, {1024, 4096}, {12288, 4096}, {4096, 12288}}; /* n_out, n_in */
    static const int ns[] = {128, 512, 2048, 4096};
    printf("| type | n_out x n_in  |    n | wmma us |  TF/s | cublas us |  TF/s | gemm us |  TF/s | %%pk | deq us |  GB/s "
           "| best   | diff    |\n");
    printf("|------|---------------|------|---------|-------|-----------|-------|---------|-------|-----|--------|------"
           "-|--------|---------|\n");
    for (auto &ty : types) {
        for (auto &sh : shapes) {
            int64_t n_out = sh[0], n_in = sh[1];
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
            float t_deq = 0;
            if (blas) {
                t_deq = time_ms(st, [&](int i) { cuda_blas_dequant(cb, &w[i % nW], 0, n_out, w16); });
                cuda_blas_dequant(cb, &w[0], 0, n_out, w16); /* the GEMM-alone input */
            }
            for (int n : ns) {
                double flop = 2.0 * n * n_out * n_in;
                float t_w = time_ms(st, [&](int i) { cuda_mma(cb, &w[i % nW], NULL, x, n, yw, 0); });
                float t_b = 0, t_g = 0;
                double diff = 0;
                if (blas) {
                    bool taken = true;
                    t_b = time_ms(st, [&](int i) {
                        bool x16_ready = false;
                        taken &= cuda_blas_matmul(cb, &w[i % nW], NULL, x, n, yb, 0, &x16_ready);
                    });
                    if (!taken) printf("(cuda_blas_matmul declined %lld x %lld, n %d)\n", (long long)n_out,
                                       (long long)n_in, n);
                    /* the last calls of both used copy nW - 1 or another: compare on one copy */
                    cuda_mma(cb, &w[0], NULL, x, n, yw, 0);
                    bool r = false;
                    cuda_blas_matmul(cb, &w[0], NULL, x, n, yb, 0, &r);
                    CK(cudaStreamSynchronize(st));
                    check_backend(cb);
                    size_t cnt = (size_t)(n < 256 ? n : 256) * n_out;
                    CK(cudaMemcpy(hw, yw, cnt * sizeof(float), cudaMemcpyDeviceToHost));
                    CK(cudaMemcpy(hb, yb, cnt * sizeof(float), cudaMemcpyDeviceToHost));
                    double num = 0, den = 0;
                    for (size_t i = 0; i < cnt; i++) {
                        num += ((double)hb[i] - hw[i]) * ((double)hb[i] - hw[i]);
                        den += (double)hw[i] * hw[i];
                    }
                    diff = den > 0 ? sqrt(num / den) : sqrt(num);
                    cuda_blas_to_f16(cb, x, (int64_t)n * n_in, x16);
                    t_g = time_ms(st, [&](int) { cuda_blas_gemm(cb, w16, n_out, n_in, x16, n, yb, n_out, 0.0f); });
                }
                check_backend(cb);
                double tf_w = flop / (t_w * 1e9), tf_b = blas ? flop / (t_b * 1e9) : 0,
                       tf_g = blas ? flop / (t_g * 1e9) : 0;
                double gbs = blas ? (bytes + (double)n_out * n_in * 2) / (t_deq * 1e6) : 0;
                printf("| %-4s | %5lld x %-5lld | %4d | %7.1f | %5.1f | %9.1f | %5.1f | %7.1f | %5.1f | %3.0f | %6.1f | %5.0f "
                       "| %-6s | %.1e |\n",
                       ty.name, (long long)n_out, (long long)n_in, n, t_w * 1e3, tf_w, t_b * 1e3, tf_b, t_g * 1e3, tf_g,
                       100 * tf_g / PEAK_TFLOPS, t_deq * 1e3, gbs, blas && t_b < t_w ? "cublas" : "wmma", diff);
                fflush(stdout);
            }
            for (int i = 0; i < nW; i++) bk_cuda_release_weight(&w[i]);
        }
    }
    free(hw);
    free(hb);
    cudaFree(x);
    cudaFree(yw);
    cudaFree(yb);
    cudaFree(x16);
    cudaFree(w16);
    be->ops->free(be);
    return 0;
}
