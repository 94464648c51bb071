/* cuda_ssm.cu — Gated DeltaNet (qwen35) on the GPU: the short causal conv
 * with its carried inputs, and the gated delta rule with its fp32 state.
 *
 * The sequence of each entry (its state slot) is read from device memory:
 * the step's upload inside a step (a replayed graph reads that step's
 * sequences), else the op's own staging. Entries of one sequence see each
 * other's updates in batch order; entries of different sequences, interleaved
 * or not, touch different state slots.
 *
 * Decode (every sequence of fewer than GDC_MIN_PER_SEQ entries in the batch,
 * every batch inside a graph capture or with BRISK_CUDA_DISABLE=gd_chunk, and
 * d > 128) runs the recurrent form: row r (a value dim) of a
 * head's state S evolves on its own,
 *   S_r *= exp(g);  S_r += beta (v_r - S_r . k) k;  o_r = S_r . q / sqrt(d)
 * so a warp owns one row of one head and keeps it in registers across the
 * entries (d / 32 floats per lane), loading it once per run of a sequence
 * and storing it back when the sequence changes and at the end. Each warp
 * L2-normalises q and k itself (2d floats from L1) rather than syncing with
 * its block.
 *
 * Prefill (the sequences with GDC_MIN_PER_SEQ entries or more; the recurrent
 * kernel skips them in the same call) runs the chunked form (gd_chunk_kernel):
 * per sequence and value head, the
 * entries in chunks of C = 64, each chunk in parallel (WY/UT form, derived and
 * checked in dev/kernels/gated_delta_lab.c; the kernels themselves run on the
 * CPU in dev/kernels/gated_delta_emu.cpp). With G the log-decays summed
 * inside the chunk, the incoming state S_0 and U the chunk's corrected values,
 *   (I + A) U = X,  A[i][j] = beta_i (k_i . k_j) e^{G_i - G_j} (j < i),
 *                   X = diag(beta) (V - diag(e^G) K S_0^T)
 *   O = diag(e^G) Q S_0^T + (Q K^T (.) e^{G_i - G_j}, j <= i) U
 *   S = e^{G_C} S_0 + U^T diag(e^{G_C - G}) K
 * every exponent <= 0, G summed in double. The products are fp32 SIMT tiles
 * in shared memory: TF32 tensor cores cost 4-6e-4 relative error (the lab),
 * beyond the op's 1e-4. The short conv likewise runs one thread per (entry,
 * channel) over each entry's window (the carried inputs and the earlier
 * entries of its sequence), then writes the new carried inputs. */
#include <cooperative_groups.h>

#include "backend/cuda/cuda_internal.cuh"
#include "backend/cuda/cuda_pdl.cuh"

namespace cg = cooperative_groups;

#define CONV_THREADS 128
#define CONV_ENT 32      /* entries per block of the parallel conv */
#define CONV_BACK_MAX 7  /* carried inputs (d_conv - 1) the parallel conv handles */
#define CONV_PAR_MIN 17  /* batches of this many entries take the parallel conv (graphs hold <= 16) */
#define GD_WARPS 4 /* state rows (warps) per block */

/* The entries' sequences on the device, or NULL after recording an error. */
static const int32_t *seq_dev(cuda_backend *cb, const int32_t *seq, int n) {
    if (cb->step_on) return cb->st_seq;
    return (const int32_t *)cuda_upload(cb, META_SEQ, seq, (size_t)n * sizeof(int32_t));
}

/* ---- ssm_conv: one thread per channel, entries in order ----
 * The sum in the CPU's order with separate roundings (it is built without
 * contraction), so only the SiLU's exp differs. */
__global__ void __launch_bounds__(CONV_THREADS)
ssm_conv_kernel(const float *x, const float *w, float *conv, const int32_t *seq, int n, int nc, int dc, float *out) {
    BK_TRACE_SCOPE();
    pdl_wait(); /* a programmatic launch (cuda_pdl.cuh): x is the previous kernel's output */
    int c = blockIdx.x * CONV_THREADS + threadIdx.x;
    if (c >= nc) return;
    const float *wc = w + (size_t)c * dc;
    size_t slot_stride = (size_t)(dc - 1) * nc;
    for (int t = 0; t < n; t++) {
        float *st = conv + (size_t)seq[t] * slot_stride + c; /* st[i * nc]: the i-th oldest input */
        float xt = x[(size_t)t * nc + c], s = 0.0f;
        for (int i = 0; i < dc - 1; i++) s = __fadd_rn(s, __fmul_rn(st[(size_t)i * nc], wc[i]));
        s = __fadd_rn(s, __fmul_rn(xt, wc[dc - 1]));
        for (int i = 0; i + 1 < dc - 1; i++) st[(size_t)i * nc] = st[(size_t)(i + 1) * nc];
        if (dc > 1) st[(size_t)(dc - 2) * nc] = xt;
        out[(size_t)t * nc + c] = silu_f(s);
    }
}

/* ---- ssm_conv, parallel over entries: thread = channel, block = CONV_ENT entries ----
 * Entry t's window, position j < dc - 1: src[j] >= 0 is the entry whose input
 * sits there (an earlier entry of t's sequence), src[j] < 0 the carried input
 * -1 - src[j] of its slot. The history of a sequence is its carried inputs
 * then its entries' inputs; t, with m earlier entries in the batch, is at
 * place dc - 1 + m of it, and position j holds place m + j. */
__device__ void conv_window(const int32_t *seq, int t, int dc, int *src) {
    int s = seq[t], m = 0, back[CONV_BACK_MAX]; /* back[b - 1]: the b-th entry before t of its sequence */
    for (int u = t - 1; u >= 0 && m < dc - 1; u--)
        if (seq[u] == s) back[m++] = u;
    for (int j = 0; j < dc - 1; j++) {
        int bd = dc - 1 - j; /* entries back */
        src[j] = bd <= m ? back[bd - 1] : -1 - (dc - 1 + m - bd);
    }
}

/* The outputs; the carried inputs are only read (ssm_conv_state_kernel writes them afterwards).
 * Same sums as ssm_conv_kernel. */
