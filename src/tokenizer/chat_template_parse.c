/* chat_template_parse.c — the lexer and parser of the Jinja subset.
 *
 * The lexer follows jinja2.lexer with HF's settings: newlines normalized to
 * "\n", one trailing newline dropped, trim_blocks (the newline after %} or #}
 * goes), lstrip_blocks (spaces and tabs before {% or {# on their own line go),
 * - and + modifiers. The parser follows jinja2.parser's precedence:
 *   x if c else y < or < and < not < comparisons, in, not in
 *   < + - < ~ < * / // % < ** < unary - + < filters | and tests `is`
 *   < postfix . [] () < primary.
 * Every node records its line so runtime errors can name it.
 */
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat_template_internal.h"

/* ---- tokens ------------------------------------------------------------ */

typedef enum tok_type {
    T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
    T_NAME, T_STRING, T_INT, T_FLOAT, T_OP, T_EOF,
} tok_type;

/* Operator codes beyond single characters. */
enum { TO_EQ = 256, TO_NE, TO_LE, TO_GE, TO_FLOORDIV, TO_POW };

typedef struct tok {
    uint8_t type;
    int op; /* T_OP: the character or TO_* */
    int line;
    const char *p; /* T_TEXT, T_NAME, T_STRING: bytes (arena) */
    size_t n;
    int64_t i;
    double f;
} tok;

typedef struct lexer {
    const char *s; /* normalized source */
    size_t n, pos;
    int line;
    ct_arena *a;
    tok *toks;
    size_t ntok, cap;
    brisk_status err;
} lexer;

static brisk_status lex_fail(lexer *L, brisk_status s, const char *msg) {
    if (L->err == BRISK_OK) L->err = bk_fail(s, "chat template line %d: %s", L->line, msg);
    return L->err;
}

static tok *push(lexer *L, uint8_t type) {
    if (L->ntok == L->cap) {
        size_t cap = L->cap ? L->cap * 2 : 256;
        tok *t = realloc(L->toks, cap * sizeof *t);
        if (!t) {
            lex_fail(L, BRISK_ERR_NOMEM, "out of memory");
            return NULL;
        }
        L->toks = t;
        L->cap = cap;
    }
    tok *t = &L->toks[L->ntok++];
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
        tok *t = push(L, T_TEXT);
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
    tok *t = push(L, T_STRING);
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
    tok *t = push(L, is_float ? T_FLOAT : T_INT);
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
            tok *t = push(L, T_NAME);
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
            if (op == '(' || op == '[' || op == '{') depth++;
            if (op == ')' || op == ']' || op == '}') {
                if (depth == 0) {
                    lex_fail(L, BRISK_ERR_FORMAT, "unbalanced bracket in a tag");
                    return;
                }
                depth--;
            }
            tok *t = push(L, T_OP);
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
                        tok *x = push(L, T_TEXT);
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
    tok *e = push(L, T_EOF);
    (void)e;
}

/* ---- parser ------------------------------------------------------------ */

typedef struct parser {
    tok *t;
    size_t pos, ntok;
    ct_arena *a;
    brisk_status err;
    int depth;      /* expression and block nesting */
    int loop_depth; /* for break/continue */
    int macro_uses; /* CT_USES_* seen in the current macro body */
} parser;

static ct_node *fail_at(parser *P, int line, brisk_status s, const char *fmt, const char *arg) {
    if (P->err == BRISK_OK) {
        char msg[200];
        snprintf(msg, sizeof msg, fmt, arg ? arg : "");
        P->err = bk_fail(s, "chat template line %d: %s", line, msg);
    }
    return NULL;
}

static ct_node *fail_name(parser *P, int line, const char *what, ct_str name) {
    char msg[120];
    snprintf(msg, sizeof msg, "unsupported %s '%.*s'", what, (int)(name.n > 40 ? 40 : name.n), name.p);
    return fail_at(P, line, BRISK_ERR_UNSUPPORTED, "%s", msg);
}

static tok *cur(parser *P) { return &P->t[P->pos]; }
static tok *peek(parser *P, size_t k) {
    size_t i = P->pos + k;
    return &P->t[i < P->ntok ? i : P->ntok - 1];
}
static bool is_op(parser *P, int op) { return cur(P)->type == T_OP && cur(P)->op == op; }
static bool is_name(parser *P, const char *name) {
    tok *t = cur(P);
    return t->type == T_NAME && t->n == strlen(name) && !memcmp(t->p, name, t->n);
}
static bool tok_is_name(tok *t, const char *name) {
    return t->type == T_NAME && t->n == strlen(name) && !memcmp(t->p, name, t->n);
}

static const char *tok_desc(tok *t) {
    switch (t->type) {
    case T_TEXT: return "text";
    case T_VAR_BEGIN: return "'{{'";
    case T_VAR_END: return "'}}'";
    case T_BLOCK_BEGIN: return "'{%'";
    case T_BLOCK_END: return "'%}'";
    case T_NAME: return "a name";
    case T_STRING: return "a string";
    case T_INT: case T_FLOAT: return "a number";
    case T_OP: return "an operator";
    default: return "the end of the template";
    }
}

