/* convert_vocab.c — the tokenizer.* keys of a converted model, as llama.cpp's
 * converter writes them for byte-level BPE (tokenizer.ggml.model "gpt2"):
 * the vocabulary padded to config.json's vocab_size with "[PADn]" (unused),
 * added tokens typed control (special, or looking special) or user-defined,
 * the merges, the special token ids (tokenizer_config.json's *_token looked
 * up among the added tokens, then config.json's *_token_id), add_bos/add_eos
 * (tokenizer.json's TemplateProcessing, then tokenizer_config.json) and the
 * chat template (tokenizer_config.json, else chat_template.jinja, else
 * chat_template.json).
 *
 * tokenizer.ggml.pre is found as llama.cpp finds it: the check string below
 * is tokenized (here with brisk's own tokenizer built from the same files)
 * and the SHA-256 of Python's str() of the id list is looked up in a table
 * of known tokenizers (the subset of llama.cpp's whose pre-tokenizer brisk
 * implements).
 * Not done: llama.cpp re-encodes added tokens marked normalized=false
 * through the HF tokenizer; for byte-level BPE vocabularies that is the
 * identity on the special tokens seen in practice.
 */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "model/convert.h"
#include "tokenizer/tokenizer.h"

/* ---- SHA-256 (FIPS 180-4) ---- */

typedef struct {
    uint32_t h[8];
    unsigned char buf[64];
    uint64_t len;
} sha256_ctx;

static const uint32_t K256[64] = {
    0x428a2f98, 0x71374491, 0xb5c0fbcf, 0xe9b5dba5, 0x3956c25b, 0x59f111f1, 0x923f82a4, 0xab1c5ed5, 0xd807aa98,
    0x12835b01, 0x243185be, 0x550c7dc3, 0x72be5d74, 0x80deb1fe, 0x9bdc06a7, 0xc19bf174, 0xe49b69c1, 0xefbe4786,
    0x0fc19dc6, 0x240ca1cc, 0x2de92c6f, 0x4a7484aa, 0x5cb0a9dc, 0x76f988da, 0x983e5152, 0xa831c66d, 0xb00327c8,
    0xbf597fc7, 0xc6e00bf3, 0xd5a79147, 0x06ca6351, 0x14292967, 0x27b70a85, 0x2e1b2138, 0x4d2c6dfc, 0x53380d13,
    0x650a7354, 0x766a0abb, 0x81c2c92e, 0x92722c85, 0xa2bfe8a1, 0xa81a664b, 0xc24b8b70, 0xc76c51a3, 0xd192e819,
    0xd6990624, 0xf40e3585, 0x106aa070, 0x19a4c116, 0x1e376c08, 0x2748774c, 0x34b0bcb5, 0x391c0cb3, 0x4ed8aa4a,
    0x5b9cca4f, 0x682e6ff3, 0x748f82ee, 0x78a5636f, 0x84c87814, 0x8cc70208, 0x90befffa, 0xa4506ceb, 0xbef9a3f7,
    0xc67178f2};

#define ROR(x, n) ((x) >> (n) | (x) << (32 - (n)))

static void sha256_block(sha256_ctx *c, const unsigned char *p) {
    uint32_t w[64], v[8];
    for (int i = 0; i < 16; i++) w[i] = (uint32_t)p[4 * i] << 24 | (uint32_t)p[4 * i + 1] << 16 | (uint32_t)p[4 * i + 2] << 8 | p[4 * i + 3];
    for (int i = 16; i < 64; i++) {
        uint32_t s0 = ROR(w[i - 15], 7) ^ ROR(w[i - 15], 18) ^ (w[i - 15] >> 3);
        uint32_t s1 = ROR(w[i - 2], 17) ^ ROR(w[i - 2], 19) ^ (w[i - 2] >> 10);
        w[i] = w[i - 16] + s0 + w[i - 7] + s1;
    }
    memcpy(v, c->h, sizeof v);
    for (int i = 0; i < 64; i++) {
        uint32_t t1 = v[7] + (ROR(v[4], 6) ^ ROR(v[4], 11) ^ ROR(v[4], 25)) + ((v[4] & v[5]) ^ (~v[4] & v[6])) + K256[i] + w[i];
        uint32_t t2 = (ROR(v[0], 2) ^ ROR(v[0], 13) ^ ROR(v[0], 22)) + ((v[0] & v[1]) ^ (v[0] & v[2]) ^ (v[1] & v[2]));
        memmove(v + 1, v, 7 * sizeof v[0]);
        v[4] += t1;
        v[0] = t1 + t2;
    }
    for (int i = 0; i < 8; i++) c->h[i] += v[i];
}

