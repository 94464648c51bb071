/* test_cuda_ops.c — op parity: every CUDA op against the CPU backend (and
 * the matrix products also against a double-precision reference on the
 * dequantized weights), for every supported weight type and several shapes,
 * odd ones included; then end to end: greedy tokens of a model on CUDA equal
 * those on the CPU for 128 steps, logits within a stated tolerance.
 *
 * Tolerances (relative L2 norm of the difference, ||a-b|| / ||b||):
 *   matmul vs double reference           2e-5 (f32 activations, f32 sums); for the
 *                                        int8-dot path (n < 128 on Q4_0/Q8_0/Q4_K/Q6_K:
 *                                        1 token on cuda_mmvq.cu, 2..127 on int8 tensor
 *                                        cores, cuda_mmq.cu; with BRISK_CUDA_DISABLE=mmq n <= 64
 *                                        in mmvq slices of 16, 16 with BRISK_CUDA_DISABLE=mmvq_slices)
 *                                        twice the CPU's own error + 1e-5; for the
 *                                        tensor-core paths (n > 8, n_in % 32 == 0,
 *                                        f16 inputs; and 2..47 tokens on Q4_K, Q6_K,
 *                                        Q8_0 rows of a multiple of 256 (17..47 tokens,
 *                                        BRISK_CUDA_MMQH_MIN), cuda_mmqh.cu: f16 weights
 *                                        and activations, sm_90) 3e-3, also
 *                                        against the CPU
 *   matmul vs CPU backend                1e-5 if the CPU keeps f32 activations,
 *                                        1e-2 (f16/bf16) or 3e-2 (q8 blocks) when
 *                                        the CPU quantizes activations first
 *   get_rows, add, copy, f16 KV writes   exact; swiglu 1e-6; rms_norm 1e-6
 *   rope 1e-5 (2e-5 with YaRN: angles up to 3e4 rad, cosf/sinf 1-ulp apart); attention 1e-5 (f32 KV) and 1e-4 (f16, q8_0 KV),
 *     for the decode kernel (<= 64 tokens);
 *     prefill attention on tensor cores (> 64 tokens, head_dim 64/128/256: f16 Q and P) 2e-3;
 *   q8_0 KV writes byte-identical to the CPU's
 *   moe_route: same ids in the same order (another id only at a near tie) and
 *     weights within 1e-5 relative; moe_router (the fused product + routing) bit for
 *     bit against the GPU's matmul + moe_route, and on f32 routers against the CPU's
 *     (logits 1e-5, then as moe_route); moe_ffn 1e-4 vs a double reference, and vs
 *     the CPU twice the CPU's own error + 1e-4 (the CPU quantizes activations);
 *     where a product takes the int8-dot path (Q8_0/Q4_0/Q4_K/Q6_K) twice the
 *     CPU's error + 1e-4 vs the reference, three times vs the CPU; the same on a
 *     tensor-parallel rank's slice of the experts (ids from moe_ids_local, exact vs the CPU's)
 *   ssm_conv 1e-6, carried inputs exact; gated_delta 1e-4 (outputs and the
 *     fp32 state, after up to 24 entries); sigmoid_mul 1e-6; gated_residual 1e-6 vs
 *     the CPU's three ops, bit for bit vs the GPU's
 *   end to end: identical greedy tokens (but for ties within float noise); max |logit diff| <= 4e-3 * max |logit|
 *     (stories260K, and the models of BRISK_E2E_MODELS: tiny MoE and hybrids,
 *     also two sequences per batch)
 * Needs a GPU: `make test-cuda` (skips, passing, when none is found). */
#include <stdint.h>

#include "backend/backend.h"
#include "backend/cuda/cuda_backend.h"
#include "backend/cuda/cuda_plan.h"
#include "brisk.h"
#include "quant/quant.h"
#include "quant/quant_iq.h"
#include "test.h"

static bk_backend *cpu, *gpu;
static uint64_t rng = 0x9E3779B97F4A7C15ull;
static uint32_t rnd(void) {
    rng ^= rng << 13;
    rng ^= rng >> 7;
    rng ^= rng << 17;
    return (uint32_t)(rng >> 16);
}
static float frand(void) { return (rnd() % 2000001) / 1000000.0f - 1.0f; } /* [-1, 1] */
static void fill(float *x, size_t n, float s) {
    for (size_t i = 0; i < n; i++) x[i] = frand() * s;
}

/* Relative L2 difference; NaN never passes. */
static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        if (a[i] != a[i] || b[i] != b[i]) return INFINITY;
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return den > 0 ? sqrt(num / den) : sqrt(num);
}

/* Device buffer holding a copy of host data. */
static void *dev_copy(const void *host, size_t bytes) {
    void *d = NULL;
    CHECK_OK(gpu->ops->alloc(gpu, bytes, &d));
    if (d && host) CHECK_OK(bk_cuda_write(gpu, d, host, bytes));
    return d;
}
static void dev_read(const void *d, void *host, size_t bytes) { CHECK_OK(gpu->ops->read(gpu, d, host, bytes)); }

/* Random rows of a weight type: float types from random values; block types
 * from random bytes with sane f16 scales (every bit pattern of the quants is valid). */
static void *make_weight(uint32_t type, int64_t n_in, int64_t n_out, size_t *row_bytes) {
    const quant_traits *qt = quant_get_traits(type);
    *row_bytes = quant_row_size(type, n_in);
    size_t bytes = *row_bytes * (size_t)n_out;
    uint8_t *w = malloc(bytes);
    if (type == QT_F32 || type == QT_F16 || type == QT_BF16) {
        float *tmp = malloc((size_t)n_in * sizeof(float));
        for (int64_t r = 0; r < n_out; r++) {
            fill(tmp, (size_t)n_in, 0.5f);
            quant_quantize(type, tmp, w + r * *row_bytes, n_in);
        }
        free(tmp);
        return w;
    }
    for (size_t i = 0; i < bytes; i++) w[i] = (uint8_t)rnd();
    int f16_off[2] = {0, -1};
    switch (type) {
    case QT_Q4_1: case QT_Q5_1: case QT_Q4_K: case QT_Q5_K: f16_off[1] = 2; break;
    case QT_Q6_K: f16_off[0] = 208; break;
    case QT_TQ1_0: f16_off[0] = 52; break;
    case QT_TQ2_0: f16_off[0] = 64; break;
    case QT_NVFP4: f16_off[0] = -1; break; /* UE4M3 scale bytes: every byte is a finite scale */
    case QT_IQ1_M: f16_off[0] = -1; break; /* its f16 scale is spread over four words (below) */
    default: break;
    }
    size_t nb = bytes / (size_t)qt->block_bytes;
    for (size_t b = 0; b < nb; b++)
        for (int k = 0; k < 2; k++)
            if (f16_off[k] >= 0) {
                uint16_t h = quant_f32_to_f16(frand() * 0.02f);
                memcpy(w + b * qt->block_bytes + f16_off[k], &h, 2);
            }
    if (type == QT_IQ1_M) /* the f16 scale in the top nibbles of the four 16-bit scale words */
        for (size_t b = 0; b < nb; b++) {
            uint16_t h = quant_f32_to_f16(frand() * 0.02f), sc[4];
            memcpy(sc, w + b * qt->block_bytes + 48, 8);
            for (int i = 0; i < 4; i++) sc[i] = (uint16_t)((sc[i] & 0x0FFF) | (((h >> 4 * i) & 15) << 12));
            memcpy(w + b * qt->block_bytes + 48, sc, 8);
        }
    return w;
}

static const uint32_t types[] = {QT_F32,  QT_F16,  QT_BF16, QT_Q8_0, QT_Q4_0, QT_Q4_1, QT_Q5_0,
                                 QT_Q5_1, QT_IQ4_NL, QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_IQ4_XS};
#define N_TYPES (int)(sizeof types / sizeof types[0])

/* Set by the cases of the int8 tensor-core paths (matmul_mmq, moe_ffn_mmq): the product checks
 * print their errors on success too, so a GPU run shows how close each case came. */
static bool show_err;

/* Sets var to val, or for the path lists (BRISK_CUDA_DISABLE, _ENABLE) adds val to what the list
 * held; returns the old value (NULL: unset) for list_restore, which puts it back and frees it. */
static char *list_add(const char *var, const char *val) {
    const char *old = getenv(var);
    char *saved = old ? strdup(old) : NULL; /* setenv may free what getenv returned */
    char buf[512];
    bool list = !strcmp(var, "BRISK_CUDA_DISABLE") || !strcmp(var, "BRISK_CUDA_ENABLE");
    snprintf(buf, sizeof buf, "%s%s%s", list && saved ? saved : "", list && saved ? "," : "", val);
    setenv(var, buf, 1);
    return saved;
}
static void list_restore(const char *var, char *saved) {
    if (saved) setenv(var, saved, 1);
    else unsetenv(var);
    free(saved);
}

/* The plan the backends of these checks read when they were made: on_backend_with's switch is
 * still set while its cases run. */
static cuda_plan plan_now(void) {
    cuda_plan p;
    cuda_plan_read(&p, NULL, NULL, NULL, 0);
    return p;
}

/* The tolerances of a product of n tokens of type, vs the double reference and vs the CPU (whose
 * own distance from the reference is cpu_err); see the header. */
static void matmul_tol(uint32_t type, int64_t n_in, int n, double cpu_err, double *tol_ref,
                       double *tol_cpu) {
    uint32_t vt = quant_get_traits(type)->vec_dot_type;
    *tol_cpu = vt == QT_F32 ? 1e-5 : (vt == QT_F16 || vt == QT_BF16) ? 1e-2 : 3e-2;
    /* Products on Q4_0/Q8_0/Q4_K/Q6_K below cuBLAS's minimum quantize the activations to int8
     * blocks of 32 (cuda_mmvq.cu up to 7 tokens, and with BRISK_CUDA_DISABLE=mmq up to 64 in slices of 16;
     * cuda_mmq.cu's tensor cores for 8..47; cuBLAS from 48), as the CPU does to q8_0/q8_K: hold the GPU to the
     * CPU's own distance from the exact product instead of 2e-5. */
    const cuda_plan pl = plan_now();
    int int8_max = pl.mmvq_slices_off ? 16 : 64;
    int mmq_max = pl.mmq_max;
    bool mmq_on = !pl.mmq_off, mmq = mmq_on && n >= pl.mmq_min && n < mmq_max;
    bool mmqh = !pl.mmqh_off && n >= pl.mmqh_min && n < pl.mmqh_max && n <= 64 && n_in % 256 == 0 &&
                (type == QT_Q8_0 || type == QT_Q4_K || type == QT_Q6_K);
    bool small = n <= int8_max && !(mmq_on && n >= mmq_max);
    /* Q5_K, IQ4_XS, IQ4_NL: the int8 decode products only (cuda_mmvq_dec_supported), not mmq's batches */
    bool dec_only = !pl.dec_qtypes_off && (type == QT_Q5_K || type == QT_IQ4_XS || type == QT_IQ4_NL);
    bool int8_path = !mmqh && n_in % 32 == 0 &&
                     (((mmq || small) && (type == QT_Q4_0 || type == QT_Q8_0 || type == QT_Q4_K || type == QT_Q6_K)) ||
                      (dec_only && !mmq && small));
    /* Larger batches on rows of a multiple of 32 run on tensor cores with f16
     * inputs (cuda_mma.cu, cuda_blas.cu): 11 significant bits per factor. */
    bool f16_path = mmqh || (!int8_path && n > 8 && n_in % 32 == 0);
    *tol_ref = int8_path ? 2 * cpu_err + 1e-5 : f16_path ? 3e-3 : 2e-5;
    if (f16_path && *tol_cpu < 3e-3) *tol_cpu = 3e-3;
}

static float x_amp = 1.0f; /* check_matmul's activations: uniform in [-x_amp, x_amp] */

