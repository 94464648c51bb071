/* grammar.c — the matcher of grammar.h: stacks, states, byte transitions and
 * token masks, and the brisk_grammar entry points of brisk.h.
 *
 * A stack is a hash-consed list of element positions: node (pos, next), node
 * 0 the empty stack (the text is complete). After expansion every live stack
 * has a GE_CLASS on top. A state is the sorted set of live stacks plus the
 * bytes of an unfinished UTF-8 character; states are interned, and each keeps
 * its 256 byte transitions (computed when first asked) and its token mask.
 *
 * The token trie holds every token piece in sorted order, laid out depth-first
 * (a node's subtree is the index range [i, end)), so a mask is one forward scan
 * that steps each node's byte from its parent's state and jumps over the
 * subtree of a dead one.
 */
#include <pthread.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "engine/grammar.h"
#include "model/model.h"

#define MAX_STACKS 4096     /* live stacks in one state: beyond this the grammar is too ambiguous */
#define SOFT_NODES (1 << 20) /* tables are rebuilt from the current state past these */
#define SOFT_STATES (1 << 15)
#define MAX_MASKS 64        /* cached masks per grammar (n_vocab / 8 bytes each) */

/* ---- the token trie (once per model) ------------------------------------- */

typedef struct gv_node {
    int32_t end;   /* one past the last node of this subtree */
    int32_t tok;   /* a token whose piece ends here, -1: none (more in tok_next) */
    uint16_t depth; /* 1 for a first byte */
    uint8_t byte;
} gv_node;

typedef struct grammar_vocab {
    int n_vocab;
    gv_node *nodes; /* (n_nodes) depth-first */
    int n_nodes, max_depth;
    int32_t *tok_next; /* (n_vocab) next token with the same piece, -1 */
    int32_t *eog;      /* (n_eog) end-of-generation tokens */
    int n_eog;
    char **piece;      /* (n_vocab) owned NUL-free bytes, NULL: never allowed */
    uint16_t *plen;    /* (n_vocab) */
} grammar_vocab;

static void vocab_free(void *p) {
    grammar_vocab *v = p;
    if (!v) return;
    if (v->piece)
        for (int i = 0; i < v->n_vocab; i++) free(v->piece[i]);
    free(v->piece);
    free(v->plen);
    free(v->nodes);
    free(v->tok_next);
    free(v->eog);
    free(v);
}

static const grammar_vocab *sort_vocab; /* qsort has no context argument; guarded by vocab_mu */

static int cmp_piece(const void *a, const void *b) {
    const grammar_vocab *v = sort_vocab;
    int x = *(const int32_t *)a, y = *(const int32_t *)b;
    size_t lx = v->plen[x], ly = v->plen[y];
    int c = memcmp(v->piece[x], v->piece[y], lx < ly ? lx : ly);
    return c ? c : lx < ly ? -1 : lx > ly ? 1 : x - y;
}

static brisk_status vocab_build(const brisk_model *m, grammar_vocab **out) {
    grammar_vocab *v = calloc(1, sizeof *v);
    if (!v) return bk_fail(BRISK_ERR_NOMEM, "grammar: out of memory");
    int n = v->n_vocab = brisk_n_vocab(m);
    v->piece = calloc((size_t)n, sizeof *v->piece);
    v->plen = calloc((size_t)n, sizeof *v->plen);
    v->tok_next = malloc((size_t)n * sizeof *v->tok_next);
    v->eog = malloc((size_t)n * sizeof *v->eog);
    int32_t *order = malloc((size_t)n * sizeof *order);
    size_t total = 0;
    int n_tok = 0;
    if (!v->piece || !v->plen || !v->tok_next || !v->eog || !order) goto oom;
    for (int i = 0; i < n; i++) {
        char buf[1024];
        size_t len = 0;
        v->tok_next[i] = -1;
        if (brisk_token_is_eog(m, i)) {
            v->eog[v->n_eog++] = i;
            continue;
        }
        if (brisk_token_to_piece(m, i, false, buf, sizeof buf, &len) != BRISK_OK || len == 0 || len > 0xFFFF)
            continue;
        if (!(v->piece[i] = malloc(len))) goto oom;
        memcpy(v->piece[i], buf, len);
        v->plen[i] = (uint16_t)len;
        order[n_tok++] = i;
        total += len;
    }
    sort_vocab = v;
    qsort(order, (size_t)n_tok, sizeof *order, cmp_piece);
    int32_t *path = malloc((0x10000 + 1) * sizeof *path); /* node at each depth of the previous piece */
    if (!path || !(v->nodes = malloc((total + 1) * sizeof *v->nodes))) {
        free(path);
        goto oom;
    }
    int plen_prev = 0, prev = -1;
    for (int k = 0; k < n_tok; k++) {
        int t = order[k], len = v->plen[t], lcp = 0;
        if (prev >= 0) {
            int lim = len < plen_prev ? len : plen_prev;
            while (lcp < lim && v->piece[t][lcp] == v->piece[prev][lcp]) lcp++;
        }
        for (int d = plen_prev; d > lcp; d--) v->nodes[path[d]].end = v->n_nodes; /* close the old branch */
        for (int d = lcp + 1; d <= len; d++) {
            path[d] = v->n_nodes;
            v->nodes[v->n_nodes++] = (gv_node){0, -1, (uint16_t)d, (uint8_t)v->piece[t][d - 1]};
        }
        gv_node *leaf = &v->nodes[path[len]];
        if (leaf->tok < 0) leaf->tok = t;
        else { /* the same piece again: chain it */
            v->tok_next[t] = v->tok_next[leaf->tok];
            v->tok_next[leaf->tok] = t;
        }
        if (len > v->max_depth) v->max_depth = len;
        plen_prev = len;
        prev = t;
    }
    for (int d = plen_prev; d > 0; d--) v->nodes[path[d]].end = v->n_nodes;
    free(path);
    free(order);
    *out = v;
    return BRISK_OK;
oom:
    free(order);
    vocab_free(v);
    return bk_fail(BRISK_ERR_NOMEM, "grammar: out of memory");
}

