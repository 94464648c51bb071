/* cuda_mmq.cuh — the int8 tensor-core product on quantized weights ("mmq"), shared by the dense
 * products (cuda_mmq.cu) and the grouped expert products (cuda_moe.cu).
 *
 * y (tokens, rows) = x W^T for the integer-dot weight types (Q8_0, Q4_0, Q4_K, Q6_K) on
 * activations already quantized to int8 blocks of 32 with their (d, d * sum) pairs
 * (cuda_mmvq_quantize's xq / xds). Per 32-group the int32 product of mma.sync is scaled as
 * group_dot scales its __dp4a sums, so results equal cuda_mmvq's up to fp32 summation order:
 *     acc += a_w * d_x * (float)(s0 * dot_lo + s1 * dot_hi) - b_w * (d_x * sum x)
 *
 * Why this shape: at 8-64 tokens the integer math is trivial for the tensor cores; the product
 * costs what streaming the weights costs, and that needs ~4-5 MB of loads in flight GPU-wide
 * (4.3 TB/s x ~1 us). The first kernel (32 rows per block, weights unpacked through shared
 * memory; in git history only) gave a 4096-row matrix 128
 * blocks, ~8 warps per SM and a shared-memory round trip per step: 11-20% of bandwidth.
 *
 * Work split. A warp owns one m16 tile: 16 weight rows (GLU: 8 gate rows and the same 8 up rows,
 * so the epilogue finds gate and up of a row in one tile) and a K-slice. A block is MMQ_WARPS (8)
 * warps: RT row tiles x KS = 8 / RT K-slices (dense: RT = 1, 16 rows per block; grouped experts:
 * RT = 2, MMQ_ROWS = 32 rows per block, the grids cuda_moe.cu computes). Warp (tile, ks) takes
 * the rounds ks, ks + KS, ... of the K axis; a round is RG 32-groups (Q4_K: two superblocks,
 * 16 groups; the others: 8 groups) of its 16 rows, all loaded before any is used. A 4096 x 4096
 * Q4_K matrix is 256 blocks = 2,048 warps (16 per SM, all resident), each with one round of
 * 16 rows x 2 x 144 B = 4.6 KB in flight: the whole 9.4 MB matrix is requested at once; a
 * 12288-row one keeps ~264 blocks x 8 x 4.6 KB ~ 9.7 MB in flight. At the end the KS warps of a
 * tile write their fp32 partial sums to shared memory and the block adds them in ks order
 * (deterministic; no atomics, no second pass), then stores: plain (+ bias, or y += when
 * accumulating), silu(gate) * up (GLU), or silu(y) * v (the second stage of an unfused gate/up).
 * The activations' B fragments and (d, sum) pairs come from global memory (L1/L2: the
 * co-resident blocks of an SM read the same K range), loaded D groups ahead into registers (4 for
 * one n-tile, 2 for two, else 1): a warp's groups are a chain, and loading a group's activations
 * only when it is multiplied exposed an L2 round trip per group (H200, q4_K 4096 x 4096: 7.6 us
 * at 1..8 tokens without it). Dense batches of more than 32 tokens run as tiles of 32
 * (cuda_mmq.cu): a 64-token tile needs ~210 registers.
 * From 16 tokens a warp may own MT = 2 m16 tiles (mmq_mt: large K-quant matrices and the expert
 * products): 32 rows (GLU: 16 gate and up rows) that share each B fragment the warp loads. At 16
 * tokens (two blocks an SM) a round is then half as long (mmq_frag's HALF) so that both tiles'
 * rounds fit the registers; at 32 a block takes the SM alone (~220 registers) with whole rounds.
 *
 * Fragments. mma.sync.aligned.m16n8k32.row.col.s32.s8.s8.s32 (m16n8k16 for Q6_K, whose
 * 16-element halves have their own scales). groupID g = lane >> 2, c = lane % 4:
 *   A (16 rows x 32 k, row-major), 4 regs:  a0 = (row g, k 4c..4c+3), a1 = (row g+8, k 4c..),
 *                                           a2 = (row g, k 16+4c..),  a3 = (row g+8, k 16+4c..)
 *   B (32 k x 8 tokens, col-major), 2 regs: b0 = (k 4c..4c+3, token g), b1 = (k 16+4c.., token g)
 *   C/D (16 x 8 s32), 4 regs:               c0 = (row g, token 2c), c1 = (row g, token 2c+1),
 *                                           c2 = (row g+8, token 2c), c3 = (row g+8, token 2c+1)
 *   m16n8k16 (Q6_K): low half  a = {(g, k 4c..), (g+8, k 4c..)}, b = (k 4c.., token g);
 *                    high half a = {(g, k 16+4c..), (g+8, k 16+4c..)}, b = (k 16+4c.., token g).
 * Lane (g, c) therefore loads its fragments straight from the packed rows g and g+8 of its tile
 * into registers, and the tile's scales are those of the same two rows (c0..c3's rows). The sum
 * over k of one group may take its 32 elements in any order as long as A and B agree, so each
 * type picks the order its packing makes cheap (mmq_frag<T>::P8):
 *   natural (Q4_0, Q6_K): the lane's two words are elements 4c..4c+3 and 16+4c..16+4c+3 (Q4_0:
 *     the low and high nibbles of quant bytes 4c..4c+3; Q6_K: its halves keep their scales);
 *     B: words c and 4 + c of the token's group;
 *   P8 (Q8_0, Q4_K): the lane's two words are elements 8c..8c+3 and 8c+4..8c+7, one 8-byte load
 *     (Q4_K: the same 8 bytes give group 2p in the low nibbles and 2p + 1 in the high ones);
 *     B: bytes 8c..8c+7 of the token's group, one int2.
 * Loads per lane and round: Q4_K 2 x (one 16-byte header + 4 x 8 bytes) per superblock; Q8_0
 * 2 x 8 x (8 + 2 bytes); Q4_0 2 x 8 x (4 + 2); Q6_K 2 x 33 two-byte loads (210-byte blocks are
 * 2-byte aligned).
 *
 * Programmatic dependent launch (cuda_pdl.cuh): the dense launch issues its first round of
 * weight loads before pdl_wait_late() (the weights never depend on the kernel before; xq, xds and y
 * do), which lets the next kernel launch (cuda_pdl.cuh). The grouped launch waits first: its tiles come from the grouping
 * kernel. */