__global__ void __launch_bounds__(CONV_THREADS)
ssm_conv_par_kernel(const float *x, const float *w, const float *conv, const int32_t *seq, int n, int nc, int dc,
                    float *out) {
    __shared__ int src[CONV_ENT][CONV_BACK_MAX];
    __shared__ int slot[CONV_ENT];
    const int t0 = blockIdx.y * CONV_ENT, ne = min(CONV_ENT, n - t0);
    if (threadIdx.x < ne) {
        conv_window(seq, t0 + threadIdx.x, dc, src[threadIdx.x]);
        slot[threadIdx.x] = seq[t0 + threadIdx.x];
    }
    __syncthreads();
    const int c = blockIdx.x * CONV_THREADS + threadIdx.x;
    if (c >= nc) return;
    const float *wc = w + (size_t)c * dc;
    const size_t slot_stride = (size_t)(dc - 1) * nc;
    for (int e = 0; e < ne; e++) {
        const float *st = conv + (size_t)slot[e] * slot_stride + c;
        float s = 0.0f;
        for (int j = 0; j < dc - 1; j++) {
            int sj = src[e][j];
            float u = sj >= 0 ? x[(size_t)sj * nc + c] : st[(size_t)(-1 - sj) * nc];
            s = __fadd_rn(s, __fmul_rn(u, wc[j]));
        }
        size_t o = (size_t)(t0 + e) * nc + c;
        s = __fadd_rn(s, __fmul_rn(x[o], wc[dc - 1]));
        out[o] = silu_f(s);
    }
}

/* The new carried inputs of each sequence: the last dc - 1 places of its last entry's window
 * (one thread per slot and channel reads them all, then writes). */
__global__ void __launch_bounds__(CONV_THREADS)
ssm_conv_state_kernel(const float *x, float *conv, const int32_t *seq, int n, int nc, int dc) {
    __shared__ int src[CONV_ENT][CONV_BACK_MAX];
    __shared__ int slot[CONV_ENT]; /* -1: not its sequence's last entry */
    __shared__ int any;
    const int t0 = blockIdx.y * CONV_ENT, ne = min(CONV_ENT, n - t0);
    if (threadIdx.x == 0) any = 0;
    __syncthreads();
    if (threadIdx.x < ne) {
        int t = t0 + threadIdx.x, s = seq[t];
        bool last = true;
        for (int u = t + 1; u < n && last; u++) last = seq[u] != s;
        slot[threadIdx.x] = last ? s : -1;
        if (last) {
            conv_window(seq, t, dc, src[threadIdx.x]);
            any = 1;
        }
    }
    __syncthreads();
    const int c = blockIdx.x * CONV_THREADS + threadIdx.x;
    if (!any || c >= nc) return;
    const size_t slot_stride = (size_t)(dc - 1) * nc;
    for (int e = 0; e < ne; e++) {
        if (slot[e] < 0) continue;
        float *st = conv + (size_t)slot[e] * slot_stride + c;
        float win[CONV_BACK_MAX + 1], xt = x[(size_t)(t0 + e) * nc + c];
#pragma unroll
        for (int j = 0; j < CONV_BACK_MAX; j++) {
            if (j >= dc - 1) break;
            int sj = src[e][j];
            win[j] = sj >= 0 ? x[(size_t)sj * nc + c] : st[(size_t)(-1 - sj) * nc];
        }
#pragma unroll
        for (int i = 0; i < CONV_BACK_MAX; i++) {
            if (i >= dc - 1) break;
            st[(size_t)i * nc] = i + 1 < dc - 1 ? win[i + 1] : xt;
        }
    }
}

extern "C" void cuda_ssm_conv(bk_backend *be, const float *x, const bk_weight *w, float *conv, const int32_t *seq,
                              int n, int channels, int d_conv, float *out) {
    cuda_backend *cb = (cuda_backend *)be;
    CU_ABLATE(cb, ABL_SSM);
    if (n <= 0 || channels <= 0) return;
    if (w->type != QT_F32 || d_conv < 1) {
        cuda_set_error(cb, bk_fail(BRISK_ERR_UNSUPPORTED, "cuda ssm_conv: %s must be f32", w->name));
        return;
    }
    const int32_t *d_seq = seq_dev(cb, seq, n);
    if (!d_seq) return;
    const unsigned gx = (unsigned)((channels + CONV_THREADS - 1) / CONV_THREADS);
    if (cb->gd_chunk_off || cb->capturing || n < CONV_PAR_MIN || d_conv - 1 > CONV_BACK_MAX) {
        pdl_launch(cb, ssm_conv_kernel, dim3(gx), dim3(CONV_THREADS), 0, x, (const float *)w->dev, conv, d_seq, n,
                   channels, d_conv, out);
        CU_LAUNCHED(cb);
        return;
    }
    dim3 grid(gx, (unsigned)((n + CONV_ENT - 1) / CONV_ENT));
    ssm_conv_par_kernel<<<grid, CONV_THREADS, 0, cb->stream>>>(x, (const float *)w->dev, conv, d_seq, n, channels,
                                                               d_conv, out);
    if (d_conv > 1) /* after every window has read the old carried inputs */
        ssm_conv_state_kernel<<<grid, CONV_THREADS, 0, cb->stream>>>(x, conv, d_seq, n, channels, d_conv);
    CU_LAUNCHED(cb);
}

/* ---- gated_delta: warp = (head, state row); lane holds elements lane + 32 j, j < J ---- */
__device__ __forceinline__ float warp_sum_f(float v) {
#pragma unroll
    for (int o = 16; o > 0; o >>= 1) v += __shfl_xor_sync(0xffffffffu, v, o);
    return v;
}

/* x * rsqrt(sum x^2 + eps), the sum in double: the HF reference's l2norm, as cpu_ssm.c */
template <int J> __device__ __forceinline__ void l2norm_lanes(float (&x)[J], float eps) {
    double s = 0;
#pragma unroll
    for (int j = 0; j < J; j++) s += (double)(x[j] * x[j]);
    s = warp_sum_d(s);
    float scale = 1.0f / sqrtf((float)s + eps);
#pragma unroll
    for (int j = 0; j < J; j++) x[j] *= scale;
}

/* Entry t's gates of value head h: beta = sigmoid(b), decay = exp(a_scale softplus(a + a_bias)). */
__device__ __forceinline__ void gd_gates(const float *b, const float *a, const float *a_bias, const float *a_scale,
                                         int t, int h, int nv, float *beta, float *decay) {
    *beta = sigmoid_f(b[(size_t)t * nv + h]);
    float ab = a[(size_t)t * nv + h] + a_bias[h];
    float sp = ab > 20.0f ? ab : logf(1.0f + expf(ab));
    *decay = expf(sp * a_scale[h]);
}

/* One state row's step (a warp, J values a lane): S *= decay; S += beta (v - S . k) k; returns S . q. */
template <int J>
__device__ __forceinline__ float gd_row_step(float (&S)[J], const float (&q)[J], const float (&kk)[J], float decay,
                                             float beta, float v) {
    float sk = 0.0f;
#pragma unroll
    for (int j = 0; j < J; j++) {
        S[j] *= decay;
        sk = fmaf(S[j], kk[j], sk);
    }
    sk = warp_sum_f(sk);
    float delta = (v - sk) * beta;
    float o = 0.0f;
#pragma unroll
    for (int j = 0; j < J; j++) {
        S[j] = fmaf(kk[j], delta, S[j]);
        o = fmaf(S[j], q[j], o);
    }
    return warp_sum_f(o);
}

