/* cpu_repack_avx2.c — the AVX2 layouts of cpu_repack.h (Q4_0, Q4_K,
 * Q6_K, IQ4_XS) and their kernels. Built with the AVX2 flags; cpu_repack.c calls this table only when
 * cpu_dot_isa() chose AVX2 (AVX-512 cores take cpu_repack_avx512.c's).
 *
 * AVX2 has no vpdpbusd: vpmaddubsw multiplies the unsigned nibbles by the
 * int8 activations into int16 pairs (at most 2 * 15 * 128 = 3840 each), the
 * eight pairs of a block's row add in int16 without overflow (30720), and
 * one vpmaddwd takes them to int32: per block and 8 rows about half the
 * instructions of the plain kernel's sign trick, which runs each row alone.
 * A group's weights are unpacked per pass of 1-4 tokens; IQ4_XS's codebook
 * decode alone is dear enough that its prompts (4+ tokens) decode a
 * super-block once into an L1 scratch for up to 32 tokens (iq4xs_chunk).
 *
 * The sums are exact in int32 per (super-)block and row, then scaled in
 * float: another float order than ggml's per-lane one, which the plain
 * kernels keep. Q6_K alone keeps ggml's order (its 8 int32 lanes, each
 * scaled and summed apart, then ggml's horizontal sum), bitwise the plain
 * kernel's: a first Q6_K layout in the per-block order flipped near-tied
 * routings of a tiny MoE in test_conformance (docs/experiments.md). */
#include "backend/cpu/cpu_repack_isa.h"
#define CPU_PGEMM_UNPACKERS
#include "backend/cpu/cpu_pgemm_isa.h" /* unpack_q6_K */

#include <string.h>

#include "quant/quant.h"

#define Q40X8_BYTES 144 /* f16 d[8] + qs[4][32]: 8 blocks of 18 bytes */
#define ACT_BLOCK_BYTES 48 /* i8 qs[32], i32 -8 * sum(qs), f32 d, pad */
#define Q4KX8_BYTES 1184 /* f16 d[8], dmin[8], u8 sc[8][8], m[8][8], qs[32][32]: 1152 mapped */
#define Q4KX8_SC 32
#define Q4KX8_M 96
#define Q4KX8_QS 160
#define IQ4XSX8_BYTES 1104 /* f16 d[8], i8 sc[8][8] (ls - 32), qs[32][32]: 1088 mapped */
#define IQ4XSX8_SC 16
#define IQ4XSX8_QS 80
#define Q6KX8_BYTES 1680 /* f16 d[8], i8 sc[8][8][2], q[8][2][3][32]: 8 blocks of 210 bytes */
#define Q6KX8_SC 16
#define Q6KX8_Q 144

static int rows_avx2(uint32_t type) {
    return type == QT_Q4_0 || type == QT_Q4_K || type == QT_Q6_K || type == QT_IQ4_XS ? 8 : 0;
}

static size_t kgroup_bytes(uint32_t type) {
    return type == QT_Q4_K ? Q4KX8_BYTES : type == QT_Q6_K ? Q6KX8_BYTES : IQ4XSX8_BYTES;
}

static size_t bytes_avx2(uint32_t type, int64_t n_in, int64_t n_out) {
    if (type == QT_Q4_0) return n_in % 32 ? 0 : (size_t)(n_out / 8) * (size_t)(n_in / 32) * Q40X8_BYTES;
    return n_in % 256 ? 0 : (size_t)(n_out / 8) * (size_t)(n_in / 256) * kgroup_bytes(type);
}

static size_t act_bytes_avx2(uint32_t type, int64_t n_in) {
    if (type != QT_Q4_0) return ((size_t)(n_in / 256) * sizeof(blk_q8_K) + 63) & ~(size_t)63;
    return ((size_t)(n_in / 32) * ACT_BLOCK_BYTES + 63) & ~(size_t)63; /* tokens 64 B aligned */
}

/* Each layout below: per group of 8 rows and (super-)block, the rows' f16 scales d[8] first, then
 * the unpacked sub-block scales where the type has them, then the quants a row per 32-bit lane:
 * quant vector k lane r = bytes 4k..4k+3 of row r's quant array. These write row r of one
 * group-block o from its mapped block src. */
static void quants4(uint8_t *o, int r, const uint8_t *q, int nvec) {
    for (int k = 0; k < nvec; k++) memcpy(o + 32 * k + 4 * r, q + 4 * k, 4);
}

/* q4_0x8: qs[4][32], a vector's low nibbles elements 4k..4k+3, its high ones 16+4k.. */
static void q40_row(uint8_t *o, int r, const void *src) {
    const blk_q4_0 *b = src;
    memcpy(o + 2 * r, &b->d, 2);
    quants4(o + 16, r, b->qs, 4);
}

