/* test_quant.c — the type table, f16/bf16 conversions, round trips, and
 * bit-exact parity with ggml itself (dequantize = ggml's to_float,
 * quantize = ggml's from_float_ref), through dlopen of libggml-base.so
 * from $LLAMACPP_LIBDIR. Without the library the parity tests fail, unless
 * BRISK_NO_LLAMACPP=1 (then they are skipped). */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>

#include "brisk.h"
#include "quant/quant.h"
#include "test.h"

/* ---- a small deterministic RNG ---- */
static uint64_t rng_state = 0x9E3779B97F4A7C15ULL;
static uint32_t rnd_u32(void) {
    rng_state ^= rng_state << 13;
    rng_state ^= rng_state >> 7;
    rng_state ^= rng_state << 17;
    return (uint32_t)(rng_state >> 16);
}
static float rnd_unit(void) { return (float)(rnd_u32() & 0xFFFFFF) / 16777216.0f * 2.0f - 1.0f; }
/* Roughly normal, with the occasional outlier as real weights have. */
static float rnd_weight(void) {
    float v = rnd_unit() + rnd_unit() + rnd_unit();
    if ((rnd_u32() & 63) == 0) v *= 8;
    return v;
}

static const uint32_t all_types[] = {QT_F32,  QT_F16,  QT_Q4_0, QT_Q4_1, QT_Q5_0,   QT_Q5_1,   QT_Q8_0,
                                     QT_Q8_1, QT_Q2_K, QT_Q3_K, QT_Q4_K, QT_Q5_K,   QT_Q6_K,   QT_Q8_K,
                                     QT_IQ4_NL, QT_IQ4_XS, QT_BF16, QT_MXFP4, QT_IQ2_XXS, QT_IQ2_XS,
                                     QT_IQ2_S, QT_IQ3_XXS, QT_IQ3_S, QT_IQ1_S, QT_IQ1_M, QT_TQ1_0, QT_TQ2_0,
                                     QT_NVFP4, QT_Q1_0, QT_Q2_0};
#define N_TYPES (int)(sizeof all_types / sizeof all_types[0])

static void test_table(void) {
    static const struct { uint32_t t; const char *name; int be, bb; uint32_t vdt; } want[] = {
        {QT_F32, "f32", 1, 4, QT_F32},           {QT_F16, "f16", 1, 2, QT_F16},
        {QT_Q4_0, "q4_0", 32, 18, QT_Q8_0},      {QT_Q4_1, "q4_1", 32, 20, QT_Q8_1},
        {QT_Q5_0, "q5_0", 32, 22, QT_Q8_0},      {QT_Q5_1, "q5_1", 32, 24, QT_Q8_1},
        {QT_Q8_0, "q8_0", 32, 34, QT_Q8_0},      {QT_Q8_1, "q8_1", 32, 36, QT_Q8_1},
        {QT_Q2_K, "q2_K", 256, 84, QT_Q8_K},     {QT_Q3_K, "q3_K", 256, 110, QT_Q8_K},
        {QT_Q4_K, "q4_K", 256, 144, QT_Q8_K},    {QT_Q5_K, "q5_K", 256, 176, QT_Q8_K},
        {QT_Q6_K, "q6_K", 256, 210, QT_Q8_K},    {QT_Q8_K, "q8_K", 256, 292, QT_Q8_K},
        {QT_IQ4_NL, "iq4_nl", 32, 18, QT_Q8_0},  {QT_IQ4_XS, "iq4_xs", 256, 136, QT_Q8_K},
        {QT_BF16, "bf16", 1, 2, QT_BF16},        {QT_MXFP4, "mxfp4", 32, 17, QT_Q8_0},
        {QT_IQ2_XXS, "iq2_xxs", 256, 66, QT_Q8_K}, {QT_IQ2_XS, "iq2_xs", 256, 74, QT_Q8_K},
        {QT_IQ2_S, "iq2_s", 256, 82, QT_Q8_K},   {QT_IQ3_XXS, "iq3_xxs", 256, 98, QT_Q8_K},
        {QT_IQ3_S, "iq3_s", 256, 110, QT_Q8_K},  {QT_IQ1_S, "iq1_s", 256, 50, QT_Q8_K},
        {QT_IQ1_M, "iq1_m", 256, 56, QT_Q8_K},   {QT_TQ1_0, "tq1_0", 256, 54, QT_Q8_K},
        {QT_TQ2_0, "tq2_0", 256, 66, QT_Q8_K},   {QT_NVFP4, "nvfp4", 64, 36, QT_Q8_0},
        {QT_Q1_0, "q1_0", 128, 18, QT_Q8_0},     {QT_Q2_0, "q2_0", 64, 18, QT_Q8_0},
    };
    for (size_t i = 0; i < sizeof want / sizeof want[0]; i++) {
        const quant_traits *t = quant_get_traits(want[i].t);
        CHECK(t != NULL);
        if (!t) continue;
        CHECK(!strcmp(t->name, want[i].name));
        CHECK(t->block_elems == want[i].be);
        CHECK(t->block_bytes == want[i].bb);
        CHECK(t->vec_dot_type == want[i].vdt);
        CHECK(!strcmp(quant_type_name(want[i].t), want[i].name));
    }
    CHECK(quant_get_traits(4) == NULL);
    CHECK(quant_get_traits(1000) == NULL);
    CHECK(quant_get_traits(31) == NULL); /* ggml's removed Q4_0_4_4 */
    CHECK(!strcmp(quant_type_name(36), "?"));
    CHECK(quant_get_traits(43) == NULL);
    CHECK(quant_row_size(QT_Q4_K, 4096) == 16 * 144);
    CHECK(quant_row_size(QT_Q4_K, 100) == 0);
    CHECK(quant_row_size(QT_F16, 7) == 14);
}