#define GD_SKIP_SLOTS 1024 /* state slots the recurrent kernel can be told to leave alone */
typedef struct gd_skip {
    uint32_t bits[GD_SKIP_SLOTS / 32]; /* bit s: slot s's entries are the chunked kernel's */
} gd_skip;

template <int J>
__global__ void __launch_bounds__(GD_WARPS * 32)
gated_delta_kernel(const float *qkv, const float *b, const float *a, const float *a_bias, const float *a_scale,
                   float *ssm, const int32_t *seq, gd_skip skip, int n, int nk, int nv, int group, int d, float eps,
                   float *out) {
    BK_TRACE_SCOPE();
    const int h = blockIdx.y, lane = threadIdx.x % 32;
    const int r = blockIdx.x * GD_WARPS + threadIdx.x / 32;
    if (r >= d) return;
    const int hk = group ? h / group : h % nk; /* grouped (qwen3next) or tiled (qwen35) order */
    const size_t width = (size_t)(2 * nk + nv) * d, dd = (size_t)d * d;
    const float scale = 1.0f / sqrtf((float)d);
    float S[J];
    float *row_s = NULL; /* S[r, :] of the current sequence in memory */
    int cur = -1;
    /* A programmatic launch (cuda_pdl.cuh): the first entry's state row was last written by this
     * layer's previous step (complete: the host read that step's tokens before this step began), so
     * it loads before pdl_wait; q, k, v, a and b are the previous kernels' outputs. */
    if (n > 0) {
        int s0 = seq[0];
        if (!((unsigned)s0 < GD_SKIP_SLOTS && (skip.bits[s0 / 32] >> (s0 % 32) & 1u))) {
            row_s = ssm + ((size_t)s0 * nv + h) * dd + (size_t)r * d;
#pragma unroll
            for (int j = 0; j < J; j++) S[j] = lane + 32 * j < d ? row_s[lane + 32 * j] : 0.0f;
            cur = s0;
        }
    }
    pdl_wait();
    for (int t = 0; t < n; t++) {
        int s = seq[t];
        if ((unsigned)s < GD_SKIP_SLOTS && (skip.bits[s / 32] >> (s % 32) & 1u)) continue;
        if (s != cur) {
            if (row_s)
#pragma unroll
                for (int j = 0; j < J; j++)
                    if (lane + 32 * j < d) row_s[lane + 32 * j] = S[j];
            row_s = ssm + ((size_t)s * nv + h) * dd + (size_t)r * d;
#pragma unroll
            for (int j = 0; j < J; j++) S[j] = lane + 32 * j < d ? row_s[lane + 32 * j] : 0.0f;
            cur = s;
        }
        const float *row = qkv + (size_t)t * width;
        const float *qp = row + (size_t)hk * d, *kp = row + (size_t)(nk + hk) * d;
        float q[J], kk[J];
#pragma unroll
        for (int j = 0; j < J; j++) {
            int i = lane + 32 * j;
            q[j] = i < d ? qp[i] : 0.0f;
            kk[j] = i < d ? kp[i] : 0.0f;
        }
        l2norm_lanes<J>(q, eps);
        l2norm_lanes<J>(kk, eps);
        float beta, decay;
        gd_gates(b, a, a_bias, a_scale, t, h, nv, &beta, &decay);
        float o = gd_row_step<J>(S, q, kk, decay, beta, row[(size_t)(2 * nk + h) * d + r]);
        if (lane == 0) out[(size_t)t * nv * d + (size_t)h * d + r] = o * scale;
    }
    if (row_s)
#pragma unroll
        for (int j = 0; j < J; j++)
            if (lane + 32 * j < d) row_s[lane + 32 * j] = S[j];
}

/* ---- gated_delta with the head's RMS norm and output gate (decode): block = value head ----
 * out = silu(z) * rms_norm(o) over each head's d outputs (qwen35's gated_deltanet after the rule),
 * in the launch of the rule: 32 warps of J = d / 32 rows each (d a multiple of 32,
 * at most 128), every row's state in registers across the entries as gated_delta_kernel keeps it,
 * the same per-row arithmetic (gd_row_step), then warp 0 normalises the head's outputs as
 * rms_norm_warp_kernel does and gates them as swiglu_kernel does: the same bits as the three ops,
 * two launches fewer per Gated DeltaNet layer. Every sequence of the batch takes the recurrent
 * form (fewer than GDC_MIN_PER_SEQ entries). */
/* A head's state (base: d x d) and the warp's J rows warp + 32 i in registers (lane + 32 j of each):
 * loaded, or with STORE stored back. */
template <int J, bool STORE> __device__ __forceinline__ void gd_rows_io(float (&S)[J][J], float *base, int d) {
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
#pragma unroll
    for (int i = 0; i < J; i++)
#pragma unroll
        for (int j = 0; j < J; j++) {
            float &v = S[i][j], *p = base + (size_t)(warp + 32 * i) * d + lane + 32 * j;
            if (STORE) *p = v;
            else v = *p;
        }
}

/* With CONV, the short conv (ssm_conv) runs in the same launch: the kernel's blocks come in clusters of
 * ratio = n_v_heads / n_k_heads, the value heads of one key head. Each block convolves its value head's
 * d channels (their carried inputs are its own); the cluster's first block also convolves the key
 * head's q and k channels, which the others then read from its shared memory (distributed shared
 * memory: no other block touches those carried inputs, so there is no race on them, and no pass
 * through global memory). The arithmetic is ssm_conv_kernel's, entry by entry, so the bits are
 * those of ssm_conv then the fused rule; one launch fewer per Gated DeltaNet layer. */
typedef struct gd_conv {
    const float *w; /* (channels, dc) f32 */
    float *st;      /* carried inputs: slot s, input i, channel c at st[(s * (dc - 1) + i) * channels + c] */
    int dc;         /* d_conv, <= GD_CONV_MAX */
    int ratio;      /* blocks of a cluster: value heads per key head */
} gd_conv;
#define GD_CONV_MAX 8

