/* vocab.c — token tables, hash maps, loading from GGUF, and llama.cpp's
 * text-based special-token rules (shared with the tokenizer.json loader). */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/tok_internal.h"

/* ---- string table and hash map ---- */

brisk_status tok_strtab_push(tok_strtab *t, const char *s, size_t len) {
    if (t->n + 2 > t->cap_n) {
        int64_t cap = t->cap_n ? t->cap_n * 2 : 1024;
        uint64_t *off = realloc(t->off, (size_t)cap * sizeof *off);
        if (!off) return bk_fail(BRISK_ERR_NOMEM, "tokenizer: out of memory");
        if (!t->off) off[0] = 0;
        t->off = off;
        t->cap_n = cap;
    }
    if (t->size + len + 1 > t->cap_size) {
        uint64_t cap = t->cap_size ? t->cap_size * 2 : 65536;
        while (cap < t->size + len + 1) cap *= 2;
        char *d = realloc(t->data, (size_t)cap);
        if (!d) return bk_fail(BRISK_ERR_NOMEM, "tokenizer: out of memory");
        t->data = d;
        t->cap_size = cap;
    }
    if (len) memcpy(t->data + t->size, s, len);
    t->size += len;
    t->data[t->size++] = 0; /* every string is NUL-terminated */
    t->off[++t->n] = t->size;
    return BRISK_OK;
}

brisk_status tok_strtab_reserve(tok_strtab *t, int64_t n, uint64_t bytes) {
    if (t->n + n + 2 > t->cap_n) {
        int64_t cap = t->n + n + 2;
        uint64_t *off = realloc(t->off, (size_t)cap * sizeof *off);
        if (!off) return bk_fail(BRISK_ERR_NOMEM, "tokenizer: out of memory");
        if (!t->off) off[0] = 0;
        t->off = off;
        t->cap_n = cap;
    }
    uint64_t need = t->size + bytes + (uint64_t)n + 1;
    if (need > t->cap_size) {
        char *d = realloc(t->data, (size_t)need);
        if (!d) return bk_fail(BRISK_ERR_NOMEM, "tokenizer: out of memory");
        t->data = d;
        t->cap_size = need;
    }
    return BRISK_OK;
}

void tok_strtab_free(tok_strtab *t) {
    free(t->data);
    free(t->off);
    memset(t, 0, sizeof *t);
}

uint32_t tok_hash(const char *s, size_t len) {
    uint64_t h = 0x9E3779B97F4A7C15ull ^ (len * 0xFF51AFD7ED558CCDull);
    size_t i = 0;
    for (; i + 8 <= len; i += 8) {
        uint64_t w;
        memcpy(&w, s + i, 8);
        h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
        h ^= h >> 29;
    }
    uint64_t w = 0;
    for (size_t k = 0; i < len; i++, k++) w |= (uint64_t)(unsigned char)s[i] << (8 * k);
    h = (h ^ w) * 0xC4CEB9FE1A85EC53ull;
    h ^= h >> 32;
    return (uint32_t)h;
}

brisk_status tok_strmap_init(tok_strmap *m, int64_t n_keys) {
    uint64_t cap = 64;
    while (cap < (uint64_t)n_keys * 2) cap *= 2;
    m->hash = malloc(cap * sizeof *m->hash);
    m->val = malloc(cap * sizeof *m->val);
    if (!m->hash || !m->val) {
        tok_strmap_free(m);
        return bk_fail(BRISK_ERR_NOMEM, "tokenizer: out of memory");
    }
    memset(m->val, 0xff, cap * sizeof *m->val);
    m->mask = cap - 1;
    return BRISK_OK;
}

void tok_strmap_free(tok_strmap *m) {
    free(m->hash);
    free(m->val);
    memset(m, 0, sizeof *m);
}

void tok_strmap_put(tok_strmap *m, const tok_strtab *tab, int32_t i, bool overwrite) {
    size_t len;
    const char *s = tok_strtab_get(tab, i, &len);
    uint32_t h = tok_hash(s, len);
    for (uint64_t p = h & m->mask;; p = (p + 1) & m->mask) {
        if (m->val[p] < 0) {
            m->val[p] = i;
            m->hash[p] = h;
            return;
        }
        if (m->hash[p] == h) {
            size_t l2;
            const char *s2 = tok_strtab_get(tab, m->val[p], &l2);
            if (l2 == len && memcmp(s, s2, len) == 0) {
                if (overwrite) m->val[p] = i;
                return;
            }
        }
    }
}

