/* cpu_attn_sparse.c — page summaries and page selection for block-sparse attention (cpu_attn_sparse.h). */
#include "backend/cpu/cpu_attn_sparse.h"

#include <math.h>
#include <string.h>

#include "backend/cpu/cpu_attn.h"
#include "quant/quant.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "fp-contract=off")
#endif

/* A K row (hd values of one head) as f32: in place for an f32 cache, else decoded into buf. */
static const float *key_row_f32(const bk_kv_view *kv, const void *row, int hd, float *buf) {
    if (kv->kv_type == BRISK_KV_F16) {
        const uint16_t *h = row;
        for (int i = 0; i < hd; i++) buf[i] = quant_f16_to_f32(h[i]);
        return buf;
    }
    if (bk_kv_block_bytes(kv->kv_type)) {
        quant_dequantize(kv->kv_type == BRISK_KV_Q8_0 ? QT_Q8_0 : QT_Q4_0, row, buf, hd);
        return buf;
    }
    return row;
}

/* ---- summaries ---- */
typedef struct {
    const bk_kv_view *kv;
    const int32_t *pages; /* (n_pages, 2): page id, last offset written */
    int n_pages, n_head_kv, hd;
} sum_job;

static void sum_worker(void *arg, int ith, int nth) {
    const sum_job *j = arg;
    const bk_kv_view *kv = j->kv;
    const int hd = j->hd, kvd = j->n_head_kv * hd;
    float buf[1024]; /* head_dim <= 1024 (checked by the caller) */
    for (long w = ith; w < (long)j->n_pages * j->n_head_kv; w += nth) {
        const int32_t page = j->pages[2 * (w / j->n_head_kv)], last = j->pages[2 * (w / j->n_head_kv) + 1];
        const int kvh = (int)(w % j->n_head_kv);
        float *mn = kv->ksum + (size_t)page * 2 * kvd + (size_t)kvh * hd, *mx = mn + kvd;
        for (int o = 0; o <= last; o++) {
            const int32_t tab = page; /* a one-entry table: position o of page `page` */
            const float *k = key_row_f32(kv, cpu_kv_row(kv, kv->k, &tab, o, kvh, j->n_head_kv, hd), hd, buf);
            if (o == 0) {
                memcpy(mn, k, sizeof(float) * hd);
                memcpy(mx, k, sizeof(float) * hd);
                continue;
            }
            for (int c = 0; c < hd; c++) {
                mn[c] = k[c] < mn[c] ? k[c] : mn[c];
                mx[c] = k[c] > mx[c] ? k[c] : mx[c];
            }
        }
    }
}

void cpu_sparse_summarise(threadpool *tp, const bk_kv_view *kv, const bk_attn_batch *ab, int n_head_kv, int hd,
                          int32_t *pages) {
    if (!kv->ksum || hd > 1024) return;
    const int bs = kv->block_size;
    int n = 0;
    for (int t = 0; t < ab->n_tokens; t++) {
        const int32_t page = ab->slot[t] / bs, off = ab->slot[t] % bs;
        int i = n - 1; /* a batch's tokens of one page are usually adjacent: search from the end */
        while (i >= 0 && pages[2 * i] != page) i--;
        if (i < 0) {
            pages[2 * n] = page;
            pages[2 * n + 1] = off;
            n++;
        } else if (off > pages[2 * i + 1]) {
            pages[2 * i + 1] = off;
        }
    }
    sum_job j = {kv, pages, n, n_head_kv, hd};
    if ((long)n * n_head_kv < 4) sum_worker(&j, 0, 1);
    else threadpool_run(tp, sum_worker, &j);
}

/* ---- selection ---- */
size_t cpu_sparse_scratch_floats(int rows, int nb, int np, int hd) {
    /* selection: nb flags, then the bounds (rows, nb) and two score rows; measuring (after): 2 * nb + hd + np */
    return (size_t)rows * nb + 3 * (size_t)nb + (size_t)np + (size_t)hd + 16;
}