template <int J, bool CONV>
__global__ void __launch_bounds__(1024)
gated_delta_gate_kernel(const float *qkv, gd_conv cv, const float *b, const float *a, const float *a_bias,
                        const float *a_scale, float *ssm, const int32_t *seq, int n, int nk, int nv, int group, int d,
                        float eps, const float *nw, float nw_eps, const float *z, float *out) {
    BK_TRACE_SCOPE();
    __shared__ float ob[J * 32];
    __shared__ float qk_s[CONV ? 2 * J * 32 : 1]; /* CONV: the entry's convolved q and k (d each) */
    __shared__ float v_s[CONV ? J * 32 : 1];      /* CONV: the entry's convolved v of this head */
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, tid = threadIdx.x;
    int h, hk, rank = 0;
    if constexpr (CONV) {
        rank = (int)cg::this_cluster().block_rank();
        hk = (int)blockIdx.x / cv.ratio;
        h = group ? hk * cv.ratio + rank : hk + rank * nk;
    } else {
        h = blockIdx.x;
        hk = group ? h / group : h % nk;
    }
    const size_t width = (size_t)(2 * nk + nv) * d, dd = (size_t)d * d;
    const float scale = 1.0f / sqrtf((float)d);
    /* CONV: this thread's channel (-1: none): v channel tid of head h; in the first block also q and k */
    int ch = -1;
    float wc[GD_CONV_MAX];
    if constexpr (CONV) {
        if (tid < d) ch = (2 * nk + h) * d + tid;
        else if (rank == 0 && tid < 3 * d) ch = (tid < 2 * d ? hk : nk + hk) * d + tid % d;
        if (ch >= 0) { /* the weights are constants, and the first entry's carried inputs are the previous
                        * step's (complete, as the state below): asked for before the wait */
#pragma unroll
            for (int i = 0; i < GD_CONV_MAX; i++) wc[i] = i < cv.dc ? cv.w[(size_t)ch * cv.dc + i] : 0.0f;
            for (int i = 0; i + 1 < cv.dc; i++)
                asm volatile("prefetch.global.L2 [%0];" ::"l"(cv.st + ((size_t)seq[0] * (cv.dc - 1) + i) * width + ch));
        }
    }
    float S[J][J]; /* row warp + 32 i: S[i][j] = S[row, lane + 32 j] */
    int cur = seq[0];
    float *base = ssm + ((size_t)cur * nv + h) * dd; /* the first entry's state: loaded before the wait */
    gd_rows_io<J, false>(S, base, d);
    pdl_wait();
    for (int t = 0; t < n; t++) {
        const int s = seq[t];
        if (s != cur) {
            gd_rows_io<J, true>(S, base, d);
            cur = s;
            base = ssm + ((size_t)cur * nv + h) * dd;
            gd_rows_io<J, false>(S, base, d);
        }
        const float *row = qkv + (size_t)t * width;
        const float *qp = row + (size_t)hk * d, *kp = row + (size_t)(nk + hk) * d, *vp = row + (size_t)(2 * nk + h) * d;
        if constexpr (CONV) {
            if (ch >= 0) { /* ssm_conv_kernel's sums, roundings and carried-input shift */
                const int dc = cv.dc;
                float *st = cv.st + (size_t)s * (dc - 1) * width + ch;
                float xt = row[ch], acc = 0.0f;
#pragma unroll
                for (int i = 0; i < GD_CONV_MAX - 1; i++) /* constant indices: wc stays in registers */
                    if (i < dc - 1) acc = __fadd_rn(acc, __fmul_rn(st[(size_t)i * width], wc[i]));
#pragma unroll
                for (int i = 0; i < GD_CONV_MAX; i++)
                    if (i == dc - 1) acc = __fadd_rn(acc, __fmul_rn(xt, wc[i]));
                for (int i = 0; i + 1 < dc - 1; i++) st[(size_t)i * width] = st[(size_t)(i + 1) * width];
                if (dc > 1) st[(size_t)(dc - 2) * width] = xt;
                const float y = silu_f(acc); /* as ssm_conv rounds it */
                if (tid < d) v_s[tid] = y;
                else qk_s[tid - d] = y;
            }
            cg::this_cluster().sync(); /* the first block's q and k, every block's v */
            if (rank != 0 && tid < 2 * d) qk_s[tid] = cg::this_cluster().map_shared_rank(qk_s, 0)[tid];
            __syncthreads();
            qp = qk_s;
            kp = qk_s + d;
            vp = v_s;
        }
        float q[J], kk[J];
#pragma unroll
        for (int j = 0; j < J; j++) {
            q[j] = qp[lane + 32 * j];
            kk[j] = kp[lane + 32 * j];
        }
        l2norm_lanes<J>(q, eps);
        l2norm_lanes<J>(kk, eps);
        float beta, decay;
        gd_gates(b, a, a_bias, a_scale, t, h, nv, &beta, &decay);
#pragma unroll
        for (int i = 0; i < J; i++) {
            const int r = warp + 32 * i;
            float o = gd_row_step<J>(S[i], q, kk, decay, beta, vp[r]);
            if (lane == 0) ob[r] = o * scale;
        }
        __syncthreads();
        if (warp == 0) { /* rms_norm_warp_kernel's sums and roundings, then swiglu_kernel's */
            const float ns = warp_rms_scale(ob, d, nw_eps);
            const size_t o0 = ((size_t)t * nv + h) * d;
            for (int i = lane; i < d; i += 32) {
                float y = (ob[i] * ns) * nw[i], g = z[o0 + i];
                out[o0 + i] = silu_f(g) * y;
            }
        }
        /* ob (and with CONV the first block's q and k, read by the others) is rewritten by the next entry */
        if constexpr (CONV) cg::this_cluster().sync();
        else __syncthreads();
    }
    gd_rows_io<J, true>(S, base, d);
}

/* ---- gated_delta, chunked (prefill): block = (32 value rows, value head, sequence) ----
 * The block keeps its 32 x DK slice of the state in shared memory across the
 * chunks of its sequence and walks them in order. A and P depend on the
 * chunk's keys, queries and gates alone, so the d / 32 blocks of a head each
 * compute them (cheaper than a pass through global scratch at these sizes,
 * and no scratch to size); the solve's right side X and everything after it
 * are the block's own 32 value rows. Thread tiles of
 * the products: rows i = ti + 16 a (a < 4) of the chunk with ti = tid / 16;
 * columns tj + 16 b with tj = tid % 16 (b < 4 over the chunk's entries for
 * A and P, b < 2 over the 32 value rows for K S^T, Q S^T and O). */
#define GDC_C 64            /* entries per chunk */
#define GDC_DV 32           /* value rows (state rows) per block */
#define GDC_THREADS 256
#define GDC_BLOCKS_SM 2     /* blocks per SM: 93 KiB of shared memory each at d <= 128, 69 KiB at d <= 64 */
#define GDC_SEQ_MAX 32      /* sequences per launch */
#define GDC_LIST_MAX 256    /* sequences a batch may hold for the chunked form */
#define GDC_MIN_PER_SEQ 16  /* a sequence's entries from which the chunked form takes it */

