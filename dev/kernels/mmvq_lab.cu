/* mmvq_lab.cu — the integer-dot decode product's lab: times mmvq_kernel<T, NT, GLU, U> over the
 * groups-in-flight unroll U and the grid (one warp per row pair, or a persistent grid of a few
 * blocks per SM striding over the rows), on decode-shaped matrices, against the copy bandwidth.
 *
 *   nvcc -std=c++17 -O3 -arch=sm_90a -Iinclude -Isrc dev/kernels/mmvq_lab.cu build/libbrisk.a -o build/mmvq_lab \
 *        -lpcre2-8 -lcjson -lmicrohttpd -ldl
 *   build/mmvq_lab
 *
 * Weights hold random bytes with valid f16 scales (timing only); copies rotate so that no matrix
 * is served from the 50 MB L2. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/backend/cuda/cuda_mmvq.cu"
#include "lab.cuh"

const void *cuda_upload(cuda_backend *, int, const void *, size_t) { return NULL; }
void cuda_set_error(cuda_backend *, brisk_status) {}


static int n_sm;

template <int T, int NT, bool GLU, int U>
static float time_it(uint8_t **W, int nW, size_t rb, int64_t n_in, int64_t n_out, const int8_t *xq, const float2 *xds,
                     float *y, int n, int grid_cap) {
    int64_t warps = GLU ? n_out : (n_out + MMVQ_ROWS - 1) / MMVQ_ROWS;
    int64_t blocks = (warps + MMVQ_WARPS - 1) / MMVQ_WARPS;
    if (grid_cap > 0 && blocks > (int64_t)grid_cap * n_sm) blocks = (int64_t)grid_cap * n_sm;
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    for (int i = 0; i < 3; i++)
        mmvq_kernel<T, NT, GLU, U><<<(unsigned)blocks, MMVQ_WARPS * 32>>>(W[i % nW], W[(i + 1) % nW], rb, n_in, n_out,
                                                                          xq, xds, n, NULL, y, 0);
    const int iters = 50;
    cudaEventRecord(a);
    for (int i = 0; i < iters; i++)
        mmvq_kernel<T, NT, GLU, U><<<(unsigned)blocks, MMVQ_WARPS * 32>>>(W[i % nW], W[(i + 1) % nW], rb, n_in, n_out,
                                                                          xq, xds, n, NULL, y, 0);
    cudaEventRecord(b);
    CK(cudaEventSynchronize(b));
    CK(cudaGetLastError());
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    return ms / iters;
}


static const char *tname(int t) {
    return t == QT_Q4_K ? "q4_K" : t == QT_Q6_K ? "q6_K" : t == QT_Q8_0 ? "q8_0" : "q4_0";
}

template <int T> static void run_type(int64_t n_in, int64_t n_out, double bw, bool glu) {
    size_t rb = quant_row_size(T, n_in), bytes = rb * (size_t)n_out;
    int nW = (int)(200e6 / bytes) + 2;
    if (nW > 12) nW = 12;
    uint8_t *h = (uint8_t *)malloc(bytes);
    for (size_t i = 0; i < bytes; i++) h[i] = (uint8_t)(rand() & 0xFF);
    const quant_traits *qt = quant_get_traits(T);
    int off = T == QT_Q6_K ? 208 : 0;
    for (size_t b = 0; b < bytes / qt->block_bytes; b++) {
        uint16_t v = quant_f32_to_f16(0.01f);
        memcpy(h + b * qt->block_bytes + off, &v, 2);
        if (T == QT_Q4_K) memcpy(h + b * qt->block_bytes + 2, &v, 2);
    }
    uint8_t *W[12];
    for (int i = 0; i < nW; i++) {
        CK(cudaMalloc(&W[i], bytes + 64));
        CK(cudaMemcpy(W[i], h, bytes, cudaMemcpyHostToDevice));
    }
    free(h);
    float *x, *y;
    int8_t *xq;
    float2 *xds;
    int nmax = 16;
    CK(cudaMalloc(&x, nmax * n_in * 4));
    CK(cudaMalloc(&y, nmax * n_out * 4));
    CK(cudaMalloc(&xq, nmax * n_in));
    CK(cudaMalloc(&xds, nmax * n_in / 32 * sizeof(float2)));
    CK(cudaMemset(x, 0, nmax * n_in * 4));
    int64_t ng = nmax * n_in / 32;
    quantize_q8_1_kernel<<<(unsigned)((ng + 7) / 8), 256>>>(x, n_in, xq, xds, ng);
    double gb = (glu ? 2.0 : 1.0) * bytes / 1e9;
    const int caps[3] = {0, 4, 8};
    for (int c = 0; c < 3; c++) {
        float t1, t2, t4, t8;
        if (glu) {
            t1 = time_it<T, 1, true, 1>(W, nW, rb, n_in, n_out, xq, xds, y, 1, caps[c]);
            t2 = time_it<T, 1, true, 2>(W, nW, rb, n_in, n_out, xq, xds, y, 1, caps[c]);
            t4 = time_it<T, 1, true, 4>(W, nW, rb, n_in, n_out, xq, xds, y, 1, caps[c]);
            t8 = time_it<T, 8, true, 1>(W, nW, rb, n_in, n_out, xq, xds, y, 8, caps[c]);
        } else {
            t1 = time_it<T, 1, false, 1>(W, nW, rb, n_in, n_out, xq, xds, y, 1, caps[c]);
            t2 = time_it<T, 1, false, 2>(W, nW, rb, n_in, n_out, xq, xds, y, 1, caps[c]);
            t4 = time_it<T, 1, false, 4>(W, nW, rb, n_in, n_out, xq, xds, y, 1, caps[c]);
            t8 = time_it<T, 8, false, 1>(W, nW, rb, n_in, n_out, xq, xds, y, 8, caps[c]);
        }
        printf("| %s%s | %6lld x %5lld | grid %s | %6.2f us %4.0f%% | %6.2f us %4.0f%% | %6.2f us %4.0f%% | %6.2f us %4.0f%% |\n",
               tname(T), glu ? " glu" : "", (long long)n_out, (long long)n_in, c == 0 ? "full " : c == 1 ? "4/SM " : "8/SM ",
               t1 * 1e3, 100 * gb / (t1 * 1e-3) / bw, t2 * 1e3, 100 * gb / (t2 * 1e-3) / bw,
               t4 * 1e3, 100 * gb / (t4 * 1e-3) / bw, t8 * 1e3, 100 * gb / (t8 * 1e-3) / bw);
    }
    for (int i = 0; i < nW; i++) cudaFree(W[i]);
    cudaFree(x); cudaFree(y); cudaFree(xq); cudaFree(xds);
}

int main(void) {
    cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, 0);
    double bw = copy_bw();
    printf("copy bandwidth %.0f GB/s, %d SMs; %% = share of it\n", bw, n_sm);
    printf("| type | rows x cols | grid | U=1 | U=2 | U=4 | 8 tokens U=1 |\n|---|---|---|---|---|---|---|\n");
    run_type<QT_Q4_K>(4096, 4096, bw, false);
    run_type<QT_Q4_K>(4096, 1024, bw, false);
    run_type<QT_Q4_K>(4096, 12288, bw, true);
    run_type<QT_Q4_K>(12288, 4096, bw, false);
    run_type<QT_Q6_K>(12288, 4096, bw, false);
    run_type<QT_Q6_K>(4096, 1024, bw, false);
    run_type<QT_Q6_K>(4096, 151936, bw, false);
    run_type<QT_Q8_0>(4096, 4096, bw, false);
    run_type<QT_Q8_0>(4096, 12288, bw, true);
    run_type<QT_Q4_0>(4096, 4096, bw, false);
    return 0;
}