/* q4_Kx8: dmin[8], the 6-bit sub-block scales and mins unpacked (sc[sb][r], m[sb][r]), qs[32][32]
 * (chunk k / 8: low nibbles sub-block 2 (k / 8), high ones the next). */
static void q4k_row(uint8_t *o, int r, const void *src) {
    const blk_q4_K *b = src;
    memcpy(o + 2 * r, &b->d, 2);
    memcpy(o + 16 + 2 * r, &b->dmin, 2);
    for (int sb = 0; sb < 8; sb++) quant_k4_scale_min(sb, b->scales, o + Q4KX8_SC + 8 * sb + r, o + Q4KX8_M + 8 * sb + r);
    quants4(o + Q4KX8_QS, r, b->qs, 32);
}

/* iq4_xsx8: the sub-block scales as ls - 32 (sc[sb][r]), qs[32][32] (sub-block k / 4: low nibbles
 * its elements 4 (k % 4).., high ones 16 + 4 (k % 4)..). */
static void iq4xs_row(uint8_t *o, int r, const void *src) {
    const blk_iq4_xs *b = src;
    memcpy(o + 2 * r, &b->d, 2);
    for (int sb = 0; sb < 8; sb++) {
        const int ls = quant_iq4xs_scale(b, sb);
        o[IQ4XSX8_SC + 8 * sb + r] = (uint8_t)(int8_t)(ls - 32);
    }
    quants4(o + IQ4XSX8_QS, r, b->qs, 32);
}

/* q6_Kx8, in ggml's lane order: ggml's AVX2 kernel sums a super-block in 8 int32 lanes, lane j
 * holding elements 4j..4j+3 of each of the 8 chunks of 32 (chunk 4h + c: elements 128h + 32c..,
 * sub-block 8h + 2c + j / 4) and the -32 offset of sub-blocks 2j, 2j+1; each lane is scaled
 * and summed apart. Here one vpmaddubsw step meets one 4-byte group, so a lane is a row and the
 * 16 elements of (j, h) sit in three vectors X, Y, Z (q[j][h]), re-laid so that
 *   v0 = X & 63, v1 = Y & 63, v2 = Z & 63, v3 = X >> 6 | (Y >> 6) << 2 | (Z >> 6) << 4
 * (11 instructions for 4 vectors; Q6_K's own ql/qh take 17), with v0 = chunks 0, 1 elements
 * 4j, 4j+1 (bytes (c0, c0, c1, c1)), v1 their 4j+2, 4j+3, v2 and v3 the same of chunks 2, 3. Two
 * vpmaddubsw pairs of one chunk then add in int16 (v0 + v1: (chunk 0, chunk 1) of 4 elements,
 * at most 2 * 2 * 63 * 128 = 32256) before one vpmaddwd by the chunks' scales, stored as int8
 * pairs sc[jh][h][cp][r] = (sub-block 8h + 4cp + jh, 8h + 4cp + 2 + jh) of row r (jh = j / 4).
 * act_avx2 lays the Q8_K quants out the same way. */
/* The element behind byte p of v_t of (j, h): chunk 2 (t / 2) + p / 2, element 4j + 2 (t % 2) + p % 2. */
static int q6k_elem(int j, int h, int t, int p) {
    return 128 * h + 32 * (2 * (t / 2) + p / 2) + 4 * j + 2 * (t % 2) + p % 2;
}

static void q6k_row(uint8_t *o, int r, const void *src) {
    const blk_q6_K *b = src;
    uint8_t u[256]; /* the unsigned 6-bit quants in element order (a scalar extraction each was most of a load's repacking) */
#if defined(__x86_64__) && defined(__AVX2__)
    unpack_q6_K(b, u);
#else
    for (int e = 0; e < 256; e++)
        u[e] = (uint8_t)(((b->ql[64 * (e / 128) + 32 * (e % 128 / 32 % 2) + e % 32] >> 4 * (e % 128 / 32 / 2)) & 15) |
                         ((b->qh[32 * (e / 128) + e % 32] >> 2 * (e % 128 / 32)) & 3) << 4);
#endif
    memcpy(o + 2 * r, &b->d, 2);
    for (int jh = 0; jh < 2; jh++)
        for (int h = 0; h < 2; h++)
            for (int cp = 0; cp < 2; cp++)
                for (int k = 0; k < 2; k++)
                    o[Q6KX8_SC + 16 * (4 * jh + 2 * h + cp) + 2 * r + k] =
                        (uint8_t)b->scales[8 * h + 4 * cp + 2 * k + jh];
    for (int j = 0; j < 8; j++)
        for (int h = 0; h < 2; h++)
            for (int p = 0; p < 4; p++) {
                uint8_t *q = o + Q6KX8_Q + 96 * (2 * j + h) + 4 * r + p;
                const int v3 = u[q6k_elem(j, h, 3, p)];
                for (int t = 0; t < 3; t++) /* X, Y, Z: v0..v2, and v3's bits 2t, 2t+1 on top */
                    q[32 * t] = (uint8_t)(u[q6k_elem(j, h, t, p)] | (v3 >> 2 * t & 3) << 6);
            }
}

