/* test_chat_template.c — the chat template interpreter.
 *
 * ref_cases renders every template x variables pair of
 * tests/data/chat_templates/cases.txt (real Qwen3, Qwen3.5, Qwen3.6,
 * Llama 3.1, Llama 3.2 and ChatML templates) and compares byte for byte with
 * the outputs of @huggingface/jinja (tests/chat_template/ref.mjs) stored in
 * expected/. The other tests pin Python semantics where that library
 * differs from Python's Jinja (which transformers runs), the errors, and the
 * limits. */
#include <cjson/cJSON.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "test.h"
#include "tokenizer/chat_template.h"

#define DATA "tests/data/chat_templates"


/* Renders src with vars (JSON text; NULL for none) at a fixed clock. */
static brisk_status render(const char *src, const char *vars_json, char **out) {
    chat_template *t;
    *out = NULL;
    brisk_status s = chat_template_new(src, strlen(src), &t);
    if (s != BRISK_OK) return s;
    cJSON *vars = vars_json ? cJSON_Parse(vars_json) : NULL;
    if (vars_json && !vars) {
        chat_template_free(t);
        return BRISK_ERR_INVALID_ARG;
    }
    size_t n;
    s = chat_template_render_at(t, vars, 1764633600 /* 2025-12-02 00:00 UTC */, out, &n);
    if (s == BRISK_OK && strlen(*out) != n) s = BRISK_ERR_FORMAT; /* no NULs in these tests */
    cJSON_Delete(vars);
    chat_template_free(t);
    return s;
}

static int check_render_(const char *file, int line, const char *src, const char *vars, const char *want) {
    char *got;
    brisk_status s = render(src, vars, &got);
    if (s != BRISK_OK) {
        fprintf(stderr, "  %s:%d: render failed: %s\n    template: %s\n", file, line, brisk_last_error(), src);
        return 1;
    }
    int bad = strcmp(got, want) != 0;
    if (bad) fprintf(stderr, "  %s:%d: template: %s\n    got:  [%s]\n    want: [%s]\n", file, line, src, got, want);
    free(got);
    return bad;
}
#define CHECK_RENDER(src, vars, want)                                           \
    do {                                                                        \
        if (check_render_(__FILE__, __LINE__, src, vars, want)) test_failed_ = 1; \
    } while (0)

/* The render (or parse) must fail with status s and a message containing msg. */
static int check_error_(const char *file, int line, const char *src, const char *vars, brisk_status want,
                        const char *msg) {
    char *got;
    brisk_status s = render(src, vars, &got);
    if (s == BRISK_OK) {
        fprintf(stderr, "  %s:%d: expected an error, got [%.200s]\n    template: %s\n", file, line, got, src);
        free(got);
        return 1;
    }
    if (s != want || !strstr(brisk_last_error(), msg)) {
        fprintf(stderr, "  %s:%d: got %s \"%s\", want %s containing \"%s\"\n", file, line, brisk_status_str(s),
                brisk_last_error(), brisk_status_str(want), msg);
        return 1;
    }
    return 0;
}
#define CHECK_ERROR(src, vars, status, msg)                                            \
    do {                                                                               \
        if (check_error_(__FILE__, __LINE__, src, vars, status, msg)) test_failed_ = 1; \
    } while (0)

/* ---- the reference outputs -------------------------------------------- */

static char *load_template(const char *name) {
    char path[1024];
    if (!strncmp(name, "shared:", 7)) {
        snprintf(path, sizeof path, "%s/%s", test_shared_dir(), name + 7);
        char *text = test_read_file(path, NULL);
        if (!text) return NULL;
        cJSON *cfg = cJSON_Parse(text);
        free(text);
        const cJSON *ct = cJSON_GetObjectItemCaseSensitive(cfg, "chat_template");
        char *src = cJSON_IsString(ct) ? strdup(ct->valuestring) : NULL;
        cJSON_Delete(cfg);
        return src;
    }
    snprintf(path, sizeof path, DATA "/%s", name);
    return test_read_file(path, NULL);
}

/* <dir>/<name>__<vars>.expected, as ref.mjs's caseName(). */
static void case_name(const char *dir, const char *tname, const char *vname, char *out, size_t cap) {
    const char *base = strrchr(tname, '/') ? strrchr(tname, '/') + 1 : tname;
    char t[256];
    if (!strcmp(base, "tokenizer_config.json")) {
        const char *parent = tname;
        for (const char *p = tname; p < base - 1; p++)
            if (*p == '/' || *p == ':') parent = p + 1;
        snprintf(t, sizeof t, "%.*s", (int)(base - 1 - parent), parent);
    } else {
        snprintf(t, sizeof t, "%s", base);
        char *dot = strstr(t, ".jinja");
        if (dot) *dot = 0;
    }
    char v[256];
    snprintf(v, sizeof v, "%s", vname);
    char *dot = strstr(v, ".json");
    if (dot) *dot = 0;
    snprintf(out, cap, DATA "/%s/%s__%s.expected", dir, t, v);
}

static void show_diff(const char *got, size_t gn, const char *want, size_t wn) {
    size_t i = 0;
    while (i < gn && i < wn && got[i] == want[i]) i++;
    size_t from = i > 60 ? i - 60 : 0;
    fprintf(stderr, "    first difference at byte %zu (got %zu bytes, want %zu)\n    got:  [%.*s]\n    want: [%.*s]\n", i,
            gn, wn, (int)((gn - from) > 140 ? 140 : gn - from), got + from, (int)((wn - from) > 140 ? 140 : wn - from),
            want + from);
}

/* Renders every pair of list and compares with dir's expected files;
 * returns the number of pairs. */
