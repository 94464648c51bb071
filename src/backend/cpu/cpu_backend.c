/* cpu_backend.c — the reference backend: every op on the host, split across a
 * thread pool. Matrix products convert the activations once to the weight's
 * vec_dot_type (as ggml does) and run the fused kernels of cpu_dot.h; prompt
 * batches (16+ entries) run on packed weight panels (cpu_pgemm.h) and
 * query-blocked attention (cpu_attn.h), which sum in another float order.
 * Decode and short batches keep ggml's order. */
#include <math.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#if defined(__x86_64__)
#include <immintrin.h>
#endif

#include "backend/backend.h"
#include "backend/cpu/cpu_attn.h"
#include "backend/cpu/cpu_attn_sparse.h"
#include "backend/cpu/cpu_dot.h"
#include "backend/cpu/cpu_moe.h"
#include "backend/cpu/cpu_pgemm.h"
#include "backend/cpu/cpu_repack.h"
#include "backend/cpu/cpu_scratch.h"
#include "backend/cpu/cpu_ssm.h"
#include "base/status.h"
#include "base/threadpool.h"
#include "quant/kv_rot.h"
#include "quant/quant.h"

/* The elementwise and attention loops must vectorize (-O2's cheap cost model
 * leaves loops that need alias checks scalar). No fast-math: every float
 * operation keeps its order, so results stay those of the reference. */
#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "fp-contract=off")
#endif

#include "backend/cpu/cpu_math.h"

/* f16 -> f32 for the KV cache: one instruction where the ISA has it (F16C). */
#if defined(__FLT16_MAX__)
BK_INLINE float h2f(uint16_t h) {
    _Float16 f;
    memcpy(&f, &h, 2);
    return (float)f;
}
#else
#define h2f quant_f16_to_f32
#endif

#define MAX_MATS 8
/* Query-blocked attention (cpu_attn_block) for batches of at least this many
 * entries, on blocks of at least this many lanes; decode and short batches
 * keep cpu_attn_head, which sums in ggml's order. */
#define ATT_BLOCK_MIN_TOKENS 16
#define ATT_BLOCK_MIN_LANES 8
#define ROW_TILE 16  /* weight rows per tile: a few KB, stays in L1 while tokens stream */
#define TOK_TILE 32  /* activation rows per vec_dot call */

typedef struct cpu_backend {
    bk_backend base;
    threadpool *tp;
    int n_threads;
    /* Converted activations, grown to the largest request then reused (no
     * allocation once the first batch of the largest size has run). */
    void *xq[MAX_MATS];
    size_t xq_cap[MAX_MATS];
    void *xp[MAX_MATS];  /* packed activation tiles (cpu_pgemm.h), per converted x */
    size_t xp_cap[MAX_MATS];
    void **panel;        /* (n_threads) one weight panel each */
    size_t panel_cap;
    float *att_scratch; /* (n_threads, att_cap) attention scores */
    int *att_blk;       /* query block starts (cpu_attention) */
    size_t att_blk_cap;
    size_t att_cap;
    float *rot;         /* q4_0h cache: rotated q and k (cpu_attention) */
    size_t rot_cap;
    float *sp_scratch;  /* block-sparse attention: (n_threads, sp_cap) selection scratch (cpu_attn_sparse.h) */
    size_t sp_cap;      /* floats per thread */
    int32_t *sp_idx;    /* (n_threads, sp_icap) chosen page indices, the compacted table, 16 positions */
    size_t sp_icap;     /* ints per thread */
    int32_t *sp_pages;  /* (2 * n_tokens) the pages a batch wrote, for their summaries */
    size_t sp_pages_cap;
    cpu_moe_scratch moe;
    /* Repacked weight copies (cpu_repack.h) by mapped address: a hash table
     * (copies_cap a power of two); copy NULL: none for that matrix. */
    struct cpu_copy { const void *host; int64_t n_in, n_out; uint32_t type; uint64_t print; void *copy; } *copies;
    size_t n_copies, copies_cap;
    size_t copy_bytes; /* bytes of all copies */
    bool no_expert_copies; /* bk_cpu_expert_copies(be, false) */
    void *xa[MAX_MATS]; /* expanded activations for repacked matrices, per converted x */
    size_t xa_cap[MAX_MATS];
    char oom[96];        /* an op that could not get its scratch (ops return nothing): the next read reports it */
} cpu_backend;

/* An op's scratch could not grow: ops return nothing, so the failure waits in cb->oom for the next
 * read (a forward's outputs are read back after it), which fails instead of handing back outputs
 * the op never wrote. */
static void op_oom(cpu_backend *cb, const char *what) {
    if (!cb->oom[0]) snprintf(cb->oom, sizeof cb->oom, "out of memory for %s", what);
}

static void cpu_free(bk_backend *be) {
    cpu_backend *cb = (cpu_backend *)be;
    if (!cb) return;
    threadpool_free(cb->tp);
    for (int i = 0; i < MAX_MATS; i++) free(cb->xq[i]);
    for (int i = 0; i < MAX_MATS; i++) free(cb->xp[i]);
    for (int i = 0; i < MAX_MATS; i++) free(cb->xa[i]);
    for (size_t i = 0; i < cb->copies_cap; i++) free(cb->copies[i].copy);
    free(cb->copies);
    for (int i = 0; cb->panel && i < cb->n_threads; i++) free(cb->panel[i]);
    free(cb->panel);
    free(cb->att_scratch);
    free(cb->rot);
    free(cb->att_blk);
    free(cb->sp_scratch);
    free(cb->sp_idx);
    free(cb->sp_pages);
    cpu_moe_scratch_free(&cb->moe);
    free(cb);
}

static brisk_status cpu_alloc(bk_backend *be, size_t bytes, void **out) {
    (void)be;
    *out = calloc(1, bytes ? bytes : 1);
    if (!*out) return bk_fail(BRISK_ERR_NOMEM, "cannot allocate %zu bytes of host memory", bytes);
    return BRISK_OK;
}

static void cpu_release(bk_backend *be, void *p) {
    (void)be;
    free(p);
}

static brisk_status cpu_bind_weight(bk_backend *be, bk_weight *w) {
    (void)be;
    if (w->n_out > 1 && !cpu_get_vec_dot(w->type))
        return bk_fail(BRISK_ERR_UNSUPPORTED, "no CPU kernel for tensor %s of type %s", w->name,
                       quant_type_name(w->type));
    return BRISK_OK;
}

/* ---- repacked weight copies (cpu_repack.h) ---- */
typedef struct {
    const bk_weight *w;
    char *dst;
    size_t group_bytes;
} repack_job;

static void repack_worker(void *arg, int ith, int nth) {
    repack_job *j = arg;
    long lo, hi;
    const int R = cpu_repack_rows(j->w->type);
    threadpool_range(j->w->n_out / R, ith, nth, &lo, &hi);
    if (lo < hi)
        cpu_repack_weights(j->w->type, j->w->n_in, (hi - lo) * R,
                           (const char *)j->w->host + (size_t)lo * R * j->w->row_bytes, j->w->row_bytes,
                           j->dst + (size_t)lo * j->group_bytes);
}

/* The repacked copy of a matrix, or NULL where its type has no repacked
 * layout on this CPU (or memory ran out: the mapped rows serve). A copy is
 * made on the first pass that reads the matrix and kept, keyed by the mapped
 * address and shape, until the backend is freed (a tied LM head shares its
 * embedding's); an expert tensor's copy holds all its experts. Each backend (each
 * context's stage) makes its own. */
/* A matrix's bytes at its two ends (its first and last rows' first 64 bytes): a repacked copy is
 * found by the host address, and a caller's buffer freed and allocated again at that address for
 * other weights (test_shard's packed shards did) must not find the old matrix's copy. */
static uint64_t fingerprint(const bk_weight *w) {
    uint64_t h = 0xcbf29ce484222325ULL;
    size_t n = w->row_bytes < 64 ? w->row_bytes : 64;
    const unsigned char *rows[2] = {w->host, (const unsigned char *)w->host + (size_t)(w->n_out - 1) * w->row_bytes};
    for (int r = 0; r < 2; r++)
        for (size_t i = 0; i < n; i++) h = (h ^ rows[r][i]) * 0x100000001b3ULL;
    return h;
}

