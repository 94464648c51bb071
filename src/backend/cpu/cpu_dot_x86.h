/* cpu_dot_x86.h — private: the x86 SIMD dot kernels, written once with
 * 256-bit intrinsics and compiled twice: by cpu_dot_avx2.c (AVX2+FMA+F16C,
 * maddubs products) and by cpu_dot_avx512.c (AVX-512VL encodings, 32
 * registers, VNNI dpbusd products). The includer defines:
 *   KNAME(x)  the per-ISA function name
 *   KATTR     extra function attributes (target options)
 *   KVNNI     1 to use vpdpbusd
 * Each kernel processes one weight row against up to 4 activation rows per
 * pass, so a weight block is loaded and unpacked once for 4 tokens. Integer
 * sums follow ggml (int8 x int8 -> int32 per block, then one float scale). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_dot.h"
#include "quant/quant.h"

#define KINL static inline __attribute__((always_inline)) KATTR
#define XROW(x, xs, r) ((const char *)(x) + (size_t)(r) * (xs))

KINL float h2f(uint16_t h) { return _cvtsh_ss(h); }

KINL float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* (v0 + v2) + (v1 + v3), as ggml's SSE horizontal sums. */
KINL float hsum4(__m128 v) {
    v = _mm_add_ps(v, _mm_movehl_ps(v, v));
    return _mm_cvtss_f32(_mm_add_ss(v, _mm_movehdup_ps(v)));
}

KINL int hsum_i32_4(__m128i v) {
    v = _mm_add_epi32(v, _mm_unpackhi_epi64(v, v));
    return _mm_cvtsi128_si32(_mm_add_epi32(v, _mm_shuffle_epi32(v, 1)));
}

/* acc += sums of 4 adjacent u8*s8 products (no saturation for our ranges). */
KINL __m256i dot_us(__m256i acc, __m256i u, __m256i s) {
#if KVNNI
    return _mm256_dpbusd_epi32(acc, u, s);
#else
    return _mm256_add_epi32(acc, _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), _mm256_set1_epi16(1)));
#endif
}

/* int16 sums of u8*s8 pairs, times an int16 scale -> int32 (K-quant sub-blocks). */
KINL __m256i dot_us_scaled(__m256i u, __m256i s, __m256i scale16) {
    return _mm256_madd_epi16(_mm256_maddubs_epi16(u, s), scale16);
}

/* 16 packed nibbles -> 32 bytes: low nibbles (elems 0..15) then high (16..31). */
KINL __m256i unpack_nibbles(const uint8_t *qs) {
    const __m128i q = _mm_loadu_si128((const __m128i *)qs), m4 = _mm_set1_epi8(15);
    return _mm256_set_m128i(_mm_and_si128(_mm_srli_epi16(q, 4), m4), _mm_and_si128(q, m4));
}

/* Bit i of a 32-bit mask -> byte i = 0xFF. */
KINL __m256i bits_to_bytes(const uint8_t *p) {
    uint32_t b;
    memcpy(&b, p, 4);
    const __m256i shuf = _mm256_setr_epi8(0, 0, 0, 0, 0, 0, 0, 0, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 2, 2, 2, 2, 2, 2,
                                          3, 3, 3, 3, 3, 3, 3, 3);
    const __m256i bm = _mm256_set1_epi64x((long long)0x8040201008040201ULL);
    __m256i v = _mm256_and_si256(_mm256_shuffle_epi8(_mm256_set1_epi32((int)b), shuf), bm);
    return _mm256_cmpeq_epi8(v, bm);
}

/* The weight row's stream ROW_PF_BYTES ahead into L1, in the AVX2 build's single-row kernels that
 * read mapped rows at decode (BF16, Q8_0, IQ4_XS; AVX2 repacks Q4_0, Q4_K and Q6_K): on the 2-core
 * AVX2 EPYC, qwen3-0.6b BF16 tg32 at 1 thread gave 12.3-12.5 tok/s without, 14.7-14.9 at 1 KiB,
 * 15.5-15.6 at 2 KiB, 11.3-12.2 at 4 KiB (T1 at 1 KiB 15.3-15.6). The AVX-512 build's kernels
 * for these types are cpu_gemm_x86.h's, with their own prefetch. */
#ifndef ROW_PF_BYTES
#define ROW_PF_BYTES 2048
#endif
#if KVNNI
#define ROW_PREFETCH(p) ((void)0)
#else
#define ROW_PREFETCH(p) _mm_prefetch((const char *)(p) + ROW_PF_BYTES, _MM_HINT_T0)
#endif

/* Calls body kernel K with R = 4 while possible, then the remainder. */
#define ROWS_DRIVER(fn)                                                                         \
    static KATTR void KNAME(fn)(int64_t n, const void *w, const void *x, size_t xs, int nx, float *s) { \
        int j = 0;                                                                              \
        for (; j + 4 <= nx; j += 4) fn##_rows(n, w, XROW(x, xs, j), xs, 4, s + j);             \
        switch (nx - j) {                                                                       \
        case 3: fn##_rows(n, w, XROW(x, xs, j), xs, 3, s + j); break;                          \
        case 2: fn##_rows(n, w, XROW(x, xs, j), xs, 2, s + j); break;                          \
        case 1: fn##_rows(n, w, XROW(x, xs, j), xs, 1, s + j); break;                          \
        default: break;                                                                         \
        }                                                                                       \
    }

