/* cuda_attention.cu — K/V write into the paged cache, then causal GQA
 * attention per (token, head) over the page table.
 *
 * One block of ATT_TILE threads per (GQA group of query heads, token,
 * split): for each tile of ATT_TILE positions a thread scores one position
 * (its K row against the group's queries in shared memory), warps update the
 * online softmaxes, and each thread accumulates V for head_dim/ATT_TILE
 * dimensions. Long contexts with few (token, group) pairs are split over
 * positions (flash-decoding): each split writes (max, sum, unnormalised
 * output) and a combine kernel merges them.
 *
 * Prefill batches (more than ATT_DEC_MAX_TOK entries) with head_dim 64, 128 or
 * 256 run on tensor cores in cuda_attn_prefill.cu (BRISK_CUDA_DISABLE=fa: here).
 *
 * Metadata: pos, slot and the block tables arrive as host pointers; they are
 * packed (tokens of one sequence share one copy of its table) and uploaded
 * to the META_ATT staging slot once per distinct batch, or, inside a step
 * (cuda_graph.cu), read from the step's upload. */
#include <math.h>
#include <string.h>

#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/cuda_pdl.cuh"

#define ATT_TILE 128
#define ATT_MAX_HD 256

/* Batches up to this many tokens (decode steps, batched decode of up to 64
 * sequences, short speculative runs) go to cuda_attn_decode.cu's warp-per-row
 * kernel; prefill stays on the tile kernel below. */
#define ATT_DEC_MAX_TOK 64

/* The KV element types (KT_*) are in cuda_internal.cuh. */

/* One block per token; for q8_0 and q4_0 each warp quantizes one 32-value block
 * (kvd % 32 == 0, blockDim a multiple of 32), as ggml's reference quantizers. */
template <int KT>
__global__ void kv_write_kernel(const float *k, const float *v, void *kc, void *vc, const int32_t *slot,
                                int kvd) {
    BK_TRACE_SCOPE();
    pdl_wait();
    int t = blockIdx.x;
    size_t off = (size_t)slot[t] * kvd;
    for (int i = threadIdx.x; i < kvd; i += blockDim.x) {
        kv_store<KT>(kc, off + i, k[(size_t)t * kvd + i]);
        kv_store<KT>(vc, off + i, v[(size_t)t * kvd + i]);
    }
}

template <int KT> __device__ __forceinline__ float kv_at(const void *base, size_t i) {
    if (KT == KT_Q8_0) {
        const uint8_t *b = (const uint8_t *)base + i / 32 * 34;
        return __half2float(*(const __half *)b) * (float)(int8_t)b[2 + i % 32];
    }
    if (KT == KT_Q4_0) { /* value j of a block: the low nibble of byte j (j < 16), else the high one of byte j - 16 */
        const uint8_t *b = (const uint8_t *)base + i / 32 * 18;
        const int j = (int)(i % 32), n = (b[2 + j % 16] >> (j < 16 ? 0 : 4)) & 15;
        return __half2float(*(const __half *)b) * (float)(n - 8);
    }
    return KT == KT_F16 ? __half2float(((const __half *)base)[i]) : ((const float *)base)[i];
}

/* One block per (G query heads, token, split). With G = the model's query
 * heads per KV head (1, 2, 4 or 8) a block serves a whole GQA group, so each
 * K and V row is read once for all of its heads; other ratios run G = 1
 * (`group` maps a query head to its KV head). Each thread scores one
 * position against the G queries; warps then run the G online-softmax
 * updates over the tile's scores in shared memory, and each thread
 * accumulates V for head_dim/ATT_TILE dimensions of every head. */
