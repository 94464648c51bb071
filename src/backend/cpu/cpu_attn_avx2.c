/* cpu_attn_avx2.c — attention with AVX2 + FMA + F16C, for cores without AVX-512 (and, on those,
 * for the q8_0 / q4_0 caches, which the AVX-512 kernels leave):
 * - cpu_attn_head_avx2: a token's GQA group, or the groups of several adjacent KV heads (decode,
 *   short batches), bitwise the portable loop of cpu_backend.c and so cpu_attn_avx512.c's version:
 *   its 16 lanes as two 8-wide halves, reduce16's tree, the same polynomial exp scaled as ldexpf
 *   scales, the quantized rows dequantized to the same values;
 * - cpu_attn_block_avx2: query-blocked attention (cpu_attn_block), the algorithm of
 *   cpu_attn_avx512.c's attn_block (queries in vector lanes, one pass over the cache with an online
 *   softmax) in 8-wide vectors over 8-position tiles, so that a tile's scores and the running output
 *   fit AVX2's 16 registers.
 *
 * Why: without it, prompts on an AVX2-only core ran the per-token loop of cpu_backend.c, one
 * head at a time: brisk-kjv-6m prefilled 8,192 tokens at 148 tokens/s on a 2-core AMD EPYC, and
 * the agents' 7-8K-token prompts of t_agents.sh passed their 120 s limit there. A block of more
 * than 8 lanes runs as two halves of 8 (its K/V tiles converted once per half). */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_attn.h"

/* A cache row's element type (a constant where the inner loops take it): f32, f16, or the q8_0 /
 * q4_0 blocks of 32 (a head's row is whole blocks). */
enum { KT_F32, KT_F16, KT_Q8_0, KT_Q4_0 };

/* Elements i .. i + 7 of a row as f32 (i % 8 == 0). The quantized types give what quant_dequantize
 * gives (the integer times the block's scale, one rounding), which the portable loop reads. */
static inline __m256 load8(const void *row, int i, const int kt) {
    if (kt == KT_F16) return _mm256_cvtph_ps(_mm_loadu_si128((const __m128i *)((const uint16_t *)row + i)));
    if (kt == KT_F32) return _mm256_loadu_ps((const float *)row + i);
    const uint8_t *b = (const uint8_t *)row + (size_t)(i / 32) * (kt == KT_Q8_0 ? 34 : 18); /* f16 scale, then quants */
    uint16_t dh;
    memcpy(&dh, b, 2);
    const __m256 d = _mm256_set1_ps(_cvtsh_ss(dh));
    __m256i x;
    if (kt == KT_Q8_0) {
        x = _mm256_cvtepi8_epi32(_mm_loadl_epi64((const __m128i *)(b + 2 + i % 32)));
    } else { /* elements 0-15 in the low nibbles of the 16 bytes, 16-31 in the high */
        __m128i q = _mm_loadl_epi64((const __m128i *)(b + 2 + i % 16));
        if (i % 32 >= 16) q = _mm_srli_epi16(q, 4);
        x = _mm256_sub_epi32(_mm256_cvtepu8_epi32(_mm_and_si128(q, _mm_set1_epi8(0x0F))), _mm256_set1_epi32(8));
    }
    return _mm256_mul_ps(_mm256_cvtepi32_ps(x), d);
}

/* The KT_ of a cache type, -1 for one this file does not read. */
static inline int kt_of(int kv_type) {
    return kv_type == BRISK_KV_F16 ? KT_F16 : kv_type == BRISK_KV_F32 ? KT_F32 : kv_type == BRISK_KV_Q8_0 ? KT_Q8_0
         : kv_type == BRISK_KV_Q4_0 ? KT_Q4_0 : -1;
}

/* Bytes of a head's row of hd elements. */
static inline int row_bytes_of(int kt, int hd) {
    return kt == KT_F32 ? 4 * hd : kt == KT_F16 ? 2 * hd : hd / 32 * (kt == KT_Q8_0 ? 34 : 18);
}

/* reduce16 (cpu_math.h) of the 16 lanes lo (0-7) and hi (8-15): lanes i + 8, i + 4, then pairs */
static inline float reduce16_halves(__m256 lo, __m256 hi) {
    const __m256 a = _mm256_add_ps(hi, lo);
    const __m128 b = _mm_add_ps(_mm256_extractf128_ps(a, 1), _mm256_castps256_ps128(a));
    const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b)); /* b0 + b2, b1 + b3 */
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

