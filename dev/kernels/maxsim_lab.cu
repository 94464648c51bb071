/* maxsim_lab.cu — late-interaction scoring (cuda_maxsim.cu) on the GPU against the CPU, to measure
 * BRISK_CUDA_MAXSIM_MIN (the default in cuda_maxsim.cu is a guess until this runs on a GPU): for
 * each size (query rows, dim, documents x rows), the op alone on device-resident rows, the whole
 * brisk_maxsim_batch through a GPU context (the rows copied from pageable host memory in runs of
 * 64 MiB, the scores read back: what a server's /v1/rerank pays), and the CPU's brisk_maxsim_batch.
 *
 *   make -j && nvcc -std=c++17 -O3 -arch=sm_90a -Iinclude -Isrc dev/kernels/maxsim_lab.cu build/libbrisk.a \
 *        -o build/maxsim_lab -lpcre2-8 -lcjson -lmicrohttpd -lcurl -ldl
 *   build/maxsim_lab            (bench/cuda/pack.sh LAB=1 packs it as .device/maxsim_lab.xz)
 *
 * Columns: multiply-adds (the threshold's unit); the op's microseconds, GB/s of document rows read
 * (rows x dim x 4 bytes over its time) and that as a share of the device-to-device copy bandwidth
 * (lab.cuh), and its TFLOP/s (2 flops a multiply-add; the f32 FMA peak is about 67 on H100/H200 SXM);
 * the whole GPU call's microseconds; the CPU's (one thread, as brisk_maxsim_batch runs it; "-" past
 * 2^31 multiply-adds); the CPU over the whole GPU call (the threshold is where it crosses 1); "rel":
 * max |gpu - cpu| / max |cpu| over the scores. Rows are random in [-1, 1], normalised in the call. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "backend/cuda/cuda_internal.cuh"
#include "lab.cuh"
extern "C" {
#include "engine/pooling.h"
#include "model/synth.h"
}

static double now_ms(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec * 1e3 + t.tv_nsec * 1e-6;
}

static void *dev_put(bk_backend *be, const void *h, size_t bytes) {
    void *d = NULL;
    if (be->ops->alloc(be, bytes ? bytes : 4, &d) != BRISK_OK || (h && bk_cuda_write(be, d, h, bytes) != BRISK_OK)) {
        printf("device memory: %s\n", brisk_last_error());
        exit(1);
    }
    return d;
}

/* One row of the table: n_docs documents of len rows each against n_q query rows of dim. */
static void run(brisk_context *ctx, int n_q, int dim, int n_docs, int len, double bw) {
    bk_backend *be = ctx_gpu_backend(ctx);
    cuda_backend *cb = (cuda_backend *)be;
    const int64_t rows = (int64_t)n_docs * len;
    const double macs = (double)n_q * (double)rows * dim, gb = (double)rows * dim * 4 / 1e9;
    float *q = (float *)malloc(sizeof(float) * (size_t)n_q * dim), *d = (float *)malloc(sizeof(float) * (size_t)rows * dim);
    for (size_t i = 0; i < (size_t)n_q * dim; i++) q[i] = frand();
    for (size_t i = 0; i < (size_t)rows * dim; i++) d[i] = frand();
    int64_t *off = (int64_t *)malloc(sizeof(int64_t) * (n_docs + 1));
    int32_t *off32 = (int32_t *)malloc(sizeof(int32_t) * (n_docs + 1));
    for (int j = 0; j <= n_docs; j++) off[j] = (int64_t)j * len, off32[j] = j * len;
    float *g = (float *)malloc(sizeof(float) * n_docs), *c = (float *)malloc(sizeof(float) * n_docs);

    /* the op alone, on device-resident rows (as if they had never left the GPU) */
    float *dq = (float *)dev_put(be, q, sizeof(float) * (size_t)n_q * dim);
    float *dd = (float *)dev_put(be, d, sizeof(float) * (size_t)rows * dim);
    int32_t *doff = (int32_t *)dev_put(be, off32, sizeof(int32_t) * (n_docs + 1));
    void *work = dev_put(be, NULL, bk_maxsim_work_bytes(n_q, n_docs));
    float *dsc = (float *)dev_put(be, NULL, sizeof(float) * n_docs);
    const float t_op = time_ms(cb->stream, [&](int) {
        be->ops->maxsim(be, dq, n_q, dd, rows, doff, n_docs, dim, true, work, dsc);
    });
    check_backend(cb);
    be->ops->release(be, dq), be->ops->release(be, dd), be->ops->release(be, doff), be->ops->release(be, work);
    be->ops->release(be, dsc);

    /* the whole call: copies, the op, the scores back (best of three after a warm-up that sizes the
     * context's device scratch) */
    double t_all = 1e30;
    for (int r = 0; r < 4; r++) {
        const double t0 = now_ms();
        if (brisk_maxsim_batch(ctx, q, n_q, d, off, n_docs, dim, true, g) != BRISK_OK) {
            printf("brisk_maxsim_batch: %s\n", brisk_last_error());
            exit(1);
        }
        if (r && now_ms() - t0 < t_all) t_all = now_ms() - t0;
    }
    double t_cpu = -1;
    if (macs <= 2147483648.0) {
        const double t0 = now_ms();
        brisk_maxsim_batch(NULL, q, n_q, d, off, n_docs, dim, true, c);
        t_cpu = now_ms() - t0;
    }
    char cpu_s[32] = "-", ratio_s[32] = "-", rel_s[32] = "-";
    if (t_cpu >= 0) {
        snprintf(cpu_s, sizeof cpu_s, "%.0f", t_cpu * 1e3);
        snprintf(ratio_s, sizeof ratio_s, "%.2f", t_cpu / t_all);
        snprintf(rel_s, sizeof rel_s, "%.1e", max_rel(g, c, n_docs));
    }
    printf("| %2d | %4d | %5d x %4d | %9.3g | %9.1f | %6.0f | %3.0f%% | %5.1f | %9.1f | %9s | %6s | %7s |\n", n_q, dim,
           n_docs, len, macs, t_op * 1e3, gb / (t_op * 1e-3), 100 * gb / (t_op * 1e-3) / bw,
           2 * macs / (t_op * 1e-3) / 1e12, t_all * 1e3, cpu_s, ratio_s, rel_s);
    free(q), free(d), free(off), free(off32), free(g), free(c);
}

