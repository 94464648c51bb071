/* chat_template_builtins.c — filters, tests, str/dict methods and global
 * functions of the chat template interpreter, with Python's semantics
 * (Jinja's filters, str.split/strip/..., HF's tojson and strftime_now).
 * Case mapping (upper, lower, title, capitalize) is ASCII-only. */
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "tokenizer/chat_template_internal.h"

#define IS(s, lit) ((s).n == sizeof(lit) - 1 && !memcmp((s).p, lit, (s).n))

static const char *const k_filters[] = {
    "abs", "attr", "capitalize", "count", "d", "default", "dictsort", "e", "escape", "first", "float",
    "forceescape", "format", "indent", "int", "items", "join", "last", "length", "list", "lower", "map", "max", "min",
    "reject", "rejectattr", "replace", "reverse", "round", "safe", "select", "selectattr", "sort", "string",
    "sum", "title", "tojson", "trim", "unique", "upper", "wordcount", NULL};

static const char *const k_tests[] = {
    "boolean", "callable", "defined", "divisibleby", "eq", "equalto", "==", "ne", "!=", "even", "odd", "false",
    "true", "float", "integer", "number", "string", "mapping", "iterable", "sequence", "none", "undefined", "in",
    "lower", "upper", "gt", ">", "greaterthan", "ge", ">=", "lt", "<", "lessthan", "le", "<=", "sameas", NULL};

static bool known(const char *const *list, ct_str name) {
    for (; *list; list++)
        if (strlen(*list) == name.n && !memcmp(*list, name.p, name.n)) return true;
    return false;
}

bool ct_filter_known(ct_str name) { return known(k_filters, name); }
bool ct_test_known(ct_str name) { return known(k_tests, name); }

int ct_func_lookup(ct_str name) {
    if (IS(name, "range")) return CT_F_RANGE;
    if (IS(name, "namespace")) return CT_F_NAMESPACE;
    if (IS(name, "dict")) return CT_F_DICT;
    if (IS(name, "raise_exception")) return CT_F_RAISE;
    if (IS(name, "strftime_now")) return CT_F_STRFTIME;
    return 0;
}

static ct_val listv(ct_list *l) { return (ct_val){.type = CT_LIST, .list = l}; }
static bool is_intlike(const ct_val *v) { return v->type == CT_INT || v->type == CT_BOOL; }
static int64_t as_int(const ct_val *v) { return v->type == CT_BOOL ? v->b : v->i; }
static bool is_number(const ct_val *v) { return is_intlike(v) || v->type == CT_FLOAT; }
static double as_float(const ct_val *v) { return v->type == CT_FLOAT ? v->f : (double)as_int(v); }

static brisk_status need_str(const ct_node *at, const char *what, const ct_val *v) {
    if (v && v->type == CT_STR) return BRISK_OK;
    return ct_fail(at, BRISK_ERR_FORMAT, "%s expects a string, got %s", what, v ? ct_type_name(v) : "nothing");
}

static brisk_status new_str(ct_ctx *c, const ct_node *at, size_t n, char **p) {
    if (n > CT_MAX_OUTPUT) return ct_fail(at, BRISK_ERR_RANGE, "string longer than %zu bytes", CT_MAX_OUTPUT);
    if (!(*p = ct_alloc(&c->a, n + 1))) return ct_nomem(at);
    return BRISK_OK;
}

/* ---- string helpers ---------------------------------------------------- */

static size_t cp_len(const char *s, size_t n, size_t i) { return ct_utf8_offset(s + i, n - i, 1); }

/* Is the code point s[i..i+len) one of the code points of set? */
static bool in_set(const char *s, size_t len, ct_str set) {
    for (size_t j = 0; j < set.n;) {
        size_t l = cp_len(set.p, set.n, j);
        if (l == len && !memcmp(set.p + j, s, len)) return true;
        j += l;
    }
    return false;
}

/* str.strip/lstrip/rstrip(chars): chars NULL strips whitespace. */
static ct_str strip(ct_str s, const ct_str *chars, bool left, bool right) {
    size_t b = 0, e = s.n;
    while (left && b < e) {
        size_t l = chars ? cp_len(s.p, e, b) : ct_space_at(s.p, e, b);
        if (!l || (chars && !in_set(s.p + b, l, *chars))) break;
        b += l;
    }
    while (right && e > b) {
        size_t l;
        if (chars) {
            l = 1;
            while (l < 4 && l < e - b && ((unsigned char)s.p[e - l] & 0xC0) == 0x80) l++;
            if (cp_len(s.p, e, e - l) != l) l = 1;
            if (!in_set(s.p + e - l, l, *chars)) break;
        } else {
            l = ct_space_before(s.p, e);
            if (!l || e - l < b) break;
        }
        e -= l;
    }
    return (ct_str){s.p + b, e - b};
}

static const char *find_sub(ct_str s, size_t from, ct_str sub) {
    if (sub.n == 0) return s.p + from;
    if (from > s.n || s.n - from < sub.n) return NULL;
    return memmem(s.p + from, s.n - from, sub.p, sub.n);
}

static const char *rfind_sub(ct_str s, size_t upto, ct_str sub) {
    if (sub.n > upto) return NULL;
    for (size_t i = upto - sub.n + 1; i-- > 0;)
        if (!memcmp(s.p + i, sub.p, sub.n)) return s.p + i;
    return NULL;
}

static brisk_status push_str(ct_ctx *c, const ct_node *at, ct_list *l, size_t *cap, const char *p, size_t n) {
    if (l->n == *cap) {
        size_t nc = *cap ? *cap * 2 : 8;
        ct_val *v = ct_alloc(&c->a, nc * sizeof *v);
        if (!v) return ct_nomem(at);
        if (l->n) memcpy(v, l->v, l->n * sizeof *v);
        l->v = v;
        *cap = nc;
    }
    l->v[l->n++] = ct_strv(p, n);
    return BRISK_OK;
}

/* str.split / str.rsplit with Python's rules for sep=None. */
static brisk_status split(ct_ctx *c, const ct_node *at, ct_str s, const ct_val *sepv, int64_t maxsplit, bool rev,
                          ct_val *out) {
    ct_list *l = ct_list_new(&c->a, 0);
    size_t cap = 0;
    if (!l) return ct_nomem(at);
    if (sepv && sepv->type != CT_NONE) {
        BK_TRY(need_str(at, "split()", sepv));
        ct_str sep = sepv->s;
        if (!sep.n) return ct_fail(at, BRISK_ERR_FORMAT, "split(): empty separator");
        if (!rev) {
            size_t from = 0;
            for (int64_t k = 0; maxsplit < 0 || k < maxsplit; k++) {
                const char *h = find_sub(s, from, sep);
                if (!h) break;
                BK_TRY(push_str(c, at, l, &cap, s.p + from, (size_t)(h - s.p) - from));
                from = (size_t)(h - s.p) + sep.n;
            }
            BK_TRY(push_str(c, at, l, &cap, s.p + from, s.n - from));
        } else {
            size_t upto = s.n;
            for (int64_t k = 0; maxsplit < 0 || k < maxsplit; k++) {
                const char *h = rfind_sub(s, upto, sep);
                if (!h) break;
                size_t at_i = (size_t)(h - s.p);
                BK_TRY(push_str(c, at, l, &cap, s.p + at_i + sep.n, upto - at_i - sep.n));
                upto = at_i;
            }
            BK_TRY(push_str(c, at, l, &cap, s.p, upto));
            for (size_t i = 0; i < l->n / 2; i++) {
                ct_val t = l->v[i];
                l->v[i] = l->v[l->n - 1 - i];
                l->v[l->n - 1 - i] = t;
            }
        }
    } else if (!rev) {
        size_t i = 0;
        int64_t k = 0;
        for (;;) {
            size_t w;
            while (i < s.n && (w = ct_space_at(s.p, s.n, i))) i += w;
            if (i >= s.n) break;
            if (maxsplit >= 0 && k >= maxsplit) {
                BK_TRY(push_str(c, at, l, &cap, s.p + i, s.n - i));
                break;
            }
            size_t b = i;
            while (i < s.n && !ct_space_at(s.p, s.n, i)) i++;
            BK_TRY(push_str(c, at, l, &cap, s.p + b, i - b));
            k++;
        }
    } else {
        size_t e = s.n;
        int64_t k = 0;
        for (;;) {
            size_t w;
            while (e > 0 && (w = ct_space_before(s.p, e))) e -= w;
            if (e == 0) break;
            if (maxsplit >= 0 && k >= maxsplit) {
                BK_TRY(push_str(c, at, l, &cap, s.p, e));
                break;
            }
            size_t b = e;
            while (b > 0 && !ct_space_before(s.p, b)) b--;
            BK_TRY(push_str(c, at, l, &cap, s.p + b, e - b));
            e = b;
            k++;
        }
        for (size_t i = 0; i < l->n / 2; i++) {
            ct_val t = l->v[i];
            l->v[i] = l->v[l->n - 1 - i];
            l->v[l->n - 1 - i] = t;
        }
    }
    *out = listv(l);
    return BRISK_OK;
}

