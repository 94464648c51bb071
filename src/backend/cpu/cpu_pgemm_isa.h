/* cpu_pgemm_isa.h — private: one table of packed-panel prompt GEMM kernels
 * per instruction set (cpu_pgemm_avx512.c, cpu_pgemm_avx2.c), with the
 * meaning of cpu_pgemm.h's functions of the same names; cpu_pgemm.c picks
 * the table of the ISA cpu_dot_isa() chose. Also the K-quant unpackers both
 * tables use (AVX2 intrinsics; include only from files built for AVX2 or
 * above). */
#ifndef BK_CPU_PGEMM_ISA_H
#define BK_CPU_PGEMM_ISA_H
#include <stddef.h>
#include <stdint.h>

typedef struct cpu_pgemm_ops {
    int (*tile_tokens)(uint32_t wtype);
    size_t (*act_bytes)(uint32_t wtype, int64_t k);
    size_t (*panel_bytes)(uint32_t wtype, int64_t k);
    void (*pack_act)(uint32_t wtype, int64_t k, const void *xq, size_t x_stride, int nt, void *tile);
    void (*pack_panel)(uint32_t wtype, int64_t k, const void *w, size_t row_bytes, int nr, void *panel);
    void (*tile)(uint32_t wtype, int64_t k, const void *panel, const void *tile, float *out);
} cpu_pgemm_ops;

extern const cpu_pgemm_ops cpu_pgemm_avx512, cpu_pgemm_avx2;

#if defined(CPU_PGEMM_UNPACKERS) && defined(__x86_64__) && defined(__AVX2__)
#include <immintrin.h>

#include "quant/quant.h"

/* Row r of a 16-row panel's sub-block scales, Q4_K / Q5_K (their d, dmin and scales lead both
 * blocks): dsc[16 s + r] = d * sc_s, dmm[16 s + r] = dmin * m_s. */
static inline void kq_scales_min(const void *blk, int r, float *dsc, float *dmm) {
    const blk_q4_K *a = (const blk_q4_K *)blk;
    const float d = quant_f16_to_f32(a->d), dmin = quant_f16_to_f32(a->dmin);
    for (int s = 0; s < 8; s++) {
        uint8_t sc, m;
        quant_k4_scale_min(s, a->scales, &sc, &m);
        dsc[16 * s + r] = d * (float)sc;
        dmm[16 * s + r] = dmin * (float)m;
    }
}

/* One row's Q4_K / Q5_K (qh5) / Q6_K block -> its unsigned quants in element order. */
static inline void unpack_q45_K(const uint8_t *blk, int qh5, uint8_t out[256]) {
    const uint8_t *qs = qh5 ? ((const blk_q5_K *)(const void *)blk)->qs : ((const blk_q4_K *)(const void *)blk)->qs;
    const __m256i m4 = _mm256_set1_epi8(15), one = _mm256_set1_epi8(1);
    const __m256i qh = qh5 ? _mm256_loadu_si256((const __m256i *)((const blk_q5_K *)(const void *)blk)->qh)
                           : _mm256_setzero_si256();
    for (int c = 0; c < 4; c++) {
        const __m256i q = _mm256_loadu_si256((const __m256i *)(qs + 32 * c));
        __m256i lo = _mm256_and_si256(q, m4), hi = _mm256_and_si256(_mm256_srli_epi16(q, 4), m4);
        if (qh5) { /* bit 2c -> low half's bit 4, bit 2c+1 -> high half's (per byte: shift by 16-bit then mask) */
            lo = _mm256_or_si256(lo, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c), one), 4));
            hi = _mm256_or_si256(hi, _mm256_slli_epi16(_mm256_and_si256(_mm256_srli_epi16(qh, 2 * c + 1), one), 4));
        }
        _mm256_storeu_si256((__m256i *)(out + 64 * c), lo);
        _mm256_storeu_si256((__m256i *)(out + 64 * c + 32), hi);
    }
}

static inline void unpack_q6_K(const blk_q6_K *b, uint8_t out[256]) {
    const __m256i m4 = _mm256_set1_epi8(15), m3 = _mm256_set1_epi8(3);
    for (int h = 0; h < 2; h++) {
        const __m256i l0 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h));
        const __m256i l1 = _mm256_loadu_si256((const __m256i *)(b->ql + 64 * h + 32));
        const __m256i qh = _mm256_loadu_si256((const __m256i *)(b->qh + 32 * h));
        for (int j = 0; j < 4; j++) {
            const __m256i l = (j & 1) ? l1 : l0;
            const __m256i nib = j < 2 ? _mm256_and_si256(l, m4) : _mm256_and_si256(_mm256_srli_epi16(l, 4), m4);
            const __m256i hb = _mm256_and_si256(_mm256_srli_epi16(qh, 2 * j), m3);
            _mm256_storeu_si256((__m256i *)(out + 128 * h + 32 * j), _mm256_or_si256(nib, _mm256_slli_epi16(hb, 4)));
        }
    }
}
#endif
#endif
