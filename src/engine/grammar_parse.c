/* grammar_parse.c — GBNF text to gram_rules (grammar.h).
 *
 * The syntax is llama.cpp's: `name ::= alternatives`, alternatives separated
 * by `|`, sequences of "literals", [classes] ([^...] negated, a-z ranges),
 * `.` (any character), rule names and (groups), each optionally followed by
 * `*`, `+`, `?`, `{m}`, `{m,}`, `{m,n}` or `{,n}`; `#` comments to the end of
 * the line; escapes \n \r \t \\ \" \' \[ \] \- \^ \/ \xHH \uHHHH \UHHHHHHHH.
 * A rule ends at a newline unless the next line does not start a new rule
 * (`name ::=`), so `| b` on its own line continues the rule (llama.cpp's
 * grammars parse the same; this one also takes that continuation).
 *
 * Groups and repetitions become generated rules; x* is `R ::= x R | ""` (a
 * right recursion the matcher runs in constant stack depth). Left recursion
 * is refused here, since a top-down matcher would loop on it.
 */
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "engine/grammar.h"

typedef struct evec {
    gram_elem *e; /* (n, cap) */
    int n, cap;
} evec;

typedef struct prule {
    char *name;
    evec body;
    bool defined;
    const char *first_use; /* where an undefined rule was first referenced */
    int n_gen;             /* generated children so far (names) */
} prule;

typedef struct parser {
    const char *start, *p, *end;
    prule *rules; /* (n_rules, cap_rules) */
    int n_rules, cap_rules;
    int *hash;    /* (hcap) rule index + 1, open addressing on names */
    int hcap;
    gram_class *classes;
    int n_classes, cap_classes;
    uint32_t *ranges; /* (n_ranges, 2) */
    int n_ranges, cap_ranges; /* pairs */
    long total_elems;
    brisk_status st;
} parser;

/* Records the first error at position at (line and column counted in bytes). */
static bool perr(parser *ps, const char *at, const char *fmt, ...) BK_PRINTF(3, 4);
static bool perr(parser *ps, const char *at, const char *fmt, ...) {
    if (ps->st != BRISK_OK) return false;
    int line = 1, col = 1;
    for (const char *q = ps->start; q < at && q < ps->end; q++) {
        if (*q == '\n') line++, col = 1;
        else col++;
    }
    char msg[200];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    ps->st = bk_fail(BRISK_ERR_INVALID_ARG, "grammar: line %d, column %d: %s", line, col, msg);
    return false;
}

static bool oom(parser *ps) {
    if (ps->st == BRISK_OK) ps->st = bk_fail(BRISK_ERR_NOMEM, "grammar: out of memory");
    return false;
}

/* Grows *p (elements of size sz) to hold n + 1. */
static bool grow(parser *ps, void **p, int *cap, int n, size_t sz) {
    if (n < *cap) return true;
    int nc = *cap ? *cap * 2 : 16;
    void *q = realloc(*p, (size_t)nc * sz);
    if (!q) return oom(ps);
    *p = q;
    *cap = nc;
    return true;
}

static bool push(parser *ps, evec *v, uint32_t type, uint32_t val) {
    if (++ps->total_elems > GRAM_MAX_ELEMS)
        return perr(ps, ps->p, "the grammar expands to more than %d elements", GRAM_MAX_ELEMS);
    if (!grow(ps, (void **)&v->e, &v->cap, v->n, sizeof *v->e)) return false;
    v->e[v->n++] = (gram_elem){type, val};
    return true;
}

static uint32_t name_hash(const char *s, size_t n) {
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++) h = (h ^ (unsigned char)s[i]) * 16777619u;
    return h;
}

