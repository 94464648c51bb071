/* quant_iq.c — decoders (bitwise ggml's to_float), the integer unpacking the
 * CPU dot kernels use, and the reference quantizers (bytewise ggml's
 * from_float_ref) of the ternary, NVFP4 and Q1_0/Q2_0 formats.
 *
 * The i-quants store each group of 8 (IQ2, IQ1) or 4 (IQ3) values as an
 * index into a grid of magnitudes (quant_iq_grids.c), eight sign bits where
 * the grid is unsigned, and a small odd scale 2s+1 per 16, 32 or 64 values
 * under one f16 super-block scale. Seven sign bits are stored; the eighth
 * makes the count of minus signs even (ggml's ksigns_iq2xs table), since the
 * quantizer flips the smallest value when needed to keep that parity. */
#include "quant/quant_iq.h"

#include <math.h>
#include <string.h>

#include "base/status.h"
#include "quant/quant.h"

_Static_assert(sizeof(blk_iq2_xxs) == 66, "iq2_xxs");
_Static_assert(sizeof(blk_iq2_xs) == 74, "iq2_xs");
_Static_assert(sizeof(blk_iq2_s) == 82, "iq2_s");
_Static_assert(sizeof(blk_iq3_xxs) == 98, "iq3_xxs");
_Static_assert(sizeof(blk_iq3_s) == 110, "iq3_s");
_Static_assert(sizeof(blk_iq1_s) == 50, "iq1_s");
_Static_assert(sizeof(blk_iq1_m) == 56, "iq1_m");
_Static_assert(sizeof(blk_tq1_0) == 54, "tq1_0");
_Static_assert(sizeof(blk_tq2_0) == 66, "tq2_0");
_Static_assert(sizeof(blk_nvfp4) == 36, "nvfp4");
_Static_assert(sizeof(blk_q1_0) == 18, "q1_0");
_Static_assert(sizeof(blk_q2_0) == 18, "q2_0");

#define H2F quant_f16_to_f32
#define F2H quant_f32_to_f16

/* The 8 sign bits of a group from its 7 stored ones: bit 7 is their parity. */
static inline uint8_t signs8(uint32_t s7) { return (uint8_t)(s7 | ((uint32_t)__builtin_parity(s7) << 7)); }
static inline float sgn(uint8_t signs, int j) { return (signs >> j) & 1 ? -1.f : 1.f; }
static inline const uint8_t *grid8(const uint64_t *g, int i) { return (const uint8_t *)(g + i); }
static inline const uint8_t *grid4(const uint32_t *g, int i) { return (const uint8_t *)(g + i); }

float quant_ue4m3_to_f32_half(uint8_t x) {
    if (x == 0 || x == 0x7F) return 0.0f;
    const int e = (x >> 3) & 15, m = x & 7;
    const float raw = e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return raw * 0.5f;
}

int quant_iq_has(uint32_t t) {
    switch (t) {
    case QT_IQ2_XXS: case QT_IQ2_XS: case QT_IQ2_S: case QT_IQ3_XXS: case QT_IQ3_S: case QT_IQ1_S:
    case QT_IQ1_M: case QT_TQ1_0: case QT_TQ2_0: case QT_NVFP4: case QT_Q1_0: case QT_Q2_0: return 1;
    default: return 0;
    }
}

/* IQ1_M keeps its f16 super-block scale in the top nibbles of the four
 * 16-bit scale words. */
static inline uint16_t iq1m_d(const uint16_t sc[4]) {
    return (uint16_t)((sc[0] >> 12) | ((sc[1] >> 8) & 0x00f0) | ((sc[2] >> 4) & 0x0f00) | (sc[3] & 0xf000));
}
/* TQ1_0 packs 5 trits per byte as a fixed-point fraction of 3^5: trit n is
 * the integer part of (q * 3^n mod 256) * 3 / 256. */
static inline int trit(uint8_t q, int n) {
    static const uint8_t pow3[5] = {1, 3, 9, 27, 81};
    return (((uint16_t)(uint8_t)(q * pow3[n])) * 3) >> 8;
}
/* Element e of a TQ1_0 block -> (byte, trit): bytes 0..31 hold elements
 * 0..159 (trit n of byte m is element 32n+m), bytes 32..47 elements 160..239
 * (16n+m), qh bytes 0..3 elements 240..255 (4n+j). */
