/* hfjson.c — a byte-level BPE tokenizer from a Hugging Face tokenizer.json
 * (+ tokenizer_config.json), typed the way llama.cpp's converter types it, so
 * that it encodes exactly like the GGUF made from the same files.
 *
 * Supported: model BPE (vocab, merges as "a b" strings or [a, b] pairs,
 * ignore_merges), added_tokens (special -> control, else user-defined unless
 * the text looks special), pre_tokenizer Split(Regex, Isolated) and
 * ByteLevel (in a Sequence or alone), normalizer null or NFC.
 * Limitation: the NFC normalizer is not applied (text must already be NFC
 * for identical results; ASCII always is).
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/tok_internal.h"

#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define CI_CONTRACTIONS "(?i:'s|'t|'re|'ve|'m|'ll|'d)"
#define CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"

static brisk_status read_file(const char *path, char **out, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return bk_fail(BRISK_ERR_IO, "cannot open %s", path);
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 65536 > cap) {
            cap = cap ? cap * 2 : 1 << 20;
            char *b = realloc(buf, cap + 1);
            if (!b) {
                free(buf);
                fclose(f);
                return bk_fail(BRISK_ERR_NOMEM, "out of memory reading %s", path);
            }
            buf = b;
        }
        size_t r = fread(buf + n, 1, cap - n, f);
        n += r;
        if (r == 0) break;
    }
    bool err = ferror(f);
    fclose(f);
    if (err) {
        free(buf);
        return bk_fail(BRISK_ERR_IO, "read error on %s", path);
    }
    buf[n] = 0;
    *out = buf;
    *len = n;
    return BRISK_OK;
}

static brisk_status parse_json(const char *path, cJSON **out) {
    char *buf = NULL;
    size_t len = 0;
    BK_TRY(read_file(path, &buf, &len));
    *out = cJSON_ParseWithLength(buf, len);
    free(buf);
    if (!*out) return bk_fail(BRISK_ERR_FORMAT, "%s: invalid JSON", path);
    return BRISK_OK;
}

/* convert_hf_to_gguf.py's does_token_look_special */
static bool looks_special(const char *s) {
    size_t n = strlen(s);
    if (!strcmp(s, "<pad>") || !strcmp(s, "<mask>") || !strcmp(s, "<2mass>") || !strcmp(s, "[@BOS@]"))
        return true;
    if (n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>")) return true;
    if (n >= 8 && !strncmp(s, "<\xef\xbd\x9c", 4) && !strcmp(s + n - 4, "\xef\xbd\x9c>")) return true;
    if (n >= 8 && !strncmp(s, "<unused", 7) && s[n - 1] == '>') return true;
    return false;
}

typedef struct hf_tok {
    const char *text;
    int32_t type;
} hf_tok;

/* Collects the Split regexes of a pre_tokenizer node into re (rewritten). */
static brisk_status collect_pre(const cJSON *node, char **re, int *n) {
    if (!node || cJSON_IsNull(node)) return BRISK_OK;
    const cJSON *type = cJSON_GetObjectItemCaseSensitive(node, "type");
    const char *ty = cJSON_IsString(type) ? type->valuestring : "";
    if (!strcmp(ty, "Sequence")) {
        const cJSON *it;
        cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(node, "pretokenizers"))
            BK_TRY(collect_pre(it, re, n));
        return BRISK_OK;
    }
    const char *pat = NULL;
    char *own = NULL;
    if (!strcmp(ty, "ByteLevel")) {
        const cJSON *ur = cJSON_GetObjectItemCaseSensitive(node, "use_regex");
        const cJSON *ap = cJSON_GetObjectItemCaseSensitive(node, "add_prefix_space");
        if (cJSON_IsTrue(ap))
            return bk_fail(BRISK_ERR_UNSUPPORTED, "tokenizer.json: ByteLevel add_prefix_space");
        if (ur && !cJSON_IsTrue(ur)) return BRISK_OK;
        pat = RE_GPT2;
    } else if (!strcmp(ty, "Split")) {
        const cJSON *p = cJSON_GetObjectItemCaseSensitive(node, "pattern");
        const cJSON *beh = cJSON_GetObjectItemCaseSensitive(node, "behavior");
        const cJSON *inv = cJSON_GetObjectItemCaseSensitive(node, "invert");
        if (!cJSON_IsString(beh) || strcmp(beh->valuestring, "Isolated") || cJSON_IsTrue(inv))
            return bk_fail(BRISK_ERR_UNSUPPORTED, "tokenizer.json: Split other than Isolated");
        const cJSON *rx = cJSON_GetObjectItemCaseSensitive(p, "Regex");
        const cJSON *st = cJSON_GetObjectItemCaseSensitive(p, "String");
        if (cJSON_IsString(rx)) {
            pat = rx->valuestring;
        } else if (cJSON_IsString(st)) {
            size_t l = strlen(st->valuestring);
            own = malloc(l + 5);
            if (!own) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
            snprintf(own, l + 5, "\\Q%s\\E", st->valuestring);
        } else {
            return bk_fail(BRISK_ERR_FORMAT, "tokenizer.json: Split without a pattern");
        }
    } else {
        return bk_fail(BRISK_ERR_UNSUPPORTED, "tokenizer.json: pre_tokenizer '%s'", ty);
    }
    if (*n >= 6) {
        free(own);
        return bk_fail(BRISK_ERR_UNSUPPORTED, "tokenizer.json: too many pre-tokenizer regexes");
    }
    if (!own) {
        /* llama.cpp's ASCII-only contractions instead of (?i:...) */
        const char *ci = strstr(pat, CI_CONTRACTIONS);
        size_t l = strlen(pat) + strlen(CONTRACTIONS) + 1;
        own = malloc(l);
        if (!own) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
        if (ci)
            snprintf(own, l, "%.*s%s%s", (int)(ci - pat), pat, CONTRACTIONS,
                     ci + strlen(CI_CONTRACTIONS));
        else
            snprintf(own, l, "%s", pat);
    }
    re[(*n)++] = own;
    return BRISK_OK;
}

