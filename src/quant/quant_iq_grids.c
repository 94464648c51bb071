/* quant_iq_grids.c — the codebooks of ggml's i-quants, as data.
 *
 * A grid entry packs 8 (IQ2_*, IQ1_*) or 4 (IQ3_*) magnitudes, one per byte,
 * little-endian: element j of an entry is byte j. The byte values are
 *   IQ2_XXS/XS/S  8, 25, 43              (unsigned; signs stored apart)
 *   IQ3_XXS       4, 12, ..., 52, 62     (unsigned)
 *   IQ3_S         1, 3, ..., 15          (unsigned)
 *   IQ1_S/M       -1, 0, +1              (int8; shifted by a delta of 1/8)
 * The points are a chosen lattice subset, not a formula, so they are data:
 * transcribed from llama.cpp's ggml-common.h by a one-off script. The
 * bit-exact dequantization test against ggml (tests/test_quant.c) decodes
 * enough random blocks to reach every entry. The values sit in quant_iq_grids.inc, which
 * the CUDA kernels include too. */
#include "quant/quant_iq.h"

#define QUANT_IQ_GRID(T, name, n, ...) const T quant_##name[n] = __VA_ARGS__;
#include "quant/quant_iq_grids.inc"
#undef QUANT_IQ_GRID
