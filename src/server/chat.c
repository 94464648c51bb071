/* chat.c — chat templates and the output parser of chat.h. */
#include "server/chat.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/status.h"
#include "engine/grammar.h"

#include "tokenizer/chat_template.h"

struct chat_fmt {
    char *bos, *eos; /* token texts for the template */
    chat_template *tmpl; /* NULL: ChatML */
    bool parallel_tools; /* the template renders an assistant message's second tool call */
    chat_tool_syntax tool_syntax; /* the calls the template teaches */
};

static bool probe_parallel(const chat_fmt *f);

static char *token_text(const brisk_model *m, brisk_token t) {
    char buf[256];
    size_t len = 0;
    if (t < 0 || brisk_token_to_piece(m, t, true, buf, sizeof buf - 1, &len) != BRISK_OK) len = 0;
    buf[len] = 0;
    return strdup(buf);
}

brisk_status chat_fmt_new(const brisk_model *model, const char *source, chat_fmt **out) {
    *out = NULL;
    chat_fmt *f = calloc(1, sizeof *f);
    if (!f) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    f->bos = token_text(model, brisk_token_bos(model));
    f->eos = token_text(model, brisk_token_eos(model));
    if (!f->bos || !f->eos) {
        chat_fmt_free(f);
        return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    bool chatml = source && !strcmp(source, "chatml");
    char *own = source || chatml ? NULL : brisk_model_meta_str(model, "tokenizer.chat_template");
    const char *src = chatml ? NULL : source ? source : own;
    /* llama.cpp's check for the Qwen3-Coder / Qwen3.5 / Qwen3.6 format */
    if (src && strstr(src, "<tool_call>") && strstr(src, "<function=") && strstr(src, "<parameter="))
        f->tool_syntax = strstr(src, "<think>") ? CHAT_TOOLS_XML : CHAT_TOOLS_XML_CODER;
    if (src) {
        brisk_status s = chat_template_new(src, strlen(src), &f->tmpl);
        free(own);
        if (s != BRISK_OK) {
            chat_fmt_free(f);
            return bk_wrap(s, "chat template");
        }
    }
    f->parallel_tools = !f->tmpl || probe_parallel(f);
    *out = f;
    return BRISK_OK;
}

void chat_fmt_free(chat_fmt *f) {
    if (!f) return;
    chat_template_free(f->tmpl);
    free(f->bos);
    free(f->eos);
    free(f);
}

const char *chat_fmt_kind(const chat_fmt *f) {
    return f->tmpl ? "jinja" : "chatml";
}

/* ChatML, with Qwen's tool preamble when tools are given. */
static brisk_status render_chatml(const cJSON *messages, const cJSON *tools, strbuf *b) {
    const cJSON *m;
    bool sys_done = false;
    if (tools && cJSON_GetArraySize(tools) > 0) {
        sb_puts(b, "<|im_start|>system\n");
        const cJSON *first = cJSON_GetArrayItem(messages, 0);
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(first, "role");
        if (cJSON_IsString(role) && !strcmp(role->valuestring, "system")) {
            const cJSON *c = cJSON_GetObjectItemCaseSensitive(first, "content");
            if (cJSON_IsString(c)) sb_printf(b, "%s\n\n", c->valuestring);
            sys_done = true;
        }
        sb_puts(b, "# Tools\n\nYou may call one or more functions to assist with the user query.\n\n"
                   "You are provided with function signatures within <tools></tools> XML tags:\n<tools>");
        const cJSON *t;
        cJSON_ArrayForEach(t, tools) {
            char *js = cJSON_PrintUnformatted(t);
            if (!js) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
            sb_printf(b, "\n%s", js);
            free(js);
        }
        sb_puts(b, "\n</tools>\n\nFor each function call, return a json object with function name and arguments "
                   "within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, "
                   "\"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n");
    }
    int i = 0;
    cJSON_ArrayForEach(m, messages) {
        const cJSON *role = cJSON_GetObjectItemCaseSensitive(m, "role");
        const cJSON *c = cJSON_GetObjectItemCaseSensitive(m, "content");
        if (i++ == 0 && sys_done) continue;
        const char *r = role->valuestring;
        if (!strcmp(r, "tool")) {
            sb_printf(b, "<|im_start|>user\n<tool_response>\n%s\n</tool_response><|im_end|>\n",
                      cJSON_IsString(c) ? c->valuestring : "");
            continue;
        }
        sb_printf(b, "<|im_start|>%s\n%s", r, cJSON_IsString(c) ? c->valuestring : "");
        const cJSON *calls = cJSON_GetObjectItemCaseSensitive(m, "tool_calls"), *tc;
        cJSON_ArrayForEach(tc, calls) {
            const cJSON *fn = cJSON_GetObjectItemCaseSensitive(tc, "function");
            const cJSON *name = cJSON_GetObjectItemCaseSensitive(fn, "name");
            const cJSON *args = cJSON_GetObjectItemCaseSensitive(fn, "arguments");
            char *a = cJSON_IsString(args) ? NULL : cJSON_PrintUnformatted(args);
            sb_printf(b, "\n<tool_call>\n{\"name\": \"%s\", \"arguments\": %s}\n</tool_call>",
                      cJSON_IsString(name) ? name->valuestring : "",
                      cJSON_IsString(args) ? args->valuestring : (a ? a : "{}"));
            free(a);
        }
        sb_puts(b, "<|im_end|>\n");
    }
    sb_puts(b, "<|im_start|>assistant\n");
    return BRISK_OK;
}

static brisk_status render_jinja(const chat_fmt *f, const cJSON *messages, const cJSON *tools, bool enable_thinking,
                                 char **out, size_t *len) {
    cJSON *vars = cJSON_CreateObject();
    if (!vars) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    /* References: the caller keeps ownership of messages and tools. */
    cJSON_AddItemReferenceToObject(vars, "messages", (cJSON *)messages);
    if (tools) cJSON_AddItemReferenceToObject(vars, "tools", (cJSON *)tools);
    cJSON_AddBoolToObject(vars, "add_generation_prompt", true);
    cJSON_AddBoolToObject(vars, "enable_thinking", enable_thinking);
    cJSON_AddStringToObject(vars, "bos_token", f->bos);
    cJSON_AddStringToObject(vars, "eos_token", f->eos);
    brisk_status s = chat_template_render(f->tmpl, vars, out, len);
    cJSON_Delete(vars);
    return s;
}

/* llama.cpp's capability check for parallel tool calls (the request's default): a conversation whose
 * assistant message holds two calls, rendered; the template supports them when the second call
 * (a name the tools do not offer, so nothing else prints it) reaches the text. A template that
 * fails on the probe does not. llama.cpp watches the template read the second call; the text is
 * the nearest brisk has. */
static bool probe_parallel(const chat_fmt *f) {
    static const char *const msgs_json =
        "[{\"role\":\"user\",\"content\":\"User message\"},"
        "{\"role\":\"assistant\",\"content\":\"\",\"tool_calls\":["
        "{\"id\":\"call00001\",\"type\":\"function\",\"function\":{\"name\":\"tool1\",\"arguments\":{\"arg\":\"value\"}}},"
        "{\"id\":\"call00002\",\"type\":\"function\",\"function\":{\"name\":\"probe_second_call\",\"arguments\":{\"arg\":\"value\"}}}]},"
        "{\"role\":\"tool\",\"content\":\"Tool response\",\"tool_call_id\":\"call00001\"},"
        "{\"role\":\"assistant\",\"content\":\"The tool response was 'tool response'\"},"
        "{\"role\":\"user\",\"content\":\"User message\"}]";
    static const char *const tools_json =
        "[{\"type\":\"function\",\"function\":{\"name\":\"tool1\",\"description\":\"Tool description\","
        "\"parameters\":{\"type\":\"object\",\"properties\":{\"arg\":{\"type\":\"string\",\"description\":"
        "\"Arg description\"}},\"required\":[\"arg\"]}}}]";
    cJSON *msgs = cJSON_Parse(msgs_json), *tools = cJSON_Parse(tools_json);
    char *out = NULL;
    size_t len = 0;
    bool yes = msgs && tools && render_jinja(f, msgs, tools, true, &out, &len) == BRISK_OK && out &&
               strstr(out, "probe_second_call");
    free(out);
    cJSON_Delete(msgs);
    cJSON_Delete(tools);
    bk_clear_error();
    return yes;
}

bool chat_fmt_parallel_tools(const chat_fmt *f) {
    return f->parallel_tools;
}

chat_tool_syntax chat_fmt_tool_syntax(const chat_fmt *f) {
    return f->tool_syntax;
}

/* messages with the tools described in the system message (the first one, or a new one before
 * the rest), in the <tool_call> syntax chat_parser reads; NULL on OOM. */
static cJSON *tools_in_system(const cJSON *messages, const cJSON *tools) {
    char *schemas = cJSON_PrintUnformatted(tools);
    cJSON *msgs = cJSON_Duplicate(messages, true);
    strbuf b = {0};
    const cJSON *first = cJSON_GetArrayItem(msgs, 0), *role = cJSON_GetObjectItemCaseSensitive(first, "role");
    const cJSON *content = cJSON_GetObjectItemCaseSensitive(first, "content");
    bool merge = cJSON_IsString(role) && !strcmp(role->valuestring, "system") && cJSON_IsString(content);
    if (merge) sb_printf(&b, "%s\n\n", content->valuestring);
    sb_printf(&b, "You may call tools. To call one, reply with only\n<tool_call>\n{\"name\": \"<its name>\", "
                  "\"arguments\": <an object of its parameters>}\n</tool_call>\nand wait for the result; otherwise "
                  "reply normally. The tools, as JSON schemas:\n%s", schemas ? schemas : "[]");
    char *text = sb_take(&b);
    cJSON *sys = text ? cJSON_CreateObject() : NULL;
    if (sys) {
        cJSON_AddStringToObject(sys, "role", "system");
        cJSON_AddStringToObject(sys, "content", text);
    }
    if (!schemas || !msgs || !sys) {
        cJSON_Delete(msgs);
        cJSON_Delete(sys);
        msgs = NULL;
    } else if (merge) {
        cJSON_ReplaceItemInArray(msgs, 0, sys);
    } else {
        cJSON_InsertItemInArray(msgs, 0, sys);
    }
    free(text);
    free(schemas);
    return msgs;
}

brisk_status chat_fmt_render(const chat_fmt *f, const cJSON *messages, const cJSON *tools, bool enable_thinking,
                             char **out, size_t *len) {
    *out = NULL;
    *len = 0;
    if (f->tmpl && tools) {
        /* A template without a tools section renders the same without them: then the tools go into
         * the system message, as llama.cpp's generic tool-call format puts them (a forced call's
         * grammar, chat_tool_gbnf, constrains the answer in either case). */
        char *plain = NULL;
        size_t n_plain = 0;
        BK_TRY(render_jinja(f, messages, tools, enable_thinking, out, len));
        brisk_status s = render_jinja(f, messages, NULL, enable_thinking, &plain, &n_plain);
        bool ignored = s == BRISK_OK && n_plain == *len && !memcmp(plain, *out, n_plain);
        free(plain);
        if (!ignored) return BRISK_OK;
        free(*out);
        *out = NULL;
        cJSON *msgs = tools_in_system(messages, tools);
        if (!msgs) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
        s = render_jinja(f, msgs, NULL, enable_thinking, out, len);
        cJSON_Delete(msgs);
        return s;
    }
    if (f->tmpl) return render_jinja(f, messages, tools, enable_thinking, out, len);
    strbuf b = {0};
    brisk_status s = render_chatml(messages, tools, &b);
    if (s != BRISK_OK) {
        sb_free(&b);
        return s;
    }
    *len = b.len;
    if (!(*out = sb_take(&b))) return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    return BRISK_OK;
}

/* schema_is_string's walk: $refs are followed at most STRING_MAX_REFS deep along a path (a cycle of
 * them ends there), and at most STRING_MAX_SCHEMAS schemas are read through them in all (alternatives
 * of $refs to alternatives would otherwise multiply, and every parameter may name the same big
 * $defs): past either, a schema does not count as a string. A schema without $refs is read whole. */
#define STRING_MAX_REFS 16
#define STRING_MAX_SCHEMAS 1024

/* schema_is_string at n_refs $refs deep, *left schemas still to read. */
static bool is_string_in(const cJSON *s, const cJSON *doc, int n_refs, int *left) {
    if (!cJSON_IsObject(s) || (n_refs && --*left < 0)) return false;
    const cJSON *t = cJSON_GetObjectItemCaseSensitive(s, "$ref"), *v;
    if (t) { /* the schema it names, its siblings unread (as llama.cpp, and json_schema.c's grammar) */
        const cJSON *target = NULL; /* stays NULL for a ref that names nothing: no string */
        return cJSON_IsString(t) && n_refs < STRING_MAX_REFS &&
               json_schema_ref(doc, t->valuestring, &target) == BRISK_OK && is_string_in(target, doc, n_refs + 1, left);
    }
    t = cJSON_GetObjectItemCaseSensitive(s, "type");
    if (cJSON_IsString(t) && !strcmp(t->valuestring, "string")) return true;
    const cJSON *types = cJSON_IsArray(t) ? t : NULL;
    cJSON_ArrayForEach(v, types) if (cJSON_IsString(v) && !strcmp(v->valuestring, "string")) return true;
    for (int k = 0; k < 2; k++)
        cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(s, k ? "oneOf" : "anyOf"))
            if (is_string_in(v, doc, n_refs, left)) return true;
    const cJSON *all = cJSON_GetObjectItemCaseSensitive(s, "allOf");
    if (cJSON_IsArray(all) && cJSON_GetArraySize(all) > 0) {
        bool every = true;
        cJSON_ArrayForEach(v, all) every = every && is_string_in(v, doc, n_refs, left);
        if (every) return true;
    }
    if (cJSON_IsString(cJSON_GetObjectItemCaseSensitive(s, "const"))) return true;
    cJSON_ArrayForEach(v, cJSON_GetObjectItemCaseSensitive(s, "enum")) if (cJSON_IsString(v)) return true;
    if (cJSON_GetObjectItemCaseSensitive(s, "pattern") || cJSON_GetObjectItemCaseSensitive(s, "minLength") ||
        cJSON_GetObjectItemCaseSensitive(s, "maxLength"))
        return true;
    /* the string formats llama.cpp's list names (uuid and its variants by prefix) */
    static const char *const string_formats[] = {"date", "time", "date-time", "uri", "email", "hostname", "ipv4",
                                                 "ipv6"};
    const cJSON *f = cJSON_GetObjectItemCaseSensitive(s, "format");
    if (!cJSON_IsString(f)) return false;
    for (size_t i = 0; i < sizeof string_formats / sizeof *string_formats; i++)
        if (!strcmp(f->valuestring, string_formats[i])) return true;
    return !strncmp(f->valuestring, "uuid", 4);
}