static void check_matmul(uint32_t type, int64_t n_in, int64_t n_out, int n, bool with_bias) {
    size_t rb;
    void *wh = make_weight(type, n_in, n_out, &rb);
    bk_weight wc = {.name = "w", .type = type, .n_in = n_in, .n_out = n_out, .row_bytes = rb, .host = wh}, wg = wc;
    CHECK_OK(cpu->ops->bind_weight(cpu, &wc));
    CHECK_OK(gpu->ops->bind_weight(gpu, &wg));
    float *bh = malloc((size_t)n_out * 4);
    fill(bh, (size_t)n_out, 1.0f);
    bk_weight bc = {.name = "b", .type = QT_F32, .n_in = n_out, .n_out = 1, .row_bytes = (size_t)n_out * 4, .host = bh},
              bg = bc;
    CHECK_OK(gpu->ops->bind_weight(gpu, &bg));
    size_t nx = (size_t)n * n_in, ny = (size_t)n * n_out;
    float *x = malloc(nx * 4), *yc = malloc(ny * 4), *yg = malloc(ny * 4), *ref = malloc(ny * 4);
    float *deq = malloc((size_t)n_in * 4);
    fill(x, nx, x_amp);
    float *dx = dev_copy(x, nx * 4), *dy = dev_copy(NULL, ny * 4);
    const bk_weight *wcp = &wc, *wgp = &wg, *bcp = &bc, *bgp = &bg;
    cpu->ops->matmul(cpu, 1, &wcp, with_bias ? &bcp : NULL, x, n, &yc);
    gpu->ops->matmul(gpu, 1, &wgp, with_bias ? &bgp : NULL, dx, n, &dy);
    dev_read(dy, yg, ny * 4);
    for (int64_t r = 0; r < n_out; r++) {
        quant_dequantize(type, (const uint8_t *)wh + r * rb, deq, n_in);
        for (int t = 0; t < n; t++) {
            double s = with_bias ? bh[r] : 0;
            for (int64_t i = 0; i < n_in; i++) s += (double)deq[i] * x[(size_t)t * n_in + i];
            ref[(size_t)t * n_out + r] = (float)s;
        }
    }
    double e_ref = rel_err(yg, ref, ny), e_cpu = rel_err(yg, yc, ny), tol_ref, tol_cpu;
    matmul_tol(type, n_in, n, rel_err(yc, ref, ny), &tol_ref, &tol_cpu);
    if (show_err || !(e_ref <= tol_ref) || !(e_cpu <= tol_cpu))
        fprintf(stderr, "  matmul %s n_in %lld n_out %lld n %d: vs ref %.2e, vs cpu %.2e (cpu vs ref %.2e)\n",
                quant_type_name(type), (long long)n_in, (long long)n_out, n, e_ref, e_cpu, rel_err(yc, ref, ny));
    CHECK(e_ref <= tol_ref);
    CHECK(e_cpu <= tol_cpu);
    gpu->ops->release(gpu, dx);
    gpu->ops->release(gpu, dy);
    bk_cuda_release_weight(&wg);
    bk_cuda_release_weight(&bg);
    free(wh); free(bh); free(x); free(yc); free(yg); free(ref); free(deq);
}

static void test_matmul(void) {
    static const struct { int64_t n_in, n_out; int n; } shapes[] = {
        {256, 67, 1}, {512, 129, 3}, {1024, 300, 8}, {512, 70, 16}, {768, 200, 37}, {256, 64, 130}, {4096, 33, 1},
        {1024, 160, 32}, {512, 96, 64}, {256, 40, 17}};
    for (int ti = 0; ti < N_TYPES; ti++)
        for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++)
            check_matmul(types[ti], shapes[s].n_in, shapes[s].n_out, shapes[s].n, s == 1);
    /* float weights with rows that are no multiple of 8 (scalar path) */
    uint32_t ft[] = {QT_F32, QT_F16, QT_BF16};
    for (int i = 0; i < 3; i++) {
        check_matmul(ft[i], 100, 37, 1, false);
        check_matmul(ft[i], 37, 5, 12, true);
    }
}

/* y += x W^T (matmul_add: accum) onto a y0 of the product's own size, so that a
 * dropped or doubled y0 shows; the products (y - y0) are compared, held to check_matmul's tolerances. */
static void check_matmul_add(uint32_t type, int64_t n_in, int64_t n_out, int n) {
    size_t rb;
    void *wh = make_weight(type, n_in, n_out, &rb);
    bk_weight wc = {.name = "w", .type = type, .n_in = n_in, .n_out = n_out, .row_bytes = rb, .host = wh}, wg = wc;
    CHECK_OK(cpu->ops->bind_weight(cpu, &wc));
    CHECK_OK(gpu->ops->bind_weight(gpu, &wg));
    size_t nx = (size_t)n * n_in, ny = (size_t)n * n_out;
    float *x = malloc(nx * 4), *y0 = malloc(ny * 4), *yc = malloc(ny * 4), *yg = malloc(ny * 4), *ref = malloc(ny * 4);
    float *deq = malloc((size_t)n_in * 4);
    fill(x, nx, 1.0f);
    double ss = 0;
    for (int64_t r = 0; r < n_out; r++) {
        quant_dequantize(type, (const uint8_t *)wh + r * rb, deq, n_in);
        for (int t = 0; t < n; t++) {
            double s = 0;
            for (int64_t i = 0; i < n_in; i++) s += (double)deq[i] * x[(size_t)t * n_in + i];
            ref[(size_t)t * n_out + r] = (float)s;
            ss += s * s;
        }
    }
    fill(y0, ny, (float)sqrt(ss / (double)ny));
    memcpy(yc, y0, ny * 4);
    float *dx = dev_copy(x, nx * 4), *dy = dev_copy(y0, ny * 4);
    float *tmp = malloc(ny * 4); /* the CPU adds a separate product (no matmul_add op) */
    bk_matmul_add(cpu, &wc, x, n, tmp, yc);
    free(tmp);
    gpu->ops->matmul_add(gpu, &wg, dx, n, dy);
    dev_read(dy, yg, ny * 4);
    for (size_t i = 0; i < ny; i++) {
        yc[i] -= y0[i];
        yg[i] -= y0[i];
    }
    double e_ref = rel_err(yg, ref, ny), e_cpu = rel_err(yg, yc, ny), tol_ref, tol_cpu, c_ref = rel_err(yc, ref, ny);
    matmul_tol(type, n_in, n, c_ref, &tol_ref, &tol_cpu);
    if (show_err || !(e_ref <= tol_ref) || !(e_cpu <= tol_cpu))
        fprintf(stderr, "  matmul_add %s n_in %lld n_out %lld n %d: vs ref %.2e, vs cpu %.2e (cpu vs ref %.2e)\n",
                quant_type_name(type), (long long)n_in, (long long)n_out, n, e_ref, e_cpu, c_ref);
    CHECK(e_ref <= tol_ref);
    CHECK(e_cpu <= tol_cpu);
    gpu->ops->release(gpu, dx);
    gpu->ops->release(gpu, dy);
    bk_cuda_release_weight(&wg);
    free(wh); free(x); free(y0); free(yc); free(yg); free(ref); free(deq);
}

/* Batches of 2..127 tokens on int8 tensor cores (cuda_mmq.cu): every integer-dot type, token
 * counts around its 8/16/32/64-token tiles (100: two tiles), rows no multiple of its 32-row
 * tiles, and rows of a few groups (a warp step of 4 groups cut short; fewer steps than warps). */
static void mmq_cases(void);
static void on_backend_with(const char *var, const char *val, void (*cases)(void));
/* with BRISK_CUDA_DISABLE=mmqh: the K-quant and Q8_0 batches of 17+ tokens reach this kernel too (the
 * expert products and the other types use it whatever the switch) */
static void test_matmul_mmq(void) { on_backend_with("BRISK_CUDA_DISABLE", "mmqh", mmq_cases); }
static void mmq_cases(void) {
    static const uint32_t ty[] = {QT_Q8_0, QT_Q4_0, QT_Q4_K, QT_Q6_K};
    static const int ns[] = {2, 3, 8, 16, 17, 33, 64, 100};
    /* the batches each kernel must take (check_matmul and check_matmul_add: a launch each at least):
     * mmq_min <= n < mmq_max on cuda_mmq.cu, those below mmq_min on cuda_mmvq.cu */
    const cuda_plan pl = plan_now();
    long want_mmq = 0, want_mmvq = 0;
    for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
        want_mmq += 2 * (ns[i] >= pl.mmq_min && ns[i] < pl.mmq_max);
        want_mmvq += 2 * (ns[i] < pl.mmq_min);
    }
    show_err = true;
    for (size_t ti = 0; ti < sizeof ty / sizeof ty[0]; ti++) {
        const long q0 = bk_cuda_path_launches(gpu, "mmq"), v0 = bk_cuda_path_launches(gpu, "mmvq"); /* mmq -1: off */
        bool k_quant = ty[ti] == QT_Q4_K || ty[ti] == QT_Q6_K; /* blocks of 256 */
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
            int64_t n_in = k_quant ? (i % 2 ? 2304 : 512) : (i % 2 ? 1056 : 160);
            check_matmul(ty[ti], n_in, i % 3 ? 200 : 96, ns[i], i % 2 == 0);
            check_matmul_add(ty[ti], n_in, 72, ns[i]);
        }
        if (q0 >= 0) CHECK(bk_cuda_path_launches(gpu, "mmq") - q0 >= want_mmq);
        CHECK(bk_cuda_path_launches(gpu, "mmvq") - v0 >= want_mmvq);
    }
    show_err = false;
}

static void check_matmul_multi(const uint32_t ty[3], int64_t n_in, const int64_t no[3], int n);
static void check_matmul_swiglu(uint32_t type, int64_t n_in, int64_t n_ff, int n, bool via_norm);

/* Batches on f16 tensor cores with streamed weights (cuda_mmqh.cu) for Q4_K, Q6_K, Q8_0: token
 * counts at and around its 8/16/32-token tiles, rows no multiple of its 32-row tiles, Q6_K rows
 * that do not start on 16 bytes (2,304 columns: 1,890 bytes), a row of one 256-column unit (seven
 * of eight warps without a K-slice), tiles enough for blocks to take several (the rings wrap
 * round), activations far from 1 (the per-token power of two), y += , the fused gate/up, and
 * several matrices in one launch. */
/* cases() on a backend of its own, created with the switch var=val (a backend reads its switches
 * when it is created; a list, BRISK_CUDA_DISABLE or _ENABLE, gets val added to what it held); var
 * as it was afterwards */