static void weights_avx2(uint32_t type, int64_t n_in, int64_t n_out, const void *w, size_t ws, void *dst) {
    void (*row)(uint8_t *, int, const void *) = type == QT_Q4_0   ? q40_row
                                                : type == QT_Q4_K ? q4k_row
                                                : type == QT_Q6_K ? q6k_row
                                                                  : iq4xs_row;
    const quant_traits *tr = quant_get_traits(type);
    const size_t gb = bytes_avx2(type, tr->block_elems, 8); /* one group-block */
    uint8_t *o = dst;
    for (int64_t g = 0; g < n_out / 8; g++)
        for (int64_t b = 0; b < n_in / tr->block_elems; b++, o += gb)
            for (int r = 0; r < 8; r++) row(o, r, (const char *)w + (size_t)(g * 8 + r) * ws + (size_t)b * tr->block_bytes);
}

/* The Q8_0 row with each block's -8 * sum(qs) (the nibbles' offset: sum (q - 8) y = sum q y - 8 sum y)
 * and its scale as a float beside the quants. */
static void act_avx2(uint32_t type, int64_t n_in, const void *xq, void *xa) {
    if (type == QT_IQ4_XS) { /* the Q8_K row as it is: its 4-byte groups are broadcast */
        memcpy(xa, xq, (size_t)(n_in / 256) * sizeof(blk_q8_K));
        return;
    }
    if (type == QT_Q6_K) { /* the Q8_K row, its quants laid out as q6k_row's: 16 bytes per (j, h) */
        for (int64_t b = 0; b < n_in / 256; b++) {
            const blk_q8_K *x = (const blk_q8_K *)xq + b;
            blk_q8_K *y = (blk_q8_K *)xa + b;
            *y = *x;
            for (int j = 0; j < 8; j++)
                for (int h = 0; h < 2; h++)
                    for (int t = 0; t < 4; t++)
                        for (int p = 0; p < 4; p++) y->qs[32 * j + 16 * h + 4 * t + p] = x->qs[q6k_elem(j, h, t, p)];
        }
        return;
    }
    if (type == QT_Q4_K) { /* the Q8_K row, bsums[0..7] replaced by the sums of the 32-element sub-blocks */
        memcpy(xa, xq, (size_t)(n_in / 256) * sizeof(blk_q8_K));
        for (int64_t b = 0; b < n_in / 256; b++) {
            blk_q8_K *y = (blk_q8_K *)xa + b;
            for (int sb = 0; sb < 8; sb++) y->bsums[sb] = (int16_t)(y->bsums[2 * sb] + y->bsums[2 * sb + 1]);
        }
        return;
    }
    const blk_q8_0 *x = xq;
    uint8_t *o = xa;
    for (int64_t b = 0; b < n_in / 32; b++, o += ACT_BLOCK_BYTES) {
        int32_t sum = 0;
        for (int i = 0; i < 32; i++) sum += x[b].qs[i];
        const int32_t init = -8 * sum;
        const float d = quant_f16_to_f32(x[b].d);
        memcpy(o, x[b].qs, 32);
        memcpy(o + 32, &init, 4);
        memcpy(o + 36, &d, 4);
        memset(o + 40, 0, ACT_BLOCK_BYTES - 40);
    }
}

#if defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

#define KINL static inline __attribute__((always_inline))

/* Bytes ahead that the weight stream is prefetched into L2. */
#ifndef REPACK_PF_BYTES
#define REPACK_PF_BYTES 8192
#endif
#ifndef REPACK_PF_BYTES_K
#define REPACK_PF_BYTES_K 4096
#endif
#ifndef REPACK_PF_BYTES_Q6K
#define REPACK_PF_BYTES_Q6K 16384
#endif

KINL __m256i bcast4(const uint8_t *p) {
    int32_t v;
    memcpy(&v, p, 4);
    return _mm256_set1_epi32(v);
}

/* A group's 8 rows (lanes) of RX tokens into s (row r, token j at s[r * ss + j]). */
KINL void store8(const __m256 *acc, const int RX, float *s, size_t ss) {
    for (int j = 0; j < RX; j++) {
        float v[8];
        _mm256_storeu_ps(v, acc[j]);
        for (int r = 0; r < 8; r++) s[(size_t)r * ss + j] = v[r];
    }
}

/* acc[j] += isum[j] * d * y[j]->d: a super-block's integer sums of the 8 rows (their f16 scales d
 * at the group's start) against RX Q8_K tokens. */
