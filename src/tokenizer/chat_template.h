/* chat_template.h — a Jinja-subset interpreter for chat templates
 * (GGUF tokenizer.chat_template, HF tokenizer_config.json "chat_template").
 *
 * Renders the way Hugging Face transformers does: trim_blocks and
 * lstrip_blocks on, one trailing newline of the source dropped, `tojson` as
 * json.dumps(ensure_ascii=False) with ", " / ": " separators (",", ": " with
 * indent), raise_exception(), strftime_now(), namespace(), loop controls and
 * {% generation %} blocks (their contents are rendered). Python semantics for
 * str()/==/truthiness/slicing (code points, not bytes).
 *
 * Supported: {{ }} {% %} {# #}, - and + whitespace control, raw, if/elif/
 * else, for (tuple targets, `if` filter, else, loop.*, break/continue), set
 * (names, tuples, ns.attr, block set), macro/call/caller, filter blocks,
 * with; operators and, or, not, in, not in, is [not], ~ + - * / // % **,
 * comparisons, x if c else y, literals, subscripts and slices; the filters,
 * tests and str/dict methods chat templates use (see chat_template_eval.c).
 * Unsupported (an error naming the construct and line at parse time):
 * include, import, extends, block, do, recursive loops, autoescape, unknown
 * filters and tests. Departures from Python's Jinja, all lenient: an
 * attribute or item of an undefined value is undefined (not an error),
 * tojson of undefined is null, upper/lower/title/capitalize map ASCII only,
 * and `'%s' % x` knows %s %d %i %% only.
 *
 * Ownership: chat_template_new() copies what it needs from the source; a
 * template is immutable after parsing, so renders may run concurrently.
 * chat_template_render() reads vars only during the call and returns a
 * malloc'd string the caller frees. Runaway templates stop with an error:
 * output over 64 MiB, working memory over 512 MiB, over 10^7 loop
 * iterations, or nesting (macro calls, expressions) deeper than 200.
 * Files: chat_template.c (API), chat_template_lex.c, chat_template_parse.c,
 * chat_template_eval.c (interpreter), chat_template_builtins.c (filters,
 * tests, methods, globals), chat_template_value.c (arena, values, str(),
 * tojson), chat_template_internal.h.
 */
#ifndef BK_CHAT_TEMPLATE_H
#define BK_CHAT_TEMPLATE_H
#include <cjson/cJSON.h>
#include <stddef.h>

#include "base/status.h"

typedef struct chat_template chat_template;

/* Parses a Jinja template source (as found in GGUF tokenizer.chat_template).
 * On a syntax error or an unsupported construct returns an error status
 * (BRISK_ERR_FORMAT / BRISK_ERR_UNSUPPORTED) whose message names the
 * construct and line. */
brisk_status chat_template_new(const char *source, size_t len, chat_template **out);
void chat_template_free(chat_template *t);

/* Renders with the given variables (a cJSON object: messages, tools,
 * add_generation_prompt, enable_thinking, bos_token, eos_token, ...; NULL
 * means none). *out is malloc'd, NUL-terminated; caller frees. Runtime
 * errors (raise_exception, type errors, loop limits) return an error status
 * with a message (raise_exception: BRISK_ERR_INVALID_ARG with the template's
 * own text; limits: BRISK_ERR_RANGE; type errors: BRISK_ERR_FORMAT). */
brisk_status chat_template_render(const chat_template *t, const cJSON *vars, char **out,
                                  size_t *out_len);

/* As chat_template_render, with strftime_now() reading this clock (seconds
 * since the epoch, local time) instead of time(NULL): for reproducible
 * prompts and tests. */
brisk_status chat_template_render_at(const chat_template *t, const cJSON *vars, long long now,
                                     char **out, size_t *out_len);

#endif
