/* cpu_pgemm_avx512.c — the packed-panel prompt GEMM of cpu_pgemm.h: panel
 * and tile packers and the AVX-512 VNNI / BF16 micro-kernels.
 *
 * Layouts (r: weight row 0..15 = zmm lane, t: token of the tile, g: group of
 * four int8 elements / two bf16 elements, k: sub-block):
 *   K-quant panel, per 256-block (5120 B): q[64 g][16 r][4] u8, then
 *     Q4_K/Q5_K: dsc[8 k][16 r] = d*sc_k, dmm[8 k][16 r] = dmin*m_k (floats);
 *     Q6_K: dsc[16 k][16 r] = d*sc_k; IQ4_XS: dsc[16 k][16 r] = d*(ls_{k/2} - 32). q is
 *     the unsigned quant (Q6_K: 0..63, IQ4_XS: the codebook value + 128; the offsets -32 and
 *     -128 are folded into the activation side).
 *   q8_K tile, per block (2880 B): qs[64 g][8 t][4], d[8 t] (64 B),
 *     ys[8 k][8 t] float sums of 32 quants, o16[16 k][8 t] int32 = -32 * bsums.
 *   q8_0-family panel, per 32-block (576 B): q[8 g][16 r][4] u8 (Q8_0: w+128,
 *     Q4_0: the nibble 0..15), d[16 r].
 *   q8_0 tile, per block (384 B): qs[8 g][8 t][4], d[8 t], o128[8 t], o8[8 t]
 *     (int32 -128*sum, -8*sum: the weights' offsets times the block sum).
 *   BF16 panel: [k/2 g][16 r][2] bf16; tile: [k/2 g][16 t][2] bf16.
 * The integer part is exact; scales apply per sub-block in float. */
#define CPU_PGEMM_UNPACKERS
#include "backend/cpu/cpu_pgemm.h"
#include "backend/cpu/cpu_pgemm_isa.h"

#include <string.h>

#include "quant/quant.h"

#define PT 8     /* tokens per int8 tile */
#define PT_BF 16 /* tokens per bf16 tile */
#define KQ_PANEL 5120
#define KQ_TILE 2880
#define Q8_PANEL 576
#define Q8_TILE 384

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

#include "backend/cpu/cpu_dot.h"

#define VATTR __attribute__((target("avx512vnni")))
#define BATTR __attribute__((target("avx512vnni,avx512bf16")))

static int have_vnni(void) { return cpu_dot_isa() == CPU_ISA_AVX512; }
static int have_bf16(void) { return have_vnni() && __builtin_cpu_supports("avx512bf16"); }

static int tile_tokens_avx512(uint32_t wtype) {
    switch (wtype) {
    case QT_Q4_K: case QT_Q5_K: case QT_Q6_K: case QT_IQ4_XS: case QT_Q8_0: case QT_Q4_0: return have_vnni() ? PT : 0;
    case QT_BF16: return have_bf16() ? PT_BF : 0;
    default: return 0;
    }
}

static size_t act_bytes_avx512(uint32_t wtype, int64_t k) {
    switch (wtype) {
    case QT_Q4_K: case QT_Q5_K: case QT_Q6_K: case QT_IQ4_XS: return (size_t)(k / 256) * KQ_TILE;
    case QT_Q8_0: case QT_Q4_0: return (size_t)(k / 32) * Q8_TILE;
    case QT_BF16: return (size_t)(k / 2) * PT_BF * 4;
    default: return 0;
    }
}

static size_t panel_bytes_avx512(uint32_t wtype, int64_t k) {
    switch (wtype) {
    case QT_Q4_K: case QT_Q5_K: case QT_Q6_K: case QT_IQ4_XS: return (size_t)(k / 256) * KQ_PANEL;
    case QT_Q8_0: case QT_Q4_0: return (size_t)(k / 32) * Q8_PANEL;
    case QT_BF16: return (size_t)(k / 2) * CPU_PGEMM_ROWS * 4;
    default: return 0;
    }
}

