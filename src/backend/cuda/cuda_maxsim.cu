/* cuda_maxsim.cu — late interaction (ColBERT's MaxSim) of one query against many documents:
 * scores[j] = sum over the query rows i of max over document j's rows r of q_i . d_r (backend.h's
 * maxsim op; engine/pooling.c's brisk_maxsim_batch is its caller and the CPU reference).
 *
 * The documents' rows lie one after another (off: where each document starts), so a block takes
 * DT = 128 consecutive rows whatever documents they belong to: short documents (16 rows) fill a
 * tile as well as long ones (2,048), and the grid is as large as the rows, however few the
 * documents. Each block computes the QT x DT tile of q d^T as a register-tiled SIMT product (k
 * in stages of MS_KT, double-buffered in shared memory, a thread TM x 4 values), then reduces each
 * tile row per document in the tile (the segmented maximum) and merges it into a running maximum
 * per (document, query row) in global memory with atomicMax on an order-preserving integer
 * encoding. The (n_q, n_rows) similarity matrix never leaves the registers; the running maxima
 * (n_docs x n_q values) are the only intermediate. A second launch sums them per document.
 *
 * Bytes and work: every document row is read once per QT query rows (once for n_q <= 64: QT is
 * picked from n_q, 8 to 64), 4 * dim bytes for 2 * QT * dim flops, so n_q = 32 is 16 flop/byte:
 * near an H100's ridge for f32 SIMT (67 TFLOP/s over 3.35 TB/s); n_q 64 is bound by the FMA
 * pipes, n_q <= 16 by the memory. The query tile is re-read from the L2 for each block (QT/DT of
 * the document bytes). Measured by dev/kernels/maxsim_lab.cu (not yet on a GPU).
 *
 * Normalising (normalize): a row's dots are scaled by its inverse L2 norm instead of the row
 * being rewritten: the document rows' sums of squares come from the values the block loads
 * anyway, the query rows' once by the first launch; a zero row scales to 0 as
 * brisk_embd_normalize leaves it. Products are fp32 FMA (another summation order than the CPU's:
 * the tests allow 1e-5 relative, tests/test_cuda_ops.c's maxsim). */
#include "backend/cuda/cuda_internal.cuh"

#define MS_THREADS 256
#define MS_KT 16 /* dim per stage: a row's 64 contiguous bytes */
#define MS_DT 128 /* document rows per block: 4 warps across x 8 lanes x 4 columns */

/* Multiply-adds (n_q x document rows x dim) from which brisk_maxsim_batch sends a call to the GPU: the
 * default of BRISK_CUDA_MAXSIM_MIN. UNMEASURED: chosen so that the CPU's scalar loop would take
 * several milliseconds (16.8M multiply-adds: 32 query rows against 32 documents of 128 rows at dim
 * 128), well above the GPU's fixed costs (the device scratch's first allocation, three copies from
 * pageable memory, three launches, one synchronisation). dev/kernels/maxsim_lab.cu's table (GPU and
 * CPU at several sizes, the copies counted) is to set it on a GPU. */
#define MAXSIM_MIN_MACS (1 << 24)
static_assert(CUDA_PLAN_MAXSIM_MIN == MAXSIM_MIN_MACS, "cuda_plan.h");

/* A call of n_q query rows against n_rows document rows of dim goes to the GPU (pure: the plan and
 * the sizes). */
bool cuda_maxsim_should_use(const cuda_backend *cb, int n_q, int64_t n_rows, int dim) {
    return n_q > 0 && n_rows > 0 && dim > 0 && (double)n_q * (double)n_rows * dim >= (double)cb->plan.maxsim_min;
}

extern "C" bool bk_cuda_maxsim_should_use(bk_backend *be, int n_q, int64_t n_rows, int dim) {
    return bk_backend_is_cuda(be, NULL) && cuda_maxsim_should_use((const cuda_backend *)be, n_q, n_rows, dim);
}

/* An f32 as an unsigned int of the same order (0 below every float): the running maxima start
 * as zeros and merge with integer atomicMax. */
__device__ __forceinline__ unsigned ms_enc(float f) {
    unsigned u = __float_as_uint(f);
    return u & 0x80000000u ? ~u : u | 0x80000000u;
}
__device__ __forceinline__ float ms_dec(unsigned u) {
    return __uint_as_float(u & 0x80000000u ? u & 0x7fffffffu : ~u);
}

