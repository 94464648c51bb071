/* test_cpu_attn.c — the CPU backend's attention op: a prompt batch (query
 * blocks, cpu_attn_block on AVX-512) against the same tokens fed in short
 * batches (cpu_attn_head, ggml's order) on the same paged cache. f32 and f16
 * caches, GQA groups 1, 2 and 4, head_dim 64 and 128, one sequence whose
 * earlier positions are already cached, and two sequences in one batch
 * (blocks never mix sequences). Outputs agree within 2e-6 absolute (values
 * in [-1, 1]; only the float order differs).
 *
 * Quantized caches (q8_0, q4_0: the portable path) against a float64
 * reference: on K/V as the cache holds them (ggml's quantize then dequantize)
 * within 1e-5 absolute (measured 2e-7), which checks the block addressing;
 * and on the original f32 K/V, the error the format itself costs, as a
 * relative RMS error over all outputs: q8_0 below 0.01, q4_0 below 0.12
 * (measured 0.004 and 0.07 on these uniform values), q8_0 the smaller.
 *
 * The q4_0h cache (q4_0, keys Hadamard-rotated, kv_rot.h): the rotation is
 * orthogonal, and on keys with outlier channels the attention's error falls
 * well below q4_0's, without rising on plain values. */
#include <math.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_attn.h"
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("fp-contract=off") /* cpu_math.h's reference rounds as written */
#endif
#include "backend/cpu/cpu_math.h"
#include "backend/cpu/cpu_dot.h"
#include "quant/kv_rot.h"
#include "quant/quant.h"
#include "test.h"

static uint32_t rng = 777;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

enum { BS = 16, PAGES = 16, MAXT = 96 };

typedef struct {
    int n_head, n_head_kv, hd, kv_type;
} shape;

/* Runs entries [0, n) on a fresh cache in batches of `chunk`, or (chunk 0)
 * as [0, 9) then the rest in one batch; entry i belongs to sequence seq[i]
 * at position pos[i]. */
static void run(bk_backend *be, const shape *s, const float *q, const float *k, const float *v, const int32_t *pos,
                const int *seq, int n, int chunk, float *out) {
    const int kvd = s->n_head_kv * s->hd, qd = s->n_head * s->hd;
    const size_t bb = bk_kv_block_bytes(s->kv_type);
    const size_t row = bb ? (size_t)kvd / 32 * bb : (size_t)kvd * (s->kv_type == BRISK_KV_F16 ? 2 : 4);
    void *kc = NULL, *vc = NULL;
    CHECK_OK(be->ops->alloc(be, (size_t)PAGES * BS * row, &kc));
    CHECK_OK(be->ops->alloc(be, (size_t)PAGES * BS * row, &vc));
    static const int32_t tab0[] = {5, 2, 9, 0, 7, 11}, tab1[] = {3, 1, 4, 6, 8, 10};
    bk_kv_view kv = {.k = kc, .v = vc, .kv_type = s->kv_type, .block_size = BS};
    int32_t slot[MAXT];
    const int32_t *tables[MAXT];
    for (int i = 0; i < n; i++) {
        const int32_t *t = seq[i] ? tab1 : tab0;
        tables[i] = t;
        slot[i] = t[pos[i] / BS] * BS + pos[i] % BS;
    }
    for (int i0 = 0, m; i0 < n; i0 += m) {
        m = chunk ? (n - i0 < chunk ? n - i0 : chunk) : i0 ? n - i0 : 9;
        bk_attn_batch ab = {.n_tokens = m, .pos = pos + i0, .slot = slot + i0, .block_table = tables + i0, .seq = NULL};
        be->ops->attention(be, q + (size_t)i0 * qd, k + (size_t)i0 * kvd, v + (size_t)i0 * kvd, &kv, &ab, s->n_head,
                           s->n_head_kv, s->hd, 1.0f / sqrtf((float)s->hd), out + (size_t)i0 * qd);
    }
    be->ops->release(be, kc);
    be->ops->release(be, vc);
}