static int run_cases(const char *list_file, const char *dir) {
    char lpath[512];
    snprintf(lpath, sizeof lpath, DATA "/%s", list_file);
    char *list = test_read_file(lpath, NULL);
    CHECK(list != NULL);
    if (!list) return 0;
    int n = 0, bad = 0;
    for (char *line = strtok(list, "\n"); line; line = strtok(NULL, "\n")) {
        char tname[512], vname[256];
        if (line[0] == '#' || sscanf(line, "%511s %255s", tname, vname) != 2) continue;
        char path[1024], expected_path[1024];
        case_name(dir, tname, vname, expected_path, sizeof expected_path);
        snprintf(path, sizeof path, DATA "/vars/%s", vname);
        char *src = load_template(tname), *vars = test_read_file(path, NULL);
        size_t wn = 0;
        char *want = test_read_file(expected_path, &wn);
        n++;
        if (!src || !vars || !want) {
            fprintf(stderr, "  %s + %s: missing %s\n", tname, vname, !src ? "template" : !vars ? "vars" : expected_path);
            bad++;
        } else {
            chat_template *t = NULL;
            cJSON *v = cJSON_Parse(vars);
            char *got = NULL;
            size_t gn = 0;
            brisk_status s = chat_template_new(src, strlen(src), &t);
            if (s == BRISK_OK) s = chat_template_render_at(t, v, 1764633600, &got, &gn);
            bool want_error = !strcmp(want, "ERROR\n");
            if (want_error ? s == BRISK_OK : s != BRISK_OK || gn != wn || memcmp(got, want, wn)) {
                bad++;
                fprintf(stderr, "  %s + %s: ", tname, vname);
                if (want_error) fprintf(stderr, "expected an error, got %zu bytes\n", gn);
                else if (s != BRISK_OK) fprintf(stderr, "%s\n", brisk_last_error());
                else {
                    fprintf(stderr, "output differs\n");
                    show_diff(got, gn, want, wn);
                }
            }
            free(got);
            cJSON_Delete(v);
            chat_template_free(t);
        }
        free(src);
        free(vars);
        free(want);
    }
    free(list);
    printf("  %s: %d renders, %d differ\n", list_file, n, bad);
    CHECK(bad == 0);
    return n;
}

static void test_ref_cases(void) { CHECK(run_cases("cases.txt", "expected") >= 100); }

/* Where @huggingface/jinja departs from Python (python_cases.txt says how). */
static void test_python_cases(void) { CHECK(run_cases("python_cases.txt", "expected_python") >= 6); }

/* ---- syntax and whitespace --------------------------------------------- */

static void test_text_and_comments(void) {
    CHECK_RENDER("", NULL, "");
    CHECK_RENDER("plain text", NULL, "plain text");
    CHECK_RENDER("a{# comment #}b", NULL, "ab");
    CHECK_RENDER("a {#- c -#} b", NULL, "ab");
    CHECK_RENDER("line\n", NULL, "line");           /* one trailing newline dropped */
    CHECK_RENDER("line\n\n", NULL, "line\n");
    CHECK_RENDER("a\r\nb\rc", NULL, "a\nb\nc");     /* newlines normalized */
    CHECK_RENDER("{% raw %}{{ x }}{% endraw %}", NULL, "{{ x }}");
    CHECK_RENDER("{%- raw -%}  {{ y }}  {%- endraw %}!", NULL, "{{ y }}!");
    CHECK_RENDER("{{ '{{' }}", NULL, "{{");
    CHECK_RENDER("{{ {'a': {'b': 1}}['a']['b'] }}", NULL, "1");
}

static void test_whitespace_control(void) {
    /* trim_blocks: the newline after a block tag goes; lstrip_blocks: the
     * indentation before it goes */
    CHECK_RENDER("{% if true %}\nyes\n{% endif %}\nafter", NULL, "yes\nafter");
    CHECK_RENDER("    {% if true %}\n    yes\n    {% endif %}\n", NULL, "    yes\n");
    CHECK_RENDER("a  {%- if true %} b {% endif -%}  c", NULL, "a b c");
    CHECK_RENDER("{{ 'x' }}\n{{ 'y' }}", NULL, "x\ny"); /* not after }} */
    CHECK_RENDER("a\n  {{- 'b' -}}  \nc", NULL, "abc");
    CHECK_RENDER("  {%+ if true %}x{% endif %}", NULL, "  x"); /* + keeps the indentation */
    CHECK_RENDER("{% if true +%}\nx{% endif %}", NULL, "\nx");   /* + keeps the newline */
    CHECK_RENDER("{# c #}\nx", NULL, "x");
    CHECK_RENDER("text {% if true %}x{% endif %}", NULL, "text x"); /* not at a line start */
    CHECK_RENDER("{% generation %}hi{% endgeneration %}", NULL, "hi");
    CHECK_RENDER("A\n{%- generation -%}\n hi \n{%- endgeneration -%}\nB", NULL, "AhiB");
}