KINL void add_scaled(__m256 *acc, const __m256i *isum, const uint8_t *d, const blk_q8_K *const *y, const int RX) {
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)d));
    for (int j = 0; j < RX; j++)
        acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_mul_ps(dw, _mm256_set1_ps(y[j]->d)), acc[j]);
}

/* The groups [g0, g1) of a layout, RXM tokens a pass (then two, then one). */
#define GROUP_DRIVER(name, group, BLOCK_ELEMS, GROUP_BYTES, RXM)                                           \
    static void name(int64_t n_in, const uint8_t *wr, int64_t g0, int64_t g1, const uint8_t *xa, size_t xs, \
                     int nx, float *s, size_t ss) {                                                       \
        const int64_t nb = n_in / (BLOCK_ELEMS);                                                          \
        for (int64_t g = g0; g < g1; g++) {                                                               \
            const uint8_t *w = wr + (size_t)g * (size_t)nb * (GROUP_BYTES);                               \
            float *sg = s + (size_t)(g - g0) * 8 * ss;                                                    \
            int j = 0;                                                                                    \
            for (; j + (RXM) <= nx; j += (RXM)) group(nb, w, xa + (size_t)j * xs, xs, (RXM), sg + j, ss);  \
            for (; j + 2 <= nx; j += 2) group(nb, w, xa + (size_t)j * xs, xs, 2, sg + j, ss);             \
            if (j < nx) group(nb, w, xa + (size_t)j * xs, xs, 1, sg + j, ss);                             \
        }                                                                                                 \
    }

/* One group of 8 rows (a row per 32-bit lane) against RX (1..2) tokens: per block, the nibbles
 * are unpacked once and meet each token's 4-byte groups, broadcast to the 8 rows. */
KINL void q40_group(int64_t nb, const uint8_t *w, const uint8_t *xa, size_t xs, const int RX, float *s, size_t ss) {
    const __m256i m4 = _mm256_set1_epi8(15), ones = _mm256_set1_epi16(1);
    __m256 acc[4] = {_mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; b++, w += Q40X8_BYTES) {
        _mm_prefetch((const char *)w + REPACK_PF_BYTES, _MM_HINT_T1);
        _mm_prefetch((const char *)w + REPACK_PF_BYTES + 64, _MM_HINT_T1);
        _mm_prefetch((const char *)w + REPACK_PF_BYTES + 128, _MM_HINT_T1);
        __m256i lo[4], hi[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i q = _mm256_loadu_si256((const __m256i *)(w + 16 + 32 * k));
            lo[k] = _mm256_and_si256(q, m4);
            hi[k] = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        }
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w));
#pragma GCC unroll 4
        for (int j = 0; j < RX; j++) {
            const uint8_t *a = xa + (size_t)j * xs + (size_t)b * ACT_BLOCK_BYTES;
            __m256i p0 = _mm256_maddubs_epi16(lo[0], bcast4(a)), p1 = _mm256_maddubs_epi16(hi[0], bcast4(a + 16));
#pragma GCC unroll 3
            for (int k = 1; k < 4; k++) {
                p0 = _mm256_add_epi16(p0, _mm256_maddubs_epi16(lo[k], bcast4(a + 4 * k)));
                p1 = _mm256_add_epi16(p1, _mm256_maddubs_epi16(hi[k], bcast4(a + 16 + 4 * k)));
            }
            const __m256i i32 = _mm256_add_epi32(_mm256_madd_epi16(_mm256_add_epi16(p0, p1), ones), bcast4(a + 32));
            float dx;
            memcpy(&dx, a + 36, 4);
            acc[j] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(i32), _mm256_mul_ps(dw, _mm256_set1_ps(dx)), acc[j]);
        }
    }
    store8(acc, RX, s, ss);
}

/* An int32 lane's low int16 copied into its high half: (sc, sc) pairs for vpmaddwd. */
KINL __m256i pair16(__m256i v) { return _mm256_blend_epi16(v, _mm256_slli_epi32(v, 16), 0xAA); }

KINL __m256i sc32(const uint8_t *p) { return _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)p)); }
KINL __m256i u8x32(const uint8_t *p) { return _mm256_cvtepu8_epi32(_mm_loadl_epi64((const __m128i *)p)); }

/* One group of 8 rows against RX (1..2) Q8_K tokens, per super-block: d sum_sb sc[sb] sum q y
 * - dmin sum_sb m[sb] bsum[sb], each sum exact in int32. A vpmaddubsw pair of a nibble is at
 * most 2 * 15 * 128 = 3840, so a sub-block's eight add in int16 before vpmaddwd by its scale;
 * the mins meet the 32-element bsums (act_avx2) by vpmaddwd on (m[2i], m[2i+1]) pairs. */