static void compare(const shape *s, int two_seqs) {
    bk_backend *be = NULL;
    CHECK_OK(bk_cpu_backend_new(2, &be));
    if (!be) return;
    const int n = 72, kvd = s->n_head_kv * s->hd, qd = s->n_head * s->hd;
    float *q = malloc(sizeof(float) * n * qd), *k = malloc(sizeof(float) * n * kvd), *v = malloc(sizeof(float) * n * kvd);
    float *a = calloc((size_t)n * qd, sizeof(float)), *b = calloc((size_t)n * qd, sizeof(float));
    for (int i = 0; i < n * qd; i++) q[i] = frand() * 2.0f;
    for (int i = 0; i < n * kvd; i++) k[i] = frand(), v[i] = frand();
    int32_t pos[MAXT];
    int seq[MAXT];
    for (int i = 0; i < n; i++) { /* two: 40 entries of seq 0, then 32 of seq 1 */
        seq[i] = two_seqs && i >= 40;
        pos[i] = seq[i] ? i - 40 : i;
    }
    run(be, s, q, k, v, pos, seq, n, 0, a); /* a cached prefix of 9, then 63 entries in one batch */
    run(be, s, q, k, v, pos, seq, n, 5, b);
    double md = 0;
    for (int i = 0; i < n * qd; i++) md = fmax(md, fabs((double)a[i] - b[i]));
    printf("  heads %d/%d hd %d %s%s: max |blocked - per token| = %.2e\n", s->n_head, s->n_head_kv, s->hd,
           s->kv_type == BRISK_KV_F16 ? "f16" : "f32", two_seqs ? ", two sequences" : "", md);
    CHECK(md <= 2e-6);
    free(q), free(k), free(v), free(a), free(b);
    be->ops->free(be);
}

static void test_blocked_vs_per_token(void) {
    static const shape shapes[] = {
        {16, 8, 128, BRISK_KV_F16}, {16, 8, 128, BRISK_KV_F32}, {8, 2, 64, BRISK_KV_F16}, {4, 4, 64, BRISK_KV_F32},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof shapes[0]; i++)
        for (int two = 0; two < 2; two++) compare(&shapes[i], two);
}

/* The query-blocked kernels called directly, each ISA's where this core has it (so that the one
 * under test is known to run): a block of nt tokens at positions pos0.. of one sequence, group
 * query heads a KV head (lanes nt * group: 3 to 16, over 8 and under), f32 and f16 caches of 80
 * positions in shuffled pages, against a float64 softmax; within 2e-6 absolute, as above. */
