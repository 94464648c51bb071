/* cpu_attn_avx512.c — attention for one (token, head) with AVX-512: the
 * portable loop of cpu_backend.c, operation for operation, in 16-wide vectors. */
#include <immintrin.h>
#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_attn.h"


static inline __m512 load16(const void *row, int i, int f16) {
    return f16 ? _mm512_cvtph_ps(_mm256_loadu_si256((const __m256i *)((const uint16_t *)row + i)))
               : _mm512_loadu_ps((const float *)row + i);
}

/* The polynomial exp of cpu_backend.c, 16 at a time. */
static inline __m512 exp_poly16(__m512 x) {
    const __m512 shift = _mm512_set1_ps(0x1.8p23f);
    __m512 z = _mm512_fmadd_ps(x, _mm512_set1_ps(0x1.715476p+0f), shift);
    __m512 n = _mm512_sub_ps(z, shift);
    __m512 b = _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.7f7d1cp-20f),
                                _mm512_fnmadd_ps(n, _mm512_set1_ps(0x1.62e4p-1f), x));
    __m512 u = _mm512_mul_ps(b, b);
    __m512 j = _mm512_fmadd_ps(
        _mm512_fmadd_ps(_mm512_fmadd_ps(_mm512_set1_ps(0x1.0e4020p-7f), b, _mm512_set1_ps(0x1.573e2ep-5f)), u,
                        _mm512_fmadd_ps(_mm512_set1_ps(0x1.555e66p-3f), b, _mm512_set1_ps(0x1.fffdb6p-2f))),
        u, _mm512_fmadd_ps(_mm512_set1_ps(0x1.ffffecp-1f), b, _mm512_set1_ps(1.0f)));
    __m512 res = _mm512_scalef_ps(j, n);
    /* |n| > 192 or NaN (from -inf): 0 for n <= 0, inf above */
    __mmask16 ok = _mm512_cmp_ps_mask(_mm512_abs_ps(n), _mm512_set1_ps(192.0f), _CMP_LE_OQ);
    __m512 alt = _mm512_mask_blend_ps(_mm512_cmp_ps_mask(n, _mm512_setzero_ps(), _CMP_GT_OQ), _mm512_setzero_ps(),
                                      _mm512_set1_ps(INFINITY));
    return _mm512_mask_blend_ps(ok, alt, res);
}