static void test_errors(void) {
    float f[64] = {0};
    uint8_t b[512] = {0};
    CHECK(quant_dequantize(QT_Q4_0, b, f, 31) == BRISK_ERR_INVALID_ARG);
    CHECK(quant_dequantize(4, b, f, 32) == BRISK_ERR_UNSUPPORTED);
    CHECK(quant_quantize(4, f, b, 256) == BRISK_ERR_UNSUPPORTED);
    CHECK(quant_quantize(QT_Q4_K, f, b, 100) == BRISK_ERR_INVALID_ARG);
    CHECK(quant_quantize_rows(QT_Q6_K, f, b, 1, 32, NULL) == BRISK_ERR_INVALID_ARG);
    CHECK(quant_quantize(QT_Q8_0, f, b, 33) == BRISK_ERR_INVALID_ARG);
    CHECK(strlen(brisk_last_error()) > 0);
}

static uint32_t fbits(float f) {
    uint32_t u;
    memcpy(&u, &f, 4);
    return u;
}

static void test_f16(void) {
    CHECK(quant_f16_to_f32(0x3C00) == 1.0f);
    CHECK(quant_f16_to_f32(0xC000) == -2.0f);
    CHECK(quant_f16_to_f32(0x7BFF) == 65504.0f);
    CHECK(quant_f16_to_f32(0x0001) == 0x1p-24f); /* smallest subnormal */
    CHECK(quant_f16_to_f32(0x03FF) == 1023 * 0x1p-24f);
    CHECK(isinf(quant_f16_to_f32(0x7C00)) && quant_f16_to_f32(0xFC00) < 0);
    CHECK(isnan(quant_f16_to_f32(0x7E00)) && isnan(quant_f16_to_f32(0x7C01)));
    CHECK(fbits(quant_f16_to_f32(0x8000)) == 0x80000000u);
    CHECK(quant_f32_to_f16(1.0f) == 0x3C00);
    CHECK(quant_f32_to_f16(65504.0f) == 0x7BFF);
    CHECK(quant_f32_to_f16(65519.0f) == 0x7BFF);
    CHECK(quant_f32_to_f16(65520.0f) == 0x7C00);
    CHECK(quant_f32_to_f16(1e30f) == 0x7C00);
    CHECK(quant_f32_to_f16(-INFINITY) == 0xFC00);
    CHECK(quant_f32_to_f16(NAN) == 0x7E00);
    CHECK(quant_f32_to_f16(0x1p-24f) == 0x0001);
    CHECK(quant_f32_to_f16(0x1p-25f) == 0x0000);          /* tie -> even (0) */
    CHECK(quant_f32_to_f16(0x1.8p-24f) == 0x0002);        /* 1.5 ulp -> 2 */
    CHECK(quant_f32_to_f16(1.0f + 0x1p-11f) == 0x3C00);   /* tie -> even */
    CHECK(quant_f32_to_f16(1.0f + 0x3p-11f) == 0x3C02);   /* tie -> even (up) */
    CHECK(quant_f32_to_f16(-0.0f) == 0x8000);
    /* every finite half round-trips */
    int bad = 0;
    for (uint32_t h = 0; h < 65536; h++) {
        if ((h & 0x7C00) == 0x7C00) continue;
        if (quant_f32_to_f16(quant_f16_to_f32((uint16_t)h)) != h) bad++;
    }
    CHECK(bad == 0);
}