int32_t tok_strmap_find(const tok_strmap *m, const tok_strtab *tab, const char *s, size_t len) {
    if (!m->val) return -1;
    uint32_t h = tok_hash(s, len);
    for (uint64_t p = h & m->mask;; p = (p + 1) & m->mask) {
        int32_t v = m->val[p];
        if (v < 0) return -1;
        if (m->hash[p] == h) {
            size_t l2;
            const char *s2 = tok_strtab_get(tab, v, &l2);
            if (l2 == len && memcmp(s, s2, len) == 0) return v;
        }
    }
}

brisk_status tok_ids_push(tok_ids *ids, int32_t id) {
    if (ids->n == ids->cap) {
        int64_t cap = ids->cap ? ids->cap * 2 : 256;
        int32_t *v = realloc(ids->v, (size_t)cap * sizeof *v);
        if (!v) return bk_fail(BRISK_ERR_NOMEM, "tokenizer: out of memory");
        ids->v = v;
        ids->cap = cap;
    }
    ids->v[ids->n++] = id;
    return BRISK_OK;
}

/* ---- allocation ---- */

tokenizer *tok_alloc(void) {
    tokenizer *t = calloc(1, sizeof *t);
    if (!t) return NULL;
    t->bos = t->eos = t->eot = t->eom = t->unk = -1;
    for (int i = 0; i < 6; i++) t->fim[i] = -1;
    return t;
}

brisk_status tok_alloc_arrays(tokenizer *t, int32_t n) {
    t->n_vocab = n;
    t->score = calloc((size_t)n + 1, sizeof *t->score);
    t->type = calloc((size_t)n + 1, sizeof *t->type);
    t->attr = calloc((size_t)n + 1, sizeof *t->attr);
    t->eog = calloc((size_t)n + 1, 1);
    if (!t->score || !t->type || !t->attr || !t->eog)
        return bk_fail(BRISK_ERR_NOMEM, "tokenizer: out of memory");
    return BRISK_OK;
}

void tokenizer_free(tokenizer *t) {
    if (!t) return;
    tok_strtab_free(&t->text);
    tok_strmap_free(&t->text_map);
    tok_strtab_free(&t->merges);
    tok_strmap_free(&t->merge_map);
    free(t->pair_key);
    free(t->pair_rank);
    pretok_free(t->pre);
    free(t->score);
    free(t->type);
    free(t->attr);
    free(t->special);
    free(t->eog);
    free(t);
}

/* ---- merges ---- */

static uint64_t pair_slot(uint64_t key, uint64_t mask) {
    return ((key * 0x9E3779B97F4A7C15ull) >> 29) & mask;
}

int32_t tok_pair_find(const tokenizer *t, int32_t a, int32_t b) {
    uint64_t key = (uint64_t)a << 32 | (uint32_t)b;
    for (uint64_t p = pair_slot(key, t->pair_mask);; p = (p + 1) & t->pair_mask) {
        if (t->pair_key[p] == key) return t->pair_rank[p];
        if (t->pair_key[p] == UINT64_MAX) return -1;
    }
}

/* Splits each merge "a b" at the first space after position 0 (llama.cpp's
 * rule; entries without one never match) and files it in the pair map when
 * both sides are tokens, else in the string map. The first (lowest) rank of
 * a duplicate wins, like bpe_ranks.emplace. Needs text_map. */
