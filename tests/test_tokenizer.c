/* test_tokenizer.c — conformance of src/tokenizer against llama.cpp:
 * the vocab test vectors of llama.cpp v0.4.0 (models/ggml-vocab-*.gguf.inp/out,
 * encoded with add_special = false, parse_special = false as its
 * test-tokenizer-0 does), decode round trips, the Qwen3 tokenizer.json
 * against the qwen2 GGUF, stories260K SPM cases, and a live comparison with
 * llama.cpp's own llama_tokenize (dlopen) on tests/data/multilingual.txt. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <time.h>

#include "format/gguf.h"
#include "test.h"
#include "tokenizer/tokenizer.h"

static const char *const k_vocabs[] = {"llama-spm", "phi-3", "gpt-2", "qwen2", "llama-bpe", "qwen35"};
#define N_VOCABS 6


static double now_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

/* CPU time of this process: steadier than wall time on a shared machine. */
static double cpu_ms(void) {
    struct timespec ts;
    clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &ts);
    return ts.tv_sec * 1e3 + ts.tv_nsec / 1e6;
}

static tokenizer *load_vocab(const char *name) {
    char path[1024];
    snprintf(path, sizeof path, "%s/data/llama.cpp-vocab/ggml-vocab-%s.gguf", test_shared_dir(), name);
    gguf_file *g = NULL;
    tokenizer *t = NULL;
    CHECK_OK(gguf_open(path, &g));
    if (!g) return NULL;
    CHECK_OK(tokenizer_from_gguf(g, &t));
    gguf_close(g);
    return t;
}

/* Encodes into a malloc'd array (caller frees). */
static int32_t *encode(const tokenizer *t, const char *s, size_t len, bool add_special,
                       bool parse_special, int64_t *n) {
    int64_t cap = (int64_t)len + 8;
    int32_t *ids = malloc((size_t)cap * sizeof *ids);
    brisk_status st = tokenizer_encode(t, s, len, add_special, parse_special, ids, cap, n);
    if (st != BRISK_OK) {
        fprintf(stderr, "  encode: %s\n", brisk_last_error());
        *n = -1;
    }
    return ids;
}

static char *decode(const tokenizer *t, const int32_t *ids, int64_t n, size_t *len) {
    size_t cap = 16;
    char *buf = malloc(cap);
    brisk_status st = tokenizer_decode(t, ids, n, false, buf, cap, len);
    if (st == BRISK_ERR_RANGE) {
        free(buf);
        cap = *len + 1;
        buf = malloc(cap);
        st = tokenizer_decode(t, ids, n, false, buf, cap, len);
    }
    if (st != BRISK_OK) *len = 0;
    return buf;
}

static void print_ids(const char *tag, const int32_t *ids, int64_t n) {
    fprintf(stderr, "    %s:", tag);
    for (int64_t i = 0; i < n && i < 40; i++) fprintf(stderr, " %d", ids[i]);
    fprintf(stderr, "\n");
}