static void test_block_kernels(void) {
    static const struct {
        const char *isa;
        int (*fn)(const cpu_attn_block *);
    } isas[] = {{"avx2", cpu_attn_block_avx2}, {"avx512f", cpu_attn_block_avx512}};
    static const int32_t table[] = {3, 0, 4, 1, 2}; /* pages of BS positions */
    enum { NP = 80, NKV = 2 };
    static const int cases[][3] = {{3, 1, 64}, {8, 1, 128}, {2, 4, 64}, {11, 1, 64}, {3, 4, 128}, {2, 8, 64}, {4, 4, 256}};
    int ran = 0;
    for (size_t z = 0; z < sizeof isas / sizeof isas[0]; z++) {
        __builtin_cpu_init();
        const int have = !strcmp(isas[z].isa, "avx2") ? __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma")
                                                      : __builtin_cpu_supports("avx512f") && __builtin_cpu_supports("avx512bw");
        if (!have) {
            printf("  %s: not on this core\n", isas[z].isa);
            continue;
        }
        for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++)
            for (int f16 = 0; f16 < 2; f16++) {
                const int nt = cases[c][0], group = cases[c][1], hd = cases[c][2], n_head = group * NKV, kvh = 1;
                const int pos0 = NP - nt - 7; /* the block ends 7 positions before the cache does */
                const size_t kvd = (size_t)NKV * hd, qd = (size_t)n_head * hd, slots = (size_t)5 * BS;
                float *k = malloc(sizeof(float) * slots * kvd), *v = malloc(sizeof(float) * slots * kvd);
                uint16_t *kh = malloc(2 * slots * kvd), *vh = malloc(2 * slots * kvd);
                float *q = malloc(sizeof(float) * nt * qd), *out = calloc((size_t)nt * qd, sizeof(float));
                float *scratch = malloc(sizeof(float) * 64 * hd);
                for (size_t i = 0; i < slots * kvd; i++) {
                    k[i] = quant_f16_to_f32(kh[i] = quant_f32_to_f16(frand()));
                    v[i] = quant_f16_to_f32(vh[i] = quant_f32_to_f16(frand()));
                }
                for (size_t i = 0; i < (size_t)nt * qd; i++) q[i] = frand() * 2.0f;
                bk_kv_view kv = {.k = f16 ? (void *)kh : (void *)k, .v = f16 ? (void *)vh : (void *)v,
                                 .kv_type = f16 ? BRISK_KV_F16 : BRISK_KV_F32, .block_size = BS};
                int32_t pos[16];
                for (int t = 0; t < nt; t++) pos[t] = pos0 + t;
                const float scale = 1.0f / sqrtf((float)hd);
                cpu_attn_block ab = {.q = q + (size_t)kvh * group * hd, .out = out + (size_t)kvh * group * hd,
                                     .tok_stride = qd, .pos = pos, .nt = nt, .group = group, .kv = &kv, .table = table,
                                     .kvh = kvh, .n_head_kv = NKV, .hd = hd, .scale = scale, .scratch = scratch};
                CHECK(isas[z].fn(&ab) == 1);
                double md = 0, sc[NP];
                for (int t = 0; t < nt; t++)
                    for (int g = 0; g < group; g++) {
                        const float *qi = q + (size_t)t * qd + (size_t)(kvh * group + g) * hd;
                        double mx = -INFINITY, sum = 0;
                        for (int p = 0; p <= pos[t]; p++) {
                            const size_t row = ((size_t)(table[p / BS] * BS + p % BS) * NKV + kvh) * hd;
                            double d = 0;
                            for (int e = 0; e < hd; e++) d += (double)qi[e] * k[row + e];
                            mx = fmax(mx, sc[p] = d * scale);
                        }
                        for (int p = 0; p <= pos[t]; p++) sum += sc[p] = exp(sc[p] - mx);
                        const float *o = out + (size_t)t * qd + (size_t)(kvh * group + g) * hd;
                        for (int e = 0; e < hd; e++) {
                            double r = 0;
                            for (int p = 0; p <= pos[t]; p++)
                                r += sc[p] / sum * v[((size_t)(table[p / BS] * BS + p % BS) * NKV + kvh) * hd + e];
                            md = fmax(md, fabs(r - o[e]));
                        }
                    }
                /* the other KV head's outputs stay untouched */
                for (int t = 0; t < nt; t++)
                    for (int i = 0; i < group * hd; i++) md = fmax(md, fabs(out[(size_t)t * qd + i]));
                if (md > 2e-6) printf("  %s %d tokens x %d heads, hd %d, %s: max error %.2e\n", isas[z].isa, nt, group,
                                      hd, f16 ? "f16" : "f32", md);
                CHECK(md <= 2e-6);
                ran++;
                free(k), free(v), free(kh), free(vh), free(q), free(out), free(scratch);
            }
    }
    printf("  %d block kernel cases\n", ran);
    CHECK(ran >= 14); /* x86-64 CI cores have AVX2 at least */
}

/* Decode attention (one entry a batch: cpu_attn_head on AVX2 / AVX-512 cores, the portable loop
 * otherwise) over three shapes, f16 and f32 caches, two sequences: every output, in order. */
enum { DEC_N = 96 }; /* sequence 0 reaches 84 positions: the AVX2 kernel's V blocks of 64, a partial one and a tail */
static const shape dec_shapes[] = {{16, 8, 128, BRISK_KV_F16}, {8, 2, 64, BRISK_KV_F32}, {4, 4, 64, BRISK_KV_F16},
                                   {16, 8, 128, BRISK_KV_Q8_0}, {8, 2, 64, BRISK_KV_Q4_0}, {12, 4, 32, BRISK_KV_Q8_0}};