static void sha256_init(sha256_ctx *c) {
    static const uint32_t h0[8] = {0x6a09e667, 0xbb67ae85, 0x3c6ef372, 0xa54ff53a,
                                   0x510e527f, 0x9b05688c, 0x1f83d9ab, 0x5be0cd19};
    memcpy(c->h, h0, sizeof h0);
    c->len = 0;
}

static void sha256_update(sha256_ctx *c, const void *data, size_t n) {
    const unsigned char *p = data;
    for (size_t i = 0; i < n; i++) {
        c->buf[c->len++ % 64] = p[i];
        if (c->len % 64 == 0) sha256_block(c, c->buf);
    }
}

static void sha256_hex(sha256_ctx *c, char hex[65]) {
    uint64_t bits = c->len * 8;
    unsigned char pad = 0x80, z = 0;
    sha256_update(c, &pad, 1);
    while (c->len % 64 != 56) sha256_update(c, &z, 1);
    for (int i = 7; i >= 0; i--) {
        unsigned char b = (unsigned char)(bits >> (8 * i));
        sha256_update(c, &b, 1);
    }
    for (int i = 0; i < 8; i++) snprintf(hex + 8 * i, 9, "%08x", c->h[i]);
}

/* ---- pre-tokenizer detection ---- */

/* llama.cpp's check string (convert_hf_to_gguf.py, get_vocab_base_pre), UTF-8. */
static const char CHKTXT[] =
    "\n \n\n \n\n\n \t \t\t \t\n  \n   \n    \n     \n\360\237\232\200 (normal) \360\237\230\266\342\200\215\360\237\214\253\357\270\217 "
    "(multiple emojis concatenated) \342\234\205 \360\237\246\231\360\237\246\231 3 33 333 3333 "
    "33333 333333 3333333 33333333 3.3 3..3 3...3 \341\236\200\341\236\266\341\236\223\341\237\213\341\236\217\341\237\202\341\236\226\341\236\267\341\236\237\341\237\201\341\236\237\341\236\242\341\236\266\341\236\205\360\237\230\201 "
    "?\346\210\221\346\203\263\345\234\250apple\345\267\245\344\275\2341314151\345\244\251\357\275\236 "
    "------======= \320\275\320\265\321\211\320\276 \320\275\320\260 \320\221\321\212\320\273\320\263\320\260\321\200\321\201\320\272\320\270 "
    "''''''```````\"\"\"\"......!!!!!!?????? I've been 'told he's there, 'RE you sure? 'M not sure "
    "I'll make it, 'D you like some tea? We'Ve a'lL"
;

