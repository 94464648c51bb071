/* quant_kquant.c — the quantizers that search: K-quants (Q2_K..Q6_K),
 * IQ4_NL/IQ4_XS, and the importance-weighted Q4_0/Q4_1/Q5_0/Q5_1.
 *
 * The algorithms are ggml's (ggml-quants.c): per sub-block, a scale (and for
 * the affine types a minimum) is searched to minimise a weighted squared (or
 * absolute) error; the sub-block scales are then themselves quantized to 4, 6
 * or 8 bits against one f16 super-block scale, and every value is finally
 * re-rounded against the scales actually stored. Each search below repeats
 * ggml's float operations in ggml's order, so the bytes come out identical
 * to ggml's (checked by tests/test_quant.c against libggml-base itself).
 * Weights: without an imatrix the reference quantizers weight by x^2, |x| or
 * rms+|x|; with one, by imatrix[i] * sqrt(sigma2 + x^2), sigma2 being the mean
 * square of the super-block (or row), as llama.cpp does. */
#include <math.h>
#include <stdbool.h>
#include <string.h>

#include "quant/kquant.h"

#define EPS 1e-15f /* ggml's GROUP_MAX_EPS: a group below this is all zero */
#define H2F quant_f16_to_f32
#define F2H quant_f32_to_f16

static inline int clampi(int v, int lo, int hi) { return v < lo ? lo : v > hi ? hi : v; }

/* ---- scale searches ---- */

/* Symmetric scale for n values into [-nmax, nmax-1] (ggml's make_qx_quants,
 * rmse_type 1): weights qw, or x^2 without. Tries 18 scales around nmax/max
 * and keeps the least-squares one with the best fit. L gets l + nmax. */
static float search_sym(int n, int nmax, const float *x, const float *qw, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(kq_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)(l + nmax);
        float w = qw ? qw[i] : x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    float scale = suml2 ? sumlx / suml2 : 0.0f;
    float best = scale * sumlx;
    for (int is = -9; is <= 9; is++) {
        if (is == 0) continue;
        iscale = -(nmax + 0.1f * is) / max;
        sumlx = suml2 = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(kq_nearest_int(iscale * x[i]), -nmax, nmax - 1);
            float w = qw ? qw[i] : x[i] * x[i];
            sumlx += w * x[i] * l;
            suml2 += w * l * l;
        }
        if (suml2 > 0 && sumlx * sumlx > best * suml2) {
            for (int i = 0; i < n; i++) L[i] = (int8_t)(nmax + clampi(kq_nearest_int(iscale * x[i]), -nmax, nmax - 1));
            scale = sumlx / suml2;
            best = scale * sumlx;
        }
    }
    return scale;
}

/* Q3_K's reference search (ggml's make_q3_quants with do_rmse): round at
 * nmax/max, then up to 5 passes of moving single values to the level that
 * improves the x^2-weighted fit. */
