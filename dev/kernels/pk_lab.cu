/* pk_lab.cu — issue 30's persistent decode kernel, first version: one cooperative launch a step, a
 * block an SM, each block running its list of pk_plan.h's instructions (dev/kernels/pk_plan.c),
 * waiting on counters in global memory. Weights in their file's types where brisk's integer-dot
 * groups read them (Q4_0, Q8_0, Q4_K, Q5_K, Q6_K: group_load and group_dot of cuda_internal.cuh on
 * int8 activations, quantized as the decode kernels do), else dequantized to f16 at load; an f16
 * cache. The work of each instruction is pk_emu.c's, written for a block of PK_THREADS: a slice's
 * rows a warp each, the norm (and the activations' quantization) before it into shared memory; the
 * attention's split a warp per position stride, merged by the group's last split.
 *
 * What it is for: the counters' machinery and the instruction lists on the GPU, checked against
 * brisk's own CUDA decode (logits and greedy tokens) and timed beside it on the same file: the
 * step's bytes over its time, against `brisk bench`'s tg.
 *
 * The weights' reads (pk_lab's 5th argument, prefetch): 0, each warp loads its rows as it computes;
 * 1, also the next instruction's rows asked into the L2; 2-8, the block's dense products streamed
 * by the bulk-copy engine through a ring of that many shared-memory buffers, as far ahead of the
 * counters as the ring allows (the first GPU run, session 36: one warp's loads of a row at a time
 * left each SM streaming at a sixth of its share of the bandwidth, 503 GB/s on qwen3-8b). Not yet
 * here: the tensor-core attention of cuda_attn_mma.cu, the MoE's expert rows in the ring.
 *
 *   nvcc -std=c++17 -O3 -arch=sm_90a -Iinclude -Isrc -Idev/kernels dev/kernels/pk_lab.cu dev/kernels/pk_plan.c \
 *     build/libbrisk.a -o build/pk_lab -lpcre2-8 -lcjson -lmicrohttpd -lcurl -ldl
 *   build/pk_lab MODEL.gguf [n_tok 1] [steps 64] [depth 512] [prefetch 1] [slice_kb 64]
 * (a dense llama / qwen2 / qwen3 or a qwen3moe file: brisk synth --preset qwen3-8b --type q4_k_m --repeat-rows 256;
 * qwen3moe's layers as pk_plan.h's ROUTE / TOPK / EGU / EDOWN instructions) */
#include <cuda_fp16.h>
#include <cooperative_groups.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <algorithm>
#include <vector>

#include "backend/cuda/cuda_internal.cuh" /* group_load, group_dot, q8_1_store_lane */
#include "backend/cuda/cuda_bulk.cuh"     /* bulk_copy_g2s, mbar_* */
extern "C" {
#include "brisk.h"
#include "model/model.h"
#include "pk_plan.h"
}

#define PK_THREADS 512
#define PK_WARPS (PK_THREADS / 32)
#define PK_MAX_TOK 4
#define PK_MAX_HD 256

#define CK(x)                                                                                  \
    do {                                                                                       \
        cudaError_t e_ = (x);                                                                  \
        if (e_ != cudaSuccess) {                                                               \
            fprintf(stderr, "%s:%d: %s: %s\n", __FILE__, __LINE__, #x, cudaGetErrorString(e_)); \
            exit(1);                                                                           \
        }                                                                                      \
    } while (0)

/* A weight matrix on the device: rows of row_bytes in a type group_load reads, or f16 */
struct pk_mat {
    const uint8_t *p;
    size_t rb;
    int type, n_in;
};

struct pk_layer {
    pk_mat q, k, v, o, gate, up, down;
    pk_mat router, gate_e, up_e, down_e; /* qwen3moe (the experts' rows stacked, as in the file) */
    const float *attn_norm, *ffn_norm, *q_norm, *k_norm; /* q_norm, k_norm NULL: none */
};

struct pk_args {
    const pk_inst *inst;
    const int *w_off, *w_idx;
    unsigned *cnt, *merge; /* never reset: step `gen` (1, 2, ...) waits for gen times a count */
    unsigned gen;
    const pk_layer *L;
    pk_mat wout;
    const float *out_norm;
    int nl, d, nh, nkv, hd, nff, nv, n_tok, n_ctx, n_split, pos_tile;
    int in_w; /* floats a token of the widest staged row (shared memory's layout) */
    int prefetch; /* 1: the next instruction's weights asked into the L2 by the bulk-copy engine; 2..8: the
                     weights streamed into a ring of that many shared-memory buffers (ring_bytes each) */
    int ring;
    uint32_t ring_bytes;
    size_t ring_off; /* the ring's offset in the dynamic shared memory (after the staged input) */
    int *stuck;   /* a wait past the watchdog's limit writes its instruction here and the kernel ends */
    float eps;
    int n_rot, neox;
    float freq_base, freq_scale, attn_factor;
    const int *pos;
    float *x, *q, *k, *v, *att, *h, *logits;
    int ne, k_used, nffe;          /* qwen3moe: experts, routed a token, their FFN width */
    float *lg, *wts, *he;          /* (n_tok, ne) router logits; (n_tok, k) weights; (n_tok, k, nffe) SwiGLU */
    int *ids;                      /* (n_tok, k) the routed experts */
    __half *kc, *vc;
    float *po, *pm, *pl;
};

__device__ __forceinline__ float warp_sum(float s) {
    for (int o = 16; o; o >>= 1) s += __shfl_xor_sync(0xffffffffu, s, o);
    return s;
}

/* the block's sum of v (every thread's), through red[PK_WARPS] */
__device__ float block_sum(float v, float *red) {
    v = warp_sum(v);
    __syncthreads();
    if (threadIdx.x % 32 == 0) red[threadIdx.x / 32] = v;
    __syncthreads();
    float s = 0.0f;
    for (int w = 0; w < PK_WARPS; w++) s += red[w];
    return s;
}

/* out_s[t][i] = rms(x[t]) * w[i] for the step's tokens (x written by other blocks: read through L2) */
__device__ void norm_rows(const pk_args &a, const float *x, const float *w, float *out_s, float *red) {
    for (int t = 0; t < a.n_tok; t++) {
        float ss = 0.0f;
        for (int i = threadIdx.x; i < a.d; i += PK_THREADS) {
            float v = __ldcg(x + (size_t)t * a.d + i);
            out_s[t * a.d + i] = v;
            ss += v * v;
        }
        float r = rsqrtf(block_sum(ss, red) / (float)a.d + a.eps);
        for (int i = threadIdx.x; i < a.d; i += PK_THREADS) out_s[t * a.d + i] *= r * w[i];
    }
    __syncthreads();
}

/* in_s[t][i] = src[t][i], n values a row, rows rows (0: n_tok) */
__device__ void stage(const pk_args &a, const float *src, int n, float *in_s, int rows = 0) {
    for (int t = 0; t < (rows ? rows : a.n_tok); t++)
        for (int i = threadIdx.x; i < n; i += PK_THREADS) in_s[t * n + i] = __ldcg(src + (size_t)t * n + i);
    __syncthreads();
}

/* acc[t] += W's row (n f16 weights, n % 8 == 0) . in_s[t], this lane's share: 16-byte loads, four in
 * flight (a warp streams 2 KB at a time) */
__device__ __forceinline__ void row_dot(const __half *w, int n, const float *in_s, int n_tok, float (&acc)[PK_MAX_TOK]) {
    const int lane = threadIdx.x % 32;
    int c = lane * 8;
    for (; c + 3 * 256 < n; c += 4 * 256) {
        uint4 u[4];
#pragma unroll
        for (int j = 0; j < 4; j++) u[j] = __ldg((const uint4 *)(w + c + j * 256));
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const __half2 *h2 = (const __half2 *)&u[j];
            float2 f[4] = {__half22float2(h2[0]), __half22float2(h2[1]), __half22float2(h2[2]), __half22float2(h2[3])};
            const int cc = c + j * 256;
#pragma unroll
            for (int t = 0; t < PK_MAX_TOK; t++) {
                if (t >= n_tok) break;
                const float *xi = in_s + t * n + cc;
                acc[t] += f[0].x * xi[0] + f[0].y * xi[1] + f[1].x * xi[2] + f[1].y * xi[3] + f[2].x * xi[4] +
                          f[2].y * xi[5] + f[3].x * xi[6] + f[3].y * xi[7];
            }
        }
    }
    for (; c < n; c += 256) {
        uint4 u = __ldg((const uint4 *)(w + c));
        const __half2 *h2 = (const __half2 *)&u;
        float2 f[4] = {__half22float2(h2[0]), __half22float2(h2[1]), __half22float2(h2[2]), __half22float2(h2[3])};
        for (int t = 0; t < n_tok; t++) {
            const float *xi = in_s + t * n + c;
            acc[t] += f[0].x * xi[0] + f[0].y * xi[1] + f[1].x * xi[2] + f[1].y * xi[3] + f[2].x * xi[4] +
                      f[2].y * xi[5] + f[3].x * xi[6] + f[3].y * xi[7];
        }
    }
}