/* w repacked into a new copy (counted in copy_bytes), or NULL: no layout for its type, or no memory. */
static void *make_copy(cpu_backend *cb, const bk_weight *w) {
    const size_t rb = cpu_repack_bytes(w->type, w->n_in, w->n_out);
    /* Copies are resident memory beside the mapped file, which the kernel can drop: past half of
     * the machine's memory (a MoE larger than RAM, read from the page cache) the mapped rows serve. */
    const long pages = sysconf(_SC_PHYS_PAGES), page = sysconf(_SC_PAGESIZE);
    if (rb && pages > 0 && page > 0 && cb->copy_bytes + rb > (size_t)pages * (size_t)page / 2) return NULL;
    void *copy = rb ? aligned_alloc(64, (rb + 63) & ~(size_t)63) : NULL;
    if (copy) {
        repack_job j = {w, copy, cpu_repack_bytes(w->type, w->n_in, cpu_repack_rows(w->type))};
        threadpool_run(cb->tp, repack_worker, &j);
        cb->copy_bytes += rb;
    }
    return copy;
}

static const void *repacked(cpu_backend *cb, const bk_weight *w) {
    if (!w->host || w->n_out < 1) return NULL;
    /* an expert tensor: whole groups in every expert (the groups then never straddle two), and its
     * rows in the mapped file, not placed one by one (expert_ptrs). AVX2's layouts only: measured
     * there (bench/RESULTS.md, session 33) and run by test_conformance's MoE cases on such a core;
     * AVX-512's expert copies are neither yet, so those cores keep the mapped rows for experts. */
    if (w->n_expert > 1) {
        const int R = cpu_repack_rows(w->type);
        if (cb->no_expert_copies || cpu_dot_isa() != CPU_ISA_AVX2 || !R || w->expert_ptrs ||
            (w->n_out / w->n_expert) % R)
            return NULL;
    }
    size_t h = ((uintptr_t)w->host >> 6) * 0x9E3779B97F4A7C15ULL;
    const uint64_t print = fingerprint(w);
    for (size_t i = cb->copies_cap ? h & (cb->copies_cap - 1) : 0; cb->copies_cap && cb->copies[i].host;
         i = (i + 1) & (cb->copies_cap - 1)) {
        struct cpu_copy *c = &cb->copies[i];
        if (c->host != w->host || c->n_in != w->n_in || c->n_out != w->n_out || c->type != w->type) continue;
        if (c->print == print) return c->copy; /* the same matrix (a view of other rows of it has its own) */
        /* other bytes at the same address: the copy is stale, made again in place */
        if (c->copy) cb->copy_bytes -= cpu_repack_bytes(c->type, c->n_in, c->n_out);
        free(c->copy);
        c->copy = make_copy(cb, w);
        c->print = print;
        return c->copy;
    }
    if (2 * (cb->n_copies + 1) > cb->copies_cap) { /* open addressing, at most half full */
        size_t cap = cb->copies_cap ? 2 * cb->copies_cap : 256;
        struct cpu_copy *t = calloc(cap, sizeof *t);
        if (!t) return NULL;
        for (size_t i = 0; i < cb->copies_cap; i++) {
            if (!cb->copies[i].host) continue;
            size_t k = (((uintptr_t)cb->copies[i].host >> 6) * 0x9E3779B97F4A7C15ULL) & (cap - 1);
            while (t[k].host) k = (k + 1) & (cap - 1);
            t[k] = cb->copies[i];
        }
        free(cb->copies);
        cb->copies = t;
        cb->copies_cap = cap;
    }
    size_t i = h & (cb->copies_cap - 1);
    while (cb->copies[i].host) i = (i + 1) & (cb->copies_cap - 1);
    void *copy = make_copy(cb, w);
    cb->copies[i] = (struct cpu_copy){w->host, w->n_in, w->n_out, w->type, print, copy}; /* NULL copy: read the map, and don't ask again */
    cb->n_copies++;
    return copy;
}

/* ---- get_rows ---- */
static void cpu_get_rows(bk_backend *be, const bk_weight *emb, const int32_t *ids, int n, float *out) {
    (void)be;
    for (int i = 0; i < n; i++) {
        const char *row = (const char *)emb->host + (size_t)ids[i] * emb->row_bytes;
        quant_dequantize(emb->type, row, out + (size_t)i * emb->n_in, emb->n_in);
    }
}

/* ---- rms_norm: sums in double like ggml, then scale, then weight ---- */
typedef struct {
    const float *x, *w;
    float *y;
    int n, dim;
    float eps;
} norm_job;

static void norm_worker(void *arg, int ith, int nth) {
    norm_job *j = arg;
    long lo, hi;
    threadpool_range(j->n, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        const float *x = j->x + r * j->dim;
        float *y = j->y + r * j->dim;
        double sum = 0;
        for (int i = 0; i < j->dim; i++) sum += (double)(x[i] * x[i]);
        float scale = 1.0f / sqrtf((float)(sum / j->dim) + j->eps);
        for (int i = 0; i < j->dim; i++) y[i] = (x[i] * scale) * j->w[i];
    }
}

static void cpu_rms_norm(bk_backend *be, const float *x, const bk_weight *w, float *y, int n_rows,
                         int dim, float eps) {
    cpu_backend *cb = (cpu_backend *)be;
    norm_job j = {x, w->host, y, n_rows, dim, eps};
    if (n_rows * (long)dim < 1 << 16) norm_worker(&j, 0, 1);
    else threadpool_run(cb->tp, norm_worker, &j);
}

/* ---- matmul ---- */
typedef struct {
    int n_w, n;
    const bk_weight *const *w;
    const bk_weight *const *bias;
    const float *x;
    float *const *y;
    const void *xq[MAX_MATS]; /* converted x per matrix */
    size_t xq_stride[MAX_MATS];
    cpu_from_float_fn conv[MAX_MATS];
    int conv_owner[MAX_MATS]; /* index of the matrix whose xq this one shares */
    const void *wr[MAX_MATS]; /* repacked copy, or NULL */
    const void *xa[MAX_MATS]; /* (n, xa_stride) expanded x of a repacked matrix, else NULL */
    size_t xa_stride[MAX_MATS];
    int xa_owner[MAX_MATS];   /* the matrix whose xa this one shares */
    _Atomic long next_tile;   /* mm_dot_worker: the first row tile no thread has claimed */
} mm_job;

static void mm_convert_worker(void *arg, int ith, int nth) {
    mm_job *j = arg;
    long lo, hi;
    threadpool_range(j->n, ith, nth, &lo, &hi);
    for (int m = 0; m < j->n_w; m++) {
        if (j->conv_owner[m] != m || !j->conv[m]) continue;
        int64_t n_in = j->w[m]->n_in;
        for (long t = lo; t < hi; t++)
            j->conv[m](j->x + t * n_in, (char *)j->xq[m] + t * j->xq_stride[m], n_in);
    }
    for (int m = 0; m < j->n_w; m++) { /* after every conversion of this thread's tokens */
        if (!j->xa[m] || j->xa_owner[m] != m) continue;
        for (long t = lo; t < hi; t++)
            cpu_repack_act(j->w[m]->type, j->w[m]->n_in, (const char *)j->xq[m] + t * j->xq_stride[m],
                           (char *)j->xa[m] + t * j->xa_stride[m]);
    }
}

/* A one-token product without a bias can write its sums straight into y: the kernels' (row,
 * token) output with a token stride of 1 is y's row order. A decode step's row ranges then go to a
 * kernel in one call each, not a 16-row tile at a time through the scratch (at 1,024 inputs a tile
 * is 9 KB of Q4_K, about 0.5 us of memory time: the per-tile dispatch, divisions and copy were 3-4%
 * of a 1-thread decode). */
