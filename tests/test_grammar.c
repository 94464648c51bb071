/* test_grammar.c — GBNF parsing and errors, byte matching, JSON schema to
 * grammar, token masks over the Qwen vocabulary (checked against matching
 * every piece one by one) and grammar-constrained sampling. */
#include <cjson/cJSON.h>

#include "brisk.h"
#include "engine/grammar.h"
#include "test.h"

/* Whether text is (prefix: may still become) a sentence of the grammar. */
static int match(const char *gbnf, const char *text, bool prefix) {
    brisk_grammar *g = NULL;
    if (brisk_grammar_new(NULL, gbnf, NULL, &g) != BRISK_OK) {
        fprintf(stderr, "  parse failed: %s\n", brisk_last_error());
        return -1;
    }
    bool ok = grammar_accept_bytes(g, text, strlen(text)) && (prefix || grammar_is_complete(g));
    brisk_grammar_free(g);
    return ok;
}

/* The error message of a bad grammar ("" when it parses). */
static const char *parse_error(const char *gbnf) {
    brisk_grammar *g = NULL;
    if (brisk_grammar_new(NULL, gbnf, NULL, &g) == BRISK_OK) {
        brisk_grammar_free(g);
        return "";
    }
    return brisk_last_error();
}

static void test_parse_errors(void) {
    CHECK(strstr(parse_error("root ::= foo\n"), "line 1, column 10: rule 'foo' is used but not defined"));
    CHECK(strstr(parse_error("root ::= \"a\"\nx = \"b\"\n"), "line 2, column 3: unexpected '='"));
    CHECK(strstr(parse_error("root ::= \"abc\n"), "line 1, column 10: unterminated string"));
    CHECK(strstr(parse_error("root ::= [a-z\n"), "unterminated character class"));
    CHECK(strstr(parse_error("root ::= \"\\q\"\n"), "unknown escape"));
    CHECK(strstr(parse_error("root ::= \"a\"{3,1}\n"), "maximum is below the minimum"));
    CHECK(strstr(parse_error("root ::= (\"a\"\n"), "without a matching ')'"));
    CHECK(strstr(parse_error("root ::= \"a\" )\n"), "')' without a matching '('"));
    CHECK(strstr(parse_error("root ::= root \"a\" | \"b\"\n"), "'root' is left-recursive"));
    CHECK(strstr(parse_error("root ::= x\nx ::= y? root\ny ::= \"a\"\n"), "left-recursive"));
    CHECK(strstr(parse_error("x ::= \"a\"\n"), "no rule named 'root'"));
    CHECK(strstr(parse_error("root ::= \"a\"\nroot ::= \"b\"\n"), "line 2, column 1: rule 'root' is defined twice"));
    CHECK(strstr(parse_error("root ::= \"a\"{99999999}\n"), "too large"));
    CHECK(strstr(parse_error("root ::= [\\u00e9-\\u00e0]\n"), "below its start"));
    CHECK(strstr(parse_error("root ::= *\n"), "unexpected '*'"));
}

static void test_match(void) {
    const char *g = "# a comment\n"
                    "root ::= greeting (\" \" name)? \"!\"{1,3}   # trailing\n"
                    "greeting ::= \"hi\" | \"hello\"\n"
                    "  | \"hey\"\n"
                    "name ::= [A-Z] [a-z]* digits?\n"
                    "digits ::= [0-9]{2}\n";
    CHECK(match(g, "hi!", false) == 1);
    CHECK(match(g, "hey Bob!!!", false) == 1);
    CHECK(match(g, "hello Al42!", false) == 1);
    CHECK(match(g, "hello Al4!", false) == 0);
    CHECK(match(g, "hi!!!!", false) == 0);
    CHECK(match(g, "hi bob!", false) == 0);
    CHECK(match(g, "hell", true) == 1);
    CHECK(match(g, "hell", false) == 0);
    /* negated classes, escapes, any char, + and {m,} */
    const char *h = "root ::= [^\"\\\\\\n]+ \"\\x21\" . {2,} \"\\t\"\n";
    CHECK(match(h, "abc!xy\t", false) == 1);
    CHECK(match(h, "abc!x\t", false) == 0);
    CHECK(match(h, "a\"c!xy\t", false) == 0);
    CHECK(match(h, "!xy\t", false) == 0);
    /* ambiguity: both parses live until the end */
    CHECK(match("root ::= \"a\"* \"a\" \"b\" | \"a\"+ \"c\"\n", "aaab", false) == 1);
    CHECK(match("root ::= \"a\"* \"a\" \"b\" | \"a\"+ \"c\"\n", "aaac", false) == 1);
    /* empty alternatives and nullable rules */
    CHECK(match("root ::= x x \"z\"\nx ::= | \"y\"\n", "yz", false) == 1);
    CHECK(match("root ::= x x \"z\"\nx ::= | \"y\"\n", "yyyz", false) == 0);
}

