/* test_shard.c — tensor-parallel sharding on the CPU (issue 7's math, checked
 * where no multi-GPU machine is needed): one decoder layer (q/k/v, RoPE,
 * paged-cache attention, output projection, residual, SwiGLU FFN, residual)
 * computed whole and as N ranks (q/k/v/gate/up split by rows on whole heads,
 * output and down projections split by columns, partial outputs summed as
 * the all-reduce would). Each rank's q/k/v rows equal the whole product's
 * bit for bit; the layer output agrees within 1e-5 (only the order of the
 * final sums differs). F32, Q8_0 and Q4_K weights; 2 and 4 ranks; GQA with
 * more and with fewer KV heads than ranks.
 *
 * A MoE layer's experts placed by expert (SHARD_EXPERTS): moe_ffn skips the
 * slots whose id is -1 exactly (bit for bit the sum over the other slots),
 * and the ranks' moe_ffn over their expert slices, ids made local by
 * moe_ids_local, sum to the whole layer's output.
 *
 * A gathered shard (shard_gather, qwen35's Gated DeltaNet heads): the rank's
 * slice of every block of rows or columns, packed in block order. */
#include <math.h>
#include <stdint.h>

#include "backend/backend.h"
#include "engine/shard.h"
#include "quant/quant.h"
#include "test.h"

static bk_backend *be;
static uint32_t rng = 12345;
static float frand(void) {
    rng = rng * 1664525u + 1013904223u;
    return (float)((rng >> 8) & 0xFFFF) / 32768.0f - 1.0f;
}

typedef struct {
    int d, n_head, n_head_kv, hd, n_ff;
} dims;

static bk_weight make_w(const char *name, uint32_t type, int64_t n_in, int64_t n_out, float scale) {
    size_t rb = quant_row_size(type, n_in);
    char *data = malloc(rb * (size_t)n_out);
    float *row = malloc((size_t)n_in * sizeof(float));
    for (int64_t r = 0; r < n_out; r++) {
        for (int64_t i = 0; i < n_in; i++) row[i] = frand() * scale;
        if (type == QT_F32) memcpy(data + r * rb, row, rb);
        else quant_quantize(type, row, data + r * rb, n_in);
    }
    free(row);
    bk_weight w = {.name = name, .type = type, .n_in = n_in, .n_out = n_out, .row_bytes = rb, .host = data};
    return w;
}

typedef struct {
    bk_weight wq, wk, wv, wo, wg, wu, wd;
} layer;

static float *buf(size_t n) { return calloc(n, sizeof(float)); }

/* out (n, d) = x + attn(x) then + ffn: the layer with the given (possibly sharded) weights and heads;
 * with partial set, writes only this rank's partial sums of the two column-split products instead. */
static void attn_part(const layer *L, const dims *D, int n_head, int n_head_kv, const float *x, int n, float *o_part) {
    const bk_rope_params rp = {.n_rot = D->hd, .mode = BK_ROPE_NEOX, .freq_base = 10000.0f, .freq_scale = 1.0f,
                               .attn_factor = 1.0f, .beta_fast = 32, .beta_slow = 1, .n_ctx_orig = 4096};
    int qd = n_head * D->hd, kvd = n_head_kv * D->hd;
    float *q = buf((size_t)n * qd), *k = buf((size_t)n * kvd), *v = buf((size_t)n * kvd), *att = buf((size_t)n * qd);
    const bk_weight *w3[3] = {&L->wq, &L->wk, &L->wv};
    float *y3[3] = {q, k, v};
    be->ops->matmul(be, 3, w3, NULL, x, n, y3);
    int32_t pos[16], slot[16];
    const int32_t table[1] = {0};
    const int32_t *tables[16];
    for (int i = 0; i < n; i++) {
        pos[i] = i;
        slot[i] = i;
        tables[i] = table;
    }
    be->ops->rope(be, q, n, n_head, D->hd, pos, &rp);
    be->ops->rope(be, k, n, n_head_kv, D->hd, pos, &rp);
    void *kc = NULL, *vc = NULL;
    CHECK_OK(be->ops->alloc(be, (size_t)16 * kvd * sizeof(float), &kc));
    CHECK_OK(be->ops->alloc(be, (size_t)16 * kvd * sizeof(float), &vc));
    bk_kv_view kv = {.k = kc, .v = vc, .kv_type = BRISK_KV_F32, .block_size = 16};
    bk_attn_batch ab = {.n_tokens = n, .pos = pos, .slot = slot, .block_table = tables};
    be->ops->attention(be, q, k, v, &kv, &ab, n_head, n_head_kv, D->hd, 1.0f / sqrtf((float)D->hd), att);
    const bk_weight *wo = &L->wo;
    be->ops->matmul(be, 1, &wo, NULL, att, n, &o_part);
    be->ops->release(be, kc);
    be->ops->release(be, vc);
    free(q); free(k); free(v); free(att);
}