static void tq1_trits(const blk_tq1_0 *b, int8_t *v /* (256) trits - 1 */) {
    for (int n = 0; n < 5; n++)
        for (int m = 0; m < 32; m++) v[32 * n + m] = (int8_t)(trit(b->qs[m], n) - 1);
    for (int n = 0; n < 5; n++)
        for (int m = 0; m < 16; m++) v[160 + 16 * n + m] = (int8_t)(trit(b->qs[32 + m], n) - 1);
    for (int n = 0; n < 4; n++)
        for (int j = 0; j < 4; j++) v[240 + 4 * n + j] = (int8_t)(trit(b->qh[j], n) - 1);
}

/* ---- decoders ---- */

/* IQ2_XXS: per 32 values, 8 bytes: 4 grid indices, then a u32 of four 7-bit
 * sign groups and the 4-bit scale s; value = d * (s + 1/2) / 4 * grid. */
static void deq_iq2_xxs(const blk_iq2_xxs *x, float *y) {
    const float d = H2F(x->d);
    for (int ib = 0; ib < 8; ib++) {
        const uint8_t *g = (const uint8_t *)(x->qs + 4 * ib);
        uint32_t aux;
        memcpy(&aux, g + 4, 4);
        const float db = d * (0.5f + (float)(aux >> 28)) * 0.25f;
        for (int l = 0; l < 4; l++, y += 8) {
            const uint8_t *gr = grid8(quant_iq2xxs_grid, g[l]);
            const uint8_t s = signs8((aux >> 7 * l) & 127);
            for (int j = 0; j < 8; j++) y[j] = db * gr[j] * sgn(s, j);
        }
    }
}

/* IQ2_XS: a u16 per 8 values (9-bit index, 7 sign bits), a 4-bit scale per 16. */
static void deq_iq2_xs(const blk_iq2_xs *x, float *y) {
    const float d = H2F(x->d);
    for (int ib = 0; ib < 8; ib++) {
        const float db[2] = {d * (0.5f + (x->scales[ib] & 15)) * 0.25f, d * (0.5f + (x->scales[ib] >> 4)) * 0.25f};
        for (int l = 0; l < 4; l++, y += 8) {
            const uint16_t q = x->qs[4 * ib + l];
            const uint8_t *gr = grid8(quant_iq2xs_grid, q & 511);
            const uint8_t s = signs8(q >> 9);
            for (int j = 0; j < 8; j++) y[j] = db[l / 2] * gr[j] * sgn(s, j);
        }
    }
}

/* IQ2_S: 10-bit index (qs low 8, qh 2 bits per group), all 8 signs stored
 * (qs[32..63]), a 4-bit scale per 16. */
static void deq_iq2_s(const blk_iq2_s *x, float *y) {
    const float d = H2F(x->d);
    const uint8_t *qs = x->qs, *signs = x->qs + 32;
    for (int ib = 0; ib < 8; ib++, qs += 4, signs += 4) {
        const float db[2] = {d * (0.5f + (x->scales[ib] & 15)) * 0.25f, d * (0.5f + (x->scales[ib] >> 4)) * 0.25f};
        for (int l = 0; l < 4; l++, y += 8) {
            const uint8_t *gr = grid8(quant_iq2s_grid, qs[l] | ((x->qh[ib] << (8 - 2 * l)) & 0x300));
            for (int j = 0; j < 8; j++) y[j] = db[l / 2] * gr[j] * sgn(signs[l], j);
        }
    }
}

/* IQ3_XXS: qs[0..63] two grid indices per 8 values; qs[64..95] a u32 per 32
 * values as IQ2_XXS's (four 7-bit sign groups, 4-bit scale: d*(s+1/2)/2). */
static void deq_iq3_xxs(const blk_iq3_xxs *x, float *y) {
    const float d = H2F(x->d);
    const uint8_t *qs = x->qs;
    for (int ib = 0; ib < 8; ib++, qs += 8) {
        uint32_t aux;
        memcpy(&aux, x->qs + 64 + 4 * ib, 4);
        const float db = d * (0.5f + (float)(aux >> 28)) * 0.5f;
        for (int l = 0; l < 4; l++, y += 8) {
            const uint8_t s = signs8((aux >> 7 * l) & 127);
            const uint8_t *g1 = grid4(quant_iq3xxs_grid, qs[2 * l]), *g2 = grid4(quant_iq3xxs_grid, qs[2 * l + 1]);
            for (int j = 0; j < 4; j++) {
                y[j] = db * g1[j] * sgn(s, j);
                y[j + 4] = db * g2[j] * sgn(s, j + 4);
            }
        }
    }
}

