/* cuda_mmvq.cu — decode-sized matrix products on quantized weights with
 * integer dot products: y (n, n_out) = x (n, n_in) W^T for n <= MMVQ_MAX_TOK
 * per launch (up to MMVQ_SLICE_MAX tokens as several launches).
 *
 * Why: decoding a 4-bit weight into floats and multiplying it by f32
 * activations costs ~4 instructions per element, which makes a GEMV issue
 * bound at 15-25% of HBM bandwidth (dev/kernels/gemv_lab.cu). Here the
 * activations are quantized once per call to int8 blocks of 32 (scale d and
 * d * sum of the quants, as ggml's q8_1) and each weight group of 32 meets
 * them in __dp4a: 4 multiply-adds per instruction on bytes the weight
 * format already holds. The CPU backend quantizes activations too (q8_0 /
 * q8_K), so both backends make the same kind of rounding.
 *
 * Work split: a warp owns MMVQ_ROWS rows; lane i takes the 32-element groups
 * i, i+32, ... of each row (one group = one Q4_0/Q8_0 block, a sub-block of
 * Q4_K, a 32-run of Q6_K), loads its bytes with 2- or 4-byte loads (the
 * 18-, 34- and 210-byte blocks are only 2-byte aligned) and dots them with
 * the matching 8 int32 of activations for every token. */
#include "backend/cuda/cuda_mmvq.cuh"

/* ---- activations: x (n, n_in) f32 -> xq (n, n_in) int8 + xds (n, n_in/32) (d, d*sum q) ---- */
__global__ void quantize_q8_1_kernel(const float *x, int64_t n_in, int8_t *xq, float2 *xds, int64_t n_groups) {
    BK_TRACE_SCOPE();
    pdl_wait();
    int64_t g = (int64_t)blockIdx.x * (blockDim.x / 32) + threadIdx.x / 32; /* group over all tokens */
    if (g >= n_groups) return;
    int lane = threadIdx.x % 32;
    q8_1_store_lane(x[g * 32 + lane], g * 32 + lane, lane, xq, xds);
    (void)n_in;
}

/* The weight groups (wgroup, group_load, group_dot) live in cuda_internal.cuh, the warp's loop
 * over its rows (mmvq_rows) in cuda_mmvq.cuh: the expert products of cuda_moe.cu use them too. */

template <int T, int NT, bool GLU, int U = mmvq_unroll<T, NT>::U, bool Q6Q = false> /* NT: tokens the registers are sized for */
__global__ void __launch_bounds__(MMVQ_WARPS * 32)
mmvq_kernel(const uint8_t *W, const uint8_t *W2, size_t row_bytes, int64_t n_in, int64_t n_out, const int8_t *xq,
            const float2 *xds, int n, const float *bias, float *y, int accum) {
    BK_TRACE_SCOPE(); /* (a trace build only) */
    mmvq_rows<T, NT, GLU, U, Q6Q>(W, W2, row_bytes, n_in, n_out, xq, xds, n, bias, y, accum,
                             (int64_t)blockIdx.x * MMVQ_WARPS + threadIdx.x / 32, (int64_t)gridDim.x * MMVQ_WARPS);
}

/* Up to MMVQ_MULTI matrices of one type and width on the same activations in one launch (a layer's
 * q, k and v: two launches fewer per layer). Block b belongs to the matrix m with
 * bend[m - 1] <= b < bend[m]; its warps take that matrix's rows as mmvq_kernel's would. */
#define MMVQ_MULTI 3 /* mmvq_multi_kernel selects among these with constant indices */
typedef struct mmvq_mats {
    const uint8_t *W[MMVQ_MULTI];
    const float *bias[MMVQ_MULTI];
    float *y[MMVQ_MULTI];
    int64_t n_out[MMVQ_MULTI];
    unsigned bend[MMVQ_MULTI];
    int count;
} mmvq_mats;

