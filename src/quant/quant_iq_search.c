/* quant_iq_search.c — the i-quant quantizers that search a lattice (IQ3_XXS,
 * IQ3_S): bytewise llama.cpp's quantize_iq3_xxs / quantize_iq3_s, with or
 * without an importance matrix. The same maths restated, float operations in
 * the same order (every sum and product below is evaluated as ggml does, so
 * ties and roundings fall the same way).
 *
 * The grid holds 4-vectors of odd magnitudes 2l+1 (l = 0..7). Values are made
 * non-negative (their signs kept apart); for each of a range of trial scales,
 * each group of 4 is rounded to levels l; a level vector that is not a grid
 * point is replaced by the best of its precomputed nearest grid points (the
 * grid points at the 2 (IQ3_XXS) or 3 (IQ3_S) smallest squared distances);
 * the trial with the best weighted least-squares fit wins, then groups that
 * were off the grid are re-rounded at the fitted scale. One f16 scale per 256
 * and a 4-bit scale per 32 values encode the fitted scales. */
#include <float.h>
#include <math.h>
#include <pthread.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "quant/kquant.h"
#include "quant/quant.h"
#include "quant/quant_iq.h"

#define F2H quant_f32_to_f16

/* ---- the lattice: grid points, the map from level vectors, the neighbours ---- */

enum { LEVELS = 4096 }; /* 4 coordinates of 3 bits */

typedef struct {
    int n;                  /* grid points: 256 (IQ3_XXS) or 512 (IQ3_S) */
    int8_t value[512][4];   /* (n, 4) 2l+1 per coordinate */
    int32_t map[LEVELS];    /* packed levels -> grid index; off the grid: -1 - offset into nbrs */
    uint16_t *nbrs;         /* per off-grid vector: a count, then grid indices by (distance, index) */
    brisk_status status;    /* of the one-time build */
} iq3_lattice;

static iq3_lattice g_lat[2]; /* 0: IQ3_XXS's 256 points, 1: IQ3_S's 512 */
static pthread_once_t g_once[2] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};

static int pack_levels(const int8_t *l) { return l[0] | l[1] << 3 | l[2] << 6 | l[3] << 9; }

/* Squared distances from off-grid vector u to every grid point in d2; the
 * neighbours are all points at the n_dist smallest distinct distances, nearest
 * first, ties by index (a stable sort by distance). Writes them to out (if not
 * NULL) and returns their count. */
static int neighbours(const iq3_lattice *g, int u, int n_dist, int *d2, uint16_t *out) {
    int8_t p[4];
    for (int k = 0; k < 4; k++) p[k] = (int8_t)(2 * ((u >> 3 * k) & 7) + 1);
    for (int j = 0; j < g->n; j++) {
        d2[j] = 0;
        for (int k = 0; k < 4; k++) d2[j] += (g->value[j][k] - p[k]) * (g->value[j][k] - p[k]);
    }
    int count = 0, below = -1;
    for (int level = 0; level < n_dist; level++) {
        int next = INT32_MAX;
        for (int j = 0; j < g->n; j++)
            if (d2[j] > below && d2[j] < next) next = d2[j];
        for (int j = 0; j < g->n; j++)
            if (d2[j] == next) {
                if (out) out[count] = (uint16_t)j;
                count++;
            }
        below = next;
    }
    return count;
}

/* Builds lattice `which` from the decoder's grid (the same points, stored
 * scaled: IQ3_XXS's bytes are about 8l + 4, IQ3_S's are 2l + 1). */
