/* cuda_iq.cuh — device code of the codebook, ternary and FP4 weight types (IQ1_S, IQ1_M, IQ2_XXS,
 * IQ2_XS, IQ2_S, IQ3_XXS, IQ3_S, TQ1_0, TQ2_0, NVFP4, Q1_0, Q2_0; the CPU's decoders and their
 * layouts: src/quant/quant_iq.c).
 *
 * iq_deq8<T> decodes 8 consecutive weights to floats with the CPU's arithmetic, operation for
 * operation (products only, so no fused multiply-add can differ): deq8 calls it, so every float
 * path (the GEMVs, cuBLAS prefill's f16 dequantization, cuda_mma.cu, the MoE experts, get_rows)
 * takes these types. iq_group_load<T> gives a 32-weight group as int8 weights and a float scale per
 * half for the one-token integer-dot products (cuda_mmvq_iq.cu): the i-quants' grids hold small
 * integers (IQ2 8..43, IQ3 up to 62), IQ1's shift of +-1/8 is folded in as 8 * grid +- 1 (scale / 8),
 * TQ/Q1_0/Q2_0 are -1..2, NVFP4's E2M1 values doubled are -12..12.
 *
 * Plain C++ on bytes (ld16, bk_h2f, __popc, __dp4a): dev/kernels/iq_emu.sh compiles this header for
 * the CPU and holds it against quant_dequantize, bit for bit. */
#ifndef BK_CUDA_IQ_CUH
#define BK_CUDA_IQ_CUH
#include <stdint.h>

#include "quant/quant.h"

/* the grids, from the CPU's one copy of the data (static: whole-program device code, a copy per
 * translation unit; unused ones cost nothing) */
#define QUANT_IQ_GRID(T, name, n, ...) [[maybe_unused]] static __device__ const T bk_##name[n] = __VA_ARGS__;
#include "quant/quant_iq_grids.inc"
#undef QUANT_IQ_GRID
/* E2M1 doubled (quant_mxfp4_values) */
[[maybe_unused]] static __device__ const int8_t bk_fp4_values[16] = {0, 1, 2, 3, 4, 6, 8, 12,
                                                                     0, -1, -2, -3, -4, -6, -8, -12};

__host__ __device__ constexpr bool iq_type(int T) {
    return T == QT_IQ2_XXS || T == QT_IQ2_XS || T == QT_IQ2_S || T == QT_IQ3_XXS || T == QT_IQ3_S || T == QT_IQ1_S ||
           T == QT_IQ1_M || T == QT_TQ1_0 || T == QT_TQ2_0 || T == QT_NVFP4 || T == QT_Q1_0 || T == QT_Q2_0;
}
/* block bytes and weights (quant_iq.h's blk_*) */
template <int T> struct iq_blk {
    static constexpr int bytes = T == QT_IQ2_XXS ? 66 : T == QT_IQ2_XS ? 74 : T == QT_IQ2_S ? 82 : T == QT_IQ3_XXS ? 98
                                 : T == QT_IQ3_S ? 110 : T == QT_IQ1_S ? 50 : T == QT_IQ1_M ? 56 : T == QT_TQ1_0 ? 54
                                 : T == QT_TQ2_0 ? 66 : T == QT_NVFP4 ? 36 : 18;
    static constexpr int elems = T == QT_NVFP4 || T == QT_Q2_0 ? 64 : T == QT_Q1_0 ? 128 : 256;
};

