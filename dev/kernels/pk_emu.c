/* pk_emu.c — the persistent decode kernel's instruction plan (pk_plan.h, issue 30) run on the CPU:
 * each worker a thread that runs its list, waiting on atomic counters as a GPU block would spin on
 * them, the instructions' work done in plain float C on a real model's weights (dequantized).
 * Built as $(BUILD)/tests/test_pk_emu (make test); no GPU.
 *
 * What it shows, per model (brisk synth's tiny qwen3, llama and qwen3moe, f32 weights and cache):
 *   - the plan computes the model: every token's logits within 1e-4 (of the row's largest) of
 *     brisk's own CPU forward pass over the same tokens, steps of 1 to 8 tokens;
 *   - the counters order everything the scratch's reuse needs: runs on threads (with random
 *     delays before instructions), and an adversarial serial schedule (of the instructions whose
 *     waits hold, the latest in the global order first) give the global order's serial run's
 *     logits bit for bit;
 *   - that check can fail: with one wait dropped (the first attention-output slice of layer 1
 *     no longer waits for the attention) and its worker let ahead of the others, the adversarial
 *     schedule's logits differ;
 *   - plans for the real shapes (qwen3-8b, llama3-8b, qwen3-0.6b, qwen3-30b-a3b; 1-8 tokens; 4K-128K;
 *     132 workers) keep pk_plan_check's invariants, and mutated ones are refused.
 * What it cannot show: the GPU kernel's speed; its memory model (the emulation's atomics are
 * sequentially consistent C11 ones; the kernel's counters need release/acquire at gpu scope). */
#include <math.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "brisk.h"
#include "model/model.h"
#include "model/synth.h"
#include "pk_plan.h"
#include "quant/quant.h"
#include "test.h"

/* ---- the model, in floats ---- */

typedef struct emu_layer {
    float *attn_norm, *ffn_norm, *q_norm, *k_norm; /* (n_embd), (n_embd), (head_dim) x2 or NULL */
    float *wqkv;  /* (n_qkv, n_embd): q, k, v rows stacked */
    float *wo;    /* (n_embd, n_head * head_dim) */
    float *gate, *up; /* (n_ff, n_embd) */
    float *down;  /* (n_embd, n_ff) */
    float *router;            /* qwen3moe: (n_expert, n_embd) */
    float *gate_e, *up_e;     /* (n_expert * n_ff_exp, n_embd) */
    float *down_e;            /* (n_expert * n_embd, n_ff_exp) */
} emu_layer;

typedef struct emu_model {
    int nl, d, nh, nkv, hd, nff, nv;
    int ne, k, nffe; /* qwen3moe: experts, routed a token, their FFN width (ne 0: dense) */
    float eps;
    bk_rope_params rope;
    float *emb, *out_norm, *wout; /* (nv, d), (d), (nv, d) */
    emu_layer *L;
} emu_model;

static float *dequant(const bk_weight *w) {
    float *f = malloc((size_t)w->n_in * (size_t)w->n_out * sizeof *f);
    if (!f) return NULL;
    for (int64_t r = 0; r < w->n_out; r++)
        if (quant_dequantize(w->type, (const char *)w->host + (size_t)r * w->row_bytes, f + r * w->n_in, w->n_in)) {
            free(f);
            return NULL;
        }
    return f;
}

/* a's rows then b's (same width) in one matrix */
static float *stack(float *a, int64_t na, float *b, int64_t nb, int64_t width) {
    float *f = a && b ? realloc(a, (size_t)(na + nb) * (size_t)width * sizeof *f) : NULL;
    if (f) memcpy(f + na * width, b, (size_t)nb * (size_t)width * sizeof *f);
    free(b);
    if (!f) free(a);
    return f;
}