/* dst[(g*16 + r)*4 + j] = src[r*ne + 4g + j]: 16 rows of ne bytes, dword-interleaved. */
static VATTR void interleave16(const uint8_t *src, int ne, uint8_t *dst) {
    const __m512i idx = _mm512_mullo_epi32(_mm512_set_epi32(15, 14, 13, 12, 11, 10, 9, 8, 7, 6, 5, 4, 3, 2, 1, 0),
                                           _mm512_set1_epi32(ne));
    for (int g = 0; g < ne / 4; g++)
        _mm512_storeu_si512(dst + 64 * g, _mm512_i32gather_epi32(idx, (const void *)(src + 4 * g), 1));
}

static VATTR void pack_panel_kq(uint32_t wtype, int64_t k, const uint8_t *w, size_t ws, int nr, uint8_t *panel) {
    const int64_t nb = k / 256;
    const size_t bb = quant_get_traits(wtype)->block_bytes;
    uint8_t tmp[CPU_PGEMM_ROWS * 256];
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *pb = panel + b * KQ_PANEL;
        float *dsc = (float *)(void *)(pb + 4096), *dmm = dsc + 128;
        for (int r = 0; r < CPU_PGEMM_ROWS; r++) {
            if (r >= nr) {
                memset(tmp + 256 * r, 0, 256);
                for (int s = 0; s < (wtype == QT_Q6_K || wtype == QT_IQ4_XS ? 16 : 8); s++) dsc[16 * s + r] = 0.0f;
                if (wtype != QT_Q6_K && wtype != QT_IQ4_XS)
                    for (int s = 0; s < 8; s++) dmm[16 * s + r] = 0.0f;
                continue;
            }
            const uint8_t *blk = w + (size_t)r * ws + (size_t)b * bb;
            if (wtype == QT_IQ4_XS) { /* codebook value + 128; each 32-element scale on both 16-halves */
                const blk_iq4_xs *x = (const blk_iq4_xs *)(const void *)blk;
                const float d = quant_f16_to_f32(x->d);
                for (int ib = 0; ib < 8; ib++) {
                    const int ls = quant_iq4xs_scale(x, ib);
                    dsc[16 * (2 * ib) + r] = dsc[16 * (2 * ib + 1) + r] = d * (float)(ls - 32);
                    for (int j = 0; j < 16; j++) {
                        const uint8_t q = x->qs[16 * ib + j];
                        tmp[256 * r + 32 * ib + j] = (uint8_t)(quant_iq4nl_values[q & 15] + 128);
                        tmp[256 * r + 32 * ib + 16 + j] = (uint8_t)(quant_iq4nl_values[q >> 4] + 128);
                    }
                }
            } else if (wtype == QT_Q6_K) {
                const blk_q6_K *q6 = (const blk_q6_K *)(const void *)blk;
                unpack_q6_K(q6, tmp + 256 * r);
                const float d = quant_f16_to_f32(q6->d);
                for (int s = 0; s < 16; s++) dsc[16 * s + r] = d * (float)q6->scales[s];
            } else {
                unpack_q45_K(blk, wtype == QT_Q5_K, tmp + 256 * r);
                kq_scales_min(blk, r, dsc, dmm);
            }
        }
        interleave16(tmp, 256, pb);
    }
}

static VATTR void pack_panel_q8(uint32_t wtype, int64_t k, const uint8_t *w, size_t ws, int nr, uint8_t *panel) {
    const int64_t nb = k / 32;
    const size_t bb = quant_get_traits(wtype)->block_bytes;
    uint8_t tmp[CPU_PGEMM_ROWS * 32];
    const __m128i m4 = _mm_set1_epi8(15);
    for (int64_t b = 0; b < nb; b++) {
        uint8_t *pb = panel + b * Q8_PANEL;
        float *dw = (float *)(void *)(pb + 512);
        for (int r = 0; r < CPU_PGEMM_ROWS; r++) {
            if (r >= nr) {
                memset(tmp + 32 * r, 0, 32);
                dw[r] = 0.0f;
                continue;
            }
            const uint8_t *blk = w + (size_t)r * ws + (size_t)b * bb;
            uint16_t d;
            memcpy(&d, blk, 2); /* d leads both block types */
            dw[r] = quant_f16_to_f32(d);
            if (wtype == QT_Q8_0) {
                _mm256_storeu_si256((__m256i *)(tmp + 32 * r),
                                    _mm256_xor_si256(_mm256_loadu_si256((const __m256i *)(blk + 2)), _mm256_set1_epi8((char)0x80)));
            } else {
                const __m128i q = _mm_loadu_si128((const __m128i *)(blk + 2));
                _mm_storeu_si128((__m128i *)(tmp + 32 * r), _mm_and_si128(q, m4));
                _mm_storeu_si128((__m128i *)(tmp + 32 * r + 16), _mm_and_si128(_mm_srli_epi16(q, 4), m4));
            }
        }
        interleave16(tmp, 32, pb);
    }
}

