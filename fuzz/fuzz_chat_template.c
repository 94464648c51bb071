/* fuzz_chat_template.c — libFuzzer target for the chat template interpreter:
 * parses the input as a template and renders it with a conversation that
 * reaches the paths real templates take (system, user, assistant with
 * reasoning and tool calls, tool results, tools, thinking switch). An input
 * holding "\n#VARS#\n" renders with the JSON after it instead. Checks that
 * a render is NUL-terminated at out_len and that rendering twice (same
 * clock) gives the same bytes. */
#include <cjson/cJSON.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "tokenizer/chat_template.h"

static const char k_vars[] =
    "{\"messages\": ["
    "{\"role\": \"system\", \"content\": \"Be brief.\"},"
    "{\"role\": \"user\", \"content\": \"Weather in Paris?\"},"
    "{\"role\": \"assistant\", \"content\": \"<think>\\ncheck\\n</think>\\n\\nLet me look.\", \"reasoning_content\": \"r\","
    " \"tool_calls\": [{\"id\": \"c1\", \"type\": \"function\", \"function\": {\"name\": \"get_weather\","
    " \"arguments\": {\"city\": \"Paris\", \"days\": 2, \"hourly\": true, \"opts\": {\"u\": [1, 2.5, null]}}}}]},"
    "{\"role\": \"tool\", \"tool_call_id\": \"c1\", \"content\": \"18C\"},"
    "{\"role\": \"user\", \"content\": [{\"type\": \"text\", \"text\": \"th\\u00e9 \\ud83d\\ude00\"}, {\"type\": \"image\"}]}],"
    " \"tools\": [{\"type\": \"function\", \"function\": {\"name\": \"get_weather\", \"description\": \"Weather.\","
    " \"parameters\": {\"type\": \"object\", \"properties\": {\"city\": {\"type\": \"string\"}}, \"required\": [\"city\"]}}}],"
    " \"add_generation_prompt\": true, \"enable_thinking\": false, \"bos_token\": \"<s>\", \"eos_token\": \"</s>\"}";

static cJSON *g_vars;

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
    if (!g_vars) g_vars = cJSON_Parse(k_vars);
    const char *src = (const char *)data;
    size_t len = size;
    cJSON *own = NULL;
    const char *sep = size >= 8 ? memmem(data, size, "\n#VARS#\n", 8) : NULL;
    if (sep) {
        len = (size_t)(sep - src);
        own = cJSON_ParseWithLength(sep + 8, size - len - 8);
    }
    chat_template *t;
    if (chat_template_new(src, len, &t) != BRISK_OK) {
        cJSON_Delete(own);
        return 0;
    }
    const cJSON *vars = own ? own : g_vars;
    char *a = NULL, *b = NULL;
    size_t na = 0, nb = 0;
    brisk_status sa = chat_template_render_at(t, vars, 1764633600, &a, &na);
    brisk_status sb = chat_template_render_at(t, vars, 1764633600, &b, &nb);
    if (sa != sb) abort();
    if (sa == BRISK_OK && (a[na] != 0 || na != nb || memcmp(a, b, na))) abort();
    if (sa != BRISK_OK && (a || b)) abort();
    free(a);
    free(b);
    chat_template_free(t);
    cJSON_Delete(own);
    return 0;
}
