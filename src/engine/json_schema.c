/* json_schema.c — JSON schema to GBNF (grammar.h).
 *
 * Each schema node becomes a rule; the text is generated, then parsed like any
 * grammar. Supported: type (one or a list) object/array/string/number/integer/
 * boolean/null; properties (in the schema's order) with required;
 * additionalProperties false, or a schema for the values of a map without
 * properties; enum; const; anyOf/oneOf; a one-element allOf; items;
 * minItems/maxItems; minLength/maxLength; $ref to any place of the
 * document, as a URI fragment holding an RFC 6901 JSON pointer (#, #/$defs/X,
 * #/properties/a/anyOf/0, ~0 ~1 and %XX escapes; recursion allowed). Ignored: descriptions, titles,
 * format, minimum/maximum, and additionalProperties other than a map's
 * (objects with properties never take extra keys). Refused with the
 * keyword's path: pattern, prefixItems, not, if/then/else, allOf of several.
 * Whitespace between tokens is bounded (a newline and up to 8 blanks), and
 * numbers have at most 16 digits per part, so a model cannot pad forever.
 *
 * json_gbnf puts several schemas into one text, each under a name its caller
 * gives, so a grammar of another syntax (the server's tool calls) refers to
 * them without reading the generated text back.
 */
#include <cjson/cJSON.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "engine/grammar.h"

#define MAX_NEST 64       /* schema nesting */
#define MAX_REPEAT 1000   /* minItems, maxItems, minLength, maxLength */

static const char base_rules[] =
    "ws ::= | \" \" | \"\\n\" [ \\t]{0,8}\n"
    "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
    "string ::= \"\\\"\" char* \"\\\"\" ws\n"
    "integer ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) ws\n"
    "number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? ws\n"
    "boolean ::= (\"true\" | \"false\") ws\n"
    "null ::= \"null\" ws\n"
    "value ::= object | array | string | number | boolean | null\n"
    "object ::= \"{\" ws (string \":\" ws value (\",\" ws string \":\" ws value)*)? \"}\" ws\n"
    "array ::= \"[\" ws (value (\",\" ws value)*)? \"]\" ws\n";

const char *json_object_gbnf(void) {
    return "root ::= object\n"
           "ws ::= | \" \" | \"\\n\" [ \\t]{0,8}\n"
           "char ::= [^\"\\\\\\x7F\\x00-\\x1F] | \"\\\\\" ([\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4})\n"
           "string ::= \"\\\"\" char* \"\\\"\" ws\n"
           "number ::= \"-\"? (\"0\" | [1-9] [0-9]{0,15}) (\".\" [0-9]{1,16})? ([eE] [-+]? [0-9]{1,3})? ws\n"
           "value ::= object | array | string | number | (\"true\" | \"false\" | \"null\") ws\n"
           "object ::= \"{\" ws (string \":\" ws value (\",\" ws string \":\" ws value)*)? \"}\" ws\n"
           "array ::= \"[\" ws (value (\",\" ws value)*)? \"]\" ws\n";
}

typedef struct buf {
    char *p;
    size_t len, cap;
    bool oom;
} buf;

static void put(buf *b, const char *s, size_t n) {
    if (b->oom) return;
    if (b->len + n + 1 > b->cap) {
        size_t c = b->cap ? b->cap * 2 : 1024;
        while (c < b->len + n + 1) c *= 2;
        char *q = realloc(b->p, c);
        if (!q) {
            b->oom = true;
            return;
        }
        b->p = q;
        b->cap = c;
    }
    memcpy(b->p + b->len, s, n);
    b->len += n;
    b->p[b->len] = 0;
}

static void putf(buf *b, const char *fmt, ...) BK_PRINTF(2, 3);
static void putf(buf *b, const char *fmt, ...) {
    char tmp[512];
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(tmp, sizeof tmp, fmt, ap);
    va_end(ap);
    if (n < 0) return;
    put(b, tmp, (size_t)n < sizeof tmp ? (size_t)n : sizeof tmp - 1);
}