static const struct { const char *hash, *pre; } known_pre[] = {
    {"1431a23e583c97432bc230bff598d103ddb5a1f89960c8f1d1051aaa944d0b35", "minerva-7b"},
    {"7e57df22b1fe23a7b1e1c7f3dc4e3f96d43a4eb0836d0c6bdc3436d7b2f1c664", "hunyuan"},
    {"a6b57017d60e6edb4d88ecc2845188e0eb333a70357e45dcc9b53964a73bbae6", "falcon-h1"},
    {"60476e1243776c4fb1b993dbd7a5f15ac22f83c80afdf425fa5ae01c8d44ef86", "falcon-h1"},
    {"3eda48b4c4dc7de733d1a8b3e3b4a85243dbbf704da2ee9d42c6beced8897896", "falcon-h1"},
    {"48f8e02c0359c0bbdd82f26909171fac1c18a457bb47573ed1fe3bbb2c1cfd4b", "falcon-h1"},
    {"d4540891389ea895b53b399da6ac824becc30f2fba0e9ddbb98f92e55ca0e97c", "qwen2"},
    {"1444df51289cfa8063b96f0e62b1125440111bc79a52003ea14b6eac7016fd5f", "qwen35"},
    {"66b8d4e19ab16c3bfd89bce5d785fb7e0155e8648708a1f42077cb9fe002c273", "grok-2"},
    {"b3d1dd861f1d4c5c0d2569ce36baf3f90fe8a102db3de50dd71ff860d91be3df", "jina-v2-de"},
    {"0fe1cf6eda062318a1af7270f3331a85c539a01778ff948e24388e949c5282f4", "gpt-2"},
    {"9e454714343b69b99b71795c1d27a68c2a1d15dab111f4d353109f966af29da7", "lfm2"},
    {"0ef9807a4087ebef797fc749390439009c3b9eda9ad1a097abbe738f486c01e5", "llama-bpe"},
    {"8aeee3860c56296a157a1fe2fad249ec40aa59b1bb5709f4ade11c4e6fe652ed", "falcon"},
    {"9d032fcbd5501f4a38150912590928bfb36091efb5df11b8e2124b0390e3fb1e", "falcon3"},
    {"b6dc8df998e1cfbdc4eac8243701a65afe638679230920b50d6f17d81c098166", "mpt"},
    {"35d91631860c815f952d711435f48d356ebac988362536bed955d43bfa436e34", "starcoder"},
    {"3ce83efda5659b07b1ad37ca97ca5797ea4285d9b9ab0dc679e4a720c9da7454", "gpt-2"},
    {"32d85c31273f8019248f2559fed492d929ea28b17e51d81d3bb36fff23ca72b3", "stablelm2"},
    {"6221ad2852e85ce96f791f476e0b390cf9b474c9e3d1362f53a24a06dc8220ff", "refact"},
    {"9c2227e4dd922002fb81bde4fc02b0483ca4f12911410dee2255e4987644e3f8", "command-r"},
    {"e636dc30a262dcc0d8c323492e32ae2b70728f4df7dfe9737d9f920a282b8aea", "qwen2"},
    {"b6dc8df998e1cfbdc4eac8243701a65afe638679230920b50d6f17d81c098166", "olmo"},
    {"a8594e3edff7c29c003940395316294b2c623e09894deebbc65f33f1515df79e", "dbrx"},
    {"171aeeedd6fb548d418a7461d053f11b6f1f1fc9b387bd66640d28a4b9f5c643", "jina-v2-es"},
    {"27949a2493fc4a9f53f5b9b029c82689cfbe5d3a1929bb25e043089e28466de6", "jina-v2-de"},
    {"a023e9fdc5a11f034d3ef515b92350e56fb2af1f66c6b6811a4444ea9bf8763d", "jina-v5-nano"},
    {"c136ed14d01c2745d4f60a9596ae66800e2b61fa45643e72436041855ad4089d", "smaug-bpe"},
    {"c7ea5862a53e4272c035c8238367063e2b270d51faa48c0f09e9d5b54746c360", "poro-chat"},
    {"b53802fb28e26d645c3a310b34bfe07da813026ec7c7716883404d5e0f8b1901", "jais"},
    {"7b3e7548e4308f52a76e8229e4e6cc831195d0d1df43aed21ac6c93da05fec5f", "codeshell"},
    {"855059429035d75a914d1eda9f10a876752e281a054a7a3d421ef0533e5b6249", "smollm"},
    {"3c30d3ad1d6b64202cd222813e7736c2db6e1bd6d67197090fc1211fbc612ae7", "bloom"},
    {"bc01ce58980e1db43859146dc51b1758b3b88729b217a74792e9f8d43e479d21", "gpt3-finnish"},
    {"4e2b24cc4770243d65a2c9ec19770a72f08cffc161adbb73fcbb6b7dd45a0aae", "exaone"},
    {"fcace8b9cac38ce847670c970cd5892031a753a1ef381abd1d9af00f713da085", "phi-2"},
    {"ad851be1dba641f2e3711822f816db2c265f788b37c63b4e1aeacb9ee92de8eb", "gigachat"},
    {"d4c8f286ea6b520b3d495c4455483cfa2302c0cfcd4be05d781b6a8a0a7cdaf1", "megrez"},
    {"b3f499bb4255f8ca19fccd664443283318f2fd2414d5e0b040fbdd0cc195d6c5", "deepseek-r1-qwen"},
    {"1994ffd01900cfb37395608534236ecd63f2bd5995d6cb1004dda1af50240f15", "trillion"},
    {"96a5f08be6259352137b512d4157e333e21df7edd3fcd152990608735a65b224", "bailingmoe"},
    {"0e9433cbbb161f89e264eb32e8e64bfe69e834973ffca5d41d3948a604a3e2a3", "pixtral"},
    {"d5f1dd6f980fec569fb218a81a7658ac45fc56b38c5a0adeb1c232fbe04ef5ec", "seed-coder"},
    {"b0a6b1c0bd5998ebd9df08611efde34a4ff03faed45ae09c43e6b31ebd4b94cf", "a.x-4.0"},
    {"f6791d196f87ce6b56a7d234be618e0d58f8cda3549416635b2bebcd22cd95c4", "midm-2.0"},
    {"169bf0296a13c4d9b7672313f749eb36501d931022de052aad6e36f2bf34dd51", "lfm2"},
    {"2085e1638f6c377a0aa4ead21b27bb4cb941bf800df86ed391011769c1758dfb", "exaone4"},
    {"a1e163ecab2e718a4c829d1148b6e86824ec36163bb71941c3dca9cd5ac25756", "mellum"},
    {"a0b64b4385f123663873756336c085744376d015ff328bb1d901598f63c44152", "modern-bert"},
    {"9b1be57e70d20d9501b2b3186e792d81181ae36ada3903c26f9fea418cf87206", "bailingmoe2"},
    {"53e325976a6e142379c19b09afcae354f2f496f147afa8f9e189a33fe4e3024e", "granite-docling"},
    {"4a2e2abae11ca2b86d570fc5b44be4d5eb5e72cc8f22dd136a94b37da83ab665", "kormo"},
    {"16389f0a1f51ee53e562ffd51c371dc508639ab0e4261502071836e50e223e91", "solar-open"},
    {"d30d75d9059f1aa2c19359de71047b3ae408c70875e8a3ccf8c5fba56c9d8af4", "qwen35"},
    {"862f827721df956049dff5ca81a57f29e575280bc622e290d3bf4e35eca29015", "f2llmv2"},
    {"9dcf830ee9990cdbf78cc523a5f7bd9ad8f3f9890c2d3581d2785ad10f07049d", "mellum2"},
};