template <int T, int NT, int U = mmvq_unroll<T, NT>::U, bool Q6Q = false>
__global__ void __launch_bounds__(MMVQ_WARPS * 32)
mmvq_multi_kernel(mmvq_mats mm, size_t row_bytes, int64_t n_in, const int8_t *xq, const float2 *xds, int n, int accum) {
    BK_TRACE_SCOPE(); /* (a trace build only) */
    /* constant indices only: a dynamic index would copy the parameter struct to local memory */
    const unsigned b = blockIdx.x;
    const bool m1 = mm.count > 1 && b >= mm.bend[0], m2 = mm.count > 2 && b >= mm.bend[1];
    const uint8_t *W = m2 ? mm.W[2] : m1 ? mm.W[1] : mm.W[0];
    const float *bias = m2 ? mm.bias[2] : m1 ? mm.bias[1] : mm.bias[0];
    float *y = m2 ? mm.y[2] : m1 ? mm.y[1] : mm.y[0];
    int64_t n_out = m2 ? mm.n_out[2] : m1 ? mm.n_out[1] : mm.n_out[0];
    unsigned b0 = m2 ? mm.bend[1] : m1 ? mm.bend[0] : 0, b1 = m2 ? mm.bend[2] : m1 ? mm.bend[1] : mm.bend[0];
    mmvq_rows<T, NT, false, U, Q6Q>(W, NULL, row_bytes, n_in, n_out, xq, xds, n, bias, y, accum,
                                    (int64_t)(b - b0) * MMVQ_WARPS + threadIdx.x / 32, (int64_t)(b1 - b0) * MMVQ_WARPS);
}

/* One launch of mmvq_kernel for weight type T: registers sized for the nt tokens (a decode step keeps
 * the occupancy of one token). A Q6_K matrix of many rows (the LM head) takes one group in flight:
 * there occupancy beats loads in flight (mmvq_lab). */
template <int T, bool GLU>
static void mmvq_launch_t(cuda_backend *cb, unsigned blocks, const uint8_t *W, const uint8_t *W2, size_t row_bytes,
                          int64_t n_in, int64_t n_out, const int8_t *xq, const float2 *xds, int nt, const float *bias,
                          float *y, int accum) {
#define MMVQ_GO(NT, ...) \
    pdl_launch(cb, mmvq_kernel<T, NT, GLU, ##__VA_ARGS__>, dim3(blocks), dim3(MMVQ_WARPS * 32), 0, W, W2, row_bytes, \
               n_in, n_out, xq, xds, nt, bias, y, accum)
    CU_COUNT(cb, CU_PATH_MMVQ); /* every branch below launches once */
    if constexpr (T == QT_Q6_K) {
        /* quads (group_load_q6k_quad) for decode batches; the LM head keeps one group in flight
         * (in quads too it ran 423.7 against 424.6 tokens/s, qwen3-8b tg128, H200) */
        bool lm_head = !GLU && nt == 1 && n_out > 32768;
        if (cb->q6k_quad && !lm_head && nt <= 8) {
            if (nt == 1) MMVQ_GO(1, 1, true);
            else if (nt <= 4) MMVQ_GO(4, 1, true);
            else MMVQ_GO(8, 1, true);
            return;
        }
        if (lm_head) {
            MMVQ_GO(1, 1);
            return;
        }
    }
    if (nt == 1) MMVQ_GO(1);
    else if (nt <= 4) MMVQ_GO(4);
    else if (nt <= 8) MMVQ_GO(8);
    else MMVQ_GO(MMVQ_MAX_TOK);
#undef MMVQ_GO
}