static void test_literals_and_operators(void) {
    CHECK_RENDER("{{ 1 + 2 * 3 }} {{ (1 + 2) * 3 }} {{ 7 // 2 }} {{ -7 // 2 }} {{ 7 % 3 }} {{ -7 % 3 }}", NULL,
                 "7 9 3 -4 1 2");
    CHECK_RENDER("{{ 7 / 2 }} {{ 6 / 2 }} {{ 2 ** 10 }} {{ 2 ** -1 }} {{ 1.5 + 1 }} {{ 0.1 + 0.2 }}", NULL,
                 "3.5 3.0 1024 0.5 2.5 0.30000000000000004");
    CHECK_RENDER("{{ 1e20 }} {{ 1.5e-7 }} {{ 123456789.0 }} {{ -0.0 }} {{ 1_000 }}", NULL,
                 "1e+20 1.5e-07 123456789.0 -0.0 1000");
    CHECK_RENDER("{{ 'a' ~ 1 ~ none ~ true }} {{ 'ab' + 'cd' }} {{ 'ab' * 3 }} {{ [1] + [2] }}", NULL,
                 "a1NoneTrue abcd ababab [1, 2]");
    CHECK_RENDER("{{ \"it's\" }} {{ 'say \"hi\"' }} {{ 'a\\nb' }} {{ 'tab\\tx' }} {{ '\\u00e9\\x41' }} {{ 'a' 'b' }}",
                 NULL, "it's say \"hi\" a\nb tab\tx \xc3\xa9" "A ab");
    CHECK_RENDER("{{ 1 == 1.0 }} {{ true == 1 }} {{ 'a' != 'b' }} {{ [1, 2] == [1, 2] }} {{ {'a': 1} == {'a': 1} }}", NULL,
                 "True True True True True");
    CHECK_RENDER("{{ 1 < 2 }} {{ 'abc' < 'abd' }} {{ [1, 2] < [1, 3] }} {{ 2 >= 2 }}", NULL, "True True True True");
    CHECK_RENDER("{{ 'b' in 'abc' }} {{ 2 in [1, 2] }} {{ 'k' in {'k': 1} }} {{ 'z' not in 'abc' }} {{ 'x' in y }}",
                 NULL, "True True True True False");
    CHECK_RENDER("{{ none }}|{{ undefined_name }}|{{ true }}|{{ [1, 'a', none, 2.5] }}|{{ {'k': 'v', 'n': [true]} }}", NULL,
                 "None||True|[1, 'a', None, 2.5]|{'k': 'v', 'n': [True]}");
    CHECK_RENDER("{{ \"it's\" ~ [\"it's\"] }}", NULL, "it's[\"it's\"]");
    CHECK_RENDER("{{ (1, 2) }} {{ () }} {{ [] }} {{ {} }}", NULL, "[1, 2] [] [] {}");
    CHECK_RENDER("{{ 'x' if true else 'y' }}{{ 'x' if false else 'y' }}[{{ 'x' if false }}]", NULL, "xy[]");
    CHECK_RENDER("{{ 0 or 'b' }} {{ 'a' and 'b' }} {{ '' and 'b' }} {{ not 0 }} {{ not not 'x' }}", NULL, "b b  True True");
    CHECK_RENDER("{{ -3 | abs }} {{ - 2 ** 2 }} {{ -(2) }}", NULL, "3 4 -2");
    CHECK_RENDER("{{ 'x=%s' % 'a' }} {{ '%s-%d%%' % ('b', 7) }} {{ '%s and %s' | format(1, none) }}", NULL,
                 "x=a b-7% 1 and None");
    CHECK_RENDER("{{ x.y.z }}|{{ x['y'] }}|{{ none.attr }}", NULL, "||");
}

static void test_subscripts_and_slices(void) {
    const char *v = "{\"l\": [1, 2, 3, 4, 5], \"s\": \"h\u00e9llo\", \"d\": {\"k\": \"v\", \"n\": 2}}";
    CHECK_RENDER("{{ l[0] }} {{ l[-1] }} {{ l[9] }}|{{ l[1:3] }} {{ l[::-1] }} {{ l[::2] }} {{ l[-2:] }} {{ l[:-3] }}", v,
                 "1 5 |[2, 3] [5, 4, 3, 2, 1] [1, 3, 5] [4, 5] [1, 2]");
    CHECK_RENDER("{{ s[1] }} {{ s[::-1] }} {{ s[1:3] }} {{ s | length }} {{ s[-1] }}", v,
                 "\xc3\xa9 oll\xc3\xa9h \xc3\xa9l 5 o");
    CHECK_RENDER("{{ d.k }} {{ d['n'] }} {{ d.missing }}|{{ l.0 }}", v, "v 2 |1");
    CHECK_RENDER("{{ l[5:1:-2] }} {{ l[10:] }} {{ l[-10:2] }}", v, "[5, 3] [] [1, 2]");
}

