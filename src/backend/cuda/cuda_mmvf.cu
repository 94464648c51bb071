/* cuda_mmvf.cu — one token's products on float weights (F16, BF16, F32), the weight rows streamed
 * into shared memory by Hopper's bulk-copy engine as cuda_mmvs.cu streams the quantized ones.
 *
 * Why: the float GEMV of cuda_gemv.cu (a warp per row pair, each lane holding one 16-byte load per
 * row in flight) is the kernel a BF16 or F16 model's decode step runs on, and it keeps too few
 * bytes in flight to approach the bandwidth; a BF16 8B model reads 16 GB a token. Here, as in
 * cuda_mmvs.cu, one block per SM stays resident, each warp owns a ring of shared-memory stages and
 * its lane 0 asks the copy engine for contiguous runs of a row (cp.async.bulk, completion counted in
 * bytes on an mbarrier per stage), so each SM keeps up to ~150 KB of copies in flight without
 * registers or load instructions.
 *
 * What differs from the quantized kernel: the activations stay floats (no int8 rounding of a BF16
 * model's inputs) and live once per block in shared memory, not in the lanes' registers (a
 * 4,096-wide row would need 128 registers a lane). So that rows of any width fit, a stage holds a
 * chunk of a row, not a whole one: a warp walks its rows chunk by chunk, adding each chunk's products
 * into its lanes' sums, and reduces and stores a row after its last chunk. Lane l reads 4 weights
 * and the 4 matching activations at a time (8 or 16 bytes of weights, 16 of activations: consecutive
 * lanes read consecutive bytes of both, free of bank conflicts). A lane adds its products in a fixed
 * order, so the results are the same every run.
 *
 * Rows are dealt to warps round-robin as in cuda_mmvs.cu; up to MMVS_MATS matrices of one type and
 * width run as one launch over their concatenated rows (a layer's q, k, v); the gate/up pair of the
 * SwiGLU runs as one launch whose stages hold a gate chunk and the up chunk beside it.
 *
 * Off unless BRISK_CUDA_ENABLE=mmvf. It won on an H100 (BF16 qwen3-8b tg128 161.7 against 127.1
 * tokens/s with the float GEMV), but its op test (make test-cuda: matmul_float_stream) has not yet
 * run on a GPU; dev/kernels/mmvf_lab.cu times it. */
#include "backend/cuda/cuda_bulk.cuh"

#define MMVF_WARPS 16
#define MMVF_SMEM_MAX (200 * 1024) /* as cuda_mmvs.cu: of the H200's 227 KB per block */
#define MMVF_STAGES_MAX 8
#define MMVF_CHUNK_MAX 8192 /* bytes of a row per copy */
#define MMVF_CHUNK_MIN 1024 /* rows cut into smaller chunks move poorly: the float GEMV instead (rows that fit one chunk stream whole) */
#define MMVF_MIN_ROWS 1024  /* fewer rows (a MoE router): gemv_splitk_kernel, a block per row */

/* 4 consecutive weights of a float row as floats (p: 8 bytes for F16 / BF16, 16 for F32, aligned). */
template <int T> __device__ __forceinline__ float4 mmvf_w4(const uint8_t *p) {
    if constexpr (T == QT_F32) {
        return *(const float4 *)p;
    } else {
        const uint2 u = *(const uint2 *)p;
        if constexpr (T == QT_BF16) {
            return make_float4(__uint_as_float(u.x << 16), __uint_as_float(u.x & 0xFFFF0000u),
                               __uint_as_float(u.y << 16), __uint_as_float(u.y & 0xFFFF0000u));
        } else {
            const float2 a = __half22float2(*(const __half2 *)&u.x), b = __half22float2(*(const __half2 *)&u.y);
            return make_float4(a.x, a.y, b.x, b.y);
        }
    }
}
template <int T> __host__ __device__ constexpr uint32_t mmvf_esize() { return T == QT_F32 ? 4 : 2; }

__host__ __device__ __forceinline__ size_t mmvf_x_bytes(int64_t n_in) { return ((size_t)n_in * 4 + 127) & ~(size_t)127; }

