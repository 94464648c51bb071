/* cpu_pgemm.c — cpu_pgemm.h's entry points: the table of the ISA that
 * cpu_dot_isa() chose (cpu_pgemm_isa.h); portable cores have none, and every
 * prompt product then runs the multi-row kernels of cpu_dot.h. */
#include "backend/cpu/cpu_pgemm.h"

#include "backend/cpu/cpu_dot.h"
#include "backend/cpu/cpu_pgemm_isa.h"

static const cpu_pgemm_ops *isa_ops(void) {
#if defined(__x86_64__)
    switch (cpu_dot_isa()) {
    case CPU_ISA_AVX512: return &cpu_pgemm_avx512;
    case CPU_ISA_AVX2: return &cpu_pgemm_avx2;
    default: break;
    }
#endif
    return NULL;
}

int cpu_pgemm_tile_tokens(uint32_t wtype) {
    const cpu_pgemm_ops *o = isa_ops();
    return o ? o->tile_tokens(wtype) : 0;
}

size_t cpu_pgemm_act_bytes(uint32_t wtype, int64_t k) { return isa_ops()->act_bytes(wtype, k); }
size_t cpu_pgemm_panel_bytes(uint32_t wtype, int64_t k) { return isa_ops()->panel_bytes(wtype, k); }

void cpu_pgemm_pack_act(uint32_t wtype, int64_t k, const void *xq, size_t x_stride, int nt, void *tile) {
    isa_ops()->pack_act(wtype, k, xq, x_stride, nt, tile);
}

void cpu_pgemm_pack_panel(uint32_t wtype, int64_t k, const void *w, size_t row_bytes, int nr, void *panel) {
    isa_ops()->pack_panel(wtype, k, w, row_bytes, nr, panel);
}

void cpu_pgemm_tile(uint32_t wtype, int64_t k, const void *panel, const void *tile, float *out) {
    isa_ops()->tile(wtype, k, panel, tile, out);
}
