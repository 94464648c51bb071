/* test_cpu_dot.c — the CPU dot kernels: every ISA variant against a double
 * precision reference on dequantized data, against the portable kernels,
 * and against ggml's own CPU vec_dot/from_float (dlopen of
 * libggml-cpu-haswell.so from $LLAMACPP_LIBDIR; BRISK_NO_LLAMACPP=1 skips).
 *
 * Tolerance: |ours - ref| <= 1e-5 * (sum_i |w_i x_i|) + 1e-6 (relative to the
 * magnitude of the products, so cancellation in the sum cannot blow it up). */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_dot.h"
#include "backend/cpu/cpu_pgemm.h"
#include "backend/cpu/cpu_repack.h"
#include "brisk.h"
#include "quant/quant.h"
#include "test.h"

static uint64_t rng_state = 0x2545F4914F6CDD1DULL;
static uint32_t rnd_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rnd_unit(void) { return (float)(rnd_u32() & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f; }

static const uint32_t weight_types[] = {QT_F32,  QT_F16,  QT_BF16, QT_Q4_0,   QT_Q4_1,   QT_Q5_0,
                                        QT_Q5_1, QT_Q8_0, QT_Q2_K, QT_Q3_K,   QT_Q4_K,   QT_Q5_K,
                                        QT_Q6_K, QT_IQ4_NL, QT_IQ4_XS, QT_MXFP4, QT_IQ2_XXS, QT_IQ2_XS,
                                        QT_IQ2_S, QT_IQ3_XXS, QT_IQ3_S, QT_IQ1_S, QT_IQ1_M, QT_TQ1_0,
                                        QT_TQ2_0, QT_NVFP4, QT_Q1_0, QT_Q2_0};
#define N_WT (int)(sizeof weight_types / sizeof weight_types[0])

/* Random weight blocks: random bytes with small finite scale fields. */
static void fill_weights(uint32_t t, uint8_t *buf, int64_t n) {
    const quant_traits *tr = quant_get_traits(t);
    const int64_t nb = n / tr->block_elems;
    for (int64_t i = 0; i < nb * tr->block_bytes; i++) buf[i] = (uint8_t)rnd_u32();
    if (t == QT_F32 || t == QT_F16 || t == QT_BF16) {
        for (int64_t i = 0; i < n; i++) {
            float v = rnd_unit();
            if (t == QT_F32) memcpy(buf + 4 * i, &v, 4);
            else {
                uint16_t h = t == QT_F16 ? quant_f32_to_f16(v) : quant_f32_to_bf16(v);
                memcpy(buf + 2 * i, &h, 2);
            }
        }
        return;
    }
    int off[2] = {-1, -1};
    switch (t) {
    case QT_Q4_0: case QT_Q5_0: case QT_Q8_0: case QT_IQ4_NL: case QT_IQ4_XS: off[0] = 0; break;
    case QT_Q4_1: case QT_Q5_1: case QT_Q4_K: case QT_Q5_K: off[0] = 0; off[1] = 2; break;
    case QT_Q2_K: off[0] = 80; off[1] = 82; break;
    case QT_Q3_K: off[0] = 108; break;
    case QT_Q6_K: off[0] = 208; break;
    case QT_IQ2_XXS: case QT_IQ2_XS: case QT_IQ2_S: case QT_IQ3_XXS: case QT_IQ3_S: case QT_IQ1_S:
    case QT_Q1_0: case QT_Q2_0: off[0] = 0; break;
    case QT_TQ1_0: off[0] = 52; break;
    case QT_TQ2_0: off[0] = 64; break;
    default: break;
    }
    for (int64_t i = 0; i < nb; i++) {
        uint8_t *b = buf + i * tr->block_bytes;
        for (int k = 0; k < 2; k++) {
            if (off[k] < 0) continue;
            uint16_t h = quant_f32_to_f16(rnd_unit() * 0.05f);
            memcpy(b + off[k], &h, 2);
        }
        if (t == QT_IQ1_M) { /* the f16 scale sits in the top nibbles of the 4 scale words */
            uint16_t h = quant_f32_to_f16(rnd_unit() * 0.05f);
            for (int w = 0; w < 4; w++)
                b[48 + 2 * w + 1] = (uint8_t)((b[48 + 2 * w + 1] & 15) | (((h >> 4 * w) & 15) << 4));
        }
        if (t == QT_Q8_0) /* q8_0 weights never hold -128 */
            for (int j = 2; j < 34; j++)
                if (b[j] == 0x80) b[j] = 0x81;
        if (t == QT_MXFP4) b[0] = (uint8_t)(118 + rnd_u32() % 16);
    }
}

typedef struct {
    int64_t n;
    int nx;
    uint32_t wt, xt;
    size_t x_stride;
    uint8_t *w, *x;
    float *wf, *xf; /* dequantized */
} dot_case;

static void case_free(dot_case *c) {
    free(c->w);
    free(c->x);
    free(c->wf);
    free(c->xf);
}

static dot_case case_make(uint32_t wt, int64_t n, int nx) {
    dot_case c = {n, nx, wt, quant_get_traits(wt)->vec_dot_type, 0, 0, 0, 0, 0};
    c.w = malloc(quant_row_size(wt, n));
    c.x_stride = quant_row_size(c.xt, n) + 64; /* a stride wider than the row */
    c.x = malloc(c.x_stride * (size_t)nx);
    c.wf = malloc(sizeof(float) * (size_t)n);
    c.xf = malloc(sizeof(float) * (size_t)n * (size_t)nx);
    fill_weights(wt, c.w, n);
    CHECK_OK(quant_dequantize(wt, c.w, c.wf, n));
    cpu_from_float_fn ff = cpu_get_from_float(c.xt);
    CHECK(ff != NULL);
    float *tmp = malloc(sizeof(float) * (size_t)n);
    for (int j = 0; j < nx; j++) {
        for (int64_t i = 0; i < n; i++) tmp[i] = rnd_unit();
        ff(tmp, c.x + (size_t)j * c.x_stride, n);
        CHECK_OK(quant_dequantize(c.xt, c.x + (size_t)j * c.x_stride, c.xf + (size_t)j * n, n));
    }
    free(tmp);
    return c;
}

/* Exact-ish reference and the tolerance scale for activation row j. */
static void reference(const dot_case *c, int j, double *ref, double *mag) {
    double s = 0, m = 0;
    for (int64_t i = 0; i < c->n; i++) {
        double p = (double)c->wf[i] * c->xf[(size_t)j * c->n + i];
        s += p;
        m += fabs(p);
    }
    if (c->xt == QT_Q8_1) {
        /* Q8_1 carries s = f16(d*Σq); the kernels (like ggml) use that rounded
         * sum for the weight minimum m, so the reference does too. */
        const blk_q8_1 *xb = (const blk_q8_1 *)(c->x + (size_t)j * c->x_stride);
        const int bb = quant_get_traits(c->wt)->block_bytes;
        for (int64_t b = 0; b < c->n / 32; b++) {
            uint16_t mh;
            memcpy(&mh, c->w + b * bb + 2, 2);
            int sq = 0;
            for (int i = 0; i < 32; i++) sq += xb[b].qs[i];
            const double dx = quant_f16_to_f32(xb[b].d);
            s += quant_f16_to_f32(mh) * ((double)quant_f16_to_f32(xb[b].s) - dx * sq);
        }
    }
    *ref = s;
    *mag = m;
}

static int check_against_ref(const dot_case *c, const float *s, const char *what) {
    int bad = 0;
    for (int j = 0; j < c->nx; j++) {
        double ref, mag;
        reference(c, j, &ref, &mag);
        if (!(fabs(s[j] - ref) <= 1e-5 * mag + 1e-6)) {
            if (!bad)
                fprintf(stderr, "  %s %s n=%lld nx=%d row %d: %.9g vs ref %.9g (mag %g)\n", what,
                        quant_type_name(c->wt), (long long)c->n, c->nx, j, s[j], ref, mag);
            bad++;
        }
    }
    return bad;
}

static void test_isa(void) {
    cpu_dot_init();
    printf("  detected ISA: %s\n", cpu_isa_name(cpu_dot_isa()));
    CHECK(cpu_get_vec_dot(QT_Q4_K) != NULL);
    CHECK(cpu_get_vec_dot(QT_Q8_K) == NULL);
    CHECK(cpu_get_vec_dot(4) == NULL);
    CHECK(cpu_get_from_float(QT_Q8_K) != NULL);
    CHECK(cpu_get_from_float(QT_Q4_K) == NULL);
    CHECK(!strcmp(cpu_isa_name(CPU_ISA_AVX512), "avx512"));
}

/* Every ISA the CPU runs, every weight type, nx in {1,3,4,7,32}, odd
 * block counts: against the double reference and against portable. */
static void test_all_isas(void) {
    cpu_dot_init();
    static const int nxs[] = {1, 3, 4, 7, 32};
    for (int isa = CPU_ISA_PORTABLE; isa <= (int)cpu_dot_isa(); isa++) {
        for (int k = 0; k < N_WT; k++) {
            const uint32_t t = weight_types[k];
            const int be = quant_get_traits(t)->block_elems;
            const int64_t ns[] = {be == 1 ? 4096 + 7 : (int64_t)(be < 256 ? be * 33 : 256 * 5),
                                  be == 1 ? 16 : (int64_t)be};
            for (int ni = 0; ni < 2; ni++) {
                for (size_t q = 0; q < sizeof nxs / sizeof nxs[0]; q++) {
                    dot_case c = case_make(t, ns[ni], nxs[q]);
                    float s[32], sp[32];
                    cpu_vec_dot_fn f = cpu_get_vec_dot_isa(t, (cpu_isa)isa);
                    cpu_vec_dot_fn fp = cpu_get_vec_dot_isa(t, CPU_ISA_PORTABLE);
                    CHECK(f && fp);
                    if (f && fp) {
                        f(c.n, c.w, c.x, c.x_stride, c.nx, s);
                        fp(c.n, c.w, c.x, c.x_stride, c.nx, sp);
                        CHECK(check_against_ref(&c, s, cpu_isa_name((cpu_isa)isa)) == 0);
                        /* a row's result does not depend on its neighbours in the
                         * batch (a batch may sum in another order than one row, as
                         * llama.cpp's tinyBLAS does, so compare batches of 2) */
                        for (int j = 0; c.nx > 1 && j < c.nx; j++) {
                            float two[2];
                            f(c.n, c.w, c.x + (size_t)j * c.x_stride, 0, 2, two);
                            CHECK(!memcmp(&two[0], &s[j], 4) && !memcmp(&two[1], &s[j], 4));
                        }
                    }
                    case_free(&c);
                }
            }
        }
    }
}

/* The multi-row kernels (cpu_get_gemm, and each ISA's fast one) against the
 * same ISA's per-row vec_dot, bitwise, for every shape of tile the matmul
 * hands them. */
static void test_gemm_bitwise(void) {
    cpu_dot_init();
    static const int nws[] = {1, 2, 3, 4, 5, 16}, nxs[] = {1, 2, 3, 4, 5, 32};
    for (int isa = CPU_ISA_PORTABLE; isa <= (int)cpu_dot_isa(); isa++) {
        for (int k = 0; k < N_WT; k++) {
            const uint32_t t = weight_types[k];
            const quant_traits *tr = quant_get_traits(t);
            const int be = tr->block_elems;
            const int64_t ns[] = {be == 1 ? 64 * 16 : (int64_t)(be < 256 ? be * 33 : 256 * 5),
                                  be == 1 ? 4096 + 16 + 7 : (int64_t)be};
            cpu_gemm_fn g = isa == (int)cpu_dot_isa() ? cpu_get_gemm(t) : cpu_get_gemm_isa(t, (cpu_isa)isa);
            cpu_vec_dot_fn f = cpu_get_vec_dot_isa(t, (cpu_isa)isa);
            if (!g) continue;
            CHECK(f != NULL);
            int bad = 0;
            for (int ni = 0; ni < 2; ni++) {
                const int64_t n = ns[ni];
                const size_t ws = quant_row_size(t, n) + 32;
                uint8_t *w = malloc(ws * 16);
                for (int i = 0; i < 16; i++) fill_weights(t, w + (size_t)i * ws, n);
                dot_case c = case_make(t, n, 32);
                float *s = malloc(sizeof(float) * 16 * 40), *ref = malloc(sizeof(float) * 32);
                for (size_t a = 0; a < sizeof nws / sizeof nws[0]; a++) {
                    for (size_t b = 0; b < sizeof nxs / sizeof nxs[0]; b++) {
                        const int nw = nws[a], nx = nxs[b];
                        g(n, w, ws, nw, c.x, c.x_stride, nx, s, 40);
                        for (int i = 0; i < nw; i++) {
                            f(n, w + (size_t)i * ws, c.x, c.x_stride, nx, ref);
                            if (memcmp(ref, s + (size_t)i * 40, sizeof(float) * (size_t)nx) && !bad++)
                                fprintf(stderr, "  gemm %s %s n=%lld nw=%d nx=%d row %d differs\n",
                                        cpu_isa_name((cpu_isa)isa), tr->name, (long long)n, nw, nx, i);
                        }
                    }
                }
                free(s);
                free(ref);
                free(w);
                case_free(&c);
            }
            CHECK(bad == 0);
            if (cpu_get_gemm_isa(t, (cpu_isa)isa))
                printf("  %-7s %s multi-row kernel: %s\n", tr->name, cpu_isa_name((cpu_isa)isa), bad ? "NOT bitwise" : "bitwise");
        }
    }
}

/* ---- ggml parity ---- */

/* Mirrors struct ggml_type_traits_cpu from ggml-cpu.h (node-llama-cpp 3.21.1). */
typedef void (*ggml_vec_dot_fn)(int n, float *s, size_t bs, const void *x, size_t bx, const void *y, size_t by,
                                int nrc);
typedef struct {
    void (*from_float)(const float *x, void *y, int64_t k);
    ggml_vec_dot_fn vec_dot;
    int vec_dot_type;
    int64_t nrows;
} ggml_cpu_traits_mirror;
typedef const ggml_cpu_traits_mirror *(*get_cpu_traits_fn)(int type);

/* ggml's CPU traits from libggml-cpu-<variant>.so: "zen4" (AVX-512 VNNI/BF16,
 * the variant llama.cpp loads on this class of machine) when brisk runs its
 * AVX-512 kernels, else "haswell" (AVX2), else "x64". */
static get_cpu_traits_fn ggml_cpu(bool *skip) {
    static get_cpu_traits_fn fn;
    int off = test_env_switch("BRISK_NO_LLAMACPP");
    *skip = off != 0;
    if (off) {
        if (off > 0) test_skip(0, "BRISK_NO_LLAMACPP=1");
        return NULL;
    }
    if (fn) return fn;
    const char *dir = getenv("LLAMACPP_LIBDIR");
    char path[1024];
    snprintf(path, sizeof path, "%s/libggml-base.so", dir ? dir : ".");
    void *base = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    void *cpu = NULL;
    cpu_dot_init();
    static const char *variants[] = {"zen4", "haswell", "x64"};
    for (int i = cpu_dot_isa() == CPU_ISA_AVX512 ? 0 : 1; base && !cpu && i < 3; i++) {
        snprintf(path, sizeof path, "%s/libggml-cpu-%s.so", dir ? dir : ".", variants[i]);
        cpu = dlopen(path, RTLD_NOW | RTLD_LOCAL);
        if (cpu) printf("  ggml CPU variant: %s\n", variants[i]);
    }
    if (!cpu) {
        fprintf(stderr, "  cannot load ggml CPU library from LLAMACPP_LIBDIR=%s (%s); "
                        "BRISK_NO_LLAMACPP=1 skips\n", dir ? dir : "(unset)", dlerror());
        return NULL;
    }
    void (*init)(void) = (void (*)(void))dlsym(cpu, "ggml_cpu_init");
    fn = (get_cpu_traits_fn)dlsym(cpu, "ggml_get_type_traits_cpu");
    if (init) init();
    if (!fn) fprintf(stderr, "  ggml_get_type_traits_cpu missing\n");
    return fn;
}

static void test_ggml_from_float(void) {
    bool skip;
    get_cpu_traits_fn gt = ggml_cpu(&skip);
    if (skip) return;
    CHECK(gt != NULL);
    if (!gt) return;
    static const uint32_t types[] = {QT_F16, QT_BF16, QT_Q8_0, QT_Q8_1, QT_Q8_K};
    enum { N = 4096 };
    static float x[N];
    static uint8_t ours[N * 4], theirs[N * 4];
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const ggml_cpu_traits_mirror *g = gt((int)types[k]);
        CHECK(g && g->from_float);
        if (!g || !g->from_float) continue;
        for (int i = 0; i < N; i++) x[i] = rnd_unit() * ((i & 255) == 3 ? 10 : 1);
        for (int i = 0; i < 32; i++) x[i] = (float)(i % 5) * 0.5f - 1.0f; /* exact .5 ties */
        const size_t bytes = quant_row_size(types[k], N);
        cpu_get_from_float(types[k])(x, ours, N);
        g->from_float(x, theirs, N);
        size_t bad = 0, first = 0;
        for (size_t i = 0; i < bytes; i++)
            if (ours[i] != theirs[i] && !bad++) first = i;
        if (bad)
            fprintf(stderr, "  from_float %s: %zu bytes differ (first %zu)\n", quant_type_name(types[k]), bad, first);
        CHECK(bad == 0);
    }
}

