/* loader_emu.cpp — the CUDA weight loaders of cuda_internal.cuh compiled for the CPU (see
 * loader_emu.sh): the device intrinsics they use are emulated below, bit for bit. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "quant/quant.h" /* QT_*, the CPU's dequantization and codebook */
}
#include <math.h>

#define __device__
#define __forceinline__ inline
struct uint2 { uint32_t x, y; };
struct uint4 { uint32_t x, y, z, w; };
template <class T> static T __ldg(const T *p) { return *p; }
static uint32_t __funnelshift_r(uint32_t lo, uint32_t hi, int sh) {
    return (uint32_t)(((((uint64_t)hi) << 32) | lo) >> (sh & 31));
}
static int __vsubss4(int a, int b) { /* per byte, signed, saturated */
    int r = 0;
    for (int i = 0; i < 4; i++) {
        int d = (int8_t)(a >> 8 * i) - (int8_t)(b >> 8 * i);
        d = d > 127 ? 127 : d < -128 ? -128 : d;
        r |= (d & 0xFF) << 8 * i;
    }
    return r;
}
static float bk_h2f(uint16_t h) { return quant_f16_to_f32(h); }
static uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) { /* prmt's default mode */
    const uint64_t pool = (uint64_t)y << 32 | x;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) {
        const uint32_t sel = (s >> 4 * i) & 15;
        uint32_t b = (uint32_t)(pool >> 8 * (sel & 7)) & 0xFF;
        if (sel & 8) b = (b & 0x80) ? 0xFF : 0; /* the selected byte's sign, replicated */
        r |= b << 8 * i;
    }
    return r;
}
static uint16_t ld16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
static int byte_of(uint32_t w, int i) { return (int)((w >> (8 * i)) & 0xFF); }

#include "loader_emu.inc"

static bool same(const wgroup &a, const wgroup &b) {
    /* the scales' bits (random blocks hold NaN halves, which compare unequal as floats) */
    return !memcmp(a.w, b.w, sizeof a.w) && a.s0 == b.s0 && a.s1 == b.s1 && !memcmp(&a.a, &b.a, 4) &&
           !memcmp(&a.b, &b.b, 4);
}