/* xq_s / xds_s: the staged rows in_s (rows x n floats; rows 0: n_tok) as int8 groups of 32 and their
 * (d, d sum) */
__device__ void quant_rows(const pk_args &a, const float *in_s, int n, int8_t *xq_s, float2 *xds_s, int rows = 0) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, ng = n / 32;
    for (int t = 0; t < (rows ? rows : a.n_tok); t++)
        for (int g = warp; g < ng; g += PK_WARPS)
            q8_1_store_lane(in_s[t * n + g * 32 + lane], g * 32 + lane, lane, xq_s + t * n, xds_s + t * ng);
    __syncthreads();
}

/* acc[t] += row . x[t], this lane's groups (two loaded before their dots) */
template <int T>
__device__ __forceinline__ void row_dot_q(const uint8_t *row, int n, const int8_t *xq_s, const float2 *xds_s,
                                          int n_tok, float (&acc)[PK_MAX_TOK]) {
    const int lane = threadIdx.x % 32, ng = n / 32;
    int g = lane;
    for (; g + 32 < ng; g += 64) {
        wgroup q0, q1;
        group_load<T>(row, g, q0);
        group_load<T>(row, g + 32, q1);
        for (int t = 0; t < n_tok; t++) {
            acc[t] += group_dot(q0, (const int *)(xq_s + t * n + g * 32), xds_s[t * ng + g]);
            acc[t] += group_dot(q1, (const int *)(xq_s + t * n + (g + 32) * 32), xds_s[t * ng + g + 32]);
        }
    }
    if (g < ng) {
        wgroup q0;
        group_load<T>(row, g, q0);
        for (int t = 0; t < n_tok; t++) acc[t] += group_dot(q0, (const int *)(xq_s + t * n + g * 32), xds_s[t * ng + g]);
    }
}

/* acc[t] += an f32 row (n % 4 == 0) . in_s[t] (the router: kept in f32, as brisk keeps it) */
__device__ __forceinline__ void row_dot_f32(const float *w, int n, const float *in_s, int n_tok, float (&acc)[PK_MAX_TOK]) {
    for (int c = (threadIdx.x % 32) * 4; c < n; c += 128) {
        const float4 u = __ldg((const float4 *)(w + c));
        for (int t = 0; t < n_tok; t++) {
            const float *xi = in_s + t * n + c;
            acc[t] += u.x * xi[0] + u.y * xi[1] + u.z * xi[2] + u.w * xi[3];
        }
    }
}

/* acc[t] += w's row r . x[t]: the f16 path on the float rows, the others on the int8 ones */
__device__ __forceinline__ void mat_dot(const pk_mat &w, int r, const float *xf_s, const int8_t *xq_s,
                                        const float2 *xds_s, int n_tok, float (&acc)[PK_MAX_TOK]) {
    const uint8_t *row = w.p + (size_t)r * w.rb;
    switch (w.type) {
    case QT_F16: row_dot((const __half *)row, w.n_in, xf_s, n_tok, acc); break;
    case QT_F32: row_dot_f32((const float *)row, w.n_in, xf_s, n_tok, acc); break;
    case QT_Q4_0: row_dot_q<QT_Q4_0>(row, w.n_in, xq_s, xds_s, n_tok, acc); break;
    case QT_Q8_0: row_dot_q<QT_Q8_0>(row, w.n_in, xq_s, xds_s, n_tok, acc); break;
    case QT_Q4_K: row_dot_q<QT_Q4_K>(row, w.n_in, xq_s, xds_s, n_tok, acc); break;
    case QT_Q5_K: row_dot_q<QT_Q5_K>(row, w.n_in, xq_s, xds_s, n_tok, acc); break;
    case QT_Q6_K: row_dot_q<QT_Q6_K>(row, w.n_in, xq_s, xds_s, n_tok, acc); break;
    default: break;
    }
}

/* as the CPU's rope (and brisk's rope_cs): theta by repeated multiplication, single roundings, so the
 * angles match brisk's at any position; on v (a warp's smem row) */
__device__ void rope_row(const pk_args &a, float *v, int pos) {
    const int lane = threadIdx.x % 32;
    const float theta_scale = powf(a.freq_base, -2.0f / (float)a.n_rot);
    __syncwarp();
    for (int i0 = 2 * lane; i0 < a.n_rot; i0 += 64) {
        float theta = (float)pos;
        for (int k = 0; k < i0 / 2; k++) theta = __fmul_rn(theta, theta_scale);
        const float th = __fmul_rn(a.freq_scale, theta);
        float c = cosf(th) * a.attn_factor, s = sinf(th) * a.attn_factor;
        int ia = a.neox ? i0 / 2 : i0, ib = a.neox ? i0 / 2 + a.n_rot / 2 : i0 + 1;
        float x0 = v[ia], x1 = v[ib];
        v[ia] = x0 * c - x1 * s;
        v[ib] = x0 * s + x1 * c;
    }
    __syncwarp();
}

/* a head (hd values at g, global) normed (w or NULL) into the warp's smem row, rotated */
__device__ void head_norm_rope(const pk_args &a, const float *g, const float *w, int pos, float *row) {
    const int lane = threadIdx.x % 32;
    float ss = 0.0f;
    for (int i = lane; i < a.hd; i += 32) {
        row[i] = __ldcg(g + i);
        ss += row[i] * row[i];
    }
    ss = warp_sum(ss);
    if (w) {
        float r = rsqrtf(ss / (float)a.hd + a.eps);
        for (int i = lane; i < a.hd; i += 32) row[i] *= r * w[i];
    }
    rope_row(a, row, pos);
}