static pthread_mutex_t vocab_mu = PTHREAD_MUTEX_INITIALIZER;

/* The model's token trie, built on first use (the model owns it afterwards). */
static brisk_status vocab_get(const brisk_model *cm, const grammar_vocab **out) {
    brisk_model *m = (brisk_model *)cm; /* a cache: logically const */
    brisk_status st = BRISK_OK;
    pthread_mutex_lock(&vocab_mu);
    if (!m->grammar_vocab) {
        grammar_vocab *v = NULL;
        st = vocab_build(m, &v);
        if (st == BRISK_OK) {
            m->grammar_vocab = v;
            m->grammar_vocab_free = vocab_free;
        }
    }
    *out = m->grammar_vocab;
    pthread_mutex_unlock(&vocab_mu);
    return st;
}

/* ---- stacks and states ---------------------------------------------------- */

typedef struct gnode {
    int32_t pos;  /* element index */
    int32_t next; /* the stack below, 0: empty */
} gnode;

typedef struct gstate {
    uint32_t off, n;  /* stack ids sset[off .. off + n), sorted */
    uint32_t val;     /* bits of an unfinished UTF-8 character */
    uint8_t rem, len; /* continuation bytes still due; the character's length */
    bool accept;      /* complete here */
    int32_t *trans;   /* (256) next state, -1 dead, -2 not computed yet; NULL: none yet */
    uint32_t *mask;   /* ((n_vocab + 31) / 32) allowed tokens, NULL: not computed */
    int n_allowed;
} gstate;

struct brisk_grammar {
    gram_rules *r;
    const grammar_vocab *voc; /* NULL without a model */
    int *alt_off, *alts;      /* alternatives of rule i: alts[alt_off[i] .. alt_off[i + 1]) */
    gnode *nodes;             /* (n_nodes, cap_nodes) node 0 is the empty stack */
    uint32_t *mark;           /* (cap_nodes) expansion epoch per node */
    int n_nodes, cap_nodes;
    int32_t *nhash;           /* (nhcap) node id + 1 */
    int nhcap;
    gstate *states;           /* (n_states, cap_states) */
    int n_states, cap_states;
    int32_t *shash;           /* (shcap) state id + 1 */
    int shcap;
    int32_t *sset;            /* (n_sset, cap_sset) stack ids of all states */
    size_t n_sset, cap_sset;
    int32_t *tmp, *work;      /* (cap_tmp) expansion scratch */
    int n_tmp, cap_tmp;
    uint32_t epoch;
    int cur;                  /* current state */
    bool oom;
    int n_masks, masks_built, mask_hits;
    int32_t *walk;            /* (voc->max_depth + 1) states along the trie path */
    /* Lazy (brisk_grammar_set_triggers): while waiting, nothing is constrained and the text is
     * scanned for the triggers outside skip_open..skip_close spans. */
    const brisk_model *model; /* to spell tokens (special ones too) while waiting */
    bool waiting, skipping;
    char **trig;              /* (n_trig) owned trigger words */
    size_t *trig_len;         /* (n_trig) */
    int n_trig;
    char *skip[2];            /* skip_open, skip_close (owned; NULL: no spans) */
    size_t skip_len[2];
    size_t keep;              /* bytes of the longest trigger or skip_open, less one: the tail that may start one */
    char *win;                /* (n_win, cap_win) unscanned tail of the text */
    size_t n_win, cap_win;
};

