/* chat_template_internal.h — what the chat template parser and interpreter
 * share: an arena, runtime values and the syntax tree. Not a public header. */
#ifndef BK_CHAT_TEMPLATE_INTERNAL_H
#define BK_CHAT_TEMPLATE_INTERNAL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/chat_template.h"

/* ---- arena: everything of a parse or a render, freed at once ---------- */

typedef struct ct_block ct_block;
typedef struct ct_arena {
    ct_block *head;
    size_t used;  /* bytes handed out, all blocks */
    size_t limit; /* 0: none; ct_alloc fails past it */
} ct_arena;

/* Zeroed memory, 16-byte aligned; NULL when out of memory or over the limit. */
void *ct_alloc(ct_arena *a, size_t n);
void ct_arena_free(ct_arena *a);

/* ---- values ------------------------------------------------------------ */

typedef enum ct_type {
    CT_UNDEF, /* s: the name that was looked up, or NULL */
    CT_NONE,
    CT_BOOL,
    CT_INT,
    CT_FLOAT,
    CT_STR,   /* UTF-8 bytes, not NUL-terminated */
    CT_LIST,  /* also tuples; immutable once built */
    CT_DICT,  /* insertion-ordered string keys */
    CT_NS,    /* namespace(): a dict whose attributes `set` may assign */
    CT_MACRO, /* a macro or a call block's caller() */
    CT_FUNC,  /* a global function: range, namespace, dict, ... */
    CT_LOOP,  /* the `loop` variable of a for loop */
} ct_type;

typedef struct ct_str {
    const char *p;
    size_t n;
} ct_str;

typedef struct ct_list ct_list;
typedef struct ct_dict ct_dict;
typedef struct ct_macro ct_macro;
typedef struct ct_loop ct_loop;

typedef struct ct_val {
    uint8_t type; /* ct_type */
    union {
        bool b;
        int64_t i;
        double f;
        ct_str s;
        ct_list *list;
        ct_dict *dict;
        ct_macro *macro;
        int func;
        ct_loop *loop;
    };
} ct_val;

struct ct_list {
    size_t n;
    ct_val *v; /* (n) */
};

struct ct_loop {
    int64_t index0, length;
    const ct_val *items; /* (length): for previtem/nextitem */
};

struct ct_macro {
    const struct ct_node *node;    /* N_MACRO, or N_CALLBLOCK for caller() */
    struct ct_scope *closure;      /* where it was defined */
};

struct ct_dict {
    size_t n, cap;
    ct_str *k; /* (cap) */
    ct_val *v; /* (cap) */
};

/* Constructors and helpers (chat_template_value.c). */
static inline ct_val ct_undef(const char *name, size_t n) {
    ct_val v = {.type = CT_UNDEF};
    v.s.p = name;
    v.s.n = n;
    return v;
}
static inline ct_val ct_none(void) { return (ct_val){.type = CT_NONE}; }
static inline ct_val ct_bool(bool b) { return (ct_val){.type = CT_BOOL, .b = b}; }
static inline ct_val ct_int(int64_t i) { return (ct_val){.type = CT_INT, .i = i}; }
static inline ct_val ct_float(double f) { return (ct_val){.type = CT_FLOAT, .f = f}; }
static inline ct_val ct_strv(const char *p, size_t n) {
    ct_val v = {.type = CT_STR};
    v.s.p = p;
    v.s.n = n;
    return v;
}

const char *ct_type_name(const ct_val *v);
bool ct_truthy(const ct_val *v);
/* Python ==; lists and dicts element by element. */
bool ct_equal(const ct_val *a, const ct_val *b);
ct_dict *ct_dict_new(ct_arena *a, size_t cap);
/* The value of key, or NULL. */
ct_val *ct_dict_get(const ct_dict *d, const char *k, size_t n);
/* Sets (replacing an existing key) or appends; false when out of memory. */
bool ct_dict_set(ct_arena *a, ct_dict *d, ct_str k, ct_val v);
ct_list *ct_list_new(ct_arena *a, size_t n);
/* UTF-8 code points in s (bytes that do not decode count one each). */
size_t ct_utf8_len(const char *s, size_t n);
/* Byte offset of code point i (0 <= i <= ct_utf8_len). */
size_t ct_utf8_offset(const char *s, size_t n, size_t i);