template <int KT, int G>
__global__ void __launch_bounds__(ATT_TILE)
attn_kernel(const float *q, const void *kc, const void *vc, int bs, const int32_t *pos, const int32_t *tab_off,
            const int32_t *tabs, int n_head, int n_head_kv, int group, int hd, float scale, int chunk, float *out,
            float *part) {
    __shared__ float q_s[G][ATT_MAX_HD], sc[G][ATT_TILE], m_s[G], l_s[G], f_s[G];
    __shared__ int64_t row_s[ATT_TILE];
    int h0 = blockIdx.x * G, kvh = h0 / group, t = blockIdx.y, sp = blockIdx.z;
    int tid = threadIdx.x, lane = tid % 32, warp = tid / 32;
    int np = pos[t] + 1, p_begin = sp * chunk, p_end = min(np, p_begin + chunk);
    const int32_t *table = tabs + tab_off[t];
    for (int i = tid; i < G * hd; i += ATT_TILE)
        q_s[i / hd][i % hd] = q[((size_t)t * n_head + h0 + i / hd) * hd + i % hd];
    if (tid < G) {
        m_s[tid] = -INFINITY;
        l_s[tid] = 0.0f;
    }
    __syncthreads();
    float acc[G][ATT_MAX_HD / ATT_TILE];
#pragma unroll
    for (int g = 0; g < G; g++)
#pragma unroll
        for (int a = 0; a < ATT_MAX_HD / ATT_TILE; a++) acc[g][a] = 0.0f;
    for (int p0 = p_begin; p0 < p_end; p0 += ATT_TILE) {
        int p = p0 + tid;
        float d[G];
#pragma unroll
        for (int g = 0; g < G; g++) d[g] = 0.0f;
        if (p < p_end) {
            int64_t slot = (int64_t)table[p / bs] * bs + p % bs;
            int64_t row = (slot * n_head_kv + kvh) * hd;
            row_s[tid] = row;
            if (KT == KT_F16 && hd % 8 == 0) {
                const uint4 *kr = (const uint4 *)((const __half *)kc + row);
                for (int i = 0; i < hd / 8; i++) {
                    uint4 u = kr[i];
                    const __half2 *h2 = (const __half2 *)&u;
#pragma unroll
                    for (int j = 0; j < 4; j++) {
                        float2 f = __half22float2(h2[j]);
#pragma unroll
                        for (int g = 0; g < G; g++) d[g] += q_s[g][8 * i + 2 * j] * f.x + q_s[g][8 * i + 2 * j + 1] * f.y;
                    }
                }
            } else {
                for (int i = 0; i < hd; i++) {
                    float k = kv_at<KT>(kc, row + i);
#pragma unroll
                    for (int g = 0; g < G; g++) d[g] += q_s[g][i] * k;
                }
            }
        }
#pragma unroll
        for (int g = 0; g < G; g++) sc[g][tid] = p < p_end ? d[g] * scale : -INFINITY;
        __syncthreads();
        for (int g = warp; g < G; g += ATT_TILE / 32) {
            float mx = -INFINITY;
            for (int j = lane; j < ATT_TILE; j += 32) mx = fmaxf(mx, sc[g][j]);
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            float m_new = fmaxf(m_s[g], mx), sum = 0.0f;
            for (int j = lane; j < ATT_TILE; j += 32) {
                float e = sc[g][j] == -INFINITY ? 0.0f : expf(sc[g][j] - m_new);
                sc[g][j] = e;
                sum += e;
            }
#pragma unroll
            for (int o = 16; o > 0; o >>= 1) sum += __shfl_xor_sync(0xffffffffu, sum, o);
            if (lane == 0) {
                float f = expf(m_s[g] - m_new);
                f_s[g] = f;
                l_s[g] = l_s[g] * f + sum;
                m_s[g] = m_new;
            }
        }
        __syncthreads();
        int nt = min(ATT_TILE, p_end - p0);
#pragma unroll
        for (int a = 0; a < ATT_MAX_HD / ATT_TILE; a++) {
            int dd = tid + a * ATT_TILE;
            if (dd >= hd) break;
            float o[G];
#pragma unroll
            for (int g = 0; g < G; g++) o[g] = acc[g][a] * f_s[g];
            for (int j = 0; j < nt; j++) {
                float v = kv_at<KT>(vc, row_s[j] + dd);
#pragma unroll
                for (int g = 0; g < G; g++) o[g] += sc[g][j] * v;
            }
#pragma unroll
            for (int g = 0; g < G; g++) acc[g][a] = o[g];
        }
        __syncthreads(); /* sc, row_s and f_s are rewritten by the next tile */
    }
#pragma unroll
    for (int g = 0; g < G; g++) {
        int h = h0 + g;
        if (!part) {
#pragma unroll
            for (int a = 0; a < ATT_MAX_HD / ATT_TILE; a++) {
                int dd = tid + a * ATT_TILE;
                if (dd < hd) out[((size_t)t * n_head + h) * hd + dd] = acc[g][a] / l_s[g];
            }
        } else {
            float *pp = part + (((size_t)t * n_head + h) * gridDim.z + sp) * (hd + 2);
            if (tid == 0) {
                pp[0] = m_s[g];
                pp[1] = l_s[g];
            }
#pragma unroll
            for (int a = 0; a < ATT_MAX_HD / ATT_TILE; a++) {
                int dd = tid + a * ATT_TILE;
                if (dd < hd) pp[2 + dd] = acc[g][a];
            }
        }
    }
}

