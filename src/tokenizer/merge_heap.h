/* merge_heap.h — the priority queue both SPM and BPE merge loops use:
 * highest key first, ties broken by the leftmost symbol (llama.cpp's
 * llm_bigram_spm / llm_bigram_bpe comparators). BPE keys are -rank. */
#ifndef BK_MERGE_HEAP_H
#define BK_MERGE_HEAP_H
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>

typedef struct merge_item {
    double key;
    int32_t left, right;
    size_t size; /* byte length of the merged text when queued */
} merge_item;

typedef struct merge_heap {
    merge_item *v;
    size_t n, cap;
} merge_heap;

static inline bool merge_before(const merge_item *a, const merge_item *b) {
    return a->key > b->key || (a->key == b->key && a->left < b->left);
}

static inline bool merge_heap_push(merge_heap *h, merge_item it) {
    if (h->n == h->cap) {
        size_t cap = h->cap ? h->cap * 2 : 64;
        merge_item *v = realloc(h->v, cap * sizeof *v);
        if (!v) return false;
        h->v = v, h->cap = cap;
    }
    size_t i = h->n++;
    while (i > 0) {
        size_t p = (i - 1) / 2;
        if (!merge_before(&it, &h->v[p])) break;
        h->v[i] = h->v[p];
        i = p;
    }
    h->v[i] = it;
    return true;
}

static inline merge_item merge_heap_pop(merge_heap *h) {
    merge_item top = h->v[0], last = h->v[--h->n];
    size_t i = 0;
    for (;;) {
        size_t c = 2 * i + 1;
        if (c >= h->n) break;
        if (c + 1 < h->n && merge_before(&h->v[c + 1], &h->v[c])) c++;
        if (!merge_before(&h->v[c], &last)) break;
        h->v[i] = h->v[c];
        i = c;
    }
    if (h->n) h->v[i] = last;
    return top;
}

/* A symbol of the merge loop: a byte range of the text, in a linked list. */
typedef struct merge_sym {
    int32_t prev, next;
    const char *text;
    size_t n;
    int32_t id; /* BPE: token id of text[0..n), -1 if none */
} merge_sym;
#endif
