/* cpu_dot.c — ISA dispatch, the portable C dot kernels and the activation
 * converters (from_float).
 *
 * The portable kernels use ggml's integer formulation: per block, an int32
 * sum of weight-quant x activation-quant products, scaled once by the two
 * block scales (K-quant minimums folded in through Q8_K's bsums). The SIMD
 * files (cpu_dot_avx2.c, cpu_dot_avx512.c) compute the same sums. */
#include "backend/cpu/cpu_dot.h"

#include <math.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_dot_isa.h"
#include "quant/quant.h"

#define H2F quant_f16_to_f32

/* ---- portable single-row kernels: return dot(w, x) ---- */

static float dot_f32(int64_t n, const void *w, const void *x) {
    const float *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)a[i] * b[i];
    return (float)s;
}

static float dot_f16(int64_t n, const void *w, const void *x) {
    const uint16_t *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)(H2F(a[i]) * H2F(b[i]));
    return (float)s;
}

static float dot_bf16(int64_t n, const void *w, const void *x) {
    const uint16_t *a = w, *b = x;
    double s = 0;
    for (int64_t i = 0; i < n; i++) s += (double)(quant_bf16_to_f32(a[i]) * quant_bf16_to_f32(b[i]));
    return (float)s;
}

static float dot_q4_0(int64_t n, const void *w, const void *x) {
    const blk_q4_0 *a = w;
    const blk_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += ((a[i].qs[j] & 15) - 8) * b[i].qs[j] + ((a[i].qs[j] >> 4) - 8) * b[i].qs[j + 16];
        s += sumi * H2F(a[i].d) * H2F(b[i].d);
    }
    return s;
}

static float dot_q4_1(int64_t n, const void *w, const void *x) {
    const blk_q4_1 *a = w;
    const blk_q8_1 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 16; j++)
            sumi += (a[i].qs[j] & 15) * b[i].qs[j] + (a[i].qs[j] >> 4) * b[i].qs[j + 16];
        s += (H2F(a[i].d) * H2F(b[i].d)) * sumi + H2F(a[i].m) * H2F(b[i].s);
    }
    return s;
}

/* Q5_0 / Q5_1: sum of q5 * y with q5 in 0..31 (offset handled by caller). */
static int q5_sum(const uint8_t *qh4, const uint8_t *qs, const int8_t *y, int offset) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    int sumi = 0;
    for (int j = 0; j < 16; j++) {
        int x0 = ((qs[j] & 15) | (((qh >> j) & 1) << 4)) - offset;
        int x1 = ((qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4)) - offset;
        sumi += x0 * y[j] + x1 * y[j + 16];
    }
    return sumi;
}

static float dot_q5_0(int64_t n, const void *w, const void *x) {
    const blk_q5_0 *a = w;
    const blk_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 32; i++)
        s += (H2F(a[i].d) * H2F(b[i].d)) * q5_sum(a[i].qh, a[i].qs, b[i].qs, 16);
    return s;
}

static float dot_q5_1(int64_t n, const void *w, const void *x) {
    const blk_q5_1 *a = w;
    const blk_q8_1 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 32; i++)
        s += (H2F(a[i].d) * H2F(b[i].d)) * q5_sum(a[i].qh, a[i].qs, b[i].qs, 0) +
             H2F(a[i].m) * H2F(b[i].s);
    return s;
}

static float dot_q8_0(int64_t n, const void *w, const void *x) {
    const blk_q8_0 *a = w, *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 32; i++) {
        int sumi = 0;
        for (int j = 0; j < 32; j++) sumi += a[i].qs[j] * b[i].qs[j];
        s += sumi * (H2F(a[i].d) * H2F(b[i].d));
    }
    return s;
}

/* IQ4_NL and MXFP4: 32-element codebook blocks against Q8_0. */
static int codebook_sum(const uint8_t *qs, const int8_t *kv, const int8_t *y) {
    int sumi = 0;
    for (int j = 0; j < 16; j++) sumi += kv[qs[j] & 15] * y[j] + kv[qs[j] >> 4] * y[j + 16];
    return sumi;
}