/* The index of rule `name` (n bytes), created undefined when new; -1 on OOM. */
static int rule_get(parser *ps, const char *name, size_t n, bool create) {
    if (ps->hcap < 2 * (ps->n_rules + 1)) {
        int nc = ps->hcap ? ps->hcap * 2 : 64;
        int *h = calloc((size_t)nc, sizeof *h);
        if (!h) return oom(ps), -1;
        for (int i = 0; i < ps->n_rules; i++) {
            uint32_t k = name_hash(ps->rules[i].name, strlen(ps->rules[i].name)) & (uint32_t)(nc - 1);
            while (h[k]) k = (k + 1) & (uint32_t)(nc - 1);
            h[k] = i + 1;
        }
        free(ps->hash);
        ps->hash = h;
        ps->hcap = nc;
    }
    uint32_t k = name_hash(name, n) & (uint32_t)(ps->hcap - 1);
    for (; ps->hash[k]; k = (k + 1) & (uint32_t)(ps->hcap - 1)) {
        const char *rn = ps->rules[ps->hash[k] - 1].name;
        if (strlen(rn) == n && !memcmp(rn, name, n)) return ps->hash[k] - 1;
    }
    if (!create) return -1;
    if (!grow(ps, (void **)&ps->rules, &ps->cap_rules, ps->n_rules, sizeof *ps->rules)) return -1;
    prule *r = &ps->rules[ps->n_rules];
    memset(r, 0, sizeof *r);
    if (!(r->name = strndup(name, n))) return oom(ps), -1;
    ps->hash[k] = ++ps->n_rules;
    return ps->n_rules - 1;
}

/* A new rule named parent_N for a group or a repetition. */
static int rule_gen(parser *ps, int parent) {
    char name[300];
    for (;;) {
        snprintf(name, sizeof name, "%.200s_%d", ps->rules[parent].name, ++ps->rules[parent].n_gen);
        if (rule_get(ps, name, strlen(name), false) < 0) break;
    }
    if (ps->st != BRISK_OK) return -1;
    int r = rule_get(ps, name, strlen(name), true);
    if (r >= 0) ps->rules[r].defined = true;
    return r;
}

static int add_class(parser *ps, bool neg) {
    if (!grow(ps, (void **)&ps->classes, &ps->cap_classes, ps->n_classes, sizeof *ps->classes)) return -1;
    ps->classes[ps->n_classes] = (gram_class){(uint32_t)ps->n_ranges, 0, neg};
    return ps->n_classes++;
}

static bool add_range(parser *ps, int cls, uint32_t lo, uint32_t hi) {
    if (!grow(ps, (void **)&ps->ranges, &ps->cap_ranges, ps->n_ranges, 2 * sizeof *ps->ranges)) return false;
    ps->ranges[2 * ps->n_ranges] = lo;
    ps->ranges[2 * ps->n_ranges + 1] = hi;
    ps->n_ranges++;
    ps->classes[cls].n++;
    return true;
}

/* ---- lexing --------------------------------------------------------------- */

static bool is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '-' || c == '_';
}

/* Skips blanks and comments, and newlines when nl. */
static void skip_space(parser *ps, bool nl) {
    while (ps->p < ps->end) {
        char c = *ps->p;
        if (c == ' ' || c == '\t' || c == '\r' || (nl && c == '\n')) ps->p++;
        else if (c == '#')
            while (ps->p < ps->end && *ps->p != '\n') ps->p++;
        else break;
    }
}

/* Whether q starts `name ::=`. */
static bool starts_rule(const parser *ps, const char *q) {
    if (q >= ps->end || !is_word(*q)) return false;
    while (q < ps->end && is_word(*q)) q++;
    while (q < ps->end && (*q == ' ' || *q == '\t')) q++;
    return ps->end - q >= 3 && !memcmp(q, "::=", 3);
}

/* Space between the items of a sequence: inside a group newlines are space;
 * at the top level a newline ends the rule unless the next line continues it. */
static void seq_space(parser *ps, int depth) {
    skip_space(ps, depth > 0);
    if (depth > 0 || ps->p >= ps->end || *ps->p != '\n') return;
    const char *save = ps->p;
    skip_space(ps, true);
    if (ps->p >= ps->end || starts_rule(ps, ps->p)) ps->p = save;
}

static int hexval(char c) {
    if (c >= '0' && c <= '9') return c - '0';
    if (c >= 'a' && c <= 'f') return c - 'a' + 10;
    if (c >= 'A' && c <= 'F') return c - 'A' + 10;
    return -1;
}

