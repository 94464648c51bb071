/* ssm_lab.cu — timing sweep of the Gated DeltaNet ops (cuda_ssm.cu) on the
 * shapes of Qwen3.6-27B (16/48 heads of 128, conv_dim 10240) and
 * Qwen3.6-35B-A3B (16/32, 8192): the chunked delta rule and the parallel
 * conv against the token-by-token kernels of a backend made with
 * BRISK_CUDA_DISABLE=gd_chunk, per batch size and sequence count.
 *
 *   make -j && nvcc -std=c++17 -O3 -arch=sm_90a -Iinclude -Isrc dev/kernels/ssm_lab.cu build/libbrisk.a -o build/ssm_lab
 *   build/ssm_lab
 *
 * Columns: microseconds per call (token by token, then chunked / parallel),
 * the speedup, the chunked form's TFLOP/s (its useful fp32 work, about
 * 2 (3 C d + 3 d^2 + C d / 2) flops per entry and value head with C = 64,
 * as a share of PEAK_FP32 — the recomputation of A and P by each 32-row
 * block is not counted), and "diff": the relative L2 distance of the two
 * forms' outputs from the same state (both fp32: ~1e-6; correctness is
 * tests/test_cuda_ops.c's). The sequences of a batch come in equal runs. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"
#include "lab.cuh"

#define PEAK_FP32 67.0 /* TFLOP/s, H200 SXM (as H100 SXM) non-tensor fp32 */

static void *dev_rand(bk_backend *be, size_t count, float scale) {
    float *h = (float *)malloc(count * 4);
    for (size_t i = 0; i < count; i++) h[i] = frand() * scale;
    void *d = NULL;
    if (be->ops->alloc(be, count * 4, &d) != BRISK_OK || bk_cuda_write(be, d, h, count * 4) != BRISK_OK) {
        printf("alloc/write of %zu floats: %s\n", count, brisk_last_error());
        exit(1);
    }
    free(h);
    return d;
}

static void check(bk_backend *be) {
    float x;
    static float *one;
    if (!one && be->ops->alloc(be, 4, (void **)&one) != BRISK_OK) exit(1);
    if (be->ops->read(be, one, &x, 4) != BRISK_OK) {
        printf("op failed: %s\n", brisk_last_error());
        exit(1);
    }
}

