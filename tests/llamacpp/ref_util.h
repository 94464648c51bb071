/* ref_util.h — what tests that drive build/llamacpp-ref share: running it and
 * reading back the logits it writes. Header-only (static), for tests. */
#ifndef BK_TESTS_REF_UTIL_H
#define BK_TESTS_REF_UTIL_H
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>

/* system(cmd), reporting a failure with the command line. */
static inline int ref_run(const char *cmd) {
    int rc = system(cmd);
    if (rc != 0) fprintf(stderr, "  command failed (%d): %s\n", rc, cmd);
    return rc;
}

/* Reads llamacpp-ref's logits file: int32 n_vocab, int32 n_rows, rows. NULL on a bad file. */
static inline float *ref_read_logits(const char *path, int *n_vocab, int *n_rows) {
    FILE *f = fopen(path, "rb");
    if (!f) return NULL;
    int32_t h[2];
    float *x = NULL;
    if (fread(h, 4, 2, f) == 2 && h[0] > 0 && h[1] > 0) {
        x = malloc((size_t)h[0] * h[1] * sizeof(float));
        if (x && fread(x, sizeof(float), (size_t)h[0] * h[1], f) != (size_t)h[0] * h[1]) {
            free(x);
            x = NULL;
        }
        *n_vocab = h[0];
        *n_rows = h[1];
    }
    fclose(f);
    return x;
}

static inline int ref_argmax(const float *x, int n) {
    int b = 0;
    for (int i = 1; i < n; i++)
        if (x[i] > x[b]) b = i;
    return b;
}
#endif
