/* test_server.c — the server's pieces that need no model weights: the chat output
 * parser (reasoning, tool calls, tags split across pushes), ChatML, the tools
 * prompt of a template without a tools section, token texts that must stay
 * valid UTF-8, the body check for escaped NULs, and the tool-call grammar with
 * and without parallel_tool_calls (and the field's default per template), each tool's $refs in its
 * own parameters; Qwen3.5 / Qwen3.6 / Qwen3-Coder's XML tool calls: parsed (Python literals, a call
 * inside <think>, Qwen3-Coder's calls without <tool_call>), detected from the template, their grammar
 * (parameters in any order, bounded size; the lazy one also starting at Qwen3-Coder's <function=NAME>),
 * a parameter whose $ref names a string schema taken as a string, and a request's one copy of its tools
 * for every choice. */
#include "engine/grammar.h"
#include "server/chat.h"
#include "server/openai.h"
#include "test.h"

/* Pushes s in pieces of `step` bytes, then a final flush. */
static void feed(chat_parser *p, const char *s, size_t step) {
    size_t n = strlen(s);
    for (size_t i = 0; i < n; i += step) chat_parser_push(p, s + i, i + step <= n ? step : n - i, false);
    chat_parser_push(p, "", 0, true);
}

static const char *str(const strbuf *b) { return b->p ? b->p : ""; }

/* Whether one XML call of function fn with the single parameter param = value, fed in pieces of step
 * bytes, parses as one call whose arguments are want (printed when not). */
static bool xml_param_parses(const cJSON *tools, const char *fn, const char *param, const char *value,
                             const char *want, size_t step) {
    char text[512];
    snprintf(text, sizeof text, "<tool_call>\n<function=%s>\n<parameter=%s>\n%s\n</parameter>\n</function>\n"
             "</tool_call>", fn, param, value);
    chat_parser p;
    chat_parser_init(&p, true, false);
    chat_parser_set_tools(&p, tools, CHAT_TOOLS_XML);
    feed(&p, text, step);
    bool ok = p.n_calls == 1 && !strcmp(p.calls[0].arguments, want);
    if (!ok) fprintf(stderr, "  %s = %s: %s\n", param, value, p.n_calls ? p.calls[0].arguments : "(no call)");
    chat_parser_free(&p);
    return ok;
}

static void test_reasoning(void) {
    for (size_t step = 1; step <= 5; step++) {
        chat_parser p;
        chat_parser_init(&p, false, false);
        feed(&p, "<think>\nplan it</think>\n\nHello <b>world</b>", step);
        CHECK(!strcmp(str(&p.reasoning), "plan it"));
        CHECK(!strcmp(str(&p.content), "Hello <b>world</b>"));
        chat_parser_free(&p);
    }
}

static void test_reasoning_opened_by_template(void) {
    chat_parser p;
    chat_parser_init(&p, false, true);
    feed(&p, "\nthinking</think>\n\nanswer", 2);
    CHECK(!strcmp(str(&p.reasoning), "thinking"));
    CHECK(!strcmp(str(&p.content), "answer"));
    chat_parser_free(&p);
}

static void test_tool_calls(void) {
    for (size_t step = 1; step <= 7; step += 3) {
        chat_parser p;
        chat_parser_init(&p, true, false);
        feed(&p, "Let me check.<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>\n"
                 "<tool_call>{\"name\":\"now\",\"arguments\":\"{}\"}</tool_call>", step);
        CHECK(!strcmp(str(&p.content), "Let me check."));
        CHECK(p.n_calls == 2);
        if (p.n_calls == 2) {
            CHECK(!strcmp(p.calls[0].name, "get_weather"));
            CHECK(!strcmp(p.calls[0].arguments, "{\"city\":\"Paris\"}"));
            CHECK(!strcmp(p.calls[1].name, "now"));
            CHECK(!strcmp(p.calls[1].arguments, "{}"));
        }
        chat_parser_free(&p);
    }
}

static void test_tool_text_kept(void) {
    chat_parser p; /* no tools in the request: the tag is plain text */
    chat_parser_init(&p, false, false);
    feed(&p, "a<tool_call>{\"name\":\"x\"}</tool_call>", 1);
    CHECK(!strcmp(str(&p.content), "a<tool_call>{\"name\":\"x\"}</tool_call>"));
    CHECK(p.n_calls == 0);
    chat_parser_free(&p);
    chat_parser_init(&p, true, false); /* not JSON: returned as text */
    feed(&p, "<tool_call>oops</tool_call>", 4);
    CHECK(!strcmp(str(&p.content), "<tool_call>oops</tool_call>"));
    CHECK(p.n_calls == 0);
    chat_parser_free(&p);
    chat_parser_init(&p, true, false); /* and the blanks after it stay too (fuzz_chat_parser's find) */
    feed(&p, "<tool_call></tool_call> and <tool_call>oops</tool_call>\n\nmore", 2);
    CHECK(!strcmp(str(&p.content), "<tool_call></tool_call> and <tool_call>oops</tool_call>\n\nmore"));
    chat_parser_free(&p);
    chat_parser_init(&p, true, false); /* unterminated */
    feed(&p, "x<tool_call>{\"name\"", 3);
    CHECK(!strcmp(str(&p.content), "x<tool_call>{\"name\""));
    chat_parser_free(&p);
}

static void test_partial_tag_held_back(void) {
    chat_parser p;
    chat_parser_init(&p, true, false);
    chat_parser_push(&p, "Hello <thi", 10, false);
    CHECK(!strcmp(str(&p.content), "Hello ")); /* "<thi" may still become <think> */
    chat_parser_push(&p, "s is fine", 9, false);
    CHECK(!strcmp(str(&p.content), "Hello <this is fine"));
    chat_parser_push(&p, " <tool_", 7, true);
    CHECK(!strcmp(str(&p.content), "Hello <this is fine <tool_"));
    chat_parser_free(&p);
}

static void test_chatml(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/data/stories260K/stories260K.gguf", test_shared_dir());
    brisk_model_params mp = brisk_model_default_params();
    mp.vocab_only = true;
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(path, &mp, &m));
    if (!m) return;
    cJSON *msgs = cJSON_Parse("[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi\"},"
                              "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":[{\"type\":\"function\",\"function\":"
                              "{\"name\":\"f\",\"arguments\":\"{\\\"a\\\":1}\"}}]},{\"role\":\"tool\",\"content\":\"42\"}]");
    cJSON *tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"f\"}}]");
    chat_fmt *f = NULL;
    CHECK_OK(chat_fmt_new(m, NULL, &f)); /* stories260K has no template: ChatML */
    char *out = NULL;
    size_t len = 0;
    if (f) CHECK_OK(chat_fmt_render(f, msgs, tools, true, &out, &len));
    if (out) {
        CHECK(!strcmp(chat_fmt_kind(f), "chatml"));
        CHECK(strlen(out) == len);
        CHECK(!strncmp(out, "<|im_start|>system\nBe brief.\n\n# Tools", 37));
        CHECK(strstr(out, "<|im_start|>user\nHi<|im_end|>\n"));
        CHECK(strstr(out, "<tool_call>\n{\"name\": \"f\", \"arguments\": {\"a\":1}}\n</tool_call><|im_end|>"));
        CHECK(strstr(out, "<tool_response>\n42\n</tool_response>"));
        CHECK(len > 22 && !strcmp(out + len - 22, "<|im_start|>assistant\n"));
        CHECK(!strstr(out, "<|im_start|>system\nBe brief.<|im_end|>")); /* the system text went into the tools block */
    }
    free(out);
    chat_fmt_free(f);
    cJSON_Delete(msgs);
    cJSON_Delete(tools);
    brisk_model_free(m);
}

/* A Jinja template without a tools section gets the tools in its system message (llama.cpp's
 * generic tool-call format, in the <tool_call> syntax the parser reads); one with a section keeps
 * its own rendering. */