/* A GBNF literal matching bytes s exactly. */
static void put_lit(buf *b, const char *s) {
    put(b, "\"", 1);
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') putf(b, "\\%c", c);
        else if (c < 0x20 || c == 0x7F) putf(b, "\\x%02X", c);
        else put(b, s, 1);
    }
    put(b, "\"", 1);
}

typedef struct conv {
    const cJSON *root; /* the document $refs resolve in */
    buf out;
    int n_rules;
    const cJSON *ref_target[256]; /* nodes of root already given a rule by a $ref: keyed by the node, so
                                   * that two spellings of one pointer (#/$defs/x, #/%24defs/x) share it */
    int ref_rule[256], n_refs;
    brisk_status st;
    int depth;
} conv;

/* Forgets the $ref rules: they belong to one document. */
static void forget_refs(conv *c) {
    c->n_refs = 0;
}

static bool cfail(conv *c, brisk_status st, const char *path, const char *fmt, ...) BK_PRINTF(4, 5);
static bool cfail(conv *c, brisk_status st, const char *path, const char *fmt, ...) {
    if (c->st != BRISK_OK) return false;
    char msg[300];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    c->st = bk_fail(st, "json schema: %s: %s", path, msg);
    return false;
}

/* Rule names are "sN"; the built-in ones are plain words. */
typedef struct rname {
    char s[32];
} rname;

static rname named(const char *s) {
    rname r;
    snprintf(r.s, sizeof r.s, "%s", s);
    return r;
}

static rname fresh(conv *c) {
    rname r;
    snprintf(r.s, sizeof r.s, "s%d", ++c->n_rules);
    return r;
}

static bool gen(conv *c, const cJSON *s, const char *path, rname *out);

static bool child(conv *c, const cJSON *s, const char *path, const char *key, rname *out) {
    char p[256];
    snprintf(p, sizeof p, "%.200s.%s", path, key);
    return gen(c, s, p, out);
}

/* Reads an optional non-negative integer keyword; def when absent. */
static bool get_count(conv *c, const cJSON *s, const char *key, const char *path, long def, long *out) {
    const cJSON *v = cJSON_GetObjectItemCaseSensitive(s, key);
    *out = def;
    if (!v) return true;
    if (!cJSON_IsNumber(v) || v->valuedouble < 0 || v->valuedouble != (double)(long)v->valuedouble)
        return cfail(c, BRISK_ERR_INVALID_ARG, path, "'%s' must be a non-negative integer", key);
    if (v->valuedouble > MAX_REPEAT)
        return cfail(c, BRISK_ERR_UNSUPPORTED, path, "'%s' above %d is not supported", key, MAX_REPEAT);
    *out = (long)v->valuedouble;
    return true;
}

static void put_rep(buf *b, long lo, long hi) {
    if (hi < 0) putf(b, "{%ld,}", lo);
    else putf(b, "{%ld,%ld}", lo, hi);
}

static bool gen_string(conv *c, const cJSON *s, const char *path, rname *out) {
    long lo, hi;
    if (!get_count(c, s, "minLength", path, 0, &lo) || !get_count(c, s, "maxLength", path, -1, &hi)) return false;
    if (hi >= 0 && hi < lo) return cfail(c, BRISK_ERR_INVALID_ARG, path, "maxLength is below minLength");
    if (lo == 0 && hi < 0) {
        *out = named("string");
        return true;
    }
    *out = fresh(c);
    putf(&c->out, "%s ::= \"\\\"\" char", out->s);
    put_rep(&c->out, lo, hi);
    putf(&c->out, " \"\\\"\" ws\n");
    return true;
}