/* One character of a literal or class (an escape or one UTF-8 sequence). */
static bool parse_char(parser *ps, uint32_t *cp) {
    const char *at = ps->p;
    if (ps->p >= ps->end) return perr(ps, at, "unexpected end of grammar");
    unsigned char c = (unsigned char)*ps->p++;
    if (c == '\\') {
        if (ps->p >= ps->end) return perr(ps, at, "unexpected end of grammar after '\\'");
        char e = *ps->p++;
        int nd = e == 'x' ? 2 : e == 'u' ? 4 : e == 'U' ? 8 : 0;
        if (nd) {
            uint32_t v = 0;
            for (int i = 0; i < nd; i++, ps->p++) {
                int h = ps->p < ps->end ? hexval(*ps->p) : -1;
                if (h < 0) return perr(ps, at, "'\\%c' needs %d hex digits", e, nd);
                v = v << 4 | (uint32_t)h;
            }
            if (v > 0x10FFFF) return perr(ps, at, "code point U+%X is beyond U+10FFFF", v);
            *cp = v;
            return true;
        }
        switch (e) {
        case 'n': *cp = '\n'; return true;
        case 'r': *cp = '\r'; return true;
        case 't': *cp = '\t'; return true;
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': case '/':
            *cp = (uint32_t)e;
            return true;
        default: return perr(ps, at, "unknown escape '\\%c'", e);
        }
    }
    int n = c < 0x80 ? 0 : (c & 0xE0) == 0xC0 ? 1 : (c & 0xF0) == 0xE0 ? 2 : (c & 0xF8) == 0xF0 ? 3 : -1;
    if (n < 0) return perr(ps, at, "invalid UTF-8");
    uint32_t v = n == 0 ? c : n == 1 ? (c & 0x1Fu) : n == 2 ? (c & 0x0Fu) : (c & 0x07u);
    for (int i = 0; i < n; i++, ps->p++) {
        if (ps->p >= ps->end || ((unsigned char)*ps->p & 0xC0) != 0x80) return perr(ps, at, "invalid UTF-8");
        v = v << 6 | ((unsigned char)*ps->p & 0x3Fu);
    }
    if (v > 0x10FFFF) return perr(ps, at, "invalid UTF-8");
    *cp = v;
    return true;
}

/* ---- items -------------------------------------------------------------- */

static bool parse_alternates(parser *ps, int rule, int depth);

static bool push_char(parser *ps, evec *v, uint32_t cp) {
    int c = add_class(ps, false);
    return c >= 0 && add_range(ps, c, cp, cp) && push(ps, v, GE_CLASS, (uint32_t)c);
}

static bool parse_literal(parser *ps, evec *v) {
    const char *at = ps->p++;
    while (ps->p < ps->end && *ps->p != '"') {
        uint32_t cp;
        if (!parse_char(ps, &cp) || !push_char(ps, v, cp)) return false;
    }
    if (ps->p >= ps->end) return perr(ps, at, "unterminated string literal");
    ps->p++;
    return true;
}

static bool parse_class(parser *ps, evec *v) {
    const char *at = ps->p++;
    bool neg = ps->p < ps->end && *ps->p == '^';
    if (neg) ps->p++;
    int c = add_class(ps, neg);
    if (c < 0) return false;
    while (ps->p < ps->end && *ps->p != ']') {
        uint32_t lo, hi;
        if (!parse_char(ps, &lo)) return false;
        hi = lo;
        if (ps->end - ps->p >= 2 && ps->p[0] == '-' && ps->p[1] != ']') {
            ps->p++;
            const char *rat = ps->p;
            if (!parse_char(ps, &hi)) return false;
            if (hi < lo) return perr(ps, rat, "range end U+%X is below its start U+%X", hi, lo);
        }
        if (!add_range(ps, c, lo, hi)) return false;
    }
    if (ps->p >= ps->end) return perr(ps, at, "unterminated character class");
    ps->p++;
    return push(ps, v, GE_CLASS, (uint32_t)c);
}

static bool parse_count(parser *ps, long *out) {
    long v = 0;
    const char *at = ps->p;
    if (ps->p >= ps->end || *ps->p < '0' || *ps->p > '9') return perr(ps, at, "expected a number");
    while (ps->p < ps->end && *ps->p >= '0' && *ps->p <= '9') {
        v = v * 10 + (*ps->p++ - '0');
        if (v > GRAM_MAX_ELEMS) return perr(ps, at, "repetition count too large");
    }
    *out = v;
    return true;
}

/* Rule R ::= x R | "" (star) or R ::= x | "" (opt), with x = e; returns R. */
static int gen_loop(parser *ps, int parent, gram_elem e, bool star, int tail) {
    int r = rule_gen(ps, parent);
    if (r < 0) return -1;
    evec *b = &ps->rules[r].body;
    if (!push(ps, b, e.type, e.val)) return -1;
    if (star && !push(ps, b, GE_REF, (uint32_t)r)) return -1;
    if (tail >= 0 && !push(ps, b, GE_REF, (uint32_t)tail)) return -1;
    if (!push(ps, b, GE_ALT, 0) || !push(ps, b, GE_END, 0)) return -1;
    return r;
}