static bool mm_direct(const mm_job *j, int m) { return j->n == 1 && !(j->bias && j->bias[m]); }

/* Rows [a0, b0) x tokens [t0, t0 + nt) of matrix m from the (ROW_TILE, TOK_TILE) scratch s into y,
 * plus the bias. */
static void mm_store(const mm_job *j, int m, long a0, long b0, int t0, int nt, const float *s) {
    const float *bias = j->bias && j->bias[m] ? j->bias[m]->host : NULL;
    const int64_t n_out = j->w[m]->n_out;
    for (long r = a0; r < b0; r++) {
        const float bb = bias ? bias[r] : 0.0f, *sr = s + (r - a0) * TOK_TILE;
        for (int t = 0; t < nt; t++) j->y[m][(size_t)(t0 + t) * n_out + r] = sr[t] + bb;
    }
}

/* Rows [a, b) of matrix m with the plain kernels on the mapped rows; s: (ROW_TILE, TOK_TILE) scratch. */
static void mm_rows_plain(const mm_job *j, int m, long a, long b, float *s) {
    const bk_weight *w = j->w[m];
    cpu_gemm_fn gemm = cpu_get_gemm(w->type);
    if (mm_direct(j, m)) {
        gemm(w->n_in, (const char *)w->host + (size_t)a * w->row_bytes, w->row_bytes, (int)(b - a), j->xq[m],
             j->xq_stride[m], 1, j->y[m] + a, 1);
        return;
    }
    for (long a0 = a; a0 < b; a0 += ROW_TILE) {
        const long b0 = b - a0 < ROW_TILE ? b : a0 + ROW_TILE;
        for (int t0 = 0, nt; t0 < j->n; t0 += nt) {
            nt = j->n - t0 < TOK_TILE ? j->n - t0 : TOK_TILE;
            /* never leave a lone last row: kernels called with several rows sum in
             * the batch (tinyBLAS) order that llama.cpp uses for the whole batch */
            if (j->n - t0 - nt == 1) nt--;
            const char *xq = (const char *)j->xq[m] + (size_t)t0 * j->xq_stride[m];
            gemm(w->n_in, (const char *)w->host + (size_t)a0 * w->row_bytes, w->row_bytes, (int)(b0 - a0), xq,
                 j->xq_stride[m], nt, s, TOK_TILE);
            mm_store(j, m, a0, b0, t0, nt, s);
        }
    }
}

/* Rows [a, b) of a repacked matrix (cpu_repack.h): whole groups of R rows
 * from the copy, the rows around them from the mapped file. */
static void mm_rows(const mm_job *j, int m, long a, long b, float *s) {
    const bk_weight *w = j->w[m];
    const long R = j->xa[m] ? cpu_repack_rows(w->type) : 1, end = w->n_out / R * R;
    const long ga = (a + R - 1) / R * R, gb = (b < end ? b : end) / R * R;
    if (!j->xa[m] || ga >= gb) {
        mm_rows_plain(j, m, a, b, s);
        return;
    }
    if (a < ga) mm_rows_plain(j, m, a, ga, s);
    if (mm_direct(j, m)) {
        cpu_repack_gemm(w->type, w->n_in, j->wr[m], ga / R, gb / R, j->xa[m], j->xa_stride[m], 1, j->y[m] + ga, 1);
    } else {
        for (long a0 = ga; a0 < gb; a0 += ROW_TILE) { /* ROW_TILE: a multiple of every R */
            const long b0 = gb - a0 < ROW_TILE ? gb : a0 + ROW_TILE;
            for (int t0 = 0, nt; t0 < j->n; t0 += nt) {
                nt = j->n - t0 < TOK_TILE ? j->n - t0 : TOK_TILE;
                cpu_repack_gemm(w->type, w->n_in, j->wr[m], a0 / R, b0 / R,
                                (const char *)j->xa[m] + (size_t)t0 * j->xa_stride[m], j->xa_stride[m], nt, s, TOK_TILE);
                mm_store(j, m, a0, b0, t0, nt, s);
            }
        }
    }
    if (gb < b) mm_rows_plain(j, m, gb, b, s);
}

/* The row tiles go in chunks claimed in turn, each a share of what is left (guided scheduling):
 * large first chunks, then smaller ones down to one tile, so that the threads finish together. A
 * fixed half each left the 2-core VM's decode waiting on whichever core was slower or interrupted
 * (the spin in threadpool_run was 12-14% of a 2-thread profile); fixed eighths of a share still
 * left the caller waiting 3% of a decode step for the last chunk. A thread's chunks come in
 * increasing order, so m and first only move forward; which thread computes a row does not change
 * its sums. */
#define MM_GUIDE 2 /* a chunk: what is left / (MM_GUIDE * threads) */
static void mm_dot_worker(void *arg, int ith, int nth) {
    mm_job *j = arg;
    (void)ith;
    long n_tiles = 0, tiles[MAX_MATS];
    for (int m = 0; m < j->n_w; m++) n_tiles += tiles[m] = (j->w[m]->n_out + ROW_TILE - 1) / ROW_TILE;
    float s[ROW_TILE * TOK_TILE];
    int m = 0;
    long first = 0; /* the first tile of matrix m */
    for (long lo = atomic_load_explicit(&j->next_tile, memory_order_relaxed), hi;; lo = hi) {
        do {
            if (lo >= n_tiles) return;
            const long c = nth == 1 ? n_tiles - lo : (n_tiles - lo) / (MM_GUIDE * nth);
            hi = lo + (c > 1 ? c : 1);
        } while (!atomic_compare_exchange_weak_explicit(&j->next_tile, &lo, hi, memory_order_relaxed,
                                                        memory_order_relaxed));
        for (long t = lo, e; t < hi; t = e) { /* the chunk's tiles of one matrix at a time */
            while (t >= first + tiles[m]) first += tiles[m++];
            e = hi < first + tiles[m] ? hi : first + tiles[m];
            const long b = (e - first) * ROW_TILE;
            mm_rows(j, m, (t - first) * ROW_TILE, b < j->w[m]->n_out ? b : j->w[m]->n_out, s);
        }
    }
}

/* ---- matmul of a prompt batch on packed panels (cpu_pgemm.h) ---- */
#define PGEMM_MIN_TOKENS 16 /* fewer tokens: the panel unpacking costs more than it saves */

typedef struct {
    int n_w, n;
    const bk_weight *const *w;
    const bk_weight *const *bias;
    const float *x;
    float *const *y;
    int owner[MAX_MATS];      /* the matrix whose converted x this one shares */
    int tt[MAX_MATS];         /* tokens per tile */
    void *xq[MAX_MATS];       /* converted rows (staging for the tiles) */
    size_t xq_stride[MAX_MATS];
    void *xp[MAX_MATS];       /* (n / tt, tile_bytes) packed tiles */
    size_t tile_bytes[MAX_MATS];
    cpu_from_float_fn conv[MAX_MATS];
    long n_panels;
    void **panel;             /* (n_threads) */
} pg_job;

static void pg_pack_worker(void *arg, int ith, int nth) {
    pg_job *j = arg;
    for (int m = 0; m < j->n_w; m++) {
        if (j->owner[m] != m) continue;
        const int T = j->tt[m];
        const int64_t k = j->w[m]->n_in;
        long lo, hi;
        threadpool_range((j->n + T - 1) / T, ith, nth, &lo, &hi);
        for (long tile = lo; tile < hi; tile++) {
            const long t0 = tile * T, nt = j->n - t0 < T ? j->n - t0 : T;
            char *xq = (char *)j->xq[m] + (size_t)t0 * j->xq_stride[m];
            for (long t = 0; t < nt; t++) j->conv[m](j->x + (t0 + t) * k, xq + (size_t)t * j->xq_stride[m], k);
            cpu_pgemm_pack_act(j->w[m]->type, k, xq, j->xq_stride[m], (int)nt, (char *)j->xp[m] + (size_t)tile * j->tile_bytes[m]);
        }
    }
}

