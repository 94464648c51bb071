/* pk_plan.c — see pk_plan.h. */
#include "pk_plan.h"

#include <stdlib.h>
#include <string.h>

#define PK_TILE 16     /* a slice's rows: whole tensor-core tiles */
/* An instruction's fixed cost in est's units (bytes at a worker's share of the bandwidth): its wait,
 * the first loads' latency, the counter's update. About 1.5 us at an H100 SM's 23 GB/s. */
#define PK_FIXED 32768.0

static int counter(int layer, int c) { return layer * PK_C_PER_LAYER + c; }

void pk_split_range(const pk_plan *p, int np, int split, int *p0, int *p1) {
    const int tile = p->s.pos_tile;
    int chunk = (np + p->n_split - 1) / p->n_split;
    chunk = (chunk + tile - 1) / tile * tile;
    if (chunk < tile) chunk = tile;
    long a = (long)split * chunk, b = a + chunk;
    *p0 = a < np ? (int)a : np;
    *p1 = b < np ? (int)b : np;
}

/* Rows a slice of a product whose rows hold `width` weights: about slice_kb KiB, whole tiles. */
static int slice_rows(const pk_shape *s, int width, int n_rows) {
    double kb = s->slice_kb > 0 ? s->slice_kb : 64;
    int r = (int)(kb * 1024.0 / ((double)width * s->weight_bytes));
    r = r / PK_TILE * PK_TILE;
    if (r < PK_TILE) r = PK_TILE;
    return r < n_rows ? r : n_rows;
}

typedef struct builder {
    pk_plan *p;
    int cap;
} builder;

static int push(builder *b, pk_inst in) {
    if (b->p->n_inst == b->cap) {
        int cap = b->cap ? 2 * b->cap : 1024;
        pk_inst *x = realloc(b->p->inst, (size_t)cap * sizeof *x);
        if (!x) return -1;
        b->p->inst = x;
        b->cap = cap;
    }
    b->p->inst[b->p->n_inst++] = in;
    return 0;
}

/* Slices of rows [0, n_rows) of a product of `width` weights a row: op, waiting for counter `wait`
 * (need: its target), adding to `signal`; returns the number of slices, -1 on no memory. */
static int slices(builder *b, pk_op op, int layer, int n_rows, int width, int wait, int signal) {
    const pk_shape *s = &b->p->s;
    int rows = slice_rows(s, width, n_rows), n = 0;
    b->p->rows[op] = rows;
    for (int r = 0; r < n_rows; r += rows, n++) {
        int r1 = r + rows < n_rows ? r + rows : n_rows;
        pk_inst in = {.op = (uint8_t)op, .layer = (int16_t)layer, .r0 = r, .r1 = r1, .wait = wait, .signal = signal};
        /* the weights, and the input rows each slice reads for its norm and dots */
        in.est = PK_FIXED + (double)(r1 - r) * width * s->weight_bytes + (double)s->n_tok * width * 4.0;
        if (push(b, in)) return -1;
    }
    return n;
}

