/* cpu_pgemm.c — cpu_pgemm.h's entry points: the table of the ISA that
 * cpu_dot_isa() chose (cpu_pgemm_isa.h); portable cores have none, and every
 * prompt product then runs the multi-row kernels of cpu_dot.h. */
#include "backend/cpu/cpu_pgemm.h"

#include "backend/cpu/cpu_dot.h"
#include "backend/cpu/cpu_pgemm_isa.h"

/* The table that runs wtype: the chosen ISA's, and on an AVX-512 core the AVX2 table for the types
 * the AVX-512 one lacks (IQ4_XS: its int16 panels need only AVX2; without them its prompts ran the
 * multi-row kernels at 0.54x llama.cpp's pp256 on the 2-core AVX-512 VNNI VM, session 36). */
static const cpu_pgemm_ops *isa_ops(uint32_t wtype) {
#if defined(__x86_64__)
    switch (cpu_dot_isa()) {
    case CPU_ISA_AVX512:
        if (cpu_pgemm_avx512.tile_tokens(wtype) || !cpu_pgemm_avx2.tile_tokens(wtype)) return &cpu_pgemm_avx512;
        return &cpu_pgemm_avx2;
    case CPU_ISA_AVX2: return &cpu_pgemm_avx2;
    default: break;
    }
#endif
    (void)wtype;
    return NULL;
}

int cpu_pgemm_tile_tokens(uint32_t wtype) {
    const cpu_pgemm_ops *o = isa_ops(wtype);
    return o ? o->tile_tokens(wtype) : 0;
}

bool cpu_pgemm_same_tiles(uint32_t a, uint32_t b) { return isa_ops(a) == isa_ops(b); }

size_t cpu_pgemm_act_bytes(uint32_t wtype, int64_t k) { return isa_ops(wtype)->act_bytes(wtype, k); }
size_t cpu_pgemm_panel_bytes(uint32_t wtype, int64_t k) { return isa_ops(wtype)->panel_bytes(wtype, k); }

void cpu_pgemm_pack_act(uint32_t wtype, int64_t k, const void *xq, size_t x_stride, int nt, void *tile) {
    isa_ops(wtype)->pack_act(wtype, k, xq, x_stride, nt, tile);
}

void cpu_pgemm_pack_panel(uint32_t wtype, int64_t k, const void *w, size_t row_bytes, int nr, void *panel) {
    isa_ops(wtype)->pack_panel(wtype, k, w, row_bytes, nr, panel);
}

void cpu_pgemm_tile(uint32_t wtype, int64_t k, const void *panel, const void *tile, float *out) {
    isa_ops(wtype)->tile(wtype, k, panel, tile, out);
}
