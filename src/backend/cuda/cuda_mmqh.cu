/* cuda_mmqh.cu — batched decode products (17-47 tokens by default) on quantized weights: the
 * weights streamed into shared memory by the bulk-copy engine, dequantized to f16 in registers,
 * multiplied on f16 tensor cores against activations converted to f16 once per call.
 *
 * Why: the int8 tensor-core kernel (cuda_mmq.cuh) scales every 32-group's int32 sums in fp32 for
 * every token (a conversion and three float operations per output per group: ncu on the H200,
 * q4_K 12288 x 4096 at 32 tokens, 44 instructions per mma), and holds a round of weights in
 * registers, so a block loads, then computes, then loads again: 14-25% of bandwidth at 16-32
 * tokens, and qwen3-8b decoding 32 sequences spent 80% of its step in those products. Here the
 * per-group scales go into the weights as they are unpacked (a Q4_K group of a row is eight
 * f16 pairs: an and/or, a subtraction and a fused multiply-add each) and the tensor cores
 * accumulate in fp32 across the whole row: nothing per group and token is left outside the mma.
 * The copies run ahead of the arithmetic through a ring of stages per warp (as in cuda_mmvs.cu),
 * and the activations' fragments a few groups ahead of their products (each group otherwise waits
 * an L2 round trip: q4_K 4096 x 12288 at 32 tokens 49.6 -> 26.1 us). H200: 1.1-1.8x the int8
 * kernel at 16-32 tokens, still 25-38% of bandwidth, and behind the integer-dot GEMV at 2 tokens
 * (bench/RESULTS.md, session 13), hence its range from 17 tokens (MMQH_MIN_TOK).
 *
 * Work split. A block tile is 32 weight rows (GLU: 16 gate rows and the same 16 up rows) by a
 * token tile of NT (8, 16 or 32); the block's MMQH_WARPS warps take contiguous K-slices of the
 * tile's 256-column units, then add their partial sums through shared memory in warp order
 * (deterministic). Blocks are persistent (at most one per SM): block b takes the tiles b, b + grid,
 * ..., and each warp streams its K-slice of its tiles, one unit of the tile's 32 rows a stage (a
 * bulk copy per row and lane), so the copies of the next tile are in flight while a tile's sums
 * are added.
 *
 * Fragments (mma.sync m16n8k16, f16 in, f32 accumulate). A warp's 32 rows are two m16 tiles: lane
 * (g = lane / 4, c = lane % 4) holds rows g and g + 8 of each (GLU: gate row g and up row g of
 * the tile's 8-row half). Of each 32-column group the lane takes columns 8c..8c+7 (one 8-byte run
 * of Q4_K's nibbles, Q6_K's and Q8_0's bytes), as f16 pairs (8c, 8c+2), (8c+1, 8c+3) for the
 * first k16 step and (8c+4, 8c+6), (8c+5, 8c+7) for the second: the halves of the bytes' words
 * that an and-mask leaves in place. The sum over k may take the columns in any order as long as
 * A and B agree, so cuda_mmqh_prepare stores each token's activations in that order (per group,
 * per c: x[8c], x[8c+2], x[8c+1], x[8c+3], x[8c+4], x[8c+6], x[8c+5], x[8c+7]) and a lane's B
 * fragments for a group are one 16-byte load. f16 holds the activations' range by a power of two
 * per token (the largest magnitude scaled to [2^14, 2^15)), undone exactly at the store. */
#include "backend/cuda/cuda_bulk.cuh"

#define MMQH_WARPS 8
#define MMQH_ROWS 32 /* weight rows a block tile (GLU: 16 gate and 16 up rows) */
#define MMQH_LD 36   /* floats per token of a warp's partial tile: lanes (g, c) write rows g (+8) at
                      * tokens 2c, 2c + 1, banks 8c + g (+ const): conflict-free */
#define MMQH_SMEM_MAX (200 * 1024)
#define MMQH_STAGES_MAX 6
#define MMQH_PAD 64 /* ld_a2 reads up to 8 bytes past a run: the last slot may not end the allocation */

/* Bytes of a 256-column unit: Q4_K a superblock, Q6_K a superblock, Q8_0 eight blocks. */
/* SLOT: the shared-memory bytes of a row's unit in a stage: the unit's bytes from the 16-byte
 * boundary at or below its first (Q6_K's units start on any even byte: 210 + 14, rounded up to 16;
 * the rows of Q4_K and Q8_0 are whole multiples of 16 bytes, and so are their units). */
template <int T> struct mmqh_unit {
    static constexpr uint32_t B = T == QT_Q4_K ? 144 : T == QT_Q6_K ? 210 : 272;
    static constexpr uint32_t SLOT = B % 16 ? (B + 14 + 15) / 16 * 16 : B;
};


