/* pk_plan.h — one decode step of a dense decoder (llama, qwen2, qwen3) or of qwen3moe as a list of instructions
 * for a persistent kernel (issue 30; a lab: nothing in src/ runs it yet).
 *
 * The step is cut into instructions small enough that every worker (a GPU's SM: one resident
 * block each) always has one: a slice of rows of a product, with the norm before it folded in;
 * the QK-norm, rope and cache write of a KV head; one split of a (token, KV head)'s attention,
 * the last split of a group merging the group; the LM head's rows. Each instruction waits for one
 * counter to reach a value and adds one to a counter when done, so the order is kept by counters
 * in memory, not by kernel boundaries:
 *
 *   layer l:  QKV slices   wait X[l] (all of layer l-1's DOWN slices; none at l = 0), add to Q[l]
 *             KV (a head)  wait Q[l] (all QKV slices)                               add to R[l]
 *             ATTN splits  wait R[l] (all KV heads); the group's last split merges and adds to A[l]
 *             OUT slices   wait A[l] (all groups)                x += Wo att       add to O[l]
 *             GATEUP       wait O[l]                             h = silu(g) u     add to F[l]
 *             DOWN slices  wait F[l]                             x += Wdown h      add to X[l+1]
 *   (a MoE layer: in place of GATEUP and DOWN)
 *             ROUTE slices wait O[l]      router logits, rows of experts          add to G[l]
 *             TOPK (a token) wait G[l]    softmax, top-k, renormalized            add to T[l]
 *             EGU (token, slot, rows)  wait T[l]: the slot's expert, read from memory, h = silu(g) u
 *                                                                                 add to F[l]
 *             EDOWN slices wait F[l]   x += sum over a token's slots w down_e h  add to X[l+1]
 *   HEAD slices            wait X[n_layer]                       logits rows
 * (the expert a slot runs is known only at run time: an EGU instruction reads it, so the plan stays
 * static; the kernel's prefetch of an EGU's rows can start once T[l] holds)
 *
 * The scratch (x, q/k/v, att, h, the attention's partial sums) is one buffer each for all layers:
 * the waits above also order every reuse (layer l+1 writes q only after X[l+1], which follows every
 * read of layer l's q), and x is updated in place, row slice by row slice.
 *
 * No deadlock, by construction: the instructions have one global order in which every producer of
 * a counter comes before its waiters, and each worker runs its own list in that order. The
 * earliest unfinished instruction then has every producer finished, and its worker has finished
 * everything before it on its list, so it runs. (On a GPU: as long as every worker's block is
 * resident: a cooperative launch of at most one block an SM.) pk_plan_check verifies the order.
 *
 * Workers get instructions by list scheduling over an estimate of each one's time (its bytes at a
 * worker's share of the bandwidth, plus a fixed cost for its wait and launch of loads), earliest
 * estimated finish first. */
#ifndef PK_PLAN_H
#define PK_PLAN_H
#include <stddef.h>
#include <stdint.h>

typedef enum pk_op {
    PK_QKV, PK_KV, PK_ATTN, PK_OUT, PK_GATEUP, PK_DOWN, PK_HEAD, PK_ROUTE, PK_TOPK, PK_EGU, PK_EDOWN, PK_N_OPS
} pk_op;

/* The counters of layer l: index 8 l + PK_C_*; X of layer n_layer (the LM head's input) is 8 n_layer. */
enum { PK_C_X = 0, PK_C_Q, PK_C_R, PK_C_A, PK_C_O, PK_C_G, PK_C_T, PK_C_F, PK_C_PER_LAYER };

typedef struct pk_shape {
    int n_layer, n_embd, n_head, n_head_kv, head_dim, n_ff, n_vocab; /* n_ff: dense layers' (0 for MoE) */
    int n_expert, n_expert_used, n_ff_exp; /* qwen3moe (every layer MoE); n_expert 0: dense */
    int n_tok;           /* tokens in a step, 1-8: they share each weight row's read */
    int n_ctx;           /* the most positions a token attends over (the attention's splits) */
    int n_workers;       /* the GPU's SMs */
    double weight_bytes; /* bytes a weight (Q4_K: 4.5 bits, 0.5625) */
    double kv_bytes;     /* bytes a cached value (f16: 2) */
    int slice_kb;        /* about this many KiB of weights a slice (0: 64) */
    int split_min;       /* positions a split at least (0: 256; fewer and its fixed costs dominate) */
    int pos_tile;        /* a split's positions: whole tiles of this many (0: 64) */
} pk_shape;

typedef struct pk_inst {
    uint8_t op;          /* pk_op */
    int16_t layer;
    int32_t r0, r1;      /* QKV: rows of q|k|v stacked; OUT, DOWN, EDOWN: of x; GATEUP, EGU: of h; HEAD: of the
                            logits; ROUTE: experts */
    int16_t tok, kvh;    /* ATTN: the (token, KV head) group; KV: the head; TOPK, EGU: tok; EGU: kvh the slot */
    int16_t split, n_split; /* ATTN: this split of the group's n_split */
    int32_t wait;        /* the counter waited for (-1: none) */
    int32_t need;        /* ... until it holds this */
    int32_t signal;      /* the counter added to when done (ATTN: by the group's merging split) */
    double est;          /* estimated time, arbitrary units (bytes) */
} pk_inst;

typedef struct pk_plan {
    pk_shape s;
    pk_inst *inst;       /* (n_inst) in the global order */
    int n_inst;
    int *w_off, *w_idx;  /* worker w runs inst[w_idx[w_off[w] .. w_off[w + 1])] in that order */
    int n_counters;
    int32_t *target;     /* (n_counters) what one step adds to each counter */
    int rows[PK_N_OPS];  /* rows a slice of each product (KV, ATTN: 0) */
    int n_split;         /* splits of each (token, KV head)'s attention */
    double makespan;     /* the list schedule's estimated step time, in est's units */
} pk_plan;

/* Plans a step of shape s; 0, or -1 for a shape it does not take or no memory (then *p is empty). */
int pk_plan_build(const pk_shape *s, pk_plan *p);
void pk_plan_free(pk_plan *p);
/* NULL when the plan keeps its invariants (every wait's producers earlier in the global order and
 * as many as it waits for; every counter's target its producers; each worker's list in the global
 * order; each instruction on exactly one list), else what broke. */
const char *pk_plan_check(const pk_plan *p);
/* Positions [*p0, *p1) of split `split` of the plan's n_split over np positions (whole tiles of
 * pos_tile; a split past the end gets none): the rule the kernel applies at run time, the plan
 * having fixed n_split for its longest context. */
void pk_split_range(const pk_plan *p, int np, int split, int *p0, int *p1);
#endif