static void test_bf16(void) {
    CHECK(quant_f32_to_bf16(1.0f) == 0x3F80);
    CHECK(quant_bf16_to_f32(0x3F80) == 1.0f);
    CHECK(quant_f32_to_bf16(1.0f + 0x1p-8f) == 0x3F80);        /* tie -> even */
    CHECK(quant_f32_to_bf16(1.0f + 0x3p-8f) == 0x3F82);        /* tie -> even (up) */
    CHECK(quant_f32_to_bf16(1.0f + 0x1.2p-8f) == 0x3F81);      /* above tie */
    uint16_t q = quant_f32_to_bf16(NAN);
    CHECK((q & 0x7F80) == 0x7F80 && (q & 0x7F) && (q & 0x40));
    uint32_t snan = 0x7F800001u;
    float fs;
    memcpy(&fs, &snan, 4);
    q = quant_f32_to_bf16(fs);
    CHECK(q == 0x7FC0); /* quiet, not inf */
    CHECK(quant_f32_to_bf16(INFINITY) == 0x7F80);
}

/* Quantize -> dequantize error stays within the format's step. */
static void test_round_trip(void) {
    static const struct { uint32_t t; float tol; } cases[] = {
        {QT_F16, 1e-3f}, {QT_BF16, 8e-3f}, {QT_Q8_0, 0.01f}, {QT_Q8_1, 0.01f}, {QT_Q8_K, 0.01f},
        {QT_Q4_0, 0.2f}, {QT_Q4_1, 0.12f}, {QT_Q5_0, 0.1f},  {QT_Q5_1, 0.06f}, {QT_IQ4_NL, 0.2f},
        {QT_MXFP4, 0.34f}, {QT_F32, 0.0f}, {QT_Q2_K, 0.4f}, {QT_Q3_K, 0.25f}, {QT_Q4_K, 0.1f},
        {QT_Q5_K, 0.05f}, {QT_Q6_K, 0.03f}, {QT_IQ4_XS, 0.2f}, {QT_NVFP4, 0.2f},
        /* ternary and 1-bit: a value rounds to {-1, 0, 1} (Q2_0 also 2) times the scale */
        {QT_TQ1_0, 0.51f}, {QT_TQ2_0, 0.51f}, {QT_Q2_0, 0.51f}, {QT_Q1_0, 1.0f},
    };
    enum { N = 1024 };
    float x[N], y[N];
    static uint8_t buf[N * 4];
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        for (int i = 0; i < N; i++) x[i] = rnd_unit();
        CHECK_OK(quant_quantize(cases[c].t, x, buf, N));
        CHECK_OK(quant_dequantize(cases[c].t, buf, y, N));
        float maxerr = 0;
        for (int i = 0; i < N; i++) maxerr = fmaxf(maxerr, fabsf(x[i] - y[i]));
        if (maxerr > cases[c].tol)
            fprintf(stderr, "  %s: max error %g > %g\n", quant_type_name(cases[c].t), maxerr, cases[c].tol);
        CHECK(maxerr <= cases[c].tol);
    }
    /* known values: Q8_0 of [0..31] has d = 31/127 and q = round(i*127/31) */
    for (int i = 0; i < 32; i++) x[i] = (float)i;
    CHECK_OK(quant_quantize(QT_Q8_0, x, buf, 32));
    const blk_q8_0 *b = (const blk_q8_0 *)buf;
    CHECK(b->d == quant_f32_to_f16(31.0f / 127));
    CHECK(b->qs[31] == 127 && b->qs[0] == 0 && b->qs[1] == 4);
    /* Q4_0 of a block whose largest-magnitude value is -8: d = 1, nibbles = v + 8 */
    for (int i = 0; i < 32; i++) x[i] = (float)(i % 16) - 8;
    CHECK_OK(quant_quantize(QT_Q4_0, x, buf, 32));
    CHECK(((const blk_q4_0 *)buf)->d == 0x3C00);
    CHECK_OK(quant_dequantize(QT_Q4_0, buf, y, 32));
    for (int i = 0; i < 32; i++) CHECK(y[i] == x[i]);
    /* ternary values come back exactly, in every position of TQ1_0's odd packing */
    static const uint32_t tern[] = {QT_TQ1_0, QT_TQ2_0, QT_Q2_0};
    for (size_t k = 0; k < 3; k++) {
        for (int i = 0; i < 256; i++) x[i] = (float)((i * 7 + i / 5) % 3) - 1;
        CHECK_OK(quant_quantize(tern[k], x, buf, 256));
        CHECK_OK(quant_dequantize(tern[k], buf, y, 256));
        for (int i = 0; i < 256; i++) CHECK(y[i] == x[i]);
    }
}

