/* fuzz_tokenizer.c — libFuzzer target for src/tokenizer: encodes the input
 * with the qwen2 (byte-level BPE) and llama-spm (SentencePiece) vocabs, with
 * and without parse_special, decodes the ids both ways, and checks that
 * decoding inverts encoding where llama.cpp does (valid UTF-8; for SPM also
 * no U+2581, and llama.cpp's SPM cuts a bad lead byte's "character" across
 * the escaped spaces that follow it, so invalid input does not round-trip). Vocabs come from $SHARED/data or
 * ../shared/data and are loaded once. */
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "tokenizer/tok_internal.h"

static tokenizer *g_tok[2]; /* qwen2, llama-spm */

static tokenizer *load(const char *name) {
    const char *shared = getenv("SHARED");
    char path[1024];
    snprintf(path, sizeof path, "%s/data/llama.cpp-vocab/ggml-vocab-%s.gguf", shared ? shared : "../shared", name);
    gguf_file *g = NULL;
    tokenizer *t = NULL;
    if (gguf_open(path, &g) != BRISK_OK || tokenizer_from_gguf(g, &t) != BRISK_OK) {
        fprintf(stderr, "fuzz_tokenizer: cannot load %s: %s\n", path, brisk_last_error());
        abort();
    }
    gguf_close(g);
    return t;
}

/* Strict UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
static bool valid_utf8(const uint8_t *s, size_t n) {
    for (size_t i = 0; i < n;) {
        uint8_t c = s[i];
        size_t k;
        uint32_t cp, min;
        if (c < 0x80) { i++; continue; }
        if ((c & 0xe0) == 0xc0) k = 1, cp = c & 0x1f, min = 0x80;
        else if ((c & 0xf0) == 0xe0) k = 2, cp = c & 0x0f, min = 0x800;
        else if ((c & 0xf8) == 0xf0) k = 3, cp = c & 0x07, min = 0x10000;
        else return false;
        if (i + k >= n) return false;
        for (size_t j = 1; j <= k; j++) {
            if ((s[i + j] & 0xc0) != 0x80) return false;
            cp = cp << 6 | (s[i + j] & 0x3f);
        }
        if (cp < min || cp > 0x10ffff || (cp >= 0xd800 && cp <= 0xdfff)) return false;
        i += k + 1;
    }
    return true;
}

static void check(const tokenizer *t, const uint8_t *data, size_t size, bool parse_special, bool spm) {
    int64_t cap = 3 * (int64_t)size + 8, n = 0; /* invalid bytes become U+FFFD: up to 3 ids each */
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    if (!ids) return;
    brisk_status s = tokenizer_encode(t, (const char *)data, size, true, parse_special, ids, cap, &n);
    if (s != BRISK_OK) abort();
    /* the counting call must agree */
    int64_t n2 = 0;
    s = tokenizer_encode(t, (const char *)data, size, true, parse_special, NULL, 0, &n2);
    if (n2 != n || (n > 0 && s != BRISK_ERR_RANGE)) abort();
    for (int sp = 0; sp < 2; sp++) {
        size_t len = 0, cap2 = size * 4 + 64;
        char *buf = malloc(cap2);
        if (!buf) break;
        /* drop the BOS that add_special put in front, as llama_detokenize(remove_special) would */
        const int32_t *p = ids;
        int64_t m = n;
        if (m > 0 && tokenizer_add_bos(t) && p[0] == tokenizer_bos(t)) p++, m--;
        s = tokenizer_decode(t, p, m, sp == 1, buf, cap2, &len);
        if (s != BRISK_OK) abort();
        bool expect_rt = !parse_special && sp == 0 &&
                         valid_utf8(data, size) && !(spm && memmem(data, size, "\xe2\x96\x81", 3));
        if (expect_rt && (len != size || memcmp(buf, data, size) != 0)) {
            fprintf(stderr, "round trip failed (%s): %zu bytes in, %zu out\n", spm ? "spm" : "bpe", size, len);
            abort();
        }
        free(buf);
    }
    for (int64_t i = 0; i < n; i++) {
        char piece[256];
        size_t pl;
        s = tokenizer_token_to_piece(t, ids[i], true, piece, sizeof piece, &pl);
        if (s != BRISK_OK && s != BRISK_ERR_RANGE) abort();
    }
    free(ids);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_tok[0]) {
        g_tok[0] = load("qwen2");
        g_tok[1] = load("llama-spm");
    }
    for (int k = 0; k < 2; k++) {
        check(g_tok[k], data, size, false, k == 1);
        check(g_tok[k], data, size, true, k == 1);
    }
    return 0;
}