/* IQ3_S: 9-bit indices per 4 values (qh holds bit 8, one bit per index), all
 * signs stored, a 4-bit scale per 64 values: d * (2s + 1). */
static void deq_iq3_s(const blk_iq3_s *x, float *y) {
    const float d = H2F(x->d);
    const uint8_t *qs = x->qs, *signs = x->signs;
    for (int ib = 0; ib < 8; ib++, qs += 8, signs += 4) {
        const int s4 = ib & 1 ? x->scales[ib / 2] >> 4 : x->scales[ib / 2] & 15;
        const float db = d * (1 + 2 * s4);
        const uint8_t qh = x->qh[ib];
        for (int l = 0; l < 4; l++, y += 8) {
            const uint8_t *g1 = grid4(quant_iq3s_grid, qs[2 * l] | ((qh << (8 - 2 * l)) & 256));
            const uint8_t *g2 = grid4(quant_iq3s_grid, qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256));
            for (int j = 0; j < 4; j++) {
                y[j] = db * g1[j] * sgn(signs[l], j);
                y[j + 4] = db * g2[j] * sgn(signs[l], j + 4);
            }
        }
    }
}

/* IQ1_S: 11-bit indices into a grid of -1/0/+1 (qs low 8, qh 3 bits each);
 * qh's top bits: a 3-bit scale and the sign of a shift of 1/8 per 32 values. */
static void deq_iq1_s(const blk_iq1_s *x, float *y) {
    const float d = H2F(x->d);
    const uint8_t *qs = x->qs;
    for (int ib = 0; ib < 8; ib++, qs += 4) {
        const uint16_t qh = x->qh[ib];
        const float dl = d * (2 * ((qh >> 12) & 7) + 1);
        const float delta = qh & 0x8000 ? -0.125f : 0.125f;
        for (int l = 0; l < 4; l++, y += 8) {
            const int8_t *gr = (const int8_t *)(quant_iq1s_grid + (qs[l] | (((qh >> 3 * l) & 7) << 8)));
            for (int j = 0; j < 8; j++) y[j] = dl * (gr[j] + delta);
        }
    }
}

/* IQ1_M: as IQ1_S, but a 3-bit scale per 16 values and a shift sign per 8;
 * qh holds per 8 values 3 index bits and the shift sign (a nibble each). */
static void deq_iq1_m(const blk_iq1_m *x, float *y) {
    uint16_t sc[4];
    memcpy(sc, x->scales, 8);
    const float d = H2F(iq1m_d(sc));
    const uint8_t *qs = x->qs, *qh = x->qh;
    for (int ib = 0; ib < 8; ib++, qs += 4, qh += 2) {
        const float dl[2] = {d * (2 * ((sc[ib / 2] >> (6 * (ib % 2) + 0)) & 7) + 1),
                             d * (2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1)};
        for (int l = 0; l < 4; l++, y += 8) {
            const uint8_t h = (uint8_t)(l & 1 ? qh[l / 2] >> 4 : qh[l / 2] & 15);
            const int8_t *gr = (const int8_t *)(quant_iq1s_grid + (qs[l] | ((h & 7) << 8)));
            const float delta = h & 8 ? -0.125f : 0.125f;
            for (int j = 0; j < 8; j++) y[j] = dl[l / 2] * (gr[j] + delta);
        }
    }
}

static void deq_tq1_0(const blk_tq1_0 *x, float *y) {
    const float d = H2F(x->d);
    int8_t v[256];
    tq1_trits(x, v);
    for (int i = 0; i < 256; i++) y[i] = (float)v[i] * d;
}

/* TQ2_0: 2 bits per value, q - 1; byte m of each 32-byte half holds values
 * 128h + 32l + m at bits 2l. */
static void deq_tq2_0(const blk_tq2_0 *x, float *y) {
    const float d = H2F(x->d);
    for (int h = 0; h < 2; h++)
        for (int l = 0; l < 4; l++)
            for (int m = 0; m < 32; m++) *y++ = (float)(((x->qs[32 * h + m] >> (2 * l)) & 3) - 1) * d;
}

/* NVFP4: four sub-blocks of 16, each a UE4M3 scale and 8 bytes of E2M1
 * nibbles (low nibbles values 0..7, high nibbles 8..15). */