static void pg_dot_worker(void *arg, int ith, int nth) {
    pg_job *j = arg;
    long lo, hi, base = 0;
    threadpool_range(j->n_panels, ith, nth, &lo, &hi);
    float out[CPU_PGEMM_ROWS * 16];
    for (int m = 0; m < j->n_w && base < hi; m++) {
        const bk_weight *w = j->w[m];
        const long np = (w->n_out + CPU_PGEMM_ROWS - 1) / CPU_PGEMM_ROWS;
        const int o = j->owner[m], T = j->tt[m];
        const float *bias = j->bias && j->bias[m] ? j->bias[m]->host : NULL;
        for (long p = lo > base ? lo - base : 0; p < np && base + p < hi; p++) {
            const long r0 = p * CPU_PGEMM_ROWS;
            const int nr = w->n_out - r0 < CPU_PGEMM_ROWS ? (int)(w->n_out - r0) : CPU_PGEMM_ROWS;
            cpu_pgemm_pack_panel(w->type, w->n_in, (const char *)w->host + (size_t)r0 * w->row_bytes, w->row_bytes, nr,
                                 j->panel[ith]);
            for (long t0 = 0; t0 < j->n; t0 += T) {
                cpu_pgemm_tile(w->type, w->n_in, j->panel[ith], (const char *)j->xp[o] + (size_t)(t0 / T) * j->tile_bytes[o], out);
                const long nt = j->n - t0 < T ? j->n - t0 : T;
                for (long t = 0; t < nt; t++) {
                    float *yr = j->y[m] + (size_t)(t0 + t) * w->n_out + r0;
                    for (int r = 0; r < nr; r++) yr[r] = out[t * CPU_PGEMM_ROWS + r] + (bias ? bias[r0 + r] : 0.0f);
                }
            }
        }
        base += np;
    }
}

/* The packed path when every matrix has a packed kernel; false (nothing done) otherwise. */
static bool pg_matmul(cpu_backend *cb, int n_w, const bk_weight *const *w, const bk_weight *const *bias,
                      const float *x, int n, float *const *y) {
    if (n < PGEMM_MIN_TOKENS) return false;
    pg_job j = {.n_w = n_w, .n = n, .w = w, .bias = bias, .x = x, .y = y};
    size_t panel_bytes = 0;
    for (int m = 0; m < n_w; m++) {
        j.tt[m] = cpu_pgemm_tile_tokens(w[m]->type);
        if (!j.tt[m] || w[m]->n_in % 2) return false;
        size_t pb = cpu_pgemm_panel_bytes(w[m]->type, w[m]->n_in);
        if (pb > panel_bytes) panel_bytes = pb;
        j.n_panels += (w[m]->n_out + CPU_PGEMM_ROWS - 1) / CPU_PGEMM_ROWS;
    }
    if (cb->panel_cap < panel_bytes) {
        if (!cb->panel && !(cb->panel = calloc((size_t)cb->n_threads, sizeof *cb->panel))) return false;
        for (int i = 0; i < cb->n_threads; i++) {
            size_t cap = cb->panel_cap;
            if (cpu_grow_aligned(&cb->panel[i], &cap, panel_bytes) != BRISK_OK) return false;
        }
        cb->panel_cap = panel_bytes;
    }
    j.panel = cb->panel;
    for (int m = 0; m < n_w; m++) {
        uint32_t vt = quant_get_traits(w[m]->type)->vec_dot_type;
        j.owner[m] = m;
        for (int p = 0; p < m; p++)
            if (w[p]->n_in == w[m]->n_in && quant_get_traits(w[p]->type)->vec_dot_type == vt) j.owner[m] = j.owner[p];
        if (j.owner[m] != m) continue;
        j.conv[m] = cpu_get_from_float(vt);
        j.xq_stride[m] = quant_row_size(vt, w[m]->n_in);
        j.tile_bytes[m] = cpu_pgemm_act_bytes(w[m]->type, w[m]->n_in);
        const size_t n_tiles = (size_t)(n + j.tt[m] - 1) / j.tt[m];
        if (!j.conv[m] || cpu_grow(&cb->xq[m], &cb->xq_cap[m], j.xq_stride[m] * (size_t)n) != BRISK_OK ||
            cpu_grow_aligned(&cb->xp[m], &cb->xp_cap[m], j.tile_bytes[m] * n_tiles) != BRISK_OK)
            return false;
        j.xq[m] = cb->xq[m];
        j.xp[m] = cb->xp[m];
    }
    threadpool_run(cb->tp, pg_pack_worker, &j);
    threadpool_run(cb->tp, pg_dot_worker, &j);
    return true;
}

static void cpu_matmul(bk_backend *be, int n_w, const bk_weight *const *w, const bk_weight *const *bias,
                       const float *x, int n, float *const *y) {
    cpu_backend *cb = (cpu_backend *)be;
    if (pg_matmul(cb, n_w, w, bias, x, n, y)) return;
    mm_job j = {.n_w = n_w, .n = n, .w = w, .bias = bias, .x = x, .y = y};
    bool need_conv = false;
    for (int m = 0; m < n_w; m++) {
        uint32_t vt = quant_get_traits(w[m]->type)->vec_dot_type;
        j.conv_owner[m] = m;
        for (int p = 0; p < m; p++)
            if (w[p]->n_in == w[m]->n_in &&
                quant_get_traits(w[p]->type)->vec_dot_type == vt)
                j.conv_owner[m] = j.conv_owner[p];
        if (vt == QT_F32) {
            j.xq[m] = x;
            j.xq_stride[m] = (size_t)w[m]->n_in * sizeof(float);
            j.conv[m] = NULL;
            continue;
        }
        j.xq_stride[m] = quant_row_size(vt, w[m]->n_in);
        if (j.xq_stride[m] % 4096 == 0) j.xq_stride[m] += 64; /* rows 4 KiB apart alias in L1 */
        if (j.conv_owner[m] == m) {
            j.conv[m] = cpu_get_from_float(vt);
            /* A failed grow leaves the old buffer: the caller sized things at context creation,
             * so this only happens on true memory exhaustion. */
            if (cpu_grow(&cb->xq[m], &cb->xq_cap[m], j.xq_stride[m] * (size_t)n) != BRISK_OK) return op_oom(cb, "activations");
            j.xq[m] = cb->xq[m];
            need_conv = true;
        } else {
            j.xq[m] = j.xq[j.conv_owner[m]];
        }
    }
    for (int m = 0; m < n_w; m++) { /* repacked matrices: expanded activations, shared like xq */
        if (!j.conv[j.conv_owner[m]] || !(j.wr[m] = repacked(cb, w[m]))) continue;
        j.xa_owner[m] = m;
        for (int p = 0; p < m; p++)
            if (j.xa[p] && j.conv_owner[p] == j.conv_owner[m] && w[p]->type == w[m]->type) j.xa_owner[m] = j.xa_owner[p];
        if (j.xa_owner[m] != m) {
            j.xa[m] = j.xa[j.xa_owner[m]];
            j.xa_stride[m] = j.xa_stride[j.xa_owner[m]];
            continue;
        }
        j.xa_stride[m] = cpu_repack_act_bytes(w[m]->type, w[m]->n_in);
        if (cpu_grow_aligned(&cb->xa[m], &cb->xa_cap[m], j.xa_stride[m] * (size_t)n) != BRISK_OK)
            return op_oom(cb, "repacked activations");
        j.xa[m] = cb->xa[m];
    }
    if (need_conv) {
        if (n == 1) mm_convert_worker(&j, 0, 1);
        else threadpool_run(cb->tp, mm_convert_worker, &j);
    }
    threadpool_run(cb->tp, mm_dot_worker, &j);
}

/* ---- rope, as ggml computes it (theta accumulated by repeated multiplication) ---- */
static float yarn_ramp(float low, float high, int i0) {
    float y = (i0 / 2 - low) / fmaxf(0.001f, high - low);
    return 1.0f - fminf(1.0f, fmaxf(0.0f, y));
}

