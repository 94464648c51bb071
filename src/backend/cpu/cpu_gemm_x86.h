/* cpu_gemm_x86.h — private: AVX-512 multi-row kernels (cpu_gemm_fn), included
 * by cpu_dot_avx512.c after cpu_dot_x86.h (whose helpers it uses).
 *
 * A tile is 4 weight rows x RX (1..4) activation rows. The integer work runs
 * 512 bits wide: a Q4_K chunk's low and high nibbles (64 weights) meet one
 * 64-byte activation load; maddubs + vpdpwssd apply the sub-block scale.
 * Two outputs share one zmm for the float part (lanes 0-7 row 2p, 8-15 row
 * 2p+1), so each output keeps the single-row kernel's 8-lane accumulator and
 * its exact float order: only loads, unpacking and scale decoding are
 * shared, and results are bitwise those of cpu_dot_x86.h's kernels.
 * A tile short of 4 weight rows repeats its last row and drops the result. */
#include <stddef.h>

#define WROW(w, ws, i) ((const char *)(w) + (size_t)(i) * (ws))

/* Prefetch: a tile's rows are short streams (a row is a few hundred bytes
 * to a few KiB), so each block step prefetches the same block of the row
 * GEMM_PF_ROWS further on (the matmul walks rows in order). Measured on the
 * 151936x1024 LM head (DRAM-bound), 16 rows ahead into L1 did best. */
#ifndef GEMM_PF_ROWS
#define GEMM_PF_ROWS 16
#endif
#ifndef GEMM_PF_HINT
#define GEMM_PF_HINT _MM_HINT_T0
#endif
#define GEMM_PREFETCH(blk, ws, lines)                                                          \
    for (int l_ = 0; GEMM_PF_ROWS && l_ < (lines); l_++)                                       \
    _mm_prefetch((const char *)(blk) + GEMM_PF_ROWS * (ws) + 64 * l_, GEMM_PF_HINT)

/* [a, b] -> lanes 0-7 a + lanes 8-15 of a | same for b: two single-row
 * 8-lane integer sums from two 16-lane ones. */
KINL __m512i fold_pair(__m512i a, __m512i b) {
    return _mm512_add_epi32(_mm512_shuffle_i64x2(a, b, 0x44), _mm512_shuffle_i64x2(a, b, 0xEE));
}

/* lanes 0-7 = v[2p], lanes 8-15 = v[2p+1] of a 4-float vector. */
KINL __m512 pair_ps(__m128 v, int p) {
    const __m512i idx = _mm512_set_epi32(2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1, 2 * p + 1,
                                         2 * p + 1, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p, 2 * p);
    return _mm512_permutexvar_ps(idx, _mm512_castps128_ps512(v));
}

/* 16-bit lanes: a in the low 256 bits, b in the high. */
KINL __m512i halves16(int a, int b) {
    return _mm512_inserti64x4(_mm512_set1_epi16((short)a), _mm256_set1_epi16((short)b), 1);
}

/* 4 f16 scalars -> 4 floats (exact, as h2f). */
KINL __m128 h4f(uint16_t a, uint16_t b, uint16_t c, uint16_t d) {
    return _mm_cvtph_ps(_mm_setr_epi16((short)a, (short)b, (short)c, (short)d, 0, 0, 0, 0));
}

KINL void store_pair(const __m512 acc, float *s0, float *s1, int two) {
    *s0 = hsum8(_mm512_castps512_ps256(acc));
    if (two) *s1 = hsum8(_mm512_extractf32x8_ps(acc, 1));
}

/* ---- Q4_K (QH 0) / Q5_K (QH 1): single-row order of QK45_BODY. Q5_K's
 * minimum term is one scalar per block (an integer sum, FMA'd), kept per row
 * in lane 4r of summ. ---- */