/* One decode step (nx = 1) is ggml's vec_dot: with the AVX-512 kernels the
 * result must be bitwise ggml's (zen4 build); other ISAs only within the
 * tolerance. Several sizes, so that odd block counts and tails are covered. */
static void test_ggml_vec_dot(void) {
    bool skip;
    get_cpu_traits_fn gt = ggml_cpu(&skip);
    if (skip) return;
    CHECK(gt != NULL);
    if (!gt) return;
    cpu_dot_init();
    for (int k = 0; k < N_WT; k++) {
        const uint32_t t = weight_types[k];
        /* bitwise only where brisk has an AVX-512 kernel modelled on ggml's; the
         * portable kernels (the i-quants, TQ, NVFP4, Q1_0/Q2_0) sum in another order */
        const bool exact = cpu_dot_isa() == CPU_ISA_AVX512 &&
                           cpu_get_vec_dot_isa(t, CPU_ISA_AVX512) != cpu_get_vec_dot_isa(t, CPU_ISA_PORTABLE);
        const ggml_cpu_traits_mirror *g = gt((int)t);
        CHECK(g && g->vec_dot);
        if (!g || !g->vec_dot) continue;
        CHECK(g->vec_dot_type == (int)quant_get_traits(t)->vec_dot_type);
        const int be = quant_get_traits(t)->block_elems;
        const int64_t ns[] = {256 * 16, be == 1 ? 64 * 5 + 16 : 256 * 3, be == 1 ? 4096 + 13 : (be < 256 ? (int64_t)be * 33 : 256 * 7)};
        int n_diff = 0, n_all = 0;
        for (int ni = 0; ni < 3; ni++) {
            for (int rep = 0; rep < 8; rep++) {
                dot_case c = case_make(t, ns[ni], 4);
                float s[4];
                cpu_get_vec_dot(t)(c.n, c.w, c.x, c.x_stride, c.nx, s);
                for (int j = 0; j < c.nx; j++) {
                    float ref, one;
                    double dref, mag;
                    g->vec_dot((int)c.n, &ref, 0, c.w, 0, c.x + (size_t)j * c.x_stride, 0, 1);
                    cpu_get_vec_dot(t)(c.n, c.w, c.x + (size_t)j * c.x_stride, c.x_stride, 1, &one);
                    reference(&c, j, &dref, &mag);
                    n_all++;
                    if (memcmp(&one, &ref, 4) && !n_diff++)
                        printf("  %s n=%lld: ours %.9g ggml %.9g\n", quant_type_name(t), (long long)c.n, one, ref);
                    if (!(fabs(s[j] - ref) <= 1e-5 * mag + 1e-6)) {
                        fprintf(stderr, "  %s row %d: ours %.9g vs ggml %.9g (mag %g)\n", quant_type_name(t), j, s[j],
                                ref, mag);
                        CHECK(0);
                    }
                }
                case_free(&c);
            }
        }
        printf("  %-7s vec_dot vs ggml: %s (%d/%d differ)\n", quant_type_name(t), n_diff ? "NOT bitwise" : "bitwise",
               n_diff, n_all);
        if (exact) CHECK(n_diff == 0);
    }
}