static float dot_iq4_nl(int64_t n, const void *w, const void *x) {
    const blk_iq4_nl *a = w;
    const blk_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 32; i++)
        s += (H2F(a[i].d) * H2F(b[i].d)) * codebook_sum(a[i].qs, quant_iq4nl_values, b[i].qs);
    return s;
}

static float dot_mxfp4(int64_t n, const void *w, const void *x) {
    const blk_mxfp4 *a = w;
    const blk_q8_0 *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 32; i++)
        s += (quant_e8m0_to_f32_half(a[i].e) * H2F(b[i].d)) *
             codebook_sum(a[i].qs, quant_mxfp4_values, b[i].qs);
    return s;
}

static float dot_q2_K(int64_t n, const void *w, const void *x) {
    const blk_q2_K *a = w;
    const blk_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int summs = 0, isum = 0;
        for (int j = 0; j < 16; j++) summs += b[i].bsums[j] * (a[i].scales[j] >> 4);
        const uint8_t *q = a[i].qs;
        const int8_t *y = b[i].qs;
        int is = 0;
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int k = 0; k < 2; k++, y += 16) {
                    int sub = 0;
                    for (int l = 0; l < 16; l++) sub += y[l] * ((q[l + 16 * k] >> shift) & 3);
                    isum += (a[i].scales[is++] & 15) * sub;
                }
            }
        }
        const float dall = b[i].d * H2F(a[i].d), dmin = b[i].d * H2F(a[i].dmin);
        s += dall * isum - dmin * summs;
    }
    return s;
}

static float dot_q3_K(int64_t n, const void *w, const void *x) {
    const blk_q3_K *a = w;
    const blk_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int8_t sc[16];
        quant_q3k_scales(a[i].scales, sc);
        const uint8_t *q = a[i].qs;
        const int8_t *y = b[i].qs;
        int is = 0, isum = 0;
        uint8_t m = 1;
        for (int half = 0; half < 2; half++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
                for (int k = 0; k < 2; k++, y += 16) {
                    int sub = 0;
                    for (int l = 16 * k; l < 16 * k + 16; l++)
                        sub += y[l - 16 * k] * (((q[l] >> shift) & 3) - ((a[i].hmask[l] & m) ? 0 : 4));
                    isum += sc[is++] * sub;
                }
            }
        }
        s += (H2F(a[i].d) * b[i].d) * isum;
    }
    return s;
}

/* Q4_K (qh NULL) / Q5_K super-block: returns d*Σ sc*dot - dmin*Σ m*bsum. */
static float q45_K_block(const uint16_t *dd, const uint8_t *scales, const uint8_t *qh, const uint8_t *q,
                         const blk_q8_K *b) {
    int sumi = 0, summ = 0;
    const int8_t *y = b->qs;
    for (int c = 0; c < 4; c++, q += 32, y += 64) {
        for (int k = 0; k < 2; k++) {
            uint8_t sc, m;
            quant_k4_scale_min(2 * c + k, scales, &sc, &m);
            int sub = 0;
            for (int l = 0; l < 32; l++) {
                int v = k ? q[l] >> 4 : q[l] & 15;
                if (qh && ((qh[l] >> (2 * c + k)) & 1)) v += 16;
                sub += v * y[32 * k + l];
            }
            sumi += sc * sub;
            summ += m * (b->bsums[4 * c + 2 * k] + b->bsums[4 * c + 2 * k + 1]);
        }
    }
    return (b->d * H2F(dd[0])) * sumi - (b->d * H2F(dd[1])) * summ;
}

static float dot_q4_K(int64_t n, const void *w, const void *x) {
    const blk_q4_K *a = w;
    const blk_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 256; i++) s += q45_K_block(&a[i].d, a[i].scales, NULL, a[i].qs, &b[i]);
    return s;
}

static float dot_q5_K(int64_t n, const void *w, const void *x) {
    const blk_q5_K *a = w;
    const blk_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 256; i++) s += q45_K_block(&a[i].d, a[i].scales, a[i].qh, a[i].qs, &b[i]);
    return s;
}