static void test_tools_without_section(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/data/stories260K/stories260K.gguf", test_shared_dir());
    brisk_model_params mp = brisk_model_default_params();
    mp.vocab_only = true;
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(path, &mp, &m));
    if (!m) return;
    const char *plain = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}[assistant] ";
    const char *own = "{% if tools %}TOOLS {{ tools | length }}\n{% endif %}{% for m in messages %}[{{ m.role }}] "
                      "{{ m.content }}\n{% endfor %}[assistant] ";
    cJSON *tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":"
                               "{\"type\":\"object\",\"properties\":{\"city\":{\"type\":\"string\"}}}}}]");
    for (int with_sys = 0; with_sys < 2; with_sys++) {
        cJSON *msgs = cJSON_Parse(with_sys ? "[{\"role\":\"system\",\"content\":\"Be brief.\"},{\"role\":\"user\",\"content\":\"Hi\"}]"
                                           : "[{\"role\":\"user\",\"content\":\"Hi\"}]");
        chat_fmt *f = NULL;
        char *out = NULL;
        size_t len = 0;
        CHECK_OK(chat_fmt_new(m, plain, &f));
        if (f) CHECK_OK(chat_fmt_render(f, msgs, tools, true, &out, &len));
        if (out) {
            CHECK(!strncmp(out, with_sys ? "[system] Be brief.\n\nYou may call tools." : "[system] You may call tools.",
                           with_sys ? 39 : 28));
            CHECK(strstr(out, "<tool_call>\n{\"name\": \"<its name>\"") && strstr(out, "\"name\":\"get_weather\""));
            CHECK(strstr(out, "\n[user] Hi\n[assistant] ") && strlen(out) == len);
            CHECK(!strstr(out, "[system] Be brief.\n[")); /* merged, not a second system message */
        }
        free(out);
        out = NULL;
        if (f) CHECK_OK(chat_fmt_render(f, msgs, NULL, true, &out, &len)); /* no tools: untouched */
        CHECK(out && !strstr(out, "You may call tools"));
        free(out);
        out = NULL;
        chat_fmt_free(f);
        f = NULL;
        CHECK_OK(chat_fmt_new(m, own, &f));
        if (f) CHECK_OK(chat_fmt_render(f, msgs, tools, true, &out, &len));
        CHECK(out && !strncmp(out, "TOOLS 1\n", 8) && !strstr(out, "You may call tools"));
        free(out);
        chat_fmt_free(f);
        cJSON_Delete(msgs);
    }
    cJSON_Delete(tools);
    brisk_model_free(m);
}

static const char *const TOOL_CALL[] = {"<tool_call>"}; /* the one trigger of the JSON and Qwen3.5 forms */

/* Feeds text's tokens to g; false at the first token it refuses. */
static bool grammar_takes(const brisk_model *m, brisk_grammar *g, const char *text) {
    brisk_token toks[512];
    int64_t n = 0;
    CHECK_OK(brisk_tokenize(m, text, strlen(text), false, false, toks, 512, &n));
    for (int64_t i = 0; i < n; i++)
        if (brisk_grammar_accept(g, toks[i]) != BRISK_OK) return false;
    return true;
}

/* Whether text is a whole sentence of gbnf (bytes, no tokens); -1 when it does not parse. */
static int gbnf_match(const char *gbnf, const char *text) {
    brisk_grammar *g = NULL;
    if (brisk_grammar_new(NULL, gbnf, "root", &g) != BRISK_OK) {
        fprintf(stderr, "  grammar: %s\n", brisk_last_error());
        return -1;
    }
    int ok = grammar_accept_bytes(g, text, strlen(text)) && grammar_is_complete(g);
    brisk_grammar_free(g);
    return ok;
}

/* parallel_tool_calls: the tool-call grammar takes a second call (whitespace between) only when
 * on, forced (required, a named function) and lazy (auto) alike; one call is whole either way. */
static void test_tool_grammar_parallel(void) {
    brisk_model *m = test_qwen2_vocab();
    if (!m) return;
    cJSON *tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":"
                               "\"object\",\"properties\":{\"city\":{\"type\":\"string\"}},\"required\":[\"city\"]}}},"
                               "{\"type\":\"function\",\"function\":{\"name\":\"now\",\"parameters\":{\"type\":\"object\"}}}]");
    const char *one = "<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Paris\"}}\n</tool_call>";
    const char *two = "\n<tool_call>\n{\"name\": \"get_weather\", \"arguments\": {\"city\": \"Rome\"}}\n</tool_call>";
    const char *now = "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
    for (int parallel = 0; parallel < 2; parallel++)
        for (int mode = 0; mode < 3; mode++) { /* required, named get_weather, auto (lazy) */
            char *gbnf = NULL;
            brisk_grammar *g = NULL;
            CHECK_OK(chat_tool_gbnf(tools, mode == 1 ? "get_weather" : NULL, false, parallel, false, &gbnf));
            if (gbnf) CHECK_OK(brisk_grammar_new(m, gbnf, "root", &g));
            if (g && mode == 2) CHECK_OK(brisk_grammar_set_triggers(g, TOOL_CALL, 1, "<think>", "</think>", false));
            if (!g) {
                free(gbnf);
                continue;
            }
            if (mode == 2) CHECK(grammar_takes(m, g, "Let me look. "));
            CHECK(grammar_takes(m, g, one));
            CHECK(brisk_grammar_is_complete(g));
            CHECK(grammar_takes(m, g, two) == (bool)parallel); /* a second call */
            if (parallel) {
                CHECK(brisk_grammar_is_complete(g));
                CHECK(!grammar_would_accept(g, "  ", 2)); /* llama.cpp's space: one blank, or newlines and indentation */
                CHECK(grammar_takes(m, g, "\n\n  "));
                CHECK(!brisk_grammar_is_complete(g)); /* whitespace opens the next call */
                CHECK(grammar_takes(m, g, mode == 1 ? one : now));
                CHECK(brisk_grammar_is_complete(g));
                CHECK(!grammar_takes(m, g, "\nDone.")); /* text after the calls */
            }
            brisk_grammar_free(g);
            /* a named function's grammar holds every call to the name */
            if (parallel && mode == 1) {
                CHECK_OK(brisk_grammar_new(m, gbnf, "root", &g));
                CHECK(grammar_takes(m, g, one) && !grammar_takes(m, g, "\n<tool_call>\n{\"name\": \"now\""));
                brisk_grammar_free(g);
            }
            free(gbnf);
        }
    cJSON_Delete(tools);
    brisk_model_free(m);
}


static const char *const XML_TOOLS =
    "[{\"type\":\"function\",\"function\":{\"name\":\"get_weather\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"city\":{\"type\":\"string\"},\"days\":{\"type\":\"integer\"},\"opts\":{\"type\":\"object\",\"properties\":"
    "{\"unit\":{\"type\":\"string\"}}}},\"required\":[\"city\",\"days\"]}}},"
    "{\"type\":\"function\",\"function\":{\"name\":\"note\",\"parameters\":{\"type\":\"object\",\"properties\":"
    "{\"text\":{\"type\":\"string\"}},\"required\":[\"text\"]}}}]";

/* Qwen3-Coder / Qwen3.5 / Qwen3.6's XML calls: values typed by the tools' schemas (a string keeps its
 * text, one newline off either end; others read as JSON, text when not JSON), two calls in a row,
 * the same at every push size; the JSON form still read beside it. */
