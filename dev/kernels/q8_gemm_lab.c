/* q8_gemm_lab.c — AVX2 Q8_0 x Q8_0 multi-row product for prompt tiles (16 weight rows x 32 tokens),
 * versions side by side, each checked bitwise against cpu_get_gemm(QT_Q8_0) (ggml's vec_dot order:
 * per (row, token) an 8-lane float sum of (dw*dx) * int32 block sums, reduced at the end).
 * Build: cc -O2 -mavx2 -mfma -mf16c -Iinclude -Isrc dev/kernels/q8_gemm_lab.c build-cpu/libbrisk.a -lm -lpthread -ldl
 * Run:   ./a.out [cols]   (default 1024 and 3072; 3072 rows, 32 tokens) */
#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <math.h>

#include "backend/cpu/cpu_dot.h"
#include "quant/quant.h"

#ifndef UNR
#define UNR 2
#endif
#define PRAGMA(x) _Pragma(#x)
#define UNROLL_(n) PRAGMA(GCC unroll n)
#define UNROLL(n) UNROLL_(n)
#define KINL static inline __attribute__((always_inline))

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

KINL float hsum8(__m256 v) {
    __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
    s = _mm_add_ps(s, _mm_movehl_ps(s, s));
    s = _mm_add_ss(s, _mm_movehdup_ps(s));
    return _mm_cvtss_f32(s);
}

/* int32 lanes = pair sums of the u8*s8 products; SHIFT: the pair add by shifts, off the multiplier */
KINL __m256i pdot(__m256i u, __m256i s, int shift) {
    const __m256i m = _mm256_maddubs_epi16(u, s);
    if (shift) return _mm256_add_epi32(_mm256_srai_epi32(_mm256_slli_epi32(m, 16), 16), _mm256_srai_epi32(m, 16));
    return _mm256_madd_epi16(m, _mm256_set1_epi16(1));
}

/* per-call float scales: dwf[r * nb + b], dxf[b * 32 + t] */
static _Thread_local float *g_buf;
static _Thread_local size_t g_cap;

static float *scales(int64_t nb, const void *w, size_t ws, int nw, const void *x, size_t xs, int nx, float **dxf) {
    size_t need = (size_t)nb * (16 + 32) + 64;
    if (need > g_cap) {
        free(g_buf);
        g_buf = aligned_alloc(64, need * 4 + 64);
        g_cap = need;
    }
    float *dwf = g_buf, *dx = g_buf + (size_t)nb * 16;
    for (int r = 0; r < nw; r++) {
        const blk_q8_0 *a = (const blk_q8_0 *)((const char *)w + (size_t)r * ws);
        for (int64_t b = 0; b < nb; b++) dwf[(size_t)r * nb + b] = _cvtsh_ss(a[b].d);
    }
    for (int t = 0; t < nx; t++) {
        const blk_q8_0 *a = (const blk_q8_0 *)((const char *)x + (size_t)t * xs);
        for (int64_t b = 0; b < nb; b++) dx[(size_t)b * 32 + t] = _cvtsh_ss(a[b].d);
    }
    *dxf = dx;
    return dwf;
}

/* RM rows x RN tokens; scale products: one mul per row (vbroadcast dw x the tokens' dx), stored,
 * re-broadcast per pair from memory (a load, no ALU op). */
KINL void tile(int RM, int RN, int SHIFT, int64_t nb, const char *w, size_t ws, const float *dwf, const char *x,
               size_t xs, const float *dxf, float *s, size_t ss) {
    __m256 acc[4][4];
    for (int r = 0; r < RM; r++)
        for (int t = 0; t < RN; t++) acc[r][t] = _mm256_setzero_ps();
    float sc[4][8] __attribute__((aligned(32)));
    for (int64_t b = 0; b < nb; b++) {
        const __m128 dx4 = _mm_loadu_ps(dxf + (size_t)b * 32);
        __m256i wv[4], uw[4];
        for (int r = 0; r < RM; r++) {
            wv[r] = _mm256_loadu_si256((const __m256i *)((const blk_q8_0 *)(w + (size_t)r * ws) + b)->qs);
            uw[r] = _mm256_sign_epi8(wv[r], wv[r]);
            _mm_store_ps(sc[r], _mm_mul_ps(_mm_broadcast_ss(dwf + (size_t)r * nb + b), dx4));
        }
        for (int t = 0; t < RN; t++) {
            const __m256i yv = _mm256_loadu_si256((const __m256i *)((const blk_q8_0 *)(x + (size_t)t * xs) + b)->qs);
            for (int r = 0; r < RM; r++) {
                const __m256i p = pdot(uw[r], _mm256_sign_epi8(yv, wv[r]), SHIFT);
                acc[r][t] = _mm256_fmadd_ps(_mm256_broadcast_ss(&sc[r][t]), _mm256_cvtepi32_ps(p), acc[r][t]);
            }
        }
    }
    for (int r = 0; r < RM; r++)
        for (int t = 0; t < RN; t++) s[(size_t)r * ss + t] = hsum8(acc[r][t]);
}