/* Item j of a warp (j = 0, 1, ...): chunk j % nch of its row j / nch (rows gg, gg + ng, ...), into a
 * stage at dst. The chunks are chunk bytes, the last one what remains of the row; rows start on
 * 16 bytes and their bytes are a multiple of 16 (mmvf_take), so every copy is aligned. */
template <bool GLU>
__device__ __forceinline__ void mmvf_issue(const mmvs_mats &mm, int64_t gg, int64_t ng, int64_t j, int nch,
                                           uint32_t row_bytes, uint32_t chunk, uint8_t *dst, uint64_t *bar,
                                           uint64_t policy) {
    const int64_t r = gg + (j / nch) * ng;
    const uint32_t off = (uint32_t)(j % nch) * chunk, len = row_bytes - off < chunk ? row_bytes - off : chunk;
    mbar_expect_bytes(bar, GLU ? 2 * len : len);
    bulk_copy_g2s(dst, mmvs_row_src(mm, r, row_bytes) + off, len, bar, policy);
    if (GLU) bulk_copy_g2s(dst + chunk, mm.W2 + r * (int64_t)row_bytes + off, len, bar, policy);
}

template <int T, bool GLU>
__global__ void __launch_bounds__(MMVF_WARPS * 32, 1)
mmvf_kernel(mmvs_mats mm, uint32_t row_bytes, int64_t n_in, const float *x, int accum, int stages, int pre,
            uint32_t chunk, int nch) {
    BK_TRACE_SCOPE(); /* (a trace build only) */
    constexpr int NW = MMVF_WARPS;
    constexpr uint32_t ES = mmvf_esize<T>(), PB = 4 * ES; /* bytes of 4 weights */
    extern __shared__ __align__(128) uint8_t mmvf_smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const uint32_t stage_bytes = GLU ? 2 * chunk : chunk;
    uint64_t *bar = (uint64_t *)mmvf_smem + warp * stages;
    float *xs = (float *)(mmvf_smem + mmvs_bar_bytes(NW, stages));
    uint8_t *ring = (uint8_t *)xs + mmvf_x_bytes(n_in) + (size_t)warp * stages * stage_bytes;
    const int64_t n_rows = mm.count > 2 ? mm.rend[2] : mm.count > 1 ? mm.rend[1] : mm.rend[0];
    const int64_t gg = (int64_t)blockIdx.x * NW + warp, ng = (int64_t)gridDim.x * NW;
    const int64_t mine = gg < n_rows ? (n_rows - 1 - gg) / ng + 1 : 0, items = mine * nch;
    const uint64_t policy = bulk_evict_first();
    /* the weights depend on no earlier kernel: the first pre stages go out before pdl_wait (as
     * cuda_mmvs.cu's, mmvs_pre_stages), the rest once the activations are in shared memory */
    const int64_t n_fill = items < stages ? items : stages, n_pre = pre < n_fill ? pre : n_fill;
    if (lane == 0)
        ring_start(bar, stages, n_pre, [&](int64_t j) {
            mmvf_issue<GLU>(mm, gg, ng, j, nch, row_bytes, chunk, ring + (size_t)j * stage_bytes, bar + j, policy);
        });
    __syncwarp();
    pdl_wait();
    for (int64_t i = threadIdx.x; i < n_in / 4; i += NW * 32) ((float4 *)xs)[i] = ((const float4 *)x)[i];
    __syncthreads();
    if (lane == 0)
        for (int64_t j = n_pre; j < n_fill; j++)
            mmvf_issue<GLU>(mm, gg, ng, j, nch, row_bytes, chunk, ring + (size_t)j * stage_bytes, bar + j, policy);
    __syncwarp();
    float a = 0.0f, b = 0.0f;
    int s = 0, c = 0;
    uint32_t parity = 0;
    int64_t row = 0; /* the warp's row index: its row gg + row * ng */
    for (int64_t j = 0; j < items; j++) {
        mbar_wait(bar + s, parity);
        const uint32_t off = (uint32_t)c * chunk, len = row_bytes - off < chunk ? row_bytes - off : chunk;
        const uint8_t *st = ring + (size_t)s * stage_bytes;
        const float4 *xc = (const float4 *)(xs + off / ES);
#pragma unroll 4
        for (uint32_t p = lane; p < len / PB; p += 32) {
            const float4 v = xc[p], w = mmvf_w4<T>(st + p * PB);
            a = fmaf(w.x, v.x, a);
            a = fmaf(w.y, v.y, a);
            a = fmaf(w.z, v.z, a);
            a = fmaf(w.w, v.w, a);
            if (GLU) {
                const float4 u = mmvf_w4<T>(st + chunk + p * PB);
                b = fmaf(u.x, v.x, b);
                b = fmaf(u.y, v.y, b);
                b = fmaf(u.z, v.z, b);
                b = fmaf(u.w, v.w, b);
            }
        }
        __syncwarp(); /* every lane has read the stage: it may be refilled */
        if (lane == 0 && j + stages < items)
            mmvf_issue<GLU>(mm, gg, ng, j + stages, nch, row_bytes, chunk, ring + (size_t)s * stage_bytes, bar + s,
                            policy);
        if (++s == stages) {
            s = 0;
            parity ^= 1u;
        }
        if (++c == nch) { /* the row's last chunk */
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) {
                a += __shfl_xor_sync(0xffffffffu, a, o);
                if (GLU) b += __shfl_xor_sync(0xffffffffu, b, o);
            }
            if (lane == 0) mmvs_store<GLU>(mm, gg + row * ng, a, b, accum);
            a = b = 0.0f;
            c = 0;
            row++;
        }
    }
}

