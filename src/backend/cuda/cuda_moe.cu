/* cuda_moe.cu — mixture of experts on the GPU: the router (softmax, top-k,
 * renormalisation in fp32) and the routed SwiGLU experts.
 *
 * The expert FFN never leaves the device to learn the routing: a one-block
 * kernel groups the (token, slot) entries of the batch by expert (offsets,
 * the list of active experts and its length, all in device memory), then
 * each product is one launch over (row tile, active-expert slot). The grid
 * has min(n_expert, entries) slots, a bound known before routing, so a
 * captured graph fits every routing; a block whose slot is past the number
 * of active experts returns at once. A warp owns MOE_ROWS rows of one
 * expert and runs them against all that expert's entries, MOE_NT at a time,
 * so an active expert's weights come from memory once per call (the token
 * groups after the first hit L1/L2) and an idle expert's not at all.
 *
 * Per chunk of entries:
 *   group    ids -> off (n_expert + 1), act (active experts), n_act, ent (entries by expert)
 *   gate·up  h[ent] = silu(gate_e x[t]) * up_e x[t]       (fused when gate and up share a type)
 *   down     dout[ent] = down_e h[ent]
 *   combine  out[t] = sum_j weights[t,j] * dout[t*k + j]  (slot order, each product rounded, as the CPU)
 *
 * The products reuse the dense kernels' device code (cuda_internal.cuh): on
 * Q8_0, Q4_0, Q4_K and Q6_K the weight groups of cuda_mmvq.cu meet
 * activations quantized to int8 blocks of 32 in __dp4a (x once per chunk, h
 * once before down; as the CPU quantizes them), on the other types (and
 * with BRISK_CUDA_DISABLE=moe_q8) the block decoders deq8/deq1 meet f32
 * activations, as cuda_gemv.cu's float GEMV.
 *
 * Batches of many entries (>= cb->moe_mmq_min, BRISK_CUDA_MOE_MMQ_MIN; off with
 * BRISK_CUDA_DISABLE=moe_mmq) run the integer-dot products as grouped tensor-core
 * launches instead (cuda_mmq.cuh's kernel): the grouping also cuts each
 * active expert's entries into tiles of NT (8..64, from the mean entries per
 * expert) and lists them (tiles, n_tiles), and one launch per product covers
 * (row tile, listed tile), so an active expert's weight rows are read once
 * per tile of its entries. The list's length is bounded before routing
 * (active experts + entries / NT), which sizes the grid as above.
 *
 * An entry whose expert id is negative contributes nothing: the grouping
 * skips it, the one-token kernels' blocks of its slot return at once, and
 * the combine counts it as weight 0 (the hot-expert cache of
 * backend/moe.c marks experts it computes elsewhere so; under tensor
 * parallelism moe_ids_local marks the experts other ranks hold).
 *
 * Expert tensors with a table of expert pointers (bk_weight.expert_ptrs, all
 * three or none) take expert e's rows from tab[e], read from device memory
 * when the kernel runs: the hot-expert cache points an expert at its GPU
 * slot or at its bytes in mapped host memory (streamed over PCIe), and a
 * captured graph follows the table's later changes. */
#include "backend/cuda/cuda_mmq.cuh"
#include "backend/cuda/cuda_mmvq.cuh"
#include "backend/cuda/cuda_pdl.cuh"

#define ROUTE_THREADS 128
#define GROUP_THREADS 256
#define MOE_WARPS 4
#define MOE_ROWS 2      /* weight rows per warp */
#define MOE_NT 8        /* entries per pass over a row */
/* (token, slot) entries per chunk: bounds the scratch (~46 MB at 4096 entries of Qwen3-30B-A3B's
 * n_ff 768, n_embd 2048). A 512-token prefill of a top-8 model is one chunk: each active expert's
 * weights are read once per pass, and two passes of 256 tokens read them twice (H200, session 11). */
#define MOE_MAX_ENT 4096

/* The integer-dot types (cuda_mmvq_supported): group_load knows only these. */
#define MOE_Q8_DISPATCH(type, ...)                                               \
    switch (type) {                                                              \
        BK_TYPE_CASE(QT_Q8_0, __VA_ARGS__) BK_TYPE_CASE(QT_Q4_0, __VA_ARGS__)  \
        BK_TYPE_CASE(QT_Q4_K, __VA_ARGS__) BK_TYPE_CASE(QT_Q6_K, __VA_ARGS__)  \
    default: break;                                                              \
    }

#define IS_FLOAT_TYPE(T) ((T) == QT_F32 || (T) == QT_F16 || (T) == QT_BF16)

/* The warp's largest (value, id) into every lane's bv, bi: ties go to the lower id. */
__device__ __forceinline__ void warp_argmax(float &bv, int &bi) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) {
        float ov = __shfl_xor_sync(0xffffffffu, bv, o);
        int oi = __shfl_xor_sync(0xffffffffu, bi, o);
        if (ov > bv || (ov == bv && oi < bi)) {
            bv = ov;
            bi = oi;
        }
    }
}