/* N floats from shared memory at p (N * 4 bytes aligned: the callers' offsets are multiples of N). */
template <int N> __device__ __forceinline__ void ms_lds(const float *p, float *v) {
    if constexpr (N % 4 == 0) {
#pragma unroll
        for (int i = 0; i < N / 4; i++) {
            const float4 t = ((const float4 *)p)[i];
            v[4 * i] = t.x, v[4 * i + 1] = t.y, v[4 * i + 2] = t.z, v[4 * i + 3] = t.w;
        }
    } else if constexpr (N == 2) {
        const float2 t = *(const float2 *)p;
        v[0] = t.x, v[1] = t.y;
    } else {
        v[0] = p[0];
    }
}

/* The first launch: the running maxima to "none" (0) and the query rows' scales (their inverse
 * L2 norms, summed in double as brisk_embd_normalize does; 1 without normalize). */
__global__ void maxsim_prep_kernel(const float *__restrict__ q, int n_q, int dim, bool normalize,
                                   unsigned *__restrict__ best, size_t n_best, float *__restrict__ qs) {
    for (size_t i = (size_t)blockIdx.x * blockDim.x + threadIdx.x; i < n_best; i += (size_t)gridDim.x * blockDim.x)
        best[i] = 0;
    if (blockIdx.x) return;
    const int lane = threadIdx.x % 32;
    for (int r = threadIdx.x / 32; r < n_q; r += blockDim.x / 32) {
        double s = 0;
        if (normalize)
            for (int k = lane; k < dim; k += 32) s += (double)q[(size_t)r * dim + k] * q[(size_t)r * dim + k];
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
        if (lane == 0) qs[r] = !normalize ? 1.0f : s > 0 ? (float)(1.0 / sqrt(s)) : 0.0f;
    }
}

/* One block: query rows [q0, q0 + QT) (QT = 8 TM) against document rows [row0, row0 + MS_DT).
 * Warps 2 (query) x 4 (rows), lanes 4 x 8, a thread TM query rows x 4 consecutive document rows.
 * Shared memory holds the stages k-major (q: [MS_KT][QT + 4], d: [MS_KT][DT + 4]: the padding puts
 * the loaders' 32 stores of a warp, 8 k x 4 rows, in 32 banks) and afterwards, in the same bytes,
 * the tile's maxima per (query row, document) before they go to global memory. */