/* The converter cpu_get_from_float(Q8_K) picks (AVX-512 on such CPUs) is
 * bitwise the reference quantizer, ties of |x| and zero blocks included. */
static void test_q8K_from_float(void) {
    enum { N = 256 * 6 };
    float x[N];
    blk_q8_K a[N / 256], b[N / 256];
    for (int rep = 0; rep < 20; rep++) {
        for (int i = 0; i < N; i++) x[i] = rnd_unit() * (float)(1 << (rep % 8));
        for (int i = 0; i < 256; i++) x[256 + i] = 0.0f;   /* a zero block */
        x[600] = 9.0f, x[700] = -9.0f, x[520] = -9.0f; /* ties: the first decides the sign */
        memset(a, 0x55, sizeof a);
        memset(b, 0x55, sizeof b);
        cpu_get_from_float(QT_Q8_K)(x, a, N);
        CHECK_OK(quant_quantize(QT_Q8_K, x, b, N));
        CHECK(!memcmp(a, b, sizeof a));
    }
}

/* The Q8_0 / Q8_1 converters cpu_get_from_float picks (AVX2 on such cores) against ggml's x86
 * semantics written out here (id = 127 / amax, lrintf, d and d * sum as f16), bitwise: exact .5
 * ties, a zero block, the largest |x| negative, and scales from tiny to large. */
