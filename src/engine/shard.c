/* shard.c — see shard.h. */
#include "engine/shard.h"

#include "base/status.h"
#include "quant/quant.h"

brisk_status shard_weight(const bk_weight *w, shard_kind kind, int rank, int n_ranks, int64_t unit, bk_weight *out) {
    *out = *w;
    if (n_ranks < 1 || rank < 0 || rank >= n_ranks)
        return bk_fail(BRISK_ERR_INVALID_ARG, "shard: rank %d of %d", rank, n_ranks);
    if (kind == SHARD_REPLICATE || n_ranks == 1) return BRISK_OK;
    if (unit < 1) unit = 1;
    if (kind == SHARD_EXPERTS) { /* expert e's rows are [e * rows, (e + 1) * rows): a slice of rows */
        if (w->n_expert < 2 || w->n_expert % n_ranks)
            return bk_fail(BRISK_ERR_INVALID_ARG, "shard: %s: %d experts do not split over %d ranks", w->name,
                           w->n_expert, n_ranks);
        int per = w->n_expert / n_ranks;
        int64_t rows = w->n_out / w->n_expert;
        out->n_expert = per;
        out->n_out = (int64_t)per * rows;
        out->host = (const char *)w->host + (size_t)((int64_t)rank * per * rows) * w->row_bytes;
        out->dev = NULL;
        return BRISK_OK;
    }
    if (w->n_expert > 1)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "shard: %s: expert tensors are placed by expert, not split", w->name);
    if (kind == SHARD_ROWS) {
        if (w->n_out % ((int64_t)n_ranks * unit))
            return bk_fail(BRISK_ERR_INVALID_ARG, "shard: %s: %lld rows do not split into %d ranks of whole %lld-row units",
                           w->name, (long long)w->n_out, n_ranks, (long long)unit);
        int64_t per = w->n_out / n_ranks;
        out->n_out = per;
        out->host = (const char *)w->host + (size_t)(rank * per) * w->row_bytes;
        out->dev = NULL;
        return BRISK_OK;
    }
    const quant_traits *tr = quant_get_traits(w->type);
    int64_t blk = tr ? tr->block_elems : 1, per = w->n_in / n_ranks;
    if (w->n_in % n_ranks || per % unit || per % blk)
        return bk_fail(BRISK_ERR_INVALID_ARG,
                       "shard: %s: %lld columns do not split into %d ranks of whole %lld-column units and %s blocks",
                       w->name, (long long)w->n_in, n_ranks, (long long)unit, quant_type_name(w->type));
    out->n_in = per;
    out->host = (const char *)w->host + quant_row_size(w->type, per * rank); /* row stride stays row_bytes */
    out->dev = NULL;
    return BRISK_OK;
}

brisk_status shard_heads_for(int n_head, int n_head_kv, int rank, int n_ranks, shard_heads *out) {
    if (n_ranks < 1 || rank < 0 || rank >= n_ranks || n_head_kv < 1 || n_head % n_head_kv)
        return bk_fail(BRISK_ERR_INVALID_ARG, "shard: heads %d/%d, rank %d of %d", n_head, n_head_kv, rank, n_ranks);
    if (n_head % n_ranks)
        return bk_fail(BRISK_ERR_INVALID_ARG, "shard: %d query heads do not split over %d ranks", n_head, n_ranks);
    out->n_head = n_head / n_ranks;
    if (n_head_kv >= n_ranks) {
        if (n_head_kv % n_ranks)
            return bk_fail(BRISK_ERR_INVALID_ARG, "shard: %d KV heads do not split over %d ranks", n_head_kv, n_ranks);
        out->n_head_kv = n_head_kv / n_ranks;
        out->kv_first = rank * out->n_head_kv;
        out->kv_replicated = false;
    } else {
        if (n_ranks % n_head_kv)
            return bk_fail(BRISK_ERR_INVALID_ARG, "shard: %d KV heads cannot be shared evenly by %d ranks", n_head_kv,
                           n_ranks);
        out->n_head_kv = 1;
        out->kv_first = rank / (n_ranks / n_head_kv);
        out->kv_replicated = true;
    }
    return BRISK_OK;
}
