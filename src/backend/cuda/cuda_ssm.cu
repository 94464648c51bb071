/* cuda_ssm.cu — Gated DeltaNet (qwen35) on the GPU: the short causal conv
 * with its carried inputs, and the gated delta rule with its fp32 state.
 *
 * Both walk the batch's entries in order (the recurrent form), so entries
 * of one sequence see each other's updates and entries of different
 * sequences, interleaved or not, touch different state slots. The sequence
 * of each entry (its state slot) is read from device memory: the step's
 * upload inside a step (a replayed graph reads that step's sequences), else
 * the op's own staging.
 *
 * Delta rule: row r (a value dim) of a head's state S evolves on its own:
 *   S_r *= exp(g);  S_r += beta (v_r - S_r . k) k;  o_r = S_r . q / sqrt(d)
 * so a warp owns one row of one head and keeps it in registers across the
 * entries (d / 32 floats per lane), loading it once per run of a sequence
 * and storing it back when the sequence changes and at the end. Each warp
 * L2-normalises q and k itself (2d floats from L1) rather than syncing with
 * its block. Decode is this one fused kernel; prefill runs the same kernel
 * token by token (correct, not the chunked tensor-core form). */
#include "backend/cuda/cuda_internal.cuh"

#define CONV_THREADS 128
#define GD_WARPS 4 /* state rows (warps) per block */

/* The entries' sequences on the device, or NULL after recording an error. */
static const int32_t *seq_dev(cuda_backend *cb, const int32_t *seq, int n) {
    if (cb->step_on) return cb->st_seq;
    return (const int32_t *)cuda_upload(cb, META_SEQ, seq, (size_t)n * sizeof(int32_t));
}

/* ---- ssm_conv: one thread per channel, entries in order ----
 * The sum in the CPU's order with separate roundings (it is built without
 * contraction), so only the SiLU's exp differs. */
__global__ void __launch_bounds__(CONV_THREADS)
ssm_conv_kernel(const float *x, const float *w, float *conv, const int32_t *seq, int n, int nc, int dc, float *out) {
    int c = blockIdx.x * CONV_THREADS + threadIdx.x;
    if (c >= nc) return;
    const float *wc = w + (size_t)c * dc;
    size_t slot_stride = (size_t)(dc - 1) * nc;
    for (int t = 0; t < n; t++) {
        float *st = conv + (size_t)seq[t] * slot_stride + c; /* st[i * nc]: the i-th oldest input */
        float xt = x[(size_t)t * nc + c], s = 0.0f;
        for (int i = 0; i < dc - 1; i++) s = __fadd_rn(s, __fmul_rn(st[(size_t)i * nc], wc[i]));
        s = __fadd_rn(s, __fmul_rn(xt, wc[dc - 1]));
        for (int i = 0; i + 1 < dc - 1; i++) st[(size_t)i * nc] = st[(size_t)(i + 1) * nc];
        if (dc > 1) st[(size_t)(dc - 2) * nc] = xt;
        out[(size_t)t * nc + c] = s / (1.0f + expf(-s));
    }
}

extern "C" void cuda_ssm_conv(bk_backend *be, const float *x, const bk_weight *w, float *conv, const int32_t *seq,
                              int n, int channels, int d_conv, float *out) {
    cuda_backend *cb = (cuda_backend *)be;
    if (n <= 0 || channels <= 0) return;
    if (w->type != QT_F32 || d_conv < 1) {
        cuda_set_error(cb, bk_fail(BRISK_ERR_UNSUPPORTED, "cuda ssm_conv: %s must be f32", w->name));
        return;
    }
    const int32_t *d_seq = seq_dev(cb, seq, n);
    if (!d_seq) return;
    ssm_conv_kernel<<<(unsigned)((channels + CONV_THREADS - 1) / CONV_THREADS), CONV_THREADS, 0, cb->stream>>>(
        x, (const float *)w->dev, conv, d_seq, n, channels, d_conv, out);
    CU_LAUNCHED(cb);
}