static void test_q80_from_float(void) {
    enum { N = 32 * 24 };
    static float x[N];
    static blk_q8_1 a[N / 32], b[N / 32];
    for (int rep = 0; rep < 40; rep++) {
        const float sc = ldexpf(1.0f, rep % 20 - 12);
        for (int i = 0; i < N; i++) x[i] = rnd_unit() * sc;
        for (int i = 0; i < 32; i++) x[32 + i] = 0.0f;
        for (int i = 0; i < 32; i++) x[64 + i] = (float)(i % 5) * 0.5f - 1.0f; /* q = 127 * x: .5 ties */
        x[100] = -3.0f * sc;
        for (int t = 0; t < 2; t++) {
            memset(a, 0x55, sizeof a);
            memset(b, 0x55, sizeof b);
            cpu_get_from_float(t ? QT_Q8_1 : QT_Q8_0)(x, a, N);
            for (int k = 0; k < N / 32; k++) {
                float amax = 0.0f;
                for (int j = 0; j < 32; j++) amax = fabsf(x[32 * k + j]) > amax ? fabsf(x[32 * k + j]) : amax;
                const float d = amax / 127.f, id = amax != 0.0f ? 127.f / amax : 0.0f;
                int8_t *qs = t ? b[k].qs : ((blk_q8_0 *)b)[k].qs;
                int sum = 0;
                for (int j = 0; j < 32; j++) sum += qs[j] = (int8_t)lrintf(x[32 * k + j] * id);
                if (t) b[k].d = quant_f32_to_f16(d), b[k].s = quant_f32_to_f16(d * (float)sum);
                else ((blk_q8_0 *)b)[k].d = quant_f32_to_f16(d);
            }
            CHECK(!memcmp(a, b, quant_row_size(t ? QT_Q8_1 : QT_Q8_0, N)));
        }
    }
}

/* The packed prompt GEMM (cpu_pgemm.h) against the double reference on the
 * dequantized operands: a full and a partial panel of rows, full and partial
 * token tiles, the same tolerance as the dot kernels. */
static void test_pgemm(void) {
    static const uint32_t types[] = {QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_Q8_0, QT_Q4_0, QT_IQ4_XS, QT_BF16};
    const int64_t k = 768;
    const int R = CPU_PGEMM_ROWS + 5;
    int tested = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t wt = types[ti], vt = quant_get_traits(wt)->vec_dot_type;
        const int T = cpu_pgemm_tile_tokens(wt);
        if (!T) continue;
        tested++;
        const int N = 2 * T + 3;
        const size_t ws = quant_row_size(wt, k), xs = quant_row_size(vt, k);
        uint8_t *w = malloc(ws * R), *xq = malloc(xs * (size_t)N);
        float *wf = malloc(sizeof(float) * (size_t)k * R), *xf = malloc(sizeof(float) * (size_t)k * N);
        float *tmp = malloc(sizeof(float) * (size_t)k);
        for (int r = 0; r < R; r++) {
            fill_weights(wt, w + (size_t)r * ws, k);
            CHECK_OK(quant_dequantize(wt, w + (size_t)r * ws, wf + (size_t)r * k, k));
        }
        for (int t = 0; t < N; t++) {
            for (int64_t i = 0; i < k; i++) tmp[i] = rnd_unit();
            cpu_get_from_float(vt)(tmp, xq + (size_t)t * xs, k);
            CHECK_OK(quant_dequantize(vt, xq + (size_t)t * xs, xf + (size_t)t * k, k));
        }
        const int n_tiles = (N + T - 1) / T;
        const size_t tb = cpu_pgemm_act_bytes(wt, k);
        /* aligned_alloc wants a multiple of the alignment (the AVX2 tiles are 208 or 1,680 bytes...) */
        uint8_t *tiles = aligned_alloc(64, (tb * n_tiles + 63) / 64 * 64);
        uint8_t *panel = aligned_alloc(64, (cpu_pgemm_panel_bytes(wt, k) + 63) / 64 * 64);
        float *out = malloc(sizeof(float) * CPU_PGEMM_ROWS * T);
        for (int i = 0; i < n_tiles; i++)
            cpu_pgemm_pack_act(wt, k, xq + (size_t)i * T * xs, xs, N - i * T < T ? N - i * T : T, tiles + (size_t)i * tb);
        int bad = 0;
        for (int r0 = 0; r0 < R; r0 += CPU_PGEMM_ROWS) {
            const int nr = R - r0 < CPU_PGEMM_ROWS ? R - r0 : CPU_PGEMM_ROWS;
            cpu_pgemm_pack_panel(wt, k, w + (size_t)r0 * ws, ws, nr, panel);
            for (int i = 0; i < n_tiles; i++) {
                cpu_pgemm_tile(wt, k, panel, tiles + (size_t)i * tb, out);
                for (int t = i * T; t < N && t < (i + 1) * T; t++)
                    for (int r = r0; r < r0 + nr; r++) {
                        double ref = 0, mag = 0;
                        for (int64_t e = 0; e < k; e++) {
                            double p = (double)wf[(size_t)r * k + e] * xf[(size_t)t * k + e];
                            ref += p;
                            mag += fabs(p);
                        }
                        const float got = out[(t - i * T) * CPU_PGEMM_ROWS + (r - r0)];
                        if (!(fabs(got - ref) <= 1e-5 * mag + 1e-6)) {
                            if (!bad) fprintf(stderr, "  pgemm %s row %d token %d: %.9g vs ref %.9g (mag %g)\n",
                                              quant_type_name(wt), r, t, got, ref, mag);
                            bad++;
                        }
                    }
            }
        }
        CHECK(bad == 0);
        free(w), free(xq), free(wf), free(xf), free(tmp), free(tiles), free(panel), free(out);
    }
    printf("  packed GEMM: %d types tested\n", tested);
}

/* The repacked kernels (cpu_repack.h) against a double reference on the
 * dequantized data: odd block counts (the zero pad block; Q4_K: 3 super-
 * blocks), row counts that are not a multiple of the interleave (only whole
 * groups are repacked; fewer rows than a group: no copy), 1..5 tokens (the
 * 4-token tiles, Q4_K's 2-token ones, and their remainders). */