/* Applies a postfix operator to the item at body[from..n) of rule. */
static bool parse_postfix(parser *ps, int rule, int from) {
#define BODY (&ps->rules[rule].body) /* re-read: generating a rule may move the table */
    const char *at = ps->p;
    char op = ps->p < ps->end ? *ps->p : 0;
    if (op != '*' && op != '+' && op != '?' && op != '{') return true;
    ps->p++;
    long lo = 0, hi = -1; /* hi -1: unbounded */
    if (op == '+') lo = 1;
    else if (op == '?') hi = 1;
    else if (op == '{') {
        skip_space(ps, false);
        if (ps->p < ps->end && *ps->p == ',') lo = 0;
        else if (!parse_count(ps, &lo)) return false;
        skip_space(ps, false);
        if (ps->p < ps->end && *ps->p == ',') {
            ps->p++;
            skip_space(ps, false);
            if (ps->p < ps->end && *ps->p != '}' && !parse_count(ps, &hi)) return false;
        } else hi = lo;
        skip_space(ps, false);
        if (ps->p >= ps->end || *ps->p != '}') return perr(ps, at, "expected '}' to close the repetition");
        ps->p++;
        if (hi >= 0 && hi < lo) return perr(ps, at, "repetition {%ld,%ld}: the maximum is below the minimum", lo, hi);
    }
    if (from == BODY->n) return perr(ps, at, "'%c' follows nothing", op);
    if (BODY->n - from > 1) { /* a literal of several characters repeats as a whole */
        int r = rule_gen(ps, rule);
        if (r < 0) return false;
        for (int i = from; i < BODY->n; i++)
            if (!push(ps, &ps->rules[r].body, BODY->e[i].type, BODY->e[i].val)) return false;
        if (!push(ps, &ps->rules[r].body, GE_END, 0)) return false;
        BODY->n = from;
        if (!push(ps, BODY, GE_REF, (uint32_t)r)) return false;
    }
    gram_elem e = BODY->e[from];
    BODY->n = from;
    for (long i = 0; i < lo; i++)
        if (!push(ps, BODY, e.type, e.val)) return false;
    if (hi < 0) {
        int r = gen_loop(ps, rule, e, true, -1);
        return r >= 0 && push(ps, BODY, GE_REF, (uint32_t)r);
    }
    int tail = -1; /* (x (x (x)?)?)? built from the inside out */
    for (long i = lo; i < hi; i++)
        if ((tail = gen_loop(ps, rule, e, false, tail)) < 0) return false;
    return tail < 0 || push(ps, BODY, GE_REF, (uint32_t)tail);
#undef BODY
}

static bool parse_sequence(parser *ps, int rule, int depth) {
    for (;;) {
        evec *v = &ps->rules[rule].body; /* re-read: rules may move */
        int from = v->n;
        const char *at = ps->p;
        char c = ps->p < ps->end ? *ps->p : 0;
        if (c == '"') {
            if (!parse_literal(ps, v)) return false;
        } else if (c == '[') {
            if (!parse_class(ps, v)) return false;
        } else if (c == '.') {
            ps->p++;
            int k = add_class(ps, true);
            if (k < 0 || !push(ps, v, GE_CLASS, (uint32_t)k)) return false;
        } else if (is_word(c)) {
            while (ps->p < ps->end && is_word(*ps->p)) ps->p++;
            int r = rule_get(ps, at, (size_t)(ps->p - at), true);
            if (r < 0) return false;
            if (!ps->rules[r].first_use) ps->rules[r].first_use = at;
            if (!push(ps, &ps->rules[rule].body, GE_REF, (uint32_t)r)) return false;
        } else if (c == '(') {
            if (depth >= GRAM_MAX_DEPTH) return perr(ps, at, "groups nested deeper than %d", GRAM_MAX_DEPTH);
            ps->p++;
            skip_space(ps, true);
            int r = rule_gen(ps, rule);
            if (r < 0 || !parse_alternates(ps, r, depth + 1)) return false;
            if (ps->p >= ps->end || *ps->p != ')') return perr(ps, at, "'(' without a matching ')'");
            ps->p++;
            if (!push(ps, &ps->rules[rule].body, GE_REF, (uint32_t)r)) return false;
        } else return true;
        skip_space(ps, depth > 0);
        if (!parse_postfix(ps, rule, from)) return false;
        seq_space(ps, depth);
    }
}