static ct_node *unexpected(parser *P, const char *what) {
    tok *t = cur(P);
    char msg[160];
    if (t->type == T_NAME)
        snprintf(msg, sizeof msg, "expected %s, got '%.*s'", what, (int)(t->n > 40 ? 40 : t->n), t->p);
    else if (t->type == T_OP && t->op < 256)
        snprintf(msg, sizeof msg, "expected %s, got '%c'", what, t->op);
    else
        snprintf(msg, sizeof msg, "expected %s, got %s", what, tok_desc(t));
    return fail_at(P, t->line, BRISK_ERR_FORMAT, "%s", msg);
}

static bool expect_op(parser *P, int op, const char *what) {
    if (!is_op(P, op)) {
        unexpected(P, what);
        return false;
    }
    P->pos++;
    return true;
}

static ct_node *node(parser *P, uint8_t kind, int line) {
    ct_node *n = ct_alloc(P->a, sizeof *n);
    if (!n) return fail_at(P, line, BRISK_ERR_NOMEM, "out of memory%s", NULL);
    n->kind = kind;
    n->line = line;
    return n;
}

static ct_str name_of(tok *t) { return (ct_str){t->p, t->n}; }

static bool enter(parser *P) {
    if (++P->depth > CT_MAX_DEPTH) {
        fail_at(P, cur(P)->line, BRISK_ERR_RANGE, "nesting deeper than %s", "200");
        return false;
    }
    return true;
}

static ct_node *parse_expr(parser *P);
static ct_node *parse_or(parser *P);
static ct_node *parse_unary(parser *P, bool with_filter);
static ct_node *parse_primary(parser *P);

/* Call arguments after '(' up to ')': positional, then name=value. */
static ct_node *parse_args(parser *P, bool *ok) {
    ct_node *head = NULL, **tail = &head;
    bool kw = false;
    *ok = false;
    if (!expect_op(P, '(', "'('")) return NULL;
    while (!is_op(P, ')')) {
        if (head && !expect_op(P, ',', "',' or ')'")) return NULL;
        if (is_op(P, ')')) break;
        ct_node *arg;
        if (cur(P)->type == T_NAME && peek(P, 1)->type == T_OP && peek(P, 1)->op == '=') {
            tok *nt = cur(P);
            P->pos += 2;
            arg = node(P, N_KWARG, nt->line);
            if (!arg) return NULL;
            arg->lit.s = name_of(nt);
            if (!(arg->k[0] = parse_expr(P))) return NULL;
            kw = true;
        } else {
            if (is_op(P, '*'))
                return fail_at(P, cur(P)->line, BRISK_ERR_UNSUPPORTED, "unsupported: *args / **kwargs in a call%s", NULL);
            if (kw) return fail_at(P, cur(P)->line, BRISK_ERR_FORMAT, "positional argument after a keyword argument%s", NULL);
            if (!(arg = parse_expr(P))) return NULL;
        }
        *tail = arg;
        tail = &arg->next;
    }
    P->pos++;
    *ok = true;
    return head;
}

/* Subscript after '[': an index or a slice a:b:c. */
static ct_node *parse_subscript(parser *P, ct_node *obj) {
    int line = cur(P)->line;
    P->pos++;
    ct_node *parts[3] = {NULL, NULL, NULL};
    int nparts = 0;
    bool slice = false;
    for (;;) {
        if (is_op(P, ':')) {
            slice = true;
            if (++nparts > 2) return fail_at(P, line, BRISK_ERR_FORMAT, "too many ':' in a slice%s", NULL);
            P->pos++;
            continue;
        }
        if (is_op(P, ']')) break;
        if (parts[nparts]) return unexpected(P, "':' or ']'");
        if (!(parts[nparts] = parse_expr(P))) return NULL;
    }
    P->pos++;
    ct_node *n = node(P, slice ? N_SLICE : N_ITEM, line);
    if (!n) return NULL;
    n->k[0] = obj;
    if (slice) {
        n->k[1] = parts[0], n->k[2] = parts[1], n->k[3] = parts[2];
    } else {
        if (!parts[0]) return fail_at(P, line, BRISK_ERR_FORMAT, "empty subscript []%s", NULL);
        n->k[1] = parts[0];
    }
    return n;
}

static ct_node *parse_postfix(parser *P, ct_node *n) {
    for (;;) {
        if (is_op(P, '.')) {
            P->pos++;
            tok *t = cur(P);
            if (t->type == T_NAME) {
                ct_node *a = node(P, N_ATTR, t->line);
                if (!a) return NULL;
                a->k[0] = n;
                a->lit.s = name_of(t);
                P->pos++;
                n = a;
            } else if (t->type == T_INT) {
                ct_node *a = node(P, N_ITEM, t->line), *k = node(P, N_CONST, t->line);
                if (!a || !k) return NULL;
                k->lit = ct_int(t->i);
                a->k[0] = n, a->k[1] = k;
                P->pos++;
                n = a;
            } else {
                return unexpected(P, "a name after '.'");
            }
        } else if (is_op(P, '[')) {
            if (!(n = parse_subscript(P, n))) return NULL;
        } else if (is_op(P, '(')) {
            ct_node *c = node(P, N_CALL, cur(P)->line);
            if (!c) return NULL;
            bool ok;
            c->k[0] = n;
            c->k[1] = parse_args(P, &ok);
            if (!ok) return NULL;
            n = c;
        } else {
            return n;
        }
    }
}