static brisk_status build_merges(tokenizer *t) {
    int64_t n = t->merges.n;
    uint64_t cap = 64;
    while (cap < (uint64_t)n * 2) cap *= 2;
    t->pair_key = malloc(cap * sizeof *t->pair_key);
    t->pair_rank = malloc(cap * sizeof *t->pair_rank);
    if (!t->pair_key || !t->pair_rank)
        return bk_fail(BRISK_ERR_NOMEM, "tokenizer: out of memory");
    memset(t->pair_key, 0xff, cap * sizeof *t->pair_key);
    t->pair_mask = cap - 1;
    int64_t n_str = 0;
    BK_TRY(tok_strmap_init(&t->merge_map, 16));
    for (int64_t i = 0; i < n; i++) {
        size_t len;
        const char *s = tok_strtab_get(&t->merges, i, &len);
        const char *sp = len > 1 ? memchr(s + 1, ' ', len - 1) : NULL;
        if (!sp) continue;
        int32_t a = tok_strmap_find(&t->text_map, &t->text, s, (size_t)(sp - s));
        int32_t b = tok_strmap_find(&t->text_map, &t->text, sp + 1, len - (size_t)(sp - s) - 1);
        if (a < 0 || b < 0) {
            if (++n_str * 2 > (int64_t)t->merge_map.mask) { /* grow: rebuild larger */
                tok_strmap m2;
                BK_TRY(tok_strmap_init(&m2, n_str * 2));
                for (uint64_t p = 0; p <= t->merge_map.mask; p++)
                    if (t->merge_map.val[p] >= 0) tok_strmap_put(&m2, &t->merges, t->merge_map.val[p], false);
                tok_strmap_free(&t->merge_map);
                t->merge_map = m2;
            }
            tok_strmap_put(&t->merge_map, &t->merges, (int32_t)i, false);
            continue;
        }
        uint64_t key = (uint64_t)a << 32 | (uint32_t)b, p = pair_slot(key, t->pair_mask);
        while (t->pair_key[p] != UINT64_MAX && t->pair_key[p] != key) p = (p + 1) & t->pair_mask;
        if (t->pair_key[p] == key) continue;
        t->pair_key[p] = key;
        t->pair_rank[p] = (int32_t)i;
    }
    return BRISK_OK;
}

/* ---- llama.cpp's special-token rules ---- */

static int32_t find_text(const tokenizer *t, const char *s) {
    return tok_strmap_find(&t->text_map, &t->text, s, strlen(s));
}

/* The first listed text present in the vocab (llama.cpp walks its hash map, so
 * among several candidates its pick is arbitrary; we take list order). */
static int32_t find_any(tokenizer *t, const char *const *list, bool force_control) {
    for (; *list; list++) {
        int32_t id = find_text(t, *list);
        if (id >= 0) {
            if (force_control) t->attr[id] |= TOK_ATTR_CONTROL;
            return id;
        }
    }
    return -1;
}

static const char *const k_eot[] = {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>",
                                    "<|endoftext|>", "<|end_of_text|>", "<EOT>", "_<EOT>",
                                    "[EOT]", "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>",
                                    "<end_of_utterance>", NULL};
static const char *const k_eom[] = {"<|eom_id|>", NULL};
/* fill-in-the-middle tokens by their texts (llama.cpp's lists), in brisk_fim order */
static const char *const k_fim_pre[] = {"<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>",
                                        "<\xef\xbd\x9c" "fim\xe2\x96\x81" "begin\xef\xbd\x9c>", "<PRE>",
                                        "\xe2\x96\x81<PRE>", "<|code_prefix|>", "<|prefix|>", NULL};
static const char *const k_fim_suf[] = {"<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>",
                                        "<\xef\xbd\x9c" "fim\xe2\x96\x81hole\xef\xbd\x9c>", "<SUF>",
                                        "\xe2\x96\x81<SUF>", "<|code_suffix|>", "<|suffix|>", NULL};
static const char *const k_fim_mid[] = {"<|fim_middle|>", "<fim-middle>", "<fim_middle>",
                                        "<\xef\xbd\x9c" "fim\xe2\x96\x81" "end\xef\xbd\x9c>", "<MID>",
                                        "\xe2\x96\x81<MID>", "<|code_middle|>", "<|middle|>", NULL};
static const char *const k_fim_pad[] = {"<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]", NULL};
static const char *const k_fim_rep[] = {"<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>",
                                        "<reponame>", NULL};