/* The type dispatch of mmvq_launch_t; false for a type the integer-dot kernels do not take. */
template <bool GLU>
static bool mmvq_launch(cuda_backend *cb, uint32_t type, unsigned blocks, const uint8_t *W, const uint8_t *W2,
                        size_t row_bytes, int64_t n_in, int64_t n_out, const int8_t *xq, const float2 *xds, int nt,
                        const float *bias, float *y, int accum) {
    switch (type) {
    case QT_Q8_0: mmvq_launch_t<QT_Q8_0, GLU>(cb, blocks, W, W2, row_bytes, n_in, n_out, xq, xds, nt, bias, y, accum); return true;
    case QT_Q4_0: mmvq_launch_t<QT_Q4_0, GLU>(cb, blocks, W, W2, row_bytes, n_in, n_out, xq, xds, nt, bias, y, accum); return true;
    case QT_Q4_K: mmvq_launch_t<QT_Q4_K, GLU>(cb, blocks, W, W2, row_bytes, n_in, n_out, xq, xds, nt, bias, y, accum); return true;
    case QT_Q6_K: mmvq_launch_t<QT_Q6_K, GLU>(cb, blocks, W, W2, row_bytes, n_in, n_out, xq, xds, nt, bias, y, accum); return true;
    case QT_Q5_K: mmvq_launch_t<QT_Q5_K, GLU>(cb, blocks, W, W2, row_bytes, n_in, n_out, xq, xds, nt, bias, y, accum); return true;
    case QT_IQ4_XS: mmvq_launch_t<QT_IQ4_XS, GLU>(cb, blocks, W, W2, row_bytes, n_in, n_out, xq, xds, nt, bias, y, accum); return true;
    case QT_IQ4_NL: mmvq_launch_t<QT_IQ4_NL, GLU>(cb, blocks, W, W2, row_bytes, n_in, n_out, xq, xds, nt, bias, y, accum); return true;
    default: return false;
    }
}

bool cuda_mmvq_supported(uint32_t type, int64_t n_in) {
    bool t = type == QT_Q8_0 || type == QT_Q4_0 || type == QT_Q4_K || type == QT_Q6_K;
    return t && n_in % 32 == 0;
}

/* Q5_K, IQ4_XS and IQ4_NL have integer-dot loaders (group_load) for the decode products of this
 * file and cuda_mmvs.cu, not for the tensor-core batches (cuda_mmq) nor the experts (cuda_moe.cu):
 * their batches keep the float paths. */
bool cuda_mmvq_dec_supported(const cuda_backend *cb, uint32_t type, int64_t n_in) {
    return cuda_mmvq_supported(type, n_in) ||
           (!cb->dec_qtypes_off && (type == QT_Q5_K || type == QT_IQ4_XS || type == QT_IQ4_NL) && n_in % 32 == 0);
}

/* Batches up to MMVQ_SLICE_MAX tokens (MMVQ_MAX_TOK with BRISK_CUDA_DISABLE=mmvq_slices) that are
 * not cuda_mmq's (it comes first) nor cuBLAS's (slices would read W n/16 times). */
bool cuda_mmvq_use(const cuda_backend *cb, int n) {
    if (!cb->xq || cuda_mmq_use(cb, n)) return false;
    if (!cb->mmq_off && n >= cb->mmq_max) return false;
    return n <= (cb->mmvq_slices_off ? MMVQ_MAX_TOK : MMVQ_SLICE_MAX);
}

bool cuda_mmvq_should_use(const cuda_backend *cb, uint32_t type, int64_t n_in, int n) {
    return cuda_mmvq_use(cb, n) && cuda_mmvq_dec_supported(cb, type, n_in);
}

/* Several matrices of one call, one slice of tokens: cuda_mmvq_multi. */
bool cuda_mmvq_multi_should_use(const cuda_backend *cb, int n, int n_mats) {
    return n_mats > 1 && n <= MMVQ_MAX_TOK && !cb->mmvq_multi_off;
}

/* The GLU kernel takes one slice. */
bool cuda_mmvq_glu_should_use(const cuda_backend *cb, uint32_t type, int64_t n_in, int n) {
    return !cb->glu_off && n <= MMVQ_MAX_TOK && cuda_mmvq_should_use(cb, type, n_in, n);
}

/* Quantizes x (n, n_in) into the backend's activation buffer; false when it does not fit. */
bool cuda_mmvq_quantize(cuda_backend *cb, const float *x, int64_t n_in, int n) {
    int64_t n_groups = (int64_t)n * (n_in / 32);
    if ((size_t)(n_groups * 32) > cb->xq_cap) return false; /* the caller takes the float path */
    const int warps = 8;
    pdl_launch(cb, quantize_q8_1_kernel, dim3((unsigned)((n_groups + warps - 1) / warps)), dim3(warps * 32), 0, x, n_in,
               cb->xq, cb->xds, n_groups);
    return true;
}