static brisk_status replace(ct_ctx *c, const ct_node *at, ct_str s, ct_str old, ct_str rep, int64_t count,
                            ct_val *out) {
    ct_buf b = {.limit = CT_MAX_OUTPUT};
    brisk_status st = BRISK_OK;
    size_t i = 0;
    int64_t done = 0;
    if (!old.n) { /* between every character and at both ends */
        while (st == BRISK_OK && (count < 0 || done < count) && i <= s.n) {
            st = ct_buf_put(&b, rep.p, rep.n);
            done++;
            if (i == s.n) {
                i++;
                break;
            }
            size_t l = cp_len(s.p, s.n, i);
            if (st == BRISK_OK) st = ct_buf_put(&b, s.p + i, l);
            i += l;
        }
        if (st == BRISK_OK && i < s.n) st = ct_buf_put(&b, s.p + i, s.n - i);
    } else {
        while (st == BRISK_OK && (count < 0 || done < count)) {
            const char *h = find_sub(s, i, old);
            if (!h) break;
            st = ct_buf_put(&b, s.p + i, (size_t)(h - s.p) - i);
            if (st == BRISK_OK) st = ct_buf_put(&b, rep.p, rep.n);
            i = (size_t)(h - s.p) + old.n;
            done++;
        }
        if (st == BRISK_OK) st = ct_buf_put(&b, s.p + i, s.n - i);
    }
    if (st == BRISK_OK) {
        char *p;
        st = new_str(c, at, b.n, &p);
        if (st == BRISK_OK) {
            if (b.n) memcpy(p, b.p, b.n);
            *out = ct_strv(p, b.n);
        }
    }
    free(b.p);
    return st;
}

typedef enum { CASE_UPPER, CASE_LOWER, CASE_CAPITALIZE, CASE_TITLE_METHOD, CASE_TITLE_FILTER } case_mode;

static bool ascii_alpha(char ch) { return (ch >= 'a' && ch <= 'z') || (ch >= 'A' && ch <= 'Z'); }
static char up(char ch) { return ch >= 'a' && ch <= 'z' ? (char)(ch - 32) : ch; }
static char down(char ch) { return ch >= 'A' && ch <= 'Z' ? (char)(ch + 32) : ch; }

static brisk_status change_case(ct_ctx *c, const ct_node *at, ct_str s, case_mode m, ct_val *out) {
    char *p;
    BK_TRY(new_str(c, at, s.n, &p));
    bool prev_cased = false;
    for (size_t i = 0; i < s.n; i++) {
        char ch = s.p[i];
        switch (m) {
        case CASE_UPPER: p[i] = up(ch); break;
        case CASE_LOWER: p[i] = down(ch); break;
        case CASE_CAPITALIZE: p[i] = i == 0 ? up(ch) : down(ch); break;
        case CASE_TITLE_METHOD: /* str.title(): a letter after a non-letter starts a word */
            p[i] = prev_cased ? down(ch) : up(ch);
            prev_cased = ascii_alpha(ch);
            break;
        case CASE_TITLE_FILTER: /* Jinja's title: words start after whitespace, - ( { [ < */
            p[i] = (i == 0 || strchr(" \t\n\r\f\v-({[<", s.p[i - 1])) ? up(ch) : down(ch);
            break;
        }
    }
    *out = ct_strv(p, s.n);
    return BRISK_OK;
}

/* ---- attribute paths, sorting ------------------------------------------ */

/* "a.b.0" as Jinja's make_attrgetter: dict keys, then list indices. */
static ct_val attr_path(const ct_val *v, ct_str path) {
    ct_val cur = *v;
    size_t i = 0;
    while (i <= path.n) {
        size_t j = i;
        while (j < path.n && path.p[j] != '.') j++;
        ct_str part = {path.p + i, j - i};
        if (cur.type == CT_LIST) {
            char *end;
            char buf[24];
            snprintf(buf, sizeof buf, "%.*s", (int)(part.n < 20 ? part.n : 20), part.p);
            long long k = strtoll(buf, &end, 10);
            if (!part.n || *end || k < 0 || (size_t)k >= cur.list->n) return ct_undef(NULL, 0);
            cur = cur.list->v[k];
        } else {
            cur = ct_getattr(&cur, part.p, part.n);
        }
        i = j + 1;
    }
    return cur;
}

typedef struct sort_ctx {
    const ct_node *at;
    bool case_sensitive;
    brisk_status err;
} sort_ctx;

static int sort_cmp(sort_ctx *sc, const ct_val *a, const ct_val *b) {
    if (is_number(a) && is_number(b)) {
        double x = as_float(a), y = as_float(b);
        return x < y ? -1 : x > y;
    }
    if (a->type == CT_STR && b->type == CT_STR) {
        size_t n = a->s.n < b->s.n ? a->s.n : b->s.n;
        for (size_t i = 0; i < n; i++) {
            char x = a->s.p[i], y = b->s.p[i];
            if (!sc->case_sensitive) x = down(x), y = down(y);
            if (x != y) return (unsigned char)x < (unsigned char)y ? -1 : 1;
        }
        return a->s.n < b->s.n ? -1 : a->s.n > b->s.n;
    }
    if (a->type == CT_NONE && b->type == CT_NONE) return 0;
    if (!sc->err)
        sc->err = ct_fail(sc->at, BRISK_ERR_FORMAT, "cannot compare '%s' with '%s' when sorting", ct_type_name(a),
                          ct_type_name(b));
    return 0;
}

/* Stable merge sort of idx by keys. */
static void merge_sort(sort_ctx *sc, const ct_val *keys, size_t *idx, size_t *tmp, size_t n, bool reverse) {
    if (n < 2) return;
    size_t h = n / 2;
    merge_sort(sc, keys, idx, tmp, h, reverse);
    merge_sort(sc, keys, idx + h, tmp, n - h, reverse);
    size_t i = 0, j = h, k = 0;
    while (i < h && j < n) {
        int r = sort_cmp(sc, &keys[idx[j]], &keys[idx[i]]);
        if (reverse) r = -r;
        tmp[k++] = r < 0 ? idx[j++] : idx[i++];
    }
    while (i < h) tmp[k++] = idx[i++];
    while (j < n) tmp[k++] = idx[j++];
    memcpy(idx, tmp, n * sizeof *idx);
}