int main(void) {
    /* a GPU context to run through: a synthesized tiny model (the scoring reads none of it) */
    char dir[] = "/tmp/maxsim-lab-XXXXXX", path[64];
    if (!mkdtemp(dir)) return 1;
    snprintf(path, sizeof path, "%s/tiny.gguf", dir);
    synth_config sc;
    brisk_model_params mp = brisk_model_default_params();
    mp.n_gpu_layers = -1;
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = 64;
    brisk_model *m = NULL;
    brisk_context *ctx = NULL;
    setenv("BRISK_CUDA_MAXSIM_MIN", "0", 1); /* every call on the GPU: the lab measures the crossing */
    brisk_status st = synth_preset("tiny-qwen3", &sc);
    if (st == BRISK_OK) st = synth_write(&sc, NULL, path, false);
    if (st == BRISK_OK) st = brisk_model_load(path, &mp, &m);
    unlink(path);
    rmdir(dir);
    if (st == BRISK_OK) st = brisk_context_new(m, &cp, &ctx);
    if (st != BRISK_OK || !ctx_gpu_backend(ctx)) {
        printf("no GPU context: %s\n", st != BRISK_OK ? brisk_last_error() : "the model did not go to a GPU");
        return 1;
    }
    const double bw = copy_bw();
    printf("copy bandwidth %.0f GB/s; op = the kernels alone on device rows, call = brisk_maxsim_batch with its "
           "copies, cpu = one host thread; us per call\n", bw);
    printf("| n_q | dim | docs x rows | mul-adds | op us | GB/s | %% bw | TFLOP/s | call us | cpu us | cpu/call | rel |\n"
           "|---|---|---|---|---|---|---|---|---|---|---|---|\n");
    static const int sizes[][4] = {
        /* n_q, dim, documents, rows each: around the default threshold (2^24) first, then ColBERT's
         * shapes (dim 128, 32 query tokens, passages of 64-512 tokens), then an LLM's hidden size */
        {32, 128, 1, 16},    {32, 128, 4, 64},     {32, 128, 16, 128},   {32, 128, 32, 128},  {32, 128, 128, 128},
        {32, 128, 1000, 128}, {32, 128, 10000, 64}, {8, 128, 10000, 32},  {16, 128, 2000, 256}, {64, 128, 1000, 512},
        {1, 128, 10000, 128}, {32, 1024, 200, 128}, {16, 4096, 100, 256}, {64, 4096, 16, 2048},
    };
    for (size_t i = 0; i < sizeof sizes / sizeof sizes[0]; i++) run(ctx, sizes[i][0], sizes[i][1], sizes[i][2], sizes[i][3], bw);
    brisk_context_free(ctx);
    brisk_model_free(m);
    return 0;
}