/* y = W x for activations already quantized by cuda_mmvq_quantize. Up to MMVQ_MAX_TOK tokens are one
 * launch; larger batches (up to MMVQ_SLICE_MAX: cuda_mmvq_use) run as slices of MMVQ_MAX_TOK tokens,
 * each reading the weights again: at 32 tokens two slices beat the tensor-core tile kernel, whose
 * 128-row x 64-token tiles give a 4096-row matrix 32 blocks for 132 SMs. */
void cuda_mmvq(cuda_backend *cb, const bk_weight *w, const float *bias, int n, float *y, int accum) {
    if (n == 1) {
        mmvs_mats mm = {};
        mmvs_add(mm, (const uint8_t *)w->dev, bias, y, w->n_out);
        if (cuda_mmvs(cb, w->type, false, mm, w->row_bytes, w->n_in, accum)) return;
    }
    int64_t warps = (w->n_out + MMVQ_ROWS - 1) / MMVQ_ROWS;
    unsigned blocks = (unsigned)((warps + MMVQ_WARPS - 1) / MMVQ_WARPS);
    const uint8_t *W = (const uint8_t *)w->dev;
    int64_t n_groups = w->n_in / 32;
    for (int t0 = 0; t0 < n; t0 += MMVQ_MAX_TOK) {
        int nt = n - t0 < MMVQ_MAX_TOK ? n - t0 : MMVQ_MAX_TOK;
        const int8_t *xq = cb->xq + (int64_t)t0 * w->n_in;
        const float2 *xds = cb->xds + (int64_t)t0 * n_groups;
        float *ys = y + (int64_t)t0 * w->n_out;
        mmvq_launch<false>(cb, w->type, blocks, W, NULL, w->row_bytes, w->n_in, w->n_out, xq, xds, nt, bias, ys,
                           accum);
    }
}

/* x is already quantized (cuda_mmvq_prepare); the fused norm's output is reused as it stands. */
bool cuda_mmvq_prepare(cuda_backend *cb, const float *x, int64_t n_in, int n) {
    if (cb->xq_src == x && cb->xq_n == n && cb->xq_dim == n_in) return true;
    return cuda_mmvq_quantize(cb, x, n_in, n);
}

/* out (n, n_ff) = silu(x Wgate^T) * (x Wup^T) for activations already quantized, n <= MMVQ_MAX_TOK:
 * one warp per output row reads its gate and up rows (false: types or shapes it does not take). */
bool cuda_mmvq_glu(cuda_backend *cb, const bk_weight *gate, const bk_weight *up, int n, float *out) {
    if (n > MMVQ_MAX_TOK || gate->type != up->type || gate->n_in != up->n_in || gate->n_out != up->n_out ||
        gate->row_bytes != up->row_bytes || !cuda_mmvq_dec_supported(cb, gate->type, gate->n_in))
        return false;
    const uint8_t *G = (const uint8_t *)gate->dev, *U = (const uint8_t *)up->dev;
    if (n == 1) {
        mmvs_mats mm = {};
        mmvs_add(mm, G, NULL, out, gate->n_out);
        mm.W2 = U;
        if (cuda_mmvs(cb, gate->type, true, mm, gate->row_bytes, gate->n_in, 0)) return true;
    }
    unsigned blocks = (unsigned)((gate->n_out + MMVQ_WARPS - 1) / MMVQ_WARPS);
    return mmvq_launch<true>(cb, gate->type, blocks, G, U, gate->row_bytes, gate->n_in, gate->n_out, cb->xq, cb->xds, n,
                             NULL, out, 0);
}

/* The matrices w[0..count) (one type, row size and width; count <= MMVQ_MULTI) on activations
 * already quantized, n <= MMVQ_MAX_TOK: one launch of mmvq_multi_kernel. */