/* ---- f16 pairs in 32-bit registers ---- */
__device__ __forceinline__ uint32_t h2_sub(uint32_t a, uint32_t b) {
    uint32_t r;
    asm("sub.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
__device__ __forceinline__ uint32_t h2_mul(uint32_t a, uint32_t b) {
    uint32_t r;
    asm("mul.rn.f16x2 %0, %1, %2;" : "=r"(r) : "r"(a), "r"(b));
    return r;
}
__device__ __forceinline__ uint32_t h2_fma(uint32_t a, uint32_t b, uint32_t c) {
    uint32_t r;
    asm("fma.rn.f16x2 %0, %1, %2, %3;" : "=r"(r) : "r"(a), "r"(b), "r"(c));
    return r;
}
/* (lo, lo) and (hi, hi) of a pair */
__device__ __forceinline__ uint32_t h2_lo2(uint32_t a) { return __byte_perm(a, 0, 0x1010); }
__device__ __forceinline__ uint32_t h2_hi2(uint32_t a) { return __byte_perm(a, 0, 0x3232); }
#define H2_1024 0x64006400u /* (1024, 1024): or-ed above a 10-bit integer it makes 1024 + n exactly */

/* c += a b: m16n8k16, f16 A (row) and B (col), f32 accumulators */
__device__ __forceinline__ void mma_f16(float c[4], uint32_t a0, uint32_t a1, uint32_t a2, uint32_t a3, uint32_t b0,
                                        uint32_t b1) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ >= 800
    asm volatile("mma.sync.aligned.m16n8k16.row.col.f32.f16.f16.f32 {%0, %1, %2, %3}, {%4, %5, %6, %7}, {%8, %9}, "
                 "{%0, %1, %2, %3};\n"
                 : "+f"(c[0]), "+f"(c[1]), "+f"(c[2]), "+f"(c[3])
                 : "r"(a0), "r"(a1), "r"(a2), "r"(a3), "r"(b0), "r"(b1));
#else
    __trap();
#endif
}

/* ---- per type: the lane's A pairs of one row's group, scales applied ----
 * q[0..3]: the f16 pairs (8c, 8c+2), (8c+1, 8c+3), (8c+4, 8c+6), (8c+5, 8c+7) of the group. */

/* Q4_K. The header once per row and unit: the twelve scale bytes as the eight 6-bit scales (scw)
 * and minimums (mw), four a word (k4_scale_min's layout, unpacked four at a time), and the factors
 * (d, -dmin) of the low-nibble groups and (d / 16, -dmin) of the high-nibble ones: a high nibble is
 * masked in place, 16 q, and the exact power of two puts it right. */
struct q4k_head {
    uint32_t scw[2], mw[2], dd, dd16;
};
__device__ __forceinline__ void q4k_head_load(const uint8_t *u, q4k_head &h) {
    const uint4 w = *(const uint4 *)u;
    h.scw[0] = w.y & 0x3F3F3F3Fu;
    h.mw[0] = w.z & 0x3F3F3F3Fu;
    h.scw[1] = (w.w & 0x0F0F0F0Fu) | ((w.y & 0xC0C0C0C0u) >> 2);
    h.mw[1] = ((w.w >> 4) & 0x0F0F0F0Fu) | ((w.z & 0xC0C0C0C0u) >> 2);
    h.dd = w.x ^ 0x80000000u;                /* (d, -dmin) */
    h.dd16 = h2_mul(h.dd, 0x3C002C00u);      /* (d / 16, -dmin) */
}
/* group J's (scale, -min) as f16 pairs (s, s) and (m, m): d * sc and -dmin * m, one rounding each */
template <int J> __device__ __forceinline__ void q4k_scale(const q4k_head &h, uint32_t &s2, uint32_t &m2) {
    constexpr int B = J % 4;
    const uint32_t t = (__byte_perm(h.scw[J / 4], h.mw[J / 4], B | ((4 + B) << 8)) &
                        0x00FF00FFu) | H2_1024; /* (1024 + sc, 1024 + m) */
    const uint32_t v = h2_mul(J & 1 ? h.dd16 : h.dd, h2_sub(t, H2_1024));
    s2 = h2_lo2(v);
    m2 = h2_hi2(v);
}
/* Groups 2P (low nibbles) and 2P + 1 (high nibbles) of one superblock share their bytes. */
template <int P>
__device__ __forceinline__ void q4k_pair(const uint8_t *u, const q4k_head &h, int c, uint32_t lo[4], uint32_t hi[4]) {
    const uint2 w = *(const uint2 *)(u + 16 + 32 * P + 8 * c);
    uint32_t s0, m0, s1, m1;
    q4k_scale<2 * P>(h, s0, m0);
    q4k_scale<2 * P + 1>(h, s1, m1);
    const uint32_t x[4] = {w.x, w.x >> 8, w.y, w.y >> 8};
#pragma unroll
    for (int i = 0; i < 4; i++) {
        lo[i] = h2_fma(h2_sub((x[i] & 0x000F000Fu) | H2_1024, H2_1024), s0, m0);
        hi[i] = h2_fma(h2_sub((x[i] & 0x00F000F0u) | H2_1024, H2_1024), s1, m1); /* 16 q */
    }
}

/* Q6_K, one 128-column half N of a superblock (groups 4N .. 4N + 3, quarters Q of the half): the
 * lane's columns 8c..8c+7 of each quarter share one int8 scale (sixteen columns a scale); the
 * low-bit words serve two quarters, the high-bit words all four. */
template <int N>
__device__ __forceinline__ void q6k_half(const uint8_t *u, int c, uint32_t q[4][4]) {
    int ql[2][2], qh[2], sc[2];
    ld_a2<2, true>(u + 64 * N + 8 * c, ql[0]);
    ld_a2<2, true>(u + 64 * N + 32 + 8 * c, ql[1]);
    ld_a2<2, true>(u + 128 + 32 * N + 8 * c, qh);
    ld_a2<2, true>(u + 192 + 8 * N, sc); /* the half's eight scales; the lane's: bytes c / 2 + 2 Q */
    const uint32_t d2 = h2_lo2((uint32_t)ld16(u + 208));
    const uint32_t sw0 = (uint32_t)sc[0] ^ 0x80808080u, sw1 = (uint32_t)sc[1] ^ 0x80808080u; /* 128 + sc */
    const int cb = c >> 1;
#pragma unroll
    for (int Q = 0; Q < 4; Q++) {
        const uint32_t sw = Q < 2 ? sw0 : sw1, bsel = (uint32_t)(cb + 2 * (Q & 1));
        /* (1024 + 128 + sc) in both halves, then d * sc */
        const uint32_t s = h2_mul(d2, h2_sub(__byte_perm(sw, 0x64646464u, bsel | 0x40u | (bsel << 8) | 0x4000u),
                                             0x64806480u));
#pragma unroll
        for (int k = 0; k < 2; k++) {
            const uint32_t l = ((uint32_t)ql[Q & 1][k] >> (4 * (Q >> 1))) & 0x0F0F0F0Fu;
            const uint32_t v = l | ((((uint32_t)qh[k] >> (2 * Q)) & 0x03030303u) << 4); /* four 6-bit values */
            /* 1024 + v - (1024 + 32): the signed quant, exactly */
            q[Q][2 * k] = h2_mul(h2_sub((v & 0x00FF00FFu) | H2_1024, 0x64206420u), s);
            q[Q][2 * k + 1] = h2_mul(h2_sub(((v >> 8) & 0x00FF00FFu) | H2_1024, 0x64206420u), s);
        }
    }
}

/* Q8_0: group j is block j of the unit's eight (34 bytes: f16 d, 32 int8). */
template <int J> __device__ __forceinline__ void q80_group(const uint8_t *u, int c, uint32_t q[4]) {
    int w[2];
    ld_a2<2, true>(u + 34 * J + 2 + 8 * c, w);
    const uint32_t d = h2_lo2((uint32_t)ld16(u + 34 * J));
#pragma unroll
    for (int k = 0; k < 2; k++) {
        const uint32_t b = (uint32_t)w[k] ^ 0x80808080u; /* 128 + the int8 */
        q[2 * k] = h2_mul(h2_sub(__byte_perm(b, 0x64646464u, 0x4240), 0x64806480u), d);
        q[2 * k + 1] = h2_mul(h2_sub(__byte_perm(b, 0x64646464u, 0x4341), 0x64806480u), d);
    }
}

/* The B fragments of group G for the lane's token of each n-tile (16 bytes: both k16 steps). */
template <int NTT>
__device__ __forceinline__ void mmqh_load_b(const uint4 *const (&xb)[NTT], int64_t G, uint4 (&b)[NTT]) {
#pragma unroll
    for (int nt = 0; nt < NTT; nt++) b[nt] = __ldg(xb[nt] + G * 4);
}

/* The B fragments run D groups ahead of the products in a ring of SL = D + 1 register slots (SL
 * divides a unit's eight groups, so slot numbers repeat unit after unit): group j of the unit
 * takes slot j % SL and asks for group j + D, in the next unit Un past the last (an L2 round trip
 * per group otherwise waits in front of every group's products). H200 lab, 32 tokens, D 1 -> 3:
 * q6_K 12288 x 4096 39.9 -> 36.7 us, q4_K 28.9 -> 28.4; no spills at 32 tokens (up to 246 registers). */
template <int NTT> struct mmqh_bpipe {
    static constexpr int D = 3, SL = D + 1;
    uint4 q[SL][NTT];
};
template <int NTT, int J>
__device__ __forceinline__ const uint4 (&mmqh_b_next(mmqh_bpipe<NTT> &bp, const uint4 *const (&xb)[NTT], int64_t U,
                                                     int64_t Un))[NTT] {
    constexpr int D = mmqh_bpipe<NTT>::D, SL = mmqh_bpipe<NTT>::SL, JN = J + D;
    const uint4 (&cur)[NTT] = bp.q[J % SL];
    mmqh_load_b<NTT>(xb, JN < 8 ? U * 8 + JN : Un * 8 + (JN - 8), bp.q[JN % SL]);
    return cur;
}

/* acc[mt][nt] += the group's 32 columns: A pairs a[mt][h][0..3] (h: row g / g + 8), B b[nt] */
template <int NTT>
__device__ __forceinline__ void mmqh_mma_group(float (&acc)[2][NTT][4], const uint32_t (&a)[2][2][4],
                                               const uint4 (&b)[NTT], int nv) {
#pragma unroll
    for (int nt = 0; nt < NTT; nt++) {
        if (nt * 8 >= nv) break;
#pragma unroll
        for (int mt = 0; mt < 2; mt++) {
            mma_f16(acc[mt][nt], a[mt][0][0], a[mt][1][0], a[mt][0][1], a[mt][1][1], b[nt].x, b[nt].y);
            mma_f16(acc[mt][nt], a[mt][0][2], a[mt][1][2], a[mt][0][3], a[mt][1][3], b[nt].z, b[nt].w);
        }
    }
}

/* One 256-column unit U of the lane's four rows (rp[mt][h]: the unit's first byte in the stage). */
template <int T, int NTT>
__device__ __forceinline__ void mmqh_unit_mma(const uint8_t *const (&rp)[2][2], int64_t U, int64_t Un,
                                              const uint4 *const (&xb)[NTT], mmqh_bpipe<NTT> &bp, int c, int nv,
                                              float (&acc)[2][NTT][4]) {
    uint32_t a[2][2][4];
    if constexpr (T == QT_Q4_K) {
        q4k_head hd[2][2];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++) q4k_head_load(rp[mt][h], hd[mt][h]);
        uint32_t a2[2][2][4];
#define MMQH_Q4K_PAIR(P)                                                                                  \
    do {                                                                                                  \
        _Pragma("unroll") for (int mt = 0; mt < 2; mt++) _Pragma("unroll") for (int h = 0; h < 2; h++)   \
            q4k_pair<P>(rp[mt][h], hd[mt][h], c, a[mt][h], a2[mt][h]);                                    \
        mmqh_mma_group<NTT>(acc, a, mmqh_b_next<NTT, 2 * (P)>(bp, xb, U, Un), nv);                       \
        mmqh_mma_group<NTT>(acc, a2, mmqh_b_next<NTT, 2 * (P) + 1>(bp, xb, U, Un), nv);                  \
    } while (0)
        MMQH_Q4K_PAIR(0);
        MMQH_Q4K_PAIR(1);
        MMQH_Q4K_PAIR(2);
        MMQH_Q4K_PAIR(3);
#undef MMQH_Q4K_PAIR
    } else if constexpr (T == QT_Q6_K) {
#define MMQH_Q6K_QUARTER(N, Q)                                                                            \
    do {                                                                                                  \
        _Pragma("unroll") for (int mt = 0; mt < 2; mt++) _Pragma("unroll") for (int h = 0; h < 2; h++)   \
            _Pragma("unroll") for (int k = 0; k < 4; k++) a[mt][h][k] = q[mt][h][Q][k];                   \
        mmqh_mma_group<NTT>(acc, a, mmqh_b_next<NTT, 4 * (N) + (Q)>(bp, xb, U, Un), nv);                 \
    } while (0)
#define MMQH_Q6K_HALF(N)                                                                                  \
    do {                                                                                                  \
        uint32_t q[2][2][4][4];                                                                           \
        _Pragma("unroll") for (int mt = 0; mt < 2; mt++) _Pragma("unroll") for (int h = 0; h < 2; h++)   \
            q6k_half<N>(rp[mt][h], c, q[mt][h]);                                                          \
        MMQH_Q6K_QUARTER(N, 0);                                                                           \
        MMQH_Q6K_QUARTER(N, 1);                                                                           \
        MMQH_Q6K_QUARTER(N, 2);                                                                           \
        MMQH_Q6K_QUARTER(N, 3);                                                                           \
    } while (0)
        MMQH_Q6K_HALF(0);
        MMQH_Q6K_HALF(1);
#undef MMQH_Q6K_QUARTER
#undef MMQH_Q6K_HALF
    } else {
#define MMQH_GROUP(J)                                                                                     \
    do {                                                                                                  \
        _Pragma("unroll") for (int mt = 0; mt < 2; mt++) _Pragma("unroll") for (int h = 0; h < 2; h++)   \
            q80_group<J>(rp[mt][h], c, a[mt][h]);                                                         \
        mmqh_mma_group<NTT>(acc, a, mmqh_b_next<NTT, J>(bp, xb, U, Un), nv);                             \
    } while (0)
        MMQH_GROUP(0);
        MMQH_GROUP(1);
        MMQH_GROUP(2);
        MMQH_GROUP(3);
        MMQH_GROUP(4);
        MMQH_GROUP(5);
        MMQH_GROUP(6);
        MMQH_GROUP(7);
#undef MMQH_GROUP
    }
}