static void on_backend_with(const char *var, const char *val, void (*cases)(void)) {
    char *saved = list_add(var, val);
    bk_backend *main_gpu = gpu, *g = NULL;
    bool ok = bk_cuda_backend_new(0, &g) == BRISK_OK;
    CHECK(ok);
    if (ok) {
        gpu = g;
        cases();
        gpu = main_gpu;
        g->ops->free(g);
    }
    list_restore(var, saved);
}
static void mmqh_cases(void);
/* from 2 tokens (the default takes 17 and more) */
static void test_matmul_mmqh(void) { on_backend_with("BRISK_CUDA_MMQH_MIN", "2", mmqh_cases); }
static void mmqh_cases(void) {
    static const uint32_t ty[] = {QT_Q4_K, QT_Q6_K, QT_Q8_0};
    static const int ns[] = {2, 7, 9, 16, 31, 47};
    show_err = true;
    for (size_t ti = 0; ti < sizeof ty / sizeof ty[0]; ti++) {
        const long h0 = bk_cuda_path_launches(gpu, "mmqh"); /* -1: not run on this device (before sm_90) */
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) {
            check_matmul(ty[ti], i % 2 ? 2304 : 4096, i % 3 ? 200 : 96, ns[i], i % 2 == 0);
            check_matmul_add(ty[ti], 2304, 72, ns[i]);
        }
        check_matmul(ty[ti], 256, 64, 5, false);
        check_matmul(ty[ti], 4096, 9000, 16, false);
        x_amp = 3e4f;
        check_matmul(ty[ti], 512, 100, 12, true);
        x_amp = 1e-4f;
        check_matmul(ty[ti], 512, 100, 12, false);
        x_amp = 1.0f;
        check_matmul_swiglu(ty[ti], 2304, 300, 5, true);
        check_matmul_swiglu(ty[ti], 512, 200, 33, false);
        const uint32_t same[3] = {ty[ti], ty[ti], ty[ti]};
        const int64_t no[3] = {512, 128, 96};
        check_matmul_multi(same, 2048, no, 12);
        /* the kernel ran: a launch at least for each product and y += above (2 a batch size), the four
         * single products, and the three matrices (one launch); the fused gate/up not counted */
        if (h0 >= 0) CHECK(bk_cuda_path_launches(gpu, "mmqh") - h0 >= 2 * (long)(sizeof ns / sizeof ns[0]) + 4 + 1);
    }
    const long h0 = bk_cuda_path_launches(gpu, "mmqh");
    const uint32_t mixed[3] = {QT_Q4_K, QT_Q6_K, QT_Q4_K};
    const int64_t no[3] = {256, 64, 64};
    check_matmul_multi(mixed, 1024, no, 20);
    if (h0 >= 0) CHECK(bk_cuda_path_launches(gpu, "mmqh") - h0 >= 3); /* a launch per type run */
    show_err = false;
}

/* q, k, v sharing one input: three matrices in one call (one launch where their types agree) */
static void check_matmul_multi(const uint32_t ty[3], int64_t n_in, const int64_t no[3], int n) {
    bk_weight wc[3], wg[3];
    const bk_weight *pc[3], *pg[3];
    void *hs[3];
    float *yc[3], *yg[3], *dy[3];
    float *x = malloc((size_t)n * n_in * 4);
    fill(x, (size_t)n * n_in, 1.0f);
    float *dx = dev_copy(x, (size_t)n * n_in * 4);
    for (int m = 0; m < 3; m++) {
        size_t rb;
        hs[m] = make_weight(ty[m], n_in, no[m], &rb);
        wc[m] = (bk_weight){.name = "w", .type = ty[m], .n_in = n_in, .n_out = no[m], .row_bytes = rb, .host = hs[m]};
        wg[m] = wc[m];
        CHECK_OK(gpu->ops->bind_weight(gpu, &wg[m]));
        pc[m] = &wc[m];
        pg[m] = &wg[m];
        yc[m] = malloc((size_t)n * no[m] * 4);
        yg[m] = malloc((size_t)n * no[m] * 4);
        dy[m] = dev_copy(NULL, (size_t)n * no[m] * 4);
    }
    cpu->ops->matmul(cpu, 3, pc, NULL, x, n, yc);
    gpu->ops->matmul(gpu, 3, pg, NULL, dx, n, dy);
    for (int m = 0; m < 3; m++) {
        dev_read(dy[m], yg[m], (size_t)n * no[m] * 4);
        CHECK(rel_err(yg[m], yc[m], (size_t)n * no[m]) < 3e-2);
        gpu->ops->release(gpu, dy[m]);
        bk_cuda_release_weight(&wg[m]);
        free(hs[m]); free(yc[m]); free(yg[m]);
    }
    gpu->ops->release(gpu, dx);
    free(x);
}

static void test_matmul_multi(void) {
    static const uint32_t ty[3] = {QT_Q4_K, QT_Q8_0, QT_F16};
    static const int64_t no[3] = {96, 32, 32};
    check_matmul_multi(ty, 512, no, 5);
}

/* One token's products streamed through shared memory (cuda_mmvs.cu) for each integer-dot type:
 * rows enough for every warp's ring of stages to wrap round (20,000), rows wide enough for only two
 * stages per warp (12,288 columns) or cut into segments, a bias, y += (matmul_add), the fused gate/up/SwiGLU, and three
 * matrices of one type in one launch. */
static void check_matmul_swiglu(uint32_t type, int64_t n_in, int64_t n_ff, int n, bool via_norm);
static void stream_cases(void);
static void test_matmul_stream(void) {
    stream_cases(); /* the default: Q4_K and Q8_0 rows of 12,288 and Q6_K's of 17,408 shared by 2-5 warps */
    /* again with whole rows to a warp (BRISK_CUDA_MMVS_SEG=0: the 12,288-wide rows leave two stages
     * a warp) and with rows cut into segments of ~1 KB (2-8 warps share each row, so the 2,048-wide
     * cases take the segmented path too: uneven last segments, groups that leave warps idle, GLU,
     * three matrices); the switch is read when a backend is created */
    static const char *const seg[] = {"0", "1024"};
    for (int i = 0; i < 2; i++) on_backend_with("BRISK_CUDA_MMVS_SEG", seg[i], stream_cases);
}
static void stream_cases(void) {
    static const uint32_t ty[] = {QT_Q8_0, QT_Q4_0, QT_Q4_K, QT_Q6_K, QT_Q5_K, QT_IQ4_XS, QT_IQ4_NL};
    show_err = true;
    for (size_t ti = 0; ti < sizeof ty / sizeof ty[0]; ti++) {
        const long s0 = bk_cuda_path_launches(gpu, "mmvs"); /* -1: not run on this device (before sm_90) */
        int64_t narrow = ty[ti] == QT_Q6_K ? 2048 : 256; /* Q6_K rows are 16-byte multiples from 2048 on */
        check_matmul(ty[ti], narrow, 20000, 1, true);
        check_matmul(ty[ti], 12288, 300, 1, false);
        if (ty[ti] == QT_Q6_K) { /* rows that do not start on 16 bytes (1,890 and 14,280 bytes) */
            check_matmul(QT_Q6_K, 2304, 3000, 1, false);
            check_matmul_add(QT_Q6_K, 17408, 200, 1);
        }
        if (ty[ti] == QT_IQ4_XS) check_matmul(QT_IQ4_XS, 2304, 3000, 1, false); /* 1,224-byte rows: 8-byte aligned */
        check_matmul_add(ty[ti], 2048, 700, 1);
        check_matmul_swiglu(ty[ti], 2048, 1500, 1, true);
        const uint32_t same[3] = {ty[ti], ty[ti], ty[ti]};
        const int64_t no[3] = {512, 128, 128};
        check_matmul_multi(same, 2048, no, 1);
        /* the streamed kernel ran: at least for y += and the three matrices (one launch), rows of
         * 2,048 columns that every plan above streams while BRISK_CUDA_MMVS_MIN_IN lets them (main
         * sets 0; its default is 2,048) */
        if (s0 >= 0 && plan_now().mmvs_min_in <= 2048) CHECK(bk_cuda_path_launches(gpu, "mmvs") - s0 >= 2);
    }
    show_err = false;
}

#include "cuda/ops_mmvf.c"

/* 7 rows of a type's matrix (n_in columns) read on the GPU against the CPU's: every float the same
 * (exact), or within 1e-6 (the K-quant decoders' fused multiply-adds). */
static void check_get_rows(uint32_t type, int64_t n_in, bool exact) {
    const int64_t n_out = 50;
    size_t rb;
    void *wh = make_weight(type, n_in, n_out, &rb);
    bk_weight wc = {.name = "emb", .type = type, .n_in = n_in, .n_out = n_out, .row_bytes = rb, .host = wh}, wg = wc;
    CHECK_OK(gpu->ops->bind_weight(gpu, &wg));
    int32_t ids[7] = {3, 0, 49, 3, 17, 25, 1};
    float *yc = malloc(7 * n_in * 4), *yg = malloc(7 * n_in * 4);
    float *dy = dev_copy(NULL, 7 * n_in * 4);
    cpu->ops->get_rows(cpu, &wc, ids, 7, yc);
    gpu->ops->get_rows(gpu, &wg, ids, 7, dy);
    dev_read(dy, yg, 7 * n_in * 4);
    size_t diff = 0;
    for (size_t i = 0; i < (size_t)(7 * n_in); i++) diff += memcmp(&yg[i], &yc[i], 4) != 0;
    double e = rel_err(yg, yc, 7 * n_in);
    if (exact ? diff != 0 : !(e <= 1e-6))
        fprintf(stderr, "  get_rows %s: %zu of %lld floats differ, %.2e\n", quant_type_name(type), diff,
                (long long)(7 * n_in), e);
    CHECK(exact ? diff == 0 : e <= 1e-6);
    gpu->ops->release(gpu, dy);
    bk_cuda_release_weight(&wg);
    free(wh); free(yc); free(yg);
}

static void test_get_rows(void) {
    for (int ti = 0; ti < N_TYPES; ti++)
        check_get_rows(types[ti], types[ti] <= QT_F16 || types[ti] == QT_BF16 ? 100 : 512, false);
}

static void test_rms_norm(void) {
    static const int shapes[][2] = {{1, 4096}, {7, 100}, {96, 128}, {3, 8}, {2, 5120}};
    for (size_t s = 0; s < sizeof shapes / sizeof shapes[0]; s++) {
        int n = shapes[s][0], dim = shapes[s][1];
        size_t nx = (size_t)n * dim;
        float *x = malloc(nx * 4), *w = malloc((size_t)dim * 4), *yc = malloc(nx * 4), *yg = malloc(nx * 4);
        fill(x, nx, 3.0f);
        fill(w, (size_t)dim, 1.0f);
        bk_weight wc = {.name = "norm", .type = QT_F32, .n_in = dim, .n_out = 1, .row_bytes = (size_t)dim * 4, .host = w},
                  wg = wc;
        CHECK_OK(gpu->ops->bind_weight(gpu, &wg));
        float *dx = dev_copy(x, nx * 4);
        cpu->ops->rms_norm(cpu, x, &wc, yc, n, dim, 1e-6f);
        gpu->ops->rms_norm(gpu, dx, &wg, dx, n, dim, 1e-6f); /* in place */
        dev_read(dx, yg, nx * 4);
        CHECK(rel_err(yg, yc, nx) <= 1e-6);
        gpu->ops->release(gpu, dx);
        bk_cuda_release_weight(&wg);
        free(x); free(w); free(yc); free(yg);
    }
}

static void check_rope(bk_rope_params rp, int n, int n_heads, int hd, int max_pos) {
    double tol = rp.ext_factor != 0.0f ? 2e-5 : 1e-5;
    size_t nx = (size_t)n * n_heads * hd;
    float *x = malloc(nx * 4), *xg = malloc(nx * 4);
    int32_t *pos = malloc((size_t)n * 4);
    fill(x, nx, 1.0f);
    for (int i = 0; i < n; i++) pos[i] = (int32_t)(rnd() % (uint32_t)max_pos);
    float *dx = dev_copy(x, nx * 4);
    cpu->ops->rope(cpu, x, n, n_heads, hd, pos, &rp);
    gpu->ops->rope(gpu, dx, n, n_heads, hd, pos, &rp);
    dev_read(dx, xg, nx * 4);
    double e = rel_err(xg, x, nx);
    if (!(e <= tol)) fprintf(stderr, "  rope mode %d n_rot %d hd %d ext %g: %.2e\n", rp.mode, rp.n_rot, hd, rp.ext_factor, e);
    CHECK(e <= tol);
    gpu->ops->release(gpu, dx);
    free(x); free(xg); free(pos);
}

