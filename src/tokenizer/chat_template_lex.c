/* chat_template_lex.c — the lexer of the Jinja subset, following
 * jinja2.lexer with HF's settings: trim_blocks (the newline after %} or #}
 * goes), lstrip_blocks (spaces and tabs before {% or {# on their own line
 * go), - and + modifiers, {% raw %}, Python string escapes, and brackets
 * balanced so that "}}" inside a dict literal does not end the tag. */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat_template_internal.h"

typedef struct lexer {
    const char *s; /* normalized source */
    size_t n, pos;
    int line;
    ct_arena *a;
    ct_tok *toks;
    size_t ntok, cap;
    brisk_status err;
} lexer;

static brisk_status lex_fail(lexer *L, brisk_status s, const char *msg) {
    if (L->err == BRISK_OK) L->err = bk_fail(s, "chat template line %d: %s", L->line, msg);
    return L->err;
}

static ct_tok *push(lexer *L, uint8_t type) {
    if (L->ntok == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        ct_tok *t = realloc(L->toks, cap * sizeof *t);
        if (!t) {
            lex_fail(L, BRISK_ERR_NOMEM, "out of memory");
            return NULL;
        }
        L->toks = t;
        L->cap = cap;
    }
    ct_tok *t = &L->toks[L->ntok++];
    memset(t, 0, sizeof *t);
    t->type = type;
    t->line = L->line;
    return t;
}