/* The launch's rows: mm's concatenated matrices (GLU: the gate W[0] and the up W2, n_rows each). */
typedef struct mmqh_args {
    mmvs_mats mm;
    uint32_t row_bytes;
    int64_t n_in;     /* % 256 == 0 */
    int64_t n_rows;   /* output rows (GLU: gate rows) */
    const __half *xh; /* (n, n_in) activations in the fragment order */
    const float *xmul;/* (n) the power of two that undoes each token's scaling */
    int n;            /* tokens */
    int accum;        /* y += instead of y = */
    int stages;
} mmqh_args;

/* The lane's copy row of a tile: GLU lanes 0-15 the gate rows, 16-31 the up rows. */
template <bool GLU>
__device__ __forceinline__ const uint8_t *mmqh_copy_row(const mmqh_args &p, int64_t tile, int lane) {
    constexpr int TR = GLU ? MMQH_ROWS / 2 : MMQH_ROWS;
    int64_t r = tile * TR + (GLU ? lane % 16 : lane);
    if (r >= p.n_rows) r = p.n_rows - 1; /* past the matrix: its last row again, never stored */
    if (GLU && lane >= 16) return p.mm.W2 + r * (int64_t)p.row_bytes;
    return mmvs_row_src(p.mm, r, p.row_bytes);
}
/* The stage slot of the lane's row (mt, h): GLU h = 0 the gate row g of half mt, h = 1 its up row. */
template <bool GLU> __device__ __forceinline__ int mmqh_slot(int mt, int h, int g) {
    return GLU ? 16 * h + 8 * mt + g : 16 * mt + 8 * h + g;
}

