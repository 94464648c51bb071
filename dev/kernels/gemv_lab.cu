/* gemv_lab.cu — the decode GEMV's lab: times gemv_kernel<T, R> (rows per
 * warp R = 1, 2, 4) on decode-shaped matrices of each weight type against the
 * device's copy bandwidth, so the mainline keeps the winner (GEMV_ROWS).
 *
 *   nvcc -O3 -arch=sm_90a -Iinclude -Isrc dev/kernels/gemv_lab.cu build/libbrisk.a -o build/gemv_lab
 *   build/gemv_lab            (prints one table; correctness lives in tests/test_cuda_ops.c)
 *
 * Weights hold random bytes with valid f16 scales (timing only); several
 * copies rotate so that no matrix is served from the 50 MB L2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/backend/cuda/cuda_gemv.cu"
#include "../../src/backend/cuda/cuda_mmvq.cu"
#include "../../src/backend/cuda/cuda_mma.cu"
#include "lab.cuh"

/* The lab times kernels only: staging and error recording are not linked in. */
const void *cuda_upload(cuda_backend *, int, const void *, size_t) { return NULL; }
void cuda_set_error(cuda_backend *, brisk_status) {}


template <int T, int R> static float time_gemv(uint8_t **W, int nW, size_t rb, int64_t n_in, int64_t n_out,
                                                const float *x, float *y, int n) {
    int64_t warps = (n_out + R - 1) / R;
    unsigned blocks = (unsigned)((warps + GEMV_WARPS - 1) / GEMV_WARPS);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int i = 0; i < 3; i++) gemv_kernel<T, R><<<blocks, GEMV_WARPS * 32>>>(W[i % nW], rb, n_in, n_out, x, n, NULL, y, 0);
    const int iters = 40;
    cudaEventRecord(a);
    for (int i = 0; i < iters; i++) gemv_kernel<T, R><<<blocks, GEMV_WARPS * 32>>>(W[i % nW], rb, n_in, n_out, x, n, NULL, y, 0);
    cudaEventRecord(b);
    CK(cudaEventSynchronize(b));
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    return ms / iters;
}

/* The integer-dot kernel (mainline: cuda_mmvq.cu), activations quantized once outside the timing. */
template <int T> static float time_mmvq(uint8_t **W, int nW, size_t rb, int64_t n_in, int64_t n_out,
                                        const float *x, float *y, int n) {
    int8_t *xq;
    float2 *xds;
    CK(cudaMalloc(&xq, n * n_in));
    CK(cudaMalloc(&xds, n * n_in / 32 * sizeof(float2)));
    int64_t ng = n * n_in / 32;
    quantize_q8_1_kernel<<<(unsigned)((ng + 7) / 8), 256>>>(x, n_in, xq, xds, ng);
    int64_t warps = (n_out + MMVQ_ROWS - 1) / MMVQ_ROWS;
    unsigned blocks = (unsigned)((warps + MMVQ_WARPS - 1) / MMVQ_WARPS);
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int i = 0; i < 3; i++) (n == 1 ? mmvq_kernel<T, 1, false> : n <= 8 ? mmvq_kernel<T, 8, false> : mmvq_kernel<T, MMVQ_MAX_TOK, false>)<<<blocks, MMVQ_WARPS * 32>>>(W[i % nW], NULL, rb, n_in, n_out, xq, xds, n, NULL, y, 0);
    const int iters = 40;
    cudaEventRecord(a);
    for (int i = 0; i < iters; i++) (n == 1 ? mmvq_kernel<T, 1, false> : n <= 8 ? mmvq_kernel<T, 8, false> : mmvq_kernel<T, MMVQ_MAX_TOK, false>)<<<blocks, MMVQ_WARPS * 32>>>(W[i % nW], NULL, rb, n_in, n_out, xq, xds, n, NULL, y, 0);
    cudaEventRecord(b);
    CK(cudaEventSynchronize(b));
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    cudaFree(xq);
    cudaFree(xds);
    return ms / iters;
}