static void test_repack(void) {
    if (getenv("BRISK_CPU_REPACK")) return; /* the test runs the repacked types as they are by default */
    static const int64_t shapes[][2] = {{1024, 16}, {96, 13}, {3072, 24}, {32, 8}, {64, 9}, {160, 7},
                                        {256, 16}, {768, 35}, {512, 15}, {2048, 48}};
    /* Q4_K, Q6_K, IQ4_XS: whole super-blocks only (Q4_K 16 rows a group on AVX-512) */
    const uint32_t types[] = {QT_Q4_0, QT_Q8_0, QT_Q4_K, QT_Q6_K, QT_IQ4_XS};
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t wt = types[ti], xt = quant_get_traits(wt)->vec_dot_type;
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t n = shapes[si][0], rows = shapes[si][1];
            const size_t rb = cpu_repack_bytes(wt, n, rows);
            const int R = cpu_repack_rows(wt);
            /* AVX-512 VNNI: Q4_0, Q8_0, Q4_K; AVX2: Q4_0, Q4_K, Q6_K, IQ4_XS; portable cores: none */
            CHECK((R > 0) == (cpu_dot_isa() == CPU_ISA_AVX512 ? wt != QT_Q6_K && wt != QT_IQ4_XS
                              : cpu_dot_isa() == CPU_ISA_AVX2 && wt != QT_Q8_0));
            if (!R) {
                CHECK(rb == 0);
                continue;
            }
            if (n % quant_get_traits(wt)->block_elems) continue;
            CHECK(rows < R ? rb == 0 : rb > 0);
            if (!rb) continue;
            const size_t ws = quant_row_size(wt, n), xs = quant_row_size(xt, n);
            const size_t as = cpu_repack_act_bytes(wt, n);
            const int nx = 5;
            uint8_t *w = malloc(ws * (size_t)rows), *x = malloc(xs * nx);
            void *wr = aligned_alloc(64, (rb + 63) & ~(size_t)63), *xa = aligned_alloc(64, as * nx);
            float *wf = malloc(sizeof(float) * (size_t)(n * rows)), *xf = malloc(sizeof(float) * (size_t)(n * nx));
            float *tmp = malloc(sizeof(float) * (size_t)n), *s = malloc(sizeof(float) * (size_t)(rows * nx));
            fill_weights(wt, w, n * rows);
            CHECK_OK(quant_dequantize(wt, w, wf, n * rows));
            for (int j = 0; j < nx; j++) {
                for (int64_t i = 0; i < n; i++) tmp[i] = rnd_unit();
                cpu_get_from_float(xt)(tmp, x + (size_t)j * xs, n);
                CHECK_OK(quant_dequantize(xt, x + (size_t)j * xs, xf + (size_t)j * n, n));
            }
            cpu_repack_weights(wt, n, rows, w, ws, wr);
            for (int ntok = 1; ntok <= nx; ntok++) {
                for (int j = 0; j < ntok; j++) cpu_repack_act(wt, n, x + (size_t)j * xs, (char *)xa + (size_t)j * as);
                const int64_t ng = rows / R;
                /* two calls, groups [0, 1) and [1, ng): the group offset is the caller's */
                cpu_repack_gemm(wt, n, wr, 0, 1, xa, as, ntok, s, (size_t)nx);
                cpu_repack_gemm(wt, n, wr, 1, ng, xa, as, ntok, s + R * nx, (size_t)nx);
                int bad = 0;
                for (int64_t r = 0; r < ng * R; r++) {
                    for (int j = 0; j < ntok; j++) {
                        double ref = 0, mag = 0;
                        for (int64_t i = 0; i < n; i++) {
                            const double p = (double)wf[r * n + i] * xf[(size_t)j * n + i];
                            ref += p;
                            mag += fabs(p);
                        }
                        const float v = s[r * nx + j];
                        if (!(fabs(v - ref) <= 1e-5 * mag + 1e-6) && !bad++)
                            fprintf(stderr, "  repack %s n=%lld rows=%lld nx=%d row %lld tok %d: %.9g vs ref %.9g\n",
                                    quant_type_name(wt), (long long)n, (long long)rows, ntok, (long long)r, j, v, ref);
                    }
                }
                CHECK(bad == 0);
            }
            free(w), free(x), free(wr), free(xa), free(wf), free(xf), free(tmp), free(s);
        }
    }
    unsetenv("BRISK_CPU_REPACK");
}

/* The repacked kernels sum products in int16 before widening (AVX2: a Q4_0 block's eight
 * vpmaddubsw pairs, a Q4_K sub-block's eight, Q6_K's two of a chunk), which holds only for the largest quants against activations
 * of -128: every weight quant at its maximum (bytes 0xFF; Q8_0 -128; IQ4_XS the codebook's -127), Q6_K's
 * sub-block scales -128, every activation -128 (Q8_K's bsums to match), all scales 1. Random data
 * would not reach that bound. */
static void test_repack_extremes(void) {
    if (getenv("BRISK_CPU_REPACK")) return;
    const uint32_t types[] = {QT_Q4_0, QT_Q8_0, QT_Q4_K, QT_Q6_K, QT_IQ4_XS};
    const int64_t n = 512, rows = 16;
    int tested = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t wt = types[ti], xt = quant_get_traits(wt)->vec_dot_type;
        const size_t rb = cpu_repack_bytes(wt, n, rows);
        if (!rb) continue;
        const quant_traits *tr = quant_get_traits(wt), *xtr = quant_get_traits(xt);
        const size_t ws = quant_row_size(wt, n), xs = quant_row_size(xt, n), as = cpu_repack_act_bytes(wt, n);
        uint8_t *w = malloc(ws * rows), *x = malloc(xs);
        void *wr = aligned_alloc(64, (rb + 63) & ~(size_t)63), *xa = aligned_alloc(64, (as + 63) & ~(size_t)63);
        float *wf = malloc(sizeof(float) * n * rows), *xf = malloc(sizeof(float) * n), s[16];
        memset(w, 0xFF, ws * rows);
        /* -128, except where a kernel takes the weights' sign with vpsignb (IQ4_XS): there the
         * activations are the converters' own range, -127..127 (-(-128) is no int8) */
        const int8_t ymin = wt == QT_IQ4_XS ? -127 : -128;
        const uint16_t one = quant_f32_to_f16(1.0f);
        for (int64_t b = 0; b < n * rows / tr->block_elems; b++) {
            uint8_t *blk = w + (size_t)b * tr->block_bytes;
            if (wt == QT_Q6_K) {
                memcpy(blk + 208, &one, 2);
                memset(blk + 192, 0x80, 16); /* scales -128 */
            } else {
                memcpy(blk, &one, 2); /* d; Q4_K: dmin 0 next */
                if (wt == QT_Q4_K) memset(blk + 2, 0, 2);
                if (wt == QT_IQ4_XS) memset(blk + 2, 0, 134); /* scales -32, every value the codebook's -127 */
                if (wt == QT_Q8_0) memset(blk + 2, 0x80, 32); /* -128 */
            }
        }
        for (int64_t b = 0; b < n / xtr->block_elems; b++) {
            if (xt == QT_Q8_K) {
                blk_q8_K *y = (blk_q8_K *)(void *)x + b;
                y->d = 1.0f;
                memset(y->qs, ymin, sizeof y->qs);
                for (int i = 0; i < 16; i++) y->bsums[i] = (int16_t)(ymin * 16);
            } else {
                blk_q8_0 *y = (blk_q8_0 *)(void *)x + b;
                y->d = one;
                memset(y->qs, ymin, sizeof y->qs);
            }
        }
        CHECK_OK(quant_dequantize(wt, w, wf, n * rows));
        CHECK_OK(quant_dequantize(xt, x, xf, n));
        cpu_repack_weights(wt, n, rows, w, ws, wr);
        cpu_repack_act(wt, n, x, xa);
        const int R = cpu_repack_rows(wt);
        cpu_repack_gemm(wt, n, wr, 0, rows / R, xa, as, 1, s, 1);
        for (int64_t r = 0; r < rows / R * R; r++) {
            double ref = 0;
            for (int64_t i = 0; i < n; i++) ref += (double)wf[r * n + i] * xf[i];
            if (!(fabs(s[r] - ref) <= 1e-6 * fabs(ref) + 1e-3)) {
                fprintf(stderr, "  repack extremes %s row %lld: %.9g vs ref %.9g\n", quant_type_name(wt), (long long)r,
                        s[r], ref);
                CHECK(0);
                break;
            }
        }
        tested++;
        free(w), free(x), free(wr), free(xa), free(wf), free(xf);
    }
    printf("  %d repacked types at their extremes on %s\n", tested, cpu_isa_name(cpu_dot_isa()));
    CHECK(tested > 0 || cpu_dot_isa() == CPU_ISA_PORTABLE);
}