static const char *token_content(const cJSON *v) {
    if (cJSON_IsString(v)) return v->valuestring;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(c) ? c->valuestring : NULL;
}

static int32_t id_of(const hf_tok *toks, int32_t n, const char *s) {
    if (!s) return -1;
    for (int32_t i = n - 1; i >= 0; i--)
        if (toks[i].text && !strcmp(toks[i].text, s)) return i;
    return -1;
}

static brisk_status load_vocab(tokenizer *t, const cJSON *root, hf_tok **out_toks) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(root, "model");
    const cJSON *mtype = cJSON_GetObjectItemCaseSensitive(model, "type");
    if (!model || (mtype && (!cJSON_IsString(mtype) || strcmp(mtype->valuestring, "BPE"))))
        return bk_fail(BRISK_ERR_UNSUPPORTED, "tokenizer.json: only BPE models are supported");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    const cJSON *added = cJSON_GetObjectItemCaseSensitive(root, "added_tokens");
    if (!cJSON_IsObject(vocab)) return bk_fail(BRISK_ERR_FORMAT, "tokenizer.json: no model.vocab");
    int64_t max_id = -1;
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= (1 << 30))
            return bk_fail(BRISK_ERR_FORMAT, "tokenizer.json: bad id for '%s'", it->string);
        if (it->valueint > max_id) max_id = it->valueint;
    }
    cJSON_ArrayForEach(it, added) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (1 << 30))
            return bk_fail(BRISK_ERR_FORMAT, "tokenizer.json: bad added token id");
        if (id->valueint > max_id) max_id = id->valueint;
    }
    if (max_id < 0) return bk_fail(BRISK_ERR_FORMAT, "tokenizer.json: empty vocab");
    int32_t n = (int32_t)max_id + 1;
    hf_tok *toks = calloc((size_t)n, sizeof *toks);
    if (!toks) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    *out_toks = toks;
    cJSON_ArrayForEach(it, vocab) {
        toks[it->valueint].text = it->string;
        toks[it->valueint].type = TOKEN_TYPE_NORMAL;
    }
    cJSON_ArrayForEach(it, added) {
        int32_t id = cJSON_GetObjectItemCaseSensitive(it, "id")->valueint;
        const char *c = token_content(it);
        if (!c) return bk_fail(BRISK_ERR_FORMAT, "tokenizer.json: added token without content");
        bool sp = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "special"));
        toks[id].text = c;
        toks[id].type = sp || looks_special(c) ? TOKEN_TYPE_CONTROL : TOKEN_TYPE_USER_DEFINED;
    }
    BK_TRY(tok_alloc_arrays(t, n));
    for (int32_t i = 0; i < n; i++) {
        char pad[32];
        const char *s = toks[i].text;
        int32_t ty = toks[i].type;
        if (!s || !*s) { /* the converter's filler for holes */
            snprintf(pad, sizeof pad, "[PAD%d]", (int)i);
            s = pad;
            ty = TOKEN_TYPE_UNUSED;
        }
        BK_TRY(tok_strtab_push(&t->text, s, strlen(s)));
        t->type[i] = ty;
        t->attr[i] = ty == TOKEN_TYPE_NORMAL    ? TOK_ATTR_NORMAL
                     : ty == TOKEN_TYPE_CONTROL ? TOK_ATTR_CONTROL
                     : ty == TOKEN_TYPE_UNUSED  ? TOK_ATTR_UNUSED
                                                : TOK_ATTR_USER_DEFINED;
    }
    t->ignore_merges = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(model, "ignore_merges"));

    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(model, "merges");
    int32_t rank = 0;
    cJSON_ArrayForEach(it, merges) {
        char *tmp = NULL;
        const char *m;
        if (cJSON_IsString(it)) {
            m = it->valuestring;
        } else if (cJSON_IsArray(it) && cJSON_GetArraySize(it) == 2 &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 0)) &&
                   cJSON_IsString(cJSON_GetArrayItem(it, 1))) {
            const char *a = cJSON_GetArrayItem(it, 0)->valuestring;
            const char *b = cJSON_GetArrayItem(it, 1)->valuestring;
            size_t l = strlen(a) + strlen(b) + 2;
            tmp = malloc(l);
            if (!tmp) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
            snprintf(tmp, l, "%s %s", a, b);
            m = tmp;
        } else {
            return bk_fail(BRISK_ERR_FORMAT, "tokenizer.json: bad merge #%d", (int)rank);
        }
        brisk_status s = tok_strtab_push(&t->merges, m, strlen(m));
        free(tmp);
        BK_TRY(s);
        rank++;
    }
    return BRISK_OK;
}

