/* cuda_attn_mma.cu — decode attention over a deep paged cache on tensor cores
 * (flash-decoding: one token a sequence, or a few, each reading its own history).
 *
 * Why: cuda_attn_decode.cu's kernel computes scores and the value sums on the
 * CUDA cores, one K/V row per 32 / (head_dim / 8) lanes, with a shuffle
 * reduction per row and head. With a GQA group of G query heads that is
 * ~G * head_dim * 2 multiply-adds and ~5 G shuffles per row: at head_dim 256
 * and 8 heads (qwen3.6-35b-a3b) the kernel is bound by issue, not memory, and
 * read the cache at ~0.36 TB/s at 128K (issue 28, H100). Here a KV head's G
 * query heads (G <= 16) are the 16 rows of an mma.sync m16n8k16 tile, so
 * S = Q K^T and O += P V are a few tensor-core instructions per 16 keys and
 * every K/V byte is read once for the whole group, as llama.cpp's mma kernel
 * does for GQA.
 *
 * Work split: one block of DEC_WARPS warps per (KV head, token, split). The
 * split's positions, a multiple of DEC_WARPS * 16, are dealt to the warps in
 * tiles of 16 keys, round robin; each warp runs its own pipeline of DM_STAGES
 * cp.async stages in its own part of shared memory (no block barrier in the
 * loop) and keeps its own online softmax (16 rows: max, sum, the 16 x head_dim
 * accumulator), and the warps merge through shared memory at the end (the
 * pipeline's memory, dead by then). Splits: enough blocks for every SM's
 * resident slots (cudaOccupancy...), at least 64 positions each.
 *
 * Cache types: f16 rows are copied into the tile as they are. q8_0 and q4_0
 * rows (34- and 18-byte blocks: rows of 136 or 72 bytes at head_dim 128, 272
 * or 144 at 256, all 8-byte aligned) are copied raw, 8 bytes at a time, and
 * each lane builds its mma fragments straight from the raw bytes in
 * registers (d * q rounded to f16, kvq_h2), with no f16 tile: a word of four
 * codes, byte-permuted under f16 1024's exponent, gives two half2 in a few
 * instructions. For that the dimensions are reordered where it costs nothing:
 * - S = Q K^T sums over the dimensions in any order, so Q is stored in
 *   dm_qperm's order, the one in which a lane's B fragment for key n is the
 *   consecutive bytes of one word of key n's row (q8_0: 8 bytes a lane and
 *   block; q4_0: 4 bytes, low nibbles then high);
 * - O += P V's B fragment holds one dimension of four keys: the lane of column
 *   g takes the dimensions (D / 8) g + j of n-tile j (a whole block at head
 *   dim 256, half of one at 128), so its codes for four keys are four words
 *   of four rows, interleaved pairwise by byte permutes, each row with its own
 *   scale in its half of the half2; the output is stored back in order.
 * With the f16 tile gone a warp's shared memory is only raw stages, as many as
 * let two blocks (head dim 256) or three (128) share an SM: the tile and the
 * conversion through shared memory (stores, ldmatrix, 2-byte loads) held the
 * quantized caches to 20-46% of an H100's copy bandwidth at 128K (session 24).
 *
 * Merge: up to DEC_FAST_MERGE splits, the last block of a (token, KV head)
 * merges (dec_combine_group, a split counter as in cuda_attn_decode.cu); more
 * splits are merged by dm_combine_kernel, one block per (head, token, 64 output
 * values) with 16 splits' loads in flight a thread.
 *
 * With the fused rope (dec_rope, cuda_attention_rope), q's heads are
 * normalised and rotated here, and the step's own K/V row (position pos[t])
 * is made by the block whose split holds it: written to the cache in its
 * format and put into the tile from shared memory (the same bits as a read
 * of the cache). The split's first tiles are requested before pdl_wait: the
 * positions, page tables and earlier steps' rows are all written before the
 * step, and nothing before this launch in the step writes the cache.
 *
 * Precision: Q, P, K and V are rounded to f16 for the products; sums and the
 * softmax are f32, base 2 (q pre-scaled by scale * log2 e), as the prefill
 * kernel (cuda_attn_prefill.cu). */
#include <math.h>

#include "backend/cuda/cuda_attn_decode.cuh"
#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/cuda_mma_ptx.cuh"
#include "backend/cuda/cuda_pdl.cuh"

#define DM_THREADS (DEC_WARPS * 32)
#define DM_BN 16   /* keys a warp tile */
#define DM_ROWS 16 /* query rows of the tile: a KV head's query heads (<= 16) */
#define DM_PAD 8   /* f16 padding per shared row: conflict-free ldmatrix, 16-byte rows */
#define DM_SPLIT_ALIGN (DEC_WARPS * DM_BN) /* a split's positions: whole tiles for every warp */
#define DM_MAX_SPLIT 256
#define DM_COMBINE_DIMS 64 /* output values a block of dm_combine_kernel */