/* llama.cpp's resolves_to_string: a parameter schema whose value may be a string. doc: the tool's
 * parameters, where a $ref resolves (json_schema_ref's forms, as the grammar's). */
static bool schema_is_string(const cJSON *s, const cJSON *doc) {
    int left = STRING_MAX_SCHEMAS;
    return is_string_in(s, doc, 0, &left);
}

/* A GBNF string literal of s. */
static void gbnf_lit(strbuf *b, const char *s) {
    sb_puts(b, "\"");
    for (; *s; s++) {
        unsigned char c = (unsigned char)*s;
        if (c == '"' || c == '\\') sb_printf(b, "\\%c", c);
        else if (c == '\n') sb_puts(b, "\\n");
        else if (c == '\r') sb_puts(b, "\\r");
        else if (c == '\t') sb_puts(b, "\\t");
        else if (c < 0x20) sb_printf(b, "\\x%02X", c);
        else sb_append(b, s, 1);
    }
    sb_puts(b, "\"");
}

/* Whether chat tool t is one the grammar allows (name: the one allowed, or NULL for all); *fn_name
 * and *params (NULL when absent) are its function's. */
static bool tool_allowed(const cJSON *t, const char *name, const char **fn_name, const cJSON **params) {
    const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
    const cJSON *n = cJSON_GetObjectItemCaseSensitive(fn, "name");
    if (!cJSON_IsString(n) || (name && strcmp(name, n->valuestring))) return false;
    *fn_name = n->valuestring;
    *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
    return true;
}

