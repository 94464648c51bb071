/* cuda_gemv.cu — embedding rows and matrix products on quantized weights.
 *
 * Up to GEMV_MAX_TOK tokens: one warp per output row reads the row once,
 * decodes 8 elements per lane per step (a warp step covers 256 consecutive
 * elements, i.e. one K-quant block or eight 32-blocks) and dots them with
 * every token's activations (decode and small batches: weight-bandwidth bound).
 * Integer-dot types (Q8_0, Q4_0, Q4_K, Q6_K) quantize the activations instead:
 * one token on cuda_mmvq.cu, batches below cuBLAS's minimum on int8 tensor
 * cores (cuda_mmq.cu; q8_path below says which).
 * More tokens: tensor cores (cuda_mma.cu; from BLAS_MIN_TOK tokens cuBLAS on
 * weights dequantized to f16, when it loads: cuda_blas.cu); the 64x64 tiled SIMT kernel here
 * decodes each weight tile into shared memory once per 64 tokens and remains
 * for rows that are no multiple of 32 (and BRISK_CUDA_DISABLE=mma).
 */
#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_mmvq.cuh" /* mmvs_mats, cuda_mmvs: the norm inside the streamed product */

#define GEMV_MAX_TOK 8 /* float-path GEMV; integer-dot types go to cuda_mmvq.cu */
#define GEMV_WARPS 4
#ifndef GEMV_ROWS
#define GEMV_ROWS 2
#endif


#define IS_FLOAT_T(T) ((T) == QT_F32 || (T) == QT_F16 || (T) == QT_BF16)

/* ---- get_rows: out[i, :] = dequantized row ids[i] ---- */
template <int T>
__global__ void get_rows_kernel(const uint8_t *emb, size_t row_bytes, int64_t n_in, const int32_t *ids,
                                float *out) {
    const uint8_t *row = emb + (size_t)(ids ? ids[blockIdx.x] : (int32_t)blockIdx.x) * row_bytes; /* NULL: rows in order */
    float *o = out + (size_t)blockIdx.x * n_in;
    if (!IS_FLOAT_T(T) || n_in % 8 == 0) {
        for (int64_t p = threadIdx.x; p < n_in / 8; p += blockDim.x) {
            float v[8];
            deq8<T>(row, p * 8, v);
#pragma unroll
            for (int i = 0; i < 8; i++) o[p * 8 + i] = v[i];
        }
    } else {
        for (int64_t e = threadIdx.x; e < n_in; e += blockDim.x) o[e] = deq1(T, row, e);
    }
}

extern "C" void cuda_get_rows(bk_backend *be, const bk_weight *emb, const int32_t *ids, int n, float *out) {
    cuda_backend *cb = (cuda_backend *)be;
    if (n <= 0) return;
    if (!emb->dev) { /* a table in host memory (model.c): rows staged by step_begin, or here outside a step */
        if (!(cb->step_on && cb->st_emb)) {
            brisk_status s = cudaEventSynchronize(cb->step_ev) == cudaSuccess
                                 ? cuda_stage_embedding(cb, emb, ids, n)
                                 : bk_fail(BRISK_ERR_BACKEND, "cuda get_rows: waiting for the staging area");
            if (s == BRISK_OK && cudaEventRecord(cb->step_ev, cb->stream) != cudaSuccess)
                s = bk_fail(BRISK_ERR_BACKEND, "cuda get_rows: recording the staging event");
            if (s != BRISK_OK) {
                cuda_set_error(cb, s);
                return;
            }
        }
        BK_DISPATCH(emb->type, get_rows_kernel<TT><<<n, 128, 0, cb->stream>>>(cb->st_emb, emb->row_bytes,
                                                                          emb->n_in, NULL, out));
        CU_LAUNCHED(cb);
        return;
    }
    const int32_t *d_ids = cb->step_on ? cb->st_ids
                                       : (const int32_t *)cuda_upload(cb, META_IDS, ids, (size_t)n * sizeof(int32_t));
    if (!d_ids) return;
    BK_DISPATCH(emb->type, get_rows_kernel<TT><<<n, 128, 0, cb->stream>>>((const uint8_t *)emb->dev,
                                                                      emb->row_bytes, emb->n_in, d_ids, out));
    CU_LAUNCHED(cb);
}