/* A filter or test name: name(.name)*. */
static bool parse_dotted(parser *P, ct_str *out) {
    tok *t = cur(P);
    if (t->type != T_NAME) {
        unexpected(P, "a filter or test name");
        return false;
    }
    P->pos++;
    *out = name_of(t);
    while (is_op(P, '.') && peek(P, 1)->type == T_NAME) {
        tok *u = peek(P, 1);
        out->n = (size_t)(u->p + u->n - out->p);
        P->pos += 2;
    }
    return true;
}

static ct_node *parse_filter_chain(parser *P, ct_node *n) {
    for (;;) {
        if (is_op(P, '|')) {
            P->pos++;
            ct_node *f = node(P, N_FILTER, cur(P)->line);
            if (!f || !parse_dotted(P, &f->lit.s)) return NULL;
            if (!ct_filter_known(f->lit.s)) return fail_name(P, f->line, "filter", f->lit.s);
            f->k[0] = n;
            if (is_op(P, '(')) {
                bool ok;
                f->k[1] = parse_args(P, &ok);
                if (!ok) return NULL;
            }
            n = f;
        } else if (is_name(P, "is")) {
            P->pos++;
            ct_node *t = node(P, N_TEST, cur(P)->line);
            if (!t) return NULL;
            if (is_name(P, "not")) t->op = 1, P->pos++;
            /* `is` with operator-named tests: is ==, is !=, ... */
            if (cur(P)->type == T_OP) {
                static const struct { int op; const char *name; } ops[] = {
                    {TO_EQ, "=="}, {TO_NE, "!="}, {'<', "<"}, {'>', ">"}, {TO_LE, "<="}, {TO_GE, ">="}};
                size_t k = 0;
                for (; k < sizeof ops / sizeof ops[0]; k++)
                    if (cur(P)->op == ops[k].op) break;
                if (k == sizeof ops / sizeof ops[0]) return unexpected(P, "a test name");
                t->lit.s = (ct_str){ops[k].name, strlen(ops[k].name)};
                P->pos++;
            } else if (!parse_dotted(P, &t->lit.s)) {
                return NULL;
            }
            if (!ct_test_known(t->lit.s)) return fail_name(P, t->line, "test", t->lit.s);
            t->k[0] = n;
            tok *c = cur(P);
            if (is_op(P, '(')) {
                bool ok;
                t->k[1] = parse_args(P, &ok);
                if (!ok) return NULL;
            } else if ((c->type == T_NAME || c->type == T_STRING || c->type == T_INT || c->type == T_FLOAT ||
                        (c->type == T_OP && (c->op == '[' || c->op == '{'))) &&
                       !tok_is_name(c, "else") && !tok_is_name(c, "or") && !tok_is_name(c, "and") &&
                       !tok_is_name(c, "if") && !tok_is_name(c, "in") && !tok_is_name(c, "not") &&
                       !tok_is_name(c, "is")) {
                /* one bare argument: `is equalto 5`, `is divisibleby 3` */
                ct_node *arg = parse_primary(P);
                if (!arg || !(arg = parse_postfix(P, arg))) return NULL;
                t->k[1] = arg;
            }
            n = t;
        } else if (is_op(P, '(')) {
            ct_node *c = node(P, N_CALL, cur(P)->line);
            if (!c) return NULL;
            bool ok;
            c->k[0] = n;
            c->k[1] = parse_args(P, &ok);
            if (!ok) return NULL;
            n = c;
        } else {
            return n;
        }
    }
}

/* Comma-separated expressions; a tuple if there is a comma (or explicit). */
static ct_node *parse_tuple(parser *P, bool names_only, bool *is_tuple) {
    int line = cur(P)->line;
    ct_node *head = NULL, **tail = &head;
    int n = 0;
    *is_tuple = false;
    for (;;) {
        ct_node *e;
        if (names_only) {
            tok *t = cur(P);
            if (t->type != T_NAME) return unexpected(P, "a name");
            if (!(e = node(P, N_NAME, t->line))) return NULL;
            e->lit.s = name_of(t);
            P->pos++;
            if (is_op(P, '.')) { /* set ns.attr = ... */
                P->pos++;
                tok *u = cur(P);
                if (u->type != T_NAME) return unexpected(P, "an attribute name");
                ct_node *a = node(P, N_ATTR, u->line);
                if (!a) return NULL;
                a->k[0] = e;
                a->lit.s = name_of(u);
                P->pos++;
                e = a;
            }
        } else if (!(e = parse_expr(P))) {
            return NULL;
        }
        *tail = e;
        tail = &e->next;
        n++;
        if (!is_op(P, ',')) break;
        *is_tuple = true;
        P->pos++;
        /* a trailing comma: `1, 2,` */
        tok *c = cur(P);
        if (c->type == T_BLOCK_END || c->type == T_VAR_END || (c->type == T_OP && (c->op == ')' || c->op == '=')) ||
            tok_is_name(c, "in"))
            break;
    }
    if (!*is_tuple) return head;
    ct_node *t = node(P, N_TUPLE, line);
    if (!t) return NULL;
    t->k[0] = head;
    (void)n;
    return t;
}