template <int KT, int D> struct dm_cfg {
    static constexpr int LD = D + DM_PAD;                           /* f16 row stride */
    static constexpr int RB = KT == KT_F16 ? D * 2 : D / 32 * kt_block_bytes(KT); /* cache row bytes */
    static constexpr int TILE = 2 * DM_BN * LD * 2;                 /* K and V f16 tiles, bytes */
    static constexpr int RAW = KT == KT_F16 ? TILE : 2 * DM_BN * RB; /* a stage, bytes */
    static constexpr int QS = DM_ROWS * LD * 2;
    /* quantized: the raw stages that let BPS blocks share an SM (227 KB; head dim 256: two, as the
     * registers allow; 128: three), at most 8; beside the fused rope's static arrays (RSTAT: angles,
     * the warps' q rows, the step's K/V row, the merge's maxima and sums) and the driver's 1 KB */
    static constexpr int BPS = D == 256 ? 2 : 3;
    static constexpr int RSTAT = 4 * D + DEC_WARPS * D * 4 + 2 * RB + 2 * DEC_WARPS * DM_ROWS * 4 + 256;
    static constexpr int QFIT = (227 * 1024 / BPS - 1024 - RSTAT - QS) / DEC_WARPS / RAW;
    static constexpr int STAGES = KT == KT_F16 ? (D == 256 ? 2 : 3) : (QFIT < 8 ? QFIT : 8); /* cp.async stages a warp */
    static constexpr int WARP = STAGES * RAW;
    static constexpr size_t smem = QS + (size_t)DEC_WARPS * WARP;
    static_assert(STAGES >= 2, "a stage in flight while one is used");
    static_assert(RAW % 16 == 0 && TILE % 16 == 0, "16-byte aligned stages");
    static_assert(RB % 8 == 0, "rows of whole 8-byte copies");
    static_assert((size_t)DEC_WARPS * DM_ROWS * D * 4 <= (size_t)DEC_WARPS * WARP, "the warps' merge fits the rings");
};

/* The split of a token with np positions over n_split parts: each a multiple of DM_SPLIT_ALIGN and
 * at least min_chunk; returns the parts that hold positions (n_use), *chunk their length. The same
 * in the attention and the merge kernels. */
__device__ __forceinline__ int dm_split(int np, int n_split, int min_chunk, int *chunk) {
    int c = ((np + n_split - 1) / n_split + DM_SPLIT_ALIGN - 1) / DM_SPLIT_ALIGN * DM_SPLIT_ALIGN;
    if (c < min_chunk) c = min_chunk;
    *chunk = c;
    return (np + c - 1) / c;
}

/* The dimension a quantized cache's Q column k holds (module comment): within each block of 32,
 * column 16 h + 8 r + 2 tig + e (chunk h of the block, b-register r of lane tig, element e) is the
 * value of the lane's word h (q8_0: bytes 8 tig + 4 h ..) or of its word's nibbles h (q4_0: bytes
 * 4 tig ..; low nibbles the block's first 16 values), element 2 r + e of the word. */
template <int KT> __device__ __forceinline__ int dm_qperm(int k) {
    const int x = k & 31, h = x >> 4, r = (x >> 3) & 1, tig = (x >> 1) & 3, e = x & 1;
    return (k & ~31) + (KT == KT_Q8_0 ? 8 * tig + 4 * h : 16 * h + 4 * tig) + 2 * r + e;
}

/* N words of shared memory from a 2-byte-aligned address p (mis: p % 4 == 2; a constant where
 * the caller's offsets are): aligned loads and funnel shifts; the word past the end only when
 * misaligned (it stays inside the row's next block, or the caller's row). */
template <int N> __device__ __forceinline__ void dm_words(const uint8_t *p, bool mis, uint32_t (&w)[N]) {
    const uint32_t *a = (const uint32_t *)(p - (mis ? 2 : 0));
    uint32_t x = a[0];
#pragma unroll
    for (int i = 0; i < N; i++) {
        const uint32_t y = mis || i + 1 < N ? a[i + 1] : 0u;
        w[i] = mis ? __funnelshift_r(x, y, 16) : x;
        x = y;
    }
}