/* ---- GEMV: y (n, n_out) = x (n, n_in) W^T, n <= GEMV_MAX_TOK ----
 * A warp owns R consecutive rows: each lane step loads 8 activations per
 * token once and dots them with the 8 decoded elements of every row, so the
 * activation traffic (through L1, 4 bytes per element) is shared by R rows
 * instead of dwarfing the weight bytes (half a byte per element in Q4). */
template <int T, int R>
__global__ void __launch_bounds__(GEMV_WARPS * 32)
gemv_kernel(const uint8_t *W, size_t row_bytes, int64_t n_in, int64_t n_out, const float *x, int n,
            const float *bias, float *y, int accum) {
    BK_TRACE_SCOPE();
    pdl_wait(); /* a programmatic launch (cuda_pdl.cuh): x is the previous kernel's output */
    int lane = threadIdx.x % 32;
    int64_t r0 = ((int64_t)blockIdx.x * GEMV_WARPS + threadIdx.x / 32) * R;
    if (r0 >= n_out) return;
    const uint8_t *rows[R];
#pragma unroll
    for (int i = 0; i < R; i++) rows[i] = W + (r0 + i < n_out ? r0 + i : r0) * row_bytes;
    float acc[R][GEMV_MAX_TOK];
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int t = 0; t < GEMV_MAX_TOK; t++) acc[i][t] = 0.0f;
    if (!IS_FLOAT_T(T) || n_in % 8 == 0) {
        for (int64_t p = lane; p < n_in / 8; p += 32) {
            float v[R][8];
#pragma unroll
            for (int i = 0; i < R; i++) deq8<T>(rows[i], p * 8, v[i]);
#pragma unroll
            for (int t = 0; t < GEMV_MAX_TOK; t++) {
                if (t < n) {
                    const float4 *xp = (const float4 *)(x + t * n_in + p * 8);
                    float4 a = __ldg(xp), b = __ldg(xp + 1);
#pragma unroll
                    for (int i = 0; i < R; i++)
                        acc[i][t] += v[i][0] * a.x + v[i][1] * a.y + v[i][2] * a.z + v[i][3] * a.w +
                                     v[i][4] * b.x + v[i][5] * b.y + v[i][6] * b.z + v[i][7] * b.w;
                }
            }
        }
    } else {
        for (int64_t e = lane; e < n_in; e += 32) {
#pragma unroll
            for (int i = 0; i < R; i++) {
                float w = deq1(T, rows[i], e);
#pragma unroll
                for (int t = 0; t < GEMV_MAX_TOK; t++)
                    if (t < n) acc[i][t] += w * __ldg(x + t * n_in + e);
            }
        }
    }
    warp_store_rows(acc, lane, r0, n_out, n, bias, y, accum);
}

/* ---- GEMV for few rows (an MoE router: 128-256 rows of 2048): a block per row, its warps split
 * the row's K (block_row_dot in cuda_internal.cuh). With a warp per row pair the router's 16-32
 * blocks walked 8 dependent load rounds each (ncu: 7.4 us for 1 MB). ---- */
bool cuda_gemv_splitk_use(const bk_weight *w) {
    return IS_FLOAT_T(w->type) && w->n_out <= 1024 && w->n_in % 8 == 0 && w->n_in >= 1024;
}

template <int T>
__global__ void __launch_bounds__(GEMV_SK_WARPS * 32)
gemv_splitk_kernel(const uint8_t *W, size_t row_bytes, int64_t n_in, int64_t n_out, const float *x, int n,
                   const float *bias, float *y, int accum) {
    BK_TRACE_SCOPE();
    pdl_wait();
    __shared__ float part[GEMV_SK_WARPS][GEMV_MAX_TOK];
    const int64_t r = blockIdx.x;
    block_row_dot<T, GEMV_MAX_TOK, GEMV_SK_WARPS>(W + r * row_bytes, x, n_in, n, part);
    if ((int)threadIdx.x < n) {
        const int t = threadIdx.x;
        float *o = y + (int64_t)t * n_out + r;
        *o = (accum ? *o : 0.0f) + block_row_sum(part, t) + (bias ? bias[r] : 0.0f);
    }
}

