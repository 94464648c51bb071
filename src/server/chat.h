/* chat.h — chat prompts in, chat answers out.
 *
 * chat_fmt renders a conversation with the model's own Jinja template
 * (tokenizer.chat_template, through the Jinja interpreter of
 * tokenizer/chat_template.h) or, for a model without one, ChatML.
 *
 * chat_parser splits generated text as it streams into content, reasoning
 * (between <think> and </think>) and tool calls: <tool_call> blocks holding
 * Qwen3's JSON {"name": ..., "arguments": {...}} or the XML form of
 * Qwen3-Coder / Qwen3.5 / Qwen3.6 (<function=NAME>, <parameter=P>\nVALUE\n
 * </parameter> each, </function>); with the XML syntax a <tool_call> also
 * ends an open <think>, and with Qwen3-Coder's a call may start at
 * <function=NAME> without its <tool_call> (chat_tool_syntax). Text that could
 * still be the start of a tag is held back until the next push, so a tag
 * never leaks into the content in pieces.
 */
#ifndef BK_SERVER_CHAT_H
#define BK_SERVER_CHAT_H
#include <cjson/cJSON.h>
#include <stdbool.h>

#include "brisk.h"
#include "server/strbuf.h"

typedef struct chat_fmt chat_fmt;

/* source: a Jinja template, "chatml" for the built-in ChatML, or NULL for
 * the model's own template (ChatML when it has none). A template the
 * interpreter cannot parse is an error naming the construct. */
brisk_status chat_fmt_new(const brisk_model *model, const char *source, chat_fmt **out);
void chat_fmt_free(chat_fmt *f);
const char *chat_fmt_kind(const chat_fmt *f); /* "gguf" or "chatml" */
/* parallel_tool_calls' default, as llama.cpp's: whether the template renders an
 * assistant message's second tool call (ChatML's does). */
bool chat_fmt_parallel_tools(const chat_fmt *f);
/* The tool-call syntax a template teaches, as llama.cpp tells them apart. */
typedef enum chat_tool_syntax {
    CHAT_TOOLS_JSON, /* <tool_call>{"name": ..., "arguments": ...}</tool_call> (Qwen3, the generic form) */
    /* The XML form (the template's source holds "<tool_call>", "<function=" and "<parameter=": Qwen3.5,
     * Qwen3.6, Qwen3-Coder): a <tool_call> inside <think> also ends the reasoning, as llama.cpp's
     * Qwen3-Coder handler counts it among the reasoning's end tags. */
    CHAT_TOOLS_XML,
    /* The XML form from a template without "<think>" (Qwen3-Coder, llama.cpp's is_qwen3_coder): also a
     * call whose <tool_call> the model left out, starting at <function=NAME> for a NAME of the tools. */
    CHAT_TOOLS_XML_CODER,
} chat_tool_syntax;
chat_tool_syntax chat_fmt_tool_syntax(const chat_fmt *f);
/* Renders messages (normalized: content is a string) with the generation
 * prompt; tools may be NULL. *out is malloc'd. */
brisk_status chat_fmt_render(const chat_fmt *f, const cJSON *messages, const cJSON *tools,
                             bool enable_thinking, char **out, size_t *len);

/* A rendered prompt that ends inside <think> (the template opened it): the
 * answer starts as reasoning (chat_parser_init's in_reasoning). */
bool chat_prompt_opens_think(const char *text, size_t len);
/* A rendered prompt that starts with the model's BOS text: tokenize it
 * without adding a second one. */
bool chat_prompt_has_bos(const brisk_model *model, const char *text, size_t len);

/* The GBNF of tool calls in the syntax chat_parser reads: <tool_call>\n,
 * {"name": N, "arguments": A} with A matching N's parameters schema,
 * \n</tool_call>; or with xml (either XML syntax), llama.cpp's Qwen3-Coder
 * form: <function=N>\n, N's parameters in any order, each at most once and
 * the required ones always (past 6 parameters, any order within each run of
 * 6 of the schema's order, shorter runs for many tools: chat.c's
 * XML_ANY_ORDER and XML_ALT_BUDGET), each <parameter=P>\n
 * VALUE \n</parameter>\n (VALUE: text without "\n</parameter>" when P's
 * schema allows a string, else JSON of P's schema), </function>\n
 * </tool_call>. tools: chat tools ({type, function: {name, parameters}});
 * name: the one function allowed, or NULL for any of them; close_think: the
 * prompt opened <think>, so the answer closes it first; parallel: one or more
 * calls in a row (whitespace between), else exactly one. *gbnf is malloc'd.
 * An unknown name or a schema the grammar cannot express is an error. */
brisk_status chat_tool_gbnf(const cJSON *tools, const char *name, bool close_think, bool parallel, bool xml,
                            char **gbnf);

/* tool_choice auto's lazy grammar (llama.cpp's grammar_lazy and its
 * grammar_triggers): chat_tool_gbnf's of any of the tools in syntax's form,
 * and the words it starts at, where chat_parser opens a call: <tool_call>,
 * and with CHAT_TOOLS_XML_CODER also <function=NAME> for each tool's NAME
 * (llama.cpp's whole opener: text such as "#include <functional>" starts
 * nothing), whose grammar lets the first call leave out its <tool_call> as
 * llama.cpp's does. *gbnf is malloc'd; *triggers holds *n_triggers words in
 * one malloc'd block (free() it). */
brisk_status chat_tool_lazy_gbnf(const cJSON *tools, chat_tool_syntax syntax, bool parallel, char **gbnf,
                                 char ***triggers, int *n_triggers);

typedef struct chat_tool_call {
    char *name, *arguments; /* arguments: a JSON text */
} chat_tool_call;

typedef struct chat_parser {
    bool tools;          /* parse <tool_call> blocks */
    chat_tool_syntax syntax; /* the template's (chat_parser_set_tools) */
    int mode;            /* 0 content, 1 reasoning, 2 tool call */
    bool trim;           /* drop leading newlines of the section just opened */
    strbuf pending;      /* text not yet classified (a possible tag start) */
    strbuf tool;         /* body of the tool call being read */
    strbuf content, reasoning; /* output since the caller last reset them */
    chat_tool_call *calls;     /* (n_calls) all calls parsed so far */
    const cJSON *tool_defs;    /* the request's tools (borrowed, read only): XML parameter values typed by them */
    size_t max_name;           /* bytes of the tools' longest name (CHAT_TOOLS_XML_CODER's bare openers) */
    bool bare;                 /* the call being read came without its <tool_call> (it began at <function=) */
    int n_calls, cap_calls;
} chat_parser;

/* in_reasoning: the prompt ended inside <think> (the template opened it). */
void chat_parser_init(chat_parser *p, bool tools, bool in_reasoning);
/* The request's tools and the template's syntax. tools (chat tools; NULL for
 * none) type the XML form's values: a parameter whose schema is a string keeps
 * its text, any other is read as JSON (with Python's True, False and None and
 * its strings, single-quoted ones too, for JSON's; text when it is not JSON);
 * without them every value is read as JSON
 * first. Borrowed: tools must outlive the parser and not change (a request's
 * choices share one copy). syntax: chat_fmt_tool_syntax's. */
void chat_parser_set_tools(chat_parser *p, const cJSON *tools, chat_tool_syntax syntax);
/* Feeds text; final flushes everything held back. false on OOM. */
bool chat_parser_push(chat_parser *p, const char *text, size_t len, bool final);
void chat_parser_free(chat_parser *p);
#endif
