/* kv_cache.h — the paged KV cache.
 *
 * Memory is one pool of pages per layer for K and one for V, each page
 * holding block_size token slots of (n_head_kv * head_dim) values. A sequence
 * owns a block table: page ids for its positions 0, bs, 2bs, ... Pages are
 * reference counted so that sequences can share a prefix; a write into a
 * shared page copies it first (copy-on-write). All memory is allocated at
 * creation, from the context limits; nothing is allocated per step.
 */
#ifndef BK_KV_CACHE_H
#define BK_KV_CACHE_H
#include "backend/backend.h"
#include "brisk.h"

typedef struct kv_cache kv_cache;

/* be (n_layer): the backend holding each layer's pools (a model split across
 * two backends keeps each layer's pages with the layer; the block tables are
 * host memory, one per sequence for every layer). */
brisk_status kv_cache_new(bk_backend *const *be, int n_layer, int kv_dim, int n_ctx, int n_seq_max,
                          int block_size, brisk_kv_type type, kv_cache **out);
void kv_cache_free(kv_cache *kc);
/* Bytes of one token's K (or V) row of kv_dim values (a multiple of 32 for q8_0 and q4_0). */
size_t kv_cache_row_bytes(brisk_kv_type type, int kv_dim);
/* Backend bytes kv_cache_new would allocate for these sizes (K and V of every layer). */
size_t kv_cache_size_for(int n_layer, int kv_dim, int n_ctx, int n_seq_max, int block_size, brisk_kv_type type);

/* Block-sparse attention (opt-in, right after kv_cache_new): allocates each layer's page summaries
 * (n_pages, 2, kv_dim floats: per-channel key min and max, which the backend keeps up to date as it
 * writes keys; 2 / block_size of an f16 cache's bytes) and makes the views ask for top_k pages per
 * query group. measure: also count how the choices compare with dense attention (slow; see
 * kv_cache_sparse_stats). */
brisk_status kv_cache_enable_sparse(kv_cache *kc, int top_k, bool measure);
/* The recall counters of a measuring cache (cpu_attn_sparse.h's KV_SPARSE_N_STATS, summed over
 * layers); false when not measuring. */
#define KV_SPARSE_N_STATS 5
bool kv_cache_sparse_stats(const kv_cache *kc, int64_t stats[KV_SPARSE_N_STATS]);

/* The pools of layer l, for the attention op. */
bk_kv_view kv_cache_view(const kv_cache *kc, int layer);
size_t kv_cache_bytes(const kv_cache *kc);
int kv_cache_pages_used(const kv_cache *kc);
int kv_cache_n_pages(const kv_cache *kc);

int32_t kv_cache_seq_len(const kv_cache *kc, int seq);
/* Reserves the slot for position pos of seq (pos <= len; pos < len truncates
 * first), allocating or un-sharing its page. Sets *slot (page*bs + offset) and
 * extends the length to pos+1. BRISK_ERR_RANGE when the cache is full. */
brisk_status kv_cache_claim(kv_cache *kc, int seq, int32_t pos, int32_t *slot);
/* The page table of seq (valid until the next claim/clear/share). */
const int32_t *kv_cache_table(const kv_cache *kc, int seq);

brisk_status kv_cache_seq_clear(kv_cache *kc, int seq);
brisk_status kv_cache_seq_truncate(kv_cache *kc, int seq, int32_t len);
brisk_status kv_cache_seq_share(kv_cache *kc, int src, int dst, int32_t n_tokens);
#endif
