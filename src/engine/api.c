/* api.c — the public tokenizer entry points of brisk.h, over tokenizer.h. */
#include <string.h>

#include "base/status.h"
#include "model/model.h"

brisk_status brisk_tokenize(const brisk_model *m, const char *text, size_t len, bool add_special,
                            bool parse_special, brisk_token *out, int64_t cap, int64_t *n_out) {
    if (!m || (!text && len)) return bk_fail(BRISK_ERR_INVALID_ARG, "brisk_tokenize: null argument");
    return tokenizer_encode(m->tok, text ? text : "", len, add_special, parse_special, out, cap, n_out);
}

brisk_status brisk_token_to_piece(const brisk_model *m, brisk_token tok, bool special, char *buf,
                                  size_t cap, size_t *len) {
    return tokenizer_token_to_piece(m->tok, tok, special, buf, cap, len);
}

brisk_token brisk_token_bos(const brisk_model *m) { return tokenizer_bos(m->tok); }
brisk_token brisk_token_eos(const brisk_model *m) { return tokenizer_eos(m->tok); }
bool brisk_token_is_eog(const brisk_model *m, brisk_token t) { return tokenizer_is_eog(m->tok, t); }
bool brisk_add_bos(const brisk_model *m) { return tokenizer_add_bos(m->tok); }
int brisk_n_vocab(const brisk_model *m) { return m->vocab_only ? tokenizer_n_vocab(m->tok) : m->hp.n_vocab; }

/* Length of the UTF-8 sequence a lead byte starts (1 for invalid bytes, which pass through). */
static int utf8_len(unsigned char c) {
    if (c < 0x80) return 1;
    if ((c & 0xE0) == 0xC0) return 2;
    if ((c & 0xF0) == 0xE0) return 3;
    if ((c & 0xF8) == 0xF0) return 4;
    return 1;
}

brisk_status brisk_detok_push(const brisk_model *m, brisk_detok *st, brisk_token tok, char *buf,
                              size_t cap, size_t *len) {
    char piece[1024];
    size_t plen = 0;
    *len = 0;
    if (cap == 0) return bk_fail(BRISK_ERR_INVALID_ARG, "brisk_detok_push: empty buffer");
    buf[0] = 0;
    BK_TRY(tokenizer_token_to_piece(m->tok, tok, false, piece, sizeof piece, &plen));
    /* Join pending bytes with the new piece, emit the longest complete prefix. */
    char all[8 + 1024];
    size_t n = (size_t)st->n_pending;
    memcpy(all, st->pending, n);
    memcpy(all + n, piece, plen);
    n += plen;
    size_t emit = 0;
    while (emit < n) {
        int l = utf8_len((unsigned char)all[emit]);
        if (emit + (size_t)l > n) break;
        emit += (size_t)l;
    }
    if (emit + 1 > cap) return bk_fail(BRISK_ERR_RANGE, "brisk_detok_push: buffer too small");
    memcpy(buf, all, emit);
    buf[emit] = 0;
    *len = emit;
    st->n_pending = (int)(n - emit);
    memcpy(st->pending, all + emit, n - emit);
    return BRISK_OK;
}
