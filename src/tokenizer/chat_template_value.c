/* chat_template_value.c — runtime values of the chat template interpreter:
 * the arena they live in, Python's str()/repr()/==/truthiness, and HF's
 * tojson (json.dumps with ensure_ascii=False). */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat_template_internal.h"

/* ---- arena ------------------------------------------------------------- */

struct ct_block {
    ct_block *next;
    size_t used, cap;
    _Alignas(16) unsigned char data[];
};

void *ct_alloc(ct_arena *a, size_t n) {
    n = (n + 15) & ~(size_t)15;
    if (n == 0) n = 16;
    if (a->limit && (n > a->limit || a->used > a->limit - n)) return NULL;
    ct_block *b = a->head;
    if (!b || b->cap - b->used < n) {
        size_t cap = n > (64u << 10) ? n : (64u << 10);
        b = calloc(1, sizeof *b + cap);
        if (!b) return NULL;
        b->cap = cap;
        /* a big one-off block goes behind the current one, which stays in use */
        if (a->head && n > (64u << 10)) {
            b->next = a->head->next;
            a->head->next = b;
        } else {
            b->next = a->head;
            a->head = b;
        }
    }
    void *p = b->data + b->used;
    b->used += n;
    a->used += n;
    return p;
}

void ct_arena_free(ct_arena *a) {
    for (ct_block *b = a->head, *next; b; b = next) {
        next = b->next;
        free(b);
    }
    a->head = NULL;
    a->used = 0;
}

/* ---- buffers ----------------------------------------------------------- */

brisk_status ct_buf_put(ct_buf *b, const char *s, size_t n) {
    if (n > b->limit || b->n > b->limit - n)
        return bk_fail(BRISK_ERR_RANGE, "chat template: output larger than %zu bytes", b->limit);
    if (b->n + n + 1 > b->cap) {
        size_t cap = b->cap ? b->cap : 256;
        while (cap < b->n + n + 1) cap *= 2;
        char *p = realloc(b->p, cap);
        if (!p) return bk_fail(BRISK_ERR_NOMEM, "chat template: out of memory");
        b->p = p;
        b->cap = cap;
    }
    memcpy(b->p + b->n, s, n);
    b->n += n;
    b->p[b->n] = 0;
    return BRISK_OK;
}

brisk_status ct_buf_putc(ct_buf *b, char c) { return ct_buf_put(b, &c, 1); }

static brisk_status buf_fmt(ct_buf *b, const char *s) { return ct_buf_put(b, s, strlen(s)); }

/* ---- lists and dicts --------------------------------------------------- */

ct_list *ct_list_new(ct_arena *a, size_t n) {
    ct_list *l = ct_alloc(a, sizeof *l);
    if (!l) return NULL;
    if (n && !(l->v = ct_alloc(a, n * sizeof *l->v))) return NULL;
    l->n = n;
    return l;
}

ct_dict *ct_dict_new(ct_arena *a, size_t cap) {
    ct_dict *d = ct_alloc(a, sizeof *d);
    if (!d) return NULL;
    if (cap < 4) cap = 4;
    d->k = ct_alloc(a, cap * sizeof *d->k);
    d->v = ct_alloc(a, cap * sizeof *d->v);
    if (!d->k || !d->v) return NULL;
    d->cap = cap;
    return d;
}

ct_val *ct_dict_get(const ct_dict *d, const char *k, size_t n) {
    for (size_t i = 0; i < d->n; i++)
        if (d->k[i].n == n && !memcmp(d->k[i].p, k, n)) return &d->v[i];
    return NULL;
}

bool ct_dict_set(ct_arena *a, ct_dict *d, ct_str k, ct_val v) {
    ct_val *old = ct_dict_get(d, k.p, k.n);
    if (old) {
        *old = v;
        return true;
    }
    if (d->n == d->cap) {
        size_t cap = d->cap * 2;
        ct_str *nk = ct_alloc(a, cap * sizeof *nk);
        ct_val *nv = ct_alloc(a, cap * sizeof *nv);
        if (!nk || !nv) return false;
        memcpy(nk, d->k, d->n * sizeof *nk);
        memcpy(nv, d->v, d->n * sizeof *nv);
        d->k = nk, d->v = nv, d->cap = cap;
    }
    d->k[d->n] = k;
    d->v[d->n++] = v;
    return true;
}

