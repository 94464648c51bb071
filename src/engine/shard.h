/* shard.h — tensor-parallel sharding of a decoder's weights (issue 7's math,
 * before any GPU or NCCL is involved).
 *
 * With N ranks, each attention and FFN block runs as N partial blocks:
 *  - SHARD_ROWS (q, k, v, gate, up): rank r keeps output rows
 *    [r * n_out / N, (r + 1) * n_out / N) — whole heads for q/k/v — and
 *    computes its slice of the outputs exactly as the whole matrix would
 *    (each output row is its own dot product);
 *  - SHARD_COLS (attention output, down): rank r keeps input columns
 *    [r * n_in / N, (r + 1) * n_in / N) of every row and computes a partial
 *    product over its slice of the inputs; the ranks' partial outputs summed
 *    (the all-reduce) give the product;
 *  - SHARD_REPLICATE (norms, embeddings, the LM head, a MoE router): every
 *    rank the whole;
 *  - SHARD_EXPERTS (a MoE layer's stacked expert tensors): rank r keeps the
 *    whole experts [r * E / N, (r + 1) * E / N) — expert parallelism: every
 *    rank routes over all E experts, runs the chosen ones it holds (the
 *    others' slots skipped: backend.h's moe_ids_local) and the all-reduce
 *    sums the ranks' partial expert outputs.
 * So one layer costs two all-reduces (after attention, after the FFN).
 * A shard that is several runs of rows or columns (qwen35's Gated DeltaNet
 * heads, see shard_gather) is a packed copy instead of a view.
 *
 * A shard is a view, not a copy: the same mapped bytes, a row pointer offset
 * (ROWS, EXPERTS: an expert's rows are contiguous) or a column offset with
 * the original row stride kept in row_bytes (COLS). Backends that read host
 * weights (the CPU) use views as they are; a GPU rank packs its view when it
 * uploads it (an EXPERTS view is contiguous: uploaded as it is). Column splits must fall on
 * whole blocks of the weight type and on whole heads (`unit`). */
#ifndef BK_SHARD_H
#define BK_SHARD_H
#include "backend/backend.h"

typedef enum shard_kind { SHARD_REPLICATE = 0, SHARD_ROWS = 1, SHARD_COLS = 2, SHARD_EXPERTS = 3 } shard_kind;

/* Rank `rank`'s view of w (of n_ranks), splitting in multiples of `unit`
 * rows (ROWS) or columns (COLS): head_dim for per-head splits, 1 otherwise;
 * EXPERTS: whole experts of an expert tensor (unit unused; the view's
 * n_expert is the rank's count, its first expert rank * that count).
 * Fails with a message when the split does not divide evenly into units and
 * (COLS) whole blocks of w's type, or (EXPERTS) into whole experts. */
brisk_status shard_weight(const bk_weight *w, shard_kind kind, int rank, int n_ranks, int64_t unit, bk_weight *out);

/* Rank `rank`'s slice of each of n_blocks equal blocks of w's rows (ROWS) or columns (COLS): of
 * every block the units [rank * per, (rank + 1) * per) of `unit` rows or columns (per = a block's
 * units / n_ranks), gathered in block order into a packed copy *buf that out points into (malloc'd:
 * the caller frees it once out is unbound). A Gated DeltaNet (qwen35) shard is not one run of rows:
 * its rank holds key heads [r * n_k / N, (r + 1) * n_k / N) and the value heads that read them,
 * which in the files' tiled value-head order (value head i reads key head i mod n_k) are n_v / n_k
 * runs of as many heads, n_k heads apart. So a per-value-head dimension is n_v / n_k blocks of n_k
 * heads, the fused q|k|v projection (and its conv channels) 2 + n_v / n_k such blocks, and the
 * gathered heads keep the tiled order among the rank's own n_k / N key heads. Fails with a message
 * when the blocks do not split into whole units and (COLS) whole blocks of w's type. */
brisk_status shard_gather(const bk_weight *w, shard_kind kind, int n_blocks, int rank, int n_ranks, int64_t unit,
                          void **buf, bk_weight *out);

/* How a model's heads split: each rank gets n_head / n_ranks query heads and
 * n_head_kv / n_ranks KV heads (or, with fewer KV heads than ranks, each KV
 * head serves n_ranks / n_head_kv ranks and is replicated there). */
typedef struct shard_heads {
    int n_head, n_head_kv;   /* per rank */
    int kv_first;            /* first KV head of the rank */
    bool kv_replicated;      /* the rank holds a copy of a shared KV head */
} shard_heads;
brisk_status shard_heads_for(int n_head, int n_head_kv, int rank, int n_ranks, shard_heads *out);
#endif