static void ffn_part(const layer *L, const dims *D, int n_ff, const float *x, int n, float *f_part) {
    float *g = buf((size_t)n * n_ff), *u = buf((size_t)n * n_ff);
    const bk_weight *w2[2] = {&L->wg, &L->wu};
    float *y2[2] = {g, u};
    be->ops->matmul(be, 2, w2, NULL, x, n, y2);
    be->ops->swiglu(be, g, u, g, (size_t)n * n_ff);
    const bk_weight *wd = &L->wd;
    be->ops->matmul(be, 1, &wd, NULL, g, n, &f_part);
    free(g); free(u);
    (void)D;
}

static double rel_err(const float *a, const float *b, size_t n) {
    double num = 0, den = 0;
    for (size_t i = 0; i < n; i++) {
        num += ((double)a[i] - b[i]) * ((double)a[i] - b[i]);
        den += (double)b[i] * b[i];
    }
    return sqrt(num / (den > 0 ? den : 1));
}

static void check_layer(uint32_t type, int n_ranks, dims D) {
    const int n = 5, qd = D.n_head * D.hd, kvd = D.n_head_kv * D.hd;
    layer L = {make_w("wq", type, D.d, qd, 0.1f), make_w("wk", type, D.d, kvd, 0.1f), make_w("wv", type, D.d, kvd, 0.1f),
               make_w("wo", type, qd, D.d, 0.1f), make_w("wg", type, D.d, D.n_ff, 0.1f),
               make_w("wu", type, D.d, D.n_ff, 0.1f), make_w("wd", type, D.n_ff, D.d, 0.1f)};
    float *x = buf((size_t)n * D.d), *o = buf((size_t)n * D.d), *x1 = buf((size_t)n * D.d), *f = buf((size_t)n * D.d);
    float *ref = buf((size_t)n * D.d), *got = buf((size_t)n * D.d), *part = buf((size_t)n * D.d);
    for (int i = 0; i < n * D.d; i++) x[i] = frand();
    /* whole */
    attn_part(&L, &D, D.n_head, D.n_head_kv, x, n, o);
    for (int i = 0; i < n * D.d; i++) x1[i] = x[i] + o[i];
    ffn_part(&L, &D, D.n_ff, x1, n, f);
    for (int i = 0; i < n * D.d; i++) ref[i] = x1[i] + f[i];
    /* ranks: attention partials summed (all-reduce), then FFN partials summed */
    float *q_whole = buf((size_t)n * qd), *q_rank = buf((size_t)n * qd);
    const bk_weight *wq = &L.wq;
    be->ops->matmul(be, 1, &wq, NULL, x, n, &q_whole);
    memcpy(x1, x, (size_t)n * D.d * sizeof(float));
    bool q_exact = true;
    for (int r = 0; r < n_ranks; r++) {
        shard_heads sh;
        CHECK_OK(shard_heads_for(D.n_head, D.n_head_kv, r, n_ranks, &sh));
        layer S = L;
        CHECK_OK(shard_weight(&L.wq, SHARD_ROWS, r, n_ranks, D.hd, &S.wq));
        int kv_rank = sh.kv_replicated ? sh.kv_first : r, kv_ranks = sh.kv_replicated ? D.n_head_kv : n_ranks;
        CHECK_OK(shard_weight(&L.wk, SHARD_ROWS, kv_rank, kv_ranks, D.hd, &S.wk));
        CHECK_OK(shard_weight(&L.wv, SHARD_ROWS, kv_rank, kv_ranks, D.hd, &S.wv));
        CHECK_OK(shard_weight(&L.wo, SHARD_COLS, r, n_ranks, D.hd, &S.wo));
        /* this rank's q rows are the whole product's, bit for bit */
        const bk_weight *sq = &S.wq;
        be->ops->matmul(be, 1, &sq, NULL, x, n, &q_rank);
        for (int t = 0; t < n; t++)
            if (memcmp(q_rank + (size_t)t * sh.n_head * D.hd, q_whole + (size_t)t * qd + (size_t)r * sh.n_head * D.hd,
                       (size_t)sh.n_head * D.hd * sizeof(float)))
                q_exact = false;
        attn_part(&S, &D, sh.n_head, sh.n_head_kv, x, n, part);
        for (int i = 0; i < n * D.d; i++) x1[i] += part[i];
    }
    CHECK(q_exact);
    memcpy(got, x1, (size_t)n * D.d * sizeof(float));
    for (int r = 0; r < n_ranks; r++) {
        layer S = L;
        CHECK_OK(shard_weight(&L.wg, SHARD_ROWS, r, n_ranks, 1, &S.wg));
        CHECK_OK(shard_weight(&L.wu, SHARD_ROWS, r, n_ranks, 1, &S.wu));
        CHECK_OK(shard_weight(&L.wd, SHARD_COLS, r, n_ranks, 1, &S.wd));
        ffn_part(&S, &D, D.n_ff / n_ranks, x1, n, part);
        for (int i = 0; i < n * D.d; i++) got[i] += part[i];
    }
    double e = rel_err(got, ref, (size_t)n * D.d);
    if (!(e <= 1e-5))
        fprintf(stderr, "  %s, %d ranks, heads %d/%d: rel err %.2e\n", quant_type_name(type), n_ranks, D.n_head,
                D.n_head_kv, e);
    CHECK(e <= 1e-5);
    const bk_weight *ws[7] = {&L.wq, &L.wk, &L.wv, &L.wo, &L.wg, &L.wu, &L.wd};
    for (int i = 0; i < 7; i++) free((void *)ws[i]->host);
    free(x); free(o); free(x1); free(f); free(ref); free(got); free(part); free(q_whole); free(q_rank);
}

