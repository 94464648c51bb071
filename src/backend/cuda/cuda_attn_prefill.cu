/* cuda_attn_prefill.cu — causal GQA attention for prefill-sized batches
 * (more than ATT_DEC_MAX_TOK entries) on tensor cores, FlashAttention-2 style,
 * over the paged KV cache.
 *
 * Why: cuda_attention.cu's tile kernel scores one position per thread in f32
 * (~10 TFLOP/s on an H200 at pp512); here Q K^T and P V are mma.sync
 * m16n8k16 products (f16 inputs, f32 accumulation) and the scores never
 * leave registers.
 *
 * Work split: one block of FA_WARPS warps per (query tile, GQ query heads
 * sharing a KV head). A query tile is FA_BM rows: FA_BM / GQ consecutive batch
 * entries times the GQ heads (GQ: the largest of 8, 4, 2, 1 dividing the
 * model's query heads per KV head), so each K/V tile staged in shared memory
 * serves all GQ heads at once. Row r is entry t0 + r / GQ, head h0 + r % GQ;
 * warp w owns rows 16w .. 16w + 15 (MT = 2: two such m-tiles a warp, see the kernel).
 * Per key tile of BN positions:
 *   S = Q K^T           (Q pre-scaled by scale * log2 e, f16, in shared memory)
 *   mask                key > pos[row] -> -inf
 *   online softmax      running max m and sum l per row, in f32, base 2;
 *                       O is rescaled when the max moves
 *   O += P V            P rounded to f16 straight from the S accumulators
 * and at the end O / l is written as f32.
 *
 * Entries of one tile may belong to several sequences (a batch in any
 * layout): they are served in groups of equal table offset (tab_off; the
 * metadata packing gives every run of consecutive entries sharing a block
 * table one copy, so equal offsets mean one table). A group's key range is
 * [0, its largest position]; rows outside the group idle through it. A
 * contiguous layout has one group per tile (two where a sequence ends); an
 * interleaved one degrades to a group per entry: correct, not fast.
 *
 * K/V staging: f16 caches are copied with cp.async (the V tile's copy overlaps
 * Q K^T, the next K tile's overlaps P V); q8_0 and q4_0 rows are copied raw the
 * same way and converted to the f16 tiles once a tile, between two barriers; f32
 * caches are loaded, converted and stored by the threads at those points. Rows
 * past the group's last position are zero-filled (their P is 0, but 0 * NaN
 * would not be).
 *
 * fa_plan (below) picks per batch the m-tiles a warp (MT = 2: 128 rows a block)
 * and a split of the key range over blocks (blockIdx.z) whose partials
 * fa_merge_kernel adds, from attn_lab's measurements.
 *
 * Everything the kernel depends on per step is read from device memory (pos,
 * tab_off, tables) and the launch shape depends on n and the head counts only,
 * so a captured graph (cuda_graph.cu) stays valid as positions move.
 *
 * Precision: Q, P and (f32/q8_0/q4_0 caches) K, V are rounded to f16 (11
 * significant bits); sums and the softmax are f32. tests/test_cuda_ops.c
 * states the tolerance. */
#include <math.h>

#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/cuda_mma_ptx.cuh"
#include "backend/cuda/cuda_wgmma_ptx.cuh"

#define FA_WARPS 4
#define FA_THREADS (FA_WARPS * 32)
#define FA_BM (FA_WARPS * 16) /* query rows per block and m-tile a warp */
#define FA_PAD 8              /* f16 padding per shared row: conflict-free ldmatrix, 16-byte rows */

/* Cache row (slot * n_head_kv + kvh) of key position p, or -1 past the group's last position. */
__device__ __forceinline__ int fa_row(const int32_t *table, int bs, int p, int n_keys, int n_head_kv, int kvh) {
    return p < n_keys ? (table[p / bs] * bs + p % bs) * n_head_kv + kvh : -1;
}

/* Stages the BN cache rows named by rows[] into dst [BN][D + FA_PAD] f16: 16-byte
 * chunks, consecutive threads along a row (coalesced). */
template <int KT, int D, int BN, bool LEAN>
__device__ __forceinline__ void fa_stage(__half *dst, const void *base, const int *rows, int tid) {
    constexpr int CPR = D / 8; /* chunks per row */
    static_assert(BN * CPR % FA_THREADS == 0 && FA_THREADS % CPR == 0, "whole passes");
#pragma unroll
    for (int i = 0; i < BN * CPR / FA_THREADS; i++) {
        /* LEAN: a pass's row and chunk as the first pass's plus constants (no per-pass registers) */
        const int c = tid + i * FA_THREADS;
        const int r = LEAN ? tid / CPR + i * (FA_THREADS / CPR) : c / CPR, c8 = LEAN ? tid % CPR : c % CPR;
        __half *d = dst + r * (D + FA_PAD) + 8 * c8;
        const int row = rows[r];
        if (row < 0) {
            *(uint4 *)d = make_uint4(0, 0, 0, 0);
            continue;
        }
        const int64_t e = (int64_t)row * D + 8 * c8;
        if (KT == KT_F16) {
            fa_cp_async16(d, (const __half *)base + e);
            continue;
        }
        if (KT == KT_F32) {
            const float4 *p = (const float4 *)((const float *)base + e);
            const float4 a = p[0], b = p[1];
            *(uint4 *)d = make_uint4(fa_pack(a.x, a.y), fa_pack(a.z, a.w), fa_pack(b.x, b.y), fa_pack(b.z, b.w));
        } else { /* q8_0, q4_0: blocks of 32, f16 scale first; e % 8 == 0 keeps 8 values in one block */
            *(uint4 *)d = kvq_h8<KT>(kvq_load8<KT>(base, e));
        }
    }
}

/* Bytes of one quantized cache row (q8_0, q4_0; 0 for f16 / f32): whole blocks of 32. */
template <int KT, int D> __host__ __device__ constexpr int fa_raw_bytes() { return D / 32 * kt_block_bytes(KT); }

/* Copies the BN quantized cache rows named by rows[] raw into dst [BN][fa_raw_bytes], asynchronously
 * (8-byte pieces; 4 at head dim 64, whose rows are 68 and 36 bytes). Rows < 0 are left as they are:
 * fa_convert zero-fills them. */
template <int KT, int D, int BN, int NT = FA_THREADS>
__device__ __forceinline__ void fa_stage_raw(uint8_t *dst, const void *base, const int *rows, int tid) {
    constexpr int RB = fa_raw_bytes<KT, D>(), CB = RB % 8 == 0 ? 8 : 4, CPR = RB / CB;
    static_assert(RB % CB == 0, "whole pieces a row");
    for (int c = tid; c < BN * CPR; c += NT) {
        const int r = c / CPR, k = c % CPR, row = rows[r];
        if (row < 0) continue;
        const uint8_t *src = (const uint8_t *)base + (int64_t)row * RB + CB * k;
        if (CB == 8) fa_cp_async8(dst + r * RB + CB * k, src);
        else fa_cp_async4(dst + r * RB + CB * k, src);
    }
}

/* fa_stage_raw's rows as f16 into dst [BN][D + FA_PAD] (d * q rounded once: kvq_h8, the bits the
 * threads' own conversion made before); rows < 0 are zeros. */
template <int KT, int D, int BN>
__device__ __forceinline__ void fa_convert(__half *dst, const uint8_t *raw, const int *rows, int tid) {
    constexpr int RB = fa_raw_bytes<KT, D>(), CPR = D / 8;
    static_assert(BN * CPR % FA_THREADS == 0 && FA_THREADS % CPR == 0, "whole passes");
#pragma unroll
    for (int i = 0; i < BN * CPR / FA_THREADS; i++) {
        /* a pass's row is the first pass's plus a constant: few registers beside MT = 2's accumulators */
        const int r = tid / CPR + i * (FA_THREADS / CPR), c8 = tid % CPR;
        *(uint4 *)(dst + r * (D + FA_PAD) + 8 * c8) =
            rows[r] < 0 ? make_uint4(0, 0, 0, 0) : kvq_h8<KT>(kvq_load8<KT>(raw + r * RB, 8 * c8));
    }
}

/* A thread's columns of one row's accumulators, times mul: columns 8i + {0, 1} at o (o already at
 * the thread's 2 tig) are oacc[i][e], oacc[i][e + 1] (e = 0: the thread's row g of an m-tile, 2:
 * row g + 8). */
template <int D>
__device__ __forceinline__ void fa_store_cols(float *o, const float (*oacc)[4], int e, float mul) {
#pragma unroll
    for (int i = 0; i < D / 8; i++) {
        o[8 * i] = oacc[i][e] * mul;
        o[8 * i + 1] = oacc[i][e + 1] * mul;
    }
}

/* One row's output O / l (at: the row's start plus the thread's 2 tig). */
template <int D>
__device__ __forceinline__ void fa_store_row(float *out, int64_t at, const float (*oacc)[4], int e, float l) {
    fa_store_cols<D>(out + at, oacc, e, 1.0f / l);
}

