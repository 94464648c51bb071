/* quant_iq_search.c — the i-quant quantizers that search a lattice (IQ1_S, IQ1_M, IQ2_*, IQ3_XXS,
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

enum { LAT_IQ3_XXS, LAT_IQ3_S, LAT_IQ2_XXS, LAT_IQ2_XS, LAT_IQ2_S, LAT_IQ1_S, LAT_COUNT };

typedef struct {
    int n;                  /* grid points */
    int dim, bits;          /* 4 coordinates of 3 bits (IQ3) or 8 of 2 (IQ2) */
    int n_levels;           /* levels a coordinate may take: 8 (IQ3) or 3 (IQ2) */
    int8_t value[2048][8];  /* (n, dim) 2l+1 per coordinate */
    int32_t map[1 << 16];   /* packed levels -> grid index; off the grid: -1 - offset into nbrs */
    uint16_t *nbrs;         /* per off-grid vector: a count, then grid indices by (distance, index) */
    brisk_status status;    /* of the one-time build */
} iq_lattice;

static iq_lattice g_lat[LAT_COUNT];
static pthread_once_t g_once[LAT_COUNT] = {PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT,
                                           PTHREAD_ONCE_INIT, PTHREAD_ONCE_INIT};

static int pack_levels(const iq_lattice *g, const int8_t *l) {
    int u = 0;
    for (int k = 0; k < g->dim; k++) u |= l[k] << g->bits * k;
    return u;
}

/* Squared distances from off-grid vector u to every grid point in d2; the
 * neighbours are all points at the n_dist smallest distinct distances, nearest
 * first, ties by index (a stable sort by distance). Writes them to out (if not
 * NULL) and returns their count. */