typedef struct gdc_slots {
    int32_t s[GDC_SEQ_MAX]; /* the state slot of blockIdx.z */
} gdc_slots;

template <int DK> struct gdc_shared {
    float k[GDC_C][DK + 4];       /* the chunk's l2-normed keys, zero past d and past the chunk's end */
    union {                       /* the queries are read once (the pass over the keys), then A and P */
        float q[GDC_C][DK + 4];   /* the chunk's l2-normed queries */
        struct {
            float a[GDC_C][GDC_C + 1]; /* A (strictly lower) */
            float p[GDC_C][GDC_C + 1]; /* Q K^T (.) e^{G_i - G_j} (lower, diagonal included) */
        };
    };
    float s[GDC_DV][DK + 4];      /* state rows r0 + r, keys along the row */
    float u[GDC_C][GDC_DV + 4];   /* X, then U (in place), then U (.) e^{G_C - G} */
    double G[GDC_C];              /* log-decays summed inside the chunk */
    float beta[GDC_C], gl[GDC_C], gam[GDC_C], dec[GDC_C]; /* sigmoid(b), g, e^G, e^{G_C - G} */
    float gam_last;               /* e^{G_C} */
    int idx[GDC_C];               /* the chunk's entries in the batch */
    int nc, cur;                  /* entries in the chunk; where the next gather starts */
};

__device__ __forceinline__ float dot4(float4 x, float4 y, float acc) {
    acc = fmaf(x.x, y.x, acc);
    acc = fmaf(x.y, y.y, acc);
    acc = fmaf(x.z, y.z, acc);
    return fmaf(x.w, y.w, acc);
}

/* The kernel's arguments (device pointers; the op's shapes). */
typedef struct gdc_args {
    const float *qkv, *b, *a, *a_bias, *a_scale;
    float *ssm, *out;
    const int32_t *seq;
    int n, nk, nv, d;
    int group; /* > 0: value head h reads key head h / group (grouped order); 0: h mod nk (tiled) */
    float eps;
} gdc_args;

/* Warp 0: the sequence's next (up to) C entries in batch order into sm.idx, their count into sm.nc. */
template <int DK> __device__ __forceinline__ void gdc_gather(gdc_shared<DK> &sm, const int32_t *seq, int n, int slot) {
    const int lane = threadIdx.x % 32;
    int cnt = 0, cur = sm.cur;
    while (cnt < GDC_C && cur < n) {
        int t = cur + lane;
        bool hit = t < n && seq[t] == slot;
        unsigned m = __ballot_sync(0xffffffffu, hit);
        int take = min(__popc(m), GDC_C - cnt), rank = __popc(m & ((1u << lane) - 1u));
        if (hit && rank < take) sm.idx[cnt + rank] = t;
        if (take < __popc(m)) { /* the chunk is full: the next gather starts at the first hit left */
            for (int i = 0; i < take; i++) m &= m - 1;
            cur += __ffs(m) - 1;
        } else {
            cur += 32;
        }
        cnt += take;
    }
    __syncwarp(); /* every lane has read sm.cur (a gather past the end runs no ballot: racecheck) */
    if (lane == 0) {
        sm.nc = cnt;
        sm.cur = cur;
    }
}

/* q, k l2-normed as the recurrent kernel does, beta and g; rows past nc zero (beta = g = 0).
 * Warp w takes rows w + 8m, four rows' loads in flight before their first sum. */
template <int DK> __device__ __forceinline__ void gdc_load(gdc_shared<DK> &sm, const gdc_args &p, int nc) {
    constexpr int J = DK / 32, R = GDC_C / (GDC_THREADS / 32), RG = 4;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32, h = blockIdx.y, d = p.d;
    const int hk = p.group ? h / p.group : h % p.nk;
    const size_t width = (size_t)(2 * p.nk + p.nv) * d;
    if (lane < R) { /* lane m: the gates of row warp + 8m */
        const int i = warp + 8 * lane;
        float beta = 0.0f, g = 0.0f;
        if (i < nc) {
            const size_t tb = (size_t)sm.idx[i] * p.nv + h;
            float ab = p.a[tb] + p.a_bias[h];
            float sp = ab > 20.0f ? ab : logf(1.0f + expf(ab));
            beta = sigmoid_f(p.b[tb]);
            g = sp * p.a_scale[h];
        }
        sm.beta[i] = beta;
        sm.gl[i] = g;
    }
#pragma unroll 1
    for (int m0 = 0; m0 < R; m0 += RG) {
        float qv[RG][J], kv[RG][J];
#pragma unroll
        for (int m = 0; m < RG; m++) {
            const int i = warp + 8 * (m0 + m);
            const float *row = p.qkv + (size_t)(i < nc ? sm.idx[i] : 0) * width;
            const float *qp = row + (size_t)hk * d, *kp = row + (size_t)(p.nk + hk) * d;
#pragma unroll
            for (int j = 0; j < J; j++) {
                const int x = lane + 32 * j;
                const bool in = i < nc && x < d;
                qv[m][j] = in ? qp[x] : 0.0f;
                kv[m][j] = in ? kp[x] : 0.0f;
            }
        }
#pragma unroll
        for (int m = 0; m < RG; m++) {
            l2norm_lanes<J>(qv[m], p.eps);
            l2norm_lanes<J>(kv[m], p.eps);
#pragma unroll
            for (int j = 0; j < J; j++) {
                sm.q[warp + 8 * (m0 + m)][lane + 32 * j] = qv[m][j];
                sm.k[warp + 8 * (m0 + m)][lane + 32 * j] = kv[m][j];
            }
        }
    }
}

/* Warp 0: G as an inclusive scan in double (rows lane and lane + 32), and its exponentials. */
template <int DK> __device__ __forceinline__ void gdc_scan(gdc_shared<DK> &sm) {
    const int lane = threadIdx.x % 32;
    double g0 = sm.gl[lane], g1 = sm.gl[lane + 32];
#pragma unroll
    for (int o = 1; o < 32; o <<= 1) {
        double v0 = __shfl_up_sync(0xffffffffu, g0, o), v1 = __shfl_up_sync(0xffffffffu, g1, o);
        if (lane >= o) {
            g0 += v0;
            g1 += v1;
        }
    }
    g1 += __shfl_sync(0xffffffffu, g0, 31);
    double last = __shfl_sync(0xffffffffu, g1, 31);
    sm.G[lane] = g0;
    sm.G[lane + 32] = g1;
    sm.gam[lane] = expf((float)g0);
    sm.gam[lane + 32] = expf((float)g1);
    sm.dec[lane] = expf((float)(last - g0));
    sm.dec[lane + 32] = expf((float)(last - g1));
    if (lane == 0) sm.gam_last = expf((float)last);
}

