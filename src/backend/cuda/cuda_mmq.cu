/* cuda_mmq.cu — small and medium batches (cb->mmq_min <= n < cb->mmq_max tokens, by default
 * 8..127) on quantized weights with int8 tensor cores: y (n, n_out) = x W^T (+ bias), y += x W^T,
 * or silu(x Wgate^T) * (x Wup^T), on activations quantized once per call (cuda_mmvq_quantize).
 *
 * Why: the integer-dot GEMV of cuda_mmvq.cu reads the weights once per 16 tokens and spends
 * ~8 __dp4a per group and token, so 16 tokens cost ~3x one token and 32 sequences decode at a
 * third of llama.cpp's speed; one m16n8k32 mma does the work of 128 __dp4a. The kernel (shared
 * with the expert products of cuda_moe.cu) lives in cuda_mmq.cuh; dev/kernels/mmq_lab.cu times it
 * against the mmvq slices, the first version (v1 below) and cuBLAS, and checks it against mmvq.
 *
 * v1 (BRISK_CUDA_MMQ_V1=1, dense products only, for A/B on the GPU): 32 rows per block, 8 warps
 * splitting K, each lane unpacking one row's groups with group_load into the warp's shared slot,
 * then mma on the slot; 128 blocks for a 4096-row matrix, 11-20% of bandwidth on the H200. */
#include "backend/cuda/cuda_mmq.cuh"

#define MMQ_V1_ROWS 32   /* weight rows per block: a lane per row when unpacking, two m16 tiles */
#define MMQ_V1_GS 4      /* 32-groups per warp step (two Q4_K pairs) */
#define MMQ_V1_RED_LD 36 /* floats per token row of the reduction buffer (conflict-free) */

/* The groups g0 .. g0 + MMQ_V1_GS - 1 of one row (those < n_groups). */
template <int T> __device__ __forceinline__ void mmq_v1_load_step(const uint8_t *row, int64_t g0, int64_t n_groups,
                                                               wgroup (&q)[MMQ_V1_GS]) {
    if constexpr (T == QT_Q4_K) { /* n_groups % 8 == 0 and g0 % 4 == 0: whole pairs */
#pragma unroll
        for (int j = 0; j < MMQ_V1_GS / 2; j++) group_load_q4k_pair(row, g0 / 2 + j, q[2 * j], q[2 * j + 1]);
    } else {
#pragma unroll
        for (int j = 0; j < MMQ_V1_GS; j++)
            if (g0 + j < n_groups) group_load<T>(row, g0 + j, q[j]);
    }
}

/* The warp's shared slot: MMQ_V1_GS groups of 32 rows. */
struct mmq_v1_slot {
    int4 w[MMQ_V1_GS][MMQ_V1_ROWS][2]; /* words w0 w4 w1 w5 | w2 w6 w3 w7 */
    float a[MMQ_V1_GS][MMQ_V1_ROWS], b[MMQ_V1_GS][MMQ_V1_ROWS];
    int s[MMQ_V1_GS][MMQ_V1_ROWS];     /* Q6_K: s0 in the low 16 bits, s1 in the high (signed) */
};

