/* cpu_moe.c — mixture of experts on the CPU: the router (softmax, top-k,
 * renormalisation) and the routed SwiGLU experts.
 *
 * The expert FFN groups the batch by expert: every (token, slot) pair that
 * chose expert e is a column of e's products, and a tile of e's weight rows
 * is multiplied with all of them while it sits in L1, so an active expert's
 * weights are read once per call and an idle expert's not at all. Threads
 * take (expert, row tile) tasks from a shared counter: popular experts have
 * more columns, and fixed ranges would leave threads idle.
 *
 * An expert with MOE_PG_MIN or more columns (a prompt's popular experts) runs
 * on the packed panels of cpu_pgemm.h instead, as the dense prompt products
 * do: its columns are gathered into token tiles once, and each 16-row panel
 * of its weights is unpacked once and met by all of them. Those columns sum
 * in the panels' float order; decode and rare experts keep ggml's. */
#include "backend/cpu/cpu_moe.h"

#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cpu/cpu_attn.h"
#include "backend/cpu/cpu_dot.h"
#include "backend/cpu/cpu_pgemm.h"
#include "backend/cpu/cpu_repack.h"
#include "backend/cpu/cpu_scratch.h"
#include "base/status.h"
#include "quant/quant.h"

#if defined(__GNUC__) && !defined(__clang__)
#pragma GCC optimize("O3", "fp-contract=off")
#endif

#include "backend/cpu/cpu_math.h"

/* Weight rows per task. 64 rather than 16: a 12-layer qwen3-30b-a3b Q4_K_M decoded 1.2x faster on 2
 * AVX2 cores (fewer claims, and the token's activations read once per 64 rows, not 16). */
#define ROW_TILE 64
/* Columns an expert needs for the packed panels (cpu_pgemm.h): the dense prompt products' threshold. */
#define MOE_PG_MIN 16

void cpu_moe_scratch_free(cpu_moe_scratch *sc) {
    for (int i = 0; i < sc->n_panel; i++) free(sc->panel[i]);
    free(sc->panel);
    free(sc->xt);
    free(sc->ht);
    free(sc->stage);
    free(sc->tbase);
    free(sc->tile_e);
    free(sc->xq);
    free(sc->xq_up);
    free(sc->gu);
    free(sc->hq);
    free(sc->dout);
    free(sc->group);
    for (int i = 0; i < 3; i++) free(sc->xa[i]);
    memset(sc, 0, sizeof *sc);
}

/* ---- router ---- */
typedef struct {
    const float *logits;
    int n, n_expert, k;
    bool norm;
    float scale;
    int32_t *ids;
    float *w;
} route_job;

/* softmax as ggml_vec_soft_max_f32 (AVX-512): groups of 16 through the
 * polynomial exp, each group summed as a vector reduction, the tail through
 * expf, the sum in double; then every value times the float 1/sum. */
BK_MULTIVERSION static void softmax_row(const float *x, float *p, int n) {
    float mx = -INFINITY;
    for (int i = 0; i < n; i++) mx = x[i] > mx ? x[i] : mx;
    double sum = 0;
    int i = 0;
    for (; i + 16 <= n; i += 16) {
        for (int u = 0; u < 16; u++) p[i + u] = exp_poly(x[i + u] - mx);
        sum += (double)reduce16(p + i);
    }
    for (; i < n; i++) {
        p[i] = expf(x[i] - mx);
        sum += (double)p[i];
    }
    float inv = (float)(1.0 / sum);
    for (i = 0; i < n; i++) p[i] *= inv;
}