static size_t decode_floats(void) {
    size_t n = 0;
    for (size_t i = 0; i < sizeof dec_shapes / sizeof dec_shapes[0]; i++) n += (size_t)DEC_N * dec_shapes[i].n_head * dec_shapes[i].hd;
    return n;
}
static void decode_outputs(float *all) {
    rng = 4242;
    bk_backend *be = NULL;
    CHECK_OK(bk_cpu_backend_new(2, &be));
    if (!be) return;
    for (size_t i = 0; i < sizeof dec_shapes / sizeof dec_shapes[0]; i++) {
        const shape *s = &dec_shapes[i];
        const int kvd = s->n_head_kv * s->hd, qd = s->n_head * s->hd;
        float *q = malloc(sizeof(float) * DEC_N * qd), *k = malloc(sizeof(float) * DEC_N * kvd),
              *v = malloc(sizeof(float) * DEC_N * kvd);
        for (int e = 0; e < DEC_N * qd; e++) q[e] = frand() * 4.0f;
        for (int e = 0; e < DEC_N * kvd; e++) k[e] = frand(), v[e] = frand();
        int32_t pos[MAXT];
        int seq[MAXT];
        for (int t = 0; t < DEC_N; t++) seq[t] = t % 8 == 7, pos[t] = seq[t] ? t / 8 : t - t / 8;
        run(be, s, q, k, v, pos, seq, DEC_N, 1, all);
        all += (size_t)DEC_N * qd;
        free(q), free(k), free(v);
    }
    be->ops->free(be);
}

/* decode_outputs in a child of this program under BRISK_CPU_ISA=isa, into out (n floats). */
static bool child_decode(const char *isa, float *out, size_t n) {
    char self[1024] = "", path[] = "/tmp/brisk-attn-XXXXXX", cmd[2300];
    const ssize_t len = readlink("/proc/self/exe", self, sizeof self - 1);
    const int fd = mkstemp(path);
    if (len <= 0 || fd < 0) return false;
    close(fd);
    snprintf(cmd, sizeof cmd, "BRISK_CPU_ISA=%s '%s' --dump-decode '%s'", isa, self, path);
    bool ok = system(cmd) == 0;
    FILE *f = fopen(path, "rb");
    ok = ok && f && fread(out, sizeof(float), n, f) == n;
    if (f) fclose(f);
    unlink(path);
    return ok;
}

static size_t n_differ(const float *a, const float *b, size_t n) {
    size_t d = 0;
    for (size_t i = 0; i < n; i++) d += memcmp(&a[i], &b[i], sizeof(float)) != 0;
    return d;
}

/* cpu_attn_head_avx2 / _avx512 claim the portable loop's float order: this core's kernel against
 * the portable one (BRISK_CPU_ISA=portable in a child of this program), bit for bit. On an AVX-512
 * core the AVX2 kernel (its several-KV-head units among them) runs too, as BRISK_CPU_ISA=avx2. */
static void test_head_isas_bitwise(void) {
    const size_t n = decode_floats();
    float *mine = calloc(n, sizeof(float)), *port = calloc(n, sizeof(float)), *avx2 = calloc(n, sizeof(float));
    decode_outputs(mine);
    CHECK(child_decode("portable", port, n));
    size_t differ = n_differ(mine, port, n);
    printf("  %s against portable: %zu of %zu decode outputs differ\n", cpu_isa_name(cpu_dot_isa()), differ, n);
    CHECK(cpu_dot_isa() != CPU_ISA_PORTABLE); /* x86-64 CI cores have AVX2 at least: a kernel under test */
    CHECK(differ == 0);
    if (cpu_dot_isa() == CPU_ISA_AVX512) {
        CHECK(child_decode("avx2", avx2, n));
        differ = n_differ(avx2, port, n);
        printf("  avx2 (BRISK_CPU_ISA) against portable: %zu of %zu decode outputs differ\n", differ, n);
        CHECK(differ == 0);
    }
    free(mine), free(port), free(avx2);
}

/* SwiGLU's x86 versions (cpu_attn.h) against swiglu_row (cpu_math.h), bit for bit: a sweep through
 * exp's range and past it (where 2^n leaves the normal range, ldexpf's rounding), signed zeros,
 * denormals, infinities and a NaN, with a length that leaves a tail of 7 for expf. */