/* The repacked kernels that keep the plain kernel's float order (AVX2's Q6_K: ggml's 8 lanes,
 * each scaled and summed apart) against the single-row kernel, bitwise: random blocks, then
 * blocks at the extremes (quants 0 or 63, scales -128 or 127, activations -128 or 127, mixed
 * per block), row counts around the 8-row groups, 1..4 tokens. */
static void test_repack_bitwise(void) {
    if (getenv("BRISK_CPU_REPACK")) return;
    const uint32_t types[] = {QT_Q6_K};
    static const int64_t shapes[][2] = {{256, 8}, {512, 13}, {1024, 16}, {768, 21}, {3072, 24}, {2560, 35}};
    int tested = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t wt = types[ti], xt = quant_get_traits(wt)->vec_dot_type;
        if (!(cpu_dot_isa() == CPU_ISA_AVX2 && cpu_repack_rows(wt))) continue; /* AVX-512 cores: in repack_as_avx2's child */
        const quant_traits *tr = quant_get_traits(wt);
        cpu_vec_dot_fn f = cpu_get_vec_dot(wt);
        for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
            const int64_t n = shapes[si][0], rows = shapes[si][1];
            const int R = cpu_repack_rows(wt), nx = 4;
            const size_t rb = cpu_repack_bytes(wt, n, rows), ws = quant_row_size(wt, n), xs = quant_row_size(xt, n);
            const size_t as = cpu_repack_act_bytes(wt, n);
            CHECK(rb > 0);
            uint8_t *w = malloc(ws * (size_t)rows), *x = malloc(xs * nx);
            void *wr = aligned_alloc(64, (rb + 63) & ~(size_t)63), *xa = aligned_alloc(64, as * nx);
            float *tmp = malloc(sizeof(float) * (size_t)n), *s = malloc(sizeof(float) * (size_t)(rows * nx)), ref[4];
            for (int pass = 0; pass < 2; pass++) {
                fill_weights(wt, w, n * rows);
                for (int j = 0; j < nx; j++) {
                    for (int64_t i = 0; i < n; i++) tmp[i] = rnd_unit() * (1 + j);
                    cpu_get_from_float(xt)(tmp, x + (size_t)j * xs, n);
                }
                if (pass) { /* extremes: each block (and activation block) one of four kinds */
                    for (int64_t b = 0; b < n * rows / tr->block_elems; b++) {
                        blk_q6_K *q = (blk_q6_K *)(void *)(w + (size_t)b * tr->block_bytes);
                        const uint32_t k = rnd_u32();
                        if (k & 1) memset(q->ql, k & 2 ? 0xFF : 0, sizeof q->ql + sizeof q->qh);
                        if (k & 4) memset(q->scales, k & 8 ? 0x80 : 0x7F, sizeof q->scales);
                    }
                    for (int j = 0; j < nx; j++)
                        for (int64_t b = 0; b < n / 256; b++) {
                            blk_q8_K *y = (blk_q8_K *)(void *)(x + (size_t)j * xs) + b;
                            const uint32_t k = rnd_u32();
                            if (!(k & 1)) continue;
                            memset(y->qs, k & 2 ? 0x80 : 0x7F, sizeof y->qs);
                            for (int i = 0; i < 16; i++) y->bsums[i] = (int16_t)(16 * y->qs[0]);
                        }
                }
                cpu_repack_weights(wt, n, rows, w, ws, wr);
                for (int ntok = 1; ntok <= nx; ntok++) {
                    for (int j = 0; j < ntok; j++) cpu_repack_act(wt, n, x + (size_t)j * xs, (char *)xa + (size_t)j * as);
                    const int64_t ng = rows / R;
                    cpu_repack_gemm(wt, n, wr, 0, ng, xa, as, ntok, s, (size_t)nx);
                    int bad = 0;
                    for (int64_t r = 0; r < ng * R; r++) {
                        f(n, w + (size_t)r * ws, x, xs, ntok, ref);
                        if (memcmp(ref, s + r * nx, sizeof(float) * (size_t)ntok) && !bad++)
                            fprintf(stderr, "  repack bitwise %s n=%lld rows=%lld nx=%d pass %d row %lld: %.9g vs %.9g\n",
                                    tr->name, (long long)n, (long long)rows, ntok, pass, (long long)r, s[r * nx], ref[0]);
                    }
                    CHECK(bad == 0);
                    tested++;
                }
            }
            free(w), free(x), free(wr), free(xa), free(tmp), free(s);
        }
    }
    printf("  %d shape, data and token-count cases against the plain kernel on %s\n", tested, cpu_isa_name(cpu_dot_isa()));
}

/* A prompt's call (up to the backend's 32-token tile, and past it) against one call a token,
 * bitwise: on AVX2 each token's sums are its own whatever pass meets it (IQ4_XS's prompts decode
 * a super-block once for 8- and 4-token passes and their remainders). A second pass puts IQ4_XS
 * at its int16 extremes (codebook -127 or 113, scales -32 or 31, activations -128 or 127). */