static int neighbours(const iq_lattice *g, int u, int n_dist, int *d2, uint16_t *out) {
    int8_t p[8];
    for (int k = 0; k < g->dim; k++) p[k] = (int8_t)(2 * ((u >> g->bits * k) & ((1 << g->bits) - 1)) + 1);
    for (int j = 0; j < g->n; j++) {
        d2[j] = 0;
        for (int k = 0; k < g->dim; k++) d2[j] += (g->value[j][k] - p[k]) * (g->value[j][k] - p[k]);
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

/* Whether every coordinate of u is a level the rounding can produce. */
static bool reachable(const iq_lattice *g, int u) {
    for (int k = 0; k < g->dim; k++)
        if (((u >> g->bits * k) & ((1 << g->bits) - 1)) >= g->n_levels) return false;
    return true;
}

/* The level of grid byte b: the decoders' grids store the points scaled
 * (IQ3_XXS about 8l + 4, IQ3_S 2l + 1, IQ2 8, 25, 43 for l = 0, 1, 2). */
static int grid_level(int which, uint8_t b) {
    switch (which) {
    case LAT_IQ3_XXS: return b / 8;
    case LAT_IQ3_S: return b / 2;
    case LAT_IQ1_S: return (int8_t)b + 1; /* -1, 0, +1 */
    default: return (b - 8) / 17;
    }
}

/* Builds lattice `which` from the decoder's grid: the map, and for every
 * reachable off-grid vector its neighbours (the points at the nearest
 * distance for IQ2_S, the 2 nearest for IQ3_XXS, IQ2_XXS, IQ2_XS, 3 for IQ3_S). */
static void build(int which) {
    iq_lattice *g = &g_lat[which];
    static const int n_points[LAT_COUNT] = {256, 512, 256, 512, 1024, 2048};
    g->n = n_points[which];
    const bool iq3 = which <= LAT_IQ3_S;
    g->dim = iq3 ? 4 : 8, g->bits = iq3 ? 3 : 2, g->n_levels = iq3 ? 8 : 3;
    const int n_dist = which == LAT_IQ3_S || which == LAT_IQ1_S ? 3 : which == LAT_IQ2_S ? 1 : 2, n_map = 1 << g->dim * g->bits;
    for (int j = 0; j < g->n; j++)
        for (int k = 0; k < g->dim; k++) {
            const uint64_t e = which == LAT_IQ3_XXS ? quant_iq3xxs_grid[j] : which == LAT_IQ3_S ? quant_iq3s_grid[j]
                             : which == LAT_IQ2_XXS ? quant_iq2xxs_grid[j] : which == LAT_IQ2_XS ? quant_iq2xs_grid[j]
                             : which == LAT_IQ2_S ? quant_iq2s_grid[j] : quant_iq1s_grid[j];
            g->value[j][k] = (int8_t)(2 * grid_level(which, (uint8_t)(e >> 8 * k)) + 1);
        }
    for (int u = 0; u < n_map; u++) g->map[u] = INT32_MIN;
    for (int j = 0; j < g->n; j++) {
        int8_t l[8];
        for (int k = 0; k < g->dim; k++) l[k] = (int8_t)(g->value[j][k] / 2);
        g->map[pack_levels(g, l)] = j;
    }
    int d2[2048];
    size_t total = 0;
    for (int u = 0; u < n_map; u++)
        if (g->map[u] < 0 && reachable(g, u)) total += 1 + (size_t)neighbours(g, u, n_dist, d2, NULL);
    if (!(g->nbrs = malloc(total * sizeof *g->nbrs))) {
        g->status = bk_fail(BRISK_ERR_NOMEM, "quantize: out of memory for the i-quant neighbour lists");
        return;
    }
    size_t at = 0;
    for (int u = 0; u < n_map; u++) {
        if (g->map[u] >= 0 || !reachable(g, u)) continue;
        g->map[u] = -1 - (int32_t)at;
        const int c = neighbours(g, u, n_dist, d2, g->nbrs + at + 1);
        g->nbrs[at] = (uint16_t)c;
        at += 1 + (size_t)c;
    }
    g->status = BRISK_OK;
}
static void build_0(void) { build(0); }
static void build_1(void) { build(1); }
static void build_2(void) { build(2); }
static void build_3(void) { build(3); }
static void build_4(void) { build(4); }
static void build_5(void) { build(5); }

static const iq_lattice *lattice(int which) {
    static void (*const fn[LAT_COUNT])(void) = {build_0, build_1, build_2, build_3, build_4, build_5};
    pthread_once(&g_once[which], fn[which]);
    return &g_lat[which];
}

/* ---- the search for one group ---- */

/* The grid point among u's neighbours nearest to xval at `scale` (weights w:
 * the square roots of the fit's weights); its levels go to l. */
static int best_neighbour(const iq_lattice *g, int u, const float *xval, const float *w, float scale, int8_t *l) {
    const uint16_t *nb = g->nbrs + (-1 - g->map[u]);
    float best_d2 = FLT_MAX;
    int best = nb[1];
    for (int j = 1; j <= nb[0]; j++) {
        const int8_t *pg = g->value[nb[j]];
        float d2 = 0;
        for (int i = 0; i < g->dim; i++) {
            const float diff = scale * (float)pg[i] - xval[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best_d2) best_d2 = d2, best = nb[j];
    }
    for (int i = 0; i < g->dim; i++) l[i] = (int8_t)((g->value[best][i] - 1) / 2);
    return best;
}

/* Rounds one group of dim values at inverse scale id to levels l; off the
 * grid, takes the best neighbour at `scale`. Returns whether the rounding was
 * on the grid. */
static bool round_group(const iq_lattice *g, const float *xval, const float *waux, float id, float scale, int8_t *l) {
    const int top = g->n_levels - 1;
    for (int i = 0; i < g->dim; i++) {
        const int v = kq_nearest_int(0.5f * (id * xval[i] - 1));
        l[i] = (int8_t)(v < 0 ? 0 : v > top ? top : v);
    }
    const int u = pack_levels(g, l);
    if (g->map[u] >= 0) return true;
    best_neighbour(g, u, xval, waux, scale, l);
    return false;
}

/* sum w x q and sum w q^2 over n values, q = 2l + 1. */
static void fit_sums(int n, const float *weight, const float *xval, const int8_t *l, float *sumqx, float *sumq2) {
    float a = 0, b = 0;
    for (int i = 0; i < n; i++) {
        const float w = weight[i], q = (float)(2 * l[i] + 1);
        a += w * xval[i] * q;
        b += w * q * q;
    }
    *sumqx = a, *sumq2 = b;
}

typedef enum {
    REFIT_OFF,      /* re-round only the groups off the grid, if any (IQ3_XXS, IQ2_XS) */
    REFIT_ALL_OFF,  /* re-round every group if any is off the grid (IQ3_S) */
    REFIT_ALL       /* re-round every group (IQ2_XXS) */
} refit_mode;

typedef struct {
    int n;             /* values in a scale group: 32 or 16 */
    int is_range;      /* trial inverse scales (2 n_levels - 1 + step is) / base, is in [-is_range, is_range] */
    float step;
    bool start_on;     /* the groups count as on the grid before any trial wins */
    refit_mode refit;
} search_opts;

/* Levels l (n) and the scale for one group of n non-negative values xval;
 * trials scale from base (the largest value, or IQ2_XXS's effective maximum),
 * scale0 is the scale kept when no trial fits better. */
static float search_group(const iq_lattice *g, const search_opts *o, const float *xval, const float *weight,
                          const float *waux, float base, float scale0, int8_t *l) {
    int8_t la[32];
    bool on[8], on_aux[8];
    const int n_groups = o->n / g->dim;
    const float top = (float)(2 * g->n_levels - 1);
    float best = 0, scale = scale0;
    memset(l, 0, (size_t)o->n);
    for (int k = 0; k < n_groups; k++) on[k] = o->start_on;
    for (int is = -o->is_range; is <= o->is_range; is++) {
        const float id = (top + (float)is * o->step) / base, this_scale = 1 / id;
        for (int k = 0; k < n_groups; k++)
            on_aux[k] = round_group(g, xval + g->dim * k, waux + g->dim * k, id, this_scale, la + g->dim * k);
        float sumqx, sumq2;
        fit_sums(o->n, weight, xval, la, &sumqx, &sumq2);
        if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
            scale = sumqx / sumq2;
            best = scale * sumqx;
            memcpy(l, la, (size_t)o->n);
            memcpy(on, on_aux, sizeof on);
        }
    }
    int n_off = 0;
    for (int k = 0; k < n_groups; k++) n_off += !on[k];
    if ((o->refit == REFIT_ALL || n_off > 0) && scale > 0) {
        const float id = 1 / scale;
        for (int k = 0; k < n_groups; k++)
            if (o->refit != REFIT_OFF || !on[k]) round_group(g, xval + g->dim * k, waux + g->dim * k, id, scale, l + g->dim * k);
        float sumqx, sumq2;
        fit_sums(o->n, weight, xval, l, &sumqx, &sumq2);
        if (sumq2 > 0) scale = sumqx / sumq2;
    }
    return scale;
}

/* The absolute values of 8 values xb in xval and their sign bits; with
 * `even`, only 7 signs are stored, so an odd count of minus signs is made even
 * by flipping the value that costs least (weight x^2) and is returned as 7 bits. */
static uint8_t split_signs(const float *xb, const float *weight, bool even, float *xval) {
    int nflip = 0;
    uint8_t s = 0;
    for (int i = 0; i < 8; i++) {
        if (xb[i] >= 0) {
            xval[i] = xb[i];
        } else {
            xval[i] = -xb[i];
            nflip++, s |= (uint8_t)(1 << i);
        }
    }
    if (!even) return s;
    if (nflip % 2) {
        int imin = 0;
        float min = weight[0] * xb[0] * xb[0];
        for (int i = 1; i < 8; i++) {
            const float a = weight[i] * xb[i] * xb[i];
            if (a < min) min = a, imin = i;
        }
        xval[imin] = -xval[imin];
        s ^= (uint8_t)(1 << imin);
    }
    return s & 127;
}

/* The fit's weights for the n values xb (qw: their importances or NULL;
 * sigma2: a multiple of the super-block's mean square) and their square roots. */
static void group_weights(int n, const float *xb, const float *qw, float sigma2, float *weight, float *waux) {
    for (int i = 0; i < n; i++) weight[i] = qw ? qw[i] * sqrtf(sigma2 + xb[i] * xb[i]) : xb[i] * xb[i];
    for (int i = 0; i < n; i++) waux[i] = sqrtf(weight[i]);
}

/* The sum of squares of a super-block of 256. */
static float sum_sq(const float *x) {
    float sumx2 = 0;
    for (int i = 0; i < 256; i++) sumx2 += x[i] * x[i];
    return sumx2;
}

static float max_of(int n, const float *v) {
    float max = v[0];
    for (int i = 1; i < n; i++) max = max > v[i] ? max : v[i];
    return max;
}

/* The 4-bit code of a group scale under super-block step d (inverse id). */
static uint32_t scale_code(float id, float s) {
    const int v = kq_nearest_int(0.5f * (id * s - 1));
    return (uint32_t)(v < 0 ? 0 : v > 15 ? 15 : v);
}

/* ---- IQ3_XXS: per 32 values 8 grid indices (of 256) and a word of 4 x 7 sign bits and a 4-bit scale ---- */

static void quant_iq3_xxs_block(const iq_lattice *g, const float *x, const float *qw, blk_iq3_xxs *y) {
    static const search_opts opt = {.n = 32, .is_range = 15, .step = 0.2f, .start_on = true, .refit = REFIT_OFF};
    float scales[8], weight[32], waux[32], xval[32];
    int8_t l[32];
    uint8_t q3[64] = {0};
    uint32_t words[8] = {0}; /* scales and signs */
    float max_scale = 0;
    const float sigma2 = 2 * sum_sq(x) / 256;
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = x + 32 * ib;
        group_weights(32, xb, qw ? qw + 32 * ib : NULL, sigma2, weight, waux);
        uint8_t signs[4];
        for (int k = 0; k < 4; k++) signs[k] = split_signs(xb + 8 * k, weight + 8 * k, true, xval + 8 * k);
        const float max = max_of(32, xval);
        if (max < 1e-8f) {
            scales[ib] = 0;
            continue;
        }
        float scale = search_group(g, &opt, xval, weight, waux, max, max / 15, l);
        if (scale < 0) { /* cannot happen with non-negative xval; kept as ggml keeps it */
            scale = -scale;
            for (int k = 0; k < 4; k++) signs[k] = (uint8_t)(~signs[k] & 127);
        }
        for (int k = 0; k < 8; k++) q3[8 * ib + k] = (uint8_t)g->map[pack_levels(g, l + 4 * k)];
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

static void quant_iq3_s_block(const iq_lattice *g, const float *x, const float *qw, blk_iq3_s *y) {
    static const search_opts opt = {.n = 32, .is_range = 9, .step = 0.2f, .start_on = false, .refit = REFIT_ALL_OFF};
    float scales[8], weight[32], waux[32], xval[32];
    int8_t l[32];
    float max_scale = 0;
    memset(y, 0, sizeof *y);
    /* ggml advances its index and sign cursors only past groups it encodes: after
     * an all-zero group the next group's indices and signs land in its slot
     * (while qh and the scales stay by group). Kept, for identical bytes. */
    int at = 0;
    const float sigma2 = 2 * sum_sq(x) / 256;
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = x + 32 * ib;
        group_weights(32, xb, qw ? qw + 32 * ib : NULL, sigma2, weight, waux);
        uint8_t signs[4];
        for (int k = 0; k < 4; k++) signs[k] = split_signs(xb + 8 * k, weight + 8 * k, false, xval + 8 * k);
        const float max = max_of(32, xval);
        if (!max) {
            scales[ib] = 0;
            continue;
        }
        float scale = search_group(g, &opt, xval, weight, waux, max, max / 15, l);
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 4; k++) signs[k] = (uint8_t)~signs[k];
        }
        for (int k = 0; k < 8; k++) {
            const int gi = g->map[pack_levels(g, l + 4 * k)];
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

/* ---- IQ2_XXS: per 32 values 4 grid indices (of 256, 8 values each), 4 x 7 sign bits, a 4-bit scale ---- */

static void quant_iq2_xxs_block(const iq_lattice *g, const float *x, const float *qw, blk_iq2_xxs *y) {
    static const search_opts opt = {.n = 32, .is_range = 6, .step = 0.1f, .start_on = true, .refit = REFIT_ALL};
    float scales[8], weight[32], waux[32], xval[32];
    int8_t l[32];
    uint32_t q2[16] = {0}; /* per 32: the 4 indices, then signs and scale */
    float max_scale = 0;
    const float sigma2 = sum_sq(x) / 256;
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = x + 32 * ib;
        group_weights(32, xb, qw + 32 * ib, sigma2, weight, waux);
        uint8_t signs[4];
        for (int k = 0; k < 4; k++) signs[k] = split_signs(xb + 8 * k, weight + 8 * k, true, xval + 8 * k);
        const float max = max_of(32, xval);
        if (max < 1e-15f) {
            scales[ib] = 0;
            continue;
        }
        uint8_t lq[32];
        const float scale0 = kq_search_pos(32, 4, xval, lq, weight), eff_max = scale0 * 3;
        if (eff_max <= 0) {
            scales[ib] = 0;
            continue;
        }
        float scale = search_group(g, &opt, xval, weight, waux, eff_max, scale0, l);
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 4; k++) signs[k] = (uint8_t)(~signs[k] & 127);
        }
        for (int k = 0; k < 4; k++) {
            q2[2 * ib] |= (uint32_t)g->map[pack_levels(g, l + 8 * k)] << 8 * k;
            q2[2 * ib + 1] |= (uint32_t)signs[k] << 7 * k;
        }
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    memset(y, 0, sizeof *y);
    if (!max_scale) return;
    const float d = max_scale / 31;
    y->d = F2H(d);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ib++) q2[2 * ib + 1] |= scale_code(id, scales[ib]) << 28;
    for (int i = 0; i < 16; i++) {
        y->qs[2 * i] = (uint16_t)q2[i];
        y->qs[2 * i + 1] = (uint16_t)(q2[i] >> 16);
    }
}