static bool emu_load(const brisk_model *m, emu_model *e) {
    const model_hparams *hp = &m->hp;
    memset(e, 0, sizeof *e);
    e->nl = hp->n_layer, e->d = hp->n_embd, e->nh = hp->n_head, e->nkv = hp->n_head_kv, e->hd = hp->head_dim;
    e->nff = hp->n_ff, e->nv = hp->n_vocab, e->eps = hp->rms_eps, e->rope = hp->rope;
    e->ne = hp->n_expert, e->k = hp->n_expert_used, e->nffe = hp->n_ff_exp;
    if (e->ne && (e->k > 8 || e->ne > 256)) return false;
    if (hp->qkv_bias || hp->rope.ext_factor != 0.0f) return false; /* (not in this emulation) */
    e->emb = dequant(&m->tok_embd);
    e->out_norm = dequant(&m->output_norm);
    e->wout = dequant(&m->output);
    e->L = calloc((size_t)e->nl, sizeof *e->L);
    bool ok = e->emb && e->out_norm && e->wout && e->L;
    for (int l = 0; ok && l < e->nl; l++) {
        const layer_weights *W = &m->layers[l];
        emu_layer *L = &e->L[l];
        L->attn_norm = dequant(&W->attn_norm);
        L->ffn_norm = dequant(&W->ffn_norm);
        if (hp->qk_norm) L->q_norm = dequant(&W->q_norm), L->k_norm = dequant(&W->k_norm);
        const int64_t nq = (int64_t)e->nh * e->hd, nk = (int64_t)e->nkv * e->hd;
        L->wqkv = stack(stack(dequant(&W->wq), nq, dequant(&W->wk), nk, e->d), nq + nk, dequant(&W->wv), nk, e->d);
        L->wo = dequant(&W->wo);
        if (e->ne) {
            L->router = dequant(&W->ffn_gate_inp);
            L->gate_e = dequant(&W->gate_exps);
            L->up_e = dequant(&W->up_exps);
            L->down_e = dequant(&W->down_exps);
        } else {
            L->gate = dequant(&W->w_gate);
            L->up = dequant(&W->w_up);
            L->down = dequant(&W->w_down);
        }
        ok = L->attn_norm && L->ffn_norm && (!hp->qk_norm || (L->q_norm && L->k_norm)) && L->wqkv && L->wo &&
             (e->ne ? L->router && L->gate_e && L->up_e && L->down_e : L->gate && L->up && L->down);
    }
    return ok;
}

static void emu_free(emu_model *e) {
    for (int l = 0; e->L && l < e->nl; l++) {
        emu_layer *L = &e->L[l];
        float *f[] = {L->attn_norm, L->ffn_norm, L->q_norm, L->k_norm, L->wqkv, L->wo, L->gate, L->up, L->down,
                      L->router, L->gate_e, L->up_e, L->down_e};
        for (size_t i = 0; i < sizeof f / sizeof *f; i++) free(f[i]);
    }
    free(e->L);
    free(e->emb);
    free(e->out_norm);
    free(e->wout);
}

/* ---- the step's state and the instructions' work ---- */

typedef struct emu_state {
    const emu_model *m;
    const pk_plan *p;
    int n_tok, n_ctx;
    int32_t pos[8];
    float *x, *q, *k, *v, *att, *h, *logits; /* (n_tok, ...) scratch shared by the layers */
    float *kc, *vc;                          /* (nl, n_ctx, nkv, hd) */
    float *po, *pm, *pl;                     /* the splits' partials: (n_tok, nkv, n_split, group, hd) and max / sum */
    float *lg;                               /* qwen3moe: (n_tok, ne) the router's logits */
    int32_t *ids;                            /* (n_tok, k) the routed experts */
    float *wts, *he;                         /* (n_tok, k) their weights; (n_tok, k, nffe) their SwiGLU */
    atomic_int *cnt;                         /* (n_counters) */
    atomic_int *merge;                       /* (nl, n_tok, nkv) splits done */
    int gen;                                 /* the step's generation: counters are not reset between the
                                              * steps of one plan, a step waits for gen times a count (as
                                              * pk_lab.cu's kernel) */
    int chaos;                               /* threads: random delays */
    int skip_wait;                           /* an instruction whose wait is dropped (-1: none) */
} emu_state;

static float dot(const float *a, const float *b, int n) {
    float s = 0.0f;
    for (int i = 0; i < n; i++) s += a[i] * b[i];
    return s;
}

static void rms(const float *x, const float *w, float *y, int n, float eps) {
    float ss = 0.0f;
    for (int i = 0; i < n; i++) ss += x[i] * x[i];
    float r = 1.0f / sqrtf(ss / (float)n + eps);
    for (int i = 0; i < n; i++) y[i] = x[i] * r * w[i];
}

/* as the CPU backend's rope (theta by repeated multiplication; no YaRN here) */
static void rope(float *v, int pos, const bk_rope_params *rp) {
    const int n_rot = rp->n_rot;
    float theta = (float)pos, theta_scale = powf(rp->freq_base, -2.0f / (float)n_rot);
    for (int i0 = 0; i0 < n_rot; i0 += 2) {
        float ff = rp->freq_factors ? rp->freq_factors[i0 / 2] : 1.0f, th = rp->freq_scale * (theta / ff);
        float c = cosf(th) * rp->attn_factor, s = sinf(th) * rp->attn_factor;
        int a = rp->mode == BK_ROPE_NEOX ? i0 / 2 : i0, b = rp->mode == BK_ROPE_NEOX ? i0 / 2 + n_rot / 2 : i0 + 1;
        float x0 = v[a], x1 = v[b];
        v[a] = x0 * c - x1 * s;
        v[b] = x0 * s + x1 * c;
        theta *= theta_scale;
    }
}

