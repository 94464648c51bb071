/* cuda_attn_decode.cu — causal GQA attention over the paged cache for
 * decode-sized batches (a few query tokens, each its own sequence or a short
 * run of one), flash-decoding style.
 *
 * Why a second kernel: cuda_attention.cu's tile kernel gives each thread one
 * K row (rows 2 KB apart in the cache: uncoalesced, 16 dependent loads per
 * thread) and walks V one row per iteration; at depth 8K it read the KV at a
 * few percent of bandwidth (bench/RESULTS.md, session 3). Here the unit is a
 * warp and a row of head_dim values is read by head_dim/8 lanes at 8 values
 * each (one 16-byte load for f16), so a warp instruction covers whole rows;
 * each lane keeps NR K rows and NR V rows in flight per step (and the next
 * step's while it computes), and the block count is split over positions
 * until the GPU has thousands of warps.
 *
 * Work split: one block of DEC_WARPS warps per (G query heads sharing a KV
 * head, token, split). The split's positions are dealt to the warps in steps
 * of NR * (32 / lanes-per-row) rows; each warp keeps its own online softmax
 * (max, sum, output accumulator: registers), and at the end the warps merge
 * through shared memory. The split's length is computed in the kernel from
 * the token's own position, so a graph captured for a length bucket
 * (cuda_graph.cu) spreads every length in it over its splits, each of at
 * least BRISK_CUDA_ATTN_MINCHUNK positions (128): a short context is one
 * split, without partials to merge.
 *
 * Scores are kept in base 2 (q is pre-scaled by scale * log2 e, exp2f), and so
 * are the partials' maxima: attn_dec_combine_kernel reads them the same way. */
#include <math.h>

#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/cuda_pdl.cuh"
#include "backend/cuda/cuda_attn_decode.cuh"

#define DEC_MAX_HD 256
#define DEC_MAX_SPLIT 256
#define DEC_MIN_ROWS 64 /* positions per split at the longest length the launch is shaped for */

/* 8 consecutive cache elements as loaded: f16 in a, f32 in a and b, a quantized type's bytes, scale
 * and shift in a (kvq_load8). Split from the conversion so a lane issues all its loads before it waits. */
typedef struct kv8 {
    uint4 a, b;
} kv8;

template <int KT> __device__ __forceinline__ kv8 kv_load8(const void *base, int64_t e) {
    kv8 r;
    if (KT == KT_F16) {
        r.a = *(const uint4 *)((const __half *)base + e);
    } else if (KT == KT_F32) {
        const uint4 *p = (const uint4 *)((const float *)base + e);
        r.a = p[0];
        r.b = p[1];
    } else {
        r.a = kvq_load8<KT>(base, e);
    }
    return r;
}

template <int KT> __device__ __forceinline__ void kv_cvt8(const kv8 &r, float v[8]) {
    if (KT == KT_F16) {
        uint32_t w[4] = {r.a.x, r.a.y, r.a.z, r.a.w};
#pragma unroll
        for (int i = 0; i < 4; i++) {
            v[2 * i] = bk_h2f((uint16_t)(w[i] & 0xFFFF));
            v[2 * i + 1] = bk_h2f((uint16_t)(w[i] >> 16));
        }
    } else if (KT == KT_F32) {
        uint32_t w[8] = {r.a.x, r.a.y, r.a.z, r.a.w, r.b.x, r.b.y, r.b.z, r.b.w};
#pragma unroll
        for (int i = 0; i < 8; i++) v[i] = __uint_as_float(w[i]);
    } else {
        kvq_cvt8<KT>(r.a, v);
    }
}

/* Merges the first n_split of the stride partials of one (head h, token t) into out, with the
 * DEC_WARPS * 32 threads of a block: the split weights once into shared memory (w_s), then one
 * thread per dimension (coalesced reads of the partials). Maxima are base 2 (see the header). The
 * partials are read through L2 (__ldcg): in the fused form other blocks of the same grid wrote them. */
__device__ __forceinline__ void dec_combine_head(const float *part, int stride, int n_split, int n_head, int hd, int h,
                                                 int t, float *out, float *w_s, float *red, int8_t *xq, float2 *xds,
                                                 const att_gate &gate) {
    const int nt = DEC_WARPS * 32, tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    const float *pp = part + ((size_t)t * n_head + h) * stride * (hd + 2);
    float mx = -INFINITY;
    for (int s = tid; s < n_split; s += nt) mx = fmaxf(mx, __ldcg(pp + (size_t)s * (hd + 2)));
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0) red[warp] = mx;
    __syncthreads();
    float M = red[0]; /* finite: split 0 holds position 0 */