/* Merges the splits of one (head, token): one thread per dimension. */
__global__ void attn_combine_kernel(const float *part, int n_split, int n_head, int hd, float *out) {
    int h = blockIdx.x, t = blockIdx.y;
    const float *pp = part + ((size_t)t * n_head + h) * n_split * (hd + 2);
    float M = -INFINITY;
    for (int s = 0; s < n_split; s++) M = fmaxf(M, pp[s * (hd + 2)]);
    float L = 0.0f;
    for (int s = 0; s < n_split; s++) L += pp[s * (hd + 2) + 1] * expf(pp[s * (hd + 2)] - M);
    for (int d = threadIdx.x; d < hd; d += blockDim.x) {
        float o = 0.0f;
        for (int s = 0; s < n_split; s++) o += pp[s * (hd + 2) + 2 + d] * expf(pp[s * (hd + 2)] - M);
        out[((size_t)t * n_head + h) * hd + d] = o / L;
    }
}

/* Packs pos, slot, per-token table offsets and the distinct tables; returns int32 count or -1. */
static int64_t pack_meta(cuda_backend *cb, const bk_attn_batch *ab, int bs, int *max_np) {
    int n = ab->n_tokens;
    int32_t *pk = (int32_t *)cb->pack;
    int64_t cap = (int64_t)(cb->meta_cap[META_ATT] / sizeof(int32_t)), cur = 3 * (int64_t)n;
    if (cur > cap) return -1;
    memcpy(pk, ab->pos, (size_t)n * 4);
    memcpy(pk + n, ab->slot, (size_t)n * 4);
    *max_np = 0;
    for (int t = 0; t < n;) {
        int u = t, len = 0; /* tokens [t, u) share one table pointer */
        for (; u < n && ab->block_table[u] == ab->block_table[t]; u++) {
            int need = ab->pos[u] / bs + 1;
            if (need > len) len = need;
            if (ab->pos[u] + 1 > *max_np) *max_np = ab->pos[u] + 1;
        }
        if (cur + len > cap) return -1;
        memcpy(pk + cur, ab->block_table[t], (size_t)len * 4);
        for (int i = t; i < u; i++) pk[2 * n + i] = (int32_t)(cur - 3 * n);
        cur += len;
        t = u;
    }
    return cur;
}

/* The q4_0h cache (quant/kv_rot.h): each head's K rows are stored as q4_0 blocks of R k, and q is
 * rotated alike (q . k = R q . R k), so the attention kernels read it as a plain q4_0 cache of
 * rotated keys. R = H D / sqrt(L) block by block of L values: one warp a block, PER = L / 32 values
 * a lane (value lane * PER + j); the butterflies of span h < PER stay in a lane, the others pair
 * lane with lane ^ (h / PER). The same additions in the same order as kv_rot_apply on the CPU: the
 * same bits, so the cache's bytes are the CPU's. Blocks [0, nbq) come from q, the rest from k. */
