/* pretok.c — pre-tokenizer regexes (PCRE2), UTF-8 helpers, GPT-2 byte mapping.
 *
 * llama.cpp splits text with hand-written matchers for the gpt2, llama3,
 * qwen2 and qwen35 patterns and std::regex for the others. Its matchers
 * implement ordinary leftmost-first regex semantics over its own Unicode
 * tables, so we run the same patterns through PCRE2 (UTF + UCP), with three
 * adjustments that keep the splits identical:
 *  - contractions use the explicit '[sS]... form llama.cpp adopted, so
 *    case-folding never reaches non-ASCII letters (PCRE2 (?i) would match
 *    "'ſ" or "'K" (Kelvin sign));
 *  - U+0085 is White_Space for llama.cpp but not for PCRE2's \s, so the
 *    subject the regex sees ("shadow") carries U+2029 in its place;
 *  - llama.cpp decodes UTF-8 leniently (surrogates and code points above
 *    U+10FFFF pass, bad bytes become U+FFFD one byte at a time); the shadow
 *    replaces what PCRE2 cannot take by U+E000, which has the same classes
 *    (not L, N, M or space), while the words handed out are llama.cpp's
 *    re-encoding of the original code points.
 * Text between matches becomes a word of its own, as in llama.cpp.
 * Known limit: PCRE2's Unicode version (14 for PCRE2 10.42) may be older than
 * llama.cpp's tables, so letters added in later Unicode versions split as
 * symbols here.
 */
#define PCRE2_CODE_UNIT_WIDTH 8
#include <pcre2.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "tokenizer/tok_internal.h"

#define CONTRACTIONS "(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
#define RE_GPT2 "'s|'t|'re|'ve|'m|'ll|'d| ?\\p{L}+| ?\\p{N}+| ?[^\\s\\p{L}\\p{N}]+|\\s+(?!\\S)"
#define RE_LLAMA3                                                                            \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1,3}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|" \
                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN2                                                                           \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?[^\\s\\p{L}\\p{N}]+[\\r\\n]*|"    \
                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_QWEN35                                                                           \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?[\\p{L}\\p{M}]+|\\p{N}| ?[^\\s\\p{L}\\p{M}\\p{N}]+" \
                 "[\\r\\n]*|\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_PUNCT "[\\p{P}\\$\\+<=>\\^~\\|]+"
#define RE_SEED_CODER                                                                          \
    CONTRACTIONS "|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}{1}| ?[^\\s\\p{L}\\p{N}\\r\\n]+|"       \
                 "\\s*[\\r\\n]+|\\s+(?!\\S)|\\s+"
#define RE_BAILING                                                                            \
    "'(?:[sSdDmMtT]|[lL][lL]|[vV][eE]|[rR][eE])|[^\\r\\n\\p{L}\\p{N}]?\\p{L}+|\\p{N}| ?"      \
    "[^\\s\\p{L}\\p{N}]+[\\r\\n]*|\\s*[\\r\\n]|\\s+(?!\\S)|\\s+"
#define RE_BLOOM " ?[^(\\s|.,!?\xe2\x80\xa6\xe3\x80\x82\xef\xbc\x8c\xe3\x80\x81\xe0\xa5\xa4\xdb\x94\xd8\x8c)]+"