KINL void qk45_tile(int64_t n, const char *const wr[4], size_t ws, const char *x, size_t xs, const int RX, float *s,
                    size_t ss, int rw, const int QH) {
    const int64_t nb = n / 256;
    const size_t bb = QH ? sizeof(blk_q5_K) : sizeof(blk_q4_K);
    const size_t oqs = QH ? offsetof(blk_q5_K, qs) : offsetof(blk_q4_K, qs);
    const __m512i k10 = _mm512_set1_epi8(0x10);
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i shift = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(4), 1);
    const __m512i wid = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(1), 1);
    const __m512i fid = _mm512_set_epi32(3, 3, 3, 3, 2, 2, 2, 2, 1, 1, 1, 1, 0, 0, 0, 0);
    __m512 acc[2][4], accm[4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) acc[0][j] = acc[1][j] = accm[j] = _mm512_setzero_ps();
    (void)k10;
    for (int64_t i = 0; i < nb; i++) {
        const blk_q4_K *a[4];
        uint8_t sc[4][16];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            a[r] = (const blk_q4_K *)(const void *)(wr[r] + (size_t)i * bb);
            GEMM_PREFETCH(a[r], ws, 3); /* 144 / 176-byte blocks */
            k4_unpack_scales(a[r]->scales, sc[r]);
        }
        __m512i scv[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) scv[r] = _mm512_zextsi128_si512(_mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)sc[r])));
        const __m128i mn01 = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(sc[0] + 8)),
                                                _mm_loadl_epi64((const __m128i *)(sc[1] + 8)));
        const __m128i mn23 = _mm_unpacklo_epi64(_mm_loadl_epi64((const __m128i *)(sc[2] + 8)),
                                                _mm_loadl_epi64((const __m128i *)(sc[3] + 8)));
        const __m512i mins = _mm512_cvtepu8_epi16(_mm256_set_m128i(mn23, mn01));
        const __m128 dw = h4f(a[0]->d, a[1]->d, a[2]->d, a[3]->d);
        const __m128 dm = h4f(a[0]->dmin, a[1]->dmin, a[2]->dmin, a[3]->dmin);
        __m512i isum[4][4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
            for (int j = 0; j < RX; j++) isum[r][j] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const __m512i idx = _mm512_add_epi16(wid, _mm512_set1_epi16((short)(2 * c)));
            __m512i wv[4], sv[4];
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                const uint8_t *qs = (const uint8_t *)a[r] + oqs;
                const __m512i q = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(qs + 32 * c)));
                wv[r] = _mm512_and_si512(_mm512_srlv_epi16(q, shift), m4);
                if (QH) { /* bit 2c (low half) / 2c+1 (high half) of qh -> bit 4 */
                    const __m512i qh = _mm512_broadcast_i64x4(
                        _mm256_loadu_si256((const __m256i *)((const blk_q5_K *)(const void *)a[r])->qh));
                    const __m512i hs = c < 2 ? _mm512_sllv_epi16(qh, halves16(4 - 2 * c, 3 - 2 * c))
                                             : _mm512_srlv_epi16(qh, halves16(2 * c - 4, 2 * c - 3));
                    wv[r] = _mm512_ternarylogic_epi32(hs, k10, wv[r], 0xEA); /* (hs & k10) | wv */
                }
                sv[r] = _mm512_permutexvar_epi16(idx, scv[r]);
            }
#pragma GCC unroll 4
            for (int j = 0; j < RX; j++) {
                const __m512i y = _mm512_loadu_si512(((const blk_q8_K *)XROW(x, xs, j))[i].qs + 64 * c);
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++)
                    isum[r][j] = _mm512_dpwssd_epi32(isum[r][j], _mm512_maddubs_epi16(wv[r], y), sv[r]);
            }
        }
        const __m512 dm4 = _mm512_permutexvar_ps(fid, _mm512_castps128_ps512(dm));
        const __m512 dw01 = pair_ps(dw, 0), dw23 = pair_ps(dw, 1);