/* A split's partial of output row th (entry t * n_head + head h): O unnormalised, then its running
 * max m (base 2, -inf where the split held no key of the row) and sum l, at part[(th * n_split + sp) *
 * (D + 2)]; this thread's columns of O as in fa_store_row. */
template <int D>
__device__ __forceinline__ void fa_store_part(float *part, int64_t th, int n_split, int sp, int tig,
                                              const float (*oacc)[4], int e, float m, float l) {
    float *p = part + (th * n_split + sp) * (D + 2);
    fa_store_cols<D>(p + 2 * tig, oacc, e, 1.0f); /* (x * 1 is x: unnormalised) */
    if (tig == 0) p[D] = m, p[D + 1] = l;
}

/* The splits' partials of each output row merged: one warp a row, out = sum_s 2^(m_s - M) O_s /
 * sum_s 2^(m_s - M) l_s with M the largest m_s (finite: split 0 holds key 0 of every row). */
template <int D>
__global__ void __launch_bounds__(128) fa_merge_kernel(const float *part, int n_split, int64_t n_rows, float *out) {
    const int64_t th = (int64_t)blockIdx.x * 4 + threadIdx.x / 32;
    const int lane = threadIdx.x % 32;
    if (th >= n_rows) return;
    const float *p = part + th * n_split * (D + 2);
    float M = -INFINITY;
    for (int z = 0; z < n_split; z++) M = fmaxf(M, p[z * (D + 2) + D]);
    float acc[D / 32] = {}, L = 0.0f;
    for (int z = 0; z < n_split; z++) {
        const float mz = p[z * (D + 2) + D];
        const float w = mz == -INFINITY ? 0.0f : exp2f(mz - M);
        L += w * p[z * (D + 2) + D + 1];
#pragma unroll
        for (int i = 0; i < D / 32; i++) acc[i] += w * p[z * (D + 2) + 32 * i + lane];
    }
    const float inv = 1.0f / L;
#pragma unroll
    for (int i = 0; i < D / 32; i++) out[th * D + 32 * i + lane] = acc[i] * inv;
}

/* One block per (query tile, GQ = 1 << gs heads from h0 = blockIdx.y * GQ): see the header.
 * MT m-tiles of 16 rows a warp (FA_BM * MT rows a block): each K and V fragment a warp loads with
 * ldmatrix feeds MT mma chains. MT = 2 (head dims 64 and 128: its O and S accumulators take
 * MT (D + BN) / 2 registers a thread, 192 at head dim 128) where fa_plan says. Warp w owns rows
 * 16 (MT w + m) .. + 15.
 * Query tiles are taken last first (blockIdx.x reversed): the later entries see the
 * longest key ranges and should start first. Dynamic shared memory: Q [FA_BM * MT], K [BN],
 * V [BN] rows of D + FA_PAD f16. */