static void deq_nvfp4(const blk_nvfp4 *x, float *y) {
    for (int s = 0; s < 4; s++, y += 16) {
        const float d = quant_ue4m3_to_f32_half(x->d[s]);
        for (int j = 0; j < 8; j++) {
            const uint8_t q = x->qs[8 * s + j];
            y[j] = quant_mxfp4_values[q & 15] * d;
            y[j + 8] = quant_mxfp4_values[q >> 4] * d;
        }
    }
}

brisk_status quant_iq_dequantize(uint32_t type, const void *src, float *y, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        switch (type) {
        case QT_IQ2_XXS: deq_iq2_xxs((const blk_iq2_xxs *)src + i, y + 256 * i); break;
        case QT_IQ2_XS: deq_iq2_xs((const blk_iq2_xs *)src + i, y + 256 * i); break;
        case QT_IQ2_S: deq_iq2_s((const blk_iq2_s *)src + i, y + 256 * i); break;
        case QT_IQ3_XXS: deq_iq3_xxs((const blk_iq3_xxs *)src + i, y + 256 * i); break;
        case QT_IQ3_S: deq_iq3_s((const blk_iq3_s *)src + i, y + 256 * i); break;
        case QT_IQ1_S: deq_iq1_s((const blk_iq1_s *)src + i, y + 256 * i); break;
        case QT_IQ1_M: deq_iq1_m((const blk_iq1_m *)src + i, y + 256 * i); break;
        case QT_TQ1_0: deq_tq1_0((const blk_tq1_0 *)src + i, y + 256 * i); break;
        case QT_TQ2_0: deq_tq2_0((const blk_tq2_0 *)src + i, y + 256 * i); break;
        case QT_NVFP4: deq_nvfp4((const blk_nvfp4 *)src + i, y + 64 * i); break;
        case QT_Q1_0: {
            const blk_q1_0 *b = (const blk_q1_0 *)src + i;
            const float d = H2F(b->d), nd = -d;
            for (int j = 0; j < 128; j++) y[128 * i + j] = (b->qs[j / 8] >> (j % 8)) & 1 ? d : nd;
            break;
        }
        case QT_Q2_0: {
            const blk_q2_0 *b = (const blk_q2_0 *)src + i;
            const float d = H2F(b->d);
            for (int j = 0; j < 64; j++) y[64 * i + j] = (float)(((b->qs[j / 4] >> (2 * (j % 4))) & 3) - 1) * d;
            break;
        }
        default: return bk_fail(BRISK_ERR_UNSUPPORTED, "dequantize: type %s", quant_type_name(type));
        }
    }
    return BRISK_OK;
}

/* ---- integer unpacking for the dot kernels ---- */

/* Grid group of 8 with its signs into q (IQ2 types). */
static inline void put8(int8_t *q, const uint8_t *gr, uint8_t s) {
    for (int j = 0; j < 8; j++) q[j] = (int8_t)((s >> j) & 1 ? -gr[j] : gr[j]);
}

static void unpack_iq2(uint32_t type, const void *blk, quant_iq_block *o) {
    int8_t *q = o->q;
    if (type == QT_IQ2_XXS) {
        const blk_iq2_xxs *x = blk;
        o->d = H2F(x->d) * 0.125f;
        for (int ib = 0; ib < 8; ib++) {
            const uint8_t *g = (const uint8_t *)(x->qs + 4 * ib);
            uint32_t aux;
            memcpy(&aux, g + 4, 4);
            o->ls[2 * ib] = o->ls[2 * ib + 1] = (int32_t)(2 * (aux >> 28) + 1);
            for (int l = 0; l < 4; l++, q += 8) put8(q, grid8(quant_iq2xxs_grid, g[l]), signs8((aux >> 7 * l) & 127));
        }
    } else if (type == QT_IQ2_XS) {
        const blk_iq2_xs *x = blk;
        o->d = H2F(x->d) * 0.125f;
        for (int ib = 0; ib < 8; ib++) {
            o->ls[2 * ib] = 2 * (x->scales[ib] & 15) + 1;
            o->ls[2 * ib + 1] = 2 * (x->scales[ib] >> 4) + 1;
            for (int l = 0; l < 4; l++, q += 8) {
                const uint16_t v = x->qs[4 * ib + l];
                put8(q, grid8(quant_iq2xs_grid, v & 511), signs8(v >> 9));
            }
        }
    } else {
        const blk_iq2_s *x = blk;
        o->d = H2F(x->d) * 0.125f;
        for (int ib = 0; ib < 8; ib++) {
            o->ls[2 * ib] = 2 * (x->scales[ib] & 15) + 1;
            o->ls[2 * ib + 1] = 2 * (x->scales[ib] >> 4) + 1;
            for (int l = 0; l < 4; l++, q += 8)
                put8(q, grid8(quant_iq2s_grid, x->qs[4 * ib + l] | ((x->qh[ib] << (8 - 2 * l)) & 0x300)),
                     x->qs[32 + 4 * ib + l]);
        }
    }
}