int cpu_attn_head_avx512(const cpu_attn_head *a) {
    if (bk_kv_block_bytes(a->kv->kv_type)) return 0; /* q8_0, q4_0: the portable version */
    int hd = a->hd, np = a->np, f16 = a->kv->kv_type == BRISK_KV_F16, nq = a->n_q;
    if (hd % 16 || nq < 1 || nq > 16) return 0;
    float mx[16];
    for (int g = 0; g < nq; g++) mx[g] = -INFINITY;
    for (int p = 0; p < np; p++) {
        const void *kr = cpu_kv_row(a->kv, a->kv->k, a->table, p, a->kvh, a->n_head_kv, a->hd);
        for (int g = 0; g < nq; g++) {
            const float *q = a->q + (size_t)g * hd;
            __m512 acc = _mm512_setzero_ps();
            for (int i = 0; i < hd; i += 16) acc = _mm512_fmadd_ps(_mm512_loadu_ps(q + i), load16(kr, i, f16), acc);
            float s = _mm512_reduce_add_ps(acc) * a->scale; /* lanes i+8, i+4, then pairs: reduce16's order */
            a->scores[g * a->sc_stride + p] = s;
            if (s > mx[g]) mx[g] = s;
        }
    }
    for (int g = 0; g < nq; g++) {
        float *sc = a->scores + g * a->sc_stride;
        double sum = 0;
        __m512 vmx = _mm512_set1_ps(mx[g]);
        for (int p0 = 0; p0 < np; p0 += 16) {
            __mmask16 m = np - p0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (np - p0)) - 1);
            __m512 e = exp_poly16(_mm512_sub_ps(_mm512_maskz_loadu_ps(m, sc + p0), vmx));
            e = _mm512_maskz_mov_ps(m, e);
            _mm512_mask_storeu_ps(sc + p0, m, e);
            sum += (double)_mm512_reduce_add_ps(e);
        }
        __m512 inv = _mm512_set1_ps((float)(1.0 / sum));
        for (int p0 = 0; p0 < np; p0 += 16) {
            __mmask16 m = np - p0 >= 16 ? (__mmask16)0xFFFF : (__mmask16)((1u << (np - p0)) - 1);
            _mm512_mask_storeu_ps(sc + p0, m, _mm512_mul_ps(_mm512_maskz_loadu_ps(m, sc + p0), inv));
        }
    }
    const size_t lstride = (size_t)16 * hd; /* one head's lanes */
    int full = np & ~15;
    memset(a->lanes, 0, (size_t)nq * lstride * sizeof(float));
    for (int p = 0; p < full; p++) {
        const void *vr = cpu_kv_row(a->kv, a->kv->v, a->table, p, a->kvh, a->n_head_kv, a->hd);
        for (int i = 0; i < hd; i += 16) {
            __m512 v = load16(vr, i, f16);
            for (int g = 0; g < nq; g++) {
                float *ln = a->lanes + g * lstride + (size_t)(p & 15) * hd + i;
                _mm512_storeu_ps(ln, _mm512_fmadd_ps(v, _mm512_set1_ps(a->scores[g * a->sc_stride + p]),
                                                     _mm512_loadu_ps(ln)));
            }
        }
    }
    for (int g = 0; g < nq; g++) {
        const float *lanes = a->lanes + g * lstride;
        float *out = a->out + (size_t)g * hd;
        for (int i = 0; i < hd; i += 16) {
            __m512 l[16];
            for (int r = 0; r < 16; r++) l[r] = _mm512_loadu_ps(lanes + (size_t)r * hd + i);
            for (int r = 0; r < 8; r++) l[r] = _mm512_add_ps(l[r + 8], l[r]);
            for (int r = 0; r < 4; r++) l[r] = _mm512_add_ps(l[r + 4], l[r]);
            _mm512_storeu_ps(out + i, _mm512_add_ps(_mm512_add_ps(l[0], l[2]), _mm512_add_ps(l[1], l[3])));
        }
    }
    for (int p = full; p < np; p++) {
        const void *vr = cpu_kv_row(a->kv, a->kv->v, a->table, p, a->kvh, a->n_head_kv, a->hd);
        for (int i = 0; i < hd; i += 16) {
            __m512 v = load16(vr, i, f16);
            for (int g = 0; g < nq; g++) {
                float *o = a->out + (size_t)g * hd + i;
                _mm512_storeu_ps(o, _mm512_fmadd_ps(v, _mm512_set1_ps(a->scores[g * a->sc_stride + p]), _mm512_loadu_ps(o)));
            }
        }
    }
    return 1;
}

/* cpu_attn_block (cpu_attn.h): one 16-position tile at a time,
 * S = Q K^T with queries in lanes (Q pre-scaled, transposed: Qt[i][lane]),
 * online softmax per lane, O^T += P V with O transposed (Ot[d][lane]). */
