/* cpu_repack_avx512.c — the AVX-512 VNNI layouts of cpu_repack.h and their
 * kernels. Built with the AVX-512 flags; cpu_repack.c calls this table only
 * when cpu_dot_isa() chose AVX-512 (which implies VNNI), so even its
 * portable code never runs on a CPU without it. */
#include "backend/cpu/cpu_repack_isa.h"

#include <string.h>

#include "backend/cpu/cpu_dot.h"
#include "quant/quant.h"

#define Q40_PAIR_BYTES 288 /* f16 d[16] + qs[4][64]: 16 blocks of 18 bytes */
#define Q80_PAIR_BYTES 544 /* f16 d[16] + qs[8][64]: 16 blocks of 34 bytes */
#define REPACK_ACT_BYTES 640 /* per block pair: 8 x 64 activation groups, init sums, scales */
#define Q4K_GROUP_BYTES 2368 /* d, dmin, sc, m, qs of 16 rows' super-blocks (16 x 144 = 2304 mapped) */

static size_t pair_bytes(uint32_t type) { return type == QT_Q8_0 ? Q80_PAIR_BYTES : Q40_PAIR_BYTES; }

/* The types repacked on AVX-512 VNNI: those whose repacked kernels won end to end (Q4_0: qwen3-0.6b
 * decode 29.9 against 22.5 tok/s, 1 thread, on the 2-core AVX-512 VNNI VM; Q8_0 and Q4_K: see
 * bench/RESULTS.md's CPU section). */
static int rows_avx512(uint32_t type) { return type == QT_Q4_0 || type == QT_Q8_0 ? 8 : type == QT_Q4_K ? 16 : 0; }

static size_t bytes_avx512(uint32_t type, int64_t n_in, int64_t n_out) {
    const int R = rows_avx512(type);
    if (type == QT_Q4_K) return n_in % 256 ? 0 : (size_t)(n_out / R) * (size_t)(n_in / 256) * Q4K_GROUP_BYTES;
    if (n_in % 32) return 0;
    return (size_t)(n_out / R) * (size_t)((n_in / 32 + 1) / 2) * pair_bytes(type);
}

static size_t act_bytes_avx512(uint32_t type, int64_t n_in) {
    if (type == QT_Q4_K) return ((size_t)(n_in / 256) * sizeof(blk_q8_K) + 63) & ~(size_t)63; /* tokens 64 B aligned */
    return rows_avx512(type) ? (size_t)((n_in / 32 + 1) / 2) * REPACK_ACT_BYTES : 0;
}

/* q4_Kx16: the 6-bit scales and mins unpacked, each chunk's quants 4 bytes a row per lane. */
static void q4k_repack(int64_t n_in, int64_t n_out, const void *w, size_t ws, uint8_t *o) {
    for (int64_t g = 0; g < n_out / 16; g++) {
        for (int64_t b = 0; b < n_in / 256; b++, o += Q4K_GROUP_BYTES) {
            for (int r = 0; r < 16; r++) {
                const blk_q4_K *src = (const blk_q4_K *)(const void *)((const char *)w + (size_t)(g * 16 + r) * ws) + b;
                memcpy(o + 2 * r, &src->d, 2);
                memcpy(o + 32 + 2 * r, &src->dmin, 2);
                for (int sb = 0; sb < 8; sb++)
                    quant_k4_scale_min(sb, src->scales, o + 64 + 16 * sb + r, o + 192 + 16 * sb + r);
                for (int c = 0; c < 4; c++)
                    for (int k = 0; k < 8; k++) memcpy(o + 320 + 512 * c + 64 * k + 4 * r, src->qs + 32 * c + 4 * k, 4);
            }
        }
    }
}

