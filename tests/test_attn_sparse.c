/* test_attn_sparse.c — block-sparse attention on the CPU (cpu_attn_sparse.h).
 *
 * exact_when_all_pages: with top_k covering every page the output is dense attention's bit for bit
 * (memcmp), in decode (one entry per call), prefill (one batch: query blocks on AVX-512) and a mix,
 * for f32, f16, q8_0 and q4_0h caches and GQA groups 1, 2 and 4.
 * chosen_pages_exact: with few pages read (decode, f32 cache), each output is attention over exactly
 * the pages cpu_sparse_select names for that token, against a float64 reference (1e-5).
 * planted_page_chosen: a page whose keys line up with one query head's q is always among the pages
 * read (whichever page it is, whichever head of the group), and the output then stays near dense
 * (keys 2 q: q.k = 2|q|^2 ~ 43 here, against a bound near 15 for a page of random keys; at 0.6 q
 * the bound of random pages wins, which is the price of a box bound in 64 dimensions).
 * summaries_brute_force: after appends in uneven chunks across page boundaries, and after a rewrite
 * from the middle of a page (a truncation), every page's summary equals the per-channel min and max
 * of its rows as the cache holds them (f16, q8_0, q4_0h: dequantized, rotated). */
#include <math.h>
#include <stdint.h>
#include <string.h>

#include "backend/backend.h"
#include "backend/cpu/cpu_attn.h"
#include "backend/cpu/cpu_attn_sparse.h"
#include "quant/quant.h"
#include "test.h"

static uint32_t rng = 4242;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

enum { BS = 16, PAGES = 16, MAXT = 240 };
static const int32_t table[PAGES] = {5, 2, 9, 0, 7, 11, 3, 1, 4, 6, 8, 10, 15, 12, 14, 13};

typedef struct {
    int n_head, n_head_kv, hd, kv_type;
} shape;

typedef struct {
    bk_backend *be;
    bk_kv_view kv;
    float *ksum;
} fixture;

static size_t row_bytes(const shape *s) {
    const int kvd = s->n_head_kv * s->hd;
    const size_t bb = bk_kv_block_bytes(s->kv_type);
    return bb ? (size_t)kvd / 32 * bb : (size_t)kvd * (s->kv_type == BRISK_KV_F16 ? 2 : 4);
}

static void fx_new(fixture *f, const shape *s) {
    memset(f, 0, sizeof *f);
    CHECK_OK(bk_cpu_backend_new(2, &f->be));
    void *kc = NULL, *vc = NULL;
    CHECK_OK(f->be->ops->alloc(f->be, (size_t)PAGES * BS * row_bytes(s), &kc));
    CHECK_OK(f->be->ops->alloc(f->be, (size_t)PAGES * BS * row_bytes(s), &vc));
    f->ksum = calloc((size_t)PAGES * 2 * s->n_head_kv * s->hd, sizeof(float));
    f->kv = (bk_kv_view){.k = kc, .v = vc, .kv_type = s->kv_type, .block_size = BS};
}

static void fx_free(fixture *f) {
    f->be->ops->release(f->be, f->kv.k);
    f->be->ops->release(f->be, f->kv.v);
    f->be->ops->free(f->be);
    free(f->ksum);
}

/* Entries at positions p0 .. p0 + n - 1 of one sequence in batches of chunk; top_k 0 with
 * summaries: dense attention that keeps them; top_k -1: dense without summaries. */
static void run(fixture *f, const shape *s, const float *q, const float *k, const float *v, int p0, int n, int chunk,
                int top_k, float *out) {
    const int kvd = s->n_head_kv * s->hd, qd = s->n_head * s->hd;
    bk_kv_view kv = f->kv;
    kv.ksum = top_k >= 0 ? f->ksum : NULL;
    kv.sparse_k = top_k > 0 ? top_k : 0;
    int32_t pos[MAXT], slot[MAXT];
    const int32_t *tables[MAXT];
    for (int i = 0; i < n; i++) {
        pos[i] = p0 + i;
        slot[i] = table[pos[i] / BS] * BS + pos[i] % BS;
        tables[i] = table;
    }
    for (int i0 = 0, m; i0 < n; i0 += m) {
        m = n - i0 < chunk ? n - i0 : chunk;
        bk_attn_batch ab = {.n_tokens = m, .pos = pos + i0, .slot = slot + i0, .block_table = tables + i0};
        f->be->ops->attention(f->be, q + (size_t)i0 * qd, k + (size_t)i0 * kvd, v + (size_t)i0 * kvd, &kv, &ab,
                              s->n_head, s->n_head_kv, s->hd, 1.0f / sqrtf((float)s->hd), out + (size_t)i0 * qd);
    }
}

