/* quant.h — the table of tensor types (ggml's ids and block layouts) and
 * the reference quantize/dequantize routines, bit-exact with ggml.
 * All block formats are documented in quant.c next to their decoders. */
#ifndef BK_QUANT_H
#define BK_QUANT_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>
#include "brisk.h"

typedef enum quant_type {
    QT_F32 = 0, QT_F16 = 1, QT_Q4_0 = 2, QT_Q4_1 = 3, QT_Q5_0 = 6, QT_Q5_1 = 7,
    QT_Q8_0 = 8, QT_Q8_1 = 9, QT_Q2_K = 10, QT_Q3_K = 11, QT_Q4_K = 12, QT_Q5_K = 13,
    QT_Q6_K = 14, QT_Q8_K = 15, QT_IQ4_NL = 20, QT_IQ4_XS = 23, QT_BF16 = 30,
    QT_MXFP4 = 39, QT_COUNT = 42
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

/* n must be a multiple of the block size. */
brisk_status quant_dequantize(uint32_t type, const void *src, float *dst, int64_t n);
brisk_status quant_quantize(uint32_t type, const float *src, void *dst, int64_t n);

/* Scalar conversions, exact as in ggml. */
float quant_f16_to_f32(uint16_t h);
uint16_t quant_f32_to_f16(float f);
float quant_bf16_to_f32(uint16_t h);
uint16_t quant_f32_to_bf16(float f); /* round to nearest even, NaN kept quiet */
#endif
