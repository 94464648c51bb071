/* chat_template_eval.c — the interpreter: scopes, statements, expressions,
 * operators and macro calls. Filters, tests, methods and global functions
 * are in chat_template_builtins.c.
 *
 * Every value of a render lives in one arena (freed when the render ends),
 * so values are plain structs passed by value and never freed one by one.
 * Scoping follows Jinja: a for loop and a macro call open a scope (a `set`
 * inside them does not leak out), `if` does not; macros see the scope they
 * were defined in. Statement execution returns 0, a negative brisk_status,
 * or CT_BREAK / CT_CONTINUE travelling up to the enclosing loop. */
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat_template_internal.h"

enum { CT_BREAK = 1, CT_CONTINUE = 2 };

struct ct_scope {
    ct_scope *parent;
    size_t n, cap;
    ct_str *names; /* (cap) */
    ct_val *vals;  /* (cap) */
};

brisk_status ct_fail(const ct_node *at, brisk_status s, const char *fmt, ...) {
    char msg[400];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    if (at) return bk_fail(s, "chat template line %d: %s", (int)at->line, msg);
    return bk_fail(s, "chat template: %s", msg);
}

brisk_status ct_nomem(const ct_node *at) {
    return ct_fail(at, BRISK_ERR_NOMEM, "out of memory (or over the %zu MiB working memory limit)",
                   CT_MAX_MEMORY >> 20);
}

static ct_scope *scope_new(ct_ctx *c, ct_scope *parent) {
    ct_scope *s = ct_alloc(&c->a, sizeof *s);
    if (s) s->parent = parent;
    return s;
}

static bool scope_set(ct_ctx *c, ct_scope *s, ct_str name, ct_val v) {
    for (size_t i = 0; i < s->n; i++)
        if (s->names[i].n == name.n && !memcmp(s->names[i].p, name.p, name.n)) {
            s->vals[i] = v;
            return true;
        }
    if (s->n == s->cap) {
        size_t cap = s->cap ? s->cap * 2 : 8;
        ct_str *nn = ct_alloc(&c->a, cap * sizeof *nn);
        ct_val *nv = ct_alloc(&c->a, cap * sizeof *nv);
        if (!nn || !nv) return false;
        if (s->n) {
            memcpy(nn, s->names, s->n * sizeof *nn);
            memcpy(nv, s->vals, s->n * sizeof *nv);
        }
        s->names = nn, s->vals = nv, s->cap = cap;
    }
    s->names[s->n] = name;
    s->vals[s->n++] = v;
    return true;
}

static const ct_val *scope_get(const ct_scope *s, ct_str name) {
    for (; s; s = s->parent)
        for (size_t i = s->n; i-- > 0;)
            if (s->names[i].n == name.n && !memcmp(s->names[i].p, name.p, name.n)) return &s->vals[i];
    return NULL;
}

static ct_str cstr(const char *s) { return (ct_str){s, strlen(s)}; }

static brisk_status eval(ct_ctx *c, const ct_node *n, ct_scope *sc, ct_val *out);
static int exec(ct_ctx *c, const ct_node *body, ct_scope *sc);

static brisk_status enter(ct_ctx *c, const ct_node *at) {
    if (++c->depth > CT_MAX_DEPTH)
        return ct_fail(at, BRISK_ERR_RANGE, "nesting deeper than %d (runaway macro recursion?)", CT_MAX_DEPTH);
    return BRISK_OK;
}

/* Runs body into a fresh buffer; the text becomes a string value. */
static brisk_status capture(ct_ctx *c, const ct_node *at, const ct_node *body, ct_scope *sc, ct_val *out) {
    ct_buf tmp = {.limit = CT_MAX_OUTPUT};
    ct_buf *saved = c->out;
    c->out = &tmp;
    int r = exec(c, body, sc);
    c->out = saved;
    if (r > 0) r = ct_fail(at, BRISK_ERR_FORMAT, "break/continue outside a loop");
    if (r < 0) {
        free(tmp.p);
        return (brisk_status)r;
    }
    char *s = tmp.n ? ct_alloc(&c->a, tmp.n) : NULL;
    if (tmp.n && !s) {
        free(tmp.p);
        return ct_nomem(at);
    }
    if (tmp.n) memcpy(s, tmp.p, tmp.n);
    free(tmp.p);
    *out = ct_strv(s ? s : "", tmp.n);
    return BRISK_OK;
}

brisk_status ct_to_str(ct_ctx *c, const ct_node *at, const ct_val *v, ct_val *out) {
    if (v->type == CT_STR) {
        *out = *v;
        return BRISK_OK;
    }
    ct_buf tmp = {.limit = CT_MAX_OUTPUT};
    brisk_status s = ct_buf_str(&tmp, v);
    if (s == BRISK_OK) {
        char *p = tmp.n ? ct_alloc(&c->a, tmp.n) : NULL;
        if (tmp.n && !p) s = ct_nomem(at);
        else {
            if (tmp.n) memcpy(p, tmp.p, tmp.n);
            *out = ct_strv(p ? p : "", tmp.n);
        }
    }
    free(tmp.p);
    return s;
}

brisk_status ct_iter(ct_ctx *c, const ct_node *at, const ct_val *v, ct_list **out) {
    switch (v->type) {
    case CT_LIST: *out = v->list; return BRISK_OK;
    case CT_UNDEF:
        if (!(*out = ct_list_new(&c->a, 0))) return ct_nomem(at);
        return BRISK_OK;
    case CT_DICT: {
        ct_list *l = ct_list_new(&c->a, v->dict->n);
        if (!l) return ct_nomem(at);
        for (size_t i = 0; i < v->dict->n; i++) l->v[i] = ct_strv(v->dict->k[i].p, v->dict->k[i].n);
        *out = l;
        return BRISK_OK;
    }
    case CT_STR: {
        size_t n = ct_utf8_len(v->s.p, v->s.n);
        ct_list *l = ct_list_new(&c->a, n);
        if (!l) return ct_nomem(at);
        size_t off = 0;
        for (size_t i = 0; i < n; i++) {
            size_t next = ct_utf8_offset(v->s.p + off, v->s.n - off, 1) + off;
            l->v[i] = ct_strv(v->s.p + off, next - off);
            off = next;
        }
        *out = l;
        return BRISK_OK;
    }
    default: return ct_fail(at, BRISK_ERR_FORMAT, "'%s' object is not iterable", ct_type_name(v));
    }
}