/* Runs the .inp/.out pairs of one vocab; returns failures. */
static int run_vectors(const tokenizer *t, const char *name, int *n_cases, int *n_roundtrip_bad) {
    char path[1024];
    snprintf(path, sizeof path, "%s/data/llama.cpp-vocab/ggml-vocab-%s.gguf.inp", test_shared_dir(), name);
    size_t inp_len;
    char *inp = test_read_file(path, &inp_len);
    snprintf(path, sizeof path, "%s/data/llama.cpp-vocab/ggml-vocab-%s.gguf.out", test_shared_dir(), name);
    char *outp = test_read_file(path, NULL);
    CHECK(inp && outp);
    if (!inp || !outp) {
        free(inp), free(outp);
        return 1;
    }
    static const char sep[] = "\n__ggml_vocab_test__\n";
    int bad = 0, cases = 0;
    char *p = inp, *line = outp;
    for (;;) {
        char *e = strstr(p, sep);
        if (!e || !line || !*line) break;
        size_t len = (size_t)(e - p);
        char *nl = strchr(line, '\n');
        if (nl) *nl = 0;
        int32_t want[4096];
        int64_t nw = 0;
        for (char *q = line;;) {
            char *end;
            long v = strtol(q, &end, 10);
            if (end == q) break;
            want[nw++] = (int32_t)v;
            q = end;
        }
        int64_t n;
        int32_t *got = encode(t, p, len, false, false, &n);
        bool ok = n == nw && memcmp(got, want, (size_t)n * sizeof *got) == 0;
        if (!ok) {
            bad++;
            if (bad <= 3) {
                fprintf(stderr, "  %s: mismatch on '%.*s'\n", name, (int)len, p);
                print_ids("want", want, nw);
                print_ids("got ", got, n);
            }
        }
        if (n >= 0) {
            size_t dl;
            char *d = decode(t, got, n, &dl);
            if (dl != len || memcmp(d, p, len) != 0) (*n_roundtrip_bad)++;
            free(d);
        }
        free(got);
        cases++;
        p = e + sizeof sep - 1;
        line = nl ? nl + 1 : NULL;
    }
    *n_cases = cases;
    free(inp);
    free(outp);
    return bad;
}

static void test_vocab_vectors(void) {
    for (int v = 0; v < N_VOCABS; v++) {
        double t0 = now_ms();
        tokenizer *t = load_vocab(k_vocabs[v]);
        double t1 = now_ms();
        if (!t) continue;
        int cases = 0, rt_bad = 0;
        int bad = run_vectors(t, k_vocabs[v], &cases, &rt_bad);
        printf("  %-10s n_vocab %6d load %6.1f ms: %d/%d match, %d decode round-trip differences\n",
               k_vocabs[v], tokenizer_n_vocab(t), t1 - t0, cases - bad, cases, rt_bad);
        CHECK(cases >= 40);
        CHECK(bad == 0);
        /* llama.cpp's detokenizer is lossless except for gpt2/llama3's clean_spaces */
        if (strcmp(k_vocabs[v], "gpt-2") && strcmp(k_vocabs[v], "llama-bpe")) CHECK(rt_bad == 0);
        tokenizer_free(t);
    }
}

static void test_load_speed(void) {
    double best = 1e9;
    for (int i = 0; i < 3; i++) {
        double t0 = cpu_ms();
        tokenizer *t = load_vocab("qwen35");
        double dt = cpu_ms() - t0;
        if (dt < best) best = dt;
        tokenizer_free(t);
    }
    printf("  qwen35 vocab load (gguf_open + tokenizer_from_gguf): %.1f ms CPU\n", best);
    const char *san = getenv("SAN");
    /* target: well under 100 ms on an idle machine (~55 ms measured); the
     * check is a loose regression guard that survives a busy machine */
    if (!san || strcmp(san, "1")) CHECK(best < 200);

    /* encode speed on ~1 MB of the multilingual text */
    size_t tlen;
    char *text = test_read_file("tests/data/multilingual.txt", &tlen);
    CHECK(text != NULL);
    if (!text) return;
    size_t reps = (1 << 20) / tlen + 1, big_len = reps * tlen;
    char *big = malloc(big_len);
    for (size_t i = 0; i < reps; i++) memcpy(big + i * tlen, text, tlen);
    const char *names[] = {"llama-spm", "qwen2", "llama-bpe"};
    for (int v = 0; v < 3; v++) {
        tokenizer *t = load_vocab(names[v]);
        if (!t) continue;
        double t0 = now_ms();
        int64_t n;
        int32_t *ids = encode(t, big, big_len, false, true, &n);
        double dt = now_ms() - t0;
        printf("  encode %-9s %.2f MB in %.0f ms: %.1f MB/s, %.2f M tokens/s\n", names[v],
               big_len / 1e6, dt, big_len / 1e3 / dt, n / 1e3 / dt);
        CHECK(n > 0);
        free(ids);
        tokenizer_free(t);
    }
    free(big);
    free(text);
}