static void unpack_iq3(uint32_t type, const void *blk, quant_iq_block *o) {
    int8_t *q = o->q;
    const uint8_t *qs;
    if (type == QT_IQ3_XXS) {
        const blk_iq3_xxs *x = blk;
        o->d = H2F(x->d) * 0.25f;
        qs = x->qs;
        for (int ib = 0; ib < 8; ib++, qs += 8) {
            uint32_t aux;
            memcpy(&aux, x->qs + 64 + 4 * ib, 4);
            o->ls[2 * ib] = o->ls[2 * ib + 1] = (int32_t)(2 * (aux >> 28) + 1);
            for (int l = 0; l < 4; l++, q += 8) {
                const uint8_t s = signs8((aux >> 7 * l) & 127);
                uint8_t gr[8];
                memcpy(gr, grid4(quant_iq3xxs_grid, qs[2 * l]), 4);
                memcpy(gr + 4, grid4(quant_iq3xxs_grid, qs[2 * l + 1]), 4);
                put8(q, gr, s);
            }
        }
    } else {
        const blk_iq3_s *x = blk;
        o->d = H2F(x->d);
        qs = x->qs;
        for (int ib = 0; ib < 8; ib++, qs += 8) {
            const int s4 = ib & 1 ? x->scales[ib / 2] >> 4 : x->scales[ib / 2] & 15;
            o->ls[2 * ib] = o->ls[2 * ib + 1] = 2 * s4 + 1;
            const uint8_t qh = x->qh[ib];
            for (int l = 0; l < 4; l++, q += 8) {
                uint8_t gr[8];
                memcpy(gr, grid4(quant_iq3s_grid, qs[2 * l] | ((qh << (8 - 2 * l)) & 256)), 4);
                memcpy(gr + 4, grid4(quant_iq3s_grid, qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)), 4);
                put8(q, gr, x->signs[4 * ib + l]);
            }
        }
    }
}

/* IQ1: 8 * (grid +- 1/8) = 8 * grid +- 1 keeps the values integral. */
static void unpack_iq1(uint32_t type, const void *blk, quant_iq_block *o) {
    int8_t *q = o->q;
    if (type == QT_IQ1_S) {
        const blk_iq1_s *x = blk;
        o->d = H2F(x->d) * 0.125f;
        for (int ib = 0; ib < 8; ib++) {
            const uint16_t qh = x->qh[ib];
            o->ls[2 * ib] = o->ls[2 * ib + 1] = 2 * ((qh >> 12) & 7) + 1;
            const int delta = qh & 0x8000 ? -1 : 1;
            for (int l = 0; l < 4; l++, q += 8) {
                const int8_t *gr = (const int8_t *)(quant_iq1s_grid + (x->qs[4 * ib + l] | (((qh >> 3 * l) & 7) << 8)));
                for (int j = 0; j < 8; j++) q[j] = (int8_t)(8 * gr[j] + delta);
            }
        }
    } else {
        const blk_iq1_m *x = blk;
        uint16_t sc[4];
        memcpy(sc, x->scales, 8);
        o->d = H2F(iq1m_d(sc)) * 0.125f;
        for (int ib = 0; ib < 8; ib++) {
            o->ls[2 * ib] = 2 * ((sc[ib / 2] >> (6 * (ib % 2) + 0)) & 7) + 1;
            o->ls[2 * ib + 1] = 2 * ((sc[ib / 2] >> (6 * (ib % 2) + 3)) & 7) + 1;
            for (int l = 0; l < 4; l++, q += 8) {
                const uint8_t h = (uint8_t)(l & 1 ? x->qh[2 * ib + l / 2] >> 4 : x->qh[2 * ib + l / 2] & 15);
                const int8_t *gr = (const int8_t *)(quant_iq1s_grid + (x->qs[4 * ib + l] | ((h & 7) << 8)));
                const int delta = h & 8 ? -1 : 1;
                for (int j = 0; j < 8; j++) q[j] = (int8_t)(8 * gr[j] + delta);
            }
        }
    }
}