template <int T, int NT, bool GLU>
__global__ void __launch_bounds__(MMQH_WARPS * 32, 1) mmqh_kernel(mmqh_args p) {
    BK_TRACE_SCOPE();
    constexpr int NTT = NT / 8, TR = GLU ? MMQH_ROWS / 2 : MMQH_ROWS, NW = MMQH_WARPS;
    constexpr uint32_t UB = mmqh_unit<T>::B, SLOT = mmqh_unit<T>::SLOT;
    extern __shared__ __align__(128) uint8_t sm[];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, c = lane & 3;
    const int stages = p.stages;
    uint64_t *bar = (uint64_t *)sm + warp * stages;
    float *part = (float *)(sm + (((size_t)NW * stages * 8 + 127) & ~(size_t)127)); /* [warp][token][row] */
    uint8_t *ring = (uint8_t *)part + (size_t)NW * NT * MMQH_LD * 4 + (size_t)warp * stages * MMQH_ROWS * SLOT;
    const int64_t n_units = p.n_in / 256, u0 = warp * n_units / NW, S = (warp + 1) * n_units / NW - u0;
    const int64_t n_tiles = (p.n_rows + TR - 1) / TR, tb = blockIdx.x, tg = gridDim.x;
    const int64_t mine = tb < n_tiles ? (n_tiles - 1 - tb) / tg + 1 : 0, q_all = mine * S;
    const int t0 = (int)blockIdx.y * NT, nv = min(NT, p.n - t0);
    uint64_t policy = 0;
#ifndef BK_NO_BULK
    asm volatile("createpolicy.fractional.L2::evict_first.b64 %0, 1.0;" : "=l"(policy));
#endif
    /* chunk q of the warp: unit u0 + q % S of tile tb + (q / S) * tg; lane L asks the copy engine for
     * row L's unit, from the 16-byte boundary at or below it to the one at or above its end (at most
     * SLOT bytes); the stage's barrier expects the 32 lanes' arrivals and their bytes. (Copies of
     * 16-byte pieces by cp.async, counted by cp.async.mbarrier.arrive, trapped as an illegal
     * instruction on the H200 in some launches: session 13.) */
    auto issue = [&](int64_t q, int s) {
        const uintptr_t a = (uintptr_t)(mmqh_copy_row<GLU>(p, tb + (q / S) * tg, lane) + (u0 + q % S) * UB);
        const uintptr_t a0 = a & ~(uintptr_t)15;
        const uint32_t cl = (uint32_t)(((a + UB + 15) & ~(uintptr_t)15) - a0);
        mbar_expect_bytes(bar + s, cl);
        bulk_copy_g2s(ring + ((size_t)s * MMQH_ROWS + lane) * SLOT, (const void *)a0, cl, bar + s, policy);
    };
    if (lane == 0) {
        for (int s = 0; s < stages; s++) mbar_init(bar + s, 32);
        mbar_init_fence();
    }
    __syncwarp();
    /* the weights do not depend on the kernel before: their copies start before pdl_wait */
    for (int64_t q = 0; q < q_all && q < stages; q++) issue(q, (int)q);
    pdl_wait_late();

    const uint4 *xb[NTT]; /* the lane's token g of each n-tile (past the batch: the last token, never stored) */
#pragma unroll
    for (int nt = 0; nt < NTT; nt++) xb[nt] = (const uint4 *)(p.xh + (int64_t)(t0 + min(nt * 8 + g, nv - 1)) * p.n_in) + c;

    mmqh_bpipe<NTT> bp; /* the warp's first unit's first groups: the products' B run ahead from here */
#pragma unroll
    for (int j = 0; j < mmqh_bpipe<NTT>::D; j++) mmqh_load_b<NTT>(xb, u0 * 8 + j, bp.q[j]);
    int64_t q = 0;
    for (int64_t i = 0; i < mine; i++) {
        const int64_t tile = tb + i * tg;
        float acc[2][NTT][4];
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int nt = 0; nt < NTT; nt++)
#pragma unroll
                for (int k = 0; k < 4; k++) acc[mt][nt][k] = 0.0f;
        uint32_t rl[2][2]; /* the low bits of the lane's rows' addresses (Q6_K's leads) */
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int h = 0; h < 2; h++)
                rl[mt][h] = (uint32_t)(uintptr_t)mmqh_copy_row<GLU>(p, tile, mmqh_slot<GLU>(mt, h, g)) & 15u;
        for (int64_t uu = 0; uu < S; uu++, q++) {
            const int s = (int)(q % stages);
            mbar_wait(bar + s, (uint32_t)((q / stages) & 1));
            const uint8_t *st = ring + (size_t)s * MMQH_ROWS * SLOT;
            const uint8_t *rp[2][2];
#pragma unroll
            for (int mt = 0; mt < 2; mt++)
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    const int sl = mmqh_slot<GLU>(mt, h, g);
                    /* the copy began on the 16-byte boundary at or below the unit (Q6_K: rows of any
                     * even length, units of 210 bytes) */
                    const uint32_t lead = SLOT == UB ? 0u : (uint32_t)(rl[mt][h] + (u0 + uu) * UB) & 15u;
                    rp[mt][h] = st + (size_t)sl * SLOT + lead;
                }
            /* the next unit of the warp's slice: of this tile, or the first of the next tile */
            mmqh_unit_mma<T, NTT>(rp, u0 + uu, uu + 1 < S ? u0 + uu + 1 : u0, xb, bp, c, nv, acc);
            __syncwarp(); /* every lane has read the stage: it may be refilled */
            if (q + stages < q_all) issue(q + stages, s);
        }
        /* the warps' partial sums, added in warp order */
        float *pw = part + (size_t)warp * NT * MMQH_LD;
