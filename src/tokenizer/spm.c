/* spm.c — SentencePiece-style encoding as llama.cpp's llm_tokenizer_spm does
 * it: start from UTF-8 characters, repeatedly merge the adjacent pair whose
 * concatenation is the highest-scoring vocab entry, then map each final
 * piece to its id or, failing that, to byte tokens <0xXX>. The caller has
 * already escaped spaces to U+2581 and added the prefix space. */
#include <stdio.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/merge_heap.h"
#include "tokenizer/tok_internal.h"

static int32_t find(const tokenizer *t, const char *s, size_t len) {
    return tok_strmap_find(&t->text_map, &t->text, s, len);
}

static bool try_bigram(const tokenizer *t, const merge_sym *sym, int32_t l, int32_t r,
                       merge_heap *h) {
    if (l < 0 || r < 0) return true;
    size_t n = sym[l].n + sym[r].n;
    int32_t id = find(t, sym[l].text, n);
    if (id < 0) return true;
    return merge_heap_push(h, (merge_item){t->score[id], l, r, n});
}

/* llama.cpp's byte_to_token: "<0xXX>", else the byte itself as a token. */
static int32_t byte_token(const tokenizer *t, uint8_t ch) {
    char buf[8];
    snprintf(buf, sizeof buf, "<0x%02X>", ch);
    int32_t id = find(t, buf, 6);
    if (id < 0) id = find(t, (const char *)&ch, 1);
    return id >= 0 ? id : t->unk; /* llama.cpp throws when neither exists */
}

brisk_status spm_encode(const tokenizer *t, const char *text, size_t len, tok_ids *out) {
    if (len == 0) return BRISK_OK;
    merge_sym *sym = malloc(len * sizeof *sym);
    merge_heap h = {0};
    brisk_status s = BRISK_OK;
    if (!sym) return bk_fail(BRISK_ERR_NOMEM, "spm: out of memory");
    int32_t n = 0;
    for (size_t off = 0; off < len; n++) {
        size_t cl = tok_utf8_len((unsigned char)text[off]);
        if (cl > len - off) cl = len - off;
        sym[n] = (merge_sym){n - 1, off + cl == len ? -1 : n + 1, text + off, cl, -1};
        off += cl;
    }
    bool ok = true;
    for (int32_t i = 1; i < n && ok; i++) ok = try_bigram(t, sym, i - 1, i, &h);
    while (ok && h.n) {
        merge_item b = merge_heap_pop(&h);
        merge_sym *l = &sym[b.left], *r = &sym[b.right];
        if (l->n == 0 || r->n == 0 || l->n + r->n != b.size) continue;
        l->n += r->n;
        r->n = 0;
        l->next = r->next;
        if (r->next >= 0) sym[r->next].prev = b.left;
        ok = try_bigram(t, sym, l->prev, b.left, &h) && try_bigram(t, sym, b.left, l->next, &h);
    }
    if (!ok) s = bk_fail(BRISK_ERR_NOMEM, "spm: out of memory");
    /* Merged pieces are vocab entries by construction; unmerged characters
     * that are not become bytes (llama.cpp's rev_merge path never fires). */
    for (int32_t i = 0; s == BRISK_OK && n > 0 && i != -1; i = sym[i].next) {
        int32_t id = find(t, sym[i].text, sym[i].n);
        if (id >= 0) {
            s = tok_ids_push(out, id);
            continue;
        }
        for (size_t j = 0; j < sym[i].n && s == BRISK_OK; j++) {
            int32_t bid = byte_token(t, (uint8_t)sym[i].text[j]);
            if (bid >= 0) s = tok_ids_push(out, bid);
        }
    }
    free(sym);
    free(h.v);
    return s;
}
