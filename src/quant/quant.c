/* quant.c — the type table, scalar f16/bf16 conversions, and reference
 * dequantizers/quantizers for ggml's block formats.
 *
 * Every decoder reproduces ggml's float arithmetic step by step (same
 * products in the same order), so results are bit-identical to
 * ggml_get_type_traits(t)->to_float; the quantizers reproduce
 * from_float_ref. Block layouts are declared in quant.h; see
 * REFERENCE-ARCH.md section 3 for the element orders. */
#include "quant/quant.h"

#include <float.h>
#include <math.h>
#include <string.h>

#include "base/status.h"
#include "quant/kquant.h"
#include "quant/quant_iq.h"

_Static_assert(sizeof(blk_q4_0) == 18, "q4_0");
_Static_assert(sizeof(blk_q4_1) == 20, "q4_1");
_Static_assert(sizeof(blk_q5_0) == 22, "q5_0");
_Static_assert(sizeof(blk_q5_1) == 24, "q5_1");
_Static_assert(sizeof(blk_q8_0) == 34, "q8_0");
_Static_assert(sizeof(blk_q8_1) == 36, "q8_1");
_Static_assert(sizeof(blk_q2_K) == 84, "q2_K");
_Static_assert(sizeof(blk_q3_K) == 110, "q3_K");
_Static_assert(sizeof(blk_q4_K) == 144, "q4_K");
_Static_assert(sizeof(blk_q5_K) == 176, "q5_K");
_Static_assert(sizeof(blk_q6_K) == 210, "q6_K");
_Static_assert(sizeof(blk_q8_K) == 292, "q8_K");
_Static_assert(sizeof(blk_iq4_nl) == 18, "iq4_nl");
_Static_assert(sizeof(blk_iq4_xs) == 136, "iq4_xs");
_Static_assert(sizeof(blk_mxfp4) == 17, "mxfp4");

const int8_t quant_iq4nl_values[16] = {-127, -104, -83, -65, -49, -35, -22, -10,
                                       1,    13,   25,  38,  53,  69,  89,  113};
const int8_t quant_mxfp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12, 0, -1, -2, -3, -4, -6, -8, -12};

/* name, block elems, block bytes, vec_dot_type, can_dequantize, can_quantize */
static const quant_traits traits_table[QT_COUNT] = {
    [QT_F32] = {"f32", 1, 4, QT_F32, true, true},
    [QT_F16] = {"f16", 1, 2, QT_F16, true, true},
    [QT_Q4_0] = {"q4_0", 32, 18, QT_Q8_0, true, true},
    [QT_Q4_1] = {"q4_1", 32, 20, QT_Q8_1, true, true},
    [QT_Q5_0] = {"q5_0", 32, 22, QT_Q8_0, true, true},
    [QT_Q5_1] = {"q5_1", 32, 24, QT_Q8_1, true, true},
    [QT_Q8_0] = {"q8_0", 32, 34, QT_Q8_0, true, true},
    [QT_Q8_1] = {"q8_1", 32, 36, QT_Q8_1, true, true},
    [QT_Q2_K] = {"q2_K", 256, 84, QT_Q8_K, true, true},
    [QT_Q3_K] = {"q3_K", 256, 110, QT_Q8_K, true, true},
    [QT_Q4_K] = {"q4_K", 256, 144, QT_Q8_K, true, true},
    [QT_Q5_K] = {"q5_K", 256, 176, QT_Q8_K, true, true},
    [QT_Q6_K] = {"q6_K", 256, 210, QT_Q8_K, true, true},
    [QT_Q8_K] = {"q8_K", 256, 292, QT_Q8_K, true, true},
    [QT_IQ4_NL] = {"iq4_nl", 32, 18, QT_Q8_0, true, true},
    [QT_IQ4_XS] = {"iq4_xs", 256, 136, QT_Q8_K, true, true},
    [QT_BF16] = {"bf16", 1, 2, QT_BF16, true, true},
    [QT_MXFP4] = {"mxfp4", 32, 17, QT_Q8_0, true, true},
    /* quant_iq.c: the i-quants are read only (their quantizers need llama.cpp's lattice searches) */
    [QT_IQ2_XXS] = {"iq2_xxs", 256, 66, QT_Q8_K, true, false},
    [QT_IQ2_XS] = {"iq2_xs", 256, 74, QT_Q8_K, true, false},
    [QT_IQ3_XXS] = {"iq3_xxs", 256, 98, QT_Q8_K, true, true},
    [QT_IQ1_S] = {"iq1_s", 256, 50, QT_Q8_K, true, false},
    [QT_IQ3_S] = {"iq3_s", 256, 110, QT_Q8_K, true, true},
    [QT_IQ2_S] = {"iq2_s", 256, 82, QT_Q8_K, true, true},
    [QT_IQ1_M] = {"iq1_m", 256, 56, QT_Q8_K, true, true},
    [QT_TQ1_0] = {"tq1_0", 256, 54, QT_Q8_K, true, true},
    [QT_TQ2_0] = {"tq2_0", 256, 66, QT_Q8_K, true, true},
    [QT_NVFP4] = {"nvfp4", 64, 36, QT_Q8_0, true, true},
    [QT_Q1_0] = {"q1_0", 128, 18, QT_Q8_0, true, true},
    [QT_Q2_0] = {"q2_0", 64, 18, QT_Q8_0, true, true},
    /* plain numbers, not weights: a file may hold them (an EAGLE-3 drafter's d2t is i64); the tensor
     * loaders refuse them as weights (can_dequantize false) and read them where they mean something */
    [QT_I8] = {"i8", 1, 1, QT_COUNT, false, false},
    [QT_I16] = {"i16", 1, 2, QT_COUNT, false, false},
    [QT_I32] = {"i32", 1, 4, QT_COUNT, false, false},
    [QT_I64] = {"i64", 1, 8, QT_COUNT, false, false},
    [QT_F64] = {"f64", 1, 8, QT_COUNT, false, false},
};