template <int KT, int D, bool RP>
__global__ void __launch_bounds__(DM_THREADS)
attn_dec_mma_kernel(const float *q, const void *kc, const void *vc, int bs, const int32_t *pos,
                    const int32_t *tab_off, const int32_t *tabs, int n_head, int n_head_kv, int group,
                    float scale_log2, int min_chunk, float *out, float *part, int *cnt, int8_t *xq, float2 *xds,
                    att_gate gate, dec_rope rope) {
#if FA_ARCH_OK
    BK_TRACE_SCOPE();
    using C = dm_cfg<KT, D>;
    constexpr int LD = C::LD, RB = C::RB, ST = C::STAGES;
    extern __shared__ __align__(16) uint8_t dm_smem[];
    __half *Qs = (__half *)dm_smem;
    __shared__ float r_cs[RP ? D / 2 : 1], r_sn[RP ? D / 2 : 1];
    __shared__ float q_row[DEC_WARPS][RP ? D : 1];
    __shared__ __align__(16) uint8_t new_k[RP ? RB : 16], new_v[RP ? RB : 16]; /* the step's row, cache format */
    __shared__ float m_s[DEC_WARPS][DM_ROWS], l_s[DEC_WARPS][DM_ROWS];
    const unsigned full = 0xffffffffu;
    const int kvh = blockIdx.x, t = blockIdx.y, sp = blockIdx.z, n_split = gridDim.z, h0 = kvh * group;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, tig = lane % 4;
    uint8_t *wbase = dm_smem + C::QS + (size_t)warp * C::WARP;

    if constexpr (RP) /* the angles need only the step's positions (copied before any kernel) */
        for (int i = tid; i < rope.a.n_rot / 2; i += DM_THREADS) rope_cs(i, pos[t], rope.ff, rope.a, &r_cs[i], &r_sn[i]);

    int np = 0, chunk = 0, n_use = 0, p_begin = 0, p_end = 0, p_new = -1, n_tiles = 0, n_mine = 0;
    const int32_t *table = NULL;
    /* Requests the warp's tile it (keys p_begin + 16 (warp + it DEC_WARPS) ...) into stage it % ST, and
     * commits the group (empty past the warp's last tile, so that the wait counts stay uniform).
     * Rows past the split are zeroed (their P is 0, but 0 * NaN would not be); the step's own row
     * (RP) is filled when the tile is used. */
    auto issue = [&](int it) {
        if (it < n_mine) {
            const int p = p_begin + DM_BN * (warp + it * DEC_WARPS), pk = p + lane % 16;
            const int my = pk < p_end && !(RP && pk == p_new) ? dec_row(table, bs, pk, n_head_kv, kvh) : -1;
            uint8_t *st = wbase + (size_t)(it % ST) * C::RAW;
            if constexpr (KT == KT_F16) {
                __half *Kt = (__half *)st, *Vt = Kt + DM_BN * LD;
                constexpr int CPR = D / 8; /* 16-byte chunks a row */
#pragma unroll
                for (int i = 0; i < DM_BN * CPR / 32; i++) {
                    const int c = lane + 32 * i, r = c / CPR, c8 = c % CPR;
                    const int row = __shfl_sync(full, my, r);
                    __half *dk = Kt + r * LD + 8 * c8, *dv = Vt + r * LD + 8 * c8;
                    if (row >= 0) {
                        const int64_t e = (int64_t)row * D + 8 * c8;
                        fa_cp_async16(dk, (const __half *)kc + e);
                        fa_cp_async16(dv, (const __half *)vc + e);
                    } else {
                        *(uint4 *)dk = make_uint4(0, 0, 0, 0);
                        *(uint4 *)dv = make_uint4(0, 0, 0, 0);
                    }
                }
            } else { /* q8_0, q4_0: the raw rows, 8 bytes at a time; the conversion zeroes the missing ones */
                constexpr int CPR = RB / 8, N = DM_BN * CPR;
#pragma unroll
                for (int i = 0; i < (N + 31) / 32; i++) {
                    const int c = lane + 32 * i, r = min(c / CPR, DM_BN - 1), c8 = c % CPR;
                    const int row = __shfl_sync(full, my, r);
                    if (c < N && row >= 0) {
                        const int64_t b = (int64_t)row * RB + 8 * c8;
                        fa_cp_async8(st + r * RB + 8 * c8, (const uint8_t *)kc + b);
                        fa_cp_async8(st + DM_BN * RB + r * RB + 8 * c8, (const uint8_t *)vc + b);
                    }
                }
            }
        }
        fa_cp_commit();
    };
    auto begin = [&]() {
        np = pos[t] + 1;
        n_use = dm_split(np, n_split, min_chunk, &chunk);
        if (sp >= n_use) return false;
        p_begin = sp * chunk;
        p_end = min(np, p_begin + chunk);
        p_new = RP && np - 1 >= p_begin && np - 1 < p_end ? np - 1 : -1;
        table = tabs + tab_off[t];
        n_tiles = (p_end - p_begin + DM_BN - 1) / DM_BN;
        n_mine = warp < n_tiles ? (n_tiles - warp + DEC_WARPS - 1) / DEC_WARPS : 0;
#pragma unroll
        for (int s = 0; s < ST - 1; s++) issue(s);
        return true;
    };
    if (RP && !begin()) return;
    pdl_wait();
    if (!RP && !begin()) return;
    if (n_use == 1) part = NULL;

    /* the queries, pre-scaled and rounded to f16; rows past the group are zero */
    if constexpr (RP) {
        const int half = rope.a.n_rot / 2;
        __syncthreads(); /* the angles */
        for (int r = warp; r < DM_ROWS; r += DEC_WARPS) {
            if (r < group) {
                qk_head_norm_rope(rope.qs + ((size_t)t * n_head + h0 + r) * rope.qp, rope.qw, rope.eps, D, half, r_cs,
                                  r_sn, rope.a, q_row[warp]);
                for (int i = lane; i < D; i += 32) /* (quantized caches: in dm_qperm's order) */
                    Qs[r * LD + i] = __float2half_rn(q_row[warp][KT == KT_F16 ? i : dm_qperm<KT>(i)] * scale_log2);
            } else {
                for (int i = lane; i < D; i += 32) Qs[r * LD + i] = __float2half_rn(0.0f);
            }
            __syncwarp();
        }
        /* (dec_step_row's and dec_last_block's work below is written out: through those helpers ptxas
         * spills in three of this kernel's instances, none as it stands) */
        if (p_new >= 0 && warp == DEC_WARPS - 1) { /* the step's K/V row: to the cache and new_k / new_v */
            const size_t r = (size_t)t * n_head_kv + kvh;
            float *kr = q_row[warp];
            qk_head_norm_rope(rope.k + r * D, rope.kw, rope.eps, D, half, r_cs, r_sn, rope.a, kr);
            const size_t e0 = ((size_t)rope.slot[t] * n_head_kv + kvh) * D;
            for (int i = lane; i < D; i += 32) { /* D % 32 == 0: a warp stores whole blocks */
                const float vv = rope.v[r * D + i];
                kv_store<KT>(new_k, (size_t)i, kr[i]);
                kv_store<KT>(new_v, (size_t)i, vv);
                kv_store<KT>((void *)kc, e0 + i, kr[i]);
                kv_store<KT>((void *)vc, e0 + i, vv);
            }
        }
    } else {
        for (int i = tid; i < DM_ROWS * D; i += DM_THREADS) {
            const int r = i / D, d = i % D, dq = KT == KT_F16 ? d : dm_qperm<KT>(d);
            const float x = r < group ? q[((size_t)t * n_head + h0 + r) * D + dq] * scale_log2 : 0.0f;
            Qs[r * LD + d] = __float2half_rn(x);
        }
    }
    __syncthreads();

    float o[D / 8][4];
#pragma unroll
    for (int i = 0; i < D / 8; i++) o[i][0] = o[i][1] = o[i][2] = o[i][3] = 0.0f;
    float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f; /* rows g and g + 8; l: this lane's keys */

    for (int it = 0; it < n_mine; it++) {
        issue(it + ST - 1);
        fa_cp_wait<ST - 1>(); /* tile it's group has landed (this lane's copies) */
        __syncwarp();         /* ... and every lane's */
        const int p = p_begin + DM_BN * (warp + it * DEC_WARPS);
        uint8_t *st = wbase + (size_t)(it % ST) * C::RAW;
        /* a quantized row of the stage (part 0: K, 1: V), or the step's own row */
        auto qrow = [&](int part, int r) -> const uint8_t * {
            return RP && p + r == p_new ? (part ? new_v : new_k) : st + part * DM_BN * RB + r * RB;
        };
        /* S (16 x 16) = Q K^T, the even and odd 16-dimension chunks in two accumulators: two chains
         * of dependent mma of half the length (the chain's latency, not the loads, set a small tile's
         * time: a quantized tile is 16 keys of 2.3-8.7 KB) */
        float s[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
        float s2[2][4] = {{0.0f, 0.0f, 0.0f, 0.0f}, {0.0f, 0.0f, 0.0f, 0.0f}};
        if constexpr (KT == KT_F16) {
            __half *Kt = (__half *)st, *Vt = Kt + DM_BN * LD;
            if (RP && p_new >= p && p_new < p + DM_BN) { /* the step's row from shared memory */
                const int r = p_new - p;
                for (int c = lane; c < D / 8; c += 32) {
                    *(uint4 *)(Kt + r * LD + 8 * c) = *(const uint4 *)(new_k + 16 * c);
                    *(uint4 *)(Vt + r * LD + 8 * c) = *(const uint4 *)(new_v + 16 * c);
                }
                __syncwarp();
            }
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) {
                uint32_t a[4], b[4];
                fa_ldsm_x4(a, Qs + (lane % 16) * LD + 16 * kk + 8 * (lane / 16));
                /* matrices: keys +0/+8 (lane / 16) x dims +0/+8 (lane / 8 % 2) -> b0, b1 of the two n-tiles */
                fa_ldsm_x4(b, Kt + (lane % 8 + 8 * (lane / 16)) * LD + 16 * kk + 8 * (lane / 8 % 2));
                float(&acc)[2][4] = kk % 2 ? s2 : s;
                fa_mma(acc[0], a, b[0], b[1]);
                fa_mma(acc[1], a, b[2], b[3]);
            }
        } else { /* keys g and g + 8 of the tile (the lane's B columns of the two n-tiles), in registers */
            constexpr int BB = kt_block_bytes(KT), NW = KT == KT_Q8_0 ? 2 : 1, WB = 4 * NW;
            const uint8_t *k0 = qrow(0, g), *k1 = qrow(0, g + 8);
#pragma unroll
            for (int b = 0; b < D / 32; b++) {
                const __half2 d0 = __half2half2(__ushort_as_half(ld16(k0 + BB * b)));
                const __half2 d1 = __half2half2(__ushort_as_half(ld16(k1 + BB * b)));
                uint32_t w0[NW], w1[NW];
                const bool mis = (BB * b + 2) % 4 != 0; /* (a constant: rows are 8-byte aligned) */
                dm_words<NW>(k0 + BB * b + 2 + WB * tig, mis, w0);
                dm_words<NW>(k1 + BB * b + 2 + WB * tig, mis, w1);
#pragma unroll
                for (int h = 0; h < 2; h++) {
                    uint32_t a[4];
                    fa_ldsm_x4(a, Qs + (lane % 16) * LD + 16 * (2 * b + h) + 8 * (lane / 16));
                    const uint32_t c0 = KT == KT_Q8_0 ? w0[h % NW] ^ 0x80808080u : (w0[0] >> (4 * h)) & 0x0f0f0f0fu;
                    const uint32_t c1 = KT == KT_Q8_0 ? w1[h % NW] ^ 0x80808080u : (w1[0] >> (4 * h)) & 0x0f0f0f0fu;
                    float(&acc)[2][4] = h ? s2 : s;
                    fa_mma(acc[0], a, kvq_h2<KT>(c0, 0x5140, d0), kvq_h2<KT>(c0, 0x5342, d0));
                    fa_mma(acc[1], a, kvq_h2<KT>(c1, 0x5140, d1), kvq_h2<KT>(c1, 0x5342, d1));
                }
            }
        }
#pragma unroll
        for (int i = 0; i < 2; i++)
#pragma unroll
            for (int e = 0; e < 4; e++) s[i][e] += s2[i][e];
        /* s[i][0..1]: row g, keys p + 8i + 2 tig + {0, 1}; s[i][2..3]: row g + 8 */
        if (p + DM_BN > p_end) {
#pragma unroll
            for (int i = 0; i < 2; i++)
#pragma unroll
                for (int e = 0; e < 2; e++)
                    if (p + 8 * i + 2 * tig + e >= p_end) s[i][e] = s[i][2 + e] = -INFINITY;
        }
        /* online softmax (key p is in the split: every row's max is finite) */
        float mxa = fmaxf(ma, fmaxf(fmaxf(s[0][0], s[0][1]), fmaxf(s[1][0], s[1][1])));
        float mxb = fmaxf(mb, fmaxf(fmaxf(s[0][2], s[0][3]), fmaxf(s[1][2], s[1][3])));
#pragma unroll
        for (int x = 1; x < 4; x <<= 1) { /* the four lanes of a row */
            mxa = fmaxf(mxa, __shfl_xor_sync(full, mxa, x));
            mxb = fmaxf(mxb, __shfl_xor_sync(full, mxb, x));
        }
        const float fa = exp2f(ma - mxa), fb = exp2f(mb - mxb);
        ma = mxa;
        mb = mxb;
#pragma unroll
        for (int i = 0; i < 2; i++) {
            s[i][0] = exp2f(s[i][0] - mxa);
            s[i][1] = exp2f(s[i][1] - mxa);
            s[i][2] = exp2f(s[i][2] - mxb);
            s[i][3] = exp2f(s[i][3] - mxb);
        }
        la = la * fa + (s[0][0] + s[0][1] + s[1][0] + s[1][1]);
        lb = lb * fb + (s[0][2] + s[0][3] + s[1][2] + s[1][3]);
        /* O (16 x D) += P (16 x 16) V: the S accumulators are P's A fragment */
        uint32_t a[4] = {fa_pack(s[0][0], s[0][1]), fa_pack(s[0][2], s[0][3]), fa_pack(s[1][0], s[1][1]),
                         fa_pack(s[1][2], s[1][3])};
        if (__any_sync(full, fa != 1.0f || fb != 1.0f)) /* (once the maxima settle, most tiles keep them) */
#pragma unroll
            for (int i = 0; i < D / 8; i++) {
                o[i][0] *= fa;
                o[i][1] *= fa;
                o[i][2] *= fb;
                o[i][3] *= fb;
            }
        if constexpr (KT == KT_F16) {
            const __half *Vt = (const __half *)st + DM_BN * LD;
#pragma unroll
            for (int dp = 0; dp < D / 16; dp++) {
                uint32_t b[4]; /* transposed: keys +0/+8 (lane / 8 % 2) x dims +0/+8 (lane / 16) */
                fa_ldsm_x4_t(b, Vt + (lane % 16) * LD + 16 * dp + 8 * (lane / 16));
                fa_mma(o[2 * dp], a, b[0], b[1]);
                fa_mma(o[2 * dp + 1], a, b[2], b[3]);
            }
        } else {
            /* the lane's B fragments: keys 2 tig, 2 tig + 1 (b0) and 2 tig + 8, 2 tig + 9 (b1) of
             * dimension (D / 8) g + j for n-tile j; the codes of a key pair interleaved by a byte
             * permute, each key's scale in its half (0 past the split: its P is 0, its bytes stale) */
            constexpr int BB = kt_block_bytes(KT), NW = KT == KT_Q8_0 && D == 256 ? 8 : 4;
            const int boff = BB * (D == 256 ? g : g / 2);
            const int qoff = boff + 2 + (KT == KT_Q8_0 && D == 128 ? 16 * (g % 2) : 0);
            const bool mis = qoff % 4 != 0;
            const uint8_t *rw[4];
            __half dv[4];
#pragma unroll
            for (int k = 0; k < 4; k++) {
                const int r = 2 * tig + (k & 1) + 8 * (k >> 1);
                rw[k] = qrow(1, r);
                dv[k] = p + r < p_end ? __ushort_as_half(ld16(rw[k] + boff)) : __ushort_as_half(0);
            }
            const __half2 dA = __halves2half2(dv[0], dv[1]), dB = __halves2half2(dv[2], dv[3]);
            uint32_t w[4][NW];
#pragma unroll
            for (int k = 0; k < 4; k++) dm_words<NW>(rw[k] + qoff, mis, w[k]);
            const int nsh = KT == KT_Q4_0 && D == 128 ? 4 * (g % 2) : 0; /* q4_0 at 128: the lane's nibbles */
#pragma unroll
            for (int m = 0; m < NW; m++) {
#pragma unroll
                for (int nib = 0; nib < (KT == KT_Q4_0 && D == 256 ? 2 : 1); nib++) {
                    uint32_t c[4];
#pragma unroll
                    for (int k = 0; k < 4; k++)
                        c[k] = KT == KT_Q8_0 ? w[k][m] ^ 0x80808080u : (w[k][m] >> (4 * nib + nsh)) & 0x0f0f0f0fu;
                    /* bytes a0 b0 a1 b1 and a2 b2 a3 b3 of the key pairs */
                    const uint32_t pa[2] = {__byte_perm(c[0], c[1], 0x5140), __byte_perm(c[0], c[1], 0x7362)};
                    const uint32_t pb[2] = {__byte_perm(c[2], c[3], 0x5140), __byte_perm(c[2], c[3], 0x7362)};
#pragma unroll
                    for (int i = 0; i < 4; i++) {
                        const int j = 16 * nib + 4 * m + i;
                        const uint32_t sel = i % 2 ? 0x4342 : 0x4140;
                        fa_mma(o[j], a, kvq_h2<KT>(pa[i / 2], sel, dA), kvq_h2<KT>(pb[i / 2], sel, dB));
                    }
                }
            }
        }
        __syncwarp(); /* every lane is done with the stage before it is requested again */
    }
    fa_cp_wait_all(); /* (only empty groups remain) */
#pragma unroll
    for (int x = 1; x < 4; x <<= 1) {
        la += __shfl_xor_sync(full, la, x);
        lb += __shfl_xor_sync(full, lb, x);
    }
    /* the warps' partials through shared memory (the rings are dead once every warp is here) */
    __syncthreads();
    float *o_s = (float *)(dm_smem + C::QS); /* [DEC_WARPS][group][D] */
    const int ra = g, rb = g + 8;
#pragma unroll
    for (int i = 0; i < D / 8; i++) {
        if constexpr (KT == KT_F16) {
            const int d = 8 * i + 2 * tig;
            if (ra < group) *(float2 *)&o_s[((size_t)warp * group + ra) * D + d] = make_float2(o[i][0], o[i][1]);
            if (rb < group) *(float2 *)&o_s[((size_t)warp * group + rb) * D + d] = make_float2(o[i][2], o[i][3]);
        } else { /* column 2 tig + e of n-tile i is dimension (D / 8)(2 tig + e) + i */
            const int d0 = D / 8 * (2 * tig) + i, d1 = d0 + D / 8;
            if (ra < group) {
                o_s[((size_t)warp * group + ra) * D + d0] = o[i][0];
                o_s[((size_t)warp * group + ra) * D + d1] = o[i][1];
            }
            if (rb < group) {
                o_s[((size_t)warp * group + rb) * D + d0] = o[i][2];
                o_s[((size_t)warp * group + rb) * D + d1] = o[i][3];
            }
        }
    }
    if (tig == 0) {
        m_s[warp][ra] = ma;
        l_s[warp][ra] = la;
        m_s[warp][rb] = mb;
        l_s[warp][rb] = lb;
    }
    __syncthreads();
    /* merge the warps; a warp without keys has max -inf and weighs 0 */
    for (int i = tid; i < group * D; i += DM_THREADS) {
        const int r = i / D, d = i % D, h = h0 + r;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, m_s[w][r]);
        float ov = 0.0f, L = 0.0f;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) {
            const float f = m_s[w][r] == -INFINITY ? 0.0f : exp2f(m_s[w][r] - M);
            ov += o_s[((size_t)w * group + r) * D + d] * f;
            L += l_s[w][r] * f;
        }
        if (!part) {
            const size_t oi = ((size_t)t * n_head + h) * D + d;
            const float y = att_gate_apply(gate, ov / L, t, n_head, h, d);
            out[oi] = y;
            if (xq) q8_1_store_lane(y, (int64_t)oi, lane, xq, xds); /* group * D % 32 == 0: whole warps */
        } else {
            float *pp = part + (((size_t)t * n_head + h) * n_split + sp) * (D + 2);
            if (d == 0) {
                pp[0] = M;
                pp[1] = L;
            }
            pp[2 + d] = ov;
        }
    }
    /* few splits: the last block of the (token, KV head) merges them (cnt: zero between launches;
     * the partials are fenced before the count, as in the CUDA guide's last-block reduction) */
    if (part && cnt) {
        __shared__ int last;
        __threadfence();
        __syncthreads();
        int *c = cnt + (size_t)t * gridDim.x + blockIdx.x;
        if (tid == 0) last = atomicAdd(c, 1) == n_use - 1;
        __syncthreads();
        if (!last) return;
        __threadfence();
        dec_combine_group(part, n_split, n_use, n_head, D, h0, group, t, out, xq, xds, gate);
        if (tid == 0) *c = 0;
    }
