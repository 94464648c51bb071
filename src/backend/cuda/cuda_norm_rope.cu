/* cuda_norm_rope.cu — RMSNorm and rotary embeddings (NORM, NEOX, YaRN),
 * computed as the CPU reference does: sums of squares in double, rotation
 * angles by repeated multiplication (ggml's order). */
#include <math.h>

#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/cuda_pdl.cuh"


/* With Q, the normalized values are also quantized in groups of 32 for the integer-dot products
 * (xq, xds as quantize_q8_1_kernel writes them; dim % 32 == 0): the product that reads y next
 * skips its own quantize launch (cuda_mmvq_prepare). */
template <bool Q>
__device__ __forceinline__ void norm_store(float v, float *yr, int i, int lane, int8_t *xq, float2 *xds,
                                           int64_t row, int dim) {
    yr[i] = v;
    if (Q) q8_1_store_lane(v, row * dim + i, lane, xq, xds);
}

/* One warp per row: rows of up to ~1K (head norms, small models). */
template <bool Q>
__global__ void rms_norm_warp_kernel(const float *x, const float *w, float *y, int n_rows, int dim, float eps,
                                     int8_t *xq, float2 *xds) {
    BK_TRACE_SCOPE();
    pdl_wait();
    int row = blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32, lane = threadIdx.x % 32;
    if (row >= n_rows) return;
    const float *xr = x + (int64_t)row * dim;
    float *yr = y + (int64_t)row * dim;
    float scale = warp_rms_scale(xr, dim, eps);
    for (int i = lane; i < dim; i += 32) norm_store<Q>((xr[i] * scale) * w[i], yr, i, lane, xq, xds, row, dim);
}

/* One block per row: wide rows (the model width). With Q, blockDim and dim are multiples of 32,
 * so each warp's step covers one whole group of 32. Rows of up to NORM_EPT * blockDim values are
 * read once into registers, all loads issued before the first use (a decode step's single block
 * otherwise waits one memory latency per loop step, twice). */
#define NORM_EPT 8
/* With H (rows held in registers only), the normalized row is also converted for the f16 batched
 * products (cuda_mmqh.cu: its fragment order and power-of-two scale, mmqh_row_scale), so that the
 * product that reads y next skips its conversion launch. */
template <bool Q, bool H>
__global__ void __launch_bounds__(1024)
rms_norm_block_kernel(const float *x, const float *w, float *y, int dim, float eps, int8_t *xq, float2 *xds,
                      __half *xh, float *xmul) {
    BK_TRACE_SCOPE();
    __shared__ double part[32];
    __shared__ float hmax[32];
    const float *xr = x + (int64_t)blockIdx.x * dim;
    float *yr = y + (int64_t)blockIdx.x * dim;
    int nb = blockDim.x, tid = threadIdx.x;
    bool regs = dim <= NORM_EPT * nb;
    float v[NORM_EPT], wv[NORM_EPT];
    double s = 0;
    if (regs) { /* the weights (constant) load before pdl_wait, the row after */
#pragma unroll
        for (int k = 0; k < NORM_EPT; k++) {
            int i = tid + k * nb;
            wv[k] = i < dim ? w[i] : 0.0f;
        }
        pdl_wait();
#pragma unroll
        for (int k = 0; k < NORM_EPT; k++) {
            int i = tid + k * nb;
            v[k] = i < dim ? xr[i] : 0.0f;
        }
#pragma unroll
        for (int k = 0; k < NORM_EPT; k++) s += (double)(v[k] * v[k]);
    } else {
        pdl_wait();
        for (int i = tid; i < dim; i += nb) s += (double)(xr[i] * xr[i]);
    }
    s = warp_sum_d(s);
    if (tid % 32 == 0) part[tid / 32] = s;
    __syncthreads();
    if (tid < 32) {
        s = tid < nb / 32 ? part[tid] : 0.0;
        s = warp_sum_d(s);
        if (tid == 0) part[0] = s;
    }
    __syncthreads();
    float scale = 1.0f / sqrtf((float)(part[0] / dim) + eps);
    if (regs) {
        float mx = 0.0f;
#pragma unroll
        for (int k = 0; k < NORM_EPT; k++) {
            int i = tid + k * nb; /* uniform over a warp: dim and nb are multiples of 32 when Q */
            v[k] = (v[k] * scale) * wv[k];
            if (i < dim) norm_store<Q>(v[k], yr, i, tid % 32, xq, xds, blockIdx.x, dim);
            if (H && i < dim) mx = fmaxf(mx, fabsf(v[k]));
        }
        if constexpr (H) {
            const float sc = mmqh_row_scale(block_max(mx, hmax), xmul + blockIdx.x);
            __half *hr = xh + (int64_t)blockIdx.x * dim;
#pragma unroll
            for (int k = 0; k < NORM_EPT; k++) {
                int i = tid + k * nb;
                if (i < dim) hr[mmqh_perm(i)] = __float2half_rn(v[k] * sc);
            }
        }
    } else {
        for (int i = tid; i < dim; i += nb)
            norm_store<Q>((xr[i] * scale) * w[i], yr, i, tid % 32, xq, xds, blockIdx.x, dim);
    }
}