/* ---- IQ2_XS: per 16 values 2 grid indices (of 512) with 7 sign bits each, a 4-bit scale ---- */

static void quant_iq2_xs_block(const iq_lattice *g, const float *x, const float *qw, blk_iq2_xs *y) {
    static const search_opts opt = {.n = 16, .is_range = 9, .step = 0.1f, .start_on = true, .refit = REFIT_OFF};
    float scales[16], weight[16], waux[16], xval[16];
    int8_t l[16];
    uint16_t q2[32] = {0};
    float max_scale = 0;
    const float sigma2 = sum_sq(x) / 256;
    for (int ib = 0; ib < 16; ib++) {
        const float *xb = x + 16 * ib;
        group_weights(16, xb, qw + 16 * ib, sigma2, weight, waux);
        uint8_t signs[2];
        for (int k = 0; k < 2; k++) signs[k] = split_signs(xb + 8 * k, weight + 8 * k, true, xval + 8 * k);
        const float max = max_of(16, xval);
        if (max < 1e-15f) {
            scales[ib] = 0;
            continue;
        }
        float scale = search_group(g, &opt, xval, weight, waux, max, max / 5, l);
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 2; k++) signs[k] = (uint8_t)(~signs[k] & 127);
        }
        for (int k = 0; k < 2; k++) q2[2 * ib + k] = (uint16_t)(g->map[pack_levels(g, l + 8 * k)] | signs[k] << 9);
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    memset(y, 0, sizeof *y);
    if (!max_scale) return;
    const float d = max_scale / 31;
    y->d = F2H(d);
    const float id = 1 / d;
    for (int ib = 0; ib < 16; ib += 2)
        y->scales[ib / 2] = (uint8_t)(scale_code(id, scales[ib]) | scale_code(id, scales[ib + 1]) << 4);
    memcpy(y->qs, q2, sizeof q2);
}