static uint32_t mix(uint32_t h, uint32_t x) {
    h ^= x + 0x9E3779B9u + (h << 6) + (h >> 2);
    return h;
}

static bool grow_arr(void **p, int *cap, int need, size_t sz) {
    if (need <= *cap) return true;
    int nc = *cap ? *cap : 64;
    while (nc < need) nc *= 2;
    void *q = realloc(*p, (size_t)nc * sz);
    if (!q) return false;
    *p = q;
    *cap = nc;
    return true;
}

/* Rehashes an open-addressing table of ids + 1 holding n entries so one more fits at half load. */
static bool rehash(int32_t **tab, int *cap, int n, uint32_t (*hash)(const brisk_grammar *, int), const brisk_grammar *g) {
    if (*cap >= 2 * (n + 1)) return true;
    int nc = *cap ? *cap * 2 : 1024;
    while (nc < 2 * (n + 1)) nc *= 2;
    int32_t *t = calloc((size_t)nc, sizeof *t);
    if (!t) return false;
    for (int i = 0; i < n; i++) {
        uint32_t k = hash(g, i) & (uint32_t)(nc - 1);
        while (t[k]) k = (k + 1) & (uint32_t)(nc - 1);
        t[k] = i + 1;
    }
    free(*tab);
    *tab = t;
    *cap = nc;
    return true;
}

static uint32_t node_hash(const brisk_grammar *g, int i) { return mix((uint32_t)g->nodes[i].pos, (uint32_t)g->nodes[i].next); }

/* The interned stack (pos, next); -1 on out-of-memory. */
static int32_t node_get(brisk_grammar *g, int32_t pos, int32_t next) {
    if (!rehash(&g->nhash, &g->nhcap, g->n_nodes, node_hash, g)) return g->oom = true, -1;
    uint32_t m = (uint32_t)g->nhcap - 1, k = mix((uint32_t)pos, (uint32_t)next) & m;
    for (; g->nhash[k]; k = (k + 1) & m) {
        const gnode *n = &g->nodes[g->nhash[k] - 1];
        if (n->pos == pos && n->next == next) return g->nhash[k] - 1;
    }
    int cap = g->cap_nodes;
    if (!grow_arr((void **)&g->nodes, &g->cap_nodes, g->n_nodes + 1, sizeof *g->nodes)) return g->oom = true, -1;
    if (g->cap_nodes != cap) {
        uint32_t *mk = realloc(g->mark, (size_t)g->cap_nodes * sizeof *mk);
        if (!mk) return g->oom = true, -1;
        memset(mk + cap, 0, (size_t)(g->cap_nodes - cap) * sizeof *mk);
        g->mark = mk;
    }
    g->nodes[g->n_nodes] = (gnode){pos, next};
    g->nhash[k] = g->n_nodes + 1;
    return g->n_nodes++;
}

static uint32_t set_hash(const int32_t *s, uint32_t n, uint32_t val, uint32_t rem) {
    uint32_t h = mix(val, rem);
    for (uint32_t i = 0; i < n; i++) h = mix(h, (uint32_t)s[i]);
    return h;
}

static uint32_t state_hash(const brisk_grammar *g, int i) {
    const gstate *s = &g->states[i];
    return set_hash(g->sset + s->off, s->n, s->val, (uint32_t)s->rem << 8 | s->len);
}

static int cmp_i32(const void *a, const void *b) {
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    return (x > y) - (x < y);
}

/* The interned state of stacks s (n, sorted unique) and a partial character; -1 on OOM. */
static int state_get(brisk_grammar *g, const int32_t *s, uint32_t n, uint32_t val, uint8_t rem, uint8_t len) {
    if (!rehash(&g->shash, &g->shcap, g->n_states, state_hash, g)) return g->oom = true, -1;
    uint32_t m = (uint32_t)g->shcap - 1, k = set_hash(s, n, val, (uint32_t)rem << 8 | len) & m;
    for (; g->shash[k]; k = (k + 1) & m) {
        const gstate *t = &g->states[g->shash[k] - 1];
        if (t->n == n && t->val == val && t->rem == rem && t->len == len &&
            !memcmp(g->sset + t->off, s, n * sizeof *s))
            return g->shash[k] - 1;
    }
    if (!grow_arr((void **)&g->states, &g->cap_states, g->n_states + 1, sizeof *g->states)) return g->oom = true, -1;
    if (g->n_sset + n > g->cap_sset) { /* s may point into sset (a partial character's state) */
        ptrdiff_t inside = g->sset && s >= g->sset && s < g->sset + g->n_sset ? s - g->sset : -1;
        size_t nc = g->cap_sset ? g->cap_sset : 1024;
        while (nc < g->n_sset + n) nc *= 2;
        int32_t *q = realloc(g->sset, nc * sizeof *q);
        if (!q) return g->oom = true, -1;
        g->sset = q;
        g->cap_sset = nc;
        if (inside >= 0) s = g->sset + inside;
    }
    if (s != g->sset + g->n_sset) memmove(g->sset + g->n_sset, s, n * sizeof *s);
    gstate *t = &g->states[g->n_states];
    *t = (gstate){.off = (uint32_t)g->n_sset, .n = n, .val = val, .rem = rem, .len = len};
    t->accept = rem == 0 && n > 0 && g->sset[g->n_sset] == 0; /* sorted: the empty stack first */
    g->n_sset += n;
    g->shash[k] = g->n_states + 1;
    return g->n_states++;
}