extern "C" void cuda_rms_norm(bk_backend *be, const float *x, const bk_weight *w, float *y, int n_rows, int dim,
                              float eps) {
    cuda_backend *cb = (cuda_backend *)be;
    if (n_rows <= 0) return;
    CU_ABLATE(cb, ABL_NORM);
    const float *wd = (const float *)w->dev;
    /* decode-sized batches: quantize on the way for the integer-dot product that follows */
    bool q = !cb->normq_off && cb->xq && dim % 32 == 0 && n_rows <= MMVQ_SLICE_MAX &&
             (size_t)n_rows * (size_t)dim <= cb->xq_cap;
    bool h = false;
    if (dim <= 1024) {
        dim3 g((unsigned)((n_rows + 7) / 8)), b(256);
        if (q) pdl_launch(cb, rms_norm_warp_kernel<true>, g, b, 0, x, wd, y, n_rows, dim, eps, cb->xq, cb->xds);
        else pdl_launch(cb, rms_norm_warp_kernel<false>, g, b, 0, x, wd, y, n_rows, dim, eps, (int8_t *)NULL, (float2 *)NULL);
    } else {
        /* about 4 values a thread: a single row (decode) keeps 1,024 loads in flight */
        int nb = (dim / 4 + 31) / 32 * 32;
        nb = nb < 128 ? 128 : nb > 1024 ? 1024 : nb;
        dim3 g((unsigned)n_rows), b((unsigned)nb);
        /* batches for the f16 products: convert on the way too (the rows in registers) */
        h = cuda_mmqh_use(cb, n_rows) && dim % 256 == 0 && dim <= NORM_EPT * nb &&
            (size_t)n_rows * (size_t)dim <= cb->xh_cap;
        __half *xh = h ? cb->xh : (__half *)NULL;
        float *xm = h ? cb->xmul : (float *)NULL;
        if (q && h) pdl_launch(cb, rms_norm_block_kernel<true, true>, g, b, 0, x, wd, y, dim, eps, cb->xq, cb->xds, xh, xm);
        else if (q) pdl_launch(cb, rms_norm_block_kernel<true, false>, g, b, 0, x, wd, y, dim, eps, cb->xq, cb->xds, xh, xm);
        else if (h) pdl_launch(cb, rms_norm_block_kernel<false, true>, g, b, 0, x, wd, y, dim, eps, (int8_t *)NULL,
                               (float2 *)NULL, xh, xm);
        else pdl_launch(cb, rms_norm_block_kernel<false, false>, g, b, 0, x, wd, y, dim, eps, (int8_t *)NULL,
                        (float2 *)NULL, xh, xm);
    }
    CU_LAUNCHED(cb);
    if (q) {
        cb->xq_src = y;
        cb->xq_n = n_rows;
        cb->xq_dim = dim;
    }
    if (h) {
        cb->xh_src = y;
        cb->xh_n = n_rows;
        cb->xh_dim = dim;
    }
}

