/* shard.c — see shard.h. */
#include "engine/shard.h"

#include <stdlib.h>
#include <string.h>

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

brisk_status shard_gather(const bk_weight *w, shard_kind kind, int n_blocks, int rank, int n_ranks, int64_t unit,
                          void **buf, bk_weight *out) {
    *out = *w;
    *buf = NULL;
    bool rows = kind == SHARD_ROWS;
    if (n_ranks < 1 || rank < 0 || rank >= n_ranks || n_blocks < 1 || (!rows && kind != SHARD_COLS))
        return bk_fail(BRISK_ERR_INVALID_ARG, "shard: %s: gather of rank %d of %d over %d blocks", w->name, rank,
                       n_ranks, n_blocks);
    if (w->n_expert > 1)
        return bk_fail(BRISK_ERR_UNSUPPORTED, "shard: %s: expert tensors are placed by expert, not split", w->name);
    if (unit < 1) unit = 1;
    const quant_traits *tr = quant_get_traits(w->type);
    int64_t dim = rows ? w->n_out : w->n_in, qblk = rows || !tr ? 1 : tr->block_elems;
    int64_t blk = dim / n_blocks, per = blk / n_ranks; /* rows or columns: a block's, a rank's of it */
    if (dim % n_blocks || blk % ((int64_t)n_ranks * unit) || blk % qblk || per % qblk)
        return bk_fail(BRISK_ERR_INVALID_ARG,
                       "shard: %s: %d blocks of %lld %s do not split into %d ranks of whole %lld-%s units "
                       "and %s blocks", w->name, n_blocks, (long long)dim, rows ? "rows" : "columns", n_ranks,
                       (long long)unit, rows ? "row" : "column", quant_type_name(w->type));
    int64_t n_out = rows ? per * n_blocks : w->n_out, n_in = rows ? w->n_in : per * n_blocks;
    size_t row = quant_row_size(w->type, n_in), seg = quant_row_size(w->type, per);
    char *p = malloc((size_t)n_out * row);
    if (!p) return bk_fail(BRISK_ERR_NOMEM, "out of memory packing %s", w->name);
    const char *src = w->host;
    for (int b = 0; b < n_blocks; b++) {
        int64_t first = (int64_t)b * blk + (int64_t)rank * per; /* the rank's first row / column of block b */
        if (rows)
            for (int64_t r = 0; r < per; r++)
                memcpy(p + (size_t)(b * per + r) * row, src + (size_t)(first + r) * w->row_bytes, row);
        else
            for (int64_t r = 0; r < n_out; r++)
                memcpy(p + (size_t)r * row + (size_t)b * seg,
                       src + (size_t)r * w->row_bytes + quant_row_size(w->type, first), seg);
    }
    out->n_out = n_out;
    out->n_in = n_in;
    out->row_bytes = row;
    out->host = p;
    out->dev = NULL;
    *buf = p;
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