static void weights_avx512(uint32_t type, int64_t n_in, int64_t n_out, const void *w, size_t ws, void *dst) {
    if (type == QT_Q4_K) {
        q4k_repack(n_in, n_out, w, ws, dst);
        return;
    }
    if (!rows_avx512(type)) return;
    const int64_t nb = n_in / 32, np = (nb + 1) / 2;
    const size_t pb = pair_bytes(type), bb = quant_get_traits(type)->block_bytes;
    uint8_t *o = dst;
    for (int64_t g = 0; g < n_out / 8; g++) {
        for (int64_t p = 0; p < np; p++, o += pb) {
            memset(o, 0, pb);
            for (int lane = 0; lane < 16; lane++) {
                const int64_t b = 2 * p + lane / 8, row = g * 8 + lane % 8;
                if (b >= nb) continue; /* the zero pad block: scale 0 */
                const uint8_t *src = (const uint8_t *)w + (size_t)row * ws + (size_t)b * bb;
                memcpy(o + 2 * lane, src, 2); /* d: the first field of both block types */
                if (type == QT_Q4_0) {
                    for (int k = 0; k < 4; k++) memcpy(o + 32 + 64 * k + 4 * lane, src + 2 + 4 * k, 4);
                } else { /* Q8_0: the int8 quants stored as q + 128, unsigned for vpdpbusd */
                    for (int k = 0; k < 8; k++)
                        for (int i = 0; i < 4; i++) o[32 + 64 * k + 4 * lane + i] = (uint8_t)(src[2 + 4 * k + i] ^ 0x80);
                }
            }
        }
    }
}

static void act_avx512(uint32_t type, int64_t n_in, const void *xq, void *xa) {
    if (type == QT_Q4_K) { /* the Q8_K row as it is: its 4-byte groups are broadcast from memory */
        memcpy(xa, xq, (size_t)(n_in / 256) * sizeof(blk_q8_K));
        return;
    }
    if (!rows_avx512(type)) return;
    const blk_q8_0 *x = xq;
    const int64_t nb = n_in / 32, np = (nb + 1) / 2;
    /* the weights' offset: sum (q - off) y = sum q y - off sum y, with q the stored unsigned quant */
    const int32_t off = type == QT_Q8_0 ? 128 : 8;
    uint8_t *o = xa;
    for (int64_t p = 0; p < np; p++, o += REPACK_ACT_BYTES) {
        memset(o, 0, REPACK_ACT_BYTES);
        for (int h = 0; h < 2 && 2 * p + h < nb; h++) {
            const blk_q8_0 *b = &x[2 * p + h];
            int32_t sum = 0;
            for (int i = 0; i < 32; i++) sum += b->qs[i];
            const int32_t init = -off * sum;
            const float d = quant_f16_to_f32(b->d);
            for (int lane = 8 * h; lane < 8 * h + 8; lane++) {
                for (int k = 0; k < 8; k++) memcpy(o + 64 * k + 4 * lane, b->qs + 4 * k, 4);
                memcpy(o + 512 + 4 * lane, &init, 4);
                memcpy(o + 576 + 4 * lane, &d, 4);
            }
        }
    }
}

#if defined(__x86_64__) && defined(__AVX512F__)
#include <immintrin.h>

#define KATTR __attribute__((target("avx512vnni")))
/* Bytes ahead that the weight stream is prefetched: the groups are one
 * sequential stream, so this only runs the hardware prefetcher's start.
 * Q8_0 (544-byte pairs) further ahead: on the 151936x1024 LM head, one
 * thread, best of 5 in thread CPU time on the loaded VM, 4096 bytes gave
 * 14.3-14.7 GB/s against 13.4-13.5 at 1024 (dev/kernels/bench_repack.c).
 * Q4_0 (288-byte pairs) into L2 (T1) 8 KiB ahead: same probe, 2026-12-06,
 * 16.1-17.0 GB/s against 12.6-13.2 for T0 at 1 KiB (T0 at 8 KiB 14.6-16.7);
 * Q8_0 with T1 at 16 KiB read 17.0-17.1 against 16.7: left at T0. */
#ifndef REPACK_PF_BYTES
#define REPACK_PF_BYTES 8192
#endif
#ifndef REPACK_PF_BYTES_Q8
#define REPACK_PF_BYTES_Q8 4096
#endif
/* Q4_K (2368-byte super-block groups, 37 lines each) into L2 (T1), 16 KiB ahead: on the LM-head
 * shape, one thread, loaded VM, alternating with the plain kernel, T0 at 4 KiB read 12.1-12.8
 * GB/s (the plain kernel 12.1-12.9; no prefetch 11.6-12.5), T1 at 8-32 KiB 14-16, at 16 KiB
 * 1.22-1.38x the plain kernel in the same run: 37 T0 prefetches an iteration seem to hold L1's
 * fill buffers that the loads need (dev/kernels/bench_repack.c q4_k). */
