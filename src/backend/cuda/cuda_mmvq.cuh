/* cuda_mmvq.cuh — the integer-dot decode product's device code (the warp's loop over its rows),
 * shared by cuda_mmvq.cu (dense weights) and cuda_moe.cu (one token's experts). See cuda_mmvq.cu
 * for the method. */
#ifndef BK_CUDA_MMVQ_CUH
#define BK_CUDA_MMVQ_CUH
#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/cuda_pdl.cuh"

#define MMVQ_WARPS 4
#define MMVQ_ROWS 2

/* Groups each lane loads before it uses any (a warp keeps U * R groups of loads in flight;
 * a 4096-wide row is 128 groups, 4 per lane). Q6_K's unpacking needs many registers: two groups
 * (one for the LM head, see cuda_mmvq) keep its occupancy; dev/kernels/mmvq_lab.cu on the H200:
 * Q4_K 4096x4096 9.5 -> 6.9 us from U = 1 to 4; Q6_K 4096x12288 31.1 / 25.7 / 49.0 us at U = 1 / 2 / 4,
 * the 151936-row LM head 218 / 231 / 401 us. */
template <int T, int NT> struct mmvq_unroll { /* Q4_K: pairs of groups */
    static constexpr int U = T == QT_Q6_K ? (NT == 1 ? 2 : 1) : T == QT_Q4_K ? (NT == 1 ? 2 : 1)
                                                              : NT == 1 ? 4 : NT <= 4 ? 2 : 1;
};

/* ---- the unit a lane takes per row in the one-token products that keep their activations in
 * registers (cuda_mmvs.cu, the MoE down + combine of cuda_moe.cu): the groups whose weight bytes
 * it loads together ---- */
/* Q4_K, Q5_K: a pair of groups (the low and high nibbles of 32 bytes); Q6_K: a quad (half a
 * block); Q8_0, Q4_0, IQ4_XS, IQ4_NL: one group. */
template <int T> struct qunit {
    static constexpr int W = T == QT_Q4_K || T == QT_Q5_K ? 64 : T == QT_Q6_K ? 128 : 32; /* weights */
    static constexpr int XW = W / 4;                                       /* activation words */
    static constexpr int G = W / 32;                                       /* groups */
    /* units per quant block: the 256-weight blocks of the K-quants and IQ4_XS hold several */
    static constexpr int UPB = T == QT_Q8_0 || T == QT_Q4_0 || T == QT_IQ4_NL ? 1 : 256 / W;
};

template <int T, bool SH>
__device__ __forceinline__ void qunit_load_x(const int8_t *xq, const float2 *xds, int64_t u, int *xw, float2 *xd) {
    constexpr int W = qunit<T>::W;
    const int4 *xp = (const int4 *)(xq + u * W);
#pragma unroll
    for (int k = 0; k < W / 16; k++) {
        int4 a = ld_ro<SH>(xp + k);
        xw[4 * k] = a.x;
        xw[4 * k + 1] = a.y;
        xw[4 * k + 2] = a.z;
        xw[4 * k + 3] = a.w;
    }
#pragma unroll
    for (int k = 0; k < W / 32; k++) xd[k] = ld_ro<SH>(xds + u * (W / 32) + k);
}

/* SH: the row sits in shared memory (plain loads), else global (read-only loads) */
template <int T, bool SH>
__device__ __forceinline__ float qunit_dot(const uint8_t *row, int64_t u, const int *xw, const float2 *xd) {
    if constexpr (T == QT_Q4_K || T == QT_Q5_K) {
        wgroup lo, hi;
        if constexpr (T == QT_Q4_K) group_load_q4k_pair<SH>(row, u, lo, hi);
        else group_load_q5k_pair<SH>(row, u, lo, hi);
        return group_dot(lo, xw, xd[0]) + group_dot(hi, xw + 8, xd[1]);
    } else if constexpr (T == QT_Q6_K) {
        wgroup q[4];
        group_load_q6k_quad<SH>(row, u, q);
        float s = 0.0f;
#pragma unroll
        for (int k = 0; k < 4; k++) s += group_dot(q[k], xw + 8 * k, xd[k]);
        return s;
    } else {
        wgroup q;
        group_load<T, SH>(row, u, q);
        return group_dot(q, xw, xd[0]);
    }
}

/* The first time only: wait for the kernel before (its outputs are the activations) and let the next one launch. */
__device__ __forceinline__ void pdl_wait_once(bool &waited) {
    if (waited) return;
    pdl_wait();
    waited = true;
}