static void run_inst(emu_state *st, const pk_inst *in) {
    const emu_model *m = st->m;
    const int d = m->d, hd = m->hd, nq = m->nh * hd, nk = m->nkv * hd, group = m->nh / m->nkv;
    const int l = in->layer, ns = st->p->n_split;
    const emu_layer *L = l < m->nl ? &m->L[l] : NULL;
    float xn[4096];
    switch ((pk_op)in->op) {
    case PK_QKV:
        for (int t = 0; t < st->n_tok; t++) {
            rms(st->x + (size_t)t * d, L->attn_norm, xn, d, m->eps);
            for (int r = in->r0; r < in->r1; r++) {
                float y = dot(L->wqkv + (size_t)r * d, xn, d);
                if (r < nq) st->q[(size_t)t * nq + r] = y;
                else if (r < nq + nk) st->k[(size_t)t * nk + r - nq] = y;
                else st->v[(size_t)t * nk + r - nq - nk] = y;
            }
        }
        break;
    case PK_KV: /* the head's k (and its group's q) normed and rotated; k, v into the cache */
        for (int t = 0; t < st->n_tok; t++) {
            float *k = st->k + (size_t)t * nk + (size_t)in->kvh * hd;
            if (L->k_norm) rms(k, L->k_norm, k, hd, m->eps);
            rope(k, st->pos[t], &m->rope);
            size_t at = (((size_t)l * st->n_ctx + st->pos[t]) * m->nkv + in->kvh) * hd;
            memcpy(st->kc + at, k, (size_t)hd * sizeof(float));
            memcpy(st->vc + at, st->v + (size_t)t * nk + (size_t)in->kvh * hd, (size_t)hd * sizeof(float));
            for (int j = 0; j < group; j++) {
                float *q = st->q + (size_t)t * nq + (size_t)(in->kvh * group + j) * hd;
                if (L->q_norm) rms(q, L->q_norm, q, hd, m->eps);
                rope(q, st->pos[t], &m->rope);
            }
        }
        break;
    case PK_ATTN: {
        const int t = in->tok, h = in->kvh;
        int p0, p1;
        pk_split_range(st->p, st->pos[t] + 1, in->split, &p0, &p1);
        const float scale = 1.0f / sqrtf((float)hd);
        const size_t g0 = (((size_t)t * m->nkv + h) * ns + in->split) * group;
        for (int j = 0; j < group; j++) {
            const float *q = st->q + (size_t)t * nq + (size_t)(h * group + j) * hd;
            float mx = -INFINITY, sum = 0.0f, *o = st->po + (g0 + j) * hd;
            memset(o, 0, (size_t)hd * sizeof *o);
            for (int p = p0; p < p1; p++) {
                size_t at = (((size_t)l * st->n_ctx + p) * m->nkv + h) * hd;
                float s = dot(q, st->kc + at, hd) * scale, mn = fmaxf(mx, s), a = expf(mx - mn), w = expf(s - mn);
                sum = sum * a + w;
                for (int i = 0; i < hd; i++) o[i] = o[i] * a + w * st->vc[at + i];
                mx = mn;
            }
            st->pm[g0 + j] = mx;
            st->pl[g0 + j] = sum;
        }
        /* the group's last split merges the splits, in their order (the same sums whoever is last) */
        atomic_int *mc = &st->merge[((size_t)l * st->n_tok + t) * m->nkv + h];
        if (atomic_fetch_add(mc, 1) + 1 != ns * st->gen) return;
        for (int j = 0; j < group; j++) {
            float M = -INFINITY, S = 0.0f, *out = st->att + (size_t)t * nq + (size_t)(h * group + j) * hd;
            for (int sp = 0; sp < ns; sp++) M = fmaxf(M, st->pm[(((size_t)t * m->nkv + h) * ns + sp) * group + j]);
            memset(out, 0, (size_t)hd * sizeof *out);
            for (int sp = 0; sp < ns; sp++) {
                size_t gi = (((size_t)t * m->nkv + h) * ns + sp) * group + j;
                if (st->pl[gi] == 0.0f) continue; /* an empty split */
                float a = expf(st->pm[gi] - M);
                S += st->pl[gi] * a;
                for (int i = 0; i < hd; i++) out[i] += st->po[gi * hd + i] * a;
            }
            for (int i = 0; i < hd; i++) out[i] /= S;
        }
        break;
    }
    case PK_OUT:
        for (int t = 0; t < st->n_tok; t++)
            for (int r = in->r0; r < in->r1; r++)
                st->x[(size_t)t * d + r] += dot(L->wo + (size_t)r * nq, st->att + (size_t)t * nq, nq);
        break;
    case PK_GATEUP:
        for (int t = 0; t < st->n_tok; t++) {
            rms(st->x + (size_t)t * d, L->ffn_norm, xn, d, m->eps);
            for (int r = in->r0; r < in->r1; r++) {
                float g = dot(L->gate + (size_t)r * d, xn, d), u = dot(L->up + (size_t)r * d, xn, d);
                st->h[(size_t)t * m->nff + r] = g / (1.0f + expf(-g)) * u;
            }
        }
        break;
    case PK_DOWN:
        for (int t = 0; t < st->n_tok; t++)
            for (int r = in->r0; r < in->r1; r++)
                st->x[(size_t)t * d + r] += dot(L->down + (size_t)r * m->nff, st->h + (size_t)t * m->nff, m->nff);
        break;
    case PK_ROUTE: /* the router's logits, experts [r0, r1) */
        for (int t = 0; t < st->n_tok; t++) {
            rms(st->x + (size_t)t * d, L->ffn_norm, xn, d, m->eps);
            for (int e = in->r0; e < in->r1; e++) st->lg[(size_t)t * m->ne + e] = dot(L->router + (size_t)e * d, xn, d);
        }
        break;
    case PK_TOPK: { /* as brisk's CPU: softmax, top-k (ties to the lower id), renormalized (double sum) */
        const int t = in->tok;
        const float *lg = st->lg + (size_t)t * m->ne;
        float pr[256], mx = -INFINITY;
        for (int e = 0; e < m->ne; e++) mx = fmaxf(mx, lg[e]);
        double sum = 0;
        for (int e = 0; e < m->ne; e++) sum += (double)(pr[e] = expf(lg[e] - mx));
        for (int e = 0; e < m->ne; e++) pr[e] *= (float)(1.0 / sum);
        int32_t *ids = st->ids + (size_t)t * m->k;
        float *w = st->wts + (size_t)t * m->k;
        double ws = 0;
        for (int k = 0; k < m->k; k++) {
            int best = -1;
            for (int e = 0; e < m->ne; e++) {
                bool taken = false;
                for (int q = 0; q < k; q++) taken |= ids[q] == e;
                if (!taken && (best < 0 || pr[e] > pr[best])) best = e;
            }
            ids[k] = best;
            ws += (double)(w[k] = pr[best]);
        }
        float fs = (float)ws < 6.103515625e-5f ? 6.103515625e-5f : (float)ws;
        for (int k = 0; k < m->k; k++) w[k] /= fs;
        break;
    }
    case PK_EGU: { /* slot kvh of token tok: its expert's rows */
        const int t = in->tok, e = st->ids[(size_t)t * m->k + in->kvh];
        rms(st->x + (size_t)t * d, L->ffn_norm, xn, d, m->eps);
        float *h = st->he + ((size_t)t * m->k + in->kvh) * m->nffe;
        for (int r = in->r0; r < in->r1; r++) {
            const size_t row = (size_t)e * m->nffe + r;
            float g = dot(L->gate_e + row * d, xn, d), u = dot(L->up_e + row * d, xn, d);
            h[r] = g / (1.0f + expf(-g)) * u;
        }
        break;
    }
    case PK_EDOWN:
        for (int t = 0; t < st->n_tok; t++)
            for (int r = in->r0; r < in->r1; r++) {
                float acc = 0.0f;
                for (int k = 0; k < m->k; k++) {
                    const int e = st->ids[(size_t)t * m->k + k];
                    acc += st->wts[(size_t)t * m->k + k] *
                           dot(L->down_e + ((size_t)e * d + r) * m->nffe, st->he + ((size_t)t * m->k + k) * m->nffe,
                               m->nffe);
                }
                st->x[(size_t)t * d + r] += acc;
            }
        break;
    case PK_HEAD:
        for (int t = 0; t < st->n_tok; t++) {
            rms(st->x + (size_t)t * d, m->out_norm, xn, d, m->eps);
            for (int r = in->r0; r < in->r1; r++) st->logits[(size_t)t * m->nv + r] = dot(m->wout + (size_t)r * d, xn, d);
        }
        break;
    default: break;
    }
    if (in->signal >= 0) atomic_fetch_add(&st->cnt[in->signal], 1); /* (ATTN: the merging split only) */
}