static void fill(float *x, size_t n, float amp) {
    for (size_t i = 0; i < n; i++) x[i] = frand() * amp;
}

static const char *type_name(int t) {
    return t == BRISK_KV_F16 ? "f16" : t == BRISK_KV_Q8_0 ? "q8_0" : t == BRISK_KV_Q4_0H ? "q4_0h" : "f32";
}

static void test_exact_when_all_pages(void) {
    static const shape shapes[] = {{8, 2, 64, BRISK_KV_F16},  {8, 2, 64, BRISK_KV_Q8_0}, {4, 4, 64, BRISK_KV_F32},
                                   {16, 4, 128, BRISK_KV_F16}, {8, 2, 64, BRISK_KV_Q4_0H}, {8, 8, 32, BRISK_KV_Q8_0}};
    const int n = 150; /* 10 pages, the last partly filled */
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape *s = &shapes[si];
        const int kvd = s->n_head_kv * s->hd, qd = s->n_head * s->hd;
        float *q = malloc(sizeof(float) * n * qd), *k = malloc(sizeof(float) * n * kvd), *v = malloc(sizeof(float) * n * kvd);
        float *a = calloc((size_t)n * qd, sizeof(float)), *b = calloc((size_t)n * qd, sizeof(float));
        fill(q, (size_t)n * qd, 2), fill(k, (size_t)n * kvd, 1), fill(v, (size_t)n * kvd, 1);
        static const int chunks[] = {1, 150, 37};
        for (int ci = 0; ci < 3; ci++)
            for (int top_k = 10; top_k <= 1000; top_k += 990) { /* exactly the pages of the longest span, and more */
                fixture f;
                fx_new(&f, s);
                run(&f, s, q, k, v, 0, n, chunks[ci], -1, a);
                run(&f, s, q, k, v, 0, n, chunks[ci], top_k, b);
                const bool same = !memcmp(a, b, sizeof(float) * n * qd);
                if (!same)
                    printf("  heads %d/%d hd %d %s, batches of %d, top_k %d: differs from dense\n", s->n_head,
                           s->n_head_kv, s->hd, type_name(s->kv_type), chunks[ci], top_k);
                CHECK(same);
                fx_free(&f);
            }
        free(q), free(k), free(v), free(a), free(b);
    }
}

/* The float64 attention of query head h of the token at pos over the positions of the given pages
 * (f32 K/V as given, one sequence at positions 0..). */
static void attn_over_pages(const shape *s, const float *qh, const float *k, const float *v, int h, int pos,
                            const int32_t *blocks, int nsel, double *o) {
    const int kvd = s->n_head_kv * s->hd, off = h / (s->n_head / s->n_head_kv) * s->hd;
    double sc[MAXT], mx = -INFINITY, sum = 0;
    int ps[MAXT], np = 0;
    for (int i = 0; i < nsel; i++)
        for (int p = blocks[i] * BS; p < (blocks[i] + 1) * BS && p <= pos; p++) ps[np++] = p;
    for (int i = 0; i < np; i++) {
        double d = 0;
        for (int e = 0; e < s->hd; e++) d += (double)qh[e] * k[(size_t)ps[i] * kvd + off + e];
        sc[i] = d / sqrt((double)s->hd);
        mx = fmax(mx, sc[i]);
    }
    for (int i = 0; i < np; i++) sum += sc[i] = exp(sc[i] - mx);
    for (int e = 0; e < s->hd; e++) {
        double acc = 0;
        for (int i = 0; i < np; i++) acc += sc[i] / sum * v[(size_t)ps[i] * kvd + off + e];
        o[e] = acc;
    }
}