template <int KT, int D, int BN, int MT, bool SPLIT>
__global__ void __launch_bounds__(FA_THREADS)
fa_prefill_kernel(const float *q, const void *kc, const void *vc, int bs, const int32_t *pos, const int32_t *tab_off,
                  const int32_t *tabs, int n, int n_head, int n_head_kv, int group, int gs, float qscale,
                  float *out, float *part) {
#if FA_ARCH_OK
    constexpr int LD = D + FA_PAD, BM = FA_BM * MT;
    /* MT = 2 sits at 255 registers: there, fewer values stay live across the key loop (staging
     * offsets as constants, positions read again from shared memory, P packed to f16 before the
     * barrier). MT = 1 keeps its code: the instructions and registers it had before MT existed. */
    constexpr bool LEAN = MT > 1;
    static_assert(BM <= FA_THREADS, "a thread per row for the tile's metadata");
    extern __shared__ __align__(16) uint8_t fa_smem[];
    /* q8_0 / q4_0: the rows arrive raw (asynchronously, like f16's) and are converted to the f16
     * tiles once in place, between two barriers */
    constexpr bool RAW = fa_raw_bytes<KT, D>() > 0;
    __half *Qs = (__half *)fa_smem, *Ks = Qs + BM * LD, *Vs = Ks + BN * LD;
    uint8_t *Kr = (uint8_t *)(Vs + BN * LD), *Vr = Kr + BN * fa_raw_bytes<KT, D>();
    __shared__ int pos_s[BM], off_s[BM], last_s[BM], row_s[2][BN];
    const unsigned full = 0xffffffffu;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, tig = lane % 4;
    const int ntok = BM >> gs, t0 = (int)(gridDim.x - 1 - blockIdx.x) * ntok, n_tok = min(ntok, n - t0);
    const int h0 = blockIdx.y << gs, kvh = h0 / group, gmask = (1 << gs) - 1;
    /* SPLIT: this block's share of each group's key tiles (its own instance: the unsplit one keeps
     * its registers) */
    const int sp = SPLIT ? (int)blockIdx.z : 0, n_split = SPLIT ? (int)gridDim.z : 1;

    if (tid < ntok) {
        pos_s[tid] = tid < n_tok ? pos[t0 + tid] : -1;
        off_s[tid] = tid < n_tok ? tab_off[t0 + tid] : -1;
    }
    /* Q, scaled and rounded to f16; rows past the batch are zero (and idle) */
    for (int c = tid; c < BM * D; c += FA_THREADS) {
        const int r = c / D, d = c % D, j = r >> gs;
        const float x = j < n_tok ? q[((int64_t)(t0 + j) * n_head + h0 + (r & gmask)) * D + d] : 0.0f;
        Qs[r * LD + d] = __float2half_rn(x * qscale);
    }
    __syncthreads();
    /* groups: the first entry of each table offset leads it and records the group's last position */
    if (tid < n_tok) {
        bool lead = true;
        for (int k = 0; k < tid && lead; k++) lead = off_s[k] != off_s[tid];
        int mx = -1;
        if (lead)
            for (int k = tid; k < n_tok; k++)
                if (off_s[k] == off_s[tid]) mx = max(mx, pos_s[k]);
        last_s[tid] = mx;
    }
    __syncthreads();

    /* this thread's rows: g and g + 8 (h = 0, 1) of each of its warp's m-tiles */
    const auto row = [&](int m, int h) { return 16 * (MT * warp + m) + g + 8 * h; };
    for (int s = 0; s < n_tok; s++) {
        if (last_s[s] < 0) continue; /* not a group's first entry */
        const int n_keys = last_s[s] + 1, n_all = (n_keys + BN - 1) / BN, off = off_s[s];
        /* split sp's tiles [j0, n_tiles) of the group's n_all (split 0 always holds tile 0); an even
         * count a split, so that tile jt's rows sit in row_s[jt & 1] from any split's first tile */
        const int per = ((n_all + n_split - 1) / n_split + 1) & ~1, j0 = min(sp * per, n_all),
                  n_tiles = min(j0 + per, n_all);
        const int32_t *table = tabs + off;
        int p[MT][2]; /* the rows' positions; -1: not in this group */
#pragma unroll
        for (int m = 0; m < MT; m++) {
            const int j0 = row(m, 0) >> gs, j1 = row(m, 1) >> gs;
            p[m][0] = j0 < n_tok && off_s[j0] == off ? pos_s[j0] : -1;
            p[m][1] = j1 < n_tok && off_s[j1] == off ? pos_s[j1] : -1;
        }
        /* row (m, h)'s position; LEAN reads it again from shared memory where it is needed */
        const auto rpos = [&](int m, int h) {
            if (!LEAN) return p[m][h];
            const int j = row(m, h) >> gs;
            return j < n_tok && off_s[j] == off ? pos_s[j] : -1;
        };
        /* the warp's last position (key tiles past it hold nothing for its rows), the thread's first */
        int wmax = max(p[0][0], p[0][1]), pmin = min(p[0][0], p[0][1]);
#pragma unroll
        for (int m = 1; m < MT; m++) {
            wmax = max(wmax, max(p[m][0], p[m][1]));
            pmin = min(pmin, min(p[m][0], p[m][1]));
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) wmax = max(wmax, __shfl_xor_sync(full, wmax, o));

        float oacc[MT][D / 8][4];
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int i = 0; i < D / 8; i++) oacc[m][i][0] = oacc[m][i][1] = oacc[m][i][2] = oacc[m][i][3] = 0.0f;
        float mr[MT][2], lr[MT][2]; /* running max and sum (l: this thread's columns only) */
#pragma unroll
        for (int m = 0; m < MT; m++) mr[m][0] = mr[m][1] = -INFINITY, lr[m][0] = lr[m][1] = 0.0f;

        /* No barrier needed before this write: the previous group read row_s and Ks only before
         * its last tile's second barrier, and Vs is restaged after the loop's first barrier. */
        if (tid < BN) row_s[0][tid] = fa_row(table, bs, j0 * BN + tid, n_keys, n_head_kv, kvh);
        __syncthreads();
        if constexpr (RAW) fa_stage_raw<KT, D, BN>(Kr, kc, row_s[0], tid);
        else fa_stage<KT, D, BN, LEAN>(Ks, kc, row_s[0], tid);
        fa_cp_commit();
        for (int jt = j0; jt < n_tiles; jt++) {
            const int k0 = jt * BN;
            fa_cp_wait_all();
            __syncthreads(); /* K tile jt in place; every warp is done with V tile jt - 1 */
            if constexpr (RAW) {
                fa_stage_raw<KT, D, BN>(Vr, vc, row_s[jt & 1], tid);
                fa_convert<KT, D, BN>(Ks, Kr, row_s[jt & 1], tid);
            } else {
                fa_stage<KT, D, BN, LEAN>(Vs, vc, row_s[jt & 1], tid);
            }
            fa_cp_commit();
            if (jt + 1 < n_tiles && tid < BN)
                row_s[(jt + 1) & 1][tid] = fa_row(table, bs, k0 + BN + tid, n_keys, n_head_kv, kvh);
            if (RAW) __syncthreads(); /* the f16 K tile converted */
            const bool live = wmax >= k0; /* warp-uniform */
            float sacc[MT][BN / 8][4];
            /* P as the A fragments of P V: the S accumulators of n-tiles 2kc, 2kc + 1 are exactly
             * the A fragment of key chunk kc */
            uint32_t pf[MT][BN / 16][4];
            const auto pack_p = [&](int kc2) {
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    pf[m][kc2][0] = fa_pack(sacc[m][2 * kc2][0], sacc[m][2 * kc2][1]);
                    pf[m][kc2][1] = fa_pack(sacc[m][2 * kc2][2], sacc[m][2 * kc2][3]);
                    pf[m][kc2][2] = fa_pack(sacc[m][2 * kc2 + 1][0], sacc[m][2 * kc2 + 1][1]);
                    pf[m][kc2][3] = fa_pack(sacc[m][2 * kc2 + 1][2], sacc[m][2 * kc2 + 1][3]);
                }
            };
            if (live) {
                /* S (16 MT x BN) = Q (16 MT x D) K^T: one K fragment, MT products */
#pragma unroll
                for (int m = 0; m < MT; m++)
#pragma unroll
                    for (int i = 0; i < BN / 8; i++)
                        sacc[m][i][0] = sacc[m][i][1] = sacc[m][i][2] = sacc[m][i][3] = 0.0f;
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++) {
                    uint32_t a[MT][4];
#pragma unroll
                    for (int m = 0; m < MT; m++)
                        fa_ldsm_x4(a[m], Qs + (16 * (MT * warp + m) + lane % 16) * LD + 16 * kk + 8 * (lane / 16));
#pragma unroll
                    for (int np = 0; np < BN / 16; np++) {
                        /* matrices: keys +0/+8 (lane / 16) x dims +0/+8 (lane / 8 % 2) -> b0, b1 of two n-tiles */
                        uint32_t b[4];
                        fa_ldsm_x4(b, Ks + (16 * np + lane % 8 + 8 * (lane / 16)) * LD + 16 * kk + 8 * (lane / 8 % 2));
#pragma unroll
                        for (int m = 0; m < MT; m++) {
                            fa_mma(sacc[m][2 * np], a[m], b[0], b[1]);
                            fa_mma(sacc[m][2 * np + 1], a[m], b[2], b[3]);
                        }
                    }
                }
                /* mask: sacc[m][i][0..1] are row rr[m][0], keys k0 + 8i + 2 tig + {0, 1}; [2..3] row rr[m][1] */
                if (k0 + BN - 1 > pmin) {
#pragma unroll
                    for (int m = 0; m < MT; m++) {
                        const int pa = rpos(m, 0), pb = rpos(m, 1);
#pragma unroll
                        for (int i = 0; i < BN / 8; i++)
#pragma unroll
                            for (int e = 0; e < 2; e++) {
                                const int key = k0 + 8 * i + 2 * tig + e;
                                if (key > pa) sacc[m][i][e] = -INFINITY;
                                if (key > pb) sacc[m][i][2 + e] = -INFINITY;
                            }
                    }
                }
                /* online softmax; a row with every key so far masked keeps m = -inf and uses 0 as
                 * its reference, so exp2 sees -inf - 0 (= 0), never -inf - -inf */
#pragma unroll
                for (int m = 0; m < MT; m++) {
                    float mxa = mr[m][0], mxb = mr[m][1];
#pragma unroll
                    for (int i = 0; i < BN / 8; i++) {
                        mxa = fmaxf(mxa, fmaxf(sacc[m][i][0], sacc[m][i][1]));
                        mxb = fmaxf(mxb, fmaxf(sacc[m][i][2], sacc[m][i][3]));
                    }
#pragma unroll
                    for (int o = 1; o < 4; o <<= 1) { /* the four lanes of a row */
                        mxa = fmaxf(mxa, __shfl_xor_sync(full, mxa, o));
                        mxb = fmaxf(mxb, __shfl_xor_sync(full, mxb, o));
                    }
                    const float ua = mxa == -INFINITY ? 0.0f : mxa, ub = mxb == -INFINITY ? 0.0f : mxb;
                    const float fa = exp2f(mr[m][0] - ua), fb = exp2f(mr[m][1] - ub);
                    mr[m][0] = mxa;
                    mr[m][1] = mxb;
                    float sa = 0.0f, sb = 0.0f;
#pragma unroll
                    for (int i = 0; i < BN / 8; i++) {
                        sacc[m][i][0] = exp2f(sacc[m][i][0] - ua);
                        sacc[m][i][1] = exp2f(sacc[m][i][1] - ua);
                        sacc[m][i][2] = exp2f(sacc[m][i][2] - ub);
                        sacc[m][i][3] = exp2f(sacc[m][i][3] - ub);
                        sa += sacc[m][i][0] + sacc[m][i][1];
                        sb += sacc[m][i][2] + sacc[m][i][3];
                    }
                    lr[m][0] = lr[m][0] * fa + sa;
                    lr[m][1] = lr[m][1] * fb + sb;
#pragma unroll
                    for (int i = 0; i < D / 8; i++) {
                        oacc[m][i][0] *= fa;
                        oacc[m][i][1] *= fa;
                        oacc[m][i][2] *= fb;
                        oacc[m][i][3] *= fb;
                    }
                }
                if (LEAN) /* half the registers through the barrier below */
#pragma unroll
                    for (int kc2 = 0; kc2 < BN / 16; kc2++) pack_p(kc2);
            }
            fa_cp_wait_all();
            __syncthreads(); /* V tile jt in place; every warp is done with K tile jt */
            if (jt + 1 < n_tiles) {
                if constexpr (RAW) fa_stage_raw<KT, D, BN>(Kr, kc, row_s[(jt + 1) & 1], tid);
                else fa_stage<KT, D, BN, LEAN>(Ks, kc, row_s[(jt + 1) & 1], tid);
                fa_cp_commit();
            }
            if constexpr (RAW) {
                fa_convert<KT, D, BN>(Vs, Vr, row_s[jt & 1], tid);
                __syncthreads(); /* the f16 V tile converted */
            }
            if (live) {
                /* O (16 MT x D) += P (16 MT x BN) V: one V fragment, MT products */
#pragma unroll
                for (int kc2 = 0; kc2 < BN / 16; kc2++) {
                    if (!LEAN) pack_p(kc2);
#pragma unroll
                    for (int dp = 0; dp < D / 16; dp++) {
                        /* transposed matrices: keys +0/+8 (lane / 8 % 2) x dims +0/+8 (lane / 16) */
                        uint32_t b[4];
                        fa_ldsm_x4_t(b, Vs + (16 * kc2 + lane % 16) * LD + 16 * dp + 8 * (lane / 16));
#pragma unroll
                        for (int m = 0; m < MT; m++) {
                            fa_mma(oacc[m][2 * dp], pf[m][kc2], b[0], b[1]);
                            fa_mma(oacc[m][2 * dp + 1], pf[m][kc2], b[2], b[3]);
                        }
                    }
                }
            }
        }
        /* l over the row's four lanes; a row of the group has l >= 1 (its max scores exp2(0)) */
#pragma unroll
        for (int m = 0; m < MT; m++)
#pragma unroll
            for (int o = 1; o < 4; o <<= 1) {
                lr[m][0] += __shfl_xor_sync(full, lr[m][0], o);
                lr[m][1] += __shfl_xor_sync(full, lr[m][1], o);
            }
#pragma unroll
        for (int m = 0; m < MT; m++) {
            const int r0 = row(m, 0), r1 = row(m, 1);
            const int64_t at0 = ((int64_t)(t0 + (r0 >> gs)) * n_head + h0 + (r0 & gmask)) * D + 2 * tig;
            const int64_t at1 = ((int64_t)(t0 + (r1 >> gs)) * n_head + h0 + (r1 & gmask)) * D + 2 * tig;
            if (SPLIT) { /* O unnormalised, m and l (fa_merge_kernel) */
                if (rpos(m, 0) >= 0) fa_store_part<D>(part, at0 / D, n_split, sp, tig, oacc[m], 0, mr[m][0], lr[m][0]);
                if (rpos(m, 1) >= 0) fa_store_part<D>(part, at1 / D, n_split, sp, tig, oacc[m], 2, mr[m][1], lr[m][1]);
                continue;
            }
            if (rpos(m, 0) >= 0) fa_store_row<D>(out, at0, oacc[m], 0, lr[m][0]);
            if (rpos(m, 1) >= 0) fa_store_row<D>(out, at1, oacc[m], 2, lr[m][1]);
        }
    }
