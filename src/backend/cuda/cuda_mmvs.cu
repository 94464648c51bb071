/* cuda_mmvs.cu — one token's products on quantized weights (the decode step's matrix-vector
 * products at batch 1), the weight rows streamed into shared memory by Hopper's bulk-copy engine.
 *
 * Why: the warp-per-row-pair kernel of cuda_mmvq.cu holds its loads in registers, issued as 16-byte
 * pieces that each cover half of a 32-byte sector, and retires a whole block before the next one can
 * load: on the H200 it reads Q4_K at 30-55% of bandwidth (bench/RESULTS.md, session 4's lab). Here
 * one block per SM stays resident; each warp owns a ring of shared-memory stages, one weight row per
 * stage (a gate row and its up row for the fused SwiGLU), and its lane 0 asks the copy engine for
 * whole contiguous rows (cp.async.bulk, completion counted in bytes on an mbarrier per stage). The
 * bytes in flight (up to ~200 KB per SM) no longer cost registers or instructions, every copy is one
 * contiguous run of DRAM, and a warp refills a stage as soon as it has read it. The activations
 * (quantized as for cuda_mmvq: int8 groups of 32 with d and d * sum) stay in the lane's registers
 * for the whole kernel, since a lane meets the same columns in every row; the weight groups are the
 * same wgroup loaders and integer dots as cuda_mmvq's, reading shared memory instead of global.
 *
 * Rows are dealt to warps round-robin (warp w of W takes rows w, w + W, ...), so neighbouring warps
 * read neighbouring rows; the copies carry an L2 evict-first hint (weights are read once per step,
 * the KV cache and activations should keep the L2). Up to MMVS_MATS matrices of one type and width
 * (a layer's q, k, v) run as one launch over their concatenated rows. */
#include "backend/cuda/cuda_bulk.cuh"

#define MMVS_WARPS_MAX 16
#define MMVS_SMEM_MAX (200 * 1024) /* of the H200's 227 KB per block: room for the runtime's share */
#define MMVS_STAGES_MAX 8
#define MMVS_PAD 64 /* ld_a2 reads up to 8 bytes past a group: the last stage's row may not end the allocation */
#define MMVS_SEGS_MAX 8      /* warps sharing a row (mmvs_plan) */
#define MMVS_SEG_ROWS_MAX 64 /* rows per group of warps sharing rows: their partial sums' shared memory */



/* A row's segments (mmvs_plan): segs warps of a block share each of their rows, warp s taking the
 * units [s * ups, (s + 1) * ups), whole quant blocks. A stage holds cap bytes (a gate and an up
 * segment: 2 * cap): the segment's bytes rounded out to 16 (the copy engine's grain) on both ends,
 * so rows need not start on 16 bytes (Q6_K rows of 17,408 columns are 14,280 bytes). mine_cap bounds
 * the rows of a group of warps: their partial sums wait in shared memory for the block's last
 * barrier. One segment: a warp owns whole rows. */
typedef struct mmvs_seg {
    int segs, ups, mine_cap;
    uint32_t cap;
} mmvs_seg;


/* Lane 0 asks for the bytes [cs, cs + len) of row r (and of the up matrix's row r, cap bytes
 * further), from the 16-byte boundary below them to the one above, into a stage: the row's byte
 * cs then sits at the stage's byte (address & 15). The weights' allocations are padded past their
 * end (BK_CUDA_WEIGHT_PAD), so the rounding up never leaves them. */
template <bool GLU>
__device__ __forceinline__ void mmvs_issue(const mmvs_mats &mm, int64_t r, uint32_t row_bytes, uint32_t cs,
                                           uint32_t len, uint32_t cap, uint8_t *dst, uint64_t *bar, uint64_t policy) {
    const uintptr_t a = (uintptr_t)(mmvs_row_src(mm, r, row_bytes) + cs), a0 = a & ~(uintptr_t)15;
    const uint32_t cl = (uint32_t)(((a + len + 15) & ~(uintptr_t)15) - a0);
    mbar_expect_bytes(bar, GLU ? 2 * cl : cl);
    bulk_copy_g2s(dst, (const void *)a0, cl, bar, policy);
    if (GLU) bulk_copy_g2s(dst + cap, (const void *)(((uintptr_t)(mm.W2 + r * (int64_t)row_bytes + cs)) & ~(uintptr_t)15),
                           cl, bar, policy);
}