KINL void q4k_group(int64_t nb, const uint8_t *w, const uint8_t *xa, size_t xs, const int RX, float *s, size_t ss) {
    const __m256i m4 = _mm256_set1_epi8(15);
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; b++, w += Q4KX8_BYTES) {
        const uint8_t *sc = w + Q4KX8_SC, *mn = w + Q4KX8_M, *qs = w + Q4KX8_QS;
        const __m256 dm = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)(w + 16)));
        const blk_q8_K *y[2];
        __m256i isum[2];
#pragma GCC unroll 2
        for (int j = 0; j < RX; j++) {
            y[j] = (const blk_q8_K *)(const void *)(xa + (size_t)j * xs) + b;
            __m256i msum = _mm256_setzero_si256();
#pragma GCC unroll 4
            for (int i = 0; i < 4; i++) {
                const __m256i pr = _mm256_blend_epi16(u8x32(mn + 16 * i), _mm256_slli_epi32(u8x32(mn + 16 * i + 8), 16), 0xAA);
                int32_t bs;
                memcpy(&bs, y[j]->bsums + 2 * i, 4);
                msum = _mm256_add_epi32(msum, _mm256_madd_epi16(pr, _mm256_set1_epi32(bs)));
            }
            acc[j] = _mm256_fnmadd_ps(_mm256_cvtepi32_ps(msum), _mm256_mul_ps(dm, _mm256_set1_ps(y[j]->d)), acc[j]);
            isum[j] = _mm256_setzero_si256();
        }
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
#pragma GCC unroll 5
            for (int l = 0; l < 5; l++)
                _mm_prefetch((const char *)w + REPACK_PF_BYTES_K + 320 * c + 64 * l, _MM_HINT_T1);
            __m256i plo[2], phi[2];
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * (8 * c + k)));
                const __m256i lo = _mm256_and_si256(v, m4), hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), m4);
#pragma GCC unroll 2
                for (int j = 0; j < RX; j++) {
                    const uint8_t *yq = (const uint8_t *)y[j]->qs + 64 * c + 4 * k;
                    const __m256i a = _mm256_maddubs_epi16(lo, bcast4(yq)), h = _mm256_maddubs_epi16(hi, bcast4(yq + 32));
                    plo[j] = k ? _mm256_add_epi16(plo[j], a) : a;
                    phi[j] = k ? _mm256_add_epi16(phi[j], h) : h;
                }
            }
            const __m256i s0 = pair16(u8x32(sc + 8 * (2 * c))), s1 = pair16(u8x32(sc + 8 * (2 * c + 1)));
#pragma GCC unroll 2
            for (int j = 0; j < RX; j++)
                isum[j] = _mm256_add_epi32(isum[j], _mm256_add_epi32(_mm256_madd_epi16(plo[j], s0), _mm256_madd_epi16(phi[j], s1)));
        }
        add_scaled(acc, isum, w, y, RX);
    }
    store8(acc, RX, s, ss);
}

/* One group of 8 rows against RX (1..2) Q8_K tokens, per super-block: d sum_sb (ls - 32) sum kv y.
 * The codebook values kv (-127..113) are signed: the sign trick (|kv| against y with kv's sign)
 * makes them vpmaddubsw operands, and a pair (at most 2 * 127 * 128) goes straight to vpmaddwd by
 * the sub-block's scale. */
KINL void iq4xs_group(int64_t nb, const uint8_t *w, const uint8_t *xa, size_t xs, const int RX, float *s, size_t ss) {
    const __m256i m4 = _mm256_set1_epi8(15);
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4nl_values));
    __m256 acc[2] = {_mm256_setzero_ps(), _mm256_setzero_ps()};
    for (int64_t b = 0; b < nb; b++, w += IQ4XSX8_BYTES) {
        const uint8_t *qs = w + IQ4XSX8_QS;
        const blk_q8_K *y[2];
        __m256i isum[2];
#pragma GCC unroll 2
        for (int j = 0; j < RX; j++) {
            y[j] = (const blk_q8_K *)(const void *)(xa + (size_t)j * xs) + b;
            isum[j] = _mm256_setzero_si256();
        }
#pragma GCC unroll 8
        for (int sb = 0; sb < 8; sb++) {
#pragma GCC unroll 3
            for (int l = 0; l < 3; l++)
                _mm_prefetch((const char *)w + REPACK_PF_BYTES_K + 138 * sb + 64 * l, _MM_HINT_T1);
            const __m256i sc16 = pair16(sc32(w + IQ4XSX8_SC + 8 * sb));
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                const __m256i v = _mm256_loadu_si256((const __m256i *)(qs + 32 * (4 * sb + k)));
                const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4));
                const __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
                const __m256i ulo = _mm256_abs_epi8(lo), uhi = _mm256_abs_epi8(hi);