static float dot_q6_K(int64_t n, const void *w, const void *x) {
    const blk_q6_K *a = w;
    const blk_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        const uint8_t *ql = a[i].ql, *qh = a[i].qh;
        const int8_t *y = b[i].qs;
        int sumi = 0;
        for (int half = 0; half < 2; half++, ql += 64, qh += 32, y += 128) {
            int sub[8] = {0};
            for (int l = 0; l < 32; l++) {
                int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                sub[l / 16 + 0] += q1 * y[l];
                sub[l / 16 + 2] += q2 * y[l + 32];
                sub[l / 16 + 4] += q3 * y[l + 64];
                sub[l / 16 + 6] += q4 * y[l + 96];
            }
            for (int k = 0; k < 8; k++) sumi += a[i].scales[8 * half + k] * sub[k];
        }
        s += (H2F(a[i].d) * b[i].d) * sumi;
    }
    return s;
}

static float dot_iq4_xs(int64_t n, const void *w, const void *x) {
    const blk_iq4_xs *a = w;
    const blk_q8_K *b = x;
    float s = 0;
    for (int64_t i = 0; i < n / 256; i++) {
        int sumi = 0;
        for (int ib = 0; ib < 8; ib++) {
            int ls = quant_iq4xs_scale(&a[i], ib);
            sumi += (ls - 32) * codebook_sum(a[i].qs + 16 * ib, quant_iq4nl_values, b[i].qs + 32 * ib);
        }
        s += (H2F(a[i].d) * b[i].d) * sumi;
    }
    return s;
}

/* ---- portable multi-row wrappers ---- */

typedef float (*row_dot_fn)(int64_t n, const void *w, const void *x);

#define PORTABLE(name)                                                                        \
    static void vd_##name(int64_t n, const void *w, const void *x, size_t xs, int nx, float *s) { \
        for (int j = 0; j < nx; j++) s[j] = dot_##name(n, w, (const char *)x + (size_t)j * xs);   \
    }
PORTABLE(f32)
PORTABLE(f16)
PORTABLE(bf16)
PORTABLE(q4_0)
PORTABLE(q4_1)
PORTABLE(q5_0)
PORTABLE(q5_1)
PORTABLE(q8_0)
PORTABLE(iq4_nl)
PORTABLE(mxfp4)
PORTABLE(q2_K)
PORTABLE(q3_K)
PORTABLE(q4_K)
PORTABLE(q5_K)
PORTABLE(q6_K)
PORTABLE(iq4_xs)

static const cpu_vec_dot_fn portable_table[QT_COUNT] = {
    [QT_F32] = vd_f32,       [QT_F16] = vd_f16,       [QT_BF16] = vd_bf16,     [QT_Q4_0] = vd_q4_0,
    [QT_Q4_1] = vd_q4_1,     [QT_Q5_0] = vd_q5_0,     [QT_Q5_1] = vd_q5_1,     [QT_Q8_0] = vd_q8_0,
    [QT_IQ4_NL] = vd_iq4_nl, [QT_MXFP4] = vd_mxfp4,   [QT_Q2_K] = vd_q2_K,     [QT_Q3_K] = vd_q3_K,
    [QT_Q4_K] = vd_q4_K,     [QT_Q5_K] = vd_q5_K,     [QT_Q6_K] = vd_q6_K,     [QT_IQ4_XS] = vd_iq4_xs,
};

/* ---- activation converters (ggml CPU from_float semantics) ---- */

static void ff_f32(const float *x, void *y, int64_t n) { memcpy(y, x, (size_t)n * sizeof(float)); }

static void ff_f16(const float *x, void *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) ((uint16_t *)y)[i] = quant_f32_to_f16(x[i]);
}

static void ff_bf16(const float *x, void *y, int64_t n) {
    for (int64_t i = 0; i < n; i++) ((uint16_t *)y)[i] = quant_f32_to_bf16(x[i]);
}