#ifndef REPACK_PF_BYTES_Q4K
#define REPACK_PF_BYTES_Q4K 16384
#endif
#ifndef REPACK_PF_HINT_Q4K
#define REPACK_PF_HINT_Q4K _MM_HINT_T1
#endif

/* One group of 8 rows against RX (1..4) tokens: per block pair, the
 * weights are loaded (Q8: Q8_0's offset quants; else Q4_0's nibbles,
 * unpacked) once and meet each token's 8 activation vectors. */
static inline __attribute__((always_inline)) KATTR void group8(int64_t np, const uint8_t *w, const uint8_t *xa,
                                                               size_t xs, const int RX, float *s, size_t ss,
                                                               const int Q8) {
    const __m512i m4 = _mm512_set1_epi8(15);
    const size_t pb = Q8 ? Q80_PAIR_BYTES : Q40_PAIR_BYTES;
    __m512 acc[4];
#pragma GCC unroll 4
    for (int j = 0; j < RX; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t p = 0; p < np; p++, w += pb) {
        for (int l = 0; l < (Q8 ? 9 : 5); l++) {
            if (Q8) _mm_prefetch((const char *)w + REPACK_PF_BYTES_Q8 + 64 * l, _MM_HINT_T0);
            else _mm_prefetch((const char *)w + REPACK_PF_BYTES + 64 * l, _MM_HINT_T1);
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)w));
        __m512i lo[4], hi[4];
#pragma GCC unroll 4
        for (int k = 0; k < 4; k++) {
            if (Q8) {
                lo[k] = _mm512_loadu_si512(w + 32 + 64 * k);
                hi[k] = _mm512_loadu_si512(w + 32 + 64 * (k + 4));
            } else {
                const __m512i q = _mm512_loadu_si512(w + 32 + 64 * k);
                lo[k] = _mm512_and_si512(q, m4);
                hi[k] = _mm512_and_si512(_mm512_srli_epi16(q, 4), m4);
            }
        }
#pragma GCC unroll 4
        for (int j = 0; j < RX; j++) {
            const uint8_t *a = xa + (size_t)j * xs + (size_t)p * REPACK_ACT_BYTES;
            __m512i s0 = _mm512_load_si512(a + 512), s1 = _mm512_setzero_si512();
#pragma GCC unroll 4
            for (int k = 0; k < 4; k++) {
                s0 = _mm512_dpbusd_epi32(s0, lo[k], _mm512_load_si512(a + 64 * k));
                s1 = _mm512_dpbusd_epi32(s1, hi[k], _mm512_load_si512(a + 64 * (k + 4)));
            }
            const __m512 d = _mm512_mul_ps(dw, _mm512_load_ps((const float *)(a + 576)));
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(_mm512_add_epi32(s0, s1)), d, acc[j]);
        }
    }
#pragma GCC unroll 4
    for (int j = 0; j < RX; j++) {
        float v[8];
        _mm256_storeu_ps(v, _mm256_add_ps(_mm512_castps512_ps256(acc[j]), _mm512_extractf32x8_ps(acc[j], 1)));
        for (int r = 0; r < 8; r++) s[(size_t)r * ss + j] = v[r];
    }
}

