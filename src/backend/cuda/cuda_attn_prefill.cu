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
 * warp w owns rows 16w .. 16w + 15. Per key tile of BN positions:
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
 * Q K^T, the next K tile's overlaps P V); f32, q8_0 and q4_0 caches are loaded,
 * converted to f16 and stored by the threads at the same points. Rows past the
 * group's last position are zero-filled (their P is 0, but 0 * NaN would not be).
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

#define FA_WARPS 4
#define FA_THREADS (FA_WARPS * 32)
#define FA_BM (FA_WARPS * 16) /* query rows per block */
#define FA_PAD 8              /* f16 padding per shared row: conflict-free ldmatrix, 16-byte rows */

/* Cache row (slot * n_head_kv + kvh) of key position p, or -1 past the group's last position. */
__device__ __forceinline__ int fa_row(const int32_t *table, int bs, int p, int n_keys, int n_head_kv, int kvh) {
    return p < n_keys ? (table[p / bs] * bs + p % bs) * n_head_kv + kvh : -1;
}

/* Stages the BN cache rows named by rows[] into dst [BN][D + FA_PAD] f16: 16-byte
 * chunks, consecutive threads along a row (coalesced). */
template <int KT, int D, int BN>
__device__ __forceinline__ void fa_stage(__half *dst, const void *base, const int *rows, int tid) {
    constexpr int CPR = D / 8; /* chunks per row */
    static_assert(BN * CPR % FA_THREADS == 0, "whole passes");
#pragma unroll
    for (int i = 0; i < BN * CPR / FA_THREADS; i++) {
        const int c = tid + i * FA_THREADS, r = c / CPR, c8 = c % CPR;
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

/* One block per (query tile, GQ = 1 << gs heads from h0 = blockIdx.y * GQ): see the header.
 * Query tiles are taken last first (blockIdx.x reversed): the later entries see the
 * longest key ranges and should start first. Dynamic shared memory: Q [FA_BM], K [BN],
 * V [BN] rows of D + FA_PAD f16. */
template <int KT, int D, int BN>
__global__ void __launch_bounds__(FA_THREADS)
fa_prefill_kernel(const float *q, const void *kc, const void *vc, int bs, const int32_t *pos, const int32_t *tab_off,
                  const int32_t *tabs, int n, int n_head, int n_head_kv, int group, int gs, float qscale,
                  float *out) {
#if FA_ARCH_OK
    constexpr int LD = D + FA_PAD;
    extern __shared__ __align__(16) uint8_t fa_smem[];
    __half *Qs = (__half *)fa_smem, *Ks = Qs + FA_BM * LD, *Vs = Ks + BN * LD;
    __shared__ int pos_s[FA_BM], off_s[FA_BM], last_s[FA_BM], row_s[2][BN];
    const unsigned full = 0xffffffffu;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, g = lane / 4, tig = lane % 4;
    const int ntok = FA_BM >> gs, t0 = (int)(gridDim.x - 1 - blockIdx.x) * ntok, n_tok = min(ntok, n - t0);
    const int h0 = blockIdx.y << gs, kvh = h0 / group, gmask = (1 << gs) - 1;

    if (tid < ntok) {
        pos_s[tid] = tid < n_tok ? pos[t0 + tid] : -1;
        off_s[tid] = tid < n_tok ? tab_off[t0 + tid] : -1;
    }
    /* Q, scaled and rounded to f16; rows past the batch are zero (and idle) */
    for (int c = tid; c < FA_BM * D; c += FA_THREADS) {
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

    /* this thread's two rows (g and g + 8 of its warp's 16) */
    const int ra = 16 * warp + g, rb = ra + 8, ja = ra >> gs, jb = rb >> gs;
    for (int s = 0; s < n_tok; s++) {
        if (last_s[s] < 0) continue; /* not a group's first entry */
        const int n_keys = last_s[s] + 1, n_tiles = (n_keys + BN - 1) / BN, off = off_s[s];
        const int32_t *table = tabs + off;
        const int pa = ja < n_tok && off_s[ja] == off ? pos_s[ja] : -1;
        const int pb = jb < n_tok && off_s[jb] == off ? pos_s[jb] : -1;
        /* the warp's last position: key tiles past it hold nothing for its rows */
        int wmax = max(pa, pb);
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) wmax = max(wmax, __shfl_xor_sync(full, wmax, o));

        float oacc[D / 8][4];
#pragma unroll
        for (int i = 0; i < D / 8; i++) oacc[i][0] = oacc[i][1] = oacc[i][2] = oacc[i][3] = 0.0f;
        float ma = -INFINITY, mb = -INFINITY, la = 0.0f, lb = 0.0f; /* l: this thread's columns only */

        /* No barrier needed before this write: the previous group read row_s and Ks only before
         * its last tile's second barrier, and Vs is restaged after the loop's first barrier. */
        if (tid < BN) row_s[0][tid] = fa_row(table, bs, tid, n_keys, n_head_kv, kvh);
        __syncthreads();
        fa_stage<KT, D, BN>(Ks, kc, row_s[0], tid);
        fa_cp_commit();
        for (int jt = 0; jt < n_tiles; jt++) {
            const int k0 = jt * BN;
            fa_cp_wait_all();
            __syncthreads(); /* K tile jt in place; every warp is done with V tile jt - 1 */
            fa_stage<KT, D, BN>(Vs, vc, row_s[jt & 1], tid);
            fa_cp_commit();
            if (jt + 1 < n_tiles && tid < BN)
                row_s[(jt + 1) & 1][tid] = fa_row(table, bs, k0 + BN + tid, n_keys, n_head_kv, kvh);
            const bool live = wmax >= k0; /* warp-uniform */
            float sacc[BN / 8][4];
            if (live) {
                /* S (16 x BN) = Q (16 x D) K^T */
#pragma unroll
                for (int i = 0; i < BN / 8; i++) sacc[i][0] = sacc[i][1] = sacc[i][2] = sacc[i][3] = 0.0f;
#pragma unroll
                for (int kk = 0; kk < D / 16; kk++) {
                    uint32_t a[4];
                    fa_ldsm_x4(a, Qs + (16 * warp + lane % 16) * LD + 16 * kk + 8 * (lane / 16));
#pragma unroll
                    for (int np = 0; np < BN / 16; np++) {
                        /* matrices: keys +0/+8 (lane / 16) x dims +0/+8 (lane / 8 % 2) -> b0, b1 of two n-tiles */
                        uint32_t b[4];
                        fa_ldsm_x4(b, Ks + (16 * np + lane % 8 + 8 * (lane / 16)) * LD + 16 * kk + 8 * (lane / 8 % 2));
                        fa_mma(sacc[2 * np], a, b[0], b[1]);
                        fa_mma(sacc[2 * np + 1], a, b[2], b[3]);
                    }
                }
                /* mask: sacc[i][0..1] are row ra, keys k0 + 8i + 2 tig + {0, 1}; [2..3] row rb */
                if (k0 + BN - 1 > min(pa, pb)) {
#pragma unroll
                    for (int i = 0; i < BN / 8; i++)
#pragma unroll
                        for (int e = 0; e < 2; e++) {
                            const int key = k0 + 8 * i + 2 * tig + e;
                            if (key > pa) sacc[i][e] = -INFINITY;
                            if (key > pb) sacc[i][2 + e] = -INFINITY;
                        }
                }
                /* online softmax; a row with every key so far masked keeps m = -inf and uses 0 as
                 * its reference, so exp2 sees -inf - 0 (= 0), never -inf - -inf */
                float mxa = ma, mxb = mb;
#pragma unroll
                for (int i = 0; i < BN / 8; i++) {
                    mxa = fmaxf(mxa, fmaxf(sacc[i][0], sacc[i][1]));
                    mxb = fmaxf(mxb, fmaxf(sacc[i][2], sacc[i][3]));
                }
#pragma unroll
                for (int o = 1; o < 4; o <<= 1) { /* the four lanes of a row */
                    mxa = fmaxf(mxa, __shfl_xor_sync(full, mxa, o));
                    mxb = fmaxf(mxb, __shfl_xor_sync(full, mxb, o));
                }
                const float ua = mxa == -INFINITY ? 0.0f : mxa, ub = mxb == -INFINITY ? 0.0f : mxb;
                const float fa = exp2f(ma - ua), fb = exp2f(mb - ub);
                ma = mxa;
                mb = mxb;
                float sa = 0.0f, sb = 0.0f;
#pragma unroll
                for (int i = 0; i < BN / 8; i++) {
                    sacc[i][0] = exp2f(sacc[i][0] - ua);
                    sacc[i][1] = exp2f(sacc[i][1] - ua);
                    sacc[i][2] = exp2f(sacc[i][2] - ub);
                    sacc[i][3] = exp2f(sacc[i][3] - ub);
                    sa += sacc[i][0] + sacc[i][1];
                    sb += sacc[i][2] + sacc[i][3];
                }
                la = la * fa + sa;
                lb = lb * fb + sb;
#pragma unroll
                for (int i = 0; i < D / 8; i++) {
                    oacc[i][0] *= fa;
                    oacc[i][1] *= fa;
                    oacc[i][2] *= fb;
                    oacc[i][3] *= fb;
                }
            }
            fa_cp_wait_all();
            __syncthreads(); /* V tile jt in place; every warp is done with K tile jt */
            if (jt + 1 < n_tiles) {
                fa_stage<KT, D, BN>(Ks, kc, row_s[(jt + 1) & 1], tid);
                fa_cp_commit();
            }
            if (live) {
                /* O (16 x D) += P (16 x BN) V: the S accumulators of n-tiles 2kc, 2kc + 1 are
                 * exactly the A fragment of key chunk kc */
#pragma unroll
                for (int kc2 = 0; kc2 < BN / 16; kc2++) {
                    uint32_t a[4];
                    a[0] = fa_pack(sacc[2 * kc2][0], sacc[2 * kc2][1]);
                    a[1] = fa_pack(sacc[2 * kc2][2], sacc[2 * kc2][3]);
                    a[2] = fa_pack(sacc[2 * kc2 + 1][0], sacc[2 * kc2 + 1][1]);
                    a[3] = fa_pack(sacc[2 * kc2 + 1][2], sacc[2 * kc2 + 1][3]);
#pragma unroll
                    for (int dp = 0; dp < D / 16; dp++) {
                        /* transposed matrices: keys +0/+8 (lane / 8 % 2) x dims +0/+8 (lane / 16) */
                        uint32_t b[4];
                        fa_ldsm_x4_t(b, Vs + (16 * kc2 + lane % 16) * LD + 16 * dp + 8 * (lane / 16));
                        fa_mma(oacc[2 * dp], a, b[0], b[1]);
                        fa_mma(oacc[2 * dp + 1], a, b[2], b[3]);
                    }
                }
            }
        }
        /* l over the row's four lanes; a row of the group has l >= 1 (its max scores exp2(0)) */
#pragma unroll
        for (int o = 1; o < 4; o <<= 1) {
            la += __shfl_xor_sync(full, la, o);
            lb += __shfl_xor_sync(full, lb, o);
        }
        if (pa >= 0) {
            const float inv = 1.0f / la;
            float *o = out + ((int64_t)(t0 + ja) * n_head + h0 + (ra & gmask)) * D + 2 * tig;
#pragma unroll
            for (int i = 0; i < D / 8; i++) {
                o[8 * i] = oacc[i][0] * inv;
                o[8 * i + 1] = oacc[i][1] * inv;
            }
        }
        if (pb >= 0) {
            const float inv = 1.0f / lb;
            float *o = out + ((int64_t)(t0 + jb) * n_head + h0 + (rb & gmask)) * D + 2 * tig;
#pragma unroll
            for (int i = 0; i < D / 8; i++) {
                o[8 * i] = oacc[i][2] * inv;
                o[8 * i + 1] = oacc[i][3] * inv;
            }
        }
    }
#endif
}

/* Key tile size: 64 positions; 32 at head_dim 256, where the O accumulator alone takes
 * 128 registers a thread. */
template <int D> struct fa_tile {
    static constexpr int BN = D == 256 ? 32 : 64;
    static constexpr size_t smem = (size_t)(FA_BM + 2 * BN) * (D + FA_PAD) * sizeof(__half);
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

template <int KT, int D>
static void fa_launch(cuda_backend *cb, const float *q, const bk_kv_view *kv, int n, const int32_t *d_pos,
                      const int32_t *d_off, const int32_t *d_tabs, int n_head, int n_head_kv, float scale, float *out) {
    const int group = n_head / n_head_kv, gs = fa_gq_shift(group), ntok = FA_BM >> gs;
    constexpr int BN = fa_tile<D>::BN;
    constexpr size_t smem = fa_tile<D>::smem;
    /* above the 48 KB default: opt in (per device, cheap, legal inside a capture) */
    CU_OP(cb, cudaFuncSetAttribute(fa_prefill_kernel<KT, D, BN>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   (int)smem));
    dim3 grid((unsigned)((n + ntok - 1) / ntok), (unsigned)(n_head >> gs));
    fa_prefill_kernel<KT, D, BN><<<grid, FA_THREADS, smem, cb->stream>>>(
        q, kv->k, kv->v, kv->block_size, d_pos, d_off, d_tabs, n, n_head, n_head_kv, group, gs,
        scale * 1.4426950408889634f /* log2 e */, out);
    CU_COUNT(cb, CU_PATH_ATTN_PREFILL);
}

/* Launches the prefill kernel (the KV write is the caller's); cuda_attn_prefill_supported must hold. */
void cuda_attn_prefill(cuda_backend *cb, const float *q, const bk_kv_view *kv, int n, const int32_t *d_pos,
                       const int32_t *d_off, const int32_t *d_tabs, int n_head, int n_head_kv, int hd, float scale,
                       float *out) {
#define FA_D(KK)                                                                                             \
    switch (hd) {                                                                                            \
    case 64: fa_launch<KK, 64>(cb, q, kv, n, d_pos, d_off, d_tabs, n_head, n_head_kv, scale, out); break;    \
    case 128: fa_launch<KK, 128>(cb, q, kv, n, d_pos, d_off, d_tabs, n_head, n_head_kv, scale, out); break;  \
    default: fa_launch<KK, 256>(cb, q, kv, n, d_pos, d_off, d_tabs, n_head, n_head_kv, scale, out); break;   \
    }
    const int kt = kv->kv_type;
    if (kt == KT_Q4_0) FA_D(KT_Q4_0)
    else if (kt == KT_Q8_0) FA_D(KT_Q8_0)
    else if (kt == KT_F16) FA_D(KT_F16)
    else FA_D(KT_F32)
#undef FA_D
}