static brisk_status load_hf(tokenizer *t, const cJSON *root, const cJSON *cfg) {
    hf_tok *toks = NULL;
    char *re[6];
    int nre = 0;
    brisk_status s = load_vocab(t, root, &toks);
    if (s != BRISK_OK) goto done;
    t->kind = TOKENIZER_BPE;

    const cJSON *norm = cJSON_GetObjectItemCaseSensitive(root, "normalizer");
    if (norm && !cJSON_IsNull(norm)) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(norm, "type");
        if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "NFC")) {
            s = bk_fail(BRISK_ERR_UNSUPPORTED, "tokenizer.json: unsupported normalizer");
            goto done;
        }
    }
    s = collect_pre(cJSON_GetObjectItemCaseSensitive(root, "pre_tokenizer"), re, &nre);
    if (s == BRISK_OK && nre == 0)
        s = bk_fail(BRISK_ERR_UNSUPPORTED, "tokenizer.json: no byte-level pre-tokenizer");
    if (s == BRISK_OK) s = pretok_new((const char *const *)re, nre, &t->pre);
    if (s != BRISK_OK) goto done;
    /* A newly trained vocabulary has no known check-string hash, but its
     * pre-tokenizer may be a known family's exactly (the converter's fallback).
     * Only families whose other flags are llama.cpp's defaults qualify. */
    for (int f = 0; f < 2 && !t->pre_family; f++) {
        const tok_pre_info *pi = tok_pre_lookup(f ? "qwen35" : "qwen2", f ? 6 : 5);
        int k = 0;
        while (pi && k < 6 && pi->regexes[k] && k < nre && !strcmp(pi->regexes[k], re[k])) k++;
        if (pi && k == nre && (k == 6 || !pi->regexes[k])) t->pre_family = pi->name;
    }

    if (cfg) {
        t->add_bos = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token"));
        t->add_eos = cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "add_eos_token"));
        t->clean_spaces =
            cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(cfg, "clean_up_tokenization_spaces"));
        t->bos = id_of(toks, t->n_vocab, token_content(cJSON_GetObjectItemCaseSensitive(cfg, "bos_token")));
        t->eos = id_of(toks, t->n_vocab, token_content(cJSON_GetObjectItemCaseSensitive(cfg, "eos_token")));
    }
    s = tok_finalize(t, NULL, 0);
done:
    for (int i = 0; i < nre; i++) free(re[i]);
    free(toks);
    return s;
}

brisk_status tokenizer_from_hf_json(const char *tokenizer_json_path, const char *config_path,
                                    tokenizer **out) {
    *out = NULL;
    cJSON *root = NULL, *cfg = NULL;
    BK_TRY(parse_json(tokenizer_json_path, &root));
    brisk_status s = config_path ? parse_json(config_path, &cfg) : BRISK_OK;
    tokenizer *t = s == BRISK_OK ? tok_alloc() : NULL;
    if (s == BRISK_OK && !t) s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
    if (s == BRISK_OK) s = load_hf(t, root, cfg);
    cJSON_Delete(root);
    cJSON_Delete(cfg);
    if (s != BRISK_OK) {
        tokenizer_free(t);
        return s;
    }
    *out = t;
    return BRISK_OK;
}
