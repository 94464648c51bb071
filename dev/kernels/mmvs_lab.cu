/* mmvs_lab.cu — one token's products: the streamed kernel (cuda_mmvs.cu, rows copied into shared
 * memory by the bulk-copy engine) beside the warp-per-row-pair kernel (cuda_mmvq.cu) on the decode
 * shapes of an 8B model, with the largest relative difference between their outputs; the streamed
 * kernel with whole rows to a warp and with rows shared by warps in segments of 2-6 KB (mmvs_plan).
 *
 *   nvcc -std=c++17 -O3 -arch=sm_90a -Iinclude -Isrc dev/kernels/mmvs_lab.cu build/libbrisk.a -o build/mmvs_lab \
 *        -lpcre2-8 -lcjson -lmicrohttpd -ldl
 *   build/mmvs_lab
 *
 * Weights hold random bytes with valid f16 scales; inputs are random; copies rotate so that no
 * matrix is served from the 50 MB L2. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/backend/cuda/cuda_mmvq.cu"
#include "../../src/backend/cuda/cuda_mmvs.cu"
#include "lab.cuh"

const void *cuda_upload(cuda_backend *, int, const void *, size_t) { return NULL; }
void cuda_set_error(cuda_backend *, brisk_status) {}

static const char *tname(int t) {
    return t == QT_Q4_K ? "q4_K" : t == QT_Q6_K ? "q6_K" : t == QT_Q8_0 ? "q8_0" : "q4_0";
}

/* n_mats matrices of n_out rows (GLU: gate and up) of type T, n_in wide. */
template <int T> static void run(cuda_backend *cb, int64_t n_in, int64_t n_out, int n_mats, bool glu, double bw) {
    size_t rb = quant_row_size(T, n_in), bytes = rb * (size_t)n_out;
    int per = glu ? 2 : n_mats; /* matrices per call */
    int nW = (int)(200e6 / (bytes * per)) + 2;
    if (nW > 8) nW = 8;
    uint8_t *h = (uint8_t *)malloc(bytes);
    const quant_traits *qt = quant_get_traits(T);
    int off = T == QT_Q6_K ? 208 : 0;
    uint8_t *W[8][3];
    for (int c = 0; c < nW; c++)
        for (int m = 0; m < per; m++) {
            for (size_t i = 0; i < bytes; i++) h[i] = (uint8_t)(rnd() & 0xFF);
            for (size_t b = 0; b < bytes / qt->block_bytes; b++) {
                uint16_t v = quant_f32_to_f16(0.01f + 0.01f * (rnd() % 100) / 100.0f);
                memcpy(h + b * qt->block_bytes + off, &v, 2);
                if (T == QT_Q4_K) memcpy(h + b * qt->block_bytes + 2, &v, 2);
            }
            CK(cudaMalloc(&W[c][m], bytes + 64));
            CK(cudaMemcpy(W[c][m], h, bytes, cudaMemcpyHostToDevice));
        }
    free(h);
    float *x, *y0, *y1;
    CK(cudaMalloc(&x, n_in * 4));
    CK(cudaMalloc(&y0, 3 * n_out * 4));
    CK(cudaMalloc(&y1, 3 * n_out * 4));
    float *hx = (float *)malloc(n_in * 4);
    for (int64_t i = 0; i < n_in; i++) hx[i] = frand();
    CK(cudaMemcpy(x, hx, n_in * 4, cudaMemcpyHostToDevice));
    free(hx);
    int64_t ng = n_in / 32;
    quantize_q8_1_kernel<<<(unsigned)((ng + 7) / 8), 256>>>(x, n_in, cb->xq, cb->xds, ng);
    CK(cudaDeviceSynchronize());

    /* the old kernel: one launch per matrix (or the multi launch), as cuda_mmvq dispatches nt = 1 */
    auto old_call = [&](int i, float *y) {
        uint8_t **w = W[i % nW];
        if (glu) {
            unsigned blocks = (unsigned)((n_out + MMVQ_WARPS - 1) / MMVQ_WARPS);
            mmvq_launch<true>(cb, T, blocks, w[0], w[1], rb, n_in, n_out, cb->xq, cb->xds, 1, NULL, y, 0);
        } else {
            mmvq_mats mm = {};
            unsigned blocks = 0;
            for (int m = 0; m < n_mats; m++) {
                blocks += (unsigned)(((n_out + MMVQ_ROWS - 1) / MMVQ_ROWS + MMVQ_WARPS - 1) / MMVQ_WARPS);
                mm.W[m] = w[m];
                mm.y[m] = y + m * n_out;
                mm.n_out[m] = n_out;
                mm.bend[m] = blocks;
            }
            mm.count = n_mats;
            if (n_mats == 1) {
                unsigned b1 = blocks;
                mmvq_launch<false>(cb, T, b1, w[0], NULL, rb, n_in, n_out, cb->xq, cb->xds, 1, NULL, y, 0);
            } else {
                mmvq_multi_launch_t<T>(cb, mm, rb, n_in, 1, 0);
            }
        }
    };
    auto new_call = [&](int i, float *y) {
        uint8_t **w = W[i % nW];
        mmvs_mats mm = {};
        for (int m = 0; m < (glu ? 1 : n_mats); m++) {
            mm.W[m] = w[m];
            mm.y[m] = y + m * n_out;
            mm.rend[m] = (m + 1) * n_out;
        }
        mm.count = glu ? 1 : n_mats;
        if (glu) mm.W2 = w[1];
        if (!cuda_mmvs(cb, T, glu, mm, rb, n_in, 0)) old_call(i, y); /* refused: cuda_mmvq's, as the backend does */
    };
    old_call(0, y0);
    new_call(0, y1);
    CK(cudaDeviceSynchronize());
    CK(cudaGetLastError());
    int64_t ny = (glu ? 1 : n_mats) * n_out;
    float *a = (float *)malloc(ny * 4), *b = (float *)malloc(ny * 4);
    CK(cudaMemcpy(a, y0, ny * 4, cudaMemcpyDeviceToHost));
    CK(cudaMemcpy(b, y1, ny * 4, cudaMemcpyDeviceToHost));
    double rel = max_rel(b, a, ny);
    float t_old = time_ms(0, [&](int i) { old_call(i, y0); });
    double gb = (double)bytes * per / 1e9;
    printf("| %s%s | %d x %6lld x %5lld | %7.2f us %4.0f%% |", tname(T), glu ? " glu" : "", per, (long long)n_out,
           (long long)n_in, t_old * 1e3, 100 * gb / (t_old * 1e-3) / bw);
    /* the streamed kernel with whole rows, then with rows cut into segments of about S bytes */
    static const int segs[] = {0, -1, 3072, 4608, 6144};
    const int keep = cb->mmvs_seg_bytes;
    for (int v = 0; v < 5; v++) {
        cb->mmvs_seg_bytes = segs[v];
        float t = time_ms(0, [&](int i) { new_call(i, y1); });
        new_call(0, y1);
        CK(cudaDeviceSynchronize());
        CK(cudaGetLastError());
        CK(cudaMemcpy(b, y1, ny * 4, cudaMemcpyDeviceToHost));
        double r = max_rel(b, a, ny);
        if (r > rel) rel = r;
        printf(" %7.2f us %4.0f%% |", t * 1e3, 100 * gb / (t * 1e-3) / bw);
    }
    cb->mmvs_seg_bytes = keep;
    printf(" %.1e |\n", rel);
    free(a);
    free(b);
    for (int c = 0; c < nW; c++)
        for (int m = 0; m < per; m++) cudaFree(W[c][m]);
    cudaFree(x);
    cudaFree(y0);
    cudaFree(y1);
}