static void test_layer(void) {
    dims gqa = {.d = 256, .n_head = 8, .n_head_kv = 4, .hd = 64, .n_ff = 1024};
    dims few_kv = {.d = 256, .n_head = 8, .n_head_kv = 2, .hd = 64, .n_ff = 1024};
    check_layer(QT_F32, 2, gqa);
    check_layer(QT_F32, 4, gqa);
    check_layer(QT_F32, 4, few_kv); /* 2 KV heads, 4 ranks: each KV head on two ranks */
    check_layer(QT_Q8_0, 2, gqa);
    check_layer(QT_Q8_0, 4, few_kv);
    check_layer(QT_Q4_K, 2, gqa);  /* column halves of 256: whole 256-blocks */
}

/* ---- experts placed by expert ---- */
/* (n, k) routing of n tokens over ne experts: k distinct ids a token, positive weights. */
static void route(int n, int ne, int k, int32_t *ids, float *w) {
    for (int t = 0; t < n; t++)
        for (int j = 0; j < k; j++) {
            int32_t e;
            bool taken;
            do {
                rng = rng * 1664525u + 1013904223u;
                e = (int32_t)((rng >> 8) % (uint32_t)ne);
                taken = false;
                for (int q = 0; q < j; q++) taken |= ids[t * k + q] == e;
            } while (taken);
            ids[t * k + j] = e;
            w[t * k + j] = 0.25f + 0.5f * (frand() + 1.0f);
        }
}

static void make_experts(uint32_t type, int d, int ff, int ne, bk_weight w[3]) {
    w[0] = make_w("gate_exps", type, d, (int64_t)ne * ff, 0.1f);
    w[1] = make_w("up_exps", type, d, (int64_t)ne * ff, 0.1f);
    w[2] = make_w("down_exps", type, ff, (int64_t)ne * d, 0.1f);
    for (int i = 0; i < 3; i++) w[i].n_expert = ne;
}

/* moe_ffn with some slots' ids -1 equals moe_ffn over the other slots alone, bit for bit (every
 * product is computed on its own and the kept slots are summed in the same order); a token whose
 * slots are all -1 gets 0. */