static ct_node *parse_primary(parser *P) {
    tok *t = cur(P);
    ct_node *n;
    if (!enter(P)) return NULL;
    switch (t->type) {
    case T_NAME: {
        static const struct { const char *s; int v; } consts[] = {
            {"true", 1}, {"false", 0}, {"True", 1}, {"False", 0}, {"none", 2}, {"None", 2}};
        for (size_t k = 0; k < sizeof consts / sizeof consts[0]; k++) {
            if (tok_is_name(t, consts[k].s)) {
                if (!(n = node(P, N_CONST, t->line))) return NULL;
                n->lit = consts[k].v == 2 ? ct_none() : ct_bool(consts[k].v);
                P->pos++;
                P->depth--;
                return n;
            }
        }
        if (!(n = node(P, N_NAME, t->line))) return NULL;
        n->lit.s = name_of(t);
        if (tok_is_name(t, "caller")) P->macro_uses |= CT_USES_CALLER;
        if (tok_is_name(t, "varargs")) P->macro_uses |= CT_USES_VARARGS;
        if (tok_is_name(t, "kwargs")) P->macro_uses |= CT_USES_KWARGS;
        P->pos++;
        break;
    }
    case T_STRING: {
        /* adjacent literals concatenate: 'a' 'b' */
        size_t total = 0, k = P->pos;
        while (P->t[k].type == T_STRING) total += P->t[k++].n;
        char *s = ct_alloc(P->a, total + 1);
        if (!s || !(n = node(P, N_CONST, t->line))) return fail_at(P, t->line, BRISK_ERR_NOMEM, "out of memory%s", NULL);
        size_t o = 0;
        while (cur(P)->type == T_STRING) {
            memcpy(s + o, cur(P)->p, cur(P)->n);
            o += cur(P)->n;
            P->pos++;
        }
        n->lit = ct_strv(s, total);
        break;
    }
    case T_INT:
    case T_FLOAT:
        if (!(n = node(P, N_CONST, t->line))) return NULL;
        n->lit = t->type == T_INT ? ct_int(t->i) : ct_float(t->f);
        P->pos++;
        break;
    case T_OP:
        if (t->op == '(') {
            P->pos++;
            if (is_op(P, ')')) { /* () */
                P->pos++;
                if (!(n = node(P, N_TUPLE, t->line))) return NULL;
                break;
            }
            bool tup;
            if (!(n = parse_tuple(P, false, &tup))) return NULL;
            if (!expect_op(P, ')', "')'")) return NULL;
            break;
        }
        if (t->op == '[' || t->op == '{') {
            bool dict = t->op == '{';
            int close = dict ? '}' : ']';
            P->pos++;
            if (!(n = node(P, dict ? N_DICT : N_LIST, t->line))) return NULL;
            ct_node **tail = &n->k[0];
            while (!is_op(P, close)) {
                if (n->k[0] && !expect_op(P, ',', dict ? "',' or '}'" : "',' or ']'")) return NULL;
                if (is_op(P, close)) break;
                ct_node *e = parse_expr(P);
                if (!e) return NULL;
                if (dict) {
                    ct_node *pair = node(P, N_PAIR, e->line);
                    if (!pair) return NULL;
                    if (!expect_op(P, ':', "':' in a dict literal")) return NULL;
                    pair->k[0] = e;
                    if (!(pair->k[1] = parse_expr(P))) return NULL;
                    e = pair;
                }
                *tail = e;
                tail = &e->next;
            }
            P->pos++;
            break;
        }
        /* fallthrough */
    default:
        return unexpected(P, "an expression");
    }
    P->depth--;
    return n;
}

static ct_node *parse_unary(parser *P, bool with_filter) {
    tok *t = cur(P);
    ct_node *n;
    if (!enter(P)) return NULL;
    if (is_op(P, '-') || is_op(P, '+')) {
        P->pos++;
        if (!(n = node(P, t->op == '-' ? N_NEG : N_POS, t->line))) return NULL;
        if (!(n->k[0] = parse_unary(P, false))) return NULL;
    } else {
        if (!(n = parse_primary(P))) return NULL;
    }
    if (!(n = parse_postfix(P, n))) return NULL;
    if (with_filter && !(n = parse_filter_chain(P, n))) return NULL;
    P->depth--;
    return n;
}