#ifndef BK_CUDA_MMQ_CUH
#define BK_CUDA_MMQ_CUH
#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/cuda_pdl.cuh"

#define MMQ_WARPS 8
#define MMQ_THREADS (MMQ_WARPS * 32)
#define MMQ_ROWS 32       /* weight rows per grouped (MOE) block: two warp tiles (cuda_moe.cu's grids) */
#define MMQ_DENSE_ROWS 16 /* weight rows per dense block: one warp tile, split K eight ways */
#define MMQ_LD 20         /* floats per token of a warp's partial tile: lanes (g, c) write rows g (+8)
                           * at tokens 2c, 2c+1, i.e. banks 8c + g + const: conflict-free */
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


/* Weight loads. MMQ_WEIGHT_CG=1 (a build flag, e.g. EXTRA_NVCCFLAGS=-DMMQ_WEIGHT_CG=1; untested
 * on the GPU) makes them skip L1 (ld.global.cg): the weights stream through once, and through
 * L1 they may evict the activations that every warp of the SM reads again. The default (0) is
 * the measured kernel: ld.global.nc / plain loads through L1, as the decode kernels do. */
#ifndef MMQ_WEIGHT_CG
#define MMQ_WEIGHT_CG 0
#endif
#if MMQ_WEIGHT_CG
#define MMQ_LDW(p) __ldcg(p)
__device__ __forceinline__ uint16_t mmq_ld16(const uint8_t *p) { return __ldcg((const unsigned short *)p); }
__device__ __forceinline__ int mmq_ld32_a2(const uint8_t *p) {
    return (int)(mmq_ld16(p) | ((uint32_t)mmq_ld16(p + 2) << 16));
}
__device__ __forceinline__ void mmq_ld64_a2(const uint8_t *p, int w[2]) { /* 8 bytes, 2-byte aligned (ld_a2<2>) */
    uintptr_t a = (uintptr_t)p;
    const uint2 *q = (const uint2 *)(a & ~(uintptr_t)7);
    const uint2 u0 = __ldcg(q), u1 = __ldcg(q + 1);
    const uint32_t W[4] = {u0.x, u0.y, u1.x, u1.y};
    const int o = (int)((a >> 2) & 1), sh = (int)(a & 3) * 8;
#pragma unroll
    for (int i = 0; i < 2; i++) w[i] = (int)__funnelshift_r(o ? W[i + 1] : W[i], o ? W[i + 2] : W[i + 1], sh);
}
#else
#define MMQ_LDW(p) __ldg(p)
__device__ __forceinline__ uint16_t mmq_ld16(const uint8_t *p) { return ld16(p); }
__device__ __forceinline__ int mmq_ld32_a2(const uint8_t *p) { return ld_i32_a2(p); }
__device__ __forceinline__ void mmq_ld64_a2(const uint8_t *p, int w[2]) { ld_a2<2>(p, w); }
#endif