static void route_worker(void *arg, int ith, int nth) {
    route_job *j = arg;
    float p[BK_MOE_MAX_EXPERTS];
    long lo, hi;
    threadpool_range(j->n, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++) {
        softmax_row(j->logits + t * j->n_expert, p, j->n_expert);
        int32_t *ids = j->ids + t * j->k;
        float *w = j->w + t * j->k;
        /* top-k, most probable first; ties go to the lower id */
        for (int s = 0; s < j->k; s++) {
            int best = -1;
            for (int e = 0; e < j->n_expert; e++) {
                bool taken = false;
                for (int q = 0; q < s; q++) taken |= ids[q] == e;
                if (!taken && (best < 0 || p[e] > p[best])) best = e;
            }
            ids[s] = best;
            w[s] = p[best];
        }
        if (j->norm) { /* ggml_sum_rows (double), clamp to f16's smallest normal, divide */
            double sum = 0;
            for (int s = 0; s < j->k; s++) sum += (double)w[s];
            float fs = (float)sum;
            if (fs < 6.103515625e-5f) fs = 6.103515625e-5f;
            for (int s = 0; s < j->k; s++) w[s] = w[s] / fs;
        }
        if (j->scale != 0.0f && j->scale != 1.0f)
            for (int s = 0; s < j->k; s++) w[s] *= j->scale;
    }
}

static cpu_moe_route_observer g_route_observer;
static void *g_route_observer_user;

void cpu_moe_observe_routes(cpu_moe_route_observer fn, void *user) {
    g_route_observer = fn;
    g_route_observer_user = user;
}

void cpu_moe_route(threadpool *tp, const float *logits, int n, int n_expert, int k, bool norm, float scale,
                   int32_t *ids, float *weights) {
    if (g_route_observer) g_route_observer(g_route_observer_user, logits, n, n_expert, k);
    route_job j = {logits, n, n_expert, k, norm, scale, ids, weights};
    if (n < 8) route_worker(&j, 0, 1);
    else threadpool_run(tp, route_worker, &j);
}

/* a few values a layer (n tokens * k): no threads */
void cpu_moe_ids_local(int32_t *ids, int n, int e0, int e1) {
    for (int i = 0; i < n; i++) ids[i] = ids[i] >= e0 && ids[i] < e1 ? ids[i] - e0 : -1;
}

/* ---- expert FFN ---- */
typedef struct {
    const bk_weight *gate, *up, *down;
    const float *x;
    int n, k, n_act;
    int64_t n_ff, n_embd;
    const int32_t *off, *ent;  /* group offsets by expert, entries t*k+j */
    const int32_t *act;        /* (n_act) experts with at least one entry */
    const void *xq, *xq_up;    /* x converted for gate and up */
    size_t xq_stride, xq_up_stride;
    float *gu;                 /* (n*k, 2*n_ff) */
    const void *hq;            /* down's input rows */
    size_t hq_stride;
    float *dout;               /* (n*k, n_embd) */
    const int32_t *ids;
    const float *w;
    cpu_isa isa;
    /* packed panels: tiles of T tokens (xt: gate/up's, ht: down's), tbase[e] an expert's first
     * (-1: one column at a time), panel[ith] a thread's panel, stage[ith] its gathered rows */
    int T;
    const int32_t *tbase, *tile_e;
    char *xt, *ht, *stage;
    size_t xt_bytes, ht_bytes, stage_bytes;
    long n_tiles;
    void **panel;
    float *out;
    cpu_from_float_fn conv_g, conv_u, conv_d;
    void *hq_buf;
    /* repacked copies of gate, up, down (or NULL) and their expanded activations: gate's and up's
     * by token (up's may be gate's), down's by entry */
    const void *wr[3];
    void *xa[3];
    size_t xa_stride[3];
    atomic_long next;          /* next task of the current phase */
} ffn_job;

static void convert_worker(void *arg, int ith, int nth) {
    ffn_job *j = arg;
    long lo, hi;
    threadpool_range(j->n, ith, nth, &lo, &hi);
    for (long t = lo; t < hi; t++) {
        const float *xr = j->x + t * j->n_embd;
        if (j->conv_g) j->conv_g(xr, (char *)j->xq + t * j->xq_stride, j->n_embd);
        if (j->conv_u) j->conv_u(xr, (char *)j->xq_up + t * j->xq_up_stride, j->n_embd);
        if (j->wr[0])
            cpu_repack_act(j->gate->type, j->n_embd, (const char *)j->xq + t * j->xq_stride,
                           (char *)j->xa[0] + t * j->xa_stride[0]);
        if (j->wr[1] && j->xa[1] != j->xa[0])
            cpu_repack_act(j->up->type, j->n_embd, (const char *)j->xq_up + t * j->xq_up_stride,
                           (char *)j->xa[1] + t * j->xa_stride[1]);
    }
}