static void test_control_flow(void) {
    const char *v = "{\"xs\": [\"a\", \"b\", \"c\"], \"d\": {\"one\": 1, \"two\": 2}}";
    CHECK_RENDER("{% for x in xs %}{{ loop.index }}{{ loop.index0 }}{{ loop.revindex }}{{ loop.revindex0 }}"
                 "{{ loop.first }}{{ loop.last }}{{ loop.length }} {% endfor %}", v,
                 "1032TrueFalse3 2121FalseFalse3 3210FalseTrue3 ");
    CHECK_RENDER("{% for x in xs %}{{ loop.previtem }}-{{ loop.nextitem }} {% endfor %}", v, "-b a-c b- ");
    CHECK_RENDER("{% for x in [] %}x{% else %}empty{% endfor %}", v, "empty");
    CHECK_RENDER("{% for k, v in d.items() %}{{ k }}={{ v }};{% endfor %}", v, "one=1;two=2;");
    CHECK_RENDER("{% for k, v in d | items %}{{ k }}={{ v }};{% endfor %}{% for k in d %}{{ k }}{% endfor %}", v,
                 "one=1;two=2;onetwo");
    CHECK_RENDER("{% for x in xs if x != 'b' %}{{ x }}{{ loop.length }}{% endfor %}", v, "a2c2");
    CHECK_RENDER("{% for x in xs %}{% if x == 'b' %}{% continue %}{% endif %}{% if x == 'c' %}{% break %}{% endif %}"
                 "{{ x }}{% endfor %}", v, "a");
    CHECK_RENDER("{% for x in 'h\u00e9' %}[{{ x }}]{% endfor %}", NULL, "[h][\xc3\xa9]");
    CHECK_RENDER("{% if false %}a{% elif 0 %}b{% elif 'x' %}c{% else %}d{% endif %}", NULL, "c");
    CHECK_RENDER("{% for i in range(3) %}{% for j in range(i) %}{{ i }}{{ j }} {% endfor %}{% endfor %}", NULL,
                 "10 20 21 ");
    CHECK_RENDER("{% for x in undefined_thing %}x{% else %}none{% endfor %}", NULL, "none");
    /* a set inside a loop does not leak out; a namespace does */
    CHECK_RENDER("{% set n = 0 %}{% set ns = namespace(n=0) %}{% for x in xs %}{% set n = n + 1 %}"
                 "{% set ns.n = ns.n + 1 %}{% endfor %}{{ n }} {{ ns.n }}", v, "0 3");
    CHECK_RENDER("{% set a, b = 1, 2 %}{{ a }}{{ b }}{% set t = (3, 4) %}{% set c, d = t %}{{ c }}{{ d }}", NULL, "1234");
    CHECK_RENDER("{% set x %}block {{ 1 + 1 }}{% endset %}[{{ x }}]", NULL, "[block 2]");
    CHECK_RENDER("{% with a = 1, b = 2 %}{{ a + b }}{% endwith %}[{{ a }}]", NULL, "3[]");
    CHECK_RENDER("{% filter upper %}abc {{ 'd' }}{% endfilter %}", NULL, "ABC D");
    CHECK_RENDER("{% for x in xs %}{{ loop.cycle('odd', 'even') }} {% endfor %}", v, "odd even odd ");
}

static void test_macros(void) {
    CHECK_RENDER("{% macro greet(name, punct='!') %}Hi {{ name }}{{ punct }}{% endmacro %}"
                 "{{ greet('A') }} {{ greet('B', '?') }} {{ greet(punct='.', name='C') }}", NULL, "Hi A! Hi B? Hi C.");
    CHECK_RENDER("{% macro m() %}{{ varargs }}{{ kwargs }}{% endmacro %}{{ m(1, 2, k=3) }}", NULL, "[1, 2]{'k': 3}");
    CHECK_RENDER("{% macro wrap(tag) %}<{{ tag }}>{{ caller() }}</{{ tag }}>{% endmacro %}"
                 "{% call wrap('b') %}bold{% endcall %}", NULL, "<b>bold</b>");
    CHECK_RENDER("{% macro each(xs) %}{% for x in xs %}{{ caller(x) }}{% endfor %}{% endmacro %}"
                 "{% call(item) each([1, 2]) %}({{ item }}){% endcall %}", NULL, "(1)(2)");
    CHECK_RENDER("{% set g = 'global' %}{% macro show() %}{{ g }}{% endmacro %}{{ show() }}", NULL, "global");
    CHECK_RENDER("{% macro fact(n) %}{% if n <= 1 %}1{% else %}{{ n * fact(n - 1) | int }}{% endif %}{% endmacro %}"
                 "{{ fact(5) }}", NULL, "120");
    CHECK_RENDER("{% macro m(a, b=a ~ '!') %}{{ b }}{% endmacro %}{{ m('x') }}", NULL, "x!");
}

/* ---- filters, tests, methods ------------------------------------------- */