/* ---- per type: one round of a lane's fragments (rows g and g + 8 of its tile, h = 0 / 1) ----
 * load() issues the round's loads (groups G0 .. G0 + RG - 1 that are < n_groups), get() unpacks
 * group j of row h into the A words x (k 4c..4c+3) and y (k 16+4c..) in the type's k order and
 * its factors a, b and half scales s0, s1 (group_dot's meaning). Raw bytes stay packed in
 * registers until get() so that a round's loads are all in flight together. */
/* HALF: a round of half the groups (the kernel's MT > 1 at two blocks an SM: both tiles' rounds in
 * registers at once; K-quants only, see mmq_two_tiles). */
template <int T, bool HALF> struct mmq_frag;

template <bool HALF> struct mmq_frag<QT_Q4_K, HALF> {
    static constexpr int NSB = HALF ? 1 : 2; /* superblocks a round */
    static constexpr int RG = 8 * NSB;     /* whole superblocks (n_groups % 8 == 0) */
    static constexpr bool P8 = true;
    static constexpr bool HAS_B = true; /* a nonzero b (offsets, minimums) */
    uint4 hd[NSB][2]; /* [superblock][h]: d, dmin, 12 scale bytes */
    uint2 q[NSB][2][4]; /* [superblock][h][pair]: bytes 8c..8c+7 of the pair's 32 quant bytes */
    __device__ __forceinline__ void load(const uint8_t *const r[2], int64_t G0, int64_t n_groups, int c) {
#pragma unroll
        for (int u = 0; u < NSB; u++) {
            if (G0 + 8 * u >= n_groups) break;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint8_t *b = r[h] + (G0 / 8 + u) * 144; /* 144-byte blocks: 16-byte aligned */
                hd[u][h] = MMQ_LDW((const uint4 *)b);
#pragma unroll
                for (int pp = 0; pp < 4; pp++) q[u][h][pp] = MMQ_LDW((const uint2 *)(b + 16 + 32 * pp + 8 * c));
            }
        }
    }
    __device__ __forceinline__ void get(int j, int h, int &x, int &y, float &a, float &b, int &s0, int &s1) const {
        const int u = j / 8, jj = j % 8, sh = (jj & 1) * 4; /* group 2p: low nibbles, 2p + 1: high */
        const uint2 w = q[u][h][jj / 2];
        x = (int)((w.x >> sh) & 0x0F0F0F0Fu);
        y = (int)((w.y >> sh) & 0x0F0F0F0Fu);
        const uint4 hh = hd[u][h]; /* scale bytes 0-3 in .y, 4-7 in .z, 8-11 in .w (k4_scale_min) */
        int sc, m;
        k4_sc_m(hh, jj, sc, m);
        a = bk_h2f((uint16_t)hh.x) * (float)sc;
        b = bk_h2f((uint16_t)(hh.x >> 16)) * (float)m;
        s0 = s1 = 1;
    }
};