/* 4 bytes from a 2-byte-aligned address (the blocks are only 2-byte aligned) */
__device__ __forceinline__ uint32_t iq_ld32(const uint8_t *p) { return ld16(p) | (uint32_t)ld16(p + 2) << 16; }
/* the 8 sign bits of a group from its 7 stored ones: bit 7 makes the count of minus signs even */
__device__ __forceinline__ uint32_t iq_signs8(uint32_t s7) { return s7 | (uint32_t)(__popc(s7) & 1) << 7; }
__device__ __forceinline__ float iq_sgn(uint32_t s, int j) { return (s >> j) & 1 ? -1.f : 1.f; }
/* byte j of a grid entry, as the CPU reads it (unsigned for IQ2/IQ3, signed for IQ1) */
__device__ __forceinline__ int iq_u8(uint64_t g, int j) { return (int)((g >> 8 * j) & 0xFF); }
__device__ __forceinline__ int iq_s8(uint64_t g, int j) { return (int)(int8_t)((g >> 8 * j) & 0xFF); }
/* NVFP4's UE4M3 scale, halved (quant_ue4m3_to_f32_half) */
__device__ __forceinline__ float iq_ue4m3_half(uint32_t x) {
    if (x == 0 || x == 0x7F) return 0.0f;
    const int e = (x >> 3) & 15, m = x & 7;
    const float raw = e == 0 ? ldexpf((float)m, -9) : ldexpf(1.0f + (float)m / 8.0f, e - 7);
    return raw * 0.5f;
}
/* IQ1_M's f16 scale from the top nibbles of its four scale words */
__device__ __forceinline__ uint16_t iq1m_d(const uint8_t *sc) {
    return (uint16_t)((ld16(sc) >> 12) | ((ld16(sc + 2) >> 8) & 0x00f0) | ((ld16(sc + 4) >> 4) & 0x0f00) |
                      (ld16(sc + 6) & 0xf000));
}
/* TQ1_0's trit n of byte q (5 a byte as a fraction of 3^5), 0..2 */
__device__ __forceinline__ int iq_trit(uint32_t q, int n) {
    const uint32_t p = n == 0 ? 1 : n == 1 ? 3 : n == 2 ? 9 : n == 3 ? 27 : 81;
    return (int)((((q * p) & 0xFF) * 3) >> 8);
}
/* TQ1_0's weight ei (0..255) less one: bytes 0..31 hold weights 32n + m, bytes 32..47 weights
 * 160 + 16n + m, the 4 qh bytes weights 240 + 4n + j */
__device__ __forceinline__ int iq_tq1(const uint8_t *b, int ei) {
    if (ei < 160) return iq_trit(b[ei % 32], ei / 32) - 1;
    if (ei < 240) return iq_trit(b[32 + (ei - 160) % 16], (ei - 160) / 16) - 1;
    return iq_trit(b[48 + (ei - 240) % 4], (ei - 240) / 4) - 1;
}