static brisk_status no_tool(const char *name) {
    return name ? bk_fail(BRISK_ERR_INVALID_ARG, "no tool is named '%s'", name)
                : bk_fail(BRISK_ERR_INVALID_ARG, "a tool call is required but no tools were given");
}

/* A tool's parameters' properties object, or NULL. */
static const cJSON *params_props(const cJSON *params) {
    const cJSON *p = cJSON_GetObjectItemCaseSensitive(params, "properties");
    return cJSON_IsObject(p) ? p : NULL;
}

/* The XML grammar's parameters go in any order within runs of at most this many consecutive parameters
 * of the schema (all of a tool's when it has no more). A run of k takes each of its parameters at most
 * once and all its required ones, which needs a rule per subset already given: 2^k rules, k * 2^(k-1)
 * alternatives. 6 is llama.cpp's bound for permuting (COMMON_CHAT_MAX_PERMUTE), 192 alternatives (about
 * 7 KB of GBNF) a run; runs keep a tool with many parameters linear in their number, at the price of
 * the schema's order between runs. (llama.cpp instead lists the required parameters in the schema's
 * order past 6 and lets the optional ones repeat.) XML_ALT_BUDGET bounds the alternatives of all the
 * tools together (about 500 KB, half the grammar parser's GRAM_MAX_TEXT): past it the runs shrink, down
 * to 1, the schema's order, whose grammar is a few rules a parameter. */
#define XML_ANY_ORDER 6
#define XML_ALT_BUDGET 16384

/* The alternatives of n parameters in runs of k. */
static long xml_run_alts(int n, int k) {
    long alts = 0;
    for (int first = 0; first < n; first += k) {
        int m = n - first < k ? n - first : k;
        alts += (long)m << (m - 1);
    }
    return alts;
}