/* K K^T, Q K^T (chunk x chunk, the lower triangle's tiles) and K S^T, Q S^T (chunk x 32 value
 * rows) in one pass over the keys. */
template <int DK>
__device__ __forceinline__ void gdc_products(const gdc_shared<DK> &sm, float (&acc_a)[4][4], float (&acc_p)[4][4],
                                             float (&acc_ks)[4][2], float (&acc_qs)[4][2]) {
    const int ti = threadIdx.x / 16, tj = threadIdx.x % 16;
#pragma unroll
    for (int i = 0; i < 4; i++) {
#pragma unroll
        for (int j = 0; j < 4; j++) acc_a[i][j] = acc_p[i][j] = 0.0f;
#pragma unroll
        for (int c = 0; c < 2; c++) acc_ks[i][c] = acc_qs[i][c] = 0.0f;
    }
#pragma unroll 2
    for (int x = 0; x < DK; x += 4) {
        float4 ki[4], qi[4], kj[4], sv[2];
#pragma unroll
        for (int i = 0; i < 4; i++) {
            ki[i] = *(const float4 *)&sm.k[ti + 16 * i][x];
            qi[i] = *(const float4 *)&sm.q[ti + 16 * i][x];
            kj[i] = *(const float4 *)&sm.k[tj + 16 * i][x];
        }
#pragma unroll
        for (int c = 0; c < 2; c++) sv[c] = *(const float4 *)&sm.s[tj + 16 * c][x];
#pragma unroll
        for (int i = 0; i < 4; i++) {
#pragma unroll
            for (int j = 0; j <= i; j++) { /* columns tj + 16j > rows ti + 16i for j > i: zero there */
                acc_a[i][j] = dot4(ki[i], kj[j], acc_a[i][j]);
                acc_p[i][j] = dot4(qi[i], kj[j], acc_p[i][j]);
            }
#pragma unroll
            for (int c = 0; c < 2; c++) {
                acc_ks[i][c] = dot4(ki[i], sv[c], acc_ks[i][c]);
                acc_qs[i][c] = dot4(qi[i], sv[c], acc_qs[i][c]);
            }
        }
    }
}

/* A and P (over q's place: every thread is past its last read of q), and X = beta (v - e^G K S^T). */
template <int DK>
__device__ __forceinline__ void gdc_store_apx(gdc_shared<DK> &sm, const gdc_args &p, int nc, const float (&acc_a)[4][4],
                                              const float (&acc_p)[4][4], const float (&acc_ks)[4][2]) {
    const int ti = threadIdx.x / 16, tj = threadIdx.x % 16, r0 = blockIdx.x * GDC_DV, h = blockIdx.y, d = p.d;
    const size_t width = (size_t)(2 * p.nk + p.nv) * d;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int ri = ti + 16 * i;
#pragma unroll
        for (int j = 0; j < 4; j++) {
            const int cj = tj + 16 * j;
            float e = j <= i && cj <= ri ? expf((float)(sm.G[ri] - sm.G[cj])) : 0.0f; /* never e^{positive} */
            sm.a[ri][cj] = cj < ri ? sm.beta[ri] * acc_a[i][j] * e : 0.0f;
            sm.p[ri][cj] = acc_p[i][j] * e;
        }
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const int cc = tj + 16 * c, r = r0 + cc;
            float v = ri < nc && r < d ? p.qkv[(size_t)sm.idx[ri] * width + (size_t)(2 * p.nk + h) * d + r] : 0.0f;
            sm.u[ri][cc] = sm.beta[ri] * (v - sm.gam[ri] * acc_ks[i][c]);
        }
    }
}

/* (I + A) U = X in place by forward substitution: warp w solves columns 4w..4w+3, eight lanes a
 * column, each summing every eighth earlier row. */
template <int DK> __device__ __forceinline__ void gdc_solve(gdc_shared<DK> &sm, int nc) {
    const int lane = threadIdx.x % 32, c = 4 * (threadIdx.x / 32) + lane / 8, q8 = lane % 8;
    for (int i = 1; i < nc; i++) {
        float part = 0.0f;
        for (int l = q8; l < i; l += 8) part = fmaf(sm.a[i][l], sm.u[l][c], part);
        part += __shfl_xor_sync(0xffffffffu, part, 1);
        part += __shfl_xor_sync(0xffffffffu, part, 2);
        part += __shfl_xor_sync(0xffffffffu, part, 4);
        if (q8 == 0) sm.u[i][c] -= part;
        __syncwarp();
    }
}

/* out = (e^G Q S^T + P U) / sqrt(d) for the chunk's entries and this block's value rows. */
template <int DK>
__device__ __forceinline__ void gdc_output(const gdc_shared<DK> &sm, const gdc_args &p, int nc,
                                           const float (&acc_qs)[4][2]) {
    const int ti = threadIdx.x / 16, tj = threadIdx.x % 16, r0 = blockIdx.x * GDC_DV, h = blockIdx.y, d = p.d;
    float o[4][2];
#pragma unroll
    for (int i = 0; i < 4; i++)
#pragma unroll
        for (int c = 0; c < 2; c++) o[i][c] = sm.gam[ti + 16 * i] * acc_qs[i][c];
    for (int j = 0; j < nc; j++) {
        float pa[4], ub[2];
#pragma unroll
        for (int i = 0; i < 4; i++) pa[i] = sm.p[ti + 16 * i][j];
#pragma unroll
        for (int c = 0; c < 2; c++) ub[c] = sm.u[j][tj + 16 * c];
#pragma unroll
        for (int i = 0; i < 4; i++)
#pragma unroll
            for (int c = 0; c < 2; c++) o[i][c] = fmaf(pa[i], ub[c], o[i][c]);
    }
    const float scale = 1.0f / sqrtf((float)d);
#pragma unroll
    for (int i = 0; i < 4; i++) {
        const int ri = ti + 16 * i;
#pragma unroll
        for (int c = 0; c < 2; c++) {
            const int r = r0 + tj + 16 * c;
            if (ri < nc && r < d) p.out[(size_t)sm.idx[ri] * p.nv * d + (size_t)h * d + r] = o[i][c] * scale;
        }
    }
}

/* S = e^{G_C} S + U'^T K with U' = U (.) e^{G_C - G} (in sm.u): warp w owns rows w + 8m, lane the
 * keys lane + 32j. */