static void test_rope(void) {
    bk_rope_params base = {.n_rot = 128, .mode = BK_ROPE_NORM, .freq_base = 10000.0f, .freq_scale = 1.0f,
                           .ext_factor = 0.0f, .attn_factor = 1.0f, .beta_fast = 32.0f, .beta_slow = 1.0f,
                           .n_ctx_orig = 4096, .freq_factors = NULL};
    for (int mode = 0; mode < 2; mode++) {
        bk_rope_params rp = base;
        rp.mode = mode ? BK_ROPE_NEOX : BK_ROPE_NORM;
        check_rope(rp, 5, 8, 128, 4096);
        rp.n_rot = 64; /* partial rotation */
        check_rope(rp, 3, 4, 128, 100000);
        rp.n_rot = 8;
        check_rope(rp, 17, 3, 8, 256);
        rp = base;
        rp.mode = mode ? BK_ROPE_NEOX : BK_ROPE_NORM;
        rp.freq_base = 1000000.0f;
        rp.freq_scale = 0.25f; /* YaRN */
        rp.ext_factor = 1.0f;
        rp.attn_factor = 1.0f;
        check_rope(rp, 6, 8, 128, 30000);
        static float ff[64];
        for (int i = 0; i < 64; i++) ff[i] = 1.0f + (float)(rnd() % 8);
        rp = base;
        rp.freq_factors = ff; /* Llama 3 rope_freqs */
        check_rope(rp, 4, 8, 128, 8000);
    }
}

/* The fused QK-norm + rope against the CPU's op-by-op norm and rope. */
static void check_qk_norm_rope(bk_rope_params rp, int n, int n_head, int n_head_kv, int hd, bool norm) {
    size_t nq = (size_t)n * n_head * hd, nk = (size_t)n * n_head_kv * hd;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *qg = malloc(nq * 4), *kg = malloc(nk * 4);
    float *wq = malloc((size_t)hd * 4), *wk = malloc((size_t)hd * 4);
    int32_t *pos = malloc((size_t)n * 4);
    fill(q, nq, 2.0f);
    fill(k, nk, 2.0f);
    fill(wq, (size_t)hd, 1.0f);
    fill(wk, (size_t)hd, 1.0f);
    for (int i = 0; i < n; i++) pos[i] = (int32_t)(rnd() % 5000u);
    bk_weight qwc = {.name = "qn", .type = QT_F32, .n_in = hd, .n_out = 1, .row_bytes = (size_t)hd * 4, .host = wq};
    bk_weight kwc = qwc, qwg, kwg;
    kwc.host = wk;
    qwg = qwc;
    kwg = kwc;
    CHECK_OK(gpu->ops->bind_weight(gpu, &qwg));
    CHECK_OK(gpu->ops->bind_weight(gpu, &kwg));
    float *dq = dev_copy(q, nq * 4), *dk = dev_copy(k, nk * 4);
    bk_qk_norm_rope(cpu, q, k, n, n_head, n_head_kv, hd, norm ? &qwc : NULL, norm ? &kwc : NULL, 1e-6f, pos, &rp);
    CHECK(gpu->ops->qk_norm_rope != NULL);
    bk_qk_norm_rope(gpu, dq, dk, n, n_head, n_head_kv, hd, norm ? &qwg : NULL, norm ? &kwg : NULL, 1e-6f, pos, &rp);
    dev_read(dq, qg, nq * 4);
    dev_read(dk, kg, nk * 4);
    double eq = rel_err(qg, q, nq), ek = rel_err(kg, k, nk);
    if (!(eq <= 1e-5 && ek <= 1e-5))
        fprintf(stderr, "  qk_norm_rope n %d heads %d/%d hd %d n_rot %d norm %d: %.2e %.2e\n", n, n_head, n_head_kv, hd,
                rp.n_rot, norm, eq, ek);
    CHECK(eq <= 1e-5 && ek <= 1e-5);
    gpu->ops->release(gpu, dq);
    gpu->ops->release(gpu, dk);
    bk_cuda_release_weight(&qwg);
    bk_cuda_release_weight(&kwg);
    free(q); free(k); free(qg); free(kg); free(wq); free(wk); free(pos);
}

static void test_qk_norm_rope(void) {
    bk_rope_params rp = {.n_rot = 128, .mode = BK_ROPE_NEOX, .freq_base = 1000000.0f, .freq_scale = 1.0f,
                         .ext_factor = 0.0f, .attn_factor = 1.0f, .beta_fast = 32.0f, .beta_slow = 1.0f,
                         .n_ctx_orig = 4096, .freq_factors = NULL};
    check_qk_norm_rope(rp, 1, 32, 8, 128, true);  /* a qwen3-8b decode step */
    check_qk_norm_rope(rp, 70, 16, 4, 128, true); /* prefill-sized */
    rp.mode = BK_ROPE_NORM;
    check_qk_norm_rope(rp, 3, 8, 8, 128, false);  /* llama: rope only */
    rp.mode = BK_ROPE_NEOX;
    rp.n_rot = 64; /* partial rotation of a wide head */
    check_qk_norm_rope(rp, 5, 8, 2, 256, true);
    rp.n_rot = 64;
    check_qk_norm_rope(rp, 9, 4, 4, 64, true);
}

/* The fused gate/up/SwiGLU product (and the RMS norm that quantizes its output for it) against the CPU. */
static void check_matmul_swiglu(uint32_t type, int64_t n_in, int64_t n_ff, int n, bool via_norm) {
    size_t rb;
    void *gh = make_weight(type, n_in, n_ff, &rb), *uh = make_weight(type, n_in, n_ff, &rb);
    bk_weight gc = {.name = "gate", .type = type, .n_in = n_in, .n_out = n_ff, .row_bytes = rb, .host = gh}, uc = gc;
    uc.name = "up";
    uc.host = uh;
    bk_weight gg = gc, ug = uc;
    CHECK_OK(gpu->ops->bind_weight(gpu, &gg));
    CHECK_OK(gpu->ops->bind_weight(gpu, &ug));
    size_t nx = (size_t)n * n_in, ny = (size_t)n * n_ff;
    float *x = malloc(nx * 4), *w = malloc((size_t)n_in * 4), *xn = malloc(nx * 4);
    float *yc = malloc(ny * 4), *tc = malloc(ny * 4), *yg = malloc(ny * 4);
    fill(x, nx, 2.0f);
    fill(w, (size_t)n_in, 1.0f);
    bk_weight nc = {.name = "norm", .type = QT_F32, .n_in = n_in, .n_out = 1, .row_bytes = (size_t)n_in * 4, .host = w},
              ng = nc;
    CHECK_OK(gpu->ops->bind_weight(gpu, &ng));
    float *dx = dev_copy(x, nx * 4), *dxn = dev_copy(NULL, nx * 4), *dy = dev_copy(NULL, ny * 4),
          *dt = dev_copy(NULL, ny * 4);
    const float *in_c = x, *in_g = dx;
    if (via_norm) {
        cpu->ops->rms_norm(cpu, x, &nc, xn, n, (int)n_in, 1e-6f);
        gpu->ops->rms_norm(gpu, dx, &ng, dxn, n, (int)n_in, 1e-6f);
        in_c = xn;
        in_g = dxn;
    }
    bk_matmul_swiglu(cpu, &gc, &uc, in_c, n, tc, yc);
    bk_matmul_swiglu(gpu, &gg, &ug, in_g, n, dt, dy);
    dev_read(dy, yg, ny * 4);
    double e = rel_err(yg, yc, ny);
    /* float weights at one token: F32 has float activations and sums on both sides; the CPU rounds
     * the activations to F16 / BF16 for those types (their vec_dot_type), the GPU keeps floats
     * (int8 activations or f16 tensor cores elsewhere) */
    double tol = n == 1 && type == QT_F32 ? 1e-4 : n == 1 && (type == QT_F16 || type == QT_BF16) ? 1e-2 : 3e-2;
    if (!(e < tol)) fprintf(stderr, "  matmul_swiglu %s n %d via_norm %d: %.2e\n", quant_type_name(type), n, via_norm, e);
    CHECK(e < tol);
    gpu->ops->release(gpu, dx); gpu->ops->release(gpu, dxn); gpu->ops->release(gpu, dy); gpu->ops->release(gpu, dt);
    bk_cuda_release_weight(&gg); bk_cuda_release_weight(&ug); bk_cuda_release_weight(&ng);
    free(gh); free(uh); free(x); free(w); free(xn); free(yc); free(tc); free(yg);
}

static void test_matmul_swiglu(void) {
    uint32_t ty[] = {QT_Q4_K, QT_Q6_K, QT_Q8_0, QT_Q4_0, QT_F16};
    int ns[] = {1, 3, 16, 40};
    for (size_t t = 0; t < sizeof ty / sizeof ty[0]; t++)
        for (size_t i = 0; i < sizeof ns / sizeof ns[0]; i++) check_matmul_swiglu(ty[t], 512, 96, ns[i], i % 2 == 0);
    check_matmul_swiglu(QT_Q4_K, 4096, 300, 1, true); /* wide rows: the block norm kernel */
}

/* Page tables for a paged-cache test: sequence s owns pages s, s + n_seq, s + 2 n_seq, ... (per
 * pages each) in shuffled order; slot[t] and tables[t] place entry t (seq[t], pos[t]). */
static void paged_batch(int n_seq, int per, int n, const int32_t *seq, const int32_t *pos, int bs, int32_t ***tab_out,
                        int32_t **slot_out, const int32_t ***tables_out) {
    int32_t **tab = malloc((size_t)n_seq * sizeof *tab);
    for (int s = 0; s < n_seq; s++) {
        tab[s] = malloc((size_t)per * 4);
        for (int i = 0; i < per; i++) tab[s][i] = n_seq * i + s;
        for (int i = per - 1; i > 0; i--) {
            int j = (int)(rnd() % (uint32_t)(i + 1));
            int32_t x = tab[s][i];
            tab[s][i] = tab[s][j];
            tab[s][j] = x;
        }
    }
    int32_t *slot = malloc((size_t)n * 4);
    const int32_t **tables = malloc((size_t)n * sizeof *tables);
    for (int t = 0; t < n; t++) {
        slot[t] = tab[seq[t]][pos[t] / bs] * bs + pos[t] % bs;
        tables[t] = tab[seq[t]];
    }
    *tab_out = tab;
    *slot_out = slot;
    *tables_out = tables;
}

#include "cuda/ops_attn_fused.c"

/* A KV type's format for quant_quantize / quant_dequantize, and the bytes of a cache row of kvd values. */
static uint32_t kv_qt(int kv_type) {
    return kv_type == BRISK_KV_Q4_0 || kv_type == BRISK_KV_Q4_0H ? QT_Q4_0 /* (q4_0h: blocks of rotated keys) */
           : kv_type == BRISK_KV_Q8_0 ? QT_Q8_0
           : kv_type == BRISK_KV_F16  ? QT_F16
                                      : QT_F32;
}
static size_t kv_row_bytes(int kv_type, size_t kvd) {
    const size_t bb = bk_kv_block_bytes(kv_type);
    return bb ? kvd / 32 * bb : kvd * (kv_type == BRISK_KV_F16 ? 2 : 4);
}

/* Whether gpu's decode attention takes the tensor-core kernel (cuda_attn_mma.cu: f16 Q, P, K, V,
 * so the prefill kernel's 2e-3): the backend answers from its plan (BRISK_CUDA_DISABLE=attn_mma
 * and the threshold) and the kernel's shapes, not a copy of them here. */
static bool attn_on_mma(int kv_type, int n_head, int n_head_kv, int hd, int n, const int32_t *pos) {
    int max_np = 0;
    for (int i = 0; i < n; i++) max_np = pos[i] + 1 > max_np ? pos[i] + 1 : max_np;
    return bk_cuda_attn_on_mma(gpu, kv_type, n_head, n_head_kv, hd, n, max_np);
}

/* A paged cache with shuffled pages, random contents; two sequences. With fused, the GPU side runs
 * inside a step (a captured graph at decode sizes): qk_norm_rope_kv takes q's heads out of query|gate
 * rows (2 * hd apart), normalises and rotates q and k and writes k and v into the cache, and the
 * attention gets k = v = NULL; the CPU side copies the rows, then qk_norm_rope and its attention. */