static void test_swiglu_isas(void) {
    enum { N = 16 * 97 + 7 };
    float *g = malloc(sizeof(float) * N), *u = malloc(sizeof(float) * N), *ref = malloc(sizeof(float) * N),
          *got = malloc(sizeof(float) * N);
    const float special[] = {0.0f, -0.0f, 1e-40f, -1e-40f, INFINITY, -INFINITY, NAN, 1e30f, -1e30f, 88.7f, -88.7f,
                             103.9f, -103.9f, 126.5f, -126.5f, 150.0f, -150.0f, 192.4f, -192.4f, 200.0f, -200.0f};
    const int ns = (int)(sizeof special / sizeof special[0]);
    for (int i = 0; i < N; i++) {
        g[i] = i < ns ? special[i] : -130.0f + 260.0f * (float)i / N + 1e-3f * (float)(i % 13);
        u[i] = 0.5f + 0.25f * (float)(i % 7) - (i % 3 ? 0.0f : 1.5f);
    }
    swiglu_row(g, u, ref, N);
    struct { const char *name; void (*fn)(const float *, const float *, float *, size_t); cpu_isa needs; } v[] = {
        {"avx2", cpu_swiglu_avx2, CPU_ISA_AVX2}, {"avx512", cpu_swiglu_avx512, CPU_ISA_AVX512}};
    int tested = 0;
    for (size_t k = 0; k < sizeof v / sizeof v[0]; k++) {
        if (cpu_dot_isa() < v[k].needs) continue;
        v[k].fn(g, u, got, N);
        int bad = 0;
        for (int i = 0; i < N; i++) bad += memcmp(&ref[i], &got[i], sizeof(float)) != 0;
        if (bad) fprintf(stderr, "  %s swiglu: %d of %d differ\n", v[k].name, bad, N);
        CHECK(bad == 0);
        tested++;
    }
    printf("  swiglu: %d x86 versions bitwise swiglu_row over %d values\n", tested, N);
    free(g), free(u), free(ref), free(got);
}

/* out (n, n_head, hd) = causal attention of one sequence (entry i at position i) in float64. */
static void attn_ref(const shape *s, const float *q, const float *k, const float *v, int n, double *out) {
    const int kvd = s->n_head_kv * s->hd, qd = s->n_head * s->hd, group = s->n_head / s->n_head_kv;
    double *sc = malloc(sizeof(double) * n);
    for (int i = 0; i < n; i++)
        for (int h = 0; h < s->n_head; h++) {
            const float *qi = q + (size_t)i * qd + (size_t)h * s->hd;
            const int off = h / group * s->hd;
            double mx = -INFINITY, sum = 0;
            for (int p = 0; p <= i; p++) {
                double d = 0;
                for (int e = 0; e < s->hd; e++) d += (double)qi[e] * k[(size_t)p * kvd + off + e];
                sc[p] = d / sqrt((double)s->hd);
                mx = fmax(mx, sc[p]);
            }
            for (int p = 0; p <= i; p++) sum += sc[p] = exp(sc[p] - mx);
            double *o = out + (size_t)i * qd + (size_t)h * s->hd;
            for (int e = 0; e < s->hd; e++) {
                double a = 0;
                for (int p = 0; p <= i; p++) a += sc[p] / sum * v[(size_t)p * kvd + off + e];
                o[e] = a;
            }
        }
    free(sc);
}