ct_val ct_getattr(const ct_val *obj, const char *name, size_t n) {
    if (obj->type == CT_DICT || obj->type == CT_NS) {
        ct_val *v = ct_dict_get(obj->dict, name, n);
        return v ? *v : ct_undef(NULL, 0);
    }
    if (obj->type == CT_LOOP) {
        const ct_loop *l = obj->loop;
        ct_str s = {name, n};
#define IS(lit) (s.n == sizeof(lit) - 1 && !memcmp(s.p, lit, s.n))
        if (IS("index")) return ct_int(l->index0 + 1);
        if (IS("index0")) return ct_int(l->index0);
        if (IS("revindex")) return ct_int(l->length - l->index0);
        if (IS("revindex0")) return ct_int(l->length - l->index0 - 1);
        if (IS("first")) return ct_bool(l->index0 == 0);
        if (IS("last")) return ct_bool(l->index0 == l->length - 1);
        if (IS("length")) return ct_int(l->length);
        if (IS("depth")) return ct_int(1);
        if (IS("depth0")) return ct_int(0);
        if (IS("previtem")) return l->index0 > 0 ? l->items[l->index0 - 1] : ct_undef(NULL, 0);
        if (IS("nextitem")) return l->index0 + 1 < l->length ? l->items[l->index0 + 1] : ct_undef(NULL, 0);
#undef IS
    }
    return ct_undef(NULL, 0);
}

const ct_val *ct_arg(const ct_args *a, size_t i, const char *name) {
    if (name)
        for (size_t k = 0; k < a->nk; k++)
            if (a->kn[k].n == strlen(name) && !memcmp(a->kn[k].p, name, a->kn[k].n)) return &a->kv[k];
    return i < a->np ? &a->pos[i] : NULL;
}

/* ---- operators --------------------------------------------------------- */

static bool is_intlike(const ct_val *v) { return v->type == CT_INT || v->type == CT_BOOL; }
static bool is_number(const ct_val *v) { return is_intlike(v) || v->type == CT_FLOAT; }
static int64_t as_int(const ct_val *v) { return v->type == CT_BOOL ? v->b : v->i; }
static double as_float(const ct_val *v) { return v->type == CT_FLOAT ? v->f : (double)as_int(v); }

static brisk_status type_error(const ct_node *at, const char *op, const ct_val *a, const ct_val *b) {
    if (a->type == CT_UNDEF || b->type == CT_UNDEF) {
        const ct_val *u = a->type == CT_UNDEF ? a : b;
        if (u->s.p) return ct_fail(at, BRISK_ERR_FORMAT, "'%.*s' is undefined (in '%s')", (int)u->s.n, u->s.p, op);
        return ct_fail(at, BRISK_ERR_FORMAT, "an undefined value in '%s'", op);
    }
    return ct_fail(at, BRISK_ERR_FORMAT, "unsupported operand type(s) for %s: '%s' and '%s'", op, ct_type_name(a),
                   ct_type_name(b));
}

static brisk_status concat(ct_ctx *c, const ct_node *at, ct_str x, ct_str y, ct_val *out) {
    if (x.n + y.n > CT_MAX_OUTPUT) return ct_fail(at, BRISK_ERR_RANGE, "string longer than %zu bytes", CT_MAX_OUTPUT);
    char *p = ct_alloc(&c->a, x.n + y.n + 1);
    if (!p) return ct_nomem(at);
    memcpy(p, x.p, x.n);
    memcpy(p + x.n, y.p, y.n);
    *out = ct_strv(p, x.n + y.n);
    return BRISK_OK;
}

static brisk_status repeat(ct_ctx *c, const ct_node *at, const ct_val *seq, int64_t times, ct_val *out) {
    if (times < 0) times = 0;
    size_t unit = seq->type == CT_STR ? seq->s.n : seq->list->n * sizeof(ct_val);
    if (unit && (uint64_t)times > CT_MAX_OUTPUT / unit)
        return ct_fail(at, BRISK_ERR_RANGE, "repetition result larger than %zu bytes", CT_MAX_OUTPUT);
    if (seq->type == CT_STR) {
        char *p = ct_alloc(&c->a, unit * (size_t)times + 1);
        if (!p) return ct_nomem(at);
        for (int64_t i = 0; i < times; i++) memcpy(p + (size_t)i * unit, seq->s.p, unit);
        *out = ct_strv(p, unit * (size_t)times);
        return BRISK_OK;
    }
    size_t n = seq->list->n;
    ct_list *l = ct_list_new(&c->a, n * (size_t)times);
    if (!l) return ct_nomem(at);
    for (int64_t i = 0; i < times; i++)
        if (n) memcpy(l->v + (size_t)i * n, seq->list->v, n * sizeof(ct_val));
    *out = (ct_val){.type = CT_LIST, .list = l};
    return BRISK_OK;
}

/* <, >, ... : numbers, strings (code point order = UTF-8 byte order), lists. */
static brisk_status compare(const ct_node *at, const ct_val *a, const ct_val *b, int *cmp, int depth) {
    if (is_number(a) && is_number(b)) {
        if (is_intlike(a) && is_intlike(b)) {
            int64_t x = as_int(a), y = as_int(b);
            *cmp = x < y ? -1 : x > y;
        } else {
            double x = as_float(a), y = as_float(b);
            *cmp = x < y ? -1 : x > y ? 1 : 0;
        }
        return BRISK_OK;
    }
    if (a->type == CT_STR && b->type == CT_STR) {
        size_t n = a->s.n < b->s.n ? a->s.n : b->s.n;
        int r = memcmp(a->s.p, b->s.p, n);
        *cmp = r ? (r < 0 ? -1 : 1) : (a->s.n < b->s.n ? -1 : a->s.n > b->s.n);
        return BRISK_OK;
    }
    if (a->type == CT_LIST && b->type == CT_LIST && depth < 100) {
        for (size_t i = 0; i < a->list->n && i < b->list->n; i++) {
            if (ct_equal(&a->list->v[i], &b->list->v[i])) continue;
            return compare(at, &a->list->v[i], &b->list->v[i], cmp, depth + 1);
        }
        *cmp = a->list->n < b->list->n ? -1 : a->list->n > b->list->n;
        return BRISK_OK;
    }
    return ct_fail(at, BRISK_ERR_FORMAT, "'<' not supported between '%s' and '%s'", ct_type_name(a),
                   ct_type_name(b));
}