static int build(builder *b) {
    pk_plan *p = b->p;
    const pk_shape *s = &p->s;
    const int hd = s->head_dim, group = s->n_head / s->n_head_kv;
    const int n_qkv = (s->n_head + 2 * s->n_head_kv) * hd;
    /* splits: about two attention instructions a worker, none shorter than PK_SPLIT_MIN positions */
    int groups = s->n_tok * s->n_head_kv, want = (2 * s->n_workers + groups - 1) / groups;
    int most = (s->n_ctx + s->split_min - 1) / s->split_min;
    p->n_split = want < most ? want : most;
    if (p->n_split < 1) p->n_split = 1;
    p->n_counters = PK_C_PER_LAYER * s->n_layer + 1;
    p->target = calloc((size_t)p->n_counters, sizeof *p->target);
    if (!p->target) return -1;
    for (int l = 0; l < s->n_layer; l++) {
        int n;
        const int cx = counter(l, PK_C_X), cq = counter(l, PK_C_Q), cr = counter(l, PK_C_R);
        const int ca = counter(l, PK_C_A), co = counter(l, PK_C_O), cf = counter(l, PK_C_F);
        if ((n = slices(b, PK_QKV, l, n_qkv, s->n_embd, l ? cx : -1, cq)) < 0) return -1;
        p->target[cq] = n;
        for (int h = 0; h < s->n_head_kv; h++) {
            pk_inst in = {.op = PK_KV, .layer = (int16_t)l, .kvh = (int16_t)h, .wait = cq, .signal = cr};
            in.est = PK_FIXED + (double)s->n_tok * (group + 2) * hd * 4.0 * 2 + (double)s->n_tok * 2 * hd * s->kv_bytes;
            if (push(b, in)) return -1;
        }
        p->target[cr] = s->n_head_kv;
        for (int t = 0; t < s->n_tok; t++)
            for (int h = 0; h < s->n_head_kv; h++)
                for (int sp = 0; sp < p->n_split; sp++) {
                    pk_inst in = {.op = PK_ATTN, .layer = (int16_t)l, .tok = (int16_t)t, .kvh = (int16_t)h,
                                  .split = (int16_t)sp, .n_split = (int16_t)p->n_split, .wait = cr, .signal = ca};
                    in.est = PK_FIXED + (double)s->n_ctx / p->n_split * 2.0 * hd * s->kv_bytes;
                    if (push(b, in)) return -1;
                }
        p->target[ca] = s->n_tok * s->n_head_kv;
        if ((n = slices(b, PK_OUT, l, s->n_embd, s->n_head * hd, ca, co)) < 0) return -1;
        p->target[co] = n;
        if (s->n_expert) { /* qwen3moe: the router's rows, the top-k a token, the slots' rows, the down slices */
            const int cg = counter(l, PK_C_G), ct = counter(l, PK_C_T);
            /* the router (f32 in the files: 4 bytes a weight) in slices over the workers */
            const int rr = (s->n_expert + 7) / 8;
            for (int e = 0; e < s->n_expert; e += rr) {
                const int e1 = e + rr < s->n_expert ? e + rr : s->n_expert;
                pk_inst in = {.op = PK_ROUTE, .layer = (int16_t)l, .r0 = e, .r1 = e1, .wait = co, .signal = cg};
                in.est = PK_FIXED + (double)(e1 - e) * s->n_embd * 4.0 + (double)s->n_tok * s->n_embd * 4.0;
                if (push(b, in)) return -1;
                p->target[cg]++;
            }
            p->rows[PK_ROUTE] = rr;
            for (int t = 0; t < s->n_tok; t++) {
                pk_inst in = {.op = PK_TOPK, .layer = (int16_t)l, .tok = (int16_t)t, .wait = cg, .signal = ct};
                in.est = PK_FIXED;
                if (push(b, in)) return -1;
            }
            p->target[ct] = s->n_tok;
            int total = 0;
            for (int t = 0; t < s->n_tok; t++)
                for (int k = 0; k < s->n_expert_used; k++) {
                    const int before = p->n_inst;
                    if ((n = slices(b, PK_EGU, l, s->n_ff_exp, 2 * s->n_embd, ct, cf)) < 0) return -1;
                    for (int i = before; i < p->n_inst; i++) p->inst[i].tok = (int16_t)t, p->inst[i].kvh = (int16_t)k;
                    total += n;
                }
            p->target[cf] = total;
            if ((n = slices(b, PK_EDOWN, l, s->n_embd, s->n_ff_exp, cf, counter(l + 1, PK_C_X))) < 0) return -1;
            /* (an EDOWN slice reads its rows of every slot's expert: n_tok * k times a row's bytes) */
            for (int i = p->n_inst - n; i < p->n_inst; i++)
                p->inst[i].est = PK_FIXED + (p->inst[i].est - PK_FIXED) * s->n_tok * s->n_expert_used;
        } else {
            if ((n = slices(b, PK_GATEUP, l, s->n_ff, 2 * s->n_embd, co, cf)) < 0) return -1;
            p->target[cf] = n;
            if ((n = slices(b, PK_DOWN, l, s->n_embd, s->n_ff, cf, counter(l + 1, PK_C_X))) < 0) return -1;
        }
        p->target[counter(l + 1, PK_C_X)] = n;
    }
    if (slices(b, PK_HEAD, s->n_layer, s->n_vocab, s->n_embd, counter(s->n_layer, PK_C_X), -1) < 0) return -1;
    for (int i = 0; i < p->n_inst; i++) p->inst[i].need = p->inst[i].wait >= 0 ? p->target[p->inst[i].wait] : 0;
    return 0;
}

/* List scheduling in the global order: each instruction to the worker where it would finish first,
 * starting once its worker is free and its counter's producers are estimated done. */
