/* fuzz_chat_parser.c — libFuzzer target for the chat output parser (server/chat.h): generated text
 * split into content, reasoning (<think>) and tool calls, Qwen3's JSON <tool_call>{...}</tool_call>
 * and the XML form of Qwen3-Coder / Qwen3.5 / Qwen3.6 (<function=NAME><parameter=P>...), with and
 * without <tool_call> (CHAT_TOOLS_XML_CODER's bare calls).
 *
 * Input: byte 0 picks the setup (syntax = b % 3; tools on = b / 3 % 2; the prompt opened <think> =
 * b / 6 % 2; the tool definitions = b / 12 % 3: a fixed set with a $ref'd string parameter, none, or
 * the JSON before "\n#TEXT#\n" in the rest); byte 1 seeds the chunk sizes (0: one byte a push); the
 * rest (after the marker, with fuzzed tools) is the generated text.
 *
 * The text is parsed whole (one final push) and streamed in chunks of fuzzer-chosen sizes, with
 * empty pushes in between, taking and resetting content and reasoning after each push as the server
 * does. Checks: every push succeeds; after the final one nothing is held back or left in a call; the
 * streamed content, reasoning and calls equal the whole parse's (chat.h: a tag split across pushes
 * never changes the result); with the text valid UTF-8 and every chunk ending on a character, each
 * streamed delta, call name and arguments text is valid UTF-8 (the server puts them in JSON as they
 * are); without reasoning or calls the content is the text itself. A failed check aborts. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "server/chat.h"

static const char k_tools[] =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\","
    "\"properties\":{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"opts\":{\"type\":\"object\","
    "\"properties\":{\"unit\":{\"type\":\"string\"}}}},\"required\":[\"city\",\"days\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"note\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"text\":{\"$ref\":\"#/$defs/Text\"},\"tags\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/properties/text\"}},"
    "\"n\":{\"anyOf\":[{\"type\":\"integer\"},{\"type\":\"null\"}]}},\"$defs\":{\"Text\":{\"type\":\"string\"}}}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"now\",\"parameters\":{\"type\":\"object\"}}}]";

static cJSON *g_tools;

#define CHECK(cond)                                                                         \
    do {                                                                                    \
        if (!(cond)) {                                                                      \
            fprintf(stderr, "fuzz_chat_parser: line %d: %s does not hold\n", __LINE__, #cond); \
            abort();                                                                        \
        }                                                                                   \
    } while (0)

/* Whether the n bytes at s are valid UTF-8 (no overlongs, surrogates or code points past U+10FFFF). */
static int utf8_valid(const unsigned char *s, size_t n) {
    for (size_t i = 0; i < n;) {
        unsigned c = s[i];
        size_t k = c < 0x80                ? 1
                   : c >= 0xC2 && c <= 0xDF ? 2
                   : c >= 0xE0 && c <= 0xEF ? 3
                   : c >= 0xF0 && c <= 0xF4 ? 4
                                            : 0;
        if (!k || i + k > n) return 0;
        for (size_t j = 1; j < k; j++)
            if ((s[i + j] & 0xC0) != 0x80) return 0;
        if (k == 3 && ((c == 0xE0 && s[i + 1] < 0xA0) || (c == 0xED && s[i + 1] >= 0xA0))) return 0;
        if (k == 4 && ((c == 0xF0 && s[i + 1] < 0x90) || (c == 0xF4 && s[i + 1] >= 0x90))) return 0;
        i += k;
    }
    return 1;
}

static int str_valid(const char *s) { return utf8_valid((const unsigned char *)s, strlen(s)); }

static uint32_t next_rand(uint32_t *x) { /* xorshift32 */
    *x ^= *x << 13;
    *x ^= *x >> 17;
    *x ^= *x << 5;
    return *x;
}

typedef struct out {
    char *content, *reasoning;
    size_t n_content, n_reasoning;
} out;

