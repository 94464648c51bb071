/* cpu_attn.h — one (token, head) of attention over the paged KV cache, in
 * per-ISA versions. All versions compute the same thing in the same float
 * order (ggml's: 16-lane fused products, a halving reduction, chunked
 * softmax sums in double), so they agree bitwise with each other. */
#ifndef BK_CPU_ATTN_H
#define BK_CPU_ATTN_H
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"

/* n_q query heads that share KV head kvh (a GQA group), done together so
 * each K and V row is loaded and converted once for all of them; each head's
 * arithmetic is exactly that of a head done alone. With group < n_q (the AVX2
 * kernel only), the heads of n_q / group consecutive KV heads kvh, kvh + 1, ...:
 * their rows of a position are adjacent in the cache, so one pass over the
 * positions reads them as one run instead of one row every n_head_kv rows. */
enum { CPU_ATTN_MAX_Q = 64 }; /* query heads of one call at most */
typedef struct cpu_attn_head {
    const float *q;          /* (n_q, head_dim): consecutive heads */
    const bk_kv_view *kv;
    const int32_t *table;    /* page table of the sequence */
    int np;                  /* positions attended: [0, np) */
    int kvh, n_head_kv, hd;
    float scale;
    float *scores;           /* (n_q, sc_stride) scratch, sc_stride >= np */
    size_t sc_stride;
    float *lanes;            /* (n_q, 16, hd) scratch */
    float *out;              /* (n_q, hd) */
    int n_q;
    int group;               /* query heads a KV head (0: n_q, one KV head); n_q % group == 0 */
} cpu_attn_head;

/* The cache row of position p for kv head kvh: page from the table, then the slot. */
static inline const void *cpu_kv_row(const bk_kv_view *kv, const void *base, const int32_t *table, int p,
                                     int kvh, int n_head_kv, int head_dim) {
    size_t slot = (size_t)table[p / kv->block_size] * kv->block_size + (size_t)(p % kv->block_size);
    size_t off = (slot * n_head_kv + kvh) * head_dim;
    size_t bb = bk_kv_block_bytes(kv->kv_type); /* q8_0, q4_0: blocks of 32 (head_dim % 32 == 0) */
    if (bb) return (const char *)base + off / 32 * bb;
    return kv->kv_type == BRISK_KV_F16 ? (const void *)((const uint16_t *)base + off)
                                       : (const void *)((const float *)base + off);
}

/* A block of query tokens of one sequence against KV head kvh, all the
 * group's query heads with it: lane l = token l / group, head l % group, at
 * most 16 lanes. K/V rows are converted once per 16-position tile and used by
 * every lane; scores and outputs keep one query per vector lane, so there is
 * no horizontal sum, and the softmax runs online (running max and sum per
 * lane, one pass over the cache). Not ggml's float order: the caller keeps
 * cpu_attn_head for decode and short batches. */
typedef struct cpu_attn_block {
    const float *q;          /* token 0 of the block, head kvh * group */
    float *out;              /* same place in the output */
    size_t tok_stride;       /* floats between tokens in q and out (n_head * hd) */
    const int32_t *pos;      /* (nt) each token attends to [0, pos] */
    int nt, group;           /* nt * group <= 16 */
    const bk_kv_view *kv;
    const int32_t *table;
    int kvh, n_head_kv, hd;
    float scale;
    float *scratch;          /* 4 * 16 * hd floats */
} cpu_attn_block;

/* Returns 0 (and does nothing) for a quantized cache (q8_0, q4_0), head_dim
 * not a multiple of 16 or more than 16 lanes. */
int cpu_attn_block_avx512(const cpu_attn_block *a);
/* The same in AVX2 + FMA + F16C (cpu_attn_avx2.c), 8 lanes at a time: another float order again.
 * It also reads q8_0 and q4_0 caches (head_dim a multiple of 32), which AVX-512 cores send here. */
int cpu_attn_block_avx2(const cpu_attn_block *a);

/* AVX-512 version; returns 0 (and does nothing) when head_dim is not a
 * multiple of 16 or the cache is quantized (the AVX2 version handles those). */
int cpu_attn_head_avx512(const cpu_attn_head *a);
/* The same in AVX2 + FMA + F16C (cpu_attn_avx2.c), bitwise; also takes several KV heads
 * (group < n_q <= CPU_ATTN_MAX_Q), where the AVX-512 version takes one (n_q <= 16). */
int cpu_attn_head_avx2(const cpu_attn_head *a);
/* out = silu(gate) * up, bitwise swiglu_row of cpu_math.h (it shares this
 * file's 16-lane exp). */
void cpu_swiglu_avx512(const float *gate, const float *up, float *out, size_t n);
void cpu_swiglu_avx2(const float *gate, const float *up, float *out, size_t n);
#endif