#endif
}

/* ---- Hopper: the same attention on warpgroup MMA (fw_*, sm_90a) ----
 *
 * Why: the mma.sync kernel above tops out near 295 TFLOP/s on an H100 at head dim 128 (MT = 2) and
 * ~195 at 256, where its O accumulator leaves room for one m-tile a warp: every operand goes through
 * ldmatrix into registers, 16 x 8 products at a time. wgmma multiplies a warpgroup's 64 rows by a
 * whole K or V tile straight from shared memory, and spreads the accumulators over 128 threads, so
 * head dim 256 and key tiles of 128 fit.
 *
 * The work split, groups, masks, key-range split and outputs are fa_prefill_kernel's with 128 rows a
 * block: FW_WG = 2 warpgroups, warpgroup i on rows 64 i .. 64 i + 63, a thread on rows 16 W + g and
 * + 8 (W its warp in the block), the rows of the mma.sync kernel's MT = 1 layout. Per key tile of BN
 * positions: S = Q K^T (D / 16 wgmma, Q and K from shared memory), the mask and the online softmax on
 * S's accumulators, P rounded to f16 into A fragments in registers, O += P V (BN / 16 wgmma, V read
 * transposed from shared memory). Staging is the mma.sync kernel's (cp.async; quantized rows raw, then
 * converted once a tile) by all FW_THREADS threads, into 128-byte-swizzled tiles (fw_swz), which wgmma
 * reads without bank conflicts. Same roundings (Q, P, K, V to f16; f32 sums), so the same tolerance.
 *
 * fw_plan_splits picks the key-range split; cuda_attn_prefill takes this kernel where fw_usable holds
 * (an sm_90 device, this build's sm_90a code, head dim 128 or 256, not an f32 cache). */
#define FW_WG 2
#define FW_THREADS (FW_WG * 128)
#define FW_BM (FW_WG * 64)

/* Byte offset of 16-byte chunk c of row r in a swizzled tile of R rows: D / 64 column blocks of R rows
 * of 128 bytes each, chunk c of row r at chunk (c ^ r) % 8 of the row (every block 1024-aligned). */
template <int R> __device__ __forceinline__ uint32_t fw_swz(int r, int c) {
    return (uint32_t)((c >> 3) * R * 128 + r * 128 + (((c ^ r) & 7) << 4));
}

/* f16 cache rows named by rows[] into the swizzled tile dst (BN rows), cp.async; rows < 0 zeros. */
template <int D, int BN> __device__ __forceinline__ void fw_stage(uint8_t *dst, const void *base, const int *rows, int tid) {
    constexpr int CPR = D / 8;
    static_assert(BN * CPR % FW_THREADS == 0, "whole passes");
#pragma unroll
    for (int i = 0; i < BN * CPR / FW_THREADS; i++) {
        const int c = tid + i * FW_THREADS, r = c / CPR, c8 = c % CPR, row = rows[r];
        uint8_t *d = dst + fw_swz<BN>(r, c8);
        if (row < 0) *(uint4 *)d = make_uint4(0, 0, 0, 0);
        else fa_cp_async16(d, (const __half *)base + (int64_t)row * D + 8 * c8);
    }
}

/* fa_stage_raw's rows as f16 into the swizzled tile dst (kvq_h8: the mma.sync kernel's bits). */
template <int KT, int D, int BN>
__device__ __forceinline__ void fw_convert(uint8_t *dst, const uint8_t *raw, const int *rows, int tid) {
    constexpr int RB = fa_raw_bytes<KT, D>(), CPR = D / 8;
#pragma unroll
    for (int i = 0; i < BN * CPR / FW_THREADS; i++) {
        const int c = tid + i * FW_THREADS, r = c / CPR, c8 = c % CPR;
        *(uint4 *)(dst + fw_swz<BN>(r, c8)) =
            rows[r] < 0 ? make_uint4(0, 0, 0, 0) : kvq_h8<KT>(kvq_load8<KT>(raw + r * RB, 8 * c8));
    }
}

/* W keys of a tile from key k0 (S's accumulators s of this thread's rows ra, rb at positions pa, pb;
 * pmin = min(pa, pb)) through the causal mask and the online softmax, as fa_prefill_kernel: the
 * running max (ma, mb) and sum (la, lb: this thread's columns) move, s becomes P rounded to f16 as the
 * A fragments of W / 16 key chunks (pf), and (fa, fb) are the factors O's rows take. */
template <int W>
__device__ __forceinline__ void fw_softmax(float (&s)[W / 8][4], uint32_t (&pf)[W / 16][4], int k0, int tig, int pa,
                                           int pb, int pmin, float &ma, float &mb, float &la, float &lb, float &fa,
                                           float &fb) {
    const unsigned full = 0xffffffffu;
    /* s[i][0..1]: row ra, keys k0 + 8i + 2 tig + {0, 1}; [2..3]: row rb. Selects, not a branch on pmin:
     * the pipelined kernel runs this while a wgmma is in flight, and ptxas serializes those around
     * divergent code. */
#pragma unroll
    for (int i = 0; i < W / 8; i++)
#pragma unroll
        for (int e = 0; e < 2; e++) {
            const int key = k0 + 8 * i + 2 * tig + e;
            s[i][e] = key > pa ? -INFINITY : s[i][e];
            s[i][2 + e] = key > pb ? -INFINITY : s[i][2 + e];
        }
    float mxa = ma, mxb = mb;
#pragma unroll
    for (int i = 0; i < W / 8; i++) {
        mxa = fmaxf(mxa, fmaxf(s[i][0], s[i][1]));
        mxb = fmaxf(mxb, fmaxf(s[i][2], s[i][3]));
    }
#pragma unroll
    for (int o = 1; o < 4; o <<= 1) { /* the four lanes of a row */
        mxa = fmaxf(mxa, __shfl_xor_sync(full, mxa, o));
        mxb = fmaxf(mxb, __shfl_xor_sync(full, mxb, o));
    }
    /* a row with every key so far masked keeps m = -inf and uses 0 as its reference */
    const float ua = mxa == -INFINITY ? 0.0f : mxa, ub = mxb == -INFINITY ? 0.0f : mxb;
    fa = exp2f(ma - ua);
    fb = exp2f(mb - ub);
    ma = mxa;
    mb = mxb;
    float sa = 0.0f, sb = 0.0f;
#pragma unroll
    for (int i = 0; i < W / 8; i++) {
        s[i][0] = exp2f(s[i][0] - ua);
        s[i][1] = exp2f(s[i][1] - ua);
        s[i][2] = exp2f(s[i][2] - ub);
        s[i][3] = exp2f(s[i][3] - ub);
        sa += s[i][0] + s[i][1];
        sb += s[i][2] + s[i][3];
    }
    la = la * fa + sa;
    lb = lb * fb + sb;
#pragma unroll
    for (int c = 0; c < W / 16; c++) {
        pf[c][0] = fa_pack(s[2 * c][0], s[2 * c][1]);
        pf[c][1] = fa_pack(s[2 * c][2], s[2 * c][3]);
        pf[c][2] = fa_pack(s[2 * c + 1][0], s[2 * c + 1][1]);
        pf[c][3] = fa_pack(s[2 * c + 1][2], s[2 * c + 1][3]);
    }
}

/* O's rows times (fa, fb) */
template <int D> __device__ __forceinline__ void fw_rescale(float (&o)[D / 8][4], float fa, float fb) {
#pragma unroll
    for (int i = 0; i < D / 8; i++) {
        o[i][0] *= fa;
        o[i][1] *= fa;
        o[i][2] *= fb;
        o[i][3] *= fb;
    }
}

/* Both wgmma kernels' start: the tile's entries' positions and table offsets (pos_s, off_s), Q scaled
 * and rounded to f16 into the swizzled tile Qs (8 values a thread and pass; rows past the batch zero),
 * and each group's leader (the first entry of a table offset) with the group's last position
 * (last_s; -1 elsewhere), as fa_prefill_kernel; ends with a barrier. */
