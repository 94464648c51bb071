/* quant.h — the table of tensor types (ggml's ids and block layouts) and
 * the reference quantize/dequantize routines, bit-exact with ggml.
 * All block formats are documented in quant.c next to their decoders; the
 * codebook, ternary and FP4 formats (IQ1..IQ3, TQ, NVFP4, Q1_0/Q2_0) live in
 * quant_iq.h/.c. */
#ifndef BK_QUANT_H
#define BK_QUANT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "brisk.h"

typedef enum quant_type {
    QT_F32 = 0, QT_F16 = 1, QT_Q4_0 = 2, QT_Q4_1 = 3, QT_Q5_0 = 6, QT_Q5_1 = 7,
    QT_Q8_0 = 8, QT_Q8_1 = 9, QT_Q2_K = 10, QT_Q3_K = 11, QT_Q4_K = 12, QT_Q5_K = 13,
    QT_Q6_K = 14, QT_Q8_K = 15, QT_IQ2_XXS = 16, QT_IQ2_XS = 17, QT_IQ3_XXS = 18, QT_IQ1_S = 19,
    QT_IQ4_NL = 20, QT_IQ3_S = 21, QT_IQ2_S = 22, QT_IQ4_XS = 23, QT_I8 = 24, QT_I16 = 25, QT_I32 = 26,
    QT_I64 = 27, QT_F64 = 28, QT_IQ1_M = 29, QT_BF16 = 30,
    QT_TQ1_0 = 34, QT_TQ2_0 = 35, QT_MXFP4 = 39, QT_NVFP4 = 40, QT_Q1_0 = 41, QT_Q2_0 = 42, QT_COUNT = 43
} quant_type;

typedef struct quant_traits {
    const char *name;     /* ggml's name: "q4_K", "f16", ... */
    int32_t block_elems;  /* elements per block */
    int32_t block_bytes;  /* bytes per block */
    quant_type vec_dot_type; /* activation format the CPU dot product pairs with */
    bool can_dequantize;  /* brisk reads this type */
    bool can_quantize;    /* brisk writes this type (reference quantizer) */
} quant_traits;

/* NULL for an id brisk does not know. */
const quant_traits *quant_get_traits(uint32_t type);
const char *quant_type_name(uint32_t type); /* "?" if unknown */
/* Bytes of a row of n elements; 0 if n is not a multiple of the block size or the type is unknown. */
size_t quant_row_size(uint32_t type, int64_t n);

/* n must be a multiple of the block size. quant_quantize is ggml's
 * from_float_ref (quantize_row_*_ref): deterministic, no importance weights. */
brisk_status quant_dequantize(uint32_t type, const void *src, float *dst, int64_t n);
brisk_status quant_quantize(uint32_t type, const float *src, void *dst, int64_t n);
/* What llama-quantize writes (ggml_quantize_chunk): nrows rows of n_per_row
 * into dst (nrows * quant_row_size bytes). imatrix is NULL or n_per_row
 * importance weights (one per column, >= 0). Without one this equals
 * quant_quantize except IQ4_NL, which searches scales; with one, Q2_K..Q6_K,
 * IQ4_NL/XS and Q4_0/Q4_1/Q5_0/Q5_1 use the weighted searches (others ignore it). */
brisk_status quant_quantize_rows(uint32_t type, const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                                 const float *imatrix);

/* Scalar conversions, exact as in ggml. */
float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f); /* round to nearest even, NaN kept quiet */
/* Block layouts (all little-endian, packed by natural alignment; sizes are
 * asserted in quant.c). f16/bf16 fields are raw uint16_t bits. */
#define QK_K 256
typedef struct { uint16_t d; uint8_t qs[16]; } blk_q4_0;              /* 32 elems */
typedef struct { uint16_t d, m; uint8_t qs[16]; } blk_q4_1;           /* 32 */
typedef struct { uint16_t d; uint8_t qh[4]; uint8_t qs[16]; } blk_q5_0; /* 32 */
typedef struct { uint16_t d, m; uint8_t qh[4]; uint8_t qs[16]; } blk_q5_1; /* 32 */
typedef struct { uint16_t d; int8_t qs[32]; } blk_q8_0;               /* 32 */
typedef struct { uint16_t d, s; int8_t qs[32]; } blk_q8_1;            /* 32, s = d*sum(qs) */
typedef struct { uint8_t scales[16]; uint8_t qs[64]; uint16_t d, dmin; } blk_q2_K;
typedef struct { uint8_t hmask[32]; uint8_t qs[64]; uint8_t scales[12]; uint16_t d; } blk_q3_K;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qs[128]; } blk_q4_K;
typedef struct { uint16_t d, dmin; uint8_t scales[12]; uint8_t qh[32]; uint8_t qs[128]; } blk_q5_K;
typedef struct { uint8_t ql[128]; uint8_t qh[64]; int8_t scales[16]; uint16_t d; } blk_q6_K;
typedef struct { float d; int8_t qs[256]; int16_t bsums[16]; } blk_q8_K; /* bsums: per 16 */
typedef struct { uint16_t d; uint8_t qs[16]; } blk_iq4_nl;            /* 32 */
typedef struct { uint16_t d, scales_h; uint8_t scales_l[4]; uint8_t qs[128]; } blk_iq4_xs;
typedef struct { uint8_t e; uint8_t qs[16]; } blk_mxfp4;              /* 32, E8M0 scale */

/* Codebooks: IQ4_NL/IQ4_XS non-linear values and ggml's doubled E2M1 values. */
extern const int8_t quant_iq4nl_values[16];
extern const int8_t quant_mxfp4_values[16];
/* ggml's ggml_e8m0_to_fp32_half: 2^(e-128), denormal for e < 2. */
float quant_e8m0_to_f32_half(uint8_t e);
/* Unpacks Q4_K/Q5_K's 6-bit scale and min for sub-block j (0..7). */
static inline void quant_k4_scale_min(int j, const uint8_t *q, uint8_t *sc, uint8_t *m) {
    if (j < 4) {
        *sc = q[j] & 63;
        *m = q[j + 4] & 63;
    } else {
        *sc = (uint8_t)((q[j + 4] & 0xF) | ((q[j - 4] >> 6) << 4));
        *m = (uint8_t)((q[j + 4] >> 4) | ((q[j] >> 6) << 4));
    }
}
/* IQ4_XS's 6-bit scale of sub-block ib (0..7), before its -32 offset. */
static inline int quant_iq4xs_scale(const blk_iq4_xs *b, int ib) {
    return ((b->scales_l[ib / 2] >> 4 * (ib % 2)) & 15) | (((b->scales_h >> 2 * ib) & 3) << 4);
}
/* Unpacks Q3_K's sixteen 6-bit scales (already minus 32). */
void quant_q3k_scales(const uint8_t packed[12], int8_t out[16]);

#endif