static brisk_status contains(const ct_node *at, const ct_val *item, const ct_val *seq, bool *out) {
    switch (seq->type) {
    case CT_STR:
        if (item->type != CT_STR)
            return ct_fail(at, BRISK_ERR_FORMAT, "'in <string>' requires string as left operand, not %s",
                           ct_type_name(item));
        if (item->s.n == 0) *out = true;
        else *out = item->s.n <= seq->s.n && memmem(seq->s.p, seq->s.n, item->s.p, item->s.n) != NULL;
        return BRISK_OK;
    case CT_LIST:
        *out = false;
        for (size_t i = 0; i < seq->list->n && !*out; i++) *out = ct_equal(item, &seq->list->v[i]);
        return BRISK_OK;
    case CT_DICT:
    case CT_NS:
        *out = item->type == CT_STR && ct_dict_get(seq->dict, item->s.p, item->s.n);
        return BRISK_OK;
    case CT_UNDEF: *out = false; return BRISK_OK;
    default: return ct_fail(at, BRISK_ERR_FORMAT, "argument of type '%s' is not iterable", ct_type_name(seq));
    }
}

static brisk_status arith(ct_ctx *c, const ct_node *at, int op, const ct_val *a, const ct_val *b, ct_val *out) {
    static const char *const names[] = {"", "+", "-", "*", "/", "//", "%", "**"};
    const char *opname = op <= OP_POW ? names[op] : "?";
    if (is_intlike(a) && is_intlike(b)) {
        int64_t x = as_int(a), y = as_int(b), r;
        switch (op) {
        case OP_ADD: if (__builtin_add_overflow(x, y, &r)) goto overflow; *out = ct_int(r); return BRISK_OK;
        case OP_SUB: if (__builtin_sub_overflow(x, y, &r)) goto overflow; *out = ct_int(r); return BRISK_OK;
        case OP_MUL: if (__builtin_mul_overflow(x, y, &r)) goto overflow; *out = ct_int(r); return BRISK_OK;
        case OP_DIV:
            if (y == 0) return ct_fail(at, BRISK_ERR_FORMAT, "division by zero");
            *out = ct_float((double)x / (double)y);
            return BRISK_OK;
        case OP_FLOORDIV:
        case OP_MOD:
            if (y == 0) return ct_fail(at, BRISK_ERR_FORMAT, "integer division or modulo by zero");
            if (x == INT64_MIN && y == -1) goto overflow;
            r = x / y;
            if ((x % y != 0) && ((x < 0) != (y < 0))) r--; /* floor, as Python */
            *out = ct_int(op == OP_FLOORDIV ? r : x - r * y);
            return BRISK_OK;
        case OP_POW:
            if (y >= 0) {
                int64_t acc = 1;
                for (int64_t i = 0; i < y; i++) {
                    if (__builtin_mul_overflow(acc, x, &acc)) goto overflow;
                    if (acc == 0 || acc == 1) break; /* 0**n, 1**n */
                    if (acc == -1 && i < y - 1) { acc = ((y - i - 1) % 2) ? 1 : -1; break; }
                }
                *out = ct_int(acc);
                return BRISK_OK;
            }
            if (x == 0) return ct_fail(at, BRISK_ERR_FORMAT, "0 cannot be raised to a negative power");
            *out = ct_float(pow((double)x, (double)y));
            return BRISK_OK;
        }
    }
    if (is_number(a) && is_number(b)) {
        double x = as_float(a), y = as_float(b);
        switch (op) {
        case OP_ADD: *out = ct_float(x + y); return BRISK_OK;
        case OP_SUB: *out = ct_float(x - y); return BRISK_OK;
        case OP_MUL: *out = ct_float(x * y); return BRISK_OK;
        case OP_DIV:
            if (y == 0) return ct_fail(at, BRISK_ERR_FORMAT, "float division by zero");
            *out = ct_float(x / y);
            return BRISK_OK;
        case OP_FLOORDIV:
        case OP_MOD: {
            if (y == 0) return ct_fail(at, BRISK_ERR_FORMAT, "float modulo by zero");
            double m = fmod(x, y);
            if (m != 0 && ((m < 0) != (y < 0))) m += y;
            *out = ct_float(op == OP_MOD ? m : floor((x - m) / y + 0.5));
            return BRISK_OK;
        }
        case OP_POW:
            if (x == 0 && y < 0) return ct_fail(at, BRISK_ERR_FORMAT, "0.0 cannot be raised to a negative power");
            *out = ct_float(pow(x, y));
            if (isnan(out->f) && !isnan(x) && !isnan(y))
                return ct_fail(at, BRISK_ERR_FORMAT, "a complex result of '**'");
            return BRISK_OK;
        }
    }
    if (op == OP_ADD && a->type == CT_STR && b->type == CT_STR) return concat(c, at, a->s, b->s, out);
    if (op == OP_ADD && a->type == CT_LIST && b->type == CT_LIST) {
        ct_list *l = ct_list_new(&c->a, a->list->n + b->list->n);
        if (!l) return ct_nomem(at);
        if (a->list->n) memcpy(l->v, a->list->v, a->list->n * sizeof(ct_val));
        if (b->list->n) memcpy(l->v + a->list->n, b->list->v, b->list->n * sizeof(ct_val));
        *out = (ct_val){.type = CT_LIST, .list = l};
        return BRISK_OK;
    }
    if (op == OP_MUL && (a->type == CT_STR || a->type == CT_LIST) && is_intlike(b)) return repeat(c, at, a, as_int(b), out);
    if (op == OP_MUL && (b->type == CT_STR || b->type == CT_LIST) && is_intlike(a)) return repeat(c, at, b, as_int(a), out);
    if (op == OP_MOD && a->type == CT_STR) /* 'x=%s' % v, 'a %s %d' % (x, y) */
        return b->type == CT_LIST ? ct_printf(c, at, a->s, b->list->v, b->list->n, out) : ct_printf(c, at, a->s, b, 1, out);
    return type_error(at, opname, a, b);
overflow:
    return ct_fail(at, BRISK_ERR_RANGE, "integer overflow in '%s'", opname);
}

