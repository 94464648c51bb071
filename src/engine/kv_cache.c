#include "engine/kv_cache.h"

#include <stdlib.h>
#include <string.h>

#include "base/status.h"

typedef struct kv_seq {
    int32_t *pages; /* (max_pages) page ids */
    int n_pages;    /* pages in use */
    int32_t len;    /* cached positions */
} kv_seq;

struct kv_cache {
    bk_backend **be;   /* (n_layer) the backend of each layer's pools */
    int n_layer, kv_dim, block_size, n_pages, max_pages, n_seq_max, n_ctx;
    brisk_kv_type type;
    size_t page_bytes; /* bytes of one page of one layer's K (or V) */
    void **k, **v;     /* (n_layer) -> (n_pages, block_size, kv_dim) */
    int32_t *refs;     /* (n_pages) */
    int32_t *free_ids; /* stack of free page ids */
    int n_free;
    kv_seq *seqs;      /* (n_seq_max) */
    float **ksum;      /* (n_layer) -> (n_pages, 2, kv_dim) page key summaries, or NULL: dense attention */
    int sparse_k;      /* pages per query group (kv_cache_enable_sparse) */
    int64_t *stats;    /* (n_layer, KV_SPARSE_N_STATS) recall counters, or NULL */
};

brisk_status kv_cache_new(bk_backend *const *be, int n_layer, int kv_dim, int n_ctx, int n_seq_max,
                          int block_size, brisk_kv_type type, kv_cache **out) {
    *out = NULL;
    if (n_ctx < 1 || n_seq_max < 1 || block_size < 1 || block_size > 4096)
        return bk_fail(BRISK_ERR_INVALID_ARG, "kv cache: bad sizes (ctx %d, seqs %d, block %d)", n_ctx,
                       n_seq_max, block_size);
    kv_cache *kc = calloc(1, sizeof *kc);
    if (!kc) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    kc->n_layer = n_layer;
    kc->kv_dim = kv_dim;
    kc->block_size = block_size;
    kc->n_ctx = n_ctx;
    kc->n_seq_max = n_seq_max;
    kc->type = type;
    kc->max_pages = (n_ctx + block_size - 1) / block_size;
    /* One spare page per sequence for partially filled tails (kv_cache_size_for counts the same). */
    kc->n_pages = kc->max_pages + (n_seq_max > 1 ? n_seq_max : 0);
    kc->page_bytes = (size_t)block_size * kv_cache_row_bytes(type, kv_dim);
    kc->be = calloc((size_t)n_layer + 1, sizeof *kc->be);
    kc->k = calloc((size_t)n_layer + 1, sizeof *kc->k); /* + 1: a pipeline rank may hold no attention layer */
    kc->v = calloc((size_t)n_layer + 1, sizeof *kc->v);
    kc->refs = calloc((size_t)kc->n_pages, sizeof *kc->refs);
    kc->free_ids = calloc((size_t)kc->n_pages, sizeof *kc->free_ids);
    kc->seqs = calloc((size_t)n_seq_max, sizeof *kc->seqs);
    if (!kc->be || !kc->k || !kc->v || !kc->refs || !kc->free_ids || !kc->seqs) goto oom;
    for (int s = 0; s < n_seq_max; s++) {
        kc->seqs[s].pages = calloc((size_t)kc->max_pages, sizeof(int32_t));
        if (!kc->seqs[s].pages) goto oom;
    }
    for (int l = 0; l < n_layer; l++) {
        kc->be[l] = be[l];
        brisk_status st = be[l]->ops->alloc(be[l], kc->page_bytes * kc->n_pages, &kc->k[l]);
        if (st == BRISK_OK) st = be[l]->ops->alloc(be[l], kc->page_bytes * kc->n_pages, &kc->v[l]);
        if (st != BRISK_OK) {
            kv_cache_free(kc);
            return bk_wrap(st, "kv cache (%zu MiB)",
                           (kc->page_bytes * kc->n_pages * 2 * n_layer) >> 20);
        }
    }
    for (int p = 0; p < kc->n_pages; p++) kc->free_ids[p] = kc->n_pages - 1 - p;
    kc->n_free = kc->n_pages;
    *out = kc;
    return BRISK_OK;
oom:
    kv_cache_free(kc);
    return bk_fail(BRISK_ERR_NOMEM, "kv cache: out of memory");
}

size_t kv_cache_row_bytes(brisk_kv_type type, int kv_dim) {
    size_t bb = bk_kv_block_bytes(type);
    return bb ? (size_t)kv_dim / 32 * bb : (size_t)kv_dim * (type == BRISK_KV_F16 ? 2 : 4);
}