/* ---- tiled: 64 rows x 64 tokens per block, 32 elements of K per step ---- */
#define TM 64
#define TN 64
#define TK 32
template <int T>
__global__ void __launch_bounds__(256)
mm_tiled_kernel(const uint8_t *W, size_t row_bytes, int64_t n_in, int64_t n_out, const float *x, int n,
                const float *bias, float *y, int accum) {
    __shared__ float Ws[TK][TM + 1]; /* [k][row] */
    __shared__ float Xs[TK][TN + 1]; /* [k][token] */
    int tid = threadIdx.x, tx = tid % 16, ty = tid / 16;
    int64_t r0 = (int64_t)blockIdx.x * TM;
    int t0 = blockIdx.y * TN;
    int lr = tid / 4, lp = tid % 4; /* loader: row/token lr, piece lp of 8 elements */
    float acc[4][4];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int j = 0; j < 4; j++) acc[i][j] = 0.0f;
    for (int64_t k0 = 0; k0 < n_in; k0 += TK) {
        float v[8];
        if (r0 + lr < n_out) deq8<T>(W + (r0 + lr) * row_bytes, k0 + lp * 8, v);
        else
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = 0.0f;
#pragma unroll
        for (int i = 0; i < 8; i++) Ws[lp * 8 + i][lr] = v[i];
        if (t0 + lr < n) {
            const float4 *xp = (const float4 *)(x + (int64_t)(t0 + lr) * n_in + k0 + lp * 8);
            float4 a = __ldg(xp), b = __ldg(xp + 1);
            v[0] = a.x; v[1] = a.y; v[2] = a.z; v[3] = a.w;
            v[4] = b.x; v[5] = b.y; v[6] = b.z; v[7] = b.w;
        } else {
#pragma unroll
            for (int i = 0; i < 8; i++) v[i] = 0.0f;
        }
#pragma unroll
        for (int i = 0; i < 8; i++) Xs[lp * 8 + i][lr] = v[i];
        __syncthreads();
#pragma unroll 8
        for (int k = 0; k < TK; k++) {
            float a[4], b[4];
#pragma unroll
            for (int i = 0; i < 4; i++) a[i] = Ws[k][tx + 16 * i];
#pragma unroll
            for (int j = 0; j < 4; j++) b[j] = Xs[k][ty + 16 * j];
#pragma unroll
            for (int i = 0; i < 4; i++)
#pragma unroll
                for (int j = 0; j < 4; j++) acc[i][j] += a[i] * b[j];
        }
        __syncthreads();
    }
#pragma unroll
    for (int j = 0; j < 4; j++) {
        int t = t0 + ty + 16 * j;
        if (t >= n) continue;
#pragma unroll
        for (int i = 0; i < 4; i++) {
            int64_t r = r0 + tx + 16 * i;
            if (r >= n_out) continue;
            float *o = y + (int64_t)t * n_out + r;
            *o = (accum ? *o : 0.0f) + acc[i][j] + (bias ? bias[r] : 0.0f);
        }
    }
}

/* The first run of w[0..n_w) of one type, row size and width as one streamed launch's matrices (up
 * to MMVS_MATS; with up, the gate/up pair of a SwiGLU into y[0], or an empty run where up does not
 * match the gate). */
static mmvs_mats mmvs_run(int n_w, const bk_weight *const *w, const bk_weight *const *bias, float *const *y,
                          const bk_weight *up) {
    mmvs_mats mm = {};
    const bk_weight *w0 = w[0];
    if (up && (up->type != w0->type || up->n_out != w0->n_out || up->row_bytes != w0->row_bytes)) return mm;
    for (int m = 0; m < (up ? 1 : n_w) && m < MMVS_MATS && w[m]->type == w0->type &&
                    w[m]->row_bytes == w0->row_bytes && w[m]->n_in == w0->n_in; m++)
        mmvs_add(mm, (const uint8_t *)w[m]->dev, bias && bias[m] ? (const float *)bias[m]->dev : NULL, y[m],
                 w[m]->n_out);
    if (up) mm.W2 = (const uint8_t *)up->dev;
    return mm;
}

/* One token's products on float weights streamed (cuda_mmvf.cu): mmvs_run's matrices of w in one
 * launch. Returns the matrices it took (0: none; the caller takes the float GEMV). */