/* Same, the scales multiplied per pair from two broadcasts (no store). */
KINL void tile_mul(int RM, int RN, int SHIFT, int64_t nb, const char *w, size_t ws, const float *dwf, const char *x,
                   size_t xs, const float *dxf, float *s, size_t ss) {
    __m256 acc[4][4];
    for (int r = 0; r < RM; r++)
        for (int t = 0; t < RN; t++) acc[r][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i wv[4], uw[4];
        __m256 dw[4];
        for (int r = 0; r < RM; r++) {
            wv[r] = _mm256_loadu_si256((const __m256i *)((const blk_q8_0 *)(w + (size_t)r * ws) + b)->qs);
            uw[r] = _mm256_sign_epi8(wv[r], wv[r]);
            dw[r] = _mm256_broadcast_ss(dwf + (size_t)r * nb + b);
        }
        for (int t = 0; t < RN; t++) {
            const __m256i yv = _mm256_loadu_si256((const __m256i *)((const blk_q8_0 *)(x + (size_t)t * xs) + b)->qs);
            const __m256 dx = _mm256_broadcast_ss(dxf + (size_t)b * 32 + t);
            for (int r = 0; r < RM; r++) {
                const __m256i p = pdot(uw[r], _mm256_sign_epi8(yv, wv[r]), SHIFT);
                acc[r][t] = _mm256_fmadd_ps(_mm256_mul_ps(dw[r], dx), _mm256_cvtepi32_ps(p), acc[r][t]);
            }
        }
    }
    for (int r = 0; r < RM; r++)
        for (int t = 0; t < RN; t++) s[(size_t)r * ss + t] = hsum8(acc[r][t]);
}

#define DRIVER(NAME, TILE, RM, SHIFT)                                                                  \
    static void NAME(int64_t n, const void *w, size_t ws, int nw, const void *x, size_t xs, int nx, float *s, \
                     size_t ss) {                                                                     \
        const int64_t nb = n / 32;                                                            \
        float *dxf, *dwf = scales(nb, w, ws, nw, x, xs, nx, &dxf);                            \
        for (int r = 0; r < nw; r += RM) {                                                    \
            const char *wr = (const char *)w + (size_t)r * ws;                                \
            const float *dr = dwf + (size_t)r * nb;                                           \
            if (nw - r >= RM) {                                                               \
                int t = 0;                                                                    \
                for (; t + 4 <= nx; t += 4)                                                   \
                    TILE(RM, 4, SHIFT, nb, wr, ws, dr, (const char *)x + (size_t)t * xs, xs, dxf + t, s + (size_t)r * ss + t, ss); \
                for (; t < nx; t++)                                                           \
                    TILE(RM, 1, SHIFT, nb, wr, ws, dr, (const char *)x + (size_t)t * xs, xs, dxf + t, s + (size_t)r * ss + t, ss); \
            } else                                                                            \
                for (int rr = r; rr < nw; rr++)                                               \
                    for (int t = 0; t < nx; t++)                                              \
                        TILE(1, 1, SHIFT, nb, (const char *)w + (size_t)rr * ws, ws, dwf + (size_t)rr * nb, \
                             (const char *)x + (size_t)t * xs, xs, dxf + t, s + (size_t)rr * ss + t, ss); \
        }                                                                                     \
    }