#pragma unroll
        for (int mt = 0; mt < 2; mt++)
#pragma unroll
            for (int nt = 0; nt < NTT; nt++)
#pragma unroll
                for (int k = 0; k < 4; k++)
                    pw[(nt * 8 + 2 * c + (k & 1)) * MMQH_LD + 16 * mt + g + 8 * (k >> 1)] = acc[mt][nt][k];
        __syncthreads();
        for (int idx = tid; idx < NT * TR; idx += NW * 32) {
            const int t = idx / TR, r = idx % TR;
            const int64_t R = tile * TR + r;
            if (t >= nv || R >= p.n_rows) continue;
            /* the row's partial-sum index: GLU gate row r is half r / 8's row r % 8, its up row 8 further */
            const int pr = GLU ? 16 * (r / 8) + r % 8 : r;
            float a = 0.0f, b = 0.0f;
            for (int w = 0; w < NW; w++) {
                a += part[((size_t)w * NT + t) * MMQH_LD + pr];
                if (GLU) b += part[((size_t)w * NT + t) * MMQH_LD + pr + 8];
            }
            const float xm = p.xmul[t0 + t];
            a *= xm;
            if (GLU) {
                p.mm.y[0][(int64_t)(t0 + t) * p.n_rows + R] = silu_f(a) * (b * xm);
            } else {
                const int m = p.mm.count > 2 && R >= p.mm.rend[1] ? 2 : p.mm.count > 1 && R >= p.mm.rend[0] ? 1 : 0;
                const int64_t r0 = m ? p.mm.rend[m - 1] : 0, no = p.mm.rend[m] - r0;
                float *y = p.mm.y[m] + (int64_t)(t0 + t) * no + (R - r0);
                const float v = a + (p.mm.bias[m] ? p.mm.bias[m][R - r0] : 0.0f);
                *y = p.accum ? *y + v : v;
            }
        }
        __syncthreads(); /* the partial sums are read: the next tile may write them */
    }
}