static void test_utf8(void) {
    const char *g = "root ::= [一-龥]+ \"é\" [^a-z]\n";
    CHECK(match(g, "中文éЖ", false) == 1);
    CHECK(match(g, "中文éa", false) == 0);
    CHECK(match(g, "éЖ", false) == 0);
    /* a partial character: the lead byte of 中 is a prefix, of é (C3) is not, at the start */
    CHECK(match(g, "\xE4\xB8", true) == 1);
    CHECK(match(g, "\xC3", true) == 0);
    CHECK(match(g, "\xFF", true) == 0);
    CHECK(match("root ::= .\n", "\xC0\x80", true) == 0); /* overlong */
    CHECK(match("root ::= .\n", "\xED\xA0\x80", true) == 0); /* surrogate */
}


/* llama.cpp's example grammars parse (when the local clone is there). */
static void test_llamacpp_grammars(void) {
    static const char *const names[] = {"json", "json_arr", "arithmetic", "c", "chess", "english", "japanese", "list"};
    int found = 0;
    for (size_t i = 0; i < sizeof names / sizeof *names; i++) {
        char path[256];
        snprintf(path, sizeof path, ".deps/llama.cpp/grammars/%s.gbnf", names[i]);
        char *text = test_read_file(path, NULL);
        if (!text) continue;
        found++;
        brisk_grammar *g = NULL;
        brisk_status st = brisk_grammar_new(NULL, text, NULL, &g);
        if (st != BRISK_OK) fprintf(stderr, "  %s: %s\n", path, brisk_last_error());
        CHECK(st == BRISK_OK);
        if (!strcmp(names[i], "json") && g) {
            const char *doc = "{\"a\": [1, 2.5e3, \"x\\u00e9\"], \"b\": {\"c\": null}}";
            CHECK(grammar_accept_bytes(g, doc, strlen(doc)) && grammar_is_complete(g));
        }
        if (!strcmp(names[i], "arithmetic") && g) CHECK(grammar_accept_bytes(g, "(1+2)*3", 7));
        brisk_grammar_free(g);
        free(text);
    }
    if (!found) test_skip(1, "no .deps/llama.cpp/grammars (make deps)");
}

static int schema_match(const char *schema, const char *doc) {
    brisk_grammar *g = NULL;
    if (brisk_grammar_from_json_schema(NULL, schema, &g) != BRISK_OK) {
        fprintf(stderr, "  schema failed: %s\n", brisk_last_error());
        return -1;
    }
    int ok = grammar_accept_bytes(g, doc, strlen(doc)) && grammar_is_complete(g);
    brisk_grammar_free(g);
    return ok;
}

static const char *person_schema =
    "{\"type\":\"object\",\"properties\":{"
    "\"name\":{\"type\":\"string\",\"minLength\":1,\"maxLength\":8},"
    "\"age\":{\"type\":\"integer\"},"
    "\"tags\":{\"type\":\"array\",\"items\":{\"enum\":[\"a\",\"b\",3,null]},\"minItems\":1,\"maxItems\":3},"
    "\"pet\":{\"anyOf\":[{\"type\":\"null\"},{\"$ref\":\"#/$defs/pet\"}]},"
    "\"ok\":{\"type\":[\"boolean\",\"number\"]}},"
    "\"required\":[\"name\",\"age\"],\"additionalProperties\":false,"
    "\"$defs\":{\"pet\":{\"type\":\"object\",\"properties\":{\"kind\":{\"const\":\"cat\"},"
    "\"next\":{\"anyOf\":[{\"$ref\":\"#/$defs/pet\"},{\"type\":\"null\"}]}},\"required\":[\"kind\",\"next\"]}}}";