/* the segments' partial sums (a, and b for GLU) of a block's warps */
__host__ __device__ __forceinline__ size_t mmvs_part_bytes(int nw, const mmvs_seg &sg, bool glu) {
    return sg.segs > 1 ? ((size_t)nw * sg.mine_cap * 4 * (glu ? 2 : 1) + 127) & ~(size_t)127 : 0;
}

/* NI: units per lane (the activations a lane keeps in registers: NI * XW words); NW: warps. With
 * sg.segs > 1 the block's warps form NW / segs groups; warp s of a group reads segment s of the
 * group's rows (rows gg, gg + ng, ... of group gg of ng) and leaves its partial sums in shared
 * memory, which the block adds up after its last barrier (segment order: the same sums every run). */
template <int T, bool GLU, int NI, int NW>
__global__ void __launch_bounds__(NW * 32, 1)
mmvs_kernel(mmvs_mats mm, uint32_t row_bytes, int64_t n_in, int8_t *xq, float2 *xds, int accum, int stages,
            int pre, mmvs_seg sg) {
    BK_TRACE_SCOPE(); /* (a trace build only) */
    using U = qunit<T>;
    extern __shared__ __align__(128) uint8_t mmvs_smem[];
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const int S = sg.segs, ngb = NW / S, grp = warp / S, seg = warp % S;
    const uint32_t stage_bytes = GLU ? 2 * sg.cap : sg.cap;
    const size_t head = mmvs_bar_bytes(NW, stages), pb = mmvs_part_bytes(NW, sg, GLU);
    uint64_t *bar = (uint64_t *)mmvs_smem + warp * stages;
    float *part = (float *)(mmvs_smem + head); /* [warp][row of the group] (then b's) */
    uint8_t *ring = mmvs_smem + head + pb + (size_t)warp * stages * stage_bytes;
    const int64_t n_rows = mm.count > 2 ? mm.rend[2] : mm.count > 1 ? mm.rend[1] : mm.rend[0];
    const int64_t n_units = n_in / U::W;
    const int64_t gg = (int64_t)blockIdx.x * ngb + grp, ng = (int64_t)gridDim.x * ngb;
    const int64_t mine = grp < ngb && gg < n_rows ? (n_rows - 1 - gg) / ng + 1 : 0;
    const int64_t su0 = (int64_t)seg * sg.ups, su1 = su0 + sg.ups < n_units ? su0 + sg.ups : n_units;
    const uint32_t ub = row_bytes / (uint32_t)n_units;
    const uint32_t cs = (uint32_t)(su0 * ub), len = (uint32_t)((su1 - su0) * ub); /* the segment's bytes */
    const uint64_t policy = bulk_evict_first();
    /* The weights do not depend on the kernel before: their copies start before pdl_wait, the first
     * pre stages of each warp's ring there (mmvs_pre_stages), the others once its activations' loads
     * are out, so that these do not queue behind a whole ring of copies. */
    const int64_t n_fill = mine < stages ? mine : stages, n_pre = pre < n_fill ? pre : n_fill;
    if (lane == 0)
        ring_start(bar, stages, n_pre, [&](int64_t i) {
            mmvs_issue<GLU>(mm, gg + i * ng, row_bytes, cs, len, sg.cap, ring + (size_t)i * stage_bytes, bar + i,
                            policy);
        });
    __syncwarp();
    pdl_wait();
    int xw[NI][U::XW];
    float2 xd[NI][U::G];
#pragma unroll
    for (int k = 0; k < NI; k++)
        if (su0 + lane + 32 * k < su1) qunit_load_x<T, false>(xq, xds, su0 + lane + 32 * k, xw[k], xd[k]);
    if (lane == 0)
        for (int64_t i = n_pre; i < n_fill; i++)
            mmvs_issue<GLU>(mm, gg + i * ng, row_bytes, cs, len, sg.cap, ring + (size_t)i * stage_bytes, bar + i,
                            policy);
    __syncwarp();
    int s = 0;
    uint32_t parity = 0;
    for (int64_t i = 0; i < mine; i++) {
        mbar_wait(bar + s, parity);
        /* the stage holds the row's byte cs at (its address & 15): unit u's bytes sit at row + u * ub
         * (W and W2 start on 16 bytes, so the up row's offset is the same) */
        const uint32_t lead = (uint32_t)((uintptr_t)(mmvs_row_src(mm, gg + i * ng, row_bytes) + cs) & 15);
        const uint8_t *row = ring + (size_t)s * stage_bytes + lead - cs;
        float a = 0.0f, b = 0.0f;
#pragma unroll
        for (int k = 0; k < NI; k++) {
            int64_t u = su0 + lane + 32 * k;
            if (u < su1) {
                a += qunit_dot<T, true>(row, u, xw[k], xd[k]);
                if (GLU) b += qunit_dot<T, true>(row + sg.cap, u, xw[k], xd[k]);
            }
        }
        __syncwarp(); /* every lane has read the stage: it may be refilled */
        if (lane == 0 && i + stages < mine)
            mmvs_issue<GLU>(mm, gg + (i + stages) * ng, row_bytes, cs, len, sg.cap, ring + (size_t)s * stage_bytes,
                            bar + s, policy);
        if (++s == stages) {
            s = 0;
            parity ^= 1u;
        }
#pragma unroll
        for (int o = 16; o > 0; o >>= 1) {
            a += __shfl_xor_sync(0xffffffffu, a, o);
            if (GLU) b += __shfl_xor_sync(0xffffffffu, b, o);
        }
        if (lane == 0) {
            if (S == 1) {
                mmvs_store<GLU>(mm, gg + i * ng, a, b, accum);
            } else {
                part[warp * sg.mine_cap + i] = a;
                if (GLU) part[(NW + warp) * sg.mine_cap + i] = b;
            }
        }
    }
    if (S > 1) {
        __syncthreads();
        for (int t = threadIdx.x; t < ngb * sg.mine_cap; t += NW * 32) {
            const int g = t / sg.mine_cap, i = t % sg.mine_cap;
            const int64_t r = (int64_t)blockIdx.x * ngb + g + (int64_t)i * ng;
            if (r >= n_rows) continue;
            float a = 0.0f, b = 0.0f;
            for (int w = g * S; w < g * S + S; w++) {
                a += part[w * sg.mine_cap + i];
                if (GLU) b += part[(NW + w) * sg.mine_cap + i];
            }
            mmvs_store<GLU>(mm, r, a, b, accum);
        }
    }
}