/* The run length for the allowed tools: the longest up to XML_ANY_ORDER within XML_ALT_BUDGET. */
static int xml_run_len(const cJSON *tools, const char *name) {
    const cJSON *t, *params;
    const char *fname;
    int k = XML_ANY_ORDER;
    for (; k > 1; k--) {
        long alts = 0;
        cJSON_ArrayForEach(t, tools)
            if (tool_allowed(t, name, &fname, &params))
                alts += xml_run_alts(cJSON_GetArraySize(params_props(params)), k);
        if (alts <= XML_ALT_BUDGET) break;
    }
    return k;
}

/* One tool's rules in the XML form, `xml-fnF` (F: fi) the start: `<function=NAME>\n`, the parameters
 * (xml-fnF-pI each: `<parameter=P>\n` VALUE `\n</parameter>\n`, VALUE xml-text when P's schema allows a
 * string, else xml-fnF-vI), then `</function>\n`. The parameters come in runs of `run` (xml_run_len);
 * within a run any order, each at most once, every required one (xml-fnF-rR-M: the rest of run R after
 * the parameters in bit mask M). */
static void xml_fn_rules(strbuf *b, int fi, const char *fname, const cJSON *params, int run) {
    const cJSON *props = params_props(params);
    const cJSON *req = cJSON_GetObjectItemCaseSensitive(params, "required"), *pr, *d;
    int n = cJSON_GetArraySize(props), pi = 0;
    unsigned need = 0; /* required parameters of the current run, a bit each */
    sb_printf(b, "xml-fn%d ::= \"<function=\" ", fi);
    gbnf_lit(b, fname);
    sb_puts(b, " \">\\n\"");
    for (int r = 0; r * run < n; r++) sb_printf(b, " xml-fn%d-r%d-0", fi, r);
    sb_puts(b, " \"</function>\\n\"\n");
    cJSON_ArrayForEach(pr, props) {
        sb_printf(b, "xml-fn%d-p%d ::= \"<parameter=\" ", fi, pi);
        gbnf_lit(b, pr->string);
        if (schema_is_string(pr, params)) sb_puts(b, " \">\\n\" xml-text");
        else sb_printf(b, " \">\\n\" xml-fn%d-v%d", fi, pi);
        sb_puts(b, " \"\\n</parameter>\\n\"\n");
        bool required = false;
        cJSON_ArrayForEach(d, req) required |= cJSON_IsString(d) && !strcmp(d->valuestring, pr->string);
        int r = pi / run, first = r * run, k = n - first < run ? n - first : run; /* run r: first .. first+k-1 */
        if (required) need |= 1u << (pi - first);
        if (++pi < first + k) continue;
        for (unsigned m = 0; m < 1u << k; m++) { /* the run is whole: its rules */
            sb_printf(b, "xml-fn%d-r%d-%u ::=", fi, r, m);
            bool any = false;
            for (int i = 0; i < k; i++)
                if (!(m >> i & 1)) {
                    sb_printf(b, "%s xml-fn%d-p%d xml-fn%d-r%d-%u", any ? " |" : "", fi, first + i, fi, r, m | 1u << i);
                    any = true;
                }
            if ((m & need) == need) sb_printf(b, "%s \"\"", any ? " |" : "");
            sb_puts(b, "\n");
        }
        need = 0;
    }
}

/* The call rules of the XML form (llama.cpp's Qwen3-Coder grammar, xml_fn_rules per allowed tool), the
 * JSON values' rules first (xml-fnF-vI of tool F's parameter I, its $refs resolved in the tool's
 * parameters). Appends them (`call` the start) to b. */
static brisk_status xml_call_rules(const cJSON *tools, const char *name, strbuf *b) {
    json_gbnf *jb = NULL;
    BK_TRY(json_gbnf_new(&jb));
    const cJSON *t, *pr, *params;
    const char *fname;
    char rule[64];
    int fi = 0;
    cJSON_ArrayForEach(t, tools) {
        if (!tool_allowed(t, name, &fname, &params)) continue;
        int pi = 0;
        cJSON_ArrayForEach(pr, params_props(params)) {
            snprintf(rule, sizeof rule, "xml-fn%d-v%d", fi, pi++);
            brisk_status st = schema_is_string(pr, params) ? BRISK_OK : json_gbnf_add(jb, pr, params, rule);
            if (st != BRISK_OK) {
                bk_wrap(st, "tool '%s', parameter '%s'", fname, pr->string); /* take returns st */
                break;
            }
        }
        fi++;
    }
    char *g = NULL;
    brisk_status st = json_gbnf_take(jb, &g);
    if (st == BRISK_OK && !fi) st = no_tool(name);
    if (st != BRISK_OK) {
        free(g);
        return st;
    }
    sb_puts(b, g);
    free(g);
    /* xml-text: no "\n</parameter>" inside (each line after a newline does not start with "</parameter>") */
    static const char close[] = "</parameter>";
    sb_puts(b, "xml-text ::= [^\\n]* (\"\\n\" xml-line)*\nxml-line ::= \"\"");
    for (size_t i = 0; i < sizeof close - 1; i++) {
        sb_puts(b, " | ");
        for (size_t j = 0; j < i; j++) sb_printf(b, "\"%c\" ", close[j]);
        sb_printf(b, "[^\\n%c] [^\\n]*", close[i]);
    }
    for (size_t i = 1; i < sizeof close - 1; i++) { /* a proper prefix, then the line ends */
        sb_puts(b, " | ");
        for (size_t j = 0; j < i; j++) sb_printf(b, "%s\"%c\"", j ? " " : "", close[j]);
    }
    sb_puts(b, "\n");
    sb_puts(b, "call ::=");
    for (int f = 0; f < fi; f++) sb_printf(b, "%s xml-fn%d", f ? " |" : "", f);
    sb_puts(b, "\n");
    fi = 0;
    int run = xml_run_len(tools, name);
    cJSON_ArrayForEach(t, tools)
        if (tool_allowed(t, name, &fname, &params)) xml_fn_rules(b, fi++, fname, params, run);
    return BRISK_OK;
}

/* The JSON form's call object for function fname: {"name": fname, "arguments": params}, or NULL on
 * OOM. params is referenced, not copied: free the result before it. */
