/* cpu_repack_isa.h — private: one table of repacked layouts and kernels per
 * instruction set (cpu_repack_avx512.c, cpu_repack_avx2.c). cpu_repack.c
 * picks the table of the ISA cpu_dot_isa() chose; the entries mean what the
 * public functions of cpu_repack.h of the same names mean, except that
 * bytes() is only asked for n_out >= rows(type) > 0 and repacking on. */
#ifndef BK_CPU_REPACK_ISA_H
#define BK_CPU_REPACK_ISA_H
#include "backend/cpu/cpu_repack.h"

typedef struct cpu_repack_ops {
    int (*rows)(uint32_t type); /* rows per group, 0: no layout for this type */
    size_t (*bytes)(uint32_t type, int64_t n_in, int64_t n_out);
    size_t (*act_bytes)(uint32_t type, int64_t n_in);
    void (*weights)(uint32_t type, int64_t n_in, int64_t n_out, const void *w, size_t ws, void *dst);
    void (*act)(uint32_t type, int64_t n_in, const void *xq, void *xa);
    void (*gemm)(uint32_t type, int64_t n_in, const void *wr, int64_t g0, int64_t g1, const void *xa, size_t xs,
                 int nx, float *s, size_t ss);
} cpu_repack_ops;

extern const cpu_repack_ops cpu_repack_avx512, cpu_repack_avx2;
#endif