static void test_filters(void) {
    const char *v = "{\"users\": [{\"name\": \"bob\", \"age\": 30, \"tags\": [\"a\"]}, {\"name\": \"Al\", \"age\": 25},"
                    " {\"name\": \"cy\", \"age\": 35, \"admin\": true}], \"d\": {\"b\": 2, \"a\": 1}}";
    CHECK_RENDER("{{ '  x  ' | trim }}|{{ 'xxaxx' | trim('x') }}|{{ 'Ab' | lower }}{{ 'Ab' | upper }}|"
                 "{{ 'hello world' | capitalize }}|{{ 'hello big-world' | title }}", NULL,
                 "x|a|abAB|Hello world|Hello Big-World");
    CHECK_RENDER("{{ [1, 2, 3] | length }} {{ 'h\u00e9' | count }} {{ {'a': 1} | length }} {{ [3, 1] | first }}"
                 " {{ [3, 1] | last }} {{ 'abc' | first }} {{ 'abc' | reverse }} {{ [1, 2] | reverse }}", NULL,
                 "3 2 1 3 1 a cba [2, 1]");
    CHECK_RENDER("{{ ['a', 'b'] | join(', ') }} {{ [1, 2] | join }} {{ users | join('/', attribute='name') }}", v,
                 "a, b 12 bob/Al/cy");
    CHECK_RENDER("{{ users | map(attribute='name') | list }} {{ users | map(attribute='tags.0', default='-') | list }}",
                 v, "['bob', 'Al', 'cy'] ['a', '-', '-']");
    CHECK_RENDER("{{ ['a', 'B'] | map('upper') | join }} {{ users | selectattr('admin') | map(attribute='name') | first }}"
                 " {{ users | rejectattr('age', 'gt', 26) | map(attribute='name') | join }}", v, "AB cy Al");
    CHECK_RENDER("{{ [1, 2, 3, 4] | select('odd') | list }} {{ [1, 2, 3, 4] | reject('even') | list }}"
                 " {{ ['a', none, 'b'] | select | list }} {{ users | selectattr('name', 'equalto', 'Al') | list | length }}",
                 v, "[1, 3] [1, 3] ['a', 'b'] 1");
    CHECK_RENDER("{{ [3, 1, 2] | sort }} {{ ['b', 'A', 'c'] | sort }} {{ ['b', 'A', 'c'] | sort(case_sensitive=true) }}"
                 " {{ users | sort(attribute='age', reverse=true) | map(attribute='name') | join(',') }}", v,
                 "[1, 2, 3] ['A', 'b', 'c'] ['A', 'b', 'c'] cy,bob,Al");
    CHECK_RENDER("{{ d | dictsort }} {{ [1, 2, 1, 3] | unique | list }} {{ ['a', 'A', 'b'] | unique | list }}", v,
                 "[['a', 1], ['b', 2]] [1, 2, 3] ['a', 'b']");
    CHECK_RENDER("{{ x | default('dflt') }} {{ '' | default('dflt') }} {{ '' | default('dflt', true) }} {{ none | d('n') }}",
                 NULL, "dflt  dflt None");
    CHECK_RENDER("{{ '42' | int + 1 }} {{ '4.7' | int }} {{ 'x' | int }} {{ 'x' | int(7) }} {{ 3.9 | int }} {{ '2.5' | float }}"
                 " {{ 3 | float }} {{ true | int }}", NULL, "43 4 0 7 3 2.5 3.0 1");
    CHECK_RENDER("{{ 2.5 | round }} {{ 3.5 | round }} {{ 2.567 | round(2) }} {{ 2.1 | round(0, 'ceil') }} {{ -3 | abs }}",
                 NULL, "2.0 4.0 2.57 3.0 3");
    CHECK_RENDER("{{ 'a-b-a' | replace('a', 'x') }} {{ 'aaa' | replace('a', 'b', 2) }} {{ 'ab' | replace('', '-') }}", NULL,
                 "x-b-x bba -a-b-");
    CHECK_RENDER("{{ 1 | string }}{{ none | string }}{{ [1] | string }} {{ '<a href=\"x\">&' | e }} {{ '<b>' | safe }}",
                 NULL, "1None[1] &lt;a href=&#34;x&#34;&gt;&amp; <b>");
    CHECK_RENDER("{{ 'a\nb\n\nc' | indent(2) }}|{{ 'a\nb' | indent(2, true) }}|{{ 'x\n\ny' | indent(1, blank=true) }}",
                 NULL, "a\n  b\n\n  c|  a\n  b|x\n \n y");
    CHECK_RENDER("{{ [1, 2, 3] | sum }} {{ users | sum(attribute='age') }} {{ [3, 9, 2] | max }} {{ [3, 9, 2] | min }}"
                 " {{ 'one two  three' | wordcount }}", v, "6 90 9 2 3");
    CHECK_RENDER("{{ d | items | list }} {{ none | default }} {{ users[0] | attr('name') }} {{ 'ab' | list }}", v,
                 "[['b', 2], ['a', 1]] None bob ['a', 'b']");
}

static void test_tojson(void) {
    const char *v = "{\"o\": {\"s\": \"h\u00e9 \\\"q\\\" \\\\ \\n\\t\\u0001 \\ud83d\\ude00\", \"n\": 3, \"f\": 2.5, \"b\": true,"
                    " \"z\": null, \"l\": [1, [], {}], \"e\": {}}}";
    CHECK_RENDER("{{ o | tojson }}", v,
                 "{\"s\": \"h\xc3\xa9 \\\"q\\\" \\\\ \\n\\t\\u0001 \xf0\x9f\x98\x80\", \"n\": 3, \"f\": 2.5, \"b\": true,"
                 " \"z\": null, \"l\": [1, [], {}], \"e\": {}}");
    CHECK_RENDER("{{ o.l | tojson(indent=2) }}", v, "[\n  1,\n  [],\n  {}\n]");
    CHECK_RENDER("{{ {'b': 1, 'a': [1, 2]} | tojson(indent=4) }}", NULL,
                 "{\n    \"b\": 1,\n    \"a\": [\n        1,\n        2\n    ]\n}");
    CHECK_RENDER("{{ {'b': 1, 'a': 2} | tojson(sort_keys=true) }} {{ {'a': [1, 2]} | tojson(separators=(',', ':')) }}",
                 NULL, "{\"a\": 2, \"b\": 1} {\"a\":[1,2]}");
    CHECK_RENDER("{{ 'h\u00e9\U0001F600' | tojson(ensure_ascii=true) }} {{ x | tojson }} {{ 1.0 | tojson }} {{ 1e100 | tojson }}",
                 NULL, "\"h\\u00e9\\ud83d\\ude00\" null 1.0 1e+100");
    CHECK_RENDER("{% set ns = namespace(a=1) %}{{ ns | tojson }}", NULL, "{\"a\": 1}");
}

static void test_tests(void) {
    const char *v = "{\"s\": \"x\", \"n\": 1, \"f\": 1.5, \"l\": [1], \"d\": {\"k\": 1}, \"z\": null, \"b\": false}";
    CHECK_RENDER("{{ s is string }}{{ n is string }}{{ n is number }}{{ f is number }}{{ n is integer }}{{ f is float }}"
                 "{{ b is boolean }}{{ b is false }}{{ b is true }}", v, "TrueFalseTrueTrueTrueTrueTrueTrueFalse");
    CHECK_RENDER("{{ d is mapping }}{{ l is mapping }}{{ l is iterable }}{{ s is iterable }}{{ d is iterable }}"
                 "{{ n is iterable }}{{ l is sequence }}{{ d is sequence }}", v, "TrueFalseTrueTrueTrueFalseTrueTrue");
    CHECK_RENDER("{{ z is none }}{{ zz is defined }}{{ zz is undefined }}{{ z is defined }}{{ s is not none }}"
                 "{{ n is not string }}", v, "TrueFalseTrueTrueTrueTrue");
    CHECK_RENDER("{{ n is equalto 1 }}{{ n is eq(1) }}{{ s is in 'xyz' }}{{ 1 is in l }}{{ 4 is divisibleby 2 }}"
                 "{{ 3 is odd }}{{ 3 is even }}{{ 5 is gt 3 }}{{ 'a' is lower }}{{ 'A' is upper }}{{ range is callable }}",
                 v, "TrueTrueTrueTrueTrueTrueFalseTrueTrueTrueTrue");
    CHECK_RENDER("{{ not s is string }}{{ s is string and n is number }}", v, "FalseTrue");
}

