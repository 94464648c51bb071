/* kv_emu.cpp — the CUDA backend's quantized KV cache code (cuda_internal.cuh's kv_store, kvq_load8,
 * kvq_cvt8; cuda_attention.cu's kv_at) compiled for the CPU (see kv_emu.sh) and held against
 * brisk's CPU quantization (src/quant/), which the CPU backend's cache uses:
 *   kv_store<KT_Q8_0 / KT_Q4_0>, run by a warp of 32 emulated lanes (one std::thread each; the
 *   shuffles and the ballot become an exchange buffer between barriers), writes the bytes
 *   quant_quantize writes, on random rows and on the edges of the rounding (ties of magnitude
 *   of either sign, zeros of either sign, values half a step apart, scales from 2^-20 to 2^10);
 *   kvq_load8 + kvq_cvt8 (the warp decode kernel's reader) and kv_at (the tile kernel's) give the
 *   floats quant_dequantize gives, bit for bit, at every 2-byte alignment; kvq_h8 (the tensor-core
 *   kernels' half2 conversion) gives those floats rounded to f16, bit for bit.
 * What it cannot show: the device's own float-to-half rounding (emulated by the CPU's
 * quant_f32_to_f16, round to nearest even as __float2half_rn) and what nvcc makes of the float
 * arithmetic (the kernels keep it to single roundings: __fmul_rn, __fadd_rn).
 * Build and run (seconds): sh dev/kernels/kv_emu.sh */
#include <algorithm>
#include <barrier>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <thread>
#include <vector>

extern "C" {
#include "quant/quant.h" /* QT_*, the CPU's quantization */
}
using std::min;

#define __host__
#define __device__
#define __forceinline__ inline
struct uint2 { uint32_t x, y; };
struct uint4 { uint32_t x, y, z, w; };
static uint4 make_uint4(uint32_t x, uint32_t y, uint32_t z, uint32_t w) { return {x, y, z, w}; }
typedef uint16_t __half; /* the bits */
static __half __float2half_rn(float f) { return quant_f32_to_f16(f); }
static float __half2float(__half h) { return quant_f16_to_f32(h); }
static float bk_h2f(uint16_t h) { return quant_f16_to_f32(h); }
static float __fmul_rn(float a, float b) { return a * b; } /* (built with -ffp-contract=off) */
static float __fadd_rn(float a, float b) { return a + b; }
static int __ffs(unsigned x) { return __builtin_ffs((int)x); }
static uint16_t ld16(const uint8_t *p) {
    uint16_t v;
    memcpy(&v, p, 2);
    return v;
}
static uint2 ld8_a2(const uint8_t *p) {
    uint2 r;
    memcpy(&r, p, 8);
    return r;
}

/* half2 arithmetic, exact then rounded once (a difference or a product of two f16 is exact in f32) */
struct __half2 { __half x, y; };
static __half __ushort_as_half(uint16_t u) { return u; }
static __half2 __half2half2(__half h) { return {h, h}; }
static __half2 __hsub2(__half2 a, __half2 b) {
    return {__float2half_rn(__half2float(a.x) - __half2float(b.x)), __float2half_rn(__half2float(a.y) - __half2float(b.y))};
}
static __half2 __hmul2(__half2 a, __half2 b) {
    return {__float2half_rn(__half2float(a.x) * __half2float(b.x)), __float2half_rn(__half2float(a.y) * __half2float(b.y))};
}
static uint32_t __byte_perm(uint32_t x, uint32_t y, uint32_t s) {
    const uint64_t v = (uint64_t)y << 32 | x;
    uint32_t r = 0;
    for (int i = 0; i < 4; i++) r |= (uint32_t)(v >> 8 * ((s >> 4 * i) & 7) & 0xff) << 8 * i;
    return r;
}

/* one warp: lane = its thread's index; the exchanges go through xb between two barriers */
static thread_local int lane_id;
static std::barrier<> *warp_bar;
static uint32_t xb[32];
template <class T> static T xchg(T v, int src) {
    static_assert(sizeof(T) == 4, "32-bit lanes");
    memcpy(&xb[lane_id], &v, 4);
    warp_bar->arrive_and_wait();
    T r;
    memcpy(&r, &xb[src & 31], 4);
    warp_bar->arrive_and_wait();
    return r;
}
template <class T> static T __shfl_xor_sync(unsigned, T v, int o) { return xchg(v, lane_id ^ o); }
template <class T> static T __shfl_sync(unsigned, T v, int s) { return xchg(v, s); }
template <class T> static T __shfl_down_sync(unsigned, T v, int d) { return xchg(v, lane_id + d < 32 ? lane_id + d : lane_id); }
static unsigned __ballot_sync(unsigned, bool p) {
    xb[lane_id] = p;
    warp_bar->arrive_and_wait();
    unsigned m = 0;
    for (int i = 0; i < 32; i++) m |= (xb[i] ? 1u : 0u) << i;
    warp_bar->arrive_and_wait();
    return m;
}