static void test_json_schema(void) {
    CHECK(schema_match(person_schema, "{\"name\":\"Al\",\"age\":3}") == 1);
    CHECK(schema_match(person_schema, "{ \"name\": \"Al\",\n  \"age\": -30, \"tags\": [\"a\", 3, null], \"ok\": true }") == 1);
    CHECK(schema_match(person_schema, "{\"name\":\"Al\",\"age\":3,\"pet\":{\"kind\":\"cat\",\"next\":{\"kind\":\"cat\",\"next\":null}}}") == 1);
    CHECK(schema_match(person_schema, "{\"name\":\"Al\",\"age\":3,\"ok\":1.5e3}") == 1);
    CHECK(schema_match(person_schema, "{\"age\":3}") == 0);                        /* required */
    CHECK(schema_match(person_schema, "{\"age\":3,\"name\":\"Al\"}") == 0);         /* order */
    CHECK(schema_match(person_schema, "{\"name\":\"\",\"age\":3}") == 0);           /* minLength */
    CHECK(schema_match(person_schema, "{\"name\":\"123456789\",\"age\":3}") == 0);  /* maxLength */
    CHECK(schema_match(person_schema, "{\"name\":\"Al\",\"age\":3.5}") == 0);       /* integer */
    CHECK(schema_match(person_schema, "{\"name\":\"Al\",\"age\":3,\"x\":1}") == 0); /* additional */
    CHECK(schema_match(person_schema, "{\"name\":\"Al\",\"age\":3,\"tags\":[]}") == 0);
    CHECK(schema_match(person_schema, "{\"name\":\"Al\",\"age\":3,\"tags\":[3,3,3,3]}") == 0);
    CHECK(schema_match(person_schema, "{\"name\":\"Al\",\"age\":3,\"pet\":{\"kind\":\"dog\",\"next\":null}}") == 0);
    CHECK(schema_match(person_schema, "{\"name\":\"Al\",\"age\":3}           ") == 0); /* bounded whitespace */
    CHECK(schema_match("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", "{\"a\":1,\"b\":2}") == 1);
    CHECK(schema_match("{\"type\":\"object\",\"additionalProperties\":{\"type\":\"integer\"}}", "{\"a\":\"x\"}") == 0);
    CHECK(schema_match("{}", "[1,{\"a\":\"b\"},null]") == 1);
    CHECK(schema_match("{\"type\":\"array\",\"maxItems\":0}", "[]") == 1);
    CHECK(schema_match("{\"const\":\"a\\\"b\\\\\\n\"}", "\"a\\\"b\\\\\\n\"") == 1);
    brisk_grammar *g = NULL;
    CHECK(brisk_grammar_from_json_schema(NULL, NULL, &g) == BRISK_OK); /* json_object */
    CHECK(g && grammar_accept_bytes(g, "{\"a\": [1]}", 10) && grammar_is_complete(g));
    brisk_grammar_free(g);
    /* errors name the keyword's path */
    CHECK(brisk_grammar_from_json_schema(NULL, "{\"type\":", &g) == BRISK_ERR_INVALID_ARG);
    CHECK(brisk_grammar_from_json_schema(NULL, "{\"type\":\"strin\"}", &g) == BRISK_ERR_INVALID_ARG);
    CHECK(strstr(brisk_last_error(), "unknown type 'strin'"));
    CHECK(brisk_grammar_from_json_schema(NULL, "{\"properties\":{\"a\":{\"pattern\":\"x\"}}}", &g) == BRISK_ERR_UNSUPPORTED);
    CHECK(strstr(brisk_last_error(), "schema.properties.a: 'pattern' is not supported"));
    CHECK(brisk_grammar_from_json_schema(NULL, "{\"$ref\":\"#/$defs/nope\"}", &g) == BRISK_ERR_INVALID_ARG);
    CHECK(brisk_grammar_from_json_schema(NULL, "{\"properties\":{},\"required\":[\"x\"]}", &g) == BRISK_ERR_INVALID_ARG);
}

/* $ref as an RFC 6901 JSON pointer in a URI fragment: ~1 for '/', ~0 for '~' (one pass, so "~01" is
 * the key "~1"), %XX decoded first, any depth, a digit token indexing an array; a pointer naming
 * nothing, a bad ~ or % escape and a leading-zero index are INVALID_ARG with a message, another
 * document or an anchor UNSUPPORTED. Before, only #, #/$defs/NAME and #/definitions/NAME resolved. */
/* Whether schema t is {"const": want, ...}. */
static bool const_is(const cJSON *t, const char *want) {
    const cJSON *c = cJSON_GetObjectItemCaseSensitive(t, "const");
    return cJSON_IsString(c) && !strcmp(c->valuestring, want);
}

