/* attn_fw.cuh — the prefill attention on Hopper's warpgroup MMA (wgmma, sm_90a), as a lab: two
 * kernels beside cuda_attn_prefill.cu's mma.sync one, measured by attn_lab.cu (`attn_lab MAX fw`),
 * to move into src/ once a GPU lease shows them winning end to end (issue 28: prefill at 32K-262K
 * within 1.5x of pp512's time a token). Included after cuda_attn_prefill.cu (its helpers: fa_row,
 * fa_stage_raw, fa_store_row / fa_store_part, fa_merge_kernel, fa_gq_shift, FA_SPLIT_*).
 *
 * The next lease (dev/kernels/fw_ab.sh): the lab rows (correctness against the mma.sync kernel's
 * output, TFLOP/s at chunks of 2,048 and 512 after 0-128K prefixes), then, with the kernel moved
 * into cuda_attn_prefill's dispatch behind a BRISK_CUDA_DISABLE=attn_wgmma path, test_cuda_ops
 * attention_prefill and the end-to-end pp A/B. Compiled here it has no spills at head dim 128
 * (fw: 222 registers; fw2: 245-255) and 16-40 bytes at 256 (fw2); ptxas serializes no wgmma. */
#include "wgmma_ptx.cuh"

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
 * fw_plan_splits picks the key-range split. In src/ the dispatch would take this kernel on an sm_90
 * device with this build's sm_90a code (cudaFuncGetAttributes' binaryVersion 90), head dim 128 or 256,
 * and any cache type but f32. */
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
    const unsigned full = 0xffffffffu;
    const int tid = threadIdx.x, lane = tid % 32, warp = tid / 32, wg = warp / 4, g = lane / 4, tig = lane % 4;
    const int ntok = BM >> gs, t0 = (int)(gridDim.x - 1 - blockIdx.x) * ntok, n_tok = min(ntok, n - t0);
    const int h0 = blockIdx.y << gs, kvh = h0 / group, gmask = (1 << gs) - 1;
    const int sp = SPLIT ? (int)blockIdx.z : 0, n_split = SPLIT ? (int)gridDim.z : 1;

    if (tid < ntok) {
        pos_s[tid] = tid < n_tok ? pos[t0 + tid] : -1;
        off_s[tid] = tid < n_tok ? tab_off[t0 + tid] : -1;
    }
    /* Q, scaled and rounded to f16, 8 values a thread and pass; rows past the batch are zero */
    for (int c = tid; c < BM * D / 8; c += FW_THREADS) {
        const int r = c / (D / 8), c8 = c % (D / 8), j = r >> gs;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (j < n_tok) {
            const float4 *p = (const float4 *)(q + ((int64_t)(t0 + j) * n_head + h0 + (r & gmask)) * D + 8 * c8);
            const float4 a = p[0], b = p[1];
            v = make_uint4(fa_pack(a.x * qscale, a.y * qscale), fa_pack(a.z * qscale, a.w * qscale),
                           fa_pack(b.x * qscale, b.y * qscale), fa_pack(b.z * qscale, b.w * qscale));
        }
        *(uint4 *)(Qs + fw_swz<BM>(r, c8)) = v;
    }
    __syncthreads();
    if (tid < n_tok) { /* groups, as fa_prefill_kernel */
        bool lead = true;
        for (int k = 0; k < tid && lead; k++) lead = off_s[k] != off_s[tid];
        int mx = -1;
        if (lead)
            for (int k = tid; k < n_tok; k++)
                if (off_s[k] == off_s[tid]) mx = max(mx, pos_s[k]);
        last_s[tid] = mx;
    }
    fw_fence_smem(); /* Q's tile, for wgmma */
    __syncthreads();

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
#pragma unroll
        for (int o = 1; o < 4; o <<= 1) {
            la += __shfl_xor_sync(full, la, o);
            lb += __shfl_xor_sync(full, lb, o);
        }
        const int64_t at0 = ((int64_t)(t0 + ja) * n_head + h0 + (ra & gmask)) * D + 2 * tig;
        const int64_t at1 = ((int64_t)(t0 + jb) * n_head + h0 + (rb & gmask)) * D + 2 * tig;
        if (SPLIT) {
            if (pa >= 0) fa_store_part<D>(part, at0 / D, n_split, sp, tig, oacc, 0, ma, la);
            if (pb >= 0) fa_store_part<D>(part, at1 / D, n_split, sp, tig, oacc, 2, mb, lb);
        } else {
            if (pa >= 0) fa_store_row<D>(out, at0, oacc, 0, la);
            if (pb >= 0) fa_store_row<D>(out, at1, oacc, 2, lb);
        }
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

    if (tid < ntok) {
        pos_s[tid] = tid < n_tok ? pos[t0 + tid] : -1;
        off_s[tid] = tid < n_tok ? tab_off[t0 + tid] : -1;
    }
    for (int c = tid; c < BM * D / 8; c += FW_THREADS) {
        const int r = c / (D / 8), c8 = c % (D / 8), j = r >> gs;
        uint4 v = make_uint4(0, 0, 0, 0);
        if (j < n_tok) {
            const float4 *p = (const float4 *)(q + ((int64_t)(t0 + j) * n_head + h0 + (r & gmask)) * D + 8 * c8);
            const float4 a = p[0], b = p[1];
            v = make_uint4(fa_pack(a.x * qscale, a.y * qscale), fa_pack(a.z * qscale, a.w * qscale),
                           fa_pack(b.x * qscale, b.y * qscale), fa_pack(b.z * qscale, b.w * qscale));
        }
        *(uint4 *)(Qs + fw_swz<BM>(r, c8)) = v;
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
    fw_fence_smem();
    __syncthreads();

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
#pragma unroll
        for (int o = 1; o < 4; o <<= 1) {
            la += __shfl_xor_sync(full, la, o);
            lb += __shfl_xor_sync(full, lb, o);
        }
        const int64_t at0 = ((int64_t)(t0 + ja) * n_head + h0 + (ra & gmask)) * D + 2 * tig;
        const int64_t at1 = ((int64_t)(t0 + jb) * n_head + h0 + (rb & gmask)) * D + 2 * tig;
        if (SPLIT) {
            if (pa >= 0) fa_store_part<D>(part, at0 / D, n_split, sp, tig, oacc, 0, ma, la);
            if (pb >= 0) fa_store_part<D>(part, at1 / D, n_split, sp, tig, oacc, 2, mb, lb);
        } else {
            if (pa >= 0) fa_store_row<D>(out, at0, oacc, 0, la);
            if (pb >= 0) fa_store_row<D>(out, at1, oacc, 2, lb);
        }
        __syncthreads(); /* every warpgroup past its last tile before the next group's rows and copies */
    }