/* ---- IQ2_S: per 16 values 2 grid indices (of 1024, bits 8-9 in qh) with 8 sign bits each, a 4-bit scale ---- */

static void quant_iq2_s_block(const iq_lattice *g, const float *x, const float *qw, blk_iq2_s *y) {
    static const search_opts opt = {.n = 16, .is_range = 9, .step = 0.1f, .start_on = true, .refit = REFIT_OFF};
    float scales[16], weight[16], waux[16], xval[16];
    int8_t l[16];
    float max_scale = 0;
    memset(y, 0, sizeof *y);
    const float sigma2 = 2 * sum_sq(x) / 256;
    for (int ib = 0; ib < 16; ib++) {
        const float *xb = x + 16 * ib;
        if (qw) {
            group_weights(16, xb, qw + 16 * ib, sigma2, weight, waux);
        } else { /* no importances: x^2 plus an eighth of the block's mean square */
            for (int i = 0; i < 16; i++) weight[i] = 0.25f * sigma2 + xb[i] * xb[i];
            for (int i = 0; i < 16; i++) waux[i] = sqrtf(weight[i]);
        }
        uint8_t signs[2];
        for (int k = 0; k < 2; k++) signs[k] = split_signs(xb + 8 * k, weight + 8 * k, false, xval + 8 * k);
        const float max = max_of(16, xval);
        if (max < 1e-8f) {
            scales[ib] = 0;
            continue;
        }
        float scale = search_group(g, &opt, xval, weight, waux, max, max / 5, l);
        if (scale < 0) {
            scale = -scale;
            for (int k = 0; k < 2; k++) signs[k] = (uint8_t)~signs[k];
        }
        for (int k = 0; k < 2; k++) {
            const int gi = g->map[pack_levels(g, l + 8 * k)], i8 = 2 * ib + k;
            y->qs[i8] = (uint8_t)gi;
            y->qh[i8 / 4] |= (uint8_t)((gi >> 8) << 2 * (i8 % 4));
            y->qs[32 + i8] = signs[k];
        }
        scales[ib] = scale;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) return;
    const float d = max_scale / 31;
    y->d = F2H(d * 0.9875f);
    const float id = 1 / d;
    for (int ib = 0; ib < 16; ib += 2)
        y->scales[ib / 2] = (uint8_t)(scale_code(id, scales[ib]) | scale_code(id, scales[ib + 1]) << 4);
}