static void test_json_schema_ref(void) {
    const char *doc_text =
        "{\"$defs\":{\"a/b\":{\"const\":\"slash\"},\"m~n\":{\"const\":\"tilde\"},\"~1\":{\"const\":\"lit\"},"
        "\"x\":{\"type\":\"integer\"},\"a\":{\"properties\":{\"b\":{\"const\":\"deep\"}}},"
        "\"sp ce\":{\"const\":\"sp\"}},"
        "\"anyOf\":[{\"type\":\"null\"},{\"enum\":[\"e0\",\"e1\"]}],\"properties\":{\"p\":{\"type\":\"boolean\"}}}";
    cJSON *doc = cJSON_Parse(doc_text);
    const cJSON *t = NULL;
    if (!doc) {
        CHECK(doc);
        return;
    }
    CHECK(json_schema_ref(doc, "#", &t) == BRISK_OK && t == doc);
    CHECK_OK(json_schema_ref(doc, "#/$defs/a~1b", &t));
    CHECK(const_is(t, "slash"));
    CHECK_OK(json_schema_ref(doc, "#/$defs/m~0n", &t));
    CHECK(const_is(t, "tilde"));
    CHECK_OK(json_schema_ref(doc, "#/$defs/~01", &t)); /* "~1", not "/" */
    CHECK(const_is(t, "lit"));
    CHECK_OK(json_schema_ref(doc, "#/%24defs/x", &t));
    CHECK(t == cJSON_GetObjectItem(cJSON_GetObjectItem(doc, "$defs"), "x"));
    CHECK_OK(json_schema_ref(doc, "#/%24defs/sp%20ce", &t));
    CHECK(const_is(t, "sp"));
    CHECK_OK(json_schema_ref(doc, "#/$defs/a/properties/b", &t));
    CHECK(const_is(t, "deep"));
    CHECK_OK(json_schema_ref(doc, "#/anyOf/1", &t));
    CHECK(t == cJSON_GetArrayItem(cJSON_GetObjectItem(doc, "anyOf"), 1));
    CHECK_OK(json_schema_ref(doc, "#/anyOf/1/enum/0", &t));
    CHECK(cJSON_IsString(t) && !strcmp(t->valuestring, "e0"));
    /* names nothing: a missing key, an index past the end or with a leading zero, "-", a step into a scalar */
    static const char *const nowhere[] = {"#/$defs/nope", "#/anyOf/2", "#/anyOf/01", "#/anyOf/-", "#/anyOf/x",
                                          "#/$defs/x/type/0", "#/$defs/a~1b/const/c", "#/$defs/a/b"};
    for (size_t i = 0; i < sizeof nowhere / sizeof *nowhere; i++) {
        bool ok = json_schema_ref(doc, nowhere[i], &t) == BRISK_ERR_INVALID_ARG && !t &&
                  strstr(brisk_last_error(), "points nowhere");
        if (!ok) fprintf(stderr, "  %s: %s\n", nowhere[i], brisk_last_error());
        CHECK(ok);
    }
    CHECK(json_schema_ref(doc, "#/%24defs/%zz", &t) == BRISK_ERR_INVALID_ARG && !t);
    CHECK(strstr(brisk_last_error(), "bad percent escape '%zz'"));
    CHECK(json_schema_ref(doc, "#/$defs/x%2", &t) == BRISK_ERR_INVALID_ARG);
    CHECK(json_schema_ref(doc, "#/$defs/x%00", &t) == BRISK_ERR_INVALID_ARG);
    CHECK(json_schema_ref(doc, "#/$defs/m~2n", &t) == BRISK_ERR_INVALID_ARG);
    CHECK(strstr(brisk_last_error(), "'~' must be followed by 0 or 1"));
    CHECK(json_schema_ref(doc, "#/$defs/m~", &t) == BRISK_ERR_INVALID_ARG);
    CHECK(json_schema_ref(doc, "other.json#/$defs/x", &t) == BRISK_ERR_UNSUPPORTED);
    CHECK(json_schema_ref(doc, "http://example.com/s.json", &t) == BRISK_ERR_UNSUPPORTED);
    CHECK(json_schema_ref(doc, "#x", &t) == BRISK_ERR_UNSUPPORTED); /* an anchor */
    cJSON_Delete(doc);

    /* the same through the grammar: escaped names, a pointer into properties and into an array */
    const char *schema =
        "{\"type\":\"object\",\"properties\":{"
        "\"s\":{\"$ref\":\"#/$defs/a~1b\"},\"t\":{\"$ref\":\"#/$defs/m~0n\"},\"n\":{\"$ref\":\"#/%24defs/x\"},"
        "\"b\":{\"$ref\":\"#/properties/flag\"},\"e\":{\"$ref\":\"#/$defs/list/anyOf/1\"},"
        "\"flag\":{\"type\":\"boolean\"}},\"required\":[\"s\",\"t\",\"n\",\"b\",\"e\"],"
        "\"$defs\":{\"a/b\":{\"const\":\"slash\"},\"m~n\":{\"const\":\"tilde\"},\"x\":{\"type\":\"integer\"},"
        "\"list\":{\"anyOf\":[{\"type\":\"null\"},{\"enum\":[\"e0\",\"e1\"]}]}}}";
    CHECK(schema_match(schema, "{\"s\":\"slash\",\"t\":\"tilde\",\"n\":3,\"b\":true,\"e\":\"e1\"}") == 1);
    CHECK(schema_match(schema, "{\"s\":\"tilde\",\"t\":\"tilde\",\"n\":3,\"b\":true,\"e\":\"e1\"}") == 0);
    CHECK(schema_match(schema, "{\"s\":\"slash\",\"t\":\"tilde\",\"n\":\"3\",\"b\":true,\"e\":\"e1\"}") == 0);
    CHECK(schema_match(schema, "{\"s\":\"slash\",\"t\":\"tilde\",\"n\":3,\"b\":1,\"e\":\"e1\"}") == 0);
    CHECK(schema_match(schema, "{\"s\":\"slash\",\"t\":\"tilde\",\"n\":3,\"b\":true,\"e\":null}") == 0);
    /* a recursive pointer into properties: a list of lists */
    CHECK(schema_match("{\"properties\":{\"l\":{\"type\":\"array\",\"items\":{\"$ref\":\"#/properties/l\"}}}}",
                       "{\"l\":[[],[[]]]}") == 1);
    brisk_grammar *g = NULL;
    CHECK(brisk_grammar_from_json_schema(NULL, "{\"$ref\":\"#/%24defs/%zz\",\"$defs\":{}}", &g) ==
          BRISK_ERR_INVALID_ARG);
    CHECK(strstr(brisk_last_error(), "json schema: schema: $ref '#/%24defs/%zz': bad percent escape '%zz'"));
    CHECK(brisk_grammar_from_json_schema(NULL, "{\"properties\":{\"a\":{\"$ref\":\"#/properties/b\"}}}", &g) ==
          BRISK_ERR_INVALID_ARG);
    CHECK(strstr(brisk_last_error(), "schema.properties.a: $ref '#/properties/b' points nowhere"));
    CHECK(brisk_grammar_from_json_schema(NULL, "{\"$ref\":\"other.json#/$defs/x\"}", &g) == BRISK_ERR_UNSUPPORTED);
    CHECK(!g);
    /* two spellings of one pointer name one node: one rule for it, not one per spelling */
    cJSON *two = cJSON_Parse("{\"properties\":{\"a\":{\"$ref\":\"#/$defs/x\"},\"b\":{\"$ref\":\"#/%24defs/x\"},"
                             "\"c\":{\"$ref\":\"#/%24defs/%78\"}},\"$defs\":{\"x\":{\"enum\":[\"xval\"]}}}");
    json_gbnf *jb = NULL;
    char *text = NULL;
    CHECK_OK(json_gbnf_new(&jb));
    CHECK_OK(json_gbnf_add(jb, two, NULL, "root-x"));
    CHECK_OK(json_gbnf_take(jb, &text));
    int n_rules = 0;
    for (const char *q = text; q && (q = strstr(q, "xval")); q++) n_rules++;
    if (n_rules != 1) fprintf(stderr, "  the enum's rule appears %d times in:\n%s\n", n_rules, text ? text : "");
    CHECK(n_rules == 1);
    free(text);
    cJSON_Delete(two);
}