template <int T>
static void mmvq_multi_launch_t(cuda_backend *cb, const mmvq_mats &mm, size_t row_bytes, int64_t n_in, int nt,
                                int accum) {
    dim3 grid(mm.bend[mm.count - 1]), block(MMVQ_WARPS * 32);
    CU_COUNT(cb, CU_PATH_MMVQ);
    if (nt == 1) pdl_launch(cb, mmvq_multi_kernel<T, 1>, grid, block, 0, mm, row_bytes, n_in, (const int8_t *)cb->xq,
                            (const float2 *)cb->xds, nt, accum);
    else if (nt <= 4) pdl_launch(cb, mmvq_multi_kernel<T, 4>, grid, block, 0, mm, row_bytes, n_in,
                                 (const int8_t *)cb->xq, (const float2 *)cb->xds, nt, accum);
    else if (nt <= 8) pdl_launch(cb, mmvq_multi_kernel<T, 8>, grid, block, 0, mm, row_bytes, n_in,
                                 (const int8_t *)cb->xq, (const float2 *)cb->xds, nt, accum);
    else pdl_launch(cb, mmvq_multi_kernel<T, MMVQ_MAX_TOK>, grid, block, 0, mm, row_bytes, n_in, (const int8_t *)cb->xq,
                    (const float2 *)cb->xds, nt, accum);
}

/* y[m] = x W[m]^T (+ bias[m]) for the integer-dot matrices of one call, x already quantized and
 * n <= MMVQ_MAX_TOK: runs of consecutive matrices of one type and row size (q and k of a Q4_K_M
 * layer; all three where v has their type too) share a launch. Returns how many of w it took:
 * the caller runs the rest (from the first it could not take) another way. */
int cuda_mmvq_multi(cuda_backend *cb, int n_w, const bk_weight *const *w, const float *const *bias, int n,
                    float *const *y) {
    if (n > MMVQ_MAX_TOK || cb->mmvq_multi_off) return 0;
    int done = 0;
    while (done < n_w && cuda_mmvq_dec_supported(cb, w[done]->type, w[done]->n_in)) {
        mmvq_mats mm = {};
        unsigned blocks = 0;
        const bk_weight *w0 = w[done];
        while (done < n_w && mm.count < MMVQ_MULTI && w[done]->type == w0->type &&
               w[done]->row_bytes == w0->row_bytes && w[done]->n_in == w0->n_in) {
            int64_t warps = (w[done]->n_out + MMVQ_ROWS - 1) / MMVQ_ROWS;
            blocks += (unsigned)((warps + MMVQ_WARPS - 1) / MMVQ_WARPS);
            mm.W[mm.count] = (const uint8_t *)w[done]->dev;
            mm.bias[mm.count] = bias ? bias[done] : NULL;
            mm.y[mm.count] = y[done];
            mm.n_out[mm.count] = w[done]->n_out;
            mm.bend[mm.count] = blocks;
            mm.count++;
            done++;
        }
        if (n == 1) { /* the streamed kernel over the same run of matrices */
            mmvs_mats ms = {};
            for (int m = 0; m < mm.count; m++) mmvs_add(ms, mm.W[m], mm.bias[m], mm.y[m], mm.n_out[m]);
            if (cuda_mmvs(cb, w0->type, false, ms, w0->row_bytes, w0->n_in, 0)) continue;
        }
        switch (w0->type) {
        case QT_Q8_0: mmvq_multi_launch_t<QT_Q8_0>(cb, mm, w0->row_bytes, w0->n_in, n, 0); break;
        case QT_Q4_0: mmvq_multi_launch_t<QT_Q4_0>(cb, mm, w0->row_bytes, w0->n_in, n, 0); break;
        case QT_Q4_K: mmvq_multi_launch_t<QT_Q4_K>(cb, mm, w0->row_bytes, w0->n_in, n, 0); break;
        case QT_Q6_K: mmvq_multi_launch_t<QT_Q6_K>(cb, mm, w0->row_bytes, w0->n_in, n, 0); break;
        case QT_Q5_K: mmvq_multi_launch_t<QT_Q5_K>(cb, mm, w0->row_bytes, w0->n_in, n, 0); break;
        case QT_IQ4_XS: mmvq_multi_launch_t<QT_IQ4_XS>(cb, mm, w0->row_bytes, w0->n_in, n, 0); break;
        default: mmvq_multi_launch_t<QT_IQ4_NL>(cb, mm, w0->row_bytes, w0->n_in, n, 0); break; /* (dec_supported) */
        }
    }
    return done;
}