/* Returns whether this split merged its group (the group's last to finish). */
__device__ bool run_attn(const pk_args &a, const pk_inst &in, float *sm, float *red) {
    const int t = in.tok, h = in.kvh, l = in.layer, hd = a.hd, group = a.nh / a.nkv;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, per = hd / 32;
    const int np = a.pos[t] + 1;
    int chunk = (np + a.n_split - 1) / a.n_split;
    chunk = (chunk + a.pos_tile - 1) / a.pos_tile * a.pos_tile;
    const int p0 = min(np, in.split * chunk), p1 = min(np, p0 + chunk);
    const float scale = rsqrtf((float)hd);
    float *qs = sm;                        /* (group, hd) */
    float *wm = qs + group * hd;           /* (PK_WARPS, group) the warps' maxima */
    float *wl = wm + PK_WARPS * group;     /* ... sums */
    float *wo = wl + PK_WARPS * group;     /* (PK_WARPS, group, hd) ... outputs */
    const int nq = a.nh * hd;
    for (int i = threadIdx.x; i < group * hd; i += PK_THREADS) qs[i] = __ldcg(a.q + (size_t)t * nq + (size_t)h * group * hd + i);
    __syncthreads();
    float m[16], s[16], o[16][PK_MAX_HD / 32];
    for (int j = 0; j < group; j++) {
        m[j] = -INFINITY, s[j] = 0.0f;
        for (int e = 0; e < per; e++) o[j][e] = 0.0f;
    }
    for (int p = p0 + warp; p < p1; p += PK_WARPS) {
        const size_t at = (((size_t)l * a.n_ctx + p) * a.nkv + h) * hd;
        float kv[PK_MAX_HD / 32], vv[PK_MAX_HD / 32];
        for (int e = 0; e < per; e++) {
            kv[e] = __half2float(__ldcg(a.kc + at + lane + 32 * e));
            vv[e] = __half2float(__ldcg(a.vc + at + lane + 32 * e));
        }
        for (int j = 0; j < group; j++) {
            float d = 0.0f;
            for (int e = 0; e < per; e++) d += qs[j * hd + lane + 32 * e] * kv[e];
            d = warp_sum(d) * scale;
            float mn = fmaxf(m[j], d), f = __expf(m[j] - mn), w = __expf(d - mn);
            s[j] = s[j] * f + w;
            for (int e = 0; e < per; e++) o[j][e] = o[j][e] * f + w * vv[e];
            m[j] = mn;
        }
    }
    for (int j = 0; j < group; j++) {
        if (lane == 0) wm[warp * group + j] = m[j], wl[warp * group + j] = s[j];
        for (int e = 0; e < per; e++) wo[((size_t)warp * group + j) * hd + lane + 32 * e] = o[j][e];
    }
    __syncthreads();
    /* the block's partial of this split: warps merged */
    const size_t g0 = (((size_t)t * a.nkv + h) * a.n_split + in.split) * group;
    for (int i = threadIdx.x; i < group * hd; i += PK_THREADS) {
        const int j = i / hd, e = i % hd;
        float M = -INFINITY, S = 0.0f, O = 0.0f;
        for (int w = 0; w < PK_WARPS; w++) M = fmaxf(M, wm[w * group + j]);
        for (int w = 0; w < PK_WARPS; w++) {
            if (wl[w * group + j] == 0.0f) continue;
            float f = __expf(wm[w * group + j] - M);
            S += wl[w * group + j] * f;
            O += wo[((size_t)w * group + j) * hd + e] * f;
        }
        a.po[(g0 + j) * hd + e] = O;
        if (e == 0) a.pm[g0 + j] = M, a.pl[g0 + j] = S;
    }
    __threadfence(); /* every writer's fence, then the count (release) */
    __syncthreads();
    /* the group's last split merges */
    __shared__ unsigned last;
    if (threadIdx.x == 0) {
        __threadfence();
        last = atomicAdd(&a.merge[((size_t)l * a.n_tok + t) * a.nkv + h], 1u) + 1 == (unsigned)a.n_split * a.gen;
        __threadfence();
    }
    __syncthreads();
    if (!last) return false;
    for (int i = threadIdx.x; i < group * hd; i += PK_THREADS) {
        const int j = i / hd, e = i % hd;
        float M = -INFINITY, S = 0.0f, O = 0.0f;
        for (int sp = 0; sp < a.n_split; sp++)
            M = fmaxf(M, __ldcg(a.pm + (((size_t)t * a.nkv + h) * a.n_split + sp) * group + j));
        for (int sp = 0; sp < a.n_split; sp++) {
            const size_t gi = (((size_t)t * a.nkv + h) * a.n_split + sp) * group + j;
            const float lsum = __ldcg(a.pl + gi);
            if (lsum == 0.0f) continue;
            float f = __expf(__ldcg(a.pm + gi) - M);
            S += lsum * f;
            O += __ldcg(a.po + gi * hd + e) * f;
        }
        a.att[(size_t)t * nq + ((size_t)h * group + j) * hd + e] = O / S;
    }
    return true;
}

/* ---- the streamed products (prefetch >= 2) ----
 * The block's weights are one stream: its instructions' rows in list order, cut into chunks of at most
 * ring_bytes (a chunk: rows [r, rend) of one matrix, or of gate and up together), each copied by the
 * bulk-copy engine into the next buffer of a ring in shared memory, as far ahead as the ring allows.
 * The weights depend on nothing in the step, so the copies run ahead of the counters: while the block
 * waits for its next instruction's inputs, the ring fills. Thread 0 issues; the block consumes the
 * chunks in the same order, each on its buffer's barrier, its rows split over the warps (a row over
 * PK_WARPS / rows warps, the parts summed through shared memory). */
struct pk_chunk {
    const pk_mat *m[2]; /* the rows' matrices (m[1]: up, for GATEUP) */
    int nm;
    int mr0;            /* the chunk's first row in m (r, less the rows of the matrices before it) */
    int r, rend;        /* its rows in the instruction's numbering */
};

/* Whether the instruction's weights stream: the dense products on the integer-dot types, rows of
 * whole 16-byte units (the bulk copies' granularity). */
__device__ __forceinline__ bool mat_streams(const pk_mat &w) {
    return (w.type == QT_Q4_0 || w.type == QT_Q8_0 || w.type == QT_Q4_K || w.type == QT_Q5_K || w.type == QT_Q6_K) &&
           w.rb % 16 == 0;
}
__device__ __forceinline__ bool inst_streams(const pk_args &a, const pk_inst &in) {
    if (a.prefetch < 2) return false;
    const pk_layer *L = in.layer < a.nl ? &a.L[in.layer] : NULL;
    switch (in.op) {
    case PK_QKV: return mat_streams(L->q) && mat_streams(L->k) && mat_streams(L->v);
    case PK_OUT: return mat_streams(L->o);
    case PK_GATEUP: return mat_streams(L->gate) && mat_streams(L->up);
    case PK_DOWN: return mat_streams(L->down);
    case PK_HEAD: return mat_streams(a.wout);
    default: return false;
    }
}

/* The chunk of instruction in that starts at row r: as many rows as ring_bytes holds (at most
 * PK_WARPS), not past the instruction's end or its matrix's. */
__device__ __forceinline__ pk_chunk chunk_at(const pk_args &a, const pk_inst &in, int r) {
    const pk_layer *L = in.layer < a.nl ? &a.L[in.layer] : NULL;
    const int nq = a.nh * a.hd, nk = a.nkv * a.hd;
    pk_chunk c;
    c.nm = 1, c.m[1] = NULL, c.mr0 = r;
    int end = in.r1;
    switch (in.op) {
    case PK_QKV:
        if (r < nq) c.m[0] = &L->q, end = min(end, nq);
        else if (r < nq + nk) c.m[0] = &L->k, c.mr0 = r - nq, end = min(end, nq + nk);
        else c.m[0] = &L->v, c.mr0 = r - nq - nk;
        break;
    case PK_OUT: c.m[0] = &L->o; break;
    case PK_GATEUP: c.m[0] = &L->gate, c.m[1] = &L->up, c.nm = 2; break;
    case PK_DOWN: c.m[0] = &L->down; break;
    default: c.m[0] = &a.wout; break;
    }
    const uint32_t rb = (uint32_t)c.m[0]->rb + (c.nm == 2 ? (uint32_t)c.m[1]->rb : 0u);
    const int per = (int)(a.ring_bytes / (rb + 64u * c.nm)); /* (the host checked >= 1) */
    c.r = r;
    c.rend = min(end, r + min(per, PK_WARPS));
    return c;
}

/* The ring's state (thread 0's: what it issued; every thread's: what the block consumed) */
struct pk_ring {
    uint8_t *buf;
    uint64_t *bar;
    uint64_t policy;
    int issued, consumed; /* chunks */
    int j, r;             /* thread 0: the next chunk to issue, (list index, row; r < 0: the instruction's first) */
};

/* Thread 0: issues chunks until the ring is full or the block's list ends. */
__device__ void ring_top_up(const pk_args &a, pk_ring &g, int j1) {
    while (g.issued - g.consumed < a.ring && g.j < j1) {
        const pk_inst &x = a.inst[a.w_idx[g.j]];
        if (!inst_streams(a, x)) { g.j++, g.r = -1; continue; }
        if (g.r < 0) g.r = x.r0;
        if (g.r >= x.r1) { g.j++, g.r = -1; continue; }
        const pk_chunk c = chunk_at(a, x, g.r);
        const int slot = g.issued % a.ring;
        uint8_t *dst = g.buf + (size_t)slot * a.ring_bytes;
        /* (GATEUP: up's rows 64 bytes after gate's: group_load reads a few bytes past a row) */
        const uint32_t b0 = (uint32_t)((c.rend - c.r) * c.m[0]->rb);
        const uint32_t b1 = c.nm == 2 ? (uint32_t)((c.rend - c.r) * c.m[1]->rb) : 0u;
        mbar_expect_bytes(&g.bar[slot], b0 + b1);
        bulk_copy_g2s(dst, c.m[0]->p + (size_t)c.mr0 * c.m[0]->rb, b0, &g.bar[slot], g.policy);
        if (c.nm == 2) bulk_copy_g2s(dst + b0 + 64, c.m[1]->p + (size_t)c.mr0 * c.m[1]->rb, b1, &g.bar[slot], g.policy);
        g.issued++;
        g.r = c.rend;
    }
}