void quant_iq_unpack(uint32_t type, const void *blk, quant_iq_block *o) {
    switch (type) {
    case QT_IQ2_XXS: case QT_IQ2_XS: case QT_IQ2_S: unpack_iq2(type, blk, o); return;
    case QT_IQ3_XXS: case QT_IQ3_S: unpack_iq3(type, blk, o); return;
    case QT_IQ1_S: case QT_IQ1_M: unpack_iq1(type, blk, o); return;
    case QT_TQ1_0: {
        const blk_tq1_0 *x = blk;
        tq1_trits(x, o->q);
        o->d = H2F(x->d);
        for (int k = 0; k < 16; k++) o->ls[k] = 1;
        return;
    }
    case QT_TQ2_0: {
        const blk_tq2_0 *x = blk;
        for (int i = 0; i < 256; i++) /* as deq_tq2_0: byte 32h + m, bits 2l */
            o->q[i] = (int8_t)(((x->qs[32 * (i / 128) + i % 32] >> (2 * ((i / 32) % 4))) & 3) - 1);
        o->d = H2F(x->d);
        for (int k = 0; k < 16; k++) o->ls[k] = 1;
        return;
    }
    case QT_NVFP4: {
        const blk_nvfp4 *x = blk;
        for (int s = 0; s < 4; s++) {
            o->d16[s] = quant_ue4m3_to_f32_half(x->d[s]);
            for (int j = 0; j < 8; j++) {
                o->q[16 * s + j] = quant_mxfp4_values[x->qs[8 * s + j] & 15];
                o->q[16 * s + j + 8] = quant_mxfp4_values[x->qs[8 * s + j] >> 4];
            }
        }
        return;
    }
    case QT_Q1_0: {
        const blk_q1_0 *x = blk;
        const float d = H2F(x->d);
        for (int j = 0; j < 128; j++) o->q[j] = (x->qs[j / 8] >> (j % 8)) & 1 ? 1 : -1;
        for (int k = 0; k < 8; k++) o->d16[k] = d;
        return;
    }
    case QT_Q2_0: {
        const blk_q2_0 *x = blk;
        const float d = H2F(x->d);
        for (int j = 0; j < 64; j++) o->q[j] = (int8_t)(((x->qs[j / 4] >> (2 * (j % 4))) & 3) - 1);
        for (int k = 0; k < 4; k++) o->d16[k] = d;
        return;
    }
    default: return;
    }
}

/* ---- reference quantizers ---- */

/* ggml_fp32_to_ue4m3: round to nearest (ties up) on the magnitude, 448 at
 * most (0x7E), denormals as m * 2^-9, nonpositive and NaN -> 0. */
static uint8_t f32_to_ue4m3(float x) {
    if (!(x > 0.0f)) return 0;
    if (x > 448.0f) x = 448.0f;
    uint32_t u;
    memcpy(&u, &x, 4);
    int e = (int)((u >> 23) & 0xFF) - 127 + 7;
    if (e <= 0) {
        int m = (int)(x * 512.0f + 0.5f);
        return (uint8_t)(m > 7 ? 7 : m < 1 ? 0 : m);
    }
    if (e >= 15) return 0x7E;
    int m = (int)((u >> 20) & 7) + (int)((u >> 19) & 1);
    if (m > 7) {
        m = 0;
        if (++e >= 15) return 0x7E;
    }
    return (uint8_t)((e << 3) | m);
}

static int fp4_best_index(float x, float e) {
    int best = 0;
    float best_err = fabsf(quant_mxfp4_values[0] * e - x);
    for (int i = 1; i < 16; i++) {
        const float err = fabsf(quant_mxfp4_values[i] * e - x);
        if (err < best_err) {
            best = i;
            best_err = err;
        }
    }
    return best;
}

static void quant_nvfp4(const float *x, blk_nvfp4 *y) {
    for (int s = 0; s < 4; s++, x += 16) {
        float amax = 0.0f;
        for (int j = 0; j < 16; j++) amax = amax < fabsf(x[j]) ? fabsf(x[j]) : amax;
        y->d[s] = f32_to_ue4m3(amax / 6.0f); /* 6 is E2M1's largest value */
        const float d = quant_ue4m3_to_f32_half(y->d[s]);
        for (int j = 0; j < 8; j++)
            y->qs[8 * s + j] = (uint8_t)(fp4_best_index(x[j], d) | (fp4_best_index(x[j + 8], d) << 4));
    }
}