/* R: weight rows per warp (cuda_mmvq.cu: MMVQ_ROWS; the expert products of cuda_moe.cu take more,
 * so that one wave of warps covers a layer's active experts). GLU: the warp's rows are R / 2 rows
 * r.. of the gate matrix W, each followed by the same row of the up matrix W2, and it stores
 * silu(gate) * up (the FFN's SwiGLU, as swiglu_kernel computes it) to y[t, r..].
 * Warps stride over the rows (a grid smaller than the matrix makes the kernel persistent;
 * dev/kernels/mmvq_lab.cu times both). */
template <int T, int NT, bool GLU, int U, bool Q6Q, int R = MMVQ_ROWS>
__device__ __forceinline__ void mmvq_rows(const uint8_t *W, const uint8_t *W2, size_t row_bytes, int64_t n_in,
                                          int64_t n_out, const int8_t *xq, const float2 *xds, int n, const float *bias,
                                          float *y, int accum, int64_t wid0, int64_t wid_stride) {
    /* The weights do not depend on the kernel before this one: the first loads are issued before
     * pdl_wait, so under a programmatic launch they stream in while that kernel finishes. */
    bool waited = false;
    int lane = threadIdx.x % 32;
    int64_t n_groups = n_in / 32;
    for (int64_t wid = wid0;; wid += wid_stride) {
        static_assert(!GLU || R % 2 == 0, "GLU rows come in (gate, up) pairs");
        int64_t r0 = wid * (GLU ? R / 2 : R);
        if (r0 >= n_out) return;
        const uint8_t *rows[R];
        if (GLU) {
#pragma unroll
            for (int i = 0; i < R / 2; i++) {
                int64_t r = r0 + i < n_out ? r0 + i : r0;
                rows[2 * i] = W + r * row_bytes;
                rows[2 * i + 1] = W2 + r * row_bytes;
            }
        } else {
#pragma unroll
            for (int i = 0; i < R; i++) rows[i] = W + (r0 + i < n_out ? r0 + i : r0) * row_bytes;
        }
        float acc[R][NT];
#pragma unroll
        for (int i = 0; i < R; i++)
#pragma unroll
            for (int t = 0; t < NT; t++) acc[i][t] = 0.0f;
        if constexpr (T == QT_Q4_K) { /* lanes take pairs of groups that share their bytes (group_load_q4k_pair) */
            int64_t n_pairs = n_groups / 2;
            for (int64_t p0 = lane; p0 < n_pairs; p0 += 32 * U) {
                wgroup lo[U][R], hi[U][R];
#pragma unroll
                for (int u = 0; u < U; u++)
                    if (p0 + 32 * u < n_pairs)
#pragma unroll
                        for (int i = 0; i < R; i++) group_load_q4k_pair(rows[i], p0 + 32 * u, lo[u][i], hi[u][i]);
                pdl_wait_once(waited);
#pragma unroll
                for (int u = 0; u < U; u++) {
                    int64_t g = 2 * (p0 + 32 * u);
                    if (g >= n_groups) break;
#pragma unroll
                    for (int t = 0; t < NT; t++) {
                        if (t >= n) break;
                        const int4 *xp = (const int4 *)(xq + (int64_t)t * n_in + g * 32);
                        int4 a0 = __ldg(xp), a1 = __ldg(xp + 1), b0 = __ldg(xp + 2), b1 = __ldg(xp + 3);
                        int xl[8] = {a0.x, a0.y, a0.z, a0.w, a1.x, a1.y, a1.z, a1.w};
                        int xh[8] = {b0.x, b0.y, b0.z, b0.w, b1.x, b1.y, b1.z, b1.w};
                        float4 ds = __ldg((const float4 *)(xds + (int64_t)t * n_groups + g));
#pragma unroll
                        for (int i = 0; i < R; i++)
                            acc[i][t] += group_dot(lo[u][i], xl, make_float2(ds.x, ds.y)) +
                                         group_dot(hi[u][i], xh, make_float2(ds.z, ds.w));
                    }
                }
            }
        } else if constexpr (T == QT_Q6_K && Q6Q) { /* lanes take quads of groups that share their bytes */
            int64_t n_quads = n_groups / 4;
            for (int64_t h = lane; h < n_quads; h += 32) {
                wgroup q[R][4];
#pragma unroll
                for (int i = 0; i < R; i++) group_load_q6k_quad(rows[i], h, q[i]);
                pdl_wait_once(waited);
                int64_t g = 4 * h;
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    if (t >= n) break;
                    const int4 *xp = (const int4 *)(xq + (int64_t)t * n_in + g * 32);
                    const float4 *dp = (const float4 *)(xds + (int64_t)t * n_groups + g);
                    float4 d01 = __ldg(dp), d23 = __ldg(dp + 1);
                    float2 ds[4] = {make_float2(d01.x, d01.y), make_float2(d01.z, d01.w), make_float2(d23.x, d23.y),
                                    make_float2(d23.z, d23.w)};
#pragma unroll
                    for (int k = 0; k < 4; k++) {
                        int4 a = __ldg(xp + 2 * k), c = __ldg(xp + 2 * k + 1);
                        int xi[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
#pragma unroll
                        for (int i = 0; i < R; i++) acc[i][t] += group_dot(q[i][k], xi, ds[k]);
                    }
                }
            }
        } else
        for (int64_t g0 = lane; g0 < n_groups; g0 += 32 * U) {
            wgroup q[U][R];
#pragma unroll
            for (int u = 0; u < U; u++)
                if (g0 + 32 * u < n_groups)
#pragma unroll
                    for (int i = 0; i < R; i++) group_load<T>(rows[i], g0 + 32 * u, q[u][i]);
            pdl_wait_once(waited);
#pragma unroll
            for (int u = 0; u < U; u++) {
                int64_t g = g0 + 32 * u;
                if (g >= n_groups) break;
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    if (t >= n) break;
                    const int4 *xp = (const int4 *)(xq + (int64_t)t * n_in + g * 32);
                    int4 a = __ldg(xp), c = __ldg(xp + 1);
                    int xi[8] = {a.x, a.y, a.z, a.w, c.x, c.y, c.z, c.w};
                    float2 ds = __ldg(xds + (int64_t)t * n_groups + g);
#pragma unroll
                    for (int i = 0; i < R; i++) acc[i][t] += group_dot(q[u][i], xi, ds);
                }
            }
        }
        pdl_wait_once(waited); /* a lane without groups still stores (and reads y when accum) */
        if (GLU) {
#pragma unroll
            for (int i = 0; i < R / 2; i++) {
                if (r0 + i >= n_out) break;
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    if (t >= n) break;
                    float g = acc[2 * i][t], u = acc[2 * i + 1][t];
#pragma unroll
                    for (int o = 16; o > 0; o >>= 1) {
                        g += __shfl_xor_sync(0xffffffffu, g, o);
                        u += __shfl_xor_sync(0xffffffffu, u, o);
                    }
                    if (lane == 0) y[(int64_t)t * n_out + r0 + i] = silu_f(g) * u;
                }
            }
        } else {
            warp_store_rows(acc, lane, r0, n_out, n, bias, y, accum);
        }
    }
}