/* acc[t] += the row at row (shared memory) . x[t] over groups [g0, g1), this lane's share */
template <int T>
__device__ __forceinline__ void part_dot(const uint8_t *row, int g0, int g1, int n, const int8_t *xq_s,
                                         const float2 *xds_s, int n_tok, float (&acc)[PK_MAX_TOK]) {
    const int ng = n / 32;
    int g = g0 + threadIdx.x % 32;
    for (; g + 32 < g1; g += 64) {
        wgroup q0, q1;
        group_load<T, true>(row, g, q0);
        group_load<T, true>(row, g + 32, q1);
        for (int t = 0; t < n_tok; t++) {
            acc[t] += group_dot(q0, (const int *)(xq_s + t * n + g * 32), xds_s[t * ng + g]);
            acc[t] += group_dot(q1, (const int *)(xq_s + t * n + (g + 32) * 32), xds_s[t * ng + g + 32]);
        }
    }
    if (g < g1) {
        wgroup q0;
        group_load<T, true>(row, g, q0);
        for (int t = 0; t < n_tok; t++) acc[t] += group_dot(q0, (const int *)(xq_s + t * n + g * 32), xds_s[t * ng + g]);
    }
}
__device__ __forceinline__ void part_dot_any(int type, const uint8_t *row, int g0, int g1, int n, const int8_t *xq_s,
                                             const float2 *xds_s, int n_tok, float (&acc)[PK_MAX_TOK]) {
    switch (type) {
    case QT_Q4_0: part_dot<QT_Q4_0>(row, g0, g1, n, xq_s, xds_s, n_tok, acc); break;
    case QT_Q8_0: part_dot<QT_Q8_0>(row, g0, g1, n, xq_s, xds_s, n_tok, acc); break;
    case QT_Q4_K: part_dot<QT_Q4_K>(row, g0, g1, n, xq_s, xds_s, n_tok, acc); break;
    case QT_Q5_K: part_dot<QT_Q5_K>(row, g0, g1, n, xq_s, xds_s, n_tok, acc); break;
    default: part_dot<QT_Q6_K>(row, g0, g1, n, xq_s, xds_s, n_tok, acc); break;
    }
}

/* A streamed instruction's products, chunk by chunk from the ring (its input staged by the caller):
 * QKV's rows to q / k / v, OUT's and DOWN's added to x, GATEUP's SwiGLU to h, HEAD's logits.
 * part_s: (2, PK_WARPS, PK_MAX_TOK, 2) floats, the warps' partial sums, by the chunk's parity. */
__device__ void run_streamed(const pk_args &a, const pk_inst &in, const int8_t *xq, const float2 *xds, pk_ring &g,
                             int j1, float *part_s) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32, nq = a.nh * a.hd, nk = a.nkv * a.hd;
    for (int r = in.r0; r < in.r1;) {
        const pk_chunk c = chunk_at(a, in, r);
        if (threadIdx.x == 0) ring_top_up(a, g, j1); /* (issues this chunk if it was not yet) */
        const int slot = g.consumed % a.ring, rows = c.rend - c.r, P = PK_WARPS / rows;
        const uint8_t *buf = g.buf + (size_t)slot * a.ring_bytes;
        const uint32_t bytes = (uint32_t)(rows * c.m[0]->rb);
        mbar_wait(&g.bar[slot], (uint32_t)(g.consumed / a.ring) & 1u);
        float *ps = part_s + (size_t)(g.consumed & 1) * PK_WARPS * PK_MAX_TOK * 2;
        const int i = warp / P, part = warp % P;
        if (i < rows) {
            const pk_mat &m0 = *c.m[0];
            const int n = m0.n_in, ng = n / 32, g0 = part * ng / P, g1 = (part + 1) * ng / P;
            float acc[PK_MAX_TOK], acc2[PK_MAX_TOK];
            for (int t = 0; t < PK_MAX_TOK; t++) acc[t] = acc2[t] = 0.0f;
            part_dot_any(m0.type, buf + (size_t)i * m0.rb, g0, g1, n, xq, xds, a.n_tok, acc);
            if (c.nm == 2) part_dot_any(c.m[1]->type, buf + bytes + 64 + (size_t)i * c.m[1]->rb, g0, g1, n, xq, xds, a.n_tok, acc2);
            for (int t = 0; t < a.n_tok; t++) {
                const float y = warp_sum(acc[t]), y2 = warp_sum(acc2[t]);
                if (!lane) ps[(warp * PK_MAX_TOK + t) * 2] = y, ps[(warp * PK_MAX_TOK + t) * 2 + 1] = y2;
            }
        }
        __syncthreads(); /* the buffer is read (free for the next copy) and the parts are in */
        g.consumed++;
        if (threadIdx.x < rows * a.n_tok) {
            const int ii = threadIdx.x % rows, t = threadIdx.x / rows, rr = c.r + ii;
            float y = 0.0f, y2 = 0.0f;
            for (int p = 0; p < P; p++) y += ps[((ii * P + p) * PK_MAX_TOK + t) * 2], y2 += ps[((ii * P + p) * PK_MAX_TOK + t) * 2 + 1];
            switch (in.op) {
            case PK_QKV:
                if (rr < nq) a.q[(size_t)t * nq + rr] = y;
                else if (rr < nq + nk) a.k[(size_t)t * nk + rr - nq] = y;
                else a.v[(size_t)t * nk + rr - nq - nk] = y;
                break;
            case PK_OUT:
            case PK_DOWN: a.x[(size_t)t * a.d + rr] = __ldcg(a.x + (size_t)t * a.d + rr) + y; break;
            case PK_GATEUP: a.h[(size_t)t * a.nff + rr] = y / (1.0f + __expf(-y)) * y2; break;
            default: a.logits[(size_t)t * a.nv + rr] = y; break;
            }
        }
        r = c.rend;
    }
}

/* x[t][r] += w's row r . src[t] (n values a token) over the slice's rows: the attention output's and
 * the FFN down's products close their residual branch in place (each slice owns its rows of x). */
__device__ void residual_rows(const pk_args &a, const pk_inst &in, const pk_mat &w, const float *src, int n, float *sm,
                              int8_t *xq, float2 *xds, bool fresh, pk_ring &g, int j1, float *part_s) {
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    float acc[PK_MAX_TOK];
    if (fresh) {
        stage(a, src, n, sm);
        quant_rows(a, sm, n, xq, xds);
    }
    if (inst_streams(a, in)) return run_streamed(a, in, xq, xds, g, j1, part_s);
    for (int r = in.r0 + warp; r < in.r1; r += PK_WARPS) {
        for (int t = 0; t < PK_MAX_TOK; t++) acc[t] = 0.0f;
        mat_dot(w, r, sm, xq, xds, a.n_tok, acc);
        for (int t = 0; t < a.n_tok; t++) {
            float y = warp_sum(acc[t]);
            if (!lane) a.x[(size_t)t * a.d + r] = __ldcg(a.x + (size_t)t * a.d + r) + y;
        }
    }
}

/* Returns whether the instruction signals its counter (the attention: only the merging split).
 * Shared memory: the staged float rows (n_tok x in_w), then their int8 groups and scales. fresh:
 * stage them; false when the block's previous instruction staged the same input (a slice of the same
 * product: consecutive slices of one stage on a block share its norm and quantization). */