static ct_node *binop(parser *P, int line, uint8_t op, ct_node *l, ct_node *r) {
    ct_node *n = node(P, N_BINOP, line);
    if (!n) return NULL;
    n->op = op;
    n->k[0] = l, n->k[1] = r;
    return n;
}

static ct_node *parse_pow(parser *P) {
    ct_node *l = parse_unary(P, true);
    while (l && is_op(P, TO_POW)) {
        int line = cur(P)->line;
        P->pos++;
        ct_node *r = parse_unary(P, true);
        l = r ? binop(P, line, OP_POW, l, r) : NULL;
    }
    return l;
}

static ct_node *parse_math2(parser *P) {
    ct_node *l = parse_pow(P);
    while (l) {
        uint8_t op = is_op(P, '*') ? OP_MUL : is_op(P, '/') ? OP_DIV : is_op(P, TO_FLOORDIV) ? OP_FLOORDIV
                   : is_op(P, '%') ? OP_MOD : 0;
        if (!op) break;
        int line = cur(P)->line;
        P->pos++;
        ct_node *r = parse_pow(P);
        l = r ? binop(P, line, op, l, r) : NULL;
    }
    return l;
}

static ct_node *parse_concat(parser *P) {
    ct_node *l = parse_math2(P);
    while (l && is_op(P, '~')) {
        int line = cur(P)->line;
        P->pos++;
        ct_node *r = parse_math2(P);
        l = r ? binop(P, line, OP_CONCAT, l, r) : NULL;
    }
    return l;
}

static ct_node *parse_math1(parser *P) {
    ct_node *l = parse_concat(P);
    while (l && (is_op(P, '+') || is_op(P, '-'))) {
        uint8_t op = is_op(P, '+') ? OP_ADD : OP_SUB;
        int line = cur(P)->line;
        P->pos++;
        ct_node *r = parse_concat(P);
        l = r ? binop(P, line, op, l, r) : NULL;
    }
    return l;
}

static ct_node *parse_compare(parser *P) {
    ct_node *l = parse_math1(P);
    /* a < b < c chains as (a < b) and (b < c) in Jinja; chat templates never
     * chain, so each comparison simply takes the previous result. */
    while (l) {
        uint8_t op = 0;
        tok *t = cur(P);
        if (t->type == T_OP) {
            op = t->op == TO_EQ ? OP_EQ : t->op == TO_NE ? OP_NE : t->op == '<' ? OP_LT : t->op == TO_LE ? OP_LE
               : t->op == '>' ? OP_GT : t->op == TO_GE ? OP_GE : 0;
            if (op) P->pos++;
        } else if (tok_is_name(t, "in")) {
            op = OP_IN;
            P->pos++;
        } else if (tok_is_name(t, "not") && tok_is_name(peek(P, 1), "in")) {
            op = OP_NOTIN;
            P->pos += 2;
        }
        if (!op) break;
        ct_node *r = parse_math1(P);
        l = r ? binop(P, t->line, op, l, r) : NULL;
    }
    return l;
}

static ct_node *parse_not(parser *P) {
    if (is_name(P, "not")) {
        int line = cur(P)->line;
        P->pos++;
        if (!enter(P)) return NULL;
        ct_node *n = node(P, N_NOT, line);
        if (!n || !(n->k[0] = parse_not(P))) return NULL;
        P->depth--;
        return n;
    }
    return parse_compare(P);
}

static ct_node *parse_and(parser *P) {
    ct_node *l = parse_not(P);
    while (l && is_name(P, "and")) {
        int line = cur(P)->line;
        P->pos++;
        ct_node *r = parse_not(P), *n = r ? node(P, N_AND, line) : NULL;
        if (!n) return NULL;
        n->k[0] = l, n->k[1] = r;
        l = n;
    }
    return l;
}

static ct_node *parse_or(parser *P) {
    ct_node *l = parse_and(P);
    while (l && is_name(P, "or")) {
        int line = cur(P)->line;
        P->pos++;
        ct_node *r = parse_and(P), *n = r ? node(P, N_OR, line) : NULL;
        if (!n) return NULL;
        n->k[0] = l, n->k[1] = r;
        l = n;
    }
    return l;
}

/* x if c else y (else optional: undefined when c is false). */
static ct_node *parse_expr(parser *P) {
    if (!enter(P)) return NULL;
    ct_node *n = parse_or(P);
    while (n && is_name(P, "if")) {
        ct_node *c = node(P, N_COND, cur(P)->line);
        if (!c) return NULL;
        P->pos++;
        c->k[1] = n;
        if (!(c->k[0] = parse_or(P))) return NULL;
        if (is_name(P, "else")) {
            P->pos++;
            if (!(c->k[2] = parse_expr(P))) return NULL;
        }
        n = c;
    }
    if (n) P->depth--;
    return n;
}

/* ---- statements -------------------------------------------------------- */

static bool expect_block_end(parser *P) {
    if (cur(P)->type != T_BLOCK_END) {
        unexpected(P, "'%}'");
        return false;
    }
    P->pos++;
    return true;
}

