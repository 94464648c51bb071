/* moe.c — see moe.h.
 *
 * How a cached layer runs its misses (BRISK_XCACHE_MISS, or auto):
 *   map   the GPU reads them where they are: each layer has a device table of
 *         expert pointers per tensor (bk_weight.expert_ptrs), a cached expert's
 *         entry points at its slot, an uncached one's at its bytes in pinned,
 *         mapped host memory; one moe_ffn over the model's routing computes the
 *         layer (the same kernels and bytes as an all-GPU run: the same result;
 *         one token through the backend's fused shared-expert op, as all on the
 *         GPU) and the routing is added into device counters (by that op's
 *         first launch, else a count kernel). Nothing
 *         comes back to the host, so the step can be a CUDA graph. The counters
 *         are read back asynchronously every read_every passes (between passes,
 *         moe_offload_step), and the refresh runs on the host from them: the
 *         copy into a slot goes on the copy stream, the table entry is changed
 *         on the compute stream once the copy has landed (and before the slot is
 *         overwritten, on eviction).
 *   cpu   the routing is read back, the hits run on the GPU from the slots, the
 *         misses on the CPU meanwhile (the host syncs with the GPU every layer).
 *   copy  as cpu, but the batch's misses are first copied into spare slots (up
 *         to their number; the rest on the CPU). Where the experts are mapped,
 *         only batches of more than XC_COPY_MIN tokens (prefill) take this path,
 *         the others (decode) map.
 * auto: where the host experts could be mapped, batches of up to XC_MAP_MAX
 * tokens (decode: the steps CUDA graphs capture) map and larger ones (prefill)
 * take the host's path, as many misses copied as there are spare slots (pick_copies); where
 * they could not be mapped, every batch takes that path. The rule between map
 * and copy: a mapped miss costs a read of its bytes over PCIe by the product's
 * kernels, a copied one a copy (55 GB/s on the H200) plus a read from GPU memory
 * plus the layer's host round trip. The mapped read is latency-bound: a decode
 * step's GEMV-style kernels keep enough loads in flight to stream a miss or two
 * per layer (tg128 of the 35B-A3B shape at a 16 GB budget, the cache filled by
 * the first batches: 197 tok/s), but a prefill's grouped mmq products, whose few loads per
 * warp wait on PCIe, streamed the ~250 missed experts of a 512-token batch at
 * ~3.4 GB/s (pp512 95 tok/s against 923 through the host), so large batches
 * copy. XC_MAP_MAX is the graphs' token limit (cuda_graph.cu's GRAPH_MAX_TOKENS). */
#include "backend/moe.h"

#include <errno.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
#include "base/status.h"

/* The refresh: routing counts decay by XC_DECAY per token (a half-life of
 * about 70 tokens), and an uncached expert replaces the coldest cached one
 * when its count exceeds XC_SWAP_RATIO times that one's plus XC_SWAP_MARGIN:
 * the margin keeps two experts of about equal use from swapping back and
 * forth, each swap costing a copy of the expert over PCIe, and keeps the
 * noise of rarely routed experts from swapping at all: a steady routing
 * swapped for nothing under a margin of 1 (H200, qwen3.6-35b-a3b at a 16 GB
 * budget with calibration counts, tg128: 835 swaps in 384 tokens, the same
 * 93.6% hit rate, 262.6 tok/s against 277.5 with the refresh off; margin 6:
 * no swap; without calibration counts 252.6 against 249.6 under margin 1). One replacement
 * per layer and call at most, and none while the layer's last copy is still
 * on its way, so the copies stay a trickle beside the compute. */
#define XC_DECAY 0.99
#define XC_SWAP_RATIO 1.5
#define XC_SWAP_MARGIN 6.0
#define XC_PRIOR_TOKENS 16 /* calibration counts weigh as much as this many tokens' routings */
#define XC_PAD 256 /* bytes after each slot array: the CUDA kernels read aligned words past a row's end */
#define XC_MAP_MAX 16    /* auto: batches of up to this many tokens map (see above) */
#define XC_READ_EVERY 16 /* passes between readbacks of the map mode's counters (BRISK_XCACHE_READ_EVERY) */
#define XC_COPY_MIN 16   /* BRISK_XCACHE_MISS=copy with mapped experts: larger batches copy, the others map */

enum { XC_AUTO = 0, XC_CPU = 1, XC_COPY = 2, XC_MAP = 3 };

/* One layer's cache. slot_of[e]: the slot serving expert e (>= 0), -1 when e
 * is not cached, or -2 - s while e is being copied into slot s; compute reads
 * a slot only through slot_of, which is set after the copy finished. */
typedef struct xc_layer {
    int layer;
    bk_weight w[3];         /* gate, up, down over the slots (n_expert = slots, the model's row layout) */
    void *mem;              /* their backend memory */
    const bk_weight *src[3];/* the model's tensors in host memory */
    size_t eb[3];           /* bytes of one expert in each */
    int32_t *slot_of;       /* (n_expert) see above */
    int32_t *in_slot;       /* (slots) the expert a slot serves or is being filled with, -1: empty */
    uint64_t *ticket;       /* (slots) the copy that fills it (while slot_of says it is on its way) */
    float *score;           /* (n_expert) decayed routing counts */
    int64_t hits, misses, miss_copied, copies, miss_copies;
    /* map mode (NULL otherwise): backend memory inside xc->tab_mem */
    const void **tab;       /* (3, n_expert) gate, up, down: each expert's slot or mapped host bytes */
    int32_t *cached;        /* (n_expert) 1 where tab points at a slot (the count kernel's hits) */
    uint32_t *count;        /* (n_expert + 1) routings per expert since creation, then hits (wrap mod 2^32) */
    bk_weight tw[3];        /* the model's tensors addressed through tab (expert_ptrs) */
    int idx;                /* its row of xc->snap / xc->prev */
} xc_layer;