template <int T, int NT, bool GLU>
__global__ void __launch_bounds__(MMQ_THREADS, NT >= 32 ? 1 : 2) mmq_v1_kernel(mmq_args p) {
    static_assert(NT % 8 == 0 && NT <= 64, "token tile");
    constexpr int NTT = NT / 8; /* n-tiles */
    __shared__ mmq_v1_slot slots[MMQ_WARPS];
    __shared__ int xrow[NT], yrow[NT];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, c = lane & 3;

    /* the batch's tokens: activation rows, output rows, how many are real */
    const int t0 = (int)blockIdx.y * NT, nv = min(NT, p.n - t0);
    for (int t = tid; t < NT; t += MMQ_THREADS) {
        xrow[t] = t0 + min(t, nv - 1); /* past the batch: the last token again, never stored */
        yrow[t] = t0 + t;
    }
    const int64_t r0 = (int64_t)blockIdx.x * (GLU ? MMQ_V1_ROWS / 2 : MMQ_V1_ROWS);
    const int64_t n_in = p.n_in, n_groups = n_in / 32;
    /* lane's row for unpacking (rows past the matrix repeat its last row; never stored) */
    int64_t rr = r0 + (GLU ? (lane & 15) : lane);
    if (rr >= p.n_rows) rr = p.n_rows - 1;
    const uint8_t *row = (GLU && lane >= 16 ? p.W2 : p.W) + rr * p.row_bytes;
    __syncthreads();

    /* int32 offsets (xq holds at most xq_cap < 2^31 values): B rows and the (d, sum) rows */
    int ob[NTT], od0[NTT], od1[NTT];
#pragma unroll
    for (int nt = 0; nt < NTT; nt++) {
        ob[nt] = xrow[nt * 8 + g] * (int)n_in;
        od0[nt] = xrow[nt * 8 + 2 * c] * (int)n_groups;
        od1[nt] = xrow[nt * 8 + 2 * c + 1] * (int)n_groups;
    }
    float acc[2][NTT][4];
#pragma unroll
    for (int mt = 0; mt < 2; mt++)
#pragma unroll
        for (int nt = 0; nt < NTT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[mt][nt][i] = 0.0f;

    mmq_v1_slot &sl = slots[warp];
    const int64_t stride = (int64_t)MMQ_WARPS * MMQ_V1_GS;
    wgroup q[MMQ_V1_GS];
    int64_t g0 = (int64_t)warp * MMQ_V1_GS;
    if (g0 < n_groups) mmq_v1_load_step<T>(row, g0, n_groups, q);
    for (; g0 < n_groups; g0 += stride) {
#pragma unroll
        for (int j = 0; j < MMQ_V1_GS; j++) {
            sl.w[j][lane][0] = make_int4(q[j].w[0], q[j].w[4], q[j].w[1], q[j].w[5]);
            sl.w[j][lane][1] = make_int4(q[j].w[2], q[j].w[6], q[j].w[3], q[j].w[7]);
            sl.a[j][lane] = q[j].a;
            sl.b[j][lane] = q[j].b;
            if (T == QT_Q6_K) sl.s[j][lane] = (int)(((unsigned)q[j].s0 & 0xFFFFu) | ((unsigned)q[j].s1 << 16));
        }
        __syncwarp();
        /* the next step's loads fly while this one multiplies */
        if (g0 + stride < n_groups) mmq_v1_load_step<T>(row, g0 + stride, n_groups, q);
#pragma unroll
        for (int j = 0; j < MMQ_V1_GS; j++) {
            const int64_t G = g0 + j;
            if (G >= n_groups) break;
            int A[2][4];
            float fa[2][2], fb[2][2];
            int s0[2][2], s1[2][2];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int r = mt * 16 + g + 8 * h;
                    int2 wv = ((const int2 *)sl.w[j][r])[c]; /* words c and 4 + c */
                    A[mt][h] = wv.x;                        /* a0 / a1 */
                    A[mt][2 + h] = wv.y;                    /* a2 / a3 */
                    fa[mt][h] = sl.a[j][r];
                    fb[mt][h] = sl.b[j][r];
                    if (T == QT_Q6_K) {
                        int s = sl.s[j][r];
                        s0[mt][h] = (int)(short)(s & 0xFFFF);
                        s1[mt][h] = s >> 16;
                    }
                }
#pragma unroll
            for (int nt = 0; nt < NTT; nt++) {
                if (nt * 8 >= nv) break;
                const int8_t *xb = p.xq + ob[nt] + G * 32;
                int b0 = __ldg((const int *)xb + c), b1 = __ldg((const int *)xb + 4 + c);
                float2 d0 = __ldg(p.xds + od0[nt] + G), d1 = __ldg(p.xds + od1[nt] + G);
#pragma unroll
                for (int mt = 0; mt < 2; mt++) {
                    int cc[4];
                    if constexpr (T == QT_Q6_K) {
                        int lo[4], hi[4];
                        mmq_mma16(lo, A[mt][0], A[mt][1], b0);
                        mmq_mma16(hi, A[mt][2], A[mt][3], b1);
#pragma unroll
                        for (int i = 0; i < 4; i++) cc[i] = s0[mt][i >> 1] * lo[i] + s1[mt][i >> 1] * hi[i];
                    } else {
                        mmq_mma32(cc, A[mt][0], A[mt][1], A[mt][2], A[mt][3], b0, b1);
                    }
                    /* group_dot's a * d_x * (float)isum - b * (d_x * sum x) */
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const float2 d = (i & 1) ? d1 : d0;
                        acc[mt][nt][i] += fa[mt][i >> 1] * d.x * (float)cc[i] - fb[mt][i >> 1] * d.y;
                    }
                }
            }
        }
        __syncwarp(); /* the slot is rewritten next step */
    }

    /* the warps' partial sums, added in warp order (the slots are free once every warp is done) */
    __syncthreads();
    float *red = (float *)slots; /* (NT, MMQ_V1_RED_LD): [token][row] */
    static_assert(sizeof(slots) >= NT * MMQ_V1_RED_LD * sizeof(float), "reduction buffer");
    for (int w = 0; w < MMQ_WARPS; w++) {
        if (warp == w) {
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int nt = 0; nt < NTT; nt++) {
                    if (nt * 8 >= nv) break;
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        float *o = red + (nt * 8 + 2 * c + (i & 1)) * MMQ_V1_RED_LD + mt * 16 + g + 8 * (i >> 1);
                        *o = (w ? *o : 0.0f) + acc[mt][nt][i];
                    }
                }
        }
        __syncthreads();
    }
    constexpr int RO = GLU ? MMQ_V1_ROWS / 2 : MMQ_V1_ROWS; /* output rows of the tile */
    for (int i = tid; i < NT * RO; i += MMQ_THREADS) {
        const int t = i / RO, r = i % RO;
        if (t >= nv || r0 + r >= p.n_rows) continue;
        float *o = p.y + (int64_t)yrow[t] * p.ldy + r0 + r;
        const float v = red[t * MMQ_V1_RED_LD + r];
        if (GLU) *o = mmq_silu(v) * red[t * MMQ_V1_RED_LD + 16 + r];
        else if (p.mode == MMQ_SILU_MUL) *o = mmq_silu(*o) * v;
        else *o = (p.accum ? *o : 0.0f) + v + (p.bias ? p.bias[r0 + r] : 0.0f);
    }
}

