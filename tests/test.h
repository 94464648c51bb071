/* test.h — a tiny test harness. Each tests/test_<module>.c defines TESTS via
 * TEST(name) functions and calls test_main(); a failed CHECK prints the place
 * and marks the current test failed. A test that cannot run calls SKIP or
 * SKIP_REQUIRED with its reason: it is neither passed nor failed, and its line
 * says why ("skip NAME: WHY", "[required]" appended when the cause is something
 * `make test` must have, which tests/run.sh then fails). The last line is
 * "N passed, N failed, N skipped". Exit status 0 iff no test failed. */
#ifndef BK_TEST_H
#define BK_TEST_H
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failed_ = 0, tests_run_ = 0, tests_bad_ = 0, tests_skipped_ = 0;
static int test_skip_ = 0; /* the current test: 0 ran, 1 skipped, 2 skipped for want of something required */
static char test_skip_why_[512];

/* Marks the current test skipped with a reason; the caller returns right after (SKIP and
 * SKIP_REQUIRED do). required: the cause is something `make test` must have (../shared, the
 * llama.cpp reference build, the npm clients), so tests/run.sh fails the suite over it; other
 * causes (no GPU, a sanitizer build, an explicit BRISK_NO_...=1) are counted and listed. The
 * first reason given is kept. */
static inline void test_skip(int required, const char *fmt, ...) {
    if (!test_skip_) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(test_skip_why_, sizeof test_skip_why_, fmt, ap);
        va_end(ap);
    }
    if (test_skip_ < 1 + !!required) test_skip_ = 1 + !!required;
}
#define SKIP(...)                                                                \
    do {                                                                         \
        test_skip(0, __VA_ARGS__);                                               \
        return;                                                                  \
    } while (0)
#define SKIP_REQUIRED(...)                                                       \
    do {                                                                         \
        test_skip(1, __VA_ARGS__);                                               \
        return;                                                                  \
    } while (0)

#define CHECK(cond)                                                              \
    do {                                                                         \
        if (!(cond)) {                                                           \
            fprintf(stderr, "  %s:%d: CHECK(%s) failed\n", __FILE__, __LINE__, #cond); \
            test_failed_ = 1;                                                    \
        }                                                                        \
    } while (0)
#define CHECK_OK(expr)                                                           \
    do {                                                                         \
        brisk_status s_ = (expr);                                                \
        if (s_ != BRISK_OK) {                                                    \
            fprintf(stderr, "  %s:%d: %s -> %s: %s\n", __FILE__, __LINE__, #expr,\
                    brisk_status_str(s_), brisk_last_error());                   \
            test_failed_ = 1;                                                    \
        }                                                                        \
    } while (0)
#define CHECK_NEAR(a, b, tol)                                                    \
    do {                                                                         \
        double a_ = (a), b_ = (b);                                               \
        if (!(fabs(a_ - b_) <= (tol))) {                                         \
            fprintf(stderr, "  %s:%d: %s=%g vs %s=%g (tol %g)\n", __FILE__,      \
                    __LINE__, #a, a_, #b, b_, (double)(tol));                    \
            test_failed_ = 1;                                                    \
        }                                                                        \
    } while (0)

typedef void (*test_fn)(void);
typedef struct { const char *name; test_fn fn; } test_case;

/* A whole file, NUL-terminated (*len, if set, gets its size); NULL if unreadable. Caller frees. */
static inline char *test_read_file(const char *path, size_t *len) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    fseek(f, 0, SEEK_END);
    long n = ftell(f);
    fseek(f, 0, SEEK_SET);
    char *buf = n >= 0 ? malloc((size_t)n + 1) : NULL;
    if (buf && fread(buf, 1, (size_t)n, f) != (size_t)n) {
        free(buf);
        buf = NULL;
    }
    fclose(f);
    if (buf) {
        buf[n] = 0;
        if (len) *len = (size_t)n;
    }
    return buf;
}

static inline const char *test_shared_dir(void) {
    const char *s = getenv("SHARED");
    return s ? s : "../shared";
}

/* path exists and can be read; otherwise the current test is skipped as missing something
 * required (the files under ../shared, the llama.cpp clone in .deps). */
static inline int test_need_file(const char *path) {
    FILE *f = fopen(path, "rb");
    if (f) {
        fclose(f);
        return 1;
    }
    test_skip(1, "%s not found", path);
    return 0;
}

#ifdef BRISK_H /* (a test that includes brisk.h first) */
/* Qwen2's vocabulary alone (../shared's llama.cpp ggml-vocab-qwen2.gguf: byte-level BPE, no leading
 * space added to a text); NULL, with a [required] skip, where ../shared lacks it. */
static inline brisk_model *test_qwen2_vocab(void) {
    char path[1024];
    snprintf(path, sizeof path, "%s/data/llama.cpp-vocab/ggml-vocab-qwen2.gguf", test_shared_dir());
    if (!test_need_file(path)) return NULL;
    brisk_model_params mp = brisk_model_default_params();
    mp.vocab_only = true;
    brisk_model *m = NULL;
    CHECK_OK(brisk_model_load(path, &mp, &m));
    return m;
}
#endif

/* An environment switch that turns tests off takes exactly "1"; unset, empty or "0" leaves
 * them on. Any other value fails the current test rather than guess what was meant (any
 * value, "0" included, once turned tests off). Returns 1 on, 0 off, -1 for a bad value. */
static inline int test_env_switch(const char *name) {
    const char *v = getenv(name);
    if (!v || !*v || !strcmp(v, "0")) return 0;
    if (!strcmp(v, "1")) return 1;
    fprintf(stderr, "  %s=%s: this switch takes 1 (tests off) or 0 (on)\n", name, v);
    test_failed_ = 1;
    return -1;
}

/* Every test of the program is skipped for one reason found before test_main (the switch
 * that turns them off, a reference binary missing): each still gets its skip line. */
static const char *test_skip_all_why_;
static int test_skip_all_required_;
static inline void test_skip_all(int required, const char *why) {
    test_skip_all_why_ = why;
    test_skip_all_required_ = required;
}

/* Runs the cases whose name contains argv[1] (all without it; under test_skip_all, fn may be NULL). A CHECK that failed before
 * (in main's setup, a bad switch's value) counts as one failed test, "setup". */
static inline int test_main(const test_case *cases, int n, int argc, char **argv) {
    if (test_failed_) {
        tests_run_++, tests_bad_++;
        printf("FAIL setup\n");
    }
    for (int i = 0; i < n; i++) {
        if (argc > 1 && !strstr(cases[i].name, argv[1])) continue;
        test_failed_ = 0;
        test_skip_ = 0;
        if (test_skip_all_why_) test_skip(test_skip_all_required_, "%s", test_skip_all_why_);
        else cases[i].fn();
        if (test_failed_) {
            tests_run_++, tests_bad_++;
            printf("FAIL %s\n", cases[i].name);
        } else if (test_skip_) {
            tests_skipped_++;
            printf("skip %s: %s%s\n", cases[i].name, test_skip_why_, test_skip_ == 2 ? " [required]" : "");
        } else {
            tests_run_++;
            printf("ok   %s\n", cases[i].name);
        }
        fflush(stdout);
    }
    printf("%d passed, %d failed, %d skipped\n", tests_run_ - tests_bad_, tests_bad_, tests_skipped_);
    return tests_bad_ ? 1 : 0;
}
#endif