static inline __attribute__((always_inline)) void attn_block(const cpu_attn_block *a, const int hd) {
    const int L = a->nt * a->group, f16 = a->kv->kv_type == BRISK_KV_F16;
    float *Qt = a->scratch, *Ot = Qt + 16 * hd, *Kf = Ot + 16 * hd, *Vf = Kf + 16 * hd;
    int32_t posl[16];
    int maxp = 0;
    for (int l = 0; l < 16; l++) {
        const int tt = l < L ? l / a->group : 0, g = l < L ? l % a->group : 0;
        const float *q = a->q + (size_t)tt * a->tok_stride + (size_t)g * hd;
        for (int i = 0; i < hd; i++) Qt[i * 16 + l] = q[i] * a->scale;
        posl[l] = a->pos[tt];
        if (posl[l] > maxp) maxp = posl[l];
    }
    memset(Ot, 0, sizeof(float) * 16 * hd);
    const __m512i pv = _mm512_loadu_si512(posl);
    __m512 m = _mm512_set1_ps(-INFINITY), lsum = _mm512_setzero_ps();
    for (int p0 = 0; p0 <= maxp; p0 += 16) {
        const int np = maxp + 1 - p0 < 16 ? maxp + 1 - p0 : 16;
        for (int j = 0; j < 16; j++) {
            float *kd = Kf + j * hd, *vd = Vf + j * hd;
            if (j >= np) { /* beyond the last position: masked below, kept finite */
                memset(kd, 0, sizeof(float) * hd);
                memset(vd, 0, sizeof(float) * hd);
                continue;
            }
            const void *kr = cpu_kv_row(a->kv, a->kv->k, a->table, p0 + j, a->kvh, a->n_head_kv, hd);
            const void *vr = cpu_kv_row(a->kv, a->kv->v, a->table, p0 + j, a->kvh, a->n_head_kv, hd);
            for (int i = 0; i < hd; i += 16) {
                _mm512_storeu_ps(kd + i, load16(kr, i, f16));
                _mm512_storeu_ps(vd + i, load16(vr, i, f16));
            }
        }
        __m512 s[16];
        for (int j = 0; j < 16; j++) s[j] = _mm512_setzero_ps();
        for (int i = 0; i < hd; i++) {
            const __m512 qv = _mm512_loadu_ps(Qt + i * 16);
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++) s[j] = _mm512_fmadd_ps(qv, _mm512_set1_ps(Kf[j * hd + i]), s[j]);
        }
        __m512 mx = m;
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) { /* causal mask: lane attends to p0 + j only if pos >= p0 + j */
            const __mmask16 ok = _mm512_cmp_epi32_mask(pv, _mm512_set1_epi32(p0 + j), _MM_CMPINT_NLT);
            s[j] = _mm512_mask_blend_ps(ok, _mm512_set1_ps(-INFINITY), s[j]);
            mx = _mm512_max_ps(mx, s[j]);
        }
        const __m512 alpha = exp_poly16(_mm512_sub_ps(m, mx)); /* exp(-inf) = 0 on the first tile */
        __m512 ts = _mm512_setzero_ps();
#pragma GCC unroll 16
        for (int j = 0; j < 16; j++) {
            s[j] = exp_poly16(_mm512_sub_ps(s[j], mx));
            ts = _mm512_add_ps(ts, s[j]);
        }
        lsum = _mm512_fmadd_ps(lsum, alpha, ts);
        m = mx;
        for (int d = 0; d < hd; d++) {
            __m512 o = _mm512_mul_ps(_mm512_loadu_ps(Ot + d * 16), alpha);
#pragma GCC unroll 16
            for (int j = 0; j < 16; j++) o = _mm512_fmadd_ps(s[j], _mm512_set1_ps(Vf[j * hd + d]), o);
            _mm512_storeu_ps(Ot + d * 16, o);
        }
    }
    float inv[16];
    _mm512_storeu_ps(inv, _mm512_div_ps(_mm512_set1_ps(1.0f), lsum));
    for (int l = 0; l < L; l++) {
        float *o = a->out + (size_t)(l / a->group) * a->tok_stride + (size_t)(l % a->group) * hd;
        for (int d = 0; d < hd; d++) o[d] = Ot[d * 16 + l] * inv[l];
    }
}

/* Common head sizes as constants: the tile rows' offsets then fit in the
 * instructions instead of taking a register each. */
int cpu_attn_block_avx512(const cpu_attn_block *a) {
    const int L = a->nt * a->group;
    if (bk_kv_block_bytes(a->kv->kv_type) || a->hd % 16 || L < 1 || L > 16) return 0;
    switch (a->hd) {
    case 64: attn_block(a, 64); break;
    case 128: attn_block(a, 128); break;
    case 256: attn_block(a, 256); break;
    default: attn_block(a, a->hd); break;
    }
    return 1;
}

/* swiglu_row (cpu_math.h) 16 at a time: the same exp, the same operations. */
void cpu_swiglu_avx512(const float *gate, const float *up, float *out, size_t n) {
    const size_t vec_end = n & ~(size_t)15;
    for (size_t i = 0; i < vec_end; i += 16) {
        const __m512 g = _mm512_loadu_ps(gate + i);
        const __m512 e = exp_poly16(_mm512_xor_ps(g, _mm512_set1_ps(-0.0f)));
        _mm512_storeu_ps(out + i, _mm512_mul_ps(_mm512_div_ps(g, _mm512_add_ps(_mm512_set1_ps(1.0f), e)),
                                                _mm512_loadu_ps(up + i)));
    }
    for (size_t i = vec_end; i < n; i++) out[i] = gate[i] / (1.0f + expf(-gate[i])) * up[i];
}