static void test_special(void) {
    tokenizer *t = load_vocab("qwen2");
    if (!t) return;
    static const char txt[] = "<|im_start|>user\nhi<|im_end|><think>x</think>";
    int64_t n1, n2;
    int32_t *a = encode(t, txt, sizeof txt - 1, false, true, &n1);
    int32_t *b = encode(t, txt, sizeof txt - 1, false, false, &n2);
    CHECK(n1 > 0 && a[0] == 151644);
    CHECK(n2 > n1);
    CHECK(tokenizer_is_eog(t, 151645)); /* <|im_end|> */
    CHECK(tokenizer_is_eog(t, 151643)); /* <|endoftext|> */
    CHECK(!tokenizer_is_eog(t, 151644));
    CHECK(!tokenizer_add_bos(t));
    char buf[64];
    size_t len;
    CHECK_OK(tokenizer_token_to_piece(t, 151645, false, buf, sizeof buf, &len));
    CHECK(len == 0);
    CHECK_OK(tokenizer_token_to_piece(t, 151645, true, buf, sizeof buf, &len));
    CHECK(len == 10 && !memcmp(buf, "<|im_end|>", 10));
    CHECK(tokenizer_token_to_piece(t, 151645, true, buf, 4, &len) == BRISK_ERR_RANGE && len == 10);
    free(a), free(b);
    tokenizer_free(t);

    t = load_vocab("llama-spm");
    if (!t) return;
    CHECK(tokenizer_add_bos(t) && tokenizer_bos(t) == 1 && tokenizer_eos(t) == 2);
    CHECK(tokenizer_is_eog(t, 2));
    int64_t n;
    a = encode(t, "<s>Hello</s>", 12, true, true, &n);
    CHECK(n >= 4 && a[0] == 1 && a[1] == 1 && a[n - 1] == 2);
    free(a);
    tokenizer_free(t);
    t = load_vocab("llama-bpe");
    if (!t) return;
    CHECK(tokenizer_add_bos(t) && tokenizer_bos(t) == 128000);
    CHECK(tokenizer_is_eog(t, 128009)); /* <|eot_id|> */
    tokenizer_free(t);
}