template <int T> static void run_type(const char *name, double bw, int n) {
    const int64_t shapes[][2] = {{4096, 4096}, {4096, 12288}, {12288, 4096}, {4096, 151936}};
    for (auto &sh : shapes) {
        int64_t n_in = sh[0], n_out = sh[1];
        size_t rb = quant_row_size(T, n_in), bytes = rb * n_out;
        int nW = (int)(200e6 / bytes) + 1;
        if (nW > 8) nW = 8;
        uint8_t *W[8];
        uint8_t *h = (uint8_t *)malloc(bytes);
        for (size_t i = 0; i < 65536 && i < bytes; i++) h[i] = (uint8_t)(rand() & 0x3F); /* small f16/bf16 bit patterns: finite */
        for (size_t i = 65536; i < bytes; i += 65536) memcpy(h + i, h, bytes - i < 65536 ? bytes - i : 65536);
        for (int i = 0; i < nW; i++) {
            CK(cudaMalloc(&W[i], bytes));
            CK(cudaMemcpy(W[i], h, bytes, cudaMemcpyHostToDevice));
        }
        free(h);
        float *x, *y;
        CK(cudaMalloc(&x, n_in * n * sizeof(float)));
        CK(cudaMemset(x, 0, n_in * n * sizeof(float)));
        CK(cudaMalloc(&y, n_out * n * sizeof(float)));
        float t1 = time_gemv<T, 1>(W, nW, rb, n_in, n_out, x, y, n);
        float t2 = time_gemv<T, 2>(W, nW, rb, n_in, n_out, x, y, n);
        float t4 = time_gemv<T, 4>(W, nW, rb, n_in, n_out, x, y, n);
        float tq = T == QT_BF16 ? 0.0f : time_mmvq<T>(W, nW, rb, n_in, n_out, x, y, n);
        double gb = bytes / 1e9;
        printf("| %-6s | %d | %6lld x %-6lld | %7.1f | %5.0f (%3.0f%%) | %5.0f (%3.0f%%) | %5.0f (%3.0f%%) |\n", name, n,
               (long long)n_out, (long long)n_in, bytes / 1e6, gb / (t1 * 1e-3), 100 * gb / (t1 * 1e-3) / bw,
               gb / (t2 * 1e-3), 100 * gb / (t2 * 1e-3) / bw, gb / (t4 * 1e-3), 100 * gb / (t4 * 1e-3) / bw);
        if (tq > 0) printf("|   int8 dot (cuda_mmvq) |   |  | | %5.0f (%3.0f%%) | | |\n", gb / (tq * 1e-3), 100 * gb / (tq * 1e-3) / bw);
        for (int i = 0; i < nW; i++) cudaFree(W[i]);
        cudaFree(x);
        cudaFree(y);
    }
}

/* Prefill: the tensor-core product (cuda_mma.cu) against the SIMT tiled kernel, n tokens. */
template <int T> static void run_prefill(const char *name, int64_t n_in, int64_t n_out, int n) {
    size_t rb = quant_row_size(T, n_in), bytes = rb * n_out;
    uint8_t *h = (uint8_t *)malloc(bytes), *W;
    for (size_t i = 0; i < bytes; i++) h[i] = (uint8_t)(rand() & 0x3F);
    CK(cudaMalloc(&W, bytes));
    CK(cudaMemcpy(W, h, bytes, cudaMemcpyHostToDevice));
    free(h);
    float *x, *y;
    CK(cudaMalloc(&x, n_in * n * sizeof(float)));
    CK(cudaMemset(x, 0, n_in * n * sizeof(float)));
    CK(cudaMalloc(&y, n_out * n * sizeof(float)));
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    float ms[2];
    for (int v = 0; v < 2; v++) {
        for (int it = 0; it < 12; it++) {
            if (it == 2) cudaEventRecord(a);
            if (v == 0) {
                dim3 grid((unsigned)((n_out + MMA_BM - 1) / MMA_BM), (unsigned)((n + MMA_BN - 1) / MMA_BN));
                mma_kernel<T><<<grid, 256>>>(W, rb, n_in, n_out, x, n, NULL, y, 0);
            } else {
                dim3 grid((unsigned)((n_out + TM - 1) / TM), (unsigned)((n + TN - 1) / TN));
                mm_tiled_kernel<T><<<grid, 256>>>(W, rb, n_in, n_out, x, n, NULL, y, 0);
            }
        }
        cudaEventRecord(b);
        CK(cudaEventSynchronize(b));
        cudaEventElapsedTime(&ms[v], a, b);
        ms[v] /= 10;
    }
    double fl = 2.0 * n * n_in * n_out;
    printf("| %-6s | %d | %6lld x %-6lld | %8.3f ms, %6.1f TFLOP/s | %8.3f ms, %6.1f TFLOP/s |\n", name, n,
           (long long)n_out, (long long)n_in, ms[0], fl / (ms[0] * 1e-3) / 1e12, ms[1], fl / (ms[1] * 1e-3) / 1e12);
    cudaFree(W);
    cudaFree(x);
    cudaFree(y);
}

int main(void) {
    setvbuf(stdout, NULL, _IOLBF, 0);
    double bw = copy_bw();
    printf("copy bandwidth (device to device, read + write): %.0f GB/s\n\n", bw);
    printf("| type | tokens | rows x cols | MB | R=1 GB/s (share) | R=2 GB/s (share) | R=4 GB/s (share) |\n");
    printf("|---|---|---|---|---|---|---|\n");
    for (int n = 1; n <= 16; n *= n == 1 ? 8 : 2) {
        run_type<QT_Q4_0>("q4_0", bw, n);
        run_type<QT_Q8_0>("q8_0", bw, n);
        run_type<QT_Q4_K>("q4_K", bw, n);
        run_type<QT_Q6_K>("q6_K", bw, n);
        run_type<QT_BF16>("bf16", bw, n);
    }
    printf("\n| type | tokens | rows x cols | tensor cores (cuda_mma) | SIMT tiled |\n|---|---|---|---|---|\n");
    run_prefill<QT_Q4_0>("q4_0", 4096, 12288, 512);
    run_prefill<QT_Q4_K>("q4_K", 4096, 12288, 512);
    run_prefill<QT_Q6_K>("q6_K", 4096, 12288, 512);
    run_prefill<QT_Q8_0>("q8_0", 4096, 12288, 512);
    run_prefill<QT_BF16>("bf16", 4096, 12288, 512);
    run_prefill<QT_Q4_K>("q4_K", 12288, 4096, 512);
    run_prefill<QT_Q4_K>("q4_K", 4096, 12288, 4096);
    return 0;
}