#pragma GCC unroll 2
                for (int j = 0; j < RX; j++) {
                    const uint8_t *yq = (const uint8_t *)y[j]->qs + 32 * sb + 4 * k;
                    const __m256i a = _mm256_maddubs_epi16(ulo, _mm256_sign_epi8(bcast4(yq), lo));
                    const __m256i h = _mm256_maddubs_epi16(uhi, _mm256_sign_epi8(bcast4(yq + 16), hi));
                    isum[j] = _mm256_add_epi32(isum[j], _mm256_add_epi32(_mm256_madd_epi16(a, sc16), _mm256_madd_epi16(h, sc16)));
                }
            }
        }
        add_scaled(acc, isum, w, y, RX);
    }
    store8(acc, RX, s, ss);
}

/* IQ4_XS prompts (4+ tokens). iq4xs_group decodes the nibbles (and, shift, two vpshufb, two
 * vpabsb per 64 weights) for every pass of 2 tokens: a third of a token's work. Here a group's
 * super-block is decoded once into an L1 scratch (signed values and their magnitudes, 4 KiB) and
 * met by up to IQ4XS_CHUNK tokens, 4 a pass (the remainder 1..3), their float sums kept in memory
 * between super-blocks. Per token the same integer sums and the same fma per super-block as
 * iq4xs_group, so the results are bitwise iq4xs_group's. */
#define IQ4XS_CHUNK 32

KINL void iq4xs_decode(const uint8_t *w, __m256i *dq) {
    const __m256i m4 = _mm256_set1_epi8(15);
    const __m256i lut = _mm256_broadcastsi128_si256(_mm_loadu_si128((const __m128i *)quant_iq4nl_values));
#pragma GCC unroll 18
    for (int l = 0; l < (IQ4XSX8_BYTES + 63) / 64; l++) _mm_prefetch((const char *)w + REPACK_PF_BYTES_K + 64 * l, _MM_HINT_T1);
#pragma GCC unroll 4
    for (int k = 0; k < 32; k++) {
        const __m256i v = _mm256_loadu_si256((const __m256i *)(w + IQ4XSX8_QS + 32 * k));
        const __m256i lo = _mm256_shuffle_epi8(lut, _mm256_and_si256(v, m4));
        const __m256i hi = _mm256_shuffle_epi8(lut, _mm256_and_si256(_mm256_srli_epi16(v, 4), m4));
        dq[4 * k] = lo, dq[4 * k + 1] = _mm256_abs_epi8(lo), dq[4 * k + 2] = hi, dq[4 * k + 3] = _mm256_abs_epi8(hi);
    }
}

/* RX (1..4) tokens y against a decoded super-block dq of group-block w: acc[8 j..8 j + 7] += the
 * 8 rows' sums of token j, scaled as add_scaled does. The sub-block loop stays rolled: unrolled,
 * the compiler hoists loads and madds ahead of their use and spills them. */
KINL void iq4xs_pass(const __m256i *dq, const uint8_t *w, const blk_q8_K *const *y, const int RX, float *acc) {
    __m256i isum[8];
#pragma GCC unroll 8
    for (int j = 0; j < RX; j++) isum[j] = _mm256_setzero_si256();
#pragma GCC unroll 1
    for (int sb = 0; sb < 8; sb++) {
        const __m256i sc16 = pair16(sc32(w + IQ4XSX8_SC + 8 * sb));
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            const __m256i *d = dq + 4 * (4 * sb + k);
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) { /* low nibbles (elements 4k..), high ones (16 + 4k..) */
                const __m256i q = d[2 * h], u = d[2 * h + 1];
#pragma GCC unroll 8
                for (int j = 0; j < RX; j++) {
                    const __m256i p = _mm256_maddubs_epi16(u, _mm256_sign_epi8(bcast4((const uint8_t *)y[j]->qs + 32 * sb + 16 * h + 4 * k), q));
                    isum[j] = _mm256_add_epi32(isum[j], _mm256_madd_epi16(p, sc16));
                }
            }
        }
    }
    const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w));
#pragma GCC unroll 8
    for (int j = 0; j < RX; j++)
        _mm256_store_ps(acc + 8 * j, _mm256_fmadd_ps(_mm256_cvtepi32_ps(isum[j]), _mm256_mul_ps(dw, _mm256_set1_ps(y[j]->d)),
                                                     _mm256_load_ps(acc + 8 * j)));
}

