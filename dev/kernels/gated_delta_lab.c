/* gated_delta_lab.c — the algebra check of the chunked gated delta rule
 * (src/backend/cuda/cuda_ssm.cu's gd_chunk_kernel) on the CPU: the chunk
 * form in fp32, step for step as the kernel computes it (chunks of 64
 * entries, padded rows, G summed in double, the triangular solve by forward
 * substitution on X), against the token-by-token recurrence in double, with
 * the fp32 recurrence (what the CPU backend and the recurrent CUDA kernel do)
 * beside it for scale. A second run rounds the inputs of every in-chunk
 * product to TF32 (10-bit mantissa, as mma.sync .tf32 reads them) to show
 * what tensor cores would cost in accuracy.
 *
 * The recurrence per value row r (S: d x d, row = value dim), per entry t:
 *   S_t = e^{g_t} S_{t-1} + beta_t (v_t - e^{g_t} S_{t-1} k_t) k_t^T,  o_t = S_t q_t / sqrt(d)
 * Inside a chunk with G_t = g_1 + ... + g_t and u_t = beta_t (v_t - e^{g_t} S_{t-1} k_t):
 *   S_t = e^{G_t} S_0 + sum_{j<=t} e^{G_t - G_j} u_j k_j^T                      (induction)
 *   u_t + sum_{j<t} beta_t (k_t.k_j) e^{G_t - G_j} u_j = beta_t (v_t - e^{G_t} S_0 k_t)
 * i.e. (I + A) U = X with A[t][j] = beta_t (k_t.k_j) e^{G_t-G_j} (j < t),
 * X = diag(beta) (V - diag(e^G) K S_0^T); then
 *   O = diag(e^G) Q S_0^T + (Q K^T (.) e^{G_i-G_j}, j <= i) U
 *   S_C = e^{G_C} S_0 + U^T diag(e^{G_C - G}) K      (every exponent <= 0: nothing overflows)
 *
 * Build and run (no GPU needed): cc -O2 -std=c11 dev/kernels/gated_delta_lab.c -lm -o /tmp/gdlab && /tmp/gdlab */
#include <math.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

enum { C = 64 };

static uint64_t rng = 0x9E3779B97F4A7C15ull;
static float frand(void) { /* [-1, 1] */
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16) % 2000001 / 1000000.0f - 1.0f;
}

static int tf32_on;
/* round to nearest, 10 mantissa bits kept (cvt.rna.tf32.f32) */
static float tf(float x) {
    if (!tf32_on) return x;
    uint32_t u;
    memcpy(&u, &x, 4);
    u = (u + 0x1000u) & 0xFFFFE000u;
    memcpy(&x, &u, 4);
    return x;
}

typedef struct {
    int n, d;
    float *q, *k, *v, *b, *a; /* (n, d) x3, (n) x2 */
    float a_bias, a_scale;
} lab_case;

static void l2n(const float *x, float *y, int d) { /* as cpu_ssm.c: sum in double, x * 1/sqrt(sum + eps) */
    double s = 0;
    for (int i = 0; i < d; i++) s += (double)(x[i] * x[i]);
    float sc = 1.0f / sqrtf((float)s + 1e-6f);
    for (int i = 0; i < d; i++) y[i] = x[i] * sc;
}
static float gate_g(const lab_case *c, int t) {
    float ab = c->a[t] + c->a_bias;
    float sp = ab > 20.0f ? ab : logf(1.0f + expf(ab));
    return sp * c->a_scale;
}
static float gate_beta(const lab_case *c, int t) { return 1.0f / (1.0f + expf(-c->b[t])); }

/* the recurrence in double (S: d x d, row = value) */
static void rec_double(const lab_case *c, double *S, double *out) {
    int d = c->d;
    float *qn = malloc(d * 4), *kn = malloc(d * 4);
    for (int t = 0; t < c->n; t++) {
        l2n(c->q + (size_t)t * d, qn, d);
        l2n(c->k + (size_t)t * d, kn, d);
        double dec = exp((double)gate_g(c, t)), beta = gate_beta(c, t);
        for (int r = 0; r < d; r++) {
            double *Sr = S + (size_t)r * d, sk = 0, o = 0;
            for (int i = 0; i < d; i++) {
                Sr[i] *= dec;
                sk += Sr[i] * kn[i];
            }
            double del = beta * (c->v[(size_t)t * d + r] - sk);
            for (int i = 0; i < d; i++) {
                Sr[i] += del * kn[i];
                o += Sr[i] * qn[i];
            }
            out[(size_t)t * d + r] = o / sqrt((double)d);
        }
    }
    free(qn);
    free(kn);
}