template <int D>
__device__ __forceinline__ void fw_begin(uint8_t *Qs, const float *q, const int32_t *pos, const int32_t *tab_off,
                                         int *pos_s, int *off_s, int *last_s, int tid, int t0, int n_tok, int ntok,
                                         int n_head, int h0, int gmask, int gs, float qscale) {
    if (tid < ntok) {
        pos_s[tid] = tid < n_tok ? pos[t0 + tid] : -1;
        off_s[tid] = tid < n_tok ? tab_off[t0 + tid] : -1;
    }
    for (int c = tid; c < FW_BM * D / 8; c += FW_THREADS) {
        const int r = c / (D / 8), c8 = c % (D / 8), j = r >> gs;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (j < n_tok) {
            const float4 *p = (const float4 *)(q + ((int64_t)(t0 + j) * n_head + h0 + (r & gmask)) * D + 8 * c8);
            const float4 a = p[0], b = p[1];
            v = make_uint4(fa_pack(a.x * qscale, a.y * qscale), fa_pack(a.z * qscale, a.w * qscale),
                           fa_pack(b.x * qscale, b.y * qscale), fa_pack(b.z * qscale, b.w * qscale));
        }
        *(uint4 *)(Qs + fw_swz<FW_BM>(r, c8)) = v;
    }
    __syncthreads();
    if (tid < n_tok) {
        bool lead = true;
        for (int k = 0; k < tid && lead; k++) lead = off_s[k] != off_s[tid];
        int mx = -1;
        if (lead)
            for (int k = tid; k < n_tok; k++)
                if (off_s[k] == off_s[tid]) mx = max(mx, pos_s[k]);
        last_s[tid] = mx;
    }
#if FW_ARCH_OK
    fw_fence_smem(); /* Q's tile, for wgmma */
#endif
    __syncthreads();
}

/* Both wgmma kernels' end of a group: the row sums over a row's four lanes, then O / l (or, split, the
 * unnormalised partial with m and l) for this thread's rows ra and rb where they belong to the group. */
template <int D, bool SPLIT>
__device__ __forceinline__ void fw_finish(float *out, float *part, const float (*oacc)[4], float la, float lb,
                                          float ma, float mb, int pa, int pb, int t0, int ra, int rb, int gs,
                                          int n_head, int h0, int gmask, int tig, int n_split, int sp) {
    const unsigned full = 0xffffffffu;
#pragma unroll
    for (int o = 1; o < 4; o <<= 1) {
        la += __shfl_xor_sync(full, la, o);
        lb += __shfl_xor_sync(full, lb, o);
    }
    const int64_t at0 = ((int64_t)(t0 + (ra >> gs)) * n_head + h0 + (ra & gmask)) * D + 2 * tig;
    const int64_t at1 = ((int64_t)(t0 + (rb >> gs)) * n_head + h0 + (rb & gmask)) * D + 2 * tig;
    if (SPLIT) {
        if (pa >= 0) fa_store_part<D>(part, at0 / D, n_split, sp, tig, oacc, 0, ma, la);
        if (pb >= 0) fa_store_part<D>(part, at1 / D, n_split, sp, tig, oacc, 2, mb, lb);
    } else {
        if (pa >= 0) fa_store_row<D>(out, at0, oacc, 0, la);
        if (pb >= 0) fa_store_row<D>(out, at1, oacc, 2, lb);
    }
}

/* Key tile: 128 positions at head dim 128 (S: 64 registers a thread, O: 64), 64 at 256 (O: 128).
 * Dynamic shared memory: 1 KB to align the tiles, Q (FW_BM rows), K and V (BN rows), f16, and the raw
 * K and V rows of a quantized cache. */
template <int KT, int D> struct fw_tile {
    static constexpr int BN = D == 256 ? 64 : 128;
    static constexpr size_t smem =
        1024 + (size_t)(FW_BM + 2 * BN) * D * sizeof(__half) + 2 * (size_t)BN * fa_raw_bytes<KT, D>();
};

template <int KT, int D, bool SPLIT>
__global__ void __launch_bounds__(FW_THREADS, 1)
fw_prefill_kernel(const float *q, const void *kc, const void *vc, int bs, const int32_t *pos, const int32_t *tab_off,
                  const int32_t *tabs, int n, int n_head, int n_head_kv, int group, int gs, float qscale,
                  float *out, float *part) {
#if FW_ARCH_OK
    constexpr int BN = fw_tile<KT, D>::BN, BM = FW_BM;
    constexpr bool RAW = fa_raw_bytes<KT, D>() > 0;
    extern __shared__ uint8_t fw_smem[];
    /* the swizzle works on address bits 4-9: every tile starts at a multiple of 1024 */
    uint8_t *Qs = fw_smem + ((1024 - (fa_smem_addr(fw_smem) & 1023)) & 1023);
    uint8_t *Ks = Qs + BM * D * 2, *Vs = Ks + BN * D * 2;
    uint8_t *Kr = Vs + BN * D * 2, *Vr = Kr + BN * fa_raw_bytes<KT, D>();
    __shared__ int pos_s[BM], off_s[BM], last_s[BM], row_s[2][BN];
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wg = warp / 4, g = lane / 4, tig = lane % 4;
    const int ntok = BM >> gs, t0 = (int)(gridDim.x - 1 - blockIdx.x) * ntok, n_tok = min(ntok, n - t0);
    const int h0 = blockIdx.y << gs, kvh = h0 / group, gmask = (1 << gs) - 1;
    const int sp = SPLIT ? (int)blockIdx.z : 0, n_split = SPLIT ? (int)gridDim.z : 1;

    fw_begin<D>(Qs, q, pos, tab_off, pos_s, off_s, last_s, tid, t0, n_tok, ntok, n_head, h0, gmask, gs, qscale);

    const int ra = 16 * warp + g, rb = ra + 8; /* this thread's rows */
    const uint32_t q_at = fa_smem_addr(Qs) + wg * 64 * 128, k_at = fa_smem_addr(Ks), v_at = fa_smem_addr(Vs);
    for (int s = 0; s < n_tok; s++) {
        if (last_s[s] < 0) continue; /* not a group's first entry */
        const int n_keys = last_s[s] + 1, n_all = (n_keys + BN - 1) / BN, off = off_s[s];
        const int per = ((n_all + n_split - 1) / n_split + 1) & ~1, j0 = min(sp * per, n_all),
                  n_tiles = min(j0 + per, n_all);
        const int32_t *table = tabs + off;
        const int ja = ra >> gs, jb = rb >> gs;
        const int pa = ja < n_tok && off_s[ja] == off ? pos_s[ja] : -1;
        const int pb = jb < n_tok && off_s[jb] == off ? pos_s[jb] : -1;
        const int pmin = min(pa, pb);
        /* the warpgroup's last position (its rows are entries 64 wg >> gs ..): warpgroup-uniform, as
         * wgmma needs */
        int wgmax = -1;
        for (int j = (64 * wg) >> gs; j <= (64 * wg + 63) >> gs && j < n_tok; j++)
            if (off_s[j] == off) wgmax = max(wgmax, pos_s[j]);

        float oacc[D / 8][4];
#pragma unroll
        for (int i = 0; i < D / 8; i++) oacc[i][0] = oacc[i][1] = oacc[i][2] = oacc[i][3] = 0.0f;
        float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f;

        if (tid < BN) row_s[0][tid] = fa_row(table, bs, j0 * BN + tid, n_keys, n_head_kv, kvh);
        __syncthreads();
        if constexpr (RAW) fa_stage_raw<KT, D, BN, FW_THREADS>(Kr, kc, row_s[0], tid);
        else fw_stage<D, BN>(Ks, kc, row_s[0], tid);
        fa_cp_commit();
        for (int jt = j0; jt < n_tiles; jt++) {
            const int k0 = jt * BN;
            fa_cp_wait_all();
            fw_fence_smem();
            __syncthreads(); /* K tile jt in place; every warpgroup is done with V tile jt - 1 */
            if constexpr (RAW) {
                fa_stage_raw<KT, D, BN, FW_THREADS>(Vr, vc, row_s[jt & 1], tid);
                fw_convert<KT, D, BN>(Ks, Kr, row_s[jt & 1], tid);
            } else {
                fw_stage<D, BN>(Vs, vc, row_s[jt & 1], tid);
            }
            fa_cp_commit();
            if (jt + 1 < n_tiles && tid < BN)
                row_s[(jt + 1) & 1][tid] = fa_row(table, bs, k0 + BN + tid, n_keys, n_head_kv, kvh);
            if (RAW) {
                fw_fence_smem();
                __syncthreads(); /* the f16 K tile converted */
            }
            const bool live = wgmax >= k0; /* warpgroup-uniform */
            uint32_t pf[BN / 16][4];
            if (live) {
                float sacc[BN / 8][4];
#pragma unroll
                for (int i = 0; i < BN / 8; i++) sacc[i][0] = sacc[i][1] = sacc[i][2] = sacc[i][3] = 0.0f;
                fw_fence();
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++) /* 16 dims a step: 32 bytes into a 128-byte row */
                    fw_mma<BN>::ss(sacc, fw_desc(q_at + (kk >> 2) * BM * 128 + (kk & 3) * 32, 16, 1024),
                                   fw_desc(k_at + (kk >> 2) * BN * 128 + (kk & 3) * 32, 16, 1024), 1);
                fw_commit();
                fw_wait<0>();
                float fa, fb;
                fw_softmax<BN>(sacc, pf, k0, tig, pa, pb, pmin, ma, mb, la, lb, fa, fb);
                fw_rescale<D>(oacc, fa, fb);
            }
            fa_cp_wait_all();
            fw_fence_smem();
            __syncthreads(); /* V tile jt in place; every warpgroup is done with K tile jt */
            if (jt + 1 < n_tiles) {
                if constexpr (RAW) fa_stage_raw<KT, D, BN, FW_THREADS>(Kr, kc, row_s[(jt + 1) & 1], tid);
                else fw_stage<D, BN>(Ks, kc, row_s[(jt + 1) & 1], tid);
                fa_cp_commit();
            }
            if constexpr (RAW) {
                fw_convert<KT, D, BN>(Vs, Vr, row_s[jt & 1], tid);
                fw_fence_smem();
                __syncthreads(); /* the f16 V tile converted */
            }
            if (live) {
                /* O += P V: V (keys x dims, dims contiguous) is the MN-major B operand: 64 dims a
                 * column block (LBO: the next block), 8 keys a 1024-byte atom (SBO), 16 keys a step */
                fw_fence();
#pragma unroll
                for (int kc2 = 0; kc2 < BN / 16; kc2++)
                    fw_mma<D>::rs(oacc, pf[kc2], fw_desc(v_at + kc2 * 2048, BN * 128, 1024), 1);
                fw_commit();
                fw_wait<0>();
            }
        }
        fw_finish<D, SPLIT>(out, part, oacc, la, lb, ma, mb, pa, pb, t0, ra, rb, gs, n_head, h0, gmask, tig, n_split, sp);
    }