#endif
}

/* Merges many splits (more than DEC_FAST_MERGE): one block of DM_COMBINE_DIMS threads per (head h,
 * token t, DM_COMBINE_DIMS output values); the weights exp2(max_s - M) once into shared memory, then
 * each thread its value over the splits with 16 loads in flight. */
__global__ void __launch_bounds__(DM_COMBINE_DIMS)
attn_dec_mma_combine_kernel(const float *part, const int32_t *pos, int n_split, int min_chunk, int n_head, int hd,
                            float *out, int8_t *xq, float2 *xds, att_gate gate) {
    BK_TRACE_SCOPE();
    __shared__ float w_s[DM_MAX_SPLIT], red[DM_COMBINE_DIMS / 32];
    const int h = blockIdx.x, t = blockIdx.y, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    constexpr int NW = DM_COMBINE_DIMS / 32;
    pdl_wait();
    int chunk;
    const int n_use = dm_split(pos[t] + 1, n_split, min_chunk, &chunk);
    if (n_use == 1) return; /* the attention wrote out itself */
    const size_t ps = (size_t)hd + 2;
    const float *pp = part + ((size_t)t * n_head + h) * n_split * ps;
    float mx = -INFINITY;
    for (int s = tid; s < n_use; s += DM_COMBINE_DIMS) mx = fmaxf(mx, __ldcg(pp + s * ps));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    float M = red[0]; /* finite: split 0 holds position 0 */
#pragma unroll
    for (int w = 1; w < NW; w++) M = fmaxf(M, red[w]);
    __syncthreads();
    float ls = 0.0f;
    for (int s = tid; s < n_use; s += DM_COMBINE_DIMS) {
        const float w = exp2f(__ldcg(pp + s * ps) - M);
        w_s[s] = w;
        ls += w * __ldcg(pp + s * ps + 1);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ls += __shfl_xor_sync(0xffffffffu, ls, o);
    if (lane == 0) red[warp] = ls;
    __syncthreads();
    float L = 0.0f;
#pragma unroll
    for (int w = 0; w < NW; w++) L += red[w];
    const int d = blockIdx.z * DM_COMBINE_DIMS + tid;
    const float *pd = pp + 2 + d;
    float acc[16];
#pragma unroll
    for (int k = 0; k < 16; k++) acc[k] = 0.0f;
    for (int s0 = 0; s0 < n_use; s0 += 16) {
        float v[16];
#pragma unroll
        for (int k = 0; k < 16; k++) v[k] = s0 + k < n_use ? __ldcg(pd + (s0 + k) * ps) : 0.0f;
#pragma unroll
        for (int k = 0; k < 16; k++)
            if (s0 + k < n_use) acc[k] += w_s[s0 + k] * v[k];
    }
    float o = 0.0f;
#pragma unroll
    for (int k = 0; k < 16; k++) o += acc[k];
    const size_t oi = ((size_t)t * n_head + h) * hd + d;
    const float y = att_gate_apply(gate, o / L, t, n_head, h, d);
    out[oi] = y;
    if (xq) q8_1_store_lane(y, (int64_t)oi, lane, xq, xds);
}

bool cuda_attn_mma_supported(const cuda_backend *cb, int kv_type, int head_dim, int n_head, int n_head_kv) {
    if (n_head_kv <= 0 || n_head % n_head_kv || n_head / n_head_kv > DM_ROWS || n_head / n_head_kv < 2) return false;
    static int major[8]; /* per device, asked once */
    int &mj = major[cb->device & 7];
    if (!mj && cudaDeviceGetAttribute(&mj, cudaDevAttrComputeCapabilityMajor, cb->device) != cudaSuccess) {
        cudaGetLastError(); /* not this op's failure: the other kernel runs instead */
        mj = -1;
    }
    if (mj < 8) return false;
    if (kv_type == KT_F16) return head_dim == 64 || head_dim == 128 || head_dim == 256;
    if (kv_type == KT_Q8_0 || kv_type == KT_Q4_0) /* rows of whole 8-byte copies (dm_cfg's RB) */
        return head_dim == 128 || head_dim == 256;
    return false;
}

template <int KT, int D, bool RP>
static bool dm_launch(cuda_backend *cb, const float *q, const bk_kv_view *kv, int n, int max_np, const int32_t *d_pos,
                      const int32_t *d_off, const int32_t *d_tabs, int n_head, int n_head_kv, float scale,
                      att_gate gate, const dec_rope &rope, float *out) {
    constexpr size_t smem = dm_cfg<KT, D>::smem;
    auto kern = attn_dec_mma_kernel<KT, D, RP>;
    static int bps[8]; /* resident blocks an SM, per device (the opt-in is per device too) */
    const int dev = cb->device & 7;
    if (!bps[dev]) {
        cudaError_t e = cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem);
        if (e == cudaSuccess && !RP) /* (the occupancy below asks the fused-rope instance) */
            e = cudaFuncSetAttribute(attn_dec_mma_kernel<KT, D, true>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     (int)smem);
        if (e != cudaSuccess) {
            cuda_set_error(cb, bk_fail(BRISK_ERR_BACKEND, "cuda attention: %s", cudaGetErrorString(e)));
            return false;
        }
        /* the fused-rope instance's residency for both (its static arrays are the larger): the same
         * splits, so the same sums, with and without the fused rope */
        int b = 0;
        if (cudaOccupancyMaxActiveBlocksPerMultiprocessor(&b, attn_dec_mma_kernel<KT, D, true>, DM_THREADS, smem) !=
                cudaSuccess ||
            b < 1)
            b = 1;
        bps[dev] = b;
    }
    const int group = n_head / n_head_kv;
    const int64_t target = (int64_t)bps[dev] * cb->n_sm, pairs = (int64_t)n * n_head_kv;
    int64_t ns = (target + pairs - 1) / pairs;
    const int64_t by_len = (max_np + DM_SPLIT_ALIGN - 1) / DM_SPLIT_ALIGN;
    const int64_t by_cap = (int64_t)(cb->att_part_cap / ((size_t)n * n_head * (D + 2)));
    if (ns > by_len) ns = by_len;
    if (ns > by_cap) ns = by_cap;
    if (ns > DM_MAX_SPLIT) ns = DM_MAX_SPLIT;
    if (ns < 1) ns = 1;
    const int n_split = (int)ns;
    float *part = n_split > 1 ? cb->att_part : NULL;
    int *cnt = part && n_split <= DEC_FAST_MERGE && (size_t)n * n_head_kv <= ATT_CNT_N ? cb->att_cnt : NULL;
    const bool quant = !cb->attnq_off && cb->xq && (size_t)n * (size_t)n_head * (size_t)D <= cb->xq_cap;
    int8_t *xq = quant ? cb->xq : NULL;
    float2 *xds = quant ? cb->xds : NULL;
    const int min_chunk = cb->attn_min_chunk;
    pdl_launch(cb, kern, dim3(n_head_kv, n, n_split), dim3(DM_THREADS), smem, q, (const void *)kv->k,
               (const void *)kv->v, kv->block_size, d_pos, d_off, d_tabs, n_head, n_head_kv, group,
               scale * 1.4426950408889634f /* log2 e */, min_chunk, out, part, cnt, xq, xds, gate, rope);
    CU_COUNT(cb, CU_PATH_ATTN_MMA);
    if (part && !cnt)
        pdl_launch(cb, attn_dec_mma_combine_kernel, dim3(n_head, n, D / DM_COMBINE_DIMS), dim3(DM_COMBINE_DIMS), 0,
                   (const float *)part, d_pos, n_split, min_chunk, n_head, D, out, xq, xds, gate);
    return quant;
}