/* The chunk size and stage count for rows of row_bytes (GLU: a gate and an up chunk a stage): the
 * activations take their n_in floats of shared memory, each warp the rest in equal shares; a chunk
 * of at most MMVF_CHUNK_MAX bytes, at least three stages a warp, and the row cut into chunks of
 * equal size (rounded up to 16). False: no room for two stages of MMVF_CHUNK_MIN bytes. */
static bool mmvf_plan(const cuda_backend *cb, uint32_t row_bytes, int64_t n_in, bool glu, int64_t per_warp_rows,
                      uint32_t *chunk, int *nch, int *stages, size_t *smem) {
    const size_t smem_max = MMVF_SMEM_MAX;
    const size_t fixed = mmvs_bar_bytes(MMVF_WARPS, MMVF_STAGES_MAX) + mmvf_x_bytes(n_in);
    if (fixed >= smem_max) return false;
    const size_t warp_bytes = (smem_max - fixed) / MMVF_WARPS, g = glu ? 2 : 1;
    size_t cmax = warp_bytes / (3 * g);
    if (cmax < MMVF_CHUNK_MIN) cmax = warp_bytes / (2 * g);
    if (cmax > MMVF_CHUNK_MAX) cmax = MMVF_CHUNK_MAX;
    cmax &= ~(size_t)15;
    if (cmax < MMVF_CHUNK_MIN && cmax < row_bytes) return false;
    int n = (int)((row_bytes + cmax - 1) / cmax);
    const uint32_t c = (uint32_t)(((row_bytes + n - 1) / n + 15) & ~(uint32_t)15);
    n = (int)((row_bytes + c - 1) / c); /* (the rounding up may leave the last chunk nothing) */
    int st = (int)(warp_bytes / (g * c));
    if (st > MMVF_STAGES_MAX) st = MMVF_STAGES_MAX;
    if ((int64_t)st > per_warp_rows * n) st = (int)(per_warp_rows * n); /* no more stages than items */
    if (st < 1) return false;
    *chunk = c;
    *nch = n;
    *stages = st;
    *smem = mmvs_bar_bytes(MMVF_WARPS, st) + mmvf_x_bytes(n_in) + (size_t)MMVF_WARPS * st * g * c;
    return true;
}