static bool gen_array(conv *c, const cJSON *s, const char *path, rname *out) {
    long lo, hi;
    if (!get_count(c, s, "minItems", path, 0, &lo) || !get_count(c, s, "maxItems", path, -1, &hi)) return false;
    if (hi >= 0 && hi < lo) return cfail(c, BRISK_ERR_INVALID_ARG, path, "maxItems is below minItems");
    const cJSON *items = cJSON_GetObjectItemCaseSensitive(s, "items");
    rname item = named("value");
    if (items && !child(c, items, path, "items", &item)) return false;
    *out = fresh(c);
    if (hi == 0) {
        putf(&c->out, "%s ::= \"[\" ws \"]\" ws\n", out->s);
        return true;
    }
    putf(&c->out, "%s ::= \"[\" ws %s%s (\",\" ws %s)", out->s, lo == 0 ? "(" : "", item.s, item.s);
    put_rep(&c->out, lo > 0 ? lo - 1 : 0, hi < 0 ? -1 : hi - 1);
    putf(&c->out, "%s \"]\" ws\n", lo == 0 ? ")?" : "");
    return true;
}

/* Properties in order: F_i is the rest from property i when none came before
 * (no comma), R_i when one did; optional properties may be skipped. */
static bool gen_object(conv *c, const cJSON *s, const char *path, rname *out) {
    const cJSON *props = cJSON_GetObjectItemCaseSensitive(s, "properties");
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(s, "required");
    const cJSON *ap = cJSON_GetObjectItemCaseSensitive(s, "additionalProperties");
    if (props && !cJSON_IsObject(props)) return cfail(c, BRISK_ERR_INVALID_ARG, path, "'properties' must be an object");
    if (req && !cJSON_IsArray(req)) return cfail(c, BRISK_ERR_INVALID_ARG, path, "'required' must be an array");
    const cJSON *r, *p;
    cJSON_ArrayForEach(r, req) {
        if (!cJSON_IsString(r)) return cfail(c, BRISK_ERR_INVALID_ARG, path, "'required' must hold strings");
        if (!cJSON_GetObjectItemCaseSensitive(props, r->valuestring))
            return cfail(c, BRISK_ERR_INVALID_ARG, path, "required property '%s' is not in 'properties'", r->valuestring);
    }
    int n = cJSON_GetArraySize(props);
    if (n == 0) {
        if (cJSON_IsObject(ap)) { /* a map: string keys, values of one schema */
            rname v;
            if (!child(c, ap, path, "additionalProperties", &v)) return false;
            *out = fresh(c);
            putf(&c->out, "%s ::= \"{\" ws (string \":\" ws %s (\",\" ws string \":\" ws %s)*)? \"}\" ws\n", out->s,
                 v.s, v.s);
        } else if (cJSON_IsFalse(ap)) {
            *out = fresh(c);
            putf(&c->out, "%s ::= \"{\" ws \"}\" ws\n", out->s);
        } else *out = named("object");
        return true;
    }
    rname *val = malloc((size_t)n * sizeof *val);
    if (!val) return cfail(c, BRISK_ERR_NOMEM, path, "out of memory");
    int i = 0;
    cJSON_ArrayForEach(p, props) {
        char key[256];
        snprintf(key, sizeof key, "properties.%.200s", p->string);
        if (!child(c, p, path, key, &val[i++])) {
            free(val);
            return false;
        }
    }
    int base = c->n_rules;
    c->n_rules += 2 * n + 3;
    *out = named("");
    snprintf(out->s, sizeof out->s, "s%d", base + 1);
    putf(&c->out, "s%d ::= \"{\" ws s%d \"}\" ws\n", base + 1, base + 2);
    /* s(base+2+i): F_i, s(base+3+n+i): R_i, i = 0..n */
    i = 0;
    cJSON_ArrayForEach(p, props) {
        bool required = false;
        cJSON_ArrayForEach(r, req) required |= !strcmp(r->valuestring, p->string);
        char *kjson = NULL;
        cJSON *ks = cJSON_CreateString(p->string);
        if (ks) kjson = cJSON_PrintUnformatted(ks);
        cJSON_Delete(ks);
        if (!kjson) {
            free(val);
            return cfail(c, BRISK_ERR_NOMEM, path, "out of memory");
        }
        int f = base + 2 + i, rr = base + 3 + n + i;
        for (int k = 0; k < 2; k++) { /* F_i then R_i */
            putf(&c->out, "s%d ::= %s", k ? rr : f, k ? "\",\" ws " : "");
            put_lit(&c->out, kjson);
            putf(&c->out, " ws \":\" ws %s s%d", val[i].s, base + 3 + n + i + 1);
            if (!required) putf(&c->out, " | s%d", (k ? rr : f) + 1);
            putf(&c->out, "\n");
        }
        free(kjson);
        i++;
    }
    putf(&c->out, "s%d ::= \"\"\ns%d ::= \"\"\n", base + 2 + n, base + 3 + 2 * n);
    free(val);
    return true;
}