/* A growable byte buffer (malloc'd). */
typedef struct ct_buf {
    char *p;
    size_t n, cap;
    size_t limit; /* the most bytes it may hold */
} ct_buf;
/* 0, or BRISK_ERR_NOMEM / BRISK_ERR_RANGE (over limit) with a message. */
brisk_status ct_buf_put(ct_buf *b, const char *s, size_t n);
brisk_status ct_buf_putc(ct_buf *b, char c);
/* str(v) in Python terms: None, True, 1.5, 'a' in lists, {'k': 1}, ... */
brisk_status ct_buf_str(ct_buf *b, const ct_val *v);
/* json.dumps(v, ensure_ascii=ascii, indent=ind (NULL: none, else the unit
 * of indentation), separators, sort_keys) as HF's tojson filter; item_sep
 * and key_sep NULL for Python's defaults. */
typedef struct ct_json_opts {
    const char *ind;
    const char *item_sep, *key_sep;
    bool sort_keys, ascii;
} ct_json_opts;
brisk_status ct_buf_json(ct_buf *b, const ct_val *v, const ct_json_opts *o);
/* Python repr() of a float into out (at least 32 bytes); returns the length. */
size_t ct_float_repr(char *out, double x);
/* Length of the Python whitespace character at s[i] (0 if none), and of the
 * one ending just before s[i]. */
size_t ct_space_at(const char *s, size_t n, size_t i);
size_t ct_space_before(const char *s, size_t i);

/* ---- syntax tree ------------------------------------------------------- */

typedef enum ct_kind {
    /* statements */
    N_TEXT,      /* lit: the text */
    N_OUTPUT,    /* k0: expression */
    N_IF,        /* k0: test, k1: body, k2: else body (an N_IF for elif) */
    N_FOR,       /* k0: target, k1: iterable, k2: body, k3: else body, k4: filter or NULL */
    N_SET,       /* k0: target, k1: value or NULL, k2: block body */
    N_MACRO,     /* lit: name, k0: params, k1: body, op: CT_MACRO_* flags */
    N_CALLBLOCK, /* k0: call expression, k1: caller params, k2: body, op: flags */
    N_FILTERBLK, /* k0: filter chain (N_FILTER with k0 NULL at the bottom), k1: body */
    N_WITH,      /* k0: N_SET list, k1: body */
    N_BREAK,
    N_CONTINUE,
    /* expressions */
    N_CONST,  /* lit */
    N_NAME,   /* lit.s: name */
    N_LIST,   /* k0: items */
    N_TUPLE,  /* k0: items */
    N_DICT,   /* k0: N_PAIR list */
    N_PAIR,   /* k0: key, k1: value */
    N_BINOP,  /* op: ct_op, k0, k1 */
    N_AND,    /* k0, k1 */
    N_OR,     /* k0, k1 */
    N_NOT,    /* k0 */
    N_NEG,    /* k0 */
    N_POS,    /* k0 */
    N_COND,   /* k0: test, k1: then, k2: else or NULL */
    N_ATTR,   /* k0: object, lit.s: name */
    N_ITEM,   /* k0: object, k1: index */
    N_SLICE,  /* k0: object, k1: start, k2: stop, k3: step (each may be NULL) */
    N_CALL,   /* k0: callee, k1: args (N_KWARG for keywords) */
    N_KWARG,  /* lit.s: name, k0: value */
    N_FILTER, /* k0: operand, lit.s: filter name, k1: args */
    N_TEST,   /* k0: operand, lit.s: test name, k1: args, op: 1 if negated */
    N_PARAM,  /* lit.s: name, k0: default or NULL */
} ct_kind;

typedef enum ct_op {
    OP_ADD = 1, OP_SUB, OP_MUL, OP_DIV, OP_FLOORDIV, OP_MOD, OP_POW, OP_CONCAT,
    OP_EQ, OP_NE, OP_LT, OP_LE, OP_GT, OP_GE, OP_IN, OP_NOTIN,
} ct_op;

/* N_MACRO / N_CALLBLOCK flags: which special names the body reads. */
enum { CT_USES_CALLER = 1, CT_USES_VARARGS = 2, CT_USES_KWARGS = 4 };

typedef struct ct_node ct_node;
struct ct_node {
    uint8_t kind; /* ct_kind */
    uint8_t op;
    int32_t line;
    ct_node *k[5];
    ct_node *next; /* siblings: statement bodies, argument lists */
    ct_val lit;
};

/* ---- interpreter state, shared with the builtins ----------------------- */

typedef struct ct_scope ct_scope;