static brisk_status binop(ct_ctx *c, const ct_node *n, ct_scope *sc, ct_val *out) {
    ct_val a, b;
    BK_TRY(eval(c, n->k[0], sc, &a));
    BK_TRY(eval(c, n->k[1], sc, &b));
    int cmp = 0;
    bool in = false;
    switch (n->op) {
    case OP_CONCAT: {
        ct_val x, y;
        BK_TRY(ct_to_str(c, n, &a, &x));
        BK_TRY(ct_to_str(c, n, &b, &y));
        return concat(c, n, x.s, y.s, out);
    }
    case OP_EQ: *out = ct_bool(ct_equal(&a, &b)); return BRISK_OK;
    case OP_NE: *out = ct_bool(!ct_equal(&a, &b)); return BRISK_OK;
    case OP_LT:
    case OP_LE:
    case OP_GT:
    case OP_GE:
        BK_TRY(compare(n, &a, &b, &cmp, 0));
        *out = ct_bool(n->op == OP_LT ? cmp < 0 : n->op == OP_LE ? cmp <= 0 : n->op == OP_GT ? cmp > 0 : cmp >= 0);
        return BRISK_OK;
    case OP_IN:
    case OP_NOTIN:
        BK_TRY(contains(n, &a, &b, &in));
        *out = ct_bool(n->op == OP_IN ? in : !in);
        return BRISK_OK;
    default: return arith(c, n, n->op, &a, &b, out);
    }
}

/* ---- subscripts -------------------------------------------------------- */

static brisk_status item(ct_ctx *c, const ct_node *at, const ct_val *obj, const ct_val *key, ct_val *out) {
    if ((obj->type == CT_DICT || obj->type == CT_NS || obj->type == CT_LOOP) && key->type == CT_STR) {
        *out = ct_getattr(obj, key->s.p, key->s.n);
        return BRISK_OK;
    }
    if ((obj->type == CT_LIST || obj->type == CT_STR) && is_intlike(key)) {
        int64_t i = as_int(key);
        size_t len = obj->type == CT_LIST ? obj->list->n : ct_utf8_len(obj->s.p, obj->s.n);
        if (i < 0) i += (int64_t)len;
        if (i < 0 || (uint64_t)i >= len) {
            *out = ct_undef(NULL, 0);
            return BRISK_OK;
        }
        if (obj->type == CT_LIST) {
            *out = obj->list->v[i];
        } else {
            size_t o = ct_utf8_offset(obj->s.p, obj->s.n, (size_t)i);
            size_t e = ct_utf8_offset(obj->s.p + o, obj->s.n - o, 1) + o;
            *out = ct_strv(obj->s.p + o, e - o);
        }
        return BRISK_OK;
    }
    (void)c;
    (void)at;
    *out = ct_undef(NULL, 0); /* Jinja's getitem: a missing or mistyped key is undefined */
    return BRISK_OK;
}

static brisk_status slice(ct_ctx *c, const ct_node *n, ct_scope *sc, ct_val *out) {
    ct_val obj, bound[3];
    BK_TRY(eval(c, n->k[0], sc, &obj));
    for (int i = 0; i < 3; i++) {
        bound[i] = ct_none();
        if (n->k[i + 1]) BK_TRY(eval(c, n->k[i + 1], sc, &bound[i]));
        if (bound[i].type != CT_NONE && !is_intlike(&bound[i]))
            return ct_fail(n, BRISK_ERR_FORMAT, "slice indices must be integers or None, not %s", ct_type_name(&bound[i]));
    }
    if (obj.type != CT_LIST && obj.type != CT_STR)
        return ct_fail(n, BRISK_ERR_FORMAT, "cannot slice a %s", ct_type_name(&obj));
    int64_t len = obj.type == CT_LIST ? (int64_t)obj.list->n : (int64_t)ct_utf8_len(obj.s.p, obj.s.n);
    int64_t step = bound[2].type == CT_NONE ? 1 : as_int(&bound[2]);
    if (step == 0) return ct_fail(n, BRISK_ERR_FORMAT, "slice step cannot be zero");
    int64_t start, stop;
    /* Python's PySlice_AdjustIndices */
    if (bound[0].type == CT_NONE) start = step < 0 ? len - 1 : 0;
    else {
        start = as_int(&bound[0]);
        if (start < 0) start = start + len < 0 ? (step < 0 ? -1 : 0) : start + len;
        else if (start >= len) start = step < 0 ? len - 1 : len;
    }
    if (bound[1].type == CT_NONE) stop = step < 0 ? -1 : len;
    else {
        stop = as_int(&bound[1]);
        if (stop < 0) stop = stop + len < 0 ? (step < 0 ? -1 : 0) : stop + len;
        else if (stop >= len) stop = step < 0 ? len - 1 : len;
    }
    int64_t count = 0;
    if (step > 0 && start < stop) count = (stop - start - 1) / step + 1;
    if (step < 0 && stop < start) count = (start - stop - 1) / (-step) + 1;
    if (obj.type == CT_LIST) {
        ct_list *l = ct_list_new(&c->a, (size_t)count);
        if (!l) return ct_nomem(n);
        for (int64_t i = 0; i < count; i++) l->v[i] = obj.list->v[start + i * step];
        *out = (ct_val){.type = CT_LIST, .list = l};
        return BRISK_OK;
    }
    if (step == 1) { /* s[a:b], the common case: two offsets, no table */
        size_t o = count ? ct_utf8_offset(obj.s.p, obj.s.n, (size_t)start) : 0;
        size_t e = count ? ct_utf8_offset(obj.s.p + o, obj.s.n - o, (size_t)count) + o : 0;
        *out = ct_strv(obj.s.p + o, e - o);
        return BRISK_OK;
    }
    /* other steps: code point offsets first */
    size_t *offs = malloc(((size_t)len + 1) * sizeof *offs);
    char *p = ct_alloc(&c->a, obj.s.n + 1);
    if (!offs || !p) {
        free(offs);
        return ct_nomem(n);
    }
    size_t o = 0, k = 0;
    for (int64_t i = 0; i <= len; i++) {
        offs[i] = o;
        if (i < len) o += ct_utf8_offset(obj.s.p + o, obj.s.n - o, 1);
    }
    for (int64_t i = 0; i < count; i++) {
        int64_t j = start + i * step;
        memcpy(p + k, obj.s.p + offs[j], offs[j + 1] - offs[j]);
        k += offs[j + 1] - offs[j];
    }
    free(offs);
    *out = ct_strv(p, k);
    return BRISK_OK;
}