/* ---- F16 / BF16 / F32 (256-bit; the AVX-512 build overrides F16 and F32
 * below, and BF16 where the CPU has AVX512_BF16) ---- */
#if !KVNNI

KINL void f16_rows(int64_t n, const void *w, const char *x, size_t xs, int R, float *s) {
    const uint16_t *a = w;
    __m256 acc0[4], acc1[4];
    for (int r = 0; r < 4; r++) acc0[r] = acc1[r] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 w0 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i)));
        const __m256 w1 = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(a + i + 8)));
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const uint16_t *b = (const uint16_t *)XROW(x, xs, r) + i;
            acc0[r] = _mm256_fmadd_ps(w0, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)b)), acc0[r]);
            acc1[r] = _mm256_fmadd_ps(w1, _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(b + 8))), acc1[r]);
        }
    }
    for (int r = 0; r < R; r++) {
        const uint16_t *b = (const uint16_t *)XROW(x, xs, r);
        float t = hsum8(_mm256_add_ps(acc0[r], acc1[r]));
        for (int64_t k = i; k < n; k++) t += h2f(a[k]) * h2f(b[k]);
        s[r] = t;
    }
}
ROWS_DRIVER(f16)
#endif

/* bf16 pairs: the even element is the low half of each 32-bit lane (shift it
 * up), the odd one the high half (mask it): no conversion instruction. */
KINL void bf16_rows(int64_t n, const void *w, const char *x, size_t xs, int R, float *s) {
    const uint16_t *a = w;
    const __m256i hi = _mm256_set1_epi32((int)0xFFFF0000u);
    __m256 acc0[4], acc1[4];
    for (int r = 0; r < 4; r++) acc0[r] = acc1[r] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        if (i % 32 == 0) ROW_PREFETCH(a + i);
        const __m256i wv = _mm256_loadu_si256((const __m256i *)(a + i));
        const __m256 we = _mm256_castsi256_ps(_mm256_slli_epi32(wv, 16));
        const __m256 wo = _mm256_castsi256_ps(_mm256_and_si256(wv, hi));
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const __m256i xv = _mm256_loadu_si256((const __m256i *)((const uint16_t *)XROW(x, xs, r) + i));
            acc0[r] = _mm256_fmadd_ps(we, _mm256_castsi256_ps(_mm256_slli_epi32(xv, 16)), acc0[r]);
            acc1[r] = _mm256_fmadd_ps(wo, _mm256_castsi256_ps(_mm256_and_si256(xv, hi)), acc1[r]);
        }
    }
    for (int r = 0; r < R; r++) {
        const uint16_t *b = (const uint16_t *)XROW(x, xs, r);
        float t = hsum8(_mm256_add_ps(acc0[r], acc1[r]));
        for (int64_t k = i; k < n; k++) t += quant_bf16_to_f32(a[k]) * quant_bf16_to_f32(b[k]);
        s[r] = t;
    }
}
ROWS_DRIVER(bf16)
#if !KVNNI

KINL void f32_rows(int64_t n, const void *w, const char *x, size_t xs, int R, float *s) {
    const float *a = w;
    __m256 acc0[4], acc1[4];
    for (int r = 0; r < 4; r++) acc0[r] = acc1[r] = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 16 <= n; i += 16) {
        const __m256 w0 = _mm256_loadu_ps(a + i), w1 = _mm256_loadu_ps(a + i + 8);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const float *b = (const float *)XROW(x, xs, r) + i;
            acc0[r] = _mm256_fmadd_ps(w0, _mm256_loadu_ps(b), acc0[r]);
            acc1[r] = _mm256_fmadd_ps(w1, _mm256_loadu_ps(b + 8), acc1[r]);
        }
    }
    for (int r = 0; r < R; r++) {
        const float *b = (const float *)XROW(x, xs, r);
        float t = hsum8(_mm256_add_ps(acc0[r], acc1[r]));
        for (int64_t k = i; k < n; k++) t += a[k] * b[k];
        s[r] = t;
    }
}
ROWS_DRIVER(f32)
#endif

/* ---- 32-element blocks against Q8_0: signed weights w (int8), ggml's
 * abs/sign trick turns s8*s8 into u8*s8. ---- */

#define Q8_0_SIGNED_BODY(WT, LOADW, WSCALE)                                                  \
    const WT *a = w;                                                                          \
    __m256 acc[4];                                                                            \
    for (int r = 0; r < 4; r++) acc[r] = _mm256_setzero_ps();                                 \
    for (int64_t i = 0; i < n / 32; i++) {                                                    \
        if (i % 2 == 0) ROW_PREFETCH(&a[i]);                                                  \
        const __m256i wv = LOADW;                                                             \
        const __m256i uw = _mm256_sign_epi8(wv, wv);                                          \
        const float dw = WSCALE;                                                              \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                                 \
            const blk_q8_0 *b = (const blk_q8_0 *)XROW(x, xs, r) + i;                         \
            const __m256i yv = _mm256_loadu_si256((const __m256i *)b->qs);                    \
            const __m256i p = dot_us(_mm256_setzero_si256(), uw, _mm256_sign_epi8(yv, wv));   \
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * h2f(b->d)), _mm256_cvtepi32_ps(p), acc[r]); \
        }                                                                                     \
    }                                                                                         \
    for (int r = 0; r < R; r++) s[r] = hsum8(acc[r]);