int main(void) {
    bk_backend *be = NULL, *rec = NULL;
    if (getenv("BRISK_CUDA_DISABLE")) {
        printf("unset BRISK_CUDA_DISABLE: the lab makes both backends itself\n");
        return 1;
    }
    if (bk_cuda_backend_new(0, &be) != BRISK_OK) {
        printf("cuda: %s\n", brisk_last_error());
        return 1;
    }
    setenv("BRISK_CUDA_DISABLE", "gd_chunk", 1);
    if (bk_cuda_backend_new(0, &rec) != BRISK_OK) {
        printf("cuda: %s\n", brisk_last_error());
        return 1;
    }
    unsetenv("BRISK_CUDA_DISABLE");
    cudaStream_t s_be = ((cuda_backend *)be)->stream, s_rec = ((cuda_backend *)rec)->stream;
    static const struct { const char *name; int nk, nv, d; } shapes[] = {{"qwen3.6-27b", 16, 48, 128},
                                                                         {"qwen3.6-35b-a3b", 16, 32, 128}};
    static const int ns[] = {1, 16, 64, 256, 512, 2048}, nseqs[] = {1, 4};
    const int max_n = 2048, max_seq = 4, d_conv = 4;
    printf("%-16s %5s %4s | %9s %9s %7s %7s %5s | %9s %9s %7s | %8s\n", "shape", "n", "seqs", "gd tok us",
           "gd chunk", "x", "TFLOP/s", "%pk", "conv tok", "conv par", "x", "diff");
    for (int si = 0; si < 2; si++) {
        const int nk = shapes[si].nk, nv = shapes[si].nv, d = shapes[si].d, conv_dim = (2 * nk + nv) * d;
        size_t n_state = (size_t)(max_seq + 1) * nv * d * d, n_conv = (size_t)(max_seq + 1) * (d_conv - 1) * conv_dim;
        float *qkv = (float *)dev_rand(be, (size_t)max_n * conv_dim, 1.0f);
        float *bb = (float *)dev_rand(be, (size_t)max_n * nv, 3.0f), *aa = (float *)dev_rand(be, (size_t)max_n * nv, 3.0f);
        float *st0 = (float *)dev_rand(be, n_state, 0.05f), *st = (float *)dev_rand(be, n_state, 0.0f);
        float *conv = (float *)dev_rand(be, n_conv, 1.0f), *cw = (float *)malloc((size_t)d_conv * conv_dim * 4);
        float *o1 = (float *)dev_rand(be, (size_t)max_n * nv * d, 0.0f), *o2 = (float *)dev_rand(be, (size_t)max_n * nv * d, 0.0f);
        float *cout = (float *)dev_rand(be, (size_t)max_n * conv_dim, 0.0f);
        float *hb = (float *)malloc((size_t)nv * 4), *ha = (float *)malloc((size_t)nv * 4);
        for (int h = 0; h < nv; h++) hb[h] = frand(), ha[h] = -expf(frand());
        for (int i = 0; i < d_conv * conv_dim; i++) cw[i] = frand();
        bk_weight wb = {.name = "ssm_dt.bias", .type = QT_F32, .n_in = nv, .n_out = 1, .row_bytes = (size_t)nv * 4, .host = hb},
                  wa = {.name = "ssm_a", .type = QT_F32, .n_in = nv, .n_out = 1, .row_bytes = (size_t)nv * 4, .host = ha},
                  wc = {.name = "conv1d", .type = QT_F32, .n_in = d_conv, .n_out = conv_dim,
                        .row_bytes = (size_t)d_conv * 4, .host = cw};
        if (be->ops->bind_weight(be, &wb) || be->ops->bind_weight(be, &wa) || be->ops->bind_weight(be, &wc)) {
            printf("bind: %s\n", brisk_last_error());
            return 1;
        }
        int32_t *seq = (int32_t *)malloc((size_t)max_n * 4);
        float *h1 = (float *)malloc((size_t)max_n * nv * d * 4), *h2 = (float *)malloc((size_t)max_n * nv * d * 4);
        for (int ni = 0; ni < 6; ni++)
            for (int qi = 0; qi < 2; qi++) {
                int n = ns[ni], nq = nseqs[qi];
                if (nq > n) continue;
                for (int t = 0; t < n; t++) seq[t] = t / ((n + nq - 1) / nq);
                /* the two forms' outputs from the same state */
                double num = 0, den = 0;
                bk_backend *two[2] = {rec, be};
                float *outs[2] = {o1, o2};
                for (int k = 0; k < 2; k++) {
                    CK(cudaMemcpy(st, st0, n_state * 4, cudaMemcpyDeviceToDevice));
                    two[k]->ops->gated_delta(two[k], qkv, bb, aa, &wb, &wa, st, seq, n, nk, nv, false, d, 1e-6f, outs[k]);
                    check(two[k]);
                }
                CK(cudaMemcpy(h1, o1, (size_t)n * nv * d * 4, cudaMemcpyDeviceToHost));
                CK(cudaMemcpy(h2, o2, (size_t)n * nv * d * 4, cudaMemcpyDeviceToHost));
                for (size_t i = 0; i < (size_t)n * nv * d; i++) {
                    num += ((double)h2[i] - h1[i]) * ((double)h2[i] - h1[i]);
                    den += (double)h1[i] * h1[i];
                }
                float t_rec = time_ms(s_rec, [&](int) {
                    rec->ops->gated_delta(rec, qkv, bb, aa, &wb, &wa, st, seq, n, nk, nv, false, d, 1e-6f, o1);
                });
                check(rec);
                float t_chk = time_ms(s_be, [&](int) {
                    be->ops->gated_delta(be, qkv, bb, aa, &wb, &wa, st, seq, n, nk, nv, false, d, 1e-6f, o2);
                });
                check(be);
                float c_rec = time_ms(s_rec, [&](int) {
                    rec->ops->ssm_conv(rec, qkv, &wc, conv, seq, n, conv_dim, d_conv, cout);
                });
                check(rec);
                float c_par = time_ms(s_be, [&](int) {
                    be->ops->ssm_conv(be, qkv, &wc, conv, seq, n, conv_dim, d_conv, cout);
                });
                check(be);
                double flops = 2.0 * (3.0 * 64 * d + 3.0 * d * d + 64.0 * d / 2) * nv * n;
                double tf = flops / (t_chk * 1e-3) / 1e12;
                printf("%-16s %5d %4d | %9.1f %9.1f %7.2f %7.2f %5.1f | %9.1f %9.1f %7.2f | %8.1e\n", shapes[si].name, n,
                       nq, t_rec * 1e3, t_chk * 1e3, t_rec / t_chk, tf, 100.0 * tf / PEAK_FP32, c_rec * 1e3,
                       c_par * 1e3, c_rec / c_par, den > 0 ? sqrt(num / den) : sqrt(num));
            }
        be->ops->release(be, qkv); be->ops->release(be, bb); be->ops->release(be, aa); be->ops->release(be, st0);
        be->ops->release(be, st); be->ops->release(be, conv); be->ops->release(be, o1); be->ops->release(be, o2);
        be->ops->release(be, cout);
        bk_cuda_release_weight(&wb); bk_cuda_release_weight(&wa); bk_cuda_release_weight(&wc);
        free(cw); free(hb); free(ha); free(seq); free(h1); free(h2);
    }
    rec->ops->free(rec);
    be->ops->free(be);
    return 0;
}