/* x (n, n_in) -> cb->xh in the fragment order, each token scaled by a power of two that puts its
 * largest magnitude in [2^14, 2^15) (f16's range, its precision kept for small rows too); cb->xmul
 * gets the inverse. One block per token. */
__global__ void mmqh_prepare_kernel(const float *x, int64_t n_in, __half *xh, float *xmul) {
    BK_TRACE_SCOPE();
    pdl_wait_late();
    const float *xr = x + (int64_t)blockIdx.x * n_in;
    __half *hr = xh + (int64_t)blockIdx.x * n_in;
    __shared__ float red[32];
    float mx = 0.0f;
    for (int64_t i = threadIdx.x; i < n_in; i += blockDim.x) mx = fmaxf(mx, fabsf(xr[i]));
    const float sc = mmqh_row_scale(block_max(mx, red), xmul + blockIdx.x);
    for (int64_t i = threadIdx.x; i < n_in; i += blockDim.x) hr[mmqh_perm(i)] = __float2half_rn(xr[i] * sc);
}

bool cuda_mmqh_supported(const cuda_backend *cb, uint32_t type, int64_t n_in) {
    return !cb->mmqh_off && cb->xh && n_in % 256 == 0 &&
           (type == QT_Q4_K || type == QT_Q6_K || type == QT_Q8_0);
}