KINL void q8_0_rows(int64_t n, const void *w, const char *x, size_t xs, int R, float *s) {
    Q8_0_SIGNED_BODY(blk_q8_0, _mm256_loadu_si256((const __m256i *)a[i].qs), h2f(a[i].d))
}
ROWS_DRIVER(q8_0)

KINL void q4_0_rows(int64_t n, const void *w, const char *x, size_t xs, int R, float *s) {
    Q8_0_SIGNED_BODY(blk_q4_0, _mm256_sub_epi8(unpack_nibbles(a[i].qs), _mm256_set1_epi8(8)), h2f(a[i].d))
}
ROWS_DRIVER(q4_0)

KINL __m256i iq4nl_lut(void) {
    return _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4nl_values));
}

KINL int hsum_i32_8(__m256i v) {
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(v), _mm256_extracti128_si256(v, 1));
    t = _mm_add_epi32(t, _mm_unpackhi_epi64(t, t));
    return _mm_cvtsi128_si32(_mm_add_epi32(t, _mm_shuffle_epi32(t, 1)));
}

/* ggml's vec_dot order for IQ4_NL and MXFP4 (one row): even blocks in one
 * 8-lane accumulator, odd blocks in another, their sum reduced, and an odd
 * last block added as a scalar fused multiply-add. */
#define Q8_0_PAIRED_BODY(WT, LOADW, WSCALE)                                                   \
    const WT *a = w;                                                                          \
    const int64_t nb = n / 32, nb2 = nb & ~(int64_t)1;                                        \
    __m256 acc[4][2];                                                                         \
    for (int r = 0; r < 4; r++) acc[r][0] = acc[r][1] = _mm256_setzero_ps();                  \
    for (int64_t i = 0; i < nb; i++) {                                                        \
        const __m256i wv = LOADW;                                                             \
        const __m256i uw = _mm256_sign_epi8(wv, wv);                                          \
        const float dw = WSCALE;                                                              \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                                 \
            const blk_q8_0 *b = (const blk_q8_0 *)XROW(x, xs, r) + i;                         \
            const __m256i yv = _mm256_loadu_si256((const __m256i *)b->qs);                    \
            const __m256i p = dot_us(_mm256_setzero_si256(), uw, _mm256_sign_epi8(yv, wv));   \
            if (i < nb2)                                                                      \
                acc[r][i & 1] = _mm256_fmadd_ps(_mm256_set1_ps(h2f(b->d) * dw), _mm256_cvtepi32_ps(p), acc[r][i & 1]); \
            else                                                                              \
                s[r] = fmaf(h2f(b->d) * dw, (float)hsum_i32_8(p), hsum8(_mm256_add_ps(acc[r][0], acc[r][1]))); \
        }                                                                                     \
    }                                                                                         \
    if (nb == nb2)                                                                            \
        for (int r = 0; r < R; r++) s[r] = hsum8(_mm256_add_ps(acc[r][0], acc[r][1]));

/* IQ4_NL: a decode step (one row) in ggml's vec_dot order; several rows
 * (a prompt batch) in tinyBLAS's order, one accumulator, as llama.cpp
 * routes batches of two or more columns through llamafile_sgemm. */
KINL void iq4_nl_rows(int64_t n, const void *w, const char *x, size_t xs, int R, float *s) {
    const __m256i lut = iq4nl_lut();
    Q8_0_SIGNED_BODY(blk_iq4_nl, _mm256_shuffle_epi8(lut, unpack_nibbles(a[i].qs)), h2f(a[i].d))
}
KINL void iq4_nl_one(int64_t n, const void *w, const char *x, size_t xs, float *s) {
    const __m256i lut = iq4nl_lut();
    const int R = 1;
    Q8_0_PAIRED_BODY(blk_iq4_nl, _mm256_shuffle_epi8(lut, unpack_nibbles(a[i].qs)), h2f(a[i].d))
}
static KATTR void KNAME(iq4_nl)(int64_t n, const void *w, const void *x, size_t xs, int nx, float *s) {
    if (nx == 1) {
        iq4_nl_one(n, w, x, xs, s);
        return;
    }
    for (int j = 0; j < nx; j += 4) iq4_nl_rows(n, w, XROW(x, xs, j), xs, nx - j < 4 ? nx - j : 4, s + j);
}

/* MXFP4 has no tinyBLAS path: always the vec_dot order. */
KINL void mxfp4_rows(int64_t n, const void *w, const char *x, size_t xs, int R, float *s) {
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_mxfp4_values));
    Q8_0_PAIRED_BODY(blk_mxfp4, _mm256_shuffle_epi8(lut, unpack_nibbles(a[i].qs)),
                     quant_e8m0_to_f32_half(a[i].e))
}
ROWS_DRIVER(mxfp4)

