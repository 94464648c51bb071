/* chat_template_parse.c — the parser of the Jinja subset (tokens from
 * chat_template_lex.c), following jinja2.parser's precedence:
 *   x if c else y < or < and < not < comparisons, in, not in
 *   < + - < ~ < * / // % < ** < unary - + < filters | and tests `is`
 *   < postfix . [] () < primary.
 * Every node records its line so runtime errors can name it.
 */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat_template_internal.h"

/* ---- parser ------------------------------------------------------------ */

typedef struct parser {
    ct_tok *t;
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

static ct_tok *cur(parser *P) { return &P->t[P->pos]; }
static ct_tok *peek(parser *P, size_t k) {
    size_t i = P->pos + k;
    return &P->t[i < P->ntok ? i : P->ntok - 1];
}
static bool is_op(parser *P, int op) { return cur(P)->type == T_OP && cur(P)->op == op; }
static bool is_name(parser *P, const char *name) {
    ct_tok *t = cur(P);
    return t->type == T_NAME && t->n == strlen(name) && !memcmp(t->p, name, t->n);
}
static bool tok_is_name(ct_tok *t, const char *name) {
    return t->type == T_NAME && t->n == strlen(name) && !memcmp(t->p, name, t->n);
}

static const char *tok_desc(ct_tok *t) {
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
    ct_tok *t = cur(P);
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

static ct_str name_of(ct_tok *t) { return (ct_str){t->p, t->n}; }

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
            ct_tok *nt = cur(P);
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
            ct_tok *t = cur(P);
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
    ct_tok *t = cur(P);
    if (t->type != T_NAME) {
        unexpected(P, "a filter or test name");
        return false;
    }
    P->pos++;
    *out = name_of(t);
    while (is_op(P, '.') && peek(P, 1)->type == T_NAME) {
        ct_tok *u = peek(P, 1);
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
            ct_tok *c = cur(P);
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
            ct_tok *t = cur(P);
            if (t->type != T_NAME) return unexpected(P, "a name");
            if (!(e = node(P, N_NAME, t->line))) return NULL;
            e->lit.s = name_of(t);
            P->pos++;
            if (is_op(P, '.')) { /* set ns.attr = ... */
                P->pos++;
                ct_tok *u = cur(P);
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
        ct_tok *c = cur(P);
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
    ct_tok *t = cur(P);
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
    ct_tok *t = cur(P);
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
        ct_tok *t = cur(P);
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
    ct_tok *t = peek(P, 1);
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
        ct_tok *t = cur(P);
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
    ct_tok *t = peek(P, 1);
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
    ct_tok *t0 = cur(P);
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
    ct_tok *t = cur(P);
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
        ct_tok *t = cur(P);
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
    ct_tok *t = cur(P);
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
        ct_tok *t = cur(P);
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
    ct_tok *toks;
    size_t ntok;
    BK_TRY(ct_lex(s, n, a, &toks, &ntok));
    parser P = {.t = toks, .ntok = ntok, .a = a};
    bool ok;
    ct_node *body = parse_body(&P, NULL, NULL, 0, &ok);
    free(toks);
    if (!ok) return P.err ? P.err : bk_fail(BRISK_ERR_FORMAT, "chat template: parse error");
    *out = body;
    return BRISK_OK;
}