typedef struct xc_cache {
    bk_backend *be;         /* the stage's backend, where the slots live */
    bk_cuda_copier *cp;     /* NULL on a CPU backend (split_cpu's stand-in): copies are memcpy, done at once */
    int l0, l1;             /* xl[l - l0]: layer l's cache, NULL for a layer without one */
    xc_layer **xl;
    int slots, spare, n_layers, n_expert, k;
    void *spare_mem;        /* the spare slots, shared by the layers (one layer runs at a time), sized for the largest */
    void *dev_mem;          /* backend memory carved into the three below */
    int32_t *ids_dev;       /* (n_max, k) slot of each hit entry, -1 for the others */
    int32_t *sid_dev;       /* (n_max, k) spare slot of each entry of a copied miss, -1 for the others */
    float *tmp_dev;         /* (n_max, n_embd) a partial sum before it is added */
    void *host_mem;         /* CPU backend memory carved into the two below */
    int32_t *gid, *sid;     /* (n_max, k) host sides of ids_dev, sid_dev */
    int32_t *miss_n;        /* (n_expert) this batch's CPU-bound entries per expert */
    int32_t *spare_of;      /* (n_expert) this batch's spare slot of an expert, -1: none */
    int32_t *order;         /* (n_expert) missed experts, most entries first */
    double pcie_gbs;        /* host-to-backend copy speed */
    int miss_mode;          /* BRISK_XCACHE_MISS: XC_AUTO, XC_CPU, XC_COPY or XC_MAP */
    bool map;               /* the layers have tables: misses read from mapped host memory */
    double map_gbs;         /* a kernel's read speed from mapped host memory, measured at creation */
    void *tab_mem;          /* backend memory: every layer's tab, then cached, then count (rows by idx) */
    uint32_t *count_all;    /* (n_layers, n_expert + 1) inside tab_mem: one readback */
    uint32_t *snap;         /* (n_layers, n_expert + 1) the readback's host side (pinned on a GPU) */
    uint32_t *prev;         /* (n_layers, n_expert + 1) the counts already folded into the layers */
    const void **tab_host;  /* (3 n_expert pointers + n_expert int32) sync_tables' host side */
    int read_every, passes; /* passes between readbacks, passes since the last */
    float swap_margin;      /* XC_SWAP_MARGIN, or BRISK_XCACHE_SWAP_MARGIN */
    bool rb_pending;        /* a readback into snap is on its way */
} xc_cache;

struct moe_offload {
    bk_backend *cpu;
    int n_max, n_embd, k;
    int l0, l1, n_expert;       /* the stage's layers; experts in each MoE layer */
    const bk_weight *(*exps)[3];/* (l1 - l0) a layer's host experts (gate, up, down), NULLs: none */
    void *mem;      /* CPU backend memory carved into the four below */
    float *x;       /* (n_max, n_embd) the experts' input */
    int32_t *ids;   /* (n_max, k) the router's choices */
    float *w;       /* (n_max, k) their weights */
    float *out;     /* (n_max, n_embd) the experts' weighted sum */
    xc_cache *xc;   /* the hot-expert cache, or NULL */
};

brisk_status offload_transfer(bk_backend *from, const void *src, bk_backend *to, void *dst, size_t bytes) {
    if (bk_backend_is_cuda(to, NULL)) return bk_cuda_write(to, dst, src, bytes);
    return from->ops->read(from, src, dst, bytes); /* to the host: a GPU copies back and waits */
}

brisk_status moe_offload_new(int n_threads, const brisk_cpu_placement *place, int n_max, const moe_host_experts *hx,
                             moe_offload **out) {
    *out = NULL;
    moe_offload *mo = calloc(1, sizeof *mo);
    if (!mo) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    mo->n_max = n_max;
    mo->n_embd = hx->n_embd;
    mo->k = hx->n_expert_used;
    mo->l0 = hx->l0;
    mo->l1 = hx->l1;
    mo->n_expert = hx->n_expert;
    size_t xf = (size_t)n_max * mo->n_embd, kf = (size_t)n_max * mo->k;
    const size_t nl = hx->l1 > hx->l0 ? (size_t)(hx->l1 - hx->l0) : 0;
    mo->exps = calloc(nl ? nl : 1, sizeof *mo->exps);
    brisk_status s = mo->exps ? BRISK_OK : bk_fail(BRISK_ERR_NOMEM, "out of memory");
    if (s == BRISK_OK && nl) memcpy(mo->exps, hx->exps, nl * sizeof *mo->exps);
    if (s == BRISK_OK) s = bk_cpu_backend_new_placed(n_threads, place, &mo->cpu);
    if (s == BRISK_OK) s = mo->cpu->ops->alloc(mo->cpu, (2 * xf + 2 * kf) * sizeof(float), &mo->mem);
    if (s != BRISK_OK) {
        moe_offload_free(mo);
        return s;
    }
    mo->x = mo->mem;
    mo->out = mo->x + xf;
    mo->w = mo->out + xf;
    mo->ids = (int32_t *)(mo->w + kf);
    *out = mo;
    return BRISK_OK;
}

static void xc_free(xc_cache *xc) {
    if (!xc) return;
    bk_cuda_copier_free(xc->cp); /* waits for its copies and the backend's queue before the slots go */
    if (xc->cp) bk_cuda_host_free(xc->snap);
    else free(xc->snap);
    free(xc->prev);
    free(xc->tab_host);
    if (xc->tab_mem) xc->be->ops->release(xc->be, xc->tab_mem);
    for (int l = 0; xc->xl && l < xc->l1 - xc->l0; l++) {
        xc_layer *L = xc->xl[l];
        if (!L) continue;
        if (L->mem) xc->be->ops->release(xc->be, L->mem);
        free(L->slot_of);
        free(L->in_slot);
        free(L->ticket);
        free(L->score);
        free(L);
    }
    free(xc->xl);
    if (xc->spare_mem) xc->be->ops->release(xc->be, xc->spare_mem);
    if (xc->dev_mem) xc->be->ops->release(xc->be, xc->dev_mem);
    free(xc->host_mem);
    free(xc);
}

void moe_offload_free(moe_offload *mo) {
    if (!mo) return;
    xc_free(mo->xc);
    if (mo->mem) mo->cpu->ops->release(mo->cpu, mo->mem);
    if (mo->cpu) mo->cpu->ops->free(mo->cpu);
    free(mo->exps);
    free(mo);
}

/* ---- the hot-expert cache ---- */

/* Layer l's host experts (gate, up, down), NULL for a layer without them. */
static const bk_weight *const *host_exps(const moe_offload *mo, int l) {
    return l >= mo->l0 && l < mo->l1 && mo->exps[l - mo->l0][0] ? mo->exps[l - mo->l0] : NULL;
}

/* Bytes of one expert of a layer (its gate, up and down rows). */
static uint64_t expert_bytes(const moe_offload *mo, const bk_weight *const w[3]) {
    uint64_t b = 0;
    for (int i = 0; i < 3; i++) b += (uint64_t)(w[i]->n_out / mo->n_expert) * w[i]->row_bytes;
    return b;
}

int moe_cache_layers(const moe_offload *mo, uint64_t *sum, uint64_t *max) {
    int n = 0;
    *sum = *max = 0;
    for (int l = mo->l0; l < mo->l1; l++) {
        const bk_weight *const *w = host_exps(mo, l);
        if (!w) continue;
        uint64_t e = expert_bytes(mo, w);
        *sum += e;
        *max = e > *max ? e : *max;
        n++;
    }
    return n;
}

