/* cpu_moe.h — the CPU backend's mixture-of-experts ops (router and expert
 * FFN), split across the backend's thread pool. The contracts are those of
 * moe_route, moe_ffn and moe_ids_local in backend/backend.h; cpu_backend.c
 * puts these in its op table. Arithmetic follows llama.cpp's graph (build_moe_ffn) and
 * ggml's CPU kernels: softmax as ggml_vec_soft_max_f32, each expert product
 * as ggml's mul_mat_id (one vec_dot per weight row and token; on the
 * repacked copies where the backend made them, as llama.cpp's repacked mul_mat_id), weights
 * applied and summed in expert-slot order; an expert with 16 or more columns
 * in one call (a prompt's) runs on the packed panels of cpu_pgemm.h, in their
 * float order, as the dense prompt products do. */
#ifndef BK_CPU_MOE_H
#define BK_CPU_MOE_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "backend/backend.h"
#include "base/threadpool.h"

/* Buffers the FFN op reuses between calls, grown to the largest batch seen
 * (no allocation once the largest batch has run); zero-initialise. */
typedef struct cpu_moe_scratch {
    void *xq;        /* (n, ·) x in gate's vec_dot_type */
    void *xq_up;     /* (n, ·) x in up's vec_dot_type, when it differs from gate's */
    float *gu;       /* (n*k, 2*n_ff) gate | up products; silu(gate)*up overwrites gate */
    void *hq;        /* (n*k, ·) silu(gate)*up in down's vec_dot_type */
    float *dout;     /* (n*k, n_embd) each chosen expert's output, unweighted */
    int32_t *group;  /* (n_expert + 1) offsets, then (n*k) entries t*k+j grouped by expert */
    void *xt, *ht;   /* packed token tiles (cpu_pgemm.h) of the experts with many columns: gate/up's, down's */
    void *stage;     /* (threads, tile tokens) rows gathered for a tile */
    int32_t *tbase;  /* (n_expert) an expert's first tile, -1: one column at a time */
    int32_t *tile_e; /* (tiles) the expert a tile belongs to */
    void *xa[3];     /* expanded activations (cpu_repack.h) of repacked gate, up (by token), down (by entry) */
    size_t cap[14];  /* bytes held by each buffer above, in order */
    void **panel;    /* (n_panel) a thread's unpacked weight panel */
    int n_panel;
    size_t panel_cap;
} cpu_moe_scratch;

/* Tests only (test_conformance's expert-flip rule): fn sees the router logits of every routing,
 * n rows of n_expert, k picked per row, before the top-k; NULL: none. Not thread-safe: set it
 * with no decode running. */
typedef void (*cpu_moe_route_observer)(void *user, const float *logits, int n, int n_expert, int k);
void cpu_moe_observe_routes(cpu_moe_route_observer fn, void *user);
void cpu_moe_route(threadpool *tp, const float *logits, int n, int n_expert, int k, bool norm, float scale,
                   int32_t *ids, float *weights);
/* wr: the repacked copies (cpu_repack.h) of gate, up and down, each NULL where a tensor has none;
 * a copy serves its experts' one-column products (decode, and experts with few columns). */
void cpu_moe_ffn(threadpool *tp, cpu_moe_scratch *sc, const bk_weight *gate, const bk_weight *up,
                 const bk_weight *down, const void *const wr[3], const float *x, int n, const int32_t *ids,
                 const float *weights, int k, float *out);
void cpu_moe_scratch_free(cpu_moe_scratch *sc);
/* backend.h's moe_ids_local: ids (n) in [e0, e1) become id - e0, the others -1. */
void cpu_moe_ids_local(int32_t *ids, int n, int e0, int e1);
#endif
