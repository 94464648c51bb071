/* bench_repack.c — single-thread GB/s of weight data, the repacked kernels
 * (cpu_repack.h) against the plain multi-row ones (cpu_get_gemm), alternating,
 * best of REPS, on Qwen3-0.6B shapes: 3072x1024 (ffn_gate/up, L2-resident:
 * the compute limit) and 151936x1024 (LM-head-sized, DRAM-bound), nx = 1..4 and 32 (the backend's
 * token tile, a prompt's pass). Rates are weight bytes times tokens a second, so the columns of
 * all nx compare (nx = 1: plain GB/s).
 * Build: cc -O2 -Iinclude -Isrc dev/kernels/bench_repack.c build/libbrisk.a -lm -lpthread -ldl
 * Run:   ./a.out [q4_0|q8_0|q4_k|q6_k|iq4_xs]   (a type without a layout on this CPU: the plain kernel alone)
 * Times are the thread's CPU time (best of REPS): on a shared machine wall time follows the load. */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/cpu_dot.h"
#include "backend/cpu/cpu_repack.h"
#include "quant/quant.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const char *a = argc > 1 ? argv[1] : "q4_0";
    uint32_t t = !strcmp(a, "q8_0") ? QT_Q8_0 : !strcmp(a, "q4_k") ? QT_Q4_K : !strcmp(a, "q6_k") ? QT_Q6_K : !strcmp(a, "iq4_xs") ? QT_IQ4_XS : QT_Q4_0;
    cpu_dot_init();
    const int shapes[2][2] = {{3072, 1024}, {151936, 1024}};
    const quant_traits *tr = quant_get_traits(t);
    for (int sh = 0; sh < 2; sh++) {
        const int rows = shapes[sh][0], cols = shapes[sh][1];
        const size_t rs = quant_row_size(t, cols), xs = quant_row_size(tr->vec_dot_type, cols);
        const size_t rb = cpu_repack_bytes(t, cols, rows), as = cpu_repack_act_bytes(t, cols);
        if (!rb) fprintf(stderr, "no repacked layout for this type on this CPU: the plain kernel alone\n");
        uint8_t *w = malloc(rs * rows), *x = malloc(xs * 32), *wr = aligned_alloc(64, (rb + 127) & ~(size_t)63), *xa = aligned_alloc(64, as * 32);
        float *xf = malloc(sizeof(float) * cols), *s = malloc(sizeof(float) * 32 * 16);
        float *sr = malloc(sizeof(float) * (size_t)rows * 32);
        for (int r = 0; r < rows; r++) {
            for (int c = 0; c < cols; c++) xf[c] = (float)rand() / RAND_MAX - 0.5f;
            quant_quantize(t, xf, w + (size_t)r * rs, cols);
            if (r > 64) { memcpy(w + (size_t)r * rs, w + (size_t)(r % 64) * rs, rs); }
        }
        cpu_repack_weights(t, cols, rows, w, rs, wr);
        for (int j = 0; j < 32; j++) {
            for (int c = 0; c < cols; c++) xf[c] = (float)rand() / RAND_MAX - 0.5f;
            cpu_get_from_float(tr->vec_dot_type)(xf, x + (size_t)j * xs, cols);
        }
        for (int nx = 1; nx <= 32; nx = nx < 4 ? nx + 1 : nx * 8) {
            double best[2] = {1e9, 1e9};
            cpu_gemm_fn g = cpu_get_gemm(t);
            for (int rep = 0; rep < (rows > 10000 ? 6 : nx > 4 ? 8 : 40); rep++) {
                for (int v = 0; v < 2; v++) {
                    double t0 = now();
                    if (v && !rb) continue;
                    if (v) {
                        for (int j = 0; j < nx; j++) cpu_repack_act(t, cols, x + (size_t)j * xs, xa + (size_t)j * as);
                        cpu_repack_gemm(t, cols, wr, 0, rows / cpu_repack_rows(t), xa, as, nx, sr, (size_t)nx);
                    } else {
                        for (int r = 0; r < rows; r += 16) g(cols, w + (size_t)r * rs, rs, 16, x, xs, nx, s, 32);
                    }
                    double dt = now() - t0;
                    if (dt < best[v]) best[v] = dt;
                }
            }
            printf("%s %6dx%-5d nx=%-2d  plain %6.1f GB/s  repacked %6.1f GB/s\n", tr->name, rows, cols, nx,
                   rs * (double)rows * nx / best[0] / 1e9, rs * (double)rows * nx / best[1] / 1e9);
        }
        free(w), free(x), free(wr), free(xa), free(xf), free(s), free(sr);
    }
    return 0;
}