static void check_attention_ex(int kv_type, int n_head, int n_head_kv, int hd, int n, const int32_t *pos,
                               const int *seq, bool fused) {
    /* per sequence: the pages up to the longest position, at least 256 */
    int max_pos = 0;
    for (int t = 0; t < n; t++)
        if (pos[t] > max_pos) max_pos = pos[t];
    const int bs = 16, per = max_pos / bs + 1 > 256 ? max_pos / bs + 1 : 256, n_pages = 2 * per;
    size_t kvd = (size_t)n_head_kv * hd, esz = kv_type == BRISK_KV_F16 ? 2 : 4;
    size_t row_bytes = kv_row_bytes(kv_type, kvd);
    size_t cache_bytes = (size_t)n_pages * bs * row_bytes;
    uint8_t *kc = malloc(cache_bytes), *vc = malloc(cache_bytes);
    if (bk_kv_block_bytes(kv_type)) {
        float *ra = malloc(kvd * 4), *rb = malloc(kvd * 4);
        for (size_t r = 0; r < (size_t)n_pages * bs; r++) {
            fill(ra, kvd, 1.0f);
            fill(rb, kvd, 1.0f);
            quant_quantize(kv_qt(kv_type), ra, kc + r * row_bytes, (int64_t)kvd);
            quant_quantize(kv_qt(kv_type), rb, vc + r * row_bytes, (int64_t)kvd);
        }
        free(ra);
        free(rb);
    } else {
        for (size_t i = 0; i < cache_bytes / esz; i++) {
            float a = frand(), b = frand();
            if (esz == 2) {
                ((uint16_t *)kc)[i] = quant_f32_to_f16(a);
                ((uint16_t *)vc)[i] = quant_f32_to_f16(b);
            } else {
                ((float *)kc)[i] = a;
                ((float *)vc)[i] = b;
            }
        }
    }
    /* seq 0 owns even shuffled pages, seq 1 odd ones */
    int32_t **tab, *slot;
    const int32_t **tables;
    paged_batch(2, per, n, seq, pos, bs, &tab, &slot, &tables);
    size_t nq = (size_t)n * n_head * hd, nk = (size_t)n * kvd;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *oc = malloc(nq * 4), *og = malloc(nq * 4);
    fill(q, nq, 2.0f);
    fill(k, nk, 1.0f);
    fill(v, nk, 1.0f);
    void *dkc = dev_copy(kc, cache_bytes), *dvc = dev_copy(vc, cache_bytes);
    const void *kc0 = dev_copy(kc, cache_bytes), *vc0 = dev_copy(vc, cache_bytes); /* the caches before the step */
    float *dq = dev_copy(q, nq * 4), *dk = dev_copy(k, nk * 4), *dv = dev_copy(v, nk * 4), *dout = dev_copy(NULL, nq * 4);
    bk_kv_view vwc = {.k = kc, .v = vc, .kv_type = kv_type, .block_size = bs},
               vwg = {.k = dkc, .v = dvc, .kv_type = kv_type, .block_size = bs};
    bk_attn_batch ab = {.n_tokens = n, .pos = pos, .slot = slot, .block_table = tables};
    float scale = 1.0f / sqrtf((float)hd);
    if (fused) {
        bk_rope_params rp = {.n_rot = hd >= 128 ? 64 : hd, .mode = BK_ROPE_NEOX, .freq_base = 1000000.0f,
                             .freq_scale = 1.0f, .attn_factor = 1.0f, .beta_fast = 32.0f, .beta_slow = 1.0f,
                             .n_ctx_orig = 4096};
        float *qg = malloc(2 * nq * 4), *nw = malloc((size_t)2 * hd * 4);
        fill(qg, 2 * nq, 2.0f);
        fill(nw, (size_t)2 * hd, 1.0f);
        for (size_t r = 0; r < (size_t)n * n_head; r++) memcpy(q + r * hd, qg + r * 2 * hd, (size_t)hd * 4);
        bk_weight qn = {.name = "q_norm", .type = QT_F32, .n_in = hd, .n_out = 1, .row_bytes = (size_t)hd * 4,
                        .host = nw},
                  kn = qn;
        kn.name = "k_norm";
        kn.host = nw + hd;
        bk_weight qng = qn, kng = kn;
        CHECK_OK(gpu->ops->bind_weight(gpu, &qng));
        CHECK_OK(gpu->ops->bind_weight(gpu, &kng));
        float *dqg = dev_copy(qg, 2 * nq * 4);
        bk_qk_norm_rope(cpu, q, k, n, n_head, n_head_kv, hd, &qn, &kn, 1e-6f, pos, &rp);
        cpu->ops->attention(cpu, q, k, v, &vwc, &ab, n_head, n_head_kv, hd, scale, oc);
        int32_t *tok = calloc((size_t)n, sizeof *tok);
        /* a graph is keyed by its shape, not its buffers: a row wanting logits that no other call
         * names keeps every call a capture of its own, never a replay of another's buffers */
        static int32_t key_row = 1000;
        int32_t out_row = key_row++;
        bk_step st = {.n_tokens = n, .tokens = tok, .ab = &ab, .kv_block_size = bs, .n_out = 1, .out_idx = &out_row};
        bool replayed = false, rerun = false, in_cache = false;
        CHECK_OK(gpu->ops->step_begin(gpu, &st, &replayed));
        CHECK(!replayed);
        in_cache = gpu->ops->qk_norm_rope_kv && gpu->ops->qk_norm_rope_kv(gpu, dq, dqg, 2 * hd, dk, dv, n, n_head,
                                                                           n_head_kv, hd, &qng, &kng, 1e-6f, pos,
                                                                           &rp, &vwg);
        CHECK(in_cache);
        gpu->ops->attention(gpu, dq, NULL, NULL, &vwg, &ab, n_head, n_head_kv, hd, scale, dout);
        CHECK_OK(gpu->ops->step_end(gpu, &rerun));
        CHECK(!rerun);
        float *qq = malloc(nq * 4);
        dev_read(dq, qq, nq * 4);
        double eq = rel_err(qq, q, nq);
        if (!(eq <= 1e-5)) fprintf(stderr, "  qk_norm_rope_kv q kv %d hd %d n %d: %.2e\n", kv_type, hd, n, eq);
        CHECK(eq <= 1e-5);
        check_attention_rope(&vwg, kc0, vc0, cache_bytes, &ab, dqg, dk, dv, &qng, &kng, &rp, n_head, n_head_kv, hd,
                             scale, dout, bs);
        free(qq);
        free(tok);
        free(qg);
        free(nw);
        gpu->ops->release(gpu, dqg);
        bk_cuda_release_weight(&qng);
        bk_cuda_release_weight(&kng);
    } else {
        cpu->ops->attention(cpu, q, k, v, &vwc, &ab, n_head, n_head_kv, hd, scale, oc);
        const long m0 = bk_cuda_path_launches(gpu, "attn_mma");
        gpu->ops->attention(gpu, dq, dk, dv, &vwg, &ab, n_head, n_head_kv, hd, scale, dout);
        /* the kernel the tolerance below assumes is the one that ran */
        const long m1 = bk_cuda_path_launches(gpu, "attn_mma");
        if (m1 - m0 != (attn_on_mma(kv_type, n_head, n_head_kv, hd, n, pos) ? 1 : 0))
            fprintf(stderr, "  attention kv %d heads %d/%d hd %d n %d: %ld tensor-core launches, expected %d\n", kv_type,
                    n_head, n_head_kv, hd, n, m1 - m0, attn_on_mma(kv_type, n_head, n_head_kv, hd, n, pos) ? 1 : 0);
        CHECK(m1 - m0 == (attn_on_mma(kv_type, n_head, n_head_kv, hd, n, pos) ? 1 : 0));
        check_attention_gated(&vwg, &ab, dq, n_head, n_head_kv, hd, scale, nq);
    }
    dev_read(dout, og, nq * 4);
    double e = rel_err(og, oc, nq),
           tol = kv_type == BRISK_KV_F32 ? 1e-5 : attn_on_mma(kv_type, n_head, n_head_kv, hd, n, pos) ? 2e-3 : 1e-4;
    if (!(e <= tol))
        fprintf(stderr, "  attention kv %d heads %d/%d hd %d n %d pos0 %d: %.2e\n", kv_type, n_head, n_head_kv, hd, n, pos[0], e);
    CHECK(e <= tol);
    /* the written K and V rows land in the same slots with the same bytes (fused: K rotated on each
     * side, whose floats may differ in the last bit, so the cache rows are compared as values) */
    uint8_t *kg = malloc(cache_bytes);
    dev_read(dkc, kg, cache_bytes);
    if (!fused) {
        CHECK(!memcmp(kg, kc, cache_bytes));
    } else {
        size_t rows = cache_bytes / row_bytes;
        float *a = malloc(kvd * 4), *b = malloc(kvd * 4);
        double worst = 0;
        for (size_t r = 0; r < rows; r++) {
            if (!memcmp(kg + r * row_bytes, kc + r * row_bytes, row_bytes)) continue;
            quant_dequantize(kv_qt(kv_type), kg + r * row_bytes, a, (int64_t)kvd);
            quant_dequantize(kv_qt(kv_type), kc + r * row_bytes, b, (int64_t)kvd);
            double er = rel_err(a, b, kvd);
            if (er > worst) worst = er;
        }
        /* q8_0, q4_0: a value on a rounding edge moves one step of its block's scale, which for q4_0 is
         * an eighth of the block's largest value (a 256-wide row of values in [-1, 1]: ~1.4e-2 a step) */
        const double tol_c = kv_type == BRISK_KV_Q4_0 ? 5e-2 : 2e-2;
        if (!(worst <= tol_c))
            fprintf(stderr, "  qk_norm_rope_kv cache kv %d hd %d n %d: %.2e\n", kv_type, hd, n, worst);
        CHECK(worst <= tol_c);
        free(a);
        free(b);
    }
    dev_read(dvc, kg, cache_bytes);
    CHECK(!memcmp(kg, vc, cache_bytes));
    free(kg);
    gpu->ops->release(gpu, dkc); gpu->ops->release(gpu, dvc); gpu->ops->release(gpu, dq);
    gpu->ops->release(gpu, (void *)kc0); gpu->ops->release(gpu, (void *)vc0);
    gpu->ops->release(gpu, dk); gpu->ops->release(gpu, dv); gpu->ops->release(gpu, dout);
    free(kc); free(vc); free(slot); free(tables); free(q); free(k); free(v); free(oc); free(og);
    free(tab[0]); free(tab[1]); free(tab);
}

static void check_attention(int kv_type, int n_head, int n_head_kv, int hd, int n, const int32_t *pos,
                            const int *seq) {
    check_attention_ex(kv_type, n_head, n_head_kv, hd, n, pos, seq, false);
}

/* QK-norm + rope writing the cache (qk_norm_rope_kv) before the attention, each KV type: a decode
 * token (captured as a graph), a batch of two sequences, and a prefill-sized step (run eagerly) */
static void test_attention_kv_fused(void) {
    int32_t pos[40];
    int seq[40];
    for (int kt = BRISK_KV_F32; kt <= BRISK_KV_Q4_0; kt++) {
        pos[0] = 3001; seq[0] = 1;
        check_attention_ex(kt, 32, 8, 128, 1, pos, seq, true);
        pos[0] = 37; seq[0] = 0; pos[1] = 900; seq[1] = 1;
        check_attention_ex(kt, 16, 2, 256, 2, pos, seq, true);
        for (int i = 0; i < 20; i++) { pos[i] = 100 + i; seq[i] = 0; }
        check_attention_ex(kt, 8, 4, 64, 20, pos, seq, true);
    }
}