static void build(int which) {
    iq3_lattice *g = &g_lat[which];
    g->n = which ? 512 : 256;
    const int n_dist = which ? 3 : 2;
    for (int j = 0; j < g->n; j++)
        for (int k = 0; k < 4; k++) {
            const uint8_t b = (uint8_t)((which ? quant_iq3s_grid[j] : quant_iq3xxs_grid[j]) >> 8 * k);
            g->value[j][k] = (int8_t)(2 * (which ? b / 2 : b / 8) + 1);
        }
    for (int u = 0; u < LEVELS; u++) g->map[u] = INT32_MIN;
    for (int j = 0; j < g->n; j++) {
        int8_t l[4];
        for (int k = 0; k < 4; k++) l[k] = (int8_t)(g->value[j][k] / 2);
        g->map[pack_levels(l)] = j;
    }
    int d2[512];
    size_t total = 0;
    for (int u = 0; u < LEVELS; u++)
        if (g->map[u] < 0) total += 1 + (size_t)neighbours(g, u, n_dist, d2, NULL);
    if (!(g->nbrs = malloc(total * sizeof *g->nbrs))) {
        g->status = bk_fail(BRISK_ERR_NOMEM, "quantize: out of memory for the IQ3 neighbour lists");
        return;
    }
    size_t at = 0;
    for (int u = 0; u < LEVELS; u++) {
        if (g->map[u] >= 0) continue;
        g->map[u] = -1 - (int32_t)at;
        const int c = neighbours(g, u, n_dist, d2, g->nbrs + at + 1);
        g->nbrs[at] = (uint16_t)c;
        at += 1 + (size_t)c;
    }
    g->status = BRISK_OK;
}
static void build_xxs(void) { build(0); }
static void build_s(void) { build(1); }

static const iq3_lattice *lattice(int which) {
    pthread_once(&g_once[which], which ? build_s : build_xxs);
    return &g_lat[which];
}

/* ---- the search for one group of 32 ---- */

/* The grid point among u's neighbours nearest to xval at `scale` (weights w:
 * the square roots of the fit's weights); its levels go to l. */
