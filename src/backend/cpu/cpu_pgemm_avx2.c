/* cpu_pgemm_avx2.c — the packed-panel prompt GEMM of cpu_pgemm.h for AVX2
 * cores without VNNI (cpu_pgemm_isa.h's table).
 *
 * Without vpdpbusd, an int8 product on AVX2 is vpmaddubsw (u8 x s8, int16
 * sums that saturate unless one side is made unsigned with a sign trick,
 * an op a pair) and a vpmaddwd to widen: two multiplier ops for 32 products.
 * Here the weights and the activations are int16 instead: one vpmaddwd
 * multiplies 8 weight rows (a ymm lane each) by a broadcast pair of one
 * token's activations, 16 products with no saturation, no sign trick and no
 * horizontal sum, so the same two multiplier ops make 32 products and feed
 * 16 rows x 3 tokens of accumulators from one broadcast. Kernel lab
 * (dev/kernels/q8_gemm_lab.c, Q8_0, 3072 x 1024 and 1024 x 3072, one thread
 * of the 2-core AVX2 EPYC): 0.89-0.94 G row-block products a second through
 * cpu_dot.h's multi-row kernel, 2.1-2.2 G here.
 *
 * Layouts (r: weight row 0..15, lane r % 8 of ymm r / 8; g: element pair;
 * t: token of the 3-token tile; s: sub-block with its own scale):
 *   panel, per block of BE elements (32: Q8_0, Q4_0; 256: the K-quants and
 *     IQ4_XS): q[BE/2 g][16 r][2] int16, the signed weight (Q4_0: nibble - 8,
 *     Q6_K: q - 32, IQ4_XS: the codebook value times ls_s - 32, Q4_K / Q5_K:
 *     the unsigned quant), then sc[NS s][16 r] floats (d, d*sc_s; IQ4_XS: d,
 *     one scale a block) and for Q4_K / Q5_K dmm[8 s][16 r] = dmin*m_s.
 *   tile, per block: x[3 t][BE] int16 (the q8_0 / q8_K quants), d[4] float,
 *     and for q8_K ysd[8 s][4 t] = d * (sum of sub-block s's 32 quants).
 * A row's result is sum over blocks and sub-blocks of (int32 sum) * (weight
 * scale * token scale), less the K-quants' dmm * ysd: exact integer sums,
 * float order unlike ggml's vec_dot (as the AVX-512 panels). */
#define CPU_PGEMM_UNPACKERS
#include "backend/cpu/cpu_pgemm_isa.h"

#include <string.h>

#include "backend/cpu/cpu_pgemm.h"
#include "quant/quant.h"

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

#define PT 3 /* tokens per tile: 16 rows x 3 tokens of integer and float sums fill the 16 ymm */
/* panel bytes per block */
#define P16_Q8 1088 /* Q8_0: int16 [16 g][16 r][2], d[16] */
#define P16_KQ 8704 /* IQ4_XS: int16 [128 g][16 r][2] (times the sub-block scales), d[16] and room for sc[8][16] */
#define P8_Q4 576   /* Q4_0: u8 [8 g][16 r][4], d[16] */
#define P8_KQ 5120  /* Q4_K, Q5_K, Q6_K: u8 [64 g][16 r][4], sc[16][16] (Q4_K / Q5_K: sc[8][16], dmm[8][16]) */
/* tile bytes per block, and where its parts start: both widths of the quants, so that the types
 * sharing a vec_dot_type (whose matrices share one converted activation) share one tile */
#define T_Q8 320  /* x16[3][32] 0, x8[3][32] 192, d[4] 288, o8[4] 304 (int32 -8 * sum) */
#define T_KQ 2704 /* x16[3][256] 0, x8[3][256] 1536, d[4] 2304, ysd[8][4] 2320, o32[16][4] 2448 (-32 * bsums) */

static int is_q8_family(uint32_t t) { return t == QT_Q8_0 || t == QT_Q4_0; }
static int is_kq_family(uint32_t t) {
    return t == QT_Q4_K || t == QT_Q5_K || t == QT_Q6_K || t == QT_IQ4_XS;
}