static void attention_cases(void) {
    int32_t pos[40];
    int seq[40];
    for (int kt = BRISK_KV_F32; kt <= BRISK_KV_Q4_0H; kt++) {
        static const int hds[] = {64, 128, 8, 80, 256, 32};
        for (int h = 0; h < 6; h++) {
            if (bk_kv_block_bytes(kt) && hds[h] % 32) continue; /* q8_0, q4_0 rows are whole 32-blocks */
            /* decode, one token: short, then long enough to split over positions */
            pos[0] = 37; seq[0] = 0;
            check_attention(kt, 8, 2, hds[h], 1, pos, seq);
            pos[0] = 3001; seq[0] = 1;
            check_attention(kt, 8, 2, hds[h], 1, pos, seq);
            /* query heads per KV head 2 and 8 (grouped kernels) and 3 (per-head kernel) */
            check_attention(kt, 8, 4, hds[h], 1, pos, seq);
            check_attention(kt, 16, 2, hds[h], 1, pos, seq);
            check_attention(kt, 6, 2, hds[h], 1, pos, seq);
            /* a prefill chunk of one sequence, then a mixed batch of two */
            for (int i = 0; i < 20; i++) { pos[i] = 100 + i; seq[i] = 0; }
            check_attention(kt, 4, 4, hds[h], 20, pos, seq);
            for (int i = 0; i < 6; i++) { pos[i] = i < 3 ? 500 + i : 1200 + i; seq[i] = i < 3 ? 0 : 1; }
            check_attention(kt, 8, 1, hds[h], 6, pos, seq);
        }
    }
    /* Qwen3-8B's shape (32/8 heads of 128) and GQA 8 at long depths: many splits, f16, q8_0 and q4_0 KV */
    for (int kt = BRISK_KV_F16; kt <= BRISK_KV_Q4_0; kt++) {
        pos[0] = 3000; seq[0] = 0;
        check_attention(kt, 32, 8, 128, 1, pos, seq);
        check_attention(kt, 64, 8, 128, 1, pos, seq);
        pos[0] = 20000; seq[0] = 1;
        check_attention(kt, 32, 8, 128, 1, pos, seq);
        check_attention(kt, 16, 2, 128, 1, pos, seq);
        /* a long and a short sequence in one batch: the launch is split for the long one, the short
         * one's few splits that hold positions take part (one: no merge; four of 33) */
        pos[0] = 3000; seq[0] = 0; pos[1] = 5; seq[1] = 1;
        check_attention(kt, 32, 8, 128, 2, pos, seq);
        pos[1] = 100;
        check_attention(kt, 32, 8, 128, 2, pos, seq);
        /* 32 sequences' worth of decode tokens at mixed depths (two page tables) */
        for (int i = 0; i < 32; i++) { pos[i] = i % 2 ? 700 + 97 * i : 2500 + i; seq[i] = i % 2; }
        check_attention(kt, 32, 8, 128, 32, pos, seq);
        /* a 40-token prefill chunk deep in a sequence: the decode kernel too (<= 64 tokens) */
        for (int i = 0; i < 40; i++) { pos[i] = 5000 + i; seq[i] = 0; }
        check_attention(kt, 32, 8, 128, 40, pos, seq);
    }
}


static void test_attention(void) { attention_cases(); }

/* the attention at depth (64K+ positions) and on the warp-per-row decode kernel */
#include "cuda/ops_attn_depth.c"

static void test_elementwise(void) {
    size_t sizes[] = {1, 15, 16, 1000, 100003};
    for (size_t s = 0; s < 5; s++) {
        size_t n = sizes[s];
        float *g = malloc(n * 4), *u = malloc(n * 4), *oc = malloc(n * 4), *og = malloc(n * 4);
        fill(g, n, 6.0f);
        fill(u, n, 2.0f);
        float *dg = dev_copy(g, n * 4), *du = dev_copy(u, n * 4), *dz = dev_copy(NULL, n * 4);
        cpu->ops->swiglu(cpu, g, u, oc, n);
        gpu->ops->swiglu(gpu, dg, du, dz, n);
        dev_read(dz, og, n * 4);
        CHECK(rel_err(og, oc, n) <= 1e-6);
        cpu->ops->add(cpu, g, u, n);
        gpu->ops->add(gpu, dg, du, n);
        dev_read(dg, og, n * 4);
        CHECK(!memcmp(og, g, n * 4));
        gpu->ops->copy(gpu, dz, du, n * 4);
        dev_read(dz, og, n * 4);
        CHECK(!memcmp(og, u, n * 4));
        gpu->ops->release(gpu, dg); gpu->ops->release(gpu, du); gpu->ops->release(gpu, dz);
        free(g); free(u); free(oc); free(og);
    }
}

/* the MoE and Gated DeltaNet cases (kept apart: the file would pass 1,500 lines) */
#include "cuda/ops_moe_ssm.c"

/* Greedy decoding from BOS on the CPU and on CUDA: same tokens for 128 steps. A random-weight model
 * can have two tokens within float noise of each other at some step; there the backends may pick
 * differently without either being wrong. Such a step counts as a tie when the CPU's own logits of the
 * two picks are closer than twice that step's largest logit difference; both then go on with the
 * CPU's token. A pick that differs by more, more than two ties, or logits apart by more than 4e-3 of
 * the largest (0.2-6e-4 seen on H100) fail. */
static void e2e_model(const char *path) {
    brisk_model *m[2] = {NULL, NULL};
    brisk_context *c[2] = {NULL, NULL};
    for (int d = 0; d < 2; d++) {
        brisk_model_params mp = brisk_model_default_params();
        mp.n_gpu_layers = d == 0 ? 0 : -1;
        CHECK_OK(brisk_model_load(path, &mp, &m[d]));
        if (!m[d]) return;
        brisk_context_params cp = brisk_context_default_params();
        cp.n_ctx = 256;
        CHECK_OK(brisk_context_new(m[d], &cp, &c[d]));
        if (!c[d]) return;
    }
    int nv = brisk_n_vocab(m[0]);
    brisk_token tok[2];
    tok[0] = tok[1] = brisk_token_bos(m[0]) >= 0 ? brisk_token_bos(m[0]) : 1;
    double worst = 0;
    int same = 0, ties = 0, steps = 128;
    for (int i = 0; i < steps; i++) {
        const float *lg[2];
        for (int d = 0; d < 2; d++) {
            brisk_batch_entry e = {tok[d], i, 0, true};
            CHECK_OK(brisk_decode(c[d], &e, 1));
            lg[d] = brisk_get_logits(c[d], 0);
        }
        CHECK(lg[0] && lg[1]); /* a run that stops early is a failure */
        if (!lg[0] || !lg[1]) return;
        float mx = 0, diff = 0;
        for (int d = 0; d < 2; d++) {
            int best = 0;
            for (int j = 1; j < nv; j++)
                if (lg[d][j] > lg[d][best]) best = j;
            tok[d] = best;
        }
        for (int j = 0; j < nv; j++) {
            if (fabsf(lg[0][j]) > mx) mx = fabsf(lg[0][j]);
            if (fabsf(lg[0][j] - lg[1][j]) > diff) diff = fabsf(lg[0][j] - lg[1][j]);
        }
        if (diff / mx > worst) worst = diff / mx;
        if (tok[0] == tok[1]) { same++; continue; }
        const float gap = lg[0][tok[0]] - lg[0][tok[1]];
        printf("  e2e %s: step %d picks %d (CPU) and %d (CUDA), the CPU's logits %.3e apart, the step's largest "
               "difference %.3e\n", path, i, (int)tok[0], (int)tok[1], gap, diff);
        if (gap > 2 * diff) break;
        ties++;
        tok[1] = tok[0];
    }
    printf("  e2e %s: %d/%d greedy tokens equal, %d ties, max |logit diff| / max |logit| = %.2e\n", path, same, steps,
           ties, worst);
    CHECK(same + ties == steps);
    CHECK(ties <= 2);
    CHECK(worst <= 4e-3);
    /* a prompt as one batch (the tiled product and multi-token attention) */
    brisk_batch_entry pe[64];
    for (int d = 0; d < 2; d++) {
        brisk_seq_clear(c[d], 0);
        for (int i = 0; i < 64; i++) pe[i] = (brisk_batch_entry){(brisk_token)((i * 37 + 5) % nv), i, 0, i == 63};
        CHECK_OK(brisk_decode(c[d], pe, 64));
    }
    const float *a = brisk_get_logits(c[0], 63), *b = brisk_get_logits(c[1], 63);
    CHECK(a && b);
    if (a && b) {
        double e = rel_err(b, a, (size_t)nv);
        printf("  e2e prefill 64: logits rel err %.2e\n", e);
        CHECK(e <= 1e-2);
    }
    for (int d = 0; d < 2; d++) {
        brisk_context_free(c[d]);
        brisk_model_free(m[d]);
    }
}

static void test_end_to_end(void) {
    const char *path = getenv("BRISK_E2E_MODEL");
    char buf[512];
    if (!path) {
        snprintf(buf, sizeof buf, "%s/data/stories260K/stories260K.gguf", test_shared_dir());
        path = buf;
    }
    FILE *f = fopen(path, "rb");
    if (!f) { /* a GPU machine without ../shared: the synthesized models still run (end_to_end_models) */
        SKIP("%s not found", path);
    }
    fclose(f);
    e2e_model(path);
}

/* Two sequences in every batch: an interleaved prompt of 16 entries, then 32
 * steps of one entry per sequence (graphs captured and replayed with the
 * sequences read from the step's upload): same greedy tokens on both
 * backends, logits within 4e-3 of the largest. */
static void e2e_two_seqs(const char *path) {
    brisk_model *m[2] = {NULL, NULL};
    brisk_context *c[2] = {NULL, NULL};
    for (int d = 0; d < 2; d++) {
        brisk_model_params mp = brisk_model_default_params();
        mp.n_gpu_layers = d == 0 ? 0 : -1;
        CHECK_OK(brisk_model_load(path, &mp, &m[d]));
        if (!m[d]) goto done;
        brisk_context_params cp = brisk_context_default_params();
        cp.n_ctx = 256;
        cp.n_seq_max = 2;
        CHECK_OK(brisk_context_new(m[d], &cp, &c[d]));
        if (!c[d]) goto done;
    }
    int nv = brisk_n_vocab(m[0]), same = 0, steps = 32;
    double worst = 0;
    brisk_batch_entry e[16];
    brisk_token tok[2][2]; /* [backend][sequence] */
    for (int i = 0; i < 16; i++) {
        int sq = i % 2, p = i / 2;
        e[i] = (brisk_batch_entry){(brisk_token)((p * 37 + 5 + sq * 11) % nv), p, sq, i >= 14};
    }
    for (int step = 0; step <= steps; step++) {
        const float *lg[2][2];
        for (int d = 0; d < 2; d++) {
            if (step == 0) CHECK_OK(brisk_decode(c[d], e, 16));
            else {
                brisk_batch_entry b2[2] = {{tok[d][0], 7 + step, 0, true}, {tok[d][1], 7 + step, 1, true}};
                CHECK_OK(brisk_decode(c[d], b2, 2));
            }
            for (int sq = 0; sq < 2; sq++) lg[d][sq] = brisk_get_logits(c[d], step == 0 ? 14 + sq : sq);
        }
        CHECK(lg[0][0] && lg[0][1] && lg[1][0] && lg[1][1]);
        if (!lg[0][0] || !lg[0][1] || !lg[1][0] || !lg[1][1]) goto done;
        bool agree = true;
        for (int sq = 0; sq < 2; sq++) {
            float mx = 0, diff = 0;
            for (int d = 0; d < 2; d++) {
                int best = 0;
                for (int j = 1; j < nv; j++)
                    if (lg[d][sq][j] > lg[d][sq][best]) best = j;
                tok[d][sq] = best;
            }
            for (int j = 0; j < nv; j++) {
                if (fabsf(lg[0][sq][j]) > mx) mx = fabsf(lg[0][sq][j]);
                if (fabsf(lg[0][sq][j] - lg[1][sq][j]) > diff) diff = fabsf(lg[0][sq][j] - lg[1][sq][j]);
            }
            if (diff / mx > worst) worst = diff / mx;
            agree &= tok[0][sq] == tok[1][sq];
        }
        if (!agree) break;
        same++;
    }
    printf("  e2e two sequences %s: %d/%d steps with equal greedy tokens, max |logit diff| / max |logit| = %.2e\n",
           path, same, steps + 1, worst);
    CHECK(same == steps + 1);
    CHECK(worst <= 4e-3);
done:
    for (int d = 0; d < 2; d++) {
        brisk_context_free(c[d]);
        brisk_model_free(m[d]);
    }
}

