/* cpu_dot_avx512.c — the x86 kernels (cpu_dot_x86.h) built for AVX-512
 * (F/BW/VL/DQ encodings, 32 vector registers) with VNNI vpdpbusd int8
 * products; cpu_dot_init() selects this ISA only when the CPU has VNNI. */
#if defined(__x86_64__) && defined(__AVX512F__)
#define KNAME(x) x##_avx512
#define KATTR __attribute__((target("avx512vnni")))
#define KVNNI 1
#include "backend/cpu/cpu_dot_x86.h"
#include "backend/cpu/cpu_gemm_x86.h"
#include "backend/cpu/cpu_dot_isa.h"

cpu_vec_dot_fn cpu_dot_avx512_get(uint32_t weight_type) { return table_get_avx512(weight_type); }
cpu_gemm_fn cpu_gemm_avx512_get(uint32_t weight_type) { return gemm_table_get_avx512(weight_type); }

/* quantize_row_q8_K, 16 lanes at a time, bitwise the reference's
 * (quant.c): the signed value of the first largest |x|, -127/max, products
 * rounded half to even (vcvtps2dq under the default rounding mode, as the
 * reference's magic-number rounding), capped at 127, sums per 16. */
void cpu_q8_K_from_float_avx512(const float *x, void *vy, int64_t n) {
    blk_q8_K *y = vy;
    for (int64_t b = 0; b < n / 256; b++, x += 256) {
        __m512 am = _mm512_setzero_ps();
        for (int i = 0; i < 16; i++) am = _mm512_max_ps(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * i)), am);
        const float amax = _mm512_reduce_max_ps(am);
        if (!(amax > 0.0f)) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        float max = 0.0f;
        for (int i = 0; i < 16; i++) {
            const __mmask16 m = _mm512_cmp_ps_mask(_mm512_abs_ps(_mm512_loadu_ps(x + 16 * i)), _mm512_set1_ps(amax), _CMP_EQ_OQ);
            if (m) {
                max = x[16 * i + __builtin_ctz(m)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m512 is = _mm512_set1_ps(iscale);
        for (int i = 0; i < 16; i++) {
            __m512i v = _mm512_cvtps_epi32(_mm512_mul_ps(is, _mm512_loadu_ps(x + 16 * i)));
            v = _mm512_min_epi32(v, _mm512_set1_epi32(127));
            _mm_storeu_si128((__m128i *)(y[b].qs + 16 * i), _mm512_cvtepi32_epi8(v));
            y[b].bsums[i] = (int16_t)_mm512_reduce_add_epi32(v);
        }
        y[b].d = 1 / iscale;
    }
}
#else
#include "backend/cpu/cpu_dot_isa.h"
cpu_vec_dot_fn cpu_dot_avx512_get(uint32_t weight_type) { return NULL; }
cpu_gemm_fn cpu_gemm_avx512_get(uint32_t weight_type) { return NULL; }
void cpu_q8_K_from_float_avx512(const float *x, void *vy, int64_t n) {}
#endif