static const char *const k_fim_sep[] = {"<|file_sep|>", NULL};
static const char *const *const k_fim[6] = {k_fim_pre, k_fim_suf, k_fim_mid, k_fim_pad, k_fim_rep, k_fim_sep};
static const char *const k_eog[] = {
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<\xef\xbd\x9c" "end\xe2\x96\x81of\xe2\x96\x81sentence\xef\xbd\x9c>", "[e~[", NULL};

static int cmp_special(const void *a, const void *b, void *ctx) {
    const tokenizer *t = ctx;
    int32_t x = *(const int32_t *)a, y = *(const int32_t *)b;
    uint64_t lx = t->text.off[x + 1] - t->text.off[x], ly = t->text.off[y + 1] - t->text.off[y];
    if (lx != ly) return lx > ly ? -1 : 1;
    return x < y ? -1 : x > y;
}

static bool contains_ci(const char *s, size_t len, const char *needle) {
    size_t nl = strlen(needle);
    for (size_t i = 0; i + nl <= len; i++) {
        size_t k = 0;
        while (k < nl) {
            char c = s[i + k];
            if (c >= 'A' && c <= 'Z') c = (char)(c - 'A' + 'a');
            if (c != needle[k]) break;
            k++;
        }
        if (k == nl) return true;
    }
    return false;
}

brisk_status tok_finalize(tokenizer *t, const char *model_name, size_t model_name_len) {
    int32_t n = t->n_vocab;
    BK_TRY(tok_strmap_init(&t->text_map, n));
    for (int32_t i = 0; i < n; i++) tok_strmap_put(&t->text_map, &t->text, i, true);
    if (t->kind == TOKENIZER_BPE) BK_TRY(build_merges(t));

    if (t->eot < 0) t->eot = find_any(t, k_eot, true);
    if (t->eom < 0) t->eom = find_any(t, k_eom, true);
    for (int k = 0; k < 6; k++)
        if (t->fim[k] < 0) t->fim[k] = find_any(t, k_fim[k], true);
        else t->attr[t->fim[k]] |= TOK_ATTR_CONTROL;

    /* control tokens whose text says "unused" are unused */
    for (int32_t i = 0; i < n; i++) {
        if (!(t->attr[i] & TOK_ATTR_CONTROL)) continue;
        size_t len;
        const char *s = tok_strtab_get(&t->text, i, &len);
        if (memmem(s, len, "unused", 6)) t->attr[i] |= TOK_ATTR_UNUSED;
    }

    for (int k = BRISK_FIM_PAD; k <= BRISK_FIM_SEP; k++) /* as llama.cpp: pad, repo and file separators end a fill */
        if (t->fim[k] >= 0) t->eog[t->fim[k]] = 1;
    for (const char *const *p = k_eog; *p; p++) {
        int32_t id = find_text(t, *p);
        if (id < 0) continue;
        t->eog[id] = 1;
        t->attr[id] |= TOK_ATTR_CONTROL;
    }
    /* gpt-oss: these are always rendered */
    static const char *const k_user[] = {"<|channel|>", "<|message|>", "<|start|>", "<|constrain|>", NULL};
    for (const char *const *p = k_user; *p; p++) {
        int32_t id = find_text(t, *p);
        if (id >= 0) t->attr[id] = TOK_ATTR_USER_DEFINED;
    }
    if (t->eos >= 0) t->eog[t->eos] = 1;
    if (t->eot >= 0) t->eog[t->eot] = 1;
    if (t->eom >= 0) t->eog[t->eom] = 1;

    /* o200k_harmony / solar-open: "<|end|>" is not EOG there */
    {
        int32_t ret = find_text(t, "<|return|>"), call = find_text(t, "<|call|>");
        int32_t calls = find_text(t, "<|calls|>"), flush = find_text(t, "<|flush|>");
        int32_t end = find_text(t, "<|end|>");
        bool has_return = ret >= 0 && t->eog[ret];
        bool has_call = (call >= 0 && t->eog[call]) || (calls >= 0 && t->eog[calls]);
        bool has_flush = flush >= 0 && t->eog[flush];
        bool has_end = end >= 0 && t->eog[end];
        if ((has_return && has_call && has_end) || (has_call && has_flush && has_end)) {
            t->eog[end] = 0;
            t->attr[end] = TOK_ATTR_USER_DEFINED;
        }
        int32_t tr = find_text(t, "<|tool_response>"), s = find_text(t, "</s>");
        if (tr >= 0 && t->eog[tr] && s >= 0 && t->eog[s]) {
            t->eog[s] = 0;
            t->attr[s] = TOK_ATTR_NORMAL;
        }
    }

    /* the special-token cache, longest text first */
    t->special = malloc(((size_t)n + 1) * sizeof *t->special);
    if (!t->special) return bk_fail(BRISK_ERR_NOMEM, "tokenizer: out of memory");
    t->n_special = 0;
    for (int32_t i = 0; i < n; i++)
        if (t->attr[i] & (TOK_ATTR_CONTROL | TOK_ATTR_USER_DEFINED | TOK_ATTR_UNKNOWN))
            t->special[t->n_special++] = i;
    qsort_r(t->special, (size_t)t->n_special, sizeof *t->special, cmp_special, t);

    /* per-model attributes (llama.cpp sets these by general.name) */
    if (model_name && (contains_ci(model_name, model_name_len, "phi-3") ||
                       contains_ci(model_name, model_name_len, "phi3"))) {
        for (int32_t k = 0; k < t->n_special; k++) t->attr[t->special[k]] |= TOK_ATTR_RSTRIP;
        int32_t id = find_text(t, "</s>");
        if (id >= 0) t->attr[id] |= TOK_ATTR_RSTRIP;
        static const char *const k_no[] = {"<unk>", "<s>", "<|endoftext|>", NULL};
        for (const char *const *p = k_no; *p; p++) {
            id = find_text(t, *p);
            if (id >= 0) t->attr[id] &= ~(uint32_t)TOK_ATTR_RSTRIP;
        }
    }
    return BRISK_OK;
}

/* ---- GGUF ---- */

static uint32_t attr_from_type(int32_t type) {
    switch (type) {
    case TOKEN_TYPE_NORMAL: return TOK_ATTR_NORMAL;
    case TOKEN_TYPE_UNKNOWN: return TOK_ATTR_UNKNOWN;
    case TOKEN_TYPE_CONTROL: return TOK_ATTR_CONTROL;
    case TOKEN_TYPE_USER_DEFINED: return TOK_ATTR_USER_DEFINED;
    case TOKEN_TYPE_UNUSED: return TOK_ATTR_UNUSED;
    case TOKEN_TYPE_BYTE: return TOK_ATTR_BYTE;
    default: return TOK_ATTR_UNDEFINED;
    }
}

static void read_id(const gguf_file *g, const char *key, int32_t n, int32_t *id) {
    if (*id >= n) *id = -1; /* a default outside the vocab is disabled */
    int64_t v;
    if (gguf_get_i64(g, key, &v) != BRISK_OK) return;
    if (v >= 0 && v < n) *id = (int32_t)v;
}

static bool str_eq(const char *s, size_t len, const char *lit) {
    return len == strlen(lit) && memcmp(s, lit, len) == 0;
}

static brisk_status load_merges(tokenizer *t, const gguf_file *g) {
    int64_t kv = gguf_find_key(g, "tokenizer.ggml.merges");
    if (kv < 0) return bk_fail(BRISK_ERR_FORMAT, "tokenizer: no tokenizer.ggml.merges");
    gguf_value_type et;
    uint64_t n;
    BK_TRY(gguf_kv_arr_info(g, kv, &et, &n));
    if (et != GGUF_TYPE_STRING || n > INT32_MAX)
        return bk_fail(BRISK_ERR_FORMAT, "tokenizer: tokenizer.ggml.merges is not a string array");
    uint64_t bytes = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        BK_TRY(gguf_kv_arr_str(g, kv, i, &s, &len));
        bytes += len;
    }
    BK_TRY(tok_strtab_reserve(&t->merges, (int64_t)n, bytes));
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        BK_TRY(gguf_kv_arr_str(g, kv, i, &s, &len));
        BK_TRY(tok_strtab_push(&t->merges, s, len));
    }
    return BRISK_OK;
}

static brisk_status load_gguf(tokenizer *t, const gguf_file *g) {
    const char *model, *pre = NULL, *name = NULL;
    size_t model_len, pre_len = 0, name_len = 0;
    if (gguf_get_str(g, "tokenizer.ggml.model", &model, &model_len) != BRISK_OK)
        return bk_fail(BRISK_ERR_FORMAT, "tokenizer: no tokenizer.ggml.model");
    if (gguf_get_str(g, "tokenizer.ggml.pre", &pre, &pre_len) != BRISK_OK) pre = NULL;
    if (gguf_get_str(g, "general.name", &name, &name_len) != BRISK_OK) name = NULL;

    const tok_pre_info *pi = NULL;
    if (str_eq(model, model_len, "llama")) {
        t->kind = TOKENIZER_SPM;
        t->bos = 1, t->eos = 2, t->unk = 0;
        t->add_space_prefix = true;
        t->add_bos = true;
    } else if (str_eq(model, model_len, "gpt2")) {
        t->kind = TOKENIZER_BPE;
        t->bos = 11, t->eos = 11;
        t->clean_spaces = true;
        pi = pre ? tok_pre_lookup(pre, pre_len) : tok_pre_lookup("default", 7);
        if (!pi)
            return bk_fail(BRISK_ERR_UNSUPPORTED, "tokenizer: unsupported pre-tokenizer '%.*s'",
                           (int)pre_len, pre);
        t->ignore_merges = pi->ignore_merges;
        t->clean_spaces = pi->clean_spaces;
        t->add_bos = pi->add_bos_default;
        int nre = 0;
        while (nre < 6 && pi->regexes[nre]) nre++;
        BK_TRY(pretok_new(pi->regexes, nre, &t->pre));
        BK_TRY(load_merges(t, g));
    } else {
        return bk_fail(BRISK_ERR_UNSUPPORTED, "tokenizer: unsupported tokenizer model '%.*s'",
                       (int)model_len, model);
    }
    bool b;
    if (gguf_get_bool(g, "tokenizer.ggml.add_space_prefix", &b) == BRISK_OK) t->add_space_prefix = b;

    int64_t kv = gguf_find_key(g, "tokenizer.ggml.tokens");
    if (kv < 0) return bk_fail(BRISK_ERR_FORMAT, "tokenizer: no tokenizer.ggml.tokens");
    gguf_value_type et;
    uint64_t n;
    BK_TRY(gguf_kv_arr_info(g, kv, &et, &n));
    if (et != GGUF_TYPE_STRING || n == 0 || n >= INT32_MAX)
        return bk_fail(BRISK_ERR_FORMAT, "tokenizer: bad tokenizer.ggml.tokens");
    BK_TRY(tok_alloc_arrays(t, (int32_t)n));

    const void *data;
    uint64_t na;
    if (gguf_get_arr(g, "tokenizer.ggml.scores", &et, &na, &data) == BRISK_OK) {
        if ((et != GGUF_TYPE_FLOAT32 && et != GGUF_TYPE_INT32) || na < n)
            return bk_fail(BRISK_ERR_FORMAT, "tokenizer: bad tokenizer.ggml.scores");
        for (uint64_t i = 0; i < n; i++) {
            if (et == GGUF_TYPE_FLOAT32) memcpy(&t->score[i], (const char *)data + 4 * i, 4);
            else {
                int32_t v;
                memcpy(&v, (const char *)data + 4 * i, 4);
                t->score[i] = (float)v;
            }
        }
    }
    if (gguf_get_arr(g, "tokenizer.ggml.token_type", &et, &na, &data) == BRISK_OK) {
        if (et != GGUF_TYPE_INT32 || na < n)
            return bk_fail(BRISK_ERR_FORMAT, "tokenizer: bad tokenizer.ggml.token_type");
        memcpy(t->type, data, n * 4);
        for (uint64_t i = 0; i < n; i++) t->attr[i] = attr_from_type(t->type[i]);
    } else {
        for (uint64_t i = 0; i < n; i++) t->type[i] = TOKEN_TYPE_NORMAL, t->attr[i] = TOK_ATTR_NORMAL;
    }
    uint64_t bytes = 0;
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        BK_TRY(gguf_kv_arr_str(g, kv, i, &s, &len));
        bytes += len ? len : 20;
    }
    BK_TRY(tok_strtab_reserve(&t->text, (int64_t)n, bytes));
    for (uint64_t i = 0; i < n; i++) {
        const char *s;
        size_t len;
        BK_TRY(gguf_kv_arr_str(g, kv, i, &s, &len));
        if (len == 0) { /* llama.cpp renames empty tokens */
            char buf[32];
            int l = snprintf(buf, sizeof buf, "[EMPTY_%u]", (unsigned)i);
            BK_TRY(tok_strtab_push(&t->text, buf, (size_t)l));
        } else {
            BK_TRY(tok_strtab_push(&t->text, s, len));
        }
    }

    int32_t nv = t->n_vocab, pad = -1, sep = -1, mask = -1;
    read_id(g, "tokenizer.ggml.bos_token_id", nv, &t->bos);
    read_id(g, "tokenizer.ggml.eos_token_id", nv, &t->eos);
    read_id(g, "tokenizer.ggml.eot_token_id", nv, &t->eot);
    read_id(g, "tokenizer.ggml.eom_token_id", nv, &t->eom);
    read_id(g, "tokenizer.ggml.unknown_token_id", nv, &t->unk);
    read_id(g, "tokenizer.ggml.seperator_token_id", nv, &sep);
    read_id(g, "tokenizer.ggml.padding_token_id", nv, &pad);
    read_id(g, "tokenizer.ggml.mask_token_id", nv, &mask);
    static const char *const fim_keys[6] = {"pre", "suf", "mid", "pad", "rep", "sep"};
    static const char *const fim_legacy[3] = {"prefix", "suffix", "middle"};
    for (int k = 0; k < 6; k++) {
        char key[64];
        snprintf(key, sizeof key, "tokenizer.ggml.fim_%s_token_id", fim_keys[k]);
        read_id(g, key, nv, &t->fim[k]);
        if (k < 3 && t->fim[k] < 0) {
            snprintf(key, sizeof key, "tokenizer.ggml.%s_token_id", fim_legacy[k]);
            read_id(g, key, nv, &t->fim[k]);
        }
    }
    if (gguf_get_bool(g, "tokenizer.ggml.add_bos_token", &b) == BRISK_OK) t->add_bos = b;
    if (gguf_get_bool(g, "tokenizer.ggml.add_eos_token", &b) == BRISK_OK) t->add_eos = b;
    return tok_finalize(t, name, name_len);
}