/* ---- UTF-8 and whitespace ---------------------------------------------- */

static size_t utf8_step(const unsigned char *s, size_t n, size_t i) {
    unsigned c = s[i];
    size_t len = c < 0x80 ? 1 : (c >> 5) == 6 ? 2 : (c >> 4) == 14 ? 3 : (c >> 3) == 30 ? 4 : 1;
    if (i + len > n) return 1;
    for (size_t k = 1; k < len; k++)
        if ((s[i + k] & 0xC0) != 0x80) return 1;
    return len;
}

size_t ct_utf8_len(const char *s, size_t n) {
    size_t count = 0;
    for (size_t i = 0; i < n; i += utf8_step((const unsigned char *)s, n, i)) count++;
    return count;
}

size_t ct_utf8_offset(const char *s, size_t n, size_t idx) {
    size_t i = 0;
    while (idx-- && i < n) i += utf8_step((const unsigned char *)s, n, i);
    return i;
}

/* Python str.isspace(): ASCII \t\n\v\f\r, \x1c-\x1f and space, plus
 * U+0085 U+00A0 U+1680 U+2000-U+200A U+2028 U+2029 U+202F U+205F U+3000. */
size_t ct_space_at(const char *str, size_t n, size_t i) {
    const unsigned char *s = (const unsigned char *)str;
    if (i >= n) return 0;
    unsigned c = s[i];
    if (c == ' ' || (c >= 9 && c <= 13) || (c >= 0x1c && c <= 0x1f)) return 1;
    if (c == 0xC2 && i + 1 < n && (s[i + 1] == 0x85 || s[i + 1] == 0xA0)) return 2;
    if (i + 2 >= n) return 0;
    unsigned c1 = s[i + 1], c2 = s[i + 2];
    if (c == 0xE1 && c1 == 0x9A && c2 == 0x80) return 3;
    if (c == 0xE2 && c1 == 0x80 && (c2 <= 0x8A || c2 == 0xA8 || c2 == 0xA9 || c2 == 0xAF) && c2 >= 0x80) return 3;
    if (c == 0xE2 && c1 == 0x81 && c2 == 0x9F) return 3;
    if (c == 0xE3 && c1 == 0x80 && c2 == 0x80) return 3;
    return 0;
}

size_t ct_space_before(const char *s, size_t i) {
    for (size_t len = 1; len <= 3 && len <= i; len++)
        if (ct_space_at(s, i, i - len) == len) return len;
    return 0;
}

/* ---- truthiness and equality ------------------------------------------- */

const char *ct_type_name(const ct_val *v) {
    static const char *const names[] = {"undefined", "NoneType", "bool", "int", "float", "str",
                                        "list", "dict", "Namespace", "macro", "function", "LoopContext"};
    return v->type < sizeof names / sizeof names[0] ? names[v->type] : "?";
}

bool ct_truthy(const ct_val *v) {
    switch (v->type) {
    case CT_UNDEF:
    case CT_NONE: return false;
    case CT_BOOL: return v->b;
    case CT_INT: return v->i != 0;
    case CT_FLOAT: return v->f != 0;
    case CT_STR: return v->s.n > 0;
    case CT_LIST: return v->list->n > 0;
    case CT_DICT: return v->dict->n > 0;
    default: return true;
    }
}

static bool is_num(const ct_val *v) { return v->type == CT_BOOL || v->type == CT_INT || v->type == CT_FLOAT; }

static bool equal_depth(const ct_val *a, const ct_val *b, int depth) {
    if (depth > 1000) return false;
    if (is_num(a) && is_num(b)) {
        if (a->type != CT_FLOAT && b->type != CT_FLOAT) {
            int64_t x = a->type == CT_BOOL ? a->b : a->i, y = b->type == CT_BOOL ? b->b : b->i;
            return x == y;
        }
        double x = a->type == CT_FLOAT ? a->f : a->type == CT_BOOL ? a->b : (double)a->i;
        double y = b->type == CT_FLOAT ? b->f : b->type == CT_BOOL ? b->b : (double)b->i;
        return x == y;
    }
    if (a->type != b->type) return false;
    switch (a->type) {
    case CT_UNDEF:
    case CT_NONE: return true;
    case CT_STR: return a->s.n == b->s.n && !memcmp(a->s.p, b->s.p, a->s.n);
    case CT_LIST:
        if (a->list == b->list) return true;
        if (a->list->n != b->list->n) return false;
        for (size_t i = 0; i < a->list->n; i++)
            if (!equal_depth(&a->list->v[i], &b->list->v[i], depth + 1)) return false;
        return true;
    case CT_DICT:
        if (a->dict == b->dict) return true;
        if (a->dict->n != b->dict->n) return false;
        for (size_t i = 0; i < a->dict->n; i++) {
            const ct_val *w = ct_dict_get(b->dict, a->dict->k[i].p, a->dict->k[i].n);
            if (!w || !equal_depth(&a->dict->v[i], w, depth + 1)) return false;
        }
        return true;
    case CT_NS: return a->dict == b->dict;
    case CT_MACRO: return a->macro == b->macro;
    case CT_FUNC: return a->func == b->func;
    case CT_LOOP: return a->loop == b->loop;
    }
    return false;
}

