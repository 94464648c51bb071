/* cpu_dot_avx2.c — the x86 kernels (cpu_dot_x86.h) built for AVX2+FMA+F16C
 * with maddubs int8 products. Compiled with -mavx2 -mfma -mf16c. */
#if defined(__x86_64__) && defined(__AVX2__)
#define KNAME(x) x##_avx2
#define KATTR
#define KVNNI 0
#include "backend/cpu/cpu_dot_x86.h"
#include "backend/cpu/cpu_dot_isa.h"

cpu_vec_dot_fn cpu_dot_avx2_get(uint32_t weight_type) { return table_get_avx2(weight_type); }

/* quantize_row_q8_K, 8 lanes at a time, bitwise the reference's (quant.c), as
 * cpu_q8_K_from_float_avx512: the signed value of the first largest |x|, -127/max, products
 * rounded half to even (vcvtps2dq under the default rounding mode), capped at 127, sums per 16.
 * The reference's scalar loop was a twentieth of an IQ4_XS prompt on AVX2 (every matrix's
 * activations go through it). */
void cpu_q8_K_from_float_avx2(const float *x, void *vy, int64_t n) {
    blk_q8_K *y = vy;
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    for (int64_t b = 0; b < n / 256; b++, x += 256) {
        __m256 am = _mm256_setzero_ps();
        for (int i = 0; i < 32; i++) am = _mm256_max_ps(_mm256_and_ps(_mm256_loadu_ps(x + 8 * i), absm), am);
        __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(am), _mm256_extractf128_ps(am, 1));
        m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
        const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
        if (!(amax > 0.0f)) {
            memset(&y[b], 0, sizeof y[b]);
            continue;
        }
        float max = 0.0f;
        for (int i = 0; i < 32; i++) {
            const int m = _mm256_movemask_ps(
                _mm256_cmp_ps(_mm256_and_ps(_mm256_loadu_ps(x + 8 * i), absm), _mm256_set1_ps(amax), _CMP_EQ_OQ));
            if (m) {
                max = x[8 * i + __builtin_ctz((unsigned)m)];
                break;
            }
        }
        const float iscale = -127.f / max;
        const __m256 is = _mm256_set1_ps(iscale);
        const __m256i c127 = _mm256_set1_epi32(127), order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
        for (int i = 0; i < 8; i++) { /* 32 elements: sub-sums 2i, 2i + 1 */
            __m256i v[4];
            for (int k = 0; k < 4; k++)
                v[k] = _mm256_min_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(is, _mm256_loadu_ps(x + 32 * i + 8 * k))), c127);
            /* in-lane packs, then the dwords back in element order */
            const __m256i q = _mm256_packs_epi16(_mm256_packs_epi32(v[0], v[1]), _mm256_packs_epi32(v[2], v[3]));
            _mm256_storeu_si256((__m256i *)(y[b].qs + 32 * i), _mm256_permutevar8x32_epi32(q, order));
            for (int h = 0; h < 2; h++) {
                const __m256i s8 = _mm256_add_epi32(v[2 * h], v[2 * h + 1]);
                __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
                s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
                s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
                y[b].bsums[2 * i + h] = (int16_t)_mm_cvtsi128_si32(s4);
            }
        }
        y[b].d = 1 / iscale;
    }
}
#else
#include "backend/cpu/cpu_dot_isa.h"
cpu_vec_dot_fn cpu_dot_avx2_get(uint32_t weight_type) { return NULL; }
void cpu_q8_K_from_float_avx2(const float *x, void *y, int64_t n) {}
#endif