/* At "{% name": is name one of the given end tags? */
static bool at_tag(parser *P, const char *const *names) {
    if (cur(P)->type != T_BLOCK_BEGIN) return false;
    tok *t = peek(P, 1);
    for (; *names; names++)
        if (tok_is_name(t, *names)) return true;
    return false;
}

static ct_node *parse_body(parser *P, const char *const *ends, const char *opener, int open_line, bool *ok);

/* Macro parameters: (a, b=1, ...). */
static ct_node *parse_params(parser *P, bool *ok) {
    ct_node *head = NULL, **tail = &head;
    *ok = false;
    if (!expect_op(P, '(', "'('")) return NULL;
    bool dflt = false;
    while (!is_op(P, ')')) {
        if (head && !expect_op(P, ',', "',' or ')'")) return NULL;
        if (is_op(P, ')')) break;
        tok *t = cur(P);
        if (t->type != T_NAME) return unexpected(P, "a parameter name");
        P->pos++;
        ct_node *p = node(P, N_PARAM, t->line);
        if (!p) return NULL;
        p->lit.s = name_of(t);
        if (is_op(P, '=')) {
            P->pos++;
            if (!(p->k[0] = parse_expr(P))) return NULL;
            dflt = true;
        } else if (dflt) {
            return fail_at(P, t->line, BRISK_ERR_FORMAT, "parameter without a default after one with a default%s", NULL);
        }
        *tail = p;
        tail = &p->next;
    }
    P->pos++;
    *ok = true;
    return head;
}

static ct_node *parse_if(parser *P, int line) {
    static const char *const ends[] = {"elif", "else", "endif", NULL};
    ct_node *n = node(P, N_IF, line);
    bool ok;
    if (!n || !(n->k[0] = parse_expr(P)) || !expect_block_end(P)) return NULL;
    n->k[1] = parse_body(P, ends, "if", line, &ok);
    if (!ok) return NULL;
    tok *t = peek(P, 1);
    int l2 = t->line;
    P->pos += 2; /* {% elif|else|endif */
    if (tok_is_name(t, "elif")) {
        if (!enter(P)) return NULL;
        if (!(n->k[2] = parse_if(P, l2))) return NULL;
        P->depth--;
        return n; /* the nested if consumed endif */
    }
    if (tok_is_name(t, "else")) {
        static const char *const endif[] = {"endif", NULL};
        if (!expect_block_end(P)) return NULL;
        n->k[2] = parse_body(P, endif, "if", line, &ok);
        if (!ok) return NULL;
        P->pos += 2;
    }
    if (!expect_block_end(P)) return NULL;
    return n;
}

static ct_node *parse_for(parser *P, int line) {
    static const char *const ends[] = {"else", "endfor", NULL};
    ct_node *n = node(P, N_FOR, line);
    bool tup, ok;
    if (!n) return NULL;
    tok *t0 = cur(P);
    if (!(n->k[0] = parse_tuple(P, true, &tup))) return NULL;
    if (n->k[0]->kind == N_ATTR) return fail_at(P, t0->line, BRISK_ERR_FORMAT, "a loop variable cannot be an attribute%s", NULL);
    if (!is_name(P, "in")) return unexpected(P, "'in'");
    P->pos++;
    if (!(n->k[1] = parse_or(P))) return NULL;
    if (is_name(P, "if")) {
        P->pos++;
        if (!(n->k[4] = parse_expr(P))) return NULL;
    }
    if (is_name(P, "recursive"))
        return fail_at(P, cur(P)->line, BRISK_ERR_UNSUPPORTED, "unsupported: recursive for loops%s", NULL);
    if (!expect_block_end(P)) return NULL;
    P->loop_depth++;
    n->k[2] = parse_body(P, ends, "for", line, &ok);
    P->loop_depth--;
    if (!ok) return NULL;
    if (tok_is_name(peek(P, 1), "else")) {
        static const char *const endfor[] = {"endfor", NULL};
        P->pos += 2;
        if (!expect_block_end(P)) return NULL;
        n->k[3] = parse_body(P, endfor, "for", line, &ok);
        if (!ok) return NULL;
    }
    P->pos += 2;
    if (!expect_block_end(P)) return NULL;
    return n;
}

static ct_node *parse_set(parser *P, int line) {
    ct_node *n = node(P, N_SET, line);
    bool tup, ok;
    if (!n || !(n->k[0] = parse_tuple(P, true, &tup))) return NULL;
    if (is_op(P, '=')) {
        P->pos++;
        if (!(n->k[1] = parse_tuple(P, false, &tup))) return NULL;
        if (!expect_block_end(P)) return NULL;
        return n;
    }
    if (is_op(P, '|'))
        return fail_at(P, line, BRISK_ERR_UNSUPPORTED, "unsupported: filters on a block set%s", NULL);
    if (tup || n->k[0]->kind != N_NAME) return unexpected(P, "'='");
    static const char *const ends[] = {"endset", NULL};
    if (!expect_block_end(P)) return NULL;
    int saved_loops = P->loop_depth;
    P->loop_depth = 0;
    n->k[2] = parse_body(P, ends, "set", line, &ok);
    P->loop_depth = saved_loops;
    if (!ok) return NULL;
    P->pos += 2;
    if (!expect_block_end(P)) return NULL;
    return n;
}