size_t kv_cache_size_for(int n_layer, int kv_dim, int n_ctx, int n_seq_max, int block_size, brisk_kv_type type) {
    if (n_ctx < 1 || n_seq_max < 1 || block_size < 1) return 0;
    size_t max_pages = (size_t)(n_ctx + block_size - 1) / block_size;
    size_t n_pages = max_pages + (n_seq_max > 1 ? (size_t)n_seq_max : 0);
    return (size_t)block_size * kv_cache_row_bytes(type, kv_dim) * n_pages * 2 * (size_t)n_layer;
}

void kv_cache_free(kv_cache *kc) {
    if (!kc) return;
    for (int l = 0; l < kc->n_layer; l++) {
        if (kc->k && kc->k[l]) kc->be[l]->ops->release(kc->be[l], kc->k[l]);
        if (kc->v && kc->v[l]) kc->be[l]->ops->release(kc->be[l], kc->v[l]);
    }
    if (kc->seqs)
        for (int s = 0; s < kc->n_seq_max; s++) free(kc->seqs[s].pages);
    if (kc->ksum)
        for (int l = 0; l < kc->n_layer; l++)
            if (kc->ksum[l]) kc->be[l]->ops->release(kc->be[l], kc->ksum[l]);
    free(kc->ksum);
    free(kc->stats);
    free(kc->seqs);
    free(kc->be);
    free(kc->k);
    free(kc->v);
    free(kc->refs);
    free(kc->free_ids);
    free(kc);
}

bk_kv_view kv_cache_view(const kv_cache *kc, int layer) {
    bk_kv_view v = {.k = kc->k[layer], .v = kc->v[layer], .kv_type = kc->type, .block_size = kc->block_size};
    if (kc->ksum && layer < kc->n_layer) {
        v.ksum = kc->ksum[layer];
        v.sparse_k = kc->sparse_k;
        v.sparse_stats = kc->stats ? kc->stats + KV_SPARSE_N_STATS * (size_t)layer : NULL;
    }
    return v;
}

brisk_status kv_cache_enable_sparse(kv_cache *kc, int top_k, bool measure) {
    if (top_k < 1) return bk_fail(BRISK_ERR_INVALID_ARG, "block-sparse attention: %d pages per query (at least 1)", top_k);
    if (kc->ksum) return bk_fail(BRISK_ERR_INVALID_ARG, "block-sparse attention: already enabled");
    kc->ksum = calloc((size_t)kc->n_layer + 1, sizeof *kc->ksum);
    if (!kc->ksum || (measure && !(kc->stats = calloc(KV_SPARSE_N_STATS * ((size_t)kc->n_layer + 1), sizeof *kc->stats))))
        return bk_fail(BRISK_ERR_NOMEM, "kv cache: out of memory");
    const size_t bytes = (size_t)kc->n_pages * 2 * kc->kv_dim * sizeof(float);
    for (int l = 0; l < kc->n_layer; l++) {
        brisk_status st = kc->be[l]->ops->alloc(kc->be[l], bytes, (void **)&kc->ksum[l]);
        if (st != BRISK_OK) return bk_wrap(st, "page key summaries (%zu MiB)", (bytes * kc->n_layer) >> 20);
    }
    kc->sparse_k = top_k;
    return BRISK_OK;
}

bool kv_cache_sparse_stats(const kv_cache *kc, int64_t stats[KV_SPARSE_N_STATS]) {
    if (!kc->stats) return false;
    for (int i = 0; i < KV_SPARSE_N_STATS; i++) {
        stats[i] = 0;
        for (int l = 0; l < kc->n_layer; l++)
            stats[i] += __atomic_load_n(&kc->stats[KV_SPARSE_N_STATS * (size_t)l + i], __ATOMIC_RELAXED);
    }
    return true;
}

size_t kv_cache_bytes(const kv_cache *kc) { return kc->page_bytes * kc->n_pages * 2 * kc->n_layer; }
int kv_cache_pages_used(const kv_cache *kc) { return kc->n_pages - kc->n_free; }
int kv_cache_n_pages(const kv_cache *kc) { return kc->n_pages; }

static brisk_status check_seq(const kv_cache *kc, int seq) {
    if (seq < 0 || seq >= kc->n_seq_max)
        return bk_fail(BRISK_ERR_INVALID_ARG, "sequence id %d out of range [0, %d)", seq, kc->n_seq_max);
    return BRISK_OK;
}