/* const and enum: alternatives of literal JSON texts. */
static bool gen_literals(conv *c, const cJSON *vals, bool one, const char *path, rname *out) {
    if (!one && (!cJSON_IsArray(vals) || cJSON_GetArraySize(vals) == 0))
        return cfail(c, BRISK_ERR_INVALID_ARG, path, "'enum' must be a non-empty array");
    *out = fresh(c);
    putf(&c->out, "%s ::= (", out->s);
    const cJSON *v = one ? vals : vals->child;
    for (bool first = true; v; v = one ? NULL : v->next, first = false) {
        char *js = cJSON_PrintUnformatted(v);
        if (!js) return cfail(c, BRISK_ERR_NOMEM, path, "out of memory");
        if (!first) putf(&c->out, " | ");
        put_lit(&c->out, js);
        free(js);
    }
    putf(&c->out, ") ws\n");
    return true;
}

static bool gen_alts(conv *c, const cJSON *list, const char *path, const char *key, rname *out) {
    if (!cJSON_IsArray(list) || cJSON_GetArraySize(list) == 0)
        return cfail(c, BRISK_ERR_INVALID_ARG, path, "'%s' must be a non-empty array", key);
    int n = cJSON_GetArraySize(list), i = 0;
    rname *alt = malloc((size_t)n * sizeof *alt);
    if (!alt) return cfail(c, BRISK_ERR_NOMEM, path, "out of memory");
    const cJSON *s;
    cJSON_ArrayForEach(s, list) {
        char k[64];
        snprintf(k, sizeof k, "%s[%d]", key, i);
        if (!child(c, s, path, k, &alt[i++])) {
            free(alt);
            return false;
        }
    }
    *out = fresh(c);
    putf(&c->out, "%s ::= ", out->s);
    for (i = 0; i < n; i++) putf(&c->out, "%s%s", i ? " | " : "", alt[i].s);
    putf(&c->out, "\n");
    free(alt);
    return true;
}

/* The value of hex digit c, or -1. */
static int hex_digit(char c) {
    return c >= '0' && c <= '9'   ? c - '0'
           : c >= 'a' && c <= 'f' ? c - 'a' + 10
           : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                  : -1;
}

/* The child of node that JSON-pointer token tok (unescaped) names: an object's member, or an
 * array's element for a token of decimal digits without a leading zero (RFC 6901 §4: "-" and "01"
 * name nothing); NULL when there is none. */
static const cJSON *pointer_step(const cJSON *node, const char *tok) {
    if (cJSON_IsObject(node)) return cJSON_GetObjectItemCaseSensitive(node, tok);
    if (!cJSON_IsArray(node) || !tok[0] || (tok[0] == '0' && tok[1])) return NULL;
    long i = 0;
    for (const char *q = tok; *q; q++) {
        if (*q < '0' || *q > '9' || i > (long)INT_MAX / 10) return NULL;
        i = i * 10 + (*q - '0');
    }
    return i < cJSON_GetArraySize(node) ? cJSON_GetArrayItem(node, (int)i) : NULL;
}