/* Q5_0: nibble | (bit ? 0 : 0xF0) is q - 16 as int8. */
KINL void q5_0_rows(int64_t n, const void *w, const char *x, size_t xs, int R, float *s) {
    Q8_0_SIGNED_BODY(blk_q5_0,
                     _mm256_or_si256(unpack_nibbles(a[i].qs),
                                     _mm256_andnot_si256(bits_to_bytes(a[i].qh), _mm256_set1_epi8((char)0xF0))),
                     h2f(a[i].d))
}
ROWS_DRIVER(q5_0)

/* ---- Q4_1 / Q5_1 against Q8_1: unsigned weights, min term via s = d*Σq ---- */

#define Q8_1_UNSIGNED_BODY(WT, LOADW)                                                         \
    const WT *a = w;                                                                          \
    __m256 acc[4];                                                                            \
    float summ[4] = {0, 0, 0, 0};                                                             \
    for (int r = 0; r < 4; r++) acc[r] = _mm256_setzero_ps();                                 \
    for (int64_t i = 0; i < n / 32; i++) {                                                    \
        if (i % 2 == 0) ROW_PREFETCH(&a[i]);                                                  \
        const __m256i wv = LOADW;                                                             \
        const float dw = h2f(a[i].d), mw = h2f(a[i].m);                                       \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                                 \
            const blk_q8_1 *b = (const blk_q8_1 *)XROW(x, xs, r) + i;                         \
            const __m256i p = dot_us(_mm256_setzero_si256(), wv, _mm256_loadu_si256((const __m256i *)b->qs)); \
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * h2f(b->d)), _mm256_cvtepi32_ps(p), acc[r]); \
            summ[r] += mw * h2f(b->s);                                                        \
        }                                                                                     \
    }                                                                                         \
    for (int r = 0; r < R; r++) s[r] = hsum8(acc[r]) + summ[r];

KINL void q4_1_rows(int64_t n, const void *w, const char *x, size_t xs, int R, float *s) {
    Q8_1_UNSIGNED_BODY(blk_q4_1, unpack_nibbles(a[i].qs))
}
ROWS_DRIVER(q4_1)

KINL void q5_1_rows(int64_t n, const void *w, const char *x, size_t xs, int R, float *s) {
    Q8_1_UNSIGNED_BODY(blk_q5_1, _mm256_or_si256(unpack_nibbles(a[i].qs),
                                                 _mm256_and_si256(bits_to_bytes(a[i].qh), _mm256_set1_epi8(0x10))))
}
ROWS_DRIVER(q5_1)

/* ---- K-quants against Q8_K ---- */

/* Q4_K/Q5_K 12-byte scale block -> 8 scales (out[0..7]) and 8 mins (out[8..15]). */
KINL void k4_unpack_scales(const uint8_t *p, uint8_t out[16]) {
    uint32_t u[3], o[4];
    memcpy(u, p, 12);
    const uint32_t lo6 = 0x3f3f3f3f, lo4 = 0x0f0f0f0f, hi2 = 0x03030303;
    o[0] = u[0] & lo6;                                        /* scales 0..3 */
    o[1] = (u[2] & lo4) | (((u[0] >> 6) & hi2) << 4);         /* scales 4..7 */
    o[2] = u[1] & lo6;                                        /* mins 0..3 */
    o[3] = ((u[2] >> 4) & lo4) | (((u[1] >> 6) & hi2) << 4);  /* mins 4..7 */
    memcpy(out, o, 16);
}

/* Q4_K (HAS_QH 0) and Q5_K (1): per 64-element chunk c, low nibbles form
 * sub-block 2c and high nibbles 2c+1. The minimum terms follow ggml's AVX2
 * vec_dot (also what its AVX-512 builds run): Q4_K keeps 4 lanes of
 * -d*dmin*Σmin*bsum (FMA), reduced and added after the 8-lane sum; Q5_K
 * reduces the integer minimum sum per block and accumulates it as a scalar. */