static int best_neighbour(const iq3_lattice *g, int u, const float *xval, const float *w, float scale, int8_t *l) {
    const uint16_t *nb = g->nbrs + (-1 - g->map[u]);
    float best_d2 = FLT_MAX;
    int best = nb[1];
    for (int j = 1; j <= nb[0]; j++) {
        const int8_t *pg = g->value[nb[j]];
        float d2 = 0;
        for (int i = 0; i < 4; i++) {
            const float diff = scale * (float)pg[i] - xval[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best_d2) best_d2 = d2, best = nb[j];
    }
    for (int i = 0; i < 4; i++) l[i] = (int8_t)((g->value[best][i] - 1) / 2);
    return best;
}

/* Rounds group k's 4 values at inverse scale id to levels l; off the grid, takes
 * the best neighbour at `scale`. Returns whether the rounding was on the grid. */
static bool round_group(const iq3_lattice *g, const float *xval, const float *waux, float id, float scale, int8_t *l) {
    for (int i = 0; i < 4; i++) {
        const int v = kq_nearest_int(0.5f * (id * xval[i] - 1));
        l[i] = (int8_t)(v < 0 ? 0 : v > 7 ? 7 : v);
    }
    const int u = pack_levels(l);
    if (g->map[u] >= 0) return true;
    best_neighbour(g, u, xval, waux, scale, l);
    return false;
}

/* sum w x q and sum w q^2 over 32 values, q = 2l + 1. */
static void fit_sums(const float *weight, const float *xval, const int8_t *l, float *sumqx, float *sumq2) {
    float a = 0, b = 0;
    for (int i = 0; i < 32; i++) {
        const float w = weight[i], q = (float)(2 * l[i] + 1);
        a += w * xval[i] * q;
        b += w * q * q;
    }
    *sumqx = a, *sumq2 = b;
}

typedef struct {
    int is_range;      /* trial scales (15 + 0.2 is) / max for is in [-is_range, is_range] */
    bool start_on;     /* the groups count as on the grid before any trial wins (IQ3_XXS) */
    bool refit_all;    /* the refit re-rounds every group, not only the off-grid ones (IQ3_S) */
} search_opts;

/* Levels l (32) and the scale for one group of 32 non-negative values xval. */
static float search32(const iq3_lattice *g, const search_opts *o, const float *xval, const float *weight,
                      const float *waux, float max, int8_t *l) {
    int8_t la[32];
    bool on[8], on_aux[8];
    float best = 0, scale = max / 15;
    memset(l, 0, 32);
    for (int k = 0; k < 8; k++) on[k] = o->start_on;
    for (int is = -o->is_range; is <= o->is_range; is++) {
        const float id = (15 + (float)is * 0.2f) / max, this_scale = 1 / id;
        for (int k = 0; k < 8; k++) on_aux[k] = round_group(g, xval + 4 * k, waux + 4 * k, id, this_scale, la + 4 * k);
        float sumqx, sumq2;
        fit_sums(weight, xval, la, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            memcpy(l, la, 32);
            memcpy(on, on_aux, sizeof on);
        }
    }
    int n_off = 0;
    for (int k = 0; k < 8; k++) n_off += !on[k];
    if (n_off > 0 && scale > 0) {
        const float id = 1 / scale;
        for (int k = 0; k < 8; k++)
            if (o->refit_all || !on[k]) round_group(g, xval + 4 * k, waux + 4 * k, id, scale, l + 4 * k);
        float sumqx, sumq2;
        fit_sums(weight, xval, l, &sumqx, &sumq2);
        if (sumq2 > 0) scale = sumqx / sumq2;
    }
    return scale;
}

/* The fit's weights for the 32 values xb (qw: their importances or NULL;
 * sigma2: twice the super-block's mean square) and their square roots. */
static void group_weights(const float *xb, const float *qw, float sigma2, float *weight, float *waux) {
    for (int i = 0; i < 32; i++) weight[i] = qw ? qw[i] * sqrtf(sigma2 + xb[i] * xb[i]) : xb[i] * xb[i];
    for (int i = 0; i < 32; i++) waux[i] = sqrtf(weight[i]);
}

static float sigma2_of(const float *x) {
    float sumx2 = 0;
    for (int i = 0; i < 256; i++) sumx2 += x[i] * x[i];
    return 2 * sumx2 / 256;
}

/* The 4-bit code of a group scale under super-block step d (inverse id). */
static uint32_t scale_code(float id, float s) {
    const int v = kq_nearest_int(0.5f * (id * s - 1));
    return (uint32_t)(v < 0 ? 0 : v > 15 ? 15 : v);
}

/* ---- IQ3_XXS: per 32 values 8 grid indices (of 256) and a word of 4 x 7 sign bits and a 4-bit scale ---- */

static void quant_iq3_xxs_block(const iq3_lattice *g, const float *x, const float *qw, blk_iq3_xxs *y) {
    static const search_opts opt = {.is_range = 15, .start_on = true, .refit_all = false};
    float scales[8], weight[32], waux[32], xval[32];
    int8_t l[32];
    uint8_t q3[96] = {0};
    uint32_t words[8] = {0}; /* scales and signs */
    float max_scale = 0;
    const float sigma2 = sigma2_of(x);
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = x + 32 * ib;
        group_weights(xb, qw ? qw + 32 * ib : NULL, sigma2, weight, waux);
        uint8_t signs[4];
        for (int k = 0; k < 4; k++) {
            int nflip = 0;
            uint8_t s = 0;
            for (int i = 0; i < 8; i++) {
                const float v = xb[8 * k + i];
                xval[8 * k + i] = v >= 0 ? v : -v;
                if (v < 0) nflip++, s |= (uint8_t)(1 << i);
            }
            if (nflip % 2) { /* only 7 signs are stored: an even count of minus signs, the cheapest one flipped */
                int imin = 0;
                float min = weight[8 * k] * xb[8 * k] * xb[8 * k];
                for (int i = 1; i < 8; i++) {
                    const float a = weight[8 * k + i] * xb[8 * k + i] * xb[8 * k + i];
                    if (a < min) min = a, imin = i;
                }
                xval[8 * k + imin] = -xval[8 * k + imin];
                s ^= (uint8_t)(1 << imin);
            }
            signs[k] = s & 127;
        }
        float max = xval[0];
        for (int i = 1; i < 32; i++) max = max > xval[i] ? max : xval[i];
        if (max < 1e-8f) {
            scales[ib] = 0;
            continue;
        }
        float scale = search32(g, &opt, xval, weight, waux, max, l);
        if (scale < 0) { /* cannot happen with non-negative xval; kept as ggml keeps it */
            scale = -scale;
            for (int k = 0; k < 4; k++) signs[k] = (uint8_t)(~signs[k] & 127);
        }
        for (int k = 0; k < 8; k++) q3[8 * ib + k] = (uint8_t)g->map[pack_levels(l + 4 * k)];
        words[ib] = signs[0] | (uint32_t)signs[1] << 7 | (uint32_t)signs[2] << 14 | (uint32_t)signs[3] << 21;
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    memset(y, 0, sizeof *y);
    if (!max_scale) return;
    const float d = max_scale / 31;
    y->d = F2H(d * 1.0125f);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ib++) words[ib] |= scale_code(id, scales[ib]) << 28;
    memcpy(y->qs, q3, 64);
    for (int ib = 0; ib < 8; ib++)
        for (int b = 0; b < 4; b++) y->qs[64 + 4 * ib + b] = (uint8_t)(words[ib] >> 8 * b);
}