/* ptr: the fragment, percent-decoded (a writable copy); resolved in place, token by token. */
static brisk_status resolve_pointer(const cJSON *doc, const char *ref, char *ptr, const cJSON **target) {
    const cJSON *node = doc;
    for (char *tok = ptr; *tok == '/';) {
        char *end = tok + 1 + strcspn(tok + 1, "/"), *w = tok; /* the token is tok+1..end; w: unescaped */
        for (char *r = tok + 1; r < end; r++) {
            if (*r != '~') {
                *w++ = *r;
                continue;
            }
            /* one pass left to right is RFC 6901's ~1-then-~0 order: "~01" is "~1", never "/" */
            if (r + 1 == end || (r[1] != '0' && r[1] != '1'))
                return bk_fail(BRISK_ERR_INVALID_ARG, "$ref '%.100s': '~' must be followed by 0 or 1 (RFC 6901)", ref);
            *w++ = *++r == '1' ? '/' : '~';
        }
        *w = 0;
        const cJSON *next = pointer_step(node, tok);
        if (!next)
            return bk_fail(BRISK_ERR_INVALID_ARG, "$ref '%.100s' points nowhere: %s has no '%.60s'", ref,
                           cJSON_IsArray(node)    ? "an array"
                           : cJSON_IsObject(node) ? "an object"
                                                  : "a value that is neither object nor array",
                           tok);
        node = next;
        tok = end; /* at the next token's '/', or at the end */
    }
    *target = node;
    return BRISK_OK;
}

brisk_status json_schema_ref(const cJSON *doc, const char *ref, const cJSON **target) {
    *target = NULL;
    if (ref[0] != '#')
        return bk_fail(BRISK_ERR_UNSUPPORTED, "$ref '%.100s': only refs within the document (#...) are supported", ref);
    /* The fragment is a URI's: percent-decode it first (%24defs is $defs), then read the pointer. */
    char *ptr = malloc(strlen(ref) + 1); /* decoding only shortens */
    if (!ptr) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    char *w = ptr;
    for (const char *r = ref + 1; *r; r++) {
        if (*r != '%') {
            *w++ = *r;
            continue;
        }
        int hi = hex_digit(r[1]), lo = hi < 0 ? -1 : hex_digit(r[2]);
        if (lo < 0 || (hi == 0 && lo == 0)) { /* a NUL would cut the key short */
            free(ptr);
            return bk_fail(BRISK_ERR_INVALID_ARG,
                           "$ref '%.100s': bad percent escape '%.3s' (two hex digits, not 00)", ref, r);
        }
        *w++ = (char)(hi << 4 | lo);
        r += 2;
    }
    *w = 0;
    brisk_status st = ptr[0] && ptr[0] != '/' /* "#name": a $anchor's, not a pointer */
                          ? bk_fail(BRISK_ERR_UNSUPPORTED, "$ref '%.100s': only JSON pointers (#/...)", ref)
                          : resolve_pointer(doc, ref, ptr, target);
    free(ptr);
    return st;
}

static bool gen_ref(conv *c, const char *ref, const char *path, rname *out) {
    const cJSON *target;
    brisk_status st = json_schema_ref(c->root, ref, &target);
    if (st != BRISK_OK) return cfail(c, st, path, "%s", brisk_last_error());
    for (int i = 0; i < c->n_refs; i++)
        if (c->ref_target[i] == target) {
            snprintf(out->s, sizeof out->s, "s%d", c->ref_rule[i]);
            return true;
        }
    if (c->n_refs == (int)(sizeof c->ref_rule / sizeof *c->ref_rule))
        return cfail(c, BRISK_ERR_UNSUPPORTED, path, "more than 256 distinct $ref targets");
    int me = ++c->n_rules; /* named before its body, so the body may refer back */
    c->ref_target[c->n_refs] = target;
    c->ref_rule[c->n_refs++] = me;
    rname body;
    char p[256];
    snprintf(p, sizeof p, "%.200s", ref);
    int saved = c->depth;
    c->depth = 0;
    if (!gen(c, target, p, &body)) return false;
    c->depth = saved;
    putf(&c->out, "s%d ::= %s\n", me, body.s);
    snprintf(out->s, sizeof out->s, "s%d", me);
    return true;
}

