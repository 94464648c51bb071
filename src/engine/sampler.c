/* sampler.c — token selection, in llama.cpp's default chain order:
 * penalties -> grammar mask -> top-k -> top-p -> min-p -> temperature -> draw.
 * temp <= 0 is greedy (argmax after penalties; ties go to the lowest id).
 * With a grammar (engine/grammar.h) only the tokens its mask allows stay in
 * the working set, so the chain runs over fewer candidates. */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "engine/grammar.h"

typedef struct cand {
    float logit;
    float p;
    int32_t id;
} cand;

struct brisk_sampler {
    brisk_sampler_params p;
    int n_vocab;
    cand *c;          /* (n_vocab) working set */
    int32_t *recent;  /* ring of the last repeat_last_n tokens */
    int n_recent, head;
    uint16_t *count;  /* (n_vocab) scratch occurrence counts */
    uint64_t rng[4];  /* xoshiro256** */
    brisk_grammar *grammar; /* owned, NULL: none */
};

brisk_sampler_params brisk_sampler_default_params(void) {
    brisk_sampler_params p = {.temp = 0.8f, .top_k = 40, .top_p = 0.95f, .min_p = 0.05f,
                              .repeat_penalty = 1.0f, .presence_penalty = 0.0f,
                              .frequency_penalty = 0.0f, .repeat_last_n = 64, .seed = 0xB415C};
    return p;
}

static uint64_t splitmix(uint64_t *x) {
    uint64_t z = (*x += 0x9E3779B97F4A7C15ull);
    z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
    z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
    return z ^ (z >> 31);
}

static inline uint64_t rotl(uint64_t x, int k) { return (x << k) | (x >> (64 - k)); }

static uint64_t rng_next(uint64_t s[4]) {
    uint64_t r = rotl(s[1] * 5, 7) * 9, t = s[1] << 17;
    s[2] ^= s[0];
    s[3] ^= s[1];
    s[1] ^= s[2];
    s[0] ^= s[3];
    s[2] ^= t;
    s[3] = rotl(s[3], 45);
    return r;
}