static int schedule(pk_plan *p) {
    const int nw = p->s.n_workers, n = p->n_inst;
    double *free_at = calloc((size_t)nw, sizeof *free_at), *ready = calloc((size_t)p->n_counters, sizeof *ready);
    int *owner = malloc((size_t)(n ? n : 1) * sizeof *owner), *count = calloc((size_t)nw + 1, sizeof *count);
    p->w_off = calloc((size_t)nw + 1, sizeof *p->w_off);
    p->w_idx = malloc((size_t)(n ? n : 1) * sizeof *p->w_idx);
    int rc = free_at && ready && owner && count && p->w_off && p->w_idx ? 0 : -1;
    p->makespan = 0;
    for (int i = 0; rc == 0 && i < n; i++) {
        const pk_inst *in = &p->inst[i];
        double r = in->wait >= 0 ? ready[in->wait] : 0;
        int best = 0;
        double best_start = 0;
        for (int w = 0; w < nw; w++) {
            double st = free_at[w] > r ? free_at[w] : r;
            if (w == 0 || st < best_start) best = w, best_start = st;
        }
        double end = best_start + in->est;
        free_at[best] = end;
        if (in->signal >= 0 && end > ready[in->signal]) ready[in->signal] = end;
        if (end > p->makespan) p->makespan = end;
        owner[i] = best;
        count[best + 1]++;
    }
    if (rc == 0) {
        for (int w = 0; w < nw; w++) p->w_off[w + 1] = p->w_off[w] + count[w + 1];
        memset(count, 0, (size_t)nw * sizeof *count);
        for (int i = 0; i < n; i++) p->w_idx[p->w_off[owner[i]] + count[owner[i]]++] = i;
    }
    free(free_at);
    free(ready);
    free(owner);
    free(count);
    return rc;
}

int pk_plan_build(const pk_shape *s, pk_plan *p) {
    memset(p, 0, sizeof *p);
    if (s->n_layer < 1 || s->n_layer > 4096 || s->n_embd < 1 || s->n_head < 1 || s->n_head_kv < 1 ||
        s->n_head % s->n_head_kv || s->head_dim < 1 || (!s->n_expert && s->n_ff < 1) || s->n_vocab < 1 || s->n_tok < 1 ||
        s->n_tok > 8 || s->n_ctx < 1 || s->n_workers < 1 || s->weight_bytes <= 0 || s->kv_bytes <= 0 ||
        s->n_expert < 0 || (s->n_expert && (s->n_expert_used < 1 || s->n_expert_used > s->n_expert ||
                                            s->n_ff_exp < 1)))
        return -1;
    p->s = *s;
    if (p->s.split_min <= 0) p->s.split_min = 256;
    if (p->s.pos_tile <= 0) p->s.pos_tile = 64;
    builder b = {p, 0};
    if (build(&b) || schedule(p)) {
        pk_plan_free(p);
        return -1;
    }
    return 0;
}

void pk_plan_free(pk_plan *p) {
    free(p->inst);
    free(p->w_off);
    free(p->w_idx);
    free(p->target);
    memset(p, 0, sizeof *p);
}

/* What instruction in adds to its signal counter over a step: 1, but an attention group (n_split
 * splits) adds 1 for all of them (its merging split). */
static int adds(const pk_inst *in) { return in->op != PK_ATTN || in->split == 0; }

const char *pk_plan_check(const pk_plan *p) {
    const char *err = NULL;
    int *made = calloc((size_t)p->n_counters, sizeof *made), *seen = calloc((size_t)(p->n_inst ? p->n_inst : 1), 1);
    if (!made || !seen) err = "no memory";
    for (int i = 0; !err && i < p->n_inst; i++) { /* in the global order: the producers so far */
        const pk_inst *in = &p->inst[i];
        if (in->wait >= p->n_counters || in->signal >= p->n_counters) err = "a counter out of range";
        else if (in->wait >= 0 && (in->need != p->target[in->wait] || made[in->wait] != in->need))
            err = "an instruction waits for a count its earlier producers do not make";
        else if (in->wait < 0 && in->need != 0) err = "an instruction needs a count of no counter";
        if (!err && in->signal >= 0) made[in->signal] += adds(in);
    }
    for (int c = 0; !err && c < p->n_counters; c++)
        if (made[c] != p->target[c]) err = "a counter's target is not its producers' count";
    for (int w = 0; !err && w < p->s.n_workers; w++)
        for (int j = p->w_off[w]; !err && j < p->w_off[w + 1]; j++) {
            int i = p->w_idx[j];
            if (i < 0 || i >= p->n_inst || ((char *)seen)[i]) err = "an instruction on no list or on two";
            else if (j > p->w_off[w] && i < p->w_idx[j - 1]) err = "a worker's list out of the global order";
            else ((char *)seen)[i] = 1;
        }
    if (!err && p->w_off[p->s.n_workers] != p->n_inst) err = "an instruction on no list";
    free(made);
    free(seen);
    return err;
}
