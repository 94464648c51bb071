/* test.h — a tiny test harness. Each tests/test_<module>.c defines TESTS via
 * TEST(name) functions and calls test_main(); a failed CHECK prints the place
 * and marks the current test failed. Exit status 0 iff every test passed. */
#ifndef BK_TEST_H
#define BK_TEST_H
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

static int test_failed_ = 0, tests_run_ = 0, tests_bad_ = 0;

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

static inline int test_main(const test_case *cases, int n, int argc, char **argv) {
    for (int i = 0; i < n; i++) {
        if (argc > 1 && !strstr(cases[i].name, argv[1])) continue;
        test_failed_ = 0;
        cases[i].fn();
        tests_run_++;
        if (test_failed_) tests_bad_++;
        printf("%s %s\n", test_failed_ ? "FAIL" : "ok  ", cases[i].name);
        fflush(stdout);
    }
    printf("%d passed, %d failed\n", tests_run_ - tests_bad_, tests_bad_);
    return tests_bad_ ? 1 : 0;
}
#endif