int main(void) {
    static uint8_t buf[8192];
    srand(1);
    for (size_t i = 0; i < sizeof buf; i++) buf[i] = (uint8_t)(rand() & 0xFF);
    int bad = 0, n = 0;
    for (int off = 0; off < 16; off += 2) { /* rows are 2-byte aligned at least (Q6_K: 210-byte blocks) */
        const uint8_t *row = buf + 64 + off;
        for (int64_t h = 0; h < 16; h++) { /* 8 Q6_K blocks: quads */
            wgroup q[4], r;
            group_load_q6k_quad(row, h, q);
            for (int k = 0; k < 4; k++, n++) {
                group_load<QT_Q6_K>(row, 4 * h + k, r);
                if (!same(r, q[k]) && ++bad < 5) printf("FAIL q6k quad off %d h %ld k %d\n", off, (long)h, k);
            }
        }
        if (off % 16) continue; /* Q4_K blocks (144 bytes) keep 16-byte alignment */
        for (int64_t p = 0; p < 32; p++) { /* 8 Q4_K blocks: pairs */
            wgroup lo, hi, r;
            group_load_q4k_pair(row, p, lo, hi);
            group_load<QT_Q4_K>(row, 2 * p, r);
            n++;
            if (!same(r, lo) && ++bad < 5) printf("FAIL q4k pair p %ld lo\n", (long)p);
            group_load<QT_Q4_K>(row, 2 * p + 1, r);
            n++;
            if (!same(r, hi) && ++bad < 5) printf("FAIL q4k pair p %ld hi\n", (long)p);
        }
    }
    /* Q5_K pairs against single groups, and Q5_K, IQ4_XS, IQ4_NL, Q4_K groups against the CPU's weights:
     * random blocks with finite scales (d, dmin of f16 in [2^-10, 1)) */
    static uint8_t kb[8 * 176];
    static float ref[8 * 256];
    const uint32_t ty[4] = {QT_Q5_K, QT_IQ4_XS, QT_IQ4_NL, QT_Q4_K};
    const int bb[4] = {176, 136, 18, 144}, bw[4] = {256, 256, 32, 256};
    for (int t = 0; t < 4; t++)
        for (int rep = 0; rep < 64; rep++) {
            for (size_t i = 0; i < sizeof kb; i++) kb[i] = (uint8_t)(rand() & 0xFF);
            for (int b = 0; b < 8; b++) {
                uint8_t *blk = kb + b * bb[t];
                uint16_t d = (uint16_t)(0x1400 + rand() % 0x2400), dm = (uint16_t)(0x1400 + rand() % 0x2400);
                memcpy(blk, &d, 2);
                if (ty[t] == QT_Q5_K || ty[t] == QT_Q4_K) memcpy(blk + 2, &dm, 2);
            }
            const int64_t n_w = 8 * bw[t];
            if (quant_dequantize(ty[t], kb, ref, n_w) != BRISK_OK) {
                printf("FAIL dequantize type %u\n", ty[t]);
                return 1;
            }
            for (int64_t g = 0; g < n_w / 32; g++, n++) {
                wgroup q;
                if (ty[t] == QT_Q5_K) group_load<QT_Q5_K>(kb, g, q);
                else if (ty[t] == QT_IQ4_XS) group_load<QT_IQ4_XS>(kb, g, q);
                else if (ty[t] == QT_Q4_K) group_load<QT_Q4_K>(kb, g, q);
                else group_load<QT_IQ4_NL>(kb, g, q);
                bool ok = true;
                for (int i = 0; i < 32; i++) { /* weight i: byte i % 4 of word i / 4 */
                    const int w = (int8_t)(q.w[i / 4] >> 8 * (i % 4));
                    const float v = q.a * (float)((i < 16 ? q.s0 : q.s1) * w) - q.b;
                    ok &= v == ref[g * 32 + i];
                }
                if (!ok && ++bad < 5) printf("FAIL type %u group %ld against the CPU\n", ty[t], (long)g);
                if (ty[t] == QT_Q5_K && g % 2 == 0) {
                    wgroup lo, hi, r;
                    group_load_q5k_pair(kb, g / 2, lo, hi);
                    group_load<QT_Q5_K>(kb, g + 1, r);
                    n++;
                    if ((!same(q, lo) || !same(r, hi)) && ++bad < 5) printf("FAIL q5k pair p %ld\n", (long)g / 2);
                }
            }
        }
    for (uint32_t v = 0; v < 65536; v++) { /* the codebook at four indices, every combination of two */
        const uint32_t idx = (v & 15) | (v >> 4 & 15) << 8 | (v >> 8 & 15) << 16 | (v >> 12 & 15) << 24;
        const uint32_t r = (uint32_t)iq4nl_lookup4(idx);
        for (int i = 0; i < 4; i++)
            if ((int8_t)(r >> 8 * i) != quant_iq4nl_values[(idx >> 8 * i) & 15] && ++bad < 5)
                printf("FAIL iq4nl_lookup4 %08x\n", idx);
    }
    /* q6_minus32 against __vsubss4(lo | hi, 0x20202020), the unpacking it replaced, on every word of
     * four 6-bit values (64^4 of them) */
    for (uint32_t v = 0; v < (1u << 24); v++) {
        const uint32_t w = (v & 63) | ((v >> 6 & 63) << 8) | ((v >> 12 & 63) << 16) | ((v >> 18 & 63) << 24);
        const uint32_t lo = w & 0x0F0F0F0Fu, hi = w & 0x30303030u;
        if (q6_minus32(lo, hi) != __vsubss4((int)(lo | hi), 0x20202020) && ++bad < 5)
            printf("FAIL q6_minus32 %08x\n", w);
    }
    printf("q6_minus32: %u words compared\n", 1u << 24);
    printf("%d groups compared, %d mismatches\n", n, bad);
    return bad != 0;
}