static inline __attribute__((always_inline)) KATTR void gemm8(int64_t n_in, const uint8_t *wr, int64_t g0, int64_t g1,
                                                              const uint8_t *xa, size_t xs, int nx, float *s,
                                                              size_t ss, const int Q8) {
    const int64_t np = (n_in / 32 + 1) / 2;
    const size_t pb = Q8 ? Q80_PAIR_BYTES : Q40_PAIR_BYTES;
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *w = wr + (size_t)g * (size_t)np * pb;
        float *sg = s + (size_t)(g - g0) * 8 * ss;
        int j = 0;
        for (; j + 4 <= nx; j += 4) group8(np, w, xa + (size_t)j * xs, xs, 4, sg + j, ss, Q8);
        switch (nx - j) {
        case 3: group8(np, w, xa + (size_t)j * xs, xs, 3, sg + j, ss, Q8); break;
        case 2: group8(np, w, xa + (size_t)j * xs, xs, 2, sg + j, ss, Q8); break;
        case 1: group8(np, w, xa + (size_t)j * xs, xs, 1, sg + j, ss, Q8); break;
        default: break;
        }
    }
}

static KATTR void q40_gemm(int64_t n_in, const uint8_t *wr, int64_t g0, int64_t g1, const uint8_t *xa, size_t xs,
                           int nx, float *s, size_t ss) {
    gemm8(n_in, wr, g0, g1, xa, xs, nx, s, ss, 0);
}

static KATTR void q80_gemm(int64_t n_in, const uint8_t *wr, int64_t g0, int64_t g1, const uint8_t *xa, size_t xs,
                           int nx, float *s, size_t ss) {
    gemm8(n_in, wr, g0, g1, xa, xs, nx, s, ss, 1);
}

/* One group of 16 rows (a row per lane) against RX (1..2) Q8_K tokens, per super-block:
 * Σ_sb sc[sb] Σ q y (vpdpbusd, each 4-byte group of y broadcast to the 16 rows) and
 * Σ_sb m[sb] (bsum[2sb] + bsum[2sb+1]) (vpdpwssd on (m, m) pairs), both exact in int32, then
 * d*dx and dmin*dx. The high nibbles are taken as q & 0xF0 (16 x the nibble: no shift a vector)
 * and their sums divided by 16 once per chunk, exactly. */
static inline __attribute__((always_inline)) KATTR void q4k_group(int64_t nb, const uint8_t *w, const uint8_t *xa,
                                                                  size_t xs, const int RX, float *s, size_t ss) {
    const __m512i m4 = _mm512_set1_epi8(15), m4h = _mm512_set1_epi8((char)0xF0);
    __m512 acc[2];
#pragma GCC unroll 2
    for (int j = 0; j < RX; j++) acc[j] = _mm512_setzero_ps();
    for (int64_t b = 0; b < nb; b++, w += Q4K_GROUP_BYTES) {
#pragma GCC unroll 37
        for (int l = 0; l < (REPACK_PF_BYTES_Q4K ? Q4K_GROUP_BYTES / 64 : 0); l++)
            _mm_prefetch((const char *)w + REPACK_PF_BYTES_Q4K + 64 * l, REPACK_PF_HINT_Q4K);
        const blk_q8_K *y[2];
        __m512i isum[2], msum[2];
#pragma GCC unroll 2
        for (int j = 0; j < RX; j++) {
            y[j] = (const blk_q8_K *)(const void *)(xa + (size_t)j * xs) + b;
            isum[j] = msum[j] = _mm512_setzero_si512();
        }
#pragma GCC unroll 8
        for (int sb = 0; sb < 8; sb++) {
            const __m512i mv = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(w + 192 + 16 * sb)));
            const __m512i mm = _mm512_or_si512(mv, _mm512_slli_epi32(mv, 16));
#pragma GCC unroll 2
            for (int j = 0; j < RX; j++) {
                int32_t bs;
                memcpy(&bs, y[j]->bsums + 2 * sb, 4);
                msum[j] = _mm512_dpwssd_epi32(msum[j], mm, _mm512_set1_epi32(bs));
            }
        }
#pragma GCC unroll 4
        for (int c = 0; c < 4; c++) {
            const uint8_t *q = w + 320 + 512 * c;
            __m512i lo[8], hi[8];
#pragma GCC unroll 8
            for (int k = 0; k < 8; k++) {
                const __m512i v = _mm512_load_si512(q + 64 * k);
                lo[k] = _mm512_and_si512(v, m4);
                hi[k] = _mm512_and_si512(v, m4h);
            }
            const __m512i sc0 = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(w + 64 + 32 * c)));
            const __m512i sc1 = _mm512_cvtepu8_epi32(_mm_load_si128((const __m128i *)(w + 80 + 32 * c)));