#pragma GCC unroll 4
        for (int j = 0; j < RX; j++) {
            const blk_q8_K *b = (const blk_q8_K *)XROW(x, xs, j) + i;
            const __m256i bs = _mm256_loadu_si256((const __m256i *)b->bsums);
            const __m128i pair = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1));
            const __m512i pm = _mm512_madd_epi16(mins, _mm512_broadcast_i32x4(pair));
            if (QH) { /* the 4 lanes of each row summed (integers), in every lane */
                __m512i t = _mm512_add_epi32(pm, _mm512_shuffle_epi32(pm, _MM_PERM_BADC));
                t = _mm512_add_epi32(t, _mm512_shuffle_epi32(t, _MM_PERM_CDAB));
                accm[j] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(-b->d), dm4), _mm512_cvtepi32_ps(t), accm[j]);
            } else
                accm[j] = _mm512_fmadd_ps(_mm512_mul_ps(_mm512_set1_ps(-b->d), dm4), _mm512_cvtepi32_ps(pm), accm[j]);
            const __m512 dy = _mm512_set1_ps(b->d);
            acc[0][j] = _mm512_fmadd_ps(_mm512_mul_ps(dw01, dy), _mm512_cvtepi32_ps(fold_pair(isum[0][j], isum[1][j])), acc[0][j]);
            acc[1][j] = _mm512_fmadd_ps(_mm512_mul_ps(dw23, dy), _mm512_cvtepi32_ps(fold_pair(isum[2][j], isum[3][j])), acc[1][j]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < RX; j++) {
        float m[16];
        _mm512_storeu_ps(m, accm[j]);
#pragma GCC unroll 4
        for (int r = 0; r < rw; r++) {
            const __m512 v = acc[r >> 1][j];
            const float t = hsum8((r & 1) ? _mm512_extractf32x8_ps(v, 1) : _mm512_castps512_ps256(v));
            s[(size_t)r * ss + j] = t + (QH ? m[4 * r] : hsum4(_mm_loadu_ps(m + 4 * r)));
        }
    }
}

KINL void q4_K_tile(int64_t n, const char *const wr[4], size_t ws, const char *x, size_t xs, const int RX, float *s,
                    size_t ss, int rw) {
    qk45_tile(n, wr, ws, x, xs, RX, s, ss, rw, 0);
}

KINL void q5_K_tile(int64_t n, const char *const wr[4], size_t ws, const char *x, size_t xs, const int RX, float *s,
                    size_t ss, int rw) {
    qk45_tile(n, wr, ws, x, xs, RX, s, ss, rw, 1);
}

/* ---- Q6_K: single-row order of q6_K_rows ---- */
KINL void q6_K_tile(int64_t n, const char *const wr[4], size_t ws, const char *x, size_t xs, const int RX, float *s,
                    size_t ss, int rw) {
    const int64_t nb = n / 256;
    const __m512i m4 = _mm512_set1_epi8(15), m30 = _mm512_set1_epi8(0x30);
    const __m512i sh0 = _mm512_inserti64x4(_mm512_set1_epi16(4), _mm256_set1_epi16(2), 1); /* k=0,1: left */
    const __m512i sh1 = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(2), 1); /* k=2,3: right */
    const __m512i sid = _mm512_set_epi16(3, 3, 3, 3, 3, 3, 3, 3, 2, 2, 2, 2, 2, 2, 2, 2, 1, 1, 1, 1, 1, 1, 1, 1, 0, 0,
                                         0, 0, 0, 0, 0, 0);
    __m512 acc[2][4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) acc[0][j] = acc[1][j] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const blk_q6_K *a[4];
        __m512i scv[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            a[r] = (const blk_q6_K *)wr[r] + i;
            GEMM_PREFETCH(a[r], ws, 4);
            scv[r] = _mm512_zextsi256_si512(_mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)a[r]->scales)));
        }
        const __m128 dw = h4f(a[0]->d, a[1]->d, a[2]->d, a[3]->d);
        __m512i isum[4][4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
            for (int j = 0; j < RX; j++) isum[r][j] = _mm512_setzero_si512();
#pragma GCC unroll 2
        for (int h = 0; h < 2; h++) {
#pragma GCC unroll 2
            for (int p = 0; p < 2; p++) {
                const __m512i idx = _mm512_add_epi16(sid, _mm512_set1_epi16((short)(8 * h + 4 * p)));
                __m512i wv[4], sv[4];
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) {
                    const __m512i ql = _mm512_loadu_si512(a[r]->ql + 64 * h);
                    const __m512i qh = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)(a[r]->qh + 32 * h)));
                    const __m512i lo = p ? _mm512_srli_epi16(ql, 4) : ql;
                    const __m512i hb = _mm512_and_si512(p ? _mm512_srlv_epi16(qh, sh1) : _mm512_sllv_epi16(qh, sh0), m30);
                    wv[r] = _mm512_ternarylogic_epi32(lo, m4, hb, 0xEA); /* (lo & m4) | hb */
                    sv[r] = _mm512_permutexvar_epi16(idx, scv[r]);
                }
