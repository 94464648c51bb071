/* bench_gemm.c — single-thread GB/s of weight data through cpu_get_gemm()
 * (the multi-row kernels the matmul tiles call: 16 weight rows x up to 32
 * activation rows per call), on the Qwen3-0.6B shapes rows x cols =
 * 1024x3072 (ffn_down), 3072x1024 (ffn_gate/up), 151936x1024 (LM head),
 * nx = 1 (decode) and nx = 32 (prefill tile), against the per-row vec_dot loop.
 * Build: cc -O2 -Iinclude -Isrc dev/kernels/bench_gemm.c build/libbrisk.a -lm -lpthread
 * Run:   ./a.out [type ...]   (types by name, default q4_K q6_K q8_0 bf16);
 *        SHAPE=0|1|2 and NX=1|32 in the environment run one case only;
 *        PAGES4K=1 puts the weights on 4 KiB pages, as an mmapped GGUF is
 *        (malloc gives the big matrix transparent huge pages). */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "backend/cpu/cpu_dot.h"
#include "quant/quant.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

static void loop_gemm(cpu_vec_dot_fn f, int64_t n, const uint8_t *w, size_t ws, int nw, const uint8_t *x,
                      size_t xs, int nx, float *s, size_t ss) {
    for (int i = 0; i < nw; i++) f(n, w + (size_t)i * ws, x, xs, nx, s + (size_t)i * ss);
}

int main(int argc, char **argv) {
    const char *names[] = {"q4_K", "q6_K", "q8_0", "bf16"};
    int nt = argc > 1 ? argc - 1 : 4;
    const int shapes[3][2] = {{1024, 3072}, {3072, 1024}, {151936, 1024}};
    cpu_dot_init();
    for (int k = 0; k < nt; k++) {
        const char *nm = argc > 1 ? argv[k + 1] : names[k];
        uint32_t t = QT_COUNT;
        for (uint32_t q = 0; q < QT_COUNT; q++)
            if (quant_get_traits(q) && !strcmp(quant_get_traits(q)->name, nm)) t = q;
        if (t == QT_COUNT) { fprintf(stderr, "unknown type %s\n", nm); continue; }
        const quant_traits *tr = quant_get_traits(t);
        const int only_sh = getenv("SHAPE") ? atoi(getenv("SHAPE")) : -1;
        const int only_nx = getenv("NX") ? atoi(getenv("NX")) : 0;
        for (int sh = 0; sh < 3; sh++) {
            if (only_sh >= 0 && sh != only_sh) continue;
            const int rows = shapes[sh][0], cols = shapes[sh][1];
            const size_t rs = quant_row_size(t, cols), xs = quant_row_size(tr->vec_dot_type, cols) + 64;
            uint8_t *w = mmap(NULL, rs * rows, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            if (w == MAP_FAILED) return 1;
            madvise(w, rs * rows, getenv("PAGES4K") && atoi(getenv("PAGES4K")) ? MADV_NOHUGEPAGE : MADV_HUGEPAGE);
            uint8_t *x = malloc(xs * 32);
            float *xf = malloc(sizeof(float) * cols), *s = malloc(sizeof(float) * 32 * 16);
            for (int r = 0; r < 64; r++) { /* 64 distinct rows, tiled over the matrix */
                for (int c = 0; c < cols; c++) xf[c] = (float)rand() / RAND_MAX - 0.5f;
                quant_quantize(t, xf, w + (size_t)r * rs, cols);
            }
            for (int r = 64; r < rows; r++) memcpy(w + (size_t)r * rs, w + (size_t)(r % 64) * rs, rs);
            for (int j = 0; j < 32; j++) {
                for (int c = 0; c < cols; c++) xf[c] = (float)rand() / RAND_MAX - 0.5f;
                cpu_get_from_float(tr->vec_dot_type)(xf, x + (size_t)j * xs, cols);
            }
            for (int nx = 1; nx <= 32; nx += 31) {
                if (only_nx && nx != only_nx) continue;
                printf("%-5s %6dx%-5d nx=%-2d", nm, rows, cols, nx);
                for (int v = 0; v < 2; v++) {
                    cpu_gemm_fn g = cpu_get_gemm(t);
                    cpu_vec_dot_fn f = cpu_get_vec_dot(t);
                    double best = 1e9;
                    const int reps = rows > 10000 ? 4 : 5;
                    for (int rep = 0; rep < reps; rep++) {
                        double t0 = now();
                        for (int r = 0; r < rows; r += 16) {
                            int nw = rows - r < 16 ? rows - r : 16;
                            if (v) g(cols, w + (size_t)r * rs, rs, nw, x, xs, nx, s, 32);
                            else loop_gemm(f, cols, w + (size_t)r * rs, rs, nw, x, xs, nx, s, 32);
                        }
                        double dt = now() - t0;
                        if (dt < best) best = dt;
                    }
                    printf("  %s %6.1f GB/s", v ? "gemm" : "rowloop", rs * (double)rows / best / 1e9);
                }
                printf("\n");
            }
            munmap(w, rs * rows); free(x); free(xf); free(s);
        }
    }
    return 0;
}