template <int T, bool GLU>
static bool mmvf_go(cuda_backend *cb, const mmvs_mats &mm, uint32_t row_bytes, int64_t n_in, const float *x,
                    int accum, int64_t n_rows) {
    int64_t blocks = (n_rows + MMVF_WARPS - 1) / MMVF_WARPS;
    if (blocks > cb->n_sm) blocks = cb->n_sm;
    const int64_t per_warp = (n_rows + blocks * MMVF_WARPS - 1) / (blocks * MMVF_WARPS);
    uint32_t chunk;
    int nch, stages;
    size_t smem;
    if (!mmvf_plan(cb, row_bytes, n_in, GLU, per_warp, &chunk, &nch, &stages, &smem)) return false;
    static int attr_set[64]; /* per device: the opt-in to more than 48 KB of dynamic shared memory */
    const int dev = cb->device & 63;
    if (!attr_set[dev]) {
        if (cudaFuncSetAttribute(mmvf_kernel<T, GLU>, cudaFuncAttributeMaxDynamicSharedMemorySize, MMVF_SMEM_MAX) !=
            cudaSuccess) {
            (void)cudaGetLastError();
            return false;
        }
        attr_set[dev] = 1;
    }
    pdl_launch(cb, mmvf_kernel<T, GLU>, dim3((unsigned)blocks), dim3(MMVF_WARPS * 32), smem, mm, row_bytes, n_in, x,
               accum, stages, mmvs_pre_stages(cb, n_in, stages), chunk, nch);
    CU_COUNT(cb, CU_PATH_MMVF);
    return true;
}

/* Whether cuda_mmvf takes weights of this type and shape at one token. */
static bool mmvf_takes(const cuda_backend *cb, uint32_t type, int64_t n_in, int64_t n_out, size_t row_bytes) {
    return cb->mmvf_on && (type == QT_F16 || type == QT_BF16 || type == QT_F32) && n_in % 4 == 0 &&
           row_bytes % 16 == 0 && row_bytes <= UINT32_MAX / 4 && n_out >= MMVF_MIN_ROWS;
}

/* One token: y[m] (+)= x W[m]^T (+ bias[m]) for mm.count matrices of one float type and width, or
 * with GLU (count 1, W2 the up matrix) y[0] = silu(x W^T) * (x W2^T). x: n_in floats, 16-byte
 * aligned. False when this kernel does not take the shape (the caller runs the float GEMV). */
bool cuda_mmvf(cuda_backend *cb, uint32_t type, bool glu, const mmvs_mats &mm, size_t row_bytes, int64_t n_in,
               const float *x, int accum) {
    const int64_t n_rows = mm.rend[mm.count - 1];
    if (!mmvf_takes(cb, type, n_in, n_rows, row_bytes) || (uintptr_t)x % 16) return false;
    for (int m = 0; m < mm.count; m++)
        if ((uintptr_t)mm.W[m] % 16) return false;
    if (glu && (mm.count != 1 || (uintptr_t)mm.W2 % 16)) return false;
    const uint32_t rb = (uint32_t)row_bytes;
    switch (type) {
    case QT_F16: return glu ? mmvf_go<QT_F16, true>(cb, mm, rb, n_in, x, accum, n_rows)
                            : mmvf_go<QT_F16, false>(cb, mm, rb, n_in, x, accum, n_rows);
    case QT_BF16: return glu ? mmvf_go<QT_BF16, true>(cb, mm, rb, n_in, x, accum, n_rows)
                             : mmvf_go<QT_BF16, false>(cb, mm, rb, n_in, x, accum, n_rows);
    case QT_F32: return glu ? mmvf_go<QT_F32, true>(cb, mm, rb, n_in, x, accum, n_rows)
                            : mmvf_go<QT_F32, false>(cb, mm, rb, n_in, x, accum, n_rows);
    default: return false;
    }
}

bool cuda_mmvf_should_use(const cuda_backend *cb, uint32_t type, int n) {
    return n == 1 && cb->mmvf_on && (type == QT_F16 || type == QT_BF16 || type == QT_F32);
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

/* mmvs_run's matrices of w in one launch; 0 (nothing launched) where cuda_mmvf refuses them. */
int cuda_mmvf_run(cuda_backend *cb, int n_w, const bk_weight *const *w, const bk_weight *const *bias, const float *x,
                  float *const *y, int accum, const bk_weight *up) {
    if (!cb->mmvf_on) return 0;
    const mmvs_mats mm = mmvs_run(n_w, w, bias, y, up);
    return mm.count && cuda_mmvf(cb, w[0]->type, up != NULL, mm, w[0]->row_bytes, w[0]->n_in, x, accum) ? mm.count
                                                                                                       : 0;
}