const char *convert_pre_from_hash(const char *hex) {
    for (size_t i = 0; i < sizeof known_pre / sizeof known_pre[0]; i++)
        if (!strcmp(known_pre[i].hash, hex)) return known_pre[i].pre;
    return NULL;
}

/* SHA-256 of "[a, b, c]" for ids, optionally with `first` in front. */
static void hash_ids(const int32_t *ids, int64_t n, int32_t first, char hex[65]) {
    sha256_ctx c;
    char num[24];
    sha256_init(&c);
    sha256_update(&c, "[", 1);
    bool sep = false;
    if (first >= 0) {
        sha256_update(&c, num, (size_t)snprintf(num, sizeof num, "%d", (int)first));
        sep = true;
    }
    for (int64_t i = 0; i < n; i++) {
        if (sep) sha256_update(&c, ", ", 2);
        sha256_update(&c, num, (size_t)snprintf(num, sizeof num, "%d", (int)ids[i]));
        sep = true;
    }
    sha256_update(&c, "]", 1);
    sha256_hex(&c, hex);
}

static brisk_status detect_pre(const char *tok_json, const char *tok_cfg, const char **pre) {
    tokenizer *t = NULL;
    BK_TRY(tokenizer_from_hf_json(tok_json, tok_cfg, &t));
    int32_t ids[2048];
    int64_t n = 0;
    brisk_status s = tokenizer_encode(t, CHKTXT, sizeof CHKTXT - 1, false, false, ids, 2048, &n);
    char hex[65] = "";
    *pre = NULL;
    if (s == BRISK_OK) {
        hash_ids(ids, n, -1, hex);
        *pre = convert_pre_from_hash(hex);
        if (!*pre && tokenizer_bos(t) >= 0) { /* tokenizers whose encode() adds BOS (Llama 3) */
            char hex2[65];
            hash_ids(ids, n, tokenizer_bos(t), hex2);
            *pre = convert_pre_from_hash(hex2);
        }
        if (!*pre && tokenizer_pre_family(t)) {
            /* a vocabulary trained with a known family's pre-tokenizer (brisk's own
             * models are): llama.cpp's table cannot know its hash, its regexes tell */
            *pre = tokenizer_pre_family(t);
            fprintf(stderr, "convert: pre-tokenizer %s, recognized by its regexes (check-string hash %s is new)\n",
                    *pre, hex);
        }
        if (!*pre)
            s = bk_fail(BRISK_ERR_UNSUPPORTED,
                        "convert: the BPE pre-tokenizer was not recognized (check-string hash %s); "
                        "pass --pre NAME (e.g. qwen2, llama-bpe, qwen35) if you know it", hex);
    }
    tokenizer_free(t);
    return s;
}