static void check_quantized(const shape *s, int chunk, double *err_f32) {
    bk_backend *be = NULL;
    CHECK_OK(bk_cpu_backend_new(2, &be));
    if (!be) return;
    const int n = 72, kvd = s->n_head_kv * s->hd, qd = s->n_head * s->hd;
    const uint32_t qt = s->kv_type == BRISK_KV_Q4_0 ? QT_Q4_0 : QT_Q8_0;
    float *q = malloc(sizeof(float) * n * qd), *k = malloc(sizeof(float) * n * kvd), *v = malloc(sizeof(float) * n * kvd);
    float *kq = malloc(sizeof(float) * n * kvd), *vq = malloc(sizeof(float) * n * kvd);
    float *o = calloc((size_t)n * qd, sizeof(float));
    double *r = malloc(sizeof(double) * n * qd), *rq = malloc(sizeof(double) * n * qd);
    void *blk = malloc(quant_row_size(qt, (int64_t)n * kvd));
    for (int i = 0; i < n * qd; i++) q[i] = frand() * 2.0f;
    for (int i = 0; i < n * kvd; i++) k[i] = frand(), v[i] = frand();
    CHECK_OK(quant_quantize(qt, k, blk, (int64_t)n * kvd)); /* the values the cache holds */
    CHECK_OK(quant_dequantize(qt, blk, kq, (int64_t)n * kvd));
    CHECK_OK(quant_quantize(qt, v, blk, (int64_t)n * kvd));
    CHECK_OK(quant_dequantize(qt, blk, vq, (int64_t)n * kvd));
    int32_t pos[MAXT];
    int seq[MAXT] = {0};
    for (int i = 0; i < n; i++) pos[i] = i;
    run(be, s, q, k, v, pos, seq, n, chunk, o);
    attn_ref(s, q, kq, vq, n, rq);
    attn_ref(s, q, k, v, n, r);
    double md = 0, se = 0, sr = 0;
    for (int i = 0; i < n * qd; i++) {
        md = fmax(md, fabs(o[i] - rq[i]));
        se += (o[i] - r[i]) * (o[i] - r[i]);
        sr += r[i] * r[i];
    }
    *err_f32 = sqrt(se / sr);
    const double tol = s->kv_type == BRISK_KV_Q4_0 ? 0.12 : 0.01;
    printf("  heads %d/%d hd %d %s%s: max |out - ref on cached values| = %.2e, rel. RMS error vs f32 = %.4f\n",
           s->n_head, s->n_head_kv, s->hd, s->kv_type == BRISK_KV_Q4_0 ? "q4_0" : "q8_0",
           chunk ? " (one token a batch)" : "", md, *err_f32);
    CHECK(md <= 1e-5);
    CHECK(*err_f32 > 0 && *err_f32 <= tol);
    free(q), free(k), free(v), free(kq), free(vq), free(o), free(r), free(rq), free(blk);
    be->ops->free(be);
}

static void test_quantized_cache(void) {
    static const int geo[][3] = {{8, 2, 64}, {16, 8, 128}, {4, 4, 32}};
    for (size_t g = 0; g < sizeof geo / sizeof geo[0]; g++) {
        double e8 = 0, e4 = 0;
        shape s8 = {geo[g][0], geo[g][1], geo[g][2], BRISK_KV_Q8_0}, s4 = s8;
        s4.kv_type = BRISK_KV_Q4_0;
        check_quantized(&s8, g == 0, &e8);
        check_quantized(&s4, g == 0, &e4);
        CHECK(e8 < e4); /* 8 bits cost less than 4 */
    }
}

/* kv_rot (the q4_0h cache's rotation): orthogonal (norms and dot products kept, the inverse exact to
 * rounding) for every head size a quantized cache takes. */
static void test_rotation(void) {
    static const int hds[] = {32, 64, 96, 128, 192, 256, 512};
    for (size_t i = 0; i < sizeof hds / sizeof hds[0]; i++) {
        const int hd = hds[i];
        float x[512], y[512], z[512];
        double n0 = 0, n1 = 0, d0 = 0, d1 = 0, md = 0;
        for (int e = 0; e < hd; e++) x[e] = frand() * (e % 7 == 3 ? 20.0f : 1.0f), y[e] = frand();
        for (int e = 0; e < hd; e++) n0 += (double)x[e] * x[e], d0 += (double)x[e] * y[e];
        memcpy(z, x, sizeof(float) * hd);
        kv_rot_apply(x, hd);
        kv_rot_apply(y, hd);
        for (int e = 0; e < hd; e++) n1 += (double)x[e] * x[e], d1 += (double)x[e] * y[e];
        kv_rot_invert(x, hd);
        for (int e = 0; e < hd; e++) md = fmax(md, fabs((double)x[e] - z[e]));
        printf("  hd %d (blocks of %d): |Rx|/|x| - 1 = %.1e, (Rx.Ry - x.y)/|x||y| = %.1e, max |R^T R x - x| = %.1e\n", hd,
               kv_rot_block(hd), sqrt(n1 / n0) - 1, (d1 - d0) / sqrt(n0 * hd), md);
        CHECK(hd % kv_rot_block(hd) == 0 && kv_rot_block(hd) >= 32 && kv_rot_block(hd) <= 256);
        CHECK(fabs(sqrt(n1 / n0) - 1) < 1e-6);
        CHECK(fabs(d1 - d0) < 1e-5 * sqrt(n0 * hd));
        CHECK(md < 2e-5);
    }
}