/* max over c of q_c * min_c or q_c * max_c, summed: the largest q.k any key inside the box can give */
static float bound(const float *restrict q, const float *restrict mn, const float *restrict mx, int hd) {
    float s = 0;
    for (int c = 0; c < hd; c++) {
        const float a = q[c] * mn[c], b = q[c] * mx[c];
        s += a > b ? a : b;
    }
    return s == s ? s : -INFINITY; /* NaN (a NaN key or query) ranks last, never derails the selection */
}

/* The k-th largest (0-based) of a[0..n), reordering a (Hoare partition, descending). No NaNs. */
static float kth_largest(float *a, int n, int k) {
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        const float piv = a[lo + (hi - lo) / 2];
        int i = lo, j = hi;
        while (i <= j) {
            while (a[i] > piv) i++;
            while (a[j] < piv) j--;
            if (i <= j) {
                const float t = a[i];
                a[i++] = a[j];
                a[j--] = t;
            }
        }
        if (k <= j) hi = j;
        else if (k >= i) lo = i;
        else return a[k];
    }
    return a[k];
}

/* Scores every candidate page (indices 1 .. n_cand) and marks the want best in take (1 per page):
 * each row's bounds, scaled as the scores are, through a softmax over the candidates (the mass the
 * row would put on each page if its best key reached the bound), summed over the rows. */
static void pick_best(const cpu_sparse_sel *s, float scale, int n_cand, int want, float *scratch, unsigned char *take) {
    const bk_kv_view *kv = s->kv;
    const int hd = s->hd, kvd = s->n_head_kv * hd, rows = s->n_tok * s->group;
    float *u = scratch;                      /* (rows, n_cand) bounds */
    float *score = u + (size_t)rows * n_cand; /* (n_cand) */
    float *tmp = score + n_cand;              /* (n_cand) */
    for (int r = 0; r < rows; r++) {
        const float *q = s->q + (size_t)(r / s->group) * s->tok_stride + (size_t)(r % s->group) * hd;
        float *ur = u + (size_t)r * n_cand, top = -INFINITY;
        for (int b = 0; b < n_cand; b++) {
            const float *mn = kv->ksum + (size_t)s->table[b + 1] * 2 * kvd + (size_t)s->kvh * hd;
            ur[b] = bound(q, mn, mn + kvd, hd);
            if (ur[b] > top) top = ur[b];
        }
        double sum = 0;
        for (int b = 0; b < n_cand; b++) {
            const float v = expf((ur[b] - top) * scale); /* -inf - -inf is NaN: every bound was -inf */
            sum += ur[b] = v == v ? v : 0.0f;
        }
        const float inv = sum > 0 ? (float)(1.0 / sum) : 0.0f;
        for (int b = 0; b < n_cand; b++) ur[b] *= inv;
    }
    for (int b = 0; b < n_cand; b++) {
        float m = 0;
        for (int r = 0; r < rows; r++) m += u[(size_t)r * n_cand + b];
        score[b] = tmp[b] = m;
    }
    const float thr = kth_largest(tmp, n_cand, want - 1);
    int n = 0;
    for (int b = 0; b < n_cand; b++) n += take[b] = score[b] > thr;
    for (int b = 0; b < n_cand && n < want; b++) /* ties at the threshold: the earliest pages */
        if (score[b] == thr) take[b] = 1, n++;
}

/* The true attention of the group's rows (dense, from the cache) against the choice: the counters of
 * cpu_attn_sparse.h. Only for measuring: it reads every key. */