static void yarn_corr_dims(const bk_rope_params *rp, float dims[2]) {
    float n = (float)rp->n_rot, base = rp->freq_base;
    float start = floorf(n * logf((float)rp->n_ctx_orig / (rp->beta_fast * 2.0f * (float)M_PI)) /
                         (2.0f * logf(base)));
    float end = ceilf(n * logf((float)rp->n_ctx_orig / (rp->beta_slow * 2.0f * (float)M_PI)) /
                      (2.0f * logf(base)));
    dims[0] = fmaxf(0.0f, start);
    dims[1] = fminf(n - 1, end);
}

typedef struct {
    float *x;
    int n, n_heads, head_dim;
    const int32_t *pos;
    const bk_rope_params *rp;
} rope_job;

static void rope_worker(void *arg, int ith, int nth) {
    rope_job *j = arg;
    const bk_rope_params *rp = j->rp;
    int n_rot = rp->n_rot;
    float theta_scale = powf(rp->freq_base, -2.0f / (float)n_rot);
    float corr[2];
    yarn_corr_dims(rp, corr);
    float cs[2048]; /* (n_rot/2) cos, sin pairs */
    long lo, hi;
    threadpool_range(j->n, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++) {
        float theta = (float)j->pos[t];
        for (int i0 = 0; i0 < n_rot; i0 += 2) {
            float ff = rp->freq_factors ? rp->freq_factors[i0 / 2] : 1.0f;
            float extrap = theta / ff, interp = rp->freq_scale * extrap, th = interp;
            float mscale = rp->attn_factor;
            if (rp->ext_factor != 0.0f) {
                float mix = yarn_ramp(corr[0], corr[1], i0) * rp->ext_factor;
                th = interp * (1 - mix) + extrap * mix;
                mscale *= 1.0f + 0.1f * logf(1.0f / rp->freq_scale);
            }
            cs[i0] = cosf(th) * mscale;
            cs[i0 + 1] = sinf(th) * mscale;
            theta *= theta_scale;
        }
        for (int h = 0; h < j->n_heads; h++) {
            float *v = j->x + ((size_t)t * j->n_heads + h) * j->head_dim;
            for (int i0 = 0; i0 < n_rot; i0 += 2) {
                int a = rp->mode == BK_ROPE_NEOX ? i0 / 2 : i0;
                int b = rp->mode == BK_ROPE_NEOX ? i0 / 2 + n_rot / 2 : i0 + 1;
                float x0 = v[a], x1 = v[b], c = cs[i0], s = cs[i0 + 1];
                v[a] = x0 * c - x1 * s;
                v[b] = x0 * s + x1 * c;
            }
        }
    }
}

static void cpu_rope(bk_backend *be, float *x, int n, int n_heads, int head_dim, const int32_t *pos,
                     const bk_rope_params *rp) {
    cpu_backend *cb = (cpu_backend *)be;
    rope_job j = {x, n, n_heads, head_dim, pos, rp};
    if (n < 4) rope_worker(&j, 0, 1);
    else threadpool_run(cb->tp, rope_worker, &j);
}

/* ---- attention over the paged cache ---- */
typedef struct {
    const float *q, *k, *v;
    const bk_kv_view *kv;
    const bk_attn_batch *ab;
    int n_head, n_head_kv, head_dim;
    float scale;
    float *out;
    cpu_backend *cb;
    size_t att_cap;     /* floats per thread: n_q score rows, a staging row, n_q lane blocks */
    size_t sc_stride;   /* floats per score row (>= the longest span) */
    int n_q;            /* query heads per work unit: the GQA group on AVX-512, else 1 */
    const int *blk;     /* (n_blk + 1) first token of each query block (cpu_attn_block), or NULL */
    int n_blk;
    int nb_max;         /* block-sparse: pages of the longest span */
} att_job;


/* f32 -> f16 rounded to nearest even (quant_f32_to_f16's rounding; the
 * hardware conversion where the clone's ISA has one). */
#if defined(__FLT16_MAX__) && defined(__x86_64__)
__attribute__((target("avx512f"))) static void f2h_row_avx512(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 16 <= n; i += 16)
        _mm256_storeu_si256((__m256i *)(dst + i), _mm512_cvtps_ph(_mm512_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) dst[i] = quant_f32_to_f16(src[i]);
}

/* (CPU_ISA_AVX2 implies F16C: cpu_dot.c) Without it the cast below is a libgcc call per value,
 * 1.3% of a 2-thread qwen3-0.6b decode on the AVX2 EPYC. */
__attribute__((target("avx2,f16c"))) static void f2h_row_f16c(const float *src, uint16_t *dst, size_t n) {
    size_t i = 0;
    for (; i + 8 <= n; i += 8)
        _mm_storeu_si128((__m128i *)(dst + i), _mm256_cvtps_ph(_mm256_loadu_ps(src + i), _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC));
    for (; i < n; i++) dst[i] = quant_f32_to_f16(src[i]);
}

static void f2h_row(const float *restrict src, uint16_t *restrict dst, size_t n) {
    const cpu_isa isa = cpu_dot_isa();
    if (isa == CPU_ISA_AVX512) {
        f2h_row_avx512(src, dst, n);
        return;
    }
    if (isa == CPU_ISA_AVX2) {
        f2h_row_f16c(src, dst, n);
        return;
    }
    for (size_t i = 0; i < n; i++) {
        _Float16 h = (_Float16)src[i];
        memcpy(dst + i, &h, 2);
    }
}
#else
static void f2h_row(const float *restrict src, uint16_t *restrict dst, size_t n) {
    for (size_t i = 0; i < n; i++) dst[i] = quant_f32_to_f16(src[i]);
}
#endif

/* The block format of a quantized KV type (bk_kv_block_bytes != 0). */
static inline uint32_t kv_quant_type(int kv_type) { return kv_type == BRISK_KV_Q8_0 ? QT_Q8_0 : QT_Q4_0; }

static void att_write_worker(void *arg, int ith, int nth) {
    att_job *j = arg;
    size_t kvd = (size_t)j->n_head_kv * j->head_dim;
    long lo, hi;
    threadpool_range(j->ab->n_tokens, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++) {
        size_t off = (size_t)j->ab->slot[t] * kvd;
        const float *ks = j->k + t * kvd, *vs = j->v + t * kvd;
        size_t bb = bk_kv_block_bytes(j->kv->kv_type);
        if (bb) { /* kvd % 32 == 0: whole blocks, head by head alike (ggml's reference rounding) */
            uint32_t qt = kv_quant_type(j->kv->kv_type);
            quant_quantize(qt, ks, (char *)j->kv->k + off / 32 * bb, (int64_t)kvd);
            quant_quantize(qt, vs, (char *)j->kv->v + off / 32 * bb, (int64_t)kvd);
        } else if (j->kv->kv_type == BRISK_KV_F16) {
            f2h_row(ks, (uint16_t *)j->kv->k + off, kvd);
            f2h_row(vs, (uint16_t *)j->kv->v + off, kvd);
        } else {
            memcpy((float *)j->kv->k + off, ks, kvd * sizeof(float));
            memcpy((float *)j->kv->v + off, vs, kvd * sizeof(float));
        }
    }
}

#if defined(__FLT16_MAX__)
typedef _Float16 f16_alias __attribute__((may_alias)); /* the cache stores raw f16 bits */
BK_INLINE void h2f_row(const void *src, float *restrict dst, int n) {
    const f16_alias *restrict h = src; /* vectorizes to vcvtph2ps where F16C exists */
    for (int i = 0; i < n; i++) dst[i] = (float)h[i];
}
#else
BK_INLINE void h2f_row(const void *src, float *restrict dst, int n) {
    for (int i = 0; i < n; i++) dst[i] = h2f(((const uint16_t *)src)[i]);
}
#endif

/* A cache row as f32: in place for an f32 cache, else decoded into buf. */
BK_INLINE const float *kv_row_f32(const bk_kv_view *kv, const void *row, float *buf, int hd) {
    if (kv->kv_type == BRISK_KV_F16) h2f_row(row, buf, hd);
    else if (bk_kv_block_bytes(kv->kv_type)) quant_dequantize(kv_quant_type(kv->kv_type), row, buf, hd);
    else return row;
    return buf;
}