/* ---- tests ------------------------------------------------------------- */

brisk_status ct_test(ct_ctx *c, const ct_node *at, ct_str name, const ct_val *x, const ct_args *a, bool *out) {
    const ct_val *arg = ct_arg(a, 0, NULL);
    (void)c;
    if (IS(name, "defined")) *out = x->type != CT_UNDEF;
    else if (IS(name, "undefined")) *out = x->type == CT_UNDEF;
    else if (IS(name, "none")) *out = x->type == CT_NONE;
    else if (IS(name, "boolean")) *out = x->type == CT_BOOL;
    else if (IS(name, "true")) *out = x->type == CT_BOOL && x->b;
    else if (IS(name, "false")) *out = x->type == CT_BOOL && !x->b;
    else if (IS(name, "string")) *out = x->type == CT_STR;
    else if (IS(name, "number")) *out = is_number(x);
    else if (IS(name, "integer")) *out = x->type == CT_INT;
    else if (IS(name, "float")) *out = x->type == CT_FLOAT;
    else if (IS(name, "mapping")) *out = x->type == CT_DICT;
    else if (IS(name, "iterable")) *out = x->type == CT_LIST || x->type == CT_DICT || x->type == CT_STR || x->type == CT_UNDEF;
    else if (IS(name, "sequence")) *out = x->type == CT_LIST || x->type == CT_DICT || x->type == CT_STR || x->type == CT_UNDEF;
    else if (IS(name, "callable")) *out = x->type == CT_MACRO || x->type == CT_FUNC;
    else if (IS(name, "lower") || IS(name, "upper")) {
        ct_val s;
        BK_TRY(ct_to_str(c, at, x, &s));
        bool lower = IS(name, "lower"), cased = false, ok = true;
        for (size_t i = 0; i < s.s.n; i++) {
            char ch = s.s.p[i];
            if (ascii_alpha(ch)) cased = true;
            if (lower ? (ch >= 'A' && ch <= 'Z') : (ch >= 'a' && ch <= 'z')) ok = false;
        }
        *out = cased && ok;
    } else if (IS(name, "even") || IS(name, "odd")) {
        if (!is_intlike(x)) return ct_fail(at, BRISK_ERR_FORMAT, "test '%.*s' needs an integer, got %s", (int)name.n, name.p, ct_type_name(x));
        *out = (as_int(x) % 2 == 0) == IS(name, "even");
    } else {
        if (!arg) return ct_fail(at, BRISK_ERR_FORMAT, "test '%.*s' needs an argument", (int)name.n, name.p);
        if (IS(name, "eq") || IS(name, "equalto") || IS(name, "==")) *out = ct_equal(x, arg);
        else if (IS(name, "ne") || IS(name, "!=")) *out = !ct_equal(x, arg);
        else if (IS(name, "sameas")) *out = x->type == arg->type && ct_equal(x, arg);
        else if (IS(name, "in")) {
            if (arg->type == CT_STR && x->type == CT_STR)
                *out = x->s.n == 0 || find_sub(arg->s, 0, x->s) != NULL;
            else if (arg->type == CT_LIST) {
                *out = false;
                for (size_t i = 0; i < arg->list->n && !*out; i++) *out = ct_equal(x, &arg->list->v[i]);
            } else if (arg->type == CT_DICT || arg->type == CT_NS) {
                *out = x->type == CT_STR && ct_dict_get(arg->dict, x->s.p, x->s.n);
            } else {
                return ct_fail(at, BRISK_ERR_FORMAT, "test 'in': '%s' is not a container", ct_type_name(arg));
            }
        } else if (IS(name, "divisibleby")) {
            if (!is_intlike(x) || !is_intlike(arg) || as_int(arg) == 0)
                return ct_fail(at, BRISK_ERR_FORMAT, "test 'divisibleby' needs non-zero integers");
            *out = as_int(x) % as_int(arg) == 0;
        } else {
            sort_ctx sc = {.at = at, .case_sensitive = true};
            int r = sort_cmp(&sc, x, arg);
            BK_TRY(sc.err);
            if (IS(name, "gt") || IS(name, ">") || IS(name, "greaterthan")) *out = r > 0;
            else if (IS(name, "ge") || IS(name, ">=")) *out = r >= 0;
            else if (IS(name, "lt") || IS(name, "<") || IS(name, "lessthan")) *out = r < 0;
            else if (IS(name, "le") || IS(name, "<=")) *out = r <= 0;
            else return ct_fail(at, BRISK_ERR_UNSUPPORTED, "unsupported test '%.*s'", (int)name.n, name.p);
        }
    }
    return BRISK_OK;
}

/* ---- filters ----------------------------------------------------------- */

static brisk_status html_escape(ct_ctx *c, const ct_node *at, ct_str s, ct_val *out) {
    ct_buf b = {.limit = CT_MAX_OUTPUT};
    brisk_status st = BRISK_OK;
    for (size_t i = 0; i < s.n && st == BRISK_OK; i++) {
        const char *e = s.p[i] == '&' ? "&amp;" : s.p[i] == '<' ? "&lt;" : s.p[i] == '>' ? "&gt;"
                      : s.p[i] == '"' ? "&#34;" : s.p[i] == '\'' ? "&#39;" : NULL;
        st = e ? ct_buf_put(&b, e, strlen(e)) : ct_buf_put(&b, s.p + i, 1);
    }
    char *p = NULL;
    if (st == BRISK_OK) st = new_str(c, at, b.n, &p);
    if (st == BRISK_OK) {
        if (b.n) memcpy(p, b.p, b.n);
        *out = ct_strv(p, b.n);
    }
    free(b.p);
    return st;
}

static brisk_status f_tojson(ct_ctx *c, const ct_node *at, const ct_val *x, const ct_args *a, ct_val *out) {
    /* HF's signature: tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False) */
    const ct_val *ascii = ct_arg(a, 0, "ensure_ascii"), *indent = ct_arg(a, 1, "indent");
    const ct_val *seps = ct_arg(a, 2, "separators"), *sortk = ct_arg(a, 3, "sort_keys");
    char ind[64];
    ct_json_opts o = {.ascii = ascii && ct_truthy(ascii), .sort_keys = sortk && ct_truthy(sortk)};
    char item_sep[64], key_sep[64];
    if (indent && indent->type != CT_NONE) {
        if (is_intlike(indent)) {
            int64_t w = as_int(indent);
            if (w < 0) w = 0;
            if (w > 32) return ct_fail(at, BRISK_ERR_RANGE, "tojson: indent over 32");
            memset(ind, ' ', (size_t)w);
            ind[w] = 0;
        } else if (indent->type == CT_STR && indent->s.n < sizeof ind) {
            memcpy(ind, indent->s.p, indent->s.n);
            ind[indent->s.n] = 0;
        } else {
            return ct_fail(at, BRISK_ERR_FORMAT, "tojson: indent must be an integer or a short string");
        }
        o.ind = ind;
    }
    if (seps && seps->type != CT_NONE) {
        if (seps->type != CT_LIST || seps->list->n != 2 || seps->list->v[0].type != CT_STR ||
            seps->list->v[1].type != CT_STR || seps->list->v[0].s.n >= 64 || seps->list->v[1].s.n >= 64)
            return ct_fail(at, BRISK_ERR_FORMAT, "tojson: separators must be two strings");
        snprintf(item_sep, sizeof item_sep, "%.*s", (int)seps->list->v[0].s.n, seps->list->v[0].s.p);
        snprintf(key_sep, sizeof key_sep, "%.*s", (int)seps->list->v[1].s.n, seps->list->v[1].s.p);
        o.item_sep = item_sep, o.key_sep = key_sep;
    }
    ct_buf b = {.limit = CT_MAX_OUTPUT};
    brisk_status st = ct_buf_json(&b, x, &o);
    if (st != BRISK_OK) st = ct_fail(at, st, "%s", brisk_last_error());
    char *p = NULL;
    if (st == BRISK_OK) st = new_str(c, at, b.n, &p);
    if (st == BRISK_OK) {
        if (b.n) memcpy(p, b.p, b.n);
        *out = ct_strv(p, b.n);
    }
    free(b.p);
    return st;
}