/* ---- ggml parity ---- */

/* Mirrors the head of ggml.h's struct ggml_type_traits (llama.cpp b-release
 * used by node-llama-cpp 3.21.1); only the fields up to from_float_ref. */
typedef struct {
    const char *type_name;
    int64_t blck_size;
    int64_t blck_size_interleave;
    size_t type_size;
    bool is_quantized;
    void (*to_float)(const void *x, float *y, int64_t k);
    void (*from_float_ref)(const float *x, void *y, int64_t k);
} ggml_traits_mirror;
typedef const ggml_traits_mirror *(*get_traits_fn)(int type);

static get_traits_fn ggml_traits(bool *skip) {
    static void *lib;
    static get_traits_fn fn;
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
    if (!lib) lib = dlopen(path, RTLD_NOW | RTLD_GLOBAL);
    if (!lib) {
        fprintf(stderr, "  cannot load %s (%s): set LLAMACPP_LIBDIR to the llama.cpp libs, or "
                        "BRISK_NO_LLAMACPP=1 to skip\n", path, dlerror());
        return NULL;
    }
    fn = (get_traits_fn)dlsym(lib, "ggml_get_type_traits");
    if (!fn) fprintf(stderr, "  ggml_get_type_traits not found in %s\n", path);
    return fn;
}

/* Random block bytes; with `sane`, scale fields get small finite values. */
static void fill_blocks(uint32_t t, uint8_t *buf, int64_t nb, bool sane) {
    const quant_traits *tr = quant_get_traits(t);
    for (int64_t i = 0; i < nb * tr->block_bytes; i++) buf[i] = (uint8_t)rnd_u32();
    if (!sane) return;
    int off[2] = {-1, -1};
    switch (t) {
    case QT_Q4_0: case QT_Q5_0: case QT_Q8_0: case QT_IQ4_NL: case QT_IQ4_XS: off[0] = 0; break;
    case QT_Q4_1: case QT_Q5_1: case QT_Q8_1: case QT_Q4_K: case QT_Q5_K: off[0] = 0; off[1] = 2; break;
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
        if (t == QT_Q8_K) {
            float d = rnd_unit() * 0.01f;
            memcpy(b, &d, 4);
        }
        if (t == QT_MXFP4) b[0] = (uint8_t)(118 + rnd_u32() % 16);
    }
    if (t == QT_F16 || t == QT_BF16 || t == QT_F32) {
        for (int64_t i = 0; i < nb; i++) {
            float v = rnd_weight();
            if (t == QT_F32) memcpy(buf + 4 * i, &v, 4);
            else {
                uint16_t h = t == QT_F16 ? quant_f32_to_f16(v) : quant_f32_to_bf16(v);
                memcpy(buf + 2 * i, &h, 2);
            }
        }
    }
}

static bool same_float(float a, float b) { return fbits(a) == fbits(b) || (isnan(a) && isnan(b)); }

static void test_ggml_traits(void) {
    bool skip;
    get_traits_fn gt = ggml_traits(&skip);
    if (skip) return;
    CHECK(gt != NULL);
    if (!gt) return;
    for (int k = 0; k < N_TYPES; k++) {
        const quant_traits *t = quant_get_traits(all_types[k]);
        const ggml_traits_mirror *g = gt((int)all_types[k]);
        CHECK(g && g->type_name && !strcmp(g->type_name, t->name));
        CHECK(g && g->blck_size == t->block_elems && g->type_size == (size_t)t->block_bytes);
    }
}