#pragma unroll
    for (int w = 1; w < DEC_WARPS; w++) M = fmaxf(M, red[w]);
    __syncthreads();
    float ls = 0.0f;
    for (int s = tid; s < n_split; s += nt) {
        float w = exp2f(__ldcg(pp + (size_t)s * (hd + 2)) - M);
        w_s[s] = w;
        ls += w * __ldcg(pp + (size_t)s * (hd + 2) + 1);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) ls += __shfl_xor_sync(0xffffffffu, ls, o);
    if (lane == 0) red[warp] = ls;
    __syncthreads();
    float L = 0.0f;
#pragma unroll
    for (int w = 0; w < DEC_WARPS; w++) L += red[w];
    float inv = 1.0f / L;
    for (int d = tid; d < hd; d += nt) {
        float o = 0.0f;
        for (int s = 0; s < n_split; s++) o += w_s[s] * __ldcg(pp + (size_t)s * (hd + 2) + 2 + d);
        size_t oi = ((size_t)t * n_head + h) * hd + d;
        const float y = att_gate_apply(gate, o * inv, t, n_head, h, d);
        out[oi] = y;
        if (xq) q8_1_store_lane(y, (int64_t)oi, lane, xq, xds); /* hd % 32 == 0: a warp holds one group */
    }
    __syncthreads(); /* w_s and red are reused by the next head */
}

/* One block per (G query heads from h0 = blockIdx.x * G, token, split). lpr = head_dim / 8 lanes per row
 * (4, 8, 16 or 32). Writes out (no split) or the split's (max, sum, unnormalised output) to part. */
/* With RP (cuda_attention_rope), q's heads come from the product's rows (rope.qs) and are normalised
 * and rotated here (qk_head_norm_rope, the angles computed before the wait from the step's
 * positions), and the step's own K/V row, position pos[t], is not read from the cache: a block of the
 * split that holds it normalises and rotates k itself and stores k and v in the cache's format
 * into shared memory (kv_store: the bytes the cache would hold), and its rows' loads read them there.
 * The first head group of each KV head also writes them to the cache, for the steps after. */