static void test_string_methods(void) {
    CHECK_RENDER("{{ 'abc'.startswith('ab') }}{{ 'abc'.endswith('bc') }}{{ 'abc'.startswith(('x', 'a')) }}"
                 "{{ 'abc'.startswith('b', 1) }}", NULL, "TrueTrueTrueTrue");
    /* strip(chars) strips only those characters: Python, not JS's trim() */
    CHECK_RENDER("[{{ '\n a \n'.strip('\n') }}][{{ '  a  '.lstrip() }}][{{ '  a  '.rstrip() }}][{{ 'xxaxy'.strip('xy') }}]"
                 "[{{ '\xc3\xa9" "a\xc3\xa9'.strip('\xc3\xa9') }}]", NULL, "[ a ][a  ][  a][a][a]");
    CHECK_RENDER("{{ 'a,b,,c'.split(',') }} {{ '  a  b '.split() }} {{ 'a b c'.split(' ', 1) }} {{ 'a,b,c'.rsplit(',', 1) }}"
                 " {{ 'x'.split(',') }} {{ ''.split() }}", NULL,
                 "['a', 'b', '', 'c'] ['a', 'b'] ['a', 'b c'] ['a,b', 'c'] ['x'] []");
    CHECK_RENDER("{{ 'aXbXc'.replace('X', '-') }} {{ 'aaa'.replace('a', 'b', 1) }} {{ 'Hi'.upper() }}{{ 'Hi'.lower() }}"
                 " {{ 'hello world'.title() }} {{ 'hELLO'.capitalize() }}", NULL, "a-b-c baa HIhi Hello World Hello");
    CHECK_RENDER("{{ 'h\xc3\xa9llo'.find('l') }} {{ 'abc'.find('z') }} {{ 'abcabc'.rfind('b') }} {{ 'aaa'.count('a') }}"
                 " {{ ', '.join(['a', 'b']) }} {{ 'a\nb\r\nc'.splitlines() }} {{ '12'.isdigit() }}{{ 'a1'.isalpha() }}", NULL,
                 "2 -1 4 3 a, b ['a', 'b', 'c'] TrueFalse");
    const char *v = "{\"d\": {\"a\": 1, \"b\": [2]}}";
    CHECK_RENDER("{{ d.get('a') }} {{ d.get('x') }} {{ d.get('x', 'dflt') }} {{ d.keys() | list }} {{ d.values() | list }}"
                 " {{ d.items() | list }}", v, "1 None dflt ['a', 'b'] [1, [2]] [['a', 1], ['b', [2]]]");
}

static void test_globals(void) {
    CHECK_RENDER("{{ range(3) | list }} {{ range(1, 7, 2) | list }} {{ range(3, 0, -1) | list }} {{ range(0) | list }}", NULL,
                 "[0, 1, 2] [1, 3, 5] [3, 2, 1] []");
    CHECK_RENDER("{% set ns = namespace(a=1, b='x') %}{{ ns.a }}{{ ns.b }}{% set ns.a = ns.a + 1 %}{{ ns.a }}", NULL, "1x2");
    CHECK_RENDER("{{ dict(a=1, b=2) }} {{ dict(a=1).a }}", NULL, "{'a': 1, 'b': 2} 1");
    /* the test clock is 2025-12-02 00:00 UTC; local time may differ by a day */
    char *got;
    CHECK_OK(render("{{ strftime_now('%Y') }}", NULL, &got));
    CHECK(got && (!strcmp(got, "2025") || !strcmp(got, "2026")));
    free(got);
    chat_template *t;
    CHECK_OK(chat_template_new("{{ strftime_now('%d %b %Y') }}", 30, &t));
    char *now = NULL;
    size_t n = 0;
    CHECK_OK(chat_template_render(t, NULL, &now, &n));
    CHECK(now && n == 11);
    free(now);
    chat_template_free(t);
    /* Llama 3.2 takes strftime_now's date when date_string is not given */
    char *src = load_template("llama3.2.jinja");
    CHECK(src != NULL);
    if (src) {
        CHECK_OK(render(src, "{\"messages\": [{\"role\": \"user\", \"content\": \"hi\"}], \"bos_token\": \"<s>\"}", &got));
        CHECK(got && (strstr(got, "Today Date: 02 Dec 2025") || strstr(got, "Today Date: 01 Dec 2025")));
        free(got);
        free(src);
    }
}

/* Where @huggingface/jinja and Python's Jinja disagree, brisk follows Python
 * (what transformers runs): the Qwen3.5 tool call parameter rendering of
 * booleans and None, and Python's str() of lists. */
static void test_python_semantics_in_real_templates(void) {
    char *src = load_template("qwen3.5.jinja"), *got;
    CHECK(src != NULL);
    if (!src) return;
    CHECK_OK(render(src,
                    "{\"messages\": [{\"role\": \"user\", \"content\": \"go\"}, {\"role\": \"assistant\", \"content\": \"\","
                    " \"tool_calls\": [{\"function\": {\"name\": \"f\", \"arguments\": {\"flag\": true, \"none\": null,"
                    " \"n\": 2}}}]}]}",
                    &got));
    CHECK(got && strstr(got, "<parameter=flag>\nTrue\n</parameter>\n<parameter=none>\nNone\n</parameter>\n"
                             "<parameter=n>\n2\n</parameter>"));
    free(got);
    free(src);
}

