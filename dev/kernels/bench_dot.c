/* bench_dot.c — single-thread GB/s of weight data for cpu_dot kernels on a
 * 4096x4096 matrix (nx activation rows), per ISA, and ggml's vec_dot from
 * $LLAMACPP_LIBDIR/libggml-cpu-<variant>.so for comparison.
 * Build: see dev/kernels/README (cc ... bench_dot.c build/libbrisk.a -ldl -lm). */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/cpu_dot.h"
#include "quant/quant.h"

enum { ROWS = 4096, COLS = 4096 };

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

typedef void (*ggml_vd)(int, float *, size_t, const void *, size_t, const void *, size_t, int);
typedef struct { void (*from_float)(const float *, void *, int64_t); ggml_vd vec_dot; int vdt; int64_t nrows; } gtr;

int main(int argc, char **argv) {
    const int nx = argc > 1 ? atoi(argv[1]) : 1;
    const uint32_t types[] = {QT_Q4_K, QT_Q8_0, QT_BF16, QT_Q6_K, QT_Q5_K, QT_Q4_0, QT_IQ4_XS, QT_F16};
    const char *dir = getenv("LLAMACPP_LIBDIR");
    const gtr *(*gget)(int) = NULL;
    char path[1024];
    if (dir) {
        snprintf(path, sizeof path, "%s/libggml-base.so", dir);
        dlopen(path, RTLD_NOW | RTLD_GLOBAL);
        snprintf(path, sizeof path, "%s/libggml-cpu-%s.so", dir, getenv("GGML_VARIANT") ? getenv("GGML_VARIANT") : "zen4");
        void *h = dlopen(path, RTLD_NOW);
        if (h) {
            void (*init)(void) = (void (*)(void))dlsym(h, "ggml_cpu_init");
            if (init) init();
            gget = (const gtr *(*)(int))dlsym(h, "ggml_get_type_traits_cpu");
        }
    }
    cpu_dot_init();
    float *xf = malloc(sizeof(float) * COLS * nx);
    for (int i = 0; i < COLS * nx; i++) xf[i] = (float)rand() / RAND_MAX - 0.5f;
    for (size_t k = 0; k < sizeof types / sizeof types[0]; k++) {
        const uint32_t t = types[k];
        const quant_traits *tr = quant_get_traits(t);
        const size_t rs = quant_row_size(t, COLS), xs = quant_row_size(tr->vec_dot_type, COLS);
        uint8_t *w = malloc(rs * ROWS), *x = malloc(xs * nx);
        for (size_t i = 0; i < rs * ROWS; i++) w[i] = (uint8_t)rand();
        for (int r = 0; r < ROWS; r++) { /* finite scales */
            float *tmp = xf;
            if (t == QT_BF16 || t == QT_Q8_0) quant_quantize(t, tmp, w + r * rs, COLS);
            else for (int b = 0; b < COLS / tr->block_elems; b++) {
                uint16_t h = quant_f32_to_f16(0.01f);
                uint8_t *blk = w + r * rs + b * tr->block_bytes;
                int off = t == QT_Q6_K ? 208 : 0;
                memcpy(blk + off, &h, 2);
                if (t == QT_Q4_K || t == QT_Q5_K) memcpy(blk + 2, &h, 2);
            }
        }
        for (int j = 0; j < nx; j++) cpu_get_from_float(tr->vec_dot_type)(xf + j * COLS, x + j * xs, COLS);
        float *s = malloc(sizeof(float) * ROWS * nx);
        printf("%-7s", tr->name);
        for (int isa = 0; isa <= (int)cpu_dot_isa() + (gget ? 1 : 0); isa++) {
            cpu_vec_dot_fn f = isa <= (int)cpu_dot_isa() ? cpu_get_vec_dot_isa(t, (cpu_isa)isa) : NULL;
            const gtr *g = gget ? gget((int)t) : NULL;
            double best = 1e9;
            for (int rep = 0; rep < 5; rep++) {
                double t0 = now();
                for (int r = 0; r < ROWS; r++) {
                    if (f) f(COLS, w + r * rs, x, xs, nx, s + r * nx);
                    else for (int j = 0; j < nx; j++) g->vec_dot(COLS, s + r * nx + j, 0, w + r * rs, 0, x + j * xs, 0, 1);
                }
                double dt = now() - t0;
                if (dt < best) best = dt;
            }
            printf("  %s %6.1f GB/s", f ? cpu_isa_name((cpu_isa)isa) : "ggml", rs * (double)ROWS / best / 1e9);
        }
        printf("\n");
        free(w); free(x); free(s);
    }
    free(xf);
    return 0;
}
