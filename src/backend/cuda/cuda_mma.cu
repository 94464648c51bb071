/* cuda_mma.cu — prefill-sized matrix products on tensor cores:
 * y (n, n_out) = x (n, n_in) W^T for batches beyond the decode kernels.
 *
 * Each block computes a 128 (rows of W) x 64 (tokens) tile of y. Per step of
 * 32 along n_in it decodes the weight tile of any supported type straight
 * into shared memory as f16 (deq8, one pass, no dequantized copy of W in
 * device memory) and converts the activations to f16 beside it; eight warps
 * each multiply a 32x32 sub-tile with WMMA (f16 inputs, f32 accumulation).
 * The accumulators go through shared memory so edges and the bias are
 * handled in one bounded store.
 *
 * Precision: inputs rounded to f16 (11 significant bits), sums in f32, as
 * llama.cpp's cuBLAS path does; tests/test_cuda_ops.c states the tolerance. */
#include <mma.h>

#include "backend/cuda/cuda_internal.cuh"

using namespace nvcuda;

#define MMA_BM 128
#define MMA_BN 64
#define MMA_BK 32
#define MMA_PAD 8 /* f16 elements of row padding against bank conflicts (keeps 16-byte rows) */

template <int T>
__global__ void __launch_bounds__(256)
mma_kernel(const uint8_t *W, size_t row_bytes, int64_t n_in, int64_t n_out, const float *x, int n,
           const float *bias, float *y, int accum) {
    /* the input tiles and the output staging are never live together: one buffer (48 KB static limit) */
    __shared__ __align__(128) union {
        struct {
            half w[MMA_BM][MMA_BK + MMA_PAD];
            half x[MMA_BN][MMA_BK + MMA_PAD];
        } in;
        float c[MMA_BN][MMA_BM + 4]; /* [token][row]: column-major C */
    } sm;
    half (*Ws)[MMA_BK + MMA_PAD] = sm.in.w;
    half (*Xs)[MMA_BK + MMA_PAD] = sm.in.x;
    float (*Cs)[MMA_BM + 4] = sm.c;
    int tid = threadIdx.x, warp = tid / 32;
    int64_t r0 = (int64_t)blockIdx.x * MMA_BM;
    int t0 = blockIdx.y * MMA_BN;
    int wm = warp % 4, wn = warp / 4; /* this warp's 32x32 sub-tile */
    wmma::fragment<wmma::accumulator, 16, 16, 16, float> acc[2][2];
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++) wmma::fill_fragment(acc[i][j], 0.0f);

    int wr = tid / 2, wk = (tid % 2) * 16;      /* weight loader: row wr, 16 elements from wk */
    int xt = tid / 4, xk = (tid % 4) * 8;       /* activation loader: token xt, 8 elements from xk */
    const uint8_t *wrow = W + (r0 + wr < n_out ? r0 + wr : n_out - 1) * row_bytes;
    bool w_ok = r0 + wr < n_out, x_ok = t0 + xt < n;
    const float *xrow = x + (int64_t)(x_ok ? t0 + xt : 0) * n_in;

    for (int64_t k0 = 0; k0 < n_in; k0 += MMA_BK) {
#pragma unroll
        for (int h = 0; h < 2; h++) {
            float v[8];
            if (w_ok) deq8<T>(wrow, k0 + wk + 8 * h, v);
            else
#pragma unroll
                for (int i = 0; i < 8; i++) v[i] = 0.0f;
#pragma unroll
            for (int i = 0; i < 8; i += 2)
                *(half2 *)&Ws[wr][wk + 8 * h + i] = __floats2half2_rn(v[i], v[i + 1]);
        }
        {
            float4 a = make_float4(0, 0, 0, 0), b = a;
            if (x_ok) {
                const float4 *xp = (const float4 *)(xrow + k0 + xk);
                a = __ldg(xp);
                b = __ldg(xp + 1);
            }
            half2 *d = (half2 *)&Xs[xt][xk];
            d[0] = __floats2half2_rn(a.x, a.y);
            d[1] = __floats2half2_rn(a.z, a.w);
            d[2] = __floats2half2_rn(b.x, b.y);
            d[3] = __floats2half2_rn(b.z, b.w);
        }
        __syncthreads();
#pragma unroll
        for (int kk = 0; kk < MMA_BK; kk += 16) {
            wmma::fragment<wmma::matrix_a, 16, 16, 16, half, wmma::row_major> fa[2];
            wmma::fragment<wmma::matrix_b, 16, 16, 16, half, wmma::col_major> fb[2];
#pragma unroll
            for (int i = 0; i < 2; i++) wmma::load_matrix_sync(fa[i], &Ws[wm * 32 + 16 * i][kk], MMA_BK + MMA_PAD);
#pragma unroll
            for (int j = 0; j < 2; j++) wmma::load_matrix_sync(fb[j], &Xs[wn * 32 + 16 * j][kk], MMA_BK + MMA_PAD);
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int j = 0; j < 2; j++) wmma::mma_sync(acc[i][j], fa[i], fb[j], acc[i][j]);
        }
        __syncthreads();
    }
#pragma unroll
    for (int i = 0; i < 2; i++)
#pragma unroll
        for (int j = 0; j < 2; j++)
            wmma::store_matrix_sync(&Cs[wn * 32 + 16 * j][wm * 32 + 16 * i], acc[i][j], MMA_BM + 4,
                                    wmma::mem_col_major);
    __syncthreads();
    /* y[t][r]: consecutive threads take consecutive rows (coalesced along n_out) */
    for (int e = tid; e < MMA_BM * MMA_BN; e += 256) {
        int t = e / MMA_BM, r = e % MMA_BM;
        if (t0 + t < n && r0 + r < n_out) {
            float *o = y + (int64_t)(t0 + t) * n_out + r0 + r;
            *o = (accum ? *o : 0.0f) + Cs[t][r] + (bias ? bias[r0 + r] : 0.0f);
        }
    }
}

bool cuda_mma_supported(uint32_t type, int64_t n_in) {
    return cuda_type_supported(type) && n_in % MMA_BK == 0;
}

/* Batches over GEMV_MAX_TOK tokens, unless BRISK_CUDA_DISABLE=mma (cuBLAS first where it takes them). */
bool cuda_mma_should_use(const cuda_backend *cb, uint32_t type, int64_t n_in, int n) {
    return n > GEMV_MAX_TOK && !cb->mma_off && cuda_mma_supported(type, n_in);
}

void cuda_mma(cuda_backend *cb, const bk_weight *w, const float *bias, const float *x, int n, float *y, int accum) {
    CU_COUNT(cb, CU_PATH_MMA);
    dim3 grid((unsigned)((w->n_out + MMA_BM - 1) / MMA_BM), (unsigned)((n + MMA_BN - 1) / MMA_BN));
    const uint8_t *W = (const uint8_t *)w->dev;
#define X(T, ...)                                                                                         \
    if (w->type == T) {                                                                                   \
        mma_kernel<T><<<grid, 256, 0, cb->stream>>>(W, w->row_bytes, w->n_in, w->n_out, x, n, bias, y, accum); \
        return;                                                                                           \
    }
    BK_CUDA_TYPES(X, )
#undef X
}