static void test_repack_tokens(void) {
    if (getenv("BRISK_CPU_REPACK") || cpu_dot_isa() != CPU_ISA_AVX2) return;
    const uint32_t types[] = {QT_Q4_0, QT_Q4_K, QT_Q6_K, QT_IQ4_XS};
    const int64_t n = 768, rows = 16;
    const int nxs[] = {12, 31, 45};
    int tested = 0;
    for (size_t ti = 0; ti < sizeof types / sizeof types[0]; ti++) {
        const uint32_t wt = types[ti], xt = quant_get_traits(wt)->vec_dot_type;
        const quant_traits *tr = quant_get_traits(wt);
        const int R = cpu_repack_rows(wt), nmax = 45;
        const size_t rb = cpu_repack_bytes(wt, n, rows), ws = quant_row_size(wt, n), xs = quant_row_size(xt, n);
        const size_t as = cpu_repack_act_bytes(wt, n);
        CHECK(rb > 0 && R > 0);
        if (!rb || !R) continue;
        uint8_t *w = malloc(ws * (size_t)rows), *x = malloc(xs * nmax);
        void *wr = aligned_alloc(64, (rb + 63) & ~(size_t)63), *xa = aligned_alloc(64, as * nmax);
        float *tmp = malloc(sizeof(float) * (size_t)n), *s = malloc(sizeof(float) * (size_t)(rows * nmax)), one[16];
        for (int pass = 0; pass < (wt == QT_IQ4_XS ? 2 : 1); pass++) {
            fill_weights(wt, w, n * rows);
            for (int j = 0; j < nmax; j++) {
                for (int64_t i = 0; i < n; i++) tmp[i] = rnd_unit() * (1 + j % 5);
                cpu_get_from_float(xt)(tmp, x + (size_t)j * xs, n);
            }
            if (pass) {
                for (int64_t b = 0; b < n * rows / tr->block_elems; b++) {
                    blk_iq4_xs *q = (blk_iq4_xs *)(void *)(w + (size_t)b * tr->block_bytes);
                    const uint32_t k = rnd_u32();
                    memset(q->qs, k & 1 ? 0xFF : 0, sizeof q->qs);
                    memset(q->scales_l, k & 2 ? 0xFF : 0, sizeof q->scales_l);
                    q->scales_h = k & 2 ? 0xFFFF : 0;
                }
                for (int j = 0; j < nmax; j++)
                    for (int64_t b = 0; b < n / 256; b++) {
                        blk_q8_K *y = (blk_q8_K *)(void *)(x + (size_t)j * xs) + b;
                        memset(y->qs, rnd_u32() & 1 ? 0x80 : 0x7F, sizeof y->qs);
                        for (int i = 0; i < 16; i++) y->bsums[i] = (int16_t)(16 * y->qs[0]);
                    }
            }
            cpu_repack_weights(wt, n, rows, w, ws, wr);
            for (int j = 0; j < nmax; j++) cpu_repack_act(wt, n, x + (size_t)j * xs, (char *)xa + (size_t)j * as);
            for (size_t k = 0; k < sizeof nxs / sizeof nxs[0]; k++) {
                const int nx = nxs[k];
                cpu_repack_gemm(wt, n, wr, 0, rows / R, xa, as, nx, s, (size_t)nx);
                int bad = 0;
                for (int j = 0; j < nx; j++) {
                    cpu_repack_gemm(wt, n, wr, 0, rows / R, (const char *)xa + (size_t)j * as, as, 1, one, 1);
                    for (int64_t r = 0; r < rows; r++)
                        if (memcmp(&one[r], &s[r * nx + j], sizeof(float)) && !bad++)
                            fprintf(stderr, "  repack tokens %s pass %d nx=%d row %lld tok %d: %.9g vs one token %.9g\n",
                                    tr->name, pass, nx, (long long)r, j, s[r * nx + j], one[r]);
                }
                CHECK(bad == 0);
                tested++;
            }
        }
        free(w), free(x), free(wr), free(xa), free(tmp), free(s);
    }
    printf("  %d type, data and token-count cases against one token a call\n", tested);
}

/* The CPU backend's matmul with repacked copies against the same backend
 * reading the mapped rows (BRISK_CPU_REPACK=0): several matrices in one call
 * (row tiles straddle them; row counts not a multiple of 8, so the plain
 * kernels run the rows around the groups), one sharing the others' converted
 * input, 1..15 tokens, 1 and 2 threads; bitwise where the layout keeps the plain float order. */
static void test_repack_matmul(void) {
    if (!cpu_repack_rows(QT_Q4_0) || getenv("BRISK_CPU_REPACK")) return; /* types without a layout here: the map */
    enum { NW = 8, NMAX = 15 };
    /* Q4_K first: its 16-row groups are repacked only where a 16-row tile of the call holds a
     * whole group (the matrices' rows are tiled as one run), so it starts at row 0 and 48 */
    const int64_t n_in = 512, rows[NW] = {48, 21, 13, 37, 8, 64, 19, 11};
    const uint32_t types[NW] = {QT_Q4_K, QT_Q4_K, QT_Q4_0, QT_Q8_0, QT_Q4_0, QT_Q8_0, QT_Q6_K, QT_IQ4_XS};
    bk_weight w[NW];
    const bk_weight *wp[NW];
    float *y[2][NW], *x = malloc(sizeof(float) * n_in * NMAX);
    for (int64_t i = 0; i < n_in * NMAX; i++) x[i] = rnd_unit();
    for (int m = 0; m < NW; m++) {
        const size_t rb = quant_row_size(types[m], n_in);
        uint8_t *buf = malloc(rb * (size_t)rows[m]);
        fill_weights(types[m], buf, n_in * rows[m]);
        w[m] = (bk_weight){.name = "w", .type = types[m], .n_in = n_in, .n_out = rows[m], .row_bytes = rb, .host = buf};
        wp[m] = &w[m];
        for (int v = 0; v < 2; v++) y[v][m] = malloc(sizeof(float) * (size_t)(rows[m] * NMAX));
    }
    for (int nt = 1; nt <= 2; nt++) {
        bk_backend *be[2];
        setenv("BRISK_CPU_REPACK", "0", 1);
        CHECK_OK(bk_cpu_backend_new(nt, &be[0]));
        be[0]->ops->matmul(be[0], NW, wp, NULL, x, 1, y[0]); /* makes its (absent) copies with repacking off */
        unsetenv("BRISK_CPU_REPACK"); /* the default: the ISA's repacked types, the others the map */
        CHECK_OK(bk_cpu_backend_new(nt, &be[1]));
        for (int n = 1; n <= NMAX; n += 2) {
            for (int v = 0; v < 2; v++) be[v]->ops->matmul(be[v], NW, wp, NULL, x, n, y[v]);
            int bad = 0, differ = 0; /* some sums differ in the last bits: the repacked path ran */
            for (int m = 0; m < NW; m++) {
                /* AVX2's Q6_K layout keeps the plain kernel's float order: bitwise */
                const bool same_order = types[m] == QT_Q6_K && cpu_dot_isa() == CPU_ISA_AVX2;
                for (int64_t i = 0; i < rows[m] * n; i++) {
                    const float a = y[0][m][i], b = y[1][m][i];
                    differ += a != b;
                    if (!(same_order ? !memcmp(&a, &b, 4) : fabsf(a - b) <= 1e-4f * (fabsf(a) + 1.0f)) && !bad++)
                        fprintf(stderr, "  repack matmul threads %d n %d matrix %d out %lld: %.9g vs %.9g\n", nt, n, m,
                                (long long)i, b, a);
                }
            }
            CHECK(bad == 0);
            CHECK(differ > 0);
        }
        for (int v = 0; v < 2; v++) be[v]->ops->free(be[v]);
        unsetenv("BRISK_CPU_REPACK");
    }
    for (int m = 0; m < NW; m++) {
        free((void *)w[m].host);
        for (int v = 0; v < 2; v++) free(y[v][m]);
    }
    free(x);
}

