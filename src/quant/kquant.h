/* kquant.h — private to src/quant: the searching quantizers of quant_kquant.c.
 * Each takes one row of n elements (n a multiple of the block size) and an
 * optional importance vector qw (n weights, one per column; NULL = none).
 * With qw == NULL the K-quants are ggml's reference quantizers
 * (quantize_row_*_ref); with weights they are the searches llama-quantize runs
 * with an imatrix. */
#ifndef BK_KQUANT_H
#define BK_KQUANT_H
#include <stdint.h>
#include <string.h>

#include "quant/quant.h"

/* ggml's nearest_int: round half to even through the 1.5*2^23 trick; |v| < 2^22. */
static inline int kq_nearest_int(float v) {
    float t = v + 12582912.f;
    int32_t i;
    memcpy(&i, &t, 4);
    return (i & 0x007FFFFF) - 0x00400000;
}

void kq_quantize_q2_K(const float *x, blk_q2_K *y, int64_t n, const float *qw);
void kq_quantize_q3_K(const float *x, blk_q3_K *y, int64_t n, const float *qw);
void kq_quantize_q4_K(const float *x, blk_q4_K *y, int64_t n, const float *qw);
void kq_quantize_q5_K(const float *x, blk_q5_K *y, int64_t n, const float *qw);
void kq_quantize_q6_K(const float *x, blk_q6_K *y, int64_t n, const float *qw);
/* IQ4_NL (32-element blocks) or IQ4_XS (256, xs = true). ntry = 7 is what
 * ggml_quantize_chunk uses; ntry = -1 is quantize_row_iq4_nl_ref. */
void kq_quantize_iq4(const float *x, void *y, int64_t n, const float *qw, int ntry, bool xs);
/* ggml's make_qp_quants: n non-negative values x to levels L in [0, nmax]
 * against one scale (returned), weighted by qw. */
float kq_search_pos(int n, int nmax, const float *x, uint8_t *L, const float *qw);
/* The weighted Q4_0, Q4_1, Q5_0, Q5_1 (qw must not be NULL). */
void kq_quantize_legacy_w(uint32_t type, const float *x, void *y, int64_t n, const float *qw);

#endif
