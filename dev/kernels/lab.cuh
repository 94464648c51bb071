/* lab.cuh — what the kernel labs share: the error check and the device-to-device copy
 * bandwidth that their "% of bandwidth" columns divide by. */
#ifndef BK_LAB_CUH
#define BK_LAB_CUH
#include <stdio.h>
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
#endif
