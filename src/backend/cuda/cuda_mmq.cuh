/* cuda_mmq.cuh — the int8 tensor-core product on quantized weights ("mmq"), shared by the dense
 * products (cuda_mmq.cu) and the grouped expert products (cuda_moe.cu).
 *
 * y (tokens, rows) = x W^T for the integer-dot weight types (Q8_0, Q4_0, Q4_K, Q6_K: those
 * group_load knows) on activations already quantized to int8 blocks of 32 with their (d, d * sum)
 * pairs (cuda_mmvq_quantize's xq / xds). Per 32-group the int32 product of mma.sync is scaled as
 * group_dot scales its __dp4a sums, so results equal cuda_mmvq's up to fp32 summation order:
 *     acc += a_w * d_x * (float)(s0 * dot_lo + s1 * dot_hi) - b_w * (d_x * sum x)
 *
 * Work split. A block owns MMQ_ROWS (32) weight rows and NT tokens (8, 16, 32, 64; n-tiles of 8
 * past the valid tokens are skipped) and reads those rows' bytes once. Its MMQ_WARPS warps split
 * K: warp w takes the steps of MMQ_GS groups w, w + MMQ_WARPS, ... (split-K inside the block keeps
 * a 4096-row matrix at 128 blocks of 8 warps, enough loads in flight to stream the weights; rows
 * per warp would leave most SMs idle). Per step lane l unpacks row l's MMQ_GS groups with
 * group_load (the decode kernels' loaders: 2-byte-aligned blocks, Q4_K pairs) into the warp's own
 * shared slot as int8 words plus the float factors a, b (and Q6_K's integer half scales), issues
 * the next step's loads, then runs the step's mma on the slot (only __syncwarp: no block barrier
 * in the K loop). The activations' B fragments and (d, sum) pairs come straight from global
 * memory (L1/L2: every row tile reads them). At the end the warps' fp32 partial sums are added in
 * warp order through shared memory (deterministic) and the block stores them: plain (+ bias, or
 * y += when accumulating), silu(gate) * up (GLU: rows 0-15 of the tile are gate rows, 16-31 the
 * same up rows), or silu(y) * v (the second stage of an unfused gate/up).
 *
 * mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 (and m16n8k16 for Q6_K, whose 16-element halves
 * have their own scales). groupID g = lane >> 2, threadID_in_group c = lane % 4; "word j" is bytes
 * 4j..4j+3 of a 32-group (byte i of a .b32 register is element i, little-endian):
 *   A (16 rows x 32 k, row-major), 4 regs:  a0 = row g word c, a1 = row g+8 word c,
 *                                           a2 = row g word 4+c, a3 = row g+8 word 4+c
 *   B (32 k x 8 tokens, col-major), 2 regs: b0 = token g word c, b1 = token g word 4+c
 *   C/D (16 x 8 s32), 4 regs:               c0 = (row g, token 2c), c1 = (row g, token 2c+1),
 *                                           c2 = (row g+8, token 2c), c3 = (row g+8, token 2c+1)
 *   m16n8k16 (Q6_K): low half  a = {row g word c, row g+8 word c}, b = token g word c;
 *                    high half a = {row g word 4+c, row g+8 word 4+c}, b = token g word 4+c; C as above.
 * The shared slot stores a group's words in the order w0 w4 w1 w5 w2 w6 w3 w7, so that lane c's
 * two words of a row (c and 4+c) are one 8-byte load. */
#ifndef BK_CUDA_MMQ_CUH
#define BK_CUDA_MMQ_CUH
#include "backend/cuda/cuda_internal.cuh"

#define MMQ_WARPS 8
#define MMQ_THREADS (MMQ_WARPS * 32)
#define MMQ_ROWS 32   /* weight rows per block: a lane per row when unpacking, two m16 tiles */
#define MMQ_GS 4      /* 32-groups per warp step (two Q4_K pairs) */
#define MMQ_RED_LD 36 /* floats per token row of the reduction buffer: lanes (g, c) write rows g at
                       * tokens 2c, 2c+1, i.e. banks 8c + g + const: conflict-free */