/* ---- gated_delta: warp = (head, state row); lane holds elements lane + 32 j, j < J ---- */
__device__ __forceinline__ float warp_sum_f(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}
__device__ __forceinline__ double warp_sum_d(double v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* x * rsqrt(sum x^2 + eps), the sum in double: the HF reference's l2norm, as cpu_ssm.c */
template <int J> __device__ __forceinline__ void l2norm_lanes(float (&x)[J], float eps) {
    double s = 0;
#pragma unroll
    for (int j = 0; j < J; j++) s += (double)(x[j] * x[j]);
    s = warp_sum_d(s);
    float scale = 1.0f / sqrtf((float)s + eps);
#pragma unroll
    for (int j = 0; j < J; j++) x[j] *= scale;
}

template <int J>
__global__ void __launch_bounds__(GD_WARPS * 32)
gated_delta_kernel(const float *qkv, const float *b, const float *a, const float *a_bias, const float *a_scale,
                   float *ssm, const int32_t *seq, int n, int nk, int nv, int d, float eps, float *out) {
    const int h = blockIdx.y, lane = threadIdx.x % 32;
    const int r = blockIdx.x * GD_WARPS + threadIdx.x / 32;
    if (r >= d) return;
    const int hk = h % nk; /* tiled: value head h reads key head h mod n_k */
    const size_t width = (size_t)(2 * nk + nv) * d, dd = (size_t)d * d;
    const float scale = 1.0f / sqrtf((float)d);
    float S[J];
    float *row_s = NULL; /* S[r, :] of the current sequence in memory */
    int cur = -1;
    for (int t = 0; t < n; t++) {
        int s = seq[t];
        if (s != cur) {
            if (row_s)
#pragma unroll
                for (int j = 0; j < J; j++)
                    if (lane + 32 * j < d) row_s[lane + 32 * j] = S[j];
            row_s = ssm + ((size_t)s * nv + h) * dd + (size_t)r * d;
#pragma unroll
            for (int j = 0; j < J; j++) S[j] = lane + 32 * j < d ? row_s[lane + 32 * j] : 0.0f;
            cur = s;
        }
        const float *row = qkv + (size_t)t * width;
        const float *qp = row + (size_t)hk * d, *kp = row + (size_t)(nk + hk) * d;
        float q[J], kk[J];
#pragma unroll
        for (int j = 0; j < J; j++) {
            int i = lane + 32 * j;
            q[j] = i < d ? qp[i] : 0.0f;
            kk[j] = i < d ? kp[i] : 0.0f;
        }
        l2norm_lanes<J>(q, eps);
        l2norm_lanes<J>(kk, eps);
        float beta = 1.0f / (1.0f + expf(-b[(size_t)t * nv + h]));
        float ab = a[(size_t)t * nv + h] + a_bias[h];
        float sp = ab > 20.0f ? ab : logf(1.0f + expf(ab));
        float decay = expf(sp * a_scale[h]);
        float sk = 0.0f;
#pragma unroll
        for (int j = 0; j < J; j++) {
            S[j] *= decay;
            sk = fmaf(S[j], kk[j], sk);
        }
        sk = warp_sum_f(sk);
        float delta = (row[(size_t)(2 * nk + h) * d + r] - sk) * beta;
        float o = 0.0f;
#pragma unroll
        for (int j = 0; j < J; j++) {
            S[j] = fmaf(kk[j], delta, S[j]);
            o = fmaf(S[j], q[j], o);
        }
        o = warp_sum_f(o);
        if (lane == 0) out[(size_t)t * nv * d + (size_t)h * d + r] = o * scale;
    }
    if (row_s)
#pragma unroll
        for (int j = 0; j < J; j++)
            if (lane + 32 * j < d) row_s[lane + 32 * j] = S[j];
}

extern "C" void cuda_gated_delta(bk_backend *be, const float *qkv, const float *b, const float *a,
                                 const bk_weight *a_bias, const bk_weight *a_scale, float *ssm, const int32_t *seq,
                                 int n, int n_k_heads, int n_v_heads, int d, float eps, float *out) {
    cuda_backend *cb = (cuda_backend *)be;
    if (n <= 0) return;
    if (d < 1 || d > 512 || n_k_heads < 1 || n_v_heads < 1 || n_v_heads % n_k_heads) {
        cuda_set_error(cb, bk_fail(BRISK_ERR_UNSUPPORTED, "cuda gated_delta: head size %d, %d key / %d value heads",
                                   d, n_k_heads, n_v_heads));
        return;
    }
    const int32_t *d_seq = seq_dev(cb, seq, n);
    if (!d_seq) return;
    dim3 grid((unsigned)((d + GD_WARPS - 1) / GD_WARPS), (unsigned)n_v_heads);
    const float *ab = (const float *)a_bias->dev, *as = (const float *)a_scale->dev;
#define GD_LAUNCH(J)                                                                                          \
    gated_delta_kernel<J><<<grid, GD_WARPS * 32, 0, cb->stream>>>(qkv, b, a, ab, as, ssm, d_seq, n, n_k_heads, \
                                                                  n_v_heads, d, eps, out)
    if (d <= 32) GD_LAUNCH(1);
    else if (d <= 64) GD_LAUNCH(2);
    else if (d <= 128) GD_LAUNCH(4);
    else if (d <= 256) GD_LAUNCH(8);
    else GD_LAUNCH(16);
#undef GD_LAUNCH
    CU_LAUNCHED(cb);
}