/* exp_poly (cpu_math.h) of 8 lanes, bitwise (the block kernel's online softmax uses it too): ldexpf's scaling as one or two exact power-of-two
 * products (the second rounds once, as ldexpf does, where the result leaves the normal range);
 * 0 or inf beyond |n| > 192, NaN's n included. */
static inline __m256 exp_poly8(__m256 x) {
    const __m256 shift = _mm256_set1_ps(0x1.8p23f);
    __m256 z = _mm256_fmadd_ps(x, _mm256_set1_ps(0x1.715476p+0f), shift);
    __m256 n = _mm256_sub_ps(z, shift);
    __m256 b = _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.7f7d1cp-20f),
                                _mm256_fnmadd_ps(n, _mm256_set1_ps(0x1.62e4p-1f), x));
    __m256 u = _mm256_mul_ps(b, b);
    __m256 j = _mm256_fmadd_ps(
        _mm256_fmadd_ps(_mm256_fmadd_ps(_mm256_set1_ps(0x1.0e4020p-7f), b, _mm256_set1_ps(0x1.573e2ep-5f)), u,
                        _mm256_fmadd_ps(_mm256_set1_ps(0x1.555e66p-3f), b, _mm256_set1_ps(0x1.fffdb6p-2f))),
        u, _mm256_fmadd_ps(_mm256_set1_ps(0x1.ffffecp-1f), b, _mm256_set1_ps(1.0f)));
    const __m256 ok = _mm256_cmp_ps(_mm256_andnot_ps(_mm256_set1_ps(-0.0f), n), _mm256_set1_ps(192.0f), _CMP_LE_OQ);
    const __m256i ni = _mm256_cvtps_epi32(_mm256_and_ps(n, ok)); /* (0 where not ok) */
    const __m256i lo = _mm256_cmpgt_epi32(_mm256_set1_epi32(-126), ni), hi = _mm256_cmpgt_epi32(ni, _mm256_set1_epi32(127));
    /* k: 100 below the normal range, -100 above it, else 0; 2^(n + k) is then a normal power */
    const __m256i k = _mm256_sub_epi32(_mm256_and_si256(lo, _mm256_set1_epi32(100)), _mm256_and_si256(hi, _mm256_set1_epi32(100)));
    const __m256 p = _mm256_castsi256_ps(_mm256_slli_epi32(_mm256_add_epi32(_mm256_add_epi32(ni, k), _mm256_set1_epi32(127)), 23));
    __m256 r = _mm256_mul_ps(j, p);
    r = _mm256_blendv_ps(r, _mm256_mul_ps(r, _mm256_set1_ps(0x1p-100f)), _mm256_castsi256_ps(lo));
    r = _mm256_blendv_ps(r, _mm256_mul_ps(r, _mm256_set1_ps(0x1p100f)), _mm256_castsi256_ps(hi));
    const __m256 alt = _mm256_and_ps(_mm256_cmp_ps(n, _mm256_setzero_ps(), _CMP_GT_OQ), _mm256_set1_ps(INFINITY));
    return _mm256_blendv_ps(alt, r, ok);
}

/* Positions a cache row is asked for ahead (K), and the V sums' block (its rows stay in L1 or L2). */
enum { KV_PF = 8, V_BLOCK = 64 };

static inline void prefetch_row(const void *row, int bytes) {
    for (int o = 0; o < bytes; o += 64) _mm_prefetch((const char *)row + o, _MM_HINT_T0);
}

/* Lane r (of 16) sums the positions p = r mod 16 in order, as the portable loop does. A block of
 * V_BLOCK positions keeps a lane's sums of C column chunks (8 columns each) in registers for its
 * V_BLOCK / 16 positions, for NG heads of the group at once (constants, so that acc stays in
 * registers): one load and store of the sums per block, where a load and store per position and
 * column chunk made this loop most of the decode attention's time on AVX2. A position's score is
 * broadcast once for C chunks, and C = 4 chunks of f16 are one cache line of the row, read in one
 * go (C = 1 read a line at four different times and broadcast a score for every 8 columns).
 * vr: the block's rows (of the unit's first KV head), off: the bytes from there to this KV head's. */
