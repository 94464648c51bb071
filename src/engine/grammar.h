/* grammar.h — GBNF grammars: the parser's rule tables, the pushdown matcher
 * over bytes, token masks over a model's vocabulary, and JSON schema to GBNF.
 *
 * grammar_parse.c turns GBNF text into gram_rules: every rule is a list of
 * alternatives, each a sequence of elements (a character class or a rule
 * reference) ending in GE_ALT (more alternatives follow) or GE_END. Groups and
 * repetitions become generated rules, so every element is one class or one
 * reference.
 *
 * grammar.c matches text against the rules with stacks of positions (one
 * stack per live parse, as in llama.cpp), hash-consed so a stack is an int and
 * a set of stacks plus a partial UTF-8 character is an interned "state". The
 * byte transitions between states are memoised, so the states form a lazily
 * built DFA; a token mask walks the model's token trie through that DFA once
 * per state and is cached with the state.
 *
 * Ownership: gram_rules_free frees what gram_parse made; brisk_grammar
 * (brisk.h) owns its rules and tables. Nothing here exits on bad input.
 */
#ifndef BK_ENGINE_GRAMMAR_H
#define BK_ENGINE_GRAMMAR_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "brisk.h"

typedef enum gram_etype {
    GE_END = 0, /* end of the rule's last alternative */
    GE_ALT,     /* end of an alternative; the next one starts after it */
    GE_REF,     /* val: rule index */
    GE_CLASS,   /* val: class index */
} gram_etype;

typedef struct gram_elem {
    uint32_t type; /* gram_etype */
    uint32_t val;
} gram_elem;

typedef struct gram_class {
    uint32_t off, n; /* ranges [off, off + n) of gram_rules.ranges */
    bool neg;        /* matches a code point outside every range */
} gram_class;

typedef struct gram_rules {
    gram_elem *elems;   /* (n_elems) all rules back to back */
    int n_elems;
    int *rule_start;    /* (n_rules) first element of each rule */
    char **names;       /* (n_rules) owned; generated rules are "parent_N" */
    int n_rules;
    gram_class *classes; /* (n_classes) */
    int n_classes;
    uint32_t *ranges;   /* (n_ranges, 2) inclusive code point ranges */
    int n_ranges;
    int root;           /* rule index of the start symbol */
} gram_rules;

/* Limits that keep a hostile grammar's cost bounded. */
#define GRAM_MAX_TEXT (1 << 20)     /* bytes of GBNF */
#define GRAM_MAX_ELEMS (1 << 18)    /* elements after expanding repetitions */
#define GRAM_MAX_DEPTH 256          /* nested groups */

/* Parses GBNF text (len bytes) with start symbol root ("root" when NULL).
 * On failure returns BRISK_ERR_INVALID_ARG with "grammar: line L, column C:
 * ..." as the message. *out owns its tables; free with gram_rules_free. */
brisk_status gram_parse(const char *text, size_t len, const char *root, gram_rules **out);
void gram_rules_free(gram_rules *r);
/* Whether class c matches code point cp. */
bool gram_class_match(const gram_rules *r, const gram_class *c, uint32_t cp);

/* JSON schema (len bytes of JSON) to GBNF text with a "root" rule. *gbnf is a
 * NUL-terminated string the caller free()s. BRISK_ERR_INVALID_ARG or
 * BRISK_ERR_UNSUPPORTED with a message naming the schema path on failure. */
brisk_status json_schema_to_gbnf(const char *schema, size_t len, char **gbnf);
/* The GBNF of any JSON object (response_format json_object). */
const char *json_object_gbnf(void);

/* Several schemas in one GBNF text, each under a rule name the caller picks,
 * for grammars that embed JSON values in a syntax of their own (the server's
 * tool calls): the JSON base rules once, then each schema's rules. No root
 * rule is written; the caller adds its own rules to the text. */
typedef struct json_gbnf json_gbnf;
struct cJSON;
brisk_status json_gbnf_new(json_gbnf **out);
/* Appends schema's rules with `name` as its start rule. name: letters, digits,
 * '_' and '-', holding a '-' (no generated rule has one, so names never clash);
 * doc: the document schema's $refs resolve in (json_schema_ref's pointers),
 * NULL for schema itself. Schemas added in a row with the
 * same doc share the rules of their $refs, so doc must not change between
 * those calls; both stay the caller's. A bad name is BRISK_ERR_INVALID_ARG
 * (nothing added); a schema's error names its path, and after one b only
 * returns it (json_gbnf_take too). */
brisk_status json_gbnf_add(json_gbnf *b, const struct cJSON *schema, const struct cJSON *doc, const char *name);
/* The text (NUL-terminated, the caller free()s it) and frees b. */
brisk_status json_gbnf_take(json_gbnf *b, char **gbnf);
void json_gbnf_free(json_gbnf *b); /* NULL is fine */
/* The schema a $ref names in document doc: a URI fragment holding an RFC 6901
 * JSON pointer, "#" (doc itself), "#/$defs/NAME", "#/properties/a/items",
 * "#/anyOf/0" (a token of digits, no leading zero, indexes an array); in each
 * token ~1 is '/' and ~0 is '~', and the fragment's %XX escapes are decoded
 * first ("#/%24defs/x"). *target: doc's node (borrowed), NULL on failure.
 * A ref to another document ("other.json#/x", "http://...") or an anchor
 * ("#name") is BRISK_ERR_UNSUPPORTED; a malformed one (a bad % or ~ escape)
 * or one naming nothing in doc is BRISK_ERR_INVALID_ARG; each with a message. */
brisk_status json_schema_ref(const struct cJSON *doc, const char *ref, const struct cJSON **target);

/* ---- matcher (grammar.c) ----------------------------------------------- */

/* A grammar from rules it takes ownership of (freed on failure too); model
 * may be NULL (bytes only: no token masks). */
brisk_status grammar_from_rules(const brisk_model *model, gram_rules *rules, brisk_grammar **out);
/* Feeds bytes; false (state unchanged) when they leave the grammar. */
bool grammar_accept_bytes(brisk_grammar *g, const char *s, size_t n);
/* Whether the bytes would keep the text inside the grammar (state unchanged). */
bool grammar_would_accept(brisk_grammar *g, const char *s, size_t n);
/* Whether the text so far is a complete sentence of the grammar. */
bool grammar_is_complete(const brisk_grammar *g);
/* The allowed-token bitmask of the current state ((n_vocab + 31) / 32 words,
 * owned by g, valid until the next accept), or NULL without a model or on
 * out-of-memory. *n_allowed gets the number of set bits. */
const uint32_t *grammar_mask(brisk_grammar *g, int *n_allowed);
/* The vocabulary size the masks cover (0 without a model). */
int grammar_n_vocab(const brisk_grammar *g);
/* A token to end with when the mask is empty (an end-of-generation token). */
brisk_token grammar_fallback_token(const brisk_grammar *g);
/* Counters for benchmarks: states interned, masks computed, cache hits. */
void grammar_stats(const brisk_grammar *g, int *n_states, int *n_masks_built, int *n_mask_hits);

#endif