static void test_xml_tool_calls(void) {
    cJSON *tools = cJSON_Parse(XML_TOOLS);
    const char *text = "I'll check.\n\n<tool_call>\n<function=get_weather>\n<parameter=city>\n42\n</parameter>\n"
                       "<parameter=days>\n3\n</parameter>\n<parameter=opts>\n{\"unit\": \"celsius\"}\n</parameter>\n"
                       "</function>\n</tool_call>\n<tool_call>\n<function=note>\n<parameter=text>\nline one\n\nline two\n"
                       "</parameter>\n</function>\n</tool_call>\n"
                       "<tool_call>\n{\"name\": \"now\", \"arguments\": {}}\n</tool_call>";
    for (size_t step = 1; step <= 9; step += 4) {
        chat_parser p;
        chat_parser_init(&p, true, false);
        chat_parser_set_tools(&p, tools, CHAT_TOOLS_XML);
        feed(&p, text, step);
        CHECK(!strcmp(str(&p.content), "I'll check.\n\n"));
        CHECK(p.n_calls == 3);
        if (p.n_calls == 3) {
            CHECK(!strcmp(p.calls[0].name, "get_weather"));
            CHECK(!strcmp(p.calls[0].arguments, "{\"city\":\"42\",\"days\":3,\"opts\":{\"unit\":\"celsius\"}}"));
            CHECK(!strcmp(p.calls[1].name, "note"));
            CHECK(!strcmp(p.calls[1].arguments, "{\"text\":\"line one\\n\\nline two\"}"));
            CHECK(!strcmp(p.calls[2].name, "now"));
            CHECK(!strcmp(p.calls[2].arguments, "{}"));
        }
        chat_parser_free(&p);
    }
    /* without the tools: values read as JSON first; a value not JSON stays text */
    chat_parser p;
    chat_parser_init(&p, true, false);
    feed(&p, "<tool_call>\n<function=f>\n<parameter=a>\n42\n</parameter>\n<parameter=b>\nParis, France\n</parameter>\n"
             "</function>\n</tool_call>", 3);
    CHECK(p.n_calls == 1 && !strcmp(p.calls[0].arguments, "{\"a\":42,\"b\":\"Paris, France\"}"));
    chat_parser_free(&p);
    /* not the form (an unclosed parameter): the block stays text */
    chat_parser_init(&p, true, false);
    feed(&p, "<tool_call>\n<function=f>\n<parameter=a>\n42\n</function>\n</tool_call>", 1);
    CHECK(p.n_calls == 0 && strstr(str(&p.content), "<function=f>"));
    chat_parser_free(&p);
    cJSON_Delete(tools);
}

/* Python's True, False and None in a non-string parameter's value are JSON's (llama.cpp's mapper), also
 * inside arrays and objects but not inside their strings, and so are Python's strings (single quotes,
 * Python's escapes); a string parameter, a parameter the tools do not name, a word that only starts like
 * a literal and a value that is still not JSON keep their text. */