/* Alternatives into rule's body, ending with GE_END. */
static bool parse_alternates(parser *ps, int rule, int depth) {
    if (!parse_sequence(ps, rule, depth)) return false;
    while (ps->p < ps->end && *ps->p == '|') {
        ps->p++;
        skip_space(ps, true);
        if (!push(ps, &ps->rules[rule].body, GE_ALT, 0) || !parse_sequence(ps, rule, depth)) return false;
    }
    return push(ps, &ps->rules[rule].body, GE_END, 0);
}

static bool parse_rule(parser *ps) {
    const char *at = ps->p;
    while (ps->p < ps->end && is_word(*ps->p)) ps->p++;
    if (ps->p == at) return perr(ps, at, "expected a rule name");
    int r = rule_get(ps, at, (size_t)(ps->p - at), true);
    if (r < 0) return false;
    if (ps->rules[r].defined) return perr(ps, at, "rule '%s' is defined twice", ps->rules[r].name);
    ps->rules[r].defined = true;
    skip_space(ps, false);
    if (ps->end - ps->p < 3 || memcmp(ps->p, "::=", 3)) return perr(ps, ps->p, "expected '::=' after the rule name");
    ps->p += 3;
    skip_space(ps, true);
    if (!parse_alternates(ps, r, 0)) return false;
    if (ps->p < ps->end && *ps->p != '\n') {
        if (*ps->p == ')') return perr(ps, ps->p, "')' without a matching '('");
        return perr(ps, ps->p, "unexpected '%c'", *ps->p);
    }
    return true;
}

/* ---- checks --------------------------------------------------------------- */

/* Refuses left recursion: a rule that can reach itself without consuming a character. */
static bool check_left_recursion(parser *ps) {
    int n = ps->n_rules;
    bool *nullable = calloc((size_t)n, sizeof *nullable);
    char *color = calloc((size_t)n, 1);
    int *first = calloc((size_t)n + 1, sizeof *first); /* left-corner edges of rule r: edge[first[r]..first[r+1]) */
    int *edge = malloc(((size_t)ps->total_elems + 1) * sizeof *edge);
    int *stk = malloc((size_t)n * 2 * sizeof *stk);   /* (rule, next edge) pairs */
    bool ok = nullable && color && first && edge && stk ? true : oom(ps);
    for (bool changed = ok; changed;) { /* nullable: an alternative of nullable references only */
        changed = false;
        for (int r = 0; r < n; r++) {
            const evec *b = &ps->rules[r].body;
            bool all = true;
            for (int i = 0; i < b->n && !nullable[r]; i++) {
                gram_elem e = b->e[i];
                if (e.type == GE_ALT || e.type == GE_END) {
                    if (all) nullable[r] = changed = true;
                    all = true;
                } else if (e.type == GE_CLASS || !nullable[e.val]) all = false;
            }
        }
    }
    int ne = 0;
    for (int r = 0; r < n && ok; r++) {
        const evec *b = &ps->rules[r].body;
        first[r] = ne;
        bool live = true; /* still at the left edge of the alternative */
        for (int i = 0; i < b->n; i++) {
            gram_elem e = b->e[i];
            if (e.type == GE_ALT || e.type == GE_END) live = true;
            else if (!live) continue;
            else if (e.type == GE_CLASS) live = false;
            else {
                edge[ne++] = (int)e.val;
                live = nullable[e.val];
            }
        }
    }
    if (ok) first[n] = ne;
    for (int r0 = 0; r0 < n && ok; r0++) { /* iterative depth-first search for a cycle */
        if (color[r0]) continue;
        int sp = 0;
        stk[sp++] = r0, stk[sp++] = first[r0];
        color[r0] = 1;
        while (sp && ok) {
            int r = stk[sp - 2], i = stk[sp - 1];
            if (i == first[r + 1]) {
                color[r] = 2;
                sp -= 2;
                continue;
            }
            stk[sp - 1] = i + 1;
            int next = edge[i];
            if (color[next] == 1) {
                ps->st = bk_fail(BRISK_ERR_INVALID_ARG, "grammar: rule '%s' is left-recursive (it can reach itself "
                                 "before matching a character)", ps->rules[next].name);
                ok = false;
            } else if (!color[next]) {
                color[next] = 1;
                stk[sp++] = next, stk[sp++] = first[next];
            }
        }
    }
    free(nullable), free(color), free(first), free(edge), free(stk);
    return ok;
}