template <int TM>
__global__ void __launch_bounds__(MS_THREADS, 2)
    maxsim_kernel(const float *__restrict__ q, int n_q, const float *__restrict__ d, int64_t n_rows,
                  const int32_t *__restrict__ off, int n_docs, int dim, bool normalize, int n_qt,
                  unsigned *__restrict__ best) {
    constexpr int QT = 8 * TM, DT = MS_DT, TN = 4, QP = QT + 4, DP = DT + 4;
    constexpr int QL = (QT * MS_KT + MS_THREADS - 1) / MS_THREADS, DL = DT * MS_KT / MS_THREADS;
    constexpr int OPER = 2 * MS_KT * (QP + DP), TILE = QT * DT;
    static_assert(DL * MS_THREADS == DT * MS_KT && DT % 32 == 0, "loader");
    __shared__ __align__(16) float sm[OPER > TILE ? OPER : TILE];
    __shared__ int cdoc[DT], cslot[DT]; /* each row's document (-1: past the end), its first column here */
    __shared__ float ssq[DT];           /* each row's sum of squares, then its scale */
    float *const qsm = sm, *const dsm = sm + 2 * MS_KT * QP;

    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const int tile = blockIdx.x / n_qt, q0 = blockIdx.x % n_qt * QT;
    const int64_t row0 = (int64_t)tile * DT;
    const int qb = ((warp / 4) * 4 + lane / 8) * TM, db = ((warp % 4) * 8 + lane % 8) * TN;

    if (tid < DT) { /* the row's document: the last j with off[j] <= row (empty documents hold none) */
        const int64_t row = row0 + tid;
        int doc = -1, slot = 0;
        if (row < n_rows) {
            int lo = 0, hi = n_docs - 1;
            while (lo < hi) {
                const int mid = (lo + hi + 1) / 2;
                if (off[mid] <= row) lo = mid;
                else hi = mid - 1;
            }
            doc = lo;
            slot = off[lo] > row0 ? (int)(off[lo] - row0) : 0;
        }
        cdoc[tid] = doc;
        cslot[tid] = slot;
        ssq[tid] = 0.0f;
    }

    /* Loader: element e = tid + 256 i of a stage is row (e / 8) % ROWS, k 8 (e / 8 / ROWS) + e % 8:
     * 8 lanes read 32 contiguous bytes of a row, a warp 4 rows. A thread's rows are the same at every
     * stage (lr + a multiple of 32, or for QT < 32 of QT), so its squares add up across stages (ss) for
     * the norms, and its loads are one base pointer plus constants. */
    const int lr = tid / 8, lk = tid % 8;
    const float *const qg = q + (size_t)q0 * dim + lk, *const dg = d + (size_t)row0 * dim + lk;
    float rq[QL], rd[DL], ss[DL], acc[TM][TN];
#pragma unroll
    for (int i = 0; i < DL; i++) ss[i] = 0.0f;
#pragma unroll
    for (int m = 0; m < TM; m++)
#pragma unroll
        for (int n = 0; n < TN; n++) acc[m][n] = 0.0f;
    auto load = [&](int k0) {
#pragma unroll
        for (int i = 0; i < QL; i++) {
            const int e8 = lr + 32 * i, r = e8 % QT, k = k0 + e8 / QT * 8;
            rq[i] = e8 < QT * MS_KT / 8 && q0 + r < n_q && k + lk < dim ? __ldg(qg + (size_t)r * dim + k) : 0.0f;
        }
#pragma unroll
        for (int i = 0; i < DL; i++) {
            const int r = lr + 32 * i % DT, k = k0 + 32 * i / DT * 8; /* (DT a multiple of 32) */
            rd[i] = row0 + r < n_rows && k + lk < dim ? __ldg(dg + (size_t)r * dim + k) : 0.0f;
        }
    };
    auto store = [&](int buf) {
#pragma unroll
        for (int i = 0; i < QL; i++) {
            const int e8 = lr + 32 * i;
            if (e8 < QT * MS_KT / 8) qsm[buf * MS_KT * QP + (e8 / QT * 8 + lk) * QP + e8 % QT] = rq[i];
        }
#pragma unroll
        for (int i = 0; i < DL; i++) {
            dsm[buf * MS_KT * DP + (32 * i / DT * 8 + lk) * DP + lr + 32 * i % DT] = rd[i];
            ss[i] = fmaf(rd[i], rd[i], ss[i]);
        }
    };

    load(0);
    store(0);
    __syncthreads();
    const int n_stage = (dim + MS_KT - 1) / MS_KT;
    for (int s = 0; s < n_stage; s++) {
        const int buf = s & 1;
        const bool more = s + 1 < n_stage;
        if (more) load((s + 1) * MS_KT); /* in flight while this stage is multiplied */
        const float *qa = qsm + buf * MS_KT * QP + qb, *da = dsm + buf * MS_KT * DP + db;
#pragma unroll
        for (int kk = 0; kk < MS_KT; kk++) {
            float a[TM], b[TN];
            ms_lds<TM>(qa + kk * QP, a);
            ms_lds<TN>(da + kk * DP, b);
#pragma unroll
            for (int m = 0; m < TM; m++)
#pragma unroll
                for (int n = 0; n < TN; n++) acc[m][n] = fmaf(a[m], b[n], acc[m][n]);
        }
        if (more) store(buf ^ 1); /* the other buffer: every thread finished reading it before the last sync */
        __syncthreads();
    }

    if (normalize) { /* each row's squares: 8 lanes hold its k's of a stage, a thread may hold it twice */
#pragma unroll
        for (int i = 0; i < DL; i++) {
            float v = ss[i];
            v += __shfl_xor_sync(0xffffffffu, v, 1);
            v += __shfl_xor_sync(0xffffffffu, v, 2);
            v += __shfl_xor_sync(0xffffffffu, v, 4);
            if (lk == 0) atomicAdd(&ssq[lr + 32 * i % DT], v);
        }
    }
    unsigned *const tb = (unsigned *)sm; /* (QT, DT): the operands are done with */
    for (int i = tid; i < TILE; i += MS_THREADS) tb[i] = 0;
    __syncthreads();
    if (tid < DT) ssq[tid] = !normalize ? 1.0f : ssq[tid] > 0.0f ? 1.0f / sqrtf(ssq[tid]) : 0.0f;
    __syncthreads();

    /* Each thread's 4 columns, document by document (they are in order; past the end they are -1) */
#pragma unroll
    for (int m = 0; m < TM; m++) {
        if (q0 + qb + m >= n_q) break;
        int cur = -1, slot = 0;
        float mx = 0.0f;
#pragma unroll
        for (int n = 0; n < TN; n++) {
            const int c = db + n, doc = cdoc[c];
            if (doc < 0) break;
            const float v = acc[m][n] * ssq[c];
            if (doc != cur) {
                if (cur >= 0) atomicMax(&tb[(qb + m) * DT + slot], ms_enc(mx));
                cur = doc, slot = cslot[c], mx = v;
            } else {
                mx = fmaxf(mx, v);
            }
        }
        if (cur >= 0) atomicMax(&tb[(qb + m) * DT + slot], ms_enc(mx));
    }
    __syncthreads();
    for (int i = tid; i < TILE; i += MS_THREADS) {
        const unsigned u = tb[i];
        if (u) atomicMax(&best[(size_t)cdoc[i % DT] * n_q + q0 + i / DT], u); /* slot i % DT: its first column */
    }
}

