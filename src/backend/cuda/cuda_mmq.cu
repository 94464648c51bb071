/* cuda_mmq.cu — small and medium batches (cb->mmq_min <= n < cb->mmq_max tokens, by default
 * 8..127) on quantized weights with int8 tensor cores: y (n, n_out) = x W^T (+ bias), y += x W^T,
 * or silu(x Wgate^T) * (x Wup^T), on activations quantized once per call (cuda_mmvq_quantize).
 *
 * Why: the integer-dot GEMV of cuda_mmvq.cu reads the weights once per 16 tokens and spends
 * ~8 __dp4a per group and token, so 16 tokens cost ~3x one token and 32 sequences decode at a
 * third of llama.cpp's speed; one m16n8k32 mma does the work of 128 __dp4a. The kernel (shared
 * with the expert products of cuda_moe.cu) lives in cuda_mmq.cuh; dev/kernels/mmq_lab.cu times it
 * against the mmvq slices and cuBLAS, and checks it against mmvq. (A first kernel, 32 rows per block
 * with each lane unpacking one row into shared memory, reached 11-20% of bandwidth on the H200 and
 * was removed after this one replaced it: 32 sequences 1,953 -> 2,711 tok/s; bench/RESULTS.md.) */
#include "backend/cuda/cuda_mmq.cuh"

/* Token tile for a batch: the smallest of 8, 16, 32 that holds it, larger batches as tiles of 32 (a
 * 64-token tile needs ~170 registers: one block per SM; H200, q4_K 4096 x 4096, 64 tokens: 62 us
 * as one tile) */
static int mmq_tile(int n) { return n <= 8 ? 8 : n <= 16 ? 16 : 32; }

/* Batches of mmq_min <= n < mmq_max tokens on the integer-dot types (the activations quantized into cb->xq). */
bool cuda_mmq_use(const cuda_backend *cb, int n) {
    return cb->xq && !cb->mmq_off && n >= cb->mmq_min && n < cb->mmq_max;
}

/* The tensor-core batches know the types of cuda_mmvq_supported, not the decode-only ones. */
bool cuda_mmq_should_use(const cuda_backend *cb, uint32_t type, int64_t n_in, int n) {
    return cuda_mmq_use(cb, n) && cuda_mmvq_supported(type, n_in);
}

bool cuda_mmq_glu_should_use(const cuda_backend *cb, uint32_t type, int64_t n_in, int n) {
    return !cb->glu_off && cuda_mmq_should_use(cb, type, n_in, n);
}

/* The arguments of a dense launch over w's rows into y (n, w->n_out), on the quantized activations. */
static mmq_args mmq_dense_args(const cuda_backend *cb, const bk_weight *w, int n, float *y) {
    mmq_args p = {};
    p.W = (const uint8_t *)w->dev;
    p.row_bytes = w->row_bytes;
    p.n_in = w->n_in;
    p.n_rows = w->n_out;
    p.xq = cb->xq;
    p.xds = cb->xds;
    p.y = y;
    p.ldy = w->n_out;
    p.n = n;
    return p;
}

/* y = x W^T for activations already quantized into cb->xq / cb->xds (n rows of w->n_in). */
void cuda_mmq(cuda_backend *cb, const bk_weight *w, const float *bias, int n, float *y, int accum) {
    int nt = mmq_tile(n);
    mmq_args p = mmq_dense_args(cb, w, n, y);
    p.bias = bias;
    p.accum = accum;
    p.mode = MMQ_STORE;
    unsigned tiles = (unsigned)((n + nt - 1) / nt);
    const int mt = mmq_mt(cb, w->type, nt, w->n_out), rows = MMQ_DENSE_ROWS * mt;
    dim3 grid((unsigned)((w->n_out + rows - 1) / rows), tiles);
    mmq_launch<false, false>(cb, w->type, grid, nt, mt, p);
}

/* out (n, n_ff) = silu(x Wgate^T) * (x Wup^T) for activations already quantized: a warp tile's 16
 * rows are 8 gate rows and the same 8 up rows (false: types or shapes it does not take). */
bool cuda_mmq_glu(cuda_backend *cb, const bk_weight *gate, const bk_weight *up, int n, float *out) {
    if (gate->type != up->type || gate->n_in != up->n_in || gate->n_out != up->n_out ||
        gate->row_bytes != up->row_bytes || !cuda_mmvq_supported(gate->type, gate->n_in))
        return false;
    int nt = mmq_tile(n);
    mmq_args p = mmq_dense_args(cb, gate, n, out);
    p.W2 = (const uint8_t *)up->dev;
    unsigned tiles = (unsigned)((n + nt - 1) / nt);
    const int mt = mmq_mt(cb, gate->type, nt, 2 * gate->n_out), rows = MMQ_DENSE_ROWS / 2 * mt;
    dim3 grid((unsigned)((gate->n_out + rows - 1) / rows), tiles);
    return mmq_launch<true, false>(cb, gate->type, grid, nt, mt, p);
}