/* Where the block's products go after the sums (mmq_args.mode). */
enum { MMQ_STORE = 0, MMQ_SILU_MUL = 1 };

/* One mmq launch. Dense: tokens t of blockIdx.y's tile read xq row t and write y row t.
 * Grouped (MOE): blockIdx.y is a tile of the grouping's list: expert tiles[y].x, its entries
 * ent[tiles[y].y ..] (up to NT, not past off[expert + 1]); entry en reads xq row en / div and
 * writes y row en; the expert's rows are [expert * n_rows, (expert + 1) * n_rows) of W (and W2), or,
 * with tables (Wtab, W2tab: device arrays of each expert's first row, bk_weight.expert_ptrs), the
 * n_rows rows from Wtab[expert] (W2tab[expert]). */
typedef struct mmq_args {
    const uint8_t *W, *W2;  /* weights; W2: the up matrix of a GLU launch (same type and row bytes) */
    const uint8_t *const *Wtab, *const *W2tab; /* MOE: per-expert first rows of W, W2 (device), or NULL */
    size_t row_bytes;
    int64_t n_in;           /* % 32 == 0 (Q4_K, Q6_K: % 256) */
    int64_t n_rows;         /* output rows (of one expert) */
    const int8_t *xq;       /* (rows, n_in) int8 activations */
    const float2 *xds;      /* (rows, n_in / 32) (d, d * sum) */
    const float *bias;      /* (n_rows) or NULL */
    float *y;               /* rows of ldy floats */
    int64_t ldy;
    int accum;              /* MMQ_STORE: y += instead of y = */
    int mode;               /* MMQ_STORE or MMQ_SILU_MUL: y = silu(y) * product */
    int n;                  /* dense: tokens */
    const int2 *tiles;      /* MOE: (expert, first entry) per tile */
    const int32_t *n_tiles; /* MOE: tiles in the list (device) */
    const int32_t *off;     /* MOE: (n_expert + 1) entry offsets by expert */
    const int32_t *ent;     /* MOE: entries grouped by expert */
    int div;                /* MOE: entry en reads activation row en / div */
} mmq_args;

#if !defined(__CUDA_ARCH__) || __CUDA_ARCH__ >= 800
#define MMQ_ARCH_OK 1
#else
#define MMQ_ARCH_OK 0 /* integer mma needs sm_80; the Makefile builds sm_90a */
#endif