typedef struct ct_ctx {
    ct_arena a;         /* every value of this render */
    ct_buf *out;        /* where statements write (a capture buffer in macros) */
    ct_val filter_base; /* the captured text of a {% filter %} block */
    long long now;      /* strftime_now()'s clock */
    long long iterations;
    int depth;          /* macro calls + statement/expression nesting */
    ct_scope *globals;
} ct_ctx;

/* A call's evaluated arguments. */
typedef struct ct_args {
    size_t np, nk;
    ct_val *pos; /* (np) */
    ct_str *kn;  /* (nk) keyword names */
    ct_val *kv;  /* (nk) */
} ct_args;

/* Global functions (CT_FUNC values). */
enum { CT_F_RANGE = 1, CT_F_NAMESPACE, CT_F_DICT, CT_F_RAISE, CT_F_STRFTIME, CT_F_JOINER_UNUSED };

/* A runtime error at node `at`: "chat template line N: ...". */
brisk_status ct_fail(const ct_node *at, brisk_status s, const char *fmt, ...) BK_PRINTF(3, 4);
brisk_status ct_nomem(const ct_node *at);
/* Builtins (chat_template_builtins.c). */
bool ct_filter_known(ct_str name);
bool ct_test_known(ct_str name);
int ct_func_lookup(ct_str name);
brisk_status ct_filter(ct_ctx *c, const ct_node *at, ct_str name, const ct_val *x, const ct_args *a,
                       ct_val *out);
brisk_status ct_test(ct_ctx *c, const ct_node *at, ct_str name, const ct_val *x, const ct_args *a,
                     bool *out);
brisk_status ct_method(ct_ctx *c, const ct_node *at, const ct_val *obj, ct_str name, const ct_args *a,
                       ct_val *out);
brisk_status ct_call_func(ct_ctx *c, const ct_node *at, int func, const ct_args *a, ct_val *out);
/* obj.name / obj[name] as Jinja's getattr: a dict key, a namespace or loop
 * attribute; undefined when missing. */
ct_val ct_getattr(const ct_val *obj, const char *name, size_t n);
/* Python's fmt % args for %s, %d, %i and %%. */
brisk_status ct_printf(ct_ctx *c, const ct_node *at, ct_str fmt, const ct_val *args, size_t nargs, ct_val *out);
/* str(v) as a new string value. */
brisk_status ct_to_str(ct_ctx *c, const ct_node *at, const ct_val *v, ct_val *out);
/* The items a for loop (or a filter) walks: list items, dict keys, string
 * characters; undefined is empty. */
brisk_status ct_iter(ct_ctx *c, const ct_node *at, const ct_val *v, ct_list **out);
/* A keyword argument by name, else positional i, else NULL. */
const ct_val *ct_arg(const ct_args *a, size_t i, const char *name);

/* ---- tokens (chat_template_lex.c) ------------------------------------- */

typedef enum ct_tok_type {
    T_TEXT, T_VAR_BEGIN, T_VAR_END, T_BLOCK_BEGIN, T_BLOCK_END,
    T_NAME, T_STRING, T_INT, T_FLOAT, T_OP, T_EOF,
} ct_tok_type;

/* Operator codes beyond single characters. */
enum { TO_EQ = 256, TO_NE, TO_LE, TO_GE, TO_FLOORDIV, TO_POW };

typedef struct ct_tok {
    uint8_t type;
    int op; /* T_OP: the character or TO_* */
    int line;
    const char *p; /* T_TEXT, T_NAME, T_STRING: bytes (arena) */
    size_t n;
    int64_t i;
    double f;
} ct_tok;

/* Tokens of src (newlines already "\n"), ending with T_EOF; *toks is
 * malloc'd, token text points into src or the arena. */
brisk_status ct_lex(const char *src, size_t n, ct_arena *a, ct_tok **toks, size_t *ntok);

/* Parses src into a statement list allocated in a (the template's arena). */
brisk_status ct_parse(const char *src, size_t len, ct_arena *a, ct_node **out);

/* Renders a parsed template. */
brisk_status ct_render(const ct_node *body, const cJSON *vars, long long now, char **out,
                       size_t *out_len);

/* Limits (see chat_template.h). */
#define CT_MAX_OUTPUT ((size_t)64 << 20)
#define CT_MAX_MEMORY ((size_t)512 << 20)
#define CT_MAX_ITERATIONS 10000000LL
#define CT_MAX_DEPTH 200

#endif