__device__ bool run_inst(const pk_args &a, const pk_inst &in, float *sm, float *red, bool fresh, pk_ring &g, int j1,
                         float *part_s) {
    const int d = a.d, hd = a.hd, nq = a.nh * hd, nk = a.nkv * hd, group = a.nh / a.nkv;
    const int warp = threadIdx.x / 32, lane = threadIdx.x % 32;
    const pk_layer *L = in.layer < a.nl ? &a.L[in.layer] : NULL;
    int8_t *xq = (int8_t *)(sm + (size_t)a.n_tok * a.in_w);
    float2 *xds = (float2 *)(xq + (size_t)a.n_tok * a.in_w);
    float acc[PK_MAX_TOK];
    switch (in.op) {
    case PK_QKV:
        if (fresh) {
            norm_rows(a, a.x, L->attn_norm, sm, red);
            quant_rows(a, sm, d, xq, xds);
        }
        if (inst_streams(a, in)) {
            run_streamed(a, in, xq, xds, g, j1, part_s);
            return true;
        }
        for (int r = in.r0 + warp; r < in.r1; r += PK_WARPS) {
            for (int t = 0; t < PK_MAX_TOK; t++) acc[t] = 0.0f;
            const pk_mat &w = r < nq ? L->q : r < nq + nk ? L->k : L->v;
            mat_dot(w, r < nq ? r : r < nq + nk ? r - nq : r - nq - nk, sm, xq, xds, a.n_tok, acc);
            for (int t = 0; t < a.n_tok; t++) {
                float y = warp_sum(acc[t]);
                if (lane) continue;
                if (r < nq) a.q[(size_t)t * nq + r] = y;
                else if (r < nq + nk) a.k[(size_t)t * nk + r - nq] = y;
                else a.v[(size_t)t * nk + r - nq - nk] = y;
            }
        }
        return true;
    case PK_KV: /* warp 0 the head's k (and v to the cache), warps 1..group its q heads */
        for (int t = 0; t < a.n_tok; t++) {
            float *row = sm + warp * PK_MAX_HD;
            if (warp == 0) {
                head_norm_rope(a, a.k + (size_t)t * nk + (size_t)in.kvh * hd, L->k_norm, a.pos[t], row);
                const size_t at = (((size_t)in.layer * a.n_ctx + a.pos[t]) * a.nkv + in.kvh) * hd;
                for (int i = lane; i < hd; i += 32) {
                    a.kc[at + i] = __float2half_rn(row[i]);
                    a.vc[at + i] = __float2half_rn(__ldcg(a.v + (size_t)t * nk + (size_t)in.kvh * hd + i));
                }
            } else if (warp <= group) {
                float *q = a.q + (size_t)t * nq + ((size_t)in.kvh * group + warp - 1) * hd;
                head_norm_rope(a, q, L->q_norm, a.pos[t], row);
                for (int i = lane; i < hd; i += 32) q[i] = row[i];
            }
        }
        return true;
    case PK_ATTN: return run_attn(a, in, sm, red); /* (only the merging split signals) */
    case PK_OUT: residual_rows(a, in, L->o, a.att, nq, sm, xq, xds, fresh, g, j1, part_s); return true;
    case PK_GATEUP:
        if (fresh) {
            norm_rows(a, a.x, L->ffn_norm, sm, red);
            quant_rows(a, sm, d, xq, xds);
        }
        if (inst_streams(a, in)) {
            run_streamed(a, in, xq, xds, g, j1, part_s);
            return true;
        }
        for (int r = in.r0 + warp; r < in.r1; r += PK_WARPS) {
            float gt[PK_MAX_TOK], u[PK_MAX_TOK];
            for (int t = 0; t < PK_MAX_TOK; t++) gt[t] = u[t] = 0.0f;
            mat_dot(L->gate, r, sm, xq, xds, a.n_tok, gt);
            mat_dot(L->up, r, sm, xq, xds, a.n_tok, u);
            for (int t = 0; t < a.n_tok; t++) {
                float gg = warp_sum(gt[t]), uu = warp_sum(u[t]);
                if (!lane) a.h[(size_t)t * a.nff + r] = gg / (1.0f + __expf(-gg)) * uu;
            }
        }
        return true;
    case PK_DOWN: residual_rows(a, in, L->down, a.h, a.nff, sm, xq, xds, fresh, g, j1, part_s); return true;
    case PK_HEAD:
        if (fresh) {
            norm_rows(a, a.x, a.out_norm, sm, red);
            quant_rows(a, sm, d, xq, xds);
        }
        if (inst_streams(a, in)) {
            run_streamed(a, in, xq, xds, g, j1, part_s);
            return true;
        }
        for (int r = in.r0 + warp; r < in.r1; r += PK_WARPS) {
            for (int t = 0; t < PK_MAX_TOK; t++) acc[t] = 0.0f;
            mat_dot(a.wout, r, sm, xq, xds, a.n_tok, acc);
            for (int t = 0; t < a.n_tok; t++) {
                float y = warp_sum(acc[t]);
                if (!lane) a.logits[(size_t)t * a.nv + r] = y;
            }
        }
        return true;
    case PK_ROUTE: /* the router's logits, experts [r0, r1), on the f32 normed rows */
        if (fresh) norm_rows(a, a.x, L->ffn_norm, sm, red);
        for (int e = in.r0 + warp; e < in.r1; e += PK_WARPS) {
            for (int t = 0; t < PK_MAX_TOK; t++) acc[t] = 0.0f;
            mat_dot(L->router, e, sm, xq, xds, a.n_tok, acc);
            for (int t = 0; t < a.n_tok; t++) {
                float y = warp_sum(acc[t]);
                if (!lane) a.lg[(size_t)t * a.ne + e] = y;
            }
        }
        return true;
    case PK_TOPK: /* warp 0: softmax, top-k (ties to the lower id), renormalized, as the CPU */
        if (warp == 0) {
            const int t = in.tok;
            const float *lg = a.lg + (size_t)t * a.ne;
            float mx = -INFINITY;
            for (int e = lane; e < a.ne; e += 32) mx = fmaxf(mx, __ldcg(lg + e));
            for (int o = 16; o; o >>= 1) mx = fmaxf(mx, __shfl_xor_sync(0xffffffffu, mx, o));
            float sum = 0.0f;
            for (int e = lane; e < a.ne; e += 32) sum += __expf(__ldcg(lg + e) - mx);
            sum = warp_sum(sum);
            float ws = 0.0f;
            unsigned taken = 0; /* bit i: this lane's expert lane + 32 i is taken */
            for (int kk = 0; kk < a.k_used; kk++) {
                float bv = -INFINITY;
                int be = 1 << 30;
                for (int i = 0, e = lane; e < a.ne; i++, e += 32) {
                    const float v = __ldcg(lg + e);
                    if (!(taken >> i & 1u) && (v > bv || (v == bv && e < be))) bv = v, be = e;
                }
                for (int o = 16; o; o >>= 1) {
                    const float ov = __shfl_xor_sync(0xffffffffu, bv, o);
                    const int oe = __shfl_xor_sync(0xffffffffu, be, o);
                    if (ov > bv || (ov == bv && oe < be)) bv = ov, be = oe;
                }
                if (be % 32 == lane) taken |= 1u << (be / 32);
                const float p = __expf(bv - mx) / sum;
                ws += p;
                if (!lane) a.ids[(size_t)t * a.k_used + kk] = be, a.wts[(size_t)t * a.k_used + kk] = p;
            }
            __syncwarp();
            const float fs = fmaxf(ws, 6.103515625e-5f);
            if (lane < a.k_used) a.wts[(size_t)t * a.k_used + lane] /= fs;
        }
        return true;
    case PK_EGU: { /* slot kvh of token tok: its expert (read from memory) */
        if (fresh) {
            norm_rows(a, a.x, L->ffn_norm, sm, red);
            quant_rows(a, sm, d, xq, xds);
        }
        const int t = in.tok, e = __ldcg(a.ids + (size_t)t * a.k_used + in.kvh);
        /* this token's row alone: the staged rows start at token t */
        const float *xs = sm + (size_t)t * d;
        const int8_t *xqt = xq + (size_t)t * d;
        const float2 *xdt = xds + (size_t)t * (d / 32);
        for (int r = in.r0 + warp; r < in.r1; r += PK_WARPS) {
            float g[PK_MAX_TOK] = {0.0f}, u[PK_MAX_TOK] = {0.0f};
            mat_dot(L->gate_e, e * a.nffe + r, xs, xqt, xdt, 1, g);
            mat_dot(L->up_e, e * a.nffe + r, xs, xqt, xdt, 1, u);
            const float gg = warp_sum(g[0]), uu = warp_sum(u[0]);
            if (!lane) a.he[((size_t)t * a.k_used + in.kvh) * a.nffe + r] = gg / (1.0f + __expf(-gg)) * uu;
        }
        return true;
    }
    case PK_EDOWN: { /* x[t][r] += sum over the token's slots of w down_e(h) */
        const int rows = a.n_tok * a.k_used, n = a.nffe;
        if (fresh) {
            stage(a, a.he, n, sm, rows);
            quant_rows(a, sm, n, xq, xds, rows);
        }
        for (int r = in.r0 + warp; r < in.r1; r += PK_WARPS)
            for (int t = 0; t < a.n_tok; t++) {
                float sum = 0.0f;
                for (int kk = 0; kk < a.k_used; kk++) {
                    const int i = t * a.k_used + kk, e = __ldcg(a.ids + i);
                    float y[PK_MAX_TOK] = {0.0f};
                    mat_dot(L->down_e, e * d + r, sm + (size_t)i * n, xq + (size_t)i * n, xds + (size_t)i * (n / 32), 1, y);
                    sum += __ldcg(a.wts + i) * warp_sum(y[0]);
                }
                if (!lane) a.x[(size_t)t * d + r] = __ldcg(a.x + (size_t)t * d + r) + sum;
            }
        return true;
    }
    default: return false;
    }
}