static void test_moe_skip(void) {
    enum { D = 256, FF = 128, NE = 8, K = 4, N = 6 };
    static const int keep[N][2] = {{0, 1}, {0, 3}, {1, 2}, {2, 3}, {1, 3}, {0, 2}};
    bk_weight w[3];
    make_experts(QT_Q8_0, D, FF, NE, w);
    int32_t ids[N * K], skip[N * K], ids2[N * 2];
    float wt[N * K], wt2[N * 2];
    route(N, NE, K, ids, wt);
    for (int t = 0; t < N; t++)
        for (int j = 0; j < K; j++) {
            bool kept = j == keep[t][0] || j == keep[t][1];
            skip[t * K + j] = kept ? ids[t * K + j] : -1;
            if (kept) {
                int c = j == keep[t][0] ? 0 : 1;
                ids2[t * 2 + c] = ids[t * K + j];
                wt2[t * 2 + c] = wt[t * K + j];
            }
        }
    float *x = buf((size_t)N * D), *a = buf((size_t)N * D), *b = buf((size_t)N * D);
    for (int i = 0; i < N * D; i++) x[i] = frand();
    be->ops->moe_ffn(be, &w[0], &w[1], &w[2], x, N, skip, wt, K, a);
    be->ops->moe_ffn(be, &w[0], &w[1], &w[2], x, N, ids2, wt2, 2, b);
    CHECK(!memcmp(a, b, (size_t)N * D * sizeof(float)));
    for (int j = 0; j < K; j++) skip[K + j] = -1; /* token 1: nothing here */
    be->ops->moe_ffn(be, &w[0], &w[1], &w[2], x, N, skip, wt, K, a);
    bool zero = true;
    for (int i = 0; i < D; i++) zero &= a[D + i] == 0.0f;
    CHECK(zero);
    CHECK(!memcmp(a, b, D * sizeof(float)) && !memcmp(a + 2 * D, b + 2 * D, (size_t)(N - 2) * D * sizeof(float)));
    for (int i = 0; i < 3; i++) free((void *)w[i].host);
    free(x); free(a); free(b);
}

/* The whole layer's moe_ffn against the sum over n_ranks ranks of moe_ffn on each rank's expert
 * slice, its ids made local by moe_ids_local (k = 3 exceeds the 2 experts a rank holds at 4
 * ranks: the slots of other ranks' experts are -1). Only the order of the final sums differs. */
static void check_experts(uint32_t type, int n_ranks) {
    enum { D = 256, FF = 256, NE = 8, K = 3, N = 5 }; /* FF: whole Q4_K blocks for down's rows */
    bk_weight w[3];
    make_experts(type, D, FF, NE, w);
    int32_t ids[N * K], loc[N * K];
    float wt[N * K];
    route(N, NE, K, ids, wt);
    float *x = buf((size_t)N * D), *ref = buf((size_t)N * D), *got = buf((size_t)N * D), *part = buf((size_t)N * D);
    for (int i = 0; i < N * D; i++) x[i] = frand();
    be->ops->moe_ffn(be, &w[0], &w[1], &w[2], x, N, ids, wt, K, ref);
    int per = NE / n_ranks;
    bool ids_ok = true;
    for (int r = 0; r < n_ranks; r++) {
        bk_weight s[3];
        for (int i = 0; i < 3; i++) {
            CHECK_OK(shard_weight(&w[i], SHARD_EXPERTS, r, n_ranks, 1, &s[i]));
            CHECK(s[i].n_expert == per && s[i].n_out == w[i].n_out / n_ranks && s[i].row_bytes == w[i].row_bytes &&
                  s[i].host == (const char *)w[i].host + (size_t)(r * s[i].n_out) * w[i].row_bytes);
        }
        memcpy(loc, ids, sizeof ids);
        be->ops->moe_ids_local(be, loc, N * K, r * per, (r + 1) * per);
        for (int i = 0; i < N * K; i++)
            ids_ok &= loc[i] == (ids[i] >= r * per && ids[i] < (r + 1) * per ? ids[i] - r * per : -1);
        be->ops->moe_ffn(be, &s[0], &s[1], &s[2], x, N, loc, wt, K, part);
        for (int i = 0; i < N * D; i++) got[i] += part[i];
    }
    CHECK(ids_ok);
    double e = rel_err(got, ref, (size_t)N * D);
    if (!(e <= 1e-6)) fprintf(stderr, "  experts %s, %d ranks: rel err %.2e\n", quant_type_name(type), n_ranks, e);
    CHECK(e <= 1e-6);
    for (int i = 0; i < 3; i++) free((void *)w[i].host);
    free(x); free(ref); free(got); free(part);
}

static void test_experts(void) {
    check_experts(QT_F32, 2);
    check_experts(QT_F32, 4);
    check_experts(QT_Q8_0, 4);
    check_experts(QT_Q4_K, 2);
}