#pragma GCC unroll 4
                for (int j = 0; j < RX; j++) {
                    const __m512i y = _mm512_loadu_si512(((const blk_q8_K *)XROW(x, xs, j))[i].qs + 128 * h + 64 * p);
#pragma GCC unroll 4
                    for (int r = 0; r < 4; r++)
                        isum[r][j] = _mm512_dpwssd_epi32(isum[r][j], _mm512_maddubs_epi16(wv[r], y), sv[r]);
                }
            }
        }
        const __m512 dw01 = pair_ps(dw, 0), dw23 = pair_ps(dw, 1);
        const __m512i sc01 = _mm512_inserti64x4(scv[0], _mm512_castsi512_si256(scv[1]), 1);
        const __m512i sc23 = _mm512_inserti64x4(scv[2], _mm512_castsi512_si256(scv[3]), 1);
#pragma GCC unroll 4
        for (int j = 0; j < RX; j++) {
            const blk_q8_K *b = (const blk_q8_K *)XROW(x, xs, j) + i;
            const __m512i bs = _mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b->bsums));
            const __m512i o01 = _mm512_slli_epi32(_mm512_madd_epi16(sc01, bs), 5);
            const __m512i o23 = _mm512_slli_epi32(_mm512_madd_epi16(sc23, bs), 5);
            const __m512 dy = _mm512_set1_ps(b->d);
            const __m512i f01 = _mm512_sub_epi32(fold_pair(isum[0][j], isum[1][j]), o01);
            const __m512i f23 = _mm512_sub_epi32(fold_pair(isum[2][j], isum[3][j]), o23);
            acc[0][j] = _mm512_fmadd_ps(_mm512_mul_ps(dw01, dy), _mm512_cvtepi32_ps(f01), acc[0][j]);
            acc[1][j] = _mm512_fmadd_ps(_mm512_mul_ps(dw23, dy), _mm512_cvtepi32_ps(f23), acc[1][j]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < RX; j++)
#pragma GCC unroll 4
        for (int p = 0; p < 2; p++)
            if (2 * p < rw) store_pair(acc[p][j], s + (size_t)(2 * p) * ss + j, s + (size_t)(2 * p + 1) * ss + j, 2 * p + 1 < rw);
}

/* ---- Q8_0 (Q4 0) / Q4_0 (Q4 1): single-row order of Q8_0_SIGNED_BODY.
 * s8 x s8 as (y + 128) x w - 128 x w with vpdpbusd (the same integer). ---- */
KINL __m256i q80_w(const void *blk, const int Q4) {
    if (Q4) return _mm256_sub_epi8(unpack_nibbles(((const blk_q4_0 *)blk)->qs), _mm256_set1_epi8(8));
    return _mm256_loadu_si256((const __m256i *)((const blk_q8_0 *)blk)->qs);
}

KINL void q80_tile(int64_t n, const char *const wr[4], size_t ws, const char *x, size_t xs, const int RX, float *s,
                   size_t ss, int rw, const int Q4) {
    const size_t bb = Q4 ? sizeof(blk_q4_0) : sizeof(blk_q8_0);
    const int64_t nb = n / 32;
    const __m512i k80 = _mm512_set1_epi8((char)0x80);
    __m512 acc[2][4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) acc[0][j] = acc[1][j] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const blk_q8_0 *a[4]; /* d leads both block types */
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            a[r] = (const blk_q8_0 *)(const void *)(wr[r] + (size_t)i * bb);
            if ((i & 1) == 0) GEMM_PREFETCH(a[r], ws, Q4 ? 1 : 2);
        }
        const __m128 dw = h4f(a[0]->d, a[1]->d, a[2]->d, a[3]->d);
        __m512i wv[2], nc[2];
        __m512 dwp[2];
#pragma GCC unroll 4
        for (int p = 0; p < 2; p++) {
            wv[p] = _mm512_inserti64x4(_mm512_castsi256_si512(q80_w(a[2 * p], Q4)), q80_w(a[2 * p + 1], Q4), 1);
            nc[p] = _mm512_sub_epi32(_mm512_setzero_si512(), _mm512_dpbusd_epi32(_mm512_setzero_si512(), k80, wv[p]));
            dwp[p] = pair_ps(dw, p);
        }