static void take(strbuf *b, char **dst, size_t *n, int check_utf8) {
    if (!b->len) return;
    if (check_utf8) CHECK(utf8_valid((const unsigned char *)b->p, b->len));
    char *q = realloc(*dst, *n + b->len + 1);
    CHECK(q);
    memcpy(q + *n, b->p, b->len);
    *n += b->len;
    q[*n] = 0;
    *dst = q;
    sb_reset(b);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (size < 2) return 0;
    if (!g_tools) g_tools = cJSON_Parse(k_tools);
    unsigned sel = data[0];
    chat_tool_syntax syntax = (chat_tool_syntax)(sel % 3);
    int tools_on = sel / 3 % 2, in_think = sel / 6 % 2, defs = sel / 12 % 3;
    const char *text = (const char *)data + 2;
    size_t len = size - 2;
    cJSON *own = NULL;
    const cJSON *tools = defs == 0 ? g_tools : NULL;
    if (defs == 2) {
        const char *sep = len >= 8 ? memmem(text, len, "\n#TEXT#\n", 8) : NULL;
        if (!sep) return 0;
        own = cJSON_ParseWithLength(text, (size_t)(sep - text));
        tools = own;
        len -= (size_t)(sep + 8 - text);
        text = sep + 8;
    }
    int valid = utf8_valid((const unsigned char *)text, len);

    chat_parser w;
    chat_parser_init(&w, tools_on, in_think);
    chat_parser_set_tools(&w, tools, syntax);
    CHECK(chat_parser_push(&w, text, len, true));
    CHECK(w.pending.len == 0 && w.tool.len == 0 && w.mode != 2);

    chat_parser s;
    chat_parser_init(&s, tools_on, in_think);
    chat_parser_set_tools(&s, tools, syntax);
    out so = {0};
    uint32_t x = data[1] * 2654435761u + (uint32_t)len + 1, max = 1 + data[1] % 32;
    int last_final = data[1] & 1, n_calls = 0; /* the last chunk carries final, as the server's last piece */
    for (size_t at = 0; at < len;) {
        size_t n = data[1] ? 1 + next_rand(&x) % max : 1;
        if (n > len - at) n = len - at;
        while (valid && at + n < len && (text[at + n] & 0xC0) == 0x80) n++; /* whole characters */
        int fin = last_final && at + n == len;
        CHECK(chat_parser_push(&s, text + at, n, fin));
        if (!fin && data[1] && next_rand(&x) % 8 == 0) CHECK(chat_parser_push(&s, "", 0, false));
        at += n;
        take(&s.reasoning, &so.reasoning, &so.n_reasoning, valid);
        take(&s.content, &so.content, &so.n_content, valid);
        CHECK(s.n_calls >= n_calls);
        n_calls = s.n_calls;
    }
    if (!last_final || !len) CHECK(chat_parser_push(&s, "", 0, true));
    take(&s.reasoning, &so.reasoning, &so.n_reasoning, valid);
    take(&s.content, &so.content, &so.n_content, valid);
    CHECK(s.pending.len == 0 && s.tool.len == 0 && s.mode != 2);

    /* the stream's result is the whole text's */
    CHECK(so.n_content == w.content.len && (!so.n_content || !memcmp(so.content, w.content.p, so.n_content)));
    CHECK(so.n_reasoning == w.reasoning.len &&
          (!so.n_reasoning || !memcmp(so.reasoning, w.reasoning.p, so.n_reasoning)));
    CHECK(s.n_calls == w.n_calls);
    for (int i = 0; i < w.n_calls; i++) {
        CHECK(w.calls[i].name && w.calls[i].arguments);
        CHECK(!strcmp(s.calls[i].name, w.calls[i].name) && !strcmp(s.calls[i].arguments, w.calls[i].arguments));
        if (valid) CHECK(str_valid(w.calls[i].name) && str_valid(w.calls[i].arguments));
    }
    /* no reasoning and no call: every byte is content, a tag that opened nothing or a call that did not
     * parse given back as it was written */
    if (!in_think && !memmem(text, len, "<think>", 7) && !w.n_calls)
        CHECK(w.content.len == len && (!len || !memcmp(w.content.p, text, len)));

    free(so.content);
    free(so.reasoning);
    chat_parser_free(&s);
    chat_parser_free(&w);
    cJSON_Delete(own);
    return 0;
}
