/* cuda_mmvq_iq.cu — one-token (decode-sized) products on the codebook, ternary and FP4 weight types
 * (cuda_iq.cuh) with integer dot products, as cuda_mmvq.cu does for the older ones: the activations
 * quantized once to int8 blocks of 32 (cuda_mmvq_quantize), each 32-weight group unpacked to int8
 * (grid bytes with their signs, IQ1's shifted grid times 8, ternary and FP4 values) and dotted with
 * __dp4a, one float scale per 16 weights.
 *
 * Work split: a warp owns MMVQ_ROWS rows; lane i takes groups i, i + 32, ... of each row for up to
 * IQ_NT tokens a launch (larger batches, up to MMVQ_SLICE_MAX, as several launches). Plainer than
 * cuda_mmvq.cu's loop (no GLU, no multi-matrix launch, no streamed variant): cuda_gemv.cu runs a
 * gate/up pair or a q/k/v triple as products one by one. Taken where cuda_mmvq_dec_supported says
 * so (BRISK_CUDA_ENABLE=dec_iq, cuda_plan.c); else these types run on the float GEMV (deq8). */
#include "backend/cuda/cuda_mmvq.cuh"

#define IQ_NT 8 /* tokens a launch */

template <int T, int NT>
__global__ void __launch_bounds__(MMVQ_WARPS * 32)
mmvq_iq_kernel(const uint8_t *W, size_t row_bytes, int64_t n_in, int64_t n_out, const int8_t *xq, const float2 *xds,
               int n, const float *bias, float *y, int accum) {
    BK_TRACE_SCOPE(); /* (a trace build only) */
    pdl_wait();
    const int lane = threadIdx.x % 32;
    const int64_t r0 = ((int64_t)blockIdx.x * MMVQ_WARPS + threadIdx.x / 32) * MMVQ_ROWS;
    if (r0 >= n_out) return; /* the whole warp */
    const int64_t n_groups = n_in / 32;
    const uint8_t *rows[MMVQ_ROWS];
#pragma unroll
    for (int i = 0; i < MMVQ_ROWS; i++) rows[i] = W + (r0 + i < n_out ? r0 + i : r0) * row_bytes;
    float acc[MMVQ_ROWS][NT];
#pragma unroll
    for (int i = 0; i < MMVQ_ROWS; i++)
#pragma unroll
        for (int t = 0; t < NT; t++) acc[i][t] = 0.0f;
    for (int64_t g = lane; g < n_groups; g += 32) {
        iqgroup q[MMVQ_ROWS];
#pragma unroll
        for (int i = 0; i < MMVQ_ROWS; i++) iq_group_load<T>(rows[i], g, q[i]);
#pragma unroll
        for (int t = 0; t < NT; t++) {
            if (t >= n) break;
            const int4 *xp = (const int4 *)(xq + (int64_t)t * n_in + g * 32);
            int4 a = __ldg(xp), c = __ldg(xp + 1);
            int xi[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
            float dx = __ldg(xds + (int64_t)t * n_groups + g).x;
#pragma unroll
            for (int i = 0; i < MMVQ_ROWS; i++) acc[i][t] += iq_group_dot(q[i], xi, dx);
        }
    }
    warp_store_rows(acc, lane, r0, n_out, n, bias, y, accum);
}

template <int T>
static void mmvq_iq_launch_t(cuda_backend *cb, unsigned blocks, const uint8_t *W, size_t row_bytes, int64_t n_in,
                             int64_t n_out, const int8_t *xq, const float2 *xds, int nt, const float *bias, float *y,
                             int accum) {
    if (nt == 1)
        pdl_launch(cb, mmvq_iq_kernel<T, 1>, dim3(blocks), dim3(MMVQ_WARPS * 32), 0, W, row_bytes, n_in, n_out, xq, xds,
                   nt, bias, y, accum);
    else
        pdl_launch(cb, mmvq_iq_kernel<T, IQ_NT>, dim3(blocks), dim3(MMVQ_WARPS * 32), 0, W, row_bytes, n_in, n_out, xq,
                   xds, nt, bias, y, accum);
}

bool cuda_mmvq_iq_supported(uint32_t type, int64_t n_in) { return iq_type((int)type) && n_in % 32 == 0; }

void cuda_mmvq_iq(cuda_backend *cb, const bk_weight *w, const float *bias, int n, float *y, int accum) {
    int64_t warps = (w->n_out + MMVQ_ROWS - 1) / MMVQ_ROWS;
    unsigned blocks = (unsigned)((warps + MMVQ_WARPS - 1) / MMVQ_WARPS);
    const uint8_t *W = (const uint8_t *)w->dev;
    int64_t n_groups = w->n_in / 32;
    for (int t0 = 0; t0 < n; t0 += IQ_NT) {
        int nt = n - t0 < IQ_NT ? n - t0 : IQ_NT;
        const int8_t *xq = cb->xq + (int64_t)t0 * w->n_in;
        const float2 *xds = cb->xds + (int64_t)t0 * n_groups;
        float *ys = y + (int64_t)t0 * w->n_out;
#define IQ_GO(T) \
    case T: mmvq_iq_launch_t<T>(cb, blocks, W, w->row_bytes, w->n_in, w->n_out, xq, xds, nt, bias, ys, accum); break;
        switch (w->type) {
            BK_CUDA_IQ_TYPES(IQ_GO)
        default: break;
        }
#undef IQ_GO
    }
}