bool cuda_mmqh_use(const cuda_backend *cb, int n) {
    return !cb->mmqh_off && cb->xh && n >= cb->mmqh_min && n < cb->mmqh_max;
}

bool cuda_mmqh_should_use(const cuda_backend *cb, uint32_t type, int64_t n_in, int n) {
    return cuda_mmqh_use(cb, n) && cuda_mmqh_supported(cb, type, n_in);
}

bool cuda_mmqh_glu_should_use(const cuda_backend *cb, uint32_t type, int64_t n_in, int n) {
    return !cb->glu_off && cuda_mmqh_should_use(cb, type, n_in, n);
}

bool cuda_mmqh_prepare(cuda_backend *cb, const float *x, int64_t n_in, int n) {
    if (!cb->xh || n <= 0 || n > MMQH_MAX_N || (size_t)n * (size_t)n_in > cb->xh_cap) return false;
    if (cb->xh_src == x && cb->xh_n == n && cb->xh_dim == n_in) return true; /* the norm converted it */
    pdl_launch(cb, mmqh_prepare_kernel, dim3((unsigned)n), dim3(256), 0, x, n_in, cb->xh, cb->xmul);
    return true;
}

template <int T, int NT, bool GLU> static bool mmqh_go_nt(cuda_backend *cb, mmqh_args &p) {
    /* the copies start on 16 bytes: whole units (Q4_K, Q8_0) need rows that start there too */
    bool aligned = p.row_bytes % 16 == 0 && !((uintptr_t)p.mm.W2 & 15);
    for (int m = 0; m < p.mm.count; m++) aligned = aligned && !((uintptr_t)p.mm.W[m] & 15);
    if (mmqh_unit<T>::B % 16 == 0 && !aligned) return false;
    const size_t head = ((size_t)MMQH_WARPS * MMQH_STAGES_MAX * 8 + 127) & ~(size_t)127;
    const size_t part = (size_t)MMQH_WARPS * NT * MMQH_LD * 4;
    const size_t stage = (size_t)MMQH_ROWS * mmqh_unit<T>::SLOT;
    int stages = (int)((MMQH_SMEM_MAX - head - part - MMQH_PAD) / (MMQH_WARPS * stage));
    if (stages > MMQH_STAGES_MAX) stages = MMQH_STAGES_MAX;
    if (stages < 2) return false;
    p.stages = stages;
    const size_t smem = (((size_t)MMQH_WARPS * stages * 8 + 127) & ~(size_t)127) + part +
                        (size_t)MMQH_WARPS * stages * stage + MMQH_PAD;
    static int attr_set[64]; /* per device: the opt-in to more than 48 KB of dynamic shared memory */
    const int dev = cb->device & 63;
    if (!attr_set[dev]) {
        if (cudaFuncSetAttribute(mmqh_kernel<T, NT, GLU>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 MMQH_SMEM_MAX) != cudaSuccess) {
            (void)cudaGetLastError();
            return false;
        }
        attr_set[dev] = 1;
    }
    constexpr int TR = GLU ? MMQH_ROWS / 2 : MMQH_ROWS;
    const int64_t tiles = (p.n_rows + TR - 1) / TR;
    const unsigned ty = (unsigned)((p.n + NT - 1) / NT);
    int64_t bx = (cb->n_sm + ty - 1) / ty; /* persistent blocks: one per SM over the token tiles */
    if (bx > tiles) bx = tiles;
    if (bx < 1) bx = 1;
    pdl_launch(cb, mmqh_kernel<T, NT, GLU>, dim3((unsigned)bx, ty), dim3(MMQH_WARPS * 32), smem, p);
    CU_COUNT(cb, CU_PATH_MMQH);
    return true;
}