/* One v1 launch for weight type T with the token tile nt (8, 16, 32 or 64). */
template <int T, bool GLU> static void mmq_v1_launch_nt(cudaStream_t s, dim3 grid, int nt, const mmq_args &p) {
    if (nt <= 8) mmq_v1_kernel<T, 8, GLU><<<grid, MMQ_THREADS, 0, s>>>(p);
    else if (nt <= 16) mmq_v1_kernel<T, 16, GLU><<<grid, MMQ_THREADS, 0, s>>>(p);
    else if (nt <= 32) mmq_v1_kernel<T, 32, GLU><<<grid, MMQ_THREADS, 0, s>>>(p);
    else mmq_v1_kernel<T, 64, GLU><<<grid, MMQ_THREADS, 0, s>>>(p);
}

template <bool GLU> static bool mmq_v1_launch(cudaStream_t s, uint32_t type, dim3 grid, int nt, const mmq_args &p) {
    switch (type) {
    case QT_Q8_0: mmq_v1_launch_nt<QT_Q8_0, GLU>(s, grid, nt, p); return true;
    case QT_Q4_0: mmq_v1_launch_nt<QT_Q4_0, GLU>(s, grid, nt, p); return true;
    case QT_Q4_K: mmq_v1_launch_nt<QT_Q4_K, GLU>(s, grid, nt, p); return true;
    case QT_Q6_K: mmq_v1_launch_nt<QT_Q6_K, GLU>(s, grid, nt, p); return true;
    default: return false;
    }
}

/* Token tile for a batch: the smallest of 8, 16, 32, 64 that holds it (larger batches: tiles of 64). */
static int mmq_tile(int n) { return n <= 8 ? 8 : n <= 16 ? 16 : n <= 32 ? 32 : 64; }
/* The same for the current kernel: larger batches as tiles of 32 (a 64-token tile needs ~170
 * registers: one block per SM; H200, q4_K 4096 x 4096, 64 tokens: 62 us as one tile) */
static int mmq_tile_v2(int n) { return n <= 8 ? 8 : n <= 16 ? 16 : 32; }

bool cuda_mmq_use(const cuda_backend *cb, int n) { return !cb->mmq_off && n >= cb->mmq_min && n < cb->mmq_max; }

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
    int nt = cb->mmq_v1 ? mmq_tile(n) : mmq_tile_v2(n);
    mmq_args p = mmq_dense_args(cb, w, n, y);
    p.bias = bias;
    p.accum = accum;
    p.mode = MMQ_STORE;
    unsigned tiles = (unsigned)((n + nt - 1) / nt);
    if (cb->mmq_v1) {
        dim3 grid((unsigned)((w->n_out + MMQ_V1_ROWS - 1) / MMQ_V1_ROWS), tiles);
        mmq_v1_launch<false>(cb->stream, w->type, grid, nt, p);
        return;
    }
    dim3 grid((unsigned)((w->n_out + MMQ_DENSE_ROWS - 1) / MMQ_DENSE_ROWS), tiles);
    mmq_launch<false, false>(cb, w->type, grid, nt, p);
}

/* out (n, n_ff) = silu(x Wgate^T) * (x Wup^T) for activations already quantized: a warp tile's 16
 * rows are 8 gate rows and the same 8 up rows (false: types or shapes it does not take). */
bool cuda_mmq_glu(cuda_backend *cb, const bk_weight *gate, const bk_weight *up, int n, float *out) {
    if (gate->type != up->type || gate->n_in != up->n_in || gate->n_out != up->n_out ||
        gate->row_bytes != up->row_bytes || !cuda_mmvq_supported(gate->type, gate->n_in))
        return false;
    int nt = cb->mmq_v1 ? mmq_tile(n) : mmq_tile_v2(n);
    mmq_args p = mmq_dense_args(cb, gate, n, out);
    p.W2 = (const uint8_t *)up->dev;
    unsigned tiles = (unsigned)((n + nt - 1) / nt);
    if (cb->mmq_v1) {
        dim3 grid((unsigned)((gate->n_out + MMQ_V1_ROWS / 2 - 1) / (MMQ_V1_ROWS / 2)), tiles);
        return mmq_v1_launch<true>(cb->stream, gate->type, grid, nt, p);
    }
    const int rows = MMQ_DENSE_ROWS / 2;
    dim3 grid((unsigned)((gate->n_out + rows - 1) / rows), tiles);
    return mmq_launch<true, false>(cb, gate->type, grid, nt, p);
}