/* Relative RMS error against float64 attention on the f32 K/V, for keys with outlier channels
 * (every 16th channel 12x the others, as RoPE'd keys have a few large pairs) or without. */
static double rotated_error(int kv_type, bool outliers, int hd) {
    bk_backend *be = NULL;
    CHECK_OK(bk_cpu_backend_new(2, &be));
    if (!be) return 1;
    const shape s = {8, 2, hd, kv_type};
    const int n = 72, kvd = s.n_head_kv * s.hd, qd = s.n_head * s.hd;
    float *q = malloc(sizeof(float) * n * qd), *k = malloc(sizeof(float) * n * kvd), *v = malloc(sizeof(float) * n * kvd);
    float *o = calloc((size_t)n * qd, sizeof(float));
    double *r = malloc(sizeof(double) * n * qd);
    rng = 4242;
    for (int i = 0; i < n * qd; i++) q[i] = frand() * 0.5f;
    for (int i = 0; i < n * kvd; i++) k[i] = frand() * (outliers && i % 16 == 5 ? 12.0f : 1.0f), v[i] = frand();
    int32_t pos[MAXT];
    int seq[MAXT] = {0};
    for (int i = 0; i < n; i++) pos[i] = i;
    run(be, &s, q, k, v, pos, seq, n, 0, o);
    attn_ref(&s, q, k, v, n, r);
    double se = 0, sr = 0;
    for (int i = 0; i < n * qd; i++) se += (o[i] - r[i]) * (o[i] - r[i]), sr += r[i] * r[i];
    free(q), free(k), free(v), free(o), free(r);
    be->ops->free(be);
    return sqrt(se / sr);
}

/* The q4_0h cache through the attention op: no worse than q4_0 on plain values, and much better where
 * keys have outlier channels (the reason for the type); both within q4_0's bound on plain values. */
static void test_rotated_cache(void) {
    for (int hd = 64; hd <= 128; hd *= 2) {
        const double p4 = rotated_error(BRISK_KV_Q4_0, false, hd), ph = rotated_error(BRISK_KV_Q4_0H, false, hd);
        const double o4 = rotated_error(BRISK_KV_Q4_0, true, hd), oh = rotated_error(BRISK_KV_Q4_0H, true, hd);
        printf("  hd %d rel. RMS error vs f32: plain q4_0 %.4f q4_0h %.4f; outlier keys q4_0 %.4f q4_0h %.4f\n", hd, p4,
               ph, o4, oh);
        CHECK(ph > 0 && ph <= 0.12 && ph <= 1.05 * p4);
        CHECK(oh < 0.8 * o4);
    }
}

int main(int argc, char **argv) {
    if (argc == 3 && !strcmp(argv[1], "--dump-decode")) { /* test_head_isas_bitwise's child */
        const size_t n = decode_floats();
        float *out = calloc(n, sizeof(float));
        decode_outputs(out);
        FILE *f = fopen(argv[2], "wb");
        const int ok = f && fwrite(out, sizeof(float), n, f) == n;
        if (f) fclose(f);
        free(out);
        return ok ? 0 : 1;
    }
    static const test_case cases[] = {
        {"rotation", test_rotation},
        {"rotated_cache", test_rotated_cache},
        {"blocked_vs_per_token", test_blocked_vs_per_token},
        {"block_kernels", test_block_kernels},
        {"head_isas_bitwise", test_head_isas_bitwise},
        {"swiglu_isas", test_swiglu_isas},
        {"quantized_cache", test_quantized_cache},
    };
    return test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