/* MoE expert tensors through moe_ffn (cpu_moe.c): on an AVX2 core the backend repacks them (the
 * copies counted) and one-column products read the copies, near the mapped rows' run
 * (BRISK_CPU_REPACK=0) and not bitwise (the Q4_K copies' float order); a
 * backend told bk_cpu_expert_copies(false), the hot-expert cache's miss backend, makes none and
 * is bitwise the mapped rows' run. Other cores keep the mapped rows for experts: no copy. */
static void test_repack_moe(void) {
    if (getenv("BRISK_CPU_REPACK")) return;
    /* whole Q4_K super-blocks, two a row (one block's sums can come out bitwise equal in either
     * order), and whole 16-row groups; Q4_K down too: a Q6_K down's copy sums in the plain order,
     * and down's Q8_K input mostly absorbs gate's and up's last-bit differences */
    enum { NE = 4, K = 2, NMAX = 3, D = 512, F = 512 };
    const uint32_t types[3] = {QT_Q4_K, QT_Q4_K, QT_Q4_K}; /* gate, up, down */
    const int64_t n_in[3] = {D, D, F}, rows[3] = {F, F, D};
    bk_weight w[3];
    for (int m = 0; m < 3; m++) {
        const size_t rb = quant_row_size(types[m], n_in[m]);
        uint8_t *buf = malloc(rb * (size_t)(NE * rows[m]));
        fill_weights(types[m], buf, n_in[m] * NE * rows[m]);
        w[m] = (bk_weight){.name = "e", .type = types[m], .n_in = n_in[m], .n_out = NE * rows[m], .row_bytes = rb,
                           .host = buf, .n_expert = NE};
    }
    float *x = malloc(sizeof(float) * D * NMAX), wt[NMAX * K], *y[3];
    int32_t ids[NMAX * K];
    for (int i = 0; i < D * NMAX; i++) x[i] = rnd_unit();
    for (int i = 0; i < NMAX * K; i++) {
        ids[i] = (int32_t)(rnd_u32() % NE);
        if (i % K && ids[i] == ids[i - 1]) ids[i] = (ids[i] + 1) % NE; /* a token's K experts differ */
        wt[i] = 0.25f + 0.5f * (rnd_unit() + 1.0f) / 2.0f;
    }
    bk_backend *be[3];
    setenv("BRISK_CPU_REPACK", "0", 1);
    CHECK_OK(bk_cpu_backend_new(2, &be[0]));
    be[0]->ops->moe_ffn(be[0], &w[0], &w[1], &w[2], x, 1, ids, wt, K, (y[0] = malloc(sizeof(float) * D * NMAX)));
    unsetenv("BRISK_CPU_REPACK");
    CHECK_OK(bk_cpu_backend_new(2, &be[1]));
    CHECK_OK(bk_cpu_backend_new(2, &be[2]));
    bk_cpu_expert_copies(be[2], false);
    y[1] = malloc(sizeof(float) * D * NMAX);
    y[2] = malloc(sizeof(float) * D * NMAX);
    const bool avx2 = cpu_dot_isa() == CPU_ISA_AVX2;
    int differ = 0;
    for (int n = 1; n <= NMAX; n++) {
        for (int v = 0; v < 3; v++) be[v]->ops->moe_ffn(be[v], &w[0], &w[1], &w[2], x, n, ids, wt, K, y[v]);
        /* Bounded by the output's largest magnitude, not per element: the copies' float order moves
         * gate and up by ~1e-7, and where that crosses a rounding of down's Q8_K input, one quant
         * step moves the outputs by up to ~1e-3 of the largest (5e-4 seen); a wrong expert or group
         * moves them by its whole size. */
        int bad = 0;
        float mx = 0;
        for (int i = 0; i < D * n; i++) mx = fabsf(y[0][i]) > mx ? fabsf(y[0][i]) : mx;
        for (int i = 0; i < D * n; i++) {
            const float a = y[0][i], b = y[1][i];
            differ += a != b;
            if (!(fabsf(a - b) <= 2e-3f * mx) && !bad++)
                fprintf(stderr, "  repack moe n %d out %d: %.9g vs %.9g (largest %.9g)\n", n, i, b, a, mx);
        }
        CHECK(bad == 0);
        CHECK(!memcmp(y[0], y[2], sizeof(float) * D * (size_t)n));
    }
    CHECK(avx2 ? differ > 0 : differ == 0); /* the copies ran, or (no copies) the same kernels */
    if (avx2) CHECK(bk_cpu_weight_copy_bytes(be[1]) >= 3 * (size_t)NE * F * quant_row_size(QT_Q4_K, D));
    else CHECK(bk_cpu_weight_copy_bytes(be[1]) == 0);
    CHECK(bk_cpu_weight_copy_bytes(be[2]) == 0);
    for (int v = 0; v < 3; v++) {
        be[v]->ops->free(be[v]);
        free(y[v]);
    }
    for (int m = 0; m < 3; m++) free((void *)w[m].host);
    free(x);
}

/* On an AVX-512 core the AVX2 layout (cpu_repack_avx2.c) would go untested: the two repack cases
 * again in a child of this program under BRISK_CPU_ISA=avx2. */
static void test_repack_as_avx2(void) {
    if (cpu_dot_isa() != CPU_ISA_AVX512) {
        SKIP("the core is %s: the repack cases ran its own layouts", cpu_isa_name(cpu_dot_isa()));
    }
    char self[1024] = "", cmd[1200];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    CHECK(len > 0);
    if (len <= 0) return;
    snprintf(cmd, sizeof cmd, "BRISK_CPU_ISA=avx2 '%s' repack", self);
    CHECK(system(cmd) == 0);
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"isa", test_isa},
        {"all_isas", test_all_isas},
        {"gemm_bitwise", test_gemm_bitwise},
        {"pgemm", test_pgemm},
        {"repack", test_repack},
        {"repack_matmul", test_repack_matmul},
        {"repack_moe", test_repack_moe},
        {"repack_extremes", test_repack_extremes},
        {"repack_bitwise", test_repack_bitwise},
        {"repack_tokens", test_repack_tokens},
        {"repack_as_avx2", test_repack_as_avx2},
        {"q8K_from_float", test_q8K_from_float},
        {"q80_from_float", test_q80_from_float},
        {"ggml_from_float", test_ggml_from_float},
        {"ggml_vec_dot", test_ggml_vec_dot},
    };
    return test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