/* name, regexes, ignore_merges, clean_spaces, add_bos (llama.cpp's llama_vocab::impl::load) */
static const tok_pre_info k_pre[] = {
    {"default", {RE_PUNCT, RE_GPT2, "\\p{N}+", "[0-9][0-9][0-9]"}, false, true, false},
    {"llama3", {RE_LLAMA3}, true, true, true},
    {"llama-v3", {RE_LLAMA3}, true, true, true},
    {"llama-bpe", {RE_LLAMA3}, true, true, true},
    {"falcon3", {RE_LLAMA3}, true, true, true},
    {"falcon-h1", {RE_LLAMA3}, true, true, true},
    {"pixtral", {RE_LLAMA3}, true, true, true},
    {"midm-2.0", {RE_LLAMA3}, true, true, true},
    {"lfm2", {RE_LLAMA3}, true, true, true},
    {"jina-v5-nano", {RE_LLAMA3}, true, true, true},
    {"dbrx", {RE_LLAMA3}, false, true, false},
    {"smaug-bpe", {RE_LLAMA3}, false, true, false},
    {"falcon", {RE_PUNCT, RE_GPT2, "[0-9][0-9][0-9]"}, false, true, false},
    {"mpt", {RE_GPT2}, false, true, false},
    {"olmo", {RE_GPT2}, false, true, false},
    {"jais", {RE_GPT2}, false, true, false},
    {"gpt-2", {RE_GPT2}, false, true, false},
    {"phi-2", {RE_GPT2}, false, true, false},
    {"jina-es", {RE_GPT2}, false, true, false},
    {"jina-de", {RE_GPT2}, false, true, false},
    {"gigachat", {RE_GPT2}, false, true, false},
    {"jina-v2-es", {RE_GPT2}, false, true, false},
    {"jina-v2-de", {RE_GPT2}, false, true, false},
    {"a.x-4.0", {RE_GPT2}, false, true, false},
    {"mellum", {RE_GPT2}, false, true, false},
    {"modern-bert", {RE_GPT2}, false, true, false},
    {"exaone4", {RE_GPT2}, false, true, false},
    {"trillion", {RE_GPT2}, false, false, false},
    {"granite-docling", {RE_GPT2}, false, false, false},
    {"starcoder", {"\\p{N}", RE_GPT2}, false, true, false},
    {"refact", {"\\p{N}", RE_GPT2}, false, true, false},
    {"codeshell", {"\\p{N}", RE_GPT2}, false, true, false},
    {"exaone", {"\\p{N}", RE_GPT2}, false, true, false},
    {"minerva-7b", {"\\p{N}", RE_GPT2}, false, true, false},
    {"mellum2", {"\\p{N}", RE_GPT2}, false, true, false},
    {"command-r", {"\\p{N}", RE_GPT2}, false, false, false},
    {"smollm", {"\\p{N}", RE_GPT2}, false, false, false},
    {"qwen2", {RE_QWEN2}, false, false, false},
    {"deepseek-r1-qwen", {RE_QWEN2}, false, false, false},
    {"kormo", {RE_QWEN2}, false, false, false},
    {"f2llmv2", {RE_QWEN2}, false, false, false},
    {"hunyuan", {RE_QWEN2}, false, false, false},
    {"solar-open", {RE_QWEN2}, false, false, false},
    {"grok-2", {RE_QWEN2}, false, false, false},
    {"megrez", {RE_QWEN2}, false, true, false},
    {"stablelm2", {RE_QWEN2}, false, true, false},
    {"qwen35", {RE_QWEN35}, false, false, false},
    {"seed-coder", {RE_SEED_CODER}, false, false, false},
    {"bailingmoe", {RE_BAILING}, false, false, false},
    {"bailingmoe2", {RE_BAILING}, false, false, false},
    {"llada-moe", {RE_BAILING}, false, false, false},
    {"bloom", {RE_BLOOM}, false, true, false},
    {"gpt3-finnish", {RE_BLOOM}, false, true, false},
    {"poro-chat", {RE_BLOOM}, false, false, false},
};

const tok_pre_info *tok_pre_lookup(const char *name, size_t len) {
    for (size_t i = 0; i < sizeof k_pre / sizeof k_pre[0]; i++)
        if (strlen(k_pre[i].name) == len && memcmp(k_pre[i].name, name, len) == 0) return &k_pre[i];
    return NULL;
}

/* ---- UTF-8 ---- */

size_t tok_utf8_len(unsigned char lead) {
    static const uint8_t lookup[16] = {1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 1, 2, 2, 3, 4};
    return lookup[lead >> 4];
}

static bool cont(const char *s, size_t i) { return ((unsigned char)s[i] & 0xc0) == 0x80; }

uint32_t tok_utf8_decode(const char *s, size_t len, size_t *off) {
    size_t o = *off;
    const unsigned char c = (unsigned char)s[o];
    if (!(c & 0x80)) {
        *off = o + 1;
        return c;
    }
    if (c & 0x40) {
        if (!(c & 0x20)) {
            if (o + 1 < len && cont(s, o + 1)) {
                *off = o + 2;
                return ((uint32_t)(c & 0x1f) << 6) | (s[o + 1] & 0x3f);
            }
        } else if (!(c & 0x10)) {
            if (o + 2 < len && cont(s, o + 1) && cont(s, o + 2)) {
                *off = o + 3;
                return ((uint32_t)(c & 0x0f) << 12) | ((uint32_t)(s[o + 1] & 0x3f) << 6) |
                       (s[o + 2] & 0x3f);
            }
        } else if (!(c & 0x08)) {
            if (o + 3 < len && cont(s, o + 1) && cont(s, o + 2) && cont(s, o + 3)) {
                *off = o + 4;
                return ((uint32_t)(c & 0x07) << 18) | ((uint32_t)(s[o + 1] & 0x3f) << 12) |
                       ((uint32_t)(s[o + 2] & 0x3f) << 6) | (s[o + 3] & 0x3f);
            }
        }
    }
    *off = o + 1;
    return 0xFFFD;
}

