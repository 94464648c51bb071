/* cpu_ssm.c — Gated DeltaNet on the CPU: the short causal conv with its
 * carried inputs, and the gated delta rule with its carried state matrix.
 *
 * Both run token by token (the recurrent form): entries of one sequence
 * must see each other's updates in order, and a thread owns whole channels
 * (conv) or whole value heads (delta rule) across the batch, so it walks
 * the entries in batch order and the states of different sequences never
 * meet. The arithmetic is that of ggml's CPU ops (ssm_conv, silu,
 * l2_norm, sigmoid, softplus, gated_delta_net): sums in the same order,
 * ggml_vec_dot_f32's four 16-lane accumulators, ggml_vec_mad_f32's fused
 * multiply-adds. (The chunked parallel form is for a GPU's prefill.) */
#include "backend/cpu/cpu_ssm.h"

#include <string.h>

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "fp-contract=off")
#endif

#include "backend/cpu/cpu_math.h"

/* ggml_vec_dot_f32 (AVX-512): 64 at a time into 4 x 16 fused lanes, folded
 * (0+2, 1+3, 0+1) and reduced as reduce16; the tail is scalar. */
BK_INLINE float dot_f32(const float *x, const float *y, int n) {
    float acc[4][16] = {{0}};
    int np = n & ~63;
    for (int i = 0; i < np; i += 64)
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 16; l++) acc[j][l] = fmaf(x[i + 16 * j + l], y[i + 16 * j + l], acc[j][l]);
    for (int l = 0; l < 16; l++) {
        acc[0][l] += acc[2][l];
        acc[1][l] += acc[3][l];
    }
    for (int l = 0; l < 16; l++) acc[0][l] += acc[1][l];
    float s = reduce16(acc[0]);
    for (int i = np; i < n; i++) s += x[i] * y[i];
    return s;
}

/* ---- ssm_conv ---- */
typedef struct {
    const float *x, *w;
    float *conv, *out;
    const int32_t *seq;
    int n, channels, d_conv;
} conv_job;

BK_MULTIVERSION static void conv_worker(void *arg, int ith, int nth) {
    conv_job *j = arg;
    long lo, hi;
    threadpool_range(j->channels, ith, nth, &lo, &hi);
    int dc = j->d_conv, nc = j->channels, vec_end = nc & ~15;
    size_t slot_stride = (size_t)(dc - 1) * nc;
    for (long c = lo; c < hi; c++) {
        const float *w = j->w + (size_t)c * dc;
        for (int t = 0; t < j->n; t++) {
            float *st = j->conv + (size_t)j->seq[t] * slot_stride + c; /* st[i * nc]: i-th oldest input */
            float xt = j->x[(size_t)t * nc + c], s = 0.0f;
            for (int i = 0; i < dc - 1; i++) s += st[(size_t)i * nc] * w[i];
            s += xt * w[dc - 1];
            for (int i = 0; i + 1 < dc - 1; i++) st[(size_t)i * nc] = st[(size_t)(i + 1) * nc];
            if (dc > 1) st[(size_t)(dc - 2) * nc] = xt;
            /* ggml_vec_silu_f32 over the row: 16-wide groups through the polynomial exp */
            j->out[(size_t)t * nc + c] = s / (1.0f + (c < vec_end ? exp_poly(-s) : expf(-s)));
        }
    }
}

void cpu_ssm_conv(threadpool *tp, const float *x, const bk_weight *w, float *conv, const int32_t *seq, int n,
                  int channels, int d_conv, float *out) {
    conv_job j = {x, w->host, conv, out, seq, n, channels, d_conv};
    threadpool_run(tp, conv_worker, &j);
}

/* ---- gated_delta ---- */
typedef struct {
    const float *qkv, *b, *a, *a_bias, *a_scale;
    float *ssm, *out;
    const int32_t *seq;
    int n, n_k, n_v, d;
    int group; /* > 0: value head h reads key head h / group (grouped order); 0: h mod n_k (tiled) */
    float eps;
} gd_job;