/* json_gbnf: two schemas under the caller's names in one text, each $ref resolved in its own
 * document (the same $defs name means another schema in each); a name that could clash with a
 * generated one refused; a schema error kept and returned by take. */
static void test_json_gbnf(void) {
    cJSON *a = cJSON_Parse("{\"type\":\"object\",\"properties\":{\"u\":{\"$ref\":\"#/$defs/unit\"}},"
                           "\"$defs\":{\"unit\":{\"enum\":[\"c\",\"f\"]}}}");
    cJSON *b = cJSON_Parse("{\"properties\":{\"u\":{\"$ref\":\"#/$defs/unit\"}},\"required\":[\"u\"],"
                           "\"$defs\":{\"unit\":{\"type\":\"integer\"}}}");
    json_gbnf *jb = NULL;
    char *text = NULL;
    CHECK_OK(json_gbnf_new(&jb));
    if (!jb || !a || !b) goto out;
    CHECK_OK(json_gbnf_add(jb, cJSON_GetObjectItem(cJSON_GetObjectItem(a, "properties"), "u"), a, "a-unit"));
    CHECK_OK(json_gbnf_add(jb, b, NULL, "b_all-1"));
    CHECK(json_gbnf_add(jb, b, NULL, "s1") == BRISK_ERR_INVALID_ARG); /* could be a generated name */
    CHECK(json_gbnf_add(jb, b, NULL, "a b") == BRISK_ERR_INVALID_ARG);
    CHECK_OK(json_gbnf_take(jb, &text));
    jb = NULL;
    if (!text) goto out;
    CHECK(!strstr(text, "root ::="));
    char gbnf[8192];
    snprintf(gbnf, sizeof gbnf, "%sroot ::= a-unit \"|\" b_all-1\n", text);
    CHECK(match(gbnf, "\"c\"|{\"u\": 3}", false) == 1);
    CHECK(match(gbnf, "\"f\"|{\"u\":-12}", false) == 1);
    CHECK(match(gbnf, "3|{\"u\": 3}", false) == 0);     /* a's unit is an enum of strings */
    CHECK(match(gbnf, "\"c\"|{\"u\": \"c\"}", false) == 0); /* b's is an integer */
    CHECK(match(gbnf, "\"c\"|{}", false) == 0);           /* b's u is required */
    free(text);
    text = NULL;
    /* an unsupported schema: its error stays */
    CHECK_OK(json_gbnf_new(&jb));
    if (!jb) goto out;
    cJSON *bad = cJSON_Parse("{\"type\":\"string\",\"pattern\":\"x\"}");
    CHECK(json_gbnf_add(jb, bad, NULL, "x-bad") == BRISK_ERR_UNSUPPORTED);
    CHECK(json_gbnf_add(jb, b, NULL, "x-good") == BRISK_ERR_UNSUPPORTED);
    CHECK(json_gbnf_take(jb, &text) == BRISK_ERR_UNSUPPORTED && !text);
    jb = NULL;
    cJSON_Delete(bad);
out:
    json_gbnf_free(jb);
    free(text);
    cJSON_Delete(a);
    cJSON_Delete(b);
}