static int mmvf_run(cuda_backend *cb, int n_w, const bk_weight *const *w, const bk_weight *const *bias,
                    const float *x, float *const *y, int accum, const bk_weight *up) {
    if (!cb->mmvf_on) return 0;
    const mmvs_mats mm = mmvs_run(n_w, w, bias, y, up);
    return mm.count && cuda_mmvf(cb, w[0]->type, up != NULL, mm, w[0]->row_bytes, w[0]->n_in, x, accum) ? mm.count
                                                                                                       : 0;
}

/* y (n, n_out) = x W^T (+ bias), or y += x W^T when accum is set. *x16 notes that x is
 * already in f16 for cuBLAS (cuda_blas.cu): the matrices of one cuda_matmul call share it. */
static void matmul_one(cuda_backend *cb, const bk_weight *w, const bk_weight *bias, const float *x, int n,
                       float *y, int accum, bool *x16) {
    const uint8_t *W = (const uint8_t *)w->dev;
    const float *b = bias ? (const float *)bias->dev : NULL;
    int64_t n_in = w->n_in, n_out = w->n_out;
    if (n > GEMV_MAX_TOK && !cb->mma_off && cuda_mma_supported(w->type, n_in)) {
        /* from BLAS_MIN_TOK tokens dequantized weights through cuBLAS when it loaded */
        if (!cuda_blas_matmul(cb, w, b, x, n, y, accum, x16)) cuda_mma(cb, w, b, x, n, y, accum);
        return;
    }
    if (n > GEMV_MAX_TOK && n_in % TK == 0) {
        dim3 grid((unsigned)((n_out + TM - 1) / TM), (unsigned)((n + TN - 1) / TN));
        BK_DISPATCH(w->type, mm_tiled_kernel<TT><<<grid, 256, 0, cb->stream>>>(W, w->row_bytes, n_in, n_out,
                                                                              x, n, b, y, accum));
        return;
    }
    /* few rows of a float type (routers): a block per row (gemv_splitk_kernel) */
    if (cuda_gemv_splitk_use(w)) {
        for (int t0 = 0; t0 < n; t0 += GEMV_MAX_TOK) {
            int nt = n - t0 < GEMV_MAX_TOK ? n - t0 : GEMV_MAX_TOK;
            BK_DISPATCH(w->type, pdl_launch(cb, gemv_splitk_kernel<TT>, dim3((unsigned)n_out), dim3(GEMV_SK_WARPS * 32),
                                            0, W, w->row_bytes, n_in, n_out, x + (int64_t)t0 * n_in, nt, b,
                                            y + (int64_t)t0 * n_out, accum));
        }
        return;
    }
    if (n == 1 && mmvf_run(cb, 1, &w, &bias, x, &y, accum, NULL)) return; /* (BRISK_CUDA_ENABLE=mmvf) */
    /* rows per warp: 2 for decode-sized batches (lab: dev/kernels/gemv_lab.cu) */
    const int R = GEMV_ROWS;
    int64_t warps = (n_out + R - 1) / R;
    unsigned blocks = (unsigned)((warps + GEMV_WARPS - 1) / GEMV_WARPS);
    for (int t0 = 0; t0 < n; t0 += GEMV_MAX_TOK) {
        int nt = n - t0 < GEMV_MAX_TOK ? n - t0 : GEMV_MAX_TOK;
        BK_DISPATCH(w->type, pdl_launch(cb, gemv_kernel<TT, R>, dim3(blocks), dim3(GEMV_WARPS * 32), 0, W,
                                        w->row_bytes, n_in, n_out, x + (int64_t)t0 * n_in, nt, b,
                                        y + (int64_t)t0 * n_out, accum));
    }
}

/* The largest batch for the integer-dot products: up to MMVQ_SLICE_MAX tokens run as
 * MMVQ_MAX_TOK-token slices (cuda_mmvq.cu), unless BRISK_CUDA_DISABLE=mmvq_slices. */
static int mmvq_max_tok(const cuda_backend *cb) { return cb->mmvq_slices_off ? MMVQ_MAX_TOK : MMVQ_SLICE_MAX; }

/* Integer-dot paths by batch size: mmq_min <= n < mmq_max on int8 tensor cores (cuda_mmq.cu), else up
 * to mmvq_max_tok on the integer-dot GEMV (cuda_mmvq.cu); 0: neither (the float paths of matmul_one). */