#pragma GCC unroll 4
        for (int j = 0; j < RX; j++) {
            const blk_q8_0 *b = (const blk_q8_0 *)XROW(x, xs, j) + i;
            const __m512i yu = _mm512_xor_si512(_mm512_broadcast_i64x4(_mm256_loadu_si256((const __m256i *)b->qs)), k80);
            const __m512 dy = _mm512_set1_ps(h2f(b->d));
#pragma GCC unroll 4
            for (int p = 0; p < 2; p++)
                acc[p][j] = _mm512_fmadd_ps(_mm512_mul_ps(dwp[p], dy), _mm512_cvtepi32_ps(_mm512_dpbusd_epi32(nc[p], yu, wv[p])),
                                            acc[p][j]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < RX; j++)
#pragma GCC unroll 4
        for (int p = 0; p < 2; p++)
            if (2 * p < rw) store_pair(acc[p][j], s + (size_t)(2 * p) * ss + j, s + (size_t)(2 * p + 1) * ss + j, 2 * p + 1 < rw);
}

KINL void q8_0_tile(int64_t n, const char *const wr[4], size_t ws, const char *x, size_t xs, const int RX, float *s,
                    size_t ss, int rw) {
    q80_tile(n, wr, ws, x, xs, RX, s, ss, rw, 0);
}

KINL void q4_0_tile(int64_t n, const char *const wr[4], size_t ws, const char *x, size_t xs, const int RX, float *s,
                    size_t ss, int rw) {
    q80_tile(n, wr, ws, x, xs, RX, s, ss, rw, 1);
}

/* ---- IQ4_XS: single-row order of iq4_xs_rows. A zmm holds 64 weights (two
 * 32-element sub-blocks: lanes 0-7 the first, 8-15 the second, each lane 4
 * adjacent elements as in the 256-bit kernel): codebook bytes through
 * vpshufb, |w| x (y with w's sign: AVX-512 has no vpsignb, so a masked
 * subtract) by maddubs, then vpdpwssd with the sub-block's scale. Folding
 * lanes 8-15 onto 0-7 gives the single-row kernel's 8 int32 sums exactly. ---- */
/* The 8 sub-block scales (ls - 32) of a super-block as int16 lanes 0-7. */
KINL __m128i iq4_xs_scales(const blk_iq4_xs *a) {
    uint32_t l;
    memcpy(&l, a->scales_l, 4);
    const __m128i b = _mm_shuffle_epi8(_mm_cvtsi32_si128((int)l),
                                       _mm_setr_epi8(0, -1, 0, -1, 1, -1, 1, -1, 2, -1, 2, -1, 3, -1, 3, -1));
    const __m128i lo = _mm_and_si128(_mm_srlv_epi16(b, _mm_setr_epi16(0, 4, 0, 4, 0, 4, 0, 4)), _mm_set1_epi16(15));
    const __m128i hi = _mm_and_si128(_mm_srlv_epi16(_mm_set1_epi16((short)a->scales_h), _mm_setr_epi16(0, 2, 4, 6, 8, 10, 12, 14)),
                                     _mm_set1_epi16(3));
    return _mm_sub_epi16(_mm_or_si128(lo, _mm_slli_epi16(hi, 4)), _mm_set1_epi16(32));
}