/* ggml's x86 quantize_row_q8_0/q8_1: id = 127/amax, round half to even. */
static void q8_block_cpu(const float *x, uint16_t *d_out, uint16_t *s_out, int8_t *qs) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = fmaxf(amax, fabsf(x[j]));
    const float d = amax / 127.f, id = amax != 0.0f ? 127.f / amax : 0.0f;
    *d_out = quant_f32_to_f16(d);
    int sum = 0;
    for (int j = 0; j < 32; j++) {
        qs[j] = (int8_t)lrintf(x[j] * id);
        sum += qs[j];
    }
    if (s_out) *s_out = quant_f32_to_f16(d * (float)sum);
}

static void ff_q8_0(const float *x, void *vy, int64_t n) {
    blk_q8_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) q8_block_cpu(x + 32 * i, &y[i].d, NULL, y[i].qs);
}

static void ff_q8_1(const float *x, void *vy, int64_t n) {
    blk_q8_1 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) q8_block_cpu(x + 32 * i, &y[i].d, &y[i].s, y[i].qs);
}

static void ff_q8_K(const float *x, void *y, int64_t n) { (void)quant_quantize(QT_Q8_K, x, y, n); }

/* ---- dispatch ---- */

static cpu_isa g_isa = CPU_ISA_PORTABLE;
static pthread_once_t g_once = PTHREAD_ONCE_INIT;

static cpu_isa detect_isa(void) {
    cpu_isa best = CPU_ISA_PORTABLE;
#if defined(__x86_64__) && defined(__GNUC__)
    __builtin_cpu_init();
    /* every AVX2 CPU has F16C; clang 14 cannot query "f16c" here */
    if (__builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"))
        best = CPU_ISA_AVX2;
    if (best == CPU_ISA_AVX2 && __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw") &&
        __builtin_cpu_supports("avx512vl") && __builtin_cpu_supports("avx512dq") &&
        __builtin_cpu_supports("avx512vnni"))
        best = CPU_ISA_AVX512;
#endif
    return best;
}

static void init_once(void) {
    cpu_isa best = detect_isa();
    const char *env = getenv("BRISK_CPU_ISA");
    cpu_isa want = best;
    if (env && *env) {
        if (!strcmp(env, "portable")) want = CPU_ISA_PORTABLE;
        else if (!strcmp(env, "avx2")) want = CPU_ISA_AVX2;
        else if (!strcmp(env, "avx512")) want = CPU_ISA_AVX512;
    }
    g_isa = want < best ? want : best;
}

void cpu_dot_init(void) { pthread_once(&g_once, init_once); }

cpu_isa cpu_dot_isa(void) {
    cpu_dot_init();
    return g_isa;
}

const char *cpu_isa_name(cpu_isa isa) {
    switch (isa) {
    case CPU_ISA_PORTABLE: return "portable";
    case CPU_ISA_AVX2: return "avx2";
    case CPU_ISA_AVX512: return "avx512";
    }
    return "?";
}

cpu_vec_dot_fn cpu_get_vec_dot_isa(uint32_t type, cpu_isa isa) {
    if (type >= QT_COUNT) return NULL;
    cpu_vec_dot_fn f = NULL;
#if defined(__x86_64__)
    if (isa == CPU_ISA_AVX512) f = cpu_dot_avx512_get(type);
    if (!f && isa >= CPU_ISA_AVX2) f = cpu_dot_avx2_get(type);
#endif
    if (!f) f = portable_table[type];
    return f ? f : cpu_dot_iq_get(type);
}

cpu_vec_dot_fn cpu_get_vec_dot(uint32_t type) { return cpu_get_vec_dot_isa(type, cpu_dot_isa()); }

/* Generic multi-row product: one vec_dot call per weight row. Instantiated per
 * type so that no function pointer has to travel with the call. */
#define GEMM_LOOP(T)                                                                              \
    static void gemm_loop_##T(int64_t n, const void *w, size_t w_stride, int nw, const void *x,    \
                              size_t x_stride, int nx, float *s, size_t s_stride) {               \
        cpu_vec_dot_fn dot = cpu_get_vec_dot(T);                                                 \
        for (int i = 0; i < nw; i++)                                                            \
            dot(n, (const char *)w + (size_t)i * w_stride, x, x_stride, nx, s + (size_t)i * s_stride); \
    }
