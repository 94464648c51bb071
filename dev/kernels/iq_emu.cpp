/* iq_emu.cpp — the CUDA backend's device code for the codebook, ternary and FP4 weight types
 * (src/backend/cuda/cuda_iq.cuh) compiled for the CPU (see iq_emu.sh) and held against brisk's
 * CPU decoders (quant_dequantize, src/quant/quant_iq.c), for IQ1_S, IQ1_M, IQ2_XXS, IQ2_XS, IQ2_S,
 * IQ3_XXS, IQ3_S, TQ1_0, TQ2_0, NVFP4, Q1_0 and Q2_0, on random blocks (every bit pattern of the
 * quants is valid; the scales are kept finite):
 *   iq_deq8 (the float paths and cuBLAS prefill's dequantization) gives quant_dequantize's floats,
 *   bit for bit, at every 8-weight offset;
 *   iq_group_load's int8 weights times their half's scale give those floats too, bit for bit, and
 *   iq_group_dot on random int8 activations is within float rounding (1e-6 of the sum of the
 *   terms' magnitudes) of the exact dot with those floats (the one-token products of
 *   cuda_mmvq_iq.cu).
 * What it cannot show: what nvcc makes of the arithmetic (products only: nothing to fuse) and the
 * device's loads. Build and run (seconds): sh dev/kernels/iq_emu.sh */
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <vector>

extern "C" {
#include "quant/quant.h"
}

#define __host__
#define __device__
#define __forceinline__ inline
static float bk_h2f(uint16_t h) { return quant_f16_to_f32(h); }
static uint16_t ld16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
static int __popc(uint32_t x) { return __builtin_popcount(x); }
static int __dp4a(int a, int b, int c) {
    for (int i = 0; i < 4; i++) c += (int)(int8_t)(a >> 8 * i) * (int)(int8_t)(b >> 8 * i);
    return c;
}
#include "backend/cuda/cuda_iq.cuh"

static uint64_t rng = 0x2545F4914F6CDD1Dull;
static uint32_t rnd() {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static uint16_t rnd_f16() { /* finite, either sign, 2^-14 .. 2^1 */
    float f = ldexpf(1.0f + (rnd() % 1024) / 1024.0f, (int)(rnd() % 16) - 15);
    return quant_f32_to_f16(rnd() & 1 ? -f : f);
}

template <int T> static long check(const char *name, int blocks, long *groups) {
    const int BB = iq_blk<T>::bytes, BE = iq_blk<T>::elems;
    std::vector<uint8_t> w((size_t)blocks * BB);
    for (auto &b : w) b = (uint8_t)rnd();
    for (int k = 0; k < blocks; k++) { /* the f16 scales */
        uint8_t *b = w.data() + (size_t)k * BB;
        uint16_t h = rnd_f16();
        if (T == QT_IQ1_M) { /* its top nibbles of the four scale words */
            for (int i = 0; i < 4; i++) {
                uint16_t s = ld16(b + 48 + 2 * i);
                s = (uint16_t)((s & 0x0FFF) | (((h >> 4 * i) & 15) << 12));
                memcpy(b + 48 + 2 * i, &s, 2);
            }
        } else if (T != QT_NVFP4) {
            memcpy(b + (T == QT_TQ1_0 ? 52 : T == QT_TQ2_0 ? 64 : 0), &h, 2);
        }
    }
    const int64_t n = (int64_t)blocks * BE;
    std::vector<float> ref((size_t)n);
    if (quant_dequantize(T, w.data(), ref.data(), n) != BRISK_OK) {
        printf("%s: quant_dequantize failed\n", name);
        return 1;
    }
    long bad = 0;
    for (int64_t e = 0; e < n; e += 8) {
        float v[8];
        iq_deq8<T>(w.data(), e, v);
        for (int j = 0; j < 8; j++)
            if (memcmp(&v[j], &ref[e + j], 4) && bad++ < 5)
                printf("%s deq8: weight %lld: %.9g, cpu %.9g\n", name, (long long)(e + j), v[j], ref[e + j]);
    }
    for (int64_t g = 0; g < n / 32; g++) {
        iqgroup q;
        iq_group_load<T>(w.data(), g, q);
        int xi[8];
        double exact = 0, mag = 0;
        for (int k = 0; k < 8; k++) {
            int8_t x[4];
            for (int j = 0; j < 4; j++) x[j] = (int8_t)(rnd() % 255 - 127);
            memcpy(&xi[k], x, 4);
            for (int j = 0; j < 4; j++) {
                const int i = 4 * k + j;
                const float f = i < 16 ? q.f0 : q.f1, wv = f * (float)(int8_t)(q.w[k] >> 8 * j);
                if (memcmp(&wv, &ref[32 * g + i], 4) && bad++ < 5)
                    printf("%s group %lld weight %d: %.9g, cpu %.9g\n", name, (long long)g, i, wv, ref[32 * g + i]);
                exact += (double)ref[32 * g + i] * x[j];
                mag += fabs((double)ref[32 * g + i] * x[j]);
            }
        }
        const double dot = iq_group_dot(q, xi, 1.0f);
        if (!(fabs(dot - exact) <= 1e-6 * mag) && bad++ < 5) /* two float roundings of the halves' sums */
            printf("%s group %lld: dot %.9g, exact %.9g\n", name, (long long)g, dot, exact);
        ++*groups;
    }
    return bad;
}

int main() {
    long bad = 0, groups = 0;
    const int nb = 2048; /* blocks a type: enough random indices to reach every grid entry */
    bad += check<QT_IQ2_XXS>("iq2_xxs", nb, &groups);
    bad += check<QT_IQ2_XS>("iq2_xs", nb, &groups);
    bad += check<QT_IQ2_S>("iq2_s", nb, &groups);
    bad += check<QT_IQ3_XXS>("iq3_xxs", nb, &groups);
    bad += check<QT_IQ3_S>("iq3_s", nb, &groups);
    bad += check<QT_IQ1_S>("iq1_s", nb, &groups);
    bad += check<QT_IQ1_M>("iq1_m", nb, &groups);
    bad += check<QT_TQ1_0>("tq1_0", nb, &groups);
    bad += check<QT_TQ2_0>("tq2_0", nb, &groups);
    bad += check<QT_NVFP4>("nvfp4", nb, &groups);
    bad += check<QT_Q1_0>("q1_0", nb, &groups);
    bad += check<QT_Q2_0>("q2_0", nb, &groups);
    printf("%ld iq groups compared, %ld mismatches\n", groups, bad);
    return bad != 0;
}