/* c (16x8 s32) = a (16x32 s8, row) b (32x8 s8, col), fresh sums (the int32 of one 32-group) */
__device__ __forceinline__ void mmq_mma32(int c[4], int a0, int a1, int a2, int a3, int b0, int b1) {
#if MMQ_ARCH_OK
    asm volatile("mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%10, %10, %10, %10};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1), "r"(0));
#else
    __trap();
#endif
}
/* c (16x8 s32) = a (16x16 s8, row) b (16x8 s8, col): one 16-element half of a Q6_K group */
__device__ __forceinline__ void mmq_mma16(int c[4], int a0, int a1, int b0) {
#if MMQ_ARCH_OK
    asm volatile("mma.sync.aligned.m16n8k16.row.col.s32.s8.s8.s32 {%0, %1, %2, %3}, {%4, %5}, {%6}, "
                 "{%7, %7, %7, %7};\n"
                 : "=r"(c[0]), "=r"(c[1]), "=r"(c[2]), "=r"(c[3])
                 : "r"(a0), "r"(a1), "r"(b0), "r"(0));
#else
    __trap();
#endif
}

__device__ __forceinline__ float mmq_silu(float g) { return g / (1.0f + expf(-g)); }

/* The groups g0 .. g0 + MMQ_GS - 1 of one row (those < n_groups). */
template <int T> __device__ __forceinline__ void mmq_load_step(const uint8_t *row, int64_t g0, int64_t n_groups,
                                                               wgroup (&q)[MMQ_GS]) {
    if constexpr (T == QT_Q4_K) { /* n_groups % 8 == 0 and g0 % 4 == 0: whole pairs */
#pragma unroll
        for (int j = 0; j < MMQ_GS / 2; j++) group_load_q4k_pair(row, g0 / 2 + j, q[2 * j], q[2 * j + 1]);
    } else {
#pragma unroll
        for (int j = 0; j < MMQ_GS; j++)
            if (g0 + j < n_groups) group_load<T>(row, g0 + j, q[j]);
    }
}

/* The warp's shared slot: MMQ_GS groups of 32 rows. */
struct mmq_slot {
    int4 w[MMQ_GS][MMQ_ROWS][2]; /* words w0 w4 w1 w5 | w2 w6 w3 w7 */
    float a[MMQ_GS][MMQ_ROWS], b[MMQ_GS][MMQ_ROWS];
    int s[MMQ_GS][MMQ_ROWS];     /* Q6_K: s0 in the low 16 bits, s1 in the high (signed) */
};

template <int T, int NT, bool GLU, bool MOE>
__global__ void __launch_bounds__(MMQ_THREADS, NT >= 32 ? 1 : 2) mmq_kernel(mmq_args p) {
    static_assert(NT % 8 == 0 && NT <= 64, "token tile");
    constexpr int NTT = NT / 8; /* n-tiles */
    __shared__ mmq_slot slots[MMQ_WARPS];
    __shared__ int xrow[NT], yrow[NT];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, c = lane & 3;

    /* the block's tokens: activation rows, output rows, how many are real */
    int64_t e = 0;
    int nv;
    if constexpr (MOE) {
        if ((int)blockIdx.y >= *p.n_tiles) return;
        int2 tl = p.tiles[blockIdx.y];
        e = tl.x;
        int beg = tl.y, end = p.off[tl.x + 1];
        nv = min(NT, end - beg);
        for (int t = tid; t < NT; t += MMQ_THREADS) {
            int en = p.ent[beg + min(t, nv - 1)];
            xrow[t] = en / p.div;
            yrow[t] = en;
        }
    } else {
        int t0 = (int)blockIdx.y * NT;
        nv = min(NT, p.n - t0);
        for (int t = tid; t < NT; t += MMQ_THREADS) {
            xrow[t] = t0 + min(t, nv - 1); /* past the batch: the last token again, never stored */
            yrow[t] = t0 + t;
        }
    }
    const int64_t r0 = (int64_t)blockIdx.x * (GLU ? MMQ_ROWS / 2 : MMQ_ROWS);
    const int64_t n_in = p.n_in, n_groups = n_in / 32;
    /* lane's row for unpacking (rows past the matrix repeat its last row; never stored) */
    int64_t rr = r0 + (GLU ? (lane & 15) : lane);
    if (rr >= p.n_rows) rr = p.n_rows - 1;
    const uint8_t *const *tab = MOE ? (GLU && lane >= 16 ? p.W2tab : p.Wtab) : NULL;
    const uint8_t *base = tab ? tab[e] : (GLU && lane >= 16 ? p.W2 : p.W) + e * p.n_rows * p.row_bytes;
    const uint8_t *row = base + rr * p.row_bytes;
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

    mmq_slot &sl = slots[warp];
    const int64_t stride = (int64_t)MMQ_WARPS * MMQ_GS;
    wgroup q[MMQ_GS];
    int64_t g0 = (int64_t)warp * MMQ_GS;
    if (g0 < n_groups) mmq_load_step<T>(row, g0, n_groups, q);
    for (; g0 < n_groups; g0 += stride) {
#pragma unroll
        for (int j = 0; j < MMQ_GS; j++) {
            sl.w[j][lane][0] = make_int4(q[j].w[0], q[j].w[4], q[j].w[1], q[j].w[5]);
            sl.w[j][lane][1] = make_int4(q[j].w[2], q[j].w[6], q[j].w[3], q[j].w[7]);
            sl.a[j][lane] = q[j].a;
            sl.b[j][lane] = q[j].b;
            if (T == QT_Q6_K) sl.s[j][lane] = (int)(((unsigned)q[j].s0 & 0xFFFFu) | ((unsigned)q[j].s1 << 16));
        }
        __syncwarp();
        /* the next step's loads fly while this one multiplies */
        if (g0 + stride < n_groups) mmq_load_step<T>(row, g0 + stride, n_groups, q);
#pragma unroll
        for (int j = 0; j < MMQ_GS; j++) {
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
    float *red = (float *)slots; /* (NT, MMQ_RED_LD): [token][row] */
    static_assert(sizeof(slots) >= NT * MMQ_RED_LD * sizeof(float), "reduction buffer");
    for (int w = 0; w < MMQ_WARPS; w++) {
        if (warp == w) {
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int nt = 0; nt < NTT; nt++) {
                    if (nt * 8 >= nv) break;
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        float *o = red + (nt * 8 + 2 * c + (i & 1)) * MMQ_RED_LD + mt * 16 + g + 8 * (i >> 1);
                        *o = (w ? *o : 0.0f) + acc[mt][nt][i];
                    }
                }
        }
        __syncthreads();
    }
    constexpr int RO = GLU ? MMQ_ROWS / 2 : MMQ_ROWS; /* output rows of the tile */
    for (int i = tid; i < NT * RO; i += MMQ_THREADS) {
        const int t = i / RO, r = i % RO;
        if (t >= nv || r0 + r >= p.n_rows) continue;
        float *o = p.y + (int64_t)yrow[t] * p.ldy + r0 + r;
        const float v = red[t * MMQ_RED_LD + r];
        if (GLU) *o = mmq_silu(v) * red[t * MMQ_RED_LD + 16 + r];
        else if (p.mode == MMQ_SILU_MUL) *o = mmq_silu(*o) * v;
        else *o = (p.accum ? *o : 0.0f) + v + (p.bias ? p.bias[r0 + r] : 0.0f);
    }
}

/* One launch for weight type T over the grid, with the token tile nt (8, 16, 32 or 64). */
template <int T, bool GLU, bool MOE>
static void mmq_launch_nt(cudaStream_t s, dim3 grid, int nt, const mmq_args &p) {
    if (nt <= 8) mmq_kernel<T, 8, GLU, MOE><<<grid, MMQ_THREADS, 0, s>>>(p);
    else if (nt <= 16) mmq_kernel<T, 16, GLU, MOE><<<grid, MMQ_THREADS, 0, s>>>(p);
    else if (nt <= 32) mmq_kernel<T, 32, GLU, MOE><<<grid, MMQ_THREADS, 0, s>>>(p);
    else mmq_kernel<T, 64, GLU, MOE><<<grid, MMQ_THREADS, 0, s>>>(p);
}

/* The type dispatch; false for a type the integer-dot loaders do not know. */
template <bool GLU, bool MOE>
static bool mmq_launch(cudaStream_t s, uint32_t type, dim3 grid, int nt, const mmq_args &p) {
    switch (type) {
    case QT_Q8_0: mmq_launch_nt<QT_Q8_0, GLU, MOE>(s, grid, nt, p); return true;
    case QT_Q4_0: mmq_launch_nt<QT_Q4_0, GLU, MOE>(s, grid, nt, p); return true;
    case QT_Q4_K: mmq_launch_nt<QT_Q4_K, GLU, MOE>(s, grid, nt, p); return true;
    case QT_Q6_K: mmq_launch_nt<QT_Q6_K, GLU, MOE>(s, grid, nt, p); return true;
    default: return false;
    }
}
#endif
