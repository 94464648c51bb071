/* chat_template.c — the public entry points of the chat template
 * interpreter (see chat_template.h); the work is in chat_template_parse.c,
 * chat_template_eval.c, chat_template_builtins.c and chat_template_value.c. */
#include <stdlib.h>
#include <time.h>

#include "tokenizer/chat_template_internal.h"

struct chat_template {
    ct_arena arena; /* the syntax tree and its strings */
    ct_node *body;
};

brisk_status chat_template_new(const char *source, size_t len, chat_template **out) {
    if (!out || (!source && len)) return bk_fail(BRISK_ERR_INVALID_ARG, "chat_template_new: NULL argument");
    *out = NULL;
    chat_template *t = calloc(1, sizeof *t);
    if (!t) return bk_fail(BRISK_ERR_NOMEM, "chat template: out of memory");
    /* the tree is a small multiple of the source; the limit only stops abuse */
    t->arena.limit = CT_MAX_MEMORY;
    brisk_status s = ct_parse(source ? source : "", len, &t->arena, &t->body);
    if (s != BRISK_OK) {
        chat_template_free(t);
        return s;
    }
    *out = t;
    return BRISK_OK;
}

void chat_template_free(chat_template *t) {
    if (!t) return;
    ct_arena_free(&t->arena);
    free(t);
}

brisk_status chat_template_render_at(const chat_template *t, const cJSON *vars, long long now, char **out,
                                     size_t *out_len) {
    if (!t || !out) return bk_fail(BRISK_ERR_INVALID_ARG, "chat_template_render: NULL argument");
    *out = NULL;
    if (out_len) *out_len = 0;
    return ct_render(t->body, vars, now, out, out_len);
}

brisk_status chat_template_render(const chat_template *t, const cJSON *vars, char **out, size_t *out_len) {
    return chat_template_render_at(t, vars, (long long)time(NULL), out, out_len);
}