const quant_traits *quant_get_traits(uint32_t type) {
    if (type >= QT_COUNT || !traits_table[type].name) return NULL;
    return &traits_table[type];
}

const char *quant_type_name(uint32_t type) {
    const quant_traits *t = quant_get_traits(type);
    return t ? t->name : "?";
}

size_t quant_row_size(uint32_t type, int64_t n) {
    const quant_traits *t = quant_get_traits(type);
    if (!t || n < 0 || n % t->block_elems) return 0;
    return (size_t)(n / t->block_elems) * (size_t)t->block_bytes;
}

/* ---- scalar conversions ---- */

static inline float f32_from_bits(uint32_t u) {
    float f;
    memcpy(&f, &u, 4);
    return f;
}
static inline uint32_t f32_bits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

/* Exact: a half's value is representable in f32. Subnormal halves are
 * built as (mantissa as float) * 2^-24; inf/NaN keep their payload. */
float quant_f16_to_f32(uint16_t h) {
    uint32_t sign = (uint32_t)(h & 0x8000) << 16;
    uint32_t exp = (h >> 10) & 0x1F, man = h & 0x3FF;
    if (exp == 0x1F) /* inf, or NaN made quiet as the FPU and F16C do */
        return f32_from_bits(sign | 0x7F800000u | (man << 13) | (man ? 0x400000u : 0));
    if (exp == 0) {
        float v = (float)man * 0x1p-24f;
        return sign ? -v : v;
    }
    return f32_from_bits(sign | ((exp + 112) << 23) | (man << 13));
}

/* Round to nearest even, overflow to inf, subnormal halves kept, NaN -> quiet
 * 0x7E00 with the sign (as ggml's software path does). */
uint16_t quant_f32_to_f16(float f) {
    uint32_t u = f32_bits(f);
    uint16_t sign = (uint16_t)((u >> 16) & 0x8000);
    uint32_t a = u & 0x7FFFFFFFu;
    if (a > 0x7F800000u) return sign | 0x7E00;
    if (a >= 0x477FF000u) return sign | 0x7C00; /* >= 65520 rounds to inf */
    if (a < 0x38800000u) {                      /* below 2^-14: subnormal half */
        /* value / 2^-24, rounded to nearest even by the FPU. */
        float v = f32_from_bits(a) * 0x1p24f;
        float r = nearbyintf(v);
        return sign | (uint16_t)r;
    }
    uint32_t exp = (a >> 23) - 112, man = a & 0x7FFFFF;
    uint32_t h = (exp << 10) | (man >> 13);
    uint32_t rest = man & 0x1FFF;
    if (rest > 0x1000 || (rest == 0x1000 && (h & 1))) h++; /* carry may reach inf: correct */
    return sign | (uint16_t)h;
}

float quant_bf16_to_f32(uint16_t h) { return f32_from_bits((uint32_t)h << 16); }

