/* cpu_dot_iq.c — portable dot kernels for the codebook, ternary and FP4
 * formats of quant_iq.h (IQ1_S/M, IQ2_XXS/XS/S, IQ3_XXS/S, TQ1_0, TQ2_0
 * against Q8_K activations; NVFP4, Q1_0, Q2_0 against Q8_0).
 *
 * Each weight block is unpacked once into int8 values with integer (or, for
 * the Q8_0 pairs, float) scales per 16 values (quant_iq_unpack), then dotted
 * with every activation row of the call in int32, as ggml's integer
 * formulation does. The unpacked block lives on the stack: nothing is
 * allocated per call. */
#include <string.h>

#include "backend/cpu/cpu_dot_isa.h"
#include "quant/quant.h"
#include "quant/quant_iq.h"

static inline int32_t dot16(const int8_t *a, const int8_t *b) {
    int32_t s = 0;
    for (int i = 0; i < 16; i++) s += a[i] * b[i];
    return s;
}

/* s[j] = Σ blocks of y.d * d * Σ_k ls[k] * (q . y)_k, k over the 16 groups of 16. */
static inline void dot_q8K(uint32_t type, int64_t n, const void *w, const void *x, size_t xs, int nx, float *s) {
    const size_t bb = (size_t)quant_get_traits(type)->block_bytes;
    quant_iq_block u;
    for (int j = 0; j < nx; j++) s[j] = 0.0f;
    for (int64_t i = 0; i < n / 256; i++) {
        quant_iq_unpack(type, (const char *)w + (size_t)i * bb, &u);
        for (int j = 0; j < nx; j++) {
            const blk_q8_K *y = (const blk_q8_K *)((const char *)x + (size_t)j * xs) + i;
            int32_t sumi = 0;
            for (int k = 0; k < 16; k++) sumi += u.ls[k] * dot16(u.q + 16 * k, y->qs + 16 * k);
            s[j] += (u.d * y->d) * (float)sumi;
        }
    }
}

/* Blocks of be = 64 or 128 values against Q8_0: a float scale per 16 values,
 * the activation's per 32. */
static inline void dot_q80(uint32_t type, int be, int64_t n, const void *w, const void *x, size_t xs, int nx,
                           float *s) {
    const size_t bb = (size_t)quant_get_traits(type)->block_bytes;
    quant_iq_block u;
    for (int j = 0; j < nx; j++) s[j] = 0.0f;
    for (int64_t i = 0; i < n / be; i++) {
        quant_iq_unpack(type, (const char *)w + (size_t)i * bb, &u);
        for (int j = 0; j < nx; j++) {
            const blk_q8_0 *y = (const blk_q8_0 *)((const char *)x + (size_t)j * xs) + i * (be / 32);
            float acc = 0.0f;
            for (int k = 0; k < be / 16; k++) {
                const blk_q8_0 *yb = y + k / 2;
                acc += (u.d16[k] * quant_f16_to_f32(yb->d)) * (float)dot16(u.q + 16 * k, yb->qs + 16 * (k % 2));
            }
            s[j] += acc;
        }
    }
}

/* One vec_dot and one multi-row loop per type, so that the type (and with it
 * the unpacking) is a constant the compiler specialises on. */
#define IQ_KERNELS(name, body)                                                                             \
    static void vd_##name(int64_t n, const void *w, const void *x, size_t xs, int nx, float *s) { body; } \
    static void gemm_##name(int64_t n, const void *w, size_t ws, int nw, const void *x, size_t xs, int nx, \
                            float *s, size_t ss) {                                                        \
        for (int i = 0; i < nw; i++)                                                                      \
            vd_##name(n, (const char *)w + (size_t)i * ws, x, xs, nx, s + (size_t)i * ss);                \
    }
IQ_KERNELS(iq2_xxs, dot_q8K(QT_IQ2_XXS, n, w, x, xs, nx, s))
IQ_KERNELS(iq2_xs, dot_q8K(QT_IQ2_XS, n, w, x, xs, nx, s))
IQ_KERNELS(iq2_s, dot_q8K(QT_IQ2_S, n, w, x, xs, nx, s))
IQ_KERNELS(iq3_xxs, dot_q8K(QT_IQ3_XXS, n, w, x, xs, nx, s))
IQ_KERNELS(iq3_s, dot_q8K(QT_IQ3_S, n, w, x, xs, nx, s))
IQ_KERNELS(iq1_s, dot_q8K(QT_IQ1_S, n, w, x, xs, nx, s))
IQ_KERNELS(iq1_m, dot_q8K(QT_IQ1_M, n, w, x, xs, nx, s))
IQ_KERNELS(tq1_0, dot_q8K(QT_TQ1_0, n, w, x, xs, nx, s))
IQ_KERNELS(tq2_0, dot_q8K(QT_TQ2_0, n, w, x, xs, nx, s))
IQ_KERNELS(nvfp4, dot_q80(QT_NVFP4, 64, n, w, x, xs, nx, s))
IQ_KERNELS(q1_0, dot_q80(QT_Q1_0, 128, n, w, x, xs, nx, s))
IQ_KERNELS(q2_0, dot_q80(QT_Q2_0, 64, n, w, x, xs, nx, s))

#define IQ_TYPES(X)                                                                                         \
    X(QT_IQ2_XXS, iq2_xxs) X(QT_IQ2_XS, iq2_xs) X(QT_IQ2_S, iq2_s) X(QT_IQ3_XXS, iq3_xxs) X(QT_IQ3_S, iq3_s) \
    X(QT_IQ1_S, iq1_s) X(QT_IQ1_M, iq1_m) X(QT_TQ1_0, tq1_0) X(QT_TQ2_0, tq2_0) X(QT_NVFP4, nvfp4)         \
    X(QT_Q1_0, q1_0) X(QT_Q2_0, q2_0)

cpu_vec_dot_fn cpu_dot_iq_get(uint32_t type) {
    switch (type) {
#define X(T, name) case T: return vd_##name;
        IQ_TYPES(X)
#undef X
    default: return NULL;
    }
}

cpu_gemm_fn cpu_gemm_iq_get(uint32_t type) {
    switch (type) {
#define X(T, name) case T: return gemm_##name;
        IQ_TYPES(X)
#undef X
    default: return NULL;
    }
}