/* y[i] = x[i] * a + y[i], fused, element by element */
BK_INLINE void fma_row(float *restrict y, const float *restrict x, float a, int n) {
    for (int i = 0; i < n; i++) y[i] = fmaf(x[i], a, y[i]);
}

BK_INLINE float dot_f32(const float *a, const float *b, int n) {
    float lane[16] = {0};
    int i = 0;
    for (; i + 16 <= n; i += 16)
        for (int u = 0; u < 16; u++) lane[u] = fmaf(a[i + u], b[i + u], lane[u]);
    float s = reduce16(lane);
    for (; i < n; i++) s = fmaf(a[i], b[i], s);
    return s;
}

/* cpu_attn_head / cpu_attn_block on this core's ISA: 0 where it has none (the per-token loop then runs). */
static int attn_head_isa(const cpu_attn_head *ah) {
    const cpu_isa isa = cpu_dot_isa();
    /* (the AVX2 kernel also takes the quantized caches, which the AVX-512 one leaves) */
    return isa == CPU_ISA_AVX512 ? cpu_attn_head_avx512(ah) || cpu_attn_head_avx2(ah)
           : isa == CPU_ISA_AVX2 ? cpu_attn_head_avx2(ah) : 0;
}
static int attn_block_isa(const cpu_attn_block *ab) {
    const cpu_isa isa = cpu_dot_isa();
    return isa == CPU_ISA_AVX512 ? cpu_attn_block_avx512(ab) || cpu_attn_block_avx2(ab)
           : isa == CPU_ISA_AVX2 ? cpu_attn_block_avx2(ab) : 0;
}

/* One token's query heads h .. h + n_q - 1 (one work unit of att_worker) over positions [0, np) of
 * the page table (the sequence's, or block-sparse attention's compacted one). */
BK_MULTIVERSION static void att_unit(att_job *j, int ith, int t, int h, const int32_t *table, int np) {
    int hd = j->head_dim, group = j->n_head / j->n_head_kv, nq = j->n_q, kvh = h / group;
    float *sc = j->cb->att_scratch + (size_t)ith * j->att_cap;
    float *kbuf = sc + (size_t)nq * j->sc_stride; /* f16 -> f32 staging for one row, then lanes */
    {
        const float *q = j->q + ((size_t)t * j->n_head + h) * hd;
        float *o = j->out + ((size_t)t * j->n_head + h) * hd;
        if (nq > 1 || cpu_dot_isa() >= CPU_ISA_AVX2) {
            cpu_attn_head ah = {.q = q, .kv = j->kv, .table = table, .np = np, .kvh = kvh, .n_head_kv = j->n_head_kv,
                                .hd = hd, .scale = j->scale, .scores = sc, .sc_stride = j->sc_stride,
                                .lanes = kbuf + hd, .out = o, .n_q = nq, .group = group};
            if (attn_head_isa(&ah)) return;
        }
        float mx = -INFINITY;
        for (int p = 0; p < np; p++) {
            const float *kf = kv_row_f32(j->kv, cpu_kv_row(j->kv, j->kv->k, table, p, kvh, j->n_head_kv, hd), kbuf, hd);
            float s = dot_f32(q, kf, hd) * j->scale;
            sc[p] = s;
            if (s > mx) mx = s;
        }
        /* exp in chunks of 16, each chunk reduced like a vector, summed in double */
        double sum = 0;
        for (int p0 = 0; p0 < np; p0 += 16) {
            float l16[16] = {0};
            for (int u = 0; u < 16 && p0 + u < np; u++) l16[u] = sc[p0 + u] = exp_poly(sc[p0 + u] - mx);
            sum += (double)reduce16(l16);
        }
        float inv = (float)(1.0 / sum);
        for (int p = 0; p < np; p++) sc[p] *= inv;
        /* o[i] = sum_p a[p] v[p][i], reduced over p in 16 lanes like a dot product over positions */
        float *lanes = kbuf + hd; /* (16, hd) — the staging area is sized for it */
        int full = np & ~15;
        memset(lanes, 0, (size_t)16 * hd * sizeof(float));
        for (int p = 0; p < full; p++) {
            const float *vf = kv_row_f32(j->kv, cpu_kv_row(j->kv, j->kv->v, table, p, kvh, j->n_head_kv, hd), kbuf, hd);
            fma_row(lanes + (size_t)(p & 15) * hd, vf, sc[p], hd);
        }
        /* reduce16 of each column, as whole-row additions (same pairs, same order) */
        for (int r = 0; r < 8; r++) {
            float *restrict a = lanes + (size_t)r * hd;
            const float *restrict b = lanes + (size_t)(r + 8) * hd;
            for (int i = 0; i < hd; i++) a[i] = b[i] + a[i];
        }
        for (int r = 0; r < 4; r++) {
            float *restrict a = lanes + (size_t)r * hd;
            const float *restrict b = lanes + (size_t)(r + 4) * hd;
            for (int i = 0; i < hd; i++) a[i] = b[i] + a[i];
        }
        for (int i = 0; i < hd; i++)
            o[i] = (lanes[i] + lanes[2 * (size_t)hd + i]) + (lanes[(size_t)hd + i] + lanes[3 * (size_t)hd + i]);
        for (int p = full; p < np; p++) {
            const float *vf = kv_row_f32(j->kv, cpu_kv_row(j->kv, j->kv->v, table, p, kvh, j->n_head_kv, hd), kbuf, hd);
            fma_row(o, vf, sc[p], hd);
        }
    }
}

/* Striped over work units: causal rows grow with the position, so contiguous
 * ranges would give the last thread most of the work. A unit is (token, head
 * group), or with query blocks (block, KV head): a block of enough lanes goes
 * through cpu_attn_block, a short one token by token. */
static void att_worker(void *arg, int ith, int nth) {
    att_job *j = arg;
    const int units = j->n_head / j->n_q, group = j->n_head / j->n_head_kv;
    if (!j->blk) {
        const long n_work = (long)j->ab->n_tokens * units;
        for (long w = ith; w < n_work; w += nth) {
            const int t = (int)(w / units);
            att_unit(j, ith, t, (int)(w % units) * j->n_q, j->ab->block_table[t], j->ab->pos[t] + 1);
        }
        return;
    }
    const long n_work = (long)j->n_blk * j->n_head_kv;
    for (long w = ith; w < n_work; w += nth) {
        /* KV-head major: a thread's consecutive units reread one head's K/V rows from L2 */
        const int b = (int)(w % j->n_blk), kvh = (int)(w / j->n_blk), t0 = j->blk[b], nt = j->blk[b + 1] - t0;
        if (nt * group >= ATT_BLOCK_MIN_LANES) {
            const size_t ts = (size_t)j->n_head * j->head_dim, off = (size_t)t0 * ts + (size_t)kvh * group * j->head_dim;
            cpu_attn_block ab = {.q = j->q + off, .out = j->out + off, .tok_stride = ts, .pos = j->ab->pos + t0,
                                 .nt = nt, .group = group, .kv = j->kv, .table = j->ab->block_table[t0], .kvh = kvh,
                                 .n_head_kv = j->n_head_kv, .hd = j->head_dim, .scale = j->scale,
                                 .scratch = j->cb->att_scratch + (size_t)ith * j->att_cap};
            if (attn_block_isa(&ab)) continue;
        }
        for (int t = t0; t < t0 + nt; t++)
            for (int h = kvh * group; h < (kvh + 1) * group; h += j->n_q)
                att_unit(j, ith, t, h, j->ab->block_table[t], j->ab->pos[t] + 1);
    }
}

/* Block-sparse attention (cpu_attn_sparse.h): att_worker's units (a token's query group, or a
 * query block's), each first choosing its pages; the same kernels then run over the compacted
 * page table, with positions shifted to match. */