/* The models in BRISK_E2E_MODELS (space-separated paths: tests/cuda/run.sh
 * synthesizes tiny qwen3moe, qwen35, qwen35moe and qwen3next ones); skipped when unset.
 * Random-weight models have flat logits (on tiny-qwen3moe the top two come
 * within 3e-5 of the largest logit in 128 greedy steps), so their batches run
 * on the f32 tiled product (BRISK_CUDA_DISABLE=mma, read when a context creates its
 * backend) instead of the f16 tensor cores, whose rounding (~1e-3) would flip
 * such near-ties: the point here is the MoE and Gated DeltaNet ops, and the
 * tensor cores have their own checks (matmul, stories260K's prefill). */
static void test_end_to_end_models(void) {
    const char *list = getenv("BRISK_E2E_MODELS");
    if (!list || !*list) {
        SKIP("BRISK_E2E_MODELS not set (tests/cuda/run.sh sets it)");
    }
    char *saved = list_add("BRISK_CUDA_DISABLE", "mma");
    char buf[4096];
    snprintf(buf, sizeof buf, "%s", list);
    for (char *save = NULL, *p = strtok_r(buf, " ", &save); p; p = strtok_r(NULL, " ", &save)) {
        e2e_model(p);
        e2e_two_seqs(p);
    }
    list_restore("BRISK_CUDA_DISABLE", saved);
}

/* ---- prefill products through cuBLAS (cuda_blas.cu) ----
 * On a backend of its own, made with the default threshold (cuBLAS from 128
 * tokens) and a 1 MiB weight scratch, so that the products below run in
 * several row chunks, the last one partial (rows of 800: 640 + 60; of 512:
 * 1024 + 76). Held to the tensor-core tolerance (f16 inputs, f32 sums: 3e-3
 * vs the double reference). Skipped, passing, where cuBLAS cannot be loaded
 * (or BRISK_CUDA_DISABLE=cublas). */
static bk_backend *blas_backend_new(void) {
    const char *keys[2] = {"BRISK_CUDA_CUBLAS_MIN_TOK", "BRISK_CUDA_CUBLAS_SCRATCH_MB"}, *vals[2] = {"128", "1"};
    char *saved[2];
    for (int i = 0; i < 2; i++) {
        saved[i] = getenv(keys[i]) ? strdup(getenv(keys[i])) : NULL;
        setenv(keys[i], vals[i], 1);
    }
    bk_backend *b = NULL;
    if (bk_cuda_backend_new(0, &b) != BRISK_OK) b = NULL;
    for (int i = 0; i < 2; i++) {
        if (saved[i]) setenv(keys[i], saved[i], 1);
        else unsetenv(keys[i]);
        free(saved[i]);
    }
    return b;
}

/* The CPU's tolerance for a weight type (check_matmul's), at least the f16 inputs' 3e-3. */
static double blas_tol_cpu(uint32_t type) {
    uint32_t vt = quant_get_traits(type)->vec_dot_type;
    double t = vt == QT_F32 ? 1e-5 : (vt == QT_F16 || vt == QT_BF16) ? 1e-2 : 3e-2;
    return t < 3e-3 ? 3e-3 : t;
}

/* q/k/v-like: three matrices of different types on one x (converted to f16 once), one with a bias. */
static void check_blas_multi(int n) {
    int64_t n_in = 512;
    uint32_t ty[3] = {QT_Q4_K, QT_Q6_K, QT_F16};
    int64_t no[3] = {1100, 256, 300};
    bk_weight wc[3], wg[3], bc, bg;
    const bk_weight *pc[3], *pg[3], *bpc[3] = {NULL, &bc, NULL}, *bpg[3] = {NULL, &bg, NULL};
    void *hs[3];
    float *yc[3], *yg[3], *dy[3];
    float *x = malloc((size_t)n * n_in * 4), *bh = malloc((size_t)no[1] * 4);
    fill(x, (size_t)n * n_in, 1.0f);
    fill(bh, (size_t)no[1], 1.0f);
    bc = (bk_weight){.name = "b", .type = QT_F32, .n_in = no[1], .n_out = 1, .row_bytes = (size_t)no[1] * 4, .host = bh};
    bg = bc;
    CHECK_OK(gpu->ops->bind_weight(gpu, &bg));
    float *dx = dev_copy(x, (size_t)n * n_in * 4);
    for (int m = 0; m < 3; m++) {
        size_t rb;
        hs[m] = make_weight(ty[m], n_in, no[m], &rb);
        wc[m] = (bk_weight){.name = "w", .type = ty[m], .n_in = n_in, .n_out = no[m], .row_bytes = rb, .host = hs[m]};
        wg[m] = wc[m];
        CHECK_OK(cpu->ops->bind_weight(cpu, &wc[m]));
        CHECK_OK(gpu->ops->bind_weight(gpu, &wg[m]));
        pc[m] = &wc[m];
        pg[m] = &wg[m];
        yc[m] = malloc((size_t)n * no[m] * 4);
        yg[m] = malloc((size_t)n * no[m] * 4);
        dy[m] = dev_copy(NULL, (size_t)n * no[m] * 4);
    }
    cpu->ops->matmul(cpu, 3, pc, bpc, x, n, yc);
    gpu->ops->matmul(gpu, 3, pg, bpg, dx, n, dy);
    for (int m = 0; m < 3; m++) {
        dev_read(dy[m], yg[m], (size_t)n * no[m] * 4);
        double e = rel_err(yg[m], yc[m], (size_t)n * no[m]);
        if (!(e <= blas_tol_cpu(ty[m])))
            fprintf(stderr, "  cublas multi %s n_out %lld n %d: vs cpu %.2e\n", quant_type_name(ty[m]), (long long)no[m],
                    n, e);
        CHECK(e <= blas_tol_cpu(ty[m]));
        gpu->ops->release(gpu, dy[m]);
        bk_cuda_release_weight(&wg[m]);
        free(hs[m]); free(yc[m]); free(yg[m]);
    }
    bk_cuda_release_weight(&bg);
    gpu->ops->release(gpu, dx);
    free(x); free(bh);
}

/* cases() on a cuBLAS backend of its own (blas_backend_new) as the global gpu, which check_matmul
 * and the helpers run on; cuBLAS must take exactly the products cases() says it ran (the counter,
 * bk_cuda_blas_products). Skipped where cuBLAS cannot be loaded. */
static void on_blas_backend(int (*cases)(void)) {
    bk_backend *b = blas_backend_new();
    long n0 = b ? bk_cuda_blas_products(b) : -1;
    if (n0 < 0) {
        if (b) b->ops->free(b);
        SKIP("cuBLAS not loaded (no libcublas, or BRISK_CUDA_DISABLE=cublas)");
    }
    bk_backend *main_gpu = gpu;
    gpu = b;
    const int expect = cases();
    long n1 = bk_cuda_blas_products(b);
    if (n1 - n0 != expect) fprintf(stderr, "  cublas products: %ld, expected %d\n", n1 - n0, expect);
    CHECK(n1 - n0 == expect);
    gpu = main_gpu;
    b->ops->free(b);
}

static int cublas_cases(void) {
    const int n = 300;
    int expect = 0;
    for (int ti = 0; ti < N_TYPES; ti++) {
        uint32_t t = types[ti];
        bool k_quant = t == QT_Q4_K || t == QT_Q5_K || t == QT_Q6_K || t == QT_IQ4_XS; /* blocks of 256 */
        check_matmul(t, k_quant ? 512 : 800, k_quant ? 1100 : 700, n, ti % 2 == 0);
        expect++;
    }
    uint32_t acc_types[3] = {QT_Q4_K, QT_Q8_0, QT_BF16};
    for (int i = 0; i < 3; i++, expect++) check_matmul_add(acc_types[i], 512, 1100, n);
    check_blas_multi(n);
    return expect + 3;
}
static void test_matmul_cublas(void) { on_blas_backend(cublas_cases); }

/* ---- prefill attention on tensor cores (cuda_attn_prefill.cu) ----
 * Batches of more than 64 entries with head_dim 64/128/256 run the tensor-core
 * kernel: Q and P are rounded to f16 (and K, V too from f32 and q8_0 caches),
 * sums and softmax stay f32. Expected relative L2 error vs the CPU: 2-4e-4
 * (a host emulation of the kernel measured <= 3.4e-4 on these shapes);
 * tolerance 2e-3. The same batches on a backend made with BRISK_CUDA_DISABLE=fa
 * (the SIMT tile kernel) keep the tile kernel's tolerances (1e-5 f32 KV, 1e-4). On an sm_90 device the
 * default is the warpgroup-MMA kernel at head dims 128 and 256 (same roundings, same 2e-3); a backend
 * made with BRISK_CUDA_DISABLE=attn_wgmma checks the mma.sync kernel there too. */
static bk_backend *gpu_fa_off, *gpu_fw_off;

/* A paged cache of random contents (shuffled pages, n_seq sequences, bs tokens a page);
 * the batch's entries write their own K/V, positions below them are the prefix. */