/* One group of 8 rows against one chunk of nc (1..IQ4XS_CHUNK) tokens into s (as store8). */
static void iq4xs_chunk(int64_t nb, const uint8_t *w, const uint8_t *xa, size_t xs, int nc, float *s, size_t ss) {
    __m256i dq[128];
    __attribute__((aligned(32))) float acc[IQ4XS_CHUNK * 8];
    memset(acc, 0, sizeof(float) * 8 * (size_t)nc);
    for (int64_t b = 0; b < nb; b++, w += IQ4XSX8_BYTES) {
        iq4xs_decode(w, dq);
        const blk_q8_K *y[8];
        int j = 0;
        for (; j + 8 <= nc; j += 8) {
            for (int x = 0; x < 8; x++) y[x] = (const blk_q8_K *)(const void *)(xa + (size_t)(j + x) * xs) + b;
            iq4xs_pass(dq, w, y, 8, acc + 8 * j);
        }
        for (; j + 4 <= nc; j += 4) {
            for (int x = 0; x < 4; x++) y[x] = (const blk_q8_K *)(const void *)(xa + (size_t)(j + x) * xs) + b;
            iq4xs_pass(dq, w, y, 4, acc + 8 * j);
        }
        for (int x = 0; x < nc - j; x++) y[x] = (const blk_q8_K *)(const void *)(xa + (size_t)(j + x) * xs) + b;
        switch (nc - j) {
        case 3: iq4xs_pass(dq, w, y, 3, acc + 8 * j); break;
        case 2: iq4xs_pass(dq, w, y, 2, acc + 8 * j); break;
        case 1: iq4xs_pass(dq, w, y, 1, acc + 8 * j); break;
        default: break;
        }
    }
    for (int j = 0; j < nc; j++)
        for (int r = 0; r < 8; r++) s[(size_t)r * ss + j] = acc[8 * j + r];
}

/* One group of 8 rows against RX (1..2) Q8_K tokens in ggml's float order (q6_Kx8 above): per
 * super-block and lane j, the exact int32 sum of ggml's lane j for the 8 rows,
 * acc[j] = fma(d * y.d, float(sum), acc[j]); at the end ggml's horizontal sum of the 8 lanes,
 * ((acc0 + acc4) + (acc2 + acc6)) + ((acc1 + acc5) + (acc3 + acc7)), a row per float lane. */
KINL void q6k_group(int64_t nb, const uint8_t *w, const uint8_t *xa, size_t xs, const int RX, float *s, size_t ss) {
    const __m256i m63 = _mm256_set1_epi8(63), mC0 = _mm256_set1_epi8((char)0xC0);
    __m256 acc[8][2];
#pragma GCC unroll 8
    for (int j = 0; j < 8; j++)
#pragma GCC unroll 2
        for (int x = 0; x < RX; x++) acc[j][x] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++, w += Q6KX8_BYTES) {
#pragma GCC unroll 27
        for (int l = 0; l < (Q6KX8_BYTES + 63) / 64; l++)
            _mm_prefetch((const char *)w + REPACK_PF_BYTES_Q6K + 64 * l, _MM_HINT_T1);
        const blk_q8_K *y[2];
        __m256 dy[2];
        const __m256 dw = _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)w));
#pragma GCC unroll 2
        for (int x = 0; x < RX; x++) {
            y[x] = (const blk_q8_K *)(const void *)(xa + (size_t)x * xs) + b;
            dy[x] = _mm256_mul_ps(dw, _mm256_set1_ps(y[x]->d)); /* ggml's d: y.d times the row's d, one rounding */
        }
        __m256i sc[8]; /* sc[4jh + 2h + cp]: the int16 scale pairs of chunks (2cp, 2cp + 1) */
#pragma GCC unroll 8
        for (int q = 0; q < 8; q++)
            sc[q] = _mm256_cvtepi8_epi16(_mm_loadu_si128((const __m128i *)(w + Q6KX8_SC + 16 * q)));
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            /* The -32 offset where ggml puts it, 32 (sc[2j] bsum[2j] + sc[2j+1] bsum[2j+1]) in lane j:
             * sub-blocks 2j, 2j+1 are chunk c = j % 4 of h = j / 4 in the two j-halves, so their
             * (sc[2j], sc[2j+1]) pair is word c % 2 of two stored pairs. */
            const int h0 = j / 4, c = j % 4;
            const __m256i lo = sc[2 * h0 + c / 2], hi = sc[4 + 2 * h0 + c / 2];
            const __m256i off = c % 2 ? _mm256_blend_epi16(_mm256_srli_epi32(lo, 16), hi, 0xAA)
                                      : _mm256_blend_epi16(lo, _mm256_slli_epi32(hi, 16), 0xAA);
            __m256i isum[2];
#pragma GCC unroll 2
            for (int x = 0; x < RX; x++) {
                int32_t bs;
                memcpy(&bs, y[x]->bsums + 2 * j, 4);
                const __m256i o32 = _mm256_slli_epi32(_mm256_madd_epi16(off, _mm256_set1_epi32(bs)), 5);
                isum[x] = _mm256_sub_epi32(_mm256_setzero_si256(), o32);
            }