brisk_status tokenizer_from_gguf(const gguf_file *g, tokenizer **out) {
    *out = NULL;
    tokenizer *t = tok_alloc();
    if (!t) return bk_fail(BRISK_ERR_NOMEM, "tokenizer: out of memory");
    brisk_status s = load_gguf(t, g);
    if (s != BRISK_OK) {
        tokenizer_free(t);
        return s;
    }
    *out = t;
    return BRISK_OK;
}

/* ---- accessors ---- */

tokenizer_kind tokenizer_get_kind(const tokenizer *t) { return t->kind; }
int32_t tokenizer_n_vocab(const tokenizer *t) { return t->n_vocab; }
int32_t tokenizer_bos(const tokenizer *t) { return t->bos; }
const char *tokenizer_pre_family(const tokenizer *t) { return t->pre_family; }
int32_t tokenizer_eos(const tokenizer *t) { return t->eos; }
bool tokenizer_add_bos(const tokenizer *t) { return t->add_bos && t->bos >= 0; }
int32_t tokenizer_fim(const tokenizer *t, int kind) { return kind >= 0 && kind < 6 ? t->fim[kind] : -1; }
bool tokenizer_add_eos(const tokenizer *t) { return t->add_eos && t->eos >= 0; }
bool tokenizer_is_eog(const tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab && t->eog[id];
}
int32_t tokenizer_token_type(const tokenizer *t, int32_t id) {
    return id >= 0 && id < t->n_vocab ? t->type[id] : 0;
}
const char *tokenizer_token_text(const tokenizer *t, int32_t id, size_t *len) {
    if (id < 0 || id >= t->n_vocab) return NULL;
    size_t l;
    const char *s = tok_strtab_get(&t->text, id, &l);
    if (len) *len = l;
    return s;
}