bool ct_equal(const ct_val *a, const ct_val *b) { return equal_depth(a, b, 0); }

/* ---- str() and repr() -------------------------------------------------- */

size_t ct_float_repr(char *out, double x) {
    if (isnan(x)) return (size_t)sprintf(out, "nan");
    if (isinf(x)) return (size_t)sprintf(out, x < 0 ? "-inf" : "inf");
    /* the shortest %e that reads back as x, as Python's repr */
    char e[40];
    for (int p = 1; p <= 17; p++) {
        snprintf(e, sizeof e, "%.*e", p - 1, x);
        if (strtod(e, NULL) == x) break;
    }
    char digits[24];
    size_t nd = 0, k = 0;
    bool neg = e[0] == '-';
    for (const char *c = e + neg; *c && *c != 'e'; c++)
        if (*c >= '0' && *c <= '9' && nd < sizeof digits - 1) digits[nd++] = *c;
    while (nd > 1 && digits[nd - 1] == '0') nd--;
    int exp = atoi(strchr(e, 'e') + 1);
    if (neg) out[k++] = '-';
    if (exp >= -4 && exp < 16) {
        if (exp >= 0) {
            for (int i = 0; i <= exp; i++) out[k++] = (size_t)i < nd ? digits[i] : '0';
            out[k++] = '.';
            if ((size_t)exp + 1 < nd)
                for (size_t i = (size_t)exp + 1; i < nd; i++) out[k++] = digits[i];
            else
                out[k++] = '0';
        } else {
            out[k++] = '0';
            out[k++] = '.';
            for (int i = 0; i < -exp - 1; i++) out[k++] = '0';
            for (size_t i = 0; i < nd; i++) out[k++] = digits[i];
        }
    } else {
        out[k++] = digits[0];
        if (nd > 1) {
            out[k++] = '.';
            for (size_t i = 1; i < nd; i++) out[k++] = digits[i];
        }
        k += (size_t)sprintf(out + k, "e%c%02d", exp < 0 ? '-' : '+', exp < 0 ? -exp : exp);
    }
    out[k] = 0;
    return k;
}

static brisk_status repr_str(ct_buf *b, const ct_str *s) {
    bool has_sq = memchr(s->p, '\'', s->n) != NULL, has_dq = memchr(s->p, '"', s->n) != NULL;
    char q = has_sq && !has_dq ? '"' : '\'';
    BK_TRY(ct_buf_putc(b, q));
    for (size_t i = 0; i < s->n; i++) {
        unsigned char c = (unsigned char)s->p[i];
        char esc[8];
        if (c == '\\' || c == (unsigned char)q) {
            esc[0] = '\\', esc[1] = (char)c;
            BK_TRY(ct_buf_put(b, esc, 2));
        } else if (c == '\n') {
            BK_TRY(ct_buf_put(b, "\\n", 2));
        } else if (c == '\r') {
            BK_TRY(ct_buf_put(b, "\\r", 2));
        } else if (c == '\t') {
            BK_TRY(ct_buf_put(b, "\\t", 2));
        } else if (c < 0x20 || c == 0x7f) {
            snprintf(esc, sizeof esc, "\\x%02x", c);
            BK_TRY(ct_buf_put(b, esc, 4));
        } else {
            BK_TRY(ct_buf_putc(b, (char)c));
        }
    }
    return ct_buf_putc(b, q);
}