static void test_chosen_pages_exact(void) {
    const shape s = {8, 2, 64, BRISK_KV_F32};
    const int n = 200, kvd = s.n_head_kv * s.hd, qd = s.n_head * s.hd, group = s.n_head / s.n_head_kv;
    float *q = malloc(sizeof(float) * n * qd), *k = malloc(sizeof(float) * n * kvd), *v = malloc(sizeof(float) * n * kvd);
    float *o = calloc((size_t)n * qd, sizeof(float));
    fill(q, (size_t)n * qd, 2), fill(k, (size_t)n * kvd, 1), fill(v, (size_t)n * kvd, 1);
    for (int top_k = 4; top_k <= 6; top_k += 2) {
        fixture f;
        fx_new(&f, &s);
        run(&f, &s, q, k, v, 0, n, 1, top_k, o);
        bk_kv_view kv = f.kv;
        kv.ksum = f.ksum;
        kv.sparse_k = top_k;
        float *scr = malloc(sizeof(float) * cpu_sparse_scratch_floats(group, PAGES, n, s.hd));
        double md = 0, od[128];
        int last_sel = 0;
        for (int t = 0; t < n; t++)
            for (int kvh = 0; kvh < s.n_head_kv; kvh++) {
                /* the summaries now hold every row; those of t's own and later pages differ from what
                 * t's step saw, but those pages are always read (or not there) whatever they hold */
                int32_t blocks[PAGES], pages[PAGES], pos = t;
                int shift;
                cpu_sparse_sel sel = {.q = q + (size_t)t * qd + (size_t)kvh * group * s.hd, .tok_stride = (size_t)qd,
                                      .n_tok = 1, .group = group, .pos = &pos, .kv = &kv, .table = table,
                                      .kvh = kvh, .n_head_kv = s.n_head_kv, .hd = s.hd};
                const int nsel = cpu_sparse_select(&sel, 0.125f, scr, blocks, pages, &shift);
                CHECK(nsel == (t / BS + 1 < top_k ? t / BS + 1 : top_k));
                CHECK(shift == (t / BS + 1 - nsel) * BS);
                last_sel = nsel;
                for (int h = kvh * group; h < (kvh + 1) * group; h++) {
                    attn_over_pages(&s, q + (size_t)t * qd + (size_t)h * s.hd, k, v, h, t, blocks, nsel, od);
                    for (int e = 0; e < s.hd; e++) md = fmax(md, fabs(od[e] - o[(size_t)t * qd + (size_t)h * s.hd + e]));
                }
            }
        printf("  top_k %d: max |sparse - float64 over the chosen pages| = %.2e\n", top_k, md);
        CHECK(md <= 1e-5);
        CHECK(last_sel == top_k); /* 13 pages by the end: top_k of them read */
        free(scr);
        fx_free(&f);
    }
    free(q), free(k), free(v), free(o);
}

static void test_planted_page_chosen(void) {
    const shape s = {8, 2, 64, BRISK_KV_F16};
    const int n = 160, kvd = s.n_head_kv * s.hd, qd = s.n_head * s.hd, group = s.n_head / s.n_head_kv;
    float *q = malloc(sizeof(float) * n * qd), *k = malloc(sizeof(float) * n * kvd), *v = malloc(sizeof(float) * n * kvd);
    float *od = calloc((size_t)n * qd, sizeof(float)), *os = calloc((size_t)n * qd, sizeof(float));
    int chosen = 0, tried = 0;
    double worst = 0;
    for (int planted = 1; planted <= 7; planted++) /* pages 8 and 9 are the local window, 0 the sink */
        for (int head = 0; head < group; head++) {
            fill(q, (size_t)n * qd, 1), fill(k, (size_t)n * kvd, 0.5f), fill(v, (size_t)n * kvd, 1);
            /* the last token's query head `head` of KV head 1, and page planted's keys of KV head 1 along it */
            const float *qh = q + (size_t)(n - 1) * qd + (size_t)(group + head) * s.hd;
            for (int p = planted * BS; p < (planted + 1) * BS; p++)
                for (int e = 0; e < s.hd; e++) k[(size_t)p * kvd + s.hd + e] = 2.0f * qh[e];
            fixture f;
            fx_new(&f, &s);
            run(&f, &s, q, k, v, 0, n - 1, n, 4, os); /* the prompt, then the last token as a decode step */
            run(&f, &s, q + (size_t)(n - 1) * qd, k + (size_t)(n - 1) * kvd, v + (size_t)(n - 1) * kvd, n - 1, 1, 1, 4,
                os + (size_t)(n - 1) * qd);
            bk_kv_view kv = f.kv;
            kv.ksum = f.ksum;
            kv.sparse_k = 4;
            float scr[4096];
            int32_t blocks[PAGES], pages[PAGES], pos = n - 1;
            int shift;
            cpu_sparse_sel sel = {.q = q + (size_t)(n - 1) * qd + (size_t)group * s.hd, .tok_stride = (size_t)qd,
                                  .n_tok = 1, .group = group, .pos = &pos, .kv = &kv, .table = table, .kvh = 1,
                                  .n_head_kv = s.n_head_kv, .hd = s.hd};
            const int nsel = cpu_sparse_select(&sel, 0.125f, scr, blocks, pages, &shift);
            CHECK(nsel == 4 && blocks[0] == 0 && blocks[2] == 8 && blocks[3] == 9);
            chosen += nsel == 4 && blocks[1] == planted;
            tried++;
            fx_free(&f);
            fx_new(&f, &s);
            run(&f, &s, q, k, v, 0, n, n, -1, od); /* dense */
            for (int e = 0; e < s.hd; e++) {
                const size_t i = (size_t)(n - 1) * qd + (size_t)(group + head) * s.hd + e;
                worst = fmax(worst, fabs((double)os[i] - od[i]));
            }
            fx_free(&f);
        }
    printf("  planted page chosen %d of %d times; its head's output within %.2e of dense\n", chosen, tried, worst);
    CHECK(chosen == tried);
    /* dense puts ~2% of the row's mass (keys of ~N(0, 0.3) scores) on the 5 pages skipped, beside
     * 16 keys at exp(5.3): |sparse - dense| <= 2 * dropped mass * max |v| ~ 0.05 */
    CHECK(worst < 0.05);
    free(q), free(k), free(v), free(od), free(os);
}