/* ---- router: one block per token ---- */
__global__ void __launch_bounds__(ROUTE_THREADS)
moe_route_kernel(const float *logits, int n_expert, int k, int norm, float scale, int32_t *ids, float *weights) {
    BK_TRACE_SCOPE();
    pdl_wait(); /* programmatic launches (cuda_pdl.cuh): everything here reads the previous kernel's output */
    __shared__ float p[BK_MOE_MAX_EXPERTS]; /* probabilities; a chosen expert's becomes -inf */
    __shared__ float red_f[ROUTE_THREADS / 32];
    __shared__ int red_i[ROUTE_THREADS / 32];
    __shared__ double red_d[ROUTE_THREADS / 32];
    const int tid = threadIdx.x, lane = tid % 32, wid = tid / 32, nw = ROUTE_THREADS / 32;
    const float *x = logits + (size_t)blockIdx.x * n_expert;
    int32_t *id = ids + (size_t)blockIdx.x * k;
    float *w = weights + (size_t)blockIdx.x * k;

    float mx = -INFINITY;
    for (int e = tid; e < n_expert; e += ROUTE_THREADS) mx = fmaxf(mx, x[e]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    if (lane == 0) red_f[wid] = mx;
    __syncthreads();
    mx = red_f[0];
    for (int i = 1; i < nw; i++) mx = fmaxf(mx, red_f[i]);
    /* the sum in double and one float reciprocal, as the CPU (ggml_vec_soft_max_f32) */
    double sum = 0;
    for (int e = tid; e < n_expert; e += ROUTE_THREADS) {
        float v = expf(x[e] - mx);
        p[e] = v;
        sum += (double)v;
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    if (lane == 0) red_d[wid] = sum;
    __syncthreads();
    sum = 0;
    for (int i = 0; i < nw; i++) sum += red_d[i];
    float inv = (float)(1.0 / sum);
    for (int e = tid; e < n_expert; e += ROUTE_THREADS) p[e] *= inv;
    __syncthreads();

    /* top-k, most probable first; ties go to the lower id */
    for (int s = 0; s < k; s++) {
        float bv = -INFINITY;
        int bi = n_expert;
        for (int e = tid; e < n_expert; e += ROUTE_THREADS)
            if (p[e] > bv) { /* ascending e: the first of equals is the lowest id */
                bv = p[e];
                bi = e;
            }
        warp_argmax(bv, bi);
        if (lane == 0) {
            red_f[wid] = bv;
            red_i[wid] = bi;
        }
        __syncthreads();
        if (tid == 0) {
            for (int i = 1; i < nw; i++)
                if (red_f[i] > bv || (red_f[i] == bv && red_i[i] < bi)) {
                    bv = red_f[i];
                    bi = red_i[i];
                }
            if (bi >= n_expert) bi = 0; /* NaN logits: keep the id in range for the FFN */
            id[s] = bi;
            w[s] = p[bi];
            p[bi] = -INFINITY;
        }
        __syncthreads();
    }
    if (tid == 0) {
        if (norm) { /* sum in double, clamped below at f16's smallest normal, as the CPU */
            double ws = 0;
            for (int s = 0; s < k; s++) ws += (double)w[s];
            float fs = (float)ws;
            if (fs < 6.103515625e-5f) fs = 6.103515625e-5f;
            for (int s = 0; s < k; s++) w[s] = w[s] / fs;
        }
        if (scale != 0.0f && scale != 1.0f)
            for (int s = 0; s < k; s++) w[s] *= scale;
    }
}

/* The router for up to ROUTE_WARP_MAX experts: a warp per token, the logits in registers (lane l
 * holds experts l, l + 32, ...), no block barrier. Same arithmetic as moe_route_kernel (softmax
 * with the sum in double and one float reciprocal, top-k with ties to the lower id, the
 * renormalisation's sum in double): ncu put the block kernel's k rounds of two barriers at
 * ~7 us per call for one token, more than the expert products' bandwidth time. */
#define ROUTE_WARP_MAX 256
#define ROUTE_WARPS 4
/* One token's routing by one warp: x its n_expert logits (read through L2: in the fused router other
 * blocks of the grid wrote them), id / w its k slots. */
__device__ __forceinline__ void route_token_warp(const float *x, int n_expert, int k, int norm, float scale,
                                                 int32_t *id, float *w) {
    constexpr int PER = ROUTE_WARP_MAX / 32;
    const int lane = threadIdx.x % 32;
    float p[PER];
    float mx = -INFINITY;
#pragma unroll
    for (int i = 0; i < PER; i++) {
        int e = lane + 32 * i;
        p[i] = e < n_expert ? __ldcg(x + e) : -INFINITY;
        mx = fmaxf(mx, p[i]);
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
    double sum = 0;
#pragma unroll
    for (int i = 0; i < PER; i++) {
        if (lane + 32 * i < n_expert) {
            p[i] = expf(p[i] - mx);
            sum += (double)p[i];
        }
    }
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
    float inv = (float)(1.0 / sum);
#pragma unroll
    for (int i = 0; i < PER; i++) p[i] = lane + 32 * i < n_expert ? p[i] * inv : -INFINITY;
    double ws = 0;
    for (int s = 0; s < k; s++) {
        float bv = -INFINITY;
        int bi = n_expert;
#pragma unroll
        for (int i = 0; i < PER; i++) /* ascending e within the lane: the first of equals is the lowest id */
            if (p[i] > bv) {
                bv = p[i];
                bi = lane + 32 * i;
            }
        warp_argmax(bv, bi);
        if (bi >= n_expert) bi = 0; /* NaN logits: keep the id in range for the FFN */
        float pv = __shfl_sync(0xffffffffu, bv, 0);
        if (lane == bi % 32)
#pragma unroll
            for (int i = 0; i < PER; i++)
                if (i == bi / 32) p[i] = -INFINITY;
        if (lane == 0) {
            id[s] = bi;
            w[s] = pv;
        }
        ws += (double)pv;
    }
    if (lane == 0) {
        if (norm) { /* clamped below at f16's smallest normal, as the CPU */
            float fs = (float)ws;
            if (fs < 6.103515625e-5f) fs = 6.103515625e-5f;
            for (int s = 0; s < k; s++) w[s] = w[s] / fs;
        }
        if (scale != 0.0f && scale != 1.0f)
            for (int s = 0; s < k; s++) w[s] *= scale;
    }
}

__global__ void __launch_bounds__(ROUTE_WARPS * 32)
moe_route_warp_kernel(const float *logits, int n, int n_expert, int k, int norm, float scale, int32_t *ids,
                      float *weights) {
    BK_TRACE_SCOPE();
    pdl_wait();
    const int t = blockIdx.x * ROUTE_WARPS + threadIdx.x / 32;
    if (t >= n) return;
    route_token_warp(logits + (size_t)t * n_expert, n_expert, k, norm, scale, ids + (size_t)t * k,
                     weights + (size_t)t * k);
}

/* The router of one token in one launch: a block per expert row computes its logit as the split-K
 * GEMV does (block_row_dot: the same logits), and the block that finishes last routes the token
 * (the last-block reduction of the CUDA programming guide: each block's logit is fenced before it
 * counts; the counter is zero between launches). One launch instead of two per MoE layer. With W2
 * (one row of the same type: the shared expert's gate), block n_expert computes out2 = W2 . x too,
 * as the split-K GEMV would, so that product needs no launch of its own. */
template <int T>
__global__ void __launch_bounds__(GEMV_SK_WARPS * 32)
moe_router_kernel(const uint8_t *W, size_t row_bytes, int64_t n_in, int n_expert, const float *x, int k, int norm,
                  float scale, float *logits, int32_t *ids, float *weights, const uint8_t *W2, float *out2,
                  int *cnt, int prefetch) {
    BK_TRACE_SCOPE();
    __shared__ float part[GEMV_SK_WARPS][1];
    __shared__ int last;
    const int64_t r = blockIdx.x;
    /* the row (a constant) asked into the L2 before the wait: the product then waits on the L2, not
     * on the DRAM, once the norm before it is done */
    if (prefetch) {
        const uint8_t *row = r < n_expert ? W + r * row_bytes : W2;
        for (int64_t o = (int64_t)threadIdx.x * 128; o < (int64_t)row_bytes; o += (int64_t)blockDim.x * 128)
            asm volatile("prefetch.global.L2 [%0];" ::"l"(row + o));
    }
    pdl_wait();
    block_row_dot<T, 1, GEMV_SK_WARPS>(r < n_expert ? W + r * row_bytes : W2, x, n_in, 1, part);
    if (threadIdx.x == 0) {
        *(r < n_expert ? logits + r : out2) = block_row_sum(part, 0);
        __threadfence();
        last = atomicAdd(cnt, 1) == (int)gridDim.x - 1;
    }
    __syncthreads();
    if (!last) return;
    __threadfence();
    if (threadIdx.x < 32) route_token_warp(logits, n_expert, k, norm, scale, ids, weights);
    if (threadIdx.x == 0) *cnt = 0; /* ready for the next launch (the grid's end orders it before) */
}

/* The tag after an op whose outputs are nk ids and nk weights (cuda_internal.cuh: q8_tag_keep). */
static void route_outputs_keep_tag(cuda_backend *cb, q8_tag t, const int32_t *ids, const float *weights, size_t nk) {
    q8_tag_keep(cb, t, weights, nk);
    q8_tag_keep(cb, q8_tag_now(cb), (const float *)(const void *)ids, nk);
}

extern "C" void cuda_moe_route(bk_backend *be, const float *logits, int n, int n_expert, int k, bool norm,
                               float scale, int32_t *ids, float *weights) {
    cuda_backend *cb = (cuda_backend *)be;
    if (n <= 0) return;
    if (n_expert < 1 || n_expert > BK_MOE_MAX_EXPERTS || k < 1 || k > n_expert) {
        cuda_set_error(cb, bk_fail(BRISK_ERR_INVALID_ARG, "cuda moe_route: %d of %d experts", k, n_expert));
        return;
    }
    q8_tag tag = q8_tag_now(cb); /* the router writes only ids and weights: h's quantized copy stays valid */
    if (n_expert <= ROUTE_WARP_MAX && !cb->route_warp_off)
        pdl_launch(cb, moe_route_warp_kernel, dim3((unsigned)((n + ROUTE_WARPS - 1) / ROUTE_WARPS)),
                   dim3(ROUTE_WARPS * 32), 0, logits, n, n_expert, k, norm ? 1 : 0, scale, ids, weights);
    else
        pdl_launch(cb, moe_route_kernel, dim3((unsigned)n), dim3(ROUTE_THREADS), 0, logits, n_expert, k, norm ? 1 : 0,
                   scale, ids, weights);
    CU_LAUNCHED(cb);
    route_outputs_keep_tag(cb, tag, ids, weights, (size_t)n * k);
}

/* The MoE router: one token with a float router of up to ROUTE_WARP_MAX experts in one launch
 * (moe_router_kernel), anything else as the product and moe_route. */
extern "C" void cuda_moe_router(bk_backend *be, const bk_weight *w, const float *x, int n, int k, bool norm,
                                float scale, float *logits, int32_t *ids, float *weights, const bk_weight *w2,
                                float *out2) {
    cuda_backend *cb = (cuda_backend *)be;
    CU_ABLATE(cb, ABL_ROUTER);
    const int n_expert = (int)w->n_out;
    /* the product as the split-K GEMV computes it (the same logits as the two-launch path) */
    if (n == 1 && !cb->router_fuse_off && !cb->route_warp_off && cuda_gemv_splitk_should_use(w->type, w->n_in, w->n_out) &&
        n_expert <= ROUTE_WARP_MAX && k >= 1 && k <= n_expert) {
        /* w2 joins as one more block when it is one row of w's type and width */
        const bool join = w2 && !cb->router_join_off && w2->type == w->type && w2->n_in == w->n_in && w2->n_out == 1;
        q8_tag tag = q8_tag_now(cb); /* the product reads x; its outputs are logits, ids, weights (and out2) */
        BK_DISPATCH(w->type, pdl_launch(cb, moe_router_kernel<TT>, dim3((unsigned)(n_expert + join)),
                                        dim3(GEMV_SK_WARPS * 32), 0, (const uint8_t *)w->dev, w->row_bytes, w->n_in,
                                        n_expert, x, k, norm ? 1 : 0, scale, logits, ids, weights,
                                        join ? (const uint8_t *)w2->dev : NULL, join ? out2 : NULL, cb->route_cnt,
                                        cb->router_pf_off ? 0 : 1));
        CU_LAUNCHED(cb);
        q8_tag_keep(cb, tag, logits, (size_t)n_expert);
        route_outputs_keep_tag(cb, q8_tag_now(cb), ids, weights, (size_t)k);
        if (join) {
            q8_tag_keep(cb, q8_tag_now(cb), out2, 1);
            return;
        }
    } else {
        cuda_matmul(be, 1, &w, NULL, x, n, &logits);
        cuda_moe_route(be, logits, n, n_expert, k, norm, scale, ids, weights);
    }
    if (w2) cuda_matmul(be, 1, &w2, NULL, x, n, &out2);
}

/* ---- expert parallelism (backend.h's moe_ids_local): the router's ids made local to a rank's
 * experts [e0, e1), the others -1 (the grouping and the combine then skip them) ---- */
__global__ void moe_ids_local_kernel(int32_t *ids, int n, int e0, int e1) {
    BK_TRACE_SCOPE();
    pdl_wait(); /* the ids come from the router */
    int i = blockIdx.x * blockDim.x + threadIdx.x;
    if (i < n) ids[i] = ids[i] >= e0 && ids[i] < e1 ? ids[i] - e0 : -1;
}

extern "C" void cuda_moe_ids_local(bk_backend *be, int32_t *ids, int n, int e0, int e1) {
    cuda_backend *cb = (cuda_backend *)be;
    if (n <= 0) return;
    q8_tag tag = q8_tag_now(cb); /* it writes only ids: the experts' quantized input stays valid */
    pdl_launch(cb, moe_ids_local_kernel, dim3((unsigned)((n + 255) / 256)), dim3(256), 0, ids, n, e0, e1);
    CU_LAUNCHED(cb);
    q8_tag_keep(cb, tag, (const float *)(const void *)ids, (size_t)n);
}

/* ---- grouping: one block; the order inside an expert's group is free
 * (every entry's products are computed alone, so the results do not depend on it) ---- */
/* Expert of entry i, or -1 for an entry that contributes nothing (a negative id); ids past the
 * experts (NaN logits upstream) are kept in range. */
__device__ __forceinline__ int moe_entry_expert(const int32_t *ids, int i, int n_expert) {
    int e = ids[i];
    return e < 0 ? -1 : min(e, n_expert - 1);
}

/* tile_nt > 0 also lists the tiles of up to tile_nt entries of each active expert for the
 * grouped mmq launches: tiles[j] = (expert, first entry), *n_tiles of them. */
__global__ void __launch_bounds__(GROUP_THREADS)
moe_group_kernel(const int32_t *ids, int nk, int n_expert, int tile_nt, int32_t *off, int32_t *act, int32_t *n_act,
                 int32_t *ent, int2 *tiles, int32_t *n_tiles) {
    BK_TRACE_SCOPE();
    pdl_wait();
    __shared__ int cnt[BK_MOE_MAX_EXPERTS];  /* entries per expert, then its first tile */
    __shared__ int fill[BK_MOE_MAX_EXPERTS];
    const int tid = threadIdx.x, lane = tid % 32;
    for (int e = tid; e < n_expert; e += GROUP_THREADS) cnt[e] = 0;
    __syncthreads();
    for (int i = tid; i < nk; i += GROUP_THREADS) {
        int e = moe_entry_expert(ids, i, n_expert);
        if (e >= 0) atomicAdd(&cnt[e], 1);
    }
    __syncthreads();
    if (tid < 32) { /* exclusive scans of the counts and tile counts, 32 experts per step, and the active list */
        int run = 0, na = 0, trun = 0;
        for (int base = 0; base < n_expert; base += 32) {
            int e = base + lane, c = e < n_expert ? cnt[e] : 0, incl = c;
            int tc = tile_nt > 0 ? (c + tile_nt - 1) / tile_nt : 0, tincl = tc;
#pragma unroll
            for (int o = 1; o < 32; o <<= 1) {
                int v = __shfl_up_sync(0xffffffffu, incl, o), tv = __shfl_up_sync(0xffffffffu, tincl, o);
                if (lane >= o) {
                    incl += v;
                    tincl += tv;
                }
            }
            if (e < n_expert) {
                fill[e] = run + incl - c;
                off[e] = run + incl - c;
                cnt[e] = trun + tincl - tc;
            }
            unsigned m = __ballot_sync(0xffffffffu, c > 0);
            if (c > 0) act[na + __popc(m & ((1u << lane) - 1u))] = e;
            run += __shfl_sync(0xffffffffu, incl, 31);
            trun += __shfl_sync(0xffffffffu, tincl, 31);
            na += __popc(m);
        }
        if (lane == 0) {
            off[n_expert] = run;
            *n_act = na;
            if (tile_nt > 0) *n_tiles = trun;
        }
    }
    __syncthreads();
    for (int i = tid; i < nk; i += GROUP_THREADS) {
        int e = moe_entry_expert(ids, i, n_expert);
        if (e >= 0) ent[atomicAdd(&fill[e], 1)] = i;
    }
    if (tile_nt > 0) /* off[] was written before the barrier: visible to the block */
        for (int e = tid; e < n_expert; e += GROUP_THREADS)
            for (int j0 = off[e], j = 0; j0 + j * tile_nt < off[e + 1]; j++)
                tiles[cnt[e] + j] = make_int2(e, j0 + j * tile_nt);
}

/* The activation rows an expert product reads: entry en reads row en / div
 * (div = k: its token's row of x; div = 1: its own row of h), as f32 rows
 * (x) or, on the integer-dot path, as int8 blocks of 32 with their scales
 * and sums (xq, xds: cuda_mmvq_quantize's layout). */
typedef struct moe_act {
    const float *x;
    const int8_t *xq;
    const float2 *xds;
    int64_t n_in;
    int div;
    /* the launch's weight tables when its experts are placed one by one (bk_weight.expert_ptrs):
     * [0] for W (or D), [1] for U; NULL: expert e's rows follow e * rows rows of W */
    const uint8_t *const *wtab[2];
} moe_act;

/* The first row of expert e: tab[e], or e * rows rows into the contiguous tensor W. */
__device__ __forceinline__ const uint8_t *moe_expert_base(const uint8_t *W, const uint8_t *const *tab, int e,
                                                          int64_t rows, size_t row_bytes) {
    return tab ? tab[e] : W + (int64_t)e * rows * (int64_t)row_bytes;
}

/* acc[i][t] += dot(row i, activations of entry en[t]) over this lane's part
 * of n_in, for t < nt. Float path: the loop of cuda_gemv.cu's gemv_kernel;
 * Q8 path: that of cuda_mmvq.cu's mmvq_kernel (Q8_0, Q4_0, Q4_K, Q6_K). */
template <int T, bool Q8, int R, int NT>
__device__ __forceinline__ void rows_dot(const uint8_t *const (&rows)[R], const moe_act &a, const int (&en)[NT],
                                         int nt, int lane, float (&acc)[R][NT]) {
    const int64_t n_in = a.n_in;
    if constexpr (Q8) {
        const int64_t n_groups = n_in / 32;
        for (int64_t g = lane; g < n_groups; g += 32) {
            wgroup q[R];
#pragma unroll
            for (int i = 0; i < R; i++) group_load<T>(rows[i], g, q[i]);
#pragma unroll
            for (int t = 0; t < NT; t++) {
                if (t >= nt) break;
                int64_t xr = en[t] / a.div;
                const int4 *xp = (const int4 *)(a.xq + xr * n_in + g * 32);
                int4 u = __ldg(xp), v = __ldg(xp + 1);
                int xi[8] = {u.x, u.y, u.z, u.w, v.x, v.y, v.z, v.w};
                float2 ds = __ldg(a.xds + xr * n_groups + g);
#pragma unroll
                for (int i = 0; i < R; i++) acc[i][t] += group_dot(q[i], xi, ds);
            }
        }
    } else {
        const float *xs[NT];
#pragma unroll
        for (int t = 0; t < NT; t++) xs[t] = a.x + (int64_t)(en[t] / a.div) * n_in;
        if (!IS_FLOAT_TYPE(T) || n_in % 8 == 0) {
            for (int64_t p = lane; p < n_in / 8; p += 32) {
                float v[R][8];
#pragma unroll
                for (int i = 0; i < R; i++) deq8<T>(rows[i], p * 8, v[i]);
#pragma unroll
                for (int t = 0; t < NT; t++) {
                    if (t < nt) {
                        const float4 *xp = (const float4 *)(xs[t] + p * 8);
                        float4 a4 = __ldg(xp), b4 = __ldg(xp + 1);
#pragma unroll
                        for (int i = 0; i < R; i++)
                            acc[i][t] += v[i][0] * a4.x + v[i][1] * a4.y + v[i][2] * a4.z + v[i][3] * a4.w +
                                         v[i][4] * b4.x + v[i][5] * b4.y + v[i][6] * b4.z + v[i][7] * b4.w;
                    }
                }
            }
        } else {
            for (int64_t e = lane; e < n_in; e += 32) {
#pragma unroll
                for (int i = 0; i < R; i++) {
                    float w = deq1(T, rows[i], e);
#pragma unroll
                    for (int t = 0; t < NT; t++)
                        if (t < nt) acc[i][t] += w * __ldg(xs[t] + e);
                }
            }
        }
    }
}

template <int R, int NT> __device__ __forceinline__ void warp_sum(float (&acc)[R][NT], int nt) {
#pragma unroll
    for (int i = 0; i < R; i++)
#pragma unroll
        for (int t = 0; t < NT; t++)
            if (t < nt)
#pragma unroll
                for (int o = 16; o > 0; o >>= 1) acc[i][t] += __shfl_xor_sync(0xffffffffu, acc[i][t], o);
}


/* The active expert of this block's slot, or -1 when the slot is idle. */
__device__ __forceinline__ int block_expert(const int32_t *act, const int32_t *n_act) {
    return (int)blockIdx.y < *n_act ? act[blockIdx.y] : -1;
}

/* h (entries, n_ff). BOTH: gate and up of one type, h = silu(gate x) * up x in
 * one pass. Otherwise stage 0 writes h = gate x and stage 1 makes it
 * silu(h) * up x (W: the stage's matrix). Activations: x rows by token. */
template <int T, bool BOTH, bool Q8>
__global__ void __launch_bounds__(MOE_WARPS * 32)
moe_gate_up_kernel(const uint8_t *W, const uint8_t *U, size_t row_bytes, int64_t n_ff, moe_act a, const int32_t *off,
                   const int32_t *act, const int32_t *n_act, const int32_t *ent, float *h, int stage) {
    BK_TRACE_SCOPE();
    pdl_wait();
    int e = block_expert(act, n_act);
    if (e < 0) return;
    int lane = threadIdx.x % 32;
    int64_t r0 = ((int64_t)blockIdx.x * MOE_WARPS + threadIdx.x / 32) * MOE_ROWS;
    if (r0 >= n_ff) return;
    const uint8_t *rg[MOE_ROWS], *ru[MOE_ROWS];
    const uint8_t *wb = moe_expert_base(W, a.wtab[0], e, n_ff, row_bytes),
                  *ub = BOTH ? moe_expert_base(U, a.wtab[1], e, n_ff, row_bytes) : wb;
#pragma unroll
    for (int i = 0; i < MOE_ROWS; i++) {
        int64_t r = r0 + i < n_ff ? r0 + i : r0;
        rg[i] = wb + r * row_bytes;
        ru[i] = BOTH ? ub + r * row_bytes : rg[i];
    }
    int beg = off[e], end = off[e + 1];
    for (int c0 = beg; c0 < end; c0 += MOE_NT) {
        int nt = end - c0 < MOE_NT ? end - c0 : MOE_NT;
        int en[MOE_NT];
#pragma unroll
        for (int t = 0; t < MOE_NT; t++) en[t] = ent[c0 + (t < nt ? t : 0)];
        float ag[MOE_ROWS][MOE_NT], au[MOE_ROWS][MOE_NT];
#pragma unroll
        for (int i = 0; i < MOE_ROWS; i++)
#pragma unroll
            for (int t = 0; t < MOE_NT; t++) ag[i][t] = au[i][t] = 0.0f;
        rows_dot<T, Q8, MOE_ROWS, MOE_NT>(rg, a, en, nt, lane, ag);
        warp_sum(ag, nt);
        if (BOTH) {
            rows_dot<T, Q8, MOE_ROWS, MOE_NT>(ru, a, en, nt, lane, au);
            warp_sum(au, nt);
        }
        if (lane == 0)
#pragma unroll
            for (int i = 0; i < MOE_ROWS; i++) {
                if (r0 + i >= n_ff) break;
#pragma unroll
                for (int t = 0; t < MOE_NT; t++) {
                    if (t >= nt) break;
                    float *o = h + (int64_t)en[t] * n_ff + r0 + i;
                    if (BOTH) *o = silu_f(ag[i][t]) * au[i][t];
                    else if (stage == 0) *o = ag[i][t];
                    else *o = silu_f(*o) * ag[i][t];
                }
            }
    }
}

/* dout (entries, n_embd) = down_e h[entry], unweighted. Activations: h rows by entry. */
template <int T, bool Q8>
__global__ void __launch_bounds__(MOE_WARPS * 32)
moe_down_kernel(const uint8_t *D, size_t row_bytes, int64_t n_embd, moe_act a, const int32_t *off, const int32_t *act,
                const int32_t *n_act, const int32_t *ent, float *dout) {
    BK_TRACE_SCOPE();
    pdl_wait();
    int e = block_expert(act, n_act);
    if (e < 0) return;
    int lane = threadIdx.x % 32;
    int64_t r0 = ((int64_t)blockIdx.x * MOE_WARPS + threadIdx.x / 32) * MOE_ROWS;
    if (r0 >= n_embd) return;
    const uint8_t *rows[MOE_ROWS], *db = moe_expert_base(D, a.wtab[0], e, n_embd, row_bytes);
#pragma unroll
    for (int i = 0; i < MOE_ROWS; i++) rows[i] = db + (r0 + i < n_embd ? r0 + i : r0) * row_bytes;
    int beg = off[e], end = off[e + 1];
    for (int c0 = beg; c0 < end; c0 += MOE_NT) {
        int nt = end - c0 < MOE_NT ? end - c0 : MOE_NT;
        int en[MOE_NT];
#pragma unroll
        for (int t = 0; t < MOE_NT; t++) en[t] = ent[c0 + (t < nt ? t : 0)];
        float acc[MOE_ROWS][MOE_NT];
#pragma unroll
        for (int i = 0; i < MOE_ROWS; i++)
#pragma unroll
            for (int t = 0; t < MOE_NT; t++) acc[i][t] = 0.0f;
        rows_dot<T, Q8, MOE_ROWS, MOE_NT>(rows, a, en, nt, lane, acc);
        warp_sum(acc, nt);
        if (lane == 0)
#pragma unroll
            for (int i = 0; i < MOE_ROWS; i++) {
                if (r0 + i >= n_embd) break;
#pragma unroll
                for (int t = 0; t < MOE_NT; t++) {
                    if (t >= nt) break;
                    dout[(int64_t)en[t] * n_embd + r0 + i] = acc[i][t];
                }
            }
    }
}

/* out[t] = dout[t,0] * w0 + dout[t,1] * w1 + ...: each product rounded, summed in slot order (no fma, as the CPU).
 * A slot of a negative id adds nothing (its dout row was never written: not even 0 * it). */
__device__ __forceinline__ float moe_combine_one(const float *v, const float *wt, const int32_t *id, int k,
                                                int64_t n_embd) {
    /* the rows are read whatever the ids (every row of dout is allocated), so the loads go out
     * together; a negative id's value is then not used */
    float o = id[0] < 0 ? 0.0f : __fmul_rn(v[0], wt[0]);
    if (k <= 8) {
        float vs[8];
#pragma unroll
        for (int s = 1; s < 8; s++) vs[s] = s < k ? v[(int64_t)s * n_embd] : 0.0f;
#pragma unroll
        for (int s = 1; s < 8; s++)
            if (s < k && id[s] >= 0) o = __fadd_rn(o, __fmul_rn(vs[s], wt[s]));
    } else {
        for (int s = 1; s < k; s++)
            if (id[s] >= 0) o = __fadd_rn(o, __fmul_rn(v[(int64_t)s * n_embd], wt[s]));
    }
    return o;
}

__global__ void moe_combine_kernel(const float *dout, const float *w, const int32_t *ids, int n, int k, int64_t n_embd,
                                   float *out) {
    BK_TRACE_SCOPE();
    pdl_wait();
    int64_t i = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (i >= (int64_t)n * n_embd) return;
    int64_t t = i / n_embd, c = i % n_embd;
    out[i] = moe_combine_one(dout + t * k * n_embd + c, w + t * k, ids + t * k, k, n_embd);
}

/* One token's combine closing the residual (cuda_moe_ffn_shared): x += m, m the routed slots'
 * combine, rounded as moe_combine_kernel then add_kernel; with the shared expert in slot k (sh_logit
 * given) x += m + s * sigmoid(g), s slot k's row, rounded as moe_combine_kernel then
 * gated_residual_kernel. */
__global__ void moe_combine_residual_kernel(const float *dout, const float *w, const int32_t *ids, int k,
                                            int64_t n_embd, const float *sh_logit, float *x) {
    BK_TRACE_SCOPE();
    pdl_wait();
    int64_t c = (int64_t)blockIdx.x * blockDim.x + threadIdx.x;
    if (c >= n_embd) return;
    float m = moe_combine_one(dout + c, w, ids, k, n_embd);
    if (sh_logit) m = __fadd_rn(m, __fmul_rn(dout[(int64_t)k * n_embd + c], sigmoid_f(sh_logit[0])));
    x[c] = __fadd_rn(x[c], m);
}

/* ---- one token (decode): the router's k slots name k different experts, so each product is a
 * matrix-vector product on one expert's rows, slot j in blockIdx.y: cuda_mmvq.cuh's warp loop with
 * all of a row's groups in flight, the expert read from ids without the grouping kernel. ncu on the
 * Qwen3-30B-A3B shape put the grouped kernels at 14 us (gate·up) and 11-15 us (down) per layer for
 * ~14 and ~10 MB: the warps there walk their row groups in dependent rounds and the down grid ran
 * in several waves of half-idle warps. ---- */
/* Slot k (blockIdx.y == k, the grid one slot taller) is the shared expert when Gs is given
 * (cuda_moe_ffn_shared): its gate/up (Gs, Us) or down (Ds) matrices, of the routed ones' type and shape. */
template <int T, int R>
__global__ void __launch_bounds__(MMVQ_WARPS * 32)
moe_vec_gate_up_kernel(const uint8_t *G, const uint8_t *U, const uint8_t *const *tg, const uint8_t *const *tu,
                       size_t row_bytes, int64_t n_embd, int64_t n_ff, int n_expert, const int32_t *ids,
                       const int8_t *xq, const float2 *xds, float *h, const uint8_t *Gs, const uint8_t *Us, int k,
                       const int32_t *xc_cached, uint32_t *xc_counts) {
    BK_TRACE_SCOPE();
    pdl_wait(); /* ids come from the router */
    const bool sh = Gs && (int)blockIdx.y == k;
    int e = sh ? 0 : moe_entry_expert(ids, (int)blockIdx.y, n_expert);
    if (e < 0) return;
    if (xc_counts && !sh && blockIdx.x == 0 && threadIdx.x == 0) { /* as bk_cuda_expert_count's kernel */
        atomicAdd(&xc_counts[e], 1u);
        if (xc_cached[e]) atomicAdd(&xc_counts[n_expert], 1u);
    }
    mmvq_rows<T, 1, true, 1, false, R>(sh ? Gs : moe_expert_base(G, tg, e, n_ff, row_bytes),
                                    sh ? Us : moe_expert_base(U, tu, e, n_ff, row_bytes), row_bytes, n_embd, n_ff, xq,
                                    xds, 1, NULL, h + (int64_t)blockIdx.y * n_ff,
                                    0, (int64_t)blockIdx.x * MMVQ_WARPS + threadIdx.x / 32,
                                    (int64_t)gridDim.x * MMVQ_WARPS);
}

template <int T, int R>
__global__ void __launch_bounds__(MMVQ_WARPS * 32)
moe_vec_down_kernel(const uint8_t *D, const uint8_t *const *td, size_t row_bytes, int64_t n_ff, int64_t n_embd,
                    int n_expert, const int32_t *ids, const int8_t *hq, const float2 *hds, float *dout,
                    const uint8_t *Ds, int k) {
    BK_TRACE_SCOPE();
    pdl_wait();
    const int j = (int)blockIdx.y;
    const bool sh = Ds && j == k;
    const int e = sh ? 0 : moe_entry_expert(ids, j, n_expert);
    if (e < 0) return;
    mmvq_rows<T, 1, false, 1, false, R>(sh ? Ds : moe_expert_base(D, td, e, n_embd, row_bytes), NULL, row_bytes, n_ff,
                                     n_embd,
                                     hq + (int64_t)j * n_ff, hds + (int64_t)j * (n_ff / 32), 1, NULL,
                                     dout + (int64_t)j * n_embd, 0,
                                     (int64_t)blockIdx.x * MMVQ_WARPS + threadIdx.x / 32,
                                     (int64_t)gridDim.x * MMVQ_WARPS);
}

/* One token's down products and their combine in one launch: a warp owns an output row of every
 * slot at once, its lanes dealt the (slot, unit) pairs of the row (q30's 768-wide Q4_K rows are 12
 * units: a warp per slot and row, as moe_vec_down_kernel, leaves 20 of 32 lanes idle). A lane loads
 * its pairs' activations (h quantized, slot s at row s) into registers and weights each pair's dot by its slot's
 * routing weight (the shared expert's: sigmoid(sh_logit)); the warp's sum is the row of the combine,
 * stored or added to y. No dout round trip and no combine launch; the slots are summed in the lanes'
 * order instead of one after another (the same sums every run). Two rows a warp (half the warps,
 * twice the loads each in flight) were slower on the H200 (tg128 qwen3-30b-a3b 385 against 400,
 * qwen3.6-35b-a3b 390 against 399). */
template <int T, int NU>
__global__ void __launch_bounds__(MMVQ_WARPS * 32)
moe_vec_down_comb_kernel(const uint8_t *D, const uint8_t *const *td, size_t row_bytes, int64_t n_ff, int64_t n_embd,
                         int n_expert, const int32_t *ids, const float *wts, int k, const uint8_t *Ds,
                         const float *sh_logit, const int8_t *hq, const float2 *hds, float *y, int accum) {
    BK_TRACE_SCOPE();
    using U = qunit<T>;
    pdl_wait(); /* ids and weights come from the router, h from the gate/up launch */
    const int lane = threadIdx.x % 32;
    const int64_t r = (int64_t)blockIdx.x * MMVQ_WARPS + threadIdx.x / 32;
    if (r >= n_embd) return;
    const int upr = (int)(n_ff / U::W), pairs = (k + (Ds != NULL)) * upr;
    /* every pair's activations are loaded before the first dot (all loads in flight together) */
    const uint8_t *base[NU];
    float ws[NU];
    int uu[NU];
    int xw[NU][U::XW];
    float2 xd[NU][U::G];
#pragma unroll
    for (int i = 0; i < NU; i++) {
        const int q = lane + 32 * i, s = q / upr;
        uu[i] = q % upr;
        base[i] = NULL;
        ws[i] = 0.0f;
        if (q >= pairs) continue;
        if (s == k) { /* the shared expert */
            base[i] = Ds;
            ws[i] = sigmoid_f(sh_logit[0]);
        } else {
            const int e = moe_entry_expert(ids, s, n_expert);
            if (e < 0) continue; /* another rank's expert */
            base[i] = moe_expert_base(D, td, e, n_embd, row_bytes);
            ws[i] = wts[s];
        }
        qunit_load_x<T, false>(hq + (int64_t)s * n_ff, hds + (int64_t)s * (n_ff / 32), uu[i], xw[i], xd[i]);
    }
    float acc = 0.0f;
#pragma unroll
    for (int i = 0; i < NU; i++)
        if (base[i]) acc += ws[i] * qunit_dot<T, false>(base[i] + r * row_bytes, uu[i], xw[i], xd[i]);
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) acc += __shfl_xor_sync(0xffffffffu, acc, o);
    if (lane == 0) y[r] = accum ? __fadd_rn(y[r], acc) : acc;
}

/* Launches moe_vec_down_comb_kernel for the down type, or false (the type, or more pairs than 8 a lane). */
template <int T>
static bool moe_down_comb_t(cuda_backend *cb, const uint8_t *D, const uint8_t *const *td, size_t row_bytes,
                            int64_t n_ff, int64_t n_embd, int n_expert, const int32_t *ids, const float *wts, int k,
                            const uint8_t *Ds, const float *sh_logit, float *y, int accum) {
    if (n_ff % qunit<T>::W) return false;
    const int64_t pairs = (int64_t)(k + (Ds != NULL)) * (n_ff / qunit<T>::W);
    const dim3 grid((unsigned)((n_embd + MMVQ_WARPS - 1) / MMVQ_WARPS));
#define DC_GO(N)                                                                                                  \
    if (pairs <= 32 * N) {                                                                                        \
        pdl_launch(cb, moe_vec_down_comb_kernel<T, N>, grid, dim3(MMVQ_WARPS * 32), 0, D, td, row_bytes, n_ff, \
                   n_embd, n_expert, ids, wts, k, Ds, sh_logit, (const int8_t *)cb->xq, (const float2 *)cb->xds, y,   \
                   accum);                                                                                        \
        return true;                                                                                              \
    }
    DC_GO(1) DC_GO(2) DC_GO(3) DC_GO(4) DC_GO(6) DC_GO(8)
#undef DC_GO
    return false;
}

static bool moe_down_comb(cuda_backend *cb, const bk_weight *down, const uint8_t *Ds, int64_t n_ff, int64_t n_embd,
                          int n_expert, const int32_t *ids, const float *wts, int k, const float *sh_logit, float *y,
                          int accum) {
    if (cb->moe_comb_off) return false;
    const uint8_t *D = (const uint8_t *)down->dev;
    const uint8_t *const *td = (const uint8_t *const *)down->expert_ptrs;
    switch (down->type) {
    case QT_Q4_K: return moe_down_comb_t<QT_Q4_K>(cb, D, td, down->row_bytes, n_ff, n_embd, n_expert, ids, wts, k, Ds, sh_logit, y, accum);
    case QT_Q6_K: return moe_down_comb_t<QT_Q6_K>(cb, D, td, down->row_bytes, n_ff, n_embd, n_expert, ids, wts, k, Ds, sh_logit, y, accum);
    case QT_Q8_0: return moe_down_comb_t<QT_Q8_0>(cb, D, td, down->row_bytes, n_ff, n_embd, n_expert, ids, wts, k, Ds, sh_logit, y, accum);
    case QT_Q4_0: return moe_down_comb_t<QT_Q4_0>(cb, D, td, down->row_bytes, n_ff, n_embd, n_expert, ids, wts, k, Ds, sh_logit, y, accum);
    default: return false;
    }
}

static bool moe_reserve(cuda_backend *cb, size_t need) { return cuda_scratch_reserve(cb, &cb->moe, need, "moe"); }

extern "C" void cuda_moe_free(cuda_backend *cb) { cuda_scratch_free(&cb->moe); }

static size_t al256(size_t b) { return (b + 255) & ~(size_t)255; }

/* The scratch of moe_ffn, carved in this order: h (entries, n_ff), dout
 * (entries, n_embd), off (n_expert + 1), act (n_expert), n_act, ent (entries),
 * tiles (n_expert + entries / MOE_TILE_MIN + 1) and n_tiles, for a whole chunk
 * of entries (tokens * k). */
typedef struct moe_layout {
    int chunk;   /* tokens per pass */
    size_t b_h, b_d, b_off, b_act, b_na, b_ent, b_tiles, b_nt;
} moe_layout;

#define MOE_TILE_MIN 8 /* the smallest mmq token tile: bounds the tile list */

static moe_layout moe_sizes(int64_t n_embd, int64_t n_ff, int n_expert, int k) {
    moe_layout l;
    l.chunk = MOE_MAX_ENT / k > 0 ? MOE_MAX_ENT / k : 1;
    size_t ents = (size_t)l.chunk * k;
    l.b_h = al256(ents * n_ff * sizeof(float));
    l.b_d = al256(ents * n_embd * sizeof(float));
    l.b_off = al256(((size_t)n_expert + 1) * 4);
    l.b_act = al256((size_t)n_expert * 4);
    l.b_na = 256;
    l.b_ent = al256(ents * 4);
    l.b_tiles = al256(((size_t)n_expert + ents / MOE_TILE_MIN + 1) * sizeof(int2));
    l.b_nt = 256;
    return l;
}

extern "C" size_t bk_cuda_moe_scratch_bytes(int64_t n_embd, int64_t n_ff, int n_expert, int k) {
    if (n_expert <= 0 || k <= 0) return 0;
    moe_layout l = moe_sizes(n_embd, n_ff, n_expert, k);
    return l.b_h + l.b_d + l.b_off + l.b_act + l.b_na + l.b_ent + l.b_tiles + l.b_nt;
}

/* One token's experts through the matrix-vector kernels (no grouping kernel): gate·up for the k
 * slots, h quantized, down, the combine into out. residual: the combine closes the layer instead,
 * out += m; with sh (the shared expert's gate, up and down, of the routed tensors' types and shapes)
 * slot k is the shared expert and out += m + s * sigmoid(sh_logit). false, nothing launched, where
 * it does not apply (the k (+1) rows of n_ff must fit the activation buffer). h and dout are
 * cb->moe's buffer (moe_prepare sized it), as in moe_ffn's chunks. */
static bool moe_vec(cuda_backend *cb, const bk_weight *gate, const bk_weight *up, const bk_weight *down,
                    const bk_weight *const *sh, bool residual, const float *x, const int32_t *ids,
                    const float *weights, int k, const float *sh_logit, float *out) {
    const int n_expert = gate->n_expert > 0 ? gate->n_expert : 1;
    const int64_t n_ff = gate->n_out / n_expert, n_embd = gate->n_in;
    const int slots = k + (sh != NULL);
    if (cb->moe_vec_off || (size_t)slots * n_ff > cb->xq_cap || !cuda_mmvq_prepare(cb, x, n_embd, 1)) return false;
    float *h = (float *)cb->moe.buf, *dout = (float *)((char *)cb->moe.buf + moe_sizes(n_embd, n_ff, n_expert, k).b_h);
    const uint8_t *G = (const uint8_t *)gate->dev, *U = (const uint8_t *)up->dev, *D = (const uint8_t *)down->dev;
    const uint8_t *Gs = sh ? (const uint8_t *)sh[0]->dev : NULL, *Us = sh ? (const uint8_t *)sh[1]->dev : NULL,
                  *Ds = sh ? (const uint8_t *)sh[2]->dev : NULL;
    const uint8_t *const *tg = (const uint8_t *const *)gate->expert_ptrs,
                         *const *tu = (const uint8_t *const *)up->expert_ptrs,
                         *const *td = (const uint8_t *const *)down->expert_ptrs;
    const unsigned ku = (unsigned)slots;
    /* weight rows per warp, gate·up's counting gate and up: 2 (H200, tg128: qwen3-30b-a3b@24
     * 553 / 539 / 477 tok/s at 2 / 4 / 8, qwen3.6-35b-a3b 305 / 298; docs/experiments.md) */
#define VEC_GU(RR)                                                                                                 \
    MOE_Q8_DISPATCH(gate->type,                                                                                    \
                    pdl_launch(cb, moe_vec_gate_up_kernel<TT, RR>,                                                 \
                               dim3((unsigned)((n_ff + (RR / 2) * MMVQ_WARPS - 1) / ((RR / 2) * MMVQ_WARPS)), ku), \
                               dim3(MMVQ_WARPS * 32), 0, G, U, tg, tu, gate->row_bytes, n_embd, n_ff, n_expert, ids, \
                               (const int8_t *)cb->xq, (const float2 *)cb->xds, h, Gs, Us, k, xc_cached,     \
                               xc_counts))
#define VEC_DOWN(RR)                                                                                               \
    MOE_Q8_DISPATCH(down->type,                                                                                    \
                    pdl_launch(cb, moe_vec_down_kernel<TT, RR>,                                                    \
                               dim3((unsigned)((n_embd + RR * MMVQ_WARPS - 1) / (RR * MMVQ_WARPS)), ku),           \
                               dim3(MMVQ_WARPS * 32), 0, D, td, down->row_bytes, n_ff, n_embd, n_expert, ids,      \
                               (const int8_t *)cb->xq, (const float2 *)cb->xds, dout, Ds, k))
    /* the cache's routing counters, when armed (bk_cuda_expert_count_arm), counted by the gate·up launch */
    const int32_t *xc_cached = cb->xc_cached;
    uint32_t *xc_counts = cb->xc_counts;
    if (!(cb->ablate & ABL_MOE_GU)) {
        VEC_GU(2)
        cb->xc_taken = xc_counts != NULL;
        cb->xc_counts = NULL;
    }
    /* h quantized by a launch of its own: done instead by each slot's last gate·up block (a counter
     * per slot), one token was slower on the H200 (qwen3-30b-a3b tg128 291.6 against 306.3,
     * qwen3.6-35b-a3b 328.0 against 339.3): the last block's serial tail cost more than the launch */
    if (!(cb->ablate & ABL_MOE_HQ)) cuda_mmvq_quantize(cb, h, n_ff, slots);
    if (!(cb->ablate & ABL_MOE_DOWN) && moe_down_comb(cb, down, Ds, n_ff, n_embd, n_expert, ids, weights, k, sh_logit,
                                                      out, residual ? 1 : 0))
        return true;
    if (!(cb->ablate & ABL_MOE_DOWN)) {
        VEC_DOWN(2)
    }
#undef VEC_GU
#undef VEC_DOWN
    if (cb->ablate & ABL_MOE_COMB) return true;
    if (residual)
        pdl_launch(cb, moe_combine_residual_kernel, dim3((unsigned)((n_embd + 255) / 256)), dim3(256), 0,
                   (const float *)dout, weights, ids, k, n_embd, sh ? sh_logit : NULL, out);
    else
        pdl_launch(cb, moe_combine_kernel, dim3((unsigned)((n_embd + 255) / 256)), dim3(256), 0, (const float *)dout,
                   weights, ids, 1, k, n_embd, out);
    return true;
}

/* The checks and scratch of moe_ffn: false after recording an error. */
static bool moe_prepare(cuda_backend *cb, const bk_weight *gate, const bk_weight *up, const bk_weight *down, int k) {
    const int n_expert = gate->n_expert > 0 ? gate->n_expert : 1;
    const int64_t n_ff = gate->n_out / n_expert, n_embd = gate->n_in;
    /* k may exceed n_expert: a tensor-parallel rank holds a slice of the experts, the other slots -1 */
    if (n_expert > BK_MOE_MAX_EXPERTS || k < 1 || k > BK_MOE_MAX_EXPERTS || up->n_out != gate->n_out ||
        up->n_in != n_embd || down->n_in != n_ff || down->n_out != n_expert * n_embd ||
        !cuda_type_supported(gate->type) || !cuda_type_supported(up->type) || !cuda_type_supported(down->type) ||
        !gate->expert_ptrs != !up->expert_ptrs || !gate->expert_ptrs != !down->expert_ptrs) {
        cuda_set_error(cb, bk_fail(BRISK_ERR_INVALID_ARG, "cuda moe_ffn: expert tensors %s, %s, %s do not fit",
                                   gate->name, up->name, down->name));
        return false;
    }
    /* sizes first: a whole chunk, whatever n, so a model's later calls never regrow */
    return moe_reserve(cb, bk_cuda_moe_scratch_bytes(n_embd, n_ff, n_expert, k));
}

static void moe_launched(cuda_backend *cb) { CU_LAUNCHED(cb); } /* (CU_LAUNCHED returns void on an error) */

/* One token's MoE closing the residual: the shared expert (if any) as slot k of the one-token
 * kernels where its tensors match the routed ones. */
extern "C" bool cuda_moe_ffn_shared(bk_backend *be, const bk_weight *gate, const bk_weight *up, const bk_weight *down,
                                    const bk_weight *gs, const bk_weight *us, const bk_weight *ds, const float *h,
                                    int n, const int32_t *ids, const float *weights, int k, const float *sh_logit,
                                    float *x) {
    cuda_backend *cb = (cuda_backend *)be;
    CU_ABLATE(cb, ABL_MOE, true);
    const int n_expert = gate->n_expert > 0 ? gate->n_expert : 1;
    const int64_t n_ff = gate->n_out / n_expert, n_embd = gate->n_in;
    if (n != 1 || cb->moe_shared_off || cb->moe_q8_off || !cb->xq || gate->type != up->type ||
        gate->row_bytes != up->row_bytes || !cuda_mmvq_supported(gate->type, n_embd) ||
        !cuda_mmvq_supported(down->type, n_ff) || !gs != !us || !gs != !ds || !gs != !sh_logit)
        return false;
    if (gs && (gs->type != gate->type || us->type != up->type || ds->type != down->type || gs->n_in != n_embd ||
               gs->n_out != n_ff || us->n_in != n_embd || us->n_out != n_ff || ds->n_in != n_ff ||
               ds->n_out != n_embd || gs->row_bytes != gate->row_bytes || us->row_bytes != up->row_bytes ||
               ds->row_bytes != down->row_bytes || !gs->dev || !us->dev || !ds->dev))
        return false;
    if (!moe_prepare(cb, gate, up, down, k)) return true; /* the error is recorded */
    const bk_weight *sh[3] = {gs, us, ds};
    if (!moe_vec(cb, gate, up, down, gs ? sh : NULL, true, h, ids, weights, k, sh_logit, x)) return false;
    moe_launched(cb);
    return true;
}

extern "C" void cuda_moe_ffn(bk_backend *be, const bk_weight *gate, const bk_weight *up, const bk_weight *down,
                             const float *x, int n, const int32_t *ids, const float *weights, int k, float *out) {
    cuda_backend *cb = (cuda_backend *)be;
    if (n <= 0) return;
    CU_ABLATE(cb, ABL_MOE);
    int n_expert = gate->n_expert > 0 ? gate->n_expert : 1;
    int64_t n_ff = gate->n_out / n_expert, n_embd = gate->n_in;
    if (!moe_prepare(cb, gate, up, down, k)) return;
    moe_layout l = moe_sizes(n_embd, n_ff, n_expert, k);
    const int chunk = l.chunk;
    char *p = (char *)cb->moe.buf;
    float *h = (float *)p, *dout = (float *)(p + l.b_h);
    int32_t *off = (int32_t *)(p + l.b_h + l.b_d), *act = (int32_t *)((char *)off + l.b_off),
            *n_act = (int32_t *)((char *)act + l.b_act), *ent = (int32_t *)((char *)n_act + l.b_na);
    int2 *tiles = (int2 *)((char *)ent + l.b_ent);
    int32_t *n_tiles = (int32_t *)((char *)tiles + l.b_tiles);
    const uint8_t *G = (const uint8_t *)gate->dev, *U = (const uint8_t *)up->dev, *D = (const uint8_t *)down->dev;
    /* experts placed one by one: their tables (device memory), else NULL */
    const uint8_t *const *tg = (const uint8_t *const *)gate->expert_ptrs,
                         *const *tu = (const uint8_t *const *)up->expert_ptrs,
                         *const *td = (const uint8_t *const *)down->expert_ptrs;
    bool both = gate->type == up->type && gate->row_bytes == up->row_bytes;
    const int rows_per_block = MOE_WARPS * MOE_ROWS;
    /* integer dots where the type has them and the quantized rows fit cuda_mmvq's buffer */
    bool q8_ok = !cb->moe_q8_off && cb->xq;
    bool q8_g = q8_ok && cuda_mmvq_supported(gate->type, n_embd), q8_u = q8_ok && cuda_mmvq_supported(up->type, n_embd),
         q8_d = q8_ok && cuda_mmvq_supported(down->type, n_ff);

    /* one token: the matrix-vector kernels above, no grouping */
    if (n == 1 && both && q8_g && q8_d && moe_vec(cb, gate, up, down, NULL, false, x, ids, weights, k, NULL, out)) {
        CU_LAUNCHED(cb);
        return;
    }
    for (int t0 = 0; t0 < n; t0 += chunk) {
        int nc = n - t0 < chunk ? n - t0 : chunk, nk = nc * k;
        unsigned slots = (unsigned)(nk < n_expert ? nk : n_expert);
        /* many entries: the integer-dot products as grouped tensor-core launches over tiles of tnt entries */
        int tnt = 0;
        if (!cb->moe_mmq_off && nk >= cb->moe_mmq_min && (q8_g || q8_u || q8_d)) {
            /* the tile by the mean entries an active expert, at most 16: two m16 tiles a warp at 16
             * entries keep two blocks an SM, while 32 take the SM alone (mmq_mt). H200, pp512 in one
             * chunk (session 11), tile 8 / 16 / 32 / 64: qwen3-30b-a3b (mean 32) - / 9,743 / 5,832 /
             * 7,420 tokens/s, qwen3.6-35b-a3b (mean 16) 7,001 / 8,927 / 4,890 / 5,915 */
            int mean = (nk + (int)slots - 1) / (int)slots;
            tnt = mean <= 8 ? 8 : 16;
        }
        const unsigned tile_cap = tnt ? slots + (unsigned)(nk / tnt) : 0; /* >= the tiles listed */
        const int32_t *ids_c = ids + (size_t)t0 * k;
        pdl_launch(cb, moe_group_kernel, dim3(1), dim3(GROUP_THREADS), 0, ids_c, nk, n_expert, tnt, off, act, n_act, ent,
                   tiles, n_tiles);
        moe_act ax = {x + (size_t)t0 * n_embd, cb->xq, cb->xds, n_embd, k, {tg, tu}};
        bool qx = (q8_g || q8_u) && (size_t)nc * n_embd <= cb->xq_cap && cuda_mmvq_prepare(cb, ax.x, n_embd, nc);
        /* the grouped mmq launch's arguments for h or dout (rows per expert n_rows, activations by entry / div) */
        mmq_args mq = {};
        mq.xq = cb->xq;
        mq.xds = cb->xds;
        mq.tiles = tiles;
        mq.n_tiles = n_tiles;
        mq.off = off;
        mq.ent = ent;
        mq.n_in = n_embd;
        mq.n_rows = n_ff;
        mq.y = h;
        mq.ldy = n_ff;
        mq.div = k;
        dim3 g1((unsigned)((n_ff + rows_per_block - 1) / rows_per_block), slots);
#define GATE_UP(T_ID, BOTH, Q8, W, RB, STAGE)                                                                      \
    do {                                                                                                           \
        if (Q8) {                                                                                                  \
            MOE_Q8_DISPATCH(T_ID, pdl_launch(cb, moe_gate_up_kernel<TT, BOTH, true>, g1, dim3(MOE_WARPS * 32), 0, \
                                             W, U, RB, n_ff, ax, off, act, n_act, ent, h, STAGE))                  \
        } else {                                                                                                   \
            BK_DISPATCH(T_ID, pdl_launch(cb, moe_gate_up_kernel<TT, BOTH, false>, g1, dim3(MOE_WARPS * 32), 0,    \
                                         W, U, RB, n_ff, ax, off, act, n_act, ent, h, STAGE))                      \
        }                                                                                                          \
    } while (0)
        if (both && tnt && qx && q8_g) { /* silu(gate) * up in the epilogue: 16 gate and 16 up rows per block */
            mq.W = G;
            mq.W2 = U;
            mq.Wtab = tg;
            mq.W2tab = tu;
            mq.row_bytes = gate->row_bytes;
            mmq_launch<true, true>(cb, cb->stream, gate->type, dim3((unsigned)((n_ff + 15) / 16), tile_cap), tnt, mq);
        } else if (both) {
            GATE_UP(gate->type, true, qx && q8_g, G, gate->row_bytes, 0);
        } else {
            dim3 gm((unsigned)((n_ff + MMQ_ROWS - 1) / MMQ_ROWS), tile_cap);
            if (tnt && qx && q8_g) {
                mq.W = G;
                mq.Wtab = tg;
                mq.row_bytes = gate->row_bytes;
                mq.mode = MMQ_STORE;
                mmq_launch<false, true>(cb, cb->stream, gate->type, gm, tnt, mq);
            } else {
                GATE_UP(gate->type, false, qx && q8_g, G, gate->row_bytes, 0);
            }
            if (tnt && qx && q8_u) {
                mq.W = U;
                mq.Wtab = tu;
                mq.row_bytes = up->row_bytes;
                mq.mode = MMQ_SILU_MUL;
                mmq_launch<false, true>(cb, cb->stream, up->type, gm, tnt, mq);
            } else {
                ax.wtab[0] = tu; /* stage 1's W is up */
                GATE_UP(up->type, false, qx && q8_u, U, up->row_bytes, 1);
            }
        }
#undef GATE_UP
        /* h's rows are quantized after gate/up have read x's (the same buffer, in stream order) */
        moe_act ah = {h, cb->xq, cb->xds, n_ff, 1, {td, NULL}};
        bool qh = q8_d && (size_t)nk * n_ff <= cb->xq_cap && cuda_mmvq_quantize(cb, h, n_ff, nk);
        dim3 g2((unsigned)((n_embd + rows_per_block - 1) / rows_per_block), slots);
        if (qh && tnt) {
            mq.W = D;
            mq.W2 = NULL;
            mq.Wtab = td;
            mq.W2tab = NULL;
            mq.row_bytes = down->row_bytes;
            mq.n_in = n_ff;
            mq.n_rows = n_embd;
            mq.y = dout;
            mq.ldy = n_embd;
            mq.div = 1;
            mq.mode = MMQ_STORE;
            mmq_launch<false, true>(cb, cb->stream, down->type,
                                    dim3((unsigned)((n_embd + MMQ_ROWS - 1) / MMQ_ROWS), tile_cap), tnt, mq);
        } else if (qh) {
            MOE_Q8_DISPATCH(down->type, pdl_launch(cb, moe_down_kernel<TT, true>, g2, dim3(MOE_WARPS * 32), 0, D,
                                                   down->row_bytes, n_embd, ah, off, act, n_act, ent, dout));
        } else {
            BK_DISPATCH(down->type, pdl_launch(cb, moe_down_kernel<TT, false>, g2, dim3(MOE_WARPS * 32), 0, D,
                                               down->row_bytes, n_embd, ah, off, act, n_act, ent, dout));
        }
        int64_t tot = (int64_t)nc * n_embd;
        pdl_launch(cb, moe_combine_kernel, dim3((unsigned)((tot + 255) / 256)), dim3(256), 0, (const float *)dout,
                   weights + (size_t)t0 * k, ids_c, nc, k, n_embd, out + (size_t)t0 * n_embd);
    }
    CU_LAUNCHED(cb);
}
