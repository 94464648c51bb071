/* cpu_dot_avx512.c — the x86 kernels (cpu_dot_x86.h) built for AVX-512
 * (F/BW/VL/DQ encodings, 32 vector registers) with VNNI vpdpbusd int8
 * products; cpu_dot_init() selects this ISA only when the CPU has VNNI. */
#if defined(__x86_64__) && defined(__AVX512F__)
#define KNAME(x) x##_avx512
#define KATTR __attribute__((target("avx512vnni")))
#define KVNNI 1
#include "backend/cpu/cpu_dot_x86.h"
#include "backend/cpu/cpu_gemm_x86.h"
#include "backend/cpu/cpu_dot_isa.h"

cpu_vec_dot_fn cpu_dot_avx512_get(uint32_t weight_type) { return table_get_avx512(weight_type); }
cpu_gemm_fn cpu_gemm_avx512_get(uint32_t weight_type) { return gemm_table_get_avx512(weight_type); }
#else
#include "backend/cpu/cpu_dot_isa.h"
cpu_vec_dot_fn cpu_dot_avx512_get(uint32_t weight_type) { return NULL; }
cpu_gemm_fn cpu_gemm_avx512_get(uint32_t weight_type) { return NULL; }
#endif