KINL void iq4_xs_tile(int64_t n, const char *const wr[4], size_t ws, const char *x, size_t xs, const int RX, float *s,
                      size_t ss, int rw) {
    const int64_t nb = n / 256;
    const __m512i m4 = _mm512_set1_epi8(15);
    const __m512i lut = _mm512_broadcast_i32x4(_mm_loadu_si128((const __m128i *)quant_iq4nl_values));
    /* 128-bit lanes 1 and 3 take the high nibbles */
    const __m512i nsh = _mm512_set_epi64(0x0004000400040004LL, 0x0004000400040004LL, 0, 0, 0x0004000400040004LL,
                                         0x0004000400040004LL, 0, 0);
    const __m512i wid = _mm512_inserti64x4(_mm512_setzero_si512(), _mm256_set1_epi16(1), 1);
    __m512 acc[2][4];
#pragma GCC unroll 4
    for (int j = 0; j < 4; j++) acc[0][j] = acc[1][j] = _mm512_setzero_ps();
    for (int64_t i = 0; i < nb; i++) {
        const blk_iq4_xs *a[4];
        __m512i scv[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            a[r] = (const blk_iq4_xs *)(const void *)(wr[r] + (size_t)i * sizeof(blk_iq4_xs));
            GEMM_PREFETCH(a[r], ws, 3); /* 136-byte blocks */
            scv[r] = _mm512_zextsi128_si512(iq4_xs_scales(a[r]));
        }
        const __m128 dw = h4f(a[0]->d, a[1]->d, a[2]->d, a[3]->d);
        __m512i isum[4][4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
            for (int j = 0; j < RX; j++) isum[r][j] = _mm512_setzero_si512();
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const __m512i idx = _mm512_add_epi16(wid, _mm512_set1_epi16((short)(2 * c)));
            __m512i uw[4], sv[4];
            __mmask64 neg[4];
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) {
                const __m512i q = _mm512_castsi256_si512(_mm256_loadu_si256((const __m256i *)(a[r]->qs + 32 * c)));
                const __m512i nib = _mm512_and_si512(_mm512_srlv_epi16(_mm512_shuffle_i64x2(q, q, 0x50), nsh), m4);
                const __m512i wv = _mm512_shuffle_epi8(lut, nib);
                uw[r] = _mm512_abs_epi8(wv);
                neg[r] = _mm512_movepi8_mask(wv);
                sv[r] = _mm512_permutexvar_epi16(idx, scv[r]);
            }
#pragma GCC unroll 4
            for (int j = 0; j < RX; j++) {
                const __m512i y = _mm512_loadu_si512(((const blk_q8_K *)XROW(x, xs, j))[i].qs + 64 * c);
#pragma GCC unroll 4
                for (int r = 0; r < 4; r++) {
                    const __m512i ys = _mm512_mask_sub_epi8(y, neg[r], _mm512_setzero_si512(), y);
                    isum[r][j] = _mm512_dpwssd_epi32(isum[r][j], _mm512_maddubs_epi16(uw[r], ys), sv[r]);
                }
            }
        }
        const __m512 dw01 = pair_ps(dw, 0), dw23 = pair_ps(dw, 1);
#pragma GCC unroll 4
        for (int j = 0; j < RX; j++) {
            const __m512 dy = _mm512_set1_ps(((const blk_q8_K *)XROW(x, xs, j))[i].d);
            acc[0][j] = _mm512_fmadd_ps(_mm512_mul_ps(dw01, dy), _mm512_cvtepi32_ps(fold_pair(isum[0][j], isum[1][j])), acc[0][j]);
            acc[1][j] = _mm512_fmadd_ps(_mm512_mul_ps(dw23, dy), _mm512_cvtepi32_ps(fold_pair(isum[2][j], isum[3][j])), acc[1][j]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < RX; j++)
#pragma GCC unroll 2
        for (int p = 0; p < 2; p++)
            if (2 * p < rw) store_pair(acc[p][j], s + (size_t)(2 * p) * ss + j, s + (size_t)(2 * p + 1) * ss + j, 2 * p + 1 < rw);
}

/* ---- F16: a batch in f16_tiny's order (one accumulator per output over
 * 16 elements). One token goes row by row through f16_one: from DRAM, one
 * sequential stream measured ~10% faster than 4 interleaved ones. ---- */
KINL void f16_tile(int64_t n, const char *const wr[4], size_t ws, const char *x, size_t xs, const int RX, float *s,
                   size_t ss, int rw) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) acc[r][j] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 16) {
        __m512 wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            wv[r] = ld_f16(wr[r], i);
            if ((i & 16) == 0) GEMM_PREFETCH((const uint16_t *)wr[r] + i, ws, 1);
        }
#pragma GCC unroll 4
        for (int j = 0; j < RX; j++) {
            const __m512 xv = ld_f16(XROW(x, xs, j), i);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) acc[r][j] = _mm512_fmadd_ps(wv[r], xv, acc[r][j]);
        }
    }
    for (int r = 0; r < rw; r++)