size_t tok_utf8_encode(uint32_t cpt, char *out) {
    if (cpt <= 0x7f) {
        out[0] = (char)cpt;
        return 1;
    }
    if (cpt <= 0x7ff) {
        out[0] = (char)(0xc0 | (cpt >> 6));
        out[1] = (char)(0x80 | (cpt & 0x3f));
        return 2;
    }
    if (cpt > 0x10ffff) cpt = 0xFFFD; /* llama.cpp throws here */
    if (cpt <= 0xffff) {
        out[0] = (char)(0xe0 | (cpt >> 12));
        out[1] = (char)(0x80 | ((cpt >> 6) & 0x3f));
        out[2] = (char)(0x80 | (cpt & 0x3f));
        return 3;
    }
    out[0] = (char)(0xf0 | (cpt >> 18));
    out[1] = (char)(0x80 | ((cpt >> 12) & 0x3f));
    out[2] = (char)(0x80 | ((cpt >> 6) & 0x3f));
    out[3] = (char)(0x80 | (cpt & 0x3f));
    return 4;
}

/* GPT-2: printable bytes map to themselves, the other 68 to U+0100.. in order. */
static uint32_t byte_cpt(uint8_t b) {
    if (b <= 0x20) return 256 + b;
    if (b >= 0x7f && b <= 0xa0) return 256 + 33 + (b - 0x7f);
    if (b == 0xad) return 256 + 33 + 34;
    return b;
}

size_t tok_byte_to_utf8(uint8_t b, char out[2]) { return tok_utf8_encode(byte_cpt(b), out); }

int tok_utf8_to_byte(uint32_t cpt) {
    if (cpt >= 256 && cpt < 256 + 33) return (int)(cpt - 256);
    if (cpt >= 289 && cpt < 289 + 34) return (int)(0x7f + cpt - 289);
    if (cpt == 323) return 0xad;
    if ((cpt >= 0x21 && cpt <= 0x7e) || (cpt >= 0xa1 && cpt <= 0xac) || (cpt >= 0xae && cpt <= 0xff))
        return (int)cpt;
    return -1;
}

/* ---- the splitter ---- */

#define PRETOK_MAX 6

struct pretok {
    int n;
    pcre2_code *code[PRETOK_MAX];
};

void pretok_free(pretok *p) {
    if (!p) return;
    for (int i = 0; i < p->n; i++) pcre2_code_free(p->code[i]);
    free(p);
}

brisk_status pretok_new(const char *const *regexes, int n, pretok **out) {
    *out = NULL;
    if (n < 1 || n > PRETOK_MAX) return bk_fail(BRISK_ERR_INVALID_ARG, "pretok: %d regexes", n);
    pretok *p = calloc(1, sizeof *p);
    if (!p) return bk_fail(BRISK_ERR_NOMEM, "pretok: out of memory");
    for (int i = 0; i < n; i++) {
        int err;
        PCRE2_SIZE erroff;
        p->code[i] = pcre2_compile((PCRE2_SPTR)regexes[i], PCRE2_ZERO_TERMINATED,
                                   PCRE2_UTF | PCRE2_UCP, &err, &erroff, NULL);
        if (!p->code[i]) {
            PCRE2_UCHAR msg[256];
            pcre2_get_error_message(err, msg, sizeof msg);
            pretok_free(p);
            return bk_fail(BRISK_ERR_UNSUPPORTED, "pretok: regex '%s' at %zu: %s", regexes[i],
                           (size_t)erroff, (const char *)msg);
        }
        p->n = i + 1;
        pcre2_jit_compile(p->code[i], PCRE2_JIT_COMPLETE); /* falls back to the interpreter */
    }
    *out = p;
    return BRISK_OK;
}

typedef struct split_buf {
    uint32_t *cpt;  /* (n) code points */
    size_t *cb;     /* (n + 1) offsets into canon */
    size_t *sb;     /* (n + 1) offsets into shadow */
    int64_t *sidx;  /* (shadow_len + 1) code point index at each char start */
    char *canon;    /* llama.cpp's re-encoding of the text */
    char *shadow;   /* what PCRE2 sees */
    int64_t *seg, *seg2; /* (n + 1) each: segment ends, as code point indices */
    char *word;     /* scratch for one byte-encoded word */
} split_buf;

static void split_buf_free(split_buf *b) {
    free(b->cpt), free(b->cb), free(b->sb), free(b->sidx);
    free(b->canon), free(b->shadow), free(b->seg), free(b->seg2), free(b->word);
}