/* One row tile of one expert's matrix against every column routed to it:
 * y[ent * y_stride + r] = dot(row r, x[ent]) for the tile's rows. Each column
 * is its own single-token product, as ggml's mul_mat_id computes it. */
static void expert_tile(int which, int64_t rows, int e, int64_t r0, int nr, const ffn_job *j, const void *x,
                        size_t x_stride, int x_by_entry, float *y, size_t y_stride) {
    const bk_weight *wt = which == 0 ? j->gate : which == 1 ? j->up : j->down; /* (which: j->wr's index) */
    if (j->wr[which]) { /* whole groups: rows and ROW_TILE are multiples of R (cpu_backend's copy rule) */
        const int R = cpu_repack_rows(wt->type);
        const int64_t g0 = ((int64_t)e * rows + r0) / R;
        for (int32_t c = j->off[e]; c < j->off[e + 1]; c++) {
            int32_t ent = j->ent[c];
            size_t xi = x_by_entry ? (size_t)ent : (size_t)(ent / j->k);
            cpu_repack_gemm(wt->type, wt->n_in, j->wr[which], g0, g0 + nr / R,
                            (const char *)j->xa[which] + xi * j->xa_stride[which], j->xa_stride[which], 1,
                            y + (size_t)ent * y_stride + r0, 1);
        }
        return;
    }
    cpu_gemm_fn gemm = cpu_get_gemm(wt->type);
    const char *w = wt->expert_ptrs ? (const char *)wt->expert_ptrs[e] + (size_t)r0 * wt->row_bytes
                                    : (const char *)wt->host + ((size_t)e * rows + r0) * wt->row_bytes;
    float s[ROW_TILE];
    for (int32_t c = j->off[e]; c < j->off[e + 1]; c++) {
        int32_t ent = j->ent[c];
        size_t xi = x_by_entry ? (size_t)ent : (size_t)(ent / j->k);
        gemm(wt->n_in, w, wt->row_bytes, nr, (const char *)x + xi * x_stride, x_stride, 1, s, 1);
        memcpy(y + (size_t)ent * y_stride + r0, s, (size_t)nr * sizeof(float));
    }
}

/* Tile i of expert e from its columns' converted rows (x_by_entry: rows by entry, else by token). */
static void pack_tile(const ffn_job *j, uint32_t type, int64_t n_in, int e, long i, const void *x, size_t x_stride,
                      int x_by_entry, char *stage, char *tile) {
    const int32_t c0 = j->off[e] + (int32_t)i * j->T, c1 = c0 + j->T < j->off[e + 1] ? c0 + j->T : j->off[e + 1];
    for (int32_t c = c0; c < c1; c++) {
        const size_t xi = x_by_entry ? (size_t)j->ent[c] : (size_t)(j->ent[c] / j->k);
        memcpy(stage + (size_t)(c - c0) * x_stride, (const char *)x + xi * x_stride, x_stride);
    }
    cpu_pgemm_pack_act(type, n_in, stage, x_stride, (int)(c1 - c0), tile);
}