static brisk_status f_indent(ct_ctx *c, const ct_node *at, ct_str s, const ct_args *a, ct_val *out) {
    const ct_val *w = ct_arg(a, 0, "width"), *first = ct_arg(a, 1, "first"), *blank = ct_arg(a, 2, "blank");
    char ind[256];
    size_t il = 4;
    memset(ind, ' ', 4);
    if (w && is_intlike(w)) {
        int64_t k = as_int(w);
        il = k < 0 ? 0 : k > 255 ? 255 : (size_t)k;
        memset(ind, ' ', il);
    } else if (w && w->type == CT_STR) {
        il = w->s.n < sizeof ind ? w->s.n : sizeof ind;
        memcpy(ind, w->s.p, il);
    }
    bool f = first && ct_truthy(first), bl = blank && ct_truthy(blank);
    ct_buf b = {.limit = CT_MAX_OUTPUT};
    brisk_status st = BRISK_OK;
    size_t i = 0, line = 0;
    while (st == BRISK_OK && i <= s.n) {
        const char *nl = i < s.n ? memchr(s.p + i, '\n', s.n - i) : NULL;
        size_t e = nl ? (size_t)(nl - s.p) : s.n;
        if (!nl && e == i && line > 0) break; /* the text ended with "\n" */
        if (line > 0) st = ct_buf_putc(&b, '\n');
        bool empty = e == i;
        if (st == BRISK_OK && (line > 0 || f) && (bl || !empty)) st = ct_buf_put(&b, ind, il);
        if (st == BRISK_OK) st = ct_buf_put(&b, s.p + i, e - i);
        line++;
        i = e + 1;
        if (!nl) break;
    }
    char *p = NULL;
    if (st == BRISK_OK) st = new_str(c, at, b.n, &p);
    if (st == BRISK_OK) {
        if (b.n) memcpy(p, b.p, b.n);
        *out = ct_strv(p, b.n);
    }
    free(b.p);
    return st;
}

/* select/reject (attr NULL) and selectattr/rejectattr. */
static brisk_status f_select(ct_ctx *c, const ct_node *at, const ct_val *x, const ct_args *a, bool with_attr,
                             bool keep_if, ct_val *out) {
    ct_list *src, *dst;
    BK_TRY(ct_iter(c, at, x, &src));
    if (!(dst = ct_list_new(&c->a, src->n))) return ct_nomem(at);
    dst->n = 0;
    size_t first = with_attr ? 1 : 0;
    if (with_attr && (a->np < 1 || a->pos[0].type != CT_STR))
        return ct_fail(at, BRISK_ERR_FORMAT, "selectattr/rejectattr need an attribute name");
    const ct_val *test = a->np > first ? &a->pos[first] : NULL;
    if (test && test->type != CT_STR) return ct_fail(at, BRISK_ERR_FORMAT, "select: the test name must be a string");
    if (test && !ct_test_known(test->s))
        return ct_fail(at, BRISK_ERR_UNSUPPORTED, "unsupported test '%.*s'", (int)test->s.n, test->s.p);
    ct_args targs = {.np = a->np > first + 1 ? a->np - first - 1 : 0, .nk = a->nk, .kn = a->kn, .kv = a->kv};
    if (targs.np) targs.pos = a->pos + first + 1;
    for (size_t i = 0; i < src->n; i++) {
        ct_val v = with_attr ? attr_path(&src->v[i], a->pos[0].s) : src->v[i];
        bool r;
        if (test) BK_TRY(ct_test(c, at, test->s, &v, &targs, &r));
        else r = ct_truthy(&v);
        if (r == keep_if) dst->v[dst->n++] = src->v[i];
    }
    *out = listv(dst);
    return BRISK_OK;
}

static brisk_status f_map(ct_ctx *c, const ct_node *at, const ct_val *x, const ct_args *a, ct_val *out) {
    ct_list *src, *dst;
    BK_TRY(ct_iter(c, at, x, &src));
    if (!(dst = ct_list_new(&c->a, src->n))) return ct_nomem(at);
    const ct_val *attr = ct_arg(a, (size_t)-1, "attribute");
    if (attr) {
        if (attr->type != CT_STR && !is_intlike(attr)) return ct_fail(at, BRISK_ERR_FORMAT, "map: attribute must be a string");
        const ct_val *dflt = ct_arg(a, (size_t)-1, "default");
        char num[24];
        ct_str path = attr->s;
        if (is_intlike(attr)) path = (ct_str){num, (size_t)snprintf(num, sizeof num, "%lld", (long long)as_int(attr))};
        for (size_t i = 0; i < src->n; i++) {
            dst->v[i] = attr_path(&src->v[i], path);
            if (dst->v[i].type == CT_UNDEF && dflt) dst->v[i] = *dflt;
        }
        *out = listv(dst);
        return BRISK_OK;
    }
    if (a->np < 1 || a->pos[0].type != CT_STR) return ct_fail(at, BRISK_ERR_FORMAT, "map needs a filter name or attribute=");
    ct_str fname = a->pos[0].s;
    if (!ct_filter_known(fname) || IS(fname, "map"))
        return ct_fail(at, BRISK_ERR_UNSUPPORTED, "unsupported filter '%.*s' in map", (int)fname.n, fname.p);
    ct_args fargs = {.np = a->np - 1, .pos = a->pos + 1, .nk = a->nk, .kn = a->kn, .kv = a->kv};
    for (size_t i = 0; i < src->n; i++) BK_TRY(ct_filter(c, at, fname, &src->v[i], &fargs, &dst->v[i]));
    *out = listv(dst);
    return BRISK_OK;
}

