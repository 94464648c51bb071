/* cpu_dot_isa.h — private: the per-ISA kernel tables of the CPU dot module.
 * Each returns NULL for a weight type it has no kernel for (the caller then
 * falls back to a lower ISA). Only cpu_dot*.c include this. */
#ifndef BK_CPU_DOT_ISA_H
#define BK_CPU_DOT_ISA_H
#include <stdint.h>

#include "backend/cpu/cpu_dot.h"

cpu_vec_dot_fn cpu_dot_avx2_get(uint32_t weight_type);
cpu_vec_dot_fn cpu_dot_avx512_get(uint32_t weight_type);
/* Multi-row kernels (cpu_gemm_fn), bitwise those of the same ISA's vec_dot. */
cpu_gemm_fn cpu_gemm_avx512_get(uint32_t weight_type);
/* Portable kernels of the codebook/ternary/FP4 formats (cpu_dot_iq.c). */
cpu_vec_dot_fn cpu_dot_iq_get(uint32_t weight_type);
cpu_gemm_fn cpu_gemm_iq_get(uint32_t weight_type);
/* The Q8_K converter, bitwise the reference (cpu_from_float_fn). */
void cpu_q8_K_from_float_avx512(const float *x, void *y, int64_t n);
void cpu_q8_K_from_float_avx2(const float *x, void *y, int64_t n);
/* ggml's x86 Q8_0 / Q8_1 converters (cpu_dot.c's q8_block_cpu), bitwise, for AVX2 cores. */
void cpu_q8_0_from_float_avx2(const float *x, void *y, int64_t n);
void cpu_q8_1_from_float_avx2(const float *x, void *y, int64_t n);
#endif
