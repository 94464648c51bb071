/* cpu_dot_avx2.c — the x86 kernels (cpu_dot_x86.h) built for AVX2+FMA+F16C
 * with maddubs int8 products. Compiled with -mavx2 -mfma -mf16c. */
#if defined(__x86_64__) && defined(__AVX2__)
#define KNAME(x) x##_avx2
#define KATTR
#define KVNNI 0
#include "backend/cpu/cpu_dot_x86.h"
#include "backend/cpu/cpu_dot_isa.h"

cpu_vec_dot_fn cpu_dot_avx2_get(uint32_t weight_type) { return table_get_avx2(weight_type); }
#else
#include "backend/cpu/cpu_dot_isa.h"
cpu_vec_dot_fn cpu_dot_avx2_get(uint32_t weight_type) { return NULL; }
#endif