/* Expands the stacks pushed on g->work into g->tmp (tops all GE_CLASS, or the empty stack). */
static bool expand(brisk_grammar *g, int n_work) {
    const gram_elem *el = g->r->elems;
    while (n_work > 0) {
        int32_t k = g->work[--n_work];
        if (g->mark[k] == g->epoch) continue;
        g->mark[k] = g->epoch;
        if (k == 0 || el[g->nodes[k].pos].type == GE_CLASS) {
            if (g->n_tmp >= MAX_STACKS) return false;
            g->tmp[g->n_tmp++] = k;
            continue;
        }
        /* GE_REF: each alternative of the rule, then what follows the reference */
        gnode nd = g->nodes[k];
        int32_t cont = nd.pos + 1, tail = nd.next;
        if (el[cont].type == GE_CLASS || el[cont].type == GE_REF) /* a finished continuation is not pushed */
            if ((tail = node_get(g, cont, nd.next)) < 0) return false;
        uint32_t rule = el[nd.pos].val;
        for (int a = g->alt_off[rule]; a < g->alt_off[rule + 1]; a++) {
            int32_t s = tail, at = g->alts[a];
            if (el[at].type == GE_CLASS || el[at].type == GE_REF)
                if ((s = node_get(g, at, tail)) < 0) return false;
            if (n_work >= g->cap_tmp) return false;
            g->work[n_work++] = s;
        }
    }
    return true;
}

/* Stack k after its top element (a matched class). */
static int32_t stack_pop(brisk_grammar *g, int32_t k) {
    gnode nd = g->nodes[k];
    gram_etype t = g->r->elems[nd.pos + 1].type;
    return t == GE_CLASS || t == GE_REF ? node_get(g, nd.pos + 1, nd.next) : nd.next;
}

/* Whether class c may match some code point of [lo, hi]. */
static bool class_may_match(const gram_rules *r, const gram_class *c, uint32_t lo, uint32_t hi) {
    if (c->n == 0) return c->neg;
    const uint32_t *rg = r->ranges + 2 * c->off;
    if (!c->neg) {
        for (uint32_t j = 0; j < c->n; j++)
            if (rg[2 * j] <= hi && rg[2 * j + 1] >= lo) return true;
        return false;
    }
    for (uint32_t x = lo;;) { /* negated: is some point of [lo, hi] outside every range? */
        bool moved = false;
        for (uint32_t j = 0; j < c->n; j++)
            if (x >= rg[2 * j] && x <= rg[2 * j + 1]) {
                if (rg[2 * j + 1] >= hi) return false;
                x = rg[2 * j + 1] + 1;
                moved = true;
            }
        if (!moved) return true;
    }
}

/* Whether some live stack of state s may match a code point in [lo, hi]. */
static bool state_may_match(const brisk_grammar *g, const gstate *s, uint32_t lo, uint32_t hi) {
    const gram_rules *r = g->r;
    for (uint32_t i = 0; i < s->n; i++) {
        int32_t k = g->sset[s->off + i];
        if (k && class_may_match(r, &r->classes[r->elems[g->nodes[k].pos].val], lo, hi)) return true;
    }
    return false;
}

/* The state after code point cp from state si; -1 dead or out of memory. */
static int advance_cp(brisk_grammar *g, int si, uint32_t cp) {
    const gram_rules *r = g->r;
    g->n_tmp = 0;
    if (++g->epoch == 0) {
        memset(g->mark, 0, (size_t)g->cap_nodes * sizeof *g->mark);
        g->epoch = 1;
    }
    for (uint32_t i = 0; i < g->states[si].n; i++) {
        int32_t k = g->sset[g->states[si].off + i];
        if (k == 0 || !gram_class_match(r, &r->classes[r->elems[g->nodes[k].pos].val], cp)) continue;
        int32_t s = stack_pop(g, k);
        if (s < 0) return -1;
        g->work[0] = s;
        if (!expand(g, 1)) return -1;
    }
    if (g->n_tmp == 0) return -1;
    qsort(g->tmp, (size_t)g->n_tmp, sizeof *g->tmp, cmp_i32);
    return state_get(g, g->tmp, (uint32_t)g->n_tmp, 0, 0, 0);
}

