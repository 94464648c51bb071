/* cpu_dot.h — fused dequantize-and-dot kernels for the CPU backend.
 *
 * A weight row of type T is multiplied with an activation row that was first
 * converted to T's vec_dot_type (quant_get_traits(T)->vec_dot_type: Q8_0 for
 * the 32-element formats, Q8_K for the K-quants and IQ4_XS, F16 for F16,
 * BF16 for BF16, F32 for F32), exactly as ggml's CPU backend does, so that
 * results agree with llama.cpp to rounding.
 *
 * Kernels come in a portable C version and AVX2+FMA / AVX-512 versions in
 * files of their own; cpu_dot_init() picks the best the CPU supports, once.
 */
#ifndef BK_CPU_DOT_H
#define BK_CPU_DOT_H
#include <stddef.h>
#include <stdint.h>

/* s[j] = dot(w, x + j*x_stride) for j in [0, nx): one weight row against nx
 * activation rows (already in vec_dot_type), so a weight row read from memory
 * is reused across tokens. n: elements per row. */
typedef void (*cpu_vec_dot_fn)(int64_t n, const void *w, const void *x, size_t x_stride, int nx,
                               float *s);
/* Several weight rows at once: s[i*s_stride + j] = dot(w + i*w_stride, x + j*x_stride)
 * for i in [0, nw), j in [0, nx). Multi-row kernels share activation loads and
 * the unpacking pipeline across rows; each output keeps the single-row
 * kernel's float order, so results are bitwise those of cpu_vec_dot_fn. */
typedef void (*cpu_gemm_fn)(int64_t n, const void *w, size_t w_stride, int nw, const void *x,
                            size_t x_stride, int nx, float *s, size_t s_stride);
/* Converts n floats to the vec_dot_type format (n a multiple of its block). */
typedef void (*cpu_from_float_fn)(const float *x, void *y, int64_t n);

typedef enum cpu_isa { CPU_ISA_PORTABLE = 0, CPU_ISA_AVX2 = 1, CPU_ISA_AVX512 = 2 } cpu_isa;

/* Detects the ISA (BRISK_CPU_ISA=portable|avx2|avx512 overrides, capped by
 * what the CPU has). Thread-safe, idempotent. */
void cpu_dot_init(void);
cpu_isa cpu_dot_isa(void);
const char *cpu_isa_name(cpu_isa isa);
/* NULL if the weight type has no kernel. */
cpu_vec_dot_fn cpu_get_vec_dot(uint32_t weight_type);
cpu_from_float_fn cpu_get_from_float(uint32_t vec_dot_type);
/* Tests only (the mutation tests of tests/test_conformance.c): makes cpu_get_from_float return
 * fn for vec_dot_type, NULL to restore. Not thread-safe: call it with no decode running. */
void cpu_dot_override_from_float(uint32_t vec_dot_type, cpu_from_float_fn fn);
/* The multi-row kernel for a weight type on this CPU: a fast one where it
 * exists, otherwise a loop over cpu_get_vec_dot(). NULL if no kernel. */
cpu_gemm_fn cpu_get_gemm(uint32_t weight_type);
/* The same for one explicit ISA (tests compare ISAs against portable). */
cpu_vec_dot_fn cpu_get_vec_dot_isa(uint32_t weight_type, cpu_isa isa);
/* The fast multi-row kernel of one ISA; NULL where it has none (then
 * cpu_get_gemm() loops over the vec_dot). */
cpu_gemm_fn cpu_get_gemm_isa(uint32_t weight_type, cpu_isa isa);
#endif