static VATTR void pack_panel_bf16(int64_t k, const uint8_t *w, size_t ws, int nr, uint8_t *panel) {
    /* in slices of 128 elements: 16 rows x 256 bytes through interleave16 */
    uint8_t tmp[CPU_PGEMM_ROWS * 256];
    for (int64_t i = 0; i < k; i += 128) {
        const int ne = (int)((k - i < 128 ? k - i : 128) * 2);
        for (int r = 0; r < CPU_PGEMM_ROWS; r++) {
            if (r < nr) memcpy(tmp + (size_t)r * ne, w + (size_t)r * ws + 2 * i, (size_t)ne);
            else memset(tmp + (size_t)r * ne, 0, (size_t)ne);
        }
        interleave16(tmp, ne, panel + 2 * i * CPU_PGEMM_ROWS);
    }
}

static void pack_panel_avx512(uint32_t wtype, int64_t k, const void *w, size_t row_bytes, int nr, void *panel) {
    switch (wtype) {
    case QT_Q4_K: case QT_Q5_K: case QT_Q6_K: case QT_IQ4_XS: pack_panel_kq(wtype, k, w, row_bytes, nr, panel); break;
    case QT_Q8_0: case QT_Q4_0: pack_panel_q8(wtype, k, w, row_bytes, nr, panel); break;
    case QT_BF16: pack_panel_bf16(k, w, row_bytes, nr, panel); break;
    default: break;
    }
}

/* ---- activation tiles ---- */

/* dst[(g*T + t)*4 + j] = row t's byte 4g + j, for g < ng (zero for t >= nt). */
static void interleave_tokens(const uint8_t *const *rows, int nt, int T, int ng, uint8_t *dst) {
    for (int g = 0; g < ng; g++)
        for (int t = 0; t < T; t++) {
            if (t < nt) memcpy(dst + ((size_t)g * T + t) * 4, rows[t] + 4 * g, 4);
            else memset(dst + ((size_t)g * T + t) * 4, 0, 4);
        }
}

static void pack_act_avx512(uint32_t wtype, int64_t k, const void *xq, size_t xs, int nt, void *tile) {
    const uint8_t *rows[PT_BF];
    uint8_t *dst = tile;
    switch (wtype) {
    case QT_Q4_K: case QT_Q5_K: case QT_Q6_K: case QT_IQ4_XS:
        for (int64_t b = 0; b < k / 256; b++) {
            uint8_t *tb = dst + b * KQ_TILE;
            float *d = (float *)(void *)(tb + 2048), *ys = (float *)(void *)(tb + 2112);
            int32_t *o16 = (int32_t *)(void *)(tb + 2368);
            for (int t = 0; t < PT; t++) {
                const blk_q8_K *x = t < nt ? (const blk_q8_K *)(const void *)((const char *)xq + (size_t)t * xs) + b : NULL;
                rows[t] = x ? (const uint8_t *)x->qs : NULL;
                d[t] = x ? x->d : 0.0f;
                for (int s = 0; s < 8; s++) ys[8 * s + t] = x ? (float)(x->bsums[2 * s] + x->bsums[2 * s + 1]) : 0.0f;
                for (int s = 0; s < 16; s++) o16[8 * s + t] = x ? -32 * x->bsums[s] : 0;
            }
            interleave_tokens(rows, nt, PT, 64, tb);
        }
        break;
    case QT_Q8_0: case QT_Q4_0:
        for (int64_t b = 0; b < k / 32; b++) {
            uint8_t *tb = dst + b * Q8_TILE;
            float *d = (float *)(void *)(tb + 256);
            int32_t *o128 = (int32_t *)(void *)(tb + 288), *o8 = o128 + 8;
            for (int t = 0; t < PT; t++) {
                const blk_q8_0 *x = t < nt ? (const blk_q8_0 *)(const void *)((const char *)xq + (size_t)t * xs) + b : NULL;
                int sum = 0;
                for (int j = 0; x && j < 32; j++) sum += x->qs[j];
                rows[t] = x ? (const uint8_t *)x->qs : NULL;
                d[t] = x ? quant_f16_to_f32(x->d) : 0.0f;
                o128[t] = -128 * sum;
                o8[t] = -8 * sum;
            }
            interleave_tokens(rows, nt, PT, 8, tb);
        }
        break;
    case QT_BF16:
        for (int t = 0; t < PT_BF; t++) rows[t] = t < nt ? (const uint8_t *)xq + (size_t)t * xs : NULL;
        interleave_tokens(rows, nt, PT_BF, (int)(k / 2), dst);
        break;
    default: break;
    }
}