static int tile_tokens_avx2(uint32_t wtype) { return is_q8_family(wtype) || is_kq_family(wtype) ? PT : 0; }

static size_t act_bytes_avx2(uint32_t wtype, int64_t k) {
    return is_q8_family(wtype) ? (size_t)(k / 32) * T_Q8 : (size_t)(k / 256) * T_KQ;
}

static size_t panel_block_bytes(uint32_t wtype) {
    switch (wtype) {
    case QT_Q8_0: return P16_Q8;
    case QT_IQ4_XS: return P16_KQ;
    case QT_Q4_0: return P8_Q4;
    default: return P8_KQ;
    }
}

static size_t panel_bytes_avx2(uint32_t wtype, int64_t k) {
    return (size_t)(k / quant_get_traits(wtype)->block_elems) * panel_block_bytes(wtype);
}

/* 16 rows of rb bytes (src, row-major) -> dwords interleaved, dst[(g*16 + r)*4 + j] = row r's byte
 * 4g + j (a dword: two int16 or four u8), by 8x8 transposes of dwords. rb: a multiple of 32. */
static void interleave16(const uint8_t *src, int rb, uint8_t *dst) {
    for (int g0 = 0; g0 < rb / 4; g0 += 8)
        for (int l = 0; l < 2; l++) {
            __m256i r[8], t[8], u[8];
            for (int i = 0; i < 8; i++) r[i] = _mm256_loadu_si256((const __m256i *)(src + (size_t)(8 * l + i) * rb + 4 * g0));
            for (int i = 0; i < 8; i += 2) {
                t[i] = _mm256_unpacklo_epi32(r[i], r[i + 1]);
                t[i + 1] = _mm256_unpackhi_epi32(r[i], r[i + 1]);
            }
            for (int i = 0; i < 8; i += 4) {
                u[i] = _mm256_unpacklo_epi64(t[i], t[i + 2]);
                u[i + 1] = _mm256_unpackhi_epi64(t[i], t[i + 2]);
                u[i + 2] = _mm256_unpacklo_epi64(t[i + 1], t[i + 3]);
                u[i + 3] = _mm256_unpackhi_epi64(t[i + 1], t[i + 3]);
            }
            for (int j = 0; j < 4; j++) { /* u[j]: dwords j (low lane) and j + 4 (high) of rows 0-3; u[j + 4]: rows 4-7 */
                _mm256_store_si256((__m256i *)(dst + ((size_t)(g0 + j) * 16 + 8 * l) * 4), _mm256_permute2x128_si256(u[j], u[j + 4], 0x20));
                _mm256_store_si256((__m256i *)(dst + ((size_t)(g0 + j + 4) * 16 + 8 * l) * 4), _mm256_permute2x128_si256(u[j], u[j + 4], 0x31));
            }
        }
}

/* 32 int8 -> 32 int16 */
static inline void widen32(const int8_t *q, int16_t *out) {
    _mm256_storeu_si256((__m256i *)out, _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)q)));
    _mm256_storeu_si256((__m256i *)(out + 16), _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(q + 16))));
}

/* IQ4_XS: sub-block ib's 16 bytes hold elements 32ib + j (low nibble) and 32ib + 16 + j (high).
 * Each value comes out times its sub-block's scale ls - 32: |codebook value| <= 127 and |ls - 32|
 * <= 32 keep it within 4,064, so the block's products sum exactly in int32 (256 x 4,064 x 127 <
 * 2^31) and the tile applies one float scale a block, not one a sub-block: the sub-block scaling
 * and its float accumulators held 16 ymm and spilled inside the product loop. */
