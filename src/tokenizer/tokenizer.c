/* tokenizer.c — encode (special-token partition, then SPM or BPE per text
 * fragment), token_to_piece and decode, following llama.cpp's
 * llama_vocab::impl::tokenize / token_to_piece / detokenize. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/tok_internal.h"

/* A piece of the input: raw text [off, off + len) or a special token. */
typedef struct frag {
    size_t off, len;
    int32_t token; /* -1 for raw text */
} frag;

typedef struct frag_list {
    frag *v;
    size_t n, cap;
} frag_list;

static bool frag_push(frag_list *l, frag f) {
    if (l->n == l->cap) {
        size_t cap = l->cap ? l->cap * 2 : 16;
        frag *v = realloc(l->v, cap * sizeof *v);
        if (!v) return false;
        l->v = v, l->cap = cap;
    }
    l->v[l->n++] = f;
    return true;
}

static bool is_space(char c) { return c == ' ' || (c >= '\t' && c <= '\r'); }

/* Splits every raw fragment of *in at each occurrence of special token id
 * (left to right, non-overlapping), honouring its lstrip/rstrip attributes. */
static bool partition_one(const tokenizer *t, int32_t id, const char *text, const frag_list *in,
                          frag_list *out) {
    size_t tl;
    const char *tt = tokenizer_token_text(t, id, &tl);
    uint32_t attr = t->attr[id];
    out->n = 0;
    for (size_t i = 0; i < in->n; i++) {
        frag f = in->v[i];
        if (f.token >= 0) {
            if (!frag_push(out, f)) return false;
            continue;
        }
        size_t base = f.off, blen = f.len;
        bool matched = false;
        for (;;) {
            const char *m = blen >= tl ? memmem(text + base, blen, tt, tl) : NULL;
            if (!m) {
                if (!matched || blen > 0)
                    if (!frag_push(out, (frag){base, blen, -1})) return false;
                break;
            }
            matched = true;
            size_t mo = (size_t)(m - text);
            if (mo > base) {
                size_t ll = mo - base;
                if (attr & TOK_ATTR_LSTRIP)
                    while (ll > 0 && is_space(text[base + ll - 1])) ll--;
                if (ll > 0 && !frag_push(out, (frag){base, ll, -1})) return false;
            }
            if (!frag_push(out, (frag){0, 0, id})) return false;
            size_t ro = mo + tl, rl = base + blen - ro;
            if (rl == 0) break;
            if (attr & TOK_ATTR_RSTRIP)
                while (rl > 0 && is_space(text[ro])) ro++, rl--;
            base = ro, blen = rl;
            if (blen == 0) break;
        }
    }
    return true;
}

static brisk_status encode_fragments(const tokenizer *t, const char *text, const frag_list *fl,
                                     bool add_special, tok_ids *ids) {
    brisk_status s = BRISK_OK;
    if (t->kind == TOKENIZER_SPM) {
        bool prev_special = true; /* the first fragment gets the prefix space */
        if (add_special && t->add_bos && t->bos >= 0) BK_TRY(tok_ids_push(ids, t->bos));
        char *buf = NULL;
        size_t cap = 0;
        for (size_t i = 0; i < fl->n && s == BRISK_OK; i++) {
            const frag *f = &fl->v[i];
            if (f->token >= 0) {
                s = tok_ids_push(ids, f->token);
                prev_special = true;
                continue;
            }
            size_t need = 3 * (f->len + 1);
            if (need > cap) {
                char *nb = realloc(buf, need);
                if (!nb) {
                    s = bk_fail(BRISK_ERR_NOMEM, "tokenizer: out of memory");
                    break;
                }
                buf = nb, cap = need;
            }
            size_t o = 0;
            if (t->add_space_prefix && prev_special) memcpy(buf + o, "\xe2\x96\x81", 3), o += 3;
            for (size_t k = 0; k < f->len; k++) {
                char c = text[f->off + k];
                if (c == ' ') memcpy(buf + o, "\xe2\x96\x81", 3), o += 3;
                else buf[o++] = c;
            }
            s = spm_encode(t, buf, o, ids);
            prev_special = false;
        }
        free(buf);
        if (s == BRISK_OK && add_special && t->add_eos && t->eos >= 0) s = tok_ids_push(ids, t->eos);
        return s;
    }
    if (add_special && t->add_bos && t->bos >= 0) BK_TRY(tok_ids_push(ids, t->bos));
    for (size_t i = 0; i < fl->n && s == BRISK_OK; i++) {
        const frag *f = &fl->v[i];
        s = f->token >= 0 ? tok_ids_push(ids, f->token) : bpe_encode(t, text + f->off, f->len, ids);
    }
    if (s == BRISK_OK && add_special && t->add_eos && t->eos >= 0) s = tok_ids_push(ids, t->eos);
    return s;
}