static void test_qwen3_json(void) {
    char p1[1024], p2[1024];
    snprintf(p1, sizeof p1, "%s/data/qwen3-tokenizer/tokenizer.json", test_shared_dir());
    snprintf(p2, sizeof p2, "%s/data/qwen3-tokenizer/tokenizer_config.json", test_shared_dir());
    double t0 = now_ms();
    tokenizer *j = NULL;
    CHECK_OK(tokenizer_from_hf_json(p1, p2, &j));
    double t1 = now_ms();
    tokenizer *g = load_vocab("qwen2");
    if (!j || !g) {
        tokenizer_free(j), tokenizer_free(g);
        return;
    }
    printf("  qwen3 tokenizer.json load: %.1f ms\n", t1 - t0);
    CHECK(tokenizer_n_vocab(j) == 151669);
    CHECK(tokenizer_eos(j) == 151645);
    CHECK(tokenizer_bos(j) == -1 && !tokenizer_add_bos(j));
    int type_diff = 0;
    /* the test GGUF is the Qwen2 vocab: ids from 151646 on are [PADn] there */
    for (int32_t i = 0; i < 151646; i++) {
        size_t l1, l2;
        const char *a = tokenizer_token_text(j, i, &l1), *b = tokenizer_token_text(g, i, &l2);
        if (l1 != l2 || memcmp(a, b, l1) || tokenizer_token_type(j, i) != tokenizer_token_type(g, i)) {
            if (type_diff++ < 3)
                fprintf(stderr, "  id %d: json '%s' type %d, gguf '%s' type %d\n", (int)i, a,
                        tokenizer_token_type(j, i), b, tokenizer_token_type(g, i));
        }
        CHECK(tokenizer_is_eog(j, i) == tokenizer_is_eog(g, i));
    }
    CHECK(type_diff == 0);
    /* user-defined tokens (<think>) are matched even without parse_special */
    {
        int64_t n;
        int32_t *ids = encode(j, "a<think>b", 9, false, false, &n);
        CHECK(n == 3 && ids[1] == 151667);
        free(ids);
    }
    /* every qwen2 and qwen35 test string, plus the multilingual text, both ways of parse_special */
    const char *files[] = {"llama.cpp-vocab/ggml-vocab-qwen2.gguf.inp", "llama.cpp-vocab/ggml-vocab-qwen35.gguf.inp"};
    int cases = 0, bad = 0;
    for (int f = 0; f < 2; f++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/data/%s", test_shared_dir(), files[f]);
        char *inp = test_read_file(path, NULL);
        CHECK(inp != NULL);
        for (char *p = inp, *e; inp && (e = strstr(p, "\n__ggml_vocab_test__\n")); p = e + 21) {
            for (int ps = 0; ps < 2; ps++) {
                int64_t n1, n2;
                int32_t *a = encode(j, p, (size_t)(e - p), false, ps, &n1);
                int32_t *b = encode(g, p, (size_t)(e - p), false, ps, &n2);
                cases++;
                if (n1 != n2 || memcmp(a, b, (size_t)n1 * sizeof *a)) bad++;
                free(a), free(b);
            }
        }
        free(inp);
    }
    printf("  qwen3 tokenizer.json vs qwen2 gguf: %d/%d match\n", cases - bad, cases);
    CHECK(bad == 0);
    tokenizer_free(j);
    tokenizer_free(g);
}

static void test_stories260k(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/data/stories260K/stories260K.gguf", test_shared_dir());
    gguf_file *g = NULL;
    tokenizer *t = NULL;
    CHECK_OK(gguf_open(path, &g));
    if (!g) return;
    CHECK_OK(tokenizer_from_gguf(g, &t));
    gguf_close(g);
    if (!t) return;
    /* from greedy_bos_256.json's spm_encode_cases */
    static const struct { const char *text; int32_t ids[32]; int n; } cases[] = {
        {"Once upon a time", {403, 407, 261, 378}, 4},
        {"Hello world", {346, 306, 414, 263, 304, 341}, 6},
        {" Lily and Tom went to the park.", {410, 317, 269, 274, 287, 263, 377, 267, 265, 282, 295, 433, 426}, 13},
        {"The quick brown fox jumps over the lazy dog.",
         {291, 410, 456, 425, 417, 340, 268, 420, 327, 416, 272, 414, 444, 410, 449, 425, 423, 427,
          419, 334, 330, 265, 278, 412, 451, 422, 400, 428, 426}, 29},
        {"\xc3\x9cn\xc3\xaf" "c\xc3\xb6" "d\xc3\xa9 \xf0\x9f\xa6\x99 123",
         {410, 198, 159, 416, 198, 178, 429, 198, 185, 418, 485, 410, 243, 162, 169, 156, 410, 475, 479, 472}, 20},
    };
    for (size_t c = 0; c < sizeof cases / sizeof cases[0]; c++) {
        int64_t n;
        int32_t *ids = encode(t, cases[c].text, strlen(cases[c].text), false, false, &n);
        bool ok = n == cases[c].n && !memcmp(ids, cases[c].ids, (size_t)n * sizeof *ids);
        if (!ok) {
            fprintf(stderr, "  stories260K '%s'\n", cases[c].text);
            print_ids("want", cases[c].ids, cases[c].n);
            print_ids("got ", ids, n);
        }
        CHECK(ok);
        size_t dl;
        char *d = decode(t, ids, n, &dl);
        CHECK(dl == strlen(cases[c].text) && !memcmp(d, cases[c].text, dl));
        free(d);
        free(ids);
    }
    int64_t n;
    int32_t *ids = encode(t, "Once upon a time", 16, true, false, &n);
    CHECK(n == 5 && ids[0] == 1);
    free(ids);
    tokenizer_free(t);
}