/* ---- calls ------------------------------------------------------------- */

static brisk_status eval_args(ct_ctx *c, const ct_node *list, ct_scope *sc, ct_args *a) {
    size_t np = 0, nk = 0;
    for (const ct_node *x = list; x; x = x->next) x->kind == N_KWARG ? nk++ : np++;
    memset(a, 0, sizeof *a);
    if ((np && !(a->pos = ct_alloc(&c->a, np * sizeof *a->pos))) ||
        (nk && (!(a->kn = ct_alloc(&c->a, nk * sizeof *a->kn)) || !(a->kv = ct_alloc(&c->a, nk * sizeof *a->kv)))))
        return ct_nomem(list);
    for (const ct_node *x = list; x; x = x->next) {
        if (x->kind == N_KWARG) {
            for (size_t k = 0; k < a->nk; k++)
                if (a->kn[k].n == x->lit.s.n && !memcmp(a->kn[k].p, x->lit.s.p, x->lit.s.n))
                    return ct_fail(x, BRISK_ERR_FORMAT, "keyword argument '%.*s' repeated", (int)x->lit.s.n, x->lit.s.p);
            a->kn[a->nk] = x->lit.s;
            BK_TRY(eval(c, x->k[0], sc, &a->kv[a->nk++]));
        } else {
            BK_TRY(eval(c, x, sc, &a->pos[a->np++]));
        }
    }
    return BRISK_OK;
}

static brisk_status call_macro(ct_ctx *c, const ct_node *at, const ct_macro *m, const ct_args *a,
                               const ct_val *caller, ct_val *out) {
    const ct_node *mn = m->node;
    bool is_macro = mn->kind == N_MACRO;
    const ct_node *params = is_macro ? mn->k[0] : mn->k[1];
    const ct_node *body = is_macro ? mn->k[1] : mn->k[2];
    ct_str name = is_macro ? mn->lit.s : cstr("caller");
    BK_TRY(enter(c, at));
    ct_scope *sc = scope_new(c, m->closure);
    if (!sc) return ct_nomem(at);
    size_t nparams = 0;
    bool *used_kw = a->nk ? ct_alloc(&c->a, a->nk) : NULL;
    if (a->nk && !used_kw) return ct_nomem(at);
    for (const ct_node *p = params; p; p = p->next, nparams++) {
        const ct_val *v = nparams < a->np ? &a->pos[nparams] : NULL;
        for (size_t k = 0; k < a->nk; k++)
            if (a->kn[k].n == p->lit.s.n && !memcmp(a->kn[k].p, p->lit.s.p, p->lit.s.n)) {
                if (v) return ct_fail(at, BRISK_ERR_FORMAT, "macro '%.*s' got multiple values for argument '%.*s'",
                                      (int)name.n, name.p, (int)p->lit.s.n, p->lit.s.p);
                v = &a->kv[k];
                used_kw[k] = true;
            }
        if (!scope_set(c, sc, p->lit.s, v ? *v : ct_undef(p->lit.s.p, p->lit.s.n))) return ct_nomem(at);
    }
    /* defaults see the other parameters, as in Jinja */
    size_t i = 0;
    for (const ct_node *p = params; p; p = p->next, i++) {
        const ct_val *cur = scope_get(sc, p->lit.s);
        if (p->k[0] && cur && cur->type == CT_UNDEF && i >= a->np) {
            bool given = false;
            for (size_t k = 0; k < a->nk; k++) given |= used_kw[k] && a->kn[k].n == p->lit.s.n &&
                                                       !memcmp(a->kn[k].p, p->lit.s.p, p->lit.s.n);
            if (!given) {
                ct_val d;
                BK_TRY(eval(c, p->k[0], sc, &d));
                if (!scope_set(c, sc, p->lit.s, d)) return ct_nomem(at);
            }
        }
    }
    if (a->np > nparams) {
        if (!(mn->op & CT_USES_VARARGS))
            return ct_fail(at, BRISK_ERR_FORMAT, "macro '%.*s' takes not more than %zu argument(s)", (int)name.n,
                           name.p, nparams);
        ct_list *l = ct_list_new(&c->a, a->np - nparams);
        if (!l) return ct_nomem(at);
        memcpy(l->v, a->pos + nparams, (a->np - nparams) * sizeof(ct_val));
        if (!scope_set(c, sc, cstr("varargs"), (ct_val){.type = CT_LIST, .list = l})) return ct_nomem(at);
    } else if (mn->op & CT_USES_VARARGS) {
        ct_list *l = ct_list_new(&c->a, 0);
        if (!l || !scope_set(c, sc, cstr("varargs"), (ct_val){.type = CT_LIST, .list = l})) return ct_nomem(at);
    }
    ct_dict *kw = NULL;
    for (size_t k = 0; k < a->nk; k++) {
        if (used_kw[k]) continue;
        if (!(mn->op & CT_USES_KWARGS))
            return ct_fail(at, BRISK_ERR_FORMAT, "macro '%.*s' takes no keyword argument '%.*s'", (int)name.n, name.p,
                           (int)a->kn[k].n, a->kn[k].p);
        if ((!kw && !(kw = ct_dict_new(&c->a, a->nk))) || !ct_dict_set(&c->a, kw, a->kn[k], a->kv[k]))
            return ct_nomem(at);
    }
    if (mn->op & CT_USES_KWARGS) {
        if (!kw && !(kw = ct_dict_new(&c->a, 0))) return ct_nomem(at);
        if (!scope_set(c, sc, cstr("kwargs"), (ct_val){.type = CT_DICT, .dict = kw})) return ct_nomem(at);
    }
    if (is_macro && (mn->op & CT_USES_CALLER))
        if (!scope_set(c, sc, cstr("caller"), caller ? *caller : ct_undef("caller", 6))) return ct_nomem(at);
    brisk_status s = capture(c, at, body, sc, out);
    c->depth--;
    return s;
}