__device__ __forceinline__ float kv_rot_sign_dev(int i) { return ((uint32_t)(i + 1) * 2654435761u) >> 31 ? -1.0f : 1.0f; }

template <int PER>
__global__ void kv_rot_kernel(const float *__restrict__ q, const float *__restrict__ k, int64_t nbq, int64_t nb,
                              float *__restrict__ out, float s) {
    const int64_t w = ((int64_t)blockIdx.x * blockDim.x + threadIdx.x) / 32;
    const int lane = threadIdx.x & 31;
    if (w >= nb) return; /* (whole warps: w is the warp's) */
    const float *src = (w < nbq ? q + w * 32 * PER : k + (w - nbq) * 32 * PER) + lane * PER;
    float v[PER];
#pragma unroll
    for (int j = 0; j < PER; j++) v[j] = src[j] * kv_rot_sign_dev(lane * PER + j);
#pragma unroll
    for (int h = 1; h < PER; h *= 2)
#pragma unroll
        for (int i = 0; i < PER; i += 2 * h)
#pragma unroll
            for (int j = i; j < i + h; j++) {
                const float a = v[j], b = v[j + h];
                v[j] = a + b;
                v[j + h] = a - b;
            }
#pragma unroll
    for (int m = 1; m < 32; m *= 2)
#pragma unroll
        for (int j = 0; j < PER; j++) {
            const float p = __shfl_xor_sync(0xffffffffu, v[j], m);
            v[j] = (lane & m) ? p - v[j] : v[j] + p; /* the upper of a pair holds a - b, a the lower's */
        }
    float *dst = out + w * 32 * PER + lane * PER;
#pragma unroll
    for (int j = 0; j < PER; j++) dst[j] = v[j] * s;
}

/* For a q4_0h cache: q's rows and k's (if any) rotated into cb->rot, *q and *k pointed there, and *kv4
 * the cache viewed as q4_0; other caches pass through (*kv4 = *kv). False with the error recorded. */
static bool rot_q4_0h(cuda_backend *cb, const float **q, const float **k, const bk_kv_view *kv, bk_kv_view *kv4, int n,
                      int n_head, int n_head_kv, int head_dim) {
    *kv4 = *kv;
    if (kv->kv_type != BRISK_KV_Q4_0H) return true;
    kv4->kv_type = KT_Q4_0;
    if (head_dim % 32 || head_dim > ATT_MAX_HD) return true; /* attention_run refuses it */
    const size_t nq = (size_t)n * n_head * head_dim, nk = *k ? (size_t)n * n_head_kv * head_dim : 0;
    if (!cuda_scratch_reserve(cb, &cb->rot, (nq + nk) * sizeof(float), "q4_0h rotation")) return false;
    float *r = (float *)cb->rot.buf;
    int L = head_dim & -head_dim;
    if (L > 256) L = 256;
    const int64_t nbq = (int64_t)(nq / L), nb = (int64_t)((nq + nk) / L);
    const float s = 1.0f / sqrtf((float)L); /* as kv_rot_apply computes it */
    const dim3 grid((unsigned)((nb * 32 + 255) / 256));
    switch (L) {
    case 32: kv_rot_kernel<1><<<grid, 256, 0, cb->stream>>>(*q, *k, nbq, nb, r, s); break;
    case 64: kv_rot_kernel<2><<<grid, 256, 0, cb->stream>>>(*q, *k, nbq, nb, r, s); break;
    case 128: kv_rot_kernel<4><<<grid, 256, 0, cb->stream>>>(*q, *k, nbq, nb, r, s); break;
    default: kv_rot_kernel<8><<<grid, 256, 0, cb->stream>>>(*q, *k, nbq, nb, r, s); break;
    }
    *q = r;
    if (*k) *k = r + nq;
    return true;
}