/* The L2 norm of the Hugging Face reference (modeling_qwen3_5's l2norm):
 * x * rsqrt(sum x^2 + eps), the sum in double. llama.cpp's ggml_l2_norm
 * divides by max(|x|, eps) instead; the two part when |x|^2 is not far above
 * eps (seen at 1e-3 relative on random-init weights, tests/test_hf_ref.c). */
BK_INLINE void l2norm(const float *x, float *y, int d, float eps) {
    double sum = 0;
    for (int i = 0; i < d; i++) sum += (double)(x[i] * x[i]);
    float scale = 1.0f / sqrtf((float)sum + eps);
    for (int i = 0; i < d; i++) y[i] = x[i] * scale;
}

BK_MULTIVERSION static void gd_worker(void *arg, int ith, int nth) {
    gd_job *j = arg;
    long lo, hi;
    threadpool_range(j->n_v, ith, nth, &lo, &hi);
    int d = j->d, nk = j->n_k, nv = j->n_v;
    size_t width = (size_t)(2 * nk + nv) * d, dd = (size_t)d * d;
    float qn[CPU_SSM_MAX_D], kn[CPU_SSM_MAX_D], delta[CPU_SSM_MAX_D];
    const float scale = 1.0f / sqrtf((float)d);
    for (long h = lo; h < hi; h++) {
        int hk = j->group ? (int)(h / j->group) : (int)(h % nk);
        for (int t = 0; t < j->n; t++) {
            const float *row = j->qkv + (size_t)t * width;
            l2norm(row + (size_t)hk * d, qn, d, j->eps);
            l2norm(row + (size_t)(nk + hk) * d, kn, d, j->eps);
            const float *v = row + (size_t)(2 * nk + h) * d;
            float beta = 1.0f / (1.0f + expf(-j->b[(size_t)t * nv + h]));
            float ab = j->a[(size_t)t * nv + h] + j->a_bias[h];
            float sp = ab > 20.0f ? ab : logf(1.0f + expf(ab));
            float decay = expf(sp * j->a_scale[h]);
            float *S = j->ssm + ((size_t)j->seq[t] * nv + h) * dd; /* S[r * d + i]: value r, key i */
            for (size_t i = 0; i < dd; i++) S[i] *= decay;
            for (int r = 0; r < d; r++) delta[r] = (v[r] - dot_f32(S + (size_t)r * d, kn, d)) * beta;
            for (int r = 0; r < d; r++) {
                float *Sr = S + (size_t)r * d;
                for (int i = 0; i < d; i++) Sr[i] = fmaf(kn[i], delta[r], Sr[i]);
            }
            float *o = j->out + (size_t)t * nv * d + (size_t)h * d;
            for (int r = 0; r < d; r++) o[r] = dot_f32(S + (size_t)r * d, qn, d) * scale;
        }
    }
}

void cpu_gated_delta(threadpool *tp, const float *qkv, const float *b, const float *a, const bk_weight *a_bias,
                     const bk_weight *a_scale, float *ssm, const int32_t *seq, int n, int n_k_heads, int n_v_heads,
                     bool v_grouped, int d, float eps, float *out) {
    gd_job j = {qkv, b, a, a_bias->host, a_scale->host, ssm, out, seq, n, n_k_heads, n_v_heads, d,
                v_grouped ? n_v_heads / n_k_heads : 0, eps};
    threadpool_run(tp, gd_worker, &j);
}

/* ---- sigmoid_mul: ggml_sigmoid (libm expf per element), then ggml_mul ---- */
void cpu_sigmoid_mul(float *x, const float *gate, int n_rows, int width, int gate_width) {
    for (int r = 0; r < n_rows; r++) {
        float *xr = x + (size_t)r * width;
        const float *g = gate + (size_t)r * gate_width;
        for (int i = 0; i < width; i++) xr[i] *= 1.0f / (1.0f + expf(-g[gate_width == 1 ? 0 : i]));
    }
}