static brisk_status f_sort(ct_ctx *c, const ct_node *at, ct_str name, const ct_val *x, const ct_args *a, ct_val *out) {
    ct_list *src;
    BK_TRY(ct_iter(c, at, x, &src));
    bool dictsort = IS(name, "dictsort"), uniq = IS(name, "unique"), minmax = IS(name, "max") || IS(name, "min");
    const ct_val *rev = dictsort ? ct_arg(a, 2, "reverse") : uniq || minmax ? NULL : ct_arg(a, 0, "reverse");
    const ct_val *cs = ct_arg(a, dictsort || uniq || minmax ? 0 : 1, "case_sensitive");
    const ct_val *attr = ct_arg(a, dictsort ? (size_t)-1 : uniq || minmax ? 1 : 2, "attribute");
    const ct_val *by = dictsort ? ct_arg(a, 1, "by") : NULL;
    sort_ctx sc = {.at = at, .case_sensitive = cs && ct_truthy(cs)};
    ct_list *items = src;
    if (dictsort) {
        if (x->type != CT_DICT) return ct_fail(at, BRISK_ERR_FORMAT, "dictsort needs a mapping, got %s", ct_type_name(x));
        if (!(items = ct_list_new(&c->a, x->dict->n))) return ct_nomem(at);
        for (size_t i = 0; i < x->dict->n; i++) {
            ct_list *pair = ct_list_new(&c->a, 2);
            if (!pair) return ct_nomem(at);
            pair->v[0] = ct_strv(x->dict->k[i].p, x->dict->k[i].n);
            pair->v[1] = x->dict->v[i];
            items->v[i] = listv(pair);
        }
    }
    size_t n = items->n;
    ct_val *keys = n ? ct_alloc(&c->a, n * sizeof *keys) : NULL;
    size_t *idx = n ? ct_alloc(&c->a, n * sizeof *idx) : NULL, *tmp = n ? ct_alloc(&c->a, n * sizeof *tmp) : NULL;
    if (n && (!keys || !idx || !tmp)) return ct_nomem(at);
    bool by_value = by && by->type == CT_STR && IS(by->s, "value");
    for (size_t i = 0; i < n; i++) {
        idx[i] = i;
        keys[i] = dictsort ? items->v[i].list->v[by_value ? 1 : 0]
                : attr && attr->type == CT_STR ? attr_path(&items->v[i], attr->s) : items->v[i];
    }
    if (uniq) {
        ct_list *dst = ct_list_new(&c->a, n);
        if (!dst) return ct_nomem(at);
        dst->n = 0;
        for (size_t i = 0; i < n; i++) {
            bool seen = false;
            for (size_t j = 0; j < i && !seen; j++) {
                if (keys[j].type == CT_STR && keys[i].type == CT_STR && !sc.case_sensitive)
                    seen = sort_cmp(&sc, &keys[j], &keys[i]) == 0;
                else
                    seen = ct_equal(&keys[j], &keys[i]);
            }
            if (!seen) dst->v[dst->n++] = items->v[i];
        }
        *out = listv(dst);
        return BRISK_OK;
    }
    merge_sort(&sc, keys, idx, tmp, n, rev && ct_truthy(rev));
    BK_TRY(sc.err);
    if (minmax) {
        if (!n) *out = ct_undef(NULL, 0);
        else *out = items->v[IS(name, "max") ? idx[n - 1] : idx[0]];
        return BRISK_OK;
    }
    ct_list *dst = ct_list_new(&c->a, n);
    if (!dst) return ct_nomem(at);
    for (size_t i = 0; i < n; i++) dst->v[i] = items->v[idx[i]];
    *out = listv(dst);
    return BRISK_OK;
}

static brisk_status f_join(ct_ctx *c, const ct_node *at, const ct_val *x, const ct_args *a, ct_val *out) {
    ct_list *src;
    BK_TRY(ct_iter(c, at, x, &src));
    const ct_val *sep = ct_arg(a, 0, "d"), *attr = ct_arg(a, 1, "attribute");
    ct_val sepv = ct_strv("", 0);
    if (sep) BK_TRY(ct_to_str(c, at, sep, &sepv));
    ct_buf b = {.limit = CT_MAX_OUTPUT};
    brisk_status st = BRISK_OK;
    for (size_t i = 0; i < src->n && st == BRISK_OK; i++) {
        if (i) st = ct_buf_put(&b, sepv.s.p, sepv.s.n);
        ct_val v = attr && attr->type == CT_STR ? attr_path(&src->v[i], attr->s) : src->v[i];
        if (st == BRISK_OK) st = ct_buf_str(&b, &v);
    }
    char *p = NULL;
    if (st == BRISK_OK) st = new_str(c, at, b.n, &p);
    if (st == BRISK_OK) {
        if (b.n) memcpy(p, b.p, b.n);
        *out = ct_strv(p, b.n);
    }
    free(b.p);
    return st;
}

static brisk_status to_number(const ct_node *at, const ct_val *x, bool want_int, const ct_val *dflt, ct_val *out) {
    if (is_intlike(x)) *out = want_int ? ct_int(as_int(x)) : ct_float((double)as_int(x));
    else if (x->type == CT_FLOAT) {
        if (want_int && !(fabs(x->f) < 9.2e18)) return ct_fail(at, BRISK_ERR_RANGE, "int: %g out of range", x->f);
        *out = want_int ? ct_int((int64_t)x->f) : *x;
    } else if (x->type == CT_STR) {
        char buf[64];
        ct_str t = strip(x->s, NULL, true, true);
        size_t k = 0;
        for (size_t i = 0; i < t.n && k < sizeof buf - 1; i++)
            if (t.p[i] != '_') buf[k++] = t.p[i];
        buf[k] = 0;
        char *end;
        if (want_int) {
            long long v = k ? strtoll(buf, &end, 10) : 0;
            if (k && !*end) *out = ct_int(v);
            else {
                double d = k ? strtod(buf, &end) : 0;
                if (k && !*end && fabs(d) < 9.2e18) *out = ct_int((int64_t)d);
                else *out = dflt ? *dflt : ct_int(0);
            }
        } else {
            double d = k ? strtod(buf, &end) : 0;
            *out = k && !*end ? ct_float(d) : dflt ? *dflt : ct_float(0);
        }
    } else {
        *out = dflt ? *dflt : want_int ? ct_int(0) : ct_float(0);
    }
    return BRISK_OK;
}

brisk_status ct_printf(ct_ctx *c, const ct_node *at, ct_str fmt, const ct_val *args, size_t nargs, ct_val *out) {
    ct_buf b = {.limit = CT_MAX_OUTPUT};
    brisk_status st = BRISK_OK;
    size_t used = 0;
    for (size_t i = 0; i < fmt.n && st == BRISK_OK; i++) {
        if (fmt.p[i] != '%') {
            st = ct_buf_putc(&b, fmt.p[i]);
            continue;
        }
        char conv = i + 1 < fmt.n ? fmt.p[++i] : 0;
        if (conv == '%') {
            st = ct_buf_putc(&b, '%');
            continue;
        }
        if (conv != 's' && conv != 'd' && conv != 'i') {
            st = ct_fail(at, BRISK_ERR_UNSUPPORTED, "unsupported: '%%%c' in string formatting (only %%s, %%d, %%i, %%%%)",
                         conv ? conv : '?');
            break;
        }
        if (used == nargs) {
            st = ct_fail(at, BRISK_ERR_FORMAT, "not enough arguments for format string");
            break;
        }
        const ct_val *v = &args[used++];
        if (conv == 's') {
            st = ct_buf_str(&b, v);
        } else {
            if (!is_number(v)) {
                st = ct_fail(at, BRISK_ERR_FORMAT, "%%%c format: a number is required, not %s", conv, ct_type_name(v));
                break;
            }
            char num[32];
            snprintf(num, sizeof num, "%lld", v->type == CT_FLOAT ? (long long)v->f : (long long)as_int(v));
            st = ct_buf_put(&b, num, strlen(num));
        }
    }
    if (st == BRISK_OK && used != nargs) st = ct_fail(at, BRISK_ERR_FORMAT, "not all arguments converted during string formatting");
    char *p = NULL;
    if (st == BRISK_OK) st = new_str(c, at, b.n, &p);
    if (st == BRISK_OK) {
        if (b.n) memcpy(p, b.p, b.n);
        *out = ct_strv(p, b.n);
    }
    free(b.p);
    return st;
}