/* ---- IQ1_S: per 32 values 4 grid indices (of 2048, 8 ternary values each), a 3-bit scale, a shift sign ---- */

/* A value and its position, sorted by value with the C library's qsort as
 * ggml sorts them (the same comparator on the same 8-byte elements, so equal
 * values end in the same order). */
typedef struct { float v; int32_t i; } iq1_pair;
static int by_value(const void *a, const void *b) {
    const float x = ((const iq1_pair *)a)->v, y = ((const iq1_pair *)b)->v;
    return x < y ? -1 : x > y ? 1 : 0;
}

/* The neighbour of off-grid vector u nearest to xb (weights w) on the shifted
 * levels xx at `scale`; its levels go to l. */
static int iq1_neighbour(const iq_lattice *g, int u, const float *xb, const float *w, float scale, const float *xx,
                         int8_t *l) {
    const uint16_t *nb = g->nbrs + (-1 - g->map[u]);
    float best_d2 = FLT_MAX;
    int best = nb[1];
    for (int j = 1; j <= nb[0]; j++) {
        float d2 = 0;
        for (int i = 0; i < 8; i++) {
            const float diff = scale * xx[(g->value[nb[j]][i] - 1) / 2] - xb[i];
            d2 += w[i] * diff * diff;
        }
        if (d2 < best_d2) best_d2 = d2, best = nb[j];
    }
    for (int i = 0; i < 8; i++) l[i] = (int8_t)((g->value[best][i] - 1) / 2);
    return best;
}

/* The best split of the sorted values into levels 0 | 1 | 2 (the two
 * boundaries i1 <= i2) and shift (+1: levels -1, 0, 1 moved up by 1/8; -1:
 * down), by weighted least squares over the prefix sums. Returns the scale;
 * *shift = 0 if no split fits. */