static brisk_status call_value(ct_ctx *c, const ct_node *at, const ct_val *fn, const ct_args *a, const ct_val *caller,
                               ct_val *out) {
    if (fn->type == CT_MACRO) return call_macro(c, at, fn->macro, a, caller, out);
    if (fn->type == CT_FUNC) return ct_call_func(c, at, fn->func, a, out);
    if (fn->type == CT_UNDEF && fn->s.p)
        return ct_fail(at, BRISK_ERR_FORMAT, "'%.*s' is undefined (called as a function)", (int)fn->s.n, fn->s.p);
    return ct_fail(at, BRISK_ERR_FORMAT, "'%s' object is not callable", ct_type_name(fn));
}

static brisk_status call(ct_ctx *c, const ct_node *n, ct_scope *sc, const ct_val *caller, ct_val *out) {
    const ct_node *callee = n->k[0];
    ct_args a;
    if (callee->kind == N_ATTR) {
        /* obj.name(...): a callable stored under that key, else a method */
        ct_val obj;
        BK_TRY(eval(c, callee->k[0], sc, &obj));
        BK_TRY(eval_args(c, n->k[1], sc, &a));
        if (obj.type == CT_DICT || obj.type == CT_NS) {
            ct_val *v = ct_dict_get(obj.dict, callee->lit.s.p, callee->lit.s.n);
            if (v && (v->type == CT_MACRO || v->type == CT_FUNC)) return call_value(c, n, v, &a, caller, out);
        }
        return ct_method(c, n, &obj, callee->lit.s, &a, out);
    }
    ct_val fn;
    BK_TRY(eval(c, callee, sc, &fn));
    BK_TRY(eval_args(c, n->k[1], sc, &a));
    return call_value(c, n, &fn, &a, caller, out);
}

/* ---- expressions ------------------------------------------------------- */

static brisk_status eval_inner(ct_ctx *c, const ct_node *n, ct_scope *sc, ct_val *out) {
    switch (n->kind) {
    case N_CONST: *out = n->lit; return BRISK_OK;
    case N_NAME: {
        const ct_val *v = scope_get(sc, n->lit.s);
        if (v) {
            *out = *v;
            return BRISK_OK;
        }
        int f = ct_func_lookup(n->lit.s);
        if (f) *out = (ct_val){.type = CT_FUNC, .func = f};
        else *out = ct_undef(n->lit.s.p, n->lit.s.n);
        return BRISK_OK;
    }
    case N_LIST:
    case N_TUPLE: {
        size_t k = 0;
        for (const ct_node *x = n->k[0]; x; x = x->next) k++;
        ct_list *l = ct_list_new(&c->a, k);
        if (!l) return ct_nomem(n);
        k = 0;
        for (const ct_node *x = n->k[0]; x; x = x->next) BK_TRY(eval(c, x, sc, &l->v[k++]));
        *out = (ct_val){.type = CT_LIST, .list = l};
        return BRISK_OK;
    }
    case N_DICT: {
        ct_dict *d = ct_dict_new(&c->a, 4);
        if (!d) return ct_nomem(n);
        for (const ct_node *p = n->k[0]; p; p = p->next) {
            ct_val k, v;
            BK_TRY(eval(c, p->k[0], sc, &k));
            if (k.type != CT_STR) return ct_fail(p, BRISK_ERR_UNSUPPORTED, "unsupported: dict keys other than strings");
            BK_TRY(eval(c, p->k[1], sc, &v));
            if (!ct_dict_set(&c->a, d, k.s, v)) return ct_nomem(n);
        }
        *out = (ct_val){.type = CT_DICT, .dict = d};
        return BRISK_OK;
    }
    case N_BINOP: return binop(c, n, sc, out);
    case N_AND:
    case N_OR:
        BK_TRY(eval(c, n->k[0], sc, out));
        if (ct_truthy(out) == (n->kind == N_OR)) return BRISK_OK;
        return eval(c, n->k[1], sc, out);
    case N_NOT:
        BK_TRY(eval(c, n->k[0], sc, out));
        *out = ct_bool(!ct_truthy(out));
        return BRISK_OK;
    case N_NEG:
    case N_POS: {
        ct_val v;
        BK_TRY(eval(c, n->k[0], sc, &v));
        if (!is_number(&v))
            return ct_fail(n, BRISK_ERR_FORMAT, "bad operand type for unary %c: '%s'", n->kind == N_NEG ? '-' : '+',
                           ct_type_name(&v));
        if (n->kind == N_POS) *out = v.type == CT_BOOL ? ct_int(v.b) : v;
        else if (v.type == CT_FLOAT) *out = ct_float(-v.f);
        else if (as_int(&v) == INT64_MIN) return ct_fail(n, BRISK_ERR_RANGE, "integer overflow in unary -");
        else *out = ct_int(-as_int(&v));
        return BRISK_OK;
    }
    case N_COND: {
        ct_val t;
        BK_TRY(eval(c, n->k[0], sc, &t));
        if (ct_truthy(&t)) return eval(c, n->k[1], sc, out);
        if (n->k[2]) return eval(c, n->k[2], sc, out);
        *out = ct_undef(NULL, 0);
        return BRISK_OK;
    }
    case N_ATTR: {
        ct_val obj;
        BK_TRY(eval(c, n->k[0], sc, &obj));
        *out = ct_getattr(&obj, n->lit.s.p, n->lit.s.n);
        return BRISK_OK;
    }
    case N_ITEM: {
        ct_val obj, key;
        BK_TRY(eval(c, n->k[0], sc, &obj));
        BK_TRY(eval(c, n->k[1], sc, &key));
        return item(c, n, &obj, &key, out);
    }
    case N_SLICE: return slice(c, n, sc, out);
    case N_CALL: return call(c, n, sc, NULL, out);
    case N_FILTER: {
        ct_val x;
        ct_args a;
        if (n->k[0]) BK_TRY(eval(c, n->k[0], sc, &x));
        else x = c->filter_base;
        BK_TRY(eval_args(c, n->k[1], sc, &a));
        return ct_filter(c, n, n->lit.s, &x, &a, out);
    }
    case N_TEST: {
        ct_val x;
        ct_args a;
        bool r;
        BK_TRY(eval(c, n->k[0], sc, &x));
        BK_TRY(eval_args(c, n->k[1], sc, &a));
        BK_TRY(ct_test(c, n, n->lit.s, &x, &a, &r));
        *out = ct_bool(n->op ? !r : r);
        return BRISK_OK;
    }
    default: return ct_fail(n, BRISK_ERR_FORMAT, "internal error: node %d is not an expression", n->kind);
    }
}