/* The attention op; gate.g (NULL: none): the decode kernels gate their outputs (attention_gated). */
static void attention_run(cuda_backend *cb, const float *q, const float *k, const float *v, const bk_kv_view *kv,
                          const bk_attn_batch *ab, int n_head, int n_head_kv, int head_dim, float scale,
                          att_gate gate, const dec_rope &rope, float *out) {
    int n = ab->n_tokens;
    if (head_dim > ATT_MAX_HD) {
        cuda_set_error(cb, bk_fail(BRISK_ERR_UNSUPPORTED, "cuda attention: head_dim %d > %d", head_dim, ATT_MAX_HD));
        return;
    }
    int max_np = 0;
    const int32_t *d_pos, *d_slot, *d_off, *d_tabs;
    if (cb->step_on) { /* the step's upload; max_np is the length the step is shaped for */
        max_np = cb->st_np;
        d_pos = cb->st_pos;
        d_slot = cb->st_slot;
        d_off = cb->st_off;
        d_tabs = cb->st_tabs;
    } else {
        int64_t cnt = pack_meta(cb, ab, kv->block_size, &max_np);
        if (cnt < 0) {
            cuda_set_error(cb, bk_fail(BRISK_ERR_RANGE, "cuda attention: batch metadata exceeds the staging area"));
            return;
        }
        const int32_t *d = (const int32_t *)cuda_upload(cb, META_ATT, cb->pack, (size_t)cnt * 4);
        if (!d) return;
        d_pos = d;
        d_slot = d + n;
        d_off = d + 2 * n;
        d_tabs = d + 3 * n;
    }
    int kvd = n_head_kv * head_dim;
    int kt = kv->kv_type;
    if (kt_block_bytes(kt) && head_dim % 32 != 0) {
        cuda_set_error(cb, bk_fail(BRISK_ERR_UNSUPPORTED, "cuda attention: a %s KV cache needs head_dim %% 32 == 0",
                                   kt == KT_Q4_0 ? "q4_0" : "q8_0"));
        return;
    }
    void (*kw)(const float *, const float *, void *, void *, const int32_t *, int) =
        kt == KT_Q4_0   ? kv_write_kernel<KT_Q4_0>
        : kt == KT_Q8_0 ? kv_write_kernel<KT_Q8_0>
        : kt == KT_F16  ? kv_write_kernel<KT_F16>
                        : kv_write_kernel<KT_F32>;
    if (k) /* else qk_norm_rope_kv stored the step's rows */
        pdl_launch(cb, kw, dim3((unsigned)n), dim3(256), 0, k, v, kv->k, kv->v, d_slot, kvd);

    if (n <= ATT_DEC_MAX_TOK && cuda_attn_decode_supported(head_dim)) {
        bool quant = cuda_attn_decode(cb, q, kv, n, max_np, d_pos, d_off, d_tabs, n_head, n_head_kv, head_dim, scale,
                                      gate, rope, out);
        CU_LAUNCHED(cb);
        if (quant) { /* the output projection finds out quantized (cuda_mmvq_prepare) */
            cb->xq_src = out;
            cb->xq_n = n;
            cb->xq_dim = (int64_t)n_head * head_dim;
        }
        return;
    }
    /* prefill on tensor cores (cuda_attn_prefill.cu); BRISK_CUDA_DISABLE=fa keeps it on the tile kernel below */
    if (!cb->fa_off && n > ATT_DEC_MAX_TOK && cuda_attn_prefill_supported(cb, head_dim, n_head, n_head_kv)) {
        cuda_attn_prefill(cb, q, kv, n, max_np, d_pos, d_off, d_tabs, n_head, n_head_kv, head_dim, scale, out);
        CU_LAUNCHED(cb);
        return;
    }
    /* GQA groups of 2, 4 or 8 query heads per KV head run as one block each */
    int group = n_head / n_head_kv, G = group;
    if ((G != 2 && G != 4 && G != 8) || cb->attn_gqa_off) G = 1;
    /* Split over positions when the blocks alone leave most SMs idle. */
    int64_t pairs = (int64_t)n * (n_head / G);
    int n_split = 1;
    if (pairs < 2 * cb->n_sm && max_np > 2 * ATT_TILE) {
        n_split = (int)((2 * cb->n_sm + pairs - 1) / pairs);
        int by_len = (max_np + ATT_TILE - 1) / ATT_TILE;
        if (n_split > by_len) n_split = by_len;
        if (n_split > 64) n_split = 64;
        while (n_split > 1 && (int64_t)n * n_head * n_split * (head_dim + 2) > (int64_t)cb->att_part_cap) n_split--;
    }
    int chunk = (max_np + n_split - 1) / n_split;
    chunk = (chunk + ATT_TILE - 1) / ATT_TILE * ATT_TILE;
    float *part = n_split > 1 ? cb->att_part : NULL;
    dim3 grid(n_head / G, n, n_split);
#define ATT_LAUNCH(FF, GG)                                                                                     \
    attn_kernel<FF, GG><<<grid, ATT_TILE, 0, cb->stream>>>(q, kv->k, kv->v, kv->block_size, d_pos, d_off, d_tabs, \
                                                          n_head, n_head_kv, group, head_dim, scale, chunk, out, part)
#define ATT_G(FF)                      \
    switch (G) {                       \
    case 2: ATT_LAUNCH(FF, 2); break;  \
    case 4: ATT_LAUNCH(FF, 4); break;  \
    case 8: ATT_LAUNCH(FF, 8); break;  \
    default: ATT_LAUNCH(FF, 1); break; \
    }
    if (kt == KT_Q4_0) ATT_G(KT_Q4_0)
    else if (kt == KT_Q8_0) ATT_G(KT_Q8_0)
    else if (kt == KT_F16) ATT_G(KT_F16)
    else ATT_G(KT_F32)
#undef ATT_G
#undef ATT_LAUNCH
    if (part) attn_combine_kernel<<<dim3(n_head, n), 128, 0, cb->stream>>>(part, n_split, n_head, head_dim, out);
    CU_LAUNCHED(cb);
}