static bool may_run(const emu_state *st, int i) {
    const pk_inst *in = &st->p->inst[i];
    return in->wait < 0 || i == st->skip_wait || atomic_load(&st->cnt[in->wait]) >= in->need * st->gen;
}

typedef struct worker_arg {
    emu_state *st;
    int w;
    unsigned seed;
} worker_arg;

static void chaos_pause(unsigned *seed) {
    unsigned r = rand_r(seed) % 16;
    if (r < 4) usleep(r * 40);
    else if (r < 8) sched_yield();
}

static void *worker(void *arg) {
    worker_arg *a = arg;
    emu_state *st = a->st;
    const pk_plan *p = st->p;
    for (int j = p->w_off[a->w]; j < p->w_off[a->w + 1]; j++) {
        int i = p->w_idx[j];
        while (!may_run(st, i)) sched_yield(); /* (a GPU block spins on the counter) */
        if (st->chaos) chaos_pause(&a->seed);
        run_inst(st, &p->inst[i]);
    }
    return NULL;
}

enum { RUN_SERIAL, RUN_THREADS, RUN_CHAOS, RUN_ADVERSARY };

/* One step of the plan over the state's tokens (generation st->gen + 1; the counters zeroed first
 * when `fresh`: a plan's first step); false on a deadlock (adversary) or no threads. */
