/* cuda_elementwise.cu — SwiGLU and the residual add. */
#include "backend/cuda/cuda_internal.cuh"

__global__ void swiglu_kernel(const float *gate, const float *up, float *out, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= n) return;
    float g = gate[i];
    out[i] = g / (1.0f + expf(-g)) * up[i];
}

__global__ void add_kernel(float *x, const float *y, size_t n) {
    size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) x[i] += y[i];
}

extern "C" void cuda_swiglu(bk_backend *be, const float *gate, const float *up, float *out, size_t n) {
    cuda_backend *cb = (cuda_backend *)be;
    if (!n) return;
    swiglu_kernel<<<(unsigned)((n + 255) / 256), 256, 0, cb->stream>>>(gate, up, out, n);
    CU_LAUNCHED(cb);
}

extern "C" void cuda_add(bk_backend *be, float *x, const float *y, size_t n) {
    cuda_backend *cb = (cuda_backend *)be;
    if (!n) return;
    add_kernel<<<(unsigned)((n + 255) / 256), 256, 0, cb->stream>>>(x, y, n);
    CU_LAUNCHED(cb);
}