template <int DK> __device__ __forceinline__ void gdc_update_state(gdc_shared<DK> &sm, int nc) {
    constexpr int J = DK / 32;
    const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
    float st[4][J];
    const float gc = sm.gam_last;
#pragma unroll
    for (int m = 0; m < 4; m++)
#pragma unroll
        for (int j = 0; j < J; j++) st[m][j] = gc * sm.s[warp + 8 * m][lane + 32 * j];
    for (int i = 0; i < nc; i++) {
        float kx[J];
#pragma unroll
        for (int j = 0; j < J; j++) kx[j] = sm.k[i][lane + 32 * j];
#pragma unroll
        for (int m = 0; m < 4; m++) {
            float u = sm.u[i][warp + 8 * m];
#pragma unroll
            for (int j = 0; j < J; j++) st[m][j] = fmaf(u, kx[j], st[m][j]);
        }
    }
#pragma unroll
    for (int m = 0; m < 4; m++)
#pragma unroll
        for (int j = 0; j < J; j++) sm.s[warp + 8 * m][lane + 32 * j] = st[m][j];
}

/* Block (value rows blockIdx.x * 32.., value head blockIdx.y, sequence slots.s[blockIdx.z]):
 * its slice of the state stays in shared memory while it walks the sequence's chunks. */
template <int DK>
__global__ void __launch_bounds__(GDC_THREADS, GDC_BLOCKS_SM) gd_chunk_kernel(gdc_args p, gdc_slots slots) {
    static_assert(GDC_THREADS == 256 && GDC_DV == 32 && GDC_C == 64, "the thread tiles assume these");
    extern __shared__ __align__(16) unsigned char gdc_raw[];
    gdc_shared<DK> &sm = *reinterpret_cast<gdc_shared<DK> *>(gdc_raw);
    const int tid = threadIdx.x, r0 = blockIdx.x * GDC_DV, slot = slots.s[blockIdx.z], d = p.d;
    float *S = p.ssm + ((size_t)slot * p.nv + blockIdx.y) * d * d; /* S[r * d + x]: value r, key x */
    for (int e = tid; e < GDC_DV * DK; e += GDC_THREADS) {
        int r = e / DK, x = e % DK;
        sm.s[r][x] = r0 + r < d && x < d ? S[(size_t)(r0 + r) * d + x] : 0.0f;
    }
    if (tid == 0) sm.cur = 0;
    __syncthreads();
    for (;;) {
        if (tid < 32) gdc_gather(sm, p.seq, p.n, slot);
        __syncthreads();
        const int nc = sm.nc;
        if (nc == 0) break;
        gdc_load(sm, p, nc);
        __syncthreads();
        if (tid < 32) gdc_scan(sm); /* while the other warps start on the products */
        float acc_a[4][4], acc_p[4][4], acc_ks[4][2], acc_qs[4][2];
        gdc_products(sm, acc_a, acc_p, acc_ks, acc_qs);
        __syncthreads(); /* G ready; q read for the last time */
        gdc_store_apx(sm, p, nc, acc_a, acc_p, acc_ks);
        __syncthreads();
        gdc_solve(sm, nc);
        __syncthreads();
        gdc_output(sm, p, nc, acc_qs);
        __syncthreads();
        for (int e = tid; e < GDC_C * GDC_DV; e += GDC_THREADS) sm.u[e / GDC_DV][e % GDC_DV] *= sm.dec[e / GDC_DV];
        __syncthreads();
        gdc_update_state(sm, nc);
        __syncthreads();
    }
    for (int e = tid; e < GDC_DV * DK; e += GDC_THREADS) {
        int r = e / DK, x = e % DK;
        if (r0 + r < d && x < d) S[(size_t)(r0 + r) * d + x] = sm.s[r][x];
    }
}

/* The chunked form for the batch's sequences of at least GDC_MIN_PER_SEQ entries,
 * when the batch is a prefill: outside a capture (a graph's kernels must not
 * depend on the batch's layout) and d <= 128. Marks those sequences in *skip
 * and returns how many entries it left to the recurrent kernel (n: all);
 * -1 after recording an error. */
static int gd_chunk_launch(cuda_backend *cb, const gdc_args *args, const int32_t *seq, gd_skip *skip) {
    const int n = args->n, d = args->d;
    if (cb->gd_chunk_off || cb->capturing || !seq || d > 128 || n < GDC_MIN_PER_SEQ) return n;
    int32_t slots[GDC_LIST_MAX], cnt[GDC_LIST_MAX];
    int ns = 0, i = 0;
    for (int t = 0; t < n; t++) { /* the sequences and their entry counts */
        if (t == 0 || seq[t] != seq[t - 1]) {
            for (i = 0; i < ns && slots[i] != seq[t]; i++) {}
            if (i == ns) {
                if (ns == GDC_LIST_MAX) return n;
                slots[ns] = seq[t];
                cnt[ns++] = 0;
            }
        }
        cnt[i]++;
    }
    int nl = 0, left = n;
    for (int j = 0; j < ns; j++)
        if (cnt[j] >= GDC_MIN_PER_SEQ && (slots[j] < 0 || slots[j] >= GD_SKIP_SLOTS)) return n;
    for (int j = 0; j < ns; j++) { /* the chunked ones to the front of slots */
        if (cnt[j] < GDC_MIN_PER_SEQ) continue;
        skip->bits[slots[j] / 32] |= 1u << (slots[j] % 32);
        left -= cnt[j];
        slots[nl++] = slots[j];
    }
    if (nl == 0) return n;
    const size_t smem = d <= 64 ? sizeof(gdc_shared<64>) : sizeof(gdc_shared<128>);
    cudaError_t e = d <= 64 ? cudaFuncSetAttribute(gd_chunk_kernel<64>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   (int)smem)
                            : cudaFuncSetAttribute(gd_chunk_kernel<128>, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                                   (int)smem);
    if (e != cudaSuccess) {
        cudaGetLastError();
        cuda_set_error(cb, bk_fail(BRISK_ERR_BACKEND, "cuda gated_delta: %zu bytes of shared memory: %s", smem,
                                   cudaGetErrorString(e)));
        return -1;
    }
    for (int z0 = 0; z0 < nl; z0 += GDC_SEQ_MAX) {
        gdc_slots sl;
        int nz = nl - z0 < GDC_SEQ_MAX ? nl - z0 : GDC_SEQ_MAX;
        for (int j = 0; j < GDC_SEQ_MAX; j++) sl.s[j] = j < nz ? slots[z0 + j] : 0;
        dim3 grid((unsigned)((d + GDC_DV - 1) / GDC_DV), (unsigned)args->nv, (unsigned)nz);
        if (d <= 64) gd_chunk_kernel<64><<<grid, GDC_THREADS, smem, cb->stream>>>(*args, sl);
        else gd_chunk_kernel<128><<<grid, GDC_THREADS, smem, cb->stream>>>(*args, sl);
    }
    return left;
}