/* The state after byte b from state si (memoised); -1: the byte leaves the grammar. */
static int step(brisk_grammar *g, int si, uint8_t b) {
    gstate *s = &g->states[si];
    if (s->trans && s->trans[b] != -2) return s->trans[b];
    if (!s->trans) {
        if (!(s->trans = malloc(256 * sizeof *s->trans))) return g->oom = true, -1;
        for (int i = 0; i < 256; i++) s->trans[i] = -2;
    }
    int res = -1;
    uint32_t val;
    uint8_t rem, len;
    if (s->rem) {
        if ((b & 0xC0) != 0x80) goto done;
        val = s->val << 6 | (b & 0x3Fu), rem = (uint8_t)(s->rem - 1), len = s->len;
    } else if (b < 0x80) {
        val = b, rem = 0, len = 1;
    } else if (b >= 0xC2 && b <= 0xDF) val = b & 0x1Fu, rem = 1, len = 2;
    else if (b >= 0xE0 && b <= 0xEF) val = b & 0x0Fu, rem = 2, len = 3;
    else if (b >= 0xF0 && b <= 0xF4) val = b & 0x07u, rem = 3, len = 4;
    else goto done;
    static const uint32_t min_cp[5] = {0, 0, 0x80, 0x800, 0x10000};
    uint32_t lo = val << (6 * rem), hi = lo | ((1u << (6 * rem)) - 1);
    if (hi < min_cp[len] || lo > 0x10FFFF || (len == 3 && lo >= 0xD800 && hi <= 0xDFFF)) goto done;
    if (rem) {
        if (lo < min_cp[len]) lo = min_cp[len];
        if (hi > 0x10FFFF) hi = 0x10FFFF;
        if (state_may_match(g, s, lo, hi))
            res = state_get(g, g->sset + s->off, s->n, val, rem, len);
    } else res = advance_cp(g, si, val);
done:
    s = &g->states[si]; /* the table may have moved */
    if (!g->oom) s->trans[b] = res;
    return res;
}

/* ---- grammars ----------------------------------------------------------- */

/* Drops every cached node and state except the current state's stacks. */
static bool compact(brisk_grammar *g) {
    const gstate *s = &g->states[g->cur];
    size_t total = 0;
    for (uint32_t i = 0; i < s->n; i++)
        for (int32_t k = g->sset[s->off + i]; k; k = g->nodes[k].next) total++;
    int32_t *pos = malloc((total + 1) * sizeof *pos), *cnt = malloc((s->n + 1) * sizeof *cnt);
    if (!pos || !cnt) {
        free(pos), free(cnt);
        return false;
    }
    uint32_t ns = s->n, val = s->val;
    uint8_t rem = s->rem, len = s->len;
    size_t at = 0;
    for (uint32_t i = 0; i < ns; i++) {
        cnt[i] = 0;
        for (int32_t k = g->sset[s->off + i]; k; k = g->nodes[k].next) pos[at++] = g->nodes[k].pos, cnt[i]++;
    }
    for (int i = 0; i < g->n_states; i++) free(g->states[i].trans), free(g->states[i].mask);
    g->n_states = 0, g->n_nodes = 1, g->n_sset = 0, g->n_masks = 0;
    memset(g->nhash, 0, (size_t)g->nhcap * sizeof *g->nhash);
    memset(g->shash, 0, (size_t)g->shcap * sizeof *g->shash);
    at = 0;
    g->n_tmp = 0;
    for (uint32_t i = 0; i < ns; i++) { /* rebuild each stack from its bottom */
        int32_t k = 0;
        for (int j = cnt[i] - 1; j >= 0 && k >= 0; j--) k = node_get(g, pos[at + (size_t)j], k);
        at += (size_t)cnt[i];
        g->tmp[g->n_tmp++] = k;
    }
    free(pos), free(cnt);
    qsort(g->tmp, (size_t)g->n_tmp, sizeof *g->tmp, cmp_i32);
    g->cur = g->oom ? -1 : state_get(g, g->tmp, (uint32_t)g->n_tmp, val, rem, len);
    return g->cur >= 0;
}

void brisk_grammar_free(brisk_grammar *g) {
    if (!g) return;
    for (int i = 0; i < g->n_states; i++) free(g->states[i].trans), free(g->states[i].mask);
    gram_rules_free(g->r);
    free(g->alt_off), free(g->alts), free(g->nodes), free(g->mark), free(g->nhash);
    free(g->states), free(g->shash), free(g->sset), free(g->tmp), free(g->work), free(g->walk);
    for (int i = 0; i < g->n_trig; i++) free(g->trig[i]);
    free(g->trig), free(g->trig_len), free(g->skip[0]), free(g->skip[1]);
    free(g->win);
    free(g);
}