static void test_errors(void) {
    bk_weight w = make_w("w", QT_Q4_K, 512, 64, 0.1f), out;
    CHECK(shard_weight(&w, SHARD_COLS, 0, 4, 1, &out) == BRISK_ERR_INVALID_ARG); /* 128 columns: half a Q4_K block */
    CHECK(shard_weight(&w, SHARD_ROWS, 0, 3, 1, &out) == BRISK_ERR_INVALID_ARG); /* 64 rows over 3 */
    CHECK(shard_weight(&w, SHARD_ROWS, 4, 4, 1, &out) == BRISK_ERR_INVALID_ARG); /* no rank 4 */
    CHECK_OK(shard_weight(&w, SHARD_ROWS, 3, 4, 16, &out));
    CHECK(out.n_out == 16 && out.host == (const char *)w.host + 48 * w.row_bytes);
    shard_heads sh;
    CHECK(shard_heads_for(8, 3, 0, 2, &sh) == BRISK_ERR_INVALID_ARG);
    CHECK(shard_heads_for(6, 2, 0, 4, &sh) == BRISK_ERR_INVALID_ARG);
    /* experts: whole experts a rank; an expert tensor splits by expert only */
    CHECK(shard_weight(&w, SHARD_EXPERTS, 0, 2, 1, &out) == BRISK_ERR_INVALID_ARG); /* no experts */
    w.n_expert = 4; /* 4 experts of 16 rows */
    CHECK(shard_weight(&w, SHARD_EXPERTS, 0, 3, 1, &out) == BRISK_ERR_INVALID_ARG);
    CHECK(shard_weight(&w, SHARD_ROWS, 0, 2, 1, &out) == BRISK_ERR_UNSUPPORTED);
    CHECK_OK(shard_weight(&w, SHARD_EXPERTS, 1, 2, 1, &out));
    CHECK(out.n_expert == 2 && out.n_out == 32 && out.host == (const char *)w.host + 32 * w.row_bytes);
    free((void *)w.host);
}

/* shard_gather: rows of 3 blocks of 4 two-row heads, and Q8_0 columns of 2 blocks of 2 32-column heads. */
static void test_gather(void) {
    bk_weight w = make_w("w", QT_Q8_0, 64, 24, 1.0f), c = make_w("c", QT_Q8_0, 128, 3, 1.0f), out;
    void *p = NULL;
    CHECK_OK(shard_gather(&w, SHARD_ROWS, 3, 1, 2, 2, &p, &out)); /* rank 1 of 2: heads 2, 3 of each block */
    CHECK(p && out.host == p && out.n_out == 12 && out.n_in == 64 && out.row_bytes == w.row_bytes);
    for (int b = 0; p && b < 3; b++)
        CHECK(!memcmp((char *)p + (size_t)b * 4 * w.row_bytes, (const char *)w.host + (size_t)(b * 8 + 4) * w.row_bytes,
                      4 * w.row_bytes));
    free(p);
    CHECK_OK(shard_gather(&c, SHARD_COLS, 2, 1, 2, 32, &p, &out)); /* columns [32, 64) and [96, 128) */
    CHECK(p && out.n_out == 3 && out.n_in == 64 && out.row_bytes == quant_row_size(QT_Q8_0, 64));
    float whole[128], part[64];
    for (int r = 0; p && r < 3; r++) {
        quant_dequantize(QT_Q8_0, (const char *)c.host + (size_t)r * c.row_bytes, whole, 128);
        quant_dequantize(QT_Q8_0, (const char *)p + (size_t)r * out.row_bytes, part, 64);
        CHECK(!memcmp(part, whole + 32, 32 * sizeof(float)) && !memcmp(part + 32, whole + 96, 32 * sizeof(float)));
    }
    free(p);
    p = NULL;
    CHECK(shard_gather(&c, SHARD_COLS, 2, 0, 4, 1, &p, &out) == BRISK_ERR_INVALID_ARG && !p); /* 16: half a block */
    CHECK(shard_gather(&w, SHARD_ROWS, 3, 0, 3, 2, &p, &out) == BRISK_ERR_INVALID_ARG && !p); /* 8 rows, 3 ranks */
    CHECK(shard_gather(&w, SHARD_ROWS, 5, 0, 2, 1, &p, &out) == BRISK_ERR_INVALID_ARG && !p); /* 24 rows, 5 blocks */
    free((void *)w.host);
    free((void *)c.host);
}

int main(int argc, char **argv) {
    if (bk_cpu_backend_new(2, &be) != BRISK_OK) {
        fprintf(stderr, "cpu backend: %s\n", brisk_last_error());
        return 1;
    }
    static const test_case cases[] = {
        {"layer", test_layer},   {"moe_skip", test_moe_skip}, {"experts", test_experts},
        {"gather", test_gather}, {"errors", test_errors}};
    int rc = test_main(cases, 5, argc, argv);
    be->ops->free(be);
    return rc;
}