/* ---- live comparison with llama.cpp (dlopen) ----
 * Declarations mirrored from llama.cpp v0.4.0 include/llama.h (the Makefile
 * gives tests no -I for it). struct llama_model_params is 80 bytes with
 * vocab_only at offset 72 on x86-64; checked against the real header. */
typedef struct ll_model_params {
    void *devices;
    const void *tensor_buft_overrides;
    int32_t n_gpu_layers;
    int split_mode, load_mode, lazy_mode; /* enums */
    int32_t main_gpu;
    const float *tensor_split;
    void *progress_callback;
    void *progress_callback_user_data;
    const void *kv_overrides;
    bool vocab_only, check_tensors, use_extra_bufts, no_host, no_alloc, load_mtp;
} ll_model_params;
_Static_assert(sizeof(ll_model_params) == 80, "llama_model_params layout");

typedef struct ll_api {
    void (*backend_init)(void);
    void (*log_set)(void (*cb)(int, const char *, void *), void *);
    ll_model_params (*model_default_params)(void);
    void *(*model_load_from_file)(const char *, ll_model_params);
    void (*model_free)(void *);
    const void *(*model_get_vocab)(const void *);
    int32_t (*tokenize)(const void *, const char *, int32_t, int32_t *, int32_t, bool, bool);
    int32_t (*detokenize)(const void *, const int32_t *, int32_t, char *, int32_t, bool, bool);
} ll_api;

static void quiet_log(int level, const char *text, void *ud) { (void)level, (void)text, (void)ud; }

static void *open_llama(ll_api *L) {
    const char *dir = getenv("LLAMACPP_LIBDIR");
    const char *names[] = {"libllama.so", "libllama.v0.4.0.so"};
    void *h = NULL;
    char path[2048];
    for (int i = 0; i < 2 && !h && dir && *dir; i++) {
        snprintf(path, sizeof path, "%s/%s", dir, names[i]);
        h = dlopen(path, RTLD_NOW | RTLD_LOCAL);
    }
    if (!h) return NULL;
#define SYM(f, n) *(void **)&L->f = dlsym(h, n)
    SYM(backend_init, "llama_backend_init");
    SYM(log_set, "llama_log_set");
    SYM(model_default_params, "llama_model_default_params");
    SYM(model_load_from_file, "llama_model_load_from_file");
    SYM(model_free, "llama_model_free");
    SYM(model_get_vocab, "llama_model_get_vocab");
    SYM(tokenize, "llama_tokenize");
    SYM(detokenize, "llama_detokenize");
#undef SYM
    if (!L->backend_init || !L->model_default_params || !L->model_load_from_file ||
        !L->model_free || !L->model_get_vocab || !L->tokenize || !L->detokenize) {
        dlclose(h);
        return NULL;
    }
    return h;
}