static ct_node *parse_macro(parser *P, int line) {
    static const char *const ends[] = {"endmacro", NULL};
    tok *t = cur(P);
    if (t->type != T_NAME) return unexpected(P, "a macro name");
    P->pos++;
    ct_node *n = node(P, N_MACRO, line);
    bool ok;
    if (!n) return NULL;
    n->lit.s = name_of(t);
    if (!(n->k[0] = parse_params(P, &ok)) && !ok) return NULL;
    if (!expect_block_end(P)) return NULL;
    int saved_uses = P->macro_uses, saved_loops = P->loop_depth;
    P->macro_uses = 0;
    P->loop_depth = 0;
    n->k[1] = parse_body(P, ends, "macro", line, &ok);
    n->op = (uint8_t)P->macro_uses;
    P->macro_uses = saved_uses;
    P->loop_depth = saved_loops;
    if (!ok) return NULL;
    P->pos += 2;
    if (cur(P)->type == T_NAME) P->pos++; /* {% endmacro name %} */
    if (!expect_block_end(P)) return NULL;
    return n;
}

static ct_node *parse_callblock(parser *P, int line) {
    static const char *const ends[] = {"endcall", NULL};
    ct_node *n = node(P, N_CALLBLOCK, line);
    bool ok;
    if (!n) return NULL;
    if (is_op(P, '(') && !(n->k[1] = parse_params(P, &ok)) && !ok) return NULL;
    ct_node *c = parse_expr(P);
    if (!c) return NULL;
    if (c->kind != N_CALL) return fail_at(P, line, BRISK_ERR_FORMAT, "{%% call %%} needs a macro call%s", NULL);
    n->k[0] = c;
    if (!expect_block_end(P)) return NULL;
    int saved_uses = P->macro_uses, saved_loops = P->loop_depth;
    P->macro_uses = 0;
    P->loop_depth = 0;
    n->k[2] = parse_body(P, ends, "call", line, &ok);
    n->op = (uint8_t)P->macro_uses;
    P->macro_uses = saved_uses | (P->macro_uses & CT_USES_CALLER);
    P->loop_depth = saved_loops;
    if (!ok) return NULL;
    P->pos += 2;
    if (!expect_block_end(P)) return NULL;
    return n;
}

static ct_node *parse_filterblock(parser *P, int line) {
    static const char *const ends[] = {"endfilter", NULL};
    ct_node *n = node(P, N_FILTERBLK, line);
    bool ok;
    if (!n) return NULL;
    /* the chain is parsed as filters applied to a placeholder (k0 NULL) */
    ct_node *chain = NULL;
    do {
        if (chain) P->pos++; /* '|' */
        ct_node *f = node(P, N_FILTER, cur(P)->line);
        if (!f || !parse_dotted(P, &f->lit.s)) return NULL;
        if (!ct_filter_known(f->lit.s)) return fail_name(P, f->line, "filter", f->lit.s);
        if (is_op(P, '(')) {
            f->k[1] = parse_args(P, &ok);
            if (!ok) return NULL;
        }
        f->k[0] = chain;
        chain = f;
    } while (is_op(P, '|'));
    n->k[0] = chain;
    if (!expect_block_end(P)) return NULL;
    int saved_loops = P->loop_depth;
    P->loop_depth = 0;
    n->k[1] = parse_body(P, ends, "filter", line, &ok);
    P->loop_depth = saved_loops;
    if (!ok) return NULL;
    P->pos += 2;
    if (!expect_block_end(P)) return NULL;
    return n;
}

static ct_node *parse_with(parser *P, int line) {
    static const char *const ends[] = {"endwith", NULL};
    ct_node *n = node(P, N_WITH, line);
    bool ok;
    if (!n) return NULL;
    ct_node **tail = &n->k[0];
    while (cur(P)->type != T_BLOCK_END) {
        if (n->k[0] && !expect_op(P, ',', "',' or '%}'")) return NULL;
        tok *t = cur(P);
        if (t->type != T_NAME) return unexpected(P, "a name");
        P->pos++;
        ct_node *s = node(P, N_SET, t->line), *target = node(P, N_NAME, t->line);
        if (!s || !target || !expect_op(P, '=', "'='")) return NULL;
        target->lit.s = name_of(t);
        s->k[0] = target;
        if (!(s->k[1] = parse_expr(P))) return NULL;
        *tail = s;
        tail = &s->next;
    }
    P->pos++;
    n->k[1] = parse_body(P, ends, "with", line, &ok);
    if (!ok) return NULL;
    P->pos += 2;
    if (!expect_block_end(P)) return NULL;
    return n;
}

/* One {% ... %} statement (at its T_BLOCK_BEGIN). NULL with *ok for tags
 * that produce nothing ({% generation %}). */