brisk_status tokenizer_encode(const tokenizer *t, const char *text, size_t len, bool add_special,
                              bool parse_special, int32_t *out, int64_t cap, int64_t *n_out) {
    *n_out = 0;
    if (!text && len) return bk_fail(BRISK_ERR_INVALID_ARG, "tokenizer_encode: NULL text");
    frag_list a = {0}, b = {0};
    tok_ids ids = {0};
    brisk_status s = BRISK_OK;
    if (len > 0 && !frag_push(&a, (frag){0, len, -1})) {
        s = bk_fail(BRISK_ERR_NOMEM, "tokenizer: out of memory");
        goto done;
    }
    for (int32_t k = 0; k < t->n_special && a.n > 0; k++) {
        int32_t id = t->special[k];
        if (!parse_special && (t->attr[id] & (TOK_ATTR_CONTROL | TOK_ATTR_UNKNOWN))) continue;
        if (!partition_one(t, id, text, &a, &b)) {
            s = bk_fail(BRISK_ERR_NOMEM, "tokenizer: out of memory");
            goto done;
        }
        frag_list tmp = a;
        a = b, b = tmp;
    }
    s = encode_fragments(t, text, &a, add_special, &ids);
    if (s != BRISK_OK) goto done;
    *n_out = ids.n;
    if (ids.n > cap) {
        if (cap > 0 && out) memcpy(out, ids.v, (size_t)cap * sizeof *out);
        s = bk_fail(BRISK_ERR_RANGE, "tokenizer_encode: %lld tokens, room for %lld",
                    (long long)ids.n, (long long)cap);
        goto done;
    }
    if (ids.n) memcpy(out, ids.v, (size_t)ids.n * sizeof *out);
done:
    free(a.v);
    free(b.v);
    free(ids.v);
    return s;
}

/* ---- decoding ---- */

typedef struct sbuf {
    char *p;
    size_t n, cap;
    bool oom;
} sbuf;

static void sbuf_put(sbuf *b, const char *s, size_t n) {
    if (b->oom || n == 0) return;
    if (b->n + n > b->cap) {
        size_t cap = b->cap ? b->cap * 2 : 64;
        while (cap < b->n + n) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) {
            b->oom = true;
            return;
        }
        b->p = p, b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
}

/* llama.cpp reads the byte of a byte token with strtol(text.substr(3, 2), 16). */
static uint8_t byte_of_token(const char *s, size_t len) {
    char h[3] = {0};
    if (len > 3) memcpy(h, s + 3, len - 3 >= 2 ? 2 : len - 3);
    return (uint8_t)strtol(h, NULL, 16);
}

/* The piece llama.cpp caches for id (as if special = true). */
static void piece_of(const tokenizer *t, int32_t id, sbuf *b) {
    size_t len;
    const char *s = tokenizer_token_text(t, id, &len);
    uint32_t a = t->attr[id];
    if (a & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED)) {
        sbuf_put(b, s, len);
    } else if (a & TOK_ATTR_NORMAL) {
        if (t->kind == TOKENIZER_SPM) {
            for (size_t i = 0; i < len; i++) {
                if (i + 3 <= len && memcmp(s + i, "\xe2\x96\x81", 3) == 0) {
                    sbuf_put(b, " ", 1);
                    i += 2;
                } else {
                    sbuf_put(b, s + i, 1);
                }
            }
        } else {
            for (size_t off = 0; off < len;) {
                uint32_t c = tok_utf8_decode(s, len, &off);
                int byte = tok_utf8_to_byte(c);
                if (byte >= 0) {
                    char ch = (char)byte;
                    sbuf_put(b, &ch, 1);
                } else { /* llama_decode_text's marker for an unmapped character */
                    char u[4], hex[16];
                    size_t ul = tok_utf8_encode(c, u);
                    sbuf_put(b, "[UNK_BYTE_0x", 12);
                    for (size_t k = 0; k < ul; k++) {
                        snprintf(hex, sizeof hex, "%02x", (unsigned char)u[k]);
                        sbuf_put(b, hex, 2);
                    }
                    sbuf_put(b, s, len);
                    sbuf_put(b, "]", 1);
                }
            }
        }
    } else if (a & TOK_ATTR_BYTE) {
        char ch = (char)byte_of_token(s, len);
        sbuf_put(b, &ch, 1);
    }
}