static bool run_step(emu_state *st, int mode, bool fresh) {
    const pk_plan *p = st->p;
    if (fresh) {
        for (int c = 0; c < p->n_counters; c++) atomic_store(&st->cnt[c], 0);
        for (size_t i = 0; i < (size_t)st->m->nl * st->n_tok * st->m->nkv; i++) atomic_store(&st->merge[i], 0);
        st->gen = 0;
    }
    st->gen++;
    if (mode == RUN_SERIAL) {
        for (int i = 0; i < p->n_inst; i++) {
            if (!may_run(st, i)) return false;
            run_inst(st, &p->inst[i]);
        }
        return true;
    }
    if (mode == RUN_ADVERSARY) { /* workers simulated: of the next instructions that may run, the latest */
        const int nw = p->s.n_workers;
        int *at = malloc((size_t)nw * sizeof *at), left = p->n_inst, focus = -1;
        if (!at) return false;
        for (int w = 0; w < nw; w++) {
            at[w] = p->w_off[w];
            for (int j = p->w_off[w]; j < p->w_off[w + 1]; j++) focus = p->w_idx[j] == st->skip_wait ? w : focus;
        }
        while (left > 0) { /* (the worker of a dropped wait races ahead of the others: its instruction
                            * then runs before the producers it no longer waits for) */
            int pick = -1;
            for (int w = 0; w < nw; w++)
                if (at[w] < p->w_off[w + 1] && may_run(st, p->w_idx[at[w]]) &&
                    (pick < 0 || (w == focus) > (pick == focus) ||
                     ((w == focus) == (pick == focus) && p->w_idx[at[w]] > p->w_idx[at[pick]])))
                    pick = w;
            if (pick < 0) break; /* a deadlock */
            run_inst(st, &p->inst[p->w_idx[at[pick]++]]);
            left--;
        }
        free(at);
        return left == 0;
    }
    const int nw = p->s.n_workers;
    pthread_t th[64];
    worker_arg wa[64];
    if (nw > 64) return false;
    int made = 0;
    for (int w = 0; w < nw; w++) {
        wa[w] = (worker_arg){st, w, (unsigned)(w * 7919 + 17)};
        if (pthread_create(&th[w], NULL, worker, &wa[w])) break;
        made++;
    }
    for (int w = 0; w < made; w++) pthread_join(th[w], NULL);
    return made == nw;
}

/* ---- the checks ---- */

#define N_PROMPT 20
#define N_GEN 8
#define N_POS (N_PROMPT + N_GEN)

typedef struct ref_run {
    int n_vocab;
    brisk_token tokens[N_POS]; /* the prompt, then the reference's greedy picks */
    float *logits;             /* (N_POS, n_vocab): each position's */
} ref_run;

/* brisk's CPU forward pass: the prompt in one batch, then greedy tokens one a step. */
static bool reference(brisk_model *m, ref_run *r) {
    brisk_model_info info;
    brisk_model_get_info(m, &info);
    r->n_vocab = info.n_vocab;
    brisk_context_params cp = brisk_context_default_params();
    cp.n_ctx = 64;
    cp.n_batch = 32;
    cp.n_threads = 2;
    cp.kv_type = BRISK_KV_F32;
    brisk_context *c = NULL;
    CHECK_OK(brisk_context_new(m, &cp, &c));
    if (!c) return false;
    r->logits = malloc((size_t)N_POS * r->n_vocab * sizeof(float));
    brisk_batch_entry e[N_PROMPT];
    for (int i = 0; i < N_PROMPT; i++) {
        r->tokens[i] = (i * 7 + 3) % (r->n_vocab - 4) + 2;
        e[i] = (brisk_batch_entry){.token = r->tokens[i], .pos = i, .seq = 0, .logits = true};
    }
    bool ok = r->logits && brisk_decode(c, e, N_PROMPT) == BRISK_OK;
    for (int i = 0; ok && i < N_PROMPT; i++) {
        const float *l = brisk_get_logits(c, i);
        if (!(ok = l != NULL)) break;
        memcpy(r->logits + (size_t)i * r->n_vocab, l, (size_t)r->n_vocab * sizeof(float));
    }
    for (int p = N_PROMPT; ok && p < N_POS; p++) {
        const float *prev = r->logits + (size_t)(p - 1) * r->n_vocab;
        int best = 0;
        for (int v = 1; v < r->n_vocab; v++)
            if (prev[v] > prev[best]) best = v;
        r->tokens[p] = best;
        brisk_batch_entry g = {.token = best, .pos = p, .seq = 0, .logits = true};
        const float *l = brisk_decode(c, &g, 1) == BRISK_OK ? brisk_get_logits(c, 0) : NULL;
        if (!(ok = l != NULL)) break;
        memcpy(r->logits + (size_t)p * r->n_vocab, l, (size_t)r->n_vocab * sizeof(float));
    }
    CHECK(ok);
    brisk_context_free(c);
    return ok;
}