static cJSON *call_schema(const char *fname, const cJSON *params) {
    cJSON *alt = cJSON_CreateObject(), *props = cJSON_AddObjectToObject(alt, "properties");
    cJSON *nm = cJSON_AddObjectToObject(props, "name"), *req = cJSON_AddArrayToObject(alt, "required");
    bool ok = cJSON_AddStringToObject(alt, "type", "object") && cJSON_AddStringToObject(nm, "const", fname) &&
              cJSON_AddItemToArray(req, cJSON_CreateString("name")) &&
              cJSON_AddItemToArray(req, cJSON_CreateString("arguments")) &&
              cJSON_AddFalseToObject(alt, "additionalProperties");
    if (ok && cJSON_IsObject(params)) ok = cJSON_AddItemReferenceToObject(props, "arguments", (cJSON *)params);
    else if (ok) ok = cJSON_AddStringToObject(cJSON_AddObjectToObject(props, "arguments"), "type", "object");
    if (!ok) {
        cJSON_Delete(alt);
        return NULL;
    }
    return alt;
}

/* The tags around `call`, and the root: closing a <think> the prompt opened, then one call or
 * (parallel) several with whitespace between (llama.cpp's space rule). xml: llama.cpp's
 * "<tool_call>\n" call "</tool_call>" (the XML call ends in a newline); else a newline before the
 * close too. bare_first: the first call may also leave out its "<tool_call>\n" (llama.cpp's
 * tool-call-first for Qwen3-Coder; the later ones keep it, as there). */
static brisk_status call_root(strbuf *b, bool close_think, bool parallel, bool xml, bool bare_first, char **gbnf) {
    sb_printf(b, "call-block ::= \"<tool_call>\\n\" call \"%s</tool_call>\"\n", xml ? "" : "\\n");
    if (bare_first) sb_puts(b, "call-first ::= call-block | call \"</tool_call>\"\n");
    if (parallel) sb_puts(b, "call-gap ::= | \" \" | \"\\n\"{1,2} [ \\t]{0,20}\n");
    sb_printf(b, "root ::= %s%s%s\n", close_think ? "\"</think>\\n\\n\" " : "",
              bare_first ? "call-first" : "call-block", parallel ? " (call-gap call-block)*" : "");
    if (b->failed) {
        sb_free(b);
        return bk_fail(BRISK_ERR_NOMEM, "tool call grammar: out of memory");
    }
    *gbnf = sb_take(b);
    return BRISK_OK;
}

/* chat_tool_gbnf's grammar; bare_first: call_root's. */
static brisk_status tool_gbnf(const cJSON *tools, const char *name, bool close_think, bool parallel, bool xml,
                              bool bare_first, char **gbnf) {
    *gbnf = NULL;
    strbuf b = {0};
    if (xml) {
        brisk_status st = xml_call_rules(tools, name, &b);
        if (st != BRISK_OK) {
            sb_free(&b);
            return st;
        }
        return call_root(&b, close_think, parallel, true, bare_first, gbnf);
    }
    /* Per allowed function, a JSON schema of the call object, the name a const and the arguments
     * its parameters ($refs resolved in them); json_schema.c keeps the property order (name
     * first). `call` is any of them. */
    json_gbnf *jb = NULL;
    BK_TRY(json_gbnf_new(&jb));
    const cJSON *t, *params;
    const char *fname;
    char rule[64];
    int fi = 0;
    brisk_status st = BRISK_OK;
    cJSON_ArrayForEach(t, tools) {
        if (!tool_allowed(t, name, &fname, &params)) continue;
        cJSON *alt = call_schema(fname, params);
        snprintf(rule, sizeof rule, "call-fn%d", fi);
        st = alt ? json_gbnf_add(jb, alt, cJSON_IsObject(params) ? params : NULL, rule)
                 : bk_fail(BRISK_ERR_NOMEM, "out of memory");
        cJSON_Delete(alt); /* params stays: a reference */
        if (st != BRISK_OK) {
            bk_wrap(st, "tool '%s'", fname);
            break;
        }
        sb_printf(&b, "%scall-fn%d", fi ? " | " : "call ::= ", fi);
        fi++;
    }
    char *g = NULL;
    brisk_status st2 = json_gbnf_take(jb, &g);
    if (st == BRISK_OK) st = st2;
    if (st == BRISK_OK && !fi) st = no_tool(name);
    if (st != BRISK_OK) {
        free(g);
        sb_free(&b);
        return st;
    }
    strbuf all = {0};
    sb_puts(&all, g);
    sb_printf(&all, "%s\n", b.p ? b.p : "");
    if (b.failed) all.failed = true;
    free(g);
    sb_free(&b);
    return call_root(&all, close_think, parallel, false, false, gbnf);
}

brisk_status chat_tool_gbnf(const cJSON *tools, const char *name, bool close_think, bool parallel, bool xml,
                            char **gbnf) {
    return tool_gbnf(tools, name, close_think, parallel, xml, false, gbnf);
}

bool chat_prompt_opens_think(const char *text, size_t len) {
    size_t end = len;
    while (end && (text[end - 1] == '\n' || text[end - 1] == ' ')) end--;
    return end >= 7 && !memcmp(text + end - 7, "<think>", 7);
}

bool chat_prompt_has_bos(const brisk_model *model, const char *text, size_t len) {
    char bos[64];
    size_t bl = 0;
    brisk_token b = brisk_token_bos(model);
    return b >= 0 && brisk_token_to_piece(model, b, true, bos, sizeof bos, &bl) == BRISK_OK && bl && len >= bl &&
           !memcmp(text, bos, bl);
}

/* ---- output parser ---------------------------------------------------- */

static const char *const TAG_OPEN_THINK = "<think>", *const TAG_CLOSE_THINK = "</think>",
                  *const TAG_OPEN_TOOL = "<tool_call>", *const TAG_CLOSE_TOOL = "</tool_call>",
                  *const TAG_BARE_CALL = "<function="; /* CHAT_TOOLS_XML_CODER: a call without <tool_call> */