/* Every page's summary against the min and max of its first `len` positions' rows as stored. */
static int summaries_match(const fixture *f, const shape *s, int len) {
    const int kvd = s->n_head_kv * s->hd;
    const size_t rb = row_bytes(s);
    float row[512];
    int bad = 0;
    for (int b = 0; b * BS < len; b++) {
        const int rows = len - b * BS < BS ? len - b * BS : BS;
        float mn[512], mx[512];
        for (int r = 0; r < rows; r++) {
            const char *src = (const char *)f->kv.k + ((size_t)table[b] * BS + r) * rb;
            if (s->kv_type == BRISK_KV_F16)
                for (int c = 0; c < kvd; c++) row[c] = quant_f16_to_f32(((const uint16_t *)src)[c]);
            else if (s->kv_type == BRISK_KV_F32) memcpy(row, src, sizeof(float) * kvd);
            else quant_dequantize(s->kv_type == BRISK_KV_Q8_0 ? QT_Q8_0 : QT_Q4_0, src, row, kvd);
            for (int c = 0; c < kvd; c++) {
                mn[c] = r ? fminf(mn[c], row[c]) : row[c];
                mx[c] = r ? fmaxf(mx[c], row[c]) : row[c];
            }
        }
        const float *sm = f->ksum + (size_t)table[b] * 2 * kvd;
        int same = 1; /* ==, not memcmp: a q4_0 row may hold -0 and 0 in one channel, either is the min */
        for (int c = 0; c < kvd; c++) same &= sm[c] == mn[c] && sm[kvd + c] == mx[c];
        bad += !same;
    }
    return bad;
}

static void test_summaries_brute_force(void) {
    static const shape shapes[] = {{4, 2, 64, BRISK_KV_F16}, {4, 2, 64, BRISK_KV_Q8_0}, {4, 2, 64, BRISK_KV_Q4_0H},
                                   {2, 1, 128, BRISK_KV_F32}};
    static const int chunks[] = {5, 16, 1, 1, 30, 7, 19, 2, 40, 9}; /* 130 positions */
    for (size_t si = 0; si < sizeof shapes / sizeof shapes[0]; si++) {
        const shape *s = &shapes[si];
        const int n = 130, kvd = s->n_head_kv * s->hd, qd = s->n_head * s->hd;
        float *q = malloc(sizeof(float) * n * qd), *k = malloc(sizeof(float) * n * kvd), *v = malloc(sizeof(float) * n * kvd);
        float *o = calloc((size_t)n * qd, sizeof(float));
        fill(q, (size_t)n * qd, 1), fill(k, (size_t)n * kvd, 3), fill(v, (size_t)n * kvd, 1);
        fixture f;
        fx_new(&f, s);
        int p = 0, bad = 0;
        for (size_t c = 0; c < sizeof chunks / sizeof chunks[0]; c++) {
            run(&f, s, q + (size_t)p * qd, k + (size_t)p * kvd, v + (size_t)p * kvd, p, chunks[c], chunks[c], 3,
                o + (size_t)p * qd);
            p += chunks[c];
            bad += summaries_match(&f, s, p);
        }
        /* truncate to 37 (mid page 2) and write 14 new positions: pages 2 and 3 hold new rows */
        fill(k + 37 * (size_t)kvd, 14 * (size_t)kvd, 0.25f);
        run(&f, s, q + 37 * (size_t)qd, k + 37 * (size_t)kvd, v + 37 * (size_t)kvd, 37, 14, 14, 3, o);
        bad += summaries_match(&f, s, 51);
        if (bad) printf("  %s: %d pages' summaries differ from brute force\n", type_name(s->kv_type), bad);
        CHECK(bad == 0);
        fx_free(&f);
        free(q), free(k), free(v), free(o);
    }
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"exact_when_all_pages", test_exact_when_all_pages},
        {"chosen_pages_exact", test_chosen_pages_exact},
        {"planted_page_chosen", test_planted_page_chosen},
        {"summaries_brute_force", test_summaries_brute_force},
    };
    return test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