/* The emulation's plan of a step of n_tok tokens: small slices and splits, so that a tiny model
 * still has several of each (a split of a few positions, tiles of 4). */
static int emu_plan(const emu_model *m, int n_tok, int n_workers, pk_plan *p) {
    pk_shape sh = {.n_layer = m->nl, .n_embd = m->d, .n_head = m->nh, .n_head_kv = m->nkv, .head_dim = m->hd,
                   .n_ff = m->nff, .n_vocab = m->nv, .n_expert = m->ne, .n_expert_used = m->k, .n_ff_exp = m->nffe,
                   .n_tok = n_tok, .n_ctx = N_POS, .n_workers = n_workers, .weight_bytes = 4, .kv_bytes = 4,
                   .slice_kb = 16, .split_min = 6, .pos_tile = 4};
    return pk_plan_build(&sh, p);
}

/* The plan's run over the reference's tokens in steps of n_tok (the last one shorter, with a plan
 * of its own size): every position's logits into out (N_POS, nv). Modes as run_step; skip_wait as
 * emu_state's (an instruction of the n_tok plan). */
static bool emulate(const emu_model *m, int n_tok, int n_workers, int mode, int skip_wait, const brisk_token *tok,
                    float *out) {
    const int n_ctx = N_POS, group = m->nh / m->nkv, most = (N_POS + 5) / 6; /* splits at most */
    pk_plan full, part;
    const int rest = N_POS % n_tok;
    if (emu_plan(m, n_tok, n_workers, &full)) return false;
    if (rest && emu_plan(m, rest, n_workers, &part)) {
        pk_plan_free(&full);
        return false;
    }
    emu_state st = {.m = m, .n_ctx = n_ctx, .chaos = mode == RUN_CHAOS};
    const size_t nt = (size_t)n_tok, cache = (size_t)m->nl * n_ctx * m->nkv * m->hd;
    const size_t parts = nt * m->nkv * most * group;
    st.x = calloc(nt * m->d, sizeof(float));
    st.q = calloc(nt * m->nh * m->hd, sizeof(float));
    st.k = calloc(nt * m->nkv * m->hd, sizeof(float));
    st.v = calloc(nt * m->nkv * m->hd, sizeof(float));
    st.att = calloc(nt * m->nh * m->hd, sizeof(float));
    st.h = calloc(nt * (m->nff > 0 ? (size_t)m->nff : 1), sizeof(float));
    st.logits = calloc(nt * m->nv, sizeof(float));
    st.kc = calloc(cache, sizeof(float));
    st.vc = calloc(cache, sizeof(float));
    st.po = calloc(parts * m->hd, sizeof(float));
    st.pm = calloc(parts, sizeof(float));
    st.pl = calloc(parts, sizeof(float));
    st.cnt = calloc((size_t)full.n_counters, sizeof *st.cnt);
    st.merge = calloc((size_t)m->nl * nt * m->nkv, sizeof *st.merge);
    const size_t kk = m->ne ? (size_t)m->k : 1;
    st.ids = calloc(nt * kk, sizeof *st.ids);
    st.lg = calloc(nt * (m->ne ? (size_t)m->ne : 1), sizeof *st.lg);
    st.wts = calloc(nt * kk, sizeof *st.wts);
    st.he = calloc(nt * kk * (m->ne ? (size_t)m->nffe : 1), sizeof *st.he);
    bool ok = st.x && st.q && st.k && st.v && st.att && st.h && st.logits && st.kc && st.vc && st.po && st.pm &&
              st.pl && st.cnt && st.merge && st.ids && st.lg && st.wts && st.he && full.n_split <= most &&
              (!rest || part.n_split <= most);
    for (int p0 = 0; ok && p0 < N_POS; p0 += n_tok) {
        const bool last = p0 + n_tok > N_POS;
        st.p = last ? &part : &full;
        st.n_tok = last ? rest : n_tok;
        st.skip_wait = last ? -1 : skip_wait;
        for (int t = 0; t < st.n_tok; t++) {
            st.pos[t] = p0 + t;
            memcpy(st.x + (size_t)t * m->d, m->emb + (size_t)tok[p0 + t] * m->d, (size_t)m->d * sizeof(float));
        }
        ok = run_step(&st, mode, p0 == 0 || last);
        for (int t = 0; ok && t < st.n_tok; t++)
            memcpy(out + (size_t)(p0 + t) * m->nv, st.logits + (size_t)t * m->nv, (size_t)m->nv * sizeof(float));
    }
    void *f[] = {st.x,  st.q,  st.k,  st.v,     st.att,   st.h,   st.logits, st.kc, st.vc,
                 st.po, st.pm, st.pl, st.cnt, st.merge, st.ids, st.lg, st.wts, st.he};
    for (size_t i = 0; i < sizeof f / sizeof *f; i++) free(f[i]);
    pk_plan_free(&full);
    if (rest) pk_plan_free(&part);
    return ok;
}