/* One regex over one segment [c0, c1) of code points: appends segment ends. */
static brisk_status split_one(const pcre2_code *code, pcre2_match_data *md, const split_buf *b,
                              int64_t c0, int64_t c1, int64_t *ends, int64_t *n_ends) {
    const char *subj = b->shadow + b->sb[c0];
    size_t slen = b->sb[c1] - b->sb[c0], start = 0, prev = 0;
    const int64_t *sidx = b->sidx + b->sb[c0];
    uint32_t opts = PCRE2_NO_UTF_CHECK;
    while (start < slen) {
        int rc = pcre2_match(code, (PCRE2_SPTR)subj, slen, start, opts, md, NULL);
        if (rc == PCRE2_ERROR_JIT_STACKLIMIT && !(opts & PCRE2_NO_JIT)) {
            opts |= PCRE2_NO_JIT;
            continue;
        }
        if (rc == PCRE2_ERROR_NOMATCH) break;
        if (rc < 0) return bk_fail(BRISK_ERR_UNSUPPORTED, "pretok: regex match failed (%d)", rc);
        PCRE2_SIZE *ov = pcre2_get_ovector_pointer(md);
        if (ov[1] <= ov[0]) { /* empty match: step over one character */
            start = ov[0] + 1;
            while (start < slen && ((unsigned char)subj[start] & 0xc0) == 0x80) start++;
            continue;
        }
        if (ov[0] > prev) ends[(*n_ends)++] = c0 + sidx[ov[0]];
        ends[(*n_ends)++] = c0 + sidx[ov[1]];
        prev = start = ov[1];
    }
    if (prev < slen) ends[(*n_ends)++] = c1;
    return BRISK_OK;
}

static brisk_status split_prepare(split_buf *b, const char *text, size_t len, int64_t *n_out) {
    b->cpt = malloc((len + 1) * sizeof *b->cpt);
    b->cb = malloc((len + 1) * sizeof *b->cb);
    b->sb = malloc((len + 1) * sizeof *b->sb);
    b->canon = malloc(len * 3 + 4);
    b->shadow = malloc(len * 3 + 4);
    b->sidx = malloc((len * 3 + 4) * sizeof *b->sidx);
    b->seg = malloc((len + 1) * sizeof *b->seg);
    b->seg2 = malloc((len + 1) * sizeof *b->seg2);
    if (!b->cpt || !b->cb || !b->sb || !b->canon || !b->shadow || !b->sidx || !b->seg || !b->seg2)
        return bk_fail(BRISK_ERR_NOMEM, "pretok: out of memory");
    int64_t n = 0;
    size_t off = 0, cl = 0, sl = 0;
    while (off < len) {
        uint32_t c = tok_utf8_decode(text, len, &off);
        b->cpt[n] = c;
        b->cb[n] = cl;
        b->sb[n] = sl;
        cl += tok_utf8_encode(c, b->canon + cl);
        uint32_t sc = c;
        if (c == 0x85) sc = 0x2029;
        else if ((c >= 0xd800 && c <= 0xdfff) || c > 0x10ffff) sc = 0xe000;
        size_t k = tok_utf8_encode(sc, b->shadow + sl);
        for (size_t j = 0; j < k; j++) b->sidx[sl + j] = n;
        sl += k;
        n++;
    }
    b->cb[n] = cl;
    b->sb[n] = sl;
    b->sidx[sl] = n;
    *n_out = n;
    return BRISK_OK;
}

brisk_status pretok_split(const pretok *p, const char *text, size_t len, bool byte_encode,
                          pretok_word_fn fn, void *ctx) {
    if (len == 0) return BRISK_OK;
    split_buf b = {0};
    pcre2_match_data *md = NULL;
    int64_t n = 0;
    brisk_status s = split_prepare(&b, text, len, &n);
    if (s != BRISK_OK) goto done;
    md = pcre2_match_data_create(1, NULL);
    b.word = malloc(b.cb[n] * 2 + 1);
    if (!md || !b.word) {
        s = bk_fail(BRISK_ERR_NOMEM, "pretok: out of memory");
        goto done;
    }
    int64_t n_seg = 1;
    b.seg[0] = n;
    for (int r = 0; r < p->n; r++) {
        int64_t n2 = 0, c0 = 0;
        for (int64_t i = 0; i < n_seg; i++) {
            s = split_one(p->code[r], md, &b, c0, b.seg[i], b.seg2, &n2);
            if (s != BRISK_OK) goto done;
            c0 = b.seg[i];
        }
        int64_t *tmp = b.seg;
        b.seg = b.seg2, b.seg2 = tmp;
        n_seg = n2;
    }
    int64_t c0 = 0;
    for (int64_t i = 0; i < n_seg; i++) {
        const char *w = b.canon + b.cb[c0];
        size_t wl = b.cb[b.seg[i]] - b.cb[c0];
        c0 = b.seg[i];
        if (byte_encode) {
            size_t o = 0;
            for (size_t j = 0; j < wl; j++) o += tok_byte_to_utf8((uint8_t)w[j], b.word + o);
            w = b.word, wl = o;
        }
        s = fn(ctx, w, wl);
        if (s != BRISK_OK) goto done;
    }
done:
    pcre2_match_data_free(md);
    split_buf_free(&b);
    return s;
}
