/* bpe.c — byte-level BPE as llama.cpp's llm_tokenizer_bpe does it: the
 * pre-tokenizer cuts the text into byte-encoded words; within a word,
 * adjacent symbols are merged lowest merge rank first; the final symbols map
 * to ids, and a symbol outside the vocab falls back to its single bytes
 * (which are silently dropped when they are not tokens either). With
 * ignore_merges (llama3) a word that is itself a vocab entry is one token. */
#include <string.h>

#include "base/status.h"
#include "tokenizer/merge_heap.h"
#include "tokenizer/tok_internal.h"

typedef struct bpe_ctx {
    const tokenizer *t;
    tok_ids *out;
    merge_sym *sym;
    size_t sym_cap;
    char *key; /* scratch for "left right" */
    size_t key_cap;
    merge_heap h;
} bpe_ctx;

static bool add_bigram(bpe_ctx *c, int32_t l, int32_t r) {
    if (l < 0 || r < 0) return true;
    const tokenizer *t = c->t;
    const merge_sym *a = &c->sym[l], *b = &c->sym[r];
    int32_t rank;
    if (a->id >= 0 && b->id >= 0) {
        rank = tok_pair_find(t, a->id, b->id);
    } else { /* a side that is not a token: only string-keyed merges can match */
        size_t kl = a->n + 1 + b->n;
        memcpy(c->key, a->text, a->n);
        c->key[a->n] = ' ';
        memcpy(c->key + a->n + 1, b->text, b->n);
        rank = tok_strmap_find(&t->merge_map, &t->merges, c->key, kl);
    }
    if (rank < 0) return true;
    return merge_heap_push(&c->h, (merge_item){-(double)rank, l, r, a->n + b->n});
}

static brisk_status bpe_word(void *ctx, const char *w, size_t len) {
    bpe_ctx *c = ctx;
    const tokenizer *t = c->t;
    int32_t id;
    if (t->ignore_merges && (id = tok_strmap_find(&t->text_map, &t->text, w, len)) >= 0)
        return tok_ids_push(c->out, id);
    if (len > c->sym_cap) {
        size_t cap = len * 2;
        merge_sym *s = realloc(c->sym, cap * sizeof *s);
        char *k = realloc(c->key, 2 * cap + 2);
        if (s) c->sym = s;
        if (k) c->key = k;
        if (!s || !k) return bk_fail(BRISK_ERR_NOMEM, "bpe: out of memory");
        c->sym_cap = cap;
    }
    merge_sym *sym = c->sym;
    int32_t n = 0;
    for (size_t off = 0; off < len; n++) {
        size_t cl = tok_utf8_len((unsigned char)w[off]);
        if (cl > len - off) cl = len - off;
        sym[n] = (merge_sym){n - 1, off + cl == len ? -1 : n + 1, w + off, cl,
                             tok_strmap_find(&t->text_map, &t->text, w + off, cl)};
        off += cl;
    }
    c->h.n = 0;
    bool ok = true;
    for (int32_t i = 1; i < n && ok; i++) ok = add_bigram(c, i - 1, i);
    while (ok && c->h.n) {
        merge_item b = merge_heap_pop(&c->h);
        merge_sym *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        l->id = tok_strmap_find(&t->text_map, &t->text, l->text, l->n);
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        ok = add_bigram(c, l->prev, b.left) && add_bigram(c, b.left, l->next);
    }
    if (!ok) return bk_fail(BRISK_ERR_NOMEM, "bpe: out of memory");
    for (int32_t i = 0; i < n; i++) {
        if (sym[i].n == 0) continue;
        id = sym[i].id;
        if (id >= 0) {
            BK_TRY(tok_ids_push(c->out, id));
            continue;
        }
        for (size_t j = 0; j < sym[i].n; j++) {
            int32_t bid = tok_strmap_find(&t->text_map, &t->text, sym[i].text + j, 1);
            if (bid >= 0) BK_TRY(tok_ids_push(c->out, bid));
        }
    }
    return BRISK_OK;
}

brisk_status bpe_encode(const tokenizer *t, const char *text, size_t len, tok_ids *out) {
    bpe_ctx c = {.t = t, .out = out};
    brisk_status s = pretok_split(t->pre, text, len, true, bpe_word, &c);
    free(c.sym);
    free(c.key);
    free(c.h.v);
    return s;
}
