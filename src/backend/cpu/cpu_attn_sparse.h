/* cpu_attn_sparse.h — block-sparse attention on the CPU (opt-in: brisk_context_params.attn_sparse_k).
 *
 * Each KV page keeps, per KV head, the per-channel min and max of its keys
 * (bk_kv_view.ksum, as Quest does: Tang et al. 2024), so that for a query q
 *     U(page) = sum_c max(q_c * min_c, q_c * max_c)  >=  q.k  for every key k of the page.
 * The keys summarised are those the attention reads: post-RoPE, dequantized
 * from a q8_0/q4_0 cache, and for q4_0h the rotated keys (the attention scores
 * them against the rotated q, which is what it passes here).
 *
 * A query group (the GQA heads of one KV head, for one token in decode or a
 * tile of tokens of one sequence in a prompt) reads top_k pages: always the
 * first page (the attention sink) and the local window (the page before the
 * group's first token's page and every page up to its last token's), then the
 * best-scoring others. A page's score is the attention mass the group's rows
 * would put on it if each page's best key reached its bound: per row r a
 * softmax over the candidate pages of scale * U_r(page), then summed over the
 * rows. Summed, not the max: the error of skipping a page is the mass each row
 * loses, and the rows' losses add; the max of raw bounds would let the head with
 * the largest norms decide for all, and the max of per-row normalised bounds
 * gives every head's favourite page the same top score however flat that head
 * is (tried first: a page one head attends to sharply then lost ties to other
 * heads' mild favourites).
 *
 * The chosen pages, in position order, form a compacted page table; every
 * chosen page before the group's own is full, so a token at position p sits
 * at p - (nb - n) * block_size of it, and the existing kernels (cpu_attn.h,
 * and the portable one) run unchanged over it: the same arithmetic as dense
 * attention over the chosen positions, the causal mask included. When top_k
 * covers every page the table is the sequence's own: bit-identical to dense.
 *
 * Ownership: the summaries live in the KV cache (kv_cache.h allocates them);
 * scratch comes from the caller. */
#ifndef BK_CPU_ATTN_SPARSE_H
#define BK_CPU_ATTN_SPARSE_H
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "base/threadpool.h"

/* One query group's selection. */
typedef struct cpu_sparse_sel {
    const float *q;          /* token 0's first head of the group: group heads of hd, then the next token */
    size_t tok_stride;       /* floats between tokens in q */
    int n_tok, group;        /* rows: n_tok tokens x group heads */
    const int32_t *pos;      /* (n_tok) their positions, in one sequence */
    const bk_kv_view *kv;    /* ksum set; kv->sparse_k the pages to read */
    const int32_t *table;    /* page table of the sequence */
    int kvh, n_head_kv, hd;
} cpu_sparse_sel;

/* Floats of scratch cpu_sparse_select needs for rows query rows, nb pages and (when measuring)
 * np positions. */
size_t cpu_sparse_scratch_floats(int rows, int nb, int np, int hd);

/* Picks the pages to read: their indices into the sequence's table, ascending, into blocks
 * (nb = max pos / block_size + 1 entries at most) and the compacted table into pages; returns how
 * many, n. A token at position p reads positions [0, p - *shift] of the compacted table
 * (*shift = (nb - n) * block_size). scale: the attention's, for measuring. With kv->sparse_stats
 * set, also measures the choice against the true attention (below). */
int cpu_sparse_select(const cpu_sparse_sel *s, float scale, float *scratch, int32_t *blocks, int32_t *pages,
                      int *shift);

/* The recall counters (kv->sparse_stats), added to by every query group whose choice dropped a page:
 * [0] pages among the true top-n by attention mass (the group's rows' softmax weights, each row's
 * summing to 1, added per page) that were chosen, [1] the n counted, [2] the chosen pages' share of
 * the mass in units of 1e-9, [3] the true top-n pages' share (the best any n pages could read),
 * [4] groups measured. */
enum { CPU_SPARSE_HITS, CPU_SPARSE_WANTED, CPU_SPARSE_MASS, CPU_SPARSE_MASS_BEST, CPU_SPARSE_GROUPS, CPU_SPARSE_N_STATS };

/* After a batch's K rows are in the cache: the summaries of every page it wrote, recomputed over
 * the page's rows up to the last one written (so a page reused or rewritten after a truncation is
 * summarised afresh; a page truncated and not yet rewritten keeps a box that still contains its
 * rows, a looser bound). head_dim <= 1024 (the context checks). pages_scratch: 2 * ab->n_tokens ints. */
void cpu_sparse_summarise(threadpool *tp, const bk_kv_view *kv, const bk_attn_batch *ab, int n_head_kv, int hd,
                          int32_t *pages_scratch);
#endif