template <int T, bool GLU> static bool mmqh_go_t(cuda_backend *cb, mmqh_args &p) {
    if (p.n <= 8) return mmqh_go_nt<T, 8, GLU>(cb, p);
    if (p.n <= 16) return mmqh_go_nt<T, 16, GLU>(cb, p);
    return mmqh_go_nt<T, 32, GLU>(cb, p);
}

static bool mmqh_go(cuda_backend *cb, uint32_t type, bool glu, mmqh_args &p) {
    switch (type) {
    case QT_Q4_K: return glu ? mmqh_go_t<QT_Q4_K, true>(cb, p) : mmqh_go_t<QT_Q4_K, false>(cb, p);
    case QT_Q6_K: return glu ? mmqh_go_t<QT_Q6_K, true>(cb, p) : mmqh_go_t<QT_Q6_K, false>(cb, p);
    case QT_Q8_0: return glu ? mmqh_go_t<QT_Q8_0, true>(cb, p) : mmqh_go_t<QT_Q8_0, false>(cb, p);
    default: return false;
    }
}

static mmqh_args mmqh_args_for(const cuda_backend *cb, const bk_weight *w, int n, int accum) {
    mmqh_args p = {};
    p.row_bytes = (uint32_t)w->row_bytes;
    p.n_in = w->n_in;
    p.xh = cb->xh;
    p.xmul = cb->xmul;
    p.n = n;
    p.accum = accum;
    return p;
}

int cuda_mmqh(cuda_backend *cb, int n_w, const bk_weight *const *w, const float *const *bias, int n,
              float *const *y, int accum) {
    if (n_w <= 0 || !cuda_mmqh_supported(cb, w[0]->type, w[0]->n_in)) return 0;
    mmqh_args p = mmqh_args_for(cb, w[0], n, accum);
    for (int m = 0; m < n_w && m < MMVS_MATS && w[m]->type == w[0]->type && w[m]->row_bytes == w[0]->row_bytes &&
                    w[m]->n_in == w[0]->n_in;
         m++)
        mmvs_add(p.mm, (const uint8_t *)w[m]->dev, bias ? bias[m] : NULL, y[m], w[m]->n_out);
    p.n_rows = p.mm.rend[p.mm.count - 1];
    return mmqh_go(cb, w[0]->type, false, p) ? p.mm.count : 0;
}

bool cuda_mmqh_glu(cuda_backend *cb, const bk_weight *gate, const bk_weight *up, int n, float *out) {
    if (!cuda_mmqh_supported(cb, gate->type, gate->n_in) || gate->type != up->type || gate->n_in != up->n_in ||
        gate->n_out != up->n_out || gate->row_bytes != up->row_bytes)
        return false;
    mmqh_args p = mmqh_args_for(cb, gate, n, 0);
    mmvs_add(p.mm, (const uint8_t *)gate->dev, NULL, out, gate->n_out);
    p.mm.W2 = (const uint8_t *)up->dev;
    p.n_rows = gate->n_out;
    return mmqh_go(cb, gate->type, true, p);
}