/* The NI instances per type: as many activation words per lane as 12288 columns of Q4_K need (96). */
template <int T> static constexpr bool mmvs_ni_ok(int ni) { return ni * qunit<T>::XW <= 96; }
/* Sixteen warps per SM where a lane's registers fit 128 (the 16-warp launch bound): the integer dots
 * of 8 warps leave the schedulers idle on their shared-memory and dependency latencies (8 warps
 * only: qwen3-8b tg128 345.1 against 379.1 on the H200). The IQ4 codebook lookups hold more
 * registers: their 16-warp units stop at 32 activation words. */
template <int T> static constexpr bool mmvs_w16_ok(int ni) {
    return T == QT_Q6_K ? ni == 1 : ni * qunit<T>::XW <= (T == QT_IQ4_XS || T == QT_IQ4_NL ? 32 : 48);
}

template <int T, bool GLU, int NI, int NW>
static bool mmvs_go_w(cuda_backend *cb, const mmvs_mats &mm, uint32_t row_bytes, int64_t n_in, int accum,
                      int64_t n_rows, mmvs_seg sg) {
    static_assert(NW >= MMVS_SEGS_MAX, "a block holds at least one group of warps sharing rows");
    const uint32_t stage_bytes = GLU ? 2 * sg.cap : sg.cap;
    int64_t blocks = (n_rows * sg.segs + NW - 1) / NW;
    if (blocks > cb->n_sm) blocks = cb->n_sm;
    const int64_t groups = blocks * (NW / sg.segs), per_warp = (n_rows + groups - 1) / groups;
    if (sg.segs > 1) {
        if (per_warp > MMVS_SEG_ROWS_MAX) return false;
        sg.mine_cap = (int)per_warp;
    }
    const size_t pb = mmvs_part_bytes(NW, sg, GLU);
    if (128 + MMVS_PAD + pb >= MMVS_SMEM_MAX) return false;
    int stages = (int)((MMVS_SMEM_MAX - 128 - MMVS_PAD - pb) / (NW * ((size_t)stage_bytes + 8)));
    if (stages < 2) return false; /* rows too wide for two stages per warp */
    if (stages > MMVS_STAGES_MAX) stages = MMVS_STAGES_MAX;
    if (stages > per_warp) stages = (int)per_warp; /* no more smem than rows: the block before may stay beside it */
    if (stages < 1) stages = 1;
    size_t smem = mmvs_bar_bytes(NW, stages) + pb + (size_t)NW * stages * stage_bytes + MMVS_PAD;
    static int attr_set[64]; /* per device: the opt-in to more than 48 KB of dynamic shared memory */
    int dev = cb->device & 63;
    if (!attr_set[dev]) {
        if (cudaFuncSetAttribute(mmvs_kernel<T, GLU, NI, NW>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                 MMVS_SMEM_MAX) != cudaSuccess) {
            (void)cudaGetLastError();
            return false;
        }
        attr_set[dev] = 1;
    }
    pdl_launch(cb, mmvs_kernel<T, GLU, NI, NW>, dim3((unsigned)blocks), dim3(NW * 32), smem, mm, row_bytes,
               n_in, cb->xq, cb->xds, accum, stages, mmvs_pre_stages(cb, n_in, stages), sg);
    CU_COUNT(cb, CU_PATH_MMVS);
    return true;
}