static float iq1_split(const float *sumx, const float *sumw, const float *x_p, const float *x_m, int *i1_out,
                       int *i2_out, int *shift) {
    float best = -FLT_MAX, scale = 0;
    *shift = 0;
    for (int i1 = 0; i1 <= 32; i1++)
        for (int i2 = i1; i2 <= 32; i2++)
            for (int sh = 1; sh >= -1; sh -= 2) {
                const float *xs = sh == 1 ? x_p : x_m;
                const float sumqx = (sumx[i1] - sumx[0]) * xs[0] + (sumx[i2] - sumx[i1]) * xs[1] + (sumx[32] - sumx[i2]) * xs[2];
                const float sumq2 = (sumw[i1] - sumw[0]) * xs[0] * xs[0] + (sumw[i2] - sumw[i1]) * xs[1] * xs[1] +
                                    (sumw[32] - sumw[i2]) * xs[2] * xs[2];
                if (sumq2 > 0 && sumqx * sumqx > best * sumq2) {
                    scale = sumqx / sumq2;
                    best = scale * sumqx;
                    *i1_out = i1, *i2_out = i2, *shift = sh;
                }
            }
    return scale;
}

static void quant_iq1_s_block(const iq_lattice *g, const float *x, const float *qw, blk_iq1_s *y) {
    static const float x_p[3] = {-1 + 0.125f, 0.125f, 1 + 0.125f}, x_m[3] = {-1 - 0.125f, -0.125f, 1 - 0.125f};
    float scales[8], weight[32], sumx[33], sumw[33];
    int8_t shifts[8], l[32];
    iq1_pair pairs[32];
    float max_scale = 0;
    memset(y, 0, sizeof *y);
    const float sigma2 = 2 * sum_sq(x) / 256;
    for (int ib = 0; ib < 8; ib++) {
        const float *xb = x + 32 * ib;
        for (int i = 0; i < 32; i++) weight[i] = qw[32 * ib + i] * sqrtf(sigma2 + xb[i] * xb[i]);
        float max = fabsf(xb[0]);
        for (int i = 1; i < 32; i++) max = max > fabsf(xb[i]) ? max : fabsf(xb[i]);
        scales[ib] = 0, shifts[ib] = 1;
        if (max < 1e-12f) continue;
        for (int j = 0; j < 32; j++) pairs[j] = (iq1_pair){xb[j], j};
        qsort(pairs, 32, sizeof *pairs, by_value);
        sumx[0] = sumw[0] = 0;
        for (int j = 0; j < 32; j++) {
            const int i = pairs[j].i;
            sumx[j + 1] = sumx[j] + weight[i] * xb[i];
            sumw[j + 1] = sumw[j] + weight[i];
        }
        int i1 = -1, i2 = -1, shift;
        float scale = iq1_split(sumx, sumw, x_p, x_m, &i1, &i2, &shift);
        if (!shift) continue;
        for (int j = 0; j < 32; j++) l[pairs[j].i] = (int8_t)(j < i1 ? 0 : j < i2 ? 1 : 2);
        if (scale < 0) {
            for (int j = 0; j < 32; j++) l[j] = (int8_t)(2 - l[j]);
            scale = -scale, shift = -shift;
        }
        const float *xx = shift == 1 ? x_p : x_m;
        int index[4];
        bool all_on = true;
        for (int k = 0; k < 4; k++) {
            const int u = pack_levels(g, l + 8 * k);
            index[k] = g->map[u];
            if (index[k] < 0) {
                all_on = false;
                index[k] = iq1_neighbour(g, u, xb + 8 * k, weight + 8 * k, scale, xx, l + 8 * k);
            }
        }
        if (!all_on) {
            float sumqx = 0, sumq2 = 0;
            for (int k = 0; k < 4; k++)
                for (int j = 0; j < 8; j++) {
                    const float w = weight[8 * k + j], q = xx[(g->value[index[k]][j] - 1) / 2];
                    sumqx += w * q * xb[8 * k + j];
                    sumq2 += w * q * q;
                }
            if (sumqx > 0 && sumq2 > 0) scale = sumqx / sumq2;
        }
        uint16_t h = 0;
        for (int k = 0; k < 4; k++) {
            y->qs[4 * ib + k] = (uint8_t)index[k];
            h |= (uint16_t)((index[k] >> 8) << 3 * k);
        }
        y->qh[ib] = h;
        scales[ib] = scale, shifts[ib] = (int8_t)shift;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) return;
    const float d = max_scale / 15;
    y->d = F2H(d * 1.125f);
    const float id = 1 / d;
    for (int ib = 0; ib < 8; ib++) {
        int v = kq_nearest_int(0.5f * (id * scales[ib] - 1));
        v = v < 0 ? 0 : v > 7 ? 7 : v;
        if (shifts[ib] == -1) v |= 8;
        y->qh[ib] |= (uint16_t)(v << 12);
    }
}

/* ---- IQ1_M: per 16 values 2 grid indices (IQ1_S's grid), a 3-bit scale, a shift sign per 8 ---- */

/* The best split of the 16 sorted values into levels 0 | 1 | 2 and the two
 * shift signs (k = 0: +,+; 1: +,-; 2: -,+; 3: -,-, the first sign for the
 * first 8 positions, the second for the last 8). Sums are accumulated value by
 * value in sorted order for every split, as ggml does. Returns the scale and
 * the choice in *best_k (-1 if no split fits). */