/* Its triggers are the tags at which chat_parser_push opens a call (a bare one: bare_opener's). */
brisk_status chat_tool_lazy_gbnf(const cJSON *tools, chat_tool_syntax syntax, bool parallel, char **gbnf,
                                 char ***triggers, int *n_triggers) {
    *triggers = NULL;
    *n_triggers = 0;
    bool bare = syntax == CHAT_TOOLS_XML_CODER;
    BK_TRY(tool_gbnf(tools, NULL, false, parallel, syntax != CHAT_TOOLS_JSON, bare, gbnf));
    /* sizes first, then one block: the pointers, then the words */
    const cJSON *t, *params;
    const char *name;
    size_t n = 1, bytes = strlen(TAG_OPEN_TOOL) + 1;
    cJSON_ArrayForEach(t, tools)
        if (bare && tool_allowed(t, NULL, &name, &params)) n++, bytes += strlen(TAG_BARE_CALL) + strlen(name) + 2;
    char **w = malloc(n * sizeof *w + bytes);
    if (!w) {
        free(*gbnf);
        *gbnf = NULL;
        return bk_fail(BRISK_ERR_NOMEM, "out of memory");
    }
    char *at = (char *)(w + n);
    int k = 0;
    w[k++] = at;
    at += sprintf(at, "%s", TAG_OPEN_TOOL) + 1;
    cJSON_ArrayForEach(t, tools)
        if (bare && tool_allowed(t, NULL, &name, &params)) {
            w[k++] = at;
            at += sprintf(at, "%s%s>", TAG_BARE_CALL, name) + 1;
        }
    *triggers = w;
    *n_triggers = k;
    return BRISK_OK;
}

void chat_parser_init(chat_parser *p, bool tools, bool in_reasoning) {
    *p = (chat_parser){0};
    p->tools = tools;
    p->mode = in_reasoning ? 1 : 0;
    p->trim = in_reasoning;
}

void chat_parser_set_tools(chat_parser *p, const cJSON *tools, chat_tool_syntax syntax) {
    p->tool_defs = tools;
    p->syntax = syntax;
    p->max_name = 0;
    const cJSON *t, *params;
    const char *name;
    cJSON_ArrayForEach(t, tools)
        if (tool_allowed(t, NULL, &name, &params) && strlen(name) > p->max_name) p->max_name = strlen(name);
}

/* Whether the tools hold a function named by the n bytes at s (prefix: whose name starts with them). */
static bool tool_named(const cJSON *tools, const char *s, size_t n, bool prefix) {
    const cJSON *t, *params;
    const char *name;
    cJSON_ArrayForEach(t, tools)
        if (tool_allowed(t, NULL, &name, &params) && (prefix ? strlen(name) >= n : strlen(name) == n) &&
            !memcmp(name, s, n))
            return true;
    return false;
}

void chat_parser_free(chat_parser *p) {
    for (int i = 0; i < p->n_calls; i++) {
        free(p->calls[i].name);
        free(p->calls[i].arguments);
    }
    free(p->calls);
    sb_free(&p->pending);
    sb_free(&p->tool);
    sb_free(&p->content);
    sb_free(&p->reasoning);
    *p = (chat_parser){0};
}

/* Appends text to the current section's output, dropping leading newlines after a tag. */
static void emit(chat_parser *p, const char *s, size_t n) {
    if (p->trim) {
        while (n && (*s == '\n' || *s == '\r' || *s == ' ')) s++, n--;
        if (!n) return;
        p->trim = false;
    }
    strbuf *dst = p->mode == 0 ? &p->content : p->mode == 1 ? &p->reasoning : &p->tool;
    sb_append(dst, s, n);
}

/* The schema of tool `name`'s parameter `param` among chat tools, or NULL; *params: the tool's
 * parameters (where the schema's $refs resolve), or NULL. */
static const cJSON *param_schema(const cJSON *tools, const char *name, const char *param, const cJSON **params) {
    const cJSON *t;
    *params = NULL;
    cJSON_ArrayForEach(t, tools) {
        const cJSON *fn = cJSON_GetObjectItemCaseSensitive(t, "function");
        const cJSON *n = cJSON_GetObjectItemCaseSensitive(fn, "name");
        if (!cJSON_IsString(n) || strcmp(n->valuestring, name)) continue;
        *params = cJSON_GetObjectItemCaseSensitive(fn, "parameters");
        return cJSON_GetObjectItemCaseSensitive(cJSON_GetObjectItemCaseSensitive(*params, "properties"), param);
    }
    return NULL;
}

static const char *skip_ws(const char *s, const char *e) {
    while (s < e && (*s == ' ' || *s == '\n' || *s == '\r' || *s == '\t')) s++;
    return s;
}

static bool is_word(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_';
}

/* The value of n hex digits at s, or -1 when they are not all hex digits. */
static long hex_value(const char *s, int n) {
    long v = 0;
    for (int i = 0; i < n; i++) {
        char c = s[i];
        int d = c >= '0' && c <= '9'   ? c - '0'
                : c >= 'a' && c <= 'f' ? c - 'a' + 10
                : c >= 'A' && c <= 'F' ? c - 'A' + 10
                                       : -1;
        if (d < 0) return -1;
        v = v << 4 | d;
    }
    return v;
}

/* Appends the Python string literal at *s (in ' or ") to b as a JSON string and moves *s past it; false
 * when it is not one: unclosed, or an escape Python refuses (\x without two hex digits) or brisk does not
 * map (\N{NAME}; a NUL, which would cut the C string short). The quotes become ", a " inside is escaped,
 * and so are raw control characters; Python's escapes that JSON lacks become JSON's (\' a plain ', \a \v
 * \x \U and octal as \u, an unknown escape a backslash kept, as Python keeps it). *changed: the JSON is
 * not the text as it was. */