#pragma GCC unroll 4
        for (int j = 0; j < RX; j++) s[(size_t)r * ss + j] = hsum16(acc[r][j]);
}

/* Tiles of 4 weight rows x RXM activation rows, then the remainder. */
#ifndef Q4K_RX
#define Q4K_RX 4
#endif
#ifndef Q6K_RX
#define Q6K_RX 4
#endif
#define GEMM_DRIVER(fn, ATTR, RXM)                                                                  \
    static ATTR void KNAME(gemm_##fn)(int64_t n, const void *w, size_t ws, int nw, const void *x, size_t xs, \
                                      int nx, float *s, size_t ss) {                           \
        for (int i = 0; i < nw; i += 4) {                                                      \
            const int rw = nw - i < 4 ? nw - i : 4;                                            \
            const char *wr[4];                                                                 \
            for (int r = 0; r < 4; r++) wr[r] = WROW(w, ws, i + (r < rw ? r : rw - 1));        \
            float *si = s + (size_t)i * ss;                                                    \
            int j = 0;                                                                         \
            for (; j + (RXM) <= nx; j += (RXM)) fn##_tile(n, wr, ws, XROW(x, xs, j), xs, (RXM), si + j, ss, rw); \
            switch (nx - j) {                                                                  \
            case 3: fn##_tile(n, wr, ws, XROW(x, xs, j), xs, 3, si + j, ss, rw); break;            \
            case 2: fn##_tile(n, wr, ws, XROW(x, xs, j), xs, 2, si + j, ss, rw); break;            \
            case 1: fn##_tile(n, wr, ws, XROW(x, xs, j), xs, 1, si + j, ss, rw); break;            \
            default: break;                                                                    \
            }                                                                                  \
        }                                                                                      \
    }
GEMM_DRIVER(q4_K, KATTR, Q4K_RX)
GEMM_DRIVER(q5_K, KATTR, Q4K_RX)
GEMM_DRIVER(q6_K, KATTR, Q6K_RX)
/* One token too: four interleaved rows with the tile's prefetch beat one row at a time with a whole
 * row prefetched two rows ahead (qwen3-0.6b Q8_0 tg32 on the 2-core VM, alternating: 1 thread
 * 15.9 / 15.0 against 13.6 / 11.7 tok/s, 2 threads 25.4 / 31.8 against 20.4 / 24.1); the results are
 * the same (q80_tile keeps the single-row kernel's order). */
GEMM_DRIVER(q8_0, KATTR, 4)


GEMM_DRIVER(q4_0, KATTR, 4)
GEMM_DRIVER(f16, KATTR, 4)
GEMM_DRIVER(iq4_xs, KATTR, 4)

/* F16: the single-row kernel's order for the same nx. */
static KATTR void gemm_f16_sel_avx512(int64_t n, const void *w, size_t ws, int nw, const void *x, size_t xs, int nx,
                                      float *s, size_t ss) {
    if (nx == 1 || n % 16) {
        for (int i = 0; i < nw; i++) f16_avx512(n, WROW(w, ws, i), x, xs, nx, s + (size_t)i * ss);
        return;
    }
    gemm_f16_avx512(n, w, ws, nw, x, xs, nx, s, ss);
}

/* ---- BF16 (CPUs with AVX512_BF16): one token in bf16_one's order (two
 * accumulators per row over 64 elements), a batch in bf16_tiny's (one per
 * output over 32), as the single-row kernel chooses for the same nx. ---- */
BF16INL void bf16_one_rows(int64_t n, const char *const wr[4], size_t ws, const void *x, float *s, size_t ss,
                           int rw) {
    __m512 c1[4], c2[4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++) c1[r] = c2[r] = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        const __m512bh xa = (__m512bh)_mm512_loadu_si512((const uint16_t *)x + i);
        const __m512bh xb = (__m512bh)_mm512_loadu_si512((const uint16_t *)x + i + 32);
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            const uint16_t *a = (const uint16_t *)wr[r] + i;
            GEMM_PREFETCH(a, ws, 2);
            c1[r] = _mm512_dpbf16_ps(c1[r], (__m512bh)_mm512_loadu_si512(a), xa);
            c2[r] = _mm512_dpbf16_ps(c2[r], (__m512bh)_mm512_loadu_si512(a + 32), xb);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < rw; r++) {
        double sum = (double)hsum16(c1[r]);
        sum += (double)hsum16(c2[r]);
        for (int64_t k = i; k < n; k++)
            sum += (double)(quant_bf16_to_f32(((const uint16_t *)wr[r])[k]) * quant_bf16_to_f32(((const uint16_t *)x)[k]));
        s[(size_t)r * ss] = (float)sum;
    }
}