static inline __attribute__((always_inline)) void v_block(const void *const *vr, size_t off, int b0, int b1, int hd,
                                                          const int kt, const float *sc, size_t sc_stride, float *ln,
                                                          size_t lstride, const int NG, const int C) {
    for (int i = 0; i < hd; i += 8 * C)
        for (int r = 0; r < 16; r++) {
            __m256 acc[16]; /* acc[c * NG + g]: flat and small, so that the compiler keeps it in registers */
            _Pragma("GCC unroll 8") for (int c = 0; c < C; c++)
                _Pragma("GCC unroll 8") for (int g = 0; g < NG; g++) acc[c * NG + g] = _mm256_loadu_ps(ln + g * lstride + (size_t)r * hd + i + 8 * c);
            for (int p = b0 + r; p < b1; p += 16) {
                const char *row = (const char *)vr[p - b0] + off;
                __m256 s[8];
                _Pragma("GCC unroll 8") for (int g = 0; g < NG; g++) s[g] = _mm256_set1_ps(sc[g * sc_stride + p]);
                _Pragma("GCC unroll 8") for (int c = 0; c < C; c++) {
                    const __m256 v = load8(row, i + 8 * c, kt);
                    _Pragma("GCC unroll 8") for (int g = 0; g < NG; g++) acc[c * NG + g] = _mm256_fmadd_ps(v, s[g], acc[c * NG + g]);
                }
            }
            _Pragma("GCC unroll 8") for (int c = 0; c < C; c++)
                _Pragma("GCC unroll 8") for (int g = 0; g < NG; g++)
                    _mm256_storeu_ps(ln + g * lstride + (size_t)r * hd + i + 8 * c, acc[c * NG + g]);
        }
}

/* v_block for ng (<= 8) heads, with as many chunks a pass as keep C * NG sums, the NG scores and a
 * row's chunk within AVX2's 16 registers (C divides hd / 8); the cache's type a constant too, so that
 * no branch is left in the loop. */
static inline void v_block_heads(const void *const *vr, size_t off, int b0, int b1, int hd, int kt, const float *sc,
                                 size_t sc_stride, float *ln, size_t lstride, int ng) {
#define VB1(NG, C, KT) v_block(vr, off, b0, b1, hd, KT, sc, sc_stride, ln, lstride, NG, C)
#define VB(NG, C) (kt == KT_F16 ? VB1(NG, C, KT_F16) : kt == KT_F32 ? VB1(NG, C, KT_F32) \
                   : kt == KT_Q8_0 ? VB1(NG, C, KT_Q8_0) : VB1(NG, C, KT_Q4_0))
    switch (ng) {
    case 1: if (hd % 64 == 0) VB(1, 8); else VB(1, 2); break;
    case 2: if (hd % 32 == 0) VB(2, 4); else VB(2, 2); break;
    case 3: VB(3, 2); break;
    case 4: VB(4, 2); break;
    case 5: VB(5, 1); break;
    case 6: VB(6, 1); break;
    case 7: VB(7, 1); break;
    default: VB(8, 1); break;
    }
#undef VB
#undef VB1
}

/* The 16-lane products of position p's K row kr with NG (<= 4) query heads q (consecutive rows),
 * the row loaded and converted once for all of them: per head the portable loop's sums in its
 * order (lo: the 16-column chunks' first halves, hi: their second), kept as hi + lo, the first
 * step of reduce16_halves, in sums[g * 8 + slot] until reduce8 finishes eight positions at once. */
static inline __attribute__((always_inline)) void k_sums(const float *q, int hd, const void *kr, const int kt,
                                                         __m256 *sums, int slot, const int NG) {
    __m256 lo[4], hi[4];
    for (int g = 0; g < NG; g++) lo[g] = hi[g] = _mm256_setzero_ps();
    for (int i = 0; i < hd; i += 16) {
        const __m256 k0 = load8(kr, i, kt), k1 = load8(kr, i + 8, kt);
        for (int g = 0; g < NG; g++) {
            const float *qg = q + (size_t)g * hd + i;
            lo[g] = _mm256_fmadd_ps(_mm256_loadu_ps(qg), k0, lo[g]);
            hi[g] = _mm256_fmadd_ps(_mm256_loadu_ps(qg + 8), k1, hi[g]);
        }
    }
    for (int g = 0; g < NG; g++) sums[g * 8 + slot] = _mm256_add_ps(hi[g], lo[g]);
}