uint64_t moe_cache_bytes(const moe_offload *mo, int slots, int spare) {
    uint64_t se, emax, ne = (uint64_t)mo->n_expert;
    int n_layers = moe_cache_layers(mo, &se, &emax);
    if (!n_layers) return 0;
    uint64_t tables = (uint64_t)n_layers * (3 * ne * sizeof(void *) + ne * 4 + (ne + 1) * 4);
    return se * (uint64_t)slots + emax * (uint64_t)spare + (uint64_t)(n_layers + 1) * 3 * XC_PAD + tables +
           (uint64_t)mo->n_max * (2 * (uint64_t)mo->k * 4 + (uint64_t)mo->n_embd * 4);
}

/* Bytes of n slots shaped as the experts of src (a layer's gate, up and down), each tensor padded. */
static size_t slot_bytes(const bk_weight *const src[3], int n_expert, int n) {
    size_t total = 0;
    for (int i = 0; i < 3; i++) total += (size_t)(src[i]->n_out / n_expert) * src[i]->row_bytes * (size_t)n + XC_PAD;
    return total;
}

/* Three compact weights of n slots shaped as the experts of src, laid over mem (slot_bytes of it). */
static void slot_views(const xc_cache *xc, const bk_weight *const src[3], int n, void *mem, bk_weight w[3]) {
    char *p = mem;
    for (int i = 0; i < 3; i++) {
        size_t eb = (size_t)(src[i]->n_out / xc->n_expert) * src[i]->row_bytes;
        w[i] = *src[i];
        w[i].n_expert = n;
        w[i].n_out = src[i]->n_out / xc->n_expert * n;
        w[i].host = xc->cp ? NULL : p; /* the CPU reads host, a GPU dev */
        w[i].dev = xc->cp ? p : NULL;
        p += eb * (size_t)n + XC_PAD;
    }
}

static void *slot_ptr(const bk_weight *w, int slot) {
    size_t eb = (size_t)(w->n_out / w->n_expert) * w->row_bytes;
    return (char *)(w->dev ? w->dev : (void *)w->host) + (size_t)slot * eb;
}

static const void *expert_ptr(const bk_weight *src, int n_expert, int e) {
    size_t eb = (size_t)(src->n_out / n_expert) * src->row_bytes;
    return (const char *)src->host + (size_t)e * eb;
}

/* Queues the copy of expert e of layer L's tensors into slot `slot` of w. */
static brisk_status copy_expert(xc_cache *xc, const xc_layer *L, const bk_weight w[3], int slot, int e) {
    for (int i = 0; i < 3; i++) {
        void *dst = slot_ptr(&w[i], slot);
        const void *src = expert_ptr(L->src[i], xc->n_expert, e);
        if (xc->cp) BK_TRY(bk_cuda_copier_copy(xc->cp, dst, src, L->eb[i]));
        else memcpy(dst, src, L->eb[i]);
    }
    return BRISK_OK;
}

/* Host bytes to backend memory on be's stream, in order with its ops (the stand-in: at once). */
static brisk_status put(xc_cache *xc, void *dst, const void *src, size_t bytes) {
    if (xc->cp) return bk_cuda_copier_upload(xc->cp, dst, src, bytes);
    memcpy(dst, src, bytes);
    return BRISK_OK;
}

/* Where expert e of tensor i is read from in map mode: its slot when slot_of says it is served from
 * one, else its bytes in host memory through their mapping (NULL: not mapped). */
static const void *entry_ptr(const xc_cache *xc, const xc_layer *L, int i, int e) {
    int s = L->slot_of[e];
    if (s >= 0) return slot_ptr(&L->w[i], s);
    const void *h = expert_ptr(L->src[i], xc->n_expert, e);
    return xc->cp ? bk_cuda_copier_device_ptr(xc->cp, h) : h;
}

/* Makes the layer's device tables follow slot_of (map mode; a no-op without tables): its three
 * tables and cached flags rewritten whole (4 uploads of n_expert entries, however many changed).
 * Queued on be's stream: the work queued before still reads the old tables, the work after the new. */
static brisk_status sync_tables(xc_cache *xc, xc_layer *L) {
    if (!L->tab) return BRISK_OK;
    size_t ne = (size_t)xc->n_expert;
    const void **t = xc->tab_host;
    int32_t *c = (int32_t *)(t + 3 * ne);
    for (int i = 0; i < 3; i++)
        for (size_t e = 0; e < ne; e++) t[(size_t)i * ne + e] = entry_ptr(xc, L, i, (int)e);
    for (size_t e = 0; e < ne; e++) c[e] = L->slot_of[e] >= 0;
    for (int i = 0; i < 3; i++) BK_TRY(put(xc, (void *)(L->tab + (size_t)i * ne), t + (size_t)i * ne, ne * sizeof *t));
    return put(xc, L->cached, c, ne * sizeof *c);
}

/* Starts filling slot s with expert e; slot_of[e] says it is on its way until land() sees the copy done. */
static brisk_status fill_slot(xc_cache *xc, xc_layer *L, int s, int e) {
    BK_TRY(copy_expert(xc, L, L->w, s, e));
    uint64_t t = 0;
    if (xc->cp) BK_TRY(bk_cuda_copier_mark(xc->cp, &t));
    L->ticket[s] = t;
    L->in_slot[s] = e;
    L->slot_of[e] = -2 - s;
    L->copies++;
    return BRISK_OK;
}

/* Lets compute use the slots whose copies have finished (their table entries too, in map mode). */
static brisk_status land(xc_cache *xc, xc_layer *L) {
    bool changed = false;
    for (int s = 0; s < xc->slots; s++) {
        int e = L->in_slot[s];
        if (e >= 0 && L->slot_of[e] == -2 - s && (!xc->cp || bk_cuda_copier_done(xc->cp, L->ticket[s]))) {
            L->slot_of[e] = s;
            changed = true;
        }
    }
    return changed ? sync_tables(xc, L) : BRISK_OK;
}

/* The hottest expert that is neither cached nor on its way, -1 if none was routed to. */
static int hottest_uncached(const xc_cache *xc, const xc_layer *L) {
    int best = -1;
    for (int e = 0; e < xc->n_expert; e++)
        if (L->slot_of[e] == -1 && L->score[e] > 0 && (best < 0 || L->score[e] > L->score[best])) best = e;
    return best;
}