/* The tiles of the experts on panels: tasks (expert, tile) in tile order. DOWN: down's, from hq. */
static void pack_worker(ffn_job *j, int ith, int down) {
    char *stage = j->stage + (size_t)ith * j->stage_bytes;
    for (long task; (task = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < j->n_tiles;) {
        const int e = j->tile_e[task];
        const long i = task - j->tbase[e];
        if (down) pack_tile(j, j->down->type, j->n_ff, e, i, j->hq, j->hq_stride, 1, stage, j->ht + (size_t)task * j->ht_bytes);
        else pack_tile(j, j->gate->type, j->n_embd, e, i, j->xq, j->xq_stride, 0, stage, j->xt + (size_t)task * j->xt_bytes);
    }
}
static void pack_gu_worker(void *arg, int ith, int nth) { (void)nth; pack_worker(arg, ith, 0); }
static void pack_down_worker(void *arg, int ith, int nth) { (void)nth; pack_worker(arg, ith, 1); }

/* expert_tile's rows on the panels: each 16 rows unpacked once, met by every tile of e. */
static void expert_tile_pg(const bk_weight *wt, int64_t rows, int e, int64_t r0, int nr, const ffn_job *j,
                           const char *tiles, size_t tile_bytes, void *panel, float *y, size_t y_stride) {
    const char *w = wt->expert_ptrs ? (const char *)wt->expert_ptrs[e] + (size_t)r0 * wt->row_bytes
                                    : (const char *)wt->host + ((size_t)e * rows + r0) * wt->row_bytes;
    const int32_t c0 = j->off[e], n_col = j->off[e + 1] - c0;
    float out[CPU_PGEMM_ROWS * 16];
    for (int p = 0; p < nr; p += CPU_PGEMM_ROWS) {
        const int np = nr - p < CPU_PGEMM_ROWS ? nr - p : CPU_PGEMM_ROWS;
        cpu_pgemm_pack_panel(wt->type, wt->n_in, w + (size_t)p * wt->row_bytes, wt->row_bytes, np, panel);
        for (int32_t i = 0; i * j->T < n_col; i++) {
            cpu_pgemm_tile(wt->type, wt->n_in, panel, tiles + (size_t)(j->tbase[e] + i) * tile_bytes, out);
            for (int t = 0; t < j->T && i * j->T + t < n_col; t++)
                memcpy(y + (size_t)j->ent[c0 + i * j->T + t] * y_stride + r0 + p, out + CPU_PGEMM_ROWS * t,
                       (size_t)np * sizeof(float));
        }
    }
}

/* gate and up: tasks (active expert, row tile of gate then of up) */
static void gate_up_worker(void *arg, int ith, int nth) {
    (void)nth;
    ffn_job *j = arg;
    long tiles = (j->n_ff + ROW_TILE - 1) / ROW_TILE, total = (long)j->n_act * 2 * tiles;
    for (long task; (task = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < total;) {
        int e = j->act[task / (2 * tiles)];
        long tl = task % (2 * tiles);
        bool is_up = tl >= tiles;
        int64_t r0 = (tl % tiles) * ROW_TILE;
        int nr = (int)(j->n_ff - r0 < ROW_TILE ? j->n_ff - r0 : ROW_TILE);
        if (j->tbase && j->tbase[e] >= 0)
            expert_tile_pg(is_up ? j->up : j->gate, j->n_ff, e, r0, nr, j, j->xt, j->xt_bytes, j->panel[ith],
                           j->gu + (is_up ? j->n_ff : 0), 2 * (size_t)j->n_ff);
        else
            expert_tile(is_up, j->n_ff, e, r0, nr, j, is_up ? j->xq_up : j->xq,
                        is_up ? j->xq_up_stride : j->xq_stride, 0, j->gu + (is_up ? j->n_ff : 0), 2 * (size_t)j->n_ff);
    }
}

/* silu(gate) * up per (token, slot) row, then to down's vec_dot_type */
BK_MULTIVERSION static void swiglu_worker(void *arg, int ith, int nth) {
    ffn_job *j = arg;
    long lo, hi;
    threadpool_range((long)j->n * j->k, ith, nth, &lo, &hi);
    for (long r = lo; r < hi; r++) {
        if (j->ids[r] < 0) continue; /* a skipped entry: gate/up never wrote its row */
        float *g = j->gu + r * 2 * j->n_ff;
        if (j->isa == CPU_ISA_AVX2) cpu_swiglu_avx2(g, g + j->n_ff, g, (size_t)j->n_ff);
        else swiglu_row(g, g + j->n_ff, g, (size_t)j->n_ff);
        if (j->conv_d) j->conv_d(g, (char *)j->hq_buf + r * j->hq_stride, j->n_ff);
        if (j->wr[2])
            cpu_repack_act(j->down->type, j->n_ff, (const char *)j->hq_buf + r * j->hq_stride,
                           (char *)j->xa[2] + r * j->xa_stride[2]);
    }
}

static void down_worker(void *arg, int ith, int nth) {
    (void)nth;
    ffn_job *j = arg;
    long tiles = (j->n_embd + ROW_TILE - 1) / ROW_TILE, total = (long)j->n_act * tiles;
    for (long task; (task = atomic_fetch_add_explicit(&j->next, 1, memory_order_relaxed)) < total;) {
        int e = j->act[task / tiles];
        int64_t r0 = (task % tiles) * ROW_TILE;
        int nr = (int)(j->n_embd - r0 < ROW_TILE ? j->n_embd - r0 : ROW_TILE);
        if (j->tbase && j->tbase[e] >= 0)
            expert_tile_pg(j->down, j->n_embd, e, r0, nr, j, j->ht, j->ht_bytes, j->panel[ith], j->dout, (size_t)j->n_embd);
        else expert_tile(2, j->n_embd, e, r0, nr, j, j->hq, j->hq_stride, 1, j->dout, (size_t)j->n_embd);
    }
}

/* out[t] = dout[t,0]*w0 + dout[t,1]*w1 + ..., each product rounded, summed in slot order;
 * entries with id < 0 are left out (a row with none is 0) */
static void combine_worker(void *arg, int ith, int nth) {
    ffn_job *j = arg;
    long lo, hi;
    threadpool_range(j->n, ith, nth, &lo, &hi);
    size_t d = (size_t)j->n_embd;
    for (long t = lo; t < hi; t++) {
        float *o = j->out + t * d;
        const float *v = j->dout + (size_t)t * j->k * d, *w = j->w + t * j->k;
        const int32_t *id = j->ids + t * j->k;
        int s = 0;
        while (s < j->k && id[s] < 0) s++;
        if (s == j->k) {
            memset(o, 0, d * sizeof(float));
            continue;
        }
        for (size_t i = 0; i < d; i++) o[i] = v[s * d + i] * w[s];
        for (s++; s < j->k; s++)
            if (id[s] >= 0)
                for (size_t i = 0; i < d; i++) o[i] = o[i] + v[s * d + i] * w[s];
    }
}

/* Activation rows for weight type `type`: the converter (NULL for f32, used
 * as is) and the row stride, padded off multiples of 4 KiB (L1 aliasing). */
static cpu_from_float_fn act_format(uint32_t type, int64_t n_in, size_t *stride) {
    uint32_t vt = quant_get_traits(type)->vec_dot_type;
    if (vt == QT_F32) {
        *stride = (size_t)n_in * sizeof(float);
        return NULL;
    }
    *stride = quant_row_size(vt, n_in);
    if (*stride % 4096 == 0) *stride += 64;
    return cpu_get_from_float(vt);
}

/* Which experts run on the packed panels (MOE_PG_MIN columns or more, every matrix with a packed
 * kernel of one tile size, gate and up sharing their converted rows), their tiles' places, and the
 * buffers. False only when memory runs out (nothing is computed then, as the other buffers' failures). */
static bool panels_setup(threadpool *tp, cpu_moe_scratch *sc, ffn_job *j, int n_expert, bool same_up) {
    const int T = cpu_pgemm_tile_tokens(j->gate->type);
    if (!T || !same_up || !j->conv_g || !j->conv_d || cpu_pgemm_tile_tokens(j->up->type) != T ||
        cpu_pgemm_tile_tokens(j->down->type) != T || j->n_embd % 2 || j->n_ff % 2)
        return true;
    if (cpu_grow((void **)&sc->tbase, &sc->cap[9], (size_t)n_expert * sizeof(int32_t)) != BRISK_OK) return false;
    long n_tiles = 0;
    for (int e = 0; e < n_expert; e++) sc->tbase[e] = -1;
    for (int a = 0; a < j->n_act; a++) {
        const int e = j->act[a], c = j->off[e + 1] - j->off[e];
        if (c < MOE_PG_MIN) continue;
        sc->tbase[e] = (int32_t)n_tiles;
        n_tiles += (c + T - 1) / T;
    }
    if (!n_tiles) return true;
    if (cpu_grow((void **)&sc->tile_e, &sc->cap[13], (size_t)n_tiles * sizeof(int32_t)) != BRISK_OK) return false;
    for (int a = 0; a < j->n_act; a++) {
        const int e = j->act[a];
        if (sc->tbase[e] < 0) continue;
        for (long t = sc->tbase[e]; t < sc->tbase[e] + (j->off[e + 1] - j->off[e] + T - 1) / T; t++) sc->tile_e[t] = e;
    }
    const int nth = threadpool_size(tp);
    size_t pb = cpu_pgemm_panel_bytes(j->gate->type, j->n_embd), t;
    if ((t = cpu_pgemm_panel_bytes(j->up->type, j->n_embd)) > pb) pb = t;
    if ((t = cpu_pgemm_panel_bytes(j->down->type, j->n_ff)) > pb) pb = t;
    j->xt_bytes = cpu_pgemm_act_bytes(j->gate->type, j->n_embd);
    j->ht_bytes = cpu_pgemm_act_bytes(j->down->type, j->n_ff);
    j->stage_bytes = (size_t)T * (j->xq_stride > j->hq_stride ? j->xq_stride : j->hq_stride);
    if (sc->n_panel < nth) {
        void **np = realloc(sc->panel, (size_t)nth * sizeof *np);
        if (!np) return !bk_fail(BRISK_ERR_NOMEM, "cpu backend: out of memory (panels)");
        sc->panel = np;
        for (int i = sc->n_panel; i < nth; i++) sc->panel[i] = NULL;
        sc->n_panel = nth;
        sc->panel_cap = 0; /* the new ones are empty: size them all below */
    }
    if (pb > sc->panel_cap) {
        for (int i = 0; i < sc->n_panel; i++) {
            size_t cap = 0;
            free(sc->panel[i]);
            sc->panel[i] = NULL;
            if (cpu_grow_aligned(&sc->panel[i], &cap, pb) != BRISK_OK) return false;
        }
        sc->panel_cap = pb;
    }
    if (cpu_grow_aligned(&sc->xt, &sc->cap[6], j->xt_bytes * (size_t)n_tiles) != BRISK_OK ||
        cpu_grow_aligned(&sc->ht, &sc->cap[7], j->ht_bytes * (size_t)n_tiles) != BRISK_OK ||
        cpu_grow(&sc->stage, &sc->cap[8], j->stage_bytes * (size_t)nth) != BRISK_OK)
        return false;
    j->T = T;
    j->tbase = sc->tbase;
    j->tile_e = sc->tile_e;
    j->n_tiles = n_tiles;
    j->xt = sc->xt;
    j->ht = sc->ht;
    j->stage = sc->stage;
    j->panel = sc->panel;
    return true;
}

void cpu_moe_ffn(threadpool *tp, cpu_moe_scratch *sc, const bk_weight *gate, const bk_weight *up,
                 const bk_weight *down, const void *const wr[3], const float *x, int n, const int32_t *ids,
                 const float *weights, int k, float *out) {
    int n_expert = gate->n_expert > 0 ? gate->n_expert : 1;
    ffn_job j = {.gate = gate, .up = up, .down = down, .x = x, .n = n, .k = k, .n_ff = gate->n_out / n_expert,
                 .n_embd = gate->n_in, .ids = ids, .w = weights, .out = out, .isa = cpu_dot_isa()};
    size_t nk = (size_t)n * k;
    /* sizes first */
    j.conv_g = act_format(gate->type, j.n_embd, &j.xq_stride);
    bool same_up = quant_get_traits(up->type)->vec_dot_type == quant_get_traits(gate->type)->vec_dot_type;
    j.conv_u = same_up ? NULL : act_format(up->type, j.n_embd, &j.xq_up_stride);
    j.conv_d = act_format(down->type, j.n_ff, &j.hq_stride);
    if (!j.conv_d) j.hq_stride = 2 * (size_t)j.n_ff * sizeof(float); /* f32: read the gate half of gu */
    if (cpu_grow(&sc->xq, &sc->cap[0], j.conv_g ? j.xq_stride * n : 1) != BRISK_OK ||
        cpu_grow(&sc->xq_up, &sc->cap[1], j.conv_u ? j.xq_up_stride * n : 1) != BRISK_OK ||
        cpu_grow((void **)&sc->gu, &sc->cap[2], nk * 2 * (size_t)j.n_ff * sizeof(float)) != BRISK_OK ||
        cpu_grow(&sc->hq, &sc->cap[3], j.conv_d ? j.hq_stride * nk : 1) != BRISK_OK ||
        cpu_grow((void **)&sc->dout, &sc->cap[4], nk * (size_t)j.n_embd * sizeof(float)) != BRISK_OK ||
        cpu_grow((void **)&sc->group, &sc->cap[5], ((size_t)2 * n_expert + 1 + nk) * sizeof(int32_t)) != BRISK_OK)
        return;
    j.xq = j.conv_g ? sc->xq : (const void *)x;
    if (same_up) {
        j.xq_up = j.xq;
        j.xq_up_stride = j.xq_stride;
    } else {
        j.xq_up = j.conv_u ? sc->xq_up : (const void *)x;
        if (!j.conv_u) j.xq_up_stride = (size_t)j.n_embd * sizeof(float);
    }
    j.gu = sc->gu;
    j.hq_buf = sc->hq;
    j.hq = j.conv_d ? sc->hq : (const void *)sc->gu;
    j.dout = sc->dout;
    /* the repacked copies' expanded activations (their tensors' types are all quantized, so each
     * has its converted rows: xq, xq_up, hq) */
    const bk_weight *mats[3] = {gate, up, down};
    for (int m = 0; m < 3; m++) {
        const bool converted = m == 0 ? j.conv_g != NULL : m == 1 ? (same_up ? j.conv_g : j.conv_u) != NULL : j.conv_d != NULL;
        if (!wr || !wr[m] || !converted) continue;
        j.wr[m] = wr[m];
        j.xa_stride[m] = cpu_repack_act_bytes(mats[m]->type, m < 2 ? j.n_embd : j.n_ff);
        if (m == 1 && same_up && j.wr[0] && up->type == gate->type) {
            j.xa[1] = j.xa[0];
            continue;
        }
        if (cpu_grow_aligned(&sc->xa[m], &sc->cap[10 + m], j.xa_stride[m] * (m < 2 ? (size_t)n : nk)) != BRISK_OK) return;
        j.xa[m] = sc->xa[m];
    }

    /* group the (token, slot) entries by expert, tokens in order; an entry whose id is < 0 (the
     * expert is computed elsewhere: moe.c's hot-expert cache) is in no group and never read */
    int32_t *off = sc->group, *act = off + n_expert + 1, *ent = act + n_expert;
    memset(off, 0, ((size_t)n_expert + 1) * sizeof(int32_t));
    for (size_t i = 0; i < nk; i++)
        if (ids[i] >= 0) off[ids[i] + 1]++;
    int n_act = 0;
    for (int e = 0; e < n_expert; e++) {
        if (off[e + 1]) act[n_act++] = e;
        off[e + 1] += off[e];
    }
    for (size_t i = 0; i < nk; i++)
        if (ids[i] >= 0) ent[off[ids[i]]++] = (int32_t)i;
    for (int e = n_expert; e > 0; e--) off[e] = off[e - 1]; /* the fill advanced each start to the next */
    off[0] = 0;
    j.off = off;
    j.ent = ent;
    j.act = act;
    j.n_act = n_act;
    if (nk >= MOE_PG_MIN && !panels_setup(tp, sc, &j, n_expert, same_up)) return;

    if (j.conv_g || j.conv_u) {
        if (n == 1) convert_worker(&j, 0, 1);
        else threadpool_run(tp, convert_worker, &j);
    }
    if (j.n_tiles) {
        atomic_store(&j.next, 0);
        threadpool_run(tp, pack_gu_worker, &j);
    }
    atomic_store(&j.next, 0);
    threadpool_run(tp, gate_up_worker, &j);
    if (nk < 4) swiglu_worker(&j, 0, 1);
    else threadpool_run(tp, swiglu_worker, &j);
    if (j.n_tiles) {
        atomic_store(&j.next, 0);
        threadpool_run(tp, pack_down_worker, &j);
    }
    atomic_store(&j.next, 0);
    threadpool_run(tp, down_worker, &j);
    if (n < 4) combine_worker(&j, 0, 1);
    else threadpool_run(tp, combine_worker, &j);
}