static void test_llamacpp_live(void) {
    int no_ref = test_env_switch("BRISK_NO_LLAMACPP");
    if (no_ref < 0) return;
    if (no_ref) SKIP("BRISK_NO_LLAMACPP=1");
    if (getenv("SAN") && !strcmp(getenv("SAN"), "1")) SKIP("under sanitizers (llama.cpp's libraries are not instrumented)");
    ll_api L = {0};
    void *h = open_llama(&L);
    if (!h) {
        fprintf(stderr, "  cannot dlopen libllama from LLAMACPP_LIBDIR='%s' (%s); set "
                        "BRISK_NO_LLAMACPP=1 to skip\n", getenv("LLAMACPP_LIBDIR") ? getenv("LLAMACPP_LIBDIR") : "", dlerror());
        CHECK(!"llama.cpp libraries missing");
        return;
    }
    if (L.log_set) L.log_set(quiet_log, NULL);
    L.backend_init();
    size_t tlen;
    char *text = test_read_file("tests/data/multilingual.txt", &tlen);
    CHECK(text != NULL);
    for (int v = 0; text && v < N_VOCABS; v++) {
        char path[1024];
        snprintf(path, sizeof path, "%s/data/llama.cpp-vocab/ggml-vocab-%s.gguf", test_shared_dir(), k_vocabs[v]);
        ll_model_params mp = L.model_default_params();
        mp.vocab_only = true;
        void *m = L.model_load_from_file(path, mp);
        CHECK(m != NULL);
        if (!m) continue;
        tokenizer *t = load_vocab(k_vocabs[v]);
        int bad = 0, total = 0, dbad = 0, dtotal = 0;
        /* the whole text, then every line alone; parse_special off and on */
        for (int ps = 0; ps < 2 && t; ps++) {
            size_t a = 0, b = tlen;
            for (bool whole = true; a < tlen; whole = false, a = b) {
                if (!whole) {
                    b = a;
                    while (b < tlen && text[b] != '\n') b++;
                    if (b < tlen) b++;
                }
                size_t off = whole ? 0 : a, len = whole ? tlen : b - a;
                if (whole) b = 0;
                int32_t *ref = malloc((tlen + 8) * sizeof *ref);
                int32_t nr = L.tokenize(L.model_get_vocab(m), text + off, (int32_t)len, ref,
                                        (int32_t)tlen + 8, ps == 1, ps == 1);
                int64_t n;
                int32_t *got = encode(t, text + off, len, ps == 1, ps == 1, &n);
                total++;
                if (nr != n || memcmp(ref, got, (size_t)n * sizeof *got)) {
                    if (bad++ < 2) {
                        fprintf(stderr, "  %s: differs on '%.*s'\n", k_vocabs[v],
                                (int)(len > 60 ? 60 : len), text + off);
                        print_ids("llama.cpp", ref, nr);
                        print_ids("brisk    ", got, n);
                    }
                }
                free(ref), free(got);
            }
        }
        /* random strings from a palette of troublesome pieces */
        static const char *const pal[] = {
            "a", "Z", "hello", " world", "'s", "'S", "'ll", "'VE", "'x", "0", "12", "345", " ",
            "  ", "\t", "\n", "\r\n", "\r", "\v", "\f", "\xc2\x85", "\xc2\xa0", "\xe3\x80\x80",
            "\xe2\x96\x81", ".", ",", "!?", "...", "(", ")", "$", "+", "<", ">", "|", "~", "^", "`",
            "\xc3\xa9", "e\xcc\x81", "\xcc\x81", "\xe0\xa4\x95\xe0\xa5\x8d", "\xe0\xa4\xbf",
            "\xe4\xbd\xa0\xe5\xa5\xbd", "\xe3\x81\x82", "\xea\xb0\x80", "\xd9\xa3",
            "\xe2\x85\xab", "\xc2\xbd", "\xf0\x9f\x98\x80", "\xe2\x80\x8d", "\xef\xb8\x8f",
            "\xf0\x9f\x8f\xbd", "\xe2\x80\x94", "\xef\xbf\xbd", "\xff", "\xc3", "\x80",
            "\xed\xa0\x80", "\xe2\x82", "\xf0\x9f\x98", "\xc0\x80", "\x00", "\x7f", "\xe1\x9a\x80",
            "<s>", "</s>", "<unk>", "<|endoftext|>", "<|im_start|>", "<|im_end|>", "<think>",
            "<|eot_id|>", "<|begin_of_text|>", "[PAD151650]", "<|end|>", "<|assistant|>", "\xe2\x80\xa8",
            "\xd8\xa7\xd9\x84", "\xce\xa9", "\xd0\x96", "\xc3\x9f", "\xef\xac\x81", "\xe2\x84\xaa",
            "\xc5\xbf", "\xf0\x90\x90\x80", "\xf0\xaf\xa0\x80", "\xee\x80\x80", "\xf3\xa0\x80\x81"};
        uint64_t rng = 0x9E3779B97F4A7C15ull + (uint64_t)v;
        char rs[512];
        const char *nenv = getenv("BRISK_TOK_RANDOM"); /* number of random strings per vocab */
        int n_random = nenv ? atoi(nenv) : 3000;
        for (int it = 0; it < n_random && t; it++) {
            size_t rl = 0;
            rng = rng * 6364136223846793005ull + 1442695040888963407ull;
            int pieces = 1 + (int)((rng >> 33) % 24);
            for (int k = 0; k < pieces; k++) {
                rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                const char *pc = pal[(rng >> 33) % (sizeof pal / sizeof pal[0])];
                size_t pl = strlen(pc) ? strlen(pc) : 1; /* "\x00" has length 1 */
                if (rl + pl >= sizeof rs) break;
                memcpy(rs + rl, pc, pl);
                rl += pl;
            }
            bool ps = it & 1;
            int32_t ref[1600];
            int32_t nr = L.tokenize(L.model_get_vocab(m), rs, (int32_t)rl, ref, 1600, ps, ps);
            int64_t n;
            int32_t *got = encode(t, rs, rl, ps, ps, &n);
            total++;
            if (nr != n || memcmp(ref, got, (size_t)n * sizeof *got)) {
                if (bad++ < 3) {
                    fprintf(stderr, "  %s: differs on random string (parse_special %d):", k_vocabs[v], ps);
                    for (size_t k = 0; k < rl; k++) fprintf(stderr, " %02x", (unsigned char)rs[k]);
                    fprintf(stderr, "\n");
                    print_ids("llama.cpp", ref, nr);
                    print_ids("brisk    ", got, n);
                }
            }
            free(got);
            /* decoding llama.cpp's ids (every 4th time random ids instead):
             * llama_detokenize(remove_special = false, unparse_special) */
            if (it % 4 == 3) {
                nr = 1 + (int32_t)((rng >> 40) % 12);
                for (int32_t k = 0; k < nr; k++) {
                    rng = rng * 6364136223846793005ull + 1442695040888963407ull;
                    ref[k] = (int32_t)((rng >> 33) % (uint64_t)tokenizer_n_vocab(t));
                }
            }
            if (nr > 0) {
                char want[4096], *have;
                int32_t nw = L.detokenize(L.model_get_vocab(m), ref, nr, want, sizeof want, false, ps);
                size_t nh;
                size_t cap = 4096;
                have = malloc(cap);
                brisk_status st = tokenizer_decode(t, ref, nr, ps, have, cap, &nh);
                dtotal++;
                if (st != BRISK_OK || nw < 0 || (size_t)nw != nh || memcmp(want, have, nh)) {
                    if (dbad++ < 3) {
                        fprintf(stderr, "  %s: decode differs (special %d): llama.cpp %d bytes '%.*s', brisk %zu bytes '%.*s'\n",
                                k_vocabs[v], ps, nw, nw > 0 ? nw : 0, want, nh, (int)nh, have);
                    }
                }
                free(have);
            }
        }
        printf("  %-10s vs llama.cpp: encode %d/%d match, decode %d/%d match\n", k_vocabs[v],
               total - bad, total, dtotal - dbad, dtotal);
        CHECK(dbad == 0);
        CHECK(bad == 0);
        tokenizer_free(t);
        L.model_free(m);
    }
    free(text);
    dlclose(h);
}

int main(int argc, char **argv) {
    static const test_case cases[] = {
        {"vocab_vectors", test_vocab_vectors}, {"load_speed", test_load_speed},
        {"special", test_special},             {"qwen3_json", test_qwen3_json},
        {"stories260k", test_stories260k},     {"llamacpp_live", test_llamacpp_live},
    };
    return test_main(cases, sizeof cases / sizeof cases[0], argc, argv);
}
