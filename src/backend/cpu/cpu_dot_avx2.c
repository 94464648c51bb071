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

/* ggml's x86 quantize_row_q8_0 / q8_1 (cpu_dot.c's q8_block_cpu), 8 lanes at a time and bitwise:
 * amax of |x| (max is exact in any order), id = 127 / amax, products rounded half to even
 * (vcvtps2dq under the default rounding mode, as lrintf), the sum of the quants for q8_1. The
 * scalar loop with its fmaxf and lrintf calls was 2.4% of a 2-thread Q4_0 decode. */
static inline void q8_block_avx2(const float *x, uint16_t *d_out, uint16_t *s_out, int8_t *qs) {
    const __m256 absm = _mm256_castsi256_ps(_mm256_set1_epi32(0x7FFFFFFF));
    __m256 v[4], am = _mm256_setzero_ps();
    for (int k = 0; k < 4; k++) {
        v[k] = _mm256_loadu_ps(x + 8 * k);
        am = _mm256_max_ps(am, _mm256_and_ps(v[k], absm));
    }
    __m128 m4 = _mm_max_ps(_mm256_castps256_ps128(am), _mm256_extractf128_ps(am, 1));
    m4 = _mm_max_ps(m4, _mm_movehl_ps(m4, m4));
    const float amax = _mm_cvtss_f32(_mm_max_ss(m4, _mm_movehdup_ps(m4)));
    const float d = amax / 127.f, id = amax != 0.0f ? 127.f / amax : 0.0f;
    *d_out = _cvtss_sh(d, _MM_FROUND_TO_NEAREST_INT);
    const __m256 is = _mm256_set1_ps(id);
    __m256i q[4];
    for (int k = 0; k < 4; k++) q[k] = _mm256_cvtps_epi32(_mm256_mul_ps(v[k], is));
    const __m256i p = _mm256_packs_epi16(_mm256_packs_epi32(q[0], q[1]), _mm256_packs_epi32(q[2], q[3]));
    _mm256_storeu_si256((__m256i *)qs, _mm256_permutevar8x32_epi32(p, _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7)));
    if (s_out) {
        const __m256i s8 = _mm256_add_epi32(_mm256_add_epi32(q[0], q[1]), _mm256_add_epi32(q[2], q[3]));
        __m128i s4 = _mm_add_epi32(_mm256_castsi256_si128(s8), _mm256_extracti128_si256(s8, 1));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0x4E));
        s4 = _mm_add_epi32(s4, _mm_shuffle_epi32(s4, 0xB1));
        *s_out = _cvtss_sh(d * (float)_mm_cvtsi128_si32(s4), _MM_FROUND_TO_NEAREST_INT);
    }
}

void cpu_q8_0_from_float_avx2(const float *x, void *vy, int64_t n) {
    blk_q8_0 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) q8_block_avx2(x + 32 * i, &y[i].d, NULL, y[i].qs);
}

void cpu_q8_1_from_float_avx2(const float *x, void *vy, int64_t n) {
    blk_q8_1 *y = vy;
    for (int64_t i = 0; i < n / 32; i++) q8_block_avx2(x + 32 * i, &y[i].d, &y[i].s, y[i].qs);
}
#else
#include "backend/cpu/cpu_dot_isa.h"
cpu_vec_dot_fn cpu_dot_avx2_get(uint32_t weight_type) { return NULL; }
void cpu_q8_K_from_float_avx2(const float *x, void *y, int64_t n) {}
void cpu_q8_0_from_float_avx2(const float *x, void *y, int64_t n) {}
void cpu_q8_1_from_float_avx2(const float *x, void *y, int64_t n) {}
#endif