/* ---- micro-kernels: 16 weight rows x one token tile ---- */

static inline __m512i bcast32(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm512_set1_epi32(v);
}

/* Q4_K / Q5_K: per sub-block of 32, d*sc*Σq·y - dmin*m*Σy, times the token's d. */
static VATTR void tile_q45_K(int64_t k, const uint8_t *pn, const uint8_t *at, float *out) {
    __m512 acc[PT];
    for (int t = 0; t < PT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < k / 256; b++) {
        const uint8_t *wq = pn + b * KQ_PANEL, *aq = at + b * KQ_TILE;
        const float *dsc = (const float *)(const void *)(wq + 4096), *dmm = dsc + 128;
        const float *ad = (const float *)(const void *)(aq + 2048), *ys = (const float *)(const void *)(aq + 2112);
        __m512 fb[PT];
        for (int t = 0; t < PT; t++) fb[t] = _mm512_setzero_ps();
        for (int s = 0; s < 8; s++) {
            __m512i is[PT];
            for (int t = 0; t < PT; t++) is[t] = _mm512_setzero_si512();
#pragma GCC unroll 8
            for (int g = 0; g < 8; g++) {
                const __m512i w = _mm512_load_si512(wq + (8 * s + g) * 64);
                const uint8_t *ag = aq + (8 * s + g) * 4 * PT;
#pragma GCC unroll 8
                for (int t = 0; t < PT; t++) is[t] = _mm512_dpbusd_epi32(is[t], w, bcast32(ag + 4 * t));
            }
            const __m512 sc = _mm512_load_ps(dsc + 16 * s), mn = _mm512_load_ps(dmm + 16 * s);
#pragma GCC unroll 8
            for (int t = 0; t < PT; t++) {
                fb[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[t]), sc, fb[t]);
                fb[t] = _mm512_fnmadd_ps(mn, _mm512_set1_ps(ys[8 * s + t]), fb[t]);
            }
        }
#pragma GCC unroll 8
        for (int t = 0; t < PT; t++) acc[t] = _mm512_fmadd_ps(fb[t], _mm512_set1_ps(ad[t]), acc[t]);
    }
    for (int t = 0; t < PT; t++) _mm512_storeu_ps(out + 16 * t, acc[t]);
}

/* Q6_K: per sub-block of 16, d*sc*(Σq·y - 32Σy) (the -32Σy starts the integer sum); IQ4_XS (sh 2):
 * the codebook value + 128, so -128Σy = 4 times the tile's -32Σy. */
static VATTR void tile_q6_K(int64_t k, const uint8_t *pn, const uint8_t *at, float *out, int sh) {
    __m512 acc[PT];
    for (int t = 0; t < PT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < k / 256; b++) {
        const uint8_t *wq = pn + b * KQ_PANEL, *aq = at + b * KQ_TILE;
        const float *dsc = (const float *)(const void *)(wq + 4096);
        const float *ad = (const float *)(const void *)(aq + 2048);
        const uint8_t *o16 = aq + 2368;
        __m512 fb[PT];
        for (int t = 0; t < PT; t++) fb[t] = _mm512_setzero_ps();
        for (int s = 0; s < 16; s++) {
            __m512i is[PT];
#pragma GCC unroll 8
            for (int t = 0; t < PT; t++) is[t] = _mm512_slli_epi32(bcast32(o16 + 4 * (8 * s + t)), (unsigned)sh);
#pragma GCC unroll 4
            for (int g = 0; g < 4; g++) {
                const __m512i w = _mm512_load_si512(wq + (4 * s + g) * 64);
                const uint8_t *ag = aq + (4 * s + g) * 4 * PT;
#pragma GCC unroll 8
                for (int t = 0; t < PT; t++) is[t] = _mm512_dpbusd_epi32(is[t], w, bcast32(ag + 4 * t));
            }
            const __m512 sc = _mm512_load_ps(dsc + 16 * s);
#pragma GCC unroll 8
            for (int t = 0; t < PT; t++) fb[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[t]), sc, fb[t]);
        }
#pragma GCC unroll 8
        for (int t = 0; t < PT; t++) acc[t] = _mm512_fmadd_ps(fb[t], _mm512_set1_ps(ad[t]), acc[t]);
    }
    for (int t = 0; t < PT; t++) _mm512_storeu_ps(out + 16 * t, acc[t]);
}