template <bool HALF> struct mmq_frag<QT_Q8_0, HALF> {
    static_assert(!HALF, "two m16 tiles a warp are for the K-quants (mmq_two_tiles)");
    static constexpr int RG = 8;
    static constexpr bool P8 = true;
    static constexpr bool HAS_B = false; /* a nonzero b (offsets, minimums) */
    int w[8][2][2];       /* [group][h]: quant bytes 8c..8c+7 */
    uint16_t d[8][2];     /* [group][h]: f16 scale */
    __device__ __forceinline__ void load(const uint8_t *const r[2], int64_t G0, int64_t n_groups, int c) {
#pragma unroll
        for (int j = 0; j < RG; j++) {
            if (G0 + j >= n_groups) break;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint8_t *b = r[h] + (G0 + j) * 34; /* 34-byte blocks: 2-byte aligned */
                d[j][h] = mmq_ld16(b);
                mmq_ld64_a2(b + 2 + 8 * c, w[j][h]);
            }
        }
    }
    __device__ __forceinline__ void get(int j, int h, int &x, int &y, float &a, float &b, int &s0, int &s1) const {
        x = w[j][h][0];
        y = w[j][h][1];
        a = bk_h2f(d[j][h]);
        b = 0.0f;
        s0 = s1 = 1;
    }
};

template <bool HALF> struct mmq_frag<QT_Q4_0, HALF> {
    static_assert(!HALF, "two m16 tiles a warp are for the K-quants (mmq_two_tiles)");
    static constexpr int RG = 8;
    static constexpr bool P8 = false;
    static constexpr bool HAS_B = true; /* a nonzero b (offsets, minimums) */
    int w[8][2];      /* [group][h]: quant bytes 4c..4c+3 (elements 4c.. low, 16+4c.. high nibbles) */
    uint16_t d[8][2]; /* [group][h]: f16 scale */
    __device__ __forceinline__ void load(const uint8_t *const r[2], int64_t G0, int64_t n_groups, int c) {
#pragma unroll
        for (int j = 0; j < RG; j++) {
            if (G0 + j >= n_groups) break;
#pragma unroll
            for (int h = 0; h < 2; h++) {
                const uint8_t *b = r[h] + (G0 + j) * 18; /* 18-byte blocks: 2-byte aligned */
                d[j][h] = mmq_ld16(b);
                w[j][h] = mmq_ld32_a2(b + 2 + 4 * c);
            }
        }
    }
    __device__ __forceinline__ void get(int j, int h, int &x, int &y, float &a, float &b, int &s0, int &s1) const {
        const unsigned v = (unsigned)w[j][h];
        x = (int)(v & 0x0F0F0F0Fu);
        y = (int)((v >> 4) & 0x0F0F0F0Fu);
        a = bk_h2f(d[j][h]);
        b = 8.0f * a; /* (n - 8) * x = n * x - 8 * x */
        s0 = s1 = 1;
    }
};

template <bool HALF> struct mmq_frag<QT_Q6_K, HALF> {
    static constexpr int NH = HALF ? 1 : 2; /* 128-element halves of the superblock a round */
    static constexpr int RG = 4 * NH;       /* one superblock, or half of one (G0 % RG == 0, n_groups % 8 == 0) */
    static constexpr bool P8 = false;
    static constexpr bool HAS_B = false; /* a nonzero b (offsets, minimums) */
    int ql[2][NH][2][2]; /* [h][half n][k & 1][word c / 4 + c] of the 4-bit quants */
    int qh[2][NH][2];    /* [h][half n][word c / 4 + c] of the 2-bit highs */
    uint16_t sc[2][RG];  /* [h][group]: its two int8 half scales */
    uint16_t d[2];       /* [h]: f16 superblock scale */
    __device__ __forceinline__ void load(const uint8_t *const r[2], int64_t G0, int64_t n_groups, int c) {
        (void)n_groups;
        const int n0 = HALF ? (int)(G0 / 4 % 2) : 0; /* the round's first half */
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint8_t *b = r[h] + (G0 / 8) * 210; /* 210-byte blocks: 2-byte aligned */
#pragma unroll
            for (int n = 0; n < NH; n++) {
#pragma unroll
                for (int k = 0; k < 2; k++) {
                    const uint8_t *l = b + 64 * (n0 + n) + 32 * k;
                    ql[h][n][k][0] = mmq_ld32_a2(l + 4 * c);
                    ql[h][n][k][1] = mmq_ld32_a2(l + 16 + 4 * c);
                }
                qh[h][n][0] = mmq_ld32_a2(b + 128 + 32 * (n0 + n) + 4 * c);
                qh[h][n][1] = mmq_ld32_a2(b + 128 + 32 * (n0 + n) + 16 + 4 * c);
            }
#pragma unroll
            for (int j = 0; j < RG; j++) sc[h][j] = mmq_ld16(b + 192 + 2 * (4 * n0 + j)); /* 8 n + 2 k = 2 j */
            d[h] = mmq_ld16(b + 208);
        }
    }
    __device__ __forceinline__ void get(int j, int h, int &x, int &y, float &a, float &b, int &s0, int &s1) const {
        const int n = j / 4, k = j % 4, shl = (k >> 1) * 4, shh = 2 * k;
        const unsigned l0 = (unsigned)ql[h][n][k & 1][0], l1 = (unsigned)ql[h][n][k & 1][1];
        const unsigned h0 = (unsigned)qh[h][n][0], h1 = (unsigned)qh[h][n][1];
        x = q6_minus32((l0 >> shl) & 0x0F0F0F0Fu, ((h0 >> shh) & 0x03030303u) << 4);
        y = q6_minus32((l1 >> shl) & 0x0F0F0F0Fu, ((h1 >> shh) & 0x03030303u) << 4);
        s0 = (int)(int8_t)(sc[h][j] & 0xFF);
        s1 = (int)(int8_t)(sc[h][j] >> 8);
        a = bk_h2f(d[h]);
        b = 0.0f;
    }
};