/* ---- IQ3_S: per 32 values 8 grid indices (of 512, bit 8 in qh), 32 sign bits, a 4-bit scale ---- */

static void quant_iq3_s_block(const iq3_lattice *g, const float *x, const float *qw, blk_iq3_s *y) {
    static const search_opts opt = {.is_range = 9, .start_on = false, .refit_all = true};
    float scales[8], weight[32], waux[32], xval[32];
    int8_t l[32];
    float max_scale = 0;
    memset(y, 0, sizeof *y);
    /* ggml advances its index and sign cursors only past groups it encodes: after
     * an all-zero group the next group's indices and signs land in its slot
     * (while qh and the scales stay by group). Kept, for identical bytes. */
    int at = 0;
    const float sigma2 = sigma2_of(x);
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = x + 32 * ib;
        group_weights(xb, qw ? qw + 32 * ib : NULL, sigma2, weight, waux);
        uint8_t signs[4];
        for (int k = 0; k < 4; k++) {
            uint8_t s = 0;
            for (int i = 0; i < 8; i++) {
                const float v = xb[8 * k + i];
                xval[8 * k + i] = v >= 0 ? v : -v;
                if (v < 0) s |= (uint8_t)(1 << i);
            }
            signs[k] = s;
        }
        float max = xval[0];
        for (int i = 1; i < 32; i++) max = max > xval[i] ? max : xval[i];
        if (!max) {
            scales[ib] = 0;
            continue;
        }
        float scale = search32(g, &opt, xval, weight, waux, max, l);
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 4; k++) signs[k] = (uint8_t)~signs[k];
        }
        for (int k = 0; k < 8; k++) {
            const int gi = g->map[pack_levels(l + 4 * k)];
            y->qs[8 * at + k] = (uint8_t)gi;
            y->qh[ib] |= (uint8_t)((gi >> 8) << k);
        }
        memcpy(y->signs + 4 * at, signs, 4);
        at++;
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) return;
    const float d = max_scale / 31;
    y->d = F2H(d * 1.033f);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ib += 2)
        y->scales[ib / 2] = (uint8_t)(scale_code(id, scales[ib]) | scale_code(id, scales[ib + 1]) << 4);
}

brisk_status quant_iq_quantize_row(uint32_t type, const float *x, void *dst, int64_t n, const float *qw) {
    if (type != QT_IQ3_XXS && type != QT_IQ3_S)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "quantize: no quantizer for %s", quant_type_name(type));
    if (n % 256) return bk_fail(BRISK_ERR_INVALID_ARG, "quantize %s: %lld elements is not a multiple of 256",
                                quant_type_name(type), (long long)n);
    const iq3_lattice *g = lattice(type == QT_IQ3_S);
    if (g->status != BRISK_OK) return bk_fail(g->status, "quantize: out of memory for the IQ3 neighbour lists");
    for (int64_t i = 0; i < n / 256; i++) {
        const float *w = qw ? qw + 256 * i : NULL;
        if (type == QT_IQ3_XXS) quant_iq3_xxs_block(g, x + 256 * i, w, (blk_iq3_xxs *)dst + i);
        else quant_iq3_s_block(g, x + 256 * i, w, (blk_iq3_s *)dst + i);
    }
    return BRISK_OK;
}