/* the recurrence in fp32 (the recurrent kernel's arithmetic) */
static void rec_float(const lab_case *c, float *S, float *out) {
    int d = c->d;
    float *qn = malloc(d * 4), *kn = malloc(d * 4);
    for (int t = 0; t < c->n; t++) {
        l2n(c->q + (size_t)t * d, qn, d);
        l2n(c->k + (size_t)t * d, kn, d);
        float dec = expf(gate_g(c, t)), beta = gate_beta(c, t);
        for (int r = 0; r < d; r++) {
            float *Sr = S + (size_t)r * d, sk = 0, o = 0;
            for (int i = 0; i < d; i++) {
                Sr[i] *= dec;
                sk = fmaf(Sr[i], kn[i], sk);
            }
            float del = (c->v[(size_t)t * d + r] - sk) * beta;
            for (int i = 0; i < d; i++) {
                Sr[i] = fmaf(kn[i], del, Sr[i]);
                o = fmaf(Sr[i], qn[i], o);
            }
            out[(size_t)t * d + r] = o / sqrtf((float)d);
        }
    }
    free(qn);
    free(kn);
}

/* the chunk form in fp32, as gd_chunk_kernel computes it (all value rows at once) */
static void chunked(const lab_case *c, float *S, float *out) {
    int d = c->d;
    float *K = calloc((size_t)C * d, 4), *Q = calloc((size_t)C * d, 4), *U = calloc((size_t)C * d, 4);
    float *QS = calloc((size_t)C * d, 4), *A = calloc(C * C, 4), *P = calloc(C * C, 4);
    float beta[C], gam[C], dec[C], gl[C];
    double G[C];
    for (int t0 = 0; t0 < c->n; t0 += C) {
        int nc = c->n - t0 < C ? c->n - t0 : C;
        for (int i = 0; i < C; i++) { /* rows past nc: zero k, q; beta 0, g 0 */
            if (i < nc) {
                l2n(c->k + (size_t)(t0 + i) * d, K + (size_t)i * d, d);
                l2n(c->q + (size_t)(t0 + i) * d, Q + (size_t)i * d, d);
                beta[i] = gate_beta(c, t0 + i);
                gl[i] = gate_g(c, t0 + i);
            } else {
                memset(K + (size_t)i * d, 0, (size_t)d * 4);
                memset(Q + (size_t)i * d, 0, (size_t)d * 4);
                beta[i] = gl[i] = 0;
            }
        }
        double run = 0;
        for (int i = 0; i < C; i++) G[i] = run += gl[i];
        for (int i = 0; i < C; i++) {
            gam[i] = expf((float)G[i]);
            dec[i] = expf((float)(G[C - 1] - G[i]));
        }
        float gl_last = expf((float)G[C - 1]);
        /* A, P */
        for (int i = 0; i < C; i++)
            for (int j = 0; j < C; j++) {
                float kk = 0, qk = 0;
                for (int x = 0; x < d; x++) {
                    kk = fmaf(tf(K[(size_t)i * d + x]), tf(K[(size_t)j * d + x]), kk);
                    qk = fmaf(tf(Q[(size_t)i * d + x]), tf(K[(size_t)j * d + x]), qk);
                }
                float e = expf((float)(G[i] - G[j]));
                A[i * C + j] = j < i ? beta[i] * kk * e : 0.0f;
                P[i * C + j] = j <= i ? qk * e : 0.0f;
            }
        /* K S^T, Q S^T -> X */
        for (int i = 0; i < C; i++)
            for (int r = 0; r < d; r++) {
                float ks = 0, qs = 0;
                for (int x = 0; x < d; x++) {
                    ks = fmaf(tf(K[(size_t)i * d + x]), tf(S[(size_t)r * d + x]), ks);
                    qs = fmaf(tf(Q[(size_t)i * d + x]), tf(S[(size_t)r * d + x]), qs);
                }
                float v = i < nc ? c->v[(size_t)(t0 + i) * d + r] : 0.0f;
                U[(size_t)i * d + r] = beta[i] * (v - gam[i] * ks);
                QS[(size_t)i * d + r] = qs;
            }
        /* (I + A) U = X, forward substitution (the kernel splits the l-sum over 8 lanes) */
        for (int i = 1; i < nc; i++)
            for (int r = 0; r < d; r++) {
                float part[8] = {0};
                for (int l = 0; l < i; l++) part[l % 8] = fmaf(A[i * C + l], U[(size_t)l * d + r], part[l % 8]);
                float s = ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
                U[(size_t)i * d + r] -= s;
            }
        /* O */
        for (int i = 0; i < nc; i++)
            for (int r = 0; r < d; r++) {
                float o = gam[i] * QS[(size_t)i * d + r];
                for (int j = 0; j < C; j++) o = fmaf(tf(P[i * C + j]), tf(U[(size_t)j * d + r]), o);
                out[(size_t)(t0 + i) * d + r] = o * (1.0f / sqrtf((float)d));
            }
        /* S <- e^{G_C} S + U^T diag(e^{G_C - G}) K */
        for (int r = 0; r < d; r++)
            for (int x = 0; x < d; x++) {
                float s = gl_last * S[(size_t)r * d + x];
                for (int i = 0; i < C; i++) s = fmaf(tf(U[(size_t)i * d + r] * dec[i]), tf(K[(size_t)i * d + x]), s);
                S[(size_t)r * d + x] = s;
            }
    }
    free(K); free(Q); free(U); free(QS); free(A); free(P);
}