#endif
}

/* The pipelined form (fw2): K and V of a tile double-buffered (tile jt + 1 is copied while tile jt is
 * used: one barrier a tile, two with a quantized cache's conversion), and a tile's keys in two halves,
 * so the tensor cores and the softmax overlap within a warpgroup: S of the second half is computed
 * while the first half's softmax runs, and P V of the first half while the second half's runs.
 * Row tables three tiles deep (row_s[jt % 3]: tile jt + 1's copy is issued at tile jt's start, its
 * rows made during tile jt - 1). Shared memory: as fw_tile with two K and two V tiles. */
template <int KT, int D> struct fw2_tile {
    static constexpr int BN = D == 256 ? 64 : 128;
    static constexpr size_t smem =
        1024 + (size_t)(FW_BM + 4 * BN) * D * sizeof(__half) + 2 * (size_t)BN * fa_raw_bytes<KT, D>();
    /* within 227 KB a block beside the static arrays (not q8_0 at head dim 256: fw_launch runs fw there) */
    static constexpr bool fits = smem + 3 * 1024 <= 227 * 1024;
};

template <int KT, int D, bool SPLIT>
__global__ void __launch_bounds__(FW_THREADS, 1)
fw2_prefill_kernel(const float *q, const void *kc, const void *vc, int bs, const int32_t *pos, const int32_t *tab_off,
                   const int32_t *tabs, int n, int n_head, int n_head_kv, int group, int gs, float qscale,
                   float *out, float *part) {
#if FW_ARCH_OK
    constexpr int BN = fw2_tile<KT, D>::BN, BM = FW_BM, H = BN / 2, TB = BN * D * 2;
    constexpr bool RAW = fa_raw_bytes<KT, D>() > 0;
    extern __shared__ uint8_t fw_smem[];
    uint8_t *Qs = fw_smem + ((1024 - (fa_smem_addr(fw_smem) & 1023)) & 1023);
    uint8_t *KV = Qs + BM * D * 2; /* K[0], K[1], V[0], V[1] */
    uint8_t *Kr = KV + 4 * TB, *Vr = Kr + BN * fa_raw_bytes<KT, D>();
    __shared__ int pos_s[BM], off_s[BM], last_s[BM], row_s[3][BN];
    const unsigned full = 0xffffffffu;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wg = warp / 4, g = lane / 4, tig = lane % 4;
    const int ntok = BM >> gs, t0 = (int)(gridDim.x - 1 - blockIdx.x) * ntok, n_tok = min(ntok, n - t0);
    const int h0 = blockIdx.y << gs, kvh = h0 / group, gmask = (1 << gs) - 1;
    const int sp = SPLIT ? (int)blockIdx.z : 0, n_split = SPLIT ? (int)gridDim.z : 1;

    fw_begin<D>(Qs, q, pos, tab_off, pos_s, off_s, last_s, tid, t0, n_tok, ntok, n_head, h0, gmask, gs, qscale);

    const int ra = 16 * warp + g, rb = ra + 8;
    const uint32_t q_at = fa_smem_addr(Qs) + wg * 64 * 128, kv_at = fa_smem_addr(KV);
    /* tile jt's copy: f16 rows into buffer b, or a quantized cache's raw rows */
    const auto stage = [&](int jt, int b) {
        if constexpr (RAW) {
            fa_stage_raw<KT, D, BN, FW_THREADS>(Kr, kc, row_s[jt % 3], tid);
            fa_stage_raw<KT, D, BN, FW_THREADS>(Vr, vc, row_s[jt % 3], tid);
        } else {
            fw_stage<D, BN>(KV + b * TB, kc, row_s[jt % 3], tid);
            fw_stage<D, BN>(KV + (2 + b) * TB, vc, row_s[jt % 3], tid);
        }
        fa_cp_commit();
    };
    for (int s = 0; s < n_tok; s++) {
        /* values read from shared memory broadcast from lane 0: ptxas then sees the loop and the
         * branches around the wgmma as warp-uniform (in a path it must treat as divergent it
         * serializes the wgmma, and the overlap is lost) */
        const int last = __shfl_sync(full, last_s[s], 0);
        if (last < 0) continue;
        const int n_keys = last + 1, n_all = (n_keys + BN - 1) / BN, off = off_s[s];
        const int per = ((n_all + n_split - 1) / n_split + 1) & ~1, j0 = min(sp * per, n_all),
                  n_tiles = min(j0 + per, n_all);
        const int32_t *table = tabs + off;
        const int ja = ra >> gs, jb = rb >> gs;
        const int pa = ja < n_tok && off_s[ja] == off ? pos_s[ja] : -1;
        const int pb = jb < n_tok && off_s[jb] == off ? pos_s[jb] : -1;
        const int pmin = min(pa, pb);
        int wgmax = -1;
        for (int j = (64 * wg) >> gs; j <= (64 * wg + 63) >> gs && j < n_tok; j++)
            if (off_s[j] == off) wgmax = max(wgmax, pos_s[j]);
        wgmax = __shfl_sync(full, wgmax, 0);

        float oacc[D / 8][4];
#pragma unroll
        for (int i = 0; i < D / 8; i++) oacc[i][0] = oacc[i][1] = oacc[i][2] = oacc[i][3] = 0.0f;
        float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f;

        /* (the previous group's last reads of row_s and the buffers were before its last barrier) */
        if (tid < BN) {
            row_s[j0 % 3][tid] = fa_row(table, bs, j0 * BN + tid, n_keys, n_head_kv, kvh);
            row_s[(j0 + 1) % 3][tid] = fa_row(table, bs, (j0 + 1) * BN + tid, n_keys, n_head_kv, kvh);
        }
        __syncthreads();
        if (j0 < n_tiles) stage(j0, 0);
        for (int jt = j0; jt < n_tiles; jt++) {
            const int b = (jt - j0) & 1, k0 = jt * BN;
            fa_cp_wait_all();
            if constexpr (RAW) {
                __syncthreads(); /* tile jt's raw rows in place */
                fw_convert<KT, D, BN>(KV + b * TB, Kr, row_s[jt % 3], tid);
                fw_convert<KT, D, BN>(KV + (2 + b) * TB, Vr, row_s[jt % 3], tid);
            }
            fw_fence_smem();
            __syncthreads(); /* tile jt in buffer b; every warpgroup done with tile jt - 1 (buffer b ^ 1, raw rows) */
            if (jt + 1 < n_tiles) stage(jt + 1, b ^ 1);
            if (jt + 2 < n_tiles && tid < BN)
                row_s[(jt + 2) % 3][tid] = fa_row(table, bs, k0 + 2 * BN + tid, n_keys, n_head_kv, kvh);
            if (wgmax < k0) continue; /* warpgroup-uniform: no key of the tile for its rows */
            const uint32_t k_at = kv_at + b * TB, v_at = kv_at + (2 + b) * TB;
            float s0[H / 8][4], s1[H / 8][4]; /* (no zeros: the first K step overwrites, scale_d = 0) */
            fw_fence();
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++)
                fw_mma<H>::ss(s0, fw_desc(q_at + (kk >> 2) * BM * 128 + (kk & 3) * 32, 16, 1024),
                              fw_desc(k_at + (kk >> 2) * BN * 128 + (kk & 3) * 32, 16, 1024), kk > 0);
            fw_commit();
#pragma unroll
            for (int kk = 0; kk < D / 16; kk++) /* the second half's rows: H * 128 bytes on */
                fw_mma<H>::ss(s1, fw_desc(q_at + (kk >> 2) * BM * 128 + (kk & 3) * 32, 16, 1024),
                              fw_desc(k_at + (kk >> 2) * BN * 128 + H * 128 + (kk & 3) * 32, 16, 1024), kk > 0);
            fw_commit();
            fw_wait<1>(); /* the first half's S */
            uint32_t p0[H / 16][4], p1[H / 16][4];
            float fa, fb;
            fw_softmax<H>(s0, p0, k0, tig, pa, pb, pmin, ma, mb, la, lb, fa, fb);
            fw_rescale<D>(oacc, fa, fb);
            fw_fence();
#pragma unroll
            for (int c = 0; c < H / 16; c++) fw_mma<D>::rs(oacc, p0[c], fw_desc(v_at + c * 2048, BN * 128, 1024), 1);
            fw_commit();
            fw_wait<1>(); /* the second half's S (the first half's P V may still run) */
            fw_softmax<H>(s1, p1, k0 + H, tig, pa, pb, pmin, ma, mb, la, lb, fa, fb);
            fw_wait<0>();
            fw_rescale<D>(oacc, fa, fb);
            fw_fence();
#pragma unroll
            for (int c = 0; c < H / 16; c++)
                fw_mma<D>::rs(oacc, p1[c], fw_desc(v_at + (H / 16 + c) * 2048, BN * 128, 1024), 1);
            fw_commit();
            fw_wait<0>();
        }
        fw_finish<D, SPLIT>(out, part, oacc, la, lb, ma, mb, pa, pb, t0, ra, rb, gs, n_head, h0, gmask, tig, n_split, sp);
        __syncthreads(); /* every warpgroup past its last tile before the next group's rows and copies */
    }
