/* cpu_repack.c — cpu_repack.h's entry points: the table of the ISA that
 * cpu_dot_isa() chose (cpu_repack_isa.h), or none (portable cores,
 * BRISK_CPU_REPACK=0: every product then reads the mapped rows). */
#include "backend/cpu/cpu_repack.h"

#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_dot.h"
#include "backend/cpu/cpu_repack_isa.h"

static const cpu_repack_ops *isa_ops(void) {
#if defined(__x86_64__)
    switch (cpu_dot_isa()) {
    case CPU_ISA_AVX512: return &cpu_repack_avx512;
    case CPU_ISA_AVX2: return &cpu_repack_avx2;
    default: break;
    }
#endif
    return NULL;
}

/* Read at each call, not once: the tests build backends with and without copies in one process. */
static bool repack_on(void) {
    const char *e = getenv("BRISK_CPU_REPACK");
    return !(e && !strcmp(e, "0"));
}

int cpu_repack_rows(uint32_t type) {
    const cpu_repack_ops *o = isa_ops();
    return o ? o->rows(type) : 0;
}

size_t cpu_repack_bytes(uint32_t type, int64_t n_in, int64_t n_out) {
    const cpu_repack_ops *o = isa_ops();
    const int R = o ? o->rows(type) : 0;
    if (!R || n_out < R || !repack_on()) return 0;
    return o->bytes(type, n_in, n_out);
}

size_t cpu_repack_act_bytes(uint32_t type, int64_t n_in) {
    const cpu_repack_ops *o = isa_ops();
    return o && o->rows(type) ? o->act_bytes(type, n_in) : 0;
}

void cpu_repack_weights(uint32_t type, int64_t n_in, int64_t n_out, const void *w, size_t ws, void *dst) {
    const cpu_repack_ops *o = isa_ops();
    if (o && o->rows(type)) o->weights(type, n_in, n_out, w, ws, dst);
}

void cpu_repack_act(uint32_t type, int64_t n_in, const void *xq, void *xa) {
    const cpu_repack_ops *o = isa_ops();
    if (o && o->rows(type)) o->act(type, n_in, xq, xa);
}

void cpu_repack_gemm(uint32_t type, int64_t n_in, const void *wr, int64_t g0, int64_t g1, const void *xa, size_t xs,
                     int nx, float *s, size_t ss) {
    const cpu_repack_ops *o = isa_ops();
    if (o && o->rows(type)) o->gemm(type, n_in, wr, g0, g1, xa, xs, nx, s, ss);
}