/* Q8_0 (w+128) / Q4_0 (nibble): the weight offset times the block sum starts the integer sum. */
static VATTR void tile_q8(int64_t k, const uint8_t *pn, const uint8_t *at, float *out, int q4) {
    __m512 acc[PT];
    for (int t = 0; t < PT; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t b = 0; b < k / 32; b++) {
        const uint8_t *wq = pn + b * Q8_PANEL, *aq = at + b * Q8_TILE;
        const __m512 dw = _mm512_load_ps((const float *)(const void *)(wq + 512));
        const float *ad = (const float *)(const void *)(aq + 256);
        const uint8_t *off = aq + (q4 ? 320 : 288);
        __m512i is[PT];
#pragma GCC unroll 8
        for (int t = 0; t < PT; t++) is[t] = bcast32(off + 4 * t);
#pragma GCC unroll 8
        for (int g = 0; g < 8; g++) {
            const __m512i w = _mm512_load_si512(wq + g * 64);
#pragma GCC unroll 8
            for (int t = 0; t < PT; t++) is[t] = _mm512_dpbusd_epi32(is[t], w, bcast32(aq + (g * PT + t) * 4));
        }
#pragma GCC unroll 8
        for (int t = 0; t < PT; t++)
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(is[t]), _mm512_mul_ps(dw, _mm512_set1_ps(ad[t])), acc[t]);
    }
    for (int t = 0; t < PT; t++) _mm512_storeu_ps(out + 16 * t, acc[t]);
}

static BATTR void tile_bf16(int64_t k, const uint8_t *pn, const uint8_t *at, float *out) {
    __m512 acc[PT_BF];
    for (int t = 0; t < PT_BF; t++) acc[t] = _mm512_setzero_ps();
    for (int64_t g = 0; g < k / 2; g++) {
        const __m512bh w = (__m512bh)_mm512_load_si512(pn + g * 64);
        const uint8_t *ag = at + g * 4 * PT_BF;
#pragma GCC unroll 16
        for (int t = 0; t < PT_BF; t++) acc[t] = _mm512_dpbf16_ps(acc[t], w, (__m512bh)bcast32(ag + 4 * t));
    }
    for (int t = 0; t < PT_BF; t++) _mm512_storeu_ps(out + 16 * t, acc[t]);
}

static void tile_avx512(uint32_t wtype, int64_t k, const void *panel, const void *tile, float *out) {
    switch (wtype) {
    case QT_Q4_K: case QT_Q5_K: tile_q45_K(k, panel, tile, out); break;
    case QT_Q6_K: tile_q6_K(k, panel, tile, out, 0); break;
    case QT_IQ4_XS: tile_q6_K(k, panel, tile, out, 2); break;
    case QT_Q8_0: tile_q8(k, panel, tile, out, 0); break;
    case QT_Q4_0: tile_q8(k, panel, tile, out, 1); break;
    case QT_BF16: tile_bf16(k, panel, tile, out); break;
    default: break;
    }
}

const cpu_pgemm_ops cpu_pgemm_avx512 = {tile_tokens_avx512, act_bytes_avx512, panel_bytes_avx512,
                                        pack_act_avx512,    pack_panel_avx512, tile_avx512};
#else /* no AVX-512 build: no packed kernels */
static int tile_tokens_none(uint32_t wtype) { (void)wtype; return 0; }
const cpu_pgemm_ops cpu_pgemm_avx512 = {tile_tokens_none, NULL, NULL, NULL, NULL, NULL};
#endif