static bool py_string(strbuf *b, const char **s, bool *changed) {
    const char *q = *s;
    char quote = *q++;
    *changed = *changed || quote == '\'';
    sb_puts(b, "\"");
    for (;; q++) {
        unsigned char c = (unsigned char)*q;
        long v = -1;
        if (!c) return false;
        if (c == (unsigned char)quote) break;
        if (c != '\\') {
            if (c == '"') sb_puts(b, "\\\"");
            else if (c < 0x20) sb_printf(b, "\\u%04X", c), *changed = true;
            else sb_append(b, q, 1);
            continue;
        }
        char e = *++q;
        bool same = e && strchr("\\\"nrtbfu", e); /* JSON's escape too */
        *changed = *changed || !same;
        if (e == 'u' && (v = hex_value(q + 1, 4)) < 0) return false;
        if (same) sb_printf(b, "\\%c", e);
        else if (e == '\'') sb_puts(b, "'");
        else if (e == '\n') continue; /* a line continued */
        else if (e == 'a' || e == 'v') sb_puts(b, e == 'a' ? "\\u0007" : "\\u000B");
        else if (e == 'x' || e == 'U') {
            int n = e == 'x' ? 2 : 8;
            if ((v = hex_value(q + 1, n)) <= 0 || v > 0x10FFFF || (v >= 0xD800 && v < 0xE000)) return false;
            if (v >= 0x10000) sb_printf(b, "\\u%04lX\\u%04lX", 0xD800 + ((v - 0x10000) >> 10), 0xDC00 + (v & 0x3FF));
            else sb_printf(b, "\\u%04lX", v);
            q += n;
        } else if (e >= '0' && e <= '7') {
            int n = 0;
            for (v = 0; n < 3 && q[n] >= '0' && q[n] <= '7'; n++) v = v * 8 + (q[n] - '0');
            if (!v) return false;
            sb_printf(b, "\\u%04lX", v);
            q += n - 1;
        } else if (e == 'N' || !e) return false;
        else { /* not an escape: the backslash stays, and the character is read as any other */
            sb_puts(b, "\\\\");
            q--;
        }
    }
    sb_puts(b, "\"");
    *s = q + 1;
    return true;
}

/* text as JSON once Python's literals are JSON's, as llama.cpp's tool-call mapper normalises a
 * non-string value: True, False and None (whole words outside strings) as true, false and null, and
 * strings in single quotes (or with Python's escapes) as JSON strings (py_string); NULL when it is
 * still not JSON, or was not Python either. */
static cJSON *parse_pythonic(const char *text) {
    static const char *const py[3] = {"True", "False", "None"}, *const js[3] = {"true", "false", "null"};
    strbuf b = {0};
    bool changed = false, ok = true;
    for (const char *q = text; ok && *q;) {
        if (*q == '"' || *q == '\'') {
            ok = py_string(&b, &q, &changed);
            continue;
        }
        size_t n = 0;
        while (is_word(q[n])) n++;
        if (!n) { /* punctuation, blanks */
            sb_append(&b, q++, 1);
            continue;
        }
        int lit = -1;
        for (int i = 0; i < 3; i++)
            if (n == strlen(py[i]) && !memcmp(q, py[i], n)) lit = i;
        if (lit >= 0) sb_puts(&b, js[lit]), changed = true;
        else sb_append(&b, q, n); /* the rest of the word is no literal's start */
        q += n;
    }
    cJSON *v = ok && changed && !b.failed && b.p ? cJSON_ParseWithOpts(b.p, NULL, true) : NULL;
    sb_free(&b);
    return v;
}

/* The XML form (Qwen3-Coder, Qwen3.5, Qwen3.6): <function=NAME> then <parameter=P>\nVALUE\n</parameter>
 * each, then </function>. A value is the text between the tags less one newline at either end; a
 * parameter the tool's schema types as a string keeps it as text, any other is read as JSON (Python's
 * literals taken for JSON's: parse_pythonic) and stays text if it is not JSON (llama.cpp's conversion).
 * NULL (and no *name) when the body is not of this form. */
static cJSON *parse_xml_call(const cJSON *tools, const char *s, size_t n, char **name) {
    const char *e = s + n, *gt;
    *name = NULL;
    s = skip_ws(s, e);
    if ((size_t)(e - s) < 10 || memcmp(s, "<function=", 10)) return NULL;
    s += 10;
    if (!(gt = memchr(s, '>', (size_t)(e - s))) || gt == s || memchr(s, '\n', (size_t)(gt - s))) return NULL;
    cJSON *args = cJSON_CreateObject();
    char *fname = strndup(s, (size_t)(gt - s));
    bool ok = args && fname;
    s = gt + 1;
    while (ok) {
        s = skip_ws(s, e);
        if (s == e) break; /* </function> left out: the call is whole anyway */
        if ((size_t)(e - s) >= 11 && !memcmp(s, "</function>", 11)) {
            ok = skip_ws(s + 11, e) == e;
            break;
        }
        if ((size_t)(e - s) < 11 || memcmp(s, "<parameter=", 11)) {
            ok = false;
            break;
        }
        s += 11;
        if (!(gt = memchr(s, '>', (size_t)(e - s))) || gt == s || memchr(s, '\n', (size_t)(gt - s))) {
            ok = false;
            break;
        }
        char *pname = strndup(s, (size_t)(gt - s));
        const char *v = gt + 1, *ve = memmem(v, (size_t)(e - v), "</parameter>", 12);
        if (!pname || !ve) {
            free(pname);
            ok = false;
            break;
        }
        s = ve + 12;
        if (v < ve && *v == '\n') v++;
        if (ve > v && ve[-1] == '\n') ve--;
        char *text = strndup(v, (size_t)(ve - v));
        const cJSON *doc, *ps = param_schema(tools, fname, pname, &doc);
        bool is_str = schema_is_string(ps, doc);
        cJSON *val = NULL;
        if (text && !is_str) val = cJSON_ParseWithOpts(text, NULL, true);
        if (text && !val && ps && !is_str) val = parse_pythonic(text);
        if (!val && text) val = cJSON_CreateString(text);
        free(text);
        if (!val) ok = false;
        else {
            cJSON_DeleteItemFromObjectCaseSensitive(args, pname); /* a repeated parameter: the last wins */
            cJSON_AddItemToObject(args, pname, val);
        }
        free(pname);
    }
    if (!ok) {
        cJSON_Delete(args);
        free(fname);
        return NULL;
    }
    *name = fname;
    return args;
}

/* A finished <tool_call> body: a call, or (not JSON of the right shape, nor the XML form) content.
 * Whether it was a call. */