static void att_sparse_worker(void *arg, int ith, int nth) {
    att_job *j = arg;
    const int group = j->n_head / j->n_head_kv, hd = j->head_dim;
    float *scr = j->cb->sp_scratch + (size_t)ith * j->cb->sp_cap;
    int32_t *blocks = j->cb->sp_idx + (size_t)ith * j->cb->sp_icap, *pages = blocks + j->nb_max, *pos = pages + j->nb_max;
    const long n_units = j->blk ? j->n_blk : j->ab->n_tokens;
    for (long w = ith; w < n_units * j->n_head_kv; w += nth) {
        const int u = (int)(w % n_units), kvh = (int)(w / n_units);
        const int t0 = j->blk ? j->blk[u] : u, nt = j->blk ? j->blk[u + 1] - t0 : 1;
        const size_t ts = (size_t)j->n_head * hd, off = (size_t)t0 * ts + (size_t)kvh * group * hd;
        cpu_sparse_sel s = {.q = j->q + off, .tok_stride = ts, .n_tok = nt, .group = group, .pos = j->ab->pos + t0,
                            .kv = j->kv, .table = j->ab->block_table[t0], .kvh = kvh, .n_head_kv = j->n_head_kv, .hd = hd};
        int shift;
        cpu_sparse_select(&s, j->scale, scr, blocks, pages, &shift);
        for (int i = 0; i < nt; i++) pos[i] = s.pos[i] - shift;
        if (j->blk && nt * group >= ATT_BLOCK_MIN_LANES) {
            cpu_attn_block ab = {.q = j->q + off, .out = j->out + off, .tok_stride = ts, .pos = pos, .nt = nt,
                                 .group = group, .kv = j->kv, .table = pages, .kvh = kvh, .n_head_kv = j->n_head_kv,
                                 .hd = hd, .scale = j->scale, .scratch = j->cb->att_scratch + (size_t)ith * j->att_cap};
            if (attn_block_isa(&ab)) continue;
        }
        for (int i = 0; i < nt; i++)
            for (int h = kvh * group; h < (kvh + 1) * group; h += j->n_q) att_unit(j, ith, t0 + i, h, pages, pos[i] + 1);
    }
}

/* Sizes block-sparse attention's scratch for spans up to max_pos (false: out of memory). */
static bool sparse_scratch(cpu_backend *cb, const bk_kv_view *kv, int group, int max_pos, int head_dim, int *nb_max) {
    *nb_max = max_pos / kv->block_size + 1;
    size_t have = cb->sp_cap * sizeof(float) * (size_t)cb->n_threads;
    size_t cap = cpu_sparse_scratch_floats(group > 16 ? group : 16, *nb_max, max_pos + 1, head_dim);
    if (cap > cb->sp_cap) {
        if (cpu_grow((void **)&cb->sp_scratch, &have, cap * sizeof(float) * (size_t)cb->n_threads) != BRISK_OK) return false;
        cb->sp_cap = cap;
    }
    size_t icap = 2 * (size_t)*nb_max + 16;
    have = cb->sp_icap * sizeof(int32_t) * (size_t)cb->n_threads;
    if (icap > cb->sp_icap) {
        if (cpu_grow((void **)&cb->sp_idx, &have, icap * sizeof(int32_t) * (size_t)cb->n_threads) != BRISK_OK) return false;
        cb->sp_icap = icap;
    }
    return true;
}

static void attention_core(cpu_backend *cb, const float *q, const float *k, const float *v, const bk_kv_view *kv,
                           const bk_attn_batch *ab, int n_head, int n_head_kv, int head_dim, float scale, float *out) {
    int max_pos = 0;
    for (int t = 0; t < ab->n_tokens; t++)
        if (ab->pos[t] > max_pos) max_pos = ab->pos[t];
    /* GQA groups go through the AVX2 / AVX-512 kernel together (K/V rows read once per group) */
    int group = n_head / n_head_kv;
    const bool quant = bk_kv_block_bytes(kv->kv_type) != 0; /* (q8_0, q4_0: the AVX2 kernel's alone) */
    const bool kernel = cpu_dot_isa() >= CPU_ISA_AVX2 && head_dim % (quant ? 32 : 16) == 0 && group <= 16 &&
                        n_head % n_head_kv == 0;
    int nq = kernel ? group : 1;
    /* The AVX2 kernel's units of decode and short batches take as many adjacent KV heads as still
     * give every thread the same number of units: a unit reads a position's rows of its heads as
     * one run. One KV head a unit read a 256-byte row every n_head_kv rows, a pattern the hardware
     * prefetchers do not follow; qwen3-0.6b's 8 heads on 2 threads now read 1 KiB runs. */
    if (kernel && (cpu_dot_isa() == CPU_ISA_AVX2 || quant) && ab->n_tokens < ATT_BLOCK_MIN_TOKENS &&
        !(kv->ksum && kv->sparse_k > 0))
        for (int h = n_head_kv; h > 1; h--) {
            const long units = (long)ab->n_tokens * (n_head_kv / h);
            if (n_head_kv % h == 0 && h * group <= CPU_ATTN_MAX_Q && units >= cb->n_threads && units % cb->n_threads == 0) {
                nq = h * group;
                break;
            }
        }
    size_t stride = ((size_t)max_pos + 1 + 15) & ~(size_t)15;
    size_t cap = (size_t)nq * stride + 2 * (size_t)head_dim + (size_t)nq * 16 * head_dim; /* scores, staging, lanes */
    if (cap < (size_t)64 * head_dim) cap = (size_t)64 * head_dim; /* cpu_attn_block's four tiles */
    if (cap > cb->att_cap && cap < 2 * cb->att_cap) cap = 2 * cb->att_cap; /* grow geometrically */
    size_t bytes = cap * sizeof(float) * (size_t)cb->n_threads;
    if (cap > cb->att_cap) {
        size_t have = cb->att_cap * sizeof(float) * (size_t)cb->n_threads;
        if (cpu_grow((void **)&cb->att_scratch, &have, bytes) != BRISK_OK) return op_oom(cb, "attention scores");
        cb->att_cap = cap;
    }
    att_job j = {q, k, v, kv, ab, n_head, n_head_kv, head_dim, scale, out, cb, cb->att_cap, stride, nq, NULL, 0, 0};
    /* Query blocks: runs of entries of one sequence, 16 lanes (tokens x group) at most. */
    if (ab->n_tokens >= ATT_BLOCK_MIN_TOKENS && kernel &&
        cpu_grow((void **)&cb->att_blk, &cb->att_blk_cap, sizeof(int) * ((size_t)ab->n_tokens + 1)) == BRISK_OK) {
        const int per = 16 / group;
        int nb = 0;
        for (int t = 0; t < ab->n_tokens; t++)
            if (!nb || t - cb->att_blk[nb - 1] >= per || ab->block_table[t] != ab->block_table[cb->att_blk[nb - 1]])
                cb->att_blk[nb++] = t;
        cb->att_blk[nb] = ab->n_tokens;
        j.blk = cb->att_blk;
        j.n_blk = nb;
    }
    if (k && ab->n_tokens < 8) att_write_worker(&j, 0, 1);
    else if (k) threadpool_run(cb->tp, att_write_worker, &j);
    if (k && kv->ksum) {
        size_t have = cb->sp_pages_cap;
        if (cpu_grow((void **)&cb->sp_pages, &have, sizeof(int32_t) * 2 * (size_t)ab->n_tokens) != BRISK_OK)
            return op_oom(cb, "key summaries");
        cb->sp_pages_cap = have;
        cpu_sparse_summarise(cb->tp, kv, ab, n_head_kv, head_dim, cb->sp_pages);
    }
    /* without memory for the choice's scratch, dense attention: exact, only slower */
    if (kv->ksum && kv->sparse_k > 0 && sparse_scratch(cb, kv, group, max_pos, head_dim, &j.nb_max))
        threadpool_run(cb->tp, att_sparse_worker, &j);
    else
        threadpool_run(cb->tp, att_worker, &j);
}

/* The q4_0h cache (kv_rot.h): q and k rotated head by head into cb->rot, then the attention over
 * the q4_0 blocks of the rotated keys and the plain values (the scores are unchanged by a rotation of
 * both, and the output needs no inverse). */