/* ---- rope ---- */
/* One block per token: the pairs' angles once into shared memory, then every (head, pair) of the
 * token in parallel (a decode step rotates 32 heads with one block instead of 64 threads looping). */
__global__ void rope_kernel(float *x, int n, const int32_t *pos, const float *ff, rope_args a) {
    BK_TRACE_SCOPE();
    __shared__ float cs[ROPE_MAX_HALF], sn[ROPE_MAX_HALF];
    int t = blockIdx.x, half = a.n_rot / 2;
    for (int i = threadIdx.x; i < half; i += blockDim.x) rope_cs(i, pos[t], ff, a, &cs[i], &sn[i]);
    pdl_wait(); /* the angles need only the step's positions (copied before any kernel) */
    __syncthreads();
    for (int e = threadIdx.x; e < a.n_heads * half; e += blockDim.x) {
        int h = e / half, i = e % half;
        rope_pair(x + ((int64_t)t * a.n_heads + h) * a.head_dim, i, cs[i], sn[i], a);
    }
    (void)n;
}

/* QK-norm and rope in one pass, blocks of (token, 8 heads): each warp takes whole heads (q heads,
 * then k heads), normalises a head as rms_norm_warp_kernel does (same sums, same order) into its shared
 * row, then rotates it from there. n_heads of a holds the q heads; nk the k heads. q's heads are read
 * from qs, head rows qp floats apart (qs == q, qp == head_dim: in place).
 * KT >= 0 (a KV element type) also writes the cache as the attention's kv_write_kernel would: the
 * rotated k heads and then nk v heads (v, copied) go to cache row slot[t]; k itself is not stored. */
template <int KT>
__global__ void qk_norm_rope_kernel(float *q, const float *qs, int qp, float *k, const float *qw, const float *kw,
                                    float eps, int nk, const int32_t *pos, const float *ff, rope_args a,
                                    const float *v, void *kc, void *vc, const int32_t *slot) {
    BK_TRACE_SCOPE();
    extern __shared__ float qk_sm[]; /* cs[half], sn[half], rows[warps][head_dim] */
    int t = blockIdx.x, half = a.n_rot / 2, hd = a.head_dim, lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    int warps = blockDim.x / 32;
    float *cs = qk_sm, *sn = qk_sm + half, *row = qk_sm + 2 * half + warp * hd;
    for (int i = threadIdx.x; i < half; i += blockDim.x) rope_cs(i, pos[t], ff, a, &cs[i], &sn[i]);
    pdl_wait(); /* the angles need only the step's positions (copied before any kernel) */
    __syncthreads();
    const int nq = a.n_heads, nv = KT >= 0 ? nk : 0;
    const size_t crow = KT >= 0 ? (size_t)slot[t] * nk * hd : 0; /* the cache row's first element */
    for (int h = blockIdx.y * warps + warp; h < nq + nk + nv; h += gridDim.y * warps) {
        if (KT >= 0 && h >= nq + nk) { /* a v head: into the cache as it is */
            const int hv = h - nq - nk;
            const float *src = v + ((int64_t)t * nk + hv) * hd;
            for (int i = lane; i < hd; i += 32) kv_store<KT < 0 ? 0 : KT>(vc, crow + (size_t)hv * hd + i, src[i]);
            continue;
        }
        bool isq = h < nq;
        float *v_out = isq ? q + ((int64_t)t * nq + h) * hd : k + ((int64_t)t * nk + (h - nq)) * hd;
        const float *v_in = isq ? qs + ((int64_t)t * nq + h) * qp : v_out;
        const float *w = isq ? qw : kw;
        qk_head_norm_rope(v_in, w, eps, hd, half, cs, sn, a, row);
        if (KT >= 0 && !isq) {
            const size_t e0 = crow + (size_t)(h - nq) * hd;
            for (int i = lane; i < hd; i += 32) kv_store<KT < 0 ? 0 : KT>(kc, e0 + i, row[i]);
        } else {
            for (int i = lane; i < hd; i += 32) v_out[i] = row[i];
        }
        __syncwarp();
    }
}