static void test_ggml_dequantize(void) {
    bool skip;
    get_traits_fn gt = ggml_traits(&skip);
    if (skip) return;
    CHECK(gt != NULL);
    if (!gt) return;
    enum { NE = 256 * 1024 }; /* enough blocks to reach every grid entry of the i-quants */
    static uint8_t buf[NE * 4];
    static float ours[NE], theirs[NE];
    for (int k = 0; k < N_TYPES; k++) {
        const uint32_t t = all_types[k];
        const ggml_traits_mirror *g = gt((int)t);
        if (!g || !g->to_float) {
            if (t != QT_Q8_1 && t != QT_Q8_K && t != QT_F32) { /* ggml has none for these */
                fprintf(stderr, "  ggml has no to_float for %s\n", quant_type_name(t));
                CHECK(0);
            }
            continue;
        }
        const int64_t nb = NE / quant_get_traits(t)->block_elems;
        for (int pass = 0; pass < 2; pass++) {
            fill_blocks(t, buf, nb, pass == 1);
            CHECK_OK(quant_dequantize(t, buf, ours, NE));
            g->to_float(buf, theirs, NE);
            int bad = 0, first = -1;
            for (int i = 0; i < NE; i++)
                if (!same_float(ours[i], theirs[i])) {
                    if (first < 0) first = i;
                    bad++;
                }
            if (bad)
                fprintf(stderr, "  %s pass %d: %d of %d differ (first at %d: %a vs ggml %a)\n", quant_type_name(t),
                        pass, bad, NE, first, ours[first], theirs[first]);
            CHECK(bad == 0);
        }
    }
}

/* ggml's lattice quantizers (the i-quants) need their tables built first. */
static void ggml_init_type(uint32_t t) {
    void *lib = dlopen(NULL, RTLD_NOW);
    void (*init)(int) = lib ? (void (*)(int))dlsym(lib, "ggml_quantize_init") : NULL;
    CHECK(init != NULL);
    if (init) init((int)t);
}

static void test_ggml_quantize(void) {
    bool skip;
    get_traits_fn gt = ggml_traits(&skip);
    if (skip) return;
    CHECK(gt != NULL);
    if (!gt) return;
    static const uint32_t qtypes[] = {QT_F16,  QT_BF16, QT_Q8_0, QT_Q8_1, QT_Q4_0, QT_Q4_1, QT_Q5_0,
                                      QT_Q5_1, QT_IQ4_NL, QT_MXFP4, QT_Q2_K, QT_Q3_K, QT_Q4_K, QT_Q5_K,
                                      QT_Q6_K, QT_IQ4_XS, QT_TQ1_0, QT_TQ2_0, QT_NVFP4, QT_Q1_0, QT_Q2_0,
                                      QT_IQ3_XXS, QT_IQ3_S, QT_IQ2_S};
    enum { NE = 256 * 16 };
    static float x[NE];
    static uint8_t ours[NE * 4], theirs[NE * 4];
    for (size_t k = 0; k < sizeof qtypes / sizeof qtypes[0]; k++) {
        const uint32_t t = qtypes[k];
        const ggml_traits_mirror *g = gt((int)t);
        CHECK(g && g->from_float_ref);
        if (!g || !g->from_float_ref) continue;
        ggml_init_type(t);
        for (int pass = 0; pass < 3; pass++) {
            for (int i = 0; i < NE; i++) x[i] = pass == 2 ? rnd_unit() * 1e-3f : rnd_weight();
            if (pass == 1) /* special values in some blocks: zeros, ties */
                for (int i = 0; i < 64; i++) x[i] = i < 32 ? 0.0f : (float)(i % 7) - 3;
            const size_t bytes = quant_row_size(t, NE);
            memset(ours, 0, bytes);
            memset(theirs, 0, bytes);
            CHECK_OK(quant_quantize(t, x, ours, NE));
            g->from_float_ref(x, theirs, NE);
            size_t first = bytes;
            int bad = 0;
            for (size_t i = 0; i < bytes; i++)
                if (ours[i] != theirs[i]) {
                    if (first == bytes) first = i;
                    bad++;
                }
            /* ggml leaves an all-zero iq4_nl block's nibbles uninitialised: skip block 0 there */
            if (t == QT_IQ4_NL && pass == 1 && first < 18) {
                bad = 0;
                for (size_t i = 18; i < bytes; i++) bad += ours[i] != theirs[i];
            }
            if (bad)
                fprintf(stderr, "  %s pass %d: %d bytes differ (first %zu: %02x vs ggml %02x)\n", quant_type_name(t),
                        pass, bad, first, ours[first], theirs[first]);
            CHECK(bad == 0);
        }
    }
}