#endif
}

/* Key tile size: 64 positions; 32 at head_dim 256, where the O accumulator alone takes
 * 128 registers a thread (and MT = 1 only: two m-tiles would need 256). Dynamic shared memory: Q, K
 * and V f16 tiles, and the raw K and V rows of a quantized cache. */
template <int KT, int D, int MT> struct fa_tile {
    static_assert(MT == 1 || (MT == 2 && D <= 128), "two m-tiles a warp: head dims 64 and 128");
    static constexpr int BN = D == 256 ? 32 : 64;
    static constexpr size_t smem =
        (size_t)(FA_BM * MT + 2 * BN) * (D + FA_PAD) * sizeof(__half) + 2 * BN * fa_raw_bytes<KT, D>();
};

/* log2 of the query heads per block: the largest power of two <= 8 dividing the GQA group */
static int fa_gq_shift(int group) { return group % 8 == 0 ? 3 : group % 4 == 0 ? 2 : group % 2 == 0 ? 1 : 0; }

bool cuda_attn_prefill_supported(const cuda_backend *cb, int head_dim, int n_head, int n_head_kv) {
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, cb->device) != cudaSuccess) {
        cudaGetLastError(); /* not this op's failure: the tile kernel runs instead */
        return false;
    }
    return major >= 8 && (head_dim == 64 || head_dim == 128 || head_dim == 256) && n_head_kv > 0 &&
           n_head % n_head_kv == 0;
}

/* n_split > 1: each block takes 1 / n_split of each group's key tiles (blockIdx.z) and writes its
 * partials to part (n * n_head * n_split rows of D + 2 floats); fa_merge_kernel makes out. */
template <int KT, int D, int MT>
static void fa_launch(cuda_backend *cb, const float *q, const bk_kv_view *kv, int n, const int32_t *d_pos,
                      const int32_t *d_off, const int32_t *d_tabs, int n_head, int n_head_kv, float scale, float *out,
                      int n_split = 1, float *part = NULL) {
    const int group = n_head / n_head_kv, gs = fa_gq_shift(group), ntok = (FA_BM * MT) >> gs;
    constexpr int BN = fa_tile<KT, D, MT>::BN;
    constexpr size_t smem = fa_tile<KT, D, MT>::smem;
    /* above the 48 KB default: opt in (per device, cheap, legal inside a capture) */
    if (n_split < 2 || !part) n_split = 1, part = NULL;
    auto kern = part ? fa_prefill_kernel<KT, D, BN, MT, true> : fa_prefill_kernel<KT, D, BN, MT, false>;
    CU_OP(cb, cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)((n + ntok - 1) / ntok), (unsigned)(n_head >> gs), (unsigned)n_split);
    kern<<<grid, FA_THREADS, smem, cb->stream>>>(q, kv->k, kv->v, kv->block_size, d_pos, d_off, d_tabs, n, n_head,
                                                 n_head_kv, group, gs, scale * 1.4426950408889634f /* log2 e */, out,
                                                 part);
    CU_COUNT(cb, CU_PATH_ATTN_PREFILL);
    if (part) {
        const int64_t rows = (int64_t)n * n_head;
        fa_merge_kernel<D><<<(unsigned)((rows + 3) / 4), 128, 0, cb->stream>>>(part, n_split, rows, out);
    }
}

/* How a batch runs (fa_plan): MT, m-tiles of 16 rows a warp, and n_split, the key-range split.
 *
 * MT = 2 (each K/V fragment feeds two mma chains: half the shared-memory reads a product) compiles for
 * head dims 64 and 128, every cache type but f32. It wins with enough blocks: attn_lab (H100, session
 * 26) at a 2,048-entry chunk (the 8b's shape: 512 blocks) 1.12x with no prefix and 1.34-1.53x
 * against 4K-256K prefixes (f16; q8_0 and q4_0 1.2-1.7x); at 512 entries (128 blocks for 132 SMs)
 * alone it lost (0.82-0.98x). Head dim 64 gains from 6K keys only (0.94x below).
 *
 * The split: a ubatch of 512 entries (brisk's) against a long prefix gives few blocks, each with a
 * long run of key tiles; blockIdx.z takes a share of every group's tiles (FA_SPLIT_BLOCKS blocks a
 * multiprocessor in all, at least FA_SPLIT_KEYS keys a split; never on an f32 cache) and fa_merge_kernel adds the partials
 * (cb->fa_part, grown on demand; one split if it cannot grow). Measured at 512 entries: the 8b's
 * shape 1.11-1.24x (MT = 2, 5 splits) and the 35b-a3b's (16/2 x 256) 1.32-1.33x from 32K-token
 * prefixes; where the prefix is short beside the chunk (the causal triangle splits unevenly) or the
 * blocks already fill the SMs (the 27b's 24/4 x 256: 192 blocks), it lost (0.8-0.97x), hence the
 * conditions. */
#define FA_MT2_BLOCKS 3      /* MT = 2 unsplit from this many blocks a multiprocessor */
#define FA_SPLIT_LONG 16     /* split only when the longest key range is this many times the batch */
#define FA_SPLIT_BLOCKS 4    /* blocks a multiprocessor the split aims at */
#define FA_SPLIT_KEYS 1024   /* keys a split at least */
#define FA_SPLIT_MAX 16
fa_shape fa_plan_shape(int kv_type, int n, int n_head, int n_head_kv, int hd, int max_np, int n_sm) {
    if (kv_type == KT_F32) return {1, 1}; /* f32 caches are for exact comparisons: the plain kernel */
    const int gs = fa_gq_shift(n_head / n_head_kv);
    const auto blocks = [&](int mt) { return (int64_t)((n + (FA_BM * mt >> gs) - 1) / (FA_BM * mt >> gs)) * (n_head >> gs); };
    const bool mt2 = hd == 128 || (hd == 64 && max_np >= 6144);
    if (mt2 && blocks(2) >= (int64_t)FA_MT2_BLOCKS * n_sm) return {2, 1};
    const int mt = mt2 ? 2 : 1;
    const int64_t b = blocks(mt), want = (int64_t)FA_SPLIT_BLOCKS * n_sm;
    if ((int64_t)max_np < (int64_t)FA_SPLIT_LONG * n || b > n_sm) return {1, 1};
    int64_t sp = (want + b - 1) / b;
    if (sp > FA_SPLIT_MAX) sp = FA_SPLIT_MAX;
    if (sp > max_np / FA_SPLIT_KEYS) sp = max_np / FA_SPLIT_KEYS;
    return sp < 2 ? fa_shape{1, 1} : fa_shape{mt, (int)sp};
}

/* n_split splits' scratch, for this n's most splits whatever the prefix (grown once, not chunk by chunk):
 * n_split, or 1 if it cannot grow. */
static int fa_reserve_splits(cuda_backend *cb, int n, int n_head, int hd, int n_split, int most) {
    if (n_split < 2) return 1;
    const size_t need = (size_t)n * n_head * most * (hd + 2) * sizeof(float);
    const brisk_status before = cb->err;
    if (!cuda_scratch_reserve(cb, &cb->fa_part, need, "prefill attention splits")) {
        cb->err = before; /* not this op's failure: the unsplit kernel needs no scratch */
        return 1;
    }
    return n_split;
}

/* fa_plan_shape, with the split's scratch (one split if it cannot grow). */
static fa_shape fa_plan(cuda_backend *cb, int kv_type, int n, int n_head, int n_head_kv, int hd, int max_np) {
    fa_shape sh = fa_plan_shape(kv_type, n, n_head, n_head_kv, hd, max_np, cb->n_sm);
    if (sh.n_split < 2) return sh;
    const int most = fa_plan_shape(kv_type, n, n_head, n_head_kv, hd, 1 << 30, cb->n_sm).n_split;
    return fa_reserve_splits(cb, n, n_head, hd, sh.n_split, most) > 1 ? sh : fa_shape{1, 1};
}