brisk_status ct_filter(ct_ctx *c, const ct_node *at, ct_str name, const ct_val *x, const ct_args *a, ct_val *out) {
    const ct_val *a0 = ct_arg(a, 0, NULL);
    if (IS(name, "safe")) { *out = *x; return BRISK_OK; }
    if (IS(name, "tojson")) return f_tojson(c, at, x, a, out);
    if (IS(name, "string")) return ct_to_str(c, at, x, out);
    if (IS(name, "default") || IS(name, "d")) {
        const ct_val *b = ct_arg(a, 1, "boolean");
        const ct_val *dv = ct_arg(a, 0, "default_value");
        if (x->type == CT_UNDEF || (b && ct_truthy(b) && !ct_truthy(x))) *out = dv ? *dv : ct_strv("", 0);
        else *out = *x;
        return BRISK_OK;
    }
    if (IS(name, "length") || IS(name, "count")) {
        switch (x->type) {
        case CT_STR: *out = ct_int((int64_t)ct_utf8_len(x->s.p, x->s.n)); return BRISK_OK;
        case CT_LIST: *out = ct_int((int64_t)x->list->n); return BRISK_OK;
        case CT_DICT: *out = ct_int((int64_t)x->dict->n); return BRISK_OK;
        case CT_UNDEF: *out = ct_int(0); return BRISK_OK;
        default: return ct_fail(at, BRISK_ERR_FORMAT, "object of type '%s' has no len()", ct_type_name(x));
        }
    }
    if (IS(name, "items")) {
        if (x->type == CT_UNDEF) {
            ct_list *l = ct_list_new(&c->a, 0);
            if (!l) return ct_nomem(at);
            *out = listv(l);
            return BRISK_OK;
        }
        if (x->type != CT_DICT) return ct_fail(at, BRISK_ERR_FORMAT, "items: can only get item pairs from a mapping, not %s", ct_type_name(x));
        ct_args none = {0};
        return ct_method(c, at, x, (ct_str){"items", 5}, &none, out);
    }
    if (IS(name, "list")) {
        ct_list *l;
        BK_TRY(ct_iter(c, at, x, &l));
        *out = listv(l);
        return BRISK_OK;
    }
    if (IS(name, "first") || IS(name, "last")) {
        ct_list *l;
        BK_TRY(ct_iter(c, at, x, &l));
        *out = l->n ? l->v[IS(name, "first") ? 0 : l->n - 1] : ct_undef(NULL, 0);
        return BRISK_OK;
    }
    if (IS(name, "join")) return f_join(c, at, x, a, out);
    if (IS(name, "map")) return f_map(c, at, x, a, out);
    if (IS(name, "select") || IS(name, "reject")) return f_select(c, at, x, a, false, IS(name, "select"), out);
    if (IS(name, "selectattr") || IS(name, "rejectattr")) return f_select(c, at, x, a, true, IS(name, "selectattr"), out);
    if (IS(name, "sort") || IS(name, "dictsort") || IS(name, "unique") || IS(name, "max") || IS(name, "min"))
        return f_sort(c, at, name, x, a, out);
    if (IS(name, "reverse")) {
        if (x->type == CT_STR) {
            ct_list *l;
            char *p;
            BK_TRY(ct_iter(c, at, x, &l));
            BK_TRY(new_str(c, at, x->s.n, &p));
            size_t k = 0;
            for (size_t i = l->n; i-- > 0;) {
                memcpy(p + k, l->v[i].s.p, l->v[i].s.n);
                k += l->v[i].s.n;
            }
            *out = ct_strv(p, k);
            return BRISK_OK;
        }
        ct_list *l, *r;
        BK_TRY(ct_iter(c, at, x, &l));
        if (!(r = ct_list_new(&c->a, l->n))) return ct_nomem(at);
        for (size_t i = 0; i < l->n; i++) r->v[i] = l->v[l->n - 1 - i];
        *out = listv(r);
        return BRISK_OK;
    }
    if (IS(name, "attr")) {
        if (!a0 || a0->type != CT_STR) return ct_fail(at, BRISK_ERR_FORMAT, "attr needs a name");
        *out = ct_getattr(x, a0->s.p, a0->s.n);
        return BRISK_OK;
    }
    if (IS(name, "int")) return to_number(at, x, true, ct_arg(a, 0, "default"), out);
    if (IS(name, "float")) return to_number(at, x, false, ct_arg(a, 0, "default"), out);
    if (IS(name, "abs")) {
        if (x->type == CT_FLOAT) *out = ct_float(fabs(x->f));
        else if (is_intlike(x) && as_int(x) != INT64_MIN) *out = ct_int(as_int(x) < 0 ? -as_int(x) : as_int(x));
        else return ct_fail(at, BRISK_ERR_FORMAT, "bad operand type for abs(): '%s'", ct_type_name(x));
        return BRISK_OK;
    }
    if (IS(name, "round")) {
        const ct_val *prec = ct_arg(a, 0, "precision"), *method = ct_arg(a, 1, "method");
        if (!is_number(x)) return ct_fail(at, BRISK_ERR_FORMAT, "round needs a number, got %s", ct_type_name(x));
        int64_t p = prec && is_intlike(prec) ? as_int(prec) : 0;
        if (p < -20 || p > 20) return ct_fail(at, BRISK_ERR_RANGE, "round: precision out of range");
        double scale = pow(10, (double)p), v = as_float(x) * scale;
        if (method && method->type == CT_STR && IS(method->s, "floor")) v = floor(v);
        else if (method && method->type == CT_STR && IS(method->s, "ceil")) v = ceil(v);
        else v = nearbyint(v); /* Python's round: half to even */
        *out = ct_float(v / scale);
        return BRISK_OK;
    }
    if (IS(name, "sum")) {
        ct_list *l;
        BK_TRY(ct_iter(c, at, x, &l));
        const ct_val *attr = ct_arg(a, 0, "attribute"), *start = ct_arg(a, 1, "start");
        ct_val acc = start ? *start : ct_int(0);
        for (size_t i = 0; i < l->n; i++) {
            ct_val v = attr && attr->type == CT_STR ? attr_path(&l->v[i], attr->s) : l->v[i];
            if (!is_number(&v) || !is_number(&acc)) return ct_fail(at, BRISK_ERR_FORMAT, "sum needs numbers, got %s", ct_type_name(&v));
            if (is_intlike(&v) && is_intlike(&acc)) {
                int64_t r;
                if (__builtin_add_overflow(as_int(&acc), as_int(&v), &r)) return ct_fail(at, BRISK_ERR_RANGE, "integer overflow in sum");
                acc = ct_int(r);
            } else {
                acc = ct_float(as_float(&acc) + as_float(&v));
            }
        }
        *out = acc;
        return BRISK_OK;
    }
    /* the rest work on strings (anything else through str()) */
    ct_val sv;
    BK_TRY(ct_to_str(c, at, x, &sv));
    ct_str s = sv.s;
    if (IS(name, "trim")) {
        const ct_val *chars = ct_arg(a, 0, "chars");
        if (chars && chars->type != CT_NONE) BK_TRY(need_str(at, "trim", chars));
        ct_str t = strip(s, chars && chars->type == CT_STR ? &chars->s : NULL, true, true);
        *out = ct_strv(t.p, t.n);
        return BRISK_OK;
    }
    if (IS(name, "upper")) return change_case(c, at, s, CASE_UPPER, out);
    if (IS(name, "lower")) return change_case(c, at, s, CASE_LOWER, out);
    if (IS(name, "capitalize")) return change_case(c, at, s, CASE_CAPITALIZE, out);
    if (IS(name, "title")) return change_case(c, at, s, CASE_TITLE_FILTER, out);
    if (IS(name, "escape") || IS(name, "e") || IS(name, "forceescape")) return html_escape(c, at, s, out);
    if (IS(name, "indent")) return f_indent(c, at, s, a, out);
    if (IS(name, "format")) return ct_printf(c, at, s, a->pos, a->np, out);
    if (IS(name, "wordcount")) {
        int64_t words = 0;
        bool in = false;
        for (size_t i = 0; i < s.n; i++) {
            char ch = s.p[i];
            bool w = ascii_alpha(ch) || (ch >= '0' && ch <= '9') || ch == '_' || (unsigned char)ch >= 0x80;
            if (w && !in) words++;
            in = w;
        }
        *out = ct_int(words);
        return BRISK_OK;
    }
    if (IS(name, "replace")) {
        const ct_val *old = ct_arg(a, 0, "old"), *rep = ct_arg(a, 1, "new"), *cnt = ct_arg(a, 2, "count");
        BK_TRY(need_str(at, "replace", old));
        BK_TRY(need_str(at, "replace", rep));
        return replace(c, at, s, old->s, rep->s, cnt && is_intlike(cnt) ? as_int(cnt) : -1, out);
    }
    return ct_fail(at, BRISK_ERR_UNSUPPORTED, "unsupported filter '%.*s'", (int)name.n, name.p);
}