enum { Q8_NONE = 0, Q8_MMVQ, Q8_MMQ };
static int q8_path(const cuda_backend *cb, int n) {
    if (!cb->xq) return Q8_NONE;
    if (cuda_mmq_use(cb, n)) return Q8_MMQ;
    if (!cb->mmq_off && n >= cb->mmq_max) return Q8_NONE; /* cuBLAS's batches (slices would read W n/16 times) */
    return n <= mmvq_max_tok(cb) ? Q8_MMVQ : Q8_NONE;
}

/* A matrix the f16 tensor-core kernel takes in a call whose x is n_in wide. */
static bool mmqh_takes(const cuda_backend *cb, const bk_weight *w, int64_t n_in) {
    return w->n_in == n_in && cuda_mmqh_supported(cb, w->type, w->n_in);
}

/* Whether the integer-dot path chosen for x takes w: the decode products (cuda_mmvq.cu,
 * cuda_mmvs.cu) know Q5_K, IQ4_XS and IQ4_NL too, the tensor-core batches not. */
static bool q8_takes(const cuda_backend *cb, int path, const bk_weight *w) {
    return path == Q8_MMVQ ? cuda_mmvq_dec_supported(cb, w->type, w->n_in) : cuda_mmvq_supported(w->type, w->n_in);
}

/* y = x W^T (+ bias) or y += x W^T on the integer-dot path chosen for x (already quantized). */
static void q8_matmul(cuda_backend *cb, int path, const bk_weight *w, const float *bias, int n, float *y, int accum) {
    if (path == Q8_MMQ) cuda_mmq(cb, w, bias, n, y, accum);
    else cuda_mmvq(cb, w, bias, n, y, accum);
}

extern "C" void cuda_matmul(bk_backend *be, int n_w, const bk_weight *const *w, const bk_weight *const *bias,
                            const float *x, int n, float *const *y) {
    cuda_backend *cb = (cuda_backend *)be;
    if (n <= 0) return;
    CU_ABLATE(cb, ABL_MATMUL);
    /* Decode- and batch-sized products on integer-dot types: quantize x once for all the matrices
     * (x too large for cb->xq: the float paths). */
    /* A matrix of another type in the call (a float vector such as qwen35moe's shared-expert gate
     * beside its Q4_K gate and up) takes the float path alone; the others keep theirs. */
    int path = q8_path(cb, n);
    /* batches on the f16 tensor-core kernel: x converted once for the matrices it takes */
    bool hp = false;
    if (cuda_mmqh_use(cb, n)) {
        bool any = false;
        for (int m = 0; m < n_w; m++) any |= mmqh_takes(cb, w[m], w[0]->n_in);
        hp = any && cuda_mmqh_prepare(cb, x, w[0]->n_in, n);
    }
    bool any_q8 = false;
    for (int m = 0; m < n_w && path; m++)
        any_q8 |= q8_takes(cb, path, w[m]) && !(hp && mmqh_takes(cb, w[m], w[0]->n_in));
    if (!(any_q8 && cuda_mmvq_prepare(cb, x, w[0]->n_in, n))) path = Q8_NONE;
    q8_tag tag = q8_tag_now(cb);
    if (path) tag = {x, n, w[0]->n_in};
    bool x16 = false;
    for (int m = 0; m < n_w; m++) {
        if (hp && mmqh_takes(cb, w[m], w[0]->n_in)) { /* runs of one type in one launch */
            const float *bs[MMVS_MATS];
            int cnt = n_w - m < MMVS_MATS ? n_w - m : MMVS_MATS;
            for (int i = 0; i < cnt; i++) bs[i] = bias && bias[m + i] ? (const float *)bias[m + i]->dev : NULL;
            int took = cuda_mmqh(cb, cnt, w + m, bs, n, y + m, 0);
            if (took > 0) {
                m += took - 1;
                continue;
            }
        }
        if (path == Q8_MMVQ && n <= MMVQ_MAX_TOK && n_w - m > 1) { /* runs of one type in one launch */
            const float *bs[MMVQ_MULTI_MAX];
            int cnt = n_w - m < MMVQ_MULTI_MAX ? n_w - m : MMVQ_MULTI_MAX;
            for (int i = 0; i < cnt; i++) bs[i] = bias && bias[m + i] ? (const float *)bias[m + i]->dev : NULL;
            int took = cuda_mmvq_multi(cb, cnt, w + m, bs, n, y + m);
            if (took > 0) {
                m += took - 1;
                continue;
            }
        }
        if (n == 1 && n_w - m > 1 && !(path && q8_takes(cb, path, w[m]))) { /* float runs in one launch (a
                                                                               * single matrix: matmul_one) */
            int took = mmvf_run(cb, n_w - m, w + m, bias ? bias + m : NULL, x, y + m, 0, NULL);
            if (took > 0) {
                m += took - 1;
                continue;
            }
        }
        if (path && q8_takes(cb, path, w[m]))
            q8_matmul(cb, path, w[m], bias && bias[m] ? (const float *)bias[m]->dev : NULL, n, y[m], 0);
        else matmul_one(cb, w[m], bias ? bias[m] : NULL, x, n, y[m], 0, &x16);
    }
    CU_LAUNCHED(cb);
    for (int m = 0; m < n_w; m++) {
        q8_tag_keep(cb, tag, y[m], (size_t)n * (size_t)w[m]->n_out);
        tag = q8_tag_now(cb);
    }
}