/* Decodes weights [e, e + 8) of a row of type T (e a multiple of 8): quant_dequantize's floats. */
template <int T> __device__ __forceinline__ void iq_deq8(const uint8_t *row, int64_t e, float v[8]) {
    const uint8_t *b = row + (e / iq_blk<T>::elems) * iq_blk<T>::bytes;
    const int ei = (int)(e % iq_blk<T>::elems), ib = ei / 32, l = (ei % 32) / 8;
    if constexpr (T == QT_IQ2_XXS) {
        const uint8_t *g = b + 2 + 8 * ib;
        const uint32_t aux = iq_ld32(g + 4), s = iq_signs8((aux >> 7 * l) & 127);
        const float db = bk_h2f(ld16(b)) * (0.5f + (float)(aux >> 28)) * 0.25f;
        const uint64_t gr = bk_iq2xxs_grid[g[l]];
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = db * (float)iq_u8(gr, j) * iq_sgn(s, j);
    } else if constexpr (T == QT_IQ2_XS || T == QT_IQ2_S) {
        const int sc = b[T == QT_IQ2_XS ? 66 + ib : 74 + ib];
        const float db = bk_h2f(ld16(b)) * (0.5f + (float)(l < 2 ? sc & 15 : sc >> 4)) * 0.25f;
        uint64_t gr;
        uint32_t s;
        if constexpr (T == QT_IQ2_XS) {
            const uint32_t q = ld16(b + 2 + 2 * (4 * ib + l));
            gr = bk_iq2xs_grid[q & 511];
            s = iq_signs8(q >> 9);
        } else {
            gr = bk_iq2s_grid[b[2 + 4 * ib + l] | ((b[66 + ib] << (8 - 2 * l)) & 0x300)];
            s = b[2 + 32 + 4 * ib + l];
        }
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = db * (float)iq_u8(gr, j) * iq_sgn(s, j);
    } else if constexpr (T == QT_IQ3_XXS || T == QT_IQ3_S) {
        const uint8_t *qs = b + 2 + 8 * ib + 2 * l;
        float db;
        uint32_t g1, g2, s;
        if constexpr (T == QT_IQ3_XXS) {
            const uint32_t aux = iq_ld32(b + 2 + 64 + 4 * ib);
            db = bk_h2f(ld16(b)) * (0.5f + (float)(aux >> 28)) * 0.5f;
            s = iq_signs8((aux >> 7 * l) & 127);
            g1 = bk_iq3xxs_grid[qs[0]];
            g2 = bk_iq3xxs_grid[qs[1]];
        } else {
            const int s4 = ib & 1 ? b[106 + ib / 2] >> 4 : b[106 + ib / 2] & 15;
            const uint32_t qh = b[66 + ib];
            db = bk_h2f(ld16(b)) * (float)(1 + 2 * s4);
            s = b[74 + 4 * ib + l];
            g1 = bk_iq3s_grid[qs[0] | ((qh << (8 - 2 * l)) & 256)];
            g2 = bk_iq3s_grid[qs[1] | ((qh << (7 - 2 * l)) & 256)];
        }
#pragma unroll
        for (int j = 0; j < 4; j++) {
            v[j] = db * (float)iq_u8(g1, j) * iq_sgn(s, j);
            v[j + 4] = db * (float)iq_u8(g2, j) * iq_sgn(s, j + 4);
        }
    } else if constexpr (T == QT_IQ1_S || T == QT_IQ1_M) {
        float dl, delta;
        uint64_t gr;
        if constexpr (T == QT_IQ1_S) {
            const uint32_t qh = ld16(b + 34 + 2 * ib);
            dl = bk_h2f(ld16(b)) * (float)(2 * ((qh >> 12) & 7) + 1);
            delta = qh & 0x8000 ? -0.125f : 0.125f;
            gr = bk_iq1s_grid[b[2 + 4 * ib + l] | (((qh >> 3 * l) & 7) << 8)];
        } else {
            const uint32_t sc = ld16(b + 48 + 2 * (ib / 2));
            dl = bk_h2f(iq1m_d(b + 48)) * (float)(2 * ((sc >> (6 * (ib % 2) + 3 * (l / 2))) & 7) + 1);
            const uint32_t qh = b[32 + 2 * ib + l / 2], h = l & 1 ? qh >> 4 : qh & 15;
            delta = h & 8 ? -0.125f : 0.125f;
            gr = bk_iq1s_grid[b[4 * ib + l] | ((h & 7) << 8)];
        }
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = dl * ((float)iq_s8(gr, j) + delta);
    } else if constexpr (T == QT_TQ1_0) {
        const float d = bk_h2f(ld16(b + 52));
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = (float)iq_tq1(b, ei + j) * d;
    } else if constexpr (T == QT_TQ2_0) {
        const float d = bk_h2f(ld16(b + 64));
        const int h = ei / 128, sh = 2 * ((ei % 128) / 32), m = ei % 32;
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = (float)(((b[32 * h + m + j] >> sh) & 3) - 1) * d;
    } else if constexpr (T == QT_NVFP4) {
        const int s = ei / 16, j0 = ei % 16;
        const float d = iq_ue4m3_half(b[s]);
        const uint8_t *q = b + 4 + 8 * s + j0 % 8;
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = (float)bk_fp4_values[j0 < 8 ? q[j] & 15 : q[j] >> 4] * d;
    } else if constexpr (T == QT_Q1_0) {
        const float d = bk_h2f(ld16(b)), nd = -d;
        const uint32_t q = b[2 + ei / 8];
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = (q >> j) & 1 ? d : nd;
    } else if constexpr (T == QT_Q2_0) {
        const float d = bk_h2f(ld16(b));
        const uint32_t q = ld16(b + 2 + ei / 4);
#pragma unroll
        for (int j = 0; j < 8; j++) v[j] = (float)((int)((q >> 2 * j) & 3) - 1) * d;
    }
}

/* ---- the integer-dot groups ---- */

/* 32 weights as int8 (w[0..3] the first 16, w[4..7] the second) and the float scale of each half */
typedef struct iqgroup {
    int w[8];
    float f0, f1;
} iqgroup;

/* The integer dot of a group's 32 int8 weights (w: 8 words, the first 16 weights in w[0..3]) with 32
 * int8 activations xi, one sum per half (*s0, *s1), which each group type scales in its own way
 * (iq_group_dot here, cuda_internal.cuh's group_dot). */
__device__ __forceinline__ void dot_halves32(const int *w, const int *xi, int &s0, int &s1) {
    s0 = 0;
    s1 = 0;
#pragma unroll
    for (int i = 0; i < 4; i++) {
        s0 = __dp4a(w[i], xi[i], s0);
        s1 = __dp4a(w[4 + i], xi[4 + i], s1);
    }
}

/* four signed bytes into a word */
__device__ __forceinline__ int iq_pack4(int a, int b, int c, int d) {
    return (int)((uint32_t)(a & 0xFF) | (uint32_t)(b & 0xFF) << 8 | (uint32_t)(c & 0xFF) << 16 |
                 (uint32_t)(d & 0xFF) << 24);
}
/* four unsigned grid bytes (1..127) negated where sign bits s4 (bit i: byte i) are set: byte ^ 0xFF
 * + 1, which never carries out of a byte for values >= 1 */
__device__ __forceinline__ int iq_sign4(uint32_t g, uint32_t s4) {
    const uint32_t one = ((s4 & 15) * 0x00204081u) & 0x01010101u;
    return (int)((g ^ (one * 0xFFu)) + one);
}