/* ---- methods ----------------------------------------------------------- */

/* Code point index of byte offset off. */
static int64_t cp_index(ct_str s, size_t off) { return (int64_t)ct_utf8_len(s.p, off); }

/* Optional start/end (code point indices, Python-adjusted) as byte offsets. */
static void str_range(ct_str s, const ct_args *a, size_t first, size_t *b, size_t *e) {
    int64_t len = (int64_t)ct_utf8_len(s.p, s.n), st = 0, en = len;
    const ct_val *sv = ct_arg(a, first, NULL), *ev = ct_arg(a, first + 1, NULL);
    if (sv && is_intlike(sv)) st = as_int(sv);
    if (ev && is_intlike(ev)) en = as_int(ev);
    if (st < 0) st = st + len < 0 ? 0 : st + len;
    if (en < 0) en = en + len < 0 ? 0 : en + len;
    if (st > len) st = len;
    if (en > len) en = len;
    *b = ct_utf8_offset(s.p, s.n, (size_t)st);
    *e = en < st ? *b : ct_utf8_offset(s.p, s.n, (size_t)en);
}

static brisk_status str_method(ct_ctx *c, const ct_node *at, ct_str s, ct_str name, const ct_args *a, ct_val *out) {
    const ct_val *a0 = ct_arg(a, 0, NULL);
    if (IS(name, "startswith") || IS(name, "endswith")) {
        bool starts = IS(name, "startswith");
        if (!a0) return ct_fail(at, BRISK_ERR_FORMAT, "%.*s() needs an argument", (int)name.n, name.p);
        size_t b, e;
        str_range(s, a, 1, &b, &e);
        ct_str sub = {s.p + b, e - b};
        size_t np = a0->type == CT_LIST ? a0->list->n : 1;
        *out = ct_bool(false);
        for (size_t i = 0; i < np; i++) {
            const ct_val *p = a0->type == CT_LIST ? &a0->list->v[i] : a0;
            BK_TRY(need_str(at, starts ? "startswith()" : "endswith()", p));
            if (p->s.n <= sub.n && !memcmp(starts ? sub.p : sub.p + sub.n - p->s.n, p->s.p, p->s.n)) {
                *out = ct_bool(true);
                break;
            }
        }
        return BRISK_OK;
    }
    if (IS(name, "strip") || IS(name, "lstrip") || IS(name, "rstrip")) {
        if (a0 && a0->type != CT_NONE) BK_TRY(need_str(at, "strip()", a0));
        ct_str t = strip(s, a0 && a0->type == CT_STR ? &a0->s : NULL, !IS(name, "rstrip"), !IS(name, "lstrip"));
        *out = ct_strv(t.p, t.n);
        return BRISK_OK;
    }
    if (IS(name, "split") || IS(name, "rsplit")) {
        const ct_val *mx = ct_arg(a, 1, "maxsplit");
        return split(c, at, s, ct_arg(a, 0, "sep"), mx && is_intlike(mx) ? as_int(mx) : -1, IS(name, "rsplit"), out);
    }
    if (IS(name, "splitlines")) {
        ct_list *l = ct_list_new(&c->a, 0);
        size_t cap = 0, i = 0;
        if (!l) return ct_nomem(at);
        while (i < s.n) {
            const char *nl = memchr(s.p + i, '\n', s.n - i);
            size_t e = nl ? (size_t)(nl - s.p) : s.n;
            size_t ee = e > i && s.p[e - 1] == '\r' ? e - 1 : e;
            BK_TRY(push_str(c, at, l, &cap, s.p + i, ee - i));
            i = e + 1;
        }
        *out = listv(l);
        return BRISK_OK;
    }
    if (IS(name, "replace")) {
        const ct_val *cnt = ct_arg(a, 2, "count");
        BK_TRY(need_str(at, "replace()", a0));
        BK_TRY(need_str(at, "replace()", ct_arg(a, 1, NULL)));
        return replace(c, at, s, a0->s, a->pos[1].s, cnt && is_intlike(cnt) ? as_int(cnt) : -1, out);
    }
    if (IS(name, "upper")) return change_case(c, at, s, CASE_UPPER, out);
    if (IS(name, "lower") || IS(name, "casefold")) return change_case(c, at, s, CASE_LOWER, out);
    if (IS(name, "capitalize")) return change_case(c, at, s, CASE_CAPITALIZE, out);
    if (IS(name, "title")) return change_case(c, at, s, CASE_TITLE_METHOD, out);
    if (IS(name, "find") || IS(name, "rfind") || IS(name, "index") || IS(name, "rindex") || IS(name, "count")) {
        BK_TRY(need_str(at, "find()", a0));
        size_t b, e;
        str_range(s, a, 1, &b, &e);
        ct_str sub = {s.p + b, e - b};
        if (IS(name, "count")) {
            int64_t k = 0;
            if (!a0->s.n) k = (int64_t)ct_utf8_len(sub.p, sub.n) + 1;
            else
                for (const char *h = find_sub(sub, 0, a0->s); h; h = find_sub(sub, (size_t)(h - sub.p) + a0->s.n, a0->s)) k++;
            *out = ct_int(k);
            return BRISK_OK;
        }
        bool rev = name.p[0] == 'r';
        const char *h = rev ? rfind_sub(sub, sub.n, a0->s) : find_sub(sub, 0, a0->s);
        if (!h && (IS(name, "index") || IS(name, "rindex"))) return ct_fail(at, BRISK_ERR_FORMAT, "substring not found");
        *out = ct_int(h ? cp_index(s, (size_t)(h - s.p)) : -1);
        return BRISK_OK;
    }
    if (IS(name, "join")) {
        ct_val sep = ct_strv(s.p, s.n);
        ct_args ja = {.np = 1, .pos = &sep};
        if (!a0) return ct_fail(at, BRISK_ERR_FORMAT, "join() needs an argument");
        ct_list *l;
        BK_TRY(ct_iter(c, at, a0, &l));
        for (size_t i = 0; i < l->n; i++) BK_TRY(need_str(at, "join()", &l->v[i]));
        return f_join(c, at, &(ct_val){.type = CT_LIST, .list = l}, &ja, out);
    }
    if (IS(name, "isdigit") || IS(name, "isalpha") || IS(name, "isalnum") || IS(name, "isspace") ||
        IS(name, "islower") || IS(name, "isupper")) {
        bool ok = s.n > 0, cased = false;
        for (size_t i = 0; i < s.n && ok; i++) {
            char ch = s.p[i];
            bool d = ch >= '0' && ch <= '9', al = ascii_alpha(ch);
            if (IS(name, "isdigit")) ok = d;
            else if (IS(name, "isalpha")) ok = al;
            else if (IS(name, "isalnum")) ok = d || al;
            else if (IS(name, "isspace")) ok = ct_space_at(s.p, s.n, i) > 0;
            else {
                if (al) cased = true;
                ok = IS(name, "islower") ? !(ch >= 'A' && ch <= 'Z') : !(ch >= 'a' && ch <= 'z');
            }
        }
        if (IS(name, "islower") || IS(name, "isupper")) ok = ok && cased;
        *out = ct_bool(ok);
        return BRISK_OK;
    }
    return ct_fail(at, BRISK_ERR_UNSUPPORTED, "unsupported string method '%.*s'", (int)name.n, name.p);
}