/* ---- errors and limits ------------------------------------------------- */

static void test_syntax_errors(void) {
    CHECK_ERROR("{% if x %}open", NULL, BRISK_ERR_FORMAT, "line 1: 'if' opened on line 1 is never closed");
    CHECK_ERROR("a\n{% for x in y %}\n{% endif %}", NULL, BRISK_ERR_FORMAT, "line 3: unknown tag 'endif'");
    CHECK_ERROR("{{ x ", NULL, BRISK_ERR_FORMAT, "missing }}");
    CHECK_ERROR("{{ 'abc }}", NULL, BRISK_ERR_FORMAT, "unterminated string");
    CHECK_ERROR("{{ (1 + 2 }}", NULL, BRISK_ERR_FORMAT, "unexpected '}', expected ')'");
    CHECK_ERROR("{{ 1 + }}", NULL, BRISK_ERR_FORMAT, "expected an expression");
    CHECK_ERROR("x\n\n{{ a b }}", NULL, BRISK_ERR_FORMAT, "line 3: expected '}}', got 'b'");
    CHECK_ERROR("{# never closed", NULL, BRISK_ERR_FORMAT, "unterminated comment");
    CHECK_ERROR("{% break %}", NULL, BRISK_ERR_FORMAT, "'break' outside a for loop");
    CHECK_ERROR("{% endfor %}", NULL, BRISK_ERR_FORMAT, "unknown tag 'endfor'");
    CHECK_ERROR("{% frobnicate %}", NULL, BRISK_ERR_FORMAT, "unknown tag 'frobnicate'");
    CHECK_ERROR("{{ a ! b }}", NULL, BRISK_ERR_FORMAT, "unexpected character '!'");
    CHECK_ERROR("{{ x ) }}", NULL, BRISK_ERR_FORMAT, "unexpected ')' (unbalanced bracket)");
    CHECK_ERROR("{% macro m(a=1, b) %}{% endmacro %}", NULL, BRISK_ERR_FORMAT, "parameter without a default");
    CHECK_ERROR("{% raw %}never ends", NULL, BRISK_ERR_FORMAT, "{% raw %} without {% endraw %}");
}

static void test_unsupported_constructs(void) {
    CHECK_ERROR("{% include 'x.jinja' %}", NULL, BRISK_ERR_UNSUPPORTED, "line 1: unsupported tag 'include'");
    CHECK_ERROR("\n{% extends 'base' %}", NULL, BRISK_ERR_UNSUPPORTED, "line 2: unsupported tag 'extends'");
    CHECK_ERROR("{% import 'm' as m %}", NULL, BRISK_ERR_UNSUPPORTED, "unsupported tag 'import'");
    CHECK_ERROR("{% block body %}{% endblock %}", NULL, BRISK_ERR_UNSUPPORTED, "unsupported tag 'block'");
    CHECK_ERROR("{% do x.append(1) %}", NULL, BRISK_ERR_UNSUPPORTED, "unsupported tag 'do'");
    CHECK_ERROR("{% for x in y recursive %}{% endfor %}", NULL, BRISK_ERR_UNSUPPORTED, "recursive for loops");
    CHECK_ERROR("{{ x | frobnicate }}", NULL, BRISK_ERR_UNSUPPORTED, "unsupported filter 'frobnicate'");
    CHECK_ERROR("a\n{{ x | urlencode }}", NULL, BRISK_ERR_UNSUPPORTED, "line 2: unsupported filter 'urlencode'");
    CHECK_ERROR("{% if x is prime %}{% endif %}", NULL, BRISK_ERR_UNSUPPORTED, "unsupported test 'prime'");
    CHECK_ERROR("{{ f(*args) }}", NULL, BRISK_ERR_UNSUPPORTED, "*args");
    CHECK_ERROR("{{ '%x' % 1 }}", NULL, BRISK_ERR_UNSUPPORTED, "'%x' in string formatting");
}