/* The largest difference over every position, of the row's largest magnitude. */
static double worst_rel(const float *a, const float *b, int nv) {
    double worst = 0;
    for (int p = 0; p < N_POS; p++) {
        double mx = 0, dd = 0;
        for (int v = 0; v < nv; v++) {
            const float x = a[(size_t)p * nv + v], y = b[(size_t)p * nv + v];
            mx = fabs(x) > mx ? fabs(x) : mx;
            dd = fabs((double)x - y) > dd ? fabs((double)x - y) : dd;
        }
        if (mx > 0 && dd / mx > worst) worst = dd / mx;
    }
    return worst;
}

/* The instruction of the first OUT slice of layer `layer` in the emulation's plan of n_tok. */
static int first_out(const emu_model *m, int n_tok, int n_workers, int layer) {
    pk_plan p;
    if (emu_plan(m, n_tok, n_workers, &p)) return -1;
    int at = -1;
    for (int i = 0; i < p.n_inst && at < 0; i++)
        if (p.inst[i].op == PK_OUT && p.inst[i].layer == layer) at = i;
    pk_plan_free(&p);
    return at;
}

static void check_model(const char *preset) {
    char dir[64] = "/tmp/brisk-test-pk-XXXXXX", path[128];
    if (!mkdtemp(dir)) {
        CHECK(!"mkdtemp");
        return;
    }
    snprintf(path, sizeof path, "%s/%s.gguf", dir, preset);
    synth_config c;
    CHECK_OK(synth_preset(preset, &c));
    c.n_threads = 2;
    bool wrote = synth_write(&c, NULL, path, false) == BRISK_OK;
    CHECK(wrote);
    brisk_model_params mp = brisk_model_default_params();
    mp.n_gpu_layers = 0;
    brisk_model *bm = NULL;
    if (wrote) CHECK_OK(brisk_model_load(path, &mp, &bm));
    emu_model m;
    ref_run ref = {0};
    if (bm && emu_load(bm, &m)) {
        CHECK(m.d <= 4096);
        if (reference(bm, &ref)) {
            const size_t n = (size_t)N_POS * m.nv;
            float *serial = malloc(n * sizeof(float)), *got = malloc(n * sizeof(float));
            const int sizes[] = {1, 3, 8};
            for (size_t si = 0; serial && got && si < sizeof sizes / sizeof *sizes; si++) {
                const int nt = sizes[si], nw = 12;
                CHECK(emulate(&m, nt, nw, RUN_SERIAL, -1, ref.tokens, serial));
                double rel = worst_rel(ref.logits, serial, m.nv);
                printf("  %s, steps of %d tokens, %d workers: logits within %.1e of brisk's CPU forward pass\n",
                       preset, nt, nw, rel);
                CHECK(rel < 1e-4);
                const char *names[] = {"threads", "threads with random delays", "the adversarial schedule"};
                const int modes[] = {RUN_THREADS, RUN_CHAOS, RUN_ADVERSARY};
                for (int k = 0; k < 3; k++) {
                    bool ran = emulate(&m, nt, nw, modes[k], -1, ref.tokens, got);
                    CHECK(ran);
                    bool same = ran && !memcmp(serial, got, n * sizeof(float));
                    if (!same) printf("  %s, steps of %d: %s differ from the serial run\n", preset, nt, names[k]);
                    CHECK(same);
                }
                /* one wait dropped: the adversarial schedule must catch it */
                int bad = first_out(&m, nt, nw, 1);
                CHECK(bad >= 0);
                bool ran = bad >= 0 && emulate(&m, nt, nw, RUN_ADVERSARY, bad, ref.tokens, got);
                CHECK(ran);
                bool caught = ran && memcmp(serial, got, n * sizeof(float)) != 0;
                CHECK(caught);
            }
            free(serial);
            free(got);
        }
        emu_free(&m);
    } else if (bm) {
        CHECK(!"the model's weights in floats");
    }
    free(ref.logits);
    brisk_model_free(bm);
    unlink(path);
    rmdir(dir);
}