#include "kv_emu.inc" /* cut out of cuda_internal.cuh and cuda_attention.cu by kv_emu.sh */

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd() {
    rng ^= rng << 13; rng ^= rng >> 7; rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float frand() { return (float)(rnd() % 2000001) / 1000000.0f - 1.0f; }

#define N_ROW 256 /* values a row: 8 blocks */
#define N_ROWS 400

/* Row r of the test set: kinds of block chosen by r, the rounding's edges among them. */
static void make_row(int r, float *x) {
    for (int b = 0; b < N_ROW / 32; b++) {
        float *y = x + 32 * b;
        const float s = ldexpf(1.0f, (int)(rnd() % 31) - 20); /* scales 2^-20 .. 2^10 */
        const int kind = (r * 8 + b) % 8;
        for (int i = 0; i < 32; i++) y[i] = frand() * s;
        if (kind == 1) { /* the largest magnitude twice, signs opposite: the first one sets the sign */
            const int i = rnd() % 32, j = rnd() % 32;
            y[i] = 1.5f * s;
            y[j] = (rnd() & 1 ? -1.5f : 1.5f) * s;
        } else if (kind == 2) { /* zeros of either sign, all of the block */
            for (int i = 0; i < 32; i++) y[i] = rnd() & 1 ? -0.0f : 0.0f;
        } else if (kind == 3) { /* one value, the rest zero */
            for (int i = 0; i < 32; i++) y[i] = 0.0f;
            y[rnd() % 32] = frand() * s;
        } else if (kind == 4) { /* values a half step of q4_0 (max / 8) apart: the rounding's edges, where
                                 * a product rounded before the sum and a fused one part (a scale that is
                                 * no power of two: the products are inexact) */
            const float m = (rnd() & 1 ? -1.0f : 1.0f) * s * (1.0f + 0.5f * fabsf(frand()));
            for (int i = 0; i < 32; i++) y[i] = m * (float)((int)(rnd() % 33) - 16) / 16.0f;
            y[rnd() % 32] = m;
        } else if (kind == 5) { /* the same for q8_0 (max / 127) */
            const float m = (rnd() & 1 ? -1.0f : 1.0f) * s * (1.0f + 0.5f * fabsf(frand()));
            for (int i = 0; i < 32; i++) y[i] = m * (float)((int)(rnd() % 255) - 127) / 254.0f * 2.0f;
            y[rnd() % 32] = m;
        } else if (kind == 6) { /* every value of equal magnitude, signs random */
            for (int i = 0; i < 32; i++) y[i] = (rnd() & 1 ? -1.0f : 1.0f) * s;
        }
    }
}

/* The warp stores rows [0, N_ROWS) of x into cache c as KT, block by block, each lane its element
 * (e % 32 == lane), as kv_write_kernel and the fused writes do. */
template <int KT> static void warp_store(const float *x, uint8_t *c) {
    std::barrier<> bar(32);
    warp_bar = &bar;
    std::vector<std::thread> ts;
    for (int l = 0; l < 32; l++)
        ts.emplace_back([=] {
            lane_id = l;
            for (size_t e = (size_t)l; e < (size_t)N_ROWS * N_ROW; e += 32) kv_store<KT>(c, e, x[e]);
        });
    for (auto &t : ts) t.join();
}

template <int KT> static int check_type(const float *x, uint32_t qt, int *n) {
    const size_t bb = (size_t)kt_block_bytes(KT), bytes = (size_t)N_ROWS * N_ROW / 32 * bb;
    std::vector<uint8_t> ref(bytes), got(bytes, 0xAA), buf(bytes + 16);
    std::vector<float> deq((size_t)N_ROWS * N_ROW);
    int bad = 0;
    if (quant_quantize(qt, x, ref.data(), (int64_t)N_ROWS * N_ROW) != BRISK_OK ||
        quant_dequantize(qt, ref.data(), deq.data(), (int64_t)N_ROWS * N_ROW) != BRISK_OK) {
        printf("FAIL quantize type %u\n", qt);
        return 1;
    }
    warp_store<KT>(x, got.data());
    for (size_t blk = 0; blk < bytes / bb; blk++, (*n)++)
        if (memcmp(&ref[blk * bb], &got[blk * bb], bb) && ++bad < 5) {
            printf("FAIL kv_store<%d> block %zu (row %zu):", KT, blk, blk / (N_ROW / 32));
            for (size_t i = 0; i < bb; i++) printf(" %02x/%02x", ref[blk * bb + i], got[blk * bb + i]);
            printf("\n");
        }
    /* the readers, with the cache at every 2-byte alignment of an 8-byte word */
    for (int off = 0; off < 8; off += 2) {
        uint8_t *c = buf.data() + off;
        memcpy(c, ref.data(), bytes);
        for (size_t e = 0; e < (size_t)N_ROWS * N_ROW; e += 8, (*n)++) {
            float v[8];
            kvq_cvt8<KT>(kvq_load8<KT>(c, (int64_t)e), v);
            bool ok = !memcmp(v, &deq[e], sizeof v);
            for (int i = 0; i < 8; i++) {
                const float a = kv_at<KT>(c, e + i);
                ok &= !memcmp(&a, &deq[e + i], 4);
            }
            const uint4 h = kvq_h8<KT>(kvq_load8<KT>(c, (int64_t)e)); /* the tensor-core kernels' f16 */
            const uint32_t hw[4] = {h.x, h.y, h.z, h.w};
            for (int i = 0; i < 8; i++) ok &= (uint16_t)(hw[i / 2] >> 16 * (i % 2)) == __float2half_rn(deq[e + i]);
            if (!ok && ++bad < 5) printf("FAIL kvq_load8/kvq_cvt8/kvq_h8/kv_at<%d> off %d element %zu\n", KT, off, e);
        }
    }
    return bad;
}

int main(void) {
    std::vector<float> x((size_t)N_ROWS * N_ROW);
    for (int r = 0; r < N_ROWS; r++) make_row(r, &x[(size_t)r * N_ROW]);
    int n = 0, bad = 0;
    bad += check_type<KT_Q8_0>(x.data(), QT_Q8_0, &n);
    bad += check_type<KT_Q4_0>(x.data(), QT_Q4_0, &n);
    printf("%d kv blocks and 8-value groups compared, %d mismatches\n", n, bad);
    return bad != 0;
}