static void parser_free(parser *ps) {
    for (int i = 0; i < ps->n_rules; i++) {
        free(ps->rules[i].name);
        free(ps->rules[i].body.e);
    }
    free(ps->rules);
    free(ps->hash);
    free(ps->classes);
    free(ps->ranges);
}

void gram_rules_free(gram_rules *r) {
    if (!r) return;
    for (int i = 0; i < r->n_rules; i++) free(r->names[i]);
    free(r->names);
    free(r->elems);
    free(r->rule_start);
    free(r->classes);
    free(r->ranges);
    free(r);
}

/* Moves the parser's rules into one flat gram_rules. */
static brisk_status flatten(parser *ps, int root, gram_rules **out) {
    gram_rules *g = calloc(1, sizeof *g);
    if (!g) return bk_fail(BRISK_ERR_NOMEM, "grammar: out of memory");
    long ne = 0;
    for (int i = 0; i < ps->n_rules; i++) ne += ps->rules[i].body.n;
    g->elems = malloc((size_t)(ne + 1) * sizeof *g->elems);
    g->rule_start = malloc((size_t)ps->n_rules * sizeof *g->rule_start);
    g->names = calloc((size_t)ps->n_rules, sizeof *g->names);
    if (!g->elems || !g->rule_start || !g->names) {
        gram_rules_free(g);
        return bk_fail(BRISK_ERR_NOMEM, "grammar: out of memory");
    }
    g->n_rules = ps->n_rules;
    for (int i = 0; i < ps->n_rules; i++) {
        g->rule_start[i] = g->n_elems;
        memcpy(g->elems + g->n_elems, ps->rules[i].body.e, (size_t)ps->rules[i].body.n * sizeof *g->elems);
        g->n_elems += ps->rules[i].body.n;
        g->names[i] = ps->rules[i].name;
        ps->rules[i].name = NULL;
    }
    g->classes = ps->classes, g->n_classes = ps->n_classes, ps->classes = NULL;
    g->ranges = ps->ranges, g->n_ranges = ps->n_ranges, ps->ranges = NULL;
    g->root = root;
    *out = g;
    return BRISK_OK;
}

brisk_status gram_parse(const char *text, size_t len, const char *root, gram_rules **out) {
    *out = NULL;
    if (!text) return bk_fail(BRISK_ERR_INVALID_ARG, "grammar: no text");
    if (len > GRAM_MAX_TEXT) return bk_fail(BRISK_ERR_INVALID_ARG, "grammar: longer than %d bytes", GRAM_MAX_TEXT);
    if (!root) root = "root";
    parser ps = {.start = text, .p = text, .end = text + len};
    skip_space(&ps, true);
    while (ps.p < ps.end && ps.st == BRISK_OK) {
        if (!parse_rule(&ps)) break;
        skip_space(&ps, true);
    }
    for (int i = 0; i < ps.n_rules && ps.st == BRISK_OK; i++)
        if (!ps.rules[i].defined)
            perr(&ps, ps.rules[i].first_use, "rule '%s' is used but not defined", ps.rules[i].name);
    int r = ps.st == BRISK_OK ? rule_get(&ps, root, strlen(root), false) : -1;
    if (ps.st == BRISK_OK && r < 0)
        ps.st = bk_fail(BRISK_ERR_INVALID_ARG, "grammar: no rule named '%s' (the start symbol)", root);
    if (ps.st == BRISK_OK) check_left_recursion(&ps);
    brisk_status st = ps.st == BRISK_OK ? flatten(&ps, r, out) : ps.st;
    parser_free(&ps);
    return st;
}

bool gram_class_match(const gram_rules *r, const gram_class *c, uint32_t cp) {
    if (c->n == 0) return c->neg; /* `.` or []: no ranges (r->ranges may be NULL) */
    const uint32_t *rg = r->ranges + 2 * c->off;
    for (uint32_t i = 0; i < c->n; i++)
        if (cp >= rg[2 * i] && cp <= rg[2 * i + 1]) return !c->neg;
    return c->neg;
}