extern "C" void cuda_attention(bk_backend *be, const float *q, const float *k, const float *v,
                               const bk_kv_view *kv, const bk_attn_batch *ab, int n_head, int n_head_kv,
                               int head_dim, float scale, float *out) {
    cuda_backend *cb = (cuda_backend *)be;
    if (ab->n_tokens <= 0) return;
    CU_ABLATE(cb, ABL_ATTN);
    bk_kv_view kv4;
    if (!rot_q4_0h(cb, &q, &k, kv, &kv4, ab->n_tokens, n_head, n_head_kv, head_dim)) return;
    attention_run(cb, q, k, v, &kv4, ab, n_head, n_head_kv, head_dim, scale, att_gate{}, dec_rope{}, out);
}

/* backend.h's attention_gated: the decode kernels multiply each output by sigmoid(its gate) before
 * they store (and quantize) it, as sigmoid_mul would after them: the same bits, and the gate's
 * launch and the output projection's quantize launch go (qwen35's gated attention at decode).
 * False, with nothing launched, where the decode kernels do not run (prefill-sized batches, other
 * head sizes, BRISK_CUDA_DISABLE=attn_gate). */
extern "C" bool cuda_attention_gated(bk_backend *be, const float *q, const float *k, const float *v,
                                     const bk_kv_view *kv, const bk_attn_batch *ab, int n_head, int n_head_kv,
                                     int head_dim, float scale, const float *gate, int gate_pitch, float *out) {
    cuda_backend *cb = (cuda_backend *)be;
    const int n = ab->n_tokens;
    if (n <= 0 || cb->attn_gate_off || (cb->ablate & ABL_ATTN) || n > ATT_DEC_MAX_TOK ||
        !cuda_attn_decode_supported(head_dim) || head_dim > ATT_MAX_HD)
        return false;
    bk_kv_view kv4;
    if (rot_q4_0h(cb, &q, &k, kv, &kv4, n, n_head, n_head_kv, head_dim))
        attention_run(cb, q, k, v, &kv4, ab, n_head, n_head_kv, head_dim, scale, att_gate{gate, gate_pitch}, dec_rope{},
                      out);
    return true;
}