static bool end_tool(chat_parser *p) {
    const char *body = p->tool.p ? p->tool.p : "";
    char *xname = NULL;
    cJSON *xargs = parse_xml_call(p->tool_defs, body, p->tool.len, &xname);
    cJSON *j = xargs ? NULL : cJSON_ParseWithLength(body, p->tool.len);
    const cJSON *name = cJSON_GetObjectItemCaseSensitive(j, "name");
    const cJSON *args = cJSON_GetObjectItemCaseSensitive(j, "arguments");
    bool call = xargs || (cJSON_IsString(name) && (!args || cJSON_IsObject(args) || cJSON_IsString(args)));
    if (call) {
        char *a = xargs ? cJSON_PrintUnformatted(xargs)
                  : !args ? strdup("{}") : cJSON_IsString(args) ? strdup(args->valuestring) : cJSON_PrintUnformatted(args);
        char *n = xargs ? xname : strdup(name->valuestring);
        xname = NULL;
        if (p->n_calls == p->cap_calls) {
            int cap = p->cap_calls ? 2 * p->cap_calls : 4;
            chat_tool_call *c = realloc(p->calls, (size_t)cap * sizeof *c);
            if (c) p->calls = c, p->cap_calls = cap;
        }
        if (a && n && p->n_calls < p->cap_calls) {
            p->calls[p->n_calls++] = (chat_tool_call){n, a};
            a = n = NULL;
        } else p->content.failed = true;
        free(a);
        free(n);
    } else {
        if (!p->bare) sb_puts(&p->content, TAG_OPEN_TOOL);
        sb_append(&p->content, body, p->tool.len);
        sb_puts(&p->content, TAG_CLOSE_TOOL);
    }
    cJSON_Delete(xargs);
    free(xname);
    cJSON_Delete(j);
    sb_reset(&p->tool);
    p->bare = false;
    return call;
}

/* At a "<function=" in content (CHAT_TOOLS_XML_CODER), tag..e the pending text from it: 1 when it opens
 * a call, `<function=NAME>` with NAME one of the tools (*end: past the '>'; llama.cpp's trigger is the
 * whole opener, so text such as "#include <functional>" stays content), 0 when it is text, -1 when the
 * text so far cannot tell: no '>' yet, and what came is the start of a tool's name. Waiting on exactly
 * that keeps a streamed answer's result the whole text's, whatever bytes the names hold (a guess such
 * as "a newline ends it" took `<function=\n` for text where the whole `<function=\n>` opened the call
 * of a tool named "\n"), and gives back other text at once. */
static int bare_opener(const chat_parser *p, const char *tag, const char *e, bool final, const char **end) {
    const char *nm = tag + strlen(TAG_BARE_CALL);
    size_t avail = (size_t)(e - nm), win = p->max_name + 1 < avail ? p->max_name + 1 : avail;
    const char *gt = memchr(nm, '>', win);
    if (gt) {
        *end = gt + 1;
        return tool_named(p->tool_defs, nm, (size_t)(gt - nm), false);
    }
    return !final && tool_named(p->tool_defs, nm, avail, true) ? -1 : 0;
}

bool chat_parser_push(chat_parser *p, const char *text, size_t len, bool final) {
    sb_append(&p->pending, text, len);
    size_t at = 0, n = p->pending.len;
    const char *s = p->pending.p ? p->pending.p : "";
    for (;;) {
        const char *tags[3];
        int nt = 0;
        if (p->mode == 0) {
            tags[nt++] = TAG_OPEN_THINK;
            if (p->tools) tags[nt++] = TAG_OPEN_TOOL;
            if (p->tools && p->syntax == CHAT_TOOLS_XML_CODER && p->max_name) tags[nt++] = TAG_BARE_CALL;
        } else tags[nt++] = p->mode == 1 ? TAG_CLOSE_THINK : TAG_CLOSE_TOOL;
        /* llama.cpp's XML handler ends the reasoning at a call too (its lazy grammar starts there) */
        if (p->mode == 1 && p->tools && p->syntax != CHAT_TOOLS_JSON) tags[nt++] = TAG_OPEN_TOOL;
        const char *best = NULL;
        int bi = -1;
        for (int i = 0; i < nt; i++) {
            const char *h = memmem(s + at, n - at, tags[i], strlen(tags[i]));
            if (h && (!best || h < best)) best = h, bi = i;
        }
        if (best) {
            const char *t = tags[bi], *end = NULL;
            int opens = t == TAG_BARE_CALL ? bare_opener(p, best, s + n, final, &end) : 1;
            if (opens < 0) { /* "<function=" and not yet its name: wait for more */
                emit(p, s + at, (size_t)(best - (s + at)));
                at = (size_t)(best - s);
                break;
            }
            /* through the tag: the text before it, and the tag itself when it opens nothing */
            emit(p, s + at, (size_t)(best - (s + at)) + (opens ? 0 : strlen(t)));
            at = (size_t)(best - s) + strlen(t);
            if (!opens) continue;
            if (t == TAG_OPEN_THINK) p->mode = 1, p->trim = true;
            else if (t == TAG_CLOSE_THINK) p->mode = 0, p->trim = true;
            else if (t == TAG_OPEN_TOOL) p->mode = 2, p->trim = false, p->bare = false;
            else if (t == TAG_BARE_CALL) { /* the body starts with the opener, as after <tool_call> */
                sb_append(&p->tool, best, (size_t)(end - best));
                at = (size_t)(end - s);
                p->mode = 2, p->trim = false, p->bare = true;
            } else /* the newlines after a call go; after text given back, nothing of the text does */
                p->mode = 0, p->trim = end_tool(p);
            continue;
        }
        /* No tag: keep back the longest tail that could begin one. */
        size_t hold = 0;
        if (!final)
            for (int i = 0; i < nt; i++)
                for (size_t k = strlen(tags[i]) - 1; k > hold; k--)
                    if (k <= n - at && !memcmp(s + n - k, tags[i], k)) {
                        hold = k;
                        break;
                    }
        emit(p, s + at, n - at - hold);
        at = n - hold;
        break;
    }
    if (final && p->mode == 2) { /* an unterminated call stays text */
        if (!p->bare) sb_puts(&p->content, TAG_OPEN_TOOL);
        sb_append(&p->content, p->tool.p ? p->tool.p : "", p->tool.len);
        sb_reset(&p->tool);
        p->mode = 0, p->bare = false;
    }
    if (p->pending.p) {
        memmove(p->pending.p, s + at, n - at);
        p->pending.len = n - at;
        p->pending.p[p->pending.len] = 0;
    }
    return !(p->pending.failed || p->content.failed || p->reasoning.failed || p->tool.failed);
}