DRIVER(v_1x4_st, tile, 1, 0)
DRIVER(v_2x4_st, tile, 2, 0)
DRIVER(v_2x4_st_sh, tile, 2, 1)
DRIVER(v_3x4_st, tile, 3, 0)
DRIVER(v_1x4_mul, tile_mul, 1, 0)
DRIVER(v_2x4_mul, tile_mul, 2, 0)
DRIVER(v_2x4_mul_sh, tile_mul, 2, 1)


/* ---- int16 panel: 8 weight rows a ymm lane each, element pairs (vpmaddwd), tokens' int16 rows
 * broadcast a pair at a time; a different float order (per block: int32 sum -> float, times
 * dw*dx, added), so checked against the exact sums with a tolerance. ---- */
typedef struct { int16_t q[16][8][2]; float d[8]; } p16_blk;
static double g_tpack; /* 544 B: 8 rows, one 32-block */

static void pack16(int64_t nb, const char *w, size_t ws, p16_blk *pn) {
    for (int64_t b = 0; b < nb; b++)
        for (int r = 0; r < 8; r++) {
            const blk_q8_0 *a = (const blk_q8_0 *)(w + (size_t)r * ws) + b;
            pn[b].d[r] = _cvtsh_ss(a->d);
            for (int g = 0; g < 16; g++) pn[b].q[g][r][0] = a->qs[2 * g], pn[b].q[g][r][1] = a->qs[2 * g + 1];
        }
}

KINL void p16_tile(int T, int64_t nb, const p16_blk *pn, const int16_t *x16, size_t x16s, const float *dxf,
                   float *out) {
    __m256 acc[6];
    for (int t = 0; t < T; t++) acc[t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i is[6];
        for (int t = 0; t < T; t++) is[t] = _mm256_setzero_si256();
UNROLL(UNR)
        for (int g = 0; g < 16; g++) {
            const __m256i wv = _mm256_load_si256((const __m256i *)pn[b].q[g]);
#pragma GCC unroll 6
            for (int t = 0; t < T; t++) {
                int32_t v;
                memcpy(&v, x16 + (size_t)t * x16s + b * 32 + 2 * g, 4);
                is[t] = _mm256_add_epi32(is[t], _mm256_madd_epi16(wv, _mm256_set1_epi32(v)));
            }
        }
        const __m256 dw = _mm256_load_ps(pn[b].d);
#pragma GCC unroll 6
        for (int t = 0; t < T; t++)
            acc[t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[t]), _mm256_mul_ps(dw, _mm256_broadcast_ss(dxf + b * 32 + t)), acc[t]);
    }
    for (int t = 0; t < T; t++) _mm256_storeu_ps(out + 8 * t, acc[t]);
}


KINL void p16_tile2(int T, int64_t nb, const p16_blk *pa, const p16_blk *pb, const int16_t *x16, size_t x16s,
                    const float *dxf, float *out) {
    __m256 acc[2][4];
    for (int t = 0; t < T; t++) acc[0][t] = acc[1][t] = _mm256_setzero_ps();
    for (int64_t b = 0; b < nb; b++) {
        __m256i is[2][4];
        for (int t = 0; t < T; t++) is[0][t] = is[1][t] = _mm256_setzero_si256();
UNROLL(UNR)
        for (int g = 0; g < 16; g++) {
            const __m256i w0 = _mm256_load_si256((const __m256i *)pa[b].q[g]);
            const __m256i w1 = _mm256_load_si256((const __m256i *)pb[b].q[g]);
#pragma GCC unroll 4
            for (int t = 0; t < T; t++) {
                int32_t v;
                memcpy(&v, x16 + (size_t)t * x16s + b * 32 + 2 * g, 4);
                const __m256i xv = _mm256_set1_epi32(v);
                is[0][t] = _mm256_add_epi32(is[0][t], _mm256_madd_epi16(w0, xv));
                is[1][t] = _mm256_add_epi32(is[1][t], _mm256_madd_epi16(w1, xv));
            }
        }
        const __m256 d0 = _mm256_load_ps(pa[b].d), d1 = _mm256_load_ps(pb[b].d);
#pragma GCC unroll 4
        for (int t = 0; t < T; t++) {
            const __m256 dx = _mm256_broadcast_ss(dxf + b * 32 + t);
            acc[0][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[0][t]), _mm256_mul_ps(d0, dx), acc[0][t]);
            acc[1][t] = _mm256_fmadd_ps(_mm256_cvtepi32_ps(is[1][t]), _mm256_mul_ps(d1, dx), acc[1][t]);
        }
    }
    for (int t = 0; t < T; t++) _mm256_storeu_ps(out + 8 * t, acc[0][t]), _mm256_storeu_ps(out + 48 + 8 * t, acc[1][t]);
}

