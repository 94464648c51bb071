/* tests/gguf_patch.h — rewrites an f32 tensor of a GGUF file in place (the speculative tests make
 * synthetic target / drafter pairs agree on some tokens and not on others). */
#ifndef BRISK_TESTS_GGUF_PATCH_H
#define BRISK_TESTS_GGUF_PATCH_H
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "format/gguf.h"
#include "quant/quant.h"
#include "test.h"

/* x[i] = f(i, ne0, x[i]) over the tensor's elements (ne0: its row length). */
typedef float (*patch_fn)(int64_t i, int64_t ne0, float x);
static inline void patch(const char *path, const char *name, patch_fn f) {
    gguf_file *g = NULL;
    CHECK_OK(gguf_open(path, &g));
    if (!g) return;
    const gguf_tensor *t = gguf_find_tensor(g, name);
    CHECK(t && t->type == QT_F32);
    if (t && t->type == QT_F32) {
        int64_t n = (int64_t)(t->nbytes / sizeof(float));
        float *x = malloc(t->nbytes);
        memcpy(x, t->data, t->nbytes);
        for (int64_t i = 0; i < n; i++) x[i] = f(i, t->ne[0], x[i]);
        FILE *fp = fopen(path, "r+b");
        CHECK(fp && fseek(fp, (long)(gguf_data_offset(g) + t->offset), SEEK_SET) == 0 &&
              fwrite(x, 1, t->nbytes, fp) == t->nbytes);
        if (fp) fclose(fp);
        free(x);
    }
    gguf_close(g);
}
#endif