/* backend.h's attention_rope: one decode step's QK-norm, rope and cache write inside the decode
 * attention's launch (cuda_attn_decode.cu's dec_rope): each block normalises and rotates its own q
 * heads from the product's rows, and the block that holds the step's position takes that K/V row
 * from its shared memory, in the cache's format, instead of from the cache; one block per (token, KV
 * head) writes it to the cache. The same bits as qk_norm_rope_kv then the attention; the QK-norm +
 * rope launch goes. Inside a step only (the cache rows on the device), for tokens of different
 * sequences (a token never reads another token's new row); false, with nothing launched, otherwise
 * (and with BRISK_CUDA_DISABLE=attn_rope). */
extern "C" bool cuda_attention_rope(bk_backend *be, const bk_attn_rope_in *in, const bk_kv_view *kv,
                                    const bk_attn_batch *ab, int n_head, int n_head_kv, int head_dim, float scale,
                                    float *out) {
    cuda_backend *cb = (cuda_backend *)be;
    const int n = ab->n_tokens;
    const bk_rope_params *rp = in->rope;
    if (n <= 0 || cb->attn_rope_off || !cb->step_on || cb->kvfuse_off || cb->qkrope_off || kv->kv_type == BRISK_KV_Q4_0H ||
        (cb->ablate & (ABL_ATTN | ABL_ROPE)) || (in->gate && cb->attn_gate_off) || n > ATT_DEC_MAX_TOK ||
        !cuda_attn_decode_supported(head_dim) || !kv->k || (kt_block_bytes(kv->kv_type) && head_dim % 32) ||
        rp->n_rot > head_dim || rp->n_rot % 2 || (in->q_norm && in->q_norm->type != QT_F32) ||
        (in->k_norm && in->k_norm->type != QT_F32))
        return false;
    for (int t = 1; t < n; t++) /* one token a sequence: tokens of one sequence share a page table */
        for (int u = 0; u < t; u++)
            if (ab->block_table[t] == ab->block_table[u]) return false;
    dec_rope r = {};
    const int32_t *d_pos;
    if (!cuda_rope_setup(cb, n, n_head, head_dim, ab->pos, rp, &r.a, &d_pos, &r.ff)) return true; /* error set */
    r.qs = in->q_src;
    r.qp = in->q_pitch;
    r.k = in->k;
    r.v = in->v;
    r.qw = in->q_norm ? (const float *)in->q_norm->dev : NULL;
    r.kw = in->k_norm ? (const float *)in->k_norm->dev : NULL;
    r.eps = in->eps;
    r.slot = cb->st_slot;
    attention_run(cb, in->q, NULL, NULL, kv, ab, n_head, n_head_kv, head_dim, scale,
                  att_gate{in->gate, in->gate_pitch}, r, out);
    return true;
}

/* The decode path's choice of kernel, as cuda_attn_decode makes it (cuda_attn_decode.cu: it should
 * call this when that file is next edited, so the rule lives once). */
extern "C" bool bk_cuda_attn_on_mma(bk_backend *be, int kv_type, int n_head, int n_head_kv, int head_dim, int n,
                                    int max_np) {
    const cuda_backend *cb = (const cuda_backend *)be;
    if (kv_type == BRISK_KV_Q4_0H) kv_type = KT_Q4_0; /* (read as q4_0: rot_q4_0h) */
    return n > 0 && n <= ATT_DEC_MAX_TOK && cuda_attn_decode_supported(head_dim) && cb->attn_mma_min > 0 &&
           max_np >= cb->attn_mma_min && !cb->attn_gqa_off &&
           cuda_attn_mma_supported(cb, kv_type, head_dim, n_head, n_head_kv);
}