uint16_t quant_f32_to_bf16(float f) {
    uint32_t u = f32_bits(f);
    if ((u & 0x7FFFFFFFu) > 0x7F800000u) return (uint16_t)((u >> 16) | 64);
    return (uint16_t)((u + 0x7FFF + ((u >> 16) & 1)) >> 16);
}

float quant_e8m0_to_f32_half(uint8_t e) {
    return e < 2 ? f32_from_bits(0x00200000u << e) : f32_from_bits((uint32_t)(e - 1) << 23);
}

void quant_q3k_scales(const uint8_t p[12], int8_t out[16]) {
    for (int i = 0; i < 16; i++) {
        int lo = i < 8 ? (p[i] & 15) : (p[i - 8] >> 4);
        int hi = (p[8 + i % 4] >> (2 * (i / 4))) & 3;
        out[i] = (int8_t)((lo | (hi << 4)) - 32);
    }
}

#define H2F quant_f16_to_f32
#define F2H quant_f32_to_f16

/* ---- dequantizers (nb blocks each) ---- */

static void deq_q4_0(const blk_q4_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const float d = H2F(x[i].d);
        for (int j = 0; j < 16; j++) {
            y[j] = ((x[i].qs[j] & 15) - 8) * d;
            y[j + 16] = ((x[i].qs[j] >> 4) - 8) * d;
        }
    }
}

static void deq_q4_1(const blk_q4_1 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const float d = H2F(x[i].d), m = H2F(x[i].m);
        for (int j = 0; j < 16; j++) {
            y[j] = (x[i].qs[j] & 15) * d + m;
            y[j + 16] = (x[i].qs[j] >> 4) * d + m;
        }
    }
}

/* Q5_0 (has_min=0) and Q5_1 share the 5-bit unpack. */
static void deq_q5(const uint8_t *qh4, const uint8_t *qs, float d, float m, bool has_min, float *y) {
    uint32_t qh;
    memcpy(&qh, qh4, 4);
    for (int j = 0; j < 16; j++) {
        int x0 = (qs[j] & 15) | (((qh >> j) & 1) << 4);
        int x1 = (qs[j] >> 4) | (((qh >> (j + 16)) & 1) << 4);
        if (has_min) {
            y[j] = x0 * d + m;
            y[j + 16] = x1 * d + m;
        } else {
            y[j] = (x0 - 16) * d;
            y[j + 16] = (x1 - 16) * d;
        }
    }
}

static void deq_q8_0(const blk_q8_0 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const float d = H2F(x[i].d);
        for (int j = 0; j < 32; j++) y[j] = x[i].qs[j] * d;
    }
}

static void deq_q2_K(const blk_q2_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = H2F(x[i].d), dmin = H2F(x[i].dmin);
        const uint8_t *q = x[i].qs;
        int is = 0;
        for (int n = 0; n < 2; n++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2) {
                for (int half = 0; half < 2; half++) {
                    uint8_t sc = x[i].scales[is++];
                    const float dl = d * (sc & 15), ml = dmin * (sc >> 4);
                    for (int l = 0; l < 16; l++) *y++ = dl * ((q[l + 16 * half] >> shift) & 3) - ml;
                }
            }
        }
    }
}

static void deq_q3_K(const blk_q3_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = H2F(x[i].d);
        int8_t sc[16];
        quant_q3k_scales(x[i].scales, sc);
        const uint8_t *q = x[i].qs;
        int is = 0;
        uint8_t m = 1;
        for (int n = 0; n < 2; n++, q += 32) {
            for (int shift = 0; shift < 8; shift += 2, m <<= 1) {
                for (int half = 0; half < 2; half++) {
                    const float dl = d * sc[is++];
                    for (int l = 16 * half; l < 16 * half + 16; l++)
                        *y++ = dl * (((q[l] >> shift) & 3) - ((x[i].hmask[l] & m) ? 0 : 4));
                }
            }
        }
    }
}