/* One group's activation side for the lane: B words b0, b1 of token g of each n-tile (in the
 * weight type's k order) and the (d, d * sum) pairs of tokens 2c and 2c + 1 (C's columns). */
struct mmq_bfrag {
    int b0, b1;
    float2 d0, d1;
};
template <bool P8, int NTT>
__device__ __forceinline__ void mmq_load_b(const mmq_args &p, const int (&ob)[NTT], const int (&od0)[NTT],
                                           const int (&od1)[NTT], int64_t G, int64_t n_groups, int nv, int c,
                                           mmq_bfrag (&o)[NTT]) {
    if (G >= n_groups) return;
#pragma unroll
    for (int nt = 0; nt < NTT; nt++) {
        if (nt * 8 >= nv) break;
        const int8_t *xb = p.xq + ob[nt] + G * 32;
        if constexpr (P8) {
            const int2 v = __ldg((const int2 *)xb + c);
            o[nt].b0 = v.x;
            o[nt].b1 = v.y;
        } else {
            o[nt].b0 = __ldg((const int *)xb + c);
            o[nt].b1 = __ldg((const int *)xb + 4 + c);
        }
        o[nt].d0 = __ldg(p.xds + od0[nt] + G);
        o[nt].d1 = __ldg(p.xds + od1[nt] + G);
    }
}

/* RT row tiles x KS K-slices per block (see the top); each warp's tile is MT m16 tiles (MT * 16 rows,
 * GLU: MT * 8 gate and up rows) that share its B fragments. */