static brisk_status str_depth(ct_buf *b, const ct_val *v, bool repr, int depth) {
    char tmp[48];
    if (depth > 1000) return bk_fail(BRISK_ERR_RANGE, "chat template: value nested too deeply to print");
    switch (v->type) {
    case CT_UNDEF: return BRISK_OK;
    case CT_NONE: return buf_fmt(b, "None");
    case CT_BOOL: return buf_fmt(b, v->b ? "True" : "False");
    case CT_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v->i); return buf_fmt(b, tmp);
    case CT_FLOAT: ct_float_repr(tmp, v->f); return buf_fmt(b, tmp);
    case CT_STR: return repr ? repr_str(b, &v->s) : ct_buf_put(b, v->s.p, v->s.n);
    case CT_LIST:
        BK_TRY(ct_buf_putc(b, '['));
        for (size_t i = 0; i < v->list->n; i++) {
            if (i) BK_TRY(ct_buf_put(b, ", ", 2));
            BK_TRY(str_depth(b, &v->list->v[i], true, depth + 1));
        }
        return ct_buf_putc(b, ']');
    case CT_DICT:
    case CT_NS:
        if (v->type == CT_NS) BK_TRY(buf_fmt(b, "<Namespace "));
        BK_TRY(ct_buf_putc(b, '{'));
        for (size_t i = 0; i < v->dict->n; i++) {
            if (i) BK_TRY(ct_buf_put(b, ", ", 2));
            BK_TRY(repr_str(b, &v->dict->k[i]));
            BK_TRY(ct_buf_put(b, ": ", 2));
            BK_TRY(str_depth(b, &v->dict->v[i], true, depth + 1));
        }
        BK_TRY(ct_buf_putc(b, '}'));
        return v->type == CT_NS ? ct_buf_putc(b, '>') : BRISK_OK;
    case CT_MACRO: return buf_fmt(b, "<Macro>");
    case CT_FUNC: return buf_fmt(b, "<built-in function>");
    case CT_LOOP: return buf_fmt(b, "<LoopContext>");
    }
    return BRISK_OK;
}

brisk_status ct_buf_str(ct_buf *b, const ct_val *v) { return str_depth(b, v, false, 0); }

/* ---- tojson ------------------------------------------------------------ */

static brisk_status json_str(ct_buf *b, const char *p, size_t n, bool ascii) {
    const unsigned char *s = (const unsigned char *)p;
    BK_TRY(ct_buf_putc(b, '"'));
    size_t run = 0; /* bytes copied as they are, flushed in one go */
    for (size_t i = 0; i < n; i++) {
        unsigned char c = s[i];
        const char *esc = NULL;
        char u[16];
        if (c == '"') esc = "\\\"";
        else if (c == '\\') esc = "\\\\";
        else if (c == '\n') esc = "\\n";
        else if (c == '\r') esc = "\\r";
        else if (c == '\t') esc = "\\t";
        else if (c == '\b') esc = "\\b";
        else if (c == '\f') esc = "\\f";
        else if (c < 0x20 || (ascii && c == 0x7f)) {
            snprintf(u, sizeof u, "\\u%04x", c);
            esc = u;
        } else if (ascii && c >= 0x80) {
            size_t len = utf8_step(s, n, i);
            uint32_t cp = c;
            if (len == 2) cp = ((uint32_t)(c & 0x1F) << 6) | (s[i + 1] & 0x3F);
            if (len == 3) cp = ((uint32_t)(c & 0x0F) << 12) | ((uint32_t)(s[i + 1] & 0x3F) << 6) | (s[i + 2] & 0x3F);
            if (len == 4)
                cp = ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[i + 1] & 0x3F) << 12) |
                     ((uint32_t)(s[i + 2] & 0x3F) << 6) | (s[i + 3] & 0x3F);
            if (cp >= 0x10000 && cp <= 0x10FFFF) {
                cp -= 0x10000;
                snprintf(u, sizeof u, "\\u%04x\\u%04x", 0xD800 + (cp >> 10), 0xDC00 + (cp & 0x3FF));
            } else {
                snprintf(u, sizeof u, "\\u%04x", cp & 0xFFFF);
            }
            esc = u;
            BK_TRY(ct_buf_put(b, p + i - run, run));
            run = 0;
            BK_TRY(buf_fmt(b, esc));
            i += len - 1;
            continue;
        }
        if (!esc) {
            run++;
            continue;
        }
        BK_TRY(ct_buf_put(b, p + i - run, run));
        run = 0;
        BK_TRY(buf_fmt(b, esc));
    }
    BK_TRY(ct_buf_put(b, p + n - run, run));
    return ct_buf_putc(b, '"');
}

