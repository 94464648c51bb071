/* cuda_attn_decode.cuh — what the two decode attention kernels share (cuda_attn_decode.cu's
 * warp-per-row kernel, cuda_attn_mma.cu's tensor-core kernel): the output gate, the page-table
 * lookup, the split partials' layout and the merge of a few splits. Partials of (token t, head h,
 * split s) are (max, sum, hd unnormalised output values) at part + ((t * n_head + h) * stride + s)
 * * (hd + 2) floats; maxima are base 2. */
#ifndef BK_CUDA_ATTN_DECODE_CUH
#define BK_CUDA_ATTN_DECODE_CUH
#include "backend/cuda/cuda_internal.cuh"

#define DEC_WARPS 4 /* warps a block, both kernels */

/* Output value y of (token t, head h, dimension d) through the output gate, as sigmoid_mul rounds it
 * (cuda_elementwise.cu), or y without one. */
__device__ __forceinline__ float att_gate_apply(const att_gate &g, float y, int t, int n_head, int h, int d) {
    if (!g.g) return y;
    const float gv = g.g[((size_t)t * n_head + h) * (size_t)g.pitch + d];
    return y * sigmoid_f(gv);
}

/* Cache row index (slot * n_head_kv + kvh) of position p. */
__device__ __forceinline__ int dec_row(const int32_t *table, int bs, int p, int n_head_kv, int kvh) {
    return (table[p / bs] * bs + p % bs) * n_head_kv + kvh;
}

/* The same merge for all G heads of a block's group at once, when the splits are few (n_use <=
 * DEC_FAST_MERGE): each thread takes output values (g, d) and reads the (max, sum) of every split
 * of its head itself, all loads independent, so the merge is one round trip through the L2 instead
 * of three barriers' worth per head, one head after another (qwen3.6-35b-a3b's attention layers,
 * 8 heads a group at head_dim 256: ~26 us a call at tg128 depth, BRISK_CUDA_ABLATE). */
#define DEC_FAST_MERGE 16
__device__ __forceinline__ void dec_combine_group(const float *part, int stride, int n_use, int n_head, int hd,
                                                  int h0, int G, int t, float *out, int8_t *xq, float2 *xds,
                                                  const att_gate &gate) {
    for (int i = threadIdx.x; i < G * hd; i += DEC_WARPS * 32) { /* G * hd % 32 == 0: whole warps */
        const int g = i / hd, d = i % hd, h = h0 + g;
        const float *pp = part + ((size_t)t * n_head + h) * stride * (hd + 2);
        float mx[DEC_FAST_MERGE], sm[DEC_FAST_MERGE], ov[DEC_FAST_MERGE];
#pragma unroll
        for (int s = 0; s < DEC_FAST_MERGE; s++)
            if (s < n_use) {
                mx[s] = __ldcg(pp + (size_t)s * (hd + 2));
                sm[s] = __ldcg(pp + (size_t)s * (hd + 2) + 1);
                ov[s] = __ldcg(pp + (size_t)s * (hd + 2) + 2 + d);
            }
        float M = mx[0]; /* finite: split 0 holds position 0 */
#pragma unroll
        for (int s = 1; s < DEC_FAST_MERGE; s++)
            if (s < n_use) M = fmaxf(M, mx[s]);
        float L = 0.0f, o = 0.0f;
#pragma unroll
        for (int s = 0; s < DEC_FAST_MERGE; s++)
            if (s < n_use) {
                float w = exp2f(mx[s] - M);
                L += w * sm[s];
                o += w * ov[s];
            }
        const size_t oi = ((size_t)t * n_head + h) * hd + d;
        const float y = att_gate_apply(gate, o / L, t, n_head, h, d);
        out[oi] = y;
        if (xq) q8_1_store_lane(y, (int64_t)oi, threadIdx.x % 32, xq, xds);
    }
}

/* The fused rope's step row (dec_rope): one warp normalises and rotates token t's k of KV head kvh
 * (into scratch, hd floats) and stores k and v in the cache's format into new_k / new_v (shared
 * memory: the bytes the cache will hold, which the block reads in place of the cache's row), and, if
 * writer, into the cache itself at the step's slot. hd % 32 == 0 for the quantized types: the warp
 * stores whole blocks (kv_store). */
template <int KT>
__device__ __forceinline__ void dec_step_row(const dec_rope &rope, int t, int n_head_kv, int kvh, int hd, int half,
                                             const float *cs, const float *sn, float *scratch, void *new_k,
                                             void *new_v, void *kc, void *vc, bool writer) {
    const int lane = threadIdx.x % 32;
    const size_t r = (size_t)t * n_head_kv + kvh;
    qk_head_norm_rope(rope.k + r * hd, rope.kw, rope.eps, hd, half, cs, sn, rope.a, scratch);
    const size_t e0 = ((size_t)rope.slot[t] * n_head_kv + kvh) * hd;
    for (int i = lane; i < hd; i += 32) {
        const float vv = rope.v[r * hd + i];
        kv_store<KT>(new_k, (size_t)i, scratch[i]);
        kv_store<KT>(new_v, (size_t)i, vv);
        if (writer) {
            kv_store<KT>(kc, e0 + i, scratch[i]);
            kv_store<KT>(vc, e0 + i, vv);
        }
    }
}

/* The fused merge's count: after the block wrote its partials, it counts itself on the (token t,
 * head group g) counter; true for the block that completes the count of n_use (it then merges, and
 * resets the counter with dec_last_done). The partials are fenced before the count, as in the CUDA
 * programming guide's last-block reduction; the whole block calls it. */
__device__ __forceinline__ bool dec_last_block(int *cnt, int t, int g, int n_groups, int n_use) {
    __shared__ int last;
    __threadfence();
    __syncthreads();
    if (threadIdx.x == 0) last = atomicAdd(cnt + (size_t)t * n_groups + g, 1) == n_use - 1;
    __syncthreads();
    if (last) __threadfence();
    return last;
}
__device__ __forceinline__ void dec_last_done(int *cnt, int t, int g, int n_groups) {
    if (threadIdx.x == 0) cnt[(size_t)t * n_groups + g] = 0; /* ready for the next launch (the grid's end orders it) */
}

#endif