extern "C" void cuda_gated_delta(bk_backend *be, const float *qkv, const float *b, const float *a,
                                 const bk_weight *a_bias, const bk_weight *a_scale, float *ssm, const int32_t *seq,
                                 int n, int n_k_heads, int n_v_heads, bool v_grouped, int d, float eps, float *out) {
    cuda_backend *cb = (cuda_backend *)be;
    CU_ABLATE(cb, ABL_SSM);
    if (n <= 0) return;
    if (d < 1 || d > 512 || n_k_heads < 1 || n_v_heads < 1 || n_v_heads % n_k_heads) {
        cuda_set_error(cb, bk_fail(BRISK_ERR_UNSUPPORTED, "cuda gated_delta: head size %d, %d key / %d value heads",
                                   d, n_k_heads, n_v_heads));
        return;
    }
    const int32_t *d_seq = seq_dev(cb, seq, n);
    if (!d_seq) return;
    const float *ab = (const float *)a_bias->dev, *as = (const float *)a_scale->dev;
    const int group = v_grouped ? n_v_heads / n_k_heads : 0;
    const gdc_args args = {qkv, b, a, ab, as, ssm, out, d_seq, n, n_k_heads, n_v_heads, d, group, eps};
    gd_skip skip;
    memset(&skip, 0, sizeof skip);
    int left = gd_chunk_launch(cb, &args, seq, &skip);
    if (left < 0) return;
    if (left > 0) { /* decode, and the sequences with few entries */
        dim3 grid((unsigned)((d + GD_WARPS - 1) / GD_WARPS), (unsigned)n_v_heads);
#define GD_LAUNCH(J)                                                                                                  \
    pdl_launch(cb, gated_delta_kernel<J>, grid, dim3(GD_WARPS * 32), 0, qkv, b, a, ab, as, ssm, d_seq, skip, n,     \
               n_k_heads, n_v_heads, group, d, eps, out)
        if (d <= 32) GD_LAUNCH(1);
        else if (d <= 64) GD_LAUNCH(2);
        else if (d <= 128) GD_LAUNCH(4);
        else if (d <= 256) GD_LAUNCH(8);
        else GD_LAUNCH(16);
#undef GD_LAUNCH
    }
    CU_LAUNCHED(cb);
}

/* backend.h's gated_delta_gate: the conv, the rule, the heads' RMS norm and the output gate in one launch
 * (gated_delta_gate_kernel) when every sequence of the batch takes the recurrent form, the head size is
 * 32, 64, 96 or 128 and a key head has at most 8 value heads (a cluster); without the last (and with
 * BRISK_CUDA_DISABLE=gd_conv) the conv in a launch of its own first; anything else (and BRISK_CUDA_DISABLE=gd_fuse)
 * as the separate ops. */
extern "C" void cuda_gated_delta_gate(bk_backend *be, const float *x, const bk_weight *conv_w, float *conv, int d_conv,
                                      float *conv_out, const float *b, const float *a, const bk_weight *a_bias,
                                      const bk_weight *a_scale, float *ssm, const int32_t *seq, int n, int n_k_heads,
                                      int n_v_heads, bool v_grouped, int d, float eps, const bk_weight *norm,
                                      float norm_eps, const float *z, float *out) {
    cuda_backend *cb = (cuda_backend *)be;
    const bool fuse = !cb->gd_fuse_off && !(cb->ablate & (ABL_SSM | ABL_NORM)) && n > 0 && n < GDC_MIN_PER_SEQ &&
                      d % 32 == 0 && d <= 128 && n_k_heads >= 1 && n_v_heads >= 1 && n_v_heads % n_k_heads == 0 &&
                      norm->type == QT_F32 && norm->dev && norm->n_in == d;
    const int ratio = n_k_heads > 0 ? n_v_heads / n_k_heads : 0;
    const bool with_conv = fuse && conv_w && !cb->gd_conv_off && conv_w->type == QT_F32 && conv_w->dev &&
                           d_conv >= 1 && d_conv <= GD_CONV_MAX && ratio <= 8 &&
                           conv_w->n_in == d_conv && conv_w->n_out == (int64_t)(2 * n_k_heads + n_v_heads) * d;
    const int32_t *d_seq = fuse ? seq_dev(cb, seq, n) : NULL;
    if (conv_w && !(with_conv && d_seq)) {
        cuda_ssm_conv(be, x, conv_w, conv, seq, n, (2 * n_k_heads + n_v_heads) * d, d_conv, conv_out);
        x = conv_out;
    }
    if (!d_seq) {
        cuda_gated_delta(be, x, b, a, a_bias, a_scale, ssm, seq, n, n_k_heads, n_v_heads, v_grouped, d, eps, out);
        cuda_rms_norm(be, out, norm, out, n * n_v_heads, d, norm_eps);
        cuda_swiglu(be, z, out, out, (size_t)n * n_v_heads * d);
        return;
    }
    const float *ab = (const float *)a_bias->dev, *as = (const float *)a_scale->dev, *nw = (const float *)norm->dev;
    const int group = v_grouped ? ratio : 0;
    dim3 grid((unsigned)n_v_heads), block(1024);
    if (with_conv) {
        const gd_conv cv = {(const float *)conv_w->dev, conv, d_conv, ratio};
#define GDG_LAUNCH(J)                                                                                                 \
    pdl_launch_cluster(cb, gated_delta_gate_kernel<J, true>, grid, block, 0, (unsigned)ratio, x, cv, b, a, ab, as,   \
                       ssm, d_seq, n, n_k_heads, n_v_heads, group, d, eps, nw, norm_eps, z, out)
        if (d == 32) GDG_LAUNCH(1);
        else if (d == 64) GDG_LAUNCH(2);
        else if (d == 96) GDG_LAUNCH(3);
        else GDG_LAUNCH(4);
#undef GDG_LAUNCH
    } else {
        const gd_conv cv = {};
#define GDG_LAUNCH(J)                                                                                                 \
    pdl_launch(cb, gated_delta_gate_kernel<J, false>, grid, block, 0, x, cv, b, a, ab, as, ssm, d_seq, n, n_k_heads,  \
               n_v_heads, group, d, eps, nw, norm_eps, z, out)
        if (d == 32) GDG_LAUNCH(1);
        else if (d == 64) GDG_LAUNCH(2);
        else if (d == 96) GDG_LAUNCH(3);
        else GDG_LAUNCH(4);
#undef GDG_LAUNCH
    }
    CU_LAUNCHED(cb);
}