int main(int argc, char **argv) {
    static cuda_backend cbs;
    cuda_backend *cb = &cbs;
    cb->device = 0;
    cb->pdl_off = argc > 1 && !strcmp(argv[1], "nopdl");
    CK(cudaStreamCreate(&cb->stream));
    CK(cudaDeviceGetAttribute(&cb->n_sm, cudaDevAttrMultiProcessorCount, 0));
    CK(cudaMalloc(&cb->xq, 32768));
    CK(cudaMalloc(&cb->xds, 32768 / 32 * sizeof(float2)));
    cb->q6k_quad = 1;
    cb->mmvs_min_in = 0; /* every shape here, also the narrow one */
    cb->mmvs_seg_bytes = -1;
    double bw = copy_bw();
    printf("copy bandwidth %.0f GB/s, %d SMs; %% = share of it; rel = max |new - old| / max |old|\n", bw, cb->n_sm);
    printf("| type | mats x rows x cols | cuda_mmvq | cuda_mmvs, whole rows | default segments | of 3 KB | 4.5 KB | 6 KB | rel |\n"
           "|---|---|---|---|---|---|---|---|---|\n");
    run<QT_Q4_K>(cb, 4096, 4096, 1, false, bw);
    run<QT_Q4_K>(cb, 4096, 1024, 2, false, bw);
    run<QT_Q4_K>(cb, 4096, 12288, 1, true, bw);
    run<QT_Q4_K>(cb, 12288, 4096, 1, false, bw);
    run<QT_Q6_K>(cb, 12288, 4096, 1, false, bw);
    run<QT_Q6_K>(cb, 4096, 1024, 1, false, bw);
    run<QT_Q6_K>(cb, 4096, 151936, 1, false, bw);
    run<QT_Q8_0>(cb, 4096, 4096, 1, false, bw);
    run<QT_Q8_0>(cb, 4096, 12288, 1, true, bw);
    run<QT_Q8_0>(cb, 12288, 4096, 1, false, bw);
    run<QT_Q4_0>(cb, 4096, 4096, 1, false, bw);
    run<QT_Q4_K>(cb, 5120, 17408, 1, true, bw);
    run<QT_Q4_K>(cb, 17408, 5120, 1, false, bw);
    run<QT_Q6_K>(cb, 17408, 5120, 1, false, bw);
    run<QT_Q4_K>(cb, 5120, 5120, 1, false, bw);
    run<QT_Q4_K>(cb, 2048, 512, 1, false, bw);
    return 0;
}