/* The mask of g's state equals piece-by-piece matching on a copy of the text so far. */
static void check_mask(brisk_model *m, brisk_grammar *g, const char *gbnf, const char *so_far) {
    int n_allowed = 0, nv = brisk_n_vocab(m), bad = 0, count = 0;
    const uint32_t *mask = grammar_mask(g, &n_allowed);
    CHECK(mask != NULL);
    if (!mask) return;
    brisk_grammar *ref = NULL;
    CHECK_OK(brisk_grammar_new(NULL, gbnf, NULL, &ref));
    if (!ref) return;
    CHECK(grammar_accept_bytes(ref, so_far, strlen(so_far)));
    for (int t = 0; t < nv; t++) {
        char piece[256];
        size_t len = 0;
        bool want;
        if (brisk_token_is_eog(m, t)) want = grammar_is_complete(ref);
        else if (brisk_token_to_piece(m, t, false, piece, sizeof piece, &len) != BRISK_OK || len == 0) want = false;
        else want = grammar_would_accept(ref, piece, len); /* byte by byte, no trie */
        bool got = mask[t >> 5] >> (t & 31) & 1;
        count += got;
        if (got != want && bad++ < 5) fprintf(stderr, "  token %d: mask %d, matching %d\n", t, got, want);
    }
    CHECK(bad == 0);
    CHECK(count == n_allowed);
    brisk_grammar_free(ref);
}

static void test_masks(void) {
    brisk_model *m = test_qwen2_vocab();
    if (!m) return; /* skipped, or failed saying why */
    /* a small grammar: the reference check builds one matcher per token */
    const char *gbnf = "root ::= \"{\" ws \"\\\"k\\\"\" ws \":\" ws (num | str) ws \"}\"\n"
                       "num ::= [0-9]{1,3}\nstr ::= \"\\\"\" [^\"\\\\]{0,4} \"\\\"\"\nws ::= [ \\n]{0,2}\n";
    brisk_grammar *g = NULL;
    CHECK_OK(brisk_grammar_new(m, gbnf, NULL, &g));
    if (g) {
        check_mask(m, g, gbnf, "");
        const char *steps[] = {"{", " \"k\"", ":", " \"", "é", "\""};
        char so_far[64] = "";
        for (size_t i = 0; i < sizeof steps / sizeof *steps; i++) {
            CHECK(grammar_accept_bytes(g, steps[i], strlen(steps[i])));
            strcat(so_far, steps[i]);
            if (i == 3 || i == 4) check_mask(m, g, gbnf, so_far); /* inside a string; after a partial limit */
        }
        CHECK(!brisk_grammar_is_complete(g));
        CHECK(grammar_accept_bytes(g, "}", 1));
        CHECK(brisk_grammar_is_complete(g));
        int n = 0;
        const uint32_t *mask = grammar_mask(g, &n);
        brisk_token eos = brisk_token_eos(m);
        CHECK(mask && n >= 1 && (mask[eos >> 5] >> (eos & 31) & 1));
        CHECK(brisk_grammar_accept(g, eos) == BRISK_OK);
        brisk_grammar_free(g);
    }
    brisk_model_free(m);
}

