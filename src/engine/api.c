/* api.c — the public tokenizer entry points of brisk.h, over tokenizer.h. */
#include <stdlib.h>
#include <string.h>

#include "backend/cuda/cuda_backend.h"
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

char *brisk_model_meta_str(const brisk_model *m, const char *key) {
    const char *s = NULL;
    size_t len = 0;
    if (!m || !m->gguf || !key || gguf_get_str(m->gguf, key, &s, &len) != BRISK_OK) return NULL;
    char *copy = malloc(len + 1);
    if (!copy) return NULL;
    memcpy(copy, s, len);
    copy[len] = 0;
    return copy;
}

brisk_token brisk_token_bos(const brisk_model *m) { return tokenizer_bos(m->tok); }
brisk_token brisk_token_eos(const brisk_model *m) { return tokenizer_eos(m->tok); }
bool brisk_token_is_eog(const brisk_model *m, brisk_token t) { return tokenizer_is_eog(m->tok, t); }
bool brisk_add_bos(const brisk_model *m) { return tokenizer_add_bos(m->tok); }
brisk_token brisk_token_fim(const brisk_model *m, int kind) { return tokenizer_fim(m->tok, kind); }
int brisk_n_vocab(const brisk_model *m) { return m->vocab_only ? tokenizer_n_vocab(m->tok) : m->hp.n_vocab; }

/* Length of a valid UTF-8 sequence at s (n bytes available): >0 valid length,
 * 0 incomplete (could still become valid), -1 invalid lead or continuation. */
static int utf8_valid_prefix(const unsigned char *s, size_t n) {
    unsigned char c = s[0];
    int len;
    unsigned lo = 0x80, hi = 0xBF; /* allowed range of the second byte */
    if (c < 0x80) return 1;
    if (c >= 0xC2 && c <= 0xDF) len = 2;
    else if (c >= 0xE0 && c <= 0xEF) {
        len = 3;
        if (c == 0xE0) lo = 0xA0;
        if (c == 0xED) hi = 0x9F; /* no surrogates */
    } else if (c >= 0xF0 && c <= 0xF4) {
        len = 4;
        if (c == 0xF0) lo = 0x90;
        if (c == 0xF4) hi = 0x8F;
    } else return -1;
    for (int i = 1; i < len; i++) {
        if ((size_t)i >= n) return 0;
        unsigned b = s[i];
        if (i == 1 ? (b < lo || b > hi) : (b < 0x80 || b > 0xBF)) return -1;
    }
    return len;
}

brisk_status brisk_detok_push(const brisk_model *m, brisk_detok *st, brisk_token tok, char *buf,
                              size_t cap, size_t *len) {
    char piece[1024];
    size_t plen = 0;
    *len = 0;
    if (cap == 0) return bk_fail(BRISK_ERR_INVALID_ARG, "brisk_detok_push: empty buffer");
    buf[0] = 0;
    BK_TRY(tokenizer_token_to_piece(m->tok, tok, false, piece, sizeof piece, &plen));
    /* Pending bytes + the new piece; complete valid sequences pass, invalid
     * bytes become U+FFFD, an incomplete tail waits for the next token. */
    unsigned char all[8 + 1024];
    size_t n = (size_t)st->n_pending, out = 0, i = 0;
    memcpy(all, st->pending, n);
    memcpy(all + n, piece, plen);
    n += plen;
    while (i < n) {
        int l = utf8_valid_prefix(all + i, n - i);
        if (l == 0) break;
        const unsigned char *src = l > 0 ? all + i : (const unsigned char *)"\xEF\xBF\xBD";
        size_t w = l > 0 ? (size_t)l : 3;
        if (out + w + 1 > cap) return bk_fail(BRISK_ERR_RANGE, "brisk_detok_push: buffer too small");
        memcpy(buf + out, src, w);
        out += w;
        i += l > 0 ? (size_t)l : 1;
    }
    buf[out] = 0;
    *len = out;
    st->n_pending = (int)(n - i);
    memcpy(st->pending, all + i, n - i);
    return BRISK_OK;
}

double brisk_gpu_bandwidth(int device) { return bk_cuda_copy_bandwidth(device); }