/* relative L2 error and max |diff| / max |ref| of f against the double reference */
static void err(const float *f, const double *ref, size_t n, double *rel, double *mx) {
    double num = 0, den = 0, m = 0, mr = 0;
    for (size_t i = 0; i < n; i++) {
        double e = f[i] - ref[i];
        num += e * e;
        den += ref[i] * ref[i];
        if (fabs(e) > m) m = fabs(e);
        if (fabs(ref[i]) > mr) mr = fabs(ref[i]);
    }
    *rel = den > 0 ? sqrt(num / den) : sqrt(num);
    *mx = mr > 0 ? m / mr : m;
}

/* kind 0: the test's random data; 1: keys drawn from 4 directions (+ noise), beta near 1; 2: strong decays */
static double run_case(int n, int d, int kind) {
    lab_case c = {n, d, malloc((size_t)n * d * 4), malloc((size_t)n * d * 4), malloc((size_t)n * d * 4),
                  malloc((size_t)n * 4), malloc((size_t)n * 4), 0.3f, -expf(0.5f)};
    for (size_t i = 0; i < (size_t)n * d; i++) {
        c.q[i] = frand();
        c.v[i] = frand();
        c.k[i] = kind == 1 ? (float)((i / d) % 4 == 0) * (1 + 0.05f * frand()) + ((i % d) == (i / d) % 4) * 2.0f
                           + 0.1f * frand()
                           : frand();
    }
    for (int t = 0; t < n; t++) {
        c.b[t] = kind == 1 ? 4.0f + frand() : 3.0f * frand();
        c.a[t] = kind == 2 ? 6.0f + 3.0f * frand() : 3.0f * frand();
    }
    size_t dd = (size_t)d * d, no = (size_t)n * d;
    double *Sd = malloc(dd * 8), *od = malloc(no * 8);
    float *Sf = malloc(dd * 4), *Sc = malloc(dd * 4), *of = malloc(no * 4), *oc = malloc(no * 4);
    for (size_t i = 0; i < dd; i++) Sd[i] = Sf[i] = Sc[i] = 0.05f * frand();
    rec_double(&c, Sd, od);
    rec_float(&c, Sf, of);
    chunked(&c, Sc, oc);
    double ro_f, mo_f, rs_f, ms_f, ro_c, mo_c, rs_c, ms_c;
    err(of, od, no, &ro_f, &mo_f);
    err(Sf, Sd, dd, &rs_f, &ms_f);
    err(oc, od, no, &ro_c, &mo_c);
    err(Sc, Sd, dd, &rs_c, &ms_c);
    printf("  %-9s n %4d d %3d | fp32 recurrence: out %.1e (max %.1e) state %.1e | chunked%s: out %.1e (max %.1e) "
           "state %.1e (max %.1e)\n",
           kind == 0 ? "random" : kind == 1 ? "repeat-k" : "decay", n, d, ro_f, mo_f, rs_f, tf32_on ? " tf32" : "",
           ro_c, mo_c, rs_c, ms_c);
    double worst = fmax(ro_c, rs_c);
    free(c.q); free(c.k); free(c.v); free(c.b); free(c.a);
    free(Sd); free(od); free(Sf); free(Sc); free(of); free(oc);
    return worst;
}

int main(void) {
    static const int ns[] = {1, 63, 64, 65, 200, 512}, ds[] = {128, 64, 40};
    double worst[2] = {0, 0};
    for (tf32_on = 0; tf32_on < 2; tf32_on++) {
        printf("chunk form %s vs the recurrence in double (relative L2; max |diff| / max |ref|):\n",
               tf32_on ? "with TF32 product inputs" : "in fp32");
        for (int kind = 0; kind < 3; kind++)
            for (int di = 0; di < 3; di++)
                for (int ni = 0; ni < 6; ni++) {
                    if (kind && (ds[di] != 128 || ns[ni] < 64)) continue;
                    double w = run_case(ns[ni], ds[di], kind);
                    if (w > worst[tf32_on]) worst[tf32_on] = w;
                }
    }
    printf("worst relative error: fp32 chunks %.2e, TF32 chunks %.2e\n", worst[0], worst[1]);
    return worst[0] <= 1e-5 ? 0 : 1;
}