brisk_status grammar_from_rules(const brisk_model *model, gram_rules *rules, brisk_grammar **out) {
    *out = NULL;
    brisk_grammar *g = calloc(1, sizeof *g);
    if (!g) {
        gram_rules_free(rules);
        return bk_fail(BRISK_ERR_NOMEM, "grammar: out of memory");
    }
    g->r = rules;
    g->model = model;
    if (model) {
        brisk_status st = vocab_get(model, &g->voc);
        if (st != BRISK_OK) {
            brisk_grammar_free(g);
            return st;
        }
    }
    const gram_elem *el = rules->elems;
    g->alt_off = malloc(((size_t)rules->n_rules + 1) * sizeof *g->alt_off);
    g->alts = malloc(((size_t)rules->n_elems + 1) * sizeof *g->alts);
    g->cap_tmp = MAX_STACKS + rules->n_elems + 16;
    g->tmp = malloc((size_t)g->cap_tmp * sizeof *g->tmp);
    g->work = malloc((size_t)g->cap_tmp * sizeof *g->work);
    g->walk = malloc(((size_t)(g->voc ? g->voc->max_depth : 0) + 1) * sizeof *g->walk);
    if (!g->alt_off || !g->alts || !g->tmp || !g->work || !g->walk) goto oom;
    int na = 0;
    for (int i = 0; i < rules->n_rules; i++) {
        g->alt_off[i] = na;
        g->alts[na++] = rules->rule_start[i];
        for (int e = rules->rule_start[i]; el[e].type != GE_END; e++)
            if (el[e].type == GE_ALT) g->alts[na++] = e + 1;
    }
    g->alt_off[rules->n_rules] = na;
    g->n_nodes = 1; /* the empty stack */
    g->cap_nodes = 0;
    if (!grow_arr((void **)&g->nodes, &g->cap_nodes, 1024, sizeof *g->nodes) ||
        !(g->mark = calloc((size_t)g->cap_nodes, sizeof *g->mark)))
        goto oom;
    g->nodes[0] = (gnode){-1, 0};
    g->epoch = 1;
    int nw = 0, root = rules->root; /* the start: every alternative of the root rule */
    for (int a = g->alt_off[root]; a < g->alt_off[root + 1]; a++) {
        int32_t at = g->alts[a], k = 0;
        if (el[at].type == GE_CLASS || el[at].type == GE_REF) k = node_get(g, at, 0);
        if (k < 0) goto oom;
        g->work[nw++] = k;
    }
    if (!expand(g, nw)) {
        bool oom = g->oom;
        brisk_grammar_free(g);
        return bk_fail(oom ? BRISK_ERR_NOMEM : BRISK_ERR_INVALID_ARG,
                       "grammar: more than %d parses at the start: too ambiguous", MAX_STACKS);
    }
    qsort(g->tmp, (size_t)g->n_tmp, sizeof *g->tmp, cmp_i32);
    if ((g->cur = state_get(g, g->tmp, (uint32_t)g->n_tmp, 0, 0, 0)) < 0) goto oom;
    *out = g;
    return BRISK_OK;
oom:
    brisk_grammar_free(g);
    return bk_fail(BRISK_ERR_NOMEM, "grammar: out of memory");
}

/* The state after bytes s from state si, or -1. */
static int run_bytes(brisk_grammar *g, int si, const char *s, size_t n) {
    for (size_t i = 0; i < n && si >= 0; i++) si = step(g, si, (uint8_t)s[i]);
    return si;
}

/* Rebuilds the tables when they have grown past their soft limits (the current state survives). */
static void maybe_compact(brisk_grammar *g) {
    if (g->n_nodes > SOFT_NODES || g->n_states > SOFT_STATES) compact(g);
}

bool grammar_accept_bytes(brisk_grammar *g, const char *s, size_t n) {
    int si = run_bytes(g, g->cur, s, n);
    if (si < 0) return false;
    g->cur = si;
    maybe_compact(g);
    return g->cur >= 0;
}

bool grammar_would_accept(brisk_grammar *g, const char *s, size_t n) { return run_bytes(g, g->cur, s, n) >= 0; }

bool grammar_is_complete(const brisk_grammar *g) { return g->waiting || g->states[g->cur].accept; }
bool brisk_grammar_is_complete(const brisk_grammar *g) { return g && grammar_is_complete(g); }