BF16INL void bf16_tile(int64_t n, const char *const wr[4], size_t ws, const char *x, size_t xs, const int RX,
                       float *s, size_t ss, int rw) {
    __m512 acc[4][4];
#pragma GCC unroll 4
    for (int r = 0; r < 4; r++)
#pragma GCC unroll 4
        for (int j = 0; j < 4; j++) acc[r][j] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 32) {
        __m512bh wv[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) {
            wv[r] = (__m512bh)_mm512_loadu_si512((const uint16_t *)wr[r] + i);
            if ((i & 32) == 0) GEMM_PREFETCH((const uint16_t *)wr[r] + i, ws, 1);
        }
#pragma GCC unroll 4
        for (int j = 0; j < RX; j++) {
            const __m512bh xv = (__m512bh)_mm512_loadu_si512((const uint16_t *)XROW(x, xs, j) + i);
#pragma GCC unroll 4
            for (int r = 0; r < 4; r++) acc[r][j] = _mm512_dpbf16_ps(acc[r][j], wv[r], xv);
        }
    }
#pragma GCC unroll 4
    for (int r = 0; r < rw; r++)
#pragma GCC unroll 4
        for (int j = 0; j < RX; j++) s[(size_t)r * ss + j] = hsum16(acc[r][j]);
}

static BF16ATTR void gemm_bf16_avx512(int64_t n, const void *w, size_t ws, int nw, const void *x, size_t xs, int nx,
                                      float *s, size_t ss) {
    /* One token: 4 rows interleaved with prefetch 16 rows ahead (on 4 KiB-paged mapped weights,
     * 9.7-10.3 GB/s against 7.7-8.4 row by row on the LM head); odd rows: that kernel's order. */
    if (n % 32) {
        for (int i = 0; i < nw; i++) bf16_exact_avx512(n, WROW(w, ws, i), x, xs, nx, s + (size_t)i * ss);
        return;
    }
    for (int i = 0; i < nw; i += 4) {
        const int rw = nw - i < 4 ? nw - i : 4;
        const char *wr[4];
#pragma GCC unroll 4
        for (int r = 0; r < 4; r++) wr[r] = WROW(w, ws, i + (r < rw ? r : rw - 1));
        float *si = s + (size_t)i * ss;
        if (nx == 1) {
            bf16_one_rows(n, wr, ws, x, si, ss, rw);
            continue;
        }
        int j = 0;
        for (; j + 4 <= nx; j += 4) bf16_tile(n, wr, ws, XROW(x, xs, j), xs, 4, si + j, ss, rw);
        switch (nx - j) {
        case 3: bf16_tile(n, wr, ws, XROW(x, xs, j), xs, 3, si + j, ss, rw); break;
        case 2: bf16_tile(n, wr, ws, XROW(x, xs, j), xs, 2, si + j, ss, rw); break;
        case 1: bf16_tile(n, wr, ws, XROW(x, xs, j), xs, 1, si + j, ss, rw); break;
        default: break;
        }
    }
}

static cpu_gemm_fn KNAME(gemm_table_get)(uint32_t type) {
    switch (type) {
    case QT_Q4_K: return KNAME(gemm_q4_K);
    case QT_Q5_K: return KNAME(gemm_q5_K);
    case QT_Q4_0: return KNAME(gemm_q4_0);
    case QT_F16: return gemm_f16_sel_avx512;
    case QT_Q6_K: return KNAME(gemm_q6_K);
    case QT_Q8_0: return KNAME(gemm_q8_0);
    case QT_IQ4_XS: return KNAME(gemm_iq4_xs);
    case QT_BF16: return __builtin_cpu_supports("avx512bf16") ? gemm_bf16_avx512 : NULL;
    default: return NULL;
    }
}