/* quant_quantize_rows against ggml_quantize_chunk (what llama-quantize calls),
 * without and with an importance matrix: byte for byte. */
typedef size_t (*quantize_chunk_fn)(int type, const float *src, void *dst, int64_t start, int64_t nrows,
                                    int64_t n_per_row, const float *imatrix);
static void test_ggml_quantize_chunk(void) {
    bool skip;
    get_traits_fn gt = ggml_traits(&skip);
    if (skip) return;
    CHECK(gt != NULL);
    if (!gt) return;
    void *lib = dlopen(NULL, RTLD_NOW); /* libggml-base is loaded RTLD_GLOBAL by ggml_traits */
    quantize_chunk_fn chunk = lib ? (quantize_chunk_fn)dlsym(lib, "ggml_quantize_chunk") : NULL;
    CHECK(chunk != NULL);
    if (!chunk) return;
    static const uint32_t qtypes[] = {QT_Q4_0, QT_Q4_1, QT_Q5_0, QT_Q5_1, QT_Q8_0, QT_Q2_K, QT_Q3_K,
                                      QT_Q4_K, QT_Q5_K, QT_Q6_K, QT_IQ4_NL, QT_IQ4_XS, QT_TQ1_0, QT_TQ2_0,
                                      QT_NVFP4, QT_Q1_0, QT_Q2_0, QT_IQ3_XXS, QT_IQ3_S, QT_IQ2_XXS, QT_IQ2_XS, QT_IQ2_S, QT_IQ1_S,
                                      QT_IQ1_M};
    enum { NR = 6, NPR = 768 };
    static float x[NR * NPR], imat[NPR];
    static uint8_t ours[NR * NPR * 2], theirs[NR * NPR * 2];
    for (int i = 0; i < NR * NPR; i++) x[i] = rnd_weight() * 0.02f;
    for (int i = 0; i < 256; i++) x[NPR + i] = 0.0f;              /* an all-zero super-block */
    for (int i = 0; i < 32; i++) x[2 * NPR + i] = (float)(i % 5); /* non-negative, ties */
    for (int i = 0; i < NPR; i++) imat[i] = (rnd_unit() + 1.0f) * ((i & 15) == 3 ? 40.0f : 1.0f);
    for (size_t k = 0; k < sizeof qtypes / sizeof qtypes[0]; k++) {
        for (int with_imat = 0; with_imat < 2; with_imat++) {
            const uint32_t t = qtypes[k];
            if (!with_imat && (t == QT_IQ2_XXS || t == QT_IQ2_XS || t == QT_IQ1_S)) { /* these need one: refused, not guessed */
                CHECK(quant_quantize_rows(t, x, ours, NR, NPR, NULL) == BRISK_ERR_INVALID_ARG);
                continue;
            }
            ggml_init_type(t);
            const size_t bytes = NR * quant_row_size(t, NPR);
            memset(ours, 0xAA, bytes);
            memset(theirs, 0x55, bytes);
            CHECK_OK(quant_quantize_rows(t, x, ours, NR, NPR, with_imat ? imat : NULL));
            CHECK(chunk((int)t, x, theirs, 0, NR, NPR, with_imat ? imat : NULL) == bytes);
            int bad = 0;
            size_t first = bytes;
            for (size_t i = 0; i < bytes; i++)
                if (ours[i] != theirs[i]) {
                    if (first == bytes) first = i;
                    bad++;
                }
            if (bad)
                fprintf(stderr, "  %s%s: %d of %zu bytes differ (first %zu)\n", quant_type_name(t),
                        with_imat ? " +imatrix" : "", bad, bytes, first);
            CHECK(bad == 0);
        }
    }
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"table", test_table},
        {"errors", test_errors},
        {"f16", test_f16},
        {"bf16", test_bf16},
        {"round_trip", test_round_trip},
        {"ggml_traits", test_ggml_traits},
        {"ggml_dequantize", test_ggml_dequantize},
        {"ggml_quantize", test_ggml_quantize},
        {"ggml_quantize_chunk", test_ggml_quantize_chunk},
    };
    return test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