/* Appends the piece of id to b, skipping up to lstrip leading spaces. */
static brisk_status append_piece(const tokenizer *t, int32_t id, bool special, int lstrip, sbuf *b) {
    if (id < 0 || id >= t->n_vocab)
        return bk_fail(BRISK_ERR_INVALID_ARG, "tokenizer: token id %d out of range", (int)id);
    if (!special && (t->attr[id] & (TOK_ATTR_UNKNOWN | TOK_ATTR_CONTROL))) return BRISK_OK;
    sbuf tmp = {0};
    piece_of(t, id, &tmp);
    if (tmp.oom) {
        free(tmp.p);
        return bk_fail(BRISK_ERR_NOMEM, "tokenizer: out of memory");
    }
    size_t skip = 0;
    while ((int)skip < lstrip && skip < tmp.n && tmp.p[skip] == ' ') skip++;
    sbuf_put(b, tmp.p + skip, tmp.n - skip);
    free(tmp.p);
    return b->oom ? bk_fail(BRISK_ERR_NOMEM, "tokenizer: out of memory") : BRISK_OK;
}

static brisk_status copy_out(const sbuf *b, char *buf, size_t cap, size_t *len) {
    *len = b->n;
    if (b->n > cap) {
        if (buf && cap) memcpy(buf, b->p, cap);
        return bk_fail(BRISK_ERR_RANGE, "tokenizer: %zu bytes, room for %zu", b->n, cap);
    }
    if (b->n) memcpy(buf, b->p, b->n);
    return BRISK_OK;
}

brisk_status tokenizer_token_to_piece(const tokenizer *t, int32_t id, bool special, char *buf,
                                      size_t cap, size_t *len) {
    sbuf b = {0};
    *len = 0;
    brisk_status s = append_piece(t, id, special, 0, &b);
    if (s == BRISK_OK) s = copy_out(&b, buf, cap, len);
    free(b.p);
    return s;
}

/* llama.cpp's clean_spaces passes, run in place exactly as it does. */
static size_t clean_spaces(char *text, size_t total) {
    size_t t1 = total;
    total = total ? 1 : 0;
    for (size_t i = 1; i < t1; ++i) {
        const char x = text[i];
        if (text[i - 1] == ' ' && (x == '?' || x == '!' || x == '.' || x == ',')) total--;
        text[total++] = x;
    }
    size_t t2 = total;
    total = total ? 1 : 0;
    for (size_t i = 1; i < t2; ++i) {
        const char x = text[i];
        if (x == '\'' && i + 1 < t2 && text[i - 1] == ' ' && text[i + 1] == ' ') {
            total--;
            text[++i] = '\0';
        }
        text[total++] = x;
    }
    size_t t3 = total;
    total = total ? 1 : 0;
    for (size_t i = 1; i < t3; ++i) {
        const char x = text[i];
        if (text[i - 1] == ' ' && x == '\'' && i + 1 < t3) {
            const char x1 = text[i + 1];
            if (x1 == 's' || x1 == 'm') total--;
            else if (x1 != 't' && x1 != 'd' && i + 2 < t3) {
                const char x2 = text[i + 2];
                if ((x1 == 'r' && x2 == 'e') || (x1 == 'v' && x2 == 'e')) total--;
            }
        }
        text[total++] = x;
    }
    return total;
}

brisk_status tokenizer_decode(const tokenizer *t, const int32_t *ids, int64_t n, bool special,
                              char *buf, size_t cap, size_t *len) {
    sbuf b = {0};
    brisk_status s = BRISK_OK;
    *len = 0;
    int lstrip = t->add_space_prefix ? 1 : 0;
    for (int64_t i = 0; i < n && s == BRISK_OK; i++) {
        s = append_piece(t, ids[i], special, lstrip, &b);
        lstrip = 0;
    }
    if (s == BRISK_OK && t->clean_spaces && b.n) b.n = clean_spaces(b.p, b.n);
    if (s == BRISK_OK) s = copy_out(&b, buf, cap, len);
    free(b.p);
    return s;
}