int32_t kv_cache_seq_len(const kv_cache *kc, int seq) {
    return seq >= 0 && seq < kc->n_seq_max ? kc->seqs[seq].len : 0;
}

const int32_t *kv_cache_table(const kv_cache *kc, int seq) { return kc->seqs[seq].pages; }

static void page_unref(kv_cache *kc, int32_t p) {
    if (--kc->refs[p] == 0) kc->free_ids[kc->n_free++] = p;
}

static brisk_status page_new(kv_cache *kc, int32_t *p) {
    if (kc->n_free == 0)
        return bk_fail(BRISK_ERR_RANGE, "kv cache full (%d pages of %d tokens in use)", kc->n_pages,
                       kc->block_size);
    *p = kc->free_ids[--kc->n_free];
    kc->refs[*p] = 1;
    return BRISK_OK;
}

static void page_copy(kv_cache *kc, int32_t dst, int32_t src) {
    for (int l = 0; l < kc->n_layer; l++) {
        bk_backend *be = kc->be[l];
        be->ops->copy(be, (char *)kc->k[l] + dst * kc->page_bytes, (char *)kc->k[l] + src * kc->page_bytes,
                      kc->page_bytes);
        be->ops->copy(be, (char *)kc->v[l] + dst * kc->page_bytes, (char *)kc->v[l] + src * kc->page_bytes,
                      kc->page_bytes);
    }
}

brisk_status kv_cache_seq_truncate(kv_cache *kc, int seq, int32_t len) {
    BK_TRY(check_seq(kc, seq));
    kv_seq *s = &kc->seqs[seq];
    if (len < 0) len = 0;
    if (len >= s->len) return BRISK_OK;
    int keep = (len + kc->block_size - 1) / kc->block_size;
    while (s->n_pages > keep) page_unref(kc, s->pages[--s->n_pages]);
    s->len = len;
    return BRISK_OK;
}

brisk_status kv_cache_seq_clear(kv_cache *kc, int seq) { return kv_cache_seq_truncate(kc, seq, 0); }

brisk_status kv_cache_claim(kv_cache *kc, int seq, int32_t pos, int32_t *slot) {
    BK_TRY(check_seq(kc, seq));
    kv_seq *s = &kc->seqs[seq];
    if (pos < 0 || pos > s->len)
        return bk_fail(BRISK_ERR_INVALID_ARG, "sequence %d: position %d does not continue its cache (length %d)",
                       seq, pos, s->len);
    if (pos >= kc->n_ctx)
        return bk_fail(BRISK_ERR_RANGE, "sequence %d: position %d is beyond the context size %d", seq, pos,
                       kc->n_ctx);
    if (pos < s->len) BK_TRY(kv_cache_seq_truncate(kc, seq, pos));
    int pi = pos / kc->block_size;
    if (pi == s->n_pages) {
        int32_t p;
        BK_TRY(page_new(kc, &p));
        s->pages[s->n_pages++] = p;
    } else if (kc->refs[s->pages[pi]] > 1) { /* shared: copy before writing */
        int32_t p;
        BK_TRY(page_new(kc, &p));
        page_copy(kc, p, s->pages[pi]);
        page_unref(kc, s->pages[pi]);
        s->pages[pi] = p;
    }
    *slot = s->pages[pi] * kc->block_size + pos % kc->block_size;
    s->len = pos + 1;
    return BRISK_OK;
}

brisk_status kv_cache_seq_share(kv_cache *kc, int src, int dst, int32_t n_tokens) {
    BK_TRY(check_seq(kc, src));
    BK_TRY(check_seq(kc, dst));
    if (src == dst) return bk_fail(BRISK_ERR_INVALID_ARG, "cannot share a sequence with itself");
    kv_seq *s = &kc->seqs[src], *d = &kc->seqs[dst];
    if (n_tokens < 0 || n_tokens > s->len)
        return bk_fail(BRISK_ERR_INVALID_ARG, "sequence %d has %d cached tokens, cannot share %d", src,
                       s->len, n_tokens);
    BK_TRY(kv_cache_seq_clear(kc, dst));
    /* Pages are shared whole, the partial tail too: a later write to it copies (claim). */
    int n = (n_tokens + kc->block_size - 1) / kc->block_size;
    for (int i = 0; i < n; i++) {
        d->pages[i] = s->pages[i];
        kc->refs[s->pages[i]]++;
    }
    d->n_pages = n;
    d->len = n_tokens;
    return BRISK_OK;
}