static void unpack_iq4_xs(const blk_iq4_xs *a, int16_t *out) {
    const __m128i lut = _mm_loadu_si128((const __m128i *)quant_iq4nl_values), m4 = _mm_set1_epi8(15);
    for (int ib = 0; ib < 8; ib++) {
        const int ls = quant_iq4xs_scale(a, ib);
        const __m256i sc = _mm256_set1_epi16((int16_t)(ls - 32));
        const __m128i q = _mm_loadu_si128((const __m128i *)(a->qs + 16 * ib));
        _mm256_storeu_si256((__m256i *)(out + 32 * ib),
                            _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm_shuffle_epi8(lut, _mm_and_si128(q, m4))), sc));
        _mm256_storeu_si256((__m256i *)(out + 32 * ib + 16),
                            _mm256_mullo_epi16(_mm256_cvtepi8_epi16(_mm_shuffle_epi8(lut, _mm_and_si128(_mm_srli_epi16(q, 4), m4))), sc));
    }
}

/* One row's block -> tmp (int16 for Q8_0 / IQ4_XS, u8 for the others) and its scales (column r of
 * sc[s][16], dmm[s][16]). */
static void unpack_row(uint32_t wtype, const uint8_t *blk, uint8_t *tmp, float *sc, float *dmm, int r) {
    switch (wtype) {
    case QT_Q8_0: {
        uint16_t d;
        memcpy(&d, blk, 2);
        sc[r] = _cvtsh_ss(d);
        widen32((const int8_t *)(blk + 2), (int16_t *)(void *)tmp);
        break;
    }
    case QT_Q4_0: {
        const blk_q4_0 *a = (const blk_q4_0 *)(const void *)blk;
        const __m128i q = _mm_loadu_si128((const __m128i *)a->qs), m4 = _mm_set1_epi8(15);
        sc[r] = _cvtsh_ss(a->d);
        _mm_storeu_si128((__m128i *)tmp, _mm_and_si128(q, m4));
        _mm_storeu_si128((__m128i *)(tmp + 16), _mm_and_si128(_mm_srli_epi16(q, 4), m4));
        break;
    }
    case QT_IQ4_XS: {
        const blk_iq4_xs *a = (const blk_iq4_xs *)(const void *)blk;
        unpack_iq4_xs(a, (int16_t *)(void *)tmp); /* the sub-block scales in the values */
        sc[r] = _cvtsh_ss(a->d);
        break;
    }
    case QT_Q6_K: {
        const blk_q6_K *a = (const blk_q6_K *)(const void *)blk;
        unpack_q6_K(a, tmp);
        const float d = _cvtsh_ss(a->d);
        for (int s = 0; s < 16; s++) sc[16 * s + r] = d * (float)a->scales[s];
        break;
    }
    default: /* Q4_K, Q5_K */
        unpack_q45_K(blk, wtype == QT_Q5_K, tmp);
        kq_scales_min(blk, r, sc, dmm);
        break;
    }
}

static void pack_panel_avx2(uint32_t wtype, int64_t k, const void *w, size_t ws, int nr, void *panel) {
    const quant_traits *tr = quant_get_traits(wtype);
    const int be = (int)tr->block_elems, wide = wtype == QT_Q8_0 || wtype == QT_IQ4_XS;
    const int rb = be * (wide ? 2 : 1), ns = wtype == QT_Q6_K ? 16 : be == 256 ? 8 : 1;
    const size_t pbb = panel_block_bytes(wtype);
    uint8_t tmp[CPU_PGEMM_ROWS * 512] __attribute__((aligned(32)));
    for (int64_t b = 0; b < k / be; b++) {
        uint8_t *pb = (uint8_t *)panel + b * pbb;
        float *sc = (float *)(void *)(pb + (size_t)CPU_PGEMM_ROWS * rb), *dmm = sc + 128;
        for (int r = 0; r < CPU_PGEMM_ROWS; r++) {
            if (r < nr) {
                unpack_row(wtype, (const uint8_t *)w + (size_t)r * ws + (size_t)b * tr->block_bytes, tmp + (size_t)r * rb, sc, dmm, r);
                continue;
            }
            memset(tmp + (size_t)r * rb, 0, (size_t)rb);
            for (int s = 0; s < ns; s++) sc[16 * s + r] = 0.0f;
            if (wtype == QT_Q4_K || wtype == QT_Q5_K)
                for (int s = 0; s < 8; s++) dmm[16 * s + r] = 0.0f;
        }
        interleave16(tmp, rb, pb);
    }
}