template <int T, int NT, int RT, int MT, bool GLU, bool MOE>
__global__ void __launch_bounds__(MMQ_THREADS, NT >= 64 || (MT > 1 && NT >= 32) ? 1 : 2) mmq_kernel(mmq_args p) {
    BK_TRACE_SCOPE();
    static_assert(NT % 8 == 0 && NT <= 64, "token tile");
    static_assert(MMQ_WARPS % RT == 0, "row tiles");
    static_assert(MT == 1 || MT == 2, "m16 tiles per warp");
    constexpr int NTT = NT / 8, KS = MMQ_WARPS / RT;
    constexpr int RO = GLU ? 8 : 16; /* output rows per m16 tile */
    using F = mmq_frag<T, (MT > 1 && NT < 32)>; /* 32 tokens: one block an SM, registers for whole rounds */
    __shared__ float part[MMQ_WARPS][MT][NT * MMQ_LD]; /* per warp and m16 tile: [token][tile row] partial sums */
    __shared__ int xrow[NT], yrow[NT];
    const int tid = threadIdx.x, warp = tid / 32, lane = tid % 32, g = lane >> 2, c = lane & 3;
    const int tile = warp % RT, ks = warp / RT;
    bool waited = false;

    /* the block's tokens: activation rows, output rows, how many are real */
    int64_t e = 0;
    int nv;
    if constexpr (MOE) {
        pdl_wait_late(); /* the tile list is the grouping kernel's output */
        waited = true;
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
    /* the lane's rows g (h = 0) and g + 8 (h = 1) of each of its m16 tiles; GLU: gate row and up row
     * r0 + g. Rows past the matrix repeat its last row (never stored). */
    const int64_t rb = (int64_t)blockIdx.x * RT * MT * RO, r0 = rb + tile * MT * RO;
    const uint8_t *rows[MT][2];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int h = 0; h < 2; h++) {
            int64_t rr = r0 + mt * RO + g + (GLU ? 0 : 8 * h);
            if (rr >= p.n_rows) rr = p.n_rows - 1;
            const bool up = GLU && h == 1;
            const uint8_t *const *tab = MOE ? (up ? p.W2tab : p.Wtab) : NULL;
            const uint8_t *base = tab ? tab[e] : (up ? p.W2 : p.W) + e * p.n_rows * p.row_bytes;
            rows[mt][h] = base + rr * p.row_bytes;
        }
    __syncthreads();

    /* int32 offsets (xq holds at most xq_cap < 2^31 values): B rows and the (d, sum) rows */
    const int64_t n_in = p.n_in, n_groups = n_in / 32;
    int ob[NTT], od0[NTT], od1[NTT];
#pragma unroll
    for (int nt = 0; nt < NTT; nt++) {
        ob[nt] = xrow[nt * 8 + g] * (int)n_in;
        od0[nt] = xrow[nt * 8 + 2 * c] * (int)n_groups;
        od1[nt] = xrow[nt * 8 + 2 * c + 1] * (int)n_groups;
    }
    float acc[MT][NTT][4];
#pragma unroll
    for (int mt = 0; mt < MT; mt++)
#pragma unroll
        for (int nt = 0; nt < NTT; nt++)
#pragma unroll
            for (int i = 0; i < 4; i++) acc[mt][nt][i] = 0.0f;

    /* B fragments and (d, sum) pairs of D groups ahead in registers: a warp's groups are a chain,
     * and loading each group's activations only when it is multiplied would expose an L2 round
     * trip per group */
    constexpr int D = NTT == 1 ? 4 : NTT == 2 ? 2 : 1;
    mmq_bfrag bq[D][NTT];
    F f[MT];
    for (int64_t G0 = (int64_t)ks * F::RG; G0 < n_groups; G0 += (int64_t)KS * F::RG) {
#pragma unroll
        for (int mt = 0; mt < MT; mt++) f[mt].load(rows[mt], G0, n_groups, c);
        if (!waited) { /* the first round's weights are in flight: now the activations */
            pdl_wait_late();
            waited = true;
        }
#pragma unroll
        for (int j = 0; j < D; j++) mmq_load_b<F::P8, NTT>(p, ob, od0, od1, G0 + j, n_groups, nv, c, bq[j]);
#pragma unroll
        for (int j = 0; j < F::RG; j++) {
            const int64_t G = G0 + j;
            if (G >= n_groups) break;
#pragma unroll
            for (int mt = 0; mt < MT; mt++) {
                int A[4], s0[2], s1[2];
                float fa[2], fb[2];
#pragma unroll
                for (int h = 0; h < 2; h++) f[mt].get(j, h, A[h], A[2 + h], fa[h], fb[h], s0[h], s1[h]);
#pragma unroll
                for (int nt = 0; nt < NTT; nt++) {
                    if (nt * 8 >= nv) break;
                    const mmq_bfrag &bf = bq[j % D][nt];
                    int cc[4];
                    if constexpr (T == QT_Q6_K) {
                        int lo[4], hi[4];
                        mmq_mma16(lo, A[0], A[1], bf.b0);
                        mmq_mma16(hi, A[2], A[3], bf.b1);
#pragma unroll
                        for (int i = 0; i < 4; i++) cc[i] = s0[i >> 1] * lo[i] + s1[i >> 1] * hi[i];
                    } else {
                        mmq_mma32(cc, A[0], A[1], A[2], A[3], bf.b0, bf.b1);
                    }
                    /* group_dot's a * d_x * (float)isum - b * (d_x * sum x) */
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const float2 d = (i & 1) ? bf.d1 : bf.d0;
                        if constexpr (F::HAS_B) acc[mt][nt][i] += fa[i >> 1] * d.x * (float)cc[i] - fb[i >> 1] * d.y;
                        else acc[mt][nt][i] += fa[i >> 1] * d.x * (float)cc[i];
                    }
                }
            }
            if (j + D < F::RG) mmq_load_b<F::P8, NTT>(p, ob, od0, od1, G + D, n_groups, nv, c, bq[j % D]);
        }
    }
    if (!waited) { /* a warp without rounds still stores (and reads y when accumulating) */
        pdl_wait_late();
    }

    /* the K-slices' partial sums, added in ks order (deterministic) */