template <int KT, int G, int NR, bool RP>
__global__ void __launch_bounds__(DEC_WARPS * 32)
attn_dec_kernel(const float *q, const void *kc, const void *vc, int bs, const int32_t *pos, const int32_t *tab_off,
                const int32_t *tabs, int n_head, int n_head_kv, int group, int hd, float scale_log2, float *out,
                float *part, int *cnt, int8_t *xq, float2 *xds, int flags, att_gate gate, dec_rope rope) {
    BK_TRACE_SCOPE(); /* (a trace build only) */
    const bool adapt = flags & 1, merge_slow = flags & 2; /* BRISK_CUDA_ATTN_ADAPT=0, BRISK_CUDA_ATTN_MERGE=0 */
    const int min_chunk = (flags >> 8) * 32;              /* BRISK_CUDA_ATTN_MINCHUNK (with adapt) */
    __shared__ float r_cs[RP ? DEC_MAX_HD / 2 : 1], r_sn[RP ? DEC_MAX_HD / 2 : 1], r_k[RP ? DEC_MAX_HD : 1];
    __shared__ __align__(16) uint8_t r_kc[RP ? DEC_MAX_HD * 4 : 16], r_vc[RP ? DEC_MAX_HD * 4 : 16];
    if constexpr (RP) /* the angles need only the step's positions (copied before any kernel) */
        for (int i = threadIdx.x; i < rope.a.n_rot / 2; i += DEC_WARPS * 32)
            rope_cs(i, pos[blockIdx.y], rope.ff, rope.a, &r_cs[i], &r_sn[i]);
    __shared__ __align__(16) float q_s[G][DEC_MAX_HD];
    __shared__ float o_s[DEC_WARPS][G][DEC_MAX_HD], m_s[DEC_WARPS][G], l_s[DEC_WARPS][G];
    const unsigned full = 0xffffffffu;
    int h0 = blockIdx.x * G, kvh = h0 / group, t = blockIdx.y, sp = blockIdx.z, n_split = gridDim.z;
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    /* whole blocks a row (attention_run checks): a lane's 8 values sit at the same place of their
     * block in every row, and q4_0's nibble shift stays one register, not one a row in flight */
    if (kt_block_bytes(KT)) __builtin_assume(hd % 32 == 0);
    int lpr = hd / 8, rpw = 32 / lpr, sub = lane % lpr, rg = lane / lpr;
    int rs = NR * rpw; /* rows per warp step (<= 32: one lane computes each row's index) */
    const int stride = DEC_WARPS * rs;
    int np = 0, chunk = 0, p_begin = 0, p_end = 0, n_use = 0, p_new = -1, p0 = 0;
    const int32_t *table = NULL;
    /* lane i < rs holds the row index of position p0 + i (a past-the-end position reads p0's row, masked) */
    int my_row = 0;
    /* (RP: the step's own position's row is -1, read from shared memory) */
    auto row_of = [&](int p) { return RP && p == p_new ? -1 : dec_row(table, bs, p, n_head_kv, kvh); };
    /* a warp step's rows and their K/V loads (the step's own row, -1, is read from shared memory when
     * used); then the next step's indices, whose table loads overlap this step */
    int rows[NR];
    kv8 kr[NR], vr[NR];
    auto fetch = [&](int p) {
#pragma unroll
        for (int i = 0; i < NR; i++) rows[i] = __shfl_sync(full, my_row, i * rpw + rg);
        const int pn = p + stride;
        if (pn < p_end && lane < rs) my_row = row_of(pn + lane < p_end ? pn + lane : pn);
#pragma unroll
        for (int i = 0; i < NR; i++) {
            if (RP && rows[i] < 0) continue;
            const int64_t e = (int64_t)rows[i] * hd + 8 * sub;
            kr[i] = kv_load8<KT>(kc, e);
            vr[i] = kv_load8<KT>(vc, e);
        }
    };
    /* this token's split: multiples of 32 positions, sized from its own length. With the fused merge
     * (cnt), only the splits that hold positions take part: a launch shaped for a graph bucket's
     * longest length splits a short context into a few of its n_split parts, and one split writes
     * out directly (no partials, no merge). The merge's serial pass over every split's partials cost
     * more than the attention itself at short depth (qwen3-30b-a3b, 5 positions of 32 heads: 12.3 us
     * a layer under ncu). Returns false for a split without positions. */
    auto begin = [&]() {
        np = pos[t] + 1;
        chunk = ((np + n_split - 1) / n_split + 31) / 32 * 32;
        if (cnt && adapt && chunk < min_chunk) chunk = min_chunk;
        p_begin = sp * chunk;
        p_end = min(np, p_begin + chunk);
        n_use = cnt && adapt ? (np + chunk - 1) / chunk : n_split;
        if (sp >= n_use) return false;
        table = tabs + tab_off[t];
        /* RP: the step's own row, in the one split that holds it (not always the last: without the
         * fused merge a short context leaves the last splits empty) */
        p_new = RP && np - 1 >= p_begin && np - 1 < p_end ? np - 1 : -1;
        p0 = p_begin + warp * rs;
        if (p0 < p_end && lane < rs) my_row = row_of(p0 + lane < p_end ? p0 + lane : p0);
        if (p0 < p_end) fetch(p0);
        return true;
    };
    /* RP (inside a decode step, one token a sequence): the positions, the page tables and the cache
     * rows of earlier steps were all written before the step's first kernel, and no kernel before this
     * one in the step writes the cache (this launch writes the step's row, which it reads from shared
     * memory), so the split's first rows load before the wait, beside the product before it; only q
     * waits. Without RP every read follows the wait. */
    if (RP && !begin()) return;
    pdl_wait();
    if (!RP && !begin()) return;
    if (n_use == 1) part = NULL;

    /* the queries, pre-scaled, in shared memory: registers hold the accumulators and the loads */
    if constexpr (RP) {
        const int half = rope.a.n_rot / 2;
        __syncthreads(); /* the angles */
        for (int g = warp; g < G; g += DEC_WARPS) {
            qk_head_norm_rope(rope.qs + ((size_t)t * n_head + h0 + g) * rope.qp, rope.qw, rope.eps, hd, half, r_cs,
                              r_sn, rope.a, q_s[g]);
            for (int i = lane; i < hd; i += 32) q_s[g][i] *= scale_log2;
        }
        if (p_new >= 0 && warp == DEC_WARPS - 1) /* qk_norm_rope_kernel's k and v, stored as the cache holds them; */
            dec_step_row<KT>(rope, t, n_head_kv, kvh, hd, half, r_cs, r_sn, r_k, r_kc, r_vc, (void *)kc, (void *)vc,
                             h0 % group == 0); /* written by the first head group of the KV head */
    } else {
        for (int i = tid; i < G * hd; i += DEC_WARPS * 32)
            q_s[i / hd][i % hd] = q[((size_t)t * n_head + h0 + i / hd) * hd + i % hd] * scale_log2;
    }
    float acc[G][8], m[G], l[G];
#pragma unroll
    for (int g = 0; g < G; g++) {
#pragma unroll
        for (int e = 0; e < 8; e++) acc[g][e] = 0.0f;
        m[g] = -INFINITY;
        l[g] = 0.0f;
    }
    __syncthreads();

    for (; p0 < p_end; p0 += stride) {
        /* this step's rows (fetched the step before, or before the wait), the next step's in flight */
        kv8 kc8[NR], vc8[NR];
#pragma unroll
        for (int i = 0; i < NR; i++) {
            if (RP && rows[i] < 0) {
                kc8[i] = kv_load8<KT>(r_kc, 8 * sub);
                vc8[i] = kv_load8<KT>(r_vc, 8 * sub);
            } else {
                kc8[i] = kr[i];
                vc8[i] = vr[i];
            }
        }
        if (p0 + stride < p_end) fetch(p0 + stride);
        float s[NR][G];
#pragma unroll
        for (int g = 0; g < G; g++) {
            const float4 *qp = (const float4 *)&q_s[g][8 * sub];
            float4 qa = qp[0], qb = qp[1];
#pragma unroll
            for (int i = 0; i < NR; i++) {
                float k[8];
                kv_cvt8<KT>(kc8[i], k);
                s[i][g] = qa.x * k[0] + qa.y * k[1] + qa.z * k[2] + qa.w * k[3] + qb.x * k[4] + qb.y * k[5] +
                          qb.z * k[6] + qb.w * k[7];
            }
        }
        for (int o = lpr / 2; o > 0; o >>= 1)
#pragma unroll
            for (int i = 0; i < NR; i++)
#pragma unroll
                for (int g = 0; g < G; g++) s[i][g] += __shfl_xor_sync(full, s[i][g], o);
#pragma unroll
        for (int i = 0; i < NR; i++)
            if (p0 + i * rpw + rg >= p_end)
#pragma unroll
                for (int g = 0; g < G; g++) s[i][g] = -INFINITY;
        /* online softmax: the step's max over all row groups (row p0 is valid: finite) */
#pragma unroll
        for (int g = 0; g < G; g++) {
            float mx = s[0][g];
#pragma unroll
            for (int i = 1; i < NR; i++) mx = fmaxf(mx, s[i][g]);
            for (int o = lpr; o < 32; o <<= 1) mx = fmaxf(mx, __shfl_xor_sync(full, mx, o));
            float m_new = fmaxf(m[g], mx), f = exp2f(m[g] - m_new);
            m[g] = m_new;
            l[g] *= f;
#pragma unroll
            for (int e = 0; e < 8; e++) acc[g][e] *= f;
#pragma unroll
            for (int i = 0; i < NR; i++) {
                s[i][g] = exp2f(s[i][g] - m_new);
                l[g] += s[i][g];
            }
        }
#pragma unroll
        for (int i = 0; i < NR; i++) {
            float v[8];
            kv_cvt8<KT>(vc8[i], v);
#pragma unroll
            for (int g = 0; g < G; g++)
#pragma unroll
                for (int e = 0; e < 8; e++) acc[g][e] += s[i][g] * v[e];
        }
    }
    /* sums over the warp's row groups (lanes with the same sub hold the same dimensions) */
    for (int o = lpr; o < 32; o <<= 1)
#pragma unroll
        for (int g = 0; g < G; g++) {
            l[g] += __shfl_xor_sync(full, l[g], o);
#pragma unroll
            for (int e = 0; e < 8; e++) acc[g][e] += __shfl_xor_sync(full, acc[g][e], o);
        }
    if (rg == 0)
#pragma unroll
        for (int g = 0; g < G; g++)
#pragma unroll
            for (int e = 0; e < 8; e++) o_s[warp][g][8 * sub + e] = acc[g][e];
    if (lane == 0)
#pragma unroll
        for (int g = 0; g < G; g++) {
            m_s[warp][g] = m[g];
            l_s[warp][g] = l[g];
        }
    __syncthreads();
    /* merge the warps; a warp (or the whole split) without positions has max -inf and weighs 0 */
    for (int i = tid; i < G * hd; i += DEC_WARPS * 32) {
        int g = i / hd, d = i % hd, h = h0 + g;
        float M = -INFINITY;
#pragma unroll
        for (int w = 0; w < DEC_WARPS; w++) M = fmaxf(M, m_s[w][g]);
        float o = 0.0f, L = 0.0f;
        if (M != -INFINITY)
#pragma unroll
            for (int w = 0; w < DEC_WARPS; w++) {
                float f = exp2f(m_s[w][g] - M);
                o += o_s[w][g][d] * f;
                L += l_s[w][g] * f;
            }
        if (!part) {
            size_t oi = ((size_t)t * n_head + h) * hd + d;
            const float y = att_gate_apply(gate, o / L, t, n_head, h, d);
            out[oi] = y;
            /* a warp's 32 values are one group of 32 (hd % 32 == 0, the block a multiple of 32) */
            if (xq) q8_1_store_lane(y, (int64_t)oi, tid % 32, xq, xds);
        } else {
            float *pp = part + (((size_t)t * n_head + h) * n_split + sp) * (hd + 2);
            if (d == 0) {
                pp[0] = M;
                pp[1] = L;
            }
            pp[2 + d] = o;
        }
    }
    /* With cnt (one counter per (token, head group), zero between launches), the split that
     * finishes last merges the partials: no combine kernel. Its writes are fenced before the
     * count, as in the CUDA programming guide's last-block reduction. */
    if (part && cnt) {
        __shared__ float cw_s[DEC_MAX_SPLIT], cred[DEC_WARPS];
        if (!dec_last_block(cnt, t, blockIdx.x, gridDim.x, n_use)) return;
        if (n_use <= DEC_FAST_MERGE && !merge_slow)
            dec_combine_group(part, n_split, n_use, n_head, hd, h0, G, t, out, xq, xds, gate);
        else
            for (int g = 0; g < G; g++)
                dec_combine_head(part, n_split, n_use, n_head, hd, h0 + g, t, out, cw_s, cred, xq, xds, gate);
        dec_last_done(cnt, t, blockIdx.x, gridDim.x);
    }
}

