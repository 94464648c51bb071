/* tok_internal.h — the tokenizer's private data, shared by vocab.c, hfjson.c,
 * spm.c, bpe.c, pretok.c and tokenizer.c. Not part of the module interface.
 *
 * Everything is owned by the tokenizer: token texts live in one arena, the
 * two hash maps hold only ids into string tables, and the pre-tokenizer owns
 * its compiled PCRE2 patterns.
 */
#ifndef BK_TOK_INTERNAL_H
#define BK_TOK_INTERNAL_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "tokenizer/tokenizer.h"

/* Token attributes, the same bits llama.cpp derives from the GGUF token types. */
enum {
    TOK_ATTR_UNDEFINED = 0,
    TOK_ATTR_UNKNOWN = 1 << 0,
    TOK_ATTR_UNUSED = 1 << 1,
    TOK_ATTR_NORMAL = 1 << 2,
    TOK_ATTR_CONTROL = 1 << 3,
    TOK_ATTR_USER_DEFINED = 1 << 4,
    TOK_ATTR_BYTE = 1 << 5,
    TOK_ATTR_LSTRIP = 1 << 7,
    TOK_ATTR_RSTRIP = 1 << 8,
};

/* A growable table of byte strings: string i is data[off[i] .. off[i+1] - 1),
 * followed by a NUL. */
typedef struct tok_strtab {
    char *data;
    uint64_t *off; /* (n + 1) */
    int64_t n, cap_n;
    uint64_t size, cap_size;
} tok_strtab;

brisk_status tok_strtab_push(tok_strtab *t, const char *s, size_t len);
/* Room for n more strings of bytes bytes in all (NULs excluded). */
brisk_status tok_strtab_reserve(tok_strtab *t, int64_t n, uint64_t bytes);
void tok_strtab_free(tok_strtab *t);
static inline const char *tok_strtab_get(const tok_strtab *t, int64_t i, size_t *len) {
    *len = (size_t)(t->off[i + 1] - t->off[i] - 1);
    return t->data + t->off[i];
}

/* Open-addressing hash map from a string to an index into a tok_strtab. */
typedef struct tok_strmap {
    uint32_t *hash; /* (cap) hash of the key in the slot */
    int32_t *val;   /* (cap) index into the table, -1 = empty */
    uint64_t mask;  /* cap - 1, cap a power of two */
} tok_strmap;

uint32_t tok_hash(const char *s, size_t len);
brisk_status tok_strmap_init(tok_strmap *m, int64_t n_keys);
void tok_strmap_free(tok_strmap *m);
/* Inserts key tab[i]. overwrite: replace an existing equal key (llama.cpp's
 * token_to_id[word] = i) or keep the first (its bpe_ranks.emplace). */
void tok_strmap_put(tok_strmap *m, const tok_strtab *tab, int32_t i, bool overwrite);
int32_t tok_strmap_find(const tok_strmap *m, const tok_strtab *tab, const char *s, size_t len);

/* Pre-tokenizer: a sequence of regexes applied like llama.cpp's
 * unicode_regex_split (each one splits the pieces of the one before). */
typedef struct pretok pretok;
brisk_status pretok_new(const char *const *regexes, int n, pretok **out);
void pretok_free(pretok *p);
/* Splits text into words, byte-encoded (GPT-2 byte -> unicode mapping) when
 * byte_encode; invalid UTF-8 becomes U+FFFD as in llama.cpp. Calls fn for each
 * word; a non-OK status from fn stops the walk and is returned. */
typedef brisk_status (*pretok_word_fn)(void *ctx, const char *word, size_t len);
brisk_status pretok_split(const pretok *p, const char *text, size_t len, bool byte_encode,
                          pretok_word_fn fn, void *ctx);

/* UTF-8 helpers with llama.cpp's exact leniency. */
size_t tok_utf8_len(unsigned char lead); /* 1..4 from the lead byte's high nibble */
/* Decodes one code point at s[*off] the way unicode_cpt_from_utf8 does; invalid
 * input yields 0xFFFD and advances one byte. */
uint32_t tok_utf8_decode(const char *s, size_t len, size_t *off);
size_t tok_utf8_encode(uint32_t cpt, char *out); /* out >= 4 bytes; > 0x10FFFF -> U+FFFD */
/* GPT-2 byte <-> unicode mapping: byte b as UTF-8 (2 bytes at most). */
size_t tok_byte_to_utf8(uint8_t b, char out[2]);
int tok_utf8_to_byte(uint32_t cpt); /* -1 if cpt is not in the mapping */

/* Pre-tokenizer families we reproduce (llama.cpp's LLAMA_VOCAB_PRE_TYPE_*). */
typedef struct tok_pre_info {
    const char *name;        /* tokenizer.ggml.pre value */
    const char *regexes[6];  /* NULL-terminated */
    bool ignore_merges, clean_spaces, add_bos_default;
} tok_pre_info;
const tok_pre_info *tok_pre_lookup(const char *name, size_t len);

struct tokenizer {
    tokenizer_kind kind;
    int32_t n_vocab;
    tok_strtab text;    /* (n_vocab) token texts as stored */
    tok_strmap text_map;
    float *score;       /* (n_vocab) SPM scores, 0 for BPE */
    int32_t *type;      /* (n_vocab) GGUF token types */
    uint32_t *attr;     /* (n_vocab) TOK_ATTR_* bits */
    tok_strtab merges;  /* BPE: "a b" strings, index = rank */
    /* Merges whose two sides are tokens, keyed by the pair of ids (fast path),
     * and the rest keyed by their "a b" string (exactness for odd vocabs). */
    uint64_t *pair_key; /* (pair_mask + 1) a << 32 | b, UINT64_MAX = empty */
    int32_t *pair_rank;
    uint64_t pair_mask;
    tok_strmap merge_map;
    pretok *pre;        /* BPE only */
    const char *pre_family; /* tokenizer.json: the llama.cpp pre name whose regexes it uses, or NULL */
    int32_t *special;   /* (n_special) control/user-defined/unknown ids, longest text first */
    int32_t n_special;
    uint8_t *eog;       /* (n_vocab) 1 = end of generation */
    int32_t bos, eos, eot, eom, unk;
    int32_t fim[6];     /* fill-in-the-middle: pre, suf, mid, pad, rep, sep (brisk_fim order); -1: none */
    bool add_bos, add_eos, add_space_prefix, ignore_merges, clean_spaces;
};

/* vocab.c: finishes a tokenizer whose texts, types, scores and special ids are
 * filled: builds the hash map, llama.cpp's text-based special-token rules
 * (eot/eom/fim detection, eog set, attribute fixes) and the special cache.
 * model_name is general.name (may be NULL). */
brisk_status tok_finalize(tokenizer *t, const char *model_name, size_t model_name_len);
tokenizer *tok_alloc(void);
brisk_status tok_alloc_arrays(tokenizer *t, int32_t n);

/* Rank of merge (a, b) by token ids, -1 if none. */
int32_t tok_pair_find(const tokenizer *t, int32_t a, int32_t b);

/* spm.c / bpe.c: encode one raw-text fragment, appending to a growable id list. */
typedef struct tok_ids {
    int32_t *v;
    int64_t n, cap;
} tok_ids;
brisk_status tok_ids_push(tok_ids *ids, int32_t id);
brisk_status spm_encode(const tokenizer *t, const char *text, size_t len, tok_ids *out);
brisk_status bpe_encode(const tokenizer *t, const char *text, size_t len, tok_ids *out);
#endif