/* The warpgroup-MMA kernels' key-range split: they run one block an SM (256 threads at up to 255
 * registers), so a batch of fewer blocks than SMs against a long prefix (FA_SPLIT_LONG times the batch)
 * splits each group's key tiles, into as few splits as fill the last wave best (a split must beat the
 * fill of fewer by 5% of it; at least FA_SPLIT_KEYS keys a split). attn_lab (H100, session 34, a ubatch of
 * 512 after 32K-128K): the 8b's 128 blocks fill 97% unsplit (342-350 TFLOP/s; 2-8 splits 284-346);
 * the 27b's 96 blocks 73%, with 4 splits 97% (292-324 against 247-251 unsplit; 3 splits 231-244);
 * the 35b-a3b's 64 blocks 48%, with 2 splits 97% (310-326 against 164-167; 5 splits 274-317). */
int fw_plan_splits(int n, int n_head, int n_head_kv, int max_np, int n_sm) {
    const int gs = fa_gq_shift(n_head / n_head_kv);
    const int64_t b = (int64_t)((n + (FW_BM >> gs) - 1) / (FW_BM >> gs)) * (n_head >> gs);
    if ((int64_t)max_np < (int64_t)FA_SPLIT_LONG * n || b > n_sm) return 1;
    const auto fill = [&](int64_t sp) { /* the share of the resident slots the grid's waves use */
        const int64_t g = b * sp;
        return (double)g / (double)(((g + n_sm - 1) / n_sm) * n_sm);
    };
    int best = 1;
    for (int sp = 2; sp <= FA_SPLIT_MAX && max_np / sp >= FA_SPLIT_KEYS; sp++)
        if (fill(sp) > 1.05 * fill(best)) best = sp;
    return best;
}

/* Which form runs (cuda_attn_prefill): the pipelined fw2 where it fits 227 KB and wins. attn_lab (H100,
 * session 34, chunks of 2,048 and 512 after 0-128K): fw2 beat fw at head dim 128 (342-350 TFLOP/s against
 * 331-337 at 32K+) and with q4_0 caches (238 against 223 at 256); fw beat fw2 at head dim 256 with f16
 * caches (363-371 against 325-336: fw2 spills 16-40 bytes there), so fw takes f16 at 256 too (end to end,
 * H100 session 35: pp32768 1.014x on qwen3.6-27b, 1.022x on qwen3.6-35b-a3b, 1.026x at 128K; its
 * test_cuda_ops attention_prefill passed in session 36). q8_0 at 256 is fw's because fw2's two K/V
 * buffers and raw rows pass 227 KB. */
template <int KT, int D> constexpr bool fw_pipelined() { return fw2_tile<KT, D>::fits && !(KT == KT_F16 && D == 256); }

/* Whether the warpgroup-MMA kernel takes this cache type and head dim here: an sm_90 device (wgmma is
 * sm_90a's; later majors lack it), this build's sm_90a code, not switched off. Asked once a device. */
static bool fw_usable(cuda_backend *cb, int kv_type, int hd) {
    if (cb->attn_wgmma_off || kv_type == KT_F32 || (hd != 128 && hd != 256)) return false;
    static int ok[8]; /* 0: not asked yet; 1 yes; -1 no */
    const int dev = cb->device & 7;
    if (!ok[dev]) {
        int major = 0, minor = 0;
        cudaFuncAttributes a;
        const bool y = cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, cb->device) == cudaSuccess &&
                       cudaDeviceGetAttribute(&minor, cudaDevAttrComputeCapabilityMinor, cb->device) == cudaSuccess &&
                       major == 9 && minor == 0 &&
                       cudaFuncGetAttributes(&a, fw2_prefill_kernel<KT_F16, 128, false>) == cudaSuccess &&
                       a.binaryVersion == 90;
        cudaGetLastError(); /* a refusal here is not this op's failure: the mma.sync kernel runs */
        ok[dev] = y ? 1 : -1;
    }
    return ok[dev] > 0;
}

/* The warpgroup-MMA kernel on a batch; n_split > 1 as fa_launch. */
template <int KT, int D, bool PIPE = fw_pipelined<KT, D>()>
static void fw_launch(cuda_backend *cb, const float *q, const bk_kv_view *kv, int n, const int32_t *d_pos,
                      const int32_t *d_off, const int32_t *d_tabs, int n_head, int n_head_kv, float scale, float *out,
                      int n_split = 1, float *part = NULL) {
    const int group = n_head / n_head_kv, gs = fa_gq_shift(group), ntok = FW_BM >> gs;
    constexpr bool P2 = PIPE && fw2_tile<KT, D>::fits;
    constexpr size_t smem = P2 ? fw2_tile<KT, D>::smem : fw_tile<KT, D>::smem;
    if (n_split < 2 || !part) n_split = 1, part = NULL;
    /* if constexpr: only the form that runs is instantiated (a ?: would compile both for every type) */
    auto kern = [&] {
        if constexpr (P2) return part ? fw2_prefill_kernel<KT, D, true> : fw2_prefill_kernel<KT, D, false>;
        else return part ? fw_prefill_kernel<KT, D, true> : fw_prefill_kernel<KT, D, false>;
    }();
    CU_OP(cb, cudaFuncSetAttribute(kern, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    dim3 grid((unsigned)((n + ntok - 1) / ntok), (unsigned)(n_head >> gs), (unsigned)n_split);
    kern<<<grid, FW_THREADS, smem, cb->stream>>>(q, kv->k, kv->v, kv->block_size, d_pos, d_off, d_tabs, n, n_head,
                                                 n_head_kv, group, gs, scale * 1.4426950408889634f /* log2 e */, out,
                                                 part);
    CU_COUNT(cb, CU_PATH_ATTN_PREFILL);
    if (part) {
        const int64_t rows = (int64_t)n * n_head;
        fa_merge_kernel<D><<<(unsigned)((rows + 3) / 4), 128, 0, cb->stream>>>(part, n_split, rows, out);
    }
}

/* Launches the prefill kernel (the KV write is the caller's); cuda_attn_prefill_supported must hold.
 * max_np: the longest key range of the batch (or the step's shape), for fa_plan. */
void cuda_attn_prefill(cuda_backend *cb, const float *q, const bk_kv_view *kv, int n, int max_np, const int32_t *d_pos,
                       const int32_t *d_off, const int32_t *d_tabs, int n_head, int n_head_kv, int hd, float scale,
                       float *out) {
    const int kt = kv->kv_type;
    if (fw_usable(cb, kt, hd)) {
        const int want = fw_plan_splits(n, n_head, n_head_kv, max_np, cb->n_sm);
        const int n_split =
            fa_reserve_splits(cb, n, n_head, hd, want, fw_plan_splits(n, n_head, n_head_kv, 1 << 30, cb->n_sm));
        float *part = n_split > 1 ? (float *)cb->fa_part.buf : NULL;
#define FW_ARGS cb, q, kv, n, d_pos, d_off, d_tabs, n_head, n_head_kv, scale, out, n_split, part
        if (kt == KT_Q4_0) hd == 128 ? fw_launch<KT_Q4_0, 128>(FW_ARGS) : fw_launch<KT_Q4_0, 256>(FW_ARGS);
        else if (kt == KT_Q8_0) hd == 128 ? fw_launch<KT_Q8_0, 128>(FW_ARGS) : fw_launch<KT_Q8_0, 256>(FW_ARGS);
        else hd == 128 ? fw_launch<KT_F16, 128>(FW_ARGS) : fw_launch<KT_F16, 256>(FW_ARGS);
#undef FW_ARGS
        return;
    }
    const fa_shape sh = fa_plan(cb, kt, n, n_head, n_head_kv, hd, max_np);
    const bool mt2 = sh.mt == 2;
    const int n_split = sh.n_split;
    float *part = n_split > 1 ? (float *)cb->fa_part.buf : NULL;
#define FA_ARGS cb, q, kv, n, d_pos, d_off, d_tabs, n_head, n_head_kv, scale, out, n_split, part
#define FA_D(KK)                                                                                                 \
    switch (hd) {                                                                                                \
    case 64: mt2 ? fa_launch<KK, 64, 2>(FA_ARGS) : fa_launch<KK, 64, 1>(FA_ARGS); break;                        \
    case 128: mt2 ? fa_launch<KK, 128, 2>(FA_ARGS) : fa_launch<KK, 128, 1>(FA_ARGS); break;                     \
    default: fa_launch<KK, 256, 1>(FA_ARGS); break;                                                              \
    }
    if (kt == KT_Q4_0) FA_D(KT_Q4_0)
    else if (kt == KT_Q8_0) FA_D(KT_Q8_0)
    else if (kt == KT_F16) FA_D(KT_F16)
    else if (hd == 64) fa_launch<KT_F32, 64, 1>(FA_ARGS); /* f32 (exact comparisons): MT = 1 only */
    else if (hd == 128) fa_launch<KT_F32, 128, 1>(FA_ARGS);
    else fa_launch<KT_F32, 256, 1>(FA_ARGS);
#undef FA_D
#undef FA_ARGS
}