#pragma unroll
    for (int mt = 0; mt < MT; mt++) {
        float *pw = part[warp][mt];
#pragma unroll
        for (int nt = 0; nt < NTT; nt++) {
            if (nt * 8 >= nv) break;
#pragma unroll
            for (int i = 0; i < 4; i++) pw[(nt * 8 + 2 * c + (i & 1)) * MMQ_LD + g + 8 * (i >> 1)] = acc[mt][nt][i];
        }
    }
    __syncthreads();
    constexpr int TR = MT * RO, BR = RT * TR; /* output rows of a warp's tile, of the block */
    for (int i = tid; i < NT * BR; i += MMQ_THREADS) {
        const int t = i / BR, rr = i % BR, tl = rr / TR, mt = rr % TR / RO, m = rr % RO;
        if (t >= nv || rb + rr >= p.n_rows) continue;
        float v = 0.0f, u = 0.0f;
#pragma unroll
        for (int k = 0; k < KS; k++) {
            const float *pk = part[k * RT + tl][mt] + t * MMQ_LD;
            v += pk[m];
            if (GLU) u += pk[8 + m];
        }
        /* GLU: the tile's rows r0 + mt * 8 + m of gate and of up */
        float *o = p.y + (int64_t)yrow[t] * p.ldy + rb + rr;
        if (GLU) *o = silu_f(v) * u;
        else if (p.mode == MMQ_SILU_MUL) *o = silu_f(*o) * v;
        else *o = (p.accum ? *o : 0.0f) + v + (p.bias ? p.bias[rb + rr] : 0.0f);
    }
}

/* m16 tiles per warp for a token tile of nt over `rows` weight rows (GLU: gate and up rows) of a
 * K-quant type: two from 16 tokens where there are blocks enough for every SM twice over (the
 * grouped expert products always: their grids count tiles too), else one; Q8_0 and Q4_0 one
 * (BRISK_CUDA_MMQ_MT=1: always one). Two tiles share a warp's B fragments, whose loads otherwise
 * saturate L1 (ncu, H200, q4_K 12288 x 4096 at 32 tokens: L1 89% -> 57%, DRAM 8%), but halve the
 * blocks: a 4096-row matrix then leaves SMs idle (H200 lab: q8_0 4096 x 4096 at 16 tokens 15.1 ->
 * 22.8 us). H200 lab, 32 tokens, one -> two: q4_K 12288 x 4096 52.8 -> 47.4 us, q6_K 62.6 -> 57.6,
 * but q8_0 65.7 -> 71.1 (its groups are a few instructions of unpacking: fewer warps hide less);
 * qwen3-30b-a3b pp512 7,449 -> 8,734 tokens/s. A dense block holds MMQ_DENSE_ROWS * mt rows (GLU:
 * half). */
__host__ __device__ constexpr bool mmq_two_tiles(uint32_t type) { return type == QT_Q4_K || type == QT_Q6_K; }
static inline int mmq_mt(const cuda_backend *cb, uint32_t type, int nt, int64_t rows) {
    return nt >= 16 && cb->mmq_mt != 1 && mmq_two_tiles(type) &&
                   rows >= (int64_t)2 * MMQ_DENSE_ROWS * 2 * cb->n_sm
               ? 2
               : 1;
}

