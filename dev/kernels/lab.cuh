/* lab.cuh — what the kernel labs share: the error check, the device-to-device copy bandwidth that
 * their "% of bandwidth" columns divide by, random inputs and the timer. */
#ifndef BK_LAB_CUH
#define BK_LAB_CUH
#include <stdio.h>
#include <stdint.h>
#include <stdlib.h>

#define CK(x) do { cudaError_t e_ = (x); if (e_ != cudaSuccess) { printf("%s: %s\n", #x, cudaGetErrorString(e_)); exit(1); } } while (0)

/* GB/s of a 2 GiB device-to-device copy (read + write), best of ten after a warm-up. */
static inline double copy_bw(void) {
    size_t bytes = (size_t)2 << 30;
    void *s, *d;
    CK(cudaMalloc(&s, bytes));
    CK(cudaMalloc(&d, bytes));
    cudaEvent_t a, b;
    cudaEventCreate(&a);
    cudaEventCreate(&b);
    cudaMemcpy(d, s, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(a);
    for (int i = 0; i < 10; i++) cudaMemcpy(d, s, bytes, cudaMemcpyDeviceToDevice);
    cudaEventRecord(b);
    cudaEventSynchronize(b);
    float ms;
    cudaEventElapsedTime(&ms, a, b);
    cudaFree(s);
    cudaFree(d);
    return 2.0 * bytes * 10 / (ms * 1e-3) / 1e9;
}
/* max |a - b| / max |b|: the labs' "rel" column (a kernel's output against the one it replaces) */
static inline double max_rel(const float *a, const float *b, int64_t n) {
    double num = 0, den = 0;
    for (int64_t i = 0; i < n; i++) {
        double d = a[i] > b[i] ? (double)a[i] - b[i] : (double)b[i] - a[i];
        if (d > num) num = d;
        double m = b[i] < 0 ? -(double)b[i] : b[i];
        if (m > den) den = m;
    }
    return den > 0 ? num / den : num;
}
/* Labs that drive the mainline code through a real backend (gemm_lab, mmq_lab, ssm_lab): a seeded
 * xorshift for their inputs, a check of the backend's sticky error, and a timer. */
static uint64_t lab_rng = 0x9E3779B97F4A7C15ull;
static inline uint32_t rnd(void) {
    lab_rng ^= lab_rng << 13;
    lab_rng ^= lab_rng >> 7;
    lab_rng ^= lab_rng << 17;
    return (uint32_t)(lab_rng >> 16);
}
static inline float frand(void) { return (rnd() % 2000001) / 1000000.0f - 1.0f; } /* [-1, 1] */

#ifdef BK_CUDA_INTERNAL_CUH
static inline void check_backend(cuda_backend *cb) {
    if (cb->err == BRISK_OK) return;
    printf("backend error: %s\n", cb->errmsg);
    exit(1);
}
#endif

/* Milliseconds per call of f(i) on the stream: a warm-up call (it also grows scratch such as
 * cuBLAS's), one timed call to size the run, then ~target_ms of calls, best of three such runs.
 * i counts the calls, so a lab can rotate inputs through copies larger than the L2. */
template <class F> static float time_ms(cudaStream_t s, F f, float target_ms = 30.0f) {
    cudaEvent_t a, b;
    CK(cudaEventCreate(&a));
    CK(cudaEventCreate(&b));
    f(0);
    CK(cudaEventRecord(a, s));
    f(1);
    CK(cudaEventRecord(b, s));
    CK(cudaEventSynchronize(b));
    float ms = 0, best = 1e30f;
    CK(cudaEventElapsedTime(&ms, a, b));
    int iters = ms > 0 ? (int)(target_ms / ms) : 100;
    iters = iters < 3 ? 3 : iters > 200 ? 200 : iters;
    for (int rep = 0; rep < 3; rep++) {
        CK(cudaEventRecord(a, s));
        for (int i = 0; i < iters; i++) f(2 + i);
        CK(cudaEventRecord(b, s));
        CK(cudaEventSynchronize(b));
        CK(cudaEventElapsedTime(&ms, a, b));
        if (ms / iters < best) best = ms / iters;
    }
    cudaEventDestroy(a);
    cudaEventDestroy(b);
    return best;
}
#endif
