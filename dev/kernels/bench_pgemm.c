/* bench_pgemm.c — single-thread rate of the packed-panel prompt GEMM (cpu_pgemm.h) of this CPU's
 * ISA, per weight type, on the 3072 x 1024 shape (ffn_gate/up of Qwen3-0.6B) against 96 tokens:
 * G row-block products a second (rows x tokens x k / 32), panel packing counted apart. Compare
 * with bench_repack.c's rates (weight bytes x tokens a second / bytes of a 32-element block).
 * Build: cc -O2 -Iinclude -Isrc dev/kernels/bench_pgemm.c build/libbrisk.a -lm -lpthread -ldl
 * Run:   ./a.out [q8_0 q4_0 q4_K q5_K q6_K iq4_xs ...] */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include "backend/cpu/cpu_dot.h"
#include "backend/cpu/cpu_pgemm.h"
#include "quant/quant.h"

static double now(void) {
    struct timespec t;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &t);
    return t.tv_sec + t.tv_nsec * 1e-9;
}

int main(int argc, char **argv) {
    const char *def[] = {"q8_0", "q4_0", "q4_K", "q5_K", "q6_K", "iq4_xs"};
    const int nt = argc > 1 ? argc - 1 : 6, rows = 3072, N = 96;
    const int64_t k = 1024;
    cpu_dot_init();
    for (int a = 0; a < nt; a++) {
        const char *nm = argc > 1 ? argv[a + 1] : def[a];
        uint32_t t = QT_COUNT;
        for (uint32_t q = 0; q < QT_COUNT; q++)
            if (quant_get_traits(q) && !strcmp(quant_get_traits(q)->name, nm)) t = q;
        const int T = t < QT_COUNT ? cpu_pgemm_tile_tokens(t) : 0;
        if (!T) { printf("%-7s no packed kernel here\n", nm); continue; }
        const uint32_t vt = quant_get_traits(t)->vec_dot_type;
        const size_t ws = quant_row_size(t, k), xs = quant_row_size(vt, k), tb = cpu_pgemm_act_bytes(t, k);
        uint8_t *w = malloc(ws * rows), *xq = malloc(xs * N), *tiles = aligned_alloc(64, (tb * (N / T + 1) + 63) / 64 * 64);
        uint8_t *panel = aligned_alloc(64, (cpu_pgemm_panel_bytes(t, k) + 63) / 64 * 64);
        float *f = malloc(sizeof(float) * k), out[CPU_PGEMM_ROWS * 16];
        srand(1);
        for (int r = 0; r < rows; r++) {
            for (int64_t i = 0; i < k; i++) f[i] = (float)rand() / RAND_MAX - 0.5f;
            quant_quantize(t, f, w + (size_t)r * ws, k);
        }
        for (int j = 0; j < N; j++) {
            for (int64_t i = 0; i < k; i++) f[i] = (float)rand() / RAND_MAX - 0.5f;
            cpu_get_from_float(vt)(f, xq + (size_t)j * xs, k);
        }
        const int ntl = N / T;
        for (int i = 0; i < ntl; i++) cpu_pgemm_pack_act(t, k, xq + (size_t)i * T * xs, xs, T, tiles + (size_t)i * tb);
        double best = 1e9, bpack = 1e9;
        for (int rep = 0; rep < 5; rep++) {
            double tp = 0, t0 = now();
            for (int r0 = 0; r0 < rows; r0 += CPU_PGEMM_ROWS) {
                double a0 = now();
                cpu_pgemm_pack_panel(t, k, w + (size_t)r0 * ws, ws, CPU_PGEMM_ROWS, panel);
                tp += now() - a0;
                for (int i = 0; i < ntl; i++) cpu_pgemm_tile(t, k, panel, tiles + (size_t)i * tb, out);
            }
            const double dt = now() - t0 - tp;
            if (dt < best) best = dt;
            if (tp < bpack) bpack = tp;
        }
        const double pairs = (double)rows * ntl * T * (k / 32);
        printf("%-7s %2d tokens a tile  %5.2f G products of 32 a second  (panel packing %.2f ms, kernels %.2f ms)\n", nm, T,
               pairs / best / 1e9, bpack * 1e3, best * 1e3);
        free(w), free(xq), free(tiles), free(panel), free(f);
    }
    return 0;
}