/* One launch for weight type T with the token tile nt (8, 16, 32 or 64) and mt m16 tiles per warp:
 * dense (MOE false) as a programmatic launch on cb's stream, MMQ_DENSE_ROWS * mt rows per block (GLU:
 * half); grouped on stream s, the ordinary way, MMQ_ROWS rows per block (GLU: MMQ_ROWS / 2) either way. */
template <int T, bool GLU, bool MOE, int MT>
static void mmq_launch_mt(cuda_backend *cb, cudaStream_t s, dim3 grid, int nt, const mmq_args &p) {
    constexpr int RT = MOE ? MMQ_ROWS / 16 / MT : MMQ_DENSE_ROWS / 16;
#define MMQ_GO(NT)                                                                                      \
    do {                                                                                                \
        if (cb) pdl_launch(cb, mmq_kernel<T, NT, RT, MT, GLU, MOE>, grid, dim3(MMQ_THREADS), 0, p);      \
        else mmq_kernel<T, NT, RT, MT, GLU, MOE><<<grid, MMQ_THREADS, 0, s>>>(p);                       \
    } while (0)
    if constexpr (MT == 1) {
        if (nt <= 8) MMQ_GO(8);
        else if (nt <= 16) MMQ_GO(16);
        else if (nt <= 32) MMQ_GO(32);
        else MMQ_GO(64);
    } else {
        if (nt <= 16) MMQ_GO(16);
        else MMQ_GO(32); /* 64: two tiles of 64 tokens need more than 48 KB of partial sums */
    }
#undef MMQ_GO
}
template <int T, bool GLU, bool MOE>
static void mmq_launch_nt(cuda_backend *cb, cudaStream_t s, dim3 grid, int nt, int mt, const mmq_args &p) {
    if constexpr (mmq_two_tiles(T))
        if (mt == 2 && nt <= 32) return mmq_launch_mt<T, GLU, MOE, 2>(cb, s, grid, nt, p);
    mmq_launch_mt<T, GLU, MOE, 1>(cb, s, grid, nt, p); /* mmq_mt gives the other types one tile */
}

/* The type dispatch; false for a type the integer-dot loaders do not know. */
template <bool GLU, bool MOE>
static bool mmq_launch_any(cuda_backend *cb, cudaStream_t s, uint32_t type, dim3 grid, int nt, int mt,
                           const mmq_args &p) {
    switch (type) {
    case QT_Q8_0: mmq_launch_nt<QT_Q8_0, GLU, MOE>(cb, s, grid, nt, mt, p); return true;
    case QT_Q4_0: mmq_launch_nt<QT_Q4_0, GLU, MOE>(cb, s, grid, nt, mt, p); return true;
    case QT_Q4_K: mmq_launch_nt<QT_Q4_K, GLU, MOE>(cb, s, grid, nt, mt, p); return true;
    case QT_Q6_K: mmq_launch_nt<QT_Q6_K, GLU, MOE>(cb, s, grid, nt, mt, p); return true;
    default: return false;
    }
}
/* Grouped expert products (cuda_moe.cu): grid (ceil(n_rows / MMQ_ROWS) (GLU: / (MMQ_ROWS / 2)), tiles). */
template <bool GLU, bool MOE>
static bool mmq_launch(const cuda_backend *cb, cudaStream_t s, uint32_t type, dim3 grid, int nt, const mmq_args &p) {
    return mmq_launch_any<GLU, MOE>(NULL, s, type, grid, nt, mmq_mt(cb, type, nt, INT64_MAX), p);
}
/* Dense products (cuda_mmq.cu), programmatic on cb's stream: grid (ceil(n_rows / (MMQ_DENSE_ROWS * mt))
 * (GLU: / (MMQ_DENSE_ROWS / 2 * mt)), token tiles) for the mt the caller got from mmq_mt. */
template <bool GLU, bool MOE>
static bool mmq_launch(cuda_backend *cb, uint32_t type, dim3 grid, int nt, int mt, const mmq_args &p) {
    if (!mmq_launch_any<GLU, MOE>(cb, cb->stream, type, grid, nt, mt, p)) return false;
    CU_COUNT(cb, CU_PATH_MMQ);
    return true;
}
#endif