#define QK45_BODY(WT, HAS_QH)                                                                  \
    const WT *a = w;                                                                           \
    const __m256i m4 = _mm256_set1_epi8(15);                                                   \
    __m256 acc[4];                                                                             \
    __m128 accm[4];                                                                            \
    float summs[4] = {0, 0, 0, 0};                                                             \
    for (int r = 0; r < 4; r++) acc[r] = _mm256_setzero_ps(), accm[r] = _mm_setzero_ps();      \
    for (int64_t i = 0; i < n / 256; i++) {                                                    \
        uint8_t sm[16];                                                                        \
        k4_unpack_scales(a[i].scales, sm);                                                     \
        const __m128i mins = _mm_cvtepu8_epi16(_mm_loadl_epi64((const __m128i *)(sm + 8)));   \
        const float dw = h2f(a[i].d), dminw = h2f(a[i].dmin);                                  \
        __m256i isum[4];                                                                       \
        for (int r = 0; r < 4; r++) isum[r] = _mm256_setzero_si256();                          \
        __m256i hb = HAS_QH ? _mm256_loadu_si256((const __m256i *)((const blk_q5_K *)(const void *)&a[i])->qh) \
                            : _mm256_setzero_si256();                                          \
        _Pragma("GCC unroll 4") for (int c = 0; c < 4; c++) {                                  \
            const __m256i q = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * c));         \
            __m256i wl = _mm256_and_si256(q, m4), wh = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4); \
            if (HAS_QH) {                                                                      \
                const __m256i one = _mm256_set1_epi8(1);                                       \
                wl = _mm256_or_si256(wl, _mm256_slli_epi16(_mm256_and_si256(hb, one), 4));     \
                wh = _mm256_or_si256(wh, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(hb, 1), one), 4)); \
                hb = _mm256_srli_epi16(hb, 2);                                                 \
            }                                                                                  \
            const __m256i scl = _mm256_set1_epi16(sm[2 * c]), sch = _mm256_set1_epi16(sm[2 * c + 1]); \
            _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                              \
                const int8_t *y = ((const blk_q8_K *)XROW(x, xs, r))[i].qs + 64 * c;           \
                isum[r] = _mm256_add_epi32(isum[r], dot_us_scaled(wl, _mm256_loadu_si256((const __m256i *)y), scl)); \
                isum[r] = _mm256_add_epi32(isum[r], dot_us_scaled(wh, _mm256_loadu_si256((const __m256i *)(y + 32)), sch)); \
            }                                                                                  \
        }                                                                                      \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++) {                                  \
            const blk_q8_K *b = (const blk_q8_K *)XROW(x, xs, r) + i;                          \
            const __m256i bs = _mm256_loadu_si256((const __m256i *)b->bsums);                  \
            const __m128i pair = _mm_hadd_epi16(_mm256_castsi256_si128(bs), _mm256_extracti128_si256(bs, 1)); \
            const __m128i pm = _mm_madd_epi16(mins, pair);                                     \
            const float negdmin = -b->d * dminw;                                               \
            if (HAS_QH)                                                                        \
                summs[r] = fmaf(negdmin, (float)hsum_i32_4(pm), summs[r]);                     \
            else                                                                               \
                accm[r] = _mm_fmadd_ps(_mm_set1_ps(negdmin), _mm_cvtepi32_ps(pm), accm[r]);    \
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(b->d * dw), _mm256_cvtepi32_ps(isum[r]), acc[r]); \
        }                                                                                      \
    }                                                                                          \
    for (int r = 0; r < R; r++)                                                                \
        s[r] = hsum8(acc[r]) + (HAS_QH ? summs[r] : hsum4(accm[r]));

KINL void q4_K_rows(int64_t n, const void *w, const char *x, size_t xs, int R, float *s) { QK45_BODY(blk_q4_K, 0) }
ROWS_DRIVER(q4_K)

KINL void q5_K_rows(int64_t n, const void *w, const char *x, size_t xs, int R, float *s) { QK45_BODY(blk_q5_K, 1) }
ROWS_DRIVER(q5_K)

/* Q6_K: unsigned 6-bit q (0..63); the -32 offset is folded in as
 * 32*Σ scale_k*bsum_k. */
KINL void q6_K_rows(int64_t n, const void *w, const char *x, size_t xs, int R, float *s) {
    const blk_q6_K *a = w;
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    __m256 acc[4];
    for (int r = 0; r < 4; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        const __m256i sc16 = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)a[i].scales));
        __m256i isum[4];
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const blk_q8_K *b = (const blk_q8_K *)XROW(x, xs, r) + i;
            const __m256i off = _mm256_madd_epi16(sc16, _mm256_loadu_si256((const __m256i *)b->bsums));
            isum[r] = _mm256_sub_epi32(_mm256_setzero_si256(), _mm256_slli_epi32(off, 5));
        }
        for (int h = 0; h < 2; h++) {
            const __m256i ql0 = _mm256_loadu_si256((const __m256i *)(a[i].ql + 64 * h));
            const __m256i ql1 = _mm256_loadu_si256((const __m256i *)(a[i].ql + 64 * h + 32));
            const __m256i qh = _mm256_loadu_si256((const __m256i *)(a[i].qh + 32 * h));
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const __m256i lo = (k & 1) ? ql1 : ql0;
                const __m256i nib = k < 2 ? _mm256_and_si256(lo, m4) : _mm256_and_si256(_mm256_srli_epi16(lo, 4), m4);
                const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * k), m3);
                const __m256i q = _mm256_or_si256(nib, _mm256_slli_epi16(hb, 4));
                const int8_t *scp = a[i].scales + 8 * h + 2 * k;
                const __m256i sc = _mm256_set_m128i(_mm_set1_epi16(scp[1]), _mm_set1_epi16(scp[0]));
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    const int8_t *y = ((const blk_q8_K *)XROW(x, xs, r))[i].qs + 128 * h + 32 * k;
                    isum[r] = _mm256_add_epi32(isum[r], dot_us_scaled(q, _mm256_loadu_si256((const __m256i *)y), sc));
                }
            }
        }
        const float dw = h2f(a[i].d);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const blk_q8_K *b = (const blk_q8_K *)XROW(x, xs, r) + i;
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * b->d), _mm256_cvtepi32_ps(isum[r]), acc[r]);
        }
    }
    for (int r = 0; r < R; r++) s[r] = hsum8(acc[r]);
}
ROWS_DRIVER(q6_K)