static void lab_p16(int T, int rows, int cols, const uint8_t *w, size_t rs, const uint8_t *x, size_t xs, int nx,
                    float *res /* [rows][32] */) {
    const int64_t nb = cols / 32;
    p16_blk *pn = aligned_alloc(64, sizeof(p16_blk) * nb);
    int16_t *x16 = malloc(sizeof(int16_t) * cols * 32);
    float *dxf = malloc(sizeof(float) * nb * 32), out[8 * 12];
    for (int t = 0; t < nx; t++) {
        const blk_q8_0 *a = (const blk_q8_0 *)(x + (size_t)t * xs);
        for (int64_t b = 0; b < nb; b++) {
            dxf[b * 32 + t] = _cvtsh_ss(a[b].d);
            for (int j = 0; j < 32; j++) x16[(size_t)t * cols + b * 32 + j] = a[b].qs[j];
        }
    }
    double tp = 0;
    p16_blk *pn2 = aligned_alloc(64, sizeof(p16_blk) * nb);
    if (T >= 10) {
        const int TT = T - 10;
        for (int r = 0; r < rows; r += 16) {
            double t0 = now();
            pack16(nb, (const char *)w + (size_t)r * rs, rs, pn);
            pack16(nb, (const char *)w + (size_t)(r + 8) * rs, rs, pn2);
            tp += now() - t0;
            for (int rep = 0; rep < (res ? 1 : 8); rep++)
                for (int t = 0; t < nx; t += TT) {
                    if (TT == 3) p16_tile2(3, nb, pn, pn2, x16 + (size_t)t * cols, cols, dxf + t, out);
                    else p16_tile2(2, nb, pn, pn2, x16 + (size_t)t * cols, cols, dxf + t, out);
                    for (int tt = 0; tt < TT && t + tt < nx; tt++)
                        for (int rr = 0; rr < 16; rr++)
                            if (res) res[(size_t)(r + rr) * 32 + t + tt] = out[(rr >= 8 ? 48 : 0) + 8 * tt + rr % 8];
                }
        }
        free(pn); free(pn2); free(x16); free(dxf);
        g_tpack = tp;
        return;
    }
    for (int r = 0; r < rows; r += 8) {
        double t0 = now();
        pack16(nb, (const char *)w + (size_t)r * rs, rs, pn);
        tp += now() - t0;
        for (int rep = 0; rep < (res ? 1 : 8); rep++)
        for (int t = 0; t < nx; t += T) {
            if (T == 4) p16_tile(4, nb, pn, x16 + (size_t)t * cols, cols, dxf + t, out);
            else if (T == 3) p16_tile(3, nb, pn, x16 + (size_t)t * cols, cols, dxf + t, out);
            else p16_tile(6, nb, pn, x16 + (size_t)t * cols, cols, dxf + t, out);
            for (int tt = 0; tt < T && t + tt < nx; tt++)
                for (int rr = 0; rr < 8; rr++) if (res) res[(size_t)(r + rr) * 32 + t + tt] = out[8 * tt + rr];
        }
    }
    free(pn); free(x16); free(dxf);
    g_tpack = tp;
}