brisk_status ct_method(ct_ctx *c, const ct_node *at, const ct_val *obj, ct_str name, const ct_args *a, ct_val *out) {
    if (obj->type == CT_STR) return str_method(c, at, obj->s, name, a, out);
    if (obj->type == CT_DICT) {
        const ct_dict *d = obj->dict;
        if (IS(name, "get")) {
            const ct_val *k = ct_arg(a, 0, NULL), *dflt = ct_arg(a, 1, NULL);
            if (!k) return ct_fail(at, BRISK_ERR_FORMAT, "get() needs a key");
            const ct_val *v = k->type == CT_STR ? ct_dict_get(d, k->s.p, k->s.n) : NULL;
            *out = v ? *v : dflt ? *dflt : ct_none();
            return BRISK_OK;
        }
        if (IS(name, "items") || IS(name, "keys") || IS(name, "values")) {
            ct_list *l = ct_list_new(&c->a, d->n);
            if (!l) return ct_nomem(at);
            for (size_t i = 0; i < d->n; i++) {
                ct_val k = ct_strv(d->k[i].p, d->k[i].n);
                if (IS(name, "items")) {
                    ct_list *pair = ct_list_new(&c->a, 2);
                    if (!pair) return ct_nomem(at);
                    pair->v[0] = k;
                    pair->v[1] = d->v[i];
                    l->v[i] = listv(pair);
                } else {
                    l->v[i] = IS(name, "keys") ? k : d->v[i];
                }
            }
            *out = listv(l);
            return BRISK_OK;
        }
    }
    if (obj->type == CT_LOOP && IS(name, "cycle")) {
        if (!a->np) return ct_fail(at, BRISK_ERR_FORMAT, "loop.cycle() needs arguments");
        *out = a->pos[(size_t)obj->loop->index0 % a->np];
        return BRISK_OK;
    }
    if (obj->type == CT_UNDEF)
        return ct_fail(at, BRISK_ERR_FORMAT, "calling '%.*s' on an undefined value", (int)name.n, name.p);
    return ct_fail(at, BRISK_ERR_FORMAT, "'%s' object has no method '%.*s'", ct_type_name(obj), (int)name.n, name.p);
}

/* ---- global functions -------------------------------------------------- */

brisk_status ct_call_func(ct_ctx *c, const ct_node *at, int func, const ct_args *a, ct_val *out) {
    switch (func) {
    case CT_F_RANGE: {
        int64_t v[3] = {0, 0, 1};
        if (a->np < 1 || a->np > 3) return ct_fail(at, BRISK_ERR_FORMAT, "range() takes 1 to 3 arguments");
        for (size_t i = 0; i < a->np; i++) {
            if (!is_intlike(&a->pos[i])) return ct_fail(at, BRISK_ERR_FORMAT, "range() needs integers");
            v[a->np == 1 ? 1 : i] = as_int(&a->pos[i]);
        }
        if (v[2] == 0) return ct_fail(at, BRISK_ERR_FORMAT, "range() step must not be zero");
        int64_t n = 0;
        if (v[2] > 0 && v[0] < v[1]) n = (int64_t)(((uint64_t)v[1] - (uint64_t)v[0] - 1) / (uint64_t)v[2] + 1);
        if (v[2] < 0 && v[0] > v[1]) n = (int64_t)(((uint64_t)v[0] - (uint64_t)v[1] - 1) / ((uint64_t)0 - (uint64_t)v[2]) + 1);
        if (n > 100000 || n < 0) return ct_fail(at, BRISK_ERR_RANGE, "range() of more than 100000 items");
        ct_list *l = ct_list_new(&c->a, (size_t)n);
        if (!l) return ct_nomem(at);
        for (int64_t i = 0; i < n; i++) l->v[i] = ct_int((int64_t)((uint64_t)v[0] + (uint64_t)i * (uint64_t)v[2]));
        *out = listv(l);
        return BRISK_OK;
    }
    case CT_F_NAMESPACE:
    case CT_F_DICT: {
        ct_dict *d = ct_dict_new(&c->a, a->nk + 4);
        if (!d) return ct_nomem(at);
        if (a->np > 1) return ct_fail(at, BRISK_ERR_FORMAT, "%s() takes at most 1 positional argument", func == CT_F_DICT ? "dict" : "namespace");
        if (a->np == 1) {
            const ct_val *src = &a->pos[0];
            if (src->type == CT_DICT || src->type == CT_NS) {
                for (size_t i = 0; i < src->dict->n; i++)
                    if (!ct_dict_set(&c->a, d, src->dict->k[i], src->dict->v[i])) return ct_nomem(at);
            } else if (src->type == CT_LIST) {
                for (size_t i = 0; i < src->list->n; i++) {
                    const ct_val *p = &src->list->v[i];
                    if (p->type != CT_LIST || p->list->n != 2 || p->list->v[0].type != CT_STR)
                        return ct_fail(at, BRISK_ERR_FORMAT, "dict()/namespace(): expected (key, value) pairs");
                    if (!ct_dict_set(&c->a, d, p->list->v[0].s, p->list->v[1])) return ct_nomem(at);
                }
            } else {
                return ct_fail(at, BRISK_ERR_FORMAT, "dict()/namespace(): cannot convert a %s", ct_type_name(src));
            }
        }
        for (size_t i = 0; i < a->nk; i++)
            if (!ct_dict_set(&c->a, d, a->kn[i], a->kv[i])) return ct_nomem(at);
        *out = (ct_val){.type = func == CT_F_DICT ? CT_DICT : CT_NS, .dict = d};
        return BRISK_OK;
    }
    case CT_F_RAISE: {
        ct_val msg = ct_strv("", 0);
        if (a->np) BK_TRY(ct_to_str(c, at, &a->pos[0], &msg));
        return bk_fail(BRISK_ERR_INVALID_ARG, "chat template error: %.*s", (int)(msg.s.n > 400 ? 400 : msg.s.n), msg.s.p);
    }
    case CT_F_STRFTIME: {
        const ct_val *fmt = ct_arg(a, 0, NULL);
        BK_TRY(need_str(at, "strftime_now()", fmt));
        if (fmt->s.n > 200) return ct_fail(at, BRISK_ERR_RANGE, "strftime_now(): format longer than 200 bytes");
        char f[256], buf[1024];
        memcpy(f, fmt->s.p, fmt->s.n);
        f[fmt->s.n] = 0;
        time_t t = (time_t)c->now;
        struct tm tm;
        if (!localtime_r(&t, &tm)) return ct_fail(at, BRISK_ERR_FORMAT, "strftime_now(): bad time");
        size_t n = f[0] ? strftime(buf, sizeof buf, f, &tm) : 0;
        char *p;
        BK_TRY(new_str(c, at, n, &p));
        memcpy(p, buf, n);
        *out = ct_strv(p, n);
        return BRISK_OK;
    }
    default: return ct_fail(at, BRISK_ERR_FORMAT, "internal error: unknown function %d", func);
    }
}