static void pack_act_avx2(uint32_t wtype, int64_t k, const void *xq, size_t xs, int nt, void *tile) {
    uint8_t *dst = tile;
    if (is_q8_family(wtype)) {
        for (int64_t b = 0; b < k / 32; b++) {
            uint8_t *tb = dst + b * T_Q8;
            float *d = (float *)(void *)(tb + 288);
            int32_t *o8 = (int32_t *)(void *)(tb + 304);
            for (int t = 0; t < 4; t++) {
                const blk_q8_0 *x = t < nt && t < PT ? (const blk_q8_0 *)(const void *)((const char *)xq + (size_t)t * xs) + b : NULL;
                int sum = 0;
                for (int j = 0; x && j < 32; j++) sum += x->qs[j];
                if (t < PT) {
                    if (x) widen32(x->qs, (int16_t *)(void *)tb + 32 * t), memcpy(tb + 192 + 32 * t, x->qs, 32);
                    else memset(tb + 64 * t, 0, 64), memset(tb + 192 + 32 * t, 0, 32);
                }
                d[t] = x ? _cvtsh_ss(x->d) : 0.0f;
                o8[t] = -8 * sum;
            }
        }
        return;
    }
    for (int64_t b = 0; b < k / 256; b++) {
        uint8_t *tb = dst + b * T_KQ;
        float *d = (float *)(void *)(tb + 2304), *ysd = d + 4;
        int32_t *o32 = (int32_t *)(void *)(tb + 2448);
        for (int t = 0; t < 4; t++) {
            const blk_q8_K *x = t < nt && t < PT ? (const blk_q8_K *)(const void *)((const char *)xq + (size_t)t * xs) + b : NULL;
            if (t < PT) {
                if (x) {
                    for (int i = 0; i < 256; i += 32) widen32(x->qs + i, (int16_t *)(void *)tb + 256 * t + i);
                    memcpy(tb + 1536 + 256 * t, x->qs, 256);
                } else {
                    memset(tb + 512 * t, 0, 512);
                    memset(tb + 1536 + 256 * t, 0, 256);
                }
            }
            d[t] = x ? x->d : 0.0f;
            for (int s = 0; s < 8; s++) ysd[4 * s + t] = x ? x->d * (float)(x->bsums[2 * s] + x->bsums[2 * s + 1]) : 0.0f;
            for (int s = 0; s < 16; s++) o32[4 * s + t] = x ? -32 * x->bsums[s] : 0;
        }
    }
}

/* ---- micro-kernels: 16 weight rows x 3 tokens ---- */

static inline __m256i bcast32(const void *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

#define KINL static inline __attribute__((always_inline))

/* acc[l][t] += float(is[l][t]) * (sc[l] * dx[t]), l: rows 0-7, 8-15 */
KINL void scale_add(__m256 acc[2][PT], __m256i is[2][PT], const float *sc, const float *dx) {
    const __m256 s0 = _mm256_load_ps(sc), s1 = _mm256_load_ps(sc + 8);
    #pragma GCC unroll 3
    for (int t = 0; t < PT; t++) {
        const __m256 dt = _mm256_broadcast_ss(dx + t);
        acc[0][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[0][t]), _mm256_mul_ps(s0, dt), acc[0][t]);
        acc[1][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[1][t]), _mm256_mul_ps(s1, dt), acc[1][t]);
    }
}

/* int16 weights (Q8_0, IQ4_XS): one vpmaddwd a pair of elements, int32 sums. BE elements a block
 * in NS sub-blocks; the panel's block is pbb bytes, the tile's tbb. */