/* Q4_K (qh == NULL) and Q5_K. */
static void deq_q45_K(const uint16_t *dd, const uint8_t *scales, const uint8_t *qh, const uint8_t *q,
                      float *y) {
    const float d = H2F(dd[0]), dmin = H2F(dd[1]);
    uint8_t u1 = 1, u2 = 2;
    for (int c = 0; c < 4; c++, q += 32, u1 <<= 2, u2 <<= 2) {
        uint8_t sc, m;
        quant_k4_scale_min(2 * c, scales, &sc, &m);
        const float d1 = d * sc, m1 = dmin * m;
        quant_k4_scale_min(2 * c + 1, scales, &sc, &m);
        const float d2 = d * sc, m2 = dmin * m;
        for (int l = 0; l < 32; l++) *y++ = d1 * ((q[l] & 15) + (qh && (qh[l] & u1) ? 16 : 0)) - m1;
        for (int l = 0; l < 32; l++) *y++ = d2 * ((q[l] >> 4) + (qh && (qh[l] & u2) ? 16 : 0)) - m2;
    }
}

static void deq_q6_K(const blk_q6_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = H2F(x[i].d);
        const uint8_t *ql = x[i].ql, *qh = x[i].qh;
        const int8_t *sc = x[i].scales;
        for (int n = 0; n < 2; n++, y += 128, ql += 64, qh += 32, sc += 8) {
            for (int l = 0; l < 32; l++) {
                int is = l / 16;
                int q1 = ((ql[l] & 15) | (((qh[l] >> 0) & 3) << 4)) - 32;
                int q2 = ((ql[l + 32] & 15) | (((qh[l] >> 2) & 3) << 4)) - 32;
                int q3 = ((ql[l] >> 4) | (((qh[l] >> 4) & 3) << 4)) - 32;
                int q4 = ((ql[l + 32] >> 4) | (((qh[l] >> 6) & 3) << 4)) - 32;
                y[l] = d * sc[is] * q1;
                y[l + 32] = d * sc[is + 2] * q2;
                y[l + 64] = d * sc[is + 4] * q3;
                y[l + 96] = d * sc[is + 6] * q4;
            }
        }
    }
}

static void deq_q8_K(const blk_q8_K *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += 256)
        for (int j = 0; j < 256; j++) y[j] = x[i].d * x[i].qs[j];
}

/* IQ4_NL / IQ4_XS sub-block and MXFP4: split-half nibbles through a codebook. */
static void deq_codebook32(const uint8_t *qs, float d, const int8_t *kv, float *y) {
    for (int j = 0; j < 16; j++) {
        y[j] = d * kv[qs[j] & 15];
        y[j + 16] = d * kv[qs[j] >> 4];
    }
}

static void deq_iq4_xs(const blk_iq4_xs *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        const float d = H2F(x[i].d);
        for (int ib = 0; ib < 8; ib++, y += 32) {
            int ls = quant_iq4xs_scale(&x[i], ib);
            deq_codebook32(x[i].qs + 16 * ib, d * (ls - 32), quant_iq4nl_values, y);
        }
    }
}

static void deq_mxfp4(const blk_mxfp4 *x, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, y += 32) {
        const float d = quant_e8m0_to_f32_half(x[i].e);
        for (int j = 0; j < 16; j++) {
            y[j] = quant_mxfp4_values[x[i].qs[j] & 15] * d;
            y[j + 16] = quant_mxfp4_values[x[i].qs[j] >> 4] * d;
        }
    }
}

