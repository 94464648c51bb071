/* cuda_norm_rope.cu — RMSNorm and rotary embeddings (NORM, NEOX, YaRN),
 * computed as the CPU reference does: sums of squares in double, rotation
 * angles by repeated multiplication (ggml's order). */
#include <math.h>

#include "backend/cuda/cuda_internal.cuh"

__device__ __forceinline__ double warp_sum_d(double s) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

/* One warp per row: rows of up to ~1K (head norms, small models). */
__global__ void rms_norm_warp_kernel(const float *x, const float *w, float *y, int n_rows, int dim, float eps) {
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= n_rows) return;
    const float *xr = x + (int64_t)row * dim;
    float *yr = y + (int64_t)row * dim;
    double s = 0;
    for (int i = lane; i < dim; i += 32) s += (double)(xr[i] * xr[i]);
    s = warp_sum_d(s);
    float scale = 1.0f / sqrtf((float)(s / dim) + eps);
    for (int i = lane; i < dim; i += 32) yr[i] = (xr[i] * scale) * w[i];
}

/* One block per row: wide rows (the model width). */
__global__ void rms_norm_block_kernel(const float *x, const float *w, float *y, int dim, float eps) {
    __shared__ double part[32];
    const float *xr = x + (int64_t)blockIdx.x * dim;
    float *yr = y + (int64_t)blockIdx.x * dim;
    double s = 0;
    for (int i = threadIdx.x; i < dim; i += blockDim.x) s += (double)(xr[i] * xr[i]);
    s = warp_sum_d(s);
    if (threadIdx.x % 32 == 0) part[threadIdx.x / 32] = s;
    __syncthreads();
    if (threadIdx.x < 32) {
        s = threadIdx.x < blockDim.x / 32 ? part[threadIdx.x] : 0.0;
        s = warp_sum_d(s);
        if (threadIdx.x == 0) part[0] = s;
    }
    __syncthreads();
    float scale = 1.0f / sqrtf((float)(part[0] / dim) + eps);
    for (int i = threadIdx.x; i < dim; i += blockDim.x) yr[i] = (xr[i] * scale) * w[i];
}

extern "C" void cuda_rms_norm(bk_backend *be, const float *x, const bk_weight *w, float *y, int n_rows, int dim,
                              float eps) {
    cuda_backend *cb = (cuda_backend *)be;
    if (n_rows <= 0) return;
    const float *wd = (const float *)w->dev;
    if (dim <= 1024)
        rms_norm_warp_kernel<<<(n_rows + 7) / 8, 256, 0, cb->stream>>>(x, wd, y, n_rows, dim, eps);
    else
        rms_norm_block_kernel<<<n_rows, 512, 0, cb->stream>>>(x, wd, y, dim, eps);
    CU_LAUNCHED(cb);
}

/* ---- rope ---- */
typedef struct rope_args {
    int n_rot, neox, n_heads, head_dim;
    float theta_scale, freq_scale, ext_factor, attn_factor, corr0, corr1, log_mscale;
} rope_args;

/* One thread per (token, rotated pair); it rotates that pair in every head. */
__global__ void rope_kernel(float *x, int n, const int32_t *pos, const float *ff, rope_args a) {
    int half = a.n_rot / 2;
    int64_t idx = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (idx >= (int64_t)n * half) return;
    int t = (int)(idx / half), i = (int)(idx % half), i0 = 2 * i;
    float theta = (float)pos[t];
    for (int k = 0; k < i; k++) theta *= a.theta_scale;
    float f = ff ? ff[i] : 1.0f;
    /* _rn intrinsics: no fused multiply-adds, so the angle rounds as on the CPU */
    float extrap = __fdiv_rn(theta, f), interp = __fmul_rn(a.freq_scale, extrap), th = interp;
    float mscale = a.attn_factor;
    if (a.ext_factor != 0.0f) {
        float y = (i0 / 2 - a.corr0) / fmaxf(0.001f, a.corr1 - a.corr0);
        float ramp = 1.0f - fminf(1.0f, fmaxf(0.0f, y));
        float mix = __fmul_rn(ramp, a.ext_factor);
        th = __fadd_rn(__fmul_rn(interp, 1 - mix), __fmul_rn(extrap, mix));
        mscale *= a.log_mscale;
    }
    float c = __fmul_rn(cosf(th), mscale), s = __fmul_rn(sinf(th), mscale);
    int ia = a.neox ? i : i0, ib = a.neox ? i + half : i0 + 1;
    for (int h = 0; h < a.n_heads; h++) {
        float *v = x + ((int64_t)t * a.n_heads + h) * a.head_dim;
        float x0 = v[ia], x1 = v[ib];
        v[ia] = __fsub_rn(__fmul_rn(x0, c), __fmul_rn(x1, s));
        v[ib] = __fadd_rn(__fmul_rn(x0, s), __fmul_rn(x1, c));
    }
}

extern "C" void cuda_rope(bk_backend *be, float *x, int n, int n_heads, int head_dim, const int32_t *pos,
                          const bk_rope_params *rp) {
    cuda_backend *cb = (cuda_backend *)be;
    if (n <= 0) return;
    rope_args a;
    a.n_rot = rp->n_rot;
    a.neox = rp->mode == BK_ROPE_NEOX;
    a.n_heads = n_heads;
    a.head_dim = head_dim;
    a.theta_scale = powf(rp->freq_base, -2.0f / (float)rp->n_rot);
    a.freq_scale = rp->freq_scale;
    a.ext_factor = rp->ext_factor;
    a.attn_factor = rp->attn_factor;
    /* YaRN correction dims, as the CPU computes them */
    float nr = (float)rp->n_rot, base = rp->freq_base;
    float start = floorf(nr * logf((float)rp->n_ctx_orig / (rp->beta_fast * 2.0f * (float)M_PI)) / (2.0f * logf(base)));
    float end = ceilf(nr * logf((float)rp->n_ctx_orig / (rp->beta_slow * 2.0f * (float)M_PI)) / (2.0f * logf(base)));
    a.corr0 = fmaxf(0.0f, start);
    a.corr1 = fminf(nr - 1, end);
    a.log_mscale = 1.0f + 0.1f * logf(1.0f / rp->freq_scale);
    const int32_t *d_pos = cb->step_on ? cb->st_pos
                                       : (const int32_t *)cuda_upload(cb, META_ROPE_POS, pos, (size_t)n * sizeof(int32_t));
    if (!d_pos) return;
    const float *d_ff = NULL;
    if (rp->freq_factors) {
        d_ff = (const float *)cuda_upload(cb, META_ROPE_FREQ, rp->freq_factors, (size_t)(rp->n_rot / 2) * sizeof(float));
        if (!d_ff) return;
    }
    int64_t total = (int64_t)n * (rp->n_rot / 2);
    rope_kernel<<<(unsigned)((total + 255) / 256), 256, 0, cb->stream>>>(x, n, d_pos, d_ff, a);
    CU_LAUNCHED(cb);
}