static brisk_status newline_indent(ct_buf *b, const ct_json_opts *o, int depth) {
    BK_TRY(ct_buf_putc(b, '\n'));
    size_t il = strlen(o->ind);
    for (int i = 0; i < depth; i++) BK_TRY(ct_buf_put(b, o->ind, il));
    return BRISK_OK;
}

static int key_cmp(const ct_str *a, const ct_str *b) {
    size_t n = a->n < b->n ? a->n : b->n;
    int c = memcmp(a->p, b->p, n);
    return c ? c : (a->n < b->n ? -1 : a->n > b->n);
}

static brisk_status json_depth(ct_buf *b, const ct_val *v, const ct_json_opts *o, int depth) {
    char tmp[48];
    const char *item_sep = o->item_sep ? o->item_sep : o->ind ? "," : ", ";
    const char *key_sep = o->key_sep ? o->key_sep : ": ";
    if (depth > 1000) return bk_fail(BRISK_ERR_RANGE, "chat template: tojson: value nested too deeply");
    switch (v->type) {
    case CT_UNDEF:
    case CT_NONE: return buf_fmt(b, "null");
    case CT_BOOL: return buf_fmt(b, v->b ? "true" : "false");
    case CT_INT: snprintf(tmp, sizeof tmp, "%lld", (long long)v->i); return buf_fmt(b, tmp);
    case CT_FLOAT:
        if (isnan(v->f)) return buf_fmt(b, "NaN");
        if (isinf(v->f)) return buf_fmt(b, v->f < 0 ? "-Infinity" : "Infinity");
        ct_float_repr(tmp, v->f);
        return buf_fmt(b, tmp);
    case CT_STR: return json_str(b, v->s.p, v->s.n, o->ascii);
    case CT_LIST: {
        const ct_list *l = v->list;
        if (!l->n) return buf_fmt(b, "[]");
        BK_TRY(ct_buf_putc(b, '['));
        for (size_t i = 0; i < l->n; i++) {
            if (i) BK_TRY(buf_fmt(b, item_sep));
            if (o->ind) BK_TRY(newline_indent(b, o, depth + 1));
            BK_TRY(json_depth(b, &l->v[i], o, depth + 1));
        }
        if (o->ind) BK_TRY(newline_indent(b, o, depth));
        return ct_buf_putc(b, ']');
    }
    case CT_DICT:
    case CT_NS: {
        const ct_dict *d = v->dict;
        if (!d->n) return buf_fmt(b, "{}");
        size_t *order = malloc(d->n * sizeof *order);
        if (!order) return bk_fail(BRISK_ERR_NOMEM, "chat template: out of memory");
        for (size_t i = 0; i < d->n; i++) order[i] = i;
        if (o->sort_keys) /* insertion sort: stable, and dicts are small */
            for (size_t i = 1; i < d->n; i++)
                for (size_t j = i; j > 0 && key_cmp(&d->k[order[j - 1]], &d->k[order[j]]) > 0; j--) {
                    size_t t = order[j];
                    order[j] = order[j - 1], order[j - 1] = t;
                }
        brisk_status s = ct_buf_putc(b, '{');
        for (size_t i = 0; i < d->n && s == BRISK_OK; i++) {
            size_t k = order[i];
            if (i) s = buf_fmt(b, item_sep);
            if (s == BRISK_OK && o->ind) s = newline_indent(b, o, depth + 1);
            if (s == BRISK_OK) s = json_str(b, d->k[k].p, d->k[k].n, o->ascii);
            if (s == BRISK_OK) s = buf_fmt(b, key_sep);
            if (s == BRISK_OK) s = json_depth(b, &d->v[k], o, depth + 1);
        }
        free(order);
        BK_TRY(s);
        if (o->ind) BK_TRY(newline_indent(b, o, depth));
        return ct_buf_putc(b, '}');
    }
    default:
        return bk_fail(BRISK_ERR_FORMAT, "chat template: tojson: object of type %s is not JSON serializable",
                       ct_type_name(v));
    }
}

brisk_status ct_buf_json(ct_buf *b, const ct_val *v, const ct_json_opts *o) { return json_depth(b, v, o, 0); }