static void check_prefill(int kv_type, int n_head, int n_head_kv, int hd, int bs, int n, const int32_t *pos,
                          const int *seq) {
    int max_pos = 0, n_seq = 0;
    for (int t = 0; t < n; t++) {
        if (pos[t] > max_pos) max_pos = pos[t];
        if (seq[t] + 1 > n_seq) n_seq = seq[t] + 1;
    }
    const int per = max_pos / bs + 2, n_pages = n_seq * per;
    size_t kvd = (size_t)n_head_kv * hd;
    size_t row_bytes = kv_row_bytes(kv_type, kvd);
    size_t cache_bytes = (size_t)n_pages * bs * row_bytes;
    uint8_t *kc = malloc(cache_bytes), *vc = malloc(cache_bytes);
    float *ra = malloc(kvd * 4), *rb = malloc(kvd * 4);
    uint32_t qt = kv_qt(kv_type);
    for (size_t r = 0; r < (size_t)n_pages * bs; r++) {
        fill(ra, kvd, 1.0f);
        fill(rb, kvd, 1.0f);
        quant_quantize(qt, ra, kc + r * row_bytes, (int64_t)kvd);
        quant_quantize(qt, rb, vc + r * row_bytes, (int64_t)kvd);
    }
    free(ra);
    free(rb);
    /* sequence s owns pages s, s + n_seq, ... in shuffled order */
    int32_t **tab, *slot;
    const int32_t **tables;
    paged_batch(n_seq, per, n, seq, pos, bs, &tab, &slot, &tables);
    size_t nq = (size_t)n * n_head * hd, nk = (size_t)n * kvd;
    float *q = malloc(nq * 4), *k = malloc(nk * 4), *v = malloc(nk * 4), *oc = malloc(nq * 4), *og = malloc(nq * 4);
    fill(q, nq, 2.0f);
    fill(k, nk, 1.0f);
    fill(v, nk, 1.0f);
    void *dkc = dev_copy(kc, cache_bytes), *dvc = dev_copy(vc, cache_bytes);
    float *dq = dev_copy(q, nq * 4), *dk = dev_copy(k, nk * 4), *dv = dev_copy(v, nk * 4), *dout = dev_copy(NULL, nq * 4);
    bk_kv_view vwc = {.k = kc, .v = vc, .kv_type = kv_type, .block_size = bs},
               vwg = {.k = dkc, .v = dvc, .kv_type = kv_type, .block_size = bs};
    bk_attn_batch ab = {.n_tokens = n, .pos = pos, .slot = slot, .block_table = tables};
    float scale = 1.0f / sqrtf((float)hd);
    cpu->ops->attention(cpu, q, k, v, &vwc, &ab, n_head, n_head_kv, hd, scale, oc);
    const long p0 = bk_cuda_path_launches(gpu, "attn_prefill");
    gpu->ops->attention(gpu, dq, dk, dv, &vwg, &ab, n_head, n_head_kv, hd, scale, dout);
    CHECK(bk_cuda_path_launches(gpu, "attn_prefill") - p0 == 1); /* (every case here is > 64 entries, head 64-256) */
    dev_read(dout, og, nq * 4);
    double e = rel_err(og, oc, nq);
    if (!(e <= 2e-3))
        fprintf(stderr, "  prefill attention kv %d heads %d/%d hd %d bs %d n %d pos0 %d: %.2e\n", kv_type, n_head,
                n_head_kv, hd, bs, n, pos[0], e);
    CHECK(e <= 2e-3);
    uint8_t *kg = malloc(cache_bytes);
    dev_read(dkc, kg, cache_bytes);
    CHECK(!memcmp(kg, kc, cache_bytes)); /* the batch's K rows, written as the CPU writes them */
    free(kg);
    if (gpu_fw_off) { /* the mma.sync kernel where the default is the warpgroup-MMA one (sm_90a, 128, 256) */
        const long f0 = bk_cuda_path_launches(gpu_fw_off, "attn_prefill");
        gpu_fw_off->ops->attention(gpu_fw_off, dq, dk, dv, &vwg, &ab, n_head, n_head_kv, hd, scale, dout);
        CHECK(bk_cuda_path_launches(gpu_fw_off, "attn_prefill") - f0 == 1);
        CHECK_OK(gpu_fw_off->ops->read(gpu_fw_off, dout, og, nq * 4));
        const double e1 = rel_err(og, oc, nq);
        if (!(e1 <= 2e-3))
            fprintf(stderr, "  prefill attention (attn_wgmma off) kv %d heads %d/%d hd %d bs %d n %d pos0 %d: %.2e\n",
                    kv_type, n_head, n_head_kv, hd, bs, n, pos[0], e1);
        CHECK(e1 <= 2e-3);
    }
    if (gpu_fa_off) { /* the SIMT kernel on the same device buffers (its own stream: read() syncs it) */
        const long f0 = bk_cuda_path_launches(gpu_fa_off, "attn_prefill");
        gpu_fa_off->ops->attention(gpu_fa_off, dq, dk, dv, &vwg, &ab, n_head, n_head_kv, hd, scale, dout);
        CHECK(bk_cuda_path_launches(gpu_fa_off, "attn_prefill") == f0); /* the tile kernel ran */
        CHECK_OK(gpu_fa_off->ops->read(gpu_fa_off, dout, og, nq * 4));
        double e0 = rel_err(og, oc, nq), tol0 = kv_type == BRISK_KV_F32 ? 1e-5 : 1e-4;
        if (!(e0 <= tol0))
            fprintf(stderr, "  prefill attention (FA=0) kv %d heads %d/%d hd %d bs %d n %d pos0 %d: %.2e\n", kv_type,
                    n_head, n_head_kv, hd, bs, n, pos[0], e0);
        CHECK(e0 <= tol0);
    }
    gpu->ops->release(gpu, dkc); gpu->ops->release(gpu, dvc); gpu->ops->release(gpu, dq);
    gpu->ops->release(gpu, dk); gpu->ops->release(gpu, dv); gpu->ops->release(gpu, dout);
    for (int s = 0; s < n_seq; s++) free(tab[s]);
    free(tab); free(kc); free(vc); free(slot); free(tables); free(q); free(k); free(v); free(oc); free(og);
}

static void test_attention_prefill(void) {
    /* a second backend with the switch read at creation (the environment is left as it was) */
    char *saved = list_add("BRISK_CUDA_DISABLE", "fa");
    if (bk_cuda_backend_new(0, &gpu_fa_off) != BRISK_OK) gpu_fa_off = NULL;
    list_restore("BRISK_CUDA_DISABLE", saved);
    saved = list_add("BRISK_CUDA_DISABLE", "attn_wgmma");
    if (bk_cuda_backend_new(0, &gpu_fw_off) != BRISK_OK) gpu_fw_off = NULL;
    list_restore("BRISK_CUDA_DISABLE", saved);
    static int32_t pos[1600];
    static int seq[1600];
    static const int hds[] = {64, 128, 256};
    for (int kt = BRISK_KV_F32; kt <= BRISK_KV_Q4_0H; kt++)
        for (int h = 0; h < 3; h++) {
            int hd = hds[h];
            /* a prompt's first chunk, one sequence, GQA 4 */
            for (int i = 0; i < 77; i++) { pos[i] = i; seq[i] = 0; }
            check_prefill(kt, 8, 2, hd, 16, 77, pos, seq);
            /* its second chunk: 300 positions already in the cache, no GQA */
            for (int i = 0; i < 200; i++) { pos[i] = 300 + i; seq[i] = 0; }
            check_prefill(kt, 4, 4, hd, 16, 200, pos, seq);
            /* two sequences one after the other (the second with a prefix of 40), GQA 8 */
            for (int i = 0; i < 300; i++) { seq[i] = i >= 150; pos[i] = i < 150 ? i : 40 + i - 150; }
            check_prefill(kt, 16, 2, hd, 16, 300, pos, seq);
            /* two sequences interleaved entry by entry, GQA 4 */
            for (int i = 0; i < 200; i++) { seq[i] = i % 2; pos[i] = (i % 2 ? 500 : 0) + i / 2; }
            check_prefill(kt, 8, 2, hd, 16, 200, pos, seq);
        }
    /* GQA 3 and 6 (2 heads a block), 7-token pages, positions out of order within a sequence */
    for (int i = 0; i < 90; i++) { pos[i] = 30 + (i * 37) % 90; seq[i] = 0; }
    check_prefill(BRISK_KV_F16, 6, 2, 128, 7, 90, pos, seq);
    check_prefill(BRISK_KV_F32, 12, 2, 64, 7, 90, pos, seq);
    /* three sequences in runs (one appears twice), q8_0 and q4_0 */
    for (int i = 0; i < 120; i++) { seq[i] = i < 30 ? 0 : i < 50 ? 2 : i < 100 ? 1 : 0; pos[i] = 20 * seq[i] + i; }
    check_prefill(BRISK_KV_Q8_0, 8, 2, 128, 16, 120, pos, seq);
    check_prefill(BRISK_KV_Q4_0, 8, 2, 128, 16, 120, pos, seq);
    /* Qwen3-8B's shape (32/8 heads of 128): 65 and 512 entries deep in a prompt, f16, q8_0, q4_0 and q4_0h */
    for (int kt = BRISK_KV_F16; kt <= BRISK_KV_Q4_0H; kt++) {
        for (int i = 0; i < 65; i++) { pos[i] = 3000 + i; seq[i] = 0; }
        check_prefill(kt, 32, 8, 128, 16, 65, pos, seq);
        for (int i = 0; i < 512; i++) { pos[i] = 1000 + i; seq[i] = 0; }
        check_prefill(kt, 32, 8, 128, 16, 512, pos, seq);
    }
    /* head dim 64 past 6,144 keys: the two-m-tile instance; few entries against a long prefix: the
     * key range split over blocks and merged (fa_plan: 4-6 splits here, the second sequence's range
     * shorter than the first's); every cache type */
    for (int kt = BRISK_KV_F16; kt <= BRISK_KV_Q4_0H; kt++) {
        for (int i = 0; i < 100; i++) { pos[i] = 6200 + i; seq[i] = 0; }
        check_prefill(kt, 8, 2, 64, 16, 100, pos, seq);
        for (int i = 0; i < 80; i++) { seq[i] = i >= 50; pos[i] = i < 50 ? 5000 + i : 2100 + i; }
        check_prefill(kt, 32, 8, 128, 16, 80, pos, seq);
        for (int i = 0; i < 70; i++) { pos[i] = 4500 + i; seq[i] = 0; }
        check_prefill(kt, 24, 4, 256, 16, 70, pos, seq);
    }
    /* a chunk after 65,600 cached positions (a new turn deep in a conversation): the key range split,
     * head dims 128 (f16) and 256 (q8_0) */
    for (int i = 0; i < 80; i++) { pos[i] = 65600 + i; seq[i] = 0; }
    check_prefill(BRISK_KV_F16, 8, 2, 128, 16, 80, pos, seq);
    check_prefill(BRISK_KV_Q8_0, 4, 1, 256, 16, 80, pos, seq);
    /* a prompt chunk of 1,600 entries on the 8b's heads: enough blocks for the two-m-tile instance
     * unsplit (fa_plan: 400 blocks) */
    for (int i = 0; i < 1600; i++) { pos[i] = i; seq[i] = 0; }
    check_prefill(BRISK_KV_F16, 32, 8, 128, 16, 1600, pos, seq);
    if (gpu_fa_off) gpu_fa_off->ops->free(gpu_fa_off);
    if (gpu_fw_off) gpu_fw_off->ops->free(gpu_fw_off);
    gpu_fa_off = gpu_fw_off = NULL;
}

#include "cuda/ops_iq.c"

int main(int argc, char **argv) {
    int nd = bk_cuda_device_count();
    if (nd == 0) { /* each case listed as skipped, the backends never made */
        static const test_case none[] = {{"all", NULL}};
        test_skip_all(0, "no CUDA device (or a build without CUDA)");
        return test_main(none, 1, argc, argv);
    }
    /* the end-to-end cases run through the streamed product on narrow rows too; the CLI checks of
     * tests/cuda/run.sh keep the defaults */
    setenv("BRISK_CUDA_MMVS_MIN_IN", "0", 0); /* the streamed product on every width (default: from 2048) */
    if (bk_cpu_backend_new(0, &cpu) != BRISK_OK || bk_cuda_backend_new(0, &gpu) != BRISK_OK) {
        fprintf(stderr, "backend: %s\n", brisk_last_error());
        return 1;
    }
    static const test_case cases[] = {
        {"matmul", test_matmul},         {"matmul_mmq", test_matmul_mmq}, {"matmul_mmqh", test_matmul_mmqh},     {"matmul_multi", test_matmul_multi}, {"matmul_stream", test_matmul_stream}, {"matmul_float_stream", test_matmul_float_stream}, {"get_rows", test_get_rows},
        {"rms_norm", test_rms_norm},     {"rope", test_rope},
        {"qk_norm_rope", test_qk_norm_rope}, {"matmul_swiglu", test_matmul_swiglu},                 {"attention", test_attention}, {"attention_kv_fused", test_attention_kv_fused}, {"attention_depth", test_attention_depth}, {"attention_warp", test_attention_warp},
        {"elementwise", test_elementwise}, {"moe_route", test_moe_route},   {"moe_ffn", test_moe_ffn}, {"moe_ffn_shared", test_moe_ffn_shared}, {"moe_ffn_mmq", test_moe_ffn_mmq}, {"moe_ffn_ep", test_moe_ffn_ep}, {"moe_ffn_table", test_moe_ffn_table},
        {"ssm", test_ssm},               {"sigmoid_mul", test_sigmoid_mul},   {"end_to_end", test_end_to_end},
        {"end_to_end_models", test_end_to_end_models},
        {"matmul_cublas", test_matmul_cublas},
        {"attention_prefill", test_attention_prefill},
        {"get_rows_iq", test_get_rows_iq}, {"matmul_iq", test_matmul_iq},
        {"matmul_iq_cublas", test_matmul_iq_cublas}, {"moe_ffn_iq", test_moe_ffn_iq},
    };
    int rc = test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
    cpu->ops->free(cpu);
    gpu->ops->free(gpu);
    return rc;
}
