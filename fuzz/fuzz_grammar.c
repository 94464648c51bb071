/* fuzz_grammar.c — libFuzzer target for GBNF grammars and JSON schemas: the
 * input up to the first NUL is a grammar (or, when it starts with '{', a JSON
 * schema turned into one); the bytes after it are fed to the matcher in
 * chunks, checking that a refused chunk leaves the state as it was. */
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "brisk.h"
#include "engine/grammar.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    const uint8_t *nul = memchr(data, 0, size);
    size_t glen = nul ? (size_t)(nul - data) : size;
    char *text = malloc(glen + 1);
    if (!text) return 0;
    memcpy(text, data, glen);
    text[glen] = 0;
    brisk_grammar *g = NULL;
    brisk_status st = glen && text[0] == '{' ? brisk_grammar_from_json_schema(NULL, text, &g)
                                             : brisk_grammar_new(NULL, text, NULL, &g);
    free(text);
    if (st != BRISK_OK) {
        if (!brisk_last_error()[0]) __builtin_trap(); /* every failure says why */
        return 0;
    }
    const char *in = nul ? (const char *)nul + 1 : "";
    size_t n = nul ? size - glen - 1 : 0;
    for (size_t i = 0; i < n;) {
        size_t chunk = 1 + (unsigned char)in[i] % 4;
        if (chunk > n - i) chunk = n - i;
        bool would = grammar_would_accept(g, in + i, chunk);
        if (grammar_accept_bytes(g, in + i, chunk) != would) __builtin_trap();
        if (!would) chunk = 1; /* skip a byte and go on from the same state */
        i += chunk;
        (void)grammar_is_complete(g);
    }
    brisk_grammar_free(g);
    return 0;
}