/* The second launch, a warp per document: the sum over the query rows of their scale times their
 * maximum, in double as the CPU sums; an empty document scores 0. */
__global__ void maxsim_sum_kernel(const unsigned *__restrict__ best, const float *__restrict__ qs, int n_q,
                                  const int32_t *__restrict__ off, int n_docs, float *__restrict__ scores) {
    const int j = (int)(((size_t)blockIdx.x * blockDim.x + threadIdx.x) / 32), lane = threadIdx.x % 32;
    if (j >= n_docs) return;
    double s = 0;
    if (off[j + 1] > off[j])
        for (int i = lane; i < n_q; i += 32) s += (double)qs[i] * ms_dec(best[(size_t)j * n_q + i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    if (lane == 0) scores[j] = (float)s;
}

template <int TM>
static void maxsim_launch(cuda_backend *cb, const float *q, int n_q, const float *d, int64_t n_rows, const int32_t *off,
                          int n_docs, int dim, bool normalize, unsigned *best) {
    const int n_qt = (n_q + 8 * TM - 1) / (8 * TM);
    const int64_t blocks = (n_rows + MS_DT - 1) / MS_DT * n_qt;
    if (blocks > INT32_MAX) {
        cuda_set_error(cb, bk_fail(BRISK_ERR_RANGE, "cuda maxsim: %lld rows x %d query rows is too large a grid",
                                   (long long)n_rows, n_q));
        return;
    }
    maxsim_kernel<TM><<<(unsigned)blocks, MS_THREADS, 0, cb->stream>>>(q, n_q, d, n_rows, off, n_docs, dim, normalize,
                                                                      n_qt, best);
    CU_COUNT(cb, CU_PATH_MAXSIM);
}

extern "C" void cuda_maxsim(bk_backend *be, const float *q, int n_q, const float *d, int64_t n_rows, const int32_t *off,
                            int n_docs, int dim, bool normalize, void *work, float *scores) {
    cuda_backend *cb = (cuda_backend *)be;
    if (n_docs <= 0) return;
    CU_OP(cb, cudaSetDevice(cb->device)); /* (called outside the forward passes, from any thread) */
    if (n_q <= 0 || dim <= 0) {
        CU_OP(cb, cudaMemsetAsync(scores, 0, (size_t)n_docs * sizeof(float), cb->stream));
        return;
    }
    unsigned *best = (unsigned *)work;                   /* (n_docs, n_q) */
    float *qs = (float *)(best + (size_t)n_docs * n_q); /* (n_q) */
    const size_t n_best = (size_t)n_docs * n_q;
    const size_t pb = (n_best + 255) / 256;
    maxsim_prep_kernel<<<(unsigned)(pb < 1 ? 1 : pb > 1024 ? 1024 : pb), 256, 0, cb->stream>>>(q, n_q, dim, normalize,
                                                                                             best, n_best, qs);
    if (n_rows > 0) { /* the query tile's height from n_q: rows past n_q cost FMAs, not bytes */
        if (n_q <= 8) maxsim_launch<1>(cb, q, n_q, d, n_rows, off, n_docs, dim, normalize, best);
        else if (n_q <= 16) maxsim_launch<2>(cb, q, n_q, d, n_rows, off, n_docs, dim, normalize, best);
        else if (n_q <= 32) maxsim_launch<4>(cb, q, n_q, d, n_rows, off, n_docs, dim, normalize, best);
        else maxsim_launch<8>(cb, q, n_q, d, n_rows, off, n_docs, dim, normalize, best);
    }
    maxsim_sum_kernel<<<(unsigned)(((size_t)n_docs * 32 + 255) / 256), 256, 0, cb->stream>>>(best, qs, n_q, off, n_docs,
                                                                                           scores);
    CU_LAUNCHED(cb);
}