static bool is_ws(char c) { return c == ' ' || c == '\t' || c == '\n' || c == '\r' || c == '\f' || c == '\v'; }
static bool is_name0(char c) { return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_'; }
static bool is_digit(char c) { return c >= '0' && c <= '9'; }
static bool is_name1(char c) { return is_name0(c) || is_digit(c); }

static void advance(lexer *L, size_t to) {
    for (size_t i = L->pos; i < to; i++)
        if (L->s[i] == '\n') L->line++;
    L->pos = to;
}

/* The tag that starts at i ("{{", "{%", "{#"), or 0. */
static char tag_at(const lexer *L, size_t i) {
    if (i + 1 >= L->n || L->s[i] != '{') return 0;
    char c = L->s[i + 1];
    return c == '{' || c == '%' || c == '#' ? c : 0;
}

/* Emits text [from, to) with the whitespace rules of the tag that follows. */
static void emit_text(lexer *L, size_t from, size_t to, char next_tag, char modifier,
                      bool line_starting) {
    const char *s = L->s;
    if (modifier == '-') {
        while (to > from && is_ws(s[to - 1])) to--;
    } else if (modifier != '+' && next_tag && next_tag != '{') {
        /* lstrip_blocks: only spaces/tabs between the line start and the tag */
        size_t ls = to;
        while (ls > from && s[ls - 1] != '\n') ls--;
        bool at_line_start = ls > from || (ls == from && line_starting) ||
                             (ls == from && from > 0 && s[from - 1] == '\n');
        if (at_line_start && ls < to) {
            size_t j = ls;
            while (j < to && (s[j] == ' ' || s[j] == '\t' || s[j] == '\f' || s[j] == '\v')) j++;
            if (j == to) to = ls;
        }
    }
    if (to > from) {
        ct_tok *t = push(L, T_TEXT);
        if (t) {
            t->p = s + from;
            t->n = to - from;
            t->line = L->line;
        }
    }
}

/* Python's unicode-escape for string literals; unknown escapes stay as is. */
static bool put_utf8(char *o, size_t *k, uint32_t cp) {
    if (cp > 0x10FFFF) return false;
    if (cp < 0x80) o[(*k)++] = (char)cp;
    else if (cp < 0x800) {
        o[(*k)++] = (char)(0xC0 | (cp >> 6));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else if (cp < 0x10000) {
        o[(*k)++] = (char)(0xE0 | (cp >> 12));
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    } else {
        o[(*k)++] = (char)(0xF0 | (cp >> 18));
        o[(*k)++] = (char)(0x80 | ((cp >> 12) & 0x3F));
        o[(*k)++] = (char)(0x80 | ((cp >> 6) & 0x3F));
        o[(*k)++] = (char)(0x80 | (cp & 0x3F));
    }
    return true;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

static void lex_string(lexer *L) {
    const char *s = L->s;
    char q = s[L->pos];
    size_t i = L->pos + 1, start = i;
    while (i < L->n && s[i] != q) i += s[i] == '\\' && i + 1 < L->n ? 2 : 1;
    if (i >= L->n) {
        lex_fail(L, BRISK_ERR_FORMAT, "unterminated string literal");
        return;
    }
    char *o = ct_alloc(L->a, i - start + 1);
    if (!o) {
        lex_fail(L, BRISK_ERR_NOMEM, "out of memory");
        return;
    }
    size_t k = 0;
    for (size_t j = start; j < i; j++) {
        if (s[j] != '\\') {
            o[k++] = s[j];
            continue;
        }
        char e = s[++j];
        int nhex = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (nhex) {
            uint32_t cp = 0;
            int d = 0;
            for (; d < nhex && j + 1 + d < i; d++) {
                int h = hexval(s[j + 1 + d]);
                if (h < 0) break;
                cp = cp * 16 + (uint32_t)h;
            }
            /* each escape's bytes fit in the source span it replaces */
            if (d != nhex || !put_utf8(o, &k, cp)) {
                lex_fail(L, BRISK_ERR_FORMAT, "bad \\x, \\u or \\U escape in a string literal");
                return;
            }
            j += (size_t)nhex;
            continue;
        }
        if (e >= '0' && e <= '7') {
            uint32_t cp = 0;
            int d = 0;
            while (d < 3 && j < i && s[j] >= '0' && s[j] <= '7') cp = cp * 8 + (uint32_t)(s[j++] - '0'), d++;
            j--;
            put_utf8(o, &k, cp);
            continue;
        }
        switch (e) {
        case 'n': o[k++] = '\n'; break;
        case 't': o[k++] = '\t'; break;
        case 'r': o[k++] = '\r'; break;
        case 'b': o[k++] = '\b'; break;
        case 'f': o[k++] = '\f'; break;
        case 'v': o[k++] = '\v'; break;
        case 'a': o[k++] = '\a'; break;
        case '\\': o[k++] = '\\'; break;
        case '\'': o[k++] = '\''; break;
        case '"': o[k++] = '"'; break;
        case '\n': break; /* a line continuation */
        default: o[k++] = '\\'; o[k++] = e; break;
        }
    }
    ct_tok *t = push(L, T_STRING);
    if (!t) return;
    t->p = o;
    t->n = k;
    advance(L, i + 1);
}

static void lex_number(lexer *L, bool after_dot) {
    const char *s = L->s;
    size_t i = L->pos;
    char buf[128];
    size_t k = 0;
    bool is_float = false;
    while (i < L->n && (is_digit(s[i]) || (s[i] == '_' && i + 1 < L->n && is_digit(s[i + 1])))) {
        if (s[i] != '_' && k < sizeof buf - 8) buf[k++] = s[i];
        i++;
    }
    if (!after_dot && i + 1 < L->n && s[i] == '.' && is_digit(s[i + 1])) {
        is_float = true;
        buf[k++] = s[i++];
        while (i < L->n && (is_digit(s[i]) || (s[i] == '_' && i + 1 < L->n && is_digit(s[i + 1])))) {
            if (s[i] != '_' && k < sizeof buf - 8) buf[k++] = s[i];
            i++;
        }
    }
    if (!after_dot && i < L->n && (s[i] == 'e' || s[i] == 'E')) {
        size_t j = i + 1;
        if (j < L->n && (s[j] == '+' || s[j] == '-')) j++;
        if (j < L->n && is_digit(s[j])) {
            is_float = true;
            buf[k++] = 'e';
            if (s[i + 1] == '-') buf[k++] = '-';
            i = j;
            while (i < L->n && is_digit(s[i])) {
                if (k < sizeof buf - 2) buf[k++] = s[i];
                i++;
            }
        }
    }
    buf[k] = 0;
    ct_tok *t = push(L, is_float ? T_FLOAT : T_INT);
    if (!t) return;
    if (is_float) {
        t->f = strtod(buf, NULL);
    } else {
        errno = 0;
        long long v = strtoll(buf, NULL, 10);
        if (errno == ERANGE) {
            lex_fail(L, BRISK_ERR_UNSUPPORTED, "integer literal out of the 64-bit range");
            return;
        }
        t->i = v;
    }
    advance(L, i);
}

/* Tokens inside {{ }} or {% %} up to the closing tag; returns the position
 * after it (with its whitespace rules applied) and whether that ends a line. */
static void lex_tag(lexer *L, char kind, bool *line_starting) {
    const char *s = L->s;
    char stack[CT_MAX_DEPTH]; /* the closing brackets expected */
    int depth = 0;
    for (;;) {
        while (L->pos < L->n && is_ws(s[L->pos])) advance(L, L->pos + 1);
        if (L->pos >= L->n) {
            lex_fail(L, BRISK_ERR_FORMAT, kind == '{' ? "missing }} before the end" : "missing %} before the end");
            return;
        }
        size_t i = L->pos;
        char c = s[i];
        if (depth == 0) {
            char close = kind == '{' ? '}' : '%';
            size_t mlen = 0;
            char mod = 0;
            if ((c == '-' || c == '+') && i + 2 < L->n && s[i + 1] == close && s[i + 2] == '}' &&
                (c == '-' || kind == '%'))
                mlen = 3, mod = c;
            else if (c == close && i + 1 < L->n && s[i + 1] == '}')
                mlen = 2;
            if (mlen) {
                if (!push(L, kind == '{' ? T_VAR_END : T_BLOCK_END)) return;
                size_t j = i + mlen;
                if (mod == '-') {
                    while (j < L->n && is_ws(s[j])) j++;
                } else if (kind == '%' && mod != '+' && j < L->n && s[j] == '\n') {
                    j++; /* trim_blocks */
                }
                *line_starting = j > i + mlen && s[j - 1] == '\n';
                advance(L, j);
                return;
            }
        }
        if (c == '\'' || c == '"') {
            lex_string(L);
        } else if (is_digit(c)) {
            bool after_dot = L->ntok && L->toks[L->ntok - 1].type == T_OP && L->toks[L->ntok - 1].op == '.';
            lex_number(L, after_dot);
        } else if (is_name0(c)) {
            size_t j = i;
            while (j < L->n && is_name1(s[j])) j++;
            ct_tok *t = push(L, T_NAME);
            if (!t) return;
            t->p = s + i;
            t->n = j - i;
            advance(L, j);
        } else {
            static const struct { const char *s; int op; } two[] = {
                {"==", TO_EQ}, {"!=", TO_NE}, {"<=", TO_LE}, {">=", TO_GE}, {"//", TO_FLOORDIV}, {"**", TO_POW}};
            int op = 0;
            size_t len = 1;
            for (size_t k = 0; k < sizeof two / sizeof two[0]; k++)
                if (i + 1 < L->n && s[i] == two[k].s[0] && s[i + 1] == two[k].s[1]) op = two[k].op, len = 2;
            if (!op) {
                if (!strchr("+-*/%~<>=.,:|()[]{}", c) || c == 0) {
                    char msg[64];
                    snprintf(msg, sizeof msg, "unexpected character '%c' in a tag", (c >= 32 && c < 127) ? c : '?');
                    lex_fail(L, BRISK_ERR_FORMAT, msg);
                    return;
                }
                op = c;
            }
            if (op == '(' || op == '[' || op == '{') {
                if (depth == CT_MAX_DEPTH) {
                    lex_fail(L, BRISK_ERR_RANGE, "brackets nested deeper than 200");
                    return;
                }
                stack[depth++] = op == '(' ? ')' : op == '[' ? ']' : '}';
            }
            if (op == ')' || op == ']' || op == '}') {
                if (depth == 0 || stack[depth - 1] != op) {
                    char msg[64];
                    if (depth) snprintf(msg, sizeof msg, "unexpected '%c', expected '%c'", op, stack[depth - 1]);
                    else snprintf(msg, sizeof msg, "unexpected '%c' (unbalanced bracket)", op);
                    lex_fail(L, BRISK_ERR_FORMAT, msg);
                    return;
                }
                depth--;
            }
            ct_tok *t = push(L, T_OP);
            if (!t) return;
            t->op = op;
            advance(L, i + len);
        }
        if (L->err) return;
    }
}

/* {% raw %} at pos (the block's "{%" already seen at tag_pos)? Returns the
 * end of "raw ... %}" or 0. */
static size_t raw_open_end(const lexer *L, size_t i, char *close_mod) {
    const char *s = L->s;
    i += 2;
    if (i < L->n && (s[i] == '-' || s[i] == '+')) i++;
    while (i < L->n && is_ws(s[i])) i++;
    if (i + 3 > L->n || memcmp(s + i, "raw", 3) || (i + 3 < L->n && is_name1(s[i + 3]))) return 0;
    i += 3;
    while (i < L->n && is_ws(s[i])) i++;
    *close_mod = 0;
    if (i < L->n && (s[i] == '-' || s[i] == '+')) *close_mod = s[i++];
    if (i + 1 < L->n && s[i] == '%' && s[i + 1] == '}') return i + 2;
    return 0;
}

static void lex_all(lexer *L) {
    const char *s = L->s;
    bool line_starting = true;
    while (L->pos < L->n && !L->err) {
        size_t t = L->pos;
        while (t < L->n && !tag_at(L, t)) t++;
        char tag = t < L->n ? tag_at(L, t) : 0;
        char mod = tag && t + 2 < L->n && (s[t + 2] == '-' || s[t + 2] == '+') ? s[t + 2] : 0;
        emit_text(L, L->pos, t, tag, mod, line_starting);
        advance(L, t);
        if (!tag) break;
        if (tag == '#') {
            const char *e = NULL;
            for (size_t j = t + 2; j + 1 < L->n; j++)
                if (s[j] == '#' && s[j + 1] == '}') {
                    e = s + j;
                    break;
                }
            if (!e) {
                lex_fail(L, BRISK_ERR_FORMAT, "unterminated comment {# ... #}");
                return;
            }
            size_t j = (size_t)(e - s) + 2;
            bool strip = e[-1] == '-' && e - 1 > s + t + 2;
            size_t k = j;
            if (strip)
                while (k < L->n && is_ws(s[k])) k++;
            else if (!(e[-1] == '+' && e - 1 > s + t + 2) && k < L->n && s[k] == '\n')
                k++;
            line_starting = k > j && s[k - 1] == '\n';
            advance(L, k);
            continue;
        }
        char rmod = 0;
        size_t rend = tag == '%' ? raw_open_end(L, t, &rmod) : 0;
        if (rend) {
            /* {% raw %}: literal text up to {% endraw %} */
            size_t body = rend, j = rend;
            if (rmod == '-')
                while (body < L->n && is_ws(s[body])) body++;
            else if (rmod != '+' && body < L->n && s[body] == '\n')
                body++;
            for (j = body; j + 1 < L->n; j++) {
                if (s[j] != '{' || s[j + 1] != '%') continue;
                size_t k = j + 2;
                char emod = 0;
                if (k < L->n && (s[k] == '-' || s[k] == '+')) emod = s[k++];
                while (k < L->n && is_ws(s[k])) k++;
                if (k + 6 <= L->n && !memcmp(s + k, "endraw", 6)) {
                    size_t end = j;
                    if (emod == '-')
                        while (end > body && is_ws(s[end - 1])) end--;
                    advance(L, body);
                    if (end > body) {
                        ct_tok *x = push(L, T_TEXT);
                        if (!x) return;
                        x->p = s + body;
                        x->n = end - body;
                    }
                    k += 6;
                    while (k < L->n && is_ws(s[k])) k++;
                    char cmod = 0;
                    if (k < L->n && (s[k] == '-' || s[k] == '+')) cmod = s[k++];
                    if (k + 1 >= L->n || s[k] != '%' || s[k + 1] != '}') {
                        lex_fail(L, BRISK_ERR_FORMAT, "malformed {% endraw %}");
                        return;
                    }
                    k += 2;
                    size_t k0 = k;
                    if (cmod == '-')
                        while (k < L->n && is_ws(s[k])) k++;
                    else if (cmod != '+' && k < L->n && s[k] == '\n')
                        k++;
                    line_starting = k > k0 && s[k - 1] == '\n';
                    advance(L, k);
                    break;
                }
            }
            if (j + 1 >= L->n) {
                lex_fail(L, BRISK_ERR_FORMAT, "{% raw %} without {% endraw %}");
                return;
            }
            continue;
        }
        if (!push(L, tag == '{' ? T_VAR_BEGIN : T_BLOCK_BEGIN)) return;
        advance(L, t + 2 + (mod ? 1 : 0));
        lex_tag(L, tag, &line_starting);
    }
    push(L, T_EOF);
}

brisk_status ct_lex(const char *src, size_t n, ct_arena *a, ct_tok **toks, size_t *ntok) {
    lexer L = {.s = src, .n = n, .line = 1, .a = a};
    lex_all(&L);
    if (L.err) {
        free(L.toks);
        return L.err;
    }
    *toks = L.toks;
    *ntok = L.ntok;
    return BRISK_OK;
}