/* ---- files ---- */

static brisk_status read_json(const char *path, bool optional, cJSON **out) {
    *out = NULL;
    FILE *f = fopen(path, "rb");
    if (!f) return optional ? BRISK_OK : bk_fail(BRISK_ERR_IO, "cannot open %s", path);
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n == cap) {
            char *b = realloc(buf, cap = cap ? 2 * cap : 1 << 20);
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
    fclose(f);
    *out = cJSON_ParseWithLength(buf, n);
    free(buf);
    return *out ? BRISK_OK : bk_fail(BRISK_ERR_FORMAT, "%s: invalid JSON", path);
}

static char *read_text(const char *path) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    char *buf = NULL;
    size_t n = 0, cap = 0;
    for (;;) {
        if (n + 1 >= cap) {
            char *b = realloc(buf, cap = cap ? 2 * cap : 65536);
            if (!b) break;
            buf = b;
        }
        size_t r = fread(buf + n, 1, cap - n - 1, f);
        n += r;
        if (r == 0) break;
    }
    fclose(f);
    if (buf) buf[n] = 0;
    return buf;
}

/* convert_hf_to_gguf.py's does_token_look_special */
static bool looks_special(const char *s) {
    size_t n = strlen(s);
    if (!strcmp(s, "<pad>") || !strcmp(s, "<mask>") || !strcmp(s, "<2mass>") || !strcmp(s, "[@BOS@]")) return true;
    if (n >= 4 && !strncmp(s, "<|", 2) && !strcmp(s + n - 2, "|>")) return true;
    if (n >= 8 && !strncmp(s, "<\xef\xbd\x9c", 4) && !strcmp(s + n - 4, "\xef\xbd\x9c>")) return true;
    return n >= 8 && !strncmp(s, "<unused", 7) && s[n - 1] == '>';
}

static const char *content_of(const cJSON *v) {
    if (cJSON_IsString(v)) return v->valuestring;
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(v, "content");
    return cJSON_IsString(c) ? c->valuestring : NULL;
}

/* "a b" for a merge given as a string or as a pair (spaces inside a part become U+0120). */
static char *merge_text(const cJSON *m) {
    if (cJSON_IsString(m)) return strdup(m->valuestring);
    if (!cJSON_IsArray(m) || cJSON_GetArraySize(m) != 2 || !cJSON_IsString(cJSON_GetArrayItem(m, 0)) ||
        !cJSON_IsString(cJSON_GetArrayItem(m, 1)))
        return NULL;
    const char *a = cJSON_GetArrayItem(m, 0)->valuestring, *b = cJSON_GetArrayItem(m, 1)->valuestring;
    char *out = malloc(2 * (strlen(a) + strlen(b)) + 2), *o = out;
    if (!out) return NULL;
    for (const char *p = a; *p; p++) o = *p == ' ' ? memcpy(o, "\xc4\xa0", 2), o + 2 : (*o = *p, o + 1);
    *o++ = ' ';
    for (const char *p = b; *p; p++) o = *p == ' ' ? memcpy(o, "\xc4\xa0", 2), o + 2 : (*o = *p, o + 1);
    *o = 0;
    return out;
}

typedef struct {
    const char **text; /* (n_vocab) into the JSON or pad */
    int32_t *type;     /* (n_vocab) */
    char (*pad)[24];   /* (n_vocab) "[PADn]" storage */
    char **owned;      /* (n_vocab) user-defined texts rewritten */
} vocab_tables;