/* The rope arguments and the device copies of pos and freq_factors; false after an error. */
bool cuda_rope_setup(cuda_backend *cb, int n, int n_heads, int head_dim, const int32_t *pos,
                       const bk_rope_params *rp, rope_args *a, const int32_t **d_pos, const float **d_ff) {
    a->n_rot = rp->n_rot;
    a->neox = rp->mode == BK_ROPE_NEOX;
    a->n_heads = n_heads;
    a->head_dim = head_dim;
    a->theta_scale = powf(rp->freq_base, -2.0f / (float)rp->n_rot);
    a->freq_scale = rp->freq_scale;
    a->ext_factor = rp->ext_factor;
    a->attn_factor = rp->attn_factor;
    /* YaRN correction dims, as the CPU computes them */
    float nr = (float)rp->n_rot, base = rp->freq_base;
    float start = floorf(nr * logf((float)rp->n_ctx_orig / (rp->beta_fast * 2.0f * (float)M_PI)) / (2.0f * logf(base)));
    float end = ceilf(nr * logf((float)rp->n_ctx_orig / (rp->beta_slow * 2.0f * (float)M_PI)) / (2.0f * logf(base)));
    a->corr0 = fmaxf(0.0f, start);
    a->corr1 = fminf(nr - 1, end);
    a->log_mscale = 1.0f + 0.1f * logf(1.0f / rp->freq_scale);
    *d_pos = cb->step_on ? cb->st_pos : (const int32_t *)cuda_upload(cb, META_ROPE_POS, pos, (size_t)n * sizeof(int32_t));
    if (!*d_pos) return false;
    *d_ff = NULL;
    if (rp->freq_factors) {
        *d_ff = (const float *)cuda_upload(cb, META_ROPE_FREQ, rp->freq_factors, (size_t)(rp->n_rot / 2) * sizeof(float));
        if (!*d_ff) return false;
    }
    return true;
}

extern "C" void cuda_rope(bk_backend *be, float *x, int n, int n_heads, int head_dim, const int32_t *pos,
                          const bk_rope_params *rp) {
    cuda_backend *cb = (cuda_backend *)be;
    if (n <= 0) return;
    rope_args a;
    const int32_t *d_pos;
    const float *d_ff;
    if (!cuda_rope_setup(cb, n, n_heads, head_dim, pos, rp, &a, &d_pos, &d_ff)) return;
    pdl_launch(cb, rope_kernel, dim3((unsigned)n), dim3(256), 0, x, n, d_pos, d_ff, a);
    CU_LAUNCHED(cb);
}

/* QK-norm and rope as one kernel: the shared launcher of cuda_qk_norm_rope and, with kv (the step's
 * cache slots known: cb->step_on), cuda_qk_norm_rope_kv. False: the caller goes op by op. */