static ct_node *parse_statement(parser *P, bool *skip) {
    int line = cur(P)->line;
    P->pos++;
    tok *t = cur(P);
    *skip = false;
    if (t->type != T_NAME) return unexpected(P, "a tag name");
    P->pos++;
    if (tok_is_name(t, "if")) return parse_if(P, line);
    if (tok_is_name(t, "for")) return parse_for(P, line);
    if (tok_is_name(t, "set")) return parse_set(P, line);
    if (tok_is_name(t, "macro")) return parse_macro(P, line);
    if (tok_is_name(t, "call")) return parse_callblock(P, line);
    if (tok_is_name(t, "filter")) return parse_filterblock(P, line);
    if (tok_is_name(t, "with")) return parse_with(P, line);
    if (tok_is_name(t, "break") || tok_is_name(t, "continue")) {
        bool brk = tok_is_name(t, "break");
        if (P->loop_depth == 0)
            return fail_at(P, line, BRISK_ERR_FORMAT, "'%s' outside a for loop", brk ? "break" : "continue");
        ct_node *n = node(P, brk ? N_BREAK : N_CONTINUE, line);
        if (!n || !expect_block_end(P)) return NULL;
        return n;
    }
    if (tok_is_name(t, "generation") || tok_is_name(t, "endgeneration")) {
        /* transformers' assistant-mask marker: the contents render as usual */
        *skip = true;
        expect_block_end(P);
        return NULL;
    }
    static const char *const unsupported[] = {"include", "import", "from", "extends", "block", "do",
                                              "autoescape", "trans", "pluralize", NULL};
    for (const char *const *u = unsupported; *u; u++)
        if (tok_is_name(t, *u)) return fail_at(P, line, BRISK_ERR_UNSUPPORTED, "unsupported tag '%s'", *u);
    char name[48];
    snprintf(name, sizeof name, "%.*s", (int)(t->n > 40 ? 40 : t->n), t->p);
    return fail_at(P, line, BRISK_ERR_FORMAT, "unknown tag '%s' (or an end tag without its opening tag)", name);
}

/* Statements until one of the end tags (left unconsumed at its "{%"), or
 * the end of the template when ends is NULL. */
static ct_node *parse_body(parser *P, const char *const *ends, const char *opener, int open_line, bool *ok) {
    ct_node *head = NULL, **tail = &head;
    *ok = false;
    if (!enter(P)) return NULL;
    for (;;) {
        tok *t = cur(P);
        ct_node *n = NULL;
        if (t->type == T_EOF) {
            if (ends) {
                char msg[96];
                snprintf(msg, sizeof msg, "'%s' opened on line %d is never closed (missing {%% end%s %%})",
                         opener, open_line, opener);
                return fail_at(P, t->line, BRISK_ERR_FORMAT, "%s", msg);
            }
            break;
        }
        if (ends && at_tag(P, ends)) break;
        if (t->type == T_TEXT) {
            if (!(n = node(P, N_TEXT, t->line))) return NULL;
            n->lit = ct_strv(t->p, t->n);
            P->pos++;
        } else if (t->type == T_VAR_BEGIN) {
            P->pos++;
            bool tup;
            if (!(n = node(P, N_OUTPUT, t->line))) return NULL;
            if (!(n->k[0] = parse_tuple(P, false, &tup))) return NULL;
            if (cur(P)->type != T_VAR_END) return unexpected(P, "'}}'");
            P->pos++;
        } else if (t->type == T_BLOCK_BEGIN) {
            bool skip;
            n = parse_statement(P, &skip);
            if (!n && !skip) return NULL;
            if (P->err) return NULL;
        } else {
            return unexpected(P, "text, '{{' or '{%'");
        }
        if (n) {
            *tail = n;
            tail = &n->next;
        }
    }
    P->depth--;
    *ok = true;
    return head;
}

brisk_status ct_parse(const char *src, size_t len, ct_arena *a, ct_node **out) {
    *out = NULL;
    /* newlines to "\n", one trailing newline dropped (keep_trailing_newline off) */
    char *s = ct_alloc(a, len + 1);
    if (!s) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    size_t n = 0;
    for (size_t i = 0; i < len; i++) {
        if (src[i] == '\r') {
            s[n++] = '\n';
            if (i + 1 < len && src[i + 1] == '\n') i++;
        } else {
            s[n++] = src[i];
        }
    }
    if (n && s[n - 1] == '\n') n--;
    lexer L = {.s = s, .n = n, .line = 1, .a = a};
    lex_all(&L);
    if (L.err) {
        free(L.toks);
        return L.err;
    }
    parser P = {.t = L.toks, .ntok = L.ntok, .a = a};
    bool ok;
    ct_node *body = parse_body(&P, NULL, NULL, 0, &ok);
    free(L.toks);
    if (!ok) return P.err ? P.err : bk_fail(BRISK_ERR_FORMAT, "chat template: parse error");
    *out = body;
    return BRISK_OK;
}