/* Between calls of a layer: empty slots take the hottest uncached experts; then, when no copy of
 * the layer is still on its way, the hottest uncached expert replaces the coldest cached one if it
 * is hotter by the margin. The victim leaves the map before its slot is overwritten; the copier
 * orders the copy after every product already queued (see bk_cuda_copier_copy). */
static brisk_status refresh(xc_cache *xc, xc_layer *L) {
    int victim = -1;
    bool busy = false;
    for (int s = 0; s < xc->slots; s++) {
        int e = L->in_slot[s];
        if (e < 0) {
            int c = hottest_uncached(xc, L);
            if (c < 0) return BRISK_OK;
            BK_TRY(fill_slot(xc, L, s, c));
            busy = true;
            continue;
        }
        if (L->slot_of[e] < 0) busy = true;
        else if (victim < 0 || L->score[e] < L->score[L->in_slot[victim]]) victim = s;
    }
    if (busy || victim < 0) return BRISK_OK;
    int c = hottest_uncached(xc, L), v = L->in_slot[victim];
    if (c < 0 || !(L->score[c] > L->score[v] * XC_SWAP_RATIO + xc->swap_margin)) return BRISK_OK;
    L->slot_of[v] = -1;
    BK_TRY(sync_tables(xc, L)); /* the victim's reads go to host memory before its slot is overwritten */
    return fill_slot(xc, L, victim, c);
}

/* What load prints about the cache's misses (on a GPU: the stand-in's runs stay quiet). */
static void report(const xc_cache *xc) {
    if (!xc->cp) return;
    if (xc->map)
        fprintf(stderr, "expert cache: misses read by the GPU from mapped host memory (%.1f GB/s; copies %.1f GB/s), "
                "no host round trip: decode steps run as CUDA graphs%s\n", xc->map_gbs, xc->pcie_gbs,
                xc->miss_mode == XC_COPY  ? "; batches of more than 16 tokens copy misses to spare slots (the host "
                                            "syncs in every cached layer)"
                : xc->miss_mode == XC_MAP ? " and prefill maps too (BRISK_XCACHE_MISS=map)"
                                          : "; batches of more than 16 tokens (prefill) copy misses to spare "
                                            "slots, the rest on the CPU (the host syncs in every cached layer)");
    else
        fprintf(stderr, "expert cache: misses %s, the host syncs with the GPU in every cached layer%s; "
                "host->device %.1f GB/s\n",
                xc->miss_mode == XC_CPU ? "on the CPU" : xc->miss_mode == XC_COPY ? "copied to spare slots"
                                                                                 : "copied to spare slots, the rest on the CPU",
                xc->miss_mode == XC_CPU || xc->miss_mode == XC_COPY ? "" : " (the host experts could not be mapped)",
                xc->pcie_gbs);
}

/* Map mode, when asked for or by default and every host expert has a device address: each layer's
 * tables from slot_of, zeroed counters, the readback's buffers. Called once the first fill landed. */