brisk_status quant_dequantize(uint32_t type, const void *src, float *dst, int64_t n) {
    const quant_traits *t = quant_get_traits(type);
    if (!t) return bk_fail(BRISK_ERR_UNSUPPORTED, "dequantize: unknown tensor type %u", type);
    if (n < 0 || n % t->block_elems)
        return bk_fail(BRISK_ERR_INVALID_ARG, "dequantize %s: %lld elements is not a multiple of %d",
                       t->name, (long long)n, t->block_elems);
    const int64_t nb = n / t->block_elems;
    switch ((quant_type)type) {
    case QT_F32: memcpy(dst, src, (size_t)n * 4); break;
    case QT_F16:
        for (int64_t i = 0; i < n; i++) dst[i] = H2F(((const uint16_t *)src)[i]);
        break;
    case QT_BF16:
        for (int64_t i = 0; i < n; i++) dst[i] = quant_bf16_to_f32(((const uint16_t *)src)[i]);
        break;
    case QT_Q4_0: deq_q4_0(src, dst, nb); break;
    case QT_Q4_1: deq_q4_1(src, dst, nb); break;
    case QT_Q5_0:
        for (int64_t i = 0; i < nb; i++) {
            const blk_q5_0 *b = (const blk_q5_0 *)src + i;
            deq_q5(b->qh, b->qs, H2F(b->d), 0.0f, false, dst + 32 * i);
        }
        break;
    case QT_Q5_1:
        for (int64_t i = 0; i < nb; i++) {
            const blk_q5_1 *b = (const blk_q5_1 *)src + i;
            deq_q5(b->qh, b->qs, H2F(b->d), H2F(b->m), true, dst + 32 * i);
        }
        break;
    case QT_Q8_0: deq_q8_0(src, dst, nb); break;
    case QT_Q8_1:
        for (int64_t i = 0; i < nb; i++) {
            const blk_q8_1 *b = (const blk_q8_1 *)src + i;
            const float d = H2F(b->d);
            for (int j = 0; j < 32; j++) dst[32 * i + j] = b->qs[j] * d;
        }
        break;
    case QT_Q2_K: deq_q2_K(src, dst, nb); break;
    case QT_Q3_K: deq_q3_K(src, dst, nb); break;
    case QT_Q4_K:
        for (int64_t i = 0; i < nb; i++) {
            const blk_q4_K *b = (const blk_q4_K *)src + i;
            deq_q45_K(&b->d, b->scales, NULL, b->qs, dst + 256 * i);
        }
        break;
    case QT_Q5_K:
        for (int64_t i = 0; i < nb; i++) {
            const blk_q5_K *b = (const blk_q5_K *)src + i;
            deq_q45_K(&b->d, b->scales, b->qh, b->qs, dst + 256 * i);
        }
        break;
    case QT_Q6_K: deq_q6_K(src, dst, nb); break;
    case QT_Q8_K: deq_q8_K(src, dst, nb); break;
    case QT_IQ4_NL:
        for (int64_t i = 0; i < nb; i++) {
            const blk_iq4_nl *b = (const blk_iq4_nl *)src + i;
            deq_codebook32(b->qs, H2F(b->d), quant_iq4nl_values, dst + 32 * i);
        }
        break;
    case QT_IQ4_XS: deq_iq4_xs(src, dst, nb); break;
    case QT_MXFP4: deq_mxfp4(src, dst, nb); break;
    default:
        if (quant_iq_has(type)) return quant_iq_dequantize(type, src, dst, nb);
        return bk_fail(BRISK_ERR_UNSUPPORTED, "dequantize: type %s", t->name);
    }
    return BRISK_OK;
}

/* ---- reference quantizers (match ggml's *_ref) ---- */

/* The signed value of largest magnitude (first one wins ties). */
static float signed_absmax(const float *x, int n, float *amax_out) {
    float amax = 0.0f, max = 0.0f;
    for (int j = 0; j < n; j++) {
        if (amax < fabsf(x[j])) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    if (amax_out) *amax_out = amax;
    return max;
}

static void quant_q4_0(const float *x, blk_q4_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        const float d = signed_absmax(x, 32, NULL) / -8;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = F2H(d);
        for (int j = 0; j < 16; j++) {
            int a = (int8_t)(x[j] * id + 8.5f), b = (int8_t)(x[j + 16] * id + 8.5f);
            y[i].qs[j] = (uint8_t)((a < 15 ? a : 15) | ((b < 15 ? b : 15) << 4));
        }
    }
}

/* Q4_1 (bits 4) and Q5_1 (bits 5): min/max affine. */
static void quant_affine(const float *x, uint16_t *dm, uint8_t *qh4, uint8_t *qs, int bits) {
    float min = FLT_MAX, max = -FLT_MAX;
    for (int j = 0; j < 32; j++) {
        if (x[j] < min) min = x[j];
        if (x[j] > max) max = x[j];
    }
    const float d = (max - min) / ((1 << bits) - 1);
    const float id = d ? 1.0f / d : 0.0f;
    dm[0] = F2H(d);
    dm[1] = F2H(min);
    uint32_t qh = 0;
    for (int j = 0; j < 16; j++) {
        int a = (uint8_t)((x[j] - min) * id + 0.5f), b = (uint8_t)((x[j + 16] - min) * id + 0.5f);
        if (bits == 4) {
            /* ggml converts through int8_t then clamps to 15 */
            a = (int8_t)((x[j] - min) * id + 0.5f);
            b = (int8_t)((x[j + 16] - min) * id + 0.5f);
            a = a < 15 ? a : 15;
            b = b < 15 ? b : 15;
        }
        qs[j] = (uint8_t)((a & 15) | ((b & 15) << 4));
        qh |= (uint32_t)((a >> 4) & 1) << j;
        qh |= (uint32_t)((b >> 4) & 1) << (j + 16);
    }
    if (qh4) memcpy(qh4, &qh, 4);
}