static brisk_status eval(ct_ctx *c, const ct_node *n, ct_scope *sc, ct_val *out) {
    BK_TRY(enter(c, n));
    brisk_status s = eval_inner(c, n, sc, out);
    c->depth--;
    return s;
}

/* ---- statements -------------------------------------------------------- */

static brisk_status assign(ct_ctx *c, const ct_node *target, const ct_val *v, ct_scope *sc) {
    if (target->kind == N_NAME) {
        if (!scope_set(c, sc, target->lit.s, *v)) return ct_nomem(target);
        return BRISK_OK;
    }
    if (target->kind == N_ATTR) {
        const ct_val *ns = scope_get(sc, target->k[0]->lit.s);
        if (!ns || ns->type != CT_NS)
            return ct_fail(target, BRISK_ERR_FORMAT, "cannot assign attribute on a %s (only on a namespace())",
                           ns ? ct_type_name(ns) : "undefined value");
        if (!ct_dict_set(&c->a, ns->dict, target->lit.s, *v)) return ct_nomem(target);
        return BRISK_OK;
    }
    /* a tuple of names */
    size_t k = 0;
    for (const ct_node *x = target->k[0]; x; x = x->next) k++;
    ct_list *l;
    BK_TRY(ct_iter(c, target, v, &l));
    if (l->n != k)
        return ct_fail(target, BRISK_ERR_FORMAT, "cannot unpack %zu value(s) into %zu name(s)", l->n, k);
    k = 0;
    for (const ct_node *x = target->k[0]; x; x = x->next) BK_TRY(assign(c, x, &l->v[k++], sc));
    return BRISK_OK;
}

static int exec_for(ct_ctx *c, const ct_node *n, ct_scope *sc) {
    ct_val it;
    ct_list *src;
    BK_TRY(eval(c, n->k[1], sc, &it));
    BK_TRY(ct_iter(c, n, &it, &src));
    ct_scope *ls = scope_new(c, sc);
    if (!ls) return ct_nomem(n);
    /* the loop's `if` filter runs first: loop.length counts what is left */
    const ct_val *items = src->v;
    size_t count = src->n;
    if (n->k[4]) {
        ct_val *kept = src->n ? ct_alloc(&c->a, src->n * sizeof *kept) : NULL;
        if (src->n && !kept) return ct_nomem(n);
        count = 0;
        for (size_t i = 0; i < src->n; i++) {
            ct_val t;
            if (++c->iterations > CT_MAX_ITERATIONS) goto too_many;
            BK_TRY(assign(c, n->k[0], &src->v[i], ls));
            BK_TRY(eval(c, n->k[4], ls, &t));
            if (ct_truthy(&t)) kept[count++] = src->v[i];
        }
        items = kept;
    }
    /* one loop object, updated in place: no allocation per iteration */
    ct_loop *loop = ct_alloc(&c->a, sizeof *loop);
    if (!loop) return ct_nomem(n);
    loop->length = (int64_t)count;
    loop->items = items;
    if (count && !scope_set(c, ls, cstr("loop"), (ct_val){.type = CT_LOOP, .loop = loop})) return ct_nomem(n);
    for (size_t i = 0; i < count; i++) {
        if (++c->iterations > CT_MAX_ITERATIONS) goto too_many;
        loop->index0 = (int64_t)i;
        BK_TRY(assign(c, n->k[0], &items[i], ls));
        int r = exec(c, n->k[2], ls);
        if (r < 0) return r;
        if (r == CT_BREAK) break;
    }
    if (count == 0 && n->k[3]) return exec(c, n->k[3], ls);
    return BRISK_OK;
too_many:
    return ct_fail(n, BRISK_ERR_RANGE, "more than %lld loop iterations", CT_MAX_ITERATIONS);
}