template <int T, bool GLU, int NI>
static bool mmvs_go(cuda_backend *cb, const mmvs_mats &mm, uint32_t row_bytes, int64_t n_in, int accum,
                    int64_t n_rows, const mmvs_seg &sg) {
    if constexpr (!mmvs_ni_ok<T>(NI)) {
        return false;
    } else {
        if constexpr (mmvs_w16_ok<T>(NI))
            if (mmvs_go_w<T, GLU, NI, 16>(cb, mm, row_bytes, n_in, accum, n_rows, sg)) return true;
        return mmvs_go_w<T, GLU, NI, 8>(cb, mm, row_bytes, n_in, accum, n_rows, sg);
    }
}

/* A stage's bytes for a run of len bytes that may start anywhere: rounded out to 16 on both ends. */
static inline uint32_t mmvs_cap(uint32_t len) { return (len + 30u + 15u) & ~15u; }

/* How many warps share a row. By default (cb->mmvs_seg_bytes < 0) whole rows, unless their
 * activations are too many registers for 16 warps a block (mmvs_w16_ok): then the fewest segments of
 * whole quant blocks that allow 16 warps, when the rows are few enough (every group's partial sums
 * fit shared memory: not the LM head). Q6_K keeps whole rows where two stages of 8 warps fit them.
 * H200 lab (dev/kernels/mmvs_lab.cu, us, whole rows -> segments): Q4_K 4096 x 12288 12.5 -> 11.4 (2),
 * Q4_K 5120 x 17408 29.2 -> 16.5 (3), Q6_K 5120 x 17408 41.7 (cuda_mmvq's: 14,280-byte rows do not
 * fit two stages) -> 32.7 (5), Q8_0 4096 x 12288 16.2 -> 15.4; but Q6_K 4096 x 12288 19.7 -> 20.4
 * (3), and segments sized by bytes alone lost on qwen3-8b (3 KB: tg128 363.7 against 372.6).
 * mmvs_seg_bytes > 0 (BRISK_CUDA_MMVS_SEG=N, the lab and the tests): rows wider than N bytes cut
 * into segments of about N; 0: whole rows always. */
template <int T> static mmvs_seg mmvs_plan(const cuda_backend *cb, uint32_t row_bytes, int64_t n_in, int64_t n_rows) {
    const int64_t n_units = n_in / qunit<T>::W;
    mmvs_seg sg = {1, (int)n_units, 0, mmvs_cap(row_bytes)};
    const int upb = qunit<T>::UPB;
    const int64_t n_blk = n_units / upb;
    int segs = 0, ups = 0;
    if (cb->mmvs_seg_bytes > 0) {
        if (row_bytes <= (uint32_t)cb->mmvs_seg_bytes) return sg;
        int want = (int)((row_bytes + cb->mmvs_seg_bytes - 1) / cb->mmvs_seg_bytes);
        if (want > MMVS_SEGS_MAX) want = MMVS_SEGS_MAX;
        ups = (int)((n_blk + want - 1) / want * upb);
        segs = (int)((n_units + ups - 1) / ups);
    } else if (cb->mmvs_seg_bytes < 0) {
        if (mmvs_w16_ok<T>((int)((n_units + 31) / 32))) return sg;
        if (T == QT_Q6_K && MMVS_SMEM_MAX >= 128 + MMVS_PAD + 8 * 2 * ((size_t)mmvs_cap(row_bytes) + 8)) return sg;
        for (int want = 2; want <= MMVS_SEGS_MAX && !segs; want++) {
            int u = (int)((n_blk + want - 1) / want * upb);
            if (mmvs_w16_ok<T>((u + 31) / 32)) {
                ups = u;
                segs = (int)((n_units + u - 1) / u);
            }
        }
    }
    if (segs < 2 || (n_rows + (int64_t)cb->n_sm - 1) / cb->n_sm * segs > 8 * MMVS_SEG_ROWS_MAX) return sg;
    sg.segs = segs;
    sg.ups = ups;
    sg.cap = mmvs_cap((uint32_t)(ups * (row_bytes / (uint32_t)n_units)));
    return sg;
}