int main(int argc, char **argv) {
    cpu_dot_init();
    const int rows = 3072;
    int colsv[2] = {1024, 3072}, ncols = 2;
    if (argc > 1) colsv[0] = atoi(argv[1]), ncols = 1;
    struct { const char *name; cpu_gemm_fn f; } v[] = {
        {"current", cpu_get_gemm(QT_Q8_0)}, {"1x4 st", v_1x4_st}, {"2x4 st", v_2x4_st}, {"2x4 st shift", v_2x4_st_sh},
        {"3x4 st", v_3x4_st}, {"1x4 mul", v_1x4_mul}, {"2x4 mul", v_2x4_mul}, {"2x4 mul shift", v_2x4_mul_sh}};
    const int nv = sizeof v / sizeof v[0];
    for (int c = 0; c < ncols; c++) {
        const int cols = colsv[c];
        const size_t rs = quant_row_size(QT_Q8_0, cols), xs = rs + 64;
        uint8_t *w = malloc(rs * rows), *x = malloc(xs * 32);
        float *xf = malloc(sizeof(float) * cols), *ref = malloc(sizeof(float) * 16 * 32), *s = malloc(sizeof(float) * 16 * 32);
        srand(1);
        for (int r = 0; r < rows; r++) {
            for (int k = 0; k < cols; k++) xf[k] = (float)rand() / RAND_MAX - 0.5f;
            if (r == 3) for (int k = 0; k < cols; k += 7) xf[k] = 3.0f; /* extremes: +-127 */
            quant_quantize(QT_Q8_0, xf, w + (size_t)r * rs, cols);
        }
        for (int j = 0; j < 32; j++) {
            for (int k = 0; k < cols; k++) xf[k] = (float)rand() / RAND_MAX - 0.5f;
            cpu_get_from_float(QT_Q8_0)(xf, x + (size_t)j * xs, cols);
        }
        for (int i = 0; i < nv; i++) {
            int bad = 0;
            for (int nx = 1; nx <= 32; nx++)
                for (int nw = 1; nw <= 16; nw += 5) {
                    v[0].f(cols, w, rs, nw, x, xs, nx, ref, 32);
                    v[i].f(cols, w, rs, nw, x, xs, nx, s, 32);
                    for (int r = 0; r < nw; r++)
                        for (int t = 0; t < nx; t++) bad += memcmp(&ref[r * 32 + t], &s[r * 32 + t], 4) != 0;
                }
            double best = 1e9;
            for (int rep = 0; rep < 7; rep++) {
                double t0 = now();
                for (int r = 0; r < rows; r += 16) v[i].f(cols, w + (size_t)r * rs, rs, 16, x, xs, 32, s, 32);
                double dt = now() - t0;
                if (dt < best) best = dt;
            }
            const double pairs = (double)rows * (cols / 32) * 32;
            printf("%5d cols  %-14s %6.2f ms  %5.2f Gpairs/s  mismatches %d\n", cols, v[i].name, best * 1e3,
                   pairs / best / 1e9, bad);
        }

        const int Ts[] = {4, 6, 12, 13};
        for (int ti = 0; ti < 4; ti++) { const int T = Ts[ti]; const int TE = T >= 10 ? T - 10 : T;
            float *res = malloc(sizeof(float) * rows * 32), *rf = malloc(sizeof(float) * 16 * 32);
            lab_p16(T, rows, cols, w, rs, x, xs, 30, res);
            double maxrel = 0;
            for (int r = 0; r < rows; r += 16) {
                v[0].f(cols, w + (size_t)r * rs, rs, 16, x, xs, 30, rf, 32);
                for (int rr = 0; rr < 16; rr++) for (int t = 0; t < 30; t++) {
                    double e = fabs(res[(size_t)(r + rr) * 32 + t] - rf[rr * 32 + t]) / (fabs(rf[rr * 32 + t]) + 1e-3);
                    if (e > maxrel) maxrel = e;
                }
            }
            double best = 1e9;
            for (int rep = 0; rep < 7; rep++) {
                double t0 = now();
                lab_p16(T, rows, cols, w, rs, x, xs, 30 / TE * TE, NULL);
                double dt = now() - t0;
                if (dt < best) best = dt;
            }
            const double pairs = (double)rows * (cols / 32) * (30 / TE * TE) * 8;
            printf("%5d cols  p16 %dx%d  %d tokens  %6.2f ms  %5.2f Gpairs/s  (packing %.2f ms) max rel %.2g\n", cols, T >= 10 ? 16 : 8, TE, 30 / TE * TE * 8, best * 1e3, pairs / (best - g_tpack) / 1e9, g_tpack * 1e3, maxrel);
            free(res); free(rf);
        }
        free(w); free(x); free(xf); free(ref); free(s);
    }
    return 0;
}