static brisk_status token_tables(const cJSON *tj, const hf_config *c, vocab_tables *v) {
    const cJSON *model = cJSON_GetObjectItemCaseSensitive(tj, "model");
    const cJSON *mt = cJSON_GetObjectItemCaseSensitive(model, "type");
    const cJSON *vocab = cJSON_GetObjectItemCaseSensitive(model, "vocab");
    if (mt && (!cJSON_IsString(mt) || strcmp(mt->valuestring, "BPE")))
        return bk_fail(BRISK_ERR_UNSUPPORTED, "convert: tokenizer.json model '%s' (byte-level BPE is supported)",
                       cJSON_IsString(mt) ? mt->valuestring : "?");
    if (!cJSON_IsObject(vocab)) return bk_fail(BRISK_ERR_FORMAT, "convert: tokenizer.json has no model.vocab");
    const int64_t n = c->n_vocab;
    if (!(v->text = calloc((size_t)n, sizeof *v->text)) || !(v->type = calloc((size_t)n, sizeof *v->type)) ||
        !(v->pad = calloc((size_t)n, sizeof *v->pad)) || !(v->owned = calloc((size_t)n, sizeof *v->owned)))
        return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    const cJSON *it;
    cJSON_ArrayForEach(it, vocab) {
        if (!cJSON_IsNumber(it) || it->valuedouble < 0 || it->valuedouble >= (double)n)
            return bk_fail(BRISK_ERR_FORMAT, "convert: token '%s' has id outside config.json's vocab_size %lld",
                           it->string, (long long)n);
        v->text[it->valueint] = it->string;
        v->type[it->valueint] = TOKEN_TYPE_NORMAL;
    }
    cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(tj, "added_tokens")) {
        const cJSON *id = cJSON_GetObjectItemCaseSensitive(it, "id");
        const char *txt = content_of(it);
        if (!cJSON_IsNumber(id) || id->valuedouble < 0 || id->valuedouble >= (double)n || !txt)
            return bk_fail(BRISK_ERR_FORMAT, "convert: an added token has no content or an id outside vocab_size");
        int32_t i = id->valueint;
        v->text[i] = txt;
        if (cJSON_IsTrue(cJSON_GetObjectItemCaseSensitive(it, "special")) || looks_special(txt)) {
            v->type[i] = TOKEN_TYPE_CONTROL;
        } else { /* user-defined: "▁" pre-normalized to a space */
            v->type[i] = TOKEN_TYPE_USER_DEFINED;
            if (strstr(txt, "\xe2\x96\x81")) {
                char *o = malloc(strlen(txt) + 1), *q = o;
                if (!o) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
                for (const char *p = txt; *p;) {
                    if (!strncmp(p, "\xe2\x96\x81", 3)) *q++ = ' ', p += 3;
                    else *q++ = *p++;
                }
                *q = 0;
                v->owned[i] = o;
                v->text[i] = o;
            }
        }
    }
    for (int64_t i = 0; i < n; i++)
        if (!v->text[i]) {
            snprintf(v->pad[i], sizeof v->pad[i], "[PAD%lld]", (long long)i);
            v->text[i] = v->pad[i];
            v->type[i] = TOKEN_TYPE_UNUSED;
        }
    return BRISK_OK;
}

static void free_tables(vocab_tables *v, int64_t n) {
    for (int64_t i = 0; v->owned && i < n; i++) free(v->owned[i]);
    free(v->owned);
    free(v->text);
    free(v->type);
    free(v->pad);
}

static brisk_status write_merges(gguf_writer *w, const cJSON *tj) {
    const cJSON *merges = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(tj, "model"), "merges");
    int n = cJSON_IsArray(merges) ? cJSON_GetArraySize(merges) : 0;
    if (n == 0) return BRISK_OK;
    char **m = calloc((size_t)n, sizeof *m);
    size_t *lens = calloc((size_t)n, sizeof *lens);
    brisk_status s = m && lens ? BRISK_OK : bk_fail(BRISK_ERR_NOMEM, "out of memory");
    int k = 0;
    const cJSON *it;
    if (s == BRISK_OK) cJSON_ArrayForEach(it, merges) {
        if (!(m[k] = merge_text(it))) {
            s = bk_fail(BRISK_ERR_FORMAT, "convert: tokenizer.json merge #%d is malformed", k);
            break;
        }
        lens[k] = strlen(m[k]);
        k++;
    }
    if (s == BRISK_OK) s = gguf_writer_set_arr_str(w, "tokenizer.ggml.merges", (const char *const *)m, lens, (uint64_t)n);
    for (int i = 0; i < k; i++) free(m[i]);
    free(m);
    free(lens);
    return s;
}