KINL void tile_wide(int64_t k, const uint8_t *pn, const uint8_t *at, float *out, const int BE, const int NS,
                    const size_t pbb, const size_t tbb, const size_t dxo) {
    const int G = BE / NS / 2; /* pairs a sub-block */
    __m256 acc[2][PT];
    #pragma GCC unroll 3
    for (int t = 0; t < PT; t++) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < k / BE; b++) {
        const int16_t *q = (const int16_t *)(const void *)(pn + b * pbb);
        const int16_t *x = (const int16_t *)(const void *)(at + b * tbb);
        const float *sc = (const float *)(const void *)(pn + b * pbb + (size_t)32 * BE);
        const float *dx = (const float *)(const void *)(at + b * tbb + dxo);
        for (int s = 0; s < NS; s++) {
            __m256i is[2][PT];
            #pragma GCC unroll 3
            for (int t = 0; t < PT; t++) is[0][t] = is[1][t] = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int g = s * G; g < (s + 1) * G; g++) {
                const __m256i w0 = _mm256_load_si256((const __m256i *)(q + 32 * g));
                const __m256i w1 = _mm256_load_si256((const __m256i *)(q + 32 * g + 16));
#pragma GCC unroll 3
                for (int t = 0; t < PT; t++) {
                    const __m256i xv = bcast32(x + BE * t + 2 * g);
                    is[0][t] = _mm256_add_epi32(is[0][t], _mm256_madd_epi16(w0, xv));
                    is[1][t] = _mm256_add_epi32(is[1][t], _mm256_madd_epi16(w1, xv));
                }
            }
            scale_add(acc, is, sc + 16 * s, dx);
        }
    }
    #pragma GCC unroll 3
    for (int t = 0; t < PT; t++) {
        _mm256_storeu_ps(out + CPU_PGEMM_ROWS * t, acc[0][t]);
        _mm256_storeu_ps(out + CPU_PGEMM_ROWS * t + 8, acc[1][t]);
    }
}

/* u8 weights of at most 6 bits (Q4_0, Q4_K, Q5_K, Q6_K): vpmaddubsw makes 32 products of 8 rows x 4
 * elements into int16 pair sums that stay exact over F quads (F * 2 * qmax * 127 < 32768: F = 8
 * for 4 bits, 4 for 5, 2 for 6), then one vpmaddwd widens them. OFF: an int32 offset a sub-block
 * and token from the tile (Q4_0: -8 * sum, Q6_K: -32 * bsum) starts the sum; MIN: Q4_K / Q5_K's
 * dmin * m * d * sum(x) term. */
KINL void tile_u8(int64_t k, const uint8_t *pn, const uint8_t *at, float *out, const int BE, const int NS, const int F,
                  const int OFF, const int MIN, const size_t pbb, const size_t tbb, const size_t x8o, const size_t dxo,
                  const size_t offo) {
    const int Q = BE / NS / 4; /* quads a sub-block */
    const __m256i ones = _mm256_set1_epi16(1);
    __m256 acc[2][PT];
    #pragma GCC unroll 3
    for (int t = 0; t < PT; t++) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < k / BE; b++) {
        const uint8_t *q = pn + b * pbb, *x = at + b * tbb + x8o;
        const float *sc = (const float *)(const void *)(pn + b * pbb + (size_t)16 * BE), *dmm = sc + 128;
        const float *dx = (const float *)(const void *)(at + b * tbb + dxo), *ysd = dx + 4;
        const int32_t *off = (const int32_t *)(const void *)(at + b * tbb + offo);
        for (int s = 0; s < NS; s++) {
            for (int h = 0; h < Q; h += F) {
                __m256i is[2][PT];
                #pragma GCC unroll 3
                for (int t = 0; t < PT; t++) is[0][t] = is[1][t] = _mm256_setzero_si256();
#pragma GCC unroll 2
                for (int g = s * Q + h; g < s * Q + h + F; g++) {
                    const __m256i w0 = _mm256_load_si256((const __m256i *)(q + 64 * g));
                    const __m256i w1 = _mm256_load_si256((const __m256i *)(q + 64 * g + 32));
#pragma GCC unroll 3
                    for (int t = 0; t < PT; t++) {
                        const __m256i xv = bcast32(x + BE * t + 4 * g);
                        is[0][t] = _mm256_add_epi16(is[0][t], _mm256_maddubs_epi16(w0, xv));
                        is[1][t] = _mm256_add_epi16(is[1][t], _mm256_maddubs_epi16(w1, xv));
                    }
                }
                #pragma GCC unroll 3
                for (int t = 0; t < PT; t++) {
                    is[0][t] = _mm256_madd_epi16(is[0][t], ones);
                    is[1][t] = _mm256_madd_epi16(is[1][t], ones);
                    if (OFF && h == 0) {
                        const __m256i o = _mm256_set1_epi32(off[4 * s + t]);
                        is[0][t] = _mm256_add_epi32(is[0][t], o);
                        is[1][t] = _mm256_add_epi32(is[1][t], o);
                    }
                }
                scale_add(acc, is, sc + 16 * s, dx);
            }
            if (MIN) {
                const __m256 m0 = _mm256_load_ps(dmm + 16 * s), m1 = _mm256_load_ps(dmm + 16 * s + 8);
                #pragma GCC unroll 3
                for (int t = 0; t < PT; t++) {
                    const __m256 y = _mm256_broadcast_ss(ysd + 4 * s + t);
                    acc[0][t] = _mm256_fnmadd_ps(m0, y, acc[0][t]);
                    acc[1][t] = _mm256_fnmadd_ps(m1, y, acc[1][t]);
                }
            }
        }
    }
    #pragma GCC unroll 3
    for (int t = 0; t < PT; t++) {
        _mm256_storeu_ps(out + CPU_PGEMM_ROWS * t, acc[0][t]);
        _mm256_storeu_ps(out + CPU_PGEMM_ROWS * t + 8, acc[1][t]);
    }
}