template <int T, bool GLU>
static bool mmvs_type(cuda_backend *cb, const mmvs_mats &mm, uint32_t row_bytes, int64_t n_in, int accum,
                      int64_t n_rows) {
    if (n_in % qunit<T>::W) return false;
    const mmvs_seg sg = mmvs_plan<T>(cb, row_bytes, n_in, n_rows);
    int64_t ni = (sg.ups + 31) / 32;
#define MMVS_NI(N) \
    if (ni <= N) return mmvs_go<T, GLU, N>(cb, mm, row_bytes, n_in, accum, n_rows, sg);
    MMVS_NI(1) MMVS_NI(2) MMVS_NI(3) MMVS_NI(4) MMVS_NI(6) MMVS_NI(8) MMVS_NI(12)
#undef MMVS_NI
    return false;
}

/* One token: y[m] (+)= x W[m]^T (+ bias[m]) for count matrices of one type, row size and width, or
 * with GLU (count 1, W2 the up matrix) y[0] = silu(x W^T) * (x W2^T). x is already quantized
 * (cuda_mmvq_prepare). False when this kernel does not take the shape (the caller runs cuda_mmvq's).
 * The H200 lab (dev/kernels/mmvs_lab.cu), whose launches run back to back without programmatic
 * launches, has cuda_mmvq's kernel ahead on matrices of 1,024-12,288 rows and this one
 * on the gate/up pairs and the LM head; in the decode step (graphs, programmatic launches) this one
 * everywhere was faster (qwen3-8b tg128 375.0; 365.4 / 355.6 / 316.8 with products of less than
 * 4 / 16 / 64 MB left to cuda_mmvq, 311.5 without this kernel; with the early trigger of
 * cuda_pdl.cuh still 419.2 against 408.8 / 403.3 / 398.5 with less than 6 / 12 / 20 MB left to it;
 * the floor's switch, BRISK_CUDA_MMVS_MIN_MB, is gone: docs/experiments.md). Rows narrower than
 * 2,048 columns stay with cuda_mmvq: there a row is a few hundred cycles of work, the per-row
 * wait, refill and reduction dominate and a Q6_K row leaves half the lanes idle. 2,048-wide rows were slower here under the late trigger (qwen3.6-35b-a3b
 * tg128 284.8 against 299.7, session 9); with the early one qwen3-30b-a3b runs 414.6 against 400.0
 * and qwen3.6-35b-a3b 405.1 against 403.8 (session 14, lease H), so the bound is 2,048. */
bool cuda_mmvs(cuda_backend *cb, uint32_t type, bool glu, const mmvs_mats &mm, size_t row_bytes, int64_t n_in,
               int accum) {
    if (cb->mmvs_off || row_bytes % 2 || row_bytes > UINT32_MAX / 4 || (cb->mmvs_wide_off && n_in > 8192))
        return false;
    int64_t n_rows = mm.rend[mm.count - 1];
    if (n_in < cb->mmvs_min_in) return false; /* see above */
    for (int m = 0; m < mm.count; m++)
        if ((uintptr_t)mm.W[m] % 16) return false;
    if (glu && (mm.count != 1 || (uintptr_t)mm.W2 % 16)) return false;
    uint32_t rb = (uint32_t)row_bytes;
#define MMVS_T(TT) \
    case TT: return glu ? mmvs_type<TT, true>(cb, mm, rb, n_in, accum, n_rows) : mmvs_type<TT, false>(cb, mm, rb, n_in, accum, n_rows);
    switch (type) {
        MMVS_T(QT_Q4_K)
        MMVS_T(QT_Q6_K)
        MMVS_T(QT_Q8_0)
        MMVS_T(QT_Q4_0)
        MMVS_T(QT_Q5_K)
        MMVS_T(QT_IQ4_XS)
        MMVS_T(QT_IQ4_NL)
    default: return false;
    }
#undef MMVS_T
}