/* k_sums for the G query heads of one KV head, four at a time (the cache's type a constant). */
static inline void k_sums_group(const float *q, int hd, const void *kr, int kt, __m256 *sums, int slot, int G) {
#define KS(NG) (kt == KT_F16 ? k_sums(qg, hd, kr, KT_F16, sg, slot, NG) : kt == KT_F32 ? k_sums(qg, hd, kr, KT_F32, sg, slot, NG) \
                : kt == KT_Q8_0 ? k_sums(qg, hd, kr, KT_Q8_0, sg, slot, NG) : k_sums(qg, hd, kr, KT_Q4_0, sg, slot, NG))
    for (int g0 = 0; g0 < G; g0 += 4) {
        const float *qg = q + (size_t)g0 * hd;
        __m256 *sg = sums + g0 * 8;
        switch (G - g0 < 4 ? G - g0 : 4) {
        case 1: KS(1); break;
        case 2: KS(2); break;
        case 3: KS(3); break;
        default: KS(4); break;
        }
    }
#undef KS
}

/* The rest of reduce16_halves for eight positions' hi + lo vectors a[0..7] at once, transposed: the
 * same additions of the same pairs (lanes i + 4, then i + 2, then i + 1), so the same bits, in 15
 * shuffles and 7 additions where eight positions one at a time took 24 and 24. */