/* add_bos/add_eos implied by a TemplateProcessing post-processor. */
static void template_adds(const cJSON *tj, const char *bos, const char *eos, int add[2]) {
    const cJSON *pp = cJSON_GetObjectItemCaseSensitive(tj, "post_processor");
    if (!cJSON_IsObject(pp)) return;
    const cJSON *list = cJSON_GetObjectItemCaseSensitive(pp, "processors");
    const cJSON *one = pp, *it;
    for (int i = 0; cJSON_IsArray(list) ? (one = cJSON_GetArrayItem(list, i)) != NULL : i == 0; i++) {
        const cJSON *ty = cJSON_GetObjectItemCaseSensitive(one, "type");
        const cJSON *single = cJSON_GetObjectItemCaseSensitive(one, "single");
        if (!cJSON_IsString(ty) || strcmp(ty->valuestring, "TemplateProcessing") || cJSON_GetArraySize(single) < 2)
            continue;
        it = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(single, 0), "SpecialToken"), "id");
        if (cJSON_IsString(it)) add[0] = bos && !strcmp(it->valuestring, bos);
        int last = cJSON_GetArraySize(single) - 1;
        it = cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(cJSON_GetArrayItem(single, last), "SpecialToken"), "id");
        if (cJSON_IsString(it)) add[1] = eos && !strcmp(it->valuestring, eos);
    }
}

static brisk_status write_specials(gguf_writer *w, const cJSON *tj, const cJSON *cfg, const hf_config *c) {
    static const char *kinds[HF_TOK_COUNT] = {"bos", "eos", "unk", "sep", "pad", "cls", "mask"};
    static const char *keys[HF_TOK_COUNT] = {
        "tokenizer.ggml.bos_token_id", "tokenizer.ggml.eos_token_id", "tokenizer.ggml.unknown_token_id",
        "tokenizer.ggml.seperator_token_id", "tokenizer.ggml.padding_token_id", "tokenizer.ggml.cls_token_id",
        "tokenizer.ggml.mask_token_id"};
    char key[32];
    int64_t id[HF_TOK_COUNT];
    for (int k = 0; k < HF_TOK_COUNT; k++) {
        id[k] = -1;
        snprintf(key, sizeof key, "%s_token", kinds[k]);
        const char *content = cfg ? content_of(cJSON_GetObjectItemCaseSensitive(cfg, key)) : NULL;
        const cJSON *it;
        if (content) cJSON_ArrayForEach(it, cJSON_GetObjectItemCaseSensitive(tj, "added_tokens")) {
            const char *t = content_of(it);
            const cJSON *tid = cJSON_GetObjectItemCaseSensitive(it, "id");
            if (t && !strcmp(t, content) && cJSON_IsNumber(tid)) {
                id[k] = tid->valueint;
                break;
            }
        }
        if (id[k] < 0) id[k] = c->token_id[k];
        if (id[k] >= 0) BK_TRY(gguf_writer_set_u32(w, keys[k], (uint32_t)id[k]));
    }
    int add[2] = {-1, -1};
    if (cfg) {
        template_adds(tj, content_of(cJSON_GetObjectItemCaseSensitive(cfg, "bos_token")),
                      content_of(cJSON_GetObjectItemCaseSensitive(cfg, "eos_token")), add);
        const cJSON *ab = cJSON_GetObjectItemCaseSensitive(cfg, "add_bos_token");
        const cJSON *ae = cJSON_GetObjectItemCaseSensitive(cfg, "add_eos_token");
        if (cJSON_IsBool(ab)) add[0] = cJSON_IsTrue(ab);
        if (cJSON_IsBool(ae)) add[1] = cJSON_IsTrue(ae);
    }
    if (add[0] >= 0) BK_TRY(gguf_writer_set_bool(w, "tokenizer.ggml.add_bos_token", add[0]));
    if (add[1] >= 0) BK_TRY(gguf_writer_set_bool(w, "tokenizer.ggml.add_eos_token", add[1]));
    return BRISK_OK;
}