bool cuda_attn_mma(cuda_backend *cb, const float *q, const bk_kv_view *kv, int n, int max_np, const int32_t *d_pos,
                   const int32_t *d_off, const int32_t *d_tabs, int n_head, int n_head_kv, int hd, float scale,
                   att_gate gate, const dec_rope &rope, float *out) {
#define DM_GO(KK, DD)                                                                                            \
    return rope.qs ? dm_launch<KK, DD, true>(cb, q, kv, n, max_np, d_pos, d_off, d_tabs, n_head, n_head_kv, scale, \
                                             gate, rope, out)                                                    \
                   : dm_launch<KK, DD, false>(cb, q, kv, n, max_np, d_pos, d_off, d_tabs, n_head, n_head_kv,     \
                                              scale, gate, rope, out)
    if (kv->kv_type == KT_Q8_0) {
        if (hd == 128) DM_GO(KT_Q8_0, 128);
        DM_GO(KT_Q8_0, 256);
    }
    if (kv->kv_type == KT_Q4_0) {
        if (hd == 128) DM_GO(KT_Q4_0, 128);
        DM_GO(KT_Q4_0, 256);
    }
    if (hd == 64) DM_GO(KT_F16, 64);
    if (hd == 128) DM_GO(KT_F16, 128);
    DM_GO(KT_F16, 256);
#undef DM_GO
}