KINL void iq4_xs_rows(int64_t n, const void *w, const char *x, size_t xs, int R, float *s) {
    const blk_iq4_xs *a = w;
    const __m256i lut = iq4nl_lut();
    __m256 acc[4];
    for (int r = 0; r < 4; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        __m256i isum[4];
        for (int r = 0; r < 4; r++) isum[r] = _mm256_setzero_si256();
        ROW_PREFETCH(&a[i]);
        ROW_PREFETCH((const char *)&a[i] + 64);
        ROW_PREFETCH((const char *)&a[i] + 128);
#pragma GCC unroll 8
        for (int ib = 0; ib < 8; ib++) {
            const int ls = quant_iq4xs_scale(&a[i], ib);
            const __m256i wv = _mm256_shuffle_epi8(lut, unpack_nibbles(a[i].qs + 16 * ib));
            const __m256i uw = _mm256_sign_epi8(wv, wv), sc = _mm256_set1_epi16((short)(ls - 32));
#pragma GCC unroll 4
            for (int r = 0; r < R; r++) {
                const int8_t *y = ((const blk_q8_K *)XROW(x, xs, r))[i].qs + 32 * ib;
                const __m256i yv = _mm256_loadu_si256((const __m256i *)y);
                isum[r] = _mm256_add_epi32(isum[r], dot_us_scaled(uw, _mm256_sign_epi8(yv, wv), sc));
            }
        }
        const float dw = h2f(a[i].d);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const blk_q8_K *b = (const blk_q8_K *)XROW(x, xs, r) + i;
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(dw * b->d), _mm256_cvtepi32_ps(isum[r]), acc[r]);
        }
    }
    for (int r = 0; r < R; r++) s[r] = hsum8(acc[r]);
}
ROWS_DRIVER(iq4_xs)

/* Q2_K and Q3_K, in ggml's AVX2 vec_dot order (its AVX-512 builds run the
 * same code): 32 weight bytes of a 128-element chunk hold 4 sub-vectors (2
 * bits each); the int32 lane l of the block sum covers bytes 4l..4l+3 of
 * every sub-vector (16-element sub-blocks, one scale per 128-bit half), so
 * the per-lane integer sums, converted once per block, are ggml's. */
KINL __m256i scale_pair(int lo, int hi) { return _mm256_set_m128i(_mm_set1_epi16((short)hi), _mm_set1_epi16((short)lo)); }

KINL void q2_K_rows(int64_t n, const void *w, const char *x, size_t xs, int R, float *s) {
    const blk_q2_K *a = w;
    const __m256i m3 = _mm256_set1_epi8(3);
    const __m128i m4 = _mm_set1_epi8(15);
    __m256 acc[4];
    for (int r = 0; r < 4; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        const __m128i ms = _mm_loadu_si128((const __m128i *)a[i].scales);
        const __m256i mins = _mm256_cvtepi8_epi16(_mm_and_si128(_mm_srli_epi16(ms, 4), m4));
        const uint8_t *sc = a[i].scales; /* low nibble: scale of sub-block k */
        __m256i isum[4];
        for (int r = 0; r < 4; r++) isum[r] = _mm256_setzero_si256();
        for (int j = 0; j < 2; j++) {
            const __m256i q2 = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * j));
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const __m256i q = _mm256_and_si256(_mm256_srli_epi16(q2, 2 * k), m3);
                const __m256i scv = scale_pair(sc[8 * j + 2 * k] & 15, sc[8 * j + 2 * k + 1] & 15);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    const int8_t *y = ((const blk_q8_K *)XROW(x, xs, r))[i].qs + 128 * j + 32 * k;
                    isum[r] = _mm256_add_epi32(isum[r], dot_us_scaled(q, _mm256_loadu_si256((const __m256i *)y), scv));
                }
            }
        }
        const float dw = h2f(a[i].d), dminw = h2f(a[i].dmin);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const blk_q8_K *b = (const blk_q8_K *)XROW(x, xs, r) + i;
            const __m256i pm = _mm256_madd_epi16(mins, _mm256_loadu_si256((const __m256i *)b->bsums));
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(-b->d * dminw), _mm256_cvtepi32_ps(pm), acc[r]);
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(b->d * dw), _mm256_cvtepi32_ps(isum[r]), acc[r]);
        }
    }
    for (int r = 0; r < R; r++) s[r] = hsum8(acc[r]);
}
ROWS_DRIVER(q2_K)

/* Q3_K: q = low2 - 4*(high bit clear); the two parts multiply separately
 * (u8 x s8), their int16 difference is scaled by the signed 6-bit scale. */