#pragma GCC unroll 2
            for (int j = 0; j < RX; j++) {
                const int8_t *yq = y[j]->qs + 64 * c;
                __m512i a0 = _mm512_setzero_si512(), a1 = a0, b0 = a0, b1 = a0;
#pragma GCC unroll 4
                for (int k = 0; k < 8; k += 2) {
                    int32_t y0, y1, y2, y3;
                    memcpy(&y0, yq + 4 * k, 4);
                    memcpy(&y1, yq + 4 * k + 4, 4);
                    memcpy(&y2, yq + 32 + 4 * k, 4);
                    memcpy(&y3, yq + 32 + 4 * k + 4, 4);
                    a0 = _mm512_dpbusd_epi32(a0, lo[k], _mm512_set1_epi32(y0));
                    a1 = _mm512_dpbusd_epi32(a1, lo[k + 1], _mm512_set1_epi32(y1));
                    b0 = _mm512_dpbusd_epi32(b0, hi[k], _mm512_set1_epi32(y2));
                    b1 = _mm512_dpbusd_epi32(b1, hi[k + 1], _mm512_set1_epi32(y3));
                }
                const __m512i hs = _mm512_srai_epi32(_mm512_add_epi32(b0, b1), 4);
                isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(_mm512_add_epi32(a0, a1), sc0));
                isum[j] = _mm512_add_epi32(isum[j], _mm512_mullo_epi32(hs, sc1));
            }
        }
        const __m512 dw = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)w));
        const __m512 dm = _mm512_cvtph_ps(_mm256_load_si256((const __m256i *)(w + 32)));
#pragma GCC unroll 2
        for (int j = 0; j < RX; j++) {
            const __m512 dx = _mm512_set1_ps(y[j]->d);
            acc[j] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(isum[j]), _mm512_mul_ps(dw, dx), acc[j]);
            acc[j] = _mm512_fnmadd_ps(_mm512_cvtepi32_ps(msum[j]), _mm512_mul_ps(dm, dx), acc[j]);
        }
    }
#pragma GCC unroll 2
    for (int j = 0; j < RX; j++) {
        float v[16];
        _mm512_storeu_ps(v, acc[j]);
        for (int r = 0; r < 16; r++) s[(size_t)r * ss + j] = v[r];
    }
}

static KATTR void q4k_gemm(int64_t n_in, const uint8_t *wr, int64_t g0, int64_t g1, const uint8_t *xa, size_t xs,
                           int nx, float *s, size_t ss) {
    const int64_t nb = n_in / 256;
    for (int64_t g = g0; g < g1; g++) {
        const uint8_t *w = wr + (size_t)g * (size_t)nb * Q4K_GROUP_BYTES;
        float *sg = s + (size_t)(g - g0) * 16 * ss;
        int j = 0;
        for (; j + 2 <= nx; j += 2) q4k_group(nb, w, xa + (size_t)j * xs, xs, 2, sg + j, ss);
        if (j < nx) q4k_group(nb, w, xa + (size_t)j * xs, xs, 1, sg + j, ss);
    }
}

static void gemm_avx512(uint32_t type, int64_t n_in, const void *wr, int64_t g0, int64_t g1, const void *xa,
                        size_t xs, int nx, float *s, size_t ss) {
    if (type == QT_Q4_0) q40_gemm(n_in, wr, g0, g1, xa, xs, nx, s, ss);
    else if (type == QT_Q8_0) q80_gemm(n_in, wr, g0, g1, xa, xs, nx, s, ss);
    else if (type == QT_Q4_K) q4k_gemm(n_in, wr, g0, g1, xa, xs, nx, s, ss);
}
#else
static void gemm_avx512(uint32_t type, int64_t n_in, const void *wr, int64_t g0, int64_t g1, const void *xa,
                        size_t xs, int nx, float *s, size_t ss) {}
#endif

const cpu_repack_ops cpu_repack_avx512 = {rows_avx512, bytes_avx512, act_bytes_avx512,
                                          weights_avx512, act_avx512, gemm_avx512};