GEMM_LOOP(QT_F32) GEMM_LOOP(QT_F16) GEMM_LOOP(QT_BF16) GEMM_LOOP(QT_Q4_0) GEMM_LOOP(QT_Q4_1)
GEMM_LOOP(QT_Q5_0) GEMM_LOOP(QT_Q5_1) GEMM_LOOP(QT_Q8_0) GEMM_LOOP(QT_Q2_K) GEMM_LOOP(QT_Q3_K)
GEMM_LOOP(QT_Q4_K) GEMM_LOOP(QT_Q5_K) GEMM_LOOP(QT_Q6_K) GEMM_LOOP(QT_IQ4_NL) GEMM_LOOP(QT_IQ4_XS)
GEMM_LOOP(QT_MXFP4)

cpu_gemm_fn cpu_get_gemm(uint32_t type) {
    cpu_gemm_fn f = cpu_get_gemm_isa(type, cpu_dot_isa());
    if (f || !cpu_get_vec_dot(type)) return f;
    switch (type) {
    case QT_F32: return gemm_loop_QT_F32;
    case QT_F16: return gemm_loop_QT_F16;
    case QT_BF16: return gemm_loop_QT_BF16;
    case QT_Q4_0: return gemm_loop_QT_Q4_0;
    case QT_Q4_1: return gemm_loop_QT_Q4_1;
    case QT_Q5_0: return gemm_loop_QT_Q5_0;
    case QT_Q5_1: return gemm_loop_QT_Q5_1;
    case QT_Q8_0: return gemm_loop_QT_Q8_0;
    case QT_Q2_K: return gemm_loop_QT_Q2_K;
    case QT_Q3_K: return gemm_loop_QT_Q3_K;
    case QT_Q4_K: return gemm_loop_QT_Q4_K;
    case QT_Q5_K: return gemm_loop_QT_Q5_K;
    case QT_Q6_K: return gemm_loop_QT_Q6_K;
    case QT_IQ4_NL: return gemm_loop_QT_IQ4_NL;
    case QT_IQ4_XS: return gemm_loop_QT_IQ4_XS;
    case QT_MXFP4: return gemm_loop_QT_MXFP4;
    default: return cpu_gemm_iq_get(type);
    }
}

/* Fast multi-row kernels per ISA; NULL where the generic loop serves. */
cpu_gemm_fn cpu_get_gemm_isa(uint32_t type, cpu_isa isa) {
    if (type >= QT_COUNT) return NULL;
#if defined(__x86_64__)
    if (isa == CPU_ISA_AVX512) return cpu_gemm_avx512_get(type);
#endif
    (void)isa;
    return NULL;
}

static cpu_from_float_fn g_from_float_override[QT_COUNT]; /* tests' planted converters; NULL: none */

void cpu_dot_override_from_float(uint32_t type, cpu_from_float_fn fn) {
    if (type < QT_COUNT) g_from_float_override[type] = fn;
}

cpu_from_float_fn cpu_get_from_float(uint32_t type) {
    if (type < QT_COUNT && g_from_float_override[type]) return g_from_float_override[type];
    switch (type) {
    case QT_F32: return ff_f32;
    case QT_F16: return ff_f16;
    case QT_BF16: return ff_bf16;
#if defined(__x86_64__)
    case QT_Q8_0: return cpu_dot_isa() >= CPU_ISA_AVX2 ? cpu_q8_0_from_float_avx2 : ff_q8_0;
    case QT_Q8_1: return cpu_dot_isa() >= CPU_ISA_AVX2 ? cpu_q8_1_from_float_avx2 : ff_q8_1;
#else
    case QT_Q8_0: return ff_q8_0;
    case QT_Q8_1: return ff_q8_1;
#endif
    case QT_Q8_K:
#if defined(__x86_64__)
        if (cpu_dot_isa() == CPU_ISA_AVX512) return cpu_q8_K_from_float_avx512;
        if (cpu_dot_isa() == CPU_ISA_AVX2) return cpu_q8_K_from_float_avx2;
#endif
        return ff_q8_K;
    default: return NULL;
    }
}