brisk_status brisk_grammar_set_triggers(brisk_grammar *g, const char *const *triggers, int n_triggers,
                                        const char *skip_open, const char *skip_close, bool skipping) {
    bool ok = g && triggers && n_triggers > 0 && !skip_open == !skip_close &&
              (!skip_open || (skip_open[0] && skip_close[0]));
    for (int i = 0; ok && i < n_triggers; i++) ok = triggers[i] && triggers[i][0];
    if (!ok)
        return bk_fail(BRISK_ERR_INVALID_ARG,
                       "grammar trigger: one or more non-empty triggers, and both skip words or neither");
    if (g->waiting || g->trig) return bk_fail(BRISK_ERR_INVALID_ARG, "grammar trigger: already set");
    /* The grammar must read each trigger first: its text is where the constrained part starts. */
    for (int i = 0; i < n_triggers; i++)
        if (!grammar_would_accept(g, triggers[i], strlen(triggers[i])))
            return bk_fail(BRISK_ERR_INVALID_ARG, "grammar trigger: the grammar does not start with '%s'", triggers[i]);
    char **trig = calloc((size_t)n_triggers, sizeof *trig);
    size_t *len = malloc((size_t)n_triggers * sizeof *len), keep = skip_open ? strlen(skip_open) : 0;
    char *skip[2] = {skip_open ? strdup(skip_open) : NULL, skip_close ? strdup(skip_close) : NULL};
    ok = trig && len && !skip_open == !skip[0] && !skip_close == !skip[1];
    for (int i = 0; ok && i < n_triggers; i++) {
        len[i] = strlen(triggers[i]);
        if (len[i] > keep) keep = len[i];
        ok = (trig[i] = strdup(triggers[i])) != NULL;
    }
    if (!ok) {
        for (int i = 0; trig && i < n_triggers; i++) free(trig[i]);
        free(trig), free(len), free(skip[0]), free(skip[1]);
        return bk_fail(BRISK_ERR_NOMEM, "grammar: out of memory");
    }
    g->trig = trig, g->trig_len = len, g->n_trig = n_triggers;
    g->skip[0] = skip[0], g->skip[1] = skip[1];
    for (int i = 0; i < 2; i++) g->skip_len[i] = skip[i] ? strlen(skip[i]) : 0;
    g->keep = keep - 1;
    g->waiting = true;
    g->skipping = skipping && skip_open;
    return BRISK_OK;
}

bool brisk_grammar_waiting(const brisk_grammar *g) { return g && g->waiting; }

/* While waiting: appends a token's text and scans it. At the earliest trigger the grammar starts, fed
 * the text from that trigger on (only the trigger when the rest of the token leaves it). */
static brisk_status lazy_accept(brisk_grammar *g, brisk_token tok) {
    char buf[1024];
    size_t len = 0;
    if (!g->model || brisk_token_to_piece(g->model, tok, true, buf, sizeof buf, &len) != BRISK_OK || len == 0)
        return BRISK_OK; /* no text (an end-of-generation token): nothing to scan */
    if (g->n_win + len > g->cap_win) {
        size_t cap = (g->n_win + len) * 2;
        char *p = realloc(g->win, cap);
        if (!p) return bk_fail(BRISK_ERR_NOMEM, "grammar: out of memory");
        g->win = p, g->cap_win = cap;
    }
    memcpy(g->win + g->n_win, buf, len);
    g->n_win += len;
    size_t at = 0, keep = 0;
    for (;;) {
        const char *w = g->win + at;
        size_t n = g->n_win - at;
        if (g->skipping) {
            const char *c = memmem(w, n, g->skip[1], g->skip_len[1]);
            if (!c) {
                keep = g->skip_len[1] - 1;
                break;
            }
            at = (size_t)(c - g->win) + g->skip_len[1];
            g->skipping = false;
            continue;
        }
        /* the earliest trigger; of two starting there (one a prefix of the other) the longer */
        const char *t = NULL;
        int ti = -1;
        for (int i = 0; i < g->n_trig; i++) {
            const char *h = memmem(w, n, g->trig[i], g->trig_len[i]);
            if (h && (!t || h < t || (h == t && g->trig_len[i] > g->trig_len[ti]))) t = h, ti = i;
        }
        const char *o = g->skip[0] ? memmem(w, n, g->skip[0], g->skip_len[0]) : NULL;
        if (o && (!t || o < t)) {
            at = (size_t)(o - g->win) + g->skip_len[0];
            g->skipping = true;
            continue;
        }
        if (t) {
            size_t from = (size_t)(t - g->win);
            g->waiting = false;
            if (!grammar_accept_bytes(g, t, g->n_win - from) && !grammar_accept_bytes(g, g->trig[ti], g->trig_len[ti]))
                return bk_fail(BRISK_ERR_NOMEM, "grammar: out of memory");
            g->n_win = 0;
            return BRISK_OK;
        }
        keep = g->keep;
        break;
    }
    /* only a tail that could be the start of a word stays */
    size_t rest = g->n_win - at, k = rest < keep ? rest : keep;
    memmove(g->win, g->win + g->n_win - k, k);
    g->n_win = k;
    return BRISK_OK;
}