static brisk_status make_tables(moe_offload *mo, xc_cache *xc) {
    size_t ne = (size_t)xc->n_expert, rowc = ne + 1;
    bool want = xc->miss_mode != XC_CPU;
    for (int l = 0; want && l < xc->l1 - xc->l0; l++) {
        const xc_layer *L = xc->xl[l];
        for (size_t e = 0; L && e < ne && want; e++)
            for (int i = 0; i < 3; i++) /* the first and last bytes of each expert */
                want = want && (!xc->cp || (bk_cuda_copier_device_ptr(xc->cp, expert_ptr(L->src[i], xc->n_expert,
                                                                                         (int)e)) &&
                                            bk_cuda_copier_device_ptr(xc->cp, (const char *)expert_ptr(
                                                L->src[i], xc->n_expert, (int)e) + L->eb[i] - 1)));
    }
    if (!want || !xc->n_layers) {
        if (xc->miss_mode == XC_MAP) xc->miss_mode = XC_AUTO; /* asked for, but nothing is mapped */
        report(xc);
        return BRISK_OK;
    }
    size_t nl = (size_t)xc->n_layers, per = 3 * ne * sizeof(void *), bytes = nl * (per + ne * 4 + rowc * 4);
    BK_TRY(xc->be->ops->alloc(xc->be, bytes, &xc->tab_mem));
    char *host = calloc(1, bytes);
    xc->prev = calloc(nl * rowc, sizeof *xc->prev);
    xc->tab_host = malloc(3 * ne * sizeof(void *) + ne * sizeof(int32_t));
    if (xc->cp) BK_TRY(bk_cuda_host_alloc(nl * rowc * sizeof *xc->snap, (void **)&xc->snap));
    else xc->snap = calloc(nl * rowc, sizeof *xc->snap);
    if (!host || !xc->prev || !xc->snap || !xc->tab_host) {
        free(host);
        return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    char *dev = xc->tab_mem;
    xc->count_all = (uint32_t *)(dev + nl * (per + ne * 4));
    int idx = 0;
    for (int l = 0; l < xc->l1 - xc->l0; l++) {
        xc_layer *L = xc->xl[l];
        if (!L) continue;
        L->idx = idx;
        const void **ht = (const void **)(host + (size_t)idx * per);
        int32_t *hc = (int32_t *)(host + nl * per + (size_t)idx * ne * 4);
        for (int i = 0; i < 3; i++)
            for (size_t e = 0; e < ne; e++) ht[(size_t)i * ne + e] = entry_ptr(xc, L, i, (int)e);
        for (size_t e = 0; e < ne; e++) hc[e] = L->slot_of[e] >= 0;
        L->tab = (const void **)(dev + (size_t)idx * per);
        L->cached = (int32_t *)(dev + nl * per + (size_t)idx * ne * 4);
        L->count = xc->count_all + (size_t)idx * rowc;
        for (int i = 0; i < 3; i++) {
            L->tw[i] = *L->src[i];
            L->tw[i].dev = NULL; /* read through the table only */
            L->tw[i].expert_ptrs = L->tab + (size_t)i * ne;
        }
        idx++;
    }
    brisk_status st = offload_transfer(mo->cpu, host, xc->be, xc->tab_mem, bytes); /* counters from 0 */
    free(host);
    BK_TRY(st);
    xc->map = true;
    if (xc->cp) { /* a kernel streaming up to 64 MiB of the first layer's gate experts through the mapping */
        const xc_layer *L = NULL;
        for (int l = 0; !L; l++) L = xc->xl[l];
        size_t b = (size_t)L->src[0]->n_out * L->src[0]->row_bytes;
        xc->map_gbs = bk_cuda_copier_mapped_bandwidth(xc->cp, L->src[0]->host, b < (64u << 20) ? b : (64u << 20));
    }
    report(xc);
    return BRISK_OK;
}

/* The cache's three lab settings (docs/gpu-switches.md), read strictly: a value that does not parse
 * is an error, not the default. */
static brisk_status xc_env(int *miss_mode, int *read_every, float *swap_margin) {
    const char *mode = getenv("BRISK_XCACHE_MISS"), *every = getenv("BRISK_XCACHE_READ_EVERY");
    const char *margin = getenv("BRISK_XCACHE_SWAP_MARGIN");
    *miss_mode = !mode ? XC_AUTO
                 : !strcmp(mode, "cpu") ? XC_CPU
                 : !strcmp(mode, "copy") ? XC_COPY
                 : !strcmp(mode, "map") ? XC_MAP : -1;
    if (*miss_mode < 0) return bk_fail(BRISK_ERR_INVALID_ARG, "BRISK_XCACHE_MISS=%s: cpu, copy or map", mode);
    char *end = NULL;
    long e = every ? (errno = 0, strtol(every, &end, 10)) : XC_READ_EVERY;
    if (every && (!*every || *end || errno || e < 1 || e > 1 << 20))
        return bk_fail(BRISK_ERR_INVALID_ARG, "BRISK_XCACHE_READ_EVERY=%s: a whole number of passes, 1 to 1048576", every);
    *read_every = (int)e;
    double g = margin ? strtod(margin, &end) : XC_SWAP_MARGIN;
    if (margin && (!*margin || *end || !(g >= 0 && g <= 1e9)))
        return bk_fail(BRISK_ERR_INVALID_ARG, "BRISK_XCACHE_SWAP_MARGIN=%s: a number of routings, 0 or more", margin);
    *swap_margin = (float)g;
    return BRISK_OK;
}

brisk_status moe_offload_cache(moe_offload *mo, bk_backend *be, int slots, int spare, const int64_t *stats) {
    if (!mo || slots <= 0) return BRISK_OK;
    const int l0 = mo->l0, l1 = mo->l1, n_expert = mo->n_expert;
    int miss_mode = XC_AUTO, read_every = XC_READ_EVERY;
    float swap_margin = XC_SWAP_MARGIN;
    BK_TRY(xc_env(&miss_mode, &read_every, &swap_margin));
    if (slots > n_expert) slots = n_expert;
    if (spare > n_expert - slots) spare = n_expert - slots;
    /* the CUDA moe_ffn takes a tensor of at least k experts (cuda_moe.cu checks k <= n_expert) */
    if (bk_backend_is_cuda(be, NULL)) {
        if (slots < mo->k) slots = mo->k;
        if (spare < mo->k) spare = 0;
    }
    xc_cache *xc = calloc(1, sizeof *xc);
    if (!xc) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    mo->xc = xc;
    bk_cpu_expert_copies(mo->cpu, false); /* the misses read the mapped rows (backend.h says why) */
    xc->be = be;
    xc->l0 = l0;
    xc->l1 = l1;
    xc->slots = slots;
    xc->spare = spare;
    xc->n_expert = n_expert;
    xc->k = mo->k;
    xc->miss_mode = miss_mode;
    xc->read_every = read_every;
    xc->swap_margin = swap_margin;
    if (bk_backend_is_cuda(be, NULL)) {
        BK_TRY(bk_cuda_copier_new(be, &xc->cp));
        xc->pcie_gbs = bk_cuda_copier_bandwidth(xc->cp);
    } else {
        xc->pcie_gbs = 16.0; /* the stand-in's "PCIe": a nominal figure, for the report only */
    }
    size_t nk = (size_t)mo->n_max * xc->k, ne = (size_t)n_expert;
    xc->xl = calloc((size_t)(l1 - l0), sizeof *xc->xl);
    xc->host_mem = malloc((2 * nk + 3 * ne) * sizeof(int32_t));
    if (!xc->xl || !xc->host_mem) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    xc->gid = xc->host_mem;
    xc->sid = xc->gid + nk;
    xc->miss_n = xc->sid + nk;
    xc->spare_of = xc->miss_n + ne;
    xc->order = xc->spare_of + ne;
    BK_TRY(be->ops->alloc(be, nk * 2 * sizeof(int32_t) + (size_t)mo->n_max * mo->n_embd * sizeof(float),
                          &xc->dev_mem));
    xc->tmp_dev = xc->dev_mem;
    xc->ids_dev = (int32_t *)(xc->tmp_dev + (size_t)mo->n_max * mo->n_embd);
    xc->sid_dev = xc->ids_dev + nk;
    /* pin the host experts once, one range over all of them (tensors may share pages) */
    const char *lo = NULL, *hi = NULL;
    size_t spare_bytes = 0;
    for (int l = l0; l < l1; l++) {
        const bk_weight *const *hw = host_exps(mo, l);
        if (!hw) continue;
        xc_layer *L = calloc(1, sizeof *L);
        if (!L) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
        xc->xl[l - l0] = L;
        xc->n_layers++;
        L->layer = l;
        L->slot_of = malloc(ne * sizeof *L->slot_of);
        L->in_slot = malloc((size_t)slots * sizeof *L->in_slot);
        L->ticket = calloc((size_t)slots, sizeof *L->ticket);
        L->score = calloc(ne, sizeof *L->score);
        if (!L->slot_of || !L->in_slot || !L->ticket || !L->score) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
        for (size_t e = 0; e < ne; e++) L->slot_of[e] = -1;
        for (int s = 0; s < slots; s++) L->in_slot[s] = -1;
        for (int i = 0; i < 3; i++) {
            L->src[i] = hw[i];
            L->eb[i] = (size_t)(L->src[i]->n_out / n_expert) * L->src[i]->row_bytes;
            const char *a = L->src[i]->host, *b = a + (size_t)L->src[i]->n_out * L->src[i]->row_bytes;
            if (!lo || a < lo) lo = a;
            if (!hi || b > hi) hi = b;
        }
        BK_TRY(be->ops->alloc(be, slot_bytes(L->src, xc->n_expert, slots), &L->mem));
        slot_views(xc, L->src, slots, L->mem, L->w);
        size_t sb = slot_bytes(L->src, xc->n_expert, spare);
        spare_bytes = sb > spare_bytes ? sb : spare_bytes;
    }
    if (spare > 0) BK_TRY(be->ops->alloc(be, spare_bytes, &xc->spare_mem)); /* viewed as each layer's (slot_views) */
    /* with XC_PAD bytes past the last expert where the mapping has them (the kernels' reads past a row) */
    if (xc->cp && lo && !bk_cuda_copier_pin(xc->cp, lo, (size_t)(hi - lo) + XC_PAD))
        bk_cuda_copier_pin(xc->cp, lo, (size_t)(hi - lo));
    if (!stats && slots < n_expert) return make_tables(mo, xc); /* the first batches' counts fill it */
    /* the calibration's counts, scaled to XC_PRIOR_TOKENS tokens' routings: they pick the first
     * experts, and a run whose routing differs takes over within a few dozen tokens (the steady
     * state of the decayed counts is k / (1 - decay) = 100 tokens' worth) */
    for (int l = l0; l < l1; l++) {
        xc_layer *L = xc->xl[l - l0];
        if (!L) continue;
        const int64_t *row = stats ? stats + (size_t)l * ne : NULL;
        double total = 0;
        for (size_t e = 0; row && e < ne; e++) total += (double)row[e];
        for (size_t e = 0; e < ne; e++) /* (without counts every expert fits: all of them, in order) */
            L->score[e] = total > 0 ? (float)(row[e] / total * xc->k * XC_PRIOR_TOKENS) : 1e-3f * (float)(ne - e);
        BK_TRY(refresh(xc, L)); /* fills every slot */
    }
    if (xc->cp) BK_TRY(bk_cuda_copier_wait(xc->cp)); /* so the first batch finds them */
    for (int l = l0; l < l1; l++)
        if (xc->xl[l - l0]) BK_TRY(land(xc, xc->xl[l - l0]));
    return make_tables(mo, xc);
}

/* ---- map mode: the counters ---- */

/* Adds the counts in snap beyond those of prev to the layers: hits and misses, and the decayed
 * routing counts the refresh ranks by (decayed by the tokens the interval held, then the
 * interval's routings added: the per-batch update of cache_ffn, coarser). The counters wrap
 * modulo 2^32; a difference is right while an interval holds fewer routings. */
static void fold(xc_cache *xc) {
    size_t ne = (size_t)xc->n_expert, rowc = ne + 1;
    for (int l = 0; l < xc->l1 - xc->l0; l++) {
        xc_layer *L = xc->xl[l];
        if (!L || !L->tab) continue;
        const uint32_t *now = xc->snap + (size_t)L->idx * rowc;
        uint32_t *was = xc->prev + (size_t)L->idx * rowc;
        int64_t total = 0;
        for (size_t e = 0; e < ne; e++) total += (uint32_t)(now[e] - was[e]);
        int64_t hits = (uint32_t)(now[ne] - was[ne]);
        if (!total) continue;
        L->hits += hits;
        L->misses += total - hits;
        float decay = (float)pow(XC_DECAY, (double)total / xc->k);
        for (size_t e = 0; e < ne; e++) L->score[e] = L->score[e] * decay + (float)(uint32_t)(now[e] - was[e]);
        memcpy(was, now, rowc * sizeof *was);
    }
}

/* Queues the counters' readback into snap (a GPU: after the work queued so far; the stand-in: now). */
static brisk_status readback(moe_offload *mo, xc_cache *xc) {
    size_t bytes = (size_t)xc->n_layers * (xc->n_expert + 1) * sizeof(uint32_t);
    if (xc->cp) BK_TRY(bk_cuda_copier_readback(xc->cp, xc->snap, xc->count_all, bytes));
    else BK_TRY(offload_transfer(xc->be, xc->count_all, mo->cpu, xc->snap, bytes));
    xc->rb_pending = true;
    return BRISK_OK;
}

/* Folds every count up to now in (the host waits for the device): exact figures for the stats. */
static brisk_status flush(moe_offload *mo, xc_cache *xc) {
    if (xc->rb_pending) {
        if (xc->cp) BK_TRY(bk_cuda_copier_readback_wait(xc->cp));
        fold(xc);
        xc->rb_pending = false;
    }
    BK_TRY(readback(mo, xc));
    if (xc->cp) BK_TRY(bk_cuda_copier_readback_wait(xc->cp));
    fold(xc);
    xc->rb_pending = false;
    return BRISK_OK;
}

brisk_status moe_offload_step(moe_offload *mo) {
    xc_cache *xc = mo ? mo->xc : NULL;
    if (!xc || !xc->map) return BRISK_OK;
    bool empty = false; /* a slot not yet filled: read the counts every pass until the cache is full */
    for (int l = 0; l < xc->l1 - xc->l0; l++) {
        xc_layer *L = xc->xl[l];
        if (!L) continue;
        BK_TRY(land(xc, L));
        for (int s = 0; s < xc->slots && !empty; s++) empty = L->in_slot[s] < 0;
    }
    if (!xc->rb_pending && ++xc->passes >= (empty ? 1 : xc->read_every)) {
        xc->passes = 0;
        BK_TRY(readback(mo, xc)); /* lands now if the device is idle (the stand-in: at once) */
    }
    if (xc->rb_pending && (!xc->cp || bk_cuda_copier_readback_done(xc->cp))) {
        fold(xc);
        xc->rb_pending = false;
        for (int l = 0; l < xc->l1 - xc->l0; l++)
            if (xc->xl[l]) BK_TRY(refresh(xc, xc->xl[l])); /* copies on the copy stream; evictions' entries now */
    }
    return BRISK_OK;
}

/* Whether a batch of n tokens takes the map path (the rule in the header comment). */
static bool map_batch(const xc_cache *xc, int n) {
    if (!xc->map) return false;
    if (xc->miss_mode == XC_MAP) return true;
    return n <= (xc->miss_mode == XC_COPY ? XC_COPY_MIN : XC_MAP_MAX);
}

bool moe_offload_no_sync(const moe_offload *mo, int n) {
    const xc_cache *xc = mo ? mo->xc : NULL;
    if (!xc || !map_batch(xc, n)) return false;
    for (int l = xc->l0; l < xc->l1; l++) /* a host-expert layer has a cache (xl) in every stage layer */
        if (xc->xl[l - xc->l0] && !xc->xl[l - xc->l0]->tab) return false;
    return true;
}

bool moe_offload_cache_stats(moe_offload *mo, int layer, brisk_expert_cache_stats *out) {
    xc_cache *xc = mo ? mo->xc : NULL;
    if (!xc) return false;
    if (xc->map && flush(mo, xc) != BRISK_OK) return false;
    out->n_layers += xc->n_layers;
    out->slots = xc->slots;
    out->spare_slots = xc->spare;
    for (int l = xc->l0; l < xc->l1; l++) {
        const xc_layer *L = xc->xl[l - xc->l0];
        if (!L || (layer >= 0 && layer != l)) continue;
        out->hits += L->hits;
        out->misses += L->misses;
        out->miss_copied += L->miss_copied;
        out->copies += L->copies;
        out->miss_copies += L->miss_copies;
    }
    return true;
}

static int cmp_miss(const void *a, const void *b, void *arg) {
    const int32_t *n = arg;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return n[x] != n[y] ? (n[y] > n[x] ? 1 : -1) : (x > y) - (x < y);
}

/* Which missed experts go to spare slots for this batch: all of them, the most entries first, as many
 * as there are spare slots; the CPU runs the rest. A cost model between the two (the CPU's time
 * m_e F / R_cpu for an expert of m_e entries, F = 6 n_embd n_ff flops an entry, against a copy's
 * E / B) lost to copying everything on the H200 (qwen3.6-35b-a3b at a 16 GB budget, 199 experts a
 * layer cached, pp512 tok/s): 3,907 copying every miss that has a slot, 2,926 with that rule and
 * R_cpu timed (~500 GFLOP/s), 3,234-3,405 balancing the copies' time against the CPU's, 2,262-2,334
 * copying only experts of 16 entries or more (none were: a good cache leaves a prefill light misses,
 * each read whole from host memory by the CPU for a few entries). Returns the number of copied
 * experts; misses of the rest stay in miss_n. */
static int pick_copies(xc_cache *xc) {
    if (!xc->spare || xc->miss_mode == XC_CPU) return 0;
    int n = 0;
    for (int e = 0; e < xc->n_expert; e++)
        if (xc->miss_n[e] > 0) xc->order[n++] = e;
    qsort_r(xc->order, (size_t)n, sizeof *xc->order, cmp_miss, xc->miss_n);
    if (n > xc->spare) n = xc->spare;
    for (int i = 0; i < n; i++) xc->spare_of[xc->order[i]] = i;
    return n;
}

/* The layer's experts with the cache: hits on be from the slots, misses on the CPU at the same time
 * (or, chosen by pick_copies, on be from spare slots), the partial sums added into out. mo->ids holds
 * the routing (read back); x, weights and out are be's, read back only when the CPU has a share
 * (a batch of hits costs one read and one write of ids). The split of one weighted sum into parts
 * changes its rounding (the parts are summed apart, then added). */
static brisk_status cache_ffn(moe_offload *mo, xc_layer *L, bk_backend *be, const bk_weight *gate,
                              const bk_weight *up, const bk_weight *down, const float *x, int n,
                              const float *weights, int k, float *out) {
    xc_cache *xc = mo->xc;
    size_t nk = (size_t)n * k, xb = (size_t)n * mo->n_embd * sizeof(float), kb = nk * sizeof(int32_t);
    BK_TRY(land(xc, L));
    float decay = (float)pow(XC_DECAY, n);
    for (int e = 0; e < xc->n_expert; e++) {
        L->score[e] *= decay;
        xc->miss_n[e] = 0;
        xc->spare_of[e] = -1;
    }
    int64_t hits = 0;
    for (size_t i = 0; i < nk; i++) {
        int e = mo->ids[i];
        if (e < 0 || e >= xc->n_expert) return bk_fail(BRISK_ERR_BACKEND, "moe offload: routed expert %d", e);
        L->score[e] += 1.0f;
        if (L->slot_of[e] >= 0) hits++;
        else xc->miss_n[e]++;
    }
    int n_copy = pick_copies(xc);
    int64_t copied = 0, cpu = 0;
    for (size_t i = 0; i < nk; i++) { /* mo->ids becomes the CPU's share */
        int e = mo->ids[i], slot = L->slot_of[e];
        xc->gid[i] = slot >= 0 ? slot : -1;
        xc->sid[i] = slot < 0 ? xc->spare_of[e] : -1;
        copied += xc->sid[i] >= 0;
        mo->ids[i] = slot < 0 && xc->sid[i] < 0 ? e : -1;
        cpu += mo->ids[i] >= 0;
    }
    L->hits += hits;
    L->misses += (int64_t)nk - hits;
    L->miss_copied += copied;
    L->miss_copies += n_copy;
    /* Order on a GPU: the waiting transfers first, while be's queue is empty (the ids read emptied
     * it); then the spare slots' copies on the copy stream (nothing queued on be for them to wait
     * for); the hits' product, which runs beside the copies; be waits for the copies (fence) before
     * the spare slots' product; the CPU's share meanwhile on the host. The first part written goes
     * to out, each later one through tmp_dev and an add. */
    if (cpu) {
        BK_TRY(offload_transfer(be, x, mo->cpu, mo->x, xb));
        BK_TRY(offload_transfer(be, weights, mo->cpu, mo->w, nk * sizeof(float)));
    }
    if (hits) BK_TRY(offload_transfer(mo->cpu, xc->gid, be, xc->ids_dev, kb));
    if (copied) BK_TRY(offload_transfer(mo->cpu, xc->sid, be, xc->sid_dev, kb));
    bk_weight sw[3]; /* the spare slots as this layer's experts */
    if (xc->spare > 0) slot_views(xc, L->src, xc->spare, xc->spare_mem, sw);
    for (int e = 0; e < xc->n_expert; e++)
        if (xc->spare_of[e] >= 0) BK_TRY(copy_expert(xc, L, sw, xc->spare_of[e], e));
    bool wrote = false;
    if (hits) {
        be->ops->moe_ffn(be, &L->w[0], &L->w[1], &L->w[2], x, n, xc->ids_dev, weights, k, out);
        wrote = true;
    }
    if (copied) {
        if (xc->cp) BK_TRY(bk_cuda_copier_fence(xc->cp));
        be->ops->moe_ffn(be, &sw[0], &sw[1], &sw[2], x, n, xc->sid_dev, weights, k,
                         wrote ? xc->tmp_dev : out);
        if (wrote) be->ops->add(be, out, xc->tmp_dev, (size_t)n * mo->n_embd);
        wrote = true;
    }
    if (cpu) {
        mo->cpu->ops->moe_ffn(mo->cpu, gate, up, down, mo->x, n, mo->ids, mo->w, k, mo->out);
        BK_TRY(offload_transfer(mo->cpu, mo->out, be, wrote ? xc->tmp_dev : out, xb));
        if (wrote) be->ops->add(be, out, xc->tmp_dev, (size_t)n * mo->n_embd);
    }
    return refresh(xc, L); /* the copies overlap the next layers */
}

/* bk_cuda_expert_count on the stand-in, whose backend memory is host memory. */
static void count_host(const xc_cache *xc, xc_layer *L, const int32_t *ids, int nk) {
    for (int i = 0; i < nk; i++) {
        int e = ids[i];
        if (e < 0) continue;
        if (e >= xc->n_expert) e = xc->n_expert - 1;
        L->count[e]++;
        if (L->cached[e]) L->count[xc->n_expert]++;
    }
}

/* Map mode: one moe_ffn through the layer's tables, no host round trip (see the header comment).
 * Otherwise: the backend's work so far is done once ids are read back (read waits); the
 * sum is written back before the caller's next op, so the pass continues in
 * order on be. */
/* Layer `layer`'s cache, NULL for a layer without one. */
static xc_layer *cache_layer(const xc_cache *xc, int layer) {
    return xc && layer >= xc->l0 && layer < xc->l1 ? xc->xl[layer - xc->l0] : NULL;
}

/* The layer's cache when a batch of n tokens maps, else NULL. */
static xc_layer *mapped_layer(const moe_offload *mo, int layer, int n) {
    xc_cache *xc = mo ? mo->xc : NULL;
    xc_layer *L = cache_layer(xc, layer);
    return L && L->tab && n <= mo->n_max && map_batch(xc, n) ? L : NULL;
}

/* A mapped layer's routing (ids: n x k on be) into its counters, unless the MoE op counted it. */
static void count_mapped(moe_offload *mo, bk_backend *be, xc_layer *L, const int32_t *ids, int n, int k) {
    if (!mo->xc->cp) count_host(mo->xc, L, ids, n * k);
    else if (!bk_cuda_expert_count_taken(be)) bk_cuda_expert_count(be, ids, n * k, mo->xc->n_expert, L->cached, L->count);
}

/* moe_ffn of layer `layer` with its experts in host memory: mapped (all on be through the tables),
 * or x, ids and weights (backend memory of be) copied to host buffers, the CPU's sum copied back into
 * out; with a hot-expert cache for the layer, the entries of cached experts run on be meanwhile. */
static brisk_status host_ffn(moe_offload *mo, bk_backend *be, int layer, const bk_weight *gate, const bk_weight *up,
                             const bk_weight *down, const float *x, int n, const int32_t *ids, const float *weights,
                             int k, float *out) {
    if (n > mo->n_max || k != mo->k)
        return bk_fail(BRISK_ERR_RANGE, "moe offload: %d tokens x %d experts exceed its buffers (%d x %d)", n, k,
                       mo->n_max, mo->k);
    size_t xb = (size_t)n * mo->n_embd * sizeof(float), kb = (size_t)n * k * sizeof(float);
    xc_cache *xc = mo->xc;
    xc_layer *L = cache_layer(xc, layer);
    if (mapped_layer(mo, layer, n)) { /* all on be: the routing counted, the experts through the tables */
        count_mapped(mo, be, L, ids, n, k);
        be->ops->moe_ffn(be, &L->tw[0], &L->tw[1], &L->tw[2], x, n, ids, weights, k, out);
        return BRISK_OK;
    }
    BK_TRY(offload_transfer(be, ids, mo->cpu, mo->ids, kb));
    if (L) return cache_ffn(mo, L, be, gate, up, down, x, n, weights, k, out);
    BK_TRY(offload_transfer(be, x, mo->cpu, mo->x, xb));
    BK_TRY(offload_transfer(be, weights, mo->cpu, mo->w, kb));
    mo->cpu->ops->moe_ffn(mo->cpu, gate, up, down, mo->x, n, mo->ids, mo->w, k, mo->out);
    return offload_transfer(mo->cpu, mo->out, be, out, xb);
}

/* ---- the op ---- */

/* The fused op (experts, shared expert and residual in one pass of moe_ffn_shared), where the backend
 * has it and the experts are on be or, in map mode, reachable through the layer's tables: their
 * routing is counted by the op's first launch (armed) or after it. false: nothing was done. */
static bool fused_ffn(bk_backend *be, const bk_moe_layer *L, const bk_moe_io *io) {
    if (io->tp != 0 || !be->ops->moe_ffn_shared) return false;
    const bk_weight *gate = L->gate, *up = L->up, *down = L->down;
    xc_layer *XL = NULL;
    if (L->host) { /* the hot-expert cache's tables, when this batch reads its misses in place */
        if (!(XL = mapped_layer(L->host, L->layer, io->n))) return false;
        gate = &XL->tw[0], up = &XL->tw[1], down = &XL->tw[2];
        if (L->host->xc->cp) bk_cuda_expert_count_arm(be, XL->cached, XL->count); /* the op may count them */
    }
    bool sh = L->gate_sh != NULL;
    bool done = be->ops->moe_ffn_shared(be, gate, up, down, L->gate_sh, L->up_sh, L->down_sh, io->h, io->n, io->ids,
                                        io->w, io->k, sh ? io->sh_logit : NULL, io->x);
    if (XL && done) count_mapped(L->host, be, XL, io->ids, io->n, io->k);
    else if (XL && L->host->xc->cp) bk_cuda_expert_count_arm(be, XL->cached, NULL);
    return done;
}

brisk_status bk_moe_ffn(bk_backend *be, const bk_moe_layer *L, const bk_moe_io *io) {
    const bk_backend_ops *op = be->ops;
    if (fused_ffn(be, L, io)) return BRISK_OK;
    const size_t len = (size_t)io->n * (size_t)io->n_embd;
    /* every product of h first (the shared expert's gate and up): a GPU quantizes h once for all */
    if (L->gate_sh) bk_matmul_swiglu(be, L->gate_sh, L->up_sh, io->h, io->n, io->ff_tmp, io->ff);
    if (io->tp > 1) op->moe_ids_local(be, io->ids, io->n * io->k, io->e0, io->e1); /* this rank's experts */
    if (L->host) BK_TRY(host_ffn(L->host, be, L->layer, L->gate, L->up, L->down, io->h, io->n, io->ids, io->w, io->k,
                                 io->out));
    else op->moe_ffn(be, L->gate, L->up, L->down, io->h, io->n, io->ids, io->w, io->k, io->out);
    if (L->gate_sh) op->matmul(be, 1, &L->down_sh, NULL, io->ff, io->n, &io->sh);
    if (io->tp > 0 && op->all_reduce) { /* the ranks' partial sums, one all-reduce before x */
        if (L->gate_sh) {
            op->sigmoid_mul(be, io->sh, io->sh_logit, io->n, io->n_embd, 1);
            op->add(be, io->out, io->sh, len);
        }
        op->all_reduce(be, io->out, len);
        op->add(be, io->x, io->out, len);
    } else if (L->gate_sh) {
        bk_gated_residual(be, io->x, io->out, io->sh, io->sh_logit, io->n, io->n_embd);
    } else {
        op->add(be, io->x, io->out, len);
    }
    return BRISK_OK;
}