static float iq1m_split(const iq1_pair *pairs, const float *xb, const float *weight, const float *x_p,
                        const float *x_m, float max, int *i1_out, int *i2_out, int *best_k) {
    float best = -FLT_MAX, scale = max;
    *best_k = -1;
    for (int i1 = 0; i1 <= 16; i1++)
        for (int i2 = i1; i2 <= 16; i2++) {
            float sx[4] = {0, 0, 0, 0}, s2[4] = {0, 0, 0, 0};
            for (int j = 0; j < 16; j++) {
                const int i = pairs[j].i, lv = j < i1 ? 0 : j < i2 ? 1 : 2;
                const float pqx = weight[i] * x_p[lv] * xb[i], mqx = weight[i] * x_m[lv] * xb[i];
                const float pq2 = weight[i] * x_p[lv] * x_p[lv], mq2 = weight[i] * x_m[lv] * x_m[lv];
                /* plus-shift accumulators: both halves for k = 0, the first half for k = 1, the second for k = 2 */
                const bool first = i < 8;
                sx[0] += pqx, s2[0] += pq2;
                sx[3] += mqx, s2[3] += mq2;
                if (first) sx[1] += pqx, s2[1] += pq2, sx[2] += mqx, s2[2] += mq2;
                else sx[2] += pqx, s2[2] += pq2, sx[1] += mqx, s2[1] += mq2;
            }
            for (int k = 0; k < 4; k++)
                if (s2[k] > 0 && sx[k] * sx[k] > best * s2[k]) {
                    scale = sx[k] / s2[k];
                    best = scale * sx[k];
                    *i1_out = i1, *i2_out = i2, *best_k = k;
                }
        }
    return scale;
}

static void iq1m_weights(const float *xb, const float *qw, float sigma2, float *weight) {
    for (int i = 0; i < 16; i++) weight[i] = qw ? qw[i] * sqrtf(sigma2 + xb[i] * xb[i]) : xb[i] * xb[i];
}

static void quant_iq1_m_block(const iq_lattice *g, const float *x, const float *qw, blk_iq1_m *y) {
    static const float x_p[3] = {-1 + 0.125f, 0.125f, 1 + 0.125f}, x_m[3] = {-1 - 0.125f, -0.125f, 1 - 0.125f};
    float scales[16], weight[16];
    int shifts[16];
    int8_t l[16];
    iq1_pair pairs[16];
    float max_scale = 0;
    memset(y, 0, sizeof *y);
    const float sigma2 = 2 * sum_sq(x) / 256;
    for (int ib = 0; ib < 16; ib++) {
        const float *xb = x + 16 * ib;
        iq1m_weights(xb, qw ? qw + 16 * ib : NULL, sigma2, weight);
        float max = fabsf(xb[0]);
        for (int i = 1; i < 16; i++) max = max > fabsf(xb[i]) ? max : fabsf(xb[i]);
        scales[ib] = 0, shifts[ib] = 0;
        if (max < 1e-7f) continue;
        for (int j = 0; j < 16; j++) pairs[j] = (iq1_pair){xb[j], j};
        qsort(pairs, 16, sizeof *pairs, by_value);
        int i1 = -1, i2 = -1, k_best;
        float scale = iq1m_split(pairs, xb, weight, x_p, x_m, max, &i1, &i2, &k_best);
        if (k_best < 0 || i1 < 0 || i2 < 0) continue;
        for (int j = 0; j < 16; j++) l[pairs[j].i] = (int8_t)(j < i1 ? 0 : j < i2 ? 1 : 2);
        if (scale < 0) {
            for (int j = 0; j < 16; j++) l[j] = (int8_t)(2 - l[j]);
            scale = -scale, k_best = 3 - k_best;
        }
        int index[2];
        bool all_on = true;
        for (int k = 0; k < 2; k++) {
            const float *xx = (k == 0 ? k_best < 2 : k_best % 2 == 0) ? x_p : x_m;
            const int u = pack_levels(g, l + 8 * k);
            index[k] = g->map[u];
            if (index[k] < 0) {
                all_on = false;
                index[k] = iq1_neighbour(g, u, xb + 8 * k, weight + 8 * k, scale, xx, l + 8 * k);
            }
        }
        if (!all_on) {
            float sumqx = 0, sumq2 = 0;
            for (int k = 0; k < 2; k++) {
                const float *xx = (k == 0 ? k_best < 2 : k_best % 2 == 0) ? x_p : x_m;
                for (int j = 0; j < 8; j++) {
                    const float w = weight[8 * k + j], q = xx[(g->value[index[k]][j] - 1) / 2];
                    sumqx += w * q * xb[8 * k + j];
                    sumq2 += w * q * q;
                }
            }
            if (sumqx > 0 && sumq2 > 0) scale = sumqx / sumq2;
        }
        y->qs[2 * ib] = (uint8_t)index[0];
        y->qs[2 * ib + 1] = (uint8_t)index[1];
        y->qh[ib] = (uint8_t)((index[0] >> 8) | (index[1] >> 8) << 4);
        scales[ib] = scale, shifts[ib] = k_best;
        max_scale = max_scale > scale ? max_scale : scale;
    }
    if (!max_scale) return;
    /* the 3-bit scales, 4 to a little-endian uint16; the shift signs in bit 3 of each qh nibble */
    uint16_t sc[4] = {0, 0, 0, 0};
    float d = max_scale / 15;
    const float id = 1 / d;
    float sumqx = 0, sumq2 = 0;
    for (int ib = 0; ib < 16; ib++) {
        int v = kq_nearest_int(0.5f * (id * scales[ib] - 1));
        v = v < 0 ? 0 : v > 7 ? 7 : v;
        sc[ib / 4] |= (uint16_t)(v << 3 * (ib % 4));
        y->qh[ib] |= (uint8_t)((shifts[ib] & 1 ? 0x80 : 0) | (shifts[ib] & 2 ? 0x08 : 0));
        const float *xb = x + 16 * ib;
        iq1m_weights(xb, qw ? qw + 16 * ib : NULL, sigma2, weight);
        /* the fp16 scale is refitted over the whole block at the encoded scales */
        for (int k = 0; k < 2; k++) {
            const float *xx = (k == 0 ? shifts[ib] < 2 : shifts[ib] % 2 == 0) ? x_p : x_m;
            const int idx = y->qs[2 * ib + k] | ((y->qh[ib] >> 4 * k) & 7) << 8;
            for (int j = 0; j < 8; j++) {
                const float w = weight[8 * k + j], q = xx[(g->value[idx][j] - 1) / 2] * (float)(2 * v + 1);
                sumqx += w * q * xb[8 * k + j];
                sumq2 += w * q * q;
            }
        }
    }
    if (sumq2 > 0) d = sumqx / sumq2;
    const uint16_t h = F2H(d * 1.1125f);
    for (int k = 0; k < 4; k++) sc[k] |= (uint16_t)(((h >> 4 * k) & 0xf) << 12);
    for (int k = 0; k < 4; k++) y->scales[2 * k] = (uint8_t)sc[k], y->scales[2 * k + 1] = (uint8_t)(sc[k] >> 8);
}