KINL void q3_K_rows(int64_t n, const void *w, const char *x, size_t xs, int R, float *s) {
    const blk_q3_K *a = w;
    const __m256i m3 = _mm256_set1_epi8(3), one = _mm256_set1_epi8(1);
    __m256 acc[4];
    for (int r = 0; r < 4; r++) acc[r] = _mm256_setzero_ps();
    for (int64_t i = 0; i < n / 256; i++) {
        const uint8_t *p = a[i].scales;
        int sc[16];
        for (int k = 0; k < 16; k++)
            sc[k] = ((k < 8 ? p[k] & 15 : p[k - 8] >> 4) | (((p[8 + (k & 3)] >> (2 * (k >> 2))) & 3) << 4)) - 32;
        const __m256i hm = _mm256_loadu_si256((const __m256i *)a[i].hmask);
        __m256i isum[4];
        for (int r = 0; r < 4; r++) isum[r] = _mm256_setzero_si256();
        for (int j = 0; j < 2; j++) {
            const __m256i q3 = _mm256_loadu_si256((const __m256i *)(a[i].qs + 32 * j));
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const __m256i lo = _mm256_and_si256(_mm256_srli_epi16(q3, 2 * k), m3);
                const __m256i h4 = _mm256_slli_epi16(_mm256_andnot_si256(_mm256_srli_epi16(hm, 4 * j + k), one), 2);
                const __m256i scv = scale_pair(sc[8 * j + 2 * k], sc[8 * j + 2 * k + 1]);
#pragma GCC unroll 4
                for (int r = 0; r < R; r++) {
                    const int8_t *y = ((const blk_q8_K *)XROW(x, xs, r))[i].qs + 128 * j + 32 * k;
                    const __m256i yv = _mm256_loadu_si256((const __m256i *)y);
                    const __m256i p16 = _mm256_sub_epi16(_mm256_maddubs_epi16(lo, yv), _mm256_maddubs_epi16(h4, yv));
                    isum[r] = _mm256_add_epi32(isum[r], _mm256_madd_epi16(p16, scv));
                }
            }
        }
        const float dw = h2f(a[i].d);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++) {
            const blk_q8_K *b = (const blk_q8_K *)XROW(x, xs, r) + i;
            acc[r] = _mm256_fmadd_ps(_mm256_set1_ps(b->d * dw), _mm256_cvtepi32_ps(isum[r]), acc[r]);
        }
    }
    for (int r = 0; r < R; r++) s[r] = hsum8(acc[r]);
}
ROWS_DRIVER(q3_K)

#if KVNNI
/* ---- AVX-512 F32 / F16 / BF16 in llama.cpp's order (zen4 build) ----
 * One row (decode): ggml_vec_dot_f32/_f16: 4 accumulators of 16 lanes over
 * 64 elements, folded (0+2, 1+3, then 0+1) and reduced 8-4-2-1; F16 sums
 * the reduction and the tail in double. ggml_vec_dot_bf16: vdpbf16ps into 2
 * accumulators over 64 elements, each reduced, summed in double.
 * Several rows (a prompt batch): tinyBLAS (llamafile_sgemm), one 16-lane
 * accumulator per output (vdpbf16ps over 32 bf16 for BF16), reduced; it
 * applies when n is a multiple of 16 (32 for BF16), else vec_dot's order. */
KINL float hsum16(__m512 v) { return _mm512_reduce_add_ps(v); }

KINL __m512 ld_f32(const void *p, int64_t i) { return _mm512_loadu_ps((const float *)p + i); }
KINL __m512 ld_f16(const void *p, int64_t i) {
    return _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)p + i)));
}

#define F_ONE(LD, SUMT)                                                                        \
    __m512 c[4] = {_mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps(), _mm512_setzero_ps()}; \
    const int64_t np = n & ~(int64_t)63;                                                       \
    for (int64_t i = 0; i < np; i += 64)                                                       \
        for (int k = 0; k < 4; k++) c[k] = _mm512_fmadd_ps(LD(w, i + 16 * k), LD(x, i + 16 * k), c[k]); \
    c[0] = _mm512_add_ps(c[0], c[2]);                                                          \
    c[1] = _mm512_add_ps(c[1], c[3]);                                                          \
    SUMT sum = hsum16(_mm512_add_ps(c[0], c[1]));

KINL float f32_one(int64_t n, const void *w, const void *x) {
    F_ONE(ld_f32, float)
    /* the tail as the zen4 binary computes it: whole groups of 8 products
     * rounded then added in order, the last n % 8 fused */
    const float *a = w, *b = x;
    const int64_t n8 = np + ((n - np) & ~(int64_t)7);
    for (int64_t i = np; i < n8; i++) sum += a[i] * b[i];
    for (int64_t i = n8; i < n; i++) sum = fmaf(a[i], b[i], sum);
    return sum;
}

KINL float f16_one(int64_t n, const void *w, const void *x) {
    F_ONE(ld_f16, double)
    for (int64_t i = np; i < n; i++) sum += (double)(h2f(((const uint16_t *)w)[i]) * h2f(((const uint16_t *)x)[i]));
    return (float)sum;
}