static brisk_status write_template(gguf_writer *w, const char *dir, const cJSON *cfg) {
    const cJSON *ct = cfg ? cJSON_GetObjectItemCaseSensitive(cfg, "chat_template") : NULL;
    if (cJSON_IsString(ct)) return gguf_writer_set_str(w, "tokenizer.chat_template", ct->valuestring);
    if (cJSON_IsArray(ct)) { /* [{name, template}, ...]: "default" is the main one */
        const cJSON *it;
        cJSON_ArrayForEach(it, ct) {
            const cJSON *nm = cJSON_GetObjectItemCaseSensitive(it, "name");
            const cJSON *tp = cJSON_GetObjectItemCaseSensitive(it, "template");
            if (!cJSON_IsString(nm) || !cJSON_IsString(tp)) continue;
            char key[160];
            if (!strcmp(nm->valuestring, "default")) snprintf(key, sizeof key, "tokenizer.chat_template");
            else snprintf(key, sizeof key, "tokenizer.chat_template.%.120s", nm->valuestring);
            BK_TRY(gguf_writer_set_str(w, key, tp->valuestring));
        }
        return BRISK_OK;
    }
    if (!cfg) return BRISK_OK; /* llama.cpp reads the alternatives only along with a tokenizer_config.json */
    char path[4096];
    snprintf(path, sizeof path, "%s/chat_template.jinja", dir);
    char *txt = read_text(path);
    if (txt) {
        brisk_status s = gguf_writer_set_str(w, "tokenizer.chat_template", txt);
        free(txt);
        return s;
    }
    snprintf(path, sizeof path, "%s/chat_template.json", dir);
    cJSON *j = NULL;
    BK_TRY(read_json(path, true, &j));
    const cJSON *t = j ? cJSON_GetObjectItemCaseSensitive(j, "chat_template") : NULL;
    brisk_status s = cJSON_IsString(t) ? gguf_writer_set_str(w, "tokenizer.chat_template", t->valuestring) : BRISK_OK;
    cJSON_Delete(j);
    return s;
}

brisk_status convert_write_vocab(gguf_writer *w, const char *dir, const hf_config *c, const char *pre,
                                 char *pre_out, size_t pre_cap) {
    char tj_path[4096], cfg_path[4096];
    snprintf(tj_path, sizeof tj_path, "%s/tokenizer.json", dir);
    snprintf(cfg_path, sizeof cfg_path, "%s/tokenizer_config.json", dir);
    cJSON *tj = NULL, *cfg = NULL;
    vocab_tables v = {0};
    brisk_status s = read_json(tj_path, false, &tj);
    if (s == BRISK_OK) s = read_json(cfg_path, true, &cfg);
    if (s == BRISK_OK && !pre) s = detect_pre(tj_path, cfg ? cfg_path : NULL, &pre);
    if (s == BRISK_OK) s = token_tables(tj, c, &v);
    if (s == BRISK_OK) s = gguf_writer_set_str(w, "tokenizer.ggml.model", "gpt2");
    if (s == BRISK_OK) s = gguf_writer_set_str(w, "tokenizer.ggml.pre", pre);
    if (s == BRISK_OK) {
        size_t *lens = malloc((size_t)c->n_vocab * sizeof *lens);
        if (!lens) s = bk_fail(BRISK_ERR_NOMEM, "out of memory");
        for (int64_t i = 0; s == BRISK_OK && i < c->n_vocab; i++) lens[i] = strlen(v.text[i]);
        if (s == BRISK_OK)
            s = gguf_writer_set_arr_str(w, "tokenizer.ggml.tokens", v.text, lens, (uint64_t)c->n_vocab);
        free(lens);
    }
    if (s == BRISK_OK)
        s = gguf_writer_set_arr(w, "tokenizer.ggml.token_type", GGUF_TYPE_INT32, v.type, (uint64_t)c->n_vocab);
    if (s == BRISK_OK) s = write_merges(w, tj);
    if (s == BRISK_OK) s = write_specials(w, tj, cfg, c);
    if (s == BRISK_OK) s = write_template(w, dir, cfg);
    if (s == BRISK_OK && pre_out) snprintf(pre_out, pre_cap, "%s", pre);
    free_tables(&v, c->n_vocab);
    cJSON_Delete(tj);
    cJSON_Delete(cfg);
    return s;
}