/* cuda_mmvs.cu: one token's products streamed through shared memory (see there). */
#define MMVS_MATS 3
typedef struct mmvs_mats {
    const uint8_t *W[MMVS_MATS];
    const float *bias[MMVS_MATS];
    float *y[MMVS_MATS];
    int64_t rend[MMVS_MATS]; /* cumulative row ends: matrix m holds rows [rend[m - 1], rend[m]) */
    const uint8_t *W2;       /* GLU: the up matrix beside W[0] (the gate) */
    int count;
} mmvs_mats;
/* Appends a matrix of n_out rows to mm (its rows follow the ones already there). */
static inline void mmvs_add(mmvs_mats &mm, const uint8_t *W, const float *bias, float *y, int64_t n_out) {
    int m = mm.count++;
    mm.W[m] = W;
    mm.bias[m] = bias;
    mm.y[m] = y;
    mm.rend[m] = (m > 0 ? mm.rend[m - 1] : 0) + n_out;
}
/* cuda_mmvs.cu: one token's products of mm (GLU: the gate/up pair) on the quantized activations in
 * cb->xq, the weights streamed by the bulk-copy engine; false with nothing launched when it does not
 * take the shape (the caller runs cuda_mmvq's kernel). */
bool cuda_mmvs(cuda_backend *cb, uint32_t type, bool glu, const mmvs_mats &mm, size_t row_bytes, int64_t n_in,
               int accum);
/* cuda_mmvf.cu: the same for float weights (F16, BF16, F32) on float activations x (see there;
 * BRISK_CUDA_ENABLE=mmvf). */
bool cuda_mmvf(cuda_backend *cb, uint32_t type, bool glu, const mmvs_mats &mm, size_t row_bytes, int64_t n_in,
               const float *x, int accum);
/* cuda_mmvf.cu: whether one token's product on a matrix of this type belongs to cuda_mmvf (the shape
 * is cuda_mmvf's to refuse); cuda_mmvf_run: the first run of w[0..n_w) of one type, row size and width
 * (up to MMVS_MATS; with up, the gate/up pair of a SwiGLU into y[0]) as one launch. Returns the
 * matrices it took (0: none, nothing launched). */
bool cuda_mmvf_should_use(const cuda_backend *cb, uint32_t type, int n);
int cuda_mmvf_run(cuda_backend *cb, int n_w, const bk_weight *const *w, const bk_weight *const *bias, const float *x,
                  float *const *y, int accum, const bk_weight *up);

#endif