/* tinyBLAS: rows r < R of x against w, one accumulator each (n % 16 == 0). */
#define F_TINY(LD)                                                                             \
    __m512 acc[4];                                                                             \
    for (int r = 0; r < 4; r++) acc[r] = _mm512_setzero_ps();                                  \
    for (int64_t i = 0; i < n; i += 16) {                                                      \
        const __m512 wv = LD(w, i);                                                            \
        _Pragma("GCC unroll 4") for (int r = 0; r < R; r++)                                    \
            acc[r] = _mm512_fmadd_ps(wv, LD(XROW(x, xs, r), i), acc[r]);                       \
    }                                                                                          \
    for (int r = 0; r < R; r++) s[r] = hsum16(acc[r]);

KINL void f32_tiny(int64_t n, const void *w, const char *x, size_t xs, int R, float *s) { F_TINY(ld_f32) }
KINL void f16_tiny(int64_t n, const void *w, const char *x, size_t xs, int R, float *s) { F_TINY(ld_f16) }

#define F_DRIVER(fn, KN)                                                                       \
    static KATTR void KNAME(fn)(int64_t n, const void *w, const void *x, size_t xs, int nx, float *s) { \
        if (nx == 1 || n % KN) {                                                               \
            for (int j = 0; j < nx; j++) s[j] = fn##_one(n, w, XROW(x, xs, j));                \
            return;                                                                            \
        }                                                                                      \
        for (int j = 0; j < nx; j += 4) fn##_tiny(n, w, XROW(x, xs, j), xs, nx - j < 4 ? nx - j : 4, s + j); \
    }
F_DRIVER(f32, 16)
F_DRIVER(f16, 16)

#define BF16ATTR __attribute__((target("avx512vnni,avx512bf16")))
#define BF16INL static inline __attribute__((always_inline)) BF16ATTR

BF16INL __m512 dp_bf16(__m512 acc, const void *a, const void *b, int64_t i) {
    return _mm512_dpbf16_ps(acc, (__m512bh)_mm512_loadu_si512((const uint16_t *)a + i),
                            (__m512bh)_mm512_loadu_si512((const uint16_t *)b + i));
}

BF16INL float bf16_one(int64_t n, const void *w, const void *x) {
    __m512 c1 = _mm512_setzero_ps(), c2 = _mm512_setzero_ps();
    int64_t i = 0;
    for (; i + 64 <= n; i += 64) {
        c1 = dp_bf16(c1, w, x, i);
        c2 = dp_bf16(c2, w, x, i + 32);
    }
    double sum = (double)hsum16(c1);
    sum += (double)hsum16(c2);
    for (; i < n; i++)
        sum += (double)(quant_bf16_to_f32(((const uint16_t *)w)[i]) * quant_bf16_to_f32(((const uint16_t *)x)[i]));
    return (float)sum;
}

BF16INL void bf16_tiny(int64_t n, const void *w, const char *x, size_t xs, int R, float *s) {
    __m512 acc[4];
    for (int r = 0; r < 4; r++) acc[r] = _mm512_setzero_ps();
    for (int64_t i = 0; i < n; i += 32) {
        const __m512bh wv = (__m512bh)_mm512_loadu_si512((const uint16_t *)w + i);
#pragma GCC unroll 4
        for (int r = 0; r < R; r++)
            acc[r] = _mm512_dpbf16_ps(acc[r], wv, (__m512bh)_mm512_loadu_si512((const uint16_t *)XROW(x, xs, r) + i));
    }
    for (int r = 0; r < R; r++) s[r] = hsum16(acc[r]);
}

static BF16ATTR void bf16_exact_avx512(int64_t n, const void *w, const void *x, size_t xs, int nx, float *s) {
    if (nx == 1 || n % 32) {
        for (int j = 0; j < nx; j++) s[j] = bf16_one(n, w, XROW(x, xs, j));
        return;
    }
    for (int j = 0; j < nx; j += 4) bf16_tiny(n, w, XROW(x, xs, j), xs, nx - j < 4 ? nx - j : 4, s + j);
}
#endif

/* The kernel table for this ISA. */
static cpu_vec_dot_fn KNAME(table_get)(uint32_t type) {
    switch (type) {
    case QT_F32: return KNAME(f32);
    case QT_F16: return KNAME(f16);
#if KVNNI
    case QT_BF16: return __builtin_cpu_supports("avx512bf16") ? bf16_exact_avx512 : KNAME(bf16);
#else
    case QT_BF16: return KNAME(bf16);
#endif
    case QT_Q8_0: return KNAME(q8_0);
    case QT_Q4_0: return KNAME(q4_0);
    case QT_Q4_1: return KNAME(q4_1);
    case QT_Q5_0: return KNAME(q5_0);
    case QT_Q5_1: return KNAME(q5_1);
    case QT_IQ4_NL: return KNAME(iq4_nl);
    case QT_MXFP4: return KNAME(mxfp4);
    case QT_Q2_K: return KNAME(q2_K);
    case QT_Q3_K: return KNAME(q3_K);
    case QT_Q4_K: return KNAME(q4_K);
    case QT_Q5_K: return KNAME(q5_K);
    case QT_Q6_K: return KNAME(q6_K);
    case QT_IQ4_XS: return KNAME(iq4_xs);
    default: return NULL;
    }
}
