/* cpu_pgemm.h — prompt-batch matrix products on packed panels (AVX-512 VNNI,
 * and AVX2: cpu_pgemm_avx2.c, int16 and u8 panels for cores without VNNI).
 *
 * For a batch of many tokens the weight row's unpacking, not the arithmetic,
 * limits the fused kernels of cpu_dot.h. Here each thread unpacks a panel of
 * CPU_PGEMM_ROWS weight rows once per matmul call into a small buffer of its
 * own (int8 values interleaved four elements per row, float scales), and runs
 * it against every token: one vector lane per weight row, the activation's
 * four int8 values (two bf16) broadcast, so a vpdpbusd (vdpbf16ps) does 64
 * products with no unpacking and no horizontal sum. The weights stay mapped;
 * the panel is scratch, reused for the next 16 rows.
 *
 * Activations are first converted as for cpu_dot.h (q8_K, q8_0 or bf16
 * rows: the same quantization as ggml), then interleaved into token tiles
 * (cpu_pgemm_pack_act). Results equal the exact dot product of those
 * operands up to float rounding: the integer sums are exact, the float
 * accumulation order differs from ggml's vec_dot (the scales are applied per
 * sub-block in float), so results match cpu_dot.h to ~1e-6 relative, not
 * bitwise.
 *
 * Every function here needs cpu_pgemm_tile_tokens(type) > 0 for its type. */
#ifndef BK_CPU_PGEMM_H
#define BK_CPU_PGEMM_H
#include <stddef.h>
#include <stdint.h>

#define CPU_PGEMM_ROWS 16 /* weight rows per panel: one per zmm lane */

/* Tokens per activation tile for weight type wtype on this CPU; 0 when
 * there is no packed kernel (other types, a portable core or BRISK_CPU_ISA=portable).
 * Types that share a vec_dot_type share the tile format. */
int cpu_pgemm_tile_tokens(uint32_t wtype);
/* Bytes of one token tile of k elements, of one weight panel of k columns. */
size_t cpu_pgemm_act_bytes(uint32_t wtype, int64_t k);
size_t cpu_pgemm_panel_bytes(uint32_t wtype, int64_t k);
/* Interleaves nt (<= tile tokens) rows of converted activations (vec_dot_type
 * rows, x_stride bytes apart) into one tile; missing tokens are zero. */
void cpu_pgemm_pack_act(uint32_t wtype, int64_t k, const void *xq, size_t x_stride, int nt, void *tile);
/* Unpacks nr (<= CPU_PGEMM_ROWS) weight rows (row_bytes apart) into a panel;
 * missing rows are zero. */
void cpu_pgemm_pack_panel(uint32_t wtype, int64_t k, const void *w, size_t row_bytes, int nr, void *panel);
/* out[t * CPU_PGEMM_ROWS + r] = dot(weight row r of the panel, token t of the tile). */
void cpu_pgemm_tile(uint32_t wtype, int64_t k, const void *panel, const void *tile, float *out);
#endif