static bool gen_type(conv *c, const cJSON *s, const char *type, const char *path, rname *out) {
    if (!strcmp(type, "string")) return gen_string(c, s, path, out);
    if (!strcmp(type, "object")) return gen_object(c, s, path, out);
    if (!strcmp(type, "array")) return gen_array(c, s, path, out);
    static const char *const simple[] = {"number", "integer", "boolean", "null"};
    for (int i = 0; i < 4; i++)
        if (!strcmp(type, simple[i])) {
            *out = named(simple[i]);
            return true;
        }
    return cfail(c, BRISK_ERR_INVALID_ARG, path, "unknown type '%.60s'", type);
}

static bool gen(conv *c, const cJSON *s, const char *path, rname *out) {
    if (c->st != BRISK_OK) return false;
    if (cJSON_IsTrue(s)) {
        *out = named("value");
        return true;
    }
    if (!cJSON_IsObject(s)) return cfail(c, BRISK_ERR_INVALID_ARG, path, "a schema must be an object or true");
    if (++c->depth > MAX_NEST) return cfail(c, BRISK_ERR_UNSUPPORTED, path, "nested deeper than %d", MAX_NEST);
    static const char *const refused[] = {"pattern", "prefixItems", "not", "if", "patternProperties"};
    for (size_t i = 0; i < sizeof refused / sizeof *refused; i++)
        if (cJSON_GetObjectItemCaseSensitive(s, refused[i]))
            return cfail(c, BRISK_ERR_UNSUPPORTED, path, "'%s' is not supported", refused[i]);
    const cJSON *v, *t = cJSON_GetObjectItemCaseSensitive(s, "type");
    bool ok;
    if ((v = cJSON_GetObjectItemCaseSensitive(s, "$ref"))) {
        if (!cJSON_IsString(v)) return cfail(c, BRISK_ERR_INVALID_ARG, path, "'$ref' must be a string");
        ok = gen_ref(c, v->valuestring, path, out);
    } else if ((v = cJSON_GetObjectItemCaseSensitive(s, "const"))) ok = gen_literals(c, v, true, path, out);
    else if ((v = cJSON_GetObjectItemCaseSensitive(s, "enum"))) ok = gen_literals(c, v, false, path, out);
    else if ((v = cJSON_GetObjectItemCaseSensitive(s, "anyOf"))) ok = gen_alts(c, v, path, "anyOf", out);
    else if ((v = cJSON_GetObjectItemCaseSensitive(s, "oneOf"))) ok = gen_alts(c, v, path, "oneOf", out);
    else if ((v = cJSON_GetObjectItemCaseSensitive(s, "allOf"))) {
        if (!cJSON_IsArray(v) || cJSON_GetArraySize(v) != 1)
            return cfail(c, BRISK_ERR_UNSUPPORTED, path, "'allOf' with other than one schema is not supported");
        ok = child(c, v->child, path, "allOf[0]", out);
    } else if (cJSON_IsString(t)) ok = gen_type(c, s, t->valuestring, path, out);
    else if (cJSON_IsArray(t)) {
        int n = cJSON_GetArraySize(t), i = 0;
        if (n == 0) return cfail(c, BRISK_ERR_INVALID_ARG, path, "'type' is an empty list");
        rname alt[8];
        if (n > 8) return cfail(c, BRISK_ERR_INVALID_ARG, path, "'type' lists more than 8 types");
        const cJSON *e;
        cJSON_ArrayForEach(e, t) {
            if (!cJSON_IsString(e)) return cfail(c, BRISK_ERR_INVALID_ARG, path, "'type' must hold strings");
            if (!gen_type(c, s, e->valuestring, path, &alt[i++])) return false;
        }
        *out = fresh(c);
        putf(&c->out, "%s ::=", out->s);
        for (i = 0; i < n; i++) putf(&c->out, "%s %s", i ? " |" : "", alt[i].s);
        putf(&c->out, "\n");
        ok = true;
    } else if (t) return cfail(c, BRISK_ERR_INVALID_ARG, path, "'type' must be a string or a list of strings");
    else if (cJSON_GetObjectItemCaseSensitive(s, "properties")) ok = gen_object(c, s, path, out);
    else if (cJSON_GetObjectItemCaseSensitive(s, "items")) ok = gen_array(c, s, path, out);
    else {
        *out = named("value");
        ok = true;
    }
    c->depth--;
    return ok;
}