brisk_status quant_iq_quantize_row(uint32_t type, const float *x, void *dst, int64_t n, const float *qw) {
    int which;
    switch (type) {
    case QT_IQ3_XXS: which = LAT_IQ3_XXS; break;
    case QT_IQ3_S: which = LAT_IQ3_S; break;
    case QT_IQ2_XXS: which = LAT_IQ2_XXS; break;
    case QT_IQ2_XS: which = LAT_IQ2_XS; break;
    case QT_IQ2_S: which = LAT_IQ2_S; break;
    case QT_IQ1_S: case QT_IQ1_M: which = LAT_IQ1_S; break;
    default: return bk_fail(BRISK_ERR_UNSUPPORTED, "quantize: no quantizer for %s", quant_type_name(type));
    }
    if (n % 256) return bk_fail(BRISK_ERR_INVALID_ARG, "quantize %s: %lld elements is not a multiple of 256",
                                quant_type_name(type), (long long)n);
    if (!qw && (which == LAT_IQ2_XXS || which == LAT_IQ2_XS || type == QT_IQ1_S))
        return bk_fail(BRISK_ERR_INVALID_ARG, "quantize %s: needs an importance matrix (--imatrix)",
                       quant_type_name(type));
    const iq_lattice *g = lattice(which);
    if (g->status != BRISK_OK) return bk_fail(g->status, "quantize: out of memory for the i-quant neighbour lists");
    for (int64_t i = 0; i < n / 256; i++) {
        const float *xi = x + 256 * i, *w = qw ? qw + 256 * i : NULL;
        switch (which) {
        case LAT_IQ3_XXS: quant_iq3_xxs_block(g, xi, w, (blk_iq3_xxs *)dst + i); break;
        case LAT_IQ3_S: quant_iq3_s_block(g, xi, w, (blk_iq3_s *)dst + i); break;
        case LAT_IQ2_XXS: quant_iq2_xxs_block(g, xi, w, (blk_iq2_xxs *)dst + i); break;
        case LAT_IQ2_XS: quant_iq2_xs_block(g, xi, w, (blk_iq2_xs *)dst + i); break;
        case LAT_IQ2_S: quant_iq2_s_block(g, xi, w, (blk_iq2_s *)dst + i); break;
        default:
            if (type == QT_IQ1_M) quant_iq1_m_block(g, xi, w, (blk_iq1_m *)dst + i);
            else quant_iq1_s_block(g, xi, w, (blk_iq1_s *)dst + i);
            break;
        }
    }
    return BRISK_OK;
}