static inline __m256 reduce8(const __m256 *a) {
    __m256 b[4]; /* b[j]: positions j (low half) and j + 4 (high half), lanes i + (i + 4) */
    for (int j = 0; j < 4; j++)
        b[j] = _mm256_add_ps(_mm256_permute2f128_ps(a[j], a[j + 4], 0x31), _mm256_permute2f128_ps(a[j], a[j + 4], 0x20));
    /* c02: lanes 0 + 2, 1 + 3 of positions 0, 2 (low half) and 4, 6 (high); c13 of 1, 3 and 5, 7 */
    const __m256 c02 = _mm256_add_ps(_mm256_shuffle_ps(b[0], b[2], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm256_shuffle_ps(b[0], b[2], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m256 c13 = _mm256_add_ps(_mm256_shuffle_ps(b[1], b[3], _MM_SHUFFLE(1, 0, 1, 0)),
                                     _mm256_shuffle_ps(b[1], b[3], _MM_SHUFFLE(3, 2, 3, 2)));
    const __m256 r = _mm256_add_ps(_mm256_shuffle_ps(c02, c13, _MM_SHUFFLE(2, 0, 2, 0)),
                                   _mm256_shuffle_ps(c02, c13, _MM_SHUFFLE(3, 1, 3, 1))); /* 0 2 1 3 | 4 6 5 7 */
    return _mm256_permute_ps(r, _MM_SHUFFLE(3, 1, 2, 0));
}

/* reduce16_halves of one position's hi + lo vector a. */
static inline float reduce1(__m256 a) {
    const __m128 b = _mm_add_ps(_mm256_extractf128_ps(a, 1), _mm256_castps256_ps128(a));
    const __m128 c = _mm_add_ps(b, _mm_movehl_ps(b, b));
    return _mm_cvtss_f32(_mm_add_ss(c, _mm_shuffle_ps(c, c, 1)));
}

int cpu_attn_head_avx2(const cpu_attn_head *a) {
    const int kt = kt_of(a->kv->kv_type), hd = a->hd, np = a->np, nq = a->n_q;
    const int G = a->group > 0 ? a->group : nq; /* query heads a KV head */
    if (kt < 0 || hd % (kt >= KT_Q8_0 ? 32 : 16) || nq < 1 || nq > CPU_ATTN_MAX_Q || G < 1 || nq % G ||
        (G == nq && nq > 16))
        return 0;
    const int H = nq / G, row_bytes = row_bytes_of(kt, hd); /* KV heads kvh .. kvh + H - 1: adjacent rows */
    float mx[CPU_ATTN_MAX_Q];
    __m256 mx8[CPU_ATTN_MAX_Q], sums[CPU_ATTN_MAX_Q * 8]; /* sums[g * 8 + p % 8]: k_sums of the last positions */
    for (int g = 0; g < nq; g++) mx8[g] = _mm256_set1_ps(-INFINITY);
    /* The K rows of the next KV_PF positions, asked for when found: a unit's rows of a position are
     * n_head_kv rows from the next position's, too far apart for the hardware prefetchers. */
    const char *kp[KV_PF];
    for (int p = 0; p < KV_PF && p < np; p++) kp[p] = cpu_kv_row(a->kv, a->kv->k, a->table, p, a->kvh, a->n_head_kv, hd);
    const __m256 vscale = _mm256_set1_ps(a->scale);
    for (int p = 0; p < np; p++) {
        const char *kr = kp[p % KV_PF];
        if (p + KV_PF < np) {
            kp[p % KV_PF] = cpu_kv_row(a->kv, a->kv->k, a->table, p + KV_PF, a->kvh, a->n_head_kv, hd);
            prefetch_row(kp[p % KV_PF], H * row_bytes);
        }
        for (int h = 0; h < H; h++)
            k_sums_group(a->q + (size_t)h * G * hd, hd, kr + (size_t)h * row_bytes, kt, sums + h * G * 8, p % 8, G);
        if (p % 8 == 7)
            for (int g = 0; g < nq; g++) { /* (max_ps(s, mx): a NaN score is skipped, as s > mx skips it) */
                const __m256 s8 = _mm256_mul_ps(reduce8(sums + g * 8), vscale);
                _mm256_storeu_ps(a->scores + g * a->sc_stride + p - 7, s8);
                mx8[g] = _mm256_max_ps(s8, mx8[g]);
            }
    }
    for (int g = 0; g < nq; g++) {
        float m8[8];
        _mm256_storeu_ps(m8, mx8[g]);
        mx[g] = m8[0];
        for (int u = 1; u < 8; u++) mx[g] = m8[u] > mx[g] ? m8[u] : mx[g];
        for (int p = np & ~7; p < np; p++) { /* the last np % 8 positions one at a time */
            const float sc = reduce1(sums[g * 8 + p % 8]) * a->scale;
            a->scores[g * a->sc_stride + p] = sc;
            if (sc > mx[g]) mx[g] = sc;
        }
    }
    for (int g = 0; g < nq; g++) { /* exp in chunks of 16, each reduced like a vector, summed in double */
        float *sc = a->scores + g * a->sc_stride;
        double sum = 0;
        const __m256 vmx = _mm256_set1_ps(mx[g]);
        for (int p0 = 0; p0 < np; p0 += 16) {
            float l16[16] = {0};
            const int m = np - p0 < 16 ? np - p0 : 16;
            memcpy(l16, sc + p0, sizeof(float) * (size_t)m);
            __m256 e0 = exp_poly8(_mm256_sub_ps(_mm256_loadu_ps(l16), vmx));
            __m256 e1 = exp_poly8(_mm256_sub_ps(_mm256_loadu_ps(l16 + 8), vmx));
            _mm256_storeu_ps(l16, e0);
            _mm256_storeu_ps(l16 + 8, e1);
            for (int u = m; u < 16; u++) l16[u] = 0;
            memcpy(sc + p0, l16, sizeof(float) * (size_t)m);
            sum += (double)reduce16_halves(_mm256_loadu_ps(l16), _mm256_loadu_ps(l16 + 8));
        }
        const float inv = (float)(1.0 / sum);
        for (int p = 0; p < np; p++) sc[p] *= inv;
    }
    const size_t lstride = (size_t)16 * hd; /* one head's lanes */
    const int full = np & ~15;
    memset(a->lanes, 0, (size_t)nq * lstride * sizeof(float));
    /* v_block's sums, up to 8 heads at a time; the block after is asked for while one runs */
    const void *vb[2][V_BLOCK];
    for (int p = 0; p < V_BLOCK && p < full; p++) vb[0][p] = cpu_kv_row(a->kv, a->kv->v, a->table, p, a->kvh, a->n_head_kv, hd);
    for (int b0 = 0, cur = 0; b0 < full; b0 += V_BLOCK, cur ^= 1) {
        const int b1 = b0 + V_BLOCK < full ? b0 + V_BLOCK : full;
        for (int p = b1; p < b1 + V_BLOCK && p < full; p++) { /* the next block's rows, asked for now */
            vb[cur ^ 1][p - b1] = cpu_kv_row(a->kv, a->kv->v, a->table, p, a->kvh, a->n_head_kv, hd);
            prefetch_row(vb[cur ^ 1][p - b1], H * row_bytes);
        }
        for (int g0 = 0; g0 < nq; g0 += 8) {
            const int h = g0 / G, ng = G - g0 % G < 8 ? G - g0 % G : 8; /* (8 heads at most, of one KV head) */
            float *ln = a->lanes + g0 * lstride;
            const float *sc = a->scores + g0 * a->sc_stride;
            const size_t off = (size_t)h * row_bytes;
            v_block_heads(vb[cur], off, b0, b1, hd, kt, sc, a->sc_stride, ln, lstride, ng);
            g0 += ng - 8; /* the next KV head's heads start a new run of 8 */
        }
    }
    for (int g = 0; g < nq; g++) {
        const float *lanes = a->lanes + g * lstride;
        float *out = a->out + (size_t)g * hd;
        for (int i = 0; i < hd; i += 8) {
            __m256 l[16];
            for (int r = 0; r < 16; r++) l[r] = _mm256_loadu_ps(lanes + (size_t)r * hd + i);
            for (int r = 0; r < 8; r++) l[r] = _mm256_add_ps(l[r + 8], l[r]);
            for (int r = 0; r < 4; r++) l[r] = _mm256_add_ps(l[r + 4], l[r]);
            _mm256_storeu_ps(out + i, _mm256_add_ps(_mm256_add_ps(l[0], l[2]), _mm256_add_ps(l[1], l[3])));
        }
    }
    for (int p = full; p < np; p++) {
        const char *vr = cpu_kv_row(a->kv, a->kv->v, a->table, p, a->kvh, a->n_head_kv, hd);
        for (int i = 0; i < hd; i += 8)
            for (int h = 0; h < H; h++) {
                const __m256 v = load8(vr + (size_t)h * row_bytes, i, kt);
                for (int g = h * G; g < (h + 1) * G; g++) {
                    float *o = a->out + (size_t)g * hd + i;
                    _mm256_storeu_ps(o, _mm256_fmadd_ps(v, _mm256_set1_ps(a->scores[g * a->sc_stride + p]), _mm256_loadu_ps(o)));
                }
            }
    }
    return 1;
}

/* Lanes [l0, l0 + 8) of the block (lanes past its nt * group repeat lane 0's query and are not
 * stored). Qt[i][lane] holds q pre-scaled, Ot[d][lane] the unnormalised output. */
static inline __attribute__((always_inline)) void attn_block8(const cpu_attn_block *a, const int hd, int l0) {
    const int L = a->nt * a->group, kt = kt_of(a->kv->kv_type);
    float *Qt = a->scratch, *Ot = Qt + 8 * hd, *Kf = Ot + 8 * hd, *Vf = Kf + 8 * hd;
    int32_t posl[8];
    int maxp = 0;
    for (int l = 0; l < 8; l++) {
        const int ll = l0 + l < L ? l0 + l : 0, tt = ll / a->group, g = ll % a->group;
        const float *q = a->q + (size_t)tt * a->tok_stride + (size_t)g * hd;
        for (int i = 0; i < hd; i++) Qt[i * 8 + l] = q[i] * a->scale;
        posl[l] = a->pos[tt];
        if (posl[l] > maxp) maxp = posl[l];
    }
    memset(Ot, 0, sizeof(float) * 8 * hd);
    const __m256i pv = _mm256_loadu_si256((const __m256i *)posl);
    __m256 m = _mm256_set1_ps(-INFINITY), lsum = _mm256_setzero_ps();
    for (int p0 = 0; p0 <= maxp; p0 += 8) {
        const int np = maxp + 1 - p0 < 8 ? maxp + 1 - p0 : 8;
        for (int j = 0; j < 8; j++) {
            float *kd = Kf + j * hd, *vd = Vf + j * hd;
            if (j >= np) { /* beyond the last position: masked below, kept finite */
                memset(kd, 0, sizeof(float) * hd);
                memset(vd, 0, sizeof(float) * hd);
                continue;
            }
            const void *kr = cpu_kv_row(a->kv, a->kv->k, a->table, p0 + j, a->kvh, a->n_head_kv, hd);
            const void *vr = cpu_kv_row(a->kv, a->kv->v, a->table, p0 + j, a->kvh, a->n_head_kv, hd);
            for (int i = 0; i < hd; i += 8) {
                _mm256_storeu_ps(kd + i, load8(kr, i, kt));
                _mm256_storeu_ps(vd + i, load8(vr, i, kt));
            }
        }
        __m256 s[8];
        for (int j = 0; j < 8; j++) s[j] = _mm256_setzero_ps();
        for (int i = 0; i < hd; i++) {
            const __m256 qv = _mm256_loadu_ps(Qt + i * 8);
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) s[j] = _mm256_fmadd_ps(qv, _mm256_broadcast_ss(Kf + j * hd + i), s[j]);
        }
        __m256 mx = m;
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) { /* causal mask: lane attends to p0 + j only if pos >= p0 + j */
            const __m256 ok = _mm256_castsi256_ps(_mm256_cmpgt_epi32(pv, _mm256_set1_epi32(p0 + j - 1)));
            s[j] = _mm256_blendv_ps(_mm256_set1_ps(-INFINITY), s[j], ok);
            mx = _mm256_max_ps(mx, s[j]);
        }
        const __m256 alpha = exp_poly8(_mm256_sub_ps(m, mx)); /* exp(-inf) = 0 on the first tile */
        __m256 ts = _mm256_setzero_ps();
#pragma GCC unroll 8
        for (int j = 0; j < 8; j++) {
            s[j] = exp_poly8(_mm256_sub_ps(s[j], mx));
            ts = _mm256_add_ps(ts, s[j]);
        }
        lsum = _mm256_fmadd_ps(lsum, alpha, ts);
        m = mx;
        for (int d = 0; d < hd; d++) {
            __m256 o = _mm256_mul_ps(_mm256_loadu_ps(Ot + d * 8), alpha);
#pragma GCC unroll 8
            for (int j = 0; j < 8; j++) o = _mm256_fmadd_ps(s[j], _mm256_broadcast_ss(Vf + j * hd + d), o);
            _mm256_storeu_ps(Ot + d * 8, o);
        }
    }
    float inv[8];
    _mm256_storeu_ps(inv, _mm256_div_ps(_mm256_set1_ps(1.0f), lsum));
    for (int l = 0; l < 8 && l0 + l < L; l++) {
        const int ll = l0 + l;
        float *o = a->out + (size_t)(ll / a->group) * a->tok_stride + (size_t)(ll % a->group) * hd;
        for (int d = 0; d < hd; d++) o[d] = Ot[d * 8 + l] * inv[l];
    }
}

/* Common head sizes as constants, as in cpu_attn_avx512.c. */
int cpu_attn_block_avx2(const cpu_attn_block *a) {
    const int L = a->nt * a->group;
    const int kt = kt_of(a->kv->kv_type);
    if (kt < 0 || a->hd % (kt >= KT_Q8_0 ? 32 : 16) || L < 1 || L > 16) return 0;
    for (int l0 = 0; l0 < L; l0 += 8) switch (a->hd) {
        case 64: attn_block8(a, 64, l0); break;
        case 128: attn_block8(a, 128, l0); break;
        case 256: attn_block8(a, 256, l0); break;
        default: attn_block8(a, a->hd, l0); break;
        }
    return 1;
}

/* swiglu_row (cpu_math.h) 8 lanes at a time, bitwise: exp_poly8 is exp_poly, the division and the
 * product are single IEEE operations; the tail past the last whole 16 goes through expf as there.
 * (The scalar loop called libm's ldexpf an element: 4.7% of a 1-thread qwen3-0.6b prompt.) */
void cpu_swiglu_avx2(const float *gate, const float *up, float *out, size_t n) {
    const size_t vec_end = n & ~(size_t)15;
    for (size_t i = 0; i < vec_end; i += 8) {
        const __m256 g = _mm256_loadu_ps(gate + i);
        const __m256 e = exp_poly8(_mm256_xor_ps(g, _mm256_set1_ps(-0.0f)));
        _mm256_storeu_ps(out + i, _mm256_mul_ps(_mm256_div_ps(g, _mm256_add_ps(_mm256_set1_ps(1.0f), e)),
                                                _mm256_loadu_ps(up + i)));
    }
    for (size_t i = vec_end; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}