typedef struct rot_job {
    float *x; /* rows of head_dim values */
    size_t rows;
    int hd;
} rot_job;

static void rot_worker(void *arg, int ith, int nth) {
    const rot_job *j = arg;
    long lo, hi;
    threadpool_range((long)j->rows, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) kv_rot_apply(j->x + (size_t)r * j->hd, j->hd);
}

static void cpu_attention(bk_backend *be, const float *q, const float *k, const float *v,
                          const bk_kv_view *kv, const bk_attn_batch *ab, int n_head, int n_head_kv,
                          int head_dim, float scale, float *out) {
    cpu_backend *cb = (cpu_backend *)be;
    if (kv->kv_type != BRISK_KV_Q4_0H) {
        attention_core(cb, q, k, v, kv, ab, n_head, n_head_kv, head_dim, scale, out);
        return;
    }
    const size_t nq = (size_t)ab->n_tokens * n_head * head_dim, nk = (size_t)ab->n_tokens * n_head_kv * head_dim;
    size_t have = cb->rot_cap * sizeof(float);
    if (cpu_grow((void **)&cb->rot, &have, (nq + nk) * sizeof(float)) != BRISK_OK) return op_oom(cb, "rotated q and k");
    cb->rot_cap = have / sizeof(float);
    float *qr = cb->rot, *kr = k ? qr + nq : NULL; /* q's rows, then k's: one pass rotates both */
    memcpy(qr, q, nq * sizeof(float));
    if (k) memcpy(kr, k, nk * sizeof(float));
    rot_job j = {qr, (size_t)ab->n_tokens * (n_head + (k ? n_head_kv : 0)), head_dim};
    if (j.rows < 64) rot_worker(&j, 0, 1);
    else threadpool_run(cb->tp, rot_worker, &j);
    bk_kv_view q4 = *kv;
    q4.kv_type = BRISK_KV_Q4_0;
    attention_core(cb, qr, kr, v, &q4, ab, n_head, n_head_kv, head_dim, scale, out);
}

/* ---- elementwise ---- */
BK_MULTIVERSION static void cpu_swiglu(bk_backend *be, const float *gate, const float *up, float *out, size_t n) {
    (void)be;
    const cpu_isa isa = cpu_dot_isa();
    if (isa == CPU_ISA_AVX512) cpu_swiglu_avx512(gate, up, out, n);
    else if (isa == CPU_ISA_AVX2) cpu_swiglu_avx2(gate, up, out, n);
    else swiglu_row(gate, up, out, n);
}

static void cpu_add(bk_backend *be, float *x, const float *y, size_t n) {
    (void)be;
    for (size_t i = 0; i < n; i++) x[i] += y[i];
}

static brisk_status cpu_read(bk_backend *be, const void *src, void *dst, size_t bytes) {
    cpu_backend *cb = (cpu_backend *)be;
    if (cb->oom[0]) {
        brisk_status s = bk_fail(BRISK_ERR_NOMEM, "CPU backend: %s", cb->oom);
        cb->oom[0] = 0;
        return s;
    }
    if (src != dst) memcpy(dst, src, bytes);
    return BRISK_OK;
}

static void cpu_copy(bk_backend *be, void *dst, const void *src, size_t bytes) {
    (void)be;
    memcpy(dst, src, bytes);
}

static void cpu_copy_rows(bk_backend *be, void *dst, size_t dst_pitch, const void *src, size_t src_pitch,
                          size_t row_bytes, size_t n_rows) {
    (void)be;
    for (size_t r = 0; r < n_rows; r++) memcpy((char *)dst + r * dst_pitch, (const char *)src + r * src_pitch, row_bytes);
}

/* ---- mixture of experts (cpu_moe.c) ---- */
static void cpu_moe_route_op(bk_backend *be, const float *logits, int n, int n_expert, int k, bool norm,
                             float scale, int32_t *ids, float *weights) {
    cpu_moe_route(((cpu_backend *)be)->tp, logits, n, n_expert, k, norm, scale, ids, weights);
}

static void cpu_moe_ffn_op(bk_backend *be, const bk_weight *gate, const bk_weight *up, const bk_weight *down,
                           const float *x, int n, const int32_t *ids, const float *weights, int k, float *out) {
    cpu_backend *cb = (cpu_backend *)be;
    const void *wr[3] = {repacked(cb, gate), repacked(cb, up), repacked(cb, down)};
    cpu_moe_ffn(cb->tp, &cb->moe, gate, up, down, wr, x, n, ids, weights, k, out);
}

static void cpu_moe_ids_local_op(bk_backend *be, int32_t *ids, int n, int e0, int e1) {
    (void)be;
    cpu_moe_ids_local(ids, n, e0, e1);
}

/* ---- Gated DeltaNet and the sigmoid gate (cpu_ssm.c) ---- */
static void cpu_ssm_conv_op(bk_backend *be, const float *x, const bk_weight *w, float *conv, const int32_t *seq,
                            int n, int channels, int d_conv, float *out) {
    cpu_ssm_conv(((cpu_backend *)be)->tp, x, w, conv, seq, n, channels, d_conv, out);
}

static void cpu_gated_delta_op(bk_backend *be, const float *qkv, const float *b, const float *a,
                               const bk_weight *a_bias, const bk_weight *a_scale, float *ssm, const int32_t *seq,
                               int n, int n_k_heads, int n_v_heads, bool v_grouped, int d, float eps, float *out) {
    cpu_gated_delta(((cpu_backend *)be)->tp, qkv, b, a, a_bias, a_scale, ssm, seq, n, n_k_heads, n_v_heads, v_grouped,
                    d, eps, out);
}

static void cpu_sigmoid_mul_op(bk_backend *be, float *x, const float *gate, int n_rows, int width, int gate_width) {
    (void)be;
    cpu_sigmoid_mul(x, gate, n_rows, width, gate_width);
}

static const bk_backend_ops cpu_ops = {
    .name = "cpu",
    .free = cpu_free,
    .alloc = cpu_alloc,
    .release = cpu_release,
    .bind_weight = cpu_bind_weight,
    .get_rows = cpu_get_rows,
    .rms_norm = cpu_rms_norm,
    .matmul = cpu_matmul,
    .rope = cpu_rope,
    .attention = cpu_attention,
    .swiglu = cpu_swiglu,
    .add = cpu_add,
    .read = cpu_read,
    .copy = cpu_copy,
    .copy_rows = cpu_copy_rows,
    .moe_route = cpu_moe_route_op,
    .moe_ffn = cpu_moe_ffn_op,
    .moe_ids_local = cpu_moe_ids_local_op,
    .ssm_conv = cpu_ssm_conv_op,
    .gated_delta = cpu_gated_delta_op,
    .sigmoid_mul = cpu_sigmoid_mul_op,
};

brisk_status bk_cpu_backend_new(int n_threads, bk_backend **out) { return bk_cpu_backend_new_placed(n_threads, NULL, out); }

brisk_status bk_cpu_backend_new_placed(int n_threads, const brisk_cpu_placement *place, bk_backend **out) {
    *out = NULL;
    cpu_dot_init();
    if (n_threads <= 0) {
        long nc = sysconf(_SC_NPROCESSORS_ONLN);
        n_threads = nc > 0 ? (int)nc : 1;
    }
    cpu_backend *cb = calloc(1, sizeof *cb);
    if (!cb) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    cb->base.ops = &cpu_ops;
    cb->n_threads = n_threads;
    brisk_status s = threadpool_new_ex(n_threads, place, &cb->tp);
    if (s != BRISK_OK) {
        free(cb);
        return s;
    }
    *out = &cb->base;
    return BRISK_OK;
}

size_t bk_cpu_weight_copy_bytes(const bk_backend *be) {
    return be && be->ops == &cpu_ops ? ((const cpu_backend *)be)->copy_bytes : 0;
}

void bk_cpu_expert_copies(bk_backend *be, bool on) {
    if (be && be->ops == &cpu_ops) ((cpu_backend *)be)->no_expert_copies = !on;
}
