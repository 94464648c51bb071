/* mmvf_lab.cu — one token's products on float weights (F16, BF16, F32): the streamed kernel
 * (cuda_mmvf.cu, BRISK_CUDA_ENABLE=mmvf) beside the float GEMV it would replace (cuda_gemv.cu's
 * gemv_kernel, a warp per row pair), on the decode shapes of qwen3-8b and qwen3.6-27b in BF16, with
 * the largest relative difference between their outputs. Both run through cuda_matmul.cu's ladder
 * (cuda_matmul / cuda_matmul_swiglu's own choice), as the decode step calls them (the GEMV's SwiGLU:
 * two products and the gate kernel), launched back to back with programmatic launches.
 *
 *   nvcc -std=c++17 -O3 -arch=sm_90a -Iinclude -Isrc dev/kernels/mmvf_lab.cu build/libbrisk.a -o build/mmvf_lab \
 *        -lpcre2-8 -lcjson -lmicrohttpd -ldl
 *   build/mmvf_lab
 *
 * Weights are random floats (|w| < 1); copies rotate so that no matrix is served from the 50 MB L2.
 * The % columns are shares of the device-to-device copy bandwidth (lab.cuh). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "../../src/backend/cuda/cuda_gemv.cu"
#include "lab.cuh"

static const char *tname(uint32_t t) { return t == QT_F16 ? "f16" : t == QT_BF16 ? "bf16" : "f32"; }

/* A matrix of n_out rows of a float type, n_in wide; glu: a gate and an up matrix; qkv: three, of
 * 4 n_out, n_out and n_out rows (a layer's q, k and v). */
static void run(cuda_backend *cb, uint32_t type, int64_t n_in, int64_t n_out, bool qkv, bool glu, double bw) {
    const size_t es = type == QT_F32 ? 4 : 2, rb = (size_t)n_in * es;
    const int per = glu ? 2 : qkv ? 3 : 1, n_mats = qkv ? 3 : 1;
    const int64_t no[3] = {qkv ? 4 * n_out : n_out, n_out, n_out}, n_all = qkv ? 6 * n_out : per * n_out;
    const size_t bytes = rb * (size_t)no[0]; /* the largest matrix: the host buffer */
    const double total = (double)rb * (double)n_all; /* bytes a call reads */
    int nW = (int)(200e6 / total) + 2;
    if (nW > 8) nW = 8;
    if (total > (double)(1 << 30)) nW = 1; /* the LM head: larger than the L2 many times over */
    uint8_t *h = (uint8_t *)malloc(bytes);
    bk_weight w[8][3];
    for (int c = 0; c < nW; c++)
        for (int m = 0; m < per; m++) {
            const size_t mb = rb * (size_t)no[m];
            for (size_t i = 0; i < mb / es; i++) {
                float v = frand();
                if (type == QT_F32) ((float *)h)[i] = v;
                else if (type == QT_F16) ((uint16_t *)h)[i] = quant_f32_to_f16(v);
                else { uint32_t u; memcpy(&u, &v, 4); ((uint16_t *)h)[i] = (uint16_t)(u >> 16); }
            }
            void *d;
            CK(cudaMalloc(&d, mb + 64));
            CK(cudaMemcpy(d, h, mb, cudaMemcpyHostToDevice));
            w[c][m] = (bk_weight){.name = "w", .type = type, .n_in = n_in, .n_out = no[m], .row_bytes = rb};
            w[c][m].dev = d;
        }
    free(h);
    float *x, *y0, *y1, *tmp;
    CK(cudaMalloc(&x, n_in * 4));
    CK(cudaMalloc(&y0, n_all * 4));
    CK(cudaMalloc(&y1, n_all * 4));
    CK(cudaMalloc(&tmp, n_out * 4));
    float *hx = (float *)malloc(n_in * 4);
    for (int64_t i = 0; i < n_in; i++) hx[i] = frand();
    CK(cudaMemcpy(x, hx, n_in * 4, cudaMemcpyHostToDevice));
    free(hx);
    bk_backend *be = (bk_backend *)cb;
    auto call = [&](int i, float *y) {
        bk_weight *ww = w[i % nW];
        if (glu) {
            cuda_matmul_swiglu(be, &ww[0], &ww[1], x, 1, tmp, y);
        } else {
            const bk_weight *p[3] = {&ww[0], &ww[1], &ww[2]};
            float *ys[3] = {y, y + no[0], y + no[0] + no[1]};
            cuda_matmul(be, n_mats, p, NULL, x, 1, ys);
        }
    };
    const int64_t ny = glu ? n_out : n_all;
    float *a = (float *)malloc(ny * 4), *b = (float *)malloc(ny * 4);
    double gb = total / 1e9;
    float t[2];
    for (int v = 0; v < 2; v++) {
        cb->mmvf_on = v == 1;
        float *y = v ? y1 : y0;
        call(0, y);
        CK(cudaDeviceSynchronize());
        CK(cudaGetLastError());
        check_backend(cb);
        CK(cudaMemcpy(v ? b : a, y, ny * 4, cudaMemcpyDeviceToHost));
        t[v] = time_ms(cb->stream, [&](int i) { call(i, y); });
        check_backend(cb);
    }
    printf("| %s%s | %s%6lld x %5lld | %8.2f us %4.0f%% | %8.2f us %4.0f%% | %.2fx | %.1e |\n", tname(type),
           glu ? " glu" : "", glu ? "2 x " : qkv ? "4+1+1 x " : "", (long long)n_out, (long long)n_in, t[0] * 1e3, 100 * gb / (t[0] * 1e-3) / bw,
           t[1] * 1e3, 100 * gb / (t[1] * 1e-3) / bw, t[0] / t[1], max_rel(b, a, ny));
    free(a);
    free(b);
    for (int c = 0; c < nW; c++)
        for (int m = 0; m < per; m++) cudaFree(w[c][m].dev);
    cudaFree(x);
    cudaFree(y0);
    cudaFree(y1);
    cudaFree(tmp);
}

int main(void) {
    bk_backend *be = NULL;
    if (bk_cuda_backend_new(0, &be) != BRISK_OK) {
        printf("no CUDA device\n");
        return 1;
    }
    cuda_backend *cb = (cuda_backend *)be;
    double bw = copy_bw();
    printf("copy bandwidth %.0f GB/s, %d SMs; %% = share of it; rel = max |streamed - GEMV| / max |GEMV|\n", bw,
           cb->n_sm);
    printf("| type | mats x rows x cols | float GEMV | streamed (cuda_mmvf) | speed-up | rel |\n"
           "|---|---|---|---|---|---|\n");
    static const uint32_t ty[] = {QT_BF16, QT_F16, QT_F32};
    for (int i = 0; i < 3; i++) {
        run(cb, ty[i], 4096, 4096, false, false, bw);  /* qwen3-8b: attention output */
        run(cb, ty[i], 4096, 1024, true, false, bw);   /* q, k, v in one call */
        run(cb, ty[i], 4096, 12288, false, true, bw);  /* gate / up */
        run(cb, ty[i], 12288, 4096, false, false, bw); /* down */
    }
    run(cb, QT_BF16, 4096, 151936, false, false, bw); /* the LM head */
    run(cb, QT_BF16, 5120, 17408, false, true, bw);   /* qwen3.6-27b: gate / up */
    run(cb, QT_BF16, 17408, 5120, false, false, bw);  /* down */
    run(cb, QT_BF16, 2048, 4096, false, false, bw);   /* 2,048 wide: the MoE models' attention output */
    be->ops->free(be);
    return 0;
}