static float search_q3(int n, int nmax, const float *x, int8_t *L) {
    float max = 0, amax = 0;
    for (int i = 0; i < n; i++) {
        float ax = fabsf(x[i]);
        if (ax > amax) {
            amax = ax;
            max = x[i];
        }
    }
    if (amax < EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = -nmax / max;
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = clampi(kq_nearest_int(iscale * x[i]), -nmax, nmax - 1);
        L[i] = (int8_t)l;
        float w = x[i] * x[i];
        sumlx += w * x[i] * l;
        suml2 += w * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = x[i] * x[i];
            float slx = sumlx - w * x[i] * L[i];
            if (slx > 0) {
                float sl2 = suml2 - w * L[i] * L[i];
                int new_l = clampi(kq_nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1);
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (sl2 > 0 && slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (int8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    for (int i = 0; i < n; i++) L[i] = (int8_t)(L[i] + nmax);
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Affine scale and minimum for n values into [0, nmax] (ggml's
 * make_qkx2_quants / make_qkx3_quants, which agree when weights are given):
 * tries nstep+1 scales (nmax + rmin + rdelta*is)/(max - min), solving the
 * weighted least-squares scale and min for each rounding, and keeps the one of
 * least weighted error (|err| with use_mad). *neg_min gets -min (>= 0). */
static float search_affine(int n, int nmax, const float *x, const float *w, uint8_t *L, float *neg_min,
                           uint8_t *Laux, float rmin, float rdelta, int nstep, bool use_mad) {
    float min = x[0], max = x[0];
    float sum_w = w[0], sum_x = sum_w * x[0];
    for (int i = 1; i < n; i++) {
        if (x[i] < min) min = x[i];
        if (x[i] > max) max = x[i];
        sum_w += w[i];
        sum_x += w[i] * x[i];
    }
    if (min > 0) min = 0;
    if (max <= min) {
        memset(L, 0, (size_t)n);
        *neg_min = -min;
        return 0.f;
    }
    float iscale = nmax / (max - min);
    float scale = 1 / iscale;
    float best_error = 0;
    for (int i = 0; i < n; i++) {
        L[i] = (uint8_t)clampi(kq_nearest_int(iscale * (x[i] - min)), 0, nmax);
        float diff = scale * L[i] + min - x[i];
        diff = use_mad ? fabsf(diff) : diff * diff;
        best_error += w[i] * diff;
    }
    for (int is = 0; is <= nstep; is++) {
        iscale = (rmin + rdelta * is + nmax) / (max - min);
        float sum_l = 0, sum_l2 = 0, sum_xl = 0;
        for (int i = 0; i < n; i++) {
            int l = clampi(kq_nearest_int(iscale * (x[i] - min)), 0, nmax);
            Laux[i] = (uint8_t)l;
            sum_l += w[i] * l;
            sum_l2 += w[i] * l * l;
            sum_xl += w[i] * l * x[i];
        }
        float D = sum_w * sum_l2 - sum_l * sum_l;
        if (D > 0) {
            float this_scale = (sum_w * sum_xl - sum_x * sum_l) / D;
            float this_min = (sum_l2 * sum_x - sum_l * sum_xl) / D;
            if (this_min > 0) {
                this_min = 0;
                this_scale = sum_xl / sum_l2;
            }
            float err = 0;
            for (int i = 0; i < n; i++) {
                float diff = this_scale * Laux[i] + this_min - x[i];
                diff = use_mad ? fabsf(diff) : diff * diff;
                err += w[i] * diff;
            }
            if (err < best_error) {
                memcpy(L, Laux, (size_t)n);
                best_error = err;
                scale = this_scale;
                min = this_min;
            }
        }
    }
    *neg_min = -min;
    return scale;
}

/* Quantizes n non-negative sub-block scales (or mins) into [0, nmax] against
 * one scale (ggml's make_qp_quants): 9 candidate scales by weighted error,
 * then up to 5 passes of single-level moves. */
float kq_search_pos(int n, int nmax, const float *x, uint8_t *L, const float *qw) {
    float max = 0;
    for (int i = 0; i < n; i++) max = max > x[i] ? max : x[i];
    if (max < EPS) {
        memset(L, 0, (size_t)n);
        return 0.f;
    }
    float iscale = nmax / max;
    for (int i = 0; i < n; i++) L[i] = (uint8_t)kq_nearest_int(iscale * x[i]);
    float scale = 1 / iscale;
    float best_mse = 0;
    for (int i = 0; i < n; i++) {
        float diff = x[i] - scale * L[i];
        best_mse += qw[i] * diff * diff;
    }
    for (int is = -4; is <= 4; is++) {
        if (is == 0) continue;
        float iscale_is = (0.1f * is + nmax) / max;
        float scale_is = 1 / iscale_is;
        float mse = 0;
        for (int i = 0; i < n; i++) {
            int l = kq_nearest_int(iscale_is * x[i]);
            l = l < nmax ? l : nmax;
            float diff = x[i] - scale_is * l;
            mse += qw[i] * diff * diff;
        }
        if (mse < best_mse) {
            best_mse = mse;
            iscale = iscale_is;
        }
    }
    float sumlx = 0, suml2 = 0;
    for (int i = 0; i < n; i++) {
        int l = kq_nearest_int(iscale * x[i]);
        l = l < nmax ? l : nmax;
        L[i] = (uint8_t)l;
        sumlx += qw[i] * x[i] * l;
        suml2 += qw[i] * l * l;
    }
    for (int itry = 0; itry < 5; itry++) {
        int n_changed = 0;
        for (int i = 0; i < n; i++) {
            float w = qw[i];
            float slx = sumlx - w * x[i] * L[i];
            float sl2 = suml2 - w * L[i] * L[i];
            if (slx > 0 && sl2 > 0) {
                int new_l = kq_nearest_int(x[i] * sl2 / slx);
                new_l = new_l < nmax ? new_l : nmax;
                if (new_l != L[i]) {
                    slx += w * x[i] * new_l;
                    sl2 += w * new_l * new_l;
                    if (slx * slx * suml2 > sumlx * sumlx * sl2) {
                        L[i] = (uint8_t)new_l;
                        sumlx = slx;
                        suml2 = sl2;
                        n_changed++;
                    }
                }
            }
        }
        if (!n_changed) break;
    }
    return suml2 > 0.0f ? sumlx / suml2 : 0.0f;
}

/* Importance weights for n values: qw[i] * sqrt(sigma2 + x[i]^2). */
static void imatrix_weights(int n, const float *x, const float *qw, float sigma2, float *w) {
    for (int i = 0; i < n; i++) w[i] = qw[i] * sqrtf(sigma2 + x[i] * x[i]);
}

static float sum_sq(const float *x, int n) {
    float s = 0;
    for (int i = 0; i < n; i++) s += x[i] * x[i];
    return s;
}

/* Packs 2-bit levels (256 of them): byte j/4 + l of each 128-half holds
 * levels l, l+32, l+64, l+96 in bits 0-1, 2-3, 4-5, 6-7. */
static void pack_2bit(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < QK_K; j += 128)
        for (int l = 0; l < 32; l++)
            qs[j / 4 + l] = (uint8_t)(L[j + l] | (L[j + l + 32] << 2) | (L[j + l + 64] << 4) | (L[j + l + 96] << 6));
}

/* ---- Q2_K: 16 sub-blocks of 16, 2-bit levels, 4-bit scale and min each ---- */

void kq_quantize_q2_K(const float *x, blk_q2_K *y, int64_t n, const float *qw) {
    uint8_t L[QK_K], Laux[16], Ls[16], Lm[16];
    float w[16], mins[16], scales[16], sw[16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        if (!qw) {
            float max_scale = 0, max_min = 0;
            for (int j = 0; j < 16; j++) {
                for (int l = 0; l < 16; l++) w[l] = fabsf(x[16 * j + l]);
                scales[j] = search_affine(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux, -0.5f, 0.1f, 15, true);
                if (scales[j] > max_scale) max_scale = scales[j];
                if (mins[j] > max_min) max_min = mins[j];
            }
            memset(y[i].scales, 0, 16);
            y[i].d = F2H(max_scale > 0 ? max_scale / 15.f : 0.f);
            if (max_scale > 0) {
                float iscale = 15.f / max_scale;
                for (int j = 0; j < 16; j++) y[i].scales[j] = (uint8_t)kq_nearest_int(iscale * scales[j]);
            }
            y[i].dmin = F2H(max_min > 0 ? max_min / 15.f : 0.f);
            if (max_min > 0) {
                float iscale = 15.f / max_min;
                for (int j = 0; j < 16; j++) y[i].scales[j] |= (uint8_t)(kq_nearest_int(iscale * mins[j]) << 4);
            }
        } else {
            const float *q = qw + QK_K * i;
            float sigma2 = sum_sq(x, QK_K) / QK_K;
            for (int j = 0; j < 16; j++) {
                imatrix_weights(16, x + 16 * j, q + 16 * j, sigma2, w);
                sw[j] = 0;
                for (int l = 0; l < 16; l++) sw[j] += w[l];
                scales[j] = search_affine(16, 3, x + 16 * j, w, L + 16 * j, &mins[j], Laux, -0.9f, 0.05f, 36, false);
            }
            y[i].d = F2H(kq_search_pos(16, 15, scales, Ls, sw));
            y[i].dmin = F2H(kq_search_pos(16, 15, mins, Lm, sw));
            for (int j = 0; j < 16; j++) y[i].scales[j] = (uint8_t)(Ls[j] | (Lm[j] << 4));
        }
        /* re-round every value against the stored scales */
        for (int j = 0; j < 16; j++) {
            const float d = H2F(y[i].d) * (y[i].scales[j] & 0xF);
            if (!d) continue;
            const float dm = H2F(y[i].dmin) * (y[i].scales[j] >> 4);
            for (int l = 0; l < 16; l++) L[16 * j + l] = (uint8_t)clampi(kq_nearest_int((x[16 * j + l] + dm) / d), 0, 3);
        }
        pack_2bit(L, y[i].qs);
    }
}

/* ---- Q3_K: 16 sub-blocks of 16, 3-bit levels (2 low bits + hmask), 6-bit signed scales ---- */

static void q3_set_scale(uint8_t *s, int j, int l) { /* l in 0..63 */
    if (j < 8) s[j] = (uint8_t)(l & 0xF);
    else s[j - 8] |= (uint8_t)((l & 0xF) << 4);
    s[j % 4 + 8] |= (uint8_t)((l >> 4) << (2 * (j / 4)));
}

void kq_quantize_q3_K(const float *x, blk_q3_K *y, int64_t n, const float *qw) {
    int8_t L[QK_K], Ls[16];
    float scales[16], w[16], sw[16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        memset(y[i].scales, 0, 12);
        if (!qw) {
            float max_scale = 0, amax = 0;
            for (int j = 0; j < 16; j++) {
                scales[j] = search_q3(16, 4, x + 16 * j, L + 16 * j);
                if (fabsf(scales[j]) > amax) {
                    amax = fabsf(scales[j]);
                    max_scale = scales[j];
                }
            }
            if (max_scale) {
                float iscale = -32.f / max_scale;
                for (int j = 0; j < 16; j++)
                    q3_set_scale(y[i].scales, j, clampi((int8_t)kq_nearest_int(iscale * scales[j]), -32, 31) + 32);
                y[i].d = F2H(1 / iscale);
            } else {
                y[i].d = F2H(0.f);
            }
        } else {
            const float *q = qw + QK_K * i;
            float sigma2 = 2 * sum_sq(x, QK_K) / QK_K;
            for (int j = 0; j < 16; j++) {
                imatrix_weights(16, x + 16 * j, q + 16 * j, sigma2, w);
                float sumw = 0;
                for (int l = 0; l < 16; l++) sumw += w[l];
                sw[j] = sumw;
                scales[j] = search_sym(16, 4, x + 16 * j, w, L + 16 * j);
            }
            float d_block = search_sym(16, 32, scales, sw, Ls);
            for (int j = 0; j < 16; j++) q3_set_scale(y[i].scales, j, Ls[j]);
            y[i].d = F2H(d_block);
        }
        int8_t sc[16];
        quant_q3k_scales(y[i].scales, sc);
        for (int j = 0; j < 16; j++) {
            float d = H2F(y[i].d) * sc[j];
            if (!d) continue;
            for (int l = 0; l < 16; l++) L[16 * j + l] = (int8_t)(clampi(kq_nearest_int(x[16 * j + l] / d), -4, 3) + 4);
        }
        /* high bit of value j goes to hmask[j % 32], bit j / 32 */
        memset(y[i].hmask, 0, 32);
        uint8_t low[QK_K];
        for (int j = 0; j < QK_K; j++) {
            low[j] = (uint8_t)(L[j] & 3);
            if (L[j] > 3) y[i].hmask[j % 32] |= (uint8_t)(1 << (j / 32));
        }
        pack_2bit(low, y[i].qs);
    }
}

/* ---- Q4_K / Q5_K: 8 sub-blocks of 32, 4 or 5-bit levels, 6-bit scale and min each ---- */

static void k4_pack_scales(const uint8_t *ls, const uint8_t *lm, uint8_t *s) {
    for (int j = 0; j < 8; j++) {
        if (j < 4) {
            s[j] = ls[j];
            s[j + 4] = lm[j];
        } else {
            s[j + 4] = (uint8_t)((ls[j] & 0xF) | ((lm[j] & 0xF) << 4));
            s[j - 4] |= (uint8_t)((ls[j] >> 4) << 6);
            s[j] |= (uint8_t)((lm[j] >> 4) << 6);
        }
    }
}

/* Chooses scales/mins for one super-block of Q4_K (nmax 15) or Q5_K (31) and
 * re-rounds the levels into L (0..nmax). */
static void k45_block(const float *x, int nmax, const float *qw, uint16_t *d_out, uint16_t *dmin_out,
                      uint8_t *scales12, uint8_t *L) {
    uint8_t Laux[32], ls[8], lm[8];
    float w[32], mins[8], scales[8], sw[8];
    if (!qw) {
        float max_scale = 0, max_min = 0;
        for (int j = 0; j < 8; j++) {
            float av_x = sqrtf(sum_sq(x + 32 * j, 32) / 32);
            for (int l = 0; l < 32; l++) w[l] = av_x + fabsf(x[32 * j + l]);
            scales[j] = nmax == 15 ? search_affine(32, 15, x + 32 * j, w, L + 32 * j, &mins[j], Laux, -1.f, 0.1f, 20, false)
                                   : search_affine(32, 31, x + 32 * j, w, L + 32 * j, &mins[j], Laux, -0.5f, 0.1f, 15, false);
            if (scales[j] > max_scale) max_scale = scales[j];
            if (mins[j] > max_min) max_min = mins[j];
        }
        float inv_scale = max_scale > 0 ? 63.f / max_scale : 0.f;
        float inv_min = max_min > 0 ? 63.f / max_min : 0.f;
        for (int j = 0; j < 8; j++) {
            uint8_t a = (uint8_t)kq_nearest_int(inv_scale * scales[j]), b = (uint8_t)kq_nearest_int(inv_min * mins[j]);
            ls[j] = a < 63 ? a : 63;
            lm[j] = b < 63 ? b : 63;
        }
        *d_out = F2H(max_scale / 63.f);
        *dmin_out = F2H(max_min / 63.f);
    } else {
        float sigma2 = 2 * sum_sq(x, QK_K) / QK_K;
        for (int j = 0; j < 8; j++) {
            imatrix_weights(32, x + 32 * j, qw + 32 * j, sigma2, w);
            float sumw = 0;
            for (int l = 0; l < 32; l++) sumw += w[l];
            sw[j] = sumw;
            scales[j] = search_affine(32, nmax, x + 32 * j, w, L + 32 * j, &mins[j], Laux, -0.9f, 0.05f, 36, false);
        }
        *d_out = F2H(kq_search_pos(8, 63, scales, ls, sw));
        *dmin_out = F2H(kq_search_pos(8, 63, mins, lm, sw));
    }
    memset(scales12, 0, 12);
    k4_pack_scales(ls, lm, scales12);
    for (int j = 0; j < 8; j++) {
        uint8_t sc, m;
        quant_k4_scale_min(j, scales12, &sc, &m);
        const float d = H2F(*d_out) * sc;
        if (!d) continue;
        const float dm = H2F(*dmin_out) * m;
        for (int l = 0; l < 32; l++) L[32 * j + l] = (uint8_t)clampi(kq_nearest_int((x[32 * j + l] + dm) / d), 0, nmax);
    }
}

void kq_quantize_q4_K(const float *x, blk_q4_K *y, int64_t n, const float *qw) {
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        k45_block(x, 15, qw ? qw + QK_K * i : NULL, &y[i].d, &y[i].dmin, y[i].scales, L);
        for (int j = 0; j < 4; j++)
            for (int l = 0; l < 32; l++) y[i].qs[32 * j + l] = (uint8_t)(L[64 * j + l] | (L[64 * j + l + 32] << 4));
    }
}

void kq_quantize_q5_K(const float *x, blk_q5_K *y, int64_t n, const float *qw) {
    uint8_t L[QK_K];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        k45_block(x, 31, qw ? qw + QK_K * i : NULL, &y[i].d, &y[i].dmin, y[i].scales, L);
        memset(y[i].qh, 0, 32);
        for (int j = 0; j < 4; j++) {
            for (int l = 0; l < 32; l++) {
                int l1 = L[64 * j + l], l2 = L[64 * j + l + 32];
                y[i].qh[l] |= (uint8_t)(((l1 >> 4) << (2 * j)) | ((l2 >> 4) << (2 * j + 1)));
                y[i].qs[32 * j + l] = (uint8_t)((l1 & 15) | ((l2 & 15) << 4));
            }
        }
    }
}

/* ---- Q6_K: 16 sub-blocks of 16, 6-bit levels, 8-bit signed scales ---- */

void kq_quantize_q6_K(const float *x, blk_q6_K *y, int64_t n, const float *qw) {
    int8_t L[QK_K];
    float scales[16];
    for (int64_t i = 0; i < n / QK_K; i++, x += QK_K) {
        float max_scale = 0, max_abs_scale = 0;
        for (int ib = 0; ib < 16; ib++) {
            scales[ib] = search_sym(16, 32, x + 16 * ib, qw ? qw + QK_K * i + 16 * ib : NULL, L + 16 * ib);
            if (fabsf(scales[ib]) > max_abs_scale) {
                max_abs_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        if (max_abs_scale < EPS) {
            memset(&y[i], 0, sizeof y[i]);
            continue;
        }
        float iscale = -128.f / max_scale;
        y[i].d = F2H(1 / iscale);
        for (int ib = 0; ib < 16; ib++) {
            int s = kq_nearest_int(iscale * scales[ib]);
            y[i].scales[ib] = (int8_t)(s < 127 ? s : 127);
        }
        for (int j = 0; j < 16; j++) {
            float d = H2F(y[i].d) * y[i].scales[j];
            if (!d) continue;
            for (int l = 0; l < 16; l++) L[16 * j + l] = (int8_t)(clampi(kq_nearest_int(x[16 * j + l] / d), -32, 31) + 32);
        }
        /* low nibbles: ql[l] = v[l] | v[l+64] << 4, ql[l+32] = v[l+32] | v[l+96] << 4;
         * qh[l] = the 2 high bits of v[l], v[l+32], v[l+64], v[l+96] (per 128-half) */
        for (int h = 0; h < 2; h++) {
            const int8_t *v = L + 128 * h;
            uint8_t *ql = y[i].ql + 64 * h, *qh = y[i].qh + 32 * h;
            for (int l = 0; l < 32; l++) {
                ql[l] = (uint8_t)((v[l] & 0xF) | ((v[l + 64] & 0xF) << 4));
                ql[l + 32] = (uint8_t)((v[l + 32] & 0xF) | ((v[l + 96] & 0xF) << 4));
                qh[l] = (uint8_t)((v[l] >> 4) | ((v[l + 32] >> 4) << 2) | ((v[l + 64] >> 4) << 4) | ((v[l + 96] >> 4) << 6));
            }
        }
    }
}

/* ---- IQ4_NL / IQ4_XS: 32-element sub-blocks through the non-linear codebook ---- */

/* Nearest codebook index; ties go to the lower one as in ggml. */
static int iq4_index(float x) {
    const int8_t *v = quant_iq4nl_values;
    if (x <= v[0]) return 0;
    if (x >= v[15]) return 15;
    int lo = 0, hi = 15;
    while (hi - lo > 1) {
        int mid = (lo + hi) / 2;
        if (x < v[mid]) hi = mid;
        else lo = mid;
    }
    return x - v[hi - 1] < v[hi] - x ? hi - 1 : hi;
}

/* Best scale of one 32-element sub-block: the least-squares scale of the
 * rounding at max/v[0], then of 2*ntry+1 nearby roundings. */
static float iq4_sub_scale(const float *x, const float *w, int ntry, uint8_t *L) {
    const int8_t *v = quant_iq4nl_values;
    float amax = 0, max = 0;
    for (int j = 0; j < 32; j++) {
        if (fabsf(x[j]) > amax) {
            amax = fabsf(x[j]);
            max = x[j];
        }
    }
    if (amax < EPS) return 0;
    float d = ntry > 0 ? -max / v[0] : max / v[0];
    float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int j = 0; j < 32; j++) {
        int l = iq4_index(id * x[j]);
        L[j] = (uint8_t)l;
        float q = v[l];
        sumqx += w[j] * q * x[j];
        sumq2 += w[j] * q * q;
    }
    d = sumq2 > 0 ? sumqx / sumq2 : 0.f;
    float best = d * sumqx;
    for (int itry = -ntry; itry <= ntry; itry++) {
        id = (itry + v[0]) / max;
        sumqx = sumq2 = 0;
        for (int j = 0; j < 32; j++) {
            float q = v[iq4_index(id * x[j])];
            sumqx += w[j] * q * x[j];
            sumq2 += w[j] * q * q;
        }
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            d = sumqx / sumq2;
            best = d * sumqx;
        }
    }
    return d;
}

static void iq4_pack(const uint8_t *L, uint8_t *qs) {
    for (int j = 0; j < 16; j++) qs[j] = (uint8_t)(L[j] | (L[j + 16] << 4));
}

void kq_quantize_iq4(const float *x, void *vy, int64_t n, const float *qw, int ntry, bool xs) {
    const int sb = xs ? QK_K : 32; /* super-block */
    uint8_t L[QK_K];
    float w[32], scales[8];
    for (int64_t ibl = 0; ibl < n / sb; ibl++, x += sb) {
        const float *q = qw ? qw + sb * ibl : NULL;
        float sigma2 = sum_sq(x, sb);
        sigma2 *= 2.f / sb;
        float max_scale = 0, amax_scale = 0;
        memset(L, 0, (size_t)sb);
        for (int ib = 0; ib < sb / 32; ib++) {
            const float *xb = x + 32 * ib;
            if (q) imatrix_weights(32, xb, q + 32 * ib, sigma2, w);
            else
                for (int j = 0; j < 32; j++) w[j] = xb[j] * xb[j];
            scales[ib] = iq4_sub_scale(xb, w, ntry, L + 32 * ib);
            if (fabsf(scales[ib]) > amax_scale) {
                amax_scale = fabsf(scales[ib]);
                max_scale = scales[ib];
            }
        }
        if (!xs) {
            blk_iq4_nl *y = (blk_iq4_nl *)vy + ibl;
            y->d = F2H(scales[0]);
            if (ntry > 0) {
                float id = scales[0] ? 1 / scales[0] : 0;
                for (int j = 0; j < 32; j++) L[j] = (uint8_t)iq4_index(id * x[j]);
            }
            iq4_pack(L, y->qs);
            continue;
        }
        blk_iq4_xs *y = (blk_iq4_xs *)vy + ibl;
        float d = -max_scale / 32;
        y->d = F2H(d);
        y->scales_h = 0;
        float id = d ? 1 / d : 0.f;
        for (int ib = 0; ib < 8; ib++) {
            int l = clampi(kq_nearest_int(id * scales[ib]), -32, 31);
            float dl = d * l;
            float idl = dl ? 1 / dl : 0.f;
            for (int j = 0; j < 32; j++) L[32 * ib + j] = (uint8_t)iq4_index(idl * x[32 * ib + j]);
            l += 32;
            if (ib % 2 == 0) y->scales_l[ib / 2] = (uint8_t)(l & 0xF);
            else y->scales_l[ib / 2] |= (uint8_t)((l & 0xF) << 4);
            y->scales_h |= (uint16_t)((l >> 4) << (2 * ib));
            iq4_pack(L + 32 * ib, y->qs + 16 * ib);
        }
    }
}

/* ---- weighted Q4_0 / Q4_1 / Q5_0 / Q5_1 (only with an imatrix) ---- */

void kq_quantize_legacy_w(uint32_t type, const float *x, void *vy, int64_t n, const float *qw) {
    float sigma2 = 0;
    for (int64_t j = 0; j < n; j++) sigma2 += x[j] * x[j];
    sigma2 = sigma2 / n;
    float w[32];
    for (int64_t ib = 0; ib < n / 32; ib++) {
        const float *xb = x + 32 * ib;
        imatrix_weights(32, xb, qw + 32 * ib, sigma2, w);
        uint8_t L[32], Laux[32];
        float neg_min = 0, d;
        if (type == QT_Q4_0 || type == QT_Q5_0) {
            d = search_sym(32, type == QT_Q4_0 ? 8 : 16, xb, w, (int8_t *)L);
        } else {
            d = search_affine(32, type == QT_Q4_1 ? 15 : 31, xb, w, L, &neg_min, Laux, -0.9f, 0.05f, 36, false);
        }
        uint32_t qh = 0;
        uint8_t *qs;
        switch (type) {
        case QT_Q4_0: {
            blk_q4_0 *y = (blk_q4_0 *)vy + ib;
            y->d = F2H(d);
            qs = y->qs;
        } break;
        case QT_Q4_1: {
            blk_q4_1 *y = (blk_q4_1 *)vy + ib;
            y->d = F2H(d);
            y->m = F2H(-neg_min);
            qs = y->qs;
        } break;
        case QT_Q5_0: {
            blk_q5_0 *y = (blk_q5_0 *)vy + ib;
            y->d = F2H(d);
            qs = y->qs;
        } break;
        default: {
            blk_q5_1 *y = (blk_q5_1 *)vy + ib;
            y->d = F2H(d);
            y->m = F2H(-neg_min);
            qs = y->qs;
        } break;
        }
        for (int j = 0; j < 16; j++) {
            qs[j] = (uint8_t)((L[j] & 0xF) | ((L[j + 16] & 0xF) << 4));
            qh |= (uint32_t)((L[j] >> 4) & 1) << j;
            qh |= (uint32_t)((L[j + 16] >> 4) & 1) << (j + 16);
        }
        if (type == QT_Q5_0) memcpy(((blk_q5_0 *)vy + ib)->qh, &qh, 4);
        if (type == QT_Q5_1) memcpy(((blk_q5_1 *)vy + ib)->qh, &qh, 4);
    }
}