static int exec_stmt(ct_ctx *c, const ct_node *n, ct_scope *sc) {
    switch (n->kind) {
    case N_TEXT: return ct_buf_put(c->out, n->lit.s.p, n->lit.s.n);
    case N_OUTPUT: {
        ct_val v;
        BK_TRY(eval(c, n->k[0], sc, &v));
        return ct_buf_str(c->out, &v);
    }
    case N_IF: {
        ct_val t;
        BK_TRY(eval(c, n->k[0], sc, &t));
        if (ct_truthy(&t)) return exec(c, n->k[1], sc);
        return exec(c, n->k[2], sc);
    }
    case N_FOR: return exec_for(c, n, sc);
    case N_SET: {
        ct_val v;
        if (n->k[1]) BK_TRY(eval(c, n->k[1], sc, &v));
        else BK_TRY(capture(c, n, n->k[2], sc, &v));
        return assign(c, n->k[0], &v, sc);
    }
    case N_MACRO: {
        ct_macro *m = ct_alloc(&c->a, sizeof *m);
        if (!m) return ct_nomem(n);
        m->node = n;
        m->closure = sc;
        if (!scope_set(c, sc, n->lit.s, (ct_val){.type = CT_MACRO, .macro = m})) return ct_nomem(n);
        return BRISK_OK;
    }
    case N_CALLBLOCK: {
        ct_macro *m = ct_alloc(&c->a, sizeof *m);
        if (!m) return ct_nomem(n);
        m->node = n;
        m->closure = sc;
        ct_val caller = {.type = CT_MACRO, .macro = m}, v;
        BK_TRY(call(c, n->k[0], sc, &caller, &v));
        return ct_buf_str(c->out, &v);
    }
    case N_FILTERBLK: {
        ct_val text, v, saved = c->filter_base;
        BK_TRY(capture(c, n, n->k[1], sc, &text));
        c->filter_base = text;
        brisk_status s = eval(c, n->k[0], sc, &v);
        c->filter_base = saved;
        BK_TRY(s);
        return ct_buf_str(c->out, &v);
    }
    case N_WITH: {
        ct_scope *ws = scope_new(c, sc);
        if (!ws) return ct_nomem(n);
        for (const ct_node *s = n->k[0]; s; s = s->next) {
            ct_val v;
            BK_TRY(eval(c, s->k[1], sc, &v));
            BK_TRY(assign(c, s->k[0], &v, ws));
        }
        return exec(c, n->k[1], ws);
    }
    case N_BREAK: return CT_BREAK;
    case N_CONTINUE: return CT_CONTINUE;
    default: return ct_fail(n, BRISK_ERR_FORMAT, "internal error: node %d is not a statement", n->kind);
    }
}

static int exec(ct_ctx *c, const ct_node *body, ct_scope *sc) {
    if (!body) return BRISK_OK;
    BK_TRY(enter(c, body));
    int r = BRISK_OK;
    for (const ct_node *n = body; n && r == BRISK_OK; n = n->next) r = exec_stmt(c, n, sc);
    c->depth--;
    return r;
}

/* ---- entry ------------------------------------------------------------- */

static brisk_status from_json(ct_ctx *c, const cJSON *j, ct_val *out, int depth) {
    if (depth > 1000) return ct_fail(NULL, BRISK_ERR_RANGE, "variables nested too deeply");
    if (cJSON_IsNull(j)) *out = ct_none();
    else if (cJSON_IsBool(j)) *out = ct_bool(cJSON_IsTrue(j));
    else if (cJSON_IsNumber(j)) {
        double d = j->valuedouble;
        /* JSON has one number type; integral values act as ints, as in JS */
        if (d == floor(d) && fabs(d) < 9.2e18) *out = ct_int((int64_t)d);
        else *out = ct_float(d);
    } else if (cJSON_IsString(j)) *out = ct_strv(j->valuestring, strlen(j->valuestring));
    else if (cJSON_IsArray(j)) {
        ct_list *l = ct_list_new(&c->a, (size_t)cJSON_GetArraySize(j));
        if (!l) return ct_nomem(NULL);
        size_t i = 0;
        for (const cJSON *x = j->child; x && i < l->n; x = x->next) BK_TRY(from_json(c, x, &l->v[i++], depth + 1));
        *out = (ct_val){.type = CT_LIST, .list = l};
    } else if (cJSON_IsObject(j)) {
        ct_dict *d = ct_dict_new(&c->a, (size_t)cJSON_GetArraySize(j));
        if (!d) return ct_nomem(NULL);
        for (const cJSON *x = j->child; x; x = x->next) {
            ct_val v;
            if (!x->string) continue;
            BK_TRY(from_json(c, x, &v, depth + 1));
            if (!ct_dict_set(&c->a, d, cstr(x->string), v)) return ct_nomem(NULL);
        }
        *out = (ct_val){.type = CT_DICT, .dict = d};
    } else {
        return ct_fail(NULL, BRISK_ERR_INVALID_ARG, "variables: unsupported JSON value");
    }
    return BRISK_OK;
}

brisk_status ct_render(const ct_node *body, const cJSON *vars, long long now, char **out, size_t *out_len) {
    if (vars && !cJSON_IsObject(vars))
        return bk_fail(BRISK_ERR_INVALID_ARG, "chat template: the variables must be a JSON object");
    ct_buf buf = {.limit = CT_MAX_OUTPUT};
    ct_ctx c = {.a = {.limit = CT_MAX_MEMORY}, .out = &buf, .now = now};
    brisk_status s = BRISK_OK;
    if (!(c.globals = scope_new(&c, NULL))) s = ct_nomem(NULL);
    for (const cJSON *x = vars ? vars->child : NULL; x && s == BRISK_OK; x = x->next) {
        ct_val v;
        if (!x->string) continue;
        s = from_json(&c, x, &v, 0);
        if (s == BRISK_OK && !scope_set(&c, c.globals, cstr(x->string), v)) s = ct_nomem(NULL);
    }
    if (s == BRISK_OK) {
        int r = exec(&c, body, c.globals);
        s = r > 0 ? ct_fail(NULL, BRISK_ERR_FORMAT, "break/continue outside a loop") : (brisk_status)r;
    }
    if (s == BRISK_OK && !buf.p) s = ct_buf_put(&buf, "", 0);
    ct_arena_free(&c.a);
    if (s != BRISK_OK) {
        free(buf.p);
        return s;
    }
    *out = buf.p;
    if (out_len) *out_len = buf.n;
    return BRISK_OK;
}