/* Merges the splits of one (head, token) (BRISK_CUDA_ATTN_FUSE=0, or more (token, head group) pairs than
 * counters): one block per pair, as dec_combine_head. */
__global__ void __launch_bounds__(DEC_WARPS * 32)
attn_dec_combine_kernel(const float *part, int n_split, int n_head, int hd, float *out, int8_t *xq, float2 *xds,
                        att_gate gate) {
    BK_TRACE_SCOPE();
    pdl_wait();
    __shared__ float w_s[DEC_MAX_SPLIT], red[DEC_WARPS];
    dec_combine_head(part, n_split, n_split, n_head, hd, blockIdx.x, blockIdx.y, out, w_s, red, xq, xds, gate);
}

bool cuda_attn_decode_supported(int head_dim) {
    return head_dim == 32 || head_dim == 64 || head_dim == 128 || head_dim == 256;
}

/* Launches the decode kernels (the KV write is the caller's). max_np: the longest length the launch
 * must serve (the graph bucket inside a step); the split count depends on it and on n only.
 * The output is also quantized for the integer-dot product that reads it next (the attention
 * output projection: one quantize launch less per layer) when it fits the activation buffer:
 * returns true then, and the caller tags out as quantized (after its CU_LAUNCHED). */
bool cuda_attn_decode(cuda_backend *cb, const float *q, const bk_kv_view *kv, int n, int max_np, const int32_t *d_pos,
                      const int32_t *d_off, const int32_t *d_tabs, int n_head, int n_head_kv, int hd, float scale,
                      att_gate gate, const dec_rope &rope, float *out) {
    if (cb->attn_mma_min > 0 && max_np >= cb->attn_mma_min && !cb->attn_gqa_off &&
        cuda_attn_mma_supported(cb, kv->kv_type, hd, n_head, n_head_kv))
        return cuda_attn_mma(cb, q, kv, n, max_np, d_pos, d_off, d_tabs, n_head, n_head_kv, hd, scale, gate, rope, out);
    int group = n_head / n_head_kv, G = group;
    if ((G != 2 && G != 4 && G != 8) || cb->attn_gqa_off) G = 1;
    /* Splits: about four blocks per SM (one resident wave at ~128 registers a thread), at least
     * DEC_MIN_ROWS positions each, and within the partials buffer. (Capping at one exact wave,
     * BRISK_CUDA_ATTN_BPS, was never measured a win: docs/experiments.md.) */
    const int64_t target = 4 * (int64_t)cb->n_sm;
    auto splits = [&](int g) {
        int64_t pairs = (int64_t)n * (n_head / g), ns = 1;
        if (pairs < target && max_np > DEC_MIN_ROWS) {
            int64_t by_len = (max_np + DEC_MIN_ROWS - 1) / DEC_MIN_ROWS;
            int64_t by_cap = (int64_t)(cb->att_part_cap / ((size_t)n * n_head * (hd + 2)));
            ns = (target + pairs - 1) / pairs;
            if (ns > by_len) ns = by_len;
            if (ns > by_cap) ns = by_cap;
            if (ns > DEC_MAX_SPLIT) ns = DEC_MAX_SPLIT;
        }
        return ns > 1 ? (int)ns : 1;
    };
    int n_split = splits(G);
    /* A short context leaves few splits, and a group of G heads a block then leaves most SMs idle while
     * each block walks G heads' scores and sums (qwen3.6-35b-a3b at tg128 depth: 2 groups of 8 heads
     * x 4 splits, 8 blocks). Below one block per SM a head each: the K/V rows are re-read per head, but
     * they are few and in the L2. */
    if (G > 1 && !cb->attn_gadapt_off && (int64_t)n * (n_head / G) * n_split < cb->n_sm) {
        G = 1;
        n_split = splits(1);
    }
    float *part = n_split > 1 ? cb->att_part : NULL;
    dim3 grid(n_head / G, n, n_split);
    int *cnt = part && !cb->attn_fuse_off && (size_t)n * (n_head / G) <= ATT_CNT_N ? cb->att_cnt : NULL;
    float sl2 = scale * 1.4426950408889634f; /* log2 e */
    bool quant = !cb->attnq_off && cb->xq && (size_t)n * (size_t)n_head * (size_t)hd <= cb->xq_cap;
    int8_t *xq = quant ? cb->xq : NULL;
    float2 *xds = quant ? cb->xds : NULL;
#define DEC_LAUNCH_RP(KK, GG, NN, RR)                                                                             \
    pdl_launch(cb, attn_dec_kernel<KK, GG, NN, RR>, grid, dim3(DEC_WARPS * 32), 0, q, (const void *)kv->k,       \
               (const void *)kv->v, kv->block_size, d_pos, d_off, d_tabs, n_head, n_head_kv, group, hd, sl2, out, \
               part, cnt, xq, xds,                                                                                 \
               (cb->attn_adapt_off ? 0 : 1) | (cb->attn_merge_off ? 2 : 0) | (cb->attn_min_chunk / 32) << 8, gate, rope)
#define DEC_LAUNCH(KK, GG, NN)                                   \
    do {                                                         \
        if (rope.qs) DEC_LAUNCH_RP(KK, GG, NN, true);            \
        else DEC_LAUNCH_RP(KK, GG, NN, false);                   \
    } while (0)
#define DEC_G(KK)                         \
    switch (G) {                          \
    case 2: DEC_LAUNCH(KK, 2, 4); break;  \
    case 4: DEC_LAUNCH(KK, 4, 4); break;  \
    case 8: DEC_LAUNCH(KK, 8, 2); break;  \
    default: DEC_LAUNCH(KK, 1, 4); break; \
    }
    int kt = kv->kv_type;
    if (kt == KT_Q4_0) DEC_G(KT_Q4_0)
    else if (kt == KT_Q8_0) DEC_G(KT_Q8_0)
    else if (kt == KT_F16) DEC_G(KT_F16)
    else DEC_G(KT_F32)
#undef DEC_G
#undef DEC_LAUNCH
#undef DEC_LAUNCH_RP
    CU_COUNT(cb, CU_PATH_ATTN_WARP);
    if (part && !cnt)
        pdl_launch(cb, attn_dec_combine_kernel, dim3(n_head, n), dim3(DEC_WARPS * 32), 0, (const float *)part, n_split,
                   n_head, hd, out, xq, xds, gate);
    return quant;
}