brisk_status json_schema_to_gbnf(const char *schema, size_t len, char **gbnf) {
    *gbnf = NULL;
    cJSON *root = cJSON_ParseWithLength(schema, len);
    if (!root) return bk_fail(BRISK_ERR_INVALID_ARG, "json schema: not valid JSON");
    conv c = {.root = root};
    put(&c.out, base_rules, sizeof base_rules - 1);
    rname top;
    if (gen(&c, root, "schema", &top)) putf(&c.out, "root ::= %s\n", top.s);
    forget_refs(&c);
    cJSON_Delete(root);
    if (c.st == BRISK_OK && c.out.oom) c.st = bk_fail(BRISK_ERR_NOMEM, "json schema: out of memory");
    if (c.st != BRISK_OK) {
        free(c.out.p);
        return c.st;
    }
    *gbnf = c.out.p;
    return BRISK_OK;
}

/* ---- several schemas in one grammar ------------------------------------ */

struct json_gbnf {
    conv c;
};

brisk_status json_gbnf_new(json_gbnf **out) {
    *out = calloc(1, sizeof **out);
    if (!*out) return bk_fail(BRISK_ERR_NOMEM, "json schema: out of memory");
    put(&(*out)->c.out, base_rules, sizeof base_rules - 1);
    return BRISK_OK;
}

void json_gbnf_free(json_gbnf *b) {
    if (!b) return;
    forget_refs(&b->c);
    free(b->c.out.p);
    free(b);
}

brisk_status json_gbnf_add(json_gbnf *b, const cJSON *schema, const cJSON *doc, const char *name) {
    conv *c = &b->c;
    if (c->st != BRISK_OK) return c->st;
    /* A '-' keeps the name apart from the generated ones (sN and the base rules' plain words). */
    bool dash = false, ok = name && name[0];
    for (const char *q = name; ok && *q; q++) {
        dash = dash || *q == '-';
        ok = (*q >= 'a' && *q <= 'z') || (*q >= 'A' && *q <= 'Z') || (*q >= '0' && *q <= '9') || *q == '-' || *q == '_';
    }
    if (!ok || !dash) return bk_fail(BRISK_ERR_INVALID_ARG, "json schema: rule name '%s' must be letters, digits, "
                                     "'_' and '-', with a '-'", name ? name : "(null)");
    if (!doc) doc = schema;
    if (doc != c->root) forget_refs(c); /* a $ref's rule is only the same rule within one document */
    c->root = doc;
    c->depth = 0;
    rname top;
    if (gen(c, schema, "schema", &top)) {
        put(&c->out, name, strlen(name)); /* not putf: its buffer would cut a long name */
        putf(&c->out, " ::= %s\n", top.s);
    }
    if (c->st == BRISK_OK && c->out.oom) c->st = bk_fail(BRISK_ERR_NOMEM, "json schema: out of memory");
    return c->st;
}

brisk_status json_gbnf_take(json_gbnf *b, char **gbnf) {
    *gbnf = NULL;
    brisk_status st = b->c.st;
    if (st == BRISK_OK && b->c.out.oom) st = bk_fail(BRISK_ERR_NOMEM, "json schema: out of memory");
    if (st == BRISK_OK) {
        *gbnf = b->c.out.p;
        b->c.out.p = NULL;
    }
    json_gbnf_free(b);
    return st;
}