static void quant_q5_0(const float *x, blk_q5_0 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        const float d = signed_absmax(x, 32, NULL) / -16;
        const float id = d ? 1.0f / d : 0.0f;
        y[i].d = F2H(d);
        uint32_t qh = 0;
        for (int j = 0; j < 16; j++) {
            int a = (int8_t)(x[j] * id + 16.5f), b = (int8_t)(x[j + 16] * id + 16.5f);
            a = a < 31 ? a : 31;
            b = b < 31 ? b : 31;
            y[i].qs[j] = (uint8_t)((a & 15) | ((b & 15) << 4));
            qh |= (uint32_t)(a >> 4) << j;
            qh |= (uint32_t)(b >> 4) << (j + 16);
        }
        memcpy(y[i].qh, &qh, 4);
    }
}

/* Q8_0 (sum == NULL) and Q8_1, ggml's reference: id = 1/d, roundf. */
static void quant_q8(const float *x, uint16_t *d_out, uint16_t *sum, int8_t *qs) {
    float amax = 0.0f;
    for (int j = 0; j < 32; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
    const float d = amax / 127;
    const float id = d ? 1.0f / d : 0.0f;
    *d_out = F2H(d);
    int s = 0;
    for (int j = 0; j < 32; j++) {
        qs[j] = (int8_t)roundf(x[j] * id);
        s += qs[j];
    }
    if (sum) *sum = F2H(s * d);
}

static void quant_q8_K(const float *x, blk_q8_K *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 256) {
        float amax;
        const float max = signed_absmax(x, 256, &amax);
        memset(y[i].bsums, 0, sizeof y[i].bsums);
        if (amax == 0.0f) {
            y[i].d = 0;
            memset(y[i].qs, 0, 256);
            continue;
        }
        const float iscale = -127.f / max;
        for (int j = 0; j < 256; j++) {
            int v = kq_nearest_int(iscale * x[j]);
            y[i].qs[j] = (int8_t)(v < 127 ? v : 127);
            y[i].bsums[j / 16] = (int16_t)(y[i].bsums[j / 16] + y[i].qs[j]);
        }
        y[i].d = 1 / iscale;
    }
}

