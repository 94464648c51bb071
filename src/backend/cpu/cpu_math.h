/* cpu_math.h — scalar building blocks the CPU backend shares between its op
 * files (cpu_backend.c, cpu_moe.c), written to round exactly as ggml's
 * vectorised code does. Include after the file's
 * `#pragma GCC optimize("fp-contract=off")`: no operation may be fused
 * beyond the fmaf() calls written here. */
#ifndef BK_CPU_MATH_H
#define BK_CPU_MATH_H
#include <math.h>

#define BK_INLINE static inline __attribute__((always_inline))

/* Hot loops are compiled for several ISAs and picked at load time (ifunc):
 * fmaf() must become one instruction, not a libm call. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define BK_MULTIVERSION __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define BK_MULTIVERSION
#endif

/* exp(x) by range reduction to n = round(x/ln2) and a degree-5 polynomial on
 * the remainder, scaled by 2^n: the single-precision algorithm of Arm's
 * optimized-routines, which ggml's vectorised softmax and SiLU use. Same
 * operations in the same order, so the results are bitwise the same. */
BK_INLINE float exp_poly(float x) {
    const float shift = 0x1.8p23f;
    float z = fmaf(x, 0x1.715476p+0f, shift);
    float n = z - shift;
    float b = fmaf(-n, 0x1.7f7d1cp-20f, fmaf(-n, 0x1.62e4p-1f, x));
    if (!(fabsf(n) <= 192.0f)) return n > 0 ? INFINITY : 0.0f; /* also NaN n from -inf */
    float u = b * b;
    float j = fmaf(fmaf(fmaf(0x1.0e4020p-7f, b, 0x1.573e2ep-5f), u, fmaf(0x1.555e66p-3f, b, 0x1.fffdb6p-2f)), u,
                   fmaf(0x1.ffffecp-1f, b, 1.0f));
    return ldexpf(j, (int)n);
}

/* 16 lanes of fused multiply-adds, then a halving tree (lanes i+8, i+4, then
 * pairs): the order of ggml's AVX-512 f32 products (tinyBLAS and vec_dot), so
 * attention scores round exactly as llama.cpp's do. */
BK_INLINE float reduce16(const float *l) {
    float a[8], b[4];
    for (int i = 0; i < 8; i++) a[i] = l[i + 8] + l[i];
    for (int i = 0; i < 4; i++) b[i] = a[i + 4] + a[i];
    return (b[0] + b[2]) + (b[1] + b[3]);
}

/* out[i] = silu(gate[i]) * up[i] as ggml_vec_swiglu_f32: whole groups of 16
 * through the polynomial exp, the tail through libm's expf. */
BK_INLINE void swiglu_row(const float *gate, const float *up, float *out, size_t n) {
    size_t i = 0, vec_end = n & ~(size_t)15;
    for (; i < vec_end; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + exp_poly(-g)) * up[i];
    }
    for (; i < n; i++) {
        float g = gate[i];
        out[i] = g / (1.0f + expf(-g)) * up[i];
    }
}
#endif