static void test_xml_python_literals(void) {
    cJSON *tools = cJSON_Parse(
        "[{\"type\":\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":{"
        "\"flag\":{\"type\":\"boolean\"},\"xs\":{\"type\":\"array\"},\"o\":{\"type\":\"object\"},"
        "\"n\":{\"type\":[\"integer\",\"null\"]},\"s\":{\"type\":\"string\"},\"w\":{\"type\":\"boolean\"}}}}}]");
    static const struct { const char *param, *value, *want; } cases[] = {
        {"flag", "True", "{\"flag\":true}"},
        {"flag", "False", "{\"flag\":false}"},
        {"n", "None", "{\"n\":null}"},
        {"xs", "[1, None, True]", "{\"xs\":[1,null,true]}"},
        {"o", "{\"k\": \"True \\\" None\", \"v\": False}", "{\"o\":{\"k\":\"True \\\" None\",\"v\":false}}"},
        {"s", "True", "{\"s\":\"True\"}"},     /* a string parameter */
        {"other", "None", "{\"other\":\"None\"}"}, /* not in the schema */
        {"w", "Truely", "{\"w\":\"Truely\"}"}, /* not a literal: text */
        {"w", "true", "{\"w\":true}"},
        /* Python's strings: single quotes, a quote of the other kind inside, Python's escapes as JSON's */
        {"xs", "['a', \"b's\"]", "{\"xs\":[\"a\",\"b's\"]}"},
        {"o", "{'k': 'v', 'q': 'say \"hi\"', 'e': 'it\\'s', 'n': None}",
         "{\"o\":{\"k\":\"v\",\"q\":\"say \\\"hi\\\"\",\"e\":\"it's\",\"n\":null}}"},
        {"xs", "['a\\\\b', 'tab\\there', '\\x41\\u00e9\\U0001F600', 'C:\\dir', \"it\\'s\", '\\101']",
         "{\"xs\":[\"a\\\\b\",\"tab\\there\",\"A\xc3\xa9\xf0\x9f\x98\x80\",\"C:\\\\dir\",\"it's\",\"A\"]}"},
        {"xs", "['True', None]", "{\"xs\":[\"True\",null]}"},
        {"s", "'quoted'", "{\"s\":\"'quoted'\"}"}, /* a string parameter keeps its text */
        /* still not JSON: the text, as before */
        {"xs", "['a', 'b]", "{\"xs\":\"['a', 'b]\"}"},
        {"xs", "['\\xZZ']", "{\"xs\":\"['\\\\xZZ']\"}"},
        {"xs", "['\\N{DASH}']", "{\"xs\":\"['\\\\N{DASH}']\"}"},
        {"xs", "['\\0']", "{\"xs\":\"['\\\\0']\"}"},
        {"o", "{'a': 1,}", "{\"o\":\"{'a': 1,}\"}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        CHECK(xml_param_parses(tools, "f", cases[i].param, cases[i].value, cases[i].want, 4));
    cJSON_Delete(tools);
}

/* Qwen3-Coder's calls without their <tool_call> (CHAT_TOOLS_XML_CODER: an XML template without <think>,
 * llama.cpp's is_qwen3_coder): <function=NAME> of a tool opens a call, as in llama.cpp, at every push
 * size; "#include <functional>" or <function= with a name no tool has stays content, and so does a bare
 * call not closed by </tool_call> (as one opened by <tool_call>) or not of the form; the Qwen3.5 and
 * JSON syntaxes take none; a bare call and a whole one in a row are two. */
static void test_xml_bare_function(void) {
    cJSON *tools = cJSON_Parse(XML_TOOLS);
    const char *call = "<function=get_weather>\n<parameter=city>\nParis\n</parameter>\n<parameter=days>\n2\n"
                       "</parameter>\n</function>\n</tool_call>";
    char text[1024];
    static const struct {
        chat_tool_syntax syntax;
        const char *before, *after; /* text around the bare call */
        int calls;
        const char *content; /* NULL: all the text */
    } cases[] = {
        {CHAT_TOOLS_XML_CODER, "Sure.\n", "", 1, "Sure.\n"},
        {CHAT_TOOLS_XML_CODER, "", "\n<tool_call>\n<function=note>\n<parameter=text>\nx\n</parameter>\n</function>\n"
                                   "</tool_call>", 2, ""},
        {CHAT_TOOLS_XML_CODER, "#include <functional>\n<function=get_weath>\n", "", 1,
         "#include <functional>\n<function=get_weath>\n"},
        {CHAT_TOOLS_XML, "", "", 0, NULL},
        {CHAT_TOOLS_JSON, "", "", 0, NULL},
    };
    for (size_t step = 1; step <= 9; step += 4)
        for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
            snprintf(text, sizeof text, "%s%s%s", cases[i].before, call, cases[i].after);
            chat_parser p;
            chat_parser_init(&p, true, false);
            chat_parser_set_tools(&p, tools, cases[i].syntax);
            feed(&p, text, step);
            const char *want = cases[i].content ? cases[i].content : text;
            bool ok = p.n_calls == cases[i].calls && !strcmp(str(&p.content), want);
            if (ok && p.n_calls) ok = !strcmp(p.calls[0].name, "get_weather") &&
                                      !strcmp(p.calls[0].arguments, "{\"city\":\"Paris\",\"days\":2}");
            if (!ok) fprintf(stderr, "  case %zu, step %zu: %d calls, '%s'\n", i, step, p.n_calls, str(&p.content));
            CHECK(ok);
            chat_parser_free(&p);
        }
    /* bare and not a whole call: the text comes back as it was written */
    const char *text_only[] = {
        "<function=note>\n<parameter=text>\nunclosed",                       /* the answer ended first */
        "<function=note>\nnot a parameter\n</function>\n</tool_call>",       /* not the form */
        "<function=note>\n</parameter>\n</tool_call>\n\nthe text after it", /* nor this */
    };
    for (size_t i = 0; i < sizeof text_only / sizeof *text_only; i++) {
        chat_parser p;
        chat_parser_init(&p, true, false);
        chat_parser_set_tools(&p, tools, CHAT_TOOLS_XML_CODER);
        feed(&p, text_only[i], 3);
        CHECK(p.n_calls == 0 && !strcmp(str(&p.content), text_only[i]));
        chat_parser_free(&p);
    }
    cJSON_Delete(tools);
}

/* Qwen3-Coder's bare opener waits only while the text after "<function=" may still be a tool's name,
 * so a streamed answer parses as the whole text does whatever bytes the names hold: with a tool named
 * "a\nb" (fuzz_chat_parser's find), "<function=a\n" was taken for text when pushed alone, and "<think>"
 * then opened reasoning, while the whole text opened the call (unterminated here, so all content).
 * Text that starts no name comes back at once; the start of one is held. */
static void test_xml_bare_streamed(void) {
    cJSON *tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"a\\nb\"}},"
                               "{\"type\":\"function\",\"function\":{\"name\":\"note\"}}]");
    const char *text = "<function=a\nb>\nhi <think>x</think>";
    for (size_t step = 1; step <= 6; step++) {
        chat_parser p;
        chat_parser_init(&p, true, false);
        chat_parser_set_tools(&p, tools, CHAT_TOOLS_XML_CODER);
        feed(&p, text, step);
        bool ok = p.n_calls == 0 && !strcmp(str(&p.content), text) && !p.reasoning.len;
        if (!ok) fprintf(stderr, "  step %zu: content '%s', reasoning '%s'\n", step, str(&p.content), str(&p.reasoning));
        CHECK(ok);
        chat_parser_free(&p);
    }
    chat_parser p;
    chat_parser_init(&p, true, false);
    chat_parser_set_tools(&p, tools, CHAT_TOOLS_XML_CODER);
    chat_parser_push(&p, "x <function=zz", 14, false);
    CHECK(!strcmp(str(&p.content), "x <function=zz")); /* no tool's name starts "zz" */
    chat_parser_push(&p, " <function=no", 13, false);
    CHECK(!strcmp(str(&p.content), "x <function=zz ")); /* may become note's */
    chat_parser_push(&p, "pe>", 3, true);
    CHECK(!strcmp(str(&p.content), "x <function=zz <function=nope>"));
    chat_parser_free(&p);
    cJSON_Delete(tools);
}

/* An oai_server over ../shared's Qwen2 vocabulary with chat template tmpl (4 slots; the real
 * qwen3.5.jinja when NULL): the fixture of the tool-call tests that go through oai_parse. False when a
 * check failed or the vocabulary is missing (q->m NULL: test_qwen2_vocab said skip); qwen_srv_close
 * frees either way. */
typedef struct qwen_srv {
    brisk_model *m;
    char *tmpl;
    chat_fmt *f;
    oai_server srv;
} qwen_srv;

static bool qwen_srv_open(qwen_srv *q, const char *tmpl) {
    memset(q, 0, sizeof *q);
    size_t n = 0;
    if (!(q->m = test_qwen2_vocab())) return false;
    q->tmpl = test_read_file(tmpl ? tmpl : "tests/data/chat_templates/qwen3.5.jinja", &n);
    CHECK(q->tmpl != NULL);
    if (q->tmpl) CHECK_OK(chat_fmt_new(q->m, q->tmpl, &q->f));
    q->srv = (oai_server){.model = q->m, .fmt = q->f, .model_id = "m", .n_parallel = 4, .n_ctx_slot = 4096};
    if (!q->f) return false;
    brisk_status st = oai_server_init(&q->srv);
    CHECK_OK(st);
    return st == BRISK_OK;
}

static void qwen_srv_close(qwen_srv *q) {
    chat_fmt_free(q->f);
    free(q->tmpl);
    brisk_model_free(q->m);
}

/* tool_choice auto through oai_parse, with template tmpl (NULL: qwen3.5's): the request's lazy grammar
 * waits through `text`, starts at `opener`, and then refuses a parameter no tool has. mode: the
 * parser's mode as the answer starts (1: the template opened <think>; -1: not checked). Skipped
 * without the vocabulary. */
static void check_lazy_request(const cJSON *tools, const char *tmpl, int mode, const char *text, const char *opener) {
    qwen_srv q;
    bool up = qwen_srv_open(&q, tmpl);
    if (!q.m) return; /* no vocabulary: skipped */
    char *tj = cJSON_PrintUnformatted(tools), body[4096];
    snprintf(body, sizeof body, "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"tools\":%s}", tj ? tj : "[]");
    oai_job job;
    oai_error e = {0};
    bool ok = up && oai_parse(&q.srv, body, strlen(body), true, &job, &e);
    CHECK(ok);
    if (ok) {
        brisk_grammar *g = job.req->ch[0].grammar;
        CHECK(g && brisk_grammar_waiting(g));
        if (mode >= 0) CHECK(job.ch[0].parser.mode == mode);
        if (g) {
            CHECK(grammar_takes(q.m, g, text) && brisk_grammar_waiting(g));
            CHECK(grammar_takes(q.m, g, opener) && !brisk_grammar_waiting(g));
            CHECK(!grammar_takes(q.m, g, "<parameter=nope>"));
        }
        oai_job_free(&job);
        sched_req_free(job.req);
    }
    free(tj);
    qwen_srv_close(&q);
}

/* A <tool_call> inside an unclosed <think> (the template opened it): with the XML syntax it ends the
 * reasoning and is a call, and the lazy grammar of an auto request starts there, as llama.cpp's
 * Qwen3-Coder handler (</think> and <tool_call> its reasoning's end tags); with the JSON syntax it stays
 * reasoning. */
static void test_xml_tool_call_in_think(void) {
    const char *text = "\nLet me look.\n<tool_call>\n<function=note>\n<parameter=text>\nhi\n</parameter>\n</function>\n"
                       "</tool_call>";
    cJSON *tools = cJSON_Parse(XML_TOOLS);
    for (size_t step = 1; step <= 9; step += 4)
        for (int xml = 0; xml < 2; xml++) {
            chat_parser p;
            chat_parser_init(&p, true, true);
            chat_parser_set_tools(&p, tools, xml ? CHAT_TOOLS_XML : CHAT_TOOLS_JSON);
            feed(&p, text, step);
            if (xml) {
                CHECK(!strcmp(str(&p.reasoning), "Let me look.\n") && !strcmp(str(&p.content), ""));
                CHECK(p.n_calls == 1 && !strcmp(p.calls[0].name, "note"));
            } else {
                CHECK(p.n_calls == 0 && strstr(str(&p.reasoning), "<tool_call>") && !strcmp(str(&p.content), ""));
            }
            chat_parser_free(&p);
        }
    /* the server's lazy grammar: waits through the reasoning (the template opened <think>), starts at the call */
    check_lazy_request(tools, NULL, 1, "Let me look.\n", "<tool_call>\n<function=note>\n");
    cJSON_Delete(tools);
}

/* tool_choice auto with Qwen3-Coder's syntax: the lazy grammar also starts at <function=NAME> of a tool
 * (llama.cpp's triggers), its first call without <tool_call> as chat_parser reads it, the later ones
 * with it; text such as "#include <functional>" or a name no tool has starts nothing. The other
 * syntaxes start at <tool_call> only. Then through oai_parse with our Qwen3-Coder-style template. */
static void test_xml_lazy_coder(void) {
    brisk_model *m = test_qwen2_vocab();
    if (!m) return;
    cJSON *tools = cJSON_Parse(XML_TOOLS);
    const char *bare = "<function=note>\n<parameter=text>\nhi\n</parameter>\n</function>\n</tool_call>";
    const char *whole = "<tool_call>\n<function=get_weather>\n<parameter=city>\nOslo\n</parameter>\n"
                        "<parameter=days>\n1\n</parameter>\n</function>\n</tool_call>";
    const char *whole_json = "<tool_call>\n{\"name\": \"note\", \"arguments\": {\"text\": \"hi\"}}\n</tool_call>";
    static const struct { chat_tool_syntax syntax; int n_trig; } forms[] = {
        {CHAT_TOOLS_XML_CODER, 3}, {CHAT_TOOLS_XML, 1}, {CHAT_TOOLS_JSON, 1},
    };
    for (size_t f = 0; f < sizeof forms / sizeof *forms; f++)
        for (int parallel = 0; parallel < 2; parallel++) {
            char *gbnf = NULL, **trig = NULL;
            int n = 0;
            bool coder = forms[f].syntax == CHAT_TOOLS_XML_CODER;
            CHECK_OK(chat_tool_lazy_gbnf(tools, forms[f].syntax, parallel, &gbnf, &trig, &n));
            CHECK(n == forms[f].n_trig && trig && !strcmp(trig[0], "<tool_call>"));
            if (coder && n == 3) CHECK(!strcmp(trig[1], "<function=get_weather>") && !strcmp(trig[2], "<function=note>"));
            for (int k = 0; gbnf && trig && k < 2; k++) { /* a bare call first, then a whole one first */
                brisk_grammar *g = NULL;
                CHECK_OK(brisk_grammar_new(m, gbnf, "root", &g));
                if (!g) break;
                CHECK_OK(brisk_grammar_set_triggers(g, (const char *const *)trig, n, NULL, NULL, false));
                CHECK(grammar_takes(m, g, "Sure.\n#include <functional>\n<function=get_weath>\n<function=") &&
                      brisk_grammar_waiting(g));
                if (k == 0) {
                    bool ok = grammar_takes(m, g, bare);
                    if (coder) {
                        CHECK(ok && !brisk_grammar_waiting(g) && brisk_grammar_is_complete(g));
                        CHECK(grammar_would_accept(g, "\n<tool_call>", 12) == (bool)parallel);
                        CHECK(!grammar_would_accept(g, "\n<function=", 11)); /* later calls: with <tool_call> */
                    } else CHECK(ok && brisk_grammar_waiting(g)); /* a bare opener is text */
                } else {
                    const char *w = forms[f].syntax == CHAT_TOOLS_JSON ? whole_json : whole;
                    CHECK(grammar_takes(m, g, w) && !brisk_grammar_waiting(g) && brisk_grammar_is_complete(g));
                }
                brisk_grammar_free(g);
            }
            free(gbnf);
            free(trig);
        }
    /* through oai_parse: the server's lazy grammar of an auto request */
    check_lazy_request(tools, "tests/data/chat_templates/qwen3-coder-mini.jinja", -1, "On it.\n", "<function=note>\n");
    cJSON_Delete(tools);
    brisk_model_free(m);
}

/* A chat request with n choices and tools: every choice's parser reads the job's one copy of the
 * tools (borrowed), which outlives the body oai_parse freed: an XML call's integer stays typed. */
static void test_job_tools_shared(void) {
    qwen_srv q;
    bool up = qwen_srv_open(&q, NULL);
    if (!q.m) return; /* no vocabulary: skipped */
    const char *body = "{\"messages\":[{\"role\":\"user\",\"content\":\"hi\"}],\"n\":3,"
                       "\"chat_template_kwargs\":{\"enable_thinking\":false},\"tools\":[{\"type\":"
                       "\"function\",\"function\":{\"name\":\"f\",\"parameters\":{\"type\":\"object\",\"properties\":"
                       "{\"a\":{\"type\":\"integer\"},\"b\":{\"type\":\"string\"}}}}}]}";
    oai_job job;
    oai_error e = {0};
    bool ok = up && oai_parse(&q.srv, body, strlen(body), true, &job, &e);
    CHECK(ok);
    if (ok) {
        CHECK(job.n == 3 && job.tool_defs);
        for (int i = 0; i < job.n; i++) CHECK(job.ch[i].parser.tool_defs == job.tool_defs);
        chat_parser *p = &job.ch[1].parser;
        feed(p, "<tool_call>\n<function=f>\n<parameter=a>\n7\n</parameter>\n<parameter=b>\n7\n</parameter>\n"
                "</function>\n</tool_call>", 5);
        CHECK(p->n_calls == 1 && !strcmp(p->calls[0].arguments, "{\"a\":7,\"b\":\"7\"}"));
        oai_job_free(&job);
        sched_req_free(job.req);
    }
    qwen_srv_close(&q);
}

/* The template's form: llama.cpp's check (<tool_call>, <function=, <parameter= in the source; without
 * <think> too, Qwen3-Coder's); our Qwen3-Coder-style fixture renders tools and an XML call. */
static void test_xml_detect(void) {
    brisk_model *m = test_qwen2_vocab();
    if (!m) return;
    size_t n = 0;
    char *qwen = test_read_file("tests/data/chat_templates/qwen3.5.jinja", &n);
    char *coder = test_read_file("tests/data/chat_templates/qwen3-coder-mini.jinja", &n);
    CHECK(qwen && coder);
    const struct { const char *src; chat_tool_syntax want; } cases[] = {
        {"chatml", CHAT_TOOLS_JSON}, {qwen, CHAT_TOOLS_XML}, {coder, CHAT_TOOLS_XML_CODER},
        {"{{ messages }}", CHAT_TOOLS_JSON},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        chat_fmt *f = NULL;
        if (!cases[i].src) continue;
        CHECK_OK(chat_fmt_new(m, cases[i].src, &f));
        if (f) CHECK(chat_fmt_tool_syntax(f) == cases[i].want);
        if (f && cases[i].src == coder) { /* the fixture renders tools and an XML call */
            cJSON *msgs = cJSON_Parse("[{\"role\":\"user\",\"content\":\"hi\"},{\"role\":\"assistant\",\"content\":\"\","
                                      "\"tool_calls\":[{\"type\":\"function\",\"function\":{\"name\":\"note\","
                                      "\"arguments\":{\"text\":\"x\",\"n\":2}}}]},{\"role\":\"tool\",\"content\":\"ok\"}]");
            cJSON *tools = cJSON_Parse(XML_TOOLS);
            char *out = NULL;
            size_t len = 0;
            CHECK_OK(chat_fmt_render(f, msgs, tools, false, &out, &len));
            CHECK(out && strstr(out, "\"name\": \"get_weather\"") &&
                  strstr(out, "<function=note>\n<parameter=text>\nx\n</parameter>\n<parameter=n>\n2\n</parameter>") &&
                  strstr(out, "<tool_response>\nok\n</tool_response>") && strstr(out, "<|im_start|>assistant\n"));
            free(out);
            cJSON_Delete(msgs);
            cJSON_Delete(tools);
        }
        chat_fmt_free(f);
    }
    free(qwen);
    free(coder);
    brisk_model_free(m);
}

/* The XML form's grammar: a whole call taken (required parameters, an optional one left out or given,
 * a string value over lines, JSON for the others, the parameters in any order); a wrong name, a missing
 * required parameter (in either order), one given twice or a non-integer for an integer refused; forced,
 * named, lazy and parallel as the JSON form's. */
static void test_xml_tool_grammar(void) {
    brisk_model *m = test_qwen2_vocab();
    if (!m) return;
    cJSON *tools = cJSON_Parse(XML_TOOLS);
    const char *one = "<tool_call>\n<function=get_weather>\n<parameter=city>\nNew\nYork </parameter>\n</parameter>\n"
                      "<parameter=days>\n3\n</parameter>\n</function>\n</tool_call>";
    const char *full = "<tool_call>\n<function=get_weather>\n<parameter=city>\nRome\n</parameter>\n"
                       "<parameter=days>\n-2\n</parameter>\n<parameter=opts>\n{\"unit\": \"celsius\"}\n</parameter>\n"
                       "</function>\n</tool_call>";
    const char *note = "<tool_call>\n<function=note>\n<parameter=text>\nhi\n</parameter>\n</function>\n</tool_call>";
    const char *shuffled = "<tool_call>\n<function=get_weather>\n<parameter=opts>\n{}\n</parameter>\n"
                           "<parameter=days>\n1\n</parameter>\n<parameter=city>\nOslo\n</parameter>\n</function>\n"
                           "</tool_call>";
    const struct { const char *text; } bad[] = {
        {"<tool_call>\n<function=get_weath>"},                                                     /* name */
        {"<tool_call>\n<function=get_weather>\n<parameter=days>\n3\n</parameter>\n</function>"},   /* city missing */
        {"<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n</function>"},   /* days missing */
        {"<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n<parameter=city>"}, /* twice */
        {"<tool_call>\n<function=get_weather>\n<parameter=days>\n1\n</parameter>\n<parameter=opts>\n{}\n</parameter>\n"
         "<parameter=days>"},
        {"<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\n<parameter=days>\nthree"},
        {"<tool_call>\n{\"name\": \"get_weather\""},                                               /* the JSON form */
        {"<tool_call>\n<function=get_weather>\n<parameter=city>\nx\n</parameter>\nmore"}, /* text after the close */
    };
    for (int parallel = 0; parallel < 2; parallel++)
        for (int mode = 0; mode < 3; mode++) { /* required, named get_weather, auto (lazy) */
            char *gbnf = NULL;
            CHECK_OK(chat_tool_gbnf(tools, mode == 1 ? "get_weather" : NULL, false, parallel, true, &gbnf));
            if (!gbnf) continue;
            const char *seq[] = {one, full, note, shuffled};
            for (int k = 0; k < 4; k++) {
                brisk_grammar *g = NULL;
                CHECK_OK(brisk_grammar_new(m, gbnf, "root", &g));
                if (!g) break;
                if (mode == 2) CHECK_OK(brisk_grammar_set_triggers(g, TOOL_CALL, 1, "<think>", "</think>", false));
                if (mode == 2) CHECK(grammar_takes(m, g, "Let me look. "));
                bool want = !(mode == 1 && k == 2);
                CHECK(grammar_takes(m, g, seq[k]) == want);
                if (want) {
                    CHECK(brisk_grammar_is_complete(g));
                    CHECK(grammar_takes(m, g, "\n") == (bool)parallel);
                    if (parallel) CHECK(grammar_takes(m, g, one) && brisk_grammar_is_complete(g));
                }
                brisk_grammar_free(g);
            }
            for (size_t k = 0; k < sizeof bad / sizeof *bad; k++) {
                brisk_grammar *g = NULL;
                CHECK_OK(brisk_grammar_new(m, gbnf, "root", &g));
                if (!g) break;
                if (mode == 2) CHECK_OK(brisk_grammar_set_triggers(g, TOOL_CALL, 1, "<think>", "</think>", false));
                CHECK(!grammar_takes(m, g, bad[k].text));
                brisk_grammar_free(g);
            }
            free(gbnf);
        }
    char *gbnf = NULL;
    CHECK(chat_tool_gbnf(tools, "nope", false, false, true, &gbnf) != BRISK_OK && !gbnf);
    cJSON_Delete(tools);
    brisk_model_free(m);
}

/* Tool "many": n parameters PREFIX0, PREFIX1, ... of one type; required: a JSON array's text. */
static cJSON *many_tool(int n, char prefix, const char *type, const char *required) {
    char text[4096];
    int len = snprintf(text, sizeof text, "[{\"type\":\"function\",\"function\":{\"name\":\"many\",\"parameters\":"
                                          "{\"type\":\"object\",\"required\":%s,\"properties\":{", required);
    for (int i = 0; i < n && len > 0 && (size_t)len < sizeof text; i++)
        len += snprintf(text + len, sizeof text - (size_t)len, "%s\"%c%d\":{\"type\":\"%s\"}", i ? "," : "", prefix, i,
                        type);
    if (len > 0 && (size_t)len < sizeof text) snprintf(text + len, sizeof text - (size_t)len, "}}}}]");
    return cJSON_Parse(text);
}

/* A call of tool "many" with parameters pI each set to "v", in the order of the digits of ps. */
static void many_call(char *out, size_t cap, const char *ps) {
    int n = snprintf(out, cap, "<tool_call>\n<function=many>\n");
    for (; *ps && n > 0 && (size_t)n < cap; ps++)
        n += snprintf(out + n, cap - (size_t)n, "<parameter=p%c>\nv\n</parameter>\n", *ps);
    if (n > 0 && (size_t)n < cap) snprintf(out + n, cap - (size_t)n, "</function>\n</tool_call>");
}

/* The XML grammar of a tool with more parameters than XML_ANY_ORDER (6): any order within each run of
 * 6 of the schema's order (p0-p5, p6-p7), each at most once, the required ones (p1, p7) present; the
 * runs in order. 40 parameters stay a small grammar (runs: linear, not 2^40), and so do 120 tools of 6
 * (shorter runs). */
static void test_xml_tool_grammar_runs(void) {
    char call[1024];
    cJSON *t = many_tool(8, 'p', "string", "[\"p1\",\"p7\"]");
    char *gbnf = NULL;
    CHECK_OK(chat_tool_gbnf(t, NULL, false, false, true, &gbnf));
    static const struct { const char *order; int want; } cases[] = {
        {"17", 1}, {"517", 1}, {"176", 1}, {"32105476", 1}, {"01234567", 1}, {"12345067", 1}, /* any order in runs */
        {"71", 0}, {"1760", 0}, {"61", 0},                                        /* across runs: in order */
        {"1", 0}, {"7", 0}, {"0567", 0},                                          /* a required one missing */
        {"117", 0}, {"1677", 0},                                                  /* twice */
    };
    for (size_t i = 0; gbnf && i < sizeof cases / sizeof *cases; i++) {
        many_call(call, sizeof call, cases[i].order);
        int got = gbnf_match(gbnf, call);
        if (got != cases[i].want) fprintf(stderr, "  order %s: got %d\n", cases[i].order, got);
        CHECK(got == cases[i].want);
    }
    free(gbnf);
    cJSON_Delete(t);
    t = many_tool(40, 'q', "integer", "[]");
    gbnf = NULL;
    CHECK_OK(chat_tool_gbnf(t, NULL, false, false, true, &gbnf));
    CHECK(gbnf && strlen(gbnf) < 96 * 1024);
    if (gbnf) {
        CHECK(gbnf_match(gbnf, "<tool_call>\n<function=many>\n<parameter=q3>\n1\n</parameter>\n<parameter=q0>\n2\n"
                               "</parameter>\n<parameter=q39>\n3\n</parameter>\n</function>\n</tool_call>") == 1);
        CHECK(gbnf_match(gbnf, "<tool_call>\n<function=many>\n</function>\n</tool_call>") == 1);
    }
    free(gbnf);
    cJSON_Delete(t);
    /* 120 tools of 6 (p0 required): past chat.c's XML_ALT_BUDGET the runs shrink to 5 */
    t = cJSON_CreateArray();
    for (int i = 0; t && i < 120; i++) {
        cJSON *one = many_tool(6, 'p', "string", "[\"p0\"]");
        cJSON *fn = cJSON_GetObjectItem(cJSON_GetArrayItem(one, 0), "function");
        char name[16];
        snprintf(name, sizeof name, "many%d", i);
        if (i) cJSON_ReplaceItemInObject(fn, "name", cJSON_CreateString(name)); /* tool 0 stays "many" */
        cJSON_AddItemToArray(t, cJSON_DetachItemFromArray(one, 0));
        cJSON_Delete(one);
    }
    gbnf = NULL;
    CHECK_OK(chat_tool_gbnf(t, NULL, false, false, true, &gbnf));
    CHECK(gbnf && strlen(gbnf) < 512 * 1024);
    static const struct { const char *order; int want; } shrunk[] = {{"43210", 1}, {"432105", 1}, {"50", 0}, {"1", 0}};
    for (size_t i = 0; gbnf && i < sizeof shrunk / sizeof *shrunk; i++) {
        many_call(call, sizeof call, shrunk[i].order);
        CHECK(gbnf_match(gbnf, call) == shrunk[i].want);
    }
    free(gbnf);
    cJSON_Delete(t);
}

/* Each tool's $refs resolve in its own parameters, in both forms: two tools whose $defs name the
 * same "unit" differently (an enum of strings, an integer) each keep their own; in the XML form a's
 * is a string parameter (test_xml_string_refs), b's JSON. */
static void test_tool_grammar_refs(void) {
    cJSON *tools = cJSON_Parse(
        "[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":{\"type\":\"object\",\"properties\":"
        "{\"u\":{\"$ref\":\"#/$defs/unit\"}},\"required\":[\"u\"],\"$defs\":{\"unit\":{\"enum\":[\"c\",\"f\"]}}}}},"
        "{\"type\":\"function\",\"function\":{\"name\":\"b\",\"parameters\":{\"type\":\"object\",\"properties\":"
        "{\"u\":{\"$ref\":\"#/$defs/unit\"}},\"required\":[\"u\"],\"$defs\":{\"unit\":{\"type\":\"integer\"}}}}}]");
    static const struct { bool xml; const char *text; int want; } cases[] = {
        {false, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"u\": \"c\"}}\n</tool_call>", 1},
        {false, "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"u\": 7}}\n</tool_call>", 1},
        {false, "<tool_call>\n{\"name\": \"b\", \"arguments\": {\"u\": \"c\"}}\n</tool_call>", 0},
        {false, "<tool_call>\n{\"name\": \"a\", \"arguments\": {\"u\": 7}}\n</tool_call>", 0},
        {true, "<tool_call>\n<function=a>\n<parameter=u>\n\"f\"\n</parameter>\n</function>\n</tool_call>", 1},
        {true, "<tool_call>\n<function=b>\n<parameter=u>\n7\n</parameter>\n</function>\n</tool_call>", 1},
        {true, "<tool_call>\n<function=b>\n<parameter=u>\n\"f\"\n</parameter>\n</function>\n</tool_call>", 0},
        /* a's unit, an enum of strings, is a string parameter: its value is text (llama.cpp's too) */
        {true, "<tool_call>\n<function=a>\n<parameter=u>\n7\n</parameter>\n</function>\n</tool_call>", 1},
    };
    char *gbnf[2] = {NULL, NULL};
    for (int xml = 0; xml < 2; xml++) CHECK_OK(chat_tool_gbnf(tools, NULL, false, false, xml, &gbnf[xml]));
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        if (gbnf[cases[i].xml]) CHECK(gbnf_match(gbnf[cases[i].xml], cases[i].text) == cases[i].want);
    free(gbnf[0]);
    free(gbnf[1]);
    cJSON_Delete(tools);
    /* a schema the grammar cannot express: the error names the tool (and the XML form's parameter) */
    tools = cJSON_Parse("[{\"type\":\"function\",\"function\":{\"name\":\"a\",\"parameters\":{\"type\":\"object\","
                        "\"properties\":{\"u\":{\"type\":\"integer\",\"not\":{}}}}}}]");
    for (int xml = 0; xml < 2; xml++) {
        gbnf[xml] = NULL;
        CHECK(chat_tool_gbnf(tools, NULL, false, false, xml, &gbnf[xml]) == BRISK_ERR_UNSUPPORTED && !gbnf[xml]);
        CHECK(strstr(brisk_last_error(), xml ? "tool 'a', parameter 'u': json schema:" : "tool 'a': json schema:"));
    }
    cJSON_Delete(tools);
}

/* A parameter whose schema names a string format (llama.cpp's list: date, time, date-time, uri, email,
 * hostname, ipv4, ipv6, uuid*) is a string parameter: "2026" stays text; another format, or none, reads
 * JSON. */
static void test_xml_string_formats(void) {
    cJSON *tools = cJSON_Parse(
        "[{\"type\":\"function\",\"function\":{\"name\":\"d\",\"parameters\":{\"type\":\"object\",\"properties\":{"
        "\"day\":{\"format\":\"date\"},\"id\":{\"format\":\"uuid4\"},\"ip\":{\"format\":\"ipv4\"},"
        "\"odd\":{\"format\":\"int32\"},\"bare\":{}}}}}]");
    static const struct { const char *param, *value, *want; } cases[] = {
        {"day", "2026", "{\"day\":\"2026\"}"}, {"id", "7", "{\"id\":\"7\"}"},     {"ip", "10", "{\"ip\":\"10\"}"},
        {"odd", "2026", "{\"odd\":2026}"},     {"bare", "2026", "{\"bare\":2026}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        CHECK(xml_param_parses(tools, "d", cases[i].param, cases[i].value, cases[i].want, 5));
    cJSON_Delete(tools);
}

/* A parameter whose schema is a $ref to a string schema is a string parameter (llama.cpp's
 * resolves_to_string follows $refs): its value keeps its text and the XML grammar takes it as text.
 * Through a $ref to a $ref, #/definitions/, an anyOf whose first branch is a cycle; a $ref cycle, one
 * naming nothing, or $refs fanning out past the walk's bounds are no string (and end); a $ref to an
 * integer still reads JSON. */
static void test_xml_string_refs(void) {
    cJSON *tools = cJSON_Parse(
        "[{\"type\":\"function\",\"function\":{\"name\":\"r\",\"parameters\":{\"type\":\"object\",\"$defs\":{"
        "\"Name\":{\"type\":\"string\"},\"Alias\":{\"$ref\":\"#/$defs/Name\"},\"Num\":{\"type\":\"integer\"},"
        "\"Loop\":{\"$ref\":\"#/$defs/Loop\"},\"Either\":{\"anyOf\":[{\"$ref\":\"#/$defs/Loop\"},"
        "{\"$ref\":\"#/definitions/Word\"}]}},\"definitions\":{\"Word\":{\"minLength\":1}},\"properties\":{"
        "\"who\":{\"$ref\":\"#/$defs/Name\"},\"alias\":{\"$ref\":\"#/$defs/Alias\"},\"n\":{\"$ref\":\"#/$defs/Num\"},"
        "\"either\":{\"$ref\":\"#/$defs/Either\"},\"loop\":{\"$ref\":\"#/$defs/Loop\"},"
        "\"nowhere\":{\"$ref\":\"#/$defs/Missing\"}},\"required\":[\"who\"]}}}]");
    static const struct { const char *param, *value, *want; } cases[] = {
        {"who", "42", "{\"who\":\"42\"}"},       {"alias", "true", "{\"alias\":\"true\"}"},
        {"either", "7", "{\"either\":\"7\"}"},   {"n", "7", "{\"n\":7}"},
        {"loop", "7", "{\"loop\":7}"},             {"loop", "x y", "{\"loop\":\"x y\"}"},
        {"nowhere", "[1]", "{\"nowhere\":[1]}"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++)
        CHECK(xml_param_parses(tools, "r", cases[i].param, cases[i].value, cases[i].want, 3));
    /* $refs fanning out, 8 alternatives to the next of 16 levels, down to an integer: 8^16 paths, so the
     * walk must end within its bounds (not a string; the value read as JSON) */
    strbuf b = {0};
    sb_puts(&b, "[{\"type\":\"function\",\"function\":{\"name\":\"r\",\"parameters\":{\"type\":\"object\","
                "\"properties\":{\"fan\":{\"$ref\":\"#/$defs/d0\"}},\"$defs\":{\"d16\":{\"type\":\"integer\"}");
    for (int d = 0; d < 16; d++) {
        sb_printf(&b, ",\"d%d\":{\"anyOf\":[", d);
        for (int k = 0; k < 8; k++) sb_printf(&b, "%s{\"$ref\":\"#/$defs/d%d\"}", k ? "," : "", d + 1);
        sb_puts(&b, "]}");
    }
    sb_puts(&b, "}}}}]");
    cJSON *fan = cJSON_Parse(str(&b));
    CHECK(fan != NULL);
    chat_parser p;
    chat_parser_init(&p, true, false);
    chat_parser_set_tools(&p, fan, CHAT_TOOLS_XML);
    feed(&p, "<tool_call>\n<function=r>\n<parameter=fan>\n7\n</parameter>\n</function>\n</tool_call>", 16);
    CHECK(p.n_calls == 1 && !strcmp(p.calls[0].arguments, "{\"fan\":7}"));
    chat_parser_free(&p);
    cJSON_Delete(fan);
    sb_free(&b);
    /* the grammar (without the cycle, which json_schema.c's grammar refuses as left-recursive) */
    cJSON *fn = cJSON_GetObjectItem(cJSON_GetArrayItem(tools, 0), "function");
    cJSON *props = cJSON_GetObjectItem(cJSON_GetObjectItem(fn, "parameters"), "properties");
    cJSON_DeleteItemFromObject(props, "loop");
    cJSON_DeleteItemFromObject(props, "nowhere"); /* refused as well: it names nothing */
    char *gbnf = NULL;
    CHECK_OK(chat_tool_gbnf(tools, NULL, false, false, true, &gbnf));
    static const struct { const char *params; int want; } calls[] = {
        {"<parameter=who>\nNew York\n</parameter>\n<parameter=alias>\n{x\n</parameter>\n", 1},
        {"<parameter=who>\n7\n</parameter>\n<parameter=either>\nany text\n</parameter>\n", 1},
        {"<parameter=who>\nx\n</parameter>\n<parameter=n>\n7\n</parameter>\n", 1},
        {"<parameter=who>\nx\n</parameter>\n<parameter=n>\nseven\n</parameter>\n", 0},
    };
    for (size_t i = 0; gbnf && i < sizeof calls / sizeof *calls; i++) {
        char text[512];
        snprintf(text, sizeof text, "<tool_call>\n<function=r>\n%s</function>\n</tool_call>", calls[i].params);
        int got = gbnf_match(gbnf, text);
        if (got != calls[i].want) fprintf(stderr, "  %s: got %d\n", calls[i].params, got);
        CHECK(got == calls[i].want);
    }
    free(gbnf);
    cJSON_Delete(tools);
}

/* parallel_tool_calls' default: whether the template renders a message's second call. */
static void test_parallel_default(void) {
    brisk_model *m = test_qwen2_vocab();
    if (!m) return;
    const char *plain = "{% for m in messages %}[{{ m.role }}] {{ m.content }}\n{% endfor %}[assistant] ";
    const char *first_only = "{% for m in messages %}[{{ m.role }}] {{ m.content }}{% if m.tool_calls %}"
                             "{{ m.tool_calls[0].function.name }}{% endif %}\n{% endfor %}[assistant] ";
    const char *every = "{% for m in messages %}[{{ m.role }}] {{ m.content }}{% for c in m.tool_calls or [] %}"
                        "{{ c.function.name }}{% endfor %}\n{% endfor %}[assistant] ";
    char path[1024];
    snprintf(path, sizeof path, "tests/data/chat_templates/qwen3.5.jinja");
    size_t n = 0;
    char *qwen = test_read_file(path, &n);
    snprintf(path, sizeof path, "tests/data/chat_templates/llama3.1.jinja");
    char *llama = test_read_file(path, &n); /* raises on a second call */
    CHECK(qwen && llama);
    const struct { const char *src; bool want; } cases[] = {
        {"chatml", true}, {plain, false}, {first_only, false}, {every, true}, {qwen, true}, {llama, false},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        chat_fmt *f = NULL;
        if (!cases[i].src) continue;
        CHECK_OK(chat_fmt_new(m, cases[i].src, &f));
        if (f) CHECK(chat_fmt_parallel_tools(f) == cases[i].want);
        chat_fmt_free(f);
    }
    free(qwen);
    free(llama);
    brisk_model_free(m);
}

static void test_token_text(void) {
    char out[64];
    oai_token_text("h\xc3\xa9llo", 6, out, sizeof out); /* valid: as is */
    CHECK(!strcmp(out, "h\xc3\xa9llo"));
    oai_token_text("\xe4\xbd", 2, out, sizeof out); /* half a CJK character */
    CHECK(!strcmp(out, "bytes:\\xe4\\xbd"));
    oai_token_text(" \xe4", 2, out, sizeof out);
    CHECK(!strcmp(out, "bytes:\\x20\\xe4"));
    oai_token_text("\xed\xa0\x80", 3, out, sizeof out); /* a surrogate is not UTF-8 */
    CHECK(!strncmp(out, "bytes:", 6));
    oai_token_text("\xe4\xbd\xa0\xe4\xbd\xa0\xe4\xbd", 8, out, 12); /* cut to the buffer, NUL-terminated */
    CHECK(strlen(out) < 12);
    oai_token_text("", 0, out, sizeof out);
    CHECK(!strcmp(out, ""));
}

static void test_parse_body(void) {
    oai_error e = {0};
    const char *nul = "{\"prompt\": \"a\\u0000b\"}", *text = "{\"prompt\": \"a\\\\u0000b\"}";
    CHECK(!oai_parse_body(nul, strlen(nul), &e) && e.status == 400);
    cJSON *o = oai_parse_body(text, strlen(text), &e); /* an escaped backslash, then text */
    CHECK(o && !strcmp(cJSON_GetObjectItem(o, "prompt")->valuestring, "a\\u0000b"));
    cJSON_Delete(o);
    CHECK(!oai_parse_body("[1]", 3, &e) && e.status == 400);
    CHECK(!oai_parse_body("{", 1, &e) && e.status == 400);
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"reasoning", test_reasoning},
        {"reasoning_opened_by_template", test_reasoning_opened_by_template},
        {"tool_calls", test_tool_calls},
        {"tool_text_kept", test_tool_text_kept},
        {"partial_tag_held_back", test_partial_tag_held_back},
        {"chatml", test_chatml},
        {"tools_without_section", test_tools_without_section},
        {"tool_grammar_parallel", test_tool_grammar_parallel},
        {"parallel_default", test_parallel_default},
        {"token_text", test_token_text},
        {"parse_body", test_parse_body},
        {"xml_tool_calls", test_xml_tool_calls},
        {"xml_detect", test_xml_detect},
        {"job_tools_shared", test_job_tools_shared},
        {"xml_tool_call_in_think", test_xml_tool_call_in_think},
        {"xml_bare_function", test_xml_bare_function}, {"xml_bare_streamed", test_xml_bare_streamed},
        {"xml_lazy_coder", test_xml_lazy_coder},
        {"xml_python_literals", test_xml_python_literals},
        {"xml_tool_grammar", test_xml_tool_grammar},
        {"tool_grammar_refs", test_tool_grammar_refs},
        {"xml_string_refs", test_xml_string_refs},
        {"xml_string_formats", test_xml_string_formats},
        {"xml_tool_grammar_runs", test_xml_tool_grammar_runs},
    };
    return test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