/* Ternary scale: the block's absmax; trits round half away from zero. */
static float tq_scale(const float *x, uint16_t *d_out) {
    float amax = 0.0f;
    for (int j = 0; j < 256; j++) amax = amax > fabsf(x[j]) ? amax : fabsf(x[j]);
    *d_out = F2H(amax);
    return amax ? 1.0f / amax : 0.0f;
}

/* Trits q0..q(n-1) (first most significant) as a base-3 fraction of 256,
 * rounded up so that tq1's decoder (trit) reads them back exactly. */
static uint8_t tq1_pack(const float *x, int stride, int n, float id) {
    uint8_t q = 0;
    for (int k = 0; k < n; k++) q = (uint8_t)(q * 3 + (int)lroundf(x[k * stride] * id) + 1);
    if (n == 4) q = (uint8_t)(q * 3);
    return (uint8_t)(((uint16_t)q * 256 + 242) / 243);
}

static void quant_tq1_0(const float *x, blk_tq1_0 *y) {
    const float id = tq_scale(x, &y->d);
    for (int m = 0; m < 32; m++) y->qs[m] = tq1_pack(x + m, 32, 5, id);
    for (int m = 0; m < 16; m++) y->qs[32 + m] = tq1_pack(x + 160 + m, 16, 5, id);
    for (int j = 0; j < 4; j++) y->qh[j] = tq1_pack(x + 240 + j, 4, 4, id);
}

static void quant_tq2_0(const float *x, blk_tq2_0 *y) {
    const float id = tq_scale(x, &y->d);
    for (int h = 0; h < 2; h++)
        for (int m = 0; m < 32; m++) {
            uint8_t q = 0;
            for (int l = 0; l < 4; l++)
                q |= (uint8_t)((((int)lroundf(x[128 * h + 32 * l + m] * id) + 1) & 3) << (2 * l));
            y->qs[32 * h + m] = q;
        }
}

/* Q1_0: scale = mean |x|, one sign bit per value (x >= 0 sets it). */
static void quant_q1_0(const float *x, blk_q1_0 *y) {
    float sum = 0.0f;
    for (int j = 0; j < 128; j++) sum += fabsf(x[j]);
    y->d = F2H(sum / 128);
    memset(y->qs, 0, sizeof y->qs);
    for (int j = 0; j < 128; j++)
        if (x[j] >= 0.0f) y->qs[j / 8] |= (uint8_t)(1 << (j % 8));
}

/* Q2_0: scale = absmax, round(x/d) + 1 clamped to 0..3. */
static void quant_q2_0(const float *x, blk_q2_0 *y) {
    float amax = 0.0f;
    for (int j = 0; j < 64; j++) amax = fabsf(x[j]) > amax ? fabsf(x[j]) : amax;
    const float id = amax > 0.0f ? 1.0f / amax : 0.0f;
    y->d = F2H(amax);
    memset(y->qs, 0, sizeof y->qs);
    for (int j = 0; j < 64; j++) {
        int q = (int)roundf(x[j] * id) + 1;
        q = q < 0 ? 0 : q > 3 ? 3 : q;
        y->qs[j / 4] |= (uint8_t)(q << (2 * (j % 4)));
    }
}

brisk_status quant_iq_quantize(uint32_t type, const float *x, void *dst, int64_t nb) {
    for (int64_t i = 0; i < nb; i++) {
        switch (type) {
        case QT_TQ1_0: quant_tq1_0(x + 256 * i, (blk_tq1_0 *)dst + i); break;
        case QT_TQ2_0: quant_tq2_0(x + 256 * i, (blk_tq2_0 *)dst + i); break;
        case QT_NVFP4: quant_nvfp4(x + 64 * i, (blk_nvfp4 *)dst + i); break;
        case QT_Q1_0: quant_q1_0(x + 128 * i, (blk_q1_0 *)dst + i); break;
        case QT_Q2_0: quant_q2_0(x + 64 * i, (blk_q2_0 *)dst + i); break;
        default: return bk_fail(BRISK_ERR_UNSUPPORTED, "quantize: no quantizer for %s", quant_type_name(type));
        }
    }
    return BRISK_OK;
}