/* y += x W^T: the residual add folded into the product's store (one kernel less). */
extern "C" void cuda_matmul_add(bk_backend *be, const bk_weight *w, const float *x, int n, float *y) {
    cuda_backend *cb = (cuda_backend *)be;
    if (n <= 0) return;
    CU_ABLATE(cb, ABL_MATMUL);
    int path = q8_path(cb, n);
    if (cuda_mmqh_use(cb, n) && mmqh_takes(cb, w, w->n_in) && cuda_mmqh_prepare(cb, x, w->n_in, n) &&
        cuda_mmqh(cb, 1, &w, NULL, n, &y, 1))
        ; /* the f16 tensor-core kernel */
    else if (path && q8_takes(cb, path, w) && cuda_mmvq_prepare(cb, x, w->n_in, n))
        q8_matmul(cb, path, w, NULL, n, y, 1);
    else {
        bool x16 = false;
        matmul_one(cb, w, NULL, x, n, y, 1, &x16);
    }
    CU_LAUNCHED(cb);
}

/* out = silu(x Wgate^T) * (x Wup^T): one integer-dot launch that never stores the two products
 * (decode: cuda_mmvq.cu's GLU kernel; batches in mmq's range: cuda_mmq.cu's); others as two
 * products into out and tmp, then the gate. */
extern "C" void cuda_matmul_swiglu(bk_backend *be, const bk_weight *gate, const bk_weight *up, const float *x, int n,
                                   float *tmp, float *out) {
    cuda_backend *cb = (cuda_backend *)be;
    if (n <= 0) return;
    CU_ABLATE(cb, ABL_MATMUL);
    if (cuda_mmqh_use(cb, n) && !cb->glu_off && mmqh_takes(cb, gate, gate->n_in) &&
        cuda_mmqh_prepare(cb, x, gate->n_in, n) && cuda_mmqh_glu(cb, gate, up, n, out)) {
        CU_LAUNCHED(cb);
        return;
    }
    int path = q8_path(cb, n);
    if (path == Q8_MMVQ && n > MMVQ_MAX_TOK) path = Q8_NONE; /* the GLU kernel takes one slice */
    if (path && !cb->glu_off && q8_takes(cb, path, gate) &&
        cuda_mmvq_prepare(cb, x, gate->n_in, n) &&
        (path == Q8_MMQ ? cuda_mmq_glu(cb, gate, up, n, out) : cuda_mmvq_glu(cb, gate, up, n, out))) {
        CU_LAUNCHED(cb);
        /* x stays quantized for the products after this one (qwen35moe's routed experts) */
        q8_tag_keep(cb, q8_tag{x, n, gate->n_in}, out, (size_t)n * (size_t)gate->n_out);
        return;
    }
    if (n == 1 && !cb->glu_off && mmvf_run(cb, 1, &gate, NULL, x, &out, 0, up)) { /* float weights (BRISK_CUDA_ENABLE=mmvf) */
        CU_LAUNCHED(cb);
        return;
    }
    const bk_weight *gu[2] = {gate, up};
    float *gu_out[2] = {out, tmp};
    cuda_matmul(be, 2, gu, NULL, x, n, gu_out);
    cuda_swiglu(be, out, tmp, out, (size_t)n * (size_t)gate->n_out);
}