brisk_status brisk_sampler_new(const brisk_sampler_params *params, int n_vocab, brisk_sampler **out) {
    *out = NULL;
    if (n_vocab <= 0) return bk_fail(BRISK_ERR_INVALID_ARG, "sampler: n_vocab %d", n_vocab);
    brisk_sampler *s = calloc(1, sizeof *s);
    if (!s) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    s->p = params ? *params : brisk_sampler_default_params();
    if (s->p.repeat_last_n < 0) s->p.repeat_last_n = 0;
    s->n_vocab = n_vocab;
    s->c = malloc((size_t)n_vocab * sizeof *s->c);
    s->count = calloc((size_t)n_vocab, sizeof *s->count);
    s->recent = calloc((size_t)(s->p.repeat_last_n > 0 ? s->p.repeat_last_n : 1), sizeof(int32_t));
    if (!s->c || !s->count || !s->recent) {
        brisk_sampler_free(s);
        return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    uint64_t seed = s->p.seed;
    for (int i = 0; i < 4; i++) s->rng[i] = splitmix(&seed);
    *out = s;
    return BRISK_OK;
}

void brisk_sampler_free(brisk_sampler *s) {
    if (!s) return;
    free(s->c);
    free(s->count);
    free(s->recent);
    brisk_grammar_free(s->grammar);
    free(s);
}

void brisk_sampler_set_grammar(brisk_sampler *s, brisk_grammar *g) {
    if (!s) {
        brisk_grammar_free(g);
        return;
    }
    if (s->grammar != g) brisk_grammar_free(s->grammar);
    s->grammar = g;
}

void brisk_sampler_accept(brisk_sampler *s, brisk_token tok) {
    if (!s) return;
    if (s->grammar) brisk_grammar_accept(s->grammar, tok); /* a token outside the mask leaves it where it was */
    if (s->p.repeat_last_n == 0) return;
    s->recent[s->head] = tok;
    s->head = (s->head + 1) % s->p.repeat_last_n;
    if (s->n_recent < s->p.repeat_last_n) s->n_recent++;
}

static int cmp_logit_desc(const void *a, const void *b) {
    const cand *x = a, *y = b;
    if (x->logit != y->logit) return x->logit < y->logit ? 1 : -1;
    return x->id - y->id;
}

/* Moves the k largest to the front, sorted (quickselect-free: a bounded heap would
 * be faster for huge vocabularies, but top-k runs once per token on 1e5 floats). */
static void partial_sort_top(cand *c, int n, int k) {
    if (k >= n) {
        qsort(c, (size_t)n, sizeof *c, cmp_logit_desc);
        return;
    }
    /* threshold by nth_element-style partitioning on logit */
    int lo = 0, hi = n - 1;
    while (lo < hi) {
        float pivot = c[(lo + hi) / 2].logit;
        int i = lo, j = hi;
        while (i <= j) {
            while (c[i].logit > pivot) i++;
            while (c[j].logit < pivot) j--;
            if (i <= j) {
                cand t = c[i];
                c[i] = c[j];
                c[j] = t;
                i++;
                j--;
            }
        }
        if (k - 1 <= j) hi = j;
        else if (k - 1 >= i) lo = i;
        else break;
    }
    qsort(c, (size_t)k, sizeof *c, cmp_logit_desc);
}

static void apply_penalties(brisk_sampler *s) {
    const brisk_sampler_params *p = &s->p;
    if (s->n_recent == 0 ||
        (p->repeat_penalty == 1.0f && p->presence_penalty == 0.0f && p->frequency_penalty == 0.0f))
        return;
    for (int i = 0; i < s->n_recent; i++)
        if (s->recent[i] >= 0 && s->recent[i] < s->n_vocab) s->count[s->recent[i]]++;
    for (int i = 0; i < s->n_recent; i++) {
        int32_t t = s->recent[i];
        if (t < 0 || t >= s->n_vocab || s->count[t] == 0) continue;
        cand *c = &s->c[t]; /* candidates are still in id order here */
        if (c->logit <= 0) c->logit *= p->repeat_penalty;
        else c->logit /= p->repeat_penalty;
        c->logit -= (float)s->count[t] * p->frequency_penalty + p->presence_penalty;
        s->count[t] = 0; /* each distinct token once */
    }
}

brisk_token brisk_sampler_sample(brisk_sampler *s, const float *logits) {
    const brisk_sampler_params *p = &s->p;
    int n = s->n_vocab;
    for (int i = 0; i < n; i++) s->c[i] = (cand){logits[i], 0.0f, i};
    apply_penalties(s);
    if (s->grammar) {
        int n_allowed = 0;
        const uint32_t *mask = grammar_mask(s->grammar, &n_allowed);
        if (mask && n_allowed == 0) return grammar_fallback_token(s->grammar); /* a dead end: end the text */
        if (mask) { /* keep the allowed candidates, in id order */
            int k = 0, nv = grammar_n_vocab(s->grammar);
            for (int i = 0; i < n && i < nv; i++)
                if (mask[i >> 5] >> (i & 31) & 1) s->c[k++] = s->c[i];
            n = k;
        }
    }
    if (p->temp <= 0.0f) {
        int best = 0;
        for (int i = 1; i < n; i++)
            if (s->c[i].logit > s->c[best].logit) best = i;
        return s->c[best].id;
    }
    int k = p->top_k > 0 && p->top_k < n ? p->top_k : n;
    partial_sort_top(s->c, n, k);
    n = k;
    /* softmax over the survivors (sorted descending) */
    float mx = s->c[0].logit;
    double sum = 0;
    for (int i = 0; i < n; i++) sum += (s->c[i].p = expf(s->c[i].logit - mx));
    for (int i = 0; i < n; i++) s->c[i].p = (float)(s->c[i].p / sum);
    if (p->top_p < 1.0f) {
        double cum = 0;
        int keep = n;
        for (int i = 0; i < n; i++) {
            cum += s->c[i].p;
            if (cum >= p->top_p) {
                keep = i + 1;
                break;
            }
        }
        n = keep;
    }
    if (p->min_p > 0.0f) {
        float thr = s->c[0].logit + logf(p->min_p);
        int keep = 1;
        while (keep < n && s->c[keep].logit >= thr) keep++;
        n = keep;
    }
    /* temperature, then draw */
    mx = s->c[0].logit / p->temp;
    sum = 0;
    for (int i = 0; i < n; i++) sum += (s->c[i].p = expf(s->c[i].logit / p->temp - mx));
    double r = (double)(rng_next(s->rng) >> 11) * 0x1.0p-53 * sum, acc = 0;
    for (int i = 0; i < n; i++) {
        acc += s->c[i].p;
        if (r < acc) return s->c[i].id;
    }
    return s->c[n - 1].id;
}