/* Sampling random logits under a schema's grammar gives text the schema's grammar accepts. */
static void test_sampling(void) {
    brisk_model *m = test_qwen2_vocab();
    if (!m) return; /* skipped, or failed saying why */
    int nv = brisk_n_vocab(m);
    float *logits = malloc((size_t)nv * sizeof *logits);
    uint64_t x = 12345;
    for (int round = 0; round < 2; round++) {
        brisk_sampler_params sp = brisk_sampler_default_params();
        sp.temp = round ? 1.0f : 0.0f;
        sp.top_k = 0, sp.top_p = 1.0f, sp.min_p = 0.0f, sp.seed = (uint64_t)round;
        brisk_sampler *s = NULL;
        brisk_grammar *g = NULL;
        CHECK_OK(brisk_sampler_new(&sp, nv, &s));
        CHECK_OK(brisk_grammar_from_json_schema(m, person_schema, &g));
        if (!s || !g) {
            brisk_sampler_free(s);
            brisk_grammar_free(g);
            break;
        }
        brisk_sampler_set_grammar(s, g);
        char text[8192] = "";
        size_t len = 0;
        bool ended = false;
        for (int step = 0; step < 400 && !ended; step++) {
            for (int i = 0; i < nv; i++) { /* random logits, a fresh draw each step */
                x ^= x << 13, x ^= x >> 7, x ^= x << 17;
                logits[i] = (float)(x >> 40) / (float)(1 << 24) * 8.0f;
            }
            brisk_token t = brisk_sampler_sample(s, logits);
            brisk_sampler_accept(s, t);
            if (brisk_token_is_eog(m, t)) {
                ended = true;
                break;
            }
            size_t pl = 0;
            CHECK_OK(brisk_token_to_piece(m, t, false, text + len, sizeof text - len - 1, &pl));
            len += pl;
            text[len] = 0;
        }
        CHECK(ended);
        CHECK(schema_match(person_schema, text) == 1);
        if (round == 0) printf("  greedy: %s\n", text);
        brisk_sampler_free(s);
    }
    free(logits);
    brisk_model_free(m);
}

static const char *const TOOL_CALL[] = {"<tool_call>"}; /* a lazy grammar's one trigger */

/* Feeds text's tokens (parse_special: "<tool_call>" may be one token) to g; the last one's mask after. */
static void feed(brisk_model *m, brisk_grammar *g, const char *text, bool parse_special) {
    brisk_token toks[256];
    int64_t n = 0;
    CHECK_OK(brisk_tokenize(m, text, strlen(text), false, parse_special, toks, 256, &n));
    for (int64_t i = 0; i < n; i++) CHECK_OK(brisk_grammar_accept(g, toks[i]));
}

/* A lazy grammar: free text until its trigger (not inside <think>..</think>), then constrained. */
static void test_lazy(void) {
    brisk_model *m = test_qwen2_vocab();
    if (!m) return; /* skipped, or failed saying why */
    const char *gbnf = "root ::= \"<tool_call>\" [0-9]+ \"</tool_call>\"\n";
    for (int special = 0; special < 2; special++) {
        brisk_grammar *g = NULL;
        CHECK_OK(brisk_grammar_new(m, gbnf, NULL, &g));
        if (!g) break;
        /* bad triggers: one the grammar does not start with; a lone skip word */
        CHECK(brisk_grammar_set_triggers(g, (const char *const[]){"<tool"}, 1, "<think>", NULL, false) == BRISK_ERR_INVALID_ARG);
        CHECK(brisk_grammar_set_triggers(g, (const char *const[]){"<call>"}, 1, NULL, NULL, false) == BRISK_ERR_INVALID_ARG);
        CHECK(!brisk_grammar_waiting(g));
        CHECK_OK(brisk_grammar_set_triggers(g, TOOL_CALL, 1, "<think>", "</think>", true));
        CHECK(brisk_grammar_set_triggers(g, TOOL_CALL, 1, NULL, NULL, false) == BRISK_ERR_INVALID_ARG);
        int n = 0;
        /* inside the thinking the prompt opened, then in a new one: the trigger does not fire */
        feed(m, g, "I could use <tool_call> here.</think>Sure: <think>or <tool_call>?</think> yes", special);
        CHECK(brisk_grammar_waiting(g));
        CHECK(grammar_mask(g, &n) == NULL); /* unconstrained */
        CHECK(brisk_grammar_is_complete(g));
        feed(m, g, " <tool_call>12", special);
        CHECK(!brisk_grammar_waiting(g));
        CHECK(!brisk_grammar_is_complete(g));
        const uint32_t *mask = grammar_mask(g, &n);
        brisk_token eos = brisk_token_eos(m), hello[8];
        int64_t nh = 0;
        CHECK_OK(brisk_tokenize(m, " hello", 6, false, false, hello, 8, &nh));
        CHECK(mask && n > 0 && !(mask[eos >> 5] >> (eos & 31) & 1) && !(mask[hello[0] >> 5] >> (hello[0] & 31) & 1));
        feed(m, g, "3</tool_call>", special);
        CHECK(brisk_grammar_is_complete(g));
        brisk_grammar_free(g);
    }
    /* sampling: free random text, then the trigger's tokens steered in by their logits; from there the
     * grammar holds the text and ends it */
    int nv = brisk_n_vocab(m);
    float *logits = malloc((size_t)nv * sizeof *logits);
    brisk_token trig[8];
    int64_t nt = 0;
    CHECK_OK(brisk_tokenize(m, "<tool_call>", 11, false, false, trig, 8, &nt));
    brisk_sampler_params sp = brisk_sampler_default_params();
    sp.temp = 1.0f, sp.top_k = 0, sp.top_p = 1.0f, sp.min_p = 0.0f, sp.seed = 7;
    brisk_sampler *s = NULL;
    brisk_grammar *g = NULL;
    CHECK_OK(brisk_sampler_new(&sp, nv, &s));
    CHECK_OK(brisk_grammar_new(m, gbnf, NULL, &g));
    if (logits && s && g && nt > 1) {
        CHECK_OK(brisk_grammar_set_triggers(g, TOOL_CALL, 1, NULL, NULL, false));
        brisk_sampler_set_grammar(s, g);
        char text[4096] = "";
        size_t len = 0;
        uint64_t x = 99;
        bool ended = false;
        for (int step = 0; step < 200 && !ended; step++) {
            for (int i = 0; i < nv; i++) x ^= x << 13, x ^= x >> 7, x ^= x << 17, logits[i] = (float)(x >> 40) / (float)(1 << 24) * 8.0f;
            if (step >= 20 && step < 20 + nt) logits[trig[step - 20]] = 1e4f;
            brisk_token t = brisk_sampler_sample(s, logits);
            brisk_sampler_accept(s, t);
            if (brisk_token_is_eog(m, t)) ended = true;
            else {
                size_t pl = 0;
                CHECK_OK(brisk_token_to_piece(m, t, false, text + len, sizeof text - len - 1, &pl));
                len += pl;
                text[len] = 0;
            }
        }
        const char *at = strstr(text, "<tool_call>");
        CHECK(ended && at && !brisk_grammar_waiting(g));
        CHECK(at && match(gbnf, at, false) == 1);
        if (at) printf("  lazy: %s\n", at);
    } else
        brisk_grammar_free(g);
    brisk_sampler_free(s);
    free(logits);
    brisk_model_free(m);
}