#pragma GCC unroll 2
            for (int h = 0; h < 2; h++) {
                const uint8_t *q = w + Q6KX8_Q + 96 * (2 * j + h);
                const __m256i X = _mm256_loadu_si256((const __m256i *)q), Y = _mm256_loadu_si256((const __m256i *)(q + 32));
                const __m256i Z = _mm256_loadu_si256((const __m256i *)(q + 64));
                const __m256i v0 = _mm256_and_si256(X, m63), v1 = _mm256_and_si256(Y, m63), v2 = _mm256_and_si256(Z, m63);
                const __m256i v3 = _mm256_or_si256(_mm256_or_si256(_mm256_srli_epi16(_mm256_and_si256(X, mC0), 6),
                                                                   _mm256_srli_epi16(_mm256_and_si256(Y, mC0), 4)),
                                                   _mm256_srli_epi16(_mm256_and_si256(Z, mC0), 2));
                const __m256i s01 = sc[4 * (j / 4) + 2 * h], s23 = sc[4 * (j / 4) + 2 * h + 1];
#pragma GCC unroll 2
                for (int x = 0; x < RX; x++) {
                    const uint8_t *a = (const uint8_t *)y[x]->qs + 32 * j + 16 * h;
                    const __m256i p01 = _mm256_add_epi16(_mm256_maddubs_epi16(v0, bcast4(a)),
                                                         _mm256_maddubs_epi16(v1, bcast4(a + 4)));
                    const __m256i p23 = _mm256_add_epi16(_mm256_maddubs_epi16(v2, bcast4(a + 8)),
                                                         _mm256_maddubs_epi16(v3, bcast4(a + 12)));
                    isum[x] = _mm256_add_epi32(isum[x], _mm256_add_epi32(_mm256_madd_epi16(p01, s01), _mm256_madd_epi16(p23, s23)));
                }
            }
#pragma GCC unroll 2
            for (int x = 0; x < RX; x++) acc[j][x] = _mm256_fmadd_ps(dy[x], _mm256_cvtepi32_ps(isum[x]), acc[j][x]);
        }
    }
    __m256 sum[2];
#pragma GCC unroll 2
    for (int x = 0; x < RX; x++)
        sum[x] = _mm256_add_ps(_mm256_add_ps(_mm256_add_ps(acc[0][x], acc[4][x]), _mm256_add_ps(acc[2][x], acc[6][x])),
                               _mm256_add_ps(_mm256_add_ps(acc[1][x], acc[5][x]), _mm256_add_ps(acc[3][x], acc[7][x])));
    store8(sum, RX, s, ss);
}

GROUP_DRIVER(q40_gemm, q40_group, 32, Q40X8_BYTES, 4)
GROUP_DRIVER(q4k_gemm, q4k_group, 256, Q4KX8_BYTES, 2)
GROUP_DRIVER(iq4xs_gemm_short, iq4xs_group, 256, IQ4XSX8_BYTES, 2)

/* IQ4_XS: decode and 2-3 tokens in iq4xs_group, 4+ in chunks of decoded super-blocks. */
static void iq4xs_gemm(int64_t n_in, const uint8_t *wr, int64_t g0, int64_t g1, const uint8_t *xa, size_t xs, int nx,
                       float *s, size_t ss) {
    if (nx < 4) {
        iq4xs_gemm_short(n_in, wr, g0, g1, xa, xs, nx, s, ss);
        return;
    }
    const int64_t nb = n_in / 256;
    for (int64_t g = g0; g < g1; g++)
        for (int c0 = 0; c0 < nx; c0 += IQ4XS_CHUNK)
            iq4xs_chunk(nb, wr + (size_t)g * (size_t)nb * IQ4XSX8_BYTES, xa + (size_t)c0 * xs, xs,
                        nx - c0 < IQ4XS_CHUNK ? nx - c0 : IQ4XS_CHUNK, s + (size_t)(g - g0) * 8 * ss + c0, ss);
}
GROUP_DRIVER(q6k_gemm, q6k_group, 256, Q6KX8_BYTES, 2)

static void gemm_avx2(uint32_t type, int64_t n_in, const void *wr, int64_t g0, int64_t g1, const void *xa,
                      size_t xs, int nx, float *s, size_t ss) {
    switch (type) {
    case QT_Q4_0: q40_gemm(n_in, wr, g0, g1, xa, xs, nx, s, ss); break;
    case QT_Q4_K: q4k_gemm(n_in, wr, g0, g1, xa, xs, nx, s, ss); break;
    case QT_IQ4_XS: iq4xs_gemm(n_in, wr, g0, g1, xa, xs, nx, s, ss); break;
    case QT_Q6_K: q6k_gemm(n_in, wr, g0, g1, xa, xs, nx, s, ss); break;
    default: break;
    }
}
#else
static void gemm_avx2(uint32_t type, int64_t n_in, const void *wr, int64_t g0, int64_t g1, const void *xa,
                      size_t xs, int nx, float *s, size_t ss) {}
#endif

const cpu_repack_ops cpu_repack_avx2 = {rows_avx2, bytes_avx2, act_bytes_avx2, weights_avx2, act_avx2, gemm_avx2};