static int mxfp4_best_index(float x, float e) {
    int best = 0;
    float best_err = fabsf(quant_mxfp4_values[0] * e - x);
    for (int i = 1; i < 16; i++) {
        float err = fabsf(quant_mxfp4_values[i] * e - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

static void quant_mxfp4(const float *x, blk_mxfp4 *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++, x += 32) {
        float amax;
        signed_absmax(x, 32, &amax);
        const uint8_t e = amax > 0.0f ? (uint8_t)(floorf(log2f(amax)) - 2 + 127) : 0;
        const float d = quant_e8m0_to_f32_half(e);
        y[i].e = e;
        for (int j = 0; j < 16; j++)
            y[i].qs[j] = (uint8_t)(mxfp4_best_index(x[j], d) | (mxfp4_best_index(x[j + 16], d) << 4));
    }
}

brisk_status quant_quantize(uint32_t type, const float *src, void *dst, int64_t n) {
    const quant_traits *t = quant_get_traits(type);
    if (!t) return bk_fail(BRISK_ERR_UNSUPPORTED, "quantize: unknown tensor type %u", type);
    if (!t->can_quantize) return bk_fail(BRISK_ERR_UNSUPPORTED, "quantize: no quantizer for %s", t->name);
    if (n < 0 || n % t->block_elems)
        return bk_fail(BRISK_ERR_INVALID_ARG, "quantize %s: %lld elements is not a multiple of %d",
                       t->name, (long long)n, t->block_elems);
    const int64_t nb = n / t->block_elems;
    switch ((quant_type)type) {
    case QT_F32: memcpy(dst, src, (size_t)n * 4); break;
    case QT_F16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = F2H(src[i]);
        break;
    case QT_BF16:
        for (int64_t i = 0; i < n; i++) ((uint16_t *)dst)[i] = quant_f32_to_bf16(src[i]);
        break;
    case QT_Q4_0: quant_q4_0(src, dst, nb); break;
    case QT_Q4_1:
        for (int64_t i = 0; i < nb; i++) {
            blk_q4_1 *b = (blk_q4_1 *)dst + i;
            quant_affine(src + 32 * i, &b->d, NULL, b->qs, 4);
        }
        break;
    case QT_Q5_0: quant_q5_0(src, dst, nb); break;
    case QT_Q5_1:
        for (int64_t i = 0; i < nb; i++) {
            blk_q5_1 *b = (blk_q5_1 *)dst + i;
            quant_affine(src + 32 * i, &b->d, b->qh, b->qs, 5);
        }
        break;
    case QT_Q8_0:
        for (int64_t i = 0; i < nb; i++) {
            blk_q8_0 *b = (blk_q8_0 *)dst + i;
            quant_q8(src + 32 * i, &b->d, NULL, b->qs);
        }
        break;
    case QT_Q8_1:
        for (int64_t i = 0; i < nb; i++) {
            blk_q8_1 *b = (blk_q8_1 *)dst + i;
            quant_q8(src + 32 * i, &b->d, &b->s, b->qs);
        }
        break;
    case QT_Q8_K: quant_q8_K(src, dst, nb); break;
    case QT_IQ4_NL: kq_quantize_iq4(src, dst, n, NULL, -1, false); break;
    case QT_IQ4_XS: kq_quantize_iq4(src, dst, n, NULL, 7, true); break;
    case QT_Q2_K: kq_quantize_q2_K(src, dst, n, NULL); break;
    case QT_Q3_K: kq_quantize_q3_K(src, dst, n, NULL); break;
    case QT_Q4_K: kq_quantize_q4_K(src, dst, n, NULL); break;
    case QT_Q5_K: kq_quantize_q5_K(src, dst, n, NULL); break;
    case QT_Q6_K: kq_quantize_q6_K(src, dst, n, NULL); break;
    case QT_MXFP4: quant_mxfp4(src, dst, nb); break;
    case QT_IQ1_M: /* ggml's IQ1_M takes no imatrix too (weights x^2) */
    case QT_IQ2_S:
    case QT_IQ3_XXS:
    case QT_IQ3_S: return quant_iq_quantize_row(type, src, dst, n, NULL);
    default:
        if (quant_iq_has(type)) return quant_iq_quantize(type, src, dst, nb);
        return bk_fail(BRISK_ERR_UNSUPPORTED, "quantize: no quantizer for %s", t->name);
    }
    return BRISK_OK;
}

brisk_status quant_quantize_rows(uint32_t type, const float *src, void *dst, int64_t nrows, int64_t n_per_row,
                                 const float *imatrix) {
    const size_t row_bytes = quant_row_size(type, n_per_row);
    if (nrows < 0 || (!row_bytes && n_per_row))
        return quant_quantize(type, src, dst, n_per_row); /* the same checks, and their messages */
    for (int64_t r = 0; r < nrows; r++, src += n_per_row, dst = (unsigned char *)dst + row_bytes) {
        const float *w = imatrix;
        switch ((quant_type)type) {
        case QT_Q2_K: kq_quantize_q2_K(src, dst, n_per_row, w); break;
        case QT_Q3_K: kq_quantize_q3_K(src, dst, n_per_row, w); break;
        case QT_Q4_K: kq_quantize_q4_K(src, dst, n_per_row, w); break;
        case QT_Q5_K: kq_quantize_q5_K(src, dst, n_per_row, w); break;
        case QT_Q6_K: kq_quantize_q6_K(src, dst, n_per_row, w); break;
        case QT_IQ4_NL: kq_quantize_iq4(src, dst, n_per_row, w, 7, false); break;
        case QT_IQ4_XS: kq_quantize_iq4(src, dst, n_per_row, w, 7, true); break;
        case QT_IQ1_S: /* IQ1_S, IQ2_XXS, IQ2_XS only with an importance matrix, as in ggml */
        case QT_IQ1_M:
        case QT_IQ2_XXS:
        case QT_IQ2_XS:
        case QT_IQ2_S:
        case QT_IQ3_XXS:
        case QT_IQ3_S: BK_TRY(quant_iq_quantize_row(type, src, dst, n_per_row, w)); break;
        case QT_Q4_0:
        case QT_Q4_1:
        case QT_Q5_0:
        case QT_Q5_1:
            if (w) {
                kq_quantize_legacy_w(type, src, dst, n_per_row, w);
                break;
            }
            /* fall through */
        default: BK_TRY(quant_quantize(type, src, dst, n_per_row)); break;
        }
    }
    return BRISK_OK;
}