/* Several triggers: each one the grammar must start with; any of them starts it, the longest across
 * many tokens too (the text kept between tokens is as long as the longest word), and the grammar reads
 * from that one on; text that only looks like one does not. */
static void test_lazy_triggers(void) {
    brisk_model *m = test_qwen2_vocab();
    if (!m) return;
    const char *gbnf = "root ::= (\"<tool_call>\" | \"<fn=\" [a-z]+ \">\") [0-9]+ \"</tool_call>\"\n";
    static const char *const trig[] = {"<tool_call>", "<fn=a>", "<fn=abcdefghijklmnopqrst>"};
    static const char *const cases[][2] = { /* free text, then the text from the trigger on */
        {"Sure: ", "<fn=a>1"},
        {"Sure: ", "<fn=abcdefghijklmnopqrst>1"}, /* over several tokens */
        {"Sure: <fn=ab>1 <fn=abcdefghijklmnopqrs> ", "<tool_call>1"},
    };
    for (size_t i = 0; i < sizeof cases / sizeof *cases; i++) {
        brisk_grammar *g = NULL;
        CHECK_OK(brisk_grammar_new(m, gbnf, NULL, &g));
        if (!g) break;
        /* bad lists: none, an empty word, one word the grammar does not start with */
        CHECK(brisk_grammar_set_triggers(g, trig, 0, NULL, NULL, false) == BRISK_ERR_INVALID_ARG);
        CHECK(brisk_grammar_set_triggers(g, (const char *const[]){"<fn=a>", ""}, 2, NULL, NULL, false) ==
              BRISK_ERR_INVALID_ARG);
        CHECK(brisk_grammar_set_triggers(g, (const char *const[]){"<fn=a>", "<call>"}, 2, NULL, NULL, false) ==
              BRISK_ERR_INVALID_ARG);
        CHECK(!brisk_grammar_waiting(g));
        CHECK_OK(brisk_grammar_set_triggers(g, trig, 3, NULL, NULL, false));
        feed(m, g, cases[i][0], false);
        bool ok = brisk_grammar_waiting(g);
        feed(m, g, cases[i][1], false);
        ok = ok && !brisk_grammar_waiting(g) && !brisk_grammar_is_complete(g) && !grammar_would_accept(g, "x", 1);
        feed(m, g, "2</tool_call>", false);
        ok = ok && brisk_grammar_is_complete(g);
        if (!ok) fprintf(stderr, "  case %zu: %s%s\n", i, cases[i][0], cases[i][1]);
        CHECK(ok);
        brisk_grammar_free(g);
    }
    brisk_model_free(m);
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"parse_errors", test_parse_errors}, {"match", test_match},   {"utf8", test_utf8},
        {"llamacpp_grammars", test_llamacpp_grammars}, {"json_schema", test_json_schema},
        {"json_schema_ref", test_json_schema_ref}, {"json_gbnf", test_json_gbnf},
        {"masks", test_masks}, {"sampling", test_sampling}, {"lazy", test_lazy},
        {"lazy_triggers", test_lazy_triggers},
    };
    return test_main(cases, sizeof cases / sizeof *cases, argc, argv);
}