#endif
}

/* The warpgroup-MMA kernel's key-range split: one block an SM (256 threads at up to 255 registers), so
 * a batch whose blocks leave SMs idle against a long prefix (FA_SPLIT_LONG times the batch) splits each
 * group's key tiles for about FW_SPLIT_BLOCKS blocks an SM (at least FA_SPLIT_KEYS keys a split). */
#define FW_SPLIT_BLOCKS 2
int fw_plan_splits(int n, int n_head, int n_head_kv, int max_np, int n_sm) {
    const int gs = fa_gq_shift(n_head / n_head_kv);
    const int64_t b = (int64_t)((n + (FW_BM >> gs) - 1) / (FW_BM >> gs)) * (n_head >> gs);
    if ((int64_t)max_np < (int64_t)FA_SPLIT_LONG * n || b > n_sm) return 1;
    int64_t sp = ((int64_t)FW_SPLIT_BLOCKS * n_sm + b - 1) / b;
    if (sp > FA_SPLIT_MAX) sp = FA_SPLIT_MAX;
    if (sp > max_np / FA_SPLIT_KEYS) sp = max_np / FA_SPLIT_KEYS;
    return sp < 2 ? 1 : (int)sp;
}


/* The warpgroup-MMA kernel on a batch; n_split > 1 as fa_launch. */
template <int KT, int D, bool PIPE = true>
static void fw_launch(cuda_backend *cb, const float *q, const bk_kv_view *kv, int n, const int32_t *d_pos,
                      const int32_t *d_off, const int32_t *d_tabs, int n_head, int n_head_kv, float scale, float *out,
                      int n_split = 1, float *part = NULL) {
    const int group = n_head / n_head_kv, gs = fa_gq_shift(group), ntok = FW_BM >> gs;
    constexpr bool P2 = PIPE && fw2_tile<KT, D>::fits;
    constexpr size_t smem = P2 ? fw2_tile<KT, D>::smem : fw_tile<KT, D>::smem;
    if (n_split < 2 || !part) n_split = 1, part = NULL;
    auto kern = P2 ? (part ? fw2_prefill_kernel<KT, D, true> : fw2_prefill_kernel<KT, D, false>)
                     : (part ? fw_prefill_kernel<KT, D, true> : fw_prefill_kernel<KT, D, false>);
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