static void t_qwen3(void) { check_model("tiny-qwen3"); }
static void t_llama(void) { check_model("tiny-llama"); }
static void t_qwen3moe(void) { check_model("tiny-qwen3moe"); }

/* Plans of the real shapes keep the invariants; their schedule's estimate against the bound of the
 * bytes spread evenly over the workers. */
static void t_real_shapes(void) {
    struct {
        const char *name;
        pk_shape s;
    } shapes[] = {
        {"qwen3-8b", {.n_layer = 36, .n_embd = 4096, .n_head = 32, .n_head_kv = 8, .head_dim = 128, .n_ff = 12288,
                      .n_vocab = 151936}},
        {"llama3-8b", {.n_layer = 32, .n_embd = 4096, .n_head = 32, .n_head_kv = 8, .head_dim = 128, .n_ff = 14336,
                       .n_vocab = 128256}},
        {"qwen3-0.6b", {.n_layer = 28, .n_embd = 1024, .n_head = 16, .n_head_kv = 8, .head_dim = 128, .n_ff = 3072,
                        .n_vocab = 151936}},
        {"qwen3-30b-a3b", {.n_layer = 48, .n_embd = 2048, .n_head = 32, .n_head_kv = 4, .head_dim = 128,
                           .n_vocab = 151936, .n_expert = 128, .n_expert_used = 8, .n_ff_exp = 768}},
    };
    for (size_t i = 0; i < sizeof shapes / sizeof *shapes; i++)
        for (int nt = 1; nt <= 8; nt *= 2)
            for (int ctx = 4096; ctx <= 131072; ctx *= 32) {
                pk_shape s = shapes[i].s;
                s.n_tok = nt, s.n_ctx = ctx, s.n_workers = 132, s.weight_bytes = 0.5625, s.kv_bytes = 2;
                pk_plan p;
                CHECK(pk_plan_build(&s, &p) == 0);
                const char *err = pk_plan_check(&p);
                if (err) printf("  %s: %s\n", shapes[i].name, err);
                CHECK(err == NULL);
                double total = 0;
                for (int k = 0; k < p.n_inst; k++) total += p.inst[k].est;
                if (nt == 1 || nt == 8)
                    printf("  %-13s %d token%s at %6d: %6d instructions, %2d splits; schedule %.0f%% of the even "
                           "spread's bound\n", shapes[i].name, nt, nt > 1 ? "s" : " ", ctx, p.n_inst, p.n_split,
                           100.0 * total / s.n_workers / p.makespan);
                /* mutations the check must refuse */
                if (p.n_inst > 2 && !err) {
                    int w = p.inst[1].wait;
                    p.inst[1].need += 1; /* more than its producers make */
                    CHECK(pk_plan_check(&p) != NULL);
                    p.inst[1].need -= 1;
                    int last = p.n_inst - 1; /* a producer after its waiter: the LM head before the layers */
                    pk_inst tmp = p.inst[0];
                    p.inst[0] = p.inst[last], p.inst[last] = tmp;
                    CHECK(pk_plan_check(&p) != NULL);
                    p.inst[last] = p.inst[0], p.inst[0] = tmp;
                    int a = p.w_idx[p.w_off[0]], b = p.w_idx[p.w_off[0] + 1]; /* a worker's list out of order */
                    p.w_idx[p.w_off[0]] = b, p.w_idx[p.w_off[0] + 1] = a;
                    CHECK(p.w_off[1] - p.w_off[0] < 2 || pk_plan_check(&p) != NULL);
                    p.w_idx[p.w_off[0]] = a, p.w_idx[p.w_off[0] + 1] = b;
                    CHECK(pk_plan_check(&p) == NULL && w == p.inst[1].wait);
                }
                pk_plan_free(&p);
            }
    pk_shape bad = shapes[0].s;
    bad.n_tok = 9, bad.n_ctx = 4096, bad.n_workers = 132, bad.weight_bytes = 0.5625, bad.kv_bytes = 2;
    pk_plan p;
    CHECK(pk_plan_build(&bad, &p) == -1 && p.inst == NULL);
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"real_shapes", t_real_shapes},
        {"qwen3", t_qwen3},
        {"llama", t_llama},
        {"qwen3moe", t_qwen3moe},
    };
    return test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
