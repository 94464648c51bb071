/* cuda_gemv.cu — embedding rows and the float-path kernels of the matrix products, any weight type
 * decoded to floats (which product takes which kernel: cuda_matmul.cu's ladder).
 *
 * Up to GEMV_MAX_TOK tokens: one warp per output row reads the row once,
 * decodes 8 elements per lane per step (a warp step covers 256 consecutive
 * elements, i.e. one K-quant block or eight 32-blocks) and dots them with
 * every token's activations (decode and small batches: weight-bandwidth bound).
 * Integer-dot types (Q8_0, Q4_0, Q4_K, Q6_K) quantize the activations instead
 * (cuda_mmvq.cu, cuda_mmq.cu), and batches of more tokens take tensor cores
 * (cuda_mma.cu, cuda_blas.cu, cuda_mmqh.cu); the 64x64 tiled SIMT kernel here
 * decodes each weight tile into shared memory once per 64 tokens and remains
 * for rows that are no multiple of 32 (and BRISK_CUDA_DISABLE=mma).
 */
#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/cuda_pdl.cuh"

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
bool cuda_gemv_splitk_should_use(uint32_t type, int64_t n_in, int64_t n_out) {
    return IS_FLOAT_T(type) && n_out <= 1024 && n_in % 8 == 0 && n_in >= 1024;
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
bool cuda_mm_tiled_should_use(int64_t n_in, int n) { return n > GEMV_MAX_TOK && n_in % TK == 0; }

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

/* y (n, n_out) = x W^T (+ bias), or y += x W^T when accum is set: the launches of the three kernels
 * above (cuda_matmul.cu chooses among them). */
void cuda_mm_tiled(cuda_backend *cb, const bk_weight *w, const float *bias, const float *x, int n, float *y,
                   int accum) {
    const uint8_t *W = (const uint8_t *)w->dev;
    int64_t n_in = w->n_in, n_out = w->n_out;
    dim3 grid((unsigned)((n_out + TM - 1) / TM), (unsigned)((n + TN - 1) / TN));
    BK_DISPATCH(w->type, mm_tiled_kernel<TT><<<grid, 256, 0, cb->stream>>>(W, w->row_bytes, n_in, n_out, x, n,
                                                                          bias, y, accum));
}

void cuda_gemv_splitk(cuda_backend *cb, const bk_weight *w, const float *bias, const float *x, int n, float *y,
                      int accum) {
    const uint8_t *W = (const uint8_t *)w->dev;
    int64_t n_in = w->n_in, n_out = w->n_out;
    for (int t0 = 0; t0 < n; t0 += GEMV_MAX_TOK) {
        int nt = n - t0 < GEMV_MAX_TOK ? n - t0 : GEMV_MAX_TOK;
        BK_DISPATCH(w->type, pdl_launch(cb, gemv_splitk_kernel<TT>, dim3((unsigned)n_out), dim3(GEMV_SK_WARPS * 32),
                                        0, W, w->row_bytes, n_in, n_out, x + (int64_t)t0 * n_in, nt, bias,
                                        y + (int64_t)t0 * n_out, accum));
    }
}

void cuda_gemv(cuda_backend *cb, const bk_weight *w, const float *bias, const float *x, int n, float *y, int accum) {
    const uint8_t *W = (const uint8_t *)w->dev;
    int64_t n_in = w->n_in, n_out = w->n_out;
    /* rows per warp: 2 for decode-sized batches (lab: dev/kernels/gemv_lab.cu) */
    const int R = GEMV_ROWS;
    int64_t warps = (n_out + R - 1) / R;
    unsigned blocks = (unsigned)((warps + GEMV_WARPS - 1) / GEMV_WARPS);
    for (int t0 = 0; t0 < n; t0 += GEMV_MAX_TOK) {
        int nt = n - t0 < GEMV_MAX_TOK ? n - t0 : GEMV_MAX_TOK;
        BK_DISPATCH(w->type, pdl_launch(cb, gemv_kernel<TT, R>, dim3(blocks), dim3(GEMV_WARPS * 32), 0, W,
                                        w->row_bytes, n_in, n_out, x + (int64_t)t0 * n_in, nt, bias,
                                        y + (int64_t)t0 * n_out, accum));
    }
}