/* Asks the L2 for rows [r0, r1) of w (the bulk-copy engine's prefetch: no registers, no wait). */
__device__ __forceinline__ void prefetch_rows(const pk_mat &w, int r0, int r1) {
    if (r1 <= r0) return;
    uintptr_t a0 = (uintptr_t)(w.p + (size_t)r0 * w.rb) & ~(uintptr_t)15, a1 = (uintptr_t)(w.p + (size_t)r1 * w.rb);
    for (uintptr_t a = a0; a < a1; a += 1u << 20) { /* (pieces of at most 1 MiB) */
        const uint32_t n = (uint32_t)((a1 - a < (1u << 20) ? a1 - a : 1u << 20) + 15) & ~15u;
        asm volatile("cp.async.bulk.prefetch.L2.global [%0], %1;" ::"l"(a), "r"(n) : "memory");
    }
}

/* The weights instruction `in` will read, into the L2 (thread 0). */
__device__ void prefetch_inst(const pk_args &a, const pk_inst &in) {
    const pk_layer *L = in.layer < a.nl ? &a.L[in.layer] : NULL;
    const int nq = a.nh * a.hd, nk = a.nkv * a.hd;
    switch (in.op) {
    case PK_QKV: /* the slice's rows of q, k and v */
        prefetch_rows(L->q, min(in.r0, nq), min(in.r1, nq));
        prefetch_rows(L->k, min(max(in.r0 - nq, 0), nk), min(max(in.r1 - nq, 0), nk));
        prefetch_rows(L->v, min(max(in.r0 - nq - nk, 0), nk), min(max(in.r1 - nq - nk, 0), nk));
        break;
    case PK_OUT: prefetch_rows(L->o, in.r0, in.r1); break;
    case PK_GATEUP:
        prefetch_rows(L->gate, in.r0, in.r1);
        prefetch_rows(L->up, in.r0, in.r1);
        break;
    case PK_DOWN: prefetch_rows(L->down, in.r0, in.r1); break;
    case PK_HEAD: prefetch_rows(a.wout, in.r0, in.r1); break;
    case PK_ROUTE: prefetch_rows(L->router, in.r0, in.r1); break;
    default: break; /* (EGU, EDOWN: their experts are known only after the top-k) */
    }
}

/* One step: block b runs its list; a counter is waited for by thread 0 (acquire: a fence after the
 * load), added to by thread 0 after the block's writes (release: a fence before the add). */
__global__ void __launch_bounds__(PK_THREADS, 1) pk_kernel(pk_args a) {
    extern __shared__ __align__(128) float sm[];
    __shared__ float red[PK_WARPS];
    __shared__ float part_s[2 * PK_WARPS * PK_MAX_TOK * 2];
    __shared__ uint64_t bars[8];
    const int j0 = a.w_off[blockIdx.x], j1 = a.w_off[blockIdx.x + 1];
    int staged = -1; /* what the shared memory holds staged (run_inst's fresh) */
    pk_ring g = {(uint8_t *)sm + a.ring_off, bars, 0, 0, 0, j0, -1};
    if (a.prefetch >= 2) {
        g.policy = bulk_evict_first();
        if (threadIdx.x == 0) {
            for (int i = 0; i < a.ring; i++) mbar_init(&bars[i], 1);
            mbar_init_fence();
            ring_top_up(a, g, j1);
        }
        __syncthreads();
    }
    if (a.prefetch == 1 && threadIdx.x == 0 && j0 < j1) prefetch_inst(a, a.inst[a.w_idx[j0]]);
    for (int j = j0; j < j1; j++) {
        const pk_inst in = a.inst[a.w_idx[j]];
        /* the next one's weights depend on nothing: they stream in while this one waits and runs */
        if (a.prefetch == 1 && threadIdx.x == 0 && j + 1 < j1) prefetch_inst(a, a.inst[a.w_idx[j + 1]]);
        if (a.prefetch >= 2 && threadIdx.x == 0) ring_top_up(a, g, j1);
        __shared__ int give_up;
        if (threadIdx.x == 0) {
            give_up = 0;
            if (in.wait >= 0) {
                /* a watchdog: a plan or kernel bug would hang the GPU; a wait of over ~2 s (2^32
                 * cycles) gives up instead, says which instruction, and the whole grid ends */
                const unsigned want = (unsigned)in.need * a.gen;
                const long long t0 = clock64();
                while (*(volatile unsigned *)&a.cnt[in.wait] < want && !give_up) {
                    __nanosleep(64);
                    if (clock64() - t0 > (1ll << 32) || *(volatile int *)a.stuck >= 0) give_up = 1;
                }
                if (give_up) atomicCAS(a.stuck, -1, a.w_idx[j]);
                __threadfence();
            }
        }
        __syncthreads();
        if (give_up) return;
        /* the staged input's key: the layer and the product (KV and ATTN use the memory otherwise) */
        const int key = in.op == PK_KV || in.op == PK_ATTN ? -1 : in.layer * PK_N_OPS + in.op;
        const bool sig = run_inst(a, in, sm, red, key < 0 || key != staged, g, j1, part_s); /* (uniform over the block) */
        staged = key;
        __threadfence(); /* each thread's writes visible at gpu scope before thread 0's add (release) */
        __syncthreads();
        if (in.signal >= 0 && sig && threadIdx.x == 0) {
            __threadfence();
            atomicAdd(&a.cnt[in.signal], 1u);
        }
    }
}

/* ---- host ---- */

/* A weight as it is where group_load reads its type (its rows and brisk's 64 bytes of padding: the
 * loads read aligned words past a row's end), else dequantized to f16. */
static pk_mat upload_mat(const bk_weight *w, double *bytes) {
    pk_mat m = {NULL, w->row_bytes, (int)w->type, (int)w->n_in};
    const bool keep = w->type == QT_F32 || w->type == QT_Q4_0 || w->type == QT_Q8_0 || w->type == QT_Q4_K || w->type == QT_Q5_K ||
                      w->type == QT_Q6_K || w->type == QT_F16;
    std::vector<uint8_t> host;
    if (keep) {
        host.assign((const uint8_t *)w->host, (const uint8_t *)w->host + (size_t)w->n_out * w->row_bytes);
    } else {
        m.type = QT_F16, m.rb = (size_t)w->n_in * 2;
        host.resize((size_t)w->n_out * m.rb);
        std::vector<float> f((size_t)w->n_in);
        for (int64_t r = 0; r < w->n_out; r++) {
            if (quant_dequantize(w->type, (const char *)w->host + (size_t)r * w->row_bytes, f.data(), w->n_in)) exit(1);
            __half *o = (__half *)(host.data() + (size_t)r * m.rb);
            for (int64_t i = 0; i < w->n_in; i++) o[i] = __float2half_rn(f[i]);
        }
    }
    uint8_t *d;
    CK(cudaMalloc(&d, host.size() + 64));
    CK(cudaMemset(d + host.size(), 0, 64));
    CK(cudaMemcpy(d, host.data(), host.size(), cudaMemcpyHostToDevice));
    m.p = d;
    *bytes += (double)host.size();
    return m;
}

static float *upload_f32(const bk_weight *w) {
    std::vector<float> f((size_t)w->n_in * w->n_out);
    if (quant_dequantize(w->type, w->host, f.data(), (int64_t)f.size())) exit(1);
    float *d;
    CK(cudaMalloc(&d, f.size() * sizeof(float)));
    CK(cudaMemcpy(d, f.data(), f.size() * sizeof(float), cudaMemcpyHostToDevice));
    return d;
}

template <class T> static T *dev_zero(size_t n) {
    T *d;
    CK(cudaMalloc(&d, n * sizeof(T) + 256));
    CK(cudaMemset(d, 0, n * sizeof(T) + 256));
    return d;
}