static bool qk_norm_rope_launch(cuda_backend *cb, float *q, const float *qs, int qp, float *k, const float *v, int n,
                                int n_head, int n_head_kv, int head_dim, const bk_weight *q_norm,
                                const bk_weight *k_norm, float eps, const int32_t *pos, const bk_rope_params *rp,
                                const bk_kv_view *kv) {
    if (cb->qkrope_off || rp->n_rot > head_dim || rp->n_rot / 2 > ROPE_MAX_HALF) return false;
    rope_args a;
    const int32_t *d_pos;
    const float *d_ff;
    if (!cuda_rope_setup(cb, n, n_head, head_dim, pos, rp, &a, &d_pos, &d_ff)) return true; /* the error is set */
    /* one head per warp: a decode step's 40 heads run side by side, not five after another */
    const int warps = 8;
    const int heads = n_head + n_head_kv + (kv ? n_head_kv : 0);
    size_t smem = (size_t)(rp->n_rot + warps * head_dim) * sizeof(float);
    dim3 grid((unsigned)n, (unsigned)((heads + warps - 1) / warps));
    const float *qw = q_norm ? (const float *)q_norm->dev : (const float *)NULL;
    const float *kw = k_norm ? (const float *)k_norm->dev : (const float *)NULL;
    if (!kv) {
        pdl_launch(cb, qk_norm_rope_kernel<-1>, grid, dim3(warps * 32), smem, q, qs, qp, k, qw, kw, eps, n_head_kv,
                   d_pos, d_ff, a, (const float *)NULL, (void *)NULL, (void *)NULL, (const int32_t *)NULL);
    } else {
        void (*kern)(float *, const float *, int, float *, const float *, const float *, float, int, const int32_t *,
                     const float *, rope_args, const float *, void *, void *, const int32_t *) =
            kv->kv_type == KT_Q4_0   ? qk_norm_rope_kernel<KT_Q4_0>
            : kv->kv_type == KT_Q8_0 ? qk_norm_rope_kernel<KT_Q8_0>
            : kv->kv_type == KT_F16  ? qk_norm_rope_kernel<KT_F16>
                                     : qk_norm_rope_kernel<KT_F32>;
        pdl_launch(cb, kern, grid, dim3(warps * 32), smem, q, qs, qp, k, qw, kw, eps, n_head_kv, d_pos, d_ff, a, v,
                   kv->k, kv->v, (const int32_t *)cb->st_slot);
    }
    cuda_forget_act_copies(cb); /* as CU_LAUNCHED, in a function that returns a value */
    cudaError_t e = cudaGetLastError();
    if (e != cudaSuccess)
        cuda_set_error(cb, bk_fail(BRISK_ERR_BACKEND, "qk_norm_rope: %s", cudaGetErrorString(e)));
    return true;
}

extern "C" void cuda_qk_norm_rope(bk_backend *be, float *q, float *k, int n, int n_head, int n_head_kv, int head_dim,
                                  const bk_weight *q_norm, const bk_weight *k_norm, float eps, const int32_t *pos,
                                  const bk_rope_params *rp) {
    cuda_backend *cb = (cuda_backend *)be;
    if (n <= 0) return;
    CU_ABLATE(cb, ABL_ROPE);
    if (qk_norm_rope_launch(cb, q, q, head_dim, k, NULL, n, n_head, n_head_kv, head_dim, q_norm, k_norm, eps, pos, rp,
                            NULL))
        return;
    if (q_norm) cuda_rms_norm(be, q, q_norm, q, n * n_head, head_dim, eps);
    if (k_norm) cuda_rms_norm(be, k, k_norm, k, n * n_head_kv, head_dim, eps);
    cuda_rope(be, q, n, n_head, head_dim, pos, rp);
    cuda_rope(be, k, n, n_head_kv, head_dim, pos, rp);
}

/* The fused op's decode form: q's heads from q_src (q_pitch floats apart) into q, and the cache
 * written here (the attention then gets k = v = NULL). Only inside a step, whose cache slots are
 * on the device already; a q8_0 or q4_0 cache needs head_dim % 32 == 0, as the attention does. */
extern "C" bool cuda_qk_norm_rope_kv(bk_backend *be, float *q, const float *q_src, int q_pitch, float *k,
                                     const float *v, int n, int n_head, int n_head_kv, int head_dim,
                                     const bk_weight *q_norm, const bk_weight *k_norm, float eps, const int32_t *pos,
                                     const bk_rope_params *rp, const bk_kv_view *kv) {
    cuda_backend *cb = (cuda_backend *)be;
    CU_ABLATE(cb, ABL_ROPE, cb->step_on);
    if (n <= 0 || !cb->step_on || cb->kvfuse_off || !kv->k || (kt_block_bytes(kv->kv_type) && head_dim % 32) ||
        kv->kv_type == BRISK_KV_Q4_0H) /* (its keys are rotated first: cuda_attention) */
        return false;
    return qk_norm_rope_launch(cb, q, q_src, q_pitch, k, v, n, n_head, n_head_kv, head_dim, q_norm, k_norm, eps, pos,
                               rp, kv);
}