static void measure(const cpu_sparse_sel *s, float scale, int nb, const int32_t *blocks, int n, float *scratch) {
    const bk_kv_view *kv = s->kv;
    const int hd = s->hd, bs = kv->block_size;
    float *mass = scratch, *tmp = mass + nb, *kbuf = tmp + nb, *sc = kbuf + hd;
    memset(mass, 0, sizeof(float) * nb);
    for (int r = 0; r < s->n_tok * s->group; r++) {
        const float *q = s->q + (size_t)(r / s->group) * s->tok_stride + (size_t)(r % s->group) * hd;
        const int np = s->pos[r / s->group] + 1;
        float mx = -INFINITY;
        for (int p = 0; p < np; p++) {
            const float *k = key_row_f32(kv, cpu_kv_row(kv, kv->k, s->table, p, s->kvh, s->n_head_kv, hd), hd, kbuf);
            float d = 0;
            for (int c = 0; c < hd; c++) d += q[c] * k[c];
            sc[p] = d * scale;
            if (sc[p] > mx) mx = sc[p];
        }
        double sum = 0;
        for (int p = 0; p < np; p++) sum += sc[p] = expf(sc[p] - mx);
        for (int p = 0; p < np; p++) mass[p / bs] += (float)(sc[p] / sum);
    }
    double total = 0, got = 0;
    for (int b = 0; b < nb; b++) total += tmp[b] = mass[b];
    const float thr = kth_largest(tmp, nb, n - 1);
    int64_t hits = 0;
    for (int i = 0; i < n; i++) {
        got += mass[blocks[i]];
        hits += mass[blocks[i]] >= thr;
    }
    double best = 0;
    int n_above = 0;
    for (int b = 0; b < nb; b++)
        if (mass[b] > thr) best += mass[b], n_above++;
    best += (double)(n - n_above) * thr; /* ties at the threshold fill the rest */
    int64_t *st = kv->sparse_stats;
    __atomic_fetch_add(&st[CPU_SPARSE_HITS], hits < n ? hits : n, __ATOMIC_RELAXED);
    __atomic_fetch_add(&st[CPU_SPARSE_WANTED], (int64_t)n, __ATOMIC_RELAXED);
    __atomic_fetch_add(&st[CPU_SPARSE_MASS], (int64_t)llround(total > 0 ? got / total * 1e9 : 1e9), __ATOMIC_RELAXED);
    __atomic_fetch_add(&st[CPU_SPARSE_MASS_BEST], (int64_t)llround(total > 0 ? best / total * 1e9 : 1e9),
                       __ATOMIC_RELAXED);
    __atomic_fetch_add(&st[CPU_SPARSE_GROUPS], (int64_t)1, __ATOMIC_RELAXED);
}

int cpu_sparse_select(const cpu_sparse_sel *s, float scale, float *scratch, int32_t *blocks, int32_t *pages,
                      int *shift) {
    const int bs = s->kv->block_size;
    int32_t lo = s->pos[0], hi = s->pos[0];
    for (int i = 1; i < s->n_tok; i++) {
        lo = s->pos[i] < lo ? s->pos[i] : lo;
        hi = s->pos[i] > hi ? s->pos[i] : hi;
    }
    const int nb = hi / bs + 1, fb = lo / bs;
    /* always read: page 0 (the sink) and pages local0 .. nb-1 (the page before the first token's and on) */
    const int local0 = fb - 1 < 1 ? 1 : fb - 1;
    const int n_cand = local0 < nb ? local0 - 1 : 0, n_forced = nb - n_cand;
    int want = s->kv->sparse_k - n_forced;
    want = want < 0 ? 0 : want > n_cand ? n_cand : want;
    unsigned char *take = (unsigned char *)scratch; /* (n_cand) flags */
    if (want == n_cand) memset(take, 1, (size_t)n_cand);
    else if (want == 0) memset(take, 0, (size_t)n_cand);
    else pick_best(s, scale, n_cand, want, scratch + nb, take);
    int n = 0;
    blocks[n++] = 0;
    for (int b = 0; b < n_cand; b++)
        if (take[b]) blocks[n++] = b + 1;
    for (int b = local0; b < nb; b++) blocks[n++] = b;
    for (int i = 0; i < n; i++) pages[i] = s->table[blocks[i]];
    if (s->kv->sparse_stats && n < nb) measure(s, scale, nb, blocks, n, scratch);
    *shift = (nb - n) * bs;
    return n;
}