/* Group g (weights 32g .. 32g + 31) of a row of type T. */
template <int T> __device__ __forceinline__ void iq_group_load(const uint8_t *row, int64_t g, iqgroup &q) {
    constexpr int GPB = iq_blk<T>::elems / 32; /* groups a block */
    const uint8_t *b = row + (g / GPB) * iq_blk<T>::bytes;
    const int ib = (int)(g % GPB);
    if constexpr (T == QT_IQ2_XXS) {
        const uint8_t *p = b + 2 + 8 * ib;
        const uint32_t idx = iq_ld32(p), aux = iq_ld32(p + 4);
        q.f0 = q.f1 = bk_h2f(ld16(b)) * (0.5f + (float)(aux >> 28)) * 0.25f;
#pragma unroll
        for (int l = 0; l < 4; l++) {
            const uint64_t gr = bk_iq2xxs_grid[(idx >> 8 * l) & 255];
            const uint32_t s = iq_signs8((aux >> 7 * l) & 127);
            q.w[2 * l] = iq_sign4((uint32_t)gr, s);
            q.w[2 * l + 1] = iq_sign4((uint32_t)(gr >> 32), s >> 4);
        }
    } else if constexpr (T == QT_IQ2_XS || T == QT_IQ2_S) {
        const int sc = b[T == QT_IQ2_XS ? 66 + ib : 74 + ib];
        const float d = bk_h2f(ld16(b));
        q.f0 = d * (0.5f + (float)(sc & 15)) * 0.25f;
        q.f1 = d * (0.5f + (float)(sc >> 4)) * 0.25f;
#pragma unroll
        for (int l = 0; l < 4; l++) {
            uint64_t gr;
            uint32_t s;
            if constexpr (T == QT_IQ2_XS) {
                const uint32_t v = ld16(b + 2 + 2 * (4 * ib + l));
                gr = bk_iq2xs_grid[v & 511];
                s = iq_signs8(v >> 9);
            } else {
                gr = bk_iq2s_grid[b[2 + 4 * ib + l] | ((b[66 + ib] << (8 - 2 * l)) & 0x300)];
                s = b[2 + 32 + 4 * ib + l];
            }
            q.w[2 * l] = iq_sign4((uint32_t)gr, s);
            q.w[2 * l + 1] = iq_sign4((uint32_t)(gr >> 32), s >> 4);
        }
    } else if constexpr (T == QT_IQ3_XXS || T == QT_IQ3_S) {
        const uint8_t *qs = b + 2 + 8 * ib;
        uint32_t aux = 0, qh = 0;
        if constexpr (T == QT_IQ3_XXS) {
            aux = iq_ld32(b + 2 + 64 + 4 * ib);
            q.f0 = q.f1 = bk_h2f(ld16(b)) * (0.5f + (float)(aux >> 28)) * 0.5f;
        } else {
            const int s4 = ib & 1 ? b[106 + ib / 2] >> 4 : b[106 + ib / 2] & 15;
            qh = b[66 + ib];
            q.f0 = q.f1 = bk_h2f(ld16(b)) * (float)(1 + 2 * s4);
        }
#pragma unroll
        for (int l = 0; l < 4; l++) {
            uint32_t g1, g2, s;
            if constexpr (T == QT_IQ3_XXS) {
                s = iq_signs8((aux >> 7 * l) & 127);
                g1 = bk_iq3xxs_grid[qs[2 * l]];
                g2 = bk_iq3xxs_grid[qs[2 * l + 1]];
            } else {
                s = b[74 + 4 * ib + l];
                g1 = bk_iq3s_grid[qs[2 * l] | ((qh << (8 - 2 * l)) & 256)];
                g2 = bk_iq3s_grid[qs[2 * l + 1] | ((qh << (7 - 2 * l)) & 256)];
            }
            q.w[2 * l] = iq_sign4(g1, s);
            q.w[2 * l + 1] = iq_sign4(g2, s >> 4);
        }
    } else if constexpr (T == QT_IQ1_S || T == QT_IQ1_M) {
        /* weight * 8 = 8 * grid + (delta > 0 ? 1 : -1), scale / 8 (exact: a power of two) */
        if constexpr (T == QT_IQ1_S) {
            const uint32_t qh = ld16(b + 34 + 2 * ib);
            q.f0 = q.f1 = bk_h2f(ld16(b)) * (float)(2 * ((qh >> 12) & 7) + 1) * 0.125f;
            const int dlt = qh & 0x8000 ? -1 : 1;
#pragma unroll
            for (int l = 0; l < 4; l++) {
                const uint64_t gr = bk_iq1s_grid[b[2 + 4 * ib + l] | (((qh >> 3 * l) & 7) << 8)];
                q.w[2 * l] = iq_pack4(8 * iq_s8(gr, 0) + dlt, 8 * iq_s8(gr, 1) + dlt, 8 * iq_s8(gr, 2) + dlt,
                                      8 * iq_s8(gr, 3) + dlt);
                q.w[2 * l + 1] = iq_pack4(8 * iq_s8(gr, 4) + dlt, 8 * iq_s8(gr, 5) + dlt, 8 * iq_s8(gr, 6) + dlt,
                                          8 * iq_s8(gr, 7) + dlt);
            }
        } else {
            const uint32_t sc = ld16(b + 48 + 2 * (ib / 2));
            const float d = bk_h2f(iq1m_d(b + 48));
            q.f0 = d * (float)(2 * ((sc >> (6 * (ib % 2))) & 7) + 1) * 0.125f;
            q.f1 = d * (float)(2 * ((sc >> (6 * (ib % 2) + 3)) & 7) + 1) * 0.125f;
#pragma unroll
            for (int l = 0; l < 4; l++) {
                const uint32_t qh = b[32 + 2 * ib + l / 2], h = l & 1 ? qh >> 4 : qh & 15;
                const int dlt = h & 8 ? -1 : 1;
                const uint64_t gr = bk_iq1s_grid[b[4 * ib + l] | ((h & 7) << 8)];
                q.w[2 * l] = iq_pack4(8 * iq_s8(gr, 0) + dlt, 8 * iq_s8(gr, 1) + dlt, 8 * iq_s8(gr, 2) + dlt,
                                      8 * iq_s8(gr, 3) + dlt);
                q.w[2 * l + 1] = iq_pack4(8 * iq_s8(gr, 4) + dlt, 8 * iq_s8(gr, 5) + dlt, 8 * iq_s8(gr, 6) + dlt,
                                          8 * iq_s8(gr, 7) + dlt);
            }
        }
    } else if constexpr (T == QT_NVFP4) {
        const int s = 2 * (ib & 1);
        q.f0 = iq_ue4m3_half(b[s]);
        q.f1 = iq_ue4m3_half(b[s + 1]);
#pragma unroll
        for (int h = 0; h < 2; h++) {
            const uint8_t *p = b + 4 + 8 * (s + h);
#pragma unroll
            for (int k = 0; k < 2; k++) { /* low nibbles: weights 0..7 of the 16, high: 8..15 */
                const uint8_t *pk = p + 4 * k;
                q.w[4 * h + k] = iq_pack4(bk_fp4_values[pk[0] & 15], bk_fp4_values[pk[1] & 15],
                                          bk_fp4_values[pk[2] & 15], bk_fp4_values[pk[3] & 15]);
                q.w[4 * h + 2 + k] = iq_pack4(bk_fp4_values[pk[0] >> 4], bk_fp4_values[pk[1] >> 4],
                                              bk_fp4_values[pk[2] >> 4], bk_fp4_values[pk[3] >> 4]);
            }
        }
    } else { /* TQ1_0, TQ2_0, Q1_0, Q2_0: one f16 scale a block, weights -1..2 */
        const float d = bk_h2f(ld16(b + (T == QT_TQ1_0 ? 52 : T == QT_TQ2_0 ? 64 : 0)));
        q.f0 = q.f1 = d;
#pragma unroll
        for (int k = 0; k < 8; k++) {
            int v[4];
#pragma unroll
            for (int j = 0; j < 4; j++) {
                const int e = 32 * ib + 4 * k + j; /* weight in the block */
                if constexpr (T == QT_TQ1_0) v[j] = iq_tq1(b, e);
                else if constexpr (T == QT_TQ2_0) v[j] = ((b[32 * (e / 128) + e % 32] >> 2 * ((e % 128) / 32)) & 3) - 1;
                else if constexpr (T == QT_Q1_0) v[j] = (b[2 + e / 8] >> (e % 8)) & 1 ? 1 : -1;
                else v[j] = ((b[2 + e / 4] >> 2 * (e % 4)) & 3) - 1;
            }
            q.w[k] = iq_pack4(v[0], v[1], v[2], v[3]);
        }
    }
}

/* The group's dot with 32 int8 activations xi (scale dx): dx * (f0 * sum0 + f1 * sum1). */
__device__ __forceinline__ float iq_group_dot(const iqgroup &q, const int *xi, float dx) {
    int s0, s1;
    dot_halves32(q.w, xi, s0, s1);
    return dx * (q.f0 * (float)s0 + q.f1 * (float)s1);
}

#endif