int main(int argc, char **argv) {
    if (argc < 2) {
        fprintf(stderr, "usage: pk_lab MODEL.gguf [n_tok 1] [steps 64] [depth 512] [prefetch 1] [slice_kb 64]\n");
        return 2;
    }
    const int n_tok = argc > 2 ? atoi(argv[2]) : 1, steps = argc > 3 ? atoi(argv[3]) : 64;
    const int depth = argc > 4 ? atoi(argv[4]) : 512, prefetch = argc > 5 ? atoi(argv[5]) : 1;
    const int slice_kb = argc > 6 ? atoi(argv[6]) : 64;
    if (n_tok < 1 || n_tok > PK_MAX_TOK || steps < 1 || depth < 16) return 2;
    brisk_model_params mp = brisk_model_default_params();
    brisk_model *m = NULL;
    if (brisk_model_load(argv[1], &mp, &m) != BRISK_OK) {
        fprintf(stderr, "%s\n", brisk_last_error());
        return 1;
    }
    const model_hparams *hp = &m->hp;
    if ((hp->n_expert && (hp->n_expert > 256 || hp->n_expert_used > 8 || hp->n_ff_shexp || n_tok * hp->n_expert_used > 32)) ||
        hp->qkv_bias || hp->n_attn_layers != hp->n_layer || hp->head_dim > PK_MAX_HD ||
        hp->head_dim % 32 || hp->n_head / hp->n_head_kv > 15 || hp->rope.ext_factor != 0.0f || hp->rope.freq_factors) {
        fprintf(stderr, "pk_lab: a dense llama/qwen2/qwen3 or a qwen3moe file without biases, YaRN or rope factors\n");
        return 2;
    }
    int dev = 0, n_sm = 0;
    CK(cudaDeviceGetAttribute(&n_sm, cudaDevAttrMultiProcessorCount, dev));
    const int n_ctx = depth + steps * n_tok + 64;
    pk_shape sh = {};
    sh.n_layer = hp->n_layer, sh.n_embd = hp->n_embd, sh.n_head = hp->n_head, sh.n_head_kv = hp->n_head_kv;
    sh.head_dim = hp->head_dim, sh.n_ff = hp->n_ff, sh.n_vocab = hp->n_vocab, sh.n_tok = n_tok, sh.n_ctx = n_ctx;
    sh.n_expert = hp->n_expert, sh.n_expert_used = hp->n_expert_used, sh.n_ff_exp = hp->n_ff_exp;
    /* the layers' bytes a weight (Q4_K_M: about 0.6), for the slices' size */
    double lb = 0, ln = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        const layer_weights *W = &m->layers[l];
        for (const bk_weight *w : {&W->wq, &W->wk, &W->wv, &W->wo, &W->w_gate, &W->w_up, &W->w_down, &W->gate_exps,
                                   &W->up_exps, &W->down_exps})
            if (w->host && w->n_out > 0) lb += (double)w->n_out * w->row_bytes, ln += (double)w->n_out * w->n_in;
    }
    sh.n_workers = n_sm, sh.weight_bytes = lb / ln, sh.kv_bytes = 2, sh.slice_kb = slice_kb;
    pk_plan plan;
    if (pk_plan_build(&sh, &plan) || pk_plan_check(&plan)) {
        fprintf(stderr, "pk_lab: no plan\n");
        return 1;
    }
    printf("%s: %d layers, %d instructions over %d SMs, %d splits; slices of %d / %d / %d / %d rows\n", argv[1],
           hp->n_layer, plan.n_inst, n_sm, plan.n_split, plan.rows[PK_QKV], plan.rows[PK_OUT], plan.rows[PK_GATEUP],
           plan.rows[PK_DOWN]);
    /* the weights in f16 */
    std::vector<pk_layer> hl(hp->n_layer);
    double wbytes = 0;
    for (int l = 0; l < hp->n_layer; l++) {
        const layer_weights *W = &m->layers[l];
        hl[l].q = upload_mat(&W->wq, &wbytes);
        hl[l].k = upload_mat(&W->wk, &wbytes);
        hl[l].v = upload_mat(&W->wv, &wbytes);
        hl[l].o = upload_mat(&W->wo, &wbytes);
        if (hp->n_expert) { /* all the experts (a step reads its tokens' k of them: rbytes below) */
            double eb = 0;
            hl[l].router = upload_mat(&W->ffn_gate_inp, &wbytes);
            hl[l].gate_e = upload_mat(&W->gate_exps, &eb);
            hl[l].up_e = upload_mat(&W->up_exps, &eb);
            hl[l].down_e = upload_mat(&W->down_exps, &eb);
            const int used = n_tok * hp->n_expert_used < hp->n_expert ? n_tok * hp->n_expert_used : hp->n_expert;
            wbytes += eb * used / hp->n_expert;
        } else {
            hl[l].gate = upload_mat(&W->w_gate, &wbytes);
            hl[l].up = upload_mat(&W->w_up, &wbytes);
            hl[l].down = upload_mat(&W->w_down, &wbytes);
        }
        hl[l].attn_norm = upload_f32(&W->attn_norm);
        hl[l].ffn_norm = upload_f32(&W->ffn_norm);
        hl[l].q_norm = hp->qk_norm ? upload_f32(&W->q_norm) : NULL;
        hl[l].k_norm = hp->qk_norm ? upload_f32(&W->k_norm) : NULL;
    }
    pk_args a = {};
    pk_layer *dl;
    CK(cudaMalloc(&dl, hl.size() * sizeof(pk_layer)));
    CK(cudaMemcpy(dl, hl.data(), hl.size() * sizeof(pk_layer), cudaMemcpyHostToDevice));
    a.L = dl;
    a.wout = upload_mat(&m->output, &wbytes);
    a.out_norm = upload_f32(&m->output_norm);
    a.nl = hp->n_layer, a.d = hp->n_embd, a.nh = hp->n_head, a.nkv = hp->n_head_kv, a.hd = hp->head_dim;
    a.nff = hp->n_ff, a.nv = hp->n_vocab, a.n_tok = n_tok, a.n_ctx = n_ctx, a.n_split = plan.n_split;
    a.pos_tile = plan.s.pos_tile, a.prefetch = prefetch, a.eps = hp->rms_eps, a.n_rot = hp->rope.n_rot, a.neox = hp->rope.mode == BK_ROPE_NEOX;
    a.freq_base = hp->rope.freq_base, a.freq_scale = hp->rope.freq_scale, a.attn_factor = hp->rope.attn_factor;
    a.ne = hp->n_expert, a.k_used = hp->n_expert_used, a.nffe = hp->n_ff_exp;
    if (a.ne) {
        a.lg = dev_zero<float>((size_t)n_tok * a.ne);
        a.wts = dev_zero<float>((size_t)n_tok * a.k_used);
        a.ids = dev_zero<int>((size_t)n_tok * a.k_used);
        a.he = dev_zero<float>((size_t)n_tok * a.k_used * a.nffe);
    }
    pk_inst *di;
    int *dwo, *dwi, *dpos;
    CK(cudaMalloc(&di, (size_t)plan.n_inst * sizeof(pk_inst)));
    CK(cudaMemcpy(di, plan.inst, (size_t)plan.n_inst * sizeof(pk_inst), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&dwo, (size_t)(n_sm + 1) * sizeof(int)));
    CK(cudaMemcpy(dwo, plan.w_off, (size_t)(n_sm + 1) * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&dwi, (size_t)plan.n_inst * sizeof(int)));
    CK(cudaMemcpy(dwi, plan.w_idx, (size_t)plan.n_inst * sizeof(int), cudaMemcpyHostToDevice));
    CK(cudaMalloc(&dpos, PK_MAX_TOK * sizeof(int)));
    CK(cudaMalloc(&a.stuck, sizeof(int)));
    CK(cudaMemset(a.stuck, 0xff, sizeof(int)));
    a.inst = di, a.w_off = dwo, a.w_idx = dwi, a.pos = dpos;
    const size_t nt = (size_t)n_tok, group = (size_t)hp->n_head / hp->n_head_kv;
    a.cnt = dev_zero<unsigned>((size_t)plan.n_counters);
    a.merge = dev_zero<unsigned>((size_t)hp->n_layer * nt * hp->n_head_kv);
    a.x = dev_zero<float>(nt * a.d);
    a.q = dev_zero<float>(nt * a.nh * a.hd);
    a.k = dev_zero<float>(nt * a.nkv * a.hd);
    a.v = dev_zero<float>(nt * a.nkv * a.hd);
    a.att = dev_zero<float>(nt * a.nh * a.hd);
    a.h = dev_zero<float>(nt * a.nff);
    a.logits = dev_zero<float>(nt * a.nv);
    a.kc = dev_zero<__half>((size_t)a.nl * n_ctx * a.nkv * a.hd);
    a.vc = dev_zero<__half>((size_t)a.nl * n_ctx * a.nkv * a.hd);
    const size_t parts = nt * a.nkv * plan.n_split * group;
    a.po = dev_zero<float>(parts * a.hd);
    a.pm = dev_zero<float>(parts);
    a.pl = dev_zero<float>(parts);
    /* shared memory: the widest staged input (n_tok rows of floats, then of int8 groups and their
     * scales), the attention's warps' partials */
    size_t in_w = (size_t)(a.nff > a.nh * a.hd ? a.nff : a.nh * a.hd);
    in_w = in_w > (size_t)a.d ? in_w : (size_t)a.d;
    if (hp->n_expert) in_w = in_w > (size_t)hp->n_expert_used * hp->n_ff_exp ? in_w : (size_t)hp->n_expert_used * hp->n_ff_exp;
    a.in_w = (int)in_w;
    size_t smem = nt * in_w * (sizeof(float) + 1) + nt * (in_w / 32) * sizeof(float2);
    const size_t att_s = (group * a.hd + 2 * PK_WARPS * group + PK_WARPS * group * a.hd) * sizeof(float);
    smem = smem > att_s ? smem : att_s;
    smem = smem > PK_WARPS * PK_MAX_HD * sizeof(float) ? smem : PK_WARPS * PK_MAX_HD * sizeof(float);
    if (smem > 227 * 1024) {
        fprintf(stderr, "pk_lab: %zu bytes of shared memory: fewer tokens a step\n", smem);
        return 2;
    }
    if (prefetch >= 2) { /* the ring: what the shared memory has left, in prefetch buffers */
        a.ring = prefetch;
        a.ring_off = (smem + 127) & ~(size_t)127;
        const size_t budget = 227 * 1024 - 2048; /* (the static arrays and the driver's share) */
        if (a.ring > 8 || a.ring_off + (size_t)a.ring * 4096 > budget) {
            fprintf(stderr, "pk_lab: no room for a ring of %d buffers\n", a.ring);
            return 2;
        }
        a.ring_bytes = (uint32_t)(((budget - a.ring_off) / a.ring) & ~(size_t)127);
        smem = a.ring_off + (size_t)a.ring * a.ring_bytes;
        /* every streamed matrix's row (GATEUP: gate's and up's) fits a buffer */
        auto streams = [](const pk_mat &w) {
            return (w.type == QT_Q4_0 || w.type == QT_Q8_0 || w.type == QT_Q4_K || w.type == QT_Q5_K || w.type == QT_Q6_K) &&
                   w.rb % 16 == 0;
        };
        size_t need = streams(a.wout) ? a.wout.rb + 64 : 0;
        for (const pk_layer &l : hl)
            for (const pk_mat *w : {&l.q, &l.k, &l.v, &l.o, &l.gate, &l.up, &l.down})
                if (w->p && streams(*w)) need = std::max(need, w == &l.gate || w == &l.up ? l.gate.rb + l.up.rb + 128 : w->rb + 64);
        if (need > a.ring_bytes) {
            fprintf(stderr, "pk_lab: a row of %zu bytes does not fit the ring's %u-byte buffers\n", need, a.ring_bytes);
            return 2;
        }
        printf("ring: %d buffers of %u bytes\n", a.ring, a.ring_bytes);
    }
    CK(cudaFuncSetAttribute(pk_kernel, cudaFuncAttributeMaxDynamicSharedMemorySize, (int)smem));
    int per_sm = 0;
    CK(cudaOccupancyMaxActiveBlocksPerMultiprocessor(&per_sm, pk_kernel, PK_THREADS, smem));
    if (per_sm < 1) {
        fprintf(stderr, "pk_lab: the kernel does not fit an SM\n");
        return 1;
    }

    /* the reference: brisk's own decode of the same tokens (the GPU when there is one) */
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = n_ctx;
    cp.n_batch = 512;
    brisk_context *c = NULL;
    if (brisk_context_new(m, &cp, &c) != BRISK_OK) {
        fprintf(stderr, "%s\n", brisk_last_error());
        return 1;
    }
    const int n_check = 8 * n_tok; /* positions compared, from 0 */
    std::vector<int> toks(n_ctx);
    for (int i = 0; i < n_ctx; i++) toks[i] = (i * 7 + 3) % (hp->n_vocab - 4) + 2;
    std::vector<float> ref((size_t)n_check * a.nv), got((size_t)n_check * a.nv);
    for (int i = 0; i < n_check; i++) {
        brisk_batch_entry e = {toks[i], i, 0, true};
        const float *lg = brisk_decode(c, &e, 1) == BRISK_OK ? brisk_get_logits(c, 0) : NULL;
        if (!lg) return 1;
        memcpy(&ref[(size_t)i * a.nv], lg, (size_t)a.nv * sizeof(float));
    }
    brisk_context_free(c);
    std::vector<float> emb((size_t)a.d);
    /* A step: the kernel alone (generation a.gen); with `fill`, first the tokens' embedding rows and
     * positions from the host, and after it the logits back. The timed steps leave x and the
     * positions as they are (the step reads the same bytes; its numbers are no longer meaningful). */
    auto step = [&](int p0, bool fill) {
        if (fill) {
            int pos[PK_MAX_TOK];
            for (int t = 0; t < n_tok; t++) {
                pos[t] = p0 + t;
                if (quant_dequantize(m->tok_embd.type,
                                     (const char *)m->tok_embd.host + (size_t)toks[p0 + t] * m->tok_embd.row_bytes,
                                     emb.data(), a.d))
                    exit(1);
                CK(cudaMemcpy(a.x + (size_t)t * a.d, emb.data(), (size_t)a.d * sizeof(float), cudaMemcpyHostToDevice));
            }
            CK(cudaMemcpy(dpos, pos, sizeof pos, cudaMemcpyHostToDevice));
        }
        a.gen++;
        void *args[] = {&a};
        CK(cudaLaunchCooperativeKernel((void *)pk_kernel, dim3(n_sm), dim3(PK_THREADS), args, smem, 0));
        if (fill) CK(cudaMemcpy(&got[(size_t)p0 * a.nv], a.logits, nt * a.nv * sizeof(float), cudaMemcpyDeviceToHost));
    };
    for (int p = 0; p < n_check; p += n_tok) step(p, true);
    CK(cudaDeviceSynchronize());
    int stuck = -1;
    CK(cudaMemcpy(&stuck, a.stuck, sizeof stuck, cudaMemcpyDeviceToHost));
    if (stuck >= 0) {
        const pk_inst &in = plan.inst[stuck];
        fprintf(stderr, "pk_lab: the watchdog ended a step: instruction %d (op %d, layer %d) waited on counter %d for %d\n",
                stuck, in.op, in.layer, in.wait, in.need);
        return 1;
    }
    double worst = 0;
    int same = 0;
    for (int i = 0; i < n_check; i++) {
        const float *r = &ref[(size_t)i * a.nv], *g = &got[(size_t)i * a.nv];
        double mx = 0, dd = 0;
        int br = 0, bg = 0;
        for (int v = 0; v < a.nv; v++) {
            mx = fmax(mx, fabs(r[v]));
            dd = fmax(dd, fabs((double)r[v] - g[v]));
            br = r[v] > r[br] ? v : br;
            bg = g[v] > g[bg] ? v : bg;
        }
        worst = fmax(worst, mx > 0 ? dd / mx : 0);
        same += br == bg;
    }
    printf("logits of %d positions against brisk's decode: within %.2e of the row's largest; argmax equal at %d\n",
           n_check, worst, same);
    /* timing: steps at positions depth.. (the cache rows before are whatever the check left: the bytes
     * read are what count); one launch after another, nothing between them */
    {
        int pos[PK_MAX_TOK];
        for (int t = 0; t < n_tok; t++) pos[t] = depth + t;
        CK(cudaMemcpy(dpos, pos, sizeof pos, cudaMemcpyHostToDevice));
    }
    for (int i = 0; i < 4; i++) step(depth, false);
    cudaEvent_t e0, e1;
    CK(cudaEventCreate(&e0));
    CK(cudaEventCreate(&e1));
    CK(cudaEventRecord(e0));
    for (int i = 0; i < steps; i++) step(depth, false);
    CK(cudaEventRecord(e1));
    CK(cudaEventSynchronize(e1));
    float ms = 0;
    CK(cudaEventElapsedTime(&ms, e0, e1));
    CK(cudaMemcpy(&stuck, a.stuck, sizeof stuck, cudaMemcpyDeviceToHost));
    if (stuck >= 0) {
        fprintf(stderr, "pk_lab: the watchdog ended a timed step (instruction %d)\n", stuck);
        return 1;
    }
    const double per = ms / 1e3 / steps;
    const double kvb = 2.0 * 2 * a.nl * (double)a.nkv * a.hd * (depth + n_tok);
    /* (weights: the step's reads; a MoE's experts counted as n_tok * k of them, or all) */
    printf("%d tokens a step at depth %d, prefetch %d, slices of %d KiB: %.1f us a step, %.1f tokens/s, %.0f GB/s "
           "(weights %.2f GB, KV %.2f GB)\n", n_tok, depth, prefetch, slice_kb, per * 1e6, n_tok / per,
           (wbytes + kvb * n_tok) / per / 1e9, wbytes / 1e9, kvb / 1e9);
    pk_plan_free(&plan);
    brisk_model_free(m);
    return 0;
}