brisk_status brisk_grammar_accept(brisk_grammar *g, brisk_token tok) {
    if (!g || !g->voc || tok < 0 || tok >= g->voc->n_vocab)
        return bk_fail(BRISK_ERR_INVALID_ARG, "grammar: token %d out of range or no model", (int)tok);
    if (g->waiting) return lazy_accept(g, tok);
    const grammar_vocab *v = g->voc;
    if (!v->piece[tok]) {
        for (int i = 0; i < v->n_eog; i++)
            if (v->eog[i] == tok && grammar_is_complete(g)) return BRISK_OK;
        return bk_fail(BRISK_ERR_INVALID_ARG, "grammar: token %d is not allowed here", (int)tok);
    }
    if (!grammar_accept_bytes(g, v->piece[tok], v->plen[tok]))
        return bk_fail(BRISK_ERR_INVALID_ARG, "grammar: token %d leaves the grammar", (int)tok);
    return BRISK_OK;
}

/* Walks the trie from state si and sets the bit of every token that keeps the text in the grammar. */
static int build_mask(brisk_grammar *g, int si, uint32_t *mask) {
    const grammar_vocab *v = g->voc;
    const gv_node *nd = v->nodes;
    int n = 0;
    g->walk[0] = si;
    for (int i = 0; i < v->n_nodes;) {
        int s = step(g, g->walk[nd[i].depth - 1], nd[i].byte);
        if (s < 0) {
            if (g->oom) return -1;
            i = nd[i].end;
            continue;
        }
        g->walk[nd[i].depth] = s;
        for (int32_t t = nd[i].tok; t >= 0; t = v->tok_next[t]) mask[t >> 5] |= 1u << (t & 31), n++;
        i++;
    }
    if (g->states[si].accept)
        for (int i = 0; i < v->n_eog; i++) mask[v->eog[i] >> 5] |= 1u << (v->eog[i] & 31), n++;
    return n;
}

const uint32_t *grammar_mask(brisk_grammar *g, int *n_allowed) {
    *n_allowed = 0;
    if (!g->voc || g->waiting) return NULL; /* waiting for the trigger: nothing is constrained */
    gstate *s = &g->states[g->cur];
    if (s->mask) {
        g->mask_hits++;
        *n_allowed = s->n_allowed;
        return s->mask;
    }
    if (g->n_masks >= MAX_MASKS) { /* simple and bounded: drop them all */
        for (int i = 0; i < g->n_states; i++) free(g->states[i].mask), g->states[i].mask = NULL;
        g->n_masks = 0;
    }
    size_t words = ((size_t)g->voc->n_vocab + 31) / 32;
    uint32_t *mask = calloc(words, sizeof *mask);
    if (!mask) return NULL;
    int n = build_mask(g, g->cur, mask);
    if (n < 0) {
        free(mask);
        return NULL;
    }
    s = &g->states[g->cur];
    s->mask = mask;
    s->n_allowed = n;
    g->n_masks++;
    g->masks_built++;
    *n_allowed = n;
    return mask;
}

int grammar_n_vocab(const brisk_grammar *g) { return g->voc ? g->voc->n_vocab : 0; }

brisk_token grammar_fallback_token(const brisk_grammar *g) {
    return g->voc && g->voc->n_eog ? g->voc->eog[0] : 0;
}

void grammar_stats(const brisk_grammar *g, int *n_states, int *n_masks_built, int *n_mask_hits) {
    *n_states = g->n_states;
    *n_masks_built = g->masks_built;
    *n_mask_hits = g->mask_hits;
}

brisk_status brisk_grammar_new(const brisk_model *model, const char *gbnf, const char *root, brisk_grammar **out) {
    *out = NULL;
    if (!gbnf) return bk_fail(BRISK_ERR_INVALID_ARG, "grammar: no text");
    gram_rules *r = NULL;
    BK_TRY(gram_parse(gbnf, strlen(gbnf), root, &r));
    return grammar_from_rules(model, r, out);
}

brisk_status brisk_json_schema_to_gbnf(const char *schema, char **gbnf) {
    *gbnf = NULL;
    if (!schema) {
        if (!(*gbnf = strdup(json_object_gbnf()))) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
        return BRISK_OK;
    }
    return json_schema_to_gbnf(schema, strlen(schema), gbnf);
}

brisk_status brisk_grammar_from_json_schema(const brisk_model *model, const char *schema, brisk_grammar **out) {
    *out = NULL;
    char *text = NULL;
    BK_TRY(brisk_json_schema_to_gbnf(schema, &text));
    brisk_status st = brisk_grammar_new(model, text, "root", out);
    if (st != BRISK_OK) bk_wrap(st, "the grammar of the schema");
    free(text);
    return st;
}
