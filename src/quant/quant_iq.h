/* quant_iq.h — ggml's codebook and ternary formats: the i-quants (IQ1_S,
 * IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S), the ternary TQ1_0/TQ2_0,
 * NVFP4 and the 1/2-bit Q1_0/Q2_0. Private to the quant module and the CPU
 * dot kernels; everything else goes through quant.h's type table.
 *
 * Block layouts (little-endian, packed; sizes asserted in quant_iq.c). "d"
 * fields are f16 bits. Element order inside a block is given next to each
 * decoder in quant_iq.c. The grids (quant_iq_grids.c) are read-only data. */
#ifndef BK_QUANT_IQ_H
#define BK_QUANT_IQ_H
#include <stdint.h>

#include "brisk.h"

typedef struct { uint16_t d; uint16_t qs[32]; } blk_iq2_xxs;                          /* 66 */
typedef struct { uint16_t d; uint16_t qs[32]; uint8_t scales[8]; } blk_iq2_xs;        /* 74 */
typedef struct { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t scales[8]; } blk_iq2_s; /* 82 */
typedef struct { uint16_t d; uint8_t qs[96]; } blk_iq3_xxs;                          /* 98 */
typedef struct { uint16_t d; uint8_t qs[64]; uint8_t qh[8]; uint8_t signs[32]; uint8_t scales[4]; } blk_iq3_s; /* 110 */
typedef struct { uint16_t d; uint8_t qs[32]; uint16_t qh[8]; } blk_iq1_s;            /* 50 */
typedef struct { uint8_t qs[32]; uint8_t qh[16]; uint8_t scales[8]; } blk_iq1_m;     /* 56, f16 d: scales' top nibbles */
typedef struct { uint8_t qs[48]; uint8_t qh[4]; uint16_t d; } blk_tq1_0;             /* 54: 5 trits a qs byte, 4 a qh */
typedef struct { uint8_t qs[64]; uint16_t d; } blk_tq2_0;                            /* 66 */
typedef struct { uint8_t d[4]; uint8_t qs[32]; } blk_nvfp4;  /* 64 elems, 36: a UE4M3 scale per 16 */
typedef struct { uint16_t d; uint8_t qs[16]; } blk_q1_0;     /* 128 elems, 18: bit set = +d, clear = -d */
typedef struct { uint16_t d; uint8_t qs[16]; } blk_q2_0;     /* 64 elems, 18: 2 bits, value (q - 1) * d */

/* Codebooks (quant_iq_grids.c): byte j of an entry is element j. */
extern const uint64_t quant_iq2xxs_grid[256];
extern const uint64_t quant_iq2xs_grid[512];
extern const uint64_t quant_iq2s_grid[1024];
extern const uint32_t quant_iq3xxs_grid[256];
extern const uint32_t quant_iq3s_grid[512];
extern const uint64_t quant_iq1s_grid[2048]; /* int8 bytes: -1, 0, +1 */

/* ggml's ggml_ue4m3_to_fp32: an unsigned E4M3 scale, halved (the E2M1 codebook
 * is stored doubled); 0 and 0x7F decode to 0. */
float quant_ue4m3_to_f32_half(uint8_t x);

/* True for the types this file implements. */
int quant_iq_has(uint32_t type);
/* nb blocks of `type` to floats, bitwise ggml's to_float. */
brisk_status quant_iq_dequantize(uint32_t type, const void *src, float *dst, int64_t nb);
/* nb blocks from floats, bytewise ggml's from_float_ref: TQ1_0, TQ2_0, NVFP4,
 * Q1_0 and Q2_0 only (the i-quants need llama.cpp's lattice searches). */
brisk_status quant_iq_quantize(uint32_t type, const float *src, void *dst, int64_t nb);

/* One row of n values (a multiple of 256) of IQ3_XXS, IQ3_S, IQ2_XXS, IQ2_XS
 * or IQ2_S, bytewise llama.cpp's quantize_iq3_xxs / _iq3_s / _iq2_xxs / _iq2_xs / _iq2_s;
 * qw: n importances (one per column), or NULL (not for the IQ2 types, which
 * need them, as in llama.cpp). quant_iq_search.c. */
brisk_status quant_iq_quantize_row(uint32_t type, const float *x, void *dst, int64_t n, const float *qw);

/* A block in integer form, for int8 dot products. Element i of the block is
 *   d * ls[i/16] * q[i]   for the types paired with Q8_K (all 256-element ones),
 *   d16[i/16] * q[i]      for NVFP4, Q1_0 and Q2_0 (paired with Q8_0),
 * up to float rounding of the scale products (the i-quants' half-steps and
 * IQ1's 1/8 shift are folded into q and d, so q stays an exact int8). */
typedef struct quant_iq_block {
    int8_t q[256];  /* (block_elems) values, |q| <= 62 */
    int32_t ls[16]; /* integer scale per 16 values (Q8_K pairs), <= 31 */
    float d;        /* block factor (Q8_K pairs) */
    float d16[16];  /* float scale per 16 values (Q8_0 pairs) */
} quant_iq_block;
void quant_iq_unpack(uint32_t type, const void *blk, quant_iq_block *out);
#endif