static void test_runtime_errors(void) {
    CHECK_ERROR("x{{ raise_exception('System message must be at the beginning.') }}", NULL, BRISK_ERR_INVALID_ARG,
                "chat template error: System message must be at the beginning.");
    CHECK_ERROR("{{ 'a' + 1 }}", NULL, BRISK_ERR_FORMAT, "unsupported operand type(s) for +: 'str' and 'int'");
    CHECK_ERROR("\n{{ 'a' + nope }}", NULL, BRISK_ERR_FORMAT, "line 2: 'nope' is undefined");
    CHECK_ERROR("{{ 1 / 0 }}", NULL, BRISK_ERR_FORMAT, "division by zero");
    CHECK_ERROR("{{ 1 < 'a' }}", NULL, BRISK_ERR_FORMAT, "not supported between 'int' and 'str'");
    CHECK_ERROR("{{ nope() }}", NULL, BRISK_ERR_FORMAT, "'nope' is undefined");
    CHECK_ERROR("{{ 'x'.nope() }}", NULL, BRISK_ERR_UNSUPPORTED, "unsupported string method 'nope'");
    CHECK_ERROR("{{ 1 in 2 }}", NULL, BRISK_ERR_FORMAT, "argument of type 'int' is not iterable");
    CHECK_ERROR("{% for x in 5 %}{% endfor %}", NULL, BRISK_ERR_FORMAT, "'int' object is not iterable");
    CHECK_ERROR("{% set x = 1 %}{% set x.a = 2 %}", NULL, BRISK_ERR_FORMAT, "only on a namespace()");
    CHECK_ERROR("{% set a, b = [1] %}", NULL, BRISK_ERR_FORMAT, "cannot unpack 1 value(s) into 2 name(s)");
    CHECK_ERROR("{% macro m(a) %}{% endmacro %}{{ m(1, 2) }}", NULL, BRISK_ERR_FORMAT, "takes not more than 1 argument");
    CHECK_ERROR("{% macro m(a) %}{% endmacro %}{{ m(b=2) }}", NULL, BRISK_ERR_FORMAT, "no keyword argument 'b'");
    CHECK_ERROR("{{ 'abc'.split('') }}", NULL, BRISK_ERR_FORMAT, "empty separator");
    CHECK_ERROR("{{ '%s %s' % 'a' }}", NULL, BRISK_ERR_FORMAT, "not enough arguments");
    CHECK_ERROR("{{ '%d' % 'a' }}", NULL, BRISK_ERR_FORMAT, "a number is required");
    CHECK_ERROR("{{ 9223372036854775807 + 1 }}", NULL, BRISK_ERR_RANGE, "integer overflow");
    CHECK_ERROR("{{ {'a': 1} | items | tojson }}{{ range | tojson }}", NULL, BRISK_ERR_FORMAT, "not JSON serializable");
    /* the bad variables JSON: not an object */
    chat_template *t;
    CHECK_OK(chat_template_new("x", 1, &t));
    cJSON *arr = cJSON_CreateArray();
    char *out = NULL;
    CHECK(chat_template_render(t, arr, &out, NULL) == BRISK_ERR_INVALID_ARG);
    CHECK(out == NULL);
    cJSON_Delete(arr);
    chat_template_free(t);
}

static void test_limits(void) {
    CHECK_ERROR("{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}", NULL, BRISK_ERR_RANGE, "nesting deeper than");
    CHECK_ERROR("{% set r = range(100000) %}{% for i in r %}{% for j in r %}{% endfor %}{% endfor %}", NULL, BRISK_ERR_RANGE,
                "loop iterations");
    CHECK_ERROR("{{ range(1000000) }}", NULL, BRISK_ERR_RANGE, "range() of more than 100000 items");
    CHECK_ERROR("{{ 'x' * 100000000000 }}", NULL, BRISK_ERR_RANGE, "larger than");
    CHECK_ERROR("{% for i in range(100000) %}{{ 'x' * 1000 }}{% endfor %}", NULL, BRISK_ERR_RANGE, "output larger than");
    CHECK_ERROR("{% set ns = namespace(s='xxxxxxxxxxxxxxxx') %}{% for i in range(40) %}{% set ns.s = ns.s ~ ns.s %}"
                "{% endfor %}", NULL, BRISK_ERR_RANGE, "longer than");
    /* a deep expression is refused at parse time, not by a stack overflow */
    size_t depth = 5000;
    char *deep = malloc(depth * 2 + 16);
    strcpy(deep, "{{ ");
    for (size_t i = 0; i < depth; i++) strcat(deep, "(");
    strcat(deep, "1");
    for (size_t i = 0; i < depth; i++) strcat(deep, ")");
    strcat(deep, " }}");
    CHECK_ERROR(deep, NULL, BRISK_ERR_RANGE, "deeper than 200");
    free(deep);
    deep = malloc(depth * 4 + 16);
    strcpy(deep, "{{ ");
    for (size_t i = 0; i < depth; i++) strcat(deep, "not ");
    strcat(deep, "1 }}");
    CHECK_ERROR(deep, NULL, BRISK_ERR_RANGE, "nesting deeper than 200");
    free(deep);
    deep = malloc(depth * 16 + 16);
    deep[0] = 0;
    for (size_t i = 0; i < depth; i++) strcat(deep, "{% if 1 %}");
    CHECK_ERROR(deep, NULL, BRISK_ERR_RANGE, "nesting deeper than 200");
    free(deep);
    /* self-referencing namespace */
    CHECK_ERROR("{% set ns = namespace() %}{% set ns.me = ns %}{{ ns | tojson }}", NULL, BRISK_ERR_RANGE, "nested too deeply");
    /* a failed render leaves nothing behind and the template stays usable */
    chat_template *t;
    const char *src = "{{ x.y }}";
    CHECK_OK(chat_template_new(src, strlen(src), &t));
    char *out;
    size_t n;
    cJSON *v = cJSON_Parse("{\"x\": {\"y\": \"ok\"}}");
    CHECK_OK(chat_template_render(t, v, &out, &n));
    CHECK(n == 2 && !strcmp(out, "ok"));
    free(out);
    cJSON_Delete(v);
    chat_template_free(t);
    chat_template_free(NULL);
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"ref_cases", test_ref_cases},
        {"python_cases", test_python_cases},
        {"text_and_comments", test_text_and_comments},
        {"whitespace_control", test_whitespace_control},
        {"literals_and_operators", test_literals_and_operators},
        {"subscripts_and_slices", test_subscripts_and_slices},
        {"control_flow", test_control_flow},
        {"macros", test_macros},
        {"filters", test_filters},
        {"tojson", test_tojson},
        {"tests", test_tests},
        {"string_methods", test_string_methods},
        {"globals", test_globals},
        {"python_semantics_in_real_templates", test_python_semantics_in_real_templates},
        {"syntax_errors", test_syntax_errors},
        {"unsupported_constructs", test_unsupported_constructs},
        {"runtime_errors", test_runtime_errors},
        {"limits", test_limits},
    };
    return test_main(cases, (int)(sizeof cases / sizeof cases[0]), argc, argv);
}
