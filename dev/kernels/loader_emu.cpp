/* loader_emu.cpp — the CUDA weight loaders of cuda_internal.cuh compiled for the CPU (see
 * loader_emu.sh): the device intrinsics they use are emulated below, bit for bit. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

extern "C" {
#include "quant/quant.h" /* QT_* */
}

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
static float bk_h2f(uint16_t h) { return (float)h; } /* the bits are what is compared */
static uint16_t ld16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
static int byte_of(uint32_t w, int i) { return (int)((w >> (8 * i)) & 0xFF); }

#include "loader_emu.inc"

static bool same(const wgroup &a, const wgroup &b) {
    return !memcmp(a.w, b.w, sizeof a.w) && a.s0 == b.s0 && a.s1 == b.s1 && a.a == b.a && a.b == b.b;
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