/* one function a type (the kernels are specialized on their constants) */
static void tile_q8_0(int64_t k, const uint8_t *p, const uint8_t *a, float *o) { tile_wide(k, p, a, o, 32, 1, P16_Q8, T_Q8, 288); }
static void tile_iq4_xs(int64_t k, const uint8_t *p, const uint8_t *a, float *o) { tile_wide(k, p, a, o, 256, 1, P16_KQ, T_KQ, 2304); }
static void tile_q4_0(int64_t k, const uint8_t *p, const uint8_t *a, float *o) { tile_u8(k, p, a, o, 32, 1, 8, 1, 0, P8_Q4, T_Q8, 192, 288, 304); }
static void tile_q4_K(int64_t k, const uint8_t *p, const uint8_t *a, float *o) { tile_u8(k, p, a, o, 256, 8, 8, 0, 1, P8_KQ, T_KQ, 1536, 2304, 2448); }
static void tile_q5_K(int64_t k, const uint8_t *p, const uint8_t *a, float *o) { tile_u8(k, p, a, o, 256, 8, 4, 0, 1, P8_KQ, T_KQ, 1536, 2304, 2448); }
static void tile_q6_K(int64_t k, const uint8_t *p, const uint8_t *a, float *o) { tile_u8(k, p, a, o, 256, 16, 2, 1, 0, P8_KQ, T_KQ, 1536, 2304, 2448); }

static void tile_avx2(uint32_t wtype, int64_t k, const void *panel, const void *tile, float *out) {
    switch (wtype) {
    case QT_Q8_0: tile_q8_0(k, panel, tile, out); break;
    case QT_IQ4_XS: tile_iq4_xs(k, panel, tile, out); break;
    case QT_Q4_0: tile_q4_0(k, panel, tile, out); break;
    case QT_Q4_K: tile_q4_K(k, panel, tile, out); break;
    case QT_Q5_K: tile_q5_K(k, panel, tile, out); break;
    case QT_Q6_K: tile_q6_K(k, panel, tile, out); break;
    default: break;
    }
}

const cpu_pgemm_ops cpu_pgemm_avx2 = {tile_tokens_avx2, act_bytes_avx2, panel_bytes_avx2,
                                      pack_act_avx2,    pack_panel_avx2, tile_avx2};
#else
static int tile_tokens_none(uint32_t wtype) { (void)wtype; return 0; }
const cpu_pgemm_ops cpu_pgemm_avx2 = {tile_tokens_none, NULL, NULL, NULL, NULL, NULL};
#endif
